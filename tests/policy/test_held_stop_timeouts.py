"""fix119 (issue 11): a run whose engine was held from outside keeps no timeouts of the hold, whatever fault
kind it ended with.

An engine suspended from outside (SIGSTOP, a cgroup freezer — ``suspended-from-outside``, one of
``params.held_stop_signatures``, read by the policy from what the launch stored) answers nothing in flight:
its requests time out. Where the hang check still got an answer (vLLM's API server answering ``/health``
while its engine core is frozen) those timeouts are plain request errors, and the run goes on until the
collector kills the held engine: the next request's connection is reset, so the run's fault kind is
"unanswered", not "timeout". Rule ``stopped-from-outside`` subtracted ``counts.timed_out`` only for fault kind
"timeout", so the hold's timeouts counted against PERFORMANCE. It now reads ``e.derived.stop_cut_held``
(``acceptance._mark_stop_cuts``: the stop cut's launch was held, derived from the log, never from the
result's claim). A launch not held (an outside SIGTERM, a SIGKILL) keeps its timeouts: a hang.

A semantic run that records no count of timed-out items (an older harness) keeps a held run's timed-out
failed item against SEMANTIC QUALITY (nothing to subtract: fail closed); fix 128's count, read back, is
tests/policy/test_held_semantic_timeouts.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ledger.entries import validate_payload
from ledger.errors import SchemaError
from ledger.policy.snapshot import Evidence
from tests.policy.test_fail_closed import entry, gates, qualified_entries, rejected, verdict_of
from tests.policy.test_fix77_stopped_from_outside import BENCHMARK_EXITED_AT, _stopped
from tests.policy.test_fix116_held_benchmark_timeouts import (
    _ANSWERED,
    _HUNG,
    _TIMED_OUT,
    _UNANSWERED,
    _benchmark,
    _held_launch,
)

RULE = "stopped-from-outside"
RUNTIME = "NOT QUALIFIED — RUNTIME RELIABILITY"
PERFORMANCE = "NOT QUALIFIED — PERFORMANCE"
SEMANTIC = "NOT QUALIFIED — SEMANTIC QUALITY"

# the held run: two requests in flight at c4 timed out in the hold (plain errors: the hang check got an
# answer), then the collector killed the engine and the next request's connection was reset
HELD_RUN = [_TIMED_OUT, _TIMED_OUT, _UNANSWERED]


def _derived(tmp_path: Path, es: list[dict[str, Any]], name: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The verdict, and the facts the policy engine derived for entry ``name`` (the last round's)."""
    seen: dict[str, dict[str, Any]] = {}
    real = Evidence.set_derived

    def record(self: Evidence, derived: dict[str, Any]) -> None:
        seen[self.id] = derived  # later facts are set into this same dict (stop_cut, stop_cut_held)
        real(self, derived)

    monkeypatch.setattr(Evidence, "set_derived", record)
    v = verdict_of(tmp_path, es)
    ids = {n: i for i, n in v["_names"].items()}
    return v, seen[ids[name]]


def _sigterm(es: list[dict[str, Any]]) -> None:
    _stopped(es, exited_at=BENCHMARK_EXITED_AT)


def _sigkill(es: list[dict[str, Any]]) -> None:
    _stopped(es, signal=9, signature="killed-sigkill", exited_at=BENCHMARK_EXITED_AT)


# --- the failure: a held run cut "unanswered" counted the timeouts of its hold ------------------------------


def test_held_runs_timeouts_counted_against_it_when_its_fault_kind_was_unanswered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    es = qualified_entries()
    _held_launch(es)
    _benchmark(es, HELD_RUN, fault_kind="unanswered")
    p = entry(es, "benchmark")["payload"]
    assert p["counts"]["timed_out"] == 2 and p["counts"]["unanswered"] == 1 and p["counts"]["errors"] == 3
    v, derived = _derived(tmp_path, es, "benchmark", monkeypatch)
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert rejected(v)["benchmark"] == RULE
    assert gates(v)["benchmark"] == "missing", v["gates"]
    assert gates(v)["runtime-stability"] == "passed", v["gates"]
    assert derived["stop_cut"] is not None and derived["stop_cut_held"] is True


