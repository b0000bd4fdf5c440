"""The connection pool on PostgreSQL, over a real connection: reads without transaction round trips, snapshot
reads that are one view, a pool as large as a server's concurrency, and connections the server dropped.

``ledger serve`` runs each request in a worker thread holding one pooled connection. The pool used to keep 5
(8 collectors made it open and close a connection, a PostgreSQL process, per request), pinged every
connection it handed out (a round trip per checkout), and each read ran in a transaction (BEGIN and
ROLLBACK round trips around one SELECT).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa

from ledger import db
from ledger.db import make_engine, read_connection
from ledger.service import Ledger
from ledger.tokens import create_token, verify_token
from tests.api.conftest import PG_ADMIN, fresh_pg_database

pytestmark = pytest.mark.postgres


@pytest.fixture
def pg_url() -> Iterator[str]:
    with fresh_pg_database() as url:
        yield url


def _terminate_backends(url: str) -> int:
    """Kill every server process of the database ``url`` names (as a failover or restart would)."""
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        ).fetchall()
    return len(rows)


def _backend_pids(url: str) -> set[int]:
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()", (name,)
        ).fetchall()
    return {int(r[0]) for r in rows}


def test_a_plain_read_runs_outside_a_transaction_and_a_snapshot_read_in_one(pg_url: str) -> None:
    engine = make_engine(pg_url)
    try:
        with read_connection(engine) as conn:
            # no BEGIN was sent: the server sees no transaction around the statement
            assert conn.exec_driver_sql("SELECT now() = statement_timestamp()").scalar() is True
            assert conn.exec_driver_sql("SHOW transaction_isolation").scalar() == "read committed"
        with read_connection(engine, snapshot=True) as conn:
            assert conn.exec_driver_sql("SHOW transaction_isolation").scalar() == "repeatable read"
        # the characteristics do not leak to the next user of the pooled connection
        with engine.connect() as conn, conn.begin():
            assert conn.exec_driver_sql("SHOW transaction_isolation").scalar() == "read committed"
    finally:
        engine.dispose()


def test_snapshot_read_on_postgresql_was_not_one_view_of_the_log(pg_url: str, tmp_path: Path) -> None:
    """``LogRepo.read(snapshot=True)`` promised one consistent view; under PostgreSQL's default READ
    COMMITTED each statement saw every append committed before it."""
    led = Ledger.init(tmp_path / "home", database_url=pg_url)
    try:
        led.new_key("collector1", ["collector"])
        st = led.make_statement("note", {"campaign": "c"}, {"text": "one"})
        led.append([led.sign(st, "collector1")])
        with led.repo.read(snapshot=True) as conn:
            before = led.repo.size(conn)
            st2 = led.make_statement("note", {"campaign": "c"}, {"text": "two"})
            led.append([led.sign(st2, "collector1")])  # committed by another connection meanwhile
            assert led.repo.size(conn) == before
        assert led.size() == before + 1
    finally:
        led.close()


def test_the_pool_keeps_a_connection_per_concurrent_request(pg_url: str) -> None:
    """Twelve threads reading at once, again and again: the same connections serve them all (before,
    connections beyond 5 were opened and closed per use: a new server process each time)."""
    engine = make_engine(pg_url)
    try:
        barrier = threading.Barrier(12)
        errors: list[BaseException] = []

        def work() -> None:
            try:
                for _ in range(5):
                    with read_connection(engine) as conn:
                        barrier.wait(timeout=30)  # all twelve hold a connection at once
                        conn.exec_driver_sql("SELECT 1").scalar()
            except BaseException as e:
                errors.append(e)

        def run_all() -> set[int]:
            threads = [threading.Thread(target=work) for _ in range(12)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=60)
            assert not errors
            return _backend_pids(pg_url)

        first = run_all()
        assert len(first) == 12
        assert engine.pool.checkedin() == 12  # type: ignore[attr-defined]
        assert run_all() == first  # the same server processes: nothing opened or closed per use
        assert db.POOL_SIZE >= 12
    finally:
        engine.dispose()


def test_a_connection_idle_past_the_ping_interval_that_the_server_dropped_is_replaced(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    Ledger.init(tmp_path / "home", database_url=pg_url).close()
    engine = make_engine(pg_url)
    try:
        with read_connection(engine) as conn:
            conn.exec_driver_sql("SELECT 1")
        assert _terminate_backends(pg_url) == 1
        monkeypatch.setattr(db, "IDLE_PING_S", 0.0)  # every pooled connection counts as idle
        with read_connection(engine) as conn:
            assert conn.exec_driver_sql("SELECT 41 + 1").scalar() == 42
    finally:
        engine.dispose()


def test_a_connection_dropped_while_in_steady_use_fails_one_statement_then_the_pool_recovers(
    pg_url: str, tmp_path: Path
) -> None:
    """The trade of pinging idle connections only: a connection checked in moments before the server
    dropped it fails its next statement (an error, never a wrong answer); SQLAlchemy then replaces every
    connection of the pool, and the next request is served."""
    Ledger.init(tmp_path / "home", database_url=pg_url).close()
    engine = make_engine(pg_url)
    try:
        token, _ = create_token(engine, "w", "writer")
        verify_token(engine, token)
        assert _terminate_backends(pg_url) >= 1
        with pytest.raises(sa.exc.OperationalError):
            verify_token(engine, token)
        assert verify_token(engine, token).name == "w"
    finally:
        engine.dispose()
