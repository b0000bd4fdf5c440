"""Issue 12: C2SP tlog-tiles says "Entry bundles SHOULD be compressed at the HTTP layer" — `ledger serve`
sent them uncompressed whatever the client took. An entry bundle now travels gzipped where the client's
``Accept-Encoding`` takes gzip (RFC 9110 weights: ``q=0`` refuses it, ``*`` takes it), the bytes otherwise;
``Vary: Accept-Encoding`` on both, so a shared cache never hands one to a client that asked for the other."""

from __future__ import annotations

import gzip
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from ledger.api.app import create_app
from ledger.api.routes_log import accepts_gzip
from ledger.api.settings import ApiSettings
from ledger.service import Ledger
from ledger.tokens import create_token

BUNDLE = "/tile/entries/000.p/5"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, dict[str, str], bytes]]:
    led = Ledger.init(tmp_path_factory.mktemp("gz") / "home")
    for i in range(5):
        led.record("note", {"campaign": "c"}, {"text": f"#{i}" * 40}, key=led.cfg.admin_key)
    led.publish_checkpoint(wait=True)
    token, _ = create_token(led.engine, "r", "reader")
    raw = led.entry_bundle(0, 5)
    with TestClient(create_app(ApiSettings(home=str(led.home_path)), ledger=led)) as c:
        yield c, {"Authorization": f"Bearer {token}"}, raw
    led.close()


@pytest.mark.parametrize(
    ("accept", "gzipped"),
    [
        ("gzip", True),
        ("gzip, identity", True),  # what the spec tells clients to send
        ("GZIP", True),
        ("x-gzip", True),
        ("identity;q=1, gzip;q=0.5", True),
        ("*", True),
        ("br, *;q=0.1", True),
        ("identity", False),
        ("gzip;q=0", False),
        ("gzip;q=0.0, identity", False),
        ("*, gzip;q=0", False),  # named with q=0: refused, whatever * says
        ("gzip;q=abc", False),  # an unreadable weight takes nothing
        ("br", False),
        ("", False),
    ],
)
def test_fix171_entry_bundle_uncompressed_whatever_the_client_took(
    served: tuple[TestClient, dict[str, str], bytes], accept: str, gzipped: bool
) -> None:
    c, h, raw = served
    r = c.get(BUNDLE, headers={**h, "Accept-Encoding": accept})
    assert r.status_code == 200
    assert r.content == raw  # decoded by the client: the same bytes either way
    assert r.headers["vary"] == "Accept-Encoding"
    assert r.headers["content-type"] == "application/octet-stream"
    if gzipped:
        assert r.headers["content-encoding"] == "gzip"
        assert int(r.headers["content-length"]) == len(gzip.compress(raw, mtime=0)) < len(raw)
    else:
        assert "content-encoding" not in r.headers
        assert int(r.headers["content-length"]) == len(raw)


def test_fix171_no_accept_encoding_gets_the_bytes(served: tuple[TestClient, dict[str, str], bytes]) -> None:
    c, h, raw = served
    req = c.build_request("GET", BUNDLE, headers=h)
    del req.headers["accept-encoding"]
    r = c.send(req)
    assert r.status_code == 200 and "content-encoding" not in r.headers and r.content == raw


def test_fix171_the_same_bundle_gzips_to_the_same_bytes_and_head_says_so(
    served: tuple[TestClient, dict[str, str], bytes],
) -> None:
    c, h, _raw = served
    gz = {**h, "Accept-Encoding": "gzip"}
    first, second, head = c.get(BUNDLE, headers=gz), c.get(BUNDLE, headers=gz), c.head(BUNDLE, headers=gz)
    assert (
        first.headers["content-length"] == second.headers["content-length"] == head.headers["content-length"]
    )
    assert head.headers["content-encoding"] == "gzip" and head.content == b""


def test_fix171_hash_tiles_stay_as_they_are(served: tuple[TestClient, dict[str, str], bytes]) -> None:
    """Only entry bundles: hash tiles are SHA-256 output, which gzip does not shrink."""
    c, h, _raw = served
    r = c.get("/tile/0/000.p/5", headers={**h, "Accept-Encoding": "gzip"})
    assert r.status_code == 200 and "content-encoding" not in r.headers and len(r.content) == 5 * 32


def test_fix171_accepts_gzip_reads_weights_as_rfc_9110() -> None:
    assert accepts_gzip("deflate, gzip;q=1.0, *;q=0.5")
    assert accepts_gzip(" gzip ; q=0.001 ")
    assert not accepts_gzip(None)
    assert not accepts_gzip(",,;")
    assert not accepts_gzip("x-gzip;q=0, *")
