"""fix106: the policy side of two stops from outside the collector records (commit e277bea), derived from
the log — what the launch stored — never from the entry's claim.

* An exit 0 after the engine's own shutdown line with nothing of its own before it (llama-cpp-python's
  uvicorn on SIGINT): the policy reads ``RunOutcome.stop_marked`` from the stored logs with the collector's
  one reading (``ledger.signatures.outside_stop_shown``), so the launch ends ``stopped-from-outside``
  (operator-stop) and a probe the stop cut is INCONCLUSIVE, not NOT QUALIFIED — RUNTIME RELIABILITY. A
  fault, a 5xx answer or uvicorn's request limit before the shutdown line is the engine's own end.
* An engine held from outside (suspended: its processes in state T/t when the collector stopped it,
  ``suspended-from-outside`` in its failure_detail, read by the policy itself): its probes that timed out
  while held are the hold's (INCONCLUSIVE, run it again), never credited; its lease running out is no hang.

And the masking of the text the collector handed the engine (fix 103): a model path that quotes fault
words is the operator's, in the policy's reading of the stored logs too.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from ledger.errors import PolicyError
from tests.policy.test_fail_closed import (
    POLICY_DIR,
    entry,
    gates,
    qualified_entries,
    rejected,
    verdict_of,
)

RUNTIME = "NOT QUALIFIED — RUNTIME RELIABILITY"
RULE = "stopped-from-outside"

READY_LINE = "INFO:     Uvicorn running on http://127.0.0.1:8000 (Press CTRL+C to quit)\n"
ACCESS_200 = 'INFO:     127.0.0.1:40000 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
# uvicorn's shutdown on SIGINT, as llama-cpp-python's server logs it before it exits 0
SHUTDOWN = (
    "INFO:     Shutting down\n"
    "INFO:     Waiting for application shutdown.\n"
    "INFO:     Application shutdown complete.\n"
    "INFO:     Finished server process [4242]\n"
)
# when the collector saw the engine's process end: just before the structured probe (10:01:20) failed
EXITED_AT = "2026-09-10T10:01:19.900000Z"


def _exit_0(
    es: list[dict[str, Any]],
    log: str = READY_LINE + ACCESS_200 + SHUTDOWN,
    *,
    exit_code: Any = 0,
    ready_lines: Any = None,
    **details: Any,
) -> None:
    """The ready launch exited on its own (stop reason "exited") with ``exit_code``, its stored stderr
    ``log`` (the first line logged before readiness)."""
    launch = entry(es, "launch")
    p = launch["payload"]
    p.update(signal=None, exit_code=exit_code, failure_signature="stopped-from-outside")
    p["details"] = {
        # where it served stays recorded (details.base_url): its probes and harness results asked it (fix 159)
        "base_url": p["details"]["base_url"],
        "stop_reason": "exited",
        "ready_lines": {"stderr.log": 1} if ready_lines is None else ready_lines,
        "exited_at": EXITED_AT,
        **details,
    }
    launch["artifacts"] = [{"name": "stderr.log", "text": log}]


def _cut_structured(
    es: list[dict[str, Any]], error: str = "ConnectError: [Errno 111] Connection refused"
) -> None:
    p = entry(es, "structured")["payload"]
    p.update(ok=False, text=None, http_status=None, error=error)
    # the campaign's run stops at the cut probe: nothing later of the attempt
    for name in (
        "sequential",
        "semantic",
        "semantic-review",
        "benchmark",
        "benchmark-review",
        "benchmark-acceptance",
    ):
        es.remove(entry(es, name))


def _policy(tmp_path: Path, old: str, new: str) -> Path:
    pol = tmp_path / "policies"
    shutil.copytree(POLICY_DIR, pol)
    f = pol / "backend-qualification.toml"
    text = f.read_text()
    assert old in text
    f.write_text(text.replace(old, new))
    return pol


# -- 1. an exit 0 after the engine's own shutdown line --------------------------------------------------


def test_sigint_to_llama_cpp_python_exit_0_after_its_shutdown_line_is_a_stop_from_outside(
    tmp_path: Path,
) -> None:
    es = qualified_entries()
    _exit_0(es)
    _cut_structured(es)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert gates(v)["runtime-stability"] == "passed"
    assert gates(v)["structured-output"] == "missing"
    assert rejected(v)["structured"] == RULE
    why = next(r["detail"] for r in v["rejected"] if r["rule"] == RULE)
    assert "ended by exit 0 after its shutdown line (stopped-from-outside, class operator-stop" in why


def test_the_stop_is_read_from_the_stored_log_not_from_the_entrys_claim(tmp_path: Path) -> None:
    """The launch claims stopped-from-outside; its stored log shows no shutdown line: the engine's end."""
    es = qualified_entries()
    _exit_0(es, READY_LINE + ACCESS_200)
    _cut_structured(es)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == RUNTIME
    assert rejected(v).get("structured") != RULE


