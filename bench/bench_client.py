"""The benchmark harness vs the reference client `vllm bench serve`, same endpoint, same prompts, same order.

1. Agreement: a real vLLM CPU engine on the tiny HF Llama; at each concurrency level both clients send
   the same ``--requests`` streaming chat requests (the shipped corpus, cycled in corpus order,
   temperature 0), rounds interleaved (ours, theirs | theirs, ours | …). Each figure is judged by the
   median over rounds of ours/theirs within a round, which cancels the drift of a shared machine's load
   (target: within 10 %); "*_spread" is each client's own max/min over rounds, the machine's noise.
   The machine's own scheduling is watched by a separate idle process (``_WATCH``: how late a 10 ms sleep
   wakes, and the run-queue wait /proc/self/schedstat counts for it): on 2 cores beside vLLM-CPU's
   spinning engine a process can wait up to a second to run, and a client that is not run reads every
   chunk late — either client's TTFT tail then measures the machine. Each run records the worst such wait
   inside its own timed window, and each figure is also judged on the "quiet" rounds (both runs' worst
   wait under ``QUIET_MS``), reported beside the all-rounds ratio with their count.
2. Client overhead: a fast stub server (tests/engines/stub_openai.py, no delays) at c32; each client's
   own request rate, best of ``--rounds`` (target: ours ≥ 0.9× theirs).

3. Isolation (``--engine-cpus 0 --client-cpus 1``): the vLLM server, its engine core and its worker (its
   OpenMP threads bound with ``VLLM_CPU_OMP_THREADS_BIND``) run on the engine's cores only, and this
   process, both clients and the watcher on the clients' cores, so neither client waits behind the engine
   to be run: what is left to compare is the two clients' measurement.

Run: .venv/bin/python bench/bench_client.py [--levels 1,4,32] [--requests 96] [--rounds 3]
         [--overhead-requests 960] [--skip-engine] [--engine-cpus 0 --client-cpus 1]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table, write_results

from ledger.collectors.benchmark import BenchmarkSpec, load_benchmark_corpus, run_benchmark
from ledger.collectors.corpus import corpus_digest

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("LEDGER_ENGINE_CACHE", Path.home() / ".cache" / "evidence-ledger" / "engines"))
VLLM_PY = CACHE / "vllm" / "bin" / "python"
MODEL = CACHE / "models" / "tiny-llama-hd64"
CORPUS = REPO / "campaigns" / "corpora" / "bench-tiny.jsonl"
SERVED = "tiny-llama"
VLLM_ENV = {"VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"}
# vllm bench's custom dataset reads JSONL with pandas (vLLM's "bench" extra), which the engine venv lacks;
# it is installed beside it, never into it, and put on the benchmark client's path only
BENCH_EXTRAS = CACHE.parent / "bench-extras"

QUIET_MS = 100.0
_WATCH = """
import sys, time
out = open(sys.argv[1], "w", buffering=1)
def waited():
    return int(open("/proc/self/schedstat").read().split()[1]) / 1e6
while True:
    q, t = waited(), time.perf_counter()
    time.sleep(0.01)
    lag = (time.perf_counter() - t - 0.01) * 1000
    if lag > 20:
        out.write(f"{time.time():.3f} {lag:.1f} {waited() - q:.1f}\\n")
