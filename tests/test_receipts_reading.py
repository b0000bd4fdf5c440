"""Issue 12, the closing note: one reading of "a receipt of this log", and receipts checked without a blind
window.

1. The signing guard (``ledger.log.receipt_place``) set aside a kept receipt that names no log, as if it
   were another log's, while ``ledger audit`` (``ledger.proofs``) checked and refused it. Both now read
   ``ledger.log.receipt_of_log``: a receipt is set aside only when it names another log and nothing of it
   names this one. The table below runs both callers on the same receipts: it fails when they drift.
2. ``receipts.jsonl`` rewritten in place keeping its length and its last 4 KiB went unnoticed by a
   long-lived process until restart (``Home.receipts_since`` kept only the inode, the offset and the last
   4 KiB read). It now keeps the file's status (inode, size, mtime, ctime) and the BLAKE3 of every byte
   read: an unchanged status is trusted, any other is checked against the digest.
3. The sequencer's fast path (a head this process left) still leaves the receipts check to every checkpoint:
   at every append it looks each kept receipt past the held checkpoint up again in the database (2.5-3.8x
   per append with 200 kept, bench/bench_receipts_check.py), the sound file check itself <= 0.1 ms.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import ledger.home
from ledger.errors import ConfigError, LogInconsistentError, ProofError
from ledger.home import Home
from ledger.log import LogRecord, receipt_of_log, receipt_place, sign_receipt
from ledger.proofs import AuditReport, _receipts_of
from ledger.service import Ledger
from ledger.signing import SigningKey
from tests.test_fix67_log_reads import Log

ORIGIN = "ledger.example/log"
OTHER = "other.example/log"
ADMIN = "admin"


@pytest.fixture(autouse=True)
def _no_timed_publication(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEDGER_CHECKPOINT_INTERVAL", "3600")


def _receipt(origin: str = ORIGIN, key_name: str | None = None) -> dict[str, Any]:
    record = LogRecord(3, "2025-01-01T00:00:00.000000Z", "ab" * 32, "note", "admin")
    return sign_receipt(origin, record, SigningKey.generate("log"), key_name=key_name).to_json()


def _with_note_origin(doc: dict[str, Any], origin: str) -> dict[str, Any]:
    lines = doc["note"].split("\n")
    lines[1] = origin
    return {**doc, "note": "\n".join(lines)}


def _signed_by_this_key_only() -> dict[str, Any]:
    """Its JSON and note name another log; a signature line is by this log's key name."""
    return _receipt(OTHER, key_name=ORIGIN)


def _drop(doc: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in keys}


