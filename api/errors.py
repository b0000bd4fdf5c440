"""The one map from ledger errors to HTTP status codes, installed as the app's exception handlers."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ledger.errors import Category, LedgerError

__all__ = ["error_body", "install_error_handlers", "status_for"]

_BY_CODE = {
    "non-canonical-json": 400,  # the body is not (strict) JSON
    "artifact-corrupt": 500,  # the store holds bytes that no longer match their address
    "chain-broken": 500,
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


def status_for(error: LedgerError) -> int:
    """HTTP status of a ledger error: by its stable code first, else by its category."""
    return _BY_CODE.get(error.code) or _BY_CATEGORY.get(error.category, 500)


def error_body(code: str, message: str, hint: str = "") -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "hint": hint}}


async def _ledger_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, LedgerError)
    status = status_for(exc)
    headers = {"WWW-Authenticate": 'Bearer realm="evidence-ledger"'} if status == 401 else None
    return JSONResponse(error_body(exc.code, exc.message, exc.hint_text), status_code=status, headers=headers)


async def _validation_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0] if exc.errors() else {}
    where = ".".join(str(p) for p in first.get("loc", ()))
    return JSONResponse(
        error_body("bad-input", f"{where}: {first.get('msg', 'invalid request')}"), status_code=422
    )


async def _http_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = {404: "not-found", 405: "method-not-allowed"}.get(exc.status_code, "http-error")
    return JSONResponse(
        error_body(code, str(exc.detail)), status_code=exc.status_code, headers=getattr(exc, "headers", None)
    )


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(LedgerError, _ledger_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
