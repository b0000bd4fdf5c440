"""Fix 125 (issue 11): the collector reads the context a launch gives from its environment too.

The collector sized its requests by the context option of the campaign's command only: a campaign that set
the context through the engine's environment (llama-server's LLAMA_ARG_CTX_SIZE, llama-cpp-python's N_CTX)
recorded no context, and its honest refusals were blamed on the engine. Now ``context_length`` reads the
variable the program reads, in the environment the engine gets (what the allow-list passes of the
collector's, the campaign's ``env``, an ``env`` launcher's items), the option winning; and the policy's
reading of the recorded launch (``ledger.answers.launched_context``) gives the same.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ledger.answers import (
    CONTEXT_ENV,
    CONTEXT_OPTIONS,
    DEFAULT_CONTEXT,
    command_program,
    launched_context,
    skip_launchers,
)
from ledger.collectors.campaign import (
    _KIND_OF_PROGRAM,
    _engine_program,
    _engine_start,
    context_length,
    load_campaign,
)
from ledger.collectors.launch import launch_env, relevant_env
from ledger.errors import ConfigError

from .conftest import ensure_engine

PY = ["{python}", "-m", "llama_cpp.server", "--model", "{model}", "--port", "{port}"]
SERVER = ["llama-server", "-m", "{model}", "--port", "{port}"]
VLLM = ["vllm", "serve", "{model}", "--port", "{port}"]
# llama-cpp-python's server's own context where nothing sets one (fix 142: the collector reads it too)
PY_DEFAULT = DEFAULT_CONTEXT["llama_cpp.server"]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.upper() in ("N_CTX", "LLAMA_ARG_CTX_SIZE"):
            monkeypatch.delenv(key)


def test_context_set_through_the_env_is_read_by_the_collector() -> None:
    assert context_length("llamacpp", SERVER, env=launch_env({"LLAMA_ARG_CTX_SIZE": "512"})) == (
        "LLAMA_ARG_CTX_SIZE",
        512,
    )
    assert context_length("llamacpp", PY, env=launch_env({"N_CTX": "128"})) == ("N_CTX", 128)
    assert context_length("llamacpp", PY, env=launch_env({"n_ctx": "128"})) == ("n_ctx", 128)
    # no environment given: only an option is read (as before)
    assert context_length("llamacpp", PY) is None


def test_context_env_of_the_other_program_is_not_read() -> None:
    """llama-cpp-python reads no LLAMA_ARG_CTX_SIZE (it serves its own default), llama-server no N_CTX."""
    assert context_length("llamacpp", PY, env=launch_env({"LLAMA_ARG_CTX_SIZE": "512"})) == PY_DEFAULT
    assert context_length("llamacpp", SERVER, env=launch_env({"N_CTX": "512"})) is None
    assert context_length("vllm", VLLM, env=launch_env({"N_CTX": "512", "LLAMA_ARG_CTX_SIZE": "512"})) is None


@pytest.mark.parametrize(
    "env", [{"LLAMA_ARG_CTX": "512"}, {"llama_arg_ctx_size": "512"}, {"CTX_SIZE": "512"}]
)
def test_context_env_var_misspelled_is_no_context(env: dict[str, str]) -> None:
    assert context_length("llamacpp", SERVER, env=launch_env(env)) is None


@pytest.mark.parametrize("value", ["abc", "0", "-5", " 512", "1k"])
def test_context_env_value_not_a_whole_number_above_zero_is_no_context(value: str) -> None:
    assert context_length("llamacpp", PY, env=launch_env({"N_CTX": value})) is None


def test_context_option_wins_over_the_env() -> None:
    env = launch_env({"N_CTX": "128", "LLAMA_ARG_CTX_SIZE": "128"})
    assert context_length("llamacpp", [*PY, "--n_ctx", "512"], env=env) == ("--n_ctx", 512)
    assert context_length("llamacpp", [*SERVER, "-c", "512"], env=env) == ("-c", 512)
    assert context_length("llamacpp", [*SERVER, "-c", "0"], env=env) is None  # the model's own: not known


def test_context_env_var_the_allow_list_does_not_pass_is_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """N_CTX in the collector's own shell never reaches the engine (``inherited_env``); LLAMA_ARG_* does."""
    monkeypatch.setenv("N_CTX", "128")
    assert context_length("llamacpp", PY, env=launch_env({})) == PY_DEFAULT  # the server's own default
    monkeypatch.setenv("LLAMA_ARG_CTX_SIZE", "256")
    assert context_length("llamacpp", SERVER, env=launch_env({})) == ("LLAMA_ARG_CTX_SIZE", 256)


