"""Fix 142 (audit 95 f2): a context smaller than a probe's own prompt was blamed on the engine.

llama-cpp-python 0.3.36 launched with ``--n_ctx 100`` (the structured probe's prompt is 111 tokens, its
max_tokens 64) answered the probe with HTTP 500 "could not broadcast input array …" — and the sizing request
(the same messages, max_tokens 1) with the same 500: its prompt alone does not fit the server's arrays. The
probe recorded ``prompt_tokens: null``, ``context_overflow`` showed nothing, and the verdict was NOT
QUALIFIED — RUNTIME RELIABILITY, where ``--n_ctx 128`` (prompt fits, prompt + max_tokens does not) was
INCONCLUSIVE. Now where the sizing request gives no count, the probe asks the engine's own tokenizer
(``collectors.sizing.sizing``): vLLM's ``POST /tokenize`` with the messages (its chat template applied:
the count), else llama-cpp-python's ``POST /extras/tokenize`` of each message's text (no template: a lower
bound), and records how it counted (``details.context.counted``, ``ledger.answers.PROMPT_COUNTS``).

And the collector's ``context_length`` now reads llama-cpp-python's own default (2048) where the campaign
sets none, as the policy reads the launch (fix 136): one reader end to end.
"""

from __future__ import annotations

import json
import os
import signal
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
    DEFAULT_CONTEXT,
    REFUSAL_CONTEXT,
    context_overflow,
    context_record,
    launched_context,
    prompt_counts,
    refusal,
)
from ledger.collectors.campaign import context_length, load_campaign, structured_schema
from ledger.collectors.launch import launch_env, relevant_env
from ledger.collectors.probe import probe_completion, probe_sequential, probe_structured
from ledger.errors import ConfigError

from .conftest import ensure_engine, free_port

PARAMS: dict[str, Any] = {
    "refused_http_statuses": [401, 403],
    "context_refused_http_statuses": [400],
    "context_refusal_patterns": ["maximum context length is [0-9]+ tokens"],
    "request_form_refused_http_statuses": [400, 422],
    "request_form_refusal_patterns": ["^[0-9]+ validation errors? .*response_format"],
}
BROADCAST = "could not broadcast input array from shape (93,) into shape (82,)"
SIZING_500 = (500, f"HTTP 500: {BROADCAST}")
PROMPT = 'Answer with the JSON object {"status": "READY"}.'
BOS = 1
# the ways the collector counts a prompt of each program it launches (fix 144: it asks only the tokenizer
# the program serves)
LLAMA_CPP_PYTHON_COUNTS = prompt_counts("llamacpp", "llama_cpp.server")
VLLM_COUNTS = prompt_counts("vllm", "vllm")

Handler = Callable[[dict[str, Any]], tuple[int, Any]]


def _byte_tokens(body: dict[str, Any]) -> tuple[int, Any]:
    """llama-cpp-python's /extras/tokenize of a byte-level model: BOS, then one token per byte."""
    return 200, {"tokens": [BOS, *(b + 3 for b in str(body["input"]).encode())]}


def _broadcast(body: dict[str, Any]) -> tuple[int, Any]:
    return 500, {"error": {"message": BROADCAST, "type": "internal_server_error"}}


def _not_found(body: dict[str, Any]) -> tuple[int, Any]:
    return 404, {"detail": "Not Found"}


LLAMA_CPP_PYTHON: dict[str, Handler] = {
    "/v1/chat/completions": _broadcast,
    "/extras/tokenize": _byte_tokens,
    "/tokenize": _not_found,
}


class _Engine:
    def __init__(self, routes: dict[str, Handler]) -> None:
        self.routes = routes
        self.asked: list[tuple[str, dict[str, Any]]] = []
        engine = self

        class Handle(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = json.loads(raw or b"{}")
                engine.asked.append((self.path, body))
                status, answer = engine.routes.get(self.path, _not_found)(body)
                out = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handle)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def paths(self) -> list[str]:
        return [p for p, _ in self.asked]


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


