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


def served(request: Request) -> Served:
    s: Served = request.app.state.served
    return s


def _ledger(request: Request) -> Ledger:
    return served(request).ledger


def _settings(request: Request) -> ApiSettings:
    return served(request).settings


def _metrics(request: Request) -> Metrics:
    return served(request).metrics


ServedDep = Annotated[Served, Depends(served)]
LedgerDep = Annotated[Ledger, Depends(_ledger)]
SettingsDep = Annotated[ApiSettings, Depends(_settings)]
MetricsDep = Annotated[Metrics, Depends(_metrics)]
