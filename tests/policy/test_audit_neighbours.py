"""Neighbours of the QUALIFIED fixture an independent audit found judged wrong, each kept as a regression.

- A GPU fault in a kernel log filed under another spelling of the host's name (``GPU-BOX-1``) was not read
  for ``gpu-box-1``: hosts compare as DNS names (``host_key``) in the verdict, as in the routing gate.
- A claimed ``collected_at`` withdrew a failure the log holds: a crash logged while the job ran that claims
  a time after the job ended (``after-job-terminal``), a failed probe logged while a launch ran that claims a
  time before every launch (``before-launch``). A claim only takes credit away.
- The routing gate read the host's GPUs from a probe of another machine filed under the host.
- A passed benchmark whose parity record or per-level counts contradict it, a passed semantic result with a
  failure reason or a score its counts do not give, passed.
- A job binding a device other than ``cpu``/``gpu`` was read as a GPU deployment.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from ledger.entries import parse_time
from ledger.errors import SchemaError
from tests.policy.test_fail_closed import entry, gates, qualified_entries, rejected, verdict_of

QUALIFIED = "QUALIFIED"
RUNTIME = "NOT QUALIFIED — RUNTIME RELIABILITY"
X79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=48211, name=python3, GPU has fallen off the bus."


def _logged(e: dict[str, Any]) -> str:
    return str(e.get("logged_at") or e["at"])


def _insert_by_log_time(es: list[dict[str, Any]], new: dict[str, Any]) -> None:
    """Insert ``new`` where the log took it: before the first entry logged after it."""
    t = parse_time(_logged(new))
    i = next((i for i, e in enumerate(es) if "at" in e and parse_time(_logged(e)) > t), len(es))
    es.insert(i, new)


def _health_job_xid79(es: list[dict[str, Any]], host: str) -> None:
    """A separate health job of the host records an Xid 79 at 10:03, while the campaign's engine ran."""
    es.append(
        {
            "name": "health-kernel",
            "kind": "kernel.log",
            "key": "collector",
            "at": "2026-09-10T10:55:00Z",
            "subject": {"campaign": "health-job", "host": host},
            "payload": {
                "source": "dmesg",
                "events": [
                    {
                        "time": "2026-09-10T10:03:00Z",
                        "kind": "nvrm-xid",
                        "xid": 79,
                        "device": "PCI:0000:3b:00",
                        "message": X79,
                    }
                ],
            },
        }
    )


@pytest.mark.parametrize("host", ["gpu-box-1", "GPU-BOX-1", "Gpu-Box-1", "gpu-box-1."])
@pytest.mark.parametrize("narrowed", [False, True])
def test_a_gpu_fault_logged_under_another_spelling_of_the_host_fails_runtime_stability(
    tmp_path: Path, host: str, narrowed: bool
) -> None:
    """Regression: under `GPU-BOX-1` the Xid 79 was read for no host, and the campaign was QUALIFIED."""
    es = qualified_entries()
    _health_job_xid79(es, host)
    subject = {"campaign": "neighbour-campaign-7"} if not narrowed else None
    v = verdict_of(tmp_path, es, subject=subject)
    assert v["verdict"] == RUNTIME, v["gates"]
    assert v["identity"].get("host") == "gpu-box-1"  # the campaign's own spelling names the verdict


def test_a_gpu_fault_of_another_host_does_not_count(tmp_path: Path) -> None:
    es = qualified_entries()
    _health_job_xid79(es, "gpu-box-2")
    assert verdict_of(tmp_path, es, subject={"campaign": "neighbour-campaign-7"})["verdict"] == QUALIFIED


def _second_launch_crashed(es: list[dict[str, Any]], claimed: str, logged: str) -> dict[str, Any]:
    run = copy.deepcopy(entry(es, "launch"))
    run["name"], run["at"], run["logged_at"] = "crash", claimed, logged
    run["payload"].update(
        failure_signature="engine-dead", exit_code=None, signal=6, started_at="2026-09-10T10:00:40Z"
    )
    _insert_by_log_time(es, run)
    return run


