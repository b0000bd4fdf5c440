"""Audit 12: real engine processes (tests/engines/fault_engine.py) against the launcher, the lease keeper, the
probes and the policy.

F0 another server on the engine's port was qualified in its place; F1 GPU-fault wordings the table did not
know; F2 a helper that left the process group outlived the stop; F3 a start-up warning that mentions "CUDA
out of memory" failed a healthy run; F4 an engine without stop markers that logs EngineDeadError while it
stops on the collector's SIGTERM failed a healthy run; F5 an HTTP 200 answer that is no completion was
only a control failure, its body thrown away.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ledger.collectors import lease_keeper
from ledger.collectors.launch import EngineRun, LaunchSpec
from ledger.collectors.probe import probe_completion, probe_sequential, probe_structured
from ledger.errors import PortInUseError
from ledger.signatures import RunOutcome, classify, load_signatures
from tests.policy.test_fail_closed import _with_log, entry, gates, qualified_entries, verdict_of

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="process groups, /proc: Linux only")

ENGINE = Path(__file__).resolve().parents[1] / "engines" / "fault_engine.py"
QUALIFIED = "QUALIFIED"
RUNTIME = "NOT QUALIFIED — RUNTIME RELIABILITY"
OOM_WARNING = (
    "(APIServer pid=1) WARNING 12-05 10:00:00 [arg_utils.py:1] If you see CUDA out of memory errors, "
    "lower --gpu-memory-utilization (now 0.90)."
)
W = "(VllmWorker rank=0 pid=77) ERROR 12-05 10:00:00 [multiproc_executor.py:470]"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def engine_run(tmp_path: Path, *args: str, port: int | None = None, grace: float = 2.0) -> EngineRun:
    port = port or free_port()
    cmd = [sys.executable, str(ENGINE), "--port", str(port), "--load-seconds", "0.2", *args]
    spec = LaunchSpec(
        engine="vllm",
        command=cmd,
        base_url=f"http://127.0.0.1:{port}",
        lease_seconds=60,
        grace_seconds=grace,
        poll_interval=0.1,
    )
    return EngineRun(spec, tmp_path / "logs", signatures=load_signatures())


def ready_then_stop(run: EngineRun, settle: float = 0.0) -> dict[str, Any]:
    run.start()
    try:
        state = run.wait_ready()
        assert state.ready, state
        time.sleep(settle)
    finally:
        run.stop("finished")
    return run.payload()


def launch_from(es: list[dict[str, Any]], run: EngineRun, payload: dict[str, Any]) -> None:
    """Put a real run's logs and its recorded details on the shared fixture's launch."""
    launch = entry(es, "launch")
    launch["payload"]["details"] = {
        **launch["payload"].get("details", {}),
        **{
            k: v
            for k, v in payload["details"].items()
            if k in ("stop_reason", "stop_lines", "stop_bytes", "stop_drained", "ready_lines", "survivors")
        },
    }
    launch["payload"]["exit_code"] = payload["exit_code"]
    launch["payload"]["signal"] = payload["signal"]
    launch["artifacts"] = [
        {"name": "stdout.log", "text": run.stdout_path.read_text()},
        {"name": "stderr.log", "text": run.stderr_path.read_text()},
    ]


def runtime_reason(v: dict[str, Any]) -> str:
    return str(next(g for g in v["gates"] if g["name"] == "runtime-stability")["reason"])


# --- F0: the port ---------------------------------------------------------------------------------------


def test_a_port_another_server_already_listens_on_is_refused_before_the_engine_starts(tmp_path: Path) -> None:
    """Regression F0: `port = 18431` held by a healthy server; the launched engine died unseen while
    readiness, every gate and the verdict judged the other server. Now nothing is started."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        with pytest.raises(PortInUseError) as err:
            engine_run(tmp_path, "--mode", "ok", port=port)
    assert f"port {port}" in err.value.message
    assert f"pid {os.getpid()}" in err.value.message
    assert not (tmp_path / "logs" / "stdout.log").exists()


