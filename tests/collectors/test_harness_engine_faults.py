"""One event, one meaning: an engine that hangs, or stops serving the model the run measured, in the middle
of a benchmark or semantic harness run is an engine fault (outcome "fault", no aggregate result), judged
NOT QUALIFIED — RUNTIME RELIABILITY as the same event during the ready control is; never a request error,
an invalid run, a performance or a quality failure.

* F1: a request timed out (or the lease expired with requests outstanding) and the engine then answered
  neither ``/health`` nor ``/v1/models``: it hangs. A slow engine that still answers keeps its timeouts as
  request errors (an invalid run, a failed item), and a 400 stays a request error.
* F4: what ``/v1/models`` serves changed between the first read and a later one (between benchmark
  repetitions, over the semantic run).
* F3: the benchmark reads the bindings once more after its last repetition (a model swapped during the last
  repetition is seen), as the semantic run does after its last item.

The engine is the stub server (tests/engines/stub_openai.py): ``hang_after`` stops it answering anything
(``stop_after``, as a process, SIGSTOPs it), ``served_ids_later`` / ``models_change_after`` renames what it
serves.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

import ledger.collectors.benchmark as benchmark_module
from ledger.collectors.benchmark import (
    NO_AGGREGATE,
    BenchmarkSpec,
    benchmark_gate_payload,
    engine_unresponsive,
    run_benchmark,
)
from ledger.collectors.corpus import corpus_digest
from ledger.collectors.semantic import SemanticSpec, run_semantic, semantic_gate_payload
from ledger.entries import HarnessBounds
from ledger.policy.verdict import evaluate
from ledger.recorder import LocalRecorder
from ledger.service import Ledger
from tests.engines.stub_openai import StubConfig, free_port, serve_stub

from .conftest import entries_of
from .test_harness_gates import (
    DEFAULT_BENCHMARK,
    corpus,  # noqa: F401  (the fixture)
    gate,
    policy_with,
    review_and_accept,
    run,
    stub_campaign,
)

RENAMED = ("stub-model-restarted",)


def _bench_corpus(tmp_path: Path, n: int = 4) -> Path:
    path = tmp_path / "bench.jsonl"
    rows = [
        {"id": f"p{i:02d}", "messages": [{"role": "user", "content": f"q{i}"}], "max_tokens": 4}
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _bench(tmp_path: Path, **kw: Any) -> BenchmarkSpec:
    path = _bench_corpus(tmp_path)
    # over-saturation only reported: a stub on a busy test host shows no throughput gain from c1 to c4
    base: dict[str, Any] = {
        "concurrency": (1, 4),
        "requests_per_level": 8,
        "repetitions": 1,
        "saturation": "report",
    }
    base.update(kw)
    return BenchmarkSpec(path, corpus_digest(path), **base)


def _semantic(tmp_path: Path, **kw: Any) -> SemanticSpec:
    path = tmp_path / "semantic.jsonl"
    rows = [
        {
            "id": f"s{i}",
            "messages": [{"role": "user", "content": f"question {i}"}],
            "checks": [{"type": "exact", "value": "yes"}],
        }
        for i in range(3)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return SemanticSpec(path, corpus_digest(path), **kw)


ANSWERS = {f"question {i}": "yes" for i in range(3)}


@pytest.fixture
def short_liveness(monkeypatch: pytest.MonkeyPatch) -> None:
    """/health and /v1/models get 1 s (LIVENESS_TIMEOUT_S, 10 s in use, whatever the request timeout), for
    a test of an engine that answers at once or never: the bound only sets how long a hang takes to tell."""
    monkeypatch.setattr(benchmark_module, "LIVENESS_TIMEOUT_S", 1.0)


@pytest.fixture
def liveness_asked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Counts the times a harness asked whether the engine still answers (the real question is asked)."""
    asked: list[str] = []

    async def counted(base: str, timeout_s: float, headers: Any = None) -> str | None:
        asked.append(base)
        return await engine_unresponsive(base, timeout_s, headers)

    monkeypatch.setattr(benchmark_module, "engine_unresponsive", counted)
    return asked


# --- F1: an engine that hangs ---------------------------------------------------------------------------


