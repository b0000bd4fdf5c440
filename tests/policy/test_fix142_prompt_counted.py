"""Fix 142 (audit 95 f2): a probe's prompt counted by the engine's tokenizer, and how it was counted.

Under llama-cpp-python ``--n_ctx 100`` the structured probe's prompt alone (111 tokens) does not fit: the
probe and its sizing request (max_tokens 1) both fail with HTTP 500 "could not broadcast …", so no
``usage.prompt_tokens`` — and the verdict blamed the engine. The collector now counts the prompt by the
engine's tokenizer where the sizing request gives no count, and records how (``details.context.counted``,
``ledger.answers.PROMPT_COUNTS``): ``usage`` and vLLM's ``tokenize-messages`` give the prompt's own count,
llama-cpp-python's ``tokenize-content`` (the messages' text, no chat template) a lower bound — each never
more than the prompt's, so a count plus max_tokens beyond the context shows the request cannot fit it. A
way of counting not known (dropped, renamed, mistyped, another word) shows nothing: the engine's failure.
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
    PROMPT_COUNTS,
    REFUSAL_CONTEXT,
    context_overflow,
    context_record,
    launched_context,
    launched_counts,
    refusal,
)
from tests.policy.test_fail_closed import counted_against, entry, gates, rejected
from tests.policy.test_harness_context_refusal import qualified_entries, verdict_of

PARAMS: dict[str, Any] = {
    "refused_http_statuses": [401, 403],
    "context_refused_http_statuses": [400],
    "context_refusal_patterns": ["maximum context length is [0-9]+ tokens"],
}
BROADCAST = "HTTP 500: could not broadcast input array from shape (93,) into shape (82,)"
SIZING_500 = (500, BROADCAST)
# the structured probe's text as llama-cpp-python's /extras/tokenize counts it for the trained tiny model
# (a byte per token, a space written as "▁", 3 bytes), less its BOS: 60; the templated prompt is 111
CONTENT = 60
LAUNCHED = ["/venv/bin/python", "-m", "llama_cpp.server", "--model", "/models/m", "--n_ctx", "100"]


def _probe(context: Any, max_tokens: Any = 64) -> dict[str, Any]:
    return {
        "check": "structured",
        "ok": False,
        "http_status": 500,
        "error": BROADCAST,
        "max_tokens": max_tokens,
        "details": {"format": "json_object", "context": context},
    }


def _counted(counted: Any, tokens: Any = CONTENT, length: int = 100) -> dict[str, Any]:
    """The record of a prompt counted ``counted``: beside the sizing request's HTTP 500 where a tokenizer
    counted it, alone where the sizing request's usage did (one answer never gives both: fix 144)."""
    ctx = context_record("--n_ctx", length, CONTENT, SIZING_500, COUNTED_CONTENT)
    ctx.update({PROMPT_COUNTED: counted, "prompt_tokens": tokens})
    if counted == COUNTED_USAGE:
        del ctx["sizing"]
    return ctx


# ---------------------------------------------------------------- the record: ledger.answers
@pytest.mark.parametrize("counted", PROMPT_COUNTS)
def test_prompt_alone_beyond_the_context_counted_by_the_tokenizer_is_the_campaigns_context(
    counted: str,
) -> None:
    p = _probe(_counted(counted))
    assert context_overflow(p) == ("--n_ctx", 100, CONTENT, 64)
    assert refusal(p, PARAMS) == REFUSAL_CONTEXT
    launch = {"engine": "llamacpp", "command": LAUNCHED}
    held = refusal(p, PARAMS, launched=launched_context(launch), counts=launched_counts(launch))
    # held to llama-cpp-python's launch: vLLM's /tokenize is no endpoint of it (fix 144)
    assert held == (None if counted == COUNTED_MESSAGES else REFUSAL_CONTEXT)


def test_the_ways_of_counting_are_one_vocabulary() -> None:
    assert PROMPT_COUNTS == (COUNTED_USAGE, COUNTED_MESSAGES, COUNTED_CONTENT)
    assert len(set(PROMPT_COUNTS)) == 3
    # the record says how, and says nothing where nothing was counted
    assert context_record("--n_ctx", 100, 111)[PROMPT_COUNTED] == COUNTED_USAGE
    assert context_record("--n_ctx", 100, 60, None, COUNTED_CONTENT)[PROMPT_COUNTED] == COUNTED_CONTENT
    assert context_record("--n_ctx", 100, None, SIZING_500, COUNTED_CONTENT)[PROMPT_COUNTED] is None


