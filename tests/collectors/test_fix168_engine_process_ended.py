"""Fix 168 (audit 107 f1, issue 11): an engine process that died after readiness behind a supervisor.

The campaign's command started a supervisor that ran two copies of the engine and forwarded the port to one;
after 15 connections it SIGSEGVed the active copy and served on from the standby. Every probe passed, the
launch recorded ready, no signature, exit 0: QUALIFIED. ``alive()`` read the leader only.

Now the launch records the engine's processes at readiness (pid, start time, command line, and why each is
one of the engine's own: a process title of an engine's, a listening TCP socket, an engine's program); one of
those that ends while the leader runs on, before the collector's own stop, makes ``alive()`` false and fails
the launch with `engine-process-ended` (class runtime-fault), naming the process. Helpers (not the engine's
processes) alive at readiness, processes started after readiness, and the leader's own end are unchanged.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ledger.collectors.launch import PROCESS_ENDED, EngineRun, LaunchSpec
from ledger.signatures import load_signatures, signature_classes
from tests.policy.test_fail_closed import entry, qualified_entries, verdict_of

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="process groups, /proc: Linux only")

SUPERVISOR = Path(__file__).resolve().parent / "fixtures" / "fix168_supervisor.py"
RUNTIME = "NOT QUALIFIED — RUNTIME RELIABILITY"
HEAD = PROCESS_ENDED.split(":", 1)[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def supervised(tmp_path: Path, *args: str, programs: tuple[str, ...] = ()) -> EngineRun:
    port = free_port()
    spec = LaunchSpec(
        engine="generic",
        command=[sys.executable, str(SUPERVISOR), "--port", str(port), *args],
        base_url=f"http://127.0.0.1:{port}",
        lease_seconds=60,
        grace_seconds=2,
        poll_interval=0.1,
        engine_programs=programs,
    )
    return EngineRun(spec, tmp_path / "logs", signatures=load_signatures())


def ready(run: EngineRun) -> None:
    run.start()
    state = run.wait_ready()
    assert state.ready, state


def alive_after(run: EngineRun, seconds: float) -> bool:
    """``alive()`` once it turns false, or after ``seconds`` s."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not run.alive():
            return False
        time.sleep(0.1)
    return run.alive()


def counted(run: EngineRun) -> list[dict[str, Any]]:
    return [p for p in run.ready_processes if p["counted"] is not None]


def finished(run: EngineRun) -> dict[str, Any]:
    run.stop("finished")
    return run.payload()


# --- the finding ---------------------------------------------------------------------------------------


def test_fix168_engine_process_ended_behind_a_supervisor_was_qualified(tmp_path: Path) -> None:
    """Regression: the supervisor SIGSEGVs one of its two serving copies after readiness and serves on. The
    leader lives, every request is answered — and the launch is failed: `engine-process-ended`, class
    runtime-fault, the process named (pid, command, when seen gone)."""
    run = supervised(tmp_path, "--child", "server:1.5:segv", "--child", "server")
    try:
        ready(run)
        assert run.alive()
        assert len(counted(run)) == 2, run.ready_processes
        victim = run.ready_processes[0]["pid"]
        assert alive_after(run, 10) is False
        assert run.leader_alive()  # the supervisor serves on
    finally:
        p = finished(run)
    assert p["ready"] is True
    assert p["failure_signature"] == "engine-process-ended"
    assert p["details"]["failure_class"] == "runtime-fault"
    assert signature_classes()["engine-process-ended"] == "runtime-fault"
    assert p["failure_detail"].startswith(HEAD)
    assert f"pid {victim} (" in p["failure_detail"]
    assert "listening on TCP port" in p["failure_detail"]
    ended = p["details"]["engine_processes_ended"]
    assert [e["pid"] for e in ended] == [victim]
    assert ended[0]["seen_gone_at"] and ended[0]["cmdline"].startswith(sys.executable)
    assert {e["pid"] for e in p["details"]["engine_processes"]} >= {victim}
    assert p["details"]["stop_reason"] == "finished"


