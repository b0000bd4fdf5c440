"""Audit 34 (f5): a recorded judgement is judged at a time the log and the clock have both reached.

Before, `ledger check routing-change --record --now <26 h ahead>` signed and appended `routing.change
{allowed: true}` today, though at the clock the same route was refused: another campaign's NOT QUALIFIED
failure, 6 days old, still stood within the 7-day bound, and had aged out by the future reference time. Only
a --now before the log's head was refused with --record. `ledger verdict --record --now <future>` had the
same hole. One rule now serves both (``ledger.policy.record_time.refuse_unrecordable_time``): a reference
time before the log time of the last entry read, or after the clock (no tolerance:
``RECORD_FUTURE_TOLERANCE`` is zero), is refused with --record (exit 2, nothing recorded); without --record
any --now may still be read.

Each test is named after the failure it holds fixed."""

from __future__ import annotations

import copy
import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ledger.entries import format_time, now_utc, parse_time
from ledger.errors import InputError
from ledger.policy.fixtures import _Builder
from ledger.policy.record_time import RECORD_FUTURE_TOLERANCE, refuse_unrecordable_time
from ledger.service import Ledger
from tests.policy.conftest import POLICY_DIR
from tests.policy.test_fail_closed import KEYS, qualified_entries
from tests.policy.test_fail_closed import SUBJECT as CAMPAIGN
from tests.test_routing_restore_and_faults import VERDICT
from tests.test_routing_verdict_shopping import failed_campaign, moved

ROUTE = [f"--subject={k}={CAMPAIGN[k]}" for k in ("backend", "model", "host")]
LAYOUT = {
    "host": "gpu-box-1",
    "services": [
        {"engine": "vllm", "name": "vllm-m7", "model": "m-7", "gpus": [0], "gpu_memory_utilization": 0.25}
    ],
}


def _shop(tmp_path: Path, failed_days_ago: float = 6) -> tuple[Path, Ledger]:
    """A home judged at the real clock: campaign shop-a of the same backend, model and host failed (its
    engine died on its first completion: NOT QUALIFIED) ``failed_days_ago`` days ago; the QUALIFIED campaign
    ran since, its verdict recorded 10 minutes ago."""
    delta = now_utc().replace(microsecond=0) - timedelta(minutes=10) - parse_time(VERDICT["at"])
    failed = failed_campaign("shop-a", by=delta - timedelta(days=failed_days_ago))
    good = moved([*qualified_entries(), copy.deepcopy(VERDICT)], delta)
    start = min(parse_time(e["at"]) for e in failed) - timedelta(hours=1)
    home = tmp_path / "home"
    ledger = Ledger.init(home, genesis_at=start)
    spec = {
        "start": format_time(start),
        "keys": KEYS,
        "defaults": {"subject": CAMPAIGN},
        "entries": [*failed, *good],
    }
    b = _Builder(ledger, spec, POLICY_DIR)
    b.enrol_keys()
    b.add_all(spec["entries"])
    return home, ledger


def _ahead(**delta: float) -> str:
    return format_time(now_utc() + timedelta(**delta))


def _route(cli: Any, home: Path, tmp_path: Path, *more: str) -> Any:
    dep = tmp_path / "dep.json"
    dep.write_text(json.dumps(LAYOUT))
    return cli("check", "routing-change", "--home", str(home), *ROUTE, "--deployment", str(dep), *more)


def _kinds(ledger: Ledger, kind: str) -> int:
    return len(ledger.query(kind=kind, limit=1000))


# --- routing-change --record --------------------------------------------------------------------------------


def test_a_future_now_does_not_record_an_allowed_route_that_is_refused_now(tmp_path: Path, cli) -> None:
    home, ledger = _shop(tmp_path)
    now = _route(cli, home, tmp_path)
    assert now.code == 1 and "campaign shop-a" in now.out, now.out + now.err  # the failure stands today
    later = _ahead(hours=26)
    # read, the future what-if is answered: by then shop-a's failure is older than the 7-day bound
    assert _route(cli, home, tmp_path, "--now", later).code == 0
    size = ledger.size()
    r = _route(cli, home, tmp_path, "--now", later, "--record", "--key", "operator")
    assert r.code == 2, r.out + r.err
    assert "cannot record a routing decision judged at" in r.err and "after the clock" in r.err, r.err
    assert ledger.size() == size and _kinds(ledger, "routing.change") == 0
    ledger.close()


