"""`ledger verify` throughput and peak RSS vs raw Ed25519 verification, measured in the same run, side by
side with the verify of a reference commit (default ``main``) on the same ledger, runs interleaved.

Raw Ed25519 over the ledger's own (signature, PAE) pairs — on 1 core, and on all cores at once (one process
per core) — with libsodium (PyNaCl's ``crypto_sign_open``, what the ledger's ``Verifier`` calls, and the
faster of the two here) and, for comparison, OpenSSL (``cryptography``'s ``Ed25519PublicKey.verify``). The
target (issue 12) is judged against libsodium: verify >= 0.8 x cores x raw (1 core), peak RSS <= 200 MB.

The machine is shared, so beside the wall-clock rates each run's CPU time is taken (user + system of the
verify call, in its process and its workers) and compared with the CPU time of one raw verification:
``cpu_vs_raw`` is the share of verify's CPU time a raw signature check would take, what ``vs_cores_x_raw``
reaches when the cores are all verify's. ``--ceiling`` adds the current verify with the signature check
stubbed out (every other check runs): the rate of the non-signature work alone, and from it the most
``vs_cores_x_raw`` any verify doing that work could reach with signatures at the raw rate.

    .venv/bin/python bench/bench_verify.py --entries 50000 --home /tmp/bench-verify-50k
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table, write_results

_ONE = """
import json, resource, sys, time
from pathlib import Path
src = sys.argv[1]
if src:  # the reference tree, not the editable install of this checkout
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
    sys.path.insert(0, src)
import ledger
from ledger.service import Ledger
if sys.argv[3] == "nosig":  # the ceiling: every check but the signature's (forked workers inherit it)
    from ledger.signing import Verifier
    Verifier.verify = lambda self, signature, message: None
