"""Issue 11, fix 97 (1): an outside SIGINT to llama-cpp-python's server (uvicorn) after readiness — it logs
uvicorn's shutdown ("INFO:     Shutting down") and exits 0 — was recorded as an exit 0 after readiness,
``engine-exited-after-readiness`` (runtime-fault): the engine blamed for an operator's act. A signal the
collector did not send, shown by the engine's own shutdown line (a stop marker after readiness, before any
stop of the collector's: ``RunOutcome.stop_marked``), is an outside stop: ``stopped-from-outside``, class
operator-stop, as ``killed-sigterm`` is. An exit 0 with no shutdown line stays the engine's own end."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pytest

from ledger.collectors.launch import EngineRun, LaunchSpec
from ledger.collectors.readiness import ReadyState
from ledger.errors import ConfigError
from ledger.signatures import (
    RunOutcome,
    classify,
    load_signatures,
    shows_stop_marker,
    signature_classes,
    status_signatures,
    stop_markers,
)

from .conftest import free_port

ENGINE = Path(__file__).parent / "fixtures" / "fix97-uvicorn-engine.py"
UVICORN_STOP = "INFO:     Shutting down"


def _serving(tmp_path: Path, mode: str = "uvicorn") -> EngineRun:
    port = free_port()
    spec = LaunchSpec(
        engine="generic",
        command=[sys.executable, str(ENGINE), str(port), mode],
        base_url=f"http://127.0.0.1:{port}",
        lease_seconds=60,
        grace_seconds=5,
    )
    run = EngineRun(spec, tmp_path / "logs")
    run.start()
    deadline = time.monotonic() + 30
    shown = "Uvicorn running" if mode != "vllm-words" else "serving"
    while shown not in run.log_text():
        assert time.monotonic() < deadline and run.alive(), run.log_text()
        time.sleep(0.05)
    if mode == "vllm-words":  # the stand-in serves nothing: readiness as the collector records it
        run.ready_state = ReadyState(True, note="test")
        run.ready_lines = {t.path.name: t.complete() for t in run._tees}
    else:
        assert run.wait_ready().ready
    return run


def _ended(run: EngineRun, sig: signal.Signals | None) -> dict[str, object]:
    """Send ``sig`` from outside (not through the collector), wait for the engine's own end, then the
    collector's stop (which finds it ended) and its record."""
    assert run.proc is not None
    if sig is not None:
        run.proc.send_signal(sig)
    assert run.wait_exit(20), run.log_text()
    run.stop("finished")
    return run.payload()


def test_outside_sigint_to_uvicorn_after_readiness_is_an_outside_stop_not_the_engines_exit(
    tmp_path: Path,
) -> None:
    run = _serving(tmp_path)
    p = _ended(run, signal.SIGINT)
    assert p["exit_code"] == 0 and p["signal"] is None  # uvicorn handles SIGINT and exits 0
    assert UVICORN_STOP in run.log_text()
    details = p["details"]
    assert isinstance(details, dict)
    assert details["stop_reason"] == "exited"  # the engine's own end: the collector sent nothing
    assert p["failure_signature"] == "stopped-from-outside", p
    assert details["failure_class"] == "operator-stop"


def test_outside_sigterm_to_uvicorn_stays_killed_sigterm(tmp_path: Path) -> None:
    run = _serving(tmp_path)
    p = _ended(run, signal.SIGTERM)
    assert p["signal"] == 15 and p["exit_code"] is None
    assert p["failure_signature"] == "killed-sigterm"
    details = p["details"]
    assert isinstance(details, dict) and details["failure_class"] == "operator-stop"


def test_exit_0_after_readiness_without_a_shutdown_line_stays_the_engines_own_end(tmp_path: Path) -> None:
    """No line shows a stop from outside: the engine ended its run itself — never credited."""
    run = _serving(tmp_path, "silent-exit")
    p = _ended(run, None)
    assert p["exit_code"] == 0
    assert UVICORN_STOP not in run.log_text()
    assert p["failure_signature"] == "engine-exited-after-readiness"
    details = p["details"]
    assert isinstance(details, dict) and details["failure_class"] == "runtime-fault"


