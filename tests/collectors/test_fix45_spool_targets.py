"""The spool keeps the server each entry was collected for (audit 37 f2), sets aside what a server refuses for
good instead of blocking the host (f5), and a body-less 401/403 is the project's auth error (f6)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ledger.collectors.remote import (
    UNTARGETED,
    LedgerClient,
    RemoteRecorder,
    Spool,
    SpoolTarget,
    push_spool,
    spool_bytes,
)
from ledger.errors import AuthError, EntryNotFoundError, ForbiddenError, LedgerError
from ledger.hashing import Digest, hash_file
from ledger.log import entry_id_of
from ledger.service import Ledger
from ledger.signing import parse_envelope
from tests.api.conftest import free_port

A = "http://prod.test"
B = "http://staging.test"


class Server(LedgerClient):
    """A ledger server answered in process at ``url``: appends and artifacts go to ``led``."""

    def __init__(self, led: Ledger, url: str) -> None:
        super().__init__(url)
        self.led = led
        self.uploaded: list[str] = []
        self.appended: list[list[str]] = []  # the ids of each append call, as sent

    def checkpoint(self) -> dict[str, Any]:
        cp = self.led.served_checkpoint()
        return {
            **cp.to_json(),
            "log_public_key": self.led.log_public_key().b64,
            "log_vkey": self.led.verifier_key(),
        }

    def append(self, envelopes: Any) -> list[dict[str, Any]]:
        self.appended.append([entry_id_of(parse_envelope(e).canonical()) for e in envelopes])
        logged = self.led.append(list(envelopes))
        return [
            {
                "id": e.entry_id,
                "seq": e.seq,
                "duplicate": e.duplicate,
                "receipt": self.led.receipt(e).to_json(),
            }
            for e in logged
        ]

    def has_artifact(self, digest: Digest | str) -> bool:
        return self.led.has_artifact(digest)

    def upload_file(self, path: Path, digest: Digest, size: int, *, sent: Any = None) -> dict[str, Any]:
        with path.open("rb") as f:
            self.led.put_artifact(f, expected=digest)
        self.uploaded.append(str(digest))
        return {}

    def inclusion(self, entry_id: str) -> dict[str, Any] | None:
        try:
            return self.led.inclusion(entry_id)
        except EntryNotFoundError:
            return None


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[tuple[Ledger, Ledger, Ledger]]:
    """(server A's ledger, server B's ledger, a GPU host whose key gpu01 both trust as a collector)."""
    a, b = Ledger.init(tmp_path / "server-a"), Ledger.init(tmp_path / "server-b")
    host = Ledger.init(tmp_path / "gpu-host")
    host.new_key("gpu01", ["collector"])
    for srv in (a, b):
        srv.enrol_key("gpu01", host.signing_key("gpu01").public.b64, ["collector"])
    yield a, b, host
    for led in (host, a, b):
        led.close()


def _recorder(host: Ledger, client: LedgerClient, key: str = "gpu01") -> RemoteRecorder:
    rec = RemoteRecorder(host, key, server=client.server)
    rec.client.close()
    rec.client = client
    return rec


def _offline(host: Ledger, url: str, text: str, key: str = "gpu01") -> str:
    """An entry recorded for ``url`` while it cannot be reached: spooled for it."""
    rec = RemoteRecorder(host, key, server=url)
    rec.client.close()
    rec.client = LedgerClient(f"http://127.0.0.1:{free_port()}")  # nothing listens there
    rec.client.server = url.rstrip("/")
    try:
        entry_id = rec.record("note", {"campaign": "prod"}, {"text": text})
    finally:
        rec.close()
    assert rec.spooled == [entry_id]
    return entry_id


def _spooled(host: Ledger) -> list[str]:
    return [p.stem.split("-", 1)[1] for p in Spool(host.spool_dir).entry_files()]


def _on(led: Ledger, entry_id: str) -> bool:
    try:
        led.get(entry_id)
    except EntryNotFoundError:
        return False
    return True


# --- f2: the spool remembers the server each entry was collected for --------------------------------------


def test_entry_spooled_for_server_a_is_not_pushed_to_server_b_by_the_next_collect(
    hosts: tuple[Ledger, Ledger, Ledger],
) -> None:
    a, b, host = hosts
    prod = _offline(host, A, "prod, A down")
    target = Spool.entry_target(Spool(host.spool_dir).entry_files()[0])
    assert target is not None and target.server == A
    rec = _recorder(host, Server(b, B))
    staging = rec.record("note", {"campaign": "staging"}, {"text": "for B"})
    assert _on(b, staging) and not _on(b, prod)  # B got its own entry only
    assert _spooled(host) == [prod]  # A's left alone, and said so
    [notice] = rec.notices()
    assert f"collected for {A}" in notice and f"`ledger push --server {A}`" in notice
    assert B in notice
    report = push_spool(host, server=A, token=None, client=Server(a, A))
    assert (report.delivered, report.left()) == (1, False) and _on(a, prod) and not _spooled(host)


def test_push_to_server_b_refuses_entries_spooled_for_server_a_naming_a(
    hosts: tuple[Ledger, Ledger, Ledger],
) -> None:
    _, b, host = hosts
    prod = _offline(host, A, "prod, A down")
    size = b.size()
    client = Server(b, B)
    report = push_spool(host, server=B, token=None, client=client)
    assert report.delivered == 0 and client.appended == [] and b.size() == size
    assert report.elsewhere == {A: 1} and report.left()  # `ledger push` exit 1
    assert any(f"collected for {A}" in n and f"--server {A}" in n for n in report.notices())
    assert _spooled(host) == [prod]


def test_push_delivers_only_its_servers_entries_in_order_among_others(
    hosts: tuple[Ledger, Ledger, Ledger],
) -> None:
    a, _, host = hosts
    ids = [_offline(host, A, "a1"), _offline(host, B, "b1"), _offline(host, A + "/", "a2")]
    client = Server(a, A)
    report = push_spool(host, server=A + "/", token=None, client=client)  # a trailing slash is the same URL
    assert client.appended == [[ids[0], ids[2]]] and report.delivered == 2
    assert report.elsewhere == {B: 1} and _spooled(host) == [ids[1]]


def test_artifact_spooled_for_server_a_is_not_uploaded_to_server_b(
    hosts: tuple[Ledger, Ledger, Ledger], tmp_path: Path
) -> None:
    a, b, host = hosts
    log = tmp_path / "kernel.log"
    log.write_bytes(b"NVRM: Xid 79\n")
    spool = Spool(host.spool_dir)
    digest = hash_file(log).blake3
    spool.add_artifact(log, digest, target=SpoolTarget.of(A))
    to_b = Server(b, B)
    report = push_spool(host, server=B, token=None, client=to_b)
    assert to_b.uploaded == [] and report.artifacts == 0 and len(spool.artifact_files()) == 1
    assert report.other_artifacts == 1 and report.left()  # exit 1: something is left, for A
    # the same bytes spooled for B too: sent to each once, then gone
    spool.add_artifact(log, digest, target=SpoolTarget.of(B))
    assert spool.artifact_targets(spool.artifact_files()[0]) == sorted([A, B])
    push_spool(host, server=B, token=None, client=to_b)
    assert to_b.uploaded == [str(digest)] and spool.artifact_targets(spool.artifact_files()[0]) == [A]
    to_a = Server(a, A)
    push_spool(host, server=A, token=None, client=to_a)
    assert to_a.uploaded == [str(digest)] and not spool.artifact_files() and not spool.pending()


def test_spooled_entry_keeps_the_log_the_home_trusted_for_its_server(
    hosts: tuple[Ledger, Ledger, Ledger],
) -> None:
    """The target names the log (origin, vkey) when the home knows its key; a home that now trusts another
    key for that URL does not deliver the entry there (the server at that URL is another log)."""
    a, b, host = hosts
    _recorder(host, Server(a, A)).record("note", {"campaign": "c"}, {"text": "first use pins A's key"})
    prod = _offline(host, A, "prod")
    target = Spool.entry_target(Spool(host.spool_dir).entry_files()[0])
    assert target == SpoolTarget(A, a.origin, a.verifier_key())
    keys = host.home_path / "log-keys.json"
    doc = json.loads(keys.read_text())
    doc[A]["vkey"] = b.verifier_key()  # the home now trusts B's log at A's URL
    keys.write_text(json.dumps(doc))
    report = push_spool(host, server=A, token=None, client=Server(b, A))
    assert report.delivered == 0 and _spooled(host) == [prod] and report.left()
    assert not _on(b, prod)


def test_untargeted_spool_of_an_older_ledger_is_delivered_only_when_adopted(
    hosts: tuple[Ledger, Ledger, Ledger],
) -> None:
    """Fail closed: an entry without a target file (spooled before targets were recorded) goes to no server
    by itself — neither a collect's catching up nor a plain push sends it; `--adopt-untargeted` does."""
    _, b, host = hosts
    old = _offline(host, B, "older ledger")
    [entry] = Spool(host.spool_dir).entry_files()
    entry.with_suffix(".target").unlink()
    assert Spool.entry_target(entry) is None
    rec = _recorder(host, Server(b, B))
    new = rec.record("note", {"campaign": "c"}, {"text": "new"})
    assert _on(b, new) and not _on(b, old) and _spooled(host) == [old]
    assert any("--adopt-untargeted" in n for n in rec.notices())
    report = push_spool(host, server=B, token=None, client=Server(b, B))
    assert report.delivered == 0 and report.untargeted == 1 and report.left()
    assert spool_bytes(host, B) == 0 and spool_bytes(host, B, adopt=True) == entry.stat().st_size
    report = push_spool(host, server=B, token=None, client=Server(b, B), adopt_untargeted=True)
    assert report.delivered == 1 and _on(b, old) and not report.left()


