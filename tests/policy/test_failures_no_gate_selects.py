"""Failures on record that no gate judges, and failures a claimed end withdrew.

Regressions an independent audit found, each judged QUALIFIED:

- A failed ``gate.result`` for a gate of the policy that judges its own evidence, not recorded results
  (``runtime-stability``, ``api-readiness``, ``sequential-requests``, ``ready-control``,
  ``host-prerequisites``) was selected by no gate, so the failure it records was judged by nothing — the hole
  the misspelled-gate rule closed, by another name. ``collect run`` records such results itself.
- A job whose end says ``failed`` with no failed result of its own (a collector that stopped mid-run, a
  failure entered by hand) was ignored.
- A launch's or a job's claimed end withdrew a failure the log holds: a 500 logged before the launch's entry
  (``after-launch-end``) or before the job's terminal entry (``after-job-terminal``) but after the end they
  claim. A claim only takes credit away; what the log knows came after an end is still withdrawn.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.policy.test_audit_neighbours import _insert_by_log_time
from tests.policy.test_fail_closed import entry, qualified_entries, rejected, verdict_of

QUALIFIED = "QUALIFIED"
INCONCLUSIVE = "INCONCLUSIVE"
RUNTIME = "NOT QUALIFIED — RUNTIME RELIABILITY"
JUDGED_BY_EVIDENCE = [
    "runtime-stability",
    "api-readiness",
    "sequential-requests",
    "ready-control",
]
# … and host-prerequisites until fix 157: it now reads the collector's host-prerequisites results too (a
# failed one fails it: tests/policy/test_fix157_host_gate_reads_env_snapshot_and_host_step.py)
RECORDED_BY_THE_COLLECTOR = [*JUDGED_BY_EVIDENCE, "host-prerequisites"]


def _result(es: list[dict[str, Any]], gate: str, status: str = "failed", key: str = "collector") -> None:
    es.insert(
        es.index(entry(es, "campaign-done")),
        {
            "name": "by-gate",
            "kind": "gate.result",
            "key": key,
            "at": "2026-09-10T10:45:00Z",
            "refs": {"job": "campaign-job"},
            "payload": {"gate": gate, "status": status, "reason": "engine hung under load"},
        },
    )


def _unjudged(v: dict[str, Any]) -> list[tuple[str, str]]:
    return [(u["kind"], v["_names"].get(u["entry"], u["entry"])) for u in v["unjudged"]]


@pytest.mark.parametrize("gate", JUDGED_BY_EVIDENCE)
@pytest.mark.parametrize("key", ["collector", "operator"])
def test_a_failed_result_of_a_gate_that_reads_no_results_is_not_ignored(
    tmp_path: Path, gate: str, key: str
) -> None:
    es = qualified_entries()
    _result(es, gate, key=key)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == INCONCLUSIVE
    assert _unjudged(v) == [("gate.result", "by-gate")]
    (u,) = v["unjudged"]
    assert u["gate"] == gate and "judges the evidence it selects" in u["detail"]


@pytest.mark.parametrize("gate", RECORDED_BY_THE_COLLECTOR)
@pytest.mark.parametrize("status", ["passed", "not_run", "not_authorized"])
def test_a_result_of_such_a_gate_that_records_no_failure_changes_nothing(
    tmp_path: Path, gate: str, status: str
) -> None:
    """The neighbour: a passed result is a claim (the gate judges its own evidence), never a pass."""
    es = qualified_entries()
    _result(es, gate, status=status)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == QUALIFIED
    assert v["unjudged"] == []


@pytest.mark.parametrize("key", ["collector", "operator"])
def test_a_failed_host_prerequisites_result_is_judged_by_the_host_gate(tmp_path: Path, key: str) -> None:
    """Fix 157: the host gate selects the collector's host-prerequisites results; a failed one (the newest)
    fails it with the reason it records, and is no longer listed as unjudged."""
    es = qualified_entries()
    _result(es, "host-prerequisites", key=key)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "NOT QUALIFIED — PREREQUISITES"
    assert v["unjudged"] == []
    (host,) = [g for g in v["gates"] if g["name"] == "host-prerequisites"]
    assert host["status"] == "failed" and "engine hung under load" in host["reason"], host


def test_a_failed_result_a_gate_selects_is_judged_by_it_not_listed(tmp_path: Path) -> None:
    es = qualified_entries()
    bench = entry(es, "benchmark")
    bench["payload"]["status"] = "failed"
    v = verdict_of(tmp_path, es)
    assert v["verdict"] != QUALIFIED
    assert v["unjudged"] == []


def _failed_end(
    es: list[dict[str, Any]], reason: str | None = "the collector stopped during gate semantic"
) -> None:
    done = entry(es, "campaign-done")
    done["payload"].update(state="failed", exit_code=1)
    if reason is not None:
        done["payload"]["reason"] = reason


@pytest.mark.parametrize("reason", ["the collector stopped during gate semantic", None])
def test_a_job_that_ended_failed_with_no_failed_result_is_not_ignored(
    tmp_path: Path, reason: str | None
) -> None:
    es = qualified_entries()
    _failed_end(es, reason)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == INCONCLUSIVE
    assert _unjudged(v) == [("job", "campaign-job")]
    (u,) = v["unjudged"]
    assert "ended failed" in u["detail"] and (reason or "no reason recorded") in u["detail"]


def test_a_failed_job_whose_failure_a_result_records_is_judged_by_that_result(tmp_path: Path) -> None:
    es = qualified_entries()
    _failed_end(es, "gate benchmark failed")
    entry(es, "benchmark")["payload"]["status"] = "failed"
    v = verdict_of(tmp_path, es)
    assert v["verdict"] != QUALIFIED and v["verdict"] != INCONCLUSIVE
    assert v["unjudged"] == []


def test_a_withdrawn_job_takes_its_failed_end_with_it(tmp_path: Path) -> None:
    """Superseding the failed job's running entry, with the reason, withdraws the job: its end is then
    neither a failure no gate judges nor an end no running entry started (``unmatched_job_ends``). Its
    evidence is the evidence of no job: here another job carries the campaign."""
    es = qualified_entries()
    failed_job = copy.deepcopy(entry(es, "campaign-job"))
    failed_job["name"], failed_job["at"] = "failed-job", "2026-09-10T09:30:00Z"
    failed_job["payload"].update(job_id="campaign-0", started_at="2026-09-10T09:30:00Z")
    end = {
        "name": "failed-end",
        "kind": "job",
        "key": "collector",
        "at": "2026-09-10T09:40:00Z",
        "payload": {"job_id": "campaign-0", "state": "failed", "reason": "collector ran out of disk"},
    }
    es[0:0] = [failed_job, end]
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == INCONCLUSIVE and _unjudged(v) == [("job", "failed-job")]
    es.insert(
        es.index(entry(es, "campaign-done")),
        {
            "name": "withdraw",
            "kind": "supersession",
            "key": "operator",
            "at": "2026-09-10T10:46:00Z",
            "refs": {"supersedes": "failed-job"},
            "payload": {"reason": "the host's disk filled; nothing of the engine ran"},
        },
    )
    v = verdict_of(tmp_path, es)
    assert v["unjudged"] == []
    assert v["verdict"] == QUALIFIED, v["gates"]


def _two_launches(ended: str | None) -> list[dict[str, Any]]:
    """Launch 1 (ready) logged 10:01:30, claiming it ended 10:01:08; a 500 completion logged at 10:01:10;
    launch 2 started 10:01:40 and served the campaign's probes."""
    es = qualified_entries()
    l2 = copy.deepcopy(entry(es, "launch"))
    l1 = entry(es, "launch")
    l1["at"] = "2026-09-10T10:01:30Z"
    if ended is not None:
        l1["payload"].update(ended_at=ended, exit_code=143, details={"stop_reason": "finished"})
    l2["name"], l2["at"] = "launch2", "2026-09-10T10:09:00Z"
    l2["payload"].update(attempt=2, started_at="2026-09-10T10:01:40Z")
    for n, t in [
        ("health", "10:01:45"),
        ("models", "10:01:46"),
        ("completion", "10:01:50"),
        ("structured", "10:01:55"),
        ("sequential", "10:02:00"),
    ]:
        entry(es, n)["at"] = f"2026-09-10T{t}Z"
    es.remove(l1)
    for e in (l1, l2):
        _insert_by_log_time(es, e)
    _insert_by_log_time(
        es,
        {
            "name": "fail500",
            "kind": "health.probe",
            "key": "collector",
            "at": "2026-09-10T10:01:10Z",
            "refs": {"job": "campaign-job"},
            "payload": {
                "endpoint": "/v1/chat/completions",
                "check": "completion",
                "ok": False,
                "http_status": 500,
                "error": "EngineDeadError",
                "max_tokens": 8,
            },
        },
    )
    return es