def test_held_runs_other_errors_beside_its_timeouts_still_count(tmp_path: Path) -> None:
    """The hold's timeouts are less, a 4xx the engine answered before it is not: beyond the bound of 0."""
    es = qualified_entries()
    _held_launch(es)
    bad = {**_ANSWERED, "error": "HTTP 422: bad request", "http_status": 422}
    _benchmark(es, [bad, *HELD_RUN], fault_kind="unanswered")
    v = verdict_of(tmp_path, es)
    assert rejected(v)["benchmark"] == RULE
    assert gates(v)["benchmark"] == "failed", v["gates"]
    assert v["verdict"] == PERFORMANCE, v["gates"]


# --- not held: the timeouts are the engine's (a hang) -------------------------------------------------------


@pytest.mark.parametrize(
    ("stop", "cut", "verdict"),
    [(_sigterm, True, PERFORMANCE), (_sigkill, False, RUNTIME)],
    ids=["outside-sigterm", "sigkill"],
)
def test_timeouts_of_a_launch_not_held_still_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop: Any, cut: bool, verdict: str
) -> None:
    """An outside SIGTERM cuts the run (the reset is the stop's), but the two timeouts before it are the
    engine's: beyond the error-rate bound of 0. A SIGKILL (class resource) is no stop at all: the run's
    fault is the engine's."""
    es = qualified_entries()
    stop(es)
    _benchmark(es, HELD_RUN, fault_kind="unanswered")
    v, derived = _derived(tmp_path, es, "benchmark", monkeypatch)
    assert v["verdict"] == verdict, v["gates"]
    assert (rejected(v).get("benchmark") == RULE) is cut
    assert (derived["stop_cut"] is not None) is cut
    assert derived["stop_cut_held"] is False
    if cut:
        assert gates(v)["benchmark"] == "failed", v["gates"]


def test_a_hold_the_launch_only_claims_excuses_no_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The launch claims suspended-from-outside but what it stored says only that its lease ran out: not
    held (the policy's reading of the stored failure_detail decides, never the claimed signature)."""
    es = qualified_entries()
    _held_launch(es)
    launch = entry(es, "launch")["payload"]
    launch["failure_detail"] = "lease expired: the engine did not finish within 120 s"
    launch["details"].pop("suspended_from_outside")
    _benchmark(es, HELD_RUN, fault_kind="unanswered")
    v, derived = _derived(tmp_path, es, "benchmark", monkeypatch)
    assert derived["stop_cut_held"] is False
    assert v["verdict"] not in ("INCONCLUSIVE", "QUALIFIED"), v["gates"]


# --- the result's own claims are not read ------------------------------------------------------------------


@pytest.mark.parametrize("claim", [True, "true", 1])
def test_stop_cut_held_claimed_by_the_result_is_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, claim: Any
) -> None:
    es = qualified_entries()
    _sigterm(es)
    _benchmark(es, HELD_RUN, fault_kind="unanswered")
    entry(es, "benchmark")["payload"]["bounds"]["stop_cut_held"] = claim
    entry(es, "launch")["payload"]["details"]["stop_cut_held"] = claim
    v, derived = _derived(tmp_path, es, "benchmark", monkeypatch)
    assert derived["stop_cut_held"] is False
    assert gates(v)["benchmark"] == "failed", v["gates"]
    assert v["verdict"] == PERFORMANCE, v["gates"]


# --- counts.timed_out: read back from the stored record, missing or mistyped excuses none ------------------


def test_held_run_without_a_timed_out_count_has_none_less(tmp_path: Path) -> None:
    """A harness that records no counts.timed_out: nothing beyond the unanswered request is less."""
    es = qualified_entries()
    _held_launch(es)
    _benchmark(es, HELD_RUN, fault_kind="unanswered", drop=("timed_out",))
    v = verdict_of(tmp_path, es)
    assert rejected(v)["benchmark"] == RULE
    assert gates(v)["benchmark"] == "failed", v["gates"]
    assert v["verdict"] == PERFORMANCE, v["gates"]


