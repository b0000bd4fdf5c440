"""Verdicts and routing-change checks, served by the policy engine (`ledger.policy`) when installed."""

from __future__ import annotations

import importlib
import inspect
from types import ModuleType
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool

from ledger.api.auth import Reader
from ledger.api.bodies import read_json_body
from ledger.api.models import ErrorOut
from ledger.errors import InputError, NotAvailableError
from ledger.service import parse_subject_args

__all__ = ["router"]

router = APIRouter(
    prefix="/v1",
    tags=["policy"],
    responses={401: {"model": ErrorOut}, 422: {"model": ErrorOut}, 501: {"model": ErrorOut}},
)


def _policy_function(*names: str) -> Any:
    """The first of ``names`` that the policy engine provides, or 501 when there is no engine yet."""
    try:
        module: ModuleType = importlib.import_module("ledger.policy")
    except ModuleNotFoundError as e:
        raise NotAvailableError("the policy engine is not installed on this server") from e
    for name in names:
        fn = getattr(module, name, None)
        if callable(fn):
            return fn
    raise NotAvailableError(f"the policy engine offers none of {', '.join(names)}")


def _as_json(value: Any) -> Any:
    to_json = getattr(value, "to_json", None)
    return to_json() if callable(to_json) else value


def _call(fn: Any, ledger: Any, **kwargs: Any) -> Any:
    accepted = inspect.signature(fn).parameters
    return fn(ledger, **{k: v for k, v in kwargs.items() if k in accepted})


@router.get("/verdict", summary="Evaluate a policy over a subject's evidence (no entry is written)")
def verdict(
    request: Request,
    _who: Reader,
    subject: Annotated[list[str], Query(description="FIELD=VALUE, repeatable")],
    policy: Annotated[str, Query(description="policy name or path")],
    at_size: Annotated[int | None, Query(ge=0, description="evaluate as of this log size")] = None,
) -> Any:
    from ledger.api.app import served

    fn = _policy_function("evaluate", "evaluate_policy")
    subj = parse_subject_args(subject)
    if not subj:
        raise InputError("a verdict needs at least one subject FIELD=VALUE")
    return _as_json(_call(fn, served(request).ledger, subject=subj, policy=policy, at_size=at_size))


@router.post("/routing-check", summary="May this routing change happen, given the recorded verdicts?")
async def routing_check(request: Request, _who: Reader) -> Any:
    from ledger.api.app import served

    state = served(request)
    body = await read_json_body(request, state.settings.max_body_bytes)
    if not isinstance(body, dict):
        raise InputError("the body must be a JSON object describing the routing change")
    fn = _policy_function("check_routing", "routing_check", "check_routing_change")
    result = await run_in_threadpool(lambda: fn(state.ledger, body))
    return _as_json(result)
