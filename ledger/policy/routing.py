"""The routing-change gate: allow a production change only when the routing policy's checks all hold."""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from functools import lru_cache, partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, WithJsonSchema
from pydantic_core import PydanticCustomError

from ledger.answers import refusal
from ledger.canonical import float_as_stated, parse_json
from ledger.devices import gpu_at, gpu_index, gpu_name, gpus_gone_at
from ledger.entries import format_time, host_key, misspelling_of, now_utc, parse_time, pin_bindings
from ledger.errors import (
    EntryNotFoundError,
    InputError,
    LedgerError,
    PolicyError,
    SignatureError,
    more_problems,
    validation_problem,
)
from ledger.listing import SUBJECT_FIELDS
from ledger.policy import result_cache
from ledger.policy.acceptance import (
    KEPT_AGAINST,
    TERMINAL_STATES,
    _counts_against,
    _host_gpu_events,
    _job_end,
    _job_key,
    _named_events,
    _pci,
    _probe_failed,
    _run_end,
    _trust_problem,
    job_ran_engine,
    render,
    taken_out,
    taken_out_text,
    withholds_only,
)
from ledger.policy.conditions import Condition
from ledger.policy.loader import (
    ROUTING_ENTRIES,
    ROUTING_HOST_FACT_KINDS,
    ROUTING_ITEMS,
    ROUTING_NAMES,
    ROUTING_PROBE_FIELDS,
    ROUTING_PROBE_KINDS,
    ROUTING_SHAPES,
    ROUTING_TEXTS,
    CompiledGate,
    LoadedPolicy,
    load_policy,
    routing_shapes,
)
from ledger.policy.model import ENTRY_VIEW_FIELDS, QUALIFIED, PolicyFile, parse_duration
from ledger.policy.names import engine_aliases, engine_key, model_key
from ledger.policy.rules import TRUST_RULES, Rule
from ledger.policy.snapshot import (
    NO_DERIVED,
    Evidence,
    Snapshot,
    _parse_rows,
    check_signature,
    keyring_at,
    newest_entries,
    probe_ok,
)
from ledger.reads import check_extends_held

if TYPE_CHECKING:
    # the ledger as the policy sees it (ledger.service.Ledger is one); the policy never imports the service
    from ledger.policy.port import PolicyLedger as Ledger

__all__ = [
    "DEVICES",
    "Deployment",
    "Service",
    "check_routing_change",
    "decision_again_at",
    "host_key",
    "load_deployment",
    "model_key",
    "record_routing_change",
    "validate_deployment",
]

REQUIRED_SUBJECT = ("model", "host")
# a route is judged on the verdict of one backend: without it, any backend's QUALIFIED verdict for the model
# on the host would route it (a restoration, seed 000, names the model and host it restores)
REQUIRED_FOR_ACTION = {"route": ("backend",), "restore": ()}
ACTIONS = ("route", "restore")


# What a service's engine reserves when the deployment does not say (its own default): vLLM's
# ``--gpu-memory-utilization`` is 0.9. A service of another engine must state its value.
ENGINE_DEFAULT_UTIL = {"vllm": 0.9}
# the rule codes of the trust path (a signer unknown, revoked, outside its validity, of another role)
_TRUST_RULE_CODES = frozenset(str(rule) for rule in TRUST_RULES.values())


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


Device = Literal["gpu", "cpu"]  # what a deployment's service runs on
DEVICES: tuple[str, ...] = get_args(Device)


def _text(value: str) -> str:
    """A deployment's text field as every reader takes it: surrounding whitespace stripped (``" gpu-box-1 "``
    is ``gpu-box-1``: the gate's normalisers set it aside, and a recorded layout keeps one spelling), and
    none that is blank — ``"   "`` names no host, service, engine or model: an input error naming the field,
    never a layout judged (and refused with an unreadable reason) or recorded."""
    text = value.strip()
    if not text:
        raise PydanticCustomError("blank", "blank (whitespace only): it names nothing")
    return text


def _env_name(value: str) -> str:
    """An env variable's name, as written: not blank, and no surrounding whitespace — stripped, two names
    could become one key and one value be dropped silently; a shell takes no such name either."""
    if not value.strip():
        raise PydanticCustomError("blank", "blank (whitespace only): it names no variable")
    if value != value.strip():
        raise PydanticCustomError(
            "padded", "{name!r} has surrounding whitespace: no variable name does", {"name": value}
        )
    return value


# every text of a deployment (a host, a service's name, engine, model)
# (their schema says so too: at least one character that is not whitespace)
Text = Annotated[str, AfterValidator(_text), WithJsonSchema({"type": "string", "pattern": r"\S"})]
EnvName = Annotated[
    str, AfterValidator(_env_name), WithJsonSchema({"type": "string", "pattern": r"^\S(.*\S)?$"})
]


class Service(_Strict):
    name: Text
    # "gpu" needs its gpus (indexes on the host); "cpu" takes none. Left out, a service that lists gpus is
    # a GPU service (the form before device existed); one that lists none must say device = "cpu".
    device: Device | None = None
    gpus: list[Annotated[int, Field(ge=0)]] | None = None  # GPU indexes on the host: 0, 1, …
    # required: the engine that serves it ("llamacpp", "vllm", …), judged against the engine the route's
    # campaign qualified — a service that leaves it out is no layout (``services.N.engine: required``),
    # never one defaulted to some engine the file does not name (audit 79 f3)
    engine: Text
    model: Text | None = None
    port: int | None = None
    # the fraction of each of its GPUs' memory the engine reserves: above 0 (an engine reserving none does not
    # run; 0 would let any layout's sum pass), at most 1
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    # an env variable's value is taken as written ("" is a value: CUDA_VISIBLE_DEVICES="" hides every GPU)
    env: dict[EnvName, str] = Field(default_factory=dict)


class Deployment(_Strict):
    host: Text
    services: list[Service] = Field(min_length=1)


