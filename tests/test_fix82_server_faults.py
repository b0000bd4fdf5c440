"""Fix 82 (issue 12): a fault of the server's own state never makes a collector set its evidence aside.

f1: the server's log clock (its head logged ahead of its clock), its held checkpoint (``HOME/checkpoint``
not of its log, or unreadable), its kept receipts (``HOME/receipts.jsonl`` unreadable) and its log's rows
(un-migrated: no log record) are the server's faults, met on every append: the server answers HTTP 500
(``HOME_FAULTS``: the fault's own code, or ``home-fault`` naming the error met), ``ledger push`` keeps the
entry in ``spool/entries`` (never ``spool/refused``), and an online collect spools it. The client's own
bad input keeps its 4xx and is still set aside.

f3: after a whole-server restore the log signs a receipt for an index the collector already holds a receipt
of, naming another entry (the signed proof of a fork): it is refused, the entry stays spooled, the push
exits non-zero naming both entries and the index, and both receipts are kept aside in ``spool/forks/``.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from ledger.api.errors import status_for
from ledger.collectors.remote import (
    LedgerClient,
    LogKeys,
    RemoteRecorder,
    Spool,
    _raise_for,
    _refuse_forked,
    make_recorder,
)
from ledger.errors import (
    HOME_FAULTS,
    ConfigError,
    HomeFaultError,
    LogClockAheadError,
    LogFormatError,
    LogOrderError,
    ProofError,
    ReceiptForkError,
    RemoteUnavailableError,
    SchemaError,
)
from ledger.proofs import check_receipt
from ledger.service import Ledger
from ledger.tokens import create_token
from tests.api.conftest import LEDGER_BIN, Server, free_port, start_server


@dataclass
class Setup:
    srv: Ledger
    host: Ledger
    url: str
    port: int
    writer: str
    tmp: Path

    def recorder(self, key: str = "gpu01") -> RemoteRecorder:
        rec = make_recorder(self.host, key, server=self.url, token=self.writer)
        assert isinstance(rec, RemoteRecorder)
        return rec

    def record(self, text: str, key: str = "gpu01") -> tuple[str, list[str]]:
        """Collect one entry; its id and the ids the recorder could only spool."""
        rec = self.recorder(key)
        try:
            entry_id = rec.record("note", {"campaign": "c1"}, {"text": text})
        finally:
            rec.close()
        return entry_id, rec.spooled

    def push(self) -> subprocess.CompletedProcess[str]:
        argv = [LEDGER_BIN, "push", "--home", str(self.host.home.path), "--server", self.url]
        return subprocess.run(
            [*argv, "--token", self.writer], check=False, capture_output=True, text=True, timeout=120
        )

    def serve(self) -> Server:
        return start_server(self.srv.home.path, port=self.port)

    @property
    def spool(self) -> Spool:
        return Spool(self.host.home.spool_dir)

    def spooled_ids(self) -> list[str]:
        return [p.stem.split("-", 1)[1] for p in self.spool.entry_files()]


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    srv = Ledger.init(tmp_path / "srv")
    host = Ledger.init(tmp_path / "gpu")
    host.new_key("gpu01", ["collector"])
    srv.enrol_key("gpu01", host.signing_key("gpu01").public.b64, ["collector"])
    writer, _ = create_token(srv.engine, "gh", "writer")
    port = free_port()
    s = Setup(srv, host, f"http://127.0.0.1:{port}", port, writer, tmp_path)
    yield s
    host.close()
    srv.close()


# --- the server's faults, each made while the server is down; each returns how to repair it (or None) -------


def _clock_ran_ahead(s: Setup) -> Callable[[], None] | None:
    """The server's clock ran two days ahead for one entry (then NTP set it right)."""
    st = s.srv.make_statement("note", {"campaign": "ops"}, {"text": "written while the clock ran ahead"})
    s.srv.append([s.srv.sign(st, "admin")], logged_at=datetime.now(UTC) + timedelta(days=2))
    return None


def _replace(path: Path, data: bytes) -> Callable[[], None]:
    before = path.read_bytes() if path.exists() else None
    path.write_bytes(data)

    def repair() -> None:
        if before is None:
            path.unlink()
        else:
            path.write_bytes(before)

    return repair


