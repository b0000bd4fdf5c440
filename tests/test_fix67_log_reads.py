"""Issue 12, fix 67: what `ledger verify` alone caught now holds on every read and every signature.

1. `ledger audit` of a log that lost entries the home's kept receipts name (past the held checkpoint, deleted
   behind the log's back, maybe appended over) moved HOME/checkpoint forward over the loss. An audit never
   moves the held checkpoint; and nothing is signed (checkpoint, receipt, proof) or appended over a log that
   a kept receipt shows lost (``Ledger._receipt_lost``).
2. A tile's root column edited alone was served inside the level-1 partial tile above it; a tile rewritten
   with a matching root was served until `ledger verify`. A tile served is checked against what it commits
   (``TileTree(strict=True)``), refused naming level/index; ``_refuse_fork`` names the tile too.
3. A rewritten ``leaf_hash`` column was served (tiles, proofs, roots): every leaf read is the hash of its
   row's record, or the read is refused naming the entry (``RepoTiles.leaves``).
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from ledger.api.app import create_app
from ledger.api.settings import ApiSettings
from ledger.db import LOG_TABLES
from ledger.errors import ChainBrokenError, ConfigError, LogInconsistentError, TileMismatchError
from ledger.log import Checkpoint, MerkleTree, merkle_root
from ledger.service import Ledger
from ledger.tiles import TILE_WIDTH
from ledger.tokens import create_token
from tests.api.conftest import PG_ADMIN, fresh_pg_database

ADMIN = "admin"


@dataclass
class Log:
    led: Ledger
    url: str

    def edit(self, sql: str, *params: object) -> None:
        """Run ``sql`` on the log's database behind its back (the append-only triggers bypassed)."""
        if self.url.startswith("sqlite"):
            conn = sqlite3.connect(self.url.removeprefix("sqlite:///"))
            try:
                for table in LOG_TABLES:
                    conn.execute(f"DROP TRIGGER IF EXISTS {table}_no_update")
                    conn.execute(f"DROP TRIGGER IF EXISTS {table}_no_delete")
                conn.execute(sql, params)
                conn.commit()
            finally:
                conn.close()
            return
        import psycopg

        name = self.url.rsplit("/", 1)[1]
        with psycopg.connect(PG_ADMIN.replace("dbname=postgres", f"dbname={name}")) as pg:
            pg.execute("SET session_replication_role = replica")
            pg.execute(sql.replace("?", "%s"), params)

    def delete_from(self, seq: int) -> None:
        """Entries ``seq`` and after deleted, with the tiles and checkpoints over them."""
        for table in ("entry_subjects", "entry_refs", "entry_artifacts", "log_entries"):
            self.edit(f"DELETE FROM {table} WHERE seq >= ?", seq)
        self.edit("DELETE FROM tiles")
        self.edit("DELETE FROM checkpoints WHERE size > ?", seq)


def _fill(led: Ledger, size: int) -> None:
    while led.size() < size:
        batch = min(200, size - led.size())
        led.append(
            [
                led.sign(
                    led.make_statement("note", {"campaign": "f67"}, {"text": f"#{led.size()}-{i}"}), ADMIN
                )
                for i in range(batch)
            ]
        )


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """None for the home's SQLite file, or a fresh PostgreSQL database (fails in CI without the server)."""
    if request.param == "sqlite":
        yield None
        return
    with fresh_pg_database() as url:
        yield url


# --- 1. the held checkpoint and the kept receipts ------------------------------------------------------


@pytest.fixture
def receipted(tmp_path: Path, backend: str | None) -> Iterator[tuple[Log, Checkpoint]]:
    """A home-bound ledger (it keeps a receipt of every entry it appends) holding a checkpoint of size 5,
    with 3 receipted entries past it."""
    led = Ledger.init(tmp_path / "home", database_url=backend, home_bound=True)
    for i in range(4):
        led.record("note", {"campaign": "c"}, {"text": f"n{i}"}, key=ADMIN)
    held = led.checkpoint()
    for i in range(3):
        led.record("note", {"campaign": "c"}, {"text": f"m{i}"}, key=ADMIN)
    assert led.held() == held and led.size() == held.size + 3
    yield Log(led, led.database_url), held
    led.close()


