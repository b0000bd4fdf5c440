"""Audit 24, f2: a stored tile whose ``root`` a superuser rewrote (triggers off) made the log key sign,
store and hold-check a checkpoint that is not the log's — a fork under the log's key — and `ledger
checkpoint` exited 0. A checkpoint is published only where the log still extends the one the home holds."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from ledger.errors import LogInconsistentError, TileMismatchError
from ledger.service import Ledger
from tests.reliability.test_receipts import _drop_triggers


def _log(home: Path, n: int) -> Ledger:
    led = Ledger.init(home)
    for i in range(n):
        led.record("note", {"campaign": "c"}, {"text": f"n{i}"}, key="admin")
    return led


def _checkpoints(led: Ledger) -> int:
    with led.engine.begin() as conn:
        return int(conn.execute(sa.text("SELECT count(*) FROM checkpoints")).scalar_one())


def test_a_rewritten_tile_root_is_not_signed_and_published_as_the_logs_checkpoint(tmp_path: Path) -> None:
    led = _log(tmp_path / "home", 300)  # a full tile 0/0 (256 leaves) is stored
    try:
        held = led.checkpoint()
        assert led.held() == held
        with led.engine.begin() as conn:
            _drop_triggers(conn)
            assert conn.execute(sa.text("UPDATE tiles SET root = :r WHERE level = 0 AND idx = 0"),
                                {"r": b"\x01" * 32}).rowcount == 1  # fmt: skip
        # nor is an entry appended to it: its receipt would be signed under the log's key (audit 37, f4)
        # the rewritten tile is named as one (fix 137: one name for a bad tile, whoever meets it)
        with pytest.raises(TileMismatchError, match="does not extend the checkpoint this home holds"):
            led.record("note", {"campaign": "c"}, {"text": "after"}, key="admin")
        assert led.size() == 301
        before = _checkpoints(led)
        with pytest.raises(TileMismatchError, match="stored tile 0/000 is not the log's"):
            led.checkpoint()
        assert _checkpoints(led) == before  # nothing stored
        assert led.held() == held  # the anchor stays
    finally:
        led.close()


def test_a_log_that_lost_entries_below_the_held_checkpoint_is_not_published(tmp_path: Path) -> None:
    """Neighbour: the newest entries deleted below the held size, tiles and all: no smaller fork is signed."""
    led = _log(tmp_path / "home", 5)
    try:
        led.checkpoint()
        with led.engine.begin() as conn:
            _drop_triggers(conn)
            newest = int(conn.execute(sa.text("SELECT max(seq) FROM log_entries")).scalar_one())
            for table in ("entry_subjects", "entry_refs", "entry_artifacts", "log_entries"):
                conn.execute(sa.text(f"DELETE FROM {table} WHERE seq = :s"), {"s": newest})
            conn.execute(sa.text("DELETE FROM tiles"))
        with pytest.raises(LogInconsistentError):
            led.checkpoint()
    finally:
        led.close()


def test_a_log_that_extends_the_held_checkpoint_is_published(tmp_path: Path) -> None:
    """Neighbour: the ordinary case, and an earlier size of the same log."""
    led = _log(tmp_path / "home", 5)
    try:
        first = led.checkpoint()
        led.record("note", {"campaign": "c"}, {"text": "more"}, key="admin")
        second = led.checkpoint()
        assert second.size == first.size + 1 and led.held() == second
        earlier = led.checkpoint(size=first.size)
        assert earlier.root == first.root
    finally:
        led.close()
