"""Fix 88 (audit 76 f1): a campaign command with no alias option loaded, and the engine's default id failed
the identity probe as the engine's runtime failure.

llama-cpp-python given no ``--model_alias`` (and no ``MODEL_ALIAS``) serves its model under the ``--model``
value as launched; vLLM given no ``--served-model-name`` under its model argument (SGLang likewise). The
loader judged only the alias options and variables that were given, so a campaign whose ``[model]
served_name`` is ``tiny`` loaded, the engine listed its model path, and the verdict was NOT QUALIFIED —
RUNTIME RELIABILITY for the campaign's own configuration. Now, where nothing names the served model, the
program's default id applies and must be served_name (refused at load, naming both and the option to add);
llama-server's default differs between builds, so it must be given ``--alias``; a script's default is not
known and is not judged.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledger.collectors.campaign import load_campaign
from ledger.errors import ConfigError, InputError

LLAMA_CPP_PYTHON = ["{python}", "-m", "llama_cpp.server", "--model", "{model}", "--port", "{port}"]
LLAMA_SERVER = ["llama-server", "-m", "{model}", "--port", "{port}"]
VLLM_API = ["{python}", "-m", "vllm.entrypoints.openai.api_server", "--model", "{model}", "--port", "{port}"]
VLLM_SERVE = ["vllm", "serve", "{model}", "--port", "{port}"]
SGLANG = ["{python}", "-m", "sglang.launch_server", "--model-path", "{model}", "--port", "{port}"]
ALIAS_VARIABLES = (
    "LLAMA_ARG_ALIAS",
    "MODEL_ALIAS",
    "model_alias",
    "MODEL",
    "LLAMA_ARG_MODEL",
    "PORT",
    "HOST",
)


@pytest.fixture(autouse=True)
def _no_inherited(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ALIAS_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def _campaign(
    tmp_path: Path,
    command: list[str],
    *,
    kind: str = "llamacpp",
    env: dict[str, str] | None = None,
    served: str = "tiny",
) -> Path:
    lines = [
        '[campaign]\nid = "c"\n',
        f"[model]\npath = {json.dumps(str(tmp_path))}\nserved_name = {json.dumps(served)}\n",
        f"[engine]\nkind = {json.dumps(kind)}\ncommand = {json.dumps(command)}",
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
        assert text in e.value.message, e.value.message
    return e.value.message


def _loads(path: Path) -> None:
    load_campaign(path)


def test_llama_cpp_python_without_model_alias_serving_its_path_is_refused_at_load(tmp_path: Path) -> None:
    """The audit's case: no --model_alias; llama-cpp-python would list its --model path, not ``tiny``."""
    _refused(
        _campaign(tmp_path, LLAMA_CPP_PYTHON),
        "no --model_alias and no MODEL_ALIAS",
        repr(str(tmp_path)),
        "served_name is 'tiny'",
        "add --model_alias {served_name}",
    )


@pytest.mark.parametrize(
    "alias",
    [
        ["--model_alias", "{served_name}"],
        ["--model_alias={served_name}"],
        ["--model_alias", "tiny"],
        ["--model_al", "tiny"],
    ],
    ids=["spaced", "equals", "literal", "prefix"],
)
def test_llama_cpp_python_with_model_alias_loads(tmp_path: Path, alias: list[str]) -> None:
    _loads(_campaign(tmp_path, [*LLAMA_CPP_PYTHON, *alias]))


