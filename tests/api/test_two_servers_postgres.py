"""Two `ledger serve` processes on one PostgreSQL database, eight concurrent writers: one gap-free chain."""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.api.conftest import LEDGER_BIN, PgDatabases, make_deployment, start_server

WRITERS = 8
PER_WRITER = 25


@pytest.mark.postgres
@pytest.mark.slow
def test_two_servers_eight_writers_one_gap_free_chain(tmp_path: Path, pg_databases: PgDatabases) -> None:
    dep = make_deployment("postgres", tmp_path / "home", pg_databases)
    servers = [start_server(dep.home), start_server(dep.home, "--workers", "2")]
    start = dep.ledger.size()
    try:

        def writer(i: int) -> list[int]:
            seqs = []
            with httpx.Client(timeout=60, headers=dep.headers("writer")) as c:
                for n in range(PER_WRITER):
                    srv = servers[(i + n) % 2]
                    env = dep.sign(
                        "note", {"campaign": "concurrency", "writer": str(i)}, {"text": f"w{i} n{n}"}
                    )
                    r = c.post(f"{srv.url}/v1/entries", json=env)
                    assert r.status_code == 201, r.text
                    seqs.append(r.json()["seq"])
            return seqs

        with ThreadPoolExecutor(WRITERS) as pool:
            seqs = sorted(s for chunk in pool.map(writer, range(WRITERS)) for s in chunk)
        assert seqs == list(range(start, start + WRITERS * PER_WRITER))  # no gaps, no seq handed out twice
        assert dep.ledger.size() == start + WRITERS * PER_WRITER
        out = subprocess.run(
            [LEDGER_BIN, "--home", str(dep.home), "verify", "--json"],
            check=False,
            capture_output=True,
            text=True,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        assert '"ok": true' in out.stdout
    finally:
        for s in servers:
            s.stop()
        dep.ledger.close()
