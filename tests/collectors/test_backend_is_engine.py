"""A campaign's ``[campaign] backend`` names the engine its ``[engine] kind`` runs (audit 79 f4: a llama.cpp
campaign filed as ``backend = "vllm"`` earned a QUALIFIED verdict for backend=vllm at llama-cpp-python's
version, and a route of backend=vllm was allowed). It is refused when loaded — bad-config naming
campaign.backend and the engine kind, before anything is recorded — by the one mapping of engine names
(``names.engine_key`` with the qualification policy's ``params.engine_names``, the one copy the verdict
and the routing gate read too: fix 107): another spelling of the same engine loads; another engine, or a
name that maps to none, is refused; left out, it is the engine kind."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ledger.collectors.campaign import load_campaign
from ledger.errors import ConfigError, InputError
from ledger.service import Ledger

from .conftest import entries_of, run_ledger

COMMANDS = {
    "llamacpp": ["{python}", "-m", "llama_cpp.server", "--model", "{model}", "--port", "{port}",
                 "--model_alias", "{served_name}"],
    "vllm": ["vllm", "serve", "{model}", "--served-model-name", "{served_name}", "--port", "{port}"],
    "sglang": ["python", "-m", "sglang.launch_server", "--model-path", "{model}", "--served-model-name",
               "{served_name}", "--port", "{port}"],
    "generic": ["{python}", "-m", "some_server", "--port", "{port}"],
}  # fmt: skip


def _campaign(tmp_path: Path, kind: str, backend: Any = None) -> Path:
    said = "" if backend is None else f"backend = {json.dumps(backend)}\n"
    text = (
        f'[campaign]\nid = "c"\n{said}\n'
        f'[model]\npath = "{tmp_path}"\nserved_name = "tiny"\n\n'
        f'[engine]\nkind = "{kind}"\ncommand = {json.dumps(COMMANDS[kind])}\n'
    )
    p = tmp_path / "c.toml"
    p.write_text(text, encoding="utf-8")
    return p


def _refused(path: Path) -> str:
    with pytest.raises(ConfigError) as e:
        load_campaign(path)
    assert isinstance(e.value, InputError) and e.value.code == "bad-config"
    return e.value.message


def test_backend_naming_another_engine_than_the_engine_kind_is_refused_at_load(tmp_path: Path) -> None:
    msg = _refused(_campaign(tmp_path, "llamacpp", "vllm"))
    assert "campaign.backend 'vllm'" in msg and "kind is 'llamacpp'" in msg, msg


@pytest.mark.parametrize(
    ("kind", "backend"),
    [("llamacpp", "sglang"), ("vllm", "llama.cpp"), ("vllm", "llamacpp"), ("sglang", "vLLM"),
     ("llamacpp", "native"), ("vllm", "vllm-fork")],
)  # fmt: skip
def test_backend_of_another_or_no_known_engine_is_refused(tmp_path: Path, kind: str, backend: str) -> None:
    msg = _refused(_campaign(tmp_path, kind, backend))
    assert f"campaign.backend {backend!r}" in msg and f"kind is {kind!r}" in msg, msg


@pytest.mark.parametrize(
    ("kind", "backend"),
    [("llamacpp", "llamacpp"), ("llamacpp", "llama.cpp"), ("llamacpp", "LLaMA.cpp"),
     ("llamacpp", "llama-cpp"), ("llamacpp", "llama_cpp"), ("llamacpp", "llama-server"), ("vllm", "vLLM"),
     ("vllm", "vllm"),
     ("sglang", "sglang-server"), ("sglang", "SGLang")],
)  # fmt: skip
def test_backend_spelling_the_same_engine_loads(tmp_path: Path, kind: str, backend: str) -> None:
    c = load_campaign(_campaign(tmp_path, kind, backend))
    assert c.backend == backend  # the subject keeps the campaign's spelling


def test_backend_left_out_is_the_engine_kind(tmp_path: Path) -> None:
    for kind in ("llamacpp", "vllm"):
        assert load_campaign(_campaign(tmp_path, kind)).backend == kind


def test_generic_engine_names_no_engine_family_any_backend_loads(tmp_path: Path) -> None:
    assert load_campaign(_campaign(tmp_path, "generic", "vllm")).backend == "vllm"


@pytest.mark.parametrize("backend", [7, "", ["vllm"]], ids=["number", "empty", "list"])
def test_mistyped_backend_is_refused(tmp_path: Path, backend: Any) -> None:
    assert "campaign.backend" in _refused(_campaign(tmp_path, "llamacpp", backend))


def test_collect_run_refuses_it_before_anything_is_recorded(tmp_path: Path, home: Path) -> None:
    r = run_ledger("--home", str(home), "collect", "run", str(_campaign(tmp_path, "llamacpp", "vllm")))
    assert r.returncode == 2, r.stderr
    assert "campaign.backend 'vllm'" in r.stderr and "llamacpp" in r.stderr
    led = Ledger.open(home)
    try:
        assert entries_of(led, "job") == []
    finally:
        led.close()
