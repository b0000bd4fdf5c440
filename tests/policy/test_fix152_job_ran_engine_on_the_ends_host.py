"""Fix 152 (issue 11): ``job_ran_engine`` matched a job's running entry by campaign and job_id, not host.

A restoration (``check routing-change --action restore``) drops a failure of the production engine as a
gone engine's where a standing end logged after it shows that engine over (``routing._before_end``); a
job's terminal entry counts only where the log knows the job ran an engine (``acceptance.job_ran_engine``,
fix 138; an engine of the end's own host, fix 147). Which job the end ended was read by campaign and
job_id alone: a running entry of that job_id on another host (acme-box-9) made the end on acme-box-7 the
end of a run the log saw start, and a probe of the campaign on acme-box-7 then showed "its" engine — so a
job the log never saw start on acme-box-7 dropped the failure, and a sleeping engine was restored.

The job stays the verdict's (campaign, job_id: the one reading ``_job_log`` gives every reader), and it
must have run on the end's host alone: every standing entry of it read names the end's host (as
``host_key`` compares hosts). A job_id shared by two hosts is one job to the verdict too (a ``killed`` end
on one host withholds the other's output), so which of its runs the end ended cannot be told: it drops
nothing (fail closed)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

import tests.policy.conftest as policy_conftest
from ledger.policy import acceptance
from tests.policy.test_fail_closed import SUBJECT, entry, qualified_entries, rejected, verdict_of
from tests.policy.test_fix138_restore_job_never_ran import (
    ASLEEP,
    CAMP,
    HEALTH,
    J2,
    J2_END,
    MODELS,
    PROD,
    READY,
    SEED000,
    _dropped,
    _earlier_job,
    _kept,
    _log,
    _restore,
)
from tests.policy.test_restore_run_ends import _read

build = policy_conftest.build  # a ledger built from a policy fixture file

THERE = "acme-box-9"  # another host of the same campaign


def _run(b: Any, starts: tuple[dict[str, Any], ...]) -> str:
    """The earlier job ran and ended; job j2's running entries are logged with ``starts`` (their subjects:
    18:10:40, 18:10:41, …), an engine of the campaign on acme-box-7 answers a probe (18:10:45), production
    is seen asleep (18:10:50), j2's end on acme-box-7 says cancelled (18:11:05), production passes after
    (18:12). The failure's id."""
    _earlier_job(b)
    for i, subject in enumerate(starts):
        _log(b, "job", subject, {**J2, "state": "running"}, f"2026-09-01T18:10:4{i}Z")
    _log(b, "health.probe", CAMP, HEALTH, "2026-09-01T18:10:45Z")
    dead = _log(b, "health.probe", PROD, ASLEEP, "2026-09-01T18:10:50Z")
    _log(b, "job", CAMP, J2_END, "2026-09-01T18:11:05Z")
    for i, p in enumerate((HEALTH, MODELS, READY)):
        _log(b, "health.probe", PROD, p, f"2026-09-01T18:12:0{i}Z")
    return dead


def test_end_on_one_host_credited_by_a_running_entry_on_another_host_drops_nothing(build: Any) -> None:
    """Regression: j2 started on acme-box-9 only; its end on acme-box-7, after a probe the campaign's engine
    on acme-box-7 answered, dropped the failure as the gone engine's and the passes restored a sleeping
    model. No running entry of j2 was logged on acme-box-7: the log never saw that job start there."""
    b = build(SEED000)
    dead = _run(b, ({**CAMP, "host": THERE},))
    _kept(_restore(b), dead)


@pytest.mark.parametrize(
    "hosts",
    [
        pytest.param((THERE, "acme-box-7"), id="other-host-first"),
        pytest.param(("acme-box-7", THERE), id="other-host-second"),
    ],
)
def test_end_of_a_job_id_started_on_two_hosts_drops_nothing(build: Any, hosts: tuple[str, str]) -> None:
    """j2 started on acme-box-9 and on acme-box-7 (in either order): one job to the verdict, run on two
    hosts — which run the end ended cannot be told, so it drops nothing."""
    b = build(SEED000)
    dead = _run(b, tuple({**CAMP, "host": h} for h in hosts))
    _kept(_restore(b), dead)


