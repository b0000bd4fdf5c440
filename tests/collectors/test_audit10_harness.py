"""Audit 10: what the harnesses count as a completed request, kept as regressions (named after each finding).

An independent audit drove full campaigns against a stand-in server that misbehaves one way at a time. Each
of these ended QUALIFIED, crashed the harness, or blamed the wrong gate:

1. a request the engine ended with finish_reason "abort" or "error" counted as completed;
2. a request with no output (an empty answer, 0 completion tokens, content outside ``choices``) or that
   stopped with "length" after 1 of 8–64 max_tokens counted as completed;
3. ``usage.completion_tokens`` was taken unchecked (100 × max_tokens, ``true``; a negative count made the
   result unrecordable, and the measured requests were lost);
4. a malformed chunk (``"delta": "A"``, ``"content": 123``) crashed both harnesses; inside ``collect run`` any
   unexpected exception left the job ``running``;
5. an HTTP 200 whose body is ``{"error": {"code": 500, …}}`` was "no finish_reason", not an engine fault;
6. answers naming another model than the approved one were not noticed;
7. repeated, zero or negative benchmark levels were refused only after the engine launched;
9. a stream without ``data: [DONE]`` counted as complete.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

import ledger.collectors.campaign as campaign_module
from ledger.cli import exit_code
from ledger.collectors.benchmark import (
    BenchmarkSpec,
    RequestRecord,
    benchmark_gate_payload,
    http_session,
    run_benchmark,
    send_request,
)
from ledger.collectors.campaign import CampaignRunner, load_campaign
from ledger.collectors.corpus import corpus_digest
from ledger.collectors.semantic import SemanticSpec, run_semantic, semantic_gate_payload
from ledger.entries import validate_payload
from ledger.errors import CollectorError, ConfigError
from ledger.recorder import LocalRecorder
from ledger.service import Ledger

from .conftest import entries_of, free_port
from .test_harness_gates import BENCH, BENCH_DIGEST, policy_with, stub_campaign

MODEL = "stub-model"
BOUNDS = {"error_rate": {"max": 0}}
Reply = tuple[int, str, bytes]


# --- a scripted server: every answer is the bytes a test gives ----------------------------------------


@contextlib.contextmanager
def serve(reply: Callable[[dict[str, Any], int], Reply], model: str = MODEL) -> Iterator[str]:
    """Serve ``/v1/models`` (``model``) and both completion endpoints, whose answer to the n-th request
    is ``reply(body, n)`` = (status, content type, body bytes); yields the base URL."""
    port = free_port()
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    state: dict[str, Any] = {"n": 0}

    async def models(_request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": model, "object": "model"}]})

    async def complete(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        state["n"] += 1
        status, ctype, data = reply(body, state["n"])
        return web.Response(status=status, body=data, content_type=ctype)

    async def start() -> None:
        app = web.Application()
        app.router.add_get("/v1/models", models)
        app.router.add_post("/v1/chat/completions", complete)
        app.router.add_post("/v1/completions", complete)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        state["runner"] = runner

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(start())
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(10), "the scripted server did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(state["runner"].cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def sse(
    pieces: list[str] | None = None,
    *,
    finish: Any = "stop",
    usage: Any = "count",
    done: bool = True,
    model: str | None = MODEL,
    chunk: Callable[[int, str], dict[str, Any]] | None = None,
) -> Reply:
    """An OpenAI chat event stream: a chunk per piece, a finish chunk, a usage chunk, ``[DONE]``."""
    pieces = ["one", " two", " three"] if pieces is None else pieces
    out: list[dict[str, Any]] = []
    for i, p in enumerate(pieces):
        c = (
            chunk(i, p)
            if chunk
            else {"choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]}
        )
        out.append(c)
    out.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    if usage is not None:
        n = len(pieces) if usage == "count" else usage
        out.append({"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": n, "total_tokens": 9}})
    if model is not None:
        for c in out:
            c.setdefault("model", model)
    text = "".join(f"data: {json.dumps(c)}\n\n" for c in out) + ("data: [DONE]\n\n" if done else "")
    return 200, "text/event-stream", text.encode()


def one(reply: Reply, *, max_tokens: int = 8) -> RequestRecord:
    """Send one streaming chat request to a server answering ``reply``; the record send_request filled."""
    with serve(lambda _b, _n: reply) as base:

        async def go() -> RequestRecord:
            rec = RequestRecord("p", 1, 0, 0, "t", 0.0)
            body = {"messages": [{"role": "user", "content": "q"}], "max_tokens": max_tokens, "stream": True}
            async with http_session(2, 10) as client:
                return await send_request(
                    client,
                    base + "/v1/chat/completions",
                    body,
                    rec,
                    clock_origin=time.perf_counter(),
                    timeout_s=10,
                )

        return asyncio.run(go())


def test_a_well_formed_stream_is_a_completed_request() -> None:
    """The baseline every neighbour below differs from by one thing."""
    rec = one(sse())
    assert rec.ok, rec.error
    assert (rec.text, rec.output_tokens, rec.tokens_from, rec.finish_reason) == (
        "one two three",
        3,
        "usage",
        "stop",
    )
    assert rec.model == MODEL and not rec.fault


# --- 1. finish reasons ------------------------------------------------------------------------------


def test_a_request_aborted_by_the_engine_is_not_a_completed_request() -> None:
    rec = one(sse(finish="abort"))
    assert not rec.ok and not rec.fault
    assert "finish_reason 'abort'" in (rec.error or "") and "not a completed request" in (rec.error or "")


def test_a_request_the_engine_ended_with_finish_reason_error_is_an_engine_fault() -> None:
    """As an error object in the stream without a client-error code is: the engine failed the request."""
    rec = one(sse(finish="error"))
    assert not rec.ok and rec.fault
    assert "finish_reason 'error'" in (rec.error or "")


@pytest.mark.parametrize("finish", ["content_filter", "tool_calls", "cancelled", "STOP"])
def test_a_finish_reason_the_harness_does_not_count_as_completed_is_a_request_error(finish: str) -> None:
    rec = one(sse(finish=finish))
    assert not rec.ok and not rec.fault and finish in (rec.error or "")


@pytest.mark.parametrize("finish", [None, ""])
def test_a_stream_without_a_finish_reason_is_a_request_error(finish: Any) -> None:
    rec = one(sse(finish=finish))
    assert rec.error == "the stream ended without a finish_reason"


@pytest.mark.parametrize("finish", [1, ["stop"], {"reason": "stop"}])
def test_a_finish_reason_that_is_no_text_is_a_malformed_stream(finish: Any) -> None:
    rec = one(sse(finish=finish))
    assert not rec.ok and "malformed stream chunk" in (rec.error or "")


# --- 2. no output, "length" before max_tokens ------------------------------------------------------------


def test_a_request_that_returned_no_output_is_not_a_completed_request() -> None:
    rec = one(sse([]))
    assert not rec.ok and not rec.fault
    assert (rec.error or "").startswith("no output")


def test_a_request_whose_usage_reports_no_tokens_beside_text_is_not_a_completed_request() -> None:
    rec = one(sse(usage=0))
    assert not rec.ok and (rec.error or "").startswith("no output")


def test_a_request_whose_output_came_outside_choices_is_a_malformed_stream() -> None:
    """Regression: chunks ``{"delta": {...}}`` without ``choices`` (the content dropped) counted as done."""
    rec = one(sse(chunk=lambda _i, p: {"delta": {"content": p}}))
    assert not rec.ok and "no choices" in (rec.error or "")


def test_a_usage_chunk_without_choices_is_a_usage_chunk() -> None:
    """The neighbour: a usage chunk that leaves ``choices`` out (some servers do) says nothing wrong."""
    body = sse()[2].decode().replace('{"choices": [], "usage"', '{"usage"')
    assert one((200, "text/event-stream", body.encode())).ok


def test_length_after_one_token_of_a_larger_max_tokens_is_not_a_completed_request() -> None:
    """Regression: finish_reason "length" after 1 token of max_tokens 8–64 counted as completed."""
    rec = one(sse(["one"], finish="length"), max_tokens=64)
    assert not rec.ok and not rec.fault
    assert "'length' after 1 of the max_tokens 64" in (rec.error or "")


def test_length_at_max_tokens_is_a_completed_request() -> None:
    rec = one(sse(["a", " b", " c", " d"], finish="length"), max_tokens=4)
    assert rec.ok, rec.error
    assert rec.output_tokens == 4


def test_length_judged_by_a_chunk_count_is_not_refused() -> None:
    """Without usage or token ids the harness counts chunks with text, a lower bound of the tokens (a token
    may decode to no text yet): it cannot show "length" came early, so it takes the engine's word."""
    rec = one(sse(["one", " two"], finish="length", usage=None), max_tokens=8)
    assert rec.ok, rec.error
    assert rec.tokens_from == "chunks"