@pytest.mark.parametrize(
    "before",
    [
        # an error line of the engine's own: uvicorn shutting itself down after an internal fault
        "ERROR:    Exception in ASGI application\n",
        # a request the engine answered 5xx (own_end_lines)
        'INFO:     127.0.0.1:40002 - "GET /health HTTP/1.1" 503 Service Unavailable\n',
        'INFO:     127.0.0.1:40002 - "POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error\n',
        # uvicorn's --limit-max-requests: the server ends itself
        "WARNING:  Maximum request limit of 5 exceeded. Terminating process.\n",
        # a Python traceback
        'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n',
    ],
)
def test_a_cause_of_its_own_before_the_shutdown_line_is_the_engines_end(tmp_path: Path, before: str) -> None:
    es = qualified_entries()
    _exit_0(es, READY_LINE + ACCESS_200 + before + SHUTDOWN)
    _cut_structured(es)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == RUNTIME
    assert rejected(v).get("structured") != RULE


def test_a_warning_before_the_shutdown_line_is_no_cause_of_its_own(tmp_path: Path) -> None:
    es = qualified_entries()
    _exit_0(es, READY_LINE + "WARNING:  Invalid HTTP request received.\n" + SHUTDOWN)
    _cut_structured(es)
    assert verdict_of(tmp_path, es)["verdict"] == "INCONCLUSIVE"


def test_the_shutdown_line_only_before_readiness_is_no_outside_stop(tmp_path: Path) -> None:
    """The marker lies in the lines logged before readiness (details.ready_lines past it)."""
    es = qualified_entries()
    _exit_0(es, SHUTDOWN + READY_LINE + ACCESS_200, ready_lines={"stderr.log": 5})
    _cut_structured(es)
    assert verdict_of(tmp_path, es)["verdict"] == RUNTIME


@pytest.mark.parametrize("ready_lines", [{}, {"stderr.log": "1"}, {"stderr.log": -1}, {"stdout.log": 1}])
def test_a_log_without_its_readiness_count_shows_no_outside_stop(tmp_path: Path, ready_lines: Any) -> None:
    """Fail closed: where readiness lay in the log cannot be told, a shutdown line is no stop after it."""
    es = qualified_entries()
    _exit_0(es, ready_lines=ready_lines)
    _cut_structured(es)
    assert verdict_of(tmp_path, es)["verdict"] == RUNTIME


def test_a_second_log_showing_a_fault_anywhere_is_the_engines_end(tmp_path: Path) -> None:
    """Lines of two logs cannot be ordered: an error line in the other log counts wherever it lies."""
    es = qualified_entries()
    _exit_0(es)
    launch = entry(es, "launch")
    launch["payload"]["details"]["ready_lines"]["stdout.log"] = 0
    launch["artifacts"].append({"name": "stdout.log", "text": "RuntimeError: the sampler failed\n"})
    _cut_structured(es)
    assert verdict_of(tmp_path, es)["verdict"] == RUNTIME


