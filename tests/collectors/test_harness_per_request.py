"""Issue 11, fix 83: the semantic harness records every request it sent (``semantic-requests.jsonl``, one
``benchmark.RequestRecord`` each, as ``benchmark-requests.jsonl`` records the benchmark's) — the one that
stopped the run too — with its HTTP status (none: no answer), ``fault``, ``unanswered`` and ``refusal``, so
the policy reads ``bounds.fault_kind`` back from the record rather than from the payload. Read back here by
the policy's own reader (``acceptance._requests_shown``), the record agrees with the payload the harness
wrote."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ledger.collectors.benchmark import RequestRecord, request_fault_kind
from ledger.collectors.corpus import corpus_digest
from ledger.collectors.semantic import (
    REQUESTS_ARTIFACT,
    SemanticSpec,
    record_semantic_gate,
    run_semantic,
    semantic_gate_payload,
)
from ledger.policy.acceptance import _request_unanswered, _requests_shown
from ledger.policy.loader import load_policy
from ledger.recorder import LocalRecorder
from ledger.service import Ledger
from tests.collectors.test_fix74_refusal_after_answers import stub
from tests.engines.stub_openai import StubConfig, serve_stub

ANSWERS = {f"q{i}": "yes it is" for i in range(4)}  # more than one piece: a reset cuts it


def _spec(tmp_path: Path, n: int = 4) -> SemanticSpec:
    path = tmp_path / "semantic.jsonl"
    rows = [
        {
            "id": f"s{i}",
            "messages": [{"role": "user", "content": f"q{i}"}],
            "max_tokens": 8,
            "checks": [{"type": "contains", "value": "y"}],
        }
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return SemanticSpec(path, corpus_digest(path))


def _requests(result: Any) -> list[dict[str, Any]]:
    text = result.artifacts[REQUESTS_ARTIFACT].read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_semantic_unanswered_fault_is_recorded_per_request_without_an_http_status(tmp_path: Path) -> None:
    """The reproducer: the item whose connection the engine dropped was not written anywhere (it is not
    scored), so ``fault_kind`` "unanswered" could not be read back; it is now in the request record."""
    with serve_stub(StubConfig(answers=ANSWERS, reset_after=2, tokens=4)) as base:
        result = run_semantic(_spec(tmp_path), base, out_dir=tmp_path / "out")
    assert result.outcome == "fault", result.stopped
    payload = semantic_gate_payload(result, min_score=0.5)
    assert payload["bounds"]["fault_kind"] == "unanswered"
    lines = _requests(result)
    assert [line["prompt_id"] for line in lines] == ["s0", "s1", "s2"]
    last = lines[-1]  # the stream cut after its HTTP 200 head: no answer, the status of none
    assert last["fault"] is True and last["unanswered"] is True and last["http_status"] == 200
    assert all(line["error"] is None and line["http_status"] == 200 for line in lines[:2])
    shown, problems = _requests_shown(lines, payload["bounds"])
    assert problems == [] and shown["unanswered"] == 1 and shown["completed"] == 2


def test_semantic_http_500_fault_is_recorded_with_its_status(tmp_path: Path) -> None:
    """Neighbour: an HTTP 500 is an answer — recorded with its status, ``fault_kind`` "answered"; the
    record read back as "unanswered" would contradict itself."""
    with serve_stub(StubConfig(answers=ANSWERS, fail_after=1)) as base:
        result = run_semantic(_spec(tmp_path), base, out_dir=tmp_path / "out")
    payload = semantic_gate_payload(result, min_score=0.5)
    assert payload["bounds"]["fault_kind"] == "answered"
    last = _requests(result)[-1]
    assert last["fault"] is True and last["unanswered"] is False and last["http_status"] == 500
    claimed = {**payload["bounds"], "fault_kind": "unanswered"}
    _, problems = _requests_shown(_requests(result), claimed)
    assert problems and "1 faulted request(s), 0 of them unanswered" in problems[0]


def test_semantic_completed_run_records_every_request_answered(tmp_path: Path) -> None:
    with serve_stub(StubConfig(answers=ANSWERS)) as base:
        result = run_semantic(_spec(tmp_path), base, out_dir=tmp_path / "out")
    assert result.outcome == "completed"
    lines = _requests(result)
    assert len(lines) == 4 and all(line["error"] is None and not line["fault"] for line in lines)
    assert _requests_shown(lines, semantic_gate_payload(result, min_score=0.5)["bounds"])[1] == []


def test_semantic_refused_item_is_recorded_with_its_refusal(tmp_path: Path) -> None:
    """An access refusal from the first item (outcome config): the refused request is in the record with
    its status and refusal, and agrees with ``counts.refused``."""
    params = dict(load_policy("backend-qualification").params)
    with stub(answer_first=0) as base:
        result = run_semantic(_spec(tmp_path, 2), base, out_dir=tmp_path / "out", params=params)
    assert result.outcome == "config", result.stopped
    [line] = _requests(result)
    assert line["refusal"] == "access" and line["http_status"] == 401
    payload = semantic_gate_payload(result, min_score=0.5)
    shown, problems = _requests_shown([line], payload["bounds"])
    assert problems == [] and shown["refused"] == payload["counts"]["refused"] == 1


def test_semantic_request_record_is_stored_with_the_gate(tmp_path: Path, ledger: Ledger) -> None:
    with serve_stub(StubConfig(answers=ANSWERS)) as base:
        result = run_semantic(_spec(tmp_path), base, out_dir=tmp_path / "out")
    recorder = LocalRecorder(ledger, "collector")
    entry, _ = record_semantic_gate(recorder, {"campaign": "c"}, result, min_score=0.5)
    assert REQUESTS_ARTIFACT in {a.name for a in ledger.get(entry).statement.artifacts}


@pytest.mark.parametrize(
    ("status", "unanswered", "fault", "kind"),
    [
        (None, True, True, "unanswered"),  # connection refused / reset before any head
        (200, True, True, "unanswered"),  # the stream cut after an HTTP 200 head (an outside stop mid-answer)
        (500, True, True, "answered"),  # audit 73 f1: an error status is an answer, its body cut or not
        (503, False, True, "answered"),
        (401, True, True, "answered"),
        (None, False, True, "other"),
        (None, True, False, None),  # no fault: nothing to excuse
    ],
)
def test_collector_and_policy_judge_an_unanswered_request_alike(
    status: int | None, unanswered: bool, fault: bool, kind: str | None
) -> None:
    """One judgement of a request left unanswered: the collector's ``request_fault_kind`` (what it counts
    in ``counts.unanswered`` and ``bounds.fault_kind``) and the policy's read-back of the stored record."""
    rec = RequestRecord("p", 1, 0, 0, "2026-01-01T00:00:00Z", 0.0)
    rec.http_status, rec.unanswered, rec.fault, rec.error = status, unanswered, fault, "ClientPayloadError: x"
    assert request_fault_kind(rec) == kind
    stored = json.loads(json.dumps(rec.to_json()))
    assert _request_unanswered(stored) is (kind == "unanswered")