def test_context_env_under_an_env_launcher() -> None:
    base = launch_env({"LLAMA_ARG_CTX_SIZE": "512"})
    assert context_length("llamacpp", ["env", "LLAMA_ARG_CTX_SIZE=256", *SERVER], env=base) == (
        "LLAMA_ARG_CTX_SIZE",
        256,
    )
    assert context_length("llamacpp", ["env", "-u", "LLAMA_ARG_CTX_SIZE", *SERVER], env=base) is None
    assert context_length("llamacpp", ["env", "-i", "PATH=/bin", *SERVER], env=base) is None


@pytest.mark.parametrize(
    ("kind", "argv", "spec_env"),
    [
        ("llamacpp", SERVER, {"LLAMA_ARG_CTX_SIZE": "512"}),
        ("llamacpp", PY, {"N_CTX": "128"}),
        ("llamacpp", PY, {"n_ctx": "128"}),
        ("llamacpp", [*PY, "--n_ctx", "64"], {"N_CTX": "128"}),
        ("llamacpp", [*SERVER, "--ctx-size=1024"], {"LLAMA_ARG_CTX_SIZE": "512"}),
        ("vllm", [*VLLM, "--max-model-len", "256"], {"N_CTX": "128"}),
        ("vllm", VLLM, {"LLAMA_ARG_CTX_SIZE": "512"}),
    ],
)
def test_collector_and_policy_read_one_context_from_a_launch(
    kind: str, argv: list[str], spec_env: dict[str, str]
) -> None:
    """What the collector sizes by is what the policy reads of the launch it records (``EngineRun``'s
    payload: the command as launched, the engine-relevant inherited variables and the campaign's ``env``)."""
    filled = [
        a.replace("{python}", "/v/bin/python").replace("{model}", "/m").replace("{port}", "1") for a in argv
    ]
    recorded = {"engine": kind, "command": filled, "env": {**relevant_env(os.environ), **spec_env}}
    assert context_length(kind, filled, env=launch_env(spec_env)) == launched_context(recorded)


# fix 133 (audit 93 f1): the collector's and the policy's context, read by one reader, on a table of commands
_PYI = ["{python}", "-I", "-W", "ignore", "-m", "llama_cpp.server", "--model", "{model}"]
_SCRIPT = ["{python}", "serve.py", "--model", "{model}"]
_UNKNOWN = ["/opt/bin/my-server", "--model", "{model}"]
_ONE_READER = [
    # (kind, argv, campaign env, the context both read; None: not known)
    ("llamacpp", PY, {"N_CTX": "128"}, ("N_CTX", 128)),
    ("llamacpp", PY, {"LLAMA_ARG_CTX_SIZE": "128"}, PY_DEFAULT),  # the failure: llama-server's variable
    ("llamacpp", PY, {"LLAMA_ARG_CTX_SIZE": "256", "n_ctx": "128"}, ("n_ctx", 128)),
    ("llamacpp", [*PY, "--n_ctx", "64"], {"N_CTX": "128"}, ("--n_ctx", 64)),
    ("llamacpp", [*PY, "--ctx-size", "64"], {}, PY_DEFAULT),  # llama-server's option: not llama-cpp-python's
    ("llamacpp", SERVER, {"LLAMA_ARG_CTX_SIZE": "512"}, ("LLAMA_ARG_CTX_SIZE", 512)),
    ("llamacpp", SERVER, {"N_CTX": "512"}, None),
    ("llamacpp", [*SERVER, "-c", "256"], {"N_CTX": "512"}, ("-c", 256)),
    ("llamacpp", [*SERVER, "--n_ctx", "256"], {}, None),
    ("vllm", [*VLLM, "--max-model-len", "256"], {"N_CTX": "128"}, ("--max-model-len", 256)),
    ("vllm", VLLM, {"LLAMA_ARG_CTX_SIZE": "512", "N_CTX": "512"}, None),
    ("llamacpp", _PYI, {"N_CTX": "128"}, ("N_CTX", 128)),  # interpreter options before -m
    ("llamacpp", _PYI, {"LLAMA_ARG_CTX_SIZE": "128"}, PY_DEFAULT),
    ("llamacpp", ["{python}", "-Im", *PY[2:]], {"N_CTX": "128"}, ("N_CTX", 128)),
    ("llamacpp", _SCRIPT, {"N_CTX": "128", "LLAMA_ARG_CTX_SIZE": "128"}, None),  # cannot be told
    ("llamacpp", [*_SCRIPT, "--n_ctx", "64"], {}, ("--n_ctx", 64)),  # an option of the kind's programs
    ("llamacpp", _UNKNOWN, {"N_CTX": "128"}, None),
    ("llamacpp", _UNKNOWN, {"LLAMA_ARG_CTX_SIZE": "128"}, None),
    ("generic", [*_UNKNOWN, "--ctx-size", "64"], {"N_CTX": "128"}, None),
]


