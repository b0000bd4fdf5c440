"""Fix 160 (audit 103): what the harnesses' stream reader (``benchmark.send_request``, shared by the semantic
harness) takes from an answer's event stream, kept as regressions named after each finding.

f1 — usage below the tokens streamed: a streamed answer of 8 chunks with text whose final usage said
``completion_tokens: 1`` was a completed request with output_tokens 1 and no TPOT, left out of the TPOT
distribution its bound judged: an engine 30 ms per token on half its requests passed a 20 ms bound its honest
twin failed. Each chunk with text is at least one token (vLLM may send several tokens in one, so usage above
the chunks is the answer's own): usage below them is an answer that contradicts itself — a plain request
error naming both counts, as a usage count above max_tokens is, never a completed request.

f2 — choices merged: chunks carrying choices of index 0 and 1 (an n=2 answer to a request that asked for one)
were interleaved into one answer, and an answer of index 1 alone passed. The harnesses ask for one answer;
vLLM, SGLang, llama.cpp and llama-cpp-python all stream it as ``"index": 0``: a chunk of more than one
choice, or of a choice whose index is missing, mistyped or not 0, is a malformed stream (a request error).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from ledger.collectors.benchmark import (
    RequestRecord,
    benchmark_gate_payload,
    http_session,
    run_benchmark,
    send_request,
)
from ledger.collectors.semantic import run_semantic
from ledger.entries import validate_payload

from .test_audit10_harness import BOUNDS, MODEL, Reply, _corpus, _semantic_spec, _spec, one, serve, sse

PIECES = ["one", " two", " three", " four"]


def _stream(chunks: list[dict[str, Any]], *, done: bool = True) -> Reply:
    """An event stream of exactly ``chunks`` (each naming the model), then ``[DONE]``."""
    text = "".join(f"data: {json.dumps({'model': MODEL, **c})}\n\n" for c in chunks)
    return 200, "text/event-stream", (text + ("data: [DONE]\n\n" if done else "")).encode()


def _usage(n: Any) -> dict[str, Any]:
    return {"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": n, "total_tokens": 9}}


def _content(p: str, *, finish: str | None = None, **choice: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {"content": p}, "finish_reason": finish, **choice}]}


def _reasoning(p: str) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {"reasoning_content": p}, "finish_reason": None}]}


def _completions(reply: Reply, max_tokens: int = 8) -> RequestRecord:
    """One streamed request to the completions endpoint (its chunks carry ``text``)."""
    with serve(lambda _b, _n: reply) as base:

        async def go() -> RequestRecord:
            rec = RequestRecord("p", 1, 0, 0, "t", 0.0)
            body = {"prompt": "q", "max_tokens": max_tokens, "stream": True}
            async with http_session(2, 10) as client:
                return await send_request(
                    client,
                    base + "/v1/completions",
                    body,
                    rec,
                    clock_origin=time.perf_counter(),
                    timeout_s=10,
                )

        return asyncio.run(go())


# --- f1: usage below the chunks with text streamed ------------------------------------------------------


def test_fix160_f1_usage_of_1_on_8_text_chunks_is_a_request_error_naming_both_counts() -> None:
    """The audit's answer: 8 chunks with text, usage 1 — no completed request with output_tokens 1."""
    pieces = [f" tok{i}" for i in range(8)]
    rec = one(sse(pieces, usage=1), max_tokens=16)
    assert not rec.ok and not rec.fault, rec.error
    assert "usage.completion_tokens is 1" in (rec.error or "") and "8 chunks with text" in (rec.error or "")
    assert rec.output_tokens is None and rec.tokens_from is None and rec.tpot_ms is None


def test_fix160_f1_neighbour_usage_equal_to_the_chunks_is_the_count() -> None:
    rec = one(sse(PIECES, usage=4))
    assert rec.ok, rec.error
    assert (rec.output_tokens, rec.tokens_from) == (4, "usage") and rec.tpot_ms is not None