@pytest.mark.parametrize("how", ["segv", "kill", "exit0"])
@pytest.mark.parametrize(
    ("kind", "why", "programs"),
    [
        ("server", "listening on TCP port", ()),
        ("titled", "the engine's process title 'VLLM::EngineCore'", ()),
        ("program", "running the engine's program fix168_engine", ("fix168_engine",)),
    ],
)
def test_any_end_of_any_engine_process_while_the_leader_runs_fails_the_launch(
    tmp_path: Path, how: str, kind: str, why: str, programs: tuple[str, ...]
) -> None:
    """Neighbours: SIGSEGV, SIGKILL or an exit 0 of its own — any end of a process the engine served with
    (a listener, an engine-titled process, one running the engine's program) while its leader lives on."""
    run = supervised(tmp_path, "--child", f"{kind}:1.0:{how}", programs=programs)
    try:
        ready(run)
        assert [p["counted"].startswith(why) for p in run.ready_processes] == [True], run.ready_processes
        assert alive_after(run, 10) is False
    finally:
        p = finished(run)
    assert p["failure_signature"] == "engine-process-ended", p["failure_detail"]
    assert why in p["failure_detail"]


def test_a_process_running_a_program_not_the_engines_is_a_helper(tmp_path: Path) -> None:
    """Neighbour: the same ``python -m fix168_engine`` child, where the spec does not name fix168_engine an
    engine's program (and it is no listener, no engine title), is a helper: its end is its own."""
    run = supervised(tmp_path, "--child", "program:1.0:exit0")
    try:
        ready(run)
        assert [p["counted"] for p in run.ready_processes] == [None]
        assert alive_after(run, 3) is True
    finally:
        p = finished(run)
    assert p["failure_signature"] is None


def test_a_helper_alive_at_readiness_that_exits_fails_nothing(tmp_path: Path) -> None:
    """Neighbour: a short-lived process alive at readiness that is none of the engine's (``python -c``: a
    compiler, a compile worker, ldconfig) exits 0 — or crashes — after readiness: no failure."""
    run = supervised(
        tmp_path, "--child", "helper:1.0:exit0", "--child", "helper:1.2:segv", "--child", "server"
    )
    try:
        ready(run)
        helpers = [p for p in run.ready_processes if p["counted"] is None]
        assert len(helpers) == 2 and len(counted(run)) == 1, run.ready_processes
        assert alive_after(run, 3) is True
        assert all(not os.path.exists(f"/proc/{h['pid']}/cmdline") or not _running(h["pid"]) for h in helpers)
    finally:
        p = finished(run)
    assert p["failure_signature"] is None
    assert p["details"]["engine_processes_ended"] == []
    assert len(p["details"]["engine_processes"]) == 3


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_a_process_started_after_readiness_that_exits_fails_nothing(tmp_path: Path) -> None:
    """Neighbour: processes started after readiness (vLLM's and torch's helpers, inductor compile workers,
    gcc) are not watched, whatever they run: an engine-titled one and a listener that exit are no fault."""
    run = supervised(tmp_path, "--child", "server", "--after-ready", "titled", "--after-ready", "server")
    try:
        ready(run)
        assert alive_after(run, 4) is True
    finally:
        p = finished(run)
    assert p["failure_signature"] is None
    assert [e["counted"] is not None for e in p["details"]["engine_processes"]] == [True]


def test_an_honest_run_keeps_its_set_to_the_stop(tmp_path: Path) -> None:
    """Neighbour: the engine's processes all live to the collector's stop; the stop then ends them (its own
    stop, never the engine's fault) — no signature, nothing ended."""
    run = supervised(tmp_path, "--child", "server", "--child", "titled")
    try:
        ready(run)
        time.sleep(1.0)
        assert run.alive()
    finally:
        p = finished(run)
    assert p["failure_signature"] is None
    assert p["details"]["engine_processes_ended"] == []
    assert len(p["details"]["engine_processes"]) == 2


def test_a_reused_pid_is_another_process(tmp_path: Path) -> None:
    """Neighbour: a pid of the set that names a process with another start time is a process that ended
    (its pid reused): seen gone, even though a process of that pid runs."""
    run = supervised(tmp_path, "--child", "server", "--child", "server")
    try:
        ready(run)
        first = run.ready_processes[0]
        first["start"] = str(int(first["start"]) - 1)  # as recorded for an earlier process of that pid
        assert run.alive() is False
    finally:
        p = finished(run)
    assert p["failure_signature"] == "engine-process-ended"
    assert [e["pid"] for e in p["details"]["engine_processes_ended"]] == [first["pid"]]


