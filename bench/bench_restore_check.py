"""The restore check (``check routing-change --action restore``), many probes and ends in the window.

Fix 146: ``routing._before_end`` formatted its reason (ids, times, the job's state) before it decided
anything, and the check asked it of every probe against every recorded end of a run (``_recorded_ends``):
with 20k entries in the probe window it was called ~1.4 million times and took ~65% of the check's time
(fix 138's measurement). The rule is now decided first (``routing._drops``, O(1) a pair) and the text built
once, for the end the check reports.

One ledger (built once under ``--work``, kept between runs): the fixture ``seed000-restoration`` and a
campaign of the subject of ``--jobs`` jobs (a running entry, ``--probes`` probes of its engine — one in ten a
failure —, its launch and terminal entry; production seen failing, a cancelled job that never ran, production
passing), each with two jobs of other subjects of half as many probes, all within the probe window
(``--layout window``; ``typical``: all but the last ten jobs two hours earlier, outside it). Old (the
routing module of ``--before``, default HEAD, loaded from git) and new (the working tree) alternate in
``--rounds`` rounds of ``--repeat`` checks each, on the same home; their answers must be equal. Also counted
(once, untimed): calls to ``_before_end`` in one check of each. Writes bench/results/restore_check.json and
prints a table with the ratio new/old.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import statistics
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table, write_results

from ledger.entries import format_time, parse_time
from ledger.policy import routing as after
from ledger.policy.fixtures import build_fixture_ledger
from ledger.policy.loader import load_policy
from ledger.service import Ledger

ROOT = Path(__file__).resolve().parent.parent
MODEL, HOST = "acme-tiny-q8.gguf", "acme-box-7"
PROD = {"backend": "llamacpp", "model": MODEL, "host": HOST}
HEALTH = {"endpoint": "http://127.0.0.1:8080/health", "check": "health", "ok": True, "http_status": 200}
MODELS = {"endpoint": "http://127.0.0.1:8080/v1/models", "check": "models", "ok": True, "http_status": 200,
          "model_identity": MODEL, "details": {"served": [MODEL]}}  # fmt: skip
READY = {"endpoint": "http://127.0.0.1:8080/v1/chat/completions", "check": "completion", "ok": True,
         "http_status": 200, "expected": "READY", "text": "READY", "max_tokens": 8,
         "model_identity": MODEL}  # fmt: skip
DEAD = {**HEALTH, "ok": False, "http_status": 503, "error": "Service Unavailable"}


def load_before(rev: str, work: Path) -> ModuleType:
    """``ledger/policy/routing.py`` as of ``rev``, loaded as a module of its own (it imports the rest of the
    working tree's ledger, as the old file did at that revision where nothing else changed)."""
    src = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{rev}:ledger/policy/routing.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = work / "routing_before.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("routing_before", path)
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["routing_before"] = mod
    spec.loader.exec_module(mod)
    return mod


def build(work: Path, jobs: int, probes: int, layout: str) -> tuple[Path, int, float]:
    """The home (built once for these sizes), its size, and the reference time's offset in seconds."""
    shift = timedelta(hours=3 if layout == "typical" else 0)
    start = parse_time("2026-09-01T18:31:00Z") + shift
    home = work / f"home-{layout}-{jobs}x{probes}"
    if (home / ".built").exists():
        lg = Ledger.open(home)
        try:
            return home, lg.size(), shift.total_seconds()
        finally:
            lg.close()
    shutil.rmtree(home, ignore_errors=True)
    home.parent.mkdir(parents=True, exist_ok=True)
    ledger, _s, b = build_fixture_ledger(
        ROOT / "policies/fixtures/routing-change/seed000-restoration.toml",
        home,
        ROOT / "policies",
        init=Ledger.init,
    )
    key = b.keys["collector"]

    def batch(items: list[tuple[str, dict[str, str], dict[str, Any]]], at: Any) -> None:
        envs = []
        for i, (kind, subject, payload) in enumerate(items):
            # no two statements alike; every one observed before its job's recorded end
            ended = kind in ("engine.launch", "job") and payload.get("state") != "running"
            seen = at if ended else at - timedelta(seconds=10) + timedelta(milliseconds=i)
            st = ledger.make_statement(kind, subject, payload, collected_at=format_time(seen))
            envs.append(ledger.sign(st, key))
        ledger.append(envs, logged_at=at)

    def job(
        subject: dict[str, str], jid: str, n: int, at: Any
    ) -> list[tuple[str, dict[str, str], dict[str, Any]]]:
        end = format_time(at - timedelta(seconds=1))
        items: list[tuple[str, dict[str, str], dict[str, Any]]] = [
            ("job", subject, {"job_id": jid, "state": "running"})
        ]
        items += [("health.probe", subject, DEAD if i % 10 == 9 else HEALTH) for i in range(n)]
        launch = {"engine": "llamacpp", "command": ["llama-server"], "ready": True, "ended_at": end,
                  "started_at": format_time(at - timedelta(seconds=20))}  # fmt: skip
        items += [("engine.launch", subject, launch),
                  ("job", subject, {"job_id": jid, "state": "succeeded", "ended_at": end})]  # fmt: skip
        return items

    t0 = time.perf_counter()
    for k in range(jobs):
        at = start + timedelta(seconds=30 * k)
        if layout == "typical":  # all but the last ten jobs two hours earlier, outside the window
            late = k - (jobs - 10)
            at = (
                start - timedelta(hours=2) + timedelta(seconds=30 * k)
                if late < 0
                else start + timedelta(seconds=300 * late)
            )
        camp = {**PROD, "campaign": "bench"}
        batch(job(camp, f"j{k}", probes, at), at)
        at2 = at + timedelta(seconds=10)
        # production seen failing, the end of a job of the campaign that never ran, production passing
        never = {
            "job_id": f"never{k}",
            "state": "cancelled",
            "ended_at": format_time(at2 - timedelta(seconds=1)),
        }
        batch([("health.probe", PROD, DEAD), ("job", camp, never), ("health.probe", PROD, HEALTH)], at2)
        for h in range(2):  # other subjects' campaigns: their ends are read too
            other = {**PROD, "host": f"other-{h}", "campaign": f"o{h}"}
            batch(job(other, f"j{k}", probes // 2, at2 + timedelta(seconds=1)), at2 + timedelta(seconds=1))
    at = start + timedelta(seconds=30 * jobs + 100)
    batch([("health.probe", PROD, p) for p in (HEALTH, MODELS, READY)], at)
    size = ledger.size()
    print(f"built {size} entries in {time.perf_counter() - t0:.1f}s ({home})")
    ledger.close()
    (home / ".built").touch()
    return home, size, shift.total_seconds()


def check(mod: ModuleType, home: Path, now: Any, repeat: int) -> tuple[list[float], dict[str, Any]]:
    lg = Ledger.open(home)
    policy = load_policy("routing-change")
    try:
        times, r = [], {}
        for _ in range(repeat):
            t0 = time.perf_counter()
            r = mod.check_routing_change(
                lg, policy, {"model": MODEL, "host": HOST}, action="restore", now=now
            )
            times.append(time.perf_counter() - t0)
        return times, r
    finally:
        lg.close()


def count_calls(mod: ModuleType, home: Path, now: Any) -> int:
    """Calls to ``mod._before_end`` in one check (the module's own global, as its caller looks it up)."""
    real, n = mod._before_end, [0]

    def spy(*a: Any, **k: Any) -> Any:
        n[0] += 1
        return real(*a, **k)

    mod._before_end = spy
    try:
        check(mod, home, now, 1)
    finally:
        mod._before_end = real
    return n[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--jobs", type=int, default=30, help="jobs of the subject's campaign (fix 138: 100)")
    ap.add_argument("--probes", type=int, default=94, help="probes per job (fix 138: 94)")
    ap.add_argument("--layout", choices=("window", "typical"), default="window")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3, help="checks per round (the first is cold)")
    ap.add_argument("--before", default="HEAD", help="git revision of the old routing.py")
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench-restore-check"))
    ap.add_argument("--name", default="restore_check", help="results file name (bench/results/NAME.json)")
    args = ap.parse_args()

    args.work.mkdir(parents=True, exist_ok=True)
    before = load_before(args.before, args.work)
    home, size, shift = build(args.work, args.jobs, args.probes, args.layout)
    now = parse_time("2026-09-01T19:30:00Z") + timedelta(seconds=shift)
    mods = {"old": before, "new": after}
    res: dict[str, list[list[float]]] = {"old": [], "new": []}
    answers: dict[str, dict[str, Any]] = {}
    for rnd in range(args.rounds):
        order = ("old", "new") if rnd % 2 == 0 else ("new", "old")
        for label in order:
            ts, r = check(mods[label], home, now, args.repeat)
            res[label].append(ts)
            answers[label] = r
            print(f"round {rnd} {label}: {[round(t * 1000) for t in ts]} ms")
    same = answers["old"] == answers["new"]
    r = answers["new"]
    rows = []
    for label in ("old", "new"):
        firsts = [ts[0] for ts in res[label]]
        warm = [t for ts in res[label] for t in ts[1:]] or firsts
        rows.append(
            {
                "code": label,
                "first_ms": statistics.median(firsts) * 1000,
                "warm_median_ms": statistics.median(warm) * 1000,
                "warm_min_ms": min(warm) * 1000,
                "before_end_calls": count_calls(mods[label], home, now),
            }
        )
    ratio = rows[1]["warm_median_ms"] / rows[0]["warm_median_ms"]
    for row in rows:
        row["ratio_new_old"] = row["warm_median_ms"] / rows[0]["warm_median_ms"]
    print_table(
        rows, ["code", "first_ms", "warm_median_ms", "warm_min_ms", "before_end_calls", "ratio_new_old"]
    )
    stale = sum(x["rule"] == "stale" for x in r["ignored"])
    print(
        f"{size} entries ({args.layout}); allowed {r['allowed']}, probes {len(r['probes'])}, stale {stale}; "
        f"answers equal: {same}; new/old warm median {ratio:.3f}"
    )
    path = write_results(
        args.name,
        rows,
        {
            "params": {k: str(v) for k, v in vars(args).items()},
            "entries": size,
            "answers_equal": same,
            "ratio_new_old_warm_median": ratio,
            "answer": {"allowed": r["allowed"], "probes": len(r["probes"]), "stale": stale},
        },
    )
    print(f"wrote {path}")
    if not same:
        raise SystemExit("the old and new checks answered differently")


if __name__ == "__main__":
    main()
