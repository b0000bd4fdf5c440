"""Classifying a log that arrives in pieces gives the answer of classifying it whole."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.signatures import (
    RunOutcome,
    before_stop,
    classify,
    classify_logs,
    load_signatures,
    pattern_signatures,
    stop_markers,
)

LINES = [
    "INFO loading weights",
    "RuntimeError: UVA is not available",
    "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue",
    "HW Exception by GPU node-1 reason :GPU Hang",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "RuntimeError: Unsupported CPU attention configuration",
    "INFO: Shutting down",
]


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(st.sampled_from(LINES), max_size=12),
    cuts=st.lists(st.integers(min_value=0, max_value=12), max_size=4),
    ready=st.booleans(),
)
def test_pieces_of_whole_lines_classify_as_the_joined_text(
    lines: list[str], cuts: list[int], ready: bool
) -> None:
    sigs = pattern_signatures()
    outcome = RunOutcome(ready=ready)
    bounds = sorted({0, len(lines), *(min(c, len(lines)) for c in cuts)})
    pieces = ["\n".join(lines[a:b]) for a, b in itertools.pairwise(bounds)]
    assert classify_logs(pieces, outcome, sigs) == classify("\n".join(lines), outcome, list(sigs))


def test_pattern_signatures_are_the_tables_signatures_with_patterns_in_order() -> None:
    assert [s.id for s in pattern_signatures()] == [s.id for s in load_signatures() if s.patterns]
    assert pattern_signatures()[0].id == "uva-unavailable"


ENGINE_LOGS = Path(__file__).resolve().parent / "fixtures" / "engine_logs"


@pytest.mark.parametrize(
    ("log", "signature"),
    [
        ("vllm_cpu_ready.log", None),  # EngineDeadError comes only after the SIGTERM's shutdown marker
        ("vllm_cpu_head_dim16_first_request.log", "cpu-attention-unsupported"),
        ("vllm_cpu_mem_util_092.log", "cpu-memory-utilization"),
        ("llamacpp_ready.log", None),
        ("llamacpp_json_schema_unsupported.log", None),
    ],
)
def test_real_engine_logs_read_up_to_the_stop_marker_classify_as_their_runs_ended(
    log: str, signature: str | None
) -> None:
    text = (ENGINE_LOGS / log).read_text(encoding="utf-8", errors="replace")
    got = classify_logs(before_stop([text], stop_markers()), RunOutcome(ready=True), pattern_signatures())
    assert got.signature == signature


def test_before_stop_cuts_at_the_marker_line_in_whichever_piece_it_falls() -> None:
    markers = stop_markers()
    pieces = [
        "a\nb\n",
        "c\n(APIServer) INFO [shutdown] API server: shutdown triggered\nEngineDeadError\n",
        "d\n",
    ]
    assert "".join(before_stop(pieces, markers)) == "a\nb\nc\n"
    assert list(before_stop(["no marker\n"], markers)) == ["no marker\n"]
    assert "".join(before_stop(["EngineCore: trigger received signal=SIGTERM\nx\n"], markers)) == ""


@pytest.mark.parametrize(
    ("line", "signature", "failure_class"),
    [
        (
            "RuntimeError: CUDA error: an illegal memory access was encountered",
            "gpu-kernel-fault",
            "runtime-fault",
        ),
        (
            "torch.AcceleratorError: CUDA error: unspecified launch failure",
            "gpu-kernel-fault",
            "runtime-fault",
        ),
        (
            "Memory access fault by GPU node-1 (Agent handle: 0x5d1f) on address 0x7f00. Reason: Page",
            "gpu-kernel-fault",
            "runtime-fault",
        ),
        # a kernel's own assertion (an index out of range, a sampling probability that is NaN) and a cuBLAS
        # GEMM that failed to run: classified as kernel faults, not left to the status-only fall-backs
        ("RuntimeError: CUDA error: device-side assert triggered", "gpu-kernel-fault", "runtime-fault"),
        (
            "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx( handle, "
            "opa, opb, m, n, k, &falpha, a, CUDA_R_16BF, lda, b, CUDA_R_16BF, ldb, &fbeta, c, CUDA_R_16BF, "
            "ldc, compute_type, CUBLAS_GEMM_DEFAULT_TENSOR_OP)`",
            "gpu-kernel-fault",
            "runtime-fault",
        ),
        ("ggml_cuda_init: CUDA error: out of memory", "cuda-oom", "resource"),
        ("HW Exception by GPU node-1 reason :GPU Hang", "gpu-hang", "gpu-fault"),
        # a neighbour found this stop: a worker's segfault or a failed NCCL collective in a ready engine's log
        # left the campaign QUALIFIED (no pattern knew them)
        ("Segmentation fault (core dumped)", "segfault", "runtime-fault"),
        ("Fatal Python error: Segmentation fault", "segfault", "runtime-fault"),
        ("*** SIGSEGV received at time=1757498470 on cpu 3 ***", None, None),  # not the pattern's words
        (
            "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
            "ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details)",
            "nccl-error",
            "runtime-fault",
        ),
        (
            "RuntimeError: ncclUnhandledCudaError: Call to CUDA function failed.",
            "nccl-error",
            "runtime-fault",
        ),
        # regression: these fatal lines of a ready engine's log (a worker that died while the API server
        # still answered, a run recorded as the collector's stop) matched no signature: QUALIFIED
        ("Bus error (core dumped)", "native-crash", "runtime-fault"),
        ("Aborted (core dumped)", "native-crash", "runtime-fault"),
        ("ggml.c:1618: GGML_ASSERT(ctx->mem_buffer != NULL) failed", "native-crash", "runtime-fault"),
        ("double free or corruption (!prev)", "native-crash", "runtime-fault"),
        ("free(): invalid pointer", "native-crash", "runtime-fault"),
        ("terminate called after throwing an instance of 'std::bad_alloc'", "native-crash", "runtime-fault"),
        (
            "[rank0]:[E1205 06:01:02.000 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE) ran for 600000 milliseconds",
            "native-crash",
            "runtime-fault",
        ),
        ("Illegal instruction (core dumped)", "native-crash", "runtime-fault"),
        # the neighbours that are not faults: vLLM's INFO line for a request whose client went away
        ("INFO 12-05 06:01:02 [async_llm.py:300] Aborted request chatcmpl-4f2a.", None, None),
    ],
)  # fmt: skip
def test_real_engine_fault_lines_classify_by_the_table(
    line: str, signature: str | None, failure_class: str | None
) -> None:
    """Lines engines print when a GPU kernel faults or memory runs out (PyTorch, llama.cpp's ggml-cuda,
    ROCm's HSA runtime): a fault the policy engine finds in a launch's stored log, whatever it claims."""
    got = classify_logs([f"INFO starting\n{line}\nINFO more\n"], RunOutcome(ready=True), pattern_signatures())
    assert (got.signature, got.failure_class) == (signature, failure_class)


def test_a_stream_read_in_pieces_keeps_lines_whole_and_memory_bounded() -> None:
    import io

    from ledger.policy import acceptance

    text = b"".join(f"line {i} EngineDeadError\n".encode() if i == 70_000 else f"line {i}\n".encode()
                    for i in range(100_000))  # fmt: skip
    pieces = list(acceptance._lines_of(io.BytesIO(text)))
    assert "".join(pieces).encode() == text
    assert all(p.endswith("\n") for p in pieces)
    binary = list(acceptance._lines_of(io.BytesIO(b"x" * (5 * acceptance._LOG_CHUNK))))  # no newline at all
    assert sum(len(p) for p in binary) == 5 * acceptance._LOG_CHUNK
    assert max(len(p) for p in binary) <= 2 * acceptance._LOG_CHUNK


ILLEGAL_ACCESS = "RuntimeError: CUDA error: an illegal memory access was encountered"


@pytest.mark.parametrize(
    ("line", "ready", "signature", "failure_class"),
    [
        (ILLEGAL_ACCESS, True, "gpu-kernel-fault", "runtime-fault"),
        (ILLEGAL_ACCESS, False, "gpu-kernel-fault-at-startup", "startup"),
        ("CUDA error: device-side assert triggered", False, "gpu-kernel-fault-at-startup", "startup"),
        ("Segmentation fault (core dumped)", True, "segfault", "runtime-fault"),
        ("Segmentation fault (core dumped)", False, "segfault-at-startup", "startup"),
        ("NCCL error: unhandled system error", True, "nccl-error", "runtime-fault"),
        ("NCCL error: unhandled system error", False, "nccl-error-at-startup", "startup"),
        ("Bus error (core dumped)", True, "native-crash", "runtime-fault"),
        ("Bus error (core dumped)", False, "native-crash-at-startup", "startup"),
    ],
)  # fmt: skip
def test_a_gpu_kernel_fault_is_a_runtime_fault_after_readiness_and_a_startup_failure_before(
    line: str, ready: bool, signature: str, failure_class: str
) -> None:
    got = classify_logs([line + "\n"], RunOutcome(ready=ready), pattern_signatures())
    assert (got.signature, got.failure_class) == (signature, failure_class)


def test_every_stop_reason_the_collectors_write_is_one_the_policy_engine_knows() -> None:
    """The policy attributes a recorded end to the collector only for ``COLLECTOR_STOPPED``: a stop reason
    the collectors write that is in neither list would be judged as the engine's own end (and a healthy run
    would fail), so the literals they pass to ``stop`` / ``_finish_engine`` are held to the two lists."""
    import ast

    from ledger.signatures import COLLECTOR_STOPPED, ENGINE_ENDED

    known = set(COLLECTOR_STOPPED) | set(ENGINE_ENDED)
    repo = Path(__file__).resolve().parents[1]
    found: set[str] = set()
    for path in [*sorted((repo / "collectors").glob("*.py")), repo / "ledger" / "cli" / "collect.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("stop", "_finish_engine")
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                found.add(str(node.args[0].value))
    assert {"finished", "cancelled", "lease-end", "lease-expired"} <= found, found
    assert found <= known, found - known
    assert not set(COLLECTOR_STOPPED) & set(ENGINE_ENDED)
