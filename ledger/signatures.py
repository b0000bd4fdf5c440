"""Failure signatures of engine runs, loaded from a data file of patterns (``signatures.toml``)."""

from __future__ import annotations

import json
import math
import re
import signal
import tomllib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from functools import lru_cache
from pathlib import Path
from typing import Any

from ledger.answers import REFUSAL_CONTEXT, REFUSALS, window_explained
from ledger.errors import ConfigError

__all__ = [
    "ANSWER_BODY_LIMIT",
    "CLASS_PRECEDENCE",
    "COLLECTOR_STOPPED",
    "COLLECTOR_STOP_SIGNALS",
    "CRASH_SIGNALS",
    "DEFAULT_SIGNATURES",
    "ENGINE_ENDED",
    "PYTHON_TRACEBACK",
    "Classification",
    "Explanation",
    "FailureClass",
    "Occurrence",
    "RunOutcome",
    "Signature",
    "before_stop",
    "class_rank",
    "classify",
    "classify_logs",
    "collector_stop_end",
    "cut_within_stop",
    "decisive",
    "echo_dumps",
    "echoed_line",
    "engine_words",
    "explained_by_refusals",
    "explanations",
    "find_engine_text",
    "load_signatures",
    "not_a_completion",
    "occurrences",
    "outside_stop_shown",
    "own_end_lines",
    "pattern_signatures",
    "shows_own_end",
    "shows_stop_marker",
    "signature_classes",
    "status_signatures",
    "stop_cut_line",
    "stop_cut_lines",
    "stop_markers",
    "unanswered_error",
]

# the table is the collectors' data (they classify runs with it); the policy reads the classes it names
DEFAULT_SIGNATURES = Path(__file__).parent / "collectors" / "signatures.toml"
_MAX_DETAIL = 500
ANSWER_BODY_LIMIT = 2048  # bytes of an answer that is no completion a probe keeps (details.body)

# the stop reasons (a launch's ``details.stop_reason``) that say the engine itself ended the run — it exited
# on its own, or outlived its lease — rather than the collector stopping it; the collector's status-only
# signatures apply to these runs only, and the policy engine classifies a launch's recorded end the same way
ENGINE_ENDED = ("exited", "lease-expired")
# the stop reasons of the collector's own stop (end of the run, of the lease, of readiness-only launches, a
# cancelled job): only these attribute a recorded end to the collector; any other word, misspelled or
# unknown, is judged as the engine's own end
COLLECTOR_STOPPED = ("finished", "cancelled", "ready", "lease-end")
# the signals the collector's own stop sends (SIGTERM, then SIGKILL after the grace period)
COLLECTOR_STOP_SIGNALS = (signal.SIGTERM, signal.SIGKILL)
# signals of a crash: no stop of the collector's ends an engine with one of these (the signature table's
# crash signatures — abort, bus-error, killed-crash-signal — name these and no others)
CRASH_SIGNALS = (
    signal.SIGILL,
    signal.SIGTRAP,
    signal.SIGABRT,
    signal.SIGBUS,
    signal.SIGFPE,
    signal.SIGSEGV,
    signal.SIGSTKFLT,
    signal.SIGSYS,
)


def collector_stop_end(exit_code: int | None, sig: int | None) -> bool:
    """Could the collector's own stop have ended a run with this exit status? Not when a signal other than
    ``COLLECTOR_STOP_SIGNALS`` ended it (``signal``, or a negative exit code as Python reports one), nor
    when it exited through a shell with 128 + a crash signal (134: SIGABRT, 139: SIGSEGV …): a launch that
    says the collector stopped it but records such an end crashed, whatever its stop reason says."""
    died_by = sig if sig is not None else (-exit_code if exit_code is not None and exit_code < 0 else None)
    if died_by is not None and died_by not in COLLECTOR_STOP_SIGNALS:
        return False
    return not (exit_code is not None and exit_code - 128 in CRASH_SIGNALS)


class FailureClass(StrEnum):
    """The closed set of failure classes: every signature names one; policies judge these, not ids.

    Defined here once; ``signatures.toml`` and the policies (``params.fault_classes``) are checked
    against it when they load.
    """

    STARTUP = "startup"  # the engine never came up: config, kernels, weights, platform
    RUNTIME_FAULT = "runtime-fault"  # it came up and then crashed / died on requests
    GPU_FAULT = "gpu-fault"  # the device hung or faulted
    RESOURCE = "resource"  # memory (host or device) exhausted, OOM-killed
    LEASE = "lease"  # it hung: the lease ran out before it finished
    OPERATOR_STOP = "operator-stop"  # stopped from outside (SIGTERM by an operator or supervisor)
    # the campaign's own settings do not fit the engine it starts: the engine refused the collector's requests
    # (an API key the campaign's command gives the engine, not the collector), or its own command line
    # (argparse's "error: argument --dtype: invalid choice", a --help that prints the usage and exits) — the
    # operator's error, no evidence of the engine either way
    CONFIG = "config"


UNKNOWN_CLASS = "unknown"  # what the policy engine reports for an id the signature table lacks

# How grave each failure class is, gravest first: the one precedence the collectors and the policy engine
# both judge a run by when several signatures match (``decisive``). Classes in one group are equally grave
# (the table's order decides between them). A fault of the GPU or of the running engine is never shadowed
# by a line of another class that the table happens to list earlier (a CUDA OOM beside a GPU hang is a
# GPU fault); an outside stop is the least grave. A class missing here ranks gravest (fails closed).
CLASS_PRECEDENCE: tuple[frozenset[FailureClass], ...] = (
    frozenset({FailureClass.GPU_FAULT}),
    frozenset({FailureClass.RUNTIME_FAULT}),
    frozenset({FailureClass.RESOURCE, FailureClass.LEASE, FailureClass.STARTUP}),
    frozenset({FailureClass.OPERATOR_STOP, FailureClass.CONFIG}),
)


def class_rank(cls: FailureClass | str) -> int:
    """The place of a failure class in ``CLASS_PRECEDENCE`` (0: gravest); a class it lacks ranks 0."""
    return next((i for i, group in enumerate(CLASS_PRECEDENCE) if cls in group), 0)


