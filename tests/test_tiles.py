"""The tree read from hash tiles (ledger.tiles) gives the reference MerkleTree's roots and proofs byte for
byte, whatever part of it is stored; the ledger persists its tiles and holds no tree in memory."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.log import MerkleTree, leaf_hash
from ledger.service import Ledger
from ledger.tiles import TILE_WIDTH, TileBuilder, TileTree, full_tiles, tile_path
from tests.api.test_tiles import _index_path


class MemoryTiles:
    """A TileSource over a list of leaves, with the full tiles of the first ``stored`` leaves stored."""

    def __init__(self, leaves: list[bytes], stored: int | None = None) -> None:
        self.leaf_list = leaves
        self.stored: dict[tuple[int, int], tuple[bytes, bytes]] = {}
        self.leaves_read = 0
        b = TileBuilder()
        for x in leaves if stored is None else leaves[:stored]:
            for t in b.append(x):
                self.stored[(t.level, t.index)] = (t.hashes, t.root)
        self.builder = b

    def tiles(self, level: int, lo: int, hi: int) -> dict[int, bytes]:
        return {i: self.stored[(level, i)][0] for i in range(lo, hi) if (level, i) in self.stored}

    def roots(self, level: int, lo: int, hi: int) -> dict[int, bytes]:
        return {i: self.stored[(level, i)][1] for i in range(lo, hi) if (level, i) in self.stored}

    def leaves(self, lo: int, hi: int) -> list[bytes]:
        self.leaves_read += hi - lo
        return self.leaf_list[lo:hi]


N = 65536 + 1 + 300
LEAVES = [leaf_hash(f"entry-{i}".encode()) for i in range(N)]
REF = MerkleTree(LEAVES)
ALL_STORED = MemoryTiles(LEAVES)


def _check(src: MemoryTiles, n: int, rng: random.Random) -> None:
    tree = TileTree(src, n)
    assert tree.root() == REF.root(n)
    if n == 0:
        return
    for m in {0, n - 1, *rng.sample(range(n), min(n, 4))}:
        assert tree.inclusion_proof(m) == REF.inclusion_proof(m, n)
        assert tree.leaf(m) == LEAVES[m]
    for old in {1, n, *rng.sample(range(1, n + 1), min(n, 4))}:
        assert tree.consistency_proof(old) == REF.consistency_proof(old, n)


@pytest.mark.parametrize("n", [0, 1, 2, 255, 256, 257, 511, 512, 65535, 65536, 65537, N])
@pytest.mark.parametrize("stored", [None, 0, 1000, 65536])
def test_tile_proofs_are_the_reference_trees(n: int, stored: int | None) -> None:
    src = ALL_STORED if stored is None else MemoryTiles(LEAVES, stored)
    _check(src, n, random.Random(n))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(min_value=0, max_value=N), seed=st.integers(min_value=0, max_value=2**32))
def test_tile_proofs_at_random_sizes(n: int, seed: int) -> None:
    _check(ALL_STORED, n, random.Random(seed))


def test_tiles_are_the_reference_trees_levels() -> None:
    """Every full tile TileBuilder emits is C2SP's: 256 hashes of level 8L, its root one level up."""
    for (level, idx), (hashes, root) in ALL_STORED.stored.items():
        k = 8 * level
        assert hashes == b"".join(REF.levels[k][idx * TILE_WIDTH : (idx + 1) * TILE_WIDTH])
        assert root == REF.levels[k + 8][idx]
    assert len([k for k in ALL_STORED.stored if k[0] == 0]) == full_tiles(0, N)
    assert (1, 0) in ALL_STORED.stored and ALL_STORED.builder.root() == REF.root()


