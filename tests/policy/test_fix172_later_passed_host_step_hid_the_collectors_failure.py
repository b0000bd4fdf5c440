"""Fix 172 (audit 106 f2, issue 11): a later "passed" host-step result hid the collector's failed host step.

The qualifying campaign plus the collector's failed ``host-prerequisites`` gate.result is NOT QUALIFIED —
PREREQUISITES. A ``{gate: host-prerequisites, status: passed}`` result added in the same job after the
launch — no new run, no host probe, no env snapshot, signed with the collector's or an operator's key —
made it QUALIFIED, the failure not even among the rejected entries: ``e.derived.newer_run`` said only
which result was newest, and the env snapshot the pass needs is selected for the whole campaign.

Now (``ledger.policy.acceptance._ran_again_in``) a newer result stands in for an older failure only where
the log shows the step run again: every newest result was logged in a later job of the campaign — the job
the log took it in, never its ref — whose running entry the log took after the failure, and that job
logged its own host probe and env snapshot. Otherwise both count and the failure decides: the gate fails
with the collector's reason (never INCONCLUSIVE: the failure is evidence enough, the pass shows nothing
run again). Neighbours: the pass in the same job (collector or operator; a reviewer's is refused at
ingest), logged before the failure but claiming a later time, logged after every job claiming the later
one as its own, in a later job with no snapshot, no probe, a superseded snapshot, in a job that was
already running beside the failure, in another campaign's job, with its status mistyped or its gate
misspelled; and the later job that does run the step again, which is judged on the new run.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from ledger.errors import RoleError, SchemaError
from tests.policy.test_fail_closed import entry, gates, qualified_entries, rejected, verdict_of

PREREQ = "NOT QUALIFIED — PREREQUISITES"
REASON = "the work disk has 0.5 GiB free < 10"

FAILED: dict[str, Any] = {
    "name": "host-step-failed",
    "kind": "gate.result",
    "key": "collector",
    "at": "2026-09-10T10:00:07Z",
    "refs": {"job": "campaign-job"},
    "payload": {"gate": "host-prerequisites", "status": "failed", "order": 1, "reason": REASON},
}


def _host_gate(v: dict[str, Any]) -> dict[str, Any]:
    return next(g for g in v["gates"] if g["name"] == "host-prerequisites")


def _passed(
    at: str, *, key: str = "collector", name: str = "host-step-passed", **more: Any
) -> dict[str, Any]:
    return {
        "name": name,
        "kind": "gate.result",
        "key": key,
        "at": at,
        "refs": {"job": "campaign-job"},
        "payload": {"gate": "host-prerequisites", "status": "passed", "order": 1},
        **more,
    }


def _failed_campaign() -> list[dict[str, Any]]:
    """The qualifying campaign, and the collector's failed host step beside its probe and snapshot."""
    es = qualified_entries()
    es.insert(es.index(entry(es, "env")) + 1, copy.deepcopy(FAILED))
    return es


def _later_job(
    *, probe: bool = True, snapshot: bool = True, campaign: str | None = None, job_id: str = "campaign-2"
) -> list[dict[str, Any]]:
    """A later job of the campaign (after the first ended) that runs the host step: its own probe and env
    snapshot (each left out on request), its passed result, then its operator stops it."""
    subject = {"subject": {"campaign": campaign}} if campaign is not None else {}
    job = {
        "name": "job2",
        "kind": "job",
        "key": "collector",
        "at": "2026-09-10T11:00:00Z",
        "payload": {
            "job_id": job_id,
            "state": "running",
            "started_at": "2026-09-10T11:00:00Z",
            "lease_seconds": 3600.0,
            "spec": copy.deepcopy(entry(qualified_entries(), "campaign-job")["payload"]["spec"]),
        },
        **subject,
    }
    out = [job]
    if probe:
        probe_entry = copy.deepcopy(entry(qualified_entries(), "host"))
        probe_entry.update(name="host2", at="2026-09-10T11:00:05Z", **subject)
        out.append(probe_entry)
    if snapshot:
        env = copy.deepcopy(entry(qualified_entries(), "env"))
        env.update(name="env2", at="2026-09-10T11:00:06Z", refs={"job": "job2"}, **subject)
        out.append(env)
    out.append(_passed("2026-09-10T11:00:07Z", name="host-step2-passed", refs={"job": "job2"}, **subject))
    out.append(
        {
            "name": "job2-cancelled",
            "kind": "job",
            "key": "collector",
            "at": "2026-09-10T11:00:30Z",
            "refs": {"job": "job2"},
            "payload": {
                "job_id": job_id,
                "state": "cancelled",
                "ended_at": "2026-09-10T11:00:30Z",
                "cancelled_by": "operator",
                "reason": "stopped after the host step",
            },
            **subject,
        }
    )
    return out


