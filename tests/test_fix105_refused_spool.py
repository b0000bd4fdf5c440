"""Regressions of audit 84 (fix105), F3: the way back of what a server refused for good.

A spooled artifact a server refused was set aside without the server it waited for (its ``.targets``): moved
back as push's hint said, it named no server and push blamed "an older ledger". It is now set aside beside
the servers that refused it (``<hex>.targets``), so moved back with that file it waits for them again, and
``ledger push --retry-refused`` (``Spool.restore_refused``) moves back what one server refused — entries
with their ``.target`` too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ledger.collectors.remote import Spool, SpoolTarget, push_spool, restore_refused
from ledger.errors import SchemaError
from ledger.log import entry_id_of
from ledger.service import Ledger
from tests.test_fix98_receipts_spool import SERVER, _Refusing, _spooled_artifact

OTHER = "http://other.example:8080"


class _Taking:
    """A server that takes every artifact and entry."""

    def __init__(self, server: str) -> None:
        self.server = server
        self.uploaded: list[str] = []
        self.appended: list[Any] = []

    def has_artifact(self, digest: Any) -> bool:
        return False

    def upload_file(self, path: Path, digest: Any, size: int, sent: Any = None) -> dict[str, Any]:
        self.uploaded.append(str(digest))
        return {}

    def close(self) -> None:
        pass


def test_refused_artifact_is_set_aside_beside_the_server_that_refused_it(tmp_path: Path) -> None:
    led = Ledger.init(tmp_path / "home")
    try:
        spool, art = _spooled_artifact(tmp_path, led, [SERVER])
        report = push_spool(led, server=SERVER, token=None, client=_Refusing(SERVER))  # type: ignore[arg-type]
        [kept] = spool.refused_artifact_files()
        assert spool.artifact_targets(kept) == [SERVER]
        [notice] = [n for n in report.notices() if "refused the spooled artifact" in n]
        assert f"ledger push --server {SERVER} --retry-refused" in notice and ".targets" in notice
        # moved back as the hint says (both files): it waits for that server again, not for "none"
        os_move(kept, spool.artifacts_dir / kept.name)
        os_move(kept.with_name(kept.name + ".targets"), spool.artifacts_dir / (kept.name + ".targets"))
        taking = _Taking(SERVER)
        again = push_spool(led, server=SERVER, token=None, client=taking)  # type: ignore[arg-type]
        assert taking.uploaded == [f"blake3:{art.name}"] and again.untargeted == 0 and not again.left()
    finally:
        led.close()


def os_move(src: Path, dst: Path) -> None:
    src.replace(dst)


def test_retry_refused_sends_the_artifact_to_the_server_that_refused_it(tmp_path: Path) -> None:
    led = Ledger.init(tmp_path / "home")
    try:
        spool, art = _spooled_artifact(tmp_path, led, [SERVER])
        data = art.read_bytes()
        push_spool(led, server=SERVER, token=None, client=_Refusing(SERVER))  # type: ignore[arg-type]
        assert restore_refused(led, OTHER) == (0, 0)  # another server refused nothing
        assert restore_refused(led, SERVER.upper().replace("HTTP", "http")) == (0, 1)  # as a server compares
        assert spool.refused_artifact_files() == [] and not list(spool.refused_artifacts_dir.iterdir())
        [back] = spool.artifact_files()
        assert back.read_bytes() == data and spool.artifact_targets(back) == [SERVER]
        taking = _Taking(SERVER)
        report = push_spool(led, server=SERVER, token=None, client=taking)  # type: ignore[arg-type]
        assert taking.uploaded == [f"blake3:{art.name}"] and not report.left()
    finally:
        led.close()


def test_retry_refused_keeps_what_another_server_refused_and_what_waits_for_another(tmp_path: Path) -> None:
    led = Ledger.init(tmp_path / "home")
    try:
        spool, art = _spooled_artifact(tmp_path, led, [SERVER, OTHER, "http://third.example"])
        push_spool(led, server=SERVER, token=None, client=_Refusing(SERVER))  # type: ignore[arg-type]
        push_spool(led, server=OTHER, token=None, client=_Refusing(OTHER))  # type: ignore[arg-type]
        [kept] = spool.refused_artifact_files()
        assert sorted(spool.artifact_targets(kept)) == sorted([SERVER, OTHER])
        assert spool.artifact_targets(art) == ["http://third.example"]
        assert restore_refused(led, SERVER) == (0, 1)
        assert sorted(spool.artifact_targets(art)) == sorted([SERVER, "http://third.example"])
        assert spool.refused_artifact_files() == [kept] and spool.artifact_targets(kept) == [OTHER]
    finally:
        led.close()


def test_artifact_set_aside_before_targets_were_kept_is_restored_by_its_reasons(tmp_path: Path) -> None:
    led = Ledger.init(tmp_path / "home")
    try:
        spool, _art = _spooled_artifact(tmp_path, led, [SERVER])
        push_spool(led, server=SERVER, token=None, client=_Refusing(SERVER))  # type: ignore[arg-type]
        [kept] = spool.refused_artifact_files()
        kept.with_name(kept.name + ".targets").unlink()  # as set aside before this fix
        assert restore_refused(led, SERVER) == (0, 1)
        assert [spool.artifact_targets(a) for a in spool.artifact_files()] == [[SERVER]]
    finally:
        led.close()


def test_retry_refused_moves_back_entries_for_that_server_with_their_target(tmp_path: Path) -> None:
    led = Ledger.init(tmp_path / "home")
    try:
        spool = Spool(led.spool_dir)
        led.new_key("gpu01", ["collector"])
        # real envelopes: a spool file is moved back only when it is the entry its name says (fix127)
        envs = [
            led.sign(led.make_statement("note", {"campaign": "c"}, {"text": t}), led.signing_key("gpu01"))
            for t in ("mine", "theirs")
        ]
        mine, theirs = (
            spool.add_entry(e.canonical(), entry_id_of(e.canonical()), target=SpoolTarget.of(s))
            for e, s in zip(envs, (SERVER, OTHER), strict=True)
        )
        for p, server in ((mine, SERVER), (theirs, OTHER)):
            spool.set_aside(p, server, SchemaError("no"))
        assert spool.entry_files() == []
        assert restore_refused(led, SERVER) == (1, 0)
        assert [p.name for p in spool.entry_files()] == [mine.name]
        target = spool.entry_target(spool.entry_files()[0])
        assert target is not None and target.server == SERVER
        assert [p.name for p in spool.refused_files()] == [theirs.name]
        assert not mine.with_name(mine.stem + ".refusal.json").exists()
        refused = spool.refused_dir / (mine.stem + ".refusal.json")
        assert (
            not refused.exists()
            and json.loads((spool.refused_dir / (theirs.stem + ".refusal.json")).read_text())["server"]
            == OTHER
        )
    finally:
        led.close()


def test_entry_refusal_hint_names_the_retry_and_the_target_file(tmp_path: Path) -> None:
    from ledger.collectors.remote import PushReport

    report = PushReport(server=SERVER, refused=[{"id": "x", "file": "f", "code": "c", "message": "m"}])
    report.held_refused = 2
    said = " ".join(report.notices())
    assert f"ledger push --server {SERVER} --retry-refused" in said and ".target file" in said


def test_cli_push_retry_refused(tmp_path: Path, cli: Any, monkeypatch: Any) -> None:
    led = Ledger.init(tmp_path / "home2")
    try:
        _spool, _art = _spooled_artifact(tmp_path, led, [SERVER])
        push_spool(led, server=SERVER, token=None, client=_Refusing(SERVER))  # type: ignore[arg-type]
    finally:
        led.close()
    import ledger.collectors.remote as remote

    taking = _Taking(SERVER)
    monkeypatch.setattr(remote, "LedgerClient", lambda server, token=None: taking)
    r = cli("push", "--server", SERVER, "--home", str(tmp_path / "home2"), "--retry-refused")
    assert "moved back 0 refused entries and 1 refused artifacts" in r.out, r.out + r.err
    assert len(taking.uploaded) == 1 and r.code == 0, r.out + r.err