def _structured(url: str, n_ctx: int = 100, **over: Any) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "schema": structured_schema(),
        "fmt": "json_object",
        "prompt": PROMPT,
        "model": "ctx-tiny",
        "max_tokens": 64,
        "timeout": 10,
        "context": ("--n_ctx", n_ctx),
        "counts": LLAMA_CPP_PYTHON_COUNTS,
    }
    return probe_structured(url, **{**kwargs, **over})


# ------------------------------------------------------------ the failure: the prompt alone overflows
def test_prompt_alone_beyond_n_ctx_is_counted_by_the_tokenizer_and_is_the_campaigns_context(
    serve: Callable[[dict[str, Handler]], _Engine],
) -> None:
    engine = serve(LLAMA_CPP_PYTHON)
    p = _structured(engine.url)
    assert p["ok"] is False and p["http_status"] == 500
    # the text's own tokens: its bytes, less the BOS every text gets (the count of the empty text)
    content = len(PROMPT.encode())
    assert p["details"]["context"] == context_record("--n_ctx", 100, content, SIZING_500, COUNTED_CONTENT)
    assert context_overflow(p) == ("--n_ctx", 100, content, 64)
    assert refusal(p, PARAMS) == REFUSAL_CONTEXT
    assert refusal(p, PARAMS, launched=("--n_ctx", 100), counts=LLAMA_CPP_PYTHON_COUNTS) == REFUSAL_CONTEXT
    # the tokenizer got the message's text and the model, and the empty text
    tokenized = [b for path, b in engine.asked if path == "/extras/tokenize"]
    assert {"input": "", "model": "ctx-tiny"} in tokenized
    assert {"input": PROMPT, "model": "ctx-tiny"} in tokenized


def test_control_and_sequential_probes_are_counted_by_the_tokenizer_too(
    serve: Callable[[dict[str, Handler]], _Engine],
) -> None:
    engine = serve(LLAMA_CPP_PYTHON)
    prompt = "x" * 40
    c = probe_completion(
        engine.url, prompt=prompt, max_tokens=64, context=("--n_ctx", 100), counts=LLAMA_CPP_PYTHON_COUNTS
    )
    assert c["details"]["context"] == context_record("--n_ctx", 100, 40, SIZING_500, COUNTED_CONTENT)
    assert refusal(c, PARAMS) == REFUSAL_CONTEXT
    s = probe_sequential(
        engine.url,
        count=3,
        prompt=prompt,
        max_tokens=64,
        context=("--n_ctx", 100),
        counts=LLAMA_CPP_PYTHON_COUNTS,
    )
    assert s["details"]["context"] == c["details"]["context"] and refusal(s, PARAMS) == REFUSAL_CONTEXT


def test_content_white_space_at_its_ends_is_not_counted(
    serve: Callable[[dict[str, Handler]], _Engine],
) -> None:
    engine = serve(LLAMA_CPP_PYTHON)
    p = _structured(engine.url, prompt=f"  \n{PROMPT}\n ")
    assert p["details"]["context"]["prompt_tokens"] == len(PROMPT.encode())


def test_lower_bound_that_fits_the_context_shows_nothing(
    serve: Callable[[dict[str, Handler]], _Engine],
) -> None:
    """48 tokens of text + 64 fit --n_ctx 128: the templated prompt may not — not shown, the engine's."""
    engine = serve(LLAMA_CPP_PYTHON)
    p = _structured(engine.url, n_ctx=128)
    assert p["details"]["context"]["counted"] == COUNTED_CONTENT
    assert context_overflow(p) is None and refusal(p, PARAMS) is None


# ------------------------------------------------------------ vLLM's /tokenize: the template applied
def _vllm_tokenize(count: int, **over: Any) -> Handler:
    def handle(body: dict[str, Any]) -> tuple[int, Any]:
        if "messages" not in body:
            return 400, {"error": {"message": "prompt: field required"}}
        return 200, {"count": count, "max_model_len": 100, "tokens": list(range(count)), **over}

    return handle