def test_llama_cpp_python_alias_through_its_variable_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MODEL_ALIAS names the served model (the campaign's): no default id applies. An inherited one does not
    reach the engine since e277bea (audit 83 f10: the engine inherits only an allow-list, ``launch_env``), so
    the engine's default id applies and the campaign is refused as with no alias at all."""
    _loads(_campaign(tmp_path, LLAMA_CPP_PYTHON, env={"MODEL_ALIAS": "tiny"}))
    monkeypatch.setenv("MODEL_ALIAS", "tiny")
    _refused(_campaign(tmp_path, LLAMA_CPP_PYTHON), "no --model_alias", "'tiny'")


def test_llama_cpp_python_alias_variable_naming_another_id_still_refused(tmp_path: Path) -> None:
    _refused(_campaign(tmp_path, LLAMA_CPP_PYTHON, env={"MODEL_ALIAS": "other"}), "'other'", "'tiny'")


def test_default_id_equal_to_served_name_loads(tmp_path: Path) -> None:
    """served_name written as the model path the engine is given: its default id is served_name."""
    _loads(_campaign(tmp_path, LLAMA_CPP_PYTHON, served=str(tmp_path)))
    _loads(_campaign(tmp_path, VLLM_API, kind="vllm", served=str(tmp_path)))


def test_llama_cpp_python_model_variable_is_its_default_id(tmp_path: Path) -> None:
    """No --model option: the MODEL variable is the model, and so the id it serves."""
    command = ["{python}", "-m", "llama_cpp.server", "--port", "{port}"]
    _refused(_campaign(tmp_path, command, env={"MODEL": str(tmp_path)}), "the environment's MODEL", "'tiny'")
    _loads(_campaign(tmp_path, command, env={"MODEL": str(tmp_path)}, served=str(tmp_path)))


@pytest.mark.parametrize("command", [VLLM_API, VLLM_SERVE], ids=["api_server", "serve"])
def test_vllm_without_served_model_name_is_refused_at_load(tmp_path: Path, command: list[str]) -> None:
    _refused(
        _campaign(tmp_path, command, kind="vllm"),
        "no --served-model-name",
        repr(str(tmp_path)),
        "add --served-model-name {served_name}",
    )


@pytest.mark.parametrize("command", [VLLM_API, VLLM_SERVE], ids=["api_server", "serve"])
def test_vllm_with_served_model_name_loads(tmp_path: Path, command: list[str]) -> None:
    _loads(_campaign(tmp_path, [*command, "--served-model-name", "{served_name}"], kind="vllm"))
    _loads(_campaign(tmp_path, [*command, "--served_model_name=tiny"], kind="vllm"))


def test_vllm_served_model_name_misnamed_is_still_refused(tmp_path: Path) -> None:
    _refused(_campaign(tmp_path, [*VLLM_API, "--served-model-name", "other"], kind="vllm"), "'other'")


def test_sglang_without_served_model_name_is_refused_at_load(tmp_path: Path) -> None:
    _refused(_campaign(tmp_path, SGLANG, kind="sglang"), "no --served-model-name", "sglang.launch_server")
    _loads(_campaign(tmp_path, [*SGLANG, "--served-model-name", "{served_name}"], kind="sglang"))


def test_llama_server_without_alias_is_refused_its_default_differs_between_builds(tmp_path: Path) -> None:
    _refused(
        _campaign(tmp_path, LLAMA_SERVER),
        "llama-server no --alias and no LLAMA_ARG_ALIAS",
        "differs between its builds",
        "add --alias {served_name}",
    )
    # even where served_name is the model path: the default is not known before launch
    _refused(_campaign(tmp_path, LLAMA_SERVER, served=str(tmp_path)), "differs between its builds")


@pytest.mark.parametrize(
    ("alias", "env"),
    [(["--alias", "{served_name}"], None), (["-a", "tiny"], None), ([], {"LLAMA_ARG_ALIAS": "tiny"})],
    ids=["--alias", "-a", "LLAMA_ARG_ALIAS"],
)
def test_llama_server_with_alias_loads(tmp_path: Path, alias: list[str], env: dict[str, str] | None) -> None:
    _loads(_campaign(tmp_path, [*LLAMA_SERVER, *alias], env=env))


def test_script_engine_default_id_is_not_judged(tmp_path: Path) -> None:
    """A script the collector does not know: its default id is not known; it loads as before."""
    script = tmp_path / "engine.py"
    script.write_text("")
    _loads(
        _campaign(tmp_path, ["{python}", str(script), "--model", "{model}", "--port", "{port}"], kind="vllm")
    )


def test_alias_in_one_attempt_only_refuses_the_other(tmp_path: Path) -> None:
    """Each attempt's argv (command, then extra_args) is judged: the attempt without an alias is named."""
    p = _campaign(tmp_path, LLAMA_CPP_PYTHON)
    p.write_text(
        p.read_text()
        + '\n[[engine.attempts]]\nname = "named"\nextra_args = ["--model_alias", "{served_name}"]\n'
        + '\n[[engine.attempts]]\nname = "bare"\nextra_args = []\n',
        encoding="utf-8",
    )
    _refused(p, "attempt 'bare'", "no --model_alias")
