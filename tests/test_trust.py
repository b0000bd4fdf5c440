"""The one trust path (ledger.trust): ingest, verify and the policy answer "may this envelope stand here?"
with the same decision and the same codes."""

from __future__ import annotations

from datetime import timedelta

import pytest

from ledger.entries import format_time, now_utc, parse_time
from ledger.errors import (
    KeyRevokedError,
    RoleError,
    SignatureError,
    UnknownSignerError,
    UntrustedRootError,
)
from ledger.log import entry_id_of
from ledger.policy.rules import TRUST_RULES, Rule, trust_rejection
from ledger.service import Ledger
from ledger.signing import SigningKey, parse_envelope
from ledger.trust import Fault, TrustedLog, trust_problem


def _statement(ledger: Ledger, kind: str = "note", text: str = "x") -> dict:  # type: ignore[type-arg]
    return ledger.make_statement(kind, {"campaign": "c"}, {"text": text})


def test_entry_id_is_made_by_one_function(ledger: Ledger) -> None:
    e = ledger.record("note", {"campaign": "c"}, {"text": "x"}, key=ledger.admin_key_name)
    assert entry_id_of(e.envelope) == e.entry_id
    assert ledger.get(e.entry_id).entry_id == entry_id_of(ledger.get_seq(e.seq).envelope)


def test_trusted_log_replays_a_ledger_in_order(ledger: Ledger) -> None:
    ledger.new_key("hostA", ["collector"])
    ledger.record("note", {"campaign": "c"}, {"text": "x"}, key="hostA")
    trusted = TrustedLog(ledger.root_key_id)
    for row in ledger.iter_rows():
        env = parse_envelope(bytes(row.envelope))
        st = env.statement()
        trusted.admit(row.seq, env, st["kind"], st["payload"], parse_time(row.logged_at))
        trusted.update(row.seq, st["kind"], st["payload"])
    assert trusted.ring.by_name("hostA") is not None
    assert trusted.ring.seq == ledger.size()


def test_genesis_must_be_the_root_enrolling_itself(ledger: Ledger) -> None:
    other = SigningKey.generate("other")
    trusted = TrustedLog(ledger.root_key_id)
    st = ledger.make_statement(
        "key.enrol",
        {"key": "other"},
        {"name": "other", "public_key": other.public.b64, "key_id": other.key_id, "roles": ["admin"]},
    )
    env = ledger.sign(st, other)
    with pytest.raises(UntrustedRootError) as info:
        trusted.admit(0, env, st["kind"], st["payload"], now_utc())
    assert info.value.code == "untrusted-root"
    # the order-only half (what `ledger verify` runs after checking signatures per entry) says the same
    with pytest.raises(UntrustedRootError):
        trusted.authorise(0, env.signer, st["kind"], st["payload"], now_utc())


def test_ingest_raises_what_the_trust_path_decides(ledger: Ledger) -> None:
    """Each fault: ingest's error code is TrustProblem.error()'s, and the policy's rule is TRUST_RULES'."""
    ledger.new_key("hostA", ["collector"])
    ledger.new_key("gone", ["collector"])
    ledger.revoke_key("gone", reason="reimaged")
    stranger = SigningKey.generate("stranger")
    grant = ledger.make_statement(
        "key.grant", {"key": "hostA"}, {"key_id": ledger.key_record("hostA").key_id, "roles": ["admin"]}
    )
    cases = [
        (
            ledger.sign(_statement(ledger), stranger),
            UnknownSignerError,
            Fault.UNKNOWN_SIGNER,
            Rule.UNKNOWN_SIGNER,
        ),
        (ledger.sign(_statement(ledger), "gone"), KeyRevokedError, Fault.REVOKED, Rule.REVOKED),
        (ledger.sign(grant, "hostA"), RoleError, Fault.WRONG_ROLE, Rule.WRONG_ROLE),
    ]
    for env, error, fault, rule in cases:
        with pytest.raises(error) as info:
            ledger.append([env])
        at = now_utc()
        problem = trust_problem(ledger.keyring(), env.signer, env.statement()["kind"], at)
        assert problem is not None and problem.fault is fault
        assert problem.error().code == info.value.code
        assert TRUST_RULES[problem.fault] is rule
        assert trust_rejection(problem, "2026-01-01T00:00:00.000000Z")[0] is rule


def test_validity_window_is_one_rule_with_two_faults(ledger: Ledger) -> None:
    key = SigningKey.generate("temp")
    until = now_utc() + timedelta(hours=1)
    ledger.enrol_key("temp", key.public.b64, ["collector"], valid_until=format_time(until))
    ring = ledger.keyring()
    assert trust_problem(ring, key.key_id, "note", until - timedelta(seconds=1)) is None
    late = trust_problem(ring, key.key_id, "note", until)
    assert late is not None and late.fault is Fault.EXPIRED
    assert isinstance(late.error(), KeyRevokedError)
    assert trust_rejection(late, "t")[0] is Rule.OUTSIDE_VALIDITY
    env = ledger.sign(_statement(ledger), key)
    with pytest.raises(KeyRevokedError):
        ledger.append([env], logged_at=until + timedelta(seconds=1))


def test_a_policy_may_name_its_own_roles(ledger: Ledger) -> None:
    ledger.new_key("rev", ["reviewer"])
    rec = ledger.key_record("rev")
    assert trust_problem(ledger.keyring(), rec.key_id, "note", now_utc()) is None
    problem = trust_problem(ledger.keyring(), rec.key_id, "note", now_utc(), allowed=["operator"])
    assert problem is not None and problem.fault is Fault.WRONG_ROLE
    assert "operator" in problem.error().message


def test_a_forged_signature_is_refused_by_admit_and_ingest(ledger: Ledger) -> None:
    ledger.new_key("hostA", ["collector"])
    genuine = ledger.sign(_statement(ledger), "hostA")
    impostor = SigningKey.generate("hostA")
    signed = ledger.sign(_statement(ledger, text="other"), impostor).to_json()
    forged = parse_envelope({**signed, "signatures": [{**signed["signatures"][0], "keyid": genuine.signer}]})
    trusted = TrustedLog(ledger.root_key_id, ledger.keyring().copy())
    seq = ledger.size()
    st = genuine.statement()
    trusted.admit(seq, genuine, st["kind"], st["payload"], now_utc())
    st = forged.statement()
    with pytest.raises(SignatureError) as admitted:
        trusted.admit(seq, forged, st["kind"], st["payload"], now_utc())
    with pytest.raises(SignatureError) as ingested:
        ledger.append([forged])
    assert admitted.value.code == ingested.value.code == "bad-signature"
