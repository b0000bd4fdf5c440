"""GPU-relevant kernel messages (``journalctl -k`` or ``dmesg``) parsed into typed events, and the kernel's
OOM killer (which process it killed, and whether the host or a memory cgroup ran out of memory)."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ledger.entries import format_time, parse_when
from ledger.gpu_faults import (
    EVENT_PATTERNS,
    HOST_WIDE_KINDS,
    MAX_LINE,
    Catalogue,
    OomFact,
    classify_events,
    load_catalogue,
    read_oom,
)

__all__ = [
    "EVENT_PATTERNS",
    "KILL_WINDOW_SLACK",
    "KernelRead",
    "KillCause",
    "ProcessEnd",
    "classify_kernel_events",
    "kernel_payload",
    "last_reset",
    "parse_kernel_log",
    "parse_since",
    "process_end",
    "read_kernel_log",
    "sigkill_cause",
]

# the event patterns are the core's (ledger.gpu_faults), which re-reads every recorded line with them; a
# line is looked at only when it speaks of the GPU or of the OOM killer (host memory)
_GPU_HINT = re.compile(
    r"NVRM|amdgpu|\bdrm\b|\[drm|kfd|nvidia|\bMES\b|GPU|oom[-_]kill|oom_reaper|Kill(?:ed)? process",
    re.IGNORECASE,
)

# timestamp prefixes: journalctl -o short-iso(-precise), dmesg --time-format iso, dmesg raw [secs]
_ISO = re.compile(r"^(?P<t>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)\s+(?P<rest>.*)$")
_MONO = re.compile(r"^\[\s*(?P<s>\d+\.\d+)\]\s*(?P<rest>.*)$")
_DEVICE = re.compile(r"(?:amdgpu|nvidia) (?P<dev>[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d)")


@dataclass
class KernelRead:
    source: str
    readable: bool
    text: str = ""
    reason: str | None = None
    command: list[str] = field(default_factory=list)


def _iso_time(text: str) -> str | None:
    t = text.replace(",", ".")
    if re.search(r"[+-]\d{4}$", t):
        t = t[:-2] + ":" + t[-2:]
    try:
        dt = datetime.fromisoformat(t.replace("Z", "+00:00"))
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=UTC)
        return format_time(dt)
    except (ValueError, OverflowError):  # not a time, or one that cannot be shown in UTC
        return None


def _mono_time(seconds: str, boot_time: datetime) -> str | None:
    """Boot time plus a ``[secs]`` stamp; an out-of-range stamp is an unknown time, not a crash."""
    try:
        return format_time(boot_time + timedelta(seconds=float(seconds)))
    except (ValueError, OverflowError):
        return None


def _stamped(line: str, boot_time: datetime | None) -> tuple[str | None, str]:
    """(the line's time in UTC, or None where it has none that can be read; the line past its stamp)."""
    m = _ISO.match(line)
    if m is not None:
        return _iso_time(m.group("t")), m.group("rest")
    mm = _MONO.match(line)
    if mm is not None:
        return (_mono_time(mm.group("s"), boot_time) if boot_time is not None else None), mm.group("rest")
    return None, line


def _parse_line(raw: str, boot_time: datetime | None) -> dict[str, Any] | None:
    line = raw[:MAX_LINE].strip()
    if not line or not _GPU_HINT.search(line):
        return None
    when, line = _stamped(line, boot_time)
    for kind, pat in EVENT_PATTERNS:
        pm = pat.search(line)
        if pm is None:
            continue
        groups = pm.groupdict()
        dev = groups.get("device")
        if not dev and kind not in HOST_WIDE_KINDS:  # the OOM killer is the host's, of no one GPU
            dm = _DEVICE.search(line)
            dev = dm.group("dev") if dm else None
        ev: dict[str, Any] = {
            "time": when,
            "kind": kind,
            "message": line[:500],
            "device": dev[:200] if dev else None,
        }
        if groups.get("xid"):
            ev["xid"] = int(groups["xid"])
        return ev
    return None


def parse_kernel_log(text: str, *, boot_time: datetime | None = None) -> list[dict[str, Any]]:
    """Typed GPU events (``KernelEvent`` payloads) from kernel log text, in order — the OOM killer's lines
    among them (kinds ``oom-kill`` …: the process, pid and scope are in the recorded ``message``, from which
    the policy engine reads them, ``ledger.gpu_faults.read_oom``).

    One line that cannot be understood is skipped; it never stops the parse of the others.
    """
    events: list[dict[str, Any]] = []
    for raw in text.splitlines():
        try:
            ev = _parse_line(raw, boot_time)
        except (ValueError, OverflowError, TypeError):
            continue
        if ev is not None:
            events.append(ev)
    return events


def last_reset(events: list[dict[str, Any]]) -> str | None:
    times = [
        e["time"] for e in events if e["kind"] in ("gpu-reset-succeeded", "gpu-reset-begin") and e["time"]
    ]
    return max(times) if times else None


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """``2 hours ago``, ``30 min ago``, ``yesterday`` or an ISO time: the core's one parser."""
    return parse_when(text, now)


def boot_time() -> datetime | None:
    try:
        up = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return datetime.now(UTC) - timedelta(seconds=up)


def read_kernel_log(since: datetime | None = None) -> KernelRead:
    """Read the kernel log: journalctl -k first, then dmesg; not being allowed to is a recorded fact."""
    reasons: list[str] = []
    if shutil.which("journalctl"):
        cmd = ["journalctl", "-k", "--no-pager", "-o", "short-iso-precise"]
        if since is not None:
            cmd += ["--since", since.astimezone().strftime("%Y-%m-%d %H:%M:%S")]
        r = _run(cmd)
        if r is not None and r.returncode == 0 and "No journal files were found" not in r.stderr + r.stdout:
            return KernelRead("journalctl", True, r.stdout, command=cmd)
        reasons.append(f"journalctl: {_why(r)}")
    else:
        reasons.append("journalctl: not installed")
    if shutil.which("dmesg"):
        cmd = ["dmesg", "--time-format", "iso"]
        r = _run(cmd)
        if r is not None and r.returncode != 0:
            cmd = ["dmesg"]
            r = _run(cmd)
        if r is not None and r.returncode == 0:
            return KernelRead("dmesg", True, r.stdout, command=cmd)
        reasons.append(f"dmesg: {_why(r)}")
    else:
        reasons.append("dmesg: not installed")
    return KernelRead("none", False, reason="; ".join(reasons))


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None


def _why(r: subprocess.CompletedProcess[str] | None) -> str:
    if r is None:
        return "could not run"
    msg = (r.stderr or r.stdout).strip().splitlines()
    return f"exit {r.returncode}: {msg[-1] if msg else 'no output'}"[:300]


def classify_kernel_events(
    events: list[dict[str, Any]], catalogue: Catalogue | None = None
) -> list[dict[str, Any]]:
    """The events with their catalogue class (``collectors/gpu_faults.toml``), in order; none is dropped.

    Each gets ``fault_class`` (``unknown`` — contact support — for a code the catalogue lacks), and an
    NVRM Xid its ``mnemonic``; an Xid 154 also gets ``recovery_action`` and ``related_xid``.
    """
    cat = catalogue or load_catalogue()
    out: list[dict[str, Any]] = []
    for ev, fact in zip(events, classify_events(events, cat), strict=True):
        item = dict(ev)
        item["fault_class"] = fact["fault_class"]
        row = cat.xids.get(ev["xid"]) if ev.get("kind") == "nvrm-xid" and "xid" in ev else None
        if row is not None:
            item["mnemonic"] = row.mnemonic
        if fact["recovery_action"] is not None:
            item["recovery_action"] = fact["recovery_action"]
        if fact["related_xid"] is not None:
            item["related_xid"] = fact["related_xid"]
        out.append(item)
    return out


def kernel_payload(
    read: KernelRead, *, since: datetime | None = None, catalogue: Catalogue | None = None
) -> dict[str, Any]:
    """The ``kernel.log`` payload, events filtered to ``since`` where they carry a time, each classified
    by the GPU-fault catalogue, which the payload cites (name, version, BLAKE3 digest of its bytes)."""
    cat = catalogue or load_catalogue()
    events = parse_kernel_log(read.text, boot_time=boot_time() if read.source == "dmesg" else None)
    if since is not None:
        cut = format_time(since)
        events = [e for e in events if e["time"] is None or e["time"] >= cut]
    return {
        "source": read.source,
        "readable": read.readable,
        "reason": read.reason,
        "since": format_time(since) if since else None,
        "events": classify_kernel_events(events, cat),
        "last_reset_at": last_reset(events),
        "catalogue": cat.cite(),
    }


# The OOM killer's lines that name the process it killed (its victim); ``oom-killer-invoked`` names the task
# that could not get memory, which need not be the one killed
_OOM_VICTIM_KINDS = HOST_WIDE_KINDS - {"oom-killer-invoked"}
# how far before a launch's start and after its end a kernel line still counts as the launch's: the kernel
# log's times are the kernel's clock made wall time (dmesg --time-format iso: boot time plus the printk
# stamp, which drifts from the wall clock across a suspend or a virtual machine's fork — 0.6 s seen here),
# and the OOM killer logs its kill before the process it killed has ended. A wider window fails closed: an
# OOM kill it takes in is never a stop from outside
KILL_WINDOW_SLACK = timedelta(seconds=5)


@dataclass(frozen=True, slots=True)
class KillCause:
    """Who killed an engine by SIGKILL, as the kernel log shows it (``sigkill_cause``):

    * ``oom-killer`` — the OOM killer killed the engine's process (``pid``): the engine's resource failure;
    * ``host-out-of-memory`` — the OOM killer ran while the engine ran but names no process the collector
      knew as the engine's (another process; the engine's child; a pid of another pid namespace — a
      container's pids are not the kernel's): the host's memory failed under the engine all the same;
    * ``outside`` — a readable kernel log holds no OOM-killer line in the launch's window: someone else
      sent the SIGKILL (an operator, a supervisor), no limit of the host's;
    * ``unread`` — the kernel log cannot be read: the OOM killer cannot be told from an operator.

    ``text`` is what the kernel log shows (the OOM killer's lines, read by ``read_oom``) or why it could not
    be read; ``source`` where it was read (journalctl, dmesg, none)."""

    cause: str
    text: str
    source: str


def _oom_events(read: KernelRead, since: datetime, until: datetime) -> list[OomFact]:
    """The OOM killer's lines of ``read`` that lie from ``since`` to ``until``, each read from its line
    (``read_oom``), in order; a line without a time counts: it cannot be shown outside the window."""
    events = parse_kernel_log(read.text, boot_time=boot_time() if read.source == "dmesg" else None)
    lo, hi = format_time(since), format_time(until)
    facts: list[OomFact] = []
    for ev in events:
        if ev["kind"] not in HOST_WIDE_KINDS or (ev["time"] is not None and not lo <= ev["time"] <= hi):
            continue
        fact = read_oom(ev["message"])
        if fact is not None:
            facts.append(fact)
    return facts


def _oom_victim(facts: list[OomFact], pid: int) -> OomFact | None:
    """The first of the OOM killer's lines ``facts`` that names ``pid`` as the process it killed (or
    reaped); None for none — a line naming another pid, or the task that invoked it, is not ``pid``'s."""
    return next((f for f in facts if f.kind in _OOM_VICTIM_KINDS and f.pid == pid), None)


def sigkill_cause(pid: int, since: datetime, until: datetime, read: KernelRead | None = None) -> KillCause:
    """Who killed the engine whose leader process ``pid`` ran from ``since`` to ``until`` by SIGKILL, read
    from the kernel log (``read_kernel_log`` unless ``read`` is given) over that window widened by
    ``KILL_WINDOW_SLACK`` each way (``KillCause``). The OOM killer is the only sender of a SIGKILL the
    kernel records; any of its lines in the window keeps the kill the host's memory's (fail closed)."""
    lo, hi = since - KILL_WINDOW_SLACK, until + KILL_WINDOW_SLACK
    if read is None:
        read = read_kernel_log(lo)
    if not read.readable:
        return KillCause("unread", read.reason or "not readable", read.source)
    facts = _oom_events(read, lo, hi)
    mine = _oom_victim(facts, pid)
    if mine is not None:
        return KillCause("oom-killer", mine.summary(), read.source)
    if facts:
        named = list(dict.fromkeys(f.summary() for f in facts))
        more = f" (and {len(named) - 3} more)" if len(named) > 3 else ""
        return KillCause("host-out-of-memory", "; ".join(named[:3]) + more, read.source)
    return KillCause(
        "outside", f"no OOM-killer line from {format_time(lo)} to {format_time(hi)}", read.source
    )


# The kernel's line for a user process it ended on a fault of its own (arch/x86/mm/fault.c show_signal_msg,
# arch/x86/kernel/traps.c; printed while /proc/sys/debug/exception-trace is 1, the default):
#   "python3[12345]: segfault at 8 ip 00007f… sp 00007ff… error 4 in libc.so.6[7f…+1a5000] likely on CPU 3 …"
#   "traps: python3[12345] general protection fault ip:7f… sp:7ff… error:0 in libc.so.6[…]"
#   "traps: python3[12345] trap invalid opcode ip:7f… sp:7ff… error:0 in …" (a divide error, an int3 …)
# The name in front of the pid is the task's comm (at most 15 characters, vLLM's "VLLM::EngineCor")
_CRASH = re.compile(
    r"(?:^|[\s:])(?P<process>[^\s\[\]]{1,16}?)\[(?P<pid>\d{1,10})\]:? "
    r"(?P<what>segfault at [0-9a-fx]{1,20}|general protection fault|trap [a-z][a-z ]{0,40}?(?=\s+ip[: ]))"
)


@dataclass(frozen=True, slots=True)
class ProcessEnd:
    """How the kernel log shows a process of the engine other than its leader (``pid``) ended, where the
    collector saw it gone before the leader's end or its own stop (``process_end``):

    * ``oom-killer`` — the OOM killer killed (or reaped) that pid: the host's memory failed under the engine;
    * ``crashed`` — the kernel logged that pid's fault (a segfault, a general protection fault, a trap):
      the engine's own crash;
    * ``none`` — a readable kernel log holds neither for that pid in the window (an OOM-killer line that
      names another pid is not this process's): how it ended is not shown;
    * ``unread`` — the kernel log cannot be read.

    ``text`` is what the kernel log shows (the OOM killer's line read by ``read_oom``, the fault's line)
    or what it does not; ``source`` where it was read (journalctl, dmesg, none)."""

    cause: str
    pid: int
    text: str
    source: str


def _crashes(read: KernelRead, since: datetime, until: datetime, pid: int) -> list[str]:
    """The kernel's fault lines (``_CRASH``) for ``pid`` from ``since`` to ``until``, in order, each cut to
    500 characters; a line without a time counts (it cannot be shown outside the window)."""
    boot = boot_time() if read.source == "dmesg" else None
    lo, hi = format_time(since), format_time(until)
    found: list[str] = []
    for raw in read.text.splitlines():
        line = raw[:MAX_LINE].strip()
        if not line or "[" not in line:
            continue
        when, rest = _stamped(line, boot)
        m = _CRASH.search(rest)
        if m is None or int(m.group("pid")) != pid or (when is not None and not lo <= when <= hi):
            continue
        found.append(rest[m.start("process") :][:500])
    return found


def process_end(pid: int, since: datetime, until: datetime, read: KernelRead | None = None) -> ProcessEnd:
    """How a process of the engine other than its leader (``pid``), alive at ``since`` and seen gone by
    ``until``, ended as the kernel log shows it (``read_kernel_log`` unless ``read`` is given), over that
    window widened by ``KILL_WINDOW_SLACK`` each way as for the leader (``sigkill_cause``: the same reader,
    the same OOM-killer lines): the OOM killer's kill of that pid first, then the kernel's fault line for it
    (``ProcessEnd``). Only a line that names the pid counts: an OOM kill of another process is no kill of
    this one."""
    lo, hi = since - KILL_WINDOW_SLACK, until + KILL_WINDOW_SLACK
    if read is None:
        read = read_kernel_log(lo)
    if not read.readable:
        return ProcessEnd("unread", pid, read.reason or "not readable", read.source)
    killed = _oom_victim(_oom_events(read, lo, hi), pid)
    if killed is not None:
        return ProcessEnd("oom-killer", pid, killed.summary(), read.source)
    crashed = _crashes(read, lo, hi, pid)
    if crashed:
        return ProcessEnd("crashed", pid, crashed[0], read.source)
    return ProcessEnd(
        "none",
        pid,
        f"no OOM-killer or fault line for pid {pid} from {format_time(lo)} to {format_time(hi)}",
        read.source,
    )
