"""Two replicas on one database: no round trip inside the appenders' lock that the sequencer's own round
trip already answered (fix 165, issue 12: "two replicas on one database no slower than one").

Found: with two `ledger serve` on one PostgreSQL database each group found the head the other replica
moved, and ``_guard_head`` asked the database for the chain hash where this process left the head — a
second round trip while every appender of both replicas waited on the lock — though the sequencer's
pipeline had just read that very hash (``KeysSince.chain``). And a replica whose own last checkpoint was
older than the interval asked for the database's newest checkpoint at every group while the other
replica's was fresh (``_publish_due``), again inside the lock. SQLite and PostgreSQL alike.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ledger.service as service
from ledger.repo import KeysSince
from ledger.service import Ledger
from tests.reliability import api_fixtures
from tests.reliability.api_fixtures import PgDatabases

pg_databases = api_fixtures.pg_databases


@pytest.fixture(params=["sqlite", "postgres"])
def led(
    request: pytest.FixtureRequest, tmp_path: Path, pg_databases: PgDatabases, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Ledger]:
    if request.param == "postgres":
        api_fixtures.require_postgres()
        url = pg_databases.new()
    else:
        url = f"sqlite:///{tmp_path / 'home' / 'ledger.db'}"
    monkeypatch.setenv("LEDGER_CHECKPOINT_INTERVAL", "3600")  # publications only where a test makes them
    ledger = Ledger.init(tmp_path / "home", database_url=url)
    ledger.new_key("hostA", ["collector"])
    yield ledger
    ledger.close()


def _note(led: Ledger, text: str) -> None:
    led.record("note", {"campaign": "replicas"}, {"text": text}, key="hostA")


class _ChainReadsInGuard:
    """Counts ``LogRepo.chain_at`` calls made while ``ledger`` checks the head in the lock, and the
    ``_refuse_fork`` checks it makes there."""

    def __init__(self, ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
        self.chain_reads = 0
        self.fork_checks = 0
        inside = threading.local()
        guard, chain_at, refuse = ledger._guard_head, ledger.repo.chain_at, ledger._refuse_fork

        def guarded(*a: Any, **k: Any) -> Any:
            inside.on = True
            try:
                return guard(*a, **k)
            finally:
                inside.on = False

        def counted_chain(*a: Any, **k: Any) -> Any:
            if getattr(inside, "on", False):
                self.chain_reads += 1
            return chain_at(*a, **k)

        def counted_refuse(*a: Any, **k: Any) -> Any:
            if getattr(inside, "on", False):
                self.fork_checks += 1
            return refuse(*a, **k)

        monkeypatch.setattr(ledger, "_guard_head", guarded)
        monkeypatch.setattr(ledger.repo, "chain_at", counted_chain)
        monkeypatch.setattr(ledger, "_refuse_fork", counted_refuse)


def test_a_replica_finding_the_head_moved_reads_no_chain_hash_in_the_lock(
    led: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = Ledger.open(led.home.path)
    try:
        led.publish_checkpoint()  # both hold it from here: no anchor moves during the test
        _note(other, "warm the other replica")
        _note(led, "warm this one")
        mine, theirs = _ChainReadsInGuard(led, monkeypatch), _ChainReadsInGuard(other, monkeypatch)
        for i in range(4):  # each append finds the head the other replica moved
            _note(led, f"here {i}")
            _note(other, f"there {i}")
        assert (mine.chain_reads, theirs.chain_reads) == (0, 0)
        assert (mine.fork_checks, theirs.fork_checks) == (0, 0)
        monkeypatch.undo()
        assert led.verify() and other.verify()
    finally:
        other.close()


def test_a_replica_whose_chain_no_longer_holds_where_it_left_checks_the_log_again(
    led: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chain hash read in the round trip is compared, not trusted: where it is not the one this
    process left the head at (a rollback, a failover), the log is checked against its anchors again."""
    other = Ledger.open(led.home.path)
    try:
        led.publish_checkpoint()
        _note(other, "warm the other replica")
        _note(led, "moves the head")
        memo = other._extends
        assert memo is not None
        other._extends = (memo[0], memo[1], memo[2], "0" * 64)  # as if it had left another log's head
        counts = _ChainReadsInGuard(other, monkeypatch)
        _note(other, "after the failover")
        assert counts.fork_checks == 1
        assert counts.chain_reads == 0  # the hash compared is the one the round trip read
    finally:
        other.close()


