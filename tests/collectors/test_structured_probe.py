"""The structured-output probe and the policy judge an answer with one check (``ledger.answers``).

The probe runs against a real process-local OpenAI-compatible server (the stub); what it records as its
error is what the policy's re-judgement of the same recorded payload says, word for word.
"""

from __future__ import annotations

import pytest

from ledger.answers import structured_answer_problem
from ledger.collectors.campaign import structured_schema
from ledger.collectors.probe import probe_structured
from tests.engines.stub_openai import StubConfig, serve_stub

PROMPT = 'Answer with the JSON object {"status": "READY"}.'


@pytest.mark.parametrize(
    ("answer", "ok", "says"),
    [
        pytest.param('{"status": "READY"}', True, None, id="valid"),
        pytest.param('{"status": "BUSY"}', False, 'at $.status: found "BUSY"', id="outside-its-schema"),
        pytest.param('{"state": "READY"}', False, "'status' is a required property", id="renamed-key"),
        pytest.param('{"status": "READY"', False, "answer is not JSON", id="cut-short"),
        # a client's parser may take either value of a repeated key; NaN is no JSON: both were valid answers
        pytest.param(
            '{"status": "BUSY", "status": "READY"}', False, "duplicate JSON key 'status'", id="duplicate-key"
        ),
        pytest.param('{"status": "READY", "load": NaN}', False, "NaN is not allowed", id="nan-value"),
        pytest.param('{"status": "READY", "load": Infinity}', False, "Infinity", id="infinity-value"),
    ],
)
def test_the_probe_records_the_problem_the_policy_finds_in_its_answer(
    answer: str, ok: bool, says: str | None
) -> None:
    with serve_stub(StubConfig(answers={PROMPT: answer})) as base:
        payload = probe_structured(
            base, schema=structured_schema(), fmt="json_schema", prompt=PROMPT, model="stub-model", timeout=10
        )
    assert payload["text"] == answer
    assert payload["ok"] is ok
    problem = structured_answer_problem(payload)
    assert (problem is None) is ok
    if says is not None:
        assert problem is not None and says in problem, problem
        assert payload["error"] == problem
