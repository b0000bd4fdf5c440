"""Audit 88: every count a rule subtracts from a harness run's errors is read back from its stored
per-request record, by the test the collector counted it with, and one request is excused once at most.

F1: one hung request recorded both unanswered and timed out was subtracted twice by `stopped-from-outside`
(counts.unanswered and counts.timed_out), so the malformed answer the engine gave beside it was excused too.
F2: `counts.cut` was never read back from `benchmark-requests.jsonl`: a cut the record does not show
excused the engine's malformed answer in a run stopped from outside (and `harness-lease-expired` took it
unread as well). Now `acceptance._requests_shown` counts `cut` by `ledger.answers.request_cut` (the
collector's `_cut`), a request in two excused categories one rule subtracts together is a problem of the
record, and a cut claimed with no record stored is `_request_record_missing` — each an
`e.derived.artifact_problem`, never excused (harness-artifact-mismatch)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from collectors import benchmark, semantic
from ledger.answers import REQUEST_CUT, request_cut
from ledger.policy.acceptance import _requests_shown
from tests.policy.test_fail_closed import (
    counted_against,
    entry,
    gates,
    qualified_entries,
    rejected,
    verdict_of,
)
from tests.policy.test_fix63_harness_lease_expired import _benchmark_cut
from tests.policy.test_fix77_stopped_from_outside import (
    _ANSWERED,
    _UNANSWERED,
    BENCHMARK_EXITED_AT,
    _cut_benchmark,
    _stopped,
)
from tests.policy.test_fix116_held_benchmark_timeouts import _HUNG, _benchmark, _held_launch

MISMATCH = "harness-artifact-mismatch"
STOPPED = "stopped-from-outside"
LEASE = "harness-lease-expired"
CONFIG = "harness-campaign-config"
# an answer the engine gave that is no completion (HTTP 200, a malformed body): the engine's error
MALFORMED = {**_ANSWERED, "error": "malformed answer: KeyError: 'choices'"}
CUT = {**_ANSWERED, "level": 4, "error": f"{REQUEST_CUT} the engine was stopped", "http_status": None}


def _jsonl(records: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def _detail(v: dict[str, Any], rule: str) -> str:
    return " | ".join(r["detail"] for r in v["rejected"] if r["rule"] == rule)


# --- F1: one request, two excused categories ---------------------------------------------------------------


def _held_run(tmp_path: Path, hung: dict[str, Any]) -> dict[str, Any]:
    es = qualified_entries()
    _held_launch(es)
    _benchmark(es, [hung, {**MALFORMED, "level": 4}])
    return verdict_of(tmp_path, es)


def test_a_request_recorded_unanswered_and_timed_out_does_not_excuse_a_malformed_answer(
    tmp_path: Path,
) -> None:
    v = _held_run(tmp_path, {**_HUNG, "unanswered": True})
    assert v["verdict"] not in ("INCONCLUSIVE", "QUALIFIED"), v["gates"]
    assert rejected(v)["benchmark"] == MISMATCH
    assert "request 82 is recorded unanswered and timed_out" in _detail(v, MISMATCH)


def test_the_same_hung_request_recorded_timed_out_alone_still_counts_the_malformed_answer(
    tmp_path: Path,
) -> None:
    """The baseline: one hung request excused once (held engine), the malformed answer counts."""
    v = _held_run(tmp_path, _HUNG)
    assert v["verdict"] == "NOT QUALIFIED — PERFORMANCE", v["gates"]
    assert rejected(v)["benchmark"] == STOPPED
    assert gates(v)["benchmark"] == "failed"


def test_the_hung_request_alone_recorded_timed_out_is_excused(tmp_path: Path) -> None:
    """Neighbour: nothing but the hold's timeout — excused, INCONCLUSIVE (the overlap check takes nothing
    honest away)."""
    es = qualified_entries()
    _held_launch(es)
    _benchmark(es, [_HUNG])
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert rejected(v)["benchmark"] == STOPPED


# --- F2: counts.cut read back ------------------------------------------------------------------------------


def _stopped_run(tmp_path: Path, records: list[dict[str, Any]], **counts: Any) -> dict[str, Any]:
    es = qualified_entries()
    _stopped(es, exited_at=BENCHMARK_EXITED_AT)
    _cut_benchmark(es, **counts)
    if records:
        entry(es, "benchmark")["artifacts"] = [{"name": "benchmark-requests.jsonl", "text": _jsonl(records)}]
    else:
        entry(es, "benchmark").pop("artifacts")
    return verdict_of(tmp_path, es)


def test_a_claimed_cut_its_record_does_not_show_excuses_nothing(tmp_path: Path) -> None:
    records = [_ANSWERED] * 81 + [MALFORMED, _UNANSWERED]
    v = _stopped_run(tmp_path, records, issued=83, errors=2, cut=1, unanswered=1)
    assert v["verdict"] not in ("INCONCLUSIVE", "QUALIFIED"), v["gates"]
    assert rejected(v)["benchmark"] == MISMATCH
    assert "counts.cut 1, its benchmark-requests.jsonl (83 requests) shows 0" in _detail(v, MISMATCH)


def test_a_claimed_cut_with_the_record_showing_none_counts_the_malformed_answer(tmp_path: Path) -> None:
    """The baseline of F2: counts.cut 0, as the record shows: the malformed answer is the engine's."""
    records = [_ANSWERED] * 81 + [MALFORMED, _UNANSWERED]
    v = _stopped_run(tmp_path, records, issued=83, errors=2, cut=0, unanswered=1)
    assert v["verdict"] == "NOT QUALIFIED — PERFORMANCE", v["gates"]
    assert counted_against(v)["benchmark"] == STOPPED