def test_messages_counted_by_vllms_tokenize_are_the_prompts_count(
    serve: Callable[[dict[str, Handler]], _Engine],
) -> None:
    engine = serve({**LLAMA_CPP_PYTHON, "/tokenize": _vllm_tokenize(111)})
    p = _structured(engine.url, counts=VLLM_COUNTS)
    assert p["details"]["context"] == context_record("--n_ctx", 100, 111, SIZING_500, COUNTED_MESSAGES)
    assert refusal(p, PARAMS) == REFUSAL_CONTEXT
    asked = next(b for path, b in engine.asked if path == "/tokenize")
    assert asked == {
        "messages": [{"role": "user", "content": PROMPT}],
        "add_generation_prompt": True,
        "add_special_tokens": False,
        "model": "ctx-tiny",
    }
    assert "/extras/tokenize" not in engine.paths()  # counted: the lower bound is not asked


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param({"tokens": []}, id="llama-server-shape"),  # reads "content" only: no count of messages
        pytest.param({"count": 111, "tokens": list(range(111))}, id="max-model-len-dropped"),
        pytest.param({"count": 111, "max_model_len": 100, "tokens": list(range(110))}, id="count-not-tokens"),
        pytest.param({"count": "111", "max_model_len": 100, "tokens": list(range(111))}, id="count-text"),
        pytest.param({"count": True, "max_model_len": 100, "tokens": [0]}, id="count-bool"),
        pytest.param({"count": 2, "max_model_len": 100, "tokens": [0, -1]}, id="negative-id"),
        pytest.param({"count": 2, "max_model_len": "100", "tokens": [0, 1]}, id="max-model-len-text"),
        pytest.param([111], id="not-a-table"),
    ],
)
def test_tokenize_answer_not_vllms_shape_is_no_count_of_the_messages(
    serve: Callable[[dict[str, Handler]], _Engine], answer: Any
) -> None:
    engine = serve({"/v1/chat/completions": _broadcast, "/tokenize": lambda body: (200, answer)})
    p = _structured(engine.url, counts=VLLM_COUNTS)
    assert p["details"]["context"] == context_record("--n_ctx", 100, None, SIZING_500)
    assert refusal(p, PARAMS) is None  # not counted: the failure is the engine's


# ------------------------------------------------------------ the tokenizer's answer read strictly
@pytest.mark.parametrize(
    "answer",
    [
        pytest.param((200, {"tokens": "1 2 3"}), id="tokens-text"),
        pytest.param((200, {"count": 60}), id="tokens-renamed"),
        pytest.param((200, {"tokens": [1, 2.0]}), id="token-float"),
        pytest.param((200, {"tokens": [1, True]}), id="token-bool"),
        pytest.param((200, {"tokens": [1, -3]}), id="token-negative"),
        pytest.param((200, [1, 2, 3]), id="not-a-table"),
        pytest.param((200, b"not json"), id="not-json"),
        pytest.param((500, {"tokens": [1] * 200}), id="error-status"),
        pytest.param((404, {"detail": "Not Found"}), id="no-tokenizer"),
    ],
)
def test_tokenizer_answer_not_its_shape_is_no_count(
    serve: Callable[[dict[str, Handler]], _Engine], answer: tuple[int, Any]
) -> None:
    engine = serve({**LLAMA_CPP_PYTHON, "/extras/tokenize": lambda body: answer})
    p = _structured(engine.url)
    assert p["details"]["context"] == context_record("--n_ctx", 100, None, SIZING_500)
    assert context_overflow(p) is None and refusal(p, PARAMS) is None


def test_text_given_fewer_tokens_than_the_empty_text_is_no_count(
    serve: Callable[[dict[str, Handler]], _Engine],
) -> None:
    def odd(body: dict[str, Any]) -> tuple[int, Any]:
        return 200, {"tokens": [1, 2, 3] if body["input"] == "" else [1]}

    engine = serve({**LLAMA_CPP_PYTHON, "/extras/tokenize": odd})
    assert _structured(engine.url)["details"]["context"]["prompt_tokens"] is None


