"""Fixtures of the HTTP API tests: real ledgers on SQLite or PostgreSQL, `ledger serve` in a subprocess."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from ledger.service import Ledger
from ledger.tokens import create_token

LEDGER_BIN = str(Path(sys.executable).with_name("ledger"))
PG_ADMIN = "host=127.0.0.1 port=5432 user=root dbname=postgres connect_timeout=3"
PG_URL = "postgresql+psycopg://root@127.0.0.1:5432/{db}"


def pg_reachable() -> str | None:
    """None when the PostgreSQL server answers, else why not."""
    try:
        import psycopg

        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except Exception as e:
        return str(e)
    return None


def require_postgres() -> None:
    """Skip without PostgreSQL on a workstation; in CI (env CI set) its absence is a failure."""
    why = pg_reachable()
    if why is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"PostgreSQL at 127.0.0.1:5432 is unreachable in CI: {why}")
    pytest.skip(f"PostgreSQL at 127.0.0.1:5432 is unreachable: {why}")


class PgDatabases:
    """Fresh databases named ledger_test_<session>_<n>, all dropped at the end of the session."""

    def __init__(self) -> None:
        self.session = secrets.token_hex(4)
        self.made: list[str] = []

    def new(self) -> str:
        import psycopg

        name = f"ledger_test_{self.session}_{len(self.made)}"
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        self.made.append(name)
        return PG_URL.format(db=name)

    def drop_all(self) -> None:
        if not self.made:
            return
        import psycopg

        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            for name in self.made:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def fresh_pg_database() -> Iterator[str]:
    """The URL of a new PostgreSQL database, dropped afterwards (fails in CI, skips elsewhere, without a
    server)."""
    require_postgres()
    dbs = PgDatabases()
    try:
        yield dbs.new()
    finally:
        dbs.drop_all()


@pytest.fixture(scope="session")
def pg_databases() -> Iterator[PgDatabases]:
    dbs = PgDatabases()
    yield dbs
    dbs.drop_all()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    url: str
    home: Path
    proc: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_server(
    home: Path, *args: str, env: dict[str, str] | None = None, port: int | None = None
) -> Server:
    """Run `ledger serve` on a free port and wait until /v1/health answers."""
    port = port or free_port()
    argv = [LEDGER_BIN, "--home", str(home), "serve", "--host", "127.0.0.1", "--port", str(port)]
    return serve_process([*argv, "--log-level", "warning", *args], home, port, "/v1/health", env=env)


def serve_process(
    argv: list[str],
    home: Path,
    port: int,
    ready_path: str,
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> Server:
    """Run an HTTP server process (its output in ``home/serve-PORT.log``) and wait until ``ready_path``
    answers 200; a process that exits or never answers is an error naming its output."""
    log = home / f"serve-{port}.log"
    out = log.open("wb")
    proc = subprocess.Popen(
        argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}, cwd=cwd
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{argv[0]} exited with {proc.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(url + ready_path, timeout=2).status_code == 200:
                return Server(url, home, proc, log)
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"{argv[0]} did not become ready:\n{log.read_text()}")


@dataclass
class Deployment:
    """A ledger home with collector/reviewer/operator keys and API tokens of every role."""

    backend: str
    home: Path
    database_url: str
    ledger: Ledger
    tokens: dict[str, str] = field(default_factory=dict)

    def sign(
        self,
        kind: str,
        subject: dict[str, str],
        payload: dict[str, Any],
        *,
        key: str = "collector1",
        refs: list[tuple[str, str]] | None = None,
        artifacts: list[Any] | None = None,
    ) -> dict[str, Any]:
        st = self.ledger.make_statement(kind, subject, payload, refs=refs or [], artifacts=artifacts or [])
        return self.ledger.sign(st, key).to_json()

    def headers(self, role: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[role]}"} if role else {}


def make_deployment(backend: str, home: Path, pg: PgDatabases | None) -> Deployment:
    if backend == "postgres":
        require_postgres()
        assert pg is not None
        url = pg.new()
    else:
        url = f"sqlite:///{home / 'ledger.db'}"
    ledger = Ledger.init(home, database_url=url)
    ledger.new_key("collector1", ["collector"])
    ledger.new_key("reviewer1", ["reviewer"])
    ledger.new_key("operator1", ["operator"])
    dep = Deployment(backend, home, url, ledger)
    for role in ("reader", "writer", "admin"):
        dep.tokens[role], _ = create_token(ledger.engine, f"test-{role}", role)
    return dep


BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(scope="session", params=BACKENDS)
def deployment(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, pg_databases: PgDatabases
) -> Iterator[Deployment]:
    dep = make_deployment(request.param, tmp_path_factory.mktemp(f"home-{request.param}"), pg_databases)
    yield dep
    dep.ledger.close()


# Small limits so the refusals are cheap to provoke.
MAX_BODY = 256 * 1024
MAX_ARTIFACT = 2 * 1024 * 1024


@pytest.fixture(scope="session")
def server(deployment: Deployment) -> Iterator[Server]:
    srv = start_server(deployment.home, "--max-body", str(MAX_BODY), "--max-artifact", str(MAX_ARTIFACT))
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def public_server(deployment: Deployment) -> Iterator[Server]:
    srv = start_server(deployment.home, "--public-reads")
    yield srv
    srv.stop()


@pytest.fixture
def http(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c