def test_a_crash_logged_during_the_job_that_claims_a_later_collected_at_still_counts(tmp_path: Path) -> None:
    """Regression: logged at 10:01:30, claiming 11:30 (after the job ended at 10:50), the crash was rejected
    `after-job-terminal` — withdrawn — and the campaign was QUALIFIED."""
    es = qualified_entries()
    _second_launch_crashed(es, claimed="2026-09-10T11:30:00Z", logged="2026-09-10T10:01:30Z")
    v = verdict_of(tmp_path, es)
    assert "crash" not in rejected(v)
    assert gates(v)["runtime-stability"] == "failed"
    assert v["verdict"] == RUNTIME


def test_a_503_health_probe_logged_during_the_job_that_claims_a_later_time_still_counts(
    tmp_path: Path,
) -> None:
    es = qualified_entries()
    probe = copy.deepcopy(entry(es, "health"))
    probe["payload"].update(ok=False, http_status=503)
    probe["name"], probe["at"] = "late-503", "2026-09-10T11:30:00Z"
    probe["logged_at"] = "2026-09-10T10:03:00Z"
    _insert_by_log_time(es, probe)
    v = verdict_of(tmp_path, es)
    assert "late-503" not in rejected(v)
    assert v["verdict"] == RUNTIME


def test_output_honestly_collected_after_the_job_ended_is_still_not_credited(tmp_path: Path) -> None:
    """The neighbour: a passing probe collected and logged after the job's end is that job's no more."""
    es = qualified_entries()
    probe = copy.deepcopy(entry(es, "health"))
    probe["name"], probe["at"] = "after-end", "2026-09-10T11:30:00Z"
    es.append(probe)
    assert rejected(verdict_of(tmp_path, es))["after-end"] == "after-job-terminal"


def _failed_completion(es: list[dict[str, Any]], claimed: str, logged: str) -> None:
    probe = copy.deepcopy(entry(es, "completion"))
    probe["name"], probe["at"], probe["logged_at"] = "http-500", claimed, logged
    probe["payload"].update(ok=False, http_status=500, text=None, error="EngineDeadError")
    _insert_by_log_time(es, probe)


def test_a_failed_probe_logged_while_a_launch_ran_that_claims_a_pre_launch_time_still_counts(
    tmp_path: Path,
) -> None:
    """Regression: logged at 10:01:11 (the launch started 10:00:20), claiming 09:59, the HTTP 500 was
    rejected `before-launch` — withdrawn — and the campaign was QUALIFIED."""
    es = qualified_entries()
    _failed_completion(es, claimed="2026-09-10T09:59:00Z", logged="2026-09-10T10:01:11Z")
    v = verdict_of(tmp_path, es)
    counted = {
        v["_names"][r["entry"]]: r.get("counts_against") for r in v["rejected"] if r["entry"] in v["_names"]
    }
    assert counted.get("http-500") is True  # not credited, but it counts against the engine
    assert v["verdict"] == RUNTIME


def test_a_failed_probe_logged_before_any_launch_started_is_withdrawn(tmp_path: Path) -> None:
    """The neighbour: logged (and collected) before the campaign's launch started, it answered no engine of
    the campaign — a leftover on the port."""
    es = qualified_entries()
    _failed_completion(es, claimed="2026-09-10T10:00:06Z", logged="2026-09-10T10:00:07Z")
    v = verdict_of(tmp_path, es)
    assert rejected(v)["http-500"] == "before-launch"
    assert v["verdict"] == QUALIFIED


def _bench(es: list[dict[str, Any]]) -> dict[str, Any]:
    payload: dict[str, Any] = entry(es, "benchmark")["payload"]
    return payload


@pytest.mark.parametrize(
    "change",
    [
        {"parity": {"matched": 0}},  # matched 0 of 96, fraction 1.0
        {"parity": {"matched": 97}},  # more matched than compared
        {"parity": {"compared": 0, "matched": 0}},  # compared nothing
        {"parity": {"matched": "96"}},  # a text for a count
        {"drop_parity": "matched"},
        {"drop_parity": "compared"},
        {"counts": {"completed@c1": 1, "completed@c4": 1, "completed@c32": 1}},  # totals say 576
        {"counts": {"completed@c4": 193}},  # more than the level's requests
    ],
)
def test_a_passed_benchmark_that_contradicts_its_own_record_fails(
    tmp_path: Path, change: dict[str, Any]
) -> None:
    """Regression: a parity record of 0 matched beside a c1 parity of 1.0, or 1 completed request per level
    beside 576 completed, passed."""
    es = qualified_entries()
    b = _bench(es)
    b["bounds"]["parity"].update(change.get("parity", {}))
    b["counts"].update(change.get("counts", {}))
    if "drop_parity" in change:
        b["bounds"]["parity"].pop(change["drop_parity"])
    v = verdict_of(tmp_path, es)
    assert gates(v)["benchmark"] == "failed"
    assert v["verdict"] == "NOT QUALIFIED — PERFORMANCE"


