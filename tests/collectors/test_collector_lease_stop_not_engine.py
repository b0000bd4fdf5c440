"""Audit 91 f1, f2: the collector's own lease stop was judged the engine's fault.

f1: an engine lease shorter than the gates ([engine] lease_seconds = 14): the harness's lease was the gate's
and the job's lease left, never the engine's, so the lease watchdog SIGTERMed the healthy engine mid-benchmark
("engine fault … ClientPayloadError", launch lease-expired): NOT QUALIFIED. A harness run never outlives the
engine it measures: its lease is also the engine's lease left less ``ENGINE_STOP_RESERVE_S``, so the bound
the campaign set ends the run as ``lease-expired`` (INCONCLUSIVE, the campaign's lease named) and the
collector then stops the engine itself.

f2: the job's lease ran out mid-benchmark ([campaign] lease_seconds = 14); the "/health before the stop"
raced the watchdog's stop and recorded ConnectError. The collector asks no engine its own stop has begun
stopping, and records no probe such a stop began during (why: ``details.before_stop``)."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import ledger.collectors.campaign as campaign_module
from ledger.collectors.benchmark import LEASE_EXPIRED, LIVENESS_TIMEOUT_S
from ledger.collectors.campaign import (
    ENGINE_STOP_RESERVE_S,
    MIN_HARNESS_LEASE_S,
    CampaignRunner,
    load_campaign,
    policy_verdict,
)
from ledger.collectors.launch import EngineRun, LaunchSpec
from ledger.recorder import LocalRecorder
from ledger.service import Ledger

from .conftest import entries_of, free_port
from .test_harness_gates import corpus, gate, policy_with, stub_campaign  # noqa: F401 (a fixture)


def _launch(ledger: Ledger) -> dict[str, Any]:
    [launch] = [e["payload"] for e in entries_of(ledger, "engine.launch")]
    return launch


def _leased(tmp_path: Path, model_dir: Path, sem: tuple[Path, str], *, engine: int, job: int) -> Path:
    # 50 ms to the first token: the approved benchmark (96 requests × 3 levels × 2) needs far more than the
    # lease the campaign leaves it
    p = stub_campaign(tmp_path, model_dir, sem, stub_args=("--ttft-ms", "50"))
    text = p.read_text().replace("lease_seconds = 240", f"lease_seconds = {engine}")
    text = text.replace("lease_seconds = 300", f"lease_seconds = {job}")
    p.write_text(text)
    return p


def _run(path: Path, recorder: LocalRecorder, tmp_path: Path, policy: Any) -> CampaignRunner:
    runner = CampaignRunner(
        load_campaign(path), recorder, work_dir=tmp_path / "work", handle_signals=False, policy=policy
    )
    runner.run()
    return runner


@pytest.mark.parametrize("bound", ["engine", "job"])
def test_lease_shorter_than_the_gates_ends_the_harness_as_lease_expired_not_an_engine_fault(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
    bound: str,
) -> None:
    leases = {"engine": 17, "job": 240} if bound == "engine" else {"engine": 240, "job": 17}
    c = _leased(tmp_path, tiny_model_dir, corpus, **leases)
    policy = policy_with(tmp_path, corpus[1])
    runner = _run(c, recorder, tmp_path, policy)
    bench = gate(ledger, "benchmark")["payload"]
    assert bench["bounds"]["outcome"] == LEASE_EXPIRED, bench["reason"]
    assert "engine fault" not in (bench["reason"] or "")
    # the reason names the campaign's lease that set the harness's
    assert "[engine] lease_seconds" in bench["reason"] and "too short for them" in bench["reason"]
    launch = _launch(ledger)
    # the collector stopped the engine itself, before its lease watchdog did
    assert launch["details"]["stop_reason"] == "finished", launch["details"]
    assert launch["lease_expired"] is False and launch["failure_signature"] is None
    assert "stop_sent_at" in launch["details"]
    probes = [e["payload"] for e in entries_of(ledger, "health.probe") if e["payload"]["check"] == "health"]
    assert probes[-1]["details"]["phase"] == "before-stop" and probes[-1]["ok"] is True
    v = policy_verdict(recorder, runner.subject)
    assert v is not None and v["verdict"] == "INCONCLUSIVE", v
    states = {g["name"]: g["status"] for g in v["gates"]}
    assert states["runtime-stability"] == "passed" and states["api-readiness"] == "passed", states
    assert any(r["rule"] == "harness-lease-expired" for r in v["rejected"]), v["rejected"]


# --- the harness's lease, unit by unit ---------------------------------------------------------------------


def _runner(job_left: float, engine_left: float | None) -> Any:
    run = (
        None
        if engine_left is None
        else SimpleNamespace(lease_left=lambda: engine_left, spec=SimpleNamespace(lease_seconds=30.0))
    )
    spec = SimpleNamespace(
        campaign=SimpleNamespace(lease_seconds=600), engine=SimpleNamespace(lease_seconds=30)
    )
    return SimpleNamespace(_job_lease_left=lambda: job_left, engine=run, c=SimpleNamespace(spec=spec))


def test_harness_lease_is_bounded_by_the_engines_lease_left_less_the_stop_reserve() -> None:
    lease, why = CampaignRunner._harness_lease(_runner(500.0, 40.0), 600.0)
    assert lease == pytest.approx(40.0 - ENGINE_STOP_RESERVE_S)
    assert why is not None and "[engine] lease_seconds = 30" in why
    assert ENGINE_STOP_RESERVE_S == LIVENESS_TIMEOUT_S  # one copy: the harness's lease-end check's time


def test_harness_lease_neighbours_gate_and_job_leases_still_bound_it() -> None:
    # the gate's own lease is the shortest: nothing named
    assert CampaignRunner._harness_lease(_runner(500.0, 400.0), 60.0) == (60.0, None)
    # the job's lease left is the shortest
    lease, why = CampaignRunner._harness_lease(_runner(20.0, 400.0), 60.0)
    assert lease == 20.0 and why is not None and "[campaign] lease_seconds = 600" in why
    # no engine (the gate is refused before): the old bound
    assert CampaignRunner._harness_lease(_runner(500.0, None), 60.0) == (60.0, None)


def test_engine_lease_left_shorter_than_the_reserve_gives_the_harness_no_time() -> None:
    lease, why = CampaignRunner._harness_lease(_runner(500.0, ENGINE_STOP_RESERVE_S - 1), 600.0)
    assert lease == MIN_HARNESS_LEASE_S and why is not None


def test_lease_named_only_for_a_lease_expired_run_the_campaigns_lease_bounded() -> None:
    p: dict[str, Any] = {"bounds": {"outcome": LEASE_EXPIRED}, "reason": "no aggregate result: x"}
    CampaignRunner._lease_named(p, 2.0, "the engine's lease left")
    assert p["reason"].startswith("no aggregate result: x; the harness's lease of 2 s was the engine's")
    for outcome, why in (("fault", "the engine's lease left"), (LEASE_EXPIRED, None), ("completed", "x")):
        q: dict[str, Any] = {"bounds": {"outcome": outcome}, "reason": "r"}
        CampaignRunner._lease_named(q, 2.0, why)
        assert q["reason"] == "r"


# --- the /health before the stop (f2) ----------------------------------------------------------------------


class _Run:
    def __init__(self, begun: list[str | None]) -> None:
        self.ready_state = object()
        self.failure_observed: str | None = None
        self.before_stop_note: str | None = None
        self.spec = SimpleNamespace(base_url="http://127.0.0.1:1", engine="generic")
        self._begun = begun

    def alive(self) -> bool:
        return True

    def engine_pids(self) -> set[int]:
        """No engine process to find suspended (the before-stop probe asks a held engine nothing: fix 158)."""
        return set()

    def stop_begun(self) -> str | None:
        return self._begun.pop(0) if len(self._begun) > 1 else self._begun[0]


def _before_stop(monkeypatch: pytest.MonkeyPatch, run: _Run, health: dict[str, Any]) -> list[Any]:
    recorded: list[Any] = []
    asked: list[str] = []

    def probe(url: str, engine: str, **kw: Any) -> dict[str, Any]:
        asked.append(url)
        return dict(health)

    monkeypatch.setattr(campaign_module, "probe_health", probe)
    fake = SimpleNamespace(
        log=lambda _m: None,
        _record=lambda kind, payload: recorded.append((kind, payload)),
        _harness_gates=lambda: [SimpleNamespace(request_timeout_seconds=1.0)],
    )
    CampaignRunner._health_before_stop(fake, run)  # type: ignore[arg-type]
    return [asked, recorded]


def test_before_stop_probe_of_an_engine_the_lease_watchdog_is_stopping_is_not_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = _Run(["lease-expired"])
    asked, recorded = _before_stop(monkeypatch, run, {"ok": True})
    assert asked == [] and recorded == [] and run.failure_observed is None
    assert run.before_stop_note == "not asked: the collector's own stop (lease-expired) had begun"


def test_before_stop_probe_failed_as_the_collectors_own_stop_began_is_not_recorded_as_the_engines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # not stopping when asked, stopping when the ConnectError came back (uvicorn closed its listener)
    run = _Run([None, "lease-expired"])
    failed = {"ok": False, "http_status": 503, "error": "ConnectError", "endpoint": "/health"}
    asked, recorded = _before_stop(monkeypatch, run, failed)
    assert len(asked) == 1 and recorded == [] and run.failure_observed is None
    assert run.before_stop_note is not None and "began while /health was asked (ConnectError)" in (
        run.before_stop_note
    )


def test_before_stop_probe_neighbour_a_failure_with_no_stop_begun_still_counts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = _Run([None])
    failed = {"ok": False, "http_status": 503, "error": "HTTP 503", "endpoint": "/health"}
    asked, recorded = _before_stop(monkeypatch, run, failed)
    assert len(asked) == 1 and [k for k, _ in recorded] == ["health.probe"]
    assert recorded[0][1]["details"]["phase"] == "before-stop"
    assert run.failure_observed is not None and run.before_stop_note is None


# --- launch.py: the stop's time, and a lease running out during the collector's own stop --------------------


def _sleeper(tmp_path: Path, lease: float) -> EngineRun:
    port = free_port()
    spec = LaunchSpec(
        engine="generic",
        command=["python3", "-c", "import time; time.sleep(60)"],
        base_url=f"http://127.0.0.1:{port}",
        lease_seconds=lease,
        grace_seconds=3,
    )
    run = EngineRun(spec, tmp_path / "logs")
    run.start()
    return run


def test_lease_running_out_during_the_collectors_own_stop_is_not_lease_expired(tmp_path: Path) -> None:
    run = _sleeper(tmp_path, 60)
    try:
        with run._lock:
            run.stop_reason = "finished"  # the collector's stop has begun (set first thing by stop())
        run._deadline = time.monotonic() - 1  # … and the lease runs out meanwhile
        run._watch_lease()
        assert run.lease_expired is False
        assert run.stop_begun() == "finished"
    finally:
        run.stop("finished")
    p = run.payload()
    assert p["lease_expired"] is False and p["details"]["stop_reason"] == "finished"
    assert isinstance(p["details"]["stop_sent_at"], str)


def test_lease_watchdog_neighbour_a_lease_running_out_still_stops_as_lease_expired(tmp_path: Path) -> None:
    run = _sleeper(tmp_path, 0.5)
    deadline = time.monotonic() + 20
    while run.alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    run.stop("finished")
    p = run.payload()
    assert p["lease_expired"] is True and p["details"]["stop_reason"] == "lease-expired"
    assert isinstance(p["details"]["stop_sent_at"], str)  # the watchdog's stop is the collector's own
    assert run.stop_begun() == "lease-expired"


def test_stop_sent_at_neighbour_an_engine_that_ended_on_its_own_records_none(tmp_path: Path) -> None:
    port = free_port()
    spec = LaunchSpec(
        engine="generic",
        command=["python3", "-c", "pass"],
        base_url=f"http://127.0.0.1:{port}",
        lease_seconds=30,
        grace_seconds=3,
    )
    run = EngineRun(spec, tmp_path / "logs")
    run.start()
    assert run.wait_exit(20)
    run.stop("finished")
    p = run.payload()
    assert p["details"]["stop_reason"] == "exited" and "stop_sent_at" not in p["details"]
