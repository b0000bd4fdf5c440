"""Issue 11 ("one vocabulary"), fix 68: a request of the benchmark or semantic harness that the engine refused
because the campaign's context length cannot hold it (HTTP 400, vLLM's "maximum context length is N tokens",
llama-server's "exceeds the available context size") was counted as the engine's error, while the same 400
on a probe is the campaign's configuration. The harnesses now judge it by the probe's own function
(``ledger.answers.refusal``, the policy's params): the run stops, outcome ``config``, no aggregate result —
not credited, not against the engine (the policy's ``harness-campaign-config``)."""

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
    CAMPAIGN_CONFIG,
    NO_AGGREGATE,
    BenchmarkSpec,
    benchmark_gate_payload,
    run_benchmark,
)
from ledger.collectors.corpus import corpus_digest
from ledger.collectors.semantic import SemanticSpec, run_semantic, semantic_gate_payload
from ledger.entries import validate_payload
from ledger.policy.loader import load_policy
from tests.engines.stub_openai import StubConfig, build_app, free_port

LONG = "LONG"  # a prompt holding this is refused as the engine refuses one its context cannot hold
VLLM = (
    "This model's maximum context length is 8 tokens. However, your request has 9 input tokens. Please "
    "reduce the length of the input messages."
)
LLAMA = "the request exceeds the available context size, try increasing it"


@pytest.fixture(scope="module")
def params() -> dict[str, Any]:
    return dict(load_policy("backend-qualification").params)


@contextlib.contextmanager
def refusing_stub(status: int, message: str, cfg: StubConfig | None = None) -> Iterator[str]:
    """The shared stub engine, behind an ASGI wrapper that answers every completion request whose body holds
    ``LONG`` with ``status`` and vLLM's error object (``{"object": "error", "message": …}``)."""
    app = build_app(cfg or StubConfig(answers={"short question": "yes"}))

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].endswith("/completions"):
            await app(scope, receive, send)
            return
        body, more = b"", True
        while more:
            msg = await receive()
            body += msg.get("body", b"")
            more = msg.get("more_body", False)
        if LONG.encode() in body:
            err = {"object": "error", "message": message, "type": "BadRequestError", "code": status}
            await JSONResponse(err, status_code=status)(scope, receive, send)
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
    return BenchmarkSpec(path, corpus_digest(path), concurrency=(1,), requests_per_level=4, **kw)


def _semantic(tmp_path: Path, prompts: list[str]) -> SemanticSpec:
    path = tmp_path / "semantic.jsonl"
    rows = [
        {
            "id": f"s{i}",
            "messages": [{"role": "user", "content": p}],
            "checks": [{"type": "contains", "value": "y"}],
        }
        for i, p in enumerate(prompts)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return SemanticSpec(path, corpus_digest(path))


@pytest.mark.parametrize("message", [VLLM, LLAMA], ids=["vllm", "llama-server"])
def test_benchmark_request_refused_for_context_length_counted_as_engine_error(
    tmp_path: Path, params: dict[str, Any], message: str
) -> None:
    """The refused request stops the run as the campaign's configuration: outcome config, no aggregate result,
    the request recorded with its refusal and counted apart (``counts.refused``)."""
    with refusing_stub(400, message) as base:
        result = run_benchmark(
            _benchmark(tmp_path, ["short question", f"{LONG} question"]),
            base,
            out_dir=tmp_path / "o",
            params=params,
        )
    assert result.outcome == CAMPAIGN_CONFIG == "config", result.stopped
    assert result.aggregate is None and not result.valid
    assert "campaign's configuration (context: HTTP 400" in (result.stopped or "")
    assert [r.refusal for r in result.records] == [None, "context"]
    assert result.records[1].fault is False
    payload = benchmark_gate_payload(result, {"ttft_ms.p95@c1": {"max": 1000.0}})
    validate_payload("gate.result", 1, payload)
    assert payload["bounds"]["outcome"] == "config" and payload["status"] == "failed"
    assert payload["counts"]["refused"] == 1 and payload["counts"]["errors"] == 1
    assert payload["reason"].startswith(
        f"{NO_AGGREGATE}: the engine refused c1 repetition 0 request 1 (prompt p1)"
    )
    lines = [json.loads(x) for x in (tmp_path / "o" / "benchmark-requests.jsonl").read_text().splitlines()]
    assert [x["refusal"] for x in lines] == [None, "context"]


@pytest.mark.parametrize(
    ("status", "message", "outcome", "fault"),
    [
        (400, "Invalid request: unknown field 'foo'", "completed", False),  # a 400 for anything else
        (500, VLLM, "fault", True),  # the same text with a 5xx: the engine failed it
    ],
    ids=["400-other-text", "500-same-text"],
)
def test_benchmark_other_refusals_stay_the_engines(
    tmp_path: Path, params: dict[str, Any], status: int, message: str, outcome: str, fault: bool
) -> None:
    with refusing_stub(status, message) as base:
        result = run_benchmark(
            _benchmark(tmp_path, ["short question", f"{LONG} question"]),
            base,
            out_dir=tmp_path / "o",
            params=params,
        )
    assert result.outcome == outcome, result.stopped
    refused = [r for r in result.records if r.error is not None]
    assert refused and all(r.refusal is None and r.fault is fault for r in refused)


def test_benchmark_without_the_policys_params_counts_the_refusal_as_an_error(tmp_path: Path) -> None:
    """Neighbour: the params not given (a caller that does not pass the policy's): nothing is excused — the
    request is an error of the run, as before (fail closed: never a pass)."""
    with refusing_stub(400, VLLM) as base:
        result = run_benchmark(
            _benchmark(tmp_path, ["short question", f"{LONG} question"]), base, out_dir=tmp_path / "o"
        )
    assert result.outcome == "completed"
    assert not result.valid and any("error" in why for why in result.invalid_reasons), result.invalid_reasons
    assert all(r.refusal is None for r in result.records)


def test_semantic_item_refused_for_context_length_counted_as_failed_item(
    tmp_path: Path, params: dict[str, Any]
) -> None:
    with refusing_stub(400, VLLM) as base:
        result = run_semantic(
            _semantic(tmp_path, ["short question", f"{LONG} question", "short question"]),
            base,
            out_dir=tmp_path / "o",
            params=params,
        )
    assert result.outcome == "config", result.stopped
    assert [i.id for i in result.items] == ["s0"]  # the refused item is not scored; the run stops there
    assert result.score is None
    assert "item s1 for the campaign's configuration (context: HTTP 400" in (result.stopped or "")
    payload = semantic_gate_payload(result, min_score=1.0)
    validate_payload("gate.result", 1, payload)
    assert payload["bounds"]["outcome"] == "config" and payload["counts"]["failed"] == 0


def test_semantic_without_the_policys_params_fails_the_item(tmp_path: Path) -> None:
    with refusing_stub(400, VLLM) as base:
        result = run_semantic(
            _semantic(tmp_path, ["short question", f"{LONG} question"]), base, out_dir=tmp_path / "o"
        )
    assert result.outcome == "completed"
    assert [i.passed for i in result.items] == [True, False]
