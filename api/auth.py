"""Who may read, who may write (the entry's own signature is checked later).

A client sends ``Authorization: Bearer TOKEN``. A browser signs in once with a token (``/signin``): the
token is then kept in an HttpOnly, SameSite=Strict session cookie that is verified on every request, so a
revoked token ends its sessions at once. The cookie grants reads only; writes always need the header.
Forms that change state (sign-out) carry an anti-forgery token derived from the session's token.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ledger.api.deps import Served, ServedDep
from ledger.errors import ForbiddenError
from ledger.service import Ledger
from ledger.tokens import TokenRecord, live_token, require_role, token_digest

__all__ = [
    "SESSION_COOKIE",
    "Admin",
    "Reader",
    "WriteToken",
    "Writer",
    "caller",
    "csrf_matches",
    "csrf_token",
    "remember",
    "session_token",
    "writer_of",
]

SESSION_COOKIE = "ledger_session"
_bearer = HTTPBearer(auto_error=False, description="`ledger tokens new NAME --role reader|writer|admin`")


def session_token(request: Request) -> str | None:
    return request.cookies.get(SESSION_COOKIE) or None


def csrf_token(secret: str) -> str:
    """The anti-forgery token of a session (or of a sign-in form's nonce): HMAC-SHA256, never the secret."""
    return hmac.new(secret.encode("utf-8"), b"evidence-ledger csrf v1", hashlib.sha256).hexdigest()


def csrf_matches(secret: str | None, sent: str | None) -> bool:
    return bool(secret and sent) and hmac.compare_digest(csrf_token(secret or ""), sent or "")


def remember(request: Request, record: TokenRecord | None) -> None:
    """Name the caller for the request log."""
    request.state.token_name = record.name if record else "anonymous"


def _token(ledger: Ledger, creds: HTTPAuthorizationCredentials | None) -> TokenRecord:
    return ledger.verify_token(creds.credentials if creds else None)


def read_access(
    request: Request,
    state: ServedDep,
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> TokenRecord | None:
    """Reads are open when the server runs with --public-reads; otherwise any live token may read, sent
    as a bearer token or held by a signed-in browser's session cookie."""
    cookie = session_token(request) if creds is None else None
    if state.settings.public_reads and creds is None and cookie is None:
        remember(request, None)
        return None
    record = state.ledger.verify_token(creds.credentials if creds else cookie)
    require_role(record, "reader")
    remember(request, record)
    return record


def write_access(
    request: Request,
    state: ServedDep,
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> TokenRecord:
    """Writes need a writer (or admin) bearer token; a session cookie never writes."""
    if creds is None and session_token(request):
        raise ForbiddenError("a browser session only reads; writes need `Authorization: Bearer TOKEN`")
    record = _token(state.ledger, creds)
    require_role(record, "writer")
    remember(request, record)
    return record


async def write_token(
    request: Request, creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> str:
    """A write the sequencer authorises as it commits (``Ledger.submit(token=…)``): here only that a
    bearer token was sent (a session cookie never writes); the hash of the token is what is checked,
    in the group's transaction, against the live tokens and the writer role."""
    if creds is None and session_token(request):
        raise ForbiddenError("a browser session only reads; writes need `Authorization: Bearer TOKEN`")
    return token_digest(creds.credentials if creds else None)


def writer_of(request: Request, state: Served, token: str) -> TokenRecord:
    """``write_access`` for a token already sent (a refusal before the commit is answered only to a
    writer: this check comes first, as on every other write)."""
    record = live_token(state.ledger.token_by_hash(token), "writer")
    remember(request, record)
    return record


def admin_access(
    state: ServedDep, creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> TokenRecord:
    """Administration (enrolling a collector host's key) needs an admin token."""
    record = _token(state.ledger, creds)
    require_role(record, "admin")
    return record


def caller(record: TokenRecord | None) -> str:
    return record.name if record else "anonymous"


Reader = Annotated[TokenRecord | None, Depends(read_access)]
Writer = Annotated[TokenRecord, Depends(write_access)]
WriteToken = Annotated[str, Depends(write_token)]
Admin = Annotated[TokenRecord, Depends(admin_access)]
