"""Fix 141 (audit 95 f3), the collector's and the policy's side: the collector records when it first read a
stop-cut line of the engine's after readiness (``details.cut_line_at``) and judges it with the policy's
``stop_cut_tolerance_s`` (``LaunchSpec.stop_cut_tolerance_s``); the policy reads the same times back from
the launch (``ledger.signatures.outside_stop_shown`` with ``cut_at``, ``marker_at``, ``tolerance``)."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from ledger.collectors.launch import EngineRun, LaunchSpec
from ledger.entries import parse_time
from tests.collectors.conftest import free_port
from tests.policy.test_fail_closed import POLICY_DIR, entry, gates, qualified_entries, rejected, verdict_of
from tests.policy.test_fix106_outside_stops import (
    ACCESS_200,
    READY_LINE,
    SHUTDOWN,
    _cut_structured,
    _exit_0,
    _policy,
)

ENGINE = Path(__file__).parent / "fixtures" / "fix141-uvicorn-cut.py"
CUT = "ERROR:    ASGI callable returned without completing response."
RUNTIME = "NOT QUALIFIED — RUNTIME RELIABILITY"
MARKER_AT = "2026-09-10T10:01:19.800000Z"  # before the probe failed (10:01:20) and the exit (19.9)


def _record(run: EngineRun) -> dict[str, Any]:
    assert run.wait_exit(20), run.log_text()
    run.stop("finished")
    return run.payload()


def _serving(tmp_path: Path, tolerance: float | None) -> EngineRun:
    port = free_port()
    spec = LaunchSpec(
        engine="generic",
        command=[sys.executable, str(ENGINE), str(port)],
        base_url=f"http://127.0.0.1:{port}",
        lease_seconds=60,
        grace_seconds=5,
        stop_cut_tolerance_s=tolerance,
    )
    run = EngineRun(spec, tmp_path / "logs")
    run.start()
    assert run.wait_ready().ready, run.log_text()
    return run


def _sigint_after_cut(tmp_path: Path, tolerance: float | None, wait: float = 0.0) -> dict[str, Any]:
    run = _serving(tmp_path, tolerance)
    assert httpx.get(run.spec.base_url + "/cut", timeout=5).status_code == 200
    time.sleep(wait)
    run.failure_observed = "engine fault: ClientPayloadError: Response payload is not completed"
    assert run.proc is not None
    run.proc.send_signal(signal.SIGINT)
    assert run.wait_exit(20), run.log_text()
    run.stop("finished")
    p = run.payload()
    assert CUT in run.log_text() and "INFO:     Shutting down" in run.log_text()
    return p


def test_a_cut_line_read_just_before_an_outside_sigints_shutdown_is_the_stops(tmp_path: Path) -> None:
    p = _sigint_after_cut(tmp_path, 2.0)
    details = p["details"]
    assert p["exit_code"] == 0 and details["cut_line_at"] <= details["stop_marker_at"]
    assert p["failure_signature"] == "stopped-from-outside", p
    assert details["failure_class"] == "operator-stop"
    # fix 148: the times the collector measured lie within the run its own record shows (what the policy
    # holds them to: readiness .. the leader's end plus the tolerance, and its recorded end)
    ready = parse_time(p["started_at"]).timestamp() + p["time_to_ready_s"] - 0.001
    end = min(parse_time(details["exited_at"]).timestamp() + 2.0, parse_time(p["ended_at"]).timestamp())
    for key in ("cut_line_at", "stop_marker_at"):
        assert ready <= parse_time(details[key]).timestamp() <= end, (key, p)


def test_a_cut_line_read_too_long_before_the_shutdown_is_the_engines(tmp_path: Path) -> None:
    p = _sigint_after_cut(tmp_path, 0.2, wait=1.0)
    assert "cut_line_at" in p["details"]
    assert p["failure_signature"] == "engine-exited-after-readiness", p


def test_without_the_policys_tolerance_a_cut_line_is_the_engines(tmp_path: Path) -> None:
    """``ledger collect launch`` (no policy): the line stays an error of the engine's own."""
    p = _sigint_after_cut(tmp_path, None)
    assert p["failure_signature"] == "engine-exited-after-readiness", p


def _self_end_after_cut(tmp_path: Path, after: float, tolerance: float | None = 0.5) -> dict[str, Any]:
    """The engine leaves a response incomplete (the cut line) and ``after`` seconds later shuts its own
    server down (uvicorn's ``should_exit``: "Shutting down", exit 0) — no signal from anyone."""
    run = _serving(tmp_path, tolerance)
    assert httpx.get(run.spec.base_url + f"/cut-end?after={after}", timeout=5).status_code == 200
    run.failure_observed = "engine fault: ClientPayloadError: Response payload is not completed"
    p = _record(run)
    assert p["exit_code"] == 0 and p["signal"] is None
    assert CUT in run.log_text() and "INFO:     Shutting down" in run.log_text()
    return p


