"""A harness result recorded ``passed`` whose own record contradicts it fails its gate, naming the
contradiction (an independent audit found each QUALIFIED). The record is read as the harness writes it
(``benchmark_gate_payload`` in ``ledger.collectors.benchmark``, ``semantic_gate_payload`` in
``ledger.collectors.semantic``):

- the benchmark's parity record (``bounds.parity``) is taken at c1 (``level`` 1), and the prompts it lists as
  mismatched are those its ``matched`` and ``compared`` counts allow;
- its ``bounds.figures`` is the one flat dict it also writes as ``figures``;
- its ``bounds.limits`` (figure → ``{value, max, min}``, what it judged each bound with) records, for a pass,
  the recorded figure within its bounds;
- the semantic result's ``bounds.aggregate`` is true for a pass, its ``bounds.score`` is ``figures.score``,
  and ``bounds.failed_items`` lists as many items as ``counts.failed`` (the first 100 where more failed).

A field the harness writes but a record leaves out stays as before (the shipped fixtures have none of them);
one it records is judged. The honest neighbour of each — the payload the harness functions build from a run —
qualifies.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ledger.collectors.benchmark import (
    HARNESS,
    BenchmarkResult,
    BenchmarkSpec,
    RequestRecord,
    _flat_figures,
    benchmark_gate_payload,
    level_figures,
    policy_bounds,
    policy_validity,
    repeatability,
)
from ledger.collectors.semantic import HARNESS as SEMANTIC_HARNESS
from ledger.collectors.semantic import (
    HARNESS_DIGEST,
    ItemResult,
    SemanticResult,
    SemanticSpec,
    semantic_gate_payload,
)
from ledger.policy.loader import load_policy
from tests.policy.test_fail_closed import POLICY_DIR, entry, gates, qualified_entries, verdict_of
from tests.test_harness_spec_recorded import BENCH, SEMANTIC, _policy_dir

QUALIFIED = "QUALIFIED"
PERFORMANCE = "NOT QUALIFIED — PERFORMANCE"
SEMANTIC_QUALITY = "NOT QUALIFIED — SEMANTIC QUALITY"
CONTRADICTS = "contradicts its own record"
AT = "2026-09-10T10:20:00.000000Z"
# where the shared fixtures' launch served (its details.base_url): the harnesses measured it (bounds.endpoint)
ENDPOINT = "http://127.0.0.1:8000"


# --- honest runs, as the harness records them ----------------------------------------------------------


def _record(prompt: int, level: int, repetition: int, digest: str) -> RequestRecord:
    r = RequestRecord(f"p{prompt}", level, repetition, prompt, AT, prompt * 0.01)
    r.ttft_ms, r.e2e_ms, r.output_tokens, r.tokens_from = 100.0 + prompt, 900.0 + prompt, 9, "usage"
    r.end_s, r.itl_ms, r.output_digest = r.start_s + r.e2e_ms / 1000, [100.0] * 8, digest
    return r


def _honest_benchmark(policy_dir: Path = POLICY_DIR, mismatched: tuple[int, ...] = ()) -> dict[str, Any]:
    """The payload ``benchmark_gate_payload`` writes for a run of the approved spec whose every request
    completed, judged by the policy's bounds; the c1 outputs of the prompts ``mismatched`` differ between
    repetitions."""
    params = load_policy("backend-qualification", policy_dir).params
    levels = tuple(params["benchmark_concurrency"])
    spec = BenchmarkSpec(
        BENCH,
        params["benchmark_corpus_digest"],
        concurrency=levels,
        requests_per_level=params["benchmark_requests"],
        repetitions=params["benchmark_repetitions"],
        **policy_validity(params, "vllm"),
    )
    records = [
        _record(i, level, rep, f"out-{i}-{rep if level == 1 and i in mismatched else 0}")
        for rep in range(spec.repetitions)
        for level in levels
        for i in range(spec.requests_per_level)
    ]
    aggregate = {
        f"c{level}": level_figures([r for r in records if r.level == level], 60.0) for level in levels
    }
    parity = repeatability(records, 1)
    result = BenchmarkResult(
        spec=spec,
        corpus_digest=spec.corpus_digest,
        harness=HARNESS,
        started_at=AT,
        ended_at=AT,
        outcome="completed",
        stopped=None,
        runs=[],
        records=records,
        bindings=[{"served_models": "m"}] * spec.repetitions,
        aggregate=aggregate,
        figures=_flat_figures(aggregate, parity),
        valid=True,
        invalid_reasons=[],
        parity=parity,
        endpoint=ENDPOINT,
    )
    return benchmark_gate_payload(result, policy_bounds(params))


def _honest_semantic(policy_dir: Path = POLICY_DIR, failed: int = 0) -> dict[str, Any]:
    """The payload ``semantic_gate_payload`` writes for a completed run of the policy's corpus size whose
    first ``failed`` items failed, judged by the policy's threshold."""
    params = load_policy("backend-qualification", policy_dir).params
    total = params["semantic_corpus_items"]
    items = [ItemResult(f"q{i}", i >= failed, [], "{}", None, "stop", 10.0) for i in range(total)]
    result = SemanticResult(
        spec=SemanticSpec(SEMANTIC, params["semantic_corpus_digest"]),
        corpus_digest=params["semantic_corpus_digest"],
        harness=SEMANTIC_HARNESS,
        harness_digest=HARNESS_DIGEST,
        started_at=AT,
        ended_at=AT,
        outcome="completed",
        stopped=None,
        items=items,
        total=total,
        bindings=[{"served_models": "m"}] * 2,
        endpoint=ENDPOINT,
    )
    return semantic_gate_payload(result, min_score=params["semantic_min_score"])


