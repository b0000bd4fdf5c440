"""Server-rendered reviewer pages (no JavaScript): subjects, a subject's timeline, the verdict ladder and
the diff of two verdicts, entries summarised by kind, an inline log viewer, hosts, error types."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse

from ledger.api import summaries
from ledger.api.auth import Reader
from ledger.api.deps import LedgerDep
from ledger.api.lookup import artifact_info, is_text, subject_query
from ledger.api.models import ENTRY_ID
from ledger.api.pages import page, templates
from ledger.db import SEQ_MAX
from ledger.entries import judged_subject_problem
from ledger.errors import EntryNotFoundError, InputError, LedgerError
from ledger.hashing import parse_digest
from ledger.policy.snapshot import same_hosts
from ledger.proofs import verify_proof_document
from ledger.reads import parse_subject_pairs
from ledger.service import Ledger, LoggedEntry

__all__ = ["router"]

router = APIRouter(include_in_schema=False)

_PAGE = 100  # entries per timeline page; "next" links to the following page
_SUBJECTS_PAGE = 200  # subjects per home page; "older subjects →" links to the following page
_VIEW_BYTES = 4 * 1024 * 1024  # the log viewer shows at most this much of an artifact
_POLICY_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,99}$")


# --- the addresses of subject and host pages ---------------------------------------------------------
# A subject value is any text of 1..512 characters: a Hugging Face model id holds "/", a campaign may hold
# spaces, "%", "#", "?" or non-ASCII letters. Every link to a subject's or a host's page is built here (the
# templates call these helpers) and the routes read what they build: the value is one path segment with
# every reserved character escaped ("/" as %2F: the server sees it decoded, hence the ``path`` converters).
# "." and ".." cannot be a path segment — browsers and HTTP clients resolve them (escaped or not) as dot
# segments — so those two values go in the query instead (``?value=`` / ``?host=``).

_DOT_SEGMENTS = (".", "..")


def _address(base: str, value: str, query_name: str, extra: list[tuple[str, str]]) -> str:
    if value in _DOT_SEGMENTS:
        path, query = base, [(query_name, value), *extra]
    else:
        path, query = base + quote(value, safe=""), extra
    return path + ("?" + urlencode(query, quote_via=quote) if query else "")


def subject_href(field: str, value: str, *, after: int | None = None) -> str:
    """The address of FIELD=VALUE's timeline page (``after``: the page of entries after that seq)."""
    extra = [("after", str(after))] if after is not None else []
    return _address(f"/subjects/{quote(field, safe='')}/", value, "value", extra)


def host_href(host: str) -> str:
    """The address of a host's page."""
    return _address("/hosts/", host, "host", [])


def verdict_href(subject: dict[str, str], policy: str | None = None) -> str:
    """The address of the gate ladder of SUBJECT's verdict now (under ``policy``, else the default)."""
    query = [("subject", f"{k}={v}") for k, v in sorted(subject.items())]
    return "/verdict?" + urlencode([*query, *([("policy", policy)] if policy else [])], quote_via=quote)


templates.env.globals["subject_href"] = subject_href
templates.env.globals["host_href"] = host_href
templates.env.globals["verdict_href"] = verdict_href


def _one_value(in_path: str, in_query: str | None, name: str) -> str:
    """The value a page's address names: in its path, or (``.``/``..``, see ``_address``) in its query."""
    if in_query is None:
        if not in_path:
            raise InputError(f"the address names no {name}", hint=f"e.g. /{name}s/… or ?{name}=…")
        return in_path
    if in_path:
        raise InputError(f"the address names the {name} twice: in its path and as ?{name}=")
    return in_query


