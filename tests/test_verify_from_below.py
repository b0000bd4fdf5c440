"""fix126 (audit92 f1): `ledger verify --from` trusted the column indexes below the held checkpoint.

It found the key entries below the checkpoint through the ``kind``/``signer`` columns and checked only those
rows (and the last one) against the held tree: a key.revoke row whose kind and signer columns were rewritten
(record, leaf and chain kept) dropped out of the keys carried over, and an entry signed by the revoked key
after the checkpoint passed `verify --from` while a full `verify` named it. Now every row below the held
checkpoint is re-derived from its committed record (``ledger._verify_range.committed_below``): the records
hashed into a tree whose root must be the held one, each row's columns checked against its record and its
envelope against its entry id (``committed_rows``), its leaf hash column against its record
(``checked_leaf``), its chain link re-derived; the keys, the log time and the chain hash carried over are read
from the records. The matrix: a home of 901 entries with stored tiles, the checkpoint held at 601."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ledger import _verify_range, verify
from ledger.db import LOG_TABLES
from ledger.log import LogRecord
from ledger.repo import tile_bytes
from ledger.service import Ledger
from ledger.tiles import Tile, TileBuilder
from ledger.verify import VerifyReport
from tests.api.conftest import PG_ADMIN, fresh_pg_database

HELD = 601
SIZE = 901


@dataclass(frozen=True)
class Template:
    home: Path
    held: str  # the held checkpoint's note (size ``HELD``)
    bob: str  # bob's key id (operator)
    bob_note: int  # seq of a note bob signed
    revoke: int  # seq of bob's revocation (signed by the admin)
    last_key: int  # seq of the last key entry below the checkpoint


def _notes(led: Ledger, key_name: str, upto: int) -> None:
    key = led.signing_key(key_name)
    while led.size() < upto:
        n = min(200, upto - led.size())
        led.append(
            [
                led.sign(
                    led.make_statement("note", {"campaign": "c126"}, {"text": f"n{led.size() + i}"}), key
                )
                for i in range(n)
            ]
        )


def _build(home: Path) -> Template:
    led = Ledger.init(home)
    try:
        led.new_key("hostA", ["collector"])
        bob = led.new_key("bob", ["operator"]).key_id
        bob_note = led.record("note", {"host": "a"}, {"text": "before"}, key="bob").seq
        revoke = led.revoke_key("bob", reason="compromised").seq
        _notes(led, "hostA", HELD)
        held = led.checkpoint()
        assert held.size == HELD
        _notes(led, "hostA", SIZE)
        assert led.verify(artifacts=False)
        return Template(home, held.note, bob, bob_note, revoke, revoke)
    finally:
        led.close()


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    return _build(tmp_path_factory.mktemp("fix126") / "home")


@pytest.fixture
def home(template: Template, tmp_path: Path) -> Path:
    shutil.copytree(template.home, tmp_path / "home")
    return tmp_path / "home"


def _edit(home: Path, sql: str, *params: object) -> None:
    """``sql`` on the home's database behind the log's back (the append-only triggers dropped)."""
    conn = sqlite3.connect(home / "ledger.db")
    try:
        for table in LOG_TABLES:
            conn.execute(f"DROP TRIGGER IF EXISTS {table}_no_update")
            conn.execute(f"DROP TRIGGER IF EXISTS {table}_no_delete")
        conn.execute(sql, params)
        conn.commit()
    finally:
        conn.close()


def _column(home: Path, column: str, seq: int) -> object:
    conn = sqlite3.connect(home / "ledger.db")
    try:
        return conn.execute(f"SELECT {column} FROM log_entries WHERE seq = ?", (seq,)).fetchone()[0]
    finally:
        conn.close()


def _verify(home: Path, held: str | None) -> VerifyReport:
    led = Ledger.open(home)
    try:
        return led.verify(artifacts=False, since=held)
    finally:
        led.close()


def _codes(report: VerifyReport) -> set[tuple[int | None, str]]:
    return {(p.seq, str(p.code)) for p in report.problems}


def _bob_signs_after(home: Path) -> int:
    """An entry signed by bob appended now (the home takes it: its key index no longer shows the
    revocation)."""
    led = Ledger.open(home)
    try:
        return led.record("note", {"host": "c"}, {"text": "after revocation"}, key="bob").seq
    finally:
        led.close()


# --- the finding -----------------------------------------------------------------------------------------


def test_revocation_hidden_from_the_kind_and_signer_columns_below_the_held_checkpoint_is_still_carried_over(
    template: Template, home: Path
) -> None:
    _edit(
        home, "UPDATE log_entries SET kind = 'note', signer = ? WHERE seq = ?", template.bob, template.revoke
    )
    after = _bob_signs_after(home)
    report = _verify(home, template.held)
    assert report.checked_from == HELD
    # the revocation is the record's: bob's later entry is named, as a full verify names it
    assert (after, "key-revoked") in _codes(report)
    assert (template.revoke, "record-mismatch") in _codes(report)
    message = next(p.message for p in report.problems if p.seq == template.revoke)
    assert "kind 'note' where the log record its leaf commits says 'key.revoke'" in message
    full = _verify(home, None)
    assert (after, "key-revoked") in _codes(full)


def test_key_entry_kind_column_renamed_alone_below_the_held_checkpoint_is_still_carried_over(
    template: Template, home: Path
) -> None:
    """Neighbour: the kind column alone renamed (the signer, an admin, kept; the home refuses appends then,
    so bob's entry is taken while the signer is hidden too, which is then put back)."""
    admin = _column(home, "signer", template.revoke)
    _edit(
        home, "UPDATE log_entries SET kind = 'note', signer = ? WHERE seq = ?", template.bob, template.revoke
    )
    after = _bob_signs_after(home)
    _edit(home, "UPDATE log_entries SET signer = ? WHERE seq = ?", admin, template.revoke)
    assert _codes(_verify(home, template.held)) == {
        (template.revoke, "record-mismatch"),
        (after, "key-revoked"),
    }


def test_key_entry_envelope_replaced_below_the_held_checkpoint_carries_nothing_over(
    template: Template, home: Path
) -> None:
    """Neighbour: the revocation's envelope replaced by another entry's (columns kept): its keys cannot be
    folded from the envelope its record commits — named, and nothing after it is judged on guessed keys."""
    other = _column(home, "envelope", template.bob_note)
    _edit(home, "UPDATE log_entries SET envelope = ? WHERE seq = ?", other, template.revoke)
    report = _verify(home, template.held)
    assert _codes(report) == {(template.revoke, "entry-id-mismatch"), (template.revoke, "log-inconsistent")}
    assert "cannot be carried over" in report.problems[-1].message


# --- the matrix: rows below the held checkpoint that are no key entry --------------------------------------


def test_signer_column_of_a_non_key_entry_below_the_held_checkpoint_is_named(
    template: Template, home: Path
) -> None:
    seq = 400
    _edit(home, "UPDATE log_entries SET signer = ? WHERE seq = ?", template.bob, seq)
    report = _verify(home, template.held)
    assert _codes(report) == {(seq, "record-mismatch")}
    assert "signer" in report.problems[0].message
    assert not _verify(home, None)  # a full verify names it too


def test_leaf_hash_column_inside_a_stored_full_tile_below_the_held_checkpoint_is_named(
    template: Template, home: Path
) -> None:
    seq = 300  # tile 0/1 (seqs 256 .. 511) is stored: the consistency proof from the tiles never reads it
    _edit(home, "UPDATE log_entries SET leaf_hash = ? WHERE seq = ?", hashlib.sha256(b"x").hexdigest(), seq)
    report = _verify(home, template.held)
    assert _codes(report) == {(seq, "leaf-hash-mismatch")}
    assert "does not hash to its Merkle leaf" in report.problems[0].message


def test_leaf_hash_column_mistyped_below_the_held_checkpoint_is_named(template: Template, home: Path) -> None:
    """Neighbour: the leaf hash column an integer (not a hash)."""
    _edit(home, "UPDATE log_entries SET leaf_hash = 5 WHERE seq = ?", 301)
    assert _codes(_verify(home, template.held)) == {(301, "leaf-hash-mismatch")}


def test_record_column_mistyped_below_the_held_checkpoint_stops_the_carry_over(
    template: Template, home: Path
) -> None:
    """Neighbour: the record column an integer (its columns and leaf hash kept): nothing can be re-derived
    from it (named; verify stops there, nothing after it is judged)."""
    _edit(home, "UPDATE log_entries SET record = 7 WHERE seq = ?", 302)
    report = _verify(home, template.held)
    assert _codes(report) == {(302, "record-mismatch")}
    assert (
        "stored log record disagrees with the row's columns and its leaf hash" in report.problems[0].message
    )


def test_chain_hash_of_an_entry_below_the_held_checkpoint_is_named(template: Template, home: Path) -> None:
    seq = HELD - 2
    _edit(home, "UPDATE log_entries SET chain_hash = ? WHERE seq = ?", "ab" * 32, seq)
    report = _verify(home, template.held)
    # the chain carried over is re-derived from the records: the entries after the checkpoint still link
    assert _codes(report) == {(seq, "chain-broken")}


def test_prev_hash_of_an_entry_below_the_held_checkpoint_is_named(template: Template, home: Path) -> None:
    """Neighbour: the link column of the entry after it."""
    _edit(home, "UPDATE log_entries SET prev_hash = ? WHERE seq = ?", "ab" * 32, 123)
    report = _verify(home, template.held)
    assert _codes(report) == {(123, "chain-broken")}
    assert report.problems[0].message == "entry does not link to its predecessor"


def test_logged_at_of_the_last_entry_below_the_held_checkpoint_is_read_from_its_record(
    template: Template, home: Path
) -> None:
    """Neighbour, renamed: the time carried over is the record's; the column's (far in the future) would make
    every entry after the checkpoint `logged-at-decreasing`."""
    _edit(home, "UPDATE log_entries SET logged_at = ? WHERE seq = ?", "2099-01-01T00:00:00.000000Z", HELD - 1)
    assert _codes(_verify(home, template.held)) == {(HELD - 1, "record-mismatch")}


def test_entry_deleted_inside_a_stored_full_tile_below_the_held_checkpoint_is_a_gap(
    template: Template, home: Path
) -> None:
    """Neighbour, dropped: the row of a seq the tiles cover (the consistency proof never reads it)."""
    _edit(home, "DELETE FROM log_entries WHERE seq = ?", 100)
    report = _verify(home, template.held)
    assert _codes(report) == {(100, "seq-gap")}


def test_envelopes_swapped_below_the_held_checkpoint_are_named(template: Template, home: Path) -> None:
    """Neighbour, reordered: two notes' envelopes swapped (each is still a validly signed envelope)."""
    a, b = _column(home, "envelope", 200), _column(home, "envelope", 201)
    _edit(home, "UPDATE log_entries SET envelope = ? WHERE seq = ?", b, 200)
    _edit(home, "UPDATE log_entries SET envelope = ? WHERE seq = ?", a, 201)
    assert _codes(_verify(home, template.held)) == {(200, "entry-id-mismatch"), (201, "entry-id-mismatch")}


def test_record_leaf_and_columns_rewritten_together_below_the_held_checkpoint_are_inconsistent(
    template: Template, home: Path
) -> None:
    """Neighbour: a row rewritten whole (columns, record and leaf hash agree; the stored tile kept): its
    record does not build the held root — the entry named from the tiles the consistency proof checked."""
    seq = 350
    row = [_column(home, c, seq) for c in ("logged_at", "entry_id", "kind")]
    record = LogRecord(seq, str(row[0]), str(row[1]), str(row[2]), template.bob).to_bytes()
    _edit(
        home,
        "UPDATE log_entries SET signer = ?, record = ?, leaf_hash = ? WHERE seq = ?",
        template.bob, record, hashlib.sha256(b"\x00" + record).hexdigest(), seq,
    )  # fmt: skip
    report = _verify(home, template.held)
    assert _codes(report) == {(seq, "log-inconsistent")}
    assert f"the entry at seq {seq} is not the one its tree commits" in report.problems[0].message


# --- fix131: the stored tiles below the held checkpoint (what C2SP clients read) against the records' tree


def _tile_hash_zeroed(home: Path, idx: int, k: int) -> None:
    """Hash ``k`` of stored tile 0/``idx`` zeroed, its root kept."""
    a, b = 32 * k, 32 * (k + 1)
    _edit(
        home,
        "UPDATE tiles SET hashes = CAST(substr(hashes, 1, ?) || zeroblob(32) || substr(hashes, ?) AS BLOB)"
        " WHERE level = 0 AND idx = ?",
        a, b + 1, idx,
    )  # fmt: skip


def _problems(report: VerifyReport) -> list[tuple[int | None, str, str]]:
    return [(p.seq, str(p.code), p.message) for p in report.problems]


@pytest.mark.parametrize("chunk", [97, 4096])
def test_stored_tile_with_edited_hashes_below_the_held_checkpoint_is_named_by_verify_from(
    template: Template, home: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    """fix126 built the tree from the records and read no stored tile below the checkpoint: a stored tile
    whose hashes were edited (its root kept, so the consistency proof from the roots passes) went unnamed."""
    monkeypatch.setattr(verify, "_CHUNK", chunk)
    _tile_hash_zeroed(home, 1, 44)  # tile 0/001: seqs 256 .. 511, all below the checkpoint (601)
    report = _verify(home, template.held)
    [(seq, code, message)] = _problems(report)
    # one name, at the tile's last leaf, as a full verify names it (fix137: it was ``chain-broken`` here)
    assert (seq, code) == (511, "tile-mismatch")
    assert message.startswith("stored tile 0/001 is not the log's: its 256 hashes do not hash to its stored")
    # the tree is the records', not the tile's: the entries after the checkpoint were still checked
    assert report.size == SIZE and report.checked_from == HELD
    assert [(p.seq, str(p.code)) for p in _verify(home, None).problems] == [(511, "tile-mismatch")]


def test_stored_tile_rewritten_with_its_root_below_the_held_checkpoint_is_named_not_its_entries(
    template: Template, home: Path
) -> None:
    """Neighbour: tile 0/000's hash 7 and its root rewritten to match (the tile consistent by itself); the
    level-1 hash above it is computed from the stored root, so the root the tiles give differs from the
    held one: the tile is named (``tile-mismatch``, once, as a full verify names it — fix137: it was
    ``log-inconsistent``), and the records below, which still give the held root, are carried over (no
    tile is read for the tree)."""
    _tile_hash_zeroed(home, 0, 7)
    conn = sqlite3.connect(home / "ledger.db")
    hashes = conn.execute("SELECT hashes FROM tiles WHERE level = 0 AND idx = 0").fetchone()[0]
    conn.close()
    _edit(home, "UPDATE tiles SET root = ? WHERE level = 0 AND idx = 0", _merkle_root(hashes))
    report = _verify(home, template.held)
    assert [(p.seq, str(p.code)) for p in report.problems] == [(255, "tile-mismatch")], report.problems
    assert report.problems[0].message.startswith(
        "stored tile 0/000 is not the log's: its hash 7 is not the leaf of seq 7"
    )
    assert report.size == SIZE and report.checked_from == HELD
    assert [(p.seq, str(p.code)) for p in _verify(home, None).problems] == [(255, "tile-mismatch")]


def test_stored_tile_hashes_mistyped_below_the_held_checkpoint_are_named_and_its_neighbour_is_not(
    template: Template, home: Path
) -> None:
    """Neighbour, mistyped: tile 0/001's hashes an integer (read as the 1 byte "5"): named; tile 0/000
    beside it, the log's, is not."""
    _edit(home, "UPDATE tiles SET hashes = 5 WHERE level = 0 AND idx = 1")
    report = _verify(home, template.held)
    [(seq, code, message)] = _problems(report)
    assert (seq, code) == (511, "tile-mismatch")
    assert message.startswith("stored tile 0/001 is 1 bytes, not 8192")


def test_stored_tile_row_deleted_below_the_held_checkpoint_is_not_a_tile_problem(
    template: Template, home: Path
) -> None:
    """Neighbour, dropped: a tile not stored is computed from the leaves (as every reader does): nothing to
    compare, nothing named — as a full verify."""
    _edit(home, "DELETE FROM tiles WHERE level = 0 AND idx = 1")
    assert _problems(_verify(home, template.held)) == _problems(_verify(home, None)) == []


def test_stored_tile_edited_past_the_held_checkpoint_is_named_once(template: Template, home: Path) -> None:
    """Neighbour, reordered: tile 0/002 (seqs 512 .. 767) ends past the checkpoint: the range check names
    it (as a full verify does), the re-derivation below the checkpoint does not name it again."""
    led = Ledger.open(home)
    try:
        assert led.checkpoint().size == SIZE  # tiles are stored as a checkpoint is taken: 0/002 now
    finally:
        led.close()
    _tile_hash_zeroed(home, 2, 3)
    report = _verify(home, template.held)
    assert [(p.seq, str(p.code)) for p in report.problems] == [(767, "tile-mismatch")]


class _Tiles:
    """A ``TileSource`` over the full tiles ``TileBuilder`` emits for ``leaves`` (editable)."""

    def __init__(self, leaves: list[bytes]) -> None:
        self.leaf_list = leaves
        self.stored: dict[tuple[int, int], tuple[bytes, bytes]] = {}
        self.built: list[Tile] = []
        b = TileBuilder()
        for x in leaves:
            self.built += b.append(x)
        self.stored = {(t.level, t.index): (t.hashes, t.root) for t in self.built}

    def tiles(self, level: int, lo: int, hi: int) -> dict[int, bytes]:
        return {i: self.stored[(level, i)][0] for i in range(lo, hi) if (level, i) in self.stored}

    def roots(self, level: int, lo: int, hi: int) -> dict[int, bytes]:
        return {i: self.stored[(level, i)][1] for i in range(lo, hi) if (level, i) in self.stored}

    def leaves(self, lo: int, hi: int) -> list[bytes]:
        return self.leaf_list[lo:hi]


def _merkle_root(hashes: bytes) -> bytes:
    row = [hashes[i : i + 32] for i in range(0, len(hashes), 32)]
    while len(row) > 1:
        row = [hashlib.sha256(b"\x01" + row[i] + row[i + 1]).digest() for i in range(0, len(row), 2)]
    return row[0]


@pytest.fixture(scope="module")
def level1() -> _Tiles:
    """65536 + 300 leaves: tile 1/000 (the roots of tiles 0/000 .. 0/255) full below a size of 65836."""
    return _Tiles([hashlib.sha256(b"\x00" + str(i).encode()).digest() for i in range(65536 + 300)])


def _named(src: _Tiles) -> list[tuple[str, str]]:
    """What ``verify --from`` names of the stored tiles below a checkpoint at ``src``'s size, given the
    tiles the records' leaves build (``src.built``, as ``_held_start`` collects them)."""
    size = len(src.leaf_list)
    suspects = verify._unlike_stored(src, src.built)
    return [(str(p.code), p.message) for t in suspects if (p := verify._stored_tile_problem(src, size, t))]


def _replace(hashes: bytes, k: int, h: bytes) -> bytes:
    return hashes[: 32 * k] + h + hashes[32 * (k + 1) :]


def test_level_1_tile_edited_below_the_held_checkpoint_is_named(level1: _Tiles) -> None:
    """Stored tile 1/000's hash 7 (the root of tile 0/007) zeroed, its root kept: named, as at level 0."""
    src = _Tiles.__new__(_Tiles)
    src.leaf_list, src.built, src.stored = level1.leaf_list, level1.built, dict(level1.stored)
    assert _named(src) == []
    hashes, root = src.stored[(1, 0)]
    src.stored[(1, 0)] = (_replace(hashes, 7, bytes(32)), root)
    [(code, message)] = _named(src)
    assert code == "tile-mismatch"
    assert message.startswith("stored tile 1/000 is not the log's: its 256 hashes do not hash to its stored")
    # rewritten with its root (consistent by itself): named against the roots of the tiles below it
    edited = _replace(hashes, 7, bytes(32))
    src.stored[(1, 0)] = (edited, _merkle_root(edited))
    [(code, message)] = _named(src)
    assert code == "tile-mismatch"
    assert message.startswith(
        "stored tile 1/000 is not the log's: its hash 7 is not the root of stored tile 0/007"
    )
    # its root alone edited
    src.stored[(1, 0)] = (hashes, bytes(32))
    assert [m.split(":")[0] for _c, m in _named(src)] == ["stored tile 1/000 is not the log's"]


def test_level_0_tile_under_a_level_1_tile_rewritten_below_the_held_checkpoint_is_named_alone(
    level1: _Tiles,
) -> None:
    """Neighbour: tile 0/009 rewritten with its root (tile 1/000 above it kept, the log's): the level-0 tile
    is named against the records' leaves, the level-1 tile is not named for it."""
    src = _Tiles.__new__(_Tiles)
    src.leaf_list, src.built, src.stored = level1.leaf_list, level1.built, dict(level1.stored)
    hashes, _root = src.stored[(0, 9)]
    edited = _replace(hashes, 200, bytes(32))
    src.stored[(0, 9)] = (edited, _merkle_root(edited))
    [(code, message)] = _named(src)
    assert code == "tile-mismatch"
    assert message.startswith(
        f"stored tile 0/009 is not the log's: its hash 200 is not the leaf of seq {9 * 256 + 200}"
    )
    del src.stored[(0, 9)]  # dropped: computed, not compared
    assert _named(src) == []


class _NoTileAt(_Tiles):
    """``_Tiles`` whose tile 0/``bad`` is stored as no bytes: a read that spans it fails, naming it."""

    bad = 5

    def tiles(self, level: int, lo: int, hi: int) -> dict[int, bytes]:
        if level == 0 and lo <= self.bad < hi:
            tile_bytes(0, self.bad, "text")  # raises TileMismatchError naming the tile
        return super().tiles(level, lo, hi)


def test_stored_tile_that_is_no_tile_below_the_held_checkpoint_is_named_alone(level1: _Tiles) -> None:
    """Neighbour, mistyped: the level's tiles read at once fail on one that is no tile (not bytes): each is
    read on its own — that one named, the 255 others beside it (the log's) and the level-1 tile not."""
    src = _NoTileAt.__new__(_NoTileAt)
    src.leaf_list, src.built, src.stored = level1.leaf_list, level1.built, dict(level1.stored)
    assert _named(src) == [
        ("tile-mismatch", "stored tile 0/005 is no tile (its stored value is str, not bytes): the database's "
         "hash tiles were edited behind the log's back"),
    ]  # fmt: skip


# --- the honest log: the same state as a full verify, whatever the pages and the path -------------------


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("chunk", [97, 4096])
def test_honest_log_from_the_held_checkpoint_passes_with_the_full_verify_root(
    template: Template, monkeypatch: pytest.MonkeyPatch, fast: bool, chunk: int
) -> None:
    monkeypatch.setattr(_verify_range, "_FAST", fast)
    monkeypatch.setattr(verify, "_CHUNK", chunk)
    report = _verify(template.home, template.held)
    assert report, report.to_json()["problems"]
    assert report.size == SIZE and report.checked_from == HELD
    assert report.root == _verify(template.home, None).root


@pytest.mark.parametrize("chunk", [97, 4096])
def test_revocation_hidden_is_carried_over_across_pages(
    template: Template, home: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    monkeypatch.setattr(verify, "_CHUNK", chunk)
    monkeypatch.setattr(_verify_range, "_FAST", False)
    _edit(
        home, "UPDATE log_entries SET kind = 'note', signer = ? WHERE seq = ?", template.bob, template.revoke
    )
    after = _bob_signs_after(home)
    assert (after, "key-revoked") in _codes(_verify(home, template.held))


# --- PostgreSQL: the same rows, read through its driver --------------------------------------------------


@pytest.fixture
def pg_home(tmp_path: Path) -> Iterator[tuple[Ledger, str]]:
    with fresh_pg_database() as url:
        led = Ledger.init(tmp_path / "pg", database_url=url)
        try:
            yield led, url
        finally:
            led.close()


@pytest.mark.postgres
def test_revocation_hidden_below_the_held_checkpoint_is_carried_over_on_postgres(
    pg_home: tuple[Ledger, str],
) -> None:
    import psycopg

    led, url = pg_home
    bob = led.new_key("bob", ["operator"]).key_id
    led.record("note", {"host": "a"}, {"text": "before"}, key="bob")
    revoke = led.revoke_key("bob", reason="compromised").seq
    led.record("note", {"host": "b"}, {"text": "x"}, key=led.admin_key_name)
    held = led.checkpoint()
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(PG_ADMIN.replace("dbname=postgres", f"dbname={name}")) as pg:
        pg.execute("SET session_replication_role = replica")
        pg.execute("UPDATE log_entries SET kind = 'note', signer = %s WHERE seq = %s", (bob, revoke))
        pg.execute("UPDATE log_entries SET chain_hash = %s WHERE seq = %s", ("ab" * 32, revoke - 1))
    again = Ledger.open(led.home_path)  # a process started after the edit (the CLI's `ledger record`)
    try:
        after = again.record("note", {"host": "c"}, {"text": "after revocation"}, key="bob").seq
        report = again.verify(artifacts=False, since=held.note)
    finally:
        again.close()
    assert _codes(report) == {
        (revoke, "record-mismatch"),
        (revoke - 1, "chain-broken"),
        (after, "key-revoked"),
    }
