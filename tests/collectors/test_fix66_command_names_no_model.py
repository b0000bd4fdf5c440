"""Fix 66: an attempt whose command names no model at all is refused for the engine kinds the collector reads.

The model check held every model option, positional model and model variable an attempt gives to the
pinned [model] path, but an attempt that gave none passed: vLLM then serves its default hub model (fetched,
not the pin), llama-server loads its default path, llama-cpp-python its ``MODEL`` setting. The job pins
[model] path and would qualify what the engine picked. For every kind but ``generic``, an attempt's argv as
launched (command then extra_args, launchers read past) must name the model: a model option of the kind, the
positional model of ``vllm serve``, or (llamacpp) a model variable of the engine's environment.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledger.collectors.campaign import load_campaign
from ledger.errors import ConfigError, InputError

SERVE = ["vllm", "serve"]
API_SERVER = ["{python}", "-m", "vllm.entrypoints.openai.api_server"]
LLAMA_SERVER = ["llama-server"]
LLAMA_CPP_PYTHON = ["{python}", "-m", "llama_cpp.server"]
SGLANG = ["{python}", "-m", "sglang.launch_server"]
PORT = ["--port", "{port}"]


# fix 88: a known engine program told no served name serves its model under its default id (its model
# argument; llama-server's differs between builds), which is refused at load; these campaigns judge the
# model check, so each command names the served model in its program's own spelling, right after the
# program (vLLM's at the end: its positional model stays first)
def _naming_served(command: list[str], kind: str) -> list[str]:
    for i, item in enumerate(command):
        for program, alias in (
            ("llama_cpp.server", "--model_alias"),
            ("llama-server", "--alias"),
            ("sglang.launch_server", "--served-model-name"),
        ):
            if item.endswith(program):
                return [*command[: i + 1], alias, "{served_name}", *command[i + 1 :]]
    if kind == "vllm":
        return [*command, "--served-model-name", "{served_name}"]
    return command


def _campaign(
    tmp_path: Path,
    command: list[str],
    *,
    kind: str,
    env: dict[str, str] | None = None,
    attempts: list[dict[str, object]] | None = None,
) -> Path:
    model = tmp_path / "models" / "pinned"
    model.mkdir(parents=True, exist_ok=True)
    (model / "config.json").write_text("{}")
    # vLLM serves its model argument where no --served-model-name is given (fix 88): that is served_name
    served = str(model) if kind == "vllm" else "tiny"
    command = command if kind == "vllm" else _naming_served(command, kind)
    text = (
        f'[campaign]\nid = "c"\n[model]\npath = "{model}"\nserved_name = {json.dumps(served)}\n'
        f'[engine]\nkind = "{kind}"\ncommand = {json.dumps(command)}\n'
    )
    if env:
        text += "env = { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items()) + " }\n"
    for a in attempts or [{"name": "default"}]:
        text += f'[[engine.attempts]]\nname = "{a["name"]}"\n'
        if "extra_args" in a:
            text += f"extra_args = {json.dumps(a['extra_args'])}\n"
        if "env" in a:
            attempt_env = a["env"]
            assert isinstance(attempt_env, dict)
            text += "env = { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in attempt_env.items()) + " }\n"
    p = tmp_path / "c.toml"
    p.write_text(text)
    return p


def _refused(p: Path, *words: str) -> str:
    with pytest.raises(ConfigError) as e:
        load_campaign(p)
    assert isinstance(e.value, InputError) and e.value.code == "bad-config"
    msg = e.value.message
    for w in ("names no model", *words):
        assert w in msg, msg
    return msg


def test_a_vllm_command_naming_no_model_is_refused(tmp_path: Path) -> None:
    """``vllm serve`` with no model serves vLLM's default hub model: the pin would qualify another."""
    msg = _refused(
        _campaign(tmp_path, [*SERVE, *PORT], kind="vllm"), "attempt 'default'", "write --model {model}"
    )
    assert "no positional model of `vllm serve`" in msg and str(tmp_path / "models" / "pinned") in msg


def test_a_vllm_api_server_naming_no_model_is_refused(tmp_path: Path) -> None:
    _refused(
        _campaign(tmp_path, [*API_SERVER, *PORT], kind="vllm"), "no --model option", "write --model {model}"
    )


def test_a_vllm_api_server_with_only_a_positional_model_is_refused(tmp_path: Path) -> None:
    """The api_server takes a positional model and ignores it (vLLM then loads its default model)."""
    msg = _refused(_campaign(tmp_path, [*API_SERVER, "{model}", *PORT], kind="vllm"))
    assert "the api_server ignores" in msg, msg