def _the_failure_decides(v: dict[str, Any]) -> None:
    host = _host_gate(v)
    assert host["status"] == "failed", host
    assert v["verdict"] == PREREQ, v["verdict"]
    assert "the collector recorded the job's host step failed" in host["reason"], host
    assert REASON in host["reason"], host
    # the failure is evidence of the gate, never dropped: not rejected, among what the gate used
    assert "host-step-failed" not in rejected(v)
    assert "host-step-failed" in {v["_names"][i] for i in host["evidence"]}


# --- the audit's shape: a passed result in the failure's own job ---------------------------------------


@pytest.mark.parametrize("key", ["collector", "operator"])
def test_fix172_later_passed_host_step_hid_the_collectors_failure(tmp_path: Path, key: str) -> None:
    es = _failed_campaign()
    assert verdict_of(tmp_path, es)["verdict"] == PREREQ
    es.insert(es.index(entry(es, "campaign-done")), _passed("2026-09-10T10:49:00Z", key=key))
    _the_failure_decides(verdict_of(tmp_path, es))


def test_a_passed_host_step_signed_by_a_reviewer_is_refused_at_ingest(tmp_path: Path) -> None:
    es = _failed_campaign()
    es.insert(es.index(entry(es, "campaign-done")), _passed("2026-09-10T10:49:00Z", key="reviewer"))
    with pytest.raises(RoleError, match=r"gate\.result needs one of"):
        verdict_of(tmp_path, es)


def test_a_passed_result_right_after_the_failure_in_its_job_lifts_nothing(tmp_path: Path) -> None:
    es = _failed_campaign()
    es.insert(es.index(entry(es, "host-step-failed")) + 1, _passed("2026-09-10T10:00:08Z"))
    _the_failure_decides(verdict_of(tmp_path, es))


def test_a_passed_result_that_refs_no_job_lifts_nothing_either(tmp_path: Path) -> None:
    """Dropped: the ref is no claim the rule reads; the log puts it in the failure's job."""
    es = _failed_campaign()
    p = _passed("2026-09-10T10:49:00Z")
    del p["refs"]
    es.insert(es.index(entry(es, "campaign-done")), p)
    _the_failure_decides(verdict_of(tmp_path, es))


def test_a_pass_logged_before_the_failure_claiming_a_later_time_lifts_nothing(tmp_path: Path) -> None:
    """Reordered: logged before the failure, observed (claimed) after it — the failure is the one the log
    took last, so among the newest, and it counts."""
    es = _failed_campaign()
    es.append(_passed("2026-09-10T10:30:00Z", logged_at="2026-09-10T10:00:06.500000Z"))
    _the_failure_decides(verdict_of(tmp_path, es))


def test_a_pass_logged_after_every_job_claiming_the_later_one_lifts_nothing(tmp_path: Path) -> None:
    """The later job ran the step (probe, snapshot) and was stopped with no result; a pass logged after it
    ended, whose ref names it: the log took it in no job."""
    es = _failed_campaign()
    later = [e for e in _later_job() if e["name"] != "host-step2-passed"]
    late = _passed("2026-09-10T11:00:40Z", refs={"job": "job2"})
    v = verdict_of(tmp_path, es + later + [late])
    _the_failure_decides(v)


# --- a later job ----------------------------------------------------------------------------------------


def test_a_later_job_that_runs_the_step_again_is_judged_on_the_new_run(tmp_path: Path) -> None:
    es = _failed_campaign() + _later_job()
    v = verdict_of(tmp_path, es)
    host = _host_gate(v)
    assert host["status"] == "passed", host
    assert v["verdict"] == "QUALIFIED", (v["verdict"], gates(v))
    assert {"host2", "env2"} <= {v["_names"][i] for i in host["evidence"]}


def test_a_later_job_without_its_own_snapshot_is_no_run_again(tmp_path: Path) -> None:
    """The first job's snapshot backs nothing of the later pass: the failure decides (not INCONCLUSIVE)."""
    _the_failure_decides(verdict_of(tmp_path, _failed_campaign() + _later_job(snapshot=False)))


def test_a_later_job_without_its_own_probe_is_no_run_again(tmp_path: Path) -> None:
    _the_failure_decides(verdict_of(tmp_path, _failed_campaign() + _later_job(probe=False)))


def test_a_later_job_whose_snapshot_is_superseded_is_no_run_again(tmp_path: Path) -> None:
    es = _failed_campaign() + _later_job()
    es.append(
        {
            "name": "env2-withdrawn",
            "kind": "supersession",
            "key": "operator",
            "at": "2026-09-10T11:10:00Z",
            "refs": {"supersedes": "env2"},
            "payload": {"reason": "the snapshot of another interpreter"},
        }
    )
    _the_failure_decides(verdict_of(tmp_path, es))


