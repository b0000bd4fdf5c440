"""The gate ladder: from accepted evidence to a verdict, deterministic for one checkpoint and one policy."""

from __future__ import annotations

import dataclasses
import gc
import io
import json
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from ledger.canonical import canonical_bytes
from ledger.entries import (
    KIND_MODELS,
    ArtifactRef,
    format_time,
    host_key,
    judged_subject,
    judged_subject_problem,
    misspelled_subject_field,
    parse_time,
    same_subject_value,
)
from ledger.errors import (
    ArtifactTooLargeError,
    EntryNotFoundError,
    InputError,
    LedgerError,
    PolicyError,
    SchemaError,
)
from ledger.hashing import blake3_hex, parse_digest
from ledger.policy import result_cache
from ledger.policy.acceptance import (
    ACTING_KINDS,
    Filtered,
    Rejection,
    check_artifact,
    filter_evidence,
    render,
    withholds_only,
)
from ledger.policy.conditions import Condition, FieldsRead, fields_read, shared_context
from ledger.policy.loader import CompiledGate, LoadedPolicy, load_policy
from ledger.policy.model import INCONCLUSIVE, QUALIFIED
from ledger.policy.names import engine_aliases, engine_key, engines_of_any_backend
from ledger.policy.record_time import record_clock, refuse_unrecordable_judgement
from ledger.policy.rules import CREDIT_ONLY_BY_CLAIM, RULES, Rule
from ledger.policy.snapshot import (
    ANSWERS_HERE,
    PARSED_HERE,
    Evidence,
    Snapshot,
    SnapshotRows,
    _defaults,
    parsed_items,
    read_snapshot_rows,
    signature_problems,
    slim_views,
    snapshot_from_rows,
    verified_keys,
)

if TYPE_CHECKING:
    from pathlib import Path

    from ledger.logged import LoggedEntry

    # the ledger as the policy sees it (ledger.service.Ledger is one); the policy never imports the service
    from ledger.policy.port import PolicyLedger as Ledger
    from ledger.store.base import ArtifactStore

__all__ = [
    "CAMPAIGN",
    "IDENTITY_FIELDS",
    "MAX_RESULT_BYTES",
    "RESULT_ARTIFACT",
    "evaluate",
    "evaluated_subject",
    "judge_again_at",
    "judged_scope",
    "record_verdict",
    "recorded_result",
    "replay_verdict",
    "result_digest",
]

CAMPAIGN = "campaign"  # the subject field that names the unit a qualification verdict judges
IDENTITY_FIELDS = ("backend", "backend_version", "model", "model_revision", "host", "gpu")
STATUS = {QUALIFIED: "qualified", INCONCLUSIVE: "inconclusive"}
MAX_SIGNATURE_ROUNDS = 5
# A fresh process that parsed fewer envelopes than this, and judged no structured answer, leaves the
# home's parsed-envelope file as it is: the next process parses those few again (≈ 15 µs each) for less
# than rewriting the file costs this one (≈ 45 ms at 10,000 entries, after every append to the campaign).
SAVE_PARSED_AFTER = 256
RESULT_ARTIFACT = "verdict-result.json"  # the artifact of a verdict entry that holds its full result
# The most bytes a verdict's result artifact may hold: every reader loads it whole (``recorded_result``).
# A result grows by about 140 bytes for each entry it used and 320 for each it rejected (its id, rule and
# detail): the 10,000-entry campaign of bench/bench_verdict.py gives 1.4 MB all used, 3.2 MB all rejected.
# Ten times that: a bigger result is refused when recorded (``record_verdict``) and at ingest, and read as
# unreadable (ArtifactTooLargeError) — never loaded into memory.
MAX_RESULT_BYTES = 32 * 1024 * 1024


def result_digest(result: dict[str, Any]) -> str:
    return "blake3:" + blake3_hex(canonical_bytes(result))


def checkpoint_root(ledger: Ledger, size: int) -> str:
    """The Merkle root at ``size``: the stored checkpoint's, else computed from the stored tiles and leaves
    (reads never write, and sign nothing: a checkpoint signed for a verdict over a log whose rows past the
    anchor do not walk is refused, fix 149 — the verdict names those rows instead)."""
    root = ledger.repo.checkpoint_root(size)
    if root is not None:
        return root
    return ledger.repo.tree_root(size).hex()


def _identity(accepted: list[Evidence]) -> dict[str, str]:
    """The identity fields the subject's own accepted entries agree on. A host's facts read for it — a
    kernel log of another job of the host, under another spelling of its name (``host_key``) — are
    judged, but say nothing of which backend, model or host name this campaign's verdict is for."""
    subjects = [e.statement["subject"] for e in accepted if e.in_subject]
    values: dict[str, set[str]] = {}
    for key in IDENTITY_FIELDS:
        values[key] = {s[key] for s in subjects if key in s}
    return {key: next(iter(v)) for key, v in values.items() if len(v) == 1}


def _gate_fields(g: CompiledGate) -> FieldsRead | None:
    """The evidence fields a gate's CEL reads (its checks get slim views), or None: whole views."""
    sources = [c.source for c, _, _ in g.checks]
    if g.require is not None:
        sources.append(g.require.source)
    sources += [cond.source for cond, _ in g.requires]
    return fields_read("evidence", sources)


def _views(candidates: list[Evidence], fields: FieldsRead | None) -> list[dict[str, Any]]:
    if fields is None:
        return [e.view() for e in candidates]
    return slim_views(candidates, fields.top, fields.payload, as_set=fields.as_set, derived=fields.derived)


def _render(template: str, ctx: dict[str, Any], candidates: list[Evidence]) -> str:
    """Fill a gate message; a template that names the evidence gets the whole views."""
    if "evidence" in template:
        ctx = {**ctx, "evidence": [e.view() for e in candidates]}
    return render(template, ctx)


NAMED_AT_MOST = 5  # entries a failed check names in its reason; the rest are counted


def _failed_on(naming: tuple[Condition, str] | None, ctx: dict[str, Any], candidates: list[Evidence]) -> str:
    """For a failed check with ``each``/``detail``: the selected entries ``each`` does not hold for, each
    named by its ``detail`` (``""`` without naming). Runs only once the check has failed. An entry that
    ``each`` cannot evaluate is named too: it did not show that it holds."""
    if naming is None:
        return ""
    cond, detail = naming
    named: list[str] = []
    count = 0
    for e in candidates:
        item = {"e": e.view(), "params": ctx["params"], "manifest": ctx["manifest"]}
        try:
            holds = cond.holds(item)
        except PolicyError:
            holds = False
        if not holds:
            count += 1
            if len(named) < NAMED_AT_MOST:
                named.append(render(detail, item))
    if not named:
        return ""
    more = f"; and {count - len(named)} more" if count > len(named) else ""
    return " — " + "; ".join(named) + more


def _pool(entries: list[Evidence]) -> tuple[list[Evidence], dict[str, list[Evidence]], bool]:
    by_kind: dict[str, list[Evidence]] = {}
    for e in entries:
        by_kind.setdefault(e.kind, []).append(e)
    return entries, by_kind, _in_seq_order(entries)


