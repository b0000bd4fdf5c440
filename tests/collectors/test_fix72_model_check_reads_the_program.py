"""Fix 72: the model check reads what the engine's program reads (audit 61 F1, F2, F4).

- F1: kind llamacpp runs one of two programs that name the model in their own spellings: llama-server
  ``-m`` / ``--model`` / ``LLAMA_ARG_MODEL``; llama-cpp-python (``python -m llama_cpp.server``) ``--model``
  / ``MODEL`` (any case). The other program's variable names no model; llama-server's ``-m`` to
  llama-cpp-python is refused (it exits "unrecognized arguments"). Where no option names the model, the
  variable the engine gets (inherited ones too) is what it loads and is held to the pin.
- F2: an ``env`` launcher's ``-u NAME`` / ``--unset=NAME`` / ``-i`` / ``-`` removes variables: a model
  variable it removes names no model (and the engine's other variables are read past it too).
- F4: ``vllm serve --host H --port P {model}``: the positional model after options vLLM's parser reads is
  found and held to the pin; past an option the check cannot read, the message says to put the model
  first.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledger.collectors.campaign import load_campaign
from ledger.collectors.launch import launch_env
from ledger.errors import ConfigError, InputError

LLAMA_SERVER = ["llama-server", "--port", "{port}"]
LLAMA_CPP_PYTHON = ["{python}", "-m", "llama_cpp.server", "--port", "{port}"]
SERVE = ["vllm", "serve"]
PUT_FIRST = "put the model first: `vllm serve {model} …`"


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
    kind: str = "llamacpp",
    env: dict[str, str] | None = None,
    served_name: str = "tiny",
) -> Path:
    model = tmp_path / "models" / "pinned"
    model.mkdir(parents=True, exist_ok=True)
    (model / "config.json").write_text("{}")
    other = tmp_path / "models" / "other"
    other.mkdir(parents=True, exist_ok=True)
    # vLLM serves its model argument where no --served-model-name is given (fix 88): that is served_name
    if kind == "vllm" and served_name == "tiny":
        served_name = str(model)
    if kind != "vllm" and not any("ALIAS" in key.upper() for key in env or {}):
        command = _naming_served(command, kind)
    text = (
        f'[campaign]\nid = "c"\n[model]\npath = "{model}"\nserved_name = {json.dumps(served_name)}\n'
        f'[engine]\nkind = "{kind}"\ncommand = {json.dumps(command)}\n'
    )
    if env:
        text += "env = { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items()) + " }\n"
    text += '[[engine.attempts]]\nname = "default"\n'
    p = tmp_path / "c.toml"
    p.write_text(text)
    return p


def _pinned(tmp_path: Path) -> str:
    return str(tmp_path / "models" / "pinned")


def _other(tmp_path: Path) -> str:
    return str(tmp_path / "models" / "other")


def _refused(p: Path, *words: str) -> str:
    with pytest.raises(ConfigError) as e:
        load_campaign(p)
    assert isinstance(e.value, InputError) and e.value.code == "bad-config"
    for w in words:
        assert w in e.value.message, e.value.message
    return e.value.message


def _loads(p: Path) -> None:
    assert load_campaign(p).spec.engine.attempts


@pytest.fixture(autouse=True)
def _no_inherited_model(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MODEL", "model", "Model", "LLAMA_ARG_MODEL"):
        monkeypatch.delenv(name, raising=False)


# ---- F1: each program of kind llamacpp in its own spellings ---------------------------------------------


def test_llama_cpp_python_naming_its_model_by_llama_arg_model_is_refused(tmp_path: Path) -> None:
    """llama-cpp-python never reads LLAMA_ARG_MODEL: the attempt names no model it reads."""
    p = _campaign(tmp_path, LLAMA_CPP_PYTHON, env={"LLAMA_ARG_MODEL": _pinned(tmp_path)})
    _refused(p, "names no model", "no --model option; no MODEL in the engine's environment")


def test_llama_cpp_python_with_llama_arg_model_and_a_model_in_the_shell_names_no_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The audit's case: LLAMA_ARG_MODEL names the pin, the operator's shell exports MODEL=<other>. The
    engine no longer inherits MODEL (fix 104: only the allow-list and the variables every launch records
    reach it), so it would not load <other> — the attempt still names no model llama-cpp-python reads, and
    is refused for that."""
    monkeypatch.setenv("MODEL", _other(tmp_path))
    p = _campaign(tmp_path, LLAMA_CPP_PYTHON, env={"LLAMA_ARG_MODEL": _pinned(tmp_path)})
    msg = _refused(p, "names no model", "no --model option; no MODEL in the engine's environment")
    assert "inherited by the engine" not in msg
    assert "MODEL" not in launch_env({})


