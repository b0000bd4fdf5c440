"""Issue 11, fix 74 (audit 68 f1): a harness request the engine refused AFTER it answered requests of the same
run was judged the campaign's configuration (outcome ``config``: INCONCLUSIVE) — an engine that answered three
completions and then said HTTP 401 to the same key, or refused for its context length a prompt it had answered
earlier in the run. The run's own answers contradict such a refusal: the engine changed its answer mid-run,
the engine's failure, as for a sequential probe answered before it refused. The harnesses pass what they saw
(``count``: the run's answered requests; ``prompt_count``: those of the same prompt) to the one function,
``ledger.answers.refusal``; a refusal it does not excuse is an error of the run like any other."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from starlette.responses import JSONResponse

from ledger.collectors.benchmark import (
    REQUESTS_ARTIFACT,
    BenchmarkResult,
    BenchmarkSpec,
    benchmark_gate_payload,
    run_benchmark,
)
from ledger.collectors.corpus import corpus_digest
from ledger.collectors.semantic import SemanticSpec, run_semantic, semantic_gate_payload
from ledger.entries import validate_payload
from ledger.policy.loader import load_policy
from tests.engines.stub_openai import StubConfig, build_app, free_port
from tests.policy.test_fail_closed import (
    counted_against,
    entry,
    gates,
    qualified_entries,
    rejected,
    verdict_of,
)

LONG = "LONG"
CONTEXT = "This model's maximum context length is 8 tokens. However, your request has 9 input tokens."
BOUNDS = {"ttft_ms.p95@c1": {"max": 1000.0}}


@pytest.fixture(scope="module")
def params() -> dict[str, Any]:
    return dict(load_policy("backend-qualification").params)


@contextlib.contextmanager
def stub(*, answer_first: int | None = None, long_answered: int | None = None) -> Iterator[str]:
    """The shared stub engine behind a wrapper: with ``answer_first``, every completion request after the
    first ``answer_first`` is refused HTTP 401 (the same key throughout); with ``long_answered``, a request
    whose body holds ``LONG`` is answered ``long_answered`` times, then refused HTTP 400 with vLLM's
    context-length message."""
    app = build_app(StubConfig(answers={"q": "yes", f"{LONG} q": "yes"}))
    seen = {"all": 0, "long": 0}

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].endswith("/completions"):
            await app(scope, receive, send)
            return
        body, more = b"", True
        while more:
            msg = await receive()
            body += msg.get("body", b"")
            more = msg.get("more_body", False)
        seen["all"] += 1
        if answer_first is not None and seen["all"] > answer_first:
            err = {"error": {"message": "Invalid API Key", "code": 401}}
            await JSONResponse(err, status_code=401)(scope, receive, send)
            return
        if long_answered is not None and LONG.encode() in body:
            seen["long"] += 1
            if seen["long"] > long_answered:
                err = {"object": "error", "message": CONTEXT, "type": "BadRequestError", "code": 400}
                await JSONResponse(err, status_code=400)(scope, receive, send)
                return
        sent = False

        async def replay() -> Any:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await app(scope, replay, send)

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(wrapped, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the stub server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        app.state.release.set()
        server.should_exit = True
        thread.join(timeout=10)


def _benchmark(tmp_path: Path, prompts: list[str], **kw: Any) -> BenchmarkSpec:
    path = tmp_path / "bench.jsonl"
    rows = [
        {"id": f"p{i}", "messages": [{"role": "user", "content": p}], "max_tokens": 8}
        for i, p in enumerate(prompts)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return BenchmarkSpec(path, corpus_digest(path), **{"concurrency": (1,), "requests_per_level": 6, **kw})


def _semantic(tmp_path: Path, n: int, contains: str = "y") -> SemanticSpec:
    path = tmp_path / "semantic.jsonl"
    rows = [
        {
            "id": f"s{i}",
            "messages": [{"role": "user", "content": "q"}],
            "checks": [{"type": "contains", "value": contains}],
        }
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return SemanticSpec(path, corpus_digest(path))


def _verdict(tmp_path: Path, payload: dict[str, Any], result: BenchmarkResult) -> dict[str, Any]:
    """The shipped policy's verdict over the qualified baseline with this run's benchmark outcome and counts
    (the approved spec kept: only what the run measured replaces the baseline's), and the per-request record
    the run wrote, stored beside it as the collector stores it (559d6e5: a refusal is read back from that
    record, never excused on the payload's counts alone)."""
    es = qualified_entries()
    e = entry(es, "benchmark")
    p = e["payload"]
    p["status"], p["reason"] = payload["status"], payload["reason"]
    p["counts"] = {k: v for k, v in p["counts"].items() if not k.startswith("completed@c")}
    p["counts"].update({k: v for k, v in payload["counts"].items() if k.startswith("completed@c")})
    p["counts"].update({k: payload["counts"][k] for k in ("issued", "completed", "errors", "cut", "refused")})
    record = result.artifacts[REQUESTS_ARTIFACT].read_text()
    e["artifacts"] = [a for a in e.get("artifacts", []) if a.get("name") != REQUESTS_ARTIFACT]
    e["artifacts"].append({"name": REQUESTS_ARTIFACT, "text": record})
    for k in ("outcome", "aggregate", "valid"):
        p["bounds"][k] = payload["bounds"][k]
    if not payload["bounds"]["aggregate"]:
        p["figures"] = {}
    return verdict_of(tmp_path, es)


def test_benchmark_access_refused_after_answers_stopped_as_campaign_config(
    tmp_path: Path, params: dict[str, Any]
) -> None:
    """The reproducer (audit 68 f1): three answers, then HTTP 401 to the same key — the engine's errors: the
    run goes on, no request is a refusal, the error rate fails it (NOT QUALIFIED — PERFORMANCE)."""
    with stub(answer_first=3) as base:
        result = run_benchmark(_benchmark(tmp_path, ["q", "q"]), base, out_dir=tmp_path / "o", params=params)
    assert result.outcome == "completed", result.stopped
    assert [r.ok for r in result.records] == [True] * 3 + [False] * 3
    assert all(r.refusal is None and r.http_status == 401 for r in result.records[3:])
    payload = benchmark_gate_payload(result, BOUNDS)
    assert payload["bounds"]["outcome"] == "completed" and payload["status"] == "failed"
    assert payload["counts"]["refused"] == 0 and payload["counts"]["errors"] == 3
    v = _verdict(tmp_path, payload, result)
    assert v["verdict"] == "NOT QUALIFIED — PERFORMANCE", v["gates"]
    assert gates(v)["benchmark"] == "failed" and "benchmark" not in rejected(v)


def test_benchmark_access_refused_from_the_first_request_is_the_campaigns(
    tmp_path: Path, params: dict[str, Any]
) -> None:
    """Neighbour: refused before the engine answered anything of the run — the campaign's key: outcome
    config, the refused request counted apart, INCONCLUSIVE (harness-campaign-config)."""
    with stub(answer_first=0) as base:
        result = run_benchmark(_benchmark(tmp_path, ["q", "q"]), base, out_dir=tmp_path / "o", params=params)
    assert result.outcome == "config", result.stopped
    assert [r.refusal for r in result.records] == ["access"]
    payload = benchmark_gate_payload(result, BOUNDS)
    validate_payload("gate.result", 1, payload)
    assert payload["counts"]["refused"] == 1 and payload["bounds"]["aggregate"] is False
    v = _verdict(tmp_path, payload, result)
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert rejected(v)["benchmark"] == "harness-campaign-config"
    assert "benchmark" not in counted_against(v)


def test_benchmark_access_refused_at_a_later_level_after_answers_is_the_engines(
    tmp_path: Path, params: dict[str, Any]
) -> None:
    """Neighbour: the answers counted are the run's, across its levels: c1 answered in full, 401 at c2."""
    with stub(answer_first=2) as base:
        result = run_benchmark(
            _benchmark(tmp_path, ["q"], concurrency=(1, 2), requests_per_level=2),
            base,
            out_dir=tmp_path / "o",
            params=params,
        )
    assert result.outcome == "completed", result.stopped
    assert all(r.refusal is None for r in result.records)
    assert sum(1 for r in result.records if r.http_status == 401) == 2


def test_benchmark_context_refused_on_a_prompt_answered_before_is_the_campaigns(
    tmp_path: Path, params: dict[str, Any]
) -> None:
    """The context twin: the engine answered prompt p0 (LONG) once, then refused the same prompt — the same
    messages and max_tokens — for its context length: the engine's error, not the campaign's context."""
    with stub(long_answered=1) as base:
        result = run_benchmark(
            _benchmark(tmp_path, [f"{LONG} q", "q"]), base, out_dir=tmp_path / "o", params=params
        )
    assert result.outcome == "completed", result.stopped
    assert [(r.prompt_id, r.ok) for r in result.records[:3]] == [("p0", True), ("p1", True), ("p0", False)]
    assert all(r.refusal is None for r in result.records)
    payload = benchmark_gate_payload(result, BOUNDS)
    assert payload["counts"]["refused"] == 0 and payload["counts"]["errors"] == 2


def test_benchmark_context_refused_on_a_prompt_never_answered_after_others_is_the_campaigns(
    tmp_path: Path, params: dict[str, Any]
) -> None:
    """Neighbour: other prompts answered, this one never — its length is the campaign's context's: config."""
    with stub(long_answered=0) as base:
        result = run_benchmark(
            _benchmark(tmp_path, ["q", "q", f"{LONG} q"]), base, out_dir=tmp_path / "o", params=params
        )
    assert result.outcome == "config", result.stopped
    assert [(r.prompt_id, r.refusal) for r in result.records] == [
        ("p0", None),
        ("p1", None),
        ("p2", "context"),
    ]


def test_semantic_access_refused_after_answers_stopped_as_campaign_config(
    tmp_path: Path, params: dict[str, Any]
) -> None:
    """The semantic twin of the reproducer: three items answered, then 401 — failed items, the run completes
    (no outcome config), and its score fails the gate."""
    with stub(answer_first=3) as base:
        result = run_semantic(_semantic(tmp_path, 6), base, out_dir=tmp_path / "s", params=params)
    assert result.outcome == "completed", result.stopped
    assert [i.passed for i in result.items] == [True] * 3 + [False] * 3
    assert result.refused == []
    payload = semantic_gate_payload(result, min_score=1.0)
    assert payload["status"] == "failed" and payload["counts"]["failed"] == 3
    assert "refused" not in payload["counts"]


def test_semantic_access_refused_after_a_wrong_answer_is_the_engines(
    tmp_path: Path, params: dict[str, Any]
) -> None:
    """Neighbour: an item the engine answered wrongly is still answered — the key was met."""
    with stub(answer_first=1) as base:
        result = run_semantic(
            _semantic(tmp_path, 3, contains="zzz"), base, out_dir=tmp_path / "s", params=params
        )
    assert result.outcome == "completed", result.stopped
    assert len(result.items) == 3 and not any(i.passed for i in result.items)
    assert result.items[0].error is None and all(i.error for i in result.items[1:])


def test_semantic_access_refused_from_the_first_item_is_the_campaigns(
    tmp_path: Path, params: dict[str, Any]
) -> None:
    """Neighbour: refused before any answer: outcome config, the refused item recorded (counts.refused)."""
    with stub(answer_first=0) as base:
        result = run_semantic(_semantic(tmp_path, 3), base, out_dir=tmp_path / "s", params=params)
    assert result.outcome == "config", result.stopped
    assert result.items == [] and result.refused == ["s0"]
    payload = semantic_gate_payload(result, min_score=1.0)
    validate_payload("gate.result", 1, payload)
    assert payload["counts"]["refused"] == 1 and payload["bounds"]["aggregate"] is False
