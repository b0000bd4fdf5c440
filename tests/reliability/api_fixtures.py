"""Helpers and fixtures of the API-deployment reliability tests (reused from ``tests.api.conftest``).

Test modules take the fixtures by assignment (``pg_databases = api_fixtures.pg_databases``) so they stay
in this folder's own namespace.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ledger.service import Ledger
from tests.api.conftest import (
    BACKENDS,
    LEDGER_BIN,
    PG_ADMIN,
    Deployment,
    PgDatabases,
    Server,
    free_port,
    make_deployment,
    require_postgres,
    start_server,
)

__all__ = [
    "BACKENDS",
    "LEDGER_BIN",
    "PG_ADMIN",
    "Deployment",
    "PgDatabases",
    "Server",
    "auth",
    "collector_home",
    "free_port",
    "get_json",
    "ledger_cli",
    "make_deployment",
    "pg_databases",
    "require_postgres",
    "start_server",
    "verify_json",
]


@pytest.fixture(scope="session")
def pg_databases() -> Iterator[PgDatabases]:
    dbs = PgDatabases()
    yield dbs
    dbs.drop_all()


def ledger_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run the installed console script, as an operator does."""
    return subprocess.run([LEDGER_BIN, *args], check=False, capture_output=True, text=True, timeout=timeout)


def verify_json(home: Path) -> tuple[int, dict[str, Any]]:
    """``ledger --home HOME verify --json``: exit code and report (the home names its database)."""
    out = ledger_cli("--home", str(home), "verify", "--json")
    assert out.returncode in (0, 1), out.stdout + out.stderr
    doc: dict[str, Any] = json.loads(out.stdout)
    return out.returncode, doc


def collector_home(path: Path, server_ledger: Ledger, key: str = "gpu01") -> Ledger:
    """A GPU host's own home whose collector key the server's ledger trusts."""
    home = Ledger.init(path)
    home.new_key(key, ["collector"])
    server_ledger.enrol_key(key, home.signing_key(key).public.b64, ["collector"])
    return home


def auth(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def get_json(server: Server, path: str, token: str) -> Any:
    r = httpx.get(server.url + path, headers=auth(token), timeout=60)
    r.raise_for_status()
    return r.json()