@pytest.mark.parametrize(
    "command",
    [
        [*SERVE, "{model}", *PORT],
        [*SERVE, *PORT, "--model", "{model}"],
        [*SERVE, "--model={model}"],
        [*API_SERVER, "--model", "{model}", *PORT],
        ["{python}", "-m", "vllm.entrypoints.cli.main", "serve", "{model}"],
    ],
    ids=["serve-positional", "serve-option", "equals-form", "api-server-option", "cli-module-positional"],
)
def test_a_vllm_command_naming_the_model_loads(tmp_path: Path, command: list[str]) -> None:
    assert load_campaign(_campaign(tmp_path, command, kind="vllm")).spec.engine.kind == "vllm"


@pytest.mark.parametrize(
    ("kind", "command", "options"),
    [
        # each program of kind llamacpp in its own spellings (fix 72)
        ("llamacpp", [*LLAMA_SERVER, *PORT], "no -m / --model option; no LLAMA_ARG_MODEL in the engine's"),
        ("llamacpp", [*LLAMA_CPP_PYTHON, *PORT], "no --model option; no MODEL in the engine's environment"),
        ("sglang", [*SGLANG, *PORT], "no --model-path / --model option"),
    ],
    ids=["llama-server", "llama-cpp-python", "sglang"],
)
def test_a_command_naming_no_model_is_refused_for_each_known_kind(
    tmp_path: Path, kind: str, command: list[str], options: str
) -> None:
    _refused(_campaign(tmp_path, command, kind=kind), options, "attempt 'default'", "write --model {model}")


@pytest.mark.parametrize(
    ("kind", "command"),
    [
        # the python interpreter's -m is not llama-server's -m: it names no model
        ("llamacpp", ["{python}", "-m", "llama_cpp.server"]),
        # spellings that are not the kind's model option (renamed, a prefix argparse would refuse)
        ("llamacpp", [*LLAMA_CPP_PYTHON, "--model-path", "{model}"]),
        ("llamacpp", [*LLAMA_CPP_PYTHON, "--mod", "{model}"]),
        ("vllm", [*SERVE, "--model-path", "{model}"]),
        ("vllm", [*SERVE, "--mode", "{model}"]),
        ("sglang", [*SGLANG, "-m", "{model}"]),
        ("sglang", [*SGLANG, "--model-name", "{model}"]),
    ],
    ids=[
        "python-m-only",
        "llamacpp-model-path",
        "llamacpp-prefix",
        "vllm-model-path",
        "vllm-prefix",
        "sglang-short-m",
        "sglang-model-name",
    ],
)
def test_a_model_under_another_spelling_is_not_naming_it(
    tmp_path: Path, kind: str, command: list[str]
) -> None:
    _refused(_campaign(tmp_path, command, kind=kind))


@pytest.mark.parametrize(
    "command",
    [
        [*LLAMA_SERVER, "-m", "{model}", *PORT],
        [*LLAMA_SERVER, "--model", "{model}"],
        [*LLAMA_CPP_PYTHON, "--model", "{model}"],
        [*LLAMA_CPP_PYTHON, "--model={model}"],
    ],
    ids=["server-short", "server-long", "python", "python-equals"],
)
def test_a_llamacpp_command_naming_the_model_loads(tmp_path: Path, command: list[str]) -> None:
    assert load_campaign(_campaign(tmp_path, command, kind="llamacpp")).spec.engine.kind == "llamacpp"


@pytest.mark.parametrize("option", ["--model-path", "--model"])
def test_a_sglang_command_naming_the_model_loads(tmp_path: Path, option: str) -> None:
    assert load_campaign(_campaign(tmp_path, [*SGLANG, option, "{model}"], kind="sglang")).spec.engine.kind


# ---- the model given through the engine's environment ------------------------------------------------


@pytest.mark.parametrize(
    ("command", "variable"),
    [
        (LLAMA_SERVER, "LLAMA_ARG_MODEL"),
        (LLAMA_CPP_PYTHON, "MODEL"),
        (LLAMA_CPP_PYTHON, "model"),  # llama-cpp-python's settings read it in any case
    ],
)
@pytest.mark.parametrize("where", ["engine", "attempt"])
def test_a_model_variable_in_the_engines_environment_names_the_model(
    tmp_path: Path, command: list[str], variable: str, where: str
) -> None:
    pinned = str(tmp_path / "models" / "pinned")
    env = {variable: pinned}
    p = (
        _campaign(tmp_path, command, kind="llamacpp", env=env)
        if where == "engine"
        else _campaign(tmp_path, command, kind="llamacpp", attempts=[{"name": "a", "env": env}])
    )
    assert load_campaign(p).spec.engine.kind == "llamacpp"


