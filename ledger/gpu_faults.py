"""The GPU-fault catalogue (``collectors/gpu_faults.toml``): what a kernel-log GPU event means, as data.

The kernel collector classifies the events it records with it and cites it by digest; the policy engine
classifies them again from the same file (``e.derived.gpu_events``), never trusting an entry's own class.
An Xid code or event kind the catalogue lacks is class ``unknown`` ("contact support"): kept, never dropped,
and policies fail it closed. The kernel's OOM killer is read with the same patterns (class ``host-memory``:
the host ran out of memory and a process was killed by SIGKILL — the kernel log is the only record of why):
which process and pid, and whether a memory cgroup's limit or the whole host ran out, are read from the
recorded line (``read_oom``), never from what the entry claims.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import lru_cache
from pathlib import Path
from typing import Any

from ledger.errors import ConfigError
from ledger.hashing import blake3_hex

__all__ = [
    "DEFAULT_CATALOGUE",
    "EVENT_PATTERNS",
    "HOST_WIDE_KINDS",
    "MAX_LINE",
    "UNRECOGNISED",
    "Catalogue",
    "EventRow",
    "GpuEventClass",
    "OomFact",
    "XidRow",
    "classify_events",
    "host_wide",
    "line_kind",
    "load_catalogue",
    "read_oom",
]

# the collectors' data file; the policy reads it by path (as ledger.signatures reads signatures.toml)
DEFAULT_CATALOGUE = Path(__file__).parent / "collectors" / "gpu_faults.toml"


class GpuEventClass(StrEnum):
    """The closed set of GPU event classes; the catalogue's ``[classes]`` table must name exactly these."""

    GPU_FAULT = "gpu-fault"
    MEMORY_ECC = "memory-ecc"
    INTERCONNECT = "interconnect"
    DRIVER = "driver"
    APPLICATION = "application"
    THERMAL = "thermal"
    HOST_MEMORY = "host-memory"  # the kernel's OOM killer: the host (or a memory cgroup) ran out of memory
    INFORMATIONAL = "informational"
    UNKNOWN = "unknown"  # not in the catalogue: contact support; no row may name it


