"""Audit 71 f1/f4: a harness run records what the fault that stopped it was (``bounds.fault_kind``, the
vocabulary of ``ledger.entries.HarnessFaultKind``) and a probe's error is read by one judgement
(``ledger.signatures.unanswered_error``): only a request whose connection was refused, reset or closed is
"unanswered" — never an HTTP 5xx answer, never a timeout."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from ledger.collectors.benchmark import RequestRecord, request_fault_kind, run_fault_kind, send_request
from ledger.signatures import unanswered_error


def _rec(**kw: Any) -> RequestRecord:
    r = RequestRecord("p", 1, 0, 0, "2026-01-01T00:00:00Z", 0.0)
    for k, v in kw.items():
        setattr(r, k, v)
    return r


async def _send(handler: Any, timeout_s: float = 5.0) -> RequestRecord:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    rec = _rec()
    try:
        async with aiohttp.ClientSession() as client:
            await send_request(
                client,
                f"http://127.0.0.1:{port}/v1/chat/completions",
                {"messages": [{"role": "user", "content": "x"}], "max_tokens": 4, "stream": True},
                rec,
                clock_origin=0.0,
                timeout_s=timeout_s,
            )
    finally:
        await runner.cleanup()
    return rec


def test_an_http_500_answer_is_answered_not_unanswered() -> None:
    async def h(_: web.Request) -> web.Response:
        return web.json_response({"error": {"message": "internal error", "code": 500}}, status=500)

    rec = asyncio.run(_send(h))
    assert rec.fault and rec.http_status == 500
    assert request_fault_kind(rec) == "answered"


def test_a_connection_closed_before_the_answer_is_unanswered() -> None:
    async def h(request: web.Request) -> web.Response:
        assert request.transport is not None
        request.transport.close()  # the engine's process died: its socket closed, no status sent
        await asyncio.sleep(0.2)
        return web.Response()

    rec = asyncio.run(_send(h))
    assert rec.fault and rec.http_status is None
    assert request_fault_kind(rec) == "unanswered"


def test_a_timeout_is_no_fault_of_this_kind_and_a_hang_is_timeout() -> None:
    async def h(_: web.Request) -> web.Response:
        await asyncio.sleep(2)
        return web.Response()

    rec = asyncio.run(_send(h, timeout_s=0.3))
    assert not rec.fault and request_fault_kind(rec) is None  # a plain error until the engine is asked
    rec.fault, rec.error = True, f"{rec.error}; the engine answers neither /health nor /v1/models: it hangs"
    assert request_fault_kind(rec) == "timeout"


@pytest.mark.parametrize(
    ("records", "outcome", "kind"),
    [
        ([_rec(fault=True, unanswered=True)], "fault", "unanswered"),
        ([_rec(fault=True, unanswered=True), _rec(fault=True, unanswered=True)], "fault", "unanswered"),
        # one 500 beside the resets: the engine answered that it failed
        ([_rec(fault=True, unanswered=True), _rec(fault=True, http_status=500)], "fault", "answered"),
        ([_rec(fault=True, error="timeout after 3 s (TimeoutError); it hangs")], "fault", "timeout"),
        ([_rec(fault=True, error="ConnectionTimeoutError: x")], "fault", "timeout"),
        ([_rec(fault=True, error="malformed answer (the engine is no longer alive)")], "fault", "other"),
        ([], "fault", "other"),  # the bindings could not be read: no request shows the fault
        ([_rec(fault=True, unanswered=True)], "completed", None),
        ([_rec(fault=True, unanswered=True)], "lease-expired", None),
    ],
)
def test_run_fault_kind(records: list[RequestRecord], outcome: str, kind: str | None) -> None:
    assert run_fault_kind(outcome, records) == kind


@pytest.mark.parametrize(
    ("error", "unanswered"),
    [
        ("ConnectError: [Errno 111] Connection refused", True),
        ("ReadError: [Errno 104] Connection reset by peer", True),
        ("WriteError: [Errno 32] Broken pipe", True),
        ("RemoteProtocolError: Server disconnected without sending a response.", True),
        ("RemoteProtocolError: illegal status line: bytearray(b'xx')", False),
        ("ReadTimeout: timed out", False),
        ("ConnectTimeout: timed out", False),
        ("HTTP 500: internal error", False),
        ("connecterror: [Errno 111] Connection refused", False),
        ("the engine said ConnectError: ", False),
        ("", False),
        (None, False),
        (111, False),
    ],
)
def test_unanswered_error(error: Any, unanswered: bool) -> None:
    assert unanswered_error(error) is unanswered
