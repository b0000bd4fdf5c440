"""A launch's logs are read up to where the collector told the engine to stop, then to the first stop
marker — not to the first stop marker wherever it falls.

Regression (an independent audit): the engine printed vLLM's "EngineCore: trigger received signal=SIGTERM"
(a signal from elsewhere, not the collector's), then "torch.OutOfMemoryError: CUDA out of memory", and kept
serving; the policy read each stored log only up to the first stop marker, so the OOM was never read and
runtime stability passed. The collector now records how many lines each log held when it sent SIGTERM
(``details.stop_lines``); the policy reads those lines whatever they say, then on to the first marker (the
shutdown). A launch recorded before that, stopped by the collector, is read to its first marker as before;
any other — the engine ended on its own, a malformed record — is read whole.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ledger.collectors.launch import EngineRun, LaunchSpec
from tests.policy.test_fail_closed import _with_log, entry, qualified_entries, verdict_of

QUALIFIED = "QUALIFIED"
RUNTIME = "NOT QUALIFIED — RUNTIME RELIABILITY"
MARKER = "(EngineCore pid=1) INFO [shutdown] EngineCore: trigger received signal=SIGTERM\n"
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
REPO = Path(__file__).resolve().parents[2]

STDERR = "INFO ready\n" + MARKER + OOM + "INFO served\n" * 3 + MARKER + "EngineDeadError: shutting down\n"


def _launch(details: dict[str, Any]) -> list[dict[str, Any]]:
    es = qualified_entries()
    _with_log(es, STDERR, exit_code=0, details=details)
    return es


@pytest.mark.parametrize(
    ("details", "verdict"),
    [
        # the collector's stop came after line 6: the marker on line 2 was the engine's own, the OOM counts
        ({"stop_reason": "finished", "stop_lines": {"stdout.log": 1, "stderr.log": 6}}, RUNTIME),
        # the collector's stop came after line 1: line 2 on is its shutdown
        ({"stop_reason": "finished", "stop_lines": {"stdout.log": 1, "stderr.log": 1}}, QUALIFIED),
        # a launch recorded before stop_lines, stopped by the collector: to its first marker, as before
        ({"stop_reason": "finished"}, QUALIFIED),
        # the engine ended on its own: its whole log is its run's
        ({"stop_reason": "exited"}, RUNTIME),
        ({}, RUNTIME),
        # a malformed record says nothing of where the stop was: read whole
        ({"stop_reason": "finished", "stop_lines": {"stderr.log": "6"}}, RUNTIME),
        ({"stop_reason": "finished", "stop_lines": {"stderr.log": True}}, RUNTIME),
        ({"stop_reason": "finished", "stop_lines": "6"}, RUNTIME),
    ],
    ids=[
        "stop-after-the-oom",
        "stop-before-the-marker",
        "old-record",
        "exited",
        "no-reason",
        "str",
        "bool",
        "not-a-map",
    ],
)
def test_an_oom_logged_after_a_stop_marker_the_collector_did_not_cause_is_read(
    tmp_path: Path, details: dict[str, Any], verdict: str
) -> None:
    assert verdict_of(tmp_path, _launch(details))["verdict"] == verdict


def test_the_real_vllm_shutdown_after_the_collectors_stop_is_still_not_a_fault(tmp_path: Path) -> None:
    """The neighbour: vLLM's own shutdown lines after the collector's SIGTERM (line 116 on) are not read."""
    log = (REPO / "tests" / "fixtures" / "engine_logs" / "vllm_cpu_ready.log").read_text()
    es = qualified_entries()
    details = {"stop_reason": "finished", "stop_lines": {"stdout.log": 1, "stderr.log": 115}}
    _with_log(es, log, exit_code=0, details=details)
    assert verdict_of(tmp_path, es)["verdict"] == QUALIFIED
    entry(es, "launch")["payload"]["details"]["stop_reason"] = "exited"
    del entry(es, "launch")["payload"]["details"]["stop_lines"]
    assert verdict_of(tmp_path, es)["verdict"] == RUNTIME  # read whole, its shutdown errors are faults


@pytest.mark.skipif(sys.platform != "linux", reason="process groups: Linux only")
def test_the_launcher_records_where_each_log_stood_when_it_sent_the_stop(tmp_path: Path) -> None:
    code = (
        "import sys, time\nfor i in range(3): print(i, flush=True)\n"
        "print('e', file=sys.stderr, flush=True)\ntime.sleep(60)"
    )
    run = EngineRun(
        LaunchSpec(
            engine="vllm",
            command=[sys.executable, "-c", code],
            base_url="http://127.0.0.1:9",
            lease_seconds=60,
            grace_seconds=1,
        ),
        tmp_path / "logs",
    )
    run.start()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and run.stdout_path.read_text().count("\n") < 3:
        time.sleep(0.05)
    time.sleep(0.2)
    run.stop("finished")
    details = run.payload()["details"]
    assert details["stop_lines"] == {"stdout.log": 3, "stderr.log": 1}
    assert details["stop_reason"] == "finished"