def test_the_shutdown_line_after_the_collectors_own_stop_excuses_nothing(tmp_path: Path) -> None:
    """The collector told the engine to stop (stop reason finished, stop_lines before the marker): the
    shutdown line is the collector's stop, no stop from outside — the cut probe is not excused."""
    es = qualified_entries()
    _exit_0(es, stop_lines={"stderr.log": 2})
    p = entry(es, "launch")["payload"]
    p["details"]["stop_reason"] = "finished"
    p["failure_signature"] = "request-failed"
    _cut_structured(es)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == RUNTIME
    assert rejected(v).get("structured") != RULE


@pytest.mark.parametrize("code", [1, 3, None])
def test_another_exit_status_with_the_shutdown_line_is_the_engines_end(tmp_path: Path, code: Any) -> None:
    es = qualified_entries()
    _exit_0(es, exit_code=code)
    if code is None:
        entry(es, "launch")["payload"]["signal"] = None
    _cut_structured(es)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] != "QUALIFIED"
    assert rejected(v).get("structured") != RULE


def test_the_marker_inside_an_echoed_request_is_no_shutdown(tmp_path: Path) -> None:
    """A prompt that quotes the shutdown line (vLLM's request logger echoes it) is no line of the engine's."""
    es = qualified_entries()
    echoed = (
        "INFO 09-10 10:01:10 [logger.py:43] Received request chatcmpl-1: prompt: '<|user|>\n"
        "INFO:     Shutting down\n"
    )
    _exit_0(es, READY_LINE + echoed.replace("<|user|>\n", "<|user|>\\n"))
    _cut_structured(es)
    assert verdict_of(tmp_path, es)["verdict"] == RUNTIME


def test_a_policy_without_stop_classes_excuses_no_exit_0(tmp_path: Path) -> None:
    pol = _policy(tmp_path, 'stop_classes = ["operator-stop"]', "stop_classes = []")
    es = qualified_entries()
    _exit_0(es)
    _cut_structured(es)
    assert verdict_of(tmp_path, es, policy_dir=pol)["verdict"] == RUNTIME


def test_a_log_not_stored_shows_no_outside_stop(tmp_path: Path) -> None:
    es = qualified_entries()
    _exit_0(es)
    entry(es, "launch").pop("artifacts")
    _cut_structured(es)
    assert verdict_of(tmp_path, es)["verdict"] == RUNTIME


# -- 2. an engine held from outside (suspended) ---------------------------------------------------------

SUSPENDED = (
    "ledger-collector: the engine was suspended from outside (stopped, process state T/t) when the "
    "collector stopped it: pid 4242 (python -m llama_cpp.server --model /models/m)"
)


def _held(es: list[dict[str, Any]], *, detail: str = SUSPENDED, log: str = READY_LINE + ACCESS_200) -> None:
    """The ready launch was found suspended when its lease ran out: the collector's SIGTERM could not
    reach it, its stop escalated to SIGKILL (as the audit 83 f3 reproducer records it)."""
    launch = entry(es, "launch")
    p = launch["payload"]
    p.update(
        signal=9,
        exit_code=None,
        lease_expired=True,
        failure_signature="suspended-from-outside",
        failure_detail=detail,
    )
    n = log.count("\n")
    # where it served (details.base_url) stays: the harness results measured it (fix 153)
    served = {k: v for k, v in p.get("details", {}).items() if k == "base_url"}
    p["details"] = {
        **served,
        "stop_reason": "lease-expired",
        "ready_lines": {"stderr.log": 1},
        "stop_lines": {"stderr.log": n},
        "stop_drained": True,
        "stop_escalated_to_sigkill": True,
        "exited_at": "2026-09-10T10:03:00Z",
        "suspended_from_outside": detail,
    }
    launch["artifacts"] = [{"name": "stderr.log", "text": log}]


def _timed_out(es: list[dict[str, Any]], name: str = "structured", error: str = "ReadTimeout") -> None:
    _cut_structured(es, error=error)
    if name != "structured":
        entry(es, name)["payload"].update(ok=False, text=None, http_status=None, error=error)


