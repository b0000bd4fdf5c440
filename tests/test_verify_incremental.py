"""`ledger verify --from CHECKPOINT`: the log proved consistent with a held signed checkpoint, then only the
entries after it checked; and the streaming verify of the whole log."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

import pytest

from ledger.db import LOG_TABLES
from ledger.errors import ProofError
from ledger.service import Ledger
from tests.api.conftest import LEDGER_BIN


def _notes(led: Ledger, n: int, tag: str) -> None:
    key = led.signing_key("hostA")
    for a in range(0, n, 200):
        led.append(
            [
                led.sign(led.make_statement("note", {"campaign": "v"}, {"text": f"{tag}{i}"}), key)
                for i in range(a, min(n, a + 200))
            ]
        )


@pytest.fixture
def led(tmp_path: Path) -> Ledger:
    led = Ledger.init(tmp_path / "home")
    led.new_key("hostA", ["collector"])
    _notes(led, 300, "before ")
    return led


def _raw(led: Ledger) -> sqlite3.Connection:
    conn = sqlite3.connect(led.database_url.removeprefix("sqlite:///"))
    for table in LOG_TABLES:
        conn.execute(f"DROP TRIGGER IF EXISTS {table}_no_update")
        conn.execute(f"DROP TRIGGER IF EXISTS {table}_no_delete")
    return conn


def test_verify_from_a_held_checkpoint_checks_only_what_follows(led: Ledger) -> None:
    held = led.checkpoint()
    _notes(led, 250, "after ")
    report = led.verify(since=held.note)
    assert report, report.to_json()["problems"]
    assert report.checked_from == held.size and report.size == led.size() == held.size + 250
    assert report.root == led.root().hex()
    full = led.verify()
    assert full and full.root == report.root and full.checked_from == 0
    assert report.checkpoints_checked < full.checkpoints_checked
    # at the head: nothing after it, still consistent
    assert led.verify(since=led.checkpoint().note)


def test_tampered_entry_after_the_held_checkpoint_is_named(led: Ledger) -> None:
    held = led.checkpoint()
    _notes(led, 20, "after ")
    target = held.size + 5
    conn = _raw(led)
    (env,) = conn.execute("SELECT envelope FROM log_entries WHERE seq = ?", (target,)).fetchone()
    i = bytes(env).index(b'"payload":"') + 20  # one base64 character of the signed payload
    forged = bytes(env)[:i] + (b"A" if bytes(env)[i : i + 1] != b"A" else b"B") + bytes(env)[i + 1 :]
    conn.execute("UPDATE log_entries SET envelope = ? WHERE seq = ?", (forged, target))
    conn.commit()
    conn.close()
    report = led.verify(since=held.note, artifacts=False)
    assert not report
    assert {p.seq for p in report.problems} == {target}
    assert "entry-id-mismatch" in {p.code for p in report.problems}


def test_checkpoint_of_another_log_is_refused(led: Ledger, tmp_path: Path) -> None:
    other = Ledger.init(tmp_path / "other")
    try:
        foreign = other.checkpoint().note
    finally:
        other.close()
    with pytest.raises(ProofError):
        led.verify(since=foreign)
    # a note of this log whose body was changed does not verify either
    cp = led.checkpoint()
    forged = cp.note.replace(f"\n{cp.size}\n", f"\n{cp.size - 1}\n", 1)
    with pytest.raises(ProofError):
        led.verify(since=forged)
    path = tmp_path / "foreign.cp"
    path.write_text(foreign)
    r = subprocess.run(
        [LEDGER_BIN, "--home", str(led.home_path), "verify", "--from", str(path)],
        check=False, capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode != 0 and "proof-invalid" in r.stderr


def test_log_rewritten_before_the_held_checkpoint_is_inconsistent(led: Ledger) -> None:
    """A fork: the log loses its tail below the held checkpoint and grows again with other entries."""
    held = led.checkpoint()
    keep = 200
    conn = _raw(led)
    for table in ("entry_subjects", "entry_refs", "entry_artifacts", "log_entries"):
        conn.execute(f"DELETE FROM {table} WHERE seq >= ?", (keep,))
    conn.execute("DELETE FROM checkpoints WHERE size > ?", (keep,))
    conn.commit()
    conn.close()
    # fewer entries than the held checkpoint: entries lost
    report = led.verify(since=held.note)
    assert [p.code for p in report.problems] == ["log-inconsistent"]
    # the forger drops the checkpoint the home holds too: with it the lost log takes no append (nothing is
    # signed under the log's key for a log that does not extend it); the collector's copy is `held`
    led.home.checkpoint_path.unlink()
    _notes(led, held.size - keep + 50, "rewritten ")
    # by itself the rewritten log is well formed (the checkpoint its home holds aside) ...
    assert led.verify(anchor=False)
    report = led.verify(since=held.note)  # ... but not the one the held checkpoint signed
    assert [p.code for p in report.problems] == ["log-inconsistent"]
    assert "not consistent" in report.problems[0].message


def test_verify_from_with_database_url(led: Ledger, tmp_path: Path) -> None:
    held = led.checkpoint()
    _notes(led, 10, "after ")
    path = tmp_path / "held.cp"
    path.write_text(held.note)
    r = subprocess.run(
        [LEDGER_BIN, "--home", str(led.home_path), "verify", "--json", "--database-url", led.database_url,
         "--since-checkpoint", str(path)],
        check=False, capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["ok"] and doc["checked_from"] == held.size and doc["size"] == held.size + 10
