"""fix137 (issue 12, the last closing note): one bad tile, one name; a level-0 tile under a level-1 tile.

1. One bad stored hash tile had two names: ``tile-mismatch`` in a full ``ledger verify``, ``chain-broken`` in
   ``verify --from`` and in every reader of the tiles (``/tile/``, entry bundles, proofs), and
   ``log-inconsistent`` where the tree read from it no longer gave the held checkpoint's root. A tile that
   disagrees with the committed records is a tile mismatch (a chain break is the records' hash chain):
   ``ledger.errors.TileMismatchError`` (a ``ChainBrokenError`` to library callers, a home fault: HTTP 500,
   CLI exit 2) is the one name wherever it is met, named at the tile's last leaf in a verify report.
2. A level-0 tile rewritten with its root was caught by ``ledger verify`` only where it is read through a
   tile above it: the level-1 partial tile served (``/tile/1/000.p/W``) held its rewritten root (each root
   there is checked against its own hashes only, not against the rows under up to 255 tiles), and under a
   full level-1 tile (which still holds the old root) a proof through it was served that verifies against no
   checkpoint. A tile above level 0 is now served only from a tree that extends the held checkpoint, and
   every proof a ``TileTree`` builds is verified against the root it gives before anyone gets it.
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from collectors import remote
from ledger.api.app import create_app
from ledger.api.errors import status_for
from ledger.api.settings import ApiSettings
from ledger.cli import main
from ledger.db import LOG_TABLES
from ledger.errors import HOME_FAULTS, ChainBrokenError, TileMismatchError
from ledger.log import MerkleTree, merkle_root
from ledger.service import Ledger
from ledger.tiles import TileBuilder, TileTree
from ledger.tokens import create_token

SIZE = 600  # tiles 0/000 and 0/001 full and stored; 0/002 and 1/000 partial


@dataclass(frozen=True)
class Template:
    home: Path
    held: str  # the checkpoint the home holds (size ``SIZE``), as a verifier would hold it


def _fill(led: Ledger, size: int) -> None:
    while led.size() < size:
        n = min(200, size - led.size())
        led.append(
            [
                led.sign(
                    led.make_statement("note", {"campaign": "f137"}, {"text": f"#{led.size()}-{i}"}), "admin"
                )
                for i in range(n)
            ]
        )


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    home = tmp_path_factory.mktemp("fix137") / "home"
    led = Ledger.init(home)
    try:
        _fill(led, SIZE)
        held = led.checkpoint()  # published: the full tiles stored, the home holds it
        assert held.size == SIZE
        return Template(home, held.note)
    finally:
        led.close()


@pytest.fixture
def home(template: Template, tmp_path: Path) -> Path:
    shutil.copytree(template.home, tmp_path / "home")
    return tmp_path / "home"


def _edit(home: Path, sql: str, *params: object) -> None:
    conn = sqlite3.connect(home / "ledger.db")
    try:
        for table in LOG_TABLES:
            conn.execute(f"DROP TRIGGER IF EXISTS {table}_no_update")
            conn.execute(f"DROP TRIGGER IF EXISTS {table}_no_delete")
        conn.execute(sql, params)
        conn.commit()
    finally:
        conn.close()


def _hashes(home: Path, idx: int) -> bytes:
    conn = sqlite3.connect(home / "ledger.db")
    try:
        return bytes(
            conn.execute("SELECT hashes FROM tiles WHERE level = 0 AND idx = ?", (idx,)).fetchone()[0]
        )
    finally:
        conn.close()


def _root(hashes: bytes) -> bytes:
    return merkle_root([hashes[i : i + 32] for i in range(0, len(hashes), 32)])


def _zeroed(hashes: bytes, k: int) -> bytes:
    return hashes[: 32 * k] + bytes(32) + hashes[32 * (k + 1) :]


# the edits of stored tile 0/001 (seqs 256 .. 511), each named at its last leaf (511)
EDITS = {
    "hash-zeroed": lambda home: _edit(
        home, "UPDATE tiles SET hashes = ? WHERE level = 0 AND idx = 1", _zeroed(_hashes(home, 1), 44)
    ),
    "rewritten-with-its-root": lambda home: _edit(
        home,
        "UPDATE tiles SET hashes = ?, root = ? WHERE level = 0 AND idx = 1",
        _zeroed(_hashes(home, 1), 44),
        _root(_zeroed(_hashes(home, 1), 44)),
    ),
    "root-alone": lambda home: _edit(
        home, "UPDATE tiles SET root = zeroblob(32) WHERE level = 0 AND idx = 1"
    ),
    "mistyped": lambda home: _edit(
        home, "UPDATE tiles SET hashes = 'not a tile' WHERE level = 0 AND idx = 1"
    ),
}


# the readers that read what each edit changed: its hashes (a proof through it, its leaves in a bundle, the
# tile), its root (the partial level-1 tile, and every root and proof past it at this size)
_HASHES = ("tile 0/001", "entry bundle 1", "inclusion 300")
MEETS = {
    "hash-zeroed": _HASHES,
    "rewritten-with-its-root": (*_HASHES, "tile 1/000.p/2", "consistency 100", "checkpoint"),
    "root-alone": ("tile 0/001", "tile 1/000.p/2", "inclusion 300", "consistency 100", "checkpoint"),
    "mistyped": _HASHES,
}


def _codes(report: Any) -> list[tuple[int | None, str]]:
    return [(p.seq, str(p.code)) for p in report.problems]


def _reads(led: Ledger) -> dict[str, Any]:
    """What each reader of the tiles does with the log: its answer, or the code it refused with."""
    out: dict[str, Any] = {}
    calls: dict[str, Callable[[], object]] = {
        "tile 0/001": lambda: led.tile(0, 1),
        "tile 1/000.p/2": lambda: led.tile(1, 0, 2),
        "entry bundle 1": lambda: led.entry_bundle(1),
        "inclusion 300": lambda: led.inclusion(led.get_seq(300).entry_id),
        "consistency 100": lambda: led.consistency(100),
        "checkpoint": led.signed_checkpoint,
    }
    for name, call in calls.items():
        try:
            call()
            out[name] = "served"
        except ChainBrokenError as e:  # a TileMismatchError is one, to a library caller
            out[name] = e.code
    return out


@pytest.mark.parametrize("edit", list(EDITS))
def test_one_bad_tile_has_one_name_in_verify_verify_from_and_every_reader(
    template: Template, home: Path, edit: str
) -> None:
    """Regression: `tile-mismatch` in a full verify, `chain-broken` in `--from` and the readers (and
    `log-inconsistent` where the tree read from the tile lost the held root). Now one name, everywhere."""
    EDITS[edit](home)
    led = Ledger.open(home)
    try:
        assert _codes(led.verify(artifacts=False)) == [(511, "tile-mismatch")]
        assert _codes(led.verify(artifacts=False, since=template.held)) == [(511, "tile-mismatch")]
        reads = _reads(led)
    finally:
        led.close()
    # every reader that reads the tile names it so (the level-1 tile above it holds its root); the ones
    # that need neither its hashes nor its root serve what the log signed
    assert {k: v for k, v in reads.items() if k in MEETS[edit]} == dict.fromkeys(MEETS[edit], "tile-mismatch")
    assert set(reads.values()) <= {"served", "tile-mismatch"}, reads


def test_an_untouched_tile_is_served_and_verified_everywhere(template: Template, home: Path) -> None:
    """Neighbour, the case that must still pass: every reader serves, both verifies pass."""
    led = Ledger.open(home)
    try:
        assert led.verify(artifacts=False) and led.verify(artifacts=False, since=template.held)
        assert set(_reads(led).values()) == {"served"}
        ref = MerkleTree(led.leaf_hashes())
        assert led.tile(1, 0, 2) == ref.levels[8][0] + ref.levels[8][1]
    finally:
        led.close()


def test_a_stored_tile_row_dropped_is_no_tile_problem(template: Template, home: Path) -> None:
    """Neighbour, dropped: a tile not stored is computed from the leaves, by every reader."""
    _edit(home, "DELETE FROM tiles WHERE level = 0 AND idx = 1")
    led = Ledger.open(home)
    try:
        assert _codes(led.verify(artifacts=False)) == []
        assert _codes(led.verify(artifacts=False, since=template.held)) == []
        assert set(_reads(led).values()) == {"served"}
    finally:
        led.close()


def test_the_tile_name_is_a_home_fault_with_one_status_and_one_exit_code(
    template: Template, home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API answers it 500 (the server's corruption, never the client's request), a collector keeps
    what it sent spooled (``collectors.remote``), the CLI exits 2 naming it; `ledger verify` exits 1."""
    assert issubclass(TileMismatchError, ChainBrokenError) and TileMismatchError in HOME_FAULTS
    assert status_for(TileMismatchError("x")) == status_for(ChainBrokenError("x")) == 500
    assert "tile-mismatch" in remote._SERVER_FAULT_CODES
    EDITS["hash-zeroed"](home)
    monkeypatch.setenv("COLUMNS", "200")
    capsys.readouterr()
    assert main(["--home", str(home), "verify", "--no-artifacts", "--json"]) == 1
    assert '"code": "tile-mismatch"' in capsys.readouterr().out
    led = Ledger.open(home)
    try:
        eid = led.get_seq(300).entry_id
        assert main(["--home", str(home), "proof", "inclusion", eid]) == 2
        assert "error[tile-mismatch]: stored tile 0/001" in capsys.readouterr().err
        reader, _ = create_token(led.engine, "r", "reader")
        with TestClient(create_app(ApiSettings(home=str(home)), ledger=led)) as c:
            for path in ("/tile/0/001", "/tile/1/000.p/2", "/tile/entries/001"):
                r = c.get(path, headers={"Authorization": f"Bearer {reader}"})
                assert (r.status_code, r.json()["code"]) == (500, "tile-mismatch"), (path, r.text)
                assert "immutable" not in r.headers.get("cache-control", "")
            ok = c.get("/tile/0/000", headers={"Authorization": f"Bearer {reader}"})
            assert ok.status_code == 200  # the level-0 tile beside it is its rows' leaves: served
    finally:
        led.close()