def test_fix160_f1_neighbour_usage_above_the_chunks_is_the_count() -> None:
    """vLLM may stream several tokens in one chunk: a count above the chunks is the answer's own."""
    rec = one(sse(PIECES, usage=7))
    assert rec.ok, rec.error
    assert (rec.output_tokens, rec.tokens_from) == (7, "usage")


@pytest.mark.parametrize("usage", [3, 1])
def test_fix160_f1_neighbour_usage_below_the_chunks_is_a_request_error(usage: int) -> None:
    """Below by one, and far below: each contradicts the answer streamed."""
    rec = one(sse(PIECES, usage=usage))
    assert not rec.ok and not rec.fault, rec.error
    assert f"usage.completion_tokens is {usage}, fewer than the 4 chunks with text" in (rec.error or "")
    assert rec.output_tokens is None


def test_fix160_f1_neighbour_usage_zero_with_text_stays_no_output() -> None:
    """Zero beside text: a request error as before (audit 10's "no output"), never completed."""
    rec = one(sse(PIECES, usage=0))
    assert not rec.ok and not rec.fault, rec.error
    assert (rec.error or "").startswith("no output: text with 0 completion token(s) (usage)"), rec.error
    assert rec.tpot_ms is None


def test_fix160_f1_neighbour_completions_endpoint_reads_the_same() -> None:
    chunks = [{"choices": [{"index": 0, "text": p, "finish_reason": None}]} for p in PIECES]
    chunks += [{"choices": [{"index": 0, "text": "", "finish_reason": "stop"}]}, _usage(2)]
    rec = _completions(_stream(chunks))
    assert not rec.ok and "fewer than the 4 chunks with text" in (rec.error or ""), rec.error
    chunks[-1] = _usage(4)
    rec = _completions(_stream(chunks))
    assert rec.ok and rec.output_tokens == 4, rec.error


def test_fix160_f1_neighbour_empty_deltas_are_no_tokens_counted() -> None:
    """Chunks with no text (vLLM's role chunk, part of a UTF-8 character, the finish chunk) set no floor."""
    chunks = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
    ]
    chunks += [
        _content(""),
        _content("a"),
        _content(""),
        _content(" b"),
        _content("", finish="stop"),
        _usage(2),
    ]
    rec = one(_stream(chunks))
    assert rec.ok and rec.output_tokens == 2, rec.error


def test_fix160_f1_neighbour_reasoning_chunks_count_as_tokens() -> None:
    """Reasoning is output: 3 reasoning chunks and 2 answer chunks are at least 4 tokens (the first answer
    chunk right after reasoning may be the rest of the same token: llama.cpp's server and SGLang send a
    step's reasoning and answer parts as two chunks)."""
    base = [_reasoning("r1"), _reasoning(" r2"), _reasoning(" r3"), _content("A"), _content(" B")]
    tail = [_content("", finish="stop")]
    ok = one(_stream([*base, *tail, _usage(4)]))
    assert ok.ok and ok.output_tokens == 4, ok.error
    low = one(_stream([*base, *tail, _usage(3)]))
    assert not low.ok and "fewer than the 4 chunks with text" in (low.error or ""), low.error
    # reasoning and answer in one delta (vLLM) is one chunk, one token at least
    both = {
        "choices": [{"index": 0, "delta": {"reasoning_content": "r", "content": "A"}, "finish_reason": None}]
    }
    rec = one(_stream([both, _content(" B", finish="stop"), _usage(2)]))
    assert rec.ok and rec.output_tokens == 2, rec.error
    rec = one(_stream([both, _content(" B", finish="stop"), _usage(1)]))
    assert not rec.ok and "fewer than the 2 chunks with text" in (rec.error or ""), rec.error


