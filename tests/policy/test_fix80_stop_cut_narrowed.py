"""Issue 11 / audit 71: "stopped from outside" never excuses a real engine failure. Only a request that got
no answer at all (its connection refused, reset or closed) may be the stop's doing — never an HTTP 5xx
answer (f1), never a timeout (f4) —, only where it was not seen before the stop reached the engine (f4:
``details.exited_at`` / ``details.stop_marker_at`` against ``params.stop_cut_tolerance_s``), only for an
engine whose logs show no traceback after readiness and whose end is a signal, not an exit status 143
(f3). Anything missing, renamed or mistyped excuses nothing (fail closed)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from ledger.errors import SchemaError
from tests.policy.test_fail_closed import POLICY_DIR, entry, gates, qualified_entries, rejected, verdict_of
from tests.policy.test_fix77_stopped_from_outside import (
    BENCHMARK_EXITED_AT,
    RULE,
    RUNTIME,
    _cut_benchmark,
    _cut_structured,
    _stopped,
)

SEMANTIC_EXITED_AT = "2026-09-10T10:09:59.800000Z"


def _excused(v: dict[str, Any], name: str) -> bool:
    return v["verdict"] == "INCONCLUSIVE" and rejected(v).get(name) == RULE


def _cut_semantic(es: list[dict[str, Any]], **bounds: Any) -> None:
    p = entry(es, "semantic")["payload"]
    p["status"] = "failed"
    p["reason"] = "no aggregate result: engine fault at item capital-france"
    p["bounds"].update(
        outcome="fault",
        aggregate=False,
        score=None,
        fault_kind="unanswered",
        fault_at="2026-09-10T10:09:59.9Z",
    )
    p["bounds"].update(bounds)
    p["figures"] = {"score": None}
    p["counts"].update(asked=3, passed=3, failed=0, errors=0)
    # (fix 83) the run's per-request record: three items answered, the fourth's connection lost unanswered
    ok = {"level": 1, "repetition": 0, "error": None, "fault": False, "http_status": 200, "unanswered": False}
    lost = {**ok, "prompt_id": "s3", "error": "ClientOSError: reset", "fault": True, "http_status": None}
    lines = [{**ok, "prompt_id": f"s{i}"} for i in range(3)] + [{**lost, "unanswered": True}]
    entry(es, "semantic")["artifacts"] = [
        {"name": "semantic-requests.jsonl", "text": "".join(json.dumps(x) + "\n" for x in lines)}
    ]
    for name in ("semantic-review", "benchmark", "benchmark-review", "benchmark-acceptance"):
        es.remove(entry(es, name))


# --- f1: an HTTP 5xx answer is the engine's failure, whatever stopped it after ---------------------------


def test_the_fixtures_own_cuts_are_excused(tmp_path: Path) -> None:
    """The baseline the neighbours below change one field of."""
    es = qualified_entries()
    _stopped(es, exited_at=SEMANTIC_EXITED_AT)
    _cut_semantic(es)
    assert _excused(verdict_of(tmp_path, es), "semantic")
    es = qualified_entries()
    _stopped(es, exited_at=BENCHMARK_EXITED_AT)
    _cut_benchmark(es)
    assert _excused(verdict_of(tmp_path, es), "benchmark")


@pytest.mark.parametrize("kind", ["answered", "timeout", "other", "dropped", "renamed", "null"])
def test_a_harness_http_500_then_sigterm_is_not_excused(tmp_path: Path, kind: str) -> None:
    """f1: a semantic run the engine answered HTTP 500 (fault_kind "answered"), then SIGTERMed 0.3 s later:
    the engine's failure. So is a hang (timeout), any other fault, and a record that does not say."""
    es = qualified_entries()
    _stopped(es, exited_at=SEMANTIC_EXITED_AT)
    _cut_semantic(es)
    bounds = entry(es, "semantic")["payload"]["bounds"]
    if kind == "dropped":
        del bounds["fault_kind"]
    elif kind == "renamed":
        bounds["fault_type"] = bounds.pop("fault_kind")
    elif kind == "null":
        bounds["fault_kind"] = None
    else:
        bounds["fault_kind"] = kind
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == RUNTIME, v["gates"]
    assert rejected(v).get("semantic") != RULE