# --- 2: a level-0 tile rewritten with its root, read through a tile above it ------------------------------


def test_level_0_tile_rewritten_with_its_root_is_not_served_in_the_level_1_partial_above(
    template: Template, home: Path
) -> None:
    """Regression: `/tile/1/000.p/2` was served holding tile 0/001's rewritten root (each root there is
    checked against its own tile's hashes only); only `ledger verify` named it."""
    EDITS["rewritten-with-its-root"](home)
    led = Ledger.open(home)
    try:
        with pytest.raises(TileMismatchError, match="stored tile 0/001 is not the log's: its hash 44") as e:
            led.tile(1, 0, 2)
        assert e.value.tile == (0, 1)
        ref = MerkleTree(led.leaf_hashes())
        # neighbours: the level-0 tile beside it, and the partial tile at the end, are their rows' leaves
        assert led.tile(0, 0) == b"".join(ref.levels[0][:256])
        assert led.tile(0, 2, SIZE - 512) == b"".join(ref.levels[0][512:SIZE])
    finally:
        led.close()


def test_level_1_partial_tile_at_the_end_is_served_while_the_log_extends_the_held_checkpoint(
    template: Template, home: Path
) -> None:
    """Neighbour, the tile at the end: the log grown past the held checkpoint (its new leaves in the
    partial edge): the partial level-1 tile of the grown log is served, the log's."""
    led = Ledger.open(home)
    try:
        _fill(led, SIZE + 300)  # 0/002 and 0/003 full now, not stored (no checkpoint published since)
        ref = MerkleTree(led.leaf_hashes())
        assert led.tile(1, 0, 3) == b"".join(ref.levels[8][:3])
    finally:
        led.close()


