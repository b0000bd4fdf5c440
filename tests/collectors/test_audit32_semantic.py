"""Audit 32: the semantic harness's checks and corpus reading.

f6: a ``json_schema`` check accepted ``{"score": NaN}`` (Python's json.loads reads NaN/Infinity; JSON has
neither), and NaN passes every minimum and maximum. f4: a ``cel`` check that reads only ``text`` failed
"answer is not JSON" whenever the answer was not JSON. f3: the corpus reader split lines with
``str.splitlines`` and broke valid JSON Lines whose strings hold a raw U+2028/U+2029/U+0085.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ledger.collectors.benchmark import load_benchmark_corpus
from ledger.collectors.corpus import corpus_digest, read_pinned_jsonl
from ledger.collectors.semantic import SemanticCorpus, load_semantic_corpus, score_answer
from ledger.errors import ConfigError

SCORE_SCHEMA = {
    "type": "object",
    "properties": {"score": {"type": "number", "minimum": 0, "maximum": 1}},
    "required": ["score"],
    "additionalProperties": False,
}


def _corpus(tmp_path: Path, *checks: dict[str, Any]) -> SemanticCorpus:
    p = tmp_path / "sem.jsonl"
    item = {"id": "q", "messages": [{"role": "user", "content": "q?"}], "checks": list(checks)}
    p.write_text(json.dumps(item) + "\n")
    return load_semantic_corpus(p, corpus_digest(p))


def _score(tmp_path: Path, answer: str, *checks: dict[str, Any]) -> list[Any]:
    return score_answer(_corpus(tmp_path, *checks).items[0], answer)


# --- f6: NaN / Infinity are no JSON -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        '{"score": NaN}',
        '{"score": Infinity}',
        '{"score": -Infinity}',
        ' {"score": NaN} ',  # padded: stripped first
        '{"score": 0.5, "score": 0.7}',  # a key twice: no JSON the strict parser reads
    ],
)
def test_audit32_f6_json_schema_check_refuses_an_answer_that_is_no_json(tmp_path: Path, answer: str) -> None:
    [outcome] = _score(tmp_path, answer, {"type": "json_schema", "schema": SCORE_SCHEMA})
    assert not outcome.passed
    assert outcome.reason.startswith("answer is not JSON")


@pytest.mark.parametrize("answer", ['{"score": 0.5}', '{"score": 1}', '{"score": 0}', '{"score": 1e-3}'])
def test_audit32_f6_neighbour_a_json_answer_within_the_schema_passes(tmp_path: Path, answer: str) -> None:
    [outcome] = _score(tmp_path, answer, {"type": "json_schema", "schema": SCORE_SCHEMA})
    assert outcome.passed, outcome.reason


@pytest.mark.parametrize("answer", ['{"score": 2}', '{"score": "0.5"}', '{"scores": 0.5}', '{"score": -1}'])
def test_audit32_f6_neighbour_json_outside_the_schema_fails_by_the_schema(
    tmp_path: Path, answer: str
) -> None:
    [outcome] = _score(tmp_path, answer, {"type": "json_schema", "schema": SCORE_SCHEMA})
    assert not outcome.passed and outcome.reason.startswith("schema:"), outcome.reason


def test_audit32_f6_cel_over_answer_gets_no_nan(tmp_path: Path) -> None:
    """A CEL check reading ``answer`` of a NaN answer: no JSON, so it fails, saying why."""
    [outcome] = _score(tmp_path, '{"score": NaN}', {"type": "cel", "expr": "answer.score <= 1.0"})
    assert not outcome.passed
    assert "answer is not JSON" in outcome.reason and "reads answer" in outcome.reason


# --- f4: a CEL check over text works whatever the answer is -----------------------------------------------


@pytest.mark.parametrize(
    ("answer", "expr"),
    [
        ("Paris", 'text == "Paris"'),
        ("  Paris\n", 'text == "Paris"'),  # the stripped answer
        ("5", 'text == "5"'),  # parses as JSON: passed before too
        ("Paris", 'text.startsWith("Par") && size(text) == 5'),
        ("Paris", 'text == "Paris" || answer.city == "Paris"'),  # answer never read: true || … holds
        ('{"city": "Paris"}', 'answer.city == "Paris"'),
        ('{"city": "Paris"}', 'answer.city == "Paris" && text.contains("Paris")'),
    ],
)
def test_audit32_f4_cel_check_reads_text_whether_or_not_the_answer_is_json(
    tmp_path: Path, answer: str, expr: str
) -> None:
    [outcome] = _score(tmp_path, answer, {"type": "cel", "expr": expr})
    assert outcome.passed, outcome.reason


@pytest.mark.parametrize(
    ("answer", "expr"),
    [
        ("Paris", 'answer.city == "Paris"'),  # reads answer of a non-JSON answer
        ("Paris", 'text == "Rome" || answer.city == "Paris"'),  # … once the text side is false
        ("Paris", "has(answer.city)"),
        ("Paris", 'answer == "Paris"'),
    ],
)
def test_audit32_f4_neighbour_cel_reading_answer_of_no_json_fails_with_the_reason(
    tmp_path: Path, answer: str, expr: str
) -> None:
    [outcome] = _score(tmp_path, answer, {"type": "cel", "expr": expr})
    assert not outcome.passed
    assert outcome.reason.startswith("answer is not JSON") and "reads answer" in outcome.reason


@pytest.mark.parametrize(("answer", "expr"), [("Rome", 'text == "Paris"'), ('"Paris"', 'text == "Paris"')])
def test_audit32_f4_neighbour_cel_false_on_text_fails(tmp_path: Path, answer: str, expr: str) -> None:
    [outcome] = _score(tmp_path, answer, {"type": "cel", "expr": expr})
    assert not outcome.passed and outcome.reason == f"CEL `{expr}` is false"


def test_audit32_f4_neighbour_the_other_check_types_are_unchanged(tmp_path: Path) -> None:
    checks = [
        {"type": "exact", "value": "Paris"},
        {"type": "contains", "value": "ari"},
        {"type": "regex", "pattern": "^P"},
    ]
    assert all(o.passed for o in _score(tmp_path, "Paris", *checks))
    [schema] = _score(tmp_path, "Paris", {"type": "json_schema", "schema": {"type": "string"}})
    assert not schema.passed and schema.reason.startswith("answer is not JSON")


# --- f3: JSON Lines end at \n only --------------------------------------------------------------------------


def _write(tmp_path: Path, text: str, name: str = "c.jsonl") -> tuple[Path, str]:
    p = tmp_path / name
    p.write_bytes(text.encode("utf-8"))
    return p, corpus_digest(p)


@pytest.mark.parametrize("char", ["\u2028", "\u2029", "\u0085", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e"])
def test_audit32_f3_a_raw_line_separator_inside_a_json_string_is_no_line_break(
    tmp_path: Path, char: str
) -> None:
    rows = [
        {"id": "p1", "messages": [{"role": "user", "content": f"first{char}second"}], "max_tokens": 8},
        {"id": "p2", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8},
    ]
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    if char in "\x0b\x0c\x1c\x1d\x1e":  # control characters must be escaped in JSON strings
        text = text.replace(char, json.dumps(char)[1:-1])
    p, digest = _write(tmp_path, text)
    pinned = read_pinned_jsonl(p, digest)
    assert [n for n, _ in pinned.rows] == [1, 2]
    assert pinned.rows[0][1]["messages"][0]["content"] == f"first{char}second"
    assert [x.id for x in load_benchmark_corpus(p, digest).prompts] == ["p1", "p2"]


def test_audit32_f3_the_real_problem_of_a_line_is_named(tmp_path: Path) -> None:
    rows = [
        {"id": "p1", "messages": [{"role": "user", "content": "a\u2028b\u2029c"}], "max_tokens": 8},
        {"id": "p2", "messages": [{"role": "user", "content": "caf\u0085e"}], "max_tokens": 8},
        {"id": "p3", "messages": [{"role": "user", "content": "hello"}], "max_tokens": "8"},
    ]
    p, digest = _write(tmp_path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    with pytest.raises(ConfigError, match=r"c\.jsonl:3: max_tokens"):
        load_benchmark_corpus(p, digest)


@pytest.mark.parametrize(
    ("text", "lines"),
    [
        ('{"a": 1}\r\n{"b": 2}\r\n', [1, 2]),  # CRLF
        ('{"a": 1}\n\n{"b": 2}', [1, 3]),  # a blank line, no final newline
        ('{"a": 1}\n \t\n{"b": 2}\n', [1, 3]),  # blank: JSON whitespace only
    ],
)
def test_audit32_f3_neighbour_crlf_and_blank_lines(tmp_path: Path, text: str, lines: list[int]) -> None:
    p, digest = _write(tmp_path, text)
    assert [n for n, _ in read_pinned_jsonl(p, digest).rows] == lines


@pytest.mark.parametrize("text", ['{"a": 1}\n\u2028\n', '{"a": 1}\r{"b": 2}\n', '{"a": 1}\u2028{"b": 2}\n'])
def test_audit32_f3_neighbour_a_line_that_is_not_one_json_object_is_refused(
    tmp_path: Path, text: str
) -> None:
    """A bare separator, two objects on one line (a lone CR, U+2028 between): not one JSON object a line."""
    p, digest = _write(tmp_path, text)
    with pytest.raises(ConfigError, match=r"c\.jsonl:\d+: not JSON"):
        read_pinned_jsonl(p, digest)


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ('{"id": "a", "max_tokens": NaN}', "NaN"),
        ('{"id": "a", "max_tokens": Infinity}', "Infinity"),
        ('{"id": "a", "id": "b"}', "duplicate JSON key 'id'"),
    ],
    ids=["nan", "infinity", "key-twice"],
)
def test_a_corpus_row_that_is_not_strict_json_is_refused(tmp_path: Path, line: str, why: str) -> None:
    """Regression: corpus rows were read with ``json.loads``, which takes NaN, Infinity and a key twice
    (the last one winning); every other record the ledger reads is strict JSON (``parse_json``)."""
    p, digest = _write(tmp_path, line + "\n")
    with pytest.raises(ConfigError, match=r"c\.jsonl:1: not JSON") as ei:
        read_pinned_jsonl(p, digest)
    assert why in ei.value.message