@pytest.mark.parametrize("error", ["ReadTimeout", "ReadTimeout: timed out", "ReadError", "ConnectTimeout"])
def test_a_probe_that_timed_out_while_the_engine_was_held_is_inconclusive(tmp_path: Path, error: str) -> None:
    es = qualified_entries()
    _held(es)
    _timed_out(es, error=error)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert gates(v)["runtime-stability"] == "passed", v["gates"]
    assert rejected(v)["structured"] == RULE
    why = next(r["detail"] for r in v["rejected"] if r["rule"] == RULE)
    assert "was held from outside (suspended-from-outside, class operator-stop" in why


def test_a_held_engines_probe_is_never_credited(tmp_path: Path) -> None:
    """Every probe the hold cut with nothing answered after it is withheld: the identity probe too, so
    readiness cannot be judged."""
    es = qualified_entries()
    _held(es)
    _timed_out(es)
    entry(es, "models")["payload"].update(ok=False, http_status=None, error="ReadTimeout: timed out")
    entry(es, "completion")["payload"].update(ok=False, text=None, http_status=None, error="ReadTimeout")
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert gates(v)["api-readiness"] == "missing"
    assert {n: rejected(v)[n] for n in ("models", "completion", "structured")} == dict.fromkeys(
        ("models", "completion", "structured"), RULE
    )


def test_the_hold_is_read_from_the_failure_detail_not_the_claimed_signature(tmp_path: Path) -> None:
    """The launch claims suspended-from-outside but its failure text says only that the lease ran out:
    a hang, the engine's."""
    es = qualified_entries()
    _held(es, detail="lease expired: the engine did not finish within 120 s")
    _timed_out(es)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == RUNTIME
    assert rejected(v).get("structured") != RULE


@pytest.mark.parametrize(
    "detail",
    [
        SUSPENDED.replace("suspended from outside", "suspended from inside"),
        SUSPENDED.replace("ledger-collector: ", ""),
        "  " + SUSPENDED,
    ],
)
def test_a_reworded_hold_line_is_no_hold(tmp_path: Path, detail: str) -> None:
    es = qualified_entries()
    _held(es, detail=detail)
    _timed_out(es)
    assert verdict_of(tmp_path, es)["verdict"] == RUNTIME


def test_a_fault_the_held_engine_logged_still_decides(tmp_path: Path) -> None:
    es = qualified_entries()
    _held(es, log=READY_LINE + "RuntimeError: CUDA error: an illegal memory access was encountered\n")
    _timed_out(es)
    assert verdict_of(tmp_path, es)["verdict"] == RUNTIME


def test_a_traceback_after_readiness_of_a_held_engine_excuses_nothing(tmp_path: Path) -> None:
    es = qualified_entries()
    _held(es, log=READY_LINE + 'Traceback (most recent call last):\n  File "x.py", line 1\n')
    _timed_out(es)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] != "QUALIFIED"
    assert rejected(v).get("structured") != RULE


@pytest.mark.parametrize("status", [500, 503])
def test_an_answer_from_a_held_engine_is_still_its_own(tmp_path: Path, status: int) -> None:
    es = qualified_entries()
    _held(es)
    _cut_structured(es)
    entry(es, "structured")["payload"].update(http_status=status, error="EngineDeadError")
    assert verdict_of(tmp_path, es)["verdict"] == RUNTIME


def test_a_timeout_the_engine_answered_after_is_its_own(tmp_path: Path) -> None:
    """The engine answered the probe after the timeout: it was not held then (or was let go)."""
    es = qualified_entries()
    _held(es)
    entry(es, "completion")["payload"].update(ok=False, text=None, http_status=None, error="ReadTimeout")
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == RUNTIME
    assert rejected(v).get("completion") != RULE


