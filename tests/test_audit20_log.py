"""Audit 20, the log's record and its receipts: what an independent audit found, as regressions.

f1. A stored entry whose envelope no longer parses (rewritten by raw SQL) was answered 400 "send strict JSON"
    (blaming the reader), and `ledger audit` (local and --server) and `ledger verify --receipts` stopped at it
    with exit 2, checking no other receipt. Now such a row is an integrity error (500, `chain-broken`) naming
    the entry, and the audit reports it as that receipt's problem and goes on with the others.
f2. `audit_server` can compare the signed record with what the server shows its readers
    (`GET /v1/entries/{id}`: index, logged_at, kind, signer), as a local audit compares the row's columns.
f3. `audit --server` grouped and de-duplicated receipts by their unsigned JSON fields: an edited `origin` set
    a receipt aside, an edited `entry_id` de-duplicated it away, and a removed receipts file was "ok: 0
    receipts". Now receipts are told apart by their signed note and record, an unsigned field that disagrees
    is a problem, and no receipt of a log this home pinned (or of its own log) is `receipts-unchecked`.
f4. Tile levels `00`, `+0`, `0.0`, `%30%30` were served (C2SP: no leading zeroes); now refused like a bad
    index.
f6. `ledger proof verify` took a leaf_index of 3.9 or "3" (int() coercion) and ignored a tree_size that is
    not the checkpoint's; both are refused, naming the field.

Each has its neighbours: the honest case passes, and a field dropped, mistyped or renamed fails closed.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from ledger.api.app import create_app
from ledger.api.settings import ApiSettings
from ledger.errors import (
    ChainBrokenError,
    EntryNotFoundError,
    ProofError,
    ReceiptMismatchError,
    RemoteUnavailableError,
)
from ledger.proofs import RECEIPTS_UNCHECKED, audit_receipts, audit_server, verify_proof_document
from ledger.service import Ledger
from ledger.tokens import create_token
from tests.conftest import CliResult
from tests.reliability.test_receipts import _drop_triggers
from tests.test_receipts_and_audit_findings import InProcessServer, _recorder

Cli = Callable[..., CliResult]


def _ok(r: CliResult) -> CliResult:
    assert r.code == 0, r.out + r.err
    return r


def _recanonicalise(led: Ledger, seq: int) -> str:
    """The operator rewrites entry ``seq``'s statement as non-canonical JSON (the same statement, spaced);
    returns its entry id."""
    with led.engine.begin() as conn:
        _drop_triggers(conn)
        eid, env = conn.execute(
            sa.text("SELECT entry_id, envelope FROM log_entries WHERE seq = :s"), {"s": seq}
        ).one()
        e = json.loads(bytes(env))
        st = json.loads(base64.b64decode(e["payload"]))
        e["payload"] = base64.b64encode(json.dumps(st).encode()).decode()
        new = json.dumps(e, separators=(",", ":"), sort_keys=True).encode()
        conn.execute(sa.text("UPDATE log_entries SET envelope = :e WHERE seq = :s"), {"e": new, "s": seq})
    return str(eid)


def _delete(led: Ledger, seq: int) -> None:
    with led.engine.begin() as conn:
        _drop_triggers(conn)
        for table in ("entry_subjects", "entry_refs", "entry_artifacts", "log_entries"):
            conn.execute(sa.text(f"DELETE FROM {table} WHERE seq = :s"), {"s": seq})
        conn.execute(sa.text("DELETE FROM checkpoints WHERE size > :s"), {"s": seq})
        conn.execute(sa.text("DELETE FROM tiles"))


@pytest.fixture
def sent(tmp_path: Path) -> Any:
    """(server ledger, host ledger, the ids the host appended to it, the host's kept receipts)."""
    server = Ledger.init(tmp_path / "server")
    host = Ledger.init(tmp_path / "gpu-host")
    host.new_key("gpu01", ["collector"])
    server.enrol_key("gpu01", host.signing_key("gpu01").public.b64, ["collector"])
    rec = _recorder(host, InProcessServer(server))
    ids = [rec.record("note", {"campaign": "c"}, {"text": f"#{i}"}) for i in range(3)]
    yield server, host, ids, host.home.receipts()
    host.close()
    server.close()


def _audit(server: Ledger, receipts: list[dict[str, Any]], **kw: Any) -> Any:
    return audit_server(
        receipts,
        kw.pop("fetch", InProcessServer(server).inclusion),
        server="http://log.test",
        served_origin=server.origin,
        served_vkey=server.verifier_key(),
        **{"public_key": server.verifier_key(), **kw},
    )


def _codes(report: Any) -> list[tuple[str | None, str]]:
    return [(p["entry_id"], p["code"]) for p in report.problems]


# --- f1: a corrupt stored entry --------------------------------------------------------------------------


def test_a_corrupt_stored_entry_is_an_integrity_error_not_the_readers(sent: Any) -> None:
    server, _host, ids, _receipts = sent
    bad = _recanonicalise(server, server.get(ids[0]).seq)
    with pytest.raises(ChainBrokenError, match=f"stored entry {bad}.*non-canonical-json"):
        server.get(bad)
    token, _ = create_token(server.engine, "r", "reader")
    app = create_app(ApiSettings(home=str(server.home_path)), ledger=server)
    with TestClient(app) as c:
        h = {"Authorization": f"Bearer {token}"}
        for path in (f"/v1/proofs/inclusion/{bad}", f"/v1/entries/{bad}"):
            r = c.get(path, headers=h)
            assert r.status_code == 500, (path, r.text)
            body = r.json()
            assert body["code"] == "chain-broken" and bad in body["detail"]
            assert "send strict JSON" not in body["hint"]
        assert c.get(f"/v1/entries/{ids[1]}", headers=h).status_code == 200  # the neighbour: intact


def test_audit_server_goes_on_past_an_entry_the_log_cannot_prove(sent: Any) -> None:
    """The f1 repro: entry 2 corrupt (the server answers an error for it) and the newest entry deleted."""
    server, _host, ids, receipts = sent
    _recanonicalise(server, server.get(ids[0]).seq)
    _delete(server, server.get(ids[2]).seq)
    report = _audit(server, receipts)
    assert not report and report.receipts == 3
    assert _codes(report) == [(ids[0], ChainBrokenError.code), (ids[2], ReceiptMismatchError.code)]

    def unreachable(entry_id: str) -> dict[str, Any] | None:  # a 5xx, as LedgerClient raises it
        if entry_id == ids[1]:
            raise RemoteUnavailableError("server answered 500: [chain-broken] …")
        return InProcessServer(server).inclusion(entry_id)

    report = _audit(server, receipts, fetch=unreachable)
    assert (ids[1], RemoteUnavailableError.code) in _codes(report) and report.receipts == 3


def test_local_audit_and_verify_receipts_go_on_past_a_corrupt_entry(cli: Cli, home: Path) -> None:
    _ok(cli("init"))
    _ok(cli("keys", "new", "c", "--role", "collector"))
    for i in range(3):
        _ok(cli("record", "note", "--key", "c", "-s", "campaign=own", "--data", json.dumps({"text": str(i)})))
    _ok(cli("audit"))  # the neighbour: untouched
    led = Ledger.open(home)
    try:
        bad = _recanonicalise(led, 2)
    finally:
        led.close()
    r = cli("audit", "--json")
    assert r.code == 1, r.out + r.err
    report = r.json()
    assert [(p["entry_id"], p["code"]) for p in report["problems"]] == [(bad, ChainBrokenError.code)]
    assert report["receipts"] == 5
    r = cli("verify", "--receipts")
    assert r.code == 1, r.out + r.err
    assert "[entry-id-mismatch] seq 2" in r.err and f"[chain-broken] index 2 {bad[:16]}" in r.err


# --- f3: receipts told apart by what the log signed ------------------------------------------------------


def test_an_edited_outer_origin_does_not_set_a_receipt_aside(sent: Any) -> None:
    """The f3 (b) repro: the newest entry deleted and its receipt's JSON origin edited to another log."""
    server, _host, ids, receipts = sent
    _delete(server, server.get(ids[2]).seq)
    receipts[2] = {**receipts[2], "origin": "x"}
    report = _audit(server, receipts)
    assert report.other_logs == 0 and report.receipts == 3
    assert _codes(report) == [(ids[2], ReceiptMismatchError.code)] * 2
    assert "origin 'x'" in report.problems[0]["message"]
    assert "no longer has entry" in report.problems[1]["message"]


def test_an_edited_outer_entry_id_is_not_deduplicated_away(sent: Any) -> None:
    """The f3 (c) repro: a receipt's JSON entry_id set to another receipt's."""
    server, _host, ids, receipts = sent
    edited = [{**receipts[0], "entry_id": ids[1]}, receipts[1]]
    report = _audit(server, edited)
    assert report.receipts == 2 and _codes(report) == [(ids[0], ReceiptMismatchError.code)]
    assert f"entry_id {ids[1]!r}" in report.problems[0]["message"]
    assert _audit(server, [receipts[1], receipts[1]]).receipts == 1  # the neighbour: an exact copy, once


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda d: {**d, "index": str(d["index"])}, id="index-mistyped"),
        pytest.param(lambda d: {**d, "index": d["index"] + 1}, id="index-moved"),
        pytest.param(lambda d: {**d, "logged_at": "2020-01-01T00:00:00Z"}, id="logged-at-moved"),
        pytest.param(lambda d: {k: v for k, v in d.items() if k != "origin"}, id="origin-dropped"),
        pytest.param(lambda d: {**d, "type": "receipts"}, id="type-renamed"),
        pytest.param(lambda d: {k: v for k, v in d.items() if k != "entry_id"}, id="entry-id-dropped"),
    ],
)
def test_an_edited_outer_field_is_a_problem_and_the_entry_still_checked(
    sent: Any, edit: Callable[[dict[str, Any]], dict[str, Any]]
) -> None:
    server, _host, ids, receipts = sent
    _delete(server, server.get(ids[2]).seq)
    report = _audit(server, [*receipts[:2], edit(receipts[2])])
    assert report.receipts == 3 and report.other_logs == 0
    assert _codes(report) == [(ids[2], ReceiptMismatchError.code)] * 2
    assert "unsigned fields disagree" in report.problems[0]["message"]


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda d: {k: v for k, v in d.items() if k != "note"}, id="note-dropped"),
        pytest.param(lambda d: {k: v for k, v in d.items() if k not in ("note", "origin")}, id="anonymous"),
        pytest.param(lambda d: {**d, "record": d["record"][:-4] + "AAA="}, id="record-edited"),
        pytest.param(lambda d: {**d, "note": d["note"].replace("\n\n", "\n\nx")}, id="signature-renamed"),
    ],
)
def test_a_receipt_the_log_did_not_sign_is_a_problem(
    sent: Any, edit: Callable[[dict[str, Any]], dict[str, Any]]
) -> None:
    server, _host, _ids, receipts = sent
    report = _audit(server, [*receipts[:2], edit(receipts[2])])
    assert not report and report.other_logs == 0 and report.receipts == 3
    assert "not one this log signed" in report.problems[0]["message"]


