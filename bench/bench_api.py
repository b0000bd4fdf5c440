"""HTTP API: batch ingest vs in-process append, 2 GiB upload vs curl to a plain file server, search p95 on PG.

Run: .venv/bin/python bench/bench_api.py [--entries N] [--upload-gib 2] [--large 1000000 --large-budget-s S]
"""

from __future__ import annotations

import argparse
import http.server
import os
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table, write_results

from ledger.service import MAX_BATCH, Ledger
from ledger.signing import sign_envelope
from ledger.tokens import create_token

LEDGER_BIN = str(Path(sys.executable).with_name("ledger"))
PG_ADMIN = "host=127.0.0.1 port=5432 user=root dbname=postgres connect_timeout=3"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(home: Path, *args: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        [LEDGER_BIN, "--home", str(home), "serve", "--port", str(port), "--log-level", "warning", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(url + "/v1/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("server did not start")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    proc.wait(timeout=30)


def new_pg_database() -> str | None:
    try:
        import psycopg

        name = f"ledger_bench_{secrets.token_hex(4)}"
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except Exception as e:
        print(f"PostgreSQL unavailable: {e}")
        return None
    return name


def drop_pg_database(name: str) -> None:
    import psycopg

    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def pg_url(name: str) -> str:
    return f"postgresql+psycopg://root@127.0.0.1:5432/{name}"


def payload(i: int) -> dict[str, Any]:
    return {
        "endpoint": "http://127.0.0.1:8081/v1/chat/completions",
        "check": "sequential",
        "ok": True,
        "latency_ms": 12.5 + i % 7,
        "count": i,
        "text": "READY",
    }


def make_home(path: Path, database_url: str | None) -> tuple[Ledger, str]:
    led = Ledger.init(path, database_url=database_url)
    led.new_key("hostA", ["collector"])
    token, _ = create_token(led.engine, "bench", "writer")
    return led, token


def signed(led: Ledger, n: int, campaigns: int = 1, offset: int = 0) -> list[dict[str, Any]]:
    key = led.signing_key("hostA")
    return [
        sign_envelope(
            led.make_statement(
                "health.probe",
                {"campaign": f"c{(offset + i) % campaigns}", "host": f"gpu-{(offset + i) % 7}"},
                payload(offset + i),
            ),
            key,
        ).to_json()
        for i in range(n)
    ]


# --- 1. batch ingest


def bench_ingest(work: Path, n: int, backend: str, batch: int) -> dict[str, Any]:
    db_a = db_b = None
    if backend == "postgres":
        db_a, db_b = new_pg_database(), new_pg_database()
        if db_a is None or db_b is None:
            return {"what": f"batch ingest ({backend})", "note": "PostgreSQL unavailable"}
    try:
        a, _ = make_home(work / f"inproc-{backend}", pg_url(db_a) if db_a else None)
        envs = signed(a, n)
        t = time.perf_counter()
        for i in range(0, n, batch):
            a.append(envs[i : i + batch])
        inproc = n / (time.perf_counter() - t)
        a.close()

        b, token = make_home(work / f"http-{backend}", pg_url(db_b) if db_b else None)
        envs = signed(b, n)
        proc, url = serve(b.home.path)
        try:
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=120) as c:
                t = time.perf_counter()
                for i in range(0, n, batch):
                    r = c.post("/v1/entries/batch", json={"envelopes": envs[i : i + batch]})
                    r.raise_for_status()
                over_http = n / (time.perf_counter() - t)
        finally:
            stop(proc)
        b.close()
        return {
            "what": f"batch ingest ({backend}, {batch}/request)",
            "entries": n,
            "in_process_per_s": inproc,
            "http_per_s": over_http,
            "ratio": over_http / inproc,
            "target": ">= 0.5",
        }
    finally:
        for db in (db_a, db_b):
            if db:
                drop_pg_database(db)


# --- 2. 2 GiB upload


class _PutSink(http.server.BaseHTTPRequestHandler):
    """The baseline: a plain file server that writes a PUT body to disk (no hashing, no verification)."""

    target_dir = Path("/tmp")

    def do_PUT(self) -> None:
        left = int(self.headers["Content-Length"])
        path = self.target_dir / f"put-{secrets.token_hex(4)}"
        with path.open("wb") as f:
            while left:
                chunk = self.rfile.read(min(1024 * 1024, left))
                if not chunk:
                    break
                f.write(chunk)
                left -= len(chunk)
            f.flush()
            os.fsync(f.fileno())
        self.send_response(201)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        return


def _rss_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def curl_put(url: str, path: Path, token: str | None = None) -> float:
    cmd = [
        "curl",
        "-sS",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "-T",
        str(path),
        "-H",
        "Content-Type: application/octet-stream",
        "-H",
        "Expect:",
    ]
    if token:
        cmd += ["-H", f"Authorization: Bearer {token}"]
    t = time.perf_counter()
    out = subprocess.run([*cmd, url], check=True, capture_output=True, text=True)
    dt = time.perf_counter() - t
    if not out.stdout.startswith("20"):
        raise RuntimeError(f"upload answered {out.stdout}")
    return dt


def bench_upload(work: Path, gib: float) -> list[dict[str, Any]]:
    from ledger.hashing import hash_file

    size = int(gib * 1024**3)
    blob = work / "blob.bin"
    block = os.urandom(8 * 1024 * 1024)
    with blob.open("wb") as f:
        written = 0
        while written < size:
            part = block[: min(len(block), size - written)]
            f.write(secrets.token_bytes(16) + part[16:] if len(part) > 16 else part)
            written += len(part)
    digest = hash_file(blob).blake3

    sink_dir = work / "sink"
    sink_dir.mkdir()
    _PutSink.target_dir = sink_dir
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _PutSink)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    base = curl_put(f"http://127.0.0.1:{httpd.server_address[1]}/blob.bin", blob)
    httpd.shutdown()
    shutil.rmtree(sink_dir)

    led, token = make_home(work / "upload-home", None)
    proc, url = serve(led.home.path)
    try:
        rss_before = _rss_kib(proc.pid, "VmRSS")
        ours = curl_put(f"{url}/v1/artifacts/{digest}", blob, token)
        peak = _rss_kib(proc.pid, "VmHWM")
        t = time.perf_counter()
        got = 0
        with httpx.stream(
            "GET", f"{url}/v1/artifacts/{digest}", headers={"Authorization": f"Bearer {token}"}, timeout=600
        ) as resp:
            for chunk in resp.iter_bytes(1024 * 1024):
                got += len(chunk)
        down = time.perf_counter() - t
        assert got == size
    finally:
        stop(proc)
    led.close()
    mib = size / 1024**2
    return [
        {
            "what": f"upload {gib:g} GiB: curl → plain PUT file server",
            "MiB_per_s": mib / base,
            "seconds": base,
        },
        {
            "what": f"upload {gib:g} GiB: curl → ledger API (hash + verify + fsync)",
            "MiB_per_s": mib / ours,
            "seconds": ours,
            "ratio": base / ours,
            "target": ">= 0.7",
            "server_rss_growth_MB": (peak - rss_before) / 1024,
            "rss_target": "< 100",
        },
        {
            "what": f"download {gib:g} GiB (verified before the first byte)",
            "MiB_per_s": mib / down,
            "seconds": down,
        },
    ]


# --- 3. search p95 on a large PostgreSQL ledger


def _fill_worker(args: tuple[str, int, int, int]) -> list[dict[str, Any]]:
    home, start, count, campaigns = args
    led = Ledger.open(Path(home))
    try:
        return signed(led, count, campaigns, offset=start)
    finally:
        led.close()


def bench_search(work: Path, target: int, budget_s: float, campaigns: int) -> list[dict[str, Any]]:
    from concurrent.futures import ProcessPoolExecutor

    db = new_pg_database()
    if db is None:
        return [{"what": "search on PostgreSQL", "note": "PostgreSQL unavailable"}]
    try:
        led, token = make_home(work / "large", pg_url(db))
        t0 = time.perf_counter()
        made = 0
        chunk = 20 * MAX_BATCH
        with ProcessPoolExecutor(max(1, (os.cpu_count() or 2))) as pool:
            pending = pool.submit(_fill_worker, (str(led.home.path), 0, chunk, campaigns))
            while made < target and time.perf_counter() - t0 < budget_s:
                envs = pending.result()
                nxt = made + len(envs)
                if nxt < target:
                    pending = pool.submit(_fill_worker, (str(led.home.path), nxt, chunk, campaigns))
                for i in range(0, len(envs), MAX_BATCH):
                    led.append(envs[i : i + MAX_BATCH])
                made = nxt
        fill_s = time.perf_counter() - t0
        size = led.size()
        with led.engine.begin() as conn:
            conn.exec_driver_sql("ANALYZE")
        proc, url = serve(led.home.path)
        rows = []
        try:
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as c:

                def p95(label: str, make: Any, n: int = 200) -> None:
                    times = []
                    for i in range(n):
                        path, params = make(i)
                        t = time.perf_counter()
                        r = c.get(path, params=params)
                        times.append((time.perf_counter() - t) * 1000)
                        r.raise_for_status()
                    times.sort()
                    rows.append(
                        {
                            "what": label,
                            "entries": size,
                            "p50_ms": statistics.median(times),
                            "p95_ms": times[int(0.95 * len(times)) - 1],
                            "target": "p95 <= 50 ms",
                        }
                    )

                mid = size // 2
                p95(
                    "search: subject=campaign, 100 per page",
                    lambda i: ("/v1/entries", {"subject": f"campaign=c{(i * 37) % campaigns}", "limit": 100}),
                )
                p95(
                    "search: subject, keyset page deep in the log",
                    lambda i: (
                        "/v1/entries",
                        {"subject": f"campaign=c{(i * 37) % campaigns}", "limit": 100, "after": mid + i},
                    ),
                )
                p95(
                    "search: kind + signer + time window",
                    lambda i: (
                        "/v1/entries",
                        {"kind": "health.probe", "signer": "hostA", "limit": 100, "after": mid + i * 11},
                    ),
                )
                p95(
                    "subject timeline (JSON, newest first)",
                    lambda i: (
                        "/v1/entries",
                        {"subject": f"campaign=c{(i * 13) % campaigns}", "order": "desc", "limit": 100},
                    ),
                )
                p95(
                    "subject timeline page (HTML, 100 rows)",
                    lambda i: (f"/subjects/campaign/c{(i * 13) % campaigns}", {}),
                    n=50,
                )
        finally:
            stop(proc)
        led.close()
        for r in rows:
            r["fill_s"] = fill_s
        return rows
    finally:
        drop_pg_database(db)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--entries", type=int, default=20000, help="entries for the ingest comparison")
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--upload-gib", type=float, default=2.0)
    ap.add_argument("--large", type=int, default=1_000_000, help="target size of the PostgreSQL ledger")
    ap.add_argument("--large-budget-s", type=float, default=600, help="stop filling after this long")
    ap.add_argument("--campaigns", type=int, default=1000)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-api-"))
    rows: list[dict[str, Any]] = []
    try:
        rows.append(bench_ingest(work, args.entries, "sqlite", args.batch))
        rows.append(bench_ingest(work, args.entries, "postgres", args.batch))
        if args.upload_gib > 0:
            rows.extend(bench_upload(work, args.upload_gib))
        if args.large > 0:
            rows.extend(bench_search(work, args.large, args.large_budget_s, args.campaigns))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    path = write_results("api", rows, {"args": vars(args)})
    print_table(
        rows,
        [
            "what",
            "entries",
            "in_process_per_s",
            "http_per_s",
            "ratio",
            "MiB_per_s",
            "server_rss_growth_MB",
            "p50_ms",
            "p95_ms",
            "target",
        ],
    )
    print(f"\nresults: {path}")


if __name__ == "__main__":
    main()
