"""Fix 141 (audit 95 f3): an outside SIGINT mid-benchmark was blamed on the engine.

llama-cpp-python's server (uvicorn 0.55, sse-starlette 3.7) on an operator's SIGINT ends the streams in
flight — uvicorn logs "ERROR:    ASGI callable returned without completing response." — then logs "INFO:
Shutting down" and exits 0 (uvicorn.run swallows the KeyboardInterrupt it raises again). The ERROR line
came 33 ms before the shutdown line, so it read as an error of the engine's own before its end; and the
request the stop cut was a request failure the collector saw, which ``stopped-from-outside`` refused
(``request_failed = false``). The launch was ``engine-exited-after-readiness`` (runtime-fault), the verdict
NOT QUALIFIED — RUNTIME RELIABILITY; the same stop by SIGTERM (signal 15, ``killed-sigterm``) INCONCLUSIVE.

uvicorn logs no line when the signal comes, so the log alone cannot show that the stop had begun before such
a line. Now a stop-cut line (``stop_cut_lines`` of the table) is passed over only where the collector read
the first of them within the stop: no earlier than ``stop_cut_tolerance_s`` before it read the stop marker
(``ledger.signatures.cut_within_stop``; the launch's ``details.cut_line_at`` and ``stop_marker_at``).
Without those times, with the line read earlier, or without a marker, it stays the engine's own error. A
request failure the collector saw no longer decides who ended the process (as for ``killed-sigterm``): each
failed request is judged on its own by the policy's ``stop_cut`` (no answer, within the tolerance).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ledger.errors import ConfigError
from ledger.signatures import (
    RunOutcome,
    before_stop,
    classify,
    classify_logs,
    cut_within_stop,
    load_signatures,
    outside_stop_shown,
    own_end_lines,
    pattern_signatures,
    signature_classes,
    status_signatures,
    stop_cut_line,
    stop_cut_lines,
    stop_markers,
)
from tests.policy.test_fail_closed import (
    counted_against,
    entry,
    gates,
    qualified_entries,
    rejected,
    verdict_of,
)
from tests.policy.test_fix106_outside_stops import ACCESS_200, READY_LINE, SHUTDOWN, _cut_structured, _exit_0

LOGS = Path(__file__).resolve().parent / "fixtures" / "engine_logs"
# the real run (audit 95 f3, /tmp/audit95/f3/INT): stderr and stdout as the launch stored them, and the
# lines each held at readiness (details.ready_lines)
SIGINT_STDERR = LOGS / "llamacpp_sigint_mid_benchmark.log"
SIGINT_STDOUT = LOGS / "llamacpp_sigint_mid_benchmark_stdout.log"
SIGTERM_STDERR = LOGS / "llamacpp_sigterm_mid_benchmark.log"
READY_LINES = {"stderr": 294, "stdout": 2}
# when the collector read the first stop marker (details.stop_marker_at), and when the client saw the stream
# cut (the benchmark's bounds.fault_at): the run predates details.cut_line_at, and uvicorn logged the ERROR
# line as it left that response incomplete
MARKER_AT = datetime(2026, 12, 7, 4, 1, 54, 198095, tzinfo=UTC)
CUT_AT = datetime(2026, 12, 7, 4, 1, 54, 165735, tzinfo=UTC)
TOLERANCE = 0.5  # policies/backend-qualification.toml params.stop_cut_tolerance_s

CUT = "ERROR:    ASGI callable returned without completing response."
STOP = "INFO:     Shutting down"
ANSWERED_500 = 'INFO:     127.0.0.1:1 - "POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error'
SERVED = "llama_perf_context_print:       total time =      45.34 ms /   124 tokens"


def _after_ready(path: Path, ready: int) -> str:
    return "\n".join(path.read_text(encoding="utf-8").splitlines()[ready:]) + "\n"


def _sigint_logs() -> list[str]:
    return [
        _after_ready(SIGINT_STDERR, READY_LINES["stderr"]),
        _after_ready(SIGINT_STDOUT, READY_LINES["stdout"]),
    ]


def _shown(
    logs: list[str], cut_at: object = CUT_AT, marker_at: object = MARKER_AT, tolerance: object = TOLERANCE
) -> bool:
    return outside_stop_shown(
        logs,
        stop_markers(),
        own_end_lines(),
        cut_at=cut_at,  # type: ignore[arg-type]
        marker_at=marker_at,  # type: ignore[arg-type]
        tolerance=tolerance,
    )


def _end(
    text: str, *, stop_marked: bool, signal: int | None = None, exit_code: int | None = 0
) -> tuple[str | None, str | None]:
    """The run's signature and class as the collector classifies an ended run (the policy: its end)."""
    outcome = RunOutcome(
        ready=True, exit_code=exit_code, signal=signal, request_failed=True, stop_marked=stop_marked
    )
    c = classify(text, outcome, load_signatures())
    return c.signature, c.failure_class