def _latest_verdict(ledger: Ledger, field: str, value: str) -> dict[str, Any] | None:
    """The latest recorded ``verdict`` entry naming FIELD=VALUE (``ledger verdict --record`` writes them):
    a claim as of its checkpoint, which later evidence (a supersession, a rejection, staleness) may have
    overturned — a page shows it as recorded, with its time, never as the verdict now. Its word is shown
    only when its recorded result reads (``Ledger.verdict_result``), says that word and judged the subject
    the entry is logged under (``judged_subject_problem``, as ingest and replay read it: a result of
    another campaign is never this row's); else ``problem`` says why, and the page shows it as unreadable
    (never as the word its payload claims).

    ``subject`` is the subject a page derives the verdict now for — from what the log knows of the row
    FIELD=VALUE, never from a subject the entry's payload names: the row itself where FIELD is the
    campaign; else the campaign the entry is logged under, with FIELD=VALUE as a claim the verdict checks
    against the campaign's own entries (none: the row alone, which the verdict refuses to judge)."""
    found = ledger.query(subject={field: value}, kind="verdict", descending=True, limit=1)
    if not found:
        return None
    entry = found[0]
    p = entry.statement.payload
    policy: dict[str, Any] = p["policy"] if isinstance(p.get("policy"), dict) else {}
    checkpoint: dict[str, Any] = p["checkpoint"] if isinstance(p.get("checkpoint"), dict) else {}
    problem: str | None = None
    try:
        result = ledger.verdict_result(entry)
    except LedgerError as e:
        problem = e.message
    else:
        if result.get("verdict") != p.get("verdict"):
            problem = f"its payload says {p.get('verdict')!r}, its recorded result {result.get('verdict')!r}"
        else:
            problem = judged_subject_problem(entry.statement, result)
    campaign = entry.statement.subject.get("campaign")
    subject = {field: value} if field == "campaign" or not campaign else {"campaign": campaign, field: value}
    return {
        "verdict": p.get("verdict") if problem is None else None,
        "problem": problem,
        "status": p.get("status"),
        "id": entry.entry_id,
        "policy": policy,
        "policy_name": policy.get("name", ""),
        "checkpoint_size": checkpoint.get("size"),
        "logged_at": entry.logged_at,
        "subject": subject,
    }


_DERIVE_MAX = 20  # verdicts a list page derives now (distinct subjects); past that it links to each


def _verdict_now(
    ledger: Ledger, recorded: dict[str, Any] | None, memo: dict[tuple[str, ...], dict[str, Any]]
) -> dict[str, Any] | None:
    """Beside a recorded verdict, the verdict derived now for its row's subject (``_latest_verdict``'s
    ``subject``: what the log knows of the row, never the entry's claim) under its policy (``verdict``,
    or ``problem`` when the server cannot derive it) and the ``href`` of its gate ladder; past
    ``_DERIVE_MAX`` distinct subjects only the ``href``. ``memo`` spans one page's rows."""
    if recorded is None:
        return None
    name = str(recorded["policy_name"] or "backend-qualification")
    subject: dict[str, str] = recorded["subject"]
    key = (name, *(f"{k}={v}" for k, v in sorted(subject.items())))
    if key in memo:
        return memo[key]
    href = verdict_href(subject, name) if _POLICY_NAME.match(name) else None
    now: dict[str, Any] = {"href": href}
    if len(memo) < _DERIVE_MAX:
        try:
            result = _evaluate(ledger, subject, name, None)
        except LedgerError as e:
            now = {"href": None, "problem": e.message}
        else:
            now["verdict"] = result.get("verdict")
            now["size"] = (result.get("checkpoint") or {}).get("size")
    memo[key] = now
    return now


def _rejection_reason(item: dict[str, Any]) -> str:
    """A verdict's rejection as a reviewer reads it: the engine's ``rule: detail`` (older: ``reason``)."""
    if item.get("reason"):
        return str(item["reason"])
    rule, detail = item.get("rule", ""), item.get("detail", "")
    return f"{rule}: {detail}" if rule and detail else str(rule or detail)


@router.get("/", response_class=HTMLResponse)
def home(
    request: Request,
    ledger: LedgerDep,
    _who: Reader,
    after: Annotated[str | None, Query(max_length=200, description="a subject list's `next`")] = None,
) -> HTMLResponse:
    """The subjects, most recently active first, ``_SUBJECTS_PAGE`` a page ("older subjects →" links on)."""
    memo: dict[tuple[str, ...], dict[str, Any]] = {}
    rows = []
    subjects, next_cursor = ledger.subjects_page(limit=_SUBJECTS_PAGE, after=after)
    for s in subjects:
        recorded = _latest_verdict(ledger, s.field, s.value)
        rows.append({"s": s, "verdict": recorded, "now": _verdict_now(ledger, recorded, memo)})
    context = {
        "rows": rows,
        "size": ledger.size(),
        "origin": ledger.origin,
        "first_page": after is None,
        "next_href": "/?" + urlencode({"after": next_cursor}) if next_cursor else None,
    }
    return page(request, "subjects.html", context)


