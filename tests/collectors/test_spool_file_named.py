"""Regressions of audit 92 (fix127), f2 and f3: a spool file that is not the entry its name says.

f2: ``entries/000000000004-<id>.json`` holding the bytes of the 2nd spooled envelope was sent, answered as a
duplicate (the 2nd entry's id, compared with the bytes, never with the name), counted "already there" and
deleted: the entry its name gave was on the server 0 times and in the spool 0 times, nothing named.
f3: the same file cut to 100 bytes made ``ledger push`` die with a raw ``JSONDecodeError`` traceback,
delivering none of the intact entries, every time.

Each spooled file is now checked against the name it was written under (``Spool.read_entry``: its bytes are
a signed envelope whose entry id, ``entry_id_of`` its canonical form, is the one the name gives) while the
spool is sorted and again as it is sent; one that fails is moved by the push to the spool's ``bad/entries/``
beside why (fix135, ``Spool.quarantine``: kept, never sent, no longer named by every later push), and the
rest delivered; a file leaves the spool only on a receipt for the id its own name gives.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import ledger.collectors.remote as remote
from ledger.collectors.remote import (
    LedgerClient,
    RemoteRecorder,
    Spool,
    SpoolTarget,
    push_spool,
    restore_refused,
    spool_bytes,
)
from ledger.errors import ConfigError, EntryNotFoundError, IntegrityError, SchemaError
from ledger.hashing import Digest
from ledger.log import entry_id_of
from ledger.service import Ledger
from ledger.signing import parse_envelope
from tests.api.conftest import free_port

A = "http://prod.test"


class Server(LedgerClient):
    """A ledger server answered in process at ``url``: appends go to ``led``."""

    def __init__(self, led: Ledger, url: str) -> None:
        super().__init__(url)
        self.led = led
        self.appended: list[str] = []  # the ids of every envelope sent, in order

    def checkpoint(self) -> dict[str, Any]:
        cp = self.led.served_checkpoint()
        return {
            **cp.to_json(),
            "log_public_key": self.led.log_public_key().b64,
            "log_vkey": self.led.verifier_key(),
        }

    def append(self, envelopes: Any) -> list[dict[str, Any]]:
        self.appended += [entry_id_of(parse_envelope(e).canonical()) for e in envelopes]
        return [
            {
                "id": e.entry_id,
                "seq": e.seq,
                "duplicate": e.duplicate,
                "receipt": self.led.receipt(e).to_json(),
            }
            for e in self.led.append(list(envelopes))
        ]

    def has_artifact(self, digest: Digest | str) -> bool:
        return True

    def inclusion(self, entry_id: str) -> dict[str, Any] | None:
        try:
            return self.led.inclusion(entry_id)
        except EntryNotFoundError:
            return None


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Ledger, Ledger]]:
    """(the server's ledger, a GPU host whose key gpu01 it trusts as a collector)."""
    srv, host = Ledger.init(tmp_path / "server"), Ledger.init(tmp_path / "gpu-host")
    host.new_key("gpu01", ["collector"])
    srv.enrol_key("gpu01", host.signing_key("gpu01").public.b64, ["collector"])
    yield srv, host
    host.close()
    srv.close()


def _offline(host: Ledger, n: int) -> list[str]:
    """``n`` entries recorded for ``A`` while it cannot be reached: spooled for it, in order."""
    rec = RemoteRecorder(host, "gpu01", server=A)
    rec.client.close()
    rec.client = LedgerClient(f"http://127.0.0.1:{free_port()}")  # nothing listens there
    rec.client.server = A
    try:
        ids = [rec.record("note", {"campaign": "prod"}, {"text": f"#{i}"}) for i in range(n)]
    finally:
        rec.close()
    assert rec.spooled == ids
    return ids


def _on(led: Ledger, entry_id: str) -> bool:
    try:
        led.get(entry_id)
    except EntryNotFoundError:
        return False
    return True


def _files(host: Ledger) -> list[Path]:
    return Spool(host.spool_dir).entry_files()


def _bad(host: Ledger, name: str, folder: str = "entries") -> Path:
    """Where a push quarantines the spool file ``folder/name`` (fix135)."""
    return Spool(host.spool_dir).bad_dir / folder / name


def _quarantined(report: remote.PushReport, path: Path) -> str:
    """The problem the push quarantined ``path`` for (it names the file, and where it went)."""
    [problem] = [q["problem"] for q in report.quarantined if q["file"] == str(path)]
    assert str(path) in problem
    return problem


def _push(srv: Ledger, host: Ledger) -> tuple[remote.PushReport, Server]:
    server = Server(srv, A)
    return push_spool(host, server=A, token=None, client=server), server


# --- f2: a file holding another spooled entry's bytes ------------------------------------------------


def test_spool_file_holding_another_entrys_bytes_is_kept_named_not_counted_already_there(
    pair: tuple[Ledger, Ledger],
) -> None:
    srv, host = pair
    ids = _offline(host, 4)
    f2, f4 = _files(host)[1], _files(host)[3]
    b2 = f2.read_bytes()
    f4.write_bytes(b2)  # the 4th file now holds the 2nd's envelope
    report, server = _push(srv, host)
    assert (report.delivered, report.duplicates) == (3, 0)  # not "1 already there"
    assert server.appended == ids[:3]  # the copy of the 2nd was never sent
    assert not _on(srv, ids[3])
    kept = _bad(host, f4.name)
    assert _files(host) == [] and kept.read_bytes() == b2  # kept as it is, out of the spool ...
    assert kept.with_suffix(".target").exists() and not (Spool(host.spool_dir).refused_dir).exists()
    named = _quarantined(report, f4)
    assert f"it holds the entry {ids[1]}" in named and "kept, not sent" in named and report.unreadable == []
    assert report.left() and f"not delivered, quarantined: {f4}" in " ".join(report.notices())


def test_spool_files_swapped_with_each_others_bytes_are_both_kept_and_named(
    pair: tuple[Ledger, Ledger],
) -> None:
    srv, host = pair
    ids = _offline(host, 4)
    f1, f2, f3, f4 = _files(host)
    b2, b4 = f2.read_bytes(), f4.read_bytes()
    f2.write_bytes(b4)
    f4.write_bytes(b2)
    report, server = _push(srv, host)
    assert server.appended == [ids[0], ids[2]] and report.delivered == 2
    assert _files(host) == [] and [_bad(host, f.name).read_bytes() for f in (f2, f4)] == [b4, b2]
    assert [q["file"] for q in report.quarantined] == [str(f2), str(f4)]
    assert not (f1.exists() or f3.exists())


def test_spool_file_renamed_to_another_entrys_id_is_kept_and_named(pair: tuple[Ledger, Ledger]) -> None:
    srv, host = pair
    ids = _offline(host, 2)
    _f1, f2 = _files(host)
    moved = f2.with_name(f"000000000002-{'0' * 64}.json")
    os.replace(f2, moved)
    os.replace(f2.with_suffix(".target"), moved.with_suffix(".target"))
    report, server = _push(srv, host)
    assert server.appended == [ids[0]] and _files(host) == [] and _bad(host, moved.name).exists()
    assert f"it holds the entry {ids[1]}" in _quarantined(report, moved)


def test_spool_file_renamed_out_of_the_spool_name_form_is_kept_and_named(pair: tuple[Ledger, Ledger]) -> None:
    srv, host = pair
    ids = _offline(host, 2)
    f2 = _files(host)[1]
    moved = f2.with_name("note.json")
    os.replace(f2, moved)
    report, server = _push(srv, host)
    assert server.appended == [ids[0]] and _files(host) == [] and _bad(host, moved.name).exists()
    assert "<order>-<entry id>.json" in _quarantined(report, moved)


def test_spool_file_renamed_back_to_its_own_name_is_delivered(pair: tuple[Ledger, Ledger]) -> None:
    srv, host = pair
    ids = _offline(host, 1)
    [f1] = _files(host)
    os.replace(f1, f1.with_name("note.json"))
    first, _ = _push(srv, host)
    assert first.delivered == 0 and len(first.quarantined) == 1 and first.left()
    os.replace(_bad(host, "note.json"), f1)  # moved back from the quarantine under its own name
    again, server = _push(srv, host)
    assert server.appended == ids and again.delivered == 1 and not again.left() and _on(srv, ids[0])


# --- f3: a file that is no envelope -------------------------------------------------------------------

_DAMAGE: dict[str, Callable[[bytes], bytes]] = {
    "truncated": lambda b: b[:100],
    "empty": lambda b: b"",
    "not JSON": lambda b: b"\x00\xffnot json at all",
    "JSON, not an object": lambda b: b"[1, 2]",
    "JSON object, not an envelope": lambda b: b'{"a": 1}',
    "field dropped": lambda b: _doc(b, lambda d: d.pop("signatures")),
    "field renamed": lambda b: _doc(b, lambda d: d.__setitem__("payload_type", d.pop("payloadType"))),
    "field mistyped": lambda b: _doc(b, lambda d: d.__setitem__("signatures", d["signatures"][0])),
    "payload changed": lambda b: _doc(b, lambda d: d.__setitem__("payload", d["payload"][:-8] + "AAAAAAA=")),
}

_SAID = {
    "truncated": "not a signed envelope (malformed JSON",
    "empty": "(empty)",
    "not JSON": "not a signed envelope (malformed JSON",
    "JSON, not an object": "not a signed envelope (envelope must be a JSON object)",
    "JSON object, not an envelope": "not a signed envelope (unknown envelope fields",
    "field dropped": "not a signed envelope (envelope must carry exactly one signature)",
    "field renamed": "not a signed envelope (unknown envelope fields: ['payload_type'])",
    "field mistyped": "not a signed envelope (envelope must carry exactly one signature)",
    "payload changed": "(it holds the entry ",
}


def _doc(data: bytes, change: Callable[[dict[str, Any]], object]) -> bytes:
    doc = json.loads(data)
    change(doc)
    return json.dumps(doc).encode()


@pytest.mark.parametrize("damage", sorted(_DAMAGE))
def test_spool_file_that_is_no_envelope_is_named_and_the_intact_entries_delivered(
    pair: tuple[Ledger, Ledger], damage: str
) -> None:
    srv, host = pair
    ids = _offline(host, 4)
    f4 = _files(host)[3]
    bad = _DAMAGE[damage](f4.read_bytes())
    f4.write_bytes(bad)
    report, server = _push(srv, host)  # no traceback: a report
    assert server.appended == ids[:3] and report.delivered == 3 and not _on(srv, ids[3])
    kept = _bad(host, f4.name)
    assert _files(host) == [] and kept.read_bytes() == bad and kept.with_suffix(".target").exists()
    named = _quarantined(report, f4)
    assert named.startswith(f"{f4}: not the spooled entry its name says") and _SAID[damage] in named, named
    assert report.left() and report.unreadable == []
    again, server = _push(srv, host)  # later pushes deliver nothing twice, and are not held back by it
    assert server.appended == [] and again.unreadable == again.quarantined == [] and not again.left()
    assert again.held_bad == 1 and "quarantined by earlier pushes" in " ".join(again.notices())


def test_spool_file_that_cannot_be_read_is_named(pair: tuple[Ledger, Ledger]) -> None:
    srv, host = pair
    ids = _offline(host, 2)
    f2 = _files(host)[1]
    f2.unlink()
    f2.mkdir()  # a .json name read_bytes cannot read
    report, server = _push(srv, host)
    assert server.appended == ids[:1] and not os.path.lexists(f2) and _bad(host, f2.name).is_dir()
    named = _quarantined(report, f2)
    assert "(unreadable (a folder, not a regular file" in named


def test_spool_file_with_its_keys_reordered_is_the_same_entry_and_delivered(
    pair: tuple[Ledger, Ledger],
) -> None:
    srv, host = pair
    ids = _offline(host, 1)
    [f1] = _files(host)
    doc = json.loads(f1.read_bytes())
    f1.write_bytes(json.dumps(dict(reversed(list(doc.items()))), indent=2).encode())  # not canonical
    report, server = _push(srv, host)
    assert server.appended == ids and report.delivered == 1 and not report.left() and _on(srv, ids[0])


def test_spooled_duplicate_of_an_entry_on_the_server_under_its_right_name_is_already_there(
    pair: tuple[Ledger, Ledger],
) -> None:
    srv, host = pair
    ids = _offline(host, 2)
    kept = {p.name: p.read_bytes() for p in _files(host)}
    first, _ = _push(srv, host)
    assert first.delivered == 2 and _files(host) == []
    spool = Spool(host.spool_dir)
    for name, data in kept.items():  # a push that died after the server logged them, before the spool forgot
        spool.add_entry(data, name.split("-", 1)[1].removesuffix(".json"), target=SpoolTarget.of(A))
    again, server = _push(srv, host)
    assert server.appended == ids and (again.delivered, again.duplicates) == (0, 2) and not again.left()
    assert _files(host) == [] and again.unreadable == []


def test_server_answering_another_entry_for_a_spooled_file_keeps_the_file(
    pair: tuple[Ledger, Ledger],
) -> None:
    srv, host = pair
    ids = _offline(host, 1)

    class Lying(Server):
        def append(self, envelopes: Any) -> list[dict[str, Any]]:
            return [{**got, "id": "f" * 64, "duplicate": True} for got in super().append(envelopes)]

    with pytest.raises(IntegrityError, match=rf"server logged {'f' * 64} for spooled"):
        push_spool(host, server=A, token=None, client=Lying(srv, A))
    assert [p.name.split("-", 1)[1] for p in _files(host)] == [f"{ids[0]}.json"]


# --- the spool's other readers -------------------------------------------------------------------------


def test_file_changed_after_the_spool_was_sorted_is_not_sent(pair: tuple[Ledger, Ledger]) -> None:
    _srv, host = pair
    _offline(host, 2)
    f1, f2 = _files(host)
    f2.write_bytes(f1.read_bytes())
    sent = list(remote._batches([f1, f2]))  # f2 was sorted as good; as it is read to be sent it is not
    assert [[one.path for one in batch] for batch in sent] == [[f1]]


def test_online_collect_is_not_held_back_by_a_spool_file_that_is_not_its_entry(
    pair: tuple[Ledger, Ledger],
) -> None:
    srv, host = pair
    _offline(host, 1)
    [f1] = _files(host)
    f1.write_bytes(b"torn")
    spool = Spool(host.spool_dir)
    assert not spool.pending(A) and spool.pending()  # waits for no server, yet is in the spool
    rec = RemoteRecorder(host, "gpu01", server=A)
    rec.client.close()
    rec.client = Server(srv, A)
    try:
        entry_id = rec.record("note", {"campaign": "prod"}, {"text": "online"})
        assert rec.spooled == [] and _on(srv, entry_id)
        said = " ".join(rec.notices())
    finally:
        rec.close()
    assert f"not delivered: {f1}" in said and _files(host) == [f1]


def test_spool_bytes_counts_no_file_that_is_not_its_entry(pair: tuple[Ledger, Ledger]) -> None:
    srv, host = pair
    _offline(host, 3)
    f1, f2, f3 = _files(host)
    f3.write_bytes(f1.read_bytes())
    total = spool_bytes(host, A)
    assert total == f1.stat().st_size + f2.stat().st_size
    done: list[int] = []
    push_spool(host, server=A, token=None, client=Server(srv, A), progress=done.append)
    assert sum(done) == total


def test_add_entry_after_a_file_renamed_out_of_the_name_form_takes_the_next_order(
    pair: tuple[Ledger, Ledger],
) -> None:
    _srv, host = pair
    _offline(host, 2)
    f2 = _files(host)[1]
    os.replace(f2, f2.with_name("zz-renamed.json"))  # sorts last; its name gives no order
    [new] = _offline(host, 1)
    assert [p.name for p in _files(host)][:2] == [_files(host)[0].name, f"000000000002-{new}.json"]


def test_retry_refused_leaves_a_refused_file_that_is_not_its_entry_and_push_names_it(
    pair: tuple[Ledger, Ledger],
) -> None:
    srv, host = pair
    ids = _offline(host, 2)
    spool = Spool(host.spool_dir)
    f1, f2 = _files(host)
    kept = [spool.set_aside(p, A, SchemaError("no")) for p in (f1, f2)]
    kept[1].write_bytes(kept[0].read_bytes())  # the 2nd refused file now holds the 1st's envelope
    assert restore_refused(host, A) == (1, 0)  # the good one only
    assert _files(host) == [f1] and spool.refused_files() == [kept[1]]
    report, server = _push(srv, host)
    assert server.appended == ids[:1] and report.held_refused == 0  # quarantined, with its reason
    assert f"it holds the entry {ids[0]}" in _quarantined(report, kept[1])
    out = _bad(host, kept[1].name, "refused")
    assert out.exists() and out.with_suffix(".target").exists()
    assert out.with_name(out.stem + ".refusal.json").exists()


def test_read_entry_names_the_file_and_what_is_wrong(pair: tuple[Ledger, Ledger]) -> None:
    _srv, host = pair
    ids = _offline(host, 1)
    [f1] = _files(host)
    one = Spool.read_entry(f1)
    assert (one.path, one.entry_id, one.size) == (f1, ids[0], f1.stat().st_size)
    assert entry_id_of(one.envelope.canonical()) == ids[0]
    f1.write_bytes(b"")
    with pytest.raises(ConfigError, match="not the spooled entry its name says") as e:
        Spool.read_entry(f1)
    assert str(f1) in e.value.message and e.value.hint_text


def test_cli_push_names_a_torn_spool_file_exits_1_without_a_traceback(
    pair: tuple[Ledger, Ledger], cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    srv, host = pair
    ids = _offline(host, 4)
    f4 = _files(host)[3]
    f4.write_bytes(f4.read_bytes()[:100])
    server = Server(srv, A)
    server.close = lambda: None  # type: ignore[method-assign]
    monkeypatch.setattr(remote, "LedgerClient", lambda url, token=None: server)
    r = cli("push", "--server", A, "--home", str(host.home_path))
    assert r.code == 1 and "Traceback" not in r.err, r.out + r.err
    assert "delivered 3 entries (0 already there)" in r.out, r.out
    said = " ".join(r.err.split())
    assert f"not delivered, quarantined: {f4}: not the spooled entry its name says" in said, r.err
    assert str(_bad(host, f4.name)) in said, r.err
    assert server.appended == ids[:3]


def test_spool_file_a_push_beside_delivered_meanwhile_is_not_named(
    pair: tuple[Ledger, Ledger], monkeypatch: pytest.MonkeyPatch
) -> None:
    _srv, host = pair
    _offline(host, 1)
    [f1] = _files(host)
    gone = f1.with_name(f"000000000000-{'e' * 64}.json")  # listed, then removed by a concurrent push
    listed = Spool.entry_files
    monkeypatch.setattr(Spool, "entry_files", lambda self: [gone, *listed(self)])
    left = remote._Sorted(Spool(host.spool_dir), A, lambda: None, False)
    assert left.entries == [f1] and left.unreadable == []
    monkeypatch.setattr(Spool, "entry_files", listed)
    gone.symlink_to(gone.with_name("nowhere"))  # a dangling link is there, and named
    left = remote._Sorted(Spool(host.spool_dir), A, lambda: None, False)
    assert left.entries == [f1] and len(left.unreadable) == 1 and str(gone) in left.unreadable[0]
