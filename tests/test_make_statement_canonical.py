"""A library caller's statement is judged in the canonical form the log signs, like everyone else's.

``ledger record --data`` and an API client's signed entry carry ``143.0`` for an integer field as ``143``
(RFC 8785), and were accepted; ``Ledger.make_statement`` judged the Python value before it was
canonicalised and refused the same entry. Named after that failure; the neighbours show what stays
refused."""

from __future__ import annotations

import math

import pytest

from ledger.errors import CanonicalJsonError, SchemaError
from ledger.service import Ledger

SUBJECT = {"campaign": "canon-1", "host": "h1"}
PROBE = {"endpoint": "http://127.0.0.1:8000/health", "check": "health", "ok": True, "http_status": 200}


def test_make_statement_refused_an_integral_float_that_the_log_signs_as_an_integer(ledger: Ledger) -> None:
    ledger.new_key("hostA", ["collector"])
    st = ledger.make_statement("health.probe", SUBJECT, {**PROBE, "http_status": 200.0})
    assert st["payload"]["http_status"] == 200 and type(st["payload"]["http_status"]) is int
    entry = ledger.append([ledger.sign(st, "hostA")])[0]
    assert ledger.get(entry.entry_id).statement.payload["http_status"] == 200
    # the same entry from an int: the same statement
    again = ledger.make_statement("health.probe", SUBJECT, PROBE, collected_at=st["collected_at"], host="x")
    assert again["payload"] == st["payload"]


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (200.5, SchemaError),  # not an integer, in any form
        ("200", SchemaError),  # a string is no number
        (True, SchemaError),  # nor a bool
        (math.nan, CanonicalJsonError),  # JSON cannot say it
        (math.inf, CanonicalJsonError),
    ],
)
def test_make_statement_still_refuses_what_is_no_integer(ledger: Ledger, value: object, error: type) -> None:
    size = ledger.size()
    with pytest.raises(error):
        ledger.make_statement("health.probe", SUBJECT, {**PROBE, "http_status": value})
    assert ledger.size() == size  # nothing logged
