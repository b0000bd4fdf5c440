"""The evidence a policy sees: a subject's entries as the log stood at one size, parsed for evaluation."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache, lru_cache
from typing import TYPE_CHECKING, Any

from ledger.answers import structured_answer_problem
from ledger.entries import KIND_MODELS, REF_REQUIRED, host_key, parse_time
from ledger.errors import EntryNotFoundError, IntegrityError, SignatureError
from ledger.keyring import Keyring
from ledger.policy.model import ENTRY_VIEW_FIELDS
from ledger.signing import PublicKey, pae

if TYPE_CHECKING:
    import sqlalchemy as sa

    # the ledger as the policy sees it (ledger.service.Ledger is one); the policy never imports the service
    from ledger.policy.port import PolicyLedger as Ledger

__all__ = [
    "Evidence",
    "Snapshot",
    "check_signature",
    "clear_caches",
    "evidence_from_row",
    "keyring_at",
    "load_snapshot",
    "newest_entries",
    "newest_text",
    "read_snapshot_rows",
    "signature_problems",
    "slim_views",
    "snapshot_from_rows",
    "verified_keys",
]

# Entries are immutable, but a row can be edited behind the log's back (the tamper test does exactly that),
# so the caches below are keyed by the SHA-256 of the stored envelope bytes, never by the entry id alone:
# bytes that differ from the ones parsed or verified before simply miss the cache.
PARSE_CACHE_ENTRIES = 50_000  # parsed statements (a 10,000-entry campaign several times over)
SIGNATURE_CACHE_ENTRIES = 500_000  # (envelope digest → public key) pairs whose signature verified


class _Parsed:
    """What the envelope bytes say, parsed once per process; shared between evaluations, never mutated."""

    __slots__ = ("answer", "payload_bytes", "payload_type", "schema", "signature", "statement")

    def __init__(self, payload_type: str, payload_bytes: bytes, signature: bytes, statement: Any) -> None:
        self.payload_type = payload_type
        self.payload_bytes = payload_bytes
        self.signature = signature
        self.statement = statement
        self.schema: str | bool | None = False  # False: not checked yet; None: valid; str: the problem
        self.answer: str | bool | None = False  # ``structured_answer_problem``, the same way


class _Bounded:
    """A thread-safe dict that forgets its oldest insertions past ``limit`` entries."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.lock = threading.Lock()
        self.data: dict[bytes, Any] = {}

    def get_many(self, keys: Iterable[bytes]) -> list[Any]:
        with self.lock:
            get = self.data.get
            return [get(k) for k in keys]

    def get(self, key: bytes) -> Any:
        with self.lock:
            return self.data.get(key)

    def put(self, key: bytes, value: Any) -> None:
        self.put_many([(key, value)])

    def put_many(self, items: Iterable[tuple[bytes, Any]]) -> None:
        with self.lock:
            self.data.update(items)
            if len(self.data) > self.limit:
                for old in list(self.data)[: max(len(self.data) - self.limit, self.limit // 10)]:
                    del self.data[old]

    def clear(self) -> None:
        with self.lock:
            self.data.clear()


_PARSED = _Bounded(PARSE_CACHE_ENTRIES)
PARSED_HERE = [0]  # envelopes this process parsed itself (not from a memo): when to save the home's file
ANSWERS_HERE = [0]  # structured answers this process judged itself (each may import jsonschema): the same
_VERIFIED = _Bounded(SIGNATURE_CACHE_ENTRIES)


# ``ledger.policy.result_cache`` keys remembered verdicts with this salt (empty: as every process does) and
# registers the hook that forgets its results
RESULT_SALT = [b""]
CLEAR_HOOKS: list[Callable[[], None]] = []


def same_hosts(named: Iterable[str], among: Iterable[str]) -> list[str]:
    """The spellings in ``among`` of the hosts ``named`` (as ``host_key`` compares them), sorted."""
    keys = {host_key(h) for h in named}
    return sorted(h for h in set(among) if host_key(h) in keys)


def newest_entries(entries: Iterable[Evidence]) -> list[Evidence]:
    """ "The newest" of ``entries``, judged both ways (docs/POLICY.md): the one the log took last (highest
    ``seq``) and every one observed last (``observed_time``: its ``collected_at``, never after the log took
    it) — a pass spooled and uploaded late is not newer than a failure seen after it, nor can a claimed
    earlier time hide a later failure. Each of them must hold; where several tie for the last observed
    time, every one of them must (fail closed: which was seen last cannot be told). In log order; empty
    for no entries. The one rule for "the newest" wherever the verdict judges it."""
    items = list(entries)
    if not items:
        return []
    last_logged = max(items, key=lambda e: e.seq)
    latest = max(e.observed_time for e in items)
    return sorted({last_logged, *(e for e in items if e.observed_time == latest)}, key=lambda e: e.seq)


def newest_text(e: Evidence, newest: list[Evidence]) -> str:
    """Why ``e`` (one of ``newest_entries``) is among the newest, for a reason: logged last, observed
    last, or both — with its log position and observed time."""
    logged_last = e.seq == max(n.seq for n in newest)
    observed_last = e.observed_time == max(n.observed_time for n in newest)
    tied = sum(1 for n in newest if n.observed_time == e.observed_time) > 1
    how = [
        *(["logged last"] if logged_last else []),
        *([("observed last (tied)" if tied else "observed last")] if observed_last else []),
    ]
    return f"{' and '.join(how)}: seq {e.seq}, observed {_observed_text(e)}"


def _observed_text(e: Evidence) -> str:
    return e.observed_time.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def clear_caches() -> None:
    """Forget every parsed envelope, every signature check and every remembered verdict, and read no
    verdict a home remembered before (tests; a process never needs to)."""
    _PARSED.clear()
    _VERIFIED.clear()
    RESULT_SALT[0] = os.urandom(16)
    for hook in CLEAR_HOOKS:
        hook()


@cache
def _defaults(kind: str) -> dict[str, Any]:
    """Every field of a kind's payload model with its default (None where required), so CEL sees them all."""
    model = KIND_MODELS.get((kind, 1))
    if model is None:
        return {}
    out: dict[str, Any] = {}
    for name, f in model.model_fields.items():
        out[name] = None if f.is_required() else f.get_default(call_default_factory=True)
    return out


def payload_problem(statement: Any) -> str | None:
    """Why a stored payload does not validate against its kind's strict model (None: it does).

    Ingest refuses such payloads; this catches entries stored before a model became stricter, so that
    selection and CEL never see a value of the wrong type.
    """
    from ledger.entries import validate_payload
    from ledger.errors import LedgerError

    try:
        validate_payload(statement["kind"], int(statement.get("kind_version", 1)), statement["payload"])
    except LedgerError as ex:
        return ex.message
    except (KeyError, TypeError, ValueError) as ex:
        return f"payload cannot be read: {ex}"
    return None


def probe_ok(payload: dict[str, Any]) -> bool:
    """A ``health.probe`` succeeded: it says ``ok`` (the boolean) and records the 2xx HTTP status of the
    answer it judged. Every check is an HTTP request, and the collectors write ``ok`` only with a 2xx
    answer, which they record; a record claiming success beside an error status, or with no status (what
    answered is not on the record), or beside an ``error`` text (the collectors write one only for a
    failure), is judged a failure, never a pass."""
    if payload.get("ok") is not True:
        return False
    error = payload.get("error")
    if isinstance(error, str) and error.strip():
        return False
    status = payload.get("http_status")
    return type(status) is int and 200 <= status <= 299


# defaults of the derived facts; their names and types are ledger.policy.model.DERIVED_FIELDS (a test keeps
# the two, and what acceptance._derive sets, equal)
NO_DERIVED: dict[str, Any] = {
    "ok": False,
    "attempt": 0,
    "attempt_logged": 0,
    "job": None,
    "failure_class": None,
    "log_failure_signature": None,
    "log_failure_class": None,
    "log_failure_named": "",
    "log_failure_after_ready_signature": None,
    "log_failure_after_ready_class": None,
    "log_failure_after_ready_named": "",
    "end_failure_signature": None,
    "end_failure_class": None,
    "answer_not_completion": None,
    "structured_valid": False,
    "structured_problem": None,
    "cut_undecided": False,
    # which refusal of the campaign's configuration a probe shows (``ledger.answers.refusal``): None, none
    "refusal": None,
    "sequential_slowest_ms": None,
    "gpu_events_during_run": [],
    "kernel_logs_unread_during_run": [],
    "after_launch_end": False,
    # a probe or harness result its engine's stop from outside cut (``acceptance._mark_stop_cuts``)
    "stop_cut": None,
    # … and whether its launch was held from outside (``acceptance._mark_stop_cuts``)
    "stop_cut_held": False,
    # an engine launch the operator stopped (``acceptance._operator_stopped``): set by ``filter_evidence``
    "operator_stopped": False,
    "newer_run": False,
    "newer_run_named": "",
    "unmatched_job_ends": [],
    "launch_devices_missing": [],
    # ``newest_entries`` among the entries of its kind and host a verdict credits (host probes, model pins)
    "newest": False,
    "newest_named": "",
    "gpus_gone": [],
    "gpus_gone_named": "",
    # a harness result whose own stored artifact contradicts the counts it records (None: none found)
    "artifact_problem": None,
    # a harness run cut from outside whose failures before the cut decide its gate (acceptance.cut_decided)
    "cut_decided": None,
}


# RFC 3339 text → datetime is a pure function; log times repeat (one per append batch)
_time = lru_cache(maxsize=1 << 16)(parse_time)


@dataclass(eq=False, slots=True)
class Evidence:
    """One logged entry, parsed once; ``view()`` is what CEL conditions see as ``e``."""

    seq: int
    id: str
    kind: str
    signer: str
    logged_at: str
    statement: dict[str, Any]
    payload_type: str
    payload_bytes: bytes
    signature: bytes
    digest: bytes = b""  # SHA-256 of the stored envelope bytes ("" when built another way)
    signer_name: str = ""
    roles: tuple[str, ...] = ()
    in_subject: bool = True
    parsed: _Parsed | None = field(default=None, repr=False)
    # facts derived from the log by the acceptance filter (attempt number, job, failure class)
    derived_: dict[str, Any] | None = field(default=None, repr=False)
    _view: dict[str, Any] | None = field(default=None, repr=False)
    _collected: datetime | None = field(default=None, repr=False)
    _logged: datetime | None = field(default=None, repr=False)
    _observed: datetime | None = field(default=None, repr=False)

    @property
    def subject(self) -> dict[str, str]:
        s: dict[str, str] = self.statement["subject"]
        return s

    @property
    def payload(self) -> dict[str, Any]:
        p: dict[str, Any] = self.statement["payload"]
        return p

    @property
    def typed_payload(self) -> dict[str, Any]:
        """The payload as CEL and gate selection see it: every model field, defaults where absent."""
        if self._view is not None:
            p: dict[str, Any] = self._view["payload"]
            return p
        return {**_defaults(self.kind), **self.payload}

    @property
    def derived(self) -> dict[str, Any]:
        return self.derived_ if self.derived_ is not None else NO_DERIVED

    def set_derived(self, derived: dict[str, Any]) -> None:
        """Record what the log shows of this entry (``derived``); a view built before shows it too."""
        self.derived_ = derived
        if self._view is not None:
            self._view["derived"] = derived

    def schema_problem(self) -> str | None:
        """``payload_problem`` of this entry, remembered with its parsed envelope (one check per process)."""
        return self._remembered("schema", payload_problem, self.statement)

    def structured_problem(self) -> str | None:
        """``structured_answer_problem`` of this entry's payload, remembered with its parsed envelope."""
        return self._remembered("answer", structured_answer_problem, self.payload)

    def _remembered(self, slot: str, check: Callable[[Any], str | None], arg: Any) -> str | None:
        """``check(arg)``, kept in the parsed envelope's ``slot`` (False there: not checked yet)."""
        parsed = self.parsed
        if parsed is None:
            return check(arg)
        got = getattr(parsed, slot)
        if got is False:
            got = check(arg)
            setattr(parsed, slot, got)
            if slot == "answer":
                ANSWERS_HERE[0] += 1
        return got if isinstance(got, str) else None

    @property
    def collected_at(self) -> str:
        c: str = self.statement["collected_at"]
        return c

    @property
    def collected_time(self) -> datetime:
        if self._collected is None:
            self._collected = _time(self.collected_at)
        return self._collected

    @property
    def logged_time(self) -> datetime:
        if self._logged is None:
            self._logged = _time(self.logged_at)
        return self._logged

    @property
    def observed_time(self) -> datetime:
        """When the entry was observed, as far as the log can know: its ``collected_at``, but never after
        the log took it (a claim of a later time — a clock ahead, or a back-stop against staleness — is
        bounded by the log time)."""
        if self._observed is None:
            self._observed = min(self.collected_time, self.logged_time)
        return self._observed

    def refs(self, rel: str) -> list[str]:
        refs = self.statement.get("refs")
        if not refs:
            return []
        return [r["id"] for r in refs if r["rel"] == rel]

    @property
    def artifacts(self) -> list[dict[str, Any]]:
        a: list[dict[str, Any]] = self.statement.get("artifacts", [])
        return a

    def view(self) -> dict[str, Any]:
        """Every field; payload filled with the kind's model defaults."""
        if self._view is None:
            refs: dict[str, list[str]] = {}
            for r in self.statement.get("refs", ()):
                refs.setdefault(r["rel"], []).append(r["id"])
            self._view = {
                "id": self.id,
                "seq": self.seq,
                "kind": self.kind,
                "subject": self.subject,
                "payload": {**_defaults(self.kind), **self.payload},
                "derived": self.derived,
                "refs": refs,
                "signer": self.signer_name,
                "roles": list(self.roles),
                "collected_at": self.collected_at,
                "logged_at": self.logged_at,
                "artifacts": [a["name"] for a in self.artifacts],
                "in_subject": self.in_subject,
            }
        return self._view

    def slim_view(
        self, top: frozenset[str], payload: frozenset[str] | None, derived: frozenset[str] | None = None
    ) -> dict[str, Any]:
        """``view()`` restricted to the ``top`` fields and (unless None: all) the ``payload`` and
        ``derived`` fields.

        Equal to the full view for any CEL expression that reads only those fields by name (see
        ``ledger.policy.conditions.fields_read``); much cheaper to convert for long evidence lists.
        """
        if self._view is not None:
            full = self._view
            out = {k: full[k] for k in top if k in full}
            if payload is not None and "payload" in out:
                p = full["payload"]
                out["payload"] = {k: p[k] for k in payload if k in p}
            if derived is not None and "derived" in out:
                d = full["derived"]
                out["derived"] = {k: d[k] for k in derived if k in d}
            return out
        out = {}
        for k in top:
            if k == "payload":
                own = self.payload
                defaults = _defaults(self.kind)
                if payload is None:
                    out[k] = {**defaults, **own}
                else:
                    pay: dict[str, Any] = {}
                    for name in payload:
                        if name in own:
                            pay[name] = own[name]
                        elif name in defaults:
                            pay[name] = defaults[name]
                    out[k] = pay
            elif k == "derived" and derived is not None:
                d = self.derived
                out[k] = {name: d[name] for name in derived if name in d}
            elif k in _SIMPLE:
                out[k] = getattr(self, _SIMPLE[k])
            elif k in _VIEW_FIELDS:
                out[k] = self.view()[k]
        return out

    def verify_signature(self, public: PublicKey) -> None:
        """Re-verify the Ed25519 signature over the DSSE PAE of the stored payload bytes.

        A success is remembered for these exact envelope bytes and this key (a failure never is), so the
        next verdict over the same entries does not pay for Ed25519 again.
        """
        if self.digest and _VERIFIED.get(self.digest) == public.raw:
            return
        public.verify(self.signature, pae(self.payload_type, self.payload_bytes))
        if self.digest:
            _VERIFIED.put(self.digest, public.raw)


def verified_keys(digests: list[bytes]) -> list[bytes | None]:
    """For each envelope digest, the raw public key its signature verified with before (None: not yet)."""
    found: list[bytes | None] = _VERIFIED.get_many(digests)
    return found


def remember_verified(pairs: Iterable[tuple[bytes, bytes]]) -> None:
    """Take (envelope digest, raw public key) pairs a ledger home vouches for (``result_cache``'s
    MAC-checked file) as verified in this process."""
    _VERIFIED.put_many((digest, raw) for digest, raw in pairs if len(digest) == 32 and len(raw) == 32)


def remember_parsed(items: Iterable[tuple[Any, ...]]) -> int:
    """Take parsed envelopes a ledger home vouches for (``result_cache``'s MAC-checked file: tuples of
    envelope digest, payload type, payload bytes, signature, statement, schema answer and structured
    answer, as ``parsed_items`` writes them) into this process's memo; returns how many were taken."""
    good = [
        (d, _parsed_of(t, pb, sig, st, schema, answer))
        for d, t, pb, sig, st, schema, answer in items
        if type(d) is bytes and len(d) == 32 and type(t) is str and type(pb) is bytes and type(sig) is bytes
        and type(st) is dict and (schema is None or schema is False or type(schema) is str)
        and (answer is None or answer is False or type(answer) is str)
    ]  # fmt: skip
    _PARSED.put_many(good)
    return len(good)


def _parsed_of(
    payload_type: str, payload: bytes, signature: bytes, statement: Any, schema: Any, answer: Any
) -> _Parsed:
    p = _Parsed(payload_type, payload, signature, statement)
    p.schema = schema
    p.answer = answer
    return p


def parsed_items(entries: Iterable[Evidence]) -> list[tuple[Any, ...]]:
    """What ``remember_parsed`` takes back, for the entries parsed from stored bytes (a digest)."""
    return [
        (e.digest, p.payload_type, p.payload_bytes, p.signature, p.statement, p.schema, p.answer)
        for e in entries
        if (p := e.parsed) is not None and len(e.digest) == 32
    ]


def slim_views(
    entries: list[Evidence],
    top: frozenset[str],
    payload: frozenset[str] | None,
    *,
    as_set: bool = False,
    derived: frozenset[str] | None = None,
) -> list[dict[str, Any]]:
    """``[e.slim_view(top, payload, derived) for e in entries]``, with the per-field work hoisted out of
    the loop.

    ``as_set``: equal views are returned once (first occurrence, in order) — for lists that CEL only
    quantifies with ``exists``/``all``. Views are equal when every value has the same type and value
    (``1``, ``1.0`` and ``true`` stay distinct); a view holding lists or maps is always kept.
    """
    if payload is None or "payload" not in top or not top <= _SIMPLE.keys() | {"payload"}:
        return [e.slim_view(top, payload, derived) for e in entries]
    if "derived" not in top:
        derived = None
    simple = [(k, _SIMPLE[k]) for k in sorted(top) if k != "payload" and (k != "derived" or derived is None)]
    names = sorted(payload)
    defaults_by_kind: dict[str, dict[str, Any]] = {}
    out: list[dict[str, Any]] = []
    seen: set[tuple[Any, ...]] = set()
    if as_set:
        return _slim_set(entries, simple, names, None if derived is None else sorted(derived))
    dnames = sorted(derived) if derived is not None else None
    for e in entries:
        own = e.statement["payload"]
        defaults = defaults_by_kind.get(e.kind)
        if defaults is None:
            d = _defaults(e.kind)
            defaults = defaults_by_kind[e.kind] = {n: d[n] for n in names if n in d}
        pay = {n: own[n] for n in names if n in own}
        if len(pay) < len(names):
            for n, v in defaults.items():
                if n not in pay:
                    pay[n] = v
        view = {k: getattr(e, attr) for k, attr in simple}
        if dnames is not None:
            d = e.derived
            view["derived"] = {n: d[n] for n in dnames if n in d}
        if as_set:
            key = _scalar_key(view, pay)
            if key is not None:
                if key in seen:
                    continue
                seen.add(key)
        view["payload"] = pay
        out.append(view)
    return out


_SCALARS = (str, int, bool, type(None))
_ABSENT = object()  # a payload field neither the entry nor its kind's defaults have


def _slim_set(
    entries: list[Evidence], simple: list[tuple[str, str]], names: list[str], dnames: list[str] | None
) -> list[dict[str, Any]]:
    """``slim_views(…, as_set=True)`` for plain field names: the same views, in the same order.

    An entry's values (with their types, and which payload and ``derived`` fields are present) are
    compared as one tuple before any view is built, so the repeated views of a long list cost a tuple
    each; floats, maps and lists are compared frozen (``_frozen``), and an entry holding anything else
    keeps its view. ``dnames``: the ``derived`` fields read (None: ``derived`` is in ``simple``, whole).
    """
    attrs = [attr for _, attr in simple]
    dn = dnames or []
    ends = (len(attrs), len(attrs) + len(names))  # where the payload's values and the derived's begin
    defaults_by_kind: dict[str, dict[str, Any]] = {}
    plain_types: dict[tuple[type, ...], bool] = {}
    other_at: dict[tuple[type, ...], list[int]] = {}  # per type tuple: where its non-plain values are
    plain = {str, int, bool, type(None), object}
    out: list[dict[str, Any]] = []
    seen_plain: set[tuple[Any, ...]] = set()
    for e in entries:
        own = e.statement["payload"]
        defaults = defaults_by_kind.get(e.kind)
        if defaults is None:
            d = _defaults(e.kind)
            defaults = defaults_by_kind[e.kind] = {n: d[n] for n in names if n in d}
        values = [getattr(e, a) for a in attrs]
        values += [own[n] if n in own else defaults.get(n, _ABSENT) for n in names]
        if dn:
            d = e.derived
            values += [d.get(n, _ABSENT) for n in dn]
        types = tuple(map(type, values))
        is_plain = plain_types.get(types)
        if is_plain is None:
            is_plain = plain_types[types] = all(t in plain for t in types)
        if is_plain:
            key = (tuple(values), types)
            if key in seen_plain:
                continue
            seen_plain.add(key)
        else:
            # maps and lists (an empty `details`) frozen in place: still one tuple per entry
            where = other_at.get(types)
            if where is None:
                where = other_at[types] = [i for i, t in enumerate(types) if t not in plain]
            frozen = list(values)
            for i in where:
                f = _frozen(values[i])
                if f is None:
                    break  # a value CEL cannot be told apart by: the view is kept as it is
                frozen[i] = f
            else:
                key = (tuple(frozen), types)
                if key in seen_plain:
                    continue
                seen_plain.add(key)
        view = {k: v for (k, _), v in zip(simple, values, strict=False)}
        if dnames is not None:
            view["derived"] = {n: v for n, v in zip(dn, values[ends[1] :], strict=True) if v is not _ABSENT}
        # the order of ``slim_views``: the entry's own fields, then the defaults it lacks
        pvals = list(zip(names, values[ends[0] : ends[1]], strict=True))
        pay = {n: v for n, v in pvals if n in own}
        for n, v in pvals:
            if n not in own and v is not _ABSENT:
                pay[n] = v
        view["payload"] = pay
        out.append(view)
    return out


def _scalar_key(view: dict[str, Any], pay: dict[str, Any]) -> tuple[Any, ...] | None:
    """A key equal only for views equal in CEL; None when a value is not a plain scalar."""
    key: list[Any] = []
    for part in (view, pay):
        for k in sorted(part):
            v = part[k]
            frozen = _frozen(v)
            if frozen is None:
                return None
            key.append((k, frozen))
        key.append("|")
    return tuple(key)


def _frozen(v: Any, depth: int = 0) -> tuple[Any, ...] | None:
    """``v`` as a hashable value equal only for values equal in CEL (types kept: 1 is not 1.0 nor True);
    lists and maps of such values too (an empty ``details`` map no longer makes every view distinct).
    None for anything else, or nested deeper than a few levels."""
    t = type(v)
    if t in _SCALARS:
        return (t, v)
    if t is float:
        return (float, repr(v))
    if depth > 4:
        return None
    if t is list:
        items = [_frozen(x, depth + 1) for x in v]
        return None if any(i is None for i in items) else (list, tuple(items))
    if t is dict:
        pairs = []
        for k in sorted(v, key=str):
            x = v[k]
            tx = type(x)
            # a scalar member inline (a derived-facts map holds a dozen): the value ``_frozen`` gives it
            f = (tx, x) if tx in _SCALARS else _frozen(x, depth + 1)
            if f is None or type(k) is not str:
                return None
            pairs.append((k, f))
        return (dict, tuple(pairs))
    return None


_VIEW_FIELDS = frozenset(ENTRY_VIEW_FIELDS)  # the one list, ledger.policy.model
_SIMPLE = {
    "id": "id",
    "seq": "seq",
    "kind": "kind",
    "subject": "subject",
    "signer": "signer_name",
    "collected_at": "collected_at",
    "logged_at": "logged_at",
    "in_subject": "in_subject",
    "derived": "derived",
}


@dataclass
class Snapshot:
    """The entries a verdict reads, as of ``size``, with the keyring and reference time at that size."""

    size: int
    subject: dict[str, str]
    entries: list[Evidence]
    keyring: Keyring
    reference_time: str
    by_id: dict[str, Evidence] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.by_id = {e.id: e for e in self.entries}


def evidence_from_row(row: Any) -> Evidence:
    """Parse a log row (or a LoggedEntry: same attribute names) for evaluation."""
    return _parse_row(row)


def _parse_envelope(envelope: bytes, seq: int) -> _Parsed:
    try:
        env = json.loads(envelope)
        payload_bytes = base64.b64decode(env["payload"], validate=True)
        sig = env["signatures"][0]
        return _Parsed(
            env["payloadType"],
            payload_bytes,
            base64.b64decode(sig["sig"], validate=True),
            json.loads(payload_bytes),
        )
    except (ValueError, KeyError, IndexError, TypeError) as e:
        raise IntegrityError(f"stored entry at seq {seq} cannot be parsed: {e}") from e


def _parse_row(row: Any) -> Evidence:
    envelope = bytes(row.envelope)
    digest = hashlib.sha256(envelope).digest()
    parsed: _Parsed | None = _PARSED.get(digest)
    if parsed is None:
        parsed = _parse_envelope(envelope, row.seq)
        _PARSED.put(digest, parsed)
    return _evidence((row.seq, row.entry_id, row.kind, row.signer, row.logged_at), parsed, digest)


def _evidence(row: Any, parsed: _Parsed, digest: bytes) -> Evidence:
    # positional, in field order (this runs once per entry of every verdict)
    seq, entry_id, kind, signer, logged_at = row[0], row[1], row[2], row[3], row[4]
    return Evidence(
        seq,
        entry_id,
        kind,
        signer,
        logged_at,
        parsed.statement,
        parsed.payload_type,
        parsed.payload_bytes,
        parsed.signature,
        digest,
        parsed=parsed,
    )


def _parse_rows(
    rows: list[Any],
    digests: list[bytes] | None = None,
    keep: Callable[[dict[str, Any]], bool] | None = None,
) -> list[Evidence]:
    """Parse many rows: one cache lookup under one lock, misses parsed and remembered. ``keep``: only the
    rows whose parsed statement it accepts become evidence."""
    if digests is None:
        digests = envelope_digests(rows)
    found = _PARSED.get_many(digests)
    out: list[Evidence] = []
    new: list[tuple[bytes, _Parsed]] = []
    for r, d, hit in zip(rows, digests, found, strict=True):
        parsed: _Parsed = hit
        if hit is None:
            parsed = _parse_envelope(bytes(r[5]), r[0])
            new.append((d, parsed))
        if keep is None or keep(parsed.statement):
            out.append(_evidence(r, parsed, d))
    if new:  # remembered under one lock
        _PARSED.put_many(new)
        PARSED_HERE[0] += len(new)
    return out


def envelope_digests(rows: list[Any]) -> list[bytes]:
    """SHA-256 of each evidence tuple's stored envelope bytes (the key of every cache here)."""
    sha = hashlib.sha256
    return [sha(r[5]).digest() for r in rows]


def keyring_at(ledger: Ledger, size: int, conn: sa.Connection | None = None) -> Keyring:
    """The keyring as of ``size`` entries: ``Ledger.keyring(at_size=size)``."""
    return ledger.keyring(conn, at_size=size)


@dataclass
class SnapshotRows:
    """What a snapshot is built from, as read from the log (nothing parsed yet).

    ``rows``: the subject's evidence tuples and the entries linked to them, in seq order; ``candidates``:
    the hosts that have entries of ``kinds`` below ``size`` (subject index); ``hosts``: those of them that
    the ``rows`` name according to the subject index; ``host_rows``: the entries (of ``kinds``) of those
    hosts that are not in ``rows``, in seq order. Every input of a verdict but the
    policy and the artifact store is here, so a digest of it (``ledger.policy.result_cache``) names the
    evaluation.
    """

    size: int
    subject: dict[str, str]
    rows: list[tuple[Any, ...]]
    candidates: list[str]
    hosts: list[str]
    kinds: tuple[str, ...]
    host_rows: list[tuple[Any, ...]]
    keyring: Keyring
    reference_time: str
    digests: list[bytes] | None = field(default=None, repr=False)  # ``row_digests``, once computed

    def row_digests(self) -> list[bytes]:
        """``envelope_digests(self.rows)``, computed once: the cache key and the parse memo share them."""
        if self.digests is None:
            self.digests = envelope_digests(self.rows)
        return self.digests


def read_snapshot_rows(
    ledger: Ledger,
    subject: dict[str, str],
    size: int | None = None,
    *,
    extra_kinds_by_host: Iterable[str] = ("kernel.log",),
) -> SnapshotRows:
    """The log rows ``load_snapshot`` parses, read in one transaction."""
    if not subject:
        raise EntryNotFoundError("a verdict needs a subject, e.g. --subject campaign=NAME")
    current = ledger.size()
    n = current if size is None else size
    if not 0 < n <= current:
        raise EntryNotFoundError(f"the log has {current} entries; cannot evaluate it at size {n}")
    repo = ledger.repo
    kinds = tuple(extra_kinds_by_host)
    with repo.read() as conn:
        own = repo.subject_rows(conn, subject, n)
        if not own:
            shown = " ".join(f"{k}={v}" for k, v in sorted(subject.items()))
            raise EntryNotFoundError(
                f"no entries for subject {shown} in the first {n} entries of the log",
                hint="check the subject with `ledger log --subject FIELD=VALUE`",
            )
        rows: dict[int, Any] = {r[0]: r for r in own}
        linked: list[int] = []
        for r in _linked_rows(repo, conn, subject, n, rows):
            rows[r[0]] = r
            linked.append(r[0])
        last = repo.logged_at(conn, n - 1)
        ring = keyring_at(ledger, n, conn)
        candidates = repo.kind_hosts(conn, kinds, n) if kinds else []
        # the host entries of every spelling of the hosts the subject's entries name (``host_key``)
        named = repo.subject_hosts(conn, subject, n, linked) if candidates else []
        hosts = same_hosts(named, candidates)
        host_rows = _host_rows(ledger, conn, kinds, hosts, n, rows)
    ordered = [rows[s] for s in sorted(rows)]
    return SnapshotRows(
        size=n,
        subject=dict(subject),
        rows=ordered,
        candidates=candidates,
        hosts=hosts,
        kinds=kinds,
        host_rows=host_rows,
        keyring=ring,
        reference_time=last,
    )


# kinds whose refs name the entries they act on (withdraw, review, decide): one that acts on an entry read
# with the subject is read with it, however many such steps away from the subject's own entries it is
_ACTING_KINDS = frozenset(REF_REQUIRED)
# what an entry of the subject may ref that is read with it though nothing of it refs the subject: context for
# judging the subject's entries, never evidence for or against it (a job another campaign's job_id names:
# a result that refs it as its job contradicts itself, `job-of-other-campaign`)
_CONTEXT_KINDS = frozenset({"job"})


def _linked_rows(repo: Any, conn: Any, subject: dict[str, str], n: int, own: dict[int, Any]) -> list[Any]:
    """The entries below ``n`` read with the subject's own (``own``, by seq), not among them: those that ref
    an own entry (any kind), the supersessions, reviews and acceptances that ref one of those in turn (to a
    fixpoint: a supersession of a supersession of the subject's failure, a review FAILing a review of its
    run — whatever subject they carry), and of the entries the subject's own ref that nothing of the subject
    reaches so, the jobs only (``_CONTEXT_KINDS``). An entry of another subject that an own entry merely refs
    (an acceptance filed under this campaign deciding another campaign's launch) is none of this subject's
    evidence and is not read; nor is what refs only such an entry.

    One ``linked_rows`` read, then one ``referrer_rows`` read per entry of another subject found: a
    campaign's reviews and supersessions usually carry its subject, so there are seldom any."""
    found: dict[int, Any] = {}
    for r in repo.linked_rows(conn, subject, n, len(own)):
        if r[0] not in own:
            found.setdefault(r[0], r)
    if not found:
        return []
    own_ids = {r[1] for r in own.values()}
    referring: dict[int, Any] = {}
    targets: dict[int, Any] = {}
    for e in _parse_rows(list(found.values())):
        (referring if own_ids.intersection(_ref_ids(e.statement)) else targets)[e.seq] = found[e.seq]
    frontier = [r[1] for r in referring.values()]
    while frontier:
        reached: list[str] = []
        for entry_id in frontier:
            for r in repo.referrer_rows(conn, entry_id, n):
                if r[2] in _ACTING_KINDS and r[0] not in own and r[0] not in referring:
                    targets.pop(r[0], None)
                    referring[r[0]] = r
                    reached.append(r[1])
        frontier = reached
    return [*referring.values(), *(r for r in targets.values() if r[2] in _CONTEXT_KINDS)]


def _ref_ids(statement: Any) -> set[str]:
    """The entry ids a parsed statement refs (none where its refs are not the list of maps ingest stores)."""
    refs = statement.get("refs") if isinstance(statement, dict) else None
    if not isinstance(refs, list):
        return set()
    return {str(r.get("id")) for r in refs if isinstance(r, dict)}


def _host_rows(
    ledger: Ledger,
    conn: sa.Connection,
    kinds: tuple[str, ...],
    hosts: list[str],
    n: int,
    seen: dict[int, Any],
) -> list[tuple[Any, ...]]:
    if not hosts or not kinds:
        return []
    return sorted(
        (r for r in ledger.repo.host_rows(conn, kinds, hosts, n) if r[0] not in seen), key=lambda r: r[0]
    )


def snapshot_from_rows(ledger: Ledger, raw: SnapshotRows) -> tuple[Snapshot, bool]:
    """Parse ``raw`` into the snapshot ``load_snapshot`` returns; the flag says whether the hosts named by
    the parsed entries are the ones the subject index gave (if not, the host entries were read again for
    the parsed hosts, and ``raw`` does not describe the snapshot)."""
    entries = _parse_rows(raw.rows, raw.row_digests())
    items = list(raw.subject.items())
    subjects = [e.statement["subject"] for e in entries]
    for e, subj in zip(entries, subjects, strict=True):
        e.in_subject = all(subj.get(k) == v for k, v in items)
    hosts = sorted({subj["host"] for subj in subjects if "host" in subj})
    consistent = True
    host_rows = raw.host_rows
    hosts = same_hosts(hosts, raw.candidates) if raw.kinds else hosts
    if raw.kinds and hosts != raw.hosts:
        consistent = False
        with ledger.repo.read() as conn:
            host_rows = _host_rows(ledger, conn, raw.kinds, hosts, raw.size, {e.seq: e for e in entries})
    if host_rows:
        extra = _parse_rows(host_rows)
        for e in extra:
            e.in_subject = False
        entries = sorted([*entries, *extra], key=lambda e: e.seq)
    names: dict[str, tuple[str, tuple[str, ...]]] = {}
    for kid, rec in raw.keyring.keys.items():
        names[kid] = (rec.name, tuple(sorted(rec.roles)))
    for e in entries:
        found = names.get(e.signer)
        if found is not None:
            e.signer_name, e.roles = found
    snap = Snapshot(
        size=raw.size,
        subject=dict(raw.subject),
        entries=entries,
        keyring=raw.keyring,
        reference_time=raw.reference_time,
    )
    return snap, consistent


def load_snapshot(
    ledger: Ledger,
    subject: dict[str, str],
    size: int | None = None,
    *,
    extra_kinds_by_host: Iterable[str] = ("kernel.log",),
) -> Snapshot:
    """The subject's entries, the entries that reference them (and what acts on those, ``_linked_rows``), the
    jobs they reference, and the GPU-relevant host entries (kernel logs) of the hosts they name — all as of
    ``size``."""
    raw = read_snapshot_rows(ledger, subject, size, extra_kinds_by_host=extra_kinds_by_host)
    return snapshot_from_rows(ledger, raw)[0]


def check_signature(e: Evidence, ring: Keyring) -> None:
    """Raise SignatureError unless ``e`` carries a valid signature by a key enrolled in ``ring``."""
    rec = ring.get(e.signer)
    try:
        e.verify_signature(rec.public)
    except SignatureError:
        raise
    except ValueError as ex:
        raise SignatureError(f"signature of {e.id} is malformed: {ex}") from ex


PARALLEL_SIGNATURES = 64  # below this many, one thread checks them all (a pool costs more than it saves)


def signature_problems(entries: list[Evidence], ring: Keyring) -> list[str | None]:
    """``check_signature`` of each entry: None where it verified, else the problem, in order.

    Ed25519 verification releases the GIL (libsodium through cffi), so a long list is checked
    on one thread per core: a fresh process judging a campaign whose signatures it never saw spends most
    of its time here."""

    def one(e: Evidence) -> str | None:
        try:
            check_signature(e, ring)
        except SignatureError as ex:
            return ex.message
        return None

    workers = min(len(entries) // PARALLEL_SIGNATURES, os.cpu_count() or 1, 8)
    if workers < 2:
        return [one(e) for e in entries]
    step = -(-len(entries) // workers)
    chunks = [entries[i : i + step] for i in range(0, len(entries), step)]
    with ThreadPoolExecutor(max_workers=len(chunks), thread_name_prefix="ledger-signatures") as pool:
        parts = list(pool.map(lambda chunk: [one(e) for e in chunk], chunks))
    return [problem for part in parts for problem in part]
