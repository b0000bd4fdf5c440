"""Find, read, validate and compile policy files; the policy digest is BLAKE3 of the file's bytes."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property, lru_cache, partial
from pathlib import Path
from typing import Any

from ledger.errors import PolicyError
from ledger.hashing import blake3_hex
from ledger.policy.conditions import (
    Condition,
    Read,
    compile_condition,
    paths_read,
    template_attribute_fields,
    template_names,
    template_paths,
)
from ledger.policy.model import (
    ENTRY_VIEW_FIELDS,
    AcceptanceSection,
    CelRule,
    Gate,
    PolicyFile,
    RequirementRule,
    RoutingCheck,
    RoutingSection,
    key_line,
    locate,
    parse_duration,
    parse_policy_text,
    path_problem,
)

__all__ = [
    "ROUTING_ENTRIES",
    "ROUTING_HOST_FACT_KINDS",
    "ROUTING_ITEMS",
    "ROUTING_LISTS",
    "ROUTING_NAMES",
    "ROUTING_PROBE_FIELDS",
    "ROUTING_PROBE_KINDS",
    "ROUTING_SHAPES",
    "ROUTING_TEXTS",
    "CompiledGate",
    "LoadedPolicy",
    "default_policy_dir",
    "list_policies",
    "load_policy",
    "routing_shapes",
]


def default_policy_dir() -> Path:
    """``$LEDGER_POLICY_DIR``, else the policies shipped with the package (``policies/``)."""
    env = os.environ.get("LEDGER_POLICY_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent / "policies"


@dataclass(frozen=True)
class CompiledGate:
    spec: Gate
    where: Condition | None
    require: Condition | None
    requires: tuple[tuple[Condition, str], ...]  # further conditions to judge at all, with their reasons
    # per check: its ``expr``, its ``fail`` text, and the (``each``, ``detail``) that name the selected
    # entries it failed on (None: it names none)
    checks: tuple[tuple[Condition, str, tuple[Condition, str] | None], ...]


@dataclass(frozen=True)
class CompiledRoutingCheck:
    spec: RoutingCheck
    applies: Condition
    expr: Condition


@dataclass(frozen=True)
class LoadedPolicy:
    """A policy file as evaluated: its bytes (and their digest), its validated spec, its compiled CEL."""

    name: str
    path: Path
    data: bytes
    spec: PolicyFile
    acceptance_policy: LoadedPolicy | None = None
    rules: tuple[tuple[CelRule, Condition], ...] = ()
    # rule name → its compiled differences: (label, got, want)
    # by ``rule_key``: a rule name may name several tables
    rule_differences: Mapping[tuple[Any, ...], tuple[tuple[str, Condition, Condition], ...]] = field(
        default_factory=dict
    )
    passing: Mapping[str, Condition] = field(default_factory=dict)
    against: Mapping[str, Condition] = field(default_factory=dict)
    # rule name → its own ``against`` (a rule that withholds credit and narrows what it keeps)
    rule_against: Mapping[tuple[Any, ...], Condition] = field(default_factory=dict)
    review_required: tuple[tuple[RequirementRule, Condition | None], ...] = ()
    acceptance_required: tuple[tuple[RequirementRule, Condition | None], ...] = ()
    gates: tuple[CompiledGate, ...] = ()
    routing_checks: tuple[CompiledRoutingCheck, ...] = ()
    host_facts: Mapping[str, Condition] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        return "blake3:" + blake3_hex(self.data)

    @property
    def kind(self) -> str:
        return self.spec.policy.kind

    @property
    def params(self) -> dict[str, Any]:
        base = dict(self.acceptance_policy.params) if self.acceptance_policy else {}
        base.update(self.spec.params)
        return base

    @cached_property
    def acceptance(self) -> AcceptanceSection:
        """The acceptance policy's ``[acceptance]`` with this policy's own ``[acceptance]`` keys over it
        (``merge_acceptance``): a partial table changes only what it sets."""
        base = self.acceptance_policy.acceptance if self.acceptance_policy is not None else None
        return merge_acceptance(base, self.spec.acceptance)

    def freshness_seconds(self) -> dict[str, float]:
        return {k: parse_duration(v) for k, v in self.acceptance.freshness.items()}

    def identity(self) -> dict[str, Any]:
        """Name and digest of this policy and of the acceptance policy it uses."""
        out: dict[str, Any] = {"name": self.name, "digest": self.digest}
        if self.acceptance_policy is not None:
            out["acceptance"] = {"name": self.acceptance_policy.name, "digest": self.acceptance_policy.digest}
        return out


# [acceptance] keys whose tables are per kind: a policy's own entries are merged over the acceptance
# policy's kind by kind (a qualification that bounds one kind's freshness keeps the others' bounds)
_PER_KIND = ("signers", "passing", "against", "freshness")


def merge_acceptance(base: AcceptanceSection | None, own: AcceptanceSection | None) -> AcceptanceSection:
    """A policy's ``[acceptance]`` over its acceptance policy's: only the keys it sets replace the acceptance
    policy's (``model_fields_set``), the per-kind tables kind by kind; a key it leaves out keeps the
    acceptance policy's value, never the schema's empty default (which would drop every review, acceptance
    and freshness requirement)."""
    if own is None:
        return base if base is not None else AcceptanceSection()
    if base is None:
        return own
    update: dict[str, Any] = {}
    for key in own.model_fields_set:
        value = getattr(own, key)
        update[key] = {**getattr(base, key), **value} if key in _PER_KIND else value
    return base.model_copy(update=update)


def _where(filename: str, text: str, table: str, index: int | None, key: str) -> str:
    line = key_line(text, table, index, key)
    return f"{filename}:{line}" if line else filename


# What each kind of condition's context holds (the evaluators build exactly these): a condition reading
# any other variable is refused when the policy loads (``compile_condition``'s ``names``).
_ENTRY_NAMES = frozenset({"e", "params", "manifest", "job"})  # acceptance rules, differences, requirements
_PASSING_NAMES = frozenset({"e", "params"})  # acceptance.passing, a gate's `where`, routing host facts
_GATE_NAMES = frozenset({"evidence", "params", "manifest", "count"})  # require, requires, checks
_EACH_NAMES = frozenset({"e", "params", "manifest"})  # a check's `each`
# the routing gate's context: ``check_routing_change`` refuses to judge when what it builds is not these
ROUTING_NAMES = frozenset(
    {"request", "verdict", "verdict_age_s", "verdict_age_text", "max_verdict_age_s", "host", "current",
     "deployment", "gpus", "services", "probes", "identities_text", "params", "routing", "item",
     "qualified_engine", "qualified_engine_text", "standing_failures", "control_answer"}
)  # fmt: skip


def routing_names(for_each: str | None) -> frozenset[str]:
    """The names a routing check's `expr` and `fail` may read: ``item`` only in a check with `for_each`
    (one item at a time); its `applies` is judged once, on no item (``routing_names(None)``)."""
    return ROUTING_NAMES if for_each else ROUTING_NAMES - {"item"}


# what a routing check's `fail` message may name beyond its CEL context (``check_routing_change`` fills
# exactly these)
ROUTING_TEXTS = frozenset({"verdict_withdrawn_text"})

# What the routing context's entries and lists hold (``check_routing_change`` builds exactly these, and
# refuses to judge where what it built is not): read through them, a name is checked when the policy loads
# like an entry's (``model.path_problem``), so a misspelling is refused naming file, line and name, never
# read as absent at check time.
# a context name that is one entry (its view, ``Evidence.view``) → the kinds it can be
ROUTING_ENTRIES: Mapping[str, tuple[str, ...]] = {"verdict": ("verdict",)}
# ``probes``: entries of these kinds, each view with these further names (``routing._probe_views``)
ROUTING_PROBE_KINDS = ("health.probe",)
ROUTING_PROBE_FIELDS = frozenset({"serves_model", "newest"})
# the other lists a check may take one `item` at a time (`for_each`) → the names each item holds
ROUTING_ITEMS: Mapping[str, frozenset[str]] = {
    "services": frozenset(
        {"name", "device", "engine", "engine_key", "model", "model_key", "gpus", "gpus_text", "multi_gpu",
         "env", "gpu_memory_utilization"}
    ),
    "gpus": frozenset(
        {"gpu", "util_sum", "util_sum_text", "within_max", "services", "detail", "gone_text", "faults",
         "faults_text", "pci_text"}
    ),
    "standing_failures": frozenset({"campaign", "entry", "verdict", "reason"}),
}  # fmt: skip
# the routing context's other names → the names each holds at its top level (``check_routing_change``
# builds exactly these where the value is a map, and refuses to judge where it is not; ``host`` also holds
# each of the policy's `[routing.host_fact]` facts: ``routing_shapes``). A name mapped to no names is a
# scalar (a number, a text, null): no field of it is there. A misspelt name read of one (``host.gpu_indexs``,
# ``current.verdct``) is refused at load, naming file, line and name, never read as absent at check time.
ROUTING_SHAPES: Mapping[str, frozenset[str]] = {
    "request": frozenset({"action", "subject", "subject_text", "model_key"}),
    "host": frozenset(
        {"name", "key", "gpu_indexes", "gpu_text", "gpu_faults_unplaced", "gpu_faults_unplaced_text",
         "gpu_probe_text"}
    ),
    # the re-derived verdict (``routing._rederive``; null where no verdict is trusted)
    "current": frozenset(
        {"verdict", "reason", "subject", "size", "reference_time", "policy_changed", "engine",
         "launch_engines", "device", "machine", "model_revision", "host_probes"}
    ),
    # the validated layout (``routing.validate_deployment``) and its host as host names compare
    "deployment": frozenset({"host", "services", "host_key"}),
    # the policy's [routing] table, less its checks and host facts
    "routing": frozenset(RoutingSection.model_fields) - {"checks", "host_fact"},
    **dict.fromkeys(
        ("verdict_age_s", "verdict_age_text", "max_verdict_age_s", "identities_text", "qualified_engine",
         "qualified_engine_text", "control_answer"),
        frozenset(),
    ),
}  # fmt: skip


def routing_shapes(host_facts: Iterable[str]) -> dict[str, frozenset[str]]:
    """``ROUTING_SHAPES`` for a policy whose `[routing.host_fact]` names ``host_facts``: ``host`` holds
    each."""
    return {**ROUTING_SHAPES, "host": ROUTING_SHAPES["host"] | frozenset(host_facts)}


# every list of the routing context → the label a macro's variable over it (or an index of it) reads as
ROUTING_LISTS: Mapping[str, str] = {name: f"{name}[]" for name in ("probes", *ROUTING_ITEMS)}
# every name of the routing context is read through one of these: an entry, a list, a map or scalar, params
# or a `for_each` item
if {*ROUTING_ENTRIES, *ROUTING_LISTS, *ROUTING_SHAPES, "params", "item"} != ROUTING_NAMES:
    raise AssertionError("ROUTING_NAMES is not the names ROUTING_ENTRIES/LISTS/SHAPES describe")
# the entries a `[routing.host_fact]` condition is judged on, one at a time as `e`: the host's entries of
# these kinds
ROUTING_HOST_FACT_KINDS = ("kernel.log", "host.probe", "note")


def rule_key(rule: Any) -> tuple[Any, ...]:
    """What names one ``[[rules]]`` table for its compiled ``against`` and ``differences``: several tables
    may share a rule name (one rule id reported for several kinds, each with its own condition), so the
    name alone would give one table's expressions to another."""
    return (rule.name, tuple(rule.kinds), rule.when, rule.against)