def test_a_receipts_file_removed_for_a_pinned_server_is_not_ok(sent: Any) -> None:
    """The f3 (a) repro: no receipts kept, the key of that server pinned (recorded when the home appended)."""
    server, _host, _ids, _receipts = sent
    report = _audit(server, [])
    assert _codes(report) == [(None, RECEIPTS_UNCHECKED)] and report.receipts == 0
    assert "HOME/receipts.jsonl removed" in report.problems[0]["message"]
    fresh = _audit(server, [], public_key=None)  # the neighbour: a home that never appended there
    assert fresh and fresh.receipts == 0
    assert audit_receipts([], None, lambda _e: None, origin="o")  # nothing expected, nothing kept: ok
    report = audit_receipts([], None, lambda _e: None, origin="o", expected="pinned")
    assert _codes(report) == [(None, RECEIPTS_UNCHECKED)]


def test_a_receipts_file_removed_from_a_home_is_not_ok(cli: Cli, home: Path) -> None:
    _ok(cli("init"))
    report = _ok(cli("audit", "--json")).json()  # the neighbour: a fresh home, its genesis receipt
    assert report["receipts"] == 1
    (home / "receipts.jsonl").unlink()
    r = cli("audit", "--json")
    assert r.code == 1, r.out
    assert [p["code"] for p in r.json()["problems"]] == [RECEIPTS_UNCHECKED]
    (home / "receipts.jsonl").write_text("")
    assert cli("audit").code == 1
    assert cli("verify", "--receipts").code == 1


