"""Issue 12, fix 81 f0 (audit 72): ``ledger verify`` of a healthy log that a server appended to while it ran
reported ``checkpoint-mismatch`` ("the log no longer has the root signed in the checkpoint at size N"):
verify read the log's size in one read and the checkpoint rows lazily in later ones, so a checkpoint
published in between was judged against the smaller log.

Now the largest checkpoint stored when the size is read is read in the same snapshot, and a checkpoint past
the verified log is a grown log's (not checked) only when it is larger than that one and the log, its size
read again after the checkpoint was, holds it; else it is judged. A checkpoint above the log's size that was
stored before verify began (the log lost entries) is still reported, and so is one published while verify ran
over entries the log then lost. On SQLite and PostgreSQL (fails in CI without the server).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ledger.repo import LogRepo
from ledger.service import Ledger
from ledger.verify import VerifyReport
from tests.api.conftest import fresh_pg_database
from tests.test_fix67_log_reads import Log

ADMIN = "admin"
LOST_ROOT = "the log no longer has the root signed in the checkpoint at size"


@pytest.fixture(autouse=True)
def _no_timed_publication(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sequencer publishes only when a test says so."""
    monkeypatch.setenv("LEDGER_CHECKPOINT_INTERVAL", "3600")


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """None for the home's SQLite file, or a fresh PostgreSQL database (fails in CI without the server)."""
    if request.param == "sqlite":
        yield None
        return
    with fresh_pg_database() as url:
        yield url


@pytest.fixture
def pair(tmp_path: Path, backend: str | None) -> Iterator[tuple[Ledger, Ledger]]:
    """(``ledger verify``'s ledger, ``ledger serve``'s sequencer) of one home: 3 notes and a checkpoint."""
    home = tmp_path / "home"
    init = Ledger.init(home, database_url=backend)
    url = init.database_url
    init.close()
    verifier = Ledger.open(home, database_url=url, home_bound=True)
    server = Ledger.open(home, database_url=url)
    for i in range(3):
        _note(verifier, f"e{i}")
    verifier.checkpoint()
    assert not verifier.verify(artifacts=False, workers=1).problems
    yield verifier, server
    server.close()
    verifier.close()


def _note(led: Ledger, text: str) -> None:
    led.append([led.sign(led.make_statement("note", {"campaign": "c"}, {"text": text}), ADMIN)])


def _verify_while(
    monkeypatch: pytest.MonkeyPatch, verifier: Ledger, meanwhile: Callable[[], object], **kw: Any
) -> VerifyReport:
    """``verifier.verify`` with ``meanwhile`` run right after it read the log's bounds (the interleaving the
    audit saw once in 29 runs, forced)."""
    orig = LogRepo.bounds
    fired: list[int] = []

    def bounds(self: LogRepo, conn: Any) -> Any:
        out = orig(self, conn)
        if self is verifier.repo and not fired:
            fired.append(1)
            meanwhile()
        return out

    monkeypatch.setattr(LogRepo, "bounds", bounds)
    report = verifier.verify(artifacts=False, workers=1, **kw)
    monkeypatch.setattr(LogRepo, "bounds", orig)
    assert fired, "the interleaving was not forced"
    return report


def _grow(server: Ledger, n: int = 1, publish: int = 1) -> Callable[[], None]:
    def run() -> None:
        for _ in range(publish):
            for i in range(n):
                _note(server, f"appended while verify ran {i}")
            server.publish_checkpoint()

    return run


def _problems(report: VerifyReport) -> list[str]:
    return [f"[{p.code}] {p.message}" for p in report.problems]


def test_checkpoint_published_while_verify_ran_is_no_mismatch(
    pair: tuple[Ledger, Ledger], monkeypatch: pytest.MonkeyPatch
) -> None:
    verifier, server = pair
    before = verifier.size()
    report = _verify_while(monkeypatch, verifier, _grow(server))
    assert not report.problems, _problems(report)
    assert report.size == before  # the log as its size was read; the grown log's checkpoint not judged
    assert verifier.size() == before + 1
    again = verifier.verify(artifacts=False, workers=1)
    assert not again.problems and again.size == before + 1


@pytest.mark.parametrize(("n", "publish"), [(1, 3), (4, 2)])
def test_several_checkpoints_published_while_verify_ran_are_no_mismatch(
    pair: tuple[Ledger, Ledger], monkeypatch: pytest.MonkeyPatch, n: int, publish: int
) -> None:
    verifier, server = pair
    report = _verify_while(monkeypatch, verifier, _grow(server, n, publish))
    assert not report.problems, _problems(report)


def test_checkpoint_published_while_verify_from_a_held_checkpoint_ran_is_no_mismatch(
    pair: tuple[Ledger, Ledger], monkeypatch: pytest.MonkeyPatch
) -> None:
    verifier, server = pair
    held = verifier.checkpoint()
    _note(verifier, "after the held one")
    report = _verify_while(monkeypatch, verifier, _grow(server), since=held)
    assert not report.problems, _problems(report)
    assert report.checked_from == held.size


@pytest.mark.parametrize("from_held", [False, True])
def test_checkpoint_above_the_log_stored_before_verify_is_still_reported(
    pair: tuple[Ledger, Ledger], from_held: bool
) -> None:
    """The real rollback: the log lost entries a checkpoint stored before verify began signs (a whole
    verify, and one from a held checkpoint below the loss)."""
    verifier, _server = pair
    held = verifier.checkpoint()
    for i in range(2):
        _note(verifier, f"lost {i}")
    signed = verifier.checkpoint().size
    log = Log(verifier, verifier.database_url)
    for table in ("entry_subjects", "entry_refs", "entry_artifacts", "log_entries"):
        log.edit(f"DELETE FROM {table} WHERE seq >= ?", held.size)
    log.edit("DELETE FROM tiles")
    report = verifier.verify(artifacts=False, workers=1, anchor=False, since=held if from_held else None)
    lost = [p for p in report.problems if p.code == "checkpoint-mismatch"]
    assert [p.message for p in lost] == [f"{LOST_ROOT} {signed}"], _problems(report)


def test_checkpoint_published_while_verify_ran_over_entries_then_lost_is_reported(
    pair: tuple[Ledger, Ledger], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Published after the size was read, but the log, its size read again, no longer holds it: judged."""
    verifier, server = pair
    log = Log(verifier, verifier.database_url)
    before = verifier.size()

    def grow_then_lose() -> None:
        _grow(server, 2)()
        for table in ("entry_subjects", "entry_refs", "entry_artifacts", "log_entries"):
            log.edit(f"DELETE FROM {table} WHERE seq >= ?", before + 1)

    report = _verify_while(monkeypatch, verifier, grow_then_lose, anchor=False)
    lost = [p for p in report.problems if p.code == "checkpoint-mismatch"]
    assert [p.message for p in lost] == [f"{LOST_ROOT} {before + 2}"], _problems(report)


def test_checkpoint_row_deleted_while_verify_ran_is_no_problem(
    pair: tuple[Ledger, Ledger], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neighbour: the largest checkpoint read in the snapshot, then gone (pruned): nothing judged wrongly."""
    verifier, _server = pair
    log = Log(verifier, verifier.database_url)
    report = _verify_while(monkeypatch, verifier, lambda: log.edit("DELETE FROM checkpoints"), anchor=False)
    assert not report.problems, _problems(report)