def test_f1_an_engine_that_hangs_mid_benchmark_is_an_engine_fault(
    tmp_path: Path, short_liveness: None
) -> None:
    # from the 4th request on nothing answers (as a SIGSTOPped engine): the request times out, /health and
    # /v1/models do not answer either — the first engine fault stops the run
    with serve_stub(StubConfig(hang_after=3)) as base:
        t0 = time.monotonic()
        result = run_benchmark(_bench(tmp_path, request_timeout_s=1.0), base, out_dir=tmp_path / "o")
        took = time.monotonic() - t0
    assert result.outcome == "fault" and result.aggregate is None and not result.valid
    stopped = result.stopped or ""
    assert stopped.startswith("engine fault at c1 repetition 0 request 3"), stopped
    assert "timeout after 1 s" in stopped and "it hangs" in stopped
    assert "GET /health: no answer within 1 s" in stopped and "GET /v1/models: no answer" in stopped
    assert [r.fault for r in result.records] == [False, False, False, True]  # stopped at the first fault
    assert took < 10  # one timeout and one question, not the lease
    payload = benchmark_gate_payload(result, {"error_rate": {"max": 0}})
    assert payload["status"] == "failed" and payload["bounds"]["outcome"] == "fault"
    assert payload["figures"] == {} and NO_AGGREGATE in (payload["reason"] or "")
    HarnessBounds.model_validate(payload["bounds"])


def test_f1_a_hang_at_c4_is_one_engine_fault_asked_once(tmp_path: Path, liveness_asked: list[str]) -> None:
    # c1 completes (8 requests); the engine hangs inside c4: four requests time out together, they share
    # one question
    with serve_stub(StubConfig(hang_after=10)) as base:
        result = run_benchmark(_bench(tmp_path, request_timeout_s=1.0), base, out_dir=tmp_path / "o")
    assert result.outcome == "fault", result.stopped
    assert "at c4 repetition 0" in (result.stopped or "") and "it hangs" in (result.stopped or "")
    assert len(liveness_asked) == 1
    assert all(r.ok for r in result.records if r.level == 1)


def test_f1_the_lease_expiring_over_a_hung_engine_is_an_engine_fault(tmp_path: Path) -> None:
    # requests may take 30 s, the lease is 2 s: the engine hangs with a request outstanding when it expires
    with serve_stub(StubConfig(hang_after=3)) as base:
        spec = _bench(tmp_path, request_timeout_s=30.0, lease_s=2.0)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(benchmark_module, "LIVENESS_TIMEOUT_S", 1.0)
            result = run_benchmark(spec, base, out_dir=tmp_path / "o")
    assert result.outcome == "fault" and result.aggregate is None
    stopped = result.stopped or ""
    assert "the lease of 2 s expired during c1 with 1 request(s) outstanding" in stopped
    assert "it hangs" in stopped


def test_f1_neighbour_a_slow_engine_that_still_answers_stays_a_request_error(tmp_path: Path) -> None:
    # every answer takes 2 s, requests time out after 0.5 s: the engine answers /health at once — slow, not
    # hung: each timeout is a request error and the run is invalid (a performance matter), not a fault
    with serve_stub(StubConfig(ttft_s=2.0)) as base:
        spec = _bench(tmp_path, concurrency=(1,), requests_per_level=2, request_timeout_s=0.5)
        result = run_benchmark(spec, base, out_dir=tmp_path / "o")
    assert result.outcome == "completed" and result.stopped is None, result.stopped
    assert len(result.records) == 2 and not any(r.fault for r in result.records)
    assert all((r.error or "").startswith("timeout after 0.5 s") for r in result.records)
    assert result.aggregate is not None and not result.valid
    assert any("error rate 1.0 above the maximum" in why for why in result.invalid_reasons)
    assert benchmark_gate_payload(result, {"error_rate": {"max": 0}})["bounds"]["outcome"] == "completed"


def test_f1_neighbour_the_lease_expiring_over_a_slow_engine_stays_lease_expired(tmp_path: Path) -> None:
    with serve_stub(StubConfig(ttft_s=5.0)) as base:
        spec = _bench(tmp_path, concurrency=(1,), request_timeout_s=30.0, lease_s=1.0)
        result = run_benchmark(spec, base, out_dir=tmp_path / "o")
    assert result.outcome == "lease-expired", result.stopped
    assert result.stopped == "the lease of 1 s expired during c1" and result.aggregate is None


def test_f1_neighbour_a_400_stays_a_request_error_and_asks_nothing(
    tmp_path: Path, liveness_asked: list[str]
) -> None:
    with serve_stub(StubConfig(error_every=3)) as base:
        result = run_benchmark(_bench(tmp_path), base, out_dir=tmp_path / "o")
    assert result.outcome == "completed" and not any(r.fault for r in result.records)
    assert sum(1 for r in result.records if (r.error or "").startswith("HTTP 400")) == 5
    assert result.aggregate is not None and not result.valid
    assert liveness_asked == []  # only a request that timed out asks whether the engine still answers


def test_f1_an_engine_that_hangs_mid_semantic_is_an_engine_fault(tmp_path: Path) -> None:
    with serve_stub(StubConfig(hang_after=1, answers=ANSWERS)) as base:
        result = run_semantic(_semantic(tmp_path, request_timeout_s=1.0), base, out_dir=tmp_path / "o")
    assert result.outcome == "fault" and result.score is None
    stopped = result.stopped or ""
    assert stopped.startswith("engine fault at item s1: timeout after 1 s") and "it hangs" in stopped
    assert [i.id for i in result.items] == ["s0"]  # the item the fault stopped is not scored
    payload = semantic_gate_payload(result, min_score=1.0)
    assert payload["status"] == "failed" and payload["bounds"]["outcome"] == "fault"
    assert payload["figures"] == {"score": None}


