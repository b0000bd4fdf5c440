"""Audit 37, f4: an older backup of the database restored under a running server made the log key sign a
fork. The server kept appending to the shorter log — receipts at indexes the key had already receipted to
other entries — and ``GET /checkpoint`` signed a size-5 checkpoint whose root was not the held size-5
root; the scheduled publication failed (``log-inconsistent``) and the failure was swallowed. One check
(``Ledger._refuse_fork``, the one ``ledger checkpoint`` runs) now guards every signing under the log key:
the append is refused with nothing stored, ``/checkpoint`` is HTTP 500, and a failed publication is logged."""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from ledger.api.app import create_app
from ledger.api.settings import ApiSettings
from ledger.errors import LogInconsistentError
from ledger.service import Ledger
from ledger.tokens import create_token
from tests.reliability import api_fixtures
from tests.reliability.api_fixtures import PgDatabases
from tests.reliability.test_receipts import _drop_triggers

pg_databases = api_fixtures.pg_databases


def _note(led: Ledger, text: str) -> None:
    led.record("note", {"campaign": "c"}, {"text": text}, key="admin")


def _backup(db: Path, to: Path) -> None:
    src, dst = sqlite3.connect(db), sqlite3.connect(to)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()


def _restore(copy: Path, db: Path) -> None:
    for side in ("-wal", "-shm"):
        Path(f"{db}{side}").unlink(missing_ok=True)
    os.replace(copy, db)


@pytest.fixture
def rolled_back(tmp_path: Path) -> Iterator[tuple[Ledger, int]]:
    """A running ledger whose home holds a checkpoint of size 5, its database then restored from a backup
    taken at size 2 (the f4 repro, in process). Yields the ledger and the held size."""
    led = Ledger.init(tmp_path / "home")
    try:
        _note(led, "a")
        db = Path(led.engine.url.database or "")
        assert led.size() == 2
        _backup(db, tmp_path / "backup.db")
        for t in ("b", "c", "d"):
            _note(led, t)
        held = led.checkpoint()
        assert held.size == 5 and led.held() == held
        _restore(tmp_path / "backup.db", db)
        assert led.size() == 2
        yield led, held.size
    finally:
        led.close()


def test_a_restored_older_backup_gets_no_append_and_no_receipt_at_indexes_already_receipted(
    rolled_back: tuple[Ledger, int],
) -> None:
    led, held = rolled_back
    with pytest.raises(LogInconsistentError, match=rf"does not extend the checkpoint .*size {held}"):
        _note(led, "fork")
    assert led.size() == 2  # nothing stored half-way
    with pytest.raises(LogInconsistentError):  # a batch, and a re-sent entry of the restored log too
        led.append([led.sign(led.make_statement("note", {"campaign": "c"}, {"text": "x"}), "admin")])
    with pytest.raises(LogInconsistentError):  # nor a receipt asked for directly
        led.receipt(led.get_seq(1))
    assert led.size() == 2


def test_a_restored_older_backup_signs_no_checkpoint_served_published_or_in_a_proof(
    rolled_back: tuple[Ledger, int],
) -> None:
    led, _ = rolled_back
    held_note = led.held()
    for sign in (
        led.signed_checkpoint,
        led.served_checkpoint,
        led.checkpoint,
        led.publish_checkpoint,
        lambda: led.inclusion(led.get_seq(1).entry_id),
        lambda: led.consistency(1),
    ):
        with pytest.raises(LogInconsistentError):
            sign()
    assert led.held() == held_note  # the anchor stays


def test_a_restored_older_backup_is_http_500_for_appends_and_the_checkpoint(
    rolled_back: tuple[Ledger, int],
) -> None:
    led, _ = rolled_back
    token, _ = create_token(led.engine, "w", "writer")
    h = {"Authorization": f"Bearer {token}"}
    env = led.sign(led.make_statement("note", {"campaign": "c"}, {"text": "over http"}), "admin").to_json()
    with TestClient(create_app(ApiSettings(home=str(led.home_path)), ledger=led)) as c:
        r = c.post("/v1/entries", json=env, headers=h)
        assert r.status_code == 500 and "log-inconsistent" in r.text, r.text
        assert "receipt" not in r.json()
        r = c.get("/checkpoint", headers=h)
        assert r.status_code == 500 and "log-inconsistent" in r.text, r.text
    assert led.size() == 2


