"""Audit 91 f2: the job's lease ran out mid-benchmark; the collector's own stop (SIGTERM: uvicorn closed its
listener) raced its "/health before the stop", which got ConnectError and was judged the engine having
stopped serving (NOT QUALIFIED — RUNTIME RELIABILITY). A failure for lack of an answer seen at or after the
stop the collector itself sent (the launch's ``details.stop_sent_at``, its ``details.stop_reason`` one of the
collector's own) is the stop's, not the engine's: ``e.derived.stop_cut`` (rule stopped-from-outside),
INCONCLUSIVE. Read from the launch entry and its stored logs, never the probe's claim; a failure before the
stop, an answer (HTTP 5xx), a timeout, or a launch that records no stop time (dropped, renamed, mistyped)
still counts against the engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.policy.test_fail_closed import entry, gates, qualified_entries, rejected, verdict_of
from tests.policy.test_fix77_stopped_from_outside import (
    BENCHMARK_EXITED_AT,
    RULE,
    RUNTIME,
    _cut_benchmark,
    _cut_structured,
    _stopped,
)

# the collector sent its stop 0.2 s before the engine's process ended (EXITED_AT, 10:01:19.9) and before the
# structured probe failed (collected 10:01:20)
SENT = "2026-09-10T10:01:19.700000Z"
BENCHMARK_SENT = "2026-09-10T10:29:59.700000Z"


def _own_stop(es: list[dict[str, Any]], reason: str = "lease-expired", sent: Any = SENT, **kw: Any) -> None:
    """The launch ended by the collector's own stop (its SIGTERM, sent at ``sent``)."""
    _stopped(es, signature=None if reason != "lease-expired" else "lease-expired", **kw)
    details = entry(es, "launch")["payload"]["details"]
    details["stop_reason"] = reason
    if sent is not None:
        details["stop_sent_at"] = sent


@pytest.mark.parametrize("reason", ["cancelled", "finished"])
def test_health_probe_failed_after_the_collectors_own_stop_is_not_evidence_against_the_engine(
    tmp_path: Path, reason: str
) -> None:
    es = qualified_entries()
    _own_stop(es, reason)
    _cut_structured(es)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert gates(v)["runtime-stability"] == "passed"
    assert rejected(v)["structured"] == RULE


def test_harness_fault_after_the_collectors_own_stop_is_not_evidence_against_the_engine(
    tmp_path: Path,
) -> None:
    es = qualified_entries()
    _own_stop(es, "cancelled", sent=BENCHMARK_SENT, exited_at=BENCHMARK_EXITED_AT)
    _cut_benchmark(es)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert gates(v)["runtime-stability"] == "passed"
    assert rejected(v)["benchmark"] == RULE


def test_lease_expired_launch_is_still_a_hang_though_the_probe_its_stop_cut_is_excused(
    tmp_path: Path,
) -> None:
    """The probe the lease's stop cut is no evidence; the launch whose lease ran out while ready still is (a
    hang, as runtime-stability judges it): the collector bounds its harness runs by the engine's lease so
    that a lease too short for the gates ends the harness, not the engine."""
    es = qualified_entries()
    _own_stop(es, "lease-expired")
    entry(es, "launch")["payload"]["lease_expired"] = True
    _cut_structured(es)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == RUNTIME, v["gates"]
    assert rejected(v).get("structured") == RULE


@pytest.mark.parametrize(
    "how",
    ["dropped", "renamed", "mistyped", "unparsed", "after-the-failure", "engine-ended", "unknown-reason"],
)
def test_collectors_own_stop_neighbours_still_count_against_the_engine(tmp_path: Path, how: str) -> None:
    es = qualified_entries()
    _own_stop(es, "cancelled")
    details = entry(es, "launch")["payload"]["details"]
    if how == "dropped":
        del details["stop_sent_at"]
    elif how == "renamed":
        details["stop_sent"] = details.pop("stop_sent_at")
    elif how == "mistyped":
        details["stop_sent_at"] = 1789034479.7
    elif how == "unparsed":
        details["stop_sent_at"] = "yesterday"
    elif how == "after-the-failure":  # the probe failed before the collector sent its stop: the engine's
        details["stop_sent_at"] = "2026-09-10T10:01:20.500000Z"
    elif how == "engine-ended":  # the engine's own end (a SIGKILL: the OOM killer), not the collector's stop
        details["stop_reason"] = "exited"
        entry(es, "launch")["payload"].update(signal=9, failure_signature="killed-sigkill")
    else:  # a misspelled stop reason is no stop of the collector's (its SIGKILL then is the engine's end)
        details["stop_reason"] = "canceled"
        entry(es, "launch")["payload"].update(signal=9, failure_signature="killed-sigkill")
    _cut_structured(es)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == RUNTIME, (how, v["gates"])
    assert rejected(v).get("structured") != RULE


@pytest.mark.parametrize("error", ["timeout", "answer"])
def test_a_timeout_or_an_answer_after_the_collectors_own_stop_still_counts(
    tmp_path: Path, error: str
) -> None:
    """A hang (the request timed out) or an HTTP 5xx answer is the engine's, whatever stop came after."""
    es = qualified_entries()
    _own_stop(es, "cancelled")
    if error == "timeout":
        _cut_structured(es, error="ReadTimeout: timed out")
    else:
        _cut_structured(es, http_status=503, error="EngineDeadError")
    assert verdict_of(tmp_path, es)["verdict"] == RUNTIME


def test_a_traceback_after_readiness_excuses_nothing(tmp_path: Path) -> None:
    es = qualified_entries()
    _own_stop(
        es, "cancelled", log="INFO:     Application startup complete.\nTraceback (most recent call last):\n"
    )
    _cut_structured(es)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] != "INCONCLUSIVE" and rejected(v).get("structured") != RULE