"""


class Watch:
    """The separate watcher process and what it logged: (unix time, ms late, ms waiting to run)."""

    def __init__(self, work: Path) -> None:
        self.path = work / "machine-stalls.txt"
        self.proc = subprocess.Popen([sys.executable, "-c", _WATCH, str(self.path)])

    def worst(self, start: float, end: float) -> float:
        """The longest wait to run the watcher saw in [start, end] (unix time), ms; 0 when none > 20 ms."""
        worst = 0.0
        if self.path.exists():
            for line in self.path.read_text().splitlines():
                at, lag, _ = (float(x) for x in line.split())
                if start <= at <= end:
                    worst = max(worst, lag)
        return worst

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


# figure in our aggregate → key in vllm bench serve's result JSON
FIGURES = {
    "request_throughput": ("request_throughput", "request_throughput"),
    "output_throughput": ("output_throughput", "output_throughput"),
    "ttft_ms.p50": ("ttft_ms.p50", "p50_ttft_ms"),
    "ttft_ms.p95": ("ttft_ms.p95", "p95_ttft_ms"),
    "tpot_ms.p50": ("tpot_ms.p50", "p50_tpot_ms"),
    "itl_ms.p50": ("itl_ms.p50", "p50_itl_ms"),
    "e2e_ms.p50": ("e2e_ms.p50", "p50_e2el_ms"),
    "e2e_ms.p95": ("e2e_ms.p95", "p95_e2el_ms"),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(base: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before it was ready")
        try:
            if httpx.get(base + "/v1/models", timeout=2, trust_env=False).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{base} not ready after {timeout:g} s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def ensure_bench_extras() -> None:
    probe = [str(VLLM_PY), "-c", "import pandas"]
    env = {**os.environ, "PYTHONPATH": str(BENCH_EXTRAS)}
    if subprocess.run(probe, env=env, capture_output=True, check=False).returncode == 0:
        return
    print(f"installing pandas for vllm bench's custom dataset into {BENCH_EXTRAS}", flush=True)
    pkgs = ["pandas", "python-dateutil", "pytz", "tzdata"]
    cmd = [str(VLLM_PY), "-m", "pip", "install", "-q", "--no-deps", "--target", str(BENCH_EXTRAS), *pkgs]
    subprocess.run(cmd, check=True)


def vllm_dataset(work: Path, n: int) -> Path:
    """The corpus as vllm bench's custom JSONL: request i is prompt i mod N, as our harness sends it."""
    corpus = load_benchmark_corpus(CORPUS, corpus_digest(CORPUS))
    out = work / "vllm-dataset.jsonl"
    with out.open("w") as f:
        for i in range(n):
            p = corpus.prompts[i % len(corpus.prompts)]
            assert p.messages is not None, "vllm bench's custom dataset is chat prompts"
            assert len(p.messages) == 1, "vllm bench sends one user message"
            f.write(json.dumps({"prompt": p.messages[0]["content"], "output_tokens": p.max_tokens}) + "\n")
    return out


def run_ours(base: str, level: int, n: int, work: Path) -> dict[str, Any]:
    spec = BenchmarkSpec(
        CORPUS,
        corpus_digest(CORPUS),
        concurrency=(level,),
        requests_per_level=n,
        max_error_rate=1.0,
        saturation="report",
        model=SERVED,
    )
    result = run_benchmark(spec, base, out_dir=work / f"ours-c{level}-{time.monotonic_ns()}")
    end = time.time()
    assert result.aggregate is not None, result.stopped
    f = result.aggregate[f"c{level}"]
    out = {name: _dig(f, ours) for name, (ours, _) in FIGURES.items()}
    out["completed"] = f["completed"]
    out["window"] = (end - (f["duration_s"] or 0.0), end)
    out["client_stall_max_ms"] = f["client_stall_ms"]["max"]
    return out


