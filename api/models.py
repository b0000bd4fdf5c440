"""Request and response shapes published in the OpenAPI document (the service's own types stay inside)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

__all__ = ["BATCH_SCHEMA", "ENVELOPE_SCHEMA", "ErrorOut"]


class ErrorDetail(BaseModel):
    code: str
    message: str
    hint: str = ""


class ErrorOut(BaseModel):
    error: ErrorDetail


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