def _held_of_another_log(s: Setup) -> Callable[[], None] | None:
    s.srv.checkpoint()
    other = Ledger.init(s.tmp / "other")
    try:
        note = other.checkpoint().note
    finally:
        other.close()
    return _replace(s.srv.home.checkpoint_path, note.encode())


def _held_unreadable(s: Setup) -> Callable[[], None] | None:
    s.srv.checkpoint()
    return _replace(s.srv.home.checkpoint_path, b"\xff\xfe not a note\n")


def _receipts_unreadable(s: Setup) -> Callable[[], None] | None:
    return _replace(s.srv.home.receipts_path, b"\xff\xfe\n")


def _rows_unmigrated(s: Setup) -> Callable[[], None] | None:
    """A row of the log without its log record (log format 1), below the held checkpoint."""
    s.srv.checkpoint()
    db = s.srv.home.path / "ledger.db"
    with sqlite3.connect(db) as c:
        (record,) = c.execute("SELECT record FROM log_entries WHERE seq = 1").fetchone()
        c.execute("DROP TRIGGER IF EXISTS log_entries_no_update")  # behind the log's back
        c.execute("UPDATE log_entries SET record = NULL WHERE seq = 1")

    def repair() -> None:
        with sqlite3.connect(db) as c:
            c.execute("UPDATE log_entries SET record = ? WHERE seq = 1", (record,))

    return repair


