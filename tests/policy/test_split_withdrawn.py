"""Audit 75 f1: a campaign split by one mistyped entry (a health probe recorded by hand with
``host=gpu-box-2`` beside a campaign on ``gpu-box-1``) stayed INCONCLUSIVE after that entry was superseded
by another key with its reason — as the split's own detail advises. The split and the claims were judged on
every entry filed under the campaign, withdrawn ones and the supersession itself (filed under the mistyped
entry's subject) included. Now they are judged on the campaign's entries still its evidence
(``verdict._campaign_evidence``): no acting entry (``ACTING_KINDS``), none a withdrawing rule took out;
an entry only withheld from credit (self-superseded) still splits the campaign (fail closed)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from ledger.errors import SchemaError
from tests.policy.test_fail_closed import KEYS, SUBJECT, entry, qualified_entries, rejected, verdict_of

CAMPAIGN_ONLY = {"campaign": SUBJECT["campaign"]}
ODD = {**SUBJECT, "host": "gpu-box-2"}
REASON = "host mistyped; not this campaign's"


def _split_by_typo(key: str | None = None) -> list[dict[str, Any]]:
    """The qualified campaign and one more health probe naming gpu-box-2 (signed by ``key``)."""
    es = qualified_entries()
    p = copy.deepcopy(entry(es, "health"))
    p.update(name="typo-probe", at="2026-09-10T10:01:06Z", subject=dict(ODD))
    if key is not None:
        p["key"] = key
    es.append(p)
    return es


def _superseded(
    es: list[dict[str, Any]],
    *,
    key: str = "operator",
    subject: dict[str, str] | None = None,
    reason: str | None = REASON,
) -> list[dict[str, Any]]:
    payload = {} if reason is None else {"reason": reason}
    es.append(
        {
            "name": "sup",
            "kind": "supersession",
            "key": key,
            "at": "2026-09-10T10:01:07Z",
            "subject": dict(ODD if subject is None else subject),
            "refs": {"supersedes": "typo-probe"},
            "payload": payload,
        }
    )
    return es


def _statuses(v: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["field"], c["status"]) for c in v.get("claims", [])]


def test_the_typo_splits_the_campaign(tmp_path: Path) -> None:
    """Baseline (must still fail): before the supersession, the mistyped probe splits the campaign."""
    v = verdict_of(tmp_path, _split_by_typo(), subject=CAMPAIGN_ONLY)
    assert v["verdict"] == "INCONCLUSIVE"
    assert _statuses(v) == [("host", "split")]
    assert "supersede the entries that name the wrong one" in v["claims"][0]["detail"]


@pytest.mark.parametrize("filed_under", [ODD, SUBJECT], ids=["under-the-typo", "under-the-campaign-host"])
def test_superseding_the_entry_that_splits_the_campaign_clears_the_split(
    tmp_path: Path, filed_under: dict[str, str]
) -> None:
    es = _superseded(_split_by_typo(), subject=filed_under)
    v = verdict_of(tmp_path, copy.deepcopy(es), subject=CAMPAIGN_ONLY)
    assert rejected(v) == {"typo-probe": "superseded"}
    assert v["verdict"] == "QUALIFIED", v.get("claims")
    assert "claims" not in v  # its evidence agrees: answered as the campaign alone
    asked = verdict_of(tmp_path, copy.deepcopy(es), subject={**CAMPAIGN_ONLY, "host": SUBJECT["host"]})
    assert asked["verdict"] == "QUALIFIED", asked.get("claims")
    assert _statuses(asked) == [("host", "holds")]


def test_a_supersession_is_no_entry_of_the_host_it_is_filed_under(tmp_path: Path) -> None:
    """Neighbour: the supersession itself names gpu-box-2 (copied from what it supersedes) and is asked
    about with host=gpu-box-1: it acts on an entry, it is no fact of a machine — the claim holds."""
    es = _superseded(_split_by_typo())
    v = verdict_of(tmp_path, es, subject={**CAMPAIGN_ONLY, "host": SUBJECT["host"]})
    assert _statuses(v) == [("host", "holds")]


def test_a_self_superseded_entry_still_splits_the_campaign(tmp_path: Path) -> None:
    """Neighbour (fail closed): superseded by the key that signed it, the probe is only withheld from
    credit (``self-superseded``): it still names gpu-box-2 as the campaign's evidence — still a split."""
    es = _superseded(_split_by_typo(key="operator"), key="operator")  # an operator's probe, by hand
    v = verdict_of(tmp_path, es, subject=CAMPAIGN_ONLY)
    assert rejected(v) == {"typo-probe": "self-superseded"}
    assert v["verdict"] == "INCONCLUSIVE"
    assert _statuses(v) == [("host", "split")]