# Lines in which an engine echoes the content of a request or of its answer — text the client (the collector
# itself) sent or the model wrote, not words of the engine's runtime. A fault pattern found in one of them
# says nothing of the run (the collector's prompt "… a GPU Hang …" echoed is no GPU hang), nor does a stop
# marker or a traceback head the prompt quotes. Recognised by the logger that writes them, per engine:
# vLLM's request logger (``--enable-log-requests``: vllm/entrypoints/serve/utils/request_logger.py; before
# 0.11 vllm/entrypoints/logger.py), whose records are "Received request …", "Request … details: prompt: …",
# "Request … JSON body: …", "Generated response …: output: …". vLLM's formatter (``NewLineFormatter``) repeats
# a record's header — "(APIServer pid=1889) DEBUG 12-06 17:35:54 [entrypoints/.../request_logger.py:55] " —
# at the head of every continuation line of a message of several lines, so a continuation line of an echo
# carries the request logger's own header and is recognised by it, line by line; a line without that header
# is the engine's own, whatever line precedes it (a crash printed raw after an echo still counts: fail
# closed). The prompt and the answer are written with ``%r`` and the body as JSON, so their newlines are
# escapes within the one line. The legacy logger.py is recognised by the message as well (its file name is
# no logger of requests alone), so its continuation lines are not. Only DEBUG and INFO records: the request
# logger writes no other level with content. A vLLM run with ``VLLM_LOGGING_PREFIX`` set prints another head:
# its echoes are not recognised (judged as the engine's lines). llama-cpp-python writes no request content to
# its logs (uvicorn's access line is the method, path and status; the collector sends no query string).
_ANSI_COLOUR = re.compile(r"\x1b\[[0-9;]*m")
_ECHO_LINE = re.compile(
    r"(?:\([^()\s]+(?: [^()\s]+)*? pid=\d+\) )?(?:DEBUG|INFO) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \["
    r"(?:(?:[^\]\s]*/)?request_logger\.py:\d+\] "
    r"|(?:[^\]\s]*/)?logger\.py:\d+\] "
    r"(?:Received request |Generated response |Request \S+ (?:details|JSON body): ))"
)


# Lines in which an engine dumps its own arguments or the model's metadata — the operator's text (a model
# path such as ".../release GPU Hang fixes/tiny.gguf", a served name) or the model's (GGUF ``general.name``,
# its chat template), not words of the engine's runtime: ``[echo_lines]`` of the signature table, per engine
# (llama.cpp's loader "loaded meta data … from PATH" and its "- kv N: general.name …", llama-cpp-python's
# "Model metadata: {…}", vLLM's "non-default args: {…}" …). Each is a regular expression matched at a line's
# start (colour codes removed); every engine's lines are recognised in every log (each is the head its own
# logger writes). A table without the section recognises none (the lines are judged as the engine's).
def _dump_patterns(raw: Any, p: Path) -> tuple[re.Pattern[str], ...]:
    if not isinstance(raw, dict) or not all(
        isinstance(v, list) and all(isinstance(x, str) and x for x in v) for v in raw.values()
    ):
        raise ConfigError(f"{p}: echo_lines must map an engine to a list of regular expressions")
    try:
        return tuple(re.compile(x) for v in raw.values() for x in v)
    except re.error as e:
        raise ConfigError(f"{p}: bad echo line pattern: {e}") from e


@lru_cache(maxsize=8)
def _echo_dumps(path: str, mtime_ns: int) -> tuple[re.Pattern[str], ...]:
    p = Path(path)
    return _dump_patterns(_table_section(p, "echo_lines", {}), p)


def echo_dumps(path: Path | None = None) -> tuple[re.Pattern[str], ...]:
    """The heads of the lines where an engine dumps its arguments or the model's metadata (``echo_lines``
    of the table at ``path``, default the shipped one)."""
    return _echo_dumps(*_stamp(path))


def echoed_line(line: str, dumps: Sequence[re.Pattern[str]] | None = None) -> bool:
    """Whether a log line is one where the engine echoes text that is not its runtime's words: a request's
    or an answer's content (``_ECHO_LINE``: vLLM's request logger), or its arguments or the model's metadata
    (``dumps``, default ``echo_dumps()``: the table's ``echo_lines``), judged by the head at the line's
    start: its content is the client's, the operator's or the model's text — no fault, stop marker or
    traceback in it counts."""
    plain = _ANSI_COLOUR.sub("", line)
    if _ECHO_LINE.match(plain) is not None:
        return True
    return any(d.match(plain) for d in (echo_dumps() if dumps is None else dumps))


def _within_given(text: str, start: int, end: int, given: Sequence[str]) -> bool:
    """Whether ``text[start:end]`` (a pattern's match) lies inside an occurrence in ``text`` of one of
    ``given`` — the texts the collector handed the engine (its command's values: the model's path, a served
    name) — that is more than the match: the operator's words quoted by the engine (a model path
    ".../release GPU Hang fixes/tiny.gguf" in a loader line, even one that reports a real failure), not the
    engine's. A given text that is no more than the match itself (an argument "GPU Hang") hides nothing:
    the engine may have said it (fail closed)."""
    for g in given:
        if not isinstance(g, str) or len(g) <= end - start:
            continue
        at = text.find(g, max(0, end - len(g)), start + len(g))
        if at >= 0:
            return True
    return False


def _line_bounds(text: str, start: int, end: int) -> tuple[int, int]:
    """The start of the line holding ``text[start]`` and the end (its newline, or the text's end) of the line
    holding the end of ``text[start:end]``."""
    first = text.rfind("\n", 0, start) + 1
    last = text.find("\n", end)
    return first, last if last >= 0 else len(text)


def _echoed_span(lines: str, dumps: Sequence[re.Pattern[str]] | None = None) -> bool:
    """Whether every line of ``lines`` (those a match touches) is an echo (``echoed_line``)."""
    d = echo_dumps() if dumps is None else dumps
    return all(echoed_line(line, d) for line in lines.split("\n"))


