"""Fix 162 (issue 11, audit 105 f1): a usage count above the token ids the stream itself carried.

A stream of 8 chunks, each carrying one token id (vLLM's ``return_token_ids``, the harness's
``request_token_ids``), whose final usage said ``completion_tokens: 64`` was a completed request of 64
tokens: its TPOT a ninth of the same stream's with usage 8 — fix 160 compared usage with the chunks with text
(a floor: vLLM may stream several tokens a chunk) and max_tokens, never with the ids. Where every chunk with
text carried ids, their number is the exact count: a usage count other than it, above or below, is an answer
that contradicts itself — a request error naming both counts. Ids on some chunks with text only are no count:
the stream is judged as one without ids (fix 160's rule), never by the ids it happened to carry.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ledger.collectors.benchmark import BenchmarkSpec, benchmark_gate_payload, run_benchmark
from ledger.collectors.corpus import corpus_digest

from .test_audit10_harness import BOUNDS, _corpus, one, serve
from .test_fix160_stream_reader_usage_and_choices import _content, _reasoning, _stream, _usage

PIECES = ["one", " two", " three", " four"]


def _ids(ids_per_chunk: list[list[int] | None], usage: Any, *, finish: str = "stop") -> list[dict[str, Any]]:
    chunks = [
        _content(p, token_ids=ids) if ids is not None else _content(p)
        for p, ids in zip(PIECES, ids_per_chunk, strict=True)
    ]
    return [*chunks, _content("", finish=finish), *([_usage(usage)] if usage is not None else [])]


ONE_EACH = [[10], [11], [12], [13]]


# --- the finding ----------------------------------------------------------------------------------------


def test_fix162_f1_usage_above_the_token_ids_streamed_is_a_request_error() -> None:
    rec = one(_stream(_ids(ONE_EACH, 64)), max_tokens=64)
    assert not rec.ok and not rec.fault
    assert "usage.completion_tokens is 64, but the stream carried 4 token ids" in (rec.error or ""), rec.error
    assert rec.output_tokens is None and rec.tpot_ms is None


def test_fix162_f1_usage_a_little_above_the_ids_within_max_tokens_is_a_request_error() -> None:
    rec = one(_stream(_ids(ONE_EACH, 6)), max_tokens=8)
    assert not rec.ok and "is 6, but the stream carried 4 token ids" in (rec.error or ""), rec.error


def test_fix162_f1_the_benchmark_of_an_inflating_engine_fails_its_gate(tmp_path: Path) -> None:
    """Every answer's usage above its ids: every request an error, the gate fails (no fast TPOT)."""
    with serve(lambda _b, _n: _stream(_ids(ONE_EACH, 8))) as base:
        result = run_benchmark(
            _spec_one_level(tmp_path, request_token_ids=True), base, out_dir=tmp_path / "o"
        )
    assert result.records and all(not r.ok for r in result.records)
    assert all("but the stream carried 4 token ids" in (r.error or "") for r in result.records)
    assert benchmark_gate_payload(result, BOUNDS)["status"] == "failed"


def _spec_one_level(tmp_path: Path, **kw: Any) -> BenchmarkSpec:
    corpus = _corpus(tmp_path)
    return BenchmarkSpec(
        corpus, corpus_digest(corpus), concurrency=(1,), requests_per_level=2, repetitions=1, **kw
    )


# --- neighbours -----------------------------------------------------------------------------------------


def test_fix162_f1_neighbour_ids_on_every_chunk_and_usage_equal_is_a_completed_request() -> None:
    rec = one(_stream(_ids(ONE_EACH, 4)))
    assert rec.ok and (rec.output_tokens, rec.tokens_from) == (4, "usage"), rec.error
    assert rec.token_ids_digest


def test_fix162_f1_neighbour_several_ids_a_chunk_and_usage_equal_passes() -> None:
    """vLLM may stream several tokens in one chunk: 8 ids on 4 chunks, usage 8 — the answer's own."""
    rec = one(_stream(_ids([[1, 2], [3, 4], [5, 6], [7, 8]], 8)))
    assert rec.ok and rec.output_tokens == 8, rec.error