_BUCKET = re.compile(r"^[A-Za-z0-9_/ ();:.,-]{1,120}$")
_KIND = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
# an NVRM Xid line of a kernel log, as the driver prints it: "NVRM: Xid (PCI:0000:01:00): 79, pid=…"
_XID_LINE = re.compile(r"NVRM: Xid \([^)]*\): (\d{1,6})\b")
# (event kind, pattern): the first matching pattern names a kernel log line's event. The collector parses
# lines with these; the policy engine reads a recorded event's line again with them (``Catalogue.classify``)
# the event kind of a GPU error line no other pattern knows: the catalogue lists no such kind, so it is
# class ``unknown`` (contact support) and fails closed
UNRECOGNISED = "gpu-error-unrecognised"
# The kernel's OOM killer (mm/oom_kill.c, mm/memcontrol.c), one kill in up to four lines:
#   "python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0"
#   "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0-1,global_oom,
#    task_memcg=/user.slice/user-1000.slice,task=python3,pid=12345,uid=1000"   (key=value pairs, as one line)
#   "Out of memory: Killed process 12345 (python3) total-vm:…kB, anon-rss:…kB, …, UID:1000 …"
#    ("Memory cgroup out of memory: Killed process …" for a cgroup's limit; older kernels: "Out of memory:
#    Kill process 12345 (python3) score 912 or sacrifice child", then "Killed process 12345 (python3) …")
#   "oom_reaper: reaped process 12345 (python3), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB"
# They come first: their kernel-structured text ("Killed process <pid> (", "oom-kill:<key>=") cannot be
# taken for a GPU line, while a GPU phrase can be a killed process's name.
_COMM = r"\((?P<process>[^\n]{0,16}?)\)(?=[\s,:]|$)"  # a task's comm: at most 15 characters, may hold spaces
OOM_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "oom-kill",
        re.compile(
            r"(?:(?P<scope>Memory cgroup out of memory|Out of memory(?: \([^)\n]{0,64}\))?): )?"
            r"\bKill(?:ed)? process (?P<pid>\d{1,10}) " + _COMM
        ),
    ),
    ("oom-kill-context", re.compile(r"\boom-kill:(?P<fields>[a-z_]{1,32}=.*)$")),
    ("oom-killer-invoked", re.compile(r"(?:(?:^|\s)(?P<process>\S{1,64}) )?invoked oom-killer\b")),
    ("oom-reaped", re.compile(r"\boom_reaper: reaped process (?P<pid>\d{1,10}) " + _COMM)),
)
# events of the whole host, not of one GPU: a launch's GPUs never narrow them away
HOST_WIDE_KINDS = frozenset(kind for kind, _ in OOM_PATTERNS)
EVENT_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    *OOM_PATTERNS,
    ("nvrm-xid", re.compile(r"NVRM: Xid \((?P<device>[^)]*)\): (?:(?P<xid>\d{1,6})\b)?")),
    ("gpu-fell-off-bus", re.compile(r"NVRM: GPU (?:at )?(?P<device>\S+?):? (?:GPU )?has fallen off the bus")),
    ("amdgpu-ring-timeout", re.compile(r"ring (?P<ring>\S+) timeout")),
    ("gpu-reset-begin", re.compile(r"GPU reset begin", re.IGNORECASE)),
    ("gpu-reset-succeeded", re.compile(r"GPU reset(\(\d+\))? succeeded", re.IGNORECASE)),
    ("gpu-reset-failed", re.compile(r"GPU reset(\(\d+\))? failed|GPU Recovery Failed", re.IGNORECASE)),
    ("vram-lost", re.compile(r"VRAM is lost", re.IGNORECASE)),
    ("mes-unrecoverable", re.compile(r"MES might be in unrecoverable state", re.IGNORECASE)),
    (
        "mes-failure",
        re.compile(
            r"\bMES failed|mes_v\d+_\d+\S*.*\*ERROR\*|failed to (remove|add) hardware queue "
            r"(from|to) MES",
            re.IGNORECASE,
        ),
    ),
    ("queue-eviction-failed", re.compile(r"Failed to evict (process )?queues?", re.IGNORECASE)),
    ("gpu-page-fault", re.compile(r"\[(gfxhub|mmhub)\d*\] (no-retry )?page fault|GPU fault detected")),
    ("gpu-hang", re.compile(r"GPU hang|HW Exception by GPU", re.IGNORECASE)),
    (
        "gpu-init-failed",
        re.compile(r"RmInitAdapter failed|NVRM: .*failed to (?:initiali[sz]e|allocate) .*GPU"),
    ),
    ("gpu-lost", re.compile(r"GPU (?:is|has been) lost|\bGPU lost\b", re.IGNORECASE)),
    (
        "uncorrectable-memory-error",
        re.compile(
            r"uncorrectable (?:hardware |ECC |memory )?errors?|\bRAS\b.*\b(?:ECC|uncorrect)", re.IGNORECASE
        ),
    ),
    (
        "driver-module-unsigned",
        re.compile(
            r"(?:nvidia|amdgpu)\w*: module verification failed: signature and/or required key missing"
        ),
    ),
    # last: a line about the GPU that says something failed, which no kind above knows (kept as unknown)
    (
        UNRECOGNISED,
        re.compile(
            r"(?i)(?=.*(?:NVRM|amdgpu|\bdrm\b|\[drm|\bkfd\b|nvidia|\bMES\b|\bGPU\b))"
            r".*\b(?:error|fail(?:ed|ure|s)?|lost|fault|timeout|timed out|uncorrectable|unrecoverable|hang|"
            r"critical|corrupt\w*|panic)\b"
        ),
    ),
)
MAX_LINE = 64 * 1024  # a longer "line" is not a kernel message; only its start is looked at


def line_kind(message: str) -> str | None:
    """The event kind the first matching ``EVENT_PATTERNS`` entry gives a kernel log line, or None."""
    text = message[:MAX_LINE]
    return next((kind for kind, pat in EVENT_PATTERNS if pat.search(text)), None)


def host_wide(event: Mapping[str, Any]) -> bool:
    """Whether an event is of the whole host (the OOM killer), by its line or by the kind it records:
    either says so, and no GPU a launch was given narrows it away."""
    message = event.get("message")
    seen = line_kind(message) if isinstance(message, str) else None
    return seen in HOST_WIDE_KINDS or event.get("kind") in HOST_WIDE_KINDS


# oom-kill:constraint=…: which memory ran out (the kernel's enum oom_constraint)
_CONSTRAINT_SCOPE = {
    "CONSTRAINT_NONE": "global",
    "CONSTRAINT_MEMCG": "cgroup",
    "CONSTRAINT_CPUSET": "cpuset",
    "CONSTRAINT_MEMORY_POLICY": "mempolicy",
}
_FIELD = re.compile(r"^[a-z_]{1,32}(?:=|$)")


