"""The signing guard's receipts check at every append (new) against only at checkpoints (old), one run.

Issue 12: the sequencer's fast path (a head this process left) skipped the check of the receipts the home
kept past the held checkpoint; every checkpoint ran it. ``receipts.jsonl`` is now read again only when its
status changed (one ``fstat``), its bytes before where the last read ended checked by BLAKE3 otherwise, so
the check could run at every append. Two deployments, each appending single entries (one per transaction):

- ``server``: a process not bound to the home (``ledger serve``): it keeps no receipt; the home keeps the
  receipts its CLI appends got, past the held checkpoint too (``--kept``).
- ``home-bound``: the CLI's process (``ledger collect run``): every append keeps its receipt, so the file
  changes at every append and every receipt since the held checkpoint is looked up again.

Old and new alternate in rounds on fresh homes (old: ``Ledger._guard_head``, its fast path checking no
receipt; new: the same checking them too, ``_every_append_guard_head``). Not adopted: the file check is cheap
but every receipt past the held checkpoint is looked up again in the database at every append. Also
measured: the file check alone (``Home.receipts_since``: unchanged, and after an append) at
``--file-receipts`` receipts. Prints the per-append ratio new/old (bench/results/receipts_check.json).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table, write_results

from ledger.home import Home
from ledger.log import GENESIS_PREV
from ledger.service import Ledger
from ledger.signing import sign_envelope


def _payload(i: int) -> dict[str, object]:
    return {
        "endpoint": "http://127.0.0.1:8081/v1/chat/completions",
        "check": "sequential",
        "ok": True,
        "latency_ms": 12.5,
        "count": i,
        "text": "READY",
    }


def _every_append_guard_head(self: Ledger, conn: Any, head: Any) -> Any:
    """``Ledger._guard_head`` checking the receipts kept past the held checkpoint at every append too."""
    held = self.held()
    if held is None:
        return None
    size, chain = (0, GENESIS_PREV) if head is None else (head.seq + 1, str(head.chain_hash))
    memo = self._extends
    if memo != (held.size, held.root, size, chain) and not (
        memo is not None
        and memo[:2] == (held.size, held.root)
        and 0 < memo[2] <= size
        and self.repo.chain_at(conn, memo[2] - 1) == memo[3]
    ):
        self._refuse_fork(conn, held)  # the receipts past the held checkpoint with it
    else:
        self._receipt_lost(held.size)
    self._extends = (held.size, held.root, size, chain)
    return held


def _run(work: Path, mode: str, variant: str, n: int, kept: int) -> float:
    """Seconds per single-entry append of ``n`` appends."""
    home = work / f"{mode}-{variant}"
    led = Ledger.init(home, home_bound=True)
    try:
        led.new_key("hostA", ["collector"])
        key = led.signing_key("hostA")
        subject = {"campaign": "bench", "host": "gpu-box-1"}
        led.signed_checkpoint()  # held: what follows is past it
        for i in range(kept):  # receipts the home's CLI kept past the held checkpoint
            led.append(
                [sign_envelope(led.make_statement("health.probe", subject, _payload(100000 + i)), key)]
            )
    finally:
        led.close()
    led = Ledger.open(home, home_bound=(mode == "home-bound"))
    try:
        if variant == "new":
            led._guard_head = _every_append_guard_head.__get__(led)  # type: ignore[method-assign]
        envs = [
            sign_envelope(led.make_statement("health.probe", subject, _payload(i)), key) for i in range(n + 1)
        ]
        time.sleep(2.1)  # the CLI's receipts settled (ledger.home._RACY_NS): their status is trusted
        led.append([envs[0]])  # warm: the keyring, the receipts read once
        t = time.perf_counter()
        for e in envs[1:]:
            led.append([e])
        return (time.perf_counter() - t) / n
    finally:
        led.close()
        shutil.rmtree(home, ignore_errors=True)


def _file_check(work: Path, receipts: int) -> dict[str, Any]:
    """``Home.receipts_since`` alone on a file of ``receipts`` receipts: unchanged, and one appended."""
    home = Home(work / "file")
    line = {"type": "receipt", "origin": "bench.example/log", "note": "x" * 600}
    shutil.rmtree(home.path, ignore_errors=True)
    home.path.mkdir()
    home.keep_receipts([{**line, "index": i, "entry_id": f"{i:064x}"} for i in range(receipts)])
    old = time.time() - 60  # settled: its status is trusted
    os.utime(home.receipts_path, (old, old))
    time.sleep(2.1)  # utime set its ctime: settled once older than ledger.home._RACY_NS
    _, read = home.receipts_since()
    t = time.perf_counter()
    for _ in range(1000):
        _, read = home.receipts_since(read)
    unchanged = (time.perf_counter() - t) / 1000
    times = []
    for i in range(20):
        home.keep_receipts([{**line, "index": receipts + i, "entry_id": f"{receipts + i:064x}"}])
        t = time.perf_counter()
        _, read = home.receipts_since(read)
        times.append(time.perf_counter() - t)
    return {
        "receipts": receipts,
        "bytes": home.receipts_path.stat().st_size,
        "unchanged_us": round(unchanged * 1e6, 1),
        "appended_ms": round(statistics.median(times) * 1e3, 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--appends", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--kept", type=int, default=200, help="receipts kept past the held checkpoint")
    ap.add_argument("--file-receipts", type=int, nargs="*", default=[1000, 100000])
    args = ap.parse_args()
    os.environ.setdefault("LEDGER_CHECKPOINT_INTERVAL", "3600")  # no timed checkpoint moves the floor
    work = Path(tempfile.mkdtemp(prefix="bench-receipts-"))
    rows: list[dict[str, Any]] = []
    try:
        for mode in ("server", "home-bound"):
            got: dict[str, list[float]] = {"old": [], "new": []}
            for _ in range(args.rounds):
                for variant in ("old", "new"):
                    got[variant].append(_run(work, mode, variant, args.appends, args.kept))
            old, new = statistics.median(got["old"]), statistics.median(got["new"])
            rows.append(
                {
                    "deployment": mode,
                    "appends": args.appends,
                    "kept_past_held": args.kept,
                    "old_ms_per_append": round(old * 1e3, 3),
                    "new_ms_per_append": round(new * 1e3, 3),
                    "ratio_new_over_old": round(new / old, 3),
                    "old_runs_ms": [round(x * 1e3, 3) for x in got["old"]],
                    "new_runs_ms": [round(x * 1e3, 3) for x in got["new"]],
                }
            )
        files = [_file_check(work, r) for r in args.file_receipts]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print_table(
        rows, ["deployment", "kept_past_held", "old_ms_per_append", "new_ms_per_append", "ratio_new_over_old"]
    )
    print_table(files, ["receipts", "bytes", "unchanged_us", "appended_ms"])
    for r in rows:
        print(f"ratio new/old per append ({r['deployment']}): {r['ratio_new_over_old']}x")
    path = write_results("receipts_check", rows, {"file_check": files, "args": vars(args)})
    print(f"results: {path}")


if __name__ == "__main__":
    main()
