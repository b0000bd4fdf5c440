"""fix149 (issue 12, the last session's note): nothing is signed over a rewritten log where the home holds
no checkpoint, nor over rows past the anchor whose chain was not walked.

1. With no held checkpoint (a replica with a home of its own, a fresh home on an existing database),
   ``Ledger._refuse_fork`` checked nothing but receipts: a hash tile rewritten with its root was signed
   in checkpoints and proofs. The newest checkpoint the database stores, its note checked under the log's
   key, is an anchor too (``Ledger._stored_anchor``); a row whose note does not verify, whose columns are
   not its note's, or whose size the log no longer has, is refused and named. When the home holds one as
   well, the log must extend both, and the larger is the anchor.
2. A checkpoint signed past the anchor covered rows nobody walked: a row rewritten behind the log's back
   past it (its log time, record and leaf hash) was signed over. The rows from the anchor's size to the
   size signed are walked first (``Ledger._walk``, ``ledger.reads.chain_walk``): linked, none missing,
   logged no earlier than the one before, and the root signed is the anchor's tree extended by their
   leaves — O(rows past the anchor).
3. A re-sent entry's row, rewritten with every chain hash re-derived through the head, passed
   ``chain_linked`` and was receipted as a duplicate. It is now anchored (``Ledger._anchored_entry``):
   below the anchor its leaf must be the one the anchor's tree holds; past it the rows from the anchor
   are walked.

Raw SQL on SQLite and PostgreSQL (``CI=true``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import ledger.service as service_module
from ledger.errors import (
    ChainBrokenError,
    IntegrityError,
    LogInconsistentError,
    LogOrderError,
    TileMismatchError,
)
from ledger.log import LogRecord, chain_hash, merkle_root, sign_checkpoint
from ledger.reads import ChainLink, _chain_hex, chain_walk
from ledger.service import Ledger
from ledger.signing import Envelope, SigningKey
from tests.reliability import api_fixtures
from tests.reliability.api_fixtures import PgDatabases
from tests.reliability.test_receipts import _drop_triggers

pg_databases = api_fixtures.pg_databases

BACK = "2020-01-01T00:00:00.000000Z"
ANCHOR = 10  # the checkpoint published (and held) after the first entries
SIZE = 300  # with a checkpoint there: full tile 0/000 (seqs 0..255) stored


@pytest.fixture(autouse=True)
def _no_scheduled_publication(monkeypatch: pytest.MonkeyPatch) -> None:
    """Checkpoints are published where a test says so, never by the sequencer's clock."""
    monkeypatch.setenv("LEDGER_CHECKPOINT_INTERVAL", "3600")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def led(request: pytest.FixtureRequest, tmp_path: Path, pg_databases: PgDatabases) -> Iterator[Ledger]:
    if request.param == "postgres":
        api_fixtures.require_postgres()
        ledger = Ledger.init(tmp_path / "home", database_url=pg_databases.new())
    else:
        ledger = Ledger.init(tmp_path / "home")
    try:
        yield ledger
    finally:
        ledger.close()


# --- helpers -------------------------------------------------------------------------------------------


def _fill(led: Ledger, size: int) -> list[Envelope]:
    """Notes appended until the log has ``size`` entries (the envelopes, to re-send)."""
    envs: list[Envelope] = []
    while led.size() < size:
        n = min(200, size - led.size())
        batch = [
            led.sign(
                led.make_statement("note", {"campaign": "f149"}, {"text": f"#{led.size()}-{i}"}), "admin"
            )
            for i in range(n)
        ]
        led.append(batch)
        envs.extend(batch)
    return envs


def _anchored_log(led: Ledger, *, held: bool = True, size: int = 20) -> list[Envelope]:
    """A checkpoint published at ``ANCHOR``, then the log grown to ``size`` with none published; the home
    holds it (``held``) or holds none (the database stores it)."""
    envs = _fill(led, ANCHOR)
    assert led.checkpoint().size == ANCHOR
    envs += _fill(led, size)
    if not held:
        led.home.checkpoint_path.unlink()
        assert led.held() is None
    return envs


def _sql(led: Ledger, sql: str, **params: Any) -> Any:
    with led.engine.begin() as conn:
        _drop_triggers(conn)
        return conn.execute(sa.text(sql), params)


