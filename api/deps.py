"""What a request handler may ask for, as ``Annotated[…, Depends(…)]`` types: the served ledger, the
process's settings and metrics. The app puts one ``Served`` on ``app.state``; nothing here imports the app
or a route module."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from ledger.api.metrics import Metrics
from ledger.api.settings import ApiSettings
from ledger.service import Ledger

__all__ = ["LedgerDep", "MetricsDep", "Served", "ServedDep", "SettingsDep", "served"]


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
