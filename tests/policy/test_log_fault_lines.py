"""Real engine fault lines in a launch's logs fail the run, however the log is cut and whatever else it shows.

Regressions (an independent audit):

* F1 — real fault lines the signature table lacked (vLLM's "Worker proc VllmWorker-1 died unexpectedly",
  Ray's "RayWorkerProc rank=[3] died unexpectedly", "Engine core proc EngineCore_DP0 died unexpectedly",
  SGLang's "Scheduler hit an exception" / "Received sigquit from a child process" / "Rank 0 scheduler is
  dead", Triton's "Triton Error [CUDA]: an illegal memory access", old llama.cpp's "CUDA error 700 at …" and
  "GGML_ASSERT: file:line: cond"): a ready run whose log showed one after readiness was QUALIFIED.
* F2 — SGLang kills its own process tree with SIGKILL after a scheduler crash: recorded as `killed-sigkill`
  (class resource, "OOM killer or operator") instead of the crash its log names.
* F3 — a fault phrase straddling the cut of a line longer than the policy's read piece (1 MiB) was missed.
* F4 — only the first matching signature in table order was judged: a CUDA OOM line shadowed a GPU hang or
  an uncorrectable ECC error beside it (class resource, not gpu-fault), and the ready fallback qualified.
"""

from __future__ import annotations

import copy
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ledger.collectors.launch import EngineRun, LaunchSpec
from ledger.policy import acceptance
from ledger.signatures import (
    CLASS_PRECEDENCE,
    FailureClass,
    RunOutcome,
    before_stop,
    class_rank,
    classify,
    classify_logs,
    decisive,
    load_signatures,
    pattern_signatures,
    stop_markers,
)
from tests.policy.test_fail_closed import _with_log, entry, gates, qualified_entries, verdict_of

QUALIFIED = "QUALIFIED"
RUNTIME = "NOT QUALIFIED — RUNTIME RELIABILITY"
ENGINE_LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "engine_logs"

# --- F1: real fault lines --------------------------------------------------------------------------------

FAULT_LINES = [
    # vLLM's multiprocessing executor, its Ray executor and its engine-core client (other workers, ranks, DP)
    ("(EngineCore_DP0 pid=265) ERROR 02-27 10:31:24 [multiproc_executor.py:231] Worker proc VllmWorker-1 "
     "died unexpectedly, shutting down executor.", "engine-process-died"),
    ("ERROR 11-08 11:01:29 [multiproc_executor.py:135] Worker proc VllmWorker-3 died unexpectedly, shutting "
     "down executor.", "engine-process-died"),
    ("[UC][E] Worker proc VllmWorker-14 died unexpectedly (exit code: None), shutting down executor.",
     "engine-process-died"),
    ("ERROR 01-02 03:04:05 [ray_executor_v2.py:464] RayWorkerProc rank=[3] died unexpectedly, shutting down "
     "executor.", "engine-process-died"),
    ("ERROR 12-01 23:08:02 [core_client.py:564] Engine core proc EngineCore_DP0 died unexpectedly, shutting "
     "down client.", "engine-process-died"),
    ("ERROR 12-01 23:08:02 [core_client.py:564] Engine core proc EngineCore_DP3 died unexpectedly, shutting "
     "down client.", "engine-process-died"),
    ("(Worker pid=14016) ERROR 11-29 17:27:45 [multiproc_executor.py:1063] WorkerProc hit an exception.",
     "engine-process-died"),
    # SGLang's scheduler / detokenizer / DP controller crash and the SIGQUIT that follows
    ("[2026-02-26 05:24:09 TP0] Scheduler hit an exception: Traceback (most recent call last):",
     "engine-process-died"),
    ("[2025-03-20 10:00:00 DP2 TP2] Scheduler hit an exception: Traceback (most recent call last):",
     "engine-process-died"),
    ("[2026-02-26 05:24:09] DetokenizerManager hit an exception: Traceback (most recent call last):",
     "engine-process-died"),
    ("[2026-02-26 05:24:09] DataParallelController hit an exception: Traceback (most recent call last):",
     "engine-process-died"),
    ("[2026-02-26 05:24:09] Received sigquit from a child process. It usually means the child failed.",
     "engine-process-died"),
    ("Rank 0 scheduler is dead. Please check if there are relevant logs.", "engine-process-died"),
    ("Rank 7 scheduler is dead. Please check if there are relevant logs.", "engine-process-died"),
    # Triton's launcher and old llama.cpp's ggml-cuda (before 2024)
    ("RuntimeError: Triton Error [CUDA]: an illegal memory access was encountered", "gpu-kernel-fault"),
    ("RuntimeError: Triton Error [CUDA]: unspecified launch failure", "gpu-kernel-fault"),
    ("CUDA error 700 at /tmp/llama.cpp/ggml-cuda.cu:7080: an illegal memory access was encountered",
     "gpu-kernel-fault"),
    ("CUDA error 719 at C:\\llama.cpp\\ggml-cuda.cu:6540: unspecified launch failure", "gpu-kernel-fault"),
    ("GGML_ASSERT: /tmp/llama.cpp/ggml.c:4785: view_src == NULL || data_size == 0", "native-crash"),
    ('GGML_ASSERT: C:\\Users\\jeff\\ollama\\llm\\llama.cpp\\ggml-cuda.cu:244: !"CUDA error"', "native-crash"),
]  # fmt: skip