def test_a_model_variable_given_by_an_env_launcher_names_the_model(tmp_path: Path) -> None:
    command = ["env", "LLAMA_ARG_MODEL={model}", *LLAMA_SERVER, *PORT]
    assert load_campaign(_campaign(tmp_path, command, kind="llamacpp")).spec.engine.kind == "llamacpp"


@pytest.mark.parametrize(
    ("kind", "command", "variable"),
    [
        # a llamacpp model variable misspelled, or one the engine kind does not read
        ("llamacpp", LLAMA_SERVER, "LLAMA_ARG_MODEL_PATH"),
        ("llamacpp", LLAMA_SERVER, "llama_arg_model"),  # llama-server reads LLAMA_ARG_* as written
        ("vllm", SERVE, "MODEL"),
        ("vllm", SERVE, "LLAMA_ARG_MODEL"),
        ("sglang", SGLANG, "MODEL"),
    ],
)
def test_a_variable_the_engine_does_not_read_as_its_model_is_refused(
    tmp_path: Path, kind: str, command: list[str], variable: str
) -> None:
    env = {variable: str(tmp_path / "models" / "pinned")}
    _refused(_campaign(tmp_path, command, kind=kind, env=env))


def test_an_inherited_model_variable_does_not_name_the_pinned_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A variable the collector's own environment passes on is not the campaign's: it is never held to
    the pin, so it names no model the job pinned."""
    monkeypatch.setenv("LLAMA_ARG_MODEL", str(tmp_path / "models" / "pinned"))
    _refused(_campaign(tmp_path, [*LLAMA_SERVER, *PORT], kind="llamacpp"))


# ---- the model given in an attempt's extra_args -------------------------------------------------------


def test_a_model_given_only_in_extra_args_loads(tmp_path: Path) -> None:
    attempts: list[dict[str, object]] = [
        {"name": "first", "extra_args": ["--model", "{model}"]},
        {"name": "second", "extra_args": ["{model}"]},  # vllm serve's positional, opened by extra_args
    ]
    assert (
        len(load_campaign(_campaign(tmp_path, SERVE, kind="vllm", attempts=attempts)).spec.engine.attempts)
        == 2
    )


def test_an_attempt_whose_extra_args_give_no_model_is_refused_by_name(tmp_path: Path) -> None:
    attempts: list[dict[str, object]] = [
        {"name": "first", "extra_args": ["--model", "{model}"]},
        {"name": "fallback", "extra_args": ["--enforce-eager"]},
    ]
    msg = _refused(_campaign(tmp_path, SERVE, kind="vllm", attempts=attempts), "attempt 'fallback'")
    assert "attempt 'first'" not in msg


def test_an_option_ending_the_command_with_its_value_in_extra_args_names_the_model(tmp_path: Path) -> None:
    attempts: list[dict[str, object]] = [{"name": "a", "extra_args": ["{model}"]}]
    c = _campaign(tmp_path, [*LLAMA_SERVER, "-m"], kind="llamacpp", attempts=attempts)
    assert load_campaign(c).spec.engine.kind == "llamacpp"


# ---- launchers ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "launcher",
    [["taskset", "-c", "0"], ["numactl", "-N", "0"], ["nice", "-n", "5"], ["env", "VLLM_X=1"]],
    ids=["taskset", "numactl", "nice", "env"],
)
def test_a_launcher_with_a_vllm_command_naming_no_model_is_refused(
    tmp_path: Path, launcher: list[str]
) -> None:
    _refused(_campaign(tmp_path, [*launcher, *SERVE, *PORT], kind="vllm"), "write --model {model}")
    ok = _campaign(tmp_path, [*launcher, *SERVE, "{model}", *PORT], kind="vllm")
    assert load_campaign(ok).spec.engine.kind == "vllm"


def test_a_launchers_value_is_not_the_engines_positional_model(tmp_path: Path) -> None:
    """taskset's CPU list is its own operand, not ``vllm serve``'s model."""
    _refused(_campaign(tmp_path, ["taskset", "-c", "0", *SERVE], kind="vllm"))


# ---- kind generic is not read -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [["{python}", "-c", "pass"], ["my-engine", "--port", "{port}"], [*SERVE, *PORT]],
    ids=["python", "own-program", "vllm-serve"],
)
def test_a_generic_command_naming_no_model_still_loads(tmp_path: Path, command: list[str]) -> None:
    assert load_campaign(_campaign(tmp_path, command, kind="generic")).spec.engine.kind == "generic"
