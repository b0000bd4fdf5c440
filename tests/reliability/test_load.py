"""Load: 8 collector processes push concurrently for 60 s to one server (SQLite, PostgreSQL).

No error, no loss (every id a collector was told was appended is in the log, and nothing else), nothing
left in any spool, the chain verifies; the p95 append latency is reported. ``LOAD_SECONDS`` and
``LOAD_COLLECTORS`` scale it; ``RELIABILITY_REPORT=FILE`` appends the figures as a JSON line.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import threading
import time
from pathlib import Path
from types import ModuleType

import pytest

from ledger.service import Ledger
from tests.reliability import api_fixtures
from tests.reliability.api_fixtures import PgDatabases, make_deployment, start_server, verify_json
from tests.reliability.conftest import LogWatch

pg_databases = api_fixtures.pg_databases
REPO = Path(__file__).resolve().parents[2]


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_load", REPO / "bench" / "bench_load.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_load"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.parametrize("backend", api_fixtures.BACKENDS)
def test_eight_collectors_for_a_minute_lose_nothing(
    tmp_path: Path, backend: str, pg_databases: PgDatabases
) -> None:
    seconds = float(os.environ.get("LOAD_SECONDS", "60"))
    collectors = int(os.environ.get("LOAD_COLLECTORS", "8"))
    dep = make_deployment(backend, tmp_path / "server", pg_databases)
    workers = "2" if backend == "postgres" else "1"  # several API processes against one PostgreSQL
    server = start_server(dep.home, "--workers", workers)
    try:
        fig = _bench().run_load(
            dep.home,
            dep.ledger,
            server.url,
            dep.tokens["writer"],
            tmp_path,
            collectors=collectors,
            seconds=seconds,
        )
    finally:
        server.stop()
    try:
        ids: dict[str, list[str]] = fig.pop("ids")
        assert not fig["errors"], fig["errors"][:5]
        assert fig["spooled"] == 0, "a collector spooled: the server was unreachable or refused"
        assert fig["appended"] > 10 * collectors, fig
        for key, told in ids.items():
            assert len(told) == len(set(told))
            logged = [e.entry_id for e in dep.ledger.query(signer=key, limit=None)]
            assert logged == told, f"{key}: the log differs from what the collector was told (loss or extra)"
        size = dep.ledger.size()
        assert size == fig["size_before"] + fig["appended"], (size, fig)
        watch = LogWatch()
        watch.check(dep.ledger, full=True)  # independent chain re-derivation: no gap, no fork
        code, report = verify_json(dep.home)
        assert code == 0 and report["ok"], report["problems"][:5]
        fig.update(backend=backend, workers=int(workers), final_size=size, verify_ok=True)
        print(json.dumps(fig))
        path = os.environ.get("RELIABILITY_REPORT")
        if path:
            with open(path, "a") as f:
                f.write(json.dumps({"test": f"load-{backend}", **fig}) + "\n")
    finally:
        dep.ledger.close()


def test_regression_concurrent_append_and_key_reads_deadlocked_sqlite(tmp_path: Path) -> None:
    """Regression: an append (DB write lock, then the keyring cache lock) and a read of the keyring or tree
    (cache lock, then a transaction) in two threads of one process deadlocked until SQLite's 60 s busy
    timeout, then answered HTTP 500 "database is locked" — found by the load test."""
    led = Ledger.init(tmp_path / "home")
    led.new_key("c", ["collector"])
    key = led.signing_key("c")
    errors: list[BaseException] = []
    stop = time.monotonic() + 4

    def appender() -> None:
        try:
            while time.monotonic() < stop:
                led.append([led.sign(led.make_statement("note", {"campaign": "dl"}, {"text": "x"}), key)])
        except BaseException as e:
            errors.append(e)

    def reader() -> None:
        try:
            while time.monotonic() < stop:
                led.signer_names()
                led.tree()
                led.key_record("c")
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=f, daemon=True) for f in (appender, appender, reader, reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads), "threads deadlocked"
    assert not errors, errors
    assert led.verify()
    led.close()
