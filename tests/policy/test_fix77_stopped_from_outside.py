"""Issue 11 (audit 67 f3/f4): a probe or harness run that got no answer because its engine was stopped from
outside (a SIGTERM the signature table classes operator-stop, one of params.stop_classes) is no evidence
against the engine: INCONCLUSIVE naming rule stopped-from-outside, derived from the log (the launch's
recorded end), never from the probe's own claim. A failure the engine showed with an answer, or before an
answer logged after it, still counts; a SIGKILL (class resource) still counts against."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.policy.test_fail_closed import entry, gates, qualified_entries, rejected, verdict_of

RUNTIME = "NOT QUALIFIED — RUNTIME RELIABILITY"
RULE = "stopped-from-outside"


# when the collector saw the engine's process end (fix 80: the stop's time, ``details.exited_at``): just
# before the structured probe (10:01:20) failed; a benchmark cut passes its own
EXITED_AT = "2026-09-10T10:01:19.900000Z"
BENCHMARK_EXITED_AT = "2026-09-10T10:29:59.800000Z"
# a clean run's stored log: readiness, then an access line (fix 80: a launch whose logs are not stored, or
# show a traceback after readiness, excuses nothing)
CLEAN_LOG = (
    "INFO:     Application startup complete.\n"
    'INFO:     127.0.0.1:40000 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
)


_ANSWERED = {
    "level": 1,
    "repetition": 0,
    "error": None,
    "fault": False,
    "http_status": 200,
    "unanswered": False,
}
_UNANSWERED = {
    **_ANSWERED,
    "error": "ClientOSError: Connection reset by peer",
    "fault": True,
    "http_status": None,
    "unanswered": True,
}
BENCHMARK_RECORD = "".join(json.dumps(r) + "\n" for r in [_ANSWERED] * 81 + [_UNANSWERED])


def _stopped(
    es: list[dict[str, Any]],
    *,
    signal: int = 15,
    signature: str = "killed-sigterm",
    exited_at: str = EXITED_AT,
    log: str = CLEAN_LOG,
    **details: Any,
) -> None:
    """The launch ended by a signal of its own (not the collector's stop): stop reason "exited", its
    process's end seen at ``exited_at``, its stored log ``log`` (the first line before readiness)."""
    launch = entry(es, "launch")
    p = launch["payload"]
    p.update(signal=signal, exit_code=None, failure_signature=signature)
    # where it served (details.base_url) stays: the harness results measured it (fix 153)
    served = {k: v for k, v in p.get("details", {}).items() if k == "base_url"}
    p["details"] = {
        **served,
        "stop_reason": "exited",
        "ready_lines": {"stderr.log": 1},
        "exited_at": exited_at,
        **details,
    }
    launch["artifacts"] = [{"name": "stderr.log", "text": log}]


def _cut_structured(es: list[dict[str, Any]], **payload: Any) -> None:
    p = entry(es, "structured")["payload"]
    p.update(ok=False, text=None, http_status=None, error="ConnectError: [Errno 111] Connection refused")
    p.update(payload)
    # the campaign's run stops at the cut probe: nothing later of the attempt (f4)
    for name in (
        "sequential",
        "semantic",
        "semantic-review",
        "benchmark",
        "benchmark-review",
        "benchmark-acceptance",
    ):
        es.remove(entry(es, name))


def _cut_benchmark(es: list[dict[str, Any]], **counts: Any) -> None:
    p = entry(es, "benchmark")["payload"]
    p["status"] = "failed"
    p["reason"] = "no aggregate result: engine fault at c1 repetition 0 request 81"
    p["bounds"].update(
        outcome="fault",
        aggregate=False,
        valid=False,
        fault_kind="unanswered",
        fault_at="2026-09-10T10:29:59.900000Z",
    )
    p["figures"] = {}
    p["counts"] = {k: v for k, v in p["counts"].items() if not k.startswith("completed@c")}
    p["counts"].update(completed=81, issued=82, errors=1, cut=0, unanswered=1, **{"completed@c1": 81})
    p["counts"].update(counts)
    # its per-request record, as the harness stores it (fix 95: a claim of unanswered requests is read
    # back from it, never excused on the payload alone): 81 answered at c1, the 82nd cut with no answer
    entry(es, "benchmark")["artifacts"] = [
        {"name": "benchmark-requests.jsonl", "text": BENCHMARK_RECORD},
    ]
    for name in ("benchmark-review", "benchmark-acceptance"):
        es.remove(entry(es, name))


def test_probe_cut_by_an_outside_sigterm_is_not_a_runtime_fault(tmp_path: Path) -> None:
    es = qualified_entries()
    _stopped(es)
    _cut_structured(es)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert gates(v)["runtime-stability"] == "passed"
    assert gates(v)["structured-output"] == "missing"
    assert rejected(v)["structured"] == RULE


def test_benchmark_cut_by_an_outside_sigterm_is_not_a_runtime_fault(tmp_path: Path) -> None:
    es = qualified_entries()
    _stopped(es, exited_at=BENCHMARK_EXITED_AT)
    _cut_benchmark(es)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert gates(v)["runtime-stability"] == "passed"
    assert gates(v)["benchmark"] == "missing"
    assert rejected(v)["benchmark"] == RULE


def test_sigkill_cut_still_counts_against_the_engine(tmp_path: Path) -> None:
    """The OOM killer's SIGKILL (class resource) is no stop class: the cut probe is the engine's failure."""
    es = qualified_entries()
    _stopped(es, signal=9, signature="killed-sigkill")
    _cut_structured(es)
    assert verdict_of(tmp_path, es)["verdict"] == RUNTIME


def test_the_collectors_own_stop_excuses_nothing(tmp_path: Path) -> None:
    """A launch whose end is the collector's stop (stop reason "finished"): no stop from outside."""
    es = qualified_entries()
    _stopped(es)
    entry(es, "launch")["payload"]["details"]["stop_reason"] = "finished"
    entry(es, "launch")["payload"]["failure_signature"] = "request-failed"
    _cut_structured(es)
    assert verdict_of(tmp_path, es)["verdict"] == RUNTIME


@pytest.mark.parametrize("status", [500, 503])
def test_a_failure_with_an_answer_before_the_stop_still_counts(tmp_path: Path, status: int) -> None:
    """An HTTP 5xx is an answer: the engine failed the request before it was stopped."""
    es = qualified_entries()
    _stopped(es)
    _cut_structured(es, http_status=status, error="EngineDeadError")
    assert verdict_of(tmp_path, es)["verdict"] == RUNTIME


def test_a_no_answer_the_engine_answered_after_still_counts(tmp_path: Path) -> None:
    """A probe that got no answer, then the engine answered the next one: the failure came before the
    stop (the engine still served), so it is the engine's whatever ended the run later."""
    es = qualified_entries()
    _stopped(es)
    p = entry(es, "completion")["payload"]
    p.update(ok=False, text=None, http_status=None, error="ReadTimeout")
    assert verdict_of(tmp_path, es)["verdict"] == RUNTIME


def test_a_log_fault_before_the_stop_still_counts(tmp_path: Path) -> None:
    es = qualified_entries()
    _stopped(es, failure_detail="EngineDeadError")
    entry(es, "launch")["payload"]["failure_detail"] = (
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore died"
    )
    _cut_structured(es)
    assert verdict_of(tmp_path, es)["verdict"] == RUNTIME


@pytest.mark.parametrize(
    "how",
    ["collector's stop", "lease stop", "abort signal", "signal dropped", "not ready", "lease expired"],
)
def test_a_launch_that_does_not_show_the_outside_stop_excuses_nothing(tmp_path: Path, how: str) -> None:
    """Fail closed: the excuse needs the launch's recorded end to be a signal of a stop class that the
    collector did not send — an end it attributes to its own stop, another signal, none, a launch never
    ready or one its lease cut leaves the cut probe unexcused by this rule."""
    es = qualified_entries()
    _stopped(es)
    p = entry(es, "launch")["payload"]
    if how == "collector's stop":
        p["details"]["stop_reason"] = "cancelled"
    elif how == "lease stop":
        p["details"]["stop_reason"] = "lease-end"
    elif how == "abort signal":
        p["signal"] = 6  # an abort: runtime fault
    elif how == "signal dropped":
        p["signal"] = None
        p["failure_signature"] = "request-failed"
    elif how == "not ready":
        p["ready"] = False
    elif how == "lease expired":
        p["lease_expired"] = True
    _cut_structured(es)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] != "QUALIFIED"
    assert rejected(v).get("structured") != RULE, v["rejected"]


