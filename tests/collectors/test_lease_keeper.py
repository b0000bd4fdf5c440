"""The lease keeper: an engine's process group is stopped even when the collector that launched it cannot.

The stand-in engine sleeps and spawns a child of its own that ignores SIGTERM, so "the group is gone" means
the keeper signalled the whole group and escalated to SIGKILL.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ledger.collectors.launch import EngineRun, LaunchSpec, group_alive
from ledger.collectors.lease_keeper import keeper_margin

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="process groups and /proc: Linux only")

CHILD = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
ENGINE = (
    "import subprocess, sys, time; "
    f"subprocess.Popen([sys.executable, '-c', {CHILD!r}]); "
    "print('engine up', flush=True); time.sleep(600)"
)

COLLECTOR = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from ledger.collectors.launch import EngineRun, LaunchSpec

    spec = LaunchSpec(
        engine="vllm",
        command=[sys.executable, "-c", sys.argv[2]],
        base_url="http://127.0.0.1:9",
        lease_seconds=600,
        grace_seconds=1,
    )
    run = EngineRun(spec, Path(sys.argv[1]))
    run.start()
    print(run.pgid, run.keeper_pid, flush=True)
    time.sleep(600)
    """
)


def _stat(pid: int) -> list[str] | None:
    """state, ppid, pgrp, ... of a process; None when it does not exist."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2 :].split()


def members(pgid: int) -> list[int]:
    """The live (non-zombie) processes of a group."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            st = _stat(int(d.name))
            if st is not None and int(st[2]) == pgid and st[0] != "Z":
                out.append(int(d.name))
    return out