def _not_engine_words(
    text: str, m: re.Match[str], given: Sequence[str], dumps: Sequence[re.Pattern[str]]
) -> bool:
    """Whether a pattern's match in ``text`` is no word of the engine's: on echoed lines only
    (``echoed_line``), or inside a text the collector handed the engine (``_within_given``)."""
    a, b = _line_bounds(text, m.start(), m.end())
    return _echoed_span(text[a:b], dumps) or _within_given(text, m.start(), m.end(), given)


def find_engine_text(
    text: str, pattern: re.Pattern[str] | str, start: int = 0, given: Sequence[str] = ()
) -> int:
    """The offset in ``text`` of the first occurrence (from ``start``) of ``pattern`` (a regular expression,
    or a plain text such as ``PYTHON_TRACEBACK``) on a line that is no echo (``echoed_line``) and not inside
    a text the collector handed the engine (``given``: ``_within_given``), or -1 where there is none: how the
    collector and the policy engine find the engine's own stop markers and traceback heads, as the
    signatures' patterns are found (``Signature.locate``)."""
    pat = pattern if isinstance(pattern, re.Pattern) else re.compile(re.escape(pattern))
    dumps = echo_dumps()
    for m in pat.finditer(text, start):
        if not _not_engine_words(text, m, given, dumps):
            return m.start()
    return -1


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """What is known about an engine run when it stopped."""

    ready: bool
    exit_code: int | None = None  # exit status when it exited normally
    signal: int | None = None  # the signal that terminated it
    lease_expired: bool = False
    request_failed: bool = False  # the collector saw a request fail server-side
    # the engine's logs show a stop marker (``stop_markers``: the line an engine prints when it is told to
    # stop) after readiness, printed before the collector told it to stop (if it ever did), and nothing of
    # the engine's own that explains its end before it (an error line, a traceback, ``own_end_lines``):
    # someone else stopped it (``outside_stop_shown``). Derived from the logs by whoever classifies the run
    # (the collector from what it read, the policy engine from the stored logs), never taken from a
    # record's claim
    stop_marked: bool = False


@dataclass(frozen=True, slots=True)
class Signature:
    id: str
    title: str
    patterns: tuple[re.Pattern[str], ...] = ()
    signals: tuple[int, ...] = ()  # the table's ``signal``: one, or a list
    exit_codes: tuple[int, ...] = ()
    lease_expired: bool | None = None
    ready: bool | None = None
    request_failed: bool | None = None
    stop_marked: bool | None = None
    failure_class: FailureClass = FailureClass.STARTUP

    def match(self, text: str, outcome: RunOutcome, given: Sequence[str] = ()) -> str | None:
        """The evidence line when every condition holds (``""`` for status-only matches), else None."""
        found = self.locate(text, outcome, given)
        return None if found is None else found[1]

    def locate(self, text: str, outcome: RunOutcome, given: Sequence[str] = ()) -> tuple[int, str] | None:
        """(offset of the evidence line's start in ``text``, the line) when every condition holds
        (``(0, "")`` for status-only matches), else None. ``given``: the texts the collector handed the
        engine (its command's values): a match inside one is the operator's text (``_within_given``)."""
        if self.signals and outcome.signal not in self.signals:
            return None
        if self.exit_codes and outcome.exit_code not in self.exit_codes:
            return None
        if self.lease_expired is not None and outcome.lease_expired != self.lease_expired:
            return None
        if self.ready is not None and outcome.ready != self.ready:
            return None
        if self.request_failed is not None and outcome.request_failed != self.request_failed:
            return None
        if self.stop_marked is not None and outcome.stop_marked != self.stop_marked:
            return None
        if not self.patterns:
            return 0, ""
        dumps = echo_dumps()
        for pat in self.patterns:
            # the last one: a traceback ends with the error itself; a line that echoes a request's or an
            # answer's content, the engine's arguments or the model's metadata (``echoed_line``), and the
            # text the collector handed the engine (``given``) are not the engine's words, never its fault
            for m in reversed(list(pat.finditer(text))):
                if _not_engine_words(text, m, given, dumps):
                    continue
                start, end = _line_bounds(text, m.start(), m.end())
                return start, text[start:end].strip()[:_MAX_DETAIL]
        return None


@dataclass(frozen=True, slots=True)
class Classification:
    signature: str | None
    title: str | None = None
    detail: str | None = None
    matched: list[str] = field(default_factory=list)
    failure_class: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "signature": self.signature,
            "class": self.failure_class,
            "title": self.title,
            "detail": self.detail,
            "matched": list(self.matched),
        }


def decisive(matched: Sequence[Signature]) -> Signature | None:
    """The signature a run is classified by, of those that matched it (in table order): the first, unless
    a log pattern of a graver class (``CLASS_PRECEDENCE``) matched too — then the gravest of the log-pattern
    signatures (the first of them in table order among equals). Status-only signatures are the table's
    fall-backs: they decide only where no log line of a graver class did, so a ready engine that logged a
    CUDA OOM and exited stays ``cuda-oom``, while a GPU hang beside that OOM is ``gpu-hang``."""
    if not matched:
        return None
    first = matched[0]
    from_logs = [s for s in matched if s.patterns]
    gravest = min(from_logs, key=lambda s: class_rank(s.failure_class), default=None)
    if gravest is not None and class_rank(gravest.failure_class) < class_rank(first.failure_class):
        return gravest
    return first


