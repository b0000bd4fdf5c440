"""Fix 69 (issue 11, item 1): the served-name alias variables were read for both llama.cpp programs.

llama-server reads ``LLAMA_ARG_ALIAS`` (as written), llama-cpp-python (``python -m llama_cpp.server``) its
setting ``MODEL_ALIAS`` (any case); each reads only its own, and only where no alias option is given. The
loader read both for either program, and only the campaign's own variables: a llama-server campaign with
``MODEL_ALIAS = "tiny"`` loaded while the engine served the ``LLAMA_ARG_ALIAS`` it inherited. Now the
variable the program reads, in the environment the engine gets (inherited values included, ``env -u`` /
``-i`` applied), is held to ``[model] served_name``; the other program's variable names nothing to it (the
campaign's own must still not contradict served_name, as the model check holds the other program's model
variable to the pin).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledger.collectors.campaign import load_campaign
from ledger.collectors.launch import launch_env
from ledger.errors import ConfigError, InputError

LLAMA_SERVER = ["llama-server", "-m", "{model}", "--port", "{port}"]
LLAMA_CPP_PYTHON = ["{python}", "-m", "llama_cpp.server", "--model", "{model}", "--port", "{port}"]
ALIAS_VARIABLES = ("LLAMA_ARG_ALIAS", "MODEL_ALIAS", "model_alias", "Model_Alias", "llama_arg_alias")


@pytest.fixture(autouse=True)
def _no_inherited_alias(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ALIAS_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def _campaign(tmp_path: Path, command: list[str], env: dict[str, str] | None = None) -> Path:
    lines = [
        '[campaign]\nid = "c"\n',
        f'[model]\npath = "{tmp_path}"\nserved_name = "tiny"\n',
        f'[engine]\nkind = "llamacpp"\ncommand = {json.dumps(command)}',
    ]
    if env is not None:
        lines.append("env = { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items()) + " }")
    p = tmp_path / "c.toml"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


def _refused(path: Path, *said: str) -> str:
    with pytest.raises(ConfigError) as e:
        load_campaign(path)
    assert isinstance(e.value, InputError) and e.value.code == "bad-config"
    for text in said:
        assert text in e.value.message
    return e.value.message


def _loads(path: Path) -> None:
    assert load_campaign(path).spec.model.served_name == "tiny"


# (program's command, the variable it reads, the other program's variable)
PROGRAMS = [
    pytest.param(LLAMA_SERVER, "LLAMA_ARG_ALIAS", "MODEL_ALIAS", id="llama-server"),
    pytest.param(LLAMA_CPP_PYTHON, "MODEL_ALIAS", "LLAMA_ARG_ALIAS", id="llama_cpp.server"),
]


# the programs whose alias variable the engine inherits from the collector's environment: LLAMA_* is on the
# allow-list (and recorded by every launch); llama-cpp-python's MODEL_ALIAS is not (fix 104, audit 83 f10:
# only the allow-list and the engine variables every launch records reach the engine)
INHERITING = [p for p in PROGRAMS if p.id == "llama-server"]


@pytest.mark.parametrize(("command", "own", "other"), INHERITING)
def test_alias_variable_of_the_other_program_was_taken_as_the_served_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str], own: str, other: str
) -> None:
    """The campaign names ``tiny`` in the other program's variable; the engine serves the ``other`` its own
    variable brings in from the collector's environment: refused, naming the variable the program reads."""
    monkeypatch.setenv(own, "other")
    msg = _refused(_campaign(tmp_path, command, env={other: "tiny"}), own, "inherited", "'other'", "'tiny'")
    assert f"the environment's {other}" not in msg


def test_an_operators_model_alias_no_longer_reaches_llama_cpp_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same campaign for llama-cpp-python: the operator's MODEL_ALIAS stays behind (no variable the
    engine inherits), so it serves no 'other'; the campaign's LLAMA_ARG_ALIAS names nothing to it either
    (fix 115), so its default id is refused, never the operator's 'other'; with MODEL_ALIAS it loads."""
    monkeypatch.setenv("MODEL_ALIAS", "other")
    msg = _refused(_campaign(tmp_path, LLAMA_CPP_PYTHON, env={"LLAMA_ARG_ALIAS": "tiny"}), "its default id")
    assert "'other'" not in msg
    _loads(_campaign(tmp_path, LLAMA_CPP_PYTHON, env={"LLAMA_ARG_ALIAS": "tiny", "MODEL_ALIAS": "tiny"}))
    assert "MODEL_ALIAS" not in launch_env({})


@pytest.mark.parametrize(("command", "own", "other"), INHERITING)
def test_inherited_alias_variable_the_program_reads_is_held_to_served_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str], own: str, other: str
) -> None:
    monkeypatch.setenv(own, "other")
    _refused(_campaign(tmp_path, command), own, "'other'")
    monkeypatch.setenv(own, "tiny")
    _loads(_campaign(tmp_path, command))
    monkeypatch.setenv(own, "")
    _refused(_campaign(tmp_path, command), own, "no value")


