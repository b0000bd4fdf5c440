"""The issue's figures for one campaign of N entries inside a ledger of M entries (real keys, signatures).

    .venv/bin/python bench/bench_verdict.py --entries 1000000 --campaign 10000 --home /tmp/verdict-1m
    .venv/bin/python bench/bench_verdict.py --home /tmp/verdict-1m --reuse   # time again without rebuilding

In one run, on the same home: `ledger --help`, `ledger verdict -s campaign=C --json` and
`ledger check routing-change … --deployment D` as fresh processes (interleaved rounds: wall time and peak
RSS of each child), the first fresh verdict with the home's verdict cache emptied (what a fresh process pays
when nothing is remembered), the same two calls warm in one process (p50/p95), and the floors: `python -c
pass`, `python -c "import sqlalchemy"`, `python -c "import ledger.service"`, the raw SQL read of the
campaign's rows, and the floor of a nothing-cached verdict (``SIGNATURE_FLOOR``: a fresh process that only
reads the campaign's envelopes and verifies every signature, one thread per core). Writes
bench/results/verdict.json and prints a table.

The ledger is built with `Ledger.append` in batches of 1000 signed envelopes (every append verifies every
signature, as ingest always does); build time is reported. The routing check needs a recorded verdict for
the subject: the bench records one as `ledger verdict --record` does (signed by the admin key, logged a day
after the campaign); its full result, with the 10,000 used ids, is the entry's stored result artifact, the
payload holds the verdict, policy, checkpoint, counts and the result digest. The check re-derives the
verdict from the ledger as it stands, so its cost does not depend on what the recorded result lists.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ledger import __version__
from ledger.collectors.benchmark import BenchmarkSpec, policy_validity
from ledger.entries import format_time, parse_time
from ledger.home import Home
from ledger.policy import evaluate, load_policy
from ledger.policy.routing import check_routing_change, load_deployment
from ledger.policy.verdict import judge_again_at, record_verdict
from ledger.reads import SqlitePolicyLedger
from ledger.service import Ledger
from ledger.signing import SigningKey, sign_envelope

BATCH = 1000
# where the campaign's launch served (its details.base_url): every probe asked that server (fix 159: a probe
# of another server, or of none a bare path names, is not credited — probe-other-endpoint)
BASE_URL = "http://127.0.0.1:8000"
STRUCTURED = {
    "endpoint": BASE_URL + "/v1/chat",
    "check": "structured",
    "ok": True,
    "http_status": 200,
    "text": '{"status": "READY"}',
    # the schema the qualification policy credits (its structured_schema: one copy)
    "details": {"schema": load_policy("backend-qualification").params["structured_schema"]},
}
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
            # the campaign's job: its approved spec binds the model id the engine must serve, and the
            # interpreter the engine runs under (its env snapshot's below: the host gate, fix 164)
            statement(
                "job",
                subj,
                {
                    "job_id": job_id,
                    "state": "running",
                    "started_at": format_time(t),
                    "lease_seconds": 172800.0,  # the harness results are logged a day on
                    "spec": {
                        "bindings": {
                            "served_name": "bench-model",
                            "request_token_ids": "false",
                            "engine_python": "/opt/vllm/bin/python",
                        }
                    },
                },
                t,
            ),
            "collector",
        ),
        (
            statement(
                "host.probe",
                subj,
                {
                    "hostname": "bench-host",
                    "os": "linux",
                    "kernel": "6.8",
                    "gpus": [{"index": 0, "name": "GPU"}],
                },
                t,
            ),
            "collector",
        ),
        (
            # the job's env snapshot beside the host probe: the host gate judges the host on both (fix 157)
            statement(
                "env.snapshot",
                subj,
                {"interpreter": "/opt/vllm/bin/python", "python": "3.12.3"},
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
                    "files": [
                        {"path": "model.bin", "size": 1, "sha256": "a" * 64, "blake3": "blake3:" + "b" * 64}
                    ],
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
                    "bindings": {"model_revision": rev, "model_repo": "bench/model"},
                    "details": {"base_url": BASE_URL},
                },
                t,
            ),
            "collector",
        ),
        (
            statement(
                "health.probe",
                subj,
                {
                    "endpoint": BASE_URL + "/v1/models",
                    "check": "models",
                    "ok": True,
                    "http_status": 200,
                    "expected": "bench-model",
                    "model_identity": "bench-model",
                },
                t,
            ),
            "collector",
        ),
        (
            statement(
                "health.probe",
                subj,
                {
                    "endpoint": BASE_URL + "/v1/chat",
                    "check": "completion",
                    "ok": True,
                    "http_status": 200,
                    "text": "READY",
                    "max_tokens": 8,
                },
                t,
            ),
            "collector",
        ),
        (
            statement("health.probe", subj, STRUCTURED, t),
            "collector",
        ),
        (
            statement(
                "health.probe",
                subj,
                {
                    "endpoint": BASE_URL + "/v1/chat",
                    "check": "sequential",
                    "ok": True,
                    "http_status": 200,
                    "count": 20,
                    "latencies_ms": [40.0] * 20,
                },
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
                    "endpoint": BASE_URL + "/health",
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
    # the log's clock never runs back (a given logged_at before the head's is refused): the genesis and
    # the key enrolments are logged before the campaign's history, which starts at T0
    enrolled_at = T0 - timedelta(hours=1)
    ledger = Ledger.init(home, genesis_at=enrolled_at)
    keys = {name: SigningKey.generate(name) for name in ("collector", "reviewer", "operator")}
    enrolments = []
    for name, key in keys.items():
        key.save(ledger.home.key_path(name))
        payload = {"name": name, "public_key": key.public.b64, "key_id": key.public.key_id, "roles": [name]}
        st = ledger.make_statement("key.enrol", {"key": name}, payload, collected_at=enrolled_at)
        enrolments.append(ledger.sign(st, ledger.cfg.admin_key))
    ledger.append(enrolments, logged_at=enrolled_at)
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
    # the approved specs, bounds and thresholds come from the policy itself (one copy)
    params = load_policy("backend-qualification").params
    sem = ledger.append(
        [
            sign_envelope(
                statement(
                    "gate.result",
                    subj,
                    {
                        "gate": "semantic",
                        "status": "passed",
                        "counts": {"items": 12, "asked": 12, "passed": 12, "failed": 0},
                        "bounds": {
                            "corpus_digest": params["semantic_corpus_digest"],
                            "outcome": "completed",
                            "bindings": {"served_models": "bench-model"},  # the job's served_name
                        },
                        "figures": {"score": float(params["semantic_min_score"])},
                    },
                    t,
                ),
                keys["collector"],
            )
        ],
        logged_at=t,
    )[0]
    issued = (
        params["benchmark_requests"] * len(params["benchmark_concurrency"]) * params["benchmark_repetitions"]
    )
    bench_ = ledger.append(
        [
            sign_envelope(
                statement(
                    "gate.result",
                    subj,
                    {
                        "gate": "benchmark",
                        "status": "passed",
                        "counts": {
                            "requests": params["benchmark_requests"],
                            "levels": len(params["benchmark_concurrency"]),
                            "repetitions": params["benchmark_repetitions"],
                            "issued": issued,
                            "completed": issued,
                            "errors": 0,
                            **{
                                f"completed@c{c}": issued // len(params["benchmark_concurrency"])
                                for c in params["benchmark_concurrency"]
                            },
                        },
                        "bounds": {
                            "concurrency": params["benchmark_concurrency"],
                            "requests": params["benchmark_requests"],
                            "repetitions": params["benchmark_repetitions"],
                            "corpus_digest": params["benchmark_corpus_digest"],
                            "outcome": "completed",
                            # how it ran, as the harness records it: the policy asks a passed run for both
                            "temperature": 0.0,
                            "api": params.get("benchmark_api", "chat"),
                            "aggregate": True,
                            "valid": True,
                            "invalid_reasons": [],
                            "request_token_ids": False,
                            "parity": {
                                "by": "text",
                                "level": 1,
                                "compared": params["benchmark_requests"],
                                "matched": params["benchmark_requests"],
                                "fraction": params["benchmark_min"]["c1_parity"],
                            },
                            "bindings": {"served_models": "bench-model"},
                            # each run judged valid by the policy's rules, as the harness records them
                            **BenchmarkSpec(
                                Path("bench.jsonl"),
                                params["benchmark_corpus_digest"],
                                requests_per_level=params["benchmark_requests"],
                                **policy_validity(params),
                            ).validity(),
                        },
                        # each bounded figure at its bound
                        "figures": {**params["benchmark_max"], **params["benchmark_min"]},
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
                statement(
                    "review", subj, {"result": "PASS", "commit": "c" * 40}, t, [("reviews", sem.entry_id)]
                ),
                keys["reviewer"],
            ),
            sign_envelope(
                statement(
                    "review", subj, {"result": "PASS", "commit": "c" * 40}, t, [("reviews", bench_.entry_id)]
                ),
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
            # the job's terminal entry: a job without one is unjudged once its lease has run out
            sign_envelope(
                statement(
                    "job",
                    subj,
                    {"job_id": "bench-job", "state": "succeeded", "ended_at": format_time(t), "exit_code": 0},
                    t,
                ),
                keys["collector"],
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


SUBJECT = {"campaign": CAMPAIGN}
ROUTE_SUBJECT = {"backend": "vllm", "model": "bench/model", "host": "bench-host"}
NOW = T0 + timedelta(days=2)  # the verdict is logged at T0 + 1 day: one day old, inside the policy's 7 days
DEPLOYMENT = """host = "bench-host"

