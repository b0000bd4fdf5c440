"""A job that never ended keeps the verdict from QUALIFIED: its run's outcome is unknown.

Regression: a collector SIGKILLed mid-run (the OOM killer, ``kill -9``, a CI runner's timeout) leaves its
job ``running`` for ever — its engine launch is logged when the run ends, so nothing of that run but its
running entry (and what probes it logged) is in the log. The verdict judged the campaign without it and
stayed QUALIFIED on an earlier job's evidence. Now every job of the campaign that a running entry started
and no terminal entry ended is listed under ``unjudged`` (kind ``job``) and the verdict is INCONCLUSIVE,
saying whether its lease ran out by the reference time (the collector stopped without recording the end)
or may still run; a verdict some gate already failed stands.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.policy.test_fail_closed import entry, qualified_entries, verdict_of
from tests.policy.test_withheld_failures import RUNTIME, _crash

QUALIFIED = "QUALIFIED"
INCONCLUSIVE = "INCONCLUSIVE"
SUBJECT = {"campaign": "neighbour-campaign-7"}


def _second_job(es: list[dict[str, Any]], at: str = "2026-09-10T10:55:00Z", **payload: Any) -> dict[str, Any]:
    """A second job of the campaign, started after the first ended, whose collector was killed: only its
    running entry is logged."""
    job = copy.deepcopy(entry(es, "campaign-job"))
    job["name"], job["at"] = "second-job", at
    job["payload"].update(job_id="campaign-2", started_at=at, **payload)
    es.append(job)
    return job


def _ended(name: str, job_id: str, state: str, at: str) -> dict[str, Any]:
    return {
        "name": name,
        "kind": "job",
        "key": "operator",
        "at": at,
        "payload": {"job_id": job_id, "state": state, "ended_at": at, "reason": "collector killed"},
    }


def _other_campaign_entry(es: list[dict[str, Any]], at: str) -> None:
    """An entry of another campaign at ``at``: the log's time moves on (the reference time with it)."""
    es.append(
        {
            "name": f"elsewhere-{at}",
            "kind": "job",
            "key": "collector",
            "at": at,
            "subject": {"campaign": "other-campaign", "host": "gpu-box-9"},
            "payload": {"job_id": f"other-{at}", "state": "running", "lease_seconds": 60.0},
        }
    )


def _unended(v: dict[str, Any]) -> list[dict[str, str]]:
    return [u for u in v["unjudged"] if u.get("kind") == "job"]


def test_a_job_whose_collector_was_killed_keeps_the_campaign_from_qualified(tmp_path: Path) -> None:
    """Regression: the second job's collector was SIGKILLed before its launch was logged — QUALIFIED."""
    es = qualified_entries()
    _second_job(es)
    _other_campaign_entry(es, "2026-09-10T12:00:00Z")  # past the second job's lease (3600 s)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == INCONCLUSIVE
    (u,) = _unended(v)
    assert u["job_id"] == "campaign-2" and v["_names"][u["entry"]] == "second-job"
    assert "lease of 3600 s ran out at 2026-09-10T11:55:00" in u["detail"]
    assert "killed?" in u["detail"] and "ledger record job" in u["detail"]
    assert all(g["status"] == "passed" for g in v["gates"])  # the ladder itself passed


def test_a_job_still_within_its_lease_may_still_run(tmp_path: Path) -> None:
    es = qualified_entries()
    _second_job(es)
    v = verdict_of(tmp_path, es)  # judged at the running entry's own log time
    assert v["verdict"] == INCONCLUSIVE
    (u,) = _unended(v)
    assert "may still run (its lease runs to 2026-09-10T11:55:00" in u["detail"]


def test_the_campaigns_only_job_left_running_is_inconclusive(tmp_path: Path) -> None:
    """The neighbour: no terminal entry at all for the job that produced every piece of evidence."""
    es = [e for e in qualified_entries() if e.get("name") != "campaign-done"]
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == INCONCLUSIVE
    assert [u["job_id"] for u in _unended(v)] == ["campaign-1"]


@pytest.mark.parametrize("drop", ["lease_seconds", None])
def test_a_job_without_a_lease_is_never_taken_as_ended(tmp_path: Path, drop: str | None) -> None:
    es = qualified_entries()
    job = _second_job(es)
    if drop:
        job["payload"].pop(drop)
    else:
        job["payload"]["lease_seconds"] = None
    _other_campaign_entry(es, "2026-09-20T12:00:00Z")
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == INCONCLUSIVE
    (u,) = _unended(v)
    assert "records no lease" in u["detail"]


