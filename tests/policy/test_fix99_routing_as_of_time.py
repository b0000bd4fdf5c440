"""Issue 11, audit 82: the routing gate judged at a past time, and a claimed old time hiding a failing probe.

f1: ``ledger check routing-change --now <past>`` (and ``POST /v1/routing-check`` with ``now``) read entries
the log took after that time: a /health 200 logged after T claiming to be collected before T turned the answer
"as of T" from refused to allowed. The gate now judges the log as it stood at its reference time — the
entries it took at or before it (``record_time.size_as_of``, the one rule ``ledger verdict --now`` keeps).

f2: a failing probe the log took last, claiming a ``collected_at`` older than ``probe_max_age``, was dropped
by the gate's freshness filter before "the newest" was chosen, so the earlier passes restored the route.
Freshness now decides credit only: a failure the log took within the bound stays among the probes, whatever
older time it claims (``counts_against``, rule ``stale``); a pass claiming an old time is not credited; a
failure the log took before the bound is stale.

Each test is named after the failure it holds fixed, or the neighbour it keeps."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest

from ledger.entries import format_time, parse_time
from ledger.errors import InputError
from ledger.policy.loader import load_policy
from ledger.policy.record_time import size_as_of
from ledger.policy.routing import check_routing_change
from ledger.policy.rules import Rule
from tests.policy.test_routing_current import RESTORATION_PROBES

SEED000 = "routing-change/seed000-restoration.toml"  # host hiro: fresh passes, the last logged 18:00:20
SUBJECT = {"backend": "llama.cpp", "model": "qwen/qwen3.8-27b", "host": "hiro"}
HEALTH_503 = {
    "endpoint": "http://127.0.0.1:8080/health",
    "check": "health",
    "ok": False,
    "http_status": 503,
    "error": "Service Unavailable",
}
HEALTH_200 = {"endpoint": "http://127.0.0.1:8080/health", "check": "health", "ok": True, "http_status": 200}
MODELS_500 = {
    "endpoint": "http://127.0.0.1:8080/v1/models",
    "check": "models",
    "ok": False,
    "http_status": 500,
}
NOT_READY = {
    "endpoint": "http://127.0.0.1:8080/v1/chat/completions",
    "check": "completion",
    "ok": True,
    "http_status": 200,
    "text": "NOT READY",
    "max_tokens": 8,
}
NEWEST = {
    "health": "the newest fresh /health probe",
    "models": "the newest fresh /v1/models probe",
    "completion": "the newest fresh completion probe",
}


def _t(text: str) -> datetime:
    return parse_time(text)


def _probe(b: Any, payload: dict[str, Any], *, logged: str, claimed: str, host: str = "hiro") -> str:
    st = b.ledger.make_statement("health.probe", {**SUBJECT, "host": host}, payload, collected_at=claimed)
    return str(b.ledger.append([b.ledger.sign(st, "collector")], logged_at=_t(logged))[0].entry_id)


def _restore(b: Any, now: str | None, *, host: str = "hiro", at_size: int | None = None) -> dict[str, Any]:
    return check_routing_change(
        b.ledger,
        load_policy("routing-change"),
        {**SUBJECT, "host": host},
        action="restore",
        now=_t(now) if now is not None else None,
        at_size=at_size,
    )


def _newest_refused(r: dict[str, Any], check: str = "health") -> bool:
    return r["allowed"] is False and any(x.startswith(NEWEST[check]) for x in r["reasons"])


# --- f1: judged at a past time, the log as it stood then ---------------------------------------------------

T = "2026-09-01T18:20:00Z"  # the /health 503 (18:10) is the newest probe the log holds by then


def _late_pass(b: Any) -> int:
    """The fixture's passes, a /health 503 logged at 18:10, then (as of T) nothing more; returns the size as
    of T. Then a /health 200 pushed from a spool: logged at 18:30, after T, claiming 18:15, before it."""
    _probe(b, HEALTH_503, logged="2026-09-01T18:10:00Z", claimed="2026-09-01T18:10:00Z")
    size = int(b.ledger.size())
    _probe(b, HEALTH_200, logged="2026-09-01T18:30:00Z", claimed="2026-09-01T18:15:00Z")
    return size


def test_routing_check_at_a_past_time_reads_no_entry_logged_after_it(build) -> None:
    b = build(SEED000)
    _probe(b, HEALTH_503, logged="2026-09-01T18:10:00Z", claimed="2026-09-01T18:10:00Z")
    before = _restore(b, T)
    assert _newest_refused(before), before["reasons"]
    size = before["checkpoint"]["size"]
    late = _probe(b, HEALTH_200, logged="2026-09-01T18:30:00Z", claimed="2026-09-01T18:15:00Z")
    after = _restore(b, T)
    # the same question as of T, asked after the late entry was logged: the same answer, on the same log
    assert after["allowed"] is False, after
    assert after["reasons"] == before["reasons"]
    assert after["checkpoint"]["size"] == size == b.ledger.size() - 1
    assert late not in after["probes"]


def test_routing_check_without_now_judges_todays_log(build) -> None:
    b = build(SEED000)
    _late_pass(b)
    r = _restore(b, None)  # the real clock: every probe of 2026-09-01 is stale, and the whole log is read
    assert r["checkpoint"]["size"] == b.ledger.size()
    assert r["allowed"] is False and r["probes"] == [], r


def test_routing_check_after_the_newest_entry_reads_the_whole_log(build) -> None:
    b = build(SEED000)
    _late_pass(b)
    r = _restore(b, "2026-09-01T18:40:00Z")
    # the /health 200 is the newest both ways (logged last, observed last): a pass after a failure restores
    assert r["checkpoint"]["size"] == b.ledger.size()
    assert r["allowed"] is True, r["reasons"]


def test_routing_check_with_a_size_and_a_time_refuses_a_size_reaching_past_the_time(build) -> None:
    b = build(SEED000)
    size = _late_pass(b)
    with pytest.raises(InputError, match=r"--at \d+ reads entries logged after --now"):
        _restore(b, T, at_size=b.ledger.size())
    # a size within the time: judged on it
    r = _restore(b, T, at_size=size)
    assert r["checkpoint"]["size"] == size and _newest_refused(r), r["reasons"]
    r = _restore(b, T, at_size=size - 1)  # before the 503: the fixture's passes, fresh at T
    assert r["checkpoint"]["size"] == size - 1 and r["allowed"] is True, r["reasons"]


def test_routing_check_before_the_logs_first_entry_has_nothing_to_judge(build) -> None:
    b = build(SEED000)
    with pytest.raises(InputError, match="holds no entry logged at or before"):
        _restore(b, "2020-01-01T00:00:00Z")


def test_size_as_of_is_the_one_rule_for_the_verdict_and_the_routing_gate(build) -> None:
    import ledger.cli.policy as cli_policy

    b = build(SEED000)
    size = _late_pass(b)
    assert size_as_of(b.ledger, None, _t(T)) == size
    assert size_as_of(b.ledger, None, None) is None and size_as_of(b.ledger, 3, None) == 3
    assert size_as_of(b.ledger, size, _t(T)) == size
    assert not hasattr(cli_policy, "_size_as_of")  # one copy: the CLI's verdict path calls it too


@pytest.mark.parametrize("late", [False, True], ids=["before-the-late-entry", "after-the-late-entry"])
def test_routing_check_at_a_past_time_cli_and_api_give_the_same_answer(build, cli, late: bool) -> None:
    from fastapi.testclient import TestClient

    from ledger.api.app import create_app
    from ledger.api.settings import ApiSettings
    from ledger.tokens import create_token

    b = build(SEED000)
    _probe(b, HEALTH_503, logged="2026-09-01T18:10:00Z", claimed="2026-09-01T18:10:00Z")
    if late:
        _probe(b, HEALTH_200, logged="2026-09-01T18:30:00Z", claimed="2026-09-01T18:15:00Z")
    args = ["check", "routing-change", "--home", str(b.home), "--action", "restore", "--now", T, "--json"]
    got = cli(*args, *(f"--subject={k}={v}" for k, v in SUBJECT.items()))
    assert got.code == 1, got.out + got.err
    by_cli = json.loads(got.out)
    token, _ = create_token(b.ledger.engine, "test-reader", "reader")
    body = {"subject": SUBJECT, "action": "restore", "now": T}
    with TestClient(create_app(ApiSettings(home=str(b.home)), ledger=b.ledger)) as client:
        r = client.post("/v1/routing-check", json=body, headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200, r.text
    by_api = r.json()
    for field in ("allowed", "reasons", "checkpoint", "probes", "now"):
        assert by_api[field] == by_cli[field], field
    assert by_cli["allowed"] is False and by_cli["checkpoint"]["size"] == b.ledger.size() - int(late)


def test_routing_check_record_at_a_past_time_is_still_refused(build, cli) -> None:
    """The cut log's head is at or before a past --now; a recorded decision is still judged at a time the
    whole log has reached (``refuse_unrecordable_time`` on the log's head): a past what-if is for reading."""
    b = build(SEED000)
    _late_pass(b)
    size = b.ledger.size()
    args = ["check", "routing-change", "--home", str(b.home), "--action", "restore", "--now", T, "--record"]
    r = cli(*args, "--key", "collector", *(f"--subject={k}={v}" for k, v in SUBJECT.items()))
    assert r.code == 2 and "cannot record a routing decision judged at" in r.err, r.out + r.err
    assert b.ledger.size() == size


# --- f2: a claimed old time does not take a failure out of the newest probes ----------------------------

NOW = "2026-09-01T18:30:00Z"  # the fixture's passes are fresh (logged and collected 18:00)
OLD = "2026-09-01T16:00:00Z"  # more than probe_max_age (1h) before NOW


@pytest.mark.parametrize(
    ("payload", "check"),
    [(HEALTH_503, "health"), (MODELS_500, "models"), (NOT_READY, "completion")],
    ids=["health-503", "models-500", "completion-not-ready"],
)
def test_failing_probe_claiming_an_old_time_still_refuses_restore(build, payload, check: str) -> None:
    b = build(SEED000)
    assert _restore(b, NOW)["allowed"] is True  # the honest case: the passes restore
    failed = _probe(b, payload, logged="2026-09-01T18:20:00Z", claimed=OLD)
    r = _restore(b, NOW)
    assert _newest_refused(r, check), r["reasons"]
    assert failed in r["probes"]
    [row] = [x for x in r["ignored"] if x["entry"] == failed]
    assert row["rule"] == Rule.STALE and row.get("counts_against") is True, row
    assert "a claimed earlier time does not take a failure out of the newest probes" in row["detail"]


def test_failing_probe_claiming_a_recent_time_refuses_restore_as_before(build) -> None:
    b = build(SEED000)
    failed = _probe(b, HEALTH_503, logged="2026-09-01T18:20:00Z", claimed="2026-09-01T18:19:00Z")
    r = _restore(b, NOW)
    assert _newest_refused(r), r["reasons"]
    assert failed in r["probes"] and not [x for x in r["ignored"] if x["entry"] == failed]


def test_a_pass_after_a_failure_claiming_an_old_time_restores(build) -> None:
    b = build(SEED000)
    _probe(b, HEALTH_503, logged="2026-09-01T18:20:00Z", claimed=OLD)
    _probe(b, HEALTH_200, logged="2026-09-01T18:25:00Z", claimed="2026-09-01T18:25:00Z")
    r = _restore(b, NOW)
    assert r["allowed"] is True, r["reasons"]


def test_passing_probe_claiming_an_old_time_is_not_credited(build) -> None:
    """hiro-7 has fresh /v1/models and READY answers; its only /health 200, logged within the bound, claims
    a time before it: no fresh /health 200, and the stale pass is neither among the probes nor kept."""
    b = build(SEED000)
    for p in RESTORATION_PROBES[1:]:
        _probe(b, p, logged="2026-09-01T18:20:00Z", claimed="2026-09-01T18:20:00Z", host="hiro-7")
    stale = _probe(b, HEALTH_200, logged="2026-09-01T18:21:00Z", claimed=OLD, host="hiro-7")
    r = _restore(b, NOW, host="hiro-7")
    assert r["allowed"] is False
    assert any(x.startswith("no fresh /health 200") for x in r["reasons"]), r["reasons"]
    assert stale not in r["probes"] and not [x for x in r["ignored"] if x["entry"] == stale]
    # the same pass claiming a time within the bound is credited
    _probe(b, HEALTH_200, logged="2026-09-01T18:22:00Z", claimed="2026-09-01T18:22:00Z", host="hiro-7")
    assert _restore(b, NOW, host="hiro-7")["allowed"] is True


def test_failing_probe_logged_before_the_age_bound_is_stale(build) -> None:
    b = build(SEED000)
    failed = _probe(b, HEALTH_503, logged="2026-09-01T18:20:00Z", claimed=OLD)
    for p in RESTORATION_PROBES:
        _probe(b, p, logged="2026-09-01T19:10:00Z", claimed="2026-09-01T19:10:00Z")
    r = _restore(b, "2026-09-01T19:30:00Z")  # the 503 was logged 70 min before: stale by the log's own time
    assert r["allowed"] is True, r["reasons"]
    assert failed not in r["probes"]


def test_failing_probe_claiming_an_old_time_refuses_through_the_cli(build, cli) -> None:
    b = build(SEED000)
    _probe(b, HEALTH_503, logged="2026-09-01T18:20:00Z", claimed=OLD)
    args = ["check", "routing-change", "--home", str(b.home), "--action", "restore", "--now", NOW]
    r = cli(*args, *(f"--subject={k}={v}" for k, v in SUBJECT.items()))
    assert r.code == 1 and NEWEST["health"] in r.out, r.out + r.err
    assert format_time(_t(OLD)).startswith("2026-09-01T16:00:00")