def _signature(raw: dict[str, Any], where: str) -> Signature:
    known = {
        "id",
        "title",
        "patterns",
        "signal",
        "exit_codes",
        "lease_expired",
        "ready",
        "request_failed",
        "stop_marked",
        "class",
    }
    unknown = set(raw) - known
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    sid = raw.get("id")
    if not isinstance(sid, str) or not re.fullmatch(r"[a-z0-9][a-z0-9-]*", sid):
        raise ConfigError(f"{where}: id must be kebab-case text")
    cls = raw.get("class")
    choices = ", ".join(c.value for c in FailureClass)
    if cls is None:
        raise ConfigError(f"{where} ({sid}): `class` is required (one of {choices})")
    if cls not in {c.value for c in FailureClass}:
        raise ConfigError(f"{where} ({sid}): unknown class {cls!r} (one of {choices})")
    sig_raw = raw.get("signal")
    signals = tuple(sig_raw) if isinstance(sig_raw, list) else () if sig_raw is None else (sig_raw,)
    if (sig_raw is not None and not signals) or not all(
        type(n) is int and 1 <= n <= signal.SIGRTMAX for n in signals
    ):
        raise ConfigError(
            f"{where} ({sid}): `signal` must be a signal number or a list of them "
            f"(1..{int(signal.SIGRTMAX)}), not {sig_raw!r}"
        )
    for flag in ("lease_expired", "ready", "request_failed", "stop_marked"):
        if flag in raw and not isinstance(raw[flag], bool):
            raise ConfigError(f"{where} ({sid}): `{flag}` must be true or false, not {raw[flag]!r}")
    try:
        patterns = tuple(re.compile(p) for p in raw.get("patterns", []))
    except re.error as e:
        raise ConfigError(f"{where} ({sid}): bad pattern: {e}") from e
    return Signature(
        id=sid,
        title=str(raw.get("title", sid)),
        patterns=patterns,
        signals=signals,
        exit_codes=tuple(raw.get("exit_codes", ())),
        lease_expired=raw.get("lease_expired"),
        ready=raw.get("ready"),
        request_failed=raw.get("request_failed"),
        stop_marked=raw.get("stop_marked"),
        failure_class=FailureClass(cls),
    )


def load_signatures(path: Path | None = None) -> list[Signature]:
    """Parse a signatures file (default: the shipped ``signatures.toml``)."""
    p = path or DEFAULT_SIGNATURES
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"cannot read signatures file {p}: {e}") from e
    except RecursionError as e:
        raise ConfigError(f"cannot read signatures file {p}: nested too deeply") from e
    raw = data.get("signature")
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{p}: no [[signature]] tables")
    sigs = [_signature(r, f"{p} signature #{i + 1}") for i, r in enumerate(raw)]
    ids = [s.id for s in sigs]
    if len(ids) != len(set(ids)):
        raise ConfigError(f"{p}: duplicate signature ids")
    return sigs


def _stamp(path: Path | None) -> tuple[str, int]:
    """(path, modification time) of a signatures file (default: the shipped one): what its cached readings
    are keyed by, so an edited table is read again."""
    p = path or DEFAULT_SIGNATURES
    try:
        return str(p), p.stat().st_mtime_ns
    except OSError as e:
        raise ConfigError(f"cannot read signatures file {p}: {e.strerror}") from e


@lru_cache(maxsize=8)
def _classes(path: str, mtime_ns: int) -> dict[str, str]:
    return {s.id: s.failure_class.value for s in load_signatures(Path(path))}


def signature_classes(path: Path | None = None) -> dict[str, str]:
    """Signature id → failure class, from ``path`` (default: the shipped table)."""
    return dict(_classes(*_stamp(path)))


# a line of the engine's own that reads as an error (``ValueError: …``, argparse's ``prog: error: …``, a
# logger's ``ERROR``): what a run classified by a status-only signature quotes as its ``failure_detail``
_ERROR_LINE = re.compile(r"\b[A-Za-z_.]*(Error|Exception)\b|\berror:|\bERROR\b|\bFATAL\b")


def engine_words(text: str, signatures: Sequence[Signature], given: Sequence[str] = ()) -> str | None:
    """The engine's last error-looking line in ``text`` (``_ERROR_LINE``), stripped and cut to the detail's
    bound, or None where it has none: the ``failure_detail`` of a run whose deciding signature reads no log
    line (``engine-died-before-readiness`` …), so its record quotes the engine's words. A line that any log
    pattern of ``signatures`` matches is passed over: the detail names no class the run was not judged by
    (the policy engine reads ``failure_detail`` with the same patterns); so is one whose error words all lie
    inside a text the collector handed the engine (``given``: ``_within_given``)."""
    patterns = [p for s in signatures for p in s.patterns]
    dumps = echo_dumps()
    for line in reversed(text.splitlines()):
        if echoed_line(line, dumps):  # the client's, the operator's or the model's text, not the engine's
            continue
        words = [m for m in _ERROR_LINE.finditer(line) if not _within_given(line, m.start(), m.end(), given)]
        if words and not any(p.search(line) for p in patterns):
            return line.strip()[:_MAX_DETAIL]
    return None


def classify(
    text: str,
    outcome: RunOutcome,
    signatures: Sequence[Signature] | None = None,
    given: Sequence[str] = (),
) -> Classification:
    """The signature a failed run is classified by (``decisive``: the first matching one in table order,
    unless a log line of a graver class matched) and every signature that matched. A signature that reads
    no log line takes the engine's last error-looking line as its detail (``engine_words``). ``given``: the
    texts the collector handed the engine (its command's values), never read as the engine's words."""
    sigs = load_signatures() if signatures is None else signatures
    lines: dict[str, str] = {}
    matched: list[Signature] = []
    for sig in sigs:
        line = sig.match(text, outcome, given)
        if line is None:
            continue
        matched.append(sig)
        lines[sig.id] = line
    pick = decisive(matched)
    if pick is None:
        return Classification(None)
    detail = lines[pick.id] or (None if pick.patterns else engine_words(text, sigs, given))
    return Classification(pick.id, pick.title, detail, [s.id for s in matched], pick.failure_class.value)


@lru_cache(maxsize=8)
def _pattern_signatures(path: str, mtime_ns: int) -> tuple[Signature, ...]:
    return tuple(s for s in load_signatures(Path(path)) if s.patterns)


def pattern_signatures(path: Path | None = None) -> tuple[Signature, ...]:
    """The signatures that read the engine's logs (those with patterns), in table order."""
    return _pattern_signatures(*_stamp(path))


@lru_cache(maxsize=8)
def _status_signatures(path: str, mtime_ns: int) -> tuple[Signature, ...]:
    return tuple(s for s in load_signatures(Path(path)) if not s.patterns)


