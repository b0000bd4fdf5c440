"""Fix 166 (audit 106 f1, issue 11): a benchmark the harness's own hold stopped (fix 162) kept nothing of what
it had measured: the level runs completed before the hold, at 2.5 s a request against a 2,000 ms bound, were
thrown away with the rest (operator-stop, no figures, INCONCLUSIVE; a passing rerun then qualified). A stop
from outside withholds credit, never evidence: the level runs completed before the hold keep their figures
(``benchmark-result.json``), a bound they already fail whatever the rest would measure decides the gate (the
reason says so, by the policy's own test, ``acceptance.cut_decided``), and a request whose timing spans the
hold is the run's cut, never slow nor an error of the engine's. An incomplete level decides nothing.

The harness is held by blocking its event loop from the operator's stop check (as test_fix162 does)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

import ledger.collectors.benchmark as benchmark_module
from ledger.collectors.benchmark import BenchmarkSpec, benchmark_gate_payload, run_benchmark
from ledger.collectors.corpus import corpus_digest

from .test_audit10_harness import _corpus, serve, sse
from .test_fix162_harness_own_stop_blamed_on_the_engine import BLOCK_S, HARNESS, HOLD_S

BOUND_MS = 300  # the TTFT bound an engine answering in 0.6 s fails


@pytest.fixture(autouse=True)
def _short_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(benchmark_module, "HARNESS_HOLD_S", HOLD_S)


def _spec(tmp_path: Path) -> BenchmarkSpec:
    corpus = _corpus(tmp_path)
    return BenchmarkSpec(
        corpus,
        corpus_digest(corpus),
        concurrency=(1,),
        requests_per_level=2,
        repetitions=2,
        saturation="report",
        request_timeout_s=5.0,
    )


class HeldAtRequest:
    """An engine answering every request after ``delay_s``, and the operator's stop check, which holds the
    harness (blocks its loop, as test_fix162's ``HeldOnce``) once, while the engine's ``at``-th request is in
    flight — deterministic whatever the host's load."""

    def __init__(self, delay_s: float, at: int) -> None:
        self.delay_s, self.at, self.asked, self.held = delay_s, at, 0, False

    def reply(self, _body: dict[str, Any], _n: int) -> tuple[int, str, bytes]:
        self.asked += 1
        time.sleep(self.delay_s)
        return sse()

    def __call__(self) -> str | None:
        if self.asked >= self.at and not self.held:
            self.held = True
            time.sleep(BLOCK_S)
        return None


def _run(tmp_path: Path, at: int, bound_ms: float = BOUND_MS) -> tuple[Any, dict[str, Any]]:
    bounds = {"ttft_ms.p95@c1": {"max": bound_ms}, "error_rate": {"max": 0}}
    held = HeldAtRequest(0.6, at)
    with serve(held.reply) as base:
        result = run_benchmark(_spec(tmp_path), base, out_dir=tmp_path / "o", should_stop=held)
    return result, benchmark_gate_payload(result, bounds)


def test_fix166_held_benchmark_that_already_failed_a_bound_says_so(tmp_path: Path) -> None:
    result, payload = _run(tmp_path, at=3)  # held while repetition 1's first request is in flight
    assert result.outcome == "operator-stop" and HARNESS in (result.stopped or "")
    summary = json.loads((tmp_path / "o" / "benchmark-result.json").read_text())
    kept = [r for r in summary["runs"] if r["figures"]]
    # the level run completed before the hold keeps its figures
    assert [(r["repetition"], r["level"]) for r in kept] == [(0, 1)]
    assert payload["status"] == "failed"
    assert "decided before the cut: ttft_ms.p95@c1 is at least" in payload["reason"], payload["reason"]
    # the request the hold spanned is the run's cut, not the engine's error or timeout
    assert payload["counts"]["timed_out"] == 0 and payload["counts"]["errors"] == payload["counts"]["cut"]


def test_fix166_held_benchmark_that_met_its_bounds_decides_nothing(tmp_path: Path) -> None:
    result, payload = _run(tmp_path, at=3, bound_ms=5000)  # the level run before the hold met its bound
    assert result.outcome == "operator-stop"
    assert "decided before the cut" not in (payload["reason"] or "")


def test_fix166_held_in_the_first_level_run_decides_nothing(tmp_path: Path) -> None:
    result, payload = _run(tmp_path, at=1)  # held before any level run completed
    assert result.outcome == "operator-stop"
    assert "decided before the cut" not in (payload["reason"] or "")