# (name, the receipt, whether it is this log's): "this log's" is checked (and refused when it cannot be)
TABLE: list[tuple[str, Callable[[], dict[str, Any]], bool]] = [
    ("this log's", _receipt, True),
    ("another log's", lambda: _receipt(OTHER), False),
    ("another log's, its note dropped", lambda: _drop(_receipt(OTHER), "note"), False),
    ("none named: origin and note dropped", lambda: _drop(_receipt(), "origin", "note"), True),
    (
        "none named: origin renamed, note dropped",
        lambda: {**_drop(_receipt(), "origin", "note"), "origin_": ORIGIN},
        True,
    ),
    ("none named: origin null", lambda: {**_drop(_receipt(), "note"), "origin": None}, True),
    ("none named: origin mistyped (int)", lambda: {**_drop(_receipt(), "note"), "origin": 5}, True),
    ("none named: origin mistyped (list)", lambda: {**_drop(_receipt(), "note"), "origin": [ORIGIN]}, True),
    ("none named: origin empty", lambda: {**_drop(_receipt(), "note"), "origin": ""}, True),
    ("none named: note mistyped", lambda: {**_drop(_receipt(), "origin"), "note": 5}, True),
    (
        "none named: note no receipt note",
        lambda: {**_drop(_receipt(), "origin"), "note": "hello\nworld"},
        True,
    ),
    ("empty object", dict, True),
    ("note names this, JSON another", lambda: {**_receipt(), "origin": OTHER}, True),
    ("note names another, JSON this", lambda: {**_receipt(OTHER), "origin": ORIGIN}, True),
    ("note names this, origin dropped", lambda: _drop(_receipt(), "origin"), True),
    ("note names this, origin mistyped", lambda: {**_receipt(), "origin": 7}, True),
    ("note names another, origin mistyped", lambda: {**_receipt(OTHER), "origin": 7}, False),
    ("note names another, origin empty", lambda: {**_receipt(OTHER), "origin": ""}, False),
    (
        "note origin line empty, JSON another",
        lambda: _with_note_origin(_receipt(OTHER), ""),
        False,
    ),
    (
        "note origin line empty, origin dropped",
        lambda: _drop(_with_note_origin(_receipt(OTHER), ""), "origin"),
        True,
    ),
    ("signature line by this key only", _signed_by_this_key_only, True),
    (
        "signature line by this key, note and origin dropped",
        lambda: _drop(_signed_by_this_key_only(), "origin"),
        True,
    ),
    ("fields reordered", lambda: dict(reversed(list(_receipt().items()))), True),
    ("another log's, fields reordered", lambda: dict(reversed(list(_receipt(OTHER).items()))), False),
    ("index mistyped", lambda: {**_receipt(), "index": "3"}, True),
    ("entry_id mistyped", lambda: {**_receipt(), "entry_id": 3}, True),
    ("another log's, index mistyped", lambda: {**_receipt(OTHER), "index": "3"}, False),
]


def _guard_reads_as_ours(doc: dict[str, Any]) -> bool:
    """The signing guard: None is set aside; a place, or a refusal naming what is wrong, is this log's."""
    try:
        return receipt_place(doc, ORIGIN, ORIGIN) is not None
    except ProofError:
        return True


def _audit_reads_as_ours(doc: dict[str, Any]) -> bool:
    report = AuditReport(ORIGIN)
    ours = _receipts_of(report, [doc], ORIGIN, ORIGIN)
    assert len(ours) + report.other_logs == 1
    return bool(ours)


@pytest.mark.parametrize(("name", "make", "ours"), TABLE, ids=[t[0] for t in TABLE])
def test_the_signing_guard_and_the_audit_read_a_receipt_of_this_log_alike(
    name: str, make: Callable[[], dict[str, Any]], ours: bool
) -> None:
    doc = make()
    assert receipt_of_log(doc, ORIGIN, ORIGIN) is ours
    assert _guard_reads_as_ours(doc) is ours, "the signing guard"
    assert _audit_reads_as_ours(doc) is ours, "ledger audit"


@pytest.mark.parametrize("doc", [None, 5, "receipt", [ORIGIN]], ids=["null", "int", "text", "list"])
def test_a_kept_line_that_is_no_object_names_no_log_and_is_checked(doc: Any) -> None:
    assert receipt_of_log(doc, ORIGIN, ORIGIN)
    assert _audit_reads_as_ours(doc)


@pytest.mark.parametrize(
    ("doc", "why"),
    [
        (
            {"index": 3, "entry_id": "ab" * 32},
            "it names no log: it has no origin field and its note names none",
        ),
        ({"origin": None, "index": 3, "entry_id": "ab" * 32}, "it names no log: its origin field is None"),
        ({"origin": 5, "index": 3, "entry_id": "ab" * 32}, "it names no log: its origin field is 5 (int)"),
        ({"origin": "", "index": 3, "entry_id": "ab" * 32}, "it names no log: its origin field is ''"),
    ],
    ids=["dropped", "null", "int", "empty"],
)
def test_a_receipt_naming_no_log_is_refused_by_the_signing_guard_not_set_aside(doc: Any, why: str) -> None:
    with pytest.raises(ProofError, match=why.replace("(", r"\(").replace(")", r"\)")):
        receipt_place(doc, ORIGIN, ORIGIN)


# --- the same, through a home: the guard refuses to sign, the audit names it ------------------------------


