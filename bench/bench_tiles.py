"""A log at any size: `ledger verify` peak RSS and rate vs cores x raw Ed25519 verify (measured in the same
run), inclusion proof latency from hash tiles, and `ledger serve` RSS at 1k entries vs the big log.

The big ledger is built fast: envelopes signed by hostA in worker processes, and their rows (log record,
leaf, chain, subject index) inserted in large transactions by the same code paths' functions
(``LogRecord``, ``chain_hash``, ``entry_id_of``) — not through ``Ledger.append``'s per-entry trust checks;
`ledger verify` then checks every one of them (the run asserts it finds no problem). The tiles are written
by publishing one checkpoint at the end, as the sequencer does.

    .venv/bin/python bench/bench_tiles.py --entries 1000000
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table, write_results

from ledger.entries import format_time
from ledger.log import GENESIS_PREV, LogRecord, chain_hash, entry_id_of
from ledger.service import Ledger
from ledger.signing import PublicKey, SigningKey, pae, parse_envelope, sign_envelope
from ledger.tokens import create_token

LEDGER_BIN = str(Path(sys.executable).with_name("ledger"))
_WORKER: dict[str, Any] = {}  # the signing key and statement template of a signing worker


def _init(key: SigningKey, base: dict[str, Any]) -> None:
    _WORKER.update(key=key, base=base)


def _sign(rng: tuple[int, int]) -> list[tuple[bytes, str, str, str]]:
    """(canonical envelope, signer, kind, collected_at) for entries lo..hi."""
    key, base = _WORKER["key"], _WORKER["base"]
    out = []
    for i in range(*rng):
        st = {
            **base,
            "subject": {"campaign": f"c{i % 50}", "host": "gpu-box-1"},
            "payload": {
                "endpoint": "http://127.0.0.1:8000/health",
                "ok": True,
                "latency_ms": 3.25,
                "count": i,
            },
        }
        env = sign_envelope(st, key)
        out.append((env.canonical(), env.signer, st["kind"], st["collected_at"]))
    return out


def build(home: Path, total: int) -> float:
    """A ledger of ``total`` entries; seconds taken."""
    t0 = time.perf_counter()
    led = Ledger.init(home)
    led.new_key("hostA", ["collector"])
    base = led.make_statement("health.probe", {"campaign": "c0", "host": "gpu-box-1"}, {
        "endpoint": "http://127.0.0.1:8000/health", "ok": True, "latency_ms": 3.25, "count": 0,
    })  # fmt: skip
    key = led.signing_key("hostA")
    with led.repo.read() as conn:
        head = led.repo.head(conn)
    seq, prev = int(head.seq) + 1, str(head.chain_hash)
    when = datetime.now(UTC) + timedelta(seconds=1)
    chunk = 20_000
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(os.cpu_count() or 1, initializer=_init, initargs=(key, base)) as pool:
        todo = [(a, min(a + 1000, total)) for a in range(seq, total, 1000)]
        for start in range(0, len(todo), chunk // 1000):
            signed = [e for part in pool.map(_sign, todo[start : start + chunk // 1000]) for e in part]
            rows, subj = [], []
            for env, signer, kind, collected in signed:
                eid = entry_id_of(env)
                logged_at = format_time(when + timedelta(microseconds=seq))
                rec = LogRecord(seq, logged_at, eid, kind, signer)
                ch = chain_hash(seq, eid, prev, logged_at)
                data = rec.to_bytes()
                rows.append({
                    "seq": seq, "entry_id": eid, "kind": kind, "signer": signer, "collected_at": collected,
                    "logged_at": logged_at, "envelope": env, "record": data, "leaf_hash": rec.leaf().hex(),
                    "prev_hash": prev, "chain_hash": ch,
                })  # fmt: skip
                subj += [
                    {"seq": seq, "field": "campaign", "value": f"c{seq % 50}"},
                    {"seq": seq, "field": "host", "value": "gpu-box-1"},
                ]
                prev, seq = ch, seq + 1
            with led.repo.append_transaction() as conn:
                led.repo.insert(conn, rows, subj, [], [])
            print(f"  built {seq:,} entries ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    assert prev != GENESIS_PREV
    led.checkpoint()  # publishes: writes every full tile the checkpoint covers
    led.close()
    return time.perf_counter() - t0


def _tree_rss(pid: int) -> int:
    """Sum of VmRSS (kB) of ``pid`` and its descendants."""
    total = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text()
            total += int(re.search(r"VmRSS:\s+(\d+)", status).group(1))  # type: ignore[union-attr]
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, AttributeError):
            continue
    return total


def run_verify(home: Path, workers: int | None) -> dict[str, Any]:
    cmd = ["/usr/bin/time", "-v", LEDGER_BIN, "--home", str(home), "verify", "--json", "--no-artifacts"]
    if workers:
        cmd += ["--workers", str(workers)]
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak_tree = 0

    def sample() -> None:
        nonlocal peak_tree
        while proc.poll() is None:
            peak_tree = max(peak_tree, _tree_rss(proc.pid))
            time.sleep(0.2)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    out, err = proc.communicate()
    dt = time.perf_counter() - t
    th.join()
    report = json.loads(out)
    assert report["ok"], report["problems"][:3]
    max_rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", err).group(1))  # type: ignore[union-attr]
    return {"seconds": dt, "report": report, "max_rss_mb": max_rss / 1024, "tree_rss_mb": peak_tree / 1024}


_REFERENCE = """
import importlib.util, json, sys, time
from pathlib import Path
spec = importlib.util.spec_from_file_location("verify_reference", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
sys.modules["verify_reference"] = mod
spec.loader.exec_module(mod)
from ledger.service import Ledger
led = Ledger.open(Path(sys.argv[2]))
t = time.perf_counter()
r = mod.verify_log(led.repo, led.store, database_url=led.database_url, root_key_id=led.cfg.root_key_id,
    origin=led.cfg.origin, log_key_name=led.cfg.log_key, log_public_key=led.log_public_key(), artifacts=False)
print(json.dumps({"ok": bool(r), "size": r.size, "seconds": time.perf_counter() - t}))
"""


def reference_verify(home: Path, ref: str) -> dict[str, Any] | None:
    """The verify this change replaces (``git show REF:ledger/verify.py``: every leaf and the whole tree in
    memory), run on the same ledger in the same run, for the side-by-side figures."""
    src = subprocess.run(
        ["git", "show", f"{ref}:ledger/verify.py"], capture_output=True, text=True, check=False
    )
    if src.returncode != 0:
        return None
    path = home.parent / "verify_reference.py"
    path.write_text(src.stdout)
    r = subprocess.run(
        ["/usr/bin/time", "-v", sys.executable, "-c", _REFERENCE, str(path), str(home)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if r.returncode != 0:
        return {"error": r.stderr[-500:]}
    doc = dict(json.loads(r.stdout.strip().splitlines()[-1]))
    doc["max_rss_mb"] = (
        int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr).group(1)) / 1024
    )  # type: ignore[union-attr]
    return doc


def raw_ed25519(home: Path, n: int) -> float:
    led = Ledger.open(home)
    try:
        pub = led.key_record("hostA").public
        envs = []
        for r in led.iter_rows(5000):
            if r.signer == pub.key_id:
                envs.append(parse_envelope(bytes(r.envelope)))
            if len(envs) >= n:
                break
    finally:
        led.close()
    key = PublicKey(pub.raw)
    msgs = [(e.signatures[0][1], pae(e.payload_type, e.payload)) for e in envs]
    t = time.perf_counter()
    for sig, msg in msgs:
        key.verify(sig, msg)
    return len(msgs) / (time.perf_counter() - t)


def _p(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(q * len(s)))]


def proofs(home: Path, n: int) -> dict[str, float]:
    led = Ledger.open(home)
    try:
        size = led.size()
        rng = random.Random(7)
        seqs = [rng.randrange(size) for _ in range(n)]
        ids = [led.get_seq(s).entry_id for s in seqs]
        full, tree_only = [], []
        for eid, s in zip(ids, seqs, strict=True):
            t = time.perf_counter()
            led.inclusion(eid)
            full.append(time.perf_counter() - t)
            t = time.perf_counter()
            with led.repo.read(snapshot=True) as conn:
                led._tree_at(conn).inclusion_proof(s)
            tree_only.append(time.perf_counter() - t)
    finally:
        led.close()
    return {
        "inclusion_p50_ms": _p(full, 0.5) * 1e3,
        "inclusion_p95_ms": _p(full, 0.95) * 1e3,
        "tree_proof_p95_ms": _p(tree_only, 0.95) * 1e3,
    }


def server_rss(home: Path, requests: int) -> dict[str, float]:
    led = Ledger.open(home)
    try:
        token, _ = create_token(led.engine, f"bench-{time.time_ns()}", "reader")
        size = led.size()
        rng = random.Random(3)
        ids = [led.get_seq(rng.randrange(size)).entry_id for _ in range(requests)]
    finally:
        led.close()
    port = 18000 + random.randrange(1000)
    log = (home / "bench-serve.log").open("wb")
    proc = subprocess.Popen(
        [LEDGER_BIN, "--home", str(home), "serve", "--host", "127.0.0.1", "--port", str(port),
         "--log-level", "warning"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    h = {"Authorization": f"Bearer {token}"}
    try:
        for _ in range(300):
            try:
                if httpx.get(url + "/v1/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        lat = []
        with httpx.Client(headers=h, timeout=30) as c:
            assert c.get(url + "/checkpoint").status_code == 200
            for eid in ids:
                t = time.perf_counter()
                r = c.get(f"{url}/v1/proofs/inclusion/{eid}")
                lat.append(time.perf_counter() - t)
                assert r.status_code == 200, r.text
        status = Path(f"/proc/{proc.pid}/status").read_text()
        rss = int(re.search(r"VmRSS:\s+(\d+)", status).group(1))  # type: ignore[union-attr]
        hwm = int(re.search(r"VmHWM:\s+(\d+)", status).group(1))  # type: ignore[union-attr]
        return {"rss_mb": _tree_rss(proc.pid) / 1024, "self_rss_mb": rss / 1024, "hwm_mb": hwm / 1024,
                "http_inclusion_p95_ms": _p(lat, 0.95) * 1e3}  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument("--home", default=None, help="reuse (or keep) the big ledger here")
    ap.add_argument("--proofs", type=int, default=500)
    ap.add_argument("--reference", default="main", help="git ref of the verify to compare with ('' = none)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-tiles-"))
    try:
        big = Path(args.home) if args.home else work / "big"
        build_s = None if big.exists() else build(big, args.entries)
        small = work / "small"
        build(small, 1000)
        cores = os.cpu_count() or 1
        raw = raw_ed25519(big, 20_000)
        v = run_verify(big, None)
        size = int(v["report"]["size"])
        rate = size / v["seconds"]
        ref = reference_verify(big, args.reference) if args.reference else None
        pr = proofs(big, args.proofs)
        srv_small = server_rss(small, 200)
        srv_big = server_rss(big, 200)
        rows = [
            {
                "what": "raw Ed25519 verify, 1 core",
                "entries": 20_000,
                "per_s": raw,
                "value": None,
                "target": "",
            },
            {
                "what": f"ledger verify, {cores} workers",
                "entries": size,
                "per_s": rate,
                "value": rate / (cores * raw),
                "target": ">= 0.8 x cores x raw",
            },
            {
                "what": "ledger verify peak RSS, largest process (MB)",
                "entries": size,
                "value": v["max_rss_mb"],
                "target": "<= 200",
            },
            {
                "what": "ledger verify peak RSS, process tree sum (MB)",
                "entries": size,
                "value": v["tree_rss_mb"],
            },
            {
                "what": "inclusion proof p95 (ms), Ledger.inclusion",
                "entries": size,
                "value": pr["inclusion_p95_ms"],
                "target": "<= 10",
            },
            {
                "what": "inclusion proof p95 (ms), tree only",
                "entries": size,
                "value": pr["tree_proof_p95_ms"],
            },
            {
                "what": "inclusion proof p95 (ms), over HTTP",
                "entries": size,
                "value": srv_big["http_inclusion_p95_ms"],
            },
            {"what": "server RSS (MB) at 1k", "entries": 1000, "value": srv_small["rss_mb"]},
            {"what": "server RSS (MB), big", "entries": size, "value": srv_big["rss_mb"]},
            {
                "what": "server RSS big / 1k",
                "entries": size,
                "value": srv_big["rss_mb"] / srv_small["rss_mb"],
                "target": "<= 1.2",
            },
        ]
        if ref and "seconds" in ref:
            ref_rate = ref["size"] / ref["seconds"]
            rows[2:2] = [
                {
                    "what": f"reference verify ({args.reference}: whole tree in memory)",
                    "entries": ref["size"],
                    "per_s": ref_rate,
                    "value": ref_rate / (cores * raw),
                },
                {
                    "what": "reference verify peak RSS (MB)",
                    "entries": ref["size"],
                    "value": ref["max_rss_mb"],
                },
            ]
        print_table(rows, ["what", "entries", "per_s", "value", "target"])
        extra = {
            "entries": size,
            "build_seconds": build_s,
            "cores": cores,
            "verify_seconds": v["seconds"],
            "verify_tiles_checked": v["report"]["tiles_checked"],
            "proofs": pr,
            "reference_verify": ref,
            "server_small": srv_small,
            "server_big": srv_big,
        }
        print(f"results: {write_results('tiles', rows, extra)}")
    finally:
        if not args.home:
            shutil.rmtree(work, ignore_errors=True)
        else:
            shutil.rmtree(work / "small", ignore_errors=True)


if __name__ == "__main__":
    main()
