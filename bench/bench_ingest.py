"""HTTP ingest on PostgreSQL: 8 collectors, one entry per request, beside raw PostgreSQL behind one lock.

Issue 12's throughput figure. In one run, on one fresh PostgreSQL database (127.0.0.1:5432, made and
dropped like the tests'), each phase runs COLLECTORS client processes for SECONDS:

- ``raw-pg``: the ceiling a naive sequencer reaches — single-row transactions from 8 psycopg clients,
  each ``BEGIN; SELECT pg_advisory_xact_lock; SELECT max(seq); INSERT one row; COMMIT`` (no HTTP, no
  signatures, no Merkle leaf);
- ``http-floor``: ``GET /v1/health`` on one `ledger serve` (no token, one read, nothing signed or
  written): what the HTTP stack itself serves on this machine, the floor under any ingest figure;
- ``http-ceiling``: the same collectors POST the same one-entry bodies to a bare ASGI app under uvicorn
  (``_bare_asgi.py``: reads the body, answers ``201 {}``; no framework, database or signature): what no
  ingest server on this stack can exceed on this machine with these clients;
- ``fastapi-floor``: the same POSTs to the least FastAPI app (``_bare_fastapi.py``: one async
  route that reads the body and answers ``201 {}``): what the framework `ledger serve` is built on costs;
- ``one-server``: `ledger serve` (one process), one pre-signed envelope per ``POST /v1/entries``;
- ``two-replicas``: two `ledger serve` on the same database, collector i sends to replica i % 2;
- ``one-server-workers-2``: `ledger serve --workers 2`;
- ``batch``: one server, ``POST /v1/entries/batch`` of BATCH envelopes per request.

Each phase also reports where the machine's CPU went, per request: the collectors' own CPU time, the
server processes' (``/proc``, the process tree) and PostgreSQL's (every ``postgres`` process), and the
rate those figures allow on this machine's cores (``cpu_bound_per_s`` = cores / CPU seconds per
request): a figure that does not drift with the machine's load as the rates do.

Envelopes are signed before the clock starts (a collector's cost is then one HTTP request). Every
ingest phase is checked: each accepted request got its own receipt, the log holds exactly the entries
the collectors were told were appended, and `ledger verify` accepts the log at the end. The machine is
shared (the load average is in the results); the raw reference runs in the same run so the ratio is
comparable.

Run: .venv/bin/python bench/bench_ingest.py [--seconds 10] [--collectors 8] [--batch 50]
     (results in bench/results/ingest-postgres.json)
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
for p in (str(REPO), str(REPO / "bench")):
    if p not in sys.path:
        sys.path.insert(0, p)

LOCK_KEY = 4242  # the raw reference's advisory lock (its own table, its own key)


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


_TICK = os.sysconf("SC_CLK_TCK")


def _proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) ``pid`` has used, 0 when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (a `ledger serve --workers N` parent and its workers)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


def _postgres_pids() -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if (d / "comm").read_text().strip() == "postgres":
                    pids.append(int(d.name))
            except OSError:
                continue
    return pids


class CpuMeter:
    """CPU seconds used by the server process trees and by PostgreSQL between ``start`` and ``stop``
    (processes that come and go in between count from when they are first seen)."""

    def __init__(self, server_pids: list[int]) -> None:
        self.server_pids = server_pids
        self.seen: dict[tuple[str, int], float] = {}
        self.used = {"server": 0.0, "postgres": 0.0}

    def _sample(self) -> dict[tuple[str, int], float]:
        now = {("server", p): _proc_cpu(p) for s in self.server_pids for p in _tree(s)}
        now |= {("postgres", p): _proc_cpu(p) for p in _postgres_pids()}
        return now

    def start(self) -> None:
        self.seen = self._sample()

    def stop(self) -> None:
        for key, cpu in self._sample().items():
            self.used[key[0]] += cpu - self.seen.get(key, 0.0)


def _warm(_: int) -> int:
    import httpx  # noqa: F401  (imported before the clock starts)
    import psycopg  # noqa: F401

    return os.getpid()


def http_collector(job: dict[str, Any]) -> dict[str, Any]:
    """POST each body in turn until the window ends; count entries the server accepted (201)."""
    import httpx

    url, path, bodies = job["url"], job["path"], job["bodies"]
    headers = {"Content-Type": "application/json"}
    if job["token"]:
        headers["Authorization"] = f"Bearer {job['token']}"
    lat: list[float] = []
    errors: list[str] = []
    ids: list[str] = []
    receipts = 0
    with httpx.Client(base_url=url, headers=headers, timeout=60) as c:
        c.get("/v1/health")  # the connection is open before the clock starts
        while time.time() < job["start_at"]:
            time.sleep(0.001)
        cpu0 = time.process_time()
        end = job["start_at"] + job["seconds"]
        last = time.time()
        for body in bodies:
            if time.time() >= end:
                break
            t = time.perf_counter()
            try:
                r = c.get(path) if job.get("get") else c.post(path, content=body)
            except httpx.HTTPError as e:
                errors.append(f"{type(e).__name__}: {e}")
                continue
            lat.append(time.perf_counter() - t)
            last = time.time()
            if r.status_code != (200 if job.get("get") else 201):
                errors.append(f"{r.status_code}: {r.text[:200]}")
                continue
            doc = r.json()
            if job.get("get") or job.get("bare"):
                continue
            got = doc.get("items", [doc])  # a batch answers the one list shape {items, next}
            ids.extend(e["id"] for e in got)
            receipts += sum(1 for e in got if e.get("receipt", {}).get("entry_id") == e["id"])
        cpu = time.process_time() - cpu0
    return {"ids": ids, "receipts": receipts, "latencies": lat, "errors": errors, "ended": last, "cpu": cpu}


def raw_collector(job: dict[str, Any]) -> dict[str, Any]:
    """Single-row transactions behind one advisory lock, as fast as PostgreSQL commits them."""
    import psycopg

    lat: list[float] = []
    payload = os.urandom(600)
    with psycopg.connect(job["dsn"]) as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        backend = int(row[0]) if row else 0
        conn.commit()
        while time.time() < job["start_at"]:
            time.sleep(0.001)
        cpu0, pg0 = time.process_time(), _proc_cpu(backend)
        end = job["start_at"] + job["seconds"]
        last = time.time()
        while time.time() < end:
            t = time.perf_counter()
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
                row = conn.execute("SELECT max(seq) FROM raw_ref").fetchone()
                seq = 0 if row is None or row[0] is None else int(row[0]) + 1
                conn.execute("INSERT INTO raw_ref (seq, body) VALUES (%s, %s)", (seq, payload))
            lat.append(time.perf_counter() - t)
            last = time.time()
        pg_cpu = _proc_cpu(backend) - pg0  # its backend exits with the connection: read it first
    cpu = time.process_time() - cpu0
    return {
        "ids": [],
        "receipts": 0,
        "latencies": lat,
        "errors": [],
        "ended": last,
        "count": len(lat),
        "cpu": cpu,
        "pg_cpu": pg_cpu,
    }


def _figures(
    name: str, results: list[dict[str, Any]], start_at: float, per_request: int, meter: CpuMeter
) -> dict[str, Any]:
    lat = [x for r in results for x in r["latencies"]]
    n = sum(r.get("count", len(r["ids"])) for r in results) if per_request else 0
    window = max(r["ended"] for r in results) - start_at
    per = {"client": sum(r["cpu"] for r in results), **meter.used}
    per["postgres"] += sum(r.get("pg_cpu", 0.0) for r in results)  # backends of clients that are gone
    cpu_ms = {k: round(1000 * v / len(lat), 3) for k, v in per.items()} if lat else {}
    total_ms = sum(cpu_ms.values())
    return {
        "phase": name,
        "entries": n,
        "requests": len(lat),
        "entries_per_request": per_request,
        "window_s": round(window, 2),
        "entries_per_s": round(n / window, 1) if window > 0 and per_request else None,
        "requests_per_s": round(len(lat) / window, 1) if window > 0 else None,
        "p50_ms": round(1000 * statistics.median(lat), 1) if lat else None,
        "p95_ms": round(1000 * (_percentile(lat, 0.95) or 0), 1),
        "errors": sum(len(r["errors"]) for r in results),
        "first_errors": [e for r in results for e in r["errors"]][:3],
        "receipts_ok": all(r["receipts"] == len(r["ids"]) for r in results) if per_request else None,
        **{f"cpu_{k}_ms": v for k, v in cpu_ms.items()},  # CPU time per request: client, server, postgres
        "cpu_bound_per_s": round((os.cpu_count() or 1) * 1000 / total_ms, 1) if total_ms else None,
    }


def start_bare(home: Path, module: str = "_bare_asgi") -> Any:
    """A uvicorn process serving ``MODULE:app`` (from bench/), run as ``ledger serve`` runs its app."""
    from tests.api.conftest import free_port, serve_process

    port = free_port()
    argv = [sys.executable, "-m", "uvicorn", f"{module}:app", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--log-level", "warning", "--no-access-log", "--timeout-keep-alive", "30"]
    return serve_process(argv, home, port, "/", cwd=Path(__file__).resolve().parent)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--collectors", type=int, default=8)
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--max-rate", type=int, default=3000, help="envelopes signed per phase-second")
    ap.add_argument(
        "--phases",
        default="raw-pg,http-floor,http-ceiling,fastapi-floor,one-server,two-replicas,one-server-workers-2,batch",
    )
    args = ap.parse_args()

    from _common import print_table, write_results

    from tests.api.conftest import PgDatabases, make_deployment, start_server

    phases = args.phases.split(",")
    ctx = mp.get_context("spawn")
    rows: list[dict[str, Any]] = []
    pg = PgDatabases()
    try:
        with tempfile.TemporaryDirectory() as tmp, ctx.Pool(args.collectors) as pool:
            pool.map(_warm, range(args.collectors))
            dep = make_deployment("postgres", Path(tmp) / "home", pg)
            led = dep.ledger
            counter = [0]

            def bodies(n: int, batch: int = 1) -> list[bytes]:
                out = []
                for _ in range(n):
                    envs = []
                    for _ in range(batch):
                        counter[0] += 1
                        envs.append(
                            dep.sign(
                                "note",
                                {"campaign": "ingest", "collector": str(counter[0] % args.collectors)},
                                {"text": f"entry {counter[0]}"},
                            )
                        )
                    out.append(json.dumps(envs[0] if batch == 1 else {"envelopes": envs}).encode())
                return out

            def run_http(
                name: str, srvs: list[Any], path: str, batch: int = 1, bare: bool = False
            ) -> dict[str, Any]:
                urls = [s.url for s in srvs]
                meter = CpuMeter([s.proc.pid for s in srvs])
                if batch == 0:  # the HTTP floor: GET /v1/health, no token, one read, nothing signed
                    jobs = [
                        {"url": urls[0], "path": path, "token": "", "get": True, "seconds": args.seconds}
                        | {"bodies": [b""] * int(args.max_rate * 4 * args.seconds / args.collectors)}
                        for _ in range(args.collectors)
                    ]
                    start_at = time.time() + 2.0
                    for j in jobs:
                        j["start_at"] = start_at
                    meter.start()
                    got = pool.map(http_collector, jobs)
                    meter.stop()
                    return _figures(name, got, start_at, 0, meter)
                per = int(args.max_rate * args.seconds / args.collectors / batch) + 1
                jobs = [
                    {
                        "url": urls[i % len(urls)],
                        "path": path,
                        "token": dep.tokens["writer"],
                        "bodies": bodies(per, batch),
                        "seconds": args.seconds,
                    }
                    for i in range(args.collectors)
                ]
                size_before = led.size()
                start_at = time.time() + 2.0
                for j in jobs:
                    j["start_at"] = start_at
                    j["bare"] = bare
                meter.start()
                results = pool.map(http_collector, jobs)
                meter.stop()
                fig = _figures(name, results, start_at, batch, meter)
                if bare:  # nothing is stored: each 201 is one request's worth of entries
                    n = sum(len(r["latencies"]) - len(r["errors"]) for r in results)
                    fig["entries_per_s"] = fig["requests_per_s"]
                    fig["no_loss"] = led.size() == size_before and n > 0
                    return fig
                ids = [i for r in results for i in r["ids"]]
                fig["no_loss"] = led.size() == size_before + len(ids) and len(set(ids)) == len(ids)
                return fig

            if "raw-pg" in phases:
                with led.engine.begin() as conn:
                    conn.exec_driver_sql("CREATE TABLE raw_ref (seq BIGINT PRIMARY KEY, body BYTEA)")
                dsn = dep.database_url.replace("postgresql+psycopg://", "postgresql://")
                start_at = time.time() + 1.0
                job = {"dsn": dsn, "seconds": args.seconds, "start_at": start_at}
                meter = CpuMeter([])
                meter.start()
                got = pool.map(raw_collector, [job] * args.collectors)
                meter.stop()
                rows.append(_figures("raw-pg", got, start_at, 1, meter))
                print(json.dumps(rows[-1]), flush=True)
            plans = [
                ("http-floor", [()], "/v1/health", 0),
                ("http-ceiling", [("bare",)], "/v1/entries", 1),
                ("fastapi-floor", [("bare", "_bare_fastapi")], "/v1/entries", 1),
                ("one-server", [()], "/v1/entries", 1),
                ("two-replicas", [(), ()], "/v1/entries", 1),
                ("one-server-workers-2", [("--workers", "2")], "/v1/entries", 1),
                ("batch", [()], "/v1/entries/batch", args.batch),
            ]
            for name, servers, path, batch in plans:
                if name not in phases:
                    continue
                bare = servers[0][:1] == ("bare",)
                srvs = [start_bare(dep.home, *a[1:]) if bare else start_server(dep.home, *a) for a in servers]
                try:
                    rows.append(run_http(name, srvs, path, batch, bare))
                finally:
                    for s in srvs:
                        s.stop()
                print(json.dumps(rows[-1]), flush=True)
            verify = subprocess.run(
                [str(Path(sys.executable).with_name("ledger")), "--home", str(dep.home), "verify", "--json"],
                capture_output=True,
                text=True,
                check=False,
            )
            verify_ok = verify.returncode == 0
            final_size = led.size()
            led.close()
    finally:
        pg.drop_all()
    raw = next((r["entries_per_s"] for r in rows if r["phase"] == "raw-pg"), None)
    for r in rows:
        per_s = r["entries_per_s"] or r["requests_per_s"]
        r["ratio_to_raw_pg"] = round(per_s / raw, 3) if raw and per_s else None
    one = next((r["entries_per_s"] for r in rows if r["phase"] == "one-server"), None)
    two = next((r["entries_per_s"] for r in rows if r["phase"] == "two-replicas"), None)
    extra = {
        "backend": "postgres",
        "collectors": args.collectors,
        "seconds": args.seconds,
        "batch": args.batch,
        "target_entries_per_s": 1000,
        "verify_ok": verify_ok,
        "final_size": final_size,
        "two_replicas_over_one": round(two / one, 3) if one and two else None,
        "note": "2-core machine shared with other work during the run (see machine.load)",
    }
    print_table(
        rows,
        [
            "phase",
            "entries_per_s",
            "requests_per_s",
            "ratio_to_raw_pg",
            "entries_per_request",
            "p50_ms",
            "p95_ms",
            "errors",
            "cpu_client_ms",
            "cpu_server_ms",
            "cpu_postgres_ms",
            "cpu_bound_per_s",
        ],
    )
    print(json.dumps({k: extra[k] for k in ("verify_ok", "final_size", "two_replicas_over_one")}))
    path = write_results("ingest-postgres", rows, extra)
    print(f"results: {path}")
    if not verify_ok:
        print(verify.stdout[-2000:], verify.stderr[-2000:])
        raise SystemExit(1)


if __name__ == "__main__":
    main()
