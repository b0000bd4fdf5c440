"""Regressions of audit 81 (fix100) on the reviewers' pages and the artifact download.

F1: a verdict entry logged under ``campaign=bad1`` whose payload said ``QUALIFIED`` for ``campaign=good`` (no
result) was shown on the home and host pages as bad1's recorded QUALIFIED with "verdict now" QUALIFIED —
the page derived the verdict now for the subject the payload named. A page now derives it from what the log
knows of the row (the row's field=value; for another field, the campaign the entry is logged under with
the row's field as a claim), and a recorded verdict whose result cannot be read (or says another word than
its payload) is shown as unreadable, never as a passing word. Ingest refuses such an entry now
(tests/test_fix100_verdict_subject_ingest.py); these entries stand for ones stored before that rule.

Minor: ``Range: bytes=N-`` with N past the end of an artifact answered 200 with the whole body when N had
more digits than the server reads; it answers 416.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from ledger.api.app import create_app
from ledger.api.settings import ApiSettings
from ledger.canonical import canonical_bytes
from ledger.entries import ArtifactRef, parse_time
from ledger.errors import ArtifactMissingError
from ledger.hashing import blake3_hex
from ledger.policy import evaluate, load_policy, record_verdict
from ledger.policy.fixtures import build_fixture_ledger
from ledger.policy.verdict import judge_again_at
from ledger.service import Ledger

REPO = Path(__file__).resolve().parents[2]
POLICY_DIR = REPO / "policies"
FIXTURES = POLICY_DIR / "fixtures"
RECORDED_AT = "2026-09-10T11:00:00Z"
GOOD = "vllm-embed"  # the fixture's QUALIFIED campaign


@dataclass
class Home:
    ledger: Ledger
    client: TestClient


@pytest.fixture
def qualified(tmp_path: Path) -> Iterator[Home]:
    ledger, _spec, _b = build_fixture_ledger(
        FIXTURES / "backend-qualification/qualified.toml", tmp_path / "home", POLICY_DIR, init=Ledger.init
    )
    app = create_app(ApiSettings(home=str(tmp_path / "home"), public_reads=True), ledger=ledger)
    with TestClient(app) as client:
        yield Home(ledger, client)
    ledger.close()


def _cells(html: str, label: str) -> list[str]:
    """The text of each cell of a table row whose first cell links ``label``."""
    row = re.search(r"<tr>\s*<td><a href=\"[^\"]*\">" + re.escape(label) + r"</a></td>(.*?)</tr>", html, re.S)
    assert row is not None, label
    cells = re.findall(r"<td>(.*?)</td>", row.group(1), re.S)
    return [" ".join(re.sub(r"<[^>]+>", " ", c).split()) for c in cells]


def _stored_before_the_rule(
    monkeypatch: pytest.MonkeyPatch, led: Ledger, subject: dict[str, str], payload: dict[str, Any], **kw: Any
) -> Any:
    """An entry as the log stored it before ingest refused a judged subject that is not its own."""
    import ledger.service as service

    # its own patches only (monkeypatch.undo() would undo every patch of the test)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(service, "check_ingest", lambda st: st)
        mp.setattr(service.Ledger, "_check_recorded_result", lambda self, st: None)
        return led.record("verdict", subject, payload, key="reviewer", collected_at=RECORDED_AT, **kw)


def _claim(size: int, judged: dict[str, str] | None, **more: Any) -> dict[str, Any]:
    p: dict[str, Any] = {
        "verdict": "QUALIFIED",
        "status": "passed",
        "policy": {"name": "backend-qualification"},
        "checkpoint": {"size": size},
        **more,
    }
    if judged is not None:
        p["subject"] = judged
    return p


def _bad1(led: Ledger) -> str:
    """A second campaign on the fixture's host, with nothing that qualifies it."""
    led.record(
        "note",
        {"campaign": "bad1", "host": "gpu-box-1"},
        {"text": "started"},
        key="collector",
        collected_at=RECORDED_AT,
    )
    now = evaluate(led, {"campaign": "bad1"}, load_policy("backend-qualification"))["verdict"]
    assert now != "QUALIFIED"
    return str(now)


