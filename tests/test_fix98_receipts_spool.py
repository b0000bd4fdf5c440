"""Issue 12, fix 98: kept receipts the signing guard skipped, a rewrite behind a running sequencer, and
spooled artifacts a server refused for good.

1. A kept receipt of this home's own log whose ``index`` is no integer ("5", 5.0, true) or whose ``entry_id``
   is no text was skipped by the signing guard (``Ledger._kept_since``): only ``ledger audit`` named it. It
   now cannot judge the log (``ledger.log.receipt_place``): ``ConfigError``, nothing signed.
2. An entry rewritten in SQL below the head a long-lived process left: the append's cheap path signs the new
   entry's receipt alone, but the next checkpoint (this process's) is refused.
3. A spooled artifact the server refuses for good was kept in ``artifacts/`` and retried at every push: it is
   set aside in ``refused/artifacts/`` with the server's reason (nothing lost), and the push says so (exit 1).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ledger.collectors.remote import Spool, SpoolTarget, push_spool
from ledger.errors import (
    ArtifactMissingError,
    ConfigError,
    HomeFaultError,
    IntegrityError,
    LogInconsistentError,
)
from ledger.hashing import hash_file
from ledger.log import receipt_place
from ledger.service import Ledger
from tests.test_fix67_log_reads import Log
from tests.test_receipt_rewritten import NEWEST, _edit_receipt, _keep, _kept, _receipted, _rewrite, _row

ADMIN = "admin"


@pytest.fixture(autouse=True)
def _no_timed_publication(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEDGER_CHECKPOINT_INTERVAL", "3600")


@pytest.fixture
def receipted(tmp_path: Path) -> Any:
    log = _receipted(tmp_path / "home", None)
    yield log
    log.led.close()


def _unjudged(log: Log, match: str) -> None:
    """Nothing signed, in this process or a fresh one; the held checkpoint stays."""
    held = log.led.held()
    fresh = Ledger.open(log.led.home_path, database_url=log.url, home_bound=True)
    try:
        for led in (log.led, fresh):
            for sign in (led.checkpoint, led.signed_checkpoint):
                with pytest.raises(ConfigError, match=match):
                    sign()
        with pytest.raises(HomeFaultError, match=rf"error\[bad-config\].*{match}"):
            fresh.record("note", {"campaign": "c"}, {"text": "after"}, key=ADMIN)
    finally:
        fresh.close()
    assert log.led.held() == held
    report = log.led.verify()
    assert not report and any(
        p.code == ConfigError.code and "cannot judge" in p.message for p in report.problems
    )


# --- 1. a kept receipt whose fields cannot place it ------------------------------------------------------


@pytest.mark.parametrize("bad", ["6", 6.0, True, None, -1], ids=["text", "float", "bool", "null", "negative"])
def test_a_kept_receipt_whose_index_is_no_integer_is_not_skipped_by_the_signing_guard(
    receipted: Log, bad: Any
) -> None:
    _edit_receipt(receipted, 6, lambda d: d.update(index=bad))
    _unjudged(receipted, "cannot judge the log: its index field is")


def test_a_kept_receipt_whose_index_is_dropped_cannot_judge_the_log(receipted: Log) -> None:
    _edit_receipt(receipted, 6, lambda d: d.pop("index"))
    _unjudged(receipted, "it has no index field")


def test_a_kept_receipt_whose_index_field_is_renamed_cannot_judge_the_log(receipted: Log) -> None:
    _edit_receipt(receipted, 6, lambda d: d.update(idx=d.pop("index")))
    _unjudged(receipted, "it has no index field")


@pytest.mark.parametrize("bad", [6, None, ["x"]], ids=["int", "null", "list"])
def test_a_kept_receipt_whose_entry_id_is_no_text_is_not_skipped(receipted: Log, bad: Any) -> None:
    _edit_receipt(receipted, 6, lambda d: d.update(entry_id=bad))
    _unjudged(receipted, "its entry_id field is")


def test_a_kept_receipt_whose_entry_id_is_dropped_cannot_judge_the_log(receipted: Log) -> None:
    _edit_receipt(receipted, 6, lambda d: d.pop("entry_id"))
    _unjudged(receipted, "it has no entry_id field")


@pytest.mark.parametrize("edit", ["renamed", "dropped", "other"])
def test_a_kept_receipt_whose_origin_field_no_longer_names_the_log_is_still_its(
    receipted: Log, edit: str
) -> None:
    """Its signed note (and signature line) names this log: not set aside as another log's."""

    def change(d: dict[str, Any]) -> None:
        origin = d.pop("origin")
        if edit == "renamed":
            d["origin_"] = origin
        elif edit == "other":
            d["origin"] = "another.example/log"

    _edit_receipt(receipted, 6, change)
    _unjudged(receipted, "origin field")


