"""Fixtures for the reliability suite: a fork server for crash trials and an independent log checker."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from ledger.canonical import canonical_bytes
from ledger.db import T_ENTRIES
from ledger.hashing import blake3_hex, hash_file
from ledger.log import GENESIS_PREV, LogRecord, chain_hash, leaf_hash
from ledger.service import Ledger

REPO = Path(__file__).resolve().parents[2]
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


@dataclass
class Trial:
    pid: int
    out: Path


class ForkServer:
    """Client of ``_forkserver.py``: start a child, kill it with SIGKILL, reap it."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("_forkserver.py"))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )

    def _ask(self, req: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "fork server died"
        reply: dict[str, Any] = json.loads(line)
        return reply

    def start(self, req: dict[str, Any]) -> Trial:
        return Trial(self._ask(req)["pid"], Path(req["out"]))

    def kill_and_reap(self, trial: Trial) -> dict[str, Any]:
        """SIGKILL (harmless if the child already exited: it is a zombie until reaped) and reap."""
        os.kill(trial.pid, signal.SIGKILL)
        return self._ask({"op": "reap", "pid": trial.pid})

    def reap(self, trial: Trial) -> dict[str, Any]:
        return self._ask({"op": "reap", "pid": trial.pid})

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture
def forkserver() -> Iterator[ForkServer]:
    fs = ForkServer()
    yield fs
    fs.close()


@dataclass
class LogWatch:
    """What the log looked like after the previous trial, to prove later trials neither forked nor lost it."""

    ids: list[str] = field(default_factory=list)
    chain: list[str] = field(default_factory=list)
    objects_seen: set[str] = field(default_factory=set)
    incoming_left: int = 0

    def check(self, ledger: Ledger, *, full: bool = False) -> list[str]:
        """Re-derive the chain of every new row and check the old head is untouched; return new ids.

        ``full`` also compares the whole old prefix row by row (the periodic deep check).
        """
        known = len(self.ids)
        start = 0 if full else max(known - 1, 0)
        cols = (
            T_ENTRIES.c.seq,
            T_ENTRIES.c.entry_id,
            T_ENTRIES.c.envelope,
            T_ENTRIES.c.leaf_hash,
            T_ENTRIES.c.prev_hash,
            T_ENTRIES.c.chain_hash,
            T_ENTRIES.c.logged_at,
            T_ENTRIES.c.kind,
            T_ENTRIES.c.signer,
            T_ENTRIES.c.record,
        )
        with ledger.engine.connect() as conn:
            rows = conn.execute(
                sa.select(*cols).where(T_ENTRIES.c.seq >= start).order_by(T_ENTRIES.c.seq)
            ).all()
            below = conn.execute(sa.select(sa.func.count()).where(T_ENTRIES.c.seq < start)).scalar()
        assert below == start, "rows before the last known head vanished"
        assert [r.seq for r in rows] == list(range(start, start + len(rows))), "sequence numbers have a gap"
        assert start + len(rows) >= known, "the log shrank"
        prev = GENESIS_PREV if start == 0 else None
        for r in rows:
            i = r.seq
            if i < known:
                assert (r.entry_id, r.chain_hash) == (self.ids[i], self.chain[i]), f"fork at seq {i}"
                prev = r.chain_hash
                continue
            env = bytes(r.envelope)
            assert blake3_hex(env) == r.entry_id, f"seq {i}: envelope does not hash to its id"
            record = LogRecord(i, r.logged_at, r.entry_id, r.kind, r.signer).to_bytes()
            assert bytes(r.record) == record, f"seq {i}: log record"
            assert leaf_hash(record).hex() == r.leaf_hash, f"seq {i}: leaf hash (of the log record)"
            assert r.prev_hash == prev, f"seq {i}: does not link to seq {i - 1}"
            assert chain_hash(i, r.entry_id, r.prev_hash, r.logged_at) == r.chain_hash, f"seq {i}: chain hash"
            prev = r.chain_hash
            self.ids.append(r.entry_id)
            self.chain.append(r.chain_hash)
        return self.ids[known:]

    def check_store(self, ledger: Ledger) -> list[str]:
        """Every visible object is complete (hashes to its name); temp files stay hidden. Returns new ones."""
        objects = Path(str(ledger.store.root)) / "objects"
        new: list[str] = []
        incoming = 0
        for p in objects.iterdir():
            if p.name.startswith(".incoming-"):
                # A live put may rename or remove its temp file between the listing and this look at it
                # (the server still runs while clients are killed): gone is fine, a folder is not.
                assert not p.is_dir(), f"stray folder in the store: {p.name}"
                incoming += p.is_file()
                continue
            assert not p.is_file(), f"stray file in the store: {p.name}"
            assert re.fullmatch(r"[0-9a-f]{2}", p.name), f"stray folder in the store: {p.name}"
            for f in p.iterdir():
                assert _HEX64.fullmatch(f.name) and f.name[:2] == p.name, f"partial or stray file {f}"
                if f.name in self.objects_seen:
                    continue
                assert hash_file(f).blake3.hex == f.name, f"object {f.name} is partial or corrupt"
                self.objects_seen.add(f.name)
                new.append(f.name)
        self.incoming_left = incoming
        return new


def canonical_json(value: Any) -> bytes:
    return canonical_bytes(value)
