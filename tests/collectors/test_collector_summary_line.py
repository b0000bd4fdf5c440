"""`ledger collect run` prints one verdict: the policy's.

Regression: after a SIGSEGV mid-benchmark the summary printed "collector gates: NOT QUALIFIED — PERFORMANCE"
(the collector's word for its failed benchmark step) beside "policy verdict: NOT QUALIFIED — RUNTIME
RELIABILITY": two verdict words for one run. Where the policy's verdict is known the collector's line now
names its first failed step and no verdict word; where it is not (spooled, not derived here) the collector's
hint is all there is, and says so.
"""

from __future__ import annotations

import pytest

from ledger.cli.collect import _print_summary
from ledger.collectors.campaign import CampaignResult, GateOutcome
from ledger.policy.model import QUALIFIED, VERDICT_WORDS

RUNTIME = "NOT QUALIFIED — RUNTIME RELIABILITY"


def _result(policy_verdict: str | None, *statuses: tuple[str, str], state: str = "done") -> CampaignResult:
    return CampaignResult(
        campaign="c-7",
        job_id="j-1",
        job_entry="a" * 64,
        state=state,
        gates=[GateOutcome(gate=g, status=s) for g, s in statuses],
        verdict_words={"runtime-stability": RUNTIME, "benchmark": "NOT QUALIFIED — PERFORMANCE"},
        policy_verdict=policy_verdict,
    )


def _words(text: str) -> set[str]:
    """The failing verdict words ``text`` names (QUALIFIED is inside each of them)."""
    return {w for w in VERDICT_WORDS if w != QUALIFIED and w in text}


def test_the_collector_line_names_no_second_verdict_word(capsys: pytest.CaptureFixture[str]) -> None:
    r = _result(RUNTIME, ("runtime-stability", "passed"), ("benchmark", "failed"))
    assert r.verdict_hint == "NOT QUALIFIED — PERFORMANCE"  # the collector's own word differs
    _print_summary(r)
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("collector gates:"))
    assert line.startswith("collector gates: benchmark failed first")
    assert _words(out) == {RUNTIME}


@pytest.mark.parametrize(
    ("statuses", "state", "expected"),
    [
        ((("runtime-stability", "passed"), ("benchmark", "passed")), "done", "every step passed"),
        ((("runtime-stability", "passed"), ("benchmark", "not_run")), "done", "not every step ran"),
        ((("runtime-stability", "passed"),), "cancelled", "not every step ran"),
        ((), "done", "not every step ran"),
    ],
)
def test_the_collector_line_without_a_failure(
    capsys: pytest.CaptureFixture[str], statuses: tuple[tuple[str, str], ...], state: str, expected: str
) -> None:
    _print_summary(_result("INCONCLUSIVE", *statuses, state=state))
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("collector gates:"))
    assert line.startswith(f"collector gates: {expected} ")


def test_without_a_policy_verdict_the_collector_hint_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    _print_summary(_result(None, ("runtime-stability", "failed")))
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("collector gates:"))
    assert line.startswith(f"collector gates: {RUNTIME} (the collector's own view")