led = Ledger.open(Path(sys.argv[2]))
# "from": `verify --from` the checkpoint the home holds (at the log's head: the entries below it re-derived)
since = led.home.checkpoint_path.read_text() if sys.argv[3] == "from" else None
def cpu():  # this process and its workers (waited for when verify returns)
    who = (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    return sum(u.ru_utime + u.ru_stime for u in map(resource.getrusage, who))
c = cpu()
t = time.perf_counter()
r = led.verify(artifacts=False, since=since)
dt = time.perf_counter() - t
c = cpu() - c
print(json.dumps({"ok": bool(r), "size": r.size, "seconds": dt, "cpu_seconds": c, "module": ledger.__file__,
                  "checked_from": r.checked_from, "problems": r.to_json()["problems"][:3]}))
"""


def _tree_rss(pid: int) -> tuple[int, int]:
    """Sums of VmRSS and of Pss (kB) of ``pid`` and its descendants: the RSS sum counts the pages forked
    workers share with their parent once per process, the Pss sum once in all."""
    rss = pss = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text()
            m = re.search(r"VmRSS:\s+(\d+)", status)
            rss += int(m.group(1)) if m else 0
            m = re.search(r"Pss:\s+(\d+)", Path(f"/proc/{p}/smaps_rollup").read_text())
            pss += int(m.group(1)) if m else 0
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return rss, pss


def run_one(src: str, home: Path, mode: str = "") -> dict[str, Any]:
    """One `verify` (all cores) in a fresh process: seconds, CPU seconds (the process and its workers),
    peak RSS (largest process; process tree, as RSS and as PSS). ``mode`` "nosig": signature checks
    stubbed out; "from": ``verify --from`` the checkpoint the home holds (``--from-held``)."""
    cmd = ["/usr/bin/time", "-v", sys.executable, "-c", _ONE, src, str(home), mode or "-"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = peak_pss = 0

    def sample() -> None:
        nonlocal peak, peak_pss
        while proc.poll() is None:
            rss, pss = _tree_rss(proc.pid)
            peak, peak_pss = max(peak, rss), max(peak_pss, pss)
            time.sleep(0.2)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    out, err = proc.communicate()
    th.join()
    if proc.returncode != 0:
        raise SystemExit(f"verify run failed: {err[-2000:]}")
    doc: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    assert doc["ok"], doc["problems"]
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", err)
    doc["max_rss_mb"] = int(m.group(1)) / 1024 if m else None
    doc["tree_rss_mb"] = peak / 1024
    doc["tree_pss_mb"] = peak_pss / 1024
    cpu = [re.search(rf"{k} time \(seconds\): ([\d.]+)", err) for k in ("User", "System")]
    doc["process_cpu_seconds"] = sum(float(c.group(1)) for c in cpu if c)  # with start-up and imports
    doc["load"] = os.getloadavg()
    return doc


_RAW: dict[str, Any] = {}


LIBS = ("libsodium", "openssl")


def _raw_init(pairs: list[tuple[bytes, bytes]], raw_key: bytes, lib: str) -> None:
    _RAW.update(pairs=pairs, key=raw_key, lib=lib)


def _raw_run(_: int) -> int:
    if _RAW["lib"] == "openssl":
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        key = Ed25519PublicKey.from_public_bytes(_RAW["key"])
        for sig, msg in _RAW["pairs"]:
            key.verify(sig, msg)
    else:
        from nacl.bindings import crypto_sign_open

        raw = _RAW["key"]
        for sig, msg in _RAW["pairs"]:
            crypto_sign_open(sig + msg, raw)
    return len(_RAW["pairs"])


def raw_rates(home: Path, n: int, cores: int, lib: str) -> tuple[float, float, float]:
    """Raw Ed25519 verifications per second with ``lib``: on 1 core, on ``cores`` processes together, and
    per CPU second on 1 core (process time: what a shared machine's other work does not inflate as much)."""
    from ledger.service import Ledger
    from ledger.signing import pae, parse_envelope

    led = Ledger.open(home)
    try:
        pub = led.key_record("hostA").public
        pairs = []
        for r in led.iter_rows(5000):
            if r.signer == pub.key_id:
                e = parse_envelope(bytes(r.envelope))
                pairs.append((e.signatures[0][1], pae(e.payload_type, e.payload)))
            if len(pairs) >= n:
                break
    finally:
        led.close()
    _raw_init(pairs, pub.raw, lib)
    t, c = time.perf_counter(), time.process_time()
    _raw_run(0)
    one = len(pairs) / (time.perf_counter() - t)
    one_cpu = len(pairs) / (time.process_time() - c)
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(cores, initializer=_raw_init, initargs=(pairs, pub.raw, lib)) as pool:
        pool.map(_raw_run, range(cores))  # warm
        t = time.perf_counter()
        done = sum(pool.map(_raw_run, range(cores)))
        every = done / (time.perf_counter() - t)
    return one, every, one_cpu


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--entries", type=int, default=50_000)
    ap.add_argument("--home", default=None, help="reuse (or keep) the ledger here")
    ap.add_argument("--reference", default="main", help="git ref of the verify to compare with ('' = none)")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved reference/current verify runs")
    ap.add_argument("--raw", type=int, default=5000, help="signatures for the raw Ed25519 rate")
    ap.add_argument("--name", default="verify", help="results file name (bench/results/NAME.json)")
    ap.add_argument("--ceiling", action="store_true", help="also verify with signature checks stubbed out")
    ap.add_argument(
        "--from-held",
        action="store_true",
        help="also `verify --from` the checkpoint the home holds (its head): the cost of re-deriving the "
        "entries below a held checkpoint, as a share of a full verify's time in the same run",
    )
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-verify-"))
    try:
        home = Path(args.home) if args.home else work / "home"
        build_s = None
        if not home.exists():
            from bench_tiles import build

            build_s = build(home, args.entries)
        ref_src = ""
        if args.reference:
            ref_src = str(work / "reference")
            os.makedirs(ref_src)
            archive = subprocess.run(["git", "archive", args.reference], capture_output=True, check=True)
            subprocess.run(["tar", "-x", "-C", ref_src], input=archive.stdout, check=True)
        cores = os.cpu_count() or 1
        raws: dict[str, list[tuple[float, float, float]]] = {lib: [] for lib in LIBS}
        runs: dict[str, list[dict[str, Any]]] = {"reference": [], "current": [], "no signatures": []}
        runs |= {"reference --from": [], "current --from": []}
        for _ in range(args.rounds):
            for lib in LIBS:
                raws[lib].append(raw_rates(home, args.raw, cores, lib))
            if ref_src:
                runs["reference"].append(run_one(ref_src, home))
            runs["current"].append(run_one("", home))
            if args.ceiling:
                runs["no signatures"].append(run_one("", home, "nosig"))
            if args.from_held:
                if ref_src:
                    runs["reference --from"].append(run_one(ref_src, home, "from"))
                runs["current --from"].append(run_one("", home, "from"))
        for lib in LIBS:
            raws[lib].append(raw_rates(home, args.raw, cores, lib))
        rows: list[dict[str, Any]] = []
        for lib in reversed(LIBS):
            one = sum(r[0] for r in raws[lib]) / len(raws[lib])
            every = sum(r[1] for r in raws[lib]) / len(raws[lib])
            one_cpu = max(r[2] for r in raws[lib])
            what = f"raw Ed25519 verify ({lib}), 1 core"
            rows.append({"what": what, "per_s": one, "cpu_us_per_entry": 1e6 / one_cpu})
            rows.append(
                {
                    "what": f"raw Ed25519 verify ({lib}), {cores} cores",
                    "per_s": every,
                    "vs_cores_x_raw": every / (cores * one),
                }
            )
        # the target is judged against the faster library, the one the ledger verifies with (LIBS[0])
        raw1, raw_all = rows[-2]["per_s"], rows[-1]["per_s"]
        raw_cpu_us = rows[-2]["cpu_us_per_entry"]
        rates: dict[str, float] = {}
        for label, docs in runs.items():
            if not docs:
                continue
            size = docs[0]["size"]
            best = min(d["seconds"] for d in docs)
            rate = rates[label] = size / best
            cpu_us = min(d["cpu_seconds"] for d in docs) / size * 1e6
            rows.append(
                {
                    "what": f"ledger verify ({label}{': ' + args.reference if label == 'reference' else ''})",
                    "entries": size,
                    "per_s": rate,
                    "vs_cores_x_raw": rate / (cores * raw1),
                    "vs_raw_all_cores": rate / raw_all,
                    "cpu_us_per_entry": cpu_us,
                    "cpu_vs_raw": raw_cpu_us / cpu_us if label != "no signatures" else None,
                    "max_rss_mb": max(d["max_rss_mb"] for d in docs),
                    "tree_rss_mb": max(d["tree_rss_mb"] for d in docs),
                    "tree_pss_mb": max(d["tree_pss_mb"] for d in docs),
                    "target": ">= 0.8 x cores x raw, <= 200 MB" if label == "current" else "",
                }
            )
        for label in ("reference", "current"):
            if f"{label} --from" in rates:  # the --from time as a share of the full verify's (same run)
                share = rates[label] / rates[f"{label} --from"]
                rows.append({"what": f"--from held head / full verify, seconds ({label})", "per_s": share})
        if "reference" in rates:
            speedup = rates["current"] / rates["reference"]
            rows.append({"what": "speed-up current / reference", "per_s": speedup})
        if "no signatures" in rates:
            # signatures at exactly the raw rate on every core, plus the rest of the work at its own rate
            best = 1 / (1 / (cores * raw1) + 1 / rates["no signatures"])
            rows.append(
                {
                    "what": "ceiling: raw signatures + current non-signature work",
                    "per_s": best,
                    "vs_cores_x_raw": best / (cores * raw1),
                }
            )
        cols = ["what", "entries", "per_s", "vs_cores_x_raw", "vs_raw_all_cores", "cpu_us_per_entry"]
        cols += ["cpu_vs_raw", "max_rss_mb", "tree_rss_mb", "tree_pss_mb", "target"]
        print_table(rows, cols)
        extra = {"entries": runs["current"][0]["size"], "cores": cores, "build_seconds": build_s, "raw": raws,
                 "runs": runs, "reference": args.reference}  # fmt: skip
        print(f"results: {write_results(args.name, rows, extra)}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
