"""fix116: a benchmark whose requests timed out while its engine was held from outside
(suspended-from-outside, read by the policy from the launch's stored logs and failure_detail) is excused
by ``stop_cut`` — and its timed-out requests no longer count against the PERFORMANCE gate: the harness
records them (``counts.timed_out``, each request's ``timed_out`` in ``benchmark-requests.jsonl``), the
policy reads the count back from that record (``acceptance._requests_shown``: a count the record
contradicts is a problem, and so is a ``bounds.fault_kind`` "timeout" the record does not show), and
rule ``stopped-from-outside`` subtracts it only for a run whose fault was a timeout — one ``stop_cut``
excuses only where the launch was held. Timeouts of an engine not held still count (a hang), and so do
the held engine's answers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ledger.entries import validate_payload
from ledger.errors import SchemaError
from tests.policy.test_fail_closed import entry, gates, qualified_entries, rejected, verdict_of
from tests.policy.test_fix77_stopped_from_outside import BENCHMARK_EXITED_AT, _stopped
from tests.policy.test_fix106_outside_stops import _held

RULE = "stopped-from-outside"
RUNTIME = "NOT QUALIFIED — RUNTIME RELIABILITY"

_ANSWERED = {
    "level": 1,
    "repetition": 0,
    "prompt_id": "p01",
    "error": None,
    "fault": False,
    "http_status": 200,
    "unanswered": False,
    "timed_out": False,
}
# the request the harness found hung (it asked the engine after the timeout: no answer), and the other one in
# flight at c4 that timed out after the run was already stopping (a plain error)
_HUNG = {
    **_ANSWERED,
    "level": 4,
    "error": (
        "timeout after 120 s (TimeoutError); the engine answers neither /health nor /v1/models: it hangs"
    ),
    "fault": True,
    "http_status": None,
    "timed_out": True,
}
_TIMED_OUT = {**_HUNG, "error": "timeout after 120 s (TimeoutError)", "fault": False}
_UNANSWERED = {
    **_ANSWERED,
    "level": 4,
    "error": "ClientOSError: Connection reset by peer",
    "fault": True,
    "http_status": None,
    "unanswered": True,
}


def _jsonl(records: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def _benchmark(
    es: list[dict[str, Any]],
    records: list[dict[str, Any]],
    *,
    fault_kind: str = "timeout",
    drop: tuple[str, ...] = (),
    **counts: Any,
) -> None:
    """The benchmark stopped by an engine fault of ``fault_kind``, its per-request record ``records`` (81
    answered at c1 before them), its counts as the harness counts that record (``counts`` override them,
    ``drop`` leaves some out)."""
    every = [_ANSWERED] * 81 + records
    p = entry(es, "benchmark")["payload"]
    p["status"] = "failed"
    p["reason"] = "no aggregate result: engine fault at c4 repetition 0 request 0"
    p["bounds"].update(
        outcome="fault",
        aggregate=False,
        valid=False,
        fault_kind=fault_kind,
        fault_at="2026-09-10T10:29:59.900000Z",
    )
    p["figures"] = {}
    errors = [r for r in every if r["error"] is not None]
    p["counts"] = {k: v for k, v in p["counts"].items() if not k.startswith("completed@c")}
    p["counts"].update(
        issued=len(every),
        completed=len(every) - len(errors),
        errors=len(errors),
        cut=0,
        unanswered=sum(1 for r in errors if r["unanswered"] and r["fault"]),
        timed_out=sum(1 for r in errors if r.get("timed_out") is True and r["http_status"] in (None, 200)),
        **{"completed@c1": 81},
    )
    p["counts"].update(counts)
    for k in drop:
        p["counts"].pop(k)
    entry(es, "benchmark")["artifacts"] = [{"name": "benchmark-requests.jsonl", "text": _jsonl(every)}]
    for name in ("benchmark-review", "benchmark-acceptance"):
        es.remove(entry(es, name))


def _held_launch(es: list[dict[str, Any]]) -> None:
    _held(es)
    entry(es, "launch")["payload"]["details"]["exited_at"] = BENCHMARK_EXITED_AT


def _verdict(tmp_path: Path, es: list[dict[str, Any]]) -> dict[str, Any]:
    return verdict_of(tmp_path, es)


def test_a_benchmark_whose_requests_timed_out_while_its_engine_was_held_is_inconclusive(
    tmp_path: Path,
) -> None:
    es = qualified_entries()
    _held_launch(es)
    _benchmark(es, [_HUNG, _TIMED_OUT])
    v = _verdict(tmp_path, es)
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert gates(v)["benchmark"] == "missing", v["gates"]
    assert gates(v)["runtime-stability"] == "passed", v["gates"]
    assert rejected(v)["benchmark"] == RULE


@pytest.mark.parametrize("count", ["2", None, [2], {"n": 2}, -1])
def test_a_mistyped_timed_out_count_is_refused_at_ingest(count: Any) -> None:
    es = qualified_entries()
    _benchmark(es, [_HUNG, _TIMED_OUT], timed_out=count)
    with pytest.raises(SchemaError, match=r"counts\.timed_out"):
        validate_payload("gate.result", 1, entry(es, "benchmark")["payload"])


def test_the_held_benchmarks_timeouts_counted_without_timed_out_count_against_it(tmp_path: Path) -> None:
    """A harness that records no counts.timed_out (an older one): nothing is excused beyond the cut and
    unanswered requests — its two timeouts exceed the error-rate bound of 0."""
    es = qualified_entries()
    _held_launch(es)
    _benchmark(es, [_HUNG, _TIMED_OUT], drop=("timed_out",))
    v = _verdict(tmp_path, es)
    assert v["verdict"] != "INCONCLUSIVE" and v["verdict"] != "QUALIFIED", v["gates"]
    assert gates(v)["benchmark"] == "failed", v["gates"]


@pytest.mark.parametrize("count", [0, 1, 3])
def test_a_timed_out_count_its_record_contradicts_excuses_nothing(tmp_path: Path, count: int) -> None:
    es = qualified_entries()
    _held_launch(es)
    _benchmark(es, [_HUNG, _TIMED_OUT], timed_out=count)
    v = _verdict(tmp_path, es)
    assert v["verdict"] not in ("INCONCLUSIVE", "QUALIFIED"), v["gates"]
    assert rejected(v).get("benchmark") != RULE


@pytest.mark.parametrize(
    "field",
    [
        {"timed_out": "true"},  # mistyped in the record
        {"timed_out": 1},
        {"timed_out": None},
        {"timed_out": False},  # the record says the request did not time out
    ],
)
def test_a_record_whose_requests_do_not_show_the_timeouts_excuses_nothing(
    tmp_path: Path, field: dict[str, Any]
) -> None:
    """The payload counts 2 timed out; its record's requests say otherwise (renamed, mistyped, false): the
    count is the payload's claim alone — a problem, never excused."""
    es = qualified_entries()
    _held_launch(es)
    _benchmark(es, [{**_HUNG, **field}, {**_TIMED_OUT, **field}], timed_out=2)
    v = _verdict(tmp_path, es)
    assert v["verdict"] not in ("INCONCLUSIVE", "QUALIFIED"), v["gates"]
    assert rejected(v).get("benchmark") != RULE


