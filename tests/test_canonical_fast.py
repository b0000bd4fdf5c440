"""The fast path of ``parse_canonical`` (plain json.loads, re-serialised and compared) decides exactly as
the strict path (duplicate keys, depth, NaN, unsafe integers, non-canonical bytes) — it only skips work."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.canonical import (
    _NOT_PLAIN,
    MAX_DEPTH,
    _canonical_fast,
    canonical_bytes,
    parse_canonical,
    parse_json,
)
from ledger.errors import CanonicalJsonError, LedgerError

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**60), max_value=2**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=4), children, max_size=4)
    ),
    max_leaves=20,
)


def _strict(data: bytes) -> tuple[str, Any]:
    """What the strict path alone says about ``data``: ("ok", value) or ("error", code)."""
    try:
        value = parse_json(data)
        if canonical_bytes(value) != data:
            return ("error", CanonicalJsonError.code)
        return ("ok", value)
    except LedgerError as e:
        return ("error", e.code)


def _agree(data: bytes) -> None:
    fast = _canonical_fast(data)
    strict = _strict(data)
    if fast is not _NOT_PLAIN:  # the fast path accepts only what the strict path accepts, as the same value
        assert strict == ("ok", fast)
    try:
        got: tuple[str, Any] = ("ok", parse_canonical(data))
    except LedgerError as e:
        got = ("error", e.code)
    assert got == strict


@given(json_values)
def test_fast_path_agrees_on_canonical_bytes(value: Any) -> None:
    try:
        data = canonical_bytes(value)
    except LedgerError:
        return
    _agree(data)


@pytest.mark.parametrize(
    "data",
    [
        b'{"a":1,"a":2}',  # duplicate key: json.loads keeps the last; the bytes differ from the re-encoding
        b'{"a":1,"a":1}',
        b'{"a":NaN}',
        b'{"a":Infinity}',
        b'{"a":9007199254740993}',  # beyond 2^53
        b'{"a":1.0}',
        b'{"a":1e+16}',
        b'{"b":1,"a":2}',
        b'{"a": 1}',
        b'"\\ud800"',
        b'\xef\xbb\xbf{"a":1}',
        b'{"a":"\xed\xa0\x80"}',
        b"[" * (MAX_DEPTH - 1) + b"1" + b"]" * (MAX_DEPTH - 1),
        b"[" * MAX_DEPTH + b"1" + b"]" * MAX_DEPTH,
        b"[" * MAX_DEPTH + b"]" * MAX_DEPTH,
        b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1),
        b'{"a":"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}',
        b"",
        b"{",
    ],
)
def test_fast_path_agrees_on_tricky_bytes(data: bytes) -> None:
    _agree(data)


def test_fast_path_refuses_a_duplicate_key() -> None:
    assert _canonical_fast(b'{"a":1,"a":1}') is _NOT_PLAIN


def _env_strict(data: bytes) -> Any:
    from ledger.signing import parse_envelope

    try:
        env = parse_envelope(data)
    except LedgerError:
        return None
    return env if env.canonical() == data else None


def test_canonical_envelope_fast_path_agrees() -> None:
    from ledger.signing import SigningKey, parse_canonical_envelope, sign_envelope

    good = sign_envelope({"a": 1}, SigningKey.generate("k")).canonical()
    variants = [
        good,
        good.replace(b'{"payload"', b'{ "payload"'),
        good.replace(b'"signatures":', b'"payload":"e30=","signatures":'),  # a duplicate key
        good[:-2] + b',"x":1}]}',
        good.replace(b'"sig":"', b'"sig":"Q'),  # not base64 any more
        good.replace(b"==", b"=="[:0]),
        b'{"payload":"QR==","payloadType":"application/vnd.evidence-ledger.entry+json",'
        b'"signatures":[{"keyid":"k","sig":"QQ=="}]}',  # non-canonical base64 (trailing bits)
        b'{"payload":"QQ==","payloadType":"application/vnd.evidence-ledger.entry+json",'
        b'"signatures":[{"keyid":"k","sig":"QQ=="}]}',
    ]
    variants += [
        good.replace(b'"keyid":"', b'"keyid":"ABC'),  # not lower hex: the strict parse decides
        good.replace(b'"keyid":"', b'"keyid":"\\u0041'),
        good.replace(b'"sig":"', b'"sig":"\\u0041'),
        good + b" ",
        b" " + good,
    ]
    rng = random.Random(12)
    for _ in range(300):  # random single-byte changes
        i = rng.randrange(len(good))
        variants.append(good[:i] + bytes([rng.randrange(256)]) + good[i + 1 :])
    for data in variants:
        fast, strict = parse_canonical_envelope(data), _env_strict(data)
        assert fast == strict, data
    assert parse_canonical_envelope(good) is not None
