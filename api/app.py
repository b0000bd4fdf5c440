"""The FastAPI application: a thin HTTP adapter over ``ledger.service``."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fastapi_offline
from fastapi import Depends, FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ledger import __version__
from ledger.api import routes_artifacts, routes_entries, routes_log, routes_ops, routes_policy, session, views
from ledger.api.caching import DefaultCacheControl
from ledger.api.deps import Served, known_query, served
from ledger.api.errors import install_error_handlers
from ledger.api.metrics import Metrics
from ledger.api.models import PROBLEM
from ledger.api.requestlog import RequestLogMiddleware, configure_logging
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


_DOCS_ASSETS = Path(fastapi_offline.__file__).resolve().parent / "static"  # Swagger UI and ReDoc bundles
_DOCS_URL = "/static/docs"


# ReDoc's side menu shows Redocly's logo from its CDN: an empty image instead (its onError hides it)
REDOC_CDN_LOGO = b'src:"https://cdn.redoc.ly/redoc/logo-mini.svg"'
REDOC_NO_LOGO = b'src:"data:,"'


def _redoc_js() -> bytes:
    """The ReDoc bundle with its one fetched external URL (the logo) removed; a bundle without that URL
    (another fastapi-offline release) is served as it is, and the docs test fails on any external fetch."""
    return (_DOCS_ASSETS / "redoc.standalone.js").read_bytes().replace(REDOC_CDN_LOGO, REDOC_NO_LOGO)


def _offline_docs(app: FastAPI) -> None:
    """/docs (Swagger UI) and /redoc from assets the app serves itself (the fastapi-offline package): no
    CDN, so they work on a machine without internet. Routes as FastAPI's own docs (GET and HEAD)."""
    redoc_js = _redoc_js()

    async def redoc_script(_request: Request) -> Response:
        return Response(
            redoc_js, media_type="text/javascript", headers={"Cache-Control": "public, max-age=86400"}
        )

    # before the mount: this path is served patched, every other asset as the package ships it
    app.add_route(f"{_DOCS_URL}/redoc.standalone.js", redoc_script, include_in_schema=False)
    app.mount(_DOCS_URL, StaticFiles(directory=_DOCS_ASSETS), name="docs-assets")

    def base(request: Request) -> str:
        return str(request.scope.get("root_path", "")).rstrip("/")

    async def swagger(request: Request) -> HTMLResponse:
        root = base(request)
        return get_swagger_ui_html(
            openapi_url=f"{root}/openapi.json",
            title=f"{app.title} - Swagger UI",
            oauth2_redirect_url=f"{root}/docs/oauth2-redirect",
            swagger_js_url=f"{root}{_DOCS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{_DOCS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{root}{_DOCS_URL}/favicon.png",
            # no badge from validator.swagger.io: nothing is fetched from outside the app
            swagger_ui_parameters={"validatorUrl": None},
        )

    async def oauth2_redirect(_request: Request) -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    async def redoc(request: Request) -> HTMLResponse:
        root = base(request)
        return get_redoc_html(
            openapi_url=f"{root}/openapi.json",
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{root}{_DOCS_URL}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{_DOCS_URL}/favicon.png",
            with_google_fonts=False,
        )

    app.add_route("/docs", swagger, include_in_schema=False)
    app.add_route("/docs/oauth2-redirect", oauth2_redirect, include_in_schema=False)
    app.add_route("/redoc", redoc, include_in_schema=False)


def open_served_ledger(settings: ApiSettings) -> Ledger:
    return Ledger.open(Path(settings.home), database_url=settings.database_url, store=settings.store)


def create_app(settings: ApiSettings, ledger: Ledger | None = None) -> FastAPI:
    """Build the app for one ledger (opened from ``settings`` unless given)."""
    app = FastAPI(
        title="Evidence ledger",
        version=__version__,
        description="Signed, append-only evidence for qualifying LLM inference backends. "
        "JSON field names equal the CLI's `--json` output. Errors are RFC 9457 problem documents "
        "(`application/problem+json`) with the ledger's stable error `code` and a `hint`.",
        docs_url=None,  # served by _offline_docs
        redoc_url=None,
        dependencies=[Depends(known_query)],  # a /v1/ endpoint refuses a query parameter it does not take
    )
    _offline_docs(app)
    state = Served(settings, ledger or open_served_ledger(settings), Metrics())
    app.state.served = state
    state.metrics.track_size(state.ledger)
    install_error_handlers(app)
    # a refused request's body is ``ErrorOut`` (``PROBLEM``), never FastAPI's HTTPValidationError
    errors: dict[int | str, dict[str, Any]] = {422: PROBLEM}
    for module in (routes_ops, routes_entries, routes_artifacts, routes_log, routes_policy, session, views):
        app.include_router(module.router, responses=errors)
    app.include_router(routes_log.tiles, responses=errors)  # C2SP tlog-tiles at the server's root
    app.add_middleware(_MetricsMiddleware, metrics=lambda: state.metrics)
    app.add_middleware(DefaultCacheControl, settings=lambda: state.settings)
    app.add_middleware(RequestLogMiddleware)  # outermost: every request gets its id first
    return app


def create_app_from_env() -> FastAPI:
    """Factory for uvicorn worker processes (``ledger serve --workers N``)."""
    settings = ApiSettings.from_env()
    configure_logging(settings.log_format)
    return create_app(settings)