def test_another_process_answering_readiness_on_the_engines_port_fails_readiness(tmp_path: Path) -> None:
    """Regression F0 (the free_port race): the port was free when the engine started, but the server that
    answers readiness there is not the engine's. The launch is not ready; the signature names the pid."""
    port = free_port()
    spec = LaunchSpec(
        engine="vllm",
        command=[sys.executable, "-c", "import time; print('loading weights', flush=True); time.sleep(60)"],
        base_url=f"http://127.0.0.1:{port}",
        lease_seconds=30,
        grace_seconds=1,
        poll_interval=0.1,
    )
    run = EngineRun(spec, tmp_path / "logs", signatures=load_signatures())
    run.start()
    other = subprocess.Popen(
        [sys.executable, str(ENGINE), "--port", str(port), "--load-seconds", "0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        state = run.wait_ready()
        run.stop("finished")
    finally:
        other.kill()
        other.wait()
    p = run.payload()
    assert not state.ready
    assert p["ready"] is False
    assert p["failure_signature"] == "port-served-by-another-process"
    assert f"pid {other.pid}" in p["failure_detail"]
    assert p["details"]["failure_class"] == "startup"


def test_healthy_engine_owns_its_port_and_records_no_signature(tmp_path: Path) -> None:
    """Neighbour: the engine's own listener passes the ownership check; nothing failed, nothing survived."""
    run = engine_run(tmp_path, "--mode", "ok")
    p = ready_then_stop(run)
    assert p["ready"] is True
    assert p["failure_signature"] is None
    assert "port_conflict" not in p["details"]
    assert p["details"]["survivors"] == []
    assert set(p["details"]["ready_lines"]) == {"stdout.log", "stderr.log"}
    assert p["details"]["stop_drained"] is True


# --- F1: GPU-fault wordings ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "ready", "signature", "cls"),
    [
        (
            f"{W} RuntimeError: CUDA error: uncorrectable ECC error encountered",
            True,
            "gpu-ecc-error",
            "gpu-fault",
        ),
        (
            f"{W} RuntimeError: CUDA error: uncorrectable ECC error encountered",
            False,
            "gpu-ecc-error",
            "gpu-fault",
        ),
        (
            f"{W} RuntimeError: CUDA error: an illegal instruction was encountered",
            True,
            "gpu-kernel-fault",
            "runtime-fault",
        ),
        (
            f"{W} RuntimeError: CUDA error: an illegal instruction was encountered",
            False,
            "gpu-kernel-fault-at-startup",
            "startup",
        ),
        (
            ":0:rocdevice.cpp :2614: 1234567890 us: [pid:77 tid:0x7f] Callback: Queue 0x7f00 aborting "
            "with error : HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: The agent attempted to access memory "
            "beyond the largest legal address. code: 0x29",
            True,
            "gpu-kernel-fault",
            "runtime-fault",
        ),
        (
            ":0:rocdevice.cpp            :2890: 1234567890 us: [pid:77 tid:0x7f] Callback: Queue 0x7f00 "
            "aborting with error : HSA_STATUS_ERROR_EXCEPTION: An HSAIL operation resulted in a hardware "
            "exception. code: 0x1016",
            True,
            "gpu-kernel-fault",
            "runtime-fault",
        ),
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
            True,
            "cuda-oom",
            "resource",
        ),
        ("RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB", True, "cuda-oom", "resource"),
        ("ggml_cuda_init: CUDA error: out of memory", True, "cuda-oom", "resource"),
        # neighbours: the harmless mention is no OOM (a ready exit is then only its status signature)
        (OOM_WARNING, True, "engine-exited-after-readiness", "runtime-fault"),
        (OOM_WARNING, False, "engine-died-before-readiness", "startup"),
    ],
)
def test_gpu_fault_wordings_are_classified(line: str, ready: bool, signature: str, cls: str) -> None:
    c = classify(line + "\n", RunOutcome(ready=ready, exit_code=1))
    assert (c.signature, c.failure_class) == (signature, cls)


