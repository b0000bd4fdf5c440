"""The tables (SQLAlchemy Core) and database plumbing; SQLite by default, PostgreSQL for shared deployments.

Alembic owns the schema (``migrations/``); these models describe it for queries. The log tables are
append-only: database triggers refuse UPDATE and DELETE.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine

from ledger.errors import InputError, LedgerError, StorageError
from ledger.reads import SCHEMA_HEAD, check_revision

__all__ = [
    "LOG_LOCK_KEY",
    "LOG_TABLES",
    "METADATA",
    "SCHEMA_HEAD",
    "SEQ_MAX",
    "T_ARTIFACTS",
    "T_CHECKPOINTS",
    "T_COSIGNATURES",
    "T_ENTRIES",
    "T_REFS",
    "T_SUBJECTS",
    "T_TILES",
    "T_TOKENS",
    "Blob",
    "analyse_if_grown",
    "analyse_log",
    "blob",
    "check_schema",
    "make_engine",
    "migrate",
    "read_connection",
    "require_database",
    "schema_revision",
    "write_transaction",
]

# The largest seq (and tree index) the log can hold: ``seq`` is a 64-bit integer (BIGINT on PostgreSQL), so
# a larger cursor or index cannot even be bound — the one bound every route and parser checks against.
SEQ_MAX = 2**63 - 1

LOG_TABLES = ("log_entries", "entry_subjects", "entry_refs", "entry_artifacts", "checkpoints", "tiles")


# The tables, declared with SQLAlchemy Core (Alembic creates and migrates them; these declarations are what
# queries are compiled against). Core only: no ORM and no SQLModel to import, which a fresh `ledger verdict`
# would otherwise pay for on every start.
METADATA = sa.MetaData()


class Blob(sa.types.TypeDecorator[bytes]):
    """A binary column (``LargeBinary``: SQLite BLOB, PostgreSQL bytea) read as its bytes whatever SQLite
    holds in it. SQLite keeps any value in any column: one rewritten with a string function (``replace()``,
    ``||``) is TEXT, which its driver returns as ``str`` or cannot even decode (the whole fetch fails). Every
    SELECT of such a column reads ``CAST(column AS BLOB)`` (its bytes; on PostgreSQL a cast of bytea to
    itself, which the planner drops), so the row reaches its own checks — its hash, its record, its tile —
    and those name it. What a reader gets is then checked by ``blob``."""

    impl = sa.LargeBinary
    cache_ok = True

    def column_expression(self, colexpr: Any) -> Any:
        return sa.cast(colexpr, sa.LargeBinary)


def blob(value: object, fault: Callable[[str], LedgerError]) -> bytes:
    """The bytes of a value read from a binary column (an envelope, a log record, a tile's hashes or
    root): ``bytes``, or a driver's ``memoryview``/``bytearray``. Anything else (a NULL where the row
    needs bytes, a value of another type a reader that does not cast got) is the row's corruption:
    ``fault(what the value is)`` is raised, the caller's error naming the row (its seq, its tile) — never a
    ``TypeError`` from ``bytes(str)``, never a value taken for bytes."""
    if type(value) is bytes:
        return value
    if isinstance(value, (memoryview, bytearray)):
        return bytes(value)
    raise fault(f"its stored value is {'NULL' if value is None else type(value).__name__}, not bytes")


def _pk(name: str) -> sa.Column[Any]:
    return sa.Column(name, sa.BigInteger, primary_key=True, autoincrement=False)


def _text(name: str, length: int | None = None, **kw: Any) -> sa.Column[Any]:
    return sa.Column(name, sa.String(length), nullable=kw.pop("nullable", False), **kw)


# Core table handles of the log tables, for SQLAlchemy Core queries (``ledger.repo`` writes them all).
T_ENTRIES = sa.Table(
    "log_entries",
    METADATA,
    _pk("seq"),
    _text("entry_id", 64, unique=True),
    _text("kind", 64, index=True),
    _text("signer", 64, index=True),
    _text("collected_at", 40),
    _text("logged_at", 40, index=True),
    sa.Column("envelope", Blob, nullable=False),
    # the log record (``ledger.log.LogRecord`` bytes) the Merkle leaf hashes; NULL only before migration 0002
    sa.Column("record", Blob, nullable=True),
    _text("leaf_hash", 64),
    _text("prev_hash", 64),
    _text("chain_hash", 64),
)
T_SUBJECTS = sa.Table(
    "entry_subjects",
    METADATA,
    _pk("seq"),
    sa.Column("field", sa.String(64), primary_key=True),
    _text("value", 512),
)
T_REFS = sa.Table(
    "entry_refs",
    METADATA,
    _pk("seq"),
    sa.Column("rel", sa.String(40), primary_key=True),
    sa.Column("target_id", sa.String(64), primary_key=True, index=True),
)
T_ARTIFACTS = sa.Table(
    "entry_artifacts",
    METADATA,
    _pk("seq"),
    sa.Column("name", sa.String(200), primary_key=True),
    _text("digest", 71, index=True),
    sa.Column("stored", sa.Boolean, nullable=False, default=True),
)
T_CHECKPOINTS = sa.Table(
    "checkpoints",
    METADATA,
    sa.Column("size", sa.BigInteger, primary_key=True, autoincrement=False),
    _text("root", 64),
    _text("note"),
    _text("created_at", 40),
    # the log format the root was computed in (``ledger.log.LOG_FORMAT``); 1 for checkpoints of old homes
    sa.Column("format", sa.Integer, nullable=False, default=1),
)
T_TOKENS = sa.Table(
    "api_tokens",
    METADATA,
    sa.Column("id", sa.Integer, primary_key=True),
    _text("name", 100, index=True),
    _text("role", 20),
    _text("token_hash", 64, unique=True),
    _text("created_at", 40),
    _text("revoked_at", 40, nullable=True, default=None),
)
# a witness's cosignature line on the published checkpoint of ``size`` (migration 0003)
T_COSIGNATURES = sa.Table(
    "cosignatures",
    METADATA,
    sa.Column("size", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("witness", sa.String(512), primary_key=True),  # the witness's signed-note key name
    _text("root", 64),
    _text("line"),
    _text("created_at", 40),
)
# a full C2SP hash tile (``ledger.tiles``) of the log whose entry at ``last_seq`` has ``chain_hash``: the
# chain hash commits every entry up to the tile's last leaf, so a tile is read only while the log holds
# those entries (a join on ``log_entries``): a tile of a log lost to a rollback is never used (migration 0004)
T_TILES = sa.Table(
    "tiles",
    METADATA,
    sa.Column("level", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("idx", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("chain_hash", sa.String(64), primary_key=True),
    sa.Column("last_seq", sa.BigInteger, nullable=False, index=True),
    sa.Column("hashes", Blob, nullable=False),  # 256 * 32 bytes
    sa.Column("root", Blob, nullable=False),  # 32 bytes: the hash of the subtree the tile spans
)


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=60000")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def _sqlite_begin(conn: Any) -> None:
    # Writers take the write lock at BEGIN, so two appenders queue on the busy timeout instead of failing
    # on a lock upgrade; readers begin deferred and read their WAL snapshot without waiting for anyone.
    mode = "IMMEDIATE" if conn.get_execution_options().get("ledger_write") else "DEFERRED"
    conn.exec_driver_sql(f"BEGIN {mode}")


def _file_identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _watch_sqlite_file(engine: Engine, path: str) -> None:
    """Connections bound to the file the home's path names, not to one replaced since: a database restored
    from a copy (renamed into place) under a running server would otherwise keep its pooled connections on
    the unlinked file — signing checkpoints of the lost log and accepting appends into it. A pooled
    connection to a replaced file is dropped and the pool opens the file now there (SQLAlchemy's documented
    ``DisconnectionError``); where no file is there any more, the request fails (nothing is created)."""

    def on_connect(_dbapi_conn: Any, record: Any) -> None:
        record.info["file_identity"] = _file_identity(path)

    def on_checkout(_dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        now = _file_identity(path)
        if now is None:
            raise StorageError(f"the database file {path} is gone")
        if record.info.get("file_identity") != now:
            raise sa.exc.DisconnectionError(f"the database file {path} was replaced")

    event.listen(engine, "connect", on_connect)
    event.listen(engine.pool, "checkout", on_checkout)


def make_engine(url: str) -> Engine:
    """Create an engine; SQLite gets WAL, a long busy timeout and IMMEDIATE transactions, and its
    connections follow the file at the database's path (``_watch_sqlite_file``)."""
    if url.startswith("sqlite"):
        engine = sa.create_engine(url, connect_args={"timeout": 60, "isolation_level": None})
        event.listen(engine, "connect", _sqlite_pragmas)
        event.listen(engine, "begin", _sqlite_begin)
        path = engine.url.database
        if path and path != ":memory:" and not path.startswith("file:"):
            _watch_sqlite_file(engine, str(Path(path).absolute()))
        return engine
    try:
        engine = sa.create_engine(url, pool_size=POOL_SIZE, max_overflow=POOL_OVERFLOW)
    except (sa.exc.ArgumentError, ImportError) as e:
        raise StorageError(f"cannot use database URL {url!r}: {e}") from e
    event.listen(engine.pool, "checkin", _note_checkin)
    event.listen(engine.pool, "checkout", _ping_if_idle)
    return engine


