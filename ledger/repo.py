"""Every query on the log tables, in one place: the service, verification, the policy and the API call these.

The log tables (``log_entries``, ``entry_subjects``, ``entry_refs``, ``entry_artifacts``, ``checkpoints``,
``tiles``) are append-only. A ``LogRepo`` wraps one engine; its methods take an open connection where the
caller needs several reads to see one snapshot (or a write transaction), and open their own otherwise.
Rows come back as SQLAlchemy rows or plain tuples; parsing them is the caller's business.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ledger.db import (
    LOG_LOCK_KEY,
    T_ARTIFACTS,
    T_CHECKPOINTS,
    T_COSIGNATURES,
    T_ENTRIES,
    T_REFS,
    T_SUBJECTS,
    T_TILES,
    T_TOKENS,
    blob,
    lock_log,
    read_connection,
    write_transaction,
)
from ledger.errors import ChainBrokenError, TileMismatchError
from ledger.log import checked_leaf as log_checked_leaf
from ledger.reads import (
    committed_key_rows,
    committed_rows,
    first_logged_since,
    gap_error,
    key_candidates,
    missing_row_error,
    record_leaf_hex,
    uncommitted_error,
)
from ledger.tiles import tile_path, tile_span
from ledger.tokens import TOKEN_COLUMNS, TokenRecord, token_of_row, tokens_by_hash

__all__ = [
    "EVIDENCE_COLUMNS",
    "EntryFilter",
    "Head",
    "KeysSince",
    "LogRepo",
    "RangeRows",
    "RepoTiles",
    "SubjectSummary",
]

# ``tokens_by_hash`` as the PostgreSQL sequencer pipelines it: the same columns, in the same order (the
# names are constants of the schema, never input)
_TOKENS_BY_HASH = f"SELECT {', '.join(TOKEN_COLUMNS)} FROM {T_TOKENS.name} WHERE token_hash = ANY(%s)"  # noqa: S608

# ``key_rows`` from a position to the head, as the PostgreSQL sequencer pipelines it
# (and every row the admins signed since, ``ledger.reads.key_candidates``; each checked against its leaf)
_KEYS_SINCE = (
    "SELECT seq, entry_id, kind, signer, logged_at, envelope, leaf_hash FROM log_entries"
    " WHERE ((kind >= 'key.' AND kind < 'key/') OR signer = ANY(%s)) AND seq >= %s"
)
_COUNT_SINCE = "SELECT count(*) FROM log_entries WHERE seq >= %s"
# the head, with what its leaf commits checked (``LogRepo._committed_head``)
_HEAD = (
    "SELECT seq, chain_hash, logged_at, entry_id, kind, signer, leaf_hash FROM log_entries"
    " ORDER BY seq DESC LIMIT 1"
)

# The columns a policy evaluation reads, in this order: (seq, entry_id, kind, signer, logged_at, envelope)
EVIDENCE_COLUMNS = (
    T_ENTRIES.c.seq,
    T_ENTRIES.c.entry_id,
    T_ENTRIES.c.kind,
    T_ENTRIES.c.signer,
    T_ENTRIES.c.logged_at,
    T_ENTRIES.c.envelope,
)
# what the policy reads them with: each row is checked against its leaf hash (``ledger.reads.committed_rows``)
_COMMITTED_COLUMNS = (*EVIDENCE_COLUMNS, T_ENTRIES.c.leaf_hash)


@dataclass(frozen=True)
class EntryFilter:
    """What ``LogRepo.find`` selects; every field given must match (the service resolves names first)."""

    subject: dict[str, str] | None = None
    kind: str | None = None  # a kind, or a prefix ending in *
    signer_id: str | None = None
    since: str | None = None  # formatted log times
    until: str | None = None
    after_seq: int | None = None
    at_size: int | None = None
    limit: int | None = 100
    descending: bool = False


@dataclass(frozen=True)
class SubjectSummary:
    field: str
    value: str
    entries: int
    last_seq: int
    last_logged_at: str

    @property
    def cursor(self) -> str:
        """Where the list after this subject starts (``subjects(after=…)``): ``LAST_SEQ:FIELD``. The list is
        ordered by last activity, newest first, then by field — one entry names each field once, so the
        pair is unique where two subjects' last entry is the same."""
        return f"{self.last_seq}:{self.field}"


@dataclass
class RangeRows:
    """The rows of one sequence range and their index rows, for verification."""

    entries: list[Any]
    subjects: dict[int, dict[str, str]]
    refs: dict[int, set[tuple[str, str]]]
    artifacts: dict[int, set[tuple[str, str, bool]]]


class Head(NamedTuple):
    """The last entry of the log: where the next append starts."""

    seq: int
    chain_hash: str
    logged_at: str


class KeysSince(NamedTuple):
    """What the sequencer reads (in its round trip) to bring a cached keyring standing at ``start``
    entries up to the head: the chain hash of entry ``start - 1`` (None when ``start`` is 0, or when the
    log no longer holds it) and (seq, envelope) of the ``key.*`` entries from ``start`` on."""

    start: int
    chain: str | None
    rows: list[tuple[int, bytes]]


def _psycopg(conn: sa.Connection) -> Any:
    """The psycopg connection under ``conn`` (PostgreSQL), for pipelined round trips; else None."""
    if conn.dialect.name != "postgresql" or conn.dialect.driver != "psycopg":
        return None
    return conn.connection.driver_connection


_PG_INSERTS: dict[tuple[str, tuple[str, ...]], str] = {}


def _pg_insert(raw: Any, table: str, cols: tuple[str, ...]) -> str:
    """``INSERT INTO table (cols) VALUES (%s, …)``, composed by psycopg (identifiers quoted) once per
    table and column list and kept as text: composing it again per append cost more than the insert."""
    key = (table, cols)
    text = _PG_INSERTS.get(key)
    if text is None:
        from psycopg import sql

        text = (
            sql.SQL("INSERT INTO {} ({}) VALUES ({})")
            .format(
                sql.Identifier(table),
                sql.SQL(", ").join(map(sql.Identifier, cols)),
                sql.SQL(", ").join(sql.Placeholder() * len(cols)),
            )
            .as_string(raw)
        )
        _PG_INSERTS[key] = text
    return text


def _db_error(e: Exception, statement: str) -> Exception:
    """A driver error as SQLAlchemy's class for it (an ``IntegrityError`` for a constraint), as the
    SQLAlchemy path raises it; other errors unchanged."""
    import psycopg

    if isinstance(e, psycopg.Error):
        return sa.exc.DBAPIError.instance(statement, None, e, psycopg.Error)
    return e


def _fetch_tuples(conn: sa.Connection, q: Any) -> list[tuple[Any, ...]]:
    """All rows of ``q`` as plain DBAPI tuples.

    The evidence columns are integers, strings and bytes, which need no result processing; reading them
    from the DBAPI cursor in one ``fetchall`` skips building a SQLAlchemy Row per entry.
    """
    result = conn.execute(q)
    try:
        return [tuple(r) for r in result.cursor.fetchall()]
    finally:
        result.close()


