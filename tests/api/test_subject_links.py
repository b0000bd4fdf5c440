"""Every link the reviewer pages make to a subject's or a host's page opens it (audit F8): a Hugging Face
model id holds "/", and ``/subjects/{field}/{value}`` answered 404 for ``/subjects/model/org/name`` (and for
``org%2Fname``, which the server sees decoded), so no model subject could be opened from the index or an entry
page. Links are now built by one helper (``api.views.subject_href`` / ``host_href``) that the routes read back
(``path`` converters), for any value: slashes, spaces, non-ASCII, "%", "#", "?", "&", "+", "." and "..".
Host pages find a host as host names compare (``host_key``: case-insensitive, a trailing dot ignored)."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest
from fastapi.testclient import TestClient

from ledger.api import views
from ledger.api.app import create_app
from ledger.api.settings import ApiSettings
from ledger.api.views import host_href, subject_href, verdict_href
from ledger.service import Ledger
from tests.api.conftest import start_server

MODEL = "jeffcookio/Mistral-Small-3.2-24B-Instruct-2506-awq-sym"
VALUES = [
    MODEL,
    "Qwen/Qwen3-4B",
    "a b  c",
    "naïve-ünï/模型",
    "50%",
    "50%2F",
    "c#1",
    "what?x=1&y=2",
    "a+b",
    "a/../b",
    "../../ledger.toml",
    "trailing/",
    "/leading",
    "a//b",
    ".",
    "..",
    "...",
    ".hidden",
]
HOST = "GPU-Box.1.ÄÖ"
_HREF = re.compile(r'href="([^"]*)"')


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, Ledger]]:
    home = tmp_path_factory.mktemp("links") / "home"
    ledger = Ledger.init(home)
    ledger.new_key("coll", ["collector"])
    for i, v in enumerate(VALUES):
        ledger.record("note", {"campaign": f"c{i}", "model": v}, {"text": f"model {i}"}, key="coll")
        ledger.record("note", {"campaign": v}, {"text": f"campaign {i}"}, key="coll")
    ledger.record("note", {"campaign": "on-host", "host": HOST}, {"text": "on the host"}, key="coll")
    ledger.record(
        "note", {"campaign": "on-host-2", "host": "gpu-box.1.äö."}, {"text": "same host"}, key="coll"
    )
    app = create_app(ApiSettings(home=str(home), public_reads=True), ledger=ledger)
    with TestClient(app) as client:
        yield client, ledger
    ledger.close()


def _links(body: str, prefix: str) -> list[str]:
    return [html.unescape(h) for h in _HREF.findall(body) if html.unescape(h).startswith(prefix)]


def _heading(body: str) -> str:
    m = re.search(r"<h1>(.*?)</h1>", body, re.S)
    assert m, body[:500]
    return html.unescape(m.group(1))


def _get(client: TestClient, href: str) -> httpx.Response:
    """GET through the test client, which decodes the path twice (``request.url.path`` is already decoded,
    and it unquotes it again): an href with an escaped "%" is sent to a real server instead (``served``)."""
    assert "%25" not in href, f"{href}: check it against the real server (test_…_on_a_real_server)"
    return client.get(href)


@pytest.fixture(scope="module")
def served(site: tuple[TestClient, Ledger]) -> Iterator[str]:
    _, ledger = site
    server = start_server(ledger.home.path, "--public-reads")
    yield server.url
    server.stop()


@pytest.mark.parametrize("value", VALUES)
def test_a_subject_href_round_trips_the_value(site: tuple[TestClient, Ledger], value: str) -> None:
    client, _ = site
    for field in ("model", "campaign"):
        href = subject_href(field, value)
        if "%25" in href:
            continue  # test_every_href_round_trips_on_a_real_server
        r = client.get(href)
        assert r.status_code == 200, (value, r.status_code, r.text[:300])
        assert _heading(r.text) == f"{field}={value}"


def test_every_href_round_trips_on_a_real_server(served: str) -> None:
    with httpx.Client(base_url=served, timeout=30) as http:
        for value in VALUES:
            for field in ("model", "campaign"):
                r = http.get(subject_href(field, value))
                assert r.status_code == 200, (value, r.status_code, r.text[:300])
                assert _heading(r.text) == f"{field}={value}"
        index = http.get("/")
        for href in _links(index.text, "/subjects/") + _links(index.text, "/hosts/"):
            assert http.get(href).status_code == 200, href
        assert http.get(f"/subjects/model/{MODEL}").status_code == 200
        assert http.get("/hosts/gpu-box.1.%C3%A4%C3%B6").status_code == 200


def test_the_model_page_the_index_links_opens_with_a_literal_slash_or_an_escaped_one(
    site: tuple[TestClient, Ledger],
) -> None:
    client, _ = site
    for path in (f"/subjects/model/{MODEL}", "/subjects/model/" + MODEL.replace("/", "%2F")):
        r = client.get(path)
        assert r.status_code == 200, path
        assert _heading(r.text) == f"model={MODEL}"


def test_every_subject_and_host_link_of_the_index_opens_its_page(site: tuple[TestClient, Ledger]) -> None:
    client, _ = site
    index = client.get("/")
    assert index.status_code == 200
    links = _links(index.text, "/subjects/") + _links(index.text, "/hosts/")
    assert subject_href("model", MODEL) in links and host_href(HOST) in links
    opened = set()
    for href in links:
        if "%25" in href:
            continue  # test_every_href_round_trips_on_a_real_server
        r = _get(client, href)
        assert r.status_code == 200, (href, r.status_code)
        opened.add(_heading(r.text))
    for v in VALUES:
        if "%" not in v:
            assert f"model={v}" in opened and f"campaign={v}" in opened, v


def test_every_subject_link_of_an_entry_page_opens_its_page(site: tuple[TestClient, Ledger]) -> None:
    client, ledger = site
    for v in VALUES:
        [entry] = ledger.query(subject={"model": v}, limit=1)
        page = client.get(f"/entries/{entry.entry_id}")
        assert page.status_code == 200
        hrefs = _links(page.text, "/subjects/")
        assert subject_href("model", v) in hrefs
        for href in (h for h in hrefs if "%25" not in h):
            assert _get(client, href).status_code == 200, href


def test_the_address_of_a_value_is_one_escaped_path_segment_or_a_query() -> None:
    assert (
        subject_href("model", MODEL)
        == "/subjects/model/jeffcookio%2FMistral-Small-3.2-24B-Instruct-2506-awq-sym"
    )
    assert subject_href("campaign", "c#1?x") == "/subjects/campaign/c%231%3Fx"
    assert subject_href("campaign", "..") == "/subjects/campaign/?value=.."
    assert subject_href("campaign", "a b", after=7) == "/subjects/campaign/a%20b?after=7"
    assert host_href(".") == "/hosts/?host=."
    for v in VALUES:
        parts = urlsplit(subject_href("model", v))
        assert parts.path.count("/") == 3 and not parts.fragment, v


def test_an_address_naming_the_value_twice_or_not_at_all_is_bad_input(
    site: tuple[TestClient, Ledger],
) -> None:
    client, _ = site
    assert client.get("/subjects/campaign/c0?value=c0").status_code == 422
    assert client.get("/subjects/campaign/").status_code == 422
    assert client.get("/hosts/?host=x&x=1").status_code in (404, 422)
    assert client.get("/subjects/campaign/no-such-campaign").status_code == 404


def test_the_next_page_link_keeps_a_dot_value(
    site: tuple[TestClient, Ledger], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, ledger = site
    for i in range(3):
        ledger.record("note", {"campaign": ".."}, {"text": f"more {i}"}, key="coll")
    monkeypatch.setattr(views, "_PAGE", 2)
    first = client.get(subject_href("campaign", ".."))
    [nxt] = [h for h in _links(first.text, "/subjects/") if "after=" in h]
    assert nxt.startswith("/subjects/campaign/?value=..&after=")
    second = client.get(nxt)
    assert second.status_code == 200 and _heading(second.text) == "campaign=.."
    seqs = lambda body: set(re.findall(r'href="/entries/[0-9a-f]+">(\d+)</a>', body))  # noqa: E731
    assert seqs(first.text) and seqs(second.text) and not seqs(first.text) & seqs(second.text)


@pytest.mark.parametrize(
    "spelling", [HOST, "gpu-box.1.äö", "GPU-BOX.1.ÄÖ", "gpu-box.1.äö.", "GPU-Box.1.%C3%84%C3%96"]
)
def test_a_host_page_finds_the_host_as_host_names_compare(
    site: tuple[TestClient, Ledger], spelling: str
) -> None:
    client, _ = site
    r = client.get(host_href(spelling) if "%" not in spelling else "/hosts/" + spelling)
    assert r.status_code == 200, (spelling, r.status_code)
    campaigns = _links(r.text, "/subjects/campaign/")
    assert (
        subject_href("campaign", "on-host") in campaigns
        and subject_href("campaign", "on-host-2") in campaigns
    )
    every = _links(r.text, "/subjects/host/")
    assert set(every) == {subject_href("host", HOST), subject_href("host", "gpu-box.1.äö.")}
    for href in every:
        assert client.get(href).status_code == 200


def test_another_host_is_still_not_found(site: tuple[TestClient, Ledger]) -> None:
    client, _ = site
    assert client.get(host_href("gpu-box-2")).status_code == 404
    assert client.get(host_href("..")).status_code == 404


def test_the_verdict_link_round_trips_the_subject() -> None:
    href = verdict_href({"campaign": "a&b=c#d"}, "backend-qualification")
    assert href == "/verdict?subject=campaign%3Da%26b%3Dc%23d&policy=backend-qualification"
