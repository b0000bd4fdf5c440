"""Audit 89: the log key signs, and proofs carry, only rows checked against their leaf.

f1: a re-sent entry (a duplicate) was answered from its row's columns unchecked, and its receipt signed by
the log key over them: an operator's UPDATE of ``logged_at`` alone got a log-signed receipt of the back-dated
time. f3: the inclusion-proof route took the leaf from a stored full tile and the record from the row, never
checking one against the other: 200 over a rewritten record. Both are now built from a row checked against
its leaf (``ledger.reads.committed_row``); a row that fails is ``chain-broken`` (HTTP 500), never signed.

f2: a corrupted row of the server's own log met during an append (a key row folded into the keyring) was a
plain ``integrity`` refusal (HTTP 422), which a collector read as "refused for good" and dropped the envelope
(neither in ``spool/entries`` nor ``spool/refused``). It is a home fault now (HTTP 500, the entry stays
spooled), and an online collect never drops an envelope the server refuses: it goes to ``spool/refused``
with the server's reason.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from ledger.api.app import create_app
from ledger.api.settings import ApiSettings
from ledger.errors import ChainBrokenError, HomeFaultError, LedgerError
from ledger.log import LogRecord, parse_record
from ledger.service import Ledger
from ledger.signing import Envelope
from ledger.tokens import create_token
from tests.reliability import api_fixtures
from tests.reliability.api_fixtures import PgDatabases
from tests.reliability.test_receipts import _drop_triggers
from tests.test_fix82_server_faults import Setup, setup  # noqa: F401 (the fixture)

pg_databases = api_fixtures.pg_databases

BACK = "2020-01-01T00:00:00.000000Z"


def _envelope(led: Ledger, text: str) -> Envelope:
    return led.sign(led.make_statement("note", {"campaign": "c"}, {"text": text}), "admin")


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


def _fill(led: Ledger, n: int) -> list[Envelope]:
    envs = [_envelope(led, f"entry {i}") for i in range(n)]
    for i in range(0, n, 100):
        led.append(envs[i : i + 100])
    return envs


def _tamper(led: Ledger, seq: int, *parts: str) -> None:
    """Rewrite the row at ``seq`` behind the log's back (triggers dropped): its ``logged_at`` column, its
    ``record`` (logged at the back-dated time), its ``leaf_hash`` (to that record's), its ``kind`` column,
    its record dropped (NULL), its envelope replaced by the next entry's."""
    with led.engine.begin() as conn:
        _drop_triggers(conn)
        row = conn.execute(
            sa.text("SELECT logged_at, record FROM log_entries WHERE seq = :s"), {"s": seq}
        ).one()
        old = parse_record(bytes(row.record))
        new = LogRecord(old.index, BACK, old.entry_id, old.kind, old.signer).to_bytes()
        sets: dict[str, Any] = {}
        if "logged_at" in parts:
            sets["logged_at"] = BACK
        if "record" in parts:
            sets["record"] = new
        if "leaf" in parts:
            sets["leaf_hash"] = hashlib.sha256(b"\x00" + new).hexdigest()
        if "kind" in parts:
            sets["kind"] = "nota"
        if "record-null" in parts:
            sets["record"] = None
        if "envelope" in parts:  # another entry's envelope, validly signed
            sets["envelope"] = conn.execute(
                sa.text("SELECT envelope FROM log_entries WHERE seq = :s"), {"s": seq + 1}
            ).scalar_one()
        assign = ", ".join(f"{k} = :{k}" for k in sets)
        conn.execute(sa.text(f"UPDATE log_entries SET {assign} WHERE seq = :seq"), {**sets, "seq": seq})


# --- f1: a duplicate's answer and receipt -----------------------------------------------------------------

EDITS = {
    "logged_at": (("logged_at",), ChainBrokenError, "logged_at '2020-01-01"),
    "record": (("record",), ChainBrokenError, "does not hash to its Merkle leaf"),
    "logged_at-and-record": (("logged_at", "record"), ChainBrokenError, "not as the log committed it"),
    "kind-renamed": (("kind",), ChainBrokenError, "kind 'nota'"),
    "record-dropped": (("record-null",), HomeFaultError, "log-format"),
    "envelope-replaced": (("envelope",), ChainBrokenError, "envelope hashes to"),
}


@pytest.mark.parametrize("edit", list(EDITS))
def test_a_resent_entry_of_an_edited_row_gets_no_signed_receipt(led: Ledger, edit: str) -> None:
    """Regression (f1): re-appending an envelope whose row was edited behind the log's back answered it
    from the row's columns and signed a receipt of them (the back-dated logged_at)."""
    parts, cls, said = EDITS[edit]
    envs = _fill(led, 8)
    target = led.query(kind="note")[5]
    seq = target.seq
    env = next(e for e in envs if led.get(target.entry_id).envelope == e.canonical())
    _tamper(led, seq, *parts)
    size = led.size()
    with pytest.raises(cls, match=said) as got:
        led.append([env])
    assert isinstance(got.value, LedgerError)
    assert led.size() == size  # nothing appended, nothing signed
    # the neighbours before it stand: an unedited re-sent entry is answered, its receipt signed (one after
    # it is answered only from a chain walked through it from the anchor, fix149: refused too)
    again = led.append([envs[3]])
    assert again[0].duplicate and led.receipt(again[0]).record.logged_at != BACK


def test_an_unedited_resent_entry_is_answered_as_logged(led: Ledger) -> None:
    envs = _fill(led, 4)
    first = led.get(led.query(kind="note")[2].entry_id)
    env = next(e for e in envs if e.canonical() == first.envelope)
    (dup,) = led.append([env])
    assert dup.duplicate and (dup.seq, dup.logged_at) == (first.seq, first.logged_at)
    signed = led.receipt(dup).record
    assert (signed.index, signed.logged_at, signed.entry_id) == (first.seq, first.logged_at, first.entry_id)


def _client(led: Ledger) -> tuple[TestClient, dict[str, str], dict[str, str]]:
    writer, _ = create_token(led.engine, "w", "writer")
    reader, _ = create_token(led.engine, "r", "reader")
    app = create_app(ApiSettings(home=str(led.home_path)), ledger=led)
    return TestClient(app), {"Authorization": f"Bearer {writer}"}, {"Authorization": f"Bearer {reader}"}


@pytest.mark.parametrize("parts", [("logged_at",), ("logged_at", "record"), ("record",)])
def test_a_resent_entry_of_an_edited_row_is_http_500_without_receipt(
    tmp_path: Path, parts: tuple[str]
) -> None:
    """Regression (f1, over HTTP): the duplicate was answered 200 with a receipt signed over the rewritten
    columns."""
    led = Ledger.init(tmp_path / "home")
    try:
        envs = _fill(led, 20)
        target = led.query(kind="note")[7]
        env = next(e for e in envs if e.canonical() == led.get(target.entry_id).envelope)
        _tamper(led, target.seq, *parts)
        client, w, _ = _client(led)
        with client as c:
            r = c.post("/v1/entries", json=env.to_json(), headers=w)
            assert r.status_code == 500, r.text
            assert r.json()["code"] == "chain-broken" and "receipt" not in r.json(), r.text
            kept = led.get(led.query(kind="note")[5].entry_id).envelope  # one before it (fix149)
            other = next(e for e in envs if e.canonical() == kept)
            ok = c.post("/v1/entries", json=other.to_json(), headers=w)
            assert ok.status_code == 200 and ok.json()["duplicate"] is True, ok.text
    finally:
        led.close()


# --- f3: the inclusion proof -------------------------------------------------------------------------------


@pytest.mark.parametrize("full_tile", [True, False], ids=["under-a-full-tile", "in-the-partial-tile"])
@pytest.mark.parametrize(
    "parts", [("logged_at",), ("record",), ("logged_at", "record"), ("logged_at", "record", "leaf")]
)
def test_an_inclusion_proof_of_an_edited_row_is_chain_broken(
    led: Ledger, full_tile: bool, parts: tuple[str]
) -> None:
    """Regression (f3): the proof took its leaf from the stored full tile and its record from the row
    unchecked: 200 over a rewritten record (and its receipt signed too)."""
    n = 300 if full_tile else 20
    _fill(led, n)
    led.checkpoint()  # the full tile 0/000 is stored with it (300 entries)
    target = led.get_seq(7)
    before = led.inclusion(target.entry_id)
    record = base64.b64decode(before["record"])
    assert hashlib.sha256(b"\x00" + record).hexdigest() == before["leaf_hash"]
    _tamper(led, 7, *parts)
    with pytest.raises(LedgerError) as got:
        led.inclusion(target.entry_id)
    assert got.value.code in ("chain-broken", "log-inconsistent"), got.value.message
    if full_tile:  # an entry of an unedited row under the stored tile still gets its proof (in the partial
        # tile, every leaf of it is read from its row and checked: no proof of it is served)
        ok = led.inclusion(led.get_seq(9).entry_id)
        assert ok["leaf_index"] == 9


def test_an_inclusion_proof_over_http_of_an_edited_record_is_500(tmp_path: Path) -> None:
    """Regression (f3, over HTTP): GET /v1/proofs/inclusion answered 200 with the rewritten record."""
    led = Ledger.init(tmp_path / "home")
    try:
        _fill(led, 300)
        led.checkpoint()
        target = led.get_seq(7)
        client, _, rd = _client(led)
        with client as c:
            good = c.get(f"/v1/proofs/inclusion/{target.entry_id}", headers=rd)
            assert good.status_code == 200, good.text
            _tamper(led, 7, "logged_at", "record")
            r = c.get(f"/v1/proofs/inclusion/{target.entry_id}", headers=rd)
            assert r.status_code == 500 and r.json()["code"] == "chain-broken", r.text
            assert "record" not in r.json()
            other = c.get(f"/v1/proofs/inclusion/{led.get_seq(9).entry_id}", headers=rd)
            assert other.status_code == 200, other.text
    finally:
        led.close()


# --- f2: the server's own corrupted row met during an append ----------------------------------------------


def test_a_corrupted_key_row_met_during_an_append_is_a_home_fault(led: Ledger) -> None:
    """Regression (f2): an admin-signed row edited behind the log's back, met folding the keyring for an
    append, was a plain integrity refusal (HTTP 422: the collector dropped its envelope)."""
    _fill(led, 4)
    _tamper(led, 1, "logged_at")
    fresh = Ledger.open(led.home_path, database_url=str(led.engine.url.render_as_string(hide_password=False)))
    try:
        with pytest.raises(LedgerError) as got:
            fresh.append([_envelope(fresh, "after the edit")])
        assert isinstance(got.value, ChainBrokenError), got.value.message  # an integrity error, HTTP 500
        assert "seq 1" in got.value.message and "logged_at '2020-01-01" in got.value.message
    finally:
        fresh.close()


def _served_row(s: Setup, entry_id: str) -> int:
    with s.srv.engine.begin() as conn:
        return int(
            conn.execute(
                sa.text("SELECT seq FROM log_entries WHERE entry_id = :e"), {"e": entry_id}
            ).scalar_one()
        )


def test_a_corrupted_row_of_the_servers_log_keeps_the_collectors_entry_spooled(setup: Setup) -> None:  # noqa: F811
    """Regression (f2): the server answered its own edited (admin-signed) row 422 ``integrity`` and an online
    collect dropped its entry: neither in spool/entries nor spool/refused."""
    s = setup
    _tamper(s.srv, 1, "logged_at")  # the key.enrol of gpu01, signed by the admin key
    server = s.serve()
    try:
        online, spooled = s.record("collected while the server's log is corrupt")
        assert spooled == [online]
        assert s.spooled_ids() == [online] and s.spool.refused_files() == []
        envelope = json.loads(s.spool.entry_files()[0].read_bytes())
        r = httpx.post(f"{s.url}/v1/entries", json=envelope, headers={"Authorization": f"Bearer {s.writer}"})
        assert r.status_code == 500 and r.json()["code"] == "chain-broken", r.text
        assert "seq 1" in r.json()["detail"] and "logged_at '2020-01-01" in r.json()["detail"], r.text
        push = s.push()
        assert push.returncode != 0 and "500" in push.stderr, push.stdout + push.stderr
        assert s.spooled_ids() == [online] and s.spool.refused_files() == []
    finally:
        server.stop()


def test_a_resent_entry_of_an_edited_row_stays_spooled_on_push(setup: Setup) -> None:  # noqa: F811
    """Regression (f1, via ``ledger push``): a spooled entry the server already logged, whose row was since
    back-dated, got a receipt signed over the back-dated time; now a 500 and the entry stays spooled."""
    s = setup
    server = s.serve()
    try:
        entry_id, spooled = s.record("delivered online")
        assert spooled == [] and s.record("delivered after it (the edited row is not the head)")[1] == []
        data = s.srv.get(entry_id).envelope
        s.spool.add_entry(data, entry_id, target=s.recorder().target())
        _tamper(s.srv, _served_row(s, entry_id), "logged_at")
        push = s.push()
        assert push.returncode != 0, push.stdout + push.stderr
        assert "500" in push.stderr and "[chain-broken]" in push.stderr, push.stderr
        assert s.spooled_ids() == [entry_id] and s.spool.refused_files() == []
        kept = [json.loads(line) for line in s.host.home.receipts_path.read_text().splitlines() if line]
        assert BACK not in {k.get("logged_at") for k in kept}  # no receipt of the back-dated time
    finally:
        server.stop()


def test_an_online_refusal_for_good_is_set_aside_never_dropped(setup: Setup) -> None:  # noqa: F811
    """Regression (f2, the collector's side): an entry the server refused for good when sent online was
    raised and kept nowhere; it is set aside in spool/refused beside the server's reason."""
    s = setup
    s.host.new_key("stranger", ["collector"])
    server = s.serve()
    try:
        rec = s.recorder("stranger")
        try:
            with pytest.raises(LedgerError) as got:
                rec.record("note", {"campaign": "c1"}, {"text": "signed by a key the server never enrolled"})
        finally:
            rec.close()
        assert s.spooled_ids() == []
        (refused,) = s.spool.refused_files()
        assert Spool_refusal(s, refused)["code"] == got.value.code
        assert rec.refused and rec.refused[0]["file"] == str(refused)
    finally:
        server.stop()


def test_an_online_refusal_of_the_token_keeps_the_entry_spooled(setup: Setup) -> None:  # noqa: F811
    """Neighbour: a token the server does not take is not the entry's fault: the entry stays in
    spool/entries for a later push (with a token it takes)."""
    s = setup
    server = s.serve()
    try:
        s.writer = "not-a-token-the-server-issued"
        with pytest.raises(LedgerError) as got:
            s.record("sent with a token the server does not know")
        assert got.value.code in ("unauthenticated", "forbidden"), got.value.message
        assert len(s.spooled_ids()) == 1 and s.spool.refused_files() == []
    finally:
        server.stop()


def Spool_refusal(s: Setup, refused: Path) -> dict[str, Any]:
    return s.spool.refusal(refused)