def test_fix160_f1_neighbour_usage_above_the_chunks_with_token_ids_is_the_count() -> None:
    """Token ids streamed (two a chunk here) leave the count the usage's: above the chunks, accepted."""
    chunks = [_content(p, token_ids=[i, 100 + i]) for i, p in enumerate(PIECES)]
    rec = one(_stream([*chunks, _content("", finish="stop"), _usage(8)]))
    assert rec.ok and rec.output_tokens == 8, rec.error
    rec = one(_stream([*chunks, _content("", finish="stop"), _usage(3)]))
    assert not rec.ok and "fewer than the 4 chunks with text" in (rec.error or ""), rec.error


@pytest.mark.parametrize("usage", ["4", 4.0, True])
def test_fix160_f1_neighbour_a_mistyped_usage_count_stays_an_error(usage: Any) -> None:
    rec = one(sse(PIECES, usage=usage))
    assert not rec.ok and "not a whole number" in (rec.error or ""), rec.error


def test_fix160_f1_neighbour_a_usage_without_its_count_stays_an_error() -> None:
    """The field dropped (or renamed): no count, never the chunks' count in its place."""
    chunks = [_content(p) for p in PIECES] + [_content("", finish="stop")]
    for usage in ({"prompt_tokens": 4}, {"prompt_tokens": 4, "output_tokens": 4}):
        rec = one(_stream([*chunks, {"choices": [], "usage": usage}]))
        assert not rec.ok and "usage.completion_tokens is None" in (rec.error or ""), rec.error


def test_fix160_f1_no_usage_counts_the_chunks_as_before() -> None:
    """llama-cpp-python streams no usage: the chunks with text are the count (unchanged)."""
    rec = one(sse(PIECES, usage=None))
    assert rec.ok and (rec.output_tokens, rec.tokens_from) == (4, "chunks"), rec.error


def test_fix160_f1_a_deflating_engine_fails_the_benchmark_it_passed(tmp_path: Path) -> None:
    """Every answer claims 1 token for 4 chunks: every request is an error, none is left out of a figure
    while counted completed; the gate fails (error rate), never passes on the requests that remain."""
    corpus = _corpus(tmp_path)
    with serve(lambda _b, _n: sse(PIECES, usage=1)) as base:
        result = run_benchmark(_spec(corpus), base, out_dir=tmp_path / "o")
    assert result.records and all(not r.ok and not r.fault for r in result.records)
    assert all("fewer than the 4 chunks with text" in (r.error or "") for r in result.records)
    payload = benchmark_gate_payload(result, BOUNDS)
    validate_payload("gate.result", 1, payload)
    assert payload["status"] == "failed"
    stored = [
        json.loads(line) for line in (tmp_path / "o" / "benchmark-requests.jsonl").read_text().splitlines()
    ]
    assert stored and all(r["error"] is not None and r["output_tokens"] is None for r in stored)


def test_fix160_f1_the_semantic_harness_reads_the_same(tmp_path: Path) -> None:
    with serve(lambda _b, _n: sse(["READY", " now"], usage=1)) as base:
        sem = run_semantic(_semantic_spec(tmp_path), base, out_dir=tmp_path / "s")
    [item] = sem.items
    assert not item.passed and "fewer than the 2 chunks with text" in (item.error or ""), item.error


# --- f2: choices of another answer ------------------------------------------------------------------------


def _with_index(index: Any, *, drop: bool = False) -> Reply:
    def chunk(_i: int, p: str) -> dict[str, Any]:
        c: dict[str, Any] = {"delta": {"content": p}, "finish_reason": None}
        if not drop:
            c["index"] = index
        return {"choices": [c]}

    return sse(PIECES, chunk=chunk)


def test_fix160_f2_two_choices_in_a_chunk_are_a_malformed_stream_not_one_answer() -> None:
    """The audit's answer: choices 0 and 1 on every chunk were read as one interleaved text."""

    def chunk(_i: int, p: str) -> dict[str, Any]:
        return {"choices": [{"index": k, "delta": {"content": p}, "finish_reason": None} for k in (0, 1)]}

    rec = one(sse(PIECES, chunk=chunk))
    assert not rec.ok and not rec.fault, rec.error
    assert "a chunk with 2 choices (index 0, 1)" in (rec.error or ""), rec.error
    assert rec.text is None and rec.output_tokens is None


