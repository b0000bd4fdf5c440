"""Issue 12 (the log's loose ends): the check of a log against a signed checkpoint held outside it was written
three times (``Ledger._refuse_fork``, ``reads.check_extends_held``, ``verify._consistent``). ``verify``'s is
now the one function ``held_fault``; these pin what it decides — and that an unreadable root is a fault,
never a pass — and that ``verify`` (whole and from a held checkpoint) still names each fault."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger.db import LOG_TABLES
from ledger.errors import IntegrityError, ProofError
from ledger.log import Checkpoint, sign_checkpoint
from ledger.service import Ledger
from ledger.verify import HeldFault, held_fault


@pytest.fixture
def led(tmp_path: Path) -> Iterator[Ledger]:
    led = Ledger.init(tmp_path / "home")
    for i in range(6):
        led.record("note", {"campaign": "c"}, {"text": f"n{i}"}, key="admin")
    yield led
    led.close()


def _signed(led: Ledger, size: int, root: bytes) -> Checkpoint:
    return sign_checkpoint(led.origin, size, root, led.signing_key("log"), key_name=led.note_key_name)


def test_held_fault_passes_only_a_log_that_extends_the_checkpoint(led: Ledger) -> None:
    held = led.checkpoint()
    assert held_fault(held.size, held, led.root) is None  # at its size
    led.record("note", {"campaign": "c"}, {"text": "later"}, key="admin")
    assert held_fault(led.size(), held, led.root) is None  # grown past it


def test_held_fault_names_entries_lost(led: Ledger) -> None:
    held = led.checkpoint()
    fault = held_fault(held.size - 2, held, led.root)
    assert isinstance(fault, HeldFault) and fault.lost and fault.root is None
    assert "2 of the entries it covers are gone" in fault.reason()


def test_held_fault_names_a_rewritten_prefix(led: Ledger) -> None:
    held = led.checkpoint()
    other = _signed(led, held.size, bytes(32))
    fault = held_fault(led.size(), other, led.root)
    assert fault is not None and not fault.lost and fault.root == led.root(held.size)
    assert f"first {held.size} entries hash to root {fault.root.hex()[:16]}" in fault.reason()


def test_held_fault_reads_an_unreadable_root_as_a_fault_not_a_pass(led: Ledger) -> None:
    held = led.checkpoint()

    def unreadable(size: int) -> bytes:
        raise IntegrityError(f"tile 0/0 missing below {size}")

    fault = held_fault(led.size(), held, unreadable)
    assert fault is not None and not fault.lost and fault.root is None
    assert fault.reason() == f"tile 0/0 missing below {held.size}"


def test_held_fault_of_size_zero(led: Ledger) -> None:
    empty = _signed(led, 0, led.root(0))
    assert held_fault(led.size(), empty, led.root) is None
    assert held_fault(0, empty, led.root) is None
    wrong = _signed(led, 0, bytes(32))
    fault = held_fault(led.size(), wrong, led.root)
    assert fault is not None and not fault.lost


def _raw(led: Ledger) -> sqlite3.Connection:
    conn = sqlite3.connect(led.database_url.removeprefix("sqlite:///"))
    for table in LOG_TABLES:
        conn.execute(f"DROP TRIGGER IF EXISTS {table}_no_update")
        conn.execute(f"DROP TRIGGER IF EXISTS {table}_no_delete")
    return conn


def test_verify_from_a_checkpoint_of_another_root_names_the_rewrite(led: Ledger) -> None:
    """Neighbour, through ``verify._consistent``: a held checkpoint (validly signed) whose root the log's
    prefix does not have is ``log-inconsistent`` "rewritten before it", the roots named."""
    size = led.size()
    forged = _signed(led, size - 1, bytes(32))
    report = led.verify(since=forged, anchor=False)
    assert [p.code for p in report.problems] == ["log-inconsistent"]
    msg = report.problems[0].message
    assert "rewritten before it" in msg and f"first {size - 1} entries hash to root" in msg


def test_verify_from_a_checkpoint_larger_than_the_log_names_entries_lost(led: Ledger) -> None:
    forged = _signed(led, led.size() + 3, bytes(32))
    report = led.verify(since=forged, anchor=False)
    assert [p.code for p in report.problems] == ["log-inconsistent"]
    assert "(entries lost)" in report.problems[0].message


def test_held_anchor_against_a_rewritten_prefix_is_log_inconsistent(led: Ledger) -> None:
    """Neighbour, through ``verify._check_anchor``: the home's checkpoint, the log cut below it and grown
    again (the forger from a copy without the checkpoint file) — whole verify names the rewrite."""
    held = led.checkpoint()
    conn = _raw(led)
    for table in ("entry_subjects", "entry_refs", "entry_artifacts", "log_entries"):
        conn.execute(f"DELETE FROM {table} WHERE seq >= ?", (3,))
    conn.execute("DELETE FROM checkpoints")
    conn.commit()
    conn.close()
    note = led.home.checkpoint_path.read_bytes()
    led.home.checkpoint_path.unlink()
    for i in range(held.size):
        led.record("note", {"campaign": "c"}, {"text": f"fork {i}"}, key="admin")
    led.home.checkpoint_path.write_bytes(note)  # the home's copy was never the forger's to remove
    assert led.verify(anchor=False)
    report = led.verify()
    assert [p.code for p in report.problems] == ["log-inconsistent"]
    assert "rewritten before it" in report.problems[0].message
    with pytest.raises(ProofError):  # a checkpoint of another log is refused before any check
        led.verify(since=_signed(led, 1, bytes(32)).note.replace(led.origin, "other.example/log"))
