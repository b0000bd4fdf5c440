"""Fix 67 (audit 57 f1): a GPU fault from before the campaign, in the campaign's own kernel log, failed it.

Seed 003: the host's GPU hung and was reset at 09:01, before this campaign; the operator records the kernel
log under the campaign before any model work (README: ``ledger collect kernel --since … --campaign C``,
"post-reset GPU state") — "this is not evidence of the offending kernel". runtime-stability judged
``e.derived.gpu_events`` of the campaign's kernel logs whole, with no time bound, so that post-reset check
failed every campaign that followed a reset: NOT QUALIFIED — RUNTIME RELIABILITY, while the same log filed
under the host alone left it QUALIFIED.

Now the kernel-log checks read ``e.derived.gpu_events_in_campaign``: the events at or after the start of the
campaign's first job or run (``acceptance._campaign_starts``: the earliest start the log shows for a job
entry, launch, probe or harness result of the campaign — its claimed ``started_at`` / ``collected_at`` where
earlier than when the log took it). An event without a time counts; a log whose campaign has no job or run
in the log, or that names no campaign, counts whole (as before). An event before the start still dates the
reset (``last_reset_at``) and counts for any launch whose run it lies in (``gpu_events_during_run``).
"""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path
from typing import Any

import pytest

from ledger.entries import parse_time
from ledger.policy.acceptance import _campaign_starts
from ledger.policy.fixtures import _Builder
from ledger.policy.loader import load_policy
from ledger.policy.snapshot import Evidence, clear_caches, load_snapshot
from ledger.policy.verdict import evaluate
from ledger.service import Ledger
from tests.policy.conftest import FIXTURES, POLICY_DIR

SHARED = FIXTURES / "_shared"
POST_RESET = FIXTURES / "backend-qualification" / "seed003-post-reset-kernel-log.toml"
INSIDE = FIXTURES / "backend-qualification" / "seed003-reset-inside-the-job.toml"
SUBJECT = {"campaign": "vllm-embed", "backend": "vllm", "model": "Qwen3-Embedding-8B", "host": "gpu-box-1"}
HOST = {"host": "gpu-box-1"}
OTHER = {**SUBJECT, "campaign": "vllm-embed-2"}
# the reasons of the gate's checks (policies/backend-qualification.toml, runtime-stability)
KERNEL_REASON = "the campaign's kernel log records a GPU fault"
RUN_REASON = "while the engine ran"
# the lines of seed 003's reset the GPU-fault catalogue classes gpu-fault
FAULTS = {"mes-unrecoverable", "gpu-reset-begin", "vram-lost"}


def _shared() -> list[dict[str, Any]]:
    e = tomllib.loads((SHARED / "ready-campaign.toml").read_text())["entries"]
    e += tomllib.loads((SHARED / "semantic-benchmark.toml").read_text())["entries"]
    return copy.deepcopy(e)


def _own(path: Path) -> list[dict[str, Any]]:
    return copy.deepcopy(tomllib.loads(path.read_text())["entries"])


