"""Fix 71 (audit 60 f1): a crash logged after an earlier, unrelated job of the campaign was cancelled was
withdrawn as that job's output.

``_derive`` set ``e.derived.job`` — the job the log knows an entry ran in — to "the latest job to start"
when no job was open, even one that had ended; ``after-job-terminal`` then found the ended job's
``cancelled`` end, and the entry — logged after it, claiming a time after it — was withdrawn ("output after
its job ended, when its engine was gone"). An ``EngineDeadError`` crash launched after job 1 was cancelled
was no evidence at all, a later passing job made the campaign QUALIFIED and routing was allowed; the same
crash without the cancelled job before it failed runtime-stability. Whether a failure counts depended on an
unrelated earlier job being cancelled.

Now the job an entry ran in is the one open when the log took it (``_JobLog.open_at``, the one job reading);
output logged after every job of the campaign ended belongs to none of them: not credited
(``after-job-terminal``, credit only), and a failure it shows counts against the engine. An entry the log
took while a job of its campaign ran (another job, or the same job started again), and an engine launch
that started after the job ended (a new engine), are no output of the ended job: ``after-job-terminal`` only
withholds their credit. The killed job's own late output (it names the job, is logged after its end with
no job open, and claims a time after the end) is still withdrawn, and a supersession of the crash itself
still withdraws it. Details no longer print an exit code never recorded ("cancelled/None", "(exit None)").
"""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path
from typing import Any

import pytest

from ledger.entries import parse_time
from ledger.policy.fixtures import _Builder
from ledger.policy.loader import load_policy
from ledger.policy.verdict import evaluate
from ledger.service import Ledger
from tests.policy.conftest import FIXTURES, POLICY_DIR

SUBJECT = {"campaign": "fix71-campaign", "backend": "vllm", "model": "m-71", "host": "gpu-box-1"}
KEYS = {"collector": ["collector"], "reviewer": ["reviewer"], "operator": ["operator"]}
RUNTIME = "NOT QUALIFIED — RUNTIME RELIABILITY"
CRASH = {
    "ready": False,
    "exit_code": -6,
    "signal": 6,
    "failure_signature": "engine-dead",
    "failure_detail": "EngineDeadError: engine core died",
}


def _campaign() -> list[dict[str, Any]]:
    """The shared campaign that passes every gate: job campaign-1, 10:00 to 10:50."""
    out: list[dict[str, Any]] = []
    for name in ("ready-campaign", "semantic-benchmark"):
        out += tomllib.loads((FIXTURES / "_shared" / f"{name}.toml").read_text())["entries"]
    return copy.deepcopy(out)