def test_fix160_f2_neighbour_index_0_is_the_answer() -> None:
    rec = one(_with_index(0))
    assert rec.ok and rec.text == "".join(PIECES), rec.error


@pytest.mark.parametrize(
    ("index", "drop", "why"),
    [
        (1, False, "a choice of index int 1"),
        ("0", False, "a choice of index str '0'"),
        (0.0, False, "a choice of index float 0.0"),
        (False, False, "a choice of index bool False"),
        (None, False, "a choice of index NoneType None"),
        (-1, False, "a choice of index int -1"),
        (None, True, "a choice with no index"),
    ],
)
def test_fix160_f2_neighbour_a_choice_not_of_index_0_is_a_malformed_stream(
    index: Any, drop: bool, why: str
) -> None:
    """Index 1 alone on every chunk, mistyped (text, float, boolean, null), negative, or missing."""
    rec = one(_with_index(index, drop=drop))
    assert not rec.ok and not rec.fault and why in (rec.error or ""), rec.error
    assert rec.text is None


def test_fix160_f2_neighbour_another_index_on_the_finish_chunk_alone() -> None:
    """The text of index 0, the finish_reason of index 1: the answer's end is another answer's."""
    chunks = [_content(p) for p in PIECES]
    chunks += [{"choices": [{"index": 1, "delta": {}, "finish_reason": "stop"}]}, _usage(4)]
    rec = one(_stream(chunks))
    assert not rec.ok and "a choice of index int 1" in (rec.error or ""), rec.error


def test_fix160_f2_neighbour_completions_endpoint_reads_the_same() -> None:
    chunks = [{"choices": [{"index": k, "text": p, "finish_reason": None} for k in (0, 1)]} for p in PIECES]
    chunks += [{"choices": [{"index": 0, "text": "", "finish_reason": "stop"}]}, _usage(4)]
    rec = _completions(_stream(chunks))
    assert not rec.ok and "a chunk with 2 choices" in (rec.error or ""), rec.error


def test_fix160_f2_neighbour_an_empty_choices_list_then_a_good_chunk_is_the_answer() -> None:
    """An empty choices list (the usage chunk's form) is no step of output: not timed, no text — kept."""
    chunks = [{"choices": []}, *[_content(p) for p in PIECES], _content("", finish="stop"), _usage(4)]
    rec = one(_stream(chunks))
    assert rec.ok and rec.text == "".join(PIECES) and rec.output_tokens == 4, rec.error
    # timed at the 4 chunks with a token, not at the empty list nor the finish chunk with no token (fix 169)
    assert len(rec.itl_ms) == 3


def test_fix160_f2_a_two_choice_engine_fails_the_benchmark(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path)

    def chunk(_i: int, p: str) -> dict[str, Any]:
        return {"choices": [{"index": k, "delta": {"content": p}, "finish_reason": None} for k in (0, 1)]}

    with serve(lambda _b, _n: sse(PIECES, chunk=chunk)) as base:
        result = run_benchmark(_spec(corpus), base, out_dir=tmp_path / "o")
    assert result.records and all(not r.ok and r.text is None for r in result.records)
    payload = benchmark_gate_payload(result, BOUNDS)
    assert payload["status"] == "failed"


def test_fix160_f2_the_semantic_harness_reads_the_same(tmp_path: Path) -> None:
    with serve(lambda _b, _n: _with_index(1)) as base:
        sem = run_semantic(_semantic_spec(tmp_path), base, out_dir=tmp_path / "s")
    [item] = sem.items
    assert not item.passed and "a choice of index int 1" in (item.error or ""), item.error
