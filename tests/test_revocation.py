"""Key roles and revocation with an effective time."""

from __future__ import annotations

from datetime import timedelta

import pytest

from ledger.entries import now_utc
from ledger.errors import KeyRevokedError
from ledger.service import Ledger


def test_revoked_key_later_entries_refused_earlier_stay_valid(ledger: Ledger) -> None:
    ledger.new_key("hostA", ["collector"])
    before = ledger.record("note", {"campaign": "c"}, {"text": "before revocation"}, key="hostA")
    ledger.revoke_key("hostA", reason="host reimaged")
    with pytest.raises(KeyRevokedError):
        ledger.record("note", {"campaign": "c"}, {"text": "after revocation"}, key="hostA")
    assert ledger.get(before.entry_id).entry_id == before.entry_id
    assert ledger.verify()


def test_future_revocation_takes_effect_at_its_time(ledger: Ledger) -> None:
    ledger.new_key("hostA", ["collector"])
    at = now_utc() + timedelta(hours=1)
    ledger.revoke_key("hostA", reason="planned rotation", effective_at=at)
    ledger.record("note", {"campaign": "c"}, {"text": "still valid"}, key="hostA")
    with pytest.raises(KeyRevokedError):
        ledger.append(
            [ledger.sign(ledger.make_statement("note", {"campaign": "c"}, {"text": "late"}), "hostA")],
            logged_at=at + timedelta(seconds=1),
        )


def test_granted_role_allows_new_kind(ledger: Ledger) -> None:
    from ledger.errors import RoleError

    ledger.new_key("op", ["collector"])
    first = ledger.record("note", {"campaign": "c"}, {"text": "x"}, key="op")
    with pytest.raises(RoleError):
        ledger.record(
            "supersession",
            {"campaign": "c"},
            {"reason": "fix"},
            key="op",
            refs=[("supersedes", first.entry_id)],
        )
    ledger.grant_key("op", ["operator"])
    ledger.record(
        "supersession", {"campaign": "c"}, {"reason": "fix"}, key="op", refs=[("supersedes", first.entry_id)]
    )
    assert ledger.verify()


def test_back_dated_entry_is_visible_as_such(ledger: Ledger) -> None:
    ledger.new_key("hostA", ["collector"])
    fresh = ledger.record("note", {"campaign": "c"}, {"text": "now"}, key="hostA")
    old = ledger.record(
        "note",
        {"campaign": "c"},
        {"text": "spooled for days"},
        key="hostA",
        collected_at=now_utc() - timedelta(days=3),
    )
    assert ledger.get(fresh.entry_id).to_json()["logged_after_s"] < 60
    assert ledger.get(old.entry_id).to_json()["logged_after_s"] > 3 * 86400 - 60


def test_regression_keyring_fold_resumed_at_last_key_entry(ledger: Ledger) -> None:
    """Each append re-read every entry since the last key.* entry (single appends slowed to ~90/s at 20k)."""
    ledger.new_key("hostA", ["collector"])
    for i in range(5):
        ledger.record("note", {"campaign": "c"}, {"text": f"{i}"}, key="hostA")
    assert ledger.keyring().seq == ledger.size()
