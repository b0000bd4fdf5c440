"""Evidence filtering: which entries a verdict may credit, and for every excluded entry the rule and why.

Rule codes are stable (they appear in verdict JSON). Times: revocation and key validity compare the log's
``logged_at`` (when the ledger accepted the entry); job terminal time, freshness and GPU resets compare the
collector's ``collected_at`` (when the evidence was observed) with the job's ``ended_at``, the reference time
and the kernel log's ``last_reset_at``.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from bisect import bisect_left
from collections.abc import Callable, Collection, Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any

from ledger.answers import (
    CHAT_PROBES,
    CONTEXT_DETAIL,
    HARNESS_REQUEST,
    REFUSAL_ACCESS,
    REFUSAL_CONTEXT,
    REFUSAL_OPTION_VALUE,
    REFUSALS,
    cut_undecided,
    launched_command,
    launched_context,
    launched_counts,
    parity_of,
    prompt_tokens_exact,
    refusal,
    request_cut,
    request_unanswered,
)
from ledger.devices import (
    VISIBLE_DEVICES,
    device_of,
    gpu_name,
    gpus_not_listed,
    index_text,
    visible_device_items,
)
from ledger.entries import (
    FAULT_TIMEOUT,
    FAULT_UNANSWERED,
    format_time,
    host_key,
    misspelling_of,
    parse_time,
    pin_bindings,
)
from ledger.errors import LedgerError
from ledger.hashing import parse_digest
from ledger.policy.bounds import PARITY_LEVEL
from ledger.policy.conditions import Condition
from ledger.policy.loader import LoadedPolicy, rule_key
from ledger.policy.names import (
    HARNESS_GATES,
    STEP_OWN_EVIDENCE,
    endpoint_key,
    endpoint_under,
    endpoint_under_but_for_host,
)
from ledger.policy.rules import CREDIT_ONLY, RULES, Rule, trust_rejection
from ledger.policy.snapshot import (
    NO_DERIVED,
    Evidence,
    Snapshot,
    newest_entries,
    newest_text,
    probe_ok,
)
from ledger.signatures import (
    COLLECTOR_STOPPED,
    PYTHON_TRACEBACK,
    UNKNOWN_CLASS,
    Classification,
    Explanation,
    Occurrence,
    RunOutcome,
    Signature,
    before_stop,
    classify,
    collector_stop_end,
    decisive,
    explained_by_refusals,
    explanations,
    find_engine_text,
    not_a_completion,
    occurrences,
    outside_stop_shown,
    own_end_lines,
    pattern_signatures,
    signature_classes,
    status_signatures,
    stop_markers,
    unanswered_error,
)
from ledger.store.base import ArtifactStore
from ledger.trust import trust_problem

__all__ = [
    "ACTING_KINDS",
    "RULES",
    "Filtered",
    "Rejection",
    "acting_decisions",
    "deciding_acceptance",
    "filter_evidence",
    "not_independent",
    "render",
    "request_timed_out",
    "taken_out",
]

# Entries that act on other entries rather than being evidence of a gate.
ACTING_KINDS = frozenset({"supersession", "acceptance", "review", "verdict", "routing.change"})
TERMINAL_STATES = frozenset({"succeeded", "failed", "killed", "cancelled"})
# A host's facts: credited only as facts of a host the campaign ran on (``campaign_hosts``)
HOST_SCOPED_KINDS = frozenset({"host.probe", "model.pin"})
# Kinds whose stored artifacts the policy reads back (an engine's logs, classified with the signature
# table): one recorded by reference only cannot be read, so the entry cannot be judged
READ_BACK_KINDS = frozenset({"engine.launch"})
# Acting entries an acceptance may reject (a rejected review PASS credits nothing; a rejected supersession
# withdraws nothing; a rejected acceptance decides nothing — so a rejection of a rejection reinstates what
# that rejection took out, as a supersession of a supersession does)
REJECTABLE_ACTING = frozenset({"review", "supersession", "acceptance"})


@dataclass(frozen=True)
class Rejection:
    entry: Evidence
    rule: str
    detail: str
    by: str | None = None  # the entry that caused it (supersession, acceptance, review, job, kernel log)
    # not credited, but the failure it shows stays evidence against the engine (a rule that withholds
    # credit never drops a failure: only a supersession, with its reason, withdraws one)
    counts_against: bool = False

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "entry": self.entry.id,
            "seq": self.entry.seq,
            "kind": self.entry.kind,
            "rule": str(self.rule),
            "detail": self.detail,
        }
        if self.by:
            out["by"] = self.by
        if self.counts_against:
            out["counts_against"] = True
        return out


@dataclass
class Filtered:
    accepted: list[Evidence]
    rejected: list[Rejection]
    manifest: dict[str, str]
    manifest_sources: list[str]
    support: dict[str, list[str]] = field(default_factory=dict)  # evidence id → acting entries it relies on
    reference_time: datetime | None = None
    # the artifact checks made, in order: [digest, size the entry states, mode, problem or None]
    artifact_checks: list[list[Any]] = field(default_factory=list)
    # the reference times (both ends included) at which every decision above is the same, texts included
    window: tuple[datetime, datetime] | None = None
    # entries a rule withheld credit from that show a failure (``Rejection.counts_against``), in log order:
    # not in ``accepted``; the gates judge them as evidence against the engine only — they can fail a gate,
    # never pass it (``ledger.policy.verdict``)
    against: list[Evidence] = field(default_factory=list)
    # the campaign's jobs no terminal entry ended, or that ended failed with no failed gate result of theirs
    # (``_unjudged_jobs``): the verdict cannot be QUALIFIED beside them
    unjudged_jobs: list[dict[str, str]] = field(default_factory=list)


_EARLIEST = datetime.min.replace(tzinfo=UTC)
_LATEST = datetime.max.replace(tzinfo=UTC)
_TICK = timedelta(microseconds=1)  # the resolution of log and reset times


class _Missing(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return "?"


def render(template: str, context: Mapping[str, Any]) -> str:
    """Fill ``{e[payload][attempt]}``-style placeholders; a name or key that is not there prints as ``?``
    (never the placeholder itself)."""
    import string

    out: list[str] = []
    ctx = _Missing(context)
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError:
        return template
    for literal, field_name, spec, conv in parsed:
        out.append(literal)
        if field_name is None:
            continue
        piece = "{" + field_name + ("!" + conv if conv else "") + (":" + spec if spec else "") + "}"
        try:
            value = piece.format_map(ctx)
        except (KeyError, IndexError, TypeError, ValueError, AttributeError):
            value = "?"
        out.append(value)
    return "".join(out)


def _trust_problem(e: Evidence, snap: Snapshot, policy: LoadedPolicy) -> tuple[str, str] | None:
    rule = policy.acceptance.signers.get(e.kind)
    problem = trust_problem(
        snap.keyring, e.signer, e.kind, e.logged_time, allowed=rule.roles if rule else None
    )
    if problem is not None:
        return trust_rejection(problem, e.logged_at)
    rec = snap.keyring.keys.get(e.signer)  # type: ignore[call-overload]
    roles = set(rec.roles)
    if rule and roles & set(rule.forbid):
        bad = sorted(roles & set(rule.forbid))
        why = f" ({rule.reason})" if rule.reason else ""
        return Rule.WRONG_ROLE, f"signer {rec.name} holds {', '.join(bad)}; may not sign {e.kind}{why}"
    return None


def _fmt(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _latest(items: list[Evidence]) -> Evidence | None:
    return max(items, key=lambda x: x.seq) if items else None


def _artifact_problem(
    e: Evidence, store: ArtifactStore, mode: str, cache: dict[str, tuple[str, str] | None]
) -> tuple[str, str] | None:
    for a in e.artifacts:
        if not a.get("stored", True):
            if e.kind in READ_BACK_KINDS:
                return Rule.ARTIFACT_NOT_STORED, (
                    f"artifact {a.get('name')} ({a.get('digest')}) is recorded by reference only: the policy "
                    f"reads a {e.kind}'s artifacts back (its logs) and cannot judge what it cannot read"
                )
            continue
        digest = a["digest"]
        if digest not in cache:
            cache[digest] = check_artifact(store, digest, a["size"], mode)
            if isinstance(cache, _ArtifactAnswers):
                found_now = cache[digest]
                cache.checked.append(
                    [digest, a["size"], mode, [str(found_now[0]), found_now[1]] if found_now else None]
                )
        found = cache[digest]
        if found is not None:
            return found[0], f"artifact {a['name']} ({digest}) {found[1]}"
    return None


def check_artifact(store: ArtifactStore, digest: str, size: Any, mode: str) -> tuple[str, str] | None:
    """What the store says about one artifact an entry names: None (present, the size the entry states,
    and with ``mode == "verify"`` its content hashes to its digest) or (rule, detail)."""
    problem: tuple[str, str] | None = None
    try:
        d = parse_digest(digest)
        if not store.has(d):
            problem = (Rule.ARTIFACT_MISSING, "is not in the store")
        elif store.size(d) != size:
            problem = (
                Rule.ARTIFACT_CORRUPT,
                f"has {store.size(d)} bytes, the entry says {size}",
            )
        elif mode == "verify":
            store.verify(d)
    except LedgerError as ex:
        code = Rule.ARTIFACT_MISSING if "missing" in ex.code else Rule.ARTIFACT_CORRUPT
        problem = (code, ex.message)
    return problem


class _ArtifactAnswers(dict[str, tuple[str, str] | None]):
    """The per-evaluation artifact answers, and the checks made in order (for the result cache)."""

    def __init__(self) -> None:
        super().__init__()
        self.checked: list[list[Any]] = []


def _supersessions(trusted: list[Evidence], who: Callable[[str], str]) -> dict[str, Evidence]:
    """Entry id → the earliest supersession in force that supersedes it.

    A supersession superseded in turn is withdrawn: what it superseded stands again (unless another
    supersession in force says otherwise). References point back in the log, so walking it from the end
    decides each supersession before any it could withdraw.
    """
    withdrawn: set[str] = set()
    by: dict[str, Evidence] = {}
    signer = {e.id: who(e.signer) for e in trusted}
    for s in reversed([e for e in trusted if e.kind == "supersession"]):
        reason = s.payload.get("reason")
        if s.id in withdrawn or not isinstance(reason, str) or not reason.strip():
            continue  # withdrawn in turn, or without its reason (refused at ingest now): in force for nothing
        for target in (t for t in s.refs("supersedes") if t != s.id):
            withdrawn.add(target)
            # walking back: the earliest supersession in force is kept — but one by another key than the
            # target's own beats any by its own key, whatever their order (``self_superseded``): a key
            # withdraws no failure of its own record, another key's supersession does
            kept = by.get(target)
            own = signer.get(target)
            if kept is None or not self_superseded(s, own, who) or self_superseded(kept, own, who):
                by[target] = s
    return by


def self_superseded(s: Evidence, target_signer: str | None, who: Callable[[str], str]) -> bool:
    """Whether supersession ``s`` is signed by the signer of what it supersedes (``target_signer``, its
    identity: ``who``, a key and the keys rotated to it are one signer): it takes credit away, but withdraws
    no failure that record shows (rule ``self-superseded``)."""
    return target_signer is not None and who(s.signer) == target_signer


def _acceptances(trusted: list[Evidence], superseded_by: Mapping[str, Evidence]) -> dict[str, list[Evidence]]:
    """Entry id → the trusted acceptances in force that ref it (rel ``subject``), in log order."""
    out: dict[str, list[Evidence]] = {}
    for a in trusted:
        if a.kind == "acceptance" and a.id not in superseded_by:
            for target in a.refs("subject"):
                out.setdefault(target, []).append(a)
    return out


def not_independent(
    a: Evidence, target: Evidence, who: Callable[[str], str], review_passes: Sequence[Evidence] = ()
) -> tuple[str, Evidence | None] | None:
    """Why acceptance ``a`` that *accepts* ``target`` is not an independent decision, or None (it is, or it
    rejects: a rejection by any key counts): ``("own-key", None)`` — signed by ``target``'s own signer — or
    ``("reviewer", pass)`` — signed by the signer of ``pass``, one of ``review_passes`` (the review PASSes of
    ``target`` the caller knows of: any, not only the credited one, so the answer does not depend on the
    order they were logged in; two people — who reviewed does not also accept). ``who``: a key and the keys
    rotated to it are one signer."""
    if a.payload.get("decision") != "accepted":
        return None
    signer = who(a.signer)
    if signer == who(target.signer):
        return "own-key", None
    reviewed = next(
        (r for r in review_passes if r.payload.get("result") == "PASS" and who(r.signer) == signer), None
    )
    return ("reviewer", reviewed) if reviewed is not None else None


def deciding_acceptance(
    target: Evidence,
    acceptances: Sequence[Evidence],
    who: Callable[[str], str],
    review_passes: Sequence[Evidence] = (),
) -> Evidence | None:
    """Of the acceptances in force of ``target`` (rel ``subject``), the one that decides it, or None: the
    latest, leaving out every acceptance that accepts it and is not independent (``not_independent``: signed
    by ``target``'s own signer, or by a signer of one of ``review_passes``, its review PASSes). Such an
    acceptance credits nothing and decides nothing in the entry's favour — it cannot overrule another key's
    rejection, nor another key's acceptance, earlier or later — while a rejection by it still counts."""
    deciding = [a for a in acceptances if not_independent(a, target, who, review_passes) is None]
    return _latest(deciding)


def taken_out_text(rule: str, by: Evidence) -> str:
    """What took an entry out (``taken_out``'s rule and the entry that does), in the words the filter gives
    its supersession rejections (one copy: the filter and the routing gate both build them here): the
    entry, its signer and the reason it gives."""
    why = str(by.payload.get("reason") or "")
    if rule == Rule.REJECTED_BY_ACCEPTANCE:
        return f"rejected by acceptance {by.id[:16]} ({by.signer_name}): {why}".rstrip(": ")
    if rule == Rule.SELF_SUPERSEDED:
        return (
            f"superseded by {by.id[:16]}, signed by the key that signed it ({by.signer_name}): {why}".rstrip(
                ": "
            )
        )
    return f"superseded by {by.id[:16]} ({by.signer_name}): {why}".rstrip(": ")


def _refused_acting(
    trusted: list[Evidence], acceptances: Mapping[str, list[Evidence]], who: Callable[[str], str]
) -> dict[str, Evidence]:
    """Review, supersession or acceptance id → the acceptance that rejects it (the acceptance that decides
    it, ``deciding_acceptance``, says ``rejected``). A review FAIL is not rejected so: a rejection takes
    credit away, and lifting a FAIL takes a PASS on the repaired commit (or a supersession of the FAIL, with
    its reason).

    A rejected acceptance decides nothing, not even about another acceptance: the log is walked from its
    end (references point back, so every acceptance of an entry is decided before the entry), and an
    acceptance already rejected is left out of what decides the entries it refs — a rejection of a
    rejection reinstates what that rejection took out."""
    out: dict[str, Evidence] = {}
    for e in reversed(trusted):
        if e.kind == "review" and e.payload.get("result") != "PASS":
            continue
        if e.kind in REJECTABLE_ACTING and e.id in acceptances:
            in_force = [a for a in acceptances[e.id] if a.id not in out]
            decides = deciding_acceptance(e, in_force, who)
            if decides is not None and decides.payload.get("decision") == "rejected":
                out[e.id] = decides
    return out


def acting_decisions(
    trusted: list[Evidence], who: Callable[[str], str]
) -> tuple[dict[str, Evidence], dict[str, list[Evidence]], dict[str, Evidence]]:
    """What trusted acting entries say about others (``trusted`` in log order): entry id → the supersession
    in force that supersedes it (``_supersessions``), entry id → its acceptances in force (log order), and
    review, supersession or acceptance id → the acceptance that rejects it (``_refused_acting``). A
    rejected supersession withdraws nothing: the supersessions in force are decided again without it. A
    rejected acceptance decides nothing: it is not among the acceptances in force returned."""
    superseded_by = _supersessions(trusted, who)
    acceptances = _acceptances(trusted, superseded_by)
    refused = _refused_acting(trusted, acceptances, who)
    if any(e.kind == "supersession" and e.id in refused for e in trusted):
        superseded_by = _supersessions([t for t in trusted if t.id not in refused], who)
        acceptances = _acceptances(trusted, superseded_by)
        refused = _refused_acting(trusted, acceptances, who)
    if refused:
        acceptances = {
            t: kept
            for t, decided in acceptances.items()
            if (kept := [a for a in decided if a.id not in refused])
        }
    return superseded_by, acceptances, refused


def taken_out(
    e: Evidence, acting: Iterable[Evidence], who: Callable[[str], str]
) -> tuple[str, Evidence] | None:
    """Whether trusted supersessions and acceptances take ``e`` out, as the acceptance filter decides it:
    ``(rule, the entry that does)`` — ``superseded`` or ``self-superseded`` (a supersession in force), or
    ``rejected-by-acceptance`` (the acceptance that decides it rejects it) — or None. ``acting`` are the
    trusted supersessions and acceptances that ref ``e`` and, in turn, those that ref them (the transitive
    referrers: a supersession's own supersessions and acceptances decide whether it is in force); any others
    are ignored. ``who``: the keyring's ``identity`` (a key and the keys rotated to it are one signer)."""
    entries = sorted({a.id: a for a in (e, *acting)}.values(), key=lambda x: x.seq)
    superseded_by, acceptances, refused = acting_decisions(entries, who)
    s = superseded_by.get(e.id)
    if s is not None:
        own = e.kind != "supersession" and self_superseded(s, who(e.signer), who)
        return (Rule.SELF_SUPERSEDED if own else Rule.SUPERSEDED), s
    if e.id in refused:
        return Rule.REJECTED_BY_ACCEPTANCE, refused[e.id]
    decides = deciding_acceptance(e, acceptances.get(e.id, []), who)
    if decides is not None and decides.payload.get("decision") == "rejected":
        return Rule.REJECTED_BY_ACCEPTANCE, decides
    return None


def campaign_hosts(
    subject: Mapping[str, str], trusted: Sequence[Evidence], superseded: set[str] | Mapping[str, Any]
) -> frozenset[str]:
    """The hosts the evaluated campaign ran on (as ``host_key`` compares them): the subject's ``host`` where
    it names one; else the hosts its trusted, not superseded launches and jobs name (none: no host's facts
    can be the campaign's)."""
    if "host" in subject:
        return frozenset({host_key(subject["host"])})
    # its launches' hosts, and its jobs' (a job that never launched an engine — it failed its host
    # prerequisites — still ran on its host: that host's probe is the campaign's fact)
    return frozenset(
        host_key(str(e.subject["host"]))
        for e in trusted
        if e.kind in ("engine.launch", "job")
        and e.in_subject
        and e.id not in superseded
        and "host" in e.subject
    )


def _manifest(
    trusted: list[Evidence],
    superseded: set[str],
    keys: Sequence[str] = (),
    *,
    campaign: str | None,
    hosts: frozenset[str],
    launch_kinds: Container[str] = (),
) -> tuple[dict[str, str], list[str]]:
    """The campaign's pinned manifest: the first campaign job's ``spec.bindings`` and the latest model pin
    (a key both bind differently is a ``manifest_conflict``). Every job entry of the campaign binds what
    ``_job_bindings`` reads — a running entry without ``spec`` or ``spec.bindings`` binds nothing, as
    ``entries.Job`` reads it — and a later one that binds otherwise conflicts (``spec_conflict``); so does
    a trusted, not superseded launch of the campaign (``launch_kinds``) that records another
    ``ENGINE_CONFIG_BINDING`` than the manifest's: another configuration evidently ran under the campaign
    (``launch_conflict``; a launch of a job whose running entries are all superseded is withdrawn with that
    job's spec). A spec key that is not one of the policy's
    binding ``keys`` but a misspelling of one (``misspelling_of``: one but for case, whitespace, ``.``, ``-``
    or ``_`` — ``modelRevision``, ``"model_revision "`` — or a typo away — ``engine_verison``) is a
    ``misspelled_binding`` of it: what the approved spec meant to bind is never silently dropped. Only
    ``campaign``'s jobs approve a spec (another campaign's job, read because an entry refs it, approved
    another campaign's; None: any), and only pins of ``hosts`` pin the model (another host verified its own
    files)."""
    out: dict[str, str] = {}
    sources: list[str] = []
    jobs = [
        e
        for e in trusted
        if e.kind == "job"
        and e.id not in superseded
        and (campaign is None or e.subject.get("campaign") == campaign)
        and _job_bindings(e) is not None
    ]
    first_bound: dict[str, str] = {}
    if jobs:
        first = min(jobs, key=lambda x: x.seq)
        first_bound = _job_bindings(first) or {}
        out.update(first_bound)
        sources.append(first.id)
        # the campaign's approved spec is one spec: a later job of it that binds a key otherwise (or leaves
        # out one the first binds, or binds one it does not) contradicts it — neither value is the manifest
        for later in sorted(jobs, key=lambda x: x.seq):
            if later is first:
                continue
            other = _job_bindings(later) or {}
            for k in sorted(set(other) | set(first_bound)):
                if out.get(k) != other.get(k) and not str(out.get(k, "")).startswith("conflict: "):
                    out[k] = spec_conflict(k, out.get(k), other.get(k), later)
                    if later.id not in sources:
                        sources.append(later.id)
    pins = [e for e in trusted if e.kind == "model.pin" and e.id not in superseded and _host_of(e) in hosts]
    pin = _latest(pins)
    if pin is not None:
        for k, v in pin_bindings(pin.payload).items():
            # the approved spec and the newest pin disagree: neither is the manifest, and no launch can
            # match it (a launch bound to either value is rejected, naming both)
            out[k] = v if out.get(k, v) == v else manifest_conflict(out[k], v)
        sources.append(pin.id)
    ran = _launch_conflict(trusted, superseded, out, campaign=campaign, launch_kinds=launch_kinds)
    if ran is not None:
        out[ENGINE_CONFIG_BINDING], launch_id = ran
        sources.append(launch_id)
    if jobs:
        meant = [k for k in keys if k != "shard:*"]
        for k in first_bound:
            known = misspelling_of(str(k), meant)
            if known is not None:
                out[known] = misspelled_binding(str(k), known)
    return out, sources


def _job_bindings(job: Evidence) -> dict[str, str] | None:
    """What a job entry's approved spec binds, as ``entries.Job`` reads it: its ``spec.bindings``; a running
    entry whose ``spec`` or ``spec.bindings`` is missing binds nothing (``{}``, which conflicts with a first
    job that binds something — the two spellings of "binds nothing" are one); None for a terminal entry (told
    apart by its ``state``) that records no bindings: it ends its job's run and approves no spec."""
    spec = job.payload.get("spec")
    bindings = spec.get("bindings") if isinstance(spec, dict) else None
    if isinstance(bindings, dict):
        return {str(k): str(v) for k, v in bindings.items()}
    return {} if job.payload.get("state") == "running" else None


def _launch_conflict(
    trusted: Sequence[Evidence],
    superseded: Container[str],
    manifest: Mapping[str, str],
    *,
    campaign: str | None,
    launch_kinds: Container[str],
) -> tuple[str, str] | None:
    """(the manifest's ``ENGINE_CONFIG_BINDING`` value, the launch's id) where a trusted, not superseded
    launch of the campaign (of ``launch_kinds``, in the subject) records an engine configuration other than
    the one the manifest pins, or none (dropped, its bindings missing or mistyped: what it ran cannot be
    told to be the pinned one, as a later job that binds none conflicts) — whatever its job's spec says,
    another configuration ran under the campaign, so no configuration is the manifest (``launch_conflict``;
    not only that launch's own credit is lost) — else None. A launch the log took in a job whose running
    entries are all superseded is withdrawn with that job's spec (how an operator settles a conflict); a
    manifest that pins none (no job binds one: not compared), or already conflicts, is left as it is."""
    pinned = manifest.get(ENGINE_CONFIG_BINDING)
    if pinned is None or pinned.startswith("conflict: "):
        return None
    # (campaign, job_id) → whether every running entry of that job is superseded
    running: dict[tuple[Any, Any], bool] = {}
    for j in trusted:
        if j.kind == "job" and j.payload.get("state") == "running":
            key = (j.subject.get("campaign"), j.payload.get("job_id"))
            running[key] = running.get(key, True) and j.id in superseded
    for launch in sorted(trusted, key=lambda x: x.seq):
        if (
            launch.kind not in launch_kinds
            or not launch.in_subject
            or launch.id in superseded
            or (campaign is not None and launch.subject.get("campaign") != campaign)
        ):
            continue
        if running.get((launch.subject.get("campaign"), launch.derived.get("job")), False):
            continue  # its job's spec is withdrawn, and the run with it
        bindings = launch.payload.get("bindings")
        value = bindings.get(ENGINE_CONFIG_BINDING) if isinstance(bindings, dict) else None
        if value is None or str(value) != pinned:
            return launch_conflict(pinned, None if value is None else str(value), launch), launch.id
    return None


def launch_conflict(pinned: str, ran: str | None, launch: Evidence) -> str:
    """The manifest's ``ENGINE_CONFIG_BINDING`` value where a launch of the campaign ran another engine
    configuration than the one its approved spec pins (None: it records none): a text no binding equals,
    naming both."""
    return (
        f"conflict: the campaign's approved spec binds {ENGINE_CONFIG_BINDING} to {pinned}, its engine "
        f"launch {launch.id[:16]} (job {launch.derived.get('job')}) "
        + (f"ran {ran}" if ran is not None else "records no configuration it ran")
    )


def misspelled_binding(spec_key: str, key: str) -> str:
    """The manifest's value for a binding key the job's approved spec names misspelled (``misspelling_of``):
    a text no binding equals, naming both."""
    return f"misspelled: the job's spec binds {spec_key!r}, which is not the binding key {key!r}"


# a manifest key a policy's CEL reads: ``manifest.KEY`` or ``'KEY' in manifest``
_MANIFEST_READ = re.compile(r"""\bmanifest\.([A-Za-z_][A-Za-z0-9_]*)|['"]([^'"\s]+)['"]\s+in\s+manifest\b""")


def manifest_keys_read(policy: LoadedPolicy) -> list[str]:
    """The manifest keys the policy's own text reads (``manifest.hostname``, ``'served_name' in manifest``),
    its acceptance policy's included, comment lines left out, in order of first use: the one list of what a
    job's approved spec binds for the policy beyond its compared binding keys."""
    texts = tuple(pol.data for pol in (policy, policy.acceptance_policy) if pol is not None)
    return list(_manifest_keys_in(texts))


@lru_cache(maxsize=64)
def _manifest_keys_in(texts: tuple[bytes, ...]) -> tuple[str, ...]:
    """``manifest_keys_read`` of policy texts, once per text (a scan of the file takes milliseconds)."""
    found: dict[str, None] = {}
    for text in texts:
        for line in text.decode("utf-8", "replace").splitlines():
            if line.lstrip().startswith("#"):
                continue
            for m in _MANIFEST_READ.finditer(line):
                found.setdefault(m[1] or m[2], None)
    return tuple(found)


def _misspelled_reads(
    manifest_sources: Sequence[str],
    trusted: Sequence[Evidence],
    keys: Sequence[str],
    bind_keys: Sequence[str],
) -> list[dict[str, str]]:
    """The keys of the campaign's approved spec (the first job of the manifest's sources) that misspell a
    manifest key the policy reads but does not compare as a binding (``keys``: ``manifest_keys_read`` less
    ``bind_keys``) — ``hostnmae`` for ``hostname``, ``served-name`` for ``served_name`` — each as an
    unjudged item: what the approval meant to bind for the policy cannot be told, so the verdict cannot be
    QUALIFIED beside it (the key is not read as absent, which would drop what it meant)."""
    first = next((e for e in trusted if e.kind == "job" and manifest_sources[:1] == [e.id]), None)
    if first is None:
        return []
    read = [k for k in keys if k not in bind_keys]
    out: list[dict[str, str]] = []
    for k in _job_bindings(first) or {}:
        known = misspelling_of(str(k), read)
        if known is not None:
            out.append(
                {
                    "entry": first.id,
                    "kind": "job",
                    "gate": "",
                    "job_id": str(first.payload.get("job_id")),
                    "detail": f"job {first.payload.get('job_id')} (entry {first.id[:16]}): its approved "
                    f"spec binds {str(k)!r}, a misspelling of {known!r}, which the policy reads from the "
                    f"manifest: what the approval meant cannot be told (bind {known!r})",
                }
            )
    return out


def spec_conflict(key: str, first: str | None, later: str | None, job: Evidence) -> str:
    """The manifest's value for a key two jobs of the campaign bind differently (their approved specs
    disagree): a text no binding equals, naming both."""

    def said(v: str | None) -> str:
        return "nothing" if v is None else v

    return (
        f"conflict: the campaign's first job's spec binds {key} to {said(first)}, its job "
        f"{job.payload.get('job_id')} ({job.id[:16]}) to {said(later)}"
    )


def manifest_conflict(spec_value: str, pin_value: str) -> str:
    """The manifest's value for a key the campaign job's approved spec and the newest model pin bind
    differently: a text no binding equals, naming both."""
    return f"conflict: the job's spec binds {spec_value}, the newest model pin {pin_value}"


JobKey = tuple[Any, str]  # a job: (its campaign, its job_id) — another campaign's job_id is another job


@dataclass
class _JobLog:
    """Which terminal entry ends which job, read once from log order (``_job_log``): ``filter_evidence``
    (``after-job-terminal``, ``killed-run``, the job windows, ``operator_stopped``), ``_derive``
    (``derived.job``: the job open when the log took an entry, ``open_at``; ``unmatched_job_ends``) and
    ``_unjudged_jobs`` read this one reading."""

    # the job's first running entry not superseded (it started the job)
    started: dict[JobKey, Evidence] = field(default_factory=dict)
    # the terminal entry that ended the job: its first terminal entry logged after a running entry of it
    # (a job ends once; a later terminal entry does not reopen it)
    ended: dict[JobKey, Evidence] = field(default_factory=dict)
    # the first terminal entry of the job that says killed or cancelled, wherever it is in the log: a job
    # any terminal entry says was stopped was stopped, whatever another says (``killed-run``: it only ever
    # withholds the credit of passing output)
    stopped_by: dict[JobKey, Evidence] = field(default_factory=dict)
    # terminal entries logged before any running entry of their job (a misspelled job_id, an end logged
    # before its start): they end no run — which run they ended, and how, cannot be told
    unmatched: list[Evidence] = field(default_factory=list)
    # (job, running entry, the earlier end): a job started again after it ended
    restarted: list[tuple[JobKey, Evidence, Evidence]] = field(default_factory=list)
    # (job, running entry, its failed end), for each run a terminal entry ``failed`` closed
    failed: list[tuple[JobKey, Evidence, Evidence]] = field(default_factory=list)
    # the runs no terminal entry closed, by job: the running entry that opened each
    open: dict[JobKey, Evidence] = field(default_factory=dict)
    # every run, by campaign, in the order they started: (job_id, the running entry that opened it, the
    # terminal entry that closed it or None) — which job was open when the log took an entry (``open_at``)
    runs: dict[Any, list[tuple[str, Evidence, Evidence | None]]] = field(default_factory=dict)

    # per campaign, read once from ``runs`` (``_timeline``): the seq of each run's start or end in log order
    # with the job open just after it (its job_id, and the running entry that opened that run), and the
    # campaign's ends in log order (their seqs, and the entries)
    _timelines: dict[
        Any, tuple[list[int], list[str | None], list[Evidence | None], list[int], list[Evidence]]
    ] = field(default_factory=dict, repr=False, compare=False)

    def _timeline(
        self, campaign: Any
    ) -> tuple[list[int], list[str | None], list[Evidence | None], list[int], list[Evidence]]:
        if campaign not in self._timelines:
            runs = self.runs.get(campaign, [])
            events = sorted(
                [(start.seq, i) for i, (_, start, _) in enumerate(runs)]
                + [(end.seq, i) for i, (_, _, end) in enumerate(runs) if end is not None]
            )
            at: list[int] = []
            job: list[str | None] = []
            opened: list[Evidence | None] = []
            running: set[int] = set()  # the runs open, by their place in start order
            for seq, i in events:
                running ^= {i}  # a run starts, else it ends
                at.append(seq)
                job.append(runs[max(running)][0] if running else None)
                opened.append(runs[max(running)][1] if running else None)
            ends = sorted((end for _, _, end in runs if end is not None), key=lambda t: t.seq)
            self._timelines[campaign] = (at, job, opened, [t.seq for t in ends], ends)
        return self._timelines[campaign]

    def open_at(self, campaign: Any, seq: int) -> str | None:
        """The job of ``campaign`` open when the log took the entry at ``seq``: of the runs whose running
        entry precedes it and whose terminal entry does not, the latest to start (two jobs of a campaign may
        overlap); None when none was open — output logged after every job of the campaign ended belongs to
        none of them."""
        at, job, _, _, _ = self._timeline(campaign)
        i = bisect_left(at, seq)
        return job[i - 1] if i else None

    def run_open_at(self, campaign: Any, seq: int) -> Evidence | None:
        """The running entry that opened the run ``open_at`` reads (the same run: the latest to start of
        those open when the log took the entry at ``seq``); None when none was open."""
        at, _, opened, _, _ = self._timeline(campaign)
        i = bisect_left(at, seq)
        return opened[i - 1] if i else None

    def ended_before(self, campaign: Any, seq: int) -> Evidence | None:
        """The terminal entry of ``campaign``'s run that the log took last before ``seq``: the end of the
        campaign's latest run to end before the entry was logged; None when no run of it had ended."""
        _, _, _, end_seqs, ends = self._timeline(campaign)
        i = bisect_left(end_seqs, seq)
        return ends[i - 1] if i else None


def _job_key(j: Evidence) -> JobKey:
    return (j.subject.get("campaign"), str(j.payload.get("job_id")))


def _job_log(job_entries: Iterable[Evidence], superseded: Container[str]) -> _JobLog:
    """Read the job entries in log order (seq), once. A running entry opens a run of its job (its campaign
    and job_id); a terminal entry closes the open run — and ends the job, the first to do so — only where a
    running entry of that job precedes it in the log. One logged before every running entry of its job is
    unmatched (``_JobLog.unmatched``): it ends no run and withdraws no output logged after it. A job whose
    running entry is superseded is withdrawn, its ends with it: they are not unmatched. Superseded entries
    start and end nothing."""
    out = _JobLog()
    preceded: set[JobKey] = set()  # jobs a running entry (superseded or not) was logged for so far
    # the runs ``open_at`` reads, by the running entries that opened them, superseded ones included: a
    # supersession withdraws a job's spec, not which run the log took its output in, nor the end that says
    # the run was stopped (audit 63 f1: a killed job's passes were credited once its running entry was
    # superseded)
    run_open: dict[JobKey, Evidence] = {}
    for j in sorted(job_entries, key=lambda x: x.seq):
        key, state = _job_key(j), j.payload.get("state")
        if state == "running":
            preceded.add(key)
            if key not in run_open:
                run_open[key] = j
                out.runs.setdefault(key[0], []).append((key[1], j, None))
            if j.id in superseded:
                continue
            if key in out.ended and key not in out.open:
                out.restarted.append((key, j, out.ended[key]))
            out.started.setdefault(key, j)
            if key not in out.open:
                out.open[key] = j
        elif state in TERMINAL_STATES and j.id not in superseded:
            if state in _STOPPED:
                out.stopped_by.setdefault(key, j)
            if key not in preceded:
                out.unmatched.append(j)
                continue
            out.ended.setdefault(key, j)
            opened = run_open.pop(key, None)
            if opened is not None:
                runs = out.runs[key[0]]
                i = next(i for i in reversed(range(len(runs))) if runs[i][1] is opened)
                runs[i] = (key[1], opened, j)
            start = out.open.pop(key, None)
            if start is not None and state == "failed":
                out.failed.append((key, start, j))
    return out


# the kinds of entries that, logged while a job was open, show the log that the job ran an engine: the
# engine's launch (the collector records it when the run ends, before the job's terminal entry) and a probe
# of it (the collector probes only the engine it launched; a launch that could not be recorded leaves these)
RAN_ENGINE_KINDS = ("engine.launch", "health.probe")


def job_ran_engine(
    end: Evidence, entries: Iterable[Evidence], stands: Callable[[Evidence], bool] = lambda _: True
) -> bool:
    """Whether the terminal job entry ``end`` ended a run the log knows ran an engine — what a restoration
    asks before ``end`` drops a failure as its gone engine's (``routing.check_routing_change``; fix 138).
    Read from the log, never from ``end``'s claim. ``entries``: the job entries of ``end``'s campaign and
    its entries of ``RAN_ENGINE_KINDS`` (any logged after ``end`` are not read), of which only those
    ``stands`` holds for count — the caller's test of an entry it may stand on (trusted, not taken out),
    asked only of the entries the answer depends on: the job's own entries, those of jobs started after its
    run did, and, lazily, an entry of ``RAN_ENGINE_KINDS`` only where it would count.
    ``end`` must be the entry that ended its job (``_job_log``: the job's first terminal entry logged after
    a running entry of it, its campaign and ``job_id`` compared exactly — one logged before every running
    entry of its job, or after the job had ended, ends no run), and the log must have taken an entry of
    ``RAN_ENGINE_KINDS`` of that campaign while that run was open and before ``end`` (``_JobLog.open_at``:
    the job the log knows an entry by, not the job it names), on ``end``'s host — a probe, one an engine
    answered (``_ran_here``). A job that never ran — an end naming a job the log never saw start, one
    cancelled before it launched an engine — ended no engine; an end that names no campaign, or no
    ``job_id`` text, names no job the log can place: False.

    The job is the verdict's (``_job_key``: its campaign and ``job_id``, whatever host each entry names —
    the one reading ``_job_log`` gives every reader), and it must have run on ``end``'s host alone: every
    entry of that job read here (those that stand, logged before ``end``) names ``end``'s host
    (``_same_host``: as ``host_key`` compares hosts; one naming none, or a blank one, is not the same).
    A collector records every entry of a job under its own host and a fresh ``job_id``; a job_id the log
    took entries of on two hosts is one job to the verdict (a ``killed`` end on one host withholds the
    other's output; started again after its end it is unjudged, INCONCLUSIVE), and which of its runs
    ``end`` ended cannot be told: a running entry on another host never shows the job ``end`` ended
    started, so it ran no engine as far as the log can tell (fail closed: a restoration then drops nothing
    by it)."""
    campaign, job_id = end.subject.get("campaign"), end.payload.get("job_id")
    if end.kind != "job" or not (isinstance(campaign, str) and campaign.strip() and isinstance(job_id, str)):
        return False
    prior = sorted(
        (e for e in entries if e.seq < end.seq and e.subject.get("campaign") == campaign), key=lambda e: e.seq
    )
    key = _job_key(end)
    own = [e for e in prior if e.kind == "job" and _job_key(e) == key]
    if not any(e.payload.get("state") == "running" for e in own):
        return False  # the log never saw the job start (nothing else need be read)
    own = [e for e in own if stands(e)]
    if not all(_same_host(e, end) for e in (*own, end)):
        return False  # the job ran on another host too, or on one the log cannot name: not ``end``'s alone
    ended = _job_log([*own, end], ())
    opened = next((s for _, s, t in ended.runs.get(campaign, []) if t is end), None)
    if ended.ended.get(key) is not end or opened is None:
        return False
    # which job the log knows an entry by (``open_at``: of the runs open, the latest to start) is another
    # job's only where that job started after this run did: only those jobs' entries are read besides its own
    later = (e for e in prior if e.kind == "job" and _job_key(e) != key and e.seq > opened.seq and stands(e))
    jobs = _job_log([*own, *later, end], ())
    return any(
        e.kind in RAN_ENGINE_KINDS
        and e.seq > opened.seq
        and _ran_here(e, end)
        and jobs.open_at(campaign, e.seq) == job_id
        and stands(e)
        for e in prior
    )


def _ran_here(e: Evidence, end: Evidence) -> bool:
    """Whether ``e``, an entry of ``RAN_ENGINE_KINDS``, shows an engine ran where the job ``end`` ended ran:
    on ``end``'s host (``host_key``: a host missing or blank on either is not the same — an engine of the
    campaign on another host is not the one ``end`` ended; audit 99 f3), and, a probe, one an engine
    answered (``_unanswered`` False: it records an HTTP status; a refused or reset connection, a timeout,
    an ``ok`` claim with no status show no engine there; audit 99 f2)."""
    if not _same_host(e, end):
        return False
    return e.kind != "health.probe" or _unanswered(e) is False


def _same_host(e: Evidence, end: Evidence) -> bool:
    """Whether ``e`` names the host ``end`` names, as hosts compare (``host_key``: ``GPU-BOX-1`` is
    ``gpu-box-1``); a host missing, blank or no text on either is not the same (fail closed)."""
    here, there = end.subject.get("host"), e.subject.get("host")
    if not (isinstance(here, str) and here.strip() and isinstance(there, str) and there.strip()):
        return False
    return host_key(here) == host_key(there)


def filter_evidence(
    snap: Snapshot,
    policy: LoadedPolicy,
    store: ArtifactStore,
    *,
    bad_signatures: Mapping[str, str] | None = None,
    _held_back: Mapping[str, str] | None = None,
) -> Filtered:
    """Apply the acceptance rules in order; the first rule that excludes an entry is the one reported.
    (``_held_back``: the newest harness runs judged as having a newer run, ``_held_back_runs``; set only by
    the second round of this function.)"""
    _held_back = dict(_held_back or {})
    acc = policy.acceptance
    params = policy.params
    ref = parse_time(snap.reference_time)
    bad = dict(bad_signatures or {})
    rejected: dict[str, Rejection] = {}

    kept: set[str] = set()
    against_memo: dict[tuple[Any, ...], bool] = {}  # a stale 10,000-probe campaign: a few CEL calls

    def reject(
        e: Evidence,
        rule: str,
        detail: str,
        by: str | None = None,
        *,
        credit_only: bool | None = None,
        against: Condition | None = None,
    ) -> None:
        """Exclude ``e`` with the first rule that matches. A rule that only withholds credit (``CREDIT_ONLY``,
        or a ``[[rules]]`` with ``withholds = "credit"``) leaves a failure ``e`` shows standing as evidence
        against the engine (``_counts_against``): only a supersession, with its reason, withdraws one."""
        if e.id in rejected:
            return
        credit_only = withholds_only(rule, credit_only)
        if credit_only and _counts_against(policy, e, params, against, against_memo):
            kept.add(e.id)
            rejected[e.id] = Rejection(e, rule, detail + KEPT_AGAINST, by, counts_against=True)
        else:
            rejected[e.id] = Rejection(e, rule, detail, by)

    # 1. trust: signature, signer, revocation, validity window, role. The answer (and its text) depends on
    # the signer, the kind and the log time alone, and log times repeat (one per append batch): memoized.
    trust: dict[tuple[str, str, str], tuple[str, str] | None] = {}
    for e in snap.entries:
        if e.kind.startswith("key."):
            continue
        if e.id in bad:
            reject(e, Rule.BAD_SIGNATURE, bad[e.id])
            continue
        tkey = (e.signer, e.kind, e.logged_at)
        if tkey in trust:
            problem = trust[tkey]
        else:
            problem = trust[tkey] = _trust_problem(e, snap, policy)
        if problem is not None:
            reject(e, *problem)
            continue
        schema = e.schema_problem()
        if schema is not None:
            reject(e, Rule.SCHEMA_INVALID, schema)
    trusted = [e for e in snap.entries if e.id not in rejected and not e.kind.startswith("key.")]
    # who signed: a key and the keys rotated to it (either way) are one signer, wherever the policy asks
    # whether two entries were signed by the same key (an independent review or acceptance, a key's own
    # supersession) — a rotation hands a signer's identity to a new key, it does not make another person
    identities: dict[str, str] = {}

    def who(key_id: str) -> str:
        if key_id not in identities:
            identities[key_id] = snap.keyring.identity(key_id)
        return identities[key_id]

    # 2. what trusted acting entries say about others. An acceptance that rejects a review or a
    # supersession takes it out: a rejected review credits nothing, a rejected supersession withdraws
    # nothing (the supersessions in force are then decided again without it)
    superseded_by, acceptances, refused = acting_decisions(trusted, who)

    def in_force(review: Evidence) -> bool:
        """A review not superseded — or a FAIL superseded only by the key that signed it: as with evidence
        (``self-superseded``), a reviewer withdraws no failure of their own record; another key's
        supersession, or a PASS on the repaired commit, lifts it."""
        s = superseded_by.get(review.id)
        return s is None or (
            review.payload.get("result") == "FAIL" and self_superseded(s, who(review.signer), who)
        )

    # a review PASS FAILed by another review is taken out as a rejecting acceptance takes it out: a PASS
    # someone found wrong credits nothing (one level: what reviews a review is not itself reviewed here).
    # A review FAIL is never dropped so — by its own reviewer or another: a FAIL of a FAIL only takes credit
    # away, and a FAIL it does not take (a supersession by another key, with its reason, withdraws it)
    review_result = {r.id: r.payload.get("result") for r in trusted if r.kind == "review"}
    failed_reviews = {
        t
        for a in trusted
        if a.kind == "review" and a.payload.get("result") == "FAIL" and in_force(a) and a.id not in refused
        for t in a.refs("reviews")
        if t in review_result and review_result[t] != "FAIL"
    }
    reviews: dict[str, list[Evidence]] = {}
    for a in trusted:
        if a.kind == "review" and in_force(a) and a.id not in refused and a.id not in failed_reviews:
            for target in a.refs("reviews"):
                reviews.setdefault(target, []).append(a)
    job_entries = {e.id: e for e in trusted if e.kind == "job"}
    # which terminal entry ends which job — (campaign, job_id): another campaign's entry under the same
    # job_id ends some other job — read once from log order (``_job_log``): an end logged before every
    # running entry of its job ends no run (``_unjudged_jobs`` and ``unmatched_job_ends`` name it)
    jobs = _job_log(job_entries.values(), superseded_by)
    terminal, stopped_by = jobs.ended, jobs.stopped_by
    unmatched_ids = {u.id for u in jobs.unmatched}
    _derive(
        trusted,
        set(superseded_by),
        frozenset(acc.job_output_kinds),
        store,
        jobs,
        campaign=snap.subject.get("campaign"),
        params=params,
    )
    # a job's end as recorded, never after the log took its terminal entry (a claimed later end would credit
    # output logged after it)
    ended_at = {t.id: (_job_end(t) if t.payload.get("ended_at") else None) for t in terminal.values()}
    output_kinds = frozenset(acc.job_output_kinds)
    # campaign → job_id → (start, end or None): when each job of the campaign ran, by its first running
    # entry and the terminal entry that ended it (its ended_at, else when the log took it)
    job_windows: dict[Any, dict[str, tuple[datetime, datetime | None]]] = {}
    for (job_of, jid), j in jobs.started.items():
        term = terminal.get((job_of, jid))
        until = (ended_at[term.id] or term.observed_time) if term is not None else None
        job_windows.setdefault(job_of, {})[jid] = (j.observed_time, until)
    # The reference time decides which GPU resets count and which entries are stale, nothing else here:
    # [lo, hi] is the range of reference times for which both come out the same (``Filtered.window``).
    lo, hi = _EARLIEST, _LATEST
    resets: dict[str, tuple[datetime, str]] = {}
    for k in trusted:
        if k.kind == "kernel.log" and k.payload.get("last_reset_at") and "host" in k.subject:
            # the reset happened by the time the log took its kernel log, whatever later time it claims (a
            # collector's clock ahead): a probe taken before that may predate it
            t = min(parse_time(k.payload["last_reset_at"]), k.logged_time)
            if t > ref:
                hi = min(hi, t - _TICK)
            else:
                lo = max(lo, t)
                h = host_key(str(k.subject["host"]))
                if h not in resets or t > resets[h][0]:
                    resets[h] = (t, k.id)
    bind_keys = acc.bindings.keys if acc.bindings is not None else []
    hosts = campaign_hosts(snap.subject, trusted, superseded_by)
    campaign = snap.subject.get("campaign")
    manifest, manifest_sources = _manifest(
        trusted,
        set(superseded_by),
        bind_keys,
        campaign=campaign,
        hosts=hosts,
        launch_kinds=frozenset(acc.bindings.kinds) if acc.bindings is not None else frozenset(),
    )
    freshness = policy.freshness_seconds()
    art_cache = _ArtifactAnswers()
    support: dict[str, list[str]] = {}
    post_reset = set(acc.post_reset_kinds)
    rules_by_kind: dict[str, list[tuple[Any, Any, Callable[[Evidence], tuple[Any, ...] | None]]]] = {}
    for index, (rule, cond) in enumerate(policy.rules):  # in policy order, per kind
        # memoised per table (a rule name may name several, each with its own condition)
        keyer = _memo_keyer(f"{index}:{rule.name}", _e_reads(cond.source))
        for rule_kind in dict.fromkeys(rule.kinds):
            rules_by_kind.setdefault(rule_kind, []).append((rule, cond, keyer))
    rule_memo: dict[tuple[Any, ...], bool] = {}
    # `_required` is false for a kind no requirement names: skip the call for those
    review_kinds = {k for req, _ in policy.review_required for k in req.kinds}
    acceptance_kinds = {k for req, _ in policy.acceptance_required for k in req.kinds}

    bindings_kinds = frozenset(acc.bindings.kinds) if acc.bindings is not None else frozenset()
    # the attempts whose engine launch binds otherwise than the pinned manifest: what a harness measured while
    # such a launch ran (its gate.result, whose own bindings name only the served ids) measured that engine,
    # not the approved one — a campaign edited between two runs (another model, another engine version) does
    # not lend the first run's harness results to the second's engine, nor the probes that answered it (a
    # health.probe binds nothing itself). The attempt as the entry claims it (by collected_at) and as the log
    # took it: either one off the manifest withholds credit; a failed probe or run still counts against the
    # engine (BINDINGS_MISMATCH only withholds credit, [acceptance.against])
    off_manifest: dict[int, tuple[Evidence, str]] = {}
    if acc.bindings is not None:
        for launch in trusted:
            if launch.kind not in bindings_kinds or not launch.in_subject or launch.id in superseded_by:
                continue
            attempt = launch.derived.get("attempt")
            off = _bindings_problem(launch, acc.bindings.keys, acc.bindings.require_manifest, manifest)
            if type(attempt) is int and off is not None:
                off_manifest.setdefault(attempt, (launch, off))
    # attempt → its engine launch (``_derive`` numbers them): where a harness result of that attempt must
    # have measured and a probe of it asked (``_endpoint_problem``, rules harness-other-endpoint and
    # probe-other-endpoint)
    launch_at: dict[int, Evidence] = {}
    for launch in trusted:
        if launch.kind == "engine.launch" and launch.in_subject and launch.id not in superseded_by:
            numbered = launch.derived.get("attempt")
            if type(numbered) is int and numbered > 0:
                launch_at.setdefault(numbered, launch)

    def named_jobs_of(e: Evidence) -> list[Evidence]:
        """The job entries ``e`` names (ref job)."""
        if not e.statement.get("refs"):
            return []
        return [job_entries[jid] for jid in e.refs("job") if jid in job_entries]

    def foreign_job(e: Evidence, named_jobs: list[Evidence]) -> Evidence | None:
        """A job of another campaign that ``e``, of the evaluated subject, names as its own
        (``job-of-other-campaign``; of another subject: `other-subject` says so)."""
        if not e.in_subject:
            return None
        return next((j for j in named_jobs if j.subject.get("campaign") != e.subject.get("campaign")), None)

    def job_keys_of(e: Evidence, named_jobs: list[Evidence]) -> list[JobKey]:
        """The jobs ``e`` belongs to (``job_term_of``, ``operator_stopped``)."""
        # the one it names (ref job) and the one the log knows it ran in
        keys = [_job_key(j) for j in named_jobs]
        derived_job = e.derived["job"]
        campaign_of_e = e.subject.get("campaign")
        if derived_job is not None and (campaign_of_e, derived_job) not in keys:
            keys.append((campaign_of_e, derived_job))
        if e.kind in output_kinds and e.in_subject:
            # and the job of its campaign that ran when it says it was collected: output of a job that
            # was then killed stays that job's though it is logged late, in the next job (a spool
            # pushed later) — a claimed time only ever adds a job, so it can only take credit away
            for jid, (start, end) in job_windows.get(campaign_of_e, {}).items():
                if (
                    (campaign_of_e, jid) not in keys
                    and start <= e.collected_time
                    and (end is None or e.collected_time <= end)
                ):
                    keys.append((campaign_of_e, jid))
        return keys

    def job_term_of(e: Evidence, named_jobs: list[Evidence]) -> Evidence | None:
        """The terminal entry that decides ``e``'s job (``after-job-terminal``, ``killed-run``): of the jobs
        it belongs to (``job_keys_of``) and the entries that ended them (``_job_log``: never one logged
        before every running entry of its job), one it was produced after the end of; else a killed or
        cancelled one; else the first."""
        ends = [terminal[k] for k in job_keys_of(e, named_jobs) if k in terminal]
        if not ends:
            return None
        after = next((t for t in ends if _after_end(e, t, ended_at[t.id])), None)
        return after or next((t for t in ends if t.payload.get("state") in _STOPPED), ends[0])

    def jobs_of(e: Evidence) -> list[Evidence]:
        """The running entries of the jobs ``e`` belongs to (``job_keys_of``) and those it names (ref job):
        the approved specs that bind the code commit it was produced at (``produced_at``)."""
        named = named_jobs_of(e)
        out = {j.id: j for j in named if j.payload.get("state") == "running"}
        for k in job_keys_of(e, named):
            started = jobs.started.get(k)
            if started is not None:
                out.setdefault(started.id, started)
        return list(out.values())

    def stop_of(e: Evidence, named_jobs: list[Evidence], job_term: Evidence | None) -> Evidence | None:
        """The terminal entry that says ``e``'s job was killed or cancelled (``killed-run``): the one that
        decides it (``job_term_of``), else any of a job it belongs to (``_JobLog.stopped_by``, an end
        logged before the job's running entry included: it ends no run, but a passing record of a job
        some entry says was stopped is not credited)."""
        if job_term is not None and job_term.payload.get("state") in _STOPPED:
            return job_term
        return next((stopped_by[k] for k in job_keys_of(e, named_jobs) if k in stopped_by), None)

    # an engine launch the operator stopped (``operator_stopped``): judged by the ends of the jobs it
    # belongs to, as ``killed-run`` finds them (``job_keys_of``), before any rule or [acceptance.against]
    # reads it
    for launch in trusted:
        if launch.kind == "engine.launch" and launch.derived_ is not None:
            ends = [terminal.get(k) for k in job_keys_of(launch, named_jobs_of(launch))]
            launch.derived_["operator_stopped"] = _operator_stopped(launch, ends)

    def withdrawn(e: Evidence) -> bool:
        """Does a rule of the log's own record withdraw the harness result ``e`` — not only withhold its
        credit (``withholds_only``): a supersession in force (``superseded``; ``self-superseded``
        withholds), or its job's end (``after-job-terminal``, where the log and its own time both put it
        after the end)?"""
        s = superseded_by.get(e.id)
        if s is not None:
            return not withholds_only(
                Rule.SELF_SUPERSEDED if self_superseded(s, who(e.signer), who) else Rule.SUPERSEDED
            )
        if foreign_job(e, named := named_jobs_of(e)) is not None:
            return False  # `job-of-other-campaign` decides it first, and withholds credit
        t = job_term_of(e, named)
        if t is None or not _after_end(e, t, ended_at[t.id]):
            return False
        open_job = jobs.open_at(e.subject.get("campaign"), e.seq)
        return not withholds_only(
            Rule.AFTER_JOB_TERMINAL, _after_end_withholds_only(e, t, ended_at[t.id], open_job)
        )

    # a withdrawn harness result is not evidence of the subject at all: no newer run of another
    newest_runs = _mark_newer_runs(
        trusted,
        {e.id for e in trusted if e.kind == "gate.result" and withdrawn(e)},
        _held_back,
        ran_again=_ran_again_in(trusted, jobs, superseded_by),
    )
    age_limits: dict[str, tuple[Any, timedelta | None]] = {}  # per kind: freshness bound, as a timedelta
    for e in trusted:
        if e.id in superseded_by:
            s = superseded_by[e.id]
            if (
                self_superseded(s, who(e.signer), who) and e.kind != "supersession"
            ):  # (withdrawing a withdrawal restores)
                # a key does not withdraw its own record's failure: the supersession takes credit away,
                # and what the entry shows against the engine stands until another key supersedes it
                reject(
                    e,
                    Rule.SELF_SUPERSEDED,
                    f"{taken_out_text(Rule.SELF_SUPERSEDED, s)} — "
                    "a key withdraws no failure of its own record (another key's supersession does)",
                    s.id,
                )
                continue
            reject(e, Rule.SUPERSEDED, taken_out_text(Rule.SUPERSEDED, s), s.id)
            continue
        if e.kind in HOST_SCOPED_KINDS and _host_of(e) not in hosts:
            reject(e, Rule.OTHER_HOST, _other_host(e, hosts, snap.subject))
            continue
        if e.id in refused:
            by = refused[e.id]
            reject(
                e,
                Rule.REJECTED_BY_ACCEPTANCE,
                f"{e.kind} rejected by {by.signer_name}: {by.payload.get('reason', '')}",
                by.id,
            )
            continue
        if e.kind in ACTING_KINDS:
            continue
        decisions = acceptances.get(e.id)
        reviewed = reviews.get(e.id)
        review_list = sorted(reviewed, key=lambda x: x.seq) if reviewed else []
        # the acceptance that decides it: one that is not independent (by its own key, or by a key that
        # signed a review PASS of it) decides nothing in its favour, whatever the order they were logged in
        latest_acc = deciding_acceptance(e, decisions, who, review_list) if decisions else None
        if latest_acc is not None and latest_acc.payload.get("decision") == "rejected":
            reject(
                e,
                Rule.REJECTED_BY_ACCEPTANCE,
                f"rejected by {latest_acc.signer_name}: {latest_acc.payload.get('reason', '')}",
                latest_acc.id,
            )
            continue
        job_view: dict[str, Any] | None = None
        if e.kind != "job":
            named_jobs = named_jobs_of(e)
            foreign = foreign_job(e, named_jobs)
            if foreign is not None:
                reject(
                    e,
                    Rule.JOB_OF_OTHER_CAMPAIGN,
                    f"names campaign {e.subject.get('campaign')!r} but refs as its job {foreign.id[:16]} "
                    f"(job {foreign.payload.get('job_id')}) of campaign {foreign.subject.get('campaign')!r}: "
                    "its record contradicts itself",
                    foreign.id,
                )
                continue
            job_term = job_term_of(e, named_jobs)
            if job_term is not None:
                job_view = job_term.view()
                p = job_term.payload
                job_end = ended_at[job_term.id]
                if _after_end(e, job_term, job_end):
                    ended = p.get("ended_at")
                    said = (
                        f"at {ended}"
                        if ended
                        else f"(records no ended_at; logged before this entry: seq {job_term.seq} < {e.seq})"
                    )
                    claimed_after = _after_end_claimed(e, job_end)
                    if claimed_after:
                        why = f"collected {_observed(e)}, after job"
                    else:
                        why = (
                            f"logged {e.logged_at} (seq {e.seq}), after the terminal entry (seq "
                            f"{job_term.seq}) of job"
                        )
                    claim = (
                        ""
                        if claimed_after
                        else f"; it claims collected_at {e.collected_at}, within the job: a claimed time "
                        "gives no credit to output the log took after the job ended"
                    )
                    # logged after the terminal entry and claiming a time after the end too, the record
                    # agrees it came after the end: withdrawn — unless the log took it while a job of its
                    # campaign ran, or it is an engine that started after the end (``_not_that_jobs_output``).
                    # Only one of them says so — the log (a claimed time inside the job) or the job's claimed
                    # ended_at (logged before its terminal entry) — and its credit is withheld, but what the
                    # entry shows against the engine stands
                    open_job = jobs.open_at(e.subject.get("campaign"), e.seq)
                    other = _not_that_jobs_output(e, job_term, open_job)
                    reject(
                        e,
                        Rule.AFTER_JOB_TERMINAL,
                        f"produced after job terminal time: {why} "
                        f"{p.get('job_id')} ended {_ended_as(p)} {said}{claim}{other or ''}",
                        job_term.id,
                        credit_only=_after_end_withholds_only(e, job_term, job_end, open_job),
                    )
                    continue
            elif e.kind in output_kinds and e.in_subject and e.derived["job"] is None:
                # output the log took when no job of its campaign was open, after one had ended: it belongs
                # to none of them (no ended job's end withdraws it), and output of no job is not credited —
                # a failure it shows counts against the engine
                gone = jobs.ended_before(e.subject.get("campaign"), e.seq)
                if gone is not None:
                    gp = gone.payload
                    reject(
                        e,
                        Rule.AFTER_JOB_TERMINAL,
                        f"logged {e.logged_at} (seq {e.seq}) when no job of campaign "
                        f"{e.subject.get('campaign')!r} was open: after job {gp.get('job_id')} ended "
                        f"{_ended_as(gp)} (terminal entry {gone.id[:16]}, seq {gone.seq}) and before any "
                        "other started — output of no job is not credited",
                        gone.id,
                        credit_only=True,
                    )
                    continue
            stop = stop_of(e, named_jobs, job_term)
            if stop is not None and e.kind in policy.passing and _passing(policy, e, params):
                sp = stop.payload
                if stop.id in unmatched_ids:
                    also = (
                        f" (entry {stop.id[:16]}, logged before every running entry of the job: it ends "
                        "no run, but a job an entry says was stopped is not credited as passing)"
                    )
                elif job_term is not None and stop is not job_term and _job_key(stop) == _job_key(job_term):
                    also = (
                        f" (its first terminal entry says {job_term.payload.get('state')}; a later one, "
                        f"{stop.id[:16]}, says {sp.get('state')})"
                    )
                else:
                    also = ""
                reject(
                    e,
                    Rule.KILLED_RUN,
                    f"from job {sp.get('job_id')} that was {_ended_as(sp)}{also}: not credited as passing",
                    stop.id,
                )
                continue
        art = _artifact_problem(e, store, acc.artifacts, art_cache) if e.artifacts else None
        if art is not None:
            reject(e, *art)
            continue
        if e.kind in bindings_kinds and acc.bindings is not None:
            problem_b = _bindings_problem(e, acc.bindings.keys, acc.bindings.require_manifest, manifest)
            if problem_b is not None:
                reject(
                    e, Rule.BINDINGS_MISMATCH, problem_b, manifest_sources[0] if manifest_sources else None
                )
                continue
        ran_on = (
            next((off_manifest[a] for a in (e.derived.get("attempt"), e.derived.get("attempt_logged"))
                  if a in off_manifest), None)
            if e.kind in ("gate.result", "health.probe") and off_manifest
            else None
        )  # fmt: skip
        if ran_on is not None:
            launch, problem_b = ran_on
            reject(
                e,
                Rule.BINDINGS_MISMATCH,
                f"ran during attempt {launch.derived.get('attempt')} (engine launch {launch.id[:16]}), which "
                f"is not credited — {problem_b} — so it measured that engine, not the approved one",
                launch.id,
            )
            continue
        # CEL sees the entry only where a rule or requirement names its kind; the context (the entry's
        # full view) is built only when needed: a rule that reads a few plain fields of `e` is decided
        # once per distinct value of those fields (`rule_memo`) — a 10,000-probe campaign is a handful
        # of CEL calls, not 10,000.
        context = _LazyContext(e, params, manifest, job_view)

        hit = False
        for rule, cond, keyer in rules_by_kind.get(e.kind, ()):
            key = keyer(e)
            holds = rule_memo.get(key) if key is not None else None
            if holds is None:
                holds = cond.holds(context())
                if key is not None:
                    rule_memo[key] = holds
            if not holds:
                continue
            ctx = context()
            compared = policy.rule_differences.get(rule_key(rule))
            detail = render(rule.detail, ctx)
            if compared is not None:
                differs = _differences(compared, ctx)
                if not differs:
                    continue
                detail += ": " + "; ".join(differs)
            credit_only = rule.withholds == "credit"
            against = policy.rule_against.get(rule_key(rule))
            reject(e, rule.name, detail, credit_only=credit_only, against=against)
            hit = True
            break
        if hit:
            continue
        # after the policy's [[rules]] (a run not run, cut by a stop, of another spec or model, a probe or run
        # before any launch or after its launch's end: those say so first): a harness result that measured,
        # or a probe credited to a campaign attempt that asked, another endpoint than its launch served at
        elsewhere = _endpoint_problem(e, launch_at)
        if elsewhere is not None:
            reject(e, *elsewhere)
            continue
        made = produced_at(e, jobs_of(e)) if reviewed and acc.repaired_commit_required else (None, None)
        problem_r = (
            _review_problem(e, review_list, acc.repaired_commit_required, who, made) if reviewed else None
        )
        if problem_r is not None:
            reject(e, Rule.REVIEW_FAIL, problem_r[0], problem_r[1])
            continue
        # a review and an acceptance are asked of what would be credited as passing: a failed run stays
        # evidence against the engine without them (a newer reviewed pass never hides it)
        as_passing = e.kind not in review_kinds and e.kind not in acceptance_kinds
        as_passing = as_passing or _passing(policy, e, params)
        if as_passing and e.kind in review_kinds and _required(policy.review_required, e, context()):
            # an independent review: a PASS signed by the key that signed the evidence reviewed nothing
            passes = [
                r for r in review_list if r.payload.get("result") == "PASS" and who(r.signer) != who(e.signer)
            ]
            if not passes:
                own = [r for r in review_list if r.payload.get("result") == "PASS"]
                why = (
                    f"; its review PASS {own[-1].id[:16]} is signed by the key that signed it "
                    f"({e.signer_name}): not an independent review"
                    if own
                    else ""
                )
                reject(
                    e, Rule.REVIEW_MISSING, f"{e.kind} needs a review PASS (ref reviews) and has none{why}"
                )
                continue
            unbound = _pass_unbound(e, passes[-1], made) if acc.repaired_commit_required else None
            if unbound is not None:
                reject(e, Rule.REVIEW_MISSING, unbound, passes[-1].id)
                continue
            support.setdefault(e.id, []).append(passes[-1].id)
        if as_passing and e.kind in acceptance_kinds and _required(policy.acceptance_required, e, context()):
            if latest_acc is None or latest_acc.payload.get("decision") != "accepted":
                # none that is independent: the latest one ``deciding_acceptance`` left out is named
                left_out = [
                    (a, reason)
                    for a in decisions or []
                    if (reason := not_independent(a, e, who, review_list)) is not None
                ]
                if left_out:
                    a, (_, by_pass) = left_out[-1]
                    whose = (
                        f"the key that signed it ({e.signer_name})"
                        if by_pass is None
                        else f"the key that signed its review PASS {by_pass.id[:16]} ({a.signer_name})"
                    )
                    reject(
                        e,
                        Rule.ACCEPTANCE_MISSING,
                        f"{e.kind} needs an acceptance (ref subject) and has none; its acceptance "
                        f"{a.id[:16]} is signed by {whose}: not an independent decision",
                        a.id,
                    )
                else:
                    reject(
                        e, Rule.ACCEPTANCE_MISSING, f"{e.kind} needs an acceptance (ref subject) and has none"
                    )
                continue
            support.setdefault(e.id, []).append(latest_acc.id)
        bound = age_limits.get(e.kind)
        if bound is None:
            max_age = freshness.get(e.kind, freshness.get("*"))
            bound = age_limits[e.kind] = (
                max_age,
                timedelta(seconds=max_age) if max_age is not None else None,
            )
        max_age, limit = bound
        if max_age is not None and limit is not None:
            # observed: collected_at, bounded by the log time (a claimed later time never keeps it fresh)
            if ref - e.observed_time > limit:
                reject(
                    e,
                    Rule.STALE,
                    f"collected {_observed(e)}, more than {_human(max_age)} before the "
                    f"reference time {snap.reference_time}",
                )
                lo = hi = ref  # the reason names the reference time: it holds at this one alone
                continue
            with contextlib.suppress(OverflowError):  # else fresh at every time a datetime holds
                hi = min(hi, e.observed_time + limit)  # fresh while ref - observed <= limit
        host = _host_of(e)
        if e.kind in post_reset and host in resets and e.observed_time < resets[host][0]:
            t, kid = resets[host]
            reject(
                e,
                Rule.BEFORE_GPU_RESET,
                f"collected {_observed(e)}, before the last GPU reset on {host} at {_fmt(t)}",
                kid,
            )
            continue
        if job_view is not None:
            support.setdefault(e.id, []).append(job_view["id"])

    held = _held_back_runs(newest_runs, rejected)
    if any(run_id not in _held_back for run_id in held):
        # a newest run stands only where every newest run of its measurement holds: judged again with the
        # ones whose fellow newest run is not credited marked as having a newer run (each round only adds)
        return filter_evidence(
            snap, policy, store, bad_signatures=bad_signatures, _held_back={**held, **_held_back}
        )
    accepted = [e for e in trusted if e.id not in rejected and e.kind not in ACTING_KINDS]
    _mark_newest([e for e in trusted if e.id not in rejected or e.id in kept])
    ordered = sorted(rejected.values(), key=lambda r: r.entry.seq)
    # the running entries that a failed gate.result refs as its job: the failure of that job is on record
    failed_results = {
        j
        for t in trusted
        if t.kind == "gate.result"
        and t.payload.get("status") == "failed"
        # a result withdrawn by another key's supersession records no failure any more
        and (t.id not in superseded_by or self_superseded(superseded_by[t.id], who(t.signer), who))
        for j in t.refs("job")
    }
    unended, (lo, hi) = _unjudged_jobs(jobs, failed_results, campaign, ref, (lo, hi))
    unended += _misspelled_reads(manifest_sources, trusted, manifest_keys_read(policy), bind_keys)
    return Filtered(
        accepted=accepted,
        rejected=ordered,
        manifest=manifest,
        manifest_sources=manifest_sources,
        support=support,
        reference_time=ref,
        artifact_checks=art_cache.checked,
        window=(lo, hi),
        against=[e for e in trusted if e.id in kept],
        unjudged_jobs=unended,
    )


def _endpoint_problem(e: Evidence, launch_at: Mapping[int, Evidence]) -> tuple[Rule, str, str | None] | None:
    """Why ``e`` — a harness result (semantic, benchmark) or a health probe — is not shown to have measured
    the engine of the launch it is attributed to: (rule, reason, the launch's id), or None where it is, or
    where ``e`` is neither. Rule ``harness-other-endpoint`` for a harness result, ``probe-other-endpoint``
    for a probe; both only withhold credit (``CREDIT_ONLY``): a failed run or probe still counts against
    the engine (``[acceptance.against]``). The launch is read from the log, never from the entry's claim:
    that of each attempt the entry is attributed to, by its claimed time and by when the log took it
    (``e.derived.attempt``, ``attempt_logged``; ``launch_at``: attempt → launch). An entry of no attempt is
    not judged here: a probe or result taken when no launch of the campaign had started is
    ``before-launch``'s (and a probe of a running service that no campaign launched — the routing gate's
    production probes — has no attempt at all). The endpoint the launch's engine served at is the one the
    collector started it at and probed it at, the base URL its command was filled with
    (``details.base_url``, recorded by the collector with the launch). A harness run's is the base URL it
    measured (``bounds.endpoint``, recorded by the harness), compared as ``names.endpoint_key`` reads
    both — strictly: ``127.0.0.1``, ``localhost`` and a ``0.0.0.0`` bind are different hosts to the
    record. A probe's is the URL it asked (``endpoint``: the base URL it was given and its check's path),
    which must be of that base URL (``names.endpoint_under``: the same scheme, host and port, the base
    URL's path a prefix of its path). An entry that records no endpoint, or one that is no http(s) URL (a
    bare ``/health`` names no server), measured a server that cannot be told; a launch that records none
    served at one that cannot be told: neither credits the entry (fail closed). ``ledger collect run``
    hands its harnesses and probes the base URL its launch records, so its own entries always match."""
    if e.kind == "gate.result" and e.payload.get("gate") in HARNESS_GATES:
        rule = Rule.HARNESS_OTHER_ENDPOINT
        bounds = e.payload.get("bounds")
        claimed = bounds.get("endpoint") if isinstance(bounds, dict) else None
        field_name = "bounds.endpoint"
        what = f"the {e.payload.get('gate')} run"
        did = "measured"
    elif e.kind == "health.probe":
        rule = Rule.PROBE_OTHER_ENDPOINT
        claimed = e.payload.get("endpoint")
        field_name = "endpoint"
        what = f"the {e.payload.get('check')} probe"
        did = "asked"
    else:
        return None
    attempts = sorted(
        {a for a in (e.derived.get("attempt"), e.derived.get("attempt_logged")) if type(a) is int and a > 0}
    )
    if not attempts:
        return None
    measured = endpoint_key(claimed)
    form = "base URL" if rule is Rule.HARNESS_OTHER_ENDPOINT else "URL"
    said = "no endpoint" if claimed is None else f"endpoint {claimed!r}, no http(s) {form},"
    for attempt in attempts:
        launch = launch_at.get(attempt)
        if launch is None:  # (every attempt is a launch's: ``_derive``) none to compare with credits nothing
            return rule, f"{what} is attributed to attempt {attempt}, of which the log has no launch", None
        details = launch.payload.get("details")
        served = details.get("base_url") if isinstance(details, dict) else None
        served_key = endpoint_key(served)
        engine = f"the engine of attempt {attempt} (engine launch {launch.id[:12]})"
        if served_key is None:
            recorded = "no endpoint" if served is None else f"endpoint {served!r}, no http(s) base URL,"
            run = f"at {claimed}" if measured is not None else f"recording {said.rstrip(',')}"
            return (
                rule,
                f"{engine} records {recorded} where it served (details.base_url): {what} {run} "
                f"cannot be shown to have {did} it",
                launch.id,
            )
        if measured is None:
            return (
                rule,
                f"{what} records {said} ({field_name}): which server it {did} cannot be told; "
                f"{engine} served at {served}",
                launch.id,
            )
        if rule is Rule.HARNESS_OTHER_ENDPOINT:
            at_launch = measured == served_key
        else:
            at_launch = endpoint_under(claimed, served)
        if not at_launch:
            spelled = ""
            if endpoint_under_but_for_host(claimed, served):
                redo = "run the harness" if rule is Rule.HARNESS_OTHER_ENDPOINT else "probe"
                spelled = (
                    " (endpoints compare as recorded: 127.0.0.1, localhost and 0.0.0.0 are different hosts — "
                    f"{redo} at the launch's base URL)"
                )
            return (
                rule,
                f"{what} {did} {claimed} ({field_name}), not {served}, where {engine} served "
                f"(details.base_url): it {did} another server{spelled}",
                launch.id,
            )
    return None


def _unjudged_jobs(
    jobs: _JobLog,
    failed_results: set[str],
    campaign: str | None,
    ref: datetime,
    window: tuple[datetime, datetime],
) -> tuple[list[dict[str, str]], tuple[datetime, datetime]]:
    """The jobs of ``campaign`` whose run no gate judges, in log order, as the job log reads them
    (``_job_log``: the one reading of which terminal entry ends which job), each as ``unjudged`` names it:
    ``entry`` (its running entry; for an unmatched end, that entry), ``kind`` ``job``, ``job_id``,
    ``detail``. The verdict cannot be QUALIFIED beside them:

    * a job a running entry started and no terminal entry ended since (a job started again after its end is
      open again): its run's outcome cannot be told — still running, or its collector was killed before it
      recorded how the run ended (its engine launch is logged when the run ends). When it started is the
      log's time, not the entry's claim; whether its lease ran out by the reference time narrows ``window``
      (the detail says which);
    * a job whose end says ``failed`` while no failed ``gate.result`` refs it as its job (``failed_results``:
      the running entries such results ref): the failure its end records — a collector that stopped mid-run,
      a failure entered by hand — is judged by no gate;
    * a job started again under its job_id after it ended: a job ends once (its first terminal entry), so
      what a later run produced would be judged as output after that end;
    * a terminal entry logged before every running entry of its job (``_JobLog.unmatched``): it ends no run
      and withdraws no output logged after it — which run it ended, and how, cannot be told.

    Only this campaign's job entries start or end its jobs: another campaign's under the same job_id ends
    some other job.
    """
    lo, hi = window
    restarted = [(k[1], j, end) for k, j, end in jobs.restarted if k[0] == campaign]
    failed = [(k[1], j, end) for k, j, end in jobs.failed if k[0] == campaign and j.id not in failed_results]
    opened = {k[1]: j for k, j in jobs.open.items() if k[0] == campaign}
    unmatched = [u for u in jobs.unmatched if u.subject.get("campaign") == campaign]
    out: list[dict[str, str]] = []
    for job_id, j, end in restarted:
        out.append(
            {
                "entry": j.id,
                "kind": "job",
                "gate": "",
                "job_id": job_id,
                "detail": f"job {job_id} was started again (running entry {j.id[:16]}) after it ended "
                f"{end.payload.get('state')} (entry {end.id[:16]}): a job ends once, so which run each of "
                "its entries belongs to — and what a later run showed — cannot be told (each run is a job "
                "of its own: a new job_id)",
            }
        )
    for job_id, j, end in failed:
        why = end.payload.get("reason")
        out.append(
            {
                "entry": j.id,
                "kind": "job",
                "gate": "",
                "job_id": job_id,
                "detail": f"job {job_id} (running entry {j.id[:16]}) ended failed"
                + (f" ({why})" if why else " (no reason recorded)")
                + f" by entry {end.id[:16]}, and no failed gate.result refs it as its job: no gate "
                "judges the failure its end records — if it says nothing about the engine, supersede the "
                "job's running entry with the reason (the job is then withdrawn, its end with it)",
            }
        )
    for u in unmatched:
        job_id = str(u.payload.get("job_id"))
        later = (campaign, job_id) in jobs.started
        out.append(
            {
                "entry": u.id,
                "kind": "job",
                "gate": "",
                "job_id": job_id,
                "detail": f"job entry {u.id[:16]} (logged {_fmt(u.logged_time)}) says job {job_id} ended "
                f"{u.payload.get('state')}, but no running entry of that job was logged before it"
                + (
                    " (its running entry is logged after its end)"
                    if later
                    else " (no running entry of the campaign names that job_id: a misspelled job_id?)"
                )
                + ": it ends no run, so which run it ended, and how, cannot be told — record the end "
                "again after the job's running entry, or supersede this entry with the reason",
            }
        )
    for job_id, j in opened.items():
        started = j.observed_time
        head = (
            f"job {job_id} (running entry {j.id[:16]}, logged {_fmt(started)}) has no terminal entry: "
            "what its run showed cannot be told"
        )
        lease = j.payload.get("lease_seconds")
        if not isinstance(lease, (int, float)) or isinstance(lease, bool):
            why = (
                "; it records no lease, so whether it still runs or its collector was killed cannot be "
                "told either"
            )
        else:
            try:
                until = started + timedelta(seconds=float(lease))
            except OverflowError:  # a lease stored before leases were bounded: no end can be computed
                until = _LATEST
            if ref >= until:
                lo = max(lo, until)
                why = (
                    f"; its lease of {float(lease):g} s ran out at {_fmt(until)}, so its collector stopped "
                    "without recording how the run ended (killed?)"
                )
            else:
                hi = min(hi, until - _TICK)
                why = f"; it may still run (its lease runs to {_fmt(until)}): the verdict waits for its end"
        out.append(
            {
                "entry": j.id,
                "kind": "job",
                "gate": "",
                "job_id": job_id,
                "detail": head
                + why
                + " — record its end (`ledger record job` with its job_id, state killed or failed and the "
                "reason), or supersede its running entry with the reason",
            }
        )
    return out, (lo, hi)


class _LazyContext:
    """The CEL context of one entry (its full view), built on first use."""

    __slots__ = ("built", "e", "job", "manifest", "params")

    def __init__(self, e: Evidence, params: Any, manifest: Any, job: dict[str, Any] | None) -> None:
        self.e, self.params, self.manifest, self.job = e, params, manifest, job
        self.built: dict[str, Any] | None = None

    def __call__(self) -> dict[str, Any]:
        if self.built is None:
            self.built = {
                "e": self.e.view(),
                "params": self.params,
                "manifest": self.manifest,
                "job": self.job,
            }
        return self.built


def _passing(policy: LoadedPolicy, e: Evidence, params: Any) -> bool:
    """Would ``e`` be credited as passing (``[acceptance.passing]``)? A kind the table does not name is."""
    cond = policy.passing.get(e.kind)
    return cond is None or cond.holds({"e": e.view(), "params": params})


KEPT_AGAINST = (
    "; not credited, and still evidence against the engine: a failure is withdrawn only by a supersession, "
    "with its reason"
)


def _counts_against(
    policy: LoadedPolicy,
    e: Evidence,
    params: Any,
    against: Condition | None,
    memo: dict[tuple[Any, ...], bool],
) -> bool:
    """Does ``e`` show a failure a rule withholding credit must not drop: ``against`` (a rule's own, else
    the kind's ``[acceptance.against]``) holds? A kind with neither is not kept. What is kept can only fail
    a gate (the verdict judges it apart from the credited evidence), so a kept entry never gives credit."""
    cond = against if against is not None else policy.against.get(e.kind)
    if cond is None:
        return False
    if e.kind == "health.probe" and e.derived.get("refusal") is None:
        # a probe whose facts another reader derived from the defaults (the routing gate's): its refusal
        # (``e.derived.refusal``, a pure function of its record and the params) judged with the params this
        # condition is judged with — one judgement, never the default's "none"
        # (a context refusal resting on the record alone needs its launch, ``_refusals``: none here)
        shown = refusal(e.payload, params if isinstance(params, Mapping) else {}, launched=None)
        if shown is not None:
            e.set_derived({**e.derived, "refusal": shown})
    reads = _e_reads(cond.source)
    key = _memo_key("against:" + cond.source, reads, e) if reads is not None else None
    if key is not None and key in memo:
        return memo[key]
    holds = cond.holds({"e": e.view(), "params": params})
    if key is not None:
        memo[key] = holds
    return holds


def _required(reqs: tuple[Any, ...], e: Evidence, ctx: Mapping[str, Any]) -> bool:
    return any(e.kind in req.kinds and (cond is None or cond.holds(ctx)) for req, cond in reqs)


_HEX = re.compile(r"[0-9a-f]+")
_ABBREV_AT_LEAST = 7  # git's shortest abbreviation of a commit hash


def _commit_text(c: Any) -> str | None:
    """A commit as commits compare: its text, stripped, lower case (git's hashes are case-insensitive hex);
    None for no commit (absent, empty, blank, not a text)."""
    return (c.strip().lower() or None) if isinstance(c, str) else None


def same_commit(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` name one commit, as git compares them: hex case-insensitively, and an
    abbreviation of at least 7 hex digits is the full hash it prefixes. A commit not named is no commit."""
    x, y = _commit_text(a), _commit_text(b)
    if x is None or y is None:
        return False
    if x == y:
        return True
    short, full = sorted((x, y), key=len)
    return (
        len(short) >= _ABBREV_AT_LEAST
        and bool(_HEX.fullmatch(x) and _HEX.fullmatch(y))
        and full.startswith(short)
    )


def _may_be_commit(failed: str, c: Any) -> bool:
    """Whether the FAILed commit ``failed`` may be ``c``, failing closed: as ``same_commit``, and also where
    ``failed`` is too short an abbreviation of it, or names it otherwise than by its hash (a tag, a branch:
    which commit cannot be told)."""
    x, y = _commit_text(failed), _commit_text(c)
    if x is None or y is None:
        return False
    if not _HEX.fullmatch(x):
        return True
    return same_commit(x, y) or (bool(_HEX.fullmatch(y)) and (y.startswith(x) or x.startswith(y)))


# The job's approved spec binding that names the code commit the collector ran at (collectors/campaign.py
# binds it in ``spec.bindings``): the commit a review PASS of the job's results must name
COMMIT_BINDING = "commit"
# The job's spec field (beside its bindings: a binding is a text, and this may be null) that names the commit
# the collector's own code ran at where the job binds a commit its campaign states (``[campaign] commit``,
# the code under review) and the collector runs from a git checkout: its HEAD, or null where that checkout
# is not its HEAD (uncommitted changes) — results of code no commit names, which no PASS credits
# (``produced_at``; audit 101 f2)
COLLECTOR_COMMIT = "collector_commit"
# The binding of how the engine is launched (collectors/campaign.py ``engine_config_digest``), in the job's
# approved spec and every launch: a launch of the campaign that records another is a conflict of the
# campaign (``launch_conflict``), not only its own lost credit
ENGINE_CONFIG_BINDING = "engine_config"


def produced_at(e: Evidence, jobs: Iterable[Evidence]) -> tuple[str | None, str | None]:
    """(the commit ``e`` was produced at, why it cannot be told): its subject's ``commit`` (an entry recorded
    by hand says so) and the ``spec.bindings.commit`` of each of its ``jobs`` (the collector binds the code
    commit it ran at there; a job that binds none says nothing of the code). Where those that name one
    name one commit (``same_commit``) it is that one, in its fullest spelling; where none names any, (None,
    None); where two name different commits, or one names a commit by no text, which code produced it
    cannot be told: (None, the reason) — never the one a review happens to name. So too where a job's
    collector ran code no commit names (``_collector_ran_no_commit``: the commit it binds is the one its
    campaign states, and its own checkout was not its HEAD): a PASS of the stated commit reviewed the code
    under review, not the harness that scored it."""
    named: list[tuple[str, str]] = []
    subject_commit = e.subject.get("commit")
    if subject_commit is not None:
        if _commit_text(subject_commit) is None:
            return None, f"its subject's commit {subject_commit!r} names no commit"
        named.append(("its subject", str(_commit_text(subject_commit))))
    for j in jobs:
        spec = j.payload.get("spec")
        where = f"job {j.payload.get('job_id')} ({j.id[:16]})"
        if (ran := _collector_ran_no_commit(spec)) is not None:
            return None, f"{where} {ran}"
        bindings = spec.get("bindings") if isinstance(spec, dict) else None
        if not isinstance(bindings, dict) or bindings.get(COMMIT_BINDING) is None:
            continue  # no approved spec, or one that binds no commit: the job says nothing of the code
        bound = bindings[COMMIT_BINDING]
        if _commit_text(bound) is None:
            return None, f"{where} binds commit {bound!r}, which names no commit"
        named.append((where, str(_commit_text(bound))))
    if not named:
        return None, None
    for w, c in named[1:]:
        if not same_commit(c, named[0][1]):
            return None, f"{named[0][0]} names commit {named[0][1]}, {w} commit {c}"
    return max((c for _, c in named), key=len), None


def _collector_ran_no_commit(spec: Any) -> str | None:
    """Why a job's collector ran code no commit names, by what its approved ``spec`` records beside the
    commit it binds (``COLLECTOR_COMMIT``, written by ``collectors/campaign.py`` where the campaign states
    the commit under review and the collector runs from a git checkout), or None: it records none (the
    commit bound is the collector's own, or the collector runs from no checkout), or a full commit (the
    collector's own code, recorded; the commit under review may be another repository's). A null — the
    checkout was not its HEAD: uncommitted changes to the harness that scored the results, say — or anything
    but a full hex commit names no commit (fail closed)."""
    if not isinstance(spec, dict) or COLLECTOR_COMMIT not in spec:
        return None
    ran = _commit_text(spec[COLLECTOR_COMMIT])
    if ran is not None and _HEX.fullmatch(ran) and len(ran) in (40, 64):
        return None
    return (
        f"ran its collector from a checkout that is no commit (spec.{COLLECTOR_COMMIT} "
        f"{spec[COLLECTOR_COMMIT]!r}: not its HEAD, with uncommitted changes): the code that produced its "
        "results is no commit a review names, whatever commit it binds"
    )


def _failed_commit(fail: Evidence, own: str | None) -> str | None:
    """The commit review FAIL ``fail`` failed: the one it names, else ``own``, the commit the reviewed entry
    was produced at (``produced_at``) — a FAIL that names no commit FAILed the reviewed entry as it stands."""
    return _commit_text(fail.payload.get("commit")) or _commit_text(own)


def _review_problem(
    e: Evidence,
    review_list: list[Evidence],
    repaired_required: bool,
    who: Callable[[str], str],
    made: tuple[str | None, str | None] = (None, None),
) -> tuple[str, str] | None:
    """Which PASS lifts which FAIL (docs/POLICY.md): the evidence is blocked by its latest review FAIL
    unless an independent PASS — signed by another signer than the evidence's (``who``: a key and the keys
    rotated to it are one signer); one by the evidence's own key reviewed nothing, and lifts nothing —
    logged after that FAIL names a commit, that commit is not one any FAIL failed (the commit it
    names, else the reviewed entry's own; compared as git does, ``same_commit``, and failing closed on an
    abbreviation too short to tell, ``_may_be_commit``), and it is the commit the reviewed evidence itself was
    produced at (its subject's ``commit``) — a PASS that names the repaired commit but is attached to the
    failed commit's evidence lifts nothing: the repaired commit's evidence is a new entry with its own
    review. ``made``: the commit ``e`` was produced at and why it cannot be told (``produced_at``)."""
    own, unknown = made
    fails = [r for r in review_list if r.payload.get("result") == "FAIL"]
    if not fails:
        return None
    last_fail = fails[-1]
    fail_commit = last_fail.payload.get("commit")
    signer = who(e.signer)
    later_passes = [r for r in review_list if r.seq > last_fail.seq and r.payload.get("result") == "PASS"]
    later = [r for r in later_passes if who(r.signer) != signer]
    if not later:
        own_later = (
            f" by another key than the one that signed it (review PASS {later_passes[-1].id[:16]} is signed "
            f"by its own key, {e.signer_name}: not an independent review, it lifts nothing)"
            if later_passes
            else ""
        )
        return (
            f"review {last_fail.id[:16]} by {last_fail.signer_name} FAILed it"
            + (f" at commit {fail_commit}" if fail_commit else "")
            + "; no later review PASS"
            + own_later,
            last_fail.id,
        )
    last = later[-1]
    commit = last.payload.get("commit")
    if not repaired_required:
        return None
    failed_by = next((r for r in fails if _may_be_commit(_failed_commit(r, own) or "", commit)), None)
    # the evidence's own commit may be a FAILed one (an abbreviation both prefix): then no PASS can show
    # it was produced at the repaired commit — rules 3 and 4 together fail closed
    own_failed = next((r for r in fails if own and _may_be_commit(_failed_commit(r, own) or "", own)), None)
    if unknown is not None:
        why = (
            f"names commit {commit}, but which commit the evidence it reviews was produced at cannot be told "
            f"({unknown})"
        )
    elif not commit:
        why = "names no commit; a PASS on the repaired commit is needed"
    elif failed_by is not None:
        named = _commit_text(failed_by.payload.get("commit"))
        how = (
            ""
            if named == _commit_text(commit)
            else f" (review {failed_by.id[:16]} FAILed it as {named})"
            if named
            else f" (review {failed_by.id[:16]} names no commit: it FAILed the commit this evidence was "
            "produced at)"
        )
        why = f"is on commit {commit}, which FAILed review{how}; a PASS on the repaired commit is needed"
    elif not same_commit(own, commit):
        why = (
            f"names commit {commit} but is attached to evidence of "
            + (f"commit {own}" if own else "no named commit")
            + "; the repaired commit's evidence needs its own review"
        )
    elif own_failed is not None:
        why = (
            f"names commit {commit}, but the evidence it reviews was produced at commit {own}, which may be "
            f"the commit review {own_failed.id[:16]} FAILed ({_failed_commit(own_failed, own)}): "
            "which commit it is cannot be told, so the FAIL stands (the repaired commit's evidence needs its "
            "own entry, naming its full commit)"
        )
    else:
        return None
    return f"review PASS {last.id[:16]} {why}", last.id


def _pass_unbound(
    e: Evidence, last: Evidence, made: tuple[str | None, str | None] = (None, None)
) -> str | None:
    """Why the latest review PASS ``last`` of ``e`` does not credit it, or None: a PASS says which commit
    it reviewed, and it must be the commit the evidence was produced at (``made``, from ``produced_at``: its
    subject's ``commit``, its job's ``spec.bindings.commit``; compared by ``same_commit``, as git compares
    them) — a PASS of another commit reviewed other code, and where the evidence names no commit it was
    produced at, or names two, no PASS can show it reviewed that code (fail closed)."""
    commit = last.payload.get("commit")
    own, unknown = made
    if not commit:
        return f"{e.kind} needs a review PASS naming the commit it reviewed; PASS {last.id[:16]} names none"
    if unknown is not None:
        return (
            f"{e.kind}: which commit it was produced at cannot be told ({unknown}); its review PASS "
            f"{last.id[:16]} names commit {commit}, so no review PASS of this evidence's commit"
        )
    if own is None:
        return (
            f"{e.kind} names no commit it was produced at (neither its subject's commit nor its job's "
            f"spec.bindings.{COMMIT_BINDING}); its review PASS {last.id[:16]} names commit {commit}, but "
            "no PASS can show it reviewed the code that produced it"
        )
    if not same_commit(commit, own):
        return (
            f"{e.kind} was produced at commit {own}; its review PASS {last.id[:16]} names commit {commit}, "
            "so no review PASS of this evidence's commit"
        )
    return None


def _host_of(e: Evidence) -> str | None:
    """The host an entry names, as hosts compare (``host_key``: ``GPU-BOX-1`` is ``gpu-box-1``); None
    when it names none."""
    host = e.subject.get("host")
    return host_key(host) if isinstance(host, str) and host.strip() else None


def _other_host(e: Evidence, hosts: frozenset[str], subject: Mapping[str, str]) -> str:
    """Why a host's fact is not the campaign's (rule ``other-host``)."""
    host = e.subject.get("host")
    if "host" in subject:
        where = f"the evaluated host {subject['host']}"
    elif hosts:
        where = "a host the campaign's launches and jobs ran on (" + ", ".join(sorted(hosts)) + ")"
    else:
        where = "a host of the campaign (no launch or job of it names a host)"
    if host is None:
        return f"{e.kind} names no host: it cannot be told to be a fact of {where}"
    return f"{e.kind} of host {host}, not of {where}: another host's facts are not this campaign's"


def _observed(e: Evidence) -> str:
    """``collected_at`` as a reason prints it, saying so where the log time bounded a later claim."""
    if e.collected_time > e.logged_time:
        return f"{e.logged_at} (logged then; it claims collected_at {e.collected_at}, after that)"
    return e.collected_at


def _after_end(e: Evidence, terminal: Evidence, ended: datetime | None) -> bool:
    """Was ``e`` produced after the end of the job ``terminal`` (its first terminal entry) ends? Where the
    log took ``e`` after the terminal entry (log order), the log knows it came after the end, whatever
    ``collected_at`` it claims: a claimed time inside the job gives no credit to output logged after it ended.
    Logged before it, by the job's ``ended_at`` when it records one (collector clock against collector clock),
    the entry's time never after the log took it (``observed_time``: a crash logged while the job ran that
    claims a later ``collected_at`` is not thereby output after the job — a claim cannot withdraw what the
    log holds)."""
    if e.seq > terminal.seq:
        return True
    return ended is not None and e.observed_time > ended


def _after_end_withholds_only(
    e: Evidence, terminal: Evidence, ended: datetime | None, open_job: str | None
) -> bool:
    """For ``e`` after its job's end (``_after_end``): does ``after-job-terminal`` only withhold its credit?
    Logged after the job's terminal entry and claiming a time after the end too, the record agrees it came
    after the end — output of the job's engine after it was gone: withdrawn. Only one of them says so: its
    credit is withheld (``CREDIT_ONLY_BY_CLAIM``). Nor is it withdrawn where it is not that job's output at
    all (``_not_that_jobs_output``: logged while a job of its campaign was open, ``open_job``, or an engine
    that started after the end): a failure it shows counts against the engine — whether a failure counts
    never depends on an earlier job's end (only a supersession of the entry withdraws it)."""
    if _not_that_jobs_output(e, terminal, open_job) is not None:
        return True
    return not (e.seq > terminal.seq and _after_end_claimed(e, ended))


def _not_that_jobs_output(e: Evidence, terminal: Evidence, open_job: str | None) -> str | None:
    """Why ``e``, produced after the end of the job ``terminal`` ends (``_after_end``), is not output of
    that job's engine — said as a reason's tail —, or None: the log took it, after that end, while a job of
    its campaign was open (``open_job``, ``_JobLog.open_at``: another job, or the same job started again —
    the log decides which run an entry belongs to, not the job it names), or it is an ``engine.launch`` that
    started (``_claimed_start``: its ``started_at``, never after it was observed) after the job ended
    (``_job_end``): a new engine, never that job's output."""
    if open_job is not None and e.seq > terminal.seq:
        again = " again" if open_job == str(terminal.payload.get("job_id")) else ""
        return (
            f"; the log took it while job {open_job} ran{again}: that run's output, not the ended job's "
            "(what it shows against the engine stands)"
        )
    if e.kind == "engine.launch":
        started, end = _claimed_start(e), _job_end(terminal)
        if end is not None and started > end:
            return (
                f"; it started at {_fmt(started)}, after the job ended at {_fmt(end)}: a new engine, not the "
                "ended job's output (what it shows against the engine stands)"
            )
    answered = _engine_answered(e)
    if answered is not None and e.seq > terminal.seq:
        return (
            f"; {answered} after the job ended: an engine was there to answer, so it is no output of the "
            "ended job's engine after it was gone (what it shows against the engine stands)"
        )
    return None


def _engine_answered(e: Evidence) -> str | None:
    """How ``e``, a failed probe or harness result, shows that an engine answered it — a probe that records
    an HTTP status, a harness result that ran to completion or records answered requests or scored items —
    or None (a pass; a connection refused, a run with nothing answered: what an engine gone after its job's
    end leaves). A failure an answering engine shows is evidence against the engine whatever job it names
    (audit 63 f2); a pass logged after its job's end stays withdrawn (no newer run; audit 29 f7)."""
    p = e.payload
    failed = (e.kind == "health.probe" and e.derived.get("probe_failed") is True) or (
        e.kind == "gate.result" and p.get("status") == "failed"
    )
    if not failed:
        return None
    if e.kind == "health.probe":
        status = p.get("http_status")
        return f"an engine answered it (HTTP {status})" if type(status) is int else None
    if e.kind == "gate.result":
        bounds, counts = p.get("bounds"), p.get("counts")
        if isinstance(bounds, dict) and bounds.get("outcome") == "completed":
            return "its run completed"
        if isinstance(counts, dict):
            for name in ("completed", "passed", "failed"):
                value = counts.get(name)
                if type(value) is int and value > 0:
                    return f"its run records {value} {name}"
    return None


def _ended_as(p: Mapping[str, Any]) -> str:
    """How a terminal job entry (its payload ``p``) says the job ended: its state, and its exit code where
    it records one (an exit code never recorded is left out, not printed as None)."""
    code = p.get("exit_code")
    return f"{p.get('state')}" + (f" (exit {code})" if code is not None else "")


def withholds_only(rule: str, credit_only: bool | None = None) -> bool:
    """Does ``rule`` only withhold credit, leaving a failure the entry shows as evidence against the engine,
    rather than withdraw the entry (not evidence of the subject at all)? ``CREDIT_ONLY`` marks the built-in
    rules; a rule of ``CREDIT_ONLY_BY_CLAIM`` and a ``[[rules]]`` (its ``withholds``) say so per entry:
    ``credit_only``."""
    return rule in CREDIT_ONLY if credit_only is None else credit_only


def _after_end_claimed(e: Evidence, ended: datetime | None) -> bool:
    """Whether ``e``'s own time (``observed_time``) is after the job's recorded end ``ended``, or the job
    records none (then log order alone says when the job ended)."""
    return ended is None or e.observed_time > ended


def _bindings_problem(e: Evidence, keys: list[str], require: bool, manifest: Mapping[str, str]) -> str | None:
    """Why ``e``'s bindings do not equal the campaign's pinned manifest, or None.

    Every key of ``keys`` the manifest pins must be recorded by the entry and equal: a pinned key the
    launch leaves out is a mismatch (it cannot be compared, so it fails closed), whatever else it records.
    Shards (``shard:*``) are compared where the launch records them: the model revision, which is
    required, already names the pinned bytes (a hub commit, or the BLAKE3 of a local model's file
    listing); a shard the launch binds that the pin does not list is a mismatch (it loaded a file the pin
    never verified). ``require`` (``require_manifest``): a key of ``keys`` the manifest pins nothing for is a
    mismatch too."""
    bindings = e.payload.get("bindings", {}) or {}
    shards = sorted(k for k in manifest if k.startswith("shard:")) if "shard:*" in keys else []
    pinned = [k for k in keys if k != "shard:*" and k in manifest] + shards
    wanted = [k for k in keys if k != "shard:*"] + [k for k in shards if k in bindings]
    if not bindings and pinned:
        return (
            "records no bindings, but the campaign pins "
            + ", ".join(f"{k}={manifest[k]}" for k in pinned[:4])
            + (f" (+{len(pinned) - 4} more)" if len(pinned) > 4 else "")
            + ": an unbound launch cannot be compared to the pin"
        )
    diffs = []
    for k in wanted:
        if k not in manifest:
            if require:
                diffs.append(f"{k}: the manifest pins nothing")
        elif k not in bindings:
            diffs.append(f"{k} not recorded (pinned {manifest[k]}): cannot be compared to the pin")
        elif str(bindings[k]) != manifest[k]:
            diffs.append(f"{k} {bindings[k]} != pinned {manifest[k]}")
    if shards:
        # a file the launch loaded that the pin does not list: the pinned files are not all it ran
        diffs += [
            f"{k} {bindings[k]} is bound but not pinned (the model pin lists no such file)"
            for k in sorted(bindings)
            if str(k).startswith("shard:") and k not in manifest
        ]
    if not diffs:
        return None
    return "bindings not equal to the pinned manifest: " + "; ".join(diffs)


_PLAIN = (str, int, bool, type(None))
_STOPPED = ("killed", "cancelled")


def _operator_stopped(launch: Evidence, job_ends: Sequence[Evidence | None]) -> bool:
    """``e.derived.operator_stopped`` of an ``engine.launch``: the operator stopped its run, as the log
    knows it — every job it belongs to (the jobs ``killed-run`` reads: the one it names, the one the log
    knows it ran in, the one running when it says it was collected) has ended, and the first terminal entry
    of each (``job_ends``, None for a job not ended) says the job was stopped (``_STOPPED``) at a signal it
    names (``cancelled_by``); and the launch agrees: its ``details.stop_reason`` is ``cancelled``, it
    records no ``failure_signature`` and its stored logs show no failure (``log_failure_class``, derived).
    A launch that says ``cancelled`` in a job that did not end so (or ended so with no signal named, or
    has not ended) is not one: its claim is not the log's record. Only the launch's not being ready is
    thereby not a failure of the engine (``[acceptance.against]``); any other failure it shows counts."""
    if launch.kind != "engine.launch" or not job_ends:
        return False
    for end in job_ends:
        by = end.payload.get("cancelled_by") if end is not None else None
        if (
            end is None
            or end.payload.get("state") not in _STOPPED
            or not (isinstance(by, str) and by.strip())
        ):
            return False
    details = launch.payload.get("details")
    return (
        isinstance(details, dict)
        and details.get("stop_reason") == "cancelled"
        and launch.payload.get("failure_signature") is None
        and launch.derived.get("log_failure_class") is None
    )


_ATTEMPT_ONLY = (("derived", "attempt"),)


def _e_reads(source: str) -> tuple[tuple[str, ...], ...] | None:
    """The field paths of ``e`` a CEL condition reads (``e.derived.attempt`` → ("derived", "attempt")),
    or None when it may read more than named fields of ``e`` (or the per-entry ``job``)."""
    from ledger.policy.conditions import _tokens, paths_read

    toks = _tokens(source)
    if toks is None or "[" in toks or "job" in toks:
        return None
    reads = paths_read(source, {"e": "e"})
    if reads is None or any(not r.path for r in reads):
        return None  # `e` used whole, or rebound by a macro
    # `'x' in e.payload` reads the map the key is tested in
    return tuple(sorted({r.path[:-1] if r.how == "in" else r.path for r in reads}))


_ENTRY_ATTRS = ("kind", "in_subject", "collected_at", "logged_at", "seq", "id")


def _memo_keyer(
    rule: str, reads: tuple[tuple[str, ...], ...] | None
) -> Callable[[Evidence], tuple[Any, ...] | None]:
    """``lambda e: _memo_key(rule, reads, e)``, made once per rule and evaluation and specialised for the
    common shapes (the attempt number; one plain attribute such as ``in_subject``): the same keys, without
    walking the paths again for each of 10,000 entries."""
    if reads is None:
        return lambda e: None
    if reads == _ATTEMPT_ONLY:  # the attempt-budget rule: one int
        return lambda e: (rule, e.kind, e.derived["attempt"])
    if len(reads) == 1 and len(reads[0]) == 1 and reads[0][0] in _ENTRY_ATTRS:
        attr = reads[0][0]

        def one(e: Evidence) -> tuple[Any, ...] | None:
            v = getattr(e, attr)
            return (rule, e.kind, (type(v), v)) if type(v) in _PLAIN else None

        return one
    return lambda e: _memo_key(rule, reads, e)


def _memo_key(rule: str, reads: tuple[tuple[str, ...], ...], e: Evidence) -> tuple[Any, ...] | None:
    """(rule, kind, the read values with their types) when every read value is a plain scalar (the
    general path of ``_memo_keyer``)."""
    out: list[Any] = [rule, e.kind]
    for path in reads:
        head = path[0]
        value: Any
        if head == "payload":
            value = e.typed_payload
        elif head == "derived":
            value = e.derived
        elif head == "subject":
            value = e.subject
        elif head in _ENTRY_ATTRS:
            value = getattr(e, head)
        else:
            return None
        for part in path[1:]:
            if not isinstance(value, dict) or part not in value:
                return None  # let CEL decide (and report) what a missing key means
            value = value[part]
        if type(value) not in _PLAIN:
            return None
        out.append((type(value), value))
    return tuple(out)


def _show(value: Any) -> str:
    if isinstance(value, list):
        return "/".join(_show(v) for v in value) or "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return "none" if value is None else str(value)


def _differences(compared: tuple[tuple[str, Any, Any], ...], ctx: Mapping[str, Any]) -> list[str]:
    """What differs, one phrase each (``requests 6, approved 96``); an unreadable value is "not recorded"."""
    from ledger.errors import PolicyError

    out = []
    for label, got_c, want_c in compared:
        want = want_c.value(ctx)
        try:
            got = got_c.value(ctx)
        except PolicyError:
            out.append(f"{label} not recorded, approved {_show(want)}")
            continue
        if got is None:
            out.append(f"{label} not recorded, approved {_show(want)}")
        elif typed(got) != typed(want):
            out.append(f"{label} {_show(got)}, approved {_show(want)}")
    return out


def typed(value: Any) -> Any:
    """A value as a comparable key that keeps JSON's types apart: ``true`` is not ``1`` (Python's
    ``True == 1`` would let ``[true, 4, 32]`` equal the approved ``[1, 4, 32]``), a text is not a number;
    numbers compare by value (``4`` equals ``4.0``), lists by element, objects by key."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        return ("number", float(value))
    if isinstance(value, str):
        return ("text", value)
    if value is None:
        return ("null",)
    if isinstance(value, list | tuple):
        return ("list", tuple(typed(v) for v in value))
    if isinstance(value, Mapping):
        return ("object", tuple(sorted((str(k), typed(v)) for k, v in value.items())))
    return ("other", type(value).__name__, repr(value))


def _derive(
    trusted: list[Evidence],
    superseded: set[str],
    output_kinds: frozenset[str],
    store: ArtifactStore,
    jobs: _JobLog,
    *,
    campaign: str | None = None,
    params: Mapping[str, Any] | None = None,
) -> None:
    """Facts the log itself establishes, set as ``e.derived`` (CEL: ``e.derived.*``), never taken from
    the entry's own claims:

    * ``attempt`` — for an ``engine.launch`` of the evaluated subject, its position among the trusted, not
      superseded launches of the subject **and of its campaign** in log order (1, 2, …): the attempt
      budget is the campaign's, so a verdict narrowed to one host still counts the attempts made on
      another (``campaign``: the evaluated one); for any other entry, the attempt of the
      latest such launch started at or before the entry was collected (0: before any launch). Probes of
      an attempt beyond the budget are thereby beyond it too.
    * ``job`` — for kinds in ``output_kinds``, the ``job_id`` of the job of the same campaign it ran in,
      whether or not it says so: the one open when the log took it (``_JobLog.open_at``, the one job
      reading) — the latest whose ``running`` entry precedes it in the log and whose terminal entry does not
      (two jobs of a campaign may overlap: one that ended before it was logged is not the one it ran in; a
      terminal entry logged before every running entry of its job ends nothing); None when no job of the
      campaign was open then — before any started, or after every one had ended: output logged after every
      job ended belongs to none of them (``filter_evidence`` withholds its credit, and a failure it shows
      counts against the engine).
    * ``failure_class`` — for an ``engine.launch`` with a ``failure_signature``, the class the signature
      table gives it; ``unknown`` for an id the table lacks (policies fail those closed).
    * ``log_failure_signature`` / ``log_failure_class`` — for an ``engine.launch``, the signature that
      decides among those whose log patterns match what the launch stored (its artifacts, read back from
      the store, and its ``failure_detail``) — the gravest class any of them has
      (``ledger.signatures.decisive``, ``CLASS_PRECEDENCE``; the table's order among equals), so a CUDA OOM
      line does not shadow a GPU hang beside it — and that signature's class; None when no pattern
      matches. The collector's own classification is not taken on trust: a run recorded as stopped by an
      operator whose logs show ``EngineDeadError`` is a runtime fault here.
    * ``end_failure_signature`` / ``end_failure_class`` — for an ``engine.launch``, the first status-only
      signature (no log patterns) that its recorded end matches, and its class, unless the launch shows
      that the collector stopped the run (``details.stop_reason`` one of ``COLLECTOR_STOPPED``) or
      records no end; None then. A ready engine killed by SIGKILL, or that exited on its own, is not
      judged a clean run because its entry leaves the signature out (``_classify_end``). Where the
      launch's decisive stored-log signature (``log_failure_signature``) is one of
      ``params.held_stop_signatures`` (a hold from outside) or ``params.outside_kill_signatures`` (a
      SIGKILL the collector's kernel-log reading attributes to no OOM kill), the end is that one.
    * ``ok`` — for a ``health.probe``: whether it succeeded, judged from its record (``probe_ok``: its
      ``ok`` claim and no non-2xx ``http_status`` beside it); False for every other entry. Gates read
      this, not the claim.
    * ``structured_valid`` / ``structured_problem`` — for a ``health.probe`` of check ``structured``:
      whether its recorded answer (``text``) parses as JSON that validates against the schema it recorded
      (``details.schema``), judged here again — ``ok`` is the collector's claim; False (with why) when the
      answer or the schema is missing, or either does not parse. False for every other entry.
    * ``probe_failed`` — for a ``health.probe``: whether it shows a failure, judged again from its record
      as the control gates judge it (``_probe_failed``): not ``ok`` (above); a completion whose answer
      (``text``), stripped of surrounding whitespace, is not exactly ``params.control_answer``; a structured
      probe whose answer is not ``structured_valid``; a sequential run whose ``count`` is below
      ``params.sequential_requests`` or is not the number of requests it timed (``latencies_ms``). A value
      missing or of the wrong type — the probe's or the policy's — is a failure. The gates' "a later pass
      does not lift it" checks and ``before-launch``'s ``against`` read this one judgement. False for every
      other entry.
    * ``sequential_slowest_ms`` — for a sequential ``health.probe``: the largest of its recorded
      ``latencies_ms`` (None where it records no list of numbers), what a latency reason names.
    * ``cut_undecided`` — for a completion or structured ``health.probe``: its answer was cut by its own
      ``max_tokens`` while it could still have become the right one (``ledger.answers.cut_undecided``, the
      collector's judgement too); the ``campaign-cut-probe`` rule withholds such a probe. False otherwise.
    * ``refusal`` — for a ``health.probe``: which refusal of the campaign's configuration its record shows
      (``ledger.answers.refusal``, with the policy's params — the collector's probe and harnesses judge a
      refused request by the same function): ``access`` (HTTP 401/403), ``context`` (the campaign's context
      length cannot hold the request), ``request-form`` (a structured probe's request form refused); None
      for none, and for every other entry. ``engine-refused-probe`` and ``[acceptance.against]`` read it.
    * ``gpu_events_during_run`` — for an ``engine.launch`` of the evaluated subject, the GPU events (facts
      as in ``gpu_events``, with their ``time``) of every trusted, not superseded ``kernel.log`` of the
      launch's host — of any campaign: a host's health job records its own — whose event time lies in
      the run: from the earlier of its ``started_at`` and its job's start to the later of its own end
      (``ended_at``, never after the launch was logged; else its log time) and the end of the job it ran
      in (``_run_end``): a claimed start or end never narrows the run below its job. Where the launch
      records the GPUs it was given (``CUDA_VISIBLE_DEVICES`` …, mapped to PCI addresses through the
      host's latest GPU list) and the event names its device, only events of those GPUs count; where
      either cannot be told, every event of the host does; an event of the whole host (the OOM killer:
      ``ledger.gpu_faults.host_wide``, by its line or its kind) counts whatever device it records. An
      event without a time lies in its log's window (its ``since``, else unbounded, to when the log was
      observed) and counts, with time None, where that window overlaps the run: it cannot be shown outside
      it. ``gpu_events_during_run_named`` names them for a reason (``_named_events``): code, class, time
      and, for an OOM kill, the process and pid killed — marked as the engine's where the pid is the one the
      launch records (``details.pid``).
    * ``kernel_logs_unread_during_run`` — for the same launch, the ids of the trusted, not superseded
      ``kernel.log`` entries of its host recorded as unreadable (``readable`` not true) or without their
      ``events`` list whose window overlaps
      the run, unless a readable kernel log of the host covers the whole run (``since`` at or before its
      start, observed at or after its end): the GPU events of that run are unknown, not none.
    * ``after_launch_end`` — for an entry attributed to an attempt (``attempt`` above), whether it was
      observed after the end of that attempt: the earlier of the end its launch records (``ended_at``)
      and the end of the job the launch ran in (``_job_end``) — a probe then answered some other engine,
      not the one launched. Also — for a probe, a harness result and any other evidence of the run alike
      (one rule, by log order) — whether the log took it after its attempt's launch entry where that entry
      records the run's end (``ended_at``) and was logged at or after it: the log knew the run was over,
      whatever ``collected_at`` the entry claims (the collector records a launch when its run ends, after
      its probes and harness results). False otherwise
      (no end recorded: the claim only ever takes credit away, so it is read as written).
    * ``unmatched_job_ends`` — for an ``engine.launch`` of the evaluated subject, the ``job_id`` of every
      trusted, not superseded terminal job entry of its campaign logged before every ``running`` entry of
      its job (``_JobLog.unmatched``: a misspelled job_id, or an end logged before its start): it ends no
      run — which run it ended, and whether it was killed, cannot be told, so the policy cannot judge the
      campaign. Empty otherwise.
    * ``stop_cut`` — for a ``health.probe`` or ``gate.result`` that failed for lack of an answer while its
      engine was being stopped from outside (``_mark_stop_cuts``): the launch of its attempt ended by a
      signal in ``params.stop_classes`` and nothing of the attempt logged after it was answered; the text
      names the launch and its end. None otherwise.
    * ``stop_cut_held`` — beside ``stop_cut``: whether the launch it names was held from outside
      (``_held_from_outside``: its decisive signature, read from what it stored, one of
      ``params.held_stop_signatures`` — never the entry's own claim); then the run's timed-out requests
      (``counts.timed_out``, read back from its per-request record) are the hold's whatever its fault kind
      (rule stopped-from-outside). False otherwise — a launch not held (an outside SIGTERM, a hang) keeps
      its timeouts.
    * ``cut_decided`` — for a ``gate.result`` of a harness run cut short from outside the engine
      (``bounds.outcome`` one of ``CUT_OUTCOMES``: an operator's stop or a hold from outside, its lease, the
      campaign's configuration): where what the engine failed before the cut already decides its gate, why
      (``cut_decided``: the semantic items failed, the benchmark's errors less those the cut made, a bounded
      figure its level runs completed before the cut already fail, judged over its stored
      ``benchmark-requests.jsonl``); None otherwise. The rules of those outcomes count such a run against
      the engine by it — one test, not a CEL expression copied into each.
    * ``newer_run`` — set by ``_mark_newer_runs`` once ``filter_evidence`` knows which results a rule
      withdraws.
    * ``gpu_events`` — for a ``kernel.log``, one fact per recorded event (``fault_class``, ``code``,
      ``recovery_action``, ``related_xid``; ``process``, ``pid``, ``oom_scope``, ``summary`` of an OOM-killer
      line, read from the line) from the GPU-fault catalogue (``collectors/gpu_faults.toml``), whatever
      class the entry itself claims; ``unknown`` for a code the catalogue lacks. Empty otherwise.
      ``gpu_events_named`` names them for a reason, as ``gpu_events_during_run_named`` does.
    * ``gpu_events_in_campaign`` — for a ``kernel.log``, those of its ``gpu_events`` that lie in the campaign
      it is labelled with: at or after the start of that campaign's first job or run (``_campaign_starts``,
      by the log) — a fault and reset before it (seed 003: a retained historical reset, recorded by the
      post-reset check before any model work) is no engine's of the campaign. An event without a time
      counts (it cannot be shown before the start), and so does every event of a log whose campaign has no
      job or run output in the log, or that names no campaign. An event before the start keeps its other
      effects: it dates the host's reset (``last_reset_at``), and it is in ``gpu_events_during_run`` of any
      launch whose run it lies in. ``gpu_events_in_campaign_named`` names them, as ``gpu_events_named``.
    """
    from bisect import bisect_right

    classes = signature_classes()
    log_signatures = pattern_signatures()
    end_signatures = status_signatures()
    rules = explanations()  # a recorded refusal that explains a graver log line (``_explained_log_lines``)
    markers = stop_markers()
    held = stop_classes(params or {}, "held_stop_signatures")
    kills = stop_classes(params or {}, "outside_kill_signatures")  # killed by SIGKILL from outside
    starts: list[tuple[datetime, int]] = []
    ends: dict[int, datetime] = {}  # attempt → the end its launch records (it only ever takes credit away)
    launch_of: dict[int, Evidence] = {}  # attempt → its launch (``stop_cut``)
    # attempt → the log position of its launch entry where that entry records the run's end (``ended_at``)
    # and was logged at or after it: from then on the log knows the run was over, whatever time a probe
    # logged later claims
    ended_in_log: dict[int, int] = {}
    # launch id → why its stored logs do not show a clean run after readiness (``_LogScan.unclean``)
    unclean: dict[str, str | None] = {}
    scans: dict[str, _LogScan] = {}  # launch id → what its stored logs show (``_explained_log_lines``)
    subject_launches: list[Evidence] = []
    host_events = _host_gpu_events(trusted, superseded)
    campaign_starts = _campaign_starts(trusted, output_kinds)
    n = 0
    for e in trusted:  # in seq order
        kind = e.kind
        if kind == "job":
            continue
        derived: dict[str, Any] = {
            **NO_DERIVED,
            "gpu_events": [],
            "gpu_events_named": "",
            "gpu_events_in_campaign": [],
            "gpu_events_in_campaign_named": "",
            "gpu_events_during_run_named": "",
            "operator_stopped": False,  # set by ``filter_evidence`` (``_operator_stopped``)
        }
        derived["probe_failed"] = False
        derived["refusal"] = None
        if kind == "health.probe":
            derived["ok"] = probe_ok(e.payload)
            derived["answer_not_completion"] = _answer_not_completion(e.payload)
            derived["probe_failed"] = _probe_failed(e, derived["ok"], params or {})
            derived["cut_undecided"] = cut_undecided(e.payload, (params or {}).get("control_answer"))
            # a context refusal resting on the record alone waits for its attempt's launch (``_refusals``)
            derived["refusal"] = refusal(e.payload, params or {}, launched=None)
            derived["sequential_slowest_ms"] = _slowest(e.payload)
        if kind == "health.probe" and e.payload.get("check") == "structured":
            problem = e.structured_problem()
            derived["structured_valid"] = problem is None
            derived["structured_problem"] = problem
        if kind == "gate.result":
            # a context refusal resting on a request's size alone waits for its launch (``_refusals``)
            derived["artifact_problem"] = _harness_artifact_problem(e, store, params or {})
            # what the engine failed before a cut from outside that already decides its gate (fix 166)
            derived["cut_decided"] = _cut_decided_of(e, store, params or {})
        if kind == "kernel.log":
            recorded = host_events.by_entry.get(e.id, [])
            derived["gpu_events"] = [fact for _, fact in recorded]
            derived["gpu_events_named"] = _named_timed_events(recorded)
            # the campaign's own: none before its first job or run began (an event without a time counts)
            label = e.subject.get("campaign")
            start = campaign_starts.get(label) if isinstance(label, str) else None
            ours = [(t, fact) for t, fact in recorded if start is None or t is None or t >= start]
            derived["gpu_events_in_campaign"] = [fact for _, fact in ours]
            derived["gpu_events_in_campaign_named"] = _named_timed_events(ours)
        if kind in output_kinds and e.in_subject:
            # the job open when the log took it (``_JobLog.open_at``); none after every job had ended
            derived["job"] = jobs.open_at(e.subject.get("campaign"), e.seq)
        if kind == "engine.launch" and e.in_subject:
            job_key = (e.subject.get("campaign"), derived["job"]) if derived["job"] is not None else None
            first = jobs.started.get(job_key) if job_key is not None else None
            run_from = first.observed_time if first is not None else None
            run_to = _run_end(e, jobs.ended.get(job_key) if job_key is not None else None)
            derived["gpu_events_during_run"] = host_events.during(e, run_from, run_to)
            details = e.payload.get("details")
            derived["gpu_events_during_run_named"] = _named_events(
                derived["gpu_events_during_run"], details.get("pid") if isinstance(details, dict) else None
            )
            derived["kernel_logs_unread_during_run"] = host_events.unread_during(e, run_from, run_to)
        if kind == "engine.launch":
            sig = e.payload.get("failure_signature")
            if sig is not None:
                derived["failure_class"] = classes.get(str(sig), UNKNOWN_CLASS)
            outcome = _outcome(e.payload)
            # whether the stored logs show a stop from outside (``RunOutcome.stop_marked``) is read where it
            # can change how the recorded end is classified (an exit 0 after readiness: stopped-from-outside)
            marked = (
                _classify_end(e.payload, replace(outcome, stop_marked=True), end_signatures).signature
                != _classify_end(e.payload, outcome, end_signatures).signature
            )
            scan = _classify_stored_logs(
                e,
                outcome,
                store,
                log_signatures,
                markers,
                marked=marked,
                rules=rules,
                cut_tolerance=stop_cut_tolerance(params or {}),
            )
            scans[e.id] = scan
            unclean[e.id] = scan.unclean
            derived["log_failure_signature"] = scan.whole.signature
            derived["log_failure_class"] = scan.whole.failure_class
            derived["log_failure_named"] = scan.whole_named
            derived["log_failure_after_ready_signature"] = scan.after_ready.signature
            derived["log_failure_after_ready_class"] = scan.after_ready.failure_class
            derived["log_failure_after_ready_named"] = scan.after_ready_named
            # the end as the collector classifies it, stop_marked read from the stored logs, never claimed
            end = _classify_end(e.payload, replace(outcome, stop_marked=scan.stop_marked), end_signatures)
            if end.signature is not None and held is not None and scan.whole.signature in held:
                # an engine held from outside (suspended: SIGSTOP, a debugger, a freezer — its decisive
                # signature, read by the policy from what the launch stored, is one of
                # params.held_stop_signatures) answered nothing while held: its lease running out and the
                # SIGKILL the collector's stop escalated to are the hold's doing, as the collector's table
                # lists such a signature before lease-expired and killed-sigkill
                end = scan.whole
            elif end.signature is not None and kills is not None and scan.whole.signature in kills:
                # killed by SIGKILL from outside (params.outside_kill_signatures: the collector read the
                # kernel log when the engine's leader died so on its own, and found no OOM-killer line in the
                # launch's window, or could not read it), as the policy reads what the launch stored — such a
                # signature holds only with the SIGKILL end the launch records: the end is that kill's, judged
                # in its class (a stop from outside), not the status-only killed-sigkill (class resource). No
                # hold: its timed-out requests stay the engine's (``_held_from_outside`` is not widened)
                end = scan.whole
            derived["end_failure_signature"] = end.signature
            derived["end_failure_class"] = end.failure_class
            of_campaign = campaign is not None and e.subject.get("campaign") == campaign
            if (e.in_subject or of_campaign) and e.id not in superseded:
                n += 1  # the campaign's attempts, on whichever host
            if e.in_subject and e.id not in superseded:
                derived["attempt"] = derived["attempt_logged"] = n
                started = e.payload.get("started_at")
                try:
                    t = min(parse_time(started), e.collected_time) if started else e.collected_time
                except LedgerError:
                    t = e.collected_time
                starts.append((t, n))
                ended = e.payload.get("ended_at")
                if ended:
                    with contextlib.suppress(LedgerError):  # an end that does not parse ends nothing
                        ends[n] = parse_time(ended)
                        if e.logged_time >= ends[n]:  # logged once the run it records was over
                            ended_in_log[n] = e.seq
                # the engine ran no longer than the job it ran in: a probe observed after that job ended
                # (in a later job, with no launch of its own) answered no engine of this attempt
                job_end = _job_end(jobs.ended.get(job_key) if job_key is not None else None)
                if job_end is not None and (n not in ends or job_end < ends[n]):
                    ends[n] = job_end
                subject_launches.append(e)
                launch_of[n] = e
        e.set_derived(derived)  # a view built in an earlier round shows this round's facts
    for launch in subject_launches:
        # a terminal entry of the launch's campaign logged before every running entry of its job (a
        # misspelled job_id, a job entered by hand, an end logged before its start): it ends no run —
        # which run it ended, and how, cannot be told
        of = launch.subject.get("campaign")
        assert launch.derived_ is not None
        launch.derived_["unmatched_job_ends"] = sorted(
            {str(u.payload.get("job_id")) for u in jobs.unmatched if u.subject.get("campaign") == of}
        )
    _devices_not_on_probes(trusted, superseded, subject_launches)
    if not starts:
        return
    # attempt in progress at time t: the highest attempt number started at or before t
    starts.sort()
    times = [t for t, _ in starts]
    best: list[int] = []
    top = 0
    for _, k in starts:
        top = max(top, k)
        best.append(top)
    for e in trusted:
        if e.kind in ("job", "engine.launch") or e.derived_ is None:
            continue
        # the attempt in progress when the log took it: a claimed collected_at before every launch's start
        # cannot withdraw what an entry logged while a launch ran shows (rule before-launch's `against`)
        j = bisect_right(times, e.logged_time)
        e.derived_["attempt_logged"] = best[j - 1] if j else 0
        i = bisect_right(times, e.collected_time)
        if i:
            attempt = e.derived_["attempt"] = best[i - 1]
            attempt_end = ends.get(attempt)
            if attempt_end is not None and e.observed_time > attempt_end:
                e.derived_["after_launch_end"] = True
            # an entry the log took after its attempt's launch entry recorded the run's end (the collector
            # records a launch when its run ends, after its probes and harness results): the log knew that
            # engine was gone — a claimed collected_at inside the run cannot lend it that run's credit, be it
            # a probe or a harness result (one rule for both; an entry spooled and pushed after its launch
            # loses credit: the fail-closed trade)
            if attempt in ended_in_log and e.seq > ended_in_log[attempt]:
                e.derived_["after_launch_end"] = True
    _refusals(trusted, launch_of, params or {}, store)
    _explained_log_lines(trusted, superseded, launch_of, params or {}, store, scans, log_signatures)
    _mark_stop_cuts(trusted, launch_of, params or {}, unclean)


def _refusals(
    trusted: Sequence[Evidence],
    launch_of: Mapping[int, Evidence],
    params: Mapping[str, Any],
    store: ArtifactStore | None = None,
) -> None:
    """``e.derived.refusal`` of each ``health.probe``, and ``e.derived.artifact_problem`` of each harness
    ``gate.result`` (``_harness_artifact_problem``: a request its record shows refused for the context,
    ``_context_refusal_unshown``), judged with the context length its attempt's launch gave the engine
    (``ledger.answers.launched_context`` of the launch's recorded ``engine`` and ``command``), never the one
    the probe's (the request's) own record names: a failure excused as a
    request the campaign's context could not hold (``context_overflow``) stays excused only where the two
    are the same, and its prompt was counted in a way the program that launch's command runs can count by
    (``ledger.answers.launched_counts``: a tokenizer another program serves counted nothing). No attempt,
    no launch, a command missing or mistyped: none known, nothing so excused. The
    attempt is the one the log took the probe in (``attempt_logged``); where the one its claimed
    ``collected_at`` picks (``attempt``) is another, its launch must give the same context too — a claimed
    time never picks the launch that excuses a failure (audit 87).

    So too the launch's recorded command (``ledger.answers.launched_command``) an ``option-value`` refusal
    is held to — the value the engine refused must be the one that command gives the option — the same for
    both attempts, or none known. And such a refusal of a probe is none where a chat probe of the same
    launch (attempt) was answered — an HTTP 2xx — before it in the log: the engine read the option at launch
    and took it then; refusing it later is the engine's failure, not the campaign's (fix 130)."""
    answered_at: dict[int, int] = {}  # attempt → the log seq of its first answered chat probe
    for e in trusted:
        status = e.payload.get("http_status") if e.kind == "health.probe" else None
        attempt = e.derived_.get("attempt_logged") if e.derived_ is not None else None
        chat = e.kind == "health.probe" and e.payload.get("check") in CHAT_PROBES
        if chat and type(status) is int and 200 <= status <= 299 and isinstance(attempt, int):
            answered_at[attempt] = min(answered_at.get(attempt, e.seq), e.seq)
    for e in trusted:
        if e.kind not in ("health.probe", "gate.result") or e.derived_ is None:
            continue
        launches = [
            launch_of.get(attempt) if isinstance(attempt, int) else None
            for attempt in (e.derived_.get("attempt_logged"), e.derived_.get("attempt"))
        ]
        given = {launched_context(launch.payload) if launch is not None else None for launch in launches}
        launched = given.pop() if len(given) == 1 else None
        commands = {launched_command(launch.payload) if launch is not None else None for launch in launches}
        command = commands.pop() if len(commands) == 1 else None
        read = {launched_counts(launch.payload) if launch is not None else () for launch in launches}
        ways = read.pop() if len(read) == 1 else ()
        if e.kind == "health.probe":
            shown = refusal(e.payload, params, launched=launched, command=command, counts=ways)
            logged = e.derived_.get("attempt_logged")
            first = answered_at.get(logged) if isinstance(logged, int) else None
            if shown == REFUSAL_OPTION_VALUE and first is not None and first < e.seq:
                shown = None  # the launch answered a chat request before: it took the value
            e.derived_["refusal"] = shown
        elif store is not None and launched is not None and e.derived_.get("artifact_problem") is not None:
            # read first with no launch known (nothing rests on a request's size alone): read again held
            # to the launch's context only where that found a problem
            e.derived_["artifact_problem"] = _harness_artifact_problem(e, store, params, launched, ways)


def _explained_log_lines(
    trusted: Sequence[Evidence],
    superseded: set[str],
    launch_of: Mapping[int, Evidence],
    params: Mapping[str, Any],
    store: ArtifactStore,
    scans: Mapping[str, _LogScan],
    signatures: Sequence[Signature],
) -> None:
    """A launch's log lines of a graver signature that a recorded refusal of the campaign explains
    (``[[explanation]]`` of the signature table: ``ledger.signatures.explained_by_refusals``) decide its
    ``log_failure_*`` and ``log_failure_after_ready_*`` no more — where every such line in its stored logs
    (``_LogScan.explainable``) shows the refusal in its own traceback, in numbers that overflow at least the
    context its command gives (``launched_context``), and pairs with a request of its own that its attempt's
    harness runs recorded refused for the context (``_context_refused_requests``). Anything else — one such
    line whose traceback shows something else, more lines than such requests, a command that gives no
    context — leaves the decision as it was (fail closed)."""
    for attempt, launch in launch_of.items():
        scan = scans.get(launch.id)
        if scan is None or not scan.explainable or launch.derived_ is None:
            continue
        launched = launched_context(launch.payload)
        found = [o for occ in scan.explainable.values() for o in occ]
        if launched is None:
            continue
        ways = launched_counts(launch.payload)
        refused = _context_refused_requests(trusted, superseded, attempt, params, store, launched, ways)
        if not explained_by_refusals(found, refused, launched):
            continue
        w, w_named = _pick_found(scan.whole_found, signatures, scan.explainable)
        r, r_named = _pick_found(scan.after_found, signatures, scan.explainable)
        launch.derived_["log_failure_signature"] = w.signature
        launch.derived_["log_failure_class"] = w.failure_class
        launch.derived_["log_failure_named"] = w_named
        launch.derived_["log_failure_after_ready_signature"] = r.signature
        launch.derived_["log_failure_after_ready_class"] = r.failure_class
        launch.derived_["log_failure_after_ready_named"] = r_named


def _context_refused_requests(
    trusted: Sequence[Evidence],
    superseded: set[str],
    attempt: int,
    params: Mapping[str, Any],
    store: ArtifactStore,
    launched: tuple[str, int],
    ways: Collection[str],
) -> list[int | None]:
    """The requests of attempt ``attempt``'s harness runs recorded refused for the campaign's context that
    the engine took and did not answer with a 4xx (a stream cut after a 2xx status, none, a 5xx), each
    shown by its own record held to the launch's context ``launched`` and the ways its engine counts a
    prompt, ``ways`` (``_context_refusal_unshown``), as the prompt tokens it records
    (``ledger.answers.prompt_tokens_exact``; None: not counted — the engine refused its sizing too —, or
    counted as a lower bound, its text alone: never the engine's number). Read from the stored
    per-request record of each ``gate.result`` of a harness (benchmark, semantic) of the subject, not
    superseded, that the log took in that attempt and whose claimed time picks it too, and whose record reads
    back with no problem (``artifact_problem`` None); any other result counts none."""
    out: list[int | None] = []
    for e in trusted:
        gate = e.payload.get("gate")
        if e.kind != "gate.result" or e.derived_ is None or e.id in superseded or not e.in_subject:
            continue
        if e.derived_.get("attempt_logged") != attempt or e.derived_.get("attempt") != attempt:
            continue
        if e.derived_.get("artifact_problem") is not None or gate not in ("benchmark", "semantic"):
            continue
        name = _BENCHMARK_REQUESTS if gate == "benchmark" else _SEMANTIC_REQUESTS
        named = [a for a in e.artifacts if a.get("name") == name]
        if len(named) != 1:
            continue
        found: list[int | None] = []
        try:
            for n, r in enumerate(_artifact_records(store, named[0]), start=1):
                status = r.get("http_status")
                if r.get("refusal") != REFUSAL_CONTEXT or (type(status) is int and 400 <= status <= 499):
                    continue
                if _context_refusal_unshown(r, n, params, launched, ways) is not None:
                    continue
                found.append(prompt_tokens_exact(r.get("context")))
        except (_Unreadable, LedgerError):
            continue
        out += found
    return out


def _unanswered(e: Evidence) -> bool | None:
    """Whether ``e`` failed for lack of an answer: a ``health.probe`` that is not ok, records no HTTP
    status and whose error says its connection was refused, reset or closed (``unanswered_error``: never a
    timeout — a hang is the engine's); a ``gate.result`` whose harness run an engine fault stopped
    (``bounds.outcome`` "fault") where every request the engine faulted was unanswered so
    (``bounds.fault_kind`` "unanswered": never an HTTP 5xx or another answer, never a timeout; a record
    without it is no such run — fail closed). False for an entry that shows the engine answered (a probe
    with an HTTP status, a harness run that completed); None for any other entry (it says neither, or its
    failure is the engine's whatever ended it)."""
    if e.kind == "health.probe":
        if e.payload.get("http_status") is not None:
            return False
        if e.derived.get("ok"):
            return None
        return True if unanswered_error(e.payload.get("error")) else None
    if e.kind == "gate.result":
        bounds = e.payload.get("bounds")
        outcome = bounds.get("outcome") if isinstance(bounds, dict) else None
        if outcome == "fault":
            if bounds.get("fault_kind") != FAULT_UNANSWERED:  # type: ignore[union-attr]
                return None
            return True if _unanswered_claim_problem(e) is None else None
        return False if outcome == "completed" else None
    return None


# A health probe's error (``collectors/probe.py``: ``f"{type(e).__name__}: {e}"`` of the httpx error; the
# readiness poll, ``collectors/readiness.py``, records the bare name) that says its request timed out: the
# engine took it and answered nothing in time. Only an engine held from outside (``_held_from_outside``) is
# excused one; a hang is otherwise the engine's.
_TIMEOUT_ERROR = re.compile(r"(?:ReadTimeout|WriteTimeout|ConnectTimeout|PoolTimeout)(?::|$)")


def _unanswered_while_held(e: Evidence) -> bool:
    """Whether ``e`` got no answer in a way an engine held from outside (``_held_from_outside``) explains,
    beyond ``_unanswered``: a ``health.probe`` that is not ok, records no HTTP status and whose error is a
    timeout (``_TIMEOUT_ERROR``, matched at the start) or a refused, reset or closed connection
    (``unanswered_error``, the bare name the readiness poll records, ``ReadError``, too); a
    ``gate.result`` whose harness run an engine fault stopped (``bounds.outcome`` "fault") where the
    gravest fault of its requests was a timeout (``bounds.fault_kind`` "timeout": none answered that it
    failed), with its per-request record stored (``_request_record_missing``: what stopped it can be read
    back; ``_requests_shown`` holds the fault kind to it — a record it contradicts is an ``artifact_problem``,
    never cut). False otherwise — an answer (an HTTP status, an error object) is never the hold's."""
    if e.kind == "health.probe":
        error = e.payload.get("error")
        if e.payload.get("http_status") is not None or e.derived.get("ok") or not isinstance(error, str):
            return False
        return _TIMEOUT_ERROR.match(error) is not None or unanswered_error(error)
    if e.kind == "gate.result":
        bounds = e.payload.get("bounds")
        return (
            isinstance(bounds, dict)
            and bounds.get("outcome") == "fault"
            and bounds.get("fault_kind") == FAULT_TIMEOUT
            and _request_record_missing(e) is None
        )
    return False


def _max_concurrency(bounds: Any) -> int | None:
    """The largest concurrency level a benchmark result records (``bounds.concurrency``: whole numbers
    above 0); None where it records none or mistypes one."""
    levels = bounds.get("concurrency") if isinstance(bounds, dict) else None
    if not isinstance(levels, list) or not levels:
        return None
    ints = [c for c in levels if type(c) is int and c > 0]
    return max(ints) if len(ints) == len(levels) else None


def _unanswered_claim_problem(e: Evidence) -> str | None:
    """Why a harness result's claim that the requests its engine faulted went unanswered
    (``bounds.fault_kind`` "unanswered") is not one its own record can bear out, before that record is read
    back (``_harness_artifact_problem`` reads it): a run stopped from outside leaves unanswered only the
    requests in flight when the stop came — a benchmark's ``counts.unanswered`` must be a whole number from
    1 to its largest concurrency level (``bounds.concurrency``); and either harness must store its
    per-request record (``_request_record_missing``, one rule for both: a result without it — a semantic
    record written before it was kept, a benchmark that dropped it — shows no HTTP status per request, so
    what stopped the run cannot be read back: fail closed). None: it can."""
    missing = _request_record_missing(e)
    if missing is not None:
        return missing
    if e.payload.get("gate") != "benchmark":
        return None
    counts = e.payload.get("counts")
    n = counts.get("unanswered") if isinstance(counts, dict) else None
    most = _max_concurrency(e.payload.get("bounds"))
    if type(n) is not int or n < 1:
        return f"counts.unanswered {n!r} is no whole number above 0"
    if most is None:
        return (
            "bounds.concurrency names no concurrency level: how many requests were in flight cannot be told"
        )
    if n > most:
        return (
            f"counts.unanswered {n} is more than the {most} requests its largest concurrency level has in "
            "flight: a stop from outside leaves unanswered only the requests in flight when it came"
        )
    return None


def _failed_at(e: Evidence) -> datetime | None:
    """When ``e`` failed, as far as the log can know: a probe's observed time (its ``collected_at``, taken
    after its request returned, never after the log took it); a harness run's ``bounds.fault_at`` (when it
    saw the fault), never after its own observed time. None where a harness run records no time that
    parses (fail closed: no stop can be shown to come first)."""
    if e.kind != "gate.result":
        return e.observed_time
    bounds = e.payload.get("bounds")
    at = bounds.get("fault_at") if isinstance(bounds, dict) else None
    if not isinstance(at, str):
        return None
    try:
        return min(parse_time(at), e.observed_time)
    except LedgerError:
        return None


def _stopped_at(launch: Evidence) -> datetime | None:
    """When the stop from outside reached ``launch``'s engine, as the collector saw it: the earlier of the
    time its leader process ended (``details.exited_at``) and the time its logs first showed a stop marker
    after readiness (``details.stop_marker_at``); None where it records neither (a launch recorded before
    they were kept: no stop time to compare a failure with — fail closed) or one that does not parse."""
    raw = launch.payload.get("details")
    details: dict[str, Any] = raw if isinstance(raw, dict) else {}
    times: list[datetime] = []
    for key in ("exited_at", "stop_marker_at"):
        v = details.get(key)
        if v is None:
            continue
        if not isinstance(v, str):
            return None
        try:
            times.append(parse_time(v))
        except LedgerError:
            return None
    return min(times) if times else None


def stop_cut_tolerance(params: Mapping[str, Any]) -> float | None:
    """``params.stop_cut_tolerance_s``: how much earlier than the recorded stop a failure may be seen and
    still be the stop's (a finite number ≥ 0); None where the policy names none or mistypes it (nothing
    is excused: fail closed)."""
    v = params.get("stop_cut_tolerance_s")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        return None
    return float(v)


def stop_classes(params: Mapping[str, Any], name: str) -> frozenset[str] | None:
    value = params.get(name)
    if not isinstance(value, list) or not all(isinstance(c, str) for c in value):
        return None  # a policy that names none (or mistypes them) excuses nothing: fail closed
    return frozenset(value)


def _held_from_outside(launch: Evidence, params: Mapping[str, Any]) -> bool:
    """Whether ``launch`` was held from outside (suspended: SIGSTOP, a debugger, a cgroup freezer): its
    decisive signature, as the policy reads what the launch stored (``log_failure_signature``: its logs and
    ``failure_detail``, where the collector states what it found — never the entry's ``failure_signature``
    claim), is one of ``params.held_stop_signatures``. Such an engine answers nothing while held, and
    closes no connection: a request that timed out then is the hold's as much as a refused one. A policy
    that names none (or mistypes them) has none (fail closed)."""
    held = stop_classes(params, "held_stop_signatures")
    return held is not None and launch.derived.get("log_failure_signature") in held


def _stopped_from_outside(
    launch: Evidence, params: Mapping[str, Any], unclean: Mapping[str, str | None] | None = None
) -> str | None:
    """Why ``launch`` (a ready one) was stopped from outside, in a way the policy classes as a stop
    (``params.stop_classes``), from its recorded end (``end_failure_class``: the status-only signature of
    its end, where the launch does not attribute the end to the collector's own stop): a signal the
    collector saw end the process (``signal`` a whole number, no ``exit_code``: an exit status 143 is the
    engine's own exit, no signal); an exit 0 after the engine's own shutdown line with nothing of its own
    before it (``stopped-from-outside``: ``RunOutcome.stop_marked``, read by the policy from the stored
    logs — llama-cpp-python on SIGINT); or an engine held from outside (``_held_from_outside``: its end
    is then the hold's, whatever signal or lease ended it) — with no failure in its stored logs the policy
    does not excuse (a class in ``params.fault_classes`` anywhere, or one outside ``params.stop_classes``
    after readiness) and logs that show a clean run after readiness (``unclean``: every log read, no
    Python traceback); None otherwise — a SIGKILL (class resource: the OOM killer) is no such stop, unless
    its end is a kill from outside (``params.outside_kill_signatures``: ``end_failure_class`` then its)."""
    stop = stop_classes(params, "stop_classes")
    faults = stop_classes(params, "fault_classes")
    d = launch.derived
    if stop is None or faults is None or launch.payload.get("ready") is not True:
        return None
    sig, code = launch.payload.get("signal"), launch.payload.get("exit_code")
    held = _held_from_outside(launch, params)
    if held:
        how = (
            f"was held from outside ({d.get('log_failure_signature')}, class {d.get('log_failure_class')}, "
            "as its stored logs and failure_detail show)"
        )
    elif type(sig) is int and sig > 0 and code is None:  # an exit status (143 too) is the engine's own exit
        how = f"ended by signal {sig}"
    elif type(code) is int and code == 0 and sig is None:
        # its end class below decides: stopped-from-outside only where the policy read the shutdown line
        # from the stored logs (``_LogScan.stop_marked``); any other exit 0 is the engine's own end
        how = "ended by exit 0 after its shutdown line"
    else:
        return None
    if unclean is None or launch.id not in unclean or unclean[launch.id] is not None:
        return None
    # a held engine's hold is its decisive signature (its class a stop's too); an end the collector's own
    # stop accounts for (none judged) is then no other end of its own
    end = d.get("end_failure_class")
    if not (end in stop or (held and end is None and d.get("log_failure_class") in stop)):
        return None
    if d.get("log_failure_class") is not None and d.get("log_failure_class") in faults:
        return None
    after = d.get("log_failure_after_ready_class")
    if after is not None and after not in stop:
        return None
    if launch.payload.get("lease_expired") is True and not held:  # a hung engine the lease cut
        return None
    if held:
        return f"launch {launch.id[:12]} (attempt {d.get('attempt')}) {how}: a stop from outside"
    return (
        f"launch {launch.id[:12]} (attempt {d.get('attempt')}) {how} "
        f"({d.get('end_failure_signature')}, class {d.get('end_failure_class')}: a stop from outside, "
        "params.stop_classes)"
    )


# the stop reasons under which the collector itself stopped a running engine (``details.stop_sent_at``: when
# it sent its stop): its own stops, and its lease watchdog's (``lease-expired`` with the time it was sent; the
# lease keeper's, which sends none, is no such stop)
_OWN_STOP_REASONS = (*COLLECTOR_STOPPED, "lease-expired")
# ``time_to_ready_s`` is recorded to the millisecond (collectors/launch.py rounds it): a readiness time read
# from it may lie that much after the true one
_READY_ROUNDING = timedelta(milliseconds=1)


def _ready_time(launch: Evidence) -> datetime | None:
    """When ``launch``'s engine became ready, as the launch records it: its ``started_at`` plus its
    ``time_to_ready_s`` (a finite number ≥ 0); None where either is missing, mistyped or does not parse."""
    started, took = launch.payload.get("started_at"), launch.payload.get("time_to_ready_s")
    if not isinstance(started, str) or isinstance(took, bool) or not isinstance(took, (int, float)):
        return None
    if not math.isfinite(took) or took < 0:
        return None
    try:
        return parse_time(started) + timedelta(seconds=took)
    except (LedgerError, OverflowError):
        return None


def _stop_grace(launch: Evidence) -> float | None:
    """How long the collector gave ``launch``'s engine to end after its stop before it killed it, as the
    launch records it (``details.grace_seconds``, the campaign's ``[engine] grace_seconds``: a finite number
    ≥ 0); None where it records none or mistypes it."""
    raw = launch.payload.get("details")
    v = raw.get("grace_seconds") if isinstance(raw, dict) else None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        return None
    return float(v)


def _own_stop_cut(
    launch: Evidence,
    failed: datetime | None,
    unclean: Mapping[str, str | None],
    tolerance: float,
    answered_seen: datetime | None,
) -> str | None:
    """Why a failure for lack of an answer (a refused, reset or closed connection: never a timeout, never an
    answer) seen at ``failed`` is the collector's own stop of ``launch``'s engine, not the engine: the
    launch (a ready one) records that the collector stopped it (``details.stop_reason`` one of
    :data:`_OWN_STOP_REASONS`) and when it sent that stop (``details.stop_sent_at``), that time fits the
    launch's other recorded times, the failure was seen while the stop was under way, and its stored logs,
    every one read back, show a clean run after readiness (``unclean``); None otherwise (fail closed: the
    failure is the engine's). The stop fits where it was sent after the launch's readiness
    (``_ready_time``), no later than its recorded end (``_stopped_at``: its leader's end or an earlier stop
    marker; a launch that records neither has no end to compare with; its ``ended_at`` no earlier either),
    and that end came within the stop's grace (``_stop_grace``: the collector killed the engine then) plus
    ``tolerance`` (``params.stop_cut_tolerance_s``) after it; the failure was seen at or after the stop and
    no later than that end plus ``tolerance``; and no entry of the attempt shows an answer observed after
    the stop (``answered_seen``: the latest such observed time — an engine that answered then was not
    being stopped). Read from the launch entry and its logs, never the failed entry's own claim (a
    probe's ``phase``). A lease-expired launch is still judged a hang by runtime-stability: this excuses
    only what the stop itself cut."""
    raw = launch.payload.get("details")
    details: dict[str, Any] = raw if isinstance(raw, dict) else {}
    reason, sent = details.get("stop_reason"), details.get("stop_sent_at")
    if (
        launch.payload.get("ready") is not True
        or reason not in _OWN_STOP_REASONS
        or not isinstance(sent, str)
    ):
        return None
    if failed is None or launch.id not in unclean or unclean[launch.id] is not None:
        return None
    try:
        at = parse_time(sent)
    except LedgerError:
        return None
    ready, end, grace = _ready_time(launch), _stopped_at(launch), _stop_grace(launch)
    if ready is None or end is None or grace is None or at < ready - _READY_ROUNDING:
        return None  # a stop before the engine was ready, or a launch that cannot say when it was
    ended = launch.payload.get("ended_at")
    if ended is not None:
        try:
            if not isinstance(ended, str) or parse_time(ended) < at:
                return None
        except LedgerError:
            return None
    slack = timedelta(seconds=tolerance)
    if end < at or end > at + timedelta(seconds=grace) + slack:
        return None  # an end before the stop, or after the collector would have killed the engine
    if failed < at or failed > end + slack:
        return None  # a failure before the stop is the engine's; one long after its end no stop's doing
    if answered_seen is not None and answered_seen > at:
        return None  # the engine answered after the stop the launch claims: it was not being stopped
    return (
        f"launch {launch.id[:12]} (attempt {launch.derived.get('attempt')}) was being stopped by the "
        f"collector itself (stop reason {reason}, its stop sent {sent}, the engine ended "
        f"{format_time(end)}): the failure, seen {format_time(failed)}, came while the collector's own stop "
        "was under way"
    )


def _mark_stop_cuts(
    trusted: Sequence[Evidence],
    launch_of: Mapping[int, Evidence],
    params: Mapping[str, Any],
    unclean: Mapping[str, str | None],
) -> None:
    """``e.derived.stop_cut`` of a ``health.probe`` or ``gate.result`` that failed for lack of an answer
    (``_unanswered``) because its engine was stopped from outside: the launch of its attempt — the same
    attempt when it was collected and when the log took it — ended by a signal the policy classes as a stop
    (``_stopped_from_outside``), and no entry of that attempt logged after it shows the engine answering
    (an answer after the failure shows the engine still served then: the failure came before the stop and
    is the engine's), and the failure was not seen before the stop reached the engine (``_failed_at`` no
    earlier than ``_stopped_at`` less ``params.stop_cut_tolerance_s``: a failure before the signal cannot
    be its doing). The text names the launch and its end; None otherwise. A failure the engine showed with
    an answer (an HTTP 5xx, a wrong answer) is never such a cut, nor is a timeout (a hang) — except where
    the launch was held from outside (``_held_from_outside``: suspended, its processes found stopped when
    the collector stopped it): a held engine answers nothing and closes nothing, so a request that timed
    out (``_unanswered_while_held``) is cut as a refused one is; and since when the hold began cannot be
    told, so is every such failure of the attempt with no answer logged after it (no stop time to compare
    it with). ``e.derived.stop_cut_held``: whether that launch was so held (False wherever ``stop_cut`` is
    None): a held run's timed-out requests are the hold's whatever fault kind it ended with — a run the
    collector's kill then cut (fault kind "unanswered") as much as one a timeout stopped."""
    tolerance = stop_cut_tolerance(params)
    if tolerance is None:
        return
    answered_last: dict[int, int] = {}  # attempt → the seq of the last entry of it showing an answer
    answered_seen: dict[int, datetime] = {}  # attempt → the latest observed time of such an entry
    for e in trusted:
        if e.derived_ is None or e.kind not in ("health.probe", "gate.result"):
            continue
        attempt = e.derived_.get("attempt_logged")
        if isinstance(attempt, int) and attempt > 0 and _unanswered(e) is False:
            answered_last[attempt] = max(answered_last.get(attempt, -1), e.seq)
            seen = answered_seen.get(attempt)
            answered_seen[attempt] = e.observed_time if seen is None else max(seen, e.observed_time)
    for e in trusted:
        if e.derived_ is None or not e.in_subject:
            continue
        unanswered = _unanswered(e)
        if unanswered is False:
            continue
        attempt = e.derived_.get("attempt")
        if not isinstance(attempt, int) or attempt <= 0 or e.derived_.get("attempt_logged") != attempt:
            continue
        launch = launch_of.get(attempt)
        if launch is None or answered_last.get(attempt, -1) > e.seq:
            continue
        held = _held_from_outside(launch, params)
        if unanswered is not True and not (held and _unanswered_while_held(e)):
            continue
        if e.derived_.get("artifact_problem") is not None:
            continue  # its stored record contradicts what it counts (no answer among them): no excuse
        failed, stopped = _failed_at(e), _stopped_at(launch)
        own = (
            _own_stop_cut(launch, failed, unclean, tolerance, answered_seen.get(attempt))
            if unanswered is True and not held
            else None
        )
        if own is not None:
            e.derived_["stop_cut"], e.derived_["stop_cut_held"] = own, False
            continue
        if not held and (failed is None or stopped is None or (stopped - failed).total_seconds() > tolerance):
            continue
        why = _stopped_from_outside(launch, params, unclean)
        if why is not None:
            e.derived_["stop_cut"] = why
            # the cut's launch was held from outside (read from what the launch stored, never the entry's
            # claim): every request of the run timed out in the hold is the hold's, whatever fault kind the
            # run ended with (rule stopped-from-outside subtracts ``counts.timed_out``)
            e.derived_["stop_cut_held"] = held


def _ran_again_in(
    trusted: Sequence[Evidence], jobs: _JobLog, superseded: Container[str]
) -> Callable[[Evidence, Evidence], bool]:
    """Whether the newer run ``newer`` of a step's measurement shows the failed run ``failed`` run again,
    derived from the log, never from either entry's claim (its ref job, its collected_at): ``newer``
    belongs to a run of the same campaign (``_JobLog.run_open_at``: the run open when the log took it)
    whose running entry the log took after ``failed`` — a later job, not the failure's own, nor one that
    was already running beside it — and that run logged, not superseded and of the evaluated subject, its
    own entry of each kind ``STEP_OWN_EVIDENCE`` names for the failed result's gate. A result logged in
    the failure's own job, outside every job, or in a later job without the step's own evidence stands in
    for nothing: both count, and the failure decides."""
    own: dict[str, set[str]] = {}  # running entry of a run → the kinds of step evidence the run logged
    kinds = frozenset().union(*STEP_OWN_EVIDENCE.values())
    for e in trusted:
        if e.kind in kinds and e.in_subject and e.id not in superseded:
            run = jobs.run_open_at(e.subject.get("campaign"), e.seq)
            if run is not None:
                own.setdefault(run.id, set()).add(e.kind)

    def ran_again(failed: Evidence, newer: Evidence) -> bool:
        campaign = failed.subject.get("campaign")
        if campaign is None or newer.subject.get("campaign") != campaign:
            return False
        run = jobs.run_open_at(campaign, newer.seq)
        if run is None or run.seq <= failed.seq:
            return False
        gate = failed.payload.get("gate")
        need = STEP_OWN_EVIDENCE.get(gate, frozenset()) if isinstance(gate, str) else frozenset()
        return need <= own.get(run.id, set())

    return ran_again


def _mark_newer_runs(
    trusted: Sequence[Evidence],
    withdrawn: Container[str],
    held_back: Mapping[str, str],
    *,
    ran_again: Callable[[Evidence, Evidence], bool] | None = None,
) -> dict[str, list[Evidence]]:
    """``e.derived.newer_run`` of each ``gate.result`` of the evaluated subject that ran (passed or failed: a
    gate never run, or not authorized, measured nothing) and that no rule withdraws (``withdrawn``): whether
    it is not among the newest runs of its measurement (``_same_measurement``) that ran and are not
    withdrawn — "the newest" judged both ways (``newest_entries``: the one the log took last and every one
    observed last; a run pushed late from a spool is not newer than one observed after it) — whatever their
    outcome, review or acceptance: a run whose credit a rule only withholds (failed, unreviewed, unaccepted,
    self-superseded) is still the engine's newest measurement, but a withdrawn one — superseded by another
    key, output logged after its job ended and claiming a time after the end — is not evidence of the
    subject at all. True too for a newest run in ``held_back`` (id → why): another of the newest runs of its
    measurement is not credited, and every newest run must hold (``_held_back_runs``).
    A failed run, though, is not newer-run merely for a newer result (fix 172, audit 106 f2): only where
    ``ran_again`` (``_ran_again_in``) holds of it and each of the newest runs — the step run again in a
    later job of its campaign, with its own evidence — does a newer run stand in for the failure; else the
    failure stays a newest measurement (False: it counts). None: no run again can be told, a failure stays.
    ``e.derived.newer_run_named`` names the newer run(s). False for the newest, and for every other entry.

    Returns, for each newest run, the newest runs of its measurement (itself among them).

    Runs are grouped by what ``_same_measurement`` compares (their ``_run_spec``): runs of one spec are
    runs of one measurement, and a spec is compared only with the other specs of its gate that leave a
    field unread (two specs that record every field readably are one measurement only where equal) — so
    a campaign of many runs of a few specs costs one pass, not every run against every other."""
    runs = [
        (_run_spec(e.payload), e)
        for e in trusted
        if e.kind == "gate.result"
        and e.in_subject
        and e.id not in withdrawn
        and e.payload.get("status") in ("passed", "failed")
    ]
    newest_by_spec = _newest_by_spec(runs)
    newest_of: dict[str, list[Evidence]] = {}
    for spec, run in runs:
        newest = newest_by_spec[spec]
        assert run.derived_ is not None
        if run not in newest:
            if run.payload.get("status") == "failed" and (
                ran_again is None or not all(ran_again(run, n) for n in newest)
            ):
                continue  # no newer run shows the failed step run again: the failure stands (fix 172)
            run.derived_["newer_run"] = True
            run.derived_["newer_run_named"] = "; ".join(
                f"run {n.id[:12]} ({newest_text(n, newest)})" for n in newest
            )
            continue
        newest_of[run.id] = newest
        if run.id in held_back:
            run.derived_["newer_run"] = True
            run.derived_["newer_run_named"] = held_back[run.id]
    return newest_of


def _newest_by_spec(
    runs: Sequence[tuple[tuple[Any, ...], Evidence]],
) -> dict[tuple[Any, ...], list[Evidence]]:
    """For each spec of ``runs`` (``(_run_spec, run)``), ``newest_entries`` of every run whose spec may be
    of the same measurement (``_same_measurement``). A spec that records every field readably matches
    another such spec only where equal: it is compared with the specs of its gate that leave a field
    unread, and the runs of equal specs are read from one group."""
    by_spec: dict[tuple[Any, ...], list[Evidence]] = {}
    for spec, run in runs:
        by_spec.setdefault(spec, []).append(run)
    by_gate: dict[Any, list[tuple[Any, ...]]] = {}
    for spec in by_spec:
        by_gate.setdefault(spec[0], []).append(spec)
    out: dict[tuple[Any, ...], list[Evidence]] = {}
    for specs in by_gate.values():
        partial = [s for s in specs if any(f is _UNREAD for f in s[1:])]
        for spec in specs:
            # a readable spec: itself and the partial ones it matches; a partial one: any of its gate
            others = specs if any(f is _UNREAD for f in spec[1:]) else [spec, *partial]
            same = [s for s in others if _same_measurement(spec, s)]
            out[spec] = newest_entries(r for s in same for r in by_spec[s])
    return out


def _held_back_runs(
    newest_of: Mapping[str, list[Evidence]], rejected: Mapping[str, Rejection]
) -> dict[str, str]:
    """The newest runs (``_mark_newer_runs``) that must not be credited although no rule rejected them:
    another of the newest runs of their measurement — the one logged last, or one observed last — is not
    credited (a rule rejected it), and every newest run must hold. Id → the other runs, named with why
    each is among the newest and the rule that rejected it."""
    out: dict[str, str] = {}
    for run_id, newest in newest_of.items():
        run = next(n for n in newest if n.id == run_id)
        if run_id in rejected or run.payload.get("status") != "passed":
            continue
        unheld = [n for n in newest if n.id != run_id and n.id in rejected]
        if unheld:
            out[run_id] = "; ".join(
                f"run {n.id[:12]} ({newest_text(n, newest)}), not credited: {rejected[n.id].rule}"
                for n in unheld
            )
    return out


def _mark_newest(entries: Sequence[Evidence]) -> None:
    """``e.derived.newest`` of the host probes and model pins a verdict judges (``entries``: the credited
    ones and those kept as evidence against): whether it is among ``newest_entries`` of its kind and host —
    the one the log took last, or one observed last — with ``newest_named`` saying which; the gates judge
    the host and the model's files as every such entry shows them. For a newest host probe,
    ``gpus_gone``: the GPUs another of those probes lists that it does not (``ledger.devices``: by UUID
    where both record one, else by index), each named with a probe that saw it (``gpus_gone_named``) —
    a GPU earlier probes saw that the newest does not list is gone from the host (fell off the bus, a reset
    holds it), and a probe pushed late does not bring it back."""
    groups: dict[tuple[str, str | None], list[Evidence]] = {}
    for e in entries:
        if e.kind in HOST_SCOPED_KINDS:
            groups.setdefault((e.kind, _host_of(e)), []).append(e)
    for (kind, _), group in groups.items():
        newest = newest_entries(group)
        for n in newest:
            if n.derived_ is None:
                n.set_derived(dict(NO_DERIVED))
            assert n.derived_ is not None
            n.derived_["newest"] = True
            n.derived_["newest_named"] = newest_text(n, newest)
            if kind != "host.probe":
                continue
            gone: dict[str, str] = {}
            for other in group:
                if other is n:
                    continue
                for place, gpu in gpus_not_listed(
                    other.payload.get("gpus") or [], n.payload.get("gpus") or []
                ):
                    name = gpu_name(gpu, place)
                    gone.setdefault(
                        name,
                        f"{name} (listed by host probe {other.id[:12]}: seq {other.seq}, "
                        f"observed {_fmt(other.observed_time)})",
                    )
            n.derived_["gpus_gone"] = list(gone)
            n.derived_["gpus_gone_named"] = "; ".join(gone.values())


_UNREAD = ("unread",)  # a spec field a run leaves out or records with the wrong type


def _count_field(v: Any) -> Any:
    return typed(v) if isinstance(v, int) and not isinstance(v, bool) else _UNREAD


def _run_spec(p: Mapping[str, Any]) -> tuple[Any, ...]:
    """What makes two ``gate.result`` entries runs of the same measurement: the gate and, as recorded, the
    corpus and spec (requests, concurrency levels, repetitions), each ``_UNREAD`` where the run leaves it
    out or records it with the wrong type. A run of another spec — a diagnostic — is another measurement
    (and its own rules judge it); see ``_same_measurement``."""
    bounds = p.get("bounds")
    counts = p.get("counts")
    if not isinstance(bounds, dict):
        bounds = {}
    if not isinstance(counts, dict):
        counts = {}
    digest = bounds.get("corpus_digest")
    levels = bounds.get("concurrency")
    levels_ok = isinstance(levels, list) and all(_count_field(v) is not _UNREAD for v in levels)
    return (
        typed(p.get("gate")),
        typed(digest) if isinstance(digest, str) else _UNREAD,
        _count_field(counts.get("requests")),
        typed(levels) if levels_ok else _UNREAD,
        _count_field(bounds.get("repetitions")),
    )


def _same_measurement(older: tuple[Any, ...], newer: tuple[Any, ...]) -> bool:
    """Is a newer run (by ``_run_spec``) possibly a run of the older one's spec? Of the same gate, and no
    spec field both record readably differs: a field left out or mistyped says nothing against it, so a
    newer failed run that drops its corpus digest still hides the older pass (fail closed)."""
    return older[0] == newer[0] and all(
        a == b or a is _UNREAD or b is _UNREAD for a, b in zip(older[1:], newer[1:], strict=True)
    )


def _devices_not_on_probes(
    trusted: Sequence[Evidence], superseded: Container[str], launches: Sequence[Evidence]
) -> None:
    """``e.derived.launch_devices_missing`` of each host probe: every GPU the subject's launches were given
    (each item of their recorded ``*_VISIBLE_DEVICES``: an index, or a UUID such as ``GPU-…`` / ``MIG-…``)
    that the probe does not list (``ledger.devices.device_of``: the rule the collector's host gate refuses
    a launch by, too), as ``VAR=item (launch …)``. A campaign that gives its engine GPU 7 on a host whose
    probe lists GPU 0 ran on no GPU it names (a CPU build runs on regardless); a MIG instance is found only
    as a MIG device the probe lists under a GPU (``mig_devices``, with its ``MIG-`` UUID) — a probe that
    records none does not list it (fail closed)."""
    given: list[tuple[Evidence, str, str]] = []
    for launch in launches:
        env = launch.payload.get("env")
        if isinstance(env, dict):
            given += [(launch, var, item) for var, item in visible_device_items(env)]
    if not given:
        return
    for e in trusted:
        if e.kind != "host.probe" or e.derived_ is None or e.id in superseded:
            continue
        listed = e.payload.get("gpus") or []
        missing = {
            f"{var}={item} (launch {launch.id[:12]})"
            for launch, var, item in given
            if device_of(item, listed) is None
        }
        e.derived_["launch_devices_missing"] = sorted(missing)


_PCI = re.compile(r"(?:PCI:)?([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.[0-7])?")


def _pci(text: Any) -> str | None:
    """A PCI address as domain:bus:device (``0000:3b:00``) from NVRM's ``PCI:0000:3b:00``, NVML's
    ``00000000:3B:00.0`` or sysfs's ``0000:3b:00.0``; None when it is not one."""
    if not isinstance(text, str):
        return None
    m = _PCI.fullmatch(text.strip())
    if m is None:
        return None
    return f"{int(m[1], 16):04x}:{m[2].lower()}:{m[3].lower()}"


def _launch_devices(launch: Evidence, lists: list[list[Any]] | None) -> set[str] | None:
    """The PCI addresses of the GPUs a launch was given (its recorded ``*_VISIBLE_DEVICES``, by index or
    UUID — a MIG instance's is its GPU's — a CUDA index only with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, and one
    such variable only; ``ledger.devices.device_of``), through every GPU list the host's probes record —
    whenever taken, of whichever machine filed under the host: indexes move when a GPU falls off the bus,
    and which list held at the run cannot be told from a later one, so an index names each GPU any list
    gives it. None when that cannot be told —
    no such variable (every GPU visible), a host that records no GPU list, or an item some list does not
    name: then every event of the host is the launch's (fail closed)."""
    env = launch.payload.get("env")
    if not isinstance(env, dict):
        return None
    named = [k for k in VISIBLE_DEVICES if k in env]
    if len(named) != 1:
        # none (every GPU visible), or several: they stack (ROCR then HIP; a container's
        # NVIDIA_VISIBLE_DEVICES then CUDA's indexes within it): which GPU an index names cannot be told
        return None
    visible = env[named[0]]
    if not isinstance(visible, str) or not lists:
        return None
    # CUDA numbers devices fastest first unless told PCI_BUS_ID: only then is its index the probe's (the
    # driver's, in PCI bus order); a UUID names the GPU whatever the order
    cuda_order_known = env.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID"
    items = [v.strip() for v in visible.split(",")]
    cuda_index = named[0] == "CUDA_VISIBLE_DEVICES" and any(index_text(v) for v in items)
    if cuda_index and not cuda_order_known:
        return None
    out: set[str] = set()
    for item in (v.strip() for v in visible.split(",")):
        for gpus in lists:
            # a MIG instance is on the GPU that lists it: its events are that GPU's (``device_of``)
            found = device_of(item, gpus)
            address = _pci(found.get("pci_bus_id")) if found is not None else None
            if address is None:
                return None
            out.add(address)
    return out or None


def _claimed_start(e: Evidence) -> datetime:
    """When an entry began, as far as the log can know: its ``started_at`` where it claims an earlier time
    than when it was observed (``observed_time``: its ``collected_at``, never after the log took it), else
    that — a start that does not parse claims nothing."""
    try:
        return min(parse_time(e.payload["started_at"]), e.observed_time)
    except (KeyError, TypeError, LedgerError):
        return e.observed_time


class _HostGpuEvents:
    """Every GPU event of the trusted, not superseded kernel logs, per entry and per host with its time."""

    def __init__(self) -> None:
        self.by_entry: dict[str, list[tuple[datetime | None, dict[str, Any]]]] = {}
        self.by_host: dict[str, list[tuple[datetime, dict[str, Any], str | None]]] = {}
        # host → the events its logs record without a time, each with the window its log read: from the
        # log's ``since`` (None: unbounded) to when the log was observed — the event lies somewhere in it
        self.untimed: dict[str, list[tuple[datetime | None, datetime, dict[str, Any], str | None]]] = {}
        self.gpus: dict[str, list[list[Any]]] = {}  # host → the GPU list of each of its host probes
        # host → the window (since, seen) of each kernel log read, and the unreadable ones with their id
        self.read: dict[str, list[tuple[datetime | None, datetime]]] = {}
        self.unread: dict[str, list[tuple[datetime | None, datetime, str]]] = {}

    @staticmethod
    def _start(launch: Evidence, job_start: datetime | None) -> datetime:
        """Where a launch's run starts: the earlier of its ``started_at`` (never after the log took it) and
        its job's start."""
        start = _claimed_start(launch)
        return start if job_start is None else min(start, job_start)

    def unread_during(self, launch: Evidence, job_start: datetime | None, end: datetime) -> list[str]:
        """The kernel logs of the launch's host recorded as unreadable whose window overlaps its run
        (``_derive``: kernel_logs_unread_during_run) — unless a readable log of the host covers the whole run:
        the GPU events of that run are then unknown, not none."""
        host = _host_of(launch)
        if not host or host not in self.unread:
            return []
        start = self._start(launch, job_start)
        if any((since is None or since <= start) and seen >= end for since, seen in self.read.get(host, ())):
            return []
        return [eid for since, seen, eid in self.unread[host] if _overlaps(since, seen, start, end)]

    def during(self, launch: Evidence, job_start: datetime | None, end: datetime) -> list[dict[str, Any]]:
        """The events of the launch's host whose time lies in its run (``_derive``: gpu_events_during_run):
        from the earlier of its ``started_at`` (never after the log took it) and its job's start."""
        host = _host_of(launch)
        if not host or (host not in self.by_host and host not in self.untimed):
            return []
        start = self._start(launch, job_start)
        devices = _launch_devices(launch, self.gpus.get(host))
        timed = [
            {**fact, "time": format_time(t)}
            for t, fact, device in self.by_host.get(host, ())
            if start <= t <= end and (devices is None or device is None or device in devices)
        ]
        # an event without a time cannot be shown outside the run where its log's window overlaps it
        untimed = [
            {**fact, "time": None}
            for since, seen, fact, device in self.untimed.get(host, ())
            if _overlaps(since, seen, start, end) and (devices is None or device is None or device in devices)
        ]
        return timed + untimed


NAMED_EVENTS_AT_MOST = 5  # kernel-log events a reason names (``gpu_events_named``); the rest are counted


def _named_events(facts: list[dict[str, Any]], engine_pid: Any = None) -> str:
    """The kernel-log events a gate's reason names (``_derive``: gpu_events_named,
    gpu_events_during_run_named), in order: each by its code, class and time, and what its line says where
    the catalogue reads more (an OOM kill: the process, its pid, which memory ran out) — a pid equal to the
    one the launch records (``details.pid``) is named as the engine's. At most ``NAMED_EVENTS_AT_MOST``."""
    named: list[str] = []
    for fact in facts[:NAMED_EVENTS_AT_MOST]:
        when = fact.get("time") or "a time its log does not record"
        text = f"{fact.get('code')} ({fact.get('fault_class')}) at {when}"
        if fact.get("summary"):
            text += f": {fact['summary']}"
        pid = fact.get("pid")
        if type(pid) is int and type(engine_pid) is int and pid == engine_pid:
            text += " — the engine process this launch started (its details.pid)"
        named.append(text)
    more = len(facts) - len(named)
    return "; ".join(named) + (f"; and {more} more" if more > 0 else "")


def _named_timed_events(recorded: list[tuple[datetime | None, dict[str, Any]]]) -> str:
    """``_named_events`` of a kernel log's events as ``_HostGpuEvents.by_entry`` holds them (with their
    time, None where the event records none): ``_derive``'s gpu_events_named and
    gpu_events_in_campaign_named."""
    return _named_events(
        [{**fact, "time": format_time(t) if t is not None else None} for t, fact in recorded]
    )


def _campaign_starts(trusted: Iterable[Evidence], output_kinds: Container[str]) -> dict[str, datetime]:
    """Campaign → when its first job or run began, as far as the log can know (``_derive``:
    gpu_events_in_campaign): the earliest, over the campaign's job entries and its run outputs
    (``output_kinds``: its launches, probes, harness results), of each one's start
    (``_claimed_start``: its claimed ``started_at`` or ``collected_at`` where earlier than when the log took
    it — the earlier one, so nothing inside the campaign is left out). Every job entry counts, whatever
    its state (one that ended had begun), and so does a superseded entry: supersession withdraws what an
    entry claims, not that the log took it then — an earlier start only ever counts more events (fail
    closed). A campaign with none has no start here: every event of its kernel logs counts."""
    out: dict[str, datetime] = {}
    for e in trusted:
        campaign = e.subject.get("campaign")
        if not isinstance(campaign, str) or (e.kind != "job" and e.kind not in output_kinds):
            continue
        t = _claimed_start(e)
        if campaign not in out or t < out[campaign]:
            out[campaign] = t
    return out


def _overlaps(since: datetime | None, seen: datetime, start: datetime, end: datetime) -> bool:
    """Whether a kernel log's window — from its ``since`` (None: unbounded) to when it was read — overlaps
    a run from ``start`` to ``end``."""
    return (since is None or since <= end) and seen >= start


def _host_gpu_events(trusted: list[Evidence], superseded: set[str]) -> _HostGpuEvents:
    from ledger.gpu_faults import classify_events, host_wide, load_catalogue

    out = _HostGpuEvents()
    catalogue = None
    for k in trusted:
        if k.kind == "host.probe" and k.id not in superseded and isinstance(k.payload.get("gpus"), list):
            host = k.subject.get("host") or k.payload.get("hostname")
            if isinstance(host, str):
                out.gpus.setdefault(host_key(host), []).append(k.payload["gpus"])
        if k.kind != "kernel.log":
            continue
        # the host whose runs the log speaks of (none: it is judged whole only), and where its window begins
        host = _host_of(k) if k.id not in superseded else None
        since: datetime | None = None
        with contextlib.suppress(LedgerError, TypeError, ValueError):
            since = parse_time(k.payload["since"]) if isinstance(k.payload.get("since"), str) else None
        if since is not None and since > k.observed_time:
            # a window that begins after the log was read contradicts itself: it tells nothing of where it
            # begins, so it is read as unbounded (an unreadable log then leaves every run's events unknown)
            since = None
        # When the log was read: its ``collected_at`` is a claim. A window it shows covered (a readable log:
        # no unread window matters inside it) ends at the claim, never after the log took it; a window whose
        # events may lie anywhere in it (an event without a time, an unreadable log) ends when the log took
        # it — a claimed earlier read time does not move a fault it holds out of a run
        read_until = k.logged_time
        if host is not None:
            # what it read is known where it was readable and records its events (a list, even empty): one
            # recorded as unreadable, or without its events, leaves the GPU events of its window unknown
            if k.payload.get("readable", True) is True and isinstance(k.payload.get("events"), list):
                out.read.setdefault(host, []).append((since, k.observed_time))
            else:
                out.unread.setdefault(host, []).append((since, read_until, k.id))
        events = k.payload.get("events")
        if not isinstance(events, list):
            out.by_entry[k.id] = []
            continue
        catalogue = catalogue or load_catalogue()
        raw = [v if isinstance(v, dict) else {} for v in events]
        timed: list[tuple[datetime | None, dict[str, Any]]] = []
        devices: list[str | None] = []
        for ev, fact in zip(raw, classify_events(raw, catalogue), strict=True):
            t: datetime | None = None
            with contextlib.suppress(LedgerError, TypeError, ValueError):
                t = parse_time(ev["time"]) if isinstance(ev.get("time"), str) else None
            timed.append((t, fact))
            # an event of the whole host (the OOM killer, by its line or its kind) is of every GPU: the
            # device it records never narrows it away from a launch
            devices.append(None if host_wide(ev) else _pci(ev.get("device")))
        out.by_entry[k.id] = timed
        if host is not None:
            out.by_host.setdefault(host, []).extend(
                (t, f, d) for (t, f), d in zip(timed, devices, strict=True) if t is not None
            )
            if any(t is None for t, _ in timed):
                out.untimed.setdefault(host, []).extend(
                    (since, read_until, f, d) for (t, f), d in zip(timed, devices, strict=True) if t is None
                )
    return out


def _job_end(end: Evidence | None) -> datetime | None:
    """When a job ended, as far as the log can know: its first terminal entry's ``ended_at``, never after
    that entry was logged (else its log time); None while it has not ended."""
    if end is None:
        return None
    t = end.logged_time
    with contextlib.suppress(LedgerError, TypeError, ValueError):
        said = end.payload.get("ended_at")
        if isinstance(said, str):
            t = min(parse_time(said), t)
    return t


def _run_end(launch: Evidence, job_end_entry: Evidence | None) -> datetime:
    """The latest a launch's engine may have run, as far as the log can know: the later of its own end
    (``ended_at``, never after the log took the launch; without one, its log time) and the end of the
    job it ran in (``job_end_entry``, the terminal entry that ended it: its ``ended_at``, never after it was
    logged) — a claimed end never narrows the run below its job."""
    own = launch.logged_time
    ended = launch.payload.get("ended_at")
    with contextlib.suppress(LedgerError, TypeError, ValueError):
        if isinstance(ended, str):
            own = min(parse_time(ended), own)
    job_end = _job_end(job_end_entry)
    return own if job_end is None else max(own, job_end)


_LOG_CHUNK = 1 << 20
# characters of a line cut between two pieces (``_lines_of``) read again with the next piece: the reach of a
# fault line across the cut (a progress bar written with ``\r`` and the error appended to it)
_LOG_OVERLAP = 1 << 16


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _outcome(p: dict[str, Any]) -> RunOutcome:
    """A launch's recorded outcome (ready, exit code, signal, lease, an observed request failure)."""
    details = p.get("details")
    return RunOutcome(
        ready=p.get("ready") is True,
        exit_code=_int(p.get("exit_code")),
        signal=_int(p.get("signal")),
        lease_expired=p.get("lease_expired") is True,
        request_failed=isinstance(details, dict) and details.get("failure_observed") is not None,
    )


def _classify_end(p: dict[str, Any], outcome: RunOutcome, signatures: Sequence[Signature]) -> Classification:
    """The status-only signature of a launch's recorded end, unless the launch shows that the collector
    ended the run itself (``details.stop_reason`` one of ``COLLECTOR_STOPPED``) or records no end (a stop
    reason of any other value, ``ENGINE_ENDED`` or unknown, is an end).

    A recorded end (exit status, signal, lease run out, a request failure) that the launch does not
    attribute to the collector's own stop is the engine's: classified as the collector classifies a run
    the engine ended (so a ready engine killed by SIGKILL, or exiting 0 on its own, is not a clean run
    because the entry leaves out its signature)."""
    details = p.get("details")
    reason = details.get("stop_reason") if isinstance(details, dict) else None
    if reason in COLLECTOR_STOPPED and collector_stop_end(outcome.exit_code, outcome.signal):
        return Classification(None)
    ended = (
        outcome.exit_code is not None
        or outcome.signal is not None
        or outcome.lease_expired
        or outcome.request_failed
        or reason is not None
    )
    if not ended:
        return Classification(None)
    return classify("", outcome, signatures)


@dataclass(frozen=True, slots=True)
class _LogScan:
    """What a launch's stored logs show: the signature that decides (``decisive``: the gravest class, the
    table's order among equals) over everything read (``whole``), and over what the engine logged after
    readiness (``after_ready``), each with the log, the line and the signature named for a reason."""

    whole: Classification
    whole_named: str
    after_ready: Classification
    after_ready_named: str
    # why the logs do not show a clean run after readiness (a Python traceback there, a log not read
    # back, none stored); None: clean (``_stopped_from_outside``)
    unclean: str | None = None
    # ``RunOutcome.stop_marked`` read from the stored logs (``outside_stop_shown``, the collector's one
    # reading): each log after readiness, up to the collector's stop, shows the engine's own shutdown line
    # with nothing of the engine's own that explains its end before it. False where it was not asked
    # (``marked``), a log was not stored or read back, or a log's readiness line count is not recorded
    stop_marked: bool = False
    # signature id → (log, line number, line) of its last match, over everything read (``whole``) and after
    # readiness (``after``); and every line of a signature an explanation names (``Explanation``), with what
    # its traceback shows (``occurrences``): ``_explained_log_lines`` decides again without those explained
    whole_found: Mapping[str, tuple[str, int, str]] = field(default_factory=dict)
    after_found: Mapping[str, tuple[str, int, str]] = field(default_factory=dict)
    explainable: Mapping[str, tuple[Occurrence, ...]] = field(default_factory=dict)


def _classify_stored_logs(
    e: Evidence,
    outcome: RunOutcome,
    store: ArtifactStore,
    signatures: Sequence[Signature],
    markers: Sequence[re.Pattern[str]],
    *,
    marked: bool = False,
    rules: Sequence[Explanation] = (),
    cut_tolerance: float | None = None,
) -> _LogScan:
    """The log-pattern signature of one launch, read from what it stored, not from what it claims.

    Every stored artifact of the launch is read back (streaming, verified against its digest) in pieces of
    whole lines, each up to where the collector's stop began (below), with its ``failure_detail``; an
    artifact the store lacks or that fails its digest adds nothing here (the artifact rule rejects the
    launch for it). The recorded outcome (ready, exit code, signal, lease) decides the signatures that also
    name one. The lines a log held when readiness was reached (``details.ready_lines``, by log name) are
    the engine's start-up: the after-readiness reading starts past them; a launch that records none (or a
    malformed count) is read after readiness from its first line (fail closed). ``failure_detail`` is
    read in both.

    ``marked``: also read whether the logs show a stop from outside (``_LogScan.stop_marked``: the
    collector's ``outside_stop_shown`` over each stored log's text after readiness, as far as it is read
    here — a collector-stopped log up to its stop; ``failure_detail``, the launch's claim, is no log). A
    log stored without a readiness line count of its own (``details.ready_lines``), not stored, or not
    read back shows none (fail closed: the engine's own end). ``cut_tolerance``
    (``params.stop_cut_tolerance_s``): how much earlier than ``details.stop_marker_at`` a stop-cut line first
    read at ``details.cut_line_at`` is still the stop's (``ledger.signatures.cut_within_stop``; None: none
    is).
    """
    p = e.payload
    raw = p.get("details")
    details: dict[str, Any] = raw if isinstance(raw, dict) else {}
    # the launch's recorded command: the texts the collector handed the engine (the model's path …), the
    # operator's words wherever the engine quotes them (``ledger.signatures._within_given``); a value that
    # is no text is left out (nothing masked for it: fail closed)
    cmd = p.get("command")
    given = tuple(v for v in cmd if isinstance(v, str)) if isinstance(cmd, list) else ()
    stop_lines = details.get("stop_lines")
    collector_stopped = details.get("stop_reason") in COLLECTOR_STOPPED
    drained = details.get("stop_drained") is True and isinstance(stop_lines, dict)
    stop_bytes = details.get("stop_bytes")
    ready_lines = details.get("ready_lines")

    def kept(name: Any) -> int | None:
        """Lines of a log read whatever they say before the shutdown is cut at a stop marker, or None:
        read whole. Where the launch records how far each log had come when the collector told the
        engine to stop (``details.stop_lines``), that far — a marker the engine printed before (a signal
        from elsewhere) hides none of its later faults; and where it records that it read the engine's
        pipes empty before it counted them (``details.stop_drained``), that far and no further: every line
        after is the engine's shutdown. A launch recorded before that was kept, stopped by the collector,
        from the start; any other (the engine ended on its own, or a malformed record) whole."""
        if isinstance(stop_lines, dict):
            n = stop_lines.get(name)
            return n if type(n) is int and n >= 0 else None
        return 0 if stop_lines is None and collector_stopped else None

    def cut_at(name: Any) -> int | None:
        """The bytes of a drained log that are the run's (``details.stop_bytes``), or None: a line still
        open when the collector told the engine to stop is read as it stood then, not with what the
        engine's shutdown appended to it. Only with a completed drain, and a whole count of bytes."""
        if not drained or not isinstance(stop_bytes, dict):
            return None
        n = stop_bytes.get(name)
        return n if type(n) is int and n >= 0 else None

    def ready_count(name: Any) -> int | None:
        n = ready_lines.get(name) if isinstance(ready_lines, dict) else None
        return n if type(n) is int and n >= 0 else None

    def ready_at(name: Any) -> int:
        return ready_count(name) or 0

    whole: dict[str, tuple[str, int, str]] = {}  # signature id → (log, line number, line): the last match
    after: dict[str, tuple[str, int, str]] = {}
    unclean: list[str] = [] if e.artifacts else ["no log stored"]
    # each stored log's text after readiness as read (``marked``), by its place among the artifacts; and
    # whether every log can show a stop from outside (stored, read back, its readiness count recorded)
    after_texts: dict[int, str] = {}
    readable = marked
    # every line of a signature an explanation names, with what its traceback shows (``occurrences``)
    explainable: dict[str, list[Occurrence]] = {r.explains: [] for r in rules}

    def feed(name: str, first_line: int, text: str, after_ready: bool) -> None:
        if not text:
            return
        for sig in signatures:
            if sig.id in explainable:
                explainable[sig.id] += occurrences(text, sig, outcome, given, rules)
        if after_ready and not unclean and (at := find_engine_text(text, PYTHON_TRACEBACK, given=given)) >= 0:
            unclean.append(f"{name} line {first_line + text.count(chr(10), 0, at)}: a Python traceback")
        for sig in signatures:
            found = sig.locate(text, outcome, given)
            if found is not None:
                where = (name, first_line + text.count("\n", 0, found[0]), found[1])
                whole[sig.id] = where
                if after_ready:
                    after[sig.id] = where

    detail = p.get("failure_detail")
    if isinstance(detail, str):
        feed("failure_detail", 1, detail, True)
    for index, a in enumerate(e.artifacts):
        if not a.get("stored", True):
            unclean.append(f"{a.get('name')} not stored")
            readable = False
            continue
        name = str(a.get("name"))
        keep = kept(a.get("name"))
        cut = cut_at(a.get("name")) if keep is not None else None
        start = ready_at(a.get("name"))
        if ready_count(a.get("name")) is None:
            readable = False

        def scan(
            pieces: Iterable[str],
            name: str = name,
            start: int = start,
            index: int = index,
            keep_text: bool = readable,
        ) -> tuple[int, str]:
            """Feed one log's pieces; the newlines read and the last character. A piece that ends inside
            a line (one longer than a piece, cut by ``_lines_of``) is read again, up to ``_LOG_OVERLAP``
            characters of its open line, at the head of the next: a fault line that straddles the cut is
            seen whole (it holds no newline, so the line numbers stand). With ``keep_text`` (every log so far
            can show a stop from outside), the text after readiness is kept whole (each piece once, without
            the overlap) for ``outside_stop_shown``."""
            line, last, carry = 1, "", ""
            kept_text: list[str] = []
            for piece in pieces:
                last = piece[-1:] or last
                text = carry + piece
                at, need = 0, start - (line - 1)  # this piece's lines logged before readiness
                while need > 0 and at < len(text):
                    nl = text.find("\n", at)
                    at, need = (len(text) if nl < 0 else nl + 1), need - 1
                feed(name, line, text[:at], False)
                feed(name, line + text.count("\n", 0, at), text[at:], True)
                if keep_text:
                    kept_text.append(text[max(at, len(carry)) :])
                line += piece.count("\n")
                open_line = text[text.rfind("\n") + 1 :]
                carry = open_line[max(0, len(open_line) - _LOG_OVERLAP) :]
            if keep_text:
                after_texts[index] = "".join(kept_text)  # a second reading of the log replaces the first
            return line - 1, last

        try:
            digest = parse_digest(str(a.get("digest")))
            if keep is None:
                with store.open_verified(digest) as f:
                    scan(_lines_of(f))
                continue
            if cut is not None:
                with store.open_verified(digest) as f:
                    newlines, last = scan(_lines_of(_Head(f, cut)))
                # the cut must fall inside the last line counted at the stop, one still open (not empty), or
                # just past its newline; a count of bytes that disagrees with the count of lines is read by
                # the lines as well
                if (newlines == keep and (keep == 0 or last == "\n")) or (
                    newlines == keep - 1 and last not in ("", "\n")
                ):
                    continue
            with store.open_verified(digest) as f:
                scan(before_stop(_lines_of(f), markers, keep, exact=drained))
        except LedgerError:
            unclean.append(f"{name} not read back")
            readable = False
            continue

    w, w_named = _pick_found(whole, signatures)
    r, r_named = _pick_found(after, signatures)
    # a stop-cut line before the marker is the stop's only where the collector read it within the stop
    # (``details.cut_line_at``, ``details.stop_marker_at``, ``params.stop_cut_tolerance_s``), both times
    # within the launch's own run as it records it (``_stop_read_window``; none: no time is trusted)
    window = _stop_read_window(e, cut_tolerance)
    stop_marked = readable and outside_stop_shown(
        list(after_texts.values()),
        markers,
        own_end_lines(),
        cut_at=_detail_time(details, "cut_line_at") if window is not None else None,
        marker_at=_detail_time(details, "stop_marker_at"),
        tolerance=cut_tolerance,
        window=window,
    )
    return _LogScan(
        w,
        w_named,
        r,
        r_named,
        unclean[0] if unclean else None,
        stop_marked,
        whole,
        after,
        {k: tuple(v) for k, v in explainable.items() if v},
    )


def _detail_time(details: Mapping[str, Any], key: str) -> datetime | None:
    """A time the launch's details record (``cut_line_at``, ``stop_marker_at``, ``exited_at``), or None where
    it records none, or one that is no text or does not parse (fail closed: nothing is read within the
    stop)."""
    v = details.get(key)
    if not isinstance(v, str):
        return None
    try:
        return parse_time(v)
    except LedgerError:
        return None


def _stop_read_window(launch: Evidence, tolerance: float | None) -> tuple[datetime, datetime] | None:
    """When the collector can have read ``launch``'s logs after readiness, as the launch's own record and
    the log bound it (``ledger.signatures.cut_within_stop``'s ``window`` for ``details.cut_line_at`` and
    ``details.stop_marker_at``): from its readiness (``_ready_time``, less its rounding: the collector
    times neither line before it) to the earliest of its leader's end (``details.exited_at``) plus
    ``tolerance`` (its log readers may read the last lines a moment after the leader ended), its recorded
    end (``ended_at``: taken once every log was read to its end) and the time the log took the launch (the
    log's time, not a claim: nothing read later can be in it). None where the launch is not ready, its
    readiness, ``exited_at`` or the tolerance is not known, or ``ended_at`` is mistyped (fail closed: no
    time is read within the stop)."""
    raw = launch.payload.get("details")
    details: dict[str, Any] = raw if isinstance(raw, dict) else {}
    ready, exited = _ready_time(launch), _detail_time(details, "exited_at")
    if launch.payload.get("ready") is not True or ready is None or exited is None or tolerance is None:
        return None
    ends = [exited + timedelta(seconds=tolerance), launch.logged_time]
    ended = launch.payload.get("ended_at")
    if ended is not None:
        if not isinstance(ended, str):
            return None
        try:
            ends.append(parse_time(ended))
        except LedgerError:
            return None
    try:
        return ready - _READY_ROUNDING, min(ends)
    except TypeError:  # a time without its zone
        return None


def _pick_found(
    found: Mapping[str, tuple[str, int, str]], signatures: Sequence[Signature], skip: Iterable[str] = ()
) -> tuple[Classification, str]:
    """The signature that decides among those ``found`` (``decisive``: the gravest class any log line
    shows, the table's order among equals), but ``skip``, named with its log, line and class."""
    left = set(skip)
    matched = [s for s in signatures if s.id in found and s.id not in left]
    first = decisive(matched)
    if first is None:
        return Classification(None), ""
    log, n, text = found[first.id]
    c = Classification(
        first.id, first.title, text or None, [s.id for s in matched], first.failure_class.value
    )
    where = "its failure_detail" if log == "failure_detail" else f"{log} line {n}"
    return c, f"{where}: {text!r} (signature {first.id}, class {first.failure_class.value})"


def _count(v: Any) -> bool:
    """An integer count (a JSON boolean is not one)."""
    return isinstance(v, int) and not isinstance(v, bool)


def _probe_failed(e: Evidence, ok: bool, params: Mapping[str, Any]) -> bool:
    """``e.derived.probe_failed`` of a ``health.probe`` (``_derive``): whether it shows a failure, as the
    control gates judge it — the collector's ``ok`` claim is only one side of it. Not ``ok`` (``probe_ok``);
    a ``completion`` whose ``text``, stripped of surrounding whitespace as the collector strips it, is not
    ``params.control_answer``; a ``structured`` probe whose answer is not valid against its recorded schema
    (``Evidence.structured_problem``); a ``sequential`` run whose ``count`` is below
    ``params.sequential_requests`` or is not the number of ``latencies_ms`` it recorded. Anything missing or
    mistyped — in the probe or in ``params`` — fails closed (a failure)."""
    if not ok:
        return True
    p = e.payload
    check = p.get("check")
    if check == "completion":
        answer, text = params.get("control_answer"), p.get("text")
        return not (isinstance(answer, str) and isinstance(text, str) and text.strip() == answer)
    if check == "structured":
        return e.structured_problem() is not None
    if check == "sequential":
        want, count, timed = params.get("sequential_requests"), p.get("count"), p.get("latencies_ms")
        if not (isinstance(want, int) and isinstance(count, int) and _count(want) and _count(count)):
            return True
        return not (count >= want and isinstance(timed, list) and len(timed) == count)
    return False


def _slowest(p: dict[str, Any]) -> float | None:
    """``e.derived.sequential_slowest_ms``: the largest latency a sequential run recorded (``latencies_ms``),
    for a reason to name what the gate judged (the run's own ``details.max_ms`` is its claim); None where it
    records no list of numbers."""
    timed = p.get("latencies_ms") if p.get("check") == "sequential" else None
    if not isinstance(timed, list) or not timed:
        return None
    if not all(type(v) in (int, float) for v in timed):
        return None
    return float(max(timed))


def _answer_not_completion(p: dict[str, Any]) -> str | None:
    """Why the 2xx answer a completion, structured or sequential probe recorded (``details.body``, with
    ``details.body_status`` where it records one, else ``http_status``) is not a chat completion — an
    error object, an empty body, no ``choices[0].message`` (``ledger.signatures.not_a_completion``, as the
    probe judged it) — or None: the server failed to answer, like a 5xx, whatever the probe claims."""
    if p.get("check") not in ("completion", "structured", "sequential"):
        return None
    details = p.get("details")
    if not isinstance(details, dict) or not isinstance(details.get("body"), str):
        return None
    status = details.get("body_status", p.get("http_status"))
    return not_a_completion(status if type(status) is int else None, details["body"])


# What a harness result stores of each thing it counted (the collectors' artifact names:
# collectors/semantic.py ITEMS_ARTIFACT / FAILURES_ARTIFACT, collectors/benchmark.py REQUESTS_ARTIFACT)
_SEMANTIC_ITEMS = "semantic-items.jsonl"
_SEMANTIC_FAILURES = "semantic-failures.jsonl"
_BENCHMARK_REQUESTS = "benchmark-requests.jsonl"
# every request a semantic run sent (collectors/semantic.py REQUESTS_ARTIFACT), in benchmark-requests.jsonl's
# shape: read back by the one function both harnesses' request records are (``_requests_shown``)
_SEMANTIC_REQUESTS = "semantic-requests.jsonl"


# each harness's per-request record (every request it sent, with its HTTP status, ``fault``, ``unanswered``
# and ``refusal``): the only record a claim about its requests — unanswered when a stop from outside came,
# refused for the campaign's configuration — can be read back from (``_request_record_missing``)
_REQUEST_RECORDS = {"semantic": _SEMANTIC_REQUESTS, "benchmark": _BENCHMARK_REQUESTS}


def _request_record_missing(e: Evidence) -> str | None:
    """Why what a harness result claims of its requests cannot be read back: it is no harness's result
    (``_REQUEST_RECORDS``), or it stores no per-request record. One rule for both harnesses: a claim
    (``counts.unanswered``, ``counts.refused``, ``counts.cut``, ``counts.timed_out``, ``bounds.fault_kind``:
    ``_request_claims``) on the payload alone is never
    excused nor credited — the record read back (``_requests_shown``) is. None: it stores its record."""
    gate = e.payload.get("gate")
    name = _REQUEST_RECORDS.get(gate) if isinstance(gate, str) else None
    if name is None:
        return f"gate {gate!r} is no harness whose requests can be read back"
    if any(a.get("name") == name for a in e.artifacts):
        return None
    return f"it stores no {name}, its per-request record: what it claims of its requests cannot be read back"


# the counts a rule subtracts from a harness run's errors (``stopped-from-outside``: cut, unanswered and, for
# an engine held from outside, timed_out; ``harness-campaign-config``: cut and refused;
# ``harness-lease-expired``: cut), each read back from the run's per-request record (``_requests_shown``),
# request by request, by the one test the collector counted it with
_EXCUSED_COUNTS = ("cut", "unanswered", "timed_out", "refused")
# the excused counts one rule subtracts together: a request may count in one of each at most — a record
# that shows one request in two is a problem (``_requests_shown``), never an error excused twice. (A context
# refusal streamed as a cut 2xx answer is refused and unanswered both, honestly: no rule subtracts both.)
# A semantic run's rules subtract one count only, stopped-from-outside's timed_out (of its failed items, for
# a held engine: ``_timed_out_items``), so no two of its counts are subtracted together.
_EXCUSED_TOGETHER = (("cut", "unanswered", "timed_out"), ("cut", "refused"))


def _request_claims(e: Evidence) -> list[str]:
    """What a harness result claims of its requests that only its per-request record can bear out — the
    claims a rule excuses a failed run on: ``bounds.fault_kind`` "unanswered" and ``counts.unanswered``
    (a stop from outside, ``stopped-from-outside``), ``counts.timed_out`` (the same rule, an engine held
    from outside), ``bounds.outcome`` "config" and ``counts.refused`` (the campaign's configuration,
    ``harness-campaign-config``), ``counts.cut`` (the requests the run itself cut, which those rules and
    ``harness-lease-expired`` subtract from its errors: ``_EXCUSED_COUNTS``). A count of 0 claims nothing;
    any other value, mistyped too, is a claim."""
    bounds, counts = e.payload.get("bounds"), e.payload.get("counts")
    b: Mapping[str, Any] = bounds if isinstance(bounds, dict) else {}
    c: Mapping[str, Any] = counts if isinstance(counts, dict) else {}
    out = [f"bounds.fault_kind {FAULT_UNANSWERED!r}"] if b.get("fault_kind") == FAULT_UNANSWERED else []
    out += ["bounds.outcome 'config'"] if b.get("outcome") == "config" else []
    out += [f"counts.{k} {c[k]!r}" for k in _EXCUSED_COUNTS if k in c and c[k] != 0]
    return out


class _Unreadable(Exception):
    """An artifact line that is not the record the harness writes (``_artifact_records``)."""


def _artifact_records(store: ArtifactStore, a: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The JSON objects of a stored JSONL artifact, one per line (blank lines skipped), streamed from the
    store (verified against its digest; a line longer than a piece of ``_lines_of`` is cut, and does not
    parse). Raises ``_Unreadable`` for a line that is not a JSON object, ``LedgerError`` for an artifact the
    store lacks or that fails its digest."""
    if not a.get("stored", True):
        raise _Unreadable("is recorded by reference only")
    with store.open_verified(parse_digest(str(a.get("digest")))) as f:
        n = 0
        for piece in _lines_of(f):
            for line in piece.splitlines():
                n += 1
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except ValueError:
                    raise _Unreadable(f"line {n} is not JSON") from None
                if not isinstance(record, dict):
                    raise _Unreadable(f"line {n} is not a JSON object")
                yield record


def _differing_counts(counts: Any, found: Mapping[str, int], what: str) -> list[str]:
    """``counts.KEY N, its NAME shows M`` for each count a result records (as an integer) that differs
    from what its artifact shows (``found``); a recorded value that is not an integer differs too. A count
    it leaves out is not compared here (its gate asks for the counts it needs)."""
    if not isinstance(counts, dict):
        return []
    out: list[str] = []
    for key, n in found.items():
        if key not in counts:
            continue
        got = counts[key]
        if type(got) is not int or got != n:
            out.append(f"counts.{key} {got!r}, its {what} shows {n}")
    return out


def _harness_artifact_problem(
    e: Evidence,
    store: ArtifactStore,
    params: Mapping[str, Any] | None = None,
    launched: tuple[str, int] | None = None,
    ways: Collection[str] | None = None,
) -> str | None:
    """For a ``gate.result`` of a harness (semantic, benchmark): where its own stored record of what it
    counted contradicts the counts it records, why (None: it does not, or it names no such artifact). Read
    back, streamed, from the store — the payload's counts are the collector's claim:

    * semantic: ``semantic-items.jsonl`` (one object per item asked, with its boolean ``passed`` and its
      ``error``): ``counts.asked`` (items), ``passed``, ``failed``, ``errors`` (items with an error) —
      and ``semantic-failures.jsonl`` (the failed items): as many as ``counts.failed`` (and, beside the
      items, exactly the ids of the items that failed), each ``passed`` false. Each item's ``passed`` is
      held to its own record (``_item_scored_otherwise``): passed exactly where its error is null, its
      ``checks`` are not empty and every check passed — an item recorded passed whose checks failed is
      a problem naming it, whatever the counts say (audit 101 f2).
    * benchmark: ``benchmark-requests.jsonl`` (one object per request issued, with its ``error``: null
      for a completed request) and its ``level``: ``counts.issued``, ``completed``, ``errors``,
      ``unanswered`` (``_request_unanswered``), ``refused`` and ``completed@cN`` for
      each level a request records; and, for a passed run, its parity record (``bounds.parity``, whose
      fraction the ``c1_parity`` figure must be) re-derived from its completed c1 requests' output
      digests and token counts (``parity_of``, ``_parity_unshown``).
    * both (``_requests_shown``, the one reading of a harness's per-request record — semantic:
      ``semantic-requests.jsonl``, every request it sent, ``counts.refused`` compared, and
      ``counts.timed_out``, its failed items whose request timed out, each item asked joined to the request
      it was asked by (``_timed_out_items``; a count above 0 with no ``semantic-items.jsonl`` to join is a
      problem)): a
      ``bounds.fault_kind`` "unanswered" the faulted requests it records do not all show; more requests
      unanswered than were in flight at once; a refusal of the campaign's configuration another request of
      the same run contradicts, whatever their order.

    An artifact named twice, recorded by reference only, missing from the store, failing its digest, or
    holding a line that is not such a record cannot show what the result counted: that is a problem too
    (fail closed). So is a result that claims what only its per-request record shows (``_request_claims``:
    requests unanswered, or refused for the campaign's configuration) and stores none
    (``_request_record_missing``): the claim is the payload's alone, never excused on it. A request recorded
    refused for the context whose answer was no 4xx is judged with ``params`` (the policy's) and held to
    ``launched``, the context the attempt's launch command gives, and ``ways``, the ways the program it
    runs counts a prompt (``_context_refusal_unshown``; None: not known, a problem)."""
    gate = e.payload.get("gate")
    names = (
        (_SEMANTIC_ITEMS, _SEMANTIC_FAILURES, _SEMANTIC_REQUESTS)
        if gate == "semantic"
        else (_BENCHMARK_REQUESTS,)
        if gate == "benchmark"
        else ()
    )
    claims = _request_claims(e) if names else []
    if claims and (missing := _request_record_missing(e)) is not None:
        return f"{', '.join(claims)}: {missing}"
    named: dict[str, list[Mapping[str, Any]]] = {}
    for a in e.artifacts:
        if a.get("name") in names:
            named.setdefault(str(a.get("name")), []).append(a)
    if not named:
        return None
    for name, found in named.items():
        if len(found) > 1:
            return f"it names artifact {name} {len(found)} times: which is its record cannot be told"
    counts = e.payload.get("counts")
    name = ""
    try:
        if gate == "benchmark":
            name = _BENCHMARK_REQUESTS
            # a passed run's completed c1 requests: what its c1 parity compared (a parity record credits a
            # passed run alone: its c1_parity figure)
            passed_run = e.payload.get("status") == "passed"
            c1_outputs: list[Mapping[str, Any]] = []
            records = _artifact_records(store, named[name][0])
            shown, problems = _requests_shown(
                _parity_outputs(records, c1_outputs) if passed_run else records,
                e.payload.get("bounds"),
                params,
                launched,
                ways,
            )
            if isinstance(counts, dict):
                # a level the result counts that no completed request of the artifact is at: 0 there
                shown |= {k: 0 for k in counts if k.startswith("completed@c") and k not in shown}
            differs = _differing_counts(counts, shown, f"{name} ({shown['issued']} requests)")
            if passed_run:
                problems += _parity_unshown(c1_outputs, e.payload.get("bounds"))
            return "; ".join(differs + problems) or None
        failed_ids: list[str] = []
        # counts.timed_out (the failed items whose request timed out: rule stopped-from-outside subtracts
        # them for a held engine) is read back by joining each item asked to the request it was asked by
        # (``_timed_out_items``); left out, nothing is subtracted and nothing joined
        timed_claimed = isinstance(counts, dict) and "timed_out" in counts
        scored: list[tuple[Any, Any, bool]] | None = None  # each item asked: (id, error, passed), in order
        if _SEMANTIC_ITEMS in named:
            name = _SEMANTIC_ITEMS
            asked = passed = errors = 0
            scored = [] if timed_claimed else None
            contradicted: list[str] = []  # items whose ``passed`` their own error and checks do not show
            for r in _artifact_records(store, named[name][0]):
                if type(r.get("passed")) is not bool:
                    raise _Unreadable(f"item {asked + 1} records no boolean passed")
                if (why := _item_scored_otherwise(r, asked + 1)) is not None:
                    contradicted.append(why)
                asked += 1
                passed += r["passed"]
                errors += bool(r.get("error"))
                if not r["passed"]:
                    failed_ids.append(str(r.get("id")))
                if scored is not None:
                    scored.append((r.get("id"), r.get("error"), r["passed"]))
            shown = {"asked": asked, "passed": passed, "failed": asked - passed, "errors": errors}
            differs = _differing_counts(counts, shown, f"{name} ({asked} items, {asked - passed} failed)")
            if differs:
                return "; ".join(differs)
            if contradicted:
                more = f" (and {len(contradicted) - 1} more item(s) so)" if len(contradicted) > 1 else ""
                return f"{contradicted[0]}{more}: its score is not what its items' own records show"
        if _SEMANTIC_REQUESTS in named:
            name = _SEMANTIC_REQUESTS
            joined: dict[str, Any] = {}
            records = _artifact_records(store, named[name][0])
            if scored is not None:
                records = _timed_out_items(records, scored, joined)
            shown, problems = _requests_shown(records, e.payload.get("bounds"), params, launched, ways)
            compared = {"refused": shown["refused"]}
            claimed = counts.get("timed_out") if isinstance(counts, dict) else None
            if scored is not None:
                problems += joined["problems"]
                compared["timed_out"] = joined["timed_out"]
            elif timed_claimed and claimed != 0:
                problems.append(
                    f"counts.timed_out {claimed!r}: it stores no {_SEMANTIC_ITEMS}, so which of its "
                    "requests were scored items, and which failed items timed out, cannot be told"
                )
            differs = _differing_counts(counts, compared, f"{name} ({shown['issued']} requests)")
            if differs or problems:
                return "; ".join(differs + problems)
        if _SEMANTIC_FAILURES in named:
            name = _SEMANTIC_FAILURES
            listed: list[str] = []
            for r in _artifact_records(store, named[name][0]):
                if r.get("passed") is not False:
                    raise _Unreadable(f"failure {len(listed) + 1} does not record passed = false")
                listed.append(str(r.get("id")))
            differs = _differing_counts(counts, {"failed": len(listed)}, f"{name} ({len(listed)} items)")
            if differs:
                return "; ".join(differs)
            if _SEMANTIC_ITEMS in named and sorted(listed) != sorted(failed_ids):
                failed_sorted = sorted(failed_ids)
                return f"{name} lists items {sorted(listed)}, {_SEMANTIC_ITEMS} shows {failed_sorted} failed"
    except _Unreadable as ex:
        return f"artifact {name} {ex}: what the run counted cannot be read back"
    except LedgerError as ex:
        return f"artifact {name} cannot be read back: {ex.message}"
    return None


def _item_scored_otherwise(r: Mapping[str, Any], n: int) -> str | None:
    """Why item ``n`` of a semantic run's ``semantic-items.jsonl`` (``r``: its boolean ``passed`` read)
    records a ``passed`` its own record does not show, or None: it shows it. The harness scores an item
    passed only where the engine answered it (``error`` null) and every one of its ``checks`` (the
    corpus gives each item one at least: ``collectors/semantic.py`` ``score_answer``) passed; an item
    with an error is scored on no check, and fails. So the item shows passed exactly where its error is
    null, its checks are not empty and every check records ``passed`` true — a passed item whose checks
    failed, or that records an error or no check, is credited by nothing but its own word (audit 101 f2),
    and a failed item whose every check passed with no error contradicts itself as much. An item that records
    no error (null or a text), no list of checks, or a check that is no object with a boolean ``passed``
    shows nothing it was scored on: a problem too (fail closed), named after the run's counts are compared
    (the caller's ``_differing_counts`` first)."""
    error, checks, item = r.get("error", ...), r.get("checks"), f"item {r.get('id')!r} (item {n})"
    unread = ": what it was scored on cannot be read back"
    if error is not None and not isinstance(error, str):
        return f"{item} records no error (null or a text){unread}"
    if not isinstance(checks, list):
        return f"{item} records no list of checks{unread}"
    for k, c in enumerate(checks, 1):
        if not isinstance(c, dict) or type(c.get("passed")) is not bool:
            return f"{item} check {k} records no boolean passed{unread}"
    failed = [str(c.get("type")) for c in checks if not c["passed"]]
    if r["passed"] == (error is None and bool(checks) and not failed):
        return None
    shows = (
        f"error {error!r}"
        if error is not None
        else "no check"
        if not checks
        else f"{len(failed)} of its {len(checks)} checks failed ({', '.join(failed)})"
        if failed
        else f"no error and all {len(checks)} of its checks passed"
    )
    return f"{item} is recorded passed {str(r['passed']).lower()} but records {shows}"


def _timed_out_items(
    records: Iterable[dict[str, Any]], scored: Sequence[tuple[Any, Any, bool]], out: dict[str, Any]
) -> Iterator[dict[str, Any]]:
    """A semantic run's ``semantic-requests.jsonl`` ``records``, passed on as read, each item asked
    (``scored``: its id, error and passed, in the order of ``semantic-items.jsonl``) joined to the request it
    was asked by — the harness asks one request per item, in corpus order, and scores every request it sent
    but the one that stopped the run (sent last: a fault, a refusal, a cut), so the first ``len(scored)``
    requests are the items'. Once read, ``out["timed_out"]``: the failed items whose request timed out
    (``request_timed_out``, the test the collector counted ``counts.timed_out`` by), and ``out["problems"]``:
    where the join fails — fewer requests than items, a request of another prompt or another error than its
    item records, or one recorded as the run's fault (a faulted request stops the run, never scored): which
    failed items timed out then cannot be told, and nothing is counted (fail closed)."""
    timed = n = 0
    problems: list[str] = []
    for r in records:
        if n < len(scored) and not problems:
            item_id, error, passed = scored[n]
            if r.get("prompt_id") != item_id or r.get("error") != error or r.get("fault") is True:
                problems.append(
                    f"request {n + 1} (prompt {r.get('prompt_id')!r}, error {r.get('error')!r}, fault "
                    f"{r.get('fault')!r}) is not the request item {n + 1} ({item_id!r}, error {error!r}) was "
                    f"scored on in {_SEMANTIC_ITEMS}: which failed items timed out cannot be told"
                )
            elif not passed and request_timed_out(r.get("timed_out"), r.get("error"), r.get("http_status")):
                timed += 1
        n += 1
        yield r
    if n < len(scored) and not problems:
        problems.append(
            f"it records {n} request(s) for the {len(scored)} item(s) {_SEMANTIC_ITEMS} shows asked: which "
            "failed items timed out cannot be told"
        )
    out["timed_out"] = 0 if problems else timed
    out["problems"] = problems


def _parity_outputs(
    records: Iterable[dict[str, Any]], out: list[Mapping[str, Any]]
) -> Iterator[dict[str, Any]]:
    """A benchmark's ``benchmark-requests.jsonl`` ``records``, passed on as read, each completed request at
    ``PARITY_LEVEL`` (``error`` null) kept in ``out``: the outputs c1 parity compares (``parity_of``).
    Raises ``_Unreadable`` for such a request that records no text ``prompt_id`` or no whole-number
    ``repetition`` and ``index`` (which outputs were compared with which cannot be told)."""
    for n, r in enumerate(records, 1):
        if r.get("level") == PARITY_LEVEL and type(r.get("level")) is int and r.get("error", ...) is None:
            if not isinstance(r.get("prompt_id"), str):
                raise _Unreadable(f"request {n} records no prompt_id")
            if type(r.get("repetition")) is not int or type(r.get("index")) is not int:
                raise _Unreadable(f"request {n} records no whole-number repetition and index")
            out.append(r)
        yield r


def _parity_unshown(outputs: Sequence[Mapping[str, Any]], bounds: Any) -> list[str]:
    """Where a benchmark's parity record (``bounds.parity``) is not what its stored requests show
    (``answers.parity_of`` of ``outputs``, its completed c1 requests — the reading the harness recorded it
    by): each field it records that differs; a
    record where the requests show nothing compared; no record (null or left out) where a run that
    aggregated at c1 (``bounds.aggregate`` true, level 1 in ``bounds.concurrency``) shows outputs compared.
    A record that is no object is the policy's rules' to judge (no c1 parity)."""
    b: Mapping[str, Any] = bounds if isinstance(bounds, dict) else {}
    recorded, shown = b.get("parity"), parity_of(outputs, PARITY_LEVEL)
    where = f"its {_BENCHMARK_REQUESTS} shows"
    if recorded is None:
        levels = b.get("concurrency")
        at_c1 = isinstance(levels, list) and any(type(v) is int and v == PARITY_LEVEL for v in levels)
        if shown is None or b.get("aggregate") is not True or not at_c1:
            return []
        return [
            f"it records no parity record (bounds.parity), but {where} {shown['compared']} c1 output(s) "
            f"compared, {shown['matched']} matched"
        ]
    if not isinstance(recorded, dict):
        return []
    if shown is None:
        return [f"bounds.parity records c1 outputs compared ({recorded.get('compared')!r}), but {where} none"]
    out: list[str] = []
    for key, value in shown.items():
        if key not in recorded:
            continue
        got = recorded[key]
        numbers = all(type(v) in (int, float) for v in (got, value))
        if not (got == value if numbers or type(got) is type(value) else False):
            out.append(f"bounds.parity.{key} {got!r}, {where} {value!r}")
    return out


def _request_unanswered(r: Mapping[str, Any]) -> bool:
    """A recorded request that faulted without an answer (``answers.request_unanswered``, the judgement the
    collector's ``request_fault_kind`` makes of the same fields)."""
    return request_unanswered(r.get("fault"), r.get("unanswered"), r.get("http_status"))


def request_timed_out(timed_out: Any, error: Any, http_status: Any) -> bool:
    """A harness request that got no (complete) answer within its timeout, or whose connection the engine did
    not accept in time (``timed_out`` true: ``collectors.benchmark.RequestRecord.timed_out``), recorded as an
    error (a text), with no error status — none, or a 2xx one whose stream then stalled: an error status (a
    4xx, a 5xx whose body stalled) is an answer, read as ``request_unanswered`` reads it (the same reading of
    the status). ``timed_out`` anything but true (left out by a harness that did not record it, mistyped): no
    timeout. The collector counts its live records by it (``counts.timed_out``), the policy the stored ones
    (``_requests_shown``): an engine held from outside times out every request in flight (rule
    ``stopped-from-outside``)."""
    return timed_out is True and isinstance(error, str) and request_unanswered(True, True, http_status)


# The outcomes of a harness run cut short from outside the engine — an operator's signal, a hold from outside
# (``operator-stop``: collectors.benchmark.EngineHold, the engine or the harness itself held), its own lease
# (``lease-expired``), a request refused for the campaign's configuration (``config``) — as the harness
# records them (bounds.outcome). Such a run withholds credit, never evidence: ``cut_decided``.
CUT_OUTCOMES = ("operator-stop", "lease-expired", "config")
# the latency distributions a bound may name whose values are one per request (itl_ms is one per token: how
# many a request not measured would add cannot be told, so nothing of it is decided before a cut)
_PER_REQUEST_METRICS = ("ttft_ms", "tpot_ms", "e2e_ms")


def _whole(v: Any) -> int | None:
    return v if type(v) is int and v >= 0 else None


def _number(v: Any) -> float | None:
    ok = not isinstance(v, bool) and isinstance(v, int | float) and math.isfinite(v)
    return float(v) if ok else None


def _ended_by(r: Mapping[str, Any]) -> datetime | None:
    """When a stored benchmark request ended, on the collector's clock: its ``started_at`` plus its
    ``end_s - start_s``; None where it cannot be told."""
    start, end, at = _number(r.get("start_s")), _number(r.get("end_s")), r.get("started_at")
    if start is None or end is None or not isinstance(at, str) or end < start:
        return None
    try:
        return parse_time(at) + timedelta(seconds=end - start)
    except (LedgerError, ValueError):
        return None


def figures_decided(
    records: Iterable[Mapping[str, Any]],
    params: Mapping[str, Any],
    held: Any = None,
) -> list[str]:
    """The bounded figures (``params.benchmark_max``: a latency distribution of one request each,
    ``_PER_REQUEST_METRICS``) that a benchmark run cut short already fails whatever the requests it did not
    measure would measure: each (repetition, level) run of ``records`` (the stored benchmark-requests.jsonl)
    whose every request the approved spec asks (``params.benchmark_requests``) is recorded and none cut
    (``request_cut``) is complete; of a level's complete runs, the values of its completed requests, and
    every other request of the approved spec's level (requests x repetitions) taken at 0 — the best any could
    do — give the least the figure can be (a percentile never falls below the value at the rank that many
    zeros leave; a mean never below their sum over that many). Above the bound: decided. ``held``: the run's
    ``bounds.held_from_outside`` — a run that did not end before the time each hold records the run last saw
    none (``not_held_at``) is no complete run (its timing spans the hold), and a hold whose time cannot be
    read leaves none. A run that records no whole-number level or repetition decides nothing."""
    requests, repetitions = (
        _whole(params.get("benchmark_requests")),
        _whole(params.get("benchmark_repetitions")),
    )
    maxima = params.get("benchmark_max")
    if not requests or not repetitions or not isinstance(maxima, Mapping):
        return []
    clear: list[datetime] = []  # the run must have ended by each of these
    if held is not None:
        if not isinstance(held, list):
            return []
        for h in held:
            at = h.get("not_held_at") if isinstance(h, Mapping) else None
            try:
                clear.append(parse_time(at) if isinstance(at, str) else None)  # type: ignore[arg-type]
            except (LedgerError, ValueError):
                return []
            if clear[-1] is None:
                return []
    runs: dict[tuple[int, int], list[Mapping[str, Any]]] = {}
    for r in records:
        level, rep = r.get("level"), r.get("repetition")
        if type(level) is not int or type(rep) is not int:
            return []
        runs.setdefault((rep, level), []).append(r)
    complete: dict[int, list[Mapping[str, Any]]] = {}
    for (_, level), rs in runs.items():
        if len(rs) != requests or any(request_cut(r.get("error")) for r in rs):
            continue
        ends = [_ended_by(r) for r in rs]
        if clear and (None in ends or any(t > c for t in ends for c in clear if t is not None)):
            continue
        complete.setdefault(level, []).extend(rs)
    planned = requests * repetitions
    out: list[str] = []
    for name, limit in maxima.items():
        head, at, level_text = str(name).partition("@c")
        metric, _, stat = head.partition(".")
        bound = _number(limit)
        if not at or metric not in _PER_REQUEST_METRICS or bound is None or not level_text.isdigit():
            continue
        level = int(level_text)
        done = [r for r in complete.get(level, []) if r.get("error") is None]
        values = [v for r in done if (v := _number(r.get(metric))) is not None and v >= 0]
        if not values or len(values) > planned:
            continue
        if stat == "mean":
            least = sum(values) / planned
        elif stat.startswith("p") and stat[1:].isdigit() and 0 < int(stat[1:]) < 100:
            ranked = sorted(values + [0.0] * (planned - len(values)))
            least = ranked[math.floor((planned - 1) * int(stat[1:]) / 100)]
        else:
            continue
        if least > bound:
            out.append(
                f"{name} is at least {least:g} whatever the rest would measure, above the bound {bound:g} "
                f"({len(values)} of the {planned} requests of c{level} measured in runs of the level that "
                "completed before the cut)"
            )
    return out


def cut_decided(
    payload: Mapping[str, Any],
    params: Mapping[str, Any],
    records: Iterable[Mapping[str, Any]] | None = None,
) -> str | None:
    """For a harness run cut short from outside the engine (``bounds.outcome`` one of ``CUT_OUTCOMES``):
    where what the engine failed before the cut already decides its gate, whatever the rest of the run would
    show, why — else None (nothing decided: its rule withholds the credit, INCONCLUSIVE). The one test rules
    operator-stopped, harness-lease-expired and harness-campaign-config count such a run against the engine
    by (``e.derived.cut_decided``), and the harnesses word their reason by:

    * semantic: the items that failed before the cut (``counts.failed``) leave fewer passing items possible
      than ``params.semantic_min_score`` of its items (``counts.items``);
    * benchmark: the requests the engine failed before it — ``counts.errors`` less ``counts.cut``, the
      requests the harness itself cut (a stop cuts those of one level in flight: a cut above the largest of
      ``bounds.concurrency`` excuses none), and for ``config`` ``counts.refused`` — exceed
      ``params.benchmark_max.error_rate`` over every request of the approved spec; or a bounded figure its
      complete level runs already fail (``figures_decided`` over ``records``, the stored per-request record:
      None, none read).

    A count left out or mistyped (not a whole number), or a param the policy does not set, decides nothing."""
    bounds, counts = payload.get("bounds"), payload.get("counts")
    if not isinstance(bounds, Mapping) or bounds.get("outcome") not in CUT_OUTCOMES:
        return None
    if not isinstance(counts, Mapping):
        return None
    outcome, gate = bounds["outcome"], payload.get("gate")
    if gate == "semantic":
        items, failed, score = _whole(counts.get("items")), _whole(counts.get("failed")), None
        score = _number(params.get("semantic_min_score"))
        if items is None or failed is None or score is None or not 0 < failed <= items:
            return None
        if items - failed >= score * items:
            return None
        return (
            f"{failed} of its {items} items failed before the run was cut ({outcome}): at most "
            f"{items - failed} can pass, below semantic_min_score {score:g} of them"
        )
    if gate != "benchmark":
        return None
    why: list[str] = []
    errors, cut = _whole(counts.get("errors")), _whole(counts.get("cut"))
    refused = _whole(counts.get("refused")) if outcome == "config" else 0
    maxima = params.get("benchmark_max")
    limit = _number(maxima.get("error_rate")) if isinstance(maxima, Mapping) else None
    requests, repetitions = (
        _whole(params.get("benchmark_requests")),
        _whole(params.get("benchmark_repetitions")),
    )
    levels = params.get("benchmark_concurrency")
    approved = isinstance(levels, list) and requests is not None and repetitions is not None
    levels_run = bounds.get("concurrency")
    largest = (
        max(levels_run)
        if isinstance(levels_run, list) and levels_run and all(_whole(c) for c in levels_run)
        else None
    )
    if None not in (errors, cut, refused, limit) and approved:
        planned = requests * len(levels) * repetitions  # type: ignore[operator,arg-type]
        excused = (cut if largest is not None and cut <= largest else 0) + refused  # type: ignore[operator]
        if errors - excused > limit * planned:  # type: ignore[operator]
            why.append(
                f"{errors - excused} of the {planned} requests of the approved run failed before it was "  # type: ignore[operator]
                f"cut ({outcome}): the error rate cannot stay within {limit:g} whatever the rest would do"
            )
    if records is not None:
        why += figures_decided(records, params, bounds.get("held_from_outside"))
    return "; ".join(why) or None


def _cut_decided_of(e: Evidence, store: ArtifactStore | None, params: Mapping[str, Any]) -> str | None:
    """``e.derived.cut_decided``: ``cut_decided`` of a ``gate.result``, a benchmark's figures judged over its
    stored ``benchmark-requests.jsonl`` (read back once; named other than once, or unreadable: no figure is
    decided — its counts still are)."""
    bounds = e.payload.get("bounds")
    if (
        e.kind != "gate.result"
        or not isinstance(bounds, Mapping)
        or bounds.get("outcome") not in CUT_OUTCOMES
    ):
        return None
    records: list[dict[str, Any]] | None = None
    named = [a for a in e.artifacts if a.get("name") == _BENCHMARK_REQUESTS]
    if e.payload.get("gate") == "benchmark" and store is not None and len(named) == 1:
        try:
            records = list(_artifact_records(store, named[0]))
        except (_Unreadable, LedgerError):
            records = None
    return cut_decided(e.payload, params, records)


def _context_refusal_unshown(
    r: Mapping[str, Any],
    n: int,
    params: Mapping[str, Any] | None,
    launched: tuple[str, int] | None,
    ways: Collection[str] | None = None,
) -> str | None:
    """Why a request recorded refused for the campaign's context length (``refusal`` "context") whose own
    answer was no 4xx — its stream cut after a 2xx status, none, a 5xx: llama-cpp-python's streamed
    "Requested tokens (N) exceed context window of M" — does not show it: such a refusal rests on the
    request's size alone (its ``context``, ``ledger.answers.context_record``, and ``max_tokens``), judged by
    ``ledger.answers.refusal`` with ``params`` and held to ``launched``, the context its attempt's launch
    command gives (None: not known — nothing rests on the record alone), and to ``ways``, the ways the
    program that command runs counts a prompt by (``ledger.answers.launched_counts``; None: usage alone,
    the way of any engine). None: it shows it, or its answer was a 4xx (the engine's own words, judged by the
    collector)."""
    status = r.get("http_status")
    if type(status) is int and 400 <= status <= 499:
        return None
    payload = {
        "check": HARNESS_REQUEST,
        "http_status": status,
        "error": r.get("error"),
        "count": 0,  # the run's own answers are compared below, whatever their order
        "prompt_count": 0,
        "max_tokens": r.get("max_tokens"),
        "details": {CONTEXT_DETAIL: r.get("context")},
    }
    if refusal(payload, params or {}, launched=launched, counts=ways) == REFUSAL_CONTEXT:
        return None
    return (
        f"request {n} is recorded refused for the campaign's context length (HTTP {status}) but its record "
        f"does not show its prompt and max_tokens beyond the context its launch gave the engine "
        f"(context {r.get('context')!r}, max_tokens {r.get('max_tokens')!r}, launched {launched!r})"
    )


def _requests_shown(
    records: Iterable[dict[str, Any]],
    bounds: Any,
    params: Mapping[str, Any] | None = None,
    launched: tuple[str, int] | None = None,
    ways: Collection[str] | None = None,
) -> tuple[dict[str, int], list[str]]:
    """What a harness's per-request record (``benchmark-requests.jsonl``, ``semantic-requests.jsonl``: one
    ``benchmark.RequestRecord`` per request sent, in order) shows, judged request by request: its counts
    (``issued``, ``completed``, ``errors``, ``cut`` — ``ledger.answers.request_cut`` —, ``unanswered``,
    ``timed_out`` — ``request_timed_out`` —, ``refused``, ``completed@cN``) and where it contradicts itself
    or the result:

    * a request it records in two excused categories a rule subtracts together (``_EXCUSED_TOGETHER``: cut,
      unanswered, timed out; cut, refused): one request is one error, excused once at most — the collector
      never records one so (a cut request is one the engine was not asked to finish, an unanswered one lost
      its connection, a timed-out one got nothing in time);
    * ``bounds.fault_kind`` "unanswered" (outcome "fault") where it records no faulted request, or one that
      is not unanswered (``_request_unanswered``);
    * ``bounds.fault_kind`` "timeout" (outcome "fault": the gravest fault a timeout, none answered) where it
      records no faulted request that timed out, or a faulted one the engine answered (an HTTP status, not
      unanswered nor timed out: the collector's "answered" outranks "timeout");
    * more requests unanswered than were in flight at once: a stop from outside cuts the requests in flight
      when it comes — those of one (repetition, level), at most that level's concurrency (and never more
      than the largest level of ``bounds.concurrency``, where it records one);
    * a refusal of the campaign's configuration (``refusal``) another request of the run contradicts,
      whatever their order — the run sends the same credentials with every request, and the same prompt
      and max_tokens each time it asks a prompt: an ``access`` refusal where any request of the run was
      answered, before it or after it; a ``context`` refusal where a request of the same prompt was.

    Raises ``_Unreadable`` for a request that records no error (null or a text), no whole-number level, a
    or a refusal that is none of ``ledger.answers.REFUSALS``."""
    issued = completed = unanswered = faulted = timed_out = faulted_timed_out = faulted_answered = cut = 0
    by_level: dict[str, int] = {}
    in_flight: dict[tuple[int | None, int], int] = {}  # (repetition, level) → its requests unanswered
    twice: list[str] = []  # requests recorded in two excused categories one rule subtracts together
    first_answered: int | None = None
    answered_prompts: dict[str, int] = {}  # prompt id → the first request that answered it
    refused: list[tuple[int, str, Any, Any]] = []  # (request, refusal, prompt id, HTTP status)
    unshown: list[str] = []  # context refusals its record does not show (``_context_refusal_unshown``)
    for r in records:
        n = issued + 1
        error, level, kind = r.get("error", ...), r.get("level"), r.get("refusal")
        if error is not None and not isinstance(error, str):
            raise _Unreadable(f"request {n} records no error (null or a text)")
        if type(level) is not int:
            raise _Unreadable(f"request {n} records no level")
        if kind is not None and kind not in REFUSALS:
            raise _Unreadable(f"request {n} records refusal {kind!r}, none of {list(REFUSALS)}")
        issued = n
        if error is None:
            completed += 1
            by_level[f"completed@c{level}"] = by_level.get(f"completed@c{level}", 0) + 1
            first_answered = n if first_answered is None else first_answered
            answered_prompts.setdefault(str(r.get("prompt_id")), n)
        faulted += r.get("fault") is True
        timed = request_timed_out(r.get("timed_out"), error, r.get("http_status"))
        timed_out += timed
        stopped = request_cut(error)
        excused = {"cut": stopped, "unanswered": _request_unanswered(r), "timed_out": timed}
        excused["refused"] = kind is not None
        for together in _EXCUSED_TOGETHER:
            if len(both := [k for k in together if excused[k]]) > 1:
                twice.append(f"request {n} is recorded {' and '.join(both)}")
                break
        cut += stopped
        faulted_timed_out += timed and r.get("fault") is True
        faulted_answered += (
            r.get("fault") is True
            and not timed
            and not _request_unanswered(r)
            and r.get("http_status") is not None
        )
        if excused["unanswered"]:
            # a repetition left out or mistyped: one run of its level with every other such request (never
            # fewer in flight at once than the record shows — the bound below only tightens)
            rep = r.get("repetition")
            repetition = rep if type(rep) is int else None
            unanswered += 1
            in_flight[(repetition, level)] = in_flight.get((repetition, level), 0) + 1
        if kind is not None:
            refused.append((n, kind, r.get("prompt_id"), r.get("http_status")))
        if kind == REFUSAL_CONTEXT and (why := _context_refusal_unshown(r, n, params, launched, ways)):
            unshown.append(why)
    problems: list[str] = list(unshown)
    if twice:
        more = f" (and {len(twice) - 1} more request(s) so)" if len(twice) > 1 else ""
        problems.append(
            f"{twice[0]}{more}: one request is one error, excused once at most — a rule subtracts both "
            "counts from the run's errors"
        )
    b: Mapping[str, Any] = bounds if isinstance(bounds, dict) else {}
    if (
        b.get("outcome") == "fault"
        and b.get("fault_kind") == FAULT_UNANSWERED
        and (faulted == 0 or unanswered != faulted)
    ):
        problems.append(
            f"bounds.fault_kind {FAULT_UNANSWERED!r}, its record shows {faulted} faulted request(s), "
            f"{unanswered} of them unanswered (no HTTP status, or a 2xx one whose stream was cut)"
        )
    if (
        b.get("outcome") == "fault"
        and b.get("fault_kind") == FAULT_TIMEOUT
        and (faulted_timed_out == 0 or faulted_answered > 0)
    ):
        problems.append(
            f"bounds.fault_kind {FAULT_TIMEOUT!r}, its record shows {faulted_timed_out} faulted request(s) "
            f"timed out and {faulted_answered} the engine answered (an HTTP status)"
        )
    most = _max_concurrency(b) if "concurrency" in b else None
    if len(in_flight) > 1:
        runs = ", ".join(f"c{lv} repetition {rep}" for rep, lv in sorted(in_flight, key=str))
        problems.append(
            f"requests unanswered in {len(in_flight)} runs of a level ({runs}): a stop from outside leaves "
            "unanswered only the requests in flight when it came"
        )
    for (rep, lv), k in sorted(in_flight.items(), key=str):
        bound = min(lv, most) if most is not None else lv
        if k > bound:
            problems.append(
                f"{k} requests unanswered at c{lv} repetition {rep}, more than the {bound} in flight at once"
            )
    for n, kind, prompt, status in refused:
        if kind == REFUSAL_ACCESS and first_answered is not None:
            problems.append(
                f"request {n} is recorded refused for the campaign's access (HTTP {status}) but request "
                f"{first_answered} of the same run was answered: its credentials were met — the refusal "
                "is the engine's, not the campaign's"
            )
        elif kind == REFUSAL_CONTEXT and (m := answered_prompts.get(str(prompt))) is not None:
            problems.append(
                f"request {n} is recorded refused for the campaign's context length (prompt {prompt}) but "
                f"request {m} of the same run answered that prompt: it fits — the refusal is the engine's"
            )
    shown = {
        "issued": issued,
        "completed": completed,
        "errors": issued - completed,
        "cut": cut,
        "unanswered": unanswered,
        "timed_out": timed_out,
        "refused": len(refused),
        **by_level,
    }
    return shown, problems


class _Head:
    """The first ``n`` bytes of a binary stream, as a stream."""

    def __init__(self, f: Any, n: int) -> None:
        self._f, self._left = f, n

    def read(self, size: int) -> bytes:
        if self._left <= 0:
            return b""
        data: bytes = self._f.read(min(size, self._left))
        self._left -= len(data)
        return data


def _lines_of(f: Any) -> Iterator[str]:
    """A binary stream as text in pieces of whole lines (the last may lack its newline). A "line" longer
    than a piece (no newline in a whole chunk: not a log line) is cut, so memory stays bounded."""
    rest = b""
    while chunk := f.read(_LOG_CHUNK):
        head, nl, rest = (rest + chunk).rpartition(b"\n")
        if nl:
            yield head.decode("utf-8", errors="replace") + "\n"
        if len(rest) > _LOG_CHUNK:
            yield rest.decode("utf-8", errors="replace")
            rest = b""
    if rest:
        yield rest.decode("utf-8", errors="replace")


def _human(seconds: float) -> str:
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= n and seconds % n == 0:
            return f"{int(seconds // n)}{unit}"
    return f"{seconds:g}s"
