"""`ledger verify` throughput over a large ledger, all cores, vs raw Ed25519 verification (foundation)."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table, write_results

from ledger.service import Ledger
from ledger.signing import PublicKey, pae, parse_envelope, sign_envelope


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--home", default=None, help="reuse a ledger built earlier (kept)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-verify-"))
    try:
        home = Path(args.home) if args.home else work / "home"
        if home.exists():
            led = Ledger.open(home)
        else:
            led = Ledger.init(home)
            led.new_key("hostA", ["collector"])
        key = led.signing_key("hostA")
        t = time.perf_counter()
        while led.size() < args.entries:
            k = min(1000, args.entries - led.size())
            base = led.size()
            envs = [
                sign_envelope(
                    led.make_statement(
                        "health.probe",
                        {"campaign": f"c{(base + i) % 50}", "host": "gpu-box-1"},
                        {
                            "endpoint": "http://127.0.0.1:8000/health",
                            "ok": True,
                            "latency_ms": 3.25,
                            "count": base + i,
                        },
                    ),
                    key,
                )
                for i in range(k)
            ]
            led.append(envs)
        build = time.perf_counter() - t
        led.checkpoint()
        size = led.size()
        rows = []
        for workers in (1, os.cpu_count() or 1):
            t = time.perf_counter()
            report = led.verify(artifacts=False, workers=workers)
            dt = time.perf_counter() - t
            assert report, report.to_json()["problems"][:3]
            rows.append(
                {
                    "what": f"ledger verify, {workers} worker(s)",
                    "entries": size,
                    "seconds": dt,
                    "per_s": size / dt,
                    "target": ">= 4000" if workers > 1 else "",
                }
            )
        envs_raw = [parse_envelope(bytes(r.envelope)) for r in led.iter_rows()][1:]
        pub = led.key_record("hostA").public
        t = time.perf_counter()
        for e in envs_raw:
            if e.signer == pub.key_id:
                PublicKey(pub.raw).verify(e.signatures[0][1], pae(e.payload_type, e.payload))
        dt = time.perf_counter() - t
        rows.append(
            {
                "what": "raw Ed25519 verify, 1 core",
                "entries": len(envs_raw),
                "seconds": dt,
                "per_s": len(envs_raw) / dt,
            }
        )
        for r in rows:
            r["vs_raw_ed25519_1core"] = r["per_s"] / rows[-1]["per_s"]
        print_table(rows, ["what", "entries", "seconds", "per_s", "vs_raw_ed25519_1core", "target"])
        print(f"built {size} entries in {build:.1f} s")
        print(f"results: {write_results('verify', rows, {'entries': size, 'build_seconds': build})}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