@pytest.mark.parametrize("count", ["2", 2.5, None, True, [2]])
def test_a_mistyped_timed_out_count_of_a_held_run_is_refused_at_ingest(count: Any) -> None:
    es = qualified_entries()
    _benchmark(es, HELD_RUN, fault_kind="unanswered", timed_out=count)
    with pytest.raises(SchemaError, match=r"counts\.timed_out"):
        validate_payload("gate.result", 1, entry(es, "benchmark")["payload"])


@pytest.mark.parametrize("count", [3, 1, 0])
def test_a_timed_out_count_its_record_does_not_show_excuses_nothing(tmp_path: Path, count: int) -> None:
    """counts.timed_out is compared with benchmark-requests.jsonl: one it contradicts is an artifact problem
    (no stop_cut at all), never a larger excuse."""
    es = qualified_entries()
    _held_launch(es)
    _benchmark(es, HELD_RUN, fault_kind="unanswered", timed_out=count)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] not in ("INCONCLUSIVE", "QUALIFIED"), v["gates"]
    assert rejected(v).get("benchmark") != RULE


@pytest.mark.parametrize(
    "field",
    [{"timed_out": "true"}, {"timed_out": None}, {"timed_out": False}, {"timed_out": 1}, {"timedout": True}],
)
def test_timeouts_its_record_renames_or_mistypes_excuse_nothing(
    tmp_path: Path, field: dict[str, Any]
) -> None:
    """The payload counts 2 timed out; the record's requests do not show them (mistyped, false, renamed)."""
    es = qualified_entries()
    _held_launch(es)
    shown = [{k: v for k, v in r.items() if k != "timed_out"} | field for r in (_TIMED_OUT, _TIMED_OUT)]
    _benchmark(es, [*shown, _UNANSWERED], fault_kind="unanswered", timed_out=2)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] not in ("INCONCLUSIVE", "QUALIFIED"), v["gates"]
    assert rejected(v).get("benchmark") != RULE


def test_the_requests_reordered_change_nothing(tmp_path: Path) -> None:
    """The unanswered request first, the timeouts after (as the harness may store them): the same counts."""
    es = qualified_entries()
    _held_launch(es)
    _benchmark(es, [_UNANSWERED, _TIMED_OUT, _TIMED_OUT], fault_kind="unanswered")
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert rejected(v)["benchmark"] == RULE


# --- fault kind "timeout" (fix 116): unchanged ------------------------------------------------------------


def test_held_run_whose_fault_was_a_timeout_is_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    es = qualified_entries()
    _held_launch(es)
    _benchmark(es, [_HUNG, _TIMED_OUT])
    v, derived = _derived(tmp_path, es, "benchmark", monkeypatch)
    assert derived["stop_cut_held"] is True
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert rejected(v)["benchmark"] == RULE


def test_a_timeout_fault_of_a_launch_not_held_is_still_a_hang(tmp_path: Path) -> None:
    es = qualified_entries()
    _sigterm(es)
    _benchmark(es, [_HUNG, _TIMED_OUT])
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == RUNTIME, v["gates"]
    assert rejected(v).get("benchmark") != RULE


