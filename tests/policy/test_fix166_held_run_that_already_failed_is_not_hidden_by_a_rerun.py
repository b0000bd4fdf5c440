"""Fix 166 (audit 106 f1, issue 11): a run cut short from outside — the operator's stop, the engine or
the harness held from outside, its lease, the campaign's configuration — withholds credit, never evidence.
What the engine failed before the cut still counts where it already decides the gate, by one test
(``acceptance.cut_decided``, ``e.derived.cut_decided``) every such rule reads; where nothing is decided the
gate stays INCONCLUSIVE."""

from __future__ import annotations

import copy
import tomllib
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from ledger.entries import format_time, parse_time
from ledger.policy.acceptance import CUT_OUTCOMES, cut_decided, figures_decided
from tests.policy import test_fail_closed as fc

POLICY = Path(__file__).resolve().parents[2] / "policies" / "backend-qualification.toml"
PARAMS = tomllib.loads(POLICY.read_text())["params"]
HELD = (
    "the harness itself was suspended (its process stopped or frozen: SIGSTOP/SIGTSTP, a cgroup freezer, a "
    "paused VM) for 2.4 s while the run waited on the engine; no evidence of the engine either way during "
    "item s-11"
)
ENGINE_HELD = "the engine was suspended from outside (stopped or traced, process state T/t …)"
SIGINT = "interrupted (SIGINT)"
RERUN = {
    "counts": {"items": 12, "asked": 12, "passed": 12, "failed": 0},
    "figures": {"score": 1.0},
    "bounds": {"outcome": "completed"},
    "reason": None,
    "status": "passed",
}


def _semantic_cut(
    tmp_path: Path, outcome: str, reason: str, counts: dict[str, Any], rerun: bool
) -> dict[str, Any]:
    es = fc.qualified_entries()
    p = fc.entry(es, "semantic")["payload"]
    p.update(status="failed", reason=reason, counts=counts, figures={"score": 0.25})
    p["bounds"]["outcome"] = outcome
    if rerun:
        es = copy.deepcopy(es)
        fc._rerun(es, "semantic", "2026-09-10T10:47:00Z", reviewed=True, **RERUN)
    return fc.verdict_of(tmp_path, es)


DECIDED = {"items": 12, "asked": 11, "passed": 3, "failed": 8}  # 8 wrong of 12: at most 4 can pass


@pytest.mark.parametrize("reason", [HELD, ENGINE_HELD, SIGINT], ids=["harness-held", "engine-held", "sigint"])
@pytest.mark.parametrize("rerun", [False, True], ids=["alone", "with-passing-rerun"])
def test_fix166_held_run_that_already_failed_is_not_hidden_by_a_rerun(
    tmp_path: Path, reason: str, rerun: bool
) -> None:
    v = _semantic_cut(tmp_path, "operator-stop", reason, DECIDED, rerun)
    assert v["verdict"] == "NOT QUALIFIED — SEMANTIC QUALITY", fc.gates(v)
    assert fc.rejected(v)["semantic"] == "operator-stopped"


@pytest.mark.parametrize("outcome", ["operator-stop", "lease-expired"])
def test_fix166_cut_outcomes_judge_the_same_counts_alike(tmp_path: Path, outcome: str) -> None:
    v = _semantic_cut(tmp_path, outcome, HELD, DECIDED, rerun=True)
    assert v["verdict"] == "NOT QUALIFIED — SEMANTIC QUALITY"


@pytest.mark.parametrize(
    "counts",
    [
        {
            "items": 12,
            "asked": 2,
            "passed": 1,
            "failed": 1,
        },  # failed, but 11 could still pass … min score 1.0 fails
        {"items": 12, "asked": 11, "passed": 11, "failed": 0},  # nothing failed: nothing decided
        {"items": 12, "asked": 11, "passed": 3},  # failed dropped
        {"items": 12, "asked": 11, "passed": 3, "failures": 8},  # failed renamed
    ],
    ids=["one-failed", "none-failed", "dropped", "renamed"],
)
def test_fix166_counts_that_decide_nothing_stay_inconclusive(tmp_path: Path, counts: dict[str, Any]) -> None:
    v = _semantic_cut(tmp_path, "operator-stop", HELD, counts, rerun=False)
    decided = counts == {
        "items": 12,
        "asked": 2,
        "passed": 1,
        "failed": 1,
    }  # min score 1.0: one failure decides
    assert v["verdict"] == ("NOT QUALIFIED — SEMANTIC QUALITY" if decided else "INCONCLUSIVE"), fc.gates(v)
    assert fc.rejected(v)["semantic"] == "operator-stopped"


@pytest.mark.parametrize(
    "counts",
    [
        {"items": 12, "failed": "8"},  # mistyped (refused at ingest; an older entry decides nothing)
        {"items": 12, "failed": True},  # a boolean is no count
        {"items": "12", "failed": 8},
        {"items": 12, "failed": 13},  # more failed than items
        {"items": 12, "failed": -1},
    ],
)
def test_fix166_mistyped_counts_decide_nothing(counts: dict[str, Any]) -> None:
    payload = {"gate": "semantic", "bounds": {"outcome": "operator-stop"}, "counts": counts}
    assert cut_decided(payload, PARAMS) is None
    assert cut_decided({**payload, "counts": {"items": 12, "failed": 8}}, PARAMS) is not None
    assert cut_decided({**payload, "bounds": {}, "counts": {"items": 12, "failed": 8}}, PARAMS) is None


