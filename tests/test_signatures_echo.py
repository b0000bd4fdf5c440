"""An engine's echo of the collector's own request is no fault of the engine (audit76 f5).

vLLM run with ``--enable-log-requests`` and ``VLLM_LOGGING_LEVEL=DEBUG`` writes every request's prompt, its
JSON body and the answer into its log (its request logger: "Received request …", "Request … details:
prompt: …", "Request … JSON body: …", "Generated response …: output: …"). A control prompt that said "a GPU
Hang is not a word" was classified ``gpu-hang`` (class gpu-fault): every signature pattern was searched
anywhere in any line, so the client's own words, echoed, made a healthy engine NOT QUALIFIED — RUNTIME
RELIABILITY; an echoed stop marker cut the log short as well. Now a line the request logger writes
(``ledger.signatures.echoed_line``: recognised by its header, line by line — vLLM repeats a record's header
at the head of each continuation line) is passed over by every signature (``Signature.locate``: the
collector's ``classify``/``classify_logs`` and the policy's stored-log reading alike), by the detail
(``engine_words``) and by the stop markers (``before_stop``, ``find_engine_text``). The same words printed
by the engine's runtime still count; a line without the request logger's header is the engine's own,
whatever precedes it (fail closed).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from ledger.signatures import (
    PYTHON_TRACEBACK,
    RunOutcome,
    before_stop,
    classify,
    classify_logs,
    echoed_line,
    engine_words,
    find_engine_text,
    load_signatures,
    pattern_signatures,
    stop_markers,
)
from tests.policy.test_fail_closed import _with_log, gates, qualified_entries, verdict_of

RUNTIME = "NOT QUALIFIED — RUNTIME RELIABILITY"

# vLLM 0.32's request logger, as the audit's run logged it (DEBUG shows the file's relative path)
DETAILS = (
    "(APIServer pid=1889) DEBUG 12-06 17:35:54 [entrypoints/.../utils/request_logger.py:55] Request "
    "chatcmpl-a395bc3e992f0860 details: prompt: '<|im_start|>user\\nReply with exactly one word: READY "
    "({})<|im_end|>\\n<|im_start|>assistant\\n', prompt_token_ids: [3, 89, 305], prompt_embeds shape: None."
)
JSON_BODY = (
    "(APIServer pid=1889) DEBUG 12-06 17:35:54 [entrypoints/.../utils/request_logger.py:74] Request "
    'a395bc3e992f0860 JSON body: {{"messages":[{{"content":"Reply with exactly one word: READY ({})",'
    '"role":"user"}}],"model":"tiny-llama","max_tokens":8,"temperature":0.0}}'
)
RECEIVED = (
    "(APIServer pid=1889) INFO 12-06 17:35:54 [request_logger.py:65] Received request chatcmpl-a395bc3e: "
    "params: SamplingParams(n=1, temperature=0.0, stop=['{}'], max_tokens=8), lora_request: None."
)
GENERATED = (
    "(APIServer pid=1889) INFO 12-06 17:35:55 [request_logger.py:97] Generated response chatcmpl-a395bc3e: "
    "output: 'READY ({})', finish_reason: stop"
)
# vLLM before 0.11: vllm/entrypoints/logger.py, no process prefix
LEGACY = (
    "INFO 03-01 10:00:00 [logger.py:39] Received request chatcmpl-1: prompt: '<|im_start|>user\\n{}', "
    "params: SamplingParams(n=1), prompt_token_ids: [1, 2], lora_request: None."
)
# the same record as a terminal shows it (ColoredFormatter)
COLOURED = (
    "\x1b[0;36m(APIServer pid=7)\x1b[0;0m \x1b[37mDEBUG\x1b[0m \x1b[90m12-06 17:35:54\x1b[0m "
    "\x1b[90m[entrypoints/.../utils/request_logger.py:55]\x1b[0m Request chatcmpl-1 details: prompt: '{}'"
)
ECHOES = {
    "details": DETAILS,
    "json-body": JSON_BODY,
    "received": RECEIVED,
    "generated": GENERATED,
    "legacy": LEGACY,
    "coloured": COLOURED,
}

# fault words a prompt may hold, and the signature the same words have when the runtime prints them
FAULTS = [
    ("a GPU Hang is not a word", "gpu-hang", "gpu-fault"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "cuda-oom", "resource"),
    (
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue",
        "engine-dead",
        "runtime-fault",
    ),
    ("Segmentation fault (core dumped)", "segfault", "runtime-fault"),
    ("CUDA error: an illegal memory access was encountered", "gpu-kernel-fault", "runtime-fault"),
]
SHUTDOWN = "[shutdown] API server: shutdown triggered"


def _logs(text: str, ready: bool = True) -> tuple[str | None, str | None]:
    got = classify_logs([text], RunOutcome(ready=ready), pattern_signatures())
    return got.signature, got.failure_class


@pytest.mark.parametrize("shape", sorted(ECHOES))
@pytest.mark.parametrize(("words", "signature", "cls"), FAULTS, ids=[f[1] for f in FAULTS])
def test_an_echoed_prompt_holding_fault_words_is_no_fault(
    shape: str, words: str, signature: str, cls: str
) -> None:
    line = ECHOES[shape].format(words)
    assert echoed_line(line), line
    text = f"INFO serving\n{line}\nINFO still answering /health\n"
    assert _logs(text) == (None, None)
    # the collector's own reading (``classify`` over the whole table) too
    assert classify(text, RunOutcome(ready=True, exit_code=0), pattern_signatures()).signature is None


@pytest.mark.parametrize(("words", "signature", "cls"), FAULTS, ids=[f[1] for f in FAULTS])
def test_the_same_words_printed_by_the_runtime_still_are_a_fault(
    words: str, signature: str, cls: str
) -> None:
    for line in (
        words,  # raw, as a process prints it to stderr
        f"(EngineCore_DP0 pid=265) ERROR 12-06 17:35:55 [core.py:1012] {words}",  # another logger's record
        f"ERROR 12-06 17:35:55 [core.py:1012] {words}",
    ):
        assert not echoed_line(line), line
        assert _logs(f"INFO serving\n{line}\n") == (signature, cls), line


@pytest.mark.parametrize(("words", "signature", "cls"), FAULTS, ids=[f[1] for f in FAULTS])
def test_a_runtime_fault_beside_an_echo_of_the_same_words_counts_and_is_the_line_quoted(
    words: str, signature: str, cls: str
) -> None:
    echo = DETAILS.format(words)
    for text in (f"{words}\n{echo}\n", f"{echo}\n{words}\n"):  # before the echo, after it
        got = classify_logs([text], RunOutcome(ready=True), pattern_signatures())
        assert (got.signature, got.failure_class) == (signature, cls), text
        assert got.detail == words, got.detail


def test_the_audits_log_line_is_no_gpu_hang() -> None:
    """The line of the audit's run (stdout.log line 230), the collector's control prompt echoed."""
    line = DETAILS.format("a GPU Hang is not a word")
    assert _logs(line + "\n") == (None, None)
    assert _logs(line + "\n", ready=False) == (None, None)


# --- shapes that are not the request logger's: judged as the engine's lines ----------------------------


@pytest.mark.parametrize(
    "line",
    [
        # another file's record with the same message
        "(APIServer pid=1) INFO 12-06 17:35:54 [serving_chat.py:65] Received request x: GPU Hang",
        # the request logger's file at a level it writes no content with
        "(APIServer pid=1) ERROR 12-06 17:35:54 [request_logger.py:65] GPU Hang",
        "(APIServer pid=1) WARNING 12-06 17:35:54 [request_logger.py:65] GPU Hang",
        # the legacy logger.py with another message than the request logger's
        "INFO 03-01 10:00:00 [logger.py:39] GPU Hang",
        # the header not at the line's start: quoted by another line
        "GPU Hang (APIServer pid=1) DEBUG 12-06 17:35:54 [request_logger.py:55] Request x details: ''",
        "ERROR x: (APIServer pid=1) DEBUG 12-06 17:35:54 [request_logger.py:55] Request x details: GPU Hang",
        # misspelled file, lower-case level, a date of another shape
        "(APIServer pid=1) DEBUG 12-06 17:35:54 [request_loger.py:55] Request x details: prompt: 'GPU Hang'",
        "(APIServer pid=1) debug 12-06 17:35:54 [request_logger.py:55] Request x details: prompt: 'GPU Hang'",
        "(APIServer pid=1) DEBUG 2026-12-06 17:35:54 [request_logger.py:55] Request x details: 'GPU Hang'",
        # an operator's VLLM_LOGGING_PREFIX: not recognised (fail closed)
        "[vllm] (APIServer pid=1) DEBUG 12-06 17:35:54 [request_logger.py:55] Request x details: 'GPU Hang'",
    ],
)
def test_lines_not_of_the_request_loggers_shape_are_the_engines(line: str) -> None:
    assert not echoed_line(line)
    assert _logs(f"{line}\n") == ("gpu-hang", "gpu-fault")


# --- a prompt of several lines -----------------------------------------------------------------------------


def test_a_multi_line_prompt_is_one_echoed_line_in_vllms_request_log() -> None:
    """vLLM writes the prompt with ``%r`` and the body as JSON: the prompt's newlines are escapes within
    the one line, so the whole prompt is on the echoed line."""
    prompt = "Reply with exactly one word: READY\nnot:\nGPU Hang\nSegmentation fault\n" + SHUTDOWN
    line = DETAILS.format(repr(prompt)[1:-1])
    assert "\n" not in line
    assert _logs(f"INFO serving\n{line}\nINFO more\n") == (None, None)


def test_continuation_lines_carrying_the_request_loggers_header_are_echoes_too() -> None:
    """vLLM's NewLineFormatter repeats a record's header at the head of every continuation line of a message
    of several lines ("\\r\\n" + header): each of them is recognised by that header."""
    head = "(APIServer pid=1889) DEBUG 12-06 17:35:54 [entrypoints/.../utils/request_logger.py:55] "
    text = (
        f"INFO serving\n{head}Request x details: prompt: 'first line\r\n"
        f"{head}a GPU Hang is not a word\r\n"
        f"{head}Segmentation fault\r\n"
        f"{head}{SHUTDOWN}\r\n"
        f"{head}last line', prompt_token_ids: [1]\n"
        "INFO more\n"
    )
    assert _logs(text) == (None, None)
    assert "".join(before_stop([text], stop_markers())) == text  # the echoed marker cuts nothing


def test_a_continuation_line_without_the_header_is_the_engines_own_line() -> None:
    """The decision: an echo is recognised line by line, by its header. A line without it is judged as the
    engine's, whatever line precedes it — so a crash printed raw right after an echo (faulthandler, the
    shell, a C++ abort write no header) is never hidden behind it. An engine that echoed a prompt raw over
    several lines would be judged by those lines (fail closed); no supported engine does."""
    head = "(APIServer pid=1889) DEBUG 12-06 17:35:54 [entrypoints/.../utils/request_logger.py:55] "
    text = f"{head}Request x details: prompt: 'first line\nSegmentation fault (core dumped)\n"
    assert _logs(text) == ("segfault", "runtime-fault")
    assert _logs(f"{head}Request x details: prompt: 'a\nGPU Hang'\n") == ("gpu-hang", "gpu-fault")


# --- stop markers, traceback heads, the detail -------------------------------------------------------------


def test_an_echoed_stop_marker_does_not_cut_the_log_short() -> None:
    """Regression: a prompt quoting vLLM's shutdown line cut the policy's reading there, so a fault logged
    after it was never seen."""
    echo = DETAILS.format(SHUTDOWN)
    text = f"INFO serving\n{echo}\nSegmentation fault (core dumped)\n"
    assert "".join(before_stop([text], stop_markers())) == text
    assert _logs("".join(before_stop([text], stop_markers()))) == ("segfault", "runtime-fault")


def test_the_engines_own_stop_marker_still_cuts_the_log() -> None:
    real = f"(APIServer pid=1889) INFO 12-06 17:36:00 [launcher.py:110] {SHUTDOWN}"
    text = f"INFO serving\n{DETAILS.format(SHUTDOWN)}\n{real}\nEngineDeadError\n"
    kept = "".join(before_stop([text], stop_markers()))
    assert kept == f"INFO serving\n{DETAILS.format(SHUTDOWN)}\n"
    assert _logs(kept) == (None, None)


def test_find_engine_text_passes_over_echoed_lines() -> None:
    echo = DETAILS.format(PYTHON_TRACEBACK)
    assert find_engine_text(f"INFO a\n{echo}\n", PYTHON_TRACEBACK) == -1
    text = f"INFO a\n{echo}\n{PYTHON_TRACEBACK}:\n"
    assert find_engine_text(text, PYTHON_TRACEBACK) == text.rindex(PYTHON_TRACEBACK)
    # a compiled pattern, and the start offset
    marker = re.compile(re.escape(SHUTDOWN))
    assert find_engine_text(f"{SHUTDOWN}\n", marker) == 0
    assert find_engine_text(f"{SHUTDOWN}\n", marker, 1) == -1
    assert find_engine_text("", marker) == -1


def test_the_detail_of_a_status_only_signature_never_quotes_an_echo() -> None:
    """``engine_words``: the engine's last error-looking line, not the client's prompt that reads as one."""
    sigs = load_signatures()
    echo = DETAILS.format("ValueError: not a real error")
    text = f"ERROR 12-06 17:35:50 [core.py:1] RuntimeError: the engine's own words\n{echo}\n"
    assert engine_words(text, sigs) == "ERROR 12-06 17:35:50 [core.py:1] RuntimeError: the engine's own words"
    assert engine_words(f"{echo}\n", sigs) is None
    got = classify(text, RunOutcome(ready=True, exit_code=1), sigs)
    assert got.signature == "engine-exited-after-readiness"
    assert got.detail is not None and "own words" in got.detail


# --- the policy engine reads stored logs with the same function ---------------------------------------------


def _runtime_reason(v: dict[str, Any]) -> str:
    return next(g["reason"] for g in v["gates"] if g["name"] == "runtime-stability")


@pytest.mark.parametrize(("words", "signature", "cls"), FAULTS, ids=[f[1] for f in FAULTS])
def test_the_policy_does_not_fail_runtime_stability_on_an_echoed_prompt(
    tmp_path: Path, words: str, signature: str, cls: str
) -> None:
    es = qualified_entries()
    _with_log(
        es, f"INFO serving\n{DETAILS.format(words)}\n{GENERATED.format(words)}\nINFO more\n", exit_code=143
    )
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "QUALIFIED", v["gates"]
    assert gates(v)["runtime-stability"] == "passed"


def test_the_policy_still_fails_runtime_stability_on_the_runtimes_own_line(tmp_path: Path) -> None:
    es = qualified_entries()
    words = "HW Exception by GPU node-1 (Agent handle: 0x1) reason :GPU Hang"
    _with_log(es, f"INFO serving\n{DETAILS.format('GPU Hang')}\n{words}\nINFO more\n", exit_code=143)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == RUNTIME, v["gates"]
    reason = _runtime_reason(v)
    assert "signature gpu-hang" in reason and "line 3" in reason, reason