# --- the real run ---------------------------------------------------------------------------------------


def test_the_real_sigint_log_shows_the_cut_just_before_the_shutdown_and_no_signal_line() -> None:
    text = SIGINT_STDERR.read_text(encoding="utf-8")
    lines = text.splitlines()
    cut, stop = lines.index(CUT), lines.index(STOP)
    assert READY_LINES["stderr"] < cut < stop and stop - cut < 10
    assert "signal" not in "\n".join(lines[READY_LINES["stderr"] :]).lower()  # uvicorn says nothing of it
    assert lines.count(CUT) == 1


def test_an_outside_sigint_mid_benchmark_is_a_stop_from_outside() -> None:
    """The regression: the ERROR line read within the stop is the stop's cut; the request failure the
    collector saw does not make the end the engine's."""
    logs = _sigint_logs()
    assert _shown(logs) is True
    assert _end(logs[0], stop_marked=True) == ("stopped-from-outside", "operator-stop")


def test_the_real_sigint_log_holds_no_fault_signature() -> None:
    got = classify_logs(
        before_stop(_sigint_logs(), stop_markers()), RunOutcome(ready=True), pattern_signatures()
    )
    assert got.signature is None


def test_the_cut_line_without_the_collectors_times_stays_the_engines_error() -> None:
    """A launch that records no ``cut_line_at`` (or no ``stop_marker_at``): the log alone cannot show the
    stop had begun before the line (fail closed)."""
    logs = _sigint_logs()
    assert _shown(logs, cut_at=None) is False
    assert _shown(logs, marker_at=None) is False
    assert outside_stop_shown(logs, stop_markers(), own_end_lines()) is False  # the old reading, unchanged
    assert _end(logs[0], stop_marked=False) == ("engine-exited-after-readiness", "runtime-fault")


def test_a_cut_line_read_well_before_the_shutdown_is_the_engines_own() -> None:
    logs = _sigint_logs()
    assert _shown(logs, cut_at=MARKER_AT - timedelta(seconds=5)) is False
    assert _shown(logs, cut_at=MARKER_AT - timedelta(seconds=TOLERANCE)) is True  # the bound itself
    assert _shown(logs, cut_at=MARKER_AT - timedelta(seconds=TOLERANCE, microseconds=1)) is False


def test_the_cut_line_without_a_shutdown_line_is_the_engines_own() -> None:
    """The same ERROR line and an exit 0 with no stop marker: the engine ended by itself."""
    text = SIGINT_STDERR.read_text(encoding="utf-8")
    head = text[: text.index(STOP + "\n")]
    logs = ["\n".join(head.splitlines()[READY_LINES["stderr"] :]) + "\n"]
    assert CUT in logs[0]
    assert _shown(logs) is False
    assert _end(logs[0], stop_marked=False) == ("engine-exited-after-readiness", "runtime-fault")


def test_an_outside_sigterm_mid_benchmark_is_unchanged() -> None:
    """SIGTERM: uvicorn raises it again after its shutdown and the engine dies of it (signal 15):
    ``killed-sigterm`` whatever its log shows before the marker, times or none."""
    text = _after_ready(SIGTERM_STDERR, READY_LINES["stderr"])
    assert text.count(CUT) == 3
    for marked in (False, True):
        assert _end(text, stop_marked=marked, signal=15, exit_code=None) == (
            "killed-sigterm",
            "operator-stop",
        )


