"""SQLModel tables and database plumbing; SQLite by default, PostgreSQL for shared deployments.

Alembic owns the schema (``migrations/``); these models describe it for queries. The log tables are
append-only: database triggers refuse UPDATE and DELETE.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlmodel import Field, SQLModel

from ledger.errors import LogFormatError, StorageError

__all__ = [
    "LOG_TABLES",
    "SCHEMA_HEAD",
    "T_ARTIFACTS",
    "T_CHECKPOINTS",
    "T_ENTRIES",
    "T_REFS",
    "T_SUBJECTS",
    "T_TILES",
    "ApiToken",
    "CheckpointRow",
    "EntryArtifact",
    "EntryRefRow",
    "EntrySubject",
    "LogEntry",
    "TileRow",
    "check_schema",
    "make_engine",
    "migrate",
    "schema_revision",
    "write_transaction",
]

LOG_TABLES = ("log_entries", "entry_subjects", "entry_refs", "entry_artifacts", "checkpoints", "tiles")


class LogEntry(SQLModel, table=True):
    __tablename__ = "log_entries"

    seq: int = Field(sa_type=sa.BigInteger, primary_key=True, sa_column_kwargs={"autoincrement": False})
    entry_id: str = Field(max_length=64, unique=True)
    kind: str = Field(max_length=64, index=True)
    signer: str = Field(max_length=64, index=True)
    collected_at: str = Field(max_length=40)
    logged_at: str = Field(max_length=40, index=True)
    envelope: bytes = Field(sa_type=sa.LargeBinary)
    # the log record (``ledger.log.LogRecord`` bytes) the Merkle leaf hashes; NULL only before migration 0002
    record: bytes | None = Field(default=None, sa_type=sa.LargeBinary)
    leaf_hash: str = Field(max_length=64)
    prev_hash: str = Field(max_length=64)
    chain_hash: str = Field(max_length=64)


class EntrySubject(SQLModel, table=True):
    __tablename__ = "entry_subjects"

    seq: int = Field(sa_type=sa.BigInteger, primary_key=True, sa_column_kwargs={"autoincrement": False})
    field: str = Field(primary_key=True, max_length=64)
    value: str = Field(max_length=512)


class EntryRefRow(SQLModel, table=True):
    __tablename__ = "entry_refs"

    seq: int = Field(sa_type=sa.BigInteger, primary_key=True, sa_column_kwargs={"autoincrement": False})
    rel: str = Field(primary_key=True, max_length=40)
    target_id: str = Field(primary_key=True, max_length=64, index=True)


class EntryArtifact(SQLModel, table=True):
    __tablename__ = "entry_artifacts"

    seq: int = Field(sa_type=sa.BigInteger, primary_key=True, sa_column_kwargs={"autoincrement": False})
    name: str = Field(primary_key=True, max_length=200)
    digest: str = Field(max_length=71, index=True)
    stored: bool = True


class CheckpointRow(SQLModel, table=True):
    __tablename__ = "checkpoints"

    size: int = Field(sa_type=sa.BigInteger, primary_key=True, sa_column_kwargs={"autoincrement": False})
    root: str = Field(max_length=64)
    note: str
    created_at: str = Field(max_length=40)
    # the log format the root was computed in (``ledger.log.LOG_FORMAT``); 1 for checkpoints of old homes
    format: int = 1


class TileRow(SQLModel, table=True):
    """A full C2SP hash tile (``ledger.tiles``) of the log whose entry at ``last_seq`` has ``chain_hash``.

    The chain hash commits every entry up to the tile's last leaf, so a tile is read only while the log
    holds those entries (a join on ``log_entries``): a tile of a log lost to a rollback is never used."""

    __tablename__ = "tiles"

    level: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    idx: int = Field(sa_type=sa.BigInteger, primary_key=True, sa_column_kwargs={"autoincrement": False})
    chain_hash: str = Field(primary_key=True, max_length=64)
    last_seq: int = Field(sa_type=sa.BigInteger, index=True)
    hashes: bytes = Field(sa_type=sa.LargeBinary)  # 256 * 32 bytes
    root: bytes = Field(sa_type=sa.LargeBinary)  # 32 bytes: the hash of the subtree the tile spans


# Core table handles of the log tables, for SQLAlchemy Core queries (``ledger.repo`` writes them all).
T_ENTRIES: sa.Table = LogEntry.__table__  # type: ignore[attr-defined]
T_SUBJECTS: sa.Table = EntrySubject.__table__  # type: ignore[attr-defined]
T_REFS: sa.Table = EntryRefRow.__table__  # type: ignore[attr-defined]
T_ARTIFACTS: sa.Table = EntryArtifact.__table__  # type: ignore[attr-defined]
T_CHECKPOINTS: sa.Table = CheckpointRow.__table__  # type: ignore[attr-defined]
T_TILES: sa.Table = TileRow.__table__  # type: ignore[attr-defined]


class ApiToken(SQLModel, table=True):
    __tablename__ = "api_tokens"

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(max_length=100, index=True)
    role: str = Field(max_length=20)
    token_hash: str = Field(max_length=64, unique=True)
    created_at: str = Field(max_length=40)
    revoked_at: str | None = Field(default=None, max_length=40)


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


def make_engine(url: str) -> Engine:
    """Create an engine; SQLite gets WAL, a long busy timeout and IMMEDIATE transactions."""
    if url.startswith("sqlite"):
        engine = sa.create_engine(url, connect_args={"timeout": 60, "isolation_level": None})
        event.listen(engine, "connect", _sqlite_pragmas)
        event.listen(engine, "begin", _sqlite_begin)
        return engine
    try:
        return sa.create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=10)
    except (sa.exc.ArgumentError, ImportError) as e:
        raise StorageError(f"cannot use database URL {url!r}: {e}") from e


@contextmanager
def write_transaction(engine: Engine) -> Iterator[sa.Connection]:
    """A transaction that writes: holds SQLite's write lock from BEGIN; commits or rolls back."""
    with engine.connect() as conn:
        conn.execution_options(ledger_write=True)
        with conn.begin():
            yield conn


def lock_log(conn: sa.Connection) -> None:
    """Serialise appenders: SQLite already holds the write lock; PostgreSQL takes an advisory lock."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql("SELECT pg_advisory_xact_lock(7715094201)")


SCHEMA_HEAD = "0003"
"""The Alembic revision this code reads and writes (0002: log format 2, ``ledger.log.LOG_FORMAT``;
0003: the full hash tiles, ``tiles``)."""


def schema_revision(engine: Engine) -> str | None:
    """The Alembic revision of the database, or None when it has none (never migrated)."""
    try:
        with engine.connect() as conn:
            return conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
    except sa.exc.DBAPIError:
        return None


def check_schema(engine: Engine) -> None:
    """Refuse a database of another schema revision: an old home is upgraded by ``ledger migrate``."""
    rev = schema_revision(engine)
    if rev is not None and rev != SCHEMA_HEAD:
        raise LogFormatError(
            f"the database is at schema revision {rev}; this ledger needs {SCHEMA_HEAD}"
            + (" (log format 2, hash tiles)" if rev < SCHEMA_HEAD else " (made by a newer ledger)")
        )


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
