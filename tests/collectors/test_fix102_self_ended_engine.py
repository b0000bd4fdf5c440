"""Issue 11, fix 102 (audit 85 f3): uvicorn prints "INFO:     Shutting down" for every end of its server —
an outside signal, its own ``should_exit`` after an internal fault, its ``limit_max_requests`` — and an
engine that failed after readiness and then shut itself down with exit 0 was recorded as
``stopped-from-outside`` (class operator-stop): its own fault excused as an operator's act. A shutdown line
shows a shutdown happened, not who asked for it: an exit 0 with a stop marker is an outside stop only where
nothing of the engine's own explains the end (``outside_stop_shown``: no error line, no traceback, no
request answered 5xx, no request limit reached after readiness and before the marker — in another log, at
all; a request the collector saw fail is judged on its own by the policy, fix 141); otherwise it stays
``engine-exited-after-readiness`` (runtime-fault). An outside SIGINT after a warning line stays an outside
stop (tests/collectors/test_fix97_stopped_from_outside.py: the plain one)."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import httpx
import pytest

from ledger.collectors.launch import EngineRun, LaunchSpec
from ledger.errors import ConfigError
from ledger.signatures import (
    RunOutcome,
    classify,
    outside_stop_shown,
    own_end_lines,
    status_signatures,
    stop_markers,
)

from .conftest import free_port

ENGINE = Path(__file__).parent / "fixtures" / "fix102-uvicorn-self-end.py"
UVICORN_STOP = "INFO:     Shutting down"


def _serving(tmp_path: Path, mode: str, *extra: str) -> EngineRun:
    port = free_port()
    spec = LaunchSpec(
        engine="generic",
        command=[sys.executable, str(ENGINE), str(port), mode, *extra],
        base_url=f"http://127.0.0.1:{port}",
        lease_seconds=60,
        grace_seconds=5,
    )
    run = EngineRun(spec, tmp_path / "logs")
    run.start()
    assert run.wait_ready().ready, run.log_text()
    return run


def _get(run: EngineRun, path: str) -> int | None:
    """A request of the engine's own traffic (not the collector's probe): None where it got no answer."""
    try:
        return httpx.get(run.spec.base_url + path, timeout=5).status_code
    except httpx.HTTPError:
        return None


def _record(run: EngineRun) -> dict[str, object]:
    assert run.wait_exit(20), run.log_text()
    run.stop("finished")
    return run.payload()


def _engines_own_end(p: dict[str, object], run: EngineRun) -> None:
    assert p["exit_code"] == 0 and p["signal"] is None  # no signal from anyone: uvicorn's own exit 0
    assert UVICORN_STOP in run.log_text()  # the shutdown line all the same
    details = p["details"]
    assert isinstance(details, dict) and details["stop_reason"] == "exited"
    assert p["failure_signature"] == "engine-exited-after-readiness", p
    assert details["failure_class"] == "runtime-fault"
    assert "stopped-from-outside" not in details["signatures_matched"]


def test_an_engine_that_shut_itself_down_after_an_internal_fault_is_not_stopped_from_outside(
    tmp_path: Path,
) -> None:
    run = _serving(tmp_path, "fault")
    assert _get(run, "/fault") == 500
    _engines_own_end(_record(run), run)


def test_an_engine_that_answered_503_and_shut_itself_down_is_not_stopped_from_outside(tmp_path: Path) -> None:
    """No error line of its own: the 5xx its access log shows explains the end (``own_end_lines``)."""
    run = _serving(tmp_path, "fault-503")
    assert _get(run, "/fault") == 503
    p = _record(run)
    assert "ERROR" not in run.log_text()
    _engines_own_end(p, run)


def test_an_engine_ended_by_its_max_requests_limit_is_not_stopped_from_outside(tmp_path: Path) -> None:
    run = _serving(tmp_path, "max-requests", "12")
    for _ in range(30):
        if _get(run, "/health") is None or not run.alive():
            break
    p = _record(run)
    assert "Maximum request limit of 12 exceeded" in run.log_text()
    _engines_own_end(p, run)


def test_an_outside_sigint_after_a_warning_line_is_still_an_outside_stop(tmp_path: Path) -> None:
    run = _serving(tmp_path, "warning")
    assert _get(run, "/warn") == 200
    assert run.proc is not None
    run.proc.send_signal(signal.SIGINT)
    p = _record(run)
    assert "WARNING:  Invalid HTTP request received." in run.log_text()
    assert p["exit_code"] == 0
    assert p["failure_signature"] == "stopped-from-outside", p
    details = p["details"]
    assert isinstance(details, dict) and details["failure_class"] == "operator-stop"


def test_an_outside_sigint_after_a_request_failure_the_collector_saw_is_still_an_outside_stop(
    tmp_path: Path,
) -> None:
    """The collector saw a request fail (``RunOutcome.request_failed``): who ended the process is read from
    the logs; the failed request is judged on its own by the policy (fix 141)."""
    run = _serving(tmp_path, "warning")
    run.failure_observed = "/health: HTTP 500"
    assert run.proc is not None
    run.proc.send_signal(signal.SIGINT)
    p = _record(run)
    assert p["exit_code"] == 0
    assert p["failure_signature"] == "stopped-from-outside", p


def test_a_self_shutdown_before_readiness_lines_are_counted_is_no_outside_stop(tmp_path: Path) -> None:
    """Before readiness nothing is read as a stop: ``outside_stop_shown`` of no logs is False."""
    run = _serving(tmp_path, "warning")
    run.ready_lines = None
    assert run._stop_marked() is False
    run.stop("finished")


# --- the reading itself (``outside_stop_shown``), one for the collector and the policy -------------------

ECHO = "(APIServer pid=1) INFO 12-06 17:35:54 [logger.py:43] Received request c-1: prompt: 'a ValueError?'"


def _shown(*logs: str) -> bool:
    return outside_stop_shown(list(logs), stop_markers(), own_end_lines())


@pytest.mark.parametrize(
    ("logs", "shown"),
    [
        ((UVICORN_STOP + "\n", ""), True),
        (("INFO:     Waiting for application shutdown.\n" + UVICORN_STOP + "\n",), True),
        (("WARNING:  Invalid HTTP request received.\n" + UVICORN_STOP + "\n",), True),  # a warning: no fault
        (('INFO:     127.0.0.1:1 - "GET /health HTTP/1.1" 404 Not Found\n' + UVICORN_STOP + "\n",), True),
        ((ECHO + "\n" + UVICORN_STOP + "\n",), True),  # the client's text, not the engine's words
        ((UVICORN_STOP + "\nERROR:    Exception in 'lifespan' protocol\n",), True),  # after it: its shutdown
        (("ERROR: internal fault\n" + UVICORN_STOP + "\n",), False),
        (("ValueError: bad state\n" + UVICORN_STOP + "\n",), False),
        (("Traceback (most recent call last):\n" + UVICORN_STOP + "\n",), False),
        (
            ("INFO:     Maximum request limit of 4 exceeded. Terminating process.\n" + UVICORN_STOP + "\n",),
            False,
        ),
        (
            (
                'INFO:     127.0.0.1:1 - "GET /health HTTP/1.1" 503 Service Unavailable\n'
                + UVICORN_STOP
                + "\n",
            ),
            False,
        ),
        (
            (
                'INFO:     127.0.0.1:1 - "POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error\n',
                UVICORN_STOP,
            ),
            False,
        ),
        (
            (UVICORN_STOP + "\n", "ERROR: internal fault\n"),
            False,
        ),  # another log: lines of two logs are not ordered
        (("ERROR: internal fault\n", UVICORN_STOP + "\n"), False),
        (("", ""), False),  # no marker
        (("ERROR: internal fault\n",), False),
    ],
)
def test_which_logs_show_a_stop_from_outside(logs: tuple[str, ...], shown: bool) -> None:
    assert _shown(*logs) is shown


def test_logs_not_read_show_no_stop_from_outside() -> None:
    assert outside_stop_shown(None, stop_markers(), own_end_lines()) is False


def test_the_signature_does_not_read_a_request_failure_the_collector_saw() -> None:
    def end(**outcome: object) -> str | None:
        return classify("", RunOutcome(**outcome), status_signatures()).signature  # type: ignore[arg-type]

    assert end(ready=True, exit_code=0, stop_marked=True) == "stopped-from-outside"
    assert end(ready=True, exit_code=0, stop_marked=True, request_failed=True) == "stopped-from-outside"
    assert end(ready=True, exit_code=0, request_failed=True) == "engine-exited-after-readiness"
    assert end(ready=True, exit_code=0) == "engine-exited-after-readiness"


@pytest.mark.parametrize("value", ['"Maximum request limit"', "[1]", '["("]', '[""]'])
def test_a_mistyped_own_end_lines_list_is_refused(tmp_path: Path, value: str) -> None:
    f = tmp_path / "signatures.toml"
    f.write_text(f'own_end_lines = {value}\n[[signature]]\nid = "x"\nclass = "startup"\n')
    with pytest.raises(ConfigError, match="own_end_lines"):
        own_end_lines(f)


def test_the_shipped_table_names_the_engines_own_ends() -> None:
    lines = own_end_lines()
    assert any(p.search("INFO:     Maximum request limit of 4 exceeded. Terminating process.") for p in lines)
    assert any(p.search('"GET /health HTTP/1.1" 502 Bad Gateway') for p in lines)
    assert not any(p.search('"GET /health HTTP/1.1" 200 OK') for p in lines)
