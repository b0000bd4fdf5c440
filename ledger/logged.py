"""One entry as the log holds it: the signed statement plus the log's record around it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ledger.entries import Statement, parse_statement, parse_time
from ledger.errors import ChainBrokenError, LedgerError
from ledger.log import EntryId
from ledger.signing import parse_envelope

__all__ = ["LoggedEntry", "entry_from_row"]


@dataclass(frozen=True)
class LoggedEntry:
    """One entry as the log holds it: the signed statement plus the log's record around it."""

    seq: int
    entry_id: EntryId
    statement: Statement
    envelope: bytes
    signer: str
    logged_at: str
    prev_hash: str
    chain_hash: str
    duplicate: bool = False

    @property
    def kind(self) -> str:
        return self.statement.kind

    def to_json(self, signer_name: str | None = None) -> dict[str, Any]:
        st = self.statement
        return {
            "id": self.entry_id,
            "seq": self.seq,
            "kind": st.kind,
            "kind_version": st.kind_version,
            "subject": dict(st.subject),
            "payload": st.payload,
            "artifacts": [a.model_dump(mode="json", exclude_none=True) for a in st.artifacts],
            "refs": [r.model_dump(mode="json") for r in st.refs],
            "signer": self.signer,
            "signer_name": signer_name,
            "collected_at": st.collected_at,
            "logged_at": self.logged_at,
            # How long before it was logged the collector says it saw this: large values mark
            # back-dated or long-spooled evidence (DESIGN §3).
            "logged_after_s": round(
                (parse_time(self.logged_at) - parse_time(st.collected_at)).total_seconds(), 6
            ),
            "collector": st.collector.model_dump(mode="json"),
            "chain_hash": self.chain_hash,
        }


def entry_from_row(row: Any) -> LoggedEntry:
    """Parse a ``log_entries`` row (``ledger.repo``) into the entry it records. The row was checked when it
    was appended: one that no longer parses is the database's corruption, never the reader's input, so it is
    an integrity error (``ChainBrokenError``: an API answers 500, not a 4xx that blames the client) naming
    the entry."""
    try:
        env = parse_envelope(bytes(row.envelope))
        statement = parse_statement(env.statement())
    except (LedgerError, ValueError, TypeError) as e:
        why = f"{e.code}: {e.message}" if isinstance(e, LedgerError) else f"{type(e).__name__}: {e}"
        raise ChainBrokenError(
            f"the log's stored entry {row.entry_id} (seq {row.seq}) is corrupt: its envelope no longer "
            f"parses ({why})",
            hint="the database was altered outside the ledger: run `ledger verify` on the log's home",
        ) from e
    return LoggedEntry(
        seq=row.seq,
        entry_id=EntryId(row.entry_id),
        statement=statement,
        envelope=bytes(row.envelope),
        signer=row.signer,
        logged_at=row.logged_at,
        prev_hash=row.prev_hash,
        chain_hash=row.chain_hash,
    )