FAULTS = {
    "logged-at-ahead": (_clock_ran_ahead, "logged-at-ahead", "logged-at-ahead"),
    "held-checkpoint-of-another-log": (_held_of_another_log, "home-fault", "proof-invalid"),
    "held-checkpoint-unreadable": (_held_unreadable, "home-fault", "bad-config"),
    "receipts-unreadable": (_receipts_unreadable, "home-fault", "bad-config"),
    "rows-unmigrated": (_rows_unmigrated, "home-fault", "log-format"),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_server_fault_is_a_500_and_push_keeps_the_spooled_entry(setup: Setup, fault: str) -> None:
    """Regression (f1): the server's own fault answered 422 made `ledger push` set the entry aside for good
    and an online collect lose its entry (neither spooled nor appended)."""
    s = setup
    make, code, cause = FAULTS[fault]
    offline, spooled = s.record("collected while the server was down")
    assert spooled == [offline]
    repair = make(s)
    server = s.serve()
    try:
        size = s.srv.size()
        push = s.push()
        assert push.returncode != 0, push.stdout + push.stderr
        assert "500" in push.stderr and f"[{code}]" in push.stderr, push.stderr
        assert s.spooled_ids() == [offline] and s.spool.refused_files() == []
        # the server's answer, by HTTP: 500 with the fault's code (the error met named in it)
        envelope = json.loads(s.spool.entry_files()[0].read_bytes())
        r = httpx.post(f"{s.url}/v1/entries", json=envelope, headers={"Authorization": f"Bearer {s.writer}"})
        assert r.status_code == 500, r.text
        assert r.json()["code"] == code, r.text
        assert cause == code or f"error[{cause}]" in r.json()["detail"], r.text  # the error met, named
        # an online collect spools its entry when the server answers 5xx
        online, spooled = s.record("collected while the server is at fault")
        assert spooled == [online]
        assert sorted(s.spooled_ids()) == sorted([offline, online]) and s.spool.refused_files() == []
        assert s.srv.size() == size  # nothing appended
        if repair is not None:  # the next push after the operator's repair delivers both
            repair()
            again = s.push()
            assert again.returncode == 0, again.stdout + again.stderr
            assert s.spooled_ids() == [] and s.spool.refused_files() == []
            assert {s.srv.get(offline).entry_id, s.srv.get(online).entry_id} == {offline, online}
    finally:
        server.stop()


def test_the_clients_own_bad_entry_is_still_refused_for_good(setup: Setup) -> None:
    """Neighbour: an entry signed by a key the server does not know is the entry's fault: 4xx, set aside."""
    s = setup
    s.host.new_key("stranger", ["collector"])
    bad, _ = s.record("signed by a key the server never enrolled", key="stranger")
    good, _ = s.record("signed by an enrolled key")
    server = s.serve()
    try:
        push = s.push()
        assert s.spooled_ids() == []
        assert [p.stem.split("-", 1)[1] for p in s.spool.refused_files()] == [bad], push.stderr
        assert s.srv.get(good).entry_id == good
    finally:
        server.stop()


# --- one mapping: the server's faults are 500, the client's own proof or config keep their 4xx ----------


@pytest.mark.parametrize("cls", HOME_FAULTS, ids=lambda c: c.code)
def test_every_home_fault_is_a_server_error(cls: type[Any]) -> None:
    assert status_for(cls("x")) == 500


def test_logged_at_decreasing_is_a_server_error() -> None:
    assert status_for(LogOrderError("x")) == 500 and status_for(LogClockAheadError("x")) == 500


@pytest.mark.parametrize(
    "err", [ProofError("x"), ConfigError("x"), LogFormatError("x"), SchemaError("x")], ids=lambda e: e.code
)
def test_the_clients_own_bad_proof_or_config_keeps_its_4xx(err: Any) -> None:
    """Neighbour: the codes a server's home fault wraps stay the client's 4xx when they are the client's."""
    assert status_for(err) == 422
    wrapped = HomeFaultError.wrapping(err)
    assert status_for(wrapped) == 500 and wrapped.cause_code == err.code
    assert f"error[{err.code}]" in wrapped.message


@pytest.mark.parametrize("status", [400, 409, 422])
@pytest.mark.parametrize("code", sorted(c.code for c in HOME_FAULTS))
def test_an_older_servers_4xx_for_its_own_fault_is_try_later(code: str, status: int) -> None:
    """Neighbour: a server that still answers its own fault 4xx is read as 'try later', never as a refusal."""
    body = {"error": {"code": code, "message": "m", "hint": ""}}
    resp = httpx.Response(status, json=body, request=httpx.Request("POST", "http://x/v1/entries"))
    with pytest.raises(RemoteUnavailableError) as e:
        _raise_for(resp)
    assert e.value.server_code == code


@pytest.mark.parametrize("code", ["proof-invalid", "bad-config", "schema-violation", "unknown-signer"])
def test_an_entrys_own_refusal_is_still_a_refusal(code: str) -> None:
    body = {"error": {"code": code, "message": "m", "hint": ""}}
    resp = httpx.Response(422, json=body, request=httpx.Request("POST", "http://x/v1/entries"))
    with pytest.raises(Exception) as e:
        _raise_for(resp)
    assert not isinstance(e.value, RemoteUnavailableError) and getattr(e.value, "code", None) == code


# --- f3: a second receipt for a held index, naming another entry -------------------------------------------


def _sqlite_backup(src: Path, dst: Path) -> None:
    with sqlite3.connect(src) as a, sqlite3.connect(dst) as b:
        a.backup(b)


def test_a_receipt_forking_a_held_index_is_refused_and_kept_aside(setup: Setup) -> None:
    """Regression (f3): after a whole-server restore, push kept a second signed receipt for an index the
    home held a receipt of, naming another entry, and exited 0."""
    s = setup
    s.srv.close()  # the server's home is the server process's from here on
    srv_home = s.srv.home.path
    server = s.serve()
    try:
        early = [s.record(f"early {i}")[0] for i in range(2)]
        assert s.spooled_ids() == []
        httpx.get(f"{s.url}/v1/checkpoint", headers={"Authorization": f"Bearer {s.writer}"})
    finally:
        server.stop()
    backup = s.tmp / "backup"
    backup.mkdir()
    _sqlite_backup(srv_home / "ledger.db", backup / "ledger.db")
    shutil.copy(srv_home / "checkpoint", backup / "checkpoint")
    server = s.serve()
    try:
        late = [s.record(f"late {i}")[0] for i in range(2)]
        assert s.spooled_ids() == []
    finally:
        server.stop()
    for name in ("ledger.db", "ledger.db-wal", "ledger.db-shm"):
        (srv_home / name).unlink(missing_ok=True)
    shutil.copy(backup / "ledger.db", srv_home / "ledger.db")
    shutil.copy(backup / "checkpoint", srv_home / "checkpoint")
    receipts_before = s.host.home.receipts_path.read_bytes()
    held = {d["index"]: d["entry_id"] for d in s.host.home.receipts()}
    server = s.serve()
    try:
        rec = s.recorder()
        with pytest.raises(ReceiptForkError) as e:
            rec.record("note", {"campaign": "c1"}, {"text": "after the restore"})
        rec.close()
        (after,) = rec.spooled
        assert s.spooled_ids() == [after]  # refused: the entry stays spooled
        assert after in e.value.message and late[0] in e.value.message
        push = s.push()
        assert push.returncode != 0 and "receipt-fork" in push.stderr, push.stdout + push.stderr
        assert s.spooled_ids() == [after] and s.spool.refused_files() == []
        forks = sorted((s.host.home.spool_dir / "forks").glob("*.json"))
        assert len(forks) == 1
        proof = json.loads(forks[0].read_bytes())
        index = proof["index"]
        assert f"index {index}" in push.stderr and after in push.stderr and held[index] in push.stderr
        assert proof["kept"]["entry_id"] == held[index] == late[0] and proof["received"]["entry_id"] == after
        # the two receipts are both signed under the log's key: the proof of the fork the operator is given
        vkey = LogKeys(s.host.home.path).get(s.url)
        assert vkey is not None
        assert check_receipt(proof["kept"], vkey, late[0]).record.index == index
        assert check_receipt(proof["received"], vkey, after).record.index == index
        # nothing of the fork was kept in the home's receipts
        assert s.host.home.receipts_path.read_bytes() == receipts_before
        assert early[0] in {d["entry_id"] for d in s.host.home.receipts()}
    finally:
        server.stop()


def _receipt(index: int, entry_id: str, origin: str = "log.example/a") -> dict[str, Any]:
    return {"origin": origin, "index": index, "entry_id": entry_id, "logged_at": "2026-01-01T00:00:00Z"}


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Ledger]:
    led = Ledger.init(tmp_path / "h")
    yield led
    led.close()


