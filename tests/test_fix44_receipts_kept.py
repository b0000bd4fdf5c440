"""Audit 37, f8: ``HOME/receipts.jsonl`` was appended with one ``os.write`` whose count was ignored. A short
write (disk full, ``ulimit -f``) left a cut line, ``ledger record`` exited 0, and every later receipt was
glued onto the torn line, so ``ledger audit`` refused the whole file. Every byte is written now, or the
file is cut back to its last whole line and the command fails (``error[storage]``) naming the entry it
logged; a torn last line an earlier crash left is cut before the next append."""

from __future__ import annotations

import errno
import json
import os
import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import ledger.home as home_mod
from tests.conftest import CliResult

Cli = Callable[..., CliResult]


@pytest.fixture(autouse=True)
def _init(request: pytest.FixtureRequest) -> None:
    if "cli" in request.fixturenames:
        cli = request.getfixturevalue("cli")
        assert cli("init").code == 0


def _record(cli: Cli, text: str) -> CliResult:
    return cli("record", "note", "--key", "admin", "-s", "campaign=c", "--data", json.dumps({"text": text}))


def _short_writes(monkeypatch: pytest.MonkeyPatch, *, then: OSError | None) -> None:
    """``os.write`` in ``ledger.home`` writes half of what it is given, then (``then``) fails."""
    real = os.write
    calls = {"n": 0}

    def write(fd: int, data: bytes | memoryview) -> int:
        calls["n"] += 1
        if calls["n"] == 1:
            return real(fd, bytes(data[: len(data) // 2]))
        if then is not None:
            raise then
        return real(fd, data)

    monkeypatch.setattr(home_mod.os, "write", write)


def test_a_receipt_cut_short_by_a_full_disk_fails_the_record_and_leaves_no_torn_line(
    cli: Cli, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _record(cli, "one").code == 0
    receipts = home / "receipts.jsonl"
    before = receipts.read_bytes()
    with monkeypatch.context() as m:
        _short_writes(m, then=OSError(errno.ENOSPC, "No space left on device"))
        r = _record(cli, "two")
    assert r.code != 0 and "error[storage]" in r.err, r.out + r.err
    assert "the log holds the entries" in r.err and "No space left on device" in r.err
    assert receipts.read_bytes() == before  # nothing half-way
    assert _record(cli, "three").code == 0
    a = cli("audit", "--json")
    assert a.code == 0, a.out + a.err  # the file is whole: every kept receipt is checked
    assert a.json()["receipts"] == 3  # genesis, one, three: the second's receipt was not kept


def test_a_short_write_that_goes_on_keeps_the_whole_receipt(
    cli: Cli, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neighbour: a short count is not an error: the rest is written."""
    with monkeypatch.context() as m:
        _short_writes(m, then=None)
        assert _record(cli, "one").code == 0
    assert all(json.loads(line) for line in (home / "receipts.jsonl").read_text().splitlines())
    assert cli("audit").code == 0


def test_a_torn_last_line_an_earlier_crash_left_is_cut_before_the_next_receipt(cli: Cli, home: Path) -> None:
    """Neighbour: the torn tail (a crash mid-write) is never a whole receipt: cut, the next one kept whole."""
    assert _record(cli, "one").code == 0
    receipts = home / "receipts.jsonl"
    whole = receipts.read_bytes()
    receipts.write_bytes(whole + b'{"entry_id":"ab')
    assert _record(cli, "two").code == 0
    lines = receipts.read_bytes().splitlines()
    assert receipts.read_bytes().startswith(whole) and len(lines) == len(whole.splitlines()) + 1
    assert cli("audit").code == 0


def test_a_whole_last_receipt_without_its_newline_is_kept(cli: Cli, home: Path) -> None:
    """Neighbour: a last line that is a whole receipt, its newline lost (an editor), is not cut."""
    assert _record(cli, "one").code == 0
    receipts = home / "receipts.jsonl"
    whole = receipts.read_bytes()
    receipts.write_bytes(whole.rstrip(b"\n"))
    assert _record(cli, "two").code == 0
    assert receipts.read_bytes().startswith(whole)
    a = cli("audit", "--json")
    assert a.code == 0 and a.json()["receipts"] == 3, a.out


def test_a_file_size_limit_fails_the_record_and_the_next_record_and_audit_stand(tmp_path: Path) -> None:
    """The audit's repro: ``ulimit -f`` with less room than one receipt line, a real process."""
    ledger_cli = [str(Path(sys.executable).with_name("ledger"))]
    env = {**os.environ, "NO_COLOR": "1", "LEDGER_HOME": str(tmp_path / "H")}
    subprocess.run([*ledger_cli, "init"], env=env, check=True, capture_output=True)
    receipts = tmp_path / "H" / "receipts.jsonl"
    receipts.write_bytes(receipts.read_bytes() * 4000)  # the biggest file of the home (exact copies)
    limit = receipts.stat().st_size + 100  # 100 bytes of room

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    note = ["record", "note", "--key", "admin", "-s", "campaign=c", "--data", '{"text": "two"}']
    before = receipts.read_bytes()
    r = subprocess.run(
        [*ledger_cli, *note], check=False, env=env, capture_output=True, text=True, preexec_fn=cap
    )
    assert r.returncode != 0 and "error[storage]" in r.stderr, r.stdout + r.stderr
    assert receipts.read_bytes() == before
    subprocess.run([*ledger_cli, *note[:-1], '{"text": "three"}'], env=env, check=True, capture_output=True)
    a = subprocess.run([*ledger_cli, "audit"], check=False, env=env, capture_output=True, text=True)
    assert a.returncode == 0, a.stdout + a.stderr
