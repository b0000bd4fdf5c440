"""Load: N collector processes push to one `ledger serve` for S seconds: no error, no loss, p95 latency.

Each collector is a real process with its own home and key, recording through `RemoteRecorder` (the code
`ledger collect --server` uses): one signed entry per append, a small artifact with every 10th entry.
At the end the server's log must hold exactly the entries every collector was told were appended, in a
chain that `ledger verify` accepts.

Run: .venv/bin/python bench/bench_load.py [--backend sqlite|postgres] [--seconds 60] [--collectors 8]
     (results in bench/results/load-<backend>.json; the test tests/reliability/test_load.py runs the same)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def collector_main(home: str, key: str, server: str, token: str, seconds: float, out: str) -> None:
    """One collector: record as fast as the server answers until the time is up; write what happened."""
    from ledger.collectors.remote import RemoteRecorder, Spool
    from ledger.service import Ledger

    led = Ledger.open(Path(home))
    rec = RemoteRecorder(led, key, server=server, token=token)
    art = Path(home) / "probe.log"
    ids: list[str] = []
    latencies: list[float] = []
    errors: list[str] = []
    deadline = time.monotonic() + seconds
    n = 0
    while time.monotonic() < deadline:
        n += 1
        try:
            t = time.perf_counter()
            arts = []
            if n % 10 == 0:
                art.write_bytes(f"{key} probe {n}\n".encode() * 50)
                arts = [rec.artifact("probe.log", art)]
            entry_id = rec.record(
                "health.probe" if n % 2 else "note",
                {"campaign": "load", "host": key},
                {"endpoint": "/health", "ok": True, "http_status": 200, "latency_ms": 1.5}
                if n % 2
                else {"text": f"{key} #{n}"},
                artifacts=arts,
            )
            latencies.append(time.perf_counter() - t)
            ids.append(entry_id)
        except Exception as e:  # any failure is a finding: count it, keep going
            errors.append(f"{type(e).__name__}: {e}")
    spooled = len(Spool(led.home.spool_dir).entry_files())
    rec.close()
    led.close()
    Path(out).write_text(
        json.dumps({"ids": ids, "latencies": latencies, "errors": errors, "spooled": spooled})
    )


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def run_load(
    server_home: Path,
    server_ledger: Any,
    server_url: str,
    token: str,
    work: Path,
    *,
    collectors: int = 8,
    seconds: float = 60.0,
) -> dict[str, Any]:
    """Run the collectors against a running server; return the figures (the caller checks the log)."""
    from ledger.service import Ledger

    homes = []
    for i in range(collectors):
        key = f"loadhost{i:02d}"
        home = Ledger.init(work / key)
        home.new_key(key, ["collector"])
        server_ledger.enrol_key(key, home.signing_key(key).public.b64, ["collector"])
        homes.append((home.home.path, key))
        home.close()
    size_before = server_ledger.size()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = []
    started = time.monotonic()
    for path, key in homes:
        out = work / f"{key}.json"
        procs.append(
            (
                key,
                out,
                subprocess.Popen(
                    [
                        sys.executable,
                        __file__,
                        "--collector",
                        str(path),
                        key,
                        server_url,
                        token,
                        str(seconds),
                        str(out),
                    ],
                    env=env,
                ),
            )
        )
    results: dict[str, Any] = {}
    for key, out, p in procs:
        p.wait(timeout=seconds + 120)
        assert p.returncode == 0, f"collector {key} exited {p.returncode}"
        results[key] = json.loads(out.read_text())
    wall = time.monotonic() - started
    lat = [x for r in results.values() for x in r["latencies"]]
    appended = sum(len(r["ids"]) for r in results.values())
    return {
        "collectors": collectors,
        "seconds": seconds,
        "wall_s": round(wall, 1),
        "appended": appended,
        "per_s": round(appended / seconds, 1),
        "errors": [e for r in results.values() for e in r["errors"]],
        "spooled": sum(r["spooled"] for r in results.values()),
        "p50_ms": round(1000 * statistics.median(lat), 1) if lat else None,
        "p95_ms": round(1000 * _percentile(lat, 0.95), 1),
        "p99_ms": round(1000 * _percentile(lat, 0.99), 1),
        "max_ms": round(1000 * max(lat), 1) if lat else None,
        "size_before": size_before,
        "ids": {k: r["ids"] for k, r in results.items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--collectors", type=int, default=8)
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args()

    from _common import write_results

    from tests.api.conftest import PgDatabases, make_deployment, start_server

    with tempfile.TemporaryDirectory() as tmp:
        pg = PgDatabases() if args.backend == "postgres" else None
        dep = make_deployment(args.backend, Path(tmp) / "server", pg)
        srv = start_server(dep.home, "--workers", str(args.workers))
        try:
            fig = run_load(
                dep.home, dep.ledger, srv.url, dep.tokens["writer"], Path(tmp),
                collectors=args.collectors, seconds=args.seconds,
            )  # fmt: skip
        finally:
            srv.stop()
        verify = subprocess.run(
            [str(Path(sys.executable).with_name("ledger")), "--home", str(dep.home), "verify", "--json"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        fig["verify_ok"] = verify.returncode == 0
        fig["final_size"] = dep.ledger.size()
        dep.ledger.close()
        if pg:
            pg.drop_all()
    ids = fig.pop("ids")
    fig["no_loss"] = fig["final_size"] == fig["size_before"] + sum(len(v) for v in ids.values())
    fig.update(backend=args.backend, workers=args.workers)
    print(json.dumps(fig, indent=2))
    write_results(f"load-{args.backend}", [fig])


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--collector":
        collector_main(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], float(sys.argv[6]), sys.argv[7])
    else:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        main()