def _row(led: Ledger, seq: int) -> Any:
    with led.engine.begin() as conn:
        return conn.execute(
            sa.text(
                "SELECT entry_id, kind, signer, logged_at, prev_hash, chain_hash"
                " FROM log_entries WHERE seq = :s"
            ),
            {"s": seq},
        ).one()


def _rewrite(
    led: Ledger, seq: int, when: str = BACK, *, through_head: bool = False, tiles: bool = False
) -> None:
    """The row at ``seq`` rewritten behind the log's back to ``when``: its logged_at, record and leaf hash
    together (the row passes its own leaf check); ``through_head``: every chain hash from it to the head
    re-derived over the new time (and each next row's prev_hash), so the chain stays whole; ``tiles``:
    the stored tiles' chain hash columns moved with them (the tiles stay the log's, holding the old leaf)."""
    size = led.size()
    r = _row(led, seq)
    record = LogRecord(seq, when, r.entry_id, r.kind, r.signer).to_bytes()
    link = chain_hash(seq, r.entry_id, r.prev_hash, when)
    chains = {seq: (r.chain_hash, link)}
    sets = "logged_at = :t, record = :rec, leaf_hash = :leaf" + (", chain_hash = :c" if through_head else "")
    _sql(
        led,
        f"UPDATE log_entries SET {sets} WHERE seq = :s",
        t=when,
        rec=record,
        leaf=hashlib.sha256(b"\x00" + record).hexdigest(),
        c=link,
        s=seq,
    )
    if not through_head:
        return
    prev = link
    for s in range(seq + 1, size):
        x = _row(led, s)
        c = chain_hash(s, x.entry_id, prev, x.logged_at)
        _sql(led, "UPDATE log_entries SET prev_hash = :p, chain_hash = :c WHERE seq = :s", p=prev, c=c, s=s)
        chains[s] = (x.chain_hash, c)
        prev = c
    if tiles:
        for s, (old, new) in chains.items():
            _sql(
                led,
                "UPDATE tiles SET chain_hash = :new WHERE last_seq = :s AND chain_hash = :old",
                new=new,
                s=s,
                old=old,
            )


def _tile_rewritten(led: Ledger, idx: int = 0, k: int = 44) -> None:
    """Stored tile 0/``idx``'s hash ``k`` zeroed and its root re-derived: a tile consistent with itself,
    not with the rows under it (the tree read from it gives another root)."""
    with led.engine.begin() as conn:
        hashes = bytes(
            conn.execute(
                sa.text("SELECT hashes FROM tiles WHERE level = 0 AND idx = :i"), {"i": idx}
            ).scalar_one()
        )
    hashes = hashes[: 32 * k] + bytes(32) + hashes[32 * (k + 1) :]
    root = merkle_root([hashes[i : i + 32] for i in range(0, len(hashes), 32)])
    _sql(led, "UPDATE tiles SET hashes = :h, root = :r WHERE level = 0 AND idx = :i", h=hashes, r=root, i=idx)


def _checkpoint_rows(led: Ledger) -> int:
    with led.engine.begin() as conn:
        return int(conn.execute(sa.text("SELECT count(*) FROM checkpoints")).scalar_one())


def _envelope_at(led: Ledger, envs: list[Envelope], seq: int) -> Envelope:
    data = led.get_seq(seq).envelope
    return next(e for e in envs if e.canonical() == data)


def _signers(led: Ledger, tmp_path: Path) -> dict[str, Callable[[], object]]:
    """Everything that signs under the log's key over the whole log (or serves a tile above level 0)."""
    return {
        "signed checkpoint": led.signed_checkpoint,
        "published checkpoint": led.checkpoint,
        "inclusion": lambda: led.inclusion(led.get_seq(3).entry_id),
        "consistency": lambda: led.consistency(3),
        "tiles export": lambda: led.export_tiles(tmp_path / "tiles"),
    }