# --- 3. the engine's usage count ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("usage", "why"),
    [
        (800, "more than the max_tokens 8"),
        (9, "more than the max_tokens 8"),
        (True, "not a whole number"),
        (3.0, "not a whole number"),
        ("3", "not a whole number"),
        (None, "not a whole number"),
        (-5, "a negative count"),
    ],
)
def test_a_usage_count_that_is_no_count_of_this_request_makes_the_request_an_error(
    usage: Any, why: str
) -> None:
    """Regression: 100 × max_tokens and ``true`` were counted; a negative count lost the whole run."""
    reply = sse()
    body = reply[2].decode().replace('"completion_tokens": 3', f'"completion_tokens": {json.dumps(usage)}')
    rec = one((200, "text/event-stream", body.encode()), max_tokens=8)
    assert not rec.ok and not rec.fault and why in (rec.error or ""), rec.error
    assert rec.output_tokens is None


def test_a_usage_count_within_max_tokens_is_the_requests_count() -> None:
    rec = one(sse(["a", " b"], usage=8), max_tokens=8)
    assert rec.ok and rec.output_tokens == 8


def test_a_negative_usage_count_is_recorded_as_an_errored_request_not_a_lost_run(tmp_path: Path) -> None:
    """Regression: a negative count crashed the recording step (output_throughput < 0): the 576 measured
    requests were lost. Every request is now an error, the run is recorded, the gate fails."""
    corpus = _corpus(tmp_path)
    with serve(lambda _b, _n: sse(usage=-5)) as base:
        result = run_benchmark(_spec(corpus), base, out_dir=tmp_path / "o")
    assert all(not r.ok for r in result.records) and len(result.records) == 8
    payload = benchmark_gate_payload(result, BOUNDS)
    validate_payload("gate.result", 1, payload)
    assert payload["status"] == "failed"
    assert all(v is None or v >= 0 for v in payload["figures"].values())


