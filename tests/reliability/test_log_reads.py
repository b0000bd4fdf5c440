"""Reads never write, checkpoints are the sequencer's, and a stale tree never signs (issue 12).

Findings: every checkpoint or proof request ran a locked write transaction and inserted a checkpoint row;
after a database rollback or failover a server with a warm in-memory tree kept signing checkpoints of the
lost log (it only appended rows with ``seq >= len(tree)``).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

import ledger.service as service
from ledger.db import LOG_TABLES
from ledger.errors import LogInconsistentError, StorageError, UnknownSignerError
from ledger.home import Home
from ledger.log import MerkleTree, sign_checkpoint
from ledger.proofs import verify_proof_document
from ledger.service import Ledger
from tests.reliability import api_fixtures
from tests.reliability.api_fixtures import PgDatabases, make_deployment, start_server

pg_databases = api_fixtures.pg_databases


def _url(backend: str, tmp_path: Path, pg: PgDatabases) -> str:
    if backend == "postgres":
        api_fixtures.require_postgres()
        return pg.new()
    return f"sqlite:///{tmp_path / 'home' / 'ledger.db'}"


@pytest.fixture(params=["sqlite", "postgres"])
def led(request: pytest.FixtureRequest, tmp_path: Path, pg_databases: PgDatabases) -> Iterator[Ledger]:
    led = Ledger.init(tmp_path / "home", database_url=_url(request.param, tmp_path, pg_databases))
    led.new_key("hostA", ["collector"])
    for i in range(8):
        led.record("note", {"campaign": "c"}, {"text": f"#{i}"}, key="hostA")
    yield led
    led.close()


def _checkpoint_rows(led: Ledger) -> int:
    with led.engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT count(*) FROM checkpoints")).scalar_one())


def _true_root(led: Ledger) -> tuple[int, bytes]:
    """The root of the log as the database holds it, from a ledger object with no cache."""
    fresh = Ledger.open(led.home_path, database_url=led.database_url)
    try:
        leaves = fresh.leaf_hashes()
        return len(leaves), MerkleTree(leaves).root()
    finally:
        fresh.close()


def test_checkpoint_and_proof_reads_insert_no_checkpoint_rows(led: Ledger) -> None:
    before = _checkpoint_rows(led)
    first = led.get_seq(1).entry_id
    for _ in range(5):
        led.signed_checkpoint()
        led.keep_checkpoint()
        led.inclusion(first)
        led.consistency(2)
    assert _checkpoint_rows(led) == before


def test_reads_wait_for_no_appender_lock(led: Ledger) -> None:
    """Reads take no write lock: they answer while another process holds the appenders' lock."""
    entry = led.get_seq(2).entry_id
    if led.database_dialect == "sqlite":
        holder: Any = sqlite3.connect(led.database_url.removeprefix("sqlite:///"), isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
    else:
        holder = led.engine.connect()
        holder.exec_driver_sql("BEGIN")
        holder.exec_driver_sql("SELECT pg_advisory_xact_lock(7715094201)")
    done: list[Any] = []

    def reads() -> None:
        done.append((led.signed_checkpoint(), led.inclusion(entry), led.consistency(3)))

    t = threading.Thread(target=reads, daemon=True)
    try:
        t.start()
        t.join(timeout=20)
        assert done, "a read waited for the appenders' lock"
    finally:
        holder.rollback() if hasattr(holder, "rollback") else None
        holder.close()


def test_appends_publish_checkpoints(led: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sequencer publishes after appends: every CHECKPOINT_EVERY entries, or when the last is old."""
    monkeypatch.setenv("LEDGER_CHECKPOINT_INTERVAL", "3600")
    monkeypatch.setattr(service, "CHECKPOINT_EVERY", 4)
    n = _checkpoint_rows(led)
    assert n >= 1  # the first append (the genesis) published one
    sizes_before = led.size()
    for i in range(8):
        led.record("note", {"campaign": "c"}, {"text": f"more {i}"}, key="hostA")
    assert _checkpoint_rows(led) >= n + 1
    with led.engine.connect() as conn:
        newest = conn.execute(sa.text("SELECT max(size) FROM checkpoints")).scalar_one()
    assert sizes_before < newest <= led.size()
    monkeypatch.setenv("LEDGER_CHECKPOINT_INTERVAL", "0")
    e = led.record("note", {"campaign": "c"}, {"text": "now"}, key="hostA")
    assert led.repo.checkpoint_root(e.seq + 1) is not None
    assert led.verify()
    monkeypatch.setenv("LEDGER_CHECKPOINT_INTERVAL", "soon")
    with pytest.raises(Exception) as err:
        led.record("note", {"campaign": "c"}, {"text": "mistyped interval"}, key="hostA")
    assert getattr(err.value, "code", "") == "bad-config"


def _roll_back(led: Ledger, keep: int) -> None:
    """Lose every entry from ``keep`` on, as a restore from backup or a failover to a lagging replica
    does (done here with raw SQL, the append-only triggers dropped)."""
    with led.engine.begin() as conn:
        for table in LOG_TABLES:
            if conn.dialect.name == "sqlite":
                conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {table}_no_delete")
            else:
                conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {table}_append_only ON {table}")
        for table in ("entry_subjects", "entry_refs", "entry_artifacts", "log_entries"):
            conn.execute(sa.text(f"DELETE FROM {table} WHERE seq >= :k"), {"k": keep})
        conn.execute(sa.text("DELETE FROM checkpoints WHERE size > :k"), {"k": keep})


def test_stale_tree_never_signs_the_lost_log(led: Ledger) -> None:
    """Finding: a warm tree kept signing checkpoints of the log a rollback lost. The cache is checked
    against the database's chain hash at its end before it signs, and rebuilt when it differs."""
    led.new_key("hostB", ["collector"])  # enrolled after the point the database rolls back to
    led.record("note", {"campaign": "c"}, {"text": "by hostB"}, key="hostB")
    warm = led.signed_checkpoint()
    assert led.inclusion(led.get_seq(led.size() - 1).entry_id)  # the tree and keyring are warm
    keep = 6
    _roll_back(led, keep)
    # below the checkpoint just signed (and held): a fork, refused; the operator who accepts the rolled-back
    # log removes the anchor, and then what is signed is what the database holds, never the warm tree's log
    with pytest.raises(LogInconsistentError):
        led.signed_checkpoint()
    (led.home_path / "checkpoint").unlink()
    cp = led.signed_checkpoint()
    assert (cp.size, cp.root) == _true_root(led) and cp.size == keep != warm.size
    # the log grows again, differently: what the warm object signs is the database's log
    for i in range(4):
        led.record("note", {"campaign": "c"}, {"text": f"after rollback {i}"}, key="hostA")
    cp = led.signed_checkpoint()
    assert (cp.size, cp.root) == _true_root(led)
    doc = led.inclusion(led.get_seq(keep + 1).entry_id)
    assert verify_proof_document(doc, led.log_public_key().b64)["ok"]
    # the key enrolled in the lost part of the log is not known any more
    st = led.make_statement("note", {"campaign": "c"}, {"text": "lost key"})
    with pytest.raises(UnknownSignerError):
        led.append([led.sign(st, "hostB")])
    assert led.verify()


def test_warm_server_after_rollback_signs_the_database_log(tmp_path: Path, pg_databases: PgDatabases) -> None:
    """The same against `ledger serve` on PostgreSQL: the server's proof and checkpoint caches are warm."""
    dep = make_deployment("postgres", tmp_path / "server", pg_databases)
    srv = start_server(dep.home)
    try:
        h = dep.headers("reader")
        envs = [dep.sign("note", {"campaign": "c"}, {"text": f"#{i}"}) for i in range(10)]
        r = httpx.post(srv.url + "/v1/entries/batch", json={"envelopes": envs}, headers=dep.headers("writer"))
        assert r.status_code == 201, r.text
        last = r.json()["items"][-1]["id"]
        assert httpx.get(f"{srv.url}/v1/proofs/inclusion/{last}", headers=h).status_code == 200
        _roll_back(dep.ledger, 5)
        # below the checkpoint the home holds: a fork, nothing signed under the log key nor appended (audit
        # 37, f4); the operator who accepts the rolled-back log removes the anchor, and then what is signed
        # is what the database holds, never the warm caches' log
        r = httpx.get(srv.url + "/v1/checkpoint", headers=h)
        assert r.status_code == 500 and r.json()["code"] == "log-inconsistent", r.text
        r = httpx.post(srv.url + "/v1/entries", json=envs[0], headers=dep.headers("writer"))
        assert r.status_code == 500 and r.json()["code"] == "log-inconsistent", r.text
        (dep.home / "checkpoint").unlink()
        cp = httpx.get(srv.url + "/v1/checkpoint", headers=h).json()
        size, root = _true_root(dep.ledger)
        assert (cp["size"], cp["root"]) == (size, root.hex())
        envs = [dep.sign("note", {"campaign": "c"}, {"text": f"new {i}"}) for i in range(3)]
        r = httpx.post(srv.url + "/v1/entries/batch", json={"envelopes": envs}, headers=dep.headers("writer"))
        assert r.status_code == 201, r.text
        cp = httpx.get(srv.url + "/v1/checkpoint", headers=h).json()
        size, root = _true_root(dep.ledger)
        assert (cp["size"], cp["root"]) == (size, root.hex())
    finally:
        srv.stop()
        dep.ledger.close()


# --- issue 12, fix 73: a checkpoint handed out and not held ------------------------------------------------
# Finding: `ledger serve` (a process that is not home-bound) held only the checkpoints its sequencer published
# (every 1000 entries or LEDGER_CHECKPOINT_INTERVAL seconds); the checkpoints it signed for reads (GET
# /checkpoint, the one an inclusion proof carries) moved nothing. Whether a rollback below a checkpoint a
# client already had was refused hung on whether a publication happened to be due: the warm-server test
# above passed when the genesis checkpoint was over 1 s old at the batch, and a fork of a checkpoint the log
# key had signed was signed otherwise. Every checkpoint signed under the log's key is now held first.

NEVER_DUE = (
    "3600"  # no scheduled publication during a test: only what is signed for reads can move the anchor
)


def _held(home: Path) -> int | None:
    cpf = home / "checkpoint"
    return int(cpf.read_text().splitlines()[1]) if cpf.exists() else None


def test_a_checkpoint_served_for_a_read_and_not_held_let_a_rollback_below_it_be_signed(
    tmp_path: Path, pg_databases: PgDatabases
) -> None:
    """The warm-server scenario with no publication due: the checkpoint the inclusion proof carried is held,
    so the rollback below it is refused (before the fix: 200 and a checkpoint of the shorter log)."""
    dep = make_deployment("postgres", tmp_path / "server", pg_databases)
    genesis = _held(dep.home)
    srv = start_server(dep.home, env={"LEDGER_CHECKPOINT_INTERVAL": NEVER_DUE})
    try:
        h = dep.headers("reader")
        envs = [dep.sign("note", {"campaign": "c"}, {"text": f"#{i}"}) for i in range(10)]
        r = httpx.post(srv.url + "/v1/entries/batch", json={"envelopes": envs}, headers=dep.headers("writer"))
        assert r.status_code == 201, r.text
        assert _held(dep.home) == genesis  # nothing published: the schedule is not what this test relies on
        r = httpx.get(f"{srv.url}/v1/proofs/inclusion/{r.json()['items'][-1]['id']}", headers=h)
        assert r.status_code == 200, r.text
        served = r.json()["checkpoint"]
        assert _held(dep.home) == dep.ledger.size()
        assert served.split("\n")[1] == str(dep.ledger.size())
        _roll_back(dep.ledger, 5)
        for path in ("/v1/checkpoint", "/v1/proofs/consistency?old=2&new=4"):
            r = httpx.get(srv.url + path, headers=h)
            assert r.status_code == 500 and r.json()["code"] == "log-inconsistent", (path, r.text)
    finally:
        srv.stop()
        dep.ledger.close()


@pytest.mark.parametrize("read", ["signed_checkpoint", "inclusion", "consistency"])
def test_each_read_that_signs_holds_its_checkpoint(
    led: Ledger, read: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neighbours: every read that hands out a checkpoint under the log key holds it — a ledger opened as
    `ledger serve` opens it (not home-bound) — and a rollback below it is then refused, whatever the read."""
    monkeypatch.setenv("LEDGER_CHECKPOINT_INTERVAL", NEVER_DUE)
    assert not led.home_bound
    led.record("note", {"campaign": "c"}, {"text": "past the anchor"}, key="hostA")
    size = led.size()
    assert (_held(led.home_path) or 0) < size
    if read == "signed_checkpoint":
        led.signed_checkpoint()
    elif read == "inclusion":
        led.inclusion(led.get_seq(size - 1).entry_id)
    else:
        led.consistency(1, size)
    assert _held(led.home_path) == size
    _roll_back(led, size - 1)
    with pytest.raises(LogInconsistentError):
        led.signed_checkpoint()
    assert _held(led.home_path) == size  # the evidence stays


def test_an_audit_proof_is_still_not_held(led: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    """Neighbour: the local audit's own proofs (``anchor=False``) are never handed out and hold nothing."""
    monkeypatch.setenv("LEDGER_CHECKPOINT_INTERVAL", NEVER_DUE)
    led.record("note", {"campaign": "c"}, {"text": "past the anchor"}, key="hostA")
    before = _held(led.home_path)
    led.inclusion(led.get_seq(led.size() - 1).entry_id, anchor=False)
    assert _held(led.home_path) == before


def test_a_removed_anchor_is_held_again_by_the_next_signature(
    led: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neighbour: after the operator removes HOME/checkpoint (accepting a rolled-back log), the next one
    signed is held even though it is smaller than one this process held before (no stale memo of it)."""
    monkeypatch.setenv("LEDGER_CHECKPOINT_INTERVAL", NEVER_DUE)
    big = led.signed_checkpoint()
    assert _held(led.home_path) == big.size
    _roll_back(led, 4)
    (led.home_path / "checkpoint").unlink()
    assert led.signed_checkpoint().size == 4
    assert _held(led.home_path) == 4
    _roll_back(led, 3)  # a second rollback, below what was signed after the first: refused too
    with pytest.raises(LogInconsistentError):
        led.signed_checkpoint()


def test_a_checkpoint_the_home_cannot_hold_is_not_handed_out(
    led: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neighbour: a home whose checkpoint cannot be written refuses the read (``StorageError`` naming the
    file), never hands out a checkpoint the anchor does not cover."""
    monkeypatch.setenv("LEDGER_CHECKPOINT_INTERVAL", NEVER_DUE)
    led.record("note", {"campaign": "c"}, {"text": "past the anchor"}, key="hostA")
    before = _held(led.home_path)

    def refuse(self: Home, note: str) -> None:
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(Home, "hold_checkpoint", refuse)
    with pytest.raises(StorageError, match="checkpoint"):
        led.signed_checkpoint()
    assert _held(led.home_path) == before


def test_a_log_that_changed_while_a_checkpoint_was_signed_is_refused(
    led: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neighbour: the log rolled back between the read that signed a checkpoint and its holding: the hold
    is refused (``LogInconsistentError``), never skipped in silence with the checkpoint handed out."""
    monkeypatch.setenv("LEDGER_CHECKPOINT_INTERVAL", NEVER_DUE)
    led.record("note", {"campaign": "c"}, {"text": "past the anchor"}, key="hostA")
    size = led.size()
    with led.repo.read(snapshot=True) as conn:
        root = led._tree_at(conn).root()
    cp = sign_checkpoint(led.cfg.origin, size, root, led._log_signing_key(), key_name=led.note_key_name)
    before = _held(led.home_path)
    assert before is not None and before < size
    _roll_back(led, size - 1)
    with pytest.raises(LogInconsistentError, match="no longer holds the checkpoint just signed"):
        led._hold(cp)
    assert _held(led.home_path) == before