HEALTHY_LINES = [
    "INFO 12-05 06:01:02 [async_llm.py:300] Aborted request chatcmpl-4f2a.",
    "(VllmWorker-0 pid=12) INFO 12-05 06:01:02 [gpu_worker.py:100] Worker proc VllmWorker-0 ready.",
    "INFO 12-05 06:01:02 [ray_executor_v2.py:100] RayWorkerProc rank=[3] started on node 10.0.0.2",
    "INFO 12-05 06:01:02 [core_client.py:400] Engine core proc EngineCore_DP0 started, pid 4242",
    "[2026-02-26 05:24:09] The server is fired up and ready to roll!",
    "[2026-02-26 05:24:09 TP0] Prefill batch. #new-seq: 1, #new-token: 12, #cached-token: 0",
    '[2026-02-26 05:24:09] INFO:     127.0.0.1:40000 - "GET /health HTTP/1.1" 200 OK',
    "ggml_cuda_init: found 1 CUDA devices:",
    "llama_model_loader: - kv  12: general.file_type u32 = 15",
    "WARNING: if a worker dies unexpectedly, lower --gpu-memory-utilization",
]


@pytest.mark.parametrize(("line", "signature"), FAULT_LINES)
def test_vllm_worker_died_line_after_ready_is_a_runtime_fault(line: str, signature: str) -> None:
    got = classify_logs([f"INFO starting\n{line}\nINFO more\n"], RunOutcome(ready=True), pattern_signatures())
    assert (got.signature, got.failure_class) == (signature, "runtime-fault")
    assert got.detail == line.strip()


@pytest.mark.parametrize(("line", "signature"), FAULT_LINES)
def test_the_same_fault_line_before_readiness_is_that_attempts_startup_failure(
    line: str, signature: str
) -> None:
    got = classify_logs([f"{line}\n"], RunOutcome(ready=False), pattern_signatures())
    assert (got.signature, got.failure_class) == (f"{signature}-at-startup", "startup")


@pytest.mark.parametrize("line", HEALTHY_LINES)
@pytest.mark.parametrize("ready", [True, False])
def test_healthy_neighbour_lines_match_no_signature(line: str, ready: bool) -> None:
    assert classify_logs([line + "\n"], RunOutcome(ready=ready), pattern_signatures()).signature is None


@pytest.mark.parametrize(
    "log", ["vllm_cpu_ready.log", "llamacpp_ready.log", "llamacpp_json_schema_unsupported.log"]
)
def test_the_real_healthy_engine_logs_still_show_no_fault(log: str) -> None:
    text = (ENGINE_LOGS / log).read_text(encoding="utf-8", errors="replace")
    got = classify_logs(before_stop([text], stop_markers()), RunOutcome(ready=True), pattern_signatures())
    assert got.signature is None


