"""The routing gate's "newest" is the verdict's: ``snapshot.newest_entries``.

Regression: the restoration checks took the probe observed last as the one with the latest observed time
*then the highest log position*, so of two /health probes observed in the same instant — a 503 and a 200,
the 200 logged after — only the 200 was newest and the restoration was allowed, while the verdict (audit
35) takes every probe tied for the last observed time as newest, each of which must hold. Both gates now
read one rule.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import tests.policy.conftest as policy_conftest
from ledger.entries import parse_time
from ledger.policy.loader import load_policy
from ledger.policy.routing import check_routing_change
from tests.test_routing_restore_and_faults import (
    HEALTH,
    HEALTH_503,
    MODEL,
    MODELS,
    READY,
    RESTORE_NOW,
    SEED000,
    _failed,
)

build = policy_conftest.build  # a ledger built from a policy fixture file

SAME_INSTANT = "2026-09-01T18:10:30Z"


def _restore_with(b: Any, host: str, probes: list[tuple[dict[str, Any], str]]) -> dict[str, Any]:
    """Record each (payload, observed time) of ``host`` in order, logged a second apart after the last."""
    subject = {"backend": "llama.cpp", "model": MODEL, "host": host}
    for p, observed in probes:
        st = b.ledger.make_statement("health.probe", subject, p, collected_at=observed)
        at = parse_time("2026-09-01T18:11:00Z") + timedelta(seconds=b.ledger.size())  # a later second each
        b.ledger.append([b.ledger.sign(st, "collector")], logged_at=at)
    return check_routing_change(
        b.ledger, load_policy("routing-change"), {"model": MODEL, "host": host}, action="restore",
        now=parse_time(RESTORE_NOW),
    )  # fmt: skip


def test_a_failed_health_probe_tied_with_a_pass_for_the_last_observed_time_refuses(build: Any) -> None:
    b = build(SEED000)
    early = "2026-09-01T18:10:00Z"
    r = _restore_with(
        b,
        "hiro-t",
        [(MODELS, early), (READY, early), (HEALTH_503, SAME_INSTANT), (HEALTH, SAME_INSTANT)],
    )
    assert r["allowed"] is False
    assert _failed(r) == {"restoration-health-newest"}, r["reasons"]


def test_the_neighbours_of_a_tie(build: Any) -> None:
    b = build(SEED000)
    early, later = "2026-09-01T18:10:00Z", "2026-09-01T18:10:31Z"
    # the pass observed after the failure (one second later): the failure is no newest probe
    after = _restore_with(
        b, "hiro-u", [(MODELS, early), (READY, early), (HEALTH_503, SAME_INSTANT), (HEALTH, later)]
    )
    assert after["allowed"] is True, after["reasons"]
    # two passes tied: allowed
    both = _restore_with(
        b, "hiro-v", [(MODELS, early), (READY, early), (HEALTH, SAME_INSTANT), (HEALTH, SAME_INSTANT)]
    )
    assert both["allowed"] is True, both["reasons"]
    # the failure logged last, tied with the pass: refused (it is newest both ways)
    last = _restore_with(
        b, "hiro-w", [(MODELS, early), (READY, early), (HEALTH, SAME_INSTANT), (HEALTH_503, SAME_INSTANT)]
    )
    assert _failed(last) == {"restoration-health-newest"}, last["reasons"]