class _Tiles:
    """A ``TileSource`` over the full tiles ``TileBuilder`` emits for ``leaves`` (editable)."""

    def __init__(self, leaves: list[bytes]) -> None:
        self.leaf_list = leaves
        b = TileBuilder()
        built = [t for x in leaves for t in b.append(x)]
        self.stored = {(t.level, t.index): (t.hashes, t.root) for t in built}

    def tiles(self, level: int, lo: int, hi: int) -> dict[int, bytes]:
        return {i: self.stored[(level, i)][0] for i in range(lo, hi) if (level, i) in self.stored}

    def roots(self, level: int, lo: int, hi: int) -> dict[int, bytes]:
        return {i: self.stored[(level, i)][1] for i in range(lo, hi) if (level, i) in self.stored}

    def leaves(self, lo: int, hi: int) -> list[bytes]:
        return self.leaf_list[lo:hi]


N1 = 65536 + 300  # tile 1/000 full and stored above tiles 0/000 .. 0/255


@pytest.fixture(scope="module")
def level1() -> _Tiles:
    return _Tiles([hashlib.sha256(b"\x00" + str(i).encode()).digest() for i in range(N1)])


def _rewritten_0_9(level1: _Tiles, *, rows_too: bool = False) -> _Tiles:
    """``level1`` with tile 0/009's hash 200 (seq 2504) zeroed and its root rewritten to match; tile 1/000
    above it still holds the old root. ``rows_too``: the leaf of seq 2504 rewritten with it."""
    src = _Tiles.__new__(_Tiles)
    src.leaf_list, src.stored = list(level1.leaf_list), dict(level1.stored)
    edited = _zeroed(src.stored[(0, 9)][0], 200)
    src.stored[(0, 9)] = (edited, _root(edited))
    if rows_too:
        src.leaf_list[9 * 256 + 200] = bytes(32)
    return src