def test_the_leader_dying_keeps_its_own_path(tmp_path: Path) -> None:
    """Neighbour: the leader itself dies (SIGSEGV); its children outlive it in the group. Its own end decides,
    as before: no `engine-process-ended` line, whatever the collector's stop does to the children."""
    run = supervised(tmp_path, "--child", "server", "--child", "titled")
    try:
        ready(run)
        assert run.proc is not None
        os.kill(run.proc.pid, signal.SIGSEGV)
        assert run.wait_exit(5)
        assert run.alive() is False
    finally:
        p = finished(run)
    assert p["signal"] == 11
    assert p["failure_signature"] not in (None, "engine-process-ended")
    assert HEAD not in (p["failure_detail"] or "")
    assert p["details"]["engine_processes_ended"] == []


def test_an_outside_stop_of_the_whole_group_is_the_leaders_end(tmp_path: Path) -> None:
    """Neighbour: SIGTERM to the engine's whole group from outside ends the members with the leader; where
    the leader ended on its own, its end decides — the line of a member seen gone first is not added."""
    run = supervised(tmp_path, "--child", "server", "--child", "titled")
    try:
        ready(run)
        assert run.pgid is not None
        os.killpg(run.pgid, signal.SIGTERM)
        assert run.wait_exit(5)
        run._check_processes()
    finally:
        p = finished(run)
    assert p["details"]["stop_reason"] == "exited"
    assert HEAD not in (p["failure_detail"] or "")
    assert p["failure_signature"] != "engine-process-ended"


def test_the_collectors_own_stop_is_no_end_of_the_engines(tmp_path: Path) -> None:
    """Neighbour: after the collector sent its stop, the members' ends are its stop's: nothing recorded."""
    run = supervised(tmp_path, "--child", "server")
    ready(run)
    p = finished(run)
    run._check_processes()
    assert p["failure_signature"] is None
    assert run.processes_ended == []


def test_the_lease_watchdog_still_stops_an_engine_whose_process_ended(tmp_path: Path) -> None:
    """Neighbour: ``alive()`` false for an ended member must not keep the lease watchdog from stopping the
    still-running leader when the lease runs out (it reads the leader: ``leader_alive``)."""
    port = free_port()
    spec = LaunchSpec(
        engine="generic",
        command=[sys.executable, str(SUPERVISOR), "--port", str(port), "--child", "server:0.5:kill"],
        base_url=f"http://127.0.0.1:{port}",
        lease_seconds=3,
        grace_seconds=1,
        poll_interval=0.1,
    )
    run = EngineRun(spec, tmp_path / "logs", signatures=load_signatures())
    try:
        ready(run)
        assert alive_after(run, 2.5) is False
        deadline = time.monotonic() + 10
        while run.leader_alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not run.leader_alive()
    finally:
        p = finished(run)
    assert p["lease_expired"] is True
    assert p["failure_signature"] == "engine-process-ended"  # the graver finding decides (runtime-fault)


# --- the policy ----------------------------------------------------------------------------------------


def test_fix168_the_policy_fails_runtime_stability_on_the_recorded_launch(tmp_path: Path) -> None:
    """What the collector recorded is judged by the policy from the launch's failure_detail (its own reading
    of the signature table, not the claim): NOT QUALIFIED — RUNTIME RELIABILITY; the same run with its
    processes whole is QUALIFIED."""
    run = supervised(tmp_path, "--child", "server:1.0:segv", "--child", "server")
    try:
        ready(run)
        assert alive_after(run, 10) is False
    finally:
        p = finished(run)
    for failed, want in ((True, RUNTIME), (False, "QUALIFIED")):
        es = qualified_entries()
        launch = entry(es, "launch")
        launch["payload"]["details"] = {
            **launch["payload"].get("details", {}),
            **{k: v for k, v in p["details"].items() if k in ("stop_reason", "stop_lines", "ready_lines")},
        }
        launch["artifacts"] = [
            {"name": "stdout.log", "text": run.stdout_path.read_text()},
            {"name": "stderr.log", "text": run.stderr_path.read_text()},
        ]
        if failed:
            launch["payload"].update(
                failure_signature=p["failure_signature"], failure_detail=p["failure_detail"]
            )
        v = verdict_of(tmp_path, es)
        assert v["verdict"] == want, v["gates"]
    # the claim alone is not what decides: the signature dropped, the detail kept, still a runtime fault
    es = qualified_entries()
    entry(es, "launch")["payload"].update(failure_detail=p["failure_detail"])
    assert verdict_of(tmp_path, es)["verdict"] == RUNTIME
