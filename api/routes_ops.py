"""Operations: health, Prometheus metrics, enrolled keys, subjects."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response
from prometheus_client import CONTENT_TYPE_LATEST

from ledger import __version__
from ledger.api.auth import Reader
from ledger.api.deps import LedgerDep, MetricsDep

__all__ = ["router"]

router = APIRouter(tags=["operations"])


@router.get("/v1/health", summary="Liveness and the log's size")
def health(ledger: LedgerDep) -> dict[str, Any]:
    return {
        "status": "ok",
        "version": __version__,
        "size": ledger.size(),
        "database": ledger.database_dialect,
        "origin": ledger.origin,
    }


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
def metrics(m: MetricsDep) -> Response:
    return Response(m.render(), media_type=CONTENT_TYPE_LATEST)


@router.get(
    "/v1/keys", summary="Enrolled keys with roles and revocation state (as `ledger keys list --json`)"
)
def keys(ledger: LedgerDep, _who: Reader) -> list[dict[str, Any]]:
    return [r.to_json() for r in ledger.keyring().keys.values()]


@router.get("/v1/subjects", summary="Distinct subject FIELD=VALUE pairs, most recently active first")
def list_subjects(
    ledger: LedgerDep,
    _who: Reader,
    field: Annotated[str | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=5000)] = 500,
) -> dict[str, Any]:
    rows = ledger.subjects(field=field, limit=limit)
    return {"subjects": [r.__dict__ for r in rows]}