@pytest.fixture
def led(tmp_path: Path) -> Iterator[Ledger]:
    led = Ledger.init(tmp_path / "home", home_bound=True)
    for i in range(3):
        led.record("note", {"campaign": "c"}, {"text": f"n{i}"}, key=ADMIN)
    yield led
    led.close()


def _keep_raw(led: Ledger, doc: dict[str, Any]) -> None:
    with led.home.receipts_path.open("a") as f:
        f.write(json.dumps(doc) + "\n")


@pytest.mark.parametrize("edit", ["origin dropped", "origin null", "origin int"])
def test_a_kept_receipt_naming_no_log_stops_signing_and_is_the_audits_problem(led: Ledger, edit: str) -> None:
    last = led.home.receipts()[-1]
    doc = _drop(last, "origin", "note")
    if edit == "origin null":
        doc["origin"] = None
    elif edit == "origin int":
        doc["origin"] = 5
    _keep_raw(led, doc)
    fresh = Ledger.open(led.home_path, home_bound=False)
    try:
        with pytest.raises(ConfigError, match="it names no log"):
            fresh.signed_checkpoint()
    finally:
        fresh.close()
    report = led.audit()
    assert not report and report.other_logs == 0


def test_a_kept_receipt_of_another_log_still_signs(led: Ledger) -> None:
    """Neighbour: a receipt that names another log, and nothing of this one, is set aside."""
    _keep_raw(led, _receipt(OTHER))
    fresh = Ledger.open(led.home_path, home_bound=False)
    try:
        assert fresh.signed_checkpoint().size == led.size()
    finally:
        fresh.close()


# --- 2. an in-place edit keeping the length and the last 4 KiB --------------------------------------------


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[tuple[Ledger, Ledger]]:
    """A CLI (home-bound) and a long-running server of one home; receipts past the held checkpoint."""
    cli = Ledger.init(tmp_path / "home", home_bound=True)
    srv = Ledger.open(cli.home_path, home_bound=False)
    cli.record("note", {"campaign": "c"}, {"text": "n"}, key=ADMIN)
    srv.signed_checkpoint()
    for i in range(12):  # more than 4 KiB of receipts past the held checkpoint
        cli.record("note", {"campaign": "c"}, {"text": f"m{i}"}, key=ADMIN)
    yield cli, srv
    srv.close()
    cli.close()


def _rewrite_in_place(path: Path, data: bytes) -> None:
    inode, size = path.stat().st_ino, path.stat().st_size
    with path.open("r+b") as f:
        f.write(data)
    assert (path.stat().st_ino, path.stat().st_size) == (inode, size)


def test_receipts_edited_in_place_keeping_length_and_last_4kib_are_read_again(
    shared: tuple[Ledger, Ledger],
) -> None:
    cli, srv = shared
    held = srv.held()
    assert held is not None
    assert srv._receipt_fault(held.size) is None  # the server read the file
    rp = cli.home.receipts_path
    data = rp.read_bytes()
    lines = data.splitlines(keepends=True)
    first = next(i for i, x in enumerate(lines) if json.loads(x)["index"] == held.size)
    assert sum(len(x) for x in lines[first + 1 :]) > 4096
    doc = json.loads(lines[first])
    forged = lines[first].replace(doc["entry_id"].encode(), b"cd" * 32)
    assert len(forged) == len(lines[first])
    _rewrite_in_place(rp, b"".join(lines[:first]) + forged + b"".join(lines[first + 1 :]))
    assert rp.read_bytes()[-4096:] == data[-4096:]
    fault = srv._receipt_fault(held.size)
    assert fault is not None and isinstance(fault[0], LogInconsistentError)
    assert fault[1:] == (held.size, "cd" * 32)


