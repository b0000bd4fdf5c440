"""Fix 115 (issue 11): the time a ``--record`` judgement is recorded at was checked twice.

``ledger verdict --record`` (``_refuse_past_record``) and ``ledger check routing-change --record`` (an inline
``refuse_unrecordable_time``) checked the reference time against the log's head and the clock, then
``record_verdict`` / ``record_routing_change`` checked it again against a clock read a second time. Now the
CLI reads the clock once and passes it, with the log's head it asked and the judgement at the clock, into the
record_* call: one check (``record_time.refuse_unrecordable_judgement``), one message, the same cases refused.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from ledger.entries import format_time, now_utc, parse_time
from ledger.errors import InputError
from ledger.policy.loader import load_policy
from ledger.policy.routing import check_routing_change, record_routing_change
from ledger.policy.verdict import evaluate, record_verdict
from ledger.service import Ledger
from tests.test_record_reference_time import CAMPAIGN, LAYOUT, _ahead, _kinds, _route, _shop

SUBJ = ["--subject", f"campaign={CAMPAIGN['campaign']}"]


def _note(ledger: Ledger, minutes_ago: float) -> None:
    at = now_utc() - timedelta(minutes=minutes_ago)
    note = ledger.make_statement("note", {"host": "another-box"}, {"text": "unrelated"}, collected_at=at)
    ledger.append([ledger.sign(note, "operator")], logged_at=at)


def _said_once(err: str, *texts: str) -> None:
    assert err.count("cannot record a ") == 1, err
    for text in texts:
        assert err.count(text) == 1, err


def test_a_future_now_refusal_is_said_once(tmp_path: Path, cli: Any) -> None:
    home, ledger = _shop(tmp_path)
    size = ledger.size()
    r = cli("verdict", "--home", str(home), *SUBJ, "--now", _ahead(hours=1), "--record", "--key", "reviewer")
    assert r.code == 2, r.out + r.err
    _said_once(r.err, "cannot record a verdict judged at", "after the clock")
    r = _route(cli, home, tmp_path, "--now", _ahead(hours=1), "--record", "--key", "operator")
    assert r.code == 2, r.out + r.err
    _said_once(r.err, "cannot record a routing decision judged at", "after the clock")
    assert ledger.size() == size
    ledger.close()


@pytest.mark.parametrize("what", ["verdict", "routing"])
def test_a_past_now_is_refused_by_the_logs_head_before_the_clocks_answer(
    tmp_path: Path, cli: Any, what: str
) -> None:
    """A --now before the log's head: the head's message, once — never the pass-at-the-clock one, which the
    one check asks only after the head and the clock."""
    home, ledger = _shop(tmp_path)
    _note(ledger, minutes_ago=2)
    size = ledger.size()
    past = format_time(now_utc() - timedelta(minutes=5))
    if what == "verdict":
        r = cli("verdict", "--home", str(home), *SUBJ, "--now", past, "--record", "--key", "reviewer")
        said = "cannot record a verdict judged at"
    else:  # the routing check cuts the log at --now: still refused on the head it was asked of
        r = _route(cli, home, tmp_path, "--now", past, "--record", "--key", "operator")
        said = "cannot record a routing decision judged at"
    assert r.code == 2, r.out + r.err
    _said_once(r.err, said, "the log it read ends with an entry")
    assert "judged at the clock" not in r.err
    assert ledger.size() == size
    ledger.close()


def test_recording_at_the_clock_still_records(tmp_path: Path, cli: Any) -> None:
    home, ledger = _shop(tmp_path)
    verdicts, routes = _kinds(ledger, "verdict"), _kinds(ledger, "routing.change")
    for more in ([], ["--now", "now"]):
        r = cli("verdict", "--home", str(home), *SUBJ, *more, "--record", "--key", "reviewer", "--json")
        assert r.code == 0, r.err
        r = _route(cli, home, tmp_path, *more, "--record", "--key", "operator", "--json")
        assert r.code == 1 and json.loads(r.out)["recorded"], r.out + r.err  # refused today, recorded so
    assert _kinds(ledger, "verdict") == verdicts + 2 and _kinds(ledger, "routing.change") == routes + 2
    ledger.close()


def test_record_verdict_holds_the_reference_time_to_the_clock_it_is_given(tmp_path: Path) -> None:
    """The clock the caller read, not a later one: a reference time after it is refused."""
    from ledger.policy.loader import load_policy as load

    _home, ledger = _shop(tmp_path)
    result = evaluate(ledger, {"campaign": CAMPAIGN["campaign"]}, load("backend-qualification"))
    when = parse_time(result["reference_time"])
    size = ledger.size()
    with pytest.raises(InputError, match="after the clock"):
        record_verdict(ledger, result, key="reviewer", clock=when - timedelta(microseconds=1))
    assert ledger.size() == size

    def never(t: Any) -> tuple[bool, str]:
        return False, "NOT QUALIFIED (judged again)"

    if result["verdict"] == "QUALIFIED":  # judged before the clock, and not QUALIFIED at it: refused
        with pytest.raises(InputError, match="judged at the clock"):
            record_verdict(ledger, result, key="reviewer", clock=when + timedelta(seconds=1), judge_at=never)
        assert ledger.size() == size
    record_verdict(ledger, result, key="reviewer", clock=when)
    assert ledger.size() == size + 1
    ledger.close()


def test_record_routing_change_is_held_to_the_head_it_was_asked_of(tmp_path: Path) -> None:
    """``read``: the log's size when the decision was asked; a past time that cut it is still refused."""
    _home, ledger = _shop(tmp_path)
    _note(ledger, minutes_ago=2)
    subject = {k: CAMPAIGN[k] for k in ("backend", "model", "host")}
    head = ledger.size()
    past = now_utc() - timedelta(minutes=1, seconds=30)
    result = check_routing_change(ledger, load_policy("routing-change"), subject, deployment=LAYOUT, now=past)
    assert result["checkpoint"]["size"] == head  # the note (2 min ago) is before --now: nothing cut
    earlier = now_utc() - timedelta(minutes=5)
    cut = check_routing_change(ledger, load_policy("routing-change"), subject, deployment=LAYOUT, now=earlier)
    assert cut["checkpoint"]["size"] == head - 1
    with pytest.raises(InputError, match="the log it read ends with an entry"):
        record_routing_change(ledger, cut, key="operator", read=head)
    assert ledger.size() == head
    record_routing_change(ledger, result, key="operator", read=head)
    assert ledger.size() == head + 1
    ledger.close()