@pytest.mark.parametrize("order", ["cut-first", "cut-last"])
def test_a_cut_the_record_shows_is_excused_whatever_the_order(tmp_path: Path, order: str) -> None:
    """Neighbour: the stop cut one request in flight (the harness's "stopped:" error) and reset another:
    both excused (errors 2 − cut 1 − unanswered 1), in whichever order the record lists them."""
    tail = [CUT, {**_UNANSWERED, "level": 4}] if order == "cut-first" else [{**_UNANSWERED, "level": 4}, CUT]
    v = _stopped_run(tmp_path, [_ANSWERED] * 81 + tail, issued=83, errors=2, cut=1, unanswered=1)
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert rejected(v)["benchmark"] == STOPPED


def test_a_cut_claimed_with_no_record_stored_is_a_problem_of_the_record(tmp_path: Path) -> None:
    v = _stopped_run(tmp_path, [], issued=83, errors=2, cut=1, unanswered=1)
    assert v["verdict"] not in ("INCONCLUSIVE", "QUALIFIED"), v["gates"]
    assert rejected(v)["benchmark"] == MISMATCH
    detail = _detail(v, MISMATCH)
    assert "counts.cut 1" in detail and "it stores no benchmark-requests.jsonl" in detail


def test_a_mistyped_cut_count_is_refused_at_ingest_or_never_excuses() -> None:
    """counts.cut "1" (a string) is no count the record shows: ``_differing_counts`` names it (and ingest
    types harness counts: it does not reach a verdict)."""
    from ledger.policy.acceptance import _differing_counts

    shown, _ = _requests_shown([CUT], {})
    assert shown["cut"] == 1
    assert _differing_counts({"cut": "1"}, shown, "record") == ["counts.cut '1', its record shows 1"]
    assert _differing_counts({"cut": True}, shown, "record") == ["counts.cut True, its record shows 1"]
    assert _differing_counts({}, shown, "record") == []  # dropped: not compared, the rule asks for it