def _annotate(ledger: Ledger, entries: list[LoggedEntry]) -> dict[str, list[dict[str, Any]]]:
    """What the log says about a page's entries: superseded, rejected, reviewed … — from the page and from
    every entry that references one (a later page, another subject: one refs read for the page's ids)."""
    notes: dict[str, list[dict[str, Any]]] = defaultdict(list)
    on_page = {e.entry_id for e in entries}
    # what points at this page's entries from anywhere in the log (a later page, another subject): one read
    later = [e for e in ledger.referrers(on_page) if e.entry_id not in on_page]
    for e in [*entries, *later]:
        p = e.statement.payload
        for r in e.statement.refs:
            if r.id not in on_page:
                continue
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
            try:
                recorded = ledger.verdict_result(e)
            except LedgerError as ex:
                notes[e.entry_id].append(
                    {"tag": "result unreadable", "bad": True, "by": e.entry_id, "reason": ex.message}
                )
                continue
            for item in recorded.get("rejected", []):
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


def _policy_name(name: str) -> str:
    if not _POLICY_NAME.match(name):
        raise InputError(f"policy {name!r} is not a policy name", hint="e.g. backend-qualification")
    return name


def _evaluate(ledger: Ledger, subject: dict[str, str], policy: str, at: int | None) -> dict[str, Any]:
    return ledger.evaluate_verdict(subject, Ledger.load_policy(_policy_name(policy)), at_size=at)


def _try_evaluate(
    ledger: Ledger, subject: dict[str, str], policy: str
) -> tuple[dict[str, Any] | None, str | None]:
    """The verdict now of a subject the policy judges (a campaign), or why the server cannot derive it
    (shown as such: a page never reads a verdict it could not derive as "no verdict")."""
    try:
        return _evaluate(ledger, subject, policy, None), None
    except LedgerError as e:
        return None, e.message


@router.get("/subjects/{field}/{value:path}", response_class=HTMLResponse)
def timeline(
    request: Request,
    ledger: LedgerDep,
    _who: Reader,
    field: str,
    value: str,
    after: Annotated[int | None, Query(ge=0, le=SEQ_MAX)] = None,
    value_in_query: Annotated[str | None, Query(alias="value", max_length=512)] = None,
) -> HTMLResponse:
    """One subject's timeline; the address is ``subject_href``'s (a value may hold "/": ``path``)."""
    if value_in_query is None:
        # the value as sent: the route's pattern ends in ``$``, which also matches before a final newline
        # (``/subjects/campaign/c1%0A`` would read as c1, another subject than the one asked about)
        prefix = f"/subjects/{field}/"
        sent = request.scope["path"]
        if prefix in sent:
            value = sent[sent.index(prefix) + len(prefix) :]
    value = _one_value(value, value_in_query, "value")
    # the address read as every subject question is (one reader: a value with white space around it is
    # refused naming the field, never shown as the timeline of another subject)
    [(field, value)] = parse_subject_pairs([(field, value)], given_as="the address's ").items()
    entries = ledger.query(subject={field: value}, after_seq=after, limit=_PAGE)
    if not entries and after is None:
        raise EntryNotFoundError(
            f"no entry names {field}={value}", hint="the subjects page (/) lists the subjects the log knows"
        )
    names = ledger.signer_names()
    notes = _annotate(ledger, entries)
    rejected = [(e, n) for e in entries for n in notes.get(e.entry_id, []) if n["bad"]]
    # the verdict now judges the whole campaign: every page of its timeline shows it whole, with its
    # reasons (the /verdict page's ladder, rejected evidence, what no gate judges), beside the log's notes
    result, problem = (
        _try_evaluate(ledger, {field: value}, "backend-qualification")
        if field == "campaign"
        else (None, None)
    )
    verdicts = ledger.query(subject={field: value}, kind="verdict", limit=200)
    return page(
        request,
        "timeline.html",
        {
            "field": field,
            "value": value,
            "entries": entries,
            "names": names,
            "notes": notes,
            "summary": {e.entry_id: summaries.row_note(e) for e in entries},
            "rejected": rejected,
            "verdict": _latest_verdict(ledger, field, value),
            **(_verdict_context(ledger, result) if result is not None else {}),
            "now_problem": problem,
            "charts": summaries.subject_charts(entries, verdicts),
            "verdicts": verdicts,
            "next_href": subject_href(field, value, after=entries[-1].seq) if len(entries) == _PAGE else None,
        },
    )


def _entry_links(ledger: Ledger, ids: set[str]) -> dict[str, dict[str, Any]]:
    """Kind and a one-line note of each entry a verdict names (ids the log does not hold are left out)."""
    out: dict[str, dict[str, Any]] = {}
    for i in ids:
        try:
            e = ledger.get(i)
        except LedgerError:
            continue
        out[i] = {"kind": e.kind, "seq": e.seq, "note": summaries.row_note(e)}
    return out