# --- the neighbours ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("logs", "shown"),
    [
        ([f"{SERVED}\n{CUT}\n{STOP}\n"], True),  # the run's shape
        ([f"{CUT}\n{CUT}\n{CUT}\n{SERVED}\n{STOP}\n"], True),  # SIGTERM's: three streams cut
        ([f"{STOP}\n{CUT}\n"], True),  # after the marker: the shutdown's
        ([f"{CUT}\n"], False),  # no marker: no stop shown
        ([f"{CUT}\nERROR: internal fault\n{STOP}\n"], False),  # another error of its own beside it
        ([f"{CUT}\nERROR:    Exception in ASGI application\n{STOP}\n"], False),
        ([f"{CUT}\nTraceback (most recent call last):\n{STOP}\n"], False),
        ([f"{CUT}\n{ANSWERED_500}\n{STOP}\n"], False),
        ([f"{STOP}\n", f"{CUT}\n"], True),  # another log: read within the stop, it is the stop's too
        ([f"{STOP}\n", "ERROR: internal fault\n"], False),  # another log's own error still decides
        ([f"{CUT} and more\n{STOP}\n"], False),  # a near miss is an error line of its own
        ([f"error:    asgi callable returned without completing response.\n{STOP}\n"], False),
        ([f"WARNING:  ASGI callable returned without completing response.\n{STOP}\n"], True),  # no error
    ],
)  # fmt: skip
def test_which_logs_read_within_the_stop_show_a_stop_from_outside(logs: list[str], shown: bool) -> None:
    assert _shown(logs) is shown


@pytest.mark.parametrize(
    "logs",
    [
        [f"{SERVED}\n{CUT}\n{STOP}\n"],
        [f"{STOP}\n", f"{CUT}\n"],  # another log: its lines cannot be ordered with the marker's
    ],
)
def test_a_cut_line_before_the_marker_or_in_another_log_not_read_within_the_stop_is_the_engines(
    logs: list[str],
) -> None:
    assert _shown(logs, cut_at=None) is False
    assert _shown(logs, cut_at=MARKER_AT - timedelta(seconds=2)) is False


def test_a_cut_line_after_the_marker_needs_no_times() -> None:
    assert _shown([f"{STOP}\n{CUT}\n"], cut_at=None, marker_at=None, tolerance=None) is True


@pytest.mark.parametrize(
    ("cut_at", "marker_at", "tolerance", "within"),
    [
        (CUT_AT, MARKER_AT, 0.5, True),
        (CUT_AT, MARKER_AT, 0, False),  # 32 ms before: not with no tolerance
        (MARKER_AT + timedelta(seconds=3), MARKER_AT, 0, True),  # read after the marker
        (CUT_AT, MARKER_AT, 1, True),  # an int
        (None, MARKER_AT, 0.5, False),
        (CUT_AT, None, 0.5, False),
        (CUT_AT, MARKER_AT, None, False),  # a policy that names none excuses nothing
        (CUT_AT, MARKER_AT, "0.5", False),  # mistyped
        (CUT_AT, MARKER_AT, True, False),
        (CUT_AT, MARKER_AT, -0.1, False),
        (CUT_AT, MARKER_AT, float("nan"), False),
        (CUT_AT, MARKER_AT, float("inf"), False),
        (CUT_AT.replace(tzinfo=None), MARKER_AT, 0.5, False),  # one time without its zone
    ],
)
def test_when_a_cut_line_was_read_within_the_stop(
    cut_at: datetime | None, marker_at: datetime | None, tolerance: object, within: bool
) -> None:
    assert cut_within_stop(cut_at, marker_at, tolerance) is within


@pytest.mark.parametrize(
    ("line", "cut"),
    [
        (CUT, True),
        (CUT + "\n", True),
        (CUT + "\r\n", True),
        ("\x1b[31mERROR\x1b[0m:    ASGI callable returned without completing response.", True),  # coloured
        ("ERROR:    Exception in ASGI application", False),
        ("INFO:     ASGI callable returned without completing response.", False),
        ("  " + CUT, False),  # not the line's start
        (
            "(APIServer pid=1) INFO 12-06 17:35:54 [logger.py:43] Received request c-1: prompt: "
            "'ERROR:    ASGI callable returned without completing response.'",
            False,
        ),  # an echoed prompt
    ],
)
def test_which_lines_are_stop_cut_lines(line: str, cut: bool) -> None:
    assert stop_cut_line(line) is cut


