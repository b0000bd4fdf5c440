"""Structured request logs: one record per request with its id, the caller's token name, status, latency.

Each request gets an id (the client's ``X-Request-ID`` when it sends a sane one, else a new one), returned in
the ``X-Request-ID`` response header and in error documents, so a user's report can be found in the log.
``ledger serve --log-format json`` writes one JSON object per line; the default is ``key=value`` text.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import sys
import time
from datetime import UTC, datetime
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["LOGGER", "RequestLogMiddleware", "configure_logging", "log_event"]

LOGGER = "ledger.api.requests"
_SANE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_log = logging.getLogger(LOGGER)


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        out.update(getattr(record, "fields", {}))
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "fields", {})
        parts = [f"{k}={_text(v)}" for k, v in fields.items()]
        when = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
        line = " ".join([when, record.levelname, record.getMessage(), *parts])
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


_QUOTED = re.compile(r'[\s"=]')  # a value with any of these is written as a JSON string


def _text(v: Any) -> str:
    s = str(v)
    return json.dumps(s) if (not s or _QUOTED.search(s)) else s


def configure_logging(fmt: str = "text", level: str = "info") -> None:
    """Send the API's logs (``ledger.api.*``) to stderr as text or JSON lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if fmt == "json" else _TextFormatter())
    root = logging.getLogger("ledger.api")
    root.handlers[:] = [handler]
    root.setLevel(level.upper() if level.upper() in logging.getLevelNamesMapping() else "INFO")
    root.propagate = False


def log_event(message: str, level: int = logging.INFO, **fields: Any) -> None:
    """One record of the API's log. Made and handed to the handlers directly: ``Logger.log`` would first
    walk the stack for the caller's file and line (``findCaller``), which no formatter here writes —
    the dearest part of a record written at every request."""
    if not _log.isEnabledFor(level):
        return
    # file, line and function as logging records them without ``findCaller``
    record = _log.makeRecord(
        _log.name, level, "(unknown file)", 0, message, (), None, "(unknown function)", {"fields": fields}
    )
    _log.handle(record)


class RequestLogMiddleware:
    """Pure ASGI (streaming bodies pass untouched): assign the request id, log the request when done."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        sent = dict(scope.get("headers") or []).get(b"x-request-id", b"").decode("latin-1")
        rid = sent if _SANE_ID.fullmatch(sent) else secrets.token_hex(8)
        state = scope.setdefault("state", {})
        state["request_id"] = rid
        start = time.perf_counter()
        status = 500
        size = 0

        async def send_wrapper(message: Message) -> None:
            nonlocal status, size
            if message["type"] == "http.response.start":
                status = int(message["status"])
                message["headers"] = [*message.get("headers", []), (b"x-request-id", rid.encode())]
            elif message["type"] == "http.response.body":
                size += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            client = scope.get("client")
            log_event(
                "request",
                request_id=rid,
                method=scope.get("method", ""),
                path=scope.get("path", ""),
                route=getattr(route, "path", None),
                status=status,
                latency_ms=round((time.perf_counter() - start) * 1000, 3),
                bytes=size,
                token=state.get("token_name", "-"),
                client=client[0] if client else None,
            )