[[services]]
name = "bench"
engine = "vllm"
model = "bench/model"
gpus = [0]
gpu_memory_utilization = 0.85
"""
LEDGER_BIN = str(Path(sys.executable).with_name("ledger"))
# a baseline checkout's CLI (PYTHONPATH=baseline), as its console script ran it (``main``: older code has no
# ``console_main``); -P: not the working directory first, which may hold this checkout's package
BASELINE_ENTRY = [sys.executable, "-P", "-c", "import sys; from ledger.cli import main; sys.exit(main())"]


def ensure_verdict(ledger: Ledger) -> str:
    """The id of the bench's recorded verdict for the campaign, appended if the home has none."""
    found = ledger.query(subject={"campaign": CAMPAIGN}, kind="verdict", limit=1, descending=True)
    if found:
        return found[0].entry_id
    result = evaluate(ledger, SUBJECT, load_policy("backend-qualification"))
    assert result["verdict"] == "QUALIFIED", result["verdict"]
    return record_verdict(
        ledger,
        result,
        key=ledger.cfg.admin_key,
        at=T0 + timedelta(days=1),
        judge_at=judge_again_at(ledger, result, load_policy("backend-qualification")),
    ).entry_id


TIME_BIN = Path("/usr/bin/time")


def _run(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, int, int, bytes]:
    """Run a fresh process: (wall s, its peak RSS in KiB, exit status, stdout).

    The peak RSS is GNU time's ``%M`` (a child forked straight from this process would count the pages
    it shares with the bench before ``exec``); 0 where /usr/bin/time is missing.
    """
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as f:
        wrapped = [str(TIME_BIN), "-f", "%M", "-o", f.name, *argv] if TIME_BIN.exists() else argv
        t = time.perf_counter()
        proc = subprocess.run(wrapped, capture_output=True, check=False, env=env)
        wall = time.perf_counter() - t
        text = Path(f.name).read_text().strip().splitlines()
    peak = int(text[-1]) if text and text[-1].isdigit() else 0
    out = proc.stdout if proc.returncode in (0, 1) else proc.stdout + proc.stderr
    return wall, peak, proc.returncode, out


