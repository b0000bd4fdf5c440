"""A hung inference loop behind a live HTTP front is an engine fault, not a slow engine.

llama.cpp's server answers ``/health`` from its HTTP threads while a wedged slot never produces a token;
vLLM's API server answers ``/health`` 200 and ``/v1/models`` while its engine core hangs. After a request
timed out, both harnesses ask ``/health`` and ``/v1/models``; where the front answers, they ask one canary
completion (``max_tokens`` 1, the run's model, streamed) once nothing else is outstanding
(``benchmark.EngineCheck``):

* no first token within the canary timeout: the inference loop hangs — outcome "fault", the stop names the
  probes that answered and the canary (its model, timeout, wait) — the same outcome the policy reads for an
  engine that answers nothing (runtime-stability: "a benchmark or semantic harness run was stopped by an
  engine fault");
* a first token: a slow engine — the timeouts stay request errors (an invalid run, a failed item);
* HTTP 5xx (or no connection) for the canary: the engine does not answer — the existing path;
* a canary that cannot be judged (no model known to ask for, a 4xx): not a fault, and not a pass either.

The engines are stand-ins (aiohttp servers in a thread) that can answer the front while never streaming a
token.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

import ledger.collectors.benchmark as benchmark_module
from ledger.collectors.benchmark import (
    NO_AGGREGATE,
    BenchmarkSpec,
    benchmark_gate_payload,
    canary_timeout,
    run_benchmark,
)
from ledger.collectors.corpus import corpus_digest
from ledger.collectors.semantic import SemanticSpec, run_semantic, semantic_gate_payload
from ledger.entries import HarnessBounds
from ledger.policy.verdict import evaluate
from ledger.recorder import LocalRecorder
from ledger.service import Ledger
from tests.engines.stub_openai import free_port

from .test_harness_gates import (
    DEFAULT_BENCHMARK,
    STUB,
    corpus,  # noqa: F401  (the fixture)
    gate,
    policy_with,
    review_and_accept,
    run,
    stub_campaign,
)

MODEL = "standin-model"
HUNG_LOOP_ENGINE = Path(__file__).resolve().parent / "hung_loop_engine.py"


@dataclass
class StandIn:
    """A stand-in OpenAI server. ``hang_from``: completion requests after the first k get HTTP 200 and then
    never a token (a wedged slot, a hung engine core) while /health and /v1/models still answer;
    ``slow_first``: the first n completions wait ``slow_s`` before their first token (and give up when the
    client closes them); ``canary_status``: a completion asking ``max_tokens`` 1 is answered with that
    HTTP status; ``served``: the ids /v1/models lists."""

    hang_from: int | None = None
    slow_first: int = 0
    slow_s: float = 0.0
    delays: dict[int, float] = field(default_factory=dict)  # completion number → wait before its first token
    canary_status: int | None = None
    front_delay: float = 0.0  # /health and /v1/models answer after this long (a busy engine's front)
    served: tuple[str, ...] = (MODEL,)
    count: int = 0
    active: int = 0  # completion requests whose client is still connected
    canaries: list[dict[str, Any]] = field(default_factory=list)  # body and requests active on arrival
    release: threading.Event = field(default_factory=threading.Event)


def _chunk(model: str, delta: dict[str, Any], finish: str | None) -> bytes:
    body = {
        "id": "x",
        "object": "chat.completion.chunk",
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(body)}\n\n".encode()


def _app(cfg: StandIn) -> web.Application:
    async def health(_: web.Request) -> web.Response:
        await asyncio.sleep(cfg.front_delay)
        return web.json_response({"status": "ok"})

    async def models(_: web.Request) -> web.Response:
        await asyncio.sleep(cfg.front_delay)
        return web.json_response(
            {"object": "list", "data": [{"id": m, "object": "model"} for m in cfg.served]}
        )

    async def gone(request: web.Request) -> bool:
        return request.transport is None or request.transport.is_closing()

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        cfg.count += 1
        number = cfg.count
        if body.get("max_tokens") == 1:
            # the requests still open from the client: those it closed are gone once the server has seen
            # the close (a moment: the stand-in looks every 50 ms, as an engine notices a disconnect)
            await asyncio.sleep(0.3)
            cfg.canaries.append({"body": body, "active": cfg.active, "number": number})
            if cfg.canary_status is not None:
                return web.json_response(
                    {"error": {"message": "canary refused", "code": cfg.canary_status}},
                    status=cfg.canary_status,
                )
        cfg.active += 1
        try:
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)  # the front answers at once, as llama.cpp's and vLLM's do
            if cfg.hang_from is not None and number > cfg.hang_from:
                while not cfg.release.is_set() and not await gone(request):
                    await asyncio.sleep(0.05)  # the loop never produces a token
                return resp
            delay = cfg.slow_s if number <= cfg.slow_first else cfg.delays.get(number, 0.0)
            if delay and body.get("max_tokens") != 1:
                t = time.monotonic()
                while time.monotonic() - t < delay:
                    if await gone(request):
                        return resp
                    await asyncio.sleep(0.02)
            model = str(body.get("model") or MODEL)
            await resp.write(_chunk(model, {"role": "assistant", "content": "yes"}, None))
            await resp.write(_chunk(model, {}, "stop"))
            usage = {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
            tail = {
                "id": "x",
                "object": "chat.completion.chunk",
                "model": model,
                "choices": [],
                "usage": usage,
            }
            await resp.write(f"data: {json.dumps(tail)}\n\ndata: [DONE]\n\n".encode())
            await resp.write_eof()
            return resp
        finally:
            cfg.active -= 1

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    return app


@contextlib.contextmanager
def serve(cfg: StandIn) -> Iterator[str]:
    """Serve the stand-in in a thread of its own for the block; yields its base URL."""
    port = free_port()
    loop = asyncio.new_event_loop()
    started = threading.Event()
    runner = web.AppRunner(_app(cfg), shutdown_timeout=1.0)

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
        started.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())
        loop.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    if not started.wait(10):
        raise RuntimeError("the stand-in did not start")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        cfg.release.set()
        time.sleep(0.1)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)


@pytest.fixture
def short_probes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Probes and canary bounded by 1 s (canary_timeout: never less than LIVENESS_TIMEOUT_S)."""
    monkeypatch.setattr(benchmark_module, "LIVENESS_TIMEOUT_S", 1.0)