@pytest.mark.parametrize("host", ["acme-box-7", "ACME-BOX-7", "acme-box-7."])
def test_end_of_a_job_started_on_its_own_host_drops_the_failure(build: Any, host: str) -> None:
    """The case that must still pass: j2 started on the end's host — the same name, or spelled in another
    case or with a trailing dot (``host_key``: one host) — and its engine answered there: the job ran an
    engine, and its end drops the failure."""
    b = build(SEED000)
    dead = _run(b, ({**CAMP, "host": host},))
    r = _restore(b)
    assert dead in _dropped(r), r["ignored"]
    assert r["allowed"] is True, r["reasons"]


def _subject(e: Any, host: Any, key: str = "host") -> Any:
    """``e`` with its subject's host replaced by ``host`` under ``key`` (None: left out)."""
    s = {k: v for k, v in e.subject.items() if k != "host"}
    return dataclasses.replace(
        e, statement={**e.statement, "subject": s if host is None else {**s, key: host}}
    )


def test_job_ran_engine_reads_the_running_entrys_host(build: Any) -> None:
    """The one reading on the entries: j2's running entry on the end's host shows the job ran there; left
    out, blank, mistyped, renamed (``hostname``) or another host, it does not — and neither does a second
    running entry of j2 on another host beside it, unless the caller does not stand on that one (it is
    not read)."""
    b = build(SEED000)
    _run(b, (CAMP,))
    entries = _read(b, ("job", "health.probe"), {"campaign": CAMP["campaign"]})
    (end,) = [e for e in entries if e.kind == "job" and e.payload == J2_END]
    (start,) = [e for e in entries if e.kind == "job" and e.payload == {**J2, "state": "running"}]
    ran = acceptance.job_ran_engine
    assert ran(end, entries)
    for host, key in ((None, "host"), ("", "host"), ("  ", "host"), (7, "host"), ("acme-box-7", "hostname")):
        assert not ran(end, [_subject(start, host, key) if e is start else e for e in entries]), (host, key)
    assert not ran(end, [_subject(start, THERE) if e is start else e for e in entries])
    assert ran(end, [_subject(start, "Acme-Box-7") if e is start else e for e in entries])
    # a second running entry of j2, on another host, logged between the first and the end
    free = next(n for n in range(start.seq + 1, end.seq) if all(e.seq != n for e in entries))
    twin = dataclasses.replace(_subject(start, THERE), seq=free)
    assert not ran(end, [*entries, twin])
    assert ran(end, [*entries, twin], lambda e: e is not twin)  # one the caller does not stand on


def test_the_verdict_reads_a_job_id_shared_by_two_hosts_as_one_job(tmp_path: Path) -> None:
    """The rule ``job_ran_engine`` agrees with: the verdict keys a job by campaign and job_id, whatever host
    each entry names — a ``killed`` end of the campaign's job_id on another host withholds the credit of
    this host's output (``killed-run``), so the campaign is not QUALIFIED on it."""
    es = qualified_entries()
    other = {**SUBJECT, "host": "gpu-box-2"}
    spec = entry(es, "campaign-job")["payload"]["spec"]
    es += [
        {
            "name": "twin-job",
            "kind": "job",
            "key": "collector",
            "at": "2026-09-10T10:00:30Z",
            "subject": other,
            "payload": {
                "job_id": "campaign-1",
                "state": "running",
                "started_at": "2026-09-10T10:00:30Z",
                "lease_seconds": 3600.0,
                "spec": spec,
            },
        },
        {
            "name": "twin-killed",
            "kind": "job",
            "key": "collector",
            "at": "2026-09-10T10:49:00Z",
            "subject": other,
            "payload": {"job_id": "campaign-1", "state": "killed", "ended_at": "2026-09-10T10:49:00Z"},
        },
    ]
    v = verdict_of(tmp_path, es, {k: v for k, v in SUBJECT.items() if k != "host"})
    assert v["verdict"] != "QUALIFIED", v["gates"]
    assert rejected(v).get("completion") == "killed-run", rejected(v)