def test_a_record_without_the_timed_out_field_excuses_nothing(tmp_path: Path) -> None:
    es = qualified_entries()
    _held_launch(es)
    dropped = [{k: v for k, v in r.items() if k != "timed_out"} for r in (_HUNG, _TIMED_OUT)]
    _benchmark(es, dropped, timed_out=2)
    v = _verdict(tmp_path, es)
    assert v["verdict"] not in ("INCONCLUSIVE", "QUALIFIED"), v["gates"]


@pytest.mark.parametrize("status", [500, 503])
def test_a_held_engines_5xx_answer_still_counts(tmp_path: Path, status: int) -> None:
    """fault_kind "timeout" claimed, but the record shows a faulted request the engine answered (HTTP 5xx):
    the collector's "answered" outranks "timeout" — the claim is contradicted, nothing is excused."""
    es = qualified_entries()
    _held_launch(es)
    answered = {
        **_HUNG,
        "error": f"HTTP {status}: EngineDeadError",
        "http_status": status,
        "timed_out": False,
    }
    _benchmark(es, [_HUNG, answered])
    v = _verdict(tmp_path, es)
    assert v["verdict"] == RUNTIME, v["gates"]
    assert rejected(v).get("benchmark") != RULE


def test_a_5xx_whose_body_then_stalled_is_an_answer_not_a_timeout(tmp_path: Path) -> None:
    """A request the engine answered 500 whose body then timed out: an answer (the count of timeouts does
    not hold it, and it faults the run as answered)."""
    es = qualified_entries()
    _held_launch(es)
    answered = {**_HUNG, "http_status": 500}
    _benchmark(es, [_HUNG, answered], timed_out=2)
    v = _verdict(tmp_path, es)
    assert v["verdict"] == RUNTIME, v["gates"]
    assert rejected(v).get("benchmark") != RULE


