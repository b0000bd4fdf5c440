"""Issue 11 (audit 67 f4, timing variant): an engine already shutting down when the collector stops it (its
log shows a stop marker after readiness: someone else stopped it) ends on its own — the launch records
stop reason "exited" with the signal that ended it, not the collector's "finished"."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from ledger.collectors.launch import EngineRun, LaunchSpec
from ledger.entries import parse_time

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

    def said(text: str) -> bool:  # the log is made by the engine's start: not there yet on a loaded machine
        return run.stdout_path.exists() and text in run.stdout_path.read_text()

    while time.monotonic() < deadline and not said("serving"):
        time.sleep(0.05)
    if stop:  # past the marker (waited for, not timed: a loaded machine starts the engine late)
        while time.monotonic() < deadline and not said(marker):
            time.sleep(0.05)
    else:
        time.sleep(0.8)  # where a marker would have been
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


# --- fix 80 (audit 71 f2): uvicorn's stop line as uvicorn really logs it, among other lines ---------------

UVICORN_LINES = (
    'INFO:     127.0.0.1:47002 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    "INFO:     Shutting down",
    "INFO:     Waiting for connections to close. (CTRL+C to force quit)",
)

ENGINE_LINES = """
import os, signal, sys, time
print("serving", flush=True)
time.sleep(0.5)
for line in {lines!r}:
    print(line, flush=True)
time.sleep(1.0)
signal.signal(signal.SIGTERM, signal.SIG_DFL)
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(60)
"""


def _run_lines(tmp_path: Path, lines: tuple[str, ...]) -> EngineRun:
    spec = LaunchSpec(
        engine="generic",
        command=[sys.executable, "-c", ENGINE_LINES.format(lines=lines)],
        base_url="http://127.0.0.1:9",
        lease_seconds=30,
        grace_seconds=5,
    )
    run = EngineRun(spec, tmp_path / "logs")
    run.start()
    run.ready_lines = {"stdout.log": 0, "stderr.log": 0}

    # wait for what the engine printed, not for a time (regression: under load the log file was not yet
    # there when first read — FileNotFoundError — and a fixed sleep could end before the lines came)
    def printed() -> str:
        return run.stdout_path.read_text() if run.stdout_path.exists() else ""

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not (lines and lines[-1] in printed()):
        time.sleep(0.05)
    assert lines[-1] in printed(), printed()
    time.sleep(0.1)
    return run


def test_uvicorns_stop_line_among_others_is_a_stop_marker(tmp_path: Path) -> None:
    """f2: ``^INFO:\\s+Shutting down$`` matched nothing in the joined log (compiled without re.MULTILINE):
    uvicorn's real sequence is now read as an engine already shutting down — its own end, its signal."""
    run = _run_lines(tmp_path, UVICORN_LINES)
    run.stop("finished")
    p = run.payload()
    assert p["details"]["stop_reason"] == "exited"
    assert p["signal"] == 15
    assert "stop_lines" not in p["details"]
    # the stop's times the policy compares a failure with: the marker's line, then the process's end
    assert p["details"]["stop_marker_at"] <= p["details"]["exited_at"] <= p["ended_at"]


@pytest.mark.parametrize(
    "line",
    [
        "INFO:     Shutting down now",  # more words after it
        "DEBUG:    Shutting down",  # another level
        "INFO:     shutting down",  # another case
    ],
)
def test_a_near_miss_of_uvicorns_stop_line_is_no_marker(tmp_path: Path, line: str) -> None:
    run = _run_lines(tmp_path, (UVICORN_LINES[0], line))
    run.stop("finished")
    p = run.payload()
    assert "stop_lines" in p["details"]
    assert "stop_marker_at" not in p["details"]


def test_the_engines_end_is_recorded_when_it_happens(tmp_path: Path) -> None:
    """``details.exited_at`` is when the process ended (a watcher sees it), not when the collector next
    looked: an engine that ended 1.3 s before the collector's stop keeps that time."""
    spec = LaunchSpec(
        engine="generic",
        command=[sys.executable, "-c", "import time; print('serving', flush=True); time.sleep(0.3)"],
        base_url="http://127.0.0.1:9",
        lease_seconds=30,
        grace_seconds=5,
    )
    run = EngineRun(spec, tmp_path / "logs")
    run.start()
    time.sleep(1.6)
    run.stop("finished")
    p = run.payload()
    exited = parse_time(p["details"]["exited_at"])
    assert (parse_time(p["ended_at"]) - exited).total_seconds() > 1.0
    assert (exited - parse_time(p["started_at"])).total_seconds() < 1.0
