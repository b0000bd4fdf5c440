"""Fix 144 (audit 97 f2): how a prompt was counted is held to the engine that could count so.

``context_overflow`` took any way of ``PROMPT_COUNTS`` whatever engine the launch ran, so a record the
collector can never write excused the engine's HTTP 500 as the campaign's context:

* ``counted: "tokenize-content"`` on a vLLM launch (vLLM serves no ``/extras/tokenize``: its collector can
  only record ``usage`` or ``tokenize-messages``);
* ``counted: "usage"`` beside a failed sizing request (``sizing``: usage is read from a 2xx answer to the
  sizing request, its refusal from an error status — one answer never gives both).

Now each tokenizer's way is tied to the program that serves it (``ledger.answers.PROMPT_COUNTERS``:
``tokenize-messages`` ↔ vLLM, ``tokenize-content`` ↔ llama-cpp-python's server; ``usage`` ↔ any), read from
the launch the policy holds the record to by the reader that gives its context (``launched_counts``:
``skip_launchers``, ``command_program``), and usage beside a sizing refusal shows nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ledger.answers import (
    COUNTED_CONTENT,
    COUNTED_MESSAGES,
    COUNTED_USAGE,
    PROMPT_COUNTED,
    PROMPT_COUNTERS,
    PROMPT_COUNTS,
    REFUSAL_CONTEXT,
    SIZING_REFUSED,
    context_overflow,
    context_record,
    launched_context,
    launched_counts,
    prompt_counts,
    prompt_tokens_exact,
    refusal,
)
from ledger.policy.acceptance import _requests_shown
from ledger.policy.loader import load_policy
from tests.policy.test_fail_closed import counted_against, entry, gates, rejected
from tests.policy.test_harness_context_refusal import (
    ANSWERED,
    REFUSED,
    _campaign,
    qualified_entries,
    verdict_of,
)
from tests.policy.test_harness_context_refusal import SIZING_400 as SIZING_400_LOG

PARAMS: dict[str, Any] = {
    "refused_http_statuses": [401, 403],
    "context_refused_http_statuses": [400],
    "context_refusal_patterns": ["maximum context length is [0-9]+ tokens"],
}
BROADCAST = "HTTP 500: could not broadcast input array from shape (93,) into shape (82,)"
SIZING_500 = (500, BROADCAST)
SIZING_400 = (400, "HTTP 400: This model's maximum context length is 256 tokens. However, you requested 301")
VLLM = {"engine": "vllm", "command": ["vllm", "serve", "m", "--max-model-len", "256"], "env": {}}
LLAMA_CPP_PYTHON = {
    "engine": "llamacpp",
    "command": ["/venv/bin/python", "-m", "llama_cpp.server", "--model", "/m", "--n_ctx", "100"],
    "env": {},
}


def _probe(ctx: dict[str, Any], max_tokens: int = 64) -> dict[str, Any]:
    return {
        "check": "completion",
        "http_status": 500,
        "error": "HTTP 500: Internal Server Error",
        "max_tokens": max_tokens,
        "answered": 0,
        "details": {"context": ctx},
    }


def _vllm(counted: Any, sizing: Any = None, tokens: int = 250) -> dict[str, Any]:
    ctx: dict[str, Any] = {"option": "--max-model-len", "length": 256, "prompt_tokens": tokens}
    ctx[PROMPT_COUNTED] = counted
    if sizing is not None:
        ctx[SIZING_REFUSED] = sizing
    return ctx


def _held(payload: dict[str, Any], launch: Any) -> Any:
    """``refusal`` as the policy judges a probe: held to its launch's context and ways of counting."""
    return refusal(payload, PARAMS, launched=launched_context(launch), counts=launched_counts(launch))


# -------------------------------------------------------------- the audit's records, as the policy reads them
def test_tokenize_content_on_a_vllm_launch_excuses_nothing() -> None:
    p = _probe(_vllm(COUNTED_CONTENT))
    assert _held(p, VLLM) is None
    assert refusal(p, PARAMS, launched=launched_context(VLLM)) is None  # ways not told: usage alone


