"""Fix 156 (audit 102 f4, issue 11): an engine killed by SIGKILL from outside (`kill -9` mid-benchmark) was
recorded `killed-sigkill` (class resource, "OOM killer or operator") though the kernel log was readable and
held no OOM kill. The collector now reads the kernel log when the engine's leader dies by SIGKILL before it
signalled it (collectors/kernel.py sigkill_cause) and names who sent it (collectors/launch.py KILLED):

* the OOM killer killed the engine's process: `killed-by-oom-killer` (resource);
* an OOM-killer line in the launch's window naming another pid: `killed-by-oom-killer` too (the host's
  memory failed under the engine; a container's pids are not the kernel's);
* a readable kernel log with no OOM-killer line in the window (a line outside it does not count):
  `killed-sigkill-from-outside` / `killed-137-from-outside` (operator-stop);
* an unreadable kernel log: `killed-sigkill-unattributed` (operator-stop, never credited by the policy).

A SIGKILL of the collector's own stop reads no kernel log and is no failure."""

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
from ledger.collectors.kernel import KernelRead, sigkill_cause
from ledger.collectors.launch import KILLED, EngineRun, LaunchSpec
from ledger.collectors.readiness import ReadyState
from ledger.signatures import signature_classes

from .conftest import free_port

START = datetime(2026, 9, 10, 10, 0, tzinfo=UTC)
END = datetime(2026, 9, 10, 10, 5, tzinfo=UTC)
PID = 12345


def _oom(pid: int = PID, at: str = "2026-09-10T10:03:00.181000+0000", comm: str = "python3") -> str:
    """What `journalctl -k -o short-iso-precise` prints for the OOM killer's kill of ``pid``."""
    return (
        f"{at} gpu-box-1 kernel: Out of memory: Killed process {pid} ({comm}) total-vm:81234567kB, "
        "anon-rss:61234567kB, file-rss:1234kB, shmem-rss:0kB, UID:1000 pgtables:123456kB oom_score_adj:0"
    )


def _read(*lines: str, source: str = "journalctl") -> KernelRead:
    return KernelRead(source, True, "".join(line + "\n" for line in lines))


OTHER_LINE = "2026-09-10T10:03:00.100000+0000 gpu-box-1 kernel: usb 1-1: new high-speed USB device number 2"


# --- who sent it, by the kernel log ---------------------------------------------------------------------


def test_an_oom_kill_of_the_engines_pid_is_the_oom_killers() -> None:
    cause = sigkill_cause(PID, START, END, _read(OTHER_LINE, _oom()))
    assert (cause.cause, cause.source) == ("oom-killer", "journalctl")
    assert "killed process 12345 (python3)" in cause.text


def test_an_oom_kill_context_or_reaper_line_of_the_engines_pid_is_the_oom_killers() -> None:
    context = (
        "2026-09-10T10:03:00.180000+0000 gpu-box-1 kernel: oom-kill:constraint=CONSTRAINT_NONE,"
        f"nodemask=(null),cpuset=/,mems_allowed=0-1,global_oom,task_memcg=/user.slice,task=python3,pid={PID},uid=1000"
    )
    reaped = (
        f"2026-09-10T10:03:01.020000+0000 gpu-box-1 kernel: oom_reaper: reaped process {PID} (python3), now "
        "anon-rss:0kB, file-rss:0kB, shmem-rss:0kB"
    )
    for line in (context, reaped):
        assert sigkill_cause(PID, START, END, _read(line)).cause == "oom-killer", line


def test_an_oom_line_for_another_pid_is_the_hosts_memory_not_an_outside_kill() -> None:
    cause = sigkill_cause(PID, START, END, _read(_oom(pid=4242, comm="postgres")))
    assert cause.cause == "host-out-of-memory"
    assert "process 4242 (postgres)" in cause.text


def test_the_engine_invoking_the_oom_killer_that_killed_another_is_the_hosts_memory() -> None:
    invoked = (
        "2026-09-10T10:03:00.101000+0000 gpu-box-1 kernel: python3 invoked oom-killer: "
        "gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0"
    )
    assert sigkill_cause(PID, START, END, _read(invoked)).cause == "host-out-of-memory"


@pytest.mark.parametrize(
    "at",
    ["2026-09-10T09:59:50.000000+0000", "2026-09-10T10:05:10.000000+0000", "2026-09-09T10:03:00.000000+0000"],
    ids=["before-the-start", "after-the-end", "a-day-before"],
)
def test_an_oom_line_outside_the_launchs_window_does_not_count(at: str) -> None:
    cause = sigkill_cause(PID, START, END, _read(_oom(at=at)))
    assert cause.cause == "outside", cause
    assert cause.text == "no OOM-killer line from 2026-09-10T09:59:55.000000Z to 2026-09-10T10:05:05.000000Z"