def test_a_parity_fraction_rounded_as_the_harness_rounds_it_is_its_record(tmp_path: Path) -> None:
    """The neighbour: 95 of 96 is 0.989583 as the harness records it — consistent, and judged by the bound."""
    es = qualified_entries()
    b = _bench(es)
    b["bounds"]["parity"].update(matched=95, fraction=round(95 / 96, 6))
    b["figures"]["c1_parity"] = round(95 / 96, 6)
    v = verdict_of(tmp_path, es)
    benchmark = next(g for g in v["gates"] if g["name"] == "benchmark")
    assert benchmark["status"] == "failed"
    # the parity bound fails it, not its record
    assert "contradicts its own record" not in benchmark["reason"]


def _semantic(es: list[dict[str, Any]]) -> dict[str, Any]:
    payload: dict[str, Any] = entry(es, "semantic")["payload"]
    return payload


@pytest.mark.parametrize(
    "change",
    [
        {"reason": "3 of 12 items wrong"},
        {"figures": {"score": 0.5}, "counts": {"passed": 12}},  # a score its counts do not give (below)
        {"figures": {"score": 1.0}, "counts": {"passed": 11, "failed": 1}},  # nor above
    ],
)
def test_a_passed_semantic_result_that_contradicts_its_own_record_fails(
    tmp_path: Path, change: dict[str, Any]
) -> None:
    es = qualified_entries()
    s = _semantic(es)
    s["reason"] = change.get("reason")
    s["figures"].update(change.get("figures", {}))
    s["counts"].update(change.get("counts", {}))
    v = verdict_of(tmp_path, es)
    assert gates(v)["semantic"] == "failed"
    assert v["verdict"] == "NOT QUALIFIED — SEMANTIC QUALITY"


@pytest.mark.parametrize("device", ["CPU", "cuda", "", "gpu0"])
def test_a_job_binding_a_device_that_is_neither_cpu_nor_gpu_is_refused_at_ingest(
    tmp_path: Path, device: str
) -> None:
    """Regression: `device = "CPU"` was read as a GPU deployment (anything but "cpu" was)."""
    es = qualified_entries()
    entry(es, "campaign-job")["payload"]["spec"]["bindings"]["device"] = device
    with pytest.raises(SchemaError, match="device"):
        verdict_of(tmp_path, es)


def test_the_routing_gate_reads_the_hosts_gpus_from_the_jobs_machine_only(tmp_path: Path) -> None:
    """Regression: a probe of machine `other-box` (8 GPUs), filed under gpu-box-1 after the verdict, made
    GPU5 a GPU of gpu-box-1 and the route was allowed."""
    from ledger.policy.loader import load_policy
    from ledger.policy.routing import check_routing_change
    from tests.test_routing_at_reference_time import CAMPAIGN, _campaign_home

    es = qualified_entries()
    es.append(
        {
            "name": "verdict",
            "at": "2026-09-10T11:00:00Z",
            "record_verdict": {"subject": {"campaign": CAMPAIGN["campaign"]}, "key": "reviewer"},
        }
    )
    es.append(
        {
            "name": "other-box",
            "kind": "host.probe",
            "key": "collector",
            "at": "2026-09-10T11:10:00Z",
            "subject": {"host": "gpu-box-1"},
            "payload": {
                "hostname": "other-box",
                "os": "Ubuntu 24.04",
                "kernel": "6.8.0",
                "gpus": [{"index": i, "name": "NVIDIA H100"} for i in range(8)],
            },
        }
    )
    _home, ledger, _b = _campaign_home(tmp_path, es)
    subject = {k: CAMPAIGN[k] for k in ("backend", "model", "host")}
    pol = load_policy("routing-change")
    now = parse_time("2026-09-10T12:00:00Z")

    def dep(gpu: int) -> dict[str, Any]:
        return {
            "host": "gpu-box-1",
            "services": [
                {"engine": "vllm", "name": "s", "model": "m-7", "gpus": [gpu], "gpu_memory_utilization": 0.5}
            ],
        }

    refused = check_routing_change(ledger, pol, dict(subject), deployment=dep(5), now=now)
    allowed = check_routing_change(ledger, pol, dict(subject), deployment=dep(2), now=now)
    ledger.close()
    assert refused["allowed"] is False
    assert any("GPU5" in r and "not on gpu-box-1" in r for r in refused["reasons"]), refused["reasons"]
    assert allowed["allowed"] is True, allowed["reasons"]  # GPU2 is on the job's machine's own probe


