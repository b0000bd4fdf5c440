"""Request and response shapes published in the OpenAPI document (the service's own types stay inside)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

__all__ = ["BATCH_SCHEMA", "ENTRY_ID", "ENVELOPE_SCHEMA", "PROBLEM", "ErrorOut", "Page", "inline_schema"]

# An entry id or a unique prefix of one, as `ledger show` takes it: hex in either case (compared lower-case)
ENTRY_ID = r"^[0-9a-fA-F]{8,64}$"


class Page(BaseModel):
    """Every list the API answers (and the CLI prints with ``--json``): ``ledger.listing.list_json``."""

    items: list[dict[str, Any]] = Field(description="the items of this page, in order")
    next: int | str | None = Field(
        description="cursor of the next page (pass it as ?after=), or null when this is the last page: "
        "an entry's seq; for /v1/subjects the last subject's LAST_SEQ:FIELD"
    )


class ErrorDetail(BaseModel):
    code: str
    message: str
    hint: str


class ErrorOut(BaseModel):
    """An RFC 9457 problem document with the ledger's stable error ``code`` and a ``hint`` — every error
    body the API answers (``api.errors``), 422 included; ``PROBLEM`` publishes it."""

    type: str = Field(description="/errors/CODE")
    title: str
    status: int
    detail: str
    code: str = Field(description="the stable error code, e.g. entry-not-found")
    hint: str = Field(description="what to do next (never empty)")
    instance: str | None = None
    request_id: str | None = Field(default=None, description="as the X-Request-ID header and the log")
    error: ErrorDetail = Field(
        description="the same code, message and hint (the shape before problem documents)"
    )


_SIGNATURE = {
    "type": "object",
    "additionalProperties": False,
    "required": ["keyid", "sig"],
    "properties": {"keyid": {"type": "string"}, "sig": {"type": "string"}},
}
_ENVELOPE = {
    "type": "object",
    "additionalProperties": False,
    "required": ["payload", "payloadType", "signatures"],
    "properties": {
        "payload": {"type": "string", "description": "base64 of the canonical JSON statement"},
        "payloadType": {"type": "string", "example": "application/vnd.evidence-ledger.entry+json"},
        "signatures": {"type": "array", "items": _SIGNATURE, "minItems": 1, "maxItems": 1},
    },
}
_BATCH = {
    "type": "object",
    "additionalProperties": False,
    "required": ["envelopes"],
    "properties": {"envelopes": {"type": "array", "items": _ENVELOPE}},
}


def _body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


ENVELOPE_SCHEMA = _body(_ENVELOPE)
BATCH_SCHEMA = _body(_BATCH)


def inline_schema(model: type[BaseModel]) -> dict[str, Any]:
    """A model's JSON schema with its ``$defs`` substituted in place: an ``openapi_extra`` body cannot
    refer to ``#/$defs/…`` (that pointer is not in the OpenAPI document; ReDoc refuses to render it)."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def sub(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return sub(
                    {**defs[ref.removeprefix("#/$defs/")], **{k: v for k, v in node.items() if k != "$ref"}}
                )
            return {k: sub(v) for k, v in node.items()}
        if isinstance(node, list):
            return [sub(v) for v in node]
        return node

    out: dict[str, Any] = sub(schema)
    return out


# An error response as the OpenAPI document publishes it: application/problem+json, ``ErrorOut``'s schema.
# ``create_app`` lists it for 422 on every router (in place of FastAPI's HTTPValidationError, a body the
# server never answers); routes list it for their other error statuses.
PROBLEM: dict[str, Any] = {
    "description": "An RFC 9457 problem document (`code` is the ledger's stable error code)",
    "content": {"application/problem+json": {"schema": inline_schema(ErrorOut)}},
}