@pytest.mark.parametrize("kind", ["answered", "dropped"])
def test_a_benchmark_http_500_then_sigterm_is_not_excused(tmp_path: Path, kind: str) -> None:
    es = qualified_entries()
    _stopped(es, exited_at=BENCHMARK_EXITED_AT)
    _cut_benchmark(es)
    bounds = entry(es, "benchmark")["payload"]["bounds"]
    if kind == "dropped":
        del bounds["fault_kind"]
    else:
        bounds["fault_kind"] = kind
    assert verdict_of(tmp_path, es)["verdict"] == RUNTIME


def test_benchmark_5xx_answers_are_not_subtracted_as_in_flight(tmp_path: Path) -> None:
    """The old rule subtracted the largest level (32) of errors: 33 errors of which only 1 went unanswered
    are 32 the engine failed itself — counted against it, never INCONCLUSIVE."""
    es = qualified_entries()
    _stopped(es, exited_at=BENCHMARK_EXITED_AT)
    _cut_benchmark(es)
    entry(es, "benchmark")["payload"]["counts"].update(errors=33, unanswered=1)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] not in ("INCONCLUSIVE", "QUALIFIED"), v["gates"]


@pytest.mark.parametrize("how", ["dropped", "renamed"])
def test_a_benchmark_without_its_unanswered_count_counts_against(tmp_path: Path, how: str) -> None:
    es = qualified_entries()
    _stopped(es, exited_at=BENCHMARK_EXITED_AT)
    _cut_benchmark(es)
    counts = entry(es, "benchmark")["payload"]["counts"]
    n = counts.pop("unanswered")
    if how == "renamed":
        counts["unanswerd"] = n
    v = verdict_of(tmp_path, es)
    assert v["verdict"] not in ("INCONCLUSIVE", "QUALIFIED"), v["gates"]


# --- f4: a timeout is the engine's hang; a failure before the stop is not the stop's ----------------------


@pytest.mark.parametrize(
    "error",
    [
        "ReadTimeout: timed out",
        "ConnectTimeout: timed out",
        "WriteTimeout: timed out",
        "PoolTimeout: timed out",
        "RemoteProtocolError: illegal status line",
        "readerror: connection reset",
        "stopped by the operator (SIGTERM)",
    ],
)
def test_a_timed_out_probe_then_sigterm_is_not_excused(tmp_path: Path, error: str) -> None:
    """f4: a probe that timed out (the engine hung), or failed in any way that does not say its connection
    was refused, reset or closed (a protocol error, a misspelled name, a claim), is the engine's failure."""
    es = qualified_entries()
    _stopped(es)
    _cut_structured(es, error=error)
    assert verdict_of(tmp_path, es)["verdict"] == RUNTIME


@pytest.mark.parametrize(
    "error",
    [
        "ConnectError: [Errno 111] Connection refused",
        "ReadError: [Errno 104] Connection reset by peer",
        "RemoteProtocolError: Server disconnected without sending a response.",
    ],
)
def test_a_probe_left_unanswered_by_the_stop_is_excused(tmp_path: Path, error: str) -> None:
    es = qualified_entries()
    _stopped(es)
    _cut_structured(es, error=error)
    v = verdict_of(tmp_path, es)
    assert _excused(v, "structured"), v["gates"]
    assert gates(v)["runtime-stability"] == "passed"


@pytest.mark.parametrize(
    ("details", "excused"),
    [
        ({"exited_at": "2026-09-10T10:01:21Z"}, False),  # the stop came 1 s after the failure was seen
        ({"exited_at": "2026-09-10T10:01:20.400000Z"}, True),  # within the 0.5 s tolerance
        ({"exited_at": "2026-09-10T10:01:20.600000Z"}, False),  # past it
        # a stop marker logged before the process ended: the stop reached the engine then
        ({"exited_at": "2026-09-10T10:01:23Z", "stop_marker_at": "2026-09-10T10:01:19.500000Z"}, True),
        ({"exited_at": None}, False),  # no stop time recorded
        ({"exited_at": 1788000000}, False),  # mistyped
        ({"exited_at": "yesterday"}, False),  # does not parse
    ],
)
def test_a_failure_seen_before_the_stop_is_not_excused(
    tmp_path: Path, details: dict[str, Any], excused: bool
) -> None:
    """f4: the structured probe failed at 10:01:20 (its collected_at); the stop's recorded time decides."""
    es = qualified_entries()
    _stopped(es)
    d = entry(es, "launch")["payload"]["details"]
    d.update(details)
    if d.get("exited_at") is None:
        del d["exited_at"]
    _cut_structured(es)
    v = verdict_of(tmp_path, es)
    assert (v["verdict"] == "INCONCLUSIVE") is excused, v["gates"]
    if not excused:
        assert v["verdict"] == RUNTIME