def _campaign(benchmark: dict[str, Any] | None = None, semantic: dict[str, Any] | None = None) -> list[Any]:
    """The QUALIFIED campaign with its harness results replaced by these payloads."""
    es = qualified_entries()
    if benchmark is not None:
        entry(es, "benchmark")["payload"] = copy.deepcopy(benchmark)
    if semantic is not None:
        entry(es, "semantic")["payload"] = copy.deepcopy(semantic)
    return es


def _gate(v: dict[str, Any], name: str) -> dict[str, Any]:
    gate: dict[str, Any] = next(g for g in v["gates"] if g["name"] == name)
    return gate


def test_an_honest_benchmark_and_semantic_run_as_the_harness_records_them_qualify(tmp_path: Path) -> None:
    """The neighbour: every field the harnesses write (parity record with its mismatched prompts, the copy
    of the figures, the limits judged, the semantic aggregate, score and failed items) agrees, and passes."""
    bench, sem = _honest_benchmark(), _honest_semantic()
    assert bench["status"] == "passed" and sem["status"] == "passed"
    assert bench["bounds"]["figures"] == bench["figures"] and bench["bounds"]["parity"]["level"] == 1
    assert bench["bounds"]["parity"]["prompts_mismatched"] == []
    assert set(bench["bounds"]["limits"]) == {"ttft_ms.p95@c4", "error_rate", "c1_parity"}
    assert sem["bounds"]["aggregate"] is True and sem["bounds"]["failed_items"] == []
    v = verdict_of(tmp_path, _campaign(bench, sem))
    assert v["verdict"] == QUALIFIED, v["gates"]


# --- benchmark ---------------------------------------------------------------------------------------------


def _judged(tmp_path: Path, change: Callable[[dict[str, Any]], None], gate: str = "benchmark") -> str:
    """The reason of ``gate`` on the honest campaign with ``change`` made to that gate's payload; asserts
    that the change fails the gate, and the verdict with it."""
    bench, sem = _honest_benchmark(), _honest_semantic()
    change(bench if gate == "benchmark" else sem)
    v = verdict_of(tmp_path, _campaign(bench, sem))
    assert gates(v)[gate] == "failed", v["gates"]
    assert v["verdict"] == (PERFORMANCE if gate == "benchmark" else SEMANTIC_QUALITY)
    reason: str = _gate(v, gate)["reason"]
    return reason


def _parity(p: dict[str, Any]) -> dict[str, Any]:
    parity: dict[str, Any] = p["bounds"]["parity"]
    return parity


@pytest.mark.parametrize("level", [4, 32, "1", None])
def test_a_passed_benchmark_whose_parity_was_not_taken_at_c1_fails(tmp_path: Path, level: Any) -> None:
    """Regression: a parity record of level 4 gave the c1 parity figure, and the run passed."""
    reason = _judged(tmp_path, lambda p: _parity(p).update(level=level))
    assert "parity record was not taken at c1 (bounds.parity.level)" in reason


def test_a_passed_benchmark_whose_parity_record_is_not_a_record_fails(tmp_path: Path) -> None:
    def change(p: dict[str, Any]) -> None:
        p["bounds"]["parity"] = "1.0"

    reason = _judged(tmp_path, change)
    assert "parity record was not taken at c1" in reason