@dataclass(frozen=True, slots=True)
class OomFact:
    """What an OOM-killer line says: the process it names (the victim; for ``oom-killer-invoked`` the task
    that ran out), its pid where the line prints one, and which memory ran out — ``global`` (the host's),
    ``cgroup`` (a memory cgroup's limit, ``cgroup`` its path where printed), ``cpuset``, ``mempolicy`` —
    where the line says; None for what it does not say."""

    kind: str
    process: str | None
    pid: int | None
    scope: str | None
    cgroup: str | None = None

    def summary(self) -> str:
        who = f"process {self.pid if self.pid is not None else '?'} ({self.process or '?'})"
        cgroup = f"memory cgroup {self.cgroup}" if self.cgroup else "a memory cgroup"
        where = {
            "global": "the host ran out of memory",
            "cgroup": f"{cgroup} hit its limit",
            "cpuset": "its cpuset's memory ran out",
            "mempolicy": "its memory policy's nodes ran out",
        }.get(self.scope or "", "out of memory")
        if self.kind == "oom-killer-invoked":
            return f"{self.process or '?'} invoked the OOM killer" + (f" ({where})" if self.scope else "")
        if self.kind == "oom-reaped":
            return f"the OOM reaper reaped {who}, killed by the OOM killer"
        return f"the OOM killer killed {who}: {where}"


def _context_fields(text: str) -> dict[str, str]:
    """The ``key=value`` pairs (and bare flags, ``global_oom``) of an ``oom-kill:`` line, in any order; a
    piece that is neither continues the value before it (a nodemask ``0-1,3``)."""
    fields: dict[str, str] = {}
    last: str | None = None
    for piece in text.split(","):
        if _FIELD.match(piece):
            key, _, value = piece.partition("=")
            fields[key] = value
            last = key
        elif last is not None:
            fields[last] += "," + piece
    return fields


def read_oom(message: str) -> OomFact | None:
    """The OOM-killer facts of a kernel log line, read from the line itself; None where it is no such line
    (the first matching ``EVENT_PATTERNS`` kind decides, as for every event)."""
    text = message[:MAX_LINE]
    kind = line_kind(text)
    pattern = dict(OOM_PATTERNS).get(kind) if kind is not None else None
    m = pattern.search(text) if pattern is not None else None
    if kind is None or m is None:
        return None
    groups = m.groupdict()
    pid = int(groups["pid"]) if groups.get("pid") else None
    if kind == "oom-kill-context":
        fields = _context_fields(groups["fields"])
        constraint = fields.get("constraint", "")
        scope = _CONSTRAINT_SCOPE.get(constraint)
        if scope is None and "oom_memcg" in fields:
            scope = "cgroup"
        elif scope is None and "global_oom" in fields:
            scope = "global"
        cgroup = fields.get("oom_memcg") or (fields.get("task_memcg") if scope == "cgroup" else None)
        pid_text = fields.get("pid", "").strip()
        pid = int(pid_text) if pid_text.isascii() and pid_text.isdigit() and len(pid_text) <= 10 else None
        # a task's comm is at most 15 characters, a cgroup path a path: a longer text is cut, never echoed
        return OomFact(kind, fields.get("task", "")[:16] or None, pid, scope, (cgroup or "")[:256] or None)
    said = groups.get("scope") or ""
    scope = "cgroup" if said.startswith("Memory cgroup") else "global" if said else None
    return OomFact(kind, (groups.get("process") or "")[:16] or None, pid, scope)


@dataclass(frozen=True, slots=True)
class XidRow:
    code: int
    mnemonic: str
    description: str
    immediate: str  # NVIDIA's resolution bucket, immediate action
    investigatory: str  # NVIDIA's resolution bucket, investigatory action
    fault_class: GpuEventClass
    xid154: str | None = None  # "Xid 154 linkage": the driver from which an Xid 154 reports its action


@dataclass(frozen=True, slots=True)
class EventRow:
    kind: str
    description: str
    fault_class: GpuEventClass
    same_as_xid: int | None = None


