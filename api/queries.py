"""Read-only summaries the reviewer pages need that the service does not offer as one call."""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from ledger.errors import InputError
from ledger.db import T_ENTRIES, T_SUBJECTS
from ledger.service import Ledger

__all__ = ["SubjectSummary", "subjects"]


@dataclass(frozen=True)
class SubjectSummary:
    field: str
    value: str
    entries: int
    last_seq: int
    last_logged_at: str


def subjects(ledger: Ledger, *, field: str | None = None, limit: int = 500) -> list[SubjectSummary]:
    """Distinct subject FIELD=VALUE pairs (key entries excluded), most recently active first."""
    q = (
        sa.select(
            T_SUBJECTS.c.field,
            T_SUBJECTS.c.value,
            sa.func.count().label("n"),
            sa.func.max(T_SUBJECTS.c.seq).label("last"),
        )
        .where(T_SUBJECTS.c.field != "key")
        .group_by(T_SUBJECTS.c.field, T_SUBJECTS.c.value)
        .order_by(sa.desc("last"))
        .limit(limit)
    )
    if field:
        if "\x00" in field:
            raise InputError("NUL characters are not allowed in a subject field")
        q = q.where(T_SUBJECTS.c.field == field)
    with ledger.engine.connect() as conn:
        rows = conn.execute(q).all()
        when: dict[int, str] = (
            dict(
                conn.execute(
                    sa.select(T_ENTRIES.c.seq, T_ENTRIES.c.logged_at).where(
                        T_ENTRIES.c.seq.in_([r.last for r in rows])
                    )
                )
                .tuples()
                .all()
            )
            if rows
            else {}
        )
    return [SubjectSummary(r.field, r.value, int(r.n), int(r.last), when.get(r.last, "")) for r in rows]