@pytest.mark.parametrize(("kind", "argv", "spec_env", "both"), _ONE_READER)
def test_collector_and_policy_context_agree_on_the_program_the_command_runs(
    kind: str, argv: list[str], spec_env: dict[str, str], both: tuple[str, int] | None
) -> None:
    """The failure: the collector read the variables of the program the command runs, the policy every
    program's of the kind — ``python -m llama_cpp.server`` with LLAMA_ARG_CTX_SIZE was 128 to the policy."""
    filled = [
        a.replace("{python}", "/v/bin/python").replace("{model}", "/m").replace("{port}", "1") for a in argv
    ]
    recorded = {"engine": kind, "command": filled, "env": {**relevant_env(os.environ), **spec_env}}
    assert context_length(kind, filled, env=launch_env(spec_env)) == both
    assert context_length(kind, argv, env=launch_env(spec_env)) == both  # placeholders as written
    assert launched_context(recorded) == both


@pytest.mark.parametrize(
    ("argv", "spec_env", "collector"),
    [
        (["env", "N_CTX=256", *PY], {}, ("N_CTX", 256)),
        (["env", "LLAMA_ARG_CTX_SIZE=256", *PY], {}, PY_DEFAULT),  # the other program's, under a launcher too
        (["taskset", "-c", "0", *PY], {"N_CTX": "128"}, ("N_CTX", 128)),
        (["taskset", "-c", "0", *PY], {"LLAMA_ARG_CTX_SIZE": "128"}, PY_DEFAULT),
        (["nice", "-n", "5", *SERVER, "-c", "64"], {}, ("-c", 64)),
    ],
)
def test_context_under_a_launcher_is_the_collectors_to_the_policy(
    argv: list[str], spec_env: dict[str, str], collector: tuple[str, int] | None
) -> None:
    """The policy reads the launchers by the collector's reader (``ledger.answers.skip_launchers``, fix
    136), an ``env`` launcher's items applied to the recorded environment: where the collector reads a
    context through one, the policy's is the same."""
    filled = [
        a.replace("{python}", "/v/bin/python").replace("{model}", "/m").replace("{port}", "1") for a in argv
    ]
    recorded = {"engine": "llamacpp", "command": filled, "env": {**relevant_env(os.environ), **spec_env}}
    assert context_length("llamacpp", filled, env=launch_env(spec_env)) == collector
    assert launched_context(recorded) == collector