def _dig(d: dict[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        d = d[part]
    return d


def run_vllm(base: str, level: int, n: int, work: Path, dataset: Path, tokenizer: Path) -> dict[str, Any]:
    name = f"vllm-c{level}-{time.monotonic_ns()}.json"
    cmd = [
        str(VLLM_PY),
        str(REPO / "bench" / "vllm_bench_serve.py"),
        "--backend",
        "openai-chat",
        "--base-url",
        base,
        "--endpoint",
        "/v1/chat/completions",
        "--model",
        SERVED,
        "--tokenizer",
        str(tokenizer),
        "--dataset-name",
        "custom",
        "--dataset-path",
        str(dataset),
        "--custom-output-len",
        "-1",
        "--disable-shuffle",
        "--skip-chat-template",
        "--num-prompts",
        str(n),
        "--max-concurrency",
        str(level),
        "--request-rate",
        "inf",
        "--temperature",
        "0",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,95,99",
        "--ready-check-timeout-sec",
        "0",
        "--disable-tqdm",
        "--save-result",
        "--result-dir",
        str(work),
        "--result-filename",
        name,
    ]
    env = {**os.environ, **VLLM_ENV, "PYTHONPATH": str(BENCH_EXTRAS)}
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800, check=False)
    if r.returncode != 0:
        raise RuntimeError(
            f"vllm bench serve failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
        )
    end = time.time()
    doc = json.loads((work / name).read_text())
    out = {k: doc.get(theirs) for k, (_, theirs) in FIGURES.items()}
    out["completed"] = doc.get("completed")
    # its timed part is the last `duration` seconds of the process (before it: importing vLLM)
    out["window"] = (end - float(doc.get("duration") or 0.0), end)
    return out


def _spread(values: list[float]) -> float | None:
    """max / min of one client's own rounds: how much the machine moved the figure between rounds."""
    low = min(values)
    return max(values) / low if low > 0 else None


def agreement(
    levels: list[int], n: int, rounds: int, work: Path, engine_cpus: set[int] | None = None
) -> list[dict[str, Any]]:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cmd = [
        str(VLLM_PY),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(MODEL),
        "--served-model-name",
        SERVED,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        "256",
        "--dtype",
        "float32",
        "--gpu-memory-utilization",
        "0.2",
    ]
    log = (work / "vllm-server.log").open("wb")
    env = {**os.environ, **VLLM_ENV}
    if engine_cpus:
        cores = ",".join(str(c) for c in sorted(engine_cpus))
        # every process the server starts inherits its cores; its OpenMP threads are bound to them too
        # (vLLM's "auto" binding picks cores itself)
        cmd = ["taskset", "-c", cores, *cmd]
        env["VLLM_CPU_OMP_THREADS_BIND"] = cores
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    rows: list[dict[str, Any]] = []
    watch = Watch(work)
    try:
        wait_ready(base, proc, 600)
        dataset = vllm_dataset(work, n)
        run_ours(base, 1, 8, work)  # warm the engine (first requests compile / allocate)
        for level in levels:
            ours: list[dict[str, Any]] = []
            theirs: list[dict[str, Any]] = []
            for i in range(rounds):
                first, second = ("ours", "theirs") if i % 2 == 0 else ("theirs", "ours")
                for who in (first, second):
                    if who == "ours":
                        ours.append(run_ours(base, level, n, work))
                    else:
                        theirs.append(run_vllm(base, level, n, work, dataset, MODEL))
            for x in ours + theirs:
                x["machine_stall_max_ms"] = watch.worst(*x["window"])
            quiet = [
                i
                for i, (x, y) in enumerate(zip(ours, theirs, strict=True))
                if max(x["machine_stall_max_ms"], y["machine_stall_max_ms"]) < QUIET_MS
            ]
            for fig in FIGURES:
                a = statistics.median(x[fig] for x in ours)
                b = statistics.median(x[fig] for x in theirs)
                # round i ran ours and theirs back to back: the ratio within a round cancels the drift of a
                # shared machine's load; its median over rounds is what is judged
                paired = [x[fig] / y[fig] for x, y in zip(ours, theirs, strict=True) if y[fig]]
                ratio = statistics.median(paired) if paired else None
                calm = [ours[i][fig] / theirs[i][fig] for i in quiet if theirs[i][fig]]
                ratio_quiet = statistics.median(calm) if calm else None
                rows.append(
                    {
                        "part": "agreement",
                        "level": f"c{level}",
                        "figure": fig,
                        "ours": a,
                        "vllm_bench": b,
                        "ratio": ratio,
                        "within_10pct": ratio is not None and abs(ratio - 1) <= 0.10,
                        "quiet_rounds": len(calm),
                        "ratio_quiet": ratio_quiet,
                        "within_10pct_quiet": ratio_quiet is not None and abs(ratio_quiet - 1) <= 0.10,
                        "ours_spread": _spread([x[fig] for x in ours]),
                        "vllm_spread": _spread([x[fig] for x in theirs]),
                        "paired_ratios": paired,
                        "ours_runs": [x[fig] for x in ours],
                        "vllm_runs": [x[fig] for x in theirs],
                        "machine_stall_max_ms": {
                            "ours": [x["machine_stall_max_ms"] for x in ours],
                            "vllm": [x["machine_stall_max_ms"] for x in theirs],
                        },
                        "our_client_stall_max_ms": [x["client_stall_max_ms"] for x in ours],
                    }
                )
            print(f"  c{level}: done ({rounds} rounds each, {len(quiet)} quiet)", flush=True)
    finally:
        watch.close()
        stop(proc)
        log.close()
    return rows


def overhead(n: int, rounds: int, work: Path, tokens: int) -> list[dict[str, Any]]:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    stub = [
        sys.executable,
        str(REPO / "tests" / "engines" / "stub_openai.py"),
        "--port",
        str(port),
        "--model-id",
        SERVED,
        "--tokens",
        str(tokens),
    ]
    proc = subprocess.Popen(
        stub, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    ours: list[float] = []
    theirs: list[float] = []
    try:
        wait_ready(base, proc, 60)
        dataset = vllm_dataset(work, n)
        for i in range(rounds):
            order = ("ours", "theirs") if i % 2 == 0 else ("theirs", "ours")
            for who in order:
                if who == "ours":
                    ours.append(run_ours(base, 32, n, work)["request_throughput"])
                else:
                    theirs.append(run_vllm(base, 32, n, work, dataset, MODEL)["request_throughput"])
    finally:
        stop(proc)
    best_ours, best_theirs = max(ours), max(theirs)
    return [
        {
            "part": "overhead",
            "level": "c32",
            "figure": "request_throughput (fast stub)",
            "ours": best_ours,
            "vllm_bench": best_theirs,
            "ratio": best_ours / best_theirs,
            "within_10pct": best_ours >= 0.9 * best_theirs,
            "ours_runs": ours,
            "vllm_runs": theirs,
        }
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--levels", default="1,4,32")
    ap.add_argument("--requests", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--overhead-requests", type=int, default=960)
    ap.add_argument("--overhead-rounds", type=int, default=3)
    ap.add_argument("--stub-tokens", type=int, default=16)
    ap.add_argument("--skip-engine", action="store_true", help="only the client-overhead comparison")
    ap.add_argument("--results-name", default="client", help="bench/results/<name>.json")
    ap.add_argument(
        "--engine-cpus",
        default="",
        help="cores for the vLLM server and all its processes, e.g. 0 (default: any)",
    )
    ap.add_argument(
        "--client-cpus",
        default="",
        help="cores for this process, both clients and the watcher, e.g. 1 (default: any)",
    )
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    engine_cpus = {int(c) for c in args.engine_cpus.split(",") if c}
    if args.client_cpus:
        # inherited by the watcher and `vllm bench serve`: the clients then never wait behind the engine
        os.sched_setaffinity(0, {int(c) for c in args.client_cpus.split(",")})
    ensure_bench_extras()
    with tempfile.TemporaryDirectory(prefix="bench-client-") as tmp:
        work = Path(tmp)
        rows: list[dict[str, Any]] = []
        if not args.skip_engine:
            print(f"agreement: vLLM CPU on {MODEL.name}, {args.requests} requests per level", flush=True)
            rows += agreement(levels, args.requests, args.rounds, work, engine_cpus or None)
        print(f"overhead: fast stub, c32, {args.overhead_requests} requests", flush=True)
        rows += overhead(args.overhead_requests, args.overhead_rounds, work, args.stub_tokens)
    path = write_results(
        args.results_name,
        rows,
        {"args": vars(args), "corpus": str(CORPUS.relative_to(REPO)), "corpus_digest": corpus_digest(CORPUS)},
    )
    print_table(
        rows,
        [
            "part",
            "level",
            "figure",
            "ours",
            "vllm_bench",
            "ratio",
            "within_10pct",
            "quiet_rounds",
            "ratio_quiet",
            "ours_spread",
            "vllm_spread",
        ],
    )
    print(f"\nresults: {path}")


if __name__ == "__main__":
    main()
