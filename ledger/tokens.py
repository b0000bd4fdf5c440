"""API bearer tokens: created once, stored only as a hash, verified per request, revoked by name."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ledger.db import T_TOKENS, read_connection, write_transaction
from ledger.entries import format_time, now_utc
from ledger.errors import AuthError, ForbiddenError, InputError, KeyNotFoundError

__all__ = [
    "TOKEN_COLUMNS",
    "TOKEN_ROLES",
    "TokenRecord",
    "create_token",
    "hash_token",
    "list_tokens",
    "live_token",
    "require_role",
    "revoke_token",
    "token_digest",
    "token_of_row",
    "tokens_by_hash",
    "verify_token",
]


# Each role includes the ones before it: a writer may read, an admin may write.
TOKEN_ROLES = ("reader", "writer", "admin")
_PREFIX = "elt_"


@dataclass(frozen=True)
class TokenRecord:
    id: int
    name: str
    role: str
    created_at: str
    revoked_at: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "role": self.role,
            "created_at": self.created_at,
            "revoked_at": self.revoked_at,
        }


def hash_token(token: str) -> str:
    """SHA-256 of the token text: tokens carry 256 random bits, so a fast hash is enough."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _record(row: Any) -> TokenRecord:
    return TokenRecord(int(row.id), row.name, row.role, row.created_at, row.revoked_at)


def create_token(engine: Engine, name: str, role: str) -> tuple[str, TokenRecord]:
    """Make a new token; the plain text is returned once and never stored."""
    if role not in TOKEN_ROLES:
        raise InputError(f"token role must be one of {', '.join(TOKEN_ROLES)}, not {role!r}")
    if not name or len(name) > 100:
        raise InputError("token name must be 1..100 characters")
    token = _PREFIX + secrets.token_urlsafe(32)
    created = format_time(now_utc())
    with write_transaction(engine) as conn:
        result = conn.execute(
            sa.insert(T_TOKENS).values(name=name, role=role, token_hash=hash_token(token), created_at=created)
        )
        pk = result.inserted_primary_key
    assert pk is not None
    return token, TokenRecord(int(pk[0]), name, role, created, None)


# the columns ``tokens_by_hash`` reads, in order (the PostgreSQL sequencer reads the same in its pipeline)
TOKEN_COLUMNS = ("id", "name", "role", "created_at", "revoked_at", "token_hash")
_BY_HASHES = sa.select(*(T_TOKENS.c[c] for c in TOKEN_COLUMNS)).where(
    T_TOKENS.c.token_hash.in_(sa.bindparam("hashes", expanding=True))
)  # built once: every read request checks its token with it


def token_digest(token: str | None) -> str:
    """The stored hash of a sent token, or AuthError when none was sent."""
    if not token or not token.strip():
        raise AuthError("this endpoint needs a bearer token", hint="send `Authorization: Bearer <token>`")
    return hash_token(token.strip())


def tokens_by_hash(conn: sa.Connection, digests: Collection[str]) -> dict[str, TokenRecord]:
    """The stored tokens (live or revoked) with these hashes."""
    if not digests:
        return {}
    rows = conn.execute(_BY_HASHES, {"hashes": sorted(digests)})
    return {str(r[5]): token_of_row(r) for r in rows}


def token_of_row(row: Sequence[Any]) -> TokenRecord:
    """A ``TOKEN_COLUMNS`` row as a record."""
    return TokenRecord(int(row[0]), str(row[1]), str(row[2]), str(row[3]), row[4])


def live_token(found: TokenRecord | None, role: str | None = None) -> TokenRecord:
    """The record of a live token found by its hash (with ``role`` when given), or AuthError (unknown or
    revoked) / ForbiddenError (a lesser role)."""
    if found is None:
        raise AuthError("unknown bearer token")
    if found.revoked_at is not None:
        raise AuthError(f"token {found.name!r} was revoked at {found.revoked_at}")
    if role is not None:
        require_role(found, role)
    return found


def verify_token(engine: Engine, token: str | None) -> TokenRecord:
    """The record of a live token, or AuthError (missing, unknown or revoked)."""
    digest = token_digest(token)
    with read_connection(engine) as conn:
        return live_token(tokens_by_hash(conn, [digest]).get(digest))


def require_role(record: TokenRecord, role: str) -> None:
    """Raise ForbiddenError unless the token's role includes ``role``."""
    if TOKEN_ROLES.index(record.role) < TOKEN_ROLES.index(role):
        raise ForbiddenError(f"token {record.name!r} has role {record.role}; this needs {role}")


def list_tokens(engine: Engine) -> list[TokenRecord]:
    with engine.connect() as conn:
        return [_record(r) for r in conn.execute(sa.select(T_TOKENS).order_by(T_TOKENS.c.id))]


def revoke_token(engine: Engine, name_or_id: str) -> list[TokenRecord]:
    """Revoke every live token with this name (or the one with this id); returns what was revoked."""
    live = [
        t
        for t in list_tokens(engine)
        if t.revoked_at is None and (t.name == name_or_id or str(t.id) == name_or_id)
    ]
    if not live:
        raise KeyNotFoundError(f"no live token named {name_or_id!r}", hint="`ledger tokens list` shows them")
    when = format_time(now_utc())
    with write_transaction(engine) as conn:
        conn.execute(
            sa.update(T_TOKENS).where(T_TOKENS.c.id.in_([t.id for t in live])).values(revoked_at=when)
        )
    return [TokenRecord(t.id, t.name, t.role, t.created_at, when) for t in live]
