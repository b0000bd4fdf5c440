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
from functools import partial
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


# --- fix 132 (audit 94 f1): every record call holds a judgement to the whole log, judges again on it ---

VERDICT_SUBJECT = {"campaign": CAMPAIGN["campaign"]}
RECORDERS = ["cli", "ledger", "function"]


def _withdraw_job(ledger: Ledger, minutes_ago: float) -> None:
    """The operator supersedes the campaign's job (its evidence withdrawn): judged after it, not QUALIFIED."""
    at = now_utc() - timedelta(minutes=minutes_ago)
    job = [
        e
        for e in ledger.query(kind="job", limit=1000)
        if e.statement.subject.get("campaign") == CAMPAIGN["campaign"]
    ]
    st = ledger.make_statement(
        "supersession",
        dict(job[-1].statement.subject),
        {"reason": "withdrawn: bad run"},
        refs=[("supersedes", job[-1].entry_id)],
        collected_at=at,
    )
    ledger.append([ledger.sign(st, "operator")], logged_at=at)


def _verdict_at(ledger: Ledger, when: datetime, *, cut: bool) -> dict[str, Any]:
    """The verdict judged at ``when``: on the log cut as of then (what ``verdict --now`` reads), or whole."""
    from ledger.policy.record_time import size_as_of

    at = size_as_of(ledger, None, when) if cut else None
    return evaluate(
        ledger, VERDICT_SUBJECT, load_policy("backend-qualification"), at_size=at, reference_time=when
    )


def _record(
    kind: str, via: str, ledger: Ledger, home: Path, tmp_path: Path, cli: Any, when: datetime, *, cut: bool
) -> Any:
    """Record the ``kind`` judgement made at ``when`` through ``via``: the entry, or the InputError raised
    (the CLI's: exit 2 with its message, as an InputError)."""
    from ledger.policy.routing import record_routing_change as routing_function
    from ledger.policy.verdict import record_verdict as verdict_function

    clock = None if cut else when  # the honest one is recorded on the clock it was judged at
    if via == "cli":
        more = ["--now", format_time(when)] if cut else []
        if kind == "verdict":
            r = cli(
                "verdict",
                "--home",
                str(home),
                "-s",
                f"campaign={CAMPAIGN['campaign']}",
                *more,
                "--record",
                "--key",
                "reviewer",
                "--json",
            )
        else:
            r = _route(cli, home, tmp_path, *more, "--record", "--key", "operator", "--json")
        if r.code == 2:
            return InputError(r.err)
        assert r.code in (0, 1), r.out + r.err
        return ledger.query(kind=kind if kind == "verdict" else "routing.change", limit=1, descending=True)[0]
    try:
        if kind == "verdict":
            result = _verdict_at(ledger, when, cut=cut)
            if via == "ledger":
                return ledger.record_verdict(result, key="reviewer", clock=clock)
            return verdict_function(ledger, result, key="reviewer", clock=clock)
        result = _decision(ledger, when)
        if via == "ledger":
            return ledger.record_routing_change(result, key="operator", clock=clock)
        return routing_function(ledger, result, key="operator", clock=clock)
    except InputError as e:
        return e


@pytest.mark.parametrize("kind", ["verdict", "routing"])
@pytest.mark.parametrize("via", RECORDERS)
def test_a_past_judgement_on_a_cut_log_is_refused_by_every_record_call(
    allowed: tuple[Path, Ledger], tmp_path: Path, cli: Any, via: str, kind: str
) -> None:
    """Audit 94 f1: judged as of 5 minutes ago (the log cut to the entries it held then: QUALIFIED),
    then the campaign's job is withdrawn; ``policy.verdict.record_verdict`` held the judgement only to its
    own cut checkpoint and signed the withdrawn QUALIFIED. Every record call refuses it now."""
    home, ledger = allowed
    past = now_utc() - timedelta(minutes=5)
    before = _verdict_at(ledger, past, cut=True)
    assert before["verdict"] == "QUALIFIED"
    _withdraw_job(ledger, minutes_ago=2)
    assert _verdict_at(ledger, now_utc(), cut=False)["verdict"] != "QUALIFIED"  # withdrawn, judged now
    assert _verdict_at(ledger, past, cut=True)["checkpoint"]["size"] == ledger.size() - 1  # the cut log
    size = ledger.size()
    got = _record(kind, via, ledger, home, tmp_path, cli, past, cut=True)
    assert isinstance(got, InputError), got
    assert "the log it read ends with an entry" in got.message
    assert ledger.size() == size


