"""Conditional GETs and cache headers of immutable, content-addressed things (entries, artifacts).

An entry's and an artifact's ETag is its content digest, so a stored copy never goes stale: ``If-None-Match``
with it answers 304. Reads that need a token are ``private`` (no shared cache may keep them); only a server
started with ``--public-reads`` lets shared caches keep them (``public``).
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import Request, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ledger.api.settings import ApiSettings

__all__ = [
    "IMMUTABLE",
    "REVALIDATE",
    "DefaultCacheControl",
    "cache_control",
    "etag",
    "matches",
    "not_modified",
]

IMMUTABLE = "max-age=31536000, immutable"
REVALIDATE = "no-cache"  # keep it, but ask (If-None-Match) before each use


def etag(digest: str, variant: str = "") -> str:
    """A strong ETag: the content digest (and the representation, when one resource has several)."""
    return f'"{digest}{"." + variant if variant else ""}"'


def cache_control(settings: ApiSettings, freshness: str = REVALIDATE) -> str:
    return f"{'public' if settings.public_reads else 'private'}, {freshness}"


def matches(if_none_match: str | None, tag: str) -> bool:
    """RFC 9110 §13.1.2: ``*`` or any listed tag equal to ``tag`` under the weak comparison."""
    if not if_none_match:
        return False
    if if_none_match.strip() == "*":
        return True
    bare = tag.removeprefix("W/")
    return any(t.strip().removeprefix("W/") == bare for t in if_none_match.split(","))


def not_modified(request: Request, tag: str, cache: str) -> Response | None:
    """The 304 answer when the client's copy is current (GET and HEAD only), else None."""
    if request.method not in ("GET", "HEAD") or not matches(request.headers.get("if-none-match"), tag):
        return None
    return Response(status_code=304, headers={"ETag": tag, "Cache-Control": cache})


class DefaultCacheControl:
    """Pure ASGI: a read answer that names no caching of its own gets ``private, no-cache`` (``public`` with
    --public-reads), so no shared cache keeps a token-protected answer; errors and writes get ``no-store``."""

    def __init__(self, app: ASGIApp, settings: Callable[[], ApiSettings]) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        read = scope.get("method") in ("GET", "HEAD")

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                if not any(k.lower() == b"cache-control" for k, _ in headers):
                    ok = read and int(message["status"]) in (200, 203, 206, 304)
                    value = cache_control(self.settings()) if ok else "no-store"
                    headers.append((b"cache-control", value.encode()))
                    message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_wrapper)
