"""Audit 35 (f5): a harness result's counts are judged against its own stored record of what it counted.

A semantic gate.result whose payload claimed 12/12 passed was credited (QUALIFIED) though its own stored
semantic-items.jsonl / semantic-failures.jsonl showed 4 failed items: no gate read a harness result's
artifacts back. Now the policy engine reads them (``e.derived.artifact_problem``, streamed from the store)
and rule ``harness-artifact-mismatch`` withholds credit from a result whose counts its record contradicts,
or whose named record cannot be read back (fail closed); a failure it records still counts against the
engine. The benchmark's ``benchmark-requests.jsonl`` is judged the same way (issued, completed, errors,
completed@cN).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.policy.test_fail_closed import counted_against, entry, qualified_entries, rejected, verdict_of

RULE = "harness-artifact-mismatch"
INCONCLUSIVE = "INCONCLUSIVE"


def _items(failed: int, total: int = 12, **extra: Any) -> str:
    """Items as the harness writes them: each scored on one check, passed where it passed (fix 154)."""
    return "\n".join(
        json.dumps(
            {"id": f"q{i}", "passed": i >= failed, "error": None, "checks": [_check(i >= failed)], **extra}
        )
        for i in range(total)
    )


def _check(passed: bool) -> dict[str, Any]:
    return {"type": "exact", "passed": passed, "reason": None if passed else "wrong"}


def _failures(ids: list[int]) -> str:
    return "\n".join(json.dumps({"id": f"q{i}", "passed": False, "reason": "wrong"}) for i in ids)


def _semantic(items: str | None, failures: str | None = None, **artifact: Any) -> list[dict[str, Any]]:
    es = qualified_entries()
    arts = []
    if items is not None:
        arts.append({"name": "semantic-items.jsonl", "text": items, **artifact})
    if failures is not None:
        arts.append({"name": "semantic-failures.jsonl", "text": failures})
    entry(es, "semantic")["artifacts"] = arts
    return es


def _detail(v: dict[str, Any], name: str) -> str:
    i = next(i for i, n in v["_names"].items() if n == name)
    return str(next(r["detail"] for r in v["rejected"] if r["entry"] == i))


def test_f5_a_semantic_pass_whose_items_show_failures_is_not_credited(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, _semantic(_items(4), _failures([0, 1, 2, 3])))
    assert v["verdict"] == INCONCLUSIVE, v["gates"]
    assert rejected(v)["semantic"] == RULE
    detail = _detail(v, "semantic")
    assert "counts.passed 12, its semantic-items.jsonl (12 items, 4 failed) shows 8" in detail
    assert "counts.failed 0" in detail


def test_f5_neighbour_a_record_that_agrees_is_credited(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, _semantic(_items(0), ""))
    assert v["verdict"] == "QUALIFIED", (v["gates"], v["rejected"])


def test_f5_neighbour_a_failures_record_alone_is_compared(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, _semantic(None, _failures([0, 1])))
    assert rejected(v)["semantic"] == RULE
    assert "counts.failed 0, its semantic-failures.jsonl (2 items) shows 2" in _detail(v, "semantic")


def test_f5_neighbour_failures_that_are_not_the_failed_items(tmp_path: Path) -> None:
    """Counts agree, but the failures record lists other items than the items record shows failed."""
    es = _semantic(_items(2), _failures([5, 6]))
    entry(es, "semantic")["payload"]["status"] = "failed"
    entry(es, "semantic")["payload"]["counts"] = {"items": 12, "asked": 12, "passed": 10, "failed": 2}
    entry(es, "semantic")["payload"]["figures"] = {"score": 0.833333}
    v = verdict_of(tmp_path, es)
    assert rejected(v)["semantic"] == RULE
    assert "lists items ['q5', 'q6']" in _detail(v, "semantic")
    # a failure it records still counts against the engine
    assert counted_against(v)["semantic"] == RULE
    assert v["verdict"] == "NOT QUALIFIED — SEMANTIC QUALITY"


@pytest.mark.parametrize(
    ("items", "why"),
    [
        (_items(0) + "\nnot json", "line 13 is not JSON"),
        (_items(0) + "\n[1, 2]", "line 13 is not a JSON object"),
        (_items(0).replace('"passed"', '"pass"'), "item 1 records no boolean passed"),  # renamed
        (_items(0).replace("true", '"true"'), "item 1 records no boolean passed"),  # mistyped
    ],
    ids=["not-json", "not-an-object", "passed-renamed", "passed-mistyped"],
)
def test_f5_neighbour_an_unreadable_record_fails_closed(tmp_path: Path, items: str, why: str) -> None:
    v = verdict_of(tmp_path, _semantic(items))
    assert v["verdict"] == INCONCLUSIVE
    assert rejected(v)["semantic"] == RULE
    assert why in _detail(v, "semantic")


def test_f5_neighbour_a_record_by_reference_only_cannot_be_read_back(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, _semantic(_items(0), stored=False))
    assert rejected(v)["semantic"] == RULE
    assert "recorded by reference only" in _detail(v, "semantic")


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_f5_neighbour_a_damaged_record_is_not_credited(tmp_path: Path, damage: str) -> None:
    v = verdict_of(tmp_path, _semantic(_items(0), damage=damage))
    assert v["verdict"] == INCONCLUSIVE
    assert rejected(v)["semantic"] == f"artifact-{damage}"  # the artifact rule names it first


def test_f5_neighbour_a_count_left_out_is_the_gates_to_judge(tmp_path: Path) -> None:
    """counts.passed dropped: the artifact has nothing to contradict; the semantic gate fails the pass that
    does not show its counts."""
    es = _semantic(_items(0))
    del entry(es, "semantic")["payload"]["counts"]["passed"]
    v = verdict_of(tmp_path, es)
    assert "semantic" not in rejected(v)
    assert v["verdict"] == "NOT QUALIFIED — SEMANTIC QUALITY"


def test_f5_neighbour_a_result_naming_no_record_is_judged_as_before(tmp_path: Path) -> None:
    assert verdict_of(tmp_path, _semantic(None))["verdict"] == "QUALIFIED"


# --- the benchmark: its requests record ---------------------------------------------------------------------


def _requests(errors: int = 0) -> str:
    lines = []
    for level in (1, 4, 32):
        for n in range(192):
            err = "HTTP 500" if level == 32 and n < errors else None
            # each prompt twice (repetitions 0 and 1), the same output each time: c1 parity 96 of 96 (fix 154)
            record = {"prompt_id": f"p{n % 96}", "level": level, "repetition": n // 96, "index": n % 96}
            record |= {"output_digest": f"blake3:{n % 96}", "output_tokens": 8, "tokens_from": "usage"}
            lines.append(json.dumps({**record, "error": err}))
    return "\n".join(lines)


def _benchmark(text: str) -> list[dict[str, Any]]:
    es = qualified_entries()
    entry(es, "benchmark")["artifacts"] = [{"name": "benchmark-requests.jsonl", "text": text}]
    return es


def test_f5_a_benchmark_whose_requests_show_errors_is_not_credited(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, _benchmark(_requests(errors=2)))
    assert v["verdict"] == INCONCLUSIVE, v["gates"]
    assert rejected(v)["benchmark"] == RULE
    detail = _detail(v, "benchmark")
    assert "counts.completed 576" in detail and "shows 574" in detail
    assert "counts.errors 0" in detail and "counts.completed@c32 192" in detail


def test_f5_neighbour_a_benchmark_whose_requests_agree_is_credited(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, _benchmark(_requests()))
    assert v["verdict"] == "QUALIFIED", (v["gates"], v["rejected"])


def test_f5_neighbour_a_request_without_its_error_field_fails_closed(tmp_path: Path) -> None:
    text = _requests().replace('"error": null', '"err": null', 1)
    v = verdict_of(tmp_path, _benchmark(text))
    assert rejected(v)["benchmark"] == RULE
    assert "request 1 records no error" in _detail(v, "benchmark")
