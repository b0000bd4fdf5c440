"""Issue 11, fix 154 (audit 101 f2 a): a semantic result whose every item's checks failed was credited as
passed: ``semantic-items.jsonl`` recorded each item ``passed: true`` beside ``checks[*].passed: false``, and
the policy read back each item's ``passed`` but never held it to the item's own checks and error. Fail
closed: an item is consistent only where ``passed == (error null, checks not empty, every check passed)``;
an inconsistent item — or one whose error or checks cannot be read — is ``harness-artifact-mismatch``,
naming the item. The benchmark's c1 parity record (``bounds.parity``, whose fraction the ``c1_parity``
figure must be) is likewise re-derived from its stored ``benchmark-requests.jsonl`` (``parity_of``, the
outputs' digests and token counts at c1) and held to it."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ledger.answers import parity_of
from ledger.policy.acceptance import _harness_artifact_problem
from ledger.store.filesystem import FilesystemStore
from tests.policy.test_fail_closed import entry, qualified_entries, rejected, verdict_of

RULE = "harness-artifact-mismatch"


def _check(passed: bool) -> dict[str, Any]:
    return {"type": "exact", "passed": passed, "reason": None if passed else "expected 'x', got 'y'"}


def _item(i: int, passed: bool, checks: list[bool] | None = None, error: str | None = None) -> dict[str, Any]:
    """Item ``q{i}`` as the harness writes it: ``checks`` its checks' outcomes (None: one, as ``passed``)."""
    outcomes = [passed] if checks is None else checks
    return {
        "id": f"q{i}",
        "passed": passed,
        "checks": [_check(c) for c in outcomes],
        "text": "x",
        "output_digest": None,
        "finish_reason": "stop",
        "e2e_ms": 1.0,
        "error": error,
        "model": "m",
        "reasoning": None,
    }


