"""The one map from errors to HTTP answers, installed as the app's exception handlers.

Every error is an RFC 9457 problem document (``application/problem+json``) that carries the ledger's stable
error ``code`` and a ``hint`` that is never empty; a browser (``Accept: text/html``) gets the same facts as
an HTML page. For clients written against the earlier shape, the document also carries the extension member
``error`` = ``{code, message, hint}``.
"""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from ledger.api.auth import SESSION_COOKIE
from ledger.errors import HOME_FAULTS, Category, LedgerError

__all__ = [
    "PROBLEM_JSON",
    "error_body",
    "install_error_handlers",
    "problem",
    "status_for",
    "wants_html",
]

PROBLEM_JSON = "application/problem+json"
_log = logging.getLogger("ledger.api")

_BY_CODE = {
    "non-canonical-json": 400,  # the body is not (strict) JSON
    "key-already-enrolled": 409,  # the key is in the keyring already: the request conflicts with the log
    # the server's own faults (its log, its log clock, its stored bytes, its home's files): never the
    # request's, so a collector keeps what it sent spooled (``ledger.errors.HOME_FAULTS``)
    **{cls.code: 500 for cls in HOME_FAULTS},
}
_BY_CATEGORY: dict[Category, int] = {
    Category.INPUT: 422,
    Category.TOO_LARGE: 413,
    Category.RANGE: 416,
    Category.NOT_FOUND: 404,
    Category.AUTH: 401,
    Category.FORBIDDEN: 403,
    Category.TRUST: 403,  # the entry's signature is not by a key the ledger trusts for its kind
    Category.INTEGRITY: 422,  # e.g. uploaded bytes do not hash to the address they were sent to
    Category.UNAVAILABLE: 501,
    Category.SYSTEM: 503,
}

# What to do next, when the error itself names nothing better: by code first, then by HTTP status.
_HINT_BY_CODE = {
    "artifact-corrupt": "the store's bytes no longer match their address: run `ledger verify` on the server",
    "chain-broken": "the log's hash chain is broken: run `ledger verify` on the server's home",
    "artifact-missing": "upload it first: `PUT /v1/artifacts/{digest}` (or `ledger push`)",
    "entry-not-found": "check the id or prefix; `GET /v1/entries` (or `ledger log`) lists entries",
    "not-found": "check the address; /docs lists every endpoint",
    "method-not-allowed": "the Allow header names the methods this address takes; /docs lists them",
    "unauthenticated": "send `Authorization: Bearer TOKEN` (`ledger tokens new NAME --role reader`), "
    "or sign in at /signin",
    "forbidden": "this token's role may not do this: writes need a writer token "
    "(`ledger tokens new NAME --role writer`)",
    "csrf": "reload the form and send it again (its anti-forgery token was missing or stale)",
}
_HINT_BY_STATUS = {
    400: "send strict JSON (RFC 8259): no duplicate keys, NaN or trailing data",
    401: _HINT_BY_CODE["unauthenticated"],
    403: "this key or token is not trusted for this; `ledger keys list` shows keys and their roles",
    404: _HINT_BY_CODE["not-found"],
    405: _HINT_BY_CODE["method-not-allowed"],
    413: "send less: the server's limits are `ledger serve --max-body` and `--max-artifact`",
    416: "ask for a byte range inside the artifact (HEAD gives its size)",
    422: "check the request against /openapi.json (or /docs)",
    500: "the server's log has the details under this request id",
    501: "this server does not offer that; the server's log has the details",
    503: "retry later; the server's log has the details under this request id",
}


def status_for(error: LedgerError) -> int:
    """HTTP status of a ledger error: by its stable code first, else by its category."""
    return _BY_CODE.get(error.code) or _BY_CATEGORY.get(error.category, 500)


def _hint(code: str, status: int, hint: str = "") -> str:
    return hint or _HINT_BY_CODE.get(code) or _HINT_BY_STATUS.get(status) or "see /docs"