def _dropped() -> dict[str, Any]:
    ctx = _counted(COUNTED_CONTENT)
    del ctx[PROMPT_COUNTED]
    return ctx


def _renamed() -> dict[str, Any]:
    ctx = _dropped()
    ctx["count_method"] = COUNTED_CONTENT
    return ctx


@pytest.mark.parametrize(
    "context",
    [
        pytest.param(_dropped(), id="counted-dropped"),
        pytest.param(_renamed(), id="counted-renamed"),
        pytest.param(_counted(None), id="counted-none"),
        pytest.param(_counted(1), id="counted-number"),
        pytest.param(_counted(True), id="counted-bool"),
        pytest.param(_counted([COUNTED_CONTENT]), id="counted-list"),
        pytest.param(_counted("estimate"), id="counted-unknown"),  # may exceed the prompt's own count
        pytest.param(_counted("Tokenize-Content"), id="counted-other-case"),
        pytest.param(_counted(COUNTED_CONTENT, tokens=None), id="not-counted"),
        pytest.param(_counted(COUNTED_CONTENT, tokens="60"), id="tokens-text"),
        pytest.param(_counted(COUNTED_CONTENT, tokens=60.0), id="tokens-float"),
        pytest.param(_counted(COUNTED_CONTENT, length=124), id="fits"),  # 60 + 64 = 124: fits
        pytest.param(_counted(COUNTED_CONTENT, length=128), id="lower-bound-fits"),
    ],
)
def test_prompt_count_the_record_does_not_show_excuses_nothing(context: dict[str, Any]) -> None:
    p = _probe(context)
    assert context_overflow(p) is None
    assert refusal(p, PARAMS) is None


def test_lower_bound_over_the_context_by_max_tokens_alone_is_shown() -> None:
    """A lower bound is a proof only beyond the context: one token over is enough, one under is nothing."""
    assert refusal(_probe(_counted(COUNTED_CONTENT, length=123)), PARAMS) == REFUSAL_CONTEXT
    assert refusal(_probe(_counted(COUNTED_CONTENT, length=124)), PARAMS) is None


# ---------------------------------------------------------------- the verdict
def _refused(context: Any, command: list[str] = LAUNCHED) -> list[dict[str, Any]]:
    """The llamacpp campaign whose structured probe llama-cpp-python answered HTTP 500 under --n_ctx 100,
    as the collector records it."""
    es = qualified_entries()
    entry(es, "launch")["payload"]["command"] = command
    p = entry(es, "structured")["payload"]
    p.update(ok=False, http_status=500, error=BROADCAST, text=None, finish_reason=None, max_tokens=64)
    p["details"]["context"] = context
    return es


@pytest.mark.parametrize("counted", [COUNTED_CONTENT, COUNTED_USAGE])
def test_context_smaller_than_the_probes_prompt_is_inconclusive_not_the_engines(
    tmp_path: Path, counted: str
) -> None:
    """The failure: NOT QUALIFIED — RUNTIME RELIABILITY (``prompt_tokens`` null: nothing shown)."""
    v = verdict_of(tmp_path, _refused(_counted(counted)))
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert rejected(v)["structured"] == "engine-refused-probe"
    assert "structured" not in counted_against(v)
    assert gates(v)["runtime-stability"] == "passed"


@pytest.mark.parametrize(
    ("context", "command"),
    [
        pytest.param(context_record("--n_ctx", 100, None, SIZING_500), LAUNCHED, id="not-counted"),
        pytest.param(_dropped(), LAUNCHED, id="counted-dropped"),
        pytest.param(_counted("estimate"), LAUNCHED, id="counted-unknown"),
        # vLLM's way on llama-cpp-python's launch: its collector never counts so (fix 144)
        pytest.param(_counted(COUNTED_MESSAGES), LAUNCHED, id="counted-by-another-engine"),
        pytest.param(_counted(COUNTED_CONTENT, length=128), [*LAUNCHED[:-1], "128"], id="lower-bound-fits"),
        pytest.param(_counted(COUNTED_CONTENT), [*LAUNCHED[:-1], "4096"], id="another-launch"),
    ],
)
def test_prompt_count_not_shown_stays_the_engines_failure(
    tmp_path: Path, context: dict[str, Any], command: list[str]
) -> None:
    v = verdict_of(tmp_path, _refused(context, command))
    assert v["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY", v["gates"]
    assert gates(v)["runtime-stability"] == "failed"
    assert rejected(v).get("structured") != "engine-refused-probe"