def test_llama_server_with_model_only_is_refused(tmp_path: Path) -> None:
    """llama-server ignores MODEL (it loads its default path)."""
    p = _campaign(tmp_path, LLAMA_SERVER, env={"MODEL": _pinned(tmp_path)})
    _refused(p, "names no model", "no -m / --model option; no LLAMA_ARG_MODEL in the engine's environment")


@pytest.mark.parametrize("key", ["MODEL", "model"])
def test_llama_cpp_python_with_model_variable_passes(tmp_path: Path, key: str) -> None:
    _loads(_campaign(tmp_path, LLAMA_CPP_PYTHON, env={key: _pinned(tmp_path)}))


def test_llama_server_with_llama_arg_model_passes(tmp_path: Path) -> None:
    _loads(_campaign(tmp_path, LLAMA_SERVER, env={"LLAMA_ARG_MODEL": _pinned(tmp_path)}))


def test_inherited_llama_arg_model_the_campaign_overrides_loads_the_pin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LLAMA_* is still inherited (and recorded): the operator's LLAMA_ARG_MODEL reaches llama-server, and
    the campaign's own LLAMA_ARG_MODEL, naming the pin, replaces it — the campaign loads."""
    monkeypatch.setenv("LLAMA_ARG_MODEL", _other(tmp_path))
    _loads(_campaign(tmp_path, LLAMA_SERVER, env={"LLAMA_ARG_MODEL": _pinned(tmp_path)}))
    assert launch_env({})["LLAMA_ARG_MODEL"] == _other(tmp_path)  # it does reach the engine


@pytest.mark.parametrize("key", ["MODEL", "model"])
def test_model_variable_in_the_shell_contradicting_the_pin_is_not_inherited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str
) -> None:
    """An operator's MODEL (any case) no longer reaches llama-cpp-python (fix 104: it is no variable the
    engine inherits), so the campaign's own Model is what it loads: the campaign loads."""
    monkeypatch.setenv(key, _other(tmp_path))
    _loads(_campaign(tmp_path, LLAMA_CPP_PYTHON, env={"Model": _pinned(tmp_path)}))
    assert key not in launch_env({})


def test_inherited_model_variable_alone_names_no_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An inherited variable naming the pin is not the campaign's: it still names no model (fix 66)."""
    monkeypatch.setenv("MODEL", _pinned(tmp_path))
    _refused(_campaign(tmp_path, LLAMA_CPP_PYTHON), "names no model")


@pytest.mark.parametrize("command", [LLAMA_CPP_PYTHON, LLAMA_SERVER], ids=["python", "server"])
def test_an_option_wins_over_an_inherited_model_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    """Both programs let --model win over their variable: an inherited one is then not what loads."""
    monkeypatch.setenv("MODEL", _other(tmp_path))
    monkeypatch.setenv("LLAMA_ARG_MODEL", _other(tmp_path))
    _loads(_campaign(tmp_path, [*command, "--model", "{model}"]))


@pytest.mark.parametrize("form", [["-m", "{model}"], ["-m{model}"]], ids=["spaced", "joined"])
def test_llama_cpp_python_given_llama_servers_short_m_is_refused(tmp_path: Path, form: list[str]) -> None:
    if form == ["-m{model}"]:
        # not an option the check reads (no llamacpp program takes it): names no model
        _refused(_campaign(tmp_path, [*LLAMA_CPP_PYTHON, *form]), "names no model")
        return
    _refused(
        _campaign(tmp_path, [*LLAMA_CPP_PYTHON, *form]),
        "-m is no option of llama_cpp.server",
        "unrecognized arguments",
        "write --model {model}",
    )


def test_llama_server_short_m_still_names_the_model(tmp_path: Path) -> None:
    _loads(_campaign(tmp_path, [*LLAMA_SERVER, "-m", "{model}"]))


