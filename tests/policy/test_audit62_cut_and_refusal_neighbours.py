"""Audit 62: the neighbours of the cut-answer, request-form and latency-bar rules (issue 11).

Before:
- f1: any answer ending with finish_reason "length" was excused (``campaign-cut-probe``): a WRONG control
  answer cut at the limit ("I am not ready to answer", 8 of 8 tokens), or one that stopped short of it ("NOT",
  1 of 8), dropped out of ready-control, and a later pass made the campaign QUALIFIED. Now a cut answer is
  excused only while it could still have become the right one (``ledger.answers.cut_undecided``, one
  judgement for the collector's probe and the policy's ``e.derived.cut_undecided``).
- f2: a policy copy with ``sequential_max_latency_ms = "60000"``, ``"inf"`` or ``inf`` loaded (CEL's
  ``double()`` reads text), and ``inf`` passed a 90-second request: refused at load now, as the collector
  refused it.
- f3: a structured probe's HTTP 500 crash trace that merely mentioned ``'loc': ('body', 'response_format'``
  was excused as a refused request form: the patterns are anchored at the start of the error now.
- f4: the latency reason printed the run's own claims (``details.max_ms``) and '?' where it had none: it
  names the slowest recorded latency (``e.derived.sequential_slowest_ms``).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from ledger.answers import cut_undecided
from ledger.errors import PolicyError
from ledger.policy.loader import load_policy
from tests.policy.test_fix69_cut_answers import (
    COMPLETION,
    CONTROL,
    POLICY_DIR,
    RUNTIME,
    SEQ_LATENCIES,
    STRUCTURED,
    _expect,
    _failures,
    _fixture,
    _structured_refused,
)


def _cut(text: str, made: int, limit: int = 8) -> str:
    return (
        f'check = "completion", ok = false, http_status = 200, finish_reason = "length", '
        f'completion_tokens = {made}, expected = "READY", text = "{text}", max_tokens = {limit}, '
        'error = "cut"'
    )


# --- f1 ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "made"),
    [
        ("I am not ready to answer", 8),  # the audit's: a wrong answer, cut at the limit
        ("NOT", 1),  # the audit's: wrong, and it stopped short of the limit
        ("REA", 1),  # a beginning of READY, but short of the limit: max_tokens cut nothing
        ("READY!", 8),  # no beginning of READY once stripped
    ],
)
def test_a_wrong_answer_ending_with_length_was_excused_as_cut(tmp_path: Path, text: str, made: int) -> None:
    path = _fixture(tmp_path, [(COMPLETION, _cut(text, made))], _expect(CONTROL, 'ready-control = "failed"'))
    assert not _failures(path), text


@pytest.mark.parametrize(("text", "made"), [("REA", 8), ("READY", 8), ("", 8), ("  RE", 8)])
def test_a_beginning_of_the_answer_cut_at_the_limit_is_still_no_judgement(
    tmp_path: Path, text: str, made: int
) -> None:
    path = _fixture(
        tmp_path,
        [(COMPLETION, _cut(text, made))],
        _expect(
            "INCONCLUSIVE",
            'ready-control = "missing"',
            'expect.rejected = [{ entry = "completion", rule = "campaign-cut-probe" }]\n',
        ),
    )
    assert not _failures(path), text


def test_a_structured_answer_that_is_no_json_beginning_cut_is_a_failure(tmp_path: Path) -> None:
    cut = (
        'check = "structured", ok = false, http_status = 200, finish_reason = "length", '
        "completion_tokens = 64, max_tokens = 64, text = 'I cannot do JSON'"
    )
    path = _fixture(tmp_path, [(STRUCTURED, cut)], _expect(CONTROL, 'structured-output = "failed"'))
    assert not _failures(path)


@pytest.mark.parametrize(
    ("payload", "undecided"),
    [
        ({"check": "structured", "text": '{"status": "REA'}, True),
        ({"check": "structured", "text": '{"status": '}, True),
        ({"check": "structured", "text": '{"status": "READY"}'}, True),  # whole JSON: it may have gone on
        ({"check": "structured", "text": 'x {"status"'}, False),
        ({"check": "structured", "text": '{"a": 1} trailing'}, False),
        ({"check": "completion", "text": "READY"}, True),
        ({"check": "completion", "text": "NOT"}, False),
        ({"check": "completion", "text": None}, False),  # no text recorded: fail closed
        ({"check": "sequential", "text": "READY"}, False),
        ({"check": "completion", "text": "REA", "completion_tokens": "8"}, False),  # mistyped
        ({"check": "completion", "text": "REA", "finish_reason": "stop"}, False),
        ({"check": "completion", "text": "REA", "finish_reason": "LENGTH"}, False),
    ],
)
def test_cut_undecided_neighbours(payload: dict[str, object], undecided: bool) -> None:
    full = {"finish_reason": "length", "max_tokens": 8, **payload}
    assert cut_undecided(full, "READY") is undecided


# --- f2 ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ['"60000"', '"inf"', "inf", "nan", "true", "0", "-1"])
def test_a_mistyped_latency_bar_loaded_and_passed_a_90_second_request(tmp_path: Path, value: str) -> None:
    d = tmp_path / "policies"
    shutil.copytree(POLICY_DIR, d, ignore=shutil.ignore_patterns("fixtures"))
    p = d / "backend-qualification.toml"
    text = p.read_text()
    assert text.count("sequential_max_latency_ms = 60000\n") == 1
    p.write_text(
        text.replace("sequential_max_latency_ms = 60000\n", f"sequential_max_latency_ms = {value}\n")
    )
    with pytest.raises(
        PolicyError, match=r"params\.sequential_max_latency_ms: .* not a positive, finite number"
    ):
        load_policy("backend-qualification", d)


@pytest.mark.parametrize("value", ["60000", "60000.0", "1"])
def test_a_numeric_latency_bar_still_loads(tmp_path: Path, value: str) -> None:
    d = tmp_path / "policies"
    shutil.copytree(POLICY_DIR, d, ignore=shutil.ignore_patterns("fixtures"))
    p = d / "backend-qualification.toml"
    p.write_text(
        p.read_text().replace("sequential_max_latency_ms = 60000\n", f"sequential_max_latency_ms = {value}\n")
    )
    load_policy("backend-qualification", d)


# --- f3 ----------------------------------------------------------------------------------------------------

CRASH = (
    "HTTP 500: RuntimeError: CUDA error: an illegal memory access was encountered "
    "(while logging the request: {'loc': ('body', 'response_format', 'type')})"
)


def test_a_crash_trace_mentioning_response_format_was_excused_as_a_refused_form(tmp_path: Path) -> None:
    path = _fixture(
        tmp_path,
        [(STRUCTURED, _structured_refused(error=CRASH))],
        _expect(RUNTIME, 'runtime-stability = "failed"'),
    )
    assert not _failures(path)


def test_the_refusal_patterns_are_anchored_at_the_start_of_the_error() -> None:
    pats = load_policy("backend-qualification", POLICY_DIR).params["request_form_refusal_patterns"]
    assert all(p.startswith("^") for p in pats), pats
    assert not any(re.search(p, CRASH) for p in pats)
    refused = "HTTP 500: 1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format')"
    assert any(re.search(p, refused) for p in pats)
    assert not any(re.search(p, "HTTP 500: boom\n" + refused) for p in pats)


# --- f4 ----------------------------------------------------------------------------------------------------


def test_the_latency_reason_named_the_runs_own_claim_not_its_latencies(tmp_path: Path) -> None:
    path = _fixture(
        tmp_path,
        [(SEQ_LATENCIES, "latencies_ms = [90000.0, 41.5,")],
        _expect(
            RUNTIME,
            'sequential-requests = "failed"',
            'expect.reasons = { sequential-requests = "the slowest recorded latency 90000.0 ms" }\n',
        ),
    )
    assert not _failures(path)
