"""Issue 11, audit 50 f1: the semantic harness gave each request min(request timeout, lease left) and
checked the lease only between items, so the item its own lease cut was scored as a wrong answer and the
run recorded `outcome completed, status failed`. An item cut by the LEASE (not by the engine's own request
timeout) is not scored: the run ends `lease-expired` (unless the engine then hangs: a fault), and failed
items seen before the cut say so where they already miss the threshold. The benchmark twin records the
requests it cut (`counts.cut`) apart from the engine's errors."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

import ledger.collectors.benchmark as benchmark_module
from ledger.collectors.benchmark import (
    LEASE_EXPIRED,
    NO_AGGREGATE,
    BenchmarkSpec,
    benchmark_gate_payload,
    run_benchmark,
)
from ledger.collectors.corpus import corpus_digest
from ledger.collectors.semantic import SemanticSpec, run_semantic, semantic_gate_payload
from ledger.entries import HarnessBounds, validate_payload
from tests.engines.stub_openai import StubConfig, serve_stub

QUESTIONS = [f"question {i}" for i in range(3)]


def _semantic(tmp_path: Path, **kw: Any) -> SemanticSpec:
    path = tmp_path / "semantic.jsonl"
    rows = [
        {
            "id": f"s{i}",
            "messages": [{"role": "user", "content": q}],
            "checks": [{"type": "exact", "value": "yes"}],
        }
        for i, q in enumerate(QUESTIONS)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return SemanticSpec(path, corpus_digest(path), **kw)


@pytest.fixture
def short_liveness(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(benchmark_module, "LIVENESS_TIMEOUT_S", 1.0)


def test_semantic_item_cut_by_the_harness_lease_is_not_scored_as_a_wrong_answer(tmp_path: Path) -> None:
    # a slow, healthy engine (1.5 s per answer) and a lease of 0.6 s: the first request is cut by the lease
    with serve_stub(StubConfig(ttft_s=1.5, answers=dict.fromkeys(QUESTIONS, "yes"))) as base:
        result = run_semantic(_semantic(tmp_path, lease_s=0.6), base, out_dir=tmp_path / "o")
    assert result.outcome == LEASE_EXPIRED, result.stopped
    assert result.items == []  # the cut item is not scored
    assert result.score is None
    stopped = result.stopped or ""
    assert (
        stopped.startswith("the lease of 0.6 s expired during item s0")
        and "request timeout is 120 s" in stopped
    )
    payload = semantic_gate_payload(result, min_score=1.0)
    validate_payload("gate.result", 1, payload)
    assert payload["bounds"]["outcome"] == "lease-expired" and payload["figures"] == {"score": None}
    assert payload["counts"] == {"items": 3, "asked": 0, "passed": 0, "failed": 0, "errors": 0}
    assert payload["reason"] == f"{NO_AGGREGATE}: {stopped}"  # nothing said against the engine
    # what the harness wrote: no item record for the cut item
    assert (tmp_path / "o" / "semantic-items.jsonl").read_text() == ""


def test_semantic_engines_own_request_timeout_is_still_a_failed_item(tmp_path: Path) -> None:
    """Neighbour: the request timeout (0.3 s) is shorter than the lease left: the engine was given its whole
    timeout, so the timeout is the item's error (a slow engine fails the item), as before."""
    with serve_stub(StubConfig(ttft_s=1.0, answers=dict.fromkeys(QUESTIONS, "yes"))) as base:
        result = run_semantic(
            _semantic(tmp_path, request_timeout_s=0.3, lease_s=60.0), base, out_dir=tmp_path / "o"
        )
    assert result.outcome == "completed", result.stopped
    assert [i.passed for i in result.items] == [False, False, False]
    assert all((i.error or "").startswith("timeout after 0.3 s") for i in result.items)
    assert result.score == 0.0


