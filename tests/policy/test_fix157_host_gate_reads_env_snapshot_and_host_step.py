"""Fix 157 (issue 11): host-prerequisites passed without the job's env snapshot.

The collector's host step failed (the engine's interpreter hung at start under the campaign's
``[engine] env``: no ``env.snapshot`` recorded, a failed ``host-prerequisites`` gate.result instead), and the
policy's host-prerequisites gate — ``kinds = ["host.probe"]`` — still passed on the host probe alone; the
failed result was left unjudged (INCONCLUSIVE at best).

Now the gate selects the host probes, the campaign's env snapshots (``in_subject``) and the collector's
host-prerequisites results. It passes only beside an env snapshot filed under the campaign and a host an
accepted probe names; the newest failed host result fails it (NOT QUALIFIED — PREREQUISITES, the
collector's reason named); a probe that would pass with no snapshot cannot be judged (INCONCLUSIVE, "no
accepted env snapshot of the job"), while one that shows the GPUs wrong still fails: a failure needs only
what shows it. Each neighbour — the snapshot dropped, of another campaign, of another host, of no host,
superseded (one signed by a key of no evidence role is refused at ingest); the result's reason dropped,
its gate misspelled, its claimed time earlier than the log's — fails closed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ledger.errors import RoleError
from tests.policy.test_fail_closed import entry, gates, qualified_entries, rejected, verdict_of

PREREQ = "NOT QUALIFIED — PREREQUISITES"
NO_SNAPSHOT = "no accepted env snapshot of the job"


def _host_gate(v: dict[str, Any]) -> dict[str, Any]:
    return next(g for g in v["gates"] if g["name"] == "host-prerequisites")


def _without(es: list[dict[str, Any]], *names: str) -> list[dict[str, Any]]:
    return [e for e in es if e.get("name") not in names]


def _host_result(
    status: str = "failed",
    at: str = "2026-09-10T10:00:07Z",
    *,
    reason: str | None = "the engine's interpreter cannot be read under the environment its engine runs "
    "under: cannot query interpreter /opt/vllm/bin/python: it did not answer within 60 s",
    name: str = "host-step",
    **more: Any,
) -> dict[str, Any]:
    payload: dict[str, Any] = {"gate": "host-prerequisites", "status": status, "order": 1}
    if reason is not None and status == "failed":
        payload["reason"] = reason
    return {
        "name": name,
        "kind": "gate.result",
        "key": "collector",
        "at": at,
        "refs": {"job": "campaign-job"},
        "payload": payload,
        **more,
    }


def _not_passed_for_want_of_a_snapshot(v: dict[str, Any]) -> None:
    host = _host_gate(v)
    assert host["status"] == "missing", host
    assert NO_SNAPSHOT in host["reason"], host
    assert v["verdict"] == "INCONCLUSIVE"


# --- the snapshot -----------------------------------------------------------------------------------------


def test_the_baseline_passes_on_the_probe_and_the_snapshot_beside_it(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, qualified_entries())
    assert v["verdict"] == "QUALIFIED"
    names = {v["_names"][i] for i in _host_gate(v)["evidence"]}
    # … and the campaign's launch: which interpreter the engine ran, where the job binds none (fix 164)
    assert names == {"host", "env", "launch"}


def test_the_snapshot_dropped_the_probe_alone_never_passes(tmp_path: Path) -> None:
    _not_passed_for_want_of_a_snapshot(verdict_of(tmp_path, _without(qualified_entries(), "env")))


def test_a_snapshot_of_another_campaign_is_not_the_jobs(tmp_path: Path) -> None:
    es = qualified_entries()
    entry(es, "env")["subject"] = {"campaign": "another-campaign"}
    _not_passed_for_want_of_a_snapshot(verdict_of(tmp_path, es))


@pytest.mark.parametrize("host", ["gpu-box-2", "GPU-BOX-1"])
def test_a_snapshot_filed_under_another_host_than_the_probes_binds_nothing(tmp_path: Path, host: str) -> None:
    """Bound exactly as recorded (both are filed under the campaign's subject by the same collector): another
    spelling of the host is not shown to be the probe's host."""
    es = qualified_entries()
    entry(es, "env")["subject"] = {"host": host}
    _not_passed_for_want_of_a_snapshot(verdict_of(tmp_path, es, subject={"campaign": "neighbour-campaign-7"}))


def test_a_snapshot_that_names_no_host_binds_nothing(tmp_path: Path) -> None:
    es = qualified_entries()
    entry(es, "env")["subject"] = {"host": None}
    _not_passed_for_want_of_a_snapshot(verdict_of(tmp_path, es, subject={"campaign": "neighbour-campaign-7"}))


def test_a_superseded_snapshot_is_none(tmp_path: Path) -> None:
    es = qualified_entries()
    es.append(
        {
            "name": "env-withdrawn",
            "kind": "supersession",
            "key": "operator",
            "at": "2026-09-10T10:00:08Z",
            "refs": {"supersedes": "env"},
            "payload": {"reason": "the snapshot of another interpreter"},
        }
    )
    v = verdict_of(tmp_path, es)
    _not_passed_for_want_of_a_snapshot(v)
    assert rejected(v)["env"] == "superseded"
    assert "only rejected evidence: 1 superseded" in _host_gate(v)["reason"]


def test_a_snapshot_signed_by_a_key_of_no_evidence_role_is_refused_at_ingest(tmp_path: Path) -> None:
    es = qualified_entries()
    entry(es, "env")["key"] = "reviewer"
    with pytest.raises(RoleError, match=r"env\.snapshot needs one of"):
        verdict_of(tmp_path, es)


def test_a_snapshot_recorded_before_its_probe_binds_all_the_same(tmp_path: Path) -> None:
    """Reordered: the binding is the host both name, not which the log took first."""
    es = qualified_entries()
    entry(es, "env")["at"] = "2026-09-10T10:00:01Z"
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "QUALIFIED"


# --- what fails without a snapshot ---------------------------------------------------------------------


def test_without_a_snapshot_a_probe_that_shows_no_gpu_still_fails(tmp_path: Path) -> None:
    es = _without(qualified_entries(), "env")
    entry(es, "host")["payload"]["gpus"] = []
    v = verdict_of(tmp_path, es)
    assert _host_gate(v)["status"] == "failed" and v["verdict"] == PREREQ
    assert "no GPU visible on the host" in _host_gate(v)["reason"]


def test_without_a_snapshot_a_gpu_gone_on_the_newest_probe_still_fails(tmp_path: Path) -> None:
    es = _without(qualified_entries(), "env")
    newer = {**entry(es, "host"), "name": "host-newer", "at": "2026-09-10T10:00:30Z"}
    newer["payload"] = {**newer["payload"], "gpus": newer["payload"]["gpus"][:2]}
    es.append(newer)
    v = verdict_of(tmp_path, es)
    assert _host_gate(v)["status"] == "failed" and v["verdict"] == PREREQ
    assert "gone from the host" in _host_gate(v)["reason"]


# --- the collector's host step ------------------------------------------------------------------------


def test_the_collectors_failed_host_step_fails_the_gate_with_its_reason(tmp_path: Path) -> None:
    """The fix-155 run: a host probe, the failed result, no snapshot (the interpreter hung)."""
    es = _without(qualified_entries(), "env")
    es.append(_host_result())
    v = verdict_of(tmp_path, es)
    host = _host_gate(v)
    assert host["status"] == "failed" and v["verdict"] == PREREQ, host
    assert "the collector recorded the job's host step failed" in host["reason"]
    assert "it did not answer within 60 s" in host["reason"]
    assert v["unjudged"] == []


def test_the_failed_host_step_fails_the_gate_beside_a_snapshot_too(tmp_path: Path) -> None:
    es = qualified_entries()
    es.append(_host_result(reason="the work disk has 0.5 GiB free < 10"))
    v = verdict_of(tmp_path, es)
    assert _host_gate(v)["status"] == "failed" and v["verdict"] == PREREQ
    assert "0.5 GiB free" in _host_gate(v)["reason"]


def test_a_failed_host_step_that_records_no_reason_still_fails(tmp_path: Path) -> None:
    es = _without(qualified_entries(), "env")
    es.append(_host_result(reason=None))
    v = verdict_of(tmp_path, es)
    assert _host_gate(v)["status"] == "failed" and v["verdict"] == PREREQ


def test_a_misspelled_host_gate_result_is_no_pass_either(tmp_path: Path) -> None:
    """Renamed: a gate the policy does not have is selected by none — unjudged, never harmless."""
    es = _without(qualified_entries(), "env")
    bad = _host_result()
    bad["payload"]["gate"] = "host-prerequisite"
    es.append(bad)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "INCONCLUSIVE"
    assert _host_gate(v)["status"] != "passed"
    assert [u["gate"] for u in v["unjudged"]] == ["host-prerequisite"]


def test_a_failed_host_step_of_another_subject_still_counts(tmp_path: Path) -> None:
    """Read because it refs this campaign's job, it names another campaign: credit withheld
    (other-subject), the failure it shows still fails the gate."""
    es = qualified_entries()
    es.append(_host_result(subject={"campaign": "another-campaign"}))
    v = verdict_of(tmp_path, es)
    assert rejected(v)["host-step"] == "other-subject"
    assert _host_gate(v)["status"] == "failed" and v["verdict"] == PREREQ


def test_a_newer_passed_host_step_in_the_same_job_is_no_run_again(tmp_path: Path) -> None:
    """An earlier failed host step, then a newer passed one in the same job: the log shows no step run
    again (fix 172: a later job of the campaign that logged its own probe and snapshot — the fixture
    fix157-collector-host-step-failed's job 2 is one, judged on the new run), so the failure decides."""
    es = qualified_entries()
    es.append(_host_result(at="2026-09-10T10:00:04Z", name="host-step-earlier"))
    es.append(_host_result("passed", at="2026-09-10T10:00:07Z"))
    v = verdict_of(tmp_path, es)
    assert gates(v)["host-prerequisites"] == "failed" and v["verdict"] == PREREQ


def test_a_newer_failed_host_step_fails_whatever_passed_before(tmp_path: Path) -> None:
    es = qualified_entries()
    es.append(_host_result("passed", at="2026-09-10T10:00:04Z", name="host-step-earlier"))
    es.append(_host_result(at="2026-09-10T10:00:07Z"))
    v = verdict_of(tmp_path, es)
    assert gates(v)["host-prerequisites"] == "failed" and v["verdict"] == PREREQ


def test_a_failed_host_step_claiming_an_earlier_time_than_the_log_took_it_still_fails(tmp_path: Path) -> None:
    """Reordered by its claim: observed 10:00:03, logged after the passed result — the newest both ways
    (the one the log took last and every one observed last) must hold, so the claim hides nothing."""
    es = qualified_entries()
    es.append(_host_result("passed", at="2026-09-10T10:00:07Z", name="host-step-passed"))
    es.append(_host_result(at="2026-09-10T10:00:03Z", logged_at="2026-09-10T10:00:09Z"))
    v = verdict_of(tmp_path, es)
    assert gates(v)["host-prerequisites"] == "failed" and v["verdict"] == PREREQ


@pytest.mark.parametrize("status", ["passed", "not_run", "not_authorized"])
def test_a_host_result_that_records_no_failure_is_no_snapshot(tmp_path: Path, status: str) -> None:
    """A passed result is the collector's claim: the gate still needs the snapshot to pass."""
    es = _without(qualified_entries(), "env")
    es.append(_host_result(status))
    _not_passed_for_want_of_a_snapshot(verdict_of(tmp_path, es))
