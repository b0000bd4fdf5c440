"""fix128 (issue 11): a held engine's timed-out semantic items are the hold's, not failed items.

An engine suspended from outside (``suspended-from-outside``, one of ``params.held_stop_signatures``, read by
the policy from what the launch stored) answers nothing in flight. Where the semantic harness's hang check
still gets an answer (vLLM's API server answering ``/health`` while its engine core is frozen), the item in
flight times out as a plain error — a failed item — and the run goes on until the collector's kill resets the
next request (fault kind "unanswered"). Rule ``stopped-from-outside`` excused the run, but its failed items
still decided SEMANTIC QUALITY: the semantic result recorded no count of timed-out items that could be read
back. It now records ``counts.timed_out`` (of the failed items, those whose request timed out:
``collectors/semantic.py``), the policy reads it back by joining each item of ``semantic-items.jsonl`` to the
request of ``semantic-requests.jsonl`` it was asked by (``acceptance._timed_out_items``), and the rule
subtracts it from the failed items where ``e.derived.stop_cut_held`` (derived from the launch, never the
result's claim). A launch not held keeps its timeouts (a hang); a wrong answer always counts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ledger.entries import validate_payload
from ledger.errors import SchemaError
from ledger.policy.acceptance import _timed_out_items
from tests.policy.test_fail_closed import entry, gates, qualified_entries, rejected, verdict_of
from tests.policy.test_fix77_stopped_from_outside import _stopped
from tests.policy.test_fix116_held_benchmark_timeouts import _HUNG, _TIMED_OUT, _UNANSWERED, _held_launch
from tests.policy.test_held_stop_timeouts import _derived

RULE = "stopped-from-outside"
RUNTIME = "NOT QUALIFIED — RUNTIME RELIABILITY"
SEMANTIC = "NOT QUALIFIED — SEMANTIC QUALITY"
# the semantic run's fault seen 0.1 s after its launch's end (an outside stop's tolerance is 0.5 s)
SEMANTIC_EXITED_AT = "2026-09-10T10:09:59.800000Z"

_OK = {
    "level": 1,
    "repetition": 0,
    "error": None,
    "fault": False,
    "http_status": 200,
    "unanswered": False,
    "timed_out": False,
    "refusal": None,
}
# an item answered, but wrongly (a failed item the engine answered: never the hold's)
_WRONG = {**_OK, "wrong": True}
# the held run: three items answered, one timed out in the hold (a plain error: the hang check got an
# answer), then the collector's kill reset the next request — the run's fault, no item
HELD_RUN = [_TIMED_OUT, _UNANSWERED]


def _jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def _semantic(
    es: list[dict[str, Any]],
    records: list[dict[str, Any]],
    fault_kind: str = "unanswered",
    *,
    drop: tuple[str, ...] = (),
    artifacts: tuple[str, ...] = ("items", "failures", "requests"),
    requests: list[dict[str, Any]] | None = None,
    **counts: Any,
) -> None:
    """A semantic run: three items answered, then ``records`` (a faulted one last stops the run, never an
    item), stored as the harness stores it (``artifacts``; ``requests`` replaces the stored per-request
    record), its counts as the harness counts them (``counts`` override them, ``drop`` leaves some out)."""
    sent = [{**_OK, "prompt_id": f"s{i}"} for i in range(3)] + [
        {**r, "prompt_id": f"s{3 + i}", "level": 1} for i, r in enumerate(records)
    ]
    items = [
        {
            "id": r["prompt_id"],
            "passed": r["error"] is None and not r.get("wrong"),
            "error": r["error"],
            # scored as the harness scores it: an item with an error on no check (fix 154)
            "checks": [] if r["error"] else [{"type": "exact", "passed": not r.get("wrong"), "reason": None}],
        }
        for r in sent
        if not r["fault"]
    ]
    failed = [i for i in items if not i["passed"]]
    timed = sum(1 for r in sent if not r["fault"] and r.get("timed_out") is True)
    p = entry(es, "semantic")["payload"]
    p["status"] = "failed"
    p["reason"] = "no aggregate result: engine fault"
    p["bounds"].update(outcome="fault", aggregate=False, fault_kind=fault_kind)
    p["bounds"]["fault_at"] = "2026-09-10T10:09:59.9Z"
    p["figures"] = {"score": None}
    p["counts"].update(
        asked=len(items),
        passed=len(items) - len(failed),
        failed=len(failed),
        errors=sum(1 for i in items if i["error"]),
    )
    if timed:
        p["counts"]["timed_out"] = timed
    p["counts"].update(counts)
    for k in drop:
        p["counts"].pop(k)
    stored = {
        "items": ("semantic-items.jsonl", items),
        "failures": ("semantic-failures.jsonl", failed),
        "requests": ("semantic-requests.jsonl", [{k: v for k, v in r.items() if k != "wrong"} for r in sent]),
    }
    if requests is not None:
        stored["requests"] = ("semantic-requests.jsonl", requests)
    entry(es, "semantic")["artifacts"] = [
        {"name": stored[a][0], "text": _jsonl(stored[a][1])} for a in artifacts
    ]
    for name in ("semantic-review", "benchmark", "benchmark-review", "benchmark-acceptance"):
        es.remove(entry(es, name))


def _sigterm(es: list[dict[str, Any]]) -> None:
    _stopped(es, exited_at=SEMANTIC_EXITED_AT)


def _sigkill(es: list[dict[str, Any]]) -> None:
    _stopped(es, signal=9, signature="killed-sigkill", exited_at=SEMANTIC_EXITED_AT)


def _not_excused(v: dict[str, Any]) -> None:
    assert v["verdict"] not in ("INCONCLUSIVE", "QUALIFIED"), v["gates"]
    assert rejected(v).get("semantic") != RULE, v["gates"]


# --- the failure: a held engine's timed-out item counted against SEMANTIC QUALITY ---------------------------


def test_held_engines_timed_out_semantic_items_counted_against_quality(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    es = qualified_entries()
    _held_launch(es)
    _semantic(es, HELD_RUN)
    p = entry(es, "semantic")["payload"]
    assert p["counts"]["failed"] == 1 and p["counts"]["timed_out"] == 1
    v, derived = _derived(tmp_path, es, "semantic", monkeypatch)
    assert derived["stop_cut"] is not None and derived["stop_cut_held"] is True
    assert rejected(v)["semantic"] == RULE
    assert gates(v)["semantic"] != "failed", v["gates"]
    assert gates(v)["runtime-stability"] == "passed", v["gates"]
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]


def test_held_engines_timed_out_items_before_a_timeout_fault_are_the_holds_too(tmp_path: Path) -> None:
    """Two items timed out (plain errors), then the third found hung (the run's fault, kind "timeout")."""
    es = qualified_entries()
    _held_launch(es)
    _semantic(es, [_TIMED_OUT, _TIMED_OUT, _HUNG], "timeout")
    assert entry(es, "semantic")["payload"]["counts"]["timed_out"] == 2
    v = verdict_of(tmp_path, es)
    assert rejected(v)["semantic"] == RULE
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]