@pytest.mark.parametrize(
    "line",
    [
        f"{W} RuntimeError: CUDA error: uncorrectable ECC error encountered",
        f"{W} RuntimeError: CUDA error: an illegal instruction was encountered",
        ":0:rocdevice.cpp :2614: 1 us: [pid:77 tid:0x7f] Callback: Queue 0x7f00 aborting with error : "
        "HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: The agent attempted to access memory beyond the largest "
        "legal address. code: 0x29",
    ],
    ids=["ecc", "illegal-instruction", "rocm-aperture"],
)
def test_a_worker_gpu_fault_while_the_server_keeps_answering_is_runtime_reliability(
    tmp_path: Path, line: str
) -> None:
    """Regression F1: a worker died with these lines, the API server kept answering, the policy said
    QUALIFIED. Now its stored log fails runtime-stability, naming the line."""
    run = engine_run(tmp_path, "--mode", "ok", "--worker-fault", line)
    p = ready_then_stop(run, settle=1.0)
    es = qualified_entries()
    launch_from(es, run, p)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == RUNTIME, v["gates"]
    assert "stderr.log line" in runtime_reason(v)


def test_the_same_run_without_a_worker_fault_is_qualified(tmp_path: Path) -> None:
    run = engine_run(tmp_path, "--mode", "ok")
    p = ready_then_stop(run, settle=1.0)
    es = qualified_entries()
    launch_from(es, run, p)
    assert verdict_of(tmp_path, es)["verdict"] == QUALIFIED


# --- F2: a process that left the group ------------------------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_a_helper_that_left_the_process_group_is_stopped_and_recorded(tmp_path: Path) -> None:
    """Regression F2: a setsid() helper outlived the collector's stop; nothing recorded, QUALIFIED."""
    run = engine_run(tmp_path, "--mode", "ok", "--escape-child")
    p = ready_then_stop(run)
    survivors = p["details"]["survivors"]
    assert len(survivors) == 1, survivors
    assert "fault_engine.py" in survivors[0]["cmdline"]
    assert not _alive(survivors[0]["pid"])
    assert lease_keeper.marked_processes(run.launch_id) == []
    es = qualified_entries()
    launch_from(es, run, p)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == RUNTIME
    assert "still running after its stop" in runtime_reason(v)