# A server's requests run in a pool of threads, each holding one connection while it works: the pool keeps
# as many open (connections beyond it are opened and closed per request, and PostgreSQL forks a process
# for each).
POOL_SIZE = 20
POOL_OVERFLOW = 10
IDLE_PING_S = 5.0
"""A pooled connection idle for longer is checked (one round trip) before it is handed out; one back
within this time is not: a connection the server dropped since is found by its first statement, which
fails (and SQLAlchemy then replaces every connection the pool holds)."""


def _note_checkin(_dbapi_conn: Any, record: Any) -> None:
    record.info["checked_in"] = time.monotonic()


def _ping_if_idle(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
    """``pool_pre_ping`` for connections idle longer than ``IDLE_PING_S`` only (a round trip per
    checkout otherwise): a dead one is replaced (SQLAlchemy's documented ``DisconnectionError``)."""
    last = record.info.get("checked_in")
    if last is None or time.monotonic() - last < IDLE_PING_S:
        return
    try:
        cur = dbapi_conn.cursor()
        try:
            cur.execute("SELECT 1")
        finally:
            cur.close()
        if not dbapi_conn.autocommit:
            dbapi_conn.rollback()
    except Exception as e:
        raise sa.exc.DisconnectionError(f"pooled connection is gone: {e}") from e


@contextmanager
def read_connection(engine: Engine, *, snapshot: bool = False) -> Iterator[sa.Connection]:
    """A connection for reads. PostgreSQL: each statement on its own (autocommit: no BEGIN and no
    ROLLBACK round trips), or with ``snapshot`` one REPEATABLE READ transaction (one view of the
    database for every statement in it). SQLite: a plain connection; with ``snapshot`` one transaction
    (WAL gives it one view)."""
    with engine.connect() as conn:
        pg = engine.dialect.name == "postgresql"
        if snapshot:
            if pg:
                conn.execution_options(isolation_level="REPEATABLE READ")
            with conn.begin():
                yield conn
        else:
            if pg:
                conn.execution_options(isolation_level="AUTOCOMMIT")
            yield conn


@contextmanager
def write_transaction(engine: Engine) -> Iterator[sa.Connection]:
    """A transaction that writes: holds SQLite's write lock from BEGIN; commits or rolls back."""
    with engine.connect() as conn:
        conn.execution_options(ledger_write=True)
        with conn.begin():
            yield conn


STATS_GROWTH = 2  # SQLite's planner statistics are taken again each time the log has doubled since
STATS_MIN_ROWS = 1000  # below this a plan cannot go far wrong: no statistics are taken


def _stats_rows(conn: sa.Connection) -> int:
    """How many log entries SQLite's statistics (``sqlite_stat1``) were taken at; 0 when never."""
    has = conn.exec_driver_sql("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sqlite_stat1'")
    if has.first() is None:
        return 0
    row = conn.exec_driver_sql("SELECT stat FROM sqlite_stat1 WHERE tbl = 'log_entries' LIMIT 1").first()
    try:
        return int(str(row[0]).split()[0]) if row is not None else 0
    except (ValueError, IndexError):
        return 0  # unreadable statistics are taken again


def analyse_if_grown(conn: sa.Connection, size: int, taken_at: int | None = None) -> int | None:
    """Keep SQLite's query planner informed as the log grows; returns the size the statistics describe.

    Without statistics SQLite drives ``kind IN (…) AND seq IN (subject's seqs)`` from the kind index: at
    1M entries of one kind that scans a million index rows to find a campaign's ten thousand (186 ms of a
    routing check) where the subject index finds them directly (9 ms). ``ANALYZE`` reads every index (0.4 s
    of CPU at 1M entries; sampling with ``analysis_limit`` gives estimates too rough to pick the plan at a
    few thousand entries); it runs when the log holds ``STATS_GROWTH`` times the entries the statistics
    were taken at (and at least ``STATS_MIN_ROWS``), inside the caller's write transaction — so about
    twenty times in the life of a million-entry log.
    ``taken_at``: what an earlier call returned (None: read it from the database). PostgreSQL's autovacuum
    analyses its tables itself: nothing to do there (None)."""
    if conn.dialect.name != "sqlite":
        return None
    known = _stats_rows(conn) if taken_at is None else taken_at
    if size < STATS_MIN_ROWS or size < known * STATS_GROWTH:
        return known
    conn.exec_driver_sql("ANALYZE")
    return size


def analyse_log(engine: Engine) -> int | None:
    """``analyse_if_grown`` at the log's current size in its own write transaction (``ledger migrate``: a
    home filled before the service took statistics gets them without waiting for its next append)."""
    with write_transaction(engine) as conn:
        size = int(conn.exec_driver_sql("SELECT coalesce(max(seq) + 1, 0) FROM log_entries").scalar_one())
        return analyse_if_grown(conn, size)


LOG_LOCK_KEY = 7715094201  # the PostgreSQL advisory lock every appender of a log takes


def lock_log(conn: sa.Connection) -> None:
    """Serialise appenders: SQLite already holds the write lock; PostgreSQL takes an advisory lock."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({LOG_LOCK_KEY})")


def require_database(engine: Engine) -> None:
    """Refuse a SQLite database file that does not exist (InputError): connecting would create an empty
    one, and only ``ledger init`` (``migrate``) makes a ledger's database. Other databases: nothing to do."""
    url = engine.url
    if engine.dialect.name != "sqlite" or url.query.get("uri") in ("true", "1"):
        return  # SQLite URI filenames (``file:…?mode=…``) say themselves whether they may create
    name = url.database
    if not name or name == ":memory:":
        return
    path = Path(name)
    if not path.is_file():
        what = "is not a file" if path.exists() else "does not exist"
        raise InputError(
            f"database {path.absolute()} {what}",
            hint="`ledger init` makes a home's database; relative SQLite paths in ledger.toml are relative "
            "to the home, those of --database-url to the current directory",
        )


def schema_revision(engine: Engine) -> str | None:
    """The Alembic revision of the database, or None when it has none (never migrated); a SQLite database
    file that does not exist is refused (``require_database``), not created."""
    require_database(engine)
    name = engine.url.database
    if engine.dialect.name == "sqlite" and name and name != ":memory:" and Path(name).is_file():
        # read-only, before the engine's first connection: that one makes the file WAL (its header changes),
        # and a database of another revision is refused untouched
        try:
            ro = sqlite3.connect(f"{Path(name).resolve().as_uri()}?mode=ro", uri=True, timeout=60)
        except sqlite3.Error:
            return None
        try:
            row = ro.execute("SELECT version_num FROM alembic_version").fetchone()
        except sqlite3.Error:
            return None
        finally:
            ro.close()
        return str(row[0]) if row is not None else None
    try:
        with engine.connect() as conn:
            return conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
    except sa.exc.DBAPIError:
        return None


def check_schema(engine: Engine) -> None:
    """Refuse a database of another schema revision: an old home is upgraded by ``ledger migrate``."""
    check_revision(schema_revision(engine))


def migrations_dir() -> Path:
    return Path(__file__).resolve().parent / "migrations"


def migrate(url: str) -> None:
    """Bring the schema to head with Alembic (the only way the schema is created)."""
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    cfg.attributes["configure_logger"] = False
    try:
        command.upgrade(cfg, "head")
    except sa.exc.OperationalError as e:
        raise StorageError(f"cannot migrate database {url}: {e.orig}") from e