# --- 4. malformed chunks never raise; collect run never leaves a job running -------------------------------


@pytest.mark.parametrize(
    "chunk",
    [
        lambda _i, p: {"choices": [{"index": 0, "delta": p, "finish_reason": None}]},  # delta a string
        lambda _i, _p: {"choices": [{"index": 0, "delta": {"content": 123}, "finish_reason": None}]},
        lambda _i, _p: {"choices": [{"index": 0, "delta": {"content": ["a"]}, "finish_reason": None}]},
        lambda _i, p: {"choices": [{"index": 0, "delta": {"content": p}, "token_ids": ["x"]}]},
        lambda _i, p: {"choices": [{"index": 0, "delta": {"content": p}, "token_ids": 7}]},
        lambda _i, p: {"choices": [{"index": 0, "delta": {"content": p}}], "usage": 3},
        lambda _i, p: {"choices": [{"index": 0, "delta": {"content": p}}], "model": 5},
        lambda _i, p: {"choices": [p]},
        lambda _i, p: {"choices": {"0": p}},
    ],
)
def test_a_malformed_stream_chunk_is_a_request_error_not_a_crash(chunk: Any) -> None:
    """Regression: ``"delta": "A"`` (AttributeError) and ``"content": 123`` (TypeError) crashed harnesses."""
    rec = one(sse(chunk=chunk))
    assert not rec.ok and not rec.fault
    assert "malformed stream chunk" in (rec.error or ""), rec.error


