"""Canonical JSON: the one function that makes bytes to sign and hash."""

from __future__ import annotations


import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.canonical import canonical_bytes, parse_canonical, parse_json
from ledger.errors import CanonicalJsonError

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(), children, max_size=5),
    max_leaves=30,
)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"b": 1, "a": 2}, b'{"a":2,"b":1}'),
        ({"a": [1, "x", None, True]}, b'{"a":[1,"x",null,true]}'),
        ({"\u20ac": "\u00e9"}, '{"\u20ac":"\u00e9"}'.encode()),
        (1.0, b"1"),
        (1e21, b"1e+21"),
        ({"nested": {"z": 0, "a": {}}}, b'{"nested":{"a":{},"z":0}}'),
    ],
    ids=["sorted-keys", "array", "unicode-unescaped", "float-integral", "exponent", "nested"],
)
def test_named_canonical_forms(value: object, expected: bytes) -> None:
    assert canonical_bytes(value) == expected


@given(json_values)
def test_canonical_round_trip(value: object) -> None:
    data = canonical_bytes(value)
    assert canonical_bytes(parse_canonical(data)) == data
    assert canonical_bytes(parse_json(data)) == data


@pytest.mark.parametrize(
    "data",
    [b'{"a":1,"a":2}', b'{"a":NaN}', b"[1,", b"\xff", b'{"a": 1}', b'{"b":1,"a":2}'],
    ids=["duplicate-key", "nan", "truncated", "not-utf8", "whitespace", "unsorted"],
)
def test_non_canonical_or_malformed_refused(data: bytes) -> None:
    with pytest.raises(CanonicalJsonError):
        parse_canonical(data)


def test_deep_nesting_refused() -> None:
    with pytest.raises(CanonicalJsonError):
        parse_json("[" * 100 + "]" * 100)


def test_values_json_cannot_say_refused() -> None:
    with pytest.raises(CanonicalJsonError):
        canonical_bytes({"x": float("nan")})
    with pytest.raises(CanonicalJsonError):
        canonical_bytes({"x": b"bytes"})


def test_regression_float_2_pow_53_round_trips() -> None:
    """Found by Hypothesis: 2.0**53 canonicalises to an integer literal that re-parsed beyond the safe range."""
    data = canonical_bytes({"x": 2.0**53})
    assert data == b'{"x":9007199254740992}'
    assert canonical_bytes(parse_canonical(data)) == data