@pytest.mark.parametrize("fault_at", ["2026-09-10T10:29:58Z", None])
def test_a_harness_fault_before_the_stop_is_not_excused(tmp_path: Path, fault_at: str | None) -> None:
    """The harness's fault 1.8 s before the engine ended, or no time recorded: not excused."""
    es = qualified_entries()
    _stopped(es, exited_at=BENCHMARK_EXITED_AT)
    _cut_benchmark(es)
    bounds = entry(es, "benchmark")["payload"]["bounds"]
    if fault_at is None:
        del bounds["fault_at"]
    else:
        bounds["fault_at"] = fault_at
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == RUNTIME, v["gates"]


@pytest.mark.parametrize(
    ("field", "value"), [("fault_at", "soon"), ("fault_kind", "Unanswered"), ("fault_kind", 1)]
)
def test_a_mistyped_fault_record_is_refused_at_ingest(tmp_path: Path, field: str, value: Any) -> None:
    """``ledger.entries.HarnessBounds`` types both fields: a time that does not parse, a kind outside the
    vocabulary (case too) is refused, never read as absent."""
    es = qualified_entries()
    _stopped(es, exited_at=BENCHMARK_EXITED_AT)
    _cut_benchmark(es)
    entry(es, "benchmark")["payload"]["bounds"][field] = value
    with pytest.raises(SchemaError, match=f"bounds.{field}"):
        verdict_of(tmp_path, es)


@pytest.mark.parametrize("value", ["dropped", "-1", "'0.5'", "true"])
def test_a_policy_without_a_stop_cut_tolerance_excuses_nothing(tmp_path: Path, value: str) -> None:
    pol = tmp_path / "policies"
    shutil.copytree(POLICY_DIR, pol)
    f = pol / "backend-qualification.toml"
    text = f.read_text()
    assert "stop_cut_tolerance_s = 0.5\n" in text
    new = "" if value == "dropped" else f"stop_cut_tolerance_s = {value}\n"
    f.write_text(text.replace("stop_cut_tolerance_s = 0.5\n", new))
    es = qualified_entries()
    _stopped(es)
    _cut_structured(es)
    assert verdict_of(tmp_path, es, policy_dir=pol)["verdict"] == RUNTIME


# --- f3: a traceback, an exit status 143 --------------------------------------------------------------


TRACEBACK = "Traceback (most recent call last):\nRuntimeError: kv cache block table corrupted\n"


def test_a_traceback_then_sigterm_is_not_excused(tmp_path: Path) -> None:
    """f3: the engine logged a Python traceback after readiness, then SIGTERMed itself."""
    es = qualified_entries()
    _stopped(es, log="INFO:     Application startup complete.\n" + TRACEBACK)
    _cut_structured(es)
    assert verdict_of(tmp_path, es)["verdict"] == RUNTIME


def test_a_traceback_before_readiness_is_start_up(tmp_path: Path) -> None:
    """Neighbour: the same lines before readiness (the start-up's) do not make the run unclean."""
    es = qualified_entries()
    _stopped(es, log=TRACEBACK + "INFO:     Application startup complete.\n", ready_lines={"stderr.log": 2})
    _cut_structured(es)
    assert _excused(verdict_of(tmp_path, es), "structured")


def test_a_launch_without_stored_logs_excuses_nothing(tmp_path: Path) -> None:
    es = qualified_entries()
    _stopped(es)
    del entry(es, "launch")["artifacts"]
    _cut_structured(es)
    assert verdict_of(tmp_path, es)["verdict"] == RUNTIME


def test_an_exit_status_143_is_no_outside_signal(tmp_path: Path) -> None:
    """f3: os._exit(143) — an exit status, no signal the collector saw end the process."""
    es = qualified_entries()
    _stopped(es, signature="killed-143")
    entry(es, "launch")["payload"].update(signal=None, exit_code=143)
    _cut_structured(es)
    assert verdict_of(tmp_path, es)["verdict"] == RUNTIME