@pytest.mark.parametrize("line", ["data: [1, 2]", "data: {not json", 'data: "text"'])
def test_a_chunk_that_is_no_json_object_is_a_request_error(line: str) -> None:
    body = f"{line}\n\n" + sse()[2].decode()
    rec = one((200, "text/event-stream", body.encode()))
    assert not rec.ok and "malformed stream chunk" in (rec.error or "")


def test_both_harnesses_record_a_malformed_stream_as_errors_and_a_result(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path)
    bad = sse(chunk=lambda _i, p: {"choices": [{"index": 0, "delta": p, "finish_reason": None}]})
    with serve(lambda _b, _n: bad) as base:
        bench = run_benchmark(_spec(corpus), base, out_dir=tmp_path / "b")
        sem = run_semantic(_semantic_spec(tmp_path), base, out_dir=tmp_path / "s")
    assert bench.outcome == "completed" and not any(r.ok for r in bench.records)
    assert benchmark_gate_payload(bench, BOUNDS)["status"] == "failed"
    assert sem.outcome == "completed" and all(i.error for i in sem.items)
    assert semantic_gate_payload(sem, min_score=1.0)["status"] == "failed"


def test_an_unexpected_exception_in_collect_run_ends_the_job_failed_with_the_error_recorded(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Regression: a harness that raised (a traceback, exit 1) left the job ``running``. Whatever stops the
    collector once the job started, the job ends ``failed`` saying why, every undecided gate is
    ``not_run``, and the CLI gets a collector error (one line, exit 2)."""
    sem = tmp_path / "semantic.jsonl"
    sem.write_text(json.dumps(_SEM_ITEM) + "\n")
    policy = policy_with(tmp_path, corpus_digest(sem))

    def broken(*_a: Any, **_k: Any) -> Any:
        raise AttributeError("'str' object has no attribute 'get'")

    monkeypatch.setattr(campaign_module, "run_benchmark", broken)
    path = stub_campaign(tmp_path, tiny_model_dir, (sem, corpus_digest(sem)))
    runner = CampaignRunner(
        load_campaign(path), recorder, work_dir=tmp_path / "w", handle_signals=False, policy=policy
    )
    with pytest.raises(CollectorError) as caught:
        runner.run()
    err = caught.value
    assert exit_code(err) == 2 and "\n" not in err.one_line()
    assert "during gate benchmark" in err.message and "AttributeError" in err.message
    jobs = [e["payload"] for e in entries_of(ledger, "job")]
    assert [j["state"] for j in jobs] == ["running", "failed"]
    assert "AttributeError" in jobs[-1]["reason"]
    bench = [e["payload"] for e in entries_of(ledger, "gate.result") if e["payload"]["gate"] == "benchmark"]
    assert [b["status"] for b in bench] == ["not_run"]
    assert [e["payload"]["ready"] for e in entries_of(ledger, "engine.launch")] == [True]  # stopped, recorded


# --- 5. an error object answered with HTTP 200 ------------------------------------------------------------


@pytest.mark.parametrize(
    "error",
    [
        {"error": {"code": 500, "message": "EngineCore died", "type": "InternalServerError"}},
        {"error": {"message": "EngineCore died"}},  # no code: no client error either
        {"object": "error", "message": "EngineCore died", "code": 503},  # vLLM's older ErrorResponse
    ],
)
def test_an_error_object_answered_with_http_200_is_an_engine_fault(error: dict[str, Any]) -> None:
    """Regression: it was "the stream ended without a finish_reason", and the run kept loading a faulted
    engine. It is judged as the same object in the stream is."""
    rec = one((200, "application/json", json.dumps(error).encode()))
    assert rec.fault and "EngineCore died" in (rec.error or "")
    in_stream = one((200, "text/event-stream", f"data: {json.dumps(error)}\n\n".encode()))
    assert in_stream.fault


def test_a_client_error_object_answered_with_http_200_is_a_request_error() -> None:
    rec = one((200, "application/json", b'{"error": {"code": 400, "message": "bad prompt"}}'))
    assert not rec.ok and not rec.fault and "bad prompt" in (rec.error or "")


def test_an_answer_that_is_no_event_stream_is_a_request_error() -> None:
    rec = one((200, "text/html", b"<html>502 Bad Gateway</html>"))
    assert not rec.ok and not rec.fault and "no event stream" in (rec.error or "")


def test_an_error_object_with_http_200_stops_both_harnesses_as_an_engine_fault(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path)
    died = (200, "application/json", b'{"error": {"code": 500, "message": "EngineCore died"}}')
    with serve(lambda _b, n: died if n >= 3 else sse()) as base:
        bench = run_benchmark(_spec(corpus), base, out_dir=tmp_path / "b")
    assert bench.outcome == "fault" and bench.aggregate is None
    assert "EngineCore died" in (bench.stopped or "")
    payload = benchmark_gate_payload(bench, BOUNDS)
    assert payload["status"] == "failed" and payload["bounds"]["outcome"] == "fault"
    assert "no aggregate result" in payload["reason"]
    with serve(lambda _b, _n: died) as base:
        sem = run_semantic(_semantic_spec(tmp_path), base, out_dir=tmp_path / "s")
    assert sem.outcome == "fault" and sem.score is None and "EngineCore died" in (sem.stopped or "")


# --- 6. the model the answers named ---------------------------------------------------------------------


def test_harness_answers_from_another_model_are_recorded_and_fail_the_gates(tmp_path: Path) -> None:
    """Regression: /v1/models listed the campaign's model, the answers named ``other-model``: QUALIFIED."""
    corpus = _corpus(tmp_path)
    with serve(lambda _b, _n: sse(model="other-model")) as base:
        bench = run_benchmark(_spec(corpus), base, out_dir=tmp_path / "b")
        sem = run_semantic(_semantic_spec(tmp_path), base, out_dir=tmp_path / "s")
    assert {r.model for r in bench.records} == {"other-model"}
    assert bench.answered_models == "other-model"
    payload = benchmark_gate_payload(bench, BOUNDS, expect_model=MODEL)
    assert payload["bounds"]["bindings"] == {"served_models": MODEL, "answered_models": "other-model"}
    assert payload["status"] == "failed" and "answers named another model" in payload["reason"]
    lines = [json.loads(x) for x in (tmp_path / "b" / "benchmark-requests.jsonl").read_text().splitlines()]
    assert {x["model"] for x in lines} == {"other-model"}
    assert sem.answered_models == "other-model" and sem.items[0].model == "other-model"
    spayload = semantic_gate_payload(sem, min_score=1.0, expect_model=MODEL)
    assert spayload["bounds"]["bindings"]["answered_models"] == "other-model"
    assert spayload["status"] == "failed" and "answers named another model" in spayload["reason"]


def test_harness_answers_from_the_approved_model_or_naming_none_pass(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path)
    for model, recorded in ((MODEL, {"answered_models": MODEL}), (None, {})):
        with serve(lambda _b, _n, m=model: sse(model=m)) as base:  # type: ignore[misc]
            bench = run_benchmark(_spec(corpus), base, out_dir=tmp_path / f"b{model}")
        payload = benchmark_gate_payload(bench, BOUNDS, expect_model=MODEL)
        assert payload["status"] == "passed", payload["reason"]
        assert payload["bounds"]["bindings"] == {"served_models": MODEL, **recorded}


def test_a_stream_whose_chunks_name_two_models_is_a_request_error() -> None:
    rec = one(sse(chunk=lambda i, p: {"model": f"m{i}", "choices": [{"index": 0, "delta": {"content": p}}]}))
    assert not rec.ok and "more than one model" in (rec.error or "")


def test_the_campaign_expects_its_served_name_also_of_an_engine_that_echoes_the_asked_name(
    tmp_path: Path, tiny_model_dir: Path, recorder: LocalRecorder
) -> None:
    """An echoing engine (llama.cpp) answers with the served name the harness asks for: the collector
    judges its answers as the policy's gates do (audit 21, f3), not as 'nothing to say'."""
    sem = tmp_path / "semantic.jsonl"
    sem.write_text(json.dumps(_SEM_ITEM) + "\n")
    policy = policy_with(tmp_path, corpus_digest(sem))
    path = stub_campaign(tmp_path, tiny_model_dir, (sem, corpus_digest(sem)))
    runner = CampaignRunner(
        load_campaign(path), recorder, work_dir=tmp_path / "w", handle_signals=False, policy=policy
    )
    assert runner._expect_answered_model() == MODEL
    path.write_text(path.read_text().replace('kind = "generic"', 'kind = "llamacpp"'))
    runner = CampaignRunner(
        load_campaign(path), recorder, work_dir=tmp_path / "w", handle_signals=False, policy=policy
    )
    assert runner._expect_answered_model() == MODEL


# --- 7. benchmark levels refused at load ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("levels", "why"),
    [
        ("[1, 4, 4, 32]", "repeat"),
        ("[0, 1, 4]", "≥ 1"),
        ("[-1, 4, 32]", "≥ 1"),
        ("[1, 4.0, 32]", "levels"),
        ('[1, "4", 32]', "levels"),
        ("[true, 4]", "levels"),
        ("[]", "levels"),
    ],
)
def test_repeated_zero_or_negative_benchmark_levels_are_refused_at_campaign_load(
    tmp_path: Path, tiny_model_dir: Path, levels: str, why: str
) -> None:
    """Regression: ``levels = [1, 4, 4, 32]`` was refused only after the engine launched and every earlier
    gate ran (an attempt spent, the job failed); ``repetitions = 0`` already was refused at load."""
    sem = tmp_path / "semantic.jsonl"
    sem.write_text(json.dumps(_SEM_ITEM) + "\n")
    spec = f"levels = {levels}\nrequests = 96\nrepetitions = 2"
    path = stub_campaign(tmp_path, tiny_model_dir, (sem, corpus_digest(sem)), benchmark=spec)
    with pytest.raises(ConfigError, match=r"gates\.benchmark\.levels") as caught:
        load_campaign(path)
    assert why in caught.value.message