def _semantic(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The qualified fixture, its semantic result storing ``items`` (its counts as they show them)."""
    es = qualified_entries()
    p = entry(es, "semantic")["payload"]
    passed = sum(1 for i in items if i.get("passed") is True)
    p["counts"] = {"items": len(items), "asked": len(items), "passed": passed, "failed": len(items) - passed}
    text = "\n".join(json.dumps(i) for i in items)
    entry(es, "semantic")["artifacts"] = [{"name": "semantic-items.jsonl", "text": text}]
    return es


def _detail(v: dict[str, Any], name: str) -> str:
    i = next(i for i, n in v["_names"].items() if n == name)
    return str(next(r["detail"] for r in v["rejected"] if r["entry"] == i))


def _consistent(n: int = 12) -> list[dict[str, Any]]:
    return [_item(i, True) for i in range(n)]


# --- (a) the semantic items ---------------------------------------------------------------------------


def test_semantic_item_passed_against_its_failed_checks_is_not_credited(tmp_path: Path) -> None:
    """The audit's run: every item recorded passed, every check of it failed, its counts agreeing."""
    items = [_item(i, True, checks=[False]) for i in range(12)]
    v = verdict_of(tmp_path, _semantic(items))
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert rejected(v)["semantic"] == RULE
    detail = _detail(v, "semantic")
    assert "item 'q0' (item 1) is recorded passed true but records 1 of its 1 checks failed (exact)" in detail
    assert "and 11 more item(s) so" in detail


def test_a_consistent_item_record_still_passes(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, _semantic(_consistent()))
    assert v["verdict"] == "QUALIFIED", v["rejected"]


def test_consistent_items_with_failures_and_an_error_are_read_as_they_are(tmp_path: Path) -> None:
    """Failed items (a check failed; an error, no check) agree with their record: no mismatch (the gate then
    judges the score)."""
    items = [
        *_consistent(10),
        _item(10, False, checks=[True, False]),
        _item(11, False, checks=[], error="HTTP 500"),
    ]
    v = verdict_of(tmp_path, _semantic(items))
    assert rejected(v).get("semantic") != RULE, v["rejected"]


def test_a_reordered_item_record_still_passes(tmp_path: Path) -> None:
    """Keys in another order, items in another order: the same record."""
    items = [dict(reversed(list(i.items()))) for i in reversed(_consistent())]
    v = verdict_of(tmp_path, _semantic(items))
    assert v["verdict"] == "QUALIFIED", v["rejected"]


@pytest.mark.parametrize(
    ("item", "why"),
    [
        (_item(3, True, checks=[True, False]), "records 1 of its 2 checks failed (exact)"),
        (_item(3, True, checks=[True], error="timed out"), "records error 'timed out'"),
        (_item(3, True, checks=[], error="HTTP 500"), "records error 'HTTP 500'"),
        (_item(3, True, checks=[]), "records no check"),
        (
            _item(3, False, checks=[True]),
            "is recorded passed false but records no error and all 1 of its checks",
        ),
    ],
    ids=["a-check-failed", "error-with-checks", "error-no-check", "checks-empty", "failed-but-all-passed"],
)
def test_an_item_whose_passed_its_own_record_does_not_show_is_not_credited(
    tmp_path: Path, item: dict[str, Any], why: str
) -> None:
    items = _consistent()
    items[3] = item
    v = verdict_of(tmp_path, _semantic(items))
    assert rejected(v)["semantic"] == RULE, v["rejected"]
    detail = _detail(v, "semantic")
    assert "item 'q3' (item 4)" in detail and why in detail, detail


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda i: i.pop("checks"), "records no list of checks"),  # dropped
        (lambda i: i.__setitem__("outcomes", i.pop("checks")), "records no list of checks"),  # renamed
        (lambda i: i.__setitem__("checks", {"exact": True}), "records no list of checks"),  # mistyped
        (lambda i: i.__setitem__("checks", [True]), "check 1 records no boolean passed"),  # not an object
        (lambda i: i["checks"][0].__setitem__("passed", "true"), "check 1 records no boolean passed"),
        (lambda i: i["checks"][0].pop("passed"), "check 1 records no boolean passed"),
        (lambda i: i.pop("error"), "records no error (null or a text)"),  # dropped: not read as none
        (lambda i: i.__setitem__("error", 0), "records no error (null or a text)"),
    ],
    ids=[
        "checks-dropped",
        "checks-renamed",
        "checks-mistyped",
        "check-not-object",
        "check-passed-text",
        "check-passed-dropped",
        "error-dropped",
        "error-mistyped",
    ],
)
def test_an_item_whose_scoring_cannot_be_read_is_not_credited(tmp_path: Path, change: Any, why: str) -> None:
    items = _consistent()
    change(items[5])
    v = verdict_of(tmp_path, _semantic(items))
    assert rejected(v)["semantic"] == RULE, v["rejected"]
    detail = _detail(v, "semantic")
    assert "item 'q5' (item 6)" in detail and why in detail and "cannot be read back" in detail, detail


def test_the_counts_are_named_before_the_items(tmp_path: Path) -> None:
    """A count its items contradict is named first (the message a reader of the counts expects)."""
    items = [_item(i, True, checks=[False]) for i in range(12)]
    es = _semantic(items)
    entry(es, "semantic")["payload"]["counts"]["passed"] = 11
    v = verdict_of(tmp_path, es)
    assert "counts.passed 11, its semantic-items.jsonl (12 items, 0 failed) shows 12" in _detail(
        v, "semantic"
    )


# --- the benchmark's c1 parity, re-derived from its requests --------------------------------------------


def _request(level: int, rep: int, index: int, *, out: str = "same", tokens: int = 8) -> dict[str, Any]:
    return {
        "prompt_id": f"p{index}",
        "level": level,
        "repetition": rep,
        "index": index,
        "error": None,
        "fault": False,
        "unanswered": False,
        "http_status": 200,
        "output_digest": f"blake3:{out}-{index}",
        "token_ids_digest": None,
        "output_tokens": tokens,
        "tokens_from": "usage",
        "timed_out": False,
        "refusal": None,
    }