@dataclass(frozen=True)
class Catalogue:
    name: str
    version: int
    digest: str  # blake3:<hex> of the file bytes
    path: Path
    xids: dict[int, XidRow]
    events: dict[str, EventRow]
    xid154_pattern: re.Pattern[str]
    recovery_actions: dict[int, str] = field(default_factory=dict)

    def cite(self) -> dict[str, Any]:
        """What a ``kernel.log`` payload records of the catalogue it was classified with."""
        return {"name": self.name, "version": self.version, "digest": self.digest}

    def recovery_action(self, message: str) -> str | None:
        """The action an Xid 154 line changes to (``Node Reboot Required``); an unlisted value is named so."""
        m = self.xid154_pattern.search(message)
        if m is None:
            return None
        value = int(m.group("to"), 16)
        return self.recovery_actions.get(value, f"unknown recovery action 0x{value:x}")

    def classify(self, event: Mapping[str, Any]) -> tuple[GpuEventClass, str]:
        """(class, code) of one event: ``xid:<n>`` for NVRM Xid lines, else the event kind.

        The line the event was parsed from (``message``) is read again: where it is an NVRM Xid line, its
        code must be the event's — an Xid line recorded under another kind or another code (Xid 79 as
        Xid 154, or as a completed reset) is ``unknown``, never the class of what it claims."""
        kind = event.get("kind")
        message = event.get("message")
        # the line says what it is: a GPU fault recorded under a harmless kind (a fall off the bus recorded
        # as a completed reset) is ``unknown``, never the class of what it claims
        seen = line_kind(message) if isinstance(message, str) else None
        if seen is not None and seen != kind:
            return GpuEventClass.UNKNOWN, f"{seen} (recorded as {kind})"
        line = _XID_LINE.search(message) if isinstance(message, str) else None
        if line is not None:
            said = int(line.group(1))
            if kind != "nvrm-xid" or event.get("xid") != said or type(event.get("xid")) is not int:
                return GpuEventClass.UNKNOWN, f"xid:{said} (recorded as {kind} {event.get('xid')})"
        if kind == "nvrm-xid":
            xid = event.get("xid")
            if type(xid) is not int:
                return GpuEventClass.UNKNOWN, "xid:?"
            row = self.xids.get(xid)
            return (row.fault_class if row else GpuEventClass.UNKNOWN), f"xid:{xid}"
        if not isinstance(kind, str):
            return GpuEventClass.UNKNOWN, "?"
        ev = self.events.get(kind)
        return (ev.fault_class if ev else GpuEventClass.UNKNOWN), kind


def classify_events(events: Iterable[Mapping[str, Any]], catalogue: Catalogue) -> list[dict[str, Any]]:
    """One fact per event, in order: ``fault_class``, ``code``, and for an Xid 154 its ``recovery_action``
    and ``related_xid`` (the latest earlier Xid of the same device whose row has an Xid 154 linkage); for
    an OOM-killer line the ``process``, ``pid`` and ``oom_scope`` it names and a ``summary`` of it, read
    from the line (``read_oom``; None for every other event and for what the line does not say)."""
    out: list[dict[str, Any]] = []
    last_linked: dict[Any, int] = {}
    for ev in events:
        cls, code = catalogue.classify(ev)
        message = ev.get("message")
        oom = read_oom(message) if isinstance(message, str) else None
        fact: dict[str, Any] = {
            "fault_class": str(cls),
            "code": code,
            "recovery_action": None,
            "related_xid": None,
            "process": oom.process if oom else None,
            "pid": oom.pid if oom else None,
            "oom_scope": oom.scope if oom else None,
            "summary": oom.summary() if oom else None,
        }
        xid = ev.get("xid")
        if ev.get("kind") == "nvrm-xid" and type(xid) is int:
            if xid == 154:
                action = catalogue.recovery_action(message) if isinstance(message, str) else None
                # an Xid 154 whose action cannot be read is not "None": it is unknown
                fact["recovery_action"] = action or "unreadable recovery action"
                fact["related_xid"] = last_linked.get(ev.get("device"))
            else:
                row = catalogue.xids.get(xid)
                if row is not None and row.xid154:
                    last_linked[ev.get("device")] = xid
        out.append(fact)
    return out


def _row_class(raw: Mapping[str, Any], where: str) -> GpuEventClass:
    cls = raw.get("class")
    allowed = [c.value for c in GpuEventClass if c is not GpuEventClass.UNKNOWN]
    if cls not in allowed:
        raise ConfigError(f"{where}: class {cls!r} is not one of {', '.join(allowed)}")
    return GpuEventClass(cls)


def _check_fields(raw: Mapping[str, Any], known: set[str], where: str) -> None:
    unknown = set(raw) - known
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")


def _text(raw: Mapping[str, Any], key: str, where: str, pattern: re.Pattern[str] | None = None) -> str:
    v = raw.get(key)
    if not isinstance(v, str) or not v or (pattern is not None and not pattern.fullmatch(v)):
        raise ConfigError(f"{where}: `{key}` must be non-empty text")
    return v


