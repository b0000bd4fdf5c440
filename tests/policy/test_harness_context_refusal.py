"""Fix 118 (issue 11, stop 45's streamed context item): llama-cpp-python's streamed context overflow, judged
by the policy end to end.

A streamed benchmark request whose prompt the campaign's ``--n_ctx`` cannot hold gets HTTP 200 and then no
event stream; the engine logs uvicorn's "Exception in ASGI application" (signature
server-unhandled-exception, class runtime-fault) and a traceback ending in "ValueError: Requested tokens (N)
exceed context window of M". The harness sizes the request and records it refused for the context.

* ``_harness_artifact_problem`` was given neither the policy's params nor the attempt's launched context:
  such a refusal was reported as a problem of the result (harness-artifact-mismatch, fail closed but wrong).
  Now it is held to the context the attempt's launch command gives (``_refusals``).
* The ASGI exception decided runtime-stability whatever was recorded (``decisive`` takes the gravest
  class). Now an ``[[explanation]]`` of the signature table lets a recorded context refusal explain each
  occurrence whose own traceback shows the overflow, one request per occurrence, held to the launch's
  command (``_explained_log_lines``). An unexplained occurrence still fails runtime-stability.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ledger.answers import context_record
from ledger.collectors.benchmark import STREAM_CUT
from tests.policy.test_fail_closed import SUBJECT, entry, gates, rejected
from tests.policy.test_fail_closed import qualified_entries as _qualified
from tests.policy.test_fail_closed import verdict_of as _verdict_of


def _swap(o: Any) -> Any:
    if isinstance(o, dict):
        return {k: _swap(v) for k, v in o.items()}
    if isinstance(o, list):
        return [_swap(v) for v in o]
    return "llamacpp" if o == "vllm" else o


def qualified_entries() -> list[dict[str, Any]]:
    es = _swap(_qualified())
    entry(es, "launch")["payload"]["command"] = [
        "/venv/bin/python",
        "-m",
        "llama_cpp.server",
        "--model",
        "/models/m",
    ]
    return es


def verdict_of(tmp_path: Path, es: list[dict[str, Any]]) -> dict[str, Any]:
    return _verdict_of(tmp_path, es, subject={**SUBJECT, "backend": "llamacpp"})


RUNTIME = "NOT QUALIFIED — RUNTIME RELIABILITY"
RULE = "harness-campaign-config"

READY = "INFO:     Uvicorn running on http://127.0.0.1:8000 (Press CTRL+C to quit)\n"
ACCESS_200 = 'INFO:     127.0.0.1:40000 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
ACCESS_400 = 'INFO:     127.0.0.1:40002 - "POST /v1/chat/completions HTTP/1.1" 400 Bad Request\n'
OVERFLOW = "ValueError: Requested tokens (471) exceed context window of 256"
BROADCAST = "ValueError: could not broadcast input array from shape (259,) into shape (0,)"


def asgi(exception: str) -> str:
    """uvicorn's record of an exception raised inside a streamed response (an exception group)."""
    return (
        "ERROR:    Exception in ASGI application\n"
        "  + Exception Group Traceback (most recent call last):\n"
        '  |   File "/e/uvicorn/protocols/http/httptools_impl.py", line 409, in run_asgi\n'
        "  |     result = await app(  # type: ignore[func-returns-value]\n"
        "  | ExceptionGroup: unhandled errors in a TaskGroup (1 sub-exception)\n"
        "  +-+---------------- 1 ----------------\n"
        "    | Traceback (most recent call last):\n"
        '    |   File "/e/llama_cpp/llama.py", line 1346, in _create_completion\n'
        "    |     raise ValueError(\n"
        f"    | {exception}\n"
        "    +------------------------------------\n"
    )


def sizing_refused(exception: str = OVERFLOW) -> str:
    """What llama-cpp-python prints of the non-streamed sizing request it answers HTTP 400
    (``RouteErrorHandler.error_message_wrapper``): its own words, then a plain traceback."""
    return (
        f"Exception: {exception.removeprefix('ValueError: ')}\n"
        "Traceback (most recent call last):\n"
        '  File "/e/llama_cpp/server/errors.py", line 173, in custom_route_handler\n'
        "    response = await original_route_handler(request)\n"
        f"{exception}\n" + ACCESS_400
    )


LOG = READY + ACCESS_200 + asgi(OVERFLOW) + sizing_refused()
SIZING_400 = (
    400,
    "HTTP 400: This model's maximum context length is 256 tokens. However, you requested 479 tokens (471 "
    "in the messages, 8 in the completion). Please reduce the length of the messages or completion.",
)
ANSWERED = {
    "level": 1,
    "repetition": 0,
    "prompt_id": "p01",
    "error": None,
    "fault": False,
    "http_status": 200,
    "unanswered": False,
    "timed_out": False,
    "refusal": None,
    "max_tokens": 8,
    "context": None,
}
REFUSED = {
    **ANSWERED,
    "prompt_id": "p02",
    "error": STREAM_CUT,
    "fault": True,
    "refusal": "context",
    "context": context_record("--n_ctx", 128, None, SIZING_400),
}


