"""How a control answer is judged: the checks the collector's probe and the policy share.

A structured-output answer against its schema (``schema_problem``), and whether an answer the request's
``max_tokens`` cut could still have become the right one (``cut_undecided``). The probe records ``ok`` by
them; the policy re-judges the recorded answer by them (``ok`` alone is a claim).
"""

from __future__ import annotations

import json
from typing import Any

from ledger.canonical import parse_json
from ledger.errors import LedgerError

__all__ = ["CUT_FINISH_REASON", "cut_undecided", "schema_problem", "structured_answer_problem"]

# the finish reason of an answer the request's max_tokens cut (OpenAI's, as vLLM and llama.cpp report it)
CUT_FINISH_REASON = "length"


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


def cut_undecided(payload: Any, control_answer: Any) -> bool:
    """Is a completion or structured probe's answer one its own ``max_tokens`` cut while it could still
    have become the right one — no judgement of the engine either way? The answer ended with
    ``finish_reason`` "length"; its ``completion_tokens``, where recorded, reached ``max_tokens`` (an
    answer that stopped short of the limit was not cut by it); and what it said so far is a beginning of a
    right answer: a completion's text, stripped as the control judges it, begins ``control_answer`` ("REA"
    of "READY"; "READY" itself, which may have gone on "… no, I am NOT READY"), a structured answer's text
    is JSON or the beginning of some (only its end is missing). Anything else a cut answer says is the
    engine's answer: "NOT" or "I am not ready" cut at the limit is still a wrong one. The collector's probe
    and the policy's ``e.derived.cut_undecided`` judge it here, one rule; anything missing or mistyped is
    no cut (the probe is judged as any other, and fails closed)."""
    if not isinstance(payload, dict) or payload.get("finish_reason") != CUT_FINISH_REASON:
        return False
    text, limit, made = payload.get("text"), payload.get("max_tokens"), payload.get("completion_tokens")
    if not isinstance(text, str):
        return False
    if made is not None and (type(made) is not int or type(limit) is not int or made < limit):
        return False
    check = payload.get("check")
    if check == "completion":
        return isinstance(control_answer, str) and control_answer.startswith(text.strip())
    if check == "structured":
        return _json_prefix(text)
    return False


def _json_prefix(text: str) -> bool:
    """Is ``text`` JSON, or JSON whose end is missing (``{"status": "REA``)?"""
    try:
        json.loads(text)
    except json.JSONDecodeError as ex:
        if ex.msg.startswith("Unterminated string"):
            return True
        return ex.pos >= len(text.rstrip())
    except RecursionError:
        return False
    return True
