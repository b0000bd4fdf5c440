"""Fix 144 (audit 97 f2 and fix 142's gap): one sizing reader, and only the launched program's tokenizer.

* Fix 142 counted a probe's prompt by the engine's tokenizer where its sizing request (max_tokens 1) gave no
  usage, but the harnesses (benchmark, semantic) still sized by usage alone (``size_request``): a harness
  prompt that alone overflows llama-cpp-python's ``--n_ctx`` fails the sizing request with the same HTTP
  500, was never counted, and was blamed on the engine. Now both size by one reader
  (``collectors.sizing.sizing``: the probes drive it over httpx, ``size_request`` over aiohttp) and record
  how they counted the same way (``context.counted``).
* The probe asked every tokenizer it knew and kept whichever answered; the policy took any way of
  ``PROMPT_COUNTS`` whatever engine was launched. Now the collector asks only the tokenizer of the program
  the campaign launched (``counts``: ``ledger.answers.prompt_counts``, the table the policy holds the
  records to, ``PROMPT_COUNTERS``) — a drift between the table and the collector's readers fails here.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from ledger.answers import (
    COUNTED_CONTENT,
    COUNTED_MESSAGES,
    COUNTED_USAGE,
    PROMPT_COUNTERS,
    PROMPT_COUNTS,
    REFUSAL_CONTEXT,
    context_record,
    launched_context,
    launched_counts,
    prompt_counts,
)
from ledger.collectors import campaign as campaign_module
from ledger.collectors.benchmark import CAMPAIGN_CONFIG, BenchmarkSpec, run_benchmark
from ledger.collectors.campaign import structured_schema
from ledger.collectors.corpus import corpus_digest
from ledger.collectors.probe import probe_structured
from ledger.collectors.semantic import SemanticSpec, run_semantic
from ledger.collectors.sizing import TOKENIZERS, Answer, Ask, sizing
from ledger.policy.acceptance import _requests_shown
from ledger.policy.loader import load_policy

from .conftest import REPO
from .test_fix142_prompt_counted_by_tokenizer import n_ctx_100  # noqa: F401 (a fixture)

PARAMS: dict[str, Any] = {
    "refused_http_statuses": [401, 403],
    "context_refused_http_statuses": [400],
    "context_refusal_patterns": ["maximum context length is [0-9]+ tokens"],
}
BROADCAST = "could not broadcast input array from shape (93,) into shape (82,)"
SIZING_500 = (500, f"HTTP 500: {BROADCAST}")
BOS = 1
MODEL = "ctx-tiny"
LLAMA_CPP_PYTHON_COUNTS = prompt_counts("llamacpp", "llama_cpp.server")
VLLM_COUNTS = prompt_counts("vllm", "vllm")
# the endpoint each tokenizer's way asks (what a drift of ``TOKENIZERS`` from ``PROMPT_COUNTERS`` shows)
ENDPOINT = {COUNTED_MESSAGES: "/tokenize", COUNTED_CONTENT: "/extras/tokenize"}
TOO_LONG = "x" * 120  # 120 tokens of text (a byte each), beyond --n_ctx 100 alone
FITS = "x" * 20  # 20 + max_tokens 8 within --n_ctx 100: the lower bound shows nothing

Handler = Callable[[dict[str, Any]], tuple[int, Any]]


def _byte_tokens(body: dict[str, Any]) -> tuple[int, Any]:
    """llama-cpp-python's /extras/tokenize of a byte-level model: BOS, then one token per byte."""
    return 200, {"tokens": [BOS, *(b + 3 for b in str(body["input"]).encode())]}


def _vllm_tokenize(body: dict[str, Any]) -> tuple[int, Any]:
    text = "".join(str(m.get("content")) for m in body.get("messages", []))
    count = len(text.encode()) + 5  # the chat template's own tokens
    return 200, {"count": count, "max_model_len": 100, "tokens": list(range(count))}


def _broadcast(body: dict[str, Any]) -> tuple[int, Any]:
    return 500, {"error": {"message": BROADCAST, "type": "internal_server_error"}}


# llama-cpp-python 0.3.36 under --n_ctx 100: every chat request whose prompt alone overflows fails HTTP 500,
# streamed or not (the sizing request too); it serves /extras/tokenize, not /tokenize
LLAMA_CPP_PYTHON: dict[str, Handler] = {"/v1/chat/completions": _broadcast, "/extras/tokenize": _byte_tokens}


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

    def tokenized(self) -> list[str]:
        return [p for p, _ in self.asked if p in ENDPOINT.values()]


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


