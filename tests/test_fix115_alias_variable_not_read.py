"""Fix 115 (issue 11): an alias variable the program does not read counted as naming the served model.

A llama-cpp-python campaign (``python -m llama_cpp.server --model {model}``, no ``--model_alias``) whose
``[engine] env`` held only ``LLAMA_ARG_ALIAS = "tiny"`` (= served_name) loaded: llama_cpp.server does not read
LLAMA_ARG_ALIAS and serves its default id (the model path), so the identity probe failed the engine at run
time for the campaign's own configuration. The other llama.cpp program's variable must still not contradict
served_name, but it never stands in for an alias the program reads: where none names the model, the
program's default id is judged (fix 88) and refused at load, naming the option to add.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledger.collectors.campaign import load_campaign
from ledger.errors import ConfigError, InputError

LLAMA_SERVER = ["llama-server", "-m", "{model}", "--port", "{port}"]
LLAMA_CPP_PYTHON = ["{python}", "-m", "llama_cpp.server", "--model", "{model}", "--port", "{port}"]


@pytest.fixture(autouse=True)
def _no_inherited_alias(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("LLAMA_ARG_ALIAS", "MODEL_ALIAS", "model_alias"):
        monkeypatch.delenv(name, raising=False)


def _campaign(tmp_path: Path, command: list[str], env: dict[str, str], served: str = "tiny") -> Path:
    pairs = ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items())
    p = tmp_path / "c.toml"
    p.write_text(
        '[campaign]\nid = "c"\n'
        f'[model]\npath = "{tmp_path}"\nserved_name = {json.dumps(served)}\n'
        f'[engine]\nkind = "llamacpp"\ncommand = {json.dumps(command)}\nenv = {{ {pairs} }}\n',
        encoding="utf-8",
    )
    return p


def _refused(path: Path) -> str:
    with pytest.raises(ConfigError) as e:
        load_campaign(path)
    assert isinstance(e.value, InputError) and e.value.code == "bad-config"
    return e.value.message


def _loads(path: Path) -> None:
    assert load_campaign(path).spec.model.served_name == "tiny"


def test_llama_cpp_python_with_only_llama_arg_alias_is_refused_at_load(tmp_path: Path) -> None:
    msg = _refused(_campaign(tmp_path, LLAMA_CPP_PYTHON, {"LLAMA_ARG_ALIAS": "tiny"}))
    assert "add --model_alias {served_name} to the command" in msg
    assert "LLAMA_ARG_ALIAS is llama-server's variable: llama_cpp.server does not read it" in msg
    assert "its default id" in msg and str(tmp_path) in msg


def test_llama_server_with_only_model_alias_is_refused_at_load(tmp_path: Path) -> None:
    for variable in ("MODEL_ALIAS", "model_alias"):  # llama-cpp-python's setting, any case
        msg = _refused(_campaign(tmp_path, LLAMA_SERVER, {variable: "tiny"}))
        assert "add --alias {served_name} to the command" in msg
        assert f"{variable} is llama_cpp.server's variable: llama-server does not read it" in msg


@pytest.mark.parametrize(
    ("command", "env"),
    [
        pytest.param(LLAMA_SERVER, {"LLAMA_ARG_ALIAS": "tiny"}, id="llama-server-own"),
        pytest.param(LLAMA_CPP_PYTHON, {"MODEL_ALIAS": "tiny"}, id="llama_cpp.server-own"),
        pytest.param(LLAMA_CPP_PYTHON, {"model_alias": "tiny"}, id="llama_cpp.server-own-lowercase"),
        pytest.param(
            LLAMA_SERVER, {"LLAMA_ARG_ALIAS": "tiny", "MODEL_ALIAS": "tiny"}, id="llama-server-both"
        ),
        pytest.param(
            LLAMA_CPP_PYTHON, {"LLAMA_ARG_ALIAS": "tiny", "MODEL_ALIAS": "tiny"}, id="llama_cpp.server-both"
        ),
        pytest.param(
            [*LLAMA_CPP_PYTHON, "--model_alias", "{served_name}"], {"LLAMA_ARG_ALIAS": "tiny"}, id="option"
        ),
    ],
)
def test_the_variable_the_program_reads_still_names_the_model(
    tmp_path: Path, command: list[str], env: dict[str, str]
) -> None:
    _loads(_campaign(tmp_path, command, env))


def test_llama_server_spelling_of_the_variable_in_another_case_names_nothing(tmp_path: Path) -> None:
    """llama-server reads LLAMA_ARG_ALIAS only as written: a lowercase one names nothing to it."""
    msg = _refused(_campaign(tmp_path, LLAMA_SERVER, {"llama_arg_alias": "tiny"}))
    assert "add --alias {served_name} to the command" in msg


def test_the_other_programs_variable_contradicting_is_still_refused_as_a_contradiction(
    tmp_path: Path,
) -> None:
    for command, own, other in (
        (LLAMA_CPP_PYTHON, "MODEL_ALIAS", "LLAMA_ARG_ALIAS"),
        (LLAMA_SERVER, "LLAMA_ARG_ALIAS", "MODEL_ALIAS"),
    ):
        for env in ({other: "other"}, {other: "other", own: "tiny"}):
            msg = _refused(_campaign(tmp_path, command, env))
            assert f"the environment's {other}" in msg and "'other'" in msg and "default id" not in msg


def test_a_model_argument_equal_to_served_name_is_its_default_id(tmp_path: Path) -> None:
    """The default id is judged, not refused blindly: llama-cpp-python serves its --model as launched."""
    path = _campaign(tmp_path, LLAMA_CPP_PYTHON, {"LLAMA_ARG_ALIAS": str(tmp_path)}, served=str(tmp_path))
    assert load_campaign(path).spec.model.served_name == str(tmp_path)