def test_no_stop_cut_no_stop_cut_held(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The qualified baseline: no cut, so stop_cut_held is False (never None, never claimed)."""
    v, derived = _derived(tmp_path, qualified_entries(), "benchmark", monkeypatch)
    assert derived["stop_cut"] is None and derived["stop_cut_held"] is False
    assert v["verdict"] == "QUALIFIED"


# --- the semantic side -------------------------------------------------------------------------------------

_ITEM_OK = {
    "level": 1,
    "repetition": 0,
    "error": None,
    "fault": False,
    "http_status": 200,
    "unanswered": False,
}


def _held_semantic(
    es: list[dict[str, Any]], records: list[dict[str, Any]], fault_kind: str, **counts: Any
) -> None:
    """A semantic run of the held engine: three items answered, then ``records`` (the item that stopped it
    last: a fault), its counts as the harness counts its items."""
    lines = [{**_ITEM_OK, "prompt_id": f"s{i}"} for i in range(3)] + [
        {**r, "prompt_id": f"s{3 + i}", "level": 1} for i, r in enumerate(records)
    ]
    failed = sum(1 for r in records if r["error"] is not None and not r["fault"])
    p = entry(es, "semantic")["payload"]
    p["status"] = "failed"
    p["reason"] = "no aggregate result: engine fault"
    p["bounds"].update(outcome="fault", aggregate=False, score=None, fault_kind=fault_kind)
    p["bounds"]["fault_at"] = "2026-09-10T10:09:59.9Z"
    p["figures"] = {"score": None}
    p["counts"].update(asked=3 + failed, passed=3, failed=failed, errors=failed, **counts)
    entry(es, "semantic")["artifacts"] = [
        {"name": "semantic-requests.jsonl", "text": "".join(json.dumps(x) + "\n" for x in lines)}
    ]
    for name in ("semantic-review", "benchmark", "benchmark-review", "benchmark-acceptance"):
        es.remove(entry(es, name))


def test_a_held_semantic_run_whose_timed_out_item_was_the_fault_is_inconclusive(tmp_path: Path) -> None:
    """A sequential run: the item in flight when the hold began timed out and the hang check got no answer
    — it is the run's fault, not a failed item: nothing decides the score."""
    es = qualified_entries()
    _held_launch(es)
    _held_semantic(es, [_HUNG], "timeout")
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert rejected(v)["semantic"] == RULE


def test_a_held_semantic_runs_timed_out_failed_item_still_decides_the_score(tmp_path: Path) -> None:
    """An item timed out while the hang check still got an answer (a plain error: a failed item), then the
    collector's kill reset the next one ("unanswered"). A result that records no counts.timed_out (an older
    harness) has none less: with semantic_min_score 1.0 the failed item decides the score (fail closed). A
    count it claims with no semantic-items.jsonl to join its requests to is a problem of its record, never
    excused (fix 128: tests/policy/test_held_semantic_timeouts.py)."""
    es = qualified_entries()
    _held_launch(es)
    _held_semantic(es, [_TIMED_OUT, _UNANSWERED], "unanswered")
    v = verdict_of(tmp_path, es)
    assert rejected(v)["semantic"] == RULE
    assert gates(v)["semantic"] == "failed", v["gates"]
    assert v["verdict"] == SEMANTIC, v["gates"]
    es = qualified_entries()
    _held_launch(es)
    _held_semantic(es, [_TIMED_OUT, _UNANSWERED], "unanswered", timed_out=1)
    v = verdict_of(tmp_path, es)
    assert rejected(v)["semantic"] == "harness-artifact-mismatch", v["gates"]
    assert v["verdict"] not in ("INCONCLUSIVE", "QUALIFIED"), v["gates"]


# --- a request its record shows both unanswered and timed out ----------------------------------------------


def test_a_request_recorded_both_unanswered_and_timed_out_is_not_subtracted_twice(tmp_path: Path) -> None:
    """The record claims one request both reset (unanswered) and timed out: subtracted twice, it would
    excuse the 4xx the engine answered beside it (3 errors − 1 unanswered − 2 timed out = 0)."""
    both = {**_UNANSWERED, "timed_out": True, "error": "timeout after 120 s (TimeoutError)"}
    bad = {**_ANSWERED, "error": "HTTP 422: bad request", "http_status": 422}
    es = qualified_entries()
    _held_launch(es)
    _benchmark(es, [bad, _TIMED_OUT, both], fault_kind="unanswered")
    v = verdict_of(tmp_path, es)
    assert v["verdict"] not in ("INCONCLUSIVE", "QUALIFIED"), v["gates"]