def status_signatures(path: Path | None = None) -> tuple[Signature, ...]:
    """The signatures that read only the run's recorded outcome (no log patterns), in table order."""
    return _status_signatures(*_stamp(path))


def classify_logs(
    pieces: Iterable[str], outcome: RunOutcome, signatures: Sequence[Signature], given: Sequence[str] = ()
) -> Classification:
    """``classify`` over log text that arrives in pieces, each of whole lines (a stream of any length).

    The answer is the one ``classify`` gives the pieces joined: patterns match within a line, so every
    signature's last matching line is the last one any piece shows, and the signature that decides
    (``decisive``) is chosen among all that matched anywhere.
    """
    last: dict[str, str] = {}
    words: str | None = None  # the engine's last error-looking line (``engine_words``) of any piece
    for text in pieces:
        for sig in signatures:
            line = sig.match(text, outcome, given)
            if line is not None:
                last[sig.id] = line
        words = engine_words(text, signatures, given) or words
    matched = [s for s in signatures if s.id in last]
    pick = decisive(matched)
    if pick is None:
        return Classification(None)
    detail = last[pick.id] or (None if pick.patterns else words)
    return Classification(pick.id, pick.title, detail, [s.id for s in matched], pick.failure_class.value)


# A recorded refusal of the campaign's configuration that explains a graver log line it caused, one
# occurrence at a time: ``[[explanation]]`` of the signature table. llama-cpp-python takes a streamed request
# whose prompt its context cannot hold (HTTP 200), then raises inside the stream — uvicorn's "ERROR:
# Exception in ASGI application" (signature server-unhandled-exception, class runtime-fault) and a traceback
# whose exception is "ValueError: Requested tokens (N) exceed context window of M": that occurrence is the
# campaign's context refusal, not a runtime fault — but only where the request it served IS recorded as one
# (the harness's per-request record: refused for the context, sized, held to the launch's command). Read by
# whoever judges a run's logs beside the requests it recorded (the policy engine: ``explained_by_refusals``).
_EXPLANATION_FIELDS = frozenset({"id", "explains", "refusal", "shows"})
# the named groups a context refusal's ``shows`` must give: the prompt's tokens as the engine counted them,
# and the context window it serves requests in
_CONTEXT_GROUPS = frozenset({"tokens", "window"})
# the lines of a Python traceback after its record's head line (``_traceback_after``)
_TRACEBACK_HEAD = "Traceback (most recent call last):"
_CHAIN_LINES = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)
_EXCEPTION_LINE = re.compile(r"[A-Za-z_][\w.]*(?:: .*)?")


@dataclass(frozen=True, slots=True)
class Explanation:
    """One ``[[explanation]]`` of the signature table: an occurrence of signature ``explains``'s log line
    whose traceback (``_traceback_after``) holds ``shows`` is the recorded refusal ``refusal``
    (``ledger.answers.REFUSALS``) of the campaign's configuration, where a request so recorded pairs with it
    (``explained_by_refusals``). For ``context``, ``shows`` names the groups ``tokens`` and ``window``."""

    id: str
    explains: str
    refusal: str
    shows: re.Pattern[str]


@dataclass(frozen=True, slots=True)
class Occurrence:
    """One line of a log that a signature's pattern matched (``occurrences``), with what its traceback
    shows: the explanation whose ``shows`` it holds (None: none) and that line's ``tokens`` and ``window``."""

    signature: str
    line: str
    explanation: str | None = None
    tokens: int | None = None
    window: int | None = None


def _explanation(raw: Any, where: str, sigs: Mapping[str, Signature]) -> Explanation:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: must be a table")
    unknown = set(raw) - _EXPLANATION_FIELDS
    missing = _EXPLANATION_FIELDS - set(raw)
    if unknown or missing:
        raise ConfigError(
            f"{where}: unknown field(s) {sorted(unknown)}, missing field(s) {sorted(missing)} "
            f"(fields: {', '.join(sorted(_EXPLANATION_FIELDS))})"
        )
    eid, explains, kind, shows = raw["id"], raw["explains"], raw["refusal"], raw["shows"]
    if not isinstance(eid, str) or not re.fullmatch(r"[a-z0-9][a-z0-9-]*", eid):
        raise ConfigError(f"{where}: id must be kebab-case text")
    target = sigs.get(explains) if isinstance(explains, str) else None
    if target is None or not target.patterns:
        raise ConfigError(f"{where} ({eid}): explains {explains!r}: no signature of the table with patterns")
    if kind != REFUSAL_CONTEXT:
        # the one refusal whose log line can be held to what the request's record shows (its size)
        raise ConfigError(f"{where} ({eid}): refusal {kind!r}: only {REFUSAL_CONTEXT!r} of {list(REFUSALS)}")
    if not isinstance(shows, str) or not shows:
        raise ConfigError(f"{where} ({eid}): shows must be a regular expression")
    try:
        pattern = re.compile(shows)
    except re.error as e:
        raise ConfigError(f"{where} ({eid}): bad shows pattern: {e}") from e
    if not set(pattern.groupindex) >= _CONTEXT_GROUPS:
        raise ConfigError(f"{where} ({eid}): shows must name the groups {sorted(_CONTEXT_GROUPS)}")
    return Explanation(eid, explains, kind, pattern)


@lru_cache(maxsize=8)
def _explanations(path: str, mtime_ns: int) -> tuple[Explanation, ...]:
    p = Path(path)
    raw = _table_section(p, "explanation", [])
    if not isinstance(raw, list):
        raise ConfigError(f"{p}: explanation must be a list of tables ([[explanation]])")
    sigs = {s.id: s for s in load_signatures(p)}
    found = tuple(_explanation(r, f"{p} explanation #{i + 1}", sigs) for i, r in enumerate(raw))
    if len({x.id for x in found}) != len(found):
        raise ConfigError(f"{p}: duplicate explanation ids")
    return found


def explanations(path: Path | None = None) -> tuple[Explanation, ...]:
    """The table's ``[[explanation]]`` entries (``Explanation``), in table order; none where it has none."""
    return _explanations(*_stamp(path))