@pytest.mark.parametrize("ended", ["2026-09-10T10:01:08Z", None])
def test_a_launchs_claimed_end_does_not_withdraw_a_failure_logged_before_it(
    tmp_path: Path, ended: str | None
) -> None:
    v = verdict_of(tmp_path, _two_launches(ended))
    assert v["verdict"] == RUNTIME, v["gates"]


def test_a_jobs_claimed_end_does_not_withdraw_a_failure_logged_before_its_end(tmp_path: Path) -> None:
    es = qualified_entries()
    entry(es, "campaign-done")["payload"]["ended_at"] = "2026-09-10T10:20:00Z"
    for n, t in [
        ("semantic", "10:05:00"),
        ("semantic-review", "10:06:00"),
        ("benchmark", "10:10:00"),
        ("benchmark-review", "10:11:00"),
        ("benchmark-acceptance", "10:12:00"),
    ]:
        entry(es, n)["at"] = f"2026-09-10T{t}Z"
    assert verdict_of(tmp_path, es)["verdict"] == QUALIFIED
    fail = {
        "name": "fail500",
        "kind": "health.probe",
        "key": "collector",
        "at": "2026-09-10T10:25:00Z",
        "refs": {"job": "campaign-job"},
        "payload": {
            "endpoint": "/v1/chat/completions",
            "check": "sequential",
            "ok": False,
            "http_status": 500,
            "error": "EngineDeadError",
            "count": 3,
            "latencies_ms": [1.0, 1.0, 1.0],
        },
    }
    _insert_by_log_time(es, fail)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == RUNTIME
    assert rejected(v)["fail500"] == "after-job-terminal"
    # the neighbour: logged after the job's terminal entry, the log knows it came after the end — but an
    # engine answered it (HTTP 500): a failure an answering engine shows counts whatever job it names, as it
    # does naming none (audit 63 f2; it used to be withdrawn)
    es.remove(fail)
    fail["at"] = "2026-09-10T10:55:00Z"
    es.append(fail)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == RUNTIME
    assert rejected(v)["fail500"] == "after-job-terminal"
    # … and one that no engine answered (no HTTP status: the engine gone with its job) is withdrawn
    fail["payload"].pop("http_status")
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == QUALIFIED
    assert rejected(v)["fail500"] == "after-job-terminal"
