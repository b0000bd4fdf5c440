"""A server URL written another way is the same server for the spool and the home's log keys.

Regression (stop 41's note: "spool targets match URL as written"): an entry spooled while the collector was
pointed at `HTTP://Prod.test:80/` waited for a server of that spelling, and `ledger push --server
http://prod.test` left it behind ("collected for another server"); the home's log-keys file kept one key per
spelling, so a second spelling trusted whatever key the server named on first use. Both now compare
``server_key`` (RFC 3986 normalisation): scheme and host case, the default port, a trailing slash.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledger.collectors.remote import LogKeys, Spool, SpoolTarget, push_spool, server_key
from ledger.errors import ConfigError
from ledger.service import Ledger
from tests.collectors.test_fix45_spool_targets import A, B, Server, _offline, _spooled, hosts  # noqa: F401

SAME_AS_A = [
    "http://prod.test",
    "http://prod.test/",
    "HTTP://PROD.TEST",
    "http://Prod.Test:80",
    "http://prod.test:80/",
]


@pytest.mark.parametrize("spelled", SAME_AS_A)
def test_server_key_is_the_same_for_each_spelling_of_one_server(spelled: str) -> None:
    assert server_key(spelled) == "http://prod.test"


@pytest.mark.parametrize(
    "other",
    [
        "https://prod.test",  # another scheme
        "http://prod.test:8000",  # another port
        "http://prod.test/ledger",  # a path prefix: another server behind the same host
        "http://prod.test.example",
        "http://staging.test",
    ],
)
def test_server_key_keeps_servers_apart(other: str) -> None:
    assert server_key(other) != server_key("http://prod.test")


def test_server_key_of_https_drops_443_only() -> None:
    assert server_key("HTTPS://Prod.test:443/") == "https://prod.test"
    assert server_key("https://prod.test:80") == "https://prod.test:80"
    assert server_key("http://[::1]:80/") == "http://[::1]"
    assert server_key("not a url/") == "not a url"  # compared as written, less the slash


@pytest.mark.parametrize("spelled", SAME_AS_A[1:])
def test_entry_spooled_under_another_spelling_is_pushed_to_its_server(
    hosts: tuple[Ledger, Ledger, Ledger],  # noqa: F811
    spelled: str,
) -> None:
    a, _b, host = hosts
    prod = _offline(host, spelled, "prod, A down, spelled otherwise")
    target = Spool.entry_target(Spool(host.spool_dir).entry_files()[0])
    assert target is not None and target.server == A
    report = push_spool(host, server=A, token=None, client=Server(a, A))
    assert report.delivered == 1 and not report.left() and not _spooled(host)
    assert a.get(prod).entry_id == prod


def test_entry_spooled_for_another_port_is_not_pushed(hosts: tuple[Ledger, Ledger, Ledger]) -> None:  # noqa: F811
    a, _b, host = hosts
    prod = _offline(host, "http://prod.test:8000", "another port")
    report = push_spool(host, server=A, token=None, client=Server(a, A))
    assert report.delivered == 0 and report.left() and _spooled(host) == [prod]


def test_artifact_targets_written_otherwise_are_one_server(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    log = tmp_path / "kernel.log"
    log.write_bytes(b"x\n")
    from ledger.hashing import hash_file

    spool.add_artifact(log, hash_file(log).blake3, target=SpoolTarget.of("HTTP://Prod.test:80/"))
    spool.add_artifact(log, hash_file(log).blake3, target=SpoolTarget.of(A))
    assert spool.artifact_targets(spool.artifact_files()[0]) == [A]
    assert spool.pending(A) and spool.pending("http://PROD.test/") and not spool.pending(B)


def test_log_keys_of_one_server_written_two_ways_are_one_key(tmp_path: Path) -> None:
    keys = LogKeys(tmp_path)
    assert keys.record("http://Prod.test:80/", "vkey-1", "first use") == "vkey-1"
    assert keys.get(A) == "vkey-1"
    assert keys.record(A, "vkey-2", "first use") == "vkey-1"  # held already: the first key stands


def test_log_keys_file_with_two_spellings_and_two_keys_is_refused(tmp_path: Path) -> None:
    """An older ledger kept URLs as written: two spellings with different keys are an error naming the file,
    never the key read last."""
    path = tmp_path / "log-keys.json"
    path.write_text(json.dumps({"http://prod.test": {"vkey": "k1"}, "HTTP://prod.test/": {"vkey": "k2"}}))
    with pytest.raises(ConfigError, match="same server"):
        LogKeys(tmp_path).get(A)
    path.write_text(json.dumps({"http://prod.test": {"vkey": "k1", "at": "x"}, "HTTP://prod.test/": "k1"}))
    assert LogKeys(tmp_path).get(A) == "k1"  # the same key twice is one
