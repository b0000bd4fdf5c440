"""A completion answered by another model than the one asked fails api-readiness.

The completion probes record the model the answer names (``answered_model``), next to the one they asked
for (``model_identity``): a router or proxy that lists the campaign's model on /v1/models but answers from
another would otherwise pass every gate. llama.cpp's server echoes whatever name was asked, so for it the
answer's ``model`` says nothing and is not judged; a probe that records none is judged as before.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from ledger.collectors.campaign import structured_schema
from ledger.collectors.probe import probe_completion, probe_sequential, probe_structured
from ledger.entries import HealthProbe
from tests.engines.stub_openai import StubConfig, serve_stub
from tests.policy.test_fail_closed import entry, gates, qualified_entries, verdict_of
from tests.policy.test_fix95_verdict_side import as_backend

COMPLETIONS = ("completion", "structured", "sequential")


def _answered_by(es: list[dict[str, Any]], model: str | None, checks: tuple[str, ...] = COMPLETIONS) -> None:
    for name in checks:
        p = entry(es, name)["payload"]
        p["model_identity"] = "m"  # the campaign's served_name: what the collector asks for
        if model is not None:
            p["answered_model"] = model


def _engine(es: list[dict[str, Any]], engine: str) -> None:
    entry(es, "campaign-job")["payload"]["spec"]["bindings"]["engine"] = engine
    launch = entry(es, "launch")["payload"]
    launch["engine"] = engine
    launch["bindings"]["engine"] = engine


def test_a_completion_answered_by_another_model_fails_api_readiness(tmp_path: Path) -> None:
    es = qualified_entries()
    _answered_by(es, "other-model", ("completion",))
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY", v["gates"]
    assert gates(v)["api-readiness"] == "failed"
    reason = next(g["reason"] for g in v["gates"] if g["name"] == "api-readiness")
    assert "answered by another model than the campaign's approved m" in reason
    assert "completion probe" in reason and "asked for m, answered by other-model" in reason


def test_every_completion_probe_kind_is_judged(tmp_path: Path) -> None:
    for check in COMPLETIONS:
        es = qualified_entries()
        _answered_by(es, "other-model", (check,))
        v = verdict_of(tmp_path, es)
        assert gates(v)["api-readiness"] == "failed", (check, v["gates"])
        reason = next(g["reason"] for g in v["gates"] if g["name"] == "api-readiness")
        assert f"{check} probe" in reason and "answered by other-model" in reason, reason


def test_an_engine_that_echoes_the_asked_name_is_not_failed_on_it(tmp_path: Path) -> None:
    es = qualified_entries()
    _engine(es, "llamacpp")
    _answered_by(es, "other-model")
    v = verdict_of(tmp_path, es, subject=as_backend(es, "llamacpp"))  # fix 95: labelled as it ran
    assert gates(v)["api-readiness"] == "passed", v["gates"]
    assert v["verdict"] == "QUALIFIED", v["gates"]


def test_an_echoing_engine_is_the_policys_list(tmp_path: Path) -> None:
    # the same answer from an engine that names the model that answered (sglang) fails
    es = qualified_entries()
    _engine(es, "sglang")
    _answered_by(es, "other-model")
    v = verdict_of(tmp_path, es)
    assert gates(v)["api-readiness"] == "failed", v["gates"]


def test_a_probe_that_records_no_answered_model_is_judged_as_before(tmp_path: Path) -> None:
    es = qualified_entries()
    _answered_by(es, None)
    assert all("answered_model" not in entry(es, n)["payload"] for n in COMPLETIONS)
    assert verdict_of(tmp_path, es)["verdict"] == "QUALIFIED"
    es = qualified_entries()
    for n in COMPLETIONS:
        entry(es, n)["payload"]["answered_model"] = None  # an answer that names no model
    assert verdict_of(tmp_path, es)["verdict"] == "QUALIFIED"


def test_an_answer_from_the_approved_model_qualifies(tmp_path: Path) -> None:
    es = qualified_entries()
    _answered_by(es, "m")
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "QUALIFIED", v["gates"]


def test_answered_model_is_strictly_typed() -> None:
    base = {"endpoint": "/v1/chat/completions", "check": "completion", "ok": True}
    assert HealthProbe.model_validate(base).answered_model is None
    assert HealthProbe.model_validate({**base, "answered_model": "m"}).answered_model == "m"
    with pytest.raises(ValueError):
        HealthProbe.model_validate({**base, "answered_model": 7})


# --- the collector records the answer's model ---------------------------------------------------------


@contextmanager
def _answering_as(answered: str | None) -> Iterator[str]:
    """A tiny OpenAI-style server: /v1/models lists the asked model, every chat completion answers READY
    (or the structured control's JSON) and names ``answered`` as its model (none where it is None)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            text = '{"status": "READY"}' if "response_format" in body else "READY"
            out: dict[str, Any] = {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}],
            }
            if answered is not None:
                out["model"] = answered
            data = json.dumps(out).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(5)


def test_probe_completion_records_the_model_the_answer_names() -> None:
    with _answering_as("other-model") as base:
        p = probe_completion(base, model="m", timeout=10)
        s = probe_structured(base, schema=structured_schema(), fmt="json_schema", model="m", timeout=10)
        q = probe_sequential(base, count=3, model="m", timeout=10)
    for payload in (p, s, q):
        assert payload["ok"] is True, payload
        assert payload["model_identity"] == "m"
        assert payload["answered_model"] == "other-model"
        HealthProbe.model_validate(payload)
    with _answering_as("m") as base:
        assert probe_completion(base, model="m", timeout=10)["answered_model"] == "m"


def test_an_answer_that_names_no_model_records_none() -> None:
    with _answering_as(None) as base:
        assert probe_completion(base, model="m", timeout=10)["answered_model"] is None
    with serve_stub(StubConfig(answers={"x": "READY"})) as base:
        p = probe_completion(base, model="stub-model", prompt="x", timeout=10)
    assert p["ok"] is True and p["answered_model"] is None