def test_usage_beside_a_failed_sizing_request_excuses_nothing() -> None:
    p = _probe(_vllm(COUNTED_USAGE, {"http_status": 500, "error": "boom"}))
    assert context_overflow(p) is None
    assert refusal(p, PARAMS) is None and _held(p, VLLM) is None


def test_usage_beside_a_sizing_refused_for_the_context_excuses_nothing() -> None:
    """The engine's own 400 words beside a usage count: a record no collector writes, read as none."""
    said = {"http_status": 400, "error": "maximum context length is 256 tokens"}
    p = _probe(_vllm(COUNTED_USAGE, said, tokens=10))
    assert refusal(p, PARAMS) is None and _held(p, VLLM) is None


# ---------------------------------------------------------------- what must still pass
def test_each_engines_own_way_still_shows_its_request_cannot_fit() -> None:
    assert _held(_probe(_vllm(COUNTED_MESSAGES, {"http_status": 500, "error": "x"})), VLLM) == REFUSAL_CONTEXT
    assert _held(_probe(_vllm(COUNTED_USAGE)), VLLM) == REFUSAL_CONTEXT
    content = context_record("--n_ctx", 100, 60, SIZING_500, COUNTED_CONTENT)
    assert _held(_probe(content), LLAMA_CPP_PYTHON) == REFUSAL_CONTEXT
    assert _held(_probe(context_record("--n_ctx", 100, 111)), LLAMA_CPP_PYTHON) == REFUSAL_CONTEXT
    # a tokenizer asked where the sizing request got a 2xx answer without usage: no sizing recorded
    assert _held(_probe(context_record("--n_ctx", 100, 60, None, COUNTED_CONTENT)), LLAMA_CPP_PYTHON) == (
        REFUSAL_CONTEXT
    )


def test_sizing_refused_with_nothing_counted_is_still_the_engines_own_words() -> None:
    """Fix 114's case: the sizing request refused with the 400 the policy knows, no tokenizer counting."""
    ctx = context_record("--n_ctx", 200, None, SIZING_400)
    launch = {**LLAMA_CPP_PYTHON, "command": [*LLAMA_CPP_PYTHON["command"][:-1], "200"]}
    assert _held(_probe(ctx), launch) == REFUSAL_CONTEXT


# ---------------------------------------------------------------- the table and its reader
def test_each_tokenizers_way_is_tied_to_the_program_that_serves_it() -> None:
    assert set(PROMPT_COUNTERS) == set(PROMPT_COUNTS) - {COUNTED_USAGE}
    assert prompt_counts("vllm", "vllm") == (COUNTED_USAGE, COUNTED_MESSAGES)
    assert prompt_counts("vllm", "vllm.entrypoints.openai.api_server") == (COUNTED_USAGE, COUNTED_MESSAGES)
    assert prompt_counts("llamacpp", "llama_cpp.server") == (COUNTED_USAGE, COUNTED_CONTENT)
    assert prompt_counts("llamacpp", "llama-server") == (COUNTED_USAGE,)
    assert prompt_counts("sglang", "sglang.launch_server") == (COUNTED_USAGE,)
    assert prompt_counts("generic", None) == (COUNTED_USAGE,)


PY = ["/venv/bin/python", "-m", "llama_cpp.server", "--model", "/m", "--n_ctx", "100"]


