"""The lease keeper: a small process that stops an engine's process group when its collector cannot.

:class:`ledger.collectors.launch.EngineRun` enforces an engine's lease with a watchdog thread, which dies
with the collector: a collector SIGKILLed (OOM killer, ``kill -9``, a CI runner's timeout) would leave the
engine's process group running past its lease, holding the GPU and the port. So right after the engine
starts, the launcher also starts this module as a separate process (``python -I -S lease_keeper.py``, run
by path: it imports only the standard library, so it starts in milliseconds). It stops the engine's whole
group (SIGTERM, the launcher's grace period, then SIGKILL) when either

- the collector is gone: the keeper holds the read end of a pipe whose only write end the collector holds,
  so end-of-file means the collector has died (no pid to poll, so no pid-reuse race); or
- the lease deadline plus a margin has passed (the watchdog normally acts first and records
  ``lease-expired``; the margin covers its whole stop, so the keeper is only the backstop).

It exits by itself as soon as the group no longer exists, and at once when the launcher writes
:data:`RELEASE` to the pipe (the end of a run the launcher stopped itself). Before it signals a group it
writes a line to its note file: the launcher reads it to record an end the keeper caused as
``lease-expired``.

Linux only: the deadline is an absolute ``CLOCK_MONOTONIC`` time (``time.monotonic()``, system-wide on
Linux, so comparable across processes), group membership is read from ``/proc``, and the keeper runs in
its own session so that signals meant for the collector's process group (Ctrl-C, a runner killing the
job's group) do not reach it. The group id cannot be reused while any member of the group lives (the kernel
keeps the id allocated), and the keeper stops watching within :data:`POLL_S` of the group emptying, so it
never signals another group. One limit: a child the collector forks without exec inherits the pipe's
write end (it is close-on-exec), and then keeps the collector "alive" for the keeper until it exits too.

A process of the engine that left its group (``setsid()``: a daemonising helper) is out of reach of a
signal to the group. Every engine process is marked: the launcher sets :data:`LAUNCH_MARK` to the launch's
unique id in the engine's environment, which every descendant inherits, and after the group's stop
:func:`stop_marked` finds any process that still carries the mark (``/proc/<pid>/environ``), stops it
(SIGTERM, the grace, SIGKILL) and names it — the launcher records these as ``details.survivors``; the
keeper, when it stopped the group itself (the collector gone, the lease run out), writes them to its note.
While marked processes live outside a group that has ended, the keeper keeps watching them.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time
from collections.abc import Iterable, Iterator

__all__ = [
    "EXIT_COLLECTOR_GONE",
    "EXIT_LEASE",
    "LAUNCH_MARK",
    "POLL_S",
    "RELEASE",
    "SLACK_S",
    "group_alive",
    "group_exists",
    "keeper_margin",
    "main",
    "marked_processes",
    "proc_argv",
    "proc_start",
    "proc_stats",
    "stop_marked",
    "stopped_processes",
]

RELEASE = b"r"  # written by the launcher: the run ended under its control, exit without signalling
POLL_S = 1.0  # how often the keeper checks that the engine's group still exists
SLACK_S = 3.0  # added to the launcher's own stop time (2 x grace) before the keeper acts on the lease
EXIT_LEASE = 3  # the keeper stopped the group: the lease deadline plus the margin had passed
EXIT_COLLECTOR_GONE = 4  # the keeper stopped the group: the collector was gone
LAUNCH_MARK = "LEDGER_LAUNCH_ID"  # set to the launch's unique id in the engine's environment


def _stat(pid: str) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state, ppid, pgrp, session, …)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2 :].split()


def stopped_processes(pids: Iterable[int]) -> list[int]:
    """Those of ``pids`` that are stopped (``/proc/<pid>/stat`` state ``T``: SIGSTOP / SIGTSTP, a cgroup
    freezer's v1 stop) or traced (``t``: a debugger holds them): suspended from outside, so they answer
    nothing until continued — no hang of their own. A process that cannot be read is not counted."""
    found: list[int] = []
    for pid in pids:
        rest = _stat(str(pid))
        if rest is not None and rest[0] in ("T", "t"):
            found.append(pid)
    return found


def proc_start(pid: int) -> str | None:
    """When the live process ``pid`` started (``/proc/<pid>/stat`` starttime, clock ticks after boot): with
    its pid, what names one process — a pid reused by a later process has another start. None when no
    process of that pid can be read, or it has ended (a zombie awaiting its reaper, ``Z``/``X``)."""
    rest = _stat(str(pid))
    if rest is None or len(rest) < 20 or rest[0] in ("Z", "X"):
        return None
    return rest[19]


def proc_argv(pid: int) -> list[str] | None:
    """A process's arguments as ``/proc/<pid>/cmdline`` holds them (a title it set itself, such as vLLM's
    ``VLLM::EngineCore``, is one item); None when it cannot be read, [] for a kernel thread or a zombie."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return [a.decode("utf-8", errors="replace") for a in raw.rstrip(b"\0").split(b"\0")] if raw else []


def cmdline(pid: int) -> str:
    """A process's command line (arguments joined by spaces; ``[comm]`` for a kernel thread or an unreadable
    one), at most 300 characters."""
    text = " ".join(proc_argv(pid) or ())
    if not text:
        try:
            with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as f:
                text = f"[{f.read().strip()}]"
        except OSError:
            text = "?"
    return text[:300]


