"""Issue 12 (the log's loose ends), for a home upgraded from log format 1 by ``ledger migrate``:

- ``ledger verify --receipts`` did not say what ``ledger audit`` says of such a home (``receipts_from``: its
  first N entries were logged before it kept receipts); both now print it from one function
  (``ledger.cli.core.print_audit`` / ``audit_json``), text and JSON alike.
- ``ledger migrate`` left no HOME/checkpoint: the migrated log had no anchor outside its database, so a
  forger who rewrote history before the format-1 checkpoints and deleted their rows was not noticed.
  ``migrate`` now makes a home that holds none hold the signed checkpoint of the migrated log.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from ledger.db import LOG_TABLES
from ledger.home import Home
from ledger.log import parse_checkpoint
from ledger.service import Ledger
from tests.conftest import CliResult

Cli = Callable[..., CliResult]
FIXTURE = Path(__file__).parent / "fixtures" / "format1-home"
LOGGED = 9  # the fixture's entries (tests/test_migrate.py)
NOTE = "before it kept receipts"


@pytest.fixture
def migrated(cli: Cli, home: Path) -> Path:
    shutil.copytree(FIXTURE, home)
    assert not (home / "checkpoint").exists()  # a format-1 home holds no checkpoint
    r = cli("migrate", "--relocate")
    assert r.code == 0, r.out + r.err
    return home


def _note_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if NOTE in line]


# --- verify --receipts says what audit says -------------------------------------------------------------


def test_verify_receipts_lacked_the_receipts_from_note_of_audit(cli: Cli, migrated: Path) -> None:
    audit = cli("audit")
    verify = cli("verify", "--receipts")
    assert audit.code == 0 and verify.code == 0, verify.out + verify.err
    said = _note_lines(audit.err)
    assert len(said) == 1 and f"the first {LOGGED} entries" in said[0] and f"0..{LOGGED - 1}" in said[0]
    assert _note_lines(verify.err) == said  # the same words: one copy
    assert NOTE not in verify.out and NOTE not in audit.out  # a note on stderr, the summary on stdout


def test_verify_receipts_json_lacked_receipts_from(cli: Cli, migrated: Path) -> None:
    audit = cli("audit", "--json").json()
    verify = cli("verify", "--receipts", "--json").json()
    assert audit["receipts_from"] == LOGGED
    assert verify["receipts"]["receipts_from"] == LOGGED
    assert verify["receipts"] == audit  # the receipts part is the audit's document
    assert "receipts_from" not in verify  # the log's own report is not the receipts'


def test_verify_without_receipts_says_nothing_of_receipts_from(cli: Cli, migrated: Path) -> None:
    r = cli("verify")
    assert r.code == 0 and NOTE not in r.err, r.err
    j = cli("verify", "--json").json()
    assert "receipts" not in j and "receipts_from" not in j


def test_a_home_that_kept_every_receipt_gets_no_receipts_from_note(cli: Cli, home: Path) -> None:
    """Neighbour: ``receipts_from`` 0 (a home made by this ledger) prints no note and no JSON member."""
    assert cli("init").code == 0
    r = cli("verify", "--receipts")
    assert r.code == 0 and NOTE not in r.err, r.err
    j = cli("verify", "--receipts", "--json").json()
    assert "receipts_from" not in j["receipts"] and j["receipts"]["ok"] is True


def test_verify_receipts_with_receipts_from_still_names_a_removed_receipts_file(
    cli: Cli, migrated: Path
) -> None:
    """Neighbour: the note does not excuse an entry past ``receipts_from`` whose receipt is gone."""
    r = cli("record", "note", "--key", "admin", "-s", "campaign=c", "--data", '{"text": "after"}')
    assert r.code == 0, r.err
    (migrated / "receipts.jsonl").unlink()
    v = cli("verify", "--receipts", "--json")
    assert v.code == 1
    assert v.json()["receipts"]["receipts_from"] == LOGGED
    assert [p["code"] for p in v.json()["receipts"]["problems"]] == ["receipts-unchecked"]


# --- migrate leaves the home holding the migrated log's checkpoint --------------------------------------


def test_migrate_left_no_held_checkpoint(cli: Cli, migrated: Path) -> None:
    led = Ledger.open(migrated)
    try:
        held = led.held()
        assert held is not None, "ledger migrate left no HOME/checkpoint"
        assert held.size == LOGGED and held.root == led.root(LOGGED)
        # a C2SP checkpoint of the migrated log: under the origin, the log key's signature
        parsed = parse_checkpoint(held.note, led.origin, led.log_public_key())
        assert parsed.size == LOGGED
    finally:
        led.close()
    j = cli("verify", "--json").json()
    assert j["ok"] is True and j["held_checkpoint"] == LOGGED


def _raw(db: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(db)
    for table in LOG_TABLES:
        conn.execute(f"DROP TRIGGER IF EXISTS {table}_no_update")
        conn.execute(f"DROP TRIGGER IF EXISTS {table}_no_delete")
    return conn


def test_history_rewritten_before_the_migrated_checkpoint_is_log_inconsistent(
    cli: Cli, migrated: Path, tmp_path: Path
) -> None:
    """A forger with the database: cuts the migrated log at 3 entries, deletes every checkpoint row (the
    format-1 ones would name it), and grows the log again with other, validly signed entries — from a copy
    of the home (the home's own checkpoint refuses appends to a log that does not extend it). Only the
    checkpoint ``migrate`` left the home holds names the rewrite."""
    keep = 3
    db = migrated / "ledger.db"
    conn = _raw(db)
    for table in ("entry_subjects", "entry_refs", "entry_artifacts", "log_entries"):
        conn.execute(f"DELETE FROM {table} WHERE seq >= ?", (keep,))
    conn.execute("DELETE FROM checkpoints")
    conn.commit()
    conn.close()
    forger_home = tmp_path / "forger"
    shutil.copytree(migrated, forger_home)
    (forger_home / "checkpoint").unlink()
    forger = Ledger.open(forger_home, database_url=f"sqlite:///{db}")
    try:
        for i in range(LOGGED - keep + 2):
            forger.record("note", {"campaign": "c1"}, {"text": f"rewritten {i}"}, key="admin")
    finally:
        forger.close()

    led = Ledger.open(migrated)
    try:
        assert led.size() == LOGGED + 2
        assert led.verify(anchor=False), "the rewritten log is well formed by itself"
    finally:
        led.close()
    r = cli("verify", "--json")
    assert r.code == 1
    codes = [p["code"] for p in r.json()["problems"]]
    assert codes == ["log-inconsistent"], codes
    text = cli("verify")
    assert text.code == 1 and "log-inconsistent" in text.err and "rewritten before it" in text.err
    # the audit checks the log against the held checkpoint too
    audit = cli("audit", "--json")
    assert audit.code == 1 and "log-inconsistent" in [p["code"] for p in audit.json()["problems"]]


def test_history_cut_below_the_migrated_checkpoint_is_entries_lost(cli: Cli, migrated: Path) -> None:
    """Neighbour: the log cut below the held checkpoint and not grown again: entries lost."""
    conn = _raw(migrated / "ledger.db")
    for table in ("entry_subjects", "entry_refs", "entry_artifacts", "log_entries"):
        conn.execute(f"DELETE FROM {table} WHERE seq >= ?", (5,))
    conn.execute("DELETE FROM checkpoints")
    conn.commit()
    conn.close()
    r = cli("verify", "--json")
    assert r.code == 1
    problems = r.json()["problems"]
    assert [p["code"] for p in problems] == ["log-inconsistent"]
    assert "entries lost" in problems[0]["message"]


def test_migrate_again_keeps_the_checkpoint_the_home_holds(cli: Cli, migrated: Path) -> None:
    """Neighbour: a second migrate (and one after the log grew) leaves the held checkpoint as it is."""
    held = (migrated / "checkpoint").read_bytes()
    r = cli("migrate")
    assert r.code == 0 and "already at revision" in r.out and "holds the signed checkpoint" not in r.out
    assert (migrated / "checkpoint").read_bytes() == held


def test_migrate_of_a_current_home_without_a_checkpoint_holds_one(cli: Cli, home: Path) -> None:
    """Neighbour: a home at the current revision whose checkpoint file was removed holds one again."""
    assert cli("init").code == 0
    r = cli("record", "note", "--key", "admin", "-s", "campaign=c", "--data", '{"text": "x"}')
    assert r.code == 0, r.err
    (home / "checkpoint").unlink(missing_ok=True)
    r = cli("migrate")
    assert r.code == 0, r.err
    assert f"at size {Ledger.open(home).size()}" in r.out
    led = Ledger.open(home)
    try:
        held = led.held()
        assert held is not None and held.size == led.size() and held.root == led.root()
    finally:
        led.close()


def test_migrate_of_a_current_home_keeps_its_newer_checkpoint(cli: Cli, home: Path) -> None:
    """Neighbour: a held checkpoint is never replaced by migrate (appends and publications move it on)."""
    assert cli("init").code == 0
    assert cli("checkpoint").code == 0
    before = (home / "checkpoint").read_bytes()
    assert cli("migrate", "--json").code == 0
    assert (home / "checkpoint").read_bytes() == before


def test_migrate_names_a_home_it_cannot_leave_a_checkpoint_in(
    cli: Cli, migrated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neighbour: when HOME/checkpoint cannot be written (or read), migrate fails naming it — never a home
    silently left unanchored; run again once writable, it holds the checkpoint."""
    (migrated / "checkpoint").unlink()

    def refuse(self: Home, note: str) -> None:
        raise PermissionError(13, "Permission denied", str(self.checkpoint_path))

    with monkeypatch.context() as m:
        m.setattr(Home, "hold_checkpoint", refuse)
        r = cli("migrate")
    assert r.code != 0 and "storage" in r.err and "could not be held" in r.err, r.err
    assert Home(migrated).held_checkpoint() is None
    (migrated / "checkpoint").mkdir()  # a directory where the file goes: unreadable, named
    r = cli("migrate")
    assert r.code != 0 and "checkpoint" in r.err and "unreadable" in r.err, r.err
    (migrated / "checkpoint").rmdir()
    r = cli("migrate")
    assert r.code == 0 and f"at size {LOGGED}" in r.out, r.err
    assert Home(migrated).held_checkpoint() is not None