def test_vllms_shutdown_words_and_exit_0_are_an_outside_stop(tmp_path: Path) -> None:
    run = _serving(tmp_path, "vllm-words")
    p = _ended(run, signal.SIGINT)
    assert p["exit_code"] == 0
    assert p["failure_signature"] == "stopped-from-outside", run.log_text()


def test_the_collectors_own_stop_of_uvicorn_is_no_failure(tmp_path: Path) -> None:
    run = _serving(tmp_path)
    run.stop("finished")
    p = run.payload()
    details = p["details"]
    assert isinstance(details, dict) and details["stop_reason"] == "finished"
    assert p["failure_signature"] is None
    assert run._marked_after_ready() is False  # its shutdown line followed the collector's own stop


# --- the signature, judged by the table alone (the policy engine classifies a recorded end so) -----------


def _end(**outcome: object) -> str | None:
    return classify("", RunOutcome(**outcome), status_signatures()).signature  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("outcome", "expected"),
    [
        ({"ready": True, "exit_code": 0, "stop_marked": True}, "stopped-from-outside"),
        ({"ready": True, "exit_code": 0}, "engine-exited-after-readiness"),  # no shutdown line
        ({"ready": True, "exit_code": 1, "stop_marked": True}, "engine-exited-after-readiness"),  # failed
        ({"ready": False, "exit_code": 0, "stop_marked": True}, "engine-died-before-readiness"),
        ({"ready": True, "signal": 2}, "killed-sigint"),
        ({"ready": True, "exit_code": 130}, "killed-130"),
        ({"ready": True, "signal": 15}, "killed-sigterm"),
        ({"ready": True, "signal": 9, "stop_marked": True}, "killed-sigkill"),  # a SIGKILL stays resource
        ({"ready": True, "exit_code": 0, "stop_marked": True, "lease_expired": True}, "lease-expired"),
    ],
)
def test_the_end_of_a_run_by_its_outcome(outcome: dict[str, object], expected: str) -> None:
    assert _end(**outcome) == expected


def test_outside_stop_signatures_are_of_the_operator_stop_class() -> None:
    classes = signature_classes()
    for sid in ("stopped-from-outside", "killed-sigint", "killed-130"):
        assert classes[sid] == "operator-stop"


def test_a_fault_logged_before_the_shutdown_still_decides_the_run() -> None:
    text = "ERROR:    Exception in ASGI application\nINFO:     Shutting down\n"
    c = classify(text, RunOutcome(ready=True, exit_code=0, stop_marked=True), load_signatures())
    assert c.signature == "server-unhandled-exception" and c.failure_class == "runtime-fault"


@pytest.mark.parametrize(
    ("text", "marked"),
    [
        (UVICORN_STOP + "\n", True),
        ("INFO:     Waiting for application shutdown.\n" + UVICORN_STOP + "\n", True),
        ("INFO:     Shutting down soon\n", False),  # a near miss
        ("info:     shutting down\n", False),
        ("INFO:     Application startup complete.\n", False),
        ("", False),
    ],
)
def test_which_lines_show_a_stop(text: str, marked: bool) -> None:
    assert shows_stop_marker(text, stop_markers()) is marked


@pytest.mark.parametrize("value", ['"true"', "1"])
def test_a_mistyped_stop_marked_condition_is_refused(tmp_path: Path, value: str) -> None:
    f = tmp_path / "signatures.toml"
    f.write_text(
        f'[[signature]]\nid = "x"\nexit_codes = [0]\nstop_marked = {value}\nclass = "operator-stop"\n'
    )
    with pytest.raises(ConfigError, match="stop_marked"):
        load_signatures(f)