def _benchmark(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    es = qualified_entries()
    text = "\n".join(json.dumps(r) for r in requests)
    entry(es, "benchmark")["artifacts"] = [{"name": "benchmark-requests.jsonl", "text": text}]
    return es


def _all_requests(change: Any = None) -> list[dict[str, Any]]:
    """The fixture's run: 96 prompts at c1, c4, c32, twice each (576 requests, as its counts say)."""
    rs = [_request(lv, rep, i) for lv in (1, 4, 32) for rep in (0, 1) for i in range(96)]
    if change is not None:
        for r in rs:
            change(r)
    return rs


def test_a_parity_record_its_requests_show_still_passes(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, _benchmark(_all_requests()))
    assert v["verdict"] == "QUALIFIED", v["rejected"]


def test_a_c1_parity_its_requests_do_not_show_is_not_credited(tmp_path: Path) -> None:
    """The record says 96 of 96 c1 outputs matched; the stored outputs of three prompts differ."""

    def differ(r: dict[str, Any]) -> None:
        if r["level"] == 1 and r["repetition"] == 1 and r["index"] < 3:
            r["output_digest"] = f"blake3:other-{r['index']}"

    v = verdict_of(tmp_path, _benchmark(_all_requests(differ)))
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert rejected(v)["benchmark"] == RULE
    detail = _detail(v, "benchmark")
    assert "bounds.parity.matched 96, its benchmark-requests.jsonl shows 93" in detail
    # the log's canonical JSON writes 1.0 as 1
    assert "bounds.parity.fraction 1, its benchmark-requests.jsonl shows 0.96875" in detail


def test_the_same_text_as_other_tokens_is_no_parity(tmp_path: Path) -> None:
    def recount(r: dict[str, Any]) -> None:
        if r["level"] == 1 and r["repetition"] == 1 and r["index"] == 7:
            r["output_tokens"] = 9

    v = verdict_of(tmp_path, _benchmark(_all_requests(recount)))
    assert rejected(v)["benchmark"] == RULE
    assert "bounds.parity.matched 96, its benchmark-requests.jsonl shows 95" in _detail(v, "benchmark")


def test_outputs_that_differ_at_another_level_are_no_c1_parity_problem(tmp_path: Path) -> None:
    def differ(r: dict[str, Any]) -> None:
        if r["level"] == 4 and r["repetition"] == 1:
            r["output_digest"] = "blake3:c4"

    v = verdict_of(tmp_path, _benchmark(_all_requests(differ)))
    assert v["verdict"] == "QUALIFIED", v["rejected"]


def test_a_parity_record_dropped_from_a_run_that_compared_c1_is_not_credited(tmp_path: Path) -> None:
    es = _benchmark(_all_requests())
    del entry(es, "benchmark")["payload"]["bounds"]["parity"]
    v = verdict_of(tmp_path, es)
    assert rejected(v)["benchmark"] == RULE, v["rejected"]
    assert "records no parity record (bounds.parity)" in _detail(v, "benchmark")


def _read_back(tmp_path: Path, payload: dict[str, Any], requests: list[dict[str, Any]]) -> str | None:
    """What the policy's read-back of a benchmark result storing ``requests`` says (None: it agrees)."""
    store = FilesystemStore(tmp_path / "store")
    store.init()
    f = tmp_path / "benchmark-requests.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in requests))
    artifacts = [
        {"name": "benchmark-requests.jsonl", "digest": str(store.put_file(f).digest), "stored": True}
    ]
    e = SimpleNamespace(payload=payload, artifacts=artifacts)
    return _harness_artifact_problem(e, store)  # type: ignore[arg-type]


def _fixture_benchmark() -> dict[str, Any]:
    return copy.deepcopy(entry(qualified_entries(), "benchmark")["payload"])


def test_the_fixture_run_agrees_with_its_requests(tmp_path: Path) -> None:
    assert _read_back(tmp_path, _fixture_benchmark(), _all_requests()) is None


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [
        ("by", "token_ids", "'text'"),  # claims token parity, compared text
        ("compared", 95, "96"),
        ("compared", "96", "96"),  # mistyped
        ("matched", True, "96"),  # mistyped: a boolean is no count
        ("fraction", 0.99, "1.0"),
        ("level", 4, "1"),
        ("prompts", 95, "96"),
        ("prompts_mismatched", ["p3"], "[]"),
        ("token_counts_differ", ["p3"], "[]"),
    ],
)
def test_a_parity_field_its_requests_do_not_show_is_a_mismatch(
    tmp_path: Path, key: str, value: Any, shown: str
) -> None:
    payload = _fixture_benchmark()
    payload["bounds"]["parity"][key] = value
    problem = _read_back(tmp_path, payload, _all_requests())
    assert problem == f"bounds.parity.{key} {value!r}, its benchmark-requests.jsonl shows {shown}"