# --- f2: what the server shows its readers ---------------------------------------------------------------


def _shown(server: Ledger, **changes: Any) -> Callable[[str], dict[str, Any] | None]:
    def shown(entry_id: str) -> dict[str, Any] | None:
        try:
            entry = server.get(entry_id).to_json()
        except EntryNotFoundError:
            return None
        for k, v in changes.items():
            if v is None:
                entry.pop(k, None)
            else:
                entry[k] = v
        return entry

    return shown


def test_audit_server_compares_what_the_server_shows_readers(sent: Any) -> None:
    server, _host, ids, receipts = sent
    assert _audit(server, receipts, shown=_shown(server))  # the neighbour: honest
    report = _audit(server, receipts, shown=_shown(server, logged_at="2026-01-01T00:00:00Z"))
    assert _codes(report) == [(i, ReceiptMismatchError.code) for i in ids]
    assert "logged 2026-01-01T00:00:00Z" in report.problems[0]["message"]
    for changes in ({"seq": "3"}, {"logged_at": None}, {"signer": None}, {"kind": 1}):
        report = _audit(server, receipts, shown=_shown(server, **changes))
        assert _codes(report) == [(i, ReceiptMismatchError.code) for i in ids], changes


# --- f4: tile levels as the spec writes them -------------------------------------------------------------


