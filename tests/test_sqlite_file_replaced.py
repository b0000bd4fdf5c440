"""A SQLite database restored from a copy under a running server (audit 20, f5).

The server's pooled connections stayed on the replaced, unlinked file: it kept signing checkpoints of the
lost log (size 7 where the file held 4) and accepted appends into the deleted file, with receipts; at its
restart they were gone. Connections follow the file the home's path names now."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from ledger.errors import StorageError
from ledger.service import Ledger


def _notes(led: Ledger, n: int, tag: str) -> None:
    for i in range(n):
        led.record("note", {"campaign": "c"}, {"text": f"{tag} {i}"}, key="admin")


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


def test_a_database_restored_under_a_running_ledger_is_the_one_it_reads_and_appends_to(
    tmp_path: Path,
) -> None:
    led = Ledger.init(tmp_path / "home")
    try:
        db = Path(led.engine.url.database or "")
        _notes(led, 2, "a")
        kept = led.size()
        _backup(db, tmp_path / "backup.db")
        _notes(led, 3, "b")
        assert led.size() == kept + 3
        _restore(tmp_path / "backup.db", db)
        assert led.size() == kept  # the restored file, not the pooled connections' unlinked one
        _notes(led, 1, "c")
        assert led.size() == kept + 1
    finally:
        led.close()
    again = Ledger.open(tmp_path / "home")
    try:
        assert again.size() == kept + 1  # the append after the restore went into the file that stays
    finally:
        again.close()


def test_a_database_file_gone_under_a_running_ledger_fails_and_creates_nothing(tmp_path: Path) -> None:
    """Neighbour: with no file at the path any more, a request fails; no empty database is created."""
    led = Ledger.init(tmp_path / "home")
    try:
        db = Path(led.engine.url.database or "")
        _notes(led, 1, "a")
        os.replace(db, tmp_path / "moved.db")
        for side in ("-wal", "-shm"):
            Path(f"{db}{side}").unlink(missing_ok=True)
        with pytest.raises(StorageError, match="is gone"):
            led.size()
        assert not db.exists()
    finally:
        led.close()
