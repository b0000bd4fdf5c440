"""Launch an inference engine in its own process group under a lease, watch it, stop it cleanly.

The engine's stdout and stderr stream to files (they become artifacts); log lines are timed as they
arrive for phase timings; readiness is polled per engine (:mod:`readiness`); at the end the run is
classified against the failure signatures (:mod:`signatures`). No recovery command is ever run: a
failed engine is stopped and described, nothing else.

The lease is enforced twice: by a watchdog thread here, which records ``lease-expired`` (or ``lease-end``),
and by a lease keeper (:mod:`lease_keeper`), a separate process started with the engine that stops the
group if the collector dies (SIGKILL, OOM) or the lease plus a margin passes with the group still running.
Every process of the engine carries the launch's unique id in its environment (``LEDGER_LAUNCH_ID``):
after the group's stop, a process that left the group (``setsid()``) and still runs is stopped and named
in ``details.survivors``. The engine's port is checked twice: a port something already listens on is
refused before the engine starts (``PortInUseError``), and when readiness is reached the listening socket
must belong to a process of the engine — else another server answered, and the launch fails readiness
(``port-served-by-another-process``).

The engine is more than its leader: at readiness the launch records its processes (pid, start time, command
line) and which of them serve — the engine's own processes (``EngineRun._engine_process``). One of those that
ends while the leader runs on, before the collector's own stop, ends the run as the engine's fault
(``engine-process-ended``, ``PROCESS_ENDED``): a supervisor in front of the engine that serves on from a
standby copy would hide it from every probe, and a native crash prints nothing.

Linux only (process groups, ``/proc``, ``CLOCK_MONOTONIC`` shared across processes).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ledger.answers import ENGINE_PROGRAMS, command_program, skip_launchers
from ledger.collectors import kernel, lease_keeper
from ledger.collectors.lease_keeper import (
    LAUNCH_MARK,
    RELEASE,
    cmdline,
    group_alive,
    keeper_margin,
    marked_processes,
    proc_argv,
    proc_start,
    proc_stats,
    stop_marked,
    stopped_processes,
)
from ledger.collectors.phases import PhaseTracker
from ledger.collectors.readiness import ReadyState, check_ready, http_client
from ledger.collectors.secrets import Redactor, redact_command, redact_env
from ledger.entries import format_time, now_utc, parse_time
from ledger.errors import CollectorError, LedgerError, PortInUseError
from ledger.signatures import (
    ENGINE_ENDED,
    PYTHON_TRACEBACK,
    Classification,
    RunOutcome,
    Signature,
    classify,
    echoed_line,
    load_signatures,
    outside_stop_shown,
    own_end_lines,
    shows_stop_marker,
    stop_cut_line,
    stop_cut_lines,
    stop_markers,
)

__all__ = [
    "ENGINE_TITLES",
    "KILLED",
    "PORT_CONFLICT",
    "PROCESS_CRASHED",
    "PROCESS_DEATH_READINGS",
    "PROCESS_ENDED",
    "PROCESS_OOM_KILLED",
    "READINESS_REFUSED",
    "RELEVANT_ENV_PREFIXES",
    "SUSPENDED",
    "EngineRun",
    "LaunchSpec",
    "group_alive",
    "inherited_env",
    "launch_env",
    "listening_sockets",
    "relevant_env",
    "socket_owners",
]

# the line the collector adds to a launch's failure text when another process answered readiness on the
# engine's port (signature `port-served-by-another-process` in signatures.toml matches it)
PORT_CONFLICT = "ledger-collector: port {port} answered readiness from a process that is not the engine"
# the line the collector adds when the engine refused its readiness requests (HTTP 401/403: an API key the
# campaign's command gives the engine and not the collector), the engine's own words after it (signature
# `readiness-refused`, class config: the campaign's configuration, not the engine's fault)
READINESS_REFUSED = "ledger-collector: the engine refused the collector's readiness requests: {note}"
# the line the collector adds to a launch's failure text when a process of the engine was suspended from
# outside (stopped or traced: ``/proc/<pid>/stat`` state T/t — SIGSTOP, a debugger, a cgroup freezer) when the
# collector stopped it: it answered nothing because someone else held it, which is no hang of the engine's
# (signature `suspended-from-outside` in signatures.toml matches it, class operator-stop)
SUSPENDED = (
    "ledger-collector: the engine was suspended from outside (stopped, process state T/t) when the collector "
    "stopped it: {processes}"
)
# the line the collector adds to a launch's failure text where the engine's leader process died by SIGKILL
# (signal 9, or exit status 137 through a shell) before the collector or its lease keeper signalled it: who
# sent it, as the kernel log shows (collectors/kernel.py sigkill_cause), by its ``KillCause.cause``. The
# signatures of signatures.toml that match them: `killed-by-oom-killer` (class resource: the OOM killer
# killed the engine's process, or ran while the engine ran), `killed-sigkill-from-outside` and
# `killed-137-from-outside` (operator-stop: a readable kernel log holds no OOM-killer line in the launch's
# window — an operator's or a supervisor's kill, as an outside SIGTERM), `killed-sigkill-unattributed` and
# `killed-137-unattributed` (operator-stop, never credited: the kernel log cannot be read, so the OOM killer
# cannot be ruled out)
KILLED = {
    "oom-killer": (
        "ledger-collector: the engine was killed by SIGKILL from the kernel's OOM killer: the kernel log "
        "({source}) shows {text}"
    ),
    "host-out-of-memory": (
        "ledger-collector: the engine was killed by SIGKILL while the kernel's OOM killer ran: the kernel "
        "log ({source}) shows {text} — none of it names the engine's process (pid {pid})"
    ),
    "outside": (
        "ledger-collector: the engine was killed by SIGKILL from outside: the kernel log ({source}) "
        "shows {text}"
    ),
    "unread": (
        "ledger-collector: the engine was killed by SIGKILL and the kernel log cannot be read ({text}): "
        "cannot tell the OOM killer from an operator"
    ),
}
# the line the collector adds to a launch's failure text where a process of the engine's set at readiness that
# counts (``EngineRun.ready_processes``, ``_engine_process``) ended while the engine's leader ran on, before
# the collector's own stop (signature `engine-process-ended` in signatures.toml matches it, class
# runtime-fault): a supervisor that serves on from a standby copy hides such an end from every probe, and a
# native crash without a fault handler logs nothing. Where the leader then ended on its own, its end decides
# (an outside stop of the whole group ends its members first): the line is not added
PROCESS_ENDED = (
    "ledger-collector: a process of the engine ended after readiness while its leader ran on, before the "
    "collector stopped it: {processes}"
)
# The collector's lines where the kernel log shows how a process of the engine other than its leader ended
# (collectors/kernel.py process_end: the reader of the leader's SIGKILL, KILLED above), for the engine's
# processes at readiness (``EngineRun.ready_processes``) of a run that failed, over the time from readiness
# to when the collector saw that process gone, else to the leader's end or the collector's stop:
# - the OOM killer killed it: KILLED's own OOM-killer line (signature `killed-by-oom-killer`, class resource),
#   naming the process, read instead of the readings of that process's death that followed it
#   (PROCESS_DEATH_READINGS: vLLM's EngineDeadError when its engine core is gone, "Engine core proc … died
#   unexpectedly", the collector's own PROCESS_ENDED) — the OOM killer taking vLLM's EngineCore, the process
#   that holds the memory, is the host's memory failing under the engine, not a runtime fault with no word
#   of memory. A graver line of another kind the engine logged (a GPU fault, a crash) still decides;
# - the kernel logged its fault (a segfault, a general protection fault, a trap): signature
#   `engine-process-crashed` (class runtime-fault), the engine's own crash, said so in the detail;
# - neither (a readable log; an OOM kill of another pid is no kill of it), or the kernel log cannot be read:
#   nothing is added — the reading of its death stands (a kill from outside that cannot be shown is not
#   excused). What was read for each process is recorded (``details.engine_process_ends``).
PROCESS_OOM_KILLED = (
    KILLED["oom-killer"]
    + " — pid {pid} ({cmdline}), one of the engine's processes at readiness ({counted}), "
    "{gone} (the engine's leader: pid {leader})"
)
PROCESS_CRASHED = (
    "ledger-collector: the kernel log ({source}) shows a process of the engine crashed: {text} — pid {pid} "
    "({cmdline}), one of the engine's processes at readiness ({counted}), {gone}: the engine's own crash"
)
# the signature ids (signatures.toml) that read a process of the engine dying without saying why: where the
# kernel log shows the OOM killer killed that process, its kill is read instead (PROCESS_OOM_KILLED). An id
# the table lacks drops nothing: the reading of the death stands (fail closed)
PROCESS_DEATH_READINGS = frozenset(
    {"engine-dead", "engine-process-died", "engine-process-died-at-startup", "engine-process-ended"}
)
# the process titles an engine gives its own processes (setproctitle, the head of ``/proc/PID/cmdline``):
# vLLM's engine core and workers ("VLLM::EngineCore", "VLLM::Worker_TP0")
ENGINE_TITLES = ("VLLM::",)
PROCESS_CHECK_S = 0.5  # how often, at most, the watch of the leader also reads the engine's processes
DRAIN_S = 1.0  # at most this long, before SIGTERM, for the engine's pipes to be read empty
EXIT_POLL_S = 0.02  # how often the leader's end is polled where no pidfd can watch it (``_watch_exit``)

RELEVANT_ENV_PREFIXES = (
    "VLLM_",
    "CUDA_",
    "HIP_",
    "ROCR_",
    "ROCM_",
    "HSA_",
    "NCCL_",
    "LLAMA_",
    "GGML_",
    "SGLANG_",
    "HF_",
    "TORCH_",
    "PYTORCH_",
    "OMP_",
    "MKL_",
    "TRANSFORMERS_",
    "NVIDIA_",
)
# and these whole names: the libraries the engine loads, and which Python packages it imports (a
# PYTHONPATH in front of the venv runs another engine version than the venv's)
RELEVANT_ENV_NAMES = ("LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONHOME")


def relevant_env(env: Mapping[str, str]) -> dict[str, str]:
    """The engine-relevant variables of an environment (secrets redacted)."""
    keep = {k: v for k, v in env.items() if k.startswith(RELEVANT_ENV_PREFIXES) or k in RELEVANT_ENV_NAMES}
    return redact_env(keep)


# what an engine inherits from the collector's environment besides the engine-relevant variables the launch
# records (``relevant_env``): what any process needs to run (its programs, home, locale, time zone,
# temporary folder), none of them a setting an engine reads. Every other variable of the operator's shell
# stays behind: llama-cpp-python's server reads its settings from the environment in any case and without a
# prefix (INTERRUPT_REQUESTS, CHAT_FORMAT, N_CTX, MODEL …), so a variable the campaign does not state and
# the launch does not record would change what is qualified (audit 83, f10)
INHERITED_ENV_NAMES = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TEMP", "TMP")
INHERITED_ENV_PREFIXES = ("LC_",)


def inherited_env(env: Mapping[str, str]) -> dict[str, str]:
    """The part of ``env`` (the collector's environment) an engine inherits: ``INHERITED_ENV_NAMES`` /
    ``INHERITED_ENV_PREFIXES``, and the engine-relevant variables (``RELEVANT_ENV_PREFIXES`` /
    ``RELEVANT_ENV_NAMES``) that every launch records in its ``env`` (``relevant_env``)."""
    return {
        k: v
        for k, v in env.items()
        if k in INHERITED_ENV_NAMES
        or k.startswith(INHERITED_ENV_PREFIXES)
        or k.startswith(RELEVANT_ENV_PREFIXES)
        or k in RELEVANT_ENV_NAMES
    }


def launch_env(engine_env: Mapping[str, str]) -> dict[str, str]:
    """The environment an engine runs under: what it inherits of this process's (``inherited_env``: the
    variables a process needs, and the engine-relevant ones the launch records), then the variables the
    engine is given (a campaign's ``[engine] env``, then its attempt's). Nothing else of the operator's
    shell reaches the engine: what the engine reads is what the campaign states or the launch records. One
    merge for the launch and for every reading of the engine's interpreter (its version, ``pip freeze``):
    a ``PYTHONPATH`` the engine runs with is one its version is read with."""
    return {**inherited_env(os.environ), **engine_env}


@dataclass
class LaunchSpec:
    """What to run and how long it may live."""

    engine: str
    command: list[str]
    base_url: str
    lease_seconds: float
    env: dict[str, str] = field(default_factory=dict)
    grace_seconds: float = 10.0
    poll_interval: float = 0.25
    cwd: Path | None = None
    attempt: int = 1
    attempt_name: str = "default"
    bindings: dict[str, str] = field(default_factory=dict)
    # The lease is the planned length of a supervised run (`ledger collect launch`): an engine that became
    # ready and is still serving when it ends is stopped with reason `lease-end`, a planned stop, not a
    # failure. False (campaigns): the lease running out is the job being killed, `lease-expired`.
    lease_ends_run: bool = False
    # the policy's ``params.stop_cut_tolerance_s`` (campaigns): how much earlier than the engine's first stop
    # marker a stop-cut line of its own (``stop_cut_lines``) may be read and still be that stop's cut of a
    # request in flight (``ledger.signatures.cut_within_stop``); None (``ledger collect launch``): none is
    # (the line stays the engine's own error; the policy judges the record with its own)
    stop_cut_tolerance_s: float | None = None
    # the programs that are an engine's (past launchers, by ``ledger.answers.command_program``: an engine's
    # own program or the module a Python interpreter runs), besides ``ENGINE_PROGRAMS`` and the leader's own:
    # a process at readiness that runs one of them is one of the engine's processes (``_engine_process``)
    engine_programs: tuple[str, ...] = ()


_LOCAL_HOSTS = ("localhost", "::1", "0.0.0.0", "::", "")  # noqa: S104 (names, compared)


def _local_port(base_url: str) -> int | None:
    """The TCP port of ``base_url`` when it names this host (the engine the collector starts), else None."""
    try:
        u = urllib.parse.urlsplit(base_url)
        port = u.port or (443 if u.scheme == "https" else 80)
    except ValueError:
        return None
    host = u.hostname or ""
    return port if host in _LOCAL_HOSTS or host.startswith("127.") else None


def _tcp_listeners() -> list[tuple[int, int, int]] | None:
    """(inode, port, uid) of every TCP socket in LISTEN state (IPv4 and IPv6) in this network namespace, read
    from ``/proc/net/tcp`` and ``tcp6`` (the one reading of them); None when neither can be read."""
    found: list[tuple[int, int, int]] = []
    readable = False
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(name).read_text(encoding="ascii", errors="replace").splitlines()[1:]
        except OSError:
            continue
        readable = True
        for line in lines:
            f = line.split()
            if len(f) < 10 or f[3] != "0A":  # 0A: TCP_LISTEN
                continue
            with contextlib.suppress(ValueError):
                found.append((int(f[9]), int(f[1].rsplit(":", 1)[1], 16), int(f[7])))
    return found if readable else None


def listening_sockets(port: int) -> list[tuple[int, int]] | None:
    """(inode, uid) of every TCP socket in LISTEN state on ``port`` (any address, IPv4 and IPv6) in this
    network namespace; None when ``/proc/net/tcp`` cannot be read."""
    rows = _tcp_listeners()
    return None if rows is None else [(ino, uid) for ino, p, uid in rows if p == port]


def socket_owners(inodes: set[int]) -> dict[int, list[int]]:
    """Socket inode → the pids holding it open (among the processes this user may inspect)."""
    owners: dict[int, list[int]] = {}
    if not inodes:
        return owners
    try:
        names = os.listdir("/proc")
    except OSError:
        return owners
    for name in names:
        if not name.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{name}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{name}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:[") and target.endswith("]"):
                with contextlib.suppress(ValueError):
                    ino = int(target[8:-1])
                    if ino in inodes and int(name) not in owners.setdefault(ino, []):
                        owners[ino].append(int(name))
    return owners


def _describe(pids: list[int], uids: list[int]) -> str:
    named = [f"pid {pid} ({cmdline(pid)})" for pid in sorted(pids)[:5]]
    if not named:  # a socket whose process this user cannot see (another user's)
        return (
            "a process of uid " + ", ".join(str(u) for u in sorted(set(uids))) + " this collector cannot see"
        )
    return ", ".join(named)


def port_holder(port: int) -> str | None:
    """Who listens on ``port`` (pids and command lines), or None when nothing does."""
    socks = listening_sockets(port)
    if not socks:
        return None
    owners = socket_owners({ino for ino, _ in socks})
    return _describe(sorted({pid for pids in owners.values() for pid in pids}), [uid for _, uid in socks])


def listening_tcp() -> dict[int, int] | None:
    """Socket inode → TCP port of every socket in LISTEN state (IPv4 and IPv6) in this network namespace;
    None when ``/proc/net/tcp`` cannot be read."""
    rows = _tcp_listeners()
    return None if rows is None else {ino: p for ino, p, _uid in rows}


def held_ports(pid: int, listeners: Mapping[int, int]) -> list[int]:
    """The TCP ports of ``listeners`` (``listening_tcp``) whose socket process ``pid`` holds open."""
    ports: set[int] = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return []
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:[") and target.endswith("]"):
            ino = _int(target[8:-1])
            if ino is not None and ino in listeners:
                ports.add(listeners[ino])
    return sorted(ports)


def program_of(argv: list[str]) -> str | None:
    """The program ``argv`` runs past the launchers in front of it (``skip_launchers``): an engine's own
    program by basename, or the module a Python interpreter runs (``command_program``); None for a script,
    code, a launcher that cannot be read or another program."""
    launch = skip_launchers(argv)
    if launch.problem is not None or launch.program >= len(argv):
        return None
    return command_program(argv[launch.program :])[0]


class _Tee(threading.Thread):
    """Copy one pipe to a file as it arrives, timing each line for phase tracking.

    ``count()`` is the number of lines written so far, a line still without its newline counted: where
    the log stands. ``drained()`` says whether every byte the engine wrote to the pipe has been written to
    the file (the pipe holds nothing unread and this thread is waiting for more).
    """

    def __init__(self, pipe: IO[bytes], path: Path, on_line: Callable[[str], None]) -> None:
        super().__init__(daemon=True, name=f"tee-{path.name}")
        self.pipe = pipe
        self.path = path
        self.on_line = on_line
        self.lines = 0  # complete lines written to the file so far
        self.partial = False  # a line without its newline yet is in the file
        self.written = 0  # bytes written to the file so far
        self._waiting = False  # blocked reading the pipe, everything read before written
        self._count_lock = threading.Lock()

    def count(self) -> int:
        with self._count_lock:
            return self.lines + (1 if self.partial else 0)

    def size(self) -> int:
        """The bytes written so far: where the log stands, a line still open cut where it stood (what the
        engine appends to it later is not counted)."""
        with self._count_lock:
            return self.written

    def complete(self) -> int:
        """The complete lines written so far: a line still open is not counted, so a reading that starts
        here starts with it (what the engine appends to it later is read)."""
        with self._count_lock:
            return self.lines

    def drained(self) -> bool:
        if not self._waiting or not self.is_alive():
            return not self.is_alive()
        try:
            buf = fcntl.ioctl(self.pipe.fileno(), termios.FIONREAD, struct.pack("i", 0))
        except (OSError, ValueError):
            return True
        return struct.unpack("i", buf)[0] == 0 and self._waiting

    def run(self) -> None:
        fd = self.pipe.fileno()
        pending = b""
        with self.path.open("wb") as out:
            while True:
                self._waiting = True
                try:
                    chunk = os.read(fd, 1 << 16)
                except OSError:
                    chunk = b""
                self._waiting = False
                if not chunk:
                    break
                out.write(chunk)
                out.flush()
                *lines, pending = (pending + chunk).split(b"\n")
                with self._count_lock:
                    self.lines += len(lines)
                    self.partial = bool(pending)
                    self.written += len(chunk)
                for raw in lines:
                    with contextlib.suppress(Exception):
                        self.on_line(raw.decode("utf-8", errors="replace") + "\n")
            if pending:
                with self._count_lock:
                    self.lines += 1
                    self.partial = False
                with contextlib.suppress(Exception):
                    self.on_line(pending.decode("utf-8", errors="replace"))
        self.pipe.close()


class EngineRun:
    """One engine process group under a lease."""

    def __init__(self, spec: LaunchSpec, log_dir: Path, *, signatures: list[Signature] | None = None) -> None:
        if not spec.command:
            raise CollectorError("no engine command given")
        self.spec = spec
        self.log_dir = Path(log_dir)
        self.signatures = signatures if signatures is not None else load_signatures()
        self.stdout_path = self.log_dir / "stdout.log"
        self.stderr_path = self.log_dir / "stderr.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.pgid: int | None = None
        self.started_at = now_utc()
        self.ended_at: Any = None
        self._t0 = 0.0
        self._deadline = 0.0
        self._phases = PhaseTracker()
        self._lock = threading.Lock()
        self._tees: list[_Tee] = []
        self.ready_state: ReadyState | None = None
        self.time_to_ready_s: float | None = None
        # exited | lease-expired | lease-end | finished | cancelled | ready
        self.stop_reason: str | None = None
        self.stop_lines: dict[str, int] | None = None  # log name → its lines when the stop was sent
        self.stop_bytes: dict[str, int] | None = None  # log name → its bytes when the stop was sent
        self.stop_drained = False  # the pipes were read empty before those lines were counted
        self.ready_lines: dict[str, int] | None = None  # log name → its lines when readiness was reached
        # the launch's unique id, set in the engine's environment (LAUNCH_MARK): every process of the engine
        # carries it, also one that left the process group
        self.launch_id = uuid.uuid4().hex
        self.port = _local_port(spec.base_url)
        self.port_conflict: str | None = None  # another process answered readiness on the engine's port
        self.readiness_refused: str | None = None  # the engine answered readiness 401/403 (READINESS_REFUSED)
        self.survivors: list[dict[str, Any]] = []  # marked processes still running after the group's stop
        # the engine's processes at readiness but its leader (``_note_ready_processes``): pid, start (so a
        # reused pid is another process), cmdline, and ``counted`` — why it is one of the engine's processes,
        # None for a helper whose end is its own; and each counted one seen gone while the leader ran on,
        # before the collector's own stop (``_check_processes``), with when it was seen gone
        self.ready_processes: list[dict[str, Any]] = []
        self.ready_at: Any = None  # when readiness was reached (the engine's processes then: ready_processes)
        # what the kernel log shows of how each of them ended, for a run that failed (``process_end_lines``,
        # read once): one ``{pid, cause, text, source}`` each, and the collector's lines it gave
        self.process_ends: list[dict[str, Any]] = []
        self._process_end_lines: tuple[str | None, str | None] | None = None
        self.processes_ended: list[dict[str, Any]] = []
        self._processes_read_at = 0.0
        self.lease_expired = False
        # the engine's processes found suspended from outside when the collector stopped it (SUSPENDED)
        self.suspended: list[dict[str, object]] = []
        self.failure_observed: str | None = None  # set by probes that saw the engine fail a request
        # who killed the engine by SIGKILL, where it died so on its own (KILLED, read once: ``sigkill_line``)
        self.sigkill_cause: str | None = None
        self._sigkill_read = False
        self.stop_escalated = False
        # when the engine's leader process ended, as a thread watching it saw (``_watch_exit``), and when
        # its logs first showed a stop marker after readiness before this process told it to stop
        # (``_on_line``): the policy's ``stop_cut`` compares a failure's time with the earlier of the two
        self.exited_at: Any = None
        self.stop_marker_at: Any = None
        # when its logs first showed a stop-cut line of its own (``stop_cut_lines``: uvicorn's "ASGI callable
        # returned without completing response.") after readiness, before this process told it to stop
        # (``_on_line``): the stop's cut of a request in flight where it came within the stop
        # (``ledger.signatures.cut_within_stop``; the policy reads it back)
        self.cut_line_at: Any = None
        # when this process began its own stop of a running engine (its SIGTERM: a lease's, a cancel's, the
        # end of the run): a request or probe that failed from then on saw the collector's stop, not the
        # engine (the policy's ``stop_cut`` reads it back); None: this process signalled no running engine
        self.stop_sent_at: Any = None
        # why the collector did not ask ``/health`` before its stop (its own stop had begun), or why the
        # probe it asked is not recorded (its own stop began while it waited): ``details.before_stop``
        self.before_stop_note: str | None = None
        self._markers = stop_markers()
        self._cut_lines = stop_cut_lines()
        self._exit_watch: threading.Thread | None = None
        self._watchdog: threading.Thread | None = None
        self._stopped = threading.Event()
        self.keeper_note = self.log_dir / "lease-keeper.log"  # written by the keeper only when it acts
        self._keeper: subprocess.Popen[bytes] | None = None
        self._keeper_pipe: int | None = None  # the write end: closed (the collector gone) means stop
        self._keeper_lock = threading.Lock()  # held while the keeper is released and reaped
        self.refuse_taken_port()

    def refuse_taken_port(self) -> None:
        """Refuse to launch on a port something already listens on (``PortInUseError``): the engine could
        not bind it, and readiness would be judged on the other server. Checked when the run is made —
        before anything of it is recorded — and again right before the engine starts."""
        if self.port is None:
            return
        holder = port_holder(self.port)
        if holder is not None:
            raise PortInUseError(
                f"port {self.port} ({self.spec.base_url}) is already in use by {holder}: refusing to launch "
                "the engine (it could not bind the port, and readiness would be judged on the other server)",
                hint=PortInUseError.ENGINE_HINT,
            )

    # --- life cycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start the command in a new session (its own process group); stdout/stderr go to files."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        env = {**launch_env(self.spec.env), LAUNCH_MARK: self.launch_id}
        env.setdefault("PYTHONUNBUFFERED", "1")
        self.refuse_taken_port()
        self.started_at = now_utc()
        self._t0 = time.monotonic()
        self._deadline = self._t0 + self.spec.lease_seconds
        try:
            self.proc = subprocess.Popen(
                self.spec.command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                cwd=self.spec.cwd,
                start_new_session=True,
            )
        except OSError as e:
            raise CollectorError(f"cannot start engine command {self.spec.command[0]!r}: {e}") from e
        self.pgid = self.proc.pid  # a new session: the leader's pid is the group id
        self._start_keeper()
        assert self.proc.stdout is not None
        assert self.proc.stderr is not None
        self._tees = [
            _Tee(self.proc.stdout, self.stdout_path, self._on_line),
            _Tee(self.proc.stderr, self.stderr_path, self._on_line),
        ]
        for t in self._tees:
            t.start()
        self._watchdog = threading.Thread(target=self._watch_lease, daemon=True, name="lease-watchdog")
        self._watchdog.start()
        self._exit_watch = threading.Thread(target=self._watch_exit, daemon=True, name="exit-watch")
        self._exit_watch.start()

    def _start_keeper(self) -> None:
        """Start the lease keeper: it stops the group should this process die or the watchdog not act."""
        assert self.pgid is not None
        with contextlib.suppress(FileNotFoundError):
            self.keeper_note.unlink()  # a note left from an earlier run in this folder
        grace = self.spec.grace_seconds
        read_end, write_end = os.pipe()  # both close-on-exec; only the read end is handed to the keeper
        try:
            self._keeper = subprocess.Popen(
                [
                    sys.executable,
                    "-I",
                    "-S",
                    str(lease_keeper.__file__),
                    str(read_end),
                    str(self.pgid),
                    repr(self._deadline + keeper_margin(grace)),
                    repr(grace),
                    str(self.keeper_note),
                    self.launch_id,
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(read_end,),
                start_new_session=True,  # not in the collector's group: a kill of that group spares it
            )
        except (OSError, ValueError) as e:
            os.close(write_end)
            self.stop("cancelled")
            raise CollectorError(f"cannot start the lease keeper, engine stopped: {e}") from e
        finally:
            os.close(read_end)
        self._keeper_pipe = write_end

    def _release_keeper(self) -> None:
        """The run ended under this process's control: let the keeper exit, and reap it. A second call
        (the watchdog's stop, then the caller's) returns once the first has reaped it."""
        with self._keeper_lock:
            with self._lock:
                keeper, pipe = self._keeper, self._keeper_pipe
                self._keeper, self._keeper_pipe = None, None
            if pipe is not None:
                with contextlib.suppress(OSError):  # BrokenPipeError: it has exited already (the group gone)
                    os.write(pipe, RELEASE)
                os.close(pipe)
            if keeper is not None:
                try:
                    keeper.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    keeper.kill()
                    keeper.wait()

    @property
    def keeper_pid(self) -> int | None:
        """The lease keeper's pid while it runs under this launcher (None before start and after stop)."""
        keeper = self._keeper
        return keeper.pid if keeper is not None else None

    def _keeper_stopped_on_lease(self) -> bool:
        try:
            return "lease deadline" in self.keeper_note.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return False

    def _engine_ended(self) -> None:
        """Record the engine's own end (the lock held): the keeper's lease stop is ``lease-expired``."""
        if self._keeper_stopped_on_lease():
            self.lease_expired = True
            self.stop_reason = "lease-expired"
        else:
            self.stop_reason = "exited"

    def _on_line(self, line: str) -> None:
        with self._lock:
            self._phases.feed(line, time.monotonic() - self._t0)
            if (
                self.stop_marker_at is None
                and self.ready_lines is not None
                and self.stop_lines is None
                and not echoed_line(line)
                and any(m.search(line) for m in self._markers)
            ):
                self.stop_marker_at = now_utc()
            if (
                self.cut_line_at is None
                and self.ready_lines is not None
                and self.stop_lines is None
                and stop_cut_line(line, self._cut_lines)
            ):
                self.cut_line_at = now_utc()

    def _watch_exit(self) -> None:
        """Record when the engine's leader process ends (``exited_at``), as it ends: a pidfd that becomes
        readable (it does not reap the process: ``Popen`` still does), else a poll every
        :data:`EXIT_POLL_S`. The time of an end the collector only noticed later (after a probe returned)
        would put an outside stop after the failure it caused."""
        proc = self.proc
        if proc is None:
            return
        fd: int | None = None
        with contextlib.suppress(AttributeError, OSError):
            fd = os.pidfd_open(proc.pid)
        try:
            while self.exited_at is None:
                if fd is not None:
                    ended = bool(select.select([fd], [], [], PROCESS_CHECK_S)[0])
                else:
                    ended = proc.poll() is not None
                    if not ended:
                        time.sleep(EXIT_POLL_S)
                if ended:
                    with self._lock:
                        self.exited_at = now_utc()
                elif time.monotonic() - self._processes_read_at >= PROCESS_CHECK_S:
                    self._check_processes()  # one of the engine's processes ended: seen as it ends
        finally:
            if fd is not None:
                os.close(fd)

    def _watch_lease(self) -> None:
        """Stop the group when the lease runs out, even while the caller is blocked in a request. A stop
        already under way when the lease runs out (the caller's: the end of the run, a cancel) is that
        stop's, not the lease's: the run is not marked ``lease-expired``."""
        while not self._stopped.is_set():
            left = self._deadline - time.monotonic()
            if left <= 0:
                with self._lock:
                    begun = self.stop_reason is not None
                if begun:
                    return
                if self.leader_alive() and self.spec.lease_ends_run and self.ready_state is not None:
                    self.stop("lease-end")
                elif self.leader_alive():
                    self.lease_expired = True
                    self.stop("lease-expired")
                return
            self._stopped.wait(min(left, 0.5))

    def elapsed(self) -> float:
        return time.monotonic() - self._t0

    def lease_left(self) -> float:
        return max(0.0, self._deadline - time.monotonic())

    def stop_begun(self) -> str | None:
        """Why the engine is being stopped, or was (its ``stop_reason``: the collector's own stop, the
        lease's, its own end), or its lease has run out (the watchdog's stop is then due); None while it runs
        on its lease. No probe is asked of an engine so stopped: what it answers then is the stop's."""
        with self._lock:
            reason = self.stop_reason
        if reason is not None:
            return reason
        if self.lease_expired or (self._deadline and self.lease_left() <= 0):
            return "lease-expired"
        return None

    def leader_alive(self) -> bool:
        """The engine's leader process has not ended."""
        return self.proc is not None and self.proc.poll() is None

    def alive(self) -> bool:
        """The engine runs: its leader has not ended, and none of its processes at readiness that count has
        (``processes_ended``, read again now: ``_check_processes``)."""
        if not self.leader_alive():
            return False
        self._check_processes()
        return not self.processes_ended

    def _note_ready_processes(self) -> None:
        """Record the engine's processes at readiness, its leader's aside (whose end ``proc`` shows): every
        process of its group, session or launch mark (``engine_pids``), with its start time and command line,
        and whether it is one of the engine's own processes (``_engine_process``)."""
        assert self.proc is not None
        listeners = listening_tcp() or {}
        found: list[dict[str, Any]] = []
        for pid in sorted(self.engine_pids() - {self.proc.pid}):
            start, argv = proc_start(pid), proc_argv(pid)
            if start is None or argv is None:  # gone already: nothing of it to watch
                continue
            found.append(
                {
                    "pid": pid,
                    "start": start,
                    "cmdline": cmdline(pid),
                    "counted": self._engine_process(argv, held_ports(pid, listeners)),
                }
            )
        with self._lock:
            self.ready_processes = found

    def _engine_process(self, argv: list[str], ports: list[int]) -> str | None:
        """Why a process of the engine at readiness is one of the engine's own processes, whose end while
        the leader runs on is the engine's fault; None for a helper whose end is its own. Counted: one that
        gave itself an engine's process title (``ENGINE_TITLES``: vLLM's ``VLLM::EngineCore``); one that
        listens on a TCP socket (a server: the engine's API server, a standby copy of it, a forwarder in
        front of it); one that runs an engine's program (``program_of``: ``ENGINE_PROGRAMS``, the spec's
        ``engine_programs``, or the program the leader's command runs — a copy of the leader). Not counted:
        a helper at readiness that is none of these — torch's inductor compile workers (a script), Python's
        multiprocessing resource tracker (``-c``), a compiler or ``ldconfig`` torch or triton runs — which
        may end normally while the engine serves."""
        head = argv[0].strip() if argv else ""
        if head.startswith(ENGINE_TITLES):
            return f"the engine's process title {head.split()[0]!r}"
        if ports:
            return "listening on TCP port " + ", ".join(str(p) for p in ports)
        program = program_of(argv)
        engines = {*ENGINE_PROGRAMS, *self.spec.engine_programs, program_of(list(self.spec.command))}
        if program is not None and program in engines:
            return f"running the engine's program {program}"
        return None

    def _check_processes(self) -> None:
        """Read whether a counted process of the engine's set at readiness (``ready_processes``) has ended —
        its pid gone, a zombie, or another process's (another start time: a pid reused) — while the leader
        runs on and before the collector's own stop (``stop_sent_at``) or the lease keeper's; each one found
        is added to ``processes_ended`` once, with when it was seen gone. An end seen after the leader's is
        the leader's end's (not read)."""
        self._processes_read_at = time.monotonic()
        if self.proc is None or not self.ready_processes:
            return
        with self._lock:
            if self.stop_sent_at is not None:
                return
            known = {p["pid"] for p in self.processes_ended}
            watched = [p for p in self.ready_processes if p["counted"] is not None and p["pid"] not in known]
        gone = [p for p in watched if proc_start(p["pid"]) != p["start"]]
        if not gone or self.proc.poll() is not None or self.keeper_note.exists():
            return
        at = format_time(now_utc())
        with self._lock:
            if self.stop_sent_at is not None:
                return
            known = {p["pid"] for p in self.processes_ended}
            self.processes_ended.extend({**p, "seen_gone_at": at} for p in gone if p["pid"] not in known)

    def wait_ready(self, should_stop: Callable[[], bool] | None = None) -> ReadyState:
        """Poll readiness until ready, the engine exits, or the lease expires (then the group is stopped)."""
        assert self.proc is not None
        last = ReadyState(False, note="not polled")
        with http_client(timeout=min(3.0, max(self.spec.poll_interval * 4, 1.0))) as client:
            while True:
                if should_stop is not None and should_stop():
                    return last
                if self.proc.poll() is not None:
                    self._mark_exited()
                    return last
                if self.lease_left() <= 0 or self.lease_expired:
                    self.lease_expired = True
                    self.stop("lease-expired")
                    return last
                last = check_ready(self.spec.base_url, self.spec.engine, client)
                if last.refused:  # up, and refusing the collector: no later poll changes that
                    with self._lock:
                        self.readiness_refused = READINESS_REFUSED.format(note=last.note)
                    return last
                if last.ready:
                    foreign = self._foreign_listener()
                    if foreign is not None:
                        with self._lock:
                            self.port_conflict = foreign
                        return ReadyState(False, last.endpoint, last.status, note=foreign)
                    with self._lock:  # where each log stood: what follows is the engine's run after readiness
                        # an open line belongs to what follows: the after-readiness reading starts with it
                        self.ready_lines = {t.path.name: t.complete() for t in self._tees}
                    self.ready_state = last
                    self.ready_at = now_utc()
                    self.time_to_ready_s = round(self.elapsed(), 3)
                    self._note_ready_processes()
                    return last
                time.sleep(self.spec.poll_interval)

    def engine_pids(self) -> set[int]:
        """The engine's processes: those carrying its launch mark, and those of its session or group."""
        pids = set(marked_processes(self.launch_id))
        stats = proc_stats() if self.pgid is not None else None
        for pid, rest in stats or ():
            if len(rest) >= 4 and self.pgid in (_int(rest[2]), _int(rest[3])):
                pids.add(pid)
        return pids

    def _foreign_listener(self) -> str | None:
        """None when the socket listening on the engine's port belongs to a process of the engine; else why
        the server that answered readiness is not the engine (naming who listens). A port of another host
        is not checked; where no listening socket can be seen at all, the answer cannot be the engine's
        (fail closed)."""
        if self.port is None:
            return None
        head = PORT_CONFLICT.format(port=self.port)
        socks = listening_sockets(self.port)
        if socks is None:
            return f"{head}: /proc/net/tcp cannot be read, so whose server answered cannot be told"
        if not socks:
            return f"{head}: no socket listens on port {self.port} in this network namespace"
        owners = socket_owners({ino for ino, _ in socks})
        mine = self.engine_pids()
        held = sorted({pid for pids in owners.values() for pid in pids})
        if any(pid in mine for pid in held):
            return None
        who = _describe(held, [uid for _, uid in socks])
        return (
            f"{head}: it is held by {who}, not by the engine's processes (pid {self.pgid}). An engine run "
            "in a container (docker/podman -p, --network host) answers through a process the collector did "
            "not start, so whose server answered cannot be told: collect run qualifies engines it starts "
            "itself, not containerised ones"
        )

    def wait_exit(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the engine to exit on its own; True when it did."""
        if self.proc is None:
            return True
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        self._mark_exited()
        return True

    def _mark_exited(self) -> None:
        with self._lock:
            if self.stop_reason is None:
                self._engine_ended()

    def _drain(self) -> bool:
        """Wait (up to :data:`DRAIN_S`) until every byte the engine has written to its pipes is in the log
        files: the lines counted for the stop are then all the engine logged before it was told to stop.
        False when the time ran out first (an engine that writes on without a pause): the count is then not
        known to hold all it wrote before the stop, and the record does not say it does."""
        deadline = time.monotonic() + DRAIN_S
        steady = 0
        while time.monotonic() < deadline:
            steady = steady + 1 if all(t.drained() for t in self._tees) else 0
            if steady >= 2:  # twice, 10 ms apart: no chunk was between the read and the write
                return True
            time.sleep(0.01)
        return False

    def _stopping_already(self) -> bool:
        """The engine's logs, after readiness, already show a stop marker (``stop_markers`` of the signature
        table: the line an engine prints when told to stop from outside) before this process told it to
        stop: someone else stopped it, and it is shutting down."""
        if self.stop_lines is not None:
            return False
        return self._marked_after_ready()

    def _marked_after_ready(self) -> bool:
        """Whether the engine's logs show a stop marker (``shows_stop_marker``) after readiness and before
        this process told it to stop (where it did: ``stop_lines``, a lease's stop too): it is shutting
        down — who asked it to, ``_stop_marked`` tells. Read from the log files."""
        logs = self._logs_after_ready()
        markers = stop_markers()
        return logs is not None and any(shows_stop_marker(text, markers) for text in logs)

    def _stop_marked(self) -> bool:
        """``RunOutcome.stop_marked`` (``outside_stop_shown``): a stop marker after readiness, before this
        process told it to stop, and nothing of the engine's own that explains its end before it (an error
        line, a traceback, ``own_end_lines``: a request answered 5xx, uvicorn's request limit; a stop-cut
        line only where it was read within the stop: ``cut_line_at``, ``stop_marker_at``, the spec's
        ``stop_cut_tolerance_s``) — someone else stopped it. Read from the log files, as the policy reads
        them back."""
        return outside_stop_shown(
            self._logs_after_ready(),
            stop_markers(),
            own_end_lines(),
            cut_at=self.cut_line_at,
            marker_at=self.stop_marker_at,
            tolerance=self.spec.stop_cut_tolerance_s,
        )

    def _logs_after_ready(self) -> list[str] | None:
        """Each log's lines after readiness and before this process told the engine to stop (where it did:
        ``stop_lines``), joined; None before readiness or where a log cannot be read (fail closed)."""
        if self.ready_lines is None:
            return None
        logs = []
        for t in self._tees:
            try:
                lines = t.path.read_text(encoding="utf-8", errors="replace").splitlines()
            except OSError:
                return None
            end = self.stop_lines.get(t.path.name) if self.stop_lines is not None else None
            logs.append("\n".join(lines[self.ready_lines.get(t.path.name, 0) : end]))
        return logs

    def traceback_after_ready(self) -> bool:
        """Whether a log shows a Python traceback after readiness (``PYTHON_TRACEBACK``): the engine failed
        at runtime, whatever ended it. True also where a log cannot be read (fail closed)."""
        if self.ready_lines is None:
            return True
        for t in self._tees:
            try:
                lines = t.path.read_text(encoding="utf-8", errors="replace").splitlines()
            except OSError:
                return True
            if any(
                PYTHON_TRACEBACK in line and not echoed_line(line)
                for line in lines[self.ready_lines.get(t.path.name, 0) :]
            ):
                return True
        return False

    def stopped_at(self) -> Any:
        """When a stop reached the engine, as this process saw it: the earlier of its leader's end
        (``exited_at``) and its first stop marker after readiness (``stop_marker_at``); None: neither."""
        times = [t for t in (self.exited_at, self.stop_marker_at) if t is not None]
        return min(times) if times else None

    def _note_suspended(self) -> None:
        """Note the engine's processes (the leader and every process carrying the launch's mark) that are
        suspended from outside right now (``stopped_processes``), once, before the collector stops them: a
        probe or request that got no answer from a stopped engine is no hang of the engine."""
        if self.proc is None or self.suspended:
            return
        pids = sorted({self.proc.pid, *marked_processes(self.launch_id)})
        found = [{"pid": pid, "cmdline": cmdline(pid)} for pid in stopped_processes(pids)]
        if found:
            with self._lock:
                self.suspended = found

    def stop(self, reason: str) -> None:
        """Stop the whole process group: SIGTERM, a grace period, then SIGKILL; then any process of the
        engine that left the group. Idempotent. An engine already shutting down when asked (its logs show a
        stop marker after readiness: stopped from outside) is given the grace period to end on its own
        first: its end is then its own (``exited``, with the signal that ended it), not this stop's."""
        if self.proc is not None and self.proc.poll() is None:
            self._check_processes()  # one of the engine's processes that ended before this stop
            self._note_suspended()
        if self.proc is not None and self.proc.poll() is None and self._stopping_already():
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=self.spec.grace_seconds)
        drained = False
        if self.proc is not None and self.proc.poll() is None and self.stop_lines is None:
            drained = self._drain()
        with self._lock:
            if self.stop_reason is None:
                if self.proc is not None and self.proc.poll() is not None:
                    self._engine_ended()
                else:
                    self.stop_reason = reason
        self._stopped.set()
        if self.proc is None or self.pgid is None:
            return
        if self.proc.poll() is None:
            # where each log stood when this process told the engine to stop: what follows is its shutdown
            # (the policy reads the run's faults up to there, then up to the first stop marker)
            with self._lock:
                if self.stop_lines is None:
                    self.stop_lines = {t.path.name: t.count() for t in self._tees}
                    self.stop_bytes = {t.path.name: t.size() for t in self._tees}
                    # only a drain that completed says so: otherwise the policy reads on to a stop marker
                    self.stop_drained = drained
                if self.stop_sent_at is None:
                    self.stop_sent_at = now_utc()
            self._signal_group(signal.SIGTERM)
            try:
                self.proc.wait(timeout=self.spec.grace_seconds)
            except subprocess.TimeoutExpired:
                self.stop_escalated = True
                self._signal_group(signal.SIGKILL)
                self.proc.wait()
        # the leader is gone; members of its group may not be (vLLM's EngineCore, workers)
        deadline = time.monotonic() + self.spec.grace_seconds
        sent_term = False
        while self._group_alive():
            if not sent_term:
                self._signal_group(signal.SIGTERM)
                sent_term = True
            if time.monotonic() > deadline:
                self.stop_escalated = True
                self._signal_group(signal.SIGKILL)
                break
            time.sleep(0.1)
        # a process of the engine that left its group (setsid) is not reached by the group's signals
        found = stop_marked(self.launch_id, self.spec.grace_seconds)
        with self._lock:
            known = {p["pid"] for p in self.survivors}
            self.survivors.extend(p for p in found if p["pid"] not in known)
        self._release_keeper()
        for t in self._tees:
            t.join(timeout=5)
        if self._exit_watch is not None:  # the leader is reaped: its end is recorded at once
            self._exit_watch.join(timeout=1)
        self.ended_at = now_utc()

    def _signal_group(self, sig: signal.Signals) -> None:
        assert self.pgid is not None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, sig)

    def _group_alive(self) -> bool:
        assert self.pgid is not None
        try:
            os.killpg(self.pgid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return group_alive(self.pgid)

    # --- results --------------------------------------------------------------------------------

    @property
    def exit_status(self) -> tuple[int | None, int | None]:
        """(exit code, terminating signal) of the engine's leader process."""
        if self.proc is None or self.proc.returncode is None:
            return None, None
        rc = self.proc.returncode
        return (rc, None) if rc >= 0 else (None, -rc)

    def log_text(self) -> str:
        parts = []
        for p in (self.stdout_path, self.stderr_path):
            with contextlib.suppress(OSError):
                parts.append(p.read_text(encoding="utf-8", errors="replace"))
        return "\n".join(parts)

    @property
    def failed(self) -> bool:
        return (
            self.stop_reason in ENGINE_ENDED
            or self.failure_observed is not None
            or bool(self.port_conflict)
            or bool(self.readiness_refused)
            or bool(self.suspended)
            or self.process_ended_line() is not None
        )

    def classification(self) -> Classification:
        """The failure signature; status-only signatures count only when the engine itself ended the run."""
        if not self.failed:
            return Classification(None)
        code, sig = self.exit_status
        outcome = RunOutcome(
            ready=self.ready_state is not None,
            exit_code=code,
            signal=sig,
            lease_expired=self.lease_expired,
            request_failed=self.failure_observed is not None,
            stop_marked=self._stop_marked(),
        )
        sigs = self.signatures
        if self.stop_reason not in ENGINE_ENDED:
            # the engine is still running: only log patterns and the observed request failure apply
            sigs = [s for s in sigs if s.patterns or s.request_failed]
        text = self.log_text()
        if self.port_conflict:  # the collector's own finding, after the engine's logs
            text += "\n" + self.port_conflict
        if self.readiness_refused:  # the same: the engine's refusal, in its words
            text += "\n" + self.readiness_refused
        if self.suspended:  # the collector's own finding: someone else held the engine stopped
            text += "\n" + self.suspended_line()
        killed = self.sigkill_line()
        if killed:  # the collector's own finding: who sent the SIGKILL, by the kernel log
            text += "\n" + killed
        ended = self.process_ended_line()
        if ended:  # the collector's own finding: a process of the engine ended while its leader ran on
            text += "\n" + ended
        oom, crashed = self.process_end_lines()
        if oom:  # the kernel log: the OOM killer killed a process of the engine — read instead of its death
            text += "\n" + oom
            sigs = [s for s in sigs if s.id not in PROCESS_DEATH_READINGS]
        if crashed:  # the kernel log: a process of the engine crashed
            text += "\n" + crashed
        # the texts the collector handed the engine (its command as recorded: the model's path, a served
        # name) are the operator's words wherever the engine quotes them (ledger.signatures._within_given);
        # the recorded (redacted) command, so the policy engine reads the same values from the entry
        result = classify(text, outcome, sigs, given=redact_command(self.spec.command))
        if result.signature == "request-failed" and self.failure_observed:
            result = Classification(
                result.signature, result.title, self.failure_observed, result.matched, result.failure_class
            )
        return result

    def sigkill_line(self) -> str | None:
        """The ``KILLED`` line where the engine's leader died by SIGKILL (signal 9, or exit status 137
        through a shell) on its own — before the collector sent it a stop (``stop_sent_at``), no lease run
        out (the lease keeper's kill is ``lease-expired``) — read from the kernel log once, when first
        asked; None for any other end. Redacted as the engine's command is."""
        with self._lock:
            if self._sigkill_read:
                return self.sigkill_cause
            reason, sent = self.stop_reason, self.stop_sent_at
        if self.proc is None or self.proc.returncode is None or reason is None:
            return None  # not ended yet: read once it has
        with self._lock:
            self._sigkill_read = True
        code, sig = self.exit_status
        if reason != "exited" or sent is not None or self.lease_expired or not (sig == 9 or code == 137):
            return None
        until = self.exited_at or self.ended_at or now_utc()
        cause = kernel.sigkill_cause(self.proc.pid, self.started_at, until)
        line = KILLED[cause.cause].format(source=cause.source, text=cause.text, pid=self.proc.pid)
        line = self.redactor().text(line)[0]
        with self._lock:
            self.sigkill_cause = line
        return line

    def process_end_lines(self) -> tuple[str | None, str | None]:
        """(``PROCESS_OOM_KILLED`` line, ``PROCESS_CRASHED`` line) for a failed run's processes of the engine
        at readiness (``ready_processes``, those seen gone while its leader ran on first), as the kernel log
        shows each ended (``kernel.process_end``): read once, after the leader has ended, over the time from
        readiness to when the collector saw it gone (``seen_gone_at``), else to the leader's end or the
        collector's stop, whichever came first. (None, None) before then, for a run without such processes
        and where the kernel log shows neither. Redacted as the engine's command is."""
        with self._lock:
            if self._process_end_lines is not None:
                return self._process_end_lines
            processes, ended = list(self.ready_processes), list(self.processes_ended)
            since, exited, sent = self.ready_at or self.started_at, self.exited_at, self.stop_sent_at
        if self.proc is None or self.proc.returncode is None or not processes:
            return None, None
        with self._lock:
            self._process_end_lines = (None, None)
        ends = [t for t in (exited, sent) if t is not None]
        by_end = min(ends) if ends else (self.ended_at or now_utc())
        seen = {p["pid"]: p["seen_gone_at"] for p in ended}
        order = sorted(processes, key=lambda p: (p["pid"] not in seen, p["pid"]))
        read = kernel.read_kernel_log(since - kernel.KILL_WINDOW_SLACK)
        red = self.redactor()
        oom: str | None = None
        crashed: str | None = None
        found: list[dict[str, Any]] = []
        for p in order:
            until = by_end
            if p["pid"] in seen:
                with contextlib.suppress(LedgerError):
                    until = min(by_end, parse_time(seen[p["pid"]]))
            end = kernel.process_end(p["pid"], since, until, read)
            found.append({"pid": end.pid, "cause": end.cause, "text": end.text, "source": end.source})
            gone = (
                f"seen gone at {seen[p['pid']]} while the leader ran on"
                if p["pid"] in seen
                else "gone by the leader's end or the collector's stop"
            )
            fields = {
                "source": end.source,
                "text": end.text,
                "pid": end.pid,
                "cmdline": str(p["cmdline"])[:200],
                "counted": p["counted"] or "a helper",
                "gone": gone,
                "leader": self.proc.pid,
            }
            if end.cause == "oom-killer" and oom is None:
                oom = red.text(PROCESS_OOM_KILLED.format(**fields))[0]
            elif end.cause == "crashed" and crashed is None:
                crashed = red.text(PROCESS_CRASHED.format(**fields))[0]
        with self._lock:
            self.process_ends = [{**f, "text": red.text(f["text"])[0]} for f in found]
            self._process_end_lines = (oom, crashed)
        return oom, crashed

    def process_ended_line(self) -> str | None:
        """The ``PROCESS_ENDED`` line for the engine's processes seen gone while its leader ran on
        (``processes_ended``), secrets of their commands redacted; None for none, and where the leader then
        ended on its own (``stop_reason`` ``exited``): its end decides, as for an engine of one process."""
        with self._lock:
            ended, reason = list(self.processes_ended), self.stop_reason
        if not ended or reason == "exited":
            return None
        red = self.redactor()
        return PROCESS_ENDED.format(
            processes=", ".join(
                f"pid {p['pid']} ({red.text(str(p['cmdline']))[0][:200]}; {p['counted']}) gone at "
                f"{p['seen_gone_at']}"
                for p in ended
            )
        )

    def suspended_line(self) -> str:
        """The ``SUSPENDED`` line for the processes found suspended (secrets of their commands redacted)."""
        red = self.redactor()
        return SUSPENDED.format(
            processes=", ".join(
                f"pid {sv['pid']} ({red.text(str(sv['cmdline']))[0]})" for sv in self.suspended
            )
        )

    def payload(self) -> dict[str, Any]:
        """The ``engine.launch`` payload (logs attached separately)."""
        code, sig = self.exit_status
        c = self.classification()
        with self._lock:
            phases = dict(self._phases.phases)
        details: dict[str, Any] = {
            "attempt_name": self.spec.attempt_name,
            "stop_reason": self.stop_reason,
            "stop_escalated_to_sigkill": self.stop_escalated,
            "pid": self.proc.pid if self.proc else None,
            "base_url": self.spec.base_url,
            "grace_seconds": self.spec.grace_seconds,
            "duration_s": round(self.elapsed(), 3),
        }
        if self.proc is not None and self.proc.returncode is not None:
            details["returncode"] = self.proc.returncode
        if self.stop_lines is not None:
            details["stop_lines"] = dict(self.stop_lines)
            if self.stop_bytes is not None:
                details["stop_bytes"] = dict(self.stop_bytes)
            if self.stop_drained:
                details["stop_drained"] = True
        if self.ready_lines is not None:
            details["ready_lines"] = dict(self.ready_lines)
        if self.exited_at is not None:
            details["exited_at"] = format_time(self.exited_at)
        if self.stop_marker_at is not None:
            details["stop_marker_at"] = format_time(self.stop_marker_at)
        if self.cut_line_at is not None:
            details["cut_line_at"] = format_time(self.cut_line_at)
        if self.stop_sent_at is not None:
            details["stop_sent_at"] = format_time(self.stop_sent_at)
        if self.before_stop_note is not None:
            details["before_stop"] = self.before_stop_note
        details["launch_id"] = self.launch_id
        if self.port is not None:
            details["port"] = self.port
        if self.port_conflict:
            details["port_conflict"] = self.port_conflict
        if self.readiness_refused:
            details["readiness_refused"] = self.redactor().text(self.readiness_refused)[0]
        if self.suspended:
            details["suspended_from_outside"] = self.suspended_line()
        if self.sigkill_cause is not None:  # read by ``classification`` above
            details["sigkill_cause"] = self.sigkill_cause
        if self.process_ends:  # read by ``classification`` above: how the kernel log shows each ended
            details["engine_process_ends"] = list(self.process_ends)
        if self.ready_state is not None:
            details["ready_server"] = self.ready_state.server
        if c.signature:
            details["signatures_matched"] = c.matched
            details["failure_title"] = c.title
            details["failure_class"] = c.failure_class
        red = self.redactor()
        if self.failure_observed:
            details["failure_observed"] = red.text(self.failure_observed)[0]
        if self.ready_state is not None:  # the engine's processes at readiness, and those seen gone after
            details["engine_processes"] = [
                {**p, "cmdline": red.text(str(p["cmdline"]))[0]} for p in self.ready_processes
            ]
            details["engine_processes_ended"] = [
                {**p, "cmdline": red.text(str(p["cmdline"]))[0]} for p in self.processes_ended
            ]
        if self.ended_at is not None:  # checked once the run was stopped: none, or each one found
            details["survivors"] = [
                {"pid": sv["pid"], "cmdline": red.text(str(sv["cmdline"]))[0]} for sv in self.survivors
            ]
        env = {**relevant_env(os.environ), **redact_env(self.spec.env)}
        return {
            "engine": self.spec.engine,
            "command": redact_command(self.spec.command),
            "attempt": self.spec.attempt,
            "bindings": dict(self.spec.bindings),
            "env": env,
            "lease_seconds": self.spec.lease_seconds,
            "started_at": format_time(self.started_at),
            "ended_at": format_time(self.ended_at or now_utc()),
            "ready": self.ready_state is not None,
            "ready_endpoint": self.ready_state.endpoint if self.ready_state else None,
            "time_to_ready_s": self.time_to_ready_s,
            "phases": phases,
            "exit_code": code,
            "signal": sig,
            "lease_expired": self.lease_expired,
            "failure_signature": c.signature,
            "failure_detail": red.text(c.detail)[0] if c.detail else c.detail,
            "details": details,
        }

    def redactor(self) -> Redactor:
        """Redacts what the engine was handed (its inherited environment too) and secret-shaped text."""
        return Redactor.from_sources(launch_env(self.spec.env), self.spec.command)

    def log_files(self) -> list[tuple[str, Path, int]]:
        """(artifact name, path to store, redactions) of both logs, secrets redacted in a copy if needed."""
        red = self.redactor()
        out: list[tuple[str, Path, int]] = []
        for name, p in (("stdout.log", self.stdout_path), ("stderr.log", self.stderr_path)):
            if not p.exists():
                p.write_bytes(b"")
            text = p.read_text(encoding="utf-8", errors="replace")
            clean, n = red.text(text)
            if n:
                q = p.with_name(p.stem + ".redacted.log")
                q.write_text(clean, encoding="utf-8")
                out.append((name, q, n))
            else:
                out.append((name, p, 0))
        return out


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None
