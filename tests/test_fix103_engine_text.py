"""fix103: text the collector handed the engine, its argument and metadata dumps, bind failures, and deaths by
signal are classified by where they come from (collectors/signatures.toml, ledger/signatures.py)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from ledger.signatures import (
    CRASH_SIGNALS,
    FailureClass,
    RunOutcome,
    classify,
    echoed_line,
    find_engine_text,
    load_signatures,
)

PATH = "/models/release GPU Hang fixes/tiny.gguf"
LOADER = (
    "llama_model_loader: loaded meta data with 22 key-value pairs and 21 tensors from "
    f"{PATH} (version GGUF V3 (latest))"
)
KV_NAME = (
    "llama_model_loader: - kv   1:                               general.name str              = "
    "tiny llama GPU Hang repro"
)
PRINT_NAME = "print_info: general.name          = tiny llama GPU Hang repro"
METADATA = "Model metadata: {'general.architecture': 'llama', 'general.name': 'tiny llama GPU Hang repro'}"
VLLM_ARGS = (
    "(APIServer pid=9098) INFO 11-29 17:25:46 [api_utils.py:286] non-default args: "
    f"{{'host': '127.0.0.1', 'model': '{PATH}', 'dtype': 'float32'}}"
)
VLLM_CONFIG = (
    "(EngineCore pid=10794) INFO 11-29 17:26:04 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with "
    f"config: model='{PATH}', speculative_config=None"
)
READY = RunOutcome(ready=True, exit_code=0)
NOT_READY = RunOutcome(ready=False, exit_code=1)


def _sig(text: str, outcome: RunOutcome = NOT_READY, given: tuple[str, ...] = ()) -> str | None:
    return classify(text, outcome, given=given).signature


# --- f1: the model's path and metadata the engine prints are not its faults ---------------------------


@pytest.mark.parametrize("line", [LOADER, KV_NAME, PRINT_NAME, METADATA, VLLM_ARGS, VLLM_CONFIG])
def test_model_path_or_metadata_echoed_at_load_is_no_gpu_fault(line: str) -> None:
    assert echoed_line(line)
    assert _sig(line + "\n", READY) == "engine-exited-after-readiness"
    assert _sig(line + "\n") == "engine-died-before-readiness"


def test_metadata_dump_with_colour_codes_is_still_an_echo() -> None:
    assert echoed_line("\x1b[32m" + KV_NAME)


def test_metadata_line_without_fault_words_matches_nothing() -> None:
    line = "llama_model_loader: - kv   1:                               general.name str              = tiny"
    assert echoed_line(line)
    assert _sig(line) == "engine-died-before-readiness"


def test_a_fault_line_after_a_dump_still_counts() -> None:
    text = f"{LOADER}\n{KV_NAME}\nHW Exception by GPU node-1 (Agent handle: 0x1) reason :GPU Hang\n"
    assert _sig(text, READY) == "gpu-hang"


def test_dump_head_elsewhere_in_a_line_is_no_echo() -> None:
    # the head counts only at the line's start: an engine's fault line that quotes it is the engine's
    line = "ERROR something: GPU Hang while reading Model metadata: {'a': 1}"
    assert not echoed_line(line)
    assert _sig(line, READY) == "gpu-hang"


def test_renamed_dump_head_is_judged_as_the_engine_line() -> None:
    assert not echoed_line("Model meta data: {'general.name': 'GPU Hang'}")
    assert _sig("Model meta data: {'general.name': 'GPU Hang'}", READY) == "gpu-hang"


def test_path_handed_to_the_engine_in_a_fault_line_is_masked_but_the_fault_words_count() -> None:
    # a real failure that also quotes the path: its own words still decide it
    line = f"llama_model_load: error loading model: tensor 'x' data is not within the file bounds, {PATH}"
    assert _sig(line, given=(PATH,)) == "model-files-corrupt"
    # the same line's GPU words lie inside the path: not a GPU hang
    assert "gpu-hang" not in classify(line, NOT_READY, given=(PATH,)).matched
    # without the path given (an entry that records no command), fail closed: the words count
    assert "gpu-hang" in classify(line, NOT_READY).matched


def test_path_in_an_engine_line_that_is_no_dump_is_masked_when_given() -> None:
    line = f"srv  load_model: failed to load {PATH}"
    assert _sig(line, given=(PATH,)) == "engine-died-before-readiness"
    assert _sig(line) == "gpu-hang"


def test_a_given_text_no_more_than_the_fault_words_hides_nothing() -> None:
    # an argument that is itself the fault's words: the engine may have said them (fail closed)
    assert _sig("reason :GPU Hang", READY, given=("GPU Hang",)) == "gpu-hang"
    assert _sig("GPU Hang", READY, given=("GPU Hang",)) == "gpu-hang"


def test_given_text_elsewhere_does_not_hide_a_fault() -> None:
    text = f"loading {PATH}\nHW Exception by GPU node-1 reason :GPU Hang\n"
    assert _sig(text, READY, given=(PATH,)) == "gpu-hang"


def test_mistyped_given_values_are_ignored() -> None:
    assert _sig("GPU Hang", READY, given=(None, 3, b"GPU Hang x")) == "gpu-hang"  # type: ignore[arg-type]


def test_stop_marker_or_traceback_inside_given_text_is_not_the_engine_s() -> None:
    g = "/m/Traceback (most recent call last) x/t.gguf"
    assert find_engine_text(f"loading {g}\n", "Traceback (most recent call last)", given=(g,)) == -1
    assert find_engine_text(f"loading {g}\n", "Traceback (most recent call last)") >= 0


# --- f2: the engine could not bind the campaign's port -------------------------------------------------

UVICORN_BIND = (
    "ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 40989): "
    "address already in use"
)
LLAMA_SERVER_BIND = "main: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 8080"
VLLM_BIND = "OSError: [Errno 98] Address already in use"


@pytest.mark.parametrize(
    ("line", "code"),
    [(UVICORN_BIND, 3), (LLAMA_SERVER_BIND, 1), (VLLM_BIND, 1), (f"(APIServer pid=1) {VLLM_BIND}", 1)],
)
def test_port_taken_before_the_engine_bound_it_is_no_engine_death(line: str, code: int) -> None:
    c = classify(f"INFO: Started server process [1]\n{line}\n", RunOutcome(ready=False, exit_code=code))
    assert (c.signature, c.failure_class) == ("engine-could-not-bind", FailureClass.CONFIG.value)


def test_bind_failure_with_a_graver_line_is_still_the_engine_s() -> None:
    c = classify(f"{UVICORN_BIND}\nSegmentation fault\n", RunOutcome(ready=False, signal=11))
    assert c.signature == "segfault-at-startup"


def test_bind_failure_wording_changed_is_no_bind_failure() -> None:
    c = classify("ERROR: could not listen on port\n", RunOutcome(ready=False, exit_code=3))
    assert c.signature == "engine-died-before-readiness"


def test_bind_failure_after_readiness_is_not_excused() -> None:
    c = classify(f"{VLLM_BIND}\n", RunOutcome(ready=True, exit_code=1))
    assert c.signature == "engine-exited-after-readiness"


# --- f9: every signal has a deliberate class ---------------------------------------------------------

OUTSIDE = {1, 2, 15, 30}  # HUP, INT, TERM, PWR
RESOURCE = {9, 24, 25}  # KILL (the OOM killer), XCPU, XFSZ
CRASH = {4, 5, 6, 7, 8, 11, 16, 31}
OWN = {3, 10, 12, 13, 14, 17, 18, 19, 20, 21, 22, 23, 26, 27, 28, 29, *range(32, 65)}


def _expected(n: int, ready: bool) -> str:
    if n in OUTSIDE:
        return "operator-stop"
    if n in RESOURCE:
        return "resource"
    assert n in CRASH | OWN, n
    return "runtime-fault" if ready else "startup"


def test_the_signal_groups_cover_every_signal_once() -> None:
    groups = [OUTSIDE, RESOURCE, CRASH, OWN]
    assert set().union(*groups) == set(range(1, 65))
    assert sum(len(g) for g in groups) == 64


@pytest.mark.parametrize("n", range(1, 65))
@pytest.mark.parametrize("ready", [True, False])
def test_each_signal_has_a_deliberate_class(n: int, ready: bool) -> None:
    c = classify("", RunOutcome(ready=ready, signal=n))
    assert c.signature not in ("engine-exited-after-readiness", "engine-died-before-readiness"), n
    assert "exited" not in (c.title or ""), (n, c.title)
    assert c.failure_class == _expected(n, ready), (n, c.signature)


@pytest.mark.parametrize("n", sorted(set(range(1, 32)) - {17, 18, 19, 20, 21, 22, 23, 28}))
@pytest.mark.parametrize("ready", [True, False])
def test_each_fatal_signal_through_a_shell_has_a_deliberate_class(n: int, ready: bool) -> None:
    c = classify("", RunOutcome(ready=ready, exit_code=128 + n))
    assert c.signature not in ("engine-exited-after-readiness", "engine-died-before-readiness"), n
    assert c.failure_class == _expected(n, ready), (n, c.signature)


def test_engine_killed_by_sighup_after_readiness_is_a_stop_from_outside() -> None:
    c = classify("", RunOutcome(ready=True, signal=signal.SIGHUP))
    assert (c.signature, c.failure_class) == ("killed-from-outside", "operator-stop")


def test_crash_line_beside_an_outside_signal_still_decides() -> None:
    c = classify("Segmentation fault\n", RunOutcome(ready=True, signal=signal.SIGHUP))
    assert c.signature == "segfault"


def test_crash_signals_are_the_table_s_crash_signatures() -> None:
    sigs = {s.id: s for s in load_signatures()}
    table = {n for i in ("abort", "bus-error", "killed-crash-signal") for n in sigs[i].signals}
    assert table == set(CRASH_SIGNALS)
    assert {c - 128 for c in sigs["crash-exit-status"].exit_codes} == set(CRASH_SIGNALS)


@pytest.mark.parametrize("bad", ['"6"', "true", "[]", "[6, 0]", "[6, 65]", "6.0", '["SIGSEGV"]'])
def test_mistyped_signal_in_the_table_is_refused(tmp_path: Path, bad: str) -> None:

    from ledger.errors import ConfigError

    p = tmp_path / "s.toml"
    p.write_text(f'[[signature]]\nid = "x"\nsignal = {bad}\nclass = "startup"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="signal"):
        load_signatures(p)


def test_signal_as_one_number_or_a_list_is_read(tmp_path: Path) -> None:

    p = tmp_path / "s.toml"
    p.write_text(
        '[[signature]]\nid = "a"\nsignal = 6\nclass = "startup"\n'
        '[[signature]]\nid = "b"\nsignal = [1, 30]\nclass = "operator-stop"\n',
        encoding="utf-8",
    )
    a, b = load_signatures(p)
    assert (a.signals, b.signals) == ((6,), (1, 30))
