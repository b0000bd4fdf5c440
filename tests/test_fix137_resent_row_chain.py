"""fix137 (issue 12, the last closing note): a row rewritten consistently, past the last checkpoint and
outside a stored tile, could still be receipted as a duplicate.

Its ``logged_at``, ``record`` and ``leaf_hash`` rewritten together (no trigger touched, raw SQL) pass the
row's check against its leaf (``ledger.reads.committed_row``), and nothing signed covers the row yet (no
checkpoint, no stored tile; a server keeps no receipts of what it appends): the re-sent envelope was
answered as a duplicate with the rewritten time, and the log key signed a receipt of it. The hash chain
does cover it: the row's chain hash links its index, entry id and log time to its predecessor, and the
next row links to its chain hash. A re-sent entry (and an inclusion proof) is now answered only from a row
whose place in the chain holds (``ledger.reads.chain_linked``): ``chain-broken``, a home fault (HTTP 500,
the collector keeps it spooled), never a receipt.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from ledger.api.app import create_app
from ledger.api.settings import ApiSettings
from ledger.errors import ChainBrokenError, TileMismatchError
from ledger.log import LogRecord, chain_hash, parse_record
from ledger.service import Ledger
from ledger.signing import Envelope
from ledger.tokens import create_token
from tests.reliability import api_fixtures
from tests.reliability.api_fixtures import PgDatabases
from tests.reliability.test_receipts import _drop_triggers

pg_databases = api_fixtures.pg_databases

BACK = "2020-01-01T00:00:00.000000Z"
HELD = 10  # the checkpoint published after the first entries; the rows after it are under no tile


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


def _entries(led: Ledger, n: int = 20) -> list[Envelope]:
    """``n`` notes appended, a checkpoint published after the first ``HELD`` entries of the log."""
    envs = [
        led.sign(led.make_statement("note", {"campaign": "f137"}, {"text": f"{i}"}), "admin")
        for i in range(n)
    ]
    led.append(envs[: HELD - led.size()])
    led.checkpoint()
    led.append(envs[HELD - 2 :])
    return envs


def _row(conn: Any, seq: int) -> Any:
    return conn.execute(
        sa.text(
            "SELECT entry_id, kind, signer, logged_at, prev_hash, chain_hash FROM log_entries WHERE seq = :s"
        ),
        {"s": seq},
    ).one()


def _rewrite(
    led: Ledger, seq: int, *, chain: bool = False, next_prev: bool = False, next_chain: bool = False
) -> None:
    """The row at ``seq`` rewritten consistently behind the log's back: ``logged_at``, ``record`` and
    ``leaf_hash`` together (``committed_row`` passes it); ``chain``: its chain hash re-derived to match
    too; ``next_prev``: the next row's ``prev_hash`` set to that; ``next_chain``: and the next row's chain
    hash re-derived over it."""
    with led.engine.begin() as conn:
        _drop_triggers(conn)
        r = _row(conn, seq)
        record = LogRecord(seq, BACK, r.entry_id, r.kind, r.signer).to_bytes()
        sets: dict[str, Any] = {
            "logged_at": BACK,
            "record": record,
            "leaf_hash": hashlib.sha256(b"\x00" + record).hexdigest(),
        }
        link = chain_hash(seq, r.entry_id, r.prev_hash, BACK)
        if chain:
            sets["chain_hash"] = link
        assign = ", ".join(f"{k} = :{k}" for k in sets)
        conn.execute(sa.text(f"UPDATE log_entries SET {assign} WHERE seq = :seq"), {**sets, "seq": seq})
        if next_prev:
            n = _row(conn, seq + 1)
            new = chain_hash(seq + 1, n.entry_id, link, n.logged_at) if next_chain else n.chain_hash
            conn.execute(
                sa.text("UPDATE log_entries SET prev_hash = :p, chain_hash = :c WHERE seq = :s"),
                {"p": link, "c": new, "s": seq + 1},
            )


def _envelope_at(led: Ledger, envs: list[Envelope], seq: int) -> Envelope:
    data = led.get_seq(seq).envelope
    return next(e for e in envs if e.canonical() == data)


def test_a_row_rewritten_consistently_past_the_last_checkpoint_is_not_receipted_as_a_duplicate(
    led: Ledger,
) -> None:
    """Regression: the re-sent envelope was answered (duplicate) at the back-dated time and receipted."""
    envs = _entries(led)
    seq = HELD + 5
    _rewrite(led, seq)
    size = led.size()
    with pytest.raises(ChainBrokenError, match=f"seq {seq} .*its chain hash does not link") as got:
        led.append([_envelope_at(led, envs, seq)])
    assert type(got.value) is ChainBrokenError and got.value.code == "chain-broken"
    assert led.size() == size  # nothing appended, nothing answered, nothing signed
    # the neighbour before it, which the log did not touch, is answered as logged, its receipt signed
    # (fix149: a re-sent entry past the anchor is answered only from a chain walked from the anchor to
    # the row after it, so one after the broken row is refused too)
    (dup,) = led.append([_envelope_at(led, envs, seq - 2)])
    assert dup.duplicate and led.receipt(dup).record.logged_at != BACK
    with pytest.raises(ChainBrokenError, match=f"seq {seq} "):
        led.append([_envelope_at(led, envs, seq + 2)])


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        ({"chain": True}, "the entry at seq {n} after it does not link to its chain hash"),
        ({"chain": True, "next_prev": True}, "the chain hash of the entry at seq {n} after it does not link"),
    ],
    ids=["its-chain-hash-too", "and-the-next-rows-link"],
)
def test_a_row_rewritten_with_its_chain_hash_breaks_the_next_link(
    led: Ledger, edit: dict[str, bool], said: str
) -> None:
    """Neighbours: the row's own chain hash re-derived over the new time (and the next row's link to it):
    the chain breaks one row on."""
    envs = _entries(led)
    seq = HELD + 5
    _rewrite(led, seq, **edit)
    with pytest.raises(ChainBrokenError, match=said.format(n=seq + 1)):
        led.append([_envelope_at(led, envs, seq)])


def test_the_head_row_rewritten_consistently_is_not_receipted(led: Ledger) -> None:
    """Neighbour, the row at the end (no row after it): its own link holds its log time."""
    envs = _entries(led)
    seq = led.size() - 1
    _rewrite(led, seq)
    with pytest.raises(ChainBrokenError, match=f"seq {seq} .*its chain hash does not link"):
        led.append([_envelope_at(led, envs, seq)])


def test_a_rows_prev_hash_edited_alone_is_not_receipted(led: Ledger) -> None:
    """Neighbour, renamed: the link column to its predecessor."""
    envs = _entries(led)
    seq = HELD + 3
    with led.engine.begin() as conn:
        _drop_triggers(conn)
        conn.execute(
            sa.text("UPDATE log_entries SET prev_hash = :p WHERE seq = :s"), {"p": "ab" * 32, "s": seq}
        )
    with pytest.raises(ChainBrokenError, match=f"seq {seq} .*its prev_hash is not the chain hash"):
        led.append([_envelope_at(led, envs, seq)])


def test_the_next_row_deleted_is_not_read_as_the_head(led: Ledger) -> None:
    """Neighbour, dropped: the row after it deleted (the log is larger than it): not the head."""
    envs = _entries(led)
    seq = HELD + 3
    with led.engine.begin() as conn:
        _drop_triggers(conn)
        conn.execute(sa.text("DELETE FROM log_entries WHERE seq = :s"), {"s": seq + 1})
    with pytest.raises(ChainBrokenError, match=f"no entry at seq {seq + 1} after it"):
        led.append([_envelope_at(led, envs, seq)])


def test_an_inclusion_proof_of_a_row_rewritten_consistently_is_refused(led: Ledger) -> None:
    """The proof of the rewritten row would carry its back-dated record under a checkpoint signed now."""
    _entries(led)
    seq = HELD + 5
    eid = led.get_seq(seq).entry_id
    _rewrite(led, seq)  # (a proof asked before it would have moved the held checkpoint past the row)
    with pytest.raises(ChainBrokenError, match=f"seq {seq} "):
        led.inclusion(eid)
    other = led.inclusion(led.get_seq(HELD - 3).entry_id, size=HELD)  # one the held checkpoint covers
    assert parse_record(base64.b64decode(other["record"])).index == HELD - 3


def test_an_unedited_resent_entry_under_the_checkpoint_is_answered_as_logged(led: Ledger) -> None:
    """The case that must still pass: re-sent entries before, at and after the checkpoint, and the head."""
    envs = _entries(led)
    for seq in (2, HELD - 1, HELD, led.size() - 1):  # seqs 0 and 1: the home's own key entries
        first = led.get_seq(seq)
        (dup,) = led.append([_envelope_at(led, envs, seq)])
        assert dup.duplicate and (dup.seq, dup.logged_at) == (first.seq, first.logged_at)
        assert led.receipt(dup).record.logged_at == first.logged_at


def test_a_resent_row_rewritten_consistently_is_http_500_over_the_api(tmp_path: Path) -> None:
    """Over HTTP: 500 `chain-broken` (the server's corruption: the collector keeps the entry spooled),
    no receipt."""
    led = Ledger.init(tmp_path / "home")
    try:
        envs = _entries(led)
        seq = HELD + 5
        env = _envelope_at(led, envs, seq)
        _rewrite(led, seq)
        writer, _ = create_token(led.engine, "w", "writer")
        with TestClient(create_app(ApiSettings(home=str(led.home_path)), ledger=led)) as c:
            r = c.post("/v1/entries", json=env.to_json(), headers={"Authorization": f"Bearer {writer}"})
        assert (r.status_code, r.json()["code"]) == (500, "chain-broken"), r.text
        assert "receipt" not in r.json()
    finally:
        led.close()


def test_a_chain_break_is_not_a_tile_mismatch() -> None:
    """The two names stay two findings: a chain break is the records' chain, a tile mismatch a tile."""
    assert ChainBrokenError.code == "chain-broken" and TileMismatchError.code == "tile-mismatch"
