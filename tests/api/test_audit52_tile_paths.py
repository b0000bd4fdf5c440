"""Audit 52: the C2SP read paths as an outside client (a CDN, a mirror) uses them.

- f1: ``tile/0/000.p/1%0A`` was served 200 and cached immutable — the path pattern's ``$`` matched before a
  final newline; every other non-canonical path is 422.
- f2: HEAD on ``/checkpoint``, ``/tile/…`` and ``/tile/entries/…`` was 405, where the same files exported by
  ``ledger tiles export`` answer HEAD from any static server: HEAD now answers GET's status and headers.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from ledger.api.app import create_app
from ledger.api.settings import ApiSettings
from ledger.service import Ledger
from ledger.tokens import create_token


@pytest.fixture
def client(tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, str]]]:
    led = Ledger.init(tmp_path / "home")
    for i in range(5):
        led.record("note", {"campaign": "c"}, {"text": f"#{i}"}, key=led.cfg.admin_key)
    led.publish_checkpoint(wait=True)
    token, _ = create_token(led.engine, "r", "reader")
    with TestClient(create_app(ApiSettings(home=str(led.home_path)), ledger=led)) as c:
        yield c, {"Authorization": f"Bearer {token}"}
    led.close()


@pytest.mark.parametrize(
    "path",
    [
        "/tile/0/000.p/5%0A",
        "/tile/0/000%0A",
        "/tile/entries/000.p/5%0A",
        "/tile/0/x001/000%0A",
        "/tile/0/000.p/5%0D%0A",
        "/tile/0/000.p/5%20",
    ],
)
def test_a_tile_path_with_a_trailing_newline_is_not_served_immutable(
    client: tuple[TestClient, dict[str, str]], path: str
) -> None:
    c, h = client
    assert c.get("/tile/0/000.p/5", headers=h).status_code == 200  # the neighbour, as the spec writes it
    r = c.get(path, headers=h)
    assert r.status_code == 422, (path, r.status_code, r.text)
    assert "immutable" not in r.headers["cache-control"]


def test_a_tile_path_with_a_leading_newline_matches_no_route(
    client: tuple[TestClient, dict[str, str]],
) -> None:
    c, h = client
    r = c.get("/tile/0/%0A000.p/5", headers=h)
    assert r.status_code == 404 and r.headers["cache-control"] == "no-store"


@pytest.mark.parametrize("path", ["/checkpoint", "/tile/0/000.p/5", "/tile/entries/000.p/5"])
def test_head_on_c2sp_paths_answers_what_get_does_without_a_body(
    client: tuple[TestClient, dict[str, str]], path: str
) -> None:
    c, h = client
    got = c.get(path, headers=h)
    head = c.head(path, headers=h)
    assert got.status_code == head.status_code == 200
    assert head.content == b""
    for name in ("content-type", "cache-control"):
        assert head.headers[name] == got.headers[name], name
    # the length GET sent (an entry bundle travels gzipped where the client takes gzip: fix171)
    assert head.headers["content-length"] == got.headers["content-length"]
    assert head.headers.get("content-encoding") == got.headers.get("content-encoding")
    assert int(head.headers["content-length"]) > 0


@pytest.mark.parametrize("path", ["/tile/0/001", "/tile/entries/009", "/tile/0/000.p/0", "/tile/64/000"])
def test_head_on_a_missing_or_malformed_tile_is_what_get_says(
    client: tuple[TestClient, dict[str, str]], path: str
) -> None:
    c, h = client
    got, head = c.get(path, headers=h), c.head(path, headers=h)
    assert head.status_code == got.status_code and got.status_code in (404, 422)
    assert head.headers["cache-control"] == got.headers["cache-control"] == "no-store"


def test_head_needs_the_same_token_as_get(client: tuple[TestClient, dict[str, str]]) -> None:
    c, _h = client
    assert c.head("/tile/0/000.p/5").status_code == c.get("/tile/0/000.p/5").status_code == 401
