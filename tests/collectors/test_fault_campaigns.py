"""Regression tests named after the seed failures, against real processes of the fault-injection engine.

Each runs a real campaign (real engine process group, real HTTP, a real ledger) and asserts the recorded
failure signature and the gate results.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ledger.collectors.campaign import GATES, CampaignRunner, load_campaign
from ledger.collectors.launch import EngineRun, LaunchSpec, group_alive
from ledger.collectors.readiness import check_ready
from ledger.recorder import LocalRecorder
from ledger.service import Ledger

from .conftest import FAULT_ENGINE, LEDGER, entries_of, fault_campaign, free_port


def run_campaign(path: Path, recorder: LocalRecorder, tmp_path: Path) -> Any:
    runner = CampaignRunner(load_campaign(path), recorder, work_dir=tmp_path / "work", handle_signals=False)
    return runner.run()


def gate_statuses(ledger: Ledger) -> dict[str, str]:
    return {e["payload"]["gate"]: e["payload"]["status"] for e in entries_of(ledger, "gate.result")}


def launches(ledger: Ledger) -> list[dict[str, Any]]:
    return sorted((e["payload"] for e in entries_of(ledger, "engine.launch")), key=lambda p: p["attempt"])


def assert_ladder(ledger: Ledger, failed: str) -> None:
    statuses = gate_statuses(ledger)
    assert set(statuses) == set(GATES)
    i = GATES.index(failed)
    assert all(statuses[g] == "passed" for g in GATES[:i])
    assert statuses[failed] == "failed"
    assert all(statuses[g] == "not_authorized" for g in GATES[i + 1 :])


def assert_every_entry_refs_the_job(ledger: Ledger) -> None:
    jobs = entries_of(ledger, "job")
    start = next(j for j in jobs if j["payload"]["state"] == "running")
    final = [j for j in jobs if j["payload"]["state"] != "running"]
    assert len(final) == 1
    for kind in ("host.probe", "env.snapshot", "model.pin", "engine.launch", "gate.result", "health.probe"):
        for e in entries_of(ledger, kind):
            assert {"rel": "job", "id": start["id"]} in e["refs"], kind
    assert {"rel": "job", "id": start["id"]} in final[0]["refs"]


def test_wsl2_uva_unavailable(
    tmp_path: Path, tiny_model_dir: Path, ledger: Ledger, recorder: LocalRecorder
) -> None:
    c = fault_campaign(tmp_path, tiny_model_dir, [{"name": "default", "args": ["--mode", "uva"]}])
    result = run_campaign(c, recorder, tmp_path)
    assert result.state == "failed"
    assert result.verdict_hint == "NOT QUALIFIED — RUNTIME RELIABILITY"
    [launch] = launches(ledger)
    assert launch["failure_signature"] == "uva-unavailable"
    assert launch["failure_detail"].endswith("RuntimeError: UVA is not available")
    assert launch["ready"] is False
    assert launch["exit_code"] == 1
    assert_ladder(ledger, "api-readiness")
    assert_every_entry_refs_the_job(ledger)


def test_marlin_repack_after_load(
    tmp_path: Path, tiny_model_dir: Path, ledger: Ledger, recorder: LocalRecorder
) -> None:
    c = fault_campaign(tmp_path, tiny_model_dir, [{"name": "v1-runner", "args": ["--mode", "marlin"]}])
    run_campaign(c, recorder, tmp_path)
    [launch] = launches(ledger)
    assert launch["failure_signature"] == "weight-repack-failed"
    assert launch["phases"]["weights_loaded_s"] == 93.66
    assert launch["phases"]["model_memory_gib"] == 12.0
    assert "t_weights_loaded_s" in launch["phases"]
    assert_ladder(ledger, "api-readiness")


def test_engine_died_before_readiness(
    tmp_path: Path, tiny_model_dir: Path, ledger: Ledger, recorder: LocalRecorder
) -> None:
    c = fault_campaign(tmp_path, tiny_model_dir, [{"name": "triton", "args": ["--mode", "die"]}])
    run_campaign(c, recorder, tmp_path)
    [launch] = launches(ledger)
    assert launch["failure_signature"] == "engine-died-before-readiness"
    assert launch["ready"] is False
    assert launch["details"]["stop_reason"] == "exited"
    assert launch["phases"]["weights_loaded_s"] == 91.18
    assert_ladder(ledger, "api-readiness")


def test_seed000_fallback_ladder_stops_after_the_attempt_budget(
    tmp_path: Path, tiny_model_dir: Path, ledger: Ledger, recorder: LocalRecorder
) -> None:
    """Default runner → UVA; V1 runner (only after UVA) → Marlin; one kernel retry (only after a repack
    failure) → died before readiness; then stop. An attempt whose precondition does not hold is skipped."""
    c = fault_campaign(
        tmp_path,
        tiny_model_dir,
        [
            {"name": "default", "args": ["--mode", "uva"]},
            {
                "name": "v1-runner",
                "args": ["--mode", "marlin"],
                "after": ["uva-unavailable"],
                "env": {"VLLM_USE_V2_MODEL_RUNNER": "0"},
            },
            {"name": "oom-retry", "args": ["--mode", "ok"], "after": ["cuda-oom"]},
            {"name": "triton-kernel", "args": ["--mode", "die"], "after": ["weight-repack-failed"]},
        ],
    )
    result = run_campaign(c, recorder, tmp_path)
    got = [(p["details"]["attempt_name"], p["failure_signature"]) for p in launches(ledger)]
    assert got == [
        ("default", "uva-unavailable"),
        ("v1-runner", "weight-repack-failed"),
        ("triton-kernel", "engine-died-before-readiness"),
    ]
    assert launches(ledger)[1]["env"]["VLLM_USE_V2_MODEL_RUNNER"] == "0"
    readiness = next(g for g in result.gates if g.gate == "api-readiness")
    assert readiness.status == "failed"
    assert len(readiness.evidence) == 3
    assert_ladder(ledger, "api-readiness")


def test_abort_on_first_request_gpu_hang(
    tmp_path: Path, tiny_model_dir: Path, ledger: Ledger, recorder: LocalRecorder
) -> None:
    c = fault_campaign(tmp_path, tiny_model_dir, [{"name": "default", "args": ["--mode", "abort"]}])
    result = run_campaign(c, recorder, tmp_path)
    [launch] = launches(ledger)
    assert launch["ready"] is True
    assert launch["ready_endpoint"] == "/health+/is_sleeping"
    assert launch["signal"] == 6
    assert launch["failure_signature"] == "gpu-hang"
    assert "abort" in launch["details"]["signatures_matched"]
    assert "GPU Hang" in launch["failure_detail"]
    assert_ladder(ledger, "ready-control")
    control = next(g for g in result.gates if g.gate == "ready-control")
    assert "gpu-hang" in (control.reason or "")
    assert result.verdict_hint == "NOT QUALIFIED — CONTROL"


def test_lease_expiry_hang(
    tmp_path: Path, tiny_model_dir: Path, ledger: Ledger, recorder: LocalRecorder
) -> None:
    c = fault_campaign(
        tmp_path, tiny_model_dir, [{"name": "default", "args": ["--mode", "hang", "--child"]}], engine_lease=4
    )
    t0 = time.monotonic()
    run_campaign(c, recorder, tmp_path)
    assert time.monotonic() - t0 < 30
    [launch] = launches(ledger)
    assert launch["lease_expired"] is True
    assert launch["failure_signature"] == "lease-expired"
    assert launch["details"]["stop_reason"] == "lease-expired"
    assert_ladder(ledger, "api-readiness")
    pid = launch["details"]["pid"]
    assert not group_alive(pid)  # the whole group (the engine and its child) is gone


def test_health_200_while_sleeping_is_not_ready(
    tmp_path: Path, tiny_model_dir: Path, ledger: Ledger, recorder: LocalRecorder
) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(FAULT_ENGINE), "--port", str(port), "--mode", "sleeping"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        state = check_ready(base, "vllm")
        while state.status is None and time.monotonic() < deadline:
            time.sleep(0.1)
            state = check_ready(base, "vllm")
        assert state.ready is False
        assert state.note == "sleeping"
        assert state.endpoint == "/health+/is_sleeping"
    finally:
        proc.terminate()
        proc.wait(10)
    c = fault_campaign(
        tmp_path, tiny_model_dir, [{"name": "default", "args": ["--mode", "sleeping"]}], engine_lease=4
    )
    run_campaign(c, recorder, tmp_path)
    [launch] = launches(ledger)
    assert launch["ready"] is False
    assert launch["failure_signature"] == "lease-expired"
    assert_ladder(ledger, "api-readiness")


def test_health_failing_right_after_readiness_fails_api_readiness_though_models_answer(
    tmp_path: Path, tiny_model_dir: Path, ledger: Ledger, recorder: LocalRecorder
) -> None:
    """vLLM's /health answers 503 once its engine core is dead while /v1/models still answers: the
    readiness gate recorded the failed /health probe and passed on the identity check alone."""
    c = fault_campaign(
        tmp_path,
        tiny_model_dir,
        [{"name": "default", "args": ["--mode", "dead-after-ready"]}],
        engine_lease=10,
    )
    result = run_campaign(c, recorder, tmp_path)
    assert result.state == "failed"
    [launch] = launches(ledger)
    assert launch["ready"] is True
    probes = {e["payload"]["check"]: e["payload"] for e in entries_of(ledger, "health.probe")}
    assert probes["health"]["ok"] is False and probes["health"]["http_status"] == 503
    assert probes["models"]["ok"] is True
    assert_ladder(ledger, "api-readiness")
    [gate] = [
        e["payload"] for e in entries_of(ledger, "gate.result") if e["payload"]["gate"] == "api-readiness"
    ]
    assert "/health after readiness" in (gate["reason"] or "")


def test_sglang_is_ready_only_after_warmup_not_when_models_answer(
    tmp_path: Path, tiny_model_dir: Path, ledger: Ledger, recorder: LocalRecorder
) -> None:
    """SGLang lists its model while /health still answers 503 (warming up): readiness waits for /health."""
    c = fault_campaign(
        tmp_path, tiny_model_dir, [{"name": "default", "args": ["--mode", "ok"]}], flavor="sglang"
    )
    result = run_campaign(c, recorder, tmp_path)
    assert result.state == "succeeded"
    [launch] = launches(ledger)
    assert launch["engine"] == "sglang"
    assert launch["ready_endpoint"] == "/health"
    assert launch["phases"]["weights_loaded_s"] == 0.3
    assert launch["phases"]["weight_memory_gib"] == 15.07
    # weights (0.3 s) then warm-up (0.3 s) come before readiness; the fired-up line precedes it
    assert launch["time_to_ready_s"] >= 0.6
    assert "t_server_fired_up_s" in launch["phases"]
    assert launch["failure_signature"] is None


def test_sglang_stuck_warming_up_expires_the_lease(
    tmp_path: Path, tiny_model_dir: Path, ledger: Ledger, recorder: LocalRecorder
) -> None:
    c = fault_campaign(
        tmp_path,
        tiny_model_dir,
        [{"name": "default", "args": ["--mode", "hang"]}],
        flavor="sglang",
        engine_lease=4,
    )
    run_campaign(c, recorder, tmp_path)
    [launch] = launches(ledger)
    assert launch["ready"] is False
    assert launch["lease_expired"] is True
    assert launch["failure_signature"] == "lease-expired"
    assert launch["phases"]["weights_loaded_s"] == 0.3  # it got as far as the HTTP server
    assert_ladder(ledger, "api-readiness")


def test_healthy_engine_passes_every_gate(
    tmp_path: Path, tiny_model_dir: Path, ledger: Ledger, recorder: LocalRecorder
) -> None:
    c = fault_campaign(tmp_path, tiny_model_dir, [{"name": "default", "args": ["--mode", "ok"]}])
    result = run_campaign(c, recorder, tmp_path)
    assert result.state == "succeeded"
    assert result.verdict_hint == "INCONCLUSIVE"  # semantic and benchmark not run: not a pass (issue 11)
    statuses = gate_statuses(ledger)
    assert [statuses[g] for g in GATES] == ["passed"] * 7 + ["not_run"] * 2
    [launch] = launches(ledger)
    assert launch["failure_signature"] is None
    assert launch["details"]["stop_reason"] == "finished"
    seq = next(
        e["payload"] for e in entries_of(ledger, "health.probe") if e["payload"]["check"] == "sequential"
    )
    assert seq["count"] == 20  # the campaign names no count: the policy's sequential_requests
    assert len(seq["latencies_ms"]) == 20
    assert_every_entry_refs_the_job(ledger)


def test_launch_stops_a_group_that_ignores_sigterm(tmp_path: Path) -> None:
    port = free_port()
    spec = LaunchSpec(
        engine="vllm",
        command=[
            sys.executable,
            str(FAULT_ENGINE),
            "--port",
            str(port),
            "--mode",
            "ok",
            "--ignore-sigterm",
            "--child",
        ],
        base_url=f"http://127.0.0.1:{port}",
        lease_seconds=30,
        grace_seconds=1,
    )
    run = EngineRun(spec, tmp_path / "logs")
    run.start()
    assert run.wait_ready().ready
    run.stop("finished")
    assert run.stop_escalated
    assert run.exit_status == (None, 9)
    assert not group_alive(run.pgid or 0)
    assert run.payload()["failure_signature"] is None


def test_sigterm_mid_campaign_cancels_cleanly(tmp_path: Path, tiny_model_dir: Path, home: Path) -> None:
    c = fault_campaign(
        tmp_path, tiny_model_dir, [{"name": "default", "args": ["--mode", "hang"]}], engine_lease=120
    )
    proc = subprocess.Popen(
        [*LEDGER, "collect", "run", str(c), "--home", str(home), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # wait until the engine runs (its log directory appears), then cancel
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list((home / "runs").glob("*/*/attempt-1-default/stdout.log")):
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    result = json.loads(stdout)
    assert result["state"] == "cancelled"
    ledger = Ledger.open(home)
    try:
        jobs = entries_of(ledger, "job")
        final = next(j for j in jobs if j["payload"]["state"] != "running")
        assert final["payload"]["state"] == "cancelled"
        assert final["payload"]["ended_at"]
        assert "SIGTERM" in final["payload"]["cancelled_by"]
        [launch] = launches(ledger)
        assert launch["details"]["stop_reason"] == "cancelled"
        assert launch["failure_signature"] is None
        assert not group_alive(launch["details"]["pid"])
        statuses = gate_statuses(ledger)
        assert statuses["host-prerequisites"] == "passed"
        assert statuses["api-readiness"] == "not_run"
        assert set(statuses) == set(GATES)
        assert ledger.verify()
        assert_every_entry_refs_the_job(ledger)
    finally:
        ledger.close()


def test_engine_dead_after_ready_campaign_policy_verdict_is_runtime_reliability(
    tmp_path: Path, tiny_model_dir: Path, ledger: Ledger, recorder: LocalRecorder
) -> None:
    """Issue 11: ready, then the engine dies on the first completion. The collector's own gates stop at
    ready-control, but the policy — judging the recorded launch's signature class — says RUNTIME
    RELIABILITY with runtime-stability failed, and the collector reports that verdict."""
    from ledger.collectors.campaign import policy_verdict

    c = fault_campaign(tmp_path, tiny_model_dir, [{"name": "default", "args": ["--mode", "abort"]}])
    runner = CampaignRunner(load_campaign(c), recorder, work_dir=tmp_path / "work", handle_signals=False)
    result = runner.run()
    assert result.verdict_hint != "QUALIFIED"
    v = policy_verdict(recorder, runner.subject)
    assert v is not None
    assert v["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY", v["gates"]
    assert {g["name"]: g["status"] for g in v["gates"]}["runtime-stability"] == "failed"


def test_the_printed_verdict_command_of_a_campaign_named_with_spaces_and_quotes_can_be_pasted(
    tmp_path: Path, tiny_model_dir: Path, home: Path
) -> None:
    """Regression: `collect run` printed ``ledger verdict --subject campaign=NAME`` unquoted, so for a
    campaign id with spaces or quotes the command it told the user to run judged another subject."""
    import shlex

    name = 'Qwen 3.6/35B — a=b, "quoted"'
    c = fault_campaign(tmp_path, tiny_model_dir, [{"name": "default", "args": ["--mode", "ok"]}], name="odd")
    c.write_text(c.read_text().replace('id = "odd"', "id = " + json.dumps(name)))
    r = subprocess.run(
        [*LEDGER, "collect", "run", str(c), "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    line = next(x for x in r.stdout.splitlines() if x.startswith("policy verdict:"))
    command = line[line.index("`") + 1 : line.rindex("`")]
    argv = shlex.split(command)
    assert argv[:3] == ["ledger", "verdict", "--subject"] and argv[3] == f"campaign={name}", argv
    v = subprocess.run(
        [*LEDGER, "--home", str(home), *argv[1:], "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert json.loads(v.stdout)["subject"] == {"campaign": name}
    assert json.loads(v.stdout)["verdict"] in line


def test_an_engine_that_stops_serving_after_the_last_probe_without_a_log_line_is_not_a_healthy_run(
    tmp_path: Path, tiny_model_dir: Path, ledger: Ledger, recorder: LocalRecorder
) -> None:
    """Audit 28: an engine whose /health turned 503 after the collector's last probe, with nothing in its
    logs, was stopped as a healthy run (runtime-stability passed). The collector asks /health once more
    right before it stops a ready engine: the failed probe is recorded, the run is a runtime fault
    (request-failed), and the policy's verdict is RUNTIME RELIABILITY."""
    from ledger.collectors.campaign import policy_verdict

    # the ladder answers 22 completions (ready control, structured output, 20 sequential): 503 after them
    args = ["--mode", "ok", "--health-503-after", "22"]
    c = fault_campaign(tmp_path, tiny_model_dir, [{"name": "default", "args": args}])
    runner = CampaignRunner(load_campaign(c), recorder, work_dir=tmp_path / "work", handle_signals=False)
    runner.run()
    probes = [e["payload"] for e in entries_of(ledger, "health.probe") if e["payload"]["check"] == "health"]
    last = probes[-1]
    assert last["details"]["phase"] == "before-stop" and last["ok"] is False and last["http_status"] == 503
    [launch] = launches(ledger)
    assert launch["failure_signature"] == "request-failed", launch
    assert "/health before the stop" in launch["failure_detail"]
    v = policy_verdict(recorder, runner.subject)
    assert v is not None and v["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY", v["gates"]


def test_a_healthy_engine_is_asked_health_once_more_before_its_stop(
    tmp_path: Path, tiny_model_dir: Path, ledger: Ledger, recorder: LocalRecorder
) -> None:
    """The neighbour: a healthy engine's before-stop probe passes and changes nothing; an engine that already
    failed (a request that failed) is not asked again."""
    c = fault_campaign(tmp_path, tiny_model_dir, [{"name": "default", "args": ["--mode", "ok"]}])
    run_campaign(c, recorder, tmp_path)
    probes = [e["payload"] for e in entries_of(ledger, "health.probe") if e["payload"]["check"] == "health"]
    assert probes[-1]["details"]["phase"] == "before-stop" and probes[-1]["ok"] is True
    [launch] = launches(ledger)
    assert launch["failure_signature"] is None and launch["details"]["stop_reason"] == "finished"


def test_a_pause_of_the_engine_right_before_the_stop_is_a_slow_engine_not_a_stopped_one(
    tmp_path: Path, tiny_model_dir: Path, ledger: Ledger, recorder: LocalRecorder
) -> None:
    """Audit 31 (F1): a real llama.cpp paused 14 s (SIGSTOP, SIGCONT) right before the collector's stop gave
    NOT QUALIFIED — RUNTIME RELIABILITY: the before-stop /health had one try of 10 s. A probe that gets no
    answer at all is asked once more, given as long as a harness request gets (``canary_timeout``): the
    engine answers, the run is healthy. The first try is kept in the record."""
    args = ["--mode", "ok", "--health-stall-after", "22", "--health-stall-s", "12"]
    c = fault_campaign(tmp_path, tiny_model_dir, [{"name": "default", "args": args}])
    run_campaign(c, recorder, tmp_path)
    probes = [e["payload"] for e in entries_of(ledger, "health.probe") if e["payload"]["check"] == "health"]
    last = probes[-1]
    assert last["details"]["phase"] == "before-stop" and last["ok"] is True, last
    assert last["details"]["first_try"] and last["details"]["timeout_s"] >= 10, last["details"]
    [launch] = launches(ledger)
    assert launch["failure_signature"] is None and launch["details"]["stop_reason"] == "finished"
