"""Fix 145 (audit 98 f1): spool ``bad/`` is counted by the files there, not by their ``.bad.json`` notes.

``Spool.bad_files`` listed ``bad/<folder>/<name>`` for each ``<name>.bad.json`` without asking whether
``<name>`` was there, and ``Spool.quarantine`` (which writes the note before it moves the file) took a
leftover note as a name in use. So a quarantined file repaired and moved back by hand (docs/LOG.md) and
delivered was still counted (``held_bad``, "… wait in the spool's bad/ folder"); a push killed inside
``quarantine`` after the note, before the move, left the file in the spool and a note alone: the next push
quarantined the file again as ``…~2`` and counted two; and a stale note for an artifact kept holding the
entries naming it (``bad_artifacts``).

Now a file in ``bad/`` is what is counted (``lexists``; named by its note or, without one, by the form of the
folder it came from), a note whose file is gone is stale — ignored, left where it is, replaced by the next
quarantine of that name — and never holds an entry; ``quarantine`` writes why, then moves the file, then what
belongs to it, so a kill at any point leaves the file in the spool or in ``bad/`` beside why, never lost,
never counted twice.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ledger.collectors.remote import LedgerClient, PushReport, RemoteRecorder, Spool, SpoolTarget, push_spool
from ledger.entries import ArtifactRef
from ledger.hashing import hash_file, parse_digest
from ledger.service import Ledger
from tests.api.conftest import free_port
from tests.collectors.test_fix45_spool_targets import Server

A = "http://prod.test"
_NOTICE = "quarantined by earlier pushes"


class _Killed(BaseException):
    """A push killed (SIGKILL) at that point: nothing after it runs, nothing is cleaned up."""


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Ledger, Ledger]]:
    """(the server's ledger, a GPU host whose key gpu01 it trusts as a collector)."""
    srv, host = Ledger.init(tmp_path / "server"), Ledger.init(tmp_path / "gpu-host")
    host.new_key("gpu01", ["collector"])
    srv.enrol_key("gpu01", host.signing_key("gpu01").public.b64, ["collector"])
    yield srv, host
    host.close()
    srv.close()


def _offline(host: Ledger, n: int, *, artifacts: dict[int, list[Path]] | None = None) -> list[str]:
    """``n`` entries recorded for ``A`` while it cannot be reached (the i-th with ``artifacts[i]``)."""
    rec = RemoteRecorder(host, "gpu01", server=A)
    rec.client.close()
    rec.client = LedgerClient(f"http://127.0.0.1:{free_port()}")  # nothing listens there
    rec.client.server = A
    try:
        ids = []
        for i in range(n):
            refs: list[ArtifactRef] = [rec.artifact(p.name, p) for p in (artifacts or {}).get(i, [])]
            ids.append(rec.record("note", {"campaign": "prod"}, {"text": f"#{i}"}, artifacts=refs))
    finally:
        rec.close()
    return ids


def _push(srv: Ledger, host: Ledger) -> tuple[PushReport, Server]:
    server = Server(srv, A)
    return push_spool(host, server=A, token=None, client=server), server


def _sent(server: Server) -> list[str]:
    return [i for call in server.appended for i in call]


def _note(kept: Path) -> Path:
    return kept.with_name(kept.name + ".bad.json")


def _kill_on_move(monkeypatch: pytest.MonkeyPatch, into_bad: Callable[[str], bool]) -> None:
    """Kill the push at the first ``os.replace`` into ``bad/`` whose destination ``into_bad`` picks."""
    real = os.replace

    def dying(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        d = os.fspath(dst)
        if "/bad/" in d and into_bad(d):
            raise _Killed(d)
        real(src, dst)

    monkeypatch.setattr(os, "replace", dying)  # write_atomic (the note) too


def _torn_second(host: Ledger, n: int = 3) -> tuple[list[str], Path, bytes]:
    """``n`` entries spooled; the second torn: (ids, its file, its good bytes)."""
    ids = _offline(host, n)
    f2 = Spool(host.spool_dir).entry_files()[1]
    good = f2.read_bytes()
    f2.write_bytes(b"{")
    return ids, f2, good


# --- case A: repaired and moved back by hand ----------------------------------------------------------------


def test_repaired_file_moved_back_and_delivered_is_not_counted_as_waiting_in_bad(
    pair: tuple[Ledger, Ledger],
) -> None:
    srv, host = pair
    ids, f2, good = _torn_second(host)
    spool = Spool(host.spool_dir)
    first, _ = _push(srv, host)
    kept = spool.bad_dir / "entries" / f2.name
    assert first.held_bad == 1 and [q["kept"] for q in first.quarantined] == [str(kept)]
    # the operator repairs it and moves it back with its target file, as docs/LOG.md says (the note stays)
    os.replace(kept.with_suffix(".target"), f2.with_suffix(".target"))
    os.replace(kept, f2)
    f2.write_bytes(good)
    report, server = _push(srv, host)
    assert _sent(server) == [ids[1]] and report.delivered == 1 and not report.left()
    assert report.held_bad == 0 and spool.bad_files() == []
    assert not any(_NOTICE in n for n in report.notices()), report.notices()
    assert _note(kept).exists(), "the stale note is left where it is (bad/ is never deleted from)"


def test_moved_back_file_that_goes_bad_again_is_quarantined_under_its_own_name_with_a_new_note(
    pair: tuple[Ledger, Ledger],
) -> None:
    srv, host = pair
    _ids, f2, _good = _torn_second(host)
    spool = Spool(host.spool_dir)
    _push(srv, host)
    kept = spool.bad_dir / "entries" / f2.name
    os.replace(kept.with_suffix(".target"), f2.with_suffix(".target"))
    os.replace(kept, f2)
    f2.write_bytes(b"torn again")  # moved back, still not what its name says
    report, _ = _push(srv, host)
    assert [q["kept"] for q in report.quarantined] == [str(kept)], "the stale note takes no name"
    assert kept.read_bytes() == b"torn again" and report.held_bad == 1 and spool.bad_files() == [kept]
    assert "not the spooled entry its name says" in json.loads(_note(kept).read_text())["problem"]


def test_repaired_artifact_moved_back_is_sent_and_not_counted(
    pair: tuple[Ledger, Ledger], tmp_path: Path
) -> None:
    srv, host = pair
    log = tmp_path / "engine.log"
    log.write_bytes(b"engine log\n" * 50)
    ids = _offline(host, 2, artifacts={0: [log]})
    spool = Spool(host.spool_dir)
    [art] = spool.artifact_files()
    art.write_bytes(b"rotten")
    first, _ = _push(srv, host)
    kept = spool.bad_dir / "artifacts" / art.name
    assert [h["id"] for h in first.held] == [ids[0]] and first.held_bad == 1
    assert set(spool.bad_artifacts()) == {hash_file(log).blake3}
    # repaired and moved back with its .targets
    os.replace(kept.with_name(kept.name + ".targets"), art.with_name(art.name + ".targets"))
    os.replace(kept, art)
    art.write_bytes(log.read_bytes())
    assert spool.bad_artifacts() == {} and spool.bad_files() == []
    report, server = _push(srv, host)
    assert server.uploaded == [str(hash_file(log).blake3)] and _sent(server) == [ids[0]]
    assert report.held == [] and report.held_bad == 0 and not report.left()


# --- case B: a push killed inside quarantine ----------------------------------------------------------------


def test_push_killed_after_the_note_before_the_move_quarantines_the_file_once_under_its_own_name(
    pair: tuple[Ledger, Ledger], monkeypatch: pytest.MonkeyPatch
) -> None:
    srv, host = pair
    ids, f2, _good = _torn_second(host)
    spool = Spool(host.spool_dir)
    kept = spool.bad_dir / "entries" / f2.name
    with monkeypatch.context() as m:
        _kill_on_move(m, lambda d: not d.endswith(".bad.json"))
        with pytest.raises(_Killed):
            _push(srv, host)
    # the file never left the spool; the killed push's note alone is stale: nothing counted
    assert f2.read_bytes() == b"{" and f2.with_suffix(".target").exists()
    assert _note(kept).exists() and not os.path.lexists(kept) and spool.bad_files() == []
    report, server = _push(srv, host)
    assert [q["kept"] for q in report.quarantined] == [str(kept)], "not …~2: a note alone takes no name"
    assert report.held_bad == 1 and spool.bad_files() == [kept] and kept.read_bytes() == b"{"
    assert kept.with_suffix(".target").exists() and not f2.exists()
    assert ids[1] not in _sent(server) and report.left()


def test_push_killed_after_the_move_before_the_target_counts_the_file_once(
    pair: tuple[Ledger, Ledger], monkeypatch: pytest.MonkeyPatch
) -> None:
    srv, host = pair
    _ids, f2, _good = _torn_second(host)
    spool = Spool(host.spool_dir)
    kept = spool.bad_dir / "entries" / f2.name
    with monkeypatch.context() as m:
        _kill_on_move(m, lambda d: d.endswith(".target"))
        with pytest.raises(_Killed):
            _push(srv, host)
    # the file is in bad/ beside why; its target file still in the spool (an entry never waits without it)
    assert kept.read_bytes() == b"{" and _note(kept).exists() and f2.with_suffix(".target").exists()
    assert spool.bad_files() == [kept]
    report, _ = _push(srv, host)
    assert report.quarantined == [] and report.held_bad == 1 and spool.bad_files() == [kept]


def test_push_killed_while_writing_the_note_leaves_the_file_in_the_spool(
    pair: tuple[Ledger, Ledger], monkeypatch: pytest.MonkeyPatch
) -> None:
    srv, host = pair
    _ids, f2, _good = _torn_second(host)
    spool = Spool(host.spool_dir)
    with monkeypatch.context() as m:
        _kill_on_move(m, lambda d: d.endswith(".bad.json"))
        with pytest.raises(_Killed):
            _push(srv, host)
    assert f2.read_bytes() == b"{" and spool.bad_files() == []
    report, _ = _push(srv, host)
    assert [q["file"] for q in report.quarantined] == [str(f2)] and report.held_bad == 1


# --- neighbours: what bad/ holds ----------------------------------------------------------------------------


def test_note_without_its_file_is_not_counted_nor_named(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    folder = spool.bad_dir / "entries"
    folder.mkdir(parents=True)
    gone = folder / f"000000000001-{'a' * 64}.json"
    _note(gone).write_text(json.dumps({"file": "x", "problem": "torn", "with": [], "at": "t"}))
    renamed = folder / f"000000000002-{'b' * 64}~3.json.bad.json"  # a note under another name, no file
    renamed.write_text("{}")
    assert spool.bad_files() == []


def test_note_without_its_artifact_holds_no_entry(pair: tuple[Ledger, Ledger], tmp_path: Path) -> None:
    """Decided: a note alone says nothing is kept under that digest — the entry naming it is sent (and here,
    the server lacking the artifact, refused for good and set aside: kept, never lost), not held."""
    srv, host = pair
    log = tmp_path / "engine.log"
    log.write_bytes(b"gone\n")
    ids = _offline(host, 1, artifacts={0: [log]})
    spool = Spool(host.spool_dir)
    [art] = spool.artifact_files()
    art.unlink()
    art.with_name(art.name + ".targets").unlink()
    folder = spool.bad_dir / "artifacts"
    folder.mkdir(parents=True)
    _note(folder / art.name).write_text("{}")
    assert spool.bad_artifacts() == {} and spool.bad_files() == []
    report, server = _push(srv, host)
    assert report.held == [] and _sent(server) == ids and report.held_bad == 0
    assert [r["id"] for r in report.refused] == ids and spool.refused_files()


def test_file_without_its_note_is_still_counted_named_and_holds(
    pair: tuple[Ledger, Ledger], tmp_path: Path
) -> None:
    srv, host = pair
    log = tmp_path / "engine.log"
    log.write_bytes(b"engine\n" * 20)
    ids = _offline(host, 3, artifacts={0: [log]})
    spool = Spool(host.spool_dir)
    [art] = spool.artifact_files()
    art.write_bytes(b"rotten")
    f3 = spool.entry_files()[2]
    f3.write_bytes(b"{")
    _push(srv, host)
    kept_art = spool.bad_dir / "artifacts" / art.name
    kept_entry = spool.bad_dir / "entries" / f3.name
    for kept in (kept_art, kept_entry):
        _note(kept).unlink()  # lost by hand
    assert spool.bad_files() == sorted([kept_art, kept_entry])
    digest = hash_file(log).blake3
    assert spool.bad_artifacts() == {digest: kept_art}
    report, _ = _push(srv, host)
    assert report.held_bad == 2 and [h["id"] for h in report.held] == [ids[0]]
    # a name taken by a file (with or without its note) is not reused
    f3.with_suffix(".target").write_bytes(SpoolTarget.of(A).to_bytes())
    f3.write_bytes(b"torn again")  # the same name, bad again
    again, _ = _push(srv, host)
    [q] = again.quarantined
    assert q["kept"].endswith("~2.json") and again.held_bad == 3


def test_file_beside_its_note_is_counted_once_and_what_belongs_to_it_not_at_all(
    pair: tuple[Ledger, Ledger], tmp_path: Path
) -> None:
    srv, host = pair
    log = tmp_path / "engine.log"
    log.write_bytes(b"engine\n" * 20)
    _offline(host, 2, artifacts={0: [log]})
    spool = Spool(host.spool_dir)
    [art] = spool.artifact_files()
    art.write_bytes(b"rotten")
    f2 = spool.entry_files()[1]
    f2.write_bytes(b"{")
    f2.with_name(f2.stem + ".refusal.json").write_text("{}")  # moved back from refused/ with its reason
    report, _ = _push(srv, host)
    kept_art, kept_entry = spool.bad_dir / "artifacts" / art.name, spool.bad_dir / "entries" / f2.name
    assert (
        kept_entry.with_suffix(".target").exists()
        and kept_entry.with_name(f2.stem + ".refusal.json").exists()
    )
    assert kept_art.with_name(art.name + ".targets").exists()
    # a write_atomic leftover and the bad folder of refused/artifacts are not files either
    (spool.bad_dir / "entries" / f".{f2.name}.bad.json.x1.tmp").write_text("")
    (spool.bad_dir / "refused" / "artifacts").mkdir(parents=True)
    assert spool.bad_files() == sorted([kept_art, kept_entry]) and report.held_bad == 2
    assert spool.bad_artifacts() == {parse_digest(f"blake3:{art.name}"): kept_art}


def test_good_spool_has_nothing_in_bad(pair: tuple[Ledger, Ledger]) -> None:
    srv, host = pair
    ids = _offline(host, 2)
    report, server = _push(srv, host)
    assert _sent(server) == ids and report.held_bad == 0 and Spool(host.spool_dir).bad_files() == []
