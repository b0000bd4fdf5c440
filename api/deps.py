"""What a request handler may ask for, as ``Annotated[…, Depends(…)]`` types: the served ledger, the
process's settings and metrics. The app puts one ``Served`` on ``app.state``; nothing here imports the app
or a route module."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request

from ledger.api.metrics import Metrics
from ledger.api.settings import ApiSettings
from ledger.errors import InputError
from ledger.service import Ledger

__all__ = ["LedgerDep", "MetricsDep", "Served", "ServedDep", "SettingsDep", "known_query", "served"]


@dataclass
class Served:
    """What every request of one process shares."""

    settings: ApiSettings
    ledger: Ledger
    metrics: Metrics


# Coroutines, not functions: FastAPI runs a plain-function dependency in a worker thread (a thread hop per
# dependency per request); these only read ``app.state``, which never blocks.


def _of(request: Request) -> Served:
    s: Served = request.app.state.served
    return s


async def served(request: Request) -> Served:
    return _of(request)


async def _ledger(request: Request) -> Ledger:
    return _of(request).ledger


async def _settings(request: Request) -> ApiSettings:
    return _of(request).settings


async def _metrics(request: Request) -> Metrics:
    return _of(request).metrics


ServedDep = Annotated[Served, Depends(served)]
LedgerDep = Annotated[Ledger, Depends(_ledger)]
SettingsDep = Annotated[ApiSettings, Depends(_settings)]
MetricsDep = Annotated[Metrics, Depends(_metrics)]


def _query_names(dependant: Any) -> frozenset[str]:
    """The query parameters a route (and each dependency it has) declares, by the name a client sends."""
    names = {str(p.alias) for p in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return frozenset(names)


_DECLARED: dict[int, frozenset[str]] = {}  # by id(route): the routes live as long as the app


async def known_query(request: Request) -> None:
    """Refuse a query parameter the ``/v1/`` endpoint does not take (a misspelt filter, ``?knd=note``,
    would be ignored and the answer look like the filtered one): an input error naming it and the
    parameters the endpoint takes. Installed on the whole app; pages and the C2SP paths are left alone."""
    if not request.query_params or not request.url.path.startswith("/v1/"):
        return
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None:
        return
    declared = _DECLARED.get(id(route))
    if declared is None:
        declared = _DECLARED[id(route)] = _query_names(dependant)
    unknown = sorted(set(request.query_params) - declared)
    if unknown:
        takes = ", ".join(sorted(declared)) or "none"
        raise InputError(
            f"unknown query parameter{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
            f"{request.url.path} takes: {takes}",
            hint="/docs lists each endpoint's parameters",
        )
