"""Fix 47 (audit 39, the real llama.cpp server under `ledger collect run`), kept as regressions:

F1. a server started with ``--api_key`` the collector does not send answered every readiness poll
    ``GET /v1/models … 401 Unauthorized``; the collector polled until the lease ran out and recorded
    ``lease-expired`` ("the engine hung", no failure_detail). Now 401/403 ends the wait at once, in the
    engine's words, classed ``config`` (the campaign's configuration, not the engine's runtime).
F2. the port-in-use refusal of ``collect run`` told the operator to "pass --port", an option it lacks.
F3. an engine that cut an answer off mid-stream (llama-cpp-python: "Exception in ASGI application", no
    finish_reason, no [DONE]) was a plain semantic failure on the last item, and on any other item the next
    request (on the connection the engine left broken) was blamed. Now the cut stream is the engine's fault
    at the item that was cut, and the engine's log line is a runtime-fault signature after readiness.
F4. a memory limit that killed the engine at load was ``engine-died-before-readiness`` with no detail; a
    SIGBUS end fell through to "exited".
"""

from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path

import httpx
import pytest

from ledger.collectors.benchmark import STREAM_CUT
from ledger.collectors.corpus import corpus_digest
from ledger.collectors.launch import EngineRun, LaunchSpec
from ledger.collectors.readiness import check_ready
from ledger.collectors.semantic import SemanticSpec, run_semantic
from ledger.errors import PortInUseError
from ledger.signatures import FailureClass, RunOutcome, class_rank, classify, load_signatures

from .test_audit10_harness import one, serve, sse

ENGINE = Path(__file__).resolve().parents[1] / "engines" / "fix47_api_key_engine.py"

# the real engine's words (llama-cpp-python 0.3.36, /tmp/audit39 engine logs)
INVALID_KEY_BODY = {"detail": "Invalid API key"}
ASGI_LINE = "ERROR:    Exception in ASGI application"
BROADCAST = "ValueError: could not broadcast input array from shape (259,) into shape (0,)"
OPENBLAS = "OpenBLAS error: Memory allocation still failed after 10 retries, giving up."
LLAMA_CONTEXT = "ValueError: Failed to create llama_context"
NO_THREAD = "RuntimeError: can't start new thread"
TLS_ABORT = "cannot allocate memory for thread-local data: ABORT"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _client(answers: dict[str, tuple[int, object]]) -> httpx.Client:
    """A client whose server answers each path (status, JSON body); any other path 404."""

    def handler(request: httpx.Request) -> httpx.Response:
        status, body = answers.get(request.url.path, (404, {"detail": "Not Found"}))
        return httpx.Response(status, json=body)

    return httpx.Client(transport=httpx.MockTransport(handler))


# --- F1: readiness refused ----------------------------------------------------------------------------


@pytest.mark.parametrize("status", [401, 403])
def test_llama_cpp_python_refusing_the_collector_at_readiness_is_terminal_in_its_own_words(
    status: int,
) -> None:
    with _client({"/v1/models": (status, INVALID_KEY_BODY)}) as c:
        state = check_ready("http://e", "llamacpp", c)
    assert not state.ready and state.refused
    assert state.note == f"/v1/models: HTTP {status} Invalid API key"
    assert state.server == "llama-cpp-python"


def test_a_generic_server_refusing_v1_models_is_terminal_too() -> None:
    with _client({"/v1/models": (401, {"error": {"message": "Unauthorized"}})}) as c:
        state = check_ready("http://e", "generic", c)
    assert state.refused and state.note == "/v1/models: HTTP 401 Unauthorized"


@pytest.mark.parametrize("engine", ["vllm", "sglang", "llamacpp", "generic"])
def test_a_health_endpoint_refusing_the_collector_is_terminal_for_every_engine(engine: str) -> None:
    with _client({"/health": (403, {"detail": "Forbidden"})}) as c:
        state = check_ready("http://e", engine, c)
    assert state.refused and state.note == "/health: HTTP 403 Forbidden"