def _refusals(led: Ledger, tmp_path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, sign in _signers(led, tmp_path).items():
        try:
            sign()
            out[name] = "signed"
        except IntegrityError as e:
            out[name] = e.code
    return out


@pytest.fixture
def walked(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The rows every chain walk reads (``_chain_rows``), counted."""
    seen: list[int] = []
    real = service_module._chain_rows

    def counting(conn: sa.Connection, lo: int, hi: int) -> list[tuple[Any, ...]]:
        rows = real(conn, lo, hi)
        seen.extend(int(r[0]) for r in rows)
        return rows

    monkeypatch.setattr(service_module, "_chain_rows", counting)
    return seen


# --- 1. the stored checkpoint anchors a home that holds none ---------------------------------------------


def test_a_home_holding_no_checkpoint_signs_nothing_over_a_rewritten_tile(
    led: Ledger, tmp_path: Path
) -> None:
    """Regression: with no HOME/checkpoint, a tile rewritten with its root was signed over (checkpoint,
    proofs, tiles export) and the fork became the home's anchor."""
    _fill(led, SIZE)
    led.checkpoint()  # tile 0/000 stored, the database stores the checkpoint of size SIZE
    led.home.checkpoint_path.unlink()
    rows = _checkpoint_rows(led)
    _tile_rewritten(led)
    assert set(_refusals(led, tmp_path).values()) == {"tile-mismatch"}
    with pytest.raises(TileMismatchError, match="does not extend the checkpoint the database stores"):
        led.signed_checkpoint()
    with pytest.raises(TileMismatchError):  # nor a tile above level 0
        led.tile(1, 0, 1)
    with pytest.raises(TileMismatchError):  # nor an append (its receipt is signed)
        _fill(led, SIZE + 1)
    assert led.size() == SIZE
    assert led.held() is None and _checkpoint_rows(led) == rows  # nothing held, nothing stored


def test_a_home_holding_no_checkpoint_signs_an_untouched_log(led: Ledger, tmp_path: Path) -> None:
    """Neighbour, the case that must still pass: an untouched log signs, serves and appends; the home then
    holds what it signed."""
    envs = _fill(led, SIZE)
    led.checkpoint()
    led.home.checkpoint_path.unlink()
    assert set(_refusals(led, tmp_path).values()) == {"signed"}
    (dup,) = led.append([_envelope_at(led, envs, 100)])
    assert dup.duplicate and led.receipt(dup).record.index == 100
    _fill(led, SIZE + 5)
    assert led.checkpoint().size == SIZE + 5 and led.held() is not None


def _other_key_note(led: Ledger, size: int, root: bytes) -> str:
    return sign_checkpoint(
        led.cfg.origin, size, root, SigningKey.generate("other"), key_name=led.note_key_name
    ).note


# each edit of the newest checkpoint row (size SIZE)
ROW_EDITS: dict[str, Callable[[Ledger], None]] = {
    "signature-flipped": lambda led: _sql(
        led,
        "UPDATE checkpoints SET note = :n WHERE size = :s",
        n=_flip_signature(_note_at(led, SIZE)),
        s=SIZE,
    ),
    "note-of-another-key": lambda led: _sql(
        led,
        "UPDATE checkpoints SET note = :n WHERE size = :s",
        n=_other_key_note(led, SIZE, led.root(SIZE)),
        s=SIZE,
    ),
    "note-mistyped": lambda led: _sql(
        led, "UPDATE checkpoints SET note = 'not a note' WHERE size = :s", s=SIZE
    ),
    "root-column": lambda led: _sql(
        led, "UPDATE checkpoints SET root = :r WHERE size = :s", r="00" * 32, s=SIZE
    ),
    "size-column": lambda led: _sql(
        led, "UPDATE checkpoints SET size = :n WHERE size = :s", n=SIZE - 1, s=SIZE
    ),
    "format-column": lambda led: _sql(led, "UPDATE checkpoints SET format = 1 WHERE size = :s", s=SIZE),
}


def _note_at(led: Ledger, size: int) -> str:
    with led.engine.begin() as conn:
        return str(
            conn.execute(sa.text("SELECT note FROM checkpoints WHERE size = :s"), {"s": size}).scalar_one()
        )


def _flip_signature(note: str) -> str:
    body, sep, sig = note.partition("\n\n")
    line = sig.splitlines()[0]
    head, blob = line.rsplit(" ", 1)
    flipped = blob[:-4] + ("AAAA" if blob[-4:] != "AAAA" else "BBBB")
    return f"{body}{sep}{head} {flipped}\n"


@pytest.mark.parametrize("held", [False, True], ids=["no-held", "held"])
@pytest.mark.parametrize("edit", list(ROW_EDITS))
def test_a_stored_checkpoint_row_that_is_not_the_logs_is_refused(
    led: Ledger, tmp_path: Path, edit: str, held: bool
) -> None:
    """A newest checkpoint row whose note does not verify under the log's key, or whose columns are not
    its note's, is a fault: refused and named, never skipped for an older one."""
    _fill(led, SIZE)
    led.checkpoint()
    if not held:
        led.home.checkpoint_path.unlink()
    ROW_EDITS[edit](led)
    with pytest.raises(LogInconsistentError, match="the newest checkpoint the database stores"):
        led.signed_checkpoint()
    assert set(_refusals(led, tmp_path).values()) == {"log-inconsistent"}


def test_the_newest_checkpoint_row_dropped_anchors_at_the_one_before(led: Ledger, tmp_path: Path) -> None:
    """Neighbour, dropped: deleting the newest row leaves the one before as the anchor (the limit of an
    anchor inside the database: the home's own held checkpoint is outside it)."""
    _fill(led, SIZE)
    led.checkpoint()
    led.home.checkpoint_path.unlink()
    _sql(led, "DELETE FROM checkpoints WHERE size = :s", s=SIZE)
    assert set(_refusals(led, tmp_path).values()) == {"signed"}


@pytest.mark.parametrize("held", [False, True], ids=["no-held", "held-older"])
def test_a_rollback_below_the_newest_stored_checkpoint_is_refused(
    led: Ledger, tmp_path: Path, held: bool
) -> None:
    """The entries past size 250 deleted, the checkpoint of size SIZE left standing: the log no longer
    extends it (with no held checkpoint, or one older than the stored one)."""
    _fill(led, ANCHOR)
    note = led.checkpoint().note
    _fill(led, SIZE)
    led.checkpoint()
    if held:
        led.home.hold_checkpoint(note)
    else:
        led.home.checkpoint_path.unlink()
    for table in ("entry_subjects", "entry_refs", "entry_artifacts", "log_entries"):
        _sql(led, f"DELETE FROM {table} WHERE seq >= 250")
    with pytest.raises(
        LogInconsistentError, match=rf"does not extend the checkpoint the database stores \(size {SIZE}"
    ):
        led.signed_checkpoint()
    assert set(_refusals(led, tmp_path).values()) == {"log-inconsistent"}


def test_a_rollback_with_its_checkpoints_is_served(led: Ledger, tmp_path: Path) -> None:
    """Neighbour: a restore that took the checkpoints past it with it (a backup of the whole database),
    with no held checkpoint (the operator removed it, accepting the restore), is signed and appended to."""
    _fill(led, SIZE)
    led.checkpoint()
    led.home.checkpoint_path.unlink()
    for table in ("entry_subjects", "entry_refs", "entry_artifacts", "log_entries"):
        _sql(led, f"DELETE FROM {table} WHERE seq >= 250")
    _sql(led, "DELETE FROM checkpoints WHERE size > 250")
    _sql(led, "DELETE FROM tiles WHERE last_seq >= 250")
    assert set(_refusals(led, tmp_path).values()) == {"signed"}
    _fill(led, 255)
    assert led.size() == 255


def test_a_home_holding_an_older_checkpoint_is_checked_against_the_newer_stored_one(
    led: Ledger, tmp_path: Path
) -> None:
    """Regression (a replica whose home holds an older checkpoint than another published): the log was
    checked against the held one (size ANCHOR) only, and a tile rewritten past it was signed over."""
    _fill(led, ANCHOR)
    note = led.checkpoint().note
    _fill(led, SIZE)
    led.checkpoint()
    led.home.hold_checkpoint(note)
    assert led.held() is not None and led.held().size == ANCHOR  # type: ignore[union-attr]
    _tile_rewritten(led)
    assert set(_refusals(led, tmp_path).values()) == {"tile-mismatch"}


def test_the_larger_anchor_bounds_the_walk(led: Ledger, walked: list[int]) -> None:
    """Neighbour, untouched: with the held checkpoint older than the stored one, the larger is the anchor:
    a checkpoint 5 entries on walks its last row and those 5 only (not the 290 past the held one)."""
    _fill(led, ANCHOR)
    note = led.checkpoint().note
    _fill(led, SIZE)
    led.checkpoint()
    led.home.hold_checkpoint(note)
    _fill(led, SIZE + 5)
    walked.clear()
    assert led.checkpoint().size == SIZE + 5
    assert walked == list(range(SIZE - 1, SIZE + 5))


# --- 2. a checkpoint past the anchor is signed over walked rows only ----------------------------------------


def _edit_prev(led: Ledger, seq: int) -> None:
    _sql(led, "UPDATE log_entries SET prev_hash = :p WHERE seq = :s", p="ab" * 32, s=seq)


def _delete(led: Ledger, seq: int) -> None:
    for table in ("entry_subjects", "entry_refs", "entry_artifacts", "log_entries"):
        _sql(led, f"DELETE FROM {table} WHERE seq = :s", s=seq)


PAST_EDITS: dict[str, tuple[Callable[[Ledger], None], type[IntegrityError], str]] = {
    "own-link": (lambda led: _rewrite(led, 15), ChainBrokenError, "seq 15 .*its chain hash does not link"),
    "back-dated-through-the-head": (
        lambda led: _rewrite(led, 15, through_head=True),
        LogOrderError,
        "seq 15 .*before the entry at seq 14",
    ),
    "prev-hash-renamed": (lambda led: _edit_prev(led, 15), ChainBrokenError, "seq 15 .*its prev_hash"),
    "row-deleted": (lambda led: _delete(led, 15), ChainBrokenError, "deleted behind the log's back"),
}


@pytest.mark.parametrize("held", [True, False], ids=["held", "stored"])
@pytest.mark.parametrize("edit", list(PAST_EDITS))
def test_a_checkpoint_is_not_signed_over_a_row_rewritten_past_the_anchor(
    led: Ledger, tmp_path: Path, edit: str, held: bool
) -> None:
    """Regression: a row past the anchor rewritten (its log time, record and leaf hash; or its chain
    hashes through the head; its link renamed; the row gone) was covered by the next checkpoint."""
    _anchored_log(led, held=held)
    anchor = led.held()
    rows = _checkpoint_rows(led)
    change, error, said = PAST_EDITS[edit]
    change(led)
    with pytest.raises(error, match=said):
        led.checkpoint()
    refused = _refusals(led, tmp_path)
    assert "signed" not in refused.values(), refused
    assert led.held() == anchor and _checkpoint_rows(led) == rows  # the anchor stays, nothing stored


def test_a_tile_past_the_anchor_that_is_not_the_rows_is_not_signed(led: Ledger, tmp_path: Path) -> None:
    """Regression, the tiles about to be signed: the checkpoints over a stored tile deleted (the anchor
    back at size ANCHOR), the tile rewritten with its root: its leaves are not the rows' walked."""
    _fill(led, ANCHOR)
    note = led.checkpoint().note
    _fill(led, SIZE)
    led.checkpoint()
    _sql(led, "DELETE FROM checkpoints WHERE size > :s", s=ANCHOR)
    led.home.hold_checkpoint(note)
    _tile_rewritten(led)
    with pytest.raises(TileMismatchError, match="stored tile 0/000"):
        led.checkpoint()
    assert set(_refusals(led, tmp_path).values()) == {"tile-mismatch"}


@pytest.mark.parametrize("new", [1, 100])
def test_an_untouched_log_publishes_walking_the_new_rows_only(
    led: Ledger, walked: list[int], new: int
) -> None:
    """Neighbour, the passing case, and the cost: publishing ``new`` entries past the anchor walks the
    anchor's last row and those entries, no more."""
    _fill(led, SIZE)
    led.checkpoint()
    _fill(led, SIZE + new)
    walked.clear()
    assert led.checkpoint().size == SIZE + new
    assert walked == list(range(SIZE - 1, SIZE + new))
    walked.clear()
    assert led.signed_checkpoint().size == SIZE + new and walked == []  # the anchor moved with it


# --- 3. a re-sent entry is answered from an anchored chain only ---------------------------------------------


@pytest.mark.parametrize("held", [True, False], ids=["held", "stored"])
def test_a_resent_row_back_dated_with_every_chain_hash_through_the_head_is_not_receipted(
    led: Ledger, held: bool
) -> None:
    """Regression: the row's chain hashes re-derived from it to the head kept ``chain_linked`` whole, and
    the re-sent envelope was answered (duplicate) at the back-dated time and receipted."""
    envs = _anchored_log(led, held=held)
    env = _envelope_at(led, envs, 15)
    _rewrite(led, 15, through_head=True)
    size = led.size()
    with pytest.raises(LogOrderError, match=r"seq 15 .*before the entry at seq 14") as got:
        led.append([env])
    assert got.value.code == "logged-at-decreasing"
    assert led.size() == size


def test_a_resent_row_inside_a_stored_tile_rewritten_through_the_head_is_not_receipted(led: Ledger) -> None:
    """Regression: a row under the anchor, inside stored tile 0/000, rewritten with its chain hashes
    through the head and the tiles' chain columns moved with them: the tile (the old leaf) still gave the
    signed root, the row passed its own checks, and it was receipted at the back-dated time."""
    envs = _fill(led, SIZE)
    led.checkpoint()
    env = _envelope_at(led, envs, 100)
    _rewrite(led, 100, through_head=True, tiles=True)
    with pytest.raises(ChainBrokenError, match=f"seq 100 .*not the leaf the checkpoint of size {SIZE} signs"):
        led.append([env])


@pytest.mark.parametrize("held", [True, False], ids=["held", "stored"])
def test_untouched_resent_entries_are_answered_as_logged(led: Ledger, held: bool) -> None:
    """Neighbour, the case that must still pass: re-sent entries inside a stored tile, on the edge below
    the anchor, at its last row, past it and at the head, answered as logged and receipted."""
    envs = _fill(led, SIZE)
    led.checkpoint()
    envs += _fill(led, SIZE + 20)
    if not held:
        led.home.checkpoint_path.unlink()
    for seq in (100, 280, SIZE - 1, SIZE, SIZE + 7, led.size() - 1):
        first = led.get_seq(seq)
        (dup,) = led.append([_envelope_at(led, envs, seq)])
        assert dup.duplicate and (dup.seq, dup.logged_at) == (first.seq, first.logged_at)
        assert led.receipt(dup).record.logged_at == first.logged_at


def test_a_resent_row_before_a_break_past_the_anchor_is_answered(led: Ledger) -> None:
    """Neighbour: the walk goes from the anchor to the row after the re-sent one, no further: a row
    broken after it does not stand in its way."""
    envs = _anchored_log(led)
    _rewrite(led, 17)
    (dup,) = led.append([_envelope_at(led, envs, 13)])
    assert dup.duplicate and dup.seq == 13


# --- the walk's own pieces ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry_id", "prev", "at"),
    [
        ("ab" * 32, "cd" * 32, "2026-01-02T03:04:05.678901Z"),
        ("é" * 3, "cd" * 32, "2026-01-02T03:04:05Z"),  # not plain: the canonical path
        ('q"uote', "\\", "2026-01-02T03:04:05+01:00"),
    ],
)
def test_the_walks_chain_hash_is_the_logs(entry_id: str, prev: str, at: str) -> None:
    assert _chain_hex(7, entry_id, prev, at) == chain_hash(7, entry_id, prev, at)


def _rows(times: list[str]) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    prev = "00" * 32
    for seq, at in enumerate(times):
        eid = f"{seq:064x}"
        record = LogRecord(seq, at, eid, "note", "k").to_bytes()
        ch = chain_hash(seq, eid, prev, at)
        out.append(
            (seq, eid, "note", "k", at, record, hashlib.sha256(b"\x00" + record).hexdigest(), prev, ch)
        )
        prev = ch
    return out


def test_chain_walk_reads_times_in_any_rfc3339_form_and_refuses_one_that_runs_back() -> None:
    rows = _rows(["2026-01-02T03:04:05.000000Z", "2026-01-02T04:04:05+01:00", "2026-01-02T03:04:06Z"])
    leaves, link = chain_walk(rows, ChainLink(0, "00" * 32, None))
    assert len(leaves) == 3 and link == ChainLink(3, rows[-1][-1], rows[-1][4])
    back = _rows(["2026-01-02T03:04:05.000000Z", "2026-01-02T04:04:04+01:00"])
    with pytest.raises(LogOrderError, match="seq 1 "):
        chain_walk(back, ChainLink(0, "00" * 32, None))


def test_chain_walk_takes_the_first_row_as_the_base_without_its_link() -> None:
    rows = _rows(["2026-01-02T03:04:05.000000Z", "2026-01-02T03:04:06.000000Z"])
    _, link = chain_walk(rows[1:], None)  # its prev_hash links to a row not read: the caller anchors it
    assert link is not None and link.seq == 2
    with pytest.raises(ChainBrokenError, match="no entry at seq 1"):
        chain_walk([*rows[:1], (2, *rows[1][1:])], ChainLink(0, "00" * 32, None))
