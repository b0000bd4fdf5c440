"""The policy file schema (TOML): typed models that refuse unknown fields; errors name file and line."""

from __future__ import annotations

import re
import tomllib
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ledger.answers import Refusal
from ledger.entries import _SUBJECT_KEY, KIND_MODELS, misspelled_subject_field, misspelled_subject_words
from ledger.errors import PolicyError, more_problems
from ledger.listing import SUBJECT_FIELDS
from ledger.signatures import UNKNOWN_CLASS, FailureClass

__all__ = [
    "DERIVED_FIELDS",
    "VERDICT_WORDS",
    "AcceptanceSection",
    "BindingsRule",
    "CelRule",
    "Check",
    "Difference",
    "Gate",
    "PolicyFile",
    "PolicyHeader",
    "RequirementRule",
    "RoutingCheck",
    "RoutingSection",
    "SignerRule",
    "check_verdict_word",
    "known_kinds",
    "parse_duration",
    "parse_policy_text",
    "path_problem",
]

QUALIFIED = "QUALIFIED"
INCONCLUSIVE = "INCONCLUSIVE"
VERDICT_WORDS = (
    QUALIFIED,
    "NOT QUALIFIED — PREREQUISITES",
    "NOT QUALIFIED — RUNTIME RELIABILITY",
    "NOT QUALIFIED — CONTROL",
    "NOT QUALIFIED — SEMANTIC QUALITY",
    "NOT QUALIFIED — PERFORMANCE",
    INCONCLUSIVE,
)
FailingWord = Literal[
    "NOT QUALIFIED — PREREQUISITES",
    "NOT QUALIFIED — RUNTIME RELIABILITY",
    "NOT QUALIFIED — CONTROL",
    "NOT QUALIFIED — SEMANTIC QUALITY",
    "NOT QUALIFIED — PERFORMANCE",
]
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
Name = Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]{0,63}$")]


def check_verdict_word(word: str) -> str:
    """A verdict word, one of ``VERDICT_WORDS`` (a fixture's expectation, say): a misspelled one would match
    no verdict and so assert nothing."""
    if word not in VERDICT_WORDS:
        raise ValueError(f"unknown verdict word {word!r}; known: {', '.join(map(repr, VERDICT_WORDS))}")
    return word


def known_kinds() -> frozenset[str]:
    """The payload kinds the ledger knows (``KIND_MODELS``, what ``ledger kinds`` lists): the one vocabulary
    of every kind a policy names."""
    return frozenset(k for k, _ in KIND_MODELS)


def _kind(value: str) -> str:
    if value not in known_kinds():
        raise ValueError(
            f"unknown kind {value!r} (see `ledger kinds`); known: {', '.join(sorted(known_kinds()))}"
        )
    return value


def _kind_or_any(value: str) -> str:
    return value if value == "*" else _kind(value)


# A kind a policy names: a misspelled one would silently match no entry and switch its part of the policy off
Kind = Annotated[str, AfterValidator(_kind)]
# … or "*", every kind (a freshness bound's default)
KindOrAny = Annotated[str, AfterValidator(_kind_or_any)]
# the fields a gate's `select` compares (``verdict._field`` reads them): ``kind`` and ``in_subject`` whole,
# ``payload.<field>`` (a field of the kind's payload model), ``derived.<name>``, ``subject.<field>``
SELECT_WHOLE = ("kind", "in_subject")
SELECT_PATHS = ("payload", "derived", "subject")


def _failure_class(value: str) -> str:
    known = {c.value for c in FailureClass} | {UNKNOWN_CLASS}
    if value not in known:
        raise ValueError(f"unknown failure class {value!r}; known: {', '.join(sorted(known))}")
    return value


