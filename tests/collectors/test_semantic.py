"""The semantic harness: each check type scored, unknown checks refused, a real stub server answering."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ledger.collectors.benchmark import NO_AGGREGATE
from ledger.collectors.corpus import CorpusDigestError, corpus_digest
from ledger.collectors.semantic import (
    HARNESS,
    HARNESS_DIGEST,
    SemanticSpec,
    load_semantic_corpus,
    record_semantic_gate,
    run_semantic,
    score_answer,
    semantic_gate_payload,
)
from ledger.errors import ConfigError
from ledger.recorder import LocalRecorder
from ledger.service import Ledger
from tests.engines.stub_openai import StubConfig, serve_stub

SCHEMA = {
    "type": "object",
    "properties": {"status": {"type": "string", "enum": ["READY"]}},
    "required": ["status"],
    "additionalProperties": False,
}


def _write(tmp_path: Path, rows: list[dict[str, Any]], name: str = "semantic.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _item(item_id: str, question: str, *checks: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": item_id,
        "messages": [{"role": "user", "content": question}],
        "max_tokens": 16,
        "checks": list(checks),
    }


def _one(tmp_path: Path, *checks: dict[str, Any]) -> Any:
    path = _write(tmp_path, [_item("only", "q", *checks)], name=f"one-{len(list(tmp_path.iterdir()))}.jsonl")
    return load_semantic_corpus(path, corpus_digest(path)).items[0]


@pytest.mark.parametrize(
    ("check", "good", "bad", "why"),
    [
        ({"type": "exact", "value": "READY"}, " READY\n", "READY!", "is not 'READY'"),
        ({"type": "contains", "value": "Paris"}, "It is Paris.", "It is Lyon.", "does not contain 'Paris'"),
        ({"type": "regex", "pattern": "^[0-9]+$"}, "1024", "10 24", "does not match /^[0-9]+$/"),
        (
            {"type": "json_schema", "schema": SCHEMA},
            '{"status": "READY"}',
            '{"status": "BUSY"}',
            "schema: status",
        ),
        ({"type": "json_schema", "schema": SCHEMA}, '{"status": "READY"}', "READY", "answer is not JSON"),
        (
            {"type": "cel", "expr": "answer.n == 4 && text.startsWith('{')"},
            '{"n": 4}',
            '{"n": 5}',
            "is false",
        ),
        ({"type": "cel", "expr": "answer.n == 4"}, '{"n": 4}', '{"m": 4}', "no field"),
        ({"type": "cel", "expr": "answer.n == 4"}, '{"n": 4}', "four", "answer is not JSON"),
        ({"type": "cel", "expr": "answer.n"}, None, '{"n": 4}', "not a boolean"),
    ],
    ids=[
        "exact",
        "contains",
        "regex",
        "schema",
        "schema-not-json",
        "cel",
        "cel-missing-field",
        "cel-not-json",
        "cel-not-boolean",
    ],
)
def test_each_check_type_is_scored(
    tmp_path: Path, check: dict[str, Any], good: str | None, bad: str, why: str
) -> None:
    item = _one(tmp_path, check)
    if good is not None:
        [ok] = score_answer(item, good)
        assert ok.passed and ok.reason is None
    [fail] = score_answer(item, bad)
    assert not fail.passed and fail.type == check["type"]
    assert fail.reason is not None and why in fail.reason


def test_an_item_passes_only_when_every_check_passes(tmp_path: Path) -> None:
    item = _one(tmp_path, {"type": "contains", "value": "READY"}, {"type": "exact", "value": "READY"})
    assert [c.passed for c in score_answer(item, "READY")] == [True, True]
    assert [c.passed for c in score_answer(item, "READY now")] == [True, False]


@pytest.mark.parametrize(
    ("check", "message"),
    [
        ({"type": "llm_judge", "prompt": "is it good?"}, "unknown check type 'llm_judge'"),
        ({"value": "READY"}, "a check needs a type"),
        ({"type": "exact", "value": "READY", "ignore_case": True}, "ignore_case"),
        ({"type": "exact", "value": 5}, "value"),
        ({"type": "regex", "pattern": "(unclosed"}, "bad regex"),
        ({"type": "json_schema", "schema": {"type": "no-such-type"}}, "bad JSON schema"),
        ({"type": "cel", "expr": "answer.n =="}, "CEL syntax error"),
    ],
    ids=["unknown-type", "no-type", "unknown-key", "wrong-type", "bad-regex", "bad-schema", "bad-cel"],
)
def test_bad_checks_refuse_the_corpus(tmp_path: Path, check: dict[str, Any], message: str) -> None:
    path = _write(tmp_path, [_item("a", "q", {"type": "exact", "value": "x"}), _item("b", "q", check)])
    with pytest.raises(ConfigError, match=r"semantic\.jsonl:2: ") as e:
        load_semantic_corpus(path, corpus_digest(path))
    assert message in str(e.value)


def test_max_tokens_is_optional_in_a_semantic_item(tmp_path: Path) -> None:
    row = _item("a", "q", {"type": "exact", "value": "x"})
    del row["max_tokens"]
    path = _write(tmp_path, [row])
    assert load_semantic_corpus(path, corpus_digest(path)).items[0].max_tokens == 64


def test_an_item_without_checks_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, [_item("a", "q")])
    with pytest.raises(ConfigError, match="checks"):
        load_semantic_corpus(path, corpus_digest(path))


CORPUS = [
    _item("control", "Reply READY", {"type": "exact", "value": "READY"}),
    _item(
        "json",
        "Status as JSON",
        {"type": "json_schema", "schema": SCHEMA},
        {"type": "cel", "expr": "answer.status == 'READY'"},
    ),
    _item("capital", "Capital of France?", {"type": "contains", "value": "Paris"}),
    _item("sum", "2+2?", {"type": "regex", "pattern": "^4$"}),
]
ANSWERS = {
    "Reply READY": "READY",
    "Status as JSON": '{"status": "READY"}',
    "Capital of France?": "Paris",
    "2+2?": "five",
}


def test_run_scores_the_corpus_and_itemises_failures(tmp_path: Path, ledger: Ledger) -> None:
    path = _write(tmp_path, CORPUS)
    spec = SemanticSpec(path, corpus_digest(path))
    with serve_stub(StubConfig(answers=ANSWERS)) as base:
        result = run_semantic(spec, base, out_dir=tmp_path / "out")
    assert result.outcome == "completed" and result.score == 0.75
    assert [i.passed for i in result.items] == [True, True, True, False]
    failures = [json.loads(x) for x in result.artifacts["semantic-failures.jsonl"].read_text().splitlines()]
    assert [f["id"] for f in failures] == ["sum"]
    assert (
        failures[0]["text"] == "five" and failures[0]["checks"][0]["reason"] == "answer does not match /^4$/"
    )
    assert len(result.artifacts["semantic-items.jsonl"].read_text().splitlines()) == 4

    strict = semantic_gate_payload(result, min_score=1.0, order=8)
    assert strict["status"] == "failed"
    assert strict["reason"] == "score 0.75 below the threshold 1: 1 item(s) failed (sum)"
    assert strict["counts"] == {"items": 4, "asked": 4, "passed": 3, "failed": 1, "errors": 0}
    assert strict["bounds"]["corpus_digest"] == corpus_digest(path)
    assert strict["bounds"]["harness"] == HARNESS and strict["bounds"]["harness_digest"] == HARNESS_DIGEST
    assert strict["bounds"]["failed_items"] == ["sum"]
    lenient = semantic_gate_payload(result, min_score=0.75)
    assert lenient["status"] == "passed" and lenient["reason"] is None

    entry, payload = record_semantic_gate(
        LocalRecorder(ledger, "collector"), {"campaign": "c"}, result, min_score=0.75, order=8
    )
    assert payload["status"] == "passed"
    stored = ledger.get(entry)
    assert {a.name for a in stored.statement.artifacts} == {
        "semantic-items.jsonl",
        "semantic-failures.jsonl",
        "semantic-requests.jsonl",
    }


def test_an_engine_fault_stops_the_semantic_run_with_no_aggregate_result(tmp_path: Path) -> None:
    path = _write(tmp_path, CORPUS)
    with serve_stub(StubConfig(answers=ANSWERS, fail_after=2)) as base:
        result = run_semantic(SemanticSpec(path, corpus_digest(path)), base, out_dir=tmp_path / "out")
    assert result.outcome == "fault" and len(result.items) == 2  # no retry of item 3, no item 4
    assert result.score is None
    payload = semantic_gate_payload(result, min_score=0.5)
    assert payload["status"] == "failed"
    assert payload["reason"].startswith(f"{NO_AGGREGATE}: engine fault at item capital: HTTP 500")
    assert payload["bounds"]["score"] is None and payload["bounds"]["aggregate"] is False


def test_a_client_error_fails_its_item_but_the_run_goes_on(tmp_path: Path) -> None:
    path = _write(tmp_path, CORPUS)
    with serve_stub(StubConfig(answers=ANSWERS, error_every=2)) as base:
        result = run_semantic(SemanticSpec(path, corpus_digest(path)), base, out_dir=tmp_path / "out")
    assert result.outcome == "completed" and result.score == 0.5  # items 2 and 4 answered 400
    assert result.items[1].error == "HTTP 400: bad request (scripted)" and not result.items[1].passed


def test_digest_mismatch_is_refused_before_any_request(tmp_path: Path) -> None:
    path = _write(tmp_path, CORPUS)
    pinned = corpus_digest(path)
    _write(tmp_path, CORPUS[:3])
    with pytest.raises(CorpusDigestError):
        run_semantic(SemanticSpec(path, pinned), "http://127.0.0.1:9", out_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_the_threshold_must_be_a_sane_number(tmp_path: Path) -> None:
    path = _write(tmp_path, CORPUS[:1])
    with serve_stub(StubConfig(answers=ANSWERS)) as base:
        result = run_semantic(SemanticSpec(path, corpus_digest(path)), base, out_dir=tmp_path / "out")
    assert result.score == 1.0
    for bad in (0, -1, 1.5, True, "1"):
        with pytest.raises(ConfigError, match="threshold"):
            semantic_gate_payload(result, min_score=bad)  # type: ignore[arg-type]
