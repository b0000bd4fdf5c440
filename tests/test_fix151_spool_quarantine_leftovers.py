"""fix151 (issue 12): what a spool quarantine left behind.

1. ``refused/artifacts/<hex>.refusal.json`` (the servers' reasons for a set-aside artifact) stayed behind
   when its artifact was quarantined: ``Spool.quarantine`` moved an artifact with its ``.targets`` only. An
   artifact now takes every file that belongs to it (``.targets`` and ``.refusal.json``, ``_companions``),
   from ``refused/artifacts/`` and from ``artifacts/`` (one moved back there by hand with its reasons).
2. An orphan ``.target`` could be left in ``entries/`` by a push killed mid-quarantine: the note is written,
   then the file moved, then what belongs to it — a kill after the file moved left its ``.target`` (and an
   entry's ``.refusal.json``, an artifact's ``.targets``) in the spool, beside no file, for good. The steps
   keep that order (an entry never waits without its target) and the next push completes the quarantine
   (``Spool.finish_quarantines``): what the note says was to go with the file is moved beside it in ``bad/``,
   unless a file of its old name is back in the spool (then it is that file's).
The kill is simulated by stopping ``remote._move`` (each step of a quarantine) at a given step."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import ledger.collectors.remote as remote
from ledger.collectors.remote import Spool, SpoolTarget
from ledger.errors import ArtifactTooLargeError, SchemaError
from ledger.hashing import hash_file
from ledger.service import Ledger
from tests.collectors.test_fix145_spool_bad_counted_by_files import A, _Killed, _note, _offline, _push, _sent


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Ledger, Ledger]]:
    """(the server's ledger, a GPU host whose key gpu01 it trusts as a collector)."""
    srv, host = Ledger.init(tmp_path / "server"), Ledger.init(tmp_path / "gpu-host")
    host.new_key("gpu01", ["collector"])
    srv.enrol_key("gpu01", host.signing_key("gpu01").public.b64, ["collector"])
    yield srv, host
    host.close()
    srv.close()


def _kill_at_step(monkeypatch: pytest.MonkeyPatch, step: int) -> list[str]:
    """The quarantine's ``step``-th move (1: the file, 2 and on: what belongs to it) kills the push."""
    real, seen = remote._move, []

    def dying(src: Path, dst: Path) -> None:
        seen.append(Path(src).name)
        if len(seen) == step:
            raise _Killed(str(dst))
        real(src, dst)

    monkeypatch.setattr(remote, "_move", dying)
    return seen


def _left(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def _artifact(host: Ledger, tmp_path: Path, n: int = 2) -> tuple[list[str], Path]:
    log = tmp_path / "engine.log"
    log.write_bytes(b"engine\n" * 20)
    ids = _offline(host, n, artifacts={0: [log]})
    [art] = Spool(host.spool_dir).artifact_files()
    return ids, art


def _set_aside(spool: Spool, art: Path) -> Path:
    """``art`` refused for good by ``A`` (too large): set aside in ``refused/artifacts/`` with its reasons."""
    with spool.locked():
        return spool.set_aside_artifact(art, A, ArtifactTooLargeError("too large for this server"))


# --- 1. a set-aside artifact's reasons go with it ---------------------------------------------------------


def test_quarantined_refused_artifact_takes_its_refusal_note_along(
    pair: tuple[Ledger, Ledger], tmp_path: Path
) -> None:
    _srv, host = pair
    _ids, art = _artifact(host, tmp_path)
    spool = Spool(host.spool_dir)
    refused = _set_aside(spool, art)
    assert _left(spool.refused_artifacts_dir) == sorted(
        [art.name, f"{art.name}.refusal.json", f"{art.name}.targets"]
    )
    with spool.locked():
        kept = spool.quarantine(refused, "its bytes are not its name")
    assert kept == spool.bad_dir / "refused" / "artifacts" / art.name
    assert _left(spool.refused_artifacts_dir) == []  # nothing left pointing at a file that moved
    assert _left(kept.parent) == sorted(
        [art.name, f"{art.name}.bad.json", f"{art.name}.refusal.json", f"{art.name}.targets"]
    )
    why = json.loads(_note(kept).read_text())
    assert sorted(why["with"]) == [f"{art.name}.refusal.json", f"{art.name}.targets"]
    [reason] = json.loads(kept.with_name(art.name + ".refusal.json").read_text())
    assert (reason["server"], reason["code"]) == (A, "artifact-too-large")  # nothing lost
    assert spool.bad_files() == [kept] and spool.refused_artifact_files() == []


def test_refused_artifact_quarantined_twice_takes_its_reasons_under_the_second_name(
    pair: tuple[Ledger, Ledger], tmp_path: Path
) -> None:
    """Neighbour, a name taken: the second quarantine of that name keeps its reasons as ``<hex>~2…``."""
    _srv, host = pair
    _ids, art = _artifact(host, tmp_path)
    spool = Spool(host.spool_dir)
    refused = _set_aside(spool, art)
    data = refused.read_bytes()
    with spool.locked():
        spool.quarantine(refused, "first")
    refused.write_bytes(data)
    refused.with_name(art.name + ".refusal.json").write_text("[]")
    with spool.locked():
        kept = spool.quarantine(refused, "second")
    assert kept.name == f"{art.name}~2" and _left(spool.refused_artifacts_dir) == []
    assert kept.with_name(f"{art.name}~2.refusal.json").read_text() == "[]"
    assert not kept.with_name(f"{art.name}~2.targets").exists()  # it had none: none is made up


def test_artifact_moved_back_with_its_reasons_and_rotten_is_quarantined_with_them(
    pair: tuple[Ledger, Ledger], tmp_path: Path
) -> None:
    """Neighbour, from ``artifacts/``: one moved back by hand with its ``.refusal.json``, its bytes rotten."""
    srv, host = pair
    _ids, art = _artifact(host, tmp_path)
    art.with_name(art.name + ".refusal.json").write_text("[]")
    art.write_bytes(b"rotten")
    report, _ = _push(srv, host)
    kept = Spool(host.spool_dir).bad_dir / "artifacts" / art.name
    assert [q["kept"] for q in report.quarantined] == [str(kept)]
    assert _left(art.parent) == []
    assert kept.with_name(art.name + ".refusal.json").read_text() == "[]"
    assert kept.with_name(art.name + ".targets").exists()


def test_artifact_without_reasons_is_quarantined_with_its_targets_only(
    pair: tuple[Ledger, Ledger], tmp_path: Path
) -> None:
    """Neighbour, the passing case: an artifact no server refused has no reasons; none is made up."""
    srv, host = pair
    _ids, art = _artifact(host, tmp_path)
    art.write_bytes(b"rotten")
    _push(srv, host)
    kept = Spool(host.spool_dir).bad_dir / "artifacts" / art.name
    assert json.loads(_note(kept).read_text())["with"] == [f"{art.name}.targets"]
    assert _left(kept.parent) == sorted([art.name, f"{art.name}.bad.json", f"{art.name}.targets"])


# --- 2. a push killed mid-quarantine --------------------------------------------------------------------


def test_push_killed_mid_quarantine_leaves_no_orphan_target_once_the_next_push_ran(
    pair: tuple[Ledger, Ledger], monkeypatch: pytest.MonkeyPatch
) -> None:
    srv, host = pair
    ids = _offline(host, 3)
    spool = Spool(host.spool_dir)
    f2 = spool.entry_files()[1]
    f2.write_bytes(b"{")
    seen = _kill_at_step(monkeypatch, 2)  # after the file moved, before its .target
    with pytest.raises(_Killed):
        _push(srv, host)
    assert seen == [f2.name, f2.with_suffix(".target").name]
    kept = spool.bad_dir / "entries" / f2.name
    assert kept.exists() and f2.with_suffix(".target").exists()  # the orphan the finding named
    monkeypatch.undo()
    report, server = _push(srv, host)  # a second push after the interrupted one
    assert not f2.with_suffix(".target").exists()
    assert SpoolTarget.read(kept.with_suffix(".target")).server == A  # beside its file, as it belongs
    assert _left(spool.entries_dir) == []
    assert report.quarantined == [] and report.held_bad == 1 and spool.bad_files() == [kept]
    assert _sent(server) == [ids[0], ids[2]]


@pytest.mark.parametrize("step", [2, 3])
def test_push_killed_between_a_refused_entrys_companions_is_completed_by_the_next_push(
    pair: tuple[Ledger, Ledger], monkeypatch: pytest.MonkeyPatch, step: int
) -> None:
    """Neighbour, reordered: a refused entry has two companions (``.target``, ``.refusal.json``); a kill
    before either, or between them, is completed the same."""
    srv, host = pair
    _offline(host, 2)
    spool = Spool(host.spool_dir)
    with spool.locked():
        f1 = spool.set_aside(spool.entry_files()[0], A, SchemaError("no"))
    f1.write_bytes(b"{")
    _kill_at_step(monkeypatch, step)
    with pytest.raises(_Killed):
        _push(srv, host)
    monkeypatch.undo()
    _push(srv, host)
    kept = spool.bad_dir / "refused" / f1.name
    assert _left(spool.refused_dir) == []
    assert _left(kept.parent) == sorted(
        [f1.name, f"{f1.name}.bad.json", f1.with_suffix(".target").name, f"{f1.stem}.refusal.json"]
    )
    assert json.loads(kept.with_name(f"{f1.stem}.refusal.json").read_text())["code"] == "schema-violation"


def test_push_killed_before_the_file_moved_quarantines_it_whole_next_time(
    pair: tuple[Ledger, Ledger], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neighbour: a kill at the first step (the note written, the file not moved) leaves the file with its
    target in the spool; the next push quarantines both under that name (no ``~2``)."""
    srv, host = pair
    _offline(host, 2)
    spool = Spool(host.spool_dir)
    f2 = spool.entry_files()[1]
    f2.write_bytes(b"{")
    _kill_at_step(monkeypatch, 1)
    with pytest.raises(_Killed):
        _push(srv, host)
    assert f2.exists() and f2.with_suffix(".target").exists()
    monkeypatch.undo()
    report, _ = _push(srv, host)
    kept = spool.bad_dir / "entries" / f2.name
    assert [q["kept"] for q in report.quarantined] == [str(kept)] and kept.with_suffix(".target").exists()
    assert _left(spool.entries_dir) == []


def test_artifact_killed_mid_quarantine_and_spooled_again_keeps_its_targets_for_the_new_copy(
    pair: tuple[Ledger, Ledger], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neighbour: an artifact whose quarantine was killed before its ``.targets`` moved, then spooled again
    under its name (``add_artifact`` takes up the targets there): the ``.targets`` is the new copy's, and
    the next push leaves it where it is (the copy delivered, its targets gone with it)."""
    srv, host = pair
    _ids, art = _artifact(host, tmp_path)
    good = art.read_bytes()
    art.write_bytes(b"rotten")
    _kill_at_step(monkeypatch, 2)
    with pytest.raises(_Killed):
        _push(srv, host)
    monkeypatch.undo()
    spool = Spool(host.spool_dir)
    kept = spool.bad_dir / "artifacts" / art.name
    assert kept.exists() and not art.exists() and art.with_name(art.name + ".targets").exists()
    src = tmp_path / "again.log"
    src.write_bytes(good)
    spool.add_artifact(src, hash_file(src).blake3, target=SpoolTarget.of(A))
    assert spool.artifact_targets(art) == [A]
    report, server = _push(srv, host)
    assert report.artifacts == 1 and server.uploaded == [f"blake3:{art.name}"]
    assert _left(art.parent) == [] and not kept.with_name(art.name + ".targets").exists()


def test_orphan_beside_a_file_without_its_note_is_left_as_it_is(
    pair: tuple[Ledger, Ledger], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neighbour, the note dropped: nothing says what belonged to the file, so nothing is guessed; and a
    note naming another file (renamed) moves nothing either."""
    srv, host = pair
    _offline(host, 2)
    spool = Spool(host.spool_dir)
    f2 = spool.entry_files()[1]
    f2.write_bytes(b"{")
    _kill_at_step(monkeypatch, 2)
    with pytest.raises(_Killed):
        _push(srv, host)
    monkeypatch.undo()
    kept = spool.bad_dir / "entries" / f2.name
    note = _note(kept).read_text()
    _note(kept).unlink()
    assert spool.finish_quarantines() == [] and f2.with_suffix(".target").exists()
    why = json.loads(note)
    _note(kept).write_text(
        json.dumps({**why, "file": str(f2.with_name("000000000009-" + "0" * 64 + ".json"))})
    )
    assert spool.finish_quarantines() == [] and f2.with_suffix(".target").exists()
    _note(kept).write_text(json.dumps({**why, "with": "not a list"}))
    assert spool.finish_quarantines() == [] and f2.with_suffix(".target").exists()
    _note(kept).write_text(note)  # the note as it was: completed
    assert spool.finish_quarantines() == [kept.with_suffix(".target")]
    assert not f2.with_suffix(".target").exists()
    [f1] = spool.entry_files()
    assert _left(spool.entries_dir) == sorted([f1.name, f1.with_suffix(".target").name])
