"""Issue 11 (audit 67 f4, timing variant): an engine already shutting down when the collector stops it (its
log shows a stop marker after readiness: someone else stopped it) ends on its own — the launch records
stop reason "exited" with the signal that ended it, not the collector's "finished"."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from ledger.collectors.launch import EngineRun, LaunchSpec

MARKER = "[shutdown] API server: shutdown triggered"  # a stop marker of collectors/signatures.toml

ENGINE = """
import os, signal, sys, time
print("serving", flush=True)
time.sleep(0.5)
if {stop!r}:
    print({marker!r}, flush=True)
    time.sleep(1.0)  # shutting down, longer than the collector waits before it stops the engine
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)
time.sleep(60)
"""


def _run(tmp_path: Path, *, stop: bool, marker: str = MARKER) -> EngineRun:
    spec = LaunchSpec(
        engine="generic",
        command=[sys.executable, "-c", ENGINE.format(stop=stop, marker=marker)],
        base_url="http://127.0.0.1:9",
        lease_seconds=30,
        grace_seconds=5,
    )
    run = EngineRun(spec, tmp_path / "logs")
    run.start()
    run.ready_lines = {"stdout.log": 0, "stderr.log": 0}  # as if readiness was reached at the start
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and "serving" not in run.stdout_path.read_text():
        time.sleep(0.05)
    time.sleep(0.8)  # past the marker, if any
    return run


def test_engine_already_shutting_down_is_recorded_as_its_own_end(tmp_path: Path) -> None:
    run = _run(tmp_path, stop=True)
    run.stop("finished")
    p = run.payload()
    assert p["details"]["stop_reason"] == "exited"
    assert p["signal"] == 15
    assert "stop_lines" not in p["details"]  # the collector sent no stop


def test_engine_not_shutting_down_is_stopped_by_the_collector(tmp_path: Path) -> None:
    run = _run(tmp_path, stop=False)
    run.stop("finished")
    p = run.payload()
    assert p["details"]["stop_reason"] == "finished"
    assert "stop_lines" in p["details"]


def test_a_marker_before_readiness_is_not_a_stop_from_outside(tmp_path: Path) -> None:
    """The marker must follow readiness: lines before it are not the run's shutdown."""
    run = _run(tmp_path, stop=False)
    run.ready_lines = None  # readiness never reached: the collector's stop is its own
    run.stop("finished")
    assert run.payload()["details"]["stop_reason"] == "finished"


def test_a_line_that_is_no_marker_is_not_a_stop(tmp_path: Path) -> None:
    """A near-miss of the marker's words (renamed) is no stop marker: the collector's stop stands."""
    run = _run(tmp_path, stop=True, marker="[shutdown] API server: shutdown maybe")
    run.stop("finished")
    # the collector stopped it before (or while) it killed itself: its stop, sent with stop_lines
    assert "stop_lines" in run.payload()["details"]
