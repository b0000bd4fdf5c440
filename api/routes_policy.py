"""Verdicts and routing-change checks: the policy engine (`ledger.policy`) over HTTP.

``GET /v1/verdict`` answers the bytes ``ledger verdict --json`` prints; ``POST /v1/routing-check`` answers
what ``ledger check routing-change --json`` prints (HTTP 200 whether the change is allowed or refused: the
answer is in ``allowed`` and ``reasons``). Errors go through the app's one error handler.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ledger.api.auth import Reader
from ledger.api.bodies import read_json_body
from ledger.api.deps import LedgerDep, ServedDep
from ledger.api.lookup import subject_query
from ledger.api.models import PROBLEM, inline_schema
from ledger.canonical import canonical_bytes, float_as_stated
from ledger.entries import parse_when
from ledger.errors import InputError
from ledger.policy.loader import LoadedPolicy
from ledger.policy.routing import Deployment, validate_deployment
from ledger.reads import parse_subject_pairs
from ledger.service import Ledger

__all__ = ["RoutingCheckIn", "router"]

router = APIRouter(
    prefix="/v1",
    tags=["policy"],
    responses={401: PROBLEM, 404: PROBLEM, 422: PROBLEM},
)

# Over HTTP a policy is named, never a path: the server reads only its own policy folder.
_POLICY_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,99}$")
# what a deployment sent with a routing check is called in its errors and answer (the CLI: --deployment)
_BODY = "request body"


def _subject(subject: dict[str, str]) -> dict[str, str]:
    """A subject already read by the one reader (``ledger.reads.parse_subject_pairs``), refused if empty."""
    if not subject:
        raise InputError("name the subject: at least one FIELD=VALUE")
    return subject


def _policy(name: str) -> LoadedPolicy:
    if not _POLICY_NAME.match(name):
        raise InputError(
            f"policy {name!r} is not a policy name",
            hint="name a policy of the server's policy folder, e.g. backend-qualification",
        )
    return Ledger.load_policy(name)


@router.get(
    "/verdict",
    summary="Evaluate a qualification policy over a subject's evidence (no entry is written)",
    response_description="the verdict JSON, byte for byte what `ledger verdict --json` prints",
    responses={200: {"content": {"application/json": {"schema": {"type": "object"}}}}},
    response_class=Response,
)
def verdict(
    ledger: LedgerDep,
    _who: Reader,
    subject: Annotated[list[str], Query(description="FIELD=VALUE, repeatable; all must match")],
    policy: Annotated[
        str, Query(description="policy name in the server's policy folder", max_length=100)
    ] = "backend-qualification",
    at: Annotated[int | None, Query(ge=1, description="evaluate the log as it stood at this size")] = None,
) -> Response:
    subj = _subject(subject_query(subject))
    result = ledger.evaluate_verdict(subj, _policy(policy), at_size=at)
    return Response(canonical_bytes(result) + b"\n", media_type="application/json")


class RoutingCheckIn(BaseModel):
    """A routing change to judge; the fields mirror `ledger check routing-change`'s options."""

    model_config = ConfigDict(extra="forbid")

    subject: dict[str, str] = Field(
        description='at least model and host, e.g. {"model": "qwen/qwen3.8-27b", "host": "gpu-box-1"}'
    )
    action: Literal["route", "restore"] = "route"
    # the core's model: the format of a `--deployment` file (TOML or JSON), checked by the same rules
    deployment: Deployment | None = Field(
        default=None,
        description="the host's deployment after the change, in the format of a `--deployment` file: "
        "host and services (device, gpus, engine, gpu_memory_utilization, env …)",
    )
    now: str | None = Field(
        default=None,
        description="judge as of this time, read as `ledger check routing-change --now` reads it (RFC 3339, "
        "UTC when it names no zone; or now, today, yesterday, `N hours ago`); default: now",
    )
    policy: str = Field(default="routing-change", max_length=100)


@router.post(
    "/routing-check",
    summary="May this routing change happen, given the recorded verdicts and probes? (nothing is written)",
    response_description="`allowed` true/false with `reasons`, as `ledger check routing-change --json`",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": inline_schema(RoutingCheckIn)}},
        }
    },
)
async def routing_check(request: Request, _who: Reader, state: ServedDep) -> Any:
    # numbers as stated: a utilisation with more digits than a float keeps is refused, as in a file
    body = await read_json_body(request, state.settings.max_body_bytes, parse_float=float_as_stated)
    deployment = None
    if isinstance(body, dict) and body.get("deployment") is not None:
        # first, by the rules a `--deployment` file is read by (one vocabulary, the core's): its refusals
        # name the field as the CLI's do; what passes is the deployment, its defaults filled
        deployment = validate_deployment(body["deployment"], _BODY)
        body = {**body, "deployment": deployment}
    try:
        req = RoutingCheckIn.model_validate(body)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "body"
        raise InputError(f"{where}: {first.get('msg', 'invalid routing change')}") from None
    # read as `ledger check routing-change --subject` reads its options (one reader: nothing trimmed)
    subject = _subject(parse_subject_pairs(req.subject.items(), given_as="subject."))
    try:
        # as `ledger check routing-change --now` reads it (one parser: no zone is UTC, the range checked)
        now = parse_when(req.now) if req.now else None
    except InputError as e:
        raise InputError(f"now: {e.message}") from None

    def run() -> dict[str, Any]:
        return state.ledger.check_routing(
            subject,
            _policy(req.policy),
            action=req.action,
            deployment=deployment,
            now=now,
            deployment_from=_BODY,
        )

    return await run_in_threadpool(run)