@pytest.mark.parametrize("value", ["other", "tiny", ""])
def test_an_operators_model_alias_names_nothing_to_llama_cpp_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """An inherited MODEL_ALIAS, whatever it says, does not reach llama-cpp-python: nothing names the served
    model to it, so its default id is refused (fix 88) — never judged by the operator's value."""
    monkeypatch.setenv("MODEL_ALIAS", value)
    msg = _refused(_campaign(tmp_path, LLAMA_CPP_PYTHON), "no MODEL_ALIAS in its environment", "default id")
    assert "the environment's MODEL_ALIAS" not in msg


@pytest.mark.parametrize(("command", "own", "other"), PROGRAMS)
def test_inherited_alias_variable_of_the_other_program_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str], own: str, other: str
) -> None:
    monkeypatch.setenv(other, "other")
    # nothing names the served model to the program: its default id is refused (fix 88), never 'other'
    msg = _refused(_campaign(tmp_path, command), "its default id")
    assert other not in msg and "'other'" not in msg
    _loads(_campaign(tmp_path, command, env={own: "tiny"}))


def test_llama_cpp_python_reads_its_variable_in_any_case_llama_server_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the campaign's own variable, in any case (an inherited one no longer reaches the engine: fix 104)
    _refused(_campaign(tmp_path, LLAMA_CPP_PYTHON, env={"Model_Alias": "other"}), "Model_Alias", "'other'")
    # llama-server does not read it (nor inherits it): it names no alias, and llama-server's default id is
    # refused (fix 88)
    monkeypatch.setenv("Model_Alias", "other")
    assert "'other'" not in _refused(_campaign(tmp_path, LLAMA_SERVER), "differs between its builds")
    monkeypatch.delenv("Model_Alias")
    monkeypatch.setenv("llama_arg_alias", "other")  # llama-server reads LLAMA_ARG_ALIAS only as written
    assert "'other'" not in _refused(_campaign(tmp_path, LLAMA_SERVER), "differs between its builds")
    assert "'other'" not in _refused(_campaign(tmp_path, LLAMA_CPP_PYTHON), "its default id")


@pytest.mark.parametrize(("command", "own", "other"), PROGRAMS)
def test_the_campaigns_own_variable_of_the_other_program_still_must_not_contradict(
    tmp_path: Path, command: list[str], own: str, other: str
) -> None:
    """The other program's variable names nothing to this one, but a campaign naming another name there
    contradicts its served_name (as the model check holds the other program's model variable to the pin).
    Naming served_name there is no contradiction, but names nothing either (fix 115): the program's default
    id is judged; with its own variable beside it the campaign loads."""
    program = command[2] if command[0] == "{python}" else command[0]
    _refused(_campaign(tmp_path, command, env={other: "other"}), other, f"{program} does not read it")
    _refused(_campaign(tmp_path, command, env={other: "tiny"}), "default id", f"{program} does not read it")
    _loads(_campaign(tmp_path, command, env={other: "tiny", own: "tiny"}))
    _refused(_campaign(tmp_path, command, env={other: "other", own: "tiny"}), other, "'other'")


@pytest.mark.parametrize(("command", "own", "other"), PROGRAMS)
def test_an_env_launcher_removes_or_sets_the_alias_variable_the_engine_gets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str], own: str, other: str
) -> None:
    monkeypatch.setenv(own, "other")
    # removed: nothing names the served model, so the engine's default id is refused (fix 88), not 'other'
    assert "'other'" not in _refused(_campaign(tmp_path, ["env", "-u", own, *command]), "default id")
    assert "'other'" not in _refused(_campaign(tmp_path, ["env", "-i", *command]), "default id")
    _loads(_campaign(tmp_path, ["env", f"{own}={{served_name}}", *command]))  # placeholder filled
    _refused(_campaign(tmp_path, ["env", f"{own}=another", *command]), own, "'another'")


def test_an_alias_option_wins_over_the_inherited_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLAMA_ARG_ALIAS", "other")
    _loads(_campaign(tmp_path, [*LLAMA_SERVER, "--alias", "{served_name}"]))
    monkeypatch.setenv("MODEL_ALIAS", "other")
    _loads(_campaign(tmp_path, [*LLAMA_CPP_PYTHON, "--model_alias", "{served_name}"]))
    _refused(_campaign(tmp_path, [*LLAMA_CPP_PYTHON, "--model_alias", "another"]), "'another'")


def test_a_program_not_read_is_held_to_both_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Python script (not ``-m`` of a known module): which program reads the environment is not known,
    so each variable either program reads is held to served_name (fail closed) — the inherited
    LLAMA_ARG_ALIAS, and the campaign's own MODEL_ALIAS in any case (an inherited MODEL_ALIAS no longer
    reaches the engine: fix 104)."""
    script = ["{python}", str(tmp_path / "serve.py"), "--model", "{model}"]
    monkeypatch.setenv("LLAMA_ARG_ALIAS", "other")
    _refused(_campaign(tmp_path, script), "LLAMA_ARG_ALIAS", "'other'")
    monkeypatch.delenv("LLAMA_ARG_ALIAS")
    for variable in ("MODEL_ALIAS", "model_alias"):
        _refused(_campaign(tmp_path, script, env={variable: "other"}), variable, "'other'")
    monkeypatch.setenv("MODEL_ALIAS", "other")
    _loads(_campaign(tmp_path, script))