def test_an_engine_that_ends_itself_well_after_a_cut_line_is_not_stopped_from_outside(tmp_path: Path) -> None:
    """The fail-closed neighbour: no outside stop, the engine's own shutdown 1 s after its cut line (beyond
    the policy's 0.5 s): the cut line is an error of its own before its end."""
    p = _self_end_after_cut(tmp_path, 1.0)
    details = p["details"]
    assert details["cut_line_at"] < details["stop_marker_at"]
    assert p["failure_signature"] == "engine-exited-after-readiness", p
    assert details["failure_class"] == "runtime-fault"


def test_an_engine_that_ends_itself_after_a_cut_line_without_the_policys_tolerance_is_not_stopped(
    tmp_path: Path,
) -> None:
    p = _self_end_after_cut(tmp_path, 0.0, tolerance=None)
    assert p["failure_signature"] == "engine-exited-after-readiness", p


def test_a_self_end_right_after_a_cut_line_cannot_be_told_from_an_outside_stop(tmp_path: Path) -> None:
    """The decided limit (fix 141b): uvicorn logs no line when a signal comes, so an engine that leaves a
    response incomplete and shuts its own server down within the tolerance, logging nothing else of its own
    (no other error line, no traceback, no 5xx, no request limit), reads as an outside stop: its run is
    INCONCLUSIVE (run it again), never credited — not QUALIFIED. Any other line of its own still decides
    (tests/test_fix141_sigint_mid_benchmark.py)."""
    p = _self_end_after_cut(tmp_path, 0.0)
    assert p["failure_signature"] == "stopped-from-outside", p


# --- the policy reads the times back -----------------------------------------------------------------------


def _verdict(tmp_path: Path, policy_dir: Path = POLICY_DIR, **details: Any) -> dict[str, Any]:
    es = qualified_entries()
    details = {"stop_marker_at": MARKER_AT, **details}
    _exit_0(
        es,
        READY_LINE + ACCESS_200 + CUT + "\n" + SHUTDOWN,
        failure_observed="/v1/chat/completions: ReadError: [Errno 104] Connection reset by peer",
        **details,
    )
    # the collector logs a launch once its run ended (fix 148: the log's time bounds the times it records)
    launch = entry(es, "launch")
    launch["at"] = launch["logged_at"] = "2026-09-10T10:01:21Z"
    launch["payload"]["ended_at"] = "2026-09-10T10:01:20Z"
    _cut_structured(es, "ReadError: [Errno 104] Connection reset by peer")
    return verdict_of(tmp_path, es, policy_dir=policy_dir)


def test_the_policy_reads_a_cut_line_timed_within_the_stop_as_the_stops(tmp_path: Path) -> None:
    v = _verdict(tmp_path, cut_line_at="2026-09-10T10:01:19.760000Z")
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert gates(v)["runtime-stability"] == "passed"
    assert rejected(v)["structured"] == "stopped-from-outside"


@pytest.mark.parametrize(
    "details",
    [
        {},  # not recorded
        {"cut_line_at": "2026-09-10T10:01:14.000000Z"},  # 5.8 s before the marker
        {"cut_line_at": 1757498479.76},  # mistyped
        {"cut_line_at": "not a time"},
        {"cut_line_at": "2026-09-10T10:01:19.760000Z", "stop_marker_at": None},
    ],
)
def test_the_policy_keeps_a_cut_line_not_timed_within_the_stop_the_engines(
    tmp_path: Path, details: dict[str, Any]
) -> None:
    assert _verdict(tmp_path, **details)["verdict"] == RUNTIME


def test_a_policy_without_stop_cut_tolerance_keeps_the_cut_line_the_engines(tmp_path: Path) -> None:
    pol = _policy(tmp_path, "stop_cut_tolerance_s = 0.5\n", "")
    v = _verdict(tmp_path, pol, cut_line_at="2026-09-10T10:01:19.760000Z")
    assert v["verdict"] == RUNTIME, v["gates"]
    assert gates(v)["runtime-stability"] == "failed"


# --- fix 148 (audit 99 f1): times the launch's own record or its log contradict are no times -------------
# the launch: started 10:00:20, ready 10:01:00 (40 s), the leader ended 10:01:19.9, its run ended 10:01:20,
# logged 10:01:21; the cut line comes before the shutdown line in the same log


def test_the_policy_keeps_a_cut_line_timed_after_the_engine_exited_the_engines(tmp_path: Path) -> None:
    """The regression: a cut line before the marker in its log, recorded as read 5 s after the leader
    ended and after the marker: the log's order and the launch's end contradict it (fail closed)."""
    assert _verdict(tmp_path, cut_line_at="2026-09-10T10:01:25.000000Z")["verdict"] == RUNTIME


