"""Canonical JSON bytes (RFC 8785): the one place bytes-to-sign and bytes-to-hash are made."""

from __future__ import annotations

import json
from typing import Any

import rfc8785

from ledger.errors import CanonicalJsonError

__all__ = ["canonical_bytes", "parse_canonical", "parse_json"]

MAX_DEPTH = 64


def canonical_bytes(value: Any) -> bytes:
    """Serialise ``value`` as RFC 8785 canonical JSON; refuse what JSON cannot say exactly."""
    try:
        return rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, TypeError, ValueError) as e:
        raise CanonicalJsonError(f"value cannot be canonicalised: {e}") from e


def _depth(value: Any, limit: int) -> None:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            raise CanonicalJsonError(f"JSON nested deeper than {limit} levels")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)


_SAFE_INT = 2**53 - 1


def _parse_int(text: str) -> int | float:
    """JSON numbers are IEEE doubles (RFC 8785 §3.2.2.3): integers beyond 2^53 are read as floats."""
    value = int(text)
    return value if -_SAFE_INT <= value <= _SAFE_INT else float(value)


def _reject_constant(name: str) -> Any:
    raise CanonicalJsonError(f"JSON constant {name} is not allowed")


def parse_json(data: bytes | str) -> Any:
    """Parse JSON strictly: no NaN/Infinity, no duplicate keys, bounded depth."""

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, val in pairs:
            if key in out:
                raise CanonicalJsonError(f"duplicate JSON key {key!r}")
            out[key] = val
        return out

    try:
        value = json.loads(
            data, object_pairs_hook=no_duplicates, parse_constant=_reject_constant, parse_int=_parse_int
        )
    except RecursionError as e:
        raise CanonicalJsonError("JSON nested too deeply") from e
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CanonicalJsonError(f"malformed JSON: {e}") from e
    _depth(value, MAX_DEPTH)
    return value


def parse_canonical(data: bytes) -> Any:
    """Parse ``data`` and insist it is already in canonical form (so its hash is stable)."""
    value = parse_json(data)
    if canonical_bytes(value) != data:
        raise CanonicalJsonError("JSON is not in RFC 8785 canonical form")
    return value
