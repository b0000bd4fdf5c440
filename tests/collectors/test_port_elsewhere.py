"""Fix 88 (audit 76 f2): the engine listened on another port than the collector polled, and the launch was
recorded as the engine hanging.

(a) a literal ``--port 18777`` in the command instead of ``{port}``; (b) an inherited ``PORT=18779``, which
llama-cpp-python's ``__main__`` reads over its ``--port`` (``HOST`` likewise). Every launch waited for
readiness on a port nothing served, was recorded ``lease-expired``, and the verdict was NOT QUALIFIED —
RUNTIME RELIABILITY. Now the loader refuses a port / host option (each program's spelling: ``=`` forms, the
prefixes its parser takes) whose value is not ``{port}`` / ``{host}`` (or the value they are filled with),
a port / host variable the program reads whose value differs (refused rather than dropped: the collector
does not rewrite the engine's environment behind the campaign's back; ``env -u PORT`` is the named fix).
A command that gives no port option at all is not judged (the engine's default port; reported as a gap).
Since e277bea (audit 83 f10) the engine inherits only an allow-list of the collector's environment
(``collectors/launch.py`` ``launch_env``): an inherited PORT / HOST / port stays behind and is no longer
refused; one the engine does inherit (``LLAMA_ARG_PORT``) or the campaign states still is.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledger.collectors.campaign import load_campaign
from ledger.collectors.launch import launch_env
from ledger.errors import ConfigError, InputError

LLAMA_CPP_PYTHON = [
    "{python}",
    "-m",
    "llama_cpp.server",
    "--model",
    "{model}",
    "--model_alias",
    "{served_name}",
]
LLAMA_SERVER = ["llama-server", "-m", "{model}", "--alias", "{served_name}"]
VLLM = [
    "{python}",
    "-m",
    "vllm.entrypoints.openai.api_server",
    "--model",
    "{model}",
    "--served-model-name",
    "tiny",
]
SGLANG = ["{python}", "-m", "sglang.launch_server", "--model-path", "{model}", "--served-model-name", "tiny"]
KINDS = [
    pytest.param(LLAMA_CPP_PYTHON, "llamacpp", id="llama_cpp.server"),
    pytest.param(LLAMA_SERVER, "llamacpp", id="llama-server"),
    pytest.param(VLLM, "vllm", id="vllm"),
    pytest.param(SGLANG, "sglang", id="sglang"),
]
LISTEN_VARIABLES = ("PORT", "HOST", "port", "host", "Port", "LLAMA_ARG_PORT", "LLAMA_ARG_HOST", "MODEL_ALIAS")


@pytest.fixture(autouse=True)
def _no_inherited(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in LISTEN_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def _campaign(
    tmp_path: Path,
    command: list[str],
    *,
    kind: str = "llamacpp",
    env: dict[str, str] | None = None,
    engine: str = "",
) -> Path:
    lines = [
        '[campaign]\nid = "c"\n',
        f'[model]\npath = {json.dumps(str(tmp_path))}\nserved_name = "tiny"\n',
        f"[engine]\nkind = {json.dumps(kind)}\ncommand = {json.dumps(command)}\n{engine}",
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


@pytest.mark.parametrize(("command", "kind"), KINDS)
def test_literal_port_in_the_command_recorded_as_the_engine_hanging_is_refused_at_load(
    tmp_path: Path, command: list[str], kind: str
) -> None:
    """The audit's case (a): ``--port 18777`` while the collector polls a free port it picks."""
    _refused(
        _campaign(tmp_path, [*command, "--port", "18777"], kind=kind),
        "--port is given '18777'",
        "free port it picks per attempt",
        "write --port {port}",
    )
    _refused(_campaign(tmp_path, [*command, "--port=18777"], kind=kind), "--port is given '18777'")


