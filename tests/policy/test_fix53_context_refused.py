"""Audit 41 F3: a campaign run with ``--max-model-len 8`` — a context smaller than the collector's own control
prompt — had vLLM answer the ready-control completion HTTP 400 "This model's maximum context length is 8
tokens. However, your prompt contains at least 9 input tokens…", and the shipped policy judged the engine
NOT QUALIFIED — CONTROL. The campaign set the limit: the engine refused a request the campaign made too long
for it, and nothing of the engine was judged.

Now ``engine-refused-probe`` (one rule, one condition, shared with ``[acceptance.against]``) also covers a
probe whose status is in ``params.context_refused_http_statuses`` (400) and whose recorded ``error`` matches
one of ``params.context_refusal_patterns`` (vLLM's "maximum context length is N tokens",
llama-server's "exceeds the available context size"): not credited, no failure of the engine,
ready-control INCONCLUSIVE naming it.
A 400 with any other error, a 500 with the same text, or the error dropped still fail the engine."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from ledger.policy.fixtures import run_fixture
from ledger.policy.loader import load_policy
from ledger.service import Ledger

REPO = Path(__file__).resolve().parents[2]
POLICY_DIR = REPO / "policies"
FIXTURE = POLICY_DIR / "fixtures" / "backend-qualification" / "context-length-refused.toml"
CONTROL = "NOT QUALIFIED — CONTROL"
RUNTIME = "NOT QUALIFIED — RUNTIME RELIABILITY"  # a 5xx / no status: the engine failed the request
REFUSED = "ok = false, http_status = 400"
VLLM_TEXT = "This model's maximum context length is 8 tokens"
ERROR_FIELD = (
    ", error = \"HTTP 400: This model's maximum context length is 8 tokens. However, your prompt contains"
    " at least 9 input tokens, which exceeds this limit even without any output tokens. Please reduce the"
    ' length of the input prompt. (parameter=input_tokens, value=9)"'
)
LLAMA_TEXT = "the request exceeds the available context size, try increasing it"


def _run(path: Path) -> list[str]:
    result = run_fixture(path, POLICY_DIR, Path(tempfile.mkdtemp(prefix="fix53-")), init=Ledger.init)
    assert result.checks, path
    return list(result.failures)


def _variant(tmp_path: Path, edits: list[tuple[str, str]], word: str, control: str) -> Path:
    text = FIXTURE.read_text()
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new)
    text = text[: text.index("\n[[verdicts]]")] + (
        f'\n[[verdicts]]\nafter = "control-refused"\nexpect.verdict = "{word}"\n'
        f'expect.gates = {{ api-readiness = "passed", ready-control = "{control}" }}\n'
    )
    out = tmp_path / FIXTURE.name
    out.write_text(text)
    return out


def test_control_prompt_refused_for_the_campaigns_context_length_is_inconclusive_not_control() -> None:
    """The shipped fixture: vLLM's 400 "maximum context length is 8 tokens" → INCONCLUSIVE."""
    failures = _run(FIXTURE)
    assert not failures, failures


@pytest.mark.parametrize(
    ("label", "edits", "word", "control"),
    [
        ("llama-server's context refusal", [(VLLM_TEXT, LLAMA_TEXT)], "INCONCLUSIVE", "missing"),
        # the status is the engine's word that it refused the request: another status with the same text fails
        ("HTTP 500, same text", [(REFUSED, "ok = false, http_status = 500")], RUNTIME, "not_authorized"),
        ("HTTP 200 not ok, same text", [(REFUSED, "ok = false, http_status = 200")], CONTROL, "failed"),
        # a 400 for anything but the context length is the engine's failure
        ("HTTP 400, other text", [(VLLM_TEXT, "Invalid request: unknown field 'foo'")], CONTROL, "failed"),
        (
            "HTTP 400, error dropped",
            [(ERROR_FIELD, "")],
            CONTROL,
            "failed",
        ),
        ("status dropped", [(REFUSED, "ok = false")], RUNTIME, "not_authorized"),
    ],
)
def test_context_refused_control_neighbours(
    tmp_path: Path, label: str, edits: list[tuple[str, str]], word: str, control: str
) -> None:
    failures = _run(_variant(tmp_path, edits, word, control))
    assert not failures, (label, failures)


def test_context_refusal_params_are_read_from_evidence_acceptance() -> None:
    """The patterns are regular expressions matching each engine's own message (one copy: the policy's)."""
    params = load_policy("backend-qualification", POLICY_DIR).params
    assert params["context_refused_http_statuses"] == [400]
    import re

    pats = params["context_refusal_patterns"]
    assert any(re.search(p, VLLM_TEXT) for p in pats)
    assert any(re.search(p, LLAMA_TEXT) for p in pats)
    assert not any(re.search(p, "Invalid request: unknown field 'foo'") for p in pats)
