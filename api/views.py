"""Server-rendered reviewer pages (no JavaScript): subjects, one subject's timeline, one entry."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from ledger.api.auth import Reader
from ledger.api.deps import LedgerDep
from ledger.errors import LedgerError
from ledger.proofs import verify_proof_document
from ledger.service import Ledger, LoggedEntry

__all__ = ["router"]

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=str(Path(__file__).resolve().parent / "templates"))
templates.env.filters["pretty"] = lambda v: json.dumps(v, indent=2, sort_keys=True, ensure_ascii=False)

_PAGE = 100  # entries per timeline page; "next" links to the following page


def _latest_verdict(ledger: Ledger, field: str, value: str) -> dict[str, Any] | None:
    """The latest recorded ``verdict`` entry naming FIELD=VALUE (``ledger verdict --record`` writes them)."""
    found = ledger.query(subject={field: value}, kind="verdict", descending=True, limit=1)
    if not found:
        return None
    p = found[0].statement.payload
    policy: dict[str, Any] = p["policy"] if isinstance(p.get("policy"), dict) else {}
    checkpoint: dict[str, Any] = p["checkpoint"] if isinstance(p.get("checkpoint"), dict) else {}
    return {
        "verdict": p.get("verdict"),
        "status": p.get("status"),
        "id": found[0].entry_id,
        "policy": policy,
        "policy_name": policy.get("name", ""),
        "checkpoint_size": checkpoint.get("size"),
        "logged_at": found[0].logged_at,
    }


def _rejection_reason(item: dict[str, Any]) -> str:
    """A verdict's rejection as a reviewer reads it: the engine's ``rule: detail`` (older: ``reason``)."""
    if item.get("reason"):
        return str(item["reason"])
    rule, detail = item.get("rule", ""), item.get("detail", "")
    return f"{rule}: {detail}" if rule and detail else str(rule or detail)


@router.get("/", response_class=HTMLResponse)
def home(request: Request, ledger: LedgerDep, _who: Reader) -> HTMLResponse:
    rows = [
        {"s": s, "verdict": _latest_verdict(ledger, s.field, s.value)} for s in ledger.subjects(limit=200)
    ]
    return templates.TemplateResponse(
        request, "subjects.html", {"rows": rows, "size": ledger.size(), "origin": ledger.origin}
    )


def _annotate(entries: list[LoggedEntry]) -> dict[str, list[dict[str, Any]]]:
    """What later entries of the timeline say about earlier ones: superseded, rejected, reviewed …"""
    notes: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in entries:
        p = e.statement.payload
        for r in e.statement.refs:
            if e.kind == "supersession" and r.rel == "supersedes":
                notes[r.id].append(
                    {"tag": "superseded", "bad": True, "by": e.entry_id, "reason": p.get("reason", "")}
                )
            elif e.kind == "acceptance" and p.get("decision") == "rejected":
                notes[r.id].append(
                    {"tag": "not accepted", "bad": True, "by": e.entry_id, "reason": p.get("reason", "")}
                )
            elif e.kind == "acceptance":
                notes[r.id].append(
                    {"tag": "accepted", "bad": False, "by": e.entry_id, "reason": p.get("reason", "")}
                )
            elif e.kind == "review":
                notes[r.id].append(
                    {
                        "tag": f"review {p.get('result', '')}",
                        "bad": p.get("result") == "FAIL",
                        "by": e.entry_id,
                        "reason": p.get("summary") or "",
                    }
                )
        if e.kind == "verdict":
            for item in p.get("rejected", []):
                target = item.get("id") or item.get("entry") or ""
                notes[target].append(
                    {
                        "tag": "rejected by policy",
                        "bad": True,
                        "by": e.entry_id,
                        "reason": _rejection_reason(item),
                    }
                )
    return notes


@router.get("/subjects/{field}/{value}", response_class=HTMLResponse)
def timeline(
    request: Request,
    ledger: LedgerDep,
    _who: Reader,
    field: str,
    value: str,
    after: Annotated[int | None, Query()] = None,
) -> HTMLResponse:
    entries = ledger.query(subject={field: value}, after_seq=after, limit=_PAGE)
    names = ledger.signer_names()
    notes = _annotate(entries)
    gates = [e for e in entries if e.kind == "gate.result"]
    rejected = [(e, n) for e in entries for n in notes.get(e.entry_id, []) if n["bad"]]
    return templates.TemplateResponse(
        request,
        "timeline.html",
        {
            "field": field,
            "value": value,
            "entries": entries,
            "names": names,
            "notes": notes,
            "gates": gates,
            "rejected": rejected,
            "verdict": _latest_verdict(ledger, field, value),
            "next_after": entries[-1].seq if len(entries) == _PAGE else None,
        },
    )


def _signature_status(ledger: Ledger, entry: LoggedEntry) -> dict[str, Any]:
    try:
        rec = ledger.signature_status(entry)
    except LedgerError as e:
        return {"ok": False, "code": e.code, "message": e.message}
    return {
        "ok": True,
        "name": rec.name,
        "roles": sorted(rec.roles),
        "key_id": rec.key_id,
        "revoked_at": rec.revoked_at.isoformat() if rec.revoked_at else None,
    }


@router.get("/entries/{entry_id}", response_class=HTMLResponse)
def entry_page(request: Request, ledger: LedgerDep, _who: Reader, entry_id: str) -> HTMLResponse:
    entry = ledger.get(entry_id)
    ledger.keep_checkpoint(None)
    proof = ledger.inclusion(entry.entry_id)
    try:
        checked = verify_proof_document(proof, ledger.log_public_key().b64, ledger.log_key_name)
        proof_status = {"ok": True, "detail": checked.get("detail", "")}
    except LedgerError as e:
        proof_status = {"ok": False, "detail": e.message}
    return templates.TemplateResponse(
        request,
        "entry.html",
        {
            "e": entry,
            "data": entry.to_json(ledger.signer_names().get(entry.signer)),
            "sig": _signature_status(ledger, entry),
            "proof": proof,
            "proof_status": proof_status,
            "referrers": ledger.referrers(entry.entry_id),
        },
    )
