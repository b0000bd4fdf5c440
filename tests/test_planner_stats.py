"""SQLite's planner statistics follow the log (``ledger.db.analyse_if_grown``).

Regression: without statistics SQLite drove a routing check's ``kind IN (…) AND seq IN (subject's seqs)``
from the kind index; at 1M entries of one kind that scanned a million index rows to find one campaign's ten
thousand (186 of a 490 ms `ledger check routing-change`). With statistics it reads the subject's seqs and
looks each entry up by its key.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ledger.db import STATS_GROWTH, STATS_MIN_ROWS
from ledger.reads import SqlitePolicyRepo
from ledger.service import Ledger
from ledger.signing import SigningKey

T0 = datetime(2026, 9, 10, 9, 0, tzinfo=UTC)
TARGET = {"campaign": "target", "backend": "vllm", "model": "m"}


def _build(home: Path, n: int, every: int) -> Ledger:
    """A log of ``n`` health probes; one in ``every`` is the target campaign's, the rest other campaigns'."""
    led = Ledger.init(home, genesis_at=T0 - timedelta(hours=1))
    key = SigningKey.generate("col")
    key.save(led.home.key_path("col"))
    pub = key.public
    payload = {"name": "col", "public_key": pub.b64, "key_id": pub.key_id, "roles": ["collector"]}
    st = led.make_statement("key.enrol", {"key": "col"}, payload, collected_at=T0 - timedelta(hours=1))
    led.append([led.sign(st, led.cfg.admin_key)], logged_at=T0 - timedelta(hours=1))
    _probes(led, range(n), every)
    return led


def _probes(led: Ledger, seconds: range, every: int) -> None:
    batch: list[Any] = []
    for i in seconds:
        other = {"campaign": f"other-{i % 97}", "backend": "vllm", "model": "m"}
        subject = TARGET if i % every == 0 else other
        payload = {"endpoint": "/health", "ok": True, "http_status": 200}
        at = T0 + timedelta(seconds=i)
        batch.append(led.sign(led.make_statement("health.probe", subject, payload, collected_at=at), "col"))
        if len(batch) == 500 or i == seconds[-1]:
            led.append(batch, logged_at=at)
            batch = []


def _stats(db: Path) -> int | None:
    with sqlite3.connect(db) as c:
        if c.execute("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_stat1'").fetchone() is None:
            return None
        row = c.execute("SELECT stat FROM sqlite_stat1 WHERE tbl = 'log_entries'").fetchone()
        return None if row is None else int(row[0].split()[0])


def _plan_of_subject_kind_rows(db: Path, size: int) -> tuple[str, list[tuple[Any, ...]]]:
    """The plan SQLite picks for the policy reader's ``subject_kind_rows`` (its own SQL), and its rows."""
    return _plan_and_rows(db, {"backend": "vllm", "campaign": "target"}, ["health.probe"], None, size)


def test_routing_reads_drive_from_the_subject_once_the_log_has_statistics(tmp_path: Path) -> None:
    led = _build(tmp_path / "h", 2500, 50)
    db = led.home.path / "ledger.db"
    size = led.size()
    led.close()
    taken = _stats(db)
    assert taken is not None and STATS_MIN_ROWS <= taken <= size
    plan, rows = _plan_of_subject_kind_rows(db, size)
    assert "INTEGER PRIMARY KEY" in plan, plan  # each entry looked up by its seq, from the subject's list
    assert "ix_log_entries_kind (kind=? AND rowid<?)" not in plan, plan  # not a scan of the kind's index
    assert len(rows) == 50 and [r[0] for r in rows] == sorted(r[0] for r in rows)


def _plan_and_rows(
    db: Path, subject: dict[str, str], kinds: list[str], since: str | None, size: int | None = None
) -> tuple[str, list[tuple[Any, ...]]]:
    """``subject_kind_rows`` of the policy reader below ``size`` (default: the whole log): the plan SQLite
    picks for the SQL it ran, and its rows."""
    seen: list[tuple[str, list[Any]]] = []
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    repo = SqlitePolicyRepo(conn)
    real = repo._tuples

    def record(c: sqlite3.Connection, sql: str, params: Any) -> list[tuple[Any, ...]]:
        seen.append((sql, list(params)))
        return real(c, sql, params)

    repo._tuples = record  # type: ignore[method-assign]
    if size is None:
        size = int(conn.execute("SELECT max(seq) + 1 FROM log_entries").fetchone()[0])
    rows = repo.subject_kind_rows(conn, subject, kinds, size, logged_since=since)
    sql, params = seen[-1]
    plan = " | ".join(str(r[-1]) for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params))
    conn.close()
    return plan, rows