def _append_unreceipted(log: Log, n: int) -> None:
    """``n`` entries appended by a writer that keeps no receipt here and never saw the home's."""
    kept = log.led.home.receipts_path
    aside = kept.with_name("receipts.aside")
    kept.rename(aside)
    other = Ledger.open(log.led.home_path, database_url=log.url)
    try:
        for i in range(n):
            other.record("note", {"campaign": "c"}, {"text": f"over {i}"}, key=ADMIN)
    finally:
        other.close()
        aside.rename(kept)


def _refused_over_the_loss(led: Ledger, index: int) -> None:
    for sign in (
        led.checkpoint,
        led.signed_checkpoint,
        lambda: led.consistency(1),
        lambda: led.inclusion(led.get_seq(0).entry_id),
        lambda: led.record("note", {"campaign": "c"}, {"text": "after"}, key=ADMIN),
    ):
        with pytest.raises(
            LogInconsistentError, match=f"at index {index}, whose signed receipt this home kept"
        ):
            sign()


def test_audit_over_lost_receipted_entries_never_moves_the_held_checkpoint(
    receipted: tuple[Log, Checkpoint],
) -> None:
    log, held = receipted
    lost = log.led.size()
    log.delete_from(held.size)
    _append_unreceipted(log, 5)  # appended over the loss: the log is longer than the held checkpoint again
    led = Ledger.open(log.led.home_path, database_url=log.url, home_bound=True)
    try:
        report = led.audit()
        assert [(p["code"], p["index"]) for p in report.problems] == [
            ("receipt-mismatch", i) for i in range(held.size, lost)
        ]
        assert led.held() == held  # a read that judges the log never vouches for it
        _refused_over_the_loss(led, held.size)
        assert led.held() == held and led.size() == held.size + 5
    finally:
        led.close()


def test_entries_lost_past_the_held_checkpoint_and_not_appended_over_are_signed_by_nothing(
    receipted: tuple[Log, Checkpoint],
) -> None:
    """Neighbour: only deleted (the log is back at the held size, which it still extends)."""
    log, held = receipted
    log.delete_from(held.size + 1)  # the first receipted entry past the checkpoint stays
    led = Ledger.open(log.led.home_path, database_url=log.url, home_bound=True)
    try:
        assert [p["index"] for p in led.audit().problems] == [held.size + 1, held.size + 2]
        assert led.held() == held
        _refused_over_the_loss(led, held.size + 1)
    finally:
        led.close()


def test_a_receipt_of_another_log_at_a_lost_index_refuses_nothing(receipted: tuple[Log, Checkpoint]) -> None:
    """Neighbour: the receipts are told apart by origin (a collector pushing elsewhere keeps others')."""
    log, held = receipted
    led = log.led
    other = {
        "origin": "other.example/log",
        "index": led.size() + 7,
        "entry_id": "ab" * 32,
        "logged_at": "2026-01-01T00:00:00Z",
    }
    led.home.keep_receipts([other])
    led.checkpoint()  # signed and held: nothing of this log was lost
    now = led.held()
    assert now is not None and held.size < now.size == led.size()


def test_a_receipt_index_mistyped_or_renamed_refuses_signing(receipted: tuple[Log, Checkpoint]) -> None:
    """Neighbour: a receipt of this log (its origin names it) whose index is a string, or that names no
    index, cannot place its entry: since 21bda6b it is never skipped — nothing is signed under the log's key
    until it is restored (bad-config naming the field), where it was once left to the audit alone."""
    log, held = receipted
    led = log.led
    base = {"origin": led.origin, "entry_id": "cd" * 32, "logged_at": "2026-01-01T00:00:00Z"}
    led.home.keep_receipts([{**base, "index": str(led.size() + 1)}, {**base, "idx": led.size() + 1}])
    reader = Ledger.open(led.home_path, database_url=log.url)  # a server's reader: it holds what it signs
    try:
        with pytest.raises(ConfigError, match=r"its index field is '|it has no index field"):
            reader.signed_checkpoint(size=held.size + 2)
    finally:
        reader.close()
    assert led.held() == held  # nothing signed, nothing held