def test_f1_neighbour_a_slow_engine_fails_semantic_items_not_the_engine(
    tmp_path: Path, liveness_asked: list[str]
) -> None:
    with serve_stub(StubConfig(ttft_s=2.0, answers=ANSWERS)) as base:
        result = run_semantic(_semantic(tmp_path, request_timeout_s=0.5), base, out_dir=tmp_path / "o")
    assert result.outcome == "completed" and result.score == 0.0, result.stopped
    assert all((i.error or "").startswith("timeout after 0.5 s") for i in result.items)
    assert len(liveness_asked) == 3  # asked after each timeout; the engine answered each time


def test_f1_neighbour_a_400_fails_its_semantic_item_and_asks_nothing(
    tmp_path: Path, liveness_asked: list[str]
) -> None:
    with serve_stub(StubConfig(error_every=2, answers=ANSWERS)) as base:
        result = run_semantic(_semantic(tmp_path), base, out_dir=tmp_path / "o")
    assert result.outcome == "completed" and [i.passed for i in result.items] == [True, False, True]
    assert (result.items[1].error or "").startswith("HTTP 400") and liveness_asked == []


def test_engine_unresponsive_reads_any_answer_below_500_as_alive() -> None:
    import asyncio

    # llama-cpp-python has no /health (404) but answers: alive
    with serve_stub(StubConfig()) as base:
        assert asyncio.run(engine_unresponsive(base, 2.0)) is None
    # nothing listens: not alive
    why = asyncio.run(engine_unresponsive(f"http://127.0.0.1:{free_port()}", 1.0))
    assert why is not None and "GET /health: ClientConnectorError" in why


# --- F4 / F3: the served model changed during the run -----------------------------------------------------


def test_f4_the_model_renamed_between_benchmark_repetitions_is_an_engine_fault(tmp_path: Path) -> None:
    # 16 requests per repetition; from the 11th completion on /v1/models lists another id
    cfg = StubConfig(served_ids_later=RENAMED, models_change_after=10)
    with serve_stub(cfg) as base:
        result = run_benchmark(_bench(tmp_path, repetitions=2), base, out_dir=tmp_path / "o")
    assert result.outcome == "fault" and result.aggregate is None
    assert result.stopped == (
        "engine fault before repetition 1: bindings changed during the run: "
        "{'served_models': 'stub-model'} → {'served_models': 'stub-model-restarted'}"
    )
    assert result.bindings == [{"served_models": "stub-model"}, {"served_models": "stub-model-restarted"}]
    assert not any(r.repetition == 1 for r in result.records)  # no request of the changed endpoint
    payload = benchmark_gate_payload(result, {"error_rate": {"max": 0}})
    assert payload["bounds"]["outcome"] == "fault"
    assert payload["bounds"]["bindings"] == {"served_models": "stub-model"}  # what the run measured


def test_f3_the_model_renamed_during_the_last_repetition_is_an_engine_fault(tmp_path: Path) -> None:
    cfg = StubConfig(served_ids_later=RENAMED, models_change_after=10)
    with serve_stub(cfg) as base:
        result = run_benchmark(_bench(tmp_path), base, out_dir=tmp_path / "o")
    assert result.outcome == "fault" and result.aggregate is None
    assert (result.stopped or "").startswith("engine fault after the last repetition: bindings changed")
    assert len(result.records) == 16 and all(r.ok for r in result.records)  # every request answered
    assert benchmark_gate_payload(result, {"error_rate": {"max": 0}})["status"] == "failed"


def test_f4_the_model_renamed_during_the_semantic_run_is_an_engine_fault(tmp_path: Path) -> None:
    cfg = StubConfig(answers=ANSWERS, served_ids_later=RENAMED, models_change_after=1)
    with serve_stub(cfg) as base:
        result = run_semantic(_semantic(tmp_path), base, out_dir=tmp_path / "o")
    assert all(i.passed for i in result.items) and len(result.items) == 3  # every answer right …
    assert result.outcome == "fault" and result.score is None  # … of an engine that changed meanwhile
    assert (result.stopped or "").startswith("engine fault after the last item: bindings changed")
    payload = semantic_gate_payload(result, min_score=1.0)
    assert payload["status"] == "failed" and payload["bounds"]["outcome"] == "fault"
    assert (payload["reason"] or "").count("bindings changed") == 1  # one event, named once


