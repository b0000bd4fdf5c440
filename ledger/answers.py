"""How a structured-output answer is judged: the one check the collector's probe and the policy share.

The probe records ``ok`` by it; the policy re-judges the recorded answer by it (``ok`` alone is a claim).
"""

from __future__ import annotations

import json
from typing import Any

from ledger.canonical import parse_json
from ledger.errors import LedgerError

__all__ = ["schema_problem", "structured_answer_problem"]


def schema_problem(answer: str, schema: dict[str, Any]) -> str | None:
    """Why ``answer`` is not JSON valid against ``schema`` (where, what was found, what was expected);
    None: it is. jsonschema is imported on first need: it costs a fresh process more than a verdict."""
    import jsonschema  # type: ignore[import-untyped,unused-ignore]

    try:
        # strict JSON, as the ledger reads its own: a duplicate key (which value a client takes depends on
        # its parser) or NaN/Infinity (not JSON at all) is no valid answer
        value = parse_json(answer)
    except LedgerError as ex:
        return f"answer is not JSON: {ex.message}"
    try:
        jsonschema.validate(value, schema)
    except RecursionError:
        return "answer is not JSON: nested too deeply"
    except jsonschema.ValidationError as ex:
        found = json.dumps(ex.instance, ensure_ascii=False, default=str)
        if len(found) > 80:
            found = found[:77] + "..."
        return f"answer does not match the schema at {ex.json_path}: found {found}; {ex.message}"
    except jsonschema.SchemaError as ex:
        return f"the recorded schema is not a JSON schema: {ex.message}"
    return None


def structured_answer_problem(payload: Any) -> str | None:
    """Why a structured-output probe's recorded answer (``text``) is not JSON valid against the schema it
    recorded (``details.schema``); None: it is. A payload without either never passes."""
    text = payload.get("text") if isinstance(payload, dict) else None
    details = payload.get("details") if isinstance(payload, dict) else None
    schema = details.get("schema") if isinstance(details, dict) else None
    if not isinstance(text, str):
        return "records no answer text"
    if not isinstance(schema, dict) or not schema:
        return "records no JSON schema (details.schema) to judge its answer by"
    return schema_problem(text, schema)