def test_a_healthy_audit_does_not_move_the_held_checkpoint_and_the_log_still_signs(
    receipted: tuple[Log, Checkpoint],
) -> None:
    log, held = receipted
    assert not log.led.audit().problems
    assert log.led.held() == held
    now = log.led.checkpoint()
    assert now.size == log.led.size() and log.led.held() == now


# --- 2. and 3. tiles and leaves served ------------------------------------------------------------------


@pytest.fixture
def log600(tmp_path: Path, backend: str | None) -> Iterator[Log]:
    """600 entries, a checkpoint published at 600: tiles 0/000 and 0/001 stored; 1/000.p/2 is their roots."""
    led = Ledger.init(tmp_path / "home", database_url=backend)
    _fill(led, 600)
    led.checkpoint()
    yield Log(led, led.database_url)
    led.close()


def _tile_row(log: Log, level: int, idx: int) -> bytes:
    with log.led.repo.read() as conn:
        return log.led.repo.tile_source(conn).tiles(level, idx, idx + 1)[idx]


def _served(log: Log, path: str) -> tuple[int, str, str]:
    token, _ = create_token(log.led.engine, "r", "reader")
    app = create_app(ApiSettings(home=str(log.led.home_path)), ledger=log.led)
    with TestClient(app) as c:
        r = c.get(path, headers={"Authorization": f"Bearer {token}"})
    return r.status_code, r.headers.get("cache-control", ""), r.text


def test_a_tile_root_edited_alone_is_not_served_in_the_partial_tile_above(log600: Log) -> None:
    ref = MerkleTree(log600.led.leaf_hashes())
    assert log600.led.tile(1, 0, 2) == ref.levels[8][0] + ref.levels[8][1]  # served while it is the log's
    log600.edit("UPDATE tiles SET root = ? WHERE level = 0 AND idx = 1", bytes(32))
    with pytest.raises(ChainBrokenError, match="stored tile 0/001 is not the log's"):
        log600.led.tile(1, 0, 2)
    with pytest.raises(ChainBrokenError, match="stored tile 0/001"):
        log600.led.tile(0, 1)  # the tile itself
    assert log600.led.tile(0, 0) == b"".join(ref.levels[0][:256])  # the tile beside it is the log's
    status, cache, text = _served(log600, "/tile/1/000.p/2")
    assert status == 500 and "immutable" not in cache and "stored tile 0/001" in text


def test_a_tile_rewritten_with_a_matching_root_is_not_served(log600: Log) -> None:
    hashes = bytearray(_tile_row(log600, 0, 1))
    hashes[5 * 32 : 6 * 32] = bytes(32)  # the leaf of seq 261
    rows = [bytes(hashes[i : i + 32]) for i in range(0, len(hashes), 32)]
    log600.edit(
        "UPDATE tiles SET hashes = ?, root = ? WHERE level = 0 AND idx = 1", bytes(hashes), merkle_root(rows)
    )
    with pytest.raises(
        ChainBrokenError, match=r"stored tile 0/001 is not the log's: its hash 5 is not the leaf of seq 261"
    ):
        log600.led.tile(0, 1)
    # Its root in the partial tile above is checked against its hashes only (the rows below each of the up
    # to 255 tiles there are not read per request): `ledger verify`, and ``_refuse_fork`` over a held
    # checkpoint, name it (test_a_tile_root_and_hashes_rewritten_under_a_held_checkpoint_names_the_tile).
    assert log600.led.tile(0, 0)  # the other full tile is the log's
    status, cache, text = _served(log600, "/tile/0/001")
    assert status == 500 and "immutable" not in cache and "stored tile 0/001" in text


def test_a_held_checkpoint_over_a_tile_root_edited_names_the_tile(log600: Log) -> None:
    """``_refuse_fork``'s refusal named no tile ("does not extend the checkpoint this home holds"); it is
    the tile's own ``tile-mismatch`` now (fix137: one name for one bad tile, whoever meets it)."""
    led = log600.led
    led.home.hold_checkpoint(led.signed_checkpoint().note)
    log600.edit("UPDATE tiles SET root = ? WHERE level = 0 AND idx = 1", bytes(32))
    with pytest.raises(TileMismatchError, match="stored tile 0/001 is not the log's"):
        led.signed_checkpoint()


