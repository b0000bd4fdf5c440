"""Payload and statement times are RFC 3339 ``date-time`` exactly (audit F2): ``2026-12-05t20:00:00z`` was
refused as "not an RFC 3339 time" (section 5.6's NOTE allows a lower-case "t" and "z"), while ISO 8601 forms
RFC 3339 does not have — basic ``20261205T200000Z``, the week date ``2026-W49-6T20:00Z``, no seconds
``2026-12-05T20:00Z`` — were accepted and signed verbatim (``datetime.fromisoformat``). ``parse_time`` is now
the strict RFC 3339 reader; refusals name the field and the form expected. ``parse_when`` (what a person
types for ``--now``/``--collected-at``) stays lenient, on top of the same core."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from ledger.entries import format_time, parse_time, parse_when
from ledger.errors import SchemaError
from ledger.service import Ledger

ACCEPTED = {
    "2026-12-05T20:00:00Z": datetime(2026, 12, 5, 20, tzinfo=UTC),
    "2026-12-05t20:00:00z": datetime(2026, 12, 5, 20, tzinfo=UTC),  # section 5.6 NOTE: lower case
    "2026-12-05 20:00:00Z": datetime(
        2026, 12, 5, 20, tzinfo=UTC
    ),  # section 5.6 NOTE: a space for readability
    "2026-12-05T22:00:00+02:00": datetime(2026, 12, 5, 20, tzinfo=UTC),
    "2026-12-05T15:30:00-04:30": datetime(2026, 12, 5, 20, tzinfo=UTC),
    "2026-12-05T20:00:00-00:00": datetime(2026, 12, 5, 20, tzinfo=UTC),  # section 4.3: unknown local offset
    "2026-12-06T19:59:00+23:59": datetime(2026, 12, 5, 20, tzinfo=UTC),
    "2026-12-05T20:00:00.5Z": datetime(2026, 12, 5, 20, 0, 0, 500000, tzinfo=UTC),
    "2026-12-05T20:00:00.123456Z": datetime(2026, 12, 5, 20, 0, 0, 123456, tzinfo=UTC),
    "2026-12-05T20:00:00.123456789Z": datetime(2026, 12, 5, 20, 0, 0, 123456, tzinfo=UTC),  # truncated
    "2024-02-29T00:00:00Z": datetime(2024, 2, 29, tzinfo=UTC),
    "2026-12-05T20:00:00.000000Z": datetime(2026, 12, 5, 20, tzinfo=UTC),  # format_time's own form
}
REFUSED = [
    "20261205T200000Z",  # ISO 8601 basic format
    "2026-W49-6T20:00Z",  # week date
    "2026-339T20:00:00Z",  # ordinal date
    "2026-12-05T20:00Z",  # no seconds
    "2026-12-05T20Z",
    "2026-12-05",  # a date, not a date-time
    "2026-12-05T20:00:00",  # no offset
    "2026-12-05T20:00:00+0200",  # offset without a colon
    "2026-12-05T20:00:00+02",
    "2026-12-05T20:00:00,5Z",  # decimal comma
    "2026-12-05T20:00:00.Z",  # a fraction needs a digit
    "2026-12-05T20:00:00UTC",
    "2026-12-05X20:00:00Z",
    "2026-12-05T20:00:00Zz",
    " 2026-12-05T20:00:00Z",
    "2026-12-05T20:00:00Z\n",
    "2026-12-05  20:00:00Z",
    "+2026-12-05T20:00:00Z",
    "٢٠٢٦-12-05T20:00:00Z",  # non-ASCII digits
    "2026-02-30T00:00:00Z",  # no such day
    "2026-13-01T00:00:00Z",
    "2026-12-05T24:00:00Z",
    "2026-12-05T20:60:00Z",
    "2026-12-05T20:00:00+24:00",
    "2026-12-05T20:00:00+02:60",
    "0000-01-01T00:00:00Z",
    "0001-01-01T00:00:00+01:00",  # before year 1 in UTC: refused, not an OverflowError
    "9999-12-31T23:59:59-01:00",
    "",
]


@pytest.mark.parametrize("text", list(ACCEPTED))
def test_rfc3339_date_times_are_read(text: str) -> None:
    assert parse_time(text) == ACCEPTED[text]
    assert parse_time(text).tzinfo is UTC


@pytest.mark.parametrize("text", REFUSED)
def test_other_forms_are_refused_naming_the_form_expected(text: str) -> None:
    with pytest.raises(SchemaError) as caught:
        parse_time(text)
    assert "RFC 3339" in caught.value.message and repr(text) in caught.value.message
    assert "YYYY-MM-DDTHH:MM:SS" in caught.value.message


def test_a_leap_second_is_refused_with_its_own_reason() -> None:
    with pytest.raises(SchemaError, match="leap second"):
        parse_time("2016-12-31T23:59:60Z")


def test_format_time_round_trips() -> None:
    t = datetime(2026, 12, 5, 20, 0, 0, 123456, tzinfo=UTC)
    assert parse_time(format_time(t)) == t


def _job(ledger: Ledger, ended_at: str) -> Any:
    payload = {"job_id": f"j-{ended_at}", "state": "killed", "ended_at": ended_at}
    return ledger.record("job", {"campaign": "c", "host": "h"}, payload, key="coll")


@pytest.fixture
def coll(ledger: Ledger) -> Ledger:
    ledger.new_key("coll", ["collector"])
    return ledger


@pytest.mark.parametrize(
    "text", ["2026-12-05t20:00:00z", "2026-12-05 20:00:00+00:00", "2026-12-05T20:00:00.5Z"]
)
def test_a_payload_time_in_rfc3339_is_accepted_and_signed_verbatim(coll: Ledger, text: str) -> None:
    entry = _job(coll, text)
    assert coll.get(entry.entry_id).statement.payload["ended_at"] == text


@pytest.mark.parametrize("text", ["20261205T200000Z", "2026-W49-6T20:00Z", "2026-12-05T20:00Z"])
def test_a_payload_time_in_another_iso_8601_form_is_refused_naming_the_field(coll: Ledger, text: str) -> None:
    size = coll.size()
    with pytest.raises(SchemaError) as caught:
        _job(coll, text)
    assert "ended_at" in caught.value.message
    assert "YYYY-MM-DDTHH:MM:SS" in caught.value.message
    assert coll.size() == size


def test_a_statement_time_is_read_the_same_way(coll: Ledger) -> None:
    st = coll.make_statement("note", {"campaign": "c"}, {"text": "t"}, collected_at="2026-12-05t20:00:00z")
    assert st["collected_at"] == "2026-12-05t20:00:00z"
    with pytest.raises(SchemaError, match="collected_at"):
        coll.make_statement("note", {"campaign": "c"}, {"text": "t"}, collected_at="2026-12-05T20:00Z")


@pytest.mark.parametrize(
    ("typed", "expected"),
    [
        ("2026-12-05t20:00:00z", datetime(2026, 12, 5, 20, tzinfo=UTC)),
        ("2026-12-05T20:00Z", datetime(2026, 12, 5, 20, tzinfo=UTC)),  # a person may leave out the seconds
        ("2026-12-05T22:00:00+0200", datetime(2026, 12, 5, 20, tzinfo=UTC)),
        ("2026-12-05T20:00:00", datetime(2026, 12, 5, 20, tzinfo=UTC)),  # UTC when no zone is named
        ("  2026-12-05T20:00:00Z ", datetime(2026, 12, 5, 20, tzinfo=UTC)),
    ],
)
def test_parse_when_stays_lenient_for_what_a_person_types(typed: str, expected: datetime) -> None:
    assert parse_when(typed) == expected


def test_collected_at_typed_in_lowercase_and_a_payload_in_lowercase_agree(cli: Any) -> None:
    assert cli("init").code == 0
    assert cli("keys", "new", "coll", "--role", "collector").code == 0
    payload = json.dumps({"job_id": "j", "state": "killed", "ended_at": "2026-12-05t20:00:00z"})
    r = cli("record", "job", "--key", "coll", "-s", "campaign=c", "-s", "host=h", "--data", payload,
            "--collected-at", "2026-12-05t20:00:00z", "--json")  # fmt: skip
    assert r.code == 0, r.err
    bad = json.dumps({"job_id": "j2", "state": "killed", "ended_at": "2026-W49-6T20:00Z"})
    r = cli("record", "job", "--key", "coll", "-s", "campaign=c", "-s", "host=h", "--data", bad)
    assert r.code == 2
    assert "ended_at" in r.err and "2026-W49-6T20:00Z" in r.err and "YYYY-MM-DDTHH:MM:SS" in r.err