@pytest.mark.parametrize(
    "line",
    [
        "ERROR 02-27 10:31:24 [multiproc_executor.py:231] Worker proc VllmWorker-1 died unexpectedly, "
        "shutting down executor.",
        "[2026-02-26 05:24:09 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        "RuntimeError: Triton Error [CUDA]: an illegal memory access was encountered",
    ],
)
def test_a_ready_run_whose_log_shows_a_worker_death_after_readiness_is_not_qualified(
    tmp_path: Path, line: str
) -> None:
    es = qualified_entries()
    _with_log(es, f"INFO serving\n{line}\nINFO still answering /health\n", exit_code=143)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == RUNTIME, v["gates"]
    reason = next(g["reason"] for g in v["gates"] if g["name"] == "runtime-stability")
    assert line.strip()[:60] in reason


# --- F2: SGLang's own SIGKILL after a scheduler crash -------------------------------------------------------

SGLANG_CRASH = (
    "[2026-02-26 05:24:09 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
    '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2400, in run_scheduler_process\n'
    "ValueError: Unsupported quantization method\n"
    "[2026-02-26 05:24:09] Received sigquit from a child process. It usually means the child failed.\n"
)
SCHEDULER_LINE = "[2026-02-26 05:24:09 TP0] Scheduler hit an exception: Traceback (most recent call last):"


@pytest.mark.parametrize(
    ("ready", "signature", "failure_class"),
    [(True, "engine-process-died", "runtime-fault"), (False, "engine-process-died-at-startup", "startup")],
)
def test_sglang_scheduler_crash_killed_by_its_own_sigkill_is_the_crash_not_the_oom_killer(
    ready: bool, signature: str, failure_class: str
) -> None:
    got = classify(SGLANG_CRASH, RunOutcome(ready=ready, signal=9), load_signatures())
    assert (got.signature, got.failure_class, got.detail) == (signature, failure_class, SCHEDULER_LINE)
    assert "killed-sigkill" in got.matched  # the status-only fall-back matched too, and did not decide
    # the neighbour: a SIGKILL with no line of the engine's is still the status-only fall-back
    bare = classify("INFO loading\n", RunOutcome(ready=ready, signal=9), load_signatures())
    assert (bare.signature, bare.failure_class) == ("killed-sigkill", "resource")


def test_the_collector_records_the_sglang_scheduler_crash_line_as_failure_detail(tmp_path: Path) -> None:
    code = (
        "import os, signal, sys\n"
        f"sys.stderr.write({SGLANG_CRASH!r})\nsys.stderr.flush()\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    run = EngineRun(
        LaunchSpec(
            engine="sglang",
            command=[sys.executable, "-c", code],
            base_url="http://127.0.0.1:9",
            lease_seconds=60,
            grace_seconds=1,
        ),
        tmp_path / "logs",
    )
    run.start()
    assert run.wait_exit(30)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and "sigquit" not in run.stderr_path.read_text():
        time.sleep(0.05)
    run.stop("finished")  # idempotent after the engine's own end: the run stays "exited"
    p = run.payload()
    assert (p["signal"], p["ready"]) == (9, False)
    assert p["failure_signature"] == "engine-process-died-at-startup"
    assert p["details"]["failure_class"] == "startup"
    assert p["failure_detail"] == SCHEDULER_LINE


def test_a_launch_recorded_as_killed_sigkill_whose_log_shows_the_scheduler_crash_is_named_by_it(
    tmp_path: Path,
) -> None:
    es = qualified_entries()
    _with_log(es, "INFO serving\n" + SGLANG_CRASH, failure_signature="killed-sigkill", signal=9)
    entry(es, "launch")["payload"]["details"] |= {"stop_reason": "exited", "ready_lines": {"stderr.log": 1}}
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == RUNTIME, v["gates"]
    reason = next(g["reason"] for g in v["gates"] if g["name"] == "runtime-stability")
    assert "engine-process-died" in reason and "Scheduler hit an exception" in reason