@pytest.mark.parametrize(
    "at", ["2026-09-10T09:59:56.000000+0000", "2026-09-10T10:05:04.000000+0000"], ids=["start", "end"]
)
def test_an_oom_line_within_the_slack_of_the_window_counts(at: str) -> None:
    """The kernel's clock made wall time drifts (a virtual machine's fork, a suspend): 5 s each way."""
    assert sigkill_cause(PID, START, END, _read(_oom(at=at))).cause == "oom-killer"


def test_an_oom_line_without_a_time_counts() -> None:
    """It cannot be shown outside the window (raw dmesg with no boot time): fail closed."""
    line = _oom().split(" kernel: ", 1)[1]
    assert sigkill_cause(PID, START, END, _read(line)).cause == "oom-killer"


def test_a_readable_kernel_log_without_an_oom_line_is_a_kill_from_outside() -> None:
    for read in (_read(OTHER_LINE), _read(), _read(OTHER_LINE, source="dmesg")):
        cause = sigkill_cause(PID, START, END, read)
        assert cause.cause == "outside" and cause.source == read.source, cause


def test_an_unreadable_kernel_log_cannot_tell_the_oom_killer_from_an_operator() -> None:
    read = KernelRead(
        "none", False, reason="journalctl: not installed; dmesg: exit 1: Operation not permitted"
    )
    cause = sigkill_cause(PID, START, END, read)
    assert (cause.cause, cause.source) == ("unread", "none")
    assert "Operation not permitted" in cause.text


def test_every_cause_has_a_line_and_a_signature_of_its_class() -> None:
    classes = signature_classes()
    assert set(KILLED) == {"oom-killer", "host-out-of-memory", "outside", "unread"}
    for sid, cls in [
        ("killed-by-oom-killer", "resource"),
        ("killed-sigkill-from-outside", "operator-stop"),
        ("killed-137-from-outside", "operator-stop"),
        ("killed-sigkill-unattributed", "operator-stop"),
        ("killed-137-unattributed", "operator-stop"),
        ("killed-sigkill", "resource"),  # the fall-back: unchanged
        ("killed-137", "resource"),
    ]:
        assert classes[sid] == cls, sid


# --- the collector's record of a real engine killed from outside -------------------------------------------

# a stand-in engine: serves nothing, runs until it is killed; "ignore" ignores SIGTERM (the collector's stop
# then escalates to SIGKILL)
ENGINE = """
import signal, sys, time
if sys.argv[1:] == ["ignore"]:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("serving", flush=True)
time.sleep(120)
"""


def _running(tmp_path: Path, *args: str, shell: bool = False) -> EngineRun:
    """The stand-in engine started as the collector starts one; ``shell``: led by a shell (``sh -c``)."""
    script = tmp_path / "engine.py"
    script.write_text(ENGINE)
    command = [sys.executable, str(script), *args]
    if shell:  # two commands: the shell stays the leader, the engine its child
        command = ["sh", "-c", " ".join(command) + "; exit $?"]
    port = free_port()
    spec = LaunchSpec(
        engine="generic",
        command=command,
        base_url=f"http://127.0.0.1:{port}",
        lease_seconds=60,
        grace_seconds=1,
    )
    run = EngineRun(spec, tmp_path / "logs")
    run.start()
    deadline = time.monotonic() + 30
    while "serving" not in run.log_text():
        assert time.monotonic() < deadline and run.alive(), run.log_text()
        time.sleep(0.05)
    run.ready_state = ReadyState(True, note="test")  # the stand-in serves nothing: readiness as recorded
    run.ready_lines = {t.path.name: t.complete() for t in run._tees}
    return run


def _killed_from_outside(run: EngineRun, pid: int | None = None) -> dict[str, Any]:
    assert run.proc is not None
    os.kill(pid or run.proc.pid, signal.SIGKILL)
    assert run.wait_exit(20), run.log_text()
    run.stop("finished")
    return run.payload()


def _kernel_log(monkeypatch: pytest.MonkeyPatch, make: Any) -> list[datetime | None]:
    """Serve ``make(now)`` as the kernel log the collector reads; returns the ``since`` it asked with."""
    asked: list[datetime | None] = []

    def read(since: datetime | None = None) -> KernelRead:
        asked.append(since)
        return make(datetime.now(UTC))  # type: ignore[no-any-return]

    monkeypatch.setattr(kernel, "read_kernel_log", read)
    return asked


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%f+0000")


def test_a_kill_9_from_outside_with_a_readable_kernel_log_is_a_kill_from_outside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = _kernel_log(monkeypatch, lambda now: _read(OTHER_LINE, source="dmesg"))
    run = _running(tmp_path)
    p = _killed_from_outside(run)
    assert (p["signal"], p["exit_code"]) == (9, None)
    assert p["failure_signature"] == "killed-sigkill-from-outside", p
    assert p["details"]["failure_class"] == "operator-stop"
    assert p["details"]["stop_reason"] == "exited"
    detail = p["failure_detail"]
    assert detail.startswith(
        "ledger-collector: the engine was killed by SIGKILL from outside: the kernel log (dmesg)"
    )
    assert "crash" not in detail and p["details"]["sigkill_cause"] == detail
    assert len(asked) == 1 and asked[0] is not None and asked[0] < run.started_at  # the window's slack