def test_a_proof_through_a_level_0_tile_rewritten_under_a_full_level_1_tile_is_refused(
    level1: _Tiles,
) -> None:
    """Regression: the root is read from tile 1/000 (the signed one), the proof's path from tile 0/009
    (rewritten): a proof that verifies against no checkpoint was served. Now it is verified against the
    root first, and the tile named."""
    good = TileTree(level1, N1).root()
    src = _rewritten_0_9(level1)
    tree = TileTree(src, N1)
    assert tree.root() == good  # the checkpoint signed over it stays the log's
    for seq in (9 * 256 + 200, 9 * 256 + 3):  # the edited leaf, and one beside it under the same tile
        with pytest.raises(
            TileMismatchError,
            match=f"stored tile 0/009 is not the log's: its hash 200 is not the leaf of seq {9 * 256 + 200}",
        ):
            TileTree(src, N1).inclusion_proof(seq)
    with pytest.raises(TileMismatchError, match="stored tile 0/009"):
        TileTree(src, N1).consistency_proof(9 * 256 + 100)
    # neighbours: a proof whose path does not go through the tile, and the leaf at the end, are the log's
    ref = TileTree(level1, N1)
    for seq in (5, 65536 + 10, N1 - 1):
        assert TileTree(src, N1).inclusion_proof(seq) == ref.inclusion_proof(seq)
    assert TileTree(src, N1).consistency_proof(100) == ref.consistency_proof(100)


def test_a_level_0_tile_rewritten_with_its_root_and_its_row_names_the_tile_above(level1: _Tiles) -> None:
    """Neighbour: the row's leaf rewritten with the tile (the tile is its rows' leaves): the level-1 tile
    above it, which holds the old root, is named — no proof through it is served."""
    src = _rewritten_0_9(level1, rows_too=True)
    with pytest.raises(
        TileMismatchError,
        match="stored tile 1/000 is not the log's: its hash 9 is not the root of stored tile 0/009",
    ):
        TileTree(src, N1).inclusion_proof(9 * 256 + 200)


def test_proofs_of_an_untouched_tile_tree_are_the_reference_trees(level1: _Tiles) -> None:
    """Neighbour, untouched: the proofs (now verified as they are built) are unchanged."""
    tree = TileTree(level1, N1)
    ref = MerkleTree(level1.leaf_list)
    for seq in (0, 255, 256, 9 * 256 + 200, 65535, 65536, N1 - 1):
        assert tree.inclusion_proof(seq) == ref.inclusion_proof(seq, N1)
    for old in (1, 256, 65536, N1):
        assert tree.consistency_proof(old) == ref.consistency_proof(old, N1)