def test_fix162_f1_neighbour_usage_below_the_ids_but_not_the_chunks_is_a_request_error() -> None:
    rec = one(_stream(_ids([[1, 2], [3, 4], [5, 6], [7, 8]], 5)))
    assert not rec.ok and "is 5, but the stream carried 8 token ids" in (rec.error or ""), rec.error


def test_fix162_f1_neighbour_usage_below_the_chunks_keeps_fix160s_words() -> None:
    rec = one(_stream(_ids([[1, 2], [3, 4], [5, 6], [7, 8]], 3)))
    assert not rec.ok and "fewer than the 4 chunks with text" in (rec.error or ""), rec.error


def test_fix162_f1_neighbour_ids_on_every_chunk_and_no_usage_count_the_ids() -> None:
    rec = one(_stream(_ids([[1, 2], [3], [4], [5]], None)))
    assert rec.ok and (rec.output_tokens, rec.tokens_from) == (5, "chunks"), rec.error


def test_fix162_f1_neighbour_empty_id_lists_beside_text_contradict_a_usage_count() -> None:
    """Every chunk with text names its ids, and none has any: no count the usage may claim above."""
    rec = one(_stream(_ids([[], [], [], []], 4)))
    assert not rec.ok and "is 4, but the stream carried 0 token ids" in (rec.error or ""), rec.error


def test_fix162_f1_neighbour_reasoning_chunks_count_as_chunks_with_text() -> None:
    """A reasoning chunk without ids beside answer chunks with them: ids on some chunks only."""
    chunks = [_reasoning("hm"), *_ids(ONE_EACH, 9)]
    rec = one(_stream(chunks), max_tokens=16)
    assert rec.ok and rec.output_tokens == 9, rec.error  # fix 160's rule: 9 ≥ 5 chunks


@pytest.mark.parametrize("usage", [6, 64])
def test_fix162_f1_neighbour_ids_on_some_chunks_only_fall_back_to_the_chunks(usage: int) -> None:
    """Ids on 2 of 4 chunks with text are some of the answer's only, no count: fix 160's rule judges
    (usage at or above the chunks, within max_tokens: the answer's own), never the 2 ids."""
    rec = one(_stream(_ids([[1], [2], None, None], usage)), max_tokens=64)
    assert rec.ok and rec.output_tokens == usage, rec.error


def test_fix162_f1_neighbour_ids_on_some_chunks_only_below_the_chunks_still_fails() -> None:
    rec = one(_stream(_ids([[1], [2], None, None], 3)))
    assert not rec.ok and "fewer than the 4 chunks with text" in (rec.error or ""), rec.error


def test_fix162_f1_neighbour_ids_on_some_chunks_only_and_no_usage_count_the_chunks() -> None:
    """No usage: the chunks with text are the count, never the 2 ids (nor a "length" judged by them)."""
    rec = one(_stream(_ids([[1], [2], None, None], None, finish="length")), max_tokens=4)
    assert rec.ok and (rec.output_tokens, rec.tokens_from) == (4, "chunks"), rec.error


def test_fix162_f1_neighbour_length_before_max_tokens_by_the_ids_still_fails() -> None:
    rec = one(_stream(_ids(ONE_EACH, None, finish="length")), max_tokens=8)
    assert not rec.ok and "finish_reason 'length' after 4 of the max_tokens 8" in (rec.error or "")


def test_fix162_f1_neighbour_no_ids_keeps_fix160s_rule() -> None:
    """No ids at all: usage above the chunks is the answer's own (vLLM streams several tokens a chunk)."""
    rec = one(_stream(_ids([None] * 4, 7)))
    assert rec.ok and rec.output_tokens == 7, rec.error


@pytest.mark.parametrize("ids", ["10", [True], [1.0], {"0": 1}])
def test_fix162_f1_neighbour_mistyped_ids_stay_a_malformed_stream(ids: Any) -> None:
    rec = one(_stream(_ids([[10], ids, [12], [13]], 4)))
    assert not rec.ok and "token_ids is not a list of whole numbers" in (rec.error or ""), rec.error
