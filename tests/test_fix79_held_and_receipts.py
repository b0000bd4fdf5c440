"""Issue 12, fix 79 (audit 70): three holes in the held-checkpoint and receipts guards of fix 67.

F1. A checkpoint signed from a snapshot read before a rollback was handed out when another request had
    meanwhile held one of the regrown log of the same (or a larger) size: ``Ledger._hold`` returned early on
    size alone. A checkpoint no newer than the held one is handed out only where it is the held one's tree
    at its size (``Ledger._within_held``), else ``LogInconsistentError``.
F2. A last line of ``receipts.jsonl`` without its newline, a whole receipt, was skipped by the signing guard
    (``Home.receipts_since``) while ``keep_receipts`` and ``Home.receipts`` (the audit) read it: one reading.
F3. ``receipts.jsonl`` emptied and refilled in place (same inode) was read from the old byte offset by a
    running process: a loss signed over (refilled shorter), every signature refused (refilled longer). A
    file shorter than where the read ended, or with other bytes just before it, is read again from byte 0.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ledger.errors import ConfigError, LogInconsistentError
from ledger.home import Home, ReceiptsRead
from ledger.log import Checkpoint, sign_checkpoint
from ledger.service import Ledger
from tests.api.conftest import fresh_pg_database
from tests.test_fix67_log_reads import Log

ADMIN = "admin"


@pytest.fixture(autouse=True)
def _no_timed_publication(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sequencer publishes only when a test says so (no checkpoint held behind the test's back)."""
    monkeypatch.setenv("LEDGER_CHECKPOINT_INTERVAL", "3600")


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """None for the home's SQLite file, or a fresh PostgreSQL database (fails in CI without the server)."""
    if request.param == "sqlite":
        yield None
        return
    with fresh_pg_database() as url:
        yield url


def _note(led: Ledger, text: str) -> None:
    led.append([led.sign(led.make_statement("note", {"campaign": "c"}, {"text": text}), ADMIN)])


# --- F1: a checkpoint no newer than the held one ----------------------------------------------------------


@pytest.fixture
def served(tmp_path: Path, backend: str | None) -> Iterator[Log]:
    """A log opened as ``ledger serve`` opens it (not home-bound), holding a checkpoint of size 5, with 5
    entries past it never signed."""
    led = Ledger.init(tmp_path / "home", database_url=backend, home_bound=False)
    for i in range(4):
        _note(led, f"base{i}")
    assert led.checkpoint().size == 5
    for i in range(5):
        _note(led, f"A{i}")
    yield Log(led, led.database_url)
    led.close()


def _paused_request(
    monkeypatch: pytest.MonkeyPatch, call: Callable[[], Checkpoint]
) -> tuple[threading.Thread, threading.Event, dict[str, Any]]:
    """``call`` run on a thread that pauses between its snapshot and its signature (``Ledger._sign``) until
    the returned event is set; its result (or error) lands in the dict."""
    real = Ledger._sign
    go, paused = threading.Event(), threading.Event()

    def slow_sign(self: Ledger, size: int, root: bytes, **kw: Any) -> Checkpoint:
        if threading.current_thread().name == "req1":
            paused.set()
            assert go.wait(30)
        return real(self, size, root, **kw)

    monkeypatch.setattr(Ledger, "_sign", slow_sign)
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["cp"] = call()
        except Exception as e:  # the test reads it
            out["err"] = e

    t = threading.Thread(target=run, name="req1")
    t.start()
    assert paused.wait(30)
    return t, go, out


def _rollback_and_regrow(log: Log, to: int, n: int) -> None:
    log.delete_from(to)
    for i in range(n):
        _note(log.led, f"B{i}")


@pytest.mark.parametrize("regrown", [5, 8])  # request 2 holds the same size as request 1's, or a larger one
def test_a_checkpoint_signed_before_a_rollback_is_not_handed_out_beside_the_regrown_logs(
    served: Log, monkeypatch: pytest.MonkeyPatch, regrown: int
) -> None:
    led = served.led
    t, go, out = _paused_request(monkeypatch, led.signed_checkpoint)
    _rollback_and_regrow(served, 5, regrown)
    cp_b = led.signed_checkpoint()  # request 2: held
    go.set()
    t.join(30)
    assert cp_b.size == 5 + regrown and led.held() == cp_b
    assert "cp" not in out, "a fork was handed out"
    err = out["err"]
    assert isinstance(err, LogInconsistentError), err
    assert f"is not the tree of the checkpoint this home holds (size {cp_b.size}" in err.message


