"""Fix 66 f2 (audit 54): a job's terminal entry logged before its running entry ended the job.

``filter_evidence`` took the first terminal entry of a job_id in log order as the job's end even where no
running entry of that job preceded it, so an engine segfault after readiness, logged after the running entry,
was withdrawn as ``after-job-terminal`` and routing on a sibling campaign was allowed — while
``_unjudged_jobs`` read the same log the other way ("has no terminal entry").

Now one reading (``ledger.policy.acceptance._job_log``) decides which terminal entry ends which job — a job is
(campaign, job_id); a terminal entry ends it only where a running entry of that job precedes it in the log —
and ``filter_evidence`` (terminal, stopped_by, the job windows), ``_derive`` (``unmatched_job_ends``) and
``_unjudged_jobs`` read it. An earlier terminal entry is an unmatched end: it withdraws nothing logged after
it, and the verdict cannot be QUALIFIED beside it (unjudged; api-readiness INCONCLUSIVE).
"""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path
from typing import Any

from ledger.entries import parse_time
from ledger.policy.fixtures import _Builder
from ledger.policy.loader import load_policy
from ledger.policy.routing import check_routing_change
from ledger.policy.verdict import evaluate
from ledger.service import Ledger
from tests.policy.conftest import FIXTURES, POLICY_DIR

SHARED = FIXTURES / "_shared"
SUBJECT = {"campaign": "vllm-embed", "backend": "vllm", "model": "Qwen3-Embedding-8B", "host": "gpu-box-1"}
SIBLING = {**SUBJECT, "campaign": "vllm-embed-2"}
S2 = {"campaign": "vllm-embed-2"}
DEPLOYMENT = {
    "host": "gpu-box-1",
    "services": [
        {
            "engine": "vllm",
            "name": "vllm-embed",
            "model": "Qwen3-Embedding-8B",
            "gpus": [2],
            "gpu_memory_utilization": 0.25,
        }
    ],
}


def _entries() -> list[dict[str, Any]]:
    e = tomllib.loads((SHARED / "ready-campaign.toml").read_text())["entries"]
    e += tomllib.loads((SHARED / "semantic-benchmark.toml").read_text())["entries"]
    return copy.deepcopy(e)