@pytest.mark.parametrize(
    "change",
    [
        {"prompts_mismatched": ["p1", "p7", "p9"]},  # the audit's: every comparison matched
        {"matched": 95, "fraction": 0.989583},  # one comparison did not match, no prompt listed
        {"matched": 95, "fraction": 0.989583, "prompts_mismatched": ["p1", "p7"]},  # 2 prompts, 1 mismatch
        {"prompts": 2, "matched": 90, "fraction": 0.9375, "prompts_mismatched": ["p1", "p2", "p3"]},
        {"prompts_mismatched": "p1"},  # not a list
        {"compared": "96"},  # the counts it must agree with are no counts
    ],
)
def test_a_passed_benchmark_whose_parity_lists_mismatched_prompts_its_counts_do_not_allow_fails(
    tmp_path: Path, change: dict[str, Any]
) -> None:
    """Regression: a parity record listing 3 mismatched prompts beside 96 of 96 comparisons matched passed."""

    def apply(p: dict[str, Any]) -> None:
        _parity(p).update(change)
        p["figures"]["c1_parity"] = p["bounds"]["figures"]["c1_parity"] = _parity(p)["fraction"]

    reason = _judged(tmp_path, apply)
    assert "(bounds.parity.prompts_mismatched) are not what its matched and compared counts allow" in reason


def test_a_passed_benchmark_with_an_honest_mismatched_prompt_is_judged_by_its_parity_bound(
    tmp_path: Path,
) -> None:
    """The neighbour: prompt p5 answered differently on its second repetition — 95 of 96 matched, p5 listed —
    is a consistent record: under the shipped bar (c1 parity 1.0) the bound fails it, not its record, and
    under a bar of 0.98 it qualifies."""
    bench = _honest_benchmark(mismatched=(5,))
    assert _parity(bench)["prompts_mismatched"] == ["p5"] and _parity(bench)["matched"] == 95
    assert bench["status"] == "failed"  # the harness judged it by the shipped bound
    # recorded passed (its limits, which show the parity below its min, left out): the bound fails it
    bench["status"], bench["reason"] = "passed", None
    del bench["bounds"]["limits"]
    v = verdict_of(tmp_path, _campaign(bench))
    assert gates(v)["benchmark"] == "failed"
    assert CONTRADICTS not in _gate(v, "benchmark")["reason"]
    lower = _policy_dir(tmp_path, benchmark_min='{ "c1_parity" = 0.98 }')
    bench = _honest_benchmark(lower, mismatched=(5,))
    assert bench["status"] == "passed" and bench["bounds"]["limits"]["c1_parity"]["min"] == 0.98
    v = verdict_of(tmp_path, _campaign(bench), policy_dir=lower)
    assert v["verdict"] == QUALIFIED, v["gates"]


@pytest.mark.parametrize(
    "copy_of_figures",
    [
        {"ttft_ms.p95@c4": 5350.4, "error_rate": 0.25, "c1_parity": 0.5},  # the audit's
        "figures",  # the figures, one of them changed
        None,
        {},
    ],
)
def test_a_passed_benchmark_whose_copy_of_its_figures_differs_from_them_fails(
    tmp_path: Path, copy_of_figures: Any
) -> None:
    """Regression: ``bounds.figures`` — the harness writes its figures there too — showed TTFT 5350 ms, an
    error rate of 0.25 and a parity of 0.5 beside figures within the bounds, and the run passed."""

    def change(p: dict[str, Any]) -> None:
        if copy_of_figures == "figures":
            p["bounds"]["figures"] = {**p["figures"], "ttft_ms.p95@c4": 5350.4}
        else:
            p["bounds"]["figures"] = copy_of_figures

    reason = _judged(tmp_path, change)
    assert "the harness's copy of its figures (bounds.figures) is not its recorded figures" in reason


@pytest.mark.parametrize(
    "limit",
    [
        {"ttft_ms.p95@c4": {"value": 5350.4, "max": 2000}},  # the audit's: above its max
        {"c1_parity": {"value": 0.5, "max": 1.0, "min": 1.0}},  # below its min
        {"ttft_ms.p95@c4": {"value": 1999.0, "max": 2000}},  # within it, but not the recorded figure
        {"ttft_ms.p95@c4": {"value": None, "max": 2000}},  # no figure judged
        {"ttft_ms.p95@c4": {"max": 2000}},
        {"ttft_ms.p95@c4": {"value": "135.0", "max": 2000}},
        {"ttft_ms.p95@c4": {"value": 5350.4, "max": "2000"}},
        {"ttft_ms.p95@c4": 135.0},
        {"ttft_ms.p42@c4": {"value": 1.0, "max": 2000}},  # a figure it does not record
    ],
)
def test_a_passed_benchmark_whose_limits_record_a_value_outside_its_bound_fails(
    tmp_path: Path, limit: dict[str, Any]
) -> None:
    """Regression: ``bounds.limits`` — what the harness judged each bound with — recorded TTFT 5350 ms above
    its max of 2000, and the run passed."""

    def change(p: dict[str, Any]) -> None:
        p["bounds"]["limits"].update(limit)

    reason = _judged(tmp_path, change)
    assert "a bound it was judged by (bounds.limits) records a value outside that bound" in reason