@pytest.mark.parametrize("kind", ["verdict", "routing"])
@pytest.mark.parametrize("via", RECORDERS)
def test_an_honest_judgement_at_the_clock_is_recorded_by_every_record_call(
    allowed: tuple[Path, Ledger], tmp_path: Path, cli: Any, via: str, kind: str
) -> None:
    home, ledger = allowed
    _note(ledger, minutes_ago=2)  # an unrelated later entry: the judgement at the clock reads it
    size = ledger.size()
    got = _record(kind, via, ledger, home, tmp_path, cli, now_utc(), cut=False)
    assert not isinstance(got, InputError), got.message
    assert ledger.size() == size + 1
    if kind == "verdict":
        assert got.statement.payload["verdict"] == "QUALIFIED"
        assert got.statement.payload["checkpoint"]["size"] == size
    else:
        assert got.statement.payload["allowed"] is True


def test_a_past_qualified_is_judged_again_on_the_whole_log_not_its_own_checkpoint(
    allowed: tuple[Path, Ledger],
) -> None:
    """``judge_again_at`` judged again at the result's own (cut) checkpoint: the supersession logged since
    was never seen. A caller that understates what it read (``read``: the cut size) passes the log-time
    check, and the judgement at the clock, on the whole log, refuses it."""
    from ledger.policy.verdict import judge_again_at

    _home, ledger = allowed
    past = now_utc() - timedelta(minutes=5)
    cut = _verdict_at(ledger, past, cut=True)
    _withdraw_job(ledger, minutes_ago=2)
    size, read = ledger.size(), int(cut["checkpoint"]["size"])
    holds, text = judge_again_at(ledger, cut, load_policy("backend-qualification"))(now_utc())
    assert holds is False and text.startswith("INCONCLUSIVE"), text
    with pytest.raises(InputError, match="judged at the clock"):
        ledger.record_verdict(cut, key="reviewer", read=read)
    assert ledger.size() == size


def test_library_record_verdict_without_judge_at_refuses_a_past_qualified(
    allowed: tuple[Path, Ledger],
) -> None:
    """``policy.verdict.record_verdict`` with no ``judge_at`` recorded a QUALIFIED judged before the clock
    unjudged; ``record_routing_change`` refused the same. Both refuse it now; given a judge, it is
    recorded."""
    from ledger.policy.verdict import judge_again_at, record_verdict

    _home, ledger = allowed
    result = _verdict_at(ledger, now_utc() - timedelta(seconds=30), cut=False)
    assert result["verdict"] == "QUALIFIED"
    size = ledger.size()
    with pytest.raises(InputError, match="not judged again"):
        record_verdict(ledger, result, key="reviewer")
    assert ledger.size() == size
    judge = judge_again_at(ledger, result, load_policy("backend-qualification"))
    e = record_verdict(ledger, result, key="reviewer", judge_at=judge)
    assert e.statement.payload["verdict"] == "QUALIFIED" and ledger.size() == size + 1


@pytest.mark.parametrize("read", ["12", True, -1, 1.5, "beyond"])
@pytest.mark.parametrize("kind", ["verdict", "routing"])
def test_a_read_that_is_not_a_size_of_the_log_is_refused(
    allowed: tuple[Path, Ledger], kind: str, read: Any
) -> None:
    """``read`` mistyped, negative or past the log's head held the judgement to no log (its head check was
    skipped): refused, naming it."""
    _home, ledger = allowed
    clock = now_utc()
    size = ledger.size()
    read = size + 1 if read == "beyond" else read
    record = (
        partial(ledger.record_verdict, _verdict_at(ledger, clock, cut=False), key="reviewer")
        if kind == "verdict"
        else partial(ledger.record_routing_change, _decision(ledger, clock), key="operator")
    )
    with pytest.raises(InputError, match=r"read=.*a size of this log"):
        record(clock=clock, read=read)
    assert ledger.size() == size
    # the log's own size, given: recorded
    e = ledger.record_verdict(_verdict_at(ledger, clock, cut=False), key="reviewer", clock=clock, read=size)
    assert ledger.size() == size + 1 and e.statement.payload["checkpoint"]["size"] == size
