"""Operations: health, Prometheus metrics, enrolled keys, subjects."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST

from ledger import __version__
from ledger.api.auth import Admin, Reader
from ledger.api.bodies import read_json_body
from ledger.api.deps import LedgerDep, MetricsDep
from ledger.api.models import Page
from ledger.db import SEQ_MAX
from ledger.errors import InputError, KeyAlreadyEnrolledError
from ledger.listing import list_json, page_of
from ledger.service import Ledger

__all__ = ["router"]

router = APIRouter(tags=["operations"])


@router.get("/v1/health", summary="Liveness and the log's size", response_model=dict[str, Any])
async def health(ledger: LedgerDep) -> JSONResponse:
    # the one database read in a worker thread (a sync route took a second thread hop to check its
    # answer against the response model, a dict of anything: nothing to check); no docstring, which
    # OpenAPI would publish as the route's description
    size = await run_in_threadpool(ledger.size)
    return JSONResponse(
        {
            "status": "ok",
            "version": __version__,
            "size": size,
            "database": ledger.database_dialect,
            "origin": ledger.origin,
        }
    )


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
def metrics(m: MetricsDep) -> Response:
    return Response(m.render(), media_type=CONTENT_TYPE_LATEST)


@router.get(
    "/v1/keys",
    summary="Enrolled keys with roles and revocation state (as `ledger keys list --json`)",
    response_model=Page,
)
def keys(
    ledger: LedgerDep,
    _who: Reader,
    limit: Annotated[int, Query(ge=1, le=5000)] = 500,
    after: Annotated[
        int | None,
        Query(
            ge=0,
            le=SEQ_MAX,
            description="the `next` of the page before (its last key's enrolled_seq)",
        ),
    ] = None,
) -> dict[str, Any]:
    """In the order the log enrolled them (``enrolled_seq``: one key per ``key.enrol`` entry, so the
    cursor names one key); a page of ``limit`` and the cursor of the next, as ``/v1/subjects`` pages."""
    ring = sorted(ledger.keyring().keys.values(), key=lambda r: r.enrolled_seq)
    rows = [r for r in ring if after is None or r.enrolled_seq > after][: limit + 1]
    recs, next_cursor = page_of(rows, limit, lambda r: r.enrolled_seq)
    return list_json((r.to_json() for r in recs), next_cursor)


def _enrol_collector(ledger: Ledger, name: str, public_key: str) -> tuple[dict[str, Any], bool]:
    from ledger.signing import PublicKey

    pub = PublicKey.from_b64(public_key)
    ring = ledger.keyring()
    if pub.key_id in ring.keys:
        rec = ring.keys[pub.key_id]
        if rec.name != name or "collector" not in rec.roles or rec.revoked_at:
            raise KeyAlreadyEnrolledError(
                f"key {pub.key_id} is already enrolled as {rec.name!r} "
                f"(roles {','.join(sorted(rec.roles))}{', revoked' if rec.revoked_at else ''})"
            )
        return rec.to_json(), False
    entry = ledger.enrol_key(name, pub.b64, ["collector"])
    return {**ledger.keyring().get(pub.key_id).to_json(), "entry": entry.entry_id}, True


@router.post(
    "/v1/keys",
    status_code=201,
    summary="Enrol a collector host's public key (role collector), signed by this ledger's admin key",
)
async def enrol_collector(
    request: Request, response: Response, ledger: LedgerDep, _who: Admin
) -> dict[str, Any]:
    """Body ``{"name": NAME, "public_key": BASE64}``; an admin token. Enrolling the same key under the same
    name again answers 200 with its record (so a host's set-up can be re-run)."""
    body = await read_json_body(request, 64 * 1024)
    if (
        not isinstance(body, dict)
        or set(body) != {"name", "public_key"}
        or not all(isinstance(v, str) for v in body.values())
    ):
        raise InputError('the body must be {"name": NAME, "public_key": BASE64}')
    rec, created = await run_in_threadpool(_enrol_collector, ledger, body["name"], body["public_key"])
    if not created:
        response.status_code = 200
    return rec


@router.get(
    "/v1/subjects",
    summary="Distinct subject FIELD=VALUE pairs, most recently active first",
    response_model=Page,
)
def list_subjects(
    ledger: LedgerDep,
    _who: Reader,
    field: Annotated[str | None, Query(max_length=100)] = None,
    limit: Annotated[int, Query(ge=1, le=5000)] = 500,
    after: Annotated[
        str | None, Query(max_length=200, description="the `next` of the page before (LAST_SEQ:FIELD)")
    ] = None,
) -> dict[str, Any]:
    """A field neither the subject vocabulary nor the log knows is refused (422, naming the known ones)."""
    rows, next_cursor = ledger.subjects_page(field=field, limit=limit, after=after)
    return list_json((r.__dict__ for r in rows), next_cursor)