def _traceback_after(text: str, start: int) -> str:
    """The Python traceback a log record printed after its head line (``start``: the offset where the line
    after the head begins): its indented lines (frames, code, an exception group's "  | …" lines), its
    "Traceback (most recent call last):" lines, the chain lines between two tracebacks, blank lines, and the
    unindented exception line that ends a plain traceback ("ValueError: …"). It ends at the first line that is
    none of these, at a second unindented line after that exception line (no chain between: the next record,
    such as another request's own "Exception: …"), and at any unindented line after an exception group (its
    last line is indented). Empty where no traceback follows the head."""
    pos, out = start, []
    seen = ended = plain = False
    chained = True  # a traceback may begin
    while pos < len(text):
        nl = text.find("\n", pos)
        end = len(text) if nl < 0 else nl
        line = _ANSI_COLOUR.sub("", text[pos:end]).rstrip("\r")
        pos = end + 1
        if not line.strip():
            out.append(line)
            continue
        if line in _CHAIN_LINES and seen:
            chained, ended = True, False
        elif line == _TRACEBACK_HEAD and (chained or not ended):
            plain, chained, ended = True, False, False
        elif line[0] in " \t" and not ended:
            plain = plain and not line.lstrip().startswith("+ Exception Group Traceback")
        elif plain and seen and not ended and _EXCEPTION_LINE.fullmatch(line) is not None:
            ended = True
        else:
            break
        seen = True
        out.append(line)
    return "\n".join(out) if seen else ""


def occurrences(
    text: str,
    sig: Signature,
    outcome: RunOutcome,
    given: Sequence[str] = (),
    rules: Sequence[Explanation] = (),
) -> list[Occurrence]:
    """Every line of ``text`` on which ``sig`` matches (its conditions on ``outcome`` holding; a line of the
    engine's own: ``Signature.locate``'s reading), once per line, in order, each with the first of ``rules``
    (those explaining ``sig``) whose ``shows`` its traceback (``_traceback_after``) holds on a line of the
    engine's own, and that line's ``tokens`` and ``window`` (whole numbers, else no explanation)."""
    if sig.locate(text, outcome, given) is None or not sig.patterns:
        return []
    dumps = echo_dumps()
    starts: dict[int, int] = {}  # line start → line end
    for pat in sig.patterns:
        for m in pat.finditer(text):
            if not _not_engine_words(text, m, given, dumps):
                a, b = _line_bounds(text, m.start(), m.end())
                starts.setdefault(a, b)
    found: list[Occurrence] = []
    mine = [r for r in rules if r.explains == sig.id]
    for a in sorted(starts):
        b = starts[a]
        block = _traceback_after(text, b + 1) if b < len(text) else ""
        occ = Occurrence(sig.id, text[a:b].strip()[:_MAX_DETAIL])
        for rule in mine:
            shown = rule.shows.search(block)
            if shown is None:
                continue
            tokens, window = shown.group("tokens"), shown.group("window")
            if tokens is not None and window is not None and tokens.isdigit() and window.isdigit():
                occ = Occurrence(sig.id, occ.line, rule.id, int(tokens), int(window))
                break
        found.append(occ)
    return found


def explained_by_refusals(
    found: Sequence[Occurrence], refused: Sequence[int | None], launched: tuple[str, int] | None
) -> bool:
    """Whether every occurrence of ``found`` is the campaign's context refusal: its traceback shows the
    overflow (``Occurrence.explanation``) in the engine's own numbers — the prompt's ``tokens`` at or beyond
    the ``window`` it served, a window the context the launch gives explains (``launched``,
    ``ledger.answers.window_explained``: it, up to it padded to 256 — a smaller or larger one is the
    engine's, not the campaign's) — and it pairs with a request of ``refused`` of its
    own (each used once): the requests the run recorded refused for the context, held to the launch's
    command (``ledger.answers.refusal`` with ``launched``), given by the prompt tokens each records (None:
    the engine refused its sizing too — any occurrence; a number: only an occurrence of those tokens). No
    occurrence, a context not known, or more occurrences than such requests: False (fail closed)."""
    if not found or launched is None:
        return False
    left = list(refused)
    for occ in sorted(found, key=lambda o: o.tokens is None):
        if occ.explanation is None or occ.tokens is None or occ.window is None:
            return False
        if not (occ.tokens >= occ.window and window_explained(occ.window, launched[1])):
            return False
        pick = occ.tokens if occ.tokens in left else None
        if pick not in left:
            return False
        left.remove(pick)
    return True


def _table_section(p: Path, key: str, default: object) -> object:
    """One section of the signature table at ``p`` (``default`` where it has none)."""
    try:
        return tomllib.loads(p.read_text(encoding="utf-8")).get(key, default)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"cannot read signatures file {p}: {e}") from e


def _line_patterns(p: Path, key: str, flags: int = 0) -> tuple[re.Pattern[str], ...]:
    """The table's list ``key`` of regular expressions (``stop_markers``, ``own_end_lines``), compiled with
    ``flags``; a list that is not one of non-empty texts, or a pattern that does not compile, is the table's
    error naming the list."""
    raw = _table_section(p, key, [])
    if not isinstance(raw, list) or not all(isinstance(m, str) and m for m in raw):
        raise ConfigError(f"{p}: {key} must be a list of regular expressions")
    try:
        return tuple(re.compile(m, flags) for m in raw)
    except re.error as e:
        raise ConfigError(f"{p}: bad {key} pattern: {e}") from e


@lru_cache(maxsize=8)
def _stop_markers(path: str, mtime_ns: int) -> tuple[re.Pattern[str], ...]:
    # each marker is a line's: ``^``/``$`` anchor at every line of the text searched (the collector's
    # ``_stopping_already`` and ``before_stop`` search text of many lines)
    return _line_patterns(Path(path), "stop_markers", re.MULTILINE)


