"""Fix 120 (issue 11): the library's record calls are as strict as ``--record``, on their caller's clock.

``record_routing_change`` called as a library function on a decision judged at a past ``--now`` recorded it
when no ``read`` size was given (only the log the judgement cut was held against that time), and
``Ledger.record_verdict`` / ``Ledger.record_routing_change`` took no clock reading, no log size and no way to
judge a past pass again. Now a library call that does not say what it read is held to the whole log as it
stands; the Ledger calls take the caller's one clock reading (``clock``) and judge a pass made before it again
themselves (under the policy the result names: ``judge_again_at``, ``decision_again_at``, the CLI's own
copy); the policy function records no allowed decision judged before the clock that it cannot judge again.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ledger.entries import format_time, now_utc, parse_time
from ledger.errors import InputError
from ledger.policy.loader import load_policy
from ledger.policy.routing import check_routing_change, record_routing_change
from ledger.policy.verdict import evaluate
from ledger.service import Ledger
from tests.test_record_reference_time import CAMPAIGN, LAYOUT, _kinds, _route, _shop

ROUTE_SUBJECT = {k: CAMPAIGN[k] for k in ("backend", "model", "host")}


def _note(ledger: Ledger, minutes_ago: float) -> None:
    at = now_utc() - timedelta(minutes=minutes_ago)
    note = ledger.make_statement("note", {"host": "another-box"}, {"text": "unrelated"}, collected_at=at)
    ledger.append([ledger.sign(note, "operator")], logged_at=at)


def _decision(ledger: Ledger, when: datetime | None) -> dict[str, Any]:
    return check_routing_change(
        ledger, load_policy("routing-change"), ROUTE_SUBJECT, deployment=LAYOUT, now=when
    )


@pytest.fixture
def allowed(tmp_path: Path) -> tuple[Path, Ledger]:
    """A shop whose failed campaign is past the 7-day bound: a route is allowed now."""
    home, ledger = _shop(tmp_path, failed_days_ago=8)
    yield home, ledger
    ledger.close()


# --- a past --now that cut the log, through the library --------------------------------------------------


@pytest.mark.parametrize("via", ["function", "ledger"])
def test_library_record_routing_change_without_read_refuses_a_past_now_that_cut_the_log(
    allowed: tuple[Path, Ledger], via: str
) -> None:
    _home, ledger = allowed
    _note(ledger, minutes_ago=2)
    head = ledger.size()
    cut = _decision(ledger, now_utc() - timedelta(minutes=5))
    assert cut["checkpoint"]["size"] == head - 1  # the note is after that time: cut
    # no read given: the log as it stands
    record = record_routing_change if via == "function" else Ledger.record_routing_change
    with pytest.raises(InputError, match="the log it read ends with an entry"):
        record(ledger, cut, key="operator")
    assert ledger.size() == head


def test_library_record_routing_change_with_an_understated_read_is_still_refused(
    allowed: tuple[Path, Ledger],
) -> None:
    """``read`` is the log the caller asked: the whole log, given or left out, refuses the cut what-if."""
    _home, ledger = allowed
    _note(ledger, minutes_ago=2)
    head = ledger.size()
    cut = _decision(ledger, now_utc() - timedelta(minutes=5))
    with pytest.raises(InputError, match="the log it read ends with an entry"):
        ledger.record_routing_change(cut, key="operator", read=head)
    with pytest.raises(InputError, match="the log it read ends with an entry"):
        ledger.record_routing_change(cut, key="operator", read=None)
    assert ledger.size() == head


def test_library_record_routing_change_judged_at_the_clock_is_recorded(allowed: tuple[Path, Ledger]) -> None:
    _home, ledger = allowed
    clock = now_utc()
    result = _decision(ledger, clock)
    assert result["allowed"] is True
    size = ledger.size()
    e = ledger.record_routing_change(result, key="operator", clock=clock)
    assert e.statement.payload["allowed"] is True and ledger.size() == size + 1


# --- the clock is the caller's one reading ---------------------------------------------------------------


def test_ledger_record_routing_change_holds_the_decision_to_the_clock_it_is_given(
    allowed: tuple[Path, Ledger],
) -> None:
    _home, ledger = allowed
    clock = now_utc()
    result = _decision(ledger, clock)
    size = ledger.size()
    with pytest.raises(InputError, match="after the clock"):
        ledger.record_routing_change(result, key="operator", clock=clock - timedelta(microseconds=1))
    assert ledger.size() == size
    ledger.record_routing_change(result, key="operator", clock=clock)
    assert ledger.size() == size + 1


def test_ledger_record_verdict_holds_the_verdict_to_the_clock_it_is_given(
    allowed: tuple[Path, Ledger],
) -> None:
    _home, ledger = allowed
    clock = now_utc()
    result = evaluate(
        ledger, {"campaign": CAMPAIGN["campaign"]}, load_policy("backend-qualification"), reference_time=clock
    )
    size = ledger.size()
    with pytest.raises(InputError, match="after the clock"):
        ledger.record_verdict(result, key="reviewer", clock=clock - timedelta(microseconds=1))
    assert ledger.size() == size
    ledger.record_verdict(result, key="reviewer", clock=clock)
    assert ledger.size() == size + 1


# --- a pass judged before the clock is judged again at it ------------------------------------------------


def test_library_record_of_an_allowed_route_judged_before_the_clock_is_judged_again(
    allowed: tuple[Path, Ledger],
) -> None:
    _home, ledger = allowed
    past = _decision(ledger, now_utc() - timedelta(seconds=30))
    assert past["allowed"] is True
    size = ledger.size()
    # the function, not told how to judge it again: refused (whether it holds now is unknown)
    with pytest.raises(InputError, match="not judged again"):
        record_routing_change(ledger, past, key="operator")
    # told, by a judgement that refuses it now: refused
    with pytest.raises(InputError, match="judged at the clock"):
        ledger.record_routing_change(past, key="operator", judge_at=lambda t: (False, "refused: stale"))
    # under another policy than the one it names (a mistyped digest): never judged again, refused
    other = {**past, "policy": {**past["policy"], "digest": "blake3:" + "0" * 64}}
    with pytest.raises(InputError, match="not judged again"):
        ledger.record_routing_change(other, key="operator")
    assert ledger.size() == size
    # the Ledger judges it again itself: allowed now too, recorded
    e = ledger.record_routing_change(past, key="operator")
    assert e.statement.payload["allowed"] is True and ledger.size() == size + 1


def test_library_record_of_a_past_qualified_verdict_is_judged_again(allowed: tuple[Path, Ledger]) -> None:
    _home, ledger = allowed
    when = now_utc() - timedelta(seconds=30)
    result = evaluate(
        ledger, {"campaign": CAMPAIGN["campaign"]}, load_policy("backend-qualification"), reference_time=when
    )
    assert result["verdict"] == "QUALIFIED"
    size = ledger.size()
    with pytest.raises(InputError, match="judged at the clock"):
        ledger.record_verdict(result, key="reviewer", judge_at=lambda t: (False, "NOT QUALIFIED"))
    for policy in (
        {**result["policy"], "digest": "blake3:" + "0" * 64},  # mistyped digest: another policy
        {k: v for k, v in result["policy"].items() if k != "name"},  # its name dropped
        {**result["policy"], "name": "no-such-policy"},  # renamed
    ):
        with pytest.raises(InputError, match="not judged again"):
            ledger.record_verdict({**result, "policy": policy}, key="reviewer")
    assert ledger.size() == size
    e = ledger.record_verdict(result, key="reviewer")  # judged again by the ledger: QUALIFIED now too
    assert e.statement.payload["verdict"] == "QUALIFIED" and ledger.size() == size + 1


# --- the CLI keeps its behaviour -------------------------------------------------------------------------


def test_cli_records_an_allowed_route_judged_now_or_at_a_recent_now(
    allowed: tuple[Path, Ledger], tmp_path: Path, cli: Any
) -> None:
    home, ledger = allowed
    routes = _kinds(ledger, "routing.change")
    recent = format_time(now_utc())  # after the log's head, before the clock of the record call
    for more in (["--now", recent], []):
        r = _route(cli, home, tmp_path, *more, "--record", "--key", "operator", "--json")
        assert r.code == 0 and json.loads(r.out)["recorded"], r.out + r.err
    assert _kinds(ledger, "routing.change") == routes + 2


def test_cli_refuses_to_record_a_route_at_a_past_now_that_cut_the_log(
    allowed: tuple[Path, Ledger], tmp_path: Path, cli: Any
) -> None:
    home, ledger = allowed
    _note(ledger, minutes_ago=2)
    size = ledger.size()
    past = format_time(now_utc() - timedelta(minutes=5))
    r = _route(cli, home, tmp_path, "--now", past, "--record", "--key", "operator")
    assert r.code == 2 and "the log it read ends with an entry" in r.err, r.out + r.err
    read = _route(cli, home, tmp_path, "--now", past, "--json")  # read, the past what-if is answered
    assert read.code == 0 and json.loads(read.out)["allowed"] is True, read.out + read.err
    assert ledger.size() == size
    assert parse_time(past) < now_utc()