@pytest.mark.parametrize(
    ("launch", "ways"),
    [
        pytest.param(
            {"engine": "llamacpp", "command": PY}, (COUNTED_USAGE, COUNTED_CONTENT), id="llama-cpp-py"
        ),
        pytest.param(
            {"engine": "llamacpp", "command": ["taskset", "-c", "0-3", "nice", "-n", "5", *PY]},
            (COUNTED_USAGE, COUNTED_CONTENT),
            id="past-launchers",
        ),
        pytest.param(
            {
                "engine": "llamacpp",
                "command": ["/venv/bin/python", "-Im", "llama_cpp.server", "--n_ctx", "100"],
            },
            (COUNTED_USAGE, COUNTED_CONTENT),
            id="joined-python-flags",
        ),
        pytest.param(
            {"engine": "vllm", "command": ["/v/bin/python", "-m", "vllm.entrypoints.openai.api_server"]},
            (COUNTED_USAGE, COUNTED_MESSAGES),
            id="vllm-module",
        ),
        pytest.param(
            {"engine": "llamacpp", "command": ["llama-server", "-c", "100"]},
            (COUNTED_USAGE,),
            id="llama-server",
        ),
        pytest.param(
            {"engine": "llamacpp", "command": ["/venv/bin/python", "serve.py", "--n_ctx", "100"]},
            (COUNTED_USAGE,),
            id="program-unknown",
        ),
        pytest.param(
            {"engine": "llamacpp", "command": ["sh", "-c", " ".join(PY)]}, (COUNTED_USAGE,), id="behind-sh-c"
        ),
        pytest.param(
            {
                "engine": "llamacpp",
                "command": ["/venv/bin/python", "-m", "LLAMA_CPP.server", "--n_ctx", "100"],
            },
            (COUNTED_USAGE,),
            id="program-other-case",
        ),
        pytest.param({"engine": "LlamaCpp", "command": PY}, (COUNTED_USAGE,), id="kind-other-case"),
        pytest.param({"engine": "vllm", "command": PY}, (COUNTED_USAGE,), id="kind-of-another-program"),
        pytest.param({"command": PY}, (), id="kind-missing"),
        pytest.param({"engine": 1, "command": PY}, (), id="kind-mistyped"),
        pytest.param({"engine": "llamacpp"}, (), id="command-missing"),
        pytest.param({"engine": "llamacpp", "command": " ".join(PY)}, (), id="command-text"),
        pytest.param({"engine": "llamacpp", "command": ["env", "-C", "/x", *PY]}, (), id="launcher-refused"),
        pytest.param(None, (), id="no-launch"),
    ],
)
def test_the_launchs_ways_are_read_as_its_context_is(launch: Any, ways: tuple[str, ...]) -> None:
    assert launched_counts(launch) == ways


@pytest.mark.parametrize(
    "launch",
    [
        pytest.param({**LLAMA_CPP_PYTHON, "engine": "vllm"}, id="kind-of-another-program"),
        pytest.param({**LLAMA_CPP_PYTHON, "engine": "LLAMACPP"}, id="kind-other-case"),
        pytest.param(
            {**LLAMA_CPP_PYTHON, "command": ["/venv/bin/python", "serve.py", "--n_ctx", "100"]},
            id="program-unknown",
        ),
        pytest.param(
            {**LLAMA_CPP_PYTHON, "command": ["/venv/bin/python", "-m", "Llama_Cpp.Server", "--n_ctx", "100"]},
            id="program-other-case",
        ),
    ],
)
def test_a_tokenizer_count_under_a_launch_that_does_not_serve_it_excuses_nothing(launch: Any) -> None:
    p = _probe(context_record("--n_ctx", 100, 60, SIZING_500, COUNTED_CONTENT))
    assert _held(p, launch) is None
    # the same launch still shows a usage count beyond its context (where it gives the context at all)
    usage = _held(_probe(context_record("--n_ctx", 100, 111)), launch)
    assert usage == (REFUSAL_CONTEXT if launched_context(launch) == ("--n_ctx", 100) else None)


@pytest.mark.parametrize(
    "sizing",
    [
        pytest.param(None, id="sizing-null"),
        pytest.param([500, BROADCAST], id="sizing-list"),
        pytest.param({"http_status": "500", "error": BROADCAST}, id="status-text"),
        pytest.param({"http_status": 200, "error": BROADCAST}, id="status-2xx"),
        pytest.param({"error": BROADCAST}, id="status-dropped"),
        pytest.param({"http_status": True, "error": BROADCAST}, id="status-bool"),
    ],
)
def test_a_sizing_refusal_that_is_none_beside_a_tokenizer_count_excuses_nothing(sizing: Any) -> None:
    ctx = context_record("--n_ctx", 100, 60, None, COUNTED_CONTENT)
    ctx[SIZING_REFUSED] = sizing
    p = _probe(ctx)
    assert context_overflow(p) is None and _held(p, LLAMA_CPP_PYTHON) is None