def test_receipts_only_appended_to_are_read_on_and_an_unchanged_status_reads_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neighbour: a settled file (its status older than ``_RACY_NS``) whose status is unchanged is trusted
    without reading a byte before where the read ended; one appended to is read on, not again."""
    monkeypatch.setattr(ledger.home, "_RACY_NS", 0)
    home = Home(tmp_path)
    home.keep_receipts([_receipt()])
    docs, read = home.receipts_since()
    assert len(docs) == 1 and read.stat is not None and read.digest is not None
    reads: list[int] = []
    real = os.pread
    monkeypatch.setattr(ledger.home.os, "pread", lambda fd, n, at: reads.append(at) or real(fd, n, at))
    docs, again = home.receipts_since(read)
    assert docs == [] and not again.restarted and reads == []
    home.keep_receipts([_receipt(OTHER)])
    docs, again2 = home.receipts_since(again)
    assert [d["origin"] for d in docs] == [OTHER] and not again2.restarted
    assert again2.offset == home.receipts_path.stat().st_size


@pytest.mark.parametrize("where", ["first byte", "middle", "just before the last 4 KiB"])
def test_a_same_length_edit_anywhere_before_the_read_end_restarts_the_read(
    tmp_path: Path, where: str
) -> None:
    home = Home(tmp_path)
    home.keep_receipts([{**_receipt(), "index": i} for i in range(12)])
    _, read = home.receipts_since()
    rp = home.receipts_path
    data = bytearray(rp.read_bytes())
    at = {"first byte": 1, "middle": len(data) // 2, "just before the last 4 KiB": len(data) - 4097}[where]
    data[at] = ord(" ") if data[at] != ord(" ") else ord("\t")  # JSON whitespace or not: bytes differ
    _rewrite_in_place(rp, bytes(data))
    try:
        _, again = home.receipts_since(read)
    except ConfigError:
        return  # the edited line is no receipt: refused, never read on
    assert again.restarted


def test_a_read_changed_too_recently_keeps_no_status_and_is_checked_by_its_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neighbour: a status that may change again within one timestamp tick is not trusted."""
    monkeypatch.setattr(ledger.home, "_RACY_NS", 3600 * 10**9)
    home = Home(tmp_path)
    home.keep_receipts([_receipt()])
    _, read = home.receipts_since()
    assert read.stat is None and read.digest is not None
    _, again = home.receipts_since(read)
    assert not again.restarted
    rp = home.receipts_path
    _rewrite_in_place(rp, rp.read_bytes().replace(b'"index":3', b'"index":4'))
    _, again = home.receipts_since(again)
    assert again.restarted


# --- 3. the sequencer checks the kept receipts at every append --------------------------------------------


def test_a_receipt_lost_between_checkpoints_is_never_checkpointed_by_a_long_lived_server(
    shared: tuple[Ledger, Ledger],
) -> None:
    """The sequencer's fast path leaves the kept receipts to the checkpoints (checked at every append, it
    cost 2.5-3.8x per append: bench/bench_receipts_check.py); every checkpoint form refuses the loss."""
    cli, srv = shared
    srv.record("note", {"campaign": "c"}, {"text": "srv"}, key=ADMIN)  # the head this server left
    cli.record("note", {"campaign": "c"}, {"text": "cli"}, key=ADMIN)
    lost = cli.home.receipts()[-1]
    held = srv.held()
    Log(cli, cli.database_url).delete_from(lost["index"])
    for sign in (srv.checkpoint, srv.signed_checkpoint, srv.publish_checkpoint):
        with pytest.raises(
            LogInconsistentError, match=f"lost entry {lost['entry_id']} at index {lost['index']}"
        ):
            sign()
    assert srv.held() == held


def test_a_server_whose_kept_receipts_stand_appends_and_checkpoints(shared: tuple[Ledger, Ledger]) -> None:
    """Neighbour: nothing lost, every append and the checkpoint sign."""
    cli, srv = shared
    for i in range(3):
        srv.record("note", {"campaign": "c"}, {"text": f"s{i}"}, key=ADMIN)
        cli.record("note", {"campaign": "c"}, {"text": f"c{i}"}, key=ADMIN)
    assert srv.size() == cli.size()
    assert srv.signed_checkpoint().size == cli.size()
