"""A ledger made by real campaigns (the fault-injection engine, real processes and HTTP) for the page tests.

Campaign ``gpu-hang``: the engine is ready, then aborts on its first request (GPU hang) — NOT QUALIFIED.
Campaign ``healthy``: the same engine passes every collector gate; a semantic gate and the approved
c1/c4/c32 benchmark (figures as the benchmark harness records them) are added, reviewed and accepted;
a verdict is recorded before and after a reviewer rejects the benchmark, so two verdicts differ.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger.collectors.benchmark import BenchmarkSpec, policy_validity
from ledger.collectors.campaign import code_commit
from ledger.entries import format_time, parse_time
from ledger.policy.loader import load_policy
from ledger.recorder import LocalRecorder
from ledger.service import Ledger
from ledger.tokens import create_token

REPO = Path(__file__).resolve().parents[2]
FAULT_ENGINE = REPO / "tests" / "engines" / "fault_engine.py"
HOST = "page-test-host"


@dataclass
class CampaignLedger:
    home: Path
    reader_token: str
    ids: dict[str, str]


def _campaign_toml(tmp: Path, model_dir: Path, name: str, mode: str) -> Path:
    text = f"""
[campaign]
id = "{name}"
lease_seconds = 120

[model]
path = "{model_dir}"
name = "fault-model"
served_name = "fault-model"

[engine]
kind = "vllm"
python = "{sys.executable}"
command = ["{{python}}", "{FAULT_ENGINE}", "--port", "{{port}}", "--flavor", "vllm", "--load-seconds", "0.3",
           "--model", "{{model}}"]
lease_seconds = 30
grace_seconds = 3
exit_wait_seconds = 3

[[engine.attempts]]
name = "default"
extra_args = ["--mode", "{mode}"]