def _by(entries: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(e for e in entries if e.get("name") == name)


def _job(name: str, job_id: str, at: str, state: str = "running", **kw: Any) -> dict[str, Any]:
    p: dict[str, Any] = {"job_id": job_id, "state": state}
    if state == "running":
        spec = copy.deepcopy(_by(_campaign(), "campaign-job")["payload"]["spec"])
        p.update(started_at=at, lease_seconds=3600.0, spec=spec)
    else:
        p.update(ended_at=at)
    p.update(kw)
    return {"name": name, "kind": "job", "key": "collector", "at": at, "payload": p}


def _launch(name: str, at: str, started: str, job: str | None = None, **payload: Any) -> dict[str, Any]:
    """An engine launch logged (and collected) at ``at`` that started at ``started``: ready unless
    ``payload`` says otherwise; naming ``job`` (ref job) where given."""
    launch = copy.deepcopy(_by(_campaign(), "launch"))
    launch.update(name=name, at=at)
    launch.pop("refs")
    if job is not None:
        launch["refs"] = {"job": job}
    launch["payload"].update(started_at=started, **payload)
    if launch["payload"].get("ready") is False:
        for k in ("ready_endpoint", "time_to_ready_s"):
            launch["payload"].pop(k, None)
    return launch


def _crash(name: str, at: str, started: str, job: str | None = None) -> dict[str, Any]:
    """An ``EngineDeadError`` crash launch that started at ``started``, ended and was logged at ``at``."""
    return _launch(name, at, started, job, ended_at=at, **CRASH)


def _cancelled_job1() -> list[dict[str, Any]]:
    """Job 1 of the campaign: a ready launch and a passing probe, then cancelled by the operator (SIGINT,
    no exit code recorded) at 09:35 — before anything below."""
    probe = copy.deepcopy(_by(_campaign(), "health"))
    probe.update(name="job1-health", at="2026-09-10T09:31:05Z", refs={"job": "job1-start"})
    return [
        _job("job1-start", "job1", "2026-09-10T09:30:00Z"),
        _launch("job1-launch", "2026-09-10T09:31:00Z", "2026-09-10T09:30:20Z", "job1-start"),
        probe,
        _job(
            "job1-cancelled",
            "job1",
            "2026-09-10T09:35:00Z",
            "cancelled",
            cancelled_by="SIGINT",
            reason="operator pressed Ctrl-C",
        ),
    ]


def _supersede(name: str, target: str, at: str, reason: str) -> dict[str, Any]:
    return {
        "name": name,
        "kind": "supersession",
        "key": "operator",
        "at": at,
        "refs": {"supersedes": target},
        "payload": {"reason": reason},
    }


def _verdict(tmp_path: Path, entries: list[dict[str, Any]]) -> dict[str, Any]:
    home = tmp_path / f"home-{len(list(tmp_path.glob('home-*')))}"
    ledger = Ledger.init(home, genesis_at=parse_time("2026-09-10T09:00:00Z"))
    try:
        spec = {"start": "2026-09-10T09:00:00Z", "keys": KEYS, "defaults": {"subject": SUBJECT}}
        b = _Builder(ledger, {**spec, "entries": entries}, POLICY_DIR)
        b.enrol_keys()
        b.add_all(entries)
        out = evaluate(ledger, dict(SUBJECT), load_policy("backend-qualification", POLICY_DIR))
        names = {str(e.entry_id): n for n, e in b.names.items()}
        out["_rejected"] = {names.get(r["entry"], r["entry"]): r for r in out["rejected"]}
        return out
    finally:
        ledger.close()


def _rule(v: dict[str, Any], name: str) -> tuple[str, bool] | None:
    """How the verdict judged entry ``name``: (rule, counts_against), or None where it was not rejected."""
    r = v["_rejected"].get(name)
    return None if r is None else (r["rule"], r.get("counts_against") is True)


def _crash_job2_superseded() -> list[dict[str, Any]]:
    """Case A's job 2: a crash that names it, its end failed, and its running entry superseded."""
    return [
        _job("job2-start", "job2", "2026-09-10T09:40:00Z"),
        _crash("crash", "2026-09-10T09:41:00Z", "2026-09-10T09:40:10Z", "job2-start"),
        _job("job2-failed", "job2", "2026-09-10T09:45:00Z", "failed", exit_code=1),
        _supersede("job2-superseded", "job2-start", "2026-09-10T09:46:00Z", "job2 ran the wrong spec; rerun"),
    ]


def test_neighbour_the_campaign_alone_qualifies(tmp_path: Path) -> None:
    assert _verdict(tmp_path, _campaign())["verdict"] == "QUALIFIED"


def test_a_crash_after_an_earlier_cancelled_job_was_withdrawn_as_its_output(tmp_path: Path) -> None:
    """Regression (case A): job 1 cancelled; job 2 crashes (EngineDeadError, ref job2), ends failed, and its
    running entry is superseded; the campaign's next job passes everything. The crash was withdrawn as
    ``after-job-terminal`` of job 1 ("ended cancelled/None"), and the campaign was QUALIFIED."""
    v = _verdict(tmp_path, _cancelled_job1() + _crash_job2_superseded() + _campaign())
    assert v["verdict"] == RUNTIME, v["_rejected"]
    assert _rule(v, "crash") is None  # the evidence it is without job 1 (case A′)
    assert "None" not in " ".join(r["detail"] for r in v["rejected"])


def test_neighbour_the_same_crash_without_the_cancelled_job_counts(tmp_path: Path) -> None:
    """Case A′: the same steps without job 1 — the crash counts (it always did)."""
    v = _verdict(tmp_path, _crash_job2_superseded() + _campaign())
    assert v["verdict"] == RUNTIME
    assert _rule(v, "crash") is None


def test_a_standalone_crash_after_a_cancelled_job_counts_against_the_engine(tmp_path: Path) -> None:
    """Case B: job 1 cancelled, then a crash launch that names no job (as `collect launch` records it),
    logged when no job was open; the next job passes. It belongs to no job: no job's end withdraws it, so
    it counts against the engine (not credited either)."""
    v = _verdict(
        tmp_path,
        [*_cancelled_job1(), _crash("crash", "2026-09-10T09:41:00Z", "2026-09-10T09:40:10Z"), *_campaign()],
    )
    assert v["verdict"] == RUNTIME, v["_rejected"]
    assert _rule(v, "crash") == ("after-job-terminal", True)
    detail = v["_rejected"]["crash"]["detail"]
    assert "when no job of campaign" in detail and "ended cancelled (terminal entry" in detail, detail
    assert "None" not in detail


def test_neighbour_a_standalone_crash_with_no_earlier_job_counts(tmp_path: Path) -> None:
    """Case B′: the same crash with no job before it."""
    v = _verdict(tmp_path, [_crash("crash", "2026-09-10T09:41:00Z", "2026-09-10T09:40:10Z"), *_campaign()])
    assert v["verdict"] == RUNTIME
    assert _rule(v, "crash") is None


@pytest.mark.parametrize("ended", ["succeeded", "failed", "killed"])
def test_a_standalone_crash_after_an_earlier_job_ended_any_way_counts(tmp_path: Path, ended: str) -> None:
    """Neighbour: whatever the earlier job ended as, a later crash that names no job still counts."""
    entries = _cancelled_job1()
    end = _by(entries, "job1-cancelled")["payload"]
    end.update(state=ended, exit_code=0 if ended == "succeeded" else 137)
    end.pop("cancelled_by")
    v = _verdict(
        tmp_path, [*entries, _crash("crash", "2026-09-10T09:41:00Z", "2026-09-10T09:40:10Z"), *_campaign()]
    )
    assert v["verdict"] == RUNTIME, v["_rejected"]
    assert _rule(v, "crash") == ("after-job-terminal", True)


def test_a_crash_after_the_same_job_id_was_started_again_counts(tmp_path: Path) -> None:
    """s7: job 1 cancelled, then started again under the same job_id; the second run crashes and ends
    failed. The crash was withdrawn as output after job 1's (first) end: INCONCLUSIVE ("started again")
    where a gate already failed. The log took it while job 1 ran again: it counts (a verdict a gate
    already failed stands), and the restart is still named as unjudged."""
    entries = [
        *_cancelled_job1(),
        _job("job1-again", "job1", "2026-09-10T09:40:00Z"),
        _crash("crash", "2026-09-10T09:41:00Z", "2026-09-10T09:40:10Z", "job1-again"),
        _job("job1-failed", "job1", "2026-09-10T09:45:00Z", "failed"),
    ]
    # the host probe, the job's env snapshot beside it (the host gate judges the host on both: fix 157),
    # the pin
    host_pin = [e for e in _campaign() if e["name"] in ("host", "env", "pin")]
    times = ("2026-09-10T09:30:05Z", "2026-09-10T09:30:07Z", "2026-09-10T09:30:10Z")
    for e, at in zip(host_pin, times, strict=True):
        e["at"] = at
        e.pop("refs", None)  # the shared fixture's job is not this campaign's
    v = _verdict(tmp_path, entries + host_pin)
    assert v["verdict"].startswith("NOT QUALIFIED"), (v["verdict"], v["_rejected"])
    assert _rule(v, "crash") == ("after-job-terminal", True)
    assert "ran again" in v["_rejected"]["crash"]["detail"]
    assert any("started again" in u["detail"] for u in v["unjudged"])


def test_a_pass_logged_after_the_cancelled_job_with_no_job_open_is_not_credited(tmp_path: Path) -> None:
    """Neighbour: the campaign's job is cancelled before its engine starts, and a whole passing run follows
    naming no job, logged when no job was open. It belongs to no job and is not credited (it was withdrawn
    as the cancelled job's output before); nothing it shows counts against the engine."""
    entries = _campaign()
    _by(entries, "campaign-done")["payload"].update(state="cancelled", cancelled_by="SIGINT")
    _by(entries, "campaign-done")["payload"].pop("exit_code", None)
    _by(entries, "campaign-done")["at"] = _by(entries, "campaign-done")["payload"]["ended_at"] = (
        "2026-09-10T10:00:15Z"
    )
    for e in entries:
        if e.get("refs", {}).get("job") == "campaign-job":
            e.pop("refs")
    v = _verdict(tmp_path, entries)
    assert v["verdict"] == "INCONCLUSIVE", v["_rejected"]
    for name in ("launch", "completion", "semantic", "benchmark"):
        assert _rule(v, name) == ("after-job-terminal", False), (name, v["_rejected"].get(name))
        # of no job: not the cancelled job's output (it was withdrawn as that before)
        assert "when no job of campaign" in v["_rejected"][name]["detail"]


def test_neighbour_a_pass_naming_no_job_before_any_job_is_credited_as_before(tmp_path: Path) -> None:
    """Output with no job before any job of the campaign started is judged as it always was."""
    entries = _campaign()
    for e in entries:
        if e.get("refs", {}).get("job") == "campaign-job":
            e.pop("refs")
    start = _by(entries, "campaign-job")
    start["at"] = start["payload"]["started_at"] = "2026-09-10T10:49:00Z"
    assert _verdict(tmp_path, entries)["verdict"] == "QUALIFIED"


def _late_probe(job: str | None) -> dict[str, Any]:
    """A READY control that failed (the engine was gone), collected and logged at 09:36, after job 1's
    cancel and before any other job started."""
    probe = copy.deepcopy(_by(_campaign(), "completion"))
    probe.update(name="late-probe", at="2026-09-10T09:36:00Z")
    probe.pop("refs")
    if job is not None:
        probe["refs"] = {"job": job}
    probe["payload"].update(ok=False, http_status=None, text=None, error="connection refused")
    return probe


def test_the_killed_jobs_own_late_output_is_still_withdrawn(tmp_path: Path) -> None:
    """Neighbour (as before): output naming the cancelled job, logged after its end with no job open and
    claiming a time after the end — its engine gone — is withdrawn: a failed probe, and the crash of the
    engine that started inside the job."""
    late = [
        _late_probe("job1-start"),
        _crash("late-crash", "2026-09-10T09:36:00Z", "2026-09-10T09:30:20Z", "job1-start"),
    ]
    v = _verdict(tmp_path, _cancelled_job1() + late + _campaign())
    assert v["verdict"] == "QUALIFIED", v["_rejected"]
    assert _rule(v, "late-probe") == ("after-job-terminal", False)
    assert _rule(v, "late-crash") == ("after-job-terminal", False)
    assert "ended cancelled at" in v["_rejected"]["late-probe"]["detail"]
    assert "None" not in v["_rejected"]["late-probe"]["detail"]


def test_a_launch_naming_the_cancelled_job_that_started_after_its_end_is_a_new_engine(tmp_path: Path) -> None:
    """Neighbour: a crash that names job 1 but started after job 1 ended (and was logged when no job was
    open) is a new engine, never job 1's output: it counts."""
    crash = _crash("crash", "2026-09-10T09:41:00Z", "2026-09-10T09:40:10Z", "job1-start")
    v = _verdict(tmp_path, [*_cancelled_job1(), crash, *_campaign()])
    assert v["verdict"] == RUNTIME, v["_rejected"]
    assert _rule(v, "crash") == ("after-job-terminal", True)
    assert "a new engine" in v["_rejected"]["crash"]["detail"]


@pytest.mark.parametrize("started", ["2026-09-10T09:34:00Z", "2026-09-10T10:01:10Z"])
def test_a_crash_naming_the_cancelled_job_logged_while_the_next_job_ran_is_that_jobs(
    tmp_path: Path, started: str
) -> None:
    """Neighbour: a crash whose entry names job 1 (the cancelled job) but that the log took after the next
    job started — whether it claims to have started inside job 1 or after — is the running job's (the log
    decides): it counts."""
    crash = _crash("crash", "2026-09-10T10:01:30Z", started, "job1-start")
    v = _verdict(tmp_path, [*_cancelled_job1(), crash, *_campaign()])
    assert v["verdict"] == RUNTIME, v["_rejected"]
    assert _rule(v, "crash") == ("after-job-terminal", True)
    assert "while job campaign-1 ran" in v["_rejected"]["crash"]["detail"]


def test_a_crash_logged_before_the_cancelled_entry_counts(tmp_path: Path) -> None:
    """Neighbour, reordered: the same standalone crash logged before job 1's cancelled entry (the job still
    open) — it claims a time after the job's end, so its credit is withheld and it counts, as before."""
    entries = _cancelled_job1()
    end = _by(entries, "job1-cancelled")
    end["logged_at"] = "2026-09-10T09:42:00Z"
    crash = _crash("crash", "2026-09-10T09:41:00Z", "2026-09-10T09:40:10Z")
    v = _verdict(tmp_path, [*entries, crash, *_campaign()])
    assert v["verdict"] == RUNTIME, v["_rejected"]
    assert _rule(v, "crash") == ("after-job-terminal", True)


def test_a_crash_after_a_cancelled_job_superseded_with_a_reason_is_withdrawn(tmp_path: Path) -> None:
    """Neighbour: only a supersession of the crash itself, with its reason, withdraws it."""
    crash = _crash("crash", "2026-09-10T09:41:00Z", "2026-09-10T09:40:10Z")
    sup = _supersede("crash-superseded", "crash", "2026-09-10T09:42:00Z", "the host was being rebooted")
    v = _verdict(tmp_path, [*_cancelled_job1(), crash, sup, *_campaign()])
    assert v["verdict"] == "QUALIFIED", v["_rejected"]
    assert _rule(v, "crash") == ("superseded", False)


def test_the_killed_run_detail_leaves_out_an_exit_code_never_recorded(tmp_path: Path) -> None:
    """Minor: ``killed-run`` said "(exit None)" for a job whose end records no exit code."""
    v = _verdict(tmp_path, _cancelled_job1() + _campaign())
    assert v["verdict"] == "QUALIFIED"
    detail = v["_rejected"]["job1-launch"]["detail"]
    assert _rule(v, "job1-launch") == ("killed-run", False)
    assert "that was cancelled:" in detail and "None" not in detail, detail


# --- audit 63: the neighbours of the one job reading ------------------------------------------------------


def _killed_job1_passing(*, superseded: bool, names_job: bool) -> list[dict[str, Any]]:
    """Job 1: a ready launch and a passing probe (naming the job or not), then killed (exit 137); its
    running entry superseded ("wrong spec") where ``superseded``."""
    probe = copy.deepcopy(_by(_campaign(), "health"))
    probe.update(name="job1-health", at="2026-09-10T09:31:05Z")
    probe.pop("refs", None)
    if names_job:
        probe["refs"] = {"job": "job1-start"}
    out = [
        _job("job1-start", "job1", "2026-09-10T09:30:00Z"),
        _launch(
            "job1-launch", "2026-09-10T09:31:00Z", "2026-09-10T09:30:20Z", "job1-start" if names_job else None
        ),
        probe,
        _job("job1-killed", "job1", "2026-09-10T09:35:00Z", "killed", exit_code=137),
    ]
    if superseded:
        out.append(
            _supersede("job1-superseded", "job1-start", "2026-09-10T09:36:00Z", "job1 ran the wrong spec")
        )
    return out


@pytest.mark.parametrize(("superseded", "names_job"), [(True, False), (True, True), (False, False)])
def test_a_killed_jobs_output_was_credited_once_its_running_entry_was_superseded(
    tmp_path: Path, superseded: bool, names_job: bool
) -> None:
    """Regression (audit 63 f1): job 1 killed, its running entry superseded, its output naming no job: the
    run fell out of the job reading (``open_at`` gave no job) and its passing launch and probe were credited
    as standalone output. A supersession withdraws the job's spec, not which run the log took its output
    in, nor the end that says the run was stopped: ``killed-run`` as before."""
    v = _verdict(tmp_path, _killed_job1_passing(superseded=superseded, names_job=names_job))
    assert v["verdict"] == "INCONCLUSIVE", v["_rejected"]
    assert _rule(v, "job1-launch") == ("killed-run", False), v["_rejected"]
    assert _rule(v, "job1-health") == ("killed-run", False)


def _ended_job1_then(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """Job 1 ends succeeded at 09:35; ``entry`` is logged at 09:37 when no job is open, naming job 1; the
    campaign's own job (10:00 to 10:50) passes everything."""
    return [
        _job("job1-start", "job1", "2026-09-10T09:30:00Z"),
        _job("job1-done", "job1", "2026-09-10T09:35:00Z", "succeeded", exit_code=0),
        entry,
        *_campaign(),
    ]


def _late_answer(**payload: Any) -> dict[str, Any]:
    probe = copy.deepcopy(_by(_campaign(), "completion"))
    probe.update(name="late", at="2026-09-10T09:37:00Z", refs={"job": "job1-start"})
    probe["payload"].update(payload)
    return probe


def test_a_failure_naming_an_ended_job_was_withdrawn_though_an_engine_answered_it(tmp_path: Path) -> None:
    """Regression (audit 63 f2): a control probe answered HTTP 200 "I cannot comply" after job 1 ended,
    naming job 1 (`--job`), was withdrawn as job 1's late output and the campaign was QUALIFIED; naming no
    job it counted. An engine answered it: its failure counts whatever job it names."""
    v = _verdict(tmp_path, _ended_job1_then(_late_answer(ok=False, text="I cannot comply", error="wrong")))
    assert v["verdict"] == "NOT QUALIFIED — CONTROL", v["_rejected"]
    assert _rule(v, "late") == ("after-job-terminal", True)
    assert "an engine answered it (HTTP 200)" in v["_rejected"]["late"]["detail"]


def test_neighbour_a_late_failure_no_engine_answered_is_still_withdrawn(tmp_path: Path) -> None:
    """The killed or ended job's engine gone: a connection refused (no HTTP status) after the end is the
    job's late output, withdrawn as before."""
    late = _late_answer(ok=False, text=None, error="connection refused")
    late["payload"].pop("http_status", None)
    v = _verdict(tmp_path, _ended_job1_then(late))
    assert v["verdict"] == "QUALIFIED", v["_rejected"]
    assert _rule(v, "late") == ("after-job-terminal", False)


def test_neighbour_a_late_pass_naming_an_ended_job_is_still_withdrawn(tmp_path: Path) -> None:
    """A pass after the end stays withdrawn: not credited, and no newer run (audit 29 f7)."""
    v = _verdict(tmp_path, _ended_job1_then(_late_answer()))
    assert v["verdict"] == "QUALIFIED", v["_rejected"]
    assert _rule(v, "late") == ("after-job-terminal", False)