@pytest.mark.parametrize("reason", ["", "   ", "\n"])
def test_a_supersession_without_a_reason_is_refused_at_ingest(tmp_path: Path, reason: str) -> None:
    """Regression: `ledger supersede ID --reason ""` withdrew a failed probe with no reason recorded — the
    one way to withdraw a failure says why."""
    es = qualified_entries()
    _failed_completion(es, claimed="2026-09-10T10:01:10Z", logged="2026-09-10T10:01:11Z")
    es.insert(
        es.index(entry(es, "campaign-done")),
        {
            "name": "withdraw",
            "kind": "supersession",
            "key": "operator",
            "at": "2026-09-10T10:46:00Z",
            "refs": {"supersedes": "http-500"},
            "payload": {"reason": reason},
        },
    )
    with pytest.raises(SchemaError, match="reason"):
        verdict_of(tmp_path, es)


@pytest.mark.parametrize(("withdrawn_by", "verdict"), [("operator", RUNTIME), ("operator2", QUALIFIED)])
def test_a_key_does_not_withdraw_its_own_failure(tmp_path: Path, withdrawn_by: str, verdict: str) -> None:
    """Regression: an operator recorded a failed /health probe by hand and superseded it with the same key:
    QUALIFIED. A review or acceptance by the evidence's own key credits nothing; nor does its own
    supersession withdraw what it shows (self-superseded: credit taken away, the failure stands). Another
    operator's supersession, with its reason, withdraws it."""
    es = qualified_entries()
    probe = copy.deepcopy(entry(es, "health"))
    probe["payload"].update(ok=False, http_status=503)
    probe["name"], probe["key"], probe["at"] = "by-hand-503", "operator", "2026-09-10T10:03:00Z"
    _insert_by_log_time(es, probe)
    es.insert(
        es.index(entry(es, "campaign-done")),
        {
            "name": "withdraw",
            "kind": "supersession",
            "key": withdrawn_by,
            "at": "2026-09-10T10:46:00Z",
            "refs": {"supersedes": "by-hand-503"},
            "payload": {"reason": "probed the wrong port"},
        },
    )
    keys = {
        "collector": ["collector"],
        "reviewer": ["reviewer"],
        "operator": ["operator"],
        "operator2": ["operator"],
    }
    v = verdict_of(tmp_path, es, keys=keys)
    assert v["verdict"] == verdict
    rule = "self-superseded" if withdrawn_by == "operator" else "superseded"
    assert rejected(v)["by-hand-503"] == rule


def test_a_review_pass_that_another_review_failed_credits_nothing(tmp_path: Path) -> None:
    """Regression: reviewer2 FAILed the semantic result's review PASS (a review of the review) and the
    verdict stayed QUALIFIED — while an acceptance rejecting the same PASS takes it out."""
    es = qualified_entries()
    es.insert(
        es.index(entry(es, "campaign-done")),
        {
            "name": "review-of-review",
            "kind": "review",
            "key": "reviewer2",
            "at": "2026-09-10T10:46:00Z",
            "refs": {"reviews": "semantic-review"},
            "payload": {"result": "FAIL", "commit": "cafe" + "0" * 36},
        },
    )
    keys = {
        "collector": ["collector"],
        "reviewer": ["reviewer"],
        "operator": ["operator"],
        "reviewer2": ["reviewer"],
    }
    v = verdict_of(tmp_path, es, keys=keys)
    assert rejected(v)["semantic"] == "review-missing"
    assert v["verdict"] == "INCONCLUSIVE"


