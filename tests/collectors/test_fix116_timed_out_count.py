"""fix116: the benchmark harness records how many of its requests timed out (``counts.timed_out``), each
request's record says whether it did (``timed_out`` in ``benchmark-requests.jsonl``), and collector and policy
count them by one judgement (``ledger.policy.acceptance.request_timed_out``): no (complete) answer in time —
fault or not — and no error status (a 5xx whose body then stalled is an answer). The policy excuses them only
for an engine held from outside (rule ``stopped-from-outside``; tests/policy/test_fix116_*)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from aiohttp import web

import ledger.collectors.benchmark as benchmark_module
from ledger.collectors.benchmark import (
    REQUESTS_ARTIFACT,
    benchmark_gate_payload,
    request_fault_kind,
    run_benchmark,
)
from ledger.collectors.semantic import REQUESTS_ARTIFACT as SEMANTIC_REQUESTS
from ledger.collectors.semantic import run_semantic, semantic_gate_payload
from ledger.policy.acceptance import _requests_shown, request_timed_out
from tests.collectors.test_fix80_fault_kinds import _rec, _send
from tests.collectors.test_hung_inference_loop import StandIn, _bench, _semantic, serve


@pytest.fixture
def short_probes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Probes and canary bounded by 1 s (as tests/collectors/test_hung_inference_loop.py bounds them)."""
    monkeypatch.setattr(benchmark_module, "LIVENESS_TIMEOUT_S", 1.0)


def test_a_request_that_timed_out_is_recorded_timed_out() -> None:
    async def h(_: web.Request) -> web.Response:
        await asyncio.sleep(2)
        return web.Response()

    rec = asyncio.run(_send(h, timeout_s=0.3))
    assert rec.timed_out and rec.to_json()["timed_out"] is True
    assert request_timed_out(rec.timed_out, rec.error, rec.http_status)
    rec.fault, rec.error = True, f"{rec.error}; it hangs"  # the engine, asked after, answers nothing
    assert request_timed_out(rec.timed_out, rec.error, rec.http_status)
    assert request_fault_kind(rec) == "timeout"


def test_a_5xx_whose_body_then_stalled_is_an_answer_not_a_timeout() -> None:
    async def h(request: web.Request) -> web.StreamResponse:
        r = web.StreamResponse(status=500)
        await r.prepare(request)
        await r.write(b'{"error": ')
        await asyncio.sleep(2)
        return r

    rec = asyncio.run(_send(h, timeout_s=0.3))
    assert rec.http_status == 500 and (rec.error or "").startswith("timeout after")
    assert not request_timed_out(rec.timed_out, rec.error, rec.http_status)
    rec.fault = True
    assert request_fault_kind(rec) == "answered"


def test_other_requests_are_not_timed_out() -> None:
    assert not _rec().to_json()["timed_out"]  # completed
    reset = _rec(fault=True, unanswered=True, error="ClientOSError: reset")
    assert not reset.timed_out and request_fault_kind(reset) == "unanswered"
    answered = _rec(fault=True, http_status=503, error="HTTP 503: overloaded")
    assert not request_timed_out(answered.timed_out, answered.error, answered.http_status)
    connect = _rec(fault=True, error="ConnectionTimeoutError: x")
    assert connect.timed_out and request_fault_kind(connect) == "timeout"


def test_the_policy_reads_the_stored_records_as_the_collector_does() -> None:
    """The field, not the error text, is what the policy reads: dropped, mistyped or false, it is no
    timeout; a completed request that says it timed out is none either."""
    assert not request_timed_out(None, "timeout after 1 s (TimeoutError)", None)
    assert not request_timed_out("true", "timeout after 1 s (TimeoutError)", None)
    assert not request_timed_out(1, "timeout after 1 s (TimeoutError)", None)
    assert not request_timed_out(True, None, 200)
    assert not request_timed_out(True, "timeout after 1 s", "200")
    assert request_timed_out(True, "timeout after 1 s", 200)
    assert not request_timed_out(True, "timeout after 1 s", 404)


def test_a_hung_benchmark_counts_its_timed_out_requests(tmp_path: Path, short_probes: None) -> None:
    """c1 completes; inside c4 the loop hangs: the requests in flight time out (one found hung, a fault; the
    others plain errors). counts.timed_out counts them all, the stored record shows the same count to the
    policy's reading, and its fault kind "timeout" is one the record bears out."""
    with serve(StandIn(hang_from=10)) as base:
        result = run_benchmark(_bench(tmp_path), base, out_dir=tmp_path / "o")
    assert result.outcome == "fault", result.stopped
    payload = benchmark_gate_payload(result, {"error_rate": {"max": 0}})
    counts, bounds = payload["counts"], payload["bounds"]
    assert bounds["fault_kind"] == "timeout"
    timed = [r for r in result.records if (r.error or "").startswith("timeout after")]
    assert counts["timed_out"] == len(timed) >= 1
    assert counts["timed_out"] + counts["cut"] + counts["unanswered"] <= counts["errors"]
    stored = [json.loads(line) for line in (tmp_path / "o" / REQUESTS_ARTIFACT).read_text().splitlines()]
    assert all(type(r["timed_out"]) is bool for r in stored)
    shown, problems = _requests_shown(stored, bounds)
    assert problems == []
    assert shown["timed_out"] == counts["timed_out"] and shown["errors"] == counts["errors"]


def test_a_completed_benchmark_counts_no_timeouts(tmp_path: Path, short_probes: None) -> None:
    with serve(StandIn()) as base:
        result = run_benchmark(_bench(tmp_path, concurrency=(1,)), base, out_dir=tmp_path / "o")
    assert result.outcome == "completed", result.stopped
    assert benchmark_gate_payload(result, {"error_rate": {"max": 0}})["counts"]["timed_out"] == 0


def test_a_hung_semantic_runs_record_bears_out_its_timeout(tmp_path: Path, short_probes: None) -> None:
    """The semantic harness's per-request record (``semantic-requests.jsonl``, the same RequestRecord) carries
    ``timed_out`` too: its fault kind "timeout" is one the policy's reading of the record bears out. (Its
    counts keep their shape: the timed-out item that stopped the run is not scored, so no timeout is among
    the failed items the rule counts.)"""
    with serve(StandIn(hang_from=1)) as base:
        result = run_semantic(_semantic(tmp_path), base, out_dir=tmp_path / "o")
    assert result.outcome == "fault", result.stopped
    payload = semantic_gate_payload(result, min_score=1.0)
    assert payload["bounds"]["fault_kind"] == "timeout"
    assert payload["counts"]["failed"] == 0
    sent = (tmp_path / "o" / SEMANTIC_REQUESTS).read_text().splitlines()
    stored = [json.loads(line) for line in sent]
    assert [r["timed_out"] for r in stored] == [False, True]
    shown, problems = _requests_shown(stored, payload["bounds"])
    assert problems == [] and shown["timed_out"] == 1