# A health probe's error (``collectors/probe.py``: ``f"{type(e).__name__}: {e}"`` of the httpx error, or the
# bare name, as the readiness poll records it — ``collectors/readiness.py``: ``ConnectError``) that says the
# request got no answer because its connection was refused, reset or closed: the engine said nothing (no HTTP
# status). Anything else — a timeout (``ReadTimeout``, ``ConnectTimeout``, … : the engine hung), a
# protocol error that is no bare disconnect, no error at all — is not (fail closed). The policy's
# ``stop_cut`` and the collector's ``_stopped_from_outside`` read this one judgement.
_UNANSWERED_ERROR = re.compile(
    r"(?:ConnectError|ReadError|WriteError)(?:: |\Z)"
    r"|RemoteProtocolError: Server disconnected without sending a response"
)


# the head of a Python traceback: an engine that printed one after readiness failed at runtime, whatever
# ended it later (an unmatched one has no signature of its own): no stop from outside excuses its failure
# (the policy's ``stop_cut``, the collector's ``_stopped_from_outside``)
PYTHON_TRACEBACK = "Traceback (most recent call last)"


def unanswered_error(error: object) -> bool:
    """Whether a probe's recorded ``error`` says its request got no answer: its connection refused, reset or
    closed (``_UNANSWERED_ERROR``, matched at the start); never a timeout, never a text of another shape."""
    return isinstance(error, str) and _UNANSWERED_ERROR.match(error) is not None


def stop_markers(path: Path | None = None) -> tuple[re.Pattern[str], ...]:
    """The log lines an engine prints when told to stop from outside (``stop_markers`` in the table)."""
    return _stop_markers(*_stamp(path))


def shows_stop_marker(text: str, markers: Sequence[re.Pattern[str]]) -> bool:
    """Whether ``text`` (log lines an engine printed after readiness, before any stop of the collector's)
    holds one of ``markers`` on a line of the engine's own (``find_engine_text``: an echoed prompt quoting
    one is none): the engine is shutting down — not who asked it to (``outside_stop_shown``)."""
    return any(find_engine_text(text, m) >= 0 for m in markers)


@lru_cache(maxsize=8)
def _own_end_lines(path: str, mtime_ns: int) -> tuple[re.Pattern[str], ...]:
    return _line_patterns(Path(path), "own_end_lines")


def own_end_lines(path: Path | None = None) -> tuple[re.Pattern[str], ...]:
    """The log lines that show an engine ended or failed on its own (``own_end_lines`` in the table: a
    request limit reached, a request answered 5xx), besides its error lines and tracebacks."""
    return _own_end_lines(*_stamp(path))


def shows_own_end(
    text: str, own_end: Sequence[re.Pattern[str]], passed: Sequence[re.Pattern[str]] = ()
) -> bool:
    """Whether ``text`` holds, on a line of the engine's own (``echoed_line``: a prompt or a dump is none),
    an error line (``_ERROR_LINE``, as ``engine_words`` reads one), a Python traceback
    (``PYTHON_TRACEBACK``) or one of ``own_end`` (``own_end_lines``): something of the engine's own that
    explains an end. A line that one of ``passed`` matches whole (``stop_cut_line``: the stop's cut of a
    request in flight, where the caller has shown it came within the stop) explains none."""
    dumps = echo_dumps()
    for line in text.splitlines():
        if echoed_line(line, dumps) or (passed and stop_cut_line(line, passed, dumps)):
            continue
        if _ERROR_LINE.search(line) or PYTHON_TRACEBACK in line or any(p.search(line) for p in own_end):
            return True
    return False


@lru_cache(maxsize=8)
def _stop_cut_lines(path: str, mtime_ns: int) -> tuple[re.Pattern[str], ...]:
    return _line_patterns(Path(path), "stop_cut_lines")


def stop_cut_lines(path: Path | None = None) -> tuple[re.Pattern[str], ...]:
    """The log lines an engine prints when a stop cuts a request it is still answering (``stop_cut_lines``
    in the table: uvicorn's "ASGI callable returned without completing response."), each matched against a
    whole line; none where the table has none."""
    return _stop_cut_lines(*_stamp(path))


def stop_cut_line(
    line: str, cut: Sequence[re.Pattern[str]] | None = None, dumps: Sequence[re.Pattern[str]] | None = None
) -> bool:
    """Whether one log line is a stop-cut line of the engine's own: one of ``cut`` (default the table's
    ``stop_cut_lines``) matches it (its colour codes and line end removed), and it is no echo
    (``echoed_line``). How the collector times the first one it reads (``cut_within_stop``) and how
    ``outside_stop_shown`` passes them over."""
    plain = _ANSI_COLOUR.sub("", line).rstrip("\r\n")
    if not any(p.search(plain) for p in (stop_cut_lines() if cut is None else cut)):
        return False
    return not echoed_line(plain, dumps)


def cut_within_stop(
    cut_at: datetime | None,
    marker_at: datetime | None,
    tolerance: object,
    window: tuple[datetime, datetime] | None = None,
) -> bool:
    """Whether the first stop-cut line the collector read after readiness (``cut_at``: when it read it) came
    within the stop from outside that its logs then show (``marker_at``: when it read the engine's first stop
    marker after readiness, ``details.stop_marker_at``): read no earlier than ``tolerance`` seconds
    (``params.stop_cut_tolerance_s``: a number ≥ 0) before the marker, or after it. uvicorn's signal handler
    (SIGINT, SIGTERM) sets its exit flag, and sse-starlette (llama-cpp-python's streams) ends its streams on
    that flag — one begun after it at once — while uvicorn's own loop logs "Shutting down" only at its next
    tick: a stream the stop cut may be logged a little before the marker (uvicorn logs no line when the
    signal comes). ``window`` (the policy's reading of a stored launch: from its readiness to the earliest
    end it records, ``_stop_read_window`` in ``ledger.policy.acceptance``): both times must lie in it, ends
    included — a time the launch's own record contradicts is no time the collector read a line at; None:
    times the caller measured itself (the collector). False where a time is not known, the tolerance is no
    number ≥ 0, a time lies outside ``window``, or the times cannot be compared (fail closed: the line is
    then the engine's own error)."""
    if cut_at is None or marker_at is None:
        return False
    if isinstance(tolerance, bool) or not isinstance(tolerance, int | float):
        return False
    if not math.isfinite(tolerance) or tolerance < 0:
        return False
    try:
        gap = (marker_at - cut_at).total_seconds()
        if window is not None and not all(window[0] <= t <= window[1] for t in (cut_at, marker_at)):
            return False
    except TypeError:  # one with its zone, one without
        return False
    return gap <= tolerance