def _corpus(tmp_path: Path, prompt: str, **row: Any) -> Path:
    path = tmp_path / "corpus.jsonl"
    path.write_text(json.dumps({"id": "p0", "messages": [{"role": "user", "content": prompt}], **row}) + "\n")
    return path


def _benchmark(url: str, tmp_path: Path, prompt: str, **kwargs: Any) -> Any:
    path = _corpus(tmp_path, prompt, max_tokens=8)
    spec = BenchmarkSpec(
        path, corpus_digest(path), concurrency=(1,), requests_per_level=1, model=MODEL, request_timeout_s=10
    )
    return run_benchmark(spec, url, out_dir=tmp_path / "o", params=PARAMS, context=("--n_ctx", 100), **kwargs)


def _stored(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (tmp_path / "o" / "benchmark-requests.jsonl").read_text().splitlines()]


LAUNCH = {
    "engine": "llamacpp",
    "command": ["/venv/bin/python", "-m", "llama_cpp.server", "--model", "/m", "--n_ctx", "100"],
    "env": {},
}


# --------------------------------------------------- fix 142's gap: a harness prompt alone beyond the context
def test_benchmark_prompt_alone_beyond_n_ctx_is_counted_by_the_tokenizer_and_is_the_campaigns(
    serve: Callable[[dict[str, Handler]], _Engine], tmp_path: Path
) -> None:
    engine = serve(LLAMA_CPP_PYTHON)
    result = _benchmark(engine.url, tmp_path, TOO_LONG, counts=LLAMA_CPP_PYTHON_COUNTS)
    assert result.outcome == CAMPAIGN_CONFIG, result.stopped
    [rec] = result.records
    assert rec.http_status == 500 and rec.refusal == REFUSAL_CONTEXT
    assert rec.context == context_record("--n_ctx", 100, 120, SIZING_500, COUNTED_CONTENT)
    assert engine.tokenized() == ["/extras/tokenize", "/extras/tokenize"]  # the empty text, the prompt
    # the sizing request: the same body, not streamed, max_tokens 1
    sized = [b for p, b in engine.asked if p == "/v1/chat/completions" and b["max_tokens"] == 1]
    assert len(sized) == 1 and "stream" not in sized[0] and "stream_options" not in sized[0]
    # the policy reads the stored record back, held to the launch's context and ways: shown
    params = dict(load_policy("evidence-acceptance").params)
    held = (launched_context(LAUNCH), launched_counts(LAUNCH))
    assert _requests_shown(_stored(tmp_path), {"outcome": "config"}, params, *held)[1] == []
    # held to a vLLM launch's ways (its /tokenize): not shown — the engine's
    assert _requests_shown(_stored(tmp_path), {"outcome": "config"}, params, held[0], VLLM_COUNTS)[1] != []


def test_semantic_item_prompt_alone_beyond_n_ctx_is_counted_by_the_tokenizer_and_is_the_campaigns(
    serve: Callable[[dict[str, Handler]], _Engine], tmp_path: Path
) -> None:
    engine = serve(LLAMA_CPP_PYTHON)
    path = _corpus(tmp_path, TOO_LONG, checks=[{"type": "contains", "value": "y"}])
    result = run_semantic(
        SemanticSpec(path, corpus_digest(path), model=MODEL, request_timeout_s=10),
        engine.url,
        out_dir=tmp_path / "o",
        params=PARAMS,
        context=("--n_ctx", 100),
        counts=LLAMA_CPP_PYTHON_COUNTS,
    )
    assert result.outcome == CAMPAIGN_CONFIG, result.stopped
    assert result.refused == ["p0"]
    [rec] = result.requests
    assert rec.context == context_record("--n_ctx", 100, 120, SIZING_500, COUNTED_CONTENT)


def test_harness_not_told_its_engines_ways_counts_by_usage_alone(
    serve: Callable[[dict[str, Handler]], _Engine], tmp_path: Path
) -> None:
    """No ``counts``: no tokenizer is asked — nothing counted, the failure stays the engine's."""
    engine = serve(LLAMA_CPP_PYTHON)
    result = _benchmark(engine.url, tmp_path, TOO_LONG)
    assert result.outcome != CAMPAIGN_CONFIG
    [rec] = result.records
    assert rec.context == context_record("--n_ctx", 100, None, SIZING_500) and rec.refusal is None
    assert engine.tokenized() == []