[gates.sequential]
count = 20
"""
    p = tmp / f"{name}.toml"
    p.write_text(text)
    return p


# the corpora the shipped policy approves (policies/backend-qualification.toml params)
SEMANTIC_CORPUS = "blake3:f34c93923611acb5921d0b7c24ae05bdce3c2458940a75878c5a851a7635812f"
BENCH_CORPUS = "blake3:bfef1eb8aa1c4ed5c7c2a49036f79dd2653cb993594020b1e6c7f66b5f8e7254"


class _HarnessBeforeTheEnd(LocalRecorder):
    """A recorder that, just before the launch of ``campaign`` records its run's end, records what
    ``before_end(subject, launch_payload)`` does (once): what the job ran, logged while its engine ran (since
    559d6e5 a harness result the log took after its launch entry recorded the run's end is not credited,
    `after-launch-end`: the collector logs its results before that entry)."""

    def __init__(
        self,
        ledger: Ledger,
        key: str,
        campaign: str,
        before_end: Callable[[dict[str, str], dict[str, Any]], None],
    ) -> None:
        super().__init__(ledger, key)
        self.campaign, self.before_end = campaign, before_end
        self.done = False

    def record(self, kind: str, subject: dict[str, str], payload: dict[str, Any], **kw: Any) -> str:
        if kind == "engine.launch" and not self.done and subject.get("campaign") == self.campaign:
            self.done = True
            self.before_end(dict(subject), payload)
        return super().record(kind, subject, payload, **kw)


def _semantic_result(led: Ledger, subj: dict[str, str], during: str, endpoint: str) -> str:
    return led.record(
        "gate.result",
        subj,
        {
            "gate": "semantic",
            "status": "passed",
            "counts": {"items": 12, "asked": 12, "passed": 12, "failed": 0},
            "bounds": {
                "endpoint": endpoint,  # where the run's engine served (its launch's details.base_url)
                "corpus_digest": SEMANTIC_CORPUS,
                "outcome": "completed",
                "bindings": {"served_models": "fault-model"},
            },
            "figures": {"score": 1.0},
        },
        key="collector",
        collected_at=during,
    ).entry_id


def _benchmark_result(led: Ledger, subj: dict[str, str], during: str, endpoint: str) -> str:
    return led.record(
        "gate.result",
        subj,
        {
            "gate": "benchmark",
            "status": "passed",
            "counts": {
                "requests": 96,
                "repetitions": 2,
                "levels": 3,
                "issued": 576,
                "completed": 576,
                "errors": 0,
                "completed@c1": 192,
                "completed@c4": 192,
                "completed@c32": 192,
            },
            "bounds": {
                "endpoint": endpoint,  # where the run's engine served (its launch's details.base_url)
                "concurrency": [1, 4, 32],
                "requests": 96,
                "repetitions": 2,
                "corpus_digest": BENCH_CORPUS,
                "outcome": "completed",
                "temperature": 0.0,
                "api": "chat",
                "aggregate": True,
                "valid": True,
                "invalid_reasons": [],
                "parity": {"level": 1, "compared": 96, "matched": 96, "fraction": 1.0, "by": "text"},
                "request_token_ids": False,
                "bindings": {"served_models": "fault-model"},
                "figures": _benchmark_figures(),
                # each run judged valid by the shipped policy's rules (for vLLM), as the harness records them
                **BenchmarkSpec(
                    Path("bench.jsonl"),
                    BENCH_CORPUS,
                    **policy_validity(load_policy("backend-qualification").params, "vllm"),
                ).validity(),
            },
            "figures": _benchmark_figures(),
        },
        key="collector",
        collected_at=during,
    ).entry_id


def _benchmark_figures() -> dict[str, Any]:
    """Flat per-level figures named as the benchmark harness names them (``metric.stat@cN``)."""
    out: dict[str, Any] = {}
    for level, ttft, tpot, rps, tps in (
        (1, 41.0, 9.8, 2.1, 240.0),
        (4, 63.5, 12.4, 7.4, 880.0),
        (32, 212.0, 25.1, 21.0, 2750.0),
    ):
        for stat, f in (("p50", 1.0), ("p90", 1.3), ("p95", 1.5), ("p99", 1.7)):
            out[f"ttft_ms.{stat}@c{level}"] = round(ttft * f, 3)
            out[f"tpot_ms.{stat}@c{level}"] = round(tpot * f, 3)
        out[f"request_throughput@c{level}"] = rps
        out[f"output_throughput@c{level}"] = tps
        out[f"error_rate@c{level}"] = 0.0
    out["error_rate"] = 0.0
    out["c1_parity"] = 1.0
    return out


def build(tmp: Path) -> CampaignLedger:
    from ledger.collectors.campaign import CampaignRunner, load_campaign

    home = tmp / "home"
    led = Ledger.init(home)
    for name, roles in (("collector", ["collector"]), ("reviewer", ["reviewer"]), ("operator", ["operator"])):
        led.new_key(name, roles)
    token, _ = create_token(led.engine, "page-reader", "reader")
    model_dir = tmp / "fault-model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text('{"architectures": ["FaultForCausalLM"]}')
    (model_dir / "model.safetensors").write_bytes(os.urandom(64 * 1024))
    ids: dict[str, str] = {}
    harness: dict[str, str] = {}

    def harness_runs(subj: dict[str, str], run: dict[str, Any]) -> None:
        """The harness runs of the healthy campaign, recorded here by hand within its run job, before its
        launch entry (``run``: its payload, about to be logged) records the run's end, as the collector
        does (559d6e5: output the log takes after that is not credited, `after-launch-end`), collected while
        its engine ran (a result collected after the launch ended measured no engine)."""
        began, ended = parse_time(run["started_at"]), parse_time(run["ended_at"])
        during = format_time(began + (ended - began) / 2)
        # measured where the collector started and probed the engine (fix 153: harness-other-endpoint)
        endpoint = run["details"]["base_url"]
        harness["semantic"] = _semantic_result(led, subj, during, endpoint)
        led.record(
            "review",
            subj,
            {"result": "PASS", "commit": code_commit()[0]},
            key="reviewer",
            refs=[("reviews", harness["semantic"])],
        )
        harness["benchmark"] = _benchmark_result(led, subj, during, endpoint)

    rec = _HarnessBeforeTheEnd(led, "collector", "healthy", harness_runs)
    for name, mode in (("gpu-hang", "abort"), ("healthy", "ok")):
        c = load_campaign(_campaign_toml(tmp, model_dir, name, mode))
        CampaignRunner(c, rec, work_dir=tmp / f"work-{name}", handle_signals=False, host_name=HOST).run()
    assert set(harness) == {"semantic", "benchmark"}, "the healthy run's job never ended"
    [launch] = led.query(subject={"campaign": "gpu-hang"}, kind="engine.launch", limit=5)
    ids["launch"] = launch.entry_id
    ids["log"] = next(a.digest for a in launch.statement.artifacts if a.name == "stderr.log")
    [healthy_launch] = led.query(subject={"campaign": "healthy"}, kind="engine.launch", limit=1)
    subj = dict(healthy_launch.statement.subject)
    ids["benchmark"] = harness["benchmark"]
    bench = led.get(harness["benchmark"])
    led.record(
        "review",
        subj,
        {"result": "PASS", "commit": code_commit()[0]},
        key="reviewer",
        refs=[("reviews", bench.entry_id)],
    )
    led.record(
        "acceptance",
        subj,
        {"decision": "accepted", "reason": "approved c1/c4/c32 run"},
        key="operator",
        refs=[("subject", bench.entry_id)],
    )
    for campaign in ("gpu-hang", "healthy"):
        result = led.evaluate_verdict({"campaign": campaign})
        ids[f"verdict-{campaign}"] = led.record_verdict(result, key="reviewer").entry_id
    led.record(
        "acceptance",
        subj,
        {"decision": "rejected", "reason": "the benchmark host was shared"},
        key="reviewer",
        refs=[("subject", bench.entry_id)],
    )
    ids["verdict-healthy-2"] = led.record_verdict(
        led.evaluate_verdict({"campaign": "healthy"}), key="reviewer"
    ).entry_id
    for k, v in {k: v for k, v in ids.items() if k.startswith("verdict")}.items():
        ids[k + "-word"] = str(led.get(v).statement.payload["verdict"])
    led.close()
    return CampaignLedger(home, token, ids)


if __name__ == "__main__":
    import json
    import tempfile

    out = build(Path(tempfile.mkdtemp(prefix="pages-")))
    print(json.dumps({"home": str(out.home), "token": out.reader_token, **out.ids}, indent=1))