@pytest.mark.parametrize(
    ("when", "recorded"),
    [
        (None, True),  # judged at the clock
        ("now", True),
        ("1 minute ago", True),  # after the log's head
        ("5 minutes ago", False),  # after the verdict, before the log's head (a note 2 minutes ago)
        ("+60s", False),
        ("+1h", False),
        ("+26h", False),
    ],
)
def test_routing_record_reference_time_between_the_logs_head_and_the_clock(
    tmp_path: Path, cli, when: str | None, recorded: bool
) -> None:
    home, ledger = _shop(tmp_path)
    at = now_utc() - timedelta(minutes=2)
    note = ledger.make_statement("note", {"host": "another-box"}, {"text": "unrelated"}, collected_at=at)
    ledger.append([ledger.sign(note, "operator")], logged_at=at)
    if when is not None and when.startswith("+"):
        when = _ahead(seconds=int(when[1:-1]) * (3600 if when.endswith("h") else 1))
    more = ["--now", when] if when is not None else []
    before = ledger.size()
    # without --record every reference time after the verdict is judged, and nothing is written
    assert _route(cli, home, tmp_path, *more).code in (0, 1)
    assert ledger.size() == before
    r = _route(cli, home, tmp_path, *more, "--record", "--key", "operator", "--json")
    if recorded:
        assert r.code == 1, r.out + r.err  # refused today (shop-a), and recorded so
        e = ledger.get(json.loads(r.out)["recorded"])
        judged = parse_time(e.statement.payload["judged_at"])
        assert judged <= parse_time(e.logged_at)  # never judged after the log took it
        assert e.statement.payload["allowed"] is False
    else:
        assert r.code == 2 and "cannot record a routing decision judged at" in r.err, r.out + r.err
        assert ledger.size() == before
    ledger.close()


# --- verdict --record ---------------------------------------------------------------------------------------


def test_a_future_now_does_not_record_a_verdict(tmp_path: Path, cli) -> None:
    home, ledger = _shop(tmp_path)
    subj = ["--subject", f"campaign={CAMPAIGN['campaign']}"]
    later = _ahead(hours=26)
    # read, the future what-if is answered (the log as it stands: every entry was taken before then)
    r = cli("verdict", "--home", str(home), *subj, "--now", later, "--json")
    assert r.code == 0 and json.loads(r.out)["reference_time"].startswith(later[:19]), r.err
    verdicts = _kinds(ledger, "verdict")
    for ahead in (later, _ahead(seconds=60)):
        r = cli("verdict", "--home", str(home), *subj, "--now", ahead, "--record", "--key", "reviewer")
        assert r.code == 2, r.out + r.err
        assert "cannot record a verdict judged at" in r.err and "after the clock" in r.err, r.err
        assert _kinds(ledger, "verdict") == verdicts
    # at the clock (no --now, or --now now) it is recorded, judged no later than the log took it
    for more in ([], ["--now", "now"]):
        r = cli("verdict", "--home", str(home), *subj, *more, "--record", "--key", "reviewer", "--json")
        assert r.code == 0, r.err
        rec = ledger.query(kind="verdict", limit=1, descending=True)[0]
        assert parse_time(rec.statement.payload["reference_time"]) <= parse_time(rec.logged_at)
    assert _kinds(ledger, "verdict") == verdicts + 2
    ledger.close()


# --- the one rule -------------------------------------------------------------------------------------------


def test_the_record_rule_has_no_clock_skew_tolerance(tmp_path: Path) -> None:
    _home, ledger = _shop(tmp_path)
    size = ledger.size()
    head = parse_time(ledger.query(limit=1, descending=True)[0].logged_at)
    clock = head + timedelta(hours=1)
    assert timedelta(0) == RECORD_FUTURE_TOLERANCE
    for ok in (head, clock - timedelta(seconds=1), clock):
        refuse_unrecordable_time(ledger, size, ok, "routing decision", clock=clock)
    for bad, why in (
        (head - timedelta(microseconds=1), "after that time"),
        (clock + timedelta(microseconds=1), "after the clock"),
        (clock + timedelta(seconds=1), "after the clock"),
        (clock + timedelta(hours=26), "after the clock"),
    ):
        with pytest.raises(InputError, match=why):
            refuse_unrecordable_time(ledger, size, bad, "verdict", clock=clock)
    ledger.close()


def test_record_routing_change_refuses_a_decision_judged_after_the_time_it_is_logged_at(
    tmp_path: Path,
) -> None:
    """The library call the CLI makes: ``at`` (the log time the caller sets) is the clock it is judged by."""
    from ledger.policy.loader import load_policy
    from ledger.policy.routing import check_routing_change, record_routing_change

    _home, ledger = _shop(tmp_path)
    subject = {k: CAMPAIGN[k] for k in ("backend", "model", "host")}
    at: datetime = now_utc()
    later = check_routing_change(
        ledger, load_policy("routing-change"), subject, deployment=LAYOUT, now=at + timedelta(hours=26)
    )
    assert later["allowed"] is True  # shop-a's failure has aged out by then …
    size = ledger.size()
    with pytest.raises(InputError, match="after the clock"):
        record_routing_change(ledger, later, key="operator", at=at)  # … but not now: not recorded
    assert ledger.size() == size
    judged_now = check_routing_change(
        ledger, load_policy("routing-change"), subject, deployment=LAYOUT, now=at
    )
    assert judged_now["allowed"] is False
    e = record_routing_change(ledger, judged_now, key="operator", at=at + timedelta(seconds=1))
    assert e.statement.payload["allowed"] is False
    ledger.close()
