"""The semantic harness: a frozen corpus of prompts with checks on the answers, pinned by digest.

Each corpus line is ``{"id", "messages", "checks": [...]}`` (``max_tokens`` optional, default 64); a check:

  {"type": "exact", "value": "READY"}            the answer, stripped, equals ``value``
  {"type": "contains", "value": "Paris"}         the answer contains ``value``
  {"type": "regex", "pattern": "^[0-9]+$"}       ``re.search`` of ``pattern`` on the stripped answer
  {"type": "json_schema", "schema": {...}}       the answer parses as JSON and validates (JSON Schema 2020-12)
  {"type": "cel", "expr": "answer.n == 4"}       CEL over ``answer`` (the parsed JSON) and ``text``

"Parses as JSON" is strict JSON (``ledger.canonical.parse_json``): ``NaN``, ``Infinity`` and a key twice are
no JSON. A CEL check reads ``text`` (the stripped answer) always, and ``answer`` where the answer parses: an
expression that reads ``answer`` of an answer that is not JSON fails its item, saying so.

An unknown check type, an unknown key, a bad regex, schema or CEL expression refuses the corpus before
any request. An item passes when every one of its checks passes; the score is the fraction of items
that pass, judged against the policy's threshold. The first engine fault stops the run (no retry, no
reset), its outcome is "fault" and the gate fails with "no aggregate result". Engine faults are the
benchmark's (``benchmark.send_request``, an engine no longer alive), and, as there, an engine that hangs: a
request timed out and the engine then did not answer ``/health`` or ``/v1/models`` either
(``benchmark.engine_unresponsive``), or its front answered but a one-token canary completion gave no first
token (its inference loop hangs: ``benchmark.EngineCheck``). A slow engine — the canary's first token came —
keeps the timeout as the item's error; a canary that could not be judged fails the gate with the reason. An
item whose request timed out while the engine's processes were suspended from outside (SIGSTOP, a debugger, a
cgroup freezer: ``benchmark.EngineHold``) is neither: the run stops as an operator's stop does, naming the
hold, however soon the engine was let go; and so is one whose timeout fell due while the harness itself
was held (its collector stopped or frozen, a paused VM: ``benchmark.HARNESS_HOLD_S``), the engine or not.

Like the benchmark, the run records the model it measured: the ids ``/v1/models`` served before the first
item (``bounds.bindings``, which the policy compares with the campaign's approved model), read again after
the last: an endpoint that changed what it served meanwhile, or can no longer say, is an engine fault.
It records the endpoint it measured too (``bounds.endpoint``: the base URL it was given, without a trailing
``/``, as the benchmark does): the policy credits a result only where it is the endpoint the launch of its
attempt served at (``details.base_url``; rule ``harness-other-endpoint``).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import jsonschema  # type: ignore[import-untyped,unused-ignore]
from pydantic import BaseModel, ConfigDict, Field, ValidationError

import ledger
from ledger.answers import COUNTED_USAGE
from ledger.atomic import write_atomic
from ledger.canonical import parse_json
from ledger.collectors.benchmark import (
    BEFORE_THE_CUT,
    CAMPAIGN_CONFIG,
    CUT,
    LEASE_EXPIRED,
    NO_AGGREGATE,
    Bindings,
    EngineCheck,
    EngineHold,
    EngineProcesses,
    Outcome,
    RequestRecord,
    StopCheck,
    answered_models,
    bindings_change,
    http_session,
    only_served,
    other_answered_models,
    read_bindings,
    refusal_reason,
    refused_by_campaign,
    run_fault_kind,
    send_request,
    sizable,
    size_request,
    timed_out,
    unjudged_checks,
    until_stopped,
)
from ledger.collectors.corpus import ChatMessage, CorpusId, chat_messages, corpus_problem, read_pinned_jsonl
from ledger.entries import format_time, validate_payload
from ledger.errors import CanonicalJsonError, ConfigError, PolicyError
from ledger.hashing import blake3_hex, parse_digest
from ledger.policy.acceptance import (  # the policy reads the stored record by these too
    CUT_OUTCOMES,
    cut_decided,
    request_timed_out,
)
from ledger.policy.conditions import Condition, compile_condition
from ledger.recorder import Recorder

__all__ = [
    "CHECKS_ARTIFACT",
    "HARNESS",
    "HARNESS_DIGEST",
    "REQUESTS_ARTIFACT",
    "CheckOutcome",
    "ItemResult",
    "SemanticCorpus",
    "SemanticItem",
    "SemanticResult",
    "SemanticSpec",
    "load_semantic_corpus",
    "record_semantic_gate",
    "run_semantic",
    "run_semantic_async",
    "score_answer",
    "semantic_gate_payload",
]

# +2: the run records the ids /v1/models served (bounds.bindings), unchanged from the first item to the last
# +3: an answer that did not complete (benchmark.send_request) is an item error; the models the answers
#     named are recorded (bounds.bindings.answered_models)
# +4: reasoning a reasoning parser streams is output (an item that reasoned and gave no answer is scored on
#     its empty answer, not an error) and is recorded apart (``reasoning``); the answer alone is scored;
#     llama.cpp's SSE ``error:`` field is an error object (benchmark.send_request)
# +5: a timed-out item of an engine that then answers neither /health nor /v1/models is an engine fault (it
#     hangs); the bindings changed from the first item to the last are an engine fault, not a failed gate
# +6: an engine whose front still answers is asked a one-token canary completion: no first token is an
#     engine fault (its inference loop hangs); a canary that cannot be judged fails the gate; every
#     question's evidence is in the result (engine_checks)
# +7: an item whose request the run's own lease cut (its timeout was the lease's time left, not the request
#     timeout) is not scored: the run ends lease-expired (an engine that then hangs: a fault); corpus
#     messages are the one chat message model (collectors/corpus.py), refused at load
# +8: every request the run sent is recorded (REQUESTS_ARTIFACT: its HTTP status or none, fault, unanswered,
#     refusal), the one that stopped the run too: the policy reads what stopped it back from the record
# +9: an item that failed without a completion is sized against the campaign's context (max_tokens, context):
#     one the context cannot hold is refused (outcome config), not the engine's fault
# +10: of the failed items, those whose request timed out are counted (``counts.timed_out``, by the one test
#     the policy reads semantic-requests.jsonl back by: an engine held from outside answers none in flight)
# +11: where the sizing request gives no usage, the prompt is counted by the tokenizer of the program the
#     campaign launched, as a probe's is (``collectors.sizing``: ``context.counted``)
# +12: the run records the endpoint it measured (``bounds.endpoint``: the base URL it was given, as the probes
#     record theirs), which the policy compares with where its launch's engine served (harness-other-endpoint)
HARNESS = f"evidence-ledger/semantic@{ledger.__version__}+12"
CEL_NAMES = frozenset({"answer", "text"})  # what a corpus item's CEL check reads: the parsed answer, its text
HARNESS_DIGEST = f"blake3:{blake3_hex(Path(__file__).read_bytes())}"  # the exact code that scored
DEFAULT_MAX_TOKENS = 64  # an item may set its own max_tokens; short answers fit this one
ITEMS_ARTIFACT = "semantic-items.jsonl"
FAILURES_ARTIFACT = "semantic-failures.jsonl"
# every request the run sent, in order (``benchmark.RequestRecord``, as benchmark-requests.jsonl records
# its own): the scored items, and the one a fault, a refusal or a stop ended the run at — each with its HTTP
# status (none: no answer), ``fault``, ``unanswered`` and ``refusal``, from which the policy reads back what
# stopped the run (``bounds.fault_kind``, ``counts.refused``) rather than taking the payload's word for it
REQUESTS_ARTIFACT = "semantic-requests.jsonl"
# what the run asked the engine after an item timed out (benchmark.EngineCheck), where it asked
CHECKS_ARTIFACT = "semantic-engine-checks.jsonl"


# --- corpus ----------------------------------------------------------------------------------------


class _Check(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class ExactCheck(_Check):
    type: Literal["exact"]
    value: str


class ContainsCheck(_Check):
    type: Literal["contains"]
    value: str = Field(min_length=1)


class RegexCheck(_Check):
    type: Literal["regex"]
    pattern: str = Field(min_length=1)


class JsonSchemaCheck(_Check):
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, populate_by_name=True)


class CelCheck(_Check):
    type: Literal["cel"]
    expr: str = Field(min_length=1)


Check = Annotated[
    ExactCheck | ContainsCheck | RegexCheck | JsonSchemaCheck | CelCheck, Field(discriminator="type")
]
CHECK_TYPES = ("exact", "contains", "regex", "json_schema", "cel")


class _ItemLine(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    id: CorpusId
    # the one chat message model both harnesses read (collectors/corpus.py): refused here, not by the engine
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int = Field(default=DEFAULT_MAX_TOKENS, gt=0, le=65536)
    checks: list[Check] = Field(min_length=1)


@dataclass(frozen=True)
class _Compiled:
    """A check ready to run: its regex, schema validator or CEL program built once at load."""

    check: ExactCheck | ContainsCheck | RegexCheck | JsonSchemaCheck | CelCheck
    regex: re.Pattern[str] | None = None
    validator: Any = None
    program: Condition | None = None


@dataclass(frozen=True)
class SemanticItem:
    id: str
    messages: tuple[dict[str, Any], ...]
    max_tokens: int
    checks: tuple[_Compiled, ...]


@dataclass(frozen=True)
class SemanticCorpus:
    path: Path
    digest: str
    items: tuple[SemanticItem, ...]


def _compile(check: Any, where: str) -> _Compiled:
    if isinstance(check, RegexCheck):
        try:
            return _Compiled(check, regex=re.compile(check.pattern))
        except re.error as e:
            raise ConfigError(f"{where}: bad regex {check.pattern!r}: {e}") from e
    if isinstance(check, JsonSchemaCheck):
        cls = jsonschema.validators.validator_for(check.schema_, default=jsonschema.Draft202012Validator)
        try:
            cls.check_schema(check.schema_)
        except jsonschema.SchemaError as e:
            raise ConfigError(f"{where}: bad JSON schema: {e.message}") from e
        return _Compiled(check, validator=cls(check.schema_))
    if isinstance(check, CelCheck):
        try:
            # the context ``_score`` gives it: the parsed answer and the answer text
            return _Compiled(check, program=compile_condition(check.expr, where, CEL_NAMES))
        except PolicyError as e:
            raise ConfigError(e.message) from e
    return _Compiled(check)


def _validation_message(e: ValidationError) -> str:
    err = e.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "(line)"
    msg = str(err["msg"])
    if err["type"] == "union_tag_invalid" or "does not match any of the expected tags" in msg:
        ctx = err.get("ctx") or {}
        msg = f"unknown check type {ctx.get('tag')!r} (known: {', '.join(CHECK_TYPES)})"
    elif err["type"] == "union_tag_not_found":
        msg = f"a check needs a type (one of {', '.join(CHECK_TYPES)})"
    else:
        return corpus_problem(e)
    return f"{where}: {msg}"


def load_semantic_corpus(path: Path, expected_digest: str) -> SemanticCorpus:
    """Read a semantic corpus pinned by digest; every check is validated and compiled here."""
    pinned = read_pinned_jsonl(path, expected_digest)
    items: list[SemanticItem] = []
    seen: set[str] = set()
    for number, row in pinned.rows:
        try:
            line = _ItemLine.model_validate(row)
        except ValidationError as e:
            raise ConfigError(f"{path}:{number}: {_validation_message(e)}") from e
        if line.id in seen:
            raise ConfigError(f"{path}:{number}: item id {line.id!r} appears twice")
        seen.add(line.id)
        try:
            messages = chat_messages(line.messages)
        except ValueError as e:
            raise ConfigError(f"{path}:{number}: {e}") from e
        checks = tuple(_compile(c, f"{path}:{number}: checks[{i}]") for i, c in enumerate(line.checks))
        items.append(SemanticItem(line.id, messages, line.max_tokens, checks))
    return SemanticCorpus(path, pinned.digest, tuple(items))


# --- scoring ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckOutcome:
    type: str
    passed: bool
    reason: str | None = None


@dataclass(frozen=True)
class _NotJson:
    why: str  # what the strict parser said


def _parse(text: str) -> Any:
    """The answer as strict JSON (the ledger's parser: no NaN/Infinity, no key twice), else ``_NotJson``."""
    try:
        return parse_json(text)
    except CanonicalJsonError as e:
        return _NotJson(e.message)


def score_answer(item: SemanticItem, text: str) -> list[CheckOutcome]:
    """Run every check of ``item`` on the answer ``text``; a check that cannot be evaluated fails."""
    stripped = text.strip()
    answer = _parse(stripped)
    out: list[CheckOutcome] = []
    for compiled in item.checks:
        c = compiled.check
        if isinstance(c, ExactCheck):
            ok = stripped == c.value
            out.append(
                CheckOutcome(c.type, ok, None if ok else f"answer {stripped[:80]!r} is not {c.value!r}")
            )
        elif isinstance(c, ContainsCheck):
            ok = c.value in stripped
            out.append(CheckOutcome(c.type, ok, None if ok else f"answer does not contain {c.value!r}"))
        elif isinstance(c, RegexCheck):
            assert compiled.regex is not None
            ok = compiled.regex.search(stripped) is not None
            out.append(CheckOutcome(c.type, ok, None if ok else f"answer does not match /{c.pattern}/"))
        elif isinstance(c, JsonSchemaCheck) and isinstance(answer, _NotJson):
            out.append(CheckOutcome(c.type, False, _not_json(stripped, answer)))
        elif isinstance(c, JsonSchemaCheck):
            error = next(iter(compiled.validator.iter_errors(answer)), None)
            if error is None:
                out.append(CheckOutcome(c.type, True))
            else:
                where = "/".join(str(p) for p in error.absolute_path) or "(root)"
                out.append(CheckOutcome(c.type, False, f"schema: {where}: {error.message}"[:300]))
        else:
            assert compiled.program is not None
            # CEL_NAMES: ``text`` always, ``answer`` only where the answer is JSON (an expression that
            # then reads it fails: an undefined name is an error, never a pass)
            context = (
                {"text": stripped} if isinstance(answer, _NotJson) else {"answer": answer, "text": stripped}
            )
            try:
                ok = compiled.program.holds(context)
                out.append(CheckOutcome(c.type, ok, None if ok else f"CEL `{c.expr}` is false"))
            except PolicyError as e:
                why = e.message
                if isinstance(answer, _NotJson):
                    why = f"{_not_json(stripped, answer)}, and CEL `{c.expr}` reads answer: {why}"
                out.append(CheckOutcome(c.type, False, why[:300]))
    return out


def _not_json(stripped: str, answer: _NotJson) -> str:
    return f"answer is not JSON ({answer.why[:120]}): {stripped[:80]!r}"


# --- running ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SemanticSpec:
    """The semantic run: the pinned corpus and how to ask; the threshold lives in the policy."""

    corpus: Path
    corpus_digest: str
    temperature: float = 0.0
    request_timeout_s: float = 120.0
    lease_s: float = 600.0
    model: str | None = None

    def __post_init__(self) -> None:
        parse_digest(self.corpus_digest)
        if self.temperature < 0 or self.request_timeout_s <= 0 or self.lease_s <= 0:
            raise ConfigError("temperature must be ≥ 0, request_timeout_s and lease_s > 0")


@dataclass
class ItemResult:
    id: str
    passed: bool
    checks: list[CheckOutcome]
    text: str | None
    output_digest: str | None
    finish_reason: str | None
    e2e_ms: float | None
    error: str | None = None
    model: str | None = None  # the model the answer named (its chunks' ``model``)
    reasoning: str | None = None  # what a reasoning parser streamed apart from the answer (not scored)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SemanticResult:
    spec: SemanticSpec
    corpus_digest: str
    harness: str
    harness_digest: str
    started_at: str
    ended_at: str
    outcome: Outcome
    stopped: str | None
    items: list[ItemResult]
    total: int
    # what the endpoint served before the first item and, for a run that completed, after the last
    bindings: list[dict[str, str]] = field(default_factory=list)
    artifacts: dict[str, Path] = field(default_factory=dict)
    # each time the run asked whether the engine still serves (benchmark.EngineCheck.checks): the probes'
    # answers, the canary's, the verdict
    engine_checks: list[dict[str, Any]] = field(default_factory=list)
    # the item the engine refused for the campaign's configuration (outcome config; not scored): its id
    refused: list[str] = field(default_factory=list)
    # the request whose fault stopped the run (outcome "fault"; none: a fault no request shows), and when
    # the run saw it: ``bounds.fault_kind`` / ``bounds.fault_at``
    faulted: list[RequestRecord] = field(default_factory=list)
    fault_at: str | None = None
    # every request the run sent, in order (``REQUESTS_ARTIFACT``)
    requests: list[RequestRecord] = field(default_factory=list)
    # the endpoint measured: the base URL the run was given, without a trailing "/" (``bounds.endpoint``);
    # None: not known (a result built by hand), which the policy never credits
    endpoint: str | None = None
    # each hold of the engine from outside the run saw (``benchmark.EngineHold.held``): one a request timed
    # out in stopped the run (outcome operator-stop); one that changed no answer is only kept
    held: list[dict[str, Any]] = field(default_factory=list)

    @property
    def unjudged(self) -> list[str]:
        """Why the engine could not be judged slow or hung after an item timed out (fail closed: the gate
        fails with it; benchmark.EngineCheck)."""
        return unjudged_checks(self.engine_checks)

    @property
    def bindings_changed(self) -> str | None:
        """Why the endpoint is not shown to have served one model throughout; None when it is."""
        first, *later = self.bindings or [{}]
        return next((why for b in later if (why := bindings_change(first, b))), None)

    @property
    def answered_models(self) -> str:
        """The models the answers named, sorted and comma-joined (``bounds.bindings.answered_models``)."""
        return answered_models(i.model for i in self.items)

    @property
    def timed_out(self) -> int:
        """Of the failed items, those whose request got no (complete) answer in time with no error status
        (``acceptance.request_timed_out``, the test the policy counts the stored ``REQUESTS_ARTIFACT`` by):
        an engine held from outside answers none in flight, so rule ``stopped-from-outside`` subtracts them
        from the failed items of a held run. The scored items' requests are the first ``len(items)`` the
        run sent, in order — every request sent is scored but the one that stopped the run, sent last and
        never an item (a fault, a refusal, a cut: not among the failed items, not counted)."""
        scored = self.requests[: len(self.items)]
        return sum(1 for r in scored if request_timed_out(r.timed_out, r.error, r.http_status))

    @property
    def score(self) -> float | None:
        """The fraction of corpus items that passed; None when the run returned no aggregate result."""
        if self.outcome != "completed" or not self.total:
            return None
        return round(sum(i.passed for i in self.items) / self.total, 6)

    def summary(self) -> dict[str, Any]:
        return {
            "harness": self.harness,
            "harness_digest": self.harness_digest,
            "corpus_digest": self.corpus_digest,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "outcome": self.outcome,
            "stopped": self.stopped,
            "score": self.score if self.score is not None else NO_AGGREGATE,
            "items": self.total,
            "passed": sum(i.passed for i in self.items),
            "bindings": self.bindings,
            "answered_models": self.answered_models,
            "engine_checks": self.engine_checks,
            "endpoint": self.endpoint,
            "held_from_outside": self.held,
        }


def _now() -> str:
    return format_time(datetime.now(UTC))


async def run_semantic_async(
    spec: SemanticSpec,
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
) -> SemanticResult:
    """Ask every corpus item once, in corpus order, and score it; write the item JSONL artifacts.
    ``bindings`` gives what the run is bound to, read before the first item and after the last (default:
    the ids ``/v1/models`` serves; unreadable or changed: an engine fault). An item whose request timed
    out is an engine fault where the engine then does not answer (``benchmark.engine_unresponsive``).
    ``should_stop`` (asked before and during each request) stops the run at once: outcome
    ``operator-stop``, the items so far written, no aggregate result. ``params``: the policy's (its refusal
    params): an item the engine refused for the campaign's configuration (``benchmark.refused_by_campaign``:
    the context length cannot hold its prompt and max_tokens) is not scored and stops the run, outcome
    ``config`` — no aggregate result, nothing of the engine judged; without them it is a failed item, and so
    is a refusal the run's own answers contradict (an access refusal after the engine answered an item of
    the run: ``ledger.answers.refusal``). ``context``: the context length the campaign launched the engine
    with (its option and value): an item that failed without a completion is sized
    (``benchmark.size_request``: its usage, else the engine's tokenizer in the ways of ``counts``,
    ``ledger.answers.prompt_counts``; not given, usage alone), and one whose prompt and max_tokens it
    cannot hold is refused too
    (llama-cpp-python's stream cut on "Requested tokens (N) exceed context window of M"), outcome
    ``config``. ``engine_processes``: the engine's processes (``launch.EngineRun.engine_pids``): an item
    whose request timed out where one of them was found suspended from outside while it was in flight or
    when it timed out (``benchmark.EngineHold``) is not scored and stops the run, outcome ``operator-stop``,
    the reason naming the hold — no slowness or hang of the engine's; so does an engine found held when
    the question whether it still answers found it hanging, and an item whose timeout fell due while the
    harness itself was held (``benchmark.EngineHold.harness_held``), whether or not the engine was too."""
    corpus = load_semantic_corpus(spec.corpus, spec.corpus_digest)
    base = base_url.rstrip("/")
    url = base + "/v1/chat/completions"
    started = _now()
    origin = time.perf_counter()
    deadline = origin + spec.lease_s
    items: list[ItemResult] = []
    outcome: Outcome = "completed"
    stopped: str | None = None
    seen: list[dict[str, str]] = []
    answered: Counter[str] = Counter()  # the items the engine answered, by id (refused_by_campaign)
    refused: list[str] = []
    faulted: list[RequestRecord] = []
    fault_at: str | None = None
    sent: list[RequestRecord] = []  # every request the run sent (``REQUESTS_ARTIFACT``)
    check = EngineCheck(base, spec.request_timeout_s, headers, url=url, model=spec.model)
    hold = EngineHold(engine_processes)
    should_stop = hold.watch(should_stop)  # the operator's stop; each time, a look for a hold from outside
    async with http_session(2, spec.request_timeout_s, headers) as client:
        clock = asyncio.create_task(hold.clock())  # a hold of the harness itself (benchmark.HARNESS_HOLD_S)
        bound, unread = await read_bindings(client, base, bindings)
        if bound is None:
            outcome, stopped = "fault", f"engine fault before the first item: {unread}"
        else:
            seen.append(bound)
        model = spec.model or only_served(bound or {})
        check.model = model  # what a canary asks for: the run's model (none known: unjudged)
        for index, item in enumerate(corpus.items):
            if outcome != "completed":  # the bindings could not be read: no item is asked
                break
            left = deadline - time.perf_counter()
            if left <= 0:
                outcome, stopped = (
                    LEASE_EXPIRED,
                    f"the lease of {spec.lease_s:g} s expired before item {item.id}",
                )
                break
            body: dict[str, Any] = {
                "messages": list(item.messages),
                "max_tokens": item.max_tokens,
                "temperature": spec.temperature,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            if model:
                body["model"] = model
            why = should_stop() if should_stop is not None else None
            if why:
                outcome, stopped = "operator-stop", f"{why} before item {item.id}"
                break
            rec = RequestRecord(item.id, 1, 0, index, _now(), time.perf_counter() - origin)
            sent.append(rec)
            began = hold.mark()
            timeout_s = min(spec.request_timeout_s, left)
            due = time.perf_counter() + timeout_s  # when its timeout falls due (``EngineHold.harness_held``)
            why = await until_stopped(
                send_request(client, url, body, rec, clock_origin=origin, timeout_s=timeout_s),
                should_stop,
            )
            if why:
                outcome, stopped = "operator-stop", f"{why} during item {item.id}"
                if rec.error is None:  # the run cut it (as the benchmark records a request it cut)
                    rec.error = f"{CUT} {stopped}"
                break
            if not rec.fault and rec.error is not None and engine_alive is not None and not engine_alive():
                rec.fault, rec.error = True, rec.error + " (the engine is no longer alive)"
            # a timeout whose deadline fell in a hold of the harness, or whose request's timing spans one (fix
            # 166: the hold ate the time it had), is the hold's
            held = (
                (
                    hold.since(began)
                    or hold.harness_held(due)
                    or hold.harness_spanned(origin + rec.start_s, time.perf_counter())
                )
                if timed_out(rec)
                else None
            )
            if held is not None:  # timed out in a hold from outside: no slowness or hang of the engine's
                outcome, stopped = "operator-stop", f"{held} during item {item.id}"
                rec.error = f"{rec.error}; {held}"
                break
            # The request's timeout was the lease's time left, not the engine's own request timeout: the
            # harness's own bound cut it. Not scored (the engine answered nothing wrong); the run ends
            # lease-expired, no aggregate result — unless the engine then hangs (an engine fault, as the
            # benchmark judges a lease expiring with requests outstanding)
            if not rec.fault and timed_out(rec) and left < spec.request_timeout_s:
                expired = (
                    f"the lease of {spec.lease_s:g} s expired during item {item.id} (its request was cut "
                    f"after the {left:.3g} s the lease had left; the engine's own request timeout is "
                    f"{spec.request_timeout_s:g} s)"
                )
                asking = asyncio.ensure_future(check.hangs())
                why = await until_stopped(asking, should_stop)
                if why:
                    outcome, stopped = "operator-stop", f"{why} during item {item.id}"
                elif asking.result() is not None and (held := hold.since(began)) is not None:
                    outcome, stopped = "operator-stop", f"{held} during item {item.id}"  # held, not hung
                elif (hangs := asking.result()) is not None:
                    outcome, stopped = "fault", f"engine fault at item {item.id}: {expired}; {hangs}"
                else:
                    outcome, stopped = LEASE_EXPIRED, expired
                break
            if timed_out(rec):  # a slow engine, or one that hangs: ask whether it still answers
                asking = asyncio.ensure_future(check.hangs())
                why = await until_stopped(asking, should_stop)
                if why:
                    outcome, stopped = "operator-stop", f"{why} during item {item.id}"
                    break
                if asking.result() is not None and (held := hold.since(began)) is not None:
                    outcome, stopped = "operator-stop", f"{held} during item {item.id}"  # held, not hung
                    rec.error = f"{rec.error}; {held}"
                    break
                if (hangs := asking.result()) is not None:
                    rec.fault, rec.error = True, f"{rec.error}; {hangs}"
            alive = engine_alive is None or engine_alive()
            if context is not None and params is not None and alive and sizable(rec):
                await size_request(client, url, body, rec, context, min(spec.request_timeout_s, left), counts)
            if refused_by_campaign(rec, params, answered) is not None:
                outcome, stopped = CAMPAIGN_CONFIG, refusal_reason(rec, f"item {item.id}")
                refused.append(item.id)
                break
            if rec.ok:
                answered[item.id] += 1
            if rec.fault:
                outcome, stopped = "fault", f"engine fault at item {item.id}: {rec.error}"
                faulted.append(rec)
                fault_at = _now()
                break
            checks = [] if rec.error else score_answer(item, rec.text or "")
            passed = rec.error is None and all(c.passed for c in checks)
            items.append(
                ItemResult(
                    item.id,
                    passed,
                    checks,
                    rec.text,
                    rec.output_digest,
                    rec.finish_reason,
                    rec.e2e_ms,
                    rec.error,
                    rec.model,
                    rec.reasoning,
                )
            )
        if outcome == "completed":  # the same model from the first item to the last
            bound, unread = await read_bindings(client, base, bindings)
            if bound is None:
                outcome, stopped = "fault", f"engine fault after the last item: {unread}"
            else:
                seen.append(bound)
                if changed := bindings_change(seen[0], bound):
                    outcome, stopped = "fault", f"engine fault after the last item: {changed}"
        clock.cancel()
        await asyncio.gather(clock, return_exceptions=True)
        await check.close()
    result = SemanticResult(
        spec,
        corpus.digest,
        HARNESS,
        HARNESS_DIGEST,
        started,
        _now(),
        outcome,
        stopped,
        items,
        len(corpus.items),
        seen,
        engine_checks=check.checks,
        refused=refused,
        faulted=faulted,
        fault_at=(fault_at or _now()) if outcome == "fault" else None,
        requests=sent,
        endpoint=base,
        held=hold.held,
    )
    _write_artifacts(result, out_dir)
    return result


def run_semantic(
    spec: SemanticSpec,
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
) -> SemanticResult:
    """:func:`run_semantic_async` from synchronous code (the campaign runner)."""
    return asyncio.run(
        run_semantic_async(
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


def _write_artifacts(result: SemanticResult, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    every = "".join(json.dumps(i.to_json(), sort_keys=True) + "\n" for i in result.items)
    failed = "".join(json.dumps(i.to_json(), sort_keys=True) + "\n" for i in result.items if not i.passed)
    write_atomic(out_dir / ITEMS_ARTIFACT, every.encode())
    write_atomic(out_dir / FAILURES_ARTIFACT, failed.encode())
    sent = "".join(json.dumps(r.to_json(), sort_keys=True) + "\n" for r in result.requests)
    write_atomic(out_dir / REQUESTS_ARTIFACT, sent.encode())
    result.artifacts = {
        ITEMS_ARTIFACT: out_dir / ITEMS_ARTIFACT,
        FAILURES_ARTIFACT: out_dir / FAILURES_ARTIFACT,
        REQUESTS_ARTIFACT: out_dir / REQUESTS_ARTIFACT,
    }
    if result.engine_checks:  # a run that asked whether the engine still serves keeps what it was told
        checks = "".join(json.dumps(c, sort_keys=True) + "\n" for c in result.engine_checks)
        write_atomic(out_dir / CHECKS_ARTIFACT, checks.encode())
        result.artifacts[CHECKS_ARTIFACT] = out_dir / CHECKS_ARTIFACT


# --- the gate --------------------------------------------------------------------------------------


def _threshold_unreachable(
    result: SemanticResult, failed: Sequence[ItemResult], min_score: float
) -> str | None:
    """For a run its lease cut: the items that failed before the cut, where they already put the score below
    ``min_score`` whatever the items not asked would answer (evidence against the engine: the policy's
    ``harness-lease-expired`` counts the run so); None where the rest could still reach it."""
    total = result.total
    if not failed or not total or total - len(failed) >= min_score * total:
        return None
    shown = ", ".join(i.id for i in failed[:10]) + (" …" if len(failed) > 10 else "")
    return (
        f"{len(failed)} of {total} item(s) {BEFORE_THE_CUT} ({shown}): the score cannot reach "
        f"the threshold {min_score:g} whatever the {total - len(result.items)} item(s) not asked would answer"
    )


def semantic_gate_payload(
    result: SemanticResult,
    *,
    min_score: float,
    order: int | None = None,
    evidence: Sequence[str] = (),
    expect_model: str | None = None,
) -> dict[str, Any]:
    """The ``gate.result`` payload for gate ``semantic``: passed only when the whole corpus was asked
    of an endpoint that served the same models throughout, and the score reaches the policy's
    ``min_score``. ``expect_model`` (the campaign's approved served name, where the engine's answers name
    the model that answered): an answer naming another fails the gate."""
    if isinstance(min_score, bool) or not isinstance(min_score, int | float) or not 0 < min_score <= 1:
        raise ConfigError(f"the semantic threshold must be a number in (0, 1], not {min_score!r}")
    score = result.score
    failed = [i for i in result.items if not i.passed]
    reasons: list[str] = []
    if score is None:
        reasons.append(f"{NO_AGGREGATE}: {result.stopped or 'no items'}")
        if result.outcome == LEASE_EXPIRED and (
            unreached := _threshold_unreachable(result, failed, min_score)
        ):
            reasons.append(unreached)
        elif result.outcome in CUT_OUTCOMES and result.outcome != LEASE_EXPIRED:
            # what failed before an operator's stop, a hold or a refusal that already decides the gate, by the
            # policy's own test (fix 166): the run withholds credit, never what the engine failed
            shown_counts = {"items": result.total, "failed": len(failed)}
            decided = cut_decided(
                {"gate": "semantic", "bounds": {"outcome": result.outcome}, "counts": shown_counts},
                {"semantic_min_score": min_score},
            )
            if decided is not None:
                reasons.append(f"decided before the cut: {decided}")
    elif score < min_score:
        shown = ", ".join(i.id for i in failed[:10]) + (" …" if len(failed) > 10 else "")
        reasons.append(
            f"score {score:g} below the threshold {min_score:g}: {len(failed)} item(s) failed ({shown})"
        )
    if result.bindings_changed and result.bindings_changed not in (result.stopped or ""):
        reasons.append(result.bindings_changed)  # (an engine fault: named once, by the stop)
    if other := other_answered_models(result.answered_models, expect_model):
        reasons.append(other)
    if score is not None:  # an item timed out and the engine could not be judged slow: not passed
        reasons += [f"after an item timed out: {why}" for why in result.unjudged]
    counts = {
        "items": result.total,
        "asked": len(result.items),
        "passed": len(result.items) - len(failed),
        "failed": len(failed),
        "errors": sum(1 for i in result.items if i.error),
    }
    if timed := result.timed_out:  # of the failed items, those whose request timed out: the only ones an
        # engine held from outside excuses (rule stopped-from-outside, read back from REQUESTS_ARTIFACT; a
        # hang otherwise). Left out where none did: the rule then subtracts none, as it should
        counts["timed_out"] = timed
    if result.refused:  # the item the engine refused for the campaign's configuration (outcome config), not
        # scored: the policy's `harness-campaign-config` excuses a run only where its own record shows one
        counts["refused"] = len(result.refused)
    payload: dict[str, Any] = {
        "gate": "semantic",
        "status": "failed" if reasons else "passed",
        "order": order,
        "counts": counts,
        "bounds": {
            "min_score": min_score,
            "score": score,
            "corpus_digest": result.corpus_digest,
            "harness": result.harness,
            "harness_digest": result.harness_digest,
            "outcome": result.outcome,
            # what the fault that stopped the run was, and when it was seen (the policy's stop_cut)
            "fault_kind": run_fault_kind(result.outcome, result.faulted),
            "fault_at": result.fault_at,
            "aggregate": score is not None,
            "failed_items": [i.id for i in failed[:100]],
            # the endpoint measured (the base URL the run was given): the policy credits the result only
            # where it is the one the launch of its attempt served at (harness-other-endpoint)
            "endpoint": result.endpoint,
            # each hold of the engine from outside the run saw (benchmark.EngineHold: when, the processes
            # held), where it saw one: a run it stopped is outcome operator-stop, the reason naming the hold
            **({"held_from_outside": result.held} if result.held else {}),
            # the model measured: what /v1/models served before the first item (the policy credits the
            # result only where that includes the campaign's approved model)
            # and the models its answers named (the policy fails an answer naming another model)
            # (answers that named none add nothing: answered_models is left out)
            "bindings": {
                **(result.bindings[0] if result.bindings else {}),
                **({"answered_models": result.answered_models} if result.answered_models else {}),
            },
        },
        "figures": {"score": score},
        "reason": "; ".join(reasons) if reasons else None,
        "evidence": list(evidence),
    }
    validate_payload("gate.result", 1, payload)
    return payload


def record_semantic_gate(
    recorder: Recorder,
    subject: Mapping[str, str],
    result: SemanticResult,
    *,
    min_score: float,
    order: int | None = None,
    evidence: Sequence[str] = (),
    refs: Sequence[tuple[str, str]] = (),
    expect_model: str | None = None,
) -> tuple[str, dict[str, Any]]:
    """Store the item and failure JSONL as artifacts and record the gate; returns (entry id, payload)."""
    payload = semantic_gate_payload(
        result, min_score=min_score, order=order, evidence=evidence, expect_model=expect_model
    )
    artifacts = [
        recorder.artifact(name, path, media_type="application/x-ndjson")
        for name, path in result.artifacts.items()
    ]
    entry = recorder.record("gate.result", dict(subject), payload, artifacts=artifacts, refs=refs)
    return entry, payload