def _judge_gate(
    g: CompiledGate,
    candidates: list[Evidence],
    params: dict[str, Any],
    filtered: Filtered,
) -> dict[str, Any]:
    """One gate on its selected evidence: ``status`` (passed, failed, missing), ``reason``, ``evidence``;
    a missing one says why the ladder stops there (``stopped``, taken out by the caller)."""
    spec = g.spec
    ctx = {
        "evidence": _views(candidates, _gate_fields(g)),
        "params": params,
        "manifest": filtered.manifest,
        "count": len(candidates),
    }
    shared = shared_context(ctx)
    present = g.require.holds(shared) if g.require is not None else bool(candidates)
    out: dict[str, Any] = {"evidence": [e.id for e in candidates]}
    if not present:
        rej = [r for r in filtered.rejected if _safe_selected(r.entry, spec, g, params)]
        reason = _render(spec.missing, ctx, candidates)
        if rej:
            rules = Counter(r.rule for r in rej)
            listed = ", ".join(f"{n} {rule}" for rule, n in sorted(rules.items()))
            reason += "; only rejected evidence: " + listed
        out.update(status="missing", reason=reason, stopped="has no accepted evidence")
        return out
    fails = [
        _render(msg, ctx, candidates) + _failed_on(naming, ctx, candidates)
        for cond, msg, naming in g.checks
        if not cond.holds(shared)
    ]
    # a failed check is a judgement already; only a gate whose checks all hold can still lack what it needs
    # to judge (``requires``): then it cannot pass, and says why (INCONCLUSIVE)
    unmet = None if fails else next((m for cond, m in g.requires if not cond.holds(shared)), None)
    if unmet is not None:
        out.update(status="missing", reason=_render(unmet, ctx, candidates), stopped="cannot be judged")
    else:
        out.update(
            status="failed" if fails else "passed", reason="; ".join(fails) if fails else "all checks hold"
        )
    return out


EXCUSED_RESULT_GATES = "excused_result_gates"  # the params that name what ``_excused_results`` excuses
EXCUSING_LAUNCH_RULES = "excusing_launch_rules"


def _names_param(policy: LoadedPolicy, name: str, known: set[str], what: str) -> set[str]:
    """The names ``params[name]`` lists, each one of ``known`` (a policy's gates or rules); the param left
    out: none. A value that is no list of such names is the policy's error (PolicyError naming it), never
    read as some other set."""
    value = policy.params.get(name)
    if value is None:
        return set()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise PolicyError(
            f"policy {policy.name}: params.{name} must be a list of {what} names; got {value!r}"
        )
    unknown = [v for v in value if v not in known]
    if unknown:
        raise PolicyError(
            f"policy {policy.name}: params.{name} names {', '.join(map(repr, unknown))}, no {what} of the "
            f"policy (its {what}s: {', '.join(sorted(known))})"
        )
    return set(value)


def _excused_results(snap: Snapshot, policy: LoadedPolicy, filtered: Filtered) -> tuple[Filtered, set[str]]:
    """``filtered`` with the failed ``gate.result`` entries that record no failure of the engine withheld, and
    the entries that decided it (for signature checks). Such a result is one of a gate in
    ``params.excused_result_gates`` (a gate that judges its own evidence: the collector's api-readiness
    "no attempt reached API readiness") that no gate selects, whose every engine launch is withheld by a rule
    of ``params.excusing_launch_rules`` (``campaign-config-error``, ``operator-stopped-before-ready``) as a
    rule that withdraws its credit only, showing nothing against the engine — the launch's own non-failure,
    recorded again by the collector: withheld under that rule, as ``operator-stopped`` withholds a harness
    run the operator cut. Its launches are judged from the log, never from the result's own claim: those of
    the jobs it belongs to (the running entry it refs as its job, the job open when the log took it), and the
    entries it refs or names (``payload.evidence``) only add to them. It stays (``_unjudged``, INCONCLUSIVE)
    where it belongs to no job the log knows, where no launch is found, or where any launch — or any entry it
    names that is no launch — is not so withheld (a fault, superseded, rejected for its signature)."""
    gates = _names_param(policy, EXCUSED_RESULT_GATES, {g.spec.name for g in policy.gates}, "gate")
    rules = _names_param(policy, EXCUSING_LAUNCH_RULES, {r.name for r, _ in policy.rules}, "rule")
    if not gates or not rules:
        return filtered, set()
    candidates = [
        e
        for e in [*filtered.accepted, *filtered.against]
        if e.kind == "gate.result"
        and e.payload.get("status") == "failed"
        and e.payload.get("gate") in gates
        and not any(_safe_selected(e, g.spec, g, policy.params) for g in policy.gates)
    ]
    if not candidates:
        return filtered, set()
    by_id = snap.by_id
    withheld = {r.entry.id: r for r in filtered.rejected}

    def job_key(j: Evidence) -> tuple[Any, Any]:
        return (j.subject.get(CAMPAIGN), j.payload.get("job_id"))

    def jobs_of(e: Evidence) -> tuple[set[tuple[Any, Any]], set[str]]:
        """The jobs ``e`` belongs to as the log knows them, and the job entries that say so."""
        keys: set[tuple[Any, Any]] = set()
        entries: set[str] = set()
        for jid in e.refs("job"):
            j = by_id.get(jid)
            if j is not None and j.kind == "job" and isinstance(j.payload.get("job_id"), str):
                keys.add(job_key(j))
                entries.add(j.id)
        if e.derived.get("job") is not None:
            keys.add((e.subject.get(CAMPAIGN), e.derived["job"]))
        return keys, entries

    launches_of: dict[tuple[Any, Any], list[Evidence]] = {}
    for e in snap.entries:
        if e.kind == "engine.launch":
            for key in jobs_of(e)[0]:
                launches_of.setdefault(key, []).append(e)
    excused: dict[str, Rejection] = {}
    deciding: set[str] = set()
    for e in candidates:
        keys, job_entries = jobs_of(e)
        if not keys:
            continue  # no job the log knows: what it records cannot be told from the log
        launches = {x.id: x for key in keys for x in launches_of.get(key, [])}
        if not launches:
            continue
        cited = [r["id"] for r in e.statement.get("refs") or [] if r.get("rel") != "job"]
        named = e.payload.get("evidence")
        cited += [i for i in named if isinstance(i, str)] if isinstance(named, list) else []
        if any((c := by_id.get(i)) is None or c.kind != "engine.launch" for i in cited):
            continue  # it names an entry the log does not hold, or one that is no launch
        launches.update({i: by_id[i] for i in cited})
        why = [withheld.get(i) for i in sorted(launches, key=lambda i: launches[i].seq)]
        if not all(r is not None and r.rule in rules and not r.counts_against for r in why):
            continue
        held = [r for r in why if r is not None]
        named_rules = sorted({r.rule for r in held})
        listed = ", ".join(r.entry.id[:12] for r in held)
        excused[e.id] = Rejection(
            e,
            held[-1].rule,  # the rule of its job's last launch (the one the failure it records names)
            f"a failed {e.payload.get('gate')} result of a job whose every engine launch ({listed}) is "
            f"withheld by {' or '.join(named_rules)}: the failure it records is that launch's, which shows "
            "nothing of the engine either way — not a failure of the engine (run it again, fixed)",
            held[0].entry.id,
        )
        deciding |= {e.id, *launches, *job_entries}
    if not excused:
        return filtered, set()
    return (
        dataclasses.replace(
            filtered,
            accepted=[e for e in filtered.accepted if e.id not in excused],
            against=[e for e in filtered.against if e.id not in excused],
            rejected=sorted([*filtered.rejected, *excused.values()], key=lambda r: r.entry.seq),
        ),
        deciding,
    )