def _parse(data: dict[str, Any], p: Path, digest: str) -> Catalogue:
    _check_fields(data, {"catalogue", "classes", "xid154", "event", "xid"}, str(p))
    head = data.get("catalogue")
    if not isinstance(head, dict):
        raise ConfigError(f"{p}: no [catalogue] table")
    _check_fields(head, {"name", "version", "unknown_class", "unknown_action"}, f"{p} [catalogue]")
    version = head.get("version")
    if type(version) is not int or version < 1:
        raise ConfigError(f"{p} [catalogue]: version must be a positive integer")
    if head.get("unknown_class") != GpuEventClass.UNKNOWN.value:
        raise ConfigError(f"{p} [catalogue]: unknown_class must be {GpuEventClass.UNKNOWN.value!r}")
    classes = data.get("classes")
    if not isinstance(classes, dict) or set(classes) != {c.value for c in GpuEventClass}:
        raise ConfigError(
            f"{p} [classes]: must name exactly the classes {', '.join(c.value for c in GpuEventClass)}"
        )
    xids: dict[int, XidRow] = {}
    for i, raw in enumerate(data.get("xid", [])):
        where = f"{p} xid #{i + 1}"
        _check_fields(
            raw, {"code", "mnemonic", "description", "immediate", "investigatory", "class", "xid154"}, where
        )
        code = raw.get("code")
        if type(code) is not int or not 0 < code < 1_000_000:
            raise ConfigError(f"{where}: code must be a positive integer")
        if code in xids:
            raise ConfigError(f"{where}: duplicate Xid code {code}")
        link = raw.get("xid154")
        if link is not None and (not isinstance(link, str) or not link):
            raise ConfigError(f"{where} (Xid {code}): xid154 must be text")
        xids[code] = XidRow(
            code=code,
            mnemonic=_text(raw, "mnemonic", where),
            description=_text(raw, "description", where),
            immediate=_text(raw, "immediate", where, _BUCKET),
            investigatory=_text(raw, "investigatory", where, _BUCKET),
            fault_class=_row_class(raw, f"{where} (Xid {code})"),
            xid154=link,
        )
    if not xids:
        raise ConfigError(f"{p}: no [[xid]] rows")
    events: dict[str, EventRow] = {}
    for i, raw in enumerate(data.get("event", [])):
        where = f"{p} event #{i + 1}"
        _check_fields(raw, {"kind", "description", "class", "same_as_xid"}, where)
        kind = _text(raw, "kind", where, _KIND)
        if kind in events or kind == "nvrm-xid":
            raise ConfigError(f"{where}: duplicate or reserved event kind {kind!r}")
        same = raw.get("same_as_xid")
        if same is not None and same not in xids:
            raise ConfigError(f"{where} ({kind}): same_as_xid {same!r} is not a listed Xid")
        events[kind] = EventRow(kind, _text(raw, "description", where), _row_class(raw, where), same)
    x154 = data.get("xid154")
    if not isinstance(x154, dict):
        raise ConfigError(f"{p}: no [xid154] table")
    _check_fields(x154, {"pattern", "actions"}, f"{p} [xid154]")
    try:
        pattern = re.compile(_text(x154, "pattern", f"{p} [xid154]"))
    except re.error as e:
        raise ConfigError(f"{p} [xid154]: bad pattern: {e}") from e
    if "to" not in pattern.groupindex:
        raise ConfigError(f"{p} [xid154]: the pattern needs a (?P<to>…) group")
    actions: dict[int, str] = {}
    for key, value in (x154.get("actions") or {}).items():
        if not re.fullmatch(r"0x[0-9a-fA-F]{1,8}", key) or not isinstance(value, str) or not value:
            raise ConfigError(f"{p} [xid154.actions]: {key!r} must be 0x<hex> = text")
        actions[int(key, 16)] = value
    return Catalogue(
        name=_text(head, "name", f"{p} [catalogue]"),
        version=version,
        digest=digest,
        path=p,
        xids=xids,
        events=events,
        xid154_pattern=pattern,
        recovery_actions=actions,
    )


@lru_cache(maxsize=8)
def _load(path: str, mtime_ns: int, size: int) -> Catalogue:
    p = Path(path)
    try:
        raw = p.read_bytes()
        data = tomllib.loads(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"cannot read GPU-fault catalogue {p}: {e}") from e
    return _parse(data, p, f"blake3:{blake3_hex(raw)}")


def load_catalogue(path: Path | None = None) -> Catalogue:
    """The catalogue at ``path`` (default: the shipped one), parsed once per file version."""
    p = path or DEFAULT_CATALOGUE
    try:
        st = p.stat()
    except OSError as e:
        raise ConfigError(f"cannot read GPU-fault catalogue {p}: {e.strerror}") from e
    return _load(str(p), st.st_mtime_ns, st.st_size)