def test_distinct_positive_levels_load_in_any_order(tmp_path: Path, tiny_model_dir: Path) -> None:
    sem = tmp_path / "semantic.jsonl"
    sem.write_text(json.dumps(_SEM_ITEM) + "\n")
    for levels in ("[1, 4, 32]", "[1]", "[4, 1, 32]"):
        spec = f"levels = {levels}\nrequests = 96\nrepetitions = 2"
        path = stub_campaign(tmp_path, tiny_model_dir, (sem, corpus_digest(sem)), benchmark=spec)
        assert load_campaign(path).spec.gates.benchmark.levels == json.loads(levels)


# --- 9. [DONE] -----------------------------------------------------------------------------------------


def test_a_stream_without_done_is_not_a_completed_request() -> None:
    """vLLM, SGLang, llama.cpp and llama-cpp-python all end a stream with ``data: [DONE]``; a stream that
    ends without it was cut short (its usage chunk may be lost), so it is a request error."""
    rec = one(sse(done=False))
    assert not rec.ok and not rec.fault and "[DONE]" in (rec.error or "")


def test_a_chunk_after_done_is_a_malformed_stream() -> None:
    body = sse()[2] + b'data: {"choices": [{"index": 0, "delta": {"content": "x"}}]}\n\n'
    rec = one((200, "text/event-stream", body))
    assert not rec.ok and "after [DONE]" in (rec.error or "")


# --- helpers --------------------------------------------------------------------------------------------

_SEM_ITEM = {
    "id": "ready",
    "messages": [{"role": "user", "content": "Reply with exactly one word: READY"}],
    "checks": [{"type": "regex", "pattern": "\\S"}],  # any answer: the scripted server's, the stub's READY
}


def _corpus(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.jsonl"
    rows = [
        {"id": f"p{i}", "messages": [{"role": "user", "content": f"q{i}"}], "max_tokens": 8} for i in range(2)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _spec(corpus: Path) -> BenchmarkSpec:
    return BenchmarkSpec(
        corpus,
        corpus_digest(corpus),
        concurrency=(1, 2),
        requests_per_level=4,
        repetitions=1,
        saturation="report",
    )


def _semantic_spec(tmp_path: Path) -> SemanticSpec:
    path = tmp_path / "semantic-corpus.jsonl"
    path.write_text(json.dumps(_SEM_ITEM) + "\n")
    return SemanticSpec(path, corpus_digest(path))


assert BENCH.exists() and BENCH_DIGEST.startswith("blake3:")