@pytest.mark.parametrize(
    "argv",
    [
        PY,
        SERVER,
        VLLM,
        _PYI,
        _SCRIPT,
        _UNKNOWN,
        ["{python}", "-Im", "llama_cpp.server"],
        ["{python}", "-mllama_cpp.server", "--model", "x"],
        ["/v/python3.11", "-X", "dev", "-c", "code", "-m", "x"],
        ["/v/python", "--check-hash-based-pycs", "always", "-m", "vllm.entrypoints.openai.api_server"],
        ["/v/python", "-Z", "-m", "llama_cpp.server"],
        ["/v/python", "-"],
        ["/v/python"],
        ["env", "A=1", *PY],
        ["taskset", "-c", "0", "nice", *SERVER],
        [],
    ],
)
def test_program_the_context_reader_tells_is_the_collectors(argv: list[str]) -> None:
    """One reading of the program (until the collector's ``_engine_program`` calls
    ``ledger.answers.command_program``): the program and where its arguments begin agree."""
    start = skip_launchers(argv).program
    program, args = command_program(argv[start:])
    assert program == _engine_program(argv)
    assert start + args == _engine_start(argv) or (start >= len(argv) and args == 0)


def test_context_env_vocabulary_is_the_collectors_programs() -> None:
    """One vocabulary: each program CONTEXT_ENV names is one CONTEXT_OPTIONS knows, of the kind it is
    listed under in the collector's program table."""
    for kind, programs in CONTEXT_ENV.items():
        for program in programs:
            assert program in CONTEXT_OPTIONS
            assert _KIND_OF_PROGRAM[program] == kind


# ---------------------------------------------------------------- load: _check_context reads the env too
def _campaign(tmp_path: Path, env: dict[str, str]) -> Path:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + b"\0" * 64)
    command = [*PY[:4], "{model}", "--model_alias", "{served_name}", "--host", "{host}", "--port", "{port}"]
    p = tmp_path / "c.toml"
    env_toml = "".join(f"{k} = {json.dumps(v)}\n" for k, v in env.items())
    p.write_text(
        f'[campaign]\nid = "c"\n[model]\npath = "{model}"\nserved_name = "tiny"\n'
        f'[engine]\nkind = "llamacpp"\ncommand = {json.dumps(command)}\n[engine.env]\n{env_toml}',
        encoding="utf-8",
    )
    return p


def test_probe_max_tokens_reaching_the_env_context_is_refused_at_load(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"N_CTX 64"):
        load_campaign(_campaign(tmp_path, {"N_CTX": "64"}))  # [gates.structured] max_tokens 64 by default
    load_campaign(_campaign(tmp_path, {"N_CTX": "65"}))
    load_campaign(_campaign(tmp_path, {"LLAMA_ARG_CTX_SIZE": "16"}))  # not llama-cpp-python's


# ---------------------------------------------------------------- the engine's own precedence
def _settings_n_ctx(python: str, args: list[str], env: dict[str, str]) -> Any:
    code = (
        "import sys, argparse\n"
        "from llama_cpp.server.settings import Settings, ModelSettings\n"
        "from llama_cpp.server.cli import add_args_from_model, parse_model_from_args\n"
        "p = argparse.ArgumentParser(); add_args_from_model(p, Settings)\n"
        "print(parse_model_from_args(ModelSettings, p.parse_args(sys.argv[1:])).n_ctx)\n"
    )
    clean = {k: v for k, v in os.environ.items() if k.upper() != "N_CTX"}
    r = subprocess.run(
        [python, "-c", code, "--model", "/m.gguf", *args],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return int(r.stdout.strip()) if r.returncode == 0 else None


def test_llama_cpp_pythons_own_settings_read_the_context_as_the_collector_does() -> None:
    """llama-cpp-python 0.3.36's server settings: N_CTX in any case where no --n_ctx is given, the option
    winning over it, and a value that is no whole number refused (the engine does not start)."""
    python = ensure_engine("llamacpp")["LLAMACPP_PYTHON"]
    for args, env in [([], {"N_CTX": "128"}), ([], {"n_ctx": "128"}), (["--n_ctx", "64"], {"N_CTX": "128"})]:
        ours = context_length("llamacpp", [*PY, *args], env=launch_env(env))
        assert ours is not None and _settings_n_ctx(python, args, env) == ours[1]
    assert _settings_n_ctx(python, [], {"N_CTX": "abc"}) is None
    assert context_length("llamacpp", PY, env=launch_env({"N_CTX": "abc"})) is None
