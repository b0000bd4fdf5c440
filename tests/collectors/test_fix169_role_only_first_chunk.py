"""Fix 169 (issue 11, audit 108 f1): a role-only first chunk defeated the TTFT bound.

The harnesses' stream reader (``benchmark._Stream``, shared by the semantic harness and the canary) took time
to first token at the first chunk with choices, whatever it carried. An engine front that streamed
``{"delta": {"role": "assistant", "content": ""}}`` at once and its first token 2.5 s later measured
``ttft_ms.p95@c4`` = 51 ms and passed the 2000 ms bound its plain twin (tokens only) failed at 2514 ms; the
same chunk ahead of a hung inference loop would have read as a moving one. A chunk is a decode step — TTFT,
an inter-token latency, the canary's first token — only where it carries a token: non-empty text
(``delta.content``, completions' ``text``), non-empty reasoning (``delta.reasoning_content`` /
``delta.reasoning``) or non-empty ``token_ids``. Each such chunk is at least one token: a stream whose own
exact count (usage, or ids on every chunk with text) is below them contradicts itself (a request error).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

import ledger.collectors.benchmark as benchmark_module
from ledger.collectors.benchmark import (
    BenchmarkSpec,
    EngineCheck,
    RequestRecord,
    benchmark_gate_payload,
    http_session,
    run_benchmark,
    send_request,
)
from ledger.collectors.corpus import corpus_digest

from .conftest import free_port

MODEL = "fix169-model"
WAIT_S = 0.4  # the wait before the first token (a long prefill)
ROLE = {"role": "assistant", "content": ""}
# a step of a script: (seconds to wait before it, the choice it streams — index 0 added — or "hang")
Step = tuple[float, Any]


def _tokens(n: int = 4, *, key: str = "content", ids: bool = False) -> list[Step]:
    """``n`` token chunks 5 ms apart after WAIT_S, the last with finish_reason "stop"."""
    steps: list[Step] = []
    for i in range(n):
        choice: dict[str, Any] = {"delta": {"content": f" t{i}"}} if key == "content" else {"text": f" t{i}"}
        if ids:
            choice["token_ids"] = [100 + i]
        choice["finish_reason"] = "stop" if i == n - 1 else None
        steps.append((WAIT_S if i == 0 else 0.005, choice))
    return steps


class Scripted:
    """An OpenAI-style server whose answer to a completion request is the script named by the request's
    prompt (chat: the first message's content; completions: ``prompt``), each step written after its wait,
    then the usage chunk the script gives (none: no usage) and ``[DONE]``. /health and /v1/models answer."""

    def __init__(self) -> None:
        self.scripts: dict[str, tuple[list[Step], int | None]] = {}

    def app(self) -> web.Application:
        async def health(_: web.Request) -> web.Response:
            return web.json_response({"status": "ok"})

        async def models(_: web.Request) -> web.Response:
            return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

        async def complete(request: web.Request) -> web.StreamResponse:
            body = await request.json()
            key = body["messages"][0]["content"] if "messages" in body else body["prompt"]
            if body.get("max_tokens") == 1:
                key = "canary"
            steps, usage = self.scripts[key]
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            for wait, choice in steps:
                if choice == "hang":  # the inference loop never produces a token (until the client goes)
                    while request.transport is not None and not request.transport.is_closing():
                        await asyncio.sleep(0.05)
                    return resp
                await asyncio.sleep(wait)
                chunk = {"id": "x", "model": MODEL, "choices": [{"index": 0, **choice}]}
                await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
            if usage is not None:
                tail = {"id": "x", "model": MODEL, "choices": [], "usage": {"completion_tokens": usage}}
                await resp.write(f"data: {json.dumps(tail)}\n\n".encode())
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            return resp

        app = web.Application()
        app.router.add_get("/health", health)
        app.router.add_get("/v1/models", models)
        app.router.add_post("/v1/chat/completions", complete)
        app.router.add_post("/v1/completions", complete)
        return app


@contextlib.contextmanager
def _serve(server: Scripted) -> Iterator[str]:
    port = free_port()
    loop = asyncio.new_event_loop()
    started = threading.Event()
    runner = web.AppRunner(server.app(), shutdown_timeout=1.0)

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
    assert started.wait(10), "the scripted server did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[Scripted, str]]:
    s = Scripted()
    with _serve(s) as base:
        yield s, base


def _ask(
    server: tuple[Scripted, str], steps: list[Step], usage: int | None, *, chat: bool = True
) -> RequestRecord:
    """One streamed request answered by ``steps`` (then ``usage``): the record send_request filled."""
    s, base = server
    key = f"script-{len(s.scripts)}"
    s.scripts[key] = (steps, usage)
    if chat:
        url, body = base + "/v1/chat/completions", {"messages": [{"role": "user", "content": key}]}
    else:
        url, body = base + "/v1/completions", {"prompt": key}
    body |= {"max_tokens": 16, "stream": True}

    async def go() -> RequestRecord:
        rec = RequestRecord("p", 1, 0, 0, "t", 0.0)
        async with http_session(2, 10) as client:
            return await send_request(client, url, body, rec, clock_origin=time.perf_counter(), timeout_s=10)

    return asyncio.run(go())


# --- the finding ----------------------------------------------------------------------------------------


def _bench(tmp_path: Path) -> BenchmarkSpec:
    path = tmp_path / "bench.jsonl"
    rows = [
        {"id": f"p{i}", "messages": [{"role": "user", "content": f"q{i}"}], "max_tokens": 8} for i in (0, 1)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return BenchmarkSpec(
        path, corpus_digest(path), concurrency=(1,), requests_per_level=2, repetitions=1, model=MODEL
    )


BOUND = {"ttft_ms.p95@c1": {"max": 200}, "error_rate": {"max": 0}}


@pytest.mark.parametrize("front", ["role-chunk-first", "tokens-only"])
def test_fix169_role_only_first_chunk_defeated_the_ttft_bound(
    tmp_path: Path, server: tuple[Scripted, str], front: str
) -> None:
    """The audit's engine: first token WAIT_S after the request, with (and without) an empty role chunk
    streamed at once. Both measure TTFT at the first token and fail the same bound."""
    s, base = server
    steps = ([(0.0, {"delta": ROLE})] if front == "role-chunk-first" else []) + _tokens(6)
    for key in ("q0", "q1"):
        s.scripts[key] = (steps, 6)
    result = run_benchmark(_bench(tmp_path), base, out_dir=tmp_path / "o")
    assert result.records and all(r.ok for r in result.records), [r.error for r in result.records]
    for r in result.records:
        assert r.ttft_ms is not None and r.ttft_ms >= WAIT_S * 1000, r.ttft_ms
        assert len(r.itl_ms) == 5 and max(r.itl_ms) < WAIT_S * 1000  # the wait is no inter-token gap
        assert r.output_tokens == 6
    payload = benchmark_gate_payload(result, BOUND)
    assert payload["status"] == "failed", payload
    assert payload["figures"]["ttft_ms.p95@c1"] >= WAIT_S * 1000
    assert "ttft_ms.p95@c1" in (payload["reason"] or "")


# --- neighbours: chunks with choices that carry no token ------------------------------------------------

NO_TOKEN_CHAT = {
    "role-content-empty": {"delta": ROLE},
    "role-content-null": {"delta": {"role": "assistant", "content": None}},
    "role-no-content-key": {"delta": {"role": "assistant"}},
    "role-reasoning-content-empty": {"delta": {"role": "assistant", "reasoning_content": ""}},
    "role-reasoning-empty": {"delta": {"role": "assistant", "reasoning": "", "content": None}},
    "role-token-ids-empty": {"delta": ROLE, "token_ids": []},
    "empty-delta": {"delta": {}},
    "delta-null": {"delta": None},
    "content-empty-no-role": {"delta": {"content": ""}},
    "role-with-logprobs-null": {"delta": ROLE, "logprobs": None, "finish_reason": None},
}


@pytest.mark.parametrize("first", list(NO_TOKEN_CHAT.values()), ids=list(NO_TOKEN_CHAT))
def test_fix169_a_chat_chunk_without_a_token_starts_no_ttft(server: tuple[Scripted, str], first: Any) -> None:
    rec = _ask(server, [(0.0, first), *_tokens(4)], 4)
    assert rec.ok, rec.error
    assert rec.ttft_ms is not None and rec.ttft_ms >= WAIT_S * 1000, rec.ttft_ms
    assert len(rec.itl_ms) == 3 and rec.output_tokens == 4 and rec.text == " t0 t1 t2 t3"


NO_TOKEN_COMPLETIONS = {
    "text-empty": {"text": ""},
    "text-null": {"text": None},
    "no-text-key": {},
    "text-empty-token-ids-empty": {"text": "", "token_ids": []},
}


@pytest.mark.parametrize("first", list(NO_TOKEN_COMPLETIONS.values()), ids=list(NO_TOKEN_COMPLETIONS))
def test_fix169_a_completions_chunk_without_a_token_starts_no_ttft(
    server: tuple[Scripted, str], first: Any
) -> None:
    rec = _ask(server, [(0.0, first), *_tokens(4, key="text")], 4, chat=False)
    assert rec.ok, rec.error
    assert rec.ttft_ms is not None and rec.ttft_ms >= WAIT_S * 1000, rec.ttft_ms
    assert len(rec.itl_ms) == 3 and rec.text == " t0 t1 t2 t3"


def test_fix169_chunks_without_a_token_mid_stream_are_no_inter_token_gap(
    server: tuple[Scripted, str],
) -> None:
    """An empty delta between tokens is no decode step: its wait is part of the next gap, not a gap of its
    own (the gaps stay one fewer than the chunks with a token)."""
    t = _tokens(4)
    rec = _ask(server, [t[0], (0.005, {"delta": {"content": ""}}), (0.005, {"delta": {}}), *t[1:]], 4)
    assert rec.ok and len(rec.itl_ms) == 3, (rec.error, rec.itl_ms)


def test_fix169_a_finish_chunk_without_a_token_is_no_gap(server: tuple[Scripted, str]) -> None:
    """llama-cpp-python ends with ``"delta": {}`` and the finish_reason: no decode step."""
    t = _tokens(3)
    last = (0.005, {"delta": {}, "finish_reason": "stop"})
    rec = _ask(server, [*t[:-1], (0.005, {"delta": {"content": " t2"}, "finish_reason": None}), last], 3)
    assert rec.ok and len(rec.itl_ms) == 2 and rec.finish_reason == "stop", (rec.error, rec.itl_ms)


# --- neighbours: chunks that do carry a token -----------------------------------------------------------

A_TOKEN = {
    "role-with-text": ({"delta": {"role": "assistant", "content": "Hi"}}, True),
    "reasoning-content": ({"delta": {"role": "assistant", "reasoning_content": "hm"}}, True),
    "reasoning": ({"delta": {"reasoning": "hm"}}, True),
    "empty-text-with-token-ids": ({"delta": {"content": ""}, "token_ids": [7]}, True),
    "role-with-token-ids": ({"delta": ROLE, "token_ids": [7]}, True),
    "completions-text": ({"text": "Hi"}, False),
    "completions-empty-text-with-token-ids": ({"text": "", "token_ids": [7]}, False),
}


@pytest.mark.parametrize(("first", "chat"), list(A_TOKEN.values()), ids=list(A_TOKEN))
def test_fix169_a_chunk_with_a_token_starts_ttft(
    server: tuple[Scripted, str], first: Any, chat: bool
) -> None:
    """Text, reasoning or token ids streamed at once: the first token came at once."""
    ids = "token_ids" in first
    rec = _ask(server, [(0.0, first), *_tokens(4, key="content" if chat else "text", ids=ids)], 5, chat=chat)
    assert rec.ok, rec.error
    assert rec.ttft_ms is not None and rec.ttft_ms < WAIT_S * 1000 / 2, rec.ttft_ms
    assert len(rec.itl_ms) == 4 and max(rec.itl_ms) >= WAIT_S * 1000 * 0.9  # the wait: the first gap


def test_fix169_ids_on_every_chunk_time_a_token_without_text(server: tuple[Scripted, str]) -> None:
    """vLLM's ``return_token_ids``: a token that decodes to no text yet comes with its id — a decode step."""
    first = (0.0, {"delta": {"content": ""}, "token_ids": [7]})
    rec = _ask(server, [first, *_tokens(4, ids=True)], 5)
    assert rec.ok and rec.output_tokens == 5 and rec.ttft_ms is not None and rec.ttft_ms < WAIT_S * 500


# --- more chunks with a token than the stream's exact count ---------------------------------------------


def test_fix169_ids_fewer_than_the_chunks_with_a_token_contradict_the_stream(
    server: tuple[Scripted, str],
) -> None:
    """Ids on every chunk with text, no usage: one id on four chunks with text — not a 1-token answer."""
    steps = _tokens(4, ids=True)
    steps = [steps[0], *[(w, {**c, "token_ids": []}) for w, c in steps[1:]]]
    rec = _ask(server, steps, None)
    assert not rec.ok and not rec.fault
    assert "the stream carried 1 token ids" in (rec.error or "") and "fewer than the 4 chunks" in (
        rec.error or ""
    )
    assert rec.output_tokens is None


def test_fix169_ids_only_chunks_count_against_the_usage(server: tuple[Scripted, str]) -> None:
    """Two chunks of ids alone and two of text alone are four decode steps: usage 3 contradicts them."""
    steps: list[Step] = [
        (0.0, {"delta": {"content": ""}, "token_ids": [1]}),
        (0.0, {"delta": {}, "token_ids": [2]}),
        *_tokens(2),
    ]
    low = _ask(server, steps, 3)
    assert not low.ok and "fewer than the 4 chunks with text or token ids" in (low.error or ""), low.error
    fits = _ask(server, steps, 4)
    assert fits.ok and fits.output_tokens == 4, fits.error


def test_fix169_the_audits_count_role_chunk_and_six_tokens_usage_six(server: tuple[Scripted, str]) -> None:
    """Usage 6 on a role chunk and 6 token chunks: six decode steps (five gaps), no contradiction."""
    rec = _ask(server, [(0.0, {"delta": ROLE}), *_tokens(6)], 6)
    assert rec.ok and rec.output_tokens == 6 and len(rec.itl_ms) == 5, rec.error


# --- the stream-shape checks stand ----------------------------------------------------------------------

MALFORMED = {
    "role-content-not-text": ({"delta": {"role": "assistant", "content": 5}}, "delta.content is int"),
    "delta-not-an-object": ({"delta": "A"}, "delta is str"),
    "token-ids-not-whole-numbers": ({"delta": ROLE, "token_ids": ["1"]}, "token_ids is not a list"),
    "reasoning-not-text": ({"delta": {"role": "assistant", "reasoning": 1}}, "delta.reasoning is int"),
}


@pytest.mark.parametrize(("first", "why"), list(MALFORMED.values()), ids=list(MALFORMED))
def test_fix169_a_malformed_chunk_without_a_token_is_still_malformed(
    server: tuple[Scripted, str], first: Any, why: str
) -> None:
    rec = _ask(server, [(0.0, first), *_tokens(2)], 2)
    assert not rec.ok and (rec.error or "").startswith("malformed stream chunk") and why in (rec.error or "")
    assert rec.ttft_ms is None


def test_fix169_a_role_chunk_of_another_choice_index_is_still_another_answer(
    server: tuple[Scripted, str],
) -> None:
    rec = _ask(server, [(0.0, {"delta": ROLE, "index": 1}), *_tokens(2)], 2)
    assert not rec.ok and "a choice of index int 1" in (rec.error or ""), rec.error


def test_fix169_a_role_chunk_alone_is_no_output(server: tuple[Scripted, str]) -> None:
    rec = _ask(server, [(0.0, {"delta": ROLE}), (0.0, {"delta": {}, "finish_reason": "stop"})], 1)
    assert not rec.ok and (rec.error or "").startswith("no output"), rec.error
    assert rec.ttft_ms is None and rec.itl_ms == []


# --- the canary: a role chunk ahead of a hung loop ------------------------------------------------------


@pytest.fixture
def short_probes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(benchmark_module, "LIVENESS_TIMEOUT_S", 1.0)


def _canary(
    server: tuple[Scripted, str], steps: list[Step], *, chat: bool = True
) -> tuple[str | None, dict[str, Any]]:
    s, base = server
    s.scripts["canary"] = (steps, 1)
    url = base + ("/v1/chat/completions" if chat else "/v1/completions")

    async def go() -> tuple[str | None, dict[str, Any]]:
        check = EngineCheck(base, 1.0, url=url, model=MODEL)
        why = await check.hangs()
        return why, check.checks[-1]

    return asyncio.run(go())


@pytest.mark.parametrize(
    ("first", "chat"),
    [
        ({"delta": ROLE}, True),
        ({"delta": {}}, True),
        ({"text": ""}, False),
        ({"text": "", "token_ids": []}, False),
    ],
    ids=["chat-role-only", "chat-empty-delta", "completions-empty-text", "completions-empty-ids"],
)
def test_fix169_a_role_only_chunk_ahead_of_a_hung_loop_still_hangs(
    server: tuple[Scripted, str], short_probes: None, first: Any, chat: bool
) -> None:
    why, check = _canary(server, [(0.0, first), (0.0, "hang")], chat=chat)
    assert check["verdict"] == "hangs", check
    assert why is not None and why.endswith("gave no first token within 1 s: it hangs"), why
    assert check["canary"]["ttft_ms"] is None


def test_fix169_neighbour_a_role_chunk_then_a_token_is_a_moving_loop(
    server: tuple[Scripted, str], short_probes: None
) -> None:
    steps: list[Step] = [
        (0.0, {"delta": ROLE}),
        (0.2, {"delta": {"content": "yes"}, "finish_reason": "length"}),
    ]
    why, check = _canary(server, steps)
    assert why is None and check["verdict"] == "answers", check
    assert check["canary"]["ttft_ms"] >= 200