def _unjudged(policy: LoadedPolicy, filtered: Filtered) -> list[dict[str, str]]:
    """What no gate judges: the failed ``gate.result`` entries (credited, or kept because they
    show a failure) that no gate selects — a misspelled gate, a gate of another policy, or a gate of this
    one that judges its own evidence rather than recorded results — then the campaign's jobs that never
    ended, or ended failed with no failed result of theirs (``Filtered.unjudged_jobs``: a run whose outcome
    is unknown, or a failure no gate judges).
    The ladder cannot say they are harmless, so they keep a verdict from QUALIFIED (INCONCLUSIVE, naming
    them); a verdict that already failed stands."""
    names = {g.spec.name for g in policy.gates}
    out: list[dict[str, str]] = []
    for e in sorted([*filtered.accepted, *filtered.against], key=_seq):
        gate = e.payload.get("gate")
        if e.kind != "gate.result" or e.payload.get("status") != "failed":
            continue
        if any(_safe_selected(e, g.spec, g, policy.params) for g in policy.gates):
            continue  # a gate judges it
        if gate in names:
            # a gate of the policy that judges its own evidence, not recorded results (a collector's failed
            # api-readiness, a runtime-stability failure entered by hand): the failure is on record all
            # the same
            what = (
                f"a failed result for gate {gate!r}, which judges the evidence it selects, not recorded "
                "gate results: no gate judges the failure it records, so the verdict cannot be QUALIFIED "
                "(supersede it with the reason, if the gate's own evidence shows it wrong)"
            )
        else:
            what = (
                f"a failed result for gate {gate!r}, which policy {policy.name} does not have (its gates: "
                f"{', '.join(g.spec.name for g in policy.gates)}): no gate judges the failure it records, "
                "so the verdict cannot be QUALIFIED (record it under the right gate name, or supersede it "
                "with a reason)"
            )
        out.append({"entry": e.id, "kind": e.kind, "gate": str(gate), "detail": what})
    return out + filtered.unjudged_jobs


def _judge(snap: Snapshot, policy: LoadedPolicy, filtered: Filtered) -> tuple[dict[str, Any], set[str]]:
    """Walk the ladder. Each gate is judged on the credited evidence; where a rule withheld credit from
    entries that show a failure (``filtered.against``), the gate is judged again with them added, and
    fails if it then fails: such entries can fail a gate, never pass it, and never make it INCONCLUSIVE."""
    params = policy.params
    # the failed results that record only a launch's non-failure (the campaign's configuration, an
    # operator's stop): withheld before any gate reads the pool, as the acceptance rules withhold
    filtered, excusing = _excused_results(snap, policy, filtered)
    gates: list[dict[str, Any]] = []
    not_credited: list[dict[str, str]] = []
    used: set[str] = set()
    stopped: tuple[str, str] | None = None  # (gate, status) of the first gate that did not pass
    verdict = QUALIFIED
    credited, by_kind, ordered = _pool(filtered.accepted)
    columns: dict[tuple[str, str], list[Any]] = {}
    with_against: tuple[list[Evidence], dict[str, list[Evidence]], bool] | None = None
    against_columns: dict[tuple[str, str], list[Any]] = {}
    against_ids = {e.id for e in filtered.against}
    # the gates past a gate that could not be judged that would fail on their selection all the same: the
    # ladder stops there (not authorized, INCONCLUSIVE), but a failure they show is on record — the routing
    # gate's no-standing-failure reads it (a crash behind a missing host probe still stands against a route)
    beyond: list[dict[str, str]] = []

    def judged_with_against(g: CompiledGate, candidates: list[Evidence]) -> dict[str, Any]:
        nonlocal with_against
        out = _judge_gate(g, candidates, params, filtered)
        if out["status"] != "failed" and against_ids:
            if with_against is None:
                with_against = _pool(sorted([*filtered.accepted, *filtered.against], key=_seq))
            pool, pool_kinds, pool_ordered = with_against
            more = _candidates(g, pool, pool_kinds, params, against_columns, pool_ordered)
            if any(e.id in against_ids for e in more):
                judged = _judge_gate(g, more, params, filtered)
                if judged["status"] == "failed":
                    out.pop("stopped", None)
                    out.update(judged)
        return out

    for g in policy.gates:
        spec = g.spec
        candidates = _candidates(g, credited, by_kind, params, columns, ordered)
        out: dict[str, Any] = {"name": spec.name, "verdict_if_failed": spec.verdict}
        if stopped is not None:
            out.update(
                status="not_authorized",
                evidence=[],
                reason=f"not authorized: gate {stopped[0]} {stopped[1]}; evidence for it is not credited",
            )
            not_credited.extend({"entry": e.id, "gate": spec.name} for e in candidates)
            gates.append(out)
            # only where the ladder stopped for want of evidence (INCONCLUSIVE): a failed ladder is a failure
            would = judged_with_against(g, candidates) if stopped[1] != "failed" else {}
            if would.get("status") == "failed":
                beyond.append(
                    {"gate": spec.name, "verdict_if_failed": spec.verdict, "reason": would["reason"]}
                )
            continue
        out.update(judged_with_against(g, candidates))
        why = out.pop("stopped", "")
        if out["status"] == "missing":
            stopped = (spec.name, why)
            verdict = INCONCLUSIVE
        elif out["status"] == "failed":
            stopped = (spec.name, "failed")
            verdict = spec.verdict
        used.update(out["evidence"])
        gates.append(out)
    unjudged = _unjudged(policy, filtered)
    if unjudged and verdict == QUALIFIED:
        verdict = INCONCLUSIVE  # a failure no gate judges: the ladder cannot say it is harmless
    for eid in list(used):
        used.update(filtered.support.get(eid, ()))
    by_id = snap.by_id
    used_sorted = sorted(used, key=lambda i: by_id[i].seq if i in by_id else -1)
    result: dict[str, Any] = {
        "verdict": verdict,
        "status": STATUS.get(verdict, "not_qualified"),
        "subject": snap.subject,
        "identity": _identity(filtered.accepted),
        "policy": _policy_identity(policy),
        "reference_time": snap.reference_time,
        "gates": gates,
        "used": used_sorted,
        "rejected": [r.to_json() for r in filtered.rejected],
        "not_credited": not_credited,
        "unjudged": unjudged,
        "failing_beyond_ladder": beyond,
        "manifest": {"bindings": filtered.manifest, "sources": filtered.manifest_sources},
        "counts": {
            "considered": len(snap.entries),
            "accepted": len(filtered.accepted),
            "rejected": len(filtered.rejected),
            "used": len(used_sorted),
        },
    }
    influential = set(used) | {r.by for r in filtered.rejected if r.by} | set(filtered.manifest_sources)
    influential |= {u["entry"] for u in unjudged}
    influential |= excusing
    return result, influential