def test_a_run_stopped_from_outside_that_records_no_cut_count_is_not_excused(tmp_path: Path) -> None:
    """Neighbour, field dropped: counts.cut left out — the rule cannot tell the engine's errors from the
    cut, so the run still counts against the engine."""
    es = qualified_entries()
    _stopped(es, exited_at=BENCHMARK_EXITED_AT)
    _cut_benchmark(es)
    entry(es, "benchmark")["payload"]["counts"].pop("cut")
    v = verdict_of(tmp_path, es)
    assert v["verdict"] not in ("INCONCLUSIVE", "QUALIFIED"), v["gates"]


# --- the one test, shared ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "cut"),
    [
        (f"{REQUEST_CUT} lease expired", True),
        (REQUEST_CUT, True),
        ("Stopped: lease expired", False),  # another spelling: the engine's error
        (" stopped: lease expired", False),  # not at the start
        ("stopped lease expired", False),  # the colon dropped
        (None, False),  # completed
        (1, False),  # mistyped
    ],
)
def test_the_collector_and_the_policy_count_a_cut_by_one_test(error: Any, cut: bool) -> None:
    assert benchmark.CUT is REQUEST_CUT and semantic.CUT is REQUEST_CUT
    assert request_cut(error) is cut
    if error is None or isinstance(error, str):
        rec = benchmark.RequestRecord("p0", 1, 0, 0, "2026-09-10T10:00:00Z", 0.0, error=error)
        assert benchmark._cut(rec) is cut
        shown, _ = _requests_shown([{**_ANSWERED, "error": error}], {})
        assert shown["cut"] == int(cut)


# --- no request excused twice ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("record", "named"),
    [
        ({**_HUNG, "unanswered": True}, "unanswered and timed_out"),
        ({**_UNANSWERED, "error": f"{REQUEST_CUT} stop"}, "cut and unanswered"),
        # a timed_out flag beside the harness's cut error: the collector derives the flag from the error
        ({**_HUNG, "error": f"{REQUEST_CUT} stop", "fault": False}, "cut and timed_out"),
        ({**_HUNG, "error": f"{REQUEST_CUT} stop", "fault": False, "timed_out": False}, ""),  # cut alone
        ({**CUT, "refusal": "access", "http_status": 401}, "cut and refused"),
    ],
)
def test_a_request_in_two_excused_categories_is_a_problem(record: dict[str, Any], named: str) -> None:
    _, problems = _requests_shown([_ANSWERED, record], {"concurrency": [1, 4, 32]})
    twice = [p for p in problems if "excused once at most" in p]
    if not named:
        assert twice == [], problems
    else:
        assert twice and f"request 2 is recorded {named}" in twice[0], problems


def test_two_levels_with_a_request_excused_twice_each_are_named_once() -> None:
    both = {**_HUNG, "unanswered": True}
    records = [_ANSWERED, both, {**both, "level": 32}]
    _, problems = _requests_shown(records, {"concurrency": [1, 4, 32]})
    [twice] = [p for p in problems if "excused once at most" in p]
    assert twice.startswith("request 2 is recorded unanswered and timed_out (and 1 more request(s) so)")
    # reordered: the same problem, named by the first such request
    _, problems = _requests_shown([both, _ANSWERED, {**both, "level": 32}], {"concurrency": [1, 4, 32]})
    assert any(p.startswith("request 1 is recorded unanswered and timed_out (and 1 more") for p in problems)


def test_a_context_refusal_streamed_as_a_cut_answer_is_refused_and_unanswered_honestly() -> None:
    """llama-cpp-python's streamed context overflow: a 2xx whose stream was cut (unanswered) that the
    harness sized and recorded refused for the context. No rule subtracts both: no problem of overlap."""
    streamed = {**_UNANSWERED, "http_status": 200, "error": "ClientPayloadError: cut", "refusal": "context"}
    _, problems = _requests_shown([_ANSWERED, streamed], {})
    assert not [p for p in problems if "excused once at most" in p]