@pytest.mark.parametrize("state", ["killed", "failed", "cancelled", "succeeded"])
def test_a_job_whose_end_is_recorded_is_no_longer_unended(tmp_path: Path, state: str) -> None:
    es = qualified_entries()
    _second_job(es)
    es.append(_ended("second-end", "campaign-2", state, "2026-09-10T12:10:00Z"))
    v = verdict_of(tmp_path, es)
    if state == "failed":  # ended, but its failure no result records: no gate judges it
        (u,) = _unended(v)
        assert "ended failed (collector killed)" in u["detail"]
        assert v["verdict"] == INCONCLUSIVE
    else:
        assert _unended(v) == []
        assert v["verdict"] == QUALIFIED  # the second job logged nothing of its run


def test_an_end_under_a_misspelled_job_id_does_not_end_it(tmp_path: Path) -> None:
    es = qualified_entries()
    _second_job(es)
    es.append(_ended("second-end", "campaign-02", "killed", "2026-09-10T12:10:00Z"))
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == INCONCLUSIVE
    # the misspelled end ends no run (unmatched, listed with its own detail); campaign-2 is still open
    assert sorted(u["job_id"] for u in _unended(v)) == ["campaign-02", "campaign-2"]
    assert any("no running entry of that job was logged before it" in u["detail"] for u in _unended(v))


def test_an_end_superseded_with_its_reason_opens_the_job_again(tmp_path: Path) -> None:
    es = qualified_entries()
    _second_job(es)
    es.append(_ended("second-end", "campaign-2", "killed", "2026-09-10T12:10:00Z"))
    es.append(
        {
            "name": "withdraw-end",
            "kind": "supersession",
            "key": "reviewer",
            "at": "2026-09-10T12:11:00Z",
            "refs": {"supersedes": "second-end"},
            "payload": {"reason": "recorded against the wrong job"},
        }
    )
    v = verdict_of(tmp_path, es)
    assert [u["job_id"] for u in _unended(v)] == ["campaign-2"]


def test_a_running_entry_superseded_with_its_reason_is_no_job(tmp_path: Path) -> None:
    es = qualified_entries()
    _second_job(es)
    es.append(
        {
            "name": "withdraw-start",
            "kind": "supersession",
            "key": "operator",
            "at": "2026-09-10T12:11:00Z",
            "refs": {"supersedes": "second-job"},
            "payload": {"reason": "a dry run entered by hand"},
        }
    )
    v = verdict_of(tmp_path, es)
    assert _unended(v) == []
    assert v["verdict"] == QUALIFIED


def test_a_job_started_again_after_its_end_is_open_again(tmp_path: Path) -> None:
    es = qualified_entries()
    restart = copy.deepcopy(entry(es, "campaign-job"))
    restart["name"], restart["at"] = "restart", "2026-09-10T10:55:00Z"
    es.append(restart)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == INCONCLUSIVE
    # started again after its end (what it ran is not told apart from the first run), and never ended
    got = [(u["job_id"], v["_names"][u["entry"]], u["detail"]) for u in _unended(v)]
    assert [g[:2] for g in got] == [("campaign-1", "restart")] * 2
    assert "was started again" in got[0][2] and "no terminal entry" in got[1][2]


def test_a_job_of_another_campaign_left_running_is_not_this_campaigns(tmp_path: Path) -> None:
    es = qualified_entries()
    _other_campaign_entry(es, "2026-09-10T12:00:00Z")
    v = verdict_of(tmp_path, es)
    assert _unended(v) == []
    assert v["verdict"] == QUALIFIED


def test_a_verdict_a_gate_failed_stands_beside_an_unended_job(tmp_path: Path) -> None:
    es = qualified_entries()
    _crash(es)
    _second_job(es)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == RUNTIME
    assert [u["job_id"] for u in _unended(v)] == ["campaign-2"]


def test_the_start_is_the_log_time_not_the_claimed_started_at(tmp_path: Path) -> None:
    """A running entry that claims to have started a day earlier (its lease long run out) is judged from
    when the log took it: it may still run."""
    es = qualified_entries()
    _second_job(es, at="2026-09-10T10:55:00Z")["payload"]["started_at"] = "2026-09-09T10:55:00Z"
    v = verdict_of(tmp_path, es)
    (u,) = _unended(v)
    assert "may still run" in u["detail"]


def test_the_routing_check_refuses_naming_the_unended_job(tmp_path: Path) -> None:
    """A QUALIFIED verdict was recorded; then a new job of the campaign started and its collector was
    killed: the routing gate re-derives the verdict, refuses, and names the job."""
    from tests.test_routing_at_reference_time import CAMPAIGN, route_campaign

    es = qualified_entries()
    es.append(
        {
            "name": "verdict",
            "at": "2026-09-10T11:00:00Z",
            "record_verdict": {"subject": {"campaign": CAMPAIGN["campaign"]}, "key": "reviewer"},
        }
    )
    _second_job(es, at="2026-09-10T11:05:00Z")
    r = route_campaign(tmp_path, es, "2026-09-10T11:30:00Z")
    assert r["allowed"] is False
    assert any("job campaign-2" in x and "no terminal entry" in x for x in r["reasons"]), r["reasons"]