def load_deployment(path: Path) -> dict[str, Any]:
    """A deployment description (TOML or JSON): ``host`` and ``[[services]]`` with gpus and utilisation."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise InputError(f"cannot read deployment {path}: {e.strerror}") from e
    try:
        # JSON strictly (``parse_json``): a key given twice is refused, as TOML refuses it (``json`` would
        # keep the last one silently)
        data = (
            parse_json(raw, parse_float=float_as_stated)
            if path.suffix == ".json"
            else tomllib.loads(raw.decode("utf-8"), parse_float=float_as_stated)
        )
    except (InputError, ValueError, UnicodeDecodeError) as e:
        why = e.message if isinstance(e, InputError) else str(e)
        raise InputError(f"{path}: not a valid deployment file: {why}") from e
    return validate_deployment(data, str(path))


def validate_deployment(data: Any, where: str) -> dict[str, Any]:
    """A deployment as every caller reads it — a ``--deployment`` file, a request body's ``deployment``, a
    recorded ``routing.change``'s: validated strictly by ``Deployment`` and the rules below (unknown keys,
    wrong types — ``true`` or ``"0"`` for a GPU index, ``"0.5"`` for a fraction — and missing fields are
    errors naming the key and ``where`` it came from), each service's ``device`` and
    ``gpu_memory_utilization`` filled (its engine's default)."""
    if not isinstance(data, Mapping):
        raise InputError(f"{where}: a deployment must be an object with host and services")
    try:
        dep = Deployment.model_validate(dict(data))
    except ValidationError as e:
        errors = e.errors()
        raise InputError(f"{where}: deployment {validation_problem(errors[0])}{more_problems(errors)}") from e
    out = dep.model_dump(mode="json")
    seen: dict[str, int] = {}
    for i, s in enumerate(out["services"]):
        which = f"{where}: deployment services[{i}] ({s['name']})"
        if s["name"] in seen:
            # two services of one name: one of them is a copy, or a typo for another service
            raise InputError(f"{which}: name {s['name']!r} is already services[{seen[s['name']]}]'s")
        seen[s["name"]] = i
        gpus = s["gpus"]
        if gpus and len(set(gpus)) != len(gpus):
            raise InputError(f"{which}: gpus {gpus} lists a GPU more than once")
        if s["device"] is None:
            if not gpus:
                raise InputError(
                    f'{which}: device: required: a service without gpus says device = "cpu" '
                    '(or device = "gpu" with its gpus = [...])'
                )
            s["device"] = "gpu"
        if s["device"] == "cpu":
            if gpus:
                raise InputError(f'{which}: device "cpu" takes no gpus (it lists {gpus})')
            if s["gpu_memory_utilization"] is not None:
                raise InputError(f'{which}: device "cpu" takes no gpu_memory_utilization')
            s["gpus"] = []
            continue
        if not gpus:
            raise InputError(f'{which}: device "gpu" needs its gpus: the GPU indexes on the host it uses')
        if s["gpu_memory_utilization"] is None:
            default = ENGINE_DEFAULT_UTIL.get(engine_key(s["engine"]) or "")
            if default is None:
                raise InputError(
                    f"{where}: services[{i}] ({s['name']}): no gpu_memory_utilization and engine "
                    f"{s['engine']!r} has no known default; state it"
                )
            s["gpu_memory_utilization"] = default
    return out


# --- what the routing context holds below its top level ---------------------------------------------------
# The loader's ROUTING_SHAPES and ROUTING_ITEMS name what each of the context's maps and lists holds at its
# top level (the one copy of those names); this is what the values under those names hold, as
# ``check_routing_change`` builds them (and checks it built: ``_context_problem``). A check's CEL and its fail
# template are read against it (``check_routing_reads``), at every depth: ``request.subject.modle``,
# ``deployment.services.exists(s, s.modle …)`` or ``{item[faults][0][codee]}`` is refused naming file, line,
# the name and the names that are there — never read as absent at check time (a CEL error only where
# evaluation reaches it, or a key test that is always false, a check silently always on or off). A map whose
# names are fixed here is read by its names only: iterated over, converted or computed with whole
# (``request.subject.exists(k, k == 'modle')``, ``dyn(request.subject)``, ``size(request.subject)``), which
# name a check tests could not be checked, so that is refused too (``_whole_use``).


@dataclass(frozen=True)
class _Map:
    """A map holding ``fields`` (name -> what it holds); ``optional``: those of them it may leave out (a key
    test tells); ``free``: a map whose names are free (an env table: any name, each holding ``free``), where
    a read of a name it does not hold at check time is a CEL error, so the check cannot be judged and the
    change is refused (``Condition.value``), never passed."""

    fields: Mapping[str, _Node] = field(default_factory=dict)
    optional: frozenset[str] = frozenset()
    free: _Node | None = None
    # read from a recorded entry, not built by the gate (``current.subject``: what the verdict evaluated,
    # validated when it was recorded): a read is checked against ``fields``, what it holds is not
    recorded: bool = False


@dataclass(frozen=True)
class _List:
    element: _Node


# one value: a number, a text, a boolean or null (no name below it)
_SCALAR = "scalar"
# an entry's view (``verdict``, a probe), whose names the loader checks (``model.path_problem``)
_ENTRY = "entry"
_Node = _Map | _List | str

# a GPU event of the host's kernel logs after its latest probe (``_gpu_faults_after``)
_FAULT = _Map(dict.fromkeys(("entry", "time", "code", "fault_class", "device", "text"), _SCALAR))
_ENV = _Map(free=_SCALAR)  # a service's env variables: free names, each a text
_TEXTS = _List(_SCALAR)
_SERVICE_BELOW: dict[str, _Node] = {"gpus": _TEXTS, "env": _ENV}
_DEPLOYED_SERVICE = _Map({f: _SERVICE_BELOW.get(f, _SCALAR) for f in Service.model_fields})
# the names of the loader's ROUTING_SHAPES / ROUTING_ITEMS that hold more than one value (any other is one
# value); ``request.subject``, ``current.subject`` and ``params`` depend on the policy (``_routing_schema``)
_BELOW: Mapping[str, Mapping[str, _Node]] = {
    "host": {"gpu_indexes": _TEXTS, "gpu_faults_unplaced": _List(_FAULT)},
    "current": {"launch_engines": _TEXTS, "host_probes": _TEXTS},
    "deployment": {"services": _List(_DEPLOYED_SERVICE)},
    "routing": {"verdict_roles": _TEXTS, "match_subject": _TEXTS},
    "gpus": {"services": _TEXTS, "faults": _List(_FAULT)},
    "services": {"gpus": _TEXTS, "env": _ENV},
}
for _name, _below in _BELOW.items():
    if not set(_below) <= {*ROUTING_SHAPES.get(_name, ()), *ROUTING_ITEMS.get(_name, ())} - {"subject"}:
        raise AssertionError(f"routing context {_name}: {sorted(_below)} is not among the loader's names")


# what a param list's element holds where its elements are not all of one kind (a table in one, a value or a
# list in another): which names it holds cannot be told, so any read below it is refused
_MIXED = "mixed"


def _params_node(value: Any) -> _Node:
    """What a param holds, from its value: a table's names are the ones it sets; a list's element, what its
    elements hold together (``_elements_node``)."""
    if isinstance(value, Mapping):
        return _Map({str(k): _params_node(v) for k, v in value.items()})
    if isinstance(value, list):
        return _List(_elements_node([_params_node(v) for v in value]))
    return _SCALAR


def _elements_node(nodes: Sequence[_Node]) -> _Node:
    """What one element of a list holds, each element holding one of ``nodes``: tables, the names any of them
    sets (those not every one sets are optional: a read of one an element leaves out is a CEL error when the
    change is judged, so it is refused, never passed; a name none sets is refused at load); lists, what
    their elements hold together; values, one value (an empty list: none of its elements holds a name).
    Elements of different kinds: ``_MIXED``."""
    if all(n == _SCALAR for n in nodes):
        return _SCALAR
    if all(isinstance(n, _Map) for n in nodes):
        maps = [n for n in nodes if isinstance(n, _Map)]
        names = sorted({k for m in maps for k in m.fields})
        fields = {k: _elements_node([m.fields[k] for m in maps if k in m.fields]) for k in names}
        optional = frozenset(k for k in names if any(k not in m.fields for m in maps))
        return _Map(fields, optional=optional)
    if all(isinstance(n, _List) for n in nodes):
        return _List(_elements_node([n.element for n in nodes if isinstance(n, _List)]))
    return _MIXED


def _routing_schema(spec: PolicyFile, params: Mapping[str, Any]) -> dict[str, _Node]:
    """Every name of the routing context of the policy ``spec`` (and of a fail message's texts) -> what it
    holds, at every depth; ``params``: the policy's (with its acceptance policy's)."""
    assert spec.routing is not None
    routing = spec.routing
    subject_fields = (*SUBJECT_FIELDS, *spec.policy.subject_fields)
    below: dict[str, Mapping[str, _Node]] = {
        **_BELOW,
        "request": {
            "subject": _Map(
                dict.fromkeys(routing.match_subject, _SCALAR),
                optional=frozenset(routing.match_subject) - set(REQUIRED_SUBJECT),
            )
        },
        # the subject the verdict evaluated, as recorded: any subject field, each it may leave out
        "current": {
            **_BELOW["current"],
            "subject": _Map(
                dict.fromkeys(subject_fields, _SCALAR), optional=frozenset(subject_fields), recorded=True
            ),
        },
    }

    def shape(name: str, fields: frozenset[str]) -> _Map:
        return _Map({f: below.get(name, {}).get(f, _SCALAR) for f in sorted(fields)})

    out: dict[str, _Node] = {
        name: shape(name, fields) if fields else _SCALAR
        for name, fields in routing_shapes(routing.host_fact).items()
    }
    out.update({name: _List(shape(name, fields)) for name, fields in ROUTING_ITEMS.items()})
    out.update(dict.fromkeys(ROUTING_ENTRIES, _ENTRY))
    out["probes"] = _List(_ENTRY)
    out.update(dict.fromkeys(ROUTING_TEXTS, _SCALAR))
    # the params the policy (and its acceptance policy) sets; one it leaves unset is the loader's to judge
    # (read behind `'x' in params`)
    held = _params_node(params)
    assert isinstance(held, _Map)
    out["params"] = _Map(held.fields, free=_ENTRY)
    return out


class _Misread(Exception):
    """A read of a name its value cannot hold: ``shown``, the read as written, and why."""

    def __init__(self, shown: str, why: str) -> None:
        super().__init__(shown, why)
        self.shown, self.why = shown, why


# a value read from a list or map literal, a choice or a call's result holding maps or lists
_UNTOLD = "untold"
_FIXED = "one value (a number, a text, a boolean or null)"


def _step(node: _Node | None, base: str, name: str | None, how: str = "read") -> _Node | None:
    """What ``base`` (shown as read, holding ``node``) holds at ``name`` (None: an index computed at check
    time; ``how``: "in" for a key test); raises ``_Misread`` where it cannot hold it."""
    from difflib import get_close_matches

    shown = f"{name!r} in {base}" if how == "in" else f"{base}.{name}" if name is not None else f"{base}[…]"
    if node is None or node == _ENTRY:
        return None  # not the routing context's own value: the loader checks an entry's names
    if node == _UNTOLD:
        raise _Misread(
            shown,
            f"which names {base} holds cannot be told (a value taken from a list or map literal, a "
            "parenthesised choice or a call's result, of maps or lists): read them through the context's "
            "own names (`host.gpu_indexes`, `services.exists(s, s.env …)`, `deployment.services[0].name`)",
        )
    if node == _MIXED:
        raise _Misread(
            shown,
            f"which names {base} holds cannot be told: it is an element of a param list whose elements are "
            "not all of one kind (a table in one, a value or a list in another) — make them all tables",
        )
    if isinstance(node, _List):
        if name is None or name.isdigit():
            return node.element
        raise _Misread(
            shown,
            f"{base} is a list, which holds no {name!r}: read its elements through a macro "
            f"(`{base}.exists(x, x.{name} …)`) or an index (`{base}[0].{name}`)",
        )
    if isinstance(node, _Map):
        if node.free is not None and name not in node.fields:
            return node.free
        if name is None:
            raise _Misread(
                shown,
                f"a key computed at check time, of {base}, whose names are fixed "
                f"({', '.join(sorted(node.fields)) or 'none'}): which name it reads cannot be told — "
                "name it",
            )
        if name in node.fields:
            return node.fields[name]
        near = get_close_matches(name, sorted(node.fields), n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        held = ", ".join(sorted(node.fields)) or "no name"
        raise _Misread(shown, f"{base} holds no {name!r}{hint}; it holds: {held} (names compare as written)")
    raise _Misread(shown, f"{base} is {_FIXED}, which holds no {name!r} nor any name")


def _cel_misread(source: str, roots: Mapping[str, _Node]) -> _Misread | None:
    """The first read of ``source`` (a routing check's CEL) of a name its value cannot hold, at any depth:
    through a context name (``request.subject.x``), an index (``m['x']``, ``deployment.services[0].x``), a
    key test (``'x' in request.subject``, ``has(m.x)``), or a macro's variable over a list below the top
    level (``deployment.services.exists(s, s.x)``, ``gpus.exists(g, g.faults.all(f, f.x))``), or of a value
    whose names cannot be told (``[item.env].exists(m, m.X)``); else the first use of a map whose names are
    fixed other than a read by name — a macro over its names (``request.subject.exists(k, k == 'x')``, in
    any spelling), ``dyn()``, ``size()``, a comparison, a computed name test (``_whole_use``). None where
    every read holds (or the text cannot be read: the loader refuses that)."""
    from ledger.policy.conditions import (
        _KEY_TEST_EDGES,
        _binder,
        _closing,
        _is_name,
        _macro_scopes,
        _string_value,
        _tokens,
    )

    raw = _tokens(source, keep_strings=True)
    if raw is None:
        return None
    scopes, closing = _macro_scopes(raw), _closing(raw)
    if scopes is None or closing is None:
        return None
    opening = {c: o for o, c in closing.items()}
    binding = {s.at: s for s in scopes}
    by_call = {s.at - 1: s for s in scopes}  # a macro's "(" -> its scope
    memo: dict[int, tuple[_Node | None, str]] = {}
    notes: dict[str, str] = {}  # a macro's variable -> what it ranges over (for a refusal's text)
    n = len(raw)

    def name_at(k: int) -> bool:
        return 0 <= k < n and _is_name(raw[k]) and raw[k] not in ("true", "false", "null", "in")

    def ends_chain(k: int) -> bool:
        nxt = raw[k + 1] if k + 1 < n else ""
        return nxt not in (".", "[", "(")

    def held_in(start: int, end: int) -> bool:
        """Whether the tokens start..end mention a map or list of the context (a value of them whole)."""
        for k in range(start, end + 1):
            if (name_at(k) or raw[k] in ")]}") and ends_chain(k) and k not in binding:
                node = typed(k)[0]
                if isinstance(node, _Map | _List) or node in (_UNTOLD, _MIXED):
                    return True
        return False

    def var(scope: Any) -> tuple[_Node | None, str]:
        recv, shown = typed(scope.receiver_at) if scope.receiver_at >= 0 else (None, "")
        over = f"each of {shown}"
        if isinstance(recv, _List):
            return recv.element, over
        if isinstance(recv, _Map):
            return _SCALAR, f"each name of {shown}"  # a macro over a map ranges over its names
        return recv, over

    def typed(end: int) -> tuple[_Node | None, str]:
        """What the chain ending at token ``end`` holds, and the chain as read."""
        if end not in memo:
            memo[end] = (None, raw[end])  # (a chain never reads itself: this only guards)
            memo[end] = chain(end)
        return memo[end]

    def chain(end: int) -> tuple[_Node | None, str]:
        t = raw[end]
        if name_at(end) and (end == 0 or raw[end - 1] != "."):
            scope = _binder(scopes, t, end)
            if scope is not None:
                node, over = var(scope)
                notes.setdefault(t, over)
                return node, t
            return roots.get(t), t
        if name_at(end) and end >= 2 and raw[end - 1] == ".":
            node, base = typed(end - 2)
            return _step(node, base, t), f"{base}.{t}"
        if t == "]" and end in opening:
            o = opening[end]
            if o > 0 and (name_at(o - 1) or raw[o - 1] in ")]}"):
                node, base = typed(o - 1)
                key = _string_value(raw[o + 1]) if o + 2 == end else None
                if key is not None:
                    return _step(node, base, key), f"{base}[{raw[o + 1]}]"
                index = raw[o + 1] if o + 2 == end else None
                return _step(node, base, index if index is not None and index.isdigit() else None), (
                    f"{base}[{index if index is not None and index.isdigit() else '…'}]"
                )
            return (_UNTOLD if held_in(o + 1, end - 1) else None), "[…]"
        if t == ")" and end in opening:
            o = opening[end]
            if o >= 3 and raw[o - 2] == "." and name_at(o - 1):
                method, scope = raw[o - 1], by_call.get(o)
                node, base = typed(o - 3)
                if method == "filter" and scope is not None:
                    return node, f"{base}.filter(…)"
                if method == "map" and scope is not None and isinstance(node, _List):
                    # ``R.map(x, x.a.b)``: the value at that path of each element; anything else computed
                    path: _Node | None = node.element
                    commas = [i for i in range(scope.start, scope.end) if raw[i] == "," and depth(i, o) == 1]
                    k = commas[-1] + 1 if commas else scope.start
                    if raw[k] == scope.var and all(
                        raw[i] == "." and name_at(i + 1) for i in range(k + 1, scope.end, 2)
                    ):
                        read = scope.var
                        for i in range(k + 2, scope.end, 2):
                            path, read = _step(path, read, raw[i]), f"{read}.{raw[i]}"
                        return _List(path) if path is not None else None, f"{base}.map(…)"
                    return (_UNTOLD if held_in(k, scope.end - 1) else None), f"{base}.map(…)"
                if method in ("exists", "all", "exists_one"):
                    return _SCALAR, f"{base}.{method}(…)"
                held = isinstance(node, _Map | _List) or node == _MIXED
                return (_UNTOLD if held else None), f"{base}.{method}(…)"
            return (_UNTOLD if held_in(o + 1, end - 1) else None), "(…)"
        if t == "}" and end in opening:
            # a map literal (``{'s': request.subject}.s``): like a list literal, what it holds of the
            # context's maps or lists cannot be told
            o = opening[end]
            return (_UNTOLD if held_in(o + 1, end - 1) else None), "{…}"
        return None, t

    def at(i: int) -> str:
        return raw[i] if 0 <= i < n else ""

    def start_of(end: int) -> int:
        """The first token of the chain ending at token ``end`` (``request`` of ``request.subject``, ``dyn``
        of ``dyn(x)``, ``[`` of a list literal)."""
        t = raw[end]
        if name_at(end):
            return start_of(end - 2) if at(end - 1) == "." and end >= 2 else end
        o = opening.get(end)
        if o is None:
            return end
        if t == ")" and o >= 3 and raw[o - 2] == "." and name_at(o - 1):
            return start_of(o - 3)
        if t == ")" and o >= 1 and name_at(o - 1):
            return o - 1  # a function's call
        if t == "]" and o > 0 and (name_at(o - 1) or raw[o - 1] in ")]}"):
            return start_of(o - 1)
        return o

    def depth(i: int, o: int) -> int:
        """How many brackets enclose token ``i`` from the one at ``o`` on (1: directly inside it)."""
        return sum(1 for a, b in closing.items() if o <= a < i < b)

    try:
        for k in range(n):
            if k in binding or not (name_at(k) or raw[k] in ")]}"):
                continue
            if name_at(k) and k + 1 < n and raw[k + 1] == "(":
                continue  # a function's or method's name
            typed(k)
        for k in range(1, n - 1):  # ``'x' in m``: the name tested, in the map it is tested in
            lit = raw[k - 1] if raw[k] == "in" and _is_string_literal(raw[k - 1]) else None
            end = _chain_end(raw, k + 1, closing) if lit is not None else None
            edges = (raw[k - 2] if k >= 2 else "", raw[end + 1] if end is not None and end + 1 < n else "")
            if lit is None or end is None or not all(e in _KEY_TEST_EDGES for e in edges):
                continue
            node, shown = typed(end)
            if isinstance(node, _Map):  # (of a list, ``in`` tests membership)
                _key_test(node, shown, f"{lit} in {shown}", lit)
        for k in range(n):  # a closed map's names: read only by name (``_whole_use``)
            if k in binding or not (name_at(k) or raw[k] in ")]}") or at(k + 1) == "(":
                continue
            node, shown = typed(k)
            held = _whole_use(raw, k, start_of(k), node, shown, closing)
            while held is not None:  # a literal or a choice holding it: judged as it is
                held = _whole_use(raw, held, start_of(held), _UNTOLD, typed(held)[1], closing, holder=True)
    except _Misread as e:
        first = re.split(r"[.\[ ]", e.shown.split(" in ")[-1], maxsplit=1)[0]
        return _Misread(e.shown, f"{e.why} ({first}: {notes[first]})") if first in notes else e
    return None


def _is_string_literal(tok: str) -> bool:
    """Whether the CEL token ``tok`` is a string (or bytes) literal, of any quoting or prefix."""
    return bool(re.match(r"[rRbB]{0,2}['\"]", tok))


def _key_test(node: _Map, shown: str, test: str, literal: str) -> None:
    """A test (``test``, as written) of whether the map ``shown`` (holding ``node``) holds the name written
    as the string literal ``literal``: raises ``_Misread`` where its names are fixed and that name is not
    one of them — the test would always come out the same, a check silently always on or off — or where
    the literal's text is not read here (a raw, bytes, triple-quoted or escaped one)."""
    from ledger.policy.conditions import _string_value

    name = _string_value(literal)
    if name is not None:
        try:
            _step(node, shown, name, "in")
        except _Misread as e:
            raise _Misread(test, e.why) from None
    elif node.free is None:
        raise _Misread(
            test,
            f"a name of {shown}, whose names are fixed, tested with a string literal whose text is not read "
            "at load (a raw, bytes, triple-quoted or escaped one): write the name as a plain literal; "
            f"{shown} holds: {', '.join(sorted(node.fields)) or 'no name'}",
        )


def _closed(node: _Node | None) -> bool:
    """Whether ``node`` is a closed map: one whose names the gate builds and ``_routing_schema`` knows (not a
    service's ``env`` nor top-level ``params``, whose names are free)."""
    return isinstance(node, _Map) and node.free is None


def _closed_list(node: _Node | None) -> bool:
    """Whether ``node`` is a list of closed maps (or of lists of them): ``deployment.services``."""
    return isinstance(node, _List) and (_closed(node.element) or _closed_list(node.element))


# what may stand beside ``m == null`` / ``m != null`` for it to compare ``m`` itself with null
_NULL_TEST_BEFORE = frozenset({"", "(", "&", "|", "?", ":", ","})
_NULL_TEST_AFTER = frozenset({"", ")", "&", "|", "?", ":", ","})


def _whole_use(
    raw: Sequence[str],
    end: int,
    start: int,
    node: _Node | None,
    shown: str,
    closing: Mapping[int, int],
    holder: bool = False,
) -> int | None:
    """The rule for a value used whole — the tokens ``start``..``end`` of ``raw``, shown as ``shown``: a
    closed map (``_closed``), a list of them, what holds one (``holder``: a list or map literal, a
    parenthesised choice) or a value whose names cannot be told (``_UNTOLD``, ``_MIXED``).

    A closed map may be read only by its names — ``m.name``, ``m['name']``, ``has(m.name)``, ``'name' in m``,
    each checked against the names it holds — or compared with null, or held by a list or map literal or a
    choice; anything else iterates over, converts or computes with its names — a macro or method over it
    (``m.exists(k, k == 'x')``, ``m.map(k, k)``, ``m.size()``), ``dyn(m)``, ``string(m)``, ``size(m)``, a
    comparison, a name test of a name computed at check time (``params.key in m``, ``'a' + 'b' in m``) —
    which cannot be checked against its names at load and may come out the same whatever they are: a check
    silently always on or off. A list of them may be iterated (its elements are typed: ``_step`` judges
    their reads), counted (``size()``) and compared with null, not otherwise used whole (``dyn()``, ``in``,
    a comparison). What holds one is judged as the map is (besides, a map literal's own keys, written in it,
    may be tested: ``'s' in {'s': m}``). A value whose names cannot be told is iterated by no macro.

    Raises ``_Misread``; returns where what holds the value ends (a literal or a choice: judged in turn), or
    None."""
    from ledger.policy.conditions import _KEY_TEST_EDGES, _is_name

    n = len(raw)

    def at(i: int) -> str:
        return raw[i] if 0 <= i < n else ""

    after, before = at(end + 1), at(start - 1)
    call = after == "." and at(end + 3) == "("
    closed, listed = _closed(node) or holder, _closed_list(node)
    if after in ("[", ".") and not call:
        return None  # a read by name (or by index): ``_step`` judges it
    if not (closed or listed) and not (call and node in (_UNTOLD, _MIXED)):
        return None  # (a value whose names cannot be told is read by name nowhere: ``_step``)
    if listed and call:
        return None  # a macro over a list: its elements are typed
    read = shown
    if call:
        used, read = f"{at(end + 2)}() over it", f"{shown}.{at(end + 2)}(…)"
    else:
        held = _held_by(raw, end, start, closing)
        if held is not None or _null_test(raw, end, start):
            return held
        plain = before == "in" and _is_string_literal(at(start - 2)) and at(start - 3) in _KEY_TEST_EDGES
        plain = plain and after in _KEY_TEST_EDGES
        if plain and _closed(node) and _chain_end(raw, start, closing) == end:
            return None  # ``'x' in m``: the name is checked where it is tested (``_key_test``)
        if plain and holder and raw[start] == "{" and raw[end] == "}":
            return None  # ``'s' in {'s': m}``: the map literal's own keys, written in it
        if listed and before == "(" and at(start - 2) == "size" and at(start - 3) != "." and after == ")":
            return None  # how many elements a list holds
        if before == "in" and listed:
            used, read = "a membership test (its elements compared whole)", f"… in {shown}"
        elif before == "in":
            used = "a name test not written `'name' in m` (a plain literal, nothing as tight beside)"
            read = f"… in {shown}"
        elif before == "(" and _is_name(at(start - 2)):
            used = f"{at(start - 2)}() of it"
            read = f"{at(start - 2)}({shown}{')' if after == ')' else ', …)'}"
        elif {before, after} & {"=", "<", ">", "in"} or (after == "!" and at(end + 2) == "="):
            used = "compared whole"
        else:
            used = "used whole (an argument, an operand, a condition)"
    if isinstance(node, _Map) and not holder:
        names = ", ".join(sorted(node.fields)) or "no name"
        why = (
            f"a routing check may not iterate over, convert or compute with the names of {shown}, a map "
            f"whose names are fixed ({names}) — which name it tests cannot be checked at load, and it may "
            f"come out the same whatever the map holds; a name test is written `has({shown}.name)` or "
            f"`'name' in {shown}`, checked against those names"
        )
    elif listed:
        why = (
            f"{shown} is a list of maps whose names are fixed: iterate its elements (`{shown}.exists(x, "
            f"x.name …)`), count them (`size({shown})`) or read one (`{shown}[0].name`); used whole, what "
            "it computes with their names cannot be checked at load"
        )
    elif holder:
        why = (
            f"{shown} holds a map of the routing context whose names are fixed, and a routing check may not "
            "iterate over, convert or compute with them — read its names where it is named: "
            "`has(request.subject.model)`, `'model' in request.subject`"
        )
    else:
        why = (
            f"which names {shown} holds cannot be told, so neither can what a macro or method over it ranges "
            "over: read the context's own maps and lists by name (`deployment.services.exists(s, s.name …)`, "
            "`'model' in request.subject`)"
        )
    raise _Misread(read, f"{used}: {why}")


def _null_test(raw: Sequence[str], end: int, start: int) -> bool:
    """Whether the value at tokens ``start``..``end`` of ``raw`` is compared with null, nothing binding
    tighter beside (``deployment != null``, ``null == current``)."""
    n = len(raw)

    def at(i: int) -> str:
        return raw[i] if 0 <= i < n else ""

    op_after, op_before = at(end + 1) + at(end + 2), at(start - 2) + at(start - 1)
    if op_after in ("==", "!=") and at(end + 3) == "null":
        return at(start - 1) in _NULL_TEST_BEFORE and at(end + 4) in _NULL_TEST_AFTER
    if op_before in ("==", "!=") and at(start - 3) == "null":
        return at(start - 4) in _NULL_TEST_BEFORE and at(end + 1) in _NULL_TEST_AFTER
    return False


def _held_by(raw: Sequence[str], end: int, start: int, closing: Mapping[int, int]) -> int | None:
    """Where the list literal, map literal or parenthesised choice that holds the value at tokens
    ``start``..``end`` of ``raw`` as an element, a value or a choice's value ends; None where nothing does
    (it is a call's argument, an index, an operand, …)."""
    from ledger.policy.conditions import _is_name

    n = len(raw)

    def at(i: int) -> str:
        return raw[i] if 0 <= i < n else ""

    before, after = at(start - 1), at(end + 1)
    o = max((o for o, c in closing.items() if o < start and c > end), default=-1)  # the innermost bracket
    if o < 0 or (
        o > 0
        and raw[o - 1] not in ("in", "true", "false", "null")
        and (_is_name(raw[o - 1]) or raw[o - 1] in (")", "]", "}"))
    ):
        return None  # (a call's parentheses or an index's brackets)
    element = raw[o] == "[" and before in ("[", ",") and after in ("]", ",")
    value = raw[o] == "{" and before == ":" and after in ("}", ",")
    choice = (before == "?" and after == ":") or (before == ":" and after in (")", "]", "}", ","))
    return closing[o] if element or value or choice else None


def _chain_end(raw: Sequence[str], start: int, closing: Mapping[int, int]) -> int | None:
    """The last token of the field path starting at the name at ``start`` (``m.a['b'][0]``), None where no
    name starts one or it ends in a call."""
    from ledger.policy.conditions import _is_name

    n = len(raw)
    if start >= n or not _is_name(raw[start]):
        return None
    k = start
    while True:
        if k + 2 < n and raw[k + 1] == "." and _is_name(raw[k + 2]):
            if k + 3 < n and raw[k + 3] == "(":
                return None
            k += 2
        elif k + 1 < n and raw[k + 1] == "[" and k + 1 in closing:
            k = closing[k + 1]
        else:
            return k if k + 1 >= n or raw[k + 1] != "(" else None


def _template_misread(source: str, roots: Mapping[str, _Node]) -> _Misread | None:
    """The first placeholder of a fail template (``{request[subject][modle]}``) that names what its value
    cannot hold, at any depth (a list's element by its index: ``{item[faults][0][code]}``)."""
    from ledger.policy.conditions import template_paths

    for r in template_paths(source, {name: name for name in roots}):
        node: _Node | None = roots[r.root]
        base = r.root
        for i, key in enumerate(r.path):
            try:
                node = _step(node, base, key)
            except _Misread as e:
                shown = "{" + r.root + "".join(f"[{k}]" for k in r.path[: i + 1]) + "}"
                return _Misread(shown, e.why)
            base = f"{base}[{key}]"
    return None


@lru_cache(maxsize=64)
def _reads_problem(filename: str, data: bytes, params_json: str) -> str | None:
    """``check_routing_reads``'s answer for one policy's bytes and the params it is read with."""
    from ledger.policy.loader import _parsed, _texts

    spec = _parsed(filename, data)
    assert spec.routing is not None
    schema = _routing_schema(spec, json.loads(params_json))
    for t in _texts(spec, data.decode("utf-8"), filename):
        if t.group[:1] != ("routing.checks",):
            continue
        roots = {k: v for k, v in schema.items() if k != "item"}
        each = spec.routing.checks[t.group[1]].for_each
        if each is not None and ("item" in t.shapes or "item" in t.entries):
            listed = schema.get(each)  # what one item holds (`for_each` names one of the context's lists)
            roots["item"] = listed.element if isinstance(listed, _List) else _ENTRY
        found = _template_misread(t.source, roots) if t.template else _cel_misread(t.source, roots)
        if found is not None:
            what = "template" if t.template else "CEL"
            return f"{t.where()}: {what} reads `{found.shown}`: {found.why}"
    return None


def load_checked(name_or_path: str, policy_dir: Path | None = None) -> LoadedPolicy:
    """``loader.load_policy``, and for a routing policy the names its checks read below the top level of the
    routing context (``check_routing_reads``): what the tool loads a policy through (``Ledger.load_policy``,
    ``ledger policy list/show``), so a misspelled nested name is refused when the policy is loaded, not first
    when a change is judged. (The loader cannot call it: the routing gate reads the loader.)"""
    policy = load_policy(name_or_path, policy_dir)
    check_routing_reads(policy)
    return policy


def check_routing_reads(policy: LoadedPolicy) -> None:
    """Every name a routing policy's checks read (CEL and fail templates), at every depth of the routing
    context (``_routing_schema``: ``request.subject.x``, ``item.faults[0].x``, ``deployment.services.exists(s,
    s.x)``, ``params.served_identity.x``), is one its value holds: else PolicyError naming file, line, the
    read and the names there. A map with free names (a service's ``env``) takes any name; a read of one it
    does not hold when the change is judged is a CEL error, so the check is not judged and the change is
    refused — never allowed. A param whose one copy is the qualification's (``_QUALIFICATION_PARAMS``:
    ``gpu_benign_classes``, ``engine_names``) stated by the routing policy is refused too: its checks read
    no copy of it (engines compare by ``item.engine_key`` and ``qualified_engine``, the gate's mapping)."""
    if policy.spec.routing is None:
        return
    _refuse_own_copies(policy)  # a param whose one copy is the qualification's: refused when loaded
    params = json.dumps(policy.params, sort_keys=True, default=str)
    problem = _reads_problem(str(policy.path), policy.data, params)
    if problem is not None:
        raise PolicyError(problem)


def _context_problem(value: Any, node: _Node, where: str) -> str | None:
    """Why ``value``, built for the routing context at ``where``, does not hold what ``_routing_schema`` says
    its name holds (what the policy's reads were checked against), or None. Null stands for any value."""
    if value is None or node in (_ENTRY, _MIXED):
        return None
    if node == _SCALAR:
        return (
            f"{where} is a {type(value).__name__}, not one value" if isinstance(value, dict | list) else None
        )
    if isinstance(node, _List):
        if not isinstance(value, list):
            return f"{where} is a {type(value).__name__}, not a list"
        for i, v in enumerate(value):
            if (why := _context_problem(v, node.element, f"{where}[{i}]")) is not None:
                return why
        return None
    assert isinstance(node, _Map)
    if not isinstance(value, dict):
        return f"{where} is a {type(value).__name__}, not a map"
    if node.free is None and not node.recorded:
        names = set(value)
        if not set(node.fields) - node.optional <= names <= set(node.fields):
            read = sorted(node.fields)
            return f"{where} holds {sorted(names)}, not the names the policy is read against {read}"
    for k, v in value.items():
        held = node.fields.get(k, node.free or _SCALAR)
        if (why := _context_problem(v, held, f"{where}.{k}")) is not None:
            return why
    return None


def _exact(value: Any) -> Decimal:
    """A utilisation as the decimal its text states (a float's shortest round-trip text: ``0.1`` is 1/10,
    not the binary fraction nearest it), so that sums and bounds compare exactly."""
    return Decimal(repr(float(value)))


def _decimal_text(value: Decimal) -> str:
    text = format(value.normalize(), "f")
    return text if text not in ("-0", "") else "0"


def _layout(
    deployment: Mapping[str, Any], util_max: Any = None, aliases: Mapping[str, str] | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Per-GPU utilisation sums and per-service views of a deployment, in a deterministic order. Each sum is
    the exact decimal sum of the stated values, compared exactly with ``util_max`` (the policy's
    ``gpu_util_sum_max``: ``within_max``); ``util_sum`` is that sum as a number, ``util_sum_text`` its
    exact text (0.8800000004 is above 0.88, though it rounds to it). A service's ``engine_key`` is its
    engine as engines compare (``engine_key`` with the policy's ``aliases``)."""
    sums: dict[int, Decimal] = {}
    names: dict[int, list[str]] = {}
    services = []
    for s in deployment["services"]:
        cpu = s["device"] == "cpu"
        # filled with the engine's default when absent (a GPU service); a CPU service reserves no GPU
        util = 0.0 if cpu else float(s["gpu_memory_utilization"])
        gpus = [int(g) for g in s["gpus"]]
        for g in gpus:
            sums[g] = sums.get(g, Decimal(0)) + _exact(util)
            names.setdefault(g, []).append(f"{s['name']} {_decimal_text(_exact(util))}")
        env = {str(k): str(v) for k, v in (s.get("env") or {}).items()}
        services.append(
            {
                "name": str(s["name"]),
                "device": str(s["device"]),
                "engine": str(s["engine"]),
                "engine_key": engine_key(s["engine"], aliases),
                "model": str(s.get("model") or ""),
                "model_key": model_key(s.get("model")),
                "gpus": gpus,
                "gpus_text": "+".join(str(g) for g in gpus),
                "multi_gpu": len(gpus) > 1,
                "env": env,
                "gpu_memory_utilization": None if cpu else util,
            }
        )
    limit = None if util_max is None or isinstance(util_max, bool) else _exact(util_max)
    gpus_out = [
        {
            "gpu": g,
            "util_sum": float(sums[g]),
            "util_sum_text": _decimal_text(sums[g]),
            "within_max": None if limit is None else sums[g] <= limit,
            "services": names[g],
            "detail": " + ".join(names[g]),
        }
        for g in sorted(sums)
    ]
    return gpus_out, services


def _entries(
    ledger: Ledger,
    *,
    subject: dict[str, str],
    kinds: tuple[str, ...],
    size: int,
    snap: Snapshot,
    since: datetime | None = None,
    aliases: Mapping[str, str] | None = None,
    takes_credit_away: bool = False,
) -> list[Evidence]:
    """The entries below ``size`` of these kinds whose subject has every field of ``subject``, parsed
    (through the snapshot's parse cache), in seq order; with ``since``, those the log took no earlier than
    it (the database leaves the others out, ``logged_since``, a second early as the log writes its times,
    before any envelope is read: a long campaign's old probes are neither read nor hashed). What time an
    entry claims is the caller's to judge: a probe claiming an older time than ``since`` is read, for it
    may show a failure that stands (``check_routing_change``).

    A ``host`` is matched as a host name (``host_key``: case-insensitive): the entries of every spelling of
    it the log holds for these kinds are read. With ``aliases`` (the qualification's engine-name table), a
    ``backend`` and a ``model`` are matched as names too (``_names_match``: ``llama.cpp`` is ``llamacpp``, a
    model's case aside), as the gate compares a deployment's engine and model: the entries are read by the
    other fields and each one's subject judged so.

    ``takes_credit_away``: the entries are read to take credit away (a run recorded over, whose end takes a
    probe's credit): a field of ``subject`` an entry leaves out (or gives as no name: not a text, blank)
    hides nothing and matches, as verdict shopping reads a label left out (``_may_be_of_subject``); one it
    names otherwise still keeps it out. Every entry of these kinds is read (since ``since``) and each one's
    subject judged so. Never for entries that give credit: there a field left out matches nothing."""
    for t in (*subject.keys(), *subject.values()):
        if "\x00" in t:  # as the service's query says: indexed text never holds NUL
            raise InputError(f"{t[:40]!r}: NUL characters are not allowed in subjects, names or filters")
    if takes_credit_away:
        found = _entries(ledger, subject={}, kinds=kinds, size=size, snap=snap, since=since)
        return [e for e in found if _may_be_of_subject(e.subject, subject, aliases or {})]
    if aliases is not None and set(subject) & set(_NAMED_FIELDS):
        asked = {k: v for k, v in subject.items() if k not in _NAMED_FIELDS}
        found = _entries(ledger, subject=asked, kinds=kinds, size=size, snap=snap, since=since)
        return [e for e in found if _of_subject(e.subject, subject, aliases)]
    logged_since = format_time(since - timedelta(seconds=1)) if since is not None else None
    # remembered while the database is unchanged (``result_cache.stamp``): a warm check reads them once
    st = result_cache.stamp(ledger)
    args = (tuple(subject.items()), kinds, size, logged_since)
    rows = result_cache.recall(st, "kind-rows", args)
    if rows is None:
        with ledger.repo.read() as conn:
            spellings: list[str | None] = [subject["host"]] if "host" in subject else [None]
            if "host" in subject:
                key = host_key(subject["host"])
                spellings += [
                    h
                    for h in ledger.repo.kind_hosts(conn, kinds, size)
                    if h != subject["host"] and host_key(h) == key
                ]
            by_seq: dict[int, tuple[Any, ...]] = {}
            for h in spellings:
                one = dict(subject) if h is None else {**subject, "host": h}
                for r in ledger.repo.subject_kind_rows(conn, one, kinds, size, logged_since=logged_since):
                    by_seq[r[0]] = r
            rows = [by_seq[q] for q in sorted(by_seq)]
        result_cache.remember(st, "kind-rows", args, rows)
    out = _parse_rows(rows)
    for e in out:
        rec = snap.keyring.keys.get(e.signer)  # type: ignore[call-overload]
        if rec is not None:
            e.signer_name, e.roles = rec.name, tuple(sorted(rec.roles))
    return out


# the subject fields whose spellings name one thing as the gate's normalisers read them
# (``ledger.policy.names``): a backend as engine names compare, a model as model names compare (a host, by
# ``host_key``, everywhere)
_NAMED_FIELDS = ("backend", "model")


def _names_match(field: str, got: Any, asked: str, aliases: Mapping[str, str]) -> bool:
    """Whether a subject's ``field`` value ``got`` names what the request's ``asked`` names, as every other
    comparison of the gate reads names: a host by ``host_key``, a backend by ``engine_key`` (with the
    qualification's ``params.engine_names``: ``llama.cpp`` is ``llamacpp``), a model by ``model_key`` (case
    and surrounding whitespace aside); any other field exactly. A value that is no name (missing, not a
    text, blank) matches nothing."""
    if not isinstance(got, str):
        return False
    if field == "host":
        return host_key(got) == host_key(asked)
    if field == "backend":
        key = engine_key(asked, aliases)
        return key is not None and engine_key(got, aliases) == key
    if field == "model":
        key = model_key(asked)
        return key is not None and model_key(got) == key
    return got == asked


def _of_subject(told: Mapping[str, Any], asked: Mapping[str, str], aliases: Mapping[str, str]) -> bool:
    """Whether a subject (``told``) holds every field of ``asked``, each naming the same thing
    (``_names_match``)."""
    return all(_names_match(k, told.get(k), v, aliases) for k, v in asked.items())


def _hides_nothing(told: Iterable[Any], names: Callable[[str], bool]) -> bool:
    """How a field is read where an entry takes credit away (verdict shopping's other campaigns, a run
    recorded over): by the values its entries tell of it, the one reading — any value that names something
    (a text, not blank) for which ``names`` holds, or none that does: a label left out, mistyped or blank
    hides nothing (fail closed). Never where an entry gives credit: there a field left out matches nothing
    (``_names_match``)."""
    values = [v for v in told if isinstance(v, str) and v.strip()]
    return not values or any(names(v) for v in values)


def _may_be_of_subject(told: Mapping[str, Any], asked: Mapping[str, str], aliases: Mapping[str, str]) -> bool:
    """Whether an entry read to take credit away may be of ``asked`` (``_hides_nothing``): every field of
    ``asked`` its subject (``told``) leaves out matches; one it names must name the same thing
    (``_names_match``)."""
    return all(
        _hides_nothing([told.get(k)], partial(_names_match, k, asked=v, aliases=aliases))
        for k, v in asked.items()
    )


def _cancelled(
    ledger: Ledger, e: Evidence, size: int, snap: Snapshot, policy: LoadedPolicy
) -> tuple[str, str] | None:
    """Why trusted supersessions and acceptances take ``e`` out — ``(rule, detail)`` — or None: as the
    acceptance filter decides it (``acceptance.taken_out``), over the supersessions and acceptances that ref
    ``e`` and, in turn, those that ref them."""
    acting: dict[str, Evidence] = {}
    todo = [e]
    while todo:
        for r in _acting(ledger, todo.pop(), size, snap, policy):
            if r.id not in acting:
                acting[r.id] = r
                todo.append(r)
    out = taken_out(e, acting.values(), snap.keyring.identity)
    if out is None:
        return None
    rule, by = out
    return rule, taken_out_text(rule, by)


def _acting(ledger: Ledger, e: Evidence, size: int, snap: Snapshot, policy: LoadedPolicy) -> list[Evidence]:
    """The trusted supersessions and acceptances below ``size`` that reference ``e``, in log order (read
    through the port: each row checked against the log record its leaf commits)."""
    out: list[Evidence] = []
    with ledger.repo.read() as conn:
        rows = ledger.repo.referrer_rows(conn, e.id, size)
    for r in _parse_rows([row for row in rows if row[2] in ("supersession", "acceptance")]):
        rec = snap.keyring.keys.get(r.signer)  # type: ignore[call-overload]
        if rec is not None:
            r.signer_name, r.roles = rec.name, tuple(sorted(rec.roles))
        if _trust_problem(r, snap, policy) is None:
            out.append(r)
    return out


# the kinds whose entries record a run of the subject over: an engine launch (the collector records one when
# its run ends) and a job's terminal entry
_RUN_KINDS = ("engine.launch", "job")


def _recorded_ends(entries: list[Evidence]) -> list[tuple[Evidence, datetime]]:
    """The runs ``entries`` record as over, each with its end as far as the log can know — the verdict's
    reading, one copy: an ``engine.launch`` (the collector records one when its run ends), its
    ``ended_at`` never after the log took it (``acceptance._run_end``); a job's terminal entry
    (``acceptance.TERMINAL_STATES``), its ``ended_at`` never after the log took it (``acceptance._job_end``).
    Every such entry the log holds is read, trusted or not: the caller lets any of them take a passing
    probe's credit away, and only those still standing (trusted, not taken out) drop a failure
    (``_before_end``'s ``by_claim``) — a job's terminal entry only where the log knows the job ran an engine
    (``acceptance.job_ran_engine``: the end of a job that never ran restores nothing, fix 138)."""
    out: list[tuple[Evidence, datetime]] = []
    for x in entries:
        end = (
            _run_end(x, None)
            if x.kind == "engine.launch"
            else _job_end(x)
            if x.kind == "job" and x.payload.get("state") in TERMINAL_STATES
            else None
        )
        if end is not None:
            out.append((x, end))
    return out


def _observed(e: Evidence) -> datetime | None:
    """When ``e`` was observed (``Evidence.observed_time``: its collected_at, never after the log took
    it); None where its collected_at is missing or no time."""
    try:
        return e.observed_time
    except (LedgerError, KeyError, TypeError, ValueError):
        return None


def _drops(e: Evidence, seen: datetime | None, x: Evidence, end: datetime, *, by_claim: bool) -> bool:
    """Whether a run ``x`` records over at ``end`` shows the probe ``e`` (observed ``seen``: ``_observed(e)``)
    as one of a gone engine — ``_before_end``'s rule, one copy, decided with no text built: the restore
    check asks it of every probe against every recorded end, and builds the reason only for the one it
    reports. A pass (``by_claim``): the log took ``e`` before ``x``, or ``e`` is observed at or before
    ``end`` (or its observed time cannot be read). A failure: the log took it before ``x`` AND it was
    observed at or before ``end``."""
    if not by_claim:
        return x.seq > e.seq and seen is not None and seen <= end
    return x.seq > e.seq or seen is None or seen <= end


def _before_end(e: Evidence, x: Evidence, end: datetime, *, by_claim: bool = True) -> str | None:
    """Why the probe ``e`` shows nothing of the engine serving now, given a run ``x`` records over at
    ``end`` (``_recorded_ends``). For a pass (``by_claim``): the log took ``e`` before ``x`` (that run, or
    one before it, was on when it probed), or ``e`` claims to be observed at or before that end (a claimed
    time only ever takes credit away; one that cannot be read, too). A probe that shows a failure is judged
    with ``by_claim`` False, and is the gone engine's only where BOTH hold: the log took it before ``x``, and
    it was observed (``_observed``) at or before ``end`` — each only narrows what is dropped, so no claimed
    time removes a failure (audit 87 f2), nor does the log's order alone one seen after the end the entry
    records (audit 90 f2); one whose observed time cannot be read is not dropped. None where it is not.
    Decided first (``_drops``), the text built only for a reason returned."""
    seen = _observed(e)
    if not _drops(e, seen, x, end, by_claim=by_claim):
        return None
    what = (
        f"engine launch {x.id[:16]}"
        if x.kind == "engine.launch"
        else f"job {x.payload.get('job_id')!r} ({x.payload.get('state')}, entry {x.id[:16]})"
    )
    over = f"{what} (logged {x.logged_at}) records its run over at {format_time(end)}"
    if not by_claim and seen is not None:  # a failure is dropped only where its observed time is read
        why = f"the log took it (logged {e.logged_at}, observed {format_time(seen)}) before {over}"
    elif x.seq > e.seq:
        why = f"the log took it (logged {e.logged_at}) before {over}"
    else:
        said = format_time(seen) if seen is not None else f"at {e.statement.get('collected_at')!r} (no time)"
        why = f"observed {said}, not after {over}"
    return (
        f"{why}: it probed an engine that is gone since and shows nothing of the one serving now "
        "(a restoration is judged on probes taken after the last recorded end of a run of the subject)"
    )


def _age_text(seconds: float) -> str:
    if seconds >= 86400:
        return f"{seconds / 86400:.1f}d"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds:.0f}s"


def check_routing_change(
    ledger: Ledger,
    policy: LoadedPolicy,
    subject: dict[str, str],
    *,
    action: str = "route",
    deployment: dict[str, Any] | None = None,
    now: datetime | None = None,
    at_size: int | None = None,
    deployment_from: str = "--deployment",
) -> dict[str, Any]:
    """Judge a routing change; ``allowed`` is True only when every applicable check holds. ``deployment``
    is the layout after the change as its caller read it (``validate_deployment``); ``deployment_from``
    names where it came from (``deployment.source`` of the answer, and its errors): the CLI's option, or
    the API's request body."""
    if policy.kind != "routing" or policy.spec.routing is None:
        raise PolicyError(f"{policy.path}: {policy.name} is a {policy.kind} policy, not a routing policy")
    # every name its checks read, at every depth of the context, is one that can be there (a misspelt
    # ``request.subject.modle`` is refused here, naming file and line, before anything is judged)
    check_routing_reads(policy)
    if action not in ACTIONS:
        raise InputError(f"unknown action {action!r}; one of {', '.join(ACTIONS)}")
    missing = [k for k in (*REQUIRED_SUBJECT, *REQUIRED_FOR_ACTION[action]) if k not in subject]
    if missing:
        raise InputError(
            f"a routing change ({action}) names its {' and '.join(missing)}: --subject {missing[0]}=…"
        )
    routing = policy.spec.routing
    unknown = sorted(k for k in subject if k not in routing.match_subject)
    if unknown:
        # a field the policy does not match verdicts on would be ignored: the change would be judged on
        # another campaign's (or deployment's …) verdict than the one the caller named
        raise InputError(
            f"a routing change is judged on the latest trusted verdict for its "
            f"{', '.join(routing.match_subject)}; {', '.join(unknown)} is not one of them",
            hint=f"leave {', '.join(unknown)} out of --subject",
        )
    # the log must still be the one its home saw: a log truncated or rewritten below the checkpoint the
    # home holds (outside the database) is refused before anything in it is judged (IntegrityError)
    check_extends_held(ledger)
    # a reference time given (``--now``, the API's ``now``): the log as it stood then, the entries it took at
    # or before that time (``record_time.size_as_of``, the verdict's rule) — one logged later claiming an
    # earlier time did not exist then, so the answer "as of T" does not change when it is appended; an
    # ``at_size`` reaching past that time is refused (InputError)
    from ledger.policy.record_time import size_as_of

    cut = size_as_of(ledger, at_size, now)
    size = ledger.size() if cut is None else cut
    if not 0 < size <= ledger.size():
        raise InputError(f"the log has {ledger.size()} entries; cannot check it at size {size}")
    when = now or now_utc()
    snap = Snapshot(
        size=size,
        subject=subject,
        entries=[],
        keyring=keyring_at(ledger, size),
        reference_time=format_time(when),
    )
    params = policy.params
    benign = _benign_classes(policy)  # the qualification's one copy: a routing policy's own is refused
    match = {k: v for k, v in subject.items() if k in routing.match_subject}
    # the subject is read as the deployment's fields are (``_names_match``): a verdict, probe or run recorded
    # under backend=llamacpp is one of backend=llama.cpp, a model's case aside — never "no verdict recorded"
    names = _engine_aliases(policy)  # the qualification's one copy
    ignored: list[dict[str, str]] = []

    def note(e: Evidence, rule: str, detail: str, counts_against: bool = False) -> None:
        row: dict[str, Any] = {"entry": e.id, "kind": e.kind, "rule": str(rule), "detail": detail}
        if counts_against:
            row = {**row, "detail": detail + KEPT_AGAINST, "counts_against": True}
        if row not in ignored:  # an entry read for two purposes (a host probe's GPUs and its P2P fact)
            ignored.append(row)

    def usable(
        e: Evidence,
        roles: list[str] | None = None,
        *,
        shows_failure: Callable[[Evidence], bool] | None = None,
        quiet: bool = False,
    ) -> bool:
        """Whether ``e`` may be read: trusted, signed by one of ``roles`` where given, and not taken out by
        the supersessions and acceptances in force (``_cancelled``). ``shows_failure`` (``e`` -> bool, for
        what the caller reads as a failure ``e`` shows: a host fault, a GPU event after the host's probe, a
        failed health probe): a rule that only withholds credit (``acceptance.withholds_only`` — rejected by
        an acceptance, superseded by the key that signed it) does not drop that failure, as the verdict keeps
        such an entry ``counts_against``; only a withdrawal does (not trusted, superseded by another key with
        its reason). Such an entry stands against the change and is listed in ``ignored`` with
        ``counts_against``: it is never credited, so callers that read it for credit pass no
        ``shows_failure``. ``quiet``: only the answer, nothing listed in ``ignored`` (an entry read only to
        decide whether another stands, as a run's end for a failed probe)."""
        problem = _trust_problem(e, snap, policy)
        if problem is None and roles is not None and not set(e.roles) & set(roles):
            problem = (Rule.WRONG_ROLE, f"signer {e.signer_name} holds {list(e.roles)}; needs one of {roles}")
        kept: tuple[str, str] | None = None
        if problem is None:
            problem = _cancelled(ledger, e, size, snap, policy)
            if problem is not None and withholds_only(problem[0]) and shows_failure and shows_failure(e):
                kept, problem = problem, None
        if problem is None:
            try:
                check_signature(e, snap.keyring)
            except SignatureError as ex:
                problem = (Rule.BAD_SIGNATURE, ex.message)
        if problem is not None:
            if not quiet:
                note(e, *problem)
            return False
        if kept is not None and not quiet:
            note(e, *kept, counts_against=True)
        return True

    def against(e: Evidence) -> bool:
        """``usable`` for an entry read as a failure it shows (the caller has judged it one)."""
        return usable(e, shows_failure=lambda _: True)

    verdict: Evidence | None = None
    # the route is judged on the NEWEST verdict the log took for the subject, and on it alone: one that is
    # not usable (superseded, rejected by an acceptance, its key revoked, not of a verdict role) leaves no
    # verdict — an older one does not stand in for it (an operator withdrawing the newest verdict, "do not
    # route", would otherwise route on the one before), as a newer NOT QUALIFIED verdict is not passed over
    # for an older QUALIFIED one. Where it is not usable, why (its ``ignored`` row, what took it out:
    # ``acceptance.taken_out_text``) leads the reason
    verdict_withdrawn = ""
    recorded = [
        e
        for e in reversed(
            _entries(
                ledger, subject=match, kinds=ROUTING_ENTRIES["verdict"], size=size, snap=snap, aliases=names
            )
        )
        if (e.payload.get("policy") or {}).get("name") == routing.qualification
    ]
    if recorded and usable(recorded[0], routing.verdict_roles):
        verdict = recorded[0]
    elif recorded:
        e = recorded[0]
        row = next((r for r in ignored if r["entry"] == e.id), None)
        detail = "not usable" if row is None else str(row["detail"])
        if row is not None and row["rule"] in _TRUST_RULE_CODES:
            # the trust path's detail is a sentence of its own ("key X was revoked effective …": audit 77 f2)
            detail = f"not trusted: {detail}"
        older = recorded[1:]
        instead = ""
        if older:
            ids = ", ".join(o.id[:16] for o in older[:3]) + (
                f" and {len(older) - 3} more" if len(older) > 3 else ""
            )
            several = len(older) > 1
            instead = (
                f"; the older recorded {'verdicts (entries' if several else 'verdict (entry'} {ids}) "
                f"{'do' if several else 'does'} not stand in for the newest one"
            )
        verdict_withdrawn = (
            f"the newest recorded {routing.qualification} verdict (entry {e.id[:16]}, "
            f"{e.payload.get('verdict')}, logged {e.logged_at}) is {detail}{instead}; "
        )
    host_name = subject["host"]
    # the host's entries: the kinds its host facts are judged on (the loader's one copy, which checks the
    # names a host fact reads), its probes and kernel logs among them
    host_entries = _entries(
        ledger, subject={"host": host_name}, kinds=ROUTING_HOST_FACT_KINDS, size=size, snap=snap
    )
    facts: dict[str, bool] = {}
    fact_sources: dict[str, list[str]] = {}
    for name, cond in policy.host_facts.items():
        hits = [e for e in host_entries if cond.holds({"e": e.view(), "params": params})]
        # a host fact is a fault the host records (the P2P fault): a rejection or its own signer's
        # supersession withholds credit and drops no failure — only another key's supersession withdraws it
        hits = [e for e in hits if against(e)]
        facts[name] = bool(hits)
        fact_sources[name] = [e.id for e in hits]
    deployment_source = deployment_from
    if deployment is None:
        deployment_source = ""
        for e in reversed(
            _entries(ledger, subject={"host": host_name}, kinds=("routing.change",), size=size, snap=snap)
        ):
            if e.payload.get("deployment") and e.payload.get("allowed") and usable(e):
                deployment = dict(e.payload["deployment"])
                deployment_source = e.id
                break
    if deployment is not None:
        deployment = validate_deployment(deployment, deployment_source or "deployment")
    util_max = params.get("gpu_util_sum_max")
    aliases = names  # the qualification's one copy, read above
    gpus, services = _layout(deployment, util_max, aliases) if deployment is not None else ([], [])
    max_probe_age = parse_duration(routing.probe_max_age)
    probes = []
    qual: LoadedPolicy | None = None
    oldest = when - timedelta(seconds=max_probe_age)
    against_memo: dict[tuple[Any, ...], bool] = {}

    def probe_shows_failure(e: Evidence) -> bool:
        # the acceptance policy's own judgement of a probe that shows a failure ([acceptance.against]:
        # ``e.derived.probe_failed``), as the verdict keeps one whose credit a rule withholds
        assert qual is not None
        return _counts_against(policy, e, qual.params, None, against_memo)

    # the runs of the subject the log records as over (``_recorded_ends``): a probe the log took before one
    # of them ended, or that claims to be observed before its end, probed an engine that is gone since (a
    # qualification job's own, stopped at the job's end) and shows nothing of what serves now — it credits
    # no restoration (audit 86 f2, f1). A failure it shows is that gone engine's only where the log itself
    # took it before an end entry still standing (trusted, not taken out: ``usable``, read quietly): no
    # claimed time, and no withdrawn or untrusted end, removes a failure (audit 87 f2)
    # read to take credit away: an end entry that leaves out a field of the subject matches it (audit 90 f1)
    ends = _recorded_ends(
        _entries(
            ledger,
            subject=match,
            kinds=_RUN_KINDS,
            size=size,
            snap=snap,
            since=oldest,
            aliases=names,
            takes_credit_away=True,
        )
    )
    standing_ends: list[tuple[Evidence, datetime]] | None = None  # read at the first failed probe
    ran: dict[str, bool] = {}  # by end entry: ``ran_engine``, asked once
    stood: dict[str, bool] = {}  # by entry: ``usable``, read quietly, once
    runs_of: dict[str, list[Evidence]] = {}  # by campaign: its job entries and launches, read once

    def stands(x: Evidence) -> bool:
        if x.id not in stood:
            stood[x.id] = usable(x, quiet=True)
        return stood[x.id]

    def ran_engine(x: Evidence) -> bool:
        # a launch ran an engine; a job's terminal entry ended one only where the log knows the job ran one
        # (``acceptance.job_ran_engine``, from the campaign's entries that stand: a running entry before
        # it, an engine launch or probe logged while that job was open, every entry of the job on the end's
        # host — a job_id run on two hosts is one job whose run no end can be shown to have ended, fix
        # 152) — a job that never ran restores nothing, so its end drops no failure (fix 138). Asked only
        # of an end that would drop one; the campaign's launches first, its probes only where none counts
        # (those logged since the job's running entries)
        if x.kind != "job":
            return True
        campaign = x.subject.get("campaign")
        if x.id not in ran and isinstance(campaign, str) and campaign.strip():
            read = partial(_entries, ledger, subject={"campaign": campaign}, size=size, snap=snap)
            if campaign not in runs_of:
                runs_of[campaign] = read(kinds=("job", "engine.launch"))
            found = runs_of[campaign]
            jobs = [j for j in found if j.kind == "job"]
            starts = [
                j.logged_time
                for j in jobs
                if j.payload.get("state") == "running" and _job_key(j) == _job_key(x)
            ]
            ran[x.id] = job_ran_engine(x, found, stands) or (
                bool(starts)
                and job_ran_engine(x, [*jobs, *read(kinds=("health.probe",), since=min(starts))], stands)
            )
        return ran.get(x.id, False)

    for e in _entries(
        ledger, subject=match, kinds=ROUTING_PROBE_KINDS, size=size, snap=snap, since=oldest, aliases=names
    ):
        # freshness decides credit, and a claimed time takes no failure out of "the newest": a probe the log
        # took before the bound is stale whatever it claims; one it took within the bound is fresh where it
        # was observed within it too (observed: collected_at, never after the log took it — a probe claiming
        # a later time stays as old), and one claiming an older time is not credited, but a failure it shows
        # stays among the probes (``counts_against``, as the verdict keeps a stale failure): as the one the
        # log took last it is the newest and refuses — an earlier pass does not lift it
        if not 0 <= (when - e.logged_time).total_seconds() <= max_probe_age:
            continue
        age = (when - e.observed_time).total_seconds()
        fresh = 0 <= age <= max_probe_age
        if e.derived_ is None:  # success judged from the record, as the verdict's filter judges it
            e.set_derived({**NO_DERIVED, "ok": probe_ok(e.payload)})
        qual = qual or _qualification(policy)
        if "probe_failed" not in e.derived:
            # the ready control's one judgement (``e.derived.probe_failed``), with the qualification's
            # params (its control_answer): the answer stripped and compared, never a pattern built from it
            e.set_derived(
                {
                    **e.derived,
                    "probe_failed": _probe_failed(e, e.derived["ok"], qual.params),
                    "refusal": refusal(e.payload, qual.params),
                }
            )
        failed = probe_shows_failure(e)
        if not fresh and not failed:
            continue  # a pass observed before the bound: not credited
        if failed and standing_ends is None:
            # a field an end entry leaves out counts only where it takes credit away: one that drops a
            # failure names every field of the subject (``_of_subject``) and still stands
            standing_ends = [
                (x, t) for x, t in ends if _of_subject(x.subject, match, names) and usable(x, quiet=True)
            ]
        # decided per recorded end with no text built (``_drops``, O(1) a pair); the reason is written once,
        # for the first end that takes the probe out (``_before_end``, the same rule)
        seen = _observed(e)
        hit = next(
            (
                (x, t)
                for x, t in (standing_ends if failed and standing_ends is not None else ends)
                if _drops(e, seen, x, t, by_claim=not failed) and (not failed or ran_engine(x))
            ),
            None,
        )
        gone = _before_end(e, *hit, by_claim=not failed) if hit is not None else None
        if gone is not None:
            note(e, Rule.STALE, gone)
            continue
        # a failed probe whose credit is withheld (rejected, or superseded by its own signer) still shows
        # the engine failing: it stays among the probes (it passes no check, and as the newest it refuses)
        if usable(e, shows_failure=probe_shows_failure):
            if not fresh:
                note(
                    e,
                    Rule.STALE,
                    f"collected {e.collected_at}, more than {routing.probe_max_age} before the reference "
                    f"time {format_time(when)}, but logged {e.logged_at}, within it: a claimed earlier time "
                    "does not take a failure out of the newest probes",
                    counts_against=True,
                )
            probes.append(e)
    verdict_age = (when - verdict.logged_time).total_seconds() if verdict is not None else None
    if verdict is not None and verdict_age is not None and verdict_age < 0:
        raise InputError(
            f"the reference time {format_time(when)} is before the verdict it would rely on "
            f"(entry {verdict.id[:16]}, logged {verdict.logged_at}); judge as of a time after it"
        )
    # re-derived as of the check's reference time (``when``): freshness and ages at the time the change is
    # judged at, not at the log's last entry (an unrelated append would change the answer)
    current = _rederive(ledger, policy, verdict, size, match, when) if verdict is not None else None
    # every other campaign of the same backend, model and host active within the verdict bound, judged
    # again now: a failure of one stands against the route whatever verdict another campaign earned since
    standing = (
        _standing_failures(ledger, policy, verdict, current, size, match, when, snap)
        if action == "route" and verdict is not None
        else []
    )
    # a probe that no longer lists a GPU the layout uses shows that GPU gone: a rejection or its own signer's
    # supersession withholds its credit and drops no such failure (``usable``'s ``shows_failure``)
    # the GPUs the verdict qualified are those the probes its host gates read list (``current.host_probes``):
    # a GPU of the layout must still be that GPU at its index, by the verdict's own rule (``_host_gpus``)
    judged_probes = set((current or {}).get("host_probes") or [])
    host_gpus = _host_gpus(
        host_entries,
        usable,
        (current or {}).get("machine"),
        used={g["gpu"] for g in gpus},
        kept=lambda e: next(
            (r["detail"] for r in ignored if r["entry"] == e.id and r.get("counts_against")), None
        ),
        qualified=[e for e in host_entries if e.kind == "host.probe" and e.id in judged_probes],
        one_machine=_one_machine_rule(policy) if gpus else None,
    )
    gpu_probe = host_gpus[2]
    for item in gpus:  # why the GPU at its index is not the one the verdict qualified ("" where it is)
        item["gone_text"] = host_gpus[3].get(item["gpu"], "")
    # GPU events the kernel logs of the host record after its latest probe: that probe does not show those
    # GPUs usable (only for a layout that puts something on a GPU: the GPU checks judge it)
    faults, unplaced = (
        _gpu_faults_after(host_entries, gpu_probe, against, params, benign)
        if gpu_probe is not None and gpus
        else ({}, [])
    )
    _place_gpu_faults(gpus, gpu_probe, faults)
    probe_views = _probe_views(policy, probes, subject["model"])
    # the engine a route's traffic must reach: the one the re-derived verdict's approved spec binds, else the
    # one its credited launches ran — never the route's backend label (None: it cannot be told)
    qualified_engine, qualified_engine_text = _qualified_engine(current, aliases)
    ctx: dict[str, Any] = {
        "request": {
            "action": action,
            "subject": subject,
            "subject_text": " ".join(f"{k}={v}" for k, v in sorted(subject.items())),
            # the routed model as model names compare (``model_key``): a service's ``model_key`` is matched
            # with it, never its spelling
            "model_key": model_key(subject["model"]),
        },
        "verdict": verdict.view() if verdict is not None else None,
        "verdict_age_s": verdict_age,
        "verdict_age_text": _age_text(verdict_age) if verdict_age is not None else "",
        "max_verdict_age_s": parse_duration(routing.verdict_max_age),
        "host": {
            "name": host_name,
            "key": host_key(host_name),  # host names compare case-insensitively (DNS names)
            **facts,
            "gpu_indexes": host_gpus[0],
            "gpu_text": host_gpus[1],
            "gpu_faults_unplaced": unplaced,
            "gpu_faults_unplaced_text": "; ".join(f["text"] for f in unplaced),
            "gpu_probe_text": _probe_text(gpu_probe),
        },
        "current": current,
        "standing_failures": standing,
        "qualified_engine": qualified_engine,
        "qualified_engine_text": qualified_engine_text,
        "deployment": (
            {**deployment, "host_key": host_key(str(deployment["host"]))} if deployment is not None else None
        ),
        "gpus": gpus,
        "services": services,
        "probes": probe_views,
        "identities_text": _identities_text(probe_views),
        "params": params,
        # the ready control's answer, the qualification's one copy (its params.control_answer)
        "control_answer": _qualification(policy).params.get("control_answer"),
        "routing": routing.model_dump(mode="json", exclude={"checks", "host_fact"}),
    }
    if set(ctx) | {"item"} != ROUTING_NAMES:  # the names a policy's CEL may read are the loader's one copy
        raise PolicyError(
            f"routing context {sorted(ctx)} is not the loader's ROUTING_NAMES {sorted(ROUTING_NAMES)}"
        )
    # what its lists hold, one item at a time: the loader's one copy, which checks the names a check reads
    # through them when the policy loads
    shapes = {name: (ctx[name], fields) for name, fields in ROUTING_ITEMS.items()}
    shapes["probes"] = (probe_views, frozenset(ENTRY_VIEW_FIELDS) | ROUTING_PROBE_FIELDS)
    for name, (items, fields) in shapes.items():
        for one in items:
            if set(one) != fields:
                raise PolicyError(
                    f"routing context {name} item holds {sorted(one)}, not the loader's {sorted(fields)}"
                )
    # what its maps hold (a scalar: no map): the loader's one copy, which checks the names a check reads of
    # them when the policy loads (``host`` holds the policy's host facts too)
    for name, fields in routing_shapes(policy.host_facts).items():
        value = ctx[name]
        if (isinstance(value, dict) and set(value) != fields) or (
            not fields and isinstance(value, dict | list)
        ):
            held = sorted(value) if isinstance(value, dict) else type(value).__name__
            raise PolicyError(f"routing context {name} holds {held}, not the loader's {sorted(fields)}")
    # what each holds below its top level: what the policy's reads were checked against (``_routing_schema``)
    schema = _routing_schema(policy.spec, params)
    for name, value in ctx.items():
        if (why := _context_problem(value, schema[name], f"routing context {name}")) is not None:
            raise PolicyError(why)
    # the texts a fail message may name beyond the CEL context: verdict_withdrawn_text ("" where a verdict
    # is usable or none was recorded)
    texts = {"verdict_withdrawn_text": verdict_withdrawn}
    if set(texts) != ROUTING_TEXTS:  # the names a fail message may name: the loader's one copy
        raise PolicyError(
            f"routing texts {sorted(texts)} are not the loader's ROUTING_TEXTS {sorted(ROUTING_TEXTS)}"
        )
    checks: list[dict[str, Any]] = []
    reasons: list[str] = []
    for rc in policy.routing_checks:
        if not rc.applies.holds(ctx):
            checks.append({"name": rc.spec.name, "status": "not_applicable"})
            continue
        fails: list[str] = []
        if rc.spec.for_each:
            items = ctx.get(rc.spec.for_each)
            if not isinstance(items, list):
                raise PolicyError(
                    f"{policy.path}: check {rc.spec.name}: for_each names "
                    f"{rc.spec.for_each!r}, which is not a list in the context"
                )
            for item in items:
                item_ctx = {**ctx, "item": item}
                if not rc.expr.holds(item_ctx):
                    fails.append(render(rc.spec.fail, {**item_ctx, **texts}))
        elif not rc.expr.holds(ctx):
            fails.append(render(rc.spec.fail, {**ctx, **texts}))
        checks.append(
            {
                "name": rc.spec.name,
                "status": "failed" if fails else "passed",
                **({"reason": "; ".join(fails)} if fails else {}),
            }
        )
        reasons.extend(fails)
    applied = [c for c in checks if c["status"] != "not_applicable"]
    if not applied:
        reasons.append("no check of the routing policy applied to this request; nothing allows it")
    return {
        "allowed": not reasons,
        "action": action,
        "subject": subject,
        "policy": policy.identity(),
        "checkpoint": {"size": size},
        "now": format_time(when),
        "reasons": reasons,
        "checks": checks,
        "verdict": (
            {
                "entry": verdict.id,
                "verdict": verdict.payload.get("verdict"),
                "logged_at": verdict.logged_at,
                "age_s": round(verdict_age or 0.0, 3),
                "current": current,
            }
            if verdict is not None
            else None
        ),
        "standing_failures": standing,
        "host": {"name": host_name, "facts": facts, "fact_sources": fact_sources},
        "deployment": {"source": deployment_source, "gpus": gpus} if deployment is not None else None,
        "deployment_spec": deployment,
        "probes": [p.id for p in probes],
        "ignored": ignored,
    }


def _rederive(
    ledger: Ledger,
    policy: LoadedPolicy,
    verdict: Evidence,
    size: int,
    match: Mapping[str, str],
    when: datetime,
) -> dict[str, Any]:
    """The recorded verdict judged again on the ledger as it stands (``size``) as of the check's reference
    time ``when``, with the qualification policy the routing policy names: a supersession, an acceptance
    rejecting evidence or a revoked collector key since the verdict was recorded changes the answer at
    once, and so does evidence gone stale by ``when``. The verdict was found by the subject its entry
    names; what it judged is the subject it evaluated: every requested field (``match``) must be what the
    re-derived verdict judged (its evaluated subject, else the one value its accepted evidence names; a
    host, backend or model compares as the verdict was found, ``_names_match``) — a verdict entry naming
    another model than it evaluated qualifies nothing here."""
    from ledger.policy.verdict import evaluate, evaluated_subject, names_campaign

    qual = _qualification(policy)
    subject = evaluated_subject(verdict.payload)
    # a verdict that cannot be re-derived holds every name the loader's ROUTING_SHAPES["current"] lists, each
    # unknown (a check reading one reads null, never a missing key)
    unknown: dict[str, Any] = {
        **dict.fromkeys(ROUTING_SHAPES["current"]),
        "launch_engines": [],
        "host_probes": [],
        "policy_changed": False,
    }
    if subject is None:
        return {
            **unknown,
            "reason": f"verdict {verdict.id[:16]} records no evaluated subject: it cannot be re-derived",
        }
    if not names_campaign(subject):
        return {
            **unknown,
            "subject": dict(subject),
            "reason": f"verdict {verdict.id[:16]} judged no one campaign (subject {subject}): "
            "it cannot be re-derived",
        }
    result = evaluate(ledger, subject, qual, at_size=size, reference_time=when)
    judged = {**result.get("identity", {}), **result["subject"]}
    bindings = (result.get("manifest") or {}).get("bindings") or {}
    engine = bindings.get("engine")
    bound = engine if isinstance(engine, str) and engine.strip() else None
    same_policy = result["policy"].get("digest") == (verdict.payload.get("policy") or {}).get("digest")
    base: dict[str, Any] = {
        "subject": dict(subject),
        "size": size,
        "reference_time": result["reference_time"],
        "policy_changed": not same_policy,
        # the engine the campaign's approved spec binds (its credited launches ran it: bindings rules)
        "engine": bound,
        # where it binds none: the engine each launch the verdict credits recorded (``_qualified_engine``
        # asks them to agree) — a campaign's backend label is no record of what ran
        "launch_engines": (
            [] if bound is not None else _credited_launch_engines(ledger, qual, result, subject, size)
        ),
        # the device it qualified: "cpu" where its manifest pins a CPU deployment, else a GPU
        "device": "cpu" if bindings.get("device") == "cpu" else "gpu",
        # the machine its job ran on (spec.bindings.hostname, where the job records it): the host's GPUs
        # are those its probes of that machine show (policy rule other-machine)
        "machine": bindings.get("hostname") if isinstance(bindings.get("hostname"), str) else None,
        # the model revision its approved spec binds: another campaign binding it runs the same model
        "model_revision": (
            bindings.get("model_revision") if isinstance(bindings.get("model_revision"), str) else None
        ),
        # the host probes its gates that judge the host read (``_host_probe_gates``): the GPUs it qualified
        # on — a GPU the route uses must still be the one these show at its index (``_host_gpus``)
        "host_probes": _judged_host_probes(qual, result),
    }

    names = _engine_aliases(policy)  # the qualification's one copy

    def same(k: str, got: Any) -> bool:
        # as the verdict was found (``_names_match``): a host, backend or model by the gate's normalisers
        return got == match[k] or _names_match(k, got, match[k], names)

    wrong = [f"{k}={judged[k]}, not {v}" for k, v in match.items() if k in judged and not same(k, judged[k])]
    untold = [f"{k}=(cannot be told), not {v}" for k, v in match.items() if k not in judged]
    if wrong or (untold and result["verdict"] == QUALIFIED):
        return {
            **base,
            "verdict": None,
            "reason": f"verdict {verdict.id[:16]} evaluated {', '.join(wrong + untold)}: "
            "it does not judge the requested subject",
            "policy_changed": False,
        }
    # not QUALIFIED as of ``when`` (a field it cannot tell is then the evidence it lost: said below)
    return {**base, "verdict": result["verdict"], "reason": _why_not(ledger, verdict, result)}


def _host_probe_gates(qual: LoadedPolicy) -> list[CompiledGate]:
    """The qualification's gates that judge the host: those selecting ``host.probe`` (by ``kinds`` or a
    ``select``) — host-prerequisites in the shipped policy."""
    return [
        g
        for g in qual.gates
        if "host.probe" in g.spec.kinds or any(sel.get("kind") == "host.probe" for sel in g.spec.select)
    ]


def _judged_host_probes(qual: LoadedPolicy, result: Mapping[str, Any]) -> list[str]:
    """The ids of the host probes the re-derived verdict's host gates read (their ``evidence``), in order."""
    names = {g.spec.name for g in _host_probe_gates(qual)}
    out: list[str] = []
    for g in result.get("gates") or []:
        if isinstance(g, Mapping) and g.get("name") in names:
            out += [str(i) for i in g.get("evidence") or [] if str(i) not in out]
    return out


def _one_machine_rule(policy: LoadedPolicy) -> Callable[[list[Evidence]], str | None]:
    """The qualification's own rule that one host is one machine, applied to a host's probes: the
    ``requires`` of its gates that judge the host (``_host_probe_gates``; the shipped host-prerequisites:
    "probes of the host that name different machines (payload.hostname) … cannot be judged") — one copy,
    never restated here. The returned function gives None where the probes meet every such requirement,
    else why which GPUs are on the host cannot be told. A qualification that states no such requirement
    is the policy's error: a host's GPUs could be read from another machine's probe."""
    from ledger.policy.conditions import shared_context

    qual = _qualification(policy)
    reqs = [(g.spec.name, cond, missing) for g in _host_probe_gates(qual) for cond, missing in g.requires]
    if not reqs:
        raise PolicyError(
            f"{qual.path}: no gate that judges host.probe states what its probes need to be judged "
            "(`requires`, one host is one machine): the routing gate applies that rule to tell a host's GPUs "
            "where the campaign's job records no machine"
        )

    def judge(probes: list[Evidence]) -> str | None:
        ctx = {
            "evidence": [e.view() for e in probes],
            "params": qual.params,
            "manifest": {},
            "count": len(probes),
        }
        shared = shared_context(ctx)
        for gate, cond, missing in reqs:
            try:
                unmet = not cond.holds(shared)
                error = ""
            except PolicyError as ex:  # it cannot be judged on these probes: fail closed
                unmet, error = True, f" (it cannot be evaluated on them: {ex.message})"
            if not unmet:
                continue
            machines = sorted({repr(e.payload.get("hostname")) for e in probes})
            which = ", ".join(f"host probe {e.id[:16]} of {e.payload.get('hostname')!r}" for e in probes[:6])
            said = f"{qual.name}'s {gate} cannot judge it either: {render(missing, ctx)}{error}"
            if len(machines) > 1:
                return (
                    f"probes of this host name machines {', '.join(machines[:-1])} and {machines[-1]} "
                    f"({which}): which GPUs are on it cannot be told ({said})"
                )
            return f"which GPUs are on the host cannot be told from its probes ({which}): {said}"
        return None

    return judge


def _credited_launch_engines(
    ledger: Ledger,
    qual: LoadedPolicy,
    result: Mapping[str, Any],
    subject: Mapping[str, str],
    size: int,
) -> list[Any]:
    """The ``engine`` each ``engine.launch`` the re-derived verdict credits recorded (as recorded, one per
    launch, in log order): the launches among the evidence of its passed gates that select launches (by
    ``kinds`` or ``select``). Read as the verdict read them: from the evaluated subject's rows the
    re-derivation read (``verdict.subject_snapshot_rows``: one read of a campaign's rows serves both; parsed
    through the snapshot's cache), a credited one they do not hold (none the policy credits is outside its
    subject) read alone — a campaign of 10,000 launches read one by one took 7 s."""
    from ledger.policy.verdict import subject_snapshot_rows

    gates = [
        g
        for g in qual.gates
        if "engine.launch" in g.spec.kinds or any(s.get("kind") == "engine.launch" for s in g.spec.select)
    ]
    launch_gates = {g.spec.name for g in gates}
    # every kind those gates read (a gate's evidence holds its probes beside its launches)
    kinds = sorted(
        {k for g in gates for k in g.spec.kinds} | {str(s.get("kind")) for g in gates for s in g.spec.select}
    )
    ids = {
        i
        for g in result.get("gates") or []
        if g.get("name") in launch_gates and g.get("status") == "passed"
        for i in g.get("evidence") or []
    }
    # remembered while the database is unchanged (``result_cache.stamp``): a warm check reads them once
    st = result_cache.stamp(ledger)
    args = (tuple(sorted(subject.items())), tuple(kinds), size, tuple(sorted(ids)))
    cached = result_cache.recall(st, "credited-launch-engines", args)
    if cached is not None:
        return list(cached)
    # the evaluated subject's rows as the re-derivation just read them (one read of a campaign's rows)
    try:
        raw = subject_snapshot_rows(ledger, dict(subject), size, st).rows
    except EntryNotFoundError:
        raw = []
    rows = [r for r in raw if r[2] in kinds and r[1] in ids]
    seen = {r[1] for r in rows}
    found = {
        e.id: (e.seq, e.payload.get("engine"))
        for e in _parse_rows([r for r in rows if r[2] == "engine.launch"])
    }
    for i in sorted(ids - seen):
        e = ledger.get(i)
        if e.kind == "engine.launch":
            found[i] = (e.seq, e.statement.payload.get("engine"))
    engines = tuple(engine for _seq, engine in sorted(found.values(), key=lambda x: x[0]))
    result_cache.remember(st, "credited-launch-engines", args, engines)
    return list(engines)


def _qualified_engine(
    current: Mapping[str, Any] | None, aliases: Mapping[str, str]
) -> tuple[str | None, str]:
    """The engine a route's traffic must reach, as engines compare (``engine_key``), and the text that says
    where it comes from: the engine the re-derived verdict's approved spec binds (its credited launches ran
    it, by the bindings rules); where the spec binds none, the one engine every launch that verdict credits
    recorded. Never the route's ``backend``: a label the campaign gives itself does not decide the engine.
    None where it cannot be told — no verdict re-derived, no credited launch, one that records no engine,
    or launches that ran different engines: the route cannot be judged on its engine (check
    ``qualified-engine-known`` refuses it)."""
    if not current:
        return None, "none: no verdict was re-derived for the route"
    bound = current.get("engine")
    if isinstance(bound, str) and bound.strip():
        return engine_key(bound, aliases), f"{bound} (the engine the campaign's approved spec binds)"
    ran = list(current.get("launch_engines") or [])
    unbound = "the approved spec binds no engine"
    if not ran:
        return None, f"{unbound}, and the verdict credits no launch that would show the engine that ran"
    keys = [engine_key(e, aliases) for e in ran]
    if None in keys:
        told = ", ".join(repr(e) for e in ran)
        return None, f"{unbound}, and a launch the verdict credits records no engine (recorded: {told})"
    one = sorted({k for k in keys if k is not None})
    if len(one) > 1:
        return None, (
            f"{unbound}, and the launches the verdict credits ran different engines ({', '.join(one)}): "
            "which one the route's traffic must reach cannot be told"
        )
    return one[0], f"{one[0]} (the engine every launch the verdict credits ran: the approved spec binds none)"


# the kinds whose entries show a campaign was run for a subject (its job, its launches) or judged (a verdict)
_CAMPAIGN_KINDS = ("job", "engine.launch", "verdict")


def _same_name(a: Any, b: Any) -> bool:
    """Two spellings of one model name (``model_key``: surrounding whitespace and case set aside)."""
    key = model_key(a)
    return key is not None and key == model_key(b)


# the binding key of the model revision a campaign ran: the one ``entries.pin_bindings`` gives a pin's
# revision, the verdict's manifest binds and every launch records (the campaign runner binds launches with it)
_REVISION = "model_revision"


def _revisions_told(kind: str, payload: Mapping[str, Any]) -> tuple[set[str], str | None]:
    """The model revisions an entry of a campaign says it ran, read as the verdict's manifest reads them
    (``acceptance._manifest``): a job's approved spec (``spec.bindings``), a model pin (``entries.
    pin_bindings``, the one reading of a pin) — and a launch's ``bindings``, which the bindings rules hold to
    that manifest (``collect run`` binds the revision in the pin and each launch, never in the job's spec)
    — and, where it binds one under a misspelled key (``entries.misspelling_of``: ``modelRevision``,
    ``model_revison``), which key: a revision the manifest cannot read (None where it binds none)."""
    if kind == "model.pin":
        bound: Any = pin_bindings(payload)
    elif kind == "job":
        spec = payload.get("spec")
        bound = spec.get("bindings") if isinstance(spec, Mapping) else None
    elif kind == "engine.launch":
        bound = payload.get("bindings")
    else:
        return set(), None
    if not isinstance(bound, Mapping):
        return set(), None
    value = bound.get(_REVISION)
    told = {value} if isinstance(value, str) and value.strip() else set()
    misspelled = next((str(k) for k in bound if misspelling_of(str(k), (_REVISION,)) is not None), None)
    return told, (f"{kind} binds {misspelled!r}, not {_REVISION!r}" if misspelled is not None else None)


def _manifest_revision(
    ledger: Ledger, result: Mapping[str, Any], told: set[str]
) -> tuple[str | None, str | None]:
    """The model revision the re-derived verdict's manifest binds (``result["manifest"]``), as (a revision,
    why none can be read): a value its sources (the campaign's first job, the newest pin of its hosts) tell
    (``_revisions_told``; ``told``: those the campaign's entries already told) is a revision; any other is
    the manifest naming what it cannot read — a conflict between its spec and pin, a misspelled key — and
    is no revision; (None, None) where it binds none."""
    manifest = result.get("manifest") or {}
    value = (manifest.get("bindings") or {}).get(_REVISION)
    if not isinstance(value, str) or not value.strip():
        return None, None
    if value in told:
        return value, None
    for source in manifest.get("sources") or []:
        try:
            e = ledger.get(str(source))
        except EntryNotFoundError:
            continue
        if value in _revisions_told(e.kind, e.statement.payload)[0]:
            return value, None
    return None, f"its manifest binds no {_REVISION} it can read: {value[:200]}"


def _standing_failures(
    ledger: Ledger,
    policy: LoadedPolicy,
    verdict: Evidence | None,
    current: Mapping[str, Any] | None,
    size: int,
    match: Mapping[str, str],
    when: datetime,
    snap: Snapshot,
) -> list[dict[str, Any]]:
    """The other campaigns of the requested subject (``match``: backend, model, host) that show a failure,
    each judged again as of ``when`` with the qualification policy — so that no verdict can be shopped
    for: a team whose campaign failed cannot route on a second campaign's QUALIFIED while the failure
    stands.

    A campaign is a candidate when the log took one of its jobs, launches or verdicts (by the campaign its
    entry names, or the one a verdict evaluated) within the policy's ``verdict_max_age`` before ``when`` —
    by the time the log took it, not a time the entry claims — under the requested host, model or backend.
    It is of the requested subject unless what it is judged to be says otherwise (derived, not read from
    labels alone): a host compares as a host name; a backend by the name the qualification's
    ``params.engine_names`` maps it to, its label or the engine its approved spec binds; a model by its
    name (case and surrounding whitespace aside) or by the model revision the route's own campaign binds
    (``current``: its manifest's). Which revision a campaign ran is read as its verdict's manifest derives
    it, never from its job's spec alone (``collect run`` binds the revision in its model pin and each
    launch, not in the spec: a relabelled model's failure of the same bytes was not looked at, audit 96):
    every revision its job's spec, its model pins and its launches bind (``_revisions_told``), then the one
    its re-derived manifest binds (``_manifest_revision``). One of them the route's: the requested model
    whatever its label. Where the route's campaign binds a revision and the campaign's label names another
    model, it is another model only where it tells a revision and every one can be read and none is the
    route's: where it tells none (a campaign stopped before it pinned its model), or binds one under a
    misspelled key, or one not in the form the qualification pins a revision in (``params.
    immutable_revision``: upper-case hex, a "sha1:" prefix — both revisions are compared as written, in that
    form only; audit 99 f4), or its manifest binds one it cannot read (a conflict between its spec and its
    pin), which model it ran cannot be told and it is taken to be the requested one (fail closed: it is
    judged, and a failure of it stands, its reason saying so). A field it leaves untold is the requested
    one (fail closed). Only campaigns of the requested host and backend are judged beyond their entries'
    labels: one of another model that tells another revision is not evaluated (a check does not judge
    every campaign of a busy host again).

    It shows a failure when it is NOT QUALIFIED, or when a gate past the one that stopped its ladder fails
    on its evidence all the same (``failing_beyond_ladder``: a crash behind a missing host probe). The
    failure stops standing once its failing evidence is superseded or the campaign is older than the
    bound. The campaign of the verdict the route relies on is judged by the other checks (``current``)."""
    from ledger.policy.verdict import evaluate, evaluated_subject

    assert policy.spec.routing is not None
    routing = policy.spec.routing
    aliases = _engine_aliases(policy)  # the qualification's one copy

    def engine(v: Any) -> str | None:
        return engine_key(v, aliases)

    since = when - timedelta(seconds=parse_duration(routing.verdict_max_age))
    chosen = (evaluated_subject(verdict.payload) or {}).get("campaign") if verdict is not None else None
    revision = (current or {}).get("model_revision")
    machine = (current or {}).get("machine")
    want_hosts = {host_key(match["host"])} if "host" in match else set()
    if isinstance(machine, str) and machine.strip():
        want_hosts.add(host_key(machine))  # the machine the route's own campaign ran on

    def same(field: str, told: dict[str, set[str]]) -> bool:
        """Whether a campaign that tells these values (labels, the engine and host its spec binds, what its
        verdict judged) may be of the requested host or backend: any told value is the requested one, or
        none is told (fail closed: ``_hides_nothing``, the one reading). A model: ``model_match``."""
        values = told.get(field, set())
        if field == "host":
            return _hides_nothing(values, lambda v: host_key(v) in want_hosts)
        if field == "backend":
            return _hides_nothing(values, lambda v: engine(v) == engine(match["backend"]))
        return _hides_nothing(values, lambda v: False)  # no other field is told: none hides anything

    def of_subject(
        told: dict[str, set[str]], ran: set[str], misread: list[str], *, derived: bool
    ) -> str | None:
        """None where the campaign is not of the requested subject (``same``, ``model_match``), else how it
        is the requested model ("" by its name)."""
        if not all(same(f, told) for f in match if f != "model"):
            return None
        return model_match(told, ran, misread, derived=derived) if "model" in match else ""

    forms: list[str | None] = []  # the qualification's ``params.immutable_revision``, read once

    def form() -> str | None:
        if not forms:
            value = _qualification(policy).params.get("immutable_revision")
            forms.append(value if isinstance(value, str) and value else None)
        return forms[0]

    def canonical(value: str) -> bool:
        """Whether ``value`` is a model revision in the form the qualification pins one (``params.
        immutable_revision``: a commit hash or a content digest, lower-case hex): only such are compared;
        a policy stating no form compares none (fail closed)."""
        pattern = form()
        return pattern is not None and re.fullmatch(pattern, value) is not None

    def not_canonical() -> str:
        pattern = form()
        if pattern is None:
            return "and the qualification policy states no params.immutable_revision to read it by"
        return f"not in the form a revision is written ({pattern}): it may name the same bytes"

    def model_match(
        told: dict[str, set[str]], ran: set[str], misread: list[str], *, derived: bool
    ) -> str | None:
        """Whether a campaign that tells these model names, ran these model revisions (``_revisions_told``,
        its manifest's) and binds a revision the manifest cannot read (``misread``: why) may be the
        requested model: "" by its name (or none told: ``_hides_nothing``); else, where the route's
        campaign binds a revision, a text saying why — it ran that revision, or which revision it ran
        cannot be told (it tells none, or one it cannot read or compare — ``canonical`` — or the route's
        is not one it can compare: fail closed); None where it is not. Before
        its manifest is ``derived``, one telling revisions that differ may be the route's too: its
        manifest may name their conflict (its spec and its pin disagree), no revision."""
        names = told.get("model", set())
        if _hides_nothing(names, lambda v: _same_name(v, match["model"])):
            return ""
        if not isinstance(revision, str) or not revision.strip():
            return None  # the route's campaign binds no revision: its model is its name
        labelled = f"labelled model {', '.join(sorted(names))}"
        if not canonical(revision):
            return (
                f"{labelled}, whether it ran the route's model cannot be told: the route's campaign binds "
                f"model revision {revision[:100]!r}, {not_canonical()}"
            )
        if revision in ran:
            return f"{labelled}, it ran model revision {revision}, the one the route's campaign binds"
        # a revision spelled otherwise than a revision is written (upper-case hex, a prefix) may be the
        # route's: it is compared as no revision, and which one the campaign ran cannot be told (audit 99 f4)
        odd = sorted(v for v in ran if not canonical(v))
        readable = ran.difference(odd)
        if misread or odd or not readable or (not derived and len(readable) > 1):
            spelled = [f"it binds model revision {v[:100]!r}, {not_canonical()}" for v in odd[:3]]
            why = "; ".join([*misread[:3], *spelled]) or "none of its entries binds one"
            return (
                f"{labelled}, which model revision it ran cannot be told ({why}): it may be the route's "
                f"model (revision {revision})"
            )
        return None

    # every campaign the log took a job, launch or verdict of within the bound, whatever its labels say
    # (a label left out or spelled otherwise hides nothing); by the time the log took it, not a claim; and
    # its model pins, for the revision they pin (a pin alone does not make a campaign a candidate)
    with ledger.repo.read() as conn:
        rows = ledger.repo.subject_kind_rows(
            conn,
            {},
            (*_CAMPAIGN_KINDS, "model.pin"),
            size,
            logged_since=format_time(since - timedelta(seconds=1)),
        )
    told: dict[str, dict[str, set[str]]] = {}  # campaign -> field -> the values its entries tell
    revisions: dict[str, set[str]] = {}  # campaign -> the model revisions its entries say it ran
    unread: dict[str, list[str]] = {}  # campaign -> why a revision one of its entries binds cannot be read
    seen: dict[str, tuple[int, str]] = {}  # campaign -> the newest entry that names it (seq, id)
    for e in _parse_rows(rows):
        if not since <= e.logged_time <= when:
            continue
        labels = dict(e.subject)
        if e.kind == "verdict":
            if (e.payload.get("policy") or {}).get("name") != routing.qualification:
                continue
            judged = evaluated_subject(e.payload) or {}
            name = judged.get("campaign")
        else:
            name = labels.get("campaign")
        if not isinstance(name, str) or not name.strip() or name == chosen:
            continue
        told_revisions, misspelled = _revisions_told(e.kind, e.payload)
        revisions.setdefault(name, set()).update(told_revisions)
        if misspelled is not None and len(unread.setdefault(name, [])) < 3:
            unread[name].append(f"{misspelled} (entry {e.id[:16]})")
        if e.kind == "model.pin":
            continue
        seen[name] = max(seen.get(name, (-1, "")), (e.seq, e.id))
        mine = told.setdefault(name, {})
        if e.kind != "verdict":
            for f in ("host", "model", "backend"):
                if isinstance(labels.get(f), str):
                    mine.setdefault(f, set()).add(labels[f])
        spec = e.payload.get("spec") if e.kind == "job" else None
        bound = spec.get("bindings") if isinstance(spec, dict) else None
        if isinstance(bound, dict):
            for f, key in (("host", "hostname"), ("backend", "engine")):
                if isinstance(bound.get(key), str):
                    mine.setdefault(f, set()).add(bound[key])

    candidates = [
        n
        for n in sorted(seen)
        if of_subject(told[n], revisions.get(n, set()), unread.get(n, []), derived=False) is not None
    ]
    if not candidates:
        return []
    qual = load_policy(routing.qualification, policy.path.parent)
    out: list[dict[str, Any]] = []
    for name in candidates:
        result = evaluate(ledger, {"campaign": name}, qual, at_size=size, reference_time=when)
        # what it is judged to be joins what its entries tell: the identity its accepted evidence agrees
        # on, and what its approved spec binds
        full = {f: set(v) for f, v in told[name].items()}
        identity = result.get("identity") or {}
        bindings = (result.get("manifest") or {}).get("bindings") or {}
        for f, value in (
            ("host", identity.get("host")),
            ("model", identity.get("model")),
            ("backend", identity.get("backend")),
            ("host", bindings.get("hostname")),
            ("backend", bindings.get("engine")),
        ):
            if isinstance(value, str):
                full.setdefault(f, set()).add(value)
        # the revision its manifest binds, derived as the verdict derives it, joins those its entries told
        ran_revisions = set(revisions.get(name, set()))
        misread = list(unread.get(name, []))
        pinned, unreadable = _manifest_revision(ledger, result, ran_revisions)
        if pinned is not None:
            ran_revisions.add(pinned)
        if unreadable is not None:
            misread.append(unreadable)
        how = of_subject(full, ran_revisions, misread, derived=True)
        if how is None:
            continue
        word = str(result.get("verdict") or "")
        beyond = result.get("failing_beyond_ladder") or []
        if word.startswith("NOT QUALIFIED"):
            reason = _first_failure(result)
        elif beyond:
            first = beyond[0]
            reason = (
                f"{word}, but past where its ladder stopped {first.get('gate')} fails: "
                f"{first.get('reason') or ''} ({first.get('verdict_if_failed')})"
            )
        else:
            continue
        if how:  # not by its name: why it is this model all the same
            reason = f"{reason}; {how}"
        out.append({"campaign": name, "entry": seen[name][1], "verdict": word, "reason": reason})
    return out


def _first_failure(result: Mapping[str, Any]) -> str:
    """The first failed gate of a verdict result and its reason ("" where none failed)."""
    for g in result.get("gates") or []:
        if isinstance(g, dict) and g.get("status") == "failed":
            return f"{g.get('name')}: {g.get('reason') or ''}".strip()
    return ""


# rules under which evidence a verdict relied on stops standing after it was recorded
_WITHDRAWN = (
    Rule.SUPERSEDED,
    Rule.SELF_SUPERSEDED,
    Rule.REJECTED_BY_ACCEPTANCE,
    Rule.REVOKED,
    Rule.OUTSIDE_VALIDITY,
    Rule.BAD_SIGNATURE,
)


def _why_not(ledger: Ledger, verdict: Evidence, result: Mapping[str, Any]) -> str:
    """Why the re-derived ``result`` is not QUALIFIED ("" when it is), leading with what changed since the
    verdict was recorded: evidence it used that no longer stands (superseded, rejected, its key revoked —
    naming the entry and what took it out) or that went stale by the reference time; then the first gate
    that did not pass. A gate's own reason can blame a consequence (a host probe of "another host" once the
    launch that ran there is superseded); the withdrawn evidence is the cause."""
    from ledger.policy.verdict import recorded_result

    if result["verdict"] == QUALIFIED:
        return ""
    failing = [g for g in result["gates"] if g["status"] != "passed"]
    gate = f"{failing[0]['name']} {failing[0]['status']}: {failing[0].get('reason', '')}" if failing else ""
    unjudged = result.get("unjudged") or []
    if not gate and unjudged:  # every gate passed; what no gate judges keeps it from QUALIFIED
        first = unjudged[0]
        gate = f"{first.get('kind', 'gate.result')} {str(first['entry'])[:16]}: {first['detail']}"
    try:
        used = set(recorded_result(ledger.store, verdict.payload, verdict.id).get("used") or [])
    except LedgerError:
        used = set()  # the recorded result cannot be read: the rejections of the re-derivation speak
    rejected = [r for r in result.get("rejected") or [] if not used or r.get("entry") in used]
    withdrawn = [r for r in rejected if r.get("rule") in _WITHDRAWN]
    stale = [r for r in rejected if r.get("rule") == Rule.STALE]
    parts: list[str] = []
    if withdrawn:
        parts.append(
            "the verdict's evidence no longer stands: "
            + "; ".join(f"{r['kind']} {str(r['entry'])[:16]} {r['detail']}" for r in withdrawn[:3])
            + (f" (and {len(withdrawn) - 3} more)" if len(withdrawn) > 3 else "")
        )
    if stale:
        parts.append(
            "its evidence is stale: "
            + "; ".join(f"{r['kind']} {str(r['entry'])[:16]} {r['detail']}" for r in stale[:3])
            + (f" (and {len(stale) - 3} more)" if len(stale) > 3 else "")
        )
    if parts and gate:
        gate = f"as a result, {gate}"
    return "; ".join([*parts, gate] if gate else parts)


def _host_gpus(
    host_entries: list[Evidence],
    usable: Callable[..., bool],
    machine: str | None = None,
    *,
    used: set[Any] | None = None,
    kept: Callable[[Evidence], str | None] | None = None,
    qualified: Sequence[Evidence] = (),
    one_machine: Callable[[list[Evidence]], str | None] | None = None,
) -> tuple[list[int] | None, str, Evidence | None, dict[int, str]]:
    """GPU indexes on the latest usable host probe of the host (None: no such probe, or which GPUs are on
    the host cannot be told), what it says of them, that probe (None where there is none, or where its GPUs
    cannot be told apart), and why a GPU the verdict qualified is not there at its index (index -> text) —
    of ``machine``, the one the verdict's campaign job ran on, where it records one (its name as
    ``host_key`` compares host names: ``GPU-BOX-1`` and ``gpu-box-1.`` are that machine), a probe of
    another machine filed under the host shows that machine's GPUs (as the verdict's rule other-machine
    rejects it). Where the job records no machine, the host's probes must meet the qualification's own
    rule that one host is one machine (``one_machine``: ``_one_machine_rule``): probes naming two machines
    leave the host's GPUs untold (None), as its host-prerequisites gate cannot judge them either.

    "Latest" by the log and by what was observed can differ: a spooled probe observed at 09:30 and logged
    at 13:00 comes after one observed at 12:00 in the log. A GPU is known to be on the host only where
    every newest probe lists it (``snapshot.newest_entries``, the verdict's rule: the last-logged probe and
    every one observed last, ties each): a late upload does not bring back a GPU a newer observation saw
    gone, nor the reverse. The last-observed probe is the one a GPU fault must come after.

    A GPU is still the one the verdict qualified as the verdict's own rule decides it
    (``ledger.devices.gpus_not_listed``: the same GPU by UUID where both probes record one, else by
    index): where a probe the verdict judged the host on (``qualified``) lists a GPU at an index that a
    newest probe does not list, the GPU at that index is another one (replaced, or renumbered after one
    fell off the bus) or none: that index is not among those on the host, and the text names the GPU the
    verdict qualified and the one there now. An index no such probe lists is judged by the newest
    probes alone.

    A probe that does not list (by its index) a GPU of ``used`` — the layout's —, or that lists another GPU
    at its index than the verdict qualified, shows that GPU gone: it is read as a failure (``usable``'s
    ``shows_failure``), so a rejection or its own signer's supersession withholds its credit but leaves it
    among the probes, and as a newest probe it refuses the GPU; only a withdrawal (another key's
    supersession, a signer not trusted) drops it, and an older probe that lists the GPU stands. ``kept``
    (an entry -> why it is kept as evidence against, or None) names such a probe in the text."""
    want = host_key(machine) if machine is not None else None
    wanted = used or set()

    def of_machine(e: Evidence) -> bool:
        return want is None or host_key(str(e.payload.get("hostname") or "")) == want

    def gone_at(e: Evidence, indexes: set[Any]) -> list[tuple[Evidence, int, Any]]:
        # the GPUs the verdict's probes show at these indexes that ``e`` does not list (replaced or gone)
        now = e.payload.get("gpus") or []
        return [
            (q, place, gpu)
            for q in qualified
            for place, gpu in gpus_gone_at(q.payload.get("gpus") or [], now, indexes)
        ]

    def shows_gpu_gone(e: Evidence) -> bool:
        # only a probe of the machine shows its GPUs gone (another machine's is not read at all)
        listed = e.payload.get("gpus")
        indexes = (
            {g.get("index") for g in listed if isinstance(g, dict)} if isinstance(listed, list) else set()
        )
        return of_machine(e) and (bool(wanted - indexes) or bool(gone_at(e, wanted)))

    probes = [
        e
        for e in host_entries
        if e.kind == "host.probe" and usable(e, shows_failure=shows_gpu_gone) and of_machine(e)
    ]
    if not probes:
        return None, "no accepted host probe", None, {}
    if want is None and one_machine is not None:
        untold = one_machine(probes)
        if untold is not None:
            return None, untold, None, {}
    newest = newest_entries(probes)
    # the last observed (its latest seq where several tie): every probe observed last is among the newest
    last_observed = max(newest, key=lambda e: (e.observed_time, e.seq))

    def where(e: Evidence) -> str:
        why = kept(e) if kept is not None else None
        return f"host probe {e.id[:16]} ({e.collected_at}{'; ' + why if why else ''})"

    indexes: list[list[Any]] = []
    for e in newest:
        gpus = e.payload.get("gpus") or []
        if any(not isinstance(g, dict) or g.get("index") is None for g in gpus):
            # a GPU listed without its index: which of the host's GPUs a service's index names cannot be
            # told (its place in the list is no index), so no GPU index is known to be on the host
            return (
                None,
                f"{where(e)} lists a GPU without its index: which GPU is which cannot be told",
                None,
                {},
            )
        indexes.append([g["index"] for g in gpus])
    idx = [i for i in indexes[0] if all(i in other for other in indexes[1:])]
    # a GPU the verdict qualified that a newest probe does not list at its index: that index holds another
    # GPU (or none) — not the GPU the verdict judged
    replaced: dict[int, str] = {}
    for e in newest:
        for q, place, gpu in gone_at(e, set(idx)):
            index = gpu_index(gpu, place)
            there = gpu_at(e.payload.get("gpus") or [], index)
            now = (
                f"it lists {gpu_name(there[1], there[0])} there"
                if there is not None
                else "it lists none there"
            )
            replaced.setdefault(
                index,
                f"the GPU the verdict qualified there, {gpu_name(gpu, place)} on host probe {q.id[:16]} "
                f"(collected {q.collected_at}), is not on {where(e)}: {now} — another GPU replaced it (or it "
                "moved); ",
            )
    idx = [i for i in idx if i not in replaced]
    text = ", ".join(f"GPU{i}" for i in idx) or "no GPU"
    return idx, f"{text} on {' and '.join(where(e) for e in newest)}", last_observed, replaced


def _probe_text(probe: Evidence | None) -> str:
    return f"host probe {probe.id[:16]}, collected {probe.collected_at}" if probe is not None else ""


def _gpu_faults_after(
    host_entries: list[Evidence], probe: Evidence, usable: Any, params: Mapping[str, Any], benign: set[str]
) -> tuple[dict[str | None, list[dict[str, Any]]], list[dict[str, Any]]]:
    """The GPU events the kernel logs of the host record after its latest host probe (``probe``), of the
    logs ``usable`` lets stand as the failure they show (trusted, not withdrawn: a rejection or its own
    signer's supersession withholds credit only),
    classified by the GPU-fault catalogue as the verdict classifies them (the derived ``gpu_events``:
    ``acceptance._host_gpu_events``), leaving out those of a class in ``benign`` (the qualification's
    ``params.gpu_benign_classes``: ``_benign_classes``) and those whose catalogue code is in
    ``params.gpu_codes_handled`` (a check of the policy judges them: a P2P fault): by the PCI address of
    the device each names (``_pci``, as the verdict matches a launch's GPUs), and those whose device cannot
    be told — none recorded, one that is no PCI address, or an event of the whole host (the OOM killer:
    ``ledger.gpu_faults.host_wide``).

    The probe, taken before such an event, does not show the GPU usable after it: a GPU fallen off the bus
    at 08:10 is gone, however many probes listed it before. An event is after the probe when its time is at
    or after the probe's observed time; one without a time, when its log was logged at or after it (the log
    may have read it at any time up to then: its claimed read time does not narrow that)."""
    from ledger.gpu_faults import host_wide

    handled = params.get("gpu_codes_handled")
    handled = {str(c) for c in handled} if isinstance(handled, list) else set()
    since = probe.observed_time
    logs = [k for k in host_entries if k.kind == "kernel.log" and isinstance(k.payload.get("events"), list)]
    derived = _host_gpu_events(logs, set()).by_entry  # the entries' gpu_events facts, with their times
    by_device: dict[str | None, list[dict[str, Any]]] = {}
    unplaced: list[dict[str, Any]] = []
    for k in logs:
        found: list[tuple[str | None, dict[str, Any]]] = []
        raw = [v if isinstance(v, dict) else {} for v in k.payload["events"]]
        for ev, (t, fact) in zip(raw, derived.get(k.id, []), strict=True):
            after = t >= since if t is not None else k.logged_time >= since
            # an Xid 154 whose recovery action is not None (a reset, drain or reboot needed) is a fault
            # whatever its class, as the qualification judges it
            action = fact.get("recovery_action")
            harmless = fact["fault_class"] in benign and action in (None, "None")
            if not after or harmless or fact["code"] in handled:
                continue
            device = None if host_wide(ev) else _pci(ev.get("device"))
            named = _named_events([{**fact, "time": format_time(t) if t is not None else None}])
            message = ev.get("message")
            line = f": {message[:200]!r}" if isinstance(message, str) and message else ""
            recorded = ev.get("device")
            said = f"device {recorded!r}" if isinstance(recorded, str) and recorded else "no device recorded"
            found.append(
                (
                    device,
                    {
                        "entry": k.id,
                        "time": format_time(t) if t is not None else None,
                        "code": fact["code"],
                        "fault_class": fact["fault_class"],
                        "device": device,
                        "text": f"kernel log {k.id[:16]} (logged {k.logged_at}): {named} ({said}){line}",
                    },
                )
            )
        # trusted and not withdrawn (checked only where it matters): a GPU fault stands though an acceptance
        # rejected its log, or its own signer superseded it — only another key's supersession withdraws it
        if found and usable(k):
            for device, f in found:
                (by_device.setdefault(device, []) if device is not None else unplaced).append(f)
    return by_device, unplaced


def _place_gpu_faults(
    gpus: list[dict[str, Any]], probe: Evidence | None, faults: Mapping[str | None, list[dict[str, Any]]]
) -> None:
    """Give each GPU of the layout (``_layout``) the faults its kernel-log events show after the host's
    latest probe (``_gpu_faults_after``): ``faults``, ``faults_text``, and ``pci_text`` — the PCI address
    the probe lists for its index, which an event's device is matched with. Where the probe records none,
    which GPU an event names cannot be told, so every event naming a device counts (fail closed)."""
    listed = probe.payload.get("gpus") if probe is not None else None
    by_index = {g.get("index"): g for g in listed or [] if isinstance(g, dict)}
    where = _probe_text(probe)
    for item in gpus:
        pci = _pci(by_index[item["gpu"]].get("pci_bus_id")) if item["gpu"] in by_index else None
        mine: list[dict[str, Any]] = []
        if item["gpu"] not in by_index:  # not on the probe: gpu-indexes-exist refuses it
            item["pci_text"] = f"not on {where}" if where else "no accepted host probe"
        elif pci is not None:
            mine = list(faults.get(pci, []))
            item["pci_text"] = f"PCI {pci} on {where}"
        else:
            mine = [f for _, fs in sorted(faults.items(), key=lambda kv: str(kv[0])) for f in fs]
            item["pci_text"] = (
                f"{where} records no PCI address for it: which GPU a kernel-log event names cannot be told"
            )
        item["faults"] = mine
        item["faults_text"] = "; ".join(f["text"] for f in mine)


def _qualification(policy: LoadedPolicy) -> LoadedPolicy:
    """The qualification policy the routing policy names (``[routing] qualification``), from beside it."""

    assert policy.spec.routing is not None
    return load_policy(policy.spec.routing.qualification, policy.path.parent)


# the params whose one copy is the qualification's, which the routing gate reads there (``_qualification``):
# the GPU-fault classes that are no fault, and the engine-name table (another spelling of an engine -> its
# name) that the verdict and the collector compare engines by too. A routing policy stating its own is
# refused (``_refuse_own_copies``): a second copy could disagree with the verdict's — a GPU reset the
# qualification fails on, routed onto; a backend the verdict finds contradicted by the engine it ran, routed
# to as that engine
_QUALIFICATION_PARAMS = ("gpu_benign_classes", "engine_names")


def _refuse_own_copies(policy: LoadedPolicy) -> None:
    """PolicyError where the routing policy (with its acceptance policy) states a param of
    ``_QUALIFICATION_PARAMS``, naming it and where its one copy lives."""
    qual = policy.spec.routing.qualification if policy.spec.routing is not None else "the qualification"
    for name in _QUALIFICATION_PARAMS:
        if name in policy.params:
            raise PolicyError(
                f"{policy.path}: params.{name} is the qualification's ({qual}'s params.{name}, one copy): "
                "the routing gate reads it there; remove it from this policy"
            )


def _engine_aliases(policy: LoadedPolicy) -> dict[str, str]:
    """The engine-name table every engine comparison of the routing gate reads (``names.engine_key``): the
    qualification's ``params.engine_names``, its one copy, as the verdict and the collector read it (a
    routing policy stating its own is refused; a table there that cannot be read is the qualification's
    PolicyError: which engine a route must reach could not be told)."""
    _refuse_own_copies(policy)
    return engine_aliases(_qualification(policy))


def _benign_classes(policy: LoadedPolicy) -> set[str]:
    """The GPU-fault catalogue's classes that are no fault: the qualification's ``params.gpu_benign_classes``,
    its one copy (``unknown`` never is; a list missing or mistyped there names none: every event is a
    fault). A routing policy that states its own list is refused (``_refuse_own_copies``)."""
    _refuse_own_copies(policy)
    benign = _qualification(policy).params.get("gpu_benign_classes")
    return {str(c) for c in benign} - {"unknown"} if isinstance(benign, list) else set()


# the qualification's check that judges a /v1/models probe's identity from the list it recorded, named by
# the routing policy (params.served_identity: its gate and its fail text): restoration-identity applies
# that check, never a copy of it
def _served_identity_check(policy: LoadedPolicy) -> tuple[LoadedPolicy, Condition]:
    named = policy.params.get("served_identity")
    if not isinstance(named, dict) or not all(isinstance(named.get(k), str) for k in ("gate", "check")):
        raise PolicyError(
            f"{policy.path}: params.served_identity must name the qualification's identity check: "
            '{ gate = "…", check = "<the id of the check>" }'
        )
    qual = _qualification(policy)
    gate = next((g for g in qual.gates if g.spec.name == named["gate"]), None)
    checks = list(zip(gate.checks, gate.spec.checks, strict=True)) if gate is not None else []
    found = [compiled[0] for compiled, check in checks if check.id == named["check"]]
    if len(found) != 1:
        raise PolicyError(
            f"{policy.path}: params.served_identity names check {named['check']!r} of gate "
            f"{named['gate']!r}, which {qual.name} does not define (a check's `id`)"
        )
    return qual, found[0]


def _probe_views(policy: LoadedPolicy, probes: list[Evidence], model: str) -> list[dict[str, Any]]:
    """The fresh probes as the routing policy's CEL reads them: each view with ``newest`` (below) and
    ``serves_model`` — for a
    ``/v1/models`` probe, whether the qualification's own identity check (``_served_identity_check``) holds
    for it alone, with the restored ``model`` as the id the engine must serve (a successful answer whose
    recorded list, ``details.served``, holds it; only a probe that records no list is judged by the id it
    names: a claimed identity the recorded list contradicts is not taken); None for every other check."""
    judge: tuple[LoadedPolicy, Condition] | None = None
    # ``newest``: the probe of its check the log took last, and every one observed last (its collected_at,
    # never after the log took it; ties: each) — each must pass (``snapshot.newest_entries``, the verdict's
    # rule): a probe uploaded late from a spool is not newer than what was seen after it, nor can a claimed
    # earlier time hide a later failure
    newest: set[str] = set()
    for name in {str(p.payload.get("check")) for p in probes}:
        newest |= {p.id for p in newest_entries(p for p in probes if str(p.payload.get("check")) == name)}
    out: list[dict[str, Any]] = []
    for p in probes:
        view = p.view()
        serves: bool | None = None
        if p.payload.get("check") == "models":
            judge = judge or _served_identity_check(policy)
            qual, check = judge
            ctx = {"evidence": [view], "params": qual.params, "manifest": {"served_name": model}, "count": 1}
            serves = check.holds(ctx)
        out.append({**view, "serves_model": serves, "newest": p.id in newest})
    return out


def _identities_text(views: list[dict[str, Any]]) -> str:
    """The model ids the fresh probes name (``model_identity``), then those the /v1/models answers listed
    (``details.served``) where that differs."""
    claimed = sorted(
        {str(v["payload"]["model_identity"]) for v in views if v["payload"].get("model_identity")}
    )
    listed = sorted(
        {
            str(i)
            for v in views
            if v["payload"].get("check") == "models"
            and isinstance(v["payload"].get("details"), dict)
            and isinstance(v["payload"]["details"].get("served"), list)
            for i in v["payload"]["details"]["served"]
        }
    )
    text = ", ".join(claimed) or "(none reported)"
    if listed and listed != claimed:
        text += f"; /v1/models listed: {', '.join(listed)}"
    return text


def record_routing_change(
    ledger: Ledger,
    result: dict[str, Any],
    *,
    key: str,
    at: datetime | None = None,
    clock: datetime | None = None,
    read: int | None = None,
    judge_at: Callable[[datetime], tuple[bool, str]] | None = None,
) -> Any:
    """Append the decision as a signed ``routing.change`` entry (refs the verdict it relied on), carrying
    the reference time it was judged at (``judged_at``). Only a decision judged at a time the log and the
    clock have both reached is recorded (``record_time.refuse_unrecordable_judgement``, the one check
    ``ledger verdict --record`` passes too): one judged before the log time of the last entry of the log
    it was asked of (``read``: its size when judged, which a past ``--now`` cuts — still a past what-if;
    the checkpoint it was judged at where later) judged a ledger that did not exist then, and one judged after
    the clock (``clock``, the one reading the caller judged by; else ``at`` where the caller sets the log
    time; else now: ``--now`` in the future) may allow what is refused now — a failure that ages out of
    its bound tomorrow still stands today; an allowed decision judged before the clock is refused where
    ``judge_at`` (the same decision judged at a given time, ``decision_again_at``) does not allow it there.
    Each is refused (InputError, nothing recorded): a what-if is for reading.

    A caller that does not say what it read (``read`` None, a library call) is held to the whole log as
    it stands when the decision is recorded (``record_time.read_size``): a decision judged at a past time
    the log has moved past is refused, as the CLI refuses it. One that does not say how it judges again
    (``judge_at`` None) records no allowed decision judged before the clock: whether it is allowed now is
    unknown (``record_time.not_judged_again``; ``Ledger.record_routing_change`` judges it again itself).
    The clock is read once, here, where the caller gave none (``record_time.record_clock``)."""
    from ledger.entries import KIND_MODELS
    from ledger.policy.record_time import record_clock, refuse_unrecordable_judgement

    judged_at = str(result["now"])
    size = int(result["checkpoint"]["size"])
    passed = "allowed" if result["allowed"] is True else None
    when, what = parse_time(judged_at), "routing decision"
    now = clock or at or record_clock()
    refuse_unrecordable_judgement(
        ledger, size, when, what, read=read, clock=now, passed=passed, judge_at=judge_at
    )
    dep = result.get("deployment_spec") or {}
    payload = {
        "action": result["action"],
        "allowed": bool(result["allowed"]),
        "reasons": list(result["reasons"]),
        "deployment": dep,
        "judged_at": judged_at,
    }
    KIND_MODELS[("routing.change", 1)].model_validate(payload)
    refs = [("verdict", result["verdict"]["entry"])] if result.get("verdict") else []
    statement = ledger.make_statement(
        "routing.change", dict(result["subject"]), payload, refs=refs, collected_at=at
    )
    return ledger.append([ledger.sign(statement, key)], logged_at=at)[0]


def decision_again_at(
    ledger: Ledger, result: Mapping[str, Any], policy: LoadedPolicy
) -> Callable[[datetime], tuple[bool, str]]:
    """The decision ``result`` judged again at another time (``record_routing_change``'s ``judge_at``):
    its subject, action and deployment under ``policy`` on the log as it stands, (whether it is allowed,
    what it says). ``policy`` must be the one it was judged under (its identity): else it is not judged
    again and reads as not allowed (a past allowed decision is then not recorded)."""

    def judge(when: datetime) -> tuple[bool, str]:
        if policy.identity() != result.get("policy"):
            return False, (
                f"not judged again: it was judged under {result.get('policy')!r}, not the policy given "
                f"({policy.identity()!r})"
            )
        r = check_routing_change(
            ledger,
            policy,
            dict(result["subject"]),
            action=str(result["action"]),
            deployment=result.get("deployment_spec"),
            now=when,
        )
        return bool(r["allowed"]), "allowed" if r["allowed"] else "refused: " + "; ".join(r["reasons"])

    return judge


def parse_now(text: str | None) -> datetime | None:
    return parse_time(text) if text else None
