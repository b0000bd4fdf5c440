"""The leaf commits the log's record (issue 12): raw SQL on SQLite and PostgreSQL cannot move an entry.

Each Merkle leaf is SHA-256(0x00 || log record), the record being RFC 8785 JSON of the index, ``logged_at``,
entry id, kind and signer; ``ledger verify`` judges revocation and validity in log order and refuses a
``logged_at`` that decreases. Named after the findings of issue 12.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from ledger.db import LOG_TABLES
from ledger.entries import format_time, parse_time
from ledger.log import MAX_RECORD_BYTES, LogRecord, chain_hash, entry_id_of, parse_record
from ledger.service import Ledger
from tests.reliability import api_fixtures
from tests.reliability.api_fixtures import PgDatabases

pg_databases = api_fixtures.pg_databases


@pytest.fixture(params=["sqlite", "postgres"])
def revoked(request: pytest.FixtureRequest, tmp_path: Path, pg_databases: PgDatabases) -> Iterator[Ledger]:
    """A ledger (SQLite or PostgreSQL) where hostA recorded four notes, then was revoked."""
    if request.param == "postgres":
        api_fixtures.require_postgres()
        url = pg_databases.new()
    else:
        url = f"sqlite:///{tmp_path / 'home' / 'ledger.db'}"
    led = Ledger.init(tmp_path / "home", database_url=url)
    led.new_key("hostA", ["collector"])
    for i in range(4):
        led.record("note", {"campaign": "c"}, {"text": f"#{i}"}, key="hostA")
    led.revoke_key("hostA", reason="key leaked")
    assert led.verify()
    yield led
    led.close()


def _drop_triggers(conn: sa.Connection) -> None:
    """What an attacker with database access does first (UPDATE/DELETE are refused by triggers)."""
    for table in LOG_TABLES:
        if conn.dialect.name == "sqlite":
            conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {table}_no_update")
            conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {table}_no_delete")
        else:
            conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {table}_append_only ON {table}")


def _head(conn: sa.Connection) -> Any:
    return conn.execute(
        sa.text("SELECT seq, chain_hash, logged_at FROM log_entries ORDER BY seq DESC LIMIT 1")
    ).one()


def _insert_forged(led: Ledger, env: bytes, kind: str, signer: str, logged_at: str) -> int:
    """INSERT an entry at the end of the log with a correct chain link, log record and leaf (INSERT is
    what the triggers allow, so none is touched)."""
    entry_id = entry_id_of(env)
    with led.engine.begin() as conn:
        head = _head(conn)
        seq = int(head.seq) + 1
        record = LogRecord(seq, logged_at, entry_id, kind, signer).to_bytes()
        conn.execute(
            sa.text(
                "INSERT INTO log_entries (seq, entry_id, kind, signer, collected_at, logged_at, envelope,"
                " record, leaf_hash, prev_hash, chain_hash) VALUES (:seq, :id, :kind, :signer, :collected,"
                " :logged, :env, :record, :leaf, :prev, :chain)"
            ),
            {
                "seq": seq,
                "id": entry_id,
                "kind": kind,
                "signer": signer,
                "collected": logged_at,
                "logged": logged_at,
                "env": env,
                "record": record,
                "leaf": LogRecord(seq, logged_at, entry_id, kind, signer).leaf().hex(),
                "prev": head.chain_hash,
                "chain": chain_hash(seq, entry_id, head.chain_hash, logged_at),
            },
        )
        conn.execute(
            sa.text("INSERT INTO entry_subjects (seq, field, value) VALUES (:seq, 'campaign', 'c')"),
            {"seq": seq},
        )
    return seq


def _codes(led: Ledger) -> dict[int | None, set[str]]:
    report = led.verify()
    assert not report, "verify passed a tampered log"
    out: dict[int | None, set[str]] = {}
    for p in report.problems:
        out.setdefault(p.seq, set()).add(p.code)
    return out


def _revoked_entry(led: Ledger, at: str) -> bytes:
    st = led.make_statement(
        "note", {"campaign": "c"}, {"text": "signed with the leaked key"}, collected_at=at
    )
    return led.sign(st, "hostA").canonical()


def test_revoked_key_entry_inserted_with_earlier_logged_at_fails_verify(revoked: Ledger) -> None:
    """Finding: an entry signed by a revoked key, INSERTed with an earlier logged_at (before the revocation)
    and a correct chain and leaf, passed `ledger verify`. Now the log time may not decrease."""
    led = revoked
    rec = led.key_record("hostA")
    assert rec.revoked_at is not None
    before = format_time(rec.revoked_at - timedelta(minutes=5))
    seq = _insert_forged(led, _revoked_entry(led, before), "note", rec.key_id, before)
    found = _codes(led)
    assert set(found) == {seq}, found
    assert "logged-at-decreasing" in found[seq]


def test_revoked_key_entry_inserted_in_log_order_fails_verify(revoked: Ledger) -> None:
    """The same entry INSERTed with a logged_at that keeps the order: judged at that time by the keys as of
    its position, the key is revoked."""
    led = revoked
    rec = led.key_record("hostA")
    with led.engine.connect() as conn:
        last = _head(conn).logged_at
    seq = _insert_forged(led, _revoked_entry(led, last), "note", rec.key_id, last)
    found = _codes(led)
    assert found == {seq: {"key-revoked"}}, found


def test_checkpoint_signs_the_log_time(revoked: Ledger) -> None:
    """The published checkpoint's leaves are the log records: the record bytes of each row hash to its
    leaf, name its envelope's id and carry its logged_at, and stay under the C2SP entry bundle limit."""
    led = revoked
    cp = led.checkpoint()
    with led.engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT seq, entry_id, logged_at, envelope, record, leaf_hash FROM log_entries ORDER BY seq"
            )
        ).all()
    assert len(rows) == cp.size
    for r in rows:
        rec = parse_record(bytes(r.record))
        assert (rec.index, rec.entry_id, rec.logged_at) == (r.seq, r.entry_id, r.logged_at)
        assert entry_id_of(bytes(r.envelope)) == rec.entry_id
        assert rec.leaf().hex() == r.leaf_hash
        assert len(bytes(r.record)) <= MAX_RECORD_BYTES
    assert led.tree().root(cp.size) == cp.root