def test_a_job_already_running_beside_the_failure_is_no_later_job(tmp_path: Path) -> None:
    """A second job of the campaign whose running entry the log took before the failure (the two overlap):
    its probe, snapshot and pass are logged after the failure, but the job is no run after it."""
    es = _failed_campaign()
    later = _later_job()
    job2 = entry(later, "job2")
    job2["at"] = job2["payload"]["started_at"] = "2026-09-10T10:00:06.500000Z"
    for e in later[1:]:
        e["at"] = e["at"].replace("T11:", "T10:").replace(":00:", ":55:")
    entry(later, "job2-cancelled")["payload"]["ended_at"] = entry(later, "job2-cancelled")["at"]
    v = verdict_of(tmp_path, es + later)
    assert _host_gate(v)["status"] == "failed" and v["verdict"] != "QUALIFIED", (v["verdict"], _host_gate(v))
    assert REASON in _host_gate(v)["reason"]


def test_a_later_job_of_another_campaign_is_no_run_again(tmp_path: Path) -> None:
    """Other names: its probe, snapshot and pass are another campaign's (the pass, filed under it, is
    not this subject's measurement at all)."""
    es = _failed_campaign() + _later_job(campaign="another-campaign")
    v = verdict_of(tmp_path, es)
    assert _host_gate(v)["status"] == "failed" and v["verdict"] == PREREQ
    assert REASON in _host_gate(v)["reason"]


def test_a_later_job_under_the_same_job_id_cannot_pass(tmp_path: Path) -> None:
    """Renamed to the first job's id: a job started again after it ended — a job ends once, so which run
    each of its entries belongs to cannot be told, and the verdict cannot pass (the job is unjudged)."""
    v = verdict_of(tmp_path, _failed_campaign() + _later_job(job_id="campaign-1"))
    assert v["verdict"] == "INCONCLUSIVE", v["verdict"]
    assert any("was started again" in u.get("detail", "") for u in v["unjudged"]), v["unjudged"]


def test_every_newest_result_must_be_a_run_again(tmp_path: Path) -> None:
    """A later job runs the step again and passes; a third logs a pass without a snapshot of its own: that
    newest result is no run again, so the failure still decides (every newest result must hold)."""
    es = _failed_campaign() + _later_job()
    third = _later_job(snapshot=False, job_id="campaign-3")
    for e in third:
        e["name"] = e["name"].replace("2", "3")
        e["at"] = e["at"].replace("T11:", "T12:")
        if "refs" in e:
            e["refs"] = {"job": "job3"}
        if e["kind"] == "job" and "ended_at" in e["payload"]:
            e["payload"]["ended_at"] = e["at"]
        if e["kind"] == "job" and "started_at" in e["payload"]:
            e["payload"]["started_at"] = e["at"]
    _the_failure_decides(verdict_of(tmp_path, es + third))


def test_a_later_job_whose_step_failed_again_fails_the_gate_with_its_reason(tmp_path: Path) -> None:
    """Run again (its own probe and snapshot) and failed again: the newest failure decides."""
    es = _failed_campaign() + _later_job()
    p = entry(es, "host-step2-passed")
    p["payload"] = {"gate": "host-prerequisites", "status": "failed", "order": 1, "reason": "no GPU"}
    v = verdict_of(tmp_path, es)
    assert _host_gate(v)["status"] == "failed" and v["verdict"] == PREREQ
    assert "no GPU" in _host_gate(v)["reason"]


# --- mistyped -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", ["Passed", "PASSED", "pass", " passed", None, True])
def test_a_mistyped_passed_status_is_refused_at_ingest(tmp_path: Path, status: Any) -> None:
    es = _failed_campaign()
    p = _passed("2026-09-10T10:49:00Z")
    p["payload"]["status"] = status
    es.insert(es.index(entry(es, "campaign-done")), p)
    with pytest.raises(SchemaError, match="status"):
        verdict_of(tmp_path, es)


@pytest.mark.parametrize("status", ["not_run", "not_authorized"])
def test_a_newer_result_that_ran_nothing_lifts_nothing(tmp_path: Path, status: str) -> None:
    es = _failed_campaign() + _later_job()
    entry(es, "host-step2-passed")["payload"]["status"] = status
    _the_failure_decides(verdict_of(tmp_path, es))


def test_a_passed_result_of_a_misspelled_gate_lifts_nothing(tmp_path: Path) -> None:
    es = _failed_campaign()
    p = _passed("2026-09-10T10:49:00Z")
    p["payload"]["gate"] = "Host-Prerequisites"
    es.insert(es.index(entry(es, "campaign-done")), p)
    v = verdict_of(tmp_path, es)
    assert _host_gate(v)["status"] == "failed" and v["verdict"] != "QUALIFIED"
    assert REASON in _host_gate(v)["reason"]


# --- one vocabulary -------------------------------------------------------------------------------------


def test_fix172_step_evidence_names_gates_the_shipped_policy_has() -> None:
    """A gate renamed in the policy but not in ``names.STEP_OWN_EVIDENCE`` would need no evidence of a run
    again (a result alone would lift a failure): the names are held to the shipped policy's gates."""
    from ledger.policy.loader import load_policy
    from ledger.policy.names import STEP_OWN_EVIDENCE

    gates = {g.spec.name for g in load_policy("backend-qualification").gates}
    assert set(STEP_OWN_EVIDENCE) <= gates, set(STEP_OWN_EVIDENCE) - gates