def _verdict_context(ledger: Ledger, result: dict[str, Any]) -> dict[str, Any]:
    ids = {i for g in result.get("gates", []) for i in g.get("evidence", [])}
    ids |= {r.get("entry", "") for r in result.get("rejected", [])}
    ids |= {r.get("by", "") for r in result.get("rejected", []) if r.get("by")}
    ids |= {r.get("entry", "") for r in result.get("not_credited", [])}
    ids |= {r.get("entry", "") for r in result.get("unjudged", [])}
    return {"r": result, "links": _entry_links(ledger, {i for i in ids if i})}


@router.get("/verdict", response_class=HTMLResponse)
def verdict_page(
    request: Request,
    ledger: LedgerDep,
    _who: Reader,
    subject: Annotated[list[str], Query(description="FIELD=VALUE")],
    policy: Annotated[str, Query(max_length=100)] = "backend-qualification",
    at: Annotated[int | None, Query(ge=1)] = None,
) -> HTMLResponse:
    """The policy's gate ladder over the subject's evidence, evaluated now (or at log size ``at``)."""
    subj = subject_query(subject)
    if not subj:
        raise InputError("name the subject: ?subject=FIELD=VALUE")
    result = _evaluate(ledger, subj, policy, at)
    recorded = ledger.query(subject=subj, kind="verdict", descending=True, limit=20)
    return page(
        request,
        "verdict.html",
        {
            **_verdict_context(ledger, result),
            "recorded": recorded,
            "evaluated": True,
            "at": at,
            "policy_name": policy,
        },
    )


def _side(ledger: Ledger, ref: str) -> tuple[str, dict[str, Any]]:
    """A verdict to compare: a recorded verdict entry (id or prefix)."""
    e = ledger.get(ref)
    if e.kind != "verdict":
        raise InputError(f"entry {e.entry_id} is a {e.kind} entry, not a verdict")
    return e.entry_id, ledger.verdict_result(e)