def _jsonl(records: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def _campaign(
    log: str = LOG,
    records: list[dict[str, Any]] | None = None,
    *,
    command: tuple[str, ...] = ("--n_ctx", "128"),
) -> list[dict[str, Any]]:
    """The qualified campaign, but its launch runs with ``command`` added and stored ``log``; its benchmark
    stopped where the engine refused a request for the context (outcome config), its per-request record
    ``records`` (one answered request, then the refused one)."""
    es = qualified_entries()
    launch = entry(es, "launch")
    launch["payload"]["command"] = [*launch["payload"]["command"], *command]
    launch["payload"]["details"] = {
        # where it served stays recorded (details.base_url): its probes asked it (fix 159)
        "base_url": launch["payload"]["details"]["base_url"],
        "stop_reason": "finished",
        "ready_lines": {"stderr.log": 1},
    }
    launch["artifacts"] = [{"name": "stderr.log", "text": log}]
    every = [ANSWERED, REFUSED] if records is None else records
    p = entry(es, "benchmark")["payload"]
    p["status"] = "failed"
    p["reason"] = "the engine refused a request for the campaign's configuration (context)"
    p["bounds"].update(outcome="config", aggregate=False, valid=False)
    p["figures"] = {}
    errors = [r for r in every if r["error"] is not None]
    p["counts"] = {k: v for k, v in p["counts"].items() if not k.startswith("completed@c")}
    p["counts"].update(
        issued=len(every),
        completed=len(every) - len(errors),
        errors=len(errors),
        cut=0,
        unanswered=0,
        timed_out=0,
        refused=sum(1 for r in every if r.get("refusal") is not None),
        **{"completed@c1": len(every) - len(errors)},
    )
    entry(es, "benchmark")["artifacts"] = [{"name": "benchmark-requests.jsonl", "text": _jsonl(every)}]
    for name in ("benchmark-review", "benchmark-acceptance"):
        es.remove(entry(es, name))
    return es


def test_neighbour_the_launch_with_a_context_option_still_qualifies(tmp_path: Path) -> None:
    # the shared vLLM run (the llama.cpp twin above is judged for what its refusals explain)
    es = _qualified()
    launch = entry(es, "launch")
    launch["payload"]["command"] = [*launch["payload"]["command"], "--max-model-len", "128"]
    assert _verdict_of(tmp_path, es)["verdict"] == "QUALIFIED"


def test_streamed_context_overflow_asgi_exception_is_the_campaigns_refusal_not_a_runtime_fault(
    tmp_path: Path,
) -> None:
    v = verdict_of(tmp_path, _campaign())
    assert gates(v)["runtime-stability"] == "passed", v["gates"]
    assert rejected(v)["benchmark"] == RULE, v
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]


def test_harness_context_refusal_held_to_the_launch_is_no_artifact_problem(tmp_path: Path) -> None:
    """Without the ASGI exception in the log: the refusal alone, read back with the launch's context."""
    v = verdict_of(tmp_path, _campaign(READY + ACCESS_200 + sizing_refused()))
    assert rejected(v)["benchmark"] == RULE, v
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]