def _fork_check(home: Ledger, kept: list[dict[str, Any]], new: list[dict[str, Any]]) -> None:
    home.home.keep_receipts(kept)
    client = LedgerClient("http://127.0.0.1:9")
    try:
        _refuse_forked(home, client, new)
    finally:
        client.close()


def test_the_same_entrys_receipt_again_is_no_fork(home: Ledger) -> None:
    """Neighbour: a re-sent entry answered with its own receipt (a duplicate) is kept as before."""
    _fork_check(home, [_receipt(3, "a" * 64)], [_receipt(3, "a" * 64)])


def test_another_logs_receipt_at_the_same_index_is_no_fork(home: Ledger) -> None:
    """Neighbour: two servers (two origins) each have an index 3."""
    _fork_check(home, [_receipt(3, "a" * 64)], [_receipt(3, "b" * 64, origin="log.example/b")])


def test_two_receipts_of_one_batch_at_one_index_are_a_fork(home: Ledger) -> None:
    """Neighbour: the fork is inside the batch itself (nothing kept before)."""
    with pytest.raises(ReceiptForkError, match="index 5"):
        _fork_check(home, [], [_receipt(5, "a" * 64), _receipt(5, "b" * 64)])
    assert home.home.receipts() == []


def test_a_fork_is_found_past_a_line_that_is_no_receipt(home: Ledger) -> None:
    """Neighbour: a torn or foreign line in receipts.jsonl (the audit names it) does not hide a fork."""
    with home.home.receipts_path.open("wb") as f:
        f.write(b"\xff\xfe\n[1, 2]\n" + json.dumps(_receipt(7, "a" * 64)).encode() + b"\n{torn")
    with pytest.raises(ReceiptForkError, match="index 7") as e:
        _fork_check(home, [], [_receipt(7, "c" * 64)])
    assert "a" * 64 in e.value.message and "c" * 64 in e.value.message
    aside = json.loads((home.home.spool_dir / "forks" / f"7-{'c' * 64}.json").read_bytes())
    assert aside["kept"]["entry_id"] == "a" * 64 and aside["received"]["entry_id"] == "c" * 64


@pytest.mark.parametrize("mistyped", [{"index": "7"}, {"index": 7.0}, {"index": True}, {"entry_id": None}])
def test_a_mistyped_kept_receipt_is_no_anchor(home: Ledger, mistyped: dict[str, Any]) -> None:
    """Neighbour: a kept line whose index or entry is mistyped is not read as a receipt of index 7."""
    _fork_check(home, [{**_receipt(7, "a" * 64), **mistyped}], [_receipt(7, "c" * 64)])