def test_llama_cpp_python_by_its_joined_module_spelling_reads_its_own_spellings(tmp_path: Path) -> None:
    command = ["{python}", "-mllama_cpp.server", "--port", "{port}"]
    _refused(_campaign(tmp_path, command, env={"LLAMA_ARG_MODEL": _pinned(tmp_path)}), "no MODEL in the")
    _loads(_campaign(tmp_path, command, env={"MODEL": _pinned(tmp_path)}))


def test_the_other_programs_variable_naming_another_file_still_contradicts_the_pin(tmp_path: Path) -> None:
    p = _campaign(
        tmp_path, [*LLAMA_CPP_PYTHON, "--model", "{model}"], env={"LLAMA_ARG_MODEL": _other(tmp_path)}
    )
    _refused(p, "the environment's LLAMA_ARG_MODEL", "llama_cpp.server does not read LLAMA_ARG_MODEL")


def test_a_python_script_of_kind_llamacpp_keeps_every_spelling(tmp_path: Path) -> None:
    """A script is neither program: each spelling it might read is held to the pin and counts."""
    script = ["{python}", "engine.py", "--port", "{port}"]
    _loads(_campaign(tmp_path, [*script, "-m", "{model}"]))
    _loads(_campaign(tmp_path, script, env={"LLAMA_ARG_MODEL": _pinned(tmp_path)}))
    _refused(_campaign(tmp_path, script, env={"MODEL": _other(tmp_path)}), "the engine would load")


# ---- F2: what an env launcher removes ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "launcher",
    [
        ["env", "-u", "MODEL"],
        ["env", "-uMODEL"],
        ["env", "--unset=MODEL"],
        ["env", "--unset", "MODEL"],
        ["env", "--uns=MODEL"],
        ["env", "-0u", "MODEL"],
        ["env", "-i"],
        ["env", "-"],
        ["env", "--ignore-environment"],
        ["env", "MODEL={model}", "env", "-u", "MODEL"],
        ["nice", "-n", "5", "env", "-i", "taskset", "-c", "0"],
    ],
    ids=[
        "u",
        "u-joined",
        "unset-equals",
        "unset-spaced",
        "unset-prefix",
        "flag-cluster",
        "i",
        "dash",
        "ignore-environment",
        "set-then-unset",
        "among-launchers",
    ],
)
def test_a_model_variable_the_env_launcher_removes_names_no_model(
    tmp_path: Path, launcher: list[str]
) -> None:
    p = _campaign(tmp_path, [*launcher, *LLAMA_CPP_PYTHON], env={"MODEL": _pinned(tmp_path)})
    _refused(p, "names no model", "no MODEL in the engine's environment")


@pytest.mark.parametrize(
    "launcher",
    [
        ["env", "-u", "LLAMA_ARG_MODEL"],  # another name
        ["env", "-u", "model"],  # env unsets as written: MODEL stays (and pydantic reads it)
        ["env", "-i", "MODEL={model}"],  # cleared, then set again
        ["env", "-u", "MODEL", "MODEL={model}"],  # unset, then set again
        ["env", "-u", "MODEL", "env", "MODEL={model}"],
    ],
    ids=["other-name", "other-case", "i-then-set", "unset-then-set", "next-env-sets"],
)
def test_a_model_variable_the_launcher_leaves_or_sets_again_names_the_model(
    tmp_path: Path, launcher: list[str]
) -> None:
    _loads(_campaign(tmp_path, [*launcher, *LLAMA_CPP_PYTHON], env={"MODEL": _pinned(tmp_path)}))


def test_env_i_removes_an_inherited_contradicting_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine under ``env -i`` inherits nothing: a shell's MODEL is not what it loads."""
    monkeypatch.setenv("MODEL", _other(tmp_path))
    _refused(_campaign(tmp_path, LLAMA_CPP_PYTHON, env={"LLAMA_ARG_MODEL": _pinned(tmp_path)}))
    _loads(_campaign(tmp_path, ["env", "-i", "MODEL={model}", *LLAMA_CPP_PYTHON]))