def _field(e: Evidence, path: str) -> Any:
    head, _, rest = path.partition(".")
    value: Any
    if head == "payload":
        value = e.typed_payload  # what CEL sees: the model's defaults where the entry has no value
    elif head == "derived":
        value = e.derived
    elif head == "subject":
        value = e.subject
    elif head == "kind":
        return e.kind if not rest else None
    elif head == "in_subject":
        return e.in_subject if not rest else None
    else:
        return None
    for part in rest.split(".") if rest else ():
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _matches(e: Evidence, selector: dict[str, Any]) -> bool:
    """Plain equality on field paths (``payload.check = "health"``); a list means one of its values."""
    for path, want in selector.items():
        got = _field(e, path)
        if isinstance(want, list) and not isinstance(got, list):
            if got not in want:
                return False
        elif got != want:
            return False
    return True


def _candidates(
    g: CompiledGate,
    accepted: list[Evidence],
    by_kind: dict[str, list[Evidence]],
    params: dict[str, Any],
    columns: dict[tuple[str, str], list[Any]],
    ordered: bool = False,
) -> list[Evidence]:
    """``[e for e in accepted if _selected(e, …)]``, computed per kind: a field's values are read once
    per evaluation (``columns``) and shared by every gate that selects on it. ``ordered``: ``accepted``
    is in strictly increasing seq order (then a few chosen entries are sorted rather than filtered for)."""
    spec = g.spec
    if not spec.select:
        wanted = set(spec.kinds)
        pool = [e for e in accepted if e.kind in wanted]
    else:
        chosen: dict[int, Evidence] = {}
        for sel in spec.select:
            kind = sel["kind"]
            entries = by_kind.get(kind, [])
            keep = [True] * len(entries)
            for path, want in sel.items():
                if path == "kind":
                    continue
                col = columns.get((kind, path))
                if col is None:
                    col = columns[(kind, path)] = _column(entries, path)
                if isinstance(want, list):
                    for i, got in enumerate(col):
                        if keep[i] and not _equal(got, want):
                            keep[i] = False
                else:  # plain equality (what `_equal` does for a wanted value that is not a list)
                    keep = [k and bool(got == want) for k, got in zip(keep, col, strict=True)]
            for e, k in zip(entries, keep, strict=True):
                if k:
                    chosen[id(e)] = e
        if ordered and len(chosen) * 8 < len(accepted):
            # few chosen: in ``accepted`` order (seq order, entries are unique by seq) without a pass over it
            pool = sorted(chosen.values(), key=_seq)
        else:
            pool = [e for e in accepted if id(e) in chosen]
    if g.where is None:
        return pool
    return [e for e in pool if g.where.holds({"e": e.view(), "params": params})]


def _seq(e: Evidence) -> int:
    return e.seq


def _in_seq_order(entries: list[Evidence]) -> bool:
    return all(a.seq < b.seq for a, b in pairwise(entries))


def _column(entries: list[Evidence], path: str) -> list[Any]:
    """``[_field(e, path) for e in entries]``; a top-level payload field is read straight from the dict."""
    head, _, rest = path.partition(".")
    if head == "payload" and rest and "." not in rest:
        # the entry's value, else its model's default: selection sees the payload CEL sees
        out: list[Any] = []
        defaults_by_kind: dict[str, Any] = {}
        for e in entries:
            p = e.statement["payload"]
            if rest in p:
                out.append(p[rest])
                continue
            d = defaults_by_kind.get(e.kind)
            if d is None:
                d = defaults_by_kind[e.kind] = _defaults(e.kind)
            out.append(d.get(rest))
        return out
    return [_field(e, path) for e in entries]


def _equal(got: Any, want: Any) -> bool:
    """One selector field: equality; a list of wanted values means one of them."""
    if isinstance(want, list) and not isinstance(got, list):
        return got in want
    return bool(got == want)


def _selected(e: Evidence, spec: Any, g: Any, params: dict[str, Any]) -> bool:
    if spec.select:
        if not any(sel.get("kind") == e.kind and _matches(e, sel) for sel in spec.select):
            return False
    elif e.kind not in spec.kinds:
        return False
    return g.where is None or bool(g.where.holds({"e": e.view(), "params": params}))


def _safe_selected(e: Evidence, spec: Any, g: Any, params: dict[str, Any]) -> bool:
    try:
        return _selected(e, spec, g, params)
    except PolicyError:
        return e.kind in spec.selected_kinds()


def _policy_identity(policy: LoadedPolicy) -> dict[str, str]:
    out = {"name": policy.name, "digest": policy.digest}
    if policy.acceptance_policy is not None:
        out["acceptance"] = policy.acceptance_policy.name
        out["acceptance_digest"] = policy.acceptance_policy.digest
    return out


