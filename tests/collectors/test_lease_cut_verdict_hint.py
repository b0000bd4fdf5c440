"""The collector's own verdict hint (printed where the policy's verdict cannot be derived, entries spooled for
a server) said NOT QUALIFIED — SEMANTIC QUALITY for a harness run its own lease cut, which the policy judges
INCONCLUSIVE (`harness-lease-expired`, audit 50 f1): the hint follows the policy — unless the engine failed
something before the cut that already decides the gate (the harness's reason then says so)."""

from __future__ import annotations

import pytest

from ledger.collectors.campaign import CampaignResult, GateOutcome

WORDS = {"ready-control": "NOT QUALIFIED — CONTROL", "semantic": "NOT QUALIFIED — SEMANTIC QUALITY"}


def _result(*gates: GateOutcome) -> CampaignResult:
    return CampaignResult("c", "j", "e", state="succeeded", gates=list(gates), verdict_words=dict(WORDS))


def test_a_harness_run_its_lease_cut_hints_inconclusive_not_semantic_quality() -> None:
    r = _result(GateOutcome("ready-control", "passed"), GateOutcome("semantic", "failed", undecided=True))
    assert r.verdict_hint == "INCONCLUSIVE"


@pytest.mark.parametrize("undecided", [False, None])
def test_a_failed_harness_run_the_engine_decided_keeps_its_verdict_words(undecided: bool | None) -> None:
    gate = (
        GateOutcome("semantic", "failed")
        if undecided is None
        else GateOutcome("semantic", "failed", undecided=False)
    )
    assert _result(GateOutcome("ready-control", "passed"), gate).verdict_hint == WORDS["semantic"]


def test_an_earlier_failed_gate_still_decides_before_a_cut_harness() -> None:
    r = _result(GateOutcome("ready-control", "failed"), GateOutcome("semantic", "failed", undecided=True))
    assert r.verdict_hint == WORDS["ready-control"]