def test_f4_neighbour_bindings_unchanged_complete(tmp_path: Path) -> None:
    with serve_stub(StubConfig(answers=ANSWERS)) as base:
        bench = run_benchmark(_bench(tmp_path, repetitions=2), base, out_dir=tmp_path / "b")
        sem = run_semantic(_semantic(tmp_path), base, out_dir=tmp_path / "s")
    assert bench.outcome == "completed" and bench.valid, bench.invalid_reasons
    assert bench.bindings == [{"served_models": "stub-model"}] * 3  # before each repetition, after the last
    assert sem.outcome == "completed" and sem.score == 1.0
    assert sem.bindings == [{"served_models": "stub-model"}] * 2


def test_f4_neighbour_bindings_that_cannot_be_read_after_the_last_repetition_are_a_fault(
    tmp_path: Path,
) -> None:
    reads: list[int] = []

    def bindings() -> dict[str, str]:
        reads.append(1)
        if len(reads) > 1:
            raise ValueError("/v1/models answered HTTP 503")
        return {"served_models": "stub-model"}

    with serve_stub(StubConfig(answers=ANSWERS)) as base:
        bench = run_benchmark(_bench(tmp_path), base, out_dir=tmp_path / "b", bindings=bindings)
        reads.clear()
        sem = run_semantic(_semantic(tmp_path), base, out_dir=tmp_path / "s", bindings=bindings)
    assert bench.outcome == "fault" and bench.aggregate is None
    assert bench.stopped == (
        "engine fault after the last repetition: bindings unavailable: "
        "ValueError: /v1/models answered HTTP 503"
    )
    assert sem.outcome == "fault" and (sem.stopped or "").startswith("engine fault after the last item")


# --- end to end: the campaign records it, the policy judges it RUNTIME RELIABILITY -----------------------


def test_f1_campaign_engine_stopped_mid_benchmark_is_not_qualified_runtime_reliability(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
) -> None:
    policy = policy_with(tmp_path, corpus[1])
    # 1 control + 1 structured + 20 sequential + 2 semantic requests, then from the 40th benchmark request
    # on nothing answers, /health included, while the process runs (a hang of the engine's own)
    bench = DEFAULT_BENCHMARK + "\nrequest_timeout_seconds = 2"
    c = stub_campaign(tmp_path, tiny_model_dir, corpus, stub_args=("--hang-after", "64"), benchmark=bench)
    result = run(c, recorder, tmp_path, policy)
    b = result.gates[-1]
    assert (b.gate, b.status) == ("benchmark", "failed")
    assert "no aggregate result" in (b.reason or "") and "it hangs" in (b.reason or ""), b.reason
    payload = gate(ledger, "benchmark")["payload"]
    assert payload["bounds"]["outcome"] == "fault" and payload["figures"] == {}
    review_and_accept(ledger, gate(ledger, "semantic")["id"])
    v = evaluate(ledger, {"campaign": "harness"}, policy)
    assert v["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY", v["gates"]


def test_f1_neighbour_engine_suspended_mid_benchmark_is_inconclusive_not_a_hang(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
) -> None:
    """The same run with the engine's process stopped (SIGSTOP, process state T, as `kill -STOP` from outside
    would): suspended from outside, no evidence of the engine either way (e277bea, ebc80a2) — never a pass."""
    policy = policy_with(tmp_path, corpus[1])
    bench = DEFAULT_BENCHMARK + "\nrequest_timeout_seconds = 2"
    c = stub_campaign(tmp_path, tiny_model_dir, corpus, stub_args=("--stop-after", "64"), benchmark=bench)
    result = run(c, recorder, tmp_path, policy)
    b = result.gates[-1]
    assert (b.gate, b.status) == ("benchmark", "failed")
    review_and_accept(ledger, gate(ledger, "semantic")["id"])
    v = evaluate(ledger, {"campaign": "harness"}, policy)
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    launch = entries_of(ledger, "engine.launch")[-1]
    assert launch["payload"].get("failure_signature") == "suspended-from-outside", launch["payload"]


def test_f4_campaign_model_renamed_during_semantic_is_not_qualified_runtime_reliability(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
) -> None:
    policy = policy_with(tmp_path, corpus[1])
    # after 1 control + 1 structured + 20 sequential + the first semantic request, /v1/models lists another id
    args = ("--served-ids-later", RENAMED[0], "--models-change-after", "23")
    result = run(stub_campaign(tmp_path, tiny_model_dir, corpus, stub_args=args), recorder, tmp_path, policy)
    sem = next(g for g in result.gates if g.gate == "semantic")
    assert sem.status == "failed" and "bindings changed during the run" in (sem.reason or ""), sem.reason
    payload = gate(ledger, "semantic")["payload"]
    assert payload["bounds"]["outcome"] == "fault" and payload["counts"]["failed"] == 0
    v = evaluate(ledger, {"campaign": "harness"}, policy)
    assert v["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY", v["gates"]
