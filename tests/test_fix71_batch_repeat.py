"""fix71 (audit 65 f3): a batch that names one new envelope twice is answered once per envelope, in order.

Before, ``POST /v1/entries/batch`` with ``[A, B, A]`` (A new) answered 2 items for 3 envelopes
(``Ledger._append_locked`` skipped the repeat without an answer), while the same batch re-sent answered 3:
``ledger push`` refuses an answer of another length. Now the repeat is answered as a duplicate of the entry
the batch just appended, with its receipt. (Needs the proposal in /tmp/fix71/other.md applied to
ledger/service.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from ledger.api.app import create_app
from ledger.api.settings import ApiSettings
from ledger.service import Ledger
from ledger.tokens import create_token


@pytest.fixture
def site(tmp_path: Any) -> Iterator[tuple[TestClient, Ledger, dict[str, str]]]:
    home = tmp_path / "home"
    ledger = Ledger.init(home)
    ledger.new_key("coll", ["collector"])
    token, _ = create_token(ledger.engine, "w", "writer")
    app = create_app(ApiSettings(home=str(home)), ledger=ledger)
    with TestClient(app) as client:
        yield client, ledger, {"Authorization": f"Bearer {token}"}
    ledger.close()


def _env(ledger: Ledger, job: str) -> dict[str, Any]:
    st = ledger.make_statement(
        "job",
        {"campaign": "c1", "host": "h1"},
        {"job_id": job, "state": "running", "started_at": "2026-01-01T00:00:00Z"},
        collected_at="2026-01-01T00:00:01Z",
    )
    return ledger.sign(st, "coll").to_json()


def test_a_batch_naming_a_new_envelope_twice_gets_fewer_answers_than_envelopes(
    site: tuple[TestClient, Ledger, dict[str, str]],
) -> None:
    client, ledger, hw = site
    a, b = _env(ledger, "j1"), _env(ledger, "j2")
    size = ledger.size()
    r = client.post("/v1/entries/batch", json={"envelopes": [a, b, a]}, headers=hw)
    assert r.status_code == 201, r.text
    items = r.json()["items"]
    assert len(items) == 3, items
    assert [i["duplicate"] for i in items] == [False, False, True]
    assert items[2]["id"] == items[0]["id"] and items[1]["id"] != items[0]["id"]
    assert items[2]["seq"] == items[0]["seq"]
    assert items[2]["receipt"] == items[0]["receipt"]
    assert ledger.size() == size + 2  # stored once
    again = client.post("/v1/entries/batch", json={"envelopes": [a, b, a]}, headers=hw)
    assert again.status_code == 200
    assert [i["duplicate"] for i in again.json()["items"]] == [True, True, True]
    assert [i["id"] for i in again.json()["items"]] == [i["id"] for i in items]


@pytest.mark.parametrize(
    "order", [[0, 0], [0, 1, 0, 1], [0, 0, 0], [1, 0, 0, 1]], ids=["AA", "ABAB", "AAA", "BAAB"]
)
def test_every_envelope_of_a_batch_is_answered_in_order(
    site: tuple[TestClient, Ledger, dict[str, str]], order: list[int]
) -> None:
    client, ledger, hw = site
    envs = [_env(ledger, "j1"), _env(ledger, "j2")]
    r = client.post("/v1/entries/batch", json={"envelopes": [envs[i] for i in order]}, headers=hw)
    assert r.status_code == 201, r.text
    items = r.json()["items"]
    assert len(items) == len(order)
    first: dict[int, str] = {}
    for i, item in zip(order, items, strict=True):
        assert item["duplicate"] is (i in first)
        first.setdefault(i, item["id"])
        assert item["id"] == first[i]


def test_the_service_answers_a_repeated_envelope_too(site: tuple[TestClient, Ledger, dict[str, str]]) -> None:
    _, ledger, _ = site
    a, b = _env(ledger, "j1"), _env(ledger, "j2")
    out = ledger.append([a, b, a])
    assert [e.duplicate for e in out] == [False, False, True]
    assert out[2].entry_id == out[0].entry_id and out[2].seq == out[0].seq