def test_a_passed_benchmark_whose_limits_are_not_a_table_fails(tmp_path: Path) -> None:
    def change(p: dict[str, Any]) -> None:
        p["bounds"]["limits"] = ["ttft_ms.p95@c4"]

    assert "(bounds.limits)" in _judged(tmp_path, change)


def test_a_harness_field_left_out_is_judged_as_before(tmp_path: Path) -> None:
    """The neighbour: a record without the fields (the shipped fixtures' shape) is judged as before."""
    bench, sem = _honest_benchmark(), _honest_semantic()
    for key in ("figures", "limits"):
        del bench["bounds"][key]
    for key in ("prompts_mismatched", "level", "prompts", "by"):
        del bench["bounds"]["parity"][key]
    for key in ("aggregate", "score", "failed_items"):
        del sem["bounds"][key]
    assert verdict_of(tmp_path, _campaign(bench, sem))["verdict"] == QUALIFIED


# --- semantic ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("listed", [["q3", "q7", "q9"], "q3", None])
def test_a_passed_semantic_result_listing_failed_items_its_counts_do_not_have_fails(
    tmp_path: Path, listed: Any
) -> None:
    """Regression: ``bounds.failed_items`` listed 3 items beside ``counts.failed`` = 0, and it passed."""
    reason = _judged(tmp_path, lambda p: p["bounds"].update(failed_items=listed), "semantic")
    assert "the items it lists as failed (bounds.failed_items) are not its failed count" in reason


def test_a_passed_semantic_result_with_honest_failed_items_under_a_lower_bar_qualifies(
    tmp_path: Path,
) -> None:
    """The neighbour: 2 of 12 items failed, both listed, under a bar of 0.8 — consistent, and it passes; the
    same record listing a third item does not."""
    lower = _policy_dir(tmp_path, semantic_min_score="0.8")
    sem = _honest_semantic(lower, failed=2)
    assert sem["status"] == "passed" and sem["bounds"]["failed_items"] == ["q0", "q1"]
    assert verdict_of(tmp_path, _campaign(semantic=sem), policy_dir=lower)["verdict"] == QUALIFIED
    sem["bounds"]["failed_items"].append("q9")
    v = verdict_of(tmp_path, _campaign(semantic=sem), policy_dir=lower)
    assert v["verdict"] == SEMANTIC_QUALITY
    assert "(bounds.failed_items)" in _gate(v, "semantic")["reason"]


def test_a_passed_semantic_result_lists_its_first_100_failed_items(tmp_path: Path) -> None:
    """The neighbour: of 150 items 110 failed, and the harness lists the first 100 — consistent; 99 is not."""
    lower = _policy_dir(tmp_path, semantic_min_score="0.25", semantic_corpus_items="150")
    sem = _honest_semantic(lower, failed=110)
    assert sem["status"] == "passed" and len(sem["bounds"]["failed_items"]) == 100
    assert sem["counts"]["failed"] == 110
    assert verdict_of(tmp_path, _campaign(semantic=sem), policy_dir=lower)["verdict"] == QUALIFIED
    sem["bounds"]["failed_items"].pop()
    v = verdict_of(tmp_path, _campaign(semantic=sem), policy_dir=lower)
    assert v["verdict"] == SEMANTIC_QUALITY


@pytest.mark.parametrize("aggregate", [False, None])
def test_a_passed_semantic_result_whose_bounds_say_it_has_no_aggregate_result_fails(
    tmp_path: Path, aggregate: Any
) -> None:
    """Regression: ``bounds.aggregate`` = false (the harness writes it false only without a score) passed."""
    reason = _judged(tmp_path, lambda p: p["bounds"].update(aggregate=aggregate), "semantic")
    assert "its bounds say it has no aggregate result (bounds.aggregate)" in reason


@pytest.mark.parametrize("score", [0.25, None, 0.999])
def test_a_passed_semantic_result_whose_bounds_score_is_not_its_score_fails(
    tmp_path: Path, score: Any
) -> None:
    """Regression: ``bounds.score`` 0.25 beside ``figures.score`` 1.0 (the harness writes one value twice)
    passed."""
    reason = _judged(tmp_path, lambda p: p["bounds"].update(score=score), "semantic")
    assert "the score it was judged by (bounds.score) is not its recorded score (figures.score)" in reason