def test_a_receipt_of_another_log_is_still_set_aside(receipted: Log) -> None:
    docs = _kept(receipted)
    other = {**docs[-1], "origin": "another.example/log", "index": "7", "note": "not ours"}
    _keep(receipted, [*docs, other])
    assert receipted.led.checkpoint().size == NEWEST + 1


def test_the_honest_receipts_still_sign(receipted: Log) -> None:
    assert receipted.led.verify()
    assert receipted.led.checkpoint().size == NEWEST + 1


def test_receipt_place_reads_the_fields_of_a_well_formed_receipt(receipted: Log) -> None:
    led = receipted.led
    [doc] = [d for d in _kept(receipted) if d["index"] == 6]
    assert receipt_place(doc, led.origin, led.origin) == (6, doc["entry_id"])
    assert receipt_place({**doc, "origin": "x", "note": ""}, led.origin, led.origin) is None


# --- 2. a rewrite below the head a long-lived process left ------------------------------------------------


def test_an_entry_rewritten_between_two_appends_of_a_running_process_is_never_checkpointed(
    receipted: Log,
) -> None:
    led = receipted.led
    held = led.held()
    led.record("note", {"campaign": "c"}, {"text": "first"}, key=ADMIN)  # the head this process left
    _rewrite(receipted, 6, "signer", "rewritten")  # below the head; the head's chain hash unchanged
    led.record("note", {"campaign": "c"}, {"text": "second"}, key=ADMIN)  # its receipt: the new entry alone
    for sign in (led.checkpoint, led.signed_checkpoint, led.publish_checkpoint):
        with pytest.raises(LogInconsistentError, match="index 6 rewritten"):
            sign()
    assert led.held() == held
    assert str(_row(receipted, 6).signer) == "rewritten"


# --- 3. a spooled artifact the server refuses for good ----------------------------------------------------


class _Refusing:
    """A server that refuses every artifact uploaded (its bytes do not hash to their name) and every entry
    naming one it does not hold."""

    def __init__(self, server: str) -> None:
        self.server = server
        self.uploads = 0

    def has_artifact(self, digest: Any) -> bool:
        return False

    def upload_file(self, path: Path, digest: Any, size: int, sent: Any = None) -> dict[str, Any]:
        self.uploads += 1
        raise IntegrityError(f"server refused: uploaded bytes do not hash to {digest}")

    def append(self, envelopes: Any) -> list[dict[str, Any]]:
        raise ArtifactMissingError("server refused: the entry names an artifact the store does not hold")

    def close(self) -> None:
        pass


SERVER = "http://ledger.example:8080"


def _spooled_artifact(tmp_path: Path, led: Ledger, targets: list[str]) -> tuple[Spool, Path]:
    spool = Spool(led.spool_dir)
    src = tmp_path / "engine.log"
    src.write_bytes(b"engine log\n" * 100)
    digest = hash_file(src).blake3
    art = Path()
    for t in targets:
        art = spool.add_artifact(src, digest, target=SpoolTarget.of(t))
    return spool, art


def test_a_spooled_artifact_refused_at_push_is_set_aside_not_retried_forever(tmp_path: Path) -> None:
    led = Ledger.init(tmp_path / "home")
    try:
        spool, art = _spooled_artifact(tmp_path, led, [SERVER])
        data = art.read_bytes()
        client = _Refusing(SERVER)
        report = push_spool(led, server=SERVER, token=None, client=client)  # type: ignore[arg-type]
        assert client.uploads == 1 and spool.artifact_files() == []
        [kept] = spool.refused_artifact_files()
        assert kept.name == art.name and kept.read_bytes() == data  # nothing lost
        [why] = json.loads(kept.with_name(kept.name + ".refusal.json").read_text())
        assert why["server"] == SERVER and why["code"] == IntegrityError.code
        assert [a["digest"] for a in report.refused_artifacts] == [f"blake3:{art.name}"]
        assert report.left() and report.held_refused_artifacts == 1  # `ledger push` exits 1
        assert any("refused the spooled artifact" in n for n in report.notices())
        assert report.to_json()["held_refused_artifacts"] == 1
        again = push_spool(led, server=SERVER, token=None, client=client)  # type: ignore[arg-type]
        assert client.uploads == 1, "never sent to that server again"
        assert again.left() and any("refused for good earlier" in n for n in again.notices())
    finally:
        led.close()


def test_a_refused_artifact_still_waits_for_another_server(tmp_path: Path) -> None:
    led = Ledger.init(tmp_path / "home")
    try:
        other = "http://other.example:8080"
        spool, art = _spooled_artifact(tmp_path, led, [SERVER, other])
        push_spool(led, server=SERVER, token=None, client=_Refusing(SERVER))  # type: ignore[arg-type]
        assert spool.artifact_files() == [art] and spool.artifact_targets(art) == [other]
        assert [p.name for p in spool.refused_artifact_files()] == [art.name]
    finally:
        led.close()