def test_a_config_run_whose_refused_request_is_recorded_cut_too_is_not_excused(tmp_path: Path) -> None:
    es = qualified_entries()
    p = entry(es, "benchmark")["payload"]
    both = {**CUT, "level": 1, "refusal": "access", "http_status": 401, "prompt_id": "p0"}
    p["status"] = "failed"
    p["bounds"].update(outcome="config", aggregate=False, valid=False)
    p["figures"] = {}
    p["counts"] = {k: v for k, v in p["counts"].items() if not k.startswith("completed@c")}
    p["counts"].update(issued=1, completed=0, errors=1, cut=1, refused=1, unanswered=0)
    p["reason"] = "no aggregate result: the engine refused c1 repetition 0 request 0: HTTP 401"
    entry(es, "benchmark")["artifacts"] = [{"name": "benchmark-requests.jsonl", "text": _jsonl([both])}]
    v = verdict_of(tmp_path, es)
    assert rejected(v)["benchmark"] == MISMATCH, v["rejected"]
    assert "request 1 is recorded cut and refused" in _detail(v, MISMATCH)
    assert v["verdict"] not in ("INCONCLUSIVE", "QUALIFIED"), v["gates"]


# --- harness-lease-expired reads the cut back too ----------------------------------------------------------


def _lease_run(tmp_path: Path, records: list[dict[str, Any]], *, errors: int, cut: int) -> dict[str, Any]:
    es = qualified_entries()
    p = _benchmark_cut(es, errors=errors, cut=cut)
    p["counts"] = {k: v for k, v in p["counts"].items() if not k.startswith("completed@c")}
    p["counts"].update(issued=len(records), completed=len(records) - errors)
    entry(es, "benchmark")["artifacts"] = [{"name": "benchmark-requests.jsonl", "text": _jsonl(records)}]
    return verdict_of(tmp_path, es)


def test_a_lease_cut_its_record_shows_is_inconclusive(tmp_path: Path) -> None:
    records = [_ANSWERED] * 4 + [CUT] * 4
    v = _lease_run(tmp_path, records, errors=4, cut=4)
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert rejected(v)["benchmark"] == LEASE


def test_a_lease_cut_its_record_does_not_show_excuses_nothing(tmp_path: Path) -> None:
    records = [_ANSWERED] * 4 + [CUT] * 3 + [{**MALFORMED, "level": 4}]
    v = _lease_run(tmp_path, records, errors=4, cut=4)
    assert rejected(v)["benchmark"] == MISMATCH, v["rejected"]
    assert "counts.cut 4, its benchmark-requests.jsonl (8 requests) shows 3" in _detail(v, MISMATCH)
    assert v["verdict"] == "NOT QUALIFIED — PERFORMANCE", v["gates"]
    assert counted_against(v)["benchmark"] == MISMATCH


def test_a_lease_cut_claimed_with_no_record_is_not_excused(tmp_path: Path) -> None:
    es = qualified_entries()
    _benchmark_cut(es, errors=4, cut=4)
    entry(es, "benchmark").pop("artifacts", None)  # the claim alone, no record stored
    v = verdict_of(tmp_path, es)
    assert rejected(v)["benchmark"] == MISMATCH, v["rejected"]
    assert "it stores no benchmark-requests.jsonl" in _detail(v, MISMATCH)
    assert v["verdict"] == "NOT QUALIFIED — PERFORMANCE", v["gates"]


# --- semantic: the same reading of its request record ------------------------------------------------------


def test_a_semantic_request_recorded_cut_and_unanswered_is_a_problem_of_its_record() -> None:
    """A semantic run's semantic-requests.jsonl is read by the same function: a request it records cut and
    unanswered both is the same contradiction (its stop excuse rests on that record)."""
    item = {**_ANSWERED, "prompt_id": "q0"}
    _, problems = _requests_shown([item, {**_UNANSWERED, "error": f"{REQUEST_CUT} stop"}], {})
    assert any("request 2 is recorded cut and unanswered" in p for p in problems), problems
