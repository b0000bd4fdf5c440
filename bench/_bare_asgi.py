"""The least an HTTP server on this stack can do per request: a bare ASGI app (no framework, no database,
nothing parsed or signed) under uvicorn as `ledger serve` runs it. It reads the request body and answers
``201 {}``. bench_ingest's ``http-ceiling`` phase POSTs the real one-entry bodies to it with the same
collector processes: what no ingest server written on uvicorn can exceed on this machine with these
clients."""

from __future__ import annotations

from typing import Any


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    status = 200 if scope["method"] == "GET" else 201
    headers = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b"{}"})
