"""Audit 15: healthy engines the harnesses failed, and engine faults they missed, kept as regressions (named
after each finding).

1. an engine whose ``/v1/models`` lists the approved ``served_name`` second (vLLM ``--served-model-name alias
   name``, a base model and its LoRA adapters) was asked for the first id, and its echoed answers then failed
   the answered-model rules: the collector asks for the approved ``served_name`` wherever it is listed;
2. a reasoning parser's ``delta.reasoning_content`` / ``delta.reasoning`` tokens were no output: a request
   whose ``max_tokens`` ran out while it reasoned was "no output"; reasoning is output, recorded apart, and
   the output digest c1 parity compares covers it;
3. llama.cpp's SSE ``error:`` field (a mid-stream failure) was skipped: the request became "no finish_reason"
   and the run kept loading the engine; it is an error object (5xx or no code: a fault, 4xx: a request error),
   as is an ``event: error`` event's data;
4. ``api = "completions"`` with a chat corpus was accepted and every request sent ``messages`` to
   ``/v1/completions``, read by the chat parser (chosen from the body): the corpus must fit the api, refused
   before anything is recorded, and the parser is the endpoint's;
5. ``requests = true`` / ``repetitions = true`` were read as 1.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from ledger.collectors.benchmark import (
    BenchmarkSpec,
    RequestRecord,
    check_corpus_api,
    http_session,
    load_benchmark_corpus,
    run_benchmark,
    send_request,
)
from ledger.collectors.campaign import load_campaign
from ledger.collectors.corpus import corpus_digest
from ledger.collectors.semantic import run_semantic
from ledger.errors import ConfigError
from ledger.policy.verdict import evaluate
from ledger.recorder import LocalRecorder
from ledger.service import Ledger

from .conftest import entries_of
from .test_audit10_harness import MODEL, Reply, _semantic_spec, _spec, one, serve, sse
from .test_harness_gates import SEMANTIC_ITEMS, gate, policy_with, review_and_accept, run, stub_campaign


@pytest.fixture
def corpus(tmp_path: Path) -> tuple[Path, str]:
    """The semantic corpus test_harness_gates approves (its ``policy_with`` sets the policy to it)."""
    p = tmp_path / "semantic.jsonl"
    p.write_text("".join(json.dumps(i) + "\n" for i in SEMANTIC_ITEMS))
    return p, corpus_digest(p)


def _requests(tmp_path: Path, name: str) -> list[dict[str, Any]]:
    [path] = list((tmp_path / "work").rglob(name))
    return [json.loads(x) for x in path.read_text().splitlines()]


# --- 1. the model the collector asks for ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("served_ids", "served_name"),
    [
        ("", MODEL),  # the control: one id
        (f"alias,{MODEL}", MODEL),  # vLLM --served-model-name alias stub-model
        (f"{MODEL},alias", MODEL),
        (f"{MODEL},adapter", "adapter"),  # a base model and its LoRA adapter: the adapter is approved
    ],
)
def test_an_engine_listing_the_served_name_among_others_is_asked_for_the_served_name(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],
    served_ids: str,
    served_name: str,
) -> None:
    """Regression: /v1/models listed ["alias", "stub-model"]; the probes and both harnesses asked for
    "alias", the engine echoed it, and api-readiness and semantic failed a healthy engine ("answers named
    another model than 'stub-model': alias"). With a LoRA adapter approved the benchmark measured the base."""
    args = ("--echo-model", *(("--served-ids", served_ids) if served_ids else ()))
    path = stub_campaign(tmp_path, tiny_model_dir, corpus, stub_args=args)
    path.write_text(path.read_text().replace(f'served_name = "{MODEL}"', f'served_name = "{served_name}"'))
    policy = policy_with(tmp_path, corpus[1])
    result = run(path, recorder, tmp_path, policy)
    assert [g.status for g in result.gates] == ["passed"] * 9, [
        (g.gate, g.reason) for g in result.gates if g.status != "passed"
    ]
    probes = [e["payload"] for e in entries_of(ledger, "health.probe")]
    asked = {p["check"]: p.get("model_identity") for p in probes if p["check"] != "models"}
    assert {asked[c] for c in ("completion", "structured", "sequential")} == {served_name}
    assert {p["answered_model"] for p in probes if p.get("answered_model")} == {served_name}
    assert {r["model"] for r in _requests(tmp_path, "benchmark-requests.jsonl")} == {served_name}
    assert {r["model"] for r in _requests(tmp_path, "semantic-items.jsonl")} == {served_name}
    bench, sem = gate(ledger, "benchmark"), gate(ledger, "semantic")
    assert bench["payload"]["bounds"]["bindings"]["answered_models"] == served_name
    review_and_accept(ledger, sem["id"], bench["id"])
    v = evaluate(ledger, {"campaign": "harness"}, policy)
    assert v["verdict"] == "QUALIFIED", v["gates"]


def test_an_engine_that_does_not_list_the_served_name_still_fails_the_identity_check(
    tmp_path: Path, tiny_model_dir: Path, ledger: Ledger, recorder: LocalRecorder, corpus: tuple[Path, str]
) -> None:
    path = stub_campaign(
        tmp_path, tiny_model_dir, corpus, stub_args=("--echo-model", "--served-ids", "alias,other")
    )
    result = run(path, recorder, tmp_path, policy_with(tmp_path, corpus[1]))
    failed = next(g for g in result.gates if g.status == "failed")
    assert failed.gate == "api-readiness" and "expected model 'stub-model'" in (failed.reason or "")
    assert {g.gate: g.status for g in result.gates}["benchmark"] == "not_authorized"


# --- 2. reasoning tokens ---------------------------------------------------------------------------------


def _reasoning_chunk(field: str = "reasoning_content") -> Any:
    return lambda _i, p: {"choices": [{"index": 0, "delta": {field: p}, "finish_reason": None}]}


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_a_request_whose_max_tokens_ran_out_in_reasoning_is_output_not_no_output(field: str) -> None:
    """Regression: 8 reasoning tokens, finish "length", usage 8 = max_tokens: "no output: an empty answer
    with 8 completion token(s)" — a healthy reasoning engine failed its benchmark."""
    thoughts = [f" think{i}" for i in range(8)]
    rec = one(sse(thoughts, finish="length", chunk=_reasoning_chunk(field)), max_tokens=8)
    assert rec.ok, rec.error
    assert (rec.text, rec.reasoning, rec.output_tokens) == ("", "".join(thoughts), 8)
    assert rec.ttft_ms is not None and len(rec.itl_ms) >= 7


def test_reasoning_only_output_ending_with_stop_is_a_completed_request() -> None:
    rec = one(sse([" hmm", " done"], chunk=_reasoning_chunk()))
    assert rec.ok, rec.error
    assert rec.reasoning == " hmm done" and rec.text == ""


def test_reasoning_then_an_answer_records_both_and_counts_chunks_of_either_without_usage() -> None:
    def chunk(i: int, p: str) -> dict[str, Any]:
        key = "reasoning_content" if i < 2 else "content"
        return {"choices": [{"index": 0, "delta": {key: p}, "finish_reason": None}]}

    rec = one(sse(["a", "b", "tac"], chunk=chunk, usage=None))
    assert rec.ok, rec.error
    assert (rec.reasoning, rec.text, rec.output_tokens, rec.tokens_from) == ("ab", "tac", 3, "chunks")


def test_no_answer_and_no_reasoning_is_still_no_output() -> None:
    rec = one(sse([], usage=0))
    assert not rec.ok and (rec.error or "").startswith("no output: an empty answer")
    rec = one(sse(["", ""], chunk=_reasoning_chunk(), usage=2))
    assert not rec.ok and (rec.error or "").startswith("no output: an empty answer")


def test_a_delta_carrying_both_reasoning_fields_counts_its_text_once_and_two_texts_are_malformed() -> None:
    same = one(
        sse(
            ["x", "y"],
            chunk=lambda _i, p: {
                "choices": [{"index": 0, "delta": {"reasoning_content": p, "reasoning": p}}]
            },
        )
    )
    assert same.ok and same.reasoning == "xy"
    differ = one(
        sse(
            ["x"],
            chunk=lambda _i, p: {
                "choices": [{"index": 0, "delta": {"reasoning_content": p, "reasoning": "z"}}]
            },
        )
    )
    assert not differ.ok and "different texts" in (differ.error or "")


def test_reasoning_that_is_no_text_is_a_malformed_stream() -> None:
    rec = one(sse(["x"], chunk=lambda _i, _p: {"choices": [{"index": 0, "delta": {"reasoning_content": 7}}]}))
    assert not rec.ok and "delta.reasoning_content" in (rec.error or "")


def test_the_output_digest_c1_parity_compares_covers_the_reasoning() -> None:
    """Parity compares what the engine generated: the same answer reached by other reasoning differs; a
    stream without reasoning keeps the digest of its text alone (as before)."""

    def reasoned(thought: str) -> Reply:
        def chunk(i: int, p: str) -> dict[str, Any]:
            delta = {"reasoning_content": thought} if i == 0 else {"content": p}
            return {"choices": [{"index": 0, "delta": delta}]}

        return sse(["-", "tac"], chunk=chunk)

    a, b, a2 = one(reasoned("think")), one(reasoned("ponder")), one(reasoned("think"))
    assert a.ok and b.ok and a.text == b.text == "tac"
    assert a.output_digest != b.output_digest and a.output_digest == a2.output_digest
    plain = one(sse(["tac"]))
    from ledger.hashing import blake3_hex

    assert plain.output_digest == f"blake3:{blake3_hex(b'tac')}" and plain.reasoning is None
    assert a.output_digest != plain.output_digest


def test_the_semantic_harness_scores_the_answer_and_records_the_reasoning(tmp_path: Path) -> None:
    def chunk(i: int, p: str) -> dict[str, Any]:
        key = "reasoning_content" if i == 0 else "content"
        return {"choices": [{"index": 0, "delta": {key: p}}]}

    with serve(lambda _b, _n: sse(["thinking about it", "READY"], chunk=chunk)) as base:
        sem = run_semantic(_semantic_spec(tmp_path), base, out_dir=tmp_path / "s")
    [item] = sem.items
    assert item.passed and item.text == "READY" and item.reasoning == "thinking about it"
    # reasoning only (max_tokens ran out): scored on its empty answer — a failed item, not an error
    with serve(lambda _b, _n: sse(["hmm"], finish="length", chunk=_reasoning_chunk(), usage=64)) as base:
        sem = run_semantic(_semantic_spec(tmp_path), base, out_dir=tmp_path / "s2")
    [item] = sem.items
    assert not item.passed and item.error is None and item.reasoning == "hmm"
    assert sem.outcome == "completed"


def test_a_healthy_reasoning_engine_passes_the_campaign(
    tmp_path: Path, tiny_model_dir: Path, ledger: Ledger, recorder: LocalRecorder, corpus: tuple[Path, str]
) -> None:
    """The audit's repro: 20 reasoning tokens before every streamed answer, so the benchmark's 8-token
    prompts end "length" in reasoning; every request completes and the campaign qualifies."""
    path = stub_campaign(tmp_path, tiny_model_dir, corpus, stub_args=("--reasoning", "20"))
    policy = policy_with(tmp_path, corpus[1])
    result = run(path, recorder, tmp_path, policy)
    assert [g.status for g in result.gates] == ["passed"] * 9, [
        (g.gate, g.reason) for g in result.gates if g.status != "passed"
    ]
    rows = _requests(tmp_path, "benchmark-requests.jsonl")
    assert all(r["error"] is None for r in rows)
    short = [r for r in rows if r["prompt_id"] == "control-ready"]
    assert short and all(r["finish_reason"] == "length" and r["text"] == "" for r in short)
    assert all(r["reasoning"] and r["output_tokens"] == 8 for r in short)
    bench = gate(ledger, "benchmark")
    assert bench["payload"]["figures"]["c1_parity"] == 1.0
    review_and_accept(ledger, gate(ledger, "semantic")["id"], bench["id"])
    assert evaluate(ledger, {"campaign": "harness"}, policy)["verdict"] == "QUALIFIED"


# --- 3. errors in the event stream --------------------------------------------------------------------


def _stream(*events: str) -> Reply:
    first = 'data: {"model": "stub-model", "choices": [{"index": 0, "delta": {"content": "one"}}]}\n\n'
    return 200, "text/event-stream", (first + "".join(events) + "data: [DONE]\n\n").encode()


LLAMA_500 = 'error: {"code":500,"message":"Compute error.","type":"server_error"}\n\n'


def test_a_llama_cpp_error_field_mid_stream_is_an_engine_fault() -> None:
    """Regression: llama-server's ``error:`` event was skipped: "the stream ended without a finish_reason"."""
    rec = one(_stream(LLAMA_500))
    assert rec.fault and not rec.ok
    assert rec.error == "error in stream: Compute error. (code 500)"


@pytest.mark.parametrize(
    "event",
    [
        'error: {"message":"Compute error."}\n\n',  # no code
        'error: {"error": {"code": 503, "message": "Compute error."}}\n\n',  # wrapped
        "error: Compute error.\n\n",  # no JSON
        'error:{"code":500,"message":"Compute error."}\n\n',  # no space
    ],
)
def test_an_error_field_without_a_client_error_code_is_an_engine_fault(event: str) -> None:
    rec = one(_stream(event))
    assert rec.fault and "Compute error." in (rec.error or "")


def test_an_error_field_before_any_data_is_an_engine_fault() -> None:
    body = (LLAMA_500 + "data: [DONE]\n\n").encode()
    rec = one((200, "text/event-stream", body))
    assert rec.fault and "Compute error." in (rec.error or "")


def test_an_error_field_with_a_4xx_code_is_a_plain_request_error() -> None:
    rec = one(
        _stream('error: {"code":400,"message":"the prompt is too long","type":"invalid_request_error"}\n\n')
    )
    assert not rec.ok and not rec.fault
    assert rec.error == "error in stream: the prompt is too long (code 400)"


@pytest.mark.parametrize(
    ("data", "fault"),
    [
        ('{"message": "Compute error.", "code": 500}', True),
        ('{"error": {"message": "Compute error."}}', True),
        ("Compute error.", True),
        ('{"message": "bad request", "code": 422}', False),
    ],
)
def test_an_error_event_is_an_error_object_whatever_its_data(data: str, fault: bool) -> None:
    rec = one(_stream(f"event: error\ndata: {data}\n\n"))
    assert not rec.ok and rec.fault is fault and (rec.error or "").startswith("error in stream: ")


def test_named_events_that_are_no_error_and_comments_are_read_as_before() -> None:
    reply = sse()
    body = b": ping\n\nevent: message\n" + reply[2].replace(
        b"\n\ndata: [DONE]", b"\n\nevent: done\ndata: [DONE]"
    )
    rec = one((200, "text/event-stream", body))
    assert rec.ok, rec.error
    assert rec.text == "one two three"


def test_a_llama_cpp_error_field_stops_the_benchmark_as_an_engine_fault(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        json.dumps({"id": "p", "messages": [{"role": "user", "content": "q"}], "max_tokens": 8})
    )
    with serve(lambda _b, n: _stream(LLAMA_500) if n >= 3 else sse()) as base:
        bench = run_benchmark(_spec(corpus), base, out_dir=tmp_path / "b")
    assert bench.outcome == "fault" and bench.aggregate is None
    assert "Compute error." in (bench.stopped or "")
    assert len(bench.records) <= 4  # stopped at the first fault, not 8 requests of a loaded engine


# --- 4. the corpus must fit the api; the parser is the endpoint's ---------------------------------------


def _prompt_corpus(tmp_path: Path) -> Path:
    path = tmp_path / "prompts.jsonl"
    rows = [{"id": f"p{i}", "prompt": f"q{i}", "max_tokens": 8} for i in range(2)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _text_stream(pieces: list[str]) -> Reply:
    out = [{"model": MODEL, "choices": [{"index": 0, "text": p, "finish_reason": None}]} for p in pieces]
    out.append({"model": MODEL, "choices": [{"index": 0, "text": "", "finish_reason": "stop"}]})
    out.append({"model": MODEL, "choices": [], "usage": {"completion_tokens": len(pieces)}})
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in out) + "data: [DONE]\n\n"
    return 200, "text/event-stream", body.encode()


def test_a_completions_api_with_a_chat_corpus_is_refused_before_anything_is_recorded(
    tmp_path: Path, tiny_model_dir: Path, ledger: Ledger, recorder: LocalRecorder, corpus: tuple[Path, str]
) -> None:
    """Regression: accepted; every request POSTed ``messages`` to /v1/completions and was "no output"."""
    spec = 'levels = [1, 4, 32]\nrequests = 96\nrepetitions = 2\napi = "completions"'
    path = stub_campaign(tmp_path, tiny_model_dir, corpus, benchmark=spec)
    load_campaign(path)  # the file itself is well formed: the corpus is what does not fit
    size = ledger.size()
    with pytest.raises(
        ConfigError, match=r"gates\.benchmark\.api: .*api 'completions' needs items with prompt"
    ):
        run(path, recorder, tmp_path, policy_with(tmp_path, corpus[1]))
    assert ledger.size() == size


def test_a_chat_api_with_a_prompt_corpus_is_refused_and_fitting_corpora_load(tmp_path: Path) -> None:
    prompts = _prompt_corpus(tmp_path)
    loaded = load_benchmark_corpus(prompts, corpus_digest(prompts))
    with pytest.raises(ConfigError, match="api 'chat' needs items with messages"):
        check_corpus_api(loaded, "chat")
    check_corpus_api(loaded, "completions")
    from .test_audit10_harness import _corpus

    chat = _corpus(tmp_path)
    check_corpus_api(load_benchmark_corpus(chat, corpus_digest(chat)), "chat")


def test_the_benchmark_refuses_a_corpus_that_does_not_fit_its_api_before_any_request(tmp_path: Path) -> None:
    from .test_audit10_harness import _corpus

    chat = _corpus(tmp_path)
    seen: list[int] = []
    spec = BenchmarkSpec(chat, corpus_digest(chat), concurrency=(1,), requests_per_level=2, api="completions")
    with serve(lambda _b, n: (seen.append(n), sse())[1]) as base, pytest.raises(ConfigError, match="needs"):
        run_benchmark(spec, base, out_dir=tmp_path / "b")
    assert seen == []


def test_a_completions_run_with_a_prompt_corpus_completes(tmp_path: Path) -> None:
    prompts = _prompt_corpus(tmp_path)
    spec = BenchmarkSpec(
        prompts,
        corpus_digest(prompts),
        concurrency=(1, 2),
        requests_per_level=4,
        api="completions",
        saturation="report",
    )
    asked: list[dict[str, Any]] = []
    with serve(lambda b, _n: (asked.append(b), _text_stream(["a", " b"]))[1]) as base:
        result = run_benchmark(spec, base, out_dir=tmp_path / "b")
    assert all(r.ok for r in result.records), [r.error for r in result.records]
    assert {r.text for r in result.records} == {"a b"}
    assert all("prompt" in b and "messages" not in b for b in asked)


def _send(url_path: str, body: dict[str, Any], reply: Reply) -> RequestRecord:
    with serve(lambda _b, _n: reply) as base:

        async def go() -> RequestRecord:
            rec = RequestRecord("p", 1, 0, 0, "t", 0.0)
            async with http_session(2, 10) as client:
                return await send_request(
                    client, base + url_path, body, rec, clock_origin=time.perf_counter(), timeout_s=10
                )

        return asyncio.run(go())


def test_the_stream_parser_is_chosen_by_the_endpoint_not_the_body() -> None:
    """Regression: a body with ``messages`` sent to /v1/completions was read for chat deltas (no output)."""
    chat_body = {"messages": [{"role": "user", "content": "q"}], "max_tokens": 8, "stream": True}
    rec = _send("/v1/completions", chat_body, _text_stream(["a", " b"]))
    assert rec.ok and rec.text == "a b", rec.error
    prompt_body = {"prompt": "q", "max_tokens": 8, "stream": True}
    rec = _send("/v1/chat/completions", prompt_body, sse(["x", " y"]))
    assert rec.ok and rec.text == "x y", rec.error


# --- 5. whole numbers at load --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ("requests = true", "requests"),
        ("requests = 96.0", "requests"),
        ('requests = "96"', "requests"),
        ("requests = 0", "requests"),
        ("repetitions = true", "repetitions"),
        ("repetitions = 2.0", "repetitions"),
        ("repetitions = 0", "repetitions"),
        ("lease_seconds = true", "lease_seconds"),
        ("request_timeout_seconds = true", "request_timeout_seconds"),
        ("max_error_rate = false", "max_error_rate"),
        ("min_duration_seconds = true", "min_duration_seconds"),
    ],
)
def test_benchmark_requests_or_repetitions_true_are_refused_at_campaign_load(
    tmp_path: Path, tiny_model_dir: Path, corpus: tuple[Path, str], line: str, field: str
) -> None:
    """Regression: ``repetitions = true`` was read as 1 and the campaign ran (only ``levels`` was strict)."""
    spec = {"requests": "requests = 96", "repetitions": "repetitions = 2"}
    lines = ["levels = [1, 4, 32]", *(v for k, v in spec.items() if k != field), line]
    path = stub_campaign(tmp_path, tiny_model_dir, corpus, benchmark="\n".join(lines))
    with pytest.raises(ConfigError, match=rf"gates\.benchmark\.{field}"):
        load_campaign(path)


