"""A policy's CEL that names an entry field no entry has (``e.paylod.ready``, ``e.colected_at``) is refused at
load, like a misspelled payload field (fix60 left the top-level name of ``e`` unchecked: such a read is
absent, so a rule or check was silently off or failed only where evaluation reached it). The names are
``model.ENTRY_VIEW_FIELDS``, held equal to what ``snapshot.Evidence.view`` builds."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.errors import PolicyError
from ledger.policy.loader import load_policy
from ledger.policy.model import ENTRY_VIEW_FIELDS
from ledger.policy.snapshot import Evidence

QUAL, ACC = "backend-qualification", "evidence-acceptance"
RULE = 'when = "e.derived.operator_stopped && !e.payload.ready"'


def _edit(d: Path, name: str, old: str, new: str) -> None:
    p = d / f"{name}.toml"
    text = p.read_text()
    assert old in text, old
    p.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize(
    ("new", "near"),
    [
        ('when = "e.derived.operator_stopped && !e.paylod.ready"', "payload"),
        ('when = "e.derived.operator_stopped && !e.Payload.ready"', "payload"),
        ('when = "e.derivd.operator_stopped && !e.payload.ready"', "derived"),
        ('when = "e.derived.operator_stopped && has(e.colected_at)"', "collected_at"),
    ],
)
def test_misspelled_entry_field_in_a_rule_stops_at_load(policy_copy: Path, new: str, near: str) -> None:
    load_policy(QUAL, policy_copy)  # the shipped rule loads
    _edit(policy_copy, QUAL, RULE, new)
    with pytest.raises(PolicyError, match="an entry has no field") as e:
        load_policy(QUAL, policy_copy)
    assert f"did you mean {near!r}" in str(e.value) and f"{QUAL}.toml:" in str(e.value)


@pytest.mark.parametrize("name", ["collected_at", "logged_at", "in_subject", "signer", "roles", "kind"])
def test_every_entry_field_may_be_read(policy_copy: Path, name: str) -> None:
    """The neighbour: each real top-level name loads (read behind a guard so the rule's meaning is kept)."""
    new = f'when = "e.derived.operator_stopped && !e.payload.ready && has(e.{name})"'
    _edit(policy_copy, QUAL, RULE, new)
    load_policy(QUAL, policy_copy)


def test_a_misspelled_entry_field_in_the_acceptance_policy_stops_every_policy_that_uses_it(
    policy_copy: Path,
) -> None:
    _edit(policy_copy, ACC, '"engine.launch" = "e.payload.ready', '"engine.launch" = "e.paylaod.ready')
    with pytest.raises(PolicyError, match="an entry has no field 'paylaod'"):
        load_policy(QUAL, policy_copy)


def test_entry_view_fields_are_the_names_the_view_has() -> None:
    """The one list is the view's keys: a field added to the view and not to the list (or dropped from it
    and kept in the list) fails here."""
    statement = {
        "kind": "note",
        "subject": {"campaign": "c"},
        "payload": {"text": "t"},
        "collected_at": "2026-12-06T00:00:00Z",
        "refs": [],
        "artifacts": [],
    }
    e = Evidence(
        seq=0,
        id="0" * 64,
        kind="note",
        signer="k",
        logged_at="2026-12-06T00:00:01Z",
        statement=statement,
        payload_type="application/vnd.in-toto+json",
        payload_bytes=b"{}",
        signature=b"",
    )
    e.set_derived({})
    assert tuple(e.view()) == ENTRY_VIEW_FIELDS