@pytest.mark.parametrize("start", [0, 1, 255, 256, 257, 65535, 65536, 65537])
def test_builder_resumes_from_tiles(start: int) -> None:
    """A builder started at a size from the tiles (``ledger verify --from``) continues the same tree and
    emits the same tiles as one fed every leaf."""
    b = TileTree(ALL_STORED, start).builder()
    assert b.root() == REF.root(start)
    emitted = {}
    for x in LEAVES[start : start + 700]:
        for t in b.append(x):
            emitted[(t.level, t.index)] = (t.hashes, t.root)
    assert b.root() == REF.root(len(b))
    assert emitted and all(ALL_STORED.stored[k] == v for k, v in emitted.items())


def test_right_edge_reads_at_most_255_leaves_per_level() -> None:
    src = MemoryTiles(LEAVES)
    tree = TileTree(src, N)
    tree.inclusion_proof(N - 1)
    tree.root()
    assert src.leaves_read <= 255


def test_tile_path_is_the_specs() -> None:
    for n in (0, 1, 999, 1000, 1234, 67000, 1234067, 10**9 + 7):
        assert tile_path(n) == _index_path(n)
    assert tile_path(1234067) == "x001/x234/067"


# --- the ledger's tiles ------------------------------------------------------------------------------


@pytest.fixture
def led(tmp_path: Path) -> Ledger:
    led = Ledger.init(tmp_path / "home")
    led.new_key("hostA", ["collector"])
    key = led.signing_key("hostA")
    while led.size() < 600:
        envs = [
            led.sign(led.make_statement("note", {"campaign": "t"}, {"text": f"{i}"}), key) for i in range(200)
        ]
        led.append(envs)
    led.checkpoint()
    return led


def _tile_count(led: Ledger) -> int:
    with led.engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT count(*) FROM tiles")).scalar_one())


def test_memory_grows_with_the_log_proofs_from_tiles(led: Ledger) -> None:
    """Finding: every process held the whole tree (147 B/entry), rebuilt on the first proof after a start.
    The ledger holds no tree: proofs come from the stored tiles, byte-identical to the reference tree's."""
    assert not hasattr(led, "_tree") and not hasattr(led, "_tree_at_locked")
    assert _tile_count(led) == full_tiles(0, led.size())  # published: the full tiles are stored
    ref = MerkleTree(led.leaf_hashes())
    n = led.size()
    for seq in (0, 1, 255, 256, 300, n - 1):
        doc = led.inclusion(led.get_seq(seq).entry_id)
        assert [bytes.fromhex(h) for h in doc["hashes"]] == ref.inclusion_proof(seq, n)
    for old in (1, 256, 257, n):
        doc = led.consistency(old)
        assert [bytes.fromhex(h) for h in doc["hashes"]] == ref.consistency_proof(old, n)
    assert led.root() == ref.root() and led.signed_checkpoint(size=300).root == ref.root(300)
    assert led.tile(0, 1) == b"".join(ref.levels[0][256:512])
    assert led.tile(0, 2, 600 - 512) == b"".join(ref.levels[0][512:600])