def _stats(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    p95 = s[min(len(s) - 1, round(0.95 * (len(s) - 1)))]
    return {
        "min_ms": round(s[0] * 1000, 1),
        "p50_ms": round(statistics.median(s) * 1000, 1),
        "p95_ms": round(p95 * 1000, 1),
        "max_ms": round(s[-1] * 1000, 1),
        "n": len(s),
    }


def append_elsewhere(home: Path, i: int, campaign: str = "elsewhere") -> None:
    """One note of another campaign (or of ``campaign``), logged a second after the head's log time: the
    log's clock, and so the next verdict's reference time, moves on as it does between two checks."""
    ledger = Ledger.open(home)
    try:
        with ledger.repo.read() as conn:
            at = parse_time(ledger.repo.logged_at(conn, ledger.size() - 1)) + timedelta(seconds=1)
        st = ledger.make_statement(
            "note", {"campaign": campaign}, {"text": f"unrelated {i} {time.time_ns()}"}, collected_at=at
        )
        before = ledger.size()
        ledger.append([ledger.sign(st, ledger.cfg.admin_key)], logged_at=at)
        assert ledger.size() == before + 1, "the note must be new (a duplicate is not appended)"
    finally:
        ledger.close()


def fresh(
    home: Path, deployment: Path, rounds: int, baseline: Path | None = None, bytecode: bool = True
) -> dict[str, Any]:
    """Fresh processes, interleaved per round: --help, verdict --json, check routing-change (and, with
    ``baseline``, the same three on an older checkout's code: PYTHONPATH=baseline). ``bytecode``: the
    first runs write the package's bytecode, as an installed wheel has it (else the environment's
    PYTHONDONTWRITEBYTECODE stands and every run recompiles the sources)."""
    env: dict[str, str] | None = None
    if bytecode:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    verdict_cmd = [LEDGER_BIN, "--home", str(home), "verdict", "-s", f"campaign={CAMPAIGN}", "--json"]
    check_cmd = [LEDGER_BIN, "--home", str(home), "check", "routing-change"]
    for k, v in ROUTE_SUBJECT.items():
        check_cmd += ["-s", f"{k}={v}"]
    check_cmd += ["--deployment", str(deployment), "--now", format_time(NOW), "--json"]
    cmds = {
        "help": [LEDGER_BIN, "--help"],
        "verdict": verdict_cmd,
        "check_routing": check_cmd,
        "python_pass": [sys.executable, "-c", "pass"],
        "import_sqlalchemy": [sys.executable, "-c", "import sqlalchemy"],
        "import_service": [sys.executable, "-c", "import ledger.service"],
    }
    envs: dict[str, dict[str, str] | None] = dict.fromkeys(cmds, env)
    if baseline is not None:
        old = {**(env or os.environ), "PYTHONPATH": str(baseline.resolve())}
        for name in ("help", "verdict", "check_routing"):
            cmds[f"{name}_baseline"] = [*BASELINE_ENTRY, *cmds[name][1:]]
            envs[f"{name}_baseline"] = old
    for argv in (verdict_cmd, check_cmd):  # the bytecode an installed wheel has (unless --no-bytecode)
        _run(argv, env)
    # nothing remembered: the home's verdict cache emptied, then one fresh verdict and one fresh check
    shutil.rmtree(home / "cache" / "verdicts", ignore_errors=True)
    cold_v = _run(verdict_cmd, env)
    assert cold_v[2] == 0, cold_v[3][-2000:]
    shutil.rmtree(home / "cache" / "verdicts", ignore_errors=True)
    cold_c = _run(check_cmd, env)
    assert cold_c[2] == 0, cold_c[3][-2000:]
    walls: dict[str, list[float]] = {k: [] for k in cmds}
    rss: dict[str, int] = dict.fromkeys(cmds, 0)
    outputs: dict[str, bytes] = {}
    for _ in range(rounds):
        for name, argv in cmds.items():
            wall, peak, rc, out = _run(argv, envs[name])
            assert rc == 0, (name, out[-2000:])
            walls[name].append(wall)
            rss[name] = max(rss[name], peak)
            outputs.setdefault(name, out)
    # an append elsewhere (another campaign's note, a second later): the log's size and its clock move
    # on, the campaign's rows do not — what a CI check after other hosts' appends pays; then a note of the
    # campaign itself: its rows change, so it is judged again (the signatures checked before are known)
    # (with ``baseline``: the older code's verdict and check after the same appends, in a loop of their
    # own, so that neither code's appends to the campaign come between the other's calls)
    codes = [("verdict", "check_routing")]
    if baseline is not None:
        codes.append(("verdict_baseline", "check_routing_baseline"))
    after: dict[str, list[float]] = {n: [] for pair in codes for n in pair}
    rejudged: dict[str, list[float]] = {n: [] for pair in codes for n in pair}
    for pair in codes:
        for i in range(3):
            for into, campaign in ((rejudged, CAMPAIGN), (after, "elsewhere")):
                for j, name in enumerate(pair):
                    append_elsewhere(home, 4 * i + 2 * (into is after) + j, campaign)  # before each
                    wall, _peak, rc, out = _run(cmds[name], envs[name])
                    assert rc == 0, (name, out[-2000:])
                    doc = json.loads(out)
                    current = doc if name.startswith("verdict") else doc["verdict"]["current"]
                    word = current["verdict"]
                    assert word == "QUALIFIED", (name, campaign, word)
                    into[name].append(wall)
    check = json.loads(outputs["check_routing"])
    assert check["allowed"], check["reasons"]
    assert check["verdict"]["current"]["verdict"] == "QUALIFIED"
    verdict_out = json.loads(outputs["verdict"])
    assert outputs["verdict"] == cold_v[3], "a remembered verdict is byte-identical to a computed one"
    res: dict[str, Any] = {
        name: {**_stats(w), "peak_rss_mib": round(rss[name] / 1024, 1)} for name, w in walls.items()
    }
    for name in walls:  # the ratio to `ledger --help` in the same rounds (the machine is shared)
        res[name]["x_help_p50"] = round(res[name]["p50_ms"] / res["help"]["p50_ms"], 2)
    res["verdict_nothing_cached"] = {
        "ms": round(cold_v[0] * 1000, 1),
        "peak_rss_mib": round(cold_v[1] / 1024, 1),
    }
    res["check_routing_nothing_cached"] = {
        "ms": round(cold_c[0] * 1000, 1),
        "peak_rss_mib": round(cold_c[1] / 1024, 1),
    }
    for name, walls_after in after.items():
        res[f"{name}_after_append_elsewhere"] = {**_stats(walls_after), "runs": len(walls_after)}
    for name, walls_after in rejudged.items():
        res[f"{name}_after_append_to_campaign"] = {**_stats(walls_after), "runs": len(walls_after)}
    res["verdict_word"] = verdict_out["verdict"]
    res["check_allowed"] = check["allowed"]
    return res


def warm(ledger: Any, deployment: Path, runs: int) -> dict[str, Any]:
    """Both calls in one process: the first call, then ``runs`` more (p50/p95). ``ledger``: the service,
    or the read-only ``SqlitePolicyLedger`` the CLI reads a SQLite home through."""
    policy = load_policy("backend-qualification")
    routing = load_policy("routing-change")
    dep = load_deployment(deployment)
    out: dict[str, Any] = {}
    calls = {
        "verdict": lambda: evaluate(ledger, SUBJECT, policy),
        "check_routing": lambda: check_routing_change(
            ledger, routing, dict(ROUTE_SUBJECT), deployment=dep, now=NOW
        ),
    }
    for name, call in calls.items():
        t = time.perf_counter()
        first = call()
        first_s = time.perf_counter() - t
        samples = []
        for _ in range(runs):
            t = time.perf_counter()
            again = call()
            samples.append(time.perf_counter() - t)
        if name == "verdict":
            assert again == first
            out["verdict_word"] = first["verdict"]
            out["considered"] = first["counts"]["considered"]
        else:
            assert first["allowed"], first["reasons"]
            assert again["allowed"], again["reasons"]
        out[name] = {"first_ms": round(first_s * 1000, 1), **_stats(samples)}
    return out


def raw_sql(home: Path, runs: int) -> dict[str, Any]:
    """The floor of any verdict: read the campaign's rows (the same join as the snapshot) with sqlite3."""
    db = sqlite3.connect(home / "ledger.db")
    q = (
        "SELECT e.seq, e.entry_id, e.kind, e.signer, e.logged_at, e.envelope FROM entry_subjects s "
        "JOIN log_entries e ON e.seq = s.seq WHERE s.field = 'campaign' AND s.value = ? ORDER BY s.seq"
    )
    samples = []
    n = 0
    for _ in range(runs):
        t = time.perf_counter()
        n = len(db.execute(q, (CAMPAIGN,)).fetchall())
        samples.append(time.perf_counter() - t)
    db.close()
    return {"rows": n, **_stats(samples)}


# The least a fresh process that checks every signature of the campaign does (the verdict's "nothing
# cached" case): start Python, read the campaign's envelopes and the enrolled keys with sqlite3, and verify
# each Ed25519 signature over its DSSE PAE with libsodium (PyNaCl, what the ledger's `Verifier` calls), one
# thread per core (cffi releases the GIL).
# No ledger code: no imports of ours, no parsing beyond the envelope, no evaluation.
SIGNATURE_FLOOR = """
import base64, json, os, sqlite3, sys
from concurrent.futures import ThreadPoolExecutor
from nacl.bindings import crypto_sign_open
db = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
keys = {}
for (env,) in db.execute("SELECT envelope FROM log_entries WHERE kind = 'key.enrol'"):
    p = json.loads(base64.b64decode(json.loads(env)["payload"]))["payload"]
    keys[p["key_id"]] = base64.b64decode(p["public_key"])
work = []
q = ("SELECT e.envelope FROM entry_subjects s JOIN log_entries e ON e.seq = s.seq"
     " WHERE s.field = 'campaign' AND s.value = ?")
for (env,) in db.execute(q, (sys.argv[2],)):
    d = json.loads(env)
    body, kind, sig = base64.b64decode(d["payload"]), d["payloadType"].encode(), d["signatures"][0]
    pae = b"DSSEv1 %d %b %d %b" % (len(kind), kind, len(body), body)
    work.append((keys[sig["keyid"]], base64.b64decode(sig["sig"]), pae))
cores = os.cpu_count() or 1
def check(chunk):
    for key, signature, message in chunk:
        crypto_sign_open(signature + message, key)
    return len(chunk)
with ThreadPoolExecutor(cores) as pool:
    print(sum(pool.map(check, [work[i::cores] for i in range(cores)])))
"""


def signature_floor(home: Path, runs: int) -> dict[str, Any]:
    """Wall time of ``SIGNATURE_FLOOR`` as a fresh process (``runs`` times), and how many it verified."""
    argv = [sys.executable, "-c", SIGNATURE_FLOOR, str(home / "ledger.db"), CAMPAIGN]
    walls, count = [], 0
    for _ in range(runs):
        wall, _peak, rc, out = _run(argv)
        assert rc == 0, out[-2000:]
        walls.append(wall)
        count = int(out.split()[-1])
    return {"signatures": count, **_stats(walls)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=1_000_000, help="ledger size to build")
    ap.add_argument("--campaign", type=int, default=10_000, help="entries of the campaign judged")
    ap.add_argument("--runs", type=int, default=40, help="warm calls of each kind")
    ap.add_argument("--rounds", type=int, default=7, help="fresh-process rounds")
    ap.add_argument("--home", type=Path, help="where to build (kept); default: a temporary folder")
    ap.add_argument("--reuse", action="store_true", help="time an existing --home without rebuilding")
    ap.add_argument(
        "--baseline",
        type=Path,
        help="an older checkout (`git archive main | tar -x -C DIR`): its --help, verdict and check are "
        "timed in the same fresh-process rounds",
    )
    ap.add_argument(
        "--no-bytecode",
        action="store_true",
        help="keep PYTHONDONTWRITEBYTECODE as the environment sets it (fresh processes recompile sources)",
    )
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "verdict.json")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-verdict-"))
    home = args.home or tmp / "home"
    try:
        build_info: dict[str, Any] = {"build_s": None, "reused": True}
        if not args.reuse:
            print(
                f"building a {args.entries:,}-entry ledger with a {args.campaign:,}-entry campaign …",
                file=sys.stderr,
            )
            build_info = build(home, args.entries, args.campaign)
        ledger = Ledger.open(home)
        verdict_entry = ensure_verdict(ledger)
        deployment = tmp / "deployment.toml"
        deployment.write_text(DEPLOYMENT)
        size = ledger.size()
        campaign_n = len(ledger.query(subject=SUBJECT, limit=None))
        fresh_res = fresh(home, deployment, args.rounds, args.baseline, bytecode=not args.no_bytecode)
        warm_res = warm(ledger, deployment, args.runs)
        reader = SqlitePolicyLedger.open(Home(home))
        warm_read = warm(reader, deployment, args.runs) if reader is not None else None
        sql = raw_sql(home, 5)
        floor = signature_floor(home, max(3, args.rounds))
        out = {
            "benchmark": "verdict",
            "ledger_entries": size,
            "campaign_entries": campaign_n,
            "build": build_info,
            "verdict_entry": verdict_entry,
            "fresh_process": fresh_res,
            "warm_in_process": warm_res,
            "warm_in_process_sqlite_reader": warm_read,
            "raw_sql_campaign_rows": sql,
            # a "nothing cached" verdict checks every signature: this floor is what that costs at least
            "signature_floor_fresh_process": floor,
            "nothing_cached_vs_floor": round(fresh_res["verdict_nothing_cached"]["ms"] / floor["p50_ms"], 2),
            "floor_vs_fresh_target": round(floor["p50_ms"] / 500, 2),
            "targets": {"fresh_ms": 500, "warm_p95_ms": 50},
            "bytecode_cached": not args.no_bytecode,
            "load_average": os.getloadavg(),
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
        f, w = fresh_res, warm_res
        print(
            f"ledger {size:,} entries; campaign {campaign_n:,} (with the recorded verdict); "
            f"build {'reused' if build_info.get('build_s') is None else str(build_info['build_s']) + ' s'}; "
            f"load average {os.getloadavg()[0]:.1f}"
        )
        print(f"{'fresh process':<44}{'p50 ms':>9}{'p95 ms':>9}{'min ms':>9}{'RSS MiB':>9}")
        for name, label in (
            ("help", "ledger --help"),
            ("verdict", "ledger verdict --json"),
            ("check_routing", "ledger check routing-change --deployment"),
            ("python_pass", "python -c pass"),
            ("import_sqlalchemy", "python -c 'import sqlalchemy'"),
            ("import_service", "python -c 'import ledger.service'"),
            ("help_baseline", "ledger --help (baseline code)"),
            ("verdict_baseline", "ledger verdict --json (baseline code)"),
            ("check_routing_baseline", "ledger check routing-change (baseline code)"),
        ):
            if name not in f:
                continue
            r = f[name]
            ratio = r["p50_ms"] / f["help"]["p50_ms"]
            print(
                f"{label:<44}{r['p50_ms']:>9}{r['p95_ms']:>9}{r['min_ms']:>9}{r['peak_rss_mib']:>9}"
                f"{ratio:>8.2f}× help"
            )
        for name, label in (
            ("verdict_after_append_elsewhere", "ledger verdict --json, after an append"),
            ("check_routing_after_append_elsewhere", "ledger check routing-change, after an append"),
            ("verdict_baseline_after_append_elsewhere", "  the same, baseline code"),
            ("check_routing_baseline_after_append_elsewhere", "  the same, baseline code"),
            ("verdict_after_append_to_campaign", "ledger verdict --json, campaign appended"),
            ("check_routing_after_append_to_campaign", "ledger check routing-change, campaign app."),
            ("verdict_baseline_after_append_to_campaign", "  the same, baseline code"),
            ("check_routing_baseline_after_append_to_campaign", "  the same, baseline code"),
        ):
            if name not in f:
                continue
            r = f[name]
            print(f"{label:<44}{r['p50_ms']:>9}{r['p95_ms']:>9}{r['min_ms']:>9}")
        for name, label in (
            ("verdict_nothing_cached", "ledger verdict --json, nothing cached"),
            ("check_routing_nothing_cached", "ledger check routing-change, nothing cached"),
        ):
            r = f[name]
            print(f"{label:<44}{r['ms']:>9}{'':>9}{'':>9}{r['peak_rss_mib']:>9}")
        print(
            f"{'warm, in one process':<44}{'p50 ms':>9}{'p95 ms':>9}{'first ms':>9}\n"
            f"{'evaluate (verdict ' + w['verdict_word'] + ')':<44}{w['verdict']['p50_ms']:>9}"
            f"{w['verdict']['p95_ms']:>9}{w['verdict']['first_ms']:>9}\n"
            f"{'check_routing_change (allowed)':<44}{w['check_routing']['p50_ms']:>9}"
            f"{w['check_routing']['p95_ms']:>9}{w['check_routing']['first_ms']:>9}"
        )
        if warm_read is not None:
            r = warm_read
            print(
                f"{'evaluate, SqlitePolicyLedger':<44}{r['verdict']['p50_ms']:>9}"
                f"{r['verdict']['p95_ms']:>9}{r['verdict']['first_ms']:>9}\n"
                f"{'check_routing_change, SqlitePolicyLedger':<44}{r['check_routing']['p50_ms']:>9}"
                f"{r['check_routing']['p95_ms']:>9}{r['check_routing']['first_ms']:>9}"
            )
        print(f"raw sqlite3 read of the campaign's {sql['rows']:,} rows: p50 {sql['p50_ms']} ms")
        print(
            f"floor of a nothing-cached verdict (fresh python, sqlite3 read, {floor['signatures']:,} raw "
            f"Ed25519 verifies on {_cpus()} threads): p50 {floor['p50_ms']} ms = "
            f"{out['floor_vs_fresh_target']}x the 500 ms target; the verdict takes "
            f"{out['nothing_cached_vs_floor']}x the floor"
        )
        print(f"results: {args.out}")
    finally:
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
        and abs(int(earlier.get("ledger_entries") or 0) - fresh["ledger_entries"]) <= 1
    ):
        kept["build"] = {**build, "reused": True}  # a --reuse run: keep the timing of the build it reuses
    return kept


def _cpus() -> int:
    return os.cpu_count() or 0


if __name__ == "__main__":
    raise SystemExit(main())
