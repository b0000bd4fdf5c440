"""Canonical JSON: the one function that makes bytes to sign and hash."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.canonical import canonical_bytes, parse_canonical, parse_json
from ledger.errors import CanonicalJsonError

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
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
    """Found by Hypothesis: 2.0**53 canonicalises to an integer literal once refused on re-parse."""
    data = canonical_bytes({"x": 2.0**53})
    assert data == b'{"x":9007199254740992}'
    assert canonical_bytes(parse_canonical(data)) == data


@given(json_values)
def test_fast_path_equals_rfc8785_library(value: object) -> None:
    import rfc8785

    try:
        expected = rfc8785.dumps(value)
    except rfc8785.CanonicalizationError:
        with pytest.raises(CanonicalJsonError):
            canonical_bytes(value)
        return
    assert canonical_bytes(value) == expected


@pytest.mark.parametrize(
    "value",
    [{"\U0001f600": 1, "\ufb01": 2}, {"ctl": "\x00\x1f\x7f\u2028"}, {"q": '"\\/'}, [2**53 - 1, -(2**53 - 1)]],
    ids=["non-bmp-key-order", "control-chars", "quotes-slashes", "safe-int-bounds"],
)
def test_fast_path_edge_cases_match_library(value: object) -> None:
    import rfc8785

    assert canonical_bytes(value) == rfc8785.dumps(value)


def test_lone_surrogate_refused() -> None:
    with pytest.raises(CanonicalJsonError):
        canonical_bytes({"x": "\ud800"})


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_fast_path_floats_equal_rfc8785_library(value: float) -> None:
    import rfc8785

    assert canonical_bytes({"f": value, "l": [value]}) == rfc8785.dumps({"f": value, "l": [value]})
