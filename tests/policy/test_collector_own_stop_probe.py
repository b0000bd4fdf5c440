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
    """The launch ended by the collector's own stop (its SIGTERM, sent at ``sent``, with the grace the
    collector records: ``details.grace_seconds``, the campaign's ``[engine] grace_seconds``, 10 s)."""
    kw.setdefault("grace_seconds", 10.0)
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


# Audit 93 f3: ``details.stop_sent_at`` was taken as the launch stated it. A launch started 10:00:20, ready
# 40 s later (10:01:00), that records its own stop sent at 09:59:00 — before it existed — had the probe that
# failed at 10:01:20 excused (INCONCLUSIVE, stopped-from-outside); so did a stop time far before any failure.
# A stop time excuses a failure only where it fits the launch's other recorded times: after its readiness,
# no later than its recorded end, that end within the stop's grace (``details.grace_seconds``) after it; the
# failure at or after the stop and no later than the end plus ``params.stop_cut_tolerance_s``; and no answer
# of the attempt observed after the stop.


def _own_stop_verdict(tmp_path: Path, *, sent: str = SENT, **kw: Any) -> dict[str, Any]:
    es = qualified_entries()
    _own_stop(es, "cancelled", sent=sent, **kw)
    _cut_structured(es)
    return verdict_of(tmp_path, es)


def _counts_against(v: dict[str, Any]) -> None:
    assert v["verdict"] == RUNTIME, v["gates"]
    assert rejected(v).get("structured") != RULE


@pytest.mark.parametrize(
    "sent",
    [
        pytest.param("2026-09-10T09:59:00Z", id="before-the-launch-started"),
        pytest.param("2026-09-10T10:00:20Z", id="at-the-launch-start"),
    ],
)
def test_own_stop_sent_before_the_launch_existed_excuses_nothing(tmp_path: Path, sent: str) -> None:
    _counts_against(_own_stop_verdict(tmp_path, sent=sent))


def test_own_stop_sent_before_readiness_excuses_nothing(tmp_path: Path) -> None:
    """Every answer of the attempt came before the stop (10:01:19.7), its end 0.2 s after it: only the
    launch's readiness (started 10:00:20, ready 100 s later: 10:02:00) contradicts it."""
    es = qualified_entries()
    _own_stop(es, "cancelled")
    entry(es, "launch")["payload"]["time_to_ready_s"] = 100.0
    _cut_structured(es)
    _counts_against(verdict_of(tmp_path, es))


@pytest.mark.parametrize("how", ["dropped", "null", "renamed"])
def test_own_stop_launch_that_cannot_say_when_it_was_ready_excuses_nothing(tmp_path: Path, how: str) -> None:
    """The schema refuses a mistyped, negative or infinite ``time_to_ready_s``; one left out (or null) gives
    no readiness time to put the stop after."""
    es = qualified_entries()
    _own_stop(es, "cancelled")
    p = entry(es, "launch")["payload"]
    if how == "dropped":
        del p["time_to_ready_s"]
    elif how == "null":
        p["time_to_ready_s"] = None
    else:
        p["details"]["time_to_ready"] = p.pop("time_to_ready_s")
    _cut_structured(es)
    _counts_against(verdict_of(tmp_path, es))


def test_own_stop_sent_after_the_launch_ended_excuses_nothing(tmp_path: Path) -> None:
    """The engine's process ended 10:01:19.9; a stop 'sent' 10:01:19.95, after it, stopped nothing."""
    _counts_against(_own_stop_verdict(tmp_path, sent="2026-09-10T10:01:19.950000Z"))


@pytest.mark.parametrize(
    ("grace", "excused"),
    [
        pytest.param(1.0, False, id="end-long-after-the-stop"),
        pytest.param(10.0, True, id="end-within-the-grace"),
    ],
)
def test_own_stop_whose_engine_ended_long_after_it_excuses_nothing(
    tmp_path: Path, grace: float, excused: bool
) -> None:
    """Stop sent 10:01:18, the engine ended 10:01:19.9 (1.9 s later): past a 1 s grace (plus the 0.5 s
    tolerance) the collector had killed it — the stop it records is not the one that ended the engine."""
    v = _own_stop_verdict(tmp_path, sent="2026-09-10T10:01:18Z", grace_seconds=grace)
    if excused:
        assert v["verdict"] == "INCONCLUSIVE", v["gates"]
        assert rejected(v)["structured"] == RULE
    else:
        _counts_against(v)


@pytest.mark.parametrize("how", ["dropped", "renamed", "mistyped", "negative", "bool"])
def test_own_stop_launch_that_records_no_stop_grace_excuses_nothing(tmp_path: Path, how: str) -> None:
    es = qualified_entries()
    _own_stop(es, "cancelled")
    details = entry(es, "launch")["payload"]["details"]
    if how == "dropped":
        del details["grace_seconds"]
    elif how == "renamed":
        details["grace_s"] = details.pop("grace_seconds")
    elif how == "mistyped":
        details["grace_seconds"] = "10"
    elif how == "negative":
        details["grace_seconds"] = -10.0
    else:
        details["grace_seconds"] = True
    _cut_structured(es)
    _counts_against(verdict_of(tmp_path, es))


@pytest.mark.parametrize(
    ("exited", "excused"),
    [
        pytest.param("2026-09-10T10:01:19Z", False, id="failure-1s-after-the-end"),
        pytest.param("2026-09-10T10:01:19.600000Z", True, id="failure-within-the-tolerance"),
    ],
)
def test_own_stop_failure_long_after_the_engine_ended_excuses_nothing(
    tmp_path: Path, exited: str, excused: bool
) -> None:
    """The probe failed 10:01:20: 1 s after the engine's end (10:01:19) is past
    ``params.stop_cut_tolerance_s`` (0.5 s) — no stop under way cut it; 0.4 s after is within it."""
    v = _own_stop_verdict(tmp_path, sent="2026-09-10T10:01:18.900000Z", exited_at=exited)
    if excused:
        assert v["verdict"] == "INCONCLUSIVE", v["gates"]
        assert rejected(v)["structured"] == RULE
    else:
        _counts_against(v)


def test_own_stop_launch_that_records_no_end_excuses_nothing(tmp_path: Path) -> None:
    es = qualified_entries()
    _own_stop(es, "cancelled")
    del entry(es, "launch")["payload"]["details"]["exited_at"]
    _cut_structured(es)
    _counts_against(verdict_of(tmp_path, es))


@pytest.mark.parametrize(
    ("sent", "excused"),
    [
        pytest.param("2026-09-10T10:01:08Z", False, id="completion-answered-after-the-stop"),
        pytest.param("2026-09-10T10:01:11Z", True, id="every-answer-before-the-stop"),
    ],
)
def test_own_stop_with_a_passing_probe_after_it_excuses_nothing(
    tmp_path: Path, sent: str, excused: bool
) -> None:
    """The completion probe answered at 10:01:10: an engine that answered after the stop the launch claims
    (10:01:08) was not being stopped then. A 30 s grace, so that only the answer tells them apart."""
    v = _own_stop_verdict(tmp_path, sent=sent, grace_seconds=30.0)
    if excused:
        assert v["verdict"] == "INCONCLUSIVE", v["gates"]
        assert rejected(v)["structured"] == RULE
    else:
        _counts_against(v)