def test_a_parity_record_where_its_requests_compared_nothing_is_a_mismatch(tmp_path: Path) -> None:
    """Every c1 request of the second repetition failed: nothing compared, though the record says 96."""

    def fail(r: dict[str, Any]) -> None:
        if r["level"] == 1 and r["repetition"] == 1:
            r["error"] = "HTTP 500"

    problem = _read_back(tmp_path, _fixture_benchmark(), _all_requests(fail))
    assert problem is not None and "bounds.parity records c1 outputs compared (96), but" in problem


def test_a_parity_record_by_token_ids_its_requests_show_agrees(tmp_path: Path) -> None:
    payload = _fixture_benchmark()
    payload["bounds"]["parity"]["by"] = "token_ids"

    def ids(r: dict[str, Any]) -> None:
        r["token_ids_digest"] = f"blake3:ids-{r['index']}"

    assert _read_back(tmp_path, payload, _all_requests(ids)) is None


def test_no_parity_record_where_the_run_did_not_aggregate_is_no_problem(tmp_path: Path) -> None:
    payload = _fixture_benchmark()
    payload["bounds"]["parity"] = None
    payload["bounds"]["aggregate"] = False
    assert _read_back(tmp_path, payload, _all_requests()) is None
    payload["bounds"]["aggregate"] = True
    payload["bounds"]["concurrency"] = [4, 32]  # no c1 level approved: no c1 parity to record
    assert _read_back(tmp_path, payload, _all_requests()) is None


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda r: r.pop("prompt_id"), "records no prompt_id"),
        (lambda r: r.__setitem__("repetition", "0"), "records no whole-number repetition and index"),
        (lambda r: r.pop("index"), "records no whole-number repetition and index"),
    ],
    ids=["prompt-dropped", "repetition-mistyped", "index-dropped"],
)
def test_a_c1_request_whose_place_cannot_be_read_is_not_credited(
    tmp_path: Path, change: Any, why: str
) -> None:
    rs = _all_requests()
    change(rs[4])  # a c1 request
    v = verdict_of(tmp_path, _benchmark(rs))
    assert rejected(v)["benchmark"] == RULE, v["rejected"]
    assert f"request 5 {why}" in _detail(v, "benchmark")


def test_parity_of_is_the_harness_repeatability() -> None:
    """One reading: the policy's ``parity_of`` of the stored records is the collector's ``repeatability``
    of its live ones (less ``asked``, the spec's), whatever they compare by."""
    from collectors.benchmark import RequestRecord, repeatability

    def rec(level: int, rep: int, index: int, **kw: Any) -> RequestRecord:
        base = {"output_digest": f"d{index}", "output_tokens": 4, "tokens_from": "usage"}
        return RequestRecord(f"p{index % 5}", level, rep, index, "t", 0.0, **{**base, **kw})

    cases = [
        [rec(1, r, i) for r in (0, 1, 2) for i in range(5)],
        [rec(1, r, i, output_digest=f"d{i}-{r}" if i == 2 else f"d{i}") for r in (1, 0) for i in range(5)],
        [rec(1, r, i, output_tokens=4 + r * (i == 1)) for r in (0, 1) for i in range(5)],
        [rec(1, r, i, token_ids_digest=f"t{i}") for r in (0, 1) for i in range(5)],
        [rec(1, r, i, token_ids_digest=f"t{i}" if r else None) for r in (0, 1) for i in range(5)],
        [rec(1, r, i, error="boom" if (r, i) == (1, 3) else None) for r in (0, 1) for i in range(5)],
        [rec(4, r, i) for r in (0, 1) for i in range(5)],  # nothing at c1
        [rec(1, 0, i) for i in range(10)],  # every prompt twice in one repetition (index order)
    ]
    for records in cases:
        harness = repeatability(records, 1)
        derived = parity_of([r.to_json() for r in records], 1)
        assert (derived is None) == (harness is None)
        if harness is not None:
            assert derived == {k: v for k, v in harness.items() if k != "asked"}


def test_a_failed_runs_parity_record_is_not_held(tmp_path: Path) -> None:
    """A parity record credits a passed run alone (its c1_parity figure): a failed run counts against the
    engine whatever it records there."""
    payload = _fixture_benchmark()
    payload["status"] = "failed"
    payload["bounds"]["parity"]["matched"] = 95
    assert _read_back(tmp_path, payload, _all_requests()) is None
    payload["status"] = "passed"
    assert _read_back(tmp_path, payload, _all_requests()) is not None