def test_a_log_that_still_extends_the_held_checkpoint_appends_and_serves(tmp_path: Path) -> None:
    """Neighbour: a backup restored that holds every entry the held checkpoint covers (the ordinary case:
    the newest backup) is appended to and served; a checkpoint of an earlier size is signed too."""
    led = Ledger.init(tmp_path / "home")
    try:
        db = Path(led.engine.url.database or "")
        _note(led, "a")
        held = led.checkpoint()
        _backup(db, tmp_path / "backup.db")
        _note(led, "lost")  # after the held checkpoint: a restore may lose it
        _restore(tmp_path / "backup.db", db)
        _note(led, "after")
        assert led.size() == held.size + 1
        assert led.receipt(led.get_seq(held.size)).to_json()["index"] == held.size
        assert led.signed_checkpoint().size == held.size + 1
        assert led.signed_checkpoint(size=1).size == 1
        assert led.checkpoint().size == held.size + 1
    finally:
        led.close()


def test_a_home_holding_no_checkpoint_appends_after_a_restore(tmp_path: Path) -> None:
    """Neighbour: the operator removed HOME/checkpoint (accepting the restored log): nothing held, nothing
    to extend, appends go on."""
    led = Ledger.init(tmp_path / "home")
    try:
        db = Path(led.engine.url.database or "")
        _note(led, "a")
        _backup(db, tmp_path / "backup.db")
        _note(led, "b")
        led.checkpoint()
        _restore(tmp_path / "backup.db", db)
        (led.home_path / "checkpoint").unlink()
        assert led.held() is None
        _note(led, "c")
        assert led.size() == 3
    finally:
        led.close()


def test_a_scheduled_publication_that_fails_is_logged_not_swallowed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The sequencer's publication of a log whose stored tile root was rewritten under the running process
    (the append itself stands: its entries are the log's, at a head the sequencer proved) is refused and
    logged, naming the problem."""
    monkeypatch.setenv("LEDGER_CHECKPOINT_INTERVAL", "3600")
    led = Ledger.init(tmp_path / "home")
    try:
        for i in range(300):  # a full tile 0/0 (256 leaves) is stored
            _note(led, f"n{i}")
        held = led.publish_checkpoint()
        _note(led, "checked")  # the sequencer proves this head extends the held checkpoint; none due
        assert led.held() == held
        with led.engine.begin() as conn:
            _drop_triggers(conn)
            conn.execute(
                sa.text("UPDATE tiles SET root = :r WHERE level = 0 AND idx = 0"), {"r": b"\x01" * 32}
            )
        monkeypatch.setenv("LEDGER_CHECKPOINT_INTERVAL", "0")  # the next append publishes
        with caplog.at_level(logging.ERROR, logger="ledger.checkpoint"):
            _note(led, "published")
        assert led.size() == 303 and led.held() == held
        msgs = [r.getMessage() for r in caplog.records if r.name == "ledger.checkpoint"]
        # the stored tile the root was read from is named as every reader names it (fix137)
        assert any("not published" in m and "error[tile-mismatch]" in m for m in msgs), msgs
    finally:
        led.close()


@pytest.mark.postgres
def test_a_postgres_log_that_lost_entries_below_the_held_checkpoint_gets_no_append(
    tmp_path: Path, pg_databases: PgDatabases
) -> None:
    """The same on PostgreSQL (the sequencer's pipelined transaction): the newest entries of a shared
    database lost (a point-in-time restore; here deleted, tiles and all) below the held checkpoint."""
    api_fixtures.require_postgres()
    led = Ledger.init(tmp_path / "home", database_url=pg_databases.new())
    try:
        for t in ("a", "b", "c", "d"):
            _note(led, t)
        held = led.checkpoint()
        with led.engine.begin() as conn:
            _drop_triggers(conn)
            for table in ("entry_subjects", "entry_refs", "entry_artifacts", "log_entries"):
                conn.execute(sa.text(f"DELETE FROM {table} WHERE seq >= 2"))
            conn.execute(sa.text("DELETE FROM tiles"))
        with pytest.raises(LogInconsistentError, match=rf"size {held.size}"):
            _note(led, "fork")
        assert led.size() == 2
        with pytest.raises(LogInconsistentError):
            led.signed_checkpoint()
    finally:
        led.close()
