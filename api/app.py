"""The FastAPI application: a thin HTTP adapter over ``ledger.service``."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ledger import __version__
from ledger.api import routes_artifacts, routes_entries, routes_log, routes_ops, routes_policy, views
from ledger.api.deps import Served, served
from ledger.api.errors import install_error_handlers
from ledger.api.metrics import Metrics
from ledger.api.settings import ApiSettings
from ledger.service import Ledger

__all__ = ["Served", "create_app", "create_app_from_env", "served"]


class _MetricsMiddleware:
    """Count requests and time them by route template (pure ASGI, so streaming bodies are untouched)."""

    def __init__(self, app: ASGIApp, metrics: Callable[[], Metrics]) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", "unmatched")
            self.metrics().observe(scope.get("method", ""), template, status, time.perf_counter() - start)


def open_served_ledger(settings: ApiSettings) -> Ledger:
    return Ledger.open(Path(settings.home), database_url=settings.database_url, store=settings.store)


def create_app(settings: ApiSettings, ledger: Ledger | None = None) -> FastAPI:
    """Build the app for one ledger (opened from ``settings`` unless given)."""
    app = FastAPI(
        title="Evidence ledger",
        version=__version__,
        description="Signed, append-only evidence for qualifying LLM inference backends. "
        "JSON field names equal the CLI's `--json` output.",
    )
    state = Served(settings, ledger or open_served_ledger(settings), Metrics())
    app.state.served = state
    state.metrics.track_size(state.ledger)
    install_error_handlers(app)
    for module in (routes_ops, routes_entries, routes_artifacts, routes_log, routes_policy, views):
        app.include_router(module.router)
    app.include_router(routes_log.tiles)  # C2SP tlog-tiles at the server's root
    app.add_middleware(_MetricsMiddleware, metrics=lambda: state.metrics)
    return app


def create_app_from_env() -> FastAPI:
    """Factory for uvicorn worker processes (``ledger serve --workers N``)."""
    return create_app(ApiSettings.from_env())