def test_a_semantic_lease_of_true_is_refused_and_whole_and_decimal_numbers_load(
    tmp_path: Path, tiny_model_dir: Path, corpus: tuple[Path, str]
) -> None:
    path = stub_campaign(tmp_path, tiny_model_dir, corpus)
    text = path.read_text()
    path.write_text(text.replace("[gates.semantic]\n", "[gates.semantic]\nlease_seconds = true\n"))
    with pytest.raises(ConfigError, match=r"gates\.semantic\.lease_seconds"):
        load_campaign(path)
    lines = "levels = [1, 4, 32]\nrequests = 96\nrepetitions = 2\nmax_error_rate = 0\nlease_seconds = 600.5"
    path = stub_campaign(tmp_path, tiny_model_dir, corpus, benchmark=lines)
    g = load_campaign(path).spec.gates.benchmark
    assert (g.requests, g.repetitions, g.max_error_rate, g.lease_seconds) == (96, 2, 0, 600.5)


@pytest.mark.parametrize("field", ["requests_per_level", "repetitions"])
def test_a_benchmark_spec_refuses_a_bool_for_a_count(tmp_path: Path, field: str) -> None:
    from .test_audit10_harness import _corpus

    chat = _corpus(tmp_path)
    with pytest.raises(ConfigError, match=field):
        BenchmarkSpec(chat, corpus_digest(chat), **{field: True})