def _by(entries: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(x for x in entries if x.get("name") == name)


def _reset(at: str) -> list[dict[str, Any]]:
    """Seed 003's MES failure and automatic reset on 2026-09-10 at ``at`` (HH:MM), each line with its
    own second."""
    dev, pre = "0000:c3:00.0", "amdgpu 0000:c3:00.0: amdgpu: "
    lines = [
        ("14", "mes-failure", "MES failed to respond to msg=REMOVE_QUEUE"),
        ("14", "mes-unrecoverable", "MES might be in unrecoverable state, issue a GPU reset"),
        ("15", "gpu-reset-begin", "GPU reset begin!"),
        ("18", "vram-lost", "VRAM is lost due to GPU reset!"),
        ("18", "gpu-reset-succeeded", "GPU reset(1) succeeded!"),
    ]
    return [
        {"time": f"2026-09-10T{at}:{s}Z", "kind": k, "device": dev, "message": pre + m} for s, k, m in lines
    ]


def _kernel(name: str, at: str, events: list[dict[str, Any]], **subject: Any) -> dict[str, Any]:
    d: dict[str, Any] = {
        "name": name,
        "kind": "kernel.log",
        "key": "collector",
        "at": at,
        "payload": {"source": "journalctl", "since": "2026-09-10T08:00:00Z", "events": events},
    }
    if subject:
        d["subject"] = subject
    return d


def _job(name: str, at: str, state: str, jid: str, **kw: Any) -> dict[str, Any]:
    p: dict[str, Any] = {"job_id": jid, "state": state}
    p.update(started_at=at) if state == "running" else p.update(ended_at=at, exit_code=0)
    p.update(kw.pop("payload", {}))
    return {"name": name, "kind": "job", "key": "collector", "at": at, "payload": p, **kw}


class Run:
    """A fixture ledger built from ``entries``, each entry's derived facts as the verdict last set them."""

    def __init__(
        self, tmp_path: Path, entries: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        start = "2026-09-10T08:00:00Z"
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
        self.derived: dict[str, dict[str, Any]] = {}
        real = Evidence.set_derived

        def record(ev: Evidence, derived: dict[str, Any]) -> None:
            self.derived[ev.id] = derived
            real(ev, derived)

        monkeypatch.setattr(Evidence, "set_derived", record)
        clear_caches()  # a verdict remembered for the same log would set nothing

    def verdict(self, subject: dict[str, str] | None = None) -> dict[str, Any]:
        self.derived.clear()
        clear_caches()
        return evaluate(self.led, dict(subject or SUBJECT), load_policy("backend-qualification", POLICY_DIR))

    def of(self, name: str) -> dict[str, Any]:
        return self.derived[self.ids[name]]

    def codes_in_campaign(self, name: str) -> list[Any]:
        return [f["code"] for f in self.of(name)["gpu_events_in_campaign"]]


def _stability(result: dict[str, Any]) -> dict[str, Any]:
    return next(g for g in result["gates"] if g["name"] == "runtime-stability")


def _reason(result: dict[str, Any]) -> str:
    return str(_stability(result).get("reason") or "")


# -- the seed 003 pair (the shipped fixtures) --------------------------------------------------------------


def test_a_gpu_reset_before_the_campaign_in_its_own_kernel_log_is_not_blamed_on_the_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = Run(tmp_path, _shared() + _own(POST_RESET), monkeypatch)
    result = run.verdict()
    assert result["verdict"] == "QUALIFIED", _reason(result)
    assert _stability(result)["status"] == "passed"
    assert run.ids["post-reset-kernel"] in result["used"]
    kernel = run.of("post-reset-kernel")
    assert len(kernel["gpu_events"]) == 5  # the log's events, whole, as before
    assert kernel["gpu_events_in_campaign"] == [] and kernel["gpu_events_in_campaign_named"] == ""
    # the reset still dates the device state: the host probe from before it is stale
    assert any(r["rule"] == "before-gpu-reset" for r in result["rejected"])


def test_a_gpu_reset_inside_the_job_read_after_it_still_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = Run(tmp_path, _shared() + _own(INSIDE), monkeypatch)
    result = run.verdict()
    assert result["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY"
    assert KERNEL_REASON in _reason(result) and RUN_REASON in _reason(result)
    assert set(run.codes_in_campaign("kernel-after-the-job")) >= FAULTS
    assert (
        "mes-unrecoverable (gpu-fault) at 2026-09-10T10:21:14"
        in run.of("kernel-after-the-job")["gpu_events_in_campaign_named"]
    )


def test_the_audit_sequence_with_the_log_under_the_host_only_is_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same post-reset log under the host alone (no campaign): no campaign to start, so every event is
    kept (as before); the campaign's kernel-log checks do not select it, and the reset lies in no run of the
    campaign — QUALIFIED, as before the fix."""
    es = _shared() + _own(POST_RESET)
    _by(es, "post-reset-kernel")["subject"] = {"campaign": None, "backend": None, "model": None}
    run = Run(tmp_path, es, monkeypatch)
    assert run.verdict()["verdict"] == "QUALIFIED"
    kernel = run.of("post-reset-kernel")
    assert kernel["gpu_events_in_campaign"] == kernel["gpu_events"] and len(kernel["gpu_events"]) == 5
    assert run.of("launch")["gpu_events_during_run"] == []


# -- where the campaign starts -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("second", "counts"),
    [
        pytest.param("59", False, id="one-second-before-the-job"),
        pytest.param("00", True, id="exactly-at-the-job-start"),
    ],
)
def test_a_fault_at_the_campaign_start_counts_one_before_it_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, second: str, counts: bool
) -> None:
    """The job starts 10:00:00 (its running entry and its started_at); the log, read after the job, holds one
    MES failure at 09:59:59 or at 10:00:00."""
    at = "2026-09-10T09:59:59Z" if second == "59" else "2026-09-10T10:00:00Z"
    fault = {**_reset("10:00")[1], "time": at}
    run = Run(tmp_path, [*_shared(), _kernel("kernel", "2026-09-10T10:55:00Z", [fault])], monkeypatch)
    result = run.verdict()
    assert run.codes_in_campaign("kernel") == (["mes-unrecoverable"] if counts else [])
    assert (KERNEL_REASON in _reason(result)) is counts, _reason(result)
    assert result["verdict"] == ("NOT QUALIFIED — RUNTIME RELIABILITY" if counts else "QUALIFIED")


def test_a_fault_between_two_jobs_of_the_campaign_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first job of the campaign ran 08:30–08:40 (no engine); the reset at 09:01 falls between it and the
    10:00 job: the campaign had begun — the campaign's kernel log fails it, though no launch ran then."""
    shared = _shared()
    # the warm-up job approves the campaign's spec, as the later job does (one binding none conflicts: fix117)
    spec = copy.deepcopy(_by(shared, "campaign-job")["payload"]["spec"])
    es = [
        *shared,
        _job("first-job", "2026-09-10T08:30:00Z", "running", "warm-up", payload={"spec": spec}),
        _job("first-job-done", "2026-09-10T08:40:00Z", "succeeded", "warm-up"),
        *_own(POST_RESET),
    ]
    run = Run(tmp_path, es, monkeypatch)
    result = run.verdict()
    assert set(run.codes_in_campaign("post-reset-kernel")) >= FAULTS
    assert KERNEL_REASON in _reason(result) and RUN_REASON not in _reason(result), _reason(result)
    assert result["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY"


@pytest.mark.parametrize(
    "claim",
    [
        pytest.param("job-started_at", id="the-job-claims-an-earlier-started_at"),
        pytest.param("job-collected_at", id="the-job-claims-an-earlier-collected_at"),
        pytest.param("launch-started_at", id="the-launch-claims-an-earlier-started_at"),
    ],
)
def test_a_claimed_earlier_start_of_the_campaign_counts_from_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, claim: str
) -> None:
    """The start is the earlier of when the log took the job or launch and the start it claims: nothing inside
    the campaign by its own account is left out (the reset at 09:01 is after a claimed 09:00 start)."""
    es = _shared() + _own(POST_RESET)
    if claim == "job-started_at":
        _by(es, "campaign-job")["payload"]["started_at"] = "2026-09-10T09:00:00Z"
    elif claim == "job-collected_at":
        job = _by(es, "campaign-job")
        job["at"], job["logged_at"] = "2026-09-10T09:00:00Z", "2026-09-10T10:00:00Z"
    else:
        _by(es, "launch")["payload"]["started_at"] = "2026-09-10T09:00:30Z"
    run = Run(tmp_path, es, monkeypatch)
    result = run.verdict()
    assert set(run.codes_in_campaign("post-reset-kernel")) >= FAULTS
    assert KERNEL_REASON in _reason(result), _reason(result)


def test_a_superseded_earlier_job_still_dates_the_campaign_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Supersession withdraws what an entry claims, not that the log took it then: an earlier start only ever
    counts more events (fail closed)."""
    es = [
        *_shared(),
        _job("first-job", "2026-09-10T08:30:00Z", "running", "warm-up"),
        {
            "name": "withdraw-first-job",
            "kind": "supersession",
            "key": "operator",
            "at": "2026-09-10T08:35:00Z",
            "refs": {"supersedes": "first-job"},
            "payload": {"reason": "recorded under the wrong campaign"},
        },
        *_own(POST_RESET),
    ]
    run = Run(tmp_path, es, monkeypatch)
    result = run.verdict()
    assert set(run.codes_in_campaign("post-reset-kernel")) >= FAULTS
    assert KERNEL_REASON in _reason(result)


def test_another_campaigns_earlier_job_on_the_host_does_not_start_this_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vllm-embed-2 ran a job and a launch on the same host from 08:30: its start is not vllm-embed's. The
    campaign's verdict stays QUALIFIED; and read over every entry of the host (both campaigns), each campaign
    starts at its own first job (``_campaign_starts``, keyed by the campaign label)."""
    es = _shared() + _own(POST_RESET)
    other_launch = copy.deepcopy(_by(es, "launch"))
    other_launch.update(name="other-launch", at="2026-09-10T08:31:00Z", subject=dict(OTHER))
    other_launch["refs"] = {"job": "other-job"}
    other_launch["payload"]["started_at"] = "2026-09-10T08:30:20Z"
    es += [
        _job("other-job", "2026-09-10T08:30:00Z", "running", "other-1", subject=dict(OTHER)),
        other_launch,
        _job("other-job-done", "2026-09-10T08:50:00Z", "succeeded", "other-1", subject=dict(OTHER)),
    ]
    run = Run(tmp_path, es, monkeypatch)
    assert run.verdict()["verdict"] == "QUALIFIED"
    assert run.codes_in_campaign("post-reset-kernel") == []
    policy = load_policy("backend-qualification", POLICY_DIR)
    snap = load_snapshot(run.led, HOST)
    assert {e.subject.get("campaign") for e in snap.entries} >= {"vllm-embed", "vllm-embed-2"}
    starts = _campaign_starts(snap.entries, frozenset(policy.acceptance.job_output_kinds))
    assert starts["vllm-embed"] == parse_time("2026-09-10T10:00:00Z")
    assert starts["vllm-embed-2"] == parse_time("2026-09-10T08:30:00Z")


def test_a_campaign_with_no_job_or_run_in_the_log_counts_every_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No job, launch, probe or harness result of the campaign: no start can be told — every event counts."""
    run = Run(tmp_path, _own(POST_RESET), monkeypatch)
    run.verdict()
    kernel = run.of("post-reset-kernel")
    assert kernel["gpu_events_in_campaign"] == kernel["gpu_events"] and len(kernel["gpu_events"]) == 5


# -- the events of the log ---------------------------------------------------------------------------------


def test_an_event_without_a_time_in_a_log_from_before_the_campaign_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An event the collector could read no time for cannot be shown before the campaign: it counts (fail
    closed), named as such; the timed reset beside it does not."""
    es = _shared() + _own(POST_RESET)
    events = _by(es, "post-reset-kernel")["payload"]["events"]
    untimed = {k: v for k, v in events[1].items() if k != "time"}  # mes-unrecoverable, its time dropped
    events.append(untimed)
    run = Run(tmp_path, es, monkeypatch)
    result = run.verdict()
    assert run.codes_in_campaign("post-reset-kernel") == ["mes-unrecoverable"]
    assert "a time its log does not record" in run.of("post-reset-kernel")["gpu_events_in_campaign_named"]
    assert KERNEL_REASON in _reason(result) and "09:01" not in _reason(result), _reason(result)
    assert result["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY"


def test_a_log_mixing_events_before_and_inside_the_campaign_names_only_the_campaigns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One log read after the job, its events out of time order: a fault inside the job first, then seed
    003's historical reset. The inside one fails the campaign; the reason names it, not the reset before."""
    inside = {**_reset("10:21")[1]}
    run = Run(
        tmp_path,
        [*_shared(), _kernel("kernel", "2026-09-10T10:55:00Z", [inside, *_reset("09:01")])],
        monkeypatch,
    )
    result = run.verdict()
    assert run.codes_in_campaign("kernel") == ["mes-unrecoverable"]
    named = run.of("kernel")["gpu_events_in_campaign_named"]
    assert "10:21:14" in named and "09:01" not in named
    reason = _reason(result)
    assert KERNEL_REASON in reason and "09:01" not in reason, reason
    assert result["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY"


@pytest.mark.parametrize(
    ("xid", "message", "reason"),
    [
        pytest.param(999, "pid=1, name=vllm, new", "does not know", id="unknown-xid"),
        pytest.param(
            154,
            "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)",
            "Xid 154 recovery action other than None",
            id="xid154-reboot",
        ),
    ],
)
@pytest.mark.parametrize("inside", [False, True], ids=["before-the-campaign", "inside-the-job"])
def test_the_unknown_class_and_recovery_action_checks_are_bounded_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, xid: int, message: str, reason: str, inside: bool
) -> None:
    """The two other kernel-log checks of runtime-stability read the same bounded events: an unknown Xid or a
    reboot-required recovery action before the campaign's first job is not its; inside the job it fails."""
    at = "2026-09-10T10:21:00Z" if inside else "2026-09-10T09:01:00Z"
    ev = {"time": at, "kind": "nvrm-xid", "xid": xid, "device": "PCI:0000:3b:00"}
    ev["message"] = f"NVRM: Xid (PCI:0000:3b:00): {xid}, {message}"
    logged = "2026-09-10T10:55:00Z" if inside else "2026-09-10T09:31:00Z"
    run = Run(tmp_path, [*_shared(), _kernel("kernel", logged, [ev])], monkeypatch)
    result = run.verdict()
    assert run.codes_in_campaign("kernel") == ([f"xid:{xid}"] if inside else [])
    assert (reason in _reason(result)) is inside, _reason(result)
    assert (result["verdict"] == "QUALIFIED") is not inside
