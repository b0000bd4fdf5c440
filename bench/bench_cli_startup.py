"""Start-up time of the CLI: `ledger log` and `ledger show` beside `ledger --help`, hyperfine-like.

    .venv/bin/python bench/bench_cli_startup.py              # 15 interleaved rounds
    .venv/bin/python bench/bench_cli_startup.py --rounds 30
    .venv/bin/python bench/bench_cli_startup.py --baseline /tmp/old   # also time an older checkout's code

Every command runs as a fresh process (as a user types it), in interleaved rounds so that load on the machine
falls on all of them alike; the table gives min / median / p90 wall time. Beside the CLI commands it times the
floors: the interpreter alone; SQLAlchemy Core (the repository's queries, which `log`/`show` no longer need
on a SQLite home); `ledger.reads` (the stdlib-sqlite3 read path they use there); the repository layer and
the whole service facade (what every other command imports). Target (issue 13): `ledger log` and
`ledger show` ≤ 0.3 s (median). `--baseline DIR` times an older checkout's code in the same rounds.
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
    ap.add_argument(
        "--baseline",
        type=Path,
        help="a checkout of older code (e.g. `git archive main | tar -x -C DIR`): its `ledger log`, "
        "`ledger show` and `ledger --help` are timed in the same rounds (PYTHONPATH=DIR)",
    )
    ap.add_argument(
        "--no-bytecode",
        action="store_true",
        help="keep PYTHONDONTWRITEBYTECODE as the environment sets it (every run then recompiles the "
        "package's sources); by default the warm-up run writes the bytecode an installed wheel has",
    )
    args = ap.parse_args()
    py = sys.executable
    ledger = _ledger_bin()
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as tmp:
        home = Path(tmp) / "home"
        entry = _prepare(home)
        env = {**os.environ, "LEDGER_HOME": str(home)}
        if not args.no_bytecode:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
        commands: dict[str, list[str]] = {
            "python -c pass (interpreter floor)": [py, "-c", "pass"],
            "import sqlalchemy (Core: the repo's queries)": [py, "-c", "import sqlalchemy"],
            "import ledger.reads (log/show's SQLite read path)": [py, "-c", "import ledger.reads"],
            "import ledger.repo (the query layer)": [py, "-c", "import ledger.repo"],
            "import ledger.service (the facade)": [py, "-c", "import ledger.service"],
            "ledger --version": [ledger, "--version"],
            "ledger --help": [ledger, "--help"],
            "ledger log": [ledger, "log"],
            "ledger show ID": [ledger, "show", entry],
        }
        envs = dict.fromkeys(commands, env)
        if args.baseline is not None:
            old_env = {**env, "PYTHONPATH": str(args.baseline.resolve())}
            for name in ("ledger --help", "ledger log", "ledger show ID"):
                commands[f"{name} (baseline)"] = commands[name]
                envs[f"{name} (baseline)"] = old_env
        for name, argv in commands.items():  # warm the page cache and the bytecode
            _run(argv, envs[name])
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.rounds):
            for name, argv in commands.items():
                times[name].append(_run(argv, envs[name]))
    rows: list[dict[str, Any]] = []
    help_median = statistics.median(times["ledger --help"])
    for name, ts in times.items():
        ts.sort()
        rows.append(
            {
                "command": name,
                "min_s": round(ts[0], 4),
                "median_s": round(statistics.median(ts), 4),
                "p90_s": round(ts[min(len(ts) - 1, int(0.9 * len(ts)))], 4),
                "runs": len(ts),
                "x_help": round(statistics.median(ts) / help_median, 2),
                "meets_target": statistics.median(ts) <= TARGET_S if name.startswith("ledger ") else None,
            }
        )
    floor = next(r["median_s"] for r in rows if r["command"].startswith("import sqlalchemy"))
    path = write_results(
        "cli_startup",
        rows,
        {
            "target_s": TARGET_S,
            "meets_target_is": "median wall time <= target_s",
            "x_help": "median / median of `ledger --help` in the same rounds",
            "baseline": str(args.baseline) if args.baseline else None,
            "bytecode_cached": not args.no_bytecode,
            "sqlalchemy_import_median_s": floor,
            "note": "on a SQLite home `ledger log`/`show` read through ledger.reads (stdlib sqlite3) and "
            "import neither SQLAlchemy nor SQLModel; `main` builds only the command it runs (Typer builds "
            "every command an app holds); Typer's own parameter coercion imports pydantic",
        },
    )
    print_table(rows, ["command", "min_s", "median_s", "p90_s", "x_help", "runs", "meets_target"])
    print(f"target ≤ {TARGET_S} s for `ledger log` / `ledger show`; results in {path}")


if __name__ == "__main__":
    main()
