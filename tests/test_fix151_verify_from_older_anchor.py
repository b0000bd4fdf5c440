"""fix151 (issue 12): `ledger verify --from` with an older anchor named one bad tile twice.

A home holding a checkpoint (its anchor, ``HOME/checkpoint``) older than the one `verify --from` starts from
had the anchor proved by the stored tiles (``_consistent``), after the walk below the newer checkpoint had
already named a rewritten stored tile (``_held_start``): a tile rewritten with its root, or its root alone,
made the tiles' root at the anchor's size differ too, and the same tile was named a second time. The anchor
is now checked against the root the re-derived records give as they pass its size (as a full verify checks
it), and no stored tile is read for it: each bad tile is named once, ``tile-mismatch`` at its last leaf.
The matrix: a home of 901 entries with stored tiles 0/000 .. 0/002, holding a checkpoint of 601, verified
from one of 901 (the anchor older) and from 601 (the anchor newer)."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from ledger import verify
from ledger.log import LogRecord
from ledger.service import Ledger
from ledger.verify import VerifyReport
from tests.test_verify_from_below import (
    HELD,
    SIZE,
    _build,
    _column,
    _edit,
    _merkle_root,
    _tile_hash_zeroed,
)


@dataclass(frozen=True)
class Homes:
    home: Path  # holds the checkpoint of ``HELD``; tiles 0/000 .. 0/002 stored
    older: str  # the note of ``HELD``
    newer: str  # the note of ``SIZE``
    bob: str  # an operator's key id


@pytest.fixture(scope="module")
def homes(tmp_path_factory: pytest.TempPathFactory) -> Homes:
    t = _build(tmp_path_factory.mktemp("fix151") / "home")
    led = Ledger.open(t.home)
    try:
        newer = led.checkpoint()  # stores tile 0/002 (seqs 512 .. 767) and holds 901
    finally:
        led.close()
    assert newer.size == SIZE
    (t.home / "checkpoint").write_text(t.held, encoding="utf-8")  # the home holds the older one again
    return Homes(t.home, t.held, newer.note, t.bob)


@pytest.fixture
def home(homes: Homes, tmp_path: Path) -> Path:
    shutil.copytree(homes.home, tmp_path / "home")
    return tmp_path / "home"


def _verify(home: Path, since: str | None) -> VerifyReport:
    led = Ledger.open(home)
    try:
        return led.verify(artifacts=False, since=since)
    finally:
        led.close()


def _codes(report: VerifyReport) -> list[tuple[int | None, str]]:
    return [(p.seq, str(p.code)) for p in report.problems]


def _rewritten_with_its_root(home: Path, idx: int, k: int) -> None:
    _tile_hash_zeroed(home, idx, k)
    conn = sqlite3.connect(home / "ledger.db")
    hashes = conn.execute("SELECT hashes FROM tiles WHERE level = 0 AND idx = ?", (idx,)).fetchone()[0]
    conn.close()
    _edit(home, "UPDATE tiles SET root = ? WHERE level = 0 AND idx = ?", _merkle_root(hashes), idx)


EDITS: dict[str, tuple[Callable[[Path], None], int]] = {
    # the finding: the tiles' root at the anchor's size differs too, so the anchor's tile proof named it again
    "rewritten-with-its-root": (lambda h: _rewritten_with_its_root(h, 0, 7), 255),
    "root-alone": (
        lambda h: _edit(h, "UPDATE tiles SET root = zeroblob(32) WHERE level = 0 AND idx = 1"),
        511,
    ),
    # neighbours: its hashes edited (root kept), mistyped, and a tile between the two checkpoints
    "hashes-edited": (lambda h: _tile_hash_zeroed(h, 1, 44), 511),
    "hashes-mistyped": (lambda h: _edit(h, "UPDATE tiles SET hashes = 5 WHERE level = 0 AND idx = 1"), 511),
    "between-the-checkpoints": (lambda h: _rewritten_with_its_root(h, 2, 7), 767),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_verify_from_with_an_older_anchor_names_a_rewritten_tile_once(
    homes: Homes, home: Path, edit: str
) -> None:
    change, last_leaf = EDITS[edit]
    change(home)
    full = _verify(home, None)
    assert _codes(full) == [(last_leaf, "tile-mismatch")]
    report = _verify(home, homes.newer)  # the anchor (601) older than the checkpoint verified from (901)
    assert _codes(report) == [(last_leaf, "tile-mismatch")], report.to_json()["problems"]
    assert report.problems[0].message.startswith(f"stored tile 0/{last_leaf // 256:03d} ")
    assert (report.anchor, report.checked_from, report.size) == (HELD, SIZE, SIZE)
    # the anchor newer than the checkpoint verified from: named once as well (it was)
    assert _codes(_verify(home, homes.older)) == [(last_leaf, "tile-mismatch")]


def test_verify_from_with_an_older_anchor_untampered_is_ok(homes: Homes) -> None:
    for since, checked_from in ((homes.newer, SIZE), (homes.older, HELD), (None, 0)):
        report = _verify(homes.home, since)
        assert report, report.to_json()["problems"]
        assert (report.anchor, report.checked_from, report.size) == (HELD, checked_from, SIZE)


def _hold_a_fork(home: Path, size: int) -> None:
    """The home made to hold a checkpoint of ``size`` signed by the log's key over a root that is not the
    log's (a fork the log key signed; the records below the newer checkpoint are the log's)."""
    led = Ledger.open(home)
    try:
        fork = led._sign(size, bytes(32), hold=False)
    finally:
        led.close()
    (home / "checkpoint").write_text(fork.note, encoding="utf-8")


@pytest.mark.parametrize("chunk", [97, HELD, 4096])  # the anchor's size inside a page, at a page's end
def test_older_anchor_not_the_records_tree_is_named_from_the_records_not_the_tiles(
    homes: Homes, home: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    monkeypatch.setattr(verify, "_CHUNK", chunk)
    _hold_a_fork(home, HELD)
    report = _verify(home, homes.newer)
    assert _codes(report) == [(None, "log-inconsistent")], report.to_json()["problems"]
    assert report.problems[0].message == (
        f"the log's first {HELD} entries are not the ones the signed checkpoint this home holds commits "
        "(the log was rewritten before it)"
    )
    assert report.size == SIZE  # the entries after the checkpoint verified from were still checked
    assert _codes(_verify(home, None)) == [(None, "log-inconsistent")]  # as a full verify names it


def test_older_anchor_of_size_zero_not_the_empty_tree_is_named(homes: Homes, home: Path) -> None:
    """Neighbour: the anchor at size 0 (checked before the first record)."""
    _hold_a_fork(home, 0)
    assert _codes(_verify(home, homes.newer)) == [(None, "log-inconsistent")]


def test_older_anchor_with_a_rewritten_tile_and_not_the_records_tree_names_each_once(
    homes: Homes, home: Path
) -> None:
    """Neighbour: both at once: the tile named once, the anchor once."""
    _rewritten_with_its_root(home, 0, 7)
    _hold_a_fork(home, HELD)
    assert _codes(_verify(home, homes.newer)) == [(None, "log-inconsistent"), (255, "tile-mismatch")]


def test_older_anchor_over_a_rewritten_entry_names_the_entry_once(homes: Homes, home: Path) -> None:
    """Neighbour: an entry below both checkpoints rewritten whole (columns, record and leaf hash agree): the
    log is not the newer checkpoint's, named at the entry, once — the anchor is not named for it too."""
    seq = 350
    row = [_column(home, c, seq) for c in ("logged_at", "entry_id", "kind")]
    record = LogRecord(seq, str(row[0]), str(row[1]), str(row[2]), homes.bob).to_bytes()
    _edit(
        home,
        "UPDATE log_entries SET signer = ?, record = ?, leaf_hash = ? WHERE seq = ?",
        homes.bob, record, hashlib.sha256(b"\x00" + record).hexdigest(), seq,
    )  # fmt: skip
    report = _verify(home, homes.newer)
    assert _codes(report) == [(seq, "log-inconsistent")], report.to_json()["problems"]
    assert f"the entry at seq {seq} is not the one its tree commits" in report.problems[0].message
