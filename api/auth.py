"""Bearer-token dependencies: who may read, who may write (the entry's own signature is checked later)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ledger.api.deps import ServedDep
from ledger.service import Ledger
from ledger.tokens import TokenRecord, require_role

__all__ = ["Admin", "Reader", "Writer", "caller"]

_bearer = HTTPBearer(auto_error=False, description="`ledger tokens new NAME --role reader|writer|admin`")


def _token(ledger: Ledger, creds: HTTPAuthorizationCredentials | None) -> TokenRecord:
    return ledger.verify_token(creds.credentials if creds else None)


def read_access(
    state: ServedDep, creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> TokenRecord | None:
    """Reads are open when the server runs with --public-reads; otherwise any live token may read."""
    if state.settings.public_reads and creds is None:
        return None
    record = _token(state.ledger, creds)
    require_role(record, "reader")
    return record


def write_access(
    state: ServedDep, creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> TokenRecord:
    """Writes need a writer (or admin) token."""
    record = _token(state.ledger, creds)
    require_role(record, "writer")
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
Admin = Annotated[TokenRecord, Depends(admin_access)]