def _compile(spec: PolicyFile, text: str, filename: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    rules = []
    for i, rule in enumerate(spec.rules):
        rules.append(
            (rule, compile_condition(rule.when, _where(filename, text, "rules", i, "when"), _ENTRY_NAMES))
        )
    out["rules"] = tuple(rules)
    diffs: dict[tuple[Any, ...], tuple[tuple[str, Condition, Condition], ...]] = {}
    for i, rule in enumerate(spec.rules):
        if rule.differences:
            where = _where(filename, text, "rules", i, "differences")
            diffs[rule_key(rule)] = tuple(
                (
                    d.label,
                    compile_condition(d.got, where, _ENTRY_NAMES),
                    compile_condition(d.want, where, _ENTRY_NAMES),
                )
                for d in rule.differences
            )
    out["rule_differences"] = diffs
    out["rule_against"] = {
        rule_key(rule): compile_condition(
            rule.against, _where(filename, text, "rules", i, "against"), _PASSING_NAMES
        )
        for i, rule in enumerate(spec.rules)
        if rule.against is not None
    }
    acc = spec.acceptance
    if acc is not None:
        out["passing"] = {
            kind: compile_condition(
                expr, _where(filename, text, "acceptance.passing", None, kind), _PASSING_NAMES
            )
            for kind, expr in acc.passing.items()
        }
        out["against"] = {
            kind: compile_condition(
                expr, _where(filename, text, "acceptance.against", None, kind), _PASSING_NAMES
            )
            for kind, expr in acc.against.items()
        }
        for section in ("review_required", "acceptance_required"):
            items = []
            for i, req in enumerate(getattr(acc, section)):
                cond = (
                    compile_condition(
                        req.when, _where(filename, text, f"acceptance.{section}", i, "when"), _ENTRY_NAMES
                    )
                    if req.when
                    else None
                )
                items.append((req, cond))
            out[section] = tuple(items)
    gates = []
    names: set[str] = set()
    for i, gate in enumerate(spec.gates):
        if gate.name in names:
            raise PolicyError(
                f"{_where(filename, text, 'gates', i, 'name')}: gate {gate.name!r} is defined twice"
            )
        names.add(gate.name)
        checks = []
        for j, check in enumerate(gate.checks):
            line = locate(text, ("gates", i, "checks", j, "expr"))
            where = f"{filename}:{line}" if line else _where(filename, text, "gates", i, "checks")
            naming: tuple[Condition, str] | None = None
            if check.each is not None and check.detail is not None:
                each_line = locate(text, ("gates", i, "checks", j, "each"))
                each_where = f"{filename}:{each_line}" if each_line else where
                naming = (compile_condition(check.each, each_where, _EACH_NAMES), check.detail)
            checks.append((compile_condition(check.expr, where, _GATE_NAMES), check.fail, naming))
        gates.append(
            CompiledGate(
                spec=gate,
                where=compile_condition(
                    gate.where, _where(filename, text, "gates", i, "where"), _PASSING_NAMES
                )
                if gate.where
                else None,
                require=(
                    compile_condition(
                        gate.require, _where(filename, text, "gates", i, "require"), _GATE_NAMES
                    )
                    if gate.require
                    else None
                ),
                requires=tuple(
                    (
                        compile_condition(
                            r.expr, _where(filename, text, "gates", i, "requires"), _GATE_NAMES
                        ),
                        r.missing,
                    )
                    for r in gate.requires
                ),
                checks=tuple(checks),
            )
        )
    out["gates"] = tuple(gates)
    if spec.routing is not None:
        rchecks = []
        for i, rc in enumerate(spec.routing.checks):
            rchecks.append(
                CompiledRoutingCheck(
                    spec=rc,
                    applies=compile_condition(
                        rc.applies,
                        _where(filename, text, "routing.checks", i, "applies"),
                        routing_names(None),
                    ),
                    expr=compile_condition(
                        rc.expr,
                        _where(filename, text, "routing.checks", i, "expr"),
                        routing_names(rc.for_each),
                    ),
                )
            )
        out["routing_checks"] = tuple(rchecks)
        out["host_facts"] = {
            name: compile_condition(
                expr, _where(filename, text, "routing.host_fact", None, name), _PASSING_NAMES
            )
            for name, expr in spec.routing.host_fact.items()
        }
    return out


@dataclass(frozen=True)
class _Text:
    """One CEL expression or message template of a policy, with what its variables hold: ``entries``,
    each variable that is one entry → the kinds it can be (None: not told here); ``evidence``, the kinds
    of the elements of the ``evidence`` list (``has_evidence``: its context has one). Every context holds
    ``params``. ``group``: the item it belongs to (a rule; a gate check; a gate's `require` or one of its
    `requires`): a template of the item is filled only where the item's CEL held (or failed), so a param
    that CEL reads behind its guard (``'x' in params``) is guarded for the item's templates too."""

    source: str
    where: Callable[[], str]  # its place, file:line (found only for a refusal)
    template: bool
    entries: Mapping[str, tuple[str, ...] | None]
    evidence: tuple[str, ...] | None = None
    has_evidence: bool = False
    group: tuple[Any, ...] = ()
    names: frozenset[str] = frozenset()  # a template's: the names its context fills
    # further lists whose elements are read as entries: list variable → the label of its elements (a key of
    # ``entries``); and the further names an entry of a label holds beyond an entry view's (``extra``), or
    # the names a variable that is no entry holds at its top level (``shapes``: routing's items)
    lists: Mapping[str, str] = field(default_factory=dict)
    extra: Mapping[str, frozenset[str]] = field(default_factory=dict)
    shapes: Mapping[str, frozenset[str]] = field(default_factory=dict)


def _texts(spec: PolicyFile, text: str, filename: str) -> list[_Text]:
    """Every CEL expression and message template of a policy that reads entries or ``params``, with the
    context each is evaluated in (the contexts ``_compile`` names, the kinds each applies to)."""
    out: list[_Text] = []

    def add(source: str | None, where: Callable[[], str], template: bool = False, **ctx: Any) -> None:
        if source:
            out.append(_Text(source, where, template, **ctx))

    def place(table: str, index: int | None, key: str) -> Callable[[], str]:
        return partial(_where, filename, text, table, index, key)

    for i, rule in enumerate(spec.rules):
        ents = {"e": tuple(rule.kinds), "job": ("job",)}
        add(rule.when, place("rules", i, "when"), entries=ents, group=("rules", i))
        add(
            rule.detail,
            place("rules", i, "detail"),
            True,
            entries=ents,
            group=("rules", i),
            names=_ENTRY_NAMES,
        )
        add(rule.against, place("rules", i, "against"), entries={"e": tuple(rule.kinds)})
        where = place("rules", i, "differences")
        for d in rule.differences:
            add(d.got, where, entries=ents)
            add(d.want, where, entries=ents)
    acc = spec.acceptance
    if acc is not None:
        for table in ("passing", "against"):
            for kind, expr in getattr(acc, table).items():
                add(expr, place(f"acceptance.{table}", None, kind), entries={"e": (kind,)})
        for section in ("review_required", "acceptance_required"):
            for i, req in enumerate(getattr(acc, section)):
                where = place(f"acceptance.{section}", i, "when")
                add(req.when, where, entries={"e": tuple(req.kinds), "job": ("job",)})
    for i, gate in enumerate(spec.gates):
        kinds = tuple(gate.selected_kinds())
        lists: dict[str, Any] = {"entries": {}, "evidence": kinds, "has_evidence": True}
        add(gate.where, place("gates", i, "where"), entries={"e": kinds})
        add(gate.require, place("gates", i, "require"), **lists, group=("gates", i, "require"))
        add(
            gate.missing,
            place("gates", i, "missing"),
            True,
            **lists,
            group=("gates", i, "require"),
            names=_GATE_NAMES,
        )
        for k, r in enumerate(gate.requires):
            where = place("gates", i, "requires")
            add(r.expr, where, **lists, group=("gates", i, "requires", k))
            add(r.missing, where, True, **lists, group=("gates", i, "requires", k), names=_GATE_NAMES)
        for j, check in enumerate(gate.checks):

            def at(key: str, i: int = i, j: int = j) -> Callable[[], str]:
                def found() -> str:
                    line = locate(text, ("gates", i, "checks", j, key))
                    return f"{filename}:{line}" if line else _where(filename, text, "gates", i, "checks")

                return found

            group = ("gates", i, "checks", j)
            add(check.expr, at("expr"), **lists, group=group)
            add(check.fail, at("fail"), True, **lists, group=group, names=_GATE_NAMES)
            add(check.each, at("each"), entries={"e": kinds}, group=group)
            add(check.detail, at("detail"), True, entries={"e": kinds}, group=group, names=_EACH_NAMES)
    if spec.routing is not None:
        for name, expr in spec.routing.host_fact.items():
            # a host's entries of the kinds routing judges host facts on: a payload name none of them has
            add(expr, place("routing.host_fact", None, name), entries={"e": ROUTING_HOST_FACT_KINDS})
        # every list's elements, read through a macro (``services.exists(s, s.model_key …)``, any variable
        # name) or an index (``gpus[0].within_max``), and every map of the context (``host.gpu_indexes``)
        # are checked as `item` is under `for_each`
        shapes = routing_shapes(spec.routing.host_fact)
        shapes.update({ROUTING_LISTS[name]: fields for name, fields in ROUTING_ITEMS.items()})
        for i, rc in enumerate(spec.routing.checks):
            for key in ("applies", "expr", "fail"):
                item = rc.for_each if key != "applies" else None  # `applies` is judged on no item
                routed: dict[str, tuple[str, ...] | None] = dict(ROUTING_ENTRIES)
                routed[ROUTING_LISTS["probes"]] = ROUTING_PROBE_KINDS  # what an element of `probes` reads
                more = {ROUTING_LISTS["probes"]: ROUTING_PROBE_FIELDS}
                shaped = dict(shapes)
                if item == "probes":  # one probe at a time: an entry with the probes' further names
                    routed["item"], more["item"] = ROUTING_PROBE_KINDS, ROUTING_PROBE_FIELDS
                elif item is not None and item in ROUTING_ITEMS:
                    shaped["item"] = ROUTING_ITEMS[item]
                add(
                    getattr(rc, key),
                    place("routing.checks", i, key),
                    key == "fail",
                    entries=routed,
                    group=("routing.checks", i),
                    names=routing_names(rc.for_each) | ROUTING_TEXTS,
                    lists=ROUTING_LISTS,
                    extra=more,
                    shapes=shaped,
                )
    return out


def _read_problem(
    t: _Text, r: Read, params: frozenset[str], guarded: set[str], subject_fields: tuple[str, ...]
) -> str | None:
    """Why the read ``r`` of ``t`` names nothing its context can hold, or None."""
    if r.root == "params":
        if not r.path or r.path[0] in params or r.path[0] in guarded:
            return None
        name = r.path[0]
        from difflib import get_close_matches

        near = get_close_matches(name, sorted(params), n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        return (
            f"the policy sets no such param{hint}; it sets: {', '.join(sorted(params))} "
            f"(a param it may leave unset is read behind `'{name}' in params`)"
        )
    if not r.path:
        return None
    if r.root in t.shapes:  # a value that is no entry (routing's items): its own names, at its top level
        names = t.shapes[r.root]
        if r.path[0] in names:
            return None
        if not names:
            return f"it is one value (a number, a text or null), which holds no {r.path[0]!r} nor any name"
        from difflib import get_close_matches

        near = get_close_matches(r.path[0], sorted(names), n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        return f"it holds no {r.path[0]!r}{hint}; it holds: {', '.join(sorted(names))}"
    extra = t.extra.get(r.root, frozenset())
    if r.path[0] in extra:
        return None
    if extra and r.path[0] not in ENTRY_VIEW_FIELDS:  # an entry view with further names (routing's probes)
        from difflib import get_close_matches

        held = [*ENTRY_VIEW_FIELDS, *sorted(extra)]
        near = get_close_matches(r.path[0], held, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        return f"it holds no {r.path[0]!r}{hint}; it holds: {', '.join(held)}"
    kinds = t.evidence if r.root == "evidence[]" else t.entries.get(r.root)
    return path_problem(r.path[0], r.path[1:], kinds, subject_fields=subject_fields)


def _reads_of(t: _Text) -> tuple[Read, ...]:
    """What ``t`` reads (``paths_read`` / ``template_paths``). A CEL text whose reads cannot be told
    (brackets that do not match: where a macro binds cannot be told) is refused, never left unchecked."""
    roots = {v: v for v in (*t.entries, *t.shapes) if v not in t.lists.values()} | {"params": "params"}
    lists = ({"evidence": "evidence[]"} if t.has_evidence else {}) | dict(t.lists)
    if t.template:
        return template_paths(t.source, roots, lists)
    reads = paths_read(t.source, roots, lists)
    if reads is not None and lists:
        indexed = _element_reads(t.source, roots, lists)
        reads = None if indexed is None else tuple(dict.fromkeys((*reads, *indexed)))
    if reads is None:
        compile_condition(t.source, t.where())  # its syntax error, where CEL finds one
        raise PolicyError(
            f"{t.where()}: CEL `{t.source}`: which names it reads cannot be told (brackets that do not "
            "match, a macro over a list whose elements cannot be told — write `evidence.exists(e, …)` or "
            "`evidence.filter(x, …).exists(e, …)` — or a field of a value `map` computed)"
        )
    return reads


def _element_reads(
    source: str, roots: Mapping[str, str], lists: Mapping[str, str]
) -> tuple[Read, ...] | None:
    """What ``source`` reads of a list's element taken by index (``gpus[0].within_max``, ``'x' in
    services[1]``, ``has(probes[0].payload.x)``), as reads of its list's label (``lists``): ``paths_read``
    ends a path at an index that is no string, so each such element (innermost first) is read as a
    variable of that label standing in its place. A list name a macro binds there is its variable, no list.
    None where the brackets do not match (``paths_read`` refuses it too)."""
    from ledger.policy.conditions import _binder, _closing, _macro_scopes, _tokens

    toks = _tokens(source, keep_strings=True)
    out: list[Read] = []
    while toks is not None:
        scopes, closing = _macro_scopes(toks), _closing(toks)
        if scopes is None or closing is None:
            return None
        found = [
            (i, closing[i + 1])
            for i, t in enumerate(toks)
            if t in lists
            and (i == 0 or toks[i - 1] != ".")
            and i + 1 < len(toks)
            and toks[i + 1] == "["
            and _binder(scopes, t, i) is None
        ]
        if not found:
            break
        # an index whose brackets hold no other (``services[gpus[0].gpu]``: gpus[0] first)
        inner = [(i, j) for i, j in found if not any(i < k < j for k, _ in found)]
        stand_in: dict[str, str] = {}
        rewritten: list[str] = []
        pos = 0
        for i, j in inner:
            name = f"_element_{len(stand_in)}_"  # no name a policy can write: a CEL name is checked first
            while name in toks:
                name += "_"
            stand_in[name] = lists[toks[i]]
            rewritten += [*toks[pos:i], name]
            pos = j + 1
        rewritten += toks[pos:]
        reads = paths_read(" ".join(rewritten), {**roots, **stand_in}, lists)
        if reads is None:
            return None
        out += [r for r in reads if r.root in lists.values()]
        toks = rewritten
    return tuple(out)


def _guards(reads: tuple[Read, ...]) -> set[str]:
    """The params ``reads`` test before reading (``'x' in params``, ``has(params.x)``)."""
    return {r.path[0] for r in reads if r.root == "params" and r.how != "read" and len(r.path) == 1}


def _check_template_names(t: _Text) -> None:
    """A message template whose braces do not match is printed as written, and a placeholder whose first
    name its context does not fill (``{parms[x]}``, a positional ``{}``) always prints ``?``: both refused
    at load, naming the names the context fills."""
    firsts = template_names(t.source)
    if firsts is None:
        raise PolicyError(
            f"{t.where()}: template {t.source!r} cannot be read (a brace that does not match; write a "
            "literal brace as {{ or }}): it would be printed as written, its placeholders unfilled"
        )
    for first in firsts:
        if first not in t.names:
            from difflib import get_close_matches

            near = get_close_matches(first, sorted(t.names), n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise PolicyError(
                f"{t.where()}: template placeholder {{{first}…}} names nothing its message is filled "
                f"from{hint}: it would always print '?'; it may name: {', '.join(sorted(t.names))}"
            )


def _check_reads(spec: PolicyFile, text: str, filename: str, params: frozenset[str]) -> None:
    """Every name a policy's CEL and message templates read of an entry (``e.payload.<field>``,
    ``e.derived.<name>``, ``e.subject.<field>``; also ``has(…)`` and ``'x' in e.payload``) and of
    ``params`` is one that can be there (``model.path_problem``; ``params``: the keys the policy and its
    acceptance policy set, or one the text, or for a template its item's CEL, tests first; subject fields:
    ``SUBJECT_FIELDS`` and the ones the policy declares, ``[policy] subject_fields``). A misspelled name
    would read as absent, or fail only where evaluation reaches it: refused here, naming file, line and
    name. A template placeholder in attribute syntax (``{e.derived.attempt}``) always prints ``?``
    (templates are filled from maps): refused too, naming the key syntax that reads it."""
    for i, rc in enumerate(spec.routing.checks if spec.routing is not None else ()):
        if rc.for_each is not None and rc.for_each not in ROUTING_LISTS:
            lists = ", ".join(sorted(ROUTING_LISTS))
            raise PolicyError(
                f"{_where(filename, text, 'routing.checks', i, 'for_each')}: for_each names "
                f"{rc.for_each!r}, which is no list the routing context holds: the check could never be "
                f"judged on an item (it may name: {lists})"
            )
    texts = _texts(spec, text, filename)
    for t in texts:
        if t.template:
            _check_template_names(t)
        if t.template and (attrs := template_attribute_fields(t.source)):
            field_name, keyed = attrs[0]
            raise PolicyError(
                f"{t.where()}: template `{{{field_name}}}` uses attribute syntax, which a template never "
                f"fills (it would print '?'): write {{{keyed}}}"
            )
    read = [(t, _reads_of(t)) for t in texts]
    group_guards: dict[tuple[Any, ...], set[str]] = {}
    for t, reads in read:
        if t.group and not t.template:
            group_guards.setdefault(t.group, set()).update(_guards(reads))
    subject_fields = tuple(spec.policy.subject_fields)
    for t, reads in read:
        guarded = _guards(reads)
        if t.template and t.group:
            guarded |= group_guards.get(t.group, set())
        for r in reads:
            problem = _read_problem(t, r, params, guarded, subject_fields)
            if problem is not None:
                # an element of a list (``services[]``) is shown as ``services[…]``
                var = "e" if r.root == "evidence[]" else r.root.replace("[]", "[…]")
                what = "template" if t.template else "CEL"
                shown = ".".join((var, *r.path))
                if r.how == "in":  # the key it tests, in what it tests it in
                    shown = f"{r.path[-1]!r} in {'.'.join((var, *r.path[:-1]))}"
                raise PolicyError(f"{t.where()}: {what} reads `{shown}`: {problem}")


@lru_cache(maxsize=64)
def _reads_checked(filename: str, data: bytes, params: frozenset[str]) -> None:
    """``_check_reads`` once per (file, bytes, the params it is read with). Errors are not cached."""
    _check_reads(_parsed(filename, data), data.decode("utf-8"), filename, params)


# One policy file's validated spec and compiled CEL, cached by (file name, bytes): a changed file is
# read anew, an unchanged one is not re-validated and recompiled on every verdict. Errors are not cached.
@lru_cache(maxsize=64)
def _parsed(filename: str, data: bytes) -> PolicyFile:
    return parse_policy_text(data.decode("utf-8"), filename)


@lru_cache(maxsize=64)
def _compiled(filename: str, data: bytes) -> dict[str, Any]:
    return _compile(_parsed(filename, data), data.decode("utf-8"), filename)


def _check_classes(spec: PolicyFile, text: str, filename: str) -> None:
    """Params naming failure classes (``*_classes``) use the one closed set, ``FailureClass``; those naming
    GPU event classes (``gpu_*_classes``) the GPU-fault catalogue's closed set, ``GpuEventClass``."""
    from ledger.gpu_faults import GpuEventClass
    from ledger.signatures import FailureClass

    failure = {c.value for c in FailureClass}
    gpu = {c.value for c in GpuEventClass}
    for name, value in spec.params.items():
        if not name.endswith("_classes"):
            continue
        known, what = (gpu, "GPU event") if name.startswith("gpu_") else (failure, "failure")
        bad = [v for v in value if v not in known] if isinstance(value, list) else [value]
        if bad:
            raise PolicyError(
                f"{_where(filename, text, 'params', None, name)}: params.{name}: unknown {what} "
                f"class(es) {', '.join(map(repr, bad))}; known: {', '.join(sorted(known))}"
            )


# params that are a positive, finite number (int or float; a bool or a text is no number, though CEL's
# ``double()`` would read "60000" or "inf"): checked at load, so the collector (which reads the same value)
# and the gate that judges by it never disagree on what the policy says
POSITIVE_NUMBER_PARAMS = ("sequential_max_latency_ms",)


def positive_number_problem(value: Any) -> str | None:
    """Why ``value`` is no positive, finite number, or None."""
    import math

    if type(value) not in (int, float) or not math.isfinite(value) or value <= 0:
        return f"{value!r} is not a positive, finite number (a whole number or a decimal, not text)"
    return None


def _check_option_value_patterns(spec: PolicyFile, text: str, filename: str) -> None:
    """``params.option_value_refusal_patterns`` is refused at load unless each is a table of a ``pattern``
    with a ``(?P<value>…)`` group and the ``options`` it names (the reading the refusal itself uses,
    ``ledger.answers.option_value_refusal_problem``): a malformed one would match nothing while judging."""
    from ledger.answers import option_value_refusal_problem

    name = "option_value_refusal_patterns"
    if name in spec.params and (why := option_value_refusal_problem(spec.params[name])) is not None:
        raise PolicyError(f"{_where(filename, text, 'params', None, name)}: params.{name}: {why}")


def _check_number_params(spec: PolicyFile, text: str, filename: str) -> None:
    for name in POSITIVE_NUMBER_PARAMS:
        if name in spec.params and (why := positive_number_problem(spec.params[name])) is not None:
            raise PolicyError(f"{_where(filename, text, 'params', None, name)}: params.{name}: {why}")


def _check_bounds(
    spec: PolicyFile, text: str, filename: str, acceptance_policy: LoadedPolicy | None = None
) -> None:
    """A policy's benchmark bounds (``benchmark_max`` / ``benchmark_min``) name figures a run of its approved
    spec records (``ledger.policy.bounds``, the grammar the harness builds its figures with): a bound on a
    figure no approved run can produce — a level outside ``benchmark_concurrency``, a misspelt name — would
    fail every engine as "figure missing".

    Checked on the params the policy runs with: its acceptance policy's with its own over them (as
    ``LoadedPolicy.params`` merges them), so a bound the acceptance policy sets is checked against the levels
    this policy approves. An acceptance policy loaded alone is checked against its own levels where it sets
    both bounds and levels; bounds without levels are checked with each policy that uses it (they bound
    nothing until one supplies the levels)."""
    from ledger.policy.bounds import BOUND_PARAMS, LEVELS_PARAM, bound_problems

    own = spec.params
    if spec.policy.kind == "acceptance" and LEVELS_PARAM not in own:
        return
    base = acceptance_policy.params if acceptance_policy is not None else {}
    problems = bound_problems({**base, **own})
    if not problems:
        return
    acc_text = acceptance_policy.data.decode("utf-8") if acceptance_policy is not None else ""

    def origin(name: str) -> str:
        if name in own or acceptance_policy is None:
            return ""
        line = key_line(acc_text, "params", None, name)
        at = f"{acceptance_policy.path}:{line}" if line else str(acceptance_policy.path)
        levels = "this policy's" if LEVELS_PARAM in own else "the"
        return (
            f" (set by acceptance policy {acceptance_policy.name!r}, {at}; checked against {levels} "
            f"{LEVELS_PARAM})"
        )

    name = problems[0][0]
    anchor = name if name in own else next((p for p in (LEVELS_PARAM, *BOUND_PARAMS) if p in own), None)
    where = _where(filename, text, "params", None, anchor) if anchor else filename
    raise PolicyError(f"{where}: " + "; ".join(f"params.{n}{origin(n)}: {why}" for n, why in problems))


def _check_gates(
    spec: PolicyFile, text: str, filename: str, gates: frozenset[str] | None, skip: Mapping[str, Any] = {}
) -> None:
    """Params naming gates (``*_gates``: ``reviewed_gates``, ``accepted_gates``) name gates of the
    qualification policy (``gates``): a misspelled one would switch its requirement off. ``skip``: params
    the policy using this one sets over it (those are checked where they are set)."""
    if gates is None:
        return
    for name, value in spec.params.items():
        if not name.endswith("_gates") or name in skip:
            continue
        bad = [v for v in value if v not in gates] if isinstance(value, list) else [value]
        if bad:
            raise PolicyError(
                f"{_where(filename, text, 'params', None, name)}: params.{name}: unknown gate(s) "
                f"{', '.join(map(repr, bad))}; the qualification policy's gates: {', '.join(sorted(gates))}"
            )


def _qualification_gates(spec: PolicyFile, path: Path, _seen: tuple[str, ...]) -> frozenset[str] | None:
    """The gate names ``*_gates`` params are checked against: a qualification policy's own; a routing
    policy's qualification's. None for an acceptance policy: it is checked with each policy that uses it."""
    if spec.policy.kind == "qualification":
        return frozenset(g.name for g in spec.gates)
    if spec.policy.kind == "routing" and spec.routing is not None:
        name = spec.routing.qualification
        if name in _seen or name == spec.policy.name:
            return None
        qual = load_policy(name, path.parent, _seen=(*_seen, spec.policy.name))
        return frozenset(g.spec.name for g in qual.gates)
    return None


def _resolve(name_or_path: str, policy_dir: Path) -> Path:
    if name_or_path.endswith(".toml") or os.sep in name_or_path:
        return Path(name_or_path)
    return policy_dir / f"{name_or_path}.toml"


def list_policies(policy_dir: Path | None = None) -> list[Path]:
    d = policy_dir or default_policy_dir()
    return sorted(p for p in d.glob("*.toml") if p.is_file())


def load_policy(
    name_or_path: str, policy_dir: Path | None = None, *, _seen: tuple[str, ...] = ()
) -> LoadedPolicy:
    """Load a policy by name (``policies/NAME.toml``) or path, with the acceptance policy it names."""
    d = policy_dir or default_policy_dir()
    path = _resolve(name_or_path, d)
    try:
        data = path.read_bytes()
    except FileNotFoundError as e:
        known = ", ".join(p.stem for p in list_policies(d)) or "none"
        raise PolicyError(
            f"unknown policy {name_or_path!r}: no file {path}", hint=f"known policies: {known}"
        ) from e
    except OSError as e:
        raise PolicyError(f"cannot read policy {path}: {e.strerror}") from e
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PolicyError(f"{path}: not UTF-8 text") from e
    filename = str(path)
    spec = _parsed(filename, data)
    if path.stem != spec.policy.name:
        raise PolicyError(
            f"{filename}:{key_line(text, 'policy', None, 'name') or 1}: policy name "
            f"{spec.policy.name!r} must equal the file name {path.stem!r}"
        )
    acceptance_policy = None
    if spec.policy.acceptance:
        if spec.policy.acceptance in _seen:
            raise PolicyError(f"{filename}: policy acceptance chain loops through {spec.policy.acceptance!r}")
        acceptance_policy = load_policy(spec.policy.acceptance, path.parent, _seen=(*_seen, spec.policy.name))
        if acceptance_policy.kind != "acceptance":
            raise PolicyError(
                f"{filename}: {spec.policy.acceptance!r} is a {acceptance_policy.kind} policy, "
                "not an acceptance policy"
            )
    if spec.policy.kind == "qualification" and not spec.gates:
        raise PolicyError(f"{filename}: a qualification policy needs at least one [[gates]] table")
    if spec.policy.kind == "qualification" and acceptance_policy is None:
        # its reviews, acceptances, freshness bounds, signer roles and bindings are the acceptance policy's:
        # without one every entry would be credited as it stands
        raise PolicyError(
            f"{filename}:{key_line(text, 'policy', None, 'name') or 1}: policy.acceptance: a qualification "
            "policy names the evidence-acceptance policy it filters evidence with (acceptance = "
            '"evidence-acceptance" in its [policy] table)'
        )
    if spec.policy.kind == "routing" and spec.routing is None:
        raise PolicyError(f"{filename}: a routing policy needs a [routing] table")
    _check_classes(spec, text, filename)
    _check_number_params(spec, text, filename)
    _check_option_value_patterns(spec, text, filename)
    _check_bounds(spec, text, filename, acceptance_policy)
    gates = _qualification_gates(spec, path, _seen)
    _check_gates(spec, text, filename, gates)
    if acceptance_policy is not None:
        # the acceptance policy's gate params name this policy's gates
        acc_text = acceptance_policy.data.decode("utf-8")
        _check_gates(acceptance_policy.spec, acc_text, str(acceptance_policy.path), gates, spec.params)
    base_params = acceptance_policy.params if acceptance_policy is not None else {}
    _reads_checked(filename, data, frozenset({**base_params, **spec.params}))
    compiled = dict(_compiled(filename, data))  # the cached dict is shared: never modify it
    if acceptance_policy is not None:
        compiled["rules"] = acceptance_policy.rules + compiled["rules"]
        compiled["rule_differences"] = {**acceptance_policy.rule_differences, **compiled["rule_differences"]}
        compiled["rule_against"] = {**acceptance_policy.rule_against, **compiled["rule_against"]}
        # this policy's [acceptance] over the acceptance policy's, as ``merge_acceptance`` merges the spec
        own = spec.acceptance.model_fields_set if spec.acceptance is not None else set()
        for key in ("passing", "against"):
            compiled[key] = {**getattr(acceptance_policy, key), **compiled.get(key, {})}
        for key in ("review_required", "acceptance_required"):
            if key not in own:
                compiled[key] = getattr(acceptance_policy, key)
    return LoadedPolicy(
        name=spec.policy.name,
        path=path,
        data=data,
        spec=spec,
        acceptance_policy=acceptance_policy,
        **compiled,
    )
