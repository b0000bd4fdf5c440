"""``ledger verify``'s fast path (``ledger._verify_range``: every check made on plain rows, answering only
"no problem") finds exactly what the exact per-row check finds: on an honest log, and on copies of one
tampered behind its back in the ways a database operator can (an envelope byte, a log time, an entry id, a
kind, a deleted row, rows swapped), whichever way the ranges fall and on one or two workers."""

from __future__ import annotations

import random
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from ledger import _verify_range, verify
from ledger.service import Ledger


def _statement(i: int, j: int) -> tuple[str, dict[str, str], dict[str, Any]]:
    """Notes (text, some of it not ASCII nor plain) and health probes (a float latency, an HTTP status)."""
    if j % 2:
        text = f'{i}-{j} ünïcode — "quoted"' if j % 7 == 1 else f"{i}-{j}"
        return "note", {"campaign": "f"}, {"text": text}
    probe = {"endpoint": "/health", "check": "health", "ok": True, "http_status": 200, "latency_ms": j * 0.5}
    return "health.probe", {"campaign": "f", "host": "h"}, probe


@pytest.fixture(scope="module")
def honest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("fast") / "home"
    led = Ledger.init(home)
    led.new_key("hostA", ["collector"])
    led.new_key("hostB", ["collector"])
    for i in range(6):
        key = led.signing_key("hostA" if i % 2 else "hostB")
        led.append([led.sign(led.make_statement(*_statement(i, j)), key) for j in range(100)])
    led.checkpoint()
    led.close()
    return home


def _edit(db: Path, how: str, rng: random.Random) -> None:
    conn = sqlite3.connect(db)
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type='trigger'").fetchall():
        conn.execute(f"DROP TRIGGER {name}")
    n = conn.execute("SELECT max(seq) FROM log_entries").fetchone()[0]
    a, b = rng.randrange(5, n), rng.randrange(5, n)
    if how == "envelope":
        (env,) = conn.execute("SELECT envelope FROM log_entries WHERE seq = ?", (a,)).fetchone()
        env = bytearray(env)
        env[rng.randrange(len(env))] ^= 0x01
        conn.execute("UPDATE log_entries SET envelope = ? WHERE seq = ?", (bytes(env), a))
    elif how == "logged_at":
        conn.execute("UPDATE log_entries SET logged_at = '2020-01-01T00:00:00.000000Z' WHERE seq = ?", (a,))
    elif how == "entry_id":
        conn.execute("UPDATE log_entries SET entry_id = ? WHERE seq = ?", ("0" * 64, a))
    elif how == "kind":
        conn.execute("UPDATE log_entries SET kind = 'job' WHERE seq = ?", (a,))
    elif how == "delete":
        conn.execute("DELETE FROM log_entries WHERE seq = ?", (a,))
    elif how == "swap":
        cols = "entry_id, kind, signer, envelope"
        ra = conn.execute(f"SELECT {cols} FROM log_entries WHERE seq = ?", (a,)).fetchone()
        rb = conn.execute(f"SELECT {cols} FROM log_entries WHERE seq = ?", (b,)).fetchone()
        conn.execute("UPDATE log_entries SET entry_id = 'x' WHERE seq = ?", (a,))
        for row, seq in ((ra, b), (rb, a)):
            conn.execute(
                "UPDATE log_entries SET entry_id = ?, kind = ?, signer = ?, envelope = ? WHERE seq = ?",
                (*row, seq),
            )
    conn.commit()
    conn.close()


def _report(home: Path, fast: bool, workers: int, monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    monkeypatch.setattr(_verify_range, "_FAST", fast)
    monkeypatch.setattr(verify, "_CHUNK", 97)  # many ranges, boundaries inside the log
    monkeypatch.setattr(verify, "_MIN_CHUNK", 13)
    led = Ledger.open(home)
    try:
        report = led.verify(artifacts=False, workers=workers)
    finally:
        led.close()
    return sorted((p.code, p.seq, p.message) for p in report.problems)


def test_the_fast_path_is_taken_here() -> None:
    assert _verify_range._FAST  # the formats it writes directly are the log's: else nothing here is tested


@pytest.mark.parametrize("how", ["honest", "envelope", "logged_at", "entry_id", "kind", "delete", "swap"])
@pytest.mark.parametrize("workers", [1, 2])
def test_the_fast_path_finds_what_the_exact_check_finds(
    honest: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str, workers: int
) -> None:
    home = tmp_path / "home"
    shutil.copytree(honest, home)
    if how != "honest":
        _edit(home / "ledger.db", how, random.Random(f"{how}-{workers}"))
    exact = _report(home, False, workers, monkeypatch)
    fast = _report(home, True, workers, monkeypatch)
    assert fast == exact
    assert (exact == []) is (how == "honest"), exact