@pytest.mark.parametrize("level", ["00", "+0", "0.0", "%30%30", "01", "-0", "64", "1e0", "%200", "0x0", "٠"])
def test_a_malformed_tile_level_is_refused(sent: Any, level: str) -> None:
    server, _host, _ids, _receipts = sent
    server.publish_checkpoint(wait=True)
    token, _ = create_token(server.engine, "r", "reader")
    with TestClient(create_app(ApiSettings(home=str(server.home_path)), ledger=server)) as c:
        h = {"Authorization": f"Bearer {token}"}
        assert c.get("/tile/0/000.p/5", headers=h).status_code == 200  # the neighbour
        bad_index = c.get("/tile/0/0000.p/5", headers=h).status_code
        r = c.get(f"/tile/{level}/000.p/5", headers=h)
        assert r.status_code == bad_index == 422, r.text
        assert r.headers["cache-control"] == "no-store"


# --- f6: a proof document's integers are integers --------------------------------------------------------


@pytest.fixture
def proof(sent: Any) -> tuple[dict[str, Any], str]:
    server, _host, ids, _receipts = sent
    return server.inclusion(ids[1]), server.verifier_key()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("leaf_index", 3.9),
        ("leaf_index", "3"),
        ("leaf_index", True),
        ("leaf_index", None),
        ("leaf_index", 3.0),
        ("tree_size", 999),
        ("tree_size", "5"),
        ("tree_size", None),
        ("tree_size", False),
    ],
)
def test_a_mistyped_or_wrong_proof_field_is_refused(
    proof: tuple[dict[str, Any], str], field: str, value: Any
) -> None:
    doc, vkey = proof
    assert verify_proof_document(doc, vkey)["ok"]  # the neighbour
    if field == "leaf_index" and type(value) is not bool:
        value = value if not isinstance(value, (int, float)) else doc["leaf_index"] + (value % 1)
    with pytest.raises(ProofError, match=field):
        verify_proof_document({**doc, field: value}, vkey)


def test_a_proof_field_dropped_or_renamed(proof: tuple[dict[str, Any], str]) -> None:
    doc, vkey = proof
    assert verify_proof_document({k: v for k, v in doc.items() if k != "tree_size"}, vkey)["ok"]
    leaf = doc["leaf_index"]
    renamed = {**{k: v for k, v in doc.items() if k != "leaf_index"}, "leafIndex": leaf}
    with pytest.raises(ProofError, match="leaf_index"):
        verify_proof_document(renamed, vkey)


def test_proof_verify_refuses_a_mistyped_leaf_index(cli: Cli, tmp_path: Path, sent: Any) -> None:
    """The f6 repro, through `ledger proof verify`."""
    server, _host, ids, _receipts = sent
    doc = server.inclusion(ids[1])
    vkey = tmp_path / "log.vkey"
    vkey.write_text(server.verifier_key())
    path = tmp_path / "p.json"
    for edit, field in (
        ({"leaf_index": doc["leaf_index"] + 0.9}, "leaf_index"),
        ({"leaf_index": str(doc["leaf_index"])}, "leaf_index"),
        ({"tree_size": 999}, "tree_size"),
    ):
        path.write_text(json.dumps({**doc, **edit}))
        r = cli("proof", "verify", str(path), "--public-key", f"@{vkey}")
        assert r.code == 2 and "error[proof-invalid]" in r.err and field in r.err, r.out + r.err
    path.write_text(json.dumps(doc))
    _ok(cli("proof", "verify", str(path), "--public-key", f"@{vkey}"))


def test_a_consistency_proof_states_its_checkpoints_sizes(sent: Any) -> None:
    server, _host, _ids, _receipts = sent
    doc, vkey = server.consistency(2), server.verifier_key()
    assert verify_proof_document(doc, vkey)["ok"]
    for field, value in (("old_size", 3), ("new_size", "5"), ("old_size", 2.0)):
        with pytest.raises(ProofError, match=field):
            verify_proof_document({**doc, field: value}, vkey)
