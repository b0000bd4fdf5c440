"""What the policy engine needs of a ledger, as a Protocol: the policy never imports the service.

``ledger.service.Ledger`` satisfies both protocols (mypy checks it where the service passes itself in);
the policy modules type their ``ledger`` parameter with them, so the service sits above the policy.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, BinaryIO, Protocol

from ledger.entries import ArtifactRef
from ledger.hashing import Digest
from ledger.keyring import Keyring
from ledger.log import Checkpoint
from ledger.logged import LoggedEntry
from ledger.signing import Envelope, SigningKey
from ledger.store.base import ArtifactStore, StoredArtifact

__all__ = ["FixtureLedger", "PolicyLedger", "PolicyRepo"]


class PolicyRepo(Protocol):
    """The reads a verdict makes of the log tables: ``ledger.repo.LogRepo`` (SQL),
    ``ledger.reads.SqlitePolicyRepo`` (stdlib sqlite3) and ``ledger.bundle.MemoryRepo`` (a reviewer
    bundle's rows, in memory) are each one. ``conn`` is what ``read()`` yields (a database connection, or
    nothing).

    Evidence tuples are (seq, entry_id, kind, signer, logged_at, envelope), and their seq and logged_at are
    the ones the log committed: each row's Merkle leaf commits its log record (index, logged_at, entry id,
    kind, signer), and an implementation over a database checks every row it returns against it
    (``ledger.reads.committed_rows``), raising ``IntegrityError`` for a row edited behind the log's back
    (raw SQL on its ``logged_at`` column …) — the policy never judges a position or a log time the log
    did not commit. ``logged_at(conn, seq)`` is checked the same way."""

    def read(self, *, snapshot: bool = False) -> AbstractContextManager[Any]: ...

    def subject_rows(self, conn: Any, subject: dict[str, str], n: int) -> list[tuple[Any, ...]]: ...

    def linked_rows(
        self, conn: Any, subject: dict[str, str], n: int, subject_entries: int
    ) -> list[tuple[Any, ...]]: ...

    def logged_at(self, conn: Any, seq: int) -> str: ...

    def host_rows(
        self, conn: Any, kinds: Sequence[str], hosts: Sequence[str], n: int
    ) -> list[tuple[Any, ...]]: ...

    def subject_hosts(
        self,
        conn: Any,
        subject: dict[str, str],
        n: int,
        seqs: Sequence[int] = (),
        among: Sequence[str] | None = None,
    ) -> list[str]: ...

    def kind_hosts(self, conn: Any, kinds: Sequence[str], n: int) -> list[str]: ...

    def subject_kind_rows(
        self,
        conn: Any,
        subject: dict[str, str],
        kinds: Sequence[str],
        n: int,
        *,
        logged_since: str | None = None,
    ) -> list[tuple[Any, ...]]:
        """Evidence tuples below ``n`` of these kinds whose subject has every field of ``subject``, in seq
        order; with ``logged_since`` (an RFC 3339 UTC time as the log writes it) only those the log took at
        or after it."""
        ...

    def referrer_rows(self, conn: Any, entry_id: str, n: int) -> list[tuple[Any, ...]]:
        """Evidence tuples below ``n`` of the entries that reference ``entry_id`` (any rel), in seq order."""
        ...

    def checkpoint_root(self, size: int, conn: Any | None = None) -> str | None: ...

    def tree_root(self, size: int, conn: Any | None = None) -> bytes:
        """The Merkle root of the log's first ``size`` entries computed from what the database stores (its
        hash tiles and leaf hashes: O(log n) reads, no checkpoint row trusted); ``IntegrityError`` where
        the log lacks leaves below ``size``."""
        ...


class PolicyLedger(Protocol):
    """Reads a verdict or a routing check makes, and the append that records a verdict."""

    @property
    def repo(self) -> PolicyRepo: ...

    @property
    def store(self) -> ArtifactStore: ...

    def size(self) -> int: ...

    def keyring(self, conn: Any | None = None, *, at_size: int | None = None) -> Keyring: ...

    def checkpoint(self, *, size: int | None = None, store: bool = True) -> Checkpoint: ...

    def signed_checkpoint(self, *, size: int | None = None) -> Checkpoint: ...

    def held(self) -> Checkpoint | None:
        """The checkpoint the home holds outside the database (``HOME/checkpoint``), its signature checked
        with the log key; None when it holds none (a bundle). ``ledger.reads.check_extends_held`` refuses a
        log that no longer extends it."""
        ...

    def get(self, id_or_prefix: str) -> LoggedEntry: ...

    def query(
        self,
        *,
        subject: dict[str, str] | None = None,
        kind: str | None = None,
        signer: str | None = None,
        since: str | None = None,
        until: str | None = None,
        after_seq: int | None = None,
        at_size: int | None = None,
        limit: int | None = 100,
        descending: bool = False,
    ) -> list[LoggedEntry]: ...

    def referrers(self, entry_id: str, rel: str | None = None) -> list[LoggedEntry]: ...

    def make_statement(
        self,
        kind: str,
        subject: dict[str, str],
        payload: dict[str, Any],
        *,
        artifacts: Sequence[ArtifactRef] = (),
        refs: Sequence[tuple[str, str]] = (),
        collected_at: datetime | str | None = None,
        kind_version: int = 1,
        host: str | None = None,
    ) -> dict[str, Any]: ...

    def sign(self, statement: dict[str, Any], key: SigningKey | str) -> Envelope: ...

    def append(
        self, envelopes: Sequence[Envelope | bytes | dict[str, Any]], *, logged_at: datetime | None = None
    ) -> list[LoggedEntry]: ...


class FixtureLedger(PolicyLedger, Protocol):
    """What a policy fixture needs besides: keys kept in the home, artifacts put in the store."""

    @property
    def admin_key_name(self) -> str: ...

    def signing_key(self, name: str) -> SigningKey: ...

    def keep_key(self, key: SigningKey) -> None: ...

    def put_artifact(
        self,
        stream: BinaryIO,
        *,
        sha256: bool = False,
        expected: Digest | None = None,
        max_size: int | None = None,
    ) -> StoredArtifact: ...

    def close(self) -> None: ...
