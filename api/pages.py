"""What every reviewer page shares: the template environment, its filters, the page and error responses.

Pages are server-rendered HTML without JavaScript; a strict Content-Security-Policy (no scripts at all)
holds that, and every page is ``private`` (or ``public`` with ``--public-reads``) and revalidated.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from ledger.api.auth import csrf_token, session_token
from ledger.api.charts import bar_chart, line_chart

__all__ = ["CSP", "page", "render_error", "templates", "verdict_class"]

CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
templates = Jinja2Templates(directory=str(Path(__file__).resolve().parent / "templates"))


def verdict_class(word: str | None) -> str:
    """The CSS class of a verdict word: QUALIFIED, INCONCLUSIVE and NOT QUALIFIED look different."""
    w = (word or "").upper()
    if w.startswith("QUALIFIED"):
        return "v-qualified"
    if w.startswith("INCONCLUSIVE"):
        return "v-inconclusive"
    if w.startswith("NOT QUALIFIED"):
        return "v-not-qualified"
    return "v-unknown"


def _status_class(status: Any) -> str:
    s = str(status or "").lower()
    if s in ("passed", "pass", "ok", "true", "qualified", "accepted", "succeeded"):
        return "ok"
    if s in ("missing", "not_run", "inconclusive", "not_authorized", "running"):
        return "warn"
    return "bad"


templates.env.filters["pretty"] = lambda v: json.dumps(v, indent=2, sort_keys=True, ensure_ascii=False)
templates.env.filters["vclass"] = verdict_class
templates.env.filters["sclass"] = _status_class
templates.env.filters["short"] = lambda v, n=12: str(v or "")[:n]
templates.env.globals["line_chart"] = line_chart
templates.env.globals["bar_chart"] = bar_chart


def _cache(request: Request) -> str:
    served = request.app.state.served
    return f"{'public' if served.settings.public_reads else 'private'}, no-cache"


def page(request: Request, name: str, context: dict[str, Any], status: int = 200) -> HTMLResponse:
    token = session_token(request)
    ctx = {
        "user": request.scope.get("state", {}).get("token_name") if token else None,
        "csrf": csrf_token(token) if token else "",
        **context,
    }
    resp = templates.TemplateResponse(request, name, ctx, status_code=status)
    resp.headers["Cache-Control"] = _cache(request)
    resp.headers["Content-Security-Policy"] = CSP
    resp.headers["X-Content-Type-Options"] = "nosniff"
    resp.headers["Referrer-Policy"] = "same-origin"
    return resp


def render_error(
    request: Request,
    status: int,
    code: str,
    message: str,
    hint: str,
    request_id: str,
    headers: dict[str, str],
) -> HTMLResponse:
    resp = page(
        request,
        "error.html",
        {"status": status, "code": code, "message": message, "hint": hint, "request_id": request_id},
        status=status,
    )
    resp.headers["Cache-Control"] = "no-store"
    for k, v in headers.items():
        resp.headers[k] = v
    return resp