@pytest.mark.parametrize(
    ("answers", "ready"),
    [
        ({"/v1/models": (503, {"detail": "loading"})}, False),  # still starting: poll on
        ({"/v1/models": (200, {"data": []})}, True),
        ({"/health": (503, {"error": "Loading model"})}, False),
    ],
)
def test_starting_or_ready_servers_are_not_taken_for_refusals(
    answers: dict[str, tuple[int, object]], ready: bool
) -> None:
    with _client(answers) as c:
        state = check_ready("http://e", "llamacpp", c)
    assert state.ready is ready and not state.refused


def _api_key_run(tmp_path: Path, status: int = 401) -> EngineRun:
    port = _free_port()
    spec = LaunchSpec(
        engine="llamacpp",
        command=[sys.executable, str(ENGINE), "--port", str(port), "--status", str(status)],
        base_url=f"http://127.0.0.1:{port}",
        lease_seconds=30,
        grace_seconds=2,
        poll_interval=0.1,
    )
    return EngineRun(spec, tmp_path / "logs", signatures=load_signatures())


def test_an_engine_started_with_an_api_key_the_collector_does_not_send_is_not_recorded_as_hung(
    tmp_path: Path,
) -> None:
    run = _api_key_run(tmp_path)
    t = time.monotonic()
    run.start()
    try:
        state = run.wait_ready()
        waited = time.monotonic() - t
    finally:
        run.stop("finished")
    assert state.refused and not state.ready
    assert waited < 15, "it polled on instead of stopping at the first 401"
    p = run.payload()
    assert p["failure_signature"] == "readiness-refused", p["failure_signature"]
    assert not p["lease_expired"] and p["details"]["stop_reason"] == "finished"
    assert p["details"]["failure_class"] == FailureClass.CONFIG == "config"
    assert "/v1/models: HTTP 401 Invalid API key" in p["failure_detail"]
    assert "/v1/models: HTTP 401 Invalid API key" in p["details"]["readiness_refused"]
    # the engine's own log holds the refusals it answered
    assert '"GET /v1/models HTTP/1.1" 401 Unauthorized' in run.log_text()


def test_the_config_class_is_never_graver_than_a_fault_the_engine_logs_beside_it() -> None:
    text = (
        "Segmentation fault\n"
        "ledger-collector: the engine refused the collector's readiness requests: /v1/models: HTTP 401 x"
    )
    c = classify(text, RunOutcome(ready=False, signal=15), load_signatures())
    assert c.signature == "segfault-at-startup" and "readiness-refused" in c.matched
    assert class_rank("config") == class_rank("operator-stop") > class_rank("startup")


# --- F2: the hint of a taken engine port --------------------------------------------------------------


def test_a_taken_engine_port_hints_at_the_campaign_files_port_not_a_port_option(tmp_path: Path) -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        spec = LaunchSpec(
            engine="llamacpp",
            command=[sys.executable, "-c", "pass"],
            base_url=f"http://127.0.0.1:{port}",
            lease_seconds=5,
        )
        with pytest.raises(PortInUseError) as err:
            EngineRun(spec, tmp_path / "logs")
    assert "[engine] port" in err.value.hint_text and "--port" not in err.value.hint_text
    assert "--port" in PortInUseError("x").hint_text  # `ledger serve` has --port: its hint stays


# --- F3: a stream the engine cut off -----------------------------------------------------------------


def test_a_stream_cut_without_finish_reason_and_without_done_is_an_engine_fault() -> None:
    rec = one(sse(["The", " largest"], finish=None, usage=None, done=False))
    assert rec.fault and rec.error == STREAM_CUT


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (sse(finish=None), "the stream ended without a finish_reason"),  # [DONE] came: the engine ended it
        (sse(done=False), "the stream ended without data: [DONE]"),  # a finish_reason came
    ],
)
def test_a_stream_missing_only_one_of_finish_reason_and_done_stays_a_request_error(
    reply: tuple[int, str, bytes], error: str
) -> None:
    rec = one(reply)
    assert not rec.fault and (rec.error or "").startswith(error)