def test_a_supersession_without_its_reason_is_refused(tmp_path: Path) -> None:
    """Neighbour: a supersession without a reason withdraws nothing — ingest refuses it."""
    with pytest.raises(SchemaError, match="reason"):
        verdict_of(tmp_path, _superseded(_split_by_typo(), reason=None), subject=CAMPAIGN_ONLY)


@pytest.mark.parametrize("reason", ["", "   "], ids=["empty", "blank"])
def test_a_supersession_with_an_empty_reason_withdraws_nothing(tmp_path: Path, reason: str) -> None:
    """Neighbour: a blank reason is no reason — refused at ingest, or, where stored, in force for nothing:
    the campaign stays split either way."""
    try:
        v = verdict_of(tmp_path, _superseded(_split_by_typo(), reason=reason), subject=CAMPAIGN_ONLY)
    except SchemaError:
        return
    assert "typo-probe" not in rejected(v)
    assert v["verdict"] == "INCONCLUSIVE" and _statuses(v) == [("host", "split")]


def _revoke(es: list[dict[str, Any]], key: str, at: str) -> list[dict[str, Any]]:
    es.append(
        {
            "kind": "key.revoke",
            "at": at,
            "payload": {"key": key, "effective_at": "2026-09-10T10:00:00Z", "reason": "key material leaked"},
        }
    )
    return es


def test_a_supersession_by_a_revoked_key_withdraws_nothing(tmp_path: Path) -> None:
    """Neighbour (must still fail): the supersession's key is revoked effective before it signed (the leak
    found later): the supersession is not trusted, the probe stands, the campaign stays split."""
    keys = {**KEYS, "operator-2": ["operator"]}
    es = _superseded(_split_by_typo(), key="operator-2")
    es = _revoke(es, "operator-2", "2026-09-10T10:01:08Z")
    v = verdict_of(tmp_path, es, subject=CAMPAIGN_ONLY, keys=keys)
    assert rejected(v).get("sup") == "revoked"
    assert "typo-probe" not in rejected(v)
    assert v["verdict"] == "INCONCLUSIVE" and _statuses(v) == [("host", "split")]


def test_an_entry_by_a_revoked_key_is_no_split(tmp_path: Path) -> None:
    """Neighbour: the odd probe signed after its key's revocation is no evidence of the campaign at all
    (``revoked`` withdraws): it splits nothing."""
    keys = {**KEYS, "collector-2": ["collector"]}
    es = _revoke(_split_by_typo(key="collector-2"), "collector-2", "2026-09-10T10:01:07Z")
    v = verdict_of(tmp_path, es, subject=CAMPAIGN_ONLY, keys=keys)
    assert rejected(v) == {"typo-probe": "revoked"}
    assert v["verdict"] == "QUALIFIED", v.get("claims")
    assert "claims" not in v


def test_superseding_the_right_entry_keeps_the_split(tmp_path: Path) -> None:
    """Neighbour (must still fail): superseding some other probe of the campaign leaves the mistyped one
    standing: still a split."""
    es = _split_by_typo()
    es.append(
        {
            "name": "sup",
            "kind": "supersession",
            "key": "operator",
            "at": "2026-09-10T10:01:07Z",
            "subject": dict(SUBJECT),
            "refs": {"supersedes": "health"},
            "payload": {"reason": REASON},
        }
    )
    v = verdict_of(tmp_path, es, subject=CAMPAIGN_ONLY)
    assert rejected(v).get("health") == "superseded" and "typo-probe" not in rejected(v)
    assert ("host", "split") in _statuses(v)


@pytest.mark.parametrize("superseded", [False, True], ids=["standing", "superseded"])
def test_a_host_probe_of_another_host_splits_until_superseded(tmp_path: Path, superseded: bool) -> None:
    """Neighbour: a host probe of gpu-box-2 filed under the campaign is another host's fact (``other-host``:
    not credited) — and the very disagreement a split reports: it still splits the campaign (fail closed),
    until another key supersedes it with its reason."""
    es = qualified_entries()
    p = copy.deepcopy(entry(es, "host"))
    p.update(name="typo-probe", at="2026-09-10T10:01:06Z", subject=dict(ODD))
    es.append(p)
    if superseded:
        es = _superseded(es)
    v = verdict_of(tmp_path, es, subject=CAMPAIGN_ONLY)
    assert rejected(v) == {"typo-probe": "superseded" if superseded else "other-host"}
    if superseded:
        assert v["verdict"] == "QUALIFIED" and "claims" not in v
    else:
        assert v["verdict"] == "INCONCLUSIVE" and _statuses(v) == [("host", "split")]
