"""Audit 74 f1: a campaign whose engine ran on a second host — its launch, probes and harness results name
``host=gpu-box-2`` while its job, host probe and pin name ``gpu-box-1`` — was QUALIFIED when asked about the
campaign alone: host-prerequisites and model-pinned passed on one machine's facts, every other gate ran on
another. Since the campaign is the unit of a verdict (fix 71), its own entries must agree on the route's
fields (``verdict.SPLIT_FIELDS``: backend, model, host — a host by ``host_key``): where they name two values
the verdict is not QUALIFIED (INCONCLUSIVE, a ``split`` item naming both values and the entries)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.policy.verdict import SPLIT_FIELDS
from tests.policy.test_fail_closed import SUBJECT, entry, qualified_entries, verdict_of

CAMPAIGN_ONLY = {"campaign": SUBJECT["campaign"]}
RAN_ELSEWHERE = ("launch", "health", "models", "completion", "structured", "sequential")


def _moved(field: str, value: str, names: tuple[str, ...] = RAN_ELSEWHERE) -> list[dict[str, object]]:
    es = qualified_entries()
    for name in names:
        e = entry(es, name)
        e["subject"] = {**SUBJECT, field: value}
    return es


def test_a_campaign_whose_entries_name_two_hosts_is_not_qualified(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, _moved("host", "gpu-box-2"), subject=CAMPAIGN_ONLY)
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    [split] = [c for c in v["claims"] if c["status"] == "split"]
    assert split["field"] == "host" and "gpu-box-1" in split["detail"] and "gpu-box-2" in split["detail"]
    assert {c["value"] for c in split["entries"]} == {"gpu-box-1", "gpu-box-2"}


@pytest.mark.parametrize(("field", "value"), [("model", "m-8"), ("backend", "sglang")])
def test_a_campaign_whose_entries_name_two_models_or_backends_is_not_qualified(
    tmp_path: Path, field: str, value: str
) -> None:
    v = verdict_of(tmp_path, _moved(field, value, ("completion",)), subject=CAMPAIGN_ONLY)
    assert v["verdict"] != "QUALIFIED", v["gates"]
    assert [c["field"] for c in v.get("claims", []) if c["status"] == "split"] == [field]


def test_one_host_in_two_spellings_is_one_host(tmp_path: Path) -> None:
    """Neighbour: hosts compare by host_key (case), so GPU-BOX-1 beside gpu-box-1 is no split."""
    v = verdict_of(tmp_path, _moved("host", "GPU-BOX-1"), subject=CAMPAIGN_ONLY)
    assert v["verdict"] == "QUALIFIED", v.get("claims")
    assert "claims" not in v  # the campaign asked alone, its entries agreeing: the result as before


def test_entries_that_leave_the_host_out_are_no_split(tmp_path: Path) -> None:
    """Neighbour: an entry that names no host says nothing of another machine (field dropped)."""
    es = qualified_entries()
    for name in RAN_ELSEWHERE:
        entry(es, name)["subject"] = {k: v for k, v in SUBJECT.items() if k != "host"}
    v = verdict_of(tmp_path, es, subject=CAMPAIGN_ONLY)
    assert v["verdict"] == "QUALIFIED", v.get("claims")


def test_a_split_is_reported_beside_the_claims_asked(tmp_path: Path) -> None:
    """Neighbour: asked with a host, the host is a contradicted claim; a model split the question does not
    ask is still reported (and keeps the verdict from QUALIFIED)."""
    es = _moved("model", "m-8", ("completion",))
    v = verdict_of(tmp_path, es, subject={**CAMPAIGN_ONLY, "host": SUBJECT["host"]})
    assert v["verdict"] != "QUALIFIED"
    statuses = {(c["field"], c["status"]) for c in v["claims"]}
    assert ("host", "holds") in statuses and ("model", "split") in statuses


def test_the_split_fields_are_the_route_fields() -> None:
    from ledger.policy.verdict import IDENTITY_FIELDS

    assert set(SPLIT_FIELDS) <= set(IDENTITY_FIELDS)
    assert SPLIT_FIELDS == ("backend", "model", "host")