@pytest.mark.parametrize(("command", "kind"), KINDS)
def test_port_placeholder_loads(tmp_path: Path, command: list[str], kind: str) -> None:
    _loads(_campaign(tmp_path, [*command, "--port", "{port}"], kind=kind))
    _loads(_campaign(tmp_path, [*command, "--port={port}"], kind=kind))
    _loads(_campaign(tmp_path, [*command, "--port", "{port}", "--host", "{host}"], kind=kind))


@pytest.mark.parametrize(("command", "kind"), KINDS)
def test_literal_port_equal_to_the_engine_port_loads(tmp_path: Path, command: list[str], kind: str) -> None:
    """[engine] port fixes the port the collector polls: a literal equal to it is where the engine listens."""
    _loads(_campaign(tmp_path, [*command, "--port", "18777"], kind=kind, engine="port = 18777"))
    _refused(
        _campaign(tmp_path, [*command, "--port", "18778"], kind=kind, engine="port = 18777"),
        "[engine] port 18777",
    )


def test_llama_cpp_python_port_prefix_is_its_port_option(tmp_path: Path) -> None:
    """argparse takes ``--p`` / ``--po`` for --port and ``--ho`` for --host."""
    _refused(_campaign(tmp_path, [*LLAMA_CPP_PYTHON, "--po", "18777"]), "--po is given '18777'")
    _refused(_campaign(tmp_path, [*LLAMA_CPP_PYTHON, "--port", "{port}", "--ho=0.0.0.0"]), "--ho is given")
    _loads(_campaign(tmp_path, [*LLAMA_CPP_PYTHON, "--por", "{port}"]))


@pytest.mark.parametrize(("command", "kind"), KINDS)
def test_literal_host_other_than_the_polled_one_is_refused(
    tmp_path: Path, command: list[str], kind: str
) -> None:
    _refused(
        _campaign(tmp_path, [*command, "--port", "{port}", "--host", "0.0.0.0"], kind=kind),
        "--host is given '0.0.0.0'",
        "[engine] host '127.0.0.1'",
        "write --host {host}",
    )
    # the same host as [engine] host: loads (written literally or as the placeholder)
    _loads(_campaign(tmp_path, [*command, "--port", "{port}", "--host", "127.0.0.1"], kind=kind))
    _loads(
        _campaign(
            tmp_path,
            [*command, "--port", "{port}", "--host", "0.0.0.0"],
            kind=kind,
            engine='host = "0.0.0.0"',
        )
    )


def test_port_option_with_no_value_is_refused(tmp_path: Path) -> None:
    _refused(_campaign(tmp_path, [*LLAMA_CPP_PYTHON, "--port", "--n_ctx", "512"]), "--port is given no value")


def test_literal_port_to_a_script_is_still_refused(tmp_path: Path) -> None:
    script = tmp_path / "engine.py"
    script.write_text("")
    _loads(
        _campaign(tmp_path, ["{python}", str(script), "--model", "{model}", "--port", "{port}"], kind="vllm")
    )
    _refused(
        _campaign(tmp_path, ["{python}", str(script), "--model", "{model}", "--port", "1"], kind="vllm"),
        "--port is given '1'",
    )


def test_inherited_port_variable_stays_behind_and_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The audit's case (b): PORT=18779 in the collector's environment, ``--port {port}`` in the command.
    Since e277bea (audit 83 f10) the engine inherits only an allow-list of the collector's environment
    (``launch_env``): the operator's PORT never reaches it, so nothing to refuse; the campaign's own PORT
    still is (``test_port_variable_in_the_campaign_env_is_refused``)."""
    monkeypatch.setenv("PORT", "18779")
    assert "PORT" not in launch_env({})
    _loads(_campaign(tmp_path, [*LLAMA_CPP_PYTHON, "--port", "{port}"]))
    _refused(
        _campaign(tmp_path, [*LLAMA_CPP_PYTHON, "--port", "{port}"], env={"PORT": "18779"}),
        "PORT='18779'",
        "over its port option",
    )


def test_inherited_host_variable_stays_behind_the_campaigns_own_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """e277bea: an inherited HOST does not reach the engine (loads); the campaign's own is judged."""
    monkeypatch.setenv("HOST", "0.0.0.0")
    assert "HOST" not in launch_env({})
    _loads(_campaign(tmp_path, [*LLAMA_CPP_PYTHON, "--port", "{port}"]))
    msg = _refused(
        _campaign(tmp_path, [*LLAMA_CPP_PYTHON, "--port", "{port}"], env={"HOST": "0.0.0.0"}),
        "HOST='0.0.0.0'",
    )
    assert "inherited by the engine" not in msg
    # the host the collector polls: loads
    _loads(_campaign(tmp_path, [*LLAMA_CPP_PYTHON, "--port", "{port}"], env={"HOST": "127.0.0.1"}))