@pytest.mark.parametrize(
    "gpus", [[{"name": "NVIDIA H100"}], [{"index": 0, "name": "H100"}, {"name": "H100"}]]
)
def test_the_routing_gate_does_not_take_a_gpus_place_in_the_list_for_its_index(
    tmp_path: Path, gpus: list[dict[str, Any]]
) -> None:
    """Regression: the host's newest probe listed a GPU without its index, and GPU0 was allowed as its place
    in the list: a missing index counted as one."""
    from tests.test_routing_at_reference_time import CAMPAIGN, route_campaign

    es = qualified_entries()
    es.append(
        {
            "name": "verdict",
            "at": "2026-09-10T11:00:00Z",
            "record_verdict": {"subject": {"campaign": CAMPAIGN["campaign"]}, "key": "reviewer"},
        }
    )
    newest = copy.deepcopy(entry(es, "host"))
    newest["name"], newest["at"] = "newest-host", "2026-09-10T11:10:00Z"
    newest["subject"] = {"host": "gpu-box-1"}
    newest["payload"]["gpus"] = gpus
    es.append(newest)
    r = route_campaign(tmp_path, es, "2026-09-10T12:00:00Z")
    assert r["allowed"] is False
    assert any("without its index" in x for x in r["reasons"]), r["reasons"]


def test_an_unreadable_kernel_log_whose_window_begins_after_it_was_read_is_unbounded(tmp_path: Path) -> None:
    """Regression: an unreadable kernel log collected at 10:49 claiming `since` 11:00 — a window that begins
    after the log was read — was taken to cover nothing of the run, and the campaign was QUALIFIED. A
    window that contradicts itself tells nothing of where it begins: unbounded, the run's events are
    unknown (INCONCLUSIVE)."""
    from tests.policy.test_fail_closed import _campaign_kernel_log

    es = qualified_entries()
    log = _campaign_kernel_log({})
    log["at"] = "2026-09-10T10:49:00Z"
    log["payload"] = {
        "source": "dmesg",
        "readable": False,
        "reason": "no access",
        "since": "2026-09-10T11:00:00Z",
    }
    es.append(log)
    v = verdict_of(tmp_path, es)
    assert gates(v)["runtime-stability"] == "missing", v["gates"]
    assert v["verdict"] == "INCONCLUSIVE"


def test_a_job_that_never_launched_its_engine_is_judged_on_its_own_hosts_probe(tmp_path: Path) -> None:
    """Regression: a campaign whose job failed host prerequisites before launching anything (no GPU on a
    GPU campaign) had its own host probe and model pin rejected `other-host` ("not no launch of the
    campaign names a host") and was INCONCLUSIVE. The job ran on its host: that host's probe is the
    campaign's fact, and it shows no GPU."""
    es = [copy.deepcopy(e) for e in qualified_entries() if e.get("name") in ("campaign-job", "host", "pin")]
    entry(es, "host")["payload"]["gpus"] = []
    es.append(
        {
            "name": "campaign-failed",
            "kind": "job",
            "key": "collector",
            "at": "2026-09-10T10:00:30Z",
            "refs": {"job": "campaign-job"},
            "payload": {
                "job_id": "campaign-1",
                "state": "failed",
                "ended_at": "2026-09-10T10:00:30Z",
                "reason": "gate host-prerequisites failed: a GPU is required and none was found",
            },
        }
    )
    v = verdict_of(tmp_path, es, subject={"campaign": "neighbour-campaign-7"})
    assert rejected(v) == {}
    assert gates(v)["host-prerequisites"] == "failed"
    assert v["verdict"] == "NOT QUALIFIED — PREREQUISITES"


@pytest.mark.parametrize("status", ["not_run", "not_authorized"])
def test_a_gate_that_never_ran_is_no_newer_run(tmp_path: Path, status: str) -> None:
    """Regression: a later job that stopped before its harness gates recorded them `not_authorized` (or
    `not_run`); those took credit from the reviewed runs as "a newer run of the same spec" — and were
    themselves rejected as not the approved spec. A gate that never ran measured nothing."""
    es = qualified_entries()
    for gate in ("semantic", "benchmark"):
        _insert_by_log_time(
            es,
            {
                "name": f"{gate}-{status}",
                "kind": "gate.result",
                "key": "collector",
                "at": "2026-09-10T10:45:00Z",
                "refs": {"job": "campaign-job"},
                "payload": {"gate": gate, "status": status, "reason": "gate host-prerequisites failed"},
            },
        )
    v = verdict_of(tmp_path, es)
    assert "newer-run" not in rejected(v).values(), rejected(v)
    assert v["verdict"] == QUALIFIED