def test_harness_asks_no_tokenizer_the_launched_program_does_not_serve(
    serve: Callable[[dict[str, Handler]], _Engine], tmp_path: Path
) -> None:
    """vLLM's ways against llama-cpp-python (no /tokenize): asked, 404, no count; /extras/tokenize never."""
    engine = serve(LLAMA_CPP_PYTHON)
    result = _benchmark(engine.url, tmp_path, TOO_LONG, counts=VLLM_COUNTS)
    assert result.outcome != CAMPAIGN_CONFIG
    assert result.records[0].context == context_record("--n_ctx", 100, None, SIZING_500)
    assert engine.tokenized() == ["/tokenize"]


def test_harness_prompt_whose_lower_bound_fits_is_not_refused(
    serve: Callable[[dict[str, Handler]], _Engine], tmp_path: Path
) -> None:
    engine = serve(LLAMA_CPP_PYTHON)
    result = _benchmark(engine.url, tmp_path, FITS, counts=LLAMA_CPP_PYTHON_COUNTS)
    assert result.outcome != CAMPAIGN_CONFIG
    [rec] = result.records
    assert rec.context == context_record("--n_ctx", 100, 20, SIZING_500, COUNTED_CONTENT)
    assert rec.refusal is None


def test_harness_sizing_answered_with_usage_asks_no_tokenizer(
    serve: Callable[[dict[str, Handler]], _Engine], tmp_path: Path
) -> None:
    def chat(body: dict[str, Any]) -> tuple[int, Any]:
        if body.get("stream"):
            return _broadcast(body)
        choice = {"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": "length"}
        return 200, {"choices": [choice], "usage": {"prompt_tokens": 131, "completion_tokens": 1}}

    engine = serve({**LLAMA_CPP_PYTHON, "/v1/chat/completions": chat})
    result = _benchmark(engine.url, tmp_path, TOO_LONG, counts=LLAMA_CPP_PYTHON_COUNTS)
    assert result.outcome == CAMPAIGN_CONFIG
    assert result.records[0].context == context_record("--n_ctx", 100, 131, None, COUNTED_USAGE)
    assert engine.tokenized() == []


# ---------------------------------------------------------------- one reader: the steps, driven by hand
def _drive(body: dict[str, Any], counts: tuple[str, ...], answer: Callable[[Ask], Answer]) -> Any:
    steps = sizing("http://e/v1/completions", body, ("--n_ctx", 100), counts)
    try:
        ask = next(steps)
        while True:
            ask = steps.send(answer(ask))
    except StopIteration as done:
        return done.value


def _llama(ask: Ask) -> Answer:
    if ask[0].endswith("/extras/tokenize"):
        return 200, json.dumps(_byte_tokens(ask[1])[1]).encode()
    if ask[0].endswith("/tokenize"):
        return 200, json.dumps(_vllm_tokenize(ask[1])[1]).encode()
    return 500, json.dumps({"error": {"message": BROADCAST}}).encode()


def test_a_completions_prompt_is_counted_whole_by_llama_cpp_pythons_tokenizer() -> None:
    """A completions request's text is tokenized as the server tokenizes it: whole, its ends kept."""
    body = {"prompt": f" {TOO_LONG}\n", "max_tokens": 8, "stream": True}
    ctx = _drive(body, LLAMA_CPP_PYTHON_COUNTS, _llama)
    assert ctx == context_record("--n_ctx", 100, 122, SIZING_500, COUNTED_CONTENT)
    # vLLM's /tokenize is asked the prompt itself (fix 150): never llama-cpp-python's /extras/tokenize
    asked: list[Ask] = []

    def vllm(ask: Ask) -> Answer:
        asked.append(ask)
        return _llama(ask)

    assert _drive(body, VLLM_COUNTS, vllm)["counted"] == COUNTED_MESSAGES
    assert [a[1] for a in asked if a[0].endswith("/tokenize")] == [
        {"prompt": body["prompt"], "add_special_tokens": True}
    ]
    assert not any(a[0].endswith("/extras/tokenize") for a in asked)