def _items(tmp_path: Path, n: int) -> SemanticSpec:
    path = tmp_path / "sem.jsonl"
    rows = [
        {
            "id": f"item-{i}",
            "messages": [{"role": "user", "content": f"q{i}"}],
            "checks": [{"type": "regex", "pattern": "\\S"}],
        }
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return SemanticSpec(path, corpus_digest(path))


@pytest.mark.parametrize("cut_at", [2, 3])  # the middle item, the last item
def test_an_answer_the_engine_cut_off_is_its_fault_at_that_item_whatever_the_corpus_order(
    tmp_path: Path, cut_at: int
) -> None:
    asked: list[int] = []

    def reply(_body: object, n: int) -> tuple[int, str, bytes]:
        asked.append(n)
        return sse(["partial"], finish=None, usage=None, done=False) if n == cut_at else sse()

    with serve(reply) as base:
        sem = run_semantic(_items(tmp_path, 3), base, out_dir=tmp_path / "s")
    assert sem.outcome == "fault", sem.outcome
    assert sem.stopped == f"engine fault at item item-{cut_at - 1}: {STREAM_CUT}"
    assert asked == list(range(1, cut_at + 1)), "an item after the cut one was sent (and would be blamed)"


def test_an_unhandled_exception_of_the_engines_server_after_readiness_is_a_runtime_fault() -> None:
    text = (
        f"INFO:     Application startup complete.\n{ASGI_LINE}\n  + Exception Group Traceback\n{BROADCAST}\n"
    )
    c = classify(text, RunOutcome(ready=True), load_signatures())
    assert c.signature == "server-unhandled-exception" and c.failure_class == "runtime-fault"
    assert c.detail == ASGI_LINE
    before = classify(text, RunOutcome(ready=False, exit_code=1), load_signatures())
    assert before.signature == "engine-died-before-readiness"  # not this signature: it names after readiness
    benign = 'INFO:     127.0.0.1:1 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
    from_logs = [s for s in load_signatures() if s.patterns]
    assert classify(benign, RunOutcome(ready=True), from_logs).signature is None


# --- F4: memory exhausted at load, SIGBUS ------------------------------------------------------------


@pytest.mark.parametrize("line", [OPENBLAS, LLAMA_CONTEXT, NO_THREAD, TLS_ABORT])
@pytest.mark.parametrize("ready", [False, True])
def test_a_memory_limit_that_kills_the_engine_is_a_resource_failure_in_its_own_words(
    line: str, ready: bool
) -> None:
    text = f"llama_model_loader: loaded meta data\nTraceback (most recent call last):\n{line}\n"
    c = classify(text, RunOutcome(ready=ready, exit_code=1), load_signatures())
    assert c.signature == "host-memory-exhausted" and c.failure_class == "resource"
    assert c.detail == line


@pytest.mark.parametrize(
    "line",
    [
        "OpenBLAS warning: precompiled NUM_THREADS exceeded, adding auxiliary array for thread metadata.",
        "llama_context: n_ctx_per_seq (512) < n_ctx_train (2048) -- the full capacity of the model will not "
        "be utilized",
        "INFO:     Started server process [4242]",
    ],
)
def test_benign_neighbours_of_the_memory_lines_are_no_resource_failure(line: str) -> None:
    c = classify(line + "\n", RunOutcome(ready=False, exit_code=1), load_signatures())
    assert c.signature == "engine-died-before-readiness" and c.detail is None


@pytest.mark.parametrize(
    ("ready", "sig", "cls"),
    [(True, "bus-error", "runtime-fault"), (False, "bus-error-at-startup", "startup")],
)
def test_an_engine_killed_by_sigbus_is_named_a_bus_error_not_an_exit(ready: bool, sig: str, cls: str) -> None:
    c = classify("", RunOutcome(ready=ready, signal=7), load_signatures())
    assert c.signature == sig and c.failure_class == cls
