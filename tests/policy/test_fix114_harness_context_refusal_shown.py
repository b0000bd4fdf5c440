"""Fix 114: a harness request recorded refused for the campaign's context length whose own answer was no
4xx (llama-cpp-python's stream cut on "Requested tokens (N) exceed context window of M") rests on its size
alone (``context``, ``max_tokens``): the policy reads the per-request record back (``_requests_shown``) and
holds that size to the context its launch gave the engine — a record that does not show it, or names
another context, is a problem of the result (harness-artifact-mismatch), never excused on the claim."""

from __future__ import annotations

from typing import Any

import pytest

from ledger.answers import context_record
from ledger.collectors.benchmark import STREAM_CUT
from ledger.policy.acceptance import _requests_shown
from ledger.policy.loader import load_policy

SIZING_400 = (400, "HTTP 400: This model's maximum context length is 256 tokens. However, you requested 472")


def _record(**over: Any) -> dict[str, Any]:
    r: dict[str, Any] = {
        "prompt_id": "p1",
        "level": 1,
        "repetition": 0,
        "http_status": 200,
        "error": STREAM_CUT,
        "fault": True,
        "unanswered": False,
        "refusal": "context",
        "max_tokens": 64,
        "context": context_record("--n_ctx", 128, 107),
    }
    r.update(over)
    return r


ANSWERED = {"prompt_id": "p0", "level": 1, "repetition": 0, "http_status": 200, "error": None}
BOUNDS = {"outcome": "config"}


@pytest.fixture(scope="module")
def params() -> dict[str, Any]:
    return dict(load_policy("evidence-acceptance").params)


def test_streamed_context_refusal_shown_by_its_record_and_launch_is_no_problem(
    params: dict[str, Any],
) -> None:
    shown, problems = _requests_shown([ANSWERED, _record()], BOUNDS, params, ("--n_ctx", 128))
    assert problems == [] and shown["refused"] == 1
    sized = _record(context=context_record("--n_ctx", 128, None, SIZING_400))
    assert _requests_shown([sized], BOUNDS, params, ("--n_ctx", 128))[1] == []


@pytest.mark.parametrize(
    ("record", "launched"),
    [
        pytest.param(_record(), None, id="launch-unknown"),
        pytest.param(_record(), ("--n_ctx", 512), id="launched-otherwise"),
        pytest.param(_record(context=None), ("--n_ctx", 128), id="context-dropped"),
        pytest.param(_record(context=context_record("--n_ctx", 128, 50)), ("--n_ctx", 128), id="fits"),
        pytest.param(_record(max_tokens="64"), ("--n_ctx", 128), id="max-tokens-text"),
        pytest.param(
            _record(context={"option": "--n_ctx", "length": 128, "tokens": 107}),
            ("--n_ctx", 128),
            id="renamed",
        ),
        pytest.param(
            _record(context=context_record("--n_ctx", 128, None, (500, SIZING_400[1]))),
            ("--n_ctx", 128),
            id="sizing-500",
        ),
    ],
)
def test_streamed_context_refusal_its_record_does_not_show_is_a_problem(
    params: dict[str, Any], record: dict[str, Any], launched: tuple[str, int] | None
) -> None:
    _, problems = _requests_shown([record], BOUNDS, params, launched)
    assert any("does not show its prompt and max_tokens beyond the context" in p for p in problems), problems


def test_sizing_refusal_needs_the_policys_params(params: dict[str, Any]) -> None:
    sized = _record(context=context_record("--n_ctx", 128, None, SIZING_400))
    assert _requests_shown([sized], BOUNDS, None, ("--n_ctx", 128))[1] != []


def test_a_4xx_context_refusal_is_read_as_before(params: dict[str, Any]) -> None:
    refused = _record(http_status=400, error="HTTP 400: maximum context length is 8 tokens", context=None)
    assert _requests_shown([refused], BOUNDS, params, None)[1] == []