# ---------------------------------------------------------------- the harness path: its per-request record
def _request(ctx: dict[str, Any]) -> dict[str, Any]:
    return {
        "prompt_id": "p1",
        "level": 1,
        "repetition": 0,
        "http_status": 500,
        "error": BROADCAST,
        "fault": True,
        "unanswered": False,
        "refusal": "context",
        "max_tokens": 8,
        "context": ctx,
    }


@pytest.fixture(scope="module")
def params() -> dict[str, Any]:
    return dict(load_policy("evidence-acceptance").params)


def _unshown(params: dict[str, Any], ctx: dict[str, Any], launch: Any) -> list[str]:
    problems = _requests_shown(
        [_request(ctx)], {"outcome": "config"}, params, launched_context(launch), launched_counts(launch)
    )[1]
    return [p for p in problems if "does not show its prompt and max_tokens beyond the context" in p]


def test_harness_request_counted_by_its_engines_tokenizer_is_shown(params: dict[str, Any]) -> None:
    content = context_record("--n_ctx", 100, 120, SIZING_500, COUNTED_CONTENT)
    assert _unshown(params, content, LLAMA_CPP_PYTHON) == []
    messages = context_record("--max-model-len", 256, 250, SIZING_500, COUNTED_MESSAGES)
    assert _unshown(params, messages, VLLM) == []


@pytest.mark.parametrize(
    ("ctx", "launch"),
    [
        pytest.param(
            context_record("--max-model-len", 256, 250, SIZING_500, COUNTED_CONTENT),
            VLLM,
            id="content-on-vllm",
        ),
        pytest.param(
            context_record("--n_ctx", 100, 120, SIZING_500, COUNTED_MESSAGES),
            LLAMA_CPP_PYTHON,
            id="messages-on-llama-cpp-python",
        ),
        pytest.param(
            {**context_record("--n_ctx", 100, 120), SIZING_REFUSED: {"http_status": 500, "error": "x"}},
            LLAMA_CPP_PYTHON,
            id="usage-beside-sizing",
        ),
        pytest.param(
            context_record("--ctx-size", 100, 120, SIZING_500, COUNTED_CONTENT),
            {**LLAMA_CPP_PYTHON, "command": ["llama-server", "--ctx-size", "100"]},
            id="program-serves-no-such-tokenizer",
        ),
    ],
)
def test_harness_request_counted_in_a_way_its_engine_cannot_is_a_problem(
    params: dict[str, Any], ctx: dict[str, Any], launch: Any
) -> None:
    assert _unshown(params, ctx, launch) != []


def test_harness_request_held_to_a_launch_without_its_ways_is_held_to_usage(params: dict[str, Any]) -> None:
    """``_requests_shown`` given the launch's context but not its ways: usage alone counts (fail closed)."""
    content = context_record("--n_ctx", 100, 120, SIZING_500, COUNTED_CONTENT)
    assert _requests_shown([_request(content)], {"outcome": "config"}, params, ("--n_ctx", 100))[1] != []
    usage = context_record("--n_ctx", 100, 120)
    assert _requests_shown([_request(usage)], {"outcome": "config"}, params, ("--n_ctx", 100))[1] == []


# ---------------------------------------------------------------- the verdict
def _refused(context: Any, command: list[str]) -> list[dict[str, Any]]:
    """The llamacpp campaign whose structured probe failed HTTP 500, recorded with ``context``."""
    es = qualified_entries()
    entry(es, "launch")["payload"]["command"] = command
    p = entry(es, "structured")["payload"]
    p.update(ok=False, http_status=500, error=BROADCAST, text=None, finish_reason=None, max_tokens=64)
    p["details"]["context"] = context
    return es


