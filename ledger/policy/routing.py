"""The routing-change gate: allow a production change only when the routing policy's checks all hold."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger.entries import format_time, now_utc, parse_time
from ledger.errors import InputError, PolicyError, SignatureError
from ledger.policy.acceptance import _trust_problem, render
from ledger.policy.loader import LoadedPolicy
from ledger.policy.model import parse_duration
from ledger.policy.rules import Rule
from ledger.policy.snapshot import Evidence, Snapshot, check_signature, evidence_from_row, keyring_at

if TYPE_CHECKING:
    # the ledger as the policy sees it (ledger.service.Ledger is one); the policy never imports the service
    from ledger.policy.port import PolicyLedger as Ledger

__all__ = ["check_routing_change", "load_deployment"]

REQUIRED_SUBJECT = ("model", "host")
ACTIONS = ("route", "restore")


def load_deployment(path: Path) -> dict[str, Any]:
    """A deployment description (TOML or JSON): ``host`` and ``[[services]]`` with gpus and utilisation."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise InputError(f"cannot read deployment {path}: {e.strerror}") from e
    try:
        data = json.loads(raw) if path.suffix == ".json" else tomllib.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: not a valid deployment file: {e}") from e
    if not isinstance(data, dict):
        raise InputError(f"{path}: a deployment must be an object with services")
    _validate_deployment(data, str(path))
    return data


def _validate_deployment(data: Mapping[str, Any], where: str) -> None:
    services = data.get("services")
    if not isinstance(services, list) or not services:
        raise InputError(f"{where}: a deployment needs a non-empty `services` list")
    for i, s in enumerate(services):
        if not isinstance(s, dict) or "name" not in s or "gpus" not in s:
            raise InputError(f"{where}: services[{i}] needs `name` and `gpus`")
        if not all(isinstance(g, int) for g in s["gpus"]):
            raise InputError(f"{where}: services[{i}].gpus must be GPU indices")
        util = s.get("gpu_memory_utilization", 0.0)
        if not isinstance(util, int | float) or not 0 <= util <= 1:
            raise InputError(f"{where}: services[{i}].gpu_memory_utilization must be within 0..1")


