"""Entries: search with a keyset cursor, read one, append one or a batch of signed envelopes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from ledger.api.auth import Reader, Writer, WriteToken, remember, writer_of
from ledger.api.bodies import read_json_body
from ledger.api.caching import IMMUTABLE, REVALIDATE, cache_control, etag, not_modified
from ledger.api.deps import LedgerDep, Served, ServedDep
from ledger.api.lookup import subject_query
from ledger.api.models import BATCH_SCHEMA, ENTRY_ID, ENVELOPE_SCHEMA, PROBLEM, Page
from ledger.db import SEQ_MAX
from ledger.entries import check_kind_filter
from ledger.errors import BatchTooLargeError, InputError, LedgerError
from ledger.listing import list_json
from ledger.service import MAX_BATCH, AppendRequest, Ledger, LoggedEntry

__all__ = ["router"]

EntryIdPath = Annotated[str, Path(pattern=ENTRY_ID, description="entry id or unique prefix (hex, any case)")]

router = APIRouter(
    prefix="/v1",
    tags=["entries"],
    responses={401: PROBLEM, 403: PROBLEM, 422: PROBLEM},
)


def entry_json(ledger: Ledger, entry: LoggedEntry, names: dict[str, str] | None = None) -> dict[str, Any]:
    """The CLI's `--json` shape of an entry (plus ``duplicate`` on appends)."""
    names = names if names is not None else ledger.signer_names()
    return entry.to_json(names.get(entry.signer))


@router.get(
    "/entries", summary="Search entries by subject fields, kind, signer and time", response_model=Page
)
def list_entries(
    ledger: LedgerDep,
    _who: Reader,
    subject: Annotated[list[str] | None, Query(description="FIELD=VALUE, repeatable; all must match")] = None,
    kind: Annotated[str | None, Query(description="a kind, or a prefix ending in * (key.*)")] = None,
    signer: Annotated[str | None, Query(description="key name or key id")] = None,
    since: Annotated[str | None, Query(description="logged at or after (RFC 3339)")] = None,
    until: Annotated[str | None, Query(description="logged before (RFC 3339)")] = None,
    after: Annotated[
        int | None,
        Query(ge=0, le=SEQ_MAX, description="keyset cursor: `next` of the previous page"),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    order: Annotated[Literal["asc", "desc"], Query()] = "asc",
) -> dict[str, Any]:
    entries = ledger.query(
        subject=subject_query(subject),
        kind=check_kind_filter(kind) if kind is not None else None,
        signer=signer,
        since=since,
        until=until,
        after_seq=after,
        limit=limit,
        descending=order == "desc",
    )
    page: dict[str, Any] = ledger.page_json(entries, limit)
    return page


@router.get(
    "/entries/{entry_id}", summary="One entry by id or unique prefix (?envelope=true: the DSSE bytes)"
)
def get_entry(
    request: Request,
    state: ServedDep,
    _who: Reader,
    entry_id: EntryIdPath,
    envelope: Annotated[bool, Query(description="return the stored envelope bytes")] = False,
) -> Any:
    """ETag: the entry id (the digest of its envelope); ``If-None-Match`` with it answers 304."""
    ledger = state.ledger
    entry = ledger.get(entry_id)
    tag = etag(entry.entry_id, "envelope" if envelope else "")
    # the envelope by its full id is immutable bytes; the JSON view (it names the signer) and a prefix
    # (it may become ambiguous) are revalidated with the ETag
    full = envelope and entry_id.lower() == entry.entry_id
    cache = cache_control(state.settings, IMMUTABLE if full else REVALIDATE)
    if (unchanged := not_modified(request, tag, cache)) is not None:
        return unchanged
    headers = {"ETag": tag, "Cache-Control": cache}
    if envelope:
        return Response(entry.envelope, media_type="application/json", headers=headers)
    return JSONResponse(entry_json(ledger, entry), headers=headers)


def _committed() -> tuple[asyncio.Future[AppendRequest], Callable[[AppendRequest], None]]:
    """A future of the event loop and the callback ``Ledger.submit`` settles it with (called from the
    sequencer's thread once the group commit answered the request): the event loop awaits the commit,
    so no request thread waits on another's transaction."""
    loop = asyncio.get_running_loop()
    committed: asyncio.Future[AppendRequest] = loop.create_future()

    def settle(req: AppendRequest) -> None:
        with contextlib.suppress(RuntimeError):  # the event loop has closed: nobody waits
            loop.call_soon_threadsafe(_resolve, committed, req)

    return committed, settle


def _resolve(future: asyncio.Future[AppendRequest], req: AppendRequest) -> None:
    if not future.done():  # not cancelled (the client went away; the entries are committed anyway)
        future.set_result(req)


def _answers(state: Served, logged: list[LoggedEntry]) -> list[dict[str, Any]]:
    ledger = state.ledger
    # the signers' names from the keys the append was judged by: no further read per request
    names = {s: n for s in {e.signer for e in logged} if (n := ledger.signer_name(s)) is not None}
    out = []
    for e in logged:
        (state.metrics.duplicates if e.duplicate else state.metrics.appended).inc()
        # the log's signed receipt: the collector keeps it, and `ledger audit` checks it later
        out.append(
            {**entry_json(ledger, e, names), "duplicate": e.duplicate, "receipt": ledger.receipt(e).to_json()}
        )
    return out


@router.post(
    "/entries",
    status_code=201,
    response_model=dict[str, Any],
    openapi_extra=ENVELOPE_SCHEMA,
    summary="Append one signed envelope (verified before it is stored)",
)
async def append_entry(request: Request, token: WriteToken, state: ServedDep) -> JSONResponse:
    """The writer's token is checked as the entry is committed, in the sequencer's transaction."""
    try:
        body = await read_json_body(request, state.settings.max_body_bytes)
        if not isinstance(body, dict):
            raise InputError("the body must be one DSSE envelope (a JSON object)")
        committed, settle = _committed()
        state.ledger.submit([body], settle, token=token)  # checked here: one envelope needs no thread
    except LedgerError:
        await run_in_threadpool(writer_of, request, state, token)  # a refusal goes only to a writer
        raise
    req = await committed
    if req.token_record is not None:  # the token was live with the writer role at the commit
        remember(request, req.token_record)
    [entry] = _answers(state, req.answer())
    # the answer as it is (the response model's schema is published; nothing to convert or validate)
    return JSONResponse(entry, status_code=200 if entry["duplicate"] else 201)


@router.post(
    "/entries/batch",
    status_code=201,
    openapi_extra=BATCH_SCHEMA,
    summary="Append a batch of signed envelopes atomically: all are stored, or none",
    response_model=Page,
)
async def append_batch(
    request: Request, response: Response, _who: Writer, state: ServedDep
) -> dict[str, Any]:
    body = await read_json_body(request, state.settings.max_body_bytes)
    if (
        not isinstance(body, dict)
        or not isinstance(body.get("envelopes"), list)
        or set(body) != {"envelopes"}
    ):
        raise InputError('the body must be {"envelopes": [DSSE envelope, …]}')
    envelopes = body["envelopes"]
    if len(envelopes) > MAX_BATCH:
        raise BatchTooLargeError(f"batch of {len(envelopes)} entries exceeds the limit of {MAX_BATCH}")
    entries = []
    if envelopes:  # the batch is checked in a worker thread (up to MAX_BATCH envelopes)
        committed, settle = _committed()
        await run_in_threadpool(state.ledger.submit, envelopes, settle)
        entries = _answers(state, (await committed).answer())
    if all(e["duplicate"] for e in entries):
        response.status_code = 200
    return list_json(entries)