@pytest.mark.parametrize(
    "garbage",
    [b"", b"not json", b'{"origin": null}', b'{"server": 7}', b'{"server": ""}', b"[]"],
    ids=["empty", "not-json", "server-dropped", "server-mistyped", "server-empty", "not-object"],
)
def test_unreadable_target_file_is_delivered_nowhere_and_named(
    hosts: tuple[Ledger, Ledger, Ledger], garbage: bytes
) -> None:
    _, b, host = hosts
    entry_id = _offline(host, B, "target file damaged")
    [entry] = Spool(host.spool_dir).entry_files()
    assert entry.name.endswith(f"-{entry_id}.json")
    entry.with_suffix(".target").write_bytes(garbage)
    client = Server(b, B)
    report = push_spool(host, server=B, token=None, client=client, adopt_untargeted=True)
    # delivered nowhere; out of the spool with its target (fix135: quarantined, kept), named, exit 1
    kept = Spool(host.spool_dir).bad_dir / "entries" / entry.name
    assert client.appended == [] and _spooled(host) == [] and report.left()
    assert kept.exists() and kept.with_suffix(".target").read_bytes() == garbage
    [q] = report.quarantined
    assert q["file"] == str(entry) and ".target" in q["problem"] and q["kept"] == str(kept)


def test_unreadable_artifact_targets_file_is_uploaded_nowhere(
    hosts: tuple[Ledger, Ledger, Ledger], tmp_path: Path
) -> None:
    _, b, host = hosts
    art = tmp_path / "x.bin"
    art.write_bytes(b"x")
    spool = Spool(host.spool_dir)
    kept = spool.add_artifact(art, hash_file(art).blake3, target=SpoolTarget.of(B))
    kept.with_name(kept.name + ".targets").write_text('{"servers": "http://staging.test"}')
    client = Server(b, B)
    report = push_spool(host, server=B, token=None, client=client, adopt_untargeted=True)
    out = spool.bad_dir / "artifacts" / kept.name  # fix135: quarantined with its targets file, kept
    assert client.uploaded == [] and spool.artifact_files() == [] and report.left()
    assert out.read_bytes() == b"x" and out.with_name(out.name + ".targets").exists()
    assert [q["file"] for q in report.quarantined] == [str(kept)]


