"""Verdict latency on one campaign of N entries inside a ledger of M entries (real keys, real signatures).

    .venv/bin/python bench/bench_verdict.py --entries 1000000 --campaign 10000
    .venv/bin/python bench/bench_verdict.py --home /tmp/bench-home --reuse   # time again without rebuilding

Writes bench/results/verdict.json and prints a table. The ledger is built with `Ledger.append` in batches of
1000 signed envelopes (every append verifies every signature, as ingest always does); build time is reported.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ledger import __version__
from ledger.entries import format_time
from ledger.policy import evaluate, load_policy
from ledger.policy.loader import LoadedPolicy
from ledger.service import Ledger
from ledger.signing import SigningKey, sign_envelope

BATCH = 1000
CAMPAIGN = "bench-campaign"
T0 = datetime(2026, 9, 10, 9, 0, tzinfo=UTC)


def statement(
    kind: str,
    subject: dict[str, str],
    payload: dict[str, Any],
    at: datetime,
    refs: list[tuple[str, str]] | None = None,
) -> dict[str, Any]:
    return {
        "_type": "https://evidence-ledger.dev/entry/v1",
        "kind": kind,
        "kind_version": 1,
        "subject": subject,
        "payload": payload,
        "artifacts": [],
        "refs": [{"rel": r, "id": i} for r, i in refs or []],
        "collected_at": format_time(at),
        "collector": {
            "host": subject.get("host", "bench"),
            "tool": "evidence-ledger",
            "version": __version__,
        },
    }


def campaign_statements(n: int, keys: dict[str, SigningKey], job_id: str) -> list[tuple[dict[str, Any], str]]:
    """A campaign that passes every gate: n entries, most of them readiness polls of /health."""
    subj = {"campaign": CAMPAIGN, "backend": "vllm", "model": "bench/model", "host": "bench-host"}
    t = T0
    rev = "1" * 40
    head: list[tuple[dict[str, Any], str]] = [
        (
            statement(
                "host.probe",
                subj,
                {"hostname": "bench-host", "os": "linux", "kernel": "6.8", "gpus": [{"name": "GPU"}]},
                t,
            ),
            "collector",
        ),
        (
            statement(
                "model.pin",
                subj,
                {
                    "repo_id": "bench/model",
                    "revision": rev,
                    "root": "/m",
                    "total_size": 1,
                    "verification": "passed",
                    "files": [],
                },
                t,
            ),
            "collector",
        ),
        (
            statement(
                "engine.launch",
                subj,
                {
                    "engine": "vllm",
                    "command": ["vllm"],
                    "started_at": format_time(t),
                    "ready": True,
                    "bindings": {"model_revision": rev},
                },
                t,
            ),
            "collector",
        ),
        (
            statement(
                "health.probe",
                subj,
                {"endpoint": "/v1/chat", "check": "completion", "ok": True, "text": "READY"},
                t,
            ),
            "collector",
        ),
        (
            statement("health.probe", subj, {"endpoint": "/v1/chat", "check": "structured", "ok": True}, t),
            "collector",
        ),
        (
            statement(
                "health.probe",
                subj,
                {"endpoint": "/v1/chat", "check": "sequential", "ok": True, "count": 20},
                t,
            ),
            "collector",
        ),
    ]
    polls = [
        (
            statement(
                "health.probe",
                subj,
                {
                    "endpoint": "/health",
                    "check": "health",
                    "ok": True,
                    "http_status": 200,
                    "sleeping": False,
                    "latency_ms": float(i % 50),
                },
                t + timedelta(seconds=i),
            ),
            "collector",
        )
        for i in range(max(0, n - len(head) - 5))
    ]
    return head + polls


def build(home: Path, total: int, campaign: int) -> dict[str, float]:
    started = time.perf_counter()
    ledger = Ledger.init(home)
    keys = {name: SigningKey.generate(name) for name in ("collector", "reviewer", "operator")}
    for name, key in keys.items():
        key.save(ledger.home.key_path(name))
        ledger.enrol_key(name, key.public.b64, [name])
    other = total - campaign - ledger.size()
    camp = campaign_statements(campaign, keys, "bench-job")
    every = max(1, other // max(1, len(camp)))
    batch: list[Any] = []
    appended = 0

    def flush() -> None:
        nonlocal batch, appended
        if batch:
            ledger.append(batch, logged_at=T0 + timedelta(seconds=appended // BATCH))
            appended += len(batch)
            batch = []
            if appended % 50_000 < BATCH:
                print(
                    f"  {appended:,} entries appended ({time.perf_counter() - started:.0f} s)",
                    file=sys.stderr,
                )

    i = 0
    ci = 0
    while i < other or ci < len(camp):
        if ci < len(camp) and (i >= other or i % every == 0):
            st, key = camp[ci]
            ci += 1
        else:
            st = statement(
                "health.probe",
                {"campaign": f"other-{i % 997}", "host": f"h{i % 31}"},
                {"endpoint": "/health", "ok": True, "http_status": 200},
                T0 + timedelta(seconds=i),
            )
            key = "collector"
            i += 1
        batch.append(sign_envelope(st, keys[key]))
        if len(batch) == BATCH:
            flush()
    flush()
    # the reviewed semantic gate and the reviewed, accepted benchmark close the campaign
    subj = {"campaign": CAMPAIGN, "backend": "vllm", "model": "bench/model", "host": "bench-host"}
    t = T0 + timedelta(days=1)
    sem = ledger.append(
        [
            sign_envelope(
                statement("gate.result", subj, {"gate": "semantic", "status": "passed"}, t), keys["collector"]
            )
        ],
        logged_at=t,
    )[0]
    bench_ = ledger.append(
        [
            sign_envelope(
                statement(
                    "gate.result",
                    subj,
                    {
                        "gate": "benchmark",
                        "status": "passed",
                        "counts": {"requests": 96},
                        "bounds": {"concurrency": [1, 4, 32]},
                    },
                    t,
                ),
                keys["collector"],
            )
        ],
        logged_at=t,
    )[0]
    ledger.append(
        [
            sign_envelope(
                statement("review", subj, {"result": "PASS"}, t, [("reviews", sem.entry_id)]),
                keys["reviewer"],
            ),
            sign_envelope(
                statement("review", subj, {"result": "PASS"}, t, [("reviews", bench_.entry_id)]),
                keys["reviewer"],
            ),
            sign_envelope(
                statement(
                    "acceptance",
                    subj,
                    {"decision": "accepted", "reason": "bench"},
                    t,
                    [("subject", bench_.entry_id)],
                ),
                keys["operator"],
            ),
        ],
        logged_at=t,
    )
    elapsed = time.perf_counter() - started
    return {
        "build_s": round(elapsed, 1),
        "entries": ledger.size(),
        "entries_per_s": round(ledger.size() / elapsed, 1),
    }


def time_verdicts(ledger: Ledger, policy: LoadedPolicy, runs: int) -> dict[str, Any]:
    subject = {"campaign": CAMPAIGN}
    t = time.perf_counter()
    first = evaluate(ledger, subject, policy)
    cold = time.perf_counter() - t
    samples = []
    for _ in range(runs):
        t = time.perf_counter()
        result = evaluate(ledger, subject, policy)
        samples.append(time.perf_counter() - t)
    assert result == first
    samples.sort()
    p95 = samples[min(len(samples) - 1, round(0.95 * (len(samples) - 1)))]
    return {
        "verdict": first["verdict"],
        "considered": first["counts"]["considered"],
        "used": first["counts"]["used"],
        "first_ms": round(cold * 1000, 1),
        "p50_ms": round(statistics.median(samples) * 1000, 1),
        "p95_ms": round(p95 * 1000, 1),
        "max_ms": round(samples[-1] * 1000, 1),
        "runs": runs,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=1_000_000, help="ledger size to build")
    ap.add_argument("--campaign", type=int, default=10_000, help="entries of the campaign judged")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--home", type=Path, help="where to build (kept); default: a temporary folder")
    ap.add_argument("--reuse", action="store_true", help="time an existing --home without rebuilding")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "verdict.json")
    args = ap.parse_args()
    tmp = None
    home = args.home
    if home is None:
        tmp = Path(tempfile.mkdtemp(prefix="bench-verdict-"))
        home = tmp / "home"
    try:
        build_info = {"build_s": None, "reused": True}
        if not args.reuse:
            print(
                f"building a {args.entries:,}-entry ledger with a {args.campaign:,}-entry campaign …",
                file=sys.stderr,
            )
            build_info = build(home, args.entries, args.campaign)
        ledger = Ledger.open(home)
        policy = load_policy("backend-qualification")
        verify = time_verdicts(ledger, policy, args.runs)
        trusting = LoadedPolicy(
            **{
                **policy.__dict__,
                "spec": policy.spec.model_copy(
                    update={"acceptance": policy.acceptance.model_copy(update={"signatures": "trust-log"})}
                ),
            }
        )
        trust = time_verdicts(ledger, trusting, args.runs)
        out = {
            "benchmark": "verdict",
            "ledger_entries": ledger.size(),
            "campaign_entries": args.campaign,
            "build": build_info,
            "signatures_verify": verify,
            "signatures_trust_log": trust,
            "target_p95_ms": 200,
            "machine": {
                "python": platform.python_version(),
                "cpus": _cpus(),
                "platform": platform.platform(),
            },
            "command": " ".join(sys.argv),
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        out.update(_kept(args.out, out))
        args.out.write_text(json.dumps(out, indent=2) + "\n")
        print(
            f"ledger {ledger.size():,} entries; campaign {args.campaign:,}; "
            f"build {build_info.get('build_s')}s",
        )
        print(f"{'mode':<28}{'verdict':<12}{'used':>7}{'first ms':>10}{'p50 ms':>9}{'p95 ms':>9}")
        for name, r in (("re-verify used signatures", verify), ("trust-log signatures", trust)):
            print(
                f"{name:<28}{r['verdict']:<12}{r['used']:>7}{r['first_ms']:>10}{r['p50_ms']:>9}{r['p95_ms']:>9}"
            )
        print(f"results: {args.out}")
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


def _kept(path: Path, fresh: dict[str, Any]) -> dict[str, Any]:
    """What to keep from an earlier results file: the keys this run does not write (the 'before' figures,
    other ledgers) and, for a --reuse run on a ledger of the same size, the build timing."""
    try:
        earlier = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(earlier, dict):
        return {}
    kept = {k: v for k, v in earlier.items() if k not in fresh}
    build = earlier.get("build")
    if (
        fresh["build"].get("build_s") is None
        and isinstance(build, dict)
        and build.get("build_s") is not None
        and earlier.get("ledger_entries") == fresh["ledger_entries"]
    ):
        kept["build"] = {**build, "reused": True}  # a --reuse run: keep the timing of the build it reuses
    return kept


def _cpus() -> int:
    import os

    return os.cpu_count() or 0


if __name__ == "__main__":
    raise SystemExit(main())