def _fetch_committed(conn: sa.Connection, q: Any) -> list[tuple[Any, ...]]:
    """The evidence tuples of ``q`` (which selects ``_COMMITTED_COLUMNS``), each checked against the log
    record its leaf commits: ``IntegrityError`` for a row whose log time, index, id, kind or signer
    column was edited behind the log's back, naming the column (from the row's stored record)."""

    return committed_rows(_fetch_tuples(conn, q), lambda seq: _record_of(conn, seq))


def _record_of(conn: sa.Connection, seq: int) -> bytes | None:
    """The stored log record bytes of the row at ``seq`` (read to name the column a refused row
    differs in; None when it has none, or none that is bytes: the refusal then names no column)."""
    return _named_record(
        seq, conn.execute(sa.select(T_ENTRIES.c.record).where(T_ENTRIES.c.seq == seq)).scalar()
    )


def _named_record(seq: int, value: object) -> bytes | None:
    """``record_bytes``, or None where the value is not bytes (it only names a column of a refusal)."""
    try:
        return record_bytes(seq, value)
    except ChainBrokenError:
        return None


def record_bytes(seq: int, value: object) -> bytes | None:
    """A stored log record (the ``record`` column of the row at ``seq``) as bytes; None for NULL (log
    format 1). ``ChainBrokenError`` naming the seq for a value that is not bytes (``ledger.db.blob``)."""
    if value is None:
        return None
    return blob(
        value,
        lambda what: ChainBrokenError(
            f"the stored log record at seq {seq} is no log record ({what}): its record column was "
            "rewritten behind the log's back"
        ),
    )


def envelope_bytes(seq: int, value: object) -> bytes:
    """A stored envelope (the ``envelope`` column of the row at ``seq``) as bytes; ``ChainBrokenError``
    naming the seq for a value that is not bytes (``ledger.db.blob``)."""
    return blob(
        value,
        lambda what: ChainBrokenError(
            f"the stored envelope at seq {seq} is no envelope ({what}): its envelope column was rewritten "
            "behind the log's back"
        ),
    )


def checked_leaf(seq: int, entry_id: str, record: object, column: object) -> bytes:
    """``ledger.log.checked_leaf`` of a row as the database driver gives it: its record column read as
    bytes first (``record_bytes``: a value that is not bytes is the row's corruption, named)."""
    return log_checked_leaf(seq, entry_id, record_bytes(seq, record), column)


def tile_bytes(level: int, idx: int, value: object) -> bytes:
    """A stored tile's ``hashes`` or ``root`` as bytes; ``TileMismatchError`` naming the tile for a value
    that is not bytes (``ledger.db.blob``)."""
    return blob(
        value,
        lambda what: TileMismatchError(
            f"stored tile {level}/{tile_path(idx)} is no tile ({what}): the database's hash tiles were "
            "edited behind the log's back",
            tile=(level, idx),
        ),
    )


def _subject_seqs(subject: dict[str, str], n: int) -> Any:
    """SELECT seq of the subject's entries below ``n``, from the subject index alone."""
    s = T_SUBJECTS
    (k0, v0), *rest = sorted(subject.items())
    q = sa.select(s.c.seq).where(s.c.field == k0, s.c.value == v0, s.c.seq < n)
    for k, v in rest:
        q = q.where(s.c.seq.in_(sa.select(s.c.seq).where(s.c.field == k, s.c.value == v)))
    return q


def _few_refs(conn: sa.Connection, subject_entries: int) -> bool:
    """Whether the log holds no more refs than the subject has entries — a choice of query plan only,
    both plans return the same rows. SQLite: one b-tree probe (the refs table is append-only, so its
    largest rowid is its row count); other databases: False (the plan that scales with the subject)."""
    if conn.dialect.name != "sqlite":
        return False
    total = conn.exec_driver_sql("SELECT max(rowid) FROM entry_refs").scalar()
    return int(total or 0) <= subject_entries


def _valid_tiles() -> Any:
    """``tiles`` joined to the entry at each tile's last leaf with the tile's chain hash: only the tiles of
    the log the database holds now (one a rollback lost has no such entry). With ``_names_its_last_leaf``:
    a row inserted behind the log's back naming another leaf, whose chain hash it copied, is none."""
    return T_TILES.join(
        T_ENTRIES,
        sa.and_(T_ENTRIES.c.seq == T_TILES.c.last_seq, T_ENTRIES.c.chain_hash == T_TILES.c.chain_hash),
    )


def _names_its_last_leaf() -> Any:
    """A tile's ``last_seq`` is the last leaf it spans (``ledger.tiles.tile_last_seq``): (idx + 1) x
    ``span`` - 1, ``span`` = ``tile_span(level)`` bound with the level."""
    return T_TILES.c.last_seq == (T_TILES.c.idx + 1) * sa.bindparam("span", type_=sa.BigInteger) - 1


def _tile_column_query(*columns: Any) -> Any:
    return (
        sa.select(T_TILES.c.idx, *columns)
        .select_from(_valid_tiles())
        .where(
            T_TILES.c.level == sa.bindparam("level"),
            T_TILES.c.idx >= sa.bindparam("lo"),
            T_TILES.c.idx < sa.bindparam("hi"),
            _names_its_last_leaf(),
        )
    )


# built once: a proof runs a few of these, and building a statement costs as much as running it
_TILE_COLUMN_QUERIES = {
    "hashes": _tile_column_query(T_TILES.c.hashes, T_TILES.c.root),  # a tile is read with its root
    "root": _tile_column_query(T_TILES.c.root),
}


class RepoTiles:
    """``ledger.tiles.TileSource`` over one connection (one snapshot): stored full tiles and leaf hashes."""

    def __init__(self, repo: LogRepo, conn: sa.Connection | None, *, checked: bool = True) -> None:
        self.repo = repo
        self.conn = conn
        self.checked = checked  # each leaf read checked against its row's record (``leaves``)
        # the root of each tile ``tiles`` read, from the same row: ``TileTree`` checks a tile against its
        # root as it reads it (``roots`` of that one tile then needs no second query)
        self._tile_roots: dict[tuple[int, int], bytes] = {}

    @contextmanager
    def _conn(self) -> Iterator[sa.Connection]:
        if self.conn is not None:
            yield self.conn
        else:
            with self.repo.read() as c:
                yield c

    def _rows(self, name: str, level: int, lo: int, hi: int) -> list[Any]:
        span = tile_span(level)
        if span is None:
            return []
        with self._conn() as c:
            params = {"level": level, "lo": lo, "hi": hi, "span": span}
            return list(c.execute(_TILE_COLUMN_QUERIES[name], params))

    def tiles(self, level: int, lo: int, hi: int) -> dict[int, bytes]:
        out: dict[int, bytes] = {}
        for i, hashes, root in self._rows("hashes", level, lo, hi):
            out[int(i)] = tile_bytes(level, int(i), hashes)
            self._tile_roots[(level, int(i))] = tile_bytes(level, int(i), root)
        return out

    def roots(self, level: int, lo: int, hi: int) -> dict[int, bytes]:
        if hi - lo == 1 and (level, lo) in self._tile_roots:
            return {lo: self._tile_roots[(level, lo)]}
        return {int(i): tile_bytes(level, int(i), v) for i, v in self._rows("root", level, lo, hi)}

    def leaves(self, lo: int, hi: int) -> list[bytes]:
        """The leaf hashes of ``lo <= seq < hi``, each checked against the log record its row holds: a
        leaf served (in a tile, a proof, a root) is SHA-256(0x00 || record) of its row, never a
        ``leaf_hash`` column rewritten behind the log's back (``ChainBrokenError`` naming the entry).
        Unless ``checked`` is False: the leaf hash columns as they are (the local audit, which judges
        each received entry's record against its receipt and leaf itself, one entry at a time)."""
        if not self.checked:
            with self._conn() as c:
                return self.repo.leaf_hashes(c, start=lo, size=hi)
        e = T_ENTRIES
        q = (
            sa.select(e.c.seq, e.c.entry_id, e.c.record, e.c.leaf_hash)
            .where(e.c.seq >= lo, e.c.seq < hi)
            .order_by(e.c.seq)
        )
        with self._conn() as c:
            return [checked_leaf(int(seq), str(eid), rec, leaf) for seq, eid, rec, leaf in c.execute(q)]