def test_artifact_without_targets_file_waits_for_an_adopting_push(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    art = tmp_path / "x.bin"
    art.write_bytes(b"x")
    kept = spool.add_artifact(art, hash_file(art).blake3, target=None)
    assert spool.artifact_targets(kept) == [UNTARGETED]
    assert not spool.pending(B) and spool.pending(B, adopt=True)
    # spooled again for B: it waits for B and still for the adopting push
    spool.add_artifact(art, hash_file(art).blake3, target=SpoolTarget.of(B))
    assert sorted(spool.artifact_targets(kept)) == sorted([UNTARGETED, B])


# --- f5: an entry the server refuses for good is set aside, not a block -----------------------------------


def _revoked(a: Ledger, host: Ledger) -> None:
    """gpu01 revoked on the server; a new key gpu02 of the host enrolled instead."""
    a.revoke_key("gpu01", reason="host key rotated")
    host.new_key("gpu02", ["collector"])
    a.enrol_key("gpu02", host.signing_key("gpu02").public.b64, ["collector"])


def test_spooled_entry_of_a_revoked_key_does_not_block_the_hosts_later_collects(
    hosts: tuple[Ledger, Ledger, Ledger],
) -> None:
    a, _, host = hosts
    stuck = _offline(host, A, "signed by gpu01, spooled")
    _revoked(a, host)
    rec = _recorder(host, Server(a, A), key="gpu02")
    new = rec.record("note", {"campaign": "c2"}, {"text": "new key"})
    assert _on(a, new) and not rec.spooled  # recorded, not blocked by the stuck entry
    spool = Spool(host.spool_dir)
    assert not spool.entry_files()
    [kept] = spool.refused_files()  # kept, never deleted
    assert kept.name.endswith(f"-{stuck}.json") and kept.with_suffix(".target").exists()
    why = Spool.refusal(kept)
    assert why["code"] == "key-revoked" and why["server"] == A and "revoked" in why["message"]
    [refused] = rec.refused
    assert refused["id"] == stuck and refused["code"] == "key-revoked" and refused["file"] == str(kept)
    notices = rec.notices()
    assert any(stuck in n and str(kept) in n and "move it back" in n for n in notices)


def test_push_sets_aside_the_refused_entry_of_a_batch_and_delivers_the_rest(
    hosts: tuple[Ledger, Ledger, Ledger],
) -> None:
    a, _, host = hosts
    host.new_key("gpu02", ["collector"])
    a.enrol_key("gpu02", host.signing_key("gpu02").public.b64, ["collector"])
    first = _offline(host, A, "before", key="gpu02")
    stuck = _offline(host, A, "its key is revoked before it is delivered", key="gpu01")
    last = _offline(host, A, "after", key="gpu02")
    a.revoke_key("gpu01", reason="host key rotated")
    client = Server(a, A)
    report = push_spool(host, server=A, token=None, client=client)
    # the batch is refused as a whole; then each alone, in order: only the revoked key's is set aside
    assert client.appended == [[first, stuck, last], [first], [stuck], [last]]
    assert [r["id"] for r in report.refused] == [stuck] and report.refused[0]["code"] == "key-revoked"
    assert _on(a, first) and _on(a, last) and not _on(a, stuck)
    assert a.get(first).seq < a.get(last).seq
    assert (report.delivered, report.remaining, report.held_refused) == (2, 0, 1) and report.left()
    again = push_spool(host, server=A, token=None, client=Server(a, A))
    assert again.refused == [] and again.held_refused == 1 and again.left()  # exit 1 while it is there
    assert any("refused for good earlier" in n for n in again.notices())


class Refusing(Server):
    """A server whose append refuses with ``error``."""

    def __init__(self, led: Ledger, url: str, error: LedgerError) -> None:
        super().__init__(led, url)
        self.error = error

    def append(self, envelopes: Any) -> list[dict[str, Any]]:
        raise self.error


@pytest.mark.parametrize(
    "error",
    [
        AuthError("server refused: unknown bearer token"),
        ForbiddenError("server refused: a reader token"),
        LedgerError("server refused: a code this client does not know"),
    ],
    ids=["unauthenticated", "forbidden", "unknown-code"],
)
def test_refusal_of_the_token_or_an_unknown_code_keeps_the_entry_spooled(
    hosts: tuple[Ledger, Ledger, Ledger], error: LedgerError
) -> None:
    """Not the entry's fault (the token), or not known to be for good: raised, the entry stays."""
    a, _, host = hosts
    entry_id = _offline(host, A, "spooled")
    with pytest.raises(type(error)):
        push_spool(host, server=A, token=None, client=Refusing(a, A, error))
    assert _spooled(host) == [entry_id] and not Spool(host.spool_dir).refused_files()


# --- f6: a 401/403 without a body is the project's auth error ---------------------------------------------


@pytest.mark.parametrize(
    ("status", "error", "code"), [(401, AuthError, "unauthenticated"), (403, ForbiddenError, "forbidden")]
)
def test_wrong_token_on_head_artifact_is_unauthenticated_not_ledger_error(
    status: int, error: type[LedgerError], code: str
) -> None:
    client = LedgerClient(A, "not-a-token")
    client.http = httpx.Client(base_url=A, transport=httpx.MockTransport(lambda _r: httpx.Response(status)))
    with pytest.raises(error) as e:
        client.has_artifact("blake3:" + "0" * 64)
    assert e.value.code == code and str(status) in e.value.message and e.value.hint_text
    assert "--token" in e.value.hint_text or "writer token" in e.value.hint_text


def test_refusal_with_a_body_keeps_the_servers_own_error() -> None:
    """The neighbour: a 401 that says why is the server's error and message, as before."""
    body = {"error": {"code": "unauthenticated", "message": "unknown bearer token", "hint": "h"}}
    client = LedgerClient(A, "not-a-token")
    client.http = httpx.Client(
        base_url=A, transport=httpx.MockTransport(lambda _r: httpx.Response(401, json=body))
    )
    with pytest.raises(AuthError, match="server refused: unknown bearer token"):
        client.health()