def test_port_variable_equal_to_the_engine_port_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PORT", "18779")
    _loads(_campaign(tmp_path, [*LLAMA_CPP_PYTHON, "--port", "{port}"], engine="port = 18779"))


def test_port_variable_in_the_campaign_env_is_refused(tmp_path: Path) -> None:
    """The campaign's own [engine] env is not filled with {port}: only the launcher's env items are."""
    msg = _refused(
        _campaign(tmp_path, [*LLAMA_CPP_PYTHON, "--port", "{port}"], env={"PORT": "18779"}), "PORT='18779'"
    )
    assert "inherited" not in msg
    _refused(
        _campaign(tmp_path, [*LLAMA_CPP_PYTHON, "--port", "{port}"], env={"PORT": "{port}"}), "PORT='{port}'"
    )


def test_port_variable_through_env_launcher(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``env PORT={port}`` is filled like the command; ``env -u PORT`` removes an inherited one."""
    _loads(_campaign(tmp_path, ["env", "PORT={port}", *LLAMA_CPP_PYTHON, "--port", "{port}"]))
    _refused(_campaign(tmp_path, ["env", "PORT=1", *LLAMA_CPP_PYTHON, "--port", "{port}"]), "PORT='1'")
    monkeypatch.setenv("PORT", "18779")
    _loads(_campaign(tmp_path, ["env", "-u", "PORT", *LLAMA_CPP_PYTHON, "--port", "{port}"]))


def test_any_case_port_setting_counts_only_where_no_option_sets_the_port(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """llama-cpp-python's settings read ``port`` in any case, but its --port option wins over them (the
    campaign's own: since e277bea an inherited ``port`` stays behind and loads either way)."""
    own = {"port": "18779"}
    _loads(_campaign(tmp_path, [*LLAMA_CPP_PYTHON, "--port", "{port}"], env=own))
    _refused(_campaign(tmp_path, LLAMA_CPP_PYTHON, env=own), "port='18779'", "where no option sets the port")
    monkeypatch.setenv("port", "18779")
    _loads(_campaign(tmp_path, LLAMA_CPP_PYTHON))


def test_port_variable_other_programs_do_not_read_is_not_judged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PORT", "18779")
    _loads(_campaign(tmp_path, [*VLLM, "--port", "{port}"], kind="vllm"))
    _loads(_campaign(tmp_path, [*LLAMA_SERVER, "--port", "{port}"]))


def test_llama_server_port_variable_counts_where_no_option_sets_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLAMA_ARG_PORT", "18779")
    _loads(_campaign(tmp_path, [*LLAMA_SERVER, "--port", "{port}"]))
    _refused(_campaign(tmp_path, LLAMA_SERVER), "LLAMA_ARG_PORT='18779'")
    _loads(_campaign(tmp_path, LLAMA_SERVER, engine="port = 18779"))


def test_shipped_campaigns_still_load() -> None:
    shipped = Path(__file__).resolve().parents[2] / "ledger" / "campaigns"
    for p in sorted(shipped.glob("*.toml")):
        load_campaign(p)