LAUNCHED = ["/venv/bin/python", "-m", "llama_cpp.server", "--model", "/models/m", "--n_ctx", "100"]


def test_tokenizer_count_of_the_launched_program_is_inconclusive_not_the_engines(tmp_path: Path) -> None:
    v = verdict_of(
        tmp_path, _refused(context_record("--n_ctx", 100, 60, SIZING_500, COUNTED_CONTENT), LAUNCHED)
    )
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert rejected(v)["structured"] == "engine-refused-probe"
    assert "structured" not in counted_against(v)


@pytest.mark.parametrize(
    ("context", "command"),
    [
        pytest.param(
            context_record("--ctx-size", 100, 60, SIZING_500, COUNTED_CONTENT),
            ["llama-server", "-m", "/models/m", "--ctx-size", "100"],
            id="content-on-llama-server",
        ),
        pytest.param(
            context_record("--n_ctx", 100, 60, SIZING_500, COUNTED_CONTENT),
            ["/venv/bin/python", "serve.py", "--model", "/models/m", "--n_ctx", "100"],
            id="content-program-unknown",
        ),
        pytest.param(
            {**context_record("--n_ctx", 100, 111), SIZING_REFUSED: {"http_status": 500, "error": BROADCAST}},
            LAUNCHED,
            id="usage-beside-sizing-500",
        ),
    ],
)
def test_count_the_launched_engine_cannot_make_stays_the_engines_failure(
    tmp_path: Path, context: dict[str, Any], command: list[str]
) -> None:
    v = verdict_of(tmp_path, _refused(context, command))
    assert v["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY", v["gates"]
    assert gates(v)["runtime-stability"] == "failed"
    assert rejected(v).get("structured") != "engine-refused-probe"


# ---------------------------------------------------------------- a lower bound is never the engine's number
@pytest.mark.parametrize(
    ("ctx", "exact"),
    [
        pytest.param(context_record("--n_ctx", 128, 471), 471, id="usage"),
        pytest.param(context_record("--n_ctx", 128, 471, SIZING_500, COUNTED_MESSAGES), 471, id="messages"),
        pytest.param(
            context_record("--n_ctx", 128, 300, SIZING_500, COUNTED_CONTENT), None, id="lower-bound"
        ),
        pytest.param(context_record("--n_ctx", 128, None, SIZING_400), None, id="not-counted"),
        pytest.param({"option": "--n_ctx", "length": 128, "prompt_tokens": 471}, None, id="counted-dropped"),
        pytest.param({**context_record("--n_ctx", 128, 471), "prompt_tokens": "471"}, None, id="tokens-text"),
        pytest.param({**context_record("--n_ctx", 128, 471), "prompt_tokens": True}, None, id="tokens-bool"),
        pytest.param(None, None, id="no-record"),
    ],
)
def test_the_prompts_own_count_is_read_only_from_a_way_that_gives_it(ctx: Any, exact: int | None) -> None:
    assert prompt_tokens_exact(ctx) == exact


def test_a_lower_bound_pairs_with_the_engines_log_line_as_a_prompt_not_counted(tmp_path: Path) -> None:
    """llama-cpp-python's log states the templated prompt's tokens (471); the harness counted its text
    alone (300, after the sizing request's 400): the line is the refused request's, runtime-stability
    passes — as with a prompt not counted (fix 118), never held to the lower bound as if it were the count."""
    lower = {**REFUSED, "context": context_record("--n_ctx", 128, 300, SIZING_400_LOG, COUNTED_CONTENT)}
    v = verdict_of(tmp_path, _campaign(records=[ANSWERED, lower]))
    assert gates(v)["runtime-stability"] == "passed", v["gates"]
    # the same count recorded as the engine's own (usage) is held to the line's 471: not that request
    usage = {**REFUSED, "context": context_record("--n_ctx", 128, 300)}
    v = verdict_of(tmp_path, _campaign(records=[ANSWERED, usage]))
    assert gates(v)["runtime-stability"] == "failed", v["gates"]