_Class = Annotated[str, AfterValidator(_failure_class)] | None  # a signature's class (None: none matched)
# The facts the policy engine derives from the log for each entry, ``e.derived.<name>`` (CEL) and
# ``derived.<name>`` (a gate's `select`), with the type of each value: the one list of their names. What
# each means is documented where they are derived (``ledger.policy.acceptance._derive`` and the functions
# it names); ``tests/policy/test_fix60_policy_names.py`` fails when a derivation produces a name this
# table lacks, or this table names one none produces. A policy naming any other is refused at load.
DERIVED_FIELDS: dict[str, Any] = {
    "ok": bool,
    "attempt": int,
    "attempt_logged": int,
    "job": str | None,
    "failure_class": _Class,
    "log_failure_signature": str | None,
    "log_failure_class": _Class,
    "log_failure_named": str,
    "log_failure_after_ready_signature": str | None,
    "log_failure_after_ready_class": _Class,
    "log_failure_after_ready_named": str,
    "end_failure_signature": str | None,
    "end_failure_class": _Class,
    "answer_not_completion": str | None,
    "structured_valid": bool,
    "structured_problem": str | None,
    "probe_failed": bool,
    "cut_undecided": bool,
    # which refusal of the campaign's configuration a probe shows (``ledger.answers.refusal``; its words
    # ``ledger.answers.REFUSALS``), None: none
    "refusal": Refusal | None,
    "sequential_slowest_ms": float | None,
    "gpu_events": list[dict[str, Any]],
    "gpu_events_named": str,
    "gpu_events_in_campaign": list[dict[str, Any]],
    "gpu_events_in_campaign_named": str,
    "gpu_events_during_run": list[dict[str, Any]],
    "gpu_events_during_run_named": str,
    "kernel_logs_unread_during_run": list[str],
    "after_launch_end": bool,
    # a probe or harness result that failed for lack of an answer while its engine was stopped from outside
    # (``acceptance._mark_stop_cuts``): the launch and its end, named; None: none
    "stop_cut": str | None,
    # … and whether the launch it names was held from outside (``params.held_stop_signatures``, read from
    # what the launch stored): its timed-out requests are the hold's, whatever the run's fault kind
    "stop_cut_held": bool,
    "operator_stopped": bool,
    "newer_run": bool,
    "newer_run_named": str,
    "unmatched_job_ends": list[str],
    "launch_devices_missing": list[str],
    "newest": bool,
    "newest_named": str,
    "gpus_gone": list[str],
    "gpus_gone_named": str,
    "artifact_problem": str | None,
    "cut_decided": str | None,
}


def _close(name: str, known: Sequence[str], cutoff: float = 0.6) -> str:
    from difflib import get_close_matches

    near = get_close_matches(name, known, n=1, cutoff=cutoff)
    return f" (did you mean {near[0]!r}?)" if near else ""


# The top-level names of an entry as a policy's CEL sees it (``snapshot.Evidence.view``; a test keeps the two
# equal): ``e.paylod.x`` or ``e.colected_at`` names nothing, and is refused at load like a misspelled field.

ENTRY_VIEW_FIELDS = (
    "id",
    "seq",
    "kind",
    "subject",
    "payload",
    "derived",
    "refs",
    "signer",
    "roles",
    "collected_at",
    "logged_at",
    "artifacts",
    "in_subject",
)


def path_problem(
    head: str, rest: Sequence[str], kinds: Sequence[str] | None, *, subject_fields: Sequence[str] = ()
) -> str | None:
    """Why an entry's ``<head>.<rest…>`` names nothing there (a misspelling: it would read as absent,
    match nothing, or fail only when evaluation reaches it), or None: ``payload.<field>`` a field of a
    payload model of ``kinds`` (None: the kinds cannot be told; then payload names are not checked) —
    its first name only: no payload model types the fields of a nested object (dicts, lists, ``Any``);
    ``derived.<name>`` one of ``DERIVED_FIELDS``; ``subject.<field>`` one of
    ``ledger.listing.SUBJECT_FIELDS`` or of ``subject_fields``, the further ones the policy declares
    (``[policy] subject_fields``, ``PolicyHeader``). Read behind a guard (``has(e.payload.x)``,
    ``'x' in e.payload``) a name that can never be there is as misspelled. ``head`` itself must be a name
    an entry has (``ENTRY_VIEW_FIELDS``)."""
    if head not in ENTRY_VIEW_FIELDS:
        names = ", ".join(ENTRY_VIEW_FIELDS)
        return f"an entry has no field {head!r}{_close(head, ENTRY_VIEW_FIELDS)}; known: {names}"
    if not rest:
        return None
    name = rest[0]
    if head == "derived":
        if name not in DERIVED_FIELDS:
            return (
                f"no such derived fact{_close(name, list(DERIVED_FIELDS))}; "
                f"known: {', '.join(sorted(DERIVED_FIELDS))}"
            )
        return None
    if head == "subject":
        if name not in SUBJECT_FIELDS and name not in subject_fields:
            subjects = (*SUBJECT_FIELDS, *subject_fields)
            declared = f" (declared: {', '.join(subject_fields)})" if subject_fields else ""
            return (
                f"no such subject field{_close(name, subjects)}; "
                f"known: {', '.join(SUBJECT_FIELDS)}{declared} "
                "(a policy reading a further field the ledger records declares it: "
                f'[policy] subject_fields = ["{name}"])'
            )
        return None
    if head != "payload" or kinds is None:
        return None
    models, fields = _payload_models(tuple(kinds))
    if not models:
        return None
    if name not in fields:
        what, known = "/".join(dict.fromkeys(kinds)), sorted(fields)
        return f"{what} payloads have no field {name!r}{_close(name, known)}; known: {', '.join(known)}"
    return None