def ignores_sigterm(pid: int) -> bool:
    """The process has set SIGTERM to be ignored (its ``SigIgn`` mask in /proc): the stand-in engine's
    child is then ready, and a group stop must escalate to SIGKILL for it."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = next((line.split()[1] for line in status.splitlines() if line.startswith("SigIgn:")), "0")
    return bool(int(mask, 16) & (1 << (signal.SIGTERM - 1)))


def engine_ready(pgid: int) -> bool:
    """Both processes of the stand-in engine run, and its child already ignores SIGTERM."""
    live = members(pgid)
    return len(live) == 2 and any(ignores_sigterm(p) for p in live)


def gone(pid: int) -> bool:
    """The process no longer runs (reaped, or a zombie waiting for its reaper)."""
    st = _stat(pid)
    return st is None or st[0] == "Z"


def wait_for(cond: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


@contextlib.contextmanager
def cleanup(pgids: list[int]) -> Iterator[None]:
    try:
        yield
    finally:
        for pgid in pgids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)


def spec(lease: float = 600, grace: float = 0.5) -> LaunchSpec:
    return LaunchSpec(
        engine="vllm",
        command=[sys.executable, "-c", ENGINE],
        base_url="http://127.0.0.1:9",
        lease_seconds=lease,
        grace_seconds=grace,
    )


def test_engine_orphaned_when_collector_sigkilled(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    collector = subprocess.Popen(
        [sys.executable, "-c", COLLECTOR, str(logs), ENGINE],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    pgids: list[int] = []
    with cleanup(pgids):
        try:
            assert collector.stdout is not None
            line = collector.stdout.readline()
            assert line, collector.stderr.read() if collector.stderr else ""
            pgid_s, keeper_s = line.split()
            pgid = int(pgid_s)
            pgids.append(pgid)
            keeper = int(keeper_s)
            # the engine runs, and so does its child
            assert wait_for(lambda: engine_ready(pgid), 15), members(pgid)
            assert not gone(keeper)
        finally:
            collector.kill()  # SIGKILL: no finally, no atexit, no watchdog thread
            collector.wait()
        # the keeper notices (its pipe closes) and stops the whole group: SIGTERM, then SIGKILL the child
        assert wait_for(lambda: not group_alive(pgid), 10), (
            f"engine group {pgid} left running: {members(pgid)}"
        )
        assert wait_for(lambda: gone(keeper), 5), "the keeper outlived the engine"
        note = (logs / "lease-keeper.log").read_text()
        assert "the collector is gone" in note
        assert "SIGKILL" in note  # the child ignored SIGTERM


def test_keeper_left_behind_after_a_normal_run(tmp_path: Path) -> None:
    run = EngineRun(spec(), tmp_path / "logs")
    run.start()
    assert run.pgid is not None
    with cleanup([run.pgid]):
        keeper = run.keeper_pid
        assert keeper is not None
        assert wait_for(lambda: engine_ready(run.pgid or 0), 15)
        assert not gone(keeper)
        run.stop("finished")
        assert run.keeper_pid is None
        assert _stat(keeper) is None  # exited and reaped by the launcher
        assert not group_alive(run.pgid)
        payload = run.payload()
        # what the launcher records is unchanged: its own stop, not the keeper's
        assert payload["details"]["stop_reason"] == "finished"
        assert payload["lease_expired"] is False
        assert payload["failure_signature"] is None
        assert not run.keeper_note.exists()


def test_keeper_left_behind_after_the_engine_exits_on_its_own(tmp_path: Path) -> None:
    s = spec()
    s.command = [sys.executable, "-c", "import time; time.sleep(0.3)"]
    run = EngineRun(s, tmp_path / "logs")
    run.start()
    keeper = run.keeper_pid
    assert keeper is not None
    assert run.wait_exit(15)
    # nothing stops the run yet: the keeper sees the group gone and exits by itself
    assert wait_for(lambda: gone(keeper), 5)
    run.stop("finished")
    assert _stat(keeper) is None
    assert run.stop_reason == "exited"
    assert run.lease_expired is False
    assert run.exit_status == (0, None)
    assert not run.keeper_note.exists()


def test_watchdog_lease_expiry_recorded_as_before_with_keeper(tmp_path: Path) -> None:
    run = EngineRun(spec(lease=3, grace=0.5), tmp_path / "logs")
    run.start()
    assert run.pgid is not None
    with cleanup([run.pgid]):
        keeper = run.keeper_pid
        assert keeper is not None
        assert wait_for(lambda: engine_ready(run.pgid or 0), 3)  # before the lease: the child ignores SIGTERM
        # the in-process watchdog acts first, at the deadline, well before the keeper's margin
        assert wait_for(lambda: run.stop_reason is not None and not run.alive(), 10)
        run.stop("finished")
        assert run.stop_reason == "lease-expired"
        assert run.lease_expired is True
        assert run.stop_escalated is True  # the child ignores SIGTERM: the watchdog's stop escalated
        assert _stat(keeper) is None
        assert not run.keeper_note.exists()  # the keeper never acted
        assert not group_alive(run.pgid)


def test_engine_outlives_lease_when_watchdog_does_not_act(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the collector is alive but its watchdog thread never acts (stuck, or dead): the keeper is the backstop
    monkeypatch.setattr(EngineRun, "_watch_lease", lambda self: None)
    lease, grace = 1.0, 0.5
    run = EngineRun(spec(lease=lease, grace=grace), tmp_path / "logs")
    t0 = time.monotonic()
    run.start()
    assert run.pgid is not None
    with cleanup([run.pgid]):
        assert wait_for(lambda: engine_ready(run.pgid or 0), 15)
        assert run.wait_exit(lease + keeper_margin(grace) + 10)
        took = time.monotonic() - t0
        assert took >= lease + keeper_margin(grace) - 0.2  # not before the lease plus the margin
        assert wait_for(lambda: not group_alive(run.pgid or 0), 5), members(run.pgid)
        run.stop("finished")
        # the end the keeper caused is recorded as the lease running out, not as the engine's own exit
        assert run.stop_reason == "lease-expired"
        assert run.lease_expired is True
        assert run.exit_status == (None, signal.SIGTERM)
        note = run.keeper_note.read_text()
        assert "lease deadline" in note
        assert "SIGKILL" in note
        assert run.payload()["failure_signature"] == "lease-expired"
