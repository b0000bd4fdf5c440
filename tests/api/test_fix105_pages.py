"""Regressions of audit 84 (fix105), F1 on the pages: a recorded verdict whose result judged another subject
than the row's (an entry stored before ingest read results) is shown unreadable, never as its word."""

from __future__ import annotations

from typing import Any

import pytest

import ledger.service as service
from ledger.entries import parse_time
from ledger.policy import evaluate, load_policy, record_verdict
from ledger.policy.verdict import judge_again_at
from tests.api.test_fix100_pages import GOOD, RECORDED_AT, Home, _bad1, _cells, qualified  # noqa: F401


def test_home_page_row_of_a_verdict_carrying_another_campaigns_result_is_unreadable(
    qualified: Home,  # noqa: F811
) -> None:
    led = qualified.ledger
    result = evaluate(led, {"campaign": GOOD}, load_policy("backend-qualification"))
    honest = record_verdict(
        led,
        result,
        key="reviewer",
        at=parse_time(RECORDED_AT),
        judge_at=judge_again_at(led, result, load_policy("backend-qualification")),
    )
    bad_now = _bad1(led)
    payload: dict[str, Any] = {k: v for k, v in honest.statement.payload.items() if k != "subject"}
    with pytest.MonkeyPatch.context() as mp:  # stored before ingest read a verdict's result
        mp.setattr(service, "check_ingest", lambda st: st)
        mp.setattr(service.Ledger, "_check_recorded_result", lambda self, st: None)
        led.record(
            "verdict",
            {"campaign": "bad1", "host": "gpu-box-1"},
            payload,
            key="reviewer",
            artifacts=list(honest.statement.artifacts),
            collected_at=RECORDED_AT,
        )
    home = qualified.client.get("/").text
    was, now = _cells(home, "campaign=bad1")[2:]
    assert was.startswith("result unreadable recorded "), was
    assert now == bad_now
    row = home[home.index("campaign=bad1</a>") :]
    assert "v-qualified" not in row[: row.index("</tr>")]
    # the honest verdict's row still shows its word
    assert _cells(home, f"campaign={GOOD}")[2] == f"QUALIFIED recorded {honest.logged_at}"