# --- F3: a fault phrase that straddles the cut of a long line ----------------------------------------------

ILLEGAL = "RuntimeError: CUDA error: an illegal memory access was encountered"


@pytest.mark.parametrize("before_cut", [None, 0, 1, 14, 30, len(ILLEGAL) - 1, len(ILLEGAL), len(ILLEGAL) + 5])
def test_a_fault_phrase_straddling_the_cut_of_a_long_line_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, before_cut: int | None
) -> None:
    """A line longer than a piece (a ``\\r`` progress bar with the error appended) is cut by ``_lines_of``
    (here pieces of 256 bytes: the first cut falls 512 bytes into the line); the phrase is found wherever
    the cut falls in it, ``before_cut`` of its characters before the cut. None: no phrase (the control)."""
    monkeypatch.setattr(acceptance, "_LOG_CHUNK", 256)
    bar = "\r".join(f"{i:3d}%|####|" for i in range(200))
    text = bar + "\n" if before_cut is None else bar[: 2 * 256 - before_cut] + ILLEGAL + "'\n"
    es = qualified_entries()
    _with_log(es, text, exit_code=143)
    entry(es, "launch")["payload"]["details"] |= {"ready_lines": {"stdout.log": 0, "stderr.log": 0}}
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == (QUALIFIED if before_cut is None else RUNTIME), (before_cut, v["gates"])


def test_a_two_mib_line_with_the_fault_across_its_cut_is_read_at_the_real_piece_size(tmp_path: Path) -> None:
    pre = "prompt='" + "x" * ((2 << 20) - 8 - 20)  # the phrase straddles byte 2 MiB of the line
    es = qualified_entries()
    _with_log(es, pre + ILLEGAL + "'\n", exit_code=143)
    assert verdict_of(tmp_path, es)["verdict"] == RUNTIME