def test_a_wrong_answer_beside_the_holds_timeouts_still_counts(tmp_path: Path) -> None:
    """Failed items 2, timed out 1: the wrong answer decides the score (semantic_min_score 1.0)."""
    es = qualified_entries()
    _held_launch(es)
    _semantic(es, [_WRONG, *HELD_RUN])
    v = verdict_of(tmp_path, es)
    assert rejected(v)["semantic"] == RULE
    assert gates(v)["semantic"] == "failed", v["gates"]
    assert v["verdict"] == SEMANTIC, v["gates"]


# --- not held: the timeouts are the engine's (a hang) -------------------------------------------------------


@pytest.mark.parametrize(
    ("stop", "cut", "verdict"),
    [(_sigterm, True, SEMANTIC), (_sigkill, False, RUNTIME)],
    ids=["outside-sigterm", "sigkill"],
)
def test_timed_out_items_of_a_launch_not_held_still_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop: Any, cut: bool, verdict: str
) -> None:
    es = qualified_entries()
    stop(es)
    _semantic(es, HELD_RUN)
    v, derived = _derived(tmp_path, es, "semantic", monkeypatch)
    assert derived["stop_cut_held"] is False
    assert (rejected(v).get("semantic") == RULE) is cut, v["gates"]
    assert v["verdict"] == verdict, v["gates"]


# --- the count: dropped, renamed, mistyped ----------------------------------------------------------------


@pytest.mark.parametrize("rename", [None, "timedout", "timed_out_items"])
def test_a_held_run_without_a_timed_out_count_has_none_less(tmp_path: Path, rename: str | None) -> None:
    """An older harness records no counts.timed_out (or another name): nothing is subtracted."""
    es = qualified_entries()
    _held_launch(es)
    _semantic(es, HELD_RUN, drop=("timed_out",), **({rename: 1} if rename else {}))
    v = verdict_of(tmp_path, es)
    assert rejected(v)["semantic"] == RULE
    assert gates(v)["semantic"] == "failed", v["gates"]
    assert v["verdict"] == SEMANTIC, v["gates"]


@pytest.mark.parametrize("count", ["1", 1.5, None, True, [1], -1])
def test_a_mistyped_semantic_timed_out_count_is_refused_at_ingest(count: Any) -> None:
    es = qualified_entries()
    _semantic(es, HELD_RUN, timed_out=count)
    with pytest.raises(SchemaError, match=r"counts\.timed_out"):
        validate_payload("gate.result", 1, entry(es, "semantic")["payload"])