def outside_stop_shown(
    logs: Sequence[str] | None,
    markers: Sequence[re.Pattern[str]],
    own_end: Sequence[re.Pattern[str]],
    *,
    cut: Sequence[re.Pattern[str]] | None = None,
    cut_at: datetime | None = None,
    marker_at: datetime | None = None,
    tolerance: object = None,
    window: tuple[datetime, datetime] | None = None,
) -> bool:
    """``RunOutcome.stop_marked``, the one reading of it, by the collector and the policy engine alike:
    ``logs`` (each log's lines after readiness, up to any stop of the collector's; None: a log could not be
    read) show a stop marker (``shows_stop_marker``) and nothing of the engine's own that explains its end
    (``shows_own_end``) before it — in the log that holds the marker up to its line (what follows is the
    shutdown), in every other log all of it (lines of two logs cannot be ordered: fail closed). A shutdown
    line shows a shutdown happened, not who asked for it: uvicorn prints it for every end, a signal, its own
    ``should_exit`` after an internal fault, its ``limit_max_requests``. False where no log was read or none
    shows a marker.

    A stop-cut line (``cut``, default the table's ``stop_cut_lines``: uvicorn's "ERROR:    ASGI callable
    returned without completing response." — a stream the server left unanswered) is an error line of the
    engine's own like any other, unless the collector read the first of them within the stop
    (``cut_within_stop`` of ``cut_at``, ``marker_at``, ``tolerance``, ``window``): then every one is the
    stop's cut of a request in flight, passed over — but in a log that holds a marker only where ``cut_at``
    is no later than ``marker_at``: the collector reads a log's lines in order and times the first cut line
    and the first marker it reads, so a cut line before the marker in that log was read no later than the
    marker (a later time contradicts the log; where several logs hold a marker, which was read first cannot
    be told: fail closed). After the marker in its log it is the shutdown's, as every line there. Each
    request the stop cut is still judged on its own (the policy's ``stop_cut``: no answer, seen within the
    tolerance of the stop)."""
    if logs is None:
        return False
    lines = stop_cut_lines() if cut is None else cut
    passed = lines if lines and cut_within_stop(cut_at, marker_at, tolerance, window) else ()
    # cut_within_stop compared the two times: both known, each with its zone
    in_order = bool(passed) and cut_at is not None and marker_at is not None and cut_at <= marker_at
    marked = False
    for text in logs:
        found = [at for at in (find_engine_text(text, m) for m in markers) if at >= 0]
        at = len(text)
        if found:
            marked = True
            at = text.rfind("\n", 0, min(found)) + 1
        if shows_own_end(text[:at], own_end, passed if not found or in_order else ()):
            return False
    return marked


def before_stop(
    pieces: Iterable[str], markers: Sequence[re.Pattern[str]], kept_lines: int = 0, *, exact: bool = False
) -> Iterator[str]:
    """One log's pieces (each of whole lines): its first ``kept_lines`` lines whatever they say (what the
    engine logged before it was told to stop), then on up to the line of the first stop marker, not
    included (its shutdown). ``exact``: the first ``kept_lines`` lines and nothing after them (the
    collector read the engine's pipes empty before it counted them: every line after is its shutdown)."""
    if exact:
        yield from _first_lines(pieces, kept_lines)
        return
    left = kept_lines
    for text in pieces:
        skip = 0
        if left > 0:  # the lines logged before the stop: a marker among them is the engine's own line
            cut = 0
            while left > 0:
                nl = text.find("\n", cut)
                if nl < 0:
                    cut = len(text)
                    break
                cut, left = nl + 1, left - 1
            skip = cut
        # a marker on an echoed line (``echoed_line``: a prompt quoting it) is no stop of the engine
        found = (find_engine_text(text, mk, skip) for mk in markers)
        first = min((at for at in found if at >= 0), default=None)
        if first is None:
            yield text
            continue
        yield text[: text.rfind("\n", 0, first) + 1]
        return


def _first_lines(pieces: Iterable[str], n: int) -> Iterator[str]:
    """The first ``n`` lines of pieces of whole lines."""
    left = n
    for text in pieces:
        if left <= 0:
            return
        cut = 0
        while left > 0:
            nl = text.find("\n", cut)
            if nl < 0:
                cut = len(text)
                left -= 1  # a last line without its newline
                break
            cut, left = nl + 1, left - 1
        yield text[:cut]


def not_a_completion(status: int | None, body: str) -> str | None:
    """Why a 2xx answer (its body as recorded) is not a chat completion — an error object (vLLM's
    ``{"error": {"type": "EngineDeadError", …}}``), an empty body, not JSON, no ``choices[0].message`` —
    or None when it is one (or the answer was not 2xx). Such an answer is the server's failure to answer,
    like a 5xx; the collector's probes and the policy (``e.derived.answer_not_completion``) judge the
    recorded body with this one function."""
    if status is None or not 200 <= status <= 299:
        return None
    if not body.strip():
        return "an empty body"
    try:
        data = json.loads(body)
    except ValueError:
        return "a body that is not JSON" + (
            " (cut at 2 KB)" if len(body.encode()) >= ANSWER_BODY_LIMIT else ""
        )
    if not isinstance(data, dict):
        return "a body that is not a JSON object"
    err = data.get("error")
    if err is not None:
        if isinstance(err, dict):
            kind = err.get("type") or err.get("code") or "error"
            return f"an error object: {kind}: {str(err.get('message', ''))[:200]}"
        return f"an error: {str(err)[:200]}"
    choices = data.get("choices")
    if (
        not isinstance(choices, list)
        or not choices
        or not isinstance(choices[0], dict)
        or not isinstance(choices[0].get("message"), dict)
    ):
        return "no choices[0].message"
    return None