@pytest.mark.parametrize(
    "since_of",
    [
        pytest.param(lambda memo: None, id="nothing-read-in-the-round-trip"),
        pytest.param(lambda memo: KeysSince(memo[2] - 1, "0" * 64, []), id="read-from-another-position"),
        pytest.param(lambda memo: KeysSince(memo[2] + 1, memo[3], []), id="read-from-a-later-position"),
    ],
)
def test_a_chain_hash_read_for_another_position_is_not_taken_for_the_one_left(
    led: Ledger, monkeypatch: pytest.MonkeyPatch, since_of: Any
) -> None:
    """Only a hash read for the very entry this process left the head at stands in for the query."""
    _note(led, "one")
    _note(led, "two")
    memo = led._extends
    assert memo is not None
    counts = _ChainReadsInGuard(led, monkeypatch)
    with led.repo.append_transaction() as conn:
        head = led.repo.head(conn)
        assert head is not None
        led._guard_head(conn, head._replace(seq=head.seq + 1, chain_hash="1" * 64), since_of(memo))
    assert counts.chain_reads == 1
    assert counts.fork_checks == 0  # the hash queried is the one left: the log extends what was proved


def test_a_chain_hash_the_round_trip_found_missing_is_a_fork_check(
    led: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``KeysSince.chain`` None (the log no longer holds the entry this process left the head at) is
    never a match: the log is checked against its anchors."""
    _note(led, "one")
    memo = led._extends
    assert memo is not None
    counts = _ChainReadsInGuard(led, monkeypatch)
    with led.repo.append_transaction() as conn:
        head = led.repo.head(conn)
        assert head is not None
        moved = head._replace(seq=head.seq + 1, chain_hash="1" * 64)
        led._guard_head(conn, moved, KeysSince(memo[2], None, []))
    assert (counts.chain_reads, counts.fork_checks) == (0, 1)


class _NewestAsked:
    def __init__(self, ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
        self.n = 0
        inner = ledger.repo.latest_checkpoint

        def counted(*a: Any, **k: Any) -> Any:
            self.n += 1
            return inner(*a, **k)

        monkeypatch.setattr(ledger.repo, "latest_checkpoint", counted)


def _checkpoints(led: Ledger) -> int:
    with led.repo.read() as conn:
        return int(conn.exec_driver_sql("SELECT count(*) FROM checkpoints").scalar_one())


def test_a_replica_asks_for_the_newest_checkpoint_once_while_it_is_fresh(
    led: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = Ledger.open(led.home.path)
    try:
        monkeypatch.setenv("LEDGER_CHECKPOINT_INTERVAL", "60")
        led.publish_checkpoint()  # the other replica's, fresh
        published = _checkpoints(led)
        asked = _NewestAsked(other, monkeypatch)
        for i in range(5):
            _note(other, f"group {i}")
        assert asked.n == 1  # then remembered: not due before it is 60 s old or 1000 entries behind
        assert _checkpoints(led) == published  # and nothing published meanwhile
    finally:
        other.close()


def test_a_remembered_checkpoint_far_enough_behind_is_due(
    led: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = Ledger.open(led.home.path)
    try:
        monkeypatch.setenv("LEDGER_CHECKPOINT_INTERVAL", "60")
        monkeypatch.setattr(service, "CHECKPOINT_EVERY", 3)
        led.publish_checkpoint()
        published = _checkpoints(led)
        _note(other, "remembers the fresh one")
        assert _checkpoints(led) == published
        _note(other, "two behind")
        _note(other, "three behind: due")
        assert _checkpoints(led) == published + 1
    finally:
        other.close()


def test_a_remembered_checkpoint_as_old_as_the_interval_is_asked_again(
    led: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = Ledger.open(led.home.path)
    try:
        monkeypatch.setenv("LEDGER_CHECKPOINT_INTERVAL", "0.5")
        led.publish_checkpoint()
        published = _checkpoints(led)
        asked = _NewestAsked(other, monkeypatch)
        _note(other, "remembers the fresh one")
        assert (asked.n, _checkpoints(led)) == (1, published)
        time.sleep(0.6)
        _note(other, "the interval has passed")
        assert asked.n == 2
        assert _checkpoints(led) == published + 1
    finally:
        other.close()


def test_a_checkpoint_the_database_stores_no_more_is_published_again_after_the_interval(
    led: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What was remembered only postpones the question (by at most the interval): where the database's
    newest checkpoint went away, the next question after it finds it due."""
    monkeypatch.setenv("LEDGER_CHECKPOINT_INTERVAL", "0.5")
    with led.repo.read() as conn:
        size = led.repo.size(conn)
    led._newest_seen = (size, time.monotonic())  # as if one were stored and fresh
    led._published = None
    published = _checkpoints(led)
    _note(led, "not yet asked")
    assert _checkpoints(led) == published
    time.sleep(0.6)
    _note(led, "asked: due")
    assert _checkpoints(led) == published + 1