def test_semantic_lease_cut_after_wrong_answers_says_the_threshold_is_out_of_reach(tmp_path: Path) -> None:
    """Fail closed: items answered wrongly before the cut stay failed items; where they already put the score
    below the threshold whatever the rest would answer, the reason says so (the policy counts it against)."""
    # s0 answered wrongly after 0.8 s; s1 would need 1.6 s, and the lease (1.4 s) has about 0.6 s left
    answers = {QUESTIONS[0]: "no"}
    with serve_stub(StubConfig(answers=answers, ttft_growth_s=0.8)) as base:
        result = run_semantic(_semantic(tmp_path, lease_s=1.4), base, out_dir=tmp_path / "o")
    assert result.outcome == LEASE_EXPIRED, result.stopped
    assert [(i.id, i.passed) for i in result.items] == [("s0", False)]
    strict = semantic_gate_payload(result, min_score=1.0)
    assert strict["counts"]["failed"] == 1 and strict["status"] == "failed"
    assert "1 of 3 item(s) failed before the lease ran out (s0)" in strict["reason"]
    assert "cannot reach the threshold 1" in strict["reason"]
    # a threshold the two items not asked could still reach: nothing decided, only the lease named
    lenient = semantic_gate_payload(result, min_score=0.6)
    assert "failed before the lease ran out" not in lenient["reason"]


def test_semantic_engine_fault_before_the_cut_still_stops_the_gate(
    tmp_path: Path, short_liveness: None
) -> None:
    """Neighbour: an engine that hangs when the lease cuts its request is an engine fault (the first engine
    fault stops the gate), not a lease expiry."""
    with serve_stub(StubConfig(hang_after=1, answers=dict.fromkeys(QUESTIONS, "yes"))) as base:
        t0 = time.monotonic()
        result = run_semantic(
            _semantic(tmp_path, lease_s=1.0, request_timeout_s=30.0), base, out_dir=tmp_path / "o"
        )
        took = time.monotonic() - t0
    assert result.outcome == "fault", result.stopped
    stopped = result.stopped or ""
    assert stopped.startswith("engine fault at item s1: the lease of 1 s expired during item s1"), stopped
    assert "it hangs" in stopped
    assert [i.id for i in result.items] == ["s0"]
    assert took < 10
    payload = semantic_gate_payload(result, min_score=1.0)
    assert payload["bounds"]["outcome"] == "fault"


def _bench(tmp_path: Path, **kw: Any) -> BenchmarkSpec:
    path = tmp_path / "bench.jsonl"
    rows = [
        {"id": f"p{i}", "messages": [{"role": "user", "content": f"q{i}"}], "max_tokens": 4} for i in range(4)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    base: dict[str, Any] = {
        "concurrency": (1,),
        "requests_per_level": 8,
        "repetitions": 1,
        "saturation": "report",
    }
    return BenchmarkSpec(path, corpus_digest(path), **{**base, **kw})


def test_benchmark_requests_cut_by_the_lease_are_counted_apart_from_engine_errors(tmp_path: Path) -> None:
    """The benchmark twin: a run its lease cut records `lease-expired`, and the requests the cut ended
    (`counts.cut`) apart from the engine's own errors, so the policy can tell them apart."""
    with serve_stub(StubConfig(ttft_s=5.0)) as base:
        result = run_benchmark(
            _bench(tmp_path, request_timeout_s=30.0, lease_s=1.0), base, out_dir=tmp_path / "o"
        )
    assert result.outcome == LEASE_EXPIRED and result.aggregate is None
    payload = benchmark_gate_payload(result, {"error_rate": {"max": 0}})
    HarnessBounds.model_validate(payload["bounds"])
    assert payload["bounds"]["outcome"] == "lease-expired"
    assert payload["counts"]["errors"] == 1 and payload["counts"]["cut"] == 1
    assert "failed before the lease ran out" not in (payload["reason"] or "")


def test_benchmark_engine_errors_before_the_lease_cut_are_named(tmp_path: Path) -> None:
    """Neighbour: a 400 the engine gave before the cut is the engine's error (not cut), and beyond the
    error-rate bound the reason says so."""
    # requests 2 and 4 answered 400 at once; 1 and 3 after 0.3 s and 0.9 s; 5 would need 1.5 s: cut
    with serve_stub(StubConfig(error_every=2, ttft_growth_s=0.3)) as base:
        result = run_benchmark(
            _bench(tmp_path, request_timeout_s=30.0, lease_s=1.5), base, out_dir=tmp_path / "o"
        )
    assert result.outcome == LEASE_EXPIRED, result.stopped
    payload = benchmark_gate_payload(result, {"error_rate": {"max": 0}})
    errors, cut = payload["counts"]["errors"], payload["counts"]["cut"]
    assert cut == 1 and errors > cut
    assert f"{errors - cut} of the 8 requests of the run failed before the lease ran out" in payload["reason"]
    # a bound the rest could still meet: nothing said against the engine
    lenient = benchmark_gate_payload(result, {"error_rate": {"max": 0.9}})
    assert "failed before the lease ran out" not in (lenient["reason"] or "")