def test_a_kill_9_the_kernel_log_ties_to_the_oom_killer_is_resource(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _running(tmp_path)
    assert run.proc is not None
    pid = run.proc.pid
    _kernel_log(monkeypatch, lambda now: _read(_oom(pid=pid, at=_iso(now))))
    p = _killed_from_outside(run)
    assert p["failure_signature"] == "killed-by-oom-killer", p
    assert p["details"]["failure_class"] == "resource"
    assert f"the OOM killer killed process {pid} (python3)" in p["failure_detail"]


def test_a_kill_9_beside_an_oom_kill_of_another_pid_is_resource(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _kernel_log(monkeypatch, lambda now: _read(_oom(pid=4242, comm="postgres", at=_iso(now))))
    run = _running(tmp_path)
    p = _killed_from_outside(run)
    assert p["failure_signature"] == "killed-by-oom-killer", p
    assert "none of it names the engine's process" in p["failure_detail"]


def test_a_kill_9_beside_an_oom_kill_an_hour_before_is_from_outside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _running(tmp_path)
    assert run.proc is not None
    pid = run.proc.pid
    _kernel_log(monkeypatch, lambda now: _read(_oom(pid=pid, at=_iso(now - timedelta(hours=1)))))
    p = _killed_from_outside(run)
    assert p["failure_signature"] == "killed-sigkill-from-outside", p


def test_a_kill_9_with_an_unreadable_kernel_log_cannot_be_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _kernel_log(
        monkeypatch, lambda now: KernelRead("none", False, reason="dmesg: exit 1: Operation not permitted")
    )
    run = _running(tmp_path)
    p = _killed_from_outside(run)
    assert p["failure_signature"] == "killed-sigkill-unattributed", p
    assert p["failure_detail"].endswith("cannot tell the OOM killer from an operator")


def test_exit_137_through_a_shell_is_read_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A shell leads the engine; its child killed by SIGKILL, the shell exits 137."""
    _kernel_log(monkeypatch, lambda now: _read(OTHER_LINE))
    run = _running(tmp_path, shell=True)
    assert run.proc is not None
    children = Path(f"/proc/{run.proc.pid}/task/{run.proc.pid}/children").read_text().split()
    assert len(children) == 1, children
    p = _killed_from_outside(run, int(children[0]))
    assert (p["signal"], p["exit_code"]) == (None, 137)
    assert p["failure_signature"] == "killed-137-from-outside", p


def test_a_classification_asked_while_the_engine_ran_does_not_hide_its_later_kill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A probe saw a request fail while the engine ran (``failure_observed``): the run is classified then,
    before the kill; the kernel log is read once the SIGKILL has ended it, not before."""
    asked = _kernel_log(monkeypatch, lambda now: _read(OTHER_LINE))
    run = _running(tmp_path)
    run.failure_observed = "completion probe: ReadError"
    assert run.classification().signature == "request-failed" and asked == []
    p = _killed_from_outside(run)
    assert p["failure_signature"] == "killed-sigkill-from-outside", p
    assert len(asked) == 1


def test_the_collectors_own_stop_escalated_to_sigkill_reads_no_kernel_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = _kernel_log(monkeypatch, lambda now: _read(OTHER_LINE))
    run = _running(tmp_path, "ignore")
    run.stop("finished")
    p = run.payload()
    assert p["signal"] == 9 and p["details"]["stop_escalated_to_sigkill"] is True
    assert p["failure_signature"] is None and "sigkill_cause" not in p["details"]
    assert asked == []


def test_an_engine_that_exits_on_its_own_reads_no_kernel_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = _kernel_log(monkeypatch, lambda now: _read(OTHER_LINE))
    run = _running(tmp_path)
    assert run.proc is not None
    run.proc.send_signal(signal.SIGTERM)  # an outside SIGTERM: killed-sigterm, as before
    assert run.wait_exit(20)
    run.stop("finished")
    p = run.payload()
    assert p["failure_signature"] == "killed-sigterm" and asked == []


def test_a_kill_9_read_against_this_hosts_own_kernel_log(tmp_path: Path) -> None:
    """The real reading (journalctl -k, else dmesg): whichever the host allows, a line of KILLED."""
    run = _running(tmp_path)
    p = _killed_from_outside(run)
    assert p["failure_signature"] in {
        "killed-by-oom-killer",
        "killed-sigkill-from-outside",
        "killed-sigkill-unattributed",
    }, p
    assert p["failure_detail"].startswith("ledger-collector: the engine was killed by SIGKILL")
