"""The keyring a verdict trusts is folded from the key entries as the log committed them.

Commit a16d548 checked every evidence row the policy reads against its Merkle leaf, but not the rows the
keyring is folded from (``key_rows``, folded by ``replay_keys``): a raw-SQL edit of a ``key.*`` row — its
``logged_at`` back- or forward-dated, two key rows' envelopes or entries swapped, a revocation's envelope
replaced by another key's, a ``key.revoke`` row deleted — changed (or could change) which signers the
verdict and the routing gate trust, and neither refused. Now each key row is checked against its leaf
(``ledger.reads.committed_rows``, the evidence rows' check), its envelope against its entry id, and no seq
below the size folded may be missing (``ledger.reads.committed_key_rows``): exit 2, ``error[integrity]``.

Every test runs on routing seed 004 (a QUALIFIED embed model on gpu-box-1, its verdict signed by the
reviewer key and recorded at 2026-09-10T11:00Z) on SQLite (the fast reader, and the service where named)
and on PostgreSQL (the service; in CI its absence fails), tampering with raw SQL, triggers dropped — the
fixtures and helpers of ``tests/test_routing_committed_record.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa

from ledger import reads
from ledger.entries import parse_time
from ledger.errors import IntegrityError
from ledger.home import Home
from ledger.keyring import Keyring
from ledger.reads import SqlitePolicyLedger, check_extends_held
from ledger.signing import SigningKey
from ledger.trust import replay_keys
from tests import test_routing_committed_record as committed
from tests.conftest import CliResult
from tests.test_routing_committed_record import (
    NOW,
    REVOKED_FROM,
    Seeded,
    _gate,
    _refused_as_integrity,
    _revoke_reviewer_from,
    _verdict,
)

pg_databases = committed.pg_databases
seeded = committed.seeded
run = committed.run

Run = Callable[..., CliResult]
LOGGED = "2026-09-10T12:00:00.000000Z"  # what ``Seeded.append`` logs every entry at
SUBJECT = {"campaign": "router-embed"}


@pytest.fixture(params=["range", "table"])
def counted(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """How the gap check counts the rows below the size: the range (a small one, and PostgreSQL's way), or
    the whole table (SQLite, beyond ``RANGE_COUNTED`` seqs: its btree count, with min and max)."""
    if request.param == "table":
        monkeypatch.setattr(reads, "RANGE_COUNTED", 0)
    return str(request.param)


def _enrol_temp(s: Seeded) -> SigningKey:
    """A second key, enrolled by the admin (logged at 12:00, after the seed)."""
    key = SigningKey.generate("temp")
    pub = key.public
    s.names["temp-enrol"] = s.append(
        "key.enrol",
        {"key": "temp"},
        {"name": "temp", "public_key": pub.b64, "key_id": pub.key_id, "roles": ["operator"]},
        s.ledger.cfg.admin_key,
    )
    return key


def _revoke(s: Seeded, name: str, effective_at: str, label: str) -> None:
    rec = s.ledger.key_record(name)
    s.names[label] = s.append(
        "key.revoke",
        {"key": rec.name},
        {"key_id": rec.key_id, "effective_at": effective_at, "reason": "stolen"},
        s.ledger.cfg.admin_key,
    )


def _revoked_reviewer(s: Seeded, run: Run) -> int:
    """The reviewer's key (which signed the recorded verdict) revoked from 10:55: the gate refuses the
    route (no trusted verdict), exit 1. Returns the revocation's seq."""
    _revoke_reviewer_from(s, REVOKED_FROM)
    s.names["reviewer-revoke"] = s.ledger.query(kind="key.revoke", limit=1, descending=True)[0].entry_id
    r = _gate(run, s)
    assert r.code == 1 and not r.json()["allowed"] and r.json()["verdict"] is None, r.out + r.err
    return s.seq("reviewer-revoke")


def _row(s: Seeded, seq: int, cols: str) -> Any:
    with s.ledger.engine.begin() as conn:
        return conn.execute(sa.text(f"SELECT {cols} FROM log_entries WHERE seq = :s"), {"s": seq}).one()


def _all_refuse(s: Seeded, run: Run, *words: str) -> None:
    """The routing gate (fast reader on SQLite), its --record (the service), the verdict and the service's
    verdict (what the API answers with) all refuse, exit 2 / IntegrityError, saying ``words``."""
    _refused_as_integrity(_gate(run, s), *words)
    size = s.ledger.size()
    _refused_as_integrity(_gate(run, s, committed.OK, NOW, "--record"), *words)
    assert s.ledger.size() == size  # nothing recorded
    _refused_as_integrity(_verdict(run, s), *words)
    with pytest.raises(IntegrityError) as e:
        s.ledger.evaluate_verdict(SUBJECT)
    for w in words:
        assert w in e.value.message, (w, e.value.message)


# --- a key row edited in place ------------------------------------------------------------------------------


def test_backdated_revocation_row_refused(seeded: Seeded, run: Run) -> None:
    """The revocation row's ``logged_at`` column back-dated: refused against its leaf, naming the column
    and the log time the leaf commits (it was folded as read before)."""
    s = seeded
    seq = _revoked_reviewer(s, run)
    s.ledger.checkpoint()
    backdated = "2026-09-10T10:00:00.000000Z"
    s.tamper(("UPDATE log_entries SET logged_at = :t WHERE seq = :s", {"t": backdated, "s": seq}))
    assert check_extends_held(s.ledger) is not None  # the tree at the held size is intact: not what refuses
    _all_refuse(
        s,
        run,
        f"entry at seq {seq} ({s.names['reviewer-revoke'][:16]})",
        f"logged_at '{backdated}' where the log record its leaf commits says '{LOGGED}'",
    )


def test_forward_dated_key_enrol_row_refused(seeded: Seeded, run: Run) -> None:
    """A key.enrol row's ``logged_at`` forward-dated (the key made to look enrolled later)."""
    s = seeded
    _enrol_temp(s)
    s.append(
        "note", {"host": "another-box"}, {"text": "after"}, "operator"
    )  # the enrolment is not the newest
    assert _gate(run, s).code == 0
    seq, later = s.seq("temp-enrol"), "2026-09-12T00:00:00.000000Z"
    s.tamper(("UPDATE log_entries SET logged_at = :t WHERE seq = :s", {"t": later, "s": seq}))
    _all_refuse(s, run, f"entry at seq {seq}", f"logged_at '{later}' where the log record its leaf commits")


def test_revocation_envelope_replaced_by_another_keys_refused(seeded: Seeded, run: Run) -> None:
    """The attack that changes the verdict: the reviewer's revocation row gets the envelope of another
    key's revocation (signed by the admin, so it folds cleanly): the reviewer would be trusted and the
    route allowed. The leaf commits the row's entry id; its envelope no longer hashes to it."""
    s = seeded
    _enrol_temp(s)
    _revoke(s, "temp", LOGGED, "temp-revoke")
    seq = _revoked_reviewer(s, run)
    other = bytes(_row(s, s.seq("temp-revoke"), "envelope")[0])
    s.tamper(("UPDATE log_entries SET envelope = :v WHERE seq = :s", {"v": other, "s": seq}))
    _all_refuse(
        s,
        run,
        f"entry at seq {seq} ({s.names['reviewer-revoke'][:16]})",
        f"envelope hashes to {s.names['temp-revoke'][:16]}…, not to its entry id",
    )


@pytest.mark.parametrize("what", ["envelope", "entry"])
def test_key_enrol_envelope_swapped_refused(seeded: Seeded, run: Run, what: str) -> None:
    """Two key.enrol rows exchange their envelopes (each key enrolled at the other's position), or their
    whole entries (id, kind, signer, envelope), each keeping its seq, log time, record and leaf."""
    s = seeded
    _enrol_temp(s)
    a, b = s.seq("temp-enrol"), s.ledger.key_record("reviewer").enrolled_seq
    cols = "envelope" if what == "envelope" else "entry_id, kind, signer, envelope"
    rows = {q: _row(s, q, cols) for q in (a, b)}
    sets = ", ".join(f"{c.strip()} = :{c.strip()}" for c in cols.split(","))
    moves: list[tuple[str, dict[str, Any]]] = []
    if what == "entry":  # entry_id is unique: park one first
        moves.append(("UPDATE log_entries SET entry_id = :e WHERE seq = :s", {"e": "0" * 64, "s": a}))
    for to, frm in ((b, a), (a, b)):
        params = dict(zip((c.strip() for c in cols.split(",")), rows[frm], strict=True))
        params["envelope"] = bytes(params["envelope"])
        moves.append((f"UPDATE log_entries SET {sets} WHERE seq = :s", {**params, "s": to}))
    s.tamper(*moves)
    # the gate names the first key row (they are read in seq order); the verdict may meet either first
    # either swapped row names the swap; which the gate reads first is its read order, not the point
    text = _refused_as_integrity(_gate(run, s))
    assert f"entry at seq {a} " in text or f"entry at seq {b} " in text, text
    _all_refuse(
        s, run, "is not as the log committed it", "entry id '" if what == "entry" else "envelope hashes to"
    )


# --- a key row gone -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["past-the-held-checkpoint", "in-a-stored-tile-below-it"])
def test_deleted_key_revoke_row_refused(seeded: Seeded, run: Run, counted: str, where: str) -> None:
    """The reviewer's revocation row DELETEd (with its index rows): the keyring folded without it trusts
    the reviewer again, and the route would be allowed. The log's size is unchanged (the row was not the
    newest) and the tree at the held size is intact — the home holds a checkpoint from before the
    revocation, or one over a full stored tile the row was inside (the tile's stored hashes give the held
    root without the row) — so only the gap refuses it: the seq the log has no row at."""
    s = seeded
    if where == "past-the-held-checkpoint":
        s.ledger.checkpoint()
    seq = _revoked_reviewer(s, run)
    at = parse_time(LOGGED)
    notes = 300 if where == "in-a-stored-tile-below-it" else 1
    envs = [
        s.ledger.sign(
            s.ledger.make_statement("note", {"host": "another-box"}, {"text": f"n{i}"}, collected_at=at),
            "operator",
        )
        for i in range(notes)
    ]
    s.ledger.append(envs, logged_at=at)
    if where == "in-a-stored-tile-below-it":
        s.ledger.checkpoint()
        assert seq < 256 <= s.held_size()
    else:
        assert s.held_size() <= seq
    size = s.ledger.size()
    s.tamper(
        *[
            (f"DELETE FROM {t} WHERE seq = :s", {"s": seq})
            for t in ("entry_subjects", "entry_refs", "entry_artifacts", "log_entries")
        ]
    )
    assert s.ledger.size() == size
    assert check_extends_held(s.ledger) is not None  # the held checkpoint alone does not see it
    _all_refuse(s, run, f"the log has no entry at seq {seq}, below the {size} entries", "deleted")


def test_revocation_row_moved_past_the_log_refused(seeded: Seeded, run: Run) -> None:
    """The revocation row renumbered past the head (out of the size judged, no row deleted): its old seq
    is a gap, and its leaf commits its old index."""
    s = seeded
    s.ledger.checkpoint()
    seq = _revoked_reviewer(s, run)
    s.append("note", {"host": "another-box"}, {"text": "after"}, "operator")
    end = s.ledger.size() + 10
    s.tamper(
        *[
            (f"UPDATE {t} SET seq = :e WHERE seq = :s", {"e": end, "s": seq})
            for t in ("log_entries", "entry_subjects", "entry_refs", "entry_artifacts")
        ]
    )
    # a gap the gate meets (the moved row's old seq, or the head it reads the reference time at): integrity
    _refused_as_integrity(_gate(run, s), "the log has no entry at seq ")
    # the verdict as the log stood just after it: the gap is below that size too
    at = str(seq + 2)
    r = run("--home", str(s.home), "verdict", "-s", "campaign=router-embed", "--at", at, "--json")
    _refused_as_integrity(r, f"no entry at seq {seq}, below the {at} entries")


# --- the neighbour: an honest log ---------------------------------------------------------------------------


def _keys_json(ring: Keyring) -> dict[str, Any]:
    return {k: r.to_json() for k, r in sorted(ring.keys.items())}


def test_honest_key_entries_give_the_same_keyring_and_verdict(seeded: Seeded, run: Run, counted: str) -> None:
    """Key enrolments, a grant and revocations, untouched: the keyring the checked reads fold is the one
    the key entries make (as ``verify`` reads them, unchecked), on the fast reader and the service alike,
    and the verdict and the gate answer as before — allowed while the reviewer's revocation takes effect
    after the verdict was logged, refused (exit 1, not an integrity error) when it took effect before."""
    s = seeded
    _enrol_temp(s)
    s.append(
        "key.grant",
        {"key": "temp"},
        {"key_id": s.ledger.key_record("temp").key_id, "roles": ["reviewer"]},
        s.ledger.cfg.admin_key,
    )
    _revoke(s, "temp", LOGGED, "temp-revoke")
    _revoke(s, "reviewer", "2026-09-10T11:30:00.000000Z", "late-revoke")  # after the verdict: still trusted
    s.ledger.checkpoint()
    size = s.ledger.size()
    with s.ledger.engine.connect() as conn:
        plain = replay_keys(
            Keyring(),
            [(int(r.seq), bytes(r.envelope)) for r in s.ledger.repo.key_entries(conn, 0, size)],
            size,
        )
    assert _keys_json(s.ledger.keyring(at_size=size)) == _keys_json(plain)
    reader = SqlitePolicyLedger.open(Home(s.home))
    if reader is not None:  # SQLite: the fast reader folds the same ring
        try:
            assert _keys_json(reader.keyring(at_size=size)) == _keys_json(plain)
        finally:
            reader.close()
    assert plain.keys[s.ledger.key_record("temp").key_id].roles == {"operator", "reviewer"}
    r = _gate(run, s)
    assert r.code == 0 and r.json()["allowed"], r.out + r.err
    r = _verdict(run, s)
    assert r.code == 0 and r.json()["verdict"] == "QUALIFIED", r.out + r.err
    assert s.ledger.evaluate_verdict(SUBJECT)["verdict"] == "QUALIFIED"
    # an earlier effective time wins: the verdict's signer was revoked before it was logged
    _revoke_reviewer_from(s, REVOKED_FROM)
    r = _gate(run, s)
    assert r.code == 1 and not r.json()["allowed"] and r.json()["verdict"] is None, r.out + r.err
    assert "integrity" not in r.err


def test_a_gap_is_named_whichever_way_the_rows_are_counted(seeded: Seeded, counted: str) -> None:
    """``key_rows`` of both repos over a range with a row deleted from its middle, near its start and at
    its end: the first missing seq is named; the range above the gap reads."""
    s = seeded
    size = s.ledger.size()
    gone = [size // 2, 1]
    s.tamper(*[("DELETE FROM log_entries WHERE seq = :s", {"s": q}) for q in gone])
    reader = SqlitePolicyLedger.open(Home(s.home))
    repos: list[Any] = [s.ledger.repo] if reader is None else [s.ledger.repo, reader.repo]
    try:
        for repo in repos:
            with repo.read() as conn:
                for lo, hi, want in (
                    (0, size, 1),
                    (2, size, size // 2),
                    (size // 2, size // 2 + 1, size // 2),
                ):
                    with pytest.raises(IntegrityError, match=f"no entry at seq {want},"):
                        repo.key_rows(conn, lo, hi)
                repo.key_rows(conn, size // 2 + 1, size)  # no gap above it: reads
                repo.key_rows(conn, 3, 3)  # an empty range
    finally:
        if reader is not None:
            reader.close()


# --- an evidence row's envelope replaced ----------------------------------------------------------


def test_evidence_envelope_replaced_refused(seeded: Seeded, run: Run) -> None:
    """Regression: the P2P-fault note's row got the envelope of another, validly signed note (its entry id,
    log record and leaf kept): the routing gate read the other note's text under the fault note's id and
    place — the NCCL requirement gone — because evidence rows were checked against their leaves but their
    envelopes not against their entry ids (key rows were). Now every row read is."""
    s = seeded
    other_id = s.append("note", {"host": "another-box"}, {"text": "nothing to see"}, "operator")
    assert _gate(run, s).code == 0
    seq = s.seq("p2p-note")
    other = bytes(_row(s, s.ledger.get(other_id).seq, "envelope")[0])
    s.tamper(("UPDATE log_entries SET envelope = :v WHERE seq = :s", {"v": other, "s": seq}))
    _refused_as_integrity(
        _gate(run, s),
        f"entry at seq {seq} ({s.names['p2p-note'][:16]})",
        f"envelope hashes to {other_id[:16]}…, not to its entry id",
    )
    _refused_as_integrity(_verdict(run, s), "envelope hashes to")