def test_a_tile_root_and_hashes_rewritten_under_a_held_checkpoint_names_the_tile(log600: Log) -> None:
    """Neighbour: the tile consistent by itself; its hashes are not the rows' leaves."""
    led = log600.led
    led.home.hold_checkpoint(led.signed_checkpoint().note)
    hashes = bytearray(_tile_row(log600, 0, 0))
    hashes[:32] = bytes(32)
    rows = [bytes(hashes[i : i + 32]) for i in range(0, len(hashes), 32)]
    log600.edit(
        "UPDATE tiles SET hashes = ?, root = ? WHERE level = 0 AND idx = 0", bytes(hashes), merkle_root(rows)
    )
    with pytest.raises(
        TileMismatchError, match="stored tile 0/000 is not the log's: its hash 0 is not the leaf of seq 0"
    ):
        led.checkpoint()


@pytest.mark.parametrize("seq", [590, 10])  # in the partial right edge; under a stored full tile
def test_a_rewritten_leaf_hash_column_is_never_served(log600: Log, seq: int) -> None:
    led = log600.led
    other = hashlib.sha256(b"not the record").hexdigest()
    log600.edit("UPDATE log_entries SET leaf_hash = ? WHERE seq = ?", other, seq)
    eid = led.get_seq(seq).entry_id
    tile = seq // TILE_WIDTH
    width = None if tile < 2 else 600 - 512
    with pytest.raises(
        ChainBrokenError, match=rf"record at seq {seq} does not hash to its Merkle leaf.*{eid}"
    ):
        led.tile(0, tile, width)
    status, cache, text = _served(log600, f"/tile/0/00{tile}" + ("" if width is None else f".p/{width}"))
    assert status == 500 and "immutable" not in cache and f"seq {seq}" in text
    if seq >= 512:  # a leaf hash read for a proof or a root (not one a stored full tile holds)
        with pytest.raises(ChainBrokenError, match=f"record at seq {seq}"):
            led.inclusion(eid)
        with pytest.raises(ChainBrokenError, match=f"record at seq {seq}"):
            led.signed_checkpoint()


@pytest.mark.parametrize(
    "value",
    [
        "zz" * 32,  # not hex
        "UPPER",  # replaced below by the right hash in upper case: not the column's form
        "",  # emptied
    ],
)
def test_a_leaf_hash_column_mistyped_is_refused_naming_the_entry(log600: Log, value: str) -> None:
    led = log600.led
    if value == "UPPER":
        value = led.leaf_hashes(600)[595].hex().upper()
    log600.edit("UPDATE log_entries SET leaf_hash = ? WHERE seq = 595", value)
    with pytest.raises(ChainBrokenError, match="record at seq 595 does not hash to its Merkle leaf"):
        led.tile(0, 2, 600 - 512)


def test_a_record_rewritten_with_its_leaf_hash_is_not_served_in_a_full_tile(log600: Log) -> None:
    """Neighbour: row consistent by itself (record and leaf hash rewritten together): the stored full
    tile over it holds the leaf the checkpoints commit; the tile served is refused naming the seq."""
    led = log600.led
    with led.repo.read() as conn:
        record = led.repo.record_at(conn, 7)
    assert record is not None
    forged = record.replace(b'"logged_at":"20', b'"logged_at":"19')
    leaf = hashlib.sha256(b"\x00" + forged).hexdigest()
    log600.edit("UPDATE log_entries SET record = ?, leaf_hash = ? WHERE seq = 7", forged, leaf)
    with pytest.raises(
        ChainBrokenError, match="stored tile 0/000 is not the log's: its hash 7 is not the leaf of seq 7"
    ):
        led.tile(0, 0)


def test_tile_reads_write_nothing(tmp_path: Path) -> None:
    """A tile served is a read, checks and all: the SQLite file is the same bytes after."""
    led = Ledger.init(tmp_path / "home")
    _fill(led, 600)
    led.checkpoint()
    led.close()
    path = tmp_path / "home" / "ledger.db"
    before = path.read_bytes()
    led = Ledger.open(tmp_path / "home")
    try:
        assert led.tile(0, 0) and led.tile(1, 0, 2) and led.tile(0, 2, 88)
    finally:
        led.close()
    assert path.read_bytes() == before
