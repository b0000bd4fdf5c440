"""Canonical JSON bytes (RFC 8785): the one place bytes-to-sign and bytes-to-hash are made."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import rfc8785

from ledger.errors import CanonicalJsonError, InputError, JsonTooDeepError

__all__ = ["canonical_bytes", "parse_canonical", "parse_json"]

MAX_DEPTH = 64


_SAFE_INT = 2**53 - 1


def _plain(value: Any) -> bool:
    """True when ``value`` holds only simple floats, no unsafe integers and only BMP keys.

    For such values RFC 8785 output equals ``json.dumps`` with sorted keys and no whitespace: strings
    escape the same way, integers print the same way, and UTF-16 key order equals code-point order.
    """
    stack = [value]
    while stack:
        v = stack.pop()
        t = type(v)
        if t is str or t is bool or v is None:
            continue
        if t is int:
            if not -_SAFE_INT <= v <= _SAFE_INT:
                return False
        elif t is float:
            # Python's repr and ECMAScript's Number.toString print the same shortest digits in plain
            # decimal notation for non-integral values in this range.
            if v.is_integer() or not 1e-4 <= abs(v) < 1e16:
                return False
        elif t is dict:
            for k in v:
                if type(k) is not str or not (k.isascii() or max(k) < "\ud800"):
                    return False
            stack.extend(v.values())
        elif t is list:
            stack.extend(v)
        else:
            return False
    return True


_ENCODER = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def canonical_bytes(value: Any) -> bytes:
    """Serialise ``value`` as RFC 8785 canonical JSON; refuse what JSON cannot say exactly.

    Values without exotic floats take the C JSON encoder (same bytes, checked by a property test against
    the rfc8785 library); everything else goes through rfc8785 itself.
    """
    try:
        if _plain(value):
            return _ENCODER.encode(value).encode()
        return rfc8785.dumps(value)
    except UnicodeEncodeError as e:
        raise CanonicalJsonError(f"value cannot be canonicalised: {e}") from e
    except RecursionError as e:
        raise JsonTooDeepError("value nested too deeply to canonicalise") from e
    except (rfc8785.CanonicalizationError, TypeError, ValueError) as e:
        raise CanonicalJsonError(f"value cannot be canonicalised: {e}") from e


def _depth(value: Any, limit: int) -> None:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            raise JsonTooDeepError(f"JSON nested deeper than {limit} levels")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)


def _parse_int(text: str) -> int | float:
    """JSON numbers are IEEE doubles (RFC 8785 §3.2.2.3): integers beyond 2^53 are read as floats."""
    try:
        value = int(text)
    except ValueError as e:  # more digits than int() converts (sys.get_int_max_str_digits)
        raise CanonicalJsonError(f"JSON number with {len(text)} digits is too long") from e
    return value if -_SAFE_INT <= value <= _SAFE_INT else float(value)


def _reject_constant(name: str) -> Any:
    raise CanonicalJsonError(f"JSON constant {name} is not allowed")


def float_as_stated(text: str) -> float:
    """A number as typed (``parse_float`` of :func:`parse_json` or ``tomllib``), refused where it has more
    digits than a float keeps: ``0.440000000000000001`` would be signed, stored and compared as ``0.44``,
    another number than the one stated (a utilisation sum just over its bound would be allowed). The one
    rule for every number a person types: ``ledger record --data``, a deployment file, a request body."""
    value = float(text)
    if not math.isfinite(value):  # TOML's nan and inf (JSON's NaN/Infinity are refused by its parser)
        raise InputError(f"{text} is not a finite number")
    if Decimal(repr(value)) != Decimal(text):
        raise InputError(
            f"{text} has more digits than can be kept exactly (it would be read as {value!r}): "
            "state it with at most 15 significant digits"
        )
    return value


def parse_json(data: bytes | str, *, parse_float: Callable[[str], Any] | None = None) -> Any:
    """Parse JSON strictly: no NaN/Infinity, no duplicate keys, bounded depth (``parse_float``: as
    ``json.loads``'s; what it raises propagates)."""

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, val in pairs:
            if key in out:
                raise CanonicalJsonError(f"duplicate JSON key {key!r}")
            out[key] = val
        return out

    try:
        value = json.loads(
            data,
            object_pairs_hook=no_duplicates,
            parse_constant=_reject_constant,
            parse_int=_parse_int,
            parse_float=parse_float,
        )
    except RecursionError as e:
        raise JsonTooDeepError("JSON nested too deeply") from e
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CanonicalJsonError(f"malformed JSON: {e}") from e
    _depth(value, MAX_DEPTH)
    return value


def _canonical_fast(data: bytes) -> Any:
    """The value of ``data`` when it plainly is canonical JSON, else ``_NOT_PLAIN`` (then the strict path
    decides, with its own error).

    Sound without ``parse_json``'s hooks: bytes equal to the re-serialisation of what they parse to hold
    no duplicate key (the encoder writes each key once), no NaN/Infinity and no unsafe integer
    (``_plain``); fewer than ``MAX_DEPTH`` brackets cannot nest a value deeper than ``MAX_DEPTH``."""
    try:
        if data.count(b"{") + data.count(b"[") >= MAX_DEPTH:
            return _NOT_PLAIN
        value = json.loads(data)
        if _plain(value) and _ENCODER.encode(value).encode() == data:
            return value
    except (ValueError, UnicodeError, RecursionError, TypeError, AttributeError):
        pass
    return _NOT_PLAIN


_NOT_PLAIN = object()


def parse_canonical(data: bytes) -> Any:
    """Parse ``data`` and insist it is already in canonical form (so its hash is stable)."""
    value = _canonical_fast(data)
    if value is not _NOT_PLAIN:
        return value
    value = parse_json(data)
    if canonical_bytes(value) != data:
        raise CanonicalJsonError("JSON is not in RFC 8785 canonical form")
    return value