def test_an_unset_variable_of_extra_weights_is_not_read(tmp_path: Path) -> None:
    """The environment checks beside the model read past the launcher too: a LoRA path it unsets is not
    loaded (and one it leaves still is)."""
    env = {"LORA_PATH": _other(tmp_path)}
    command = [*LLAMA_CPP_PYTHON, "--model", "{model}"]
    _refused(_campaign(tmp_path, command, env=env), "LORA_PATH")
    _loads(_campaign(tmp_path, ["env", "-u", "LORA_PATH", *command], env=env))


def test_an_unset_alias_variable_is_not_read(tmp_path: Path) -> None:
    """The served-name check reads past the launcher too: an alias it unsets serves no other name."""
    env = {"MODEL_ALIAS": "another-name"}
    command = [*LLAMA_CPP_PYTHON, "--model", "{model}"]
    _refused(_campaign(tmp_path, command, env=env), "another-name")
    # unset: nothing names the served model, so the engine's default id is refused (fix 88)
    msg = _refused(_campaign(tmp_path, ["env", "-u", "MODEL_ALIAS", *command], env=env), "default id")
    assert "another-name" not in msg


# ---- F4: vllm serve's positional model after options ----------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        [*SERVE, "--host", "{host}", "--port", "{port}", "{model}"],
        [*SERVE, "--port={port}", "{model}", "--dtype", "float32"],
        [*SERVE, "--enforce-eager", "{model}"],
        [*SERVE, "--max_model_len", "512", "{model}"],  # vLLM reads underscores as dashes
        [*SERVE, "--port", "{port}", "--", "{model}"],
        [*SERVE, "{model}", "--port", "{port}"],  # first: as before
    ],
    ids=["after-options", "after-equals", "after-flag", "underscores", "after-double-dash", "first"],
)
def test_vllm_positional_model_after_options_is_found(tmp_path: Path, command: list[str]) -> None:
    _loads(_campaign(tmp_path, command, kind="vllm"))


def test_vllm_positional_model_after_options_is_held_to_the_pin(tmp_path: Path) -> None:
    other = _other(tmp_path)
    p = _campaign(tmp_path, [*SERVE, "--host", "{host}", "--port", "{port}", other], kind="vllm")
    _refused(p, "the engine would load", other, "the positional model")


@pytest.mark.parametrize(
    "command",
    [
        [*SERVE, "--hos", "{host}", "{model}"],  # a prefix argparse would take
        [*SERVE, "--api-key", "k", "{model}"],  # several values: the model would be one of them
        [*SERVE, "--quantization", "awq", "{model}"],  # an option the check does not know
        [*SERVE, "-O3", "{model}"],
    ],
    ids=["prefix", "many-values", "unknown-option", "short"],
)
def test_vllm_positional_model_past_an_unread_option_is_refused_with_put_the_model_first(
    tmp_path: Path, command: list[str]
) -> None:
    _refused(_campaign(tmp_path, command, kind="vllm"), "names no model", PUT_FIRST)


def test_vllm_positional_not_first_with_served_model_name_is_refused(tmp_path: Path) -> None:
    """vLLM refuses a positional model that is not first where --served-model-name is given."""
    command = [*SERVE, "--port", "{port}", "{model}", "--served-model-name", "{served_name}"]
    _refused(_campaign(tmp_path, command, kind="vllm"), PUT_FIRST, "--served-model-name")
    first = [*SERVE, "{model}", "--port", "{port}", "--served-model-name", "{served_name}"]
    _loads(_campaign(tmp_path, first, kind="vllm"))


@pytest.mark.parametrize(
    "command",
    [[*SERVE, "--model="], [*SERVE, "--model", "--port", "{port}"], [*LLAMA_CPP_PYTHON, "--model="]],
    ids=["vllm-equals-empty", "vllm-no-value", "llama-cpp-python-equals-empty"],
)
def test_an_empty_model_option_is_refused(tmp_path: Path, command: list[str]) -> None:
    kind = "vllm" if command[0] == "vllm" else "llamacpp"
    _refused(_campaign(tmp_path, command, kind=kind), "--model is given no value")


def test_an_empty_model_variable_is_refused(tmp_path: Path) -> None:
    _refused(
        _campaign(tmp_path, LLAMA_CPP_PYTHON, env={"MODEL": ""}), "the environment's MODEL is given no value"
    )