def test_fix166_nothing_decided_then_a_rerun_qualifies(tmp_path: Path) -> None:
    v = _semantic_cut(
        tmp_path, "operator-stop", HELD, {"items": 12, "asked": 3, "passed": 3, "failed": 0}, True
    )
    assert v["verdict"] == "QUALIFIED", fc.gates(v)


# --- one test, read by every rule of a cut outcome ---------------------------------------------------------


def test_fix166_one_copy_of_the_decided_before_a_cut_test() -> None:
    rules = {
        r["name"]: r
        for r in tomllib.loads(POLICY.read_text())["rules"]
        if r["name"] in ("operator-stopped", "harness-lease-expired", "harness-campaign-config")
    }
    assert set(rules) == {"operator-stopped", "harness-lease-expired", "harness-campaign-config"}
    for name, r in rules.items():
        assert r["withholds"] == "credit", name  # credit, never the record
        assert r["against"] == "e.derived.cut_decided != null", name
    outcomes = {
        "operator-stopped": "operator-stop",
        "harness-lease-expired": "lease-expired",
        "harness-campaign-config": "config",
    }
    for name, outcome in outcomes.items():  # each rule's outcome is one cut_decided judges
        assert f"== '{outcome}'" in rules[name]["when"] and outcome in CUT_OUTCOMES


# --- the benchmark: errors before the cut, and a level completed before it ----------------------------------


def _bench(outcome: str, **counts: Any) -> dict[str, Any]:
    return {"gate": "benchmark", "bounds": {"outcome": outcome, "concurrency": [1, 4, 32]}, "counts": counts}


@pytest.mark.parametrize("outcome", CUT_OUTCOMES)
def test_fix166_benchmark_errors_before_the_cut(outcome: str) -> None:
    refused = {"refused": 1} if outcome == "config" else {"refused": 0}
    assert (
        cut_decided(_bench(outcome, errors=5 + refused["refused"], cut=4, **refused), PARAMS) is not None
    )  # 1+ of the engine's
    assert cut_decided(_bench(outcome, errors=4 + refused["refused"], cut=4, **refused), PARAMS) is None
    assert cut_decided(_bench(outcome, errors=5, **refused), PARAMS) is None  # cut dropped: nothing decided
    assert cut_decided(_bench(outcome, errors=5, cut="4", **refused), PARAMS) is None  # mistyped
    # a cut above the largest level (a stop cuts one level's requests in flight) excuses none
    assert cut_decided(_bench(outcome, errors=40, cut=40, **refused), PARAMS) is not None
    assert cut_decided(_bench("completed", errors=5, cut=0, refused=0), PARAMS) is None  # no cut outcome
    assert cut_decided(_bench("fault", errors=5, cut=0, refused=0), PARAMS) is None


def _records(
    level: int, rep: int, n: int, ttft: float, cut_from: int | None = None, at: str = "2026-09-10T10:00:00Z"
):
    out = []
    for i in range(n):
        cut = cut_from is not None and i >= cut_from
        out.append(
            {
                "level": level,
                "repetition": rep,
                "index": i,
                "started_at": at,
                "start_s": 0.0,
                "end_s": 3.0,
                "error": "stopped: held" if cut else None,
                "ttft_ms": None if cut else ttft,
                "e2e_ms": None if cut else ttft + 10,
            }
        )
    return out


def test_fix166_a_complete_level_failing_a_bound_decides() -> None:
    params = {**PARAMS, "benchmark_requests": 4, "benchmark_repetitions": 2}
    done = _records(4, 0, 4, 2500.0)  # rep 0 of c4 complete, every request at 2.5 s
    held = _records(4, 1, 4, 2500.0, cut_from=0)  # rep 1 cut by the hold
    (why,) = figures_decided(done + held, params)
    assert why.startswith("ttft_ms.p95@c4 is at least 2500")
    assert (
        cut_decided({**_bench("operator-stop", errors=4, cut=4, refused=0)}, params, done + held) is not None
    )
    # an incomplete level decides nothing, however slow its completed requests
    assert figures_decided(_records(4, 0, 4, 2500.0, cut_from=2), params) == []
    # fast requests decide nothing; nor does a complete level whose few slow requests the rest could outweigh
    assert figures_decided(done[:0] + _records(4, 0, 4, 100.0), params) == []
    assert (
        figures_decided(
            _records(4, 0, 4, 2500.0), {**params, "benchmark_requests": 4, "benchmark_repetitions": 40}
        )
        == []
    )
    # records without a whole-number level decide nothing
    assert figures_decided([{**r, "level": "4"} for r in done], params) == []


def test_fix166_a_level_whose_timing_spans_the_hold_decides_nothing() -> None:
    params = {**PARAMS, "benchmark_requests": 4, "benchmark_repetitions": 1}
    done = _records(4, 0, 4, 2500.0)  # ended 10:00:03
    before = format_time(parse_time("2026-09-10T10:00:05Z"))
    during = format_time(parse_time("2026-09-10T10:00:00Z") + timedelta(seconds=1))
    assert figures_decided(done, params, [{"who": "harness", "not_held_at": before}]) != []
    assert figures_decided(done, params, [{"who": "harness", "not_held_at": during}]) == []
    assert figures_decided(done, params, [{"who": "engine", "not_held_at": None}]) == []  # when: unknown
    assert figures_decided(done, params, "held") == []  # mistyped: nothing