def test_a_timeout_of_an_engine_stopped_by_sigterm_is_still_a_hang(tmp_path: Path) -> None:
    """Only a held engine's timeouts are the stop's: an outside SIGTERM excuses refused connections."""
    es = qualified_entries()
    launch = entry(es, "launch")
    launch["payload"].update(signal=15, exit_code=None, failure_signature="killed-sigterm")
    launch["payload"]["details"] = {
        "base_url": launch["payload"]["details"]["base_url"],  # where it served (fix 159)
        "stop_reason": "exited",
        "ready_lines": {"stderr.log": 1},
        "exited_at": EXITED_AT,
    }
    launch["artifacts"] = [{"name": "stderr.log", "text": READY_LINE + ACCESS_200}]
    _timed_out(es)
    assert verdict_of(tmp_path, es)["verdict"] == RUNTIME


HELD_PARAM = 'held_stop_signatures = ["suspended-from-outside"]'


def test_a_policy_that_names_no_held_stop_excuses_no_timeout(tmp_path: Path) -> None:
    pol = _policy(tmp_path, HELD_PARAM, "held_stop_signatures = []")
    es = qualified_entries()
    _held(es)
    _timed_out(es)
    assert verdict_of(tmp_path, es, policy_dir=pol)["verdict"] == RUNTIME


@pytest.mark.parametrize(
    "new",
    ['held_stop_signatures = "suspended-from-outside"', 'held_stop_signature = ["suspended-from-outside"]'],
)
def test_a_policy_that_mistypes_or_renames_the_held_stops_is_refused(tmp_path: Path, new: str) -> None:
    """Fail closed: the runtime-stability check that reads it cannot be judged (an error, never a pass)."""
    pol = _policy(tmp_path, HELD_PARAM, new)
    es = qualified_entries()
    _held(es)
    _timed_out(es)
    with pytest.raises(PolicyError):
        verdict_of(tmp_path, es, policy_dir=pol)


def test_a_held_engines_lease_is_no_hang_of_its_own(tmp_path: Path) -> None:
    """Every probe answered before the hold; the lease ran out while it was held: not a hang."""
    es = qualified_entries()
    _held(es)
    v = verdict_of(tmp_path, es)
    assert gates(v)["runtime-stability"] == "passed", v["gates"]


def test_a_lease_that_ran_out_without_a_hold_is_a_hang(tmp_path: Path) -> None:
    es = qualified_entries()
    _held(es, detail="lease expired")
    v = verdict_of(tmp_path, es)
    assert gates(v)["runtime-stability"] == "failed", v["gates"]


# -- 4. the text the collector handed the engine ---------------------------------------------------------

MODEL = "/m/release GPU Hang fixes/t.gguf"
LOAD_LINE = f"srv  load_model: failed to load {MODEL}\n"


def _gpu_words_in_the_log(es: list[dict[str, Any]], command: list[str]) -> None:
    launch = entry(es, "launch")
    launch["payload"]["command"] = command
    # where it served stays recorded (details.base_url): its probes asked it (fix 159)
    launch["payload"]["details"] = {
        "base_url": launch["payload"]["details"]["base_url"],
        "ready_lines": {"stderr.log": 2},
    }
    launch["artifacts"] = [{"name": "stderr.log", "text": LOAD_LINE + "main: server is listening\n"}]


def test_a_model_path_handed_to_the_engine_is_no_gpu_fault(tmp_path: Path) -> None:
    es = qualified_entries()
    _gpu_words_in_the_log(es, ["llama-server", "--model", MODEL, "--port", "8080"])
    v = verdict_of(tmp_path, es)
    assert gates(v)["runtime-stability"] == "passed", v["gates"]


def test_the_same_words_not_handed_to_the_engine_are_a_gpu_fault(tmp_path: Path) -> None:
    """Fail closed: the command lacks the path (or another one), so the words are the engine's."""
    for command in (["llama-server", "--port", "8080"], ["llama-server", "--model", "/m/other/t.gguf"]):
        es = qualified_entries()
        _gpu_words_in_the_log(es, command)
        v = verdict_of(tmp_path, es)
        assert gates(v)["runtime-stability"] == "failed", v["gates"]
        reason = json.dumps(v["gates"], ensure_ascii=False)
        assert "gpu-fault" in reason, reason