def test_the_verdict_command_names_the_unended_job(tmp_path: Path, cli: Any) -> None:
    from tests.test_routing_at_reference_time import CAMPAIGN, _campaign_home

    es = qualified_entries()
    _second_job(es)
    home, ledger, _b = _campaign_home(tmp_path, es)
    ledger.close()
    r = cli("verdict", "--home", str(home), "--subject", f"campaign={CAMPAIGN['campaign']}")
    assert r.code == 0, r.err
    assert r.out.startswith("INCONCLUSIVE")
    # on a pipe a table is one tab-separated line per row: entry, kind, gate, why
    assert any(
        line.split("\t")[1:2] == ["job"] and "job campaign-2" in line for line in r.out.splitlines()
    ), r.out


# --- neighbours an independent audit found judged QUALIFIED ------------------------------------------------


def test_a_withdrawn_failed_result_does_not_judge_its_jobs_failure(tmp_path: Path) -> None:
    """Regression: the failed job's only failed result, superseded ("recorded wrongly"), still counted as
    the result that judged the job's failure: QUALIFIED. Recording a failure and withdrawing it counts for
    no more than never recording it."""
    es = qualified_entries()
    entry(es, "campaign-done")["payload"].update(state="failed", exit_code=1, reason="engine crashed")
    bogus = {
        "name": "bogus",
        "kind": "gate.result",
        "key": "collector",
        "at": "2026-09-10T10:45:00Z",
        "refs": {"job": "campaign-job"},
        "payload": {"gate": "xyz-bogus", "status": "failed", "reason": "engine crashed"},
    }
    withdraw = {
        "name": "withdraw",
        "kind": "supersession",
        "key": "operator",
        "at": "2026-09-10T10:46:00Z",
        "refs": {"supersedes": "bogus"},
        "payload": {"reason": "recorded wrongly"},
    }
    i = es.index(entry(es, "campaign-done"))
    es[i:i] = [bogus, withdraw]
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == INCONCLUSIVE
    assert any("ended failed (engine crashed)" in u["detail"] for u in _unended(v))


def _other_campaigns_end(es: list[dict[str, Any]]) -> None:
    es.append(
        {
            "name": "other-done",
            "kind": "job",
            "key": "collector",
            "at": "2026-09-10T10:49:00Z",
            "subject": {"campaign": "other-campaign"},
            "refs": {"job": "campaign-job"},  # what reads it with this campaign
            "payload": {"job_id": "campaign-1", "state": "succeeded", "exit_code": 0},
        }
    )


@pytest.mark.parametrize("ours", ["never-ended", "ended-failed"])
def test_another_campaigns_end_under_the_same_job_id_does_not_end_this_job(tmp_path: Path, ours: str) -> None:
    """Regression: a terminal entry of another campaign under this job's job_id ended it: QUALIFIED."""
    es = qualified_entries()
    if ours == "never-ended":
        es.remove(entry(es, "campaign-done"))
    else:
        entry(es, "campaign-done")["payload"].update(state="failed", exit_code=1, reason="collector error")
    _other_campaigns_end(es)
    es.sort(key=lambda e: str(e.get("at", "")))
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == INCONCLUSIVE
    (u,) = _unended(v)
    assert u["job_id"] == "campaign-1"
    assert ("no terminal entry" if ours == "never-ended" else "ended failed") in u["detail"]


@pytest.mark.parametrize("second_end", ["succeeded", "failed", None])
def test_a_job_started_again_under_its_id_is_not_judged_as_one_run(
    tmp_path: Path, second_end: str | None
) -> None:
    """Regression: the job was started again under its job_id after it ended succeeded, and the rerun's
    engine crashed: the crash was withdrawn as output after the first run's end (a job ends once), QUALIFIED.
    Which run each entry belongs to cannot be told: INCONCLUSIVE, naming the restart."""
    es = qualified_entries()
    rerun = copy.deepcopy(entry(es, "campaign-job"))
    rerun["name"], rerun["at"] = "rerun", "2026-09-10T10:55:00Z"
    rerun["payload"]["started_at"] = "2026-09-10T10:55:00Z"
    crash = copy.deepcopy(entry(es, "launch"))
    crash["name"], crash["at"], crash["refs"] = "crash", "2026-09-10T10:57:00Z", {"job": "rerun"}
    crash["payload"].update(
        exit_code=1, failure_signature="engine-exited-after-readiness", started_at="2026-09-10T10:55:10Z"
    )
    es += [rerun, crash]
    if second_end is not None:
        es.append(_ended("second-end", "campaign-1", second_end, "2026-09-10T11:00:00Z"))
    v = verdict_of(tmp_path, es)
    assert v["verdict"] != QUALIFIED
    assert any("was started again" in u["detail"] for u in _unended(v)), v["unjudged"]
