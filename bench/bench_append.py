"""Signed appends per second, verified on ingest, vs raw SQLite inserts and raw Ed25519 (foundation)."""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table, write_results

from ledger.service import Ledger
from ledger.signing import pae, sign_envelope


def payload(i: int) -> dict[str, object]:
    return {
        "endpoint": "http://127.0.0.1:8081/v1/chat/completions",
        "check": "sequential",
        "ok": True,
        "latency_ms": 12.5 + i % 7,
        "count": i,
        "text": "READY",
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--entries", type=int, default=20000)
    ap.add_argument("--batch", type=int, default=1000)
    args = ap.parse_args()
    n = args.entries
    work = Path(tempfile.mkdtemp(prefix="bench-append-"))
    try:
        led = Ledger.init(work / "home")
        led.new_key("hostA", ["collector"])
        key = led.signing_key("hostA")
        subject = {"campaign": "bench", "host": "gpu-box-1", "backend": "llamacpp"}

        t = time.perf_counter()
        envs = [sign_envelope(led.make_statement("health.probe", subject, payload(i)), key) for i in range(n)]
        t_sign = time.perf_counter() - t

        t = time.perf_counter()
        for i in range(0, n, args.batch):
            led.append(envs[i : i + args.batch])
        t_append = time.perf_counter() - t

        single = [
            sign_envelope(led.make_statement("health.probe", subject, payload(i)), key)
            for i in range(min(n, 2000))
        ]
        t = time.perf_counter()
        for e in single:
            led.append([e])
        t_single = time.perf_counter() - t

        # Reference 1: raw SQLite inserts of rows of the same size, in batches, WAL + synchronous=NORMAL.
        raw = sqlite3.connect(work / "raw.db", isolation_level=None)
        raw.execute("PRAGMA journal_mode=WAL")
        raw.execute("PRAGMA synchronous=NORMAL")
        raw.execute("CREATE TABLE t (seq INTEGER PRIMARY KEY, id TEXT UNIQUE, kind TEXT, env BLOB)")
        blobs = [(i, f"{i:064x}", "health.probe", e.canonical()) for i, e in enumerate(envs)]
        t = time.perf_counter()
        for i in range(0, n, args.batch):
            raw.execute("BEGIN IMMEDIATE")
            raw.executemany("INSERT INTO t VALUES (?,?,?,?)", blobs[i : i + args.batch])
            raw.execute("COMMIT")
        t_sqlite = time.perf_counter() - t

        # Reference 2: raw Ed25519 sign + verify of the same PAE bytes.
        msgs = [pae(e.payload_type, e.payload) for e in envs]
        pub = key.private.public_key()
        t = time.perf_counter()
        for m in msgs:
            pub.verify(key.private.sign(m), m)
        t_ed = time.perf_counter() - t

        rows = [
            {"what": "ledger append (batch, verify on ingest)", "per_s": n / t_append, "target": ">= 2000"},
            {"what": "ledger append (one entry per transaction)", "per_s": len(single) / t_single},
            {"what": "ledger sign (make statement + DSSE)", "per_s": n / t_sign},
            {"what": "raw SQLite batch inserts", "per_s": n / t_sqlite},
            {"what": "raw Ed25519 sign+verify", "per_s": n / t_ed},
        ]
        for r in rows:
            r["vs_raw_sqlite"] = r["per_s"] / (n / t_sqlite)
            r["vs_raw_ed25519"] = r["per_s"] / (n / t_ed)
        print_table(rows, ["what", "per_s", "vs_raw_sqlite", "vs_raw_ed25519", "target"])
        print(f"results: {write_results('append', rows, {'entries': n, 'batch': args.batch})}")
        assert led.verify(artifacts=False, workers=os.cpu_count())
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
