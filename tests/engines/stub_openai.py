#!/usr/bin/env python3
"""A deterministic OpenAI-compatible streaming server for harness tests and client benchmarks.

FastAPI + uvicorn on 127.0.0.1. It serves ``/v1/models``, ``/v1/chat/completions`` and
``/v1/completions`` (streaming SSE with ``stream_options.include_usage``, or a plain JSON reply). The
reply to a prompt is looked up in ``answers`` (by the last user message or the prompt text), else it is
``tok0 tok1 …`` (``tokens`` words); each word is one chunk. Behaviour is scripted by :class:`StubConfig`:

  ttft_s / itl_s     delay before the first chunk / between chunks
  ttft_growth_s      the n-th request waits n × this longer for its first chunk (a growing queue)
  serial             one request at a time (a single-slot engine: throughput flat, queueing grows)
  vary_on_repeat     the n-th time a prompt is seen (n ≥ 1), its reply starts "again{n} " (all
                     prompts, or a set of prompt texts)
  error_every        every k-th request is answered 400 (a client error, not an engine fault)
  fail_after         requests after the first k are answered 500 (an engine fault)
  reset_after        requests after the first k lose their connection mid-stream (an engine reset)
  exit_after         (as a process, ``--exit-after``) the process dies on request k+1 (an engine crash)
  hang_after         from completion request k+1 on, the server answers nothing, /health and /v1/models
                     included (an engine that hangs), until the stub is stopped
  stop_after         (as a process, ``--stop-after``) completion request k+1 SIGSTOPs the process (an
                     engine stopped by a signal, as ``kill -STOP`` does: the kernel still accepts
                     connections, nothing answers them)
  served_ids_later   the ids ``/v1/models`` lists once more than ``models_change_after`` completion
                     requests came (an engine restarted on another model, or under another name)
  served_ids         the ids ``/v1/models`` lists, in order (default: ``model_id``; vLLM's
                     ``--served-model-name alias name``, a base model and its LoRA adapters list several)
  echo_model         every answer names the ``model`` it was asked for (vLLM, llama.cpp)
  reasoning_tokens   a streamed answer starts with this many ``delta.reasoning_content`` chunks (a
                     reasoning parser), counted against ``max_tokens`` (finish ``length`` when it runs out)

In tests: ``with serve_stub(StubConfig(...)) as base_url: ...`` (a thread). For benchmarks, as a process:
``python tests/engines/stub_openai.py --port N [--tokens 16] [--itl-ms 0]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

__all__ = ["StubConfig", "build_app", "serve_stub"]


@dataclass
class StubConfig:
    model_id: str = "stub-model"
    tokens: int = 8
    answers: dict[str, str] = field(default_factory=dict)
    ttft_s: float = 0.0
    ttft_growth_s: float = 0.0  # the n-th request waits ttft_s + n × this (a queue that keeps growing)
    itl_s: float = 0.0
    serial: bool = False
    vary_on_repeat: bool | frozenset[str] = False  # True: every prompt; a set: those prompts
    error_every: int = 0
    fail_after: int | None = None
    reset_after: int | None = None
    token_ids: bool = False  # include vLLM-style ``token_ids`` in each chunk when asked
    exit_after: int | None = None  # as a process: the (N+1)-th completion request kills it (exit 1)
    empty_deltas: int = 0  # streamed first: chunks whose delta has empty text (tokens with no text yet)
    choices_object: bool = False  # stream one chunk whose ``choices`` is an object, not a list
    served_ids: tuple[str, ...] = ()  # the ids /v1/models lists (empty: model_id alone)
    echo_model: bool = False  # answers name the model asked for
    reasoning_tokens: int = 0  # streamed chat answers reason first (delta.reasoning_content)
    asked_models: list[str] = field(default_factory=list)  # the ``model`` of every completion request
    hang_after: int | None = None  # completion requests after the first k: nothing answers any more
    stop_after: int | None = None  # as a process: completion request k+1 SIGSTOPs it
    served_ids_later: tuple[str, ...] = ()  # what /v1/models lists after models_change_after completions
    models_change_after: int | None = None


class _Reset(Exception):
    """Raised inside a streaming body: uvicorn drops the connection mid-response."""


def _prompt_key(body: dict[str, Any]) -> str:
    if "messages" in body:
        users = [m for m in body["messages"] if isinstance(m, dict) and m.get("role") == "user"]
        content = users[-1].get("content") if users else ""
        if isinstance(content, list):
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        return str(content)
    return str(body.get("prompt", ""))


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "code": status}}, status_code=status)


def _usage(completion: int) -> dict[str, int]:
    return {"prompt_tokens": 4, "completion_tokens": completion, "total_tokens": 4 + completion}


def build_app(cfg: StubConfig) -> FastAPI:
    app = FastAPI()
    state: dict[str, Any] = {"count": 0, "seen": {}, "hung": False}
    lock = asyncio.Lock()
    release = threading.Event()  # set when the stub is stopped: a hung server lets its requests go
    app.state.release = release

    async def hang() -> Response:
        while not release.is_set():
            await asyncio.sleep(0.05)
        return _error(503, "the stub was stopped while it hung")

    def reply_for(key: str) -> str:
        seen: dict[str, int] = state["seen"]
        n = seen.get(key, 0)
        seen[key] = n + 1
        text = cfg.answers.get(key) or " ".join(f"tok{i}" for i in range(cfg.tokens))
        vary = cfg.vary_on_repeat is True or (
            isinstance(cfg.vary_on_repeat, frozenset) and key in cfg.vary_on_repeat
        )
        return f"again{n} {text}" if vary and n else text

    @app.get("/health", response_model=None)
    async def health() -> dict[str, str] | Response:
        if state["hung"]:
            return await hang()
        return {"status": "ok"}

    @app.get("/v1/models", response_model=None)
    async def models() -> dict[str, Any] | Response:
        if state["hung"]:
            return await hang()
        ids = cfg.served_ids or (cfg.model_id,)
        if cfg.models_change_after is not None and state["count"] > cfg.models_change_after:
            ids = cfg.served_ids_later
        return {"object": "list", "data": [{"id": i, "object": "model"} for i in ids]}

    async def complete(request: Request, chat: bool) -> Response:
        body = await request.json()
        if state["hung"]:
            return await hang()
        state["count"] += 1
        number = state["count"]
        if cfg.hang_after is not None and number > cfg.hang_after:
            state["hung"] = True
            return await hang()
        if cfg.stop_after is not None and number > cfg.stop_after:
            os.kill(os.getpid(), signal.SIGSTOP)
        cfg.asked_models.append(str(body.get("model")))
        named = {"model": body.get("model") or cfg.model_id} if cfg.echo_model else {}
        if cfg.exit_after is not None and number > cfg.exit_after:
            sys.stderr.write(
                "RuntimeError: scripted engine crash\nvllm.v1.engine.exceptions.EngineDeadError: "
                "EngineCore encountered an issue. See stack trace (above) for the root cause.\n"
            )
            sys.stderr.flush()
            os._exit(1)
        if cfg.error_every and number % cfg.error_every == 0:
            return JSONResponse(
                {"error": {"message": "bad request (scripted)", "code": 400}}, status_code=400
            )
        if cfg.fail_after is not None and number > cfg.fail_after:
            return JSONResponse(
                {"error": {"message": "EngineDeadError (scripted)", "code": 500}}, status_code=500
            )
        reset = cfg.reset_after is not None and number > cfg.reset_after
        text = reply_for(_prompt_key(body))
        words = text.split(" ")
        pieces = [w if i == 0 else " " + w for i, w in enumerate(words)]
        limit = body.get("max_completion_tokens") or body.get("max_tokens")  # vllm bench sends the former
        # as real engines answer: finish_reason "length" where max_tokens cut the answer, else "stop"
        cut = limit is not None and len(pieces) > int(limit)
        pieces = pieces[: int(limit or len(pieces))]
        rid = f"stub-{number}"
        if not body.get("stream"):
            out = "".join(pieces)
            choice: dict[str, Any] = {"index": 0, "finish_reason": "length" if cut else "stop"}
            if chat:
                choice["message"] = {"role": "assistant", "content": out}
            else:
                choice["text"] = out
            reply = {
                "id": rid,
                "object": "chat.completion",
                **named,
                "choices": [choice],
                "usage": _usage(len(pieces)),
            }
            return JSONResponse(reply)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        want_ids = cfg.token_ids and bool(body.get("return_token_ids"))
        thoughts = [f" think{i}" for i in range(cfg.reasoning_tokens)] if chat else []
        if thoughts:  # the reasoning comes first and counts against max_tokens
            words = ([w.strip() for w in thoughts] + text.split(" "))[: int(limit or 1 << 30)]
            pieces = pieces[: max(0, len(words) - len(thoughts))]
            thoughts = thoughts[: len(words)]
        ran_out = (bool(thoughts) and limit is not None and len(thoughts) + len(pieces) >= int(limit)) or (
            not thoughts and cut
        )

        def chunk(piece: str | None, finish: str | None, index: int, *, thought: bool = False) -> str:
            c: dict[str, Any] = {"index": 0, "finish_reason": finish}
            if chat:
                key = "reasoning_content" if thought else "content"
                c["delta"] = {key: piece} if piece is not None else {}
            else:
                c["text"] = piece or ""
            if want_ids and piece:  # one token a piece, as its usage counts them (vLLM: the ids of the step)
                c["token_ids"] = [(sum(map(ord, piece)) + 7 * index) % 32000]
            return "data: " + json.dumps({"id": rid, "object": "chunk", **named, "choices": [c]}) + "\n\n"

        async def stream() -> AsyncIterator[str]:
            if cfg.serial:
                await lock.acquire()
            try:
                if cfg.ttft_s or cfg.ttft_growth_s:
                    await asyncio.sleep(cfg.ttft_s + number * cfg.ttft_growth_s)
                if cfg.choices_object:
                    yield "data: " + json.dumps({"id": rid, "choices": {"index": 0, "text": "x"}}) + "\n\n"
                for _ in range(cfg.empty_deltas):  # as vLLM streams part of a UTF-8 character
                    yield chunk("", None, 0)
                    if cfg.itl_s:
                        await asyncio.sleep(cfg.itl_s)
                for i, thought in enumerate(thoughts):
                    last = i == len(thoughts) - 1 and not pieces
                    yield chunk(thought, ("length" if ran_out else "stop") if last else None, i, thought=True)
                for i, piece in enumerate(pieces):
                    if i and cfg.itl_s:
                        await asyncio.sleep(cfg.itl_s)
                    if reset and i == 1:
                        raise _Reset("scripted connection reset")
                    finish = ("length" if ran_out else "stop") if i == len(pieces) - 1 else None
                    yield chunk(piece, finish, i)
                if include_usage:
                    n = len(thoughts) + len(pieces)
                    usage = {"prompt_tokens": 4, "completion_tokens": n, "total_tokens": 4 + n}
                    yield (
                        "data: "
                        + json.dumps({"id": rid, "object": "chunk", **named, "choices": [], "usage": usage})
                        + "\n\n"
                    )
                yield "data: [DONE]\n\n"
            finally:
                if cfg.serial:
                    lock.release()

        return StreamingResponse(stream(), media_type="text/event-stream")

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await complete(request, chat=True)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await complete(request, chat=False)

    return app


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serve_stub(cfg: StubConfig | None = None, port: int | None = None) -> Iterator[str]:
    """Serve a stub in a thread for the duration of the block; yields its base URL."""
    port = port or free_port()
    app = build_app(cfg or StubConfig())
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the stub server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        app.state.release.set()
        server.should_exit = True
        thread.join(timeout=10)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="deterministic OpenAI-compatible streaming stub")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--model-id", default="stub-model")
    # the model path a campaign gives its engine (``--model {model}``): a real engine loads it, the stub
    # serves --model-id and ignores it (without it argparse would read --model as --model-id)
    ap.add_argument("--model", default=None)
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--ttft-ms", type=float, default=0.0)
    ap.add_argument("--itl-ms", type=float, default=0.0)
    ap.add_argument("--serial", action="store_true")
    ap.add_argument("--answers", help="JSON file: prompt text → reply")
    ap.add_argument("--fail-after", type=int, help="answer requests after the first N with HTTP 500")
    ap.add_argument(
        "--exit-after", type=int, help="after N completion requests the process dies (an engine that crashes)"
    )
    ap.add_argument("--served-ids", help="comma-separated ids /v1/models lists (default: --model-id)")
    ap.add_argument("--echo-model", action="store_true", help="answers name the model asked for")
    ap.add_argument("--reasoning", type=int, default=0, help="streamed chat answers reason N tokens first")
    ap.add_argument("--hang-after", type=int, help="after N completion requests nothing answers (a hang)")
    ap.add_argument("--stop-after", type=int, help="completion request N+1 SIGSTOPs the process (a hang)")
    ap.add_argument("--served-ids-later", help="comma-separated ids /v1/models lists after a change")
    ap.add_argument(
        "--models-change-after", type=int, help="/v1/models lists --served-ids-later after N completions"
    )
    a = ap.parse_args(argv)
    answers = json.loads(Path(a.answers).read_text()) if a.answers else {}
    cfg = StubConfig(
        a.model_id,
        a.tokens,
        answers=answers,
        ttft_s=a.ttft_ms / 1000,
        itl_s=a.itl_ms / 1000,
        serial=a.serial,
        fail_after=a.fail_after,
        exit_after=a.exit_after,
        served_ids=tuple(i for i in (a.served_ids or "").split(",") if i),
        echo_model=a.echo_model,
        reasoning_tokens=a.reasoning,
        hang_after=a.hang_after,
        stop_after=a.stop_after,
        served_ids_later=tuple(i for i in (a.served_ids_later or "").split(",") if i),
        models_change_after=a.models_change_after,
    )
    uvicorn.run(build_app(cfg), host="127.0.0.1", port=a.port, log_level="warning")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
