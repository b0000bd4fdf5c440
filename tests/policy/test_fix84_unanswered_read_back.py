"""Audit 73 f1: a benchmark's ``counts.unanswered`` / ``bounds.fault_kind = "unanswered"`` (what a stop from
outside may excuse, fix 80) was the harness's claim, never read back from its stored record: a run whose
``benchmark-requests.jsonl`` shows 33 requests answered HTTP 500 was excused as cut by an outside SIGTERM
(INCONCLUSIVE). ``unanswered`` is now rebuilt from the record (a faulted request with ``unanswered`` true and
no HTTP status) like ``issued``/``completed``/``errors``; a result it contradicts is
``harness-artifact-mismatch`` and never a stop cut, so its errors count against the engine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.policy.test_fail_closed import entry, qualified_entries, rejected, verdict_of
from tests.policy.test_fix77_stopped_from_outside import BENCHMARK_EXITED_AT, _cut_benchmark, _stopped


def _requests(ok: int, faulted: list[dict[str, Any]]) -> str:
    lines = [{"level": 1, "error": None, "fault": False, "http_status": 200, "unanswered": False}] * ok
    lines += [{"level": 1, "error": "x", "fault": True, **f} for f in faulted]
    return "".join(json.dumps(line) + "\n" for line in lines)


def _verdict(tmp_path: Path, faulted: list[dict[str, Any]], claimed_unanswered: int) -> dict[str, Any]:
    es = qualified_entries()
    _stopped(es, exited_at=BENCHMARK_EXITED_AT)
    _cut_benchmark(es)
    b = entry(es, "benchmark")
    n = len(faulted)
    counts = {k: v for k, v in b["payload"]["counts"].items() if not k.startswith("completed@c")}
    counts.update({"issued": 81 + n, "completed": 81, "errors": n, "unanswered": claimed_unanswered})
    b["payload"]["counts"] = {**counts, "completed@c1": 81}  # what the record below shows, but unanswered
    b["artifacts"] = [a for a in b.get("artifacts", []) if a.get("name") != "benchmark-requests.jsonl"]
    b["artifacts"].append({"name": "benchmark-requests.jsonl", "text": _requests(81, faulted)})
    return verdict_of(tmp_path, es)


def test_a_stop_cut_claimed_over_http_500_answers_is_not_excused(tmp_path: Path) -> None:
    v = _verdict(tmp_path, [{"http_status": 500, "unanswered": False}] * 33, claimed_unanswered=33)
    assert v["verdict"].startswith("NOT QUALIFIED"), v["gates"]
    assert rejected(v).get("benchmark") == "harness-artifact-mismatch"


@pytest.mark.parametrize(
    "faulted",
    [
        [{"http_status": 500, "unanswered": True}],  # an HTTP status is an answer, whatever else it says
        [{"http_status": None, "unanswered": "true"}],  # mistyped
        [{"http_status": None}],  # the field dropped (an older record)
        [{"http_status": None, "unansw": True}],  # renamed
    ],
    ids=["status-and-unanswered", "mistyped", "dropped", "renamed"],
)
def test_a_record_that_does_not_show_the_request_unanswered_is_no_stop_cut(
    tmp_path: Path, faulted: list[dict[str, Any]]
) -> None:
    v = _verdict(tmp_path, faulted, claimed_unanswered=1)
    assert v["verdict"] != "INCONCLUSIVE" or rejected(v).get("benchmark") != "stopped-from-outside", v
    assert rejected(v).get("benchmark") == "harness-artifact-mismatch"


def test_a_record_that_shows_the_request_unanswered_is_still_a_stop_cut(tmp_path: Path) -> None:
    """Neighbour: the record agrees (no status, unanswered true): the outside stop is excused as before."""
    v = _verdict(tmp_path, [{"http_status": None, "unanswered": True}], claimed_unanswered=1)
    assert rejected(v).get("benchmark") == "stopped-from-outside", v["rejected"]
    assert v["verdict"] == "INCONCLUSIVE"