def test_the_lease_keeper_stops_a_marked_survivor_when_the_collector_is_gone(tmp_path: Path) -> None:
    """Regression F2, collector death: the keeper stops the group and every process carrying the mark."""
    mark = "audit12-" + os.urandom(6).hex()
    env = {**os.environ, lease_keeper.LAUNCH_MARK: mark}
    code = (
        "import os, time\nif os.fork() == 0:\n os.setsid()\n time.sleep(120)\n os._exit(0)\ntime.sleep(120)\n"
    )
    group = subprocess.Popen([sys.executable, "-c", code], env=env, start_new_session=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(lease_keeper.marked_processes(mark)) < 2:
        time.sleep(0.05)
    assert len(lease_keeper.marked_processes(mark)) == 2
    note = tmp_path / "keeper.log"
    r, w = os.pipe()
    keeper = subprocess.Popen(
        [
            sys.executable,
            "-I",
            "-S",
            lease_keeper.__file__,
            str(r),
            str(group.pid),
            repr(time.monotonic() + 60),
            "1",
            str(note),
            mark,
        ],
        pass_fds=(r,),
        start_new_session=True,
    )
    os.close(r)
    os.close(w)  # the collector is gone
    assert keeper.wait(timeout=20) == lease_keeper.EXIT_COLLECTOR_GONE
    group.wait(timeout=5)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and lease_keeper.marked_processes(mark):
        time.sleep(0.05)
    assert lease_keeper.marked_processes(mark) == []
    assert "survivor outside process group" in note.read_text()


@pytest.mark.parametrize(
    ("survivors", "verdict"),
    [([], QUALIFIED), ([{"pid": 4242, "cmdline": "helper"}], RUNTIME), ("4242", RUNTIME), (None, RUNTIME)],
    ids=["none", "one", "not-a-list", "null"],
)
def test_the_policy_judges_recorded_survivors(tmp_path: Path, survivors: Any, verdict: str) -> None:
    es = qualified_entries()
    entry(es, "launch")["payload"].setdefault("details", {})["survivors"] = survivors
    assert verdict_of(tmp_path, es)["verdict"] == verdict


# --- F3: a start-up warning that mentions an OOM --------------------------------------------------------


def test_a_start_up_warning_mentioning_cuda_oom_does_not_fail_a_healthy_run(tmp_path: Path) -> None:
    """Regression F3: vLLM's "If you see CUDA out of memory errors" warning before readiness failed a healthy
    run (RUNTIME RELIABILITY, naming no line)."""
    run = engine_run(tmp_path, "--mode", "ok", "--boot-line", OOM_WARNING)
    p = ready_then_stop(run)
    assert p["details"]["ready_lines"]["stdout.log"] >= 1
    es = qualified_entries()
    launch_from(es, run, p)
    assert verdict_of(tmp_path, es)["verdict"] == QUALIFIED


# a real OOM error line, logged before and after readiness, in a ready launch that records ready_lines = 2
_LOG = "INFO loading\n{before}INFO Application startup complete.\n{after}INFO serving\n"
_OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"


@pytest.mark.parametrize(
    ("before", "after", "details", "verdict"),
    [
        # a real OOM error before readiness (a profiling run that recovered): start-up, not the run
        (_OOM, "", {"ready_lines": {"stdout.log": 1, "stderr.log": 3}}, QUALIFIED),
        # after readiness it is the run's
        ("", _OOM, {"ready_lines": {"stdout.log": 1, "stderr.log": 2}}, RUNTIME),
        # no ready_lines (a launch recorded before them): read from the first line, fail closed
        (_OOM, "", {}, RUNTIME),
        # malformed: fail closed
        (_OOM, "", {"ready_lines": {"stderr.log": "3"}}, RUNTIME),
        (_OOM, "", {"ready_lines": "3"}, RUNTIME),
    ],
    ids=["before-ready", "after-ready", "not-recorded", "str-count", "not-a-map"],
)
def test_the_after_readiness_scan_starts_where_the_log_stood_at_readiness(
    tmp_path: Path, before: str, after: str, details: dict[str, Any], verdict: str
) -> None:
    es = qualified_entries()
    _with_log(
        es,
        _LOG.format(before=before, after=after),
        exit_code=0,
        details={"stop_reason": "finished", **details},
    )
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == verdict, v["gates"]
    if verdict == RUNTIME:
        reason = runtime_reason(v)
        assert "stderr.log line" in reason and "cuda-oom" in reason and "launch " in reason


def test_a_gpu_fault_before_readiness_still_fails_a_ready_launch(tmp_path: Path) -> None:
    """Neighbour: ready_lines narrow only the after-readiness reading; a fault class anywhere still fails."""
    es = qualified_entries()
    log = "GPU Hang\nINFO Application startup complete.\n"
    _with_log(
        es,
        log,
        exit_code=0,
        details={"stop_reason": "finished", "ready_lines": {"stdout.log": 1, "stderr.log": 1}},
    )
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == RUNTIME
    assert "stderr.log line 1" in runtime_reason(v) and "gpu-hang" in runtime_reason(v)


# --- F4: the engine's own shutdown without stop markers -------------------------------------------------


def test_engine_dead_error_logged_while_stopping_on_the_collectors_sigterm_is_not_a_fault(
    tmp_path: Path,
) -> None:
    """Regression F4: an older vLLM (no "[shutdown]" marker) logs EngineDeadError as it stops on the
    collector's SIGTERM and exits 0; the policy read past stop_lines to the end of the log and failed it."""
    run = engine_run(tmp_path, "--mode", "ok", "--shutdown-dead")
    p = ready_then_stop(run)
    assert "EngineDeadError" in run.stderr_path.read_text()
    assert p["details"]["stop_drained"] is True
    es = qualified_entries()
    launch_from(es, run, p)
    assert verdict_of(tmp_path, es)["verdict"] == QUALIFIED


def test_a_fault_logged_before_the_stop_still_counts_with_a_drained_stop(tmp_path: Path) -> None:
    """Neighbour: a worker's fault logged just before the stop is read (the pipes were drained first)."""
    run = engine_run(
        tmp_path, "--mode", "ok", "--shutdown-dead", "--worker-fault", f"{W} EngineDeadError: boom"
    )
    p = ready_then_stop(run, settle=0.6)
    es = qualified_entries()
    launch_from(es, run, p)
    assert verdict_of(tmp_path, es)["verdict"] == RUNTIME


@pytest.mark.parametrize(
    ("details", "verdict"),
    [
        (
            {
                "stop_reason": "finished",
                "stop_lines": {"stdout.log": 1, "stderr.log": 1},
                "stop_drained": True,
            },
            QUALIFIED,
        ),
        # not drained (an earlier collector): read on to the first stop marker, as before (none here)
        ({"stop_reason": "finished", "stop_lines": {"stdout.log": 1, "stderr.log": 1}}, RUNTIME),
        # the fault was in the lines before the stop
        (
            {
                "stop_reason": "finished",
                "stop_lines": {"stdout.log": 1, "stderr.log": 2},
                "stop_drained": True,
            },
            RUNTIME,
        ),
        # a claimed drain without stop_lines says nothing of where the stop was
        ({"stop_reason": "exited", "stop_drained": True}, RUNTIME),
        ({"stop_reason": "finished", "stop_lines": {"stderr.log": "1"}, "stop_drained": True}, RUNTIME),
    ],
    ids=["drained", "not-drained", "fault-before-stop", "no-stop-lines", "malformed"],
)
def test_a_drained_stop_reads_exactly_its_stop_lines(
    tmp_path: Path, details: dict[str, Any], verdict: str
) -> None:
    es = qualified_entries()
    log = "INFO serving\nEngineDeadError: EngineCore encountered an issue\n"
    _with_log(es, log, exit_code=0, details=details)
    assert verdict_of(tmp_path, es)["verdict"] == verdict


_BAR = "Processed prompts: 100%|##########| 4/4"


def test_engine_dead_error_appended_to_a_line_still_open_at_the_stop_is_not_a_fault(tmp_path: Path) -> None:
    """Regression (audit 16, f4): a progress bar written without its newline, then EngineDeadError appended
    to that line as the engine stopped on the collector's SIGTERM: the line was counted in stop_lines and
    read whole, with its shutdown, and a healthy run was NOT QUALIFIED — RUNTIME RELIABILITY. The launch
    records its logs' bytes at the stop (stop_bytes): the open line is read as it stood then."""
    run = engine_run(tmp_path, "--mode", "ok", "--shutdown-dead", "--open-line", _BAR)
    p = ready_then_stop(run, settle=0.3)
    stderr = run.stderr_path.read_bytes()
    at = p["details"]["stop_bytes"]["stderr.log"]
    assert stderr[:at].endswith(b"\n" + _BAR.encode())  # the open line, as it stood at the stop
    assert not stderr[at:].startswith(b"\n") and b"EngineDeadError" in stderr[at:]  # appended to it
    assert p["details"]["stop_drained"] is True
    assert p["details"]["stop_lines"]["stderr.log"] == stderr[:at].count(b"\n") + 1
    es = qualified_entries()
    launch_from(es, run, p)
    assert verdict_of(tmp_path, es)["verdict"] == QUALIFIED


def test_a_fault_on_a_line_open_at_the_stop_still_counts(tmp_path: Path) -> None:
    """Neighbour: what the open line said before the stop is the run's."""
    es = qualified_entries()
    bar = "EngineDeadError: boom "
    log = bar + "ERROR EngineDeadError: EngineCore encountered an issue\n"
    details = {
        "stop_reason": "finished",
        "stop_lines": {"stdout.log": 1, "stderr.log": 1},
        "stop_bytes": {"stdout.log": 0, "stderr.log": len(bar)},
        "stop_drained": True,
    }
    _with_log(es, log, exit_code=0, details=details)
    assert verdict_of(tmp_path, es)["verdict"] == RUNTIME


_OPEN_LOG = _BAR + "ERROR EngineDeadError: EngineCore encountered an issue\n"


@pytest.mark.parametrize(
    ("stop_bytes", "drained", "verdict"),
    [
        ({"stderr.log": len(_BAR)}, True, QUALIFIED),
        # not drained: the bytes say nothing of where the engine's output stood
        ({"stderr.log": len(_BAR)}, False, RUNTIME),
        # dropped, mistyped, negative, not a map: read by the lines, as before (the open line whole)
        (None, True, RUNTIME),
        ({"stderr.log": str(len(_BAR))}, True, RUNTIME),
        ({"stderr.log": len(_BAR) + 0.5}, True, RUNTIME),  # (a whole float is an int in canonical JSON)
        ({"stderr.log": -1}, True, RUNTIME),
        ({"stderr.log": True}, True, RUNTIME),
        (len(_BAR), True, RUNTIME),
        ({"stderr": len(_BAR)}, True, RUNTIME),
        # a count of bytes that disagrees with the count of lines (no byte of the line counted at the
        # stop) is read by the lines
        ({"stderr.log": 0}, True, RUNTIME),
    ],
    ids=[
        "cut",
        "not-drained",
        "dropped",
        "str",
        "float",
        "negative",
        "bool",
        "not-a-map",
        "other-log",
        "zero",
    ],
)
def test_stop_bytes_cut_a_drained_log_only_when_whole_and_consistent(
    tmp_path: Path, stop_bytes: Any, drained: bool, verdict: str
) -> None:
    es = qualified_entries()
    details: dict[str, Any] = {"stop_reason": "finished", "stop_lines": {"stdout.log": 1, "stderr.log": 1}}
    if stop_bytes is not None:
        details["stop_bytes"] = stop_bytes
    if drained:
        details["stop_drained"] = True
    _with_log(es, _OPEN_LOG, exit_code=0, details=details)
    assert verdict_of(tmp_path, es)["verdict"] == verdict


def test_stop_bytes_that_disagree_with_stop_lines_are_read_by_the_lines(tmp_path: Path) -> None:
    """A cut that leaves out whole lines counted at the stop (a fault two lines before it) is not trusted."""
    es = qualified_entries()
    log = "INFO serving\nERROR EngineDeadError: EngineCore encountered an issue\nINFO more\n"
    details = {
        "stop_reason": "finished",
        "stop_lines": {"stdout.log": 1, "stderr.log": 3},
        "stop_bytes": {"stdout.log": 0, "stderr.log": len("INFO serving\n")},
        "stop_drained": True,
    }
    _with_log(es, log, exit_code=0, details=details)
    assert verdict_of(tmp_path, es)["verdict"] == RUNTIME


# --- F5: HTTP 200 without a completion ------------------------------------------------------------------


@pytest.mark.parametrize("answer", ["error", "empty"])
def test_an_http_200_without_a_completion_is_a_server_side_failure_with_its_body_kept(
    tmp_path: Path, answer: str
) -> None:
    """Regression F5: a 200 whose body was {"error": {"type": "EngineDeadError"}} (or empty) was recorded as
    "malformed chat completion", its body thrown away, and judged only as a failed control."""
    run = engine_run(tmp_path, "--mode", "ok", "--answer-200", answer)
    run.start()
    try:
        assert run.wait_ready().ready
        base = run.spec.base_url
        probes = [
            probe_completion(base, timeout=10),
            probe_structured(base, schema={"type": "object"}, timeout=10),
            probe_sequential(base, count=3, timeout=10),
        ]
    finally:
        run.stop("finished")
    for pr in probes:
        assert pr["ok"] is False and pr["http_status"] == 200
        assert "server_error" in pr["details"], pr
        assert "HTTP 200 without a completion" in pr["error"]
        if answer == "error":
            assert "EngineDeadError" in pr["details"]["body"] and "EngineDeadError" in pr["error"]
        else:
            assert pr["details"]["body"] == ""
    es = qualified_entries()
    completion = entry(es, "completion")
    completion["payload"] = {**probes[0], "endpoint": "/v1/chat/completions"}
    completion["payload"].pop("answered_model", None)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == RUNTIME, v["gates"]
    assert "HTTP 200 without a completion" in runtime_reason(v)


def test_a_wrong_answer_is_a_control_failure_not_a_server_failure(tmp_path: Path) -> None:
    """Neighbour: a completion that answers something else keeps no body and fails the control only."""
    run = engine_run(tmp_path, "--mode", "ok", "--reply", "NOT READY")
    run.start()
    try:
        assert run.wait_ready().ready
        pr = probe_completion(run.spec.base_url, timeout=10)
    finally:
        run.stop("finished")
    assert pr["ok"] is False and "body" not in pr["details"]
    es = qualified_entries()
    entry(es, "completion")["payload"] = {**pr, "endpoint": "/v1/chat/completions"}
    entry(es, "completion")["payload"].pop("answered_model", None)  # the stand-in's own model name
    v = verdict_of(tmp_path, es)
    assert gates(v)["runtime-stability"] == "passed", v["gates"]
    assert v["verdict"] == "NOT QUALIFIED — CONTROL"