@pytest.mark.parametrize(
    "command",
    [
        pytest.param((), id="no-context-option"),
        pytest.param(("--n_ctx", "512"), id="launched-otherwise"),
        pytest.param(("--n_ctx", "0"), id="context-not-a-length"),
    ],
)
def test_a_refusal_the_launch_does_not_give_is_an_artifact_problem(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    v = verdict_of(tmp_path, _campaign(command=command))
    assert rejected(v).get("benchmark") == "harness-artifact-mismatch", v
    assert gates(v)["runtime-stability"] == "failed", v["gates"]
    assert v["verdict"] == RUNTIME, v["gates"]


@pytest.mark.parametrize(
    "log",
    [
        pytest.param(READY + ACCESS_200 + asgi(BROADCAST) + sizing_refused(), id="broadcast-then-sizing"),
        pytest.param(LOG + asgi(BROADCAST), id="a-second-unexplained-occurrence"),
        pytest.param(LOG + asgi(OVERFLOW), id="two-overflows-one-refused-request"),
        pytest.param(
            READY + ACCESS_200 + "ERROR:    Exception in ASGI application\n" + sizing_refused(),
            id="no-traceback-of-its-own",
        ),
        pytest.param(
            READY + asgi(OVERFLOW.replace("256", "64")) + sizing_refused(),
            id="window-below-the-launched-context",
        ),
        pytest.param(
            READY
            + asgi("ValueError: Requested tokens (100) exceed context window of 256")
            + sizing_refused(),
            id="tokens-within-the-window",
        ),
        pytest.param(
            READY + asgi(OVERFLOW.replace("Requested tokens", "Requested tokenz")) + sizing_refused(),
            id="exception-reworded",
        ),
    ],
)
def test_an_asgi_exception_the_refusal_does_not_explain_still_fails_runtime_stability(
    tmp_path: Path, log: str
) -> None:
    v = verdict_of(tmp_path, _campaign(log))
    assert gates(v)["runtime-stability"] == "failed", v["gates"]
    assert v["verdict"] == RUNTIME, v["gates"]


@pytest.mark.parametrize(
    "refused",
    [
        pytest.param({**REFUSED, "refusal": None}, id="refusal-dropped"),
        pytest.param(
            {k: v for k, v in REFUSED.items() if k != "refusal"} | {"refused": "context"},
            id="refusal-renamed",
        ),
        pytest.param({**REFUSED, "context": None}, id="context-dropped"),
        pytest.param(
            {**REFUSED, "context": context_record("--n_ctx", 128, 471), "max_tokens": "8"},
            id="sized-max-tokens-text",
        ),
        pytest.param(
            {**REFUSED, "context": {**REFUSED["context"], "length": "128"}}, id="context-length-text"
        ),
        pytest.param({**REFUSED, "context": context_record("--n_ctx", 128, 300)}, id="sized-otherwise"),
        pytest.param({**REFUSED, "http_status": 400, "error": "HTTP 400: bad"}, id="answered-400"),
    ],
)
def test_an_asgi_exception_no_recorded_refusal_pairs_with_still_fails_runtime_stability(
    tmp_path: Path, refused: dict[str, Any]
) -> None:
    v = verdict_of(tmp_path, _campaign(records=[ANSWERED, refused]))
    assert gates(v)["runtime-stability"] == "failed", v["gates"]
    assert v["verdict"] not in ("QUALIFIED", "INCONCLUSIVE"), v["gates"]


def test_the_refused_prompt_answered_in_the_same_run_explains_nothing(tmp_path: Path) -> None:
    """The same prompt answered before: it fits — the refusal is the engine's (artifact problem), and the
    ASGI exception stays a runtime fault."""
    v = verdict_of(tmp_path, _campaign(records=[{**ANSWERED, "prompt_id": "p02"}, REFUSED]))
    assert gates(v)["runtime-stability"] == "failed", v["gates"]
    assert v["verdict"] == RUNTIME, v["gates"]


def test_two_overflows_two_refused_requests_are_both_explained(tmp_path: Path) -> None:
    log = LOG + asgi(OVERFLOW) + sizing_refused()
    v = verdict_of(tmp_path, _campaign(log, [ANSWERED, REFUSED, {**REFUSED, "prompt_id": "p03"}]))
    assert gates(v)["runtime-stability"] == "passed", v["gates"]
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]


def test_a_recorded_prompt_size_must_be_the_lines_tokens(tmp_path: Path) -> None:
    sized = {**REFUSED, "context": context_record("--n_ctx", 128, 471)}
    assert gates(verdict_of(tmp_path, _campaign(records=[ANSWERED, sized])))["runtime-stability"] == "passed"
    other = {**REFUSED, "context": context_record("--n_ctx", 128, 470)}
    v = verdict_of(tmp_path, _campaign(records=[ANSWERED, other]))
    assert gates(v)["runtime-stability"] == "failed", v["gates"]


def test_the_captured_llama_cpp_python_log_is_explained_by_its_recorded_refusal(tmp_path: Path) -> None:
    real = Path(__file__).parents[1] / "fixtures" / "engine_logs" / "llamacpp_streamed_context_overflow.log"
    log = real.read_text(encoding="utf-8")
    v = verdict_of(tmp_path, _campaign(log))
    assert gates(v)["runtime-stability"] == "passed", v["gates"]
    unpaired = verdict_of(tmp_path, _campaign(log, [ANSWERED]))
    assert gates(unpaired)["runtime-stability"] == "failed", unpaired["gates"]


def test_an_occurrence_whose_window_the_launch_does_not_give_is_not_explained() -> None:
    """Regression (fix 125's note): the explanation held an occurrence's window to the launched context with
    a lower bound only, so a traceback showing a 4096-token window under a launch of ``--n_ctx 256`` was
    explained. The window must be one the launched context gives (``ledger.answers.window_explained``)."""
    from ledger.signatures import Occurrence, explained_by_refusals, explanations

    ex = explanations()[0]
    for window, explained in ((256, True), (4096, False), (128, False)):
        occ = Occurrence(ex.explains, "line", explanation=ex.id, tokens=471, window=window)
        assert explained_by_refusals([occ], [471], ("--n_ctx", 256)) is explained, window