def _by(entries: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(x for x in entries if x.get("name") == name)


def _job(
    entries: list[dict[str, Any]],
    name: str,
    at: str,
    state: str,
    jid: str,
    subject: dict[str, str] | None = None,
    **kw: Any,
) -> dict[str, Any]:
    p: dict[str, Any] = {"job_id": jid, "state": state}
    if state == "running":
        spec = copy.deepcopy(_by(entries, "campaign-job")["payload"]["spec"])
        p.update(started_at=at, lease_seconds=3600.0, spec=spec)
    else:
        p.update(ended_at=at)
    p.update(kw)
    d: dict[str, Any] = {"name": name, "kind": "job", "key": "collector", "at": at, "payload": p}
    if subject:
        d["subject"] = subject
    return d


def _crash(entries: list[dict[str, Any]], name: str, at: str, started: str, jobref: str) -> dict[str, Any]:
    """An engine of the sibling campaign that segfaults after readiness (ended at ``at``)."""
    launch = copy.deepcopy(_by(entries, "launch"))
    launch.update(name=name, at=at, refs={"job": jobref}, subject=dict(S2))
    launch["payload"].update(
        attempt=1, started_at=started, ended_at=at, ready=True, exit_code=139, failure_signature="segfault"
    )
    launch["artifacts"] = [{"name": "stderr.log", "text": "INFO ready\nSegmentation fault (core dumped)\n"}]
    return launch


class Run:
    def __init__(self, tmp_path: Path, entries: list[dict[str, Any]]) -> None:
        start = "2026-09-10T09:00:00Z"
        spec = {
            "start": start,
            "keys": {"collector": ["collector"], "reviewer": ["reviewer"], "operator": ["operator"]},
            "defaults": {"subject": dict(SUBJECT)},
            "entries": entries,
        }
        self.led = Ledger.init(tmp_path / "home", genesis_at=parse_time(start))
        b = _Builder(self.led, spec, POLICY_DIR)
        b.enrol_keys()
        b.add_all(entries)
        self.ids = {n: str(e.entry_id) for n, e in b.names.items()}
        self.names = {i: n for n, i in self.ids.items()}

    def verdict(self, subject: dict[str, str]) -> dict[str, Any]:
        out = evaluate(self.led, dict(subject), load_policy("backend-qualification", POLICY_DIR))
        out["_rejected"] = {self.names.get(r["entry"], r["entry"]): r for r in out["rejected"]}
        return out

    def routing(self) -> dict[str, Any]:
        return check_routing_change(
            self.led,
            load_policy("routing-change", POLICY_DIR),
            {k: v for k, v in SUBJECT.items() if k != "campaign"},
            deployment=DEPLOYMENT,
            now=parse_time("2026-09-10T11:10:00Z"),
        )


def _sibling(order: str) -> list[dict[str, Any]]:
    """vllm-embed QUALIFIED (verdict recorded 10:55); vllm-embed-2's job (c2-job) segfaults after readiness
    (11:03). ``terminal-first``: its end (failed, 11:00) is logged before its running entry (claims 10:59,
    logged 11:01); ``normal``: running, crash, end (11:04)."""
    es = _entries()
    if order == "terminal-first":
        es.append(_job(es, "c2-end", "2026-09-10T11:00:00Z", "failed", "c2-job", S2, exit_code=1))
        run = _job(es, "c2-run", "2026-09-10T10:59:00Z", "running", "c2-job", S2)
        run["logged_at"] = "2026-09-10T11:01:00Z"
        es.append(run)
        es.append(_crash(es, "c2-crash", "2026-09-10T11:03:00Z", "2026-09-10T10:59:30Z", "c2-run"))
    else:
        es.append(_job(es, "c2-run", "2026-09-10T10:59:00Z", "running", "c2-job", S2))
        es.append(_crash(es, "c2-crash", "2026-09-10T11:03:00Z", "2026-09-10T10:59:30Z", "c2-run"))
        es.append(_job(es, "c2-end", "2026-09-10T11:04:00Z", "failed", "c2-job", S2, exit_code=1))
    es.append(
        {
            "name": "verdict",
            "at": "2026-09-10T10:55:00Z",
            "record_verdict": {"subject": {"campaign": "vllm-embed"}, "key": "reviewer"},
        }
    )
    return es


def _beyond_ladder(v: dict[str, Any]) -> list[str]:
    return [g["gate"] for g in v.get("failing_beyond_ladder", [])]


def test_job_end_logged_before_its_running_entry_withdrew_the_crash_after_readiness(tmp_path: Path) -> None:
    """The regression: the end logged before the job's running entry ended the job, so the segfault after
    readiness (logged later) was withdrawn ``after-job-terminal`` and the route was allowed. Now that end
    ends no run: the crash counts (runtime-stability fails beyond the ladder), the end is unjudged, and
    routing is refused."""
    r = Run(tmp_path, _sibling("terminal-first"))
    try:
        v = r.verdict(SIBLING)
        assert "c2-crash" not in v["_rejected"], v["_rejected"].get("c2-crash")
        assert "runtime-stability" in _beyond_ladder(v)
        unjudged = {u["entry"]: u["detail"] for u in v["unjudged"]}
        end = unjudged[r.ids["c2-end"]]
        assert "no running entry of that job was logged before it" in end
        assert "has no terminal entry" in unjudged[r.ids["c2-run"]]
        assert v["verdict"] != "QUALIFIED"
        assert r.routing()["allowed"] is False
    finally:
        r.led.close()


def test_job_end_logged_after_its_running_entry_still_judges_the_crash(tmp_path: Path) -> None:
    """The neighbour: the same entries logged in order (running, crash, end) — the crash counts as
    before, the failed end is unjudged (no failed harness result refs it) and routing is refused."""
    r = Run(tmp_path, _sibling("normal"))
    try:
        v = r.verdict(SIBLING)
        assert "c2-crash" not in v["_rejected"]
        assert "runtime-stability" in _beyond_ladder(v)
        assert [u["entry"] for u in v["unjudged"]] == [r.ids["c2-run"]]
        assert "ended failed" in v["unjudged"][0]["detail"]
        assert r.routing()["allowed"] is False
    finally:
        r.led.close()


def test_killed_end_logged_before_the_running_entry_credits_no_passing_output(tmp_path: Path) -> None:
    """The neighbour: a ``killed`` end of the campaign's job logged before its running entry (all output
    was withdrawn before the fix). It ends no run now, but the campaign stays fail closed: a job an entry
    says was killed credits no passing output (``killed-run``), the end is unjudged, and the verdict is not
    QUALIFIED."""
    es = _entries()
    es.insert(0, _job(es, "early-kill", "2026-09-10T09:59:00Z", "killed", "campaign-1", exit_code=137))
    r = Run(tmp_path, es)
    try:
        v = r.verdict(SUBJECT)
        assert v["_rejected"]["semantic"]["rule"] == "killed-run"
        assert "logged before every running entry of the job" in v["_rejected"]["semantic"]["detail"]
        assert v["_rejected"]["launch"]["rule"] == "killed-run"
        assert r.ids["early-kill"] in {u["entry"] for u in v["unjudged"]}
        assert v["verdict"] == "INCONCLUSIVE"
    finally:
        r.led.close()


def test_succeeded_end_logged_before_the_running_entry_is_an_unmatched_end(tmp_path: Path) -> None:
    """The neighbour: the same with ``succeeded`` — nothing is withdrawn or withheld for it, but which run
    it ended cannot be told: unjudged, api-readiness INCONCLUSIVE, never QUALIFIED."""
    es = _entries()
    es.insert(0, _job(es, "early-end", "2026-09-10T09:59:00Z", "succeeded", "campaign-1", exit_code=0))
    r = Run(tmp_path, es)
    try:
        v = r.verdict(SUBJECT)
        assert not {"semantic", "benchmark", "launch"} & set(v["_rejected"]), v["_rejected"]
        assert [u["entry"] for u in v["unjudged"]] == [r.ids["early-end"]]
        api = next(g for g in v["gates"] if g["name"] == "api-readiness")
        assert api["status"] == "missing"
        assert v["verdict"] == "INCONCLUSIVE"
    finally:
        r.led.close()


def test_two_running_entries_with_one_end_between_them_end_the_job_at_that_end(tmp_path: Path) -> None:
    """The neighbour: running (10:00), succeeded (10:05), running again (10:06): the end between them ends
    the job (a running entry precedes it) — output after it is after-job-terminal, the restart unjudged."""
    es = _entries()
    done = _by(es, "campaign-done")
    es.remove(done)
    i = es.index(_by(es, "sequential")) + 1
    es[i:i] = [
        _job(es, "mid-end", "2026-09-10T10:05:00Z", "succeeded", "campaign-1", exit_code=0),
        _job(es, "restart", "2026-09-10T10:06:00Z", "running", "campaign-1"),
    ]
    es.append(done)
    r = Run(tmp_path, es)
    try:
        v = r.verdict(SUBJECT)
        assert v["_rejected"]["semantic"]["rule"] == "after-job-terminal"
        assert v["_rejected"]["semantic"]["by"] == r.ids["mid-end"]
        details = [u["detail"] for u in v["unjudged"] if u["entry"] == r.ids["restart"]]
        assert details and "started again" in details[0]
        assert v["verdict"] == "INCONCLUSIVE"
    finally:
        r.led.close()


def test_same_job_id_in_another_campaign_does_not_end_this_campaigns_job(tmp_path: Path) -> None:
    """The neighbour: vllm-embed-2 runs a job under vllm-embed's job_id (campaign-1), after vllm-embed's
    job ended (10:50). That end is another campaign's: it neither ends vllm-embed-2's job (its crash after
    readiness counts, not after-job-terminal) nor is an unmatched end of it; vllm-embed still qualifies."""
    es = _entries()
    es.append(_job(es, "c2-run", "2026-09-10T11:00:00Z", "running", "campaign-1", S2))
    es.append(_crash(es, "c2-crash", "2026-09-10T11:03:00Z", "2026-09-10T11:00:30Z", "c2-run"))
    es.append(_job(es, "c2-end", "2026-09-10T11:04:00Z", "failed", "campaign-1", S2, exit_code=1))
    r = Run(tmp_path, es)
    try:
        v = r.verdict(SIBLING)
        assert "c2-crash" not in v["_rejected"], v["_rejected"].get("c2-crash")
        assert "runtime-stability" in _beyond_ladder(v)
        assert [u["entry"] for u in v["unjudged"]] == [r.ids["c2-run"]]  # its failed end, unjudged
        assert all(g["name"] != "api-readiness" or g["status"] != "missing" for g in v["gates"]), v["gates"]
        first = r.verdict(SUBJECT)
        assert first["verdict"] == "QUALIFIED", first["gates"]
        assert not first["unjudged"]
    finally:
        r.led.close()