def test_a_held_engines_plain_request_error_still_counts(tmp_path: Path) -> None:
    """Beside the timeouts, a request the held engine answered with a 4xx before the hold (a plain error):
    it is the engine's, beyond the error-rate bound of 0 — the benchmark fails."""
    es = qualified_entries()
    _held_launch(es)
    bad = {**_ANSWERED, "error": "HTTP 422: bad request", "http_status": 422}
    _benchmark(es, [bad, _HUNG, _TIMED_OUT])
    v = _verdict(tmp_path, es)
    assert rejected(v)["benchmark"] == RULE
    assert gates(v)["benchmark"] == "failed", v["gates"]
    assert v["verdict"] not in ("INCONCLUSIVE", "QUALIFIED")


def test_timeouts_of_an_engine_not_held_still_count(tmp_path: Path) -> None:
    """An outside SIGTERM cut the run (a reset, unanswered); a request had timed out before it: that timeout
    is the engine's (a hang), not the stop's — counts.timed_out is subtracted only for a run whose fault
    was a timeout, which stop_cut excuses only for a held launch."""
    es = qualified_entries()
    _stopped(es, exited_at=BENCHMARK_EXITED_AT)
    _benchmark(es, [_TIMED_OUT, _UNANSWERED], fault_kind="unanswered")
    v = _verdict(tmp_path, es)
    assert rejected(v)["benchmark"] == RULE
    assert gates(v)["benchmark"] == "failed", v["gates"]
    assert v["verdict"] not in ("INCONCLUSIVE", "QUALIFIED")


def test_the_same_run_stopped_without_the_earlier_timeout_is_inconclusive(tmp_path: Path) -> None:
    """The honest neighbour of the test above: only the reset, stop_cut excuses it."""
    es = qualified_entries()
    _stopped(es, exited_at=BENCHMARK_EXITED_AT)
    _benchmark(es, [_UNANSWERED], fault_kind="unanswered")
    v = _verdict(tmp_path, es)
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert rejected(v)["benchmark"] == RULE


def test_a_timeout_fault_of_an_engine_not_held_is_a_hang(tmp_path: Path) -> None:
    """An outside SIGTERM, but the run's fault was a timeout: not cut by the stop — the engine's hang."""
    es = qualified_entries()
    _stopped(es, exited_at=BENCHMARK_EXITED_AT)
    _benchmark(es, [_HUNG, _TIMED_OUT])
    v = _verdict(tmp_path, es)
    assert v["verdict"] == RUNTIME, v["gates"]
    assert rejected(v).get("benchmark") != RULE


def test_a_fault_kind_timeout_no_faulted_request_shows_excuses_nothing(tmp_path: Path) -> None:
    """Held, fault_kind "timeout", but no request of the record faulted by a timeout (only plain timeouts):
    the fault kind is the payload's claim — a problem."""
    es = qualified_entries()
    _held_launch(es)
    _benchmark(es, [_TIMED_OUT, _TIMED_OUT])
    v = _verdict(tmp_path, es)
    assert v["verdict"] not in ("INCONCLUSIVE", "QUALIFIED"), v["gates"]
    assert rejected(v).get("benchmark") != RULE