@router.get("/verdicts/diff", response_class=HTMLResponse)
def verdict_diff(
    request: Request,
    ledger: LedgerDep,
    _who: Reader,
    a: Annotated[str, Query(pattern=ENTRY_ID, description="the earlier verdict entry")],
    b: Annotated[str, Query(pattern=ENTRY_ID, description="the later verdict entry")],
) -> HTMLResponse:
    """What flipped between two recorded verdicts: the word, each gate, the evidence rejected or used."""
    id_a, ra = _side(ledger, a)
    id_b, rb = _side(ledger, b)
    diff = summaries.diff_verdicts(ra, rb)
    ids = {r["entry"] for r in diff["newly_rejected"] + diff["no_longer_rejected"]}
    ids |= set(diff["used_gained"]) | set(diff["used_lost"])
    return page(
        request,
        "diff.html",
        {"a": id_a, "b": id_b, "ra": ra, "rb": rb, "d": diff, "links": _entry_links(ledger, ids)},
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
    proof = ledger.inclusion(entry.entry_id)
    try:
        checked = verify_proof_document(proof, ledger.log_public_key().b64, ledger.note_key_name)
        proof_status = {"ok": True, "detail": checked.get("detail", "")}
    except LedgerError as e:
        proof_status = {"ok": False, "detail": e.message}
    data = entry.to_json(ledger.signer_names().get(entry.signer))
    ctx: dict[str, Any] = {
        "e": entry,
        "data": data,
        "sig": _signature_status(ledger, entry),
        "proof": proof,
        "proof_status": proof_status,
        "referrers": ledger.referrers(entry.entry_id),
        "s": summaries.entry_summary(entry),
        "text_artifacts": {a.digest for a in entry.statement.artifacts if a.stored and is_text(a.media_type)},
    }
    if entry.kind == "verdict":
        try:
            ctx.update(_verdict_context(ledger, ledger.verdict_result(entry)))
        except LedgerError as ex:
            ctx["result_problem"] = ex.message
        ctx["previous"] = summaries.previous_verdict(ledger, entry)
    return page(request, "entry.html", ctx)


def _failure_lines(ledger: Ledger, digest: str) -> list[str]:
    """The failure details of the launches that recorded this artifact (the lines to highlight)."""
    out = []
    for _seq, eid in ledger.entries_with_artifact(digest)[:20]:
        e = ledger.get(eid)
        detail = e.statement.payload.get("failure_detail") if e.kind == "engine.launch" else None
        if isinstance(detail, str) and detail.strip():
            out.append(detail.strip())
    return out


@router.get("/artifacts/{digest}", response_class=HTMLResponse)
async def log_viewer(
    request: Request,
    ledger: LedgerDep,
    _who: Reader,
    digest: str,
    q: Annotated[str | None, Query(max_length=200, description="show lines containing this text")] = None,
) -> HTMLResponse:
    """A text artifact shown inline: numbered lines, a search, the launch's failure line highlighted."""
    d = str(parse_digest(digest))
    info = await run_in_threadpool(artifact_info, ledger, d)
    if info is None or not await run_in_threadpool(ledger.has_artifact, d):
        raise EntryNotFoundError(f"no stored artifact {d} is named by an entry")
    ctx: dict[str, Any] = {"info": info, "digest": d, "q": q or "", "text": is_text(info.media_type)}
    if ctx["text"]:

        def read() -> bytes:
            with ledger.open_artifact(d) as f:
                return f.read(_VIEW_BYTES + 1)

        raw = await run_in_threadpool(read)
        failures = await run_in_threadpool(_failure_lines, ledger, d)
        ctx.update(summaries.log_lines(raw[:_VIEW_BYTES].decode("utf-8", "replace"), q or "", failures))
        ctx["truncated"] = len(raw) > _VIEW_BYTES
        ctx["failures"] = failures
    return page(request, "log.html", ctx)


_HOSTS_MAX = 10_000  # host spellings a host page compares (the most recently active first)


def _host_spellings(ledger: Ledger, host: str) -> list[str]:
    """The spellings the log holds of ``host`` as host names compare (``host_key``: case-insensitive, a
    trailing dot ignored); ``host`` itself when the log holds no other."""
    known = [s.value for s in ledger.subjects(field="host", limit=_HOSTS_MAX)]
    return same_hosts([host], known) or [host]


@router.get("/hosts/{host:path}", response_class=HTMLResponse)
def host_page(
    request: Request,
    ledger: LedgerDep,
    _who: Reader,
    host: str,
    host_in_query: Annotated[str | None, Query(alias="host", max_length=512)] = None,
) -> HTMLResponse:
    """A host: its latest probe (OS, GPUs, driver), and the campaigns whose evidence names it — under any
    spelling of its name (host names compare case-insensitively, as the policy compares them)."""
    host = _one_value(host, host_in_query, "host")
    spellings = _host_spellings(ledger, host)
    probes = sorted(
        (
            e
            for h in spellings
            for e in ledger.query(subject={"host": h}, kind="host.probe", descending=True, limit=20)
        ),
        key=lambda e: e.seq,
        reverse=True,
    )[:20]
    merged: dict[str, tuple[int, str]] = {}
    for h in spellings:
        for c, n, last in ledger.co_subjects("host", h, "campaign"):
            seen, seen_last = merged.get(c, (0, ""))
            merged[c] = (seen + n, max(seen_last, last))
    campaigns = sorted(((c, n, last) for c, (n, last) in merged.items()), key=lambda r: r[2], reverse=True)
    if not probes and not campaigns:
        raise EntryNotFoundError(f"no entry names host={host}", hint="the subjects page (/) lists the hosts")
    memo: dict[tuple[str, ...], dict[str, Any]] = {}
    rows = []
    for c, n, last in campaigns:
        recorded = _latest_verdict(ledger, "campaign", c)
        rows.append(
            {
                "campaign": c,
                "entries": n,
                "last": last,
                "verdict": recorded,
                "now": _verdict_now(ledger, recorded, memo),
            }
        )
    return page(
        request,
        "host.html",
        {
            "host": host,
            "spellings": spellings,
            "probe": probes[0] if probes else None,
            "facts": summaries.host_facts(probes[0]) if probes else [],
            "gpus": probes[0].statement.payload.get("gpus") or [] if probes else [],
            "campaigns": rows,
        },
    )


@router.get("/errors/{code}", response_class=HTMLResponse)
def error_type(request: Request, code: str) -> HTMLResponse:
    """The page an error document's ``type`` names: what the code means and what to do."""
    from ledger.api.errors import describe_code

    about = describe_code(code)
    if about is None:
        raise EntryNotFoundError(
            f"no error has the code {code!r}", hint="codes are listed in ledger/errors.py"
        )
    return page(request, "error_type.html", about)
