"""The README's main job, end to end: scripts/demo.sh against the real llama.cpp engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_demo_qualifies_llamacpp_and_records_not_qualified_control(tmp_path: Path) -> None:
    home = tmp_path / "demo"
    run = subprocess.run(
        ["bash", str(REPO / "scripts" / "demo.sh"), str(home)],
        capture_output=True,
        text=True,
        check=False,
        timeout=1500,
        env=dict(os.environ, COLUMNS="200"),
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    ledger = [sys.executable, "-m", "ledger.cli", "--home", str(home)]
    verdicts = json.loads(
        subprocess.run(
            [*ledger, "log", "--kind", "verdict", "--json"], capture_output=True, text=True, check=True
        ).stdout
    )["items"]
    assert [v["payload"]["verdict"] for v in verdicts] == ["NOT QUALIFIED — CONTROL"]
    gates = {g["name"]: g["status"] for g in verdicts[0]["payload"]["result"]["gates"]}
    assert gates["api-readiness"] == "passed"
    assert gates["ready-control"] == "failed"
    assert gates["structured-output"] == "not_authorized"
    replay = subprocess.run(
        [*ledger, "verdict", "replay", verdicts[0]["id"]], capture_output=True, text=True, check=False
    )
    assert replay.returncode == 0, replay.stdout + replay.stderr
    verify = json.loads(
        subprocess.run([*ledger, "verify", "--json"], capture_output=True, text=True, check=False).stdout
    )
    assert verify["ok"] is True
    assert verify["artifacts_checked"] >= 3
