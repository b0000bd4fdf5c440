"""Fix 114 (stop 45): llama-cpp-python's streamed context overflow in the harnesses.

A streamed benchmark / semantic request whose prompt the campaign's ``--n_ctx`` cannot hold got HTTP 200
and then no event stream (llama-cpp-python 0.3.36 raises ``ValueError: Requested tokens (N) exceed context
window of M`` inside the stream: "Exception in ASGI application"), or a stream cut mid-answer ("could not
broadcast input array" where the prompt fits and prompt + max_tokens does not), and was counted as the
engine's error or fault. The non-streamed request gets a clean 400 (a refusal). Now a request that failed
without a completion is sized as the probes are (the same body, not streamed, max_tokens 1:
``usage.prompt_tokens``, or the engine's refusal of that too), and one whose prompt and max_tokens the
launched context cannot hold is the campaign's configuration: ``refusal`` "context", outcome ``config``,
``counts.refused``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ledger.answers import HARNESS_REQUEST, REFUSAL_CONTEXT, context_record, refusal
from ledger.collectors.benchmark import (
    CAMPAIGN_CONFIG,
    STREAM_CUT,
    BenchmarkSpec,
    RequestRecord,
    benchmark_gate_payload,
    run_benchmark,
    sizable,
)
from ledger.collectors.corpus import corpus_digest
from ledger.collectors.semantic import SemanticSpec, run_semantic
from ledger.entries import validate_payload
from ledger.policy.loader import load_policy

from .conftest import ensure_engine, free_port

PARAMS: dict[str, Any] = {
    "refused_http_statuses": [401, 403],
    "context_refused_http_statuses": [400],
    "context_refusal_patterns": ["maximum context length is [0-9]+ tokens"],
}
NO_STREAM = "the answer is no event stream (no data: line): ''"
SIZING_400 = (
    400,
    "HTTP 400: This model's maximum context length is 256 tokens. However, you requested 472 tokens (471 in "
    "the messages, 1 in the completion). Please reduce the length of the messages or completion.",
)


def _request(**over: Any) -> dict[str, Any]:
    """What the harness passes ``refusal`` of a request llama-cpp-python cut (``refused_by_campaign``)."""
    payload: dict[str, Any] = {
        "check": HARNESS_REQUEST,
        "http_status": 200,
        "error": STREAM_CUT,
        "count": 0,
        "prompt_count": 0,
        "max_tokens": 64,
        "details": {"context": context_record("--n_ctx", 128, 107)},
    }
    payload.update(over)
    return payload


# ---------------------------------------------------------------- the judgement: ledger.answers.refusal
def test_streamed_request_cut_beyond_the_campaigns_context_is_a_context_refusal_not_a_fault() -> None:
    assert refusal(_request(), PARAMS) == REFUSAL_CONTEXT  # 107 + 64 > 128
    assert refusal(_request(http_status=None, error="ServerDisconnectedError"), PARAMS) == REFUSAL_CONTEXT
    assert (
        refusal(_request(http_status=500, error="HTTP 500: could not broadcast"), PARAMS) == REFUSAL_CONTEXT
    )


def test_request_whose_sizing_the_engine_refused_for_the_context_is_a_context_refusal() -> None:
    """llama-cpp-python's "Requested tokens (N) exceed context window of M": the prompt alone does not fit,
    so the sizing request (max_tokens 1) is refused with the 400 the policy knows."""
    sized = {"context": context_record("--n_ctx", 128, None, SIZING_400)}
    assert refusal(_request(error=NO_STREAM, details=sized), PARAMS) == REFUSAL_CONTEXT


@pytest.mark.parametrize(
    "sizing",
    [
        pytest.param((500, SIZING_400[1]), id="sizing-500"),
        pytest.param((400, "HTTP 400: unknown field"), id="sizing-other-400"),
    ],
)
def test_sizing_failed_otherwise_excuses_nothing(sizing: tuple[int, str]) -> None:
    sized = {"context": context_record("--n_ctx", 128, None, sizing)}
    assert refusal(_request(details=sized), PARAMS) is None


@pytest.mark.parametrize(
    "over",
    [
        pytest.param({"details": {"context": context_record("--n_ctx", 256, 107)}}, id="fits"),
        pytest.param({"details": {}}, id="context-dropped"),
        pytest.param({"details": {"ctx": context_record("--n_ctx", 128, 107)}}, id="context-renamed"),
        pytest.param({"details": {"context": context_record("--n_ctx", 128, None)}}, id="not-sized"),
        pytest.param(
            {"details": {"context": {"option": "--n_ctx", "length": "128", "prompt_tokens": 107}}},
            id="length-text",
        ),
        pytest.param({"max_tokens": None}, id="max-tokens-dropped"),
        pytest.param({"max_tokens": True}, id="max-tokens-bool"),
        pytest.param({"prompt_count": 1, "count": 1}, id="prompt-answered-before"),
        pytest.param({"count": "0"}, id="count-text"),
        pytest.param({"error": None}, id="no-error"),
        pytest.param({"check": "models"}, id="not-a-sized-request"),
    ],
)
def test_streamed_cut_not_shown_beyond_the_context_stays_the_engines(over: dict[str, Any]) -> None:
    assert refusal(_request(**over), PARAMS) is None


def test_streamed_context_refusal_is_held_to_the_launched_context() -> None:
    assert refusal(_request(), PARAMS, launched=("--n_ctx", 128)) == REFUSAL_CONTEXT
    assert refusal(_request(), PARAMS, launched=("--n_ctx", 512)) is None
    assert refusal(_request(), PARAMS, launched=None) is None
    sized = {"context": context_record("--n_ctx", 128, None, SIZING_400)}
    assert refusal(_request(details=sized), PARAMS, launched=("--n_ctx", 64)) is None


def test_probe_statuses_unchanged_a_2xx_probe_is_never_refused() -> None:
    probe = _request(check="structured", http_status=200)
    assert refusal(probe, PARAMS) is None


# ---------------------------------------------------------------- which requests the harness sizes
def _rec(**over: Any) -> RequestRecord:
    rec = RequestRecord("p", 1, 0, 0, "t", 0.0)
    for k, v in over.items():
        setattr(rec, k, v)
    return rec


def test_only_requests_failed_without_a_completion_are_sized() -> None:
    assert sizable(_rec(http_status=200, error=STREAM_CUT, fault=True))
    assert sizable(_rec(http_status=200, error=NO_STREAM))
    assert sizable(_rec(http_status=None, error="ServerDisconnectedError: x", fault=True, unanswered=True))
    assert sizable(_rec(http_status=500, error="HTTP 500: x", fault=True))
    assert not sizable(_rec(http_status=200))  # passed: a passing run costs nothing
    assert not sizable(_rec(http_status=400, error="HTTP 400: x"))  # the engine's own words
    assert not sizable(_rec(http_status=200, error="timeout after 5 s (TimeoutError)"))
    assert not sizable(_rec(http_status=200, error="finish_reason 'length' after 3", finish_reason="length"))


# ---------------------------------------------------------------- slow: the real llama-cpp-python
SHORT = "hi"
TOO_LONG = "word " * 60  # 471 tokens as the tiny model counts them: beyond the 256 llama.cpp rounds 128 up to


@pytest.fixture(scope="module")
def small_engine() -> Iterator[str]:
    model = Path(ensure_engine("trained")["TINY_TRAINED_GGUF"])
    if not model.is_file():
        pytest.skip("no tiny trained GGUF")
    python = ensure_engine("llamacpp")["LLAMACPP_PYTHON"]
    port = free_port()
    argv = [python, "-m", "llama_cpp.server", "--model", str(model), "--model_alias", "tiny"]
    proc = subprocess.Popen(
        [*argv, "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "128"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, "llama.cpp server exited"
            try:
                if httpx.get(url + "/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "llama.cpp server not ready in 120 s"
            time.sleep(0.2)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _corpus(tmp_path: Path, prompts: list[str], **row: Any) -> Path:
    path = tmp_path / "corpus.jsonl"
    rows = [
        {"id": f"p{i}", "messages": [{"role": "user", "content": p}], **row} for i, p in enumerate(prompts)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.slow
def test_benchmark_request_llama_cpp_python_cut_beyond_n_ctx_is_the_campaigns_refusal(
    small_engine: str, tmp_path: Path
) -> None:
    params = dict(load_policy("backend-qualification").params)
    path = _corpus(tmp_path, [SHORT, TOO_LONG], max_tokens=8)
    spec = BenchmarkSpec(path, corpus_digest(path), concurrency=(1,), requests_per_level=2, model="tiny")
    result = run_benchmark(
        spec, small_engine, out_dir=tmp_path / "o", params=params, context=("--n_ctx", 128)
    )
    assert result.outcome == CAMPAIGN_CONFIG, result.stopped
    cut = result.records[1]
    assert cut.http_status == 200 and cut.refusal == REFUSAL_CONTEXT and cut.max_tokens == 8
    assert cut.context is not None and cut.context["sizing"]["http_status"] == 400, cut.context
    payload = benchmark_gate_payload(result, {"ttft_ms.p95@c1": {"max": 1000.0}})
    validate_payload("gate.result", 1, payload)
    assert payload["bounds"]["outcome"] == "config" and payload["counts"]["refused"] == 1
    lines = [json.loads(x) for x in (tmp_path / "o" / "benchmark-requests.jsonl").read_text().splitlines()]
    assert lines[0]["context"] is None  # answered: never sized
    assert lines[1]["context"]["option"] == "--n_ctx" and lines[1]["refusal"] == "context"


@pytest.mark.slow
def test_without_the_launched_context_the_cut_request_stays_the_engines(
    small_engine: str, tmp_path: Path
) -> None:
    params = dict(load_policy("backend-qualification").params)
    path = _corpus(tmp_path, [SHORT, TOO_LONG], max_tokens=8)
    spec = BenchmarkSpec(path, corpus_digest(path), concurrency=(1,), requests_per_level=2, model="tiny")
    result = run_benchmark(spec, small_engine, out_dir=tmp_path / "o", params=params)
    assert result.outcome != CAMPAIGN_CONFIG
    assert all(r.refusal is None and r.context is None for r in result.records)


@pytest.mark.slow
def test_semantic_item_llama_cpp_python_cut_beyond_n_ctx_is_the_campaigns_refusal(
    small_engine: str, tmp_path: Path
) -> None:
    params = dict(load_policy("backend-qualification").params)
    path = _corpus(tmp_path, [TOO_LONG], checks=[{"type": "contains", "value": "y"}])
    result = run_semantic(
        SemanticSpec(path, corpus_digest(path), model="tiny"),
        small_engine,
        out_dir=tmp_path / "o",
        params=params,
        context=("--n_ctx", 128),
    )
    assert result.outcome == CAMPAIGN_CONFIG, result.stopped
    assert result.refused == ["p0"]
    assert result.requests[0].refusal == REFUSAL_CONTEXT