_GC_LOCK = threading.Lock()
_GC_HOLDERS = [0]  # evaluations running with the cyclic collector paused by us (a cell: no `global`)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for one evaluation (re-enabled after the last one ends).

    A verdict allocates tens of thousands of short-lived objects; with the collector on, some of those
    allocations trigger generation-2 passes over every cached envelope (10-100 ms, the p95 of a warm
    verdict). Nearly all of it is freed by reference counting; the rest is collected after re-enabling.
    """
    with _GC_LOCK:
        if _GC_HOLDERS[0] == 0 and not gc.isenabled():
            owned = False  # someone else turned it off: leave it alone
        else:
            owned = True
            _GC_HOLDERS[0] += 1
            gc.disable()
    try:
        yield
    finally:
        if owned:
            with _GC_LOCK:
                _GC_HOLDERS[0] -= 1
                if _GC_HOLDERS[0] == 0:
                    gc.enable()


def evaluate(
    ledger: Ledger,
    subject: dict[str, str],
    policy: LoadedPolicy,
    *,
    at_size: int | None = None,
    reference_time: datetime | str | None = None,
) -> dict[str, Any]:
    """The verdict JSON for ``subject`` under ``policy`` as the log stood at ``at_size`` (default: now),
    judged at ``reference_time`` (freshness and ages; default: the log time of the last entry below
    ``at_size``, so that a verdict reads the same until the log changes)."""
    when = None if reference_time is None else _reference_text(reference_time)
    with _gc_paused():
        return _evaluate(ledger, subject, policy, at_size, when)


def _reference_text(when: datetime | str) -> str:
    """A reference time as the log writes times (``format_time``), checked."""
    return format_time(parse_time(when) if isinstance(when, str) else when)


def _evaluate(
    ledger: Ledger, subject: dict[str, str], policy: LoadedPolicy, at_size: int | None, when: str | None
) -> dict[str, Any]:
    if policy.kind != "qualification":
        raise PolicyError(
            f"{policy.path}: {policy.name} is a {policy.kind} policy; a verdict needs a qualification policy"
        )
    if not names_campaign(subject):
        # a campaign is one bounded qualification (its job, its pinned manifest, its attempt budget):
        # a subject without one would judge the evidence of every campaign of that backend/model/host at once
        named = ", ".join(f"{k}={v}" for k, v in sorted(subject.items())) or "nothing"
        raise InputError(
            f"a qualification verdict judges one campaign: the subject names {named}, but no campaign",
            hint="add --subject campaign=ID (`ledger log --kind job` lists the campaigns)",
        )
    # the key of this evaluation, remembered while the database is unchanged (``result_cache.stamp``)
    st = result_cache.stamp(ledger)
    memo_args = (tuple(sorted(subject.items())), at_size, when, result_cache.policy_files(policy))
    known = result_cache.recall(st, "verdict-key", memo_args)
    if known is not None:
        key, size, when = known
        hit = result_cache.get(ledger, key)
        result = _remembered(ledger, hit, when)
        if result is not None:
            result["checkpoint"] = {"size": size, "root": checkpoint_root(ledger, size)}
            return result
    # the campaign's rows, whatever else the question names (``judged_scope``)
    raw = subject_snapshot_rows(ledger, subject, at_size, st)
    if when is not None:  # judged at the caller's reference time, not the last entry's log time
        raw = dataclasses.replace(raw, reference_time=when)
    # The key leaves out the log size and the reference time: the rows, keyring and hosts read at that
    # size are the inputs, and a remembered result states the reference times it holds at (``window``).
    # It names the question asked (the fields checked as claims), not only the campaign read.
    key = result_cache.key_for(dataclasses.replace(raw, subject=dict(subject)), policy)
    result = _remembered(ledger, result_cache.get(ledger, key), raw.reference_time)
    if result is not None:
        result_cache.remember(st, "verdict-key", memo_args, (key, raw.size, raw.reference_time))
    else:
        result_cache.load_parsed(ledger, raw.subject)  # once per process and subject
        parsed_before, answers_before = PARSED_HERE[0], ANSWERS_HERE[0]
        snap, consistent = snapshot_from_rows(ledger, raw)
        result, artifacts, window = _compute(ledger, snap, policy)
        result = _with_claims(result, snap, subject, policy)
        if PARSED_HERE[0] - parsed_before >= SAVE_PARSED_AFTER or ANSWERS_HERE[0] != answers_before:
            # enough was parsed or judged here that the home's file should hold it
            result_cache.save_parsed(ledger, raw.subject, parsed_items(snap.entries))
        if consistent:
            result_cache.put(ledger, key, result, artifacts, window)
            result_cache.remember(st, "verdict-key", memo_args, (key, raw.size, raw.reference_time))
    result["checkpoint"] = {"size": raw.size, "root": checkpoint_root(ledger, raw.size)}
    return result


def subject_snapshot_rows(
    ledger: Ledger, subject: dict[str, str], at_size: int | None, st: result_cache.Stamp | None
) -> SnapshotRows:
    """``read_snapshot_rows`` of the rows a verdict about ``subject`` judges (``judged_scope``: its
    campaign's) at ``at_size``, read once while the database stays as the stamp ``st``
    (``result_cache.stamp``, read before) saw it: the routing gate's re-derived verdict and the launches it
    credits (``routing._credited_launch_engines``) share one read of a campaign's rows, and a bundle of the
    verdict holds those rows."""
    scope = judged_scope(subject)
    args = (tuple(sorted(scope.items())), at_size)
    raw: SnapshotRows | None = result_cache.recall(st, "snapshot-rows", args)
    if raw is None:
        raw = read_snapshot_rows(ledger, scope, at_size)
        result_cache.remember(st, "snapshot-rows", args, raw)
    return raw


def judged_scope(subject: Mapping[str, str]) -> dict[str, str]:
    """What a qualification verdict about ``subject`` reads: every entry of the campaign it names. The
    campaign is the unit of judgement; another field the question names (host, backend, model …) selects
    nothing — it is a claim about the campaign, checked against the campaign's own entries
    (``_with_claims``): an entry of the campaign that leaves the field out, or names another value, is the
    campaign's evidence all the same, and its failure counts. So asking in more words never drops evidence,
    and the verdict for the campaign with more fields is never better than for the campaign alone. A subject
    naming no campaign is read as it is (``evaluate`` refuses it)."""
    if names_campaign(subject):
        return {CAMPAIGN: subject[CAMPAIGN]}
    return dict(subject)


# the fields a route is named by (routing matches backend, model and host): one campaign runs one of each
SPLIT_FIELDS = ("backend", "model", "host")


def _campaign_evidence(result: Mapping[str, Any], snap: Snapshot) -> list[Evidence]:
    """The campaign's own entries that are still its evidence — what its splits and claims are judged on
    (audit 75 f1). Left out: the kinds judged by what they ref, not by what they name (``ACTING_KINDS``: a
    supersession, review or acceptance is filed under the subject of the entry it acts on — a supersession
    of a mistyped entry copies its mistyped host —, and a verdict or routing change records the tool's own
    judgement, not what ran), and the entries a rule of the verdict's ``rejected`` withdraws: not evidence
    of the campaign at all (untrusted, superseded by another key with its reason — ``withholds_only`` is
    False). Kept (fail closed): an entry only withheld from credit (self-superseded, rejected by an
    acceptance, stale … — its failure still counts), one a rule withdraws or withholds per entry
    (``CREDIT_ONLY_BY_CLAIM``), one a policy's own ``[[rules]]`` rejects (whether that rule withdraws or
    withholds, the result does not say), and a host's fact filed under the campaign for another host than
    it ran on (``other-host``: that disagreement is what a split or a contradicted claim reports)."""
    withdrawn = {
        str(r.get("entry"))
        for r in result.get("rejected") or []
        if isinstance(r, Mapping)
        and r.get("rule") in RULES
        and r.get("rule") not in CREDIT_ONLY_BY_CLAIM
        and r.get("rule") != Rule.OTHER_HOST
        and not r.get("counts_against")
        and not withholds_only(str(r.get("rule")))
    }
    return [e for e in snap.entries if e.in_subject and e.kind not in ACTING_KINDS and e.id not in withdrawn]


def _misspelled(campaign: str, own: list[Evidence], asked: Mapping[str, str]) -> list[dict[str, Any]]:
    """The subject fields of the campaign's own entries that misspell a known one
    (``ledger.entries.misspelled_subject_field``: ``hots``, ``modle``, ``bakend``), stored before ingest
    refused them (audit 75 f2): the known field read as absent would hide a split of two hosts, or let a
    claim hold that an entry contradicts. One item per misspelled field, status ``misspelled``, naming both
    fields and the entries; like a split, it keeps a QUALIFIED verdict from standing."""
    found: dict[tuple[str, str], list[tuple[Evidence, str]]] = {}
    for e in own:
        for key, value in e.subject.items():
            known = misspelled_subject_field(key)
            if known is not None:
                found.setdefault((key, known), []).append((e, str(value)))
    out: list[dict[str, Any]] = []
    for (key, known), named in sorted(found.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        values = sorted({v for _, v in named})
        out.append(
            {
                "field": known,
                "asked": asked.get(known),
                "status": "misspelled",
                "spelled": key,
                "entries": [{"entry": e.id, "kind": e.kind, "value": v} for e, v in named],
                "detail": f"{len(named)} entr{'y' if len(named) == 1 else 'ies'} of campaign {campaign} "
                f"name {key} {', '.join(repr(v) for v in values)}, which misspells the subject field "
                f"{known!r}: the policy reads {known}, so what they name cannot be told from their evidence "
                f"(supersede them and record them again under {known}=…)",
            }
        )
    return out


def _splits(campaign: str, own: list[Evidence], asked: Mapping[str, str]) -> list[dict[str, Any]]:
    """The route fields the question does not ask (``SPLIT_FIELDS``) whose values the campaign's own
    entries disagree on (a host compared by ``host_key``): a campaign whose launch names one host and
    whose host probe and pin another (audit 74 f1) cannot say which machine its prerequisites cover, nor
    which backend or model its gates judged. One item each, status ``split``, naming the values and the
    entries; like a claim that does not hold, it keeps a QUALIFIED verdict from standing."""
    out: list[dict[str, Any]] = []
    for field_name in SPLIT_FIELDS:
        if field_name in asked:
            continue  # asked: each entry naming another value is a contradicted claim already
        groups: dict[str, list[tuple[Evidence, str]]] = {}
        for e in own:
            if field_name in e.subject:
                v = e.subject[field_name]
                groups.setdefault(host_key(v) if field_name == "host" else v, []).append((e, v))
        if len(groups) < 2:
            continue
        values = sorted({v for named in groups.values() for _, v in named})
        listed = "; ".join(
            f"{len(named)} entr{'y' if len(named) == 1 else 'ies'} name {field_name}={named[0][1]}"
            for named in groups.values()
        )
        out.append(
            {
                "field": field_name,
                "asked": None,
                "status": "split",
                "entries": [
                    {"entry": e.id, "kind": e.kind, "value": v} for named in groups.values() for e, v in named
                ],
                "detail": f"campaign {campaign}'s own entries name {field_name} "
                f"{', '.join(repr(v) for v in values)} ({listed}): one campaign runs on one {field_name}, so "
                f"which one its gates judged cannot be told (record the campaign again under one "
                f"{field_name}, or supersede the entries that name the wrong one)",
            }
        )
    return out


def _engine_contradicted(
    campaign: str, own: list[Evidence], policy: LoadedPolicy, asked: Mapping[str, str]
) -> list[dict[str, Any]]:
    """The campaign's backend against the engine its own entries record running — each job's approved spec
    (``spec.bindings.engine``) and each launch's ``engine`` — as engine names compare (``engine_key``, by
    ``params.engine_names``: ``vLLM`` is vllm, ``llama.cpp`` llamacpp): a campaign filed as backend vllm
    whose job bound llama.cpp (a job recorded by hand, past the collector's ``_check_backend``) would
    qualify vllm on what llama.cpp ran. One item, status ``engine-contradicted``, naming the backend and
    each entry recording another engine, or an engine that is no name (mistyped, blank: which engine ran
    cannot be told); like a split, it keeps a QUALIFIED verdict from standing. An engine in
    ``params.engines_of_any_backend`` (the collector's generic kind: any server) names no engine family
    and contradicts no backend; a campaign naming no backend, or recording no engine, has nothing here
    to contradict."""
    aliases = engine_aliases(policy)
    any_backend = engines_of_any_backend(policy, aliases)
    backends = {e.subject["backend"] for e in own if "backend" in e.subject}
    if len(backends) != 1:
        return []  # none named, or several (a split: ``_splits`` names it)
    backend = next(iter(backends))
    named = engine_key(backend, aliases)
    found: list[tuple[Evidence, Any, str]] = []
    for e in own:
        if e.kind == "job":
            spec = e.payload.get("spec")
            bindings = spec.get("bindings") if isinstance(spec, dict) else None
            if not isinstance(bindings, dict) or "engine" not in bindings:
                continue
            value, what = bindings["engine"], "binds engine"
        elif e.kind == "engine.launch" and "engine" in e.payload:
            value, what = e.payload["engine"], "ran engine"
        else:
            continue
        key = engine_key(value, aliases)
        if key is not None and key in any_backend:
            continue
        if key is None or named is None or key != named:
            found.append((e, value, what))
    if not found:
        return []
    listed = "; ".join(f"{e.kind} {e.id[:16]} {what} {v!r}" for e, v, what in found[:NAMED_AT_MOST])
    more = f"; and {len(found) - NAMED_AT_MOST} more" if len(found) > NAMED_AT_MOST else ""
    return [
        {
            "field": "backend",
            "asked": asked.get("backend"),
            "status": "engine-contradicted",
            "entries": [{"entry": e.id, "kind": e.kind, "value": v} for e, v, _ in found],
            "detail": f"campaign {campaign}'s entries name backend {backend!r} (engine {named}), but its own "
            f"records of what ran name another engine, or none that can be told ({listed}{more}): its "
            f"verdict would qualify backend {backend!r} on what another engine ran (engine names compare "
            "by params.engine_names; record the campaign again under the backend of the engine it ran)",
        }
    ]


def _with_claims(
    result: dict[str, Any], snap: Snapshot, subject: Mapping[str, str], policy: LoadedPolicy
) -> dict[str, Any]:
    """``result`` (the campaign judged whole) as the answer to ``subject``: each field it names beside the
    campaign checked against the campaign's own entries (``claims``, one item per field, in field order):
    ``holds`` where every entry of the campaign that names the field names the asked value (a host compared
    by ``host_key``); ``contradicted`` where one names another (those entries named); ``untold`` where none
    names it. A claim that does not hold keeps a QUALIFIED verdict from standing for the question
    (INCONCLUSIVE: the campaign is QUALIFIED, but not shown to be what was asked); a verdict that is not
    QUALIFIED stands as it is. The campaign's own entries are those still its evidence
    (``_campaign_evidence``: not an acting entry, not withdrawn); beside the claims, the route fields they
    disagree on (``_splits``), the subject fields they misspell (``_misspelled``) and a backend the engine
    they record running contradicts (``_engine_contradicted``) are items too. Only the
    campaign asked alone, its entries agreeing, is answered without ``claims``."""
    claims = {k: v for k, v in subject.items() if k != CAMPAIGN}
    campaign = subject[CAMPAIGN]
    own = _campaign_evidence(result, snap)
    splits = (
        _splits(campaign, own, claims)
        + _misspelled(campaign, own, claims)
        + _engine_contradicted(campaign, own, policy, claims)
    )
    if not claims and not splits:
        return result
    checked: list[dict[str, Any]] = []
    for field_name, asked in sorted(claims.items()):
        naming = [(e, e.subject[field_name]) for e in own if field_name in e.subject]
        other = [(e, v) for e, v in naming if not same_subject_value(field_name, v, asked)]
        item: dict[str, Any] = {"field": field_name, "asked": asked}
        if other:
            values = sorted({v for _, v in other})
            listed = "; ".join(
                f"{e.kind} {e.id[:16]} names {field_name}={v}" for e, v in other[:NAMED_AT_MOST]
            )
            more = f"; and {len(other) - NAMED_AT_MOST} more" if len(other) > NAMED_AT_MOST else ""
            item.update(
                status="contradicted",
                entries=[{"entry": e.id, "kind": e.kind, "value": v} for e, v in other],
                detail=f"campaign {campaign}'s own entries name {field_name} "
                f"{', '.join(repr(v) for v in values)}, not {asked!r} ({listed}{more}): they are its "
                f"evidence all the same, judged above, but they do not show the campaign is "
                f"{field_name}={asked} (ask about campaign={campaign} alone, or with the {field_name} its "
                "entries name)",
            )
        elif not naming:
            item.update(
                status="untold",
                entries=[],
                detail=f"no entry of campaign {campaign} names {field_name}: that it is {field_name}={asked} "
                "cannot be told from its evidence",
            )
        else:
            item.update(
                status="holds",
                entries=[],
                detail=f"every entry of campaign {campaign} that names {field_name} names {asked!r}",
            )
        checked.append(item)
    checked += splits
    out = {**result, "subject": dict(subject), "claims": checked}
    if out["verdict"] == QUALIFIED and any(c["status"] != "holds" for c in checked):
        out["verdict"] = INCONCLUSIVE
        out["status"] = STATUS[INCONCLUSIVE]
    return out


def _remembered(ledger: Ledger, hit: dict[str, Any] | None, reference_time: str) -> dict[str, Any] | None:
    """A remembered result, as computed at ``reference_time``: it must hold at that time (its window) and
    the artifact store must still answer as it did; its reference time is then this one."""
    if hit is None or not _store_agrees(ledger, hit.get("artifacts")):
        return None
    window = hit.get("window")
    try:
        ref = parse_time(reference_time)
        lo, hi = (datetime.fromisoformat(w) for w in window)  # type: ignore[union-attr]
        if not lo <= ref <= hi:
            return None
    except (LedgerError, TypeError, ValueError):
        return None
    result: dict[str, Any] = hit["result"]
    result["reference_time"] = reference_time
    return result


def _store_agrees(ledger: Ledger, checks: Any) -> bool:
    """Whether the artifact store still answers every check a remembered result relied on as it did."""
    if not isinstance(checks, list):
        return False
    store = ledger.store
    for c in checks:
        digest, size, mode, problem = c
        now = check_artifact(store, digest, size, mode)
        if (None if now is None else [str(now[0]), now[1]]) != problem:
            return False
    return True


def _compute(
    ledger: Ledger, snap: Snapshot, policy: LoadedPolicy
) -> tuple[dict[str, Any], list[Any], tuple[str, str]]:
    """The result, the artifact checks it relied on, and the reference times it holds at (inclusive)."""
    bad: dict[str, str] = {}
    verified: set[str] = set()
    result: dict[str, Any] = {}
    artifacts: list[Any] = []
    at = parse_time(snap.reference_time).isoformat()
    window = (at, at)
    for _ in range(MAX_SIGNATURE_ROUNDS):
        filtered = filter_evidence(snap, policy, ledger.store, bad_signatures=bad)
        artifacts.extend(filtered.artifact_checks)
        if filtered.window is not None:
            window = (filtered.window[0].isoformat(), filtered.window[1].isoformat())
        result, influential = _judge(snap, policy, filtered)
        if policy.acceptance.signatures == "trust-log":
            break  # rely on the signature checks made at ingest (and `ledger verify`)
        newly_bad = _verify(ledger, snap, influential - verified)
        verified |= influential
        if not newly_bad:
            break
        bad.update(newly_bad)
    return result, artifacts, window


def _verify(ledger: Ledger, snap: Snapshot, ids: set[str]) -> dict[str, str]:
    """Re-verify the signatures of the entries a verdict depends on; returns id → problem for failures.
    Signatures the process or the home (``result_cache.load_signatures``) verified before over the same
    envelope bytes with the same key are not verified again; new successes are recorded in the home."""
    bad: dict[str, str] = {}
    by_id = snap.by_id
    todo = [e for e in (by_id.get(eid) for eid in ids) if e is not None]
    result_cache.load_signatures(ledger)
    checked: list[tuple[bytes, bytes]] = []
    # one lookup of the signature cache for all of them (under one lock); hits need no further work
    known = verified_keys([e.digest for e in todo])
    raw: dict[str, bytes | None] = {}
    pending: list[Evidence] = []
    for e, hit in zip(todo, known, strict=True):
        if hit is not None and e.digest:
            if e.signer not in raw:
                rec = snap.keyring.keys.get(e.signer)  # type: ignore[call-overload]
                raw[e.signer] = rec.public.raw if rec is not None else None
            if raw[e.signer] == hit:
                continue
        pending.append(e)
    for e, problem in zip(pending, signature_problems(pending, snap.keyring), strict=True):
        if problem is not None:
            bad[e.id] = problem
        elif e.digest:
            checked.append((e.digest, snap.keyring.get(e.signer).public.raw))
    result_cache.save_signatures(ledger, checked)
    return bad


def record_verdict(
    ledger: Ledger,
    result: dict[str, Any],
    *,
    key: str,
    at: datetime | None = None,
    clock: datetime | None = None,
    read: int | None = None,
    judge_at: Callable[[datetime], tuple[bool, str]] | None = None,
) -> LoggedEntry:
    """Append a signed ``verdict`` entry: the verdict word, status, policy, checkpoint, evaluated subject,
    counts and the result's digest; the full result (gates, used and rejected ids) is a stored artifact
    addressed by that digest, so a campaign of any size fits the envelope limit.

    Only a verdict judged at a time the log and the clock have both reached is recorded — every caller
    (``Ledger.record_verdict``, ``ledger verdict --record``, fixtures) passes here: its ``reference_time``
    before the log time of the last entry of the log it is held to (its ``checkpoint.size``, or, where
    later, the log the caller read — ``read``: the log's size when it judged; None: the whole log as it
    stands now, so a verdict judged as of a past time on a log cut then is refused once the log has moved
    past it, as ``ledger verdict --now <past> --record`` is), or after the clock (``clock``, the one
    reading the caller judged by; else ``at`` where the caller sets the log time; else now), is refused,
    and so is a QUALIFIED judged before that clock that ``judge_at`` (the same verdict judged at a given
    time on the whole log: whether it passes, what it says, ``judge_again_at``) does not find QUALIFIED at
    it — or that the caller gives no ``judge_at`` to judge again (whether it holds now is unknown)
    (``record_time.refuse_unrecordable_judgement``: one check, InputError, nothing stored). The clock is
    read once, here, where the caller gave none (``record_time.record_clock``); ``Ledger.record_verdict``
    always judges a past QUALIFIED again (its own ``judge_at`` where the caller gives none)."""
    when, size = result.get("reference_time"), (result.get("checkpoint") or {}).get("size")
    if not isinstance(when, str) or not isinstance(size, int) or isinstance(size, bool):
        raise InputError(
            f"a verdict result records its reference_time (text) and checkpoint.size (an integer); "
            f"got {when!r} and {size!r}: nothing recorded"
        )
    passed = "QUALIFIED" if result.get("verdict") == "QUALIFIED" else None
    now = clock or at or record_clock()
    refuse_unrecordable_judgement(
        ledger, size, parse_time(when), "verdict", read=read, clock=now, passed=passed, judge_at=judge_at
    )
    data = canonical_bytes(result)
    # refused before anything is stored: ingest would refuse the entry, and no reader would read it
    if len(data) > MAX_RESULT_BYTES:
        raise ArtifactTooLargeError(
            f"the verdict's result is {len(data)} bytes, more than a recorded result may hold "
            f"({MAX_RESULT_BYTES}, MAX_RESULT_BYTES): nothing recorded"
        )
    digest = result_digest(result)
    stored = ledger.store.put_stream(io.BytesIO(data), expected=parse_digest(digest))
    artifact = ArtifactRef(
        name=RESULT_ARTIFACT, digest=str(stored.digest), size=stored.size, media_type="application/json"
    )
    # the subject it judged, as asked; the identity fills the fields the question left out (an entry is
    # logged under the subject it judged: ingest refuses one whose payload subject it contradicts)
    subject = {**result["identity"], **result["subject"]}
    payload = {
        "verdict": result["verdict"],
        "status": result["status"],
        "subject": dict(result["subject"]),
        "policy": result["policy"],
        "checkpoint": result["checkpoint"],
        "counts": {
            **{k: int(v) for k, v in (result.get("counts") or {}).items()},
            "not_credited": len(result.get("not_credited") or []),
        },
        "result_digest": digest,
        # the time it was judged at (freshness and ages): also in the result, here for every reader
        "reference_time": result["reference_time"],
    }
    KIND_MODELS[("verdict", 1)].model_validate(payload)
    statement = ledger.make_statement("verdict", subject, payload, artifacts=[artifact], collected_at=at)
    return ledger.append([ledger.sign(statement, key)], logged_at=at)[0]


def judge_again_at(
    ledger: Ledger, result: Mapping[str, Any], policy: LoadedPolicy
) -> Callable[[datetime], tuple[bool, str]]:
    """The verdict ``result`` judged again at another time (``record_verdict``'s ``judge_at``): its subject
    on the whole log as it stands then — not the log it read (its checkpoint), which a past ``--now`` cuts
    before entries logged since (a supersession withdrawing its evidence) — under ``policy``, (whether it is
    QUALIFIED, what it says). ``policy`` must be the policy it was judged under (its identity, digests
    included): else it is not judged again and reads as not QUALIFIED (a past QUALIFIED is then not
    recorded)."""

    def judge(when: datetime) -> tuple[bool, str]:
        if _policy_identity(policy) != result.get("policy"):
            return False, (
                f"not judged again: it was judged under {result.get('policy')!r}, not the policy given "
                f"({_policy_identity(policy)!r})"
            )
        r = evaluate(ledger, dict(result["subject"]), policy, reference_time=when)
        failing = next((g for g in r["gates"] if g["status"] != "passed"), None)
        why = f" ({failing['name']} {failing['status']}: {failing.get('reason', '')})" if failing else ""
        return r["verdict"] == QUALIFIED, f"{r['verdict']}{why}"

    return judge


def recorded_result(store: ArtifactStore, payload: Mapping[str, Any], entry_id: str = "") -> dict[str, Any]:
    """The full result a verdict entry recorded: the stored artifact its ``result_digest`` names (read
    verified), or, in entries recorded before results moved out of the payload, the inline ``result``.
    A verdict whose result cannot be read raises (ArtifactMissingError, InputError): never an empty one —
    one over ``MAX_RESULT_BYTES`` too (ArtifactTooLargeError, an InputError: its size is looked up before
    a byte is read, and no more than the cap is ever read)."""
    inline = payload.get("result")
    if isinstance(inline, dict) and inline:
        return inline
    digest = payload.get("result_digest")
    if not isinstance(digest, str):
        raise InputError(f"verdict {entry_id} holds no result and no result_digest")
    address = parse_digest(digest)

    def too_large(size: int) -> ArtifactTooLargeError:
        return ArtifactTooLargeError(
            f"verdict {entry_id}: its result artifact {digest} holds {size} bytes, more than a verdict's "
            f"result may ({MAX_RESULT_BYTES}, MAX_RESULT_BYTES): it is not read"
        )

    size = store.size(address)  # ArtifactMissingError where it is not stored
    if size > MAX_RESULT_BYTES:
        raise too_large(size)
    with store.open_verified(address) as f:
        data = f.read(MAX_RESULT_BYTES + 1)  # never more, whatever the store said its size was
    if len(data) > MAX_RESULT_BYTES:
        raise too_large(len(data))
    try:
        value = json.loads(data)
    except ValueError as e:  # not JSON (nor UTF-8): unreadable, never a server error
        raise InputError(f"verdict {entry_id}: its result artifact {digest} is not JSON ({e})") from e
    if not isinstance(value, dict):
        raise InputError(f"verdict {entry_id}: its result artifact {digest} is not a JSON object")
    return value


def names_campaign(subject: Mapping[str, str]) -> bool:
    """Does ``subject`` name the one campaign a qualification verdict judges?"""
    return bool(str(subject.get(CAMPAIGN) or "").strip())


def evaluated_subject(payload: Mapping[str, Any]) -> dict[str, str] | None:
    """The subject a verdict entry evaluated, as its payload says (its ``subject``; inline in the result of
    older entries): ``judged_subject`` read without the store (ingest checked the stored result against
    it). None where it names none, or where its payload and inline result disagree (it judged no one
    subject: nothing is re-derived from it)."""
    try:
        return judged_subject(payload)
    except SchemaError:
        return None


def replay_verdict(
    ledger: Ledger, entry_id: str, *, policy_dir: Path | None = None, policy_path: str | None = None
) -> dict[str, Any]:
    """Recompute a recorded verdict at its checkpoint with the current policy bytes; report differences."""
    entry = ledger.get(entry_id)
    if entry.kind != "verdict":
        raise InputError(f"entry {entry.entry_id} is a {entry.kind} entry, not a verdict")
    payload = entry.statement.payload
    recorded = recorded_result(ledger.store, payload, entry.entry_id)
    # what the recorded result judged is the subject the entry is logged under (and its payload names):
    # one reading with ingest and the pages; an entry stored before ingest checked it replays as differing
    subject_problem = judged_subject_problem(entry.statement, recorded)
    if not isinstance(recorded.get("subject"), dict):
        raise InputError(f"cannot replay verdict {entry.entry_id}: its recorded result names no subject")
    pol = payload["policy"]
    policy = load_policy(policy_path or pol["name"], policy_dir)
    size = int(payload["checkpoint"]["size"])
    try:
        # at the reference time it was judged at (a verdict recorded at the wall clock is not judged again
        # at its checkpoint's last log time)
        when = payload.get("reference_time") or recorded.get("reference_time")
        current = evaluate(
            ledger, dict(recorded["subject"]), policy, at_size=size, reference_time=when or None
        )
    except EntryNotFoundError as e:
        raise LedgerError(f"cannot replay verdict {entry.entry_id}: {e.message}") from e
    differences: list[str] = []
    if subject_problem is not None:
        differences.append(f"it judged another subject than the one it is logged under: {subject_problem}")
    now_policy = _policy_identity(policy)
    if now_policy.get("digest") != pol.get("digest"):
        differences.append(
            f"policy digest changed: recorded {pol.get('digest')}, current {now_policy['digest']}"
        )
    if now_policy.get("acceptance_digest") != pol.get("acceptance_digest"):
        differences.append(
            f"acceptance policy digest changed: recorded {pol.get('acceptance_digest')}, "
            f"current {now_policy.get('acceptance_digest')}"
        )
    if current["checkpoint"]["root"] != payload["checkpoint"]["root"]:
        differences.append(
            f"the log's root at size {size} is {current['checkpoint']['root']}, the verdict "
            f"recorded {payload['checkpoint']['root']}"
        )
    for key in ("verdict", "status", "gates", "used", "rejected", "not_credited", "identity", "manifest"):
        if current.get(key) != recorded.get(key):
            differences.append(
                f"{key} differs"
                + (
                    f": recorded {recorded.get(key)!r}, now {current.get(key)!r}"
                    if key in ("verdict", "status")
                    else ""
                )
            )
    same = canonical_bytes(current) == canonical_bytes(recorded)
    if not same and not differences:
        differences.append("result bytes differ")
    digest_ok = payload.get("result_digest") == result_digest(recorded)
    if not digest_ok:
        differences.append("the recorded result does not match its recorded result_digest")
    return {
        "entry": entry.entry_id,
        "same": same and digest_ok and subject_problem is None,
        "recorded": {"verdict": recorded.get("verdict"), "policy": pol, "checkpoint": payload["checkpoint"]},
        "current": {"verdict": current["verdict"], "policy": now_policy, "checkpoint": current["checkpoint"]},
        "differences": differences,
        "result": current,
    }