def _title(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def error_body(
    code: str, message: str, hint: str = "", *, status: int = 500, instance: str = ""
) -> dict[str, Any]:
    """The RFC 9457 problem document of an error (with the stable ``code`` and a non-empty ``hint``)."""
    hint = _hint(code, status, hint)
    body: dict[str, Any] = {
        "type": f"/errors/{code}",
        "title": _title(status),
        "status": status,
        "detail": message,
        "code": code,
        "hint": hint,
        "error": {"code": code, "message": message, "hint": hint},
    }
    if instance:
        body["instance"] = instance
    return body


def wants_html(request: Request) -> bool:
    """A browser asking for a page: ``text/html`` accepted ahead of JSON (``*/*`` alone is not a browser)."""
    accept = request.headers.get("accept", "").lower()
    if "text/html" not in accept:
        return False
    json_at = min(
        (accept.find(t) for t in ("application/json", "application/problem+json") if t in accept), default=-1
    )
    return json_at < 0 or accept.find("text/html") < json_at


def _request_id(request: Request) -> str:
    return str(request.scope.get("state", {}).get("request_id", ""))


def problem(
    request: Request,
    status: int,
    code: str,
    message: str,
    hint: str = "",
    headers: dict[str, str] | None = None,
) -> Response:
    """The answer to a failed request: problem+json, an HTML page for a browser, or a sign-in redirect."""
    headers = dict(headers or {})
    if status == 401:
        headers.setdefault("WWW-Authenticate", 'Bearer realm="evidence-ledger"')
    rid = _request_id(request)
    if wants_html(request):
        path = request.url.path
        if status == 401 and not path.startswith("/v1/") and request.method in ("GET", "HEAD"):
            target = path + (f"?{request.url.query}" if request.url.query else "")
            resp = RedirectResponse(f"/signin?next={quote(target, safe='')}", status_code=303)
            if request.cookies.get(SESSION_COOKIE):  # a revoked or unknown token's session ends here
                resp.delete_cookie(SESSION_COOKIE, path="/")
            return resp
        from ledger.api.pages import render_error

        return render_error(request, status, code, message, _hint(code, status, hint), rid, headers)
    body = error_body(code, message, hint, status=status, instance=request.url.path)
    if rid:
        body["request_id"] = rid
    return JSONResponse(body, status_code=status, headers=headers, media_type=PROBLEM_JSON)


async def _ledger_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, LedgerError)
    return problem(request, status_for(exc), exc.code, exc.message, exc.hint_text)


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0] if exc.errors() else {}
    where = ".".join(str(p) for p in first.get("loc", ()))
    return problem(request, 422, "bad-input", f"{where}: {first.get('msg', 'invalid request')}")


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    code = {404: "not-found", 405: "method-not-allowed"}.get(exc.status_code, "http-error")
    if exc.status_code == 304:  # not an error: conditional GETs answer it without a body
        return Response(status_code=304, headers=getattr(exc, "headers", None))
    return problem(request, exc.status_code, code, str(exc.detail), headers=getattr(exc, "headers", None))


async def _unexpected(request: Request, exc: Exception) -> Response:
    _log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return problem(request, 500, "internal", f"the server failed: {type(exc).__name__}")


def describe_code(code: str) -> dict[str, Any] | None:
    """What an error code means (the page its problem ``type`` names), from the error registry."""
    todo: list[type[LedgerError]] = [LedgerError]
    while todo:
        cls = todo.pop()
        if cls.code == code:
            status = _BY_CODE.get(code) or _BY_CATEGORY.get(cls.category, 500)
            doc = (
                (cls.__doc__ or "").strip()
                if cls.__doc__ != LedgerError.__doc__ or cls is LedgerError
                else ""
            )
            return {
                "code": code,
                "status": status,
                "title": _title(status),
                "category": str(cls.category),
                "about": doc,
                "hint": _hint(code, status, cls.hint),
            }
        todo.extend(cls.__subclasses__())
    http_codes = {"not-found": 404, "method-not-allowed": 405, "http-error": 400, "internal": 500}
    if code in http_codes:
        status = http_codes[code]
        return {
            "code": code,
            "status": status,
            "title": _title(status),
            "category": "http",
            "about": "",
            "hint": _hint(code, status),
        }
    return None


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(LedgerError, _ledger_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