def test_a_policy_without_stop_classes_excuses_nothing(tmp_path: Path) -> None:
    import shutil

    from tests.policy.test_fail_closed import POLICY_DIR

    pol = tmp_path / "policies"
    shutil.copytree(POLICY_DIR, pol)
    f = pol / "backend-qualification.toml"
    f.write_text(f.read_text().replace('stop_classes = ["operator-stop"]', "stop_classes = []"))
    es = qualified_entries()
    _stopped(es)
    _cut_structured(es)
    v = verdict_of(tmp_path, es, policy_dir=pol)
    assert v["verdict"] == RUNTIME


def test_a_probe_that_claims_nothing_is_judged_by_the_launch_not_by_itself(tmp_path: Path) -> None:
    """The probe's claim of a stop is not read: the launch's end decides. Its error is read only to
    narrow (fix 80): an error that does not say the connection was refused, reset or closed — empty here —
    is no evidence of a request left unanswered, so it is not excused (fail closed); and one whose error
    claims an operator stop is not excused when the launch shows none."""
    es = qualified_entries()
    _stopped(es)
    _cut_structured(es, error="")
    assert verdict_of(tmp_path, es)["verdict"] == RUNTIME
    es = qualified_entries()
    entry(es, "launch")["payload"].update(failure_signature="request-failed")
    _cut_structured(es, error="stopped by the operator (SIGTERM, operator-stop)")
    assert verdict_of(tmp_path, es)["verdict"] == RUNTIME


def test_benchmark_errors_before_the_stop_still_count(tmp_path: Path) -> None:
    """More failed requests than were in flight when the stop cut the run: the engine failed before."""
    es = qualified_entries()
    _stopped(es, exited_at=BENCHMARK_EXITED_AT)
    _cut_benchmark(es)
    entry(es, "benchmark")["payload"]["counts"]["errors"] = 40
    v = verdict_of(tmp_path, es)
    assert v["verdict"] != "QUALIFIED"
    assert v["verdict"] != "INCONCLUSIVE", v["gates"]
