"""Issue 11 (fix 42): the library's ``record_verdict`` refuses a reference time the log or the clock has not
reached, as ``ledger verdict --record`` does (``record_time.refuse_unrecordable_time``, one copy).

Before, only the CLI checked it: ``Ledger.record_verdict`` (and ``policy.verdict.record_verdict``) signed a
verdict judged tomorrow, or judged at a time before the last entry it read, and appended it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from ledger.entries import parse_time
from ledger.errors import InputError
from ledger.policy import evaluate
from ledger.policy.loader import load_policy
from ledger.policy.verdict import record_verdict

CAMPAIGN = {"campaign": "router-embed"}


def judged(b: Any, reference_time: str | None = None) -> dict[str, Any]:
    return evaluate(
        b.ledger, dict(CAMPAIGN), load_policy("backend-qualification"), reference_time=reference_time
    )


def head_time(b: Any) -> Any:
    return parse_time(b.ledger.query(limit=1, descending=True)[0].logged_at)


def test_library_record_verdict_refuses_a_reference_time_after_the_clock(build) -> None:
    b = build("routing-change/seed004-router.toml")
    at = head_time(b) + timedelta(hours=1)
    result = judged(b, "2026-09-12T09:00:00Z")  # a day after the time it is logged at
    size = b.ledger.size()
    with pytest.raises(InputError, match="after the clock"):
        b.ledger.record_verdict(result, at=at)
    assert b.ledger.size() == size
    # the module's function, which fixtures and the CLI call, refuses it too (one place every caller passes)
    with pytest.raises(InputError, match="after the clock"):
        record_verdict(b.ledger, result, key=b.ledger.cfg.admin_key, at=at)
    assert b.ledger.size() == size


def test_library_record_verdict_refuses_a_future_reference_time_against_the_real_clock(build) -> None:
    b = build("routing-change/seed004-router.toml")
    result = judged(b, "2999-01-01T00:00:00Z")
    with pytest.raises(InputError, match="after the clock"):
        b.ledger.record_verdict(result)


def test_library_record_verdict_refuses_a_reference_time_before_the_log_head(build) -> None:
    b = build("routing-change/seed004-router.toml")
    result = judged(b)
    result = {**result, "reference_time": "2026-09-10T09:00:00.000000Z"}  # before entries it read
    size = b.ledger.size()
    with pytest.raises(InputError, match="the log it read ends with an entry"):
        b.ledger.record_verdict(result, at=head_time(b) + timedelta(hours=1))
    assert b.ledger.size() == size


def test_library_record_verdict_records_at_the_head_time_and_before_the_clock(build) -> None:
    b = build("routing-change/seed004-router.toml")
    result = judged(b)  # judged at the log time of the last entry it read
    entry = b.ledger.record_verdict(result, at=head_time(b) + timedelta(hours=1))
    assert entry.seq == b.ledger.size() - 1


@pytest.mark.parametrize(
    "change",
    [
        {"reference_time": None},
        {"reference_time": 1757494800},
        {"checkpoint": {"size": "12"}},
        {"checkpoint": {"size": True}},
        {"checkpoint": {}},
    ],
)
def test_library_record_verdict_refuses_a_result_without_its_time_or_size(
    build, change: dict[str, Any]
) -> None:
    b = build("routing-change/seed004-router.toml")
    result = {**judged(b), **change}
    size = b.ledger.size()
    with pytest.raises(InputError, match=r"reference_time .* and checkpoint\.size"):
        b.ledger.record_verdict(result, at=head_time(b) + timedelta(hours=1))
    assert b.ledger.size() == size
