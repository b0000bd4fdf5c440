"""The per-request work of `ledger serve` cut without changing what it answers (fix 165, issue 12's HTTP
floor): the request log's record is made without walking the stack for a caller no formatter writes, and
``GET /v1/health`` takes one worker-thread hop instead of two. Same log lines, same levels and filters,
same health document, same OpenAPI."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from ledger import __version__
from ledger.api import requestlog
from ledger.api.app import create_app
from ledger.api.settings import ApiSettings
from ledger.service import Ledger


class _Captured(io.StringIO):
    def configure(self, fmt: str, level: str = "info") -> None:
        """``configure_logging``, its handler then writing here."""
        requestlog.configure_logging(fmt, level)
        (handler,) = logging.getLogger("ledger.api").handlers
        assert isinstance(handler, logging.StreamHandler)
        handler.setStream(self)


@pytest.fixture
def captured() -> Iterator[_Captured]:
    root = logging.getLogger("ledger.api")
    saved = (list(root.handlers), root.level, root.propagate)
    yield _Captured()
    root.handlers[:], root.propagate = saved[0], saved[2]
    root.setLevel(saved[1])


def test_a_request_record_in_text_names_every_field(captured: _Captured) -> None:
    captured.configure("text")
    requestlog.log_event("request", request_id="r-1", path="/v1/x y", status=201, token="-")
    line = captured.getvalue().strip()
    assert " INFO request request_id=r-1 " in line
    assert 'path="/v1/x y"' in line and "status=201" in line and "token=-" in line


def test_a_request_record_in_json_is_one_object(captured: _Captured) -> None:
    captured.configure("json")
    requestlog.log_event("request", request_id="r-2", status=500, latency_ms=1.5)
    rec = json.loads(captured.getvalue())
    assert rec["message"] == "request" and rec["level"] == "info"
    assert rec["logger"] == requestlog.LOGGER
    assert (rec["request_id"], rec["status"], rec["latency_ms"]) == ("r-2", 500, 1.5)


def test_a_record_below_the_level_is_not_written(captured: _Captured) -> None:
    captured.configure("text", level="warning")
    requestlog.log_event("request", request_id="quiet")
    requestlog.log_event("trouble", level=logging.ERROR, request_id="loud")
    text = captured.getvalue()
    assert "quiet" not in text and "request_id=loud" in text and " ERROR trouble " in text


def test_a_filter_or_a_disabled_logger_still_holds_the_record_back(captured: _Captured) -> None:
    captured.configure("text")
    log = logging.getLogger(requestlog.LOGGER)
    drop = logging.Filter("nothing.matches")
    log.addFilter(drop)
    try:
        requestlog.log_event("request", request_id="filtered")
    finally:
        log.removeFilter(drop)
    log.disabled = True
    try:
        requestlog.log_event("request", request_id="disabled")
    finally:
        log.disabled = False
    requestlog.log_event("request", request_id="written")
    text = captured.getvalue()
    assert "filtered" not in text and "disabled" not in text and "request_id=written" in text


@pytest.fixture
def client(tmp_path: Path) -> Iterator[tuple[TestClient, Ledger]]:
    led = Ledger.init(tmp_path / "home")
    led.new_key("hostA", ["collector"])
    app = create_app(ApiSettings(home=str(tmp_path / "home")), led)
    with TestClient(app) as c:
        yield c, led
    led.close()


def test_health_answers_the_log_size_as_it_is_now(client: tuple[TestClient, Ledger]) -> None:
    c, led = client
    first = c.get("/v1/health")
    assert first.status_code == 200
    assert first.json() == {
        "status": "ok",
        "version": __version__,
        "size": led.size(),
        "database": "sqlite",
        "origin": led.origin,
    }
    led.record("note", {"campaign": "health"}, {"text": "one more"}, key="hostA")
    assert c.get("/v1/health").json()["size"] == first.json()["size"] + 1
    assert c.get("/v1/health", params={"x": "1"}).status_code == 422  # unknown query refused as before


def test_health_publishes_the_same_answer_schema(client: tuple[TestClient, Ledger]) -> None:
    c, _ = client
    op = c.get("/openapi.json").json()["paths"]["/v1/health"]["get"]
    assert "description" not in op
    assert op["responses"]["200"]["content"]["application/json"]["schema"] == {
        "additionalProperties": True,
        "title": "Response Health V1 Health Get",
        "type": "object",
    }