def test_the_long_line_read_again_keeps_the_line_numbers_and_memory_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The overlap holds no newline (line numbers stand) and at most ``_LOG_OVERLAP`` characters."""
    import io

    monkeypatch.setattr(acceptance, "_LOG_CHUNK", 64)
    monkeypatch.setattr(acceptance, "_LOG_OVERLAP", 32)
    data = ("a\n" + "x" * 1000 + "EngineDeadError" + "y" * 1000 + "\nb\n").encode()
    pieces = list(acceptance._lines_of(io.BytesIO(data)))
    assert "".join(pieces).encode() == data  # the pieces themselves are not duplicated
    assert max(len(p) for p in pieces) <= 2 * 64


# --- F4: a fault class is never shadowed by an earlier signature of another class ---------------------------

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
HANG = "HW Exception by GPU node-1 (Agent handle: 0x5) reason :GPU Hang\n"
ECC = "RuntimeError: CUDA error: uncorrectable ECC error encountered\n"


def test_every_failure_class_has_one_place_in_the_precedence() -> None:
    placed = [c for group in CLASS_PRECEDENCE for c in group]
    assert sorted(placed) == sorted(FailureClass)
    assert class_rank("gpu-fault") < class_rank("runtime-fault") < class_rank("resource")
    assert class_rank("resource") == class_rank("startup") == class_rank("lease")
    assert class_rank("operator-stop") == len(CLASS_PRECEDENCE) - 1
    assert class_rank("a-class-added-later") == 0  # fails closed: gravest


@pytest.mark.parametrize(
    ("log", "ready", "signature", "failure_class"),
    [
        (OOM + HANG, False, "gpu-hang", "gpu-fault"),
        (HANG + OOM, False, "gpu-hang", "gpu-fault"),
        (OOM + ECC, False, "gpu-ecc-error", "gpu-fault"),
        (OOM + HANG, True, "gpu-hang", "gpu-fault"),
        # neighbours: a graver log line wins; among equals the table's order still decides
        (OOM, False, "cuda-oom", "resource"),
        (OOM + "RuntimeError: CUDA error: an illegal memory access was encountered\n", False, "cuda-oom",
         "resource"),
        (OOM + "RuntimeError: CUDA error: an illegal memory access was encountered\n", True,
         "gpu-kernel-fault", "runtime-fault"),
        ("RuntimeError: UVA is not available\n" + OOM, False, "uva-unavailable", "startup"),
    ],
)  # fmt: skip
def test_cuda_oom_beside_a_gpu_hang_is_a_gpu_fault(
    log: str, ready: bool, signature: str, failure_class: str
) -> None:
    got = classify_logs([log], RunOutcome(ready=ready), pattern_signatures())
    assert (got.signature, got.failure_class) == (signature, failure_class)
    whole = classify(log, RunOutcome(ready=ready, exit_code=1), load_signatures())
    assert (whole.signature, whole.failure_class) == (signature, failure_class)


@pytest.mark.parametrize(
    ("log", "outcome", "signature"),
    [
        # a ready engine that logged a CUDA OOM and exited: the log line, not the status-only fall-back
        (OOM, RunOutcome(ready=True, exit_code=1), "cuda-oom"),
        # an abort with a failed assert: the table's `abort` (status-only, listed first) as before
        ("ggml.c:1234: GGML_ASSERT(x) failed\n", RunOutcome(ready=True, signal=6), "abort"),
        # an outside SIGTERM with no line: the operator's stop, not the engine's exit after readiness
        ("INFO serving\n", RunOutcome(ready=True, signal=15), "killed-sigterm"),
    ],
)
def test_status_only_fall_backs_decide_as_before_where_no_graver_log_line_matched(
    log: str, outcome: RunOutcome, signature: str
) -> None:
    assert classify(log, outcome, load_signatures()).signature == signature


def test_decisive_of_nothing_is_nothing() -> None:
    assert decisive([]) is None


def _first_attempt(es: list[dict[str, Any]], signature: str, log: str) -> None:
    first = copy.deepcopy(entry(es, "launch"))
    first.update(name="launch-first-config", at="2026-09-10T10:00:30Z")
    first["payload"].update(ready=False, exit_code=1, failure_signature=signature)
    first["artifacts"] = [{"name": "stderr.log", "text": log}]
    es.insert(es.index(entry(es, "launch")), first)


@pytest.mark.parametrize(
    ("log", "verdict"),
    [
        (OOM + HANG, RUNTIME),
        (OOM + ECC, RUNTIME),
        (HANG, RUNTIME),
        (OOM, QUALIFIED),  # the neighbour: an OOM alone before readiness is that attempt's failure
    ],
)
def test_a_first_attempt_whose_log_shows_an_oom_and_a_gpu_fault_is_not_forgiven_by_the_fallback(
    tmp_path: Path, log: str, verdict: str
) -> None:
    es = qualified_entries()
    _first_attempt(es, "cuda-oom", log)  # the claim the collector used to make
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == verdict, v["gates"]
    if verdict == RUNTIME:
        assert gates(v)["runtime-stability"] == "failed"
        reason = next(g["reason"] for g in v["gates"] if g["name"] == "runtime-stability")
        assert "gpu-fault" in reason


def test_one_launch_whose_startup_logged_an_oom_and_a_gpu_hang_then_came_up_is_not_qualified(
    tmp_path: Path,
) -> None:
    es = qualified_entries()
    _with_log(es, OOM + HANG + "INFO ready\n", exit_code=143)
    entry(es, "launch")["payload"]["details"] |= {"ready_lines": {"stdout.log": 1, "stderr.log": 3}}
    assert verdict_of(tmp_path, es)["verdict"] == RUNTIME
    # the neighbour: an OOM alone in the start-up of the run that then came up is not a fault of the run
    es2 = qualified_entries()
    _with_log(es2, OOM + "INFO ready\n", exit_code=143)
    entry(es2, "launch")["payload"]["details"] |= {"ready_lines": {"stdout.log": 1, "stderr.log": 2}}
    assert verdict_of(tmp_path / "oom-alone", es2)["verdict"] == QUALIFIED
