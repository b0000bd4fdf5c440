"""fix113: an engine held from outside (suspended: SIGSTOP, a debugger, a cgroup freezer) before the collector
recorded its readiness. The launch is not ready, its lease ran out, the collector's stop escalated to SIGKILL
and its failure_detail says it found the processes in state T/t (suspended-from-outside): the hold's, read by
the policy from what the launch stored (never the failure_signature claim) — rule ``held-before-ready``
withholds its credit, it counts nothing against the engine, and api-readiness is INCONCLUSIVE, not NOT
QUALIFIED — RUNTIME RELIABILITY. A graver line in its logs, a fault signal, a crash status, no collector's
line, another claimed signature, or a policy that names no held stop still count (fail closed).

And the readiness poll's bare error names (``ConnectError``, no colon) are unanswered errors
(``ledger.signatures.unanswered_error``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ledger.signatures import unanswered_error
from tests.policy.test_fail_closed import entry, gates, qualified_entries, rejected, verdict_of
from tests.policy.test_fix106_outside_stops import HELD_PARAM, READY_LINE, SUSPENDED, _held, _policy

RUNTIME = "NOT QUALIFIED — RUNTIME RELIABILITY"
RULE = "held-before-ready"
LOADING = "llama_model_loader: loaded meta data\n"
# what ran after readiness: none of it was logged, as the engine was held before the collector saw it ready
AFTER_READY = ("health", "models", "completion", "structured", "sequential", "semantic", "benchmark")


def _held_before_ready(es: list[dict[str, Any]], *, detail: str = SUSPENDED, log: str = LOADING) -> None:
    """The launch was held before the collector recorded readiness (audit 83 f3, fix106 §5): not ready,
    nothing after readiness logged."""
    _held(es, detail=detail, log=log)
    launch = entry(es, "launch")
    launch["payload"].update(ready=False, ready_endpoint=None, time_to_ready_s=None)
    launch["payload"]["details"].pop("ready_lines")
    drop = {*AFTER_READY, "semantic-review", "benchmark-review", "benchmark-acceptance"}
    es[:] = [e for e in es if e.get("name") not in drop]


def test_an_engine_held_before_readiness_is_inconclusive(tmp_path: Path) -> None:
    es = qualified_entries()
    _held_before_ready(es)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert gates(v)["api-readiness"] != "failed", v["gates"]
    assert rejected(v)["launch"] == RULE
    why = next(r["detail"] for r in v["rejected"] if r["rule"] == RULE)
    assert "held from outside before it reached readiness (suspended-from-outside" in why, why


def test_a_held_launch_that_claims_no_signature_is_held_too(tmp_path: Path) -> None:
    """What the launch stored decides, not its claim: a left-out signature is no other end."""
    es = qualified_entries()
    _held_before_ready(es)
    entry(es, "launch")["payload"]["failure_signature"] = None
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert rejected(v)["launch"] == RULE


def test_a_held_launch_that_claims_another_signature_still_counts(tmp_path: Path) -> None:
    es = qualified_entries()
    _held_before_ready(es)
    entry(es, "launch")["payload"]["failure_signature"] = "startup-timeout"
    assert verdict_of(tmp_path, es)["verdict"] == RUNTIME


def test_a_held_launch_with_a_graver_log_line_still_counts(tmp_path: Path) -> None:
    es = qualified_entries()
    _held_before_ready(es, log=LOADING + "Segmentation fault (core dumped)\n")
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == RUNTIME, v["gates"]
    assert rejected(v).get("launch") != RULE


def test_a_launch_not_found_held_still_counts(tmp_path: Path) -> None:
    """No collector's line of a hold (its lease simply ran out while loading): the engine's failure."""
    es = qualified_entries()
    _held_before_ready(es, detail="lease expired")
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == RUNTIME, v["gates"]
    assert rejected(v).get("launch") != RULE


@pytest.mark.parametrize("change", [{"signal": 11}, {"signal": None, "exit_code": 139}])
def test_a_held_launch_with_a_fault_signal_or_crash_status_still_counts(
    tmp_path: Path, change: dict[str, Any]
) -> None:
    es = qualified_entries()
    _held_before_ready(es)
    entry(es, "launch")["payload"].update(change)
    assert verdict_of(tmp_path, es)["verdict"] == RUNTIME


def test_a_policy_that_names_no_held_stop_holds_no_launch_before_readiness(tmp_path: Path) -> None:
    pol = _policy(tmp_path, HELD_PARAM, "held_stop_signatures = []")
    es = qualified_entries()
    _held_before_ready(es)
    v = verdict_of(tmp_path, es, policy_dir=pol)
    assert v["verdict"] == RUNTIME, v["gates"]


def test_a_ready_held_launch_is_not_held_before_readiness(tmp_path: Path) -> None:
    """Ready, then held (fix106): its lease is no hang, and the rule for a launch never ready is not its."""
    es = qualified_entries()
    _held(es, log=READY_LINE)
    v = verdict_of(tmp_path, es)
    assert gates(v)["runtime-stability"] == "passed", v["gates"]
    assert rejected(v).get("launch") != RULE


@pytest.mark.parametrize("error", ["ConnectError", "ReadError", "WriteError", "ConnectError: [Errno 111] x"])
def test_the_readiness_polls_bare_error_name_is_unanswered(error: str) -> None:
    assert unanswered_error(error)


@pytest.mark.parametrize(
    "error", ["ConnectErrors", "ConnectError\n", "ConnectError:", "ReadTimeout", "connecterror", None, 7]
)
def test_another_shape_of_error_is_not_unanswered(error: Any) -> None:
    assert not unanswered_error(error)
