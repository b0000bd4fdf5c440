"""Issue 12 (the log's loose ends): ``GET /v1/keys`` answered one page — with more keys than a page, the rest
were not reachable (``next`` null, ``?after=`` and ``?limit=`` refused as unknown). It pages as
``/v1/subjects`` does: ``limit``, and ``next`` (the page's last key's ``enrolled_seq``) passed back as
``?after=``; a cursor or limit it cannot take, or a parameter it does not know, is a 422 problem document.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from ledger.api.app import create_app
from ledger.api.settings import ApiSettings
from ledger.service import Ledger

EXTRA = 7  # keys enrolled past the ones ``ledger init`` makes


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, Ledger]]:
    home: Path = tmp_path_factory.mktemp("fix61keys") / "home"
    ledger = Ledger.init(home)
    for i in range(EXTRA):
        ledger.new_key(f"coll{i}", ["collector"])
    ledger.record("note", {"campaign": "c"}, {"text": "between enrolments"}, key="coll0")
    ledger.revoke_key("coll3", reason="test")
    app = create_app(ApiSettings(home=str(home), public_reads=True), ledger=ledger)
    with TestClient(app) as client:
        yield client, ledger
    ledger.close()


def _walk(client: TestClient, limit: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    after: int | None = None
    for _ in range(100):
        r = client.get("/v1/keys", params={"limit": limit, **({"after": after} if after is not None else {})})
        assert r.status_code == 200, r.text
        body = r.json()
        assert tuple(body) == ("items", "next")
        assert len(body["items"]) <= limit
        items += body["items"]
        if body["next"] is None:
            return items
        assert isinstance(body["next"], int) and body["next"] == body["items"][-1]["enrolled_seq"]
        after = body["next"]
    raise AssertionError("the key list never ended")


def test_keys_past_one_page_were_unreachable(site: tuple[TestClient, Ledger]) -> None:
    client, ledger = site
    whole = client.get("/v1/keys").json()
    assert whole["next"] is None
    assert len(whole["items"]) == len(ledger.keyring().keys) >= EXTRA + 1
    first = client.get("/v1/keys", params={"limit": 2}).json()
    assert len(first["items"]) == 2 and first["next"] is not None  # more to come: said so
    for limit in (1, 2, 3, len(whole["items"]) - 1):
        assert _walk(client, limit) == whole["items"], limit


def test_keys_pages_keep_the_order_the_log_enrolled_them_in(site: tuple[TestClient, Ledger]) -> None:
    client, ledger = site
    items = _walk(client, 2)
    seqs = [k["enrolled_seq"] for k in items]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert {k["key_id"] for k in items} == set(ledger.keyring().keys)
    revoked = [k for k in items if k["name"] == "coll3"]
    assert len(revoked) == 1 and revoked[0]["revoked_at"] is not None  # a revoked key is listed, marked


def test_keys_page_exactly_as_long_as_the_list_is_the_last(site: tuple[TestClient, Ledger]) -> None:
    client, ledger = site
    n = len(ledger.keyring().keys)
    body = client.get("/v1/keys", params={"limit": n}).json()
    assert len(body["items"]) == n and body["next"] is None
    short = client.get("/v1/keys", params={"limit": n - 1}).json()
    assert len(short["items"]) == n - 1 and short["next"] is not None


def test_keys_cursor_past_every_key_answers_an_empty_last_page(site: tuple[TestClient, Ledger]) -> None:
    client, ledger = site
    last = max(r.enrolled_seq for r in ledger.keyring().keys.values())
    assert client.get("/v1/keys", params={"after": last}).json() == {"items": [], "next": None}
    # a cursor between keys (an entry that enrols none) is the keys enrolled after that entry
    between = client.get("/v1/keys", params={"after": 0}).json()["items"]
    assert between and all(k["enrolled_seq"] > 0 for k in between)


def _problem(r: Any) -> dict[str, Any]:
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json"), r.headers
    body: dict[str, Any] = r.json()
    assert body["status"] == 422 and body["code"] and body["hint"]
    return body


@pytest.mark.parametrize("after", ["x", "-1", "1.5", "3:campaign", "", str(2**63), "0x10"])
def test_keys_cursor_it_did_not_answer_is_a_problem_document(
    site: tuple[TestClient, Ledger], after: str
) -> None:
    client, _ledger = site
    body = _problem(client.get("/v1/keys", params={"after": after}))
    assert body["code"] == "bad-input" and "after" in body["detail"]


@pytest.mark.parametrize("limit", ["0", "-1", "5001", "many", ""])
def test_keys_limit_out_of_range_is_a_problem_document(site: tuple[TestClient, Ledger], limit: str) -> None:
    client, _ledger = site
    body = _problem(client.get("/v1/keys", params={"limit": limit}))
    assert "limit" in body["detail"]


@pytest.mark.parametrize("param", ["aftr", "cursor", "page", "Limit", "next"])
def test_keys_unknown_query_parameter_is_a_problem_document_not_ignored(
    site: tuple[TestClient, Ledger], param: str
) -> None:
    client, _ledger = site
    body = _problem(client.get("/v1/keys", params={param: "1"}))
    assert repr(param) in body["detail"] and "after" in body["detail"] and "limit" in body["detail"]