def test_the_request_failure_the_collector_saw_does_not_decide_who_ended_the_process() -> None:
    def end(**outcome: object) -> str | None:
        return classify("", RunOutcome(**outcome), status_signatures()).signature  # type: ignore[arg-type]

    assert end(ready=True, exit_code=0, stop_marked=True, request_failed=True) == "stopped-from-outside"
    assert end(ready=True, exit_code=0, stop_marked=True) == "stopped-from-outside"
    # the neighbours stay the engine's
    assert end(ready=True, exit_code=0, request_failed=True) == "engine-exited-after-readiness"
    assert (
        end(ready=True, exit_code=1, stop_marked=True, request_failed=True) == "engine-exited-after-readiness"
    )
    assert (
        end(ready=False, exit_code=0, stop_marked=True, request_failed=True) == "engine-died-before-readiness"
    )
    assert end(ready=True, signal=15, request_failed=True) == "killed-sigterm"
    assert end(ready=True, signal=2, request_failed=True) == "killed-sigint"
    assert signature_classes()["stopped-from-outside"] == "operator-stop"


def test_the_shipped_table_names_uvicorns_cut_line() -> None:
    lines = stop_cut_lines()
    assert any(p.search(CUT) for p in lines)
    assert not any(p.search(STOP) for p in lines)


@pytest.mark.parametrize("value", ['"^ERROR"', "[1]", '["("]', '[""]', "{a = 1}"])
def test_a_mistyped_stop_cut_lines_list_is_refused(tmp_path: Path, value: str) -> None:
    f = tmp_path / "signatures.toml"
    f.write_text(f'stop_cut_lines = {value}\n[[signature]]\nid = "x"\nclass = "startup"\n')
    with pytest.raises(ConfigError, match="stop_cut_lines"):
        stop_cut_lines(f)


def test_a_table_without_stop_cut_lines_passes_no_line_over(tmp_path: Path) -> None:
    f = tmp_path / "signatures.toml"
    f.write_text('[[signature]]\nid = "x"\nclass = "startup"\n')
    assert stop_cut_lines(f) == ()
    logs = [f"{CUT}\n{STOP}\n"]
    assert outside_stop_shown(
        logs, stop_markers(), own_end_lines(), cut=stop_cut_lines(f), cut_at=CUT_AT, marker_at=MARKER_AT,
        tolerance=TOLERANCE,
    ) is False  # fmt: skip


def test_a_cut_line_pattern_is_matched_against_the_whole_line() -> None:
    loose = (re.compile("ASGI callable"),)
    assert stop_cut_line(CUT, loose) is True
    # the shipped one is anchored: a fault line that also names the words is no cut
    assert stop_cut_line("ERROR: engine died; ASGI callable returned without completing response.") is False


# --- the policy's reading of a stored launch (tests/policy/test_fix106_outside_stops.py's shapes) ---------


def _sigint_launch(
    tmp_path: Path,
    log: str,
    error: str = "ReadError: [Errno 104] Connection reset by peer",
    **details: object,
) -> dict[str, object]:
    """A ready llama-cpp-python launch that exited 0 after an outside SIGINT, its stored stderr ``log`` after
    its first line, the collector having seen the structured probe fail (``details.failure_observed``)."""
    es = qualified_entries()
    _exit_0(es, READY_LINE + log, failure_observed=f"/v1/chat/completions: {error}", **details)
    _cut_structured(es, error)
    return verdict_of(tmp_path, es)


def test_the_policy_judges_a_sigint_that_cut_a_request_a_stop_from_outside(tmp_path: Path) -> None:
    """No stop-cut line (the stop closed the connection of a request not yet answered): the request failure
    the collector saw is the stop's, judged as the probe's own (no answer, at the stop): INCONCLUSIVE."""
    v = _sigint_launch(tmp_path, ACCESS_200 + SHUTDOWN)
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert gates(v)["runtime-stability"] == "passed"
    assert rejected(v)["structured"] == "stopped-from-outside"


