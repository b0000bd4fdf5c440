"""Fix 136 (issue 11): the policy reads a launch's context past its launchers, by the collector's one reader.

1. ``ledger.answers.launched_context`` read no context variable when the recorded command had a launcher in
   front of the engine (``taskset -c 0 llama-server …`` with LLAMA_ARG_CTX_SIZE, ``nice -n 5 python -m
   llama_cpp.server`` with N_CTX), nor through an ``env`` launcher, although the collector read it: the
   collector recorded the honest context refusal (llama-cpp-python's HTTP 500 under a small N_CTX), and the
   policy blamed it on the engine — NOT QUALIFIED — RUNTIME RELIABILITY (checked on the real engine too:
   the verdict of a ``nice -n 5`` run with N_CTX 128). Now the launcher reader (``LAUNCHERS``,
   ``skip_launchers``, an ``env`` launcher's NAME=VALUE / -u / -i) lives in ``ledger.answers`` alone, the
   collector imports it, and ``launched_context`` reads past the launchers, an ``env`` launcher's settings
   applied to the recorded environment as the collector applies them.
2. Where neither an option nor a variable gives llama-cpp-python's server its context, it serves its own
   default (``ModelSettings.n_ctx``, 2048 in 0.3.36), unless a settings file is named (``--config_file``,
   ``CONFIG_FILE``): the policy now knows it (``DEFAULT_CONTEXT``) and holds a refusal's stated window to it.
   llama-server's default (the model's own, or 4096, by build) is not known from the record: none.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

import ledger.collectors.campaign as campaign
from ledger import answers
from ledger.answers import (
    DEFAULT_CONTEXT,
    LAUNCHERS,
    REFUSAL_CONTEXT,
    context_record,
    launched_context,
    refusal,
    skip_launchers,
)
from tests.policy.test_fail_closed import counted_against, entry, gates, rejected
from tests.policy.test_harness_context_refusal import qualified_entries, verdict_of

PY = ["/venv/bin/python", "-m", "llama_cpp.server", "--model", "/m.gguf", "--port", "8080"]
SERVER = ["llama-server", "-m", "/m.gguf", "--port", "8080"]
VLLM = ["vllm", "serve", "/m", "--port", "8080"]
PY_DEFAULT = DEFAULT_CONTEXT["llama_cpp.server"]
BROADCAST = "HTTP 500: could not broadcast input array from shape (259,) into shape (0,)"
PARAMS: dict[str, Any] = {
    "refused_http_statuses": [401, 403],
    "context_refused_http_statuses": [400],
    "context_refusal_patterns": ["maximum context length is [0-9]+ tokens"],
}


def _launch(command: list[str], env: Any, engine: str = "llamacpp") -> dict[str, Any]:
    return {"engine": engine, "command": command, "env": env}


# ------------------------------------------------------------------ 1. the launchers, read by one reader

N_CTX = {"N_CTX": "128"}
LLAMA = {"LLAMA_ARG_CTX_SIZE": "512"}
BOTH = {"N_CTX": "128", "LLAMA_ARG_CTX_SIZE": "512"}


@pytest.mark.parametrize(
    ("command", "env", "given"),
    [
        # the failure: the variable under a launcher that only hides the program
        (["taskset", "-c", "0", *PY], N_CTX, ("N_CTX", 128)),
        (["taskset", "-c", "0", *SERVER], LLAMA, ("LLAMA_ARG_CTX_SIZE", 512)),
        (["nice", "-n", "5", *PY], N_CTX, ("N_CTX", 128)),
        (["nice", "-n5", *SERVER], LLAMA, ("LLAMA_ARG_CTX_SIZE", 512)),
        (["nice", "-10", *PY], {"n_ctx": "64"}, ("n_ctx", 64)),  # nice's old form; any case
        (["numactl", "--cpunodebind=0", *PY], N_CTX, ("N_CTX", 128)),
        (["numactl", "--cpunodebind", "0", "--membind=0", *SERVER], LLAMA, ("LLAMA_ARG_CTX_SIZE", 512)),
        (["/usr/bin/taskset", "0x1", *PY], N_CTX, ("N_CTX", 128)),  # by basename; the mask operand
        (["chrt", "-r", "10", *PY], N_CTX, ("N_CTX", 128)),
        (["stdbuf", "-oL", "nohup", *PY], N_CTX, ("N_CTX", 128)),
        (["ionice", "-c", "3", *SERVER], LLAMA, ("LLAMA_ARG_CTX_SIZE", 512)),
        # each program still reads only its own variable, under a launcher too
        (["taskset", "-c", "0", *PY], LLAMA, PY_DEFAULT),
        (["taskset", "-c", "0", *SERVER], N_CTX, None),
        (["nice", "-n", "5", *PY], BOTH, ("N_CTX", 128)),
        # an option under a launcher wins over the variable, as without one
        (["nice", "-n", "5", *SERVER, "-c", "256"], LLAMA, ("-c", 256)),
        (["nice", "-n", "5", *PY, "--n_ctx", "0"], N_CTX, None),  # written, read otherwise: not known
        # an env launcher's settings, applied to the recorded env as the collector applies them
        (["env", "N_CTX=64", *PY], N_CTX, ("N_CTX", 64)),  # its item wins over the inherited one
        (["env", "N_CTX=64", *PY], {}, ("N_CTX", 64)),
        (["env", "-u", "N_CTX", *PY], N_CTX, PY_DEFAULT),  # unset: the server's own default
        (["env", "--unset=N_CTX", *PY], N_CTX, PY_DEFAULT),
        (["env", "-uN_CTX", *PY], N_CTX, PY_DEFAULT),
        (["env", "-u", "LLAMA_ARG_CTX_SIZE", *SERVER], LLAMA, None),  # llama-server: no default known
        (["env", "-u", "N_CTX", "N_CTX=32", *PY], N_CTX, ("N_CTX", 32)),  # -u first, then the items
        (["env", "-i", *PY], N_CTX, PY_DEFAULT),  # cleared
        (["env", "-", *SERVER], LLAMA, None),
        (
            ["env", "--ignore-environment", "LLAMA_ARG_CTX_SIZE=64", *SERVER],
            LLAMA,
            ("LLAMA_ARG_CTX_SIZE", 64),
        ),
        (["env", "-i", "N_CTX=32", *PY], {}, ("N_CTX", 32)),
        (["env", "LLAMA_ARG_CTX_SIZE=64", *PY], N_CTX, ("N_CTX", 128)),  # the other program's: ignored
        # launchers chained: each acts on what the one before passes on
        (["taskset", "-c", "0", "nice", "-n", "5", "env", "N_CTX=64", *PY], N_CTX, ("N_CTX", 64)),
        (["env", "N_CTX=32", "env", "-u", "N_CTX", *PY], N_CTX, PY_DEFAULT),  # a later unset removes it
        (["env", "-u", "N_CTX", "nice", "env", "N_CTX=16", *PY], N_CTX, ("N_CTX", 16)),
        (["env", "N_CTX=32", "env", "-i", *SERVER], LLAMA, None),
        (
            ["nice", "env", "LLAMA_ARG_CTX_SIZE=64", "taskset", "-c", "1", *SERVER],
            {},
            ("LLAMA_ARG_CTX_SIZE", 64),
        ),
    ],
)
def test_context_under_launchers_is_read_as_the_collector_reads_it(
    command: list[str], env: dict[str, str], given: tuple[str, int] | None
) -> None:
    assert launched_context(_launch(command, env)) == given


@pytest.mark.parametrize(
    "command",
    [
        ["sudo", *PY],  # a launcher the reader does not know: the program is not told
        ["doas", "-u", "llm", *SERVER],
        ["sh", "-c", " ".join(PY)],
        ["taskset", "--weird", "0", *PY],  # an option the reader does not know
        ["taskset", "-p", "0", *PY],  # runs no engine
        ["numactl", "--show", *PY],
        ["env", "-C", "/srv", *PY],  # starts the engine elsewhere
        ["env", "-S", " ".join(PY)],  # splits a text into the command
        ["nice", "-n", "5"],  # starts no program
        ["env", "N_CTX=64"],
        ["taskset", "-c", "0", "nice", "--bogus", *PY],  # a chained launcher's unknown option
    ],
)
def test_context_under_a_launcher_the_reader_does_not_know_is_not_known(command: list[str]) -> None:
    assert launched_context(_launch(command, BOTH)) is None
    assert launched_context(_launch(command, {})) is None  # nor the server's default


@pytest.mark.parametrize("env", [None, ["N_CTX=128"], {"N_CTX": 128}, "N_CTX=128"])
def test_recorded_env_missing_or_mistyped_under_a_launcher_gives_no_variable_and_no_default(env: Any) -> None:
    """The environment the engine got cannot be known from the record: only an option counts — even under
    ``env -i`` (the record is not whole)."""
    for command in (
        ["nice", "-n", "5", *PY],
        ["env", "-i", "N_CTX=64", *PY],
        ["taskset", "-c", "0", *SERVER],
    ):
        launch = _launch(command, env)
        if env is None:
            del launch["env"]
        assert launched_context(launch) is None
    launch = _launch(["nice", "-n", "5", *PY, "--n_ctx", "96"], env)
    assert launched_context(launch) == ("--n_ctx", 96)


def test_launcher_reader_is_one_copy_the_collector_imports() -> None:
    """One vocabulary: the collector reads its campaigns' launchers by ``ledger.answers``' reader; no copy,
    no alias of the old names is left behind."""
    names = vars(campaign)
    assert names["skip_launchers"] is answers.skip_launchers
    assert names["LAUNCHERS"] is answers.LAUNCHERS
    assert names["Launch"] is answers.Launch
    for old in ("_skip_launchers", "_LAUNCHERS", "_Launch", "_Launcher", "_launcher_options", "_ENV_CLEARS"):
        assert not hasattr(campaign, old), old
    assert set(LAUNCHERS) == {"env", "taskset", "numactl", "nice", "chrt", "stdbuf", "ionice", "nohup"}


@pytest.mark.parametrize(
    "argv",
    [
        ["taskset", "-c", "0", "{python}", "-m", "llama_cpp.server"],
        ["env", "-u", "A", "B=1", "nice", "-n", "5", "llama-server", "-m", "x"],
        ["env", "-i", "A=1", "env", "-u", "A", "vllm", "serve", "x"],
        ["numactl", "--bogus", "vllm"],
        ["nice"],
        ["{python}", "-m", "llama_cpp.server"],
    ],
)
def test_collector_and_policy_read_the_same_launch(argv: list[str]) -> None:
    """The collector passes its placeholder filler; a command without placeholders in front reads alike."""
    theirs = skip_launchers(argv, campaign._program_name)
    ours = skip_launchers(argv)
    assert theirs == ours


def test_collector_fills_a_placeholder_naming_the_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FIX136_LAUNCHER", "/usr/bin/nice")
    argv = ["${FIX136_LAUNCHER}", "-n", "5", *PY]
    assert skip_launchers(argv, campaign._program_name).program == 3
    assert skip_launchers(argv).program == 0  # a recorded command is filled already: not a launcher


# ------------------------------------------------------------------ 2. llama-cpp-python's own default


@pytest.mark.parametrize(
    ("command", "env", "given"),
    [
        (PY, {}, PY_DEFAULT),
        (PY, {"LLAMA_ARG_CTX_SIZE": "128"}, PY_DEFAULT),  # the other program's variable
        (PY, {"N_CTXS": "128"}, PY_DEFAULT),  # misspelled: not read
        (["/v/python3", "-I", "-m", "llama_cpp.server", "--model", "/m"], {}, PY_DEFAULT),
        # a settings file names the context instead: its defaults are the file's
        ([*PY, "--config_file", "/c.json"], {}, None),
        ([*PY, "--config_file=/c.json"], {}, None),
        ([*PY, "--config", "/c.json"], {}, None),  # a prefix argparse takes
        ([*PY, "--co=/c.json"], {}, None),
        (PY, {"CONFIG_FILE": "/c.json"}, None),  # the variable, read as written
        (PY, {"CONFIG_FILE": ""}, None),  # set to anything: fail closed
        (PY, {"config_file": "/c.json"}, PY_DEFAULT),  # another case: os.environ.get does not read it
        (["env", "CONFIG_FILE=/c.json", *PY], {}, None),
        # a context option or variable written but read otherwise: the default is not the engine's
        ([*PY, "--n_ctx", "0"], {}, None),  # the model's own
        ([*PY, "--n_ctx"], {}, None),  # no value
        ([*PY, "--n_c=abc"], {}, None),
        (PY, {"N_CTX": "0"}, None),
        (PY, {"n_ctx": "abc"}, None),
        (PY, {"N_CTX": "128", "n_ctx": "256"}, None),  # two that differ
        # no default known: another program, or the program not told
        (SERVER, {}, None),
        (VLLM, {}, None),
        (["/venv/bin/python", "serve.py", "--model", "/m"], {}, None),
        (["/venv/bin/python", "-m", "llama_cpp.serverx"], {}, None),
    ],
)
def test_llama_cpp_python_default_context_where_nothing_sets_it(
    command: list[str], env: dict[str, str], given: tuple[str, int] | None
) -> None:
    assert launched_context(_launch(command, env)) == given


@pytest.mark.parametrize("engine", ["vllm", "sglang", "generic"])
def test_default_context_is_only_the_launch_kinds_program(engine: str) -> None:
    assert launched_context(_launch(PY, {}, engine)) is None


def test_default_context_needs_the_recorded_env() -> None:
    launch = _launch(PY, None)
    del launch["env"]
    assert launched_context(launch) is None  # N_CTX may have been set: not known


def test_refusal_stating_another_window_than_the_default_is_the_engines() -> None:
    """A 400 "maximum context length is N tokens" from a server launched with its default context: the
    window it states is held to 2048 (before, nothing held it: the pattern alone excused it)."""
    probe = {"check": "completion", "http_status": 400, "error": "maximum context length is 4096 tokens"}
    launched = launched_context(_launch(PY, {}))
    assert launched == ("--n_ctx (default)", 2048)
    assert refusal(probe, PARAMS, launched=launched) is None
    assert refusal(
        {**probe, "error": "maximum context length is 2048 tokens"}, PARAMS, launched=launched
    ) == (REFUSAL_CONTEXT)
    # a record claiming another context than the default is not the launch's
    sized = {**probe, "http_status": 500, "error": BROADCAST, "max_tokens": 64}
    sized["details"] = {"context": context_record("N_CTX", 128, 111)}
    assert refusal(sized, PARAMS, launched=launched) is None


def test_default_context_is_llama_cpp_pythons_own() -> None:
    """The installed engine (scripts/engines.sh: llama-cpp-python 0.3.36): its server's settings give
    n_ctx 2048 where neither --n_ctx nor N_CTX is given, and its parser takes ``--config`` for
    ``--config_file``."""
    from tests.collectors.conftest import ensure_engine

    python = ensure_engine("llamacpp")["LLAMACPP_PYTHON"]
    code = (
        "import argparse\n"
        "from llama_cpp.server.settings import Settings, ModelSettings\n"
        "from llama_cpp.server.cli import add_args_from_model, parse_model_from_args\n"
        "p = argparse.ArgumentParser(); add_args_from_model(p, Settings)\n"
        "p.add_argument('--config_file', type=str)\n"
        "a = p.parse_args(['--model', '/m', '--config', '/c.json'])\n"
        "print(parse_model_from_args(ModelSettings, a).n_ctx, a.config_file)\n"
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(Path.home())}
    r = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=True)
    assert r.stdout.split() == [str(PY_DEFAULT[1]), "/c.json"]


# ------------------------------------------------------------------ 3. the verdict, through the refusal path


def _refused(command: list[str], env: Any) -> list[dict[str, Any]]:
    """The llamacpp campaign whose structured probe llama-cpp-python answered HTTP 500 at 111 + 64 tokens
    under N_CTX 128, as the collector records it (its context read past the launchers)."""
    es = qualified_entries()
    launch = entry(es, "launch")["payload"]
    launch["command"] = command
    if env is not None:
        launch["env"] = env
    p = entry(es, "structured")["payload"]
    p.update(ok=False, http_status=500, error=BROADCAST, text=None, finish_reason=None, max_tokens=64)
    p["details"]["context"] = context_record("N_CTX", 128, 111)
    return es


LAUNCHED = ["/venv/bin/python", "-m", "llama_cpp.server", "--model", "/models/m"]


@pytest.mark.parametrize(
    ("command", "env"),
    [
        (["nice", "-n", "5", *LAUNCHED], N_CTX),
        (["taskset", "-c", "0", *LAUNCHED], N_CTX),
        (["numactl", "--cpunodebind=0", *LAUNCHED], N_CTX),
        (["env", "N_CTX=128", *LAUNCHED], {}),
        (["taskset", "-c", "0", "env", "-u", "LLAMA_ARG_CTX_SIZE", "N_CTX=128", *LAUNCHED], {}),
        (LAUNCHED, N_CTX),  # the neighbour without a launcher: as before
    ],
)
def test_context_refusal_under_a_launcher_is_the_campaigns_not_the_engines(
    tmp_path: Path, command: list[str], env: dict[str, str]
) -> None:
    """The failure: under ``nice -n 5`` (or any launcher) the same refusal was NOT QUALIFIED — RUNTIME
    RELIABILITY (runtime-stability failed on the structured probe's HTTP 500)."""
    v = verdict_of(tmp_path, _refused(command, env))
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert rejected(v)["structured"] == "engine-refused-probe"
    assert "structured" not in counted_against(v)
    assert gates(v)["runtime-stability"] == "passed"
    assert gates(v)["structured-output"] == "missing"


@pytest.mark.parametrize(
    ("command", "env"),
    [
        (["nice", "-n", "5", *LAUNCHED], {"N_CTX": "4096"}),  # the launch gives another context
        (["nice", "-n", "5", *LAUNCHED], {}),  # the launch gives none: the server's 2048
        (["env", "-u", "N_CTX", *LAUNCHED], N_CTX),  # unset in front of the engine: its 2048
        (["env", "N_CTX=4096", *LAUNCHED], N_CTX),  # set otherwise in front of the engine
        (["sudo", *LAUNCHED], N_CTX),  # a launcher the reader does not know
        (["taskset", "--bogus", *LAUNCHED], N_CTX),  # an option it does not know
        (["nice", "-n", "5", *LAUNCHED], None),  # the recorded env dropped
        (["nice", "-n", "5", *LAUNCHED], {"NCTX": "128"}),  # renamed
        (["nice", "-n", "5", *LAUNCHED], {"LLAMA_ARG_CTX_SIZE": "128"}),  # the other program's
    ],
)
def test_context_refusal_the_launch_does_not_show_stays_the_engines(
    tmp_path: Path, command: list[str], env: Any
) -> None:
    v = verdict_of(tmp_path, _refused(command, env))
    assert v["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY", v["gates"]
    assert gates(v)["runtime-stability"] == "failed"
    assert rejected(v).get("structured") != "engine-refused-probe"
