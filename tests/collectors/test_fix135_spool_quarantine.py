"""Fix 135 (issue 12): bad spool files quarantined, artifacts checked by push, special files never hang.

1. A spool file that is not the entry its name says (torn, another entry's bytes, ...) was kept and named but
   stayed in ``entries/``: every later push named it again. A push now moves it to ``spool/bad/entries/``
   with its ``.target`` and why (``<name>.bad.json``), never deleting it; that push exits 1 and names where
   it went, later pushes deliver the rest and are not failed by it (they say it waits there).
2. A spooled artifact whose bytes are not the BLAKE3 digest its name gives was caught by the server only.
   Push now checks each one before sending: a bad copy is quarantined (``bad/artifacts/``, with its
   ``.targets``), never sent; an entry naming it stays spooled (not sent, so not set aside as refused for
   good) while the server does not hold that artifact, named, exit 1 — nothing is lost either way.
3. A symbolic link to a FIFO (or any non-regular file) in the spool hung push. Spool files are opened without
   following a link or waiting on a FIFO (``lstat``, then ``O_NOFOLLOW | O_NONBLOCK`` and ``fstat``), and one
   that is not a regular file is quarantined as bad — a link to a good regular file too: the spool writes
   only regular files, and what a link points at may change under it (the link is moved, never its target).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import ledger.collectors.remote as remote
from ledger.collectors.remote import (
    LedgerClient,
    PushReport,
    RemoteRecorder,
    Spool,
    SpoolTarget,
    push_spool,
)
from ledger.entries import ArtifactRef
from ledger.errors import ConfigError, EntryNotFoundError
from ledger.hashing import hash_file
from ledger.service import Ledger
from tests.api.conftest import free_port
from tests.collectors.test_fix45_spool_targets import Server

A = "http://prod.test"
B = "http://staging.test"


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Ledger, Ledger]]:
    """(the server's ledger, a GPU host whose key gpu01 it trusts as a collector)."""
    srv, host = Ledger.init(tmp_path / "server"), Ledger.init(tmp_path / "gpu-host")
    host.new_key("gpu01", ["collector"])
    srv.enrol_key("gpu01", host.signing_key("gpu01").public.b64, ["collector"])
    yield srv, host
    host.close()
    srv.close()


def _offline_recorder(host: Ledger) -> RemoteRecorder:
    rec = RemoteRecorder(host, "gpu01", server=A)
    rec.client.close()
    rec.client = LedgerClient(f"http://127.0.0.1:{free_port()}")  # nothing listens there
    rec.client.server = A
    return rec


def _offline(host: Ledger, n: int, *, artifacts: dict[int, list[Path]] | None = None) -> list[str]:
    """``n`` entries recorded for ``A`` while it cannot be reached (the i-th with ``artifacts[i]``)."""
    rec = _offline_recorder(host)
    try:
        ids = []
        for i in range(n):
            refs: list[ArtifactRef] = [rec.artifact(p.name, p) for p in (artifacts or {}).get(i, [])]
            ids.append(rec.record("note", {"campaign": "prod"}, {"text": f"#{i}"}, artifacts=refs))
    finally:
        rec.close()
    assert rec.spooled == ids
    return ids


def _source(tmp_path: Path, name: str, data: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def _files(host: Ledger) -> list[Path]:
    return Spool(host.spool_dir).entry_files()


def _bad(host: Ledger, name: str, folder: str = "entries") -> Path:
    return Spool(host.spool_dir).bad_dir / folder / name


def _on(led: Ledger, entry_id: str) -> bool:
    try:
        led.get(entry_id)
    except EntryNotFoundError:
        return False
    return True


def _push(srv: Ledger, host: Ledger, server: Server | None = None) -> tuple[PushReport, Server]:
    server = server or Server(srv, A)
    return push_spool(host, server=A, token=None, client=server), server


def _sent(server: Server) -> list[str]:
    return [i for call in server.appended for i in call]


def _within(seconds: float, call: Callable[[], Any]) -> Any:
    """``call()``'s result, failing (not hanging) when it does not return within ``seconds``."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = call()
        except BaseException as e:  # handed to the test
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"still blocked after {seconds} s"
    if "error" in out:
        raise out["error"]
    return out.get("value")


# --- 1: a bad entry file is quarantined, never deleted ----------------------------------------------------


def test_bad_spool_file_is_quarantined_with_its_target_and_reason_and_later_pushes_are_not_failed(
    pair: tuple[Ledger, Ledger],
) -> None:
    srv, host = pair
    ids = _offline(host, 4)
    f1, f2, f3, f4 = _files(host)
    torn = f2.read_bytes()[:90]
    f2.write_bytes(torn)
    target = f2.with_suffix(".target").read_bytes()
    report, server = _push(srv, host)
    # the good entries beside it all delivered, in order
    assert _sent(server) == [ids[0], ids[2], ids[3]] and report.delivered == 3 and not _on(srv, ids[1])
    kept = _bad(host, f2.name)
    assert _files(host) == [] and kept.read_bytes() == torn  # moved, never deleted nor rewritten
    assert kept.with_suffix(".target").read_bytes() == target and not f2.with_suffix(".target").exists()
    why = json.loads(kept.with_name(kept.name + ".bad.json").read_text())
    assert why["file"] == str(f2) and "not the spooled entry its name says" in why["problem"]
    assert why["with"] == [f2.with_suffix(".target").name] and why["at"]
    [q] = report.quarantined
    assert (q["file"], q["kept"]) == (str(f2), str(kept)) and report.unreadable == []
    assert report.left(), "the push that found it exits 1"
    said = " ".join(report.notices())
    assert f"not delivered, quarantined: {f2}" in said and str(kept) in said
    assert report.to_json()["quarantined"] == [q] and report.to_json()["held_bad"] == 1
    assert not (f1.exists() or f3.exists() or f4.exists())
    # a later push: nothing sent twice, the quarantined file named as waiting there, exit 0
    [new] = _offline(host, 1)
    again, server = _push(srv, host)
    assert _sent(server) == [new] and not again.left() and again.quarantined == again.unreadable == []
    assert again.held_bad == 1 and "1 spool files quarantined by earlier pushes" in " ".join(again.notices())
    assert kept.read_bytes() == torn


def test_entry_file_holding_another_entrys_bytes_is_quarantined_not_counted_already_there(
    pair: tuple[Ledger, Ledger],
) -> None:
    srv, host = pair
    ids = _offline(host, 3)
    f1, _f2, f3 = _files(host)
    b1 = f1.read_bytes()
    f3.write_bytes(b1)
    report, server = _push(srv, host)
    assert _sent(server) == ids[:2] and (report.delivered, report.duplicates) == (2, 0)
    [q] = report.quarantined
    assert q["file"] == str(f3) and f"it holds the entry {ids[0]}" in q["problem"]
    assert _bad(host, f3.name).read_bytes() == b1 and _files(host) == []


def test_quarantine_keeps_both_when_the_same_name_goes_bad_twice(pair: tuple[Ledger, Ledger]) -> None:
    srv, host = pair
    ids = _offline(host, 1)
    [f1] = _files(host)
    good = f1.read_bytes()
    f1.write_bytes(b"first")
    _push(srv, host)
    spool = Spool(host.spool_dir)
    spool.add_entry(good, ids[0], target=SpoolTarget.of(A))  # spooled again under the same name ...
    [again] = _files(host)
    assert again.name == f1.name
    again.write_bytes(b"second")  # ... and torn again
    report, _ = _push(srv, host)
    second = _bad(host, f1.name.replace(".json", "~2.json"))
    assert [q["kept"] for q in report.quarantined] == [str(second)]
    assert (_bad(host, f1.name).read_bytes(), second.read_bytes()) == (b"first", b"second")
    assert second.with_name(f1.stem + "~2.target").exists()
    assert sorted(p.name for p in spool.bad_files()) == sorted([f1.name, second.name])


def test_good_entry_is_not_quarantined(pair: tuple[Ledger, Ledger]) -> None:
    srv, host = pair
    ids = _offline(host, 2)
    report, server = _push(srv, host)
    assert _sent(server) == ids and not report.left() and report.quarantined == []
    assert not Spool(host.spool_dir).bad_dir.exists() and report.held_bad == 0


def test_quarantine_of_a_file_a_push_beside_delivered_meanwhile_is_skipped(
    pair: tuple[Ledger, Ledger],
) -> None:
    _srv, host = pair
    spool = Spool(host.spool_dir)
    gone = spool.entries_dir / f"000000000001-{'e' * 64}.json"
    with pytest.raises(FileNotFoundError):
        spool.quarantine(gone, "torn")
    report = PushReport(server=A)
    assert remote._quarantine(spool, [(gone, "torn")], report) == [] and report.quarantined == []


def test_cli_push_names_where_a_bad_file_went_exits_1_then_0(
    pair: tuple[Ledger, Ledger], cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    srv, host = pair
    ids = _offline(host, 3)
    f2 = _files(host)[1]
    f2.write_bytes(b"{")
    server = Server(srv, A)
    server.close = lambda: None  # type: ignore[method-assign]
    monkeypatch.setattr(remote, "LedgerClient", lambda url, token=None: server)
    r = cli("push", "--server", A, "--home", str(host.home_path))
    said = " ".join(r.err.split())
    assert r.code == 1 and "Traceback" not in r.err, r.out + r.err
    assert f"not delivered, quarantined: {f2}" in said and str(_bad(host, f2.name)) in said, r.err
    assert _sent(server) == [ids[0], ids[2]]
    r = cli("push", "--server", A, "--home", str(host.home_path))
    assert r.code == 0, r.out + r.err
    assert "quarantined by earlier pushes" in " ".join(r.err.split()), r.err


# --- 2: a spooled artifact whose bytes are not its name -----------------------------------------------------


def test_spooled_artifact_whose_bytes_are_not_its_name_is_quarantined_and_its_entry_kept_spooled(
    pair: tuple[Ledger, Ledger], tmp_path: Path
) -> None:
    srv, host = pair
    log = _source(tmp_path, "engine.log", b"engine log\n" * 200)
    ids = _offline(host, 3, artifacts={1: [log]})
    spool = Spool(host.spool_dir)
    [art] = spool.artifact_files()
    assert art.name == hash_file(log).blake3.hex
    bad = bytearray(art.read_bytes())
    bad[0] ^= 1  # one bit: same size, another artifact
    art.write_bytes(bytes(bad))
    report, server = _push(srv, host)
    assert server.uploaded == [] and not srv.has_artifact(f"blake3:{art.name}")  # never sent
    kept = _bad(host, art.name, "artifacts")
    assert spool.artifact_files() == [] and kept.read_bytes() == bytes(bad)
    assert spool.artifact_targets(kept) == [A]  # its .targets went with it
    [q] = report.quarantined
    assert q["file"] == str(art) and "not the spooled artifact its name says" in q["problem"]
    assert f"its bytes are the artifact blake3:{hash_file(kept).blake3.hex}" in q["problem"]
    # the entry naming it: kept spooled (not sent, not set aside), named with the artifact; the others sent
    assert _sent(server) == [ids[0], ids[2]] and [p.name.split("-", 1)[1] for p in _files(host)] == [
        f"{ids[1]}.json"
    ]
    [h] = report.held
    assert (h["id"], h["artifact"], h["kept"]) == (ids[1], f"blake3:{art.name}", str(kept))
    assert report.remaining == 1 and report.left() and report.refused == []
    assert any(f"names the artifact blake3:{art.name}" in n for n in report.notices())
    # a later push: still kept, exit 1, while the server lacks the artifact
    again, server = _push(srv, host)
    assert _sent(server) == [] and [h["id"] for h in again.held] == [ids[1]] and again.left()
    # the real bytes spooled again (a collect naming them): uploaded, then the entry delivered
    spool.add_artifact(log, hash_file(log).blake3, target=SpoolTarget.of(A))
    last, server = _push(srv, host)
    assert server.uploaded == [f"blake3:{art.name}"] and _sent(server) == [ids[1]] and _on(srv, ids[1])
    assert not last.left() and last.held_bad == 1 and kept.exists()


@pytest.mark.parametrize(
    "damage",
    [lambda b: b[:-1], lambda b: b"", lambda b: b + b"x", lambda b: b"\x00" * len(b)],
    ids=["truncated", "empty", "grown", "zeroed"],
)
def test_bad_artifact_of_one_entry_does_not_stop_the_others(
    pair: tuple[Ledger, Ledger], tmp_path: Path, damage: Callable[[bytes], bytes]
) -> None:
    srv, host = pair
    one = _source(tmp_path, "one.log", b"one\n" * 50)
    two = _source(tmp_path, "two.log", b"two\n" * 50)
    ids = _offline(host, 3, artifacts={0: [one], 2: [two]})
    spool = Spool(host.spool_dir)
    bad = spool.artifacts_dir / hash_file(one).blake3.hex
    bad.write_bytes(damage(bad.read_bytes()))
    report, server = _push(srv, host)
    assert server.uploaded == [f"blake3:{hash_file(two).blake3.hex}"]
    assert _sent(server) == ids[1:] and [h["id"] for h in report.held] == [ids[0]]
    assert [q["file"] for q in report.quarantined] == [str(bad)] and report.left()


def test_entry_naming_a_quarantined_artifact_the_server_holds_is_sent(
    pair: tuple[Ledger, Ledger], tmp_path: Path
) -> None:
    srv, host = pair
    log = _source(tmp_path, "engine.log", b"held by the server already\n")
    with log.open("rb") as f:
        srv.put_artifact(f, expected=hash_file(log).blake3)
    ids = _offline(host, 1, artifacts={0: [log]})
    [art] = Spool(host.spool_dir).artifact_files()
    art.write_bytes(b"torn")
    report, server = _push(srv, host)
    assert server.uploaded == [] and _sent(server) == ids and report.held == [] and report.delivered == 1
    assert [q["file"] for q in report.quarantined] == [str(art)] and report.left()
    assert not push_spool(host, server=A, token=None, client=Server(srv, A)).left()


def test_good_artifact_is_checked_and_sent(pair: tuple[Ledger, Ledger], tmp_path: Path) -> None:
    srv, host = pair
    log = _source(tmp_path, "engine.log", b"fine\n" * 10)
    ids = _offline(host, 1, artifacts={0: [log]})
    report, server = _push(srv, host)
    assert server.uploaded == [str(hash_file(log).blake3)] and _sent(server) == ids and not report.left()


def test_read_artifact_names_the_file_and_what_is_wrong(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    src = _source(tmp_path, "x.bin", b"payload")
    art = spool.add_artifact(src, hash_file(src).blake3, target=SpoolTarget.of(A))
    got = Spool.read_artifact(art)
    assert (got.path, got.digest, got.size) == (art, hash_file(src).blake3, 7)
    art.write_bytes(b"payloaD")
    with pytest.raises(ConfigError, match="not the spooled artifact its name says") as e:
        Spool.read_artifact(art)
    assert str(art) in e.value.message and e.value.hint_text
    assert Spool.read_artifact(art, check_bytes=False).size == 7  # its name and kind only
    renamed = art.with_name("Z" * 64)
    os.replace(art, renamed)
    with pytest.raises(ConfigError, match="not the name of a spooled artifact"):
        Spool.read_artifact(renamed)


def test_add_artifact_over_a_bad_copy_quarantines_it_and_keeps_its_servers(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    src = _source(tmp_path, "x.bin", b"the real bytes")
    digest = hash_file(src).blake3
    art = spool.add_artifact(src, digest, target=SpoolTarget.of(A))
    art.write_bytes(b"rotten")
    again = spool.add_artifact(src, digest, target=SpoolTarget.of(B))
    assert again == art and art.read_bytes() == b"the real bytes"
    assert sorted(spool.artifact_targets(art)) == sorted([A, B])  # the servers it waited for, and the new one
    [kept] = spool.bad_files()
    assert kept == spool.bad_dir / "artifacts" / art.name and kept.read_bytes() == b"rotten"
    why = json.loads(kept.with_name(kept.name + ".bad.json").read_text())
    assert "replaced by the copy spooled again" in why["problem"]


def test_add_artifact_over_a_good_copy_leaves_it(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    src = _source(tmp_path, "x.bin", b"the real bytes")
    art = spool.add_artifact(src, hash_file(src).blake3, target=SpoolTarget.of(A))
    before = art.stat().st_ino
    spool.add_artifact(src, hash_file(src).blake3, target=SpoolTarget.of(A))
    assert art.stat().st_ino == before and spool.bad_files() == [] and spool.artifact_targets(art) == [A]


# --- 3: links, FIFOs and folders in the spool never hang a push -------------------------------------------


def test_symlink_to_a_fifo_in_the_spool_is_quarantined_without_hanging_push(
    pair: tuple[Ledger, Ledger], tmp_path: Path
) -> None:
    srv, host = pair
    ids = _offline(host, 2)
    f1, _f2 = _files(host)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    f1.unlink()
    f1.symlink_to(fifo)
    report, server = _within(30, lambda: _push(srv, host))
    assert _sent(server) == ids[1:] and report.left()
    kept = _bad(host, f1.name)
    assert kept.is_symlink() and os.readlink(kept) == str(fifo)  # the link moved, never followed
    [q] = report.quarantined
    assert "a symbolic link (to " in q["problem"] and "not a regular file" in q["problem"]


@pytest.mark.parametrize("where", ["entry", "target", "artifact", "artifact-targets"])
def test_fifo_in_place_of_a_spool_file_is_quarantined_without_hanging(
    pair: tuple[Ledger, Ledger], tmp_path: Path, where: str
) -> None:
    srv, host = pair
    log = _source(tmp_path, "engine.log", b"log\n")
    ids = _offline(host, 2, artifacts={0: [log]})
    spool = Spool(host.spool_dir)
    f1 = _files(host)[0]
    art = spool.artifacts_dir / hash_file(log).blake3.hex
    path = {
        "entry": f1,
        "target": f1.with_suffix(".target"),
        "artifact": art,
        "artifact-targets": art.with_name(art.name + ".targets"),
    }[where]
    path.unlink()
    os.mkfifo(path)
    report, server = _within(30, lambda: _push(srv, host))
    assert report.left() and len(report.quarantined) == 1
    assert "a FIFO (named pipe), not a regular file" in report.quarantined[0]["problem"]
    assert ids[1] in _sent(server)  # the entry without the artifact delivered whatever happened to it
    folder = "artifacts" if where.startswith("artifact") else "entries"
    quarantined = spool.bad_dir / folder / (art.name if folder == "artifacts" else f1.name)
    assert os.path.lexists(quarantined) and not os.path.lexists(path)


def test_symlink_to_a_good_entry_file_is_quarantined_and_its_target_left_alone(
    pair: tuple[Ledger, Ledger], tmp_path: Path
) -> None:
    """Decided: a link is never followed, even to a file that is the entry its name says — the spool
    writes regular files only, and what a link points at may change under it. The link is moved (kept),
    the file it points at untouched, and the entry not sent."""
    srv, host = pair
    ids = _offline(host, 1)
    [f1] = _files(host)
    outside = tmp_path / "outside.json"
    os.replace(f1, outside)
    f1.symlink_to(outside)
    report, server = _push(srv, host)
    assert _sent(server) == [] and outside.exists() and report.left()
    kept = _bad(host, f1.name)
    assert kept.is_symlink() and kept.resolve() == outside
    assert "a symbolic link" in report.quarantined[0]["problem"]
    # moved back as a regular file under its name: delivered
    kept.unlink()
    os.replace(outside, f1)
    os.replace(kept.with_suffix(".target"), f1.with_suffix(".target"))
    again, server = _push(srv, host)
    assert _sent(server) == ids and not again.left()


def test_symlink_to_a_good_artifact_is_quarantined_and_not_sent(
    pair: tuple[Ledger, Ledger], tmp_path: Path
) -> None:
    srv, host = pair
    log = _source(tmp_path, "engine.log", b"linked\n")
    ids = _offline(host, 1, artifacts={0: [log]})
    [art] = Spool(host.spool_dir).artifact_files()
    art.unlink()
    art.symlink_to(log)
    report, server = _push(srv, host)
    assert server.uploaded == [] and [h["id"] for h in report.held] == ids and log.read_bytes() == b"linked\n"
    assert _bad(host, art.name, "artifacts").is_symlink()


def test_folder_in_place_of_an_artifact_is_quarantined(pair: tuple[Ledger, Ledger], tmp_path: Path) -> None:
    srv, host = pair
    log = _source(tmp_path, "engine.log", b"folder\n")
    _offline(host, 1, artifacts={0: [log]})
    [art] = Spool(host.spool_dir).artifact_files()
    art.unlink()
    art.mkdir()
    report, server = _push(srv, host)
    assert server.uploaded == [] and _bad(host, art.name, "artifacts").is_dir()
    assert "a folder, not a regular file" in report.quarantined[0]["problem"] and report.left()


def test_fifo_as_the_spool_lock_is_refused_without_hanging(pair: tuple[Ledger, Ledger]) -> None:
    srv, host = pair
    _offline(host, 1)
    lock = Path(host.spool_dir) / ".lock"
    lock.unlink()
    os.mkfifo(lock)
    with pytest.raises(ConfigError, match="lock file"):
        _within(30, lambda: _push(srv, host))


def test_reading_a_fifo_entry_outside_a_push_does_not_hang(pair: tuple[Ledger, Ledger]) -> None:
    _srv, host = pair
    _offline(host, 1)
    [f1] = _files(host)
    f1.unlink()
    os.mkfifo(f1)
    spool = Spool(host.spool_dir)
    assert _within(30, lambda: spool.pending(A)) is False
    with pytest.raises(ConfigError, match="a FIFO"):
        _within(30, lambda: Spool.read_entry(f1))
    assert _within(30, lambda: remote.spool_bytes(host, A)) == 0