class LogRepo:
    """The queries on the log tables of one database."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        # the admin key ids of the appender's cached keyring: the sequencer reads their rows since the
        # cache as candidate key entries (``key_rows``); set by ``Ledger`` before each sequencing
        self.known_admins: list[str] = []
        self._version_lock = threading.Lock()
        self._version_conn: sqlite3.Connection | None = None

    def data_version(self) -> Any:
        """A value that moves whenever a commit, of this process or another, may have changed what the
        database holds; read *before* the reads it vouches for (``result_cache.stamp``), so reads
        remembered under an unchanged value are still the database's. None where there is none.

        SQLite: ``PRAGMA data_version`` on a read-only connection of the repo's own that never writes (it
        changes whenever any other connection commits). PostgreSQL: the server's start time and its WAL
        insert position (its replay position on a standby): every committed change inserts WAL before
        it is visible, a restart or a failover starts another server, so a restored or promoted database
        never repeats a value its predecessor gave."""
        if self.dialect == "postgresql":
            try:
                with self.read() as conn:
                    row = conn.execute(
                        sa.text(
                            "SELECT pg_postmaster_start_time()::text, CASE WHEN pg_is_in_recovery()"
                            " THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_insert_lsn() END::text"
                        )
                    ).one()
            except sa.exc.SQLAlchemyError:
                return None  # a server that will not say (a role without the functions): no stamp
            if row[0] is None or row[1] is None:
                return None
            return ("postgresql", str(row[0]), str(row[1]))
        path = self.engine.url.database if self.dialect == "sqlite" else None
        if not path or path.startswith(":") or "mode=memory" in str(self.engine.url):
            return None
        with self._version_lock:
            if self._version_conn is None:
                self._version_conn = sqlite3.connect(
                    f"file:{path}?mode=ro", uri=True, check_same_thread=False, isolation_level=None
                )
            return ("sqlite", int(self._version_conn.execute("PRAGMA data_version").fetchone()[0]))

    def close(self) -> None:
        """Close the connection ``data_version`` opened (the engine's pool is the owner's to dispose)."""
        with self._version_lock:
            if self._version_conn is not None:
                self._version_conn.close()
                self._version_conn = None

    # --- connections ------------------------------------------------------------------------------

    @contextmanager
    def read(self, *, snapshot: bool = False) -> Iterator[sa.Connection]:
        """A connection for reads; ``snapshot``: inside one transaction (one consistent view)."""
        with read_connection(self.engine, snapshot=snapshot) as conn:
            yield conn

    @contextmanager
    def append_transaction(self) -> Iterator[sa.Connection]:
        """A write transaction holding the appenders' lock (SQLite's write lock, or a PostgreSQL one)."""
        with write_transaction(self.engine) as conn:
            lock_log(conn)
            yield conn

    @contextmanager
    def sequence(
        self,
        ids: Collection[str],
        tokens: Collection[str] = (),
        keys_from: int | None = None,
        admins: Collection[str] | None = None,
    ) -> Iterator[tuple[sa.Connection, Head | None, set[str], dict[str, TokenRecord], KeysSince | None]]:
        """The sequencer's transaction: take the appenders' lock, then read the head, which of ``ids``
        the log holds, the API tokens with the hashes ``tokens`` (the group's writers, authorised as
        the group commits), and with ``keys_from`` the ``KeysSince`` a cached keyring standing there
        needs (another replica appended since; ``admins``: the cache's admin key ids, whose rows since
        are read too — ``key_rows``; default ``known_admins``). Yields (connection, head, present,
        tokens by hash, keys since). On PostgreSQL with psycopg the lock and the reads go in one round trip (a
        pipeline: the server runs them in order, so the reads see every append and revocation
        committed before the lock was granted)."""
        if admins is None:
            admins = self.known_admins
        with write_transaction(self.engine) as conn:
            raw = _psycopg(conn)
            since: KeysSince | None = None
            if raw is None:
                lock_log(conn)
                head = self.head(conn)
                present = self.known_ids(conn, set(ids)) if ids else set()
                found = tokens_by_hash(conn, tokens)
                size = 0 if head is None else head.seq + 1
                if keys_from is not None and keys_from != size:  # the cache is behind (or ahead)
                    chain = self.chain_at(conn, keys_from - 1) if keys_from else None
                    since = KeysSince(keys_from, chain, self.key_rows(conn, keys_from, size, admins))
            else:
                try:
                    with (
                        raw.cursor() as lock,
                        raw.cursor() as h,
                        raw.cursor() as known,
                        raw.cursor() as tok,
                        raw.cursor() as chain_c,
                        raw.cursor() as keys_c,
                        raw.cursor() as count_c,
                    ):
                        with raw.pipeline():
                            lock.execute(f"SELECT pg_advisory_xact_lock({LOG_LOCK_KEY})")
                            h.execute(_HEAD)
                            known.execute(
                                "SELECT entry_id FROM log_entries WHERE entry_id = ANY(%s)", (list(ids),)
                            )
                            if tokens:
                                tok.execute(_TOKENS_BY_HASH, (list(tokens),))
                            if keys_from is not None:
                                chain_c.execute(
                                    "SELECT chain_hash FROM log_entries WHERE seq = %s", (keys_from - 1,)
                                )
                                keys_c.execute(_KEYS_SINCE, (sorted(admins), keys_from))
                                count_c.execute(_COUNT_SINCE, (keys_from,))
                        row = h.fetchone()
                        present = {str(r[0]) for r in known.fetchall()}
                        found = {str(r[5]): token_of_row(r) for r in tok.fetchall()} if tokens else {}
                        if keys_from is not None:
                            c = chain_c.fetchone() if keys_from else None
                            got = [tuple(r) for r in keys_c.fetchall()]
                            counted = int(count_c.fetchone()[0])
                except Exception as e:
                    raise _db_error(e, "sequence") from e
                head = None if row is None else self._committed_head(conn, row)
                size = 0 if head is None else head.seq + 1
                if keys_from is not None and keys_from != size:
                    rows = self.key_rows(conn, keys_from, size, admins, prefetched=(got, counted))
                    since = KeysSince(keys_from, None if c is None else str(c[0]), rows)
            yield conn, head, present, found, since

    @property
    def dialect(self) -> str:
        return str(self.engine.dialect.name)

    # --- size and heads ---------------------------------------------------------------------------

    def size(self, conn: sa.Connection | None = None) -> int:
        """Number of entries (the highest seq + 1)."""
        if conn is None:
            with self.read() as c:
                return self.size(c)
        n = conn.execute(sa.select(sa.func.max(T_ENTRIES.c.seq))).scalar()
        return 0 if n is None else int(n) + 1

    def head(self, conn: sa.Connection) -> Head | None:
        """(seq, chain_hash, logged_at) of the last entry, or None for an empty log; its index and log
        time as its leaf commits them (``_committed_head``)."""
        e = T_ENTRIES
        row = conn.execute(
            sa.select(
                e.c.seq, e.c.chain_hash, e.c.logged_at, e.c.entry_id, e.c.kind, e.c.signer, e.c.leaf_hash
            )
            .order_by(e.c.seq.desc())
            .limit(1)
        ).first()
        return None if row is None else self._committed_head(conn, tuple(row))

    @staticmethod
    def _committed_head(conn: sa.Connection, row: Sequence[Any]) -> Head:
        """The head from its row (seq, chain_hash, logged_at, entry_id, kind, signer, leaf_hash), checked
        against the record its leaf commits: the sequencer takes the next entry's earliest log time from
        it, so a ``logged_at`` column rewritten behind the log's back (to 2099: every later entry would
        be committed then) is ``IntegrityError``, never inherited. One SHA-256 (~1 µs)."""
        seq, chain, logged_at, entry_id, kind, signer, leaf = row
        if record_leaf_hex(int(seq), str(logged_at), str(entry_id), str(kind), str(signer)) != leaf:
            raise uncommitted_error(
                (int(seq), entry_id, kind, signer, logged_at, None, leaf),
                _record_of(conn, int(seq)),
                "it is the log's head: nothing is appended after it, and no keyring is read up to it",
            )
        return Head(int(seq), str(chain), str(logged_at))

    def bounds(self, conn: sa.Connection) -> tuple[int | None, int | None, int]:
        """(min seq, max seq, count)."""
        lo, hi, count = conn.execute(
            sa.select(sa.func.min(T_ENTRIES.c.seq), sa.func.max(T_ENTRIES.c.seq), sa.func.count())
        ).one()
        return lo, hi, int(count)

    def seq_after(self, conn: sa.Connection, start: int, rows: int, end: int) -> int | None:
        """The seq ``rows`` rows on from ``start`` (the first row with ``start <= seq < end`` is 0 on),
        None when fewer rows follow: a keyset page boundary whatever the seq values are."""
        e = T_ENTRIES
        q = sa.select(e.c.seq).where(e.c.seq >= start, e.c.seq < end).order_by(e.c.seq).offset(rows).limit(1)
        got = conn.execute(q).scalar()
        return None if got is None else int(got)

    def chain_at(self, conn: sa.Connection, seq: int) -> str | None:
        """The chain hash of the entry at ``seq`` (it commits every entry up to it), or None."""
        h = conn.execute(sa.select(T_ENTRIES.c.chain_hash).where(T_ENTRIES.c.seq == seq)).scalar()
        return None if h is None else str(h)

    def logged_at(self, conn: sa.Connection, seq: int) -> str:
        """The log time of the entry at ``seq``, checked against the record its leaf commits (what a
        verdict's reference time and a recorded decision's bound are read as)."""
        e = T_ENTRIES
        row = conn.execute(
            sa.select(
                e.c.seq, e.c.entry_id, e.c.kind, e.c.signer, e.c.logged_at, e.c.record, e.c.leaf_hash
            ).where(e.c.seq == seq)
        ).one_or_none()
        if row is None:
            raise gap_error(seq)
        if record_leaf_hex(int(row[0]), row[4], row[1], row[2], row[3]) != row[6]:
            raise uncommitted_error(tuple(row), _named_record(int(row[0]), row[5]))
        return str(row[4])

    # --- entries by id and seq --------------------------------------------------------------------

    def ids_with_prefix(self, prefix: str, limit: int = 2) -> list[str]:
        with self.read() as conn:
            return [
                str(i)
                for i in conn.execute(
                    sa.select(T_ENTRIES.c.entry_id)
                    .where(T_ENTRIES.c.entry_id.like(prefix + "%"))
                    .limit(limit)
                ).scalars()
            ]

    def by_id(self, entry_id: str) -> Any:
        with self.read() as conn:
            return conn.execute(sa.select(T_ENTRIES).where(T_ENTRIES.c.entry_id == entry_id)).first()

    def by_seq(self, seq: int) -> Any:
        with self.read() as conn:
            return conn.execute(sa.select(T_ENTRIES).where(T_ENTRIES.c.seq == seq)).first()

    def by_ids(self, conn: sa.Connection, ids: Sequence[str]) -> dict[str, Any]:
        """Rows of the given entry ids that the log holds, by id."""
        return {
            r.entry_id: r for r in conn.execute(sa.select(T_ENTRIES).where(T_ENTRIES.c.entry_id.in_(ids)))
        }

    def known_ids(self, conn: sa.Connection, ids: set[str]) -> set[str]:
        """The subset of ``ids`` the log holds."""
        return set(
            conn.execute(sa.select(T_ENTRIES.c.entry_id).where(T_ENTRIES.c.entry_id.in_(ids))).scalars()
        )

    # --- search -----------------------------------------------------------------------------------

    def find(self, f: EntryFilter) -> list[Any]:
        """Entry rows matching every filter, in sequence order; ``after_seq`` is the keyset cursor."""
        q = sa.select(T_ENTRIES)
        for k, v in (f.subject or {}).items():
            sub = sa.select(T_SUBJECTS.c.seq).where(T_SUBJECTS.c.field == k, T_SUBJECTS.c.value == v)
            q = q.where(T_ENTRIES.c.seq.in_(sub))
        if f.kind:
            if f.kind.endswith("*"):
                q = q.where(T_ENTRIES.c.kind.like(f.kind[:-1] + "%"))
            else:
                q = q.where(T_ENTRIES.c.kind == f.kind)
        if f.signer_id:
            q = q.where(T_ENTRIES.c.signer == f.signer_id)
        if f.since:
            q = q.where(T_ENTRIES.c.logged_at >= f.since)
        if f.until:
            q = q.where(T_ENTRIES.c.logged_at < f.until)
        if f.after_seq is not None:
            q = q.where(T_ENTRIES.c.seq < f.after_seq if f.descending else T_ENTRIES.c.seq > f.after_seq)
        if f.at_size is not None:
            q = q.where(T_ENTRIES.c.seq < f.at_size)
        q = q.order_by(T_ENTRIES.c.seq.desc() if f.descending else T_ENTRIES.c.seq)
        if f.limit is not None:
            q = q.limit(f.limit)
        with self.read() as conn:
            return list(conn.execute(q))

    def referrers(self, entry_id: str | Collection[str], rel: str | None = None) -> list[Any]:
        """Rows of the entries that reference ``entry_id`` (or any of a collection of ids: one read for a
        page of entries), in sequence order."""
        ids = [entry_id] if isinstance(entry_id, str) else list(entry_id)
        if not ids:
            return []
        sub = sa.select(T_REFS.c.seq).where(T_REFS.c.target_id.in_(ids))
        if rel:
            sub = sub.where(T_REFS.c.rel == rel)
        with self.read() as conn:
            return list(
                conn.execute(sa.select(T_ENTRIES).where(T_ENTRIES.c.seq.in_(sub)).order_by(T_ENTRIES.c.seq))
            )

    def with_artifact(self, digest: str) -> list[tuple[int, str]]:
        """(seq, entry_id) of the entries naming a stored artifact."""
        with self.read() as conn:
            rows = conn.execute(
                sa.select(T_ENTRIES.c.seq, T_ENTRIES.c.entry_id)
                .where(
                    T_ENTRIES.c.seq.in_(sa.select(T_ARTIFACTS.c.seq).where(T_ARTIFACTS.c.digest == digest))
                )
                .order_by(T_ENTRIES.c.seq)
            ).all()
        return [(int(r.seq), str(r.entry_id)) for r in rows]

    def iter_rows(self, batch: int = 5000) -> Iterator[Any]:
        """Every entry row in sequence order, read in keyset pages."""
        last = -1
        with self.read() as conn:
            while True:
                rows = conn.execute(
                    sa.select(T_ENTRIES).where(T_ENTRIES.c.seq > last).order_by(T_ENTRIES.c.seq).limit(batch)
                ).all()
                if not rows:
                    return
                yield from rows
                last = rows[-1].seq

    def subjects(
        self, *, field: str | None = None, limit: int = 500, after: tuple[int, str] | None = None
    ) -> list[SubjectSummary]:
        """Distinct subject FIELD=VALUE pairs (key entries excluded), most recently active first (then by
        field); ``after`` is a ``SubjectSummary.cursor`` as (last seq, field): the list after that subject."""
        last = sa.func.max(T_SUBJECTS.c.seq)
        q = (
            sa.select(T_SUBJECTS.c.field, T_SUBJECTS.c.value, sa.func.count().label("n"), last.label("last"))
            .where(T_SUBJECTS.c.field != "key")
            .group_by(T_SUBJECTS.c.field, T_SUBJECTS.c.value)
            .order_by(sa.desc("last"), T_SUBJECTS.c.field)
            .limit(limit)
        )
        if field:
            q = q.where(T_SUBJECTS.c.field == field)
        if after is not None:
            q = q.having(sa.or_(last < after[0], sa.and_(last == after[0], T_SUBJECTS.c.field > after[1])))
        with self.read() as conn:
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

    # --- keys -------------------------------------------------------------------------------------

    def key_rows(
        self,
        conn: sa.Connection,
        start: int,
        size: int,
        admins: Collection[str] = (),
        *,
        prefetched: tuple[list[tuple[Any, ...]], int] | None = None,
    ) -> list[tuple[int, bytes]]:
        """(seq, envelope) of the ``key.*`` entries with start <= seq < size, in sequence order, each read
        as the log committed it and none missing (``ledger.reads.committed_key_rows``: ``IntegrityError``
        for a key row edited behind the log's back, or a seq in the range with no row: one deleted).

        The candidates are the kind index's ``key.*`` range and every row signed by a key that held the
        admin role (``ledger.reads.key_candidates``; ``admins``: those as of ``start``): a key row whose
        kind column was renamed is still read, through its committed signer, and refused. A range on the
        kind index, ordered by (kind, seq) and sorted here: ordered by seq alone, SQLite walks the primary
        key over the whole log — every envelope of a million-entry ledger — to find the handful of
        ``key.*`` entries (LIKE would scan it too). ``prefetched``: (the candidate rows of ``admins``,
        the count of rows from ``start`` on) as the PostgreSQL sequencer read them in its round trip.
        """
        e = T_ENTRIES
        q = (
            sa.select(*_COMMITTED_COLUMNS)
            .where(e.c.kind >= "key.", e.c.kind < "key/")
            .where(e.c.seq >= start, e.c.seq < size)
            .order_by(e.c.kind, e.c.seq)
        )

        def signed_by(ids: list[str]) -> list[tuple[Any, ...]]:
            if prefetched is not None and set(ids) <= set(admins):
                return []  # read with the kind range in the sequencer's round trip
            return _fetch_tuples(
                conn,
                sa.select(*_COMMITTED_COLUMNS).where(e.c.signer.in_(ids), e.c.seq >= start, e.c.seq < size),
            )

        def count(lo: int, hi: int) -> int:
            if prefetched is not None and (lo, hi) == (start, size):
                return prefetched[1]
            return int(
                conn.execute(sa.select(sa.func.count()).where(e.c.seq >= lo, e.c.seq < hi)).scalar_one()
            )

        def whole() -> tuple[int, Any, Any]:
            # SQLite counts a bare count(*) from the pages of its smallest index (a rowid range walks every
            # envelope); min and max are one rowid lookup each
            return (
                int(conn.execute(sa.select(sa.func.count()).select_from(e)).scalar_one()),
                conn.execute(sa.select(sa.func.min(e.c.seq))).scalar(),
                conn.execute(sa.select(sa.func.max(e.c.seq))).scalar(),
            )

        def seqs(lo: int, hi: int) -> list[int]:
            return [
                int(s)
                for s in conn.execute(
                    sa.select(e.c.seq).where(e.c.seq >= lo, e.c.seq < hi).order_by(e.c.seq)
                ).scalars()
            ]

        first = prefetched[0] if prefetched is not None else _fetch_tuples(conn, q)
        return committed_key_rows(
            key_candidates(first, signed_by, admins),
            start,
            size,
            count=count,
            seqs=seqs,
            whole=whole if self.dialect == "sqlite" and prefetched is None else None,
            record_of=lambda seq: _record_of(conn, seq),
        )

    def enrol_envelopes(self) -> list[bytes]:
        """Envelopes of every ``key.enrol`` entry, in sequence order."""
        with self.read() as conn:
            return [
                envelope_bytes(int(seq), e)
                for seq, e in conn.execute(
                    sa.select(T_ENTRIES.c.seq, T_ENTRIES.c.envelope)
                    .where(T_ENTRIES.c.kind == "key.enrol")
                    .order_by(T_ENTRIES.c.seq)
                )
            ]

    # --- appends ----------------------------------------------------------------------------------

    def insert(
        self,
        conn: sa.Connection,
        entries: list[dict[str, Any]],
        subjects: list[dict[str, Any]],
        refs: list[dict[str, Any]],
        artifacts: list[dict[str, Any]],
        *,
        commit: bool = False,
    ) -> None:
        """Insert log rows and their index rows (inside the caller's append transaction): one INSERT per
        table; on PostgreSQL with psycopg all of them in one round trip (a pipeline). ``commit``: the
        transaction's last statement — on PostgreSQL with psycopg its COMMIT goes in the same round trip
        (the transaction then ends here; closing it later sends nothing), elsewhere the caller's
        transaction commits as usual."""
        if not entries:
            return
        raw = _psycopg(conn)
        if raw is not None:
            try:
                tables = (
                    (T_ENTRIES, entries),
                    (T_SUBJECTS, subjects),
                    (T_REFS, refs),
                    (T_ARTIFACTS, artifacts),
                )
                with raw.pipeline(), raw.cursor() as cur:
                    for table, rows in tables:
                        if rows:
                            cols = tuple(c.name for c in table.columns if c.name in rows[0])
                            cur.executemany(
                                _pg_insert(raw, table.name, cols), [tuple(r[c] for c in cols) for r in rows]
                            )
                    if commit:
                        cur.execute("COMMIT")
            except Exception as e:
                raise _db_error(e, "INSERT") from e
            return
        conn.execute(sa.insert(T_ENTRIES), entries)
        if subjects:
            conn.execute(sa.insert(T_SUBJECTS), subjects)
        if refs:
            conn.execute(sa.insert(T_REFS), refs)
        if artifacts:
            conn.execute(sa.insert(T_ARTIFACTS), artifacts)

    # --- Merkle leaves and checkpoints --------------------------------------------------------------

    def leaf_hashes(
        self, conn: sa.Connection | None = None, *, start: int = 0, size: int | None = None
    ) -> list[bytes]:
        """Leaf hashes of the entries start <= seq (< size), in sequence order."""
        if conn is None:
            with self.read() as c:
                return self.leaf_hashes(c, start=start, size=size)
        q = sa.select(T_ENTRIES.c.leaf_hash).order_by(T_ENTRIES.c.seq)
        if start:
            q = q.where(T_ENTRIES.c.seq >= start)
        if size is not None:
            q = q.where(T_ENTRIES.c.seq < size)
        return [bytes.fromhex(h) for h in conn.execute(q).scalars()]

    def checkpoint_root(self, size: int, conn: sa.Connection | None = None) -> str | None:
        """The root of the stored checkpoint at ``size`` (hex), or None."""
        if conn is None:
            with self.read() as c:
                return self.checkpoint_root(size, c)
        root = conn.execute(sa.select(T_CHECKPOINTS.c.root).where(T_CHECKPOINTS.c.size == size)).scalar()
        return None if root is None else str(root)

    def insert_checkpoint(
        self, conn: sa.Connection, size: int, root: str, note: str, created_at: str, fmt: int
    ) -> None:
        conn.execute(
            sa.insert(T_CHECKPOINTS).values(
                size=size, root=root, note=note, created_at=created_at, format=fmt
            )
        )

    def latest_checkpoint(self, conn: sa.Connection) -> Any:
        """(size, created_at) of the largest published checkpoint, or None."""
        return conn.execute(
            sa.select(T_CHECKPOINTS.c.size, T_CHECKPOINTS.c.created_at)
            .order_by(T_CHECKPOINTS.c.size.desc())
            .limit(1)
        ).first()

    def records(self, conn: sa.Connection, lo: int, hi: int) -> list[bytes | None]:
        """The stored log records of lo <= seq < hi, in sequence order."""
        q = (
            sa.select(T_ENTRIES.c.seq, T_ENTRIES.c.record)
            .where(T_ENTRIES.c.seq >= lo, T_ENTRIES.c.seq < hi)
            .order_by(T_ENTRIES.c.seq)
        )
        return [record_bytes(int(seq), r) for seq, r in conn.execute(q)]

    def iter_records(
        self, conn: sa.Connection, size: int, batch: int = 5000
    ) -> Iterator[tuple[int, bytes | None, str]]:
        """(seq, record, leaf_hash) of the entries below ``size``, in sequence order, in keyset pages read
        through ``conn`` (one snapshot); a record that is not bytes is ``ChainBrokenError`` naming its seq
        (``record_bytes``)."""
        e = T_ENTRIES
        last = -1
        while True:
            rows = conn.execute(
                sa.select(e.c.seq, e.c.record, e.c.leaf_hash)
                .where(e.c.seq > last, e.c.seq < size)
                .order_by(e.c.seq)
                .limit(batch)
            ).all()
            if not rows:
                return
            for seq, record, leaf in rows:
                yield int(seq), record_bytes(int(seq), record), str(leaf)
            last = rows[-1].seq

    def entry_ids_at(self, conn: sa.Connection, seqs: Collection[int]) -> dict[int, str]:
        """The entry id at each of ``seqs`` the log holds, by seq (a seq it lacks is not a key)."""
        out: dict[int, str] = {}
        wanted = sorted(set(seqs))
        for i in range(0, len(wanted), 500):
            q = sa.select(T_ENTRIES.c.seq, T_ENTRIES.c.entry_id).where(
                T_ENTRIES.c.seq.in_(wanted[i : i + 500])
            )
            out.update((int(seq), str(eid)) for seq, eid in conn.execute(q))
        return out

    def record_at(self, conn: sa.Connection, seq: int) -> bytes | None:
        """The stored log record of the entry at ``seq``."""
        r = conn.execute(sa.select(T_ENTRIES.c.record).where(T_ENTRIES.c.seq == seq)).scalar()
        return record_bytes(seq, r)

    def checkpoints(self, conn: sa.Connection) -> list[Any]:
        return list(conn.execute(sa.select(T_CHECKPOINTS).order_by(T_CHECKPOINTS.c.size)).all())

    # --- witness cosignatures (migration 0003) ------------------------------------------------------

    def cosignatures(self, conn: sa.Connection, size: int, root: str) -> dict[str, str]:
        """Witness key name -> cosignature line kept for the checkpoint of ``size`` with ``root`` (hex)."""
        q = sa.select(T_COSIGNATURES.c.witness, T_COSIGNATURES.c.line).where(
            T_COSIGNATURES.c.size == size, T_COSIGNATURES.c.root == root
        )
        return {str(w): str(line) for w, line in conn.execute(q).all()}

    def insert_cosignature(
        self, conn: sa.Connection, size: int, witness: str, root: str, line: str, created_at: str
    ) -> None:
        conn.execute(
            sa.delete(T_COSIGNATURES).where(
                T_COSIGNATURES.c.size == size, T_COSIGNATURES.c.witness == witness
            )
        )
        conn.execute(
            sa.insert(T_COSIGNATURES).values(
                size=size, witness=witness, root=root, line=line, created_at=created_at
            )
        )

    def witness_size(self, conn: sa.Connection, witness: str) -> int:
        """The largest checkpoint size ``witness`` cosigned for this log (0: none)."""
        q = sa.select(sa.func.max(T_COSIGNATURES.c.size)).where(T_COSIGNATURES.c.witness == witness)
        value = conn.execute(q).scalar()
        return 0 if value is None else int(value)

    def iter_checkpoints(self, start: int = 0, batch: int = 1000) -> Iterator[Any]:
        """Checkpoint rows of size >= ``start`` in size order, read in keyset pages."""
        last = start - 1
        with self.read() as conn:
            while True:
                rows = conn.execute(
                    sa.select(T_CHECKPOINTS)
                    .where(T_CHECKPOINTS.c.size > last)
                    .order_by(T_CHECKPOINTS.c.size)
                    .limit(batch)
                ).all()
                if not rows:
                    return
                yield from rows
                last = rows[-1].size

    # --- hash tiles ---------------------------------------------------------------------------------

    def tile_source(self, conn: sa.Connection | None = None, *, checked: bool = True) -> RepoTiles:
        """The stored tiles and leaves as a ``ledger.tiles.TileSource``: over ``conn`` (one snapshot), or a
        connection per read; ``checked``: see ``RepoTiles.leaves``."""
        return RepoTiles(self, conn, checked=checked)

    def has_tile(self, conn: sa.Connection, level: int, idx: int) -> bool:
        """Whether the log the database holds has its full tile ``level``/``idx`` stored."""
        q = sa.select(T_TILES.c.idx).select_from(_valid_tiles())
        q = q.where(T_TILES.c.level == level, T_TILES.c.idx == idx).limit(1)
        return conn.execute(q).first() is not None

    def insert_tiles(self, conn: sa.Connection, rows: list[dict[str, Any]]) -> None:
        """Insert full tiles (inside the caller's append transaction)."""
        if rows:
            conn.execute(sa.insert(T_TILES), rows)

    def tile_rows(self, conn: sa.Connection, lo: int, hi: int) -> list[Any]:
        """Every stored tile row whose last leaf is lo <= seq < hi (whatever log it was written for)."""
        return list(
            conn.execute(sa.select(T_TILES).where(T_TILES.c.last_seq >= lo, T_TILES.c.last_seq < hi)).all()
        )

    def stored_artifacts(self, start: int = 0) -> Iterator[tuple[str, str]]:
        """(digest, name) of every stored artifact the entries from seq ``start`` on name, one per digest
        (its first name), in digest order: streamed, so checking them holds no set of the log's artifacts."""
        q = (
            sa.select(T_ARTIFACTS.c.digest, T_ARTIFACTS.c.name)
            .where(T_ARTIFACTS.c.stored == sa.true(), T_ARTIFACTS.c.seq >= start)
            .order_by(T_ARTIFACTS.c.digest, T_ARTIFACTS.c.seq)
        )
        last = None
        with self.read(snapshot=True) as conn:  # a server-side cursor lives in a transaction
            for digest, name in conn.execution_options(stream_results=True, max_row_buffer=1000).execute(q):
                if digest != last:
                    last = digest
                    yield str(digest), str(name)

    def key_entries(self, conn: sa.Connection, start: int, size: int) -> list[Any]:
        """Rows (seq, entry_id, kind, signer, logged_at, envelope) that may be the ``key.*`` entries with
        start <= seq < size, in sequence order: the kind index's and every admin's rows, as ``key_rows``
        reads them (``ledger.reads.key_candidates``). Unchecked: the caller checks each against the leaf
        its tree commits, then folds those whose (checked) kind is ``key.*``."""
        e = T_ENTRIES
        cols = (e.c.seq, e.c.entry_id, e.c.kind, e.c.signer, e.c.logged_at, e.c.envelope)
        q = (
            sa.select(*cols)
            .where(e.c.kind >= "key.", e.c.kind < "key/", e.c.seq >= start, e.c.seq < size)
            .order_by(e.c.kind, e.c.seq)
        )

        def signed_by(ids: list[str]) -> list[Any]:
            return list(
                conn.execute(sa.select(*cols).where(e.c.signer.in_(ids), e.c.seq >= start, e.c.seq < size))
            )

        return key_candidates(conn.execute(q).all(), signed_by)

    def row_at(self, conn: sa.Connection, seq: int) -> Any:
        """The entry row at ``seq``, or None."""
        return conn.execute(sa.select(T_ENTRIES).where(T_ENTRIES.c.seq == seq)).first()

    # --- verification -------------------------------------------------------------------------------

    def range_rows(self, lo: int, hi: int) -> RangeRows:
        """Entry rows with lo <= seq < hi and their subject, ref and artifact index rows."""
        subjects: dict[int, dict[str, str]] = {}
        refs: dict[int, set[tuple[str, str]]] = {}
        arts: dict[int, set[tuple[str, str, bool]]] = {}
        with self.read() as conn:
            rows = conn.execute(
                sa.select(T_ENTRIES)
                .where(T_ENTRIES.c.seq >= lo, T_ENTRIES.c.seq < hi)
                .order_by(T_ENTRIES.c.seq)
            ).all()
            for r in conn.execute(sa.select(T_SUBJECTS).where(T_SUBJECTS.c.seq >= lo, T_SUBJECTS.c.seq < hi)):
                subjects.setdefault(r.seq, {})[r.field] = r.value
            for r in conn.execute(sa.select(T_REFS).where(T_REFS.c.seq >= lo, T_REFS.c.seq < hi)):
                refs.setdefault(r.seq, set()).add((r.rel, r.target_id))
            for r in conn.execute(
                sa.select(T_ARTIFACTS).where(T_ARTIFACTS.c.seq >= lo, T_ARTIFACTS.c.seq < hi)
            ):
                arts.setdefault(r.seq, set()).add((r.name, r.digest, bool(r.stored)))
        return RangeRows(list(rows), subjects, refs, arts)

    # --- policy evaluation --------------------------------------------------------------------------

    def subject_rows(self, conn: sa.Connection, subject: dict[str, str], n: int) -> list[tuple[Any, ...]]:
        """The subject's evidence tuples below ``n`` in seq order, read through the subject index."""
        (k0, v0), *rest = sorted(subject.items())
        s = T_SUBJECTS
        q = (
            sa.select(*_COMMITTED_COLUMNS)
            .select_from(s.join(T_ENTRIES, T_ENTRIES.c.seq == s.c.seq))
            .where(s.c.field == k0, s.c.value == v0, s.c.seq < n)
        )
        for k, v in rest:
            q = q.where(T_ENTRIES.c.seq.in_(sa.select(s.c.seq).where(s.c.field == k, s.c.value == v)))
        return _fetch_committed(conn, q.order_by(s.c.seq))

    def linked_rows(
        self, conn: sa.Connection, subject: dict[str, str], n: int, subject_entries: int
    ) -> list[tuple[Any, ...]]:
        """Evidence tuples below ``n`` that reference a subject entry, then those a subject entry references
        (either list may repeat subject entries)."""
        subject_seqs = _subject_seqs(subject, n)
        if _few_refs(conn, subject_entries):
            # walk the (few) refs and keep those whose target is a subject entry: a probe per ref
            target = T_ENTRIES.alias("target")
            hits_subject = (
                sa.select(sa.literal(1))
                .select_from(target)
                .where(target.c.entry_id == T_REFS.c.target_id, target.c.seq.in_(subject_seqs))
                .exists()
            )
            referring = sa.select(T_REFS.c.seq).where(hits_subject)
        else:
            # look up the subject entries' ids and probe the refs' target index with each
            subject_ids = sa.select(T_ENTRIES.c.entry_id).where(T_ENTRIES.c.seq.in_(subject_seqs))
            referring = sa.select(T_REFS.c.seq).where(T_REFS.c.target_id.in_(subject_ids))
        referrers = sa.select(*_COMMITTED_COLUMNS).where(T_ENTRIES.c.seq < n, T_ENTRIES.c.seq.in_(referring))
        targets = sa.select(*_COMMITTED_COLUMNS).where(
            T_ENTRIES.c.seq < n,
            T_ENTRIES.c.entry_id.in_(sa.select(T_REFS.c.target_id).where(T_REFS.c.seq.in_(subject_seqs))),
        )
        return _fetch_committed(conn, referrers) + _fetch_committed(conn, targets)

    def host_rows(
        self, conn: sa.Connection, kinds: Sequence[str], hosts: Sequence[str], n: int
    ) -> list[tuple[Any, ...]]:
        """Evidence tuples below ``n`` of these kinds whose subject names one of these hosts."""
        # the (few) entries of these kinds first, through the kind index; then keep those of the hosts
        q = (
            sa.select(*_COMMITTED_COLUMNS)
            .select_from(T_ENTRIES.join(T_SUBJECTS, T_SUBJECTS.c.seq == T_ENTRIES.c.seq))
            .where(
                T_ENTRIES.c.kind.in_(list(kinds)),
                T_ENTRIES.c.seq < n,
                T_SUBJECTS.c.field == "host",
                T_SUBJECTS.c.value.in_(list(hosts)),
            )
        )
        return _fetch_committed(conn, q)

    def subject_hosts(
        self,
        conn: sa.Connection,
        subject: dict[str, str],
        n: int,
        seqs: Sequence[int] = (),
        among: Sequence[str] | None = None,
    ) -> list[str]:
        """The distinct ``host`` subject values, from the subject index, of the subject's entries below ``n``
        and of the entries at ``seqs`` (sorted); only those in ``among`` when given."""
        s = T_SUBJECTS
        found: set[str] = set()
        base = sa.select(s.c.value).distinct().where(s.c.field == "host")
        if among is not None:
            if not among:
                return []
            base = base.where(s.c.value.in_(list(among)))
        found.update(v for (v,) in _fetch_tuples(conn, base.where(s.c.seq.in_(_subject_seqs(subject, n)))))
        todo = sorted(set(seqs))
        for i in range(0, len(todo), 500):
            found.update(v for (v,) in _fetch_tuples(conn, base.where(s.c.seq.in_(todo[i : i + 500]))))
        return sorted(found)

    def kind_hosts(self, conn: sa.Connection, kinds: Sequence[str], n: int) -> list[str]:
        """The distinct ``host`` subject values of the entries of these kinds below ``n`` (sorted)."""
        q = (
            sa.select(T_SUBJECTS.c.value)
            .distinct()
            .select_from(T_ENTRIES.join(T_SUBJECTS, T_SUBJECTS.c.seq == T_ENTRIES.c.seq))
            .where(T_ENTRIES.c.kind.in_(list(kinds)), T_ENTRIES.c.seq < n, T_SUBJECTS.c.field == "host")
        )
        return sorted(v for (v,) in _fetch_tuples(conn, q))

    def subject_kind_rows(
        self,
        conn: sa.Connection,
        subject: dict[str, str],
        kinds: Sequence[str],
        n: int,
        *,
        logged_since: str | None = None,
    ) -> list[tuple[Any, ...]]:
        """Evidence tuples below ``n`` of these kinds whose subject has every field of ``subject``, in seq
        order (``find`` with a subject and kinds, as the tuples a policy parses); with ``logged_since``
        only those the log took at or after it."""
        q = sa.select(*_COMMITTED_COLUMNS).where(T_ENTRIES.c.kind.in_(list(kinds)), T_ENTRIES.c.seq < n)
        if logged_since is not None:
            # by the log times the leaves commit, never the mutable column: the first seq logged since
            # (the column's index proposes it, two committed reads confirm it; else bisected over
            # committed times) bounds the rows by seq, and each row returned is checked against its leaf
            q = q.where(T_ENTRIES.c.seq >= self.first_logged_since(conn, logged_since, n))
        for k, v in subject.items():
            sub = sa.select(T_SUBJECTS.c.seq).where(T_SUBJECTS.c.field == k, T_SUBJECTS.c.value == v)
            q = q.where(T_ENTRIES.c.seq.in_(sub))
        rows = _fetch_committed(conn, q.order_by(T_ENTRIES.c.seq))
        return rows if logged_since is None else [r for r in rows if str(r[4]) >= logged_since]

    def first_logged_since(self, conn: sa.Connection, since: str, n: int) -> int:
        """The first seq below ``n`` the log took at or after ``since`` (``n`` when none), by committed log
        times (``ledger.reads.first_logged_since``): one probe of the logged_at index proposes it, two
        primary-key reads checked against their leaves confirm it."""
        e = T_ENTRIES
        got = conn.execute(
            sa.select(e.c.seq).where(e.c.logged_at >= since).order_by(e.c.logged_at, e.c.seq).limit(1)
        ).scalar()

        def committed_at(seq: int) -> str:
            try:
                return self.logged_at(conn, seq)
            except sa.exc.NoResultFound:
                raise missing_row_error(seq, n) from None

        return first_logged_since(since, n, None if got is None else int(got), committed_at)

    def referrer_rows(self, conn: sa.Connection, entry_id: str, n: int) -> list[tuple[Any, ...]]:
        """The evidence tuples below ``n`` of the entries that reference ``entry_id``, in seq order (the
        supersessions and acceptances the routing gate weighs), each checked against its leaf."""
        sub = sa.select(T_REFS.c.seq).where(T_REFS.c.target_id == entry_id)
        q = sa.select(*_COMMITTED_COLUMNS).where(T_ENTRIES.c.seq < n, T_ENTRIES.c.seq.in_(sub))
        return _fetch_committed(conn, q.order_by(T_ENTRIES.c.seq))

    def tree_root(self, size: int, conn: sa.Connection | None = None) -> bytes:
        """The Merkle root of the log's first ``size`` entries, from the stored tiles and leaf hashes in
        one snapshot (``IntegrityError`` where the log lacks leaves below ``size``)."""
        from ledger.tiles import TileTree

        if conn is None:
            with self.read(snapshot=True) as c:
                return self.tree_root(size, c)
        try:
            return TileTree(self.tile_source(conn), size).root()
        except ValueError as e:  # a leaf hash column that is not hex
            raise ChainBrokenError(
                f"a stored leaf hash below size {size} is not a hash ({e}): edited behind the log's back"
            ) from e

    # --- reviewer pages -------------------------------------------------------------------------------

    def co_subjects(self, field: str, value: str, other: str, limit: int = 500) -> list[tuple[str, int, str]]:
        """(value of ``other``, entries, last logged_at) over the entries whose subject has FIELD=VALUE:
        e.g. the campaigns whose evidence names a host, most recently active first."""
        s, o = T_SUBJECTS, T_SUBJECTS.alias("other")
        q = (
            sa.select(o.c.value, sa.func.count().label("n"), sa.func.max(o.c.seq).label("last"))
            .select_from(s.join(o, o.c.seq == s.c.seq))
            .where(s.c.field == field, s.c.value == value, o.c.field == other)
            .group_by(o.c.value)
            .order_by(sa.desc("last"))
            .limit(limit)
        )
        with self.read() as conn:
            rows = conn.execute(q).all()
            when = (
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
        return [(str(r.value), int(r.n), str(when.get(r.last, ""))) for r in rows]