def _bench(tmp_path: Path, **kw: Any) -> BenchmarkSpec:
    path = tmp_path / "bench.jsonl"
    rows = [
        {"id": f"p{i:02d}", "messages": [{"role": "user", "content": f"q{i}"}], "max_tokens": 4}
        for i in range(4)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    base: dict[str, Any] = {
        "concurrency": (1, 4),
        "requests_per_level": 8,
        "saturation": "report",
        "request_timeout_s": 1.0,
        "model": MODEL,
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
    base: dict[str, Any] = {"request_timeout_s": 1.0, "model": MODEL}
    base.update(kw)
    return SemanticSpec(path, corpus_digest(path), **base)


def _summary(out: Path, name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((out / name).read_text())
    return loaded


# --- (a) the front answers, the loop never produces a token -----------------------------------------------


def test_hung_inference_behind_live_health_is_an_engine_fault(tmp_path: Path, short_probes: None) -> None:
    cfg = StandIn(hang_from=3)
    with serve(cfg) as base:
        t0 = time.monotonic()
        result = run_benchmark(_bench(tmp_path), base, out_dir=tmp_path / "o")
        took = time.monotonic() - t0
    assert result.outcome == "fault" and result.aggregate is None and not result.valid
    stopped = result.stopped or ""
    assert stopped.startswith("engine fault at c1 repetition 0 request 3 (prompt p03): timeout after 1 s"), (
        stopped
    )
    assert "the engine's HTTP front answers (GET /health: HTTP 200, GET /v1/models: HTTP 200)" in stopped
    assert "but its inference loop does not" in stopped
    assert f"(max_tokens 1, model {MODEL!r}, nothing else outstanding)" in stopped
    assert stopped.endswith("gave no first token within 1 s: it hangs"), stopped
    assert [r.fault for r in result.records] == [False, False, False, True]  # stopped at the first fault
    assert took < 15  # one timeout, the probes and one canary: not the lease
    # the canary asked the run's model, one token, with nothing else in flight
    assert [c["body"]["model"] for c in cfg.canaries] == [MODEL]
    assert cfg.canaries[0]["body"]["stream"] is True and cfg.canaries[0]["active"] == 0
    # the evidence: which probe answered, the canary's outcome and timing, in the result artifact
    (check,) = _summary(tmp_path / "o", "benchmark-result.json")["engine_checks"]
    assert check["verdict"] == "hangs" and check["probes"] == {
        "/health": "HTTP 200",
        "/v1/models": "HTTP 200",
    }
    canary = check["canary"]
    assert canary["timeout_s"] == canary_timeout(1.0) == 1.0 and canary["model"] == MODEL
    assert canary["ttft_ms"] is None and canary["http_status"] == 200
    assert canary["error"].startswith("timeout after 1 s") and canary["waited_idle_s"] >= 0
    # the gate records it as the policy reads an engine fault (bounds.outcome "fault")
    payload = benchmark_gate_payload(result, {"error_rate": {"max": 0}})
    assert payload["status"] == "failed" and payload["bounds"]["outcome"] == "fault"
    assert payload["figures"] == {} and NO_AGGREGATE in (payload["reason"] or "")
    HarnessBounds.model_validate(payload["bounds"])


def test_hung_inference_at_c4_is_one_engine_fault_one_canary(tmp_path: Path, short_probes: None) -> None:
    # c1 completes; inside c4 the loop hangs: four requests time out together and share one question
    cfg = StandIn(hang_from=10)
    with serve(cfg) as base:
        result = run_benchmark(_bench(tmp_path), base, out_dir=tmp_path / "o")
    assert result.outcome == "fault", result.stopped
    assert "at c4 repetition 0" in (result.stopped or "") and "inference loop does not" in (
        result.stopped or ""
    )
    assert len(cfg.canaries) == 1 and cfg.canaries[0]["active"] == 0
    assert [c["verdict"] for c in result.engine_checks] == ["hangs"]


def test_hung_inference_when_the_lease_expires_is_an_engine_fault(
    tmp_path: Path, short_probes: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # requests may take 30 s, the lease is 2 s: the loop hangs with a request outstanding when it expires;
    # the front answers — the canary (bounded here to 1 s) gives no token
    monkeypatch.setattr(benchmark_module, "canary_timeout", lambda _request_timeout_s: 1.0)
    with serve(StandIn(hang_from=3)) as base:
        result = run_benchmark(
            _bench(tmp_path, request_timeout_s=30.0, lease_s=2.0), base, out_dir=tmp_path / "o"
        )
    assert result.outcome == "fault" and result.aggregate is None
    stopped = result.stopped or ""
    assert "the lease of 2 s expired during c1 with 1 request(s) outstanding" in stopped
    assert "inference loop does not" in stopped and stopped.endswith("it hangs")


# --- (b) slow, then answering: a slow engine ---------------------------------------------------------------


def test_an_engine_slow_for_its_first_requests_stays_slow_not_hung(
    tmp_path: Path, short_probes: None
) -> None:
    # the first request waits 3 s for its first token, the timeout is 1 s; the canary after it answers
    cfg = StandIn(slow_first=1, slow_s=3.0)
    with serve(cfg) as base:
        result = run_benchmark(_bench(tmp_path, concurrency=(1,)), base, out_dir=tmp_path / "o")
    assert result.outcome == "completed" and result.stopped is None, result.stopped
    assert not any(r.fault for r in result.records)
    assert (result.records[0].error or "").startswith("timeout after 1 s")
    assert all(r.ok for r in result.records[1:])
    assert result.aggregate is not None and not result.valid  # the timeout is a request error
    assert not any("inference loop" in why for why in result.invalid_reasons), result.invalid_reasons
    (check,) = result.engine_checks
    assert check["verdict"] == "answers" and check["canary"]["ttft_ms"] is not None
    assert benchmark_gate_payload(result, {"error_rate": {"max": 0}})["bounds"]["outcome"] == "completed"


def test_a_slow_c4_level_gets_its_canary_with_nothing_else_outstanding(
    tmp_path: Path, short_probes: None
) -> None:
    # four slow requests time out together (the client closes them), the canary waits for none in flight
    cfg = StandIn(slow_first=4, slow_s=3.0)
    with serve(cfg) as base:
        result = run_benchmark(_bench(tmp_path, concurrency=(4,)), base, out_dir=tmp_path / "o")
    assert result.outcome == "completed", result.stopped
    assert sum(1 for r in result.records if (r.error or "").startswith("timeout")) == 4
    assert [c["active"] for c in cfg.canaries] == [0]
    assert [c["verdict"] for c in result.engine_checks] == ["answers"]


def test_the_canary_waits_for_the_requests_still_in_flight(tmp_path: Path, short_probes: None) -> None:
    # at c4: request 1 times out at 2 s; requests 2-4 answer at 1 s, and the next three, sent then, are in
    # flight when it times out (they answer at 2.5 s). The canary is asked only once they are done, and no
    # request begins meanwhile
    cfg = StandIn(delays={1: 5.0, 2: 1.0, 3: 1.0, 4: 1.0, 5: 1.5, 6: 1.5, 7: 1.5})
    with serve(cfg) as base:
        spec = _bench(tmp_path, concurrency=(4,), request_timeout_s=2.0)
        result = run_benchmark(spec, base, out_dir=tmp_path / "o")
    assert result.outcome == "completed", result.stopped
    assert [r.ok for r in result.records] == [False] + [True] * 7
    (check,) = result.engine_checks
    assert check["verdict"] == "answers" and check["canary"]["waited_idle_s"] > 0.2, check
    assert [c["active"] for c in cfg.canaries] == [0]
    # the seven requests sent before it, then the canary, then the last request (none began meanwhile)
    assert cfg.canaries[0]["number"] == 8 and cfg.count == 9


# --- (c) the front answers, the canary gets a 5xx: the engine does not answer ---------------------------


def test_a_canary_503_behind_live_health_is_the_engine_not_answering(
    tmp_path: Path, short_probes: None
) -> None:
    with serve(StandIn(hang_from=3, canary_status=503)) as base:
        result = run_benchmark(_bench(tmp_path), base, out_dir=tmp_path / "o")
    assert result.outcome == "fault" and result.aggregate is None
    stopped = result.stopped or ""
    assert (
        "the engine does not answer (GET /health: HTTP 200, GET /v1/models: HTTP 200; a canary completion"
        in (stopped)
    )
    assert "HTTP 503" in stopped and stopped.endswith("it hangs"), stopped
    assert [c["verdict"] for c in result.engine_checks] == ["not-answering"]


# --- fail closed: a canary that cannot be judged passes nothing ------------------------------------------


def test_a_canary_without_a_known_model_leaves_the_benchmark_run_invalid(
    tmp_path: Path, short_probes: None
) -> None:
    # the endpoint serves two models and the spec names none: the canary has no model to ask for. With one
    # timeout allowed (error rate and count bounds) the run would be valid — the unjudged question is not
    cfg = StandIn(slow_first=1, slow_s=3.0, served=(MODEL, "adapter"))
    spec = _bench(tmp_path, concurrency=(1,), model=None, max_error_rate=0.5, min_requests=4)
    with serve(cfg) as base:
        result = run_benchmark(spec, base, out_dir=tmp_path / "o")
    assert result.outcome == "completed" and cfg.canaries == []
    assert not result.valid
    assert any("cannot be judged: no served model known" in why for why in result.invalid_reasons), (
        result.invalid_reasons
    )
    assert [c["verdict"] for c in result.engine_checks] == ["unjudged"]


def test_a_canary_refused_with_a_4xx_is_not_a_pass(tmp_path: Path, short_probes: None) -> None:
    cfg = StandIn(slow_first=1, slow_s=3.0, canary_status=400)
    spec = _bench(tmp_path, concurrency=(1,), max_error_rate=0.5, min_requests=4)
    with serve(cfg) as base:
        result = run_benchmark(spec, base, out_dir=tmp_path / "o")
    assert result.outcome == "completed" and not result.valid
    assert any("cannot be judged" in why and "HTTP 400" in why for why in result.invalid_reasons)


# --- (d) the semantic harness ---------------------------------------------------------------------------


def test_hung_inference_behind_live_health_is_an_engine_fault_in_semantic(
    tmp_path: Path, short_probes: None
) -> None:
    with serve(StandIn(hang_from=1)) as base:
        result = run_semantic(_semantic(tmp_path), base, out_dir=tmp_path / "o")
    assert result.outcome == "fault" and result.score is None
    stopped = result.stopped or ""
    assert stopped.startswith("engine fault at item s1: timeout after 1 s"), stopped
    assert "inference loop does not" in stopped and stopped.endswith("it hangs")
    assert [i.id for i in result.items] == ["s0"]
    payload = semantic_gate_payload(result, min_score=1.0)
    assert payload["status"] == "failed" and payload["bounds"]["outcome"] == "fault"
    lines = (tmp_path / "o" / "semantic-engine-checks.jsonl").read_text().splitlines()
    assert [json.loads(line)["verdict"] for line in lines] == ["hangs"]
    assert "semantic-engine-checks.jsonl" in result.artifacts


def test_a_slow_first_semantic_item_stays_a_failed_item(tmp_path: Path, short_probes: None) -> None:
    with serve(StandIn(slow_first=1, slow_s=3.0)) as base:
        result = run_semantic(_semantic(tmp_path), base, out_dir=tmp_path / "o")
    assert result.outcome == "completed", result.stopped
    assert [i.passed for i in result.items] == [False, True, True]
    assert [c["verdict"] for c in result.engine_checks] == ["answers"]
    payload = semantic_gate_payload(result, min_score=0.5)
    assert payload["status"] == "passed", payload["reason"]  # slow, judged: the threshold decides


def test_a_semantic_canary_that_cannot_be_judged_fails_the_gate(tmp_path: Path, short_probes: None) -> None:
    # a threshold the score reaches, but the timed-out item's engine could not be judged slow
    with serve(StandIn(slow_first=1, slow_s=3.0, canary_status=404)) as base:
        result = run_semantic(_semantic(tmp_path), base, out_dir=tmp_path / "o")
    assert result.outcome == "completed" and result.score is not None
    payload = semantic_gate_payload(result, min_score=0.5)
    assert payload["status"] == "failed" and "cannot be judged" in (payload["reason"] or "")


# --- end to end: the campaign records it, the policy judges it RUNTIME RELIABILITY -----------------------


def test_campaign_hung_inference_behind_live_health_is_not_qualified_runtime_reliability(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
    short_probes: None,
) -> None:
    policy = policy_with(tmp_path, corpus[1])
    # the stub, wrapped by hung_loop_engine.py: after 1 control + 1 structured + 20 sequential + 2 semantic
    # requests and 40 benchmark requests, completions get HTTP 200 and never a token; /v1/models answers
    bench = DEFAULT_BENCHMARK + "\nrequest_timeout_seconds = 2"
    c = stub_campaign(
        tmp_path, tiny_model_dir, corpus, stub_args=("--hang-loop-after", "64"), benchmark=bench
    )
    c.write_text(c.read_text().replace(str(STUB), str(HUNG_LOOP_ENGINE)))
    result = run(c, recorder, tmp_path, policy)
    b = result.gates[-1]
    assert (b.gate, b.status) == ("benchmark", "failed")
    reason = b.reason or ""
    assert "no aggregate result" in reason and "inference loop does not" in reason, reason
    assert "GET /v1/models: HTTP 200" in reason and "gave no first token within 2 s: it hangs" in reason, (
        reason
    )
    payload = gate(ledger, "benchmark")["payload"]
    assert payload["bounds"]["outcome"] == "fault" and payload["figures"] == {}
    review_and_accept(ledger, gate(ledger, "semantic")["id"])
    v = evaluate(ledger, {"campaign": "harness"}, policy)
    assert v["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY", v["gates"]


def test_a_tight_request_timeout_does_not_make_a_busy_front_a_hang(
    tmp_path: Path, short_probes: None
) -> None:
    """Audit 31 (F2): a benchmark whose request timeout was a tight latency bound (0.02 s) gave /health and
    /v1/models that same bound; a busy engine's front answering in 0.2 s was read as "the engine does not
    answer: it hangs" — RUNTIME RELIABILITY for a healthy engine, before the canary was asked. The probes
    now get LIVENESS_TIMEOUT_S whatever the request timeout: the front answers, the canary answers, and the
    timeouts stay request errors (a slow engine)."""
    cfg = StandIn(slow_first=2, slow_s=0.5, front_delay=0.2)
    with serve(cfg) as base:
        result = run_benchmark(_bench(tmp_path, request_timeout_s=0.05), base, out_dir=tmp_path / "o")
    assert result.outcome != "fault", result.stopped
    assert not result.valid  # the timed-out requests are errors of a slow run
    assert cfg.canaries, "the canary was asked"
    checks = result.engine_checks
    assert checks and all(c["verdict"] == "answers" for c in checks), checks