# --- the record read back: a count it contradicts excuses nothing -------------------------------------------


@pytest.mark.parametrize("count", [2, 0])
def test_a_semantic_timed_out_count_its_record_does_not_show_excuses_nothing(
    tmp_path: Path, count: int
) -> None:
    es = qualified_entries()
    _held_launch(es)
    _semantic(es, HELD_RUN, timed_out=count)
    _not_excused(verdict_of(tmp_path, es))


def test_the_request_that_stopped_the_run_is_no_timed_out_item(tmp_path: Path) -> None:
    """The hung request (the run's fault) timed out, but is no item: a count of 1 claims a failed item."""
    es = qualified_entries()
    _held_launch(es)
    _semantic(es, [_WRONG, _HUNG], "timeout", timed_out=1)
    _not_excused(verdict_of(tmp_path, es))


@pytest.mark.parametrize(
    "field",
    [{"timed_out": "true"}, {"timed_out": None}, {"timed_out": False}, {"timed_out": 1}, {"timedout": True}],
)
def test_semantic_timeouts_its_record_renames_or_mistypes_excuse_nothing(
    tmp_path: Path, field: dict[str, Any]
) -> None:
    es = qualified_entries()
    _held_launch(es)
    shown = {k: v for k, v in _TIMED_OUT.items() if k != "timed_out"} | field
    _semantic(es, [shown, _UNANSWERED], timed_out=1)
    _not_excused(verdict_of(tmp_path, es))


def test_a_timed_out_count_with_no_items_record_to_join_excuses_nothing(tmp_path: Path) -> None:
    es = qualified_entries()
    _held_launch(es)
    _semantic(es, HELD_RUN, artifacts=("failures", "requests"))
    _not_excused(verdict_of(tmp_path, es))


def test_a_timed_out_count_with_no_request_record_excuses_nothing(tmp_path: Path) -> None:
    """counts.timed_out on the payload alone: _request_record_missing, as fix 122 did for the benchmark."""
    es = qualified_entries()
    _held_launch(es)
    _semantic(es, HELD_RUN, artifacts=("items", "failures"))
    _not_excused(verdict_of(tmp_path, es))


def test_requests_reordered_against_their_items_excuse_nothing(tmp_path: Path) -> None:
    """The reset request stored before the timed-out one: the items' requests are not theirs."""
    es = qualified_entries()
    _held_launch(es)
    sent = [{**_OK, "prompt_id": f"s{i}"} for i in range(3)] + [
        {**_UNANSWERED, "prompt_id": "s4", "level": 1},
        {**_TIMED_OUT, "prompt_id": "s3", "level": 1},
    ]
    _semantic(es, HELD_RUN, requests=sent)
    _not_excused(verdict_of(tmp_path, es))


def test_a_timed_out_request_of_a_passed_item_is_no_failed_item() -> None:
    """The join counts only failed items; a scored request recorded as the run's fault breaks it."""
    scored = [("s0", None, True), ("s1", "timeout after 1 s", False)]
    ok = {**_OK, "prompt_id": "s0"}
    timed = {**_TIMED_OUT, "prompt_id": "s1", "error": "timeout after 1 s"}
    out: dict[str, Any] = {}
    assert list(_timed_out_items([ok, timed], scored, out)) == [ok, timed]
    assert out == {"timed_out": 1, "problems": []}
    out = {}
    list(_timed_out_items([ok, timed], [("s0", None, True), ("s1", "timeout after 1 s", True)], out))
    assert out == {"timed_out": 0, "problems": []}
    out = {}
    list(_timed_out_items([ok, {**timed, "fault": True}], scored, out))
    assert out["timed_out"] == 0 and "fault True" in out["problems"][0]
    out = {}
    list(_timed_out_items([ok], scored, out))
    assert out["timed_out"] == 0 and "1 request(s) for the 2 item(s)" in out["problems"][0]


# --- the result's own claims are not read ------------------------------------------------------------------


@pytest.mark.parametrize("claim", [True, "true", 1])
def test_semantic_stop_cut_held_claimed_by_the_result_is_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, claim: Any
) -> None:
    es = qualified_entries()
    _sigterm(es)
    _semantic(es, HELD_RUN)
    entry(es, "semantic")["payload"]["bounds"]["stop_cut_held"] = claim
    entry(es, "launch")["payload"]["details"]["stop_cut_held"] = claim
    v, derived = _derived(tmp_path, es, "semantic", monkeypatch)
    assert derived["stop_cut_held"] is False
    assert gates(v)["semantic"] == "failed", v["gates"]
    assert v["verdict"] == SEMANTIC, v["gates"]
