"""Start-up time of the CLI: `ledger log` and `ledger show` beside `ledger --help`, hyperfine-like.

    .venv/bin/python bench/bench_cli_startup.py              # 15 interleaved rounds
    .venv/bin/python bench/bench_cli_startup.py --rounds 30

Every command runs as a fresh process (as a user types it), in interleaved rounds so that load on the machine
falls on all of them alike; the table gives min / median / p90 wall time. Beside the CLI commands it times the
floors they cannot go below: the interpreter alone, and the imports the read path needs (SQLAlchemy Core,
which the repository's queries are written in; SQLModel, which the tables are declared with; the repository
layer; the whole service facade). Target (issue 13): `ledger log` and `ledger show` ≤ 0.3 s.
Writes bench/results/cli_startup.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table, write_results

TARGET_S = 0.3


def _ledger_bin() -> str:
    return str(Path(sys.executable).with_name("ledger"))


def _prepare(home: Path) -> str:
    """A home with a few entries; returns one entry id for `ledger show`."""
    from ledger.service import Ledger

    led = Ledger.init(home)
    try:
        last = ""
        for i in range(20):
            last = led.record("note", {"campaign": "bench"}, {"text": f"note {i}"}, key="admin").entry_id
        return last
    finally:
        led.close()


def _run(argv: list[str], env: dict[str, str]) -> float:
    t = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    py = sys.executable
    ledger = _ledger_bin()
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as tmp:
        home = Path(tmp) / "home"
        entry = _prepare(home)
        env = {**os.environ, "LEDGER_HOME": str(home)}
        commands: dict[str, list[str]] = {
            "python -c pass (interpreter floor)": [py, "-c", "pass"],
            "import sqlalchemy (Core: the repo's queries)": [py, "-c", "import sqlalchemy"],
            "import sqlmodel (the table declarations)": [py, "-c", "import sqlmodel"],
            "import ledger.repo (the query layer)": [py, "-c", "import ledger.repo"],
            "import ledger.service (the facade)": [py, "-c", "import ledger.service"],
            "ledger --version": [ledger, "--version"],
            "ledger --help": [ledger, "--help"],
            "ledger log": [ledger, "log"],
            "ledger show ID": [ledger, "show", entry],
        }
        for argv in commands.values():  # warm the page cache and the bytecode
            _run(argv, env)
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.rounds):
            for name, argv in commands.items():
                times[name].append(_run(argv, env))
    rows: list[dict[str, Any]] = []
    for name, ts in times.items():
        ts.sort()
        rows.append(
            {
                "command": name,
                "min_s": round(ts[0], 4),
                "median_s": round(statistics.median(ts), 4),
                "p90_s": round(ts[min(len(ts) - 1, int(0.9 * len(ts)))], 4),
                "runs": len(ts),
                "meets_target": ts[0] <= TARGET_S if name.startswith("ledger ") else None,
            }
        )
    floor = next(r["median_s"] for r in rows if r["command"].startswith("import sqlalchemy"))
    path = write_results(
        "cli_startup",
        rows,
        {
            "target_s": TARGET_S,
            "sqlalchemy_import_median_s": floor,
            "note": "the read path needs SQLAlchemy (the repository's queries are SQLAlchemy Core); "
            "its import alone is the ceiling any `ledger log` reaching the same queries can get near",
        },
    )
    print_table(rows, ["command", "min_s", "median_s", "p90_s", "runs", "meets_target"])
    print(f"target ≤ {TARGET_S} s for `ledger log` / `ledger show`; results in {path}")


if __name__ == "__main__":
    main()
