"""Audit fK (f1, f2, f4): what a reviewer page or a list leaves out must not read as "nothing there".

f2: a timeline page annotated its entries only from entries on the same page, so an operator's supersession
(a rejected acceptance, a review FAIL) logged 100 entries later was shown nowhere — page 1 said "nothing
rejected" of the superseded note, and page 2 too (the note is not on it). The page now reads what points at
its entries from the whole log (one refs read for the page's ids).
f1: ``/v1/subjects`` answered ``next: null`` with more subjects to come and refused ``?after=``; a misspelt
``?field=`` answered an empty list. f4: the home page listed the newest 200 subjects and no link on.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from ledger.api import views
from ledger.api.app import create_app
from ledger.api.settings import ApiSettings
from ledger.service import Ledger
from tests.api.conftest import BACKENDS, PgDatabases, require_postgres

FILLERS = 100  # a timeline page (views._PAGE): the referrers land on page 2


@pytest.fixture(scope="module", params=BACKENDS)
def site(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, pg_databases: PgDatabases
) -> Iterator[tuple[TestClient, Ledger, dict[str, str]]]:
    home = tmp_path_factory.mktemp("fix51") / "home"
    if request.param == "postgres":
        require_postgres()
        ledger = Ledger.init(home, database_url=pg_databases.new())
    else:
        ledger = Ledger.init(home)
    ledger.new_key("coll", ["collector"])
    ledger.new_key("op", ["operator"])
    ledger.new_key("rev", ["reviewer"])
    c = {"campaign": "c"}
    ids: dict[str, str] = {}
    for name in ("superseded", "not_accepted", "failed_review", "elsewhere", "same_page", "accepted"):
        ids[name] = ledger.record("note", c, {"text": name}, key="coll").entry_id
    ledger.record(
        "supersession", c, {"reason": "same-page-reason"}, refs=[("supersedes", ids["same_page"])], key="op"
    )
    for i in range(FILLERS):
        ledger.record("note", c, {"text": f"filler {i}"}, key="coll")
    ledger.record(
        "supersession",
        c,
        {"reason": "later-supersession"},
        refs=[("supersedes", ids["superseded"])],
        key="op",
    )
    ledger.record(
        "acceptance",
        c,
        {"decision": "rejected", "reason": "later-rejection"},
        refs=[("subject", ids["not_accepted"])],
        key="op",
    )
    ledger.record(
        "review",
        c,
        {"result": "FAIL", "summary": "later-review-fail"},
        refs=[("reviews", ids["failed_review"])],
        key="rev",
    )
    ledger.record(
        "acceptance",
        c,
        {"decision": "accepted", "reason": "later-acceptance"},
        refs=[("subject", ids["accepted"])],
        key="op",
    )
    # a supersession filed under another subject still withdraws this campaign's note
    ledger.record(
        "supersession",
        {"campaign": "other"},
        {"reason": "other-subject-supersession"},
        refs=[("supersedes", ids["elsewhere"])],
        key="op",
    )
    # subjects whose last entry is the same (one entry names two fields): the cursor must not skip either
    ledger.record("note", {"campaign": "tie", "model": "tie-model"}, {"text": "two fields"}, key="coll")
    ledger.record(
        "note", {"campaign": "odd", "gpu_serial": "sn-1"}, {"text": "a field off the list"}, key="coll"
    )
    app = create_app(ApiSettings(home=str(home), public_reads=True), ledger=ledger)
    with TestClient(app) as client:
        yield client, ledger, ids
    ledger.close()


def _rejected_table(body: str) -> str:
    return body.split("<h2>Rejected evidence</h2>", 1)[1].split("<h2>Timeline</h2>", 1)[0]


def _log_notes(body: str) -> str:
    """The timeline's table of the log's own notes (supersessions, rejecting acceptances, review FAILs)."""
    head = "The log's own notes against this page's entries</h2>"
    return body.split(head, 1)[1].split("<h2>Timeline</h2>", 1)[0]


def _row(body: str, entry_id: str) -> str:
    """The timeline row of one entry (its notes cell)."""
    timeline = body.split("<h2>Timeline</h2>", 1)[1]
    return timeline.split(f'<a href="/entries/{entry_id}">', 1)[1].split("</tr>", 1)[0]


def test_a_supersession_logged_on_a_later_timeline_page_marks_the_target_and_lists_it_rejected(
    site: tuple[TestClient, Ledger, dict[str, str]],
) -> None:
    client, _ledger, ids = site
    r = client.get("/subjects/campaign/c")
    assert r.status_code == 200
    rejected = _rejected_table(r.text)
    assert "nothing rejected" not in rejected
    for name, tag, reason in [
        ("superseded", "superseded", "later-supersession"),
        ("not_accepted", "not accepted", "later-rejection"),
        ("failed_review", "review FAIL", "later-review-fail"),
        ("elsewhere", "superseded", "other-subject-supersession"),
        ("same_page", "superseded", "same-page-reason"),
    ]:
        assert f"/entries/{ids[name]}" in rejected, name
        row = _row(r.text, ids[name])
        assert f'<span class="tag bad">{tag}</span> {reason}' in row, name
    # an accepted acceptance is a note, not a rejection
    assert '<span class="tag ok">accepted</span> later-acceptance' in _row(r.text, ids["accepted"])
    assert f'/entries/{ids["accepted"]}"' not in rejected
    # a referrer on the same page is read once: one note, not two
    assert _row(r.text, ids["same_page"]).count("same-page-reason") == 1


def test_the_later_page_does_not_repeat_rejections_of_entries_it_does_not_show(
    site: tuple[TestClient, Ledger, dict[str, str]],
) -> None:
    client, _ledger, ids = site
    first = client.get("/subjects/campaign/c")
    nxt = re.search(r'<a href="([^"]*)">older entries →</a>', first.text)
    assert nxt is not None
    second = client.get(html.unescape(nxt.group(1)))
    assert second.status_code == 200
    # the log's own notes are the page's: none of page 1's entries is listed again
    notes = _log_notes(second.text)
    assert "no note in the log marks an entry of this page rejected" in notes
    assert not any(f'/entries/{i}"' in notes for i in ids.values())
    # the verdict now is the whole campaign's: every page lists what it rejects (fix70)
    assert f'/entries/{ids["superseded"]}"' in _rejected_table(second.text)
    assert "nothing rejected" not in second.text


def _walk(client: TestClient, **params: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    after: str | None = None
    for _ in range(100):
        r = client.get("/v1/subjects", params={**params, **({"after": after} if after else {})})
        assert r.status_code == 200, r.text
        body = r.json()
        assert set(body) == {"items", "next"}
        items += body["items"]
        if body["next"] is None:
            return items
        after = body["next"]
    raise AssertionError("the subject list never ended")


def test_subjects_list_with_a_limit_answers_a_next_cursor_while_more_exist(
    site: tuple[TestClient, Ledger, dict[str, str]],
) -> None:
    client, _ledger, _ids = site
    r = client.get("/v1/subjects", params={"field": "campaign", "limit": 1})
    assert r.status_code == 200
    assert len(r.json()["items"]) == 1 and r.json()["next"] is not None
    whole = client.get("/v1/subjects", params={"field": "campaign"}).json()
    assert whole["next"] is None
    assert _walk(client, field="campaign", limit=1) == whole["items"]
    assert _walk(client, field="campaign", limit=2) == whole["items"]


def test_subjects_cursor_keeps_both_subjects_whose_last_entry_is_the_same(
    site: tuple[TestClient, Ledger, dict[str, str]],
) -> None:
    client, _ledger, _ids = site
    whole = client.get("/v1/subjects").json()["items"]
    pairs = [(s["field"], s["value"]) for s in whole]
    assert ("campaign", "tie") in pairs and ("model", "tie-model") in pairs
    assert len(set(pairs)) == len(pairs)
    assert _walk(client, limit=1) == whole


@pytest.mark.parametrize("field", ["BAD FIELD", "campain", "key", "Campaign"])
def test_subjects_list_refuses_a_field_neither_the_vocabulary_nor_the_log_knows(
    site: tuple[TestClient, Ledger, dict[str, str]], field: str
) -> None:
    client, _ledger, _ids = site
    r = client.get("/v1/subjects", params={"field": field})
    assert r.status_code == 422, r.text
    text = r.text
    assert "campaign" in text and "host" in text  # names the known fields


def test_subjects_list_answers_a_field_the_log_holds_though_off_the_vocabulary(
    site: tuple[TestClient, Ledger, dict[str, str]],
) -> None:
    client, _ledger, _ids = site
    r = client.get("/v1/subjects", params={"field": "gpu_serial"})
    assert r.status_code == 200
    assert [(s["field"], s["value"]) for s in r.json()["items"]] == [("gpu_serial", "sn-1")]
    # a vocabulary field nothing has used yet is an empty list, not an error
    assert client.get("/v1/subjects", params={"field": "deployment"}).json() == {"items": [], "next": None}


@pytest.mark.parametrize(
    "after", ["12", "x:campaign", "12:", ":campaign", "-1:campaign", "99999999999999999999:a"]
)
def test_subjects_list_refuses_a_cursor_it_did_not_answer(
    site: tuple[TestClient, Ledger, dict[str, str]], after: str
) -> None:
    client, _ledger, _ids = site
    r = client.get("/v1/subjects", params={"after": after})
    assert r.status_code == 422, r.text
    assert "LAST_SEQ:FIELD" in r.text


def test_home_page_links_to_older_subjects_past_its_page(
    site: tuple[TestClient, Ledger, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, ledger, _ids = site
    everything = [f"{s.field}={s.value}" for s in ledger.subjects(limit=1000)]
    monkeypatch.setattr(views, "_SUBJECTS_PAGE", 2)
    seen: list[str] = []
    r = client.get("/")
    for _ in range(50):
        assert r.status_code == 200
        seen += [html.unescape(m) for m in re.findall(r'">([^<>]+=[^<>]+)</a></td>', r.text)]
        nxt = re.search(r'<a href="([^"]*)">older subjects →</a>', r.text)
        if nxt is None:
            break
        r = client.get(html.unescape(nxt.group(1)))
    assert seen == everything
    monkeypatch.setattr(views, "_SUBJECTS_PAGE", 1000)
    assert "older subjects" not in client.get("/").text


def test_openapi_documents_422_as_the_problem_body_the_server_answers_not_http_validation_error(
    site: tuple[TestClient, Ledger, dict[str, str]],
) -> None:
    client, _ledger, _ids = site
    api = client.get("/openapi.json").json()
    assert "HTTPValidationError" not in api.get("components", {}).get("schemas", {})
    assert "ValidationError" not in api.get("components", {}).get("schemas", {})
    n = 0
    for path, ops in api["paths"].items():
        for method, op in ops.items():
            if not isinstance(op, dict) or "422" not in op.get("responses", {}):
                continue
            n += 1
            content = op["responses"]["422"]["content"]
            assert list(content) == ["application/problem+json"], (path, method)
            schema = content["application/problem+json"]["schema"]
            assert {"code", "hint", "error", "detail"} <= set(schema["required"]), (path, method)
            assert set(schema["properties"]["error"]["required"]) == {"code", "message", "hint"}
    assert n > 10
    # the published schema is the body a refused request gets
    body = client.get("/v1/subjects", params={"limit": 0}).json()
    schema = api["paths"]["/v1/subjects"]["get"]["responses"]["422"]["content"]["application/problem+json"]
    assert set(schema["schema"]["required"]) <= set(body) <= set(schema["schema"]["properties"])
    assert isinstance(body["detail"], str) and set(body["error"]) == {"code", "message", "hint"}


def test_the_api_and_the_cli_read_one_subject_field_vocabulary() -> None:
    from ledger.cli._common import SUBJECT_FIELDS as CLI_FIELDS
    from ledger.reads import SUBJECT_FIELDS

    assert CLI_FIELDS == SUBJECT_FIELDS