@pytest.mark.parametrize(
    "messages",
    [
        pytest.param([], id="none"),
        pytest.param([{"role": "user", "content": ["x"]}], id="content-not-text"),
        pytest.param([{"role": "user"}], id="content-dropped"),
        pytest.param(["x"], id="message-not-a-table"),
        pytest.param("x", id="messages-text"),
    ],
)
def test_messages_not_of_text_are_not_counted_by_the_content(messages: Any) -> None:
    ctx = _drive({"messages": messages, "max_tokens": 8}, LLAMA_CPP_PYTHON_COUNTS, _llama)
    assert ctx == context_record("--n_ctx", 100, None, SIZING_500)


def test_no_answer_to_the_sizing_request_records_no_sizing() -> None:
    def none(ask: Ask) -> Answer:
        return None if ask[0].endswith("/completions") else _llama(ask)

    ctx = _drive({"prompt": TOO_LONG, "max_tokens": 8}, LLAMA_CPP_PYTHON_COUNTS, none)
    assert ctx == context_record("--n_ctx", 100, 120, None, COUNTED_CONTENT)


# ------------------------------------------------------------- the collector picks its readers from the table
def test_the_collectors_tokenizers_are_the_tables() -> None:
    assert set(TOKENIZERS) == set(PROMPT_COUNTERS) == set(PROMPT_COUNTS) - {COUNTED_USAGE}
    assert set(ENDPOINT) == set(TOKENIZERS)


def test_each_program_the_table_names_is_one_the_campaign_runs_as_that_kind() -> None:
    kinds = campaign_module._KIND_OF_PROGRAM
    for kind, programs in PROMPT_COUNTERS.values():
        assert all(kinds.get(program) == kind for program in programs), (kind, programs)
    # every vLLM program the campaign runs serves vLLM's /tokenize
    vllm = {p for p, k in kinds.items() if k == "vllm"}
    assert vllm <= set(PROMPT_COUNTERS[COUNTED_MESSAGES][1])


@pytest.mark.parametrize(("program", "kind"), sorted(campaign_module._KIND_OF_PROGRAM.items()))
def test_the_probe_asks_only_the_tokenizer_of_the_launched_program(
    serve: Callable[[dict[str, Handler]], _Engine], program: str, kind: str
) -> None:
    """Both tokenizers answer: the probe asks the one its program serves, and records that way."""
    engine = serve({**LLAMA_CPP_PYTHON, "/tokenize": _vllm_tokenize})
    counts = prompt_counts(kind, program)
    p = probe_structured(
        engine.url,
        schema=structured_schema(),
        fmt="json_object",
        prompt=TOO_LONG,
        model=MODEL,
        max_tokens=64,
        timeout=10,
        context=("--n_ctx", 100),
        counts=counts,
    )
    ways = [w for w in counts if w != COUNTED_USAGE]
    assert sorted(set(engine.tokenized())) == [ENDPOINT[w] for w in ways]
    assert p["details"]["context"]["counted"] == (ways[0] if ways else None)


def test_campaign_passes_the_ways_of_its_program_wherever_it_passes_the_context() -> None:
    """Every probe and harness the campaign sizes against ``_context_length()`` is told the ways of the
    program it launched (``_prompt_counts()``): read in the source, as fix 118's test reads the context."""
    src = (REPO / "collectors" / "campaign.py").read_text(encoding="utf-8")
    calls = src.count("context=self._context_length()")
    assert calls == 5 and src.count("counts=self._prompt_counts()") == calls
    for part in src.split("context=self._context_length()")[1:]:
        assert part.split("\n", 2)[1].strip().startswith("counts=self._prompt_counts()")


# ------------------------------------------------------------- slow: the real llama-cpp-python at --n_ctx 100
@pytest.mark.slow
def test_real_llama_cpp_python_harness_prompt_beyond_n_ctx_is_counted_and_the_campaigns(
    n_ctx_100: str,  # noqa: F811 (fix 142's fixture, imported above)
    tmp_path: Path,
) -> None:
    """The streamed request fails without a completion, its sizing request with HTTP 500 (the prompt alone
    does not fit the server's arrays): counted by /extras/tokenize, the campaign's context."""
    result = _benchmark(n_ctx_100, tmp_path, TOO_LONG, counts=LLAMA_CPP_PYTHON_COUNTS)
    assert result.outcome == CAMPAIGN_CONFIG, result.stopped
    [rec] = result.records
    assert rec.refusal == REFUSAL_CONTEXT and rec.context is not None, rec
    assert rec.context["counted"] == COUNTED_CONTENT and rec.context["sizing"]["http_status"] == 500
    assert rec.context["prompt_tokens"] == len(TOO_LONG.encode())  # the trained model: a byte per token