def marked_processes(mark: str) -> list[int]:
    """The live (not zombie) processes whose environment carries ``LAUNCH_MARK=mark`` (those this user may
    read), this process excepted."""
    if not mark:
        return []
    needle = f"{LAUNCH_MARK}={mark}".encode()
    me = os.getpid()
    found: list[int] = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue
        if needle not in env.split(b"\0"):
            continue
        rest = _stat(name)
        if rest is not None and rest[0] not in ("Z", "X"):
            found.append(int(name))
    return sorted(found)


def stop_marked(mark: str, grace: float) -> list[dict[str, object]]:
    """Stop every process still marked with ``mark`` once ``grace`` s have passed (SIGTERM, up to ``grace``
    s more, then SIGKILL); returns each one found, ``{"pid", "cmdline"}``, as it was before the signal. A
    process that ends on its own within the first ``grace`` s — a helper that follows its parent out — is no
    survivor: only one still running then outlived the engine's stop."""
    pids = marked_processes(mark)
    if not pids:
        return []
    waited = time.monotonic() + grace
    while pids and time.monotonic() < waited:
        time.sleep(0.05)
        pids = marked_processes(mark)
    if not pids:
        return []
    found: list[dict[str, object]] = [{"pid": pid, "cmdline": cmdline(pid)} for pid in pids]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        time.sleep(0.1)
        if not marked_processes(mark):
            return found
    for pid in marked_processes(mark):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return found


def keeper_margin(grace_seconds: float) -> float:
    """Seconds after the lease deadline at which the keeper acts: the launcher's stop (SIGTERM, a grace
    for the leader, a grace for the rest of the group, SIGKILL) has ended by then, so the two never race."""
    return 2 * grace_seconds + SLACK_S


def proc_stats() -> Iterator[tuple[int, list[str]]] | None:
    """(pid, the fields of ``/proc/PID/stat`` after the command name: state ppid pgrp session ...) of every
    process this user may read; None when ``/proc`` cannot be listed."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return None

    def each() -> Iterator[tuple[int, list[str]]]:
        for name in names:
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat", encoding="utf-8", errors="replace") as f:
                    stat = f.read()
            except OSError:
                continue
            yield int(name), stat[stat.rfind(")") + 2 :].split()

    return each()


def group_alive(pgid: int) -> bool:
    """True when a non-zombie process of the group exists (zombies only await their reaper)."""
    stats = proc_stats()
    if stats is None:
        return True
    return any(len(rest) >= 3 and rest[2] == str(pgid) and rest[0] != "Z" for _pid, rest in stats)


def group_exists(pgid: int) -> bool:
    """The cheap check: some process (a zombie too) is still in the group."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _note(path: str | None, line: str) -> None:
    if path is None:
        return
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')} lease-keeper: {line}\n")
    except OSError:
        pass


def _signal(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def stop_group(pgid: int, grace: float, why: str, note: str | None) -> None:
    """SIGTERM the group, wait up to ``grace`` s for every non-zombie member to go, then SIGKILL it."""
    if not (group_exists(pgid) and group_alive(pgid)):
        return
    _note(note, f"{why}; SIGTERM to process group {pgid}")
    _signal(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        time.sleep(0.1)
        if not (group_exists(pgid) and group_alive(pgid)):
            return
    _note(note, f"process group {pgid} still alive after {grace:g} s; SIGKILL")
    _signal(pgid, signal.SIGKILL)


def _stop_survivors(mark: str | None, grace: float, note: str | None) -> None:
    """After the group's stop: stop the marked processes that left it, and name them in the note."""
    if not mark:
        return
    for p in stop_marked(mark, grace):
        _note(note, f"survivor outside process group: pid {p['pid']} ({p['cmdline']}); stopped")


def watch(fd: int, pgid: int, kill_at: float, grace: float, note: str | None, mark: str | None = None) -> int:
    """Watch until released, the group and every marked process are gone (0), the collector is gone or
    the lease has run out."""
    while True:
        left = kill_at - time.monotonic()
        if left <= 0:
            stop_group(pgid, grace, f"lease deadline passed (+{grace:g} s grace margin)", note)
            _stop_survivors(mark, grace, note)
            return EXIT_LEASE
        readable, _, _ = select.select([fd], [], [], min(POLL_S, left))
        if readable:
            data = os.read(fd, 64)
            if not data:
                stop_group(pgid, grace, "the collector is gone (its pipe closed)", note)
                _stop_survivors(mark, grace, note)
                return EXIT_COLLECTOR_GONE
            if RELEASE in data:
                return 0
        if not group_exists(pgid) and not (mark and marked_processes(mark)):
            return 0


def main(argv: list[str]) -> int:
    """``lease_keeper.py FD PGID KILL_AT_MONOTONIC GRACE_S [NOTE_PATH [LAUNCH_ID]]``."""
    if sys.platform != "linux":
        raise SystemExit("lease_keeper: Linux only (CLOCK_MONOTONIC across processes, /proc)")
    if len(argv) not in (4, 5, 6):
        raise SystemExit(main.__doc__)
    fd, pgid, kill_at, grace = int(argv[0]), int(argv[1]), float(argv[2]), float(argv[3])
    note = argv[4] if len(argv) >= 5 else None
    mark = argv[5] if len(argv) == 6 else None
    if pgid <= 1:
        raise SystemExit(f"lease_keeper: refusing process group {pgid}")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # its own session already; never a terminal's Ctrl-C
    return watch(fd, pgid, kill_at, grace, note, mark)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