# ------------------------------------------------------------ the sizing request answered
def test_sizing_answered_with_its_usage_asks_no_tokenizer(
    serve: Callable[[dict[str, Handler]], _Engine],
) -> None:
    def chat(body: dict[str, Any]) -> tuple[int, Any]:
        if body["max_tokens"] == 1:
            choice = {"index": 0, "message": {"role": "assistant", "content": "{"}, "finish_reason": "length"}
            return 200, {"choices": [choice], "usage": {"prompt_tokens": 111, "completion_tokens": 1}}
        return _broadcast(body)

    engine = serve({**LLAMA_CPP_PYTHON, "/v1/chat/completions": chat})
    p = _structured(engine.url, n_ctx=128)
    assert p["details"]["context"] == context_record("--n_ctx", 128, 111, None, COUNTED_USAGE)
    assert p["details"]["context"]["counted"] == COUNTED_USAGE
    assert refusal(p, PARAMS) == REFUSAL_CONTEXT
    assert not {"/tokenize", "/extras/tokenize"} & set(engine.paths())


def test_sizing_refused_for_the_context_is_recorded_and_read(
    serve: Callable[[dict[str, Handler]], _Engine],
) -> None:
    """llama-cpp-python's 400 for a prompt beyond the context llama.cpp rounded its --n_ctx up to: the
    engine's own words, recorded as the sizing refusal (``refusal`` reads it), the text counted too."""
    said = "This model's maximum context length is 256 tokens. However, you requested 301 tokens"

    def chat(body: dict[str, Any]) -> tuple[int, Any]:
        if body["max_tokens"] == 1:
            return 400, {"error": {"message": said, "type": "invalid_request_error"}}
        return _broadcast(body)

    engine = serve({**LLAMA_CPP_PYTHON, "/v1/chat/completions": chat})
    p = _structured(engine.url, n_ctx=200, prompt="y" * 300)
    assert p["details"]["context"] == context_record(
        "--n_ctx", 200, 300, (400, f"HTTP 400: {said}"), COUNTED_CONTENT
    )
    assert refusal(p, PARAMS) == REFUSAL_CONTEXT


def test_probe_without_a_context_is_not_sized(serve: Callable[[dict[str, Handler]], _Engine]) -> None:
    engine = serve(LLAMA_CPP_PYTHON)
    p = _structured(engine.url, context=None)
    assert "context" not in p["details"]
    assert engine.paths() == ["/v1/chat/completions"]


def test_tokenizer_not_reached_is_no_count(monkeypatch: pytest.MonkeyPatch) -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/chat/completions":
            return httpx.Response(500, json={"error": {"message": BROADCAST}})
        raise httpx.ConnectError("connection refused", request=request)

    import ledger.collectors.probe as probe_module

    monkeypatch.setattr(
        probe_module, "http_client", lambda timeout=5.0: httpx.Client(transport=httpx.MockTransport(handle))
    )
    p = _structured("http://engine")
    assert p["details"]["context"] == context_record("--n_ctx", 100, None, SIZING_500)


# ------------------------------------------------------------ the default context: one reader end to end
PY = ["{python}", "-m", "llama_cpp.server", "--model", "{model}", "--port", "{port}"]
PY_DEFAULT = DEFAULT_CONTEXT["llama_cpp.server"]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.upper() in ("N_CTX", "LLAMA_ARG_CTX_SIZE", "CONFIG_FILE"):
            monkeypatch.delenv(key)


@pytest.mark.parametrize(
    ("argv", "spec_env", "known"),
    [
        (PY, {}, PY_DEFAULT),  # nothing sets it: the server's own 2048
        (PY, {"N_CTX": "128"}, ("N_CTX", 128)),
        ([*PY, "--n_ctx", "512"], {}, ("--n_ctx", 512)),
        ([*PY, "--config_file", "/c.json"], {}, None),  # a settings file's: not known
        (PY, {"CONFIG_FILE": "/c.json"}, None),
        (PY, {"N_CTX": "abc"}, None),  # set to no length: not the default either
        (["llama-server", "-m", "{model}"], {}, None),  # the model's own (or 4096, by build)
        (["vllm", "serve", "{model}"], {}, None),
    ],
)
def test_collector_reads_the_default_context_the_policy_reads(
    argv: list[str], spec_env: dict[str, str], known: tuple[str, int] | None
) -> None:
    kind = "vllm" if argv[0] == "vllm" else "llamacpp"
    assert context_length(kind, argv, env=launch_env(spec_env)) == known
    filled = [
        a.replace("{python}", "/v/bin/python").replace("{model}", "/m").replace("{port}", "1") for a in argv
    ]
    recorded = {"engine": kind, "command": filled, "env": {**relevant_env(os.environ), **spec_env}}
    assert launched_context(recorded) == known


