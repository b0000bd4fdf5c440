"""Browser sign-in with an API token: a form, an HttpOnly SameSite=Strict session cookie, sign-out.

The sign-in form is protected against login forgery by a double-submit nonce (a cookie and a form field
that must agree); sign-out needs the session's anti-forgery token in the form. The session cookie holds
the token itself and is verified on every request, so ``ledger tokens revoke`` ends a session at once.
"""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from ledger.api.auth import SESSION_COOKIE, csrf_matches, csrf_token, session_token
from ledger.api.deps import ServedDep
from ledger.api.pages import page
from ledger.errors import ForbiddenError, LedgerError
from ledger.tokens import require_role

__all__ = ["router"]

router = APIRouter(include_in_schema=False)
_NONCE_COOKIE = "ledger_signin"
_SESSION_SECONDS = 12 * 3600


def _safe_next(target: str | None) -> str:
    """Only a path of this site (never ``//host`` or a scheme): no open redirect."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def _form(request: Request, next_path: str, message: str = "", status: int = 200) -> HTMLResponse:
    nonce = secrets.token_urlsafe(24)
    resp = page(
        request,
        "signin.html",
        {"next": next_path, "csrf_form": csrf_token(nonce), "message": message},
        status=status,
    )
    resp.headers["Cache-Control"] = "no-store"
    resp.set_cookie(
        _NONCE_COOKIE,
        nonce,
        max_age=900,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/signin",
    )
    return resp


@router.get("/signin", response_class=HTMLResponse)
def signin_form(request: Request, next: Annotated[str | None, Query()] = None) -> HTMLResponse:
    return _form(request, _safe_next(next))


@router.post("/signin")
def signin(
    request: Request,
    state: ServedDep,
    token: Annotated[str, Form(max_length=500)] = "",
    csrf: Annotated[str, Form(max_length=200)] = "",
    next: Annotated[str, Form(max_length=2000)] = "/",
) -> Response:
    target = _safe_next(next)
    if not csrf_matches(request.cookies.get(_NONCE_COOKIE), csrf):
        return _form(request, target, "The form was stale or forged; sign in again.", status=403)
    try:
        record = state.ledger.verify_token(token.strip())
        require_role(record, "reader")
    except LedgerError as e:
        return _form(request, target, f"Not signed in: {e.message}.", status=401)
    resp = RedirectResponse(target, status_code=303)
    resp.set_cookie(
        SESSION_COOKIE,
        token.strip(),
        max_age=_SESSION_SECONDS,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    resp.delete_cookie(_NONCE_COOKIE, path="/signin")
    return resp


@router.post("/signout")
def signout(request: Request, csrf: Annotated[str, Form(max_length=200)] = "") -> Response:
    if not csrf_matches(session_token(request), csrf):
        raise ForbiddenError(
            "sign-out needs the page's anti-forgery token", hint="use the page's sign-out button"
        )
    resp = RedirectResponse("/signin", status_code=303)
    resp.delete_cookie(SESSION_COOKIE, path="/")
    return resp