@lru_cache(maxsize=256)
def _payload_models(kinds: tuple[str, ...]) -> tuple[tuple[type[BaseModel], ...], frozenset[str]]:
    """The payload models of ``kinds`` (every version) and the fields any of them has."""
    models = tuple(m for (k, _), m in KIND_MODELS.items() if k in kinds)
    return models, frozenset(f for m in models for f in m.model_fields)


def parse_duration(text: str) -> float:
    """``"90s"``, ``"15m"``, ``"24h"``, ``"30d"`` → seconds."""
    m = _DURATION.fullmatch(text)
    if m is None:
        raise ValueError(f"duration {text!r} must look like 90s, 15m, 24h or 30d")
    return float(m.group(1)) * _UNITS[m.group(2)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PolicyHeader(_Model):
    name: Name
    kind: Literal["qualification", "acceptance", "routing"]
    version: int = 1
    description: str = ""
    acceptance: Name | None = None  # the evidence-acceptance policy a qualification/routing policy uses
    # subject fields outside ``SUBJECT_FIELDS`` the policy reads (``-s region=…``: the ledger records a field
    # it does not know, with a warning): each a name an entry's subject may hold (``entries._SUBJECT_KEY``),
    # neither a known field nor a near-spelling of one (a declared ``campain`` would let a misspelling in)
    subject_fields: list[str] = Field(default_factory=list)

    @field_validator("subject_fields")
    @classmethod
    def _subject_fields(cls, v: list[str]) -> list[str]:
        for name in v:
            if not _SUBJECT_KEY.fullmatch(name):
                raise ValueError(f"subject field {name!r} must match {_SUBJECT_KEY.pattern}")
            if name in SUBJECT_FIELDS:
                raise ValueError(
                    f"subject field {name!r} is known already (SUBJECT_FIELDS): declare only others"
                )
            near = misspelled_subject_field(name)
            if near is not None:
                raise ValueError(
                    f"subject field {name!r} is a near-spelling of a known one "
                    f"({misspelled_subject_words(name, near)}): a declared misspelling would read as "
                    "absent; declare only fields the ledger records under another name"
                )
            if v.count(name) > 1:
                raise ValueError(f"subject field {name!r} is declared twice")
        return v


class SignerRule(_Model):
    """Roles a signer must hold for a kind (one of ``roles``) and roles that disqualify it."""

    roles: list[str] = Field(min_length=1)
    forbid: list[str] = Field(default_factory=list)
    reason: str = ""


class Difference(_Model):
    """One compared property of a rule: ``got`` (CEL over ``e``) against ``want`` (CEL, e.g. a param).
    A ``got`` that cannot be read (the entry lacks the field) counts as different: "not recorded"."""

    label: str = Field(min_length=1)
    got: str
    want: str


class CelRule(_Model):
    """A data-driven exclusion: entries of ``kinds`` for which ``when`` holds are rejected with ``detail``.

    With ``differences``, ``when`` only scopes the rule: it rejects when any difference differs, and the
    detail names each one that does (``requests 6, approved 96``)."""

    name: Name
    kinds: list[Kind] = Field(min_length=1)
    when: str
    detail: str
    differences: list[Difference] = Field(default_factory=list)
    # What the rule takes away. "record": the entry is not evidence of the subject at all (a probe that
    # answered another engine). "credit": it is not credited, but a failure it shows stays evidence against
    # the engine — an entry the kind's ``[acceptance.passing]`` does not hold for and ``against`` (this
    # rule's, else the kind's ``[acceptance.against]``) does. Only a supersession, with its reason, withdraws
    # a failure.
    # Required: a rule that leaves it out must not withdraw failures by default.
    withholds: Literal["record", "credit"]
    against: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _withholds_required(cls, data: Any) -> Any:
        if isinstance(data, dict) and "withholds" not in data:
            raise ValueError(
                f'rule {data.get("name")!r} names no `withholds`: set withholds = "credit" (not credited; a '
                'failure it shows still counts against the engine) or withholds = "record" (not evidence of '
                "the subject at all, failures included)"
            )
        return data

    @model_validator(mode="after")
    def _against_needs_credit(self) -> CelRule:
        if self.against is not None and self.withholds != "credit":
            raise ValueError(
                "`against` narrows what a rule that withholds credit keeps: set withholds = 'credit'"
            )
        return self


class RequirementRule(_Model):
    """Entries of ``kinds`` (and ``when``, if given) need a review PASS / an acceptance to be credited."""

    kinds: list[Kind] = Field(min_length=1)
    when: str | None = None
    reason: str = ""


class BindingsRule(_Model):
    """Engine bindings that must equal the campaign's pinned manifest."""

    kinds: list[Kind] = Field(default_factory=lambda: ["engine.launch"])
    keys: list[str] = Field(min_length=1)
    require_manifest: bool = False


class AcceptanceSection(_Model):
    signers: dict[Kind, SignerRule] = Field(default_factory=dict)
    passing: dict[Kind, str] = Field(default_factory=dict)
    # per kind: which entries that are not passing show a failure — evidence against the engine that a rule
    # withholding credit (stale, review FAIL, rejected acceptance, missing artifact, bindings …) never drops
    against: dict[Kind, str] = Field(default_factory=dict)
    freshness: dict[KindOrAny, str] = Field(default_factory=dict)
    post_reset_kinds: list[Kind] = Field(default_factory=list)
    artifacts: Literal["verify", "exists"] = "verify"
    signatures: Literal["verify", "trust-log"] = "verify"
    review_required: list[RequirementRule] = Field(default_factory=list)
    acceptance_required: list[RequirementRule] = Field(default_factory=list)
    bindings: BindingsRule | None = None
    repaired_commit_required: bool = True
    # kinds a campaign's run outputs (its engine, its probes, its harness results): each belongs to the job
    # the log knows it ran in (see `derived.job`), whether or not it names one
    job_output_kinds: list[Kind] = Field(
        default_factory=lambda: ["engine.launch", "health.probe", "gate.result"]
    )

    @field_validator("freshness")
    @classmethod
    def _durations(cls, v: dict[str, str]) -> dict[str, str]:
        for text in v.values():
            parse_duration(text)
        return v


class Check(_Model):
    """``expr`` judges the gate's selection; when it fails, ``fail`` is the reason. With ``each`` (CEL over
    one selected entry ``e``, with ``params`` and ``manifest``) and ``detail`` (a template over ``e``), the
    reason also names each selected entry for which ``each`` does not hold — which probe failed, and why.
    ``each`` only names: the verdict is ``expr``'s. ``id`` (optional, unique in its gate) is the name another
    policy reads the check by (the routing policy's ``params.served_identity``), so rewording ``fail`` breaks
    no reference."""

    expr: str
    fail: str
    each: str | None = None
    detail: str | None = None
    id: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _naming(self) -> Check:
        if (self.each is None) != (self.detail is None):
            raise ValueError("a check names failing entries with both `each` and `detail`, or neither")
        return self


class Requirement(_Model):
    """A further condition (CEL over the gate's selection) the gate needs before it can judge at all; when
    it does not hold the gate is ``missing`` (INCONCLUSIVE) with ``missing`` as the reason."""

    expr: str
    missing: str


class Gate(_Model):
    """One rung of the ladder. Evidence is selected by ``select`` (plain field equalities, cheap on large
    campaigns) or ``kinds``, then optionally narrowed by the CEL ``where``; ``checks`` judge the selection."""

    name: Name
    verdict: FailingWord
    description: str = ""
    kinds: list[Kind] = Field(default_factory=list)
    select: list[dict[str, Any]] = Field(default_factory=list)
    where: str | None = None
    require: str | None = None
    missing: str = "no accepted evidence"
    # what the gate further needs to judge, asked in order once every check holds (the first unmet names it)
    requires: list[Requirement] = Field(default_factory=list)
    checks: list[Check] = Field(min_length=1)

    @model_validator(mode="after")
    def _selection(self, info: ValidationInfo) -> Gate:
        if bool(self.kinds) == bool(self.select):
            raise ValueError("a gate selects its evidence with exactly one of `kinds` or `select`")
        # the policy's declared subject fields (``parse_policy_text`` passes them as validation context)
        declared = (info.context or {}).get("subject_fields", ())
        for sel in self.select:
            if not isinstance(sel.get("kind"), str):
                raise ValueError("every `select` item names a `kind`")
            _check_select(sel, self.name, declared)
        ids = [c.id for c in self.checks if c.id is not None]
        if len(ids) != len(set(ids)):
            raise ValueError(f"check ids of a gate are unique: {sorted(i for i in ids if ids.count(i) > 1)}")
        return self

    def selected_kinds(self) -> list[str]:
        return list(self.kinds) if self.kinds else [str(s["kind"]) for s in self.select]


def _check_select(sel: dict[str, Any], gate: str = "", subject_fields: Sequence[str] = ()) -> None:
    """A `select` item's fields are ones selection reads (a misspelled one matches no entry, and the gate
    would judge no evidence): its kind a known kind, ``payload.<field>`` a field of that kind's payload,
    ``derived.<name>`` a derived fact (``DERIVED_FIELDS``), ``subject.<field>`` a subject field
    (``SUBJECT_FIELDS``, or one of the policy's declared ``subject_fields``), and its value one that field
    can hold (``_check_select_value``)."""
    kind = _kind(str(sel["kind"]))
    models = [m for (k, _), m in KIND_MODELS.items() if k == kind]
    for key, want in sel.items():
        head, dot, rest = key.partition(".")
        if key in SELECT_WHOLE:
            continue
        if head in SELECT_PATHS and dot and rest:
            problem = path_problem(head, rest.split("."), [kind], subject_fields=subject_fields)
            if problem is not None:
                raise ValueError(f"gate {gate!r}: select field {key!r}: {problem}")
            path = rest.split(".")
            if head == "payload":
                adapters = [a for m in models if (a := _field_adapter(m, path)) is not None]
            elif head == "derived":
                # a path into a derived value (``derived.gpu_events.x``) is not typed here
                adapters = [_adapter(path[0])] if len(path) == 1 else []
            else:
                adapters = [_adapter("")] if len(path) == 1 else []  # subject values are texts
            _check_select_value(gate, kind, adapters, key, want)
            continue
        raise ValueError(
            f"unknown select field {key!r}; a select item compares {', '.join(SELECT_WHOLE)} or "
            f"{', '.join(p + '.<field>' for p in SELECT_PATHS)}"
        )


@lru_cache(maxsize=64)
def _adapter(derived: str) -> TypeAdapter[Any]:
    """The type of the derived fact ``derived``'s values; "": a subject field's (a text)."""
    return TypeAdapter(DERIVED_FIELDS[derived] if derived else str)


def _check_select_value(
    gate: str, kind: str, adapters: Sequence[TypeAdapter[Any]], key: str, want: Any
) -> None:
    """A select value is one the field can hold, as ingest types it (the kind's payload model, strict): a
    value no accepted entry can have (``"payload.check" = "helth"``, ``"payload.ok" = "true"``) would
    select nothing, and the gate judge no evidence. Mirrors selection (``verdict._equal``): a list is the
    field's whole value where the field holds lists, else "any of" (then every item is one it can hold).
    A path into a field typed ``Any`` (``payload.details.x``) is not checked: the model types no value.
    ``adapters``: the types the field may have (the kind's payload models'; a derived fact's; a subject
    field's, a text); none: not checked."""
    if not adapters or any(_holds(a, want) for a in adapters):
        return
    bad = want
    if isinstance(want, list) and want:
        wrong = [w for w in want if not any(_holds(a, w) for a in adapters)]
        if not wrong:
            return
        bad = wrong[0]
    what = repr(bad) if bad is want else f"{bad!r} (in {want!r})"
    allowed = "; ".join(dict.fromkeys(_allowed(a, bad) for a in adapters))
    raise ValueError(
        f"gate {gate!r}: select {key!r} = {what}: no {kind} entry can hold it (ingest refuses it), so it "
        f"would select nothing; allowed: {allowed}"
    )


def _field_adapter(model: type[BaseModel], path: list[str]) -> TypeAdapter[Any] | None:
    """The type (with its constraints) ingest gives ``payload.<path>`` of ``model``; None where the model
    does not type it (no such field in this version, or a path into an untyped ``Any``/``dict`` value)."""
    info = model.model_fields.get(path[0])
    if info is None:
        return None
    tp: Any = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
    for part in path[1:]:
        tp = _member(tp, part)
        if tp is None:
            return None
    return None if tp is Any else TypeAdapter(tp)


def _member(tp: Any, part: str) -> Any:
    """The type of ``part`` inside a value of type ``tp`` (a nested model's field, a typed dict's value),
    None where ``tp`` does not type it."""
    args = [a for a in get_args(tp) if a is not type(None)] if get_origin(tp) in (Union, UnionType) else [tp]
    if len(args) != 1:
        return None
    (inner,) = args
    if get_origin(inner) is Annotated:
        inner = get_args(inner)[0]
    if isinstance(inner, type) and issubclass(inner, BaseModel):
        info = inner.model_fields.get(part)
        if info is None:
            return None
        return Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
    if get_origin(inner) is dict and len(get_args(inner)) == 2 and get_args(inner)[1] is not Any:
        return get_args(inner)[1]
    return None


def _holds(adapter: TypeAdapter[Any], value: Any) -> bool:
    try:
        adapter.validate_python(value, strict=True)
    except ValidationError:
        return False
    return True


def _allowed(adapter: TypeAdapter[Any], value: Any) -> str:
    """The values a field allows, for the refusal: a closed set's members, else what the type says."""
    lits = _literals(adapter.core_schema)
    if lits is not None:
        return ", ".join(repr(v) for v in lits)
    try:
        adapter.validate_python(value, strict=True)
    except ValidationError as e:
        return str(e.errors()[0]["msg"]).removeprefix("Input should be ")
    return "(any)"


def _literals(schema: Any) -> list[Any] | None:
    """The members of a closed set (a ``Literal`` field, optionally ``None``-able), else None."""
    t = schema.get("type")
    if t == "literal":
        return list(schema["expected"])
    if t in ("nullable", "default", "function-after", "function-before"):
        inner = _literals(schema["schema"])
        return None if inner is None else inner + ([None] if t == "nullable" else [])
    return None


class RoutingCheck(_Model):
    name: Name
    applies: str = "true"
    for_each: str | None = None
    expr: str
    fail: str


class RoutingSection(_Model):
    qualification: Name = "backend-qualification"
    verdict_max_age: str = "7d"
    verdict_roles: list[str] = Field(default_factory=lambda: ["reviewer", "operator", "admin"])
    match_subject: list[str] = Field(default_factory=lambda: ["backend", "model", "host"])
    probe_max_age: str = "1h"
    host_fact: dict[str, str] = Field(default_factory=dict)  # fact name → CEL per host entry `e`
    checks: list[RoutingCheck] = Field(min_length=1)

    @field_validator("verdict_max_age", "probe_max_age")
    @classmethod
    def _duration(cls, v: str) -> str:
        parse_duration(v)
        return v


class PolicyFile(_Model):
    policy: PolicyHeader
    params: dict[str, Any] = Field(default_factory=dict)
    acceptance: AcceptanceSection | None = None
    rules: list[CelRule] = Field(default_factory=list)
    gates: list[Gate] = Field(default_factory=list)
    routing: RoutingSection | None = None


# --- parsing with locations -------------------------------------------------------------------------


def _header_lines(text: str) -> list[tuple[int, str]]:
    """(line number, table path) for every ``[table]`` / ``[[array]]`` header."""
    out = []
    for no, line in enumerate(text.splitlines(), start=1):
        s = line.strip()
        if s.startswith("["):
            out.append((no, s.strip("[]").strip()))
    return out


_KEY_LINE = re.compile(r'^\s*(?:"([^"]*)"|([^\s="]+))\s*=')


@dataclass(frozen=True)
class _Layout:
    """A policy text's lines, its table headers (in order, and each name's lines) and the key each line
    sets (a bare or double-quoted key before ``=``; None for other lines)."""

    lines: list[str]
    headers: list[tuple[int, str]]
    by_name: dict[str, list[int]]
    keys: list[str | None]


@lru_cache(maxsize=8)
def _layout(text: str) -> _Layout:
    """``text`` read once for all the locations a load asks for."""
    lines = text.splitlines()
    keys: list[str | None] = []
    for line in lines:
        m = _KEY_LINE.match(line)
        keys.append(None if m is None else (m[1] if m[1] is not None else m[2]))
    headers = _header_lines(text)
    by_name: dict[str, list[int]] = {}
    for no, name in headers:
        by_name.setdefault(name, []).append(no)
    return _Layout(lines, headers, by_name, keys)


def locate(text: str, loc: tuple[int | str, ...]) -> int | None:
    """Best-effort line of the TOML key at pydantic error location ``loc``."""
    layout = _layout(text)
    headers, keys = layout.headers, layout.keys
    table_parts: list[str] = []
    index: int | None = None
    start, end = 1, len(layout.lines)
    rest: list[int | str] = list(loc)
    # Walk the dotted path: tables and arrays of tables narrow the region, the last string is the key.
    while rest:
        part = rest[0]
        if isinstance(part, int):
            index = part
            rest.pop(0)
            continue
        candidate = ".".join([*table_parts, str(part)])
        matches = [no for no in layout.by_name.get(candidate, ()) if start <= no <= end]
        if not matches:
            break
        table_parts.append(str(part))
        rest.pop(0)
        if rest and isinstance(rest[0], int):
            index = int(rest.pop(0))
        chosen = matches[index] if index is not None and index < len(matches) else matches[0]
        index = None
        start = chosen
        inside = candidate + "."
        later = (
            no
            for no, name in headers[bisect_right(headers, (start, "\uffff")) :]
            if not name.startswith(inside)
        )
        end = next(later, len(layout.lines) + 1) - 1
    key = next((p for p in rest if isinstance(p, str)), None)
    if key is None:
        return start if table_parts else None
    for no in range(start, end + 1):
        if keys[no - 1] == key:
            return no
    return start if table_parts else None


def key_line(text: str, table: str, index: int | None, key: str) -> int | None:
    """Line of ``key`` inside the ``index``-th ``[[table]]`` (or ``[table]``)."""
    parts: list[int | str] = [*table.split(".")]
    if index is not None:
        parts.append(index)
    parts.append(key)
    return locate(text, tuple(parts))


def _declared_subject_fields(data: Any) -> tuple[str, ...]:
    """``[policy] subject_fields`` as written, for checking the gates' `select` (the header's own validator
    refuses a declaration that is not a list of valid names; then this is empty)."""
    header = data.get("policy") if isinstance(data, dict) else None
    declared = header.get("subject_fields") if isinstance(header, dict) else None
    if not isinstance(declared, list) or not all(isinstance(n, str) for n in declared):
        return ()
    return tuple(declared)


def parse_policy_text(text: str, filename: str) -> PolicyFile:
    """Parse and validate a policy file's text; errors name the file and, where possible, the line."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(e))
        where = f"{filename}:{m.group(1)}:{m.group(2)}" if m else filename
        raise PolicyError(f"{where}: TOML syntax error: {str(e).split(' (at line')[0]}") from e
    try:
        return PolicyFile.model_validate(data, context={"subject_fields": _declared_subject_fields(data)})
    except ValidationError as e:
        err = e.errors()[0]
        loc = tuple(err["loc"])
        line = locate(text, loc)
        where = f"{filename}:{line}" if line else filename
        path = ".".join(str(p) for p in loc) or "(root)"
        msg = (
            "unknown field"
            if err["type"] == "extra_forbidden"
            else str(err["msg"]).removeprefix("Value error, ")
        )
        more = more_problems(e.errors(), unknown="unknown field")
        raise PolicyError(f"{where}: {path}: {msg}{more}") from e