def test_a_rare_kind_or_the_recent_entries_are_read_from_their_own_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (a routing check at 1M/10k spent ~30 ms in four reads that walked the campaign's 10,000
    seqs to find one verdict, one host probe, no routing change and no recent probe): a kind with fewer
    entries than the subject's smallest field, or the entries logged since the age bound, drive the read
    from their index; the rows are those of the subject-driven plan."""
    from ledger import reads

    led = _build(tmp_path / "h", 2500, 2)  # 1,250 probes of the target campaign
    st = led.make_statement("note", dict(TARGET), {"text": "rare"}, collected_at=T0 + timedelta(hours=2))
    led.append([led.sign(st, "col")], logged_at=T0 + timedelta(hours=2))
    db = led.home.path / "ledger.db"
    led.close()
    recent = "2026-09-10T09:41:00.000000Z"  # the last 100 probes of 2,500 (one a second from T0)
    cases = [
        (["note"], None, "ix_log_entries_kind (kind=?"),
        (["kernel.log", "note"], None, "ix_log_entries_kind (kind=?"),  # several kinds: still the index
        # the recent entries: a seq range from the first seq logged since (found on committed times,
        # 4fc1cf7: never a filter on the mutable logged_at column)
        (["health.probe"], recent, "INTEGER PRIMARY KEY (rowid>? AND rowid<?)"),
        (["health.probe"], None, "INTEGER PRIMARY KEY"),  # a common kind: the subject's seqs
    ]
    for kinds, since, used in cases:
        plan, rows = _plan_and_rows(db, TARGET, kinds, since)
        assert used in plan, (kinds, since, plan)
        monkeypatch.setattr(reads, "RARE_ROWS", 0)  # the subject-driven plan, as before
        subject_plan, subject_rows = _plan_and_rows(db, TARGET, kinds, since)
        monkeypatch.undo()
        # (the recent entries are a seq range in either plan: ``rowid>? AND rowid<?``)
        assert "INTEGER PRIMARY KEY" in subject_plan or (since is not None and "rowid>?" in subject_plan)
        assert rows == subject_rows and rows
        assert [r[0] for r in rows] == sorted(r[0] for r in rows)


def test_statistics_are_taken_again_when_the_log_has_doubled_and_not_before(tmp_path: Path) -> None:
    led = _build(tmp_path / "h", 1200, 50)
    db = led.home.path / "ledger.db"
    first = _stats(db)
    assert first is not None and first >= STATS_MIN_ROWS
    _probes(led, range(1200, 1200 + first // 2), 50)  # grown, but by less than STATS_GROWTH times
    assert _stats(db) == first
    _probes(led, range(5000, 5000 + first * STATS_GROWTH), 50)
    again = _stats(db)
    assert again is not None and again >= first * STATS_GROWTH
    led.close()


def test_a_small_log_takes_no_statistics(tmp_path: Path) -> None:
    led = _build(tmp_path / "h", 300, 10)
    db = led.home.path / "ledger.db"
    led.close()
    assert _stats(db) is None


@pytest.mark.postgres
def test_postgresql_is_left_to_its_autovacuum() -> None:
    import sqlalchemy as sa

    from ledger.db import analyse_if_grown
    from tests.api.conftest import PG_URL, require_postgres

    require_postgres()
    engine = sa.create_engine(PG_URL.format(db="test"))
    try:
        with engine.connect() as conn:
            assert analyse_if_grown(conn, 10**6) is None
    finally:
        engine.dispose()


def test_ledger_migrate_takes_statistics_for_a_log_filled_without_them(tmp_path: Path) -> None:
    from ledger.cli import main

    led = _build(tmp_path / "h", 1500, 50)
    db = led.home.path / "ledger.db"
    led.close()
    with sqlite3.connect(db) as c:
        c.execute("DROP TABLE sqlite_stat1")  # as a home filled before the service took statistics
    assert _stats(db) is None
    assert main(["--home", str(tmp_path / "h"), "migrate"]) == 0
    taken = _stats(db)
    assert taken is not None and taken >= STATS_MIN_ROWS
    assert main(["--home", str(tmp_path / "h"), "migrate"]) == 0  # nothing grew: nothing taken again
    assert _stats(db) == taken
