"""Fix 75 (issue 12, f4): a database that holds an ``alembic_version`` row but not the ledger's tables.

``_require_ledger_database`` trusted the revision row: another application's database whose Alembic row
holds the ledger's head revision (or a ledger whose tables were dropped) passed it, and ``ledger verify
--database-url`` failed in its first query — a SQLAlchemy traceback (UndefinedTable log_entries) and exit 1,
which reads as "problems found in the log". Now the ledger's tables (``ledger.db.METADATA``, what its
migrations make) must be there too: else one ``error[database-not-initialised]`` line, exit 2, naming the
tables that are missing. Real PostgreSQL (a database of its own, dropped after) and SQLite.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from ledger.db import METADATA
from ledger.reads import SCHEMA_HEAD
from ledger.service import Ledger
from tests.api.conftest import fresh_pg_database
from tests.test_fix70_interop import _one_error_line, _run


@pytest.fixture
def home(tmp_path: Path) -> Path:
    Ledger.init(tmp_path / "home").close()
    return tmp_path / "home"


def _pg(url: str, sql: str) -> None:
    u = make_url(url)
    with psycopg.connect(
        host=u.host, port=u.port, user=u.username, dbname=u.database, autocommit=True
    ) as conn:
        conn.execute(sql)


def _refused(home: Path, url: str, *missing: str) -> None:
    code, out, err = _run("--home", str(home), "verify", "--database-url", url)
    assert code == 2, out + err
    _one_error_line(err, "database-not-initialised")
    assert f"revision {SCHEMA_HEAD}" in err and "holds no ledger" in err, err
    for table in missing:
        assert table in err, err
    code, out, err = _run("--home", str(home), "verify", "--json", "--database-url", url)
    assert code == 2, out + err
    assert json.loads(err)["error"]["code"] == "database-not-initialised"


FOREIGN = (
    "CREATE TABLE alembic_version (version_num varchar(32) PRIMARY KEY); "
    f"INSERT INTO alembic_version VALUES ('{SCHEMA_HEAD}'); CREATE TABLE users (id int)"
)


def test_verify_on_a_postgres_database_with_a_ledger_revision_row_but_no_ledger_tables_is_exit_2(
    home: Path,
) -> None:
    with fresh_pg_database() as url:
        _pg(url, FOREIGN)
        _refused(home, url, *sorted(METADATA.tables))


@pytest.mark.parametrize("dropped", ["log_entries", "tiles", "checkpoints"])
def test_verify_on_a_postgres_ledger_with_one_table_dropped_names_it(tmp_path: Path, dropped: str) -> None:
    with fresh_pg_database() as url:
        Ledger.init(tmp_path / "pg-home", database_url=url).close()
        _pg(url, f"DROP TABLE {dropped} CASCADE")
        _refused(tmp_path / "pg-home", url, dropped)


def test_verify_on_a_postgres_ledger_with_its_tables_still_runs(tmp_path: Path) -> None:
    with fresh_pg_database() as url:
        Ledger.init(tmp_path / "pg-home", database_url=url).close()
        code, out, err = _run("--home", str(tmp_path / "pg-home"), "verify", "--database-url", url)
        assert code == 0, out + err


def _sqlite(path: Path, sql: str) -> None:
    con = sqlite3.connect(path)
    try:
        con.executescript(sql)
        con.commit()
    finally:
        con.close()


def test_verify_on_a_sqlite_file_with_a_ledger_revision_row_but_no_ledger_tables_is_exit_2(
    home: Path, tmp_path: Path
) -> None:
    db = tmp_path / "other-app.db"
    _sqlite(db, FOREIGN.replace("; ", ";\n") + ";")
    before = db.read_bytes()
    _refused(home, f"sqlite:///{db}", *sorted(METADATA.tables))
    assert db.read_bytes() == before  # refused untouched


@pytest.mark.parametrize("dropped", ["log_entries", "entry_subjects", "tiles"])
def test_verify_on_a_sqlite_ledger_with_one_table_dropped_names_it(tmp_path: Path, dropped: str) -> None:
    Ledger.init(tmp_path / "home").close()
    db = next((tmp_path / "home").glob("*.db"), None) or next((tmp_path / "home").rglob("*.db"))
    _sqlite(db, f"DROP TABLE {dropped};")
    _refused(tmp_path / "home", f"sqlite:///{db}", dropped)


def test_verify_on_a_sqlite_ledger_with_its_tables_still_runs(tmp_path: Path) -> None:
    Ledger.init(tmp_path / "home").close()
    db = next((tmp_path / "home").rglob("*.db"))
    code, out, err = _run("--home", str(tmp_path / "home"), "verify", "--database-url", f"sqlite:///{db}")
    assert code == 0, out + err


@pytest.mark.parametrize("rev", ["a1b2c3d4e5f6", "abc123", "9999x", "00041"])
def test_another_applications_alembic_revision_is_not_called_a_newer_ledger(rev: str) -> None:
    """A revision id that is no ledger's (its migrations number them "0001" …) was reported "made by a newer
    ledger" (sorted after the head) or "run `ledger migrate`" (sorted before it: migrate would rewrite
    another application's database). It is named as no ledger's schema revision."""
    from ledger.errors import LogFormatError
    from ledger.reads import check_revision

    with pytest.raises(LogFormatError) as e:
        check_revision(rev)
    assert "no ledger's schema revision" in e.value.message
    assert "newer ledger" not in e.value.message and "ledger migrate" not in e.value.message


def test_a_ledger_revision_older_or_newer_is_still_told_so() -> None:
    from ledger.errors import LogFormatError
    from ledger.reads import check_revision

    check_revision(SCHEMA_HEAD)
    older = f"{int(SCHEMA_HEAD) - 1:0{len(SCHEMA_HEAD)}d}"
    newer = f"{int(SCHEMA_HEAD) + 1:0{len(SCHEMA_HEAD)}d}"
    with pytest.raises(LogFormatError, match="ledger migrate"):
        check_revision(older)
    with pytest.raises(LogFormatError, match="newer ledger"):
        check_revision(newer)
