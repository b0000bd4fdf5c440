"""The README's main job, end to end: scripts/demo.sh on the real llama.cpp and vLLM CPU engines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]


def _ledger_json(home: Path, *args: str) -> Any:
    run = subprocess.run(
        [sys.executable, "-m", "ledger.cli", "--home", str(home), *args, "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    return json.loads(run.stdout)


@pytest.mark.slow
def test_demo_qualifies_trained_llamacpp_then_refuses_after_supersession(tmp_path: Path) -> None:
    home = tmp_path / "demo"
    run = subprocess.run(
        ["bash", str(REPO / "scripts" / "demo.sh"), str(home)],
        capture_output=True,
        text=True,
        check=False,
        timeout=2400,
        env=dict(os.environ, COLUMNS="200"),
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]

    # the trained model on llama.cpp: every collector gate passed, benchmark and semantic included
    trained = json.loads((home / "demo" / "run-trained.json").read_text())
    assert [g["gate"] for g in trained["gates"]][-2:] == ["semantic", "benchmark"]
    assert all(g["status"] == "passed" for g in trained["gates"])

    verdicts = _ledger_json(home, "log", "--kind", "verdict")["items"]
    by_campaign = {v["subject"]["campaign"]: v["payload"] for v in verdicts}
    assert by_campaign["llamacpp-cpu-trained"]["verdict"] == "QUALIFIED"
    # a verdict entry names its full result (a stored artifact) by digest: read it as a reviewer would
    from ledger.service import Ledger

    led = Ledger.open(home)
    try:
        results = {v["subject"]["campaign"]: led.verdict_result(led.get(v["id"])) for v in verdicts}
    finally:
        led.close()
    for campaign, result in results.items():
        assert result["verdict"] == by_campaign[campaign]["verdict"]
    gates = {g["name"]: g["status"] for g in results["llamacpp-cpu-trained"]["gates"]}
    assert gates["semantic"] == "passed"
    assert gates["benchmark"] == "passed"
    # the second campaign: real vLLM CPU, ready, then killed by its first completion
    assert by_campaign["vllm-cpu-hd16"]["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY"
    hd16 = {g["name"]: g["status"] for g in results["vllm-cpu-hd16"]["gates"]}
    assert hd16["api-readiness"] == "passed"
    assert hd16["runtime-stability"] == "failed"

    # the benchmark result the verdict used is reviewed and accepted (one command each), then superseded
    bench = next(g["entry_id"] for g in trained["gates"] if g["gate"] == "benchmark")
    reviews = _ledger_json(home, "log", "--kind", "review")["items"]
    assert any(
        {"rel": "reviews", "id": bench} in r["refs"] and r["payload"]["result"] == "PASS" for r in reviews
    )
    accepts = _ledger_json(home, "log", "--kind", "acceptance")["items"]
    assert any({"rel": "subject", "id": bench} in a["refs"] for a in accepts)
    [sup] = _ledger_json(home, "log", "--kind", "supersession")["items"]
    assert {"rel": "supersedes", "id": bench} in sup["refs"]

    # the routing gate: allowed on the QUALIFIED verdict, refused once its evidence is superseded
    changes = _ledger_json(home, "log", "--kind", "routing.change")["items"]
    assert [c["payload"]["allowed"] for c in changes] == [True, False]
    # judged with the shipped deployment file: one CPU service on the campaign's host
    for c in changes:
        assert c["payload"]["deployment"]["host"] == "demo-cpu-host"
        assert [s["device"] for s in c["payload"]["deployment"]["services"]] == ["cpu"]
    assert any("no longer holds" in r for r in changes[1]["payload"]["reasons"])

    for v in verdicts:
        replay = subprocess.run(
            [sys.executable, "-m", "ledger.cli", "--home", str(home), "verdict", "replay", v["id"]],
            capture_output=True,
            text=True,
            check=False,
        )
        assert replay.returncode == 0, replay.stdout + replay.stderr
    verify = _ledger_json(home, "verify")
    assert verify["ok"] is True
    assert verify["artifacts_checked"] >= 6
