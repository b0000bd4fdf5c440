"""Operations: health, Prometheus metrics, enrolled keys, subjects."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST

from ledger import __version__
from ledger.api.auth import Reader
from ledger.api.queries import subjects

__all__ = ["router"]

router = APIRouter(tags=["operations"])


@router.get("/v1/health", summary="Liveness and the log's size")
def health(request: Request) -> dict[str, Any]:
    from ledger.api.app import served

    ledger = served(request).ledger
    return {
        "status": "ok",
        "version": __version__,
        "size": ledger.size(),
        "database": ledger.engine.dialect.name,
        "origin": ledger.cfg.origin,
    }


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
def metrics(request: Request) -> Response:
    from ledger.api.app import served

    return Response(served(request).metrics.render(), media_type=CONTENT_TYPE_LATEST)


@router.get(
    "/v1/keys", summary="Enrolled keys with roles and revocation state (as `ledger keys list --json`)"
)
def keys(request: Request, _who: Reader) -> list[dict[str, Any]]:
    from ledger.api.app import served

    return [r.to_json() for r in served(request).ledger.keyring().keys.values()]


@router.get("/v1/subjects", summary="Distinct subject FIELD=VALUE pairs, most recently active first")
def list_subjects(
    request: Request,
    _who: Reader,
    field: Annotated[str | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=5000)] = 500,
) -> dict[str, Any]:
    from ledger.api.app import served

    rows = subjects(served(request).ledger, field=field, limit=limit)
    return {"subjects": [r.__dict__ for r in rows]}