def test_page_derives_verdict_now_for_the_row_not_the_campaign_a_claim_names(
    qualified: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    led = qualified.ledger
    bad_now = _bad1(led)
    _stored_before_the_rule(monkeypatch, led, {"campaign": "bad1"}, _claim(led.size(), {"campaign": GOOD}))
    home = qualified.client.get("/")
    assert home.status_code == 200
    was, now = _cells(home.text, "campaign=bad1")[2:]
    assert was.startswith("result unreadable recorded "), was  # no result: never shown as QUALIFIED
    assert now == bad_now, now  # the verdict now of campaign=bad1, not of the campaign the claim names
    row = home.text[home.text.index("campaign=bad1</a>") :]
    row = row[: row.index("</tr>")]
    assert "subject=campaign%3Dbad1" in row and f"campaign%3D{GOOD}" not in row
    assert "v-qualified" not in row
    # the host page's row of bad1, likewise
    host = qualified.client.get("/hosts/gpu-box-1")
    hrow = host.text[host.text.index(">bad1</a>") :]
    hrow = hrow[: hrow.index("</tr>")]
    assert "result unreadable" in hrow and bad_now in hrow and "v-qualified" not in hrow
    # the timeline says the same
    tl = qualified.client.get("/subjects/campaign/bad1")
    assert "result unreadable" in tl.text and f'id="verdict-word">{bad_now}<' in tl.text


def test_recorded_verdict_whose_result_artifact_is_missing_is_shown_unreadable(
    qualified: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    led = qualified.ledger
    digest = "blake3:" + "0" * 64
    # ingest refuses it now (a verdict whose result no reader can open is never stored): one stored before
    with pytest.raises(ArtifactMissingError, match="is not in the store"):
        led.record(
            "verdict",
            {"campaign": GOOD},
            _claim(led.size(), {"campaign": GOOD}, result_digest=digest),
            key="reviewer",
            collected_at=RECORDED_AT,
        )
    _stored_before_the_rule(
        monkeypatch, led, {"campaign": GOOD}, _claim(led.size(), {"campaign": GOOD}, result_digest=digest)
    )
    was, now = _cells(qualified.client.get("/").text, f"campaign={GOOD}")[2:]
    derived = evaluate(led, {"campaign": GOOD}, load_policy("backend-qualification"))["verdict"]
    assert was.startswith("result unreadable recorded ") and now == derived  # derived, not the claim


def test_recorded_verdict_whose_result_says_another_word_is_shown_unreadable(qualified: Home) -> None:
    led = qualified.ledger
    result = evaluate(led, {"campaign": GOOD}, load_policy("backend-qualification"))
    lie = {**result, "verdict": "NOT QUALIFIED — RUNTIME RELIABILITY"}
    data = canonical_bytes(lie)
    stored = led.store.put_stream(io.BytesIO(data))
    art = ArtifactRef(name="verdict-result.json", digest=str(stored.digest), size=stored.size)
    led.record(
        "verdict",
        {"campaign": GOOD},
        _claim(led.size(), {"campaign": GOOD}, result_digest=str(stored.digest)),
        key="reviewer",
        artifacts=[art],
        collected_at=RECORDED_AT,
    )
    was, _now = _cells(qualified.client.get("/").text, f"campaign={GOOD}")[2:]
    assert was.startswith("result unreadable recorded "), was


def test_honest_recorded_verdict_still_shows_its_word_and_the_verdict_now(qualified: Home) -> None:
    led = qualified.ledger
    result = evaluate(led, {"campaign": GOOD}, load_policy("backend-qualification"))
    recorded = record_verdict(
        led,
        result,
        key="reviewer",
        at=parse_time(RECORDED_AT),
        judge_at=judge_again_at(led, result, load_policy("backend-qualification")),
    )
    home = qualified.client.get("/").text
    assert _cells(home, f"campaign={GOOD}")[2:] == [f"QUALIFIED recorded {recorded.logged_at}", "QUALIFIED"]
    # a row of another field the verdict is logged under: its campaign, the row's field as a claim
    assert _cells(home, "model=Qwen3-Embedding-8B")[2:] == [
        f"QUALIFIED recorded {recorded.logged_at}",
        "QUALIFIED",
    ]
    assert "changed since recorded" not in home


def test_row_of_a_verdict_logged_under_no_campaign_cannot_be_derived(
    qualified: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    led = qualified.ledger
    _stored_before_the_rule(monkeypatch, led, {"host": "gpu-box-9"}, _claim(led.size(), {"campaign": GOOD}))
    home = qualified.client.get("/").text
    was, now = _cells(home, "host=gpu-box-9")[2:]
    assert was.startswith("result unreadable") and now == "cannot be derived here"


# --- Range past the end -----------------------------------------------------------------------------------


@pytest.mark.parametrize("first", ["10000", "9" * 19, "9" * 20, "1" * 5000])
def test_range_starting_past_the_end_answers_416_not_the_whole_body(qualified: Home, first: str) -> None:
    led = qualified.ledger
    result = evaluate(led, {"campaign": GOOD}, load_policy("backend-qualification"))
    e = record_verdict(
        led,
        result,
        key="reviewer",
        at=parse_time(RECORDED_AT),
        judge_at=judge_again_at(led, result, load_policy("backend-qualification")),
    )
    d = e.statement.payload["result_digest"]
    whole = qualified.client.get(f"/v1/artifacts/{d}")
    assert whole.status_code == 200 and blake3_hex(whole.content) == d.split(":")[1]
    r = qualified.client.get(f"/v1/artifacts/{d}", headers={"Range": f"bytes={first}-"})
    assert r.status_code == 416, (r.status_code, r.text[:200])


@pytest.mark.parametrize(
    ("header", "status", "length"),
    [
        ("bytes=0-", 206, None),
        ("bytes=1-" + "9" * 30, 206, -1),
        ("bytes=-" + "9" * 30, 206, None),
        ("bytes=0-1,2-3", 200, None),
    ],
)
def test_range_neighbours_still_answer(qualified: Home, header: str, status: int, length: int | None) -> None:
    led = qualified.ledger
    result = evaluate(led, {"campaign": GOOD}, load_policy("backend-qualification"))
    e = record_verdict(
        led,
        result,
        key="reviewer",
        at=parse_time(RECORDED_AT),
        judge_at=judge_again_at(led, result, load_policy("backend-qualification")),
    )
    d = e.statement.payload["result_digest"]
    whole = qualified.client.get(f"/v1/artifacts/{d}").content
    r = qualified.client.get(f"/v1/artifacts/{d}", headers={"Range": header})
    assert r.status_code == status, (header, r.status_code, r.text[:200])
    assert r.content == (whole[1:] if length == -1 else whole)