def test_environment_not_known_gives_no_default() -> None:
    assert context_length("llamacpp", PY) is None


def _campaign(tmp_path: Path, max_tokens: int, extra: list[str] | None = None, env: str = "") -> Path:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + b"\0" * 64)
    command = [*PY[:4], "{model}", "--model_alias", "{served_name}", "--host", "{host}", "--port", "{port}"]
    p = tmp_path / "c.toml"
    p.write_text(
        f'[campaign]\nid = "c"\n[model]\npath = "{model}"\nserved_name = "tiny"\n'
        f'[engine]\nkind = "llamacpp"\ncommand = {json.dumps([*command, *(extra or [])])}\n{env}'
        f"[gates.structured]\nmax_tokens = {max_tokens}\n",
        encoding="utf-8",
    )
    return p


def test_probe_max_tokens_reaching_the_default_context_is_refused_at_load(tmp_path: Path) -> None:
    """A default launch serves 2048 tokens: a probe asking 2048 can never fit with its prompt (llama-cpp-
    python would cut its max_tokens to what is left, an answer the campaign did not ask for) — refused at
    load, as with ``--n_ctx 2048`` written, naming the default."""
    with pytest.raises(ConfigError) as e:
        load_campaign(_campaign(tmp_path, 2048))
    assert "[gates.structured] max_tokens 2048" in e.value.message
    assert "--n_ctx (default) 2048" in e.value.message
    with pytest.raises(ConfigError) as written:
        load_campaign(_campaign(tmp_path, 2048, ["--n_ctx", "2048"]))
    assert "--n_ctx 2048" in written.value.message


def test_probe_max_tokens_the_default_context_holds_loads(tmp_path: Path) -> None:
    load_campaign(_campaign(tmp_path, 2047))
    load_campaign(_campaign(tmp_path, 4096, ["--n_ctx", "8192"]))  # the campaign's own context
    load_campaign(_campaign(tmp_path, 4096, env='[engine.env]\nN_CTX = "8192"\n'))


# ------------------------------------------------------------ slow: the real llama-cpp-python at --n_ctx 100
@pytest.fixture(scope="module")
def n_ctx_100() -> Iterator[str]:
    model = Path(ensure_engine("trained")["TINY_TRAINED_GGUF"])
    if not model.is_file():
        pytest.skip("no tiny trained GGUF")
    python = ensure_engine("llamacpp")["LLAMACPP_PYTHON"]
    port = free_port()
    argv = [python, "-m", "llama_cpp.server", "--model", str(model), "--model_alias", "ctx-tiny"]
    proc = subprocess.Popen(
        [
            *argv,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            "100",
            "--interrupt_requests",
            "False",
        ],
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


@pytest.mark.slow
def test_real_llama_cpp_python_prompt_beyond_n_ctx_is_counted_and_the_campaigns(n_ctx_100: str) -> None:
    p = _structured(n_ctx_100, timeout=60)
    assert p["http_status"] == 500, p
    ctx = p["details"]["context"]
    # the trained model's vocabulary: a byte per token, a space written as "▁" (3 bytes), and a BOS
    assert ctx["counted"] == COUNTED_CONTENT
    assert ctx["prompt_tokens"] == len(PROMPT.replace(" ", "\u2581").encode()), ctx
    assert ctx["sizing"]["http_status"] == 500  # the sizing request failed as the probe did
    assert refusal(p, PARAMS, launched=("--n_ctx", 100), counts=LLAMA_CPP_PYTHON_COUNTS) == REFUSAL_CONTEXT