def test_the_policy_keeps_a_cut_line_the_collector_did_not_time_the_engines(tmp_path: Path) -> None:
    """The same with uvicorn's cut line before the shutdown line and no ``details.cut_line_at`` (a launch
    recorded before it was kept, or the field dropped): the engine's own error (fail closed)."""
    v = _sigint_launch(tmp_path, ACCESS_200 + CUT + "\n" + SHUTDOWN)
    assert v["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY"


def test_the_policy_still_counts_an_answer_the_engine_gave_before_an_outside_stop(tmp_path: Path) -> None:
    """An HTTP 500 the collector saw, then an outside SIGINT: the end is the stop's, the answer the
    engine's (never excused)."""
    es = qualified_entries()
    _exit_0(es, READY_LINE + ACCESS_200 + SHUTDOWN, failure_observed="/v1/chat/completions: HTTP 500")
    p = entry(es, "structured")["payload"]
    p.update(ok=False, text=None, http_status=500, error="HTTP 500")
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY", v["gates"]
    assert gates(v)["runtime-stability"] == "failed"
    assert "structured" not in rejected(v) and "structured" not in counted_against(v)


# --- fix 148 (audit 99 f1): the times are held to the log's order and the launch's own run --------------

WINDOW = (MARKER_AT - timedelta(seconds=60), MARKER_AT + timedelta(seconds=1))


def test_a_cut_line_before_the_marker_timed_after_it_is_the_engines() -> None:
    """The regression: the collector reads a log in order, so a cut line before the marker in the marker's
    log read after the marker contradicts the log (fail closed)."""
    logs = [f"{SERVED}\n{CUT}\n{STOP}\n"]
    assert _shown(logs, cut_at=MARKER_AT + timedelta(seconds=5)) is False
    assert _shown(logs, cut_at=MARKER_AT + timedelta(microseconds=1)) is False
    assert _shown(logs, cut_at=MARKER_AT) is True  # read with it: the bound itself
    assert _shown(logs, cut_at=CUT_AT) is True  # the run's shape


@pytest.mark.parametrize(
    ("logs", "shown"),
    [
        ([f"{STOP}\n{CUT}\n"], True),  # after the marker: the shutdown's, whatever the times
        ([f"{STOP}\n", f"{CUT}\n"], True),  # another log: read after the marker there, within the stop
        ([f"{STOP}\n{CUT}\n", f"{CUT}\n"], True),
        ([f"{CUT}\n{STOP}\n", f"{CUT}\n"], False),  # one before the marker in its log
        ([f"{STOP}\n", f"{CUT}\n{STOP}\n"], False),  # several logs with a marker: which came first is unknown
    ],
)
def test_which_logs_show_a_stop_with_a_cut_line_read_after_the_marker(logs: list[str], shown: bool) -> None:
    assert _shown(logs, cut_at=MARKER_AT + timedelta(seconds=0.3)) is shown


@pytest.mark.parametrize(
    ("cut_at", "marker_at", "within"),
    [
        (CUT_AT, MARKER_AT, True),
        (WINDOW[0], WINDOW[0], True),  # the window's ends belong to it
        (WINDOW[1], WINDOW[1], True),
        (WINDOW[0] - timedelta(microseconds=1), MARKER_AT, False),  # before readiness
        (CUT_AT, WINDOW[1] + timedelta(microseconds=1), False),  # after the launch's end
        (MARKER_AT + timedelta(days=365), MARKER_AT, False),  # a year after the marker
        (CUT_AT - timedelta(hours=1), MARKER_AT - timedelta(hours=1), False),  # both before the launch
        (CUT_AT + timedelta(days=365), MARKER_AT + timedelta(days=365), False),  # both after it
        (CUT_AT.replace(tzinfo=None), MARKER_AT.replace(tzinfo=None), False),  # zoneless against the window
    ],
)
def test_a_cut_line_is_read_within_the_stop_only_within_the_launchs_run(
    cut_at: datetime, marker_at: datetime, within: bool
) -> None:
    assert cut_within_stop(cut_at, marker_at, TOLERANCE, WINDOW) is within
    logs = [f"{SERVED}\n{CUT}\n{STOP}\n"]
    assert _shown_within(logs, cut_at, marker_at) is within


def test_without_a_window_the_callers_own_times_are_compared_alone() -> None:
    """The collector's reading (times it measured itself): no window, the gap alone decides."""
    assert cut_within_stop(CUT_AT - timedelta(days=365), MARKER_AT - timedelta(days=365), TOLERANCE) is True
    assert cut_within_stop(MARKER_AT + timedelta(seconds=3), MARKER_AT, TOLERANCE) is True


def _shown_within(logs: list[str], cut_at: datetime, marker_at: datetime) -> bool:
    return outside_stop_shown(
        logs,
        stop_markers(),
        own_end_lines(),
        cut_at=cut_at,
        marker_at=marker_at,
        tolerance=TOLERANCE,
        window=WINDOW,
    )