def _layout(deployment: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Per-GPU utilisation sums and per-service views of a deployment, in a deterministic order."""
    sums: dict[int, float] = {}
    names: dict[int, list[str]] = {}
    services = []
    for s in deployment["services"]:
        util = float(s.get("gpu_memory_utilization", 0.0))
        gpus = [int(g) for g in s["gpus"]]
        for g in gpus:
            sums[g] = sums.get(g, 0.0) + util
            names.setdefault(g, []).append(f"{s['name']} {util:g}")
        env = {str(k): str(v) for k, v in (s.get("env") or {}).items()}
        services.append(
            {
                "name": str(s["name"]),
                "model": str(s.get("model", "")),
                "gpus": gpus,
                "gpus_text": "+".join(str(g) for g in gpus),
                "multi_gpu": len(gpus) > 1,
                "env": env,
                "gpu_memory_utilization": util,
            }
        )
    gpus_out = [
        {"gpu": g, "util_sum": round(sums[g], 6), "services": names[g], "detail": " + ".join(names[g])}
        for g in sorted(sums)
    ]
    return gpus_out, services


def _entries(
    ledger: Ledger, *, subject: dict[str, str], kinds: tuple[str, ...], size: int, snap: Snapshot
) -> list[Evidence]:
    out: list[Evidence] = []
    for kind in kinds:
        for le in ledger.query(subject=subject, kind=kind, at_size=size, limit=None):
            e = evidence_from_row(le)
            rec = snap.keyring.keys.get(e.signer)  # type: ignore[call-overload]
            if rec is not None:
                e.signer_name, e.roles = rec.name, tuple(sorted(rec.roles))
            out.append(e)
    return sorted(out, key=lambda x: x.seq)


def _cancelled(ledger: Ledger, e: Evidence, size: int, snap: Snapshot, policy: LoadedPolicy) -> str | None:
    """Why a trusted supersession or rejecting acceptance takes ``e`` out, or None."""
    for le in ledger.referrers(e.id):
        if le.seq >= size or le.kind not in ("supersession", "acceptance"):
            continue
        r = evidence_from_row(le)
        rec = snap.keyring.keys.get(r.signer)  # type: ignore[call-overload]
        if rec is not None:
            r.signer_name, r.roles = rec.name, tuple(sorted(rec.roles))
        if _trust_problem(r, snap, policy) is not None:
            continue
        if r.kind == "supersession" and e.id in r.refs("supersedes"):
            return f"superseded by {r.id[:16]}"
        if r.kind == "acceptance" and e.id in r.refs("subject") and r.payload.get("decision") == "rejected":
            return f"rejected by acceptance {r.id[:16]}"
    return None


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
) -> dict[str, Any]:
    """Judge a routing change; ``allowed`` is True only when every applicable check holds."""
    if policy.kind != "routing" or policy.spec.routing is None:
        raise PolicyError(f"{policy.path}: {policy.name} is a {policy.kind} policy, not a routing policy")
    if action not in ACTIONS:
        raise InputError(f"unknown action {action!r}; one of {', '.join(ACTIONS)}")
    missing = [k for k in REQUIRED_SUBJECT if k not in subject]
    if missing:
        raise InputError(f"a routing change names its {' and '.join(missing)}: --subject {missing[0]}=…")
    routing = policy.spec.routing
    size = ledger.size() if at_size is None else at_size
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
    match = {k: v for k, v in subject.items() if k in routing.match_subject}
    ignored: list[dict[str, str]] = []

    def usable(e: Evidence, roles: list[str] | None = None) -> bool:
        problem = _trust_problem(e, snap, policy)
        if problem is None and roles is not None and not set(e.roles) & set(roles):
            problem = (Rule.WRONG_ROLE, f"signer {e.signer_name} holds {list(e.roles)}; needs one of {roles}")
        if problem is None:
            why = _cancelled(ledger, e, size, snap, policy)
            if why is not None:
                problem = (
                    Rule.SUPERSEDED if why.startswith("superseded") else Rule.REJECTED_BY_ACCEPTANCE,
                    why,
                )
        if problem is None:
            try:
                check_signature(e, snap.keyring)
            except SignatureError as ex:
                problem = (Rule.BAD_SIGNATURE, ex.message)
        if problem is not None:
            ignored.append({"entry": e.id, "kind": e.kind, "rule": str(problem[0]), "detail": problem[1]})
            return False
        return True

    verdict: Evidence | None = None
    for e in reversed(_entries(ledger, subject=match, kinds=("verdict",), size=size, snap=snap)):
        if e.payload.get("policy", {}).get("name") != routing.qualification:
            continue
        if usable(e, routing.verdict_roles):
            verdict = e
            break
    host_name = subject["host"]
    host_entries = _entries(
        ledger, subject={"host": host_name}, kinds=("kernel.log", "host.probe", "note"), size=size, snap=snap
    )
    facts: dict[str, bool] = {}
    fact_sources: dict[str, list[str]] = {}
    for name, cond in policy.host_facts.items():
        hits = [e for e in host_entries if cond.holds({"e": e.view(), "params": params})]
        hits = [e for e in hits if usable(e)]
        facts[name] = bool(hits)
        fact_sources[name] = [e.id for e in hits]
    deployment_source = "--deployment"
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
        _validate_deployment(deployment, deployment_source or "deployment")
    gpus, services = _layout(deployment) if deployment is not None else ([], [])
    max_probe_age = parse_duration(routing.probe_max_age)
    probes = []
    for e in _entries(ledger, subject=match, kinds=("health.probe",), size=size, snap=snap):
        age = (when - e.collected_time).total_seconds()
        if 0 <= age <= max_probe_age and usable(e):
            probes.append(e)
    verdict_age = (when - verdict.logged_time).total_seconds() if verdict is not None else None
    identities = sorted({p.payload["model_identity"] for p in probes if p.payload.get("model_identity")})
    ctx: dict[str, Any] = {
        "request": {
            "action": action,
            "subject": subject,
            "subject_text": " ".join(f"{k}={v}" for k, v in sorted(subject.items())),
        },
        "verdict": verdict.view() if verdict is not None else None,
        "verdict_age_s": verdict_age,
        "verdict_age_text": _age_text(verdict_age) if verdict_age is not None else "",
        "max_verdict_age_s": parse_duration(routing.verdict_max_age),
        "host": {"name": host_name, **facts},
        "deployment": deployment,
        "gpus": gpus,
        "services": services,
        "probes": [p.view() for p in probes],
        "identities_text": ", ".join(identities) or "(none reported)",
        "params": params,
        "routing": routing.model_dump(mode="json", exclude={"checks", "host_fact"}),
    }
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
                    fails.append(render(rc.spec.fail, item_ctx))
        elif not rc.expr.holds(ctx):
            fails.append(render(rc.spec.fail, ctx))
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
            }
            if verdict is not None
            else None
        ),
        "host": {"name": host_name, "facts": facts, "fact_sources": fact_sources},
        "deployment": {"source": deployment_source, "gpus": gpus} if deployment is not None else None,
        "probes": [p.id for p in probes],
        "ignored": ignored,
    }


def parse_now(text: str | None) -> datetime | None:
    return parse_time(text) if text else None