@pytest.mark.parametrize("attacker", ["moves-the-column", "rewrites-record-leaf-and-chain"])
def test_back_dating_an_existing_entry_logged_at_fails_verify(revoked: Ledger, attacker: str) -> None:
    """Finding: back-dating an existing entry's logged_at passed `ledger verify`. Moving the column alone
    breaks the record; rewriting the record, leaf and every chain link after it breaks the published
    checkpoint — and back-dating before the entry ahead of it is named by itself."""
    led = revoked
    led.checkpoint()  # a published checkpoint a witness or collector may hold
    target = 3
    with led.engine.begin() as conn:
        _drop_triggers(conn)
        prev = conn.execute(sa.text("SELECT logged_at FROM log_entries WHERE seq=:s"), {"s": target - 1})
        earlier = format_time(parse_time(prev.scalar_one()) - timedelta(days=2))
        if attacker == "moves-the-column":
            conn.execute(
                sa.text("UPDATE log_entries SET logged_at=:t WHERE seq=:s"), {"t": earlier, "s": target}
            )
        else:
            rows = conn.execute(
                sa.text(
                    "SELECT seq, entry_id, kind, signer, logged_at, prev_hash FROM log_entries "
                    "WHERE seq >= :s ORDER BY seq"
                ),
                {"s": target},
            ).all()
            prev_chain = rows[0].prev_hash
            for r in rows:
                t = earlier if r.seq == target else r.logged_at
                rec = LogRecord(r.seq, t, r.entry_id, r.kind, r.signer)
                ch = chain_hash(r.seq, r.entry_id, prev_chain, t)
                conn.execute(
                    sa.text(
                        "UPDATE log_entries SET logged_at=:t, record=:rec, leaf_hash=:leaf, prev_hash=:p,"
                        " chain_hash=:c WHERE seq=:s"
                    ),
                    {
                        "t": t,
                        "rec": rec.to_bytes(),
                        "leaf": rec.leaf().hex(),
                        "p": prev_chain,
                        "c": ch,
                        "s": r.seq,
                    },
                )
                prev_chain = ch
    found = _codes(led)
    assert "logged-at-decreasing" in found[target], found
    if attacker == "moves-the-column":
        assert {"record-mismatch", "leaf-hash-mismatch", "chain-broken"} <= found[target], found
    else:
        assert "checkpoint-mismatch" in found[None], found


def test_log_record_committed_by_nothing_an_explicit_earlier_logged_at_is_refused_at_ingest(
    revoked: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ingest on a system clock stepped back logs at the head's time (never earlier); a caller-given
    log time earlier than the head's is refused at ingest (``logged-at-before-head``), nothing stored.

    Regression (issue 12, "the log's own record is committed by nothing"): an append given an earlier
    ``logged_at`` used to be stored, so a revoked key's entry could be slipped in "before" its revocation
    by code that passes a time; only ``ledger verify`` named it afterwards."""
    import ledger.service as service
    from ledger.errors import LogTimeBackwardsError

    led = revoked
    with led.engine.connect() as conn:
        last = parse_time(_head(conn).logged_at)
    monkeypatch.setattr(service, "now_utc", lambda: last - timedelta(hours=1))
    e = led.record("note", {"campaign": "c"}, {"text": "clock stepped back"}, key=led.admin_key_name)
    assert parse_time(e.logged_at) == last
    assert led.verify()
    monkeypatch.undo()
    size = led.size()
    st = led.make_statement("note", {"campaign": "c"}, {"text": "given an earlier time"})
    env = led.sign(st, led.admin_key_name)
    with pytest.raises(LogTimeBackwardsError) as err:
        led.append([env], logged_at=last - timedelta(seconds=1))
    assert err.value.code == "logged-at-before-head"
    assert led.size() == size
    # the revoked key's note, given a time before its revocation: refused for the time, not stored
    st = led.make_statement("note", {"campaign": "c"}, {"text": "back-dated by a revoked key"})
    with pytest.raises(LogTimeBackwardsError):
        led.append([led.sign(st, "hostA")], logged_at=last - timedelta(days=1))
    assert led.size() == size
    # the head's own time is not earlier: accepted
    (same,) = led.append([env], logged_at=last)
    assert parse_time(same.logged_at) == last and same.seq == size
    assert led.verify()