def test_a_checkpoint_signed_while_the_log_grew_is_handed_out_below_a_larger_held_one(
    served: Log, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neighbour: no rollback, request 2 held a larger checkpoint of the same log: request 1's is its
    prefix, proved on the database, and handed out; so is a consistency proof's old checkpoint."""
    led = served.led
    t, go, out = _paused_request(monkeypatch, led.signed_checkpoint)
    for i in range(3):
        _note(led, f"more{i}")
    cp_b = led.signed_checkpoint()
    go.set()
    t.join(30)
    assert "err" not in out, out
    cp_a = out["cp"]
    assert cp_a.size == 10 < cp_b.size == 13 and led.held() == cp_b
    assert led.tree().root(10) == cp_a.root
    proof = led.consistency(7)
    assert proof["old_size"] == 7 and led.held() == cp_b


def test_the_held_checkpoint_signed_again_is_handed_out(served: Log) -> None:
    led = served.led
    cp = led.signed_checkpoint()
    assert led.held() == cp
    assert led.signed_checkpoint() == cp and led.signed_checkpoint(size=cp.size) == cp


def _forged(led: Ledger, size: int, root: bytes) -> Checkpoint:
    """A checkpoint signed under the log's key, not held (what a request holds last, ``_hold``)."""
    return sign_checkpoint(led.cfg.origin, size, root, led._log_signing_key(), key_name=led.note_key_name)


def test_a_checkpoint_of_the_held_size_with_another_root_is_refused(served: Log) -> None:
    led = served.led
    held = led.signed_checkpoint()
    other = bytes([held.root[0] ^ 1]) + held.root[1:]  # one bit off
    with pytest.raises(LogInconsistentError, match="not the tree of the checkpoint this home holds"):
        led._hold(_forged(led, held.size, other))
    assert led.held() == held


@pytest.mark.parametrize("change", ["one bit off", "another size's root"])
def test_a_smaller_checkpoint_that_is_not_the_held_trees_prefix_is_refused(served: Log, change: str) -> None:
    led = served.led
    held = led.signed_checkpoint()
    root = led.tree().root(6)
    bad = bytes([root[0] ^ 1]) + root[1:] if change == "one bit off" else led.tree().root(7)
    with pytest.raises(LogInconsistentError, match=r"at size 6: the log changed while it was signed"):
        led._hold(_forged(led, 6, bad))
    led._hold(_forged(led, 6, root))  # its true prefix: proved, handed out
    led._hold(_forged(led, 6, root))  # again: the proof is kept
    assert led.held() == held


def test_a_smaller_checkpoint_is_refused_where_the_log_no_longer_extends_the_held_one(served: Log) -> None:
    """Neighbour: the prefix cannot be proved on a log rolled back below the held checkpoint: refused,
    even with the root that was right (nothing vouches for it now)."""
    led = served.led
    held = led.signed_checkpoint()
    root6 = led.tree().root(6)
    served.delete_from(8)
    with pytest.raises(LogInconsistentError, match="at size 6"):
        led._hold(_forged(led, 6, root6))
    assert led.held() == held


# --- F2: a last receipt without its newline ---------------------------------------------------------------


@pytest.fixture
def receipted(tmp_path: Path, backend: str | None) -> Iterator[tuple[Log, Checkpoint]]:
    """A home-bound ledger holding a checkpoint of size 5, with 3 receipted entries past it."""
    led = Ledger.init(tmp_path / "home", database_url=backend, home_bound=True)
    for i in range(4):
        led.record("note", {"campaign": "c"}, {"text": f"n{i}"}, key=ADMIN)
    held = led.checkpoint()
    for i in range(3):
        led.record("note", {"campaign": "c"}, {"text": f"m{i}"}, key=ADMIN)
    assert led.held() == held and led.size() == held.size + 3
    yield Log(led, led.database_url), held
    led.close()


def _server(log: Log) -> Ledger:
    return Ledger.open(log.led.home_path, database_url=log.url, home_bound=False)


def test_a_last_receipt_without_its_newline_still_guards_the_log(receipted: tuple[Log, Checkpoint]) -> None:
    log, held = receipted
    rp = log.led.home.receipts_path
    rp.write_bytes(rp.read_bytes().rstrip(b"\n"))
    last = held.size + 2
    log.delete_from(last)
    for led in (_server(log), Ledger.open(log.led.home_path, database_url=log.url, home_bound=True)):
        try:
            with pytest.raises(LogInconsistentError, match=f"at index {last}, whose signed receipt"):
                led.signed_checkpoint()
            with pytest.raises(LogInconsistentError, match=f"at index {last}, whose signed receipt"):
                led.signed_checkpoint()  # read again: the line is still the last, still without newline
        finally:
            led.close()


def test_a_last_receipt_without_its_newline_read_before_its_newline_came_is_read_once(
    receipted: tuple[Log, Checkpoint],
) -> None:
    """Neighbour: a server read the line without its newline; the next receipt kept ends it (a newline
    first): both read, and a loss of the first still refused."""
    log, held = receipted
    rp = log.led.home.receipts_path
    rp.write_bytes(rp.read_bytes().rstrip(b"\n"))
    srv = _server(log)
    try:
        # each read (at the held size: nothing held moves) reads the receipts kept since the last one
        assert srv.signed_checkpoint(size=held.size) == held
        log.led.record("note", {"campaign": "c"}, {"text": "after"}, key=ADMIN)
        assert all(json.loads(line) for line in rp.read_bytes().splitlines())
        assert srv.signed_checkpoint(size=held.size) == held
        assert srv._kept is not None and sorted(srv._kept[2]) == list(range(held.size, held.size + 4))
        log.delete_from(held.size + 2)
        with pytest.raises(LogInconsistentError, match=f"at index {held.size + 2}, whose signed receipt"):
            srv.signed_checkpoint()
    finally:
        srv.close()


_R1 = {"origin": "o", "index": 1, "entry_id": "a" * 64}
_R2 = {"origin": "o", "index": 2, "entry_id": "b" * 64}
_L1, _L2 = json.dumps(_R1).encode(), json.dumps(_R2).encode()


@pytest.mark.parametrize(
    "content",
    [
        _L1 + b"\n" + _L2 + b"\n",
        _L1 + b"\n" + _L2,  # the last newline lost
        _L1 + b"\n\n" + _L2 + b"\n  ",  # blank lines, a blank tail
        _L1 + b"\r\n" + _L2,  # CRLF
        _L2,  # one line, no newline
        b"",
    ],
)
def test_the_signing_guard_reads_the_receipts_the_audit_reads(tmp_path: Path, content: bytes) -> None:
    home = Home(tmp_path)
    home.receipts_path.write_bytes(content)
    docs, read = home.receipts_since()
    assert docs == home.receipts()
    again, read2 = home.receipts_since(read)
    assert not read2.restarted
    assert again == ([_R2] if content.endswith(_L2) else [])  # a last line without newline: read again


@pytest.mark.parametrize(
    "tail",
    [_L2[:-1], _L2[:10], b"[1, 2]", b'"a receipt"', b"\xff\xfe"],  # torn, a JSON value not an object
)
def test_a_last_line_that_is_no_whole_receipt_is_a_write_under_way(tmp_path: Path, tail: bytes) -> None:
    """Neighbour: what ``keep_receipts`` cuts as torn is not read yet by the guard (and is not a
    receipt to the audit): read once whole."""
    home = Home(tmp_path)
    home.receipts_path.write_bytes(_L1 + b"\n" + tail)
    docs, read = home.receipts_since()
    assert docs == [_R1] and read.offset == len(_L1) + 1
    with pytest.raises(ConfigError, match="not a receipt"):
        home.receipts()
    home.receipts_path.write_bytes(_L1 + b"\n" + _L2 + b"\n")  # the write completed (same inode)
    docs, read = home.receipts_since(read)
    assert docs == [_R2] and not read.restarted


# --- F3: receipts.jsonl rewritten in place ----------------------------------------------------------------


def _rewrite_in_place(path: Path, data: bytes) -> None:
    """``cp other receipts.jsonl``: the same inode, new bytes."""
    inode = path.stat().st_ino
    with path.open("r+b") as f:
        f.truncate(0)
        f.write(data)
    assert path.stat().st_ino == inode


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[tuple[Ledger, Ledger]]:
    """A CLI (home-bound) and a long-running server of one home; the server has read receipts.jsonl."""
    cli = Ledger.init(tmp_path / "home", home_bound=True)
    srv = Ledger.open(cli.home_path, home_bound=False)
    for i in range(6):
        cli.record("note", {"campaign": "c"}, {"text": f"n{i}"}, key=ADMIN)
    assert srv.signed_checkpoint().size == 7
    yield cli, srv
    srv.close()
    cli.close()


def test_receipts_emptied_and_refilled_shorter_are_read_again_and_a_loss_refused(
    shared: tuple[Ledger, Ledger],
) -> None:
    cli, srv = shared
    rp = cli.home.receipts_path
    before = rp.stat().st_size
    os.truncate(rp, 0)
    cli.record("note", {"campaign": "c"}, {"text": "m0"}, key=ADMIN)
    cli.record("note", {"campaign": "c"}, {"text": "m1"}, key=ADMIN)
    assert rp.stat().st_size < before
    lost = cli.home.receipts()[-1]
    Log(cli, cli.database_url).delete_from(lost["index"])
    with pytest.raises(LogInconsistentError, match=f"lost entry {lost['entry_id']} at index {lost['index']}"):
        srv.signed_checkpoint()


@pytest.mark.parametrize("how", ["truncate", "cp"])
def test_receipts_emptied_and_refilled_longer_are_read_again_and_signed(
    shared: tuple[Ledger, Ledger], how: str
) -> None:
    cli, srv = shared
    rp = cli.home.receipts_path
    before = rp.stat().st_size
    if how == "truncate":
        os.truncate(rp, 0)
    else:
        _rewrite_in_place(rp, rp.read_bytes().splitlines(keepends=True)[0])  # an older copy: genesis only
    for i in range(8):
        cli.record("note", {"campaign": "c"}, {"text": f"m{i}"}, key=ADMIN)
    assert rp.stat().st_size > before
    assert srv.signed_checkpoint().size == cli.size() == 15


def test_receipts_rewritten_in_place_to_the_same_length_are_read_again(shared: tuple[Ledger, Ledger]) -> None:
    """Neighbour: no byte more or less, the last line now another receipt of this log (an entry the log
    never held, past the held checkpoint): read from the start, and the loss refused."""
    cli, srv = shared
    rp = cli.home.receipts_path
    lines = rp.read_bytes().splitlines(keepends=True)
    forged: dict[str, Any] = {"origin": cli.origin, "index": 7, "entry_id": "ab" * 32, "pad": ""}
    short = len(json.dumps(forged).encode()) + 1
    forged["pad"] = "x" * (len(lines[-1]) - short)
    new_last = json.dumps(forged).encode() + b"\n"
    assert len(new_last) == len(lines[-1])
    _rewrite_in_place(rp, b"".join(lines[:-1]) + new_last)
    with pytest.raises(LogInconsistentError, match=f"lost entry {'ab' * 32} at index 7"):
        srv.signed_checkpoint()


def test_receipts_appended_to_are_read_on_from_where_the_read_ended(tmp_path: Path) -> None:
    """Neighbour: only appended (the same bytes before, however many after): not read again; a copy of
    the same file with more lines (``cp`` of a longer copy) is an append too."""
    home = Home(tmp_path)
    home.keep_receipts([_R1])
    docs, read = home.receipts_since()
    assert docs == [_R1] and read.offset == home.receipts_path.stat().st_size
    home.keep_receipts([_R2])
    docs, read2 = home.receipts_since(read)
    assert docs == [_R2] and not read2.restarted and read2.offset > read.offset
    _rewrite_in_place(home.receipts_path, home.receipts_path.read_bytes() + _L1 + b"\n")
    docs, read3 = home.receipts_since(read2)
    assert docs == [_R1] and not read3.restarted


@pytest.mark.parametrize("how", ["removed", "replaced", "emptied", "other bytes"])
def test_a_receipts_file_gone_or_rewritten_is_read_from_its_start(tmp_path: Path, how: str) -> None:
    home = Home(tmp_path)
    home.keep_receipts([_R1, _R2])
    _, read = home.receipts_since()
    rp = home.receipts_path
    if how == "removed":
        rp.unlink()
        docs, again = home.receipts_since(read)
        assert docs == [] and again.restarted
        return
    if how == "replaced":  # a new file renamed over it (another inode)
        (tmp_path / "new").write_bytes(_L2 + b"\n" + _L1 + b"\n")
        (tmp_path / "new").rename(rp)
    elif how == "emptied":
        os.truncate(rp, 0)
    else:
        _rewrite_in_place(rp, _L2 + b"\n" + _L1 + b"\n")  # the same length, the lines swapped
    docs, again = home.receipts_since(read)
    assert again.restarted and docs == home.receipts()


def test_a_read_kept_of_another_file_is_not_continued(tmp_path: Path) -> None:
    """Neighbour: a read whose inode, offset or anchor does not fit the file starts again at byte 0."""
    home = Home(tmp_path)
    home.keep_receipts([_R1, _R2])
    _, read = home.receipts_since()
    for stale in (
        ReceiptsRead(read.inode + 1, read.offset, read.anchor),
        ReceiptsRead(read.inode, read.offset + 1, read.anchor),
        ReceiptsRead(read.inode, read.offset, b"x" + read.anchor[1:]),
    ):
        docs, again = home.receipts_since(stale)
        assert again.restarted and docs == [_R1, _R2]