def test_the_policy_keeps_a_cut_line_timed_a_year_after_the_marker_the_engines(tmp_path: Path) -> None:
    assert _verdict(tmp_path, cut_line_at="2027-09-10T10:01:19.000000Z")["verdict"] == RUNTIME


def test_the_policy_keeps_a_cut_line_and_marker_timed_before_the_launch_the_engines(tmp_path: Path) -> None:
    v = _verdict(
        tmp_path, stop_marker_at="2026-09-10T09:00:00.100000Z", cut_line_at="2026-09-10T09:00:00.000000Z"
    )
    assert v["verdict"] == RUNTIME, v["gates"]


@pytest.mark.parametrize(
    "details",
    [
        # both a year later, in order: after the launch's end and after the log took it
        {"stop_marker_at": "2027-09-10T10:01:19.800000Z", "cut_line_at": "2027-09-10T10:01:19.760000Z"},
        # both before readiness (10:01:00), in order
        {"stop_marker_at": "2026-09-10T10:00:59.800000Z", "cut_line_at": "2026-09-10T10:00:59.760000Z"},
        # the cut line read after the marker though it comes before it in the log, within the run
        {"stop_marker_at": "2026-09-10T10:01:19.700000Z", "cut_line_at": "2026-09-10T10:01:19.760000Z"},
        # beyond the leader's end plus the tolerance (0.5 s), before the log took the launch
        {"stop_marker_at": "2026-09-10T10:01:20.600000Z", "cut_line_at": "2026-09-10T10:01:20.500000Z"},
        # no exited_at: no end to hold them to
        {"cut_line_at": "2026-09-10T10:01:19.760000Z", "exited_at": None},
        {"cut_line_at": "2026-09-10T10:01:19.760000Z", "exited_at": "not a time"},
        # a time without its zone
        {"cut_line_at": "2026-09-10T10:01:19.760000", "stop_marker_at": "2026-09-10T10:01:19.800000"},
    ],
)
def test_the_policy_keeps_a_cut_line_timed_outside_the_launchs_run_the_engines(
    tmp_path: Path, details: dict[str, Any]
) -> None:
    assert _verdict(tmp_path, **details)["verdict"] == RUNTIME


@pytest.mark.parametrize(
    "details",
    [
        {"cut_line_at": "2026-09-10T10:01:19.760000Z"},  # the run's shape
        {"cut_line_at": MARKER_AT},  # read with the marker
        # both right after readiness
        {"stop_marker_at": "2026-09-10T10:01:00.400000Z", "cut_line_at": "2026-09-10T10:01:00.000000Z"},
        # the marker read after the leader ended, within the tolerance and before the run's end
        {"stop_marker_at": "2026-09-10T10:01:19.950000Z", "cut_line_at": "2026-09-10T10:01:19.900000Z"},
    ],
)
def test_the_policy_reads_a_cut_line_timed_within_the_launchs_run_as_the_stops(
    tmp_path: Path, details: dict[str, Any]
) -> None:
    v = _verdict(tmp_path, **details)
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert gates(v)["runtime-stability"] == "passed"


def test_the_launchs_recorded_end_bounds_the_times(tmp_path: Path) -> None:
    """``ended_at`` (taken once every log was read to its end) earlier than the times: no line was read
    then (the schema refuses a mistyped one)."""
    es = qualified_entries()
    _exit_0(
        es,
        READY_LINE + ACCESS_200 + CUT + "\n" + SHUTDOWN,
        failure_observed="/v1/chat/completions: ReadError: [Errno 104] Connection reset by peer",
        stop_marker_at=MARKER_AT,
        cut_line_at="2026-09-10T10:01:19.760000Z",
    )
    launch = entry(es, "launch")
    launch["at"] = launch["logged_at"] = "2026-09-10T10:01:21Z"
    launch["payload"]["ended_at"] = "2026-09-10T10:01:19.700000Z"
    _cut_structured(es, "ReadError: [Errno 104] Connection reset by peer")
    assert verdict_of(tmp_path, es)["verdict"] == RUNTIME


def test_the_log_time_of_the_launch_bounds_the_times(tmp_path: Path) -> None:
    """A launch the log took before the times it records (its claimed ``collected_at`` later): the log's
    time decides."""
    es = qualified_entries()
    _exit_0(
        es,
        READY_LINE + ACCESS_200 + CUT + "\n" + SHUTDOWN,
        failure_observed="/v1/chat/completions: ReadError: [Errno 104] Connection reset by peer",
        stop_marker_at=MARKER_AT,
        cut_line_at="2026-09-10T10:01:19.760000Z",
    )
    launch = entry(es, "launch")
    launch["at"], launch["logged_at"] = "2026-09-10T10:01:21Z", "2026-09-10T10:01:10Z"
    _cut_structured(es, "ReadError: [Errno 104] Connection reset by peer")
    assert verdict_of(tmp_path, es)["verdict"] == RUNTIME
