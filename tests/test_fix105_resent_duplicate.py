"""Regressions of audit 84 (fix105), F2: an envelope the log already holds, re-sent, is its duplicate.

``Ledger._prepare`` ran the ingest rules (``check_ingest``) before the duplicate lookup, so an envelope the
log stored before a newer rule was refused when re-sent (``ledger push`` after a crash) instead of answered
as the duplicate it is: the client set aside "for good" an entry the server holds. An envelope whose entry id
the log holds is now answered ``duplicate=True`` whatever rule came since (the lookup is made only for an
envelope a rule refuses; the append's lock decides: not held there, the refusal stands).
"""

from __future__ import annotations

from typing import Any

import pytest

import ledger.service as service
from ledger.errors import SchemaError
from ledger.service import Ledger

AT = "2026-09-10T11:00:00Z"
# a verdict logged under campaign=bad1 that says it judged campaign=good: refused since fix100
PAYLOAD = {
    "verdict": "QUALIFIED",
    "status": "qualified",
    "policy": {"name": "backend-qualification"},
    "checkpoint": {"size": 1},
    "subject": {"campaign": "good"},
}


def _envelope(led: Ledger, key: str = "admin", **payload: Any) -> Any:
    with pytest.MonkeyPatch.context() as mp:  # built as a ledger before the rule built it
        mp.setattr(service, "check_ingest", lambda st: st)
        st = led.make_statement("verdict", {"campaign": "bad1"}, {**PAYLOAD, **payload}, collected_at=AT)
    return led.sign(st, key)


def _stored_before_the_rule(led: Ledger, env: Any) -> Any:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(service, "check_ingest", lambda st: st)
        return led.append([env])[0]


def test_envelope_stored_before_a_rule_resent_is_answered_as_its_duplicate(ledger: Ledger) -> None:
    env = _envelope(ledger)
    stored = _stored_before_the_rule(ledger, env)
    size = ledger.size()
    for sent in (env, env.canonical(), env.to_json()):
        [again] = ledger.append([sent])
        assert again.duplicate and again.entry_id == stored.entry_id and again.seq == stored.seq
    assert ledger.size() == size


def test_resent_envelope_in_a_batch_with_new_entries(ledger: Ledger) -> None:
    env = _envelope(ledger)
    stored = _stored_before_the_rule(ledger, env)
    note = ledger.sign(ledger.make_statement("note", {"campaign": "bad1"}, {"text": "x"}), "admin")
    got = ledger.append([env, note])
    assert [e.duplicate for e in got] == [True, False] and got[0].entry_id == stored.entry_id


def test_new_envelope_the_rule_refuses_is_still_refused(ledger: Ledger) -> None:
    _stored_before_the_rule(ledger, _envelope(ledger))
    size = ledger.size()
    # the same claim in another envelope (another checkpoint, other counts)
    for env in (_envelope(ledger, checkpoint={"size": 2}), _envelope(ledger, counts={"used": 1})):
        with pytest.raises(SchemaError, match="payload subject names campaign=good"):
            ledger.append([env])
    assert ledger.size() == size


def test_refused_envelope_found_held_but_not_held_in_the_lock_stays_refused(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lookup outside the lock said held (a log that lost it meanwhile, say): the lock decides, and the
    refusal kept from the ingest rule is the answer."""
    env = _envelope(ledger)
    monkeypatch.setattr(ledger.repo, "by_id", lambda entry_id: object())
    size = ledger.size()
    with pytest.raises(SchemaError, match="payload subject names campaign=good"):
        ledger.append([env])
    assert ledger.size() == size


def test_resent_envelope_over_the_api_is_a_duplicate(ledger: Ledger) -> None:
    from fastapi.testclient import TestClient

    from ledger.api.app import create_app
    from ledger.api.settings import ApiSettings

    env = _envelope(ledger)
    stored = _stored_before_the_rule(ledger, env)
    token, _record = ledger.create_token("pusher", "writer")
    app = create_app(ApiSettings(home=str(ledger.home_path)), ledger=ledger)
    with TestClient(app) as client:
        r = client.post("/v1/entries", json=env.to_json(), headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200, r.text
        assert r.json()["duplicate"] is True and r.json()["id"] == stored.entry_id
        # a new envelope the rule refuses is still refused over the API
        other = _envelope(ledger, checkpoint={"size": 3})
        refused = client.post(
            "/v1/entries", json=other.to_json(), headers={"Authorization": f"Bearer {token}"}
        )
        assert refused.status_code == 422 and "payload subject names" in refused.text, refused.text
