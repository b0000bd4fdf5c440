"""End to end (audit 38, f1): an operator cancels `ledger collect run` (SIGTERM, as documented) while the
engine is still loading. The job is recorded `cancelled` (cancelled_by SIGTERM), the launch `ready = false`
with stop reason "cancelled" — and the verdict blamed the engine: NOT QUALIFIED — RUNTIME RELIABILITY. An
operator's act is no engine failure: api-readiness is INCONCLUSIVE (operator-stopped-before-ready), never a
runtime failure."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

from ledger.policy.loader import load_policy
from ledger.policy.verdict import evaluate
from ledger.service import Ledger

from .conftest import LEDGER, entries_of, fault_campaign


def test_sigterm_while_the_engine_loads_is_inconclusive_not_runtime_reliability(
    tmp_path: Path, tiny_model_dir: Path, home: Path
) -> None:
    c = fault_campaign(tmp_path, tiny_model_dir, [{"name": "default", "args": ["--mode", "ok"]}])
    c.write_text(c.read_text().replace('"--load-seconds", "0.3"', '"--load-seconds", "30"'))
    proc = subprocess.Popen(
        [*LEDGER, "collect", "run", str(c), "--home", str(home), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # wait until the engine runs (its log directory appears), then cancel while it still loads
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list((home / "runs").glob("*/*/attempt-1-default/stdout.log")):
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=90)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    ledger = Ledger.open(home)
    try:
        [launch] = [e["payload"] for e in entries_of(ledger, "engine.launch")]
        assert launch["ready"] is False
        assert launch["details"]["stop_reason"] == "cancelled"
        assert launch["failure_signature"] is None
        final = next(j for j in entries_of(ledger, "job") if j["payload"]["state"] != "running")
        assert final["payload"]["state"] == "cancelled"
        assert "SIGTERM" in final["payload"]["cancelled_by"]
        v = evaluate(ledger, {"campaign": "fault"}, load_policy("backend-qualification"))
    finally:
        ledger.close()
    gate = next(g for g in v["gates"] if g["name"] == "api-readiness")
    assert v["verdict"] == "INCONCLUSIVE", (v["verdict"], gate)
    assert gate["status"] == "missing"
    assert "only rejected evidence: 1 operator-stopped-before-ready" in gate["reason"]
    [row] = [r for r in v["rejected"] if r["kind"] == "engine.launch"]
    assert row["rule"] == "operator-stopped-before-ready"
    assert "was stopped by the operator before it reached readiness" in row["detail"]
    assert v["failing_beyond_ladder"] == []