def test_proofs_read_no_leaf_a_stored_tile_holds(led: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    """A proof reads at most the partial right edge's leaves from the database, never a full tile's."""
    from ledger.repo import RepoTiles

    read: list[tuple[int, int]] = []
    real = RepoTiles.leaves

    def spy(self: RepoTiles, lo: int, hi: int) -> list[bytes]:
        read.append((lo, hi))
        return real(self, lo, hi)

    monkeypatch.setattr(RepoTiles, "leaves", spy)
    led.inclusion(led.get_seq(3).entry_id)
    led.consistency(100)
    assert read and all(lo >= 512 and hi - lo <= 255 for lo, hi in read), read


def test_two_ledgers_on_one_database_write_each_tile_once(led: Ledger) -> None:
    other = Ledger.open(led.home_path)
    try:
        key = led.signing_key("hostA")
        for ledger in (led, other, led, other):
            envs = [
                ledger.sign(ledger.make_statement("note", {"campaign": "t"}, {"text": f"x{i}"}), key)
                for i in range(150)
            ]
            ledger.append(envs)
            ledger.checkpoint()
        assert _tile_count(led) == full_tiles(0, led.size()) + full_tiles(1, led.size())
        assert other.signed_checkpoint().root == led.signed_checkpoint().root
        assert led.verify()
    finally:
        other.close()


def test_tampered_tile_is_named_by_verify(led: Ledger) -> None:
    path = led.database_url.removeprefix("sqlite:///")
    import sqlite3

    conn = sqlite3.connect(path)
    conn.execute("DROP TRIGGER tiles_no_update")
    conn.execute("UPDATE tiles SET hashes = zeroblob(8192) WHERE level = 0 AND idx = 1")
    conn.commit()
    conn.close()
    report = led.verify(artifacts=False)
    assert {p.code for p in report.problems} == {"tile-mismatch"}
    assert [p.seq for p in report.problems] == [511]


def test_migration_writes_the_tiles_of_an_existing_log(tmp_path: Path) -> None:
    """Revision 0004 writes the tiles of the entries logged before it (as `ledger migrate` runs it)."""
    from alembic import command
    from alembic.config import Config

    from ledger.db import migrations_dir

    url = f"sqlite:///{tmp_path / 'home' / 'ledger.db'}"
    led = Ledger.init(tmp_path / "home", database_url=url)
    key = led.signing_key("admin")
    envs = [
        led.sign(led.make_statement("note", {"campaign": "m"}, {"text": f"{i}"}), key) for i in range(600)
    ]
    led.append(envs)
    led.close()
    with sa.create_engine(url).begin() as conn:  # back to revision 0003: no tiles table
        conn.exec_driver_sql("DROP TABLE tiles")
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = '0003'")
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.set_main_option("sqlalchemy.url", url)
    cfg.attributes["configure_logger"] = False
    command.upgrade(cfg, "head")
    led = Ledger.open(tmp_path / "home")
    try:
        assert _tile_count(led) == full_tiles(0, led.size()) == 2
        assert led.verify().tiles_checked == 2
        assert led.root() == MerkleTree(led.leaf_hashes()).root()
    finally:
        led.close()


def test_a_tile_row_inserted_naming_another_leaf_is_no_tile_of_the_log(led: Ledger) -> None:
    """Regression: one INSERT (no trigger touched) of a second row for tile 0/0 whose ``last_seq`` named
    seq 300 — with that entry's chain hash, so it joined as "a tile of this log" — and whose hashes differ
    at leaf 5 made proofs of seq 5 wrong (and, with a forged root, a checkpoint of another root). A tile
    names its own last leaf (255): such a row is none, and proofs and roots come from the log's tiles."""
    import sqlite3

    ref = MerkleTree(led.leaf_hashes())
    n = led.size()
    conn = sqlite3.connect(led.database_url.removeprefix("sqlite:///"))
    for column in ("hashes", "root"):
        forged = "substr(t.hashes, 1, 160) || zeroblob(32) || substr(t.hashes, 193)"
        conn.execute(
            "INSERT INTO tiles (level, idx, chain_hash, last_seq, hashes, root)"
            f" SELECT 0, 0, e.chain_hash, e.seq, {forged if column == 'hashes' else 't.hashes'},"
            f" {'zeroblob(32)' if column == 'root' else 't.root'}"
            " FROM tiles AS t, log_entries AS e WHERE t.level = 0 AND t.idx = 0 AND t.last_seq = 255"
            " AND e.seq = ?",
            (300 if column == "hashes" else 301,),
        )
    conn.commit()
    conn.close()
    assert _tile_count(led) == full_tiles(0, n) + 2  # the forged rows are there
    doc = led.inclusion(led.get_seq(5).entry_id)
    assert [bytes.fromhex(h) for h in doc["hashes"]] == ref.inclusion_proof(5, n)
    assert led.root() == ref.root() and led.signed_checkpoint(size=n).root == ref.root(n)
    assert led.tile(0, 0) == b"".join(ref.levels[0][0:256])
