"""Fix 125 (issue 11): the context a launch gives, read whole; a refusal's stated window held to it.

1. The policy read the context length only from a launch's recorded command: a campaign that set it through
   the engine's environment (llama-server's LLAMA_ARG_CTX_SIZE, llama-cpp-python's N_CTX) had its honest
   context refusals, which rest on the request's size, blamed on the engine. Now ``launched_context`` reads
   the recorded ``env`` by the variables of the launch's engine kind (``CONTEXT_ENV``), the option winning
   where both are given (both programs let it).
2. A 400 "maximum context length is N tokens" (or a sizing request so refused) was excused on the request's
   size alone, whatever N: an engine that states it serves another window than the launch gives refused the
   request for its own context. Now each window the error states must be the launched context, or that
   padded up to llama.cpp's ``CONTEXT_PADDING`` (``window_explained``).
"""

from __future__ import annotations

from typing import Any

import pytest

from ledger.answers import (
    CONTEXT_PADDING,
    DEFAULT_CONTEXT,
    HARNESS_REQUEST,
    REFUSAL_CONTEXT,
    context_record,
    launched_context,
    refusal,
    stated_windows,
    window_explained,
)

PARAMS: dict[str, Any] = {
    "refused_http_statuses": [401, 403],
    "context_refused_http_statuses": [400],
    "context_refusal_patterns": [
        "maximum context length is [0-9]+ tokens",
        "exceeds the available context size",
    ],
    "request_form_refused_http_statuses": [400, 422, 500],
    "request_form_refusal_patterns": ["^[0-9]+ validation errors? .*response_format"],
}
SERVER = ["llama-server", "-m", "/m.gguf", "--port", "8080"]
PY = ["/venv/bin/python", "-m", "llama_cpp.server", "--model", "/m.gguf", "--port", "8080"]
VLLM = ["vllm", "serve", "/m", "--port", "8080"]
# llama-cpp-python's server where nothing sets its context: its own default (fix 136)
PY_DEFAULT = DEFAULT_CONTEXT["llama_cpp.server"]


def _launch(command: list[str], env: Any, engine: str = "llamacpp") -> dict[str, Any]:
    return {"engine": engine, "command": command, "env": env}


def _probe(option: str, length: int, **over: Any) -> dict[str, Any]:
    """llama-cpp-python's HTTP 500 under a small context: refused only by the record's size."""
    payload: dict[str, Any] = {
        "check": "structured",
        "ok": False,
        "http_status": 500,
        "error": "HTTP 500: could not broadcast input array from shape (259,) into shape (0,)",
        "max_tokens": 64,
        "details": {"context": context_record(option, length, 111)},
    }
    payload.update(over)
    return payload


# ------------------------------------------------------------------ 1. the context set through the env


def test_context_set_through_llama_servers_env_is_read_from_the_launch() -> None:
    assert launched_context(_launch(SERVER, {"LLAMA_ARG_CTX_SIZE": "512"})) == ("LLAMA_ARG_CTX_SIZE", 512)


def test_context_set_through_llama_cpp_pythons_env_is_read_in_any_case() -> None:
    assert launched_context(_launch(PY, {"N_CTX": "128"})) == ("N_CTX", 128)
    assert launched_context(_launch(PY, {"n_ctx": "128"})) == ("n_ctx", 128)
    assert launched_context(_launch(PY, {"N_CTX": "128", "n_ctx": "128"})) == ("N_CTX", 128)


def test_context_refusal_set_through_the_env_is_the_campaigns_not_the_engines() -> None:
    """The failure: the record names N_CTX 128 (the collector's reading), the launch's command none."""
    launched = launched_context(_launch(PY, {"N_CTX": "128"}))
    assert refusal(_probe("N_CTX", 128), PARAMS, launched=launched) == REFUSAL_CONTEXT
    # the record naming another context than the launch's env gives still excuses nothing
    assert refusal(_probe("N_CTX", 256), PARAMS, launched=launched) is None
    assert refusal(_probe("--n_ctx", 128), PARAMS, launched=launched) is None


@pytest.mark.parametrize(
    "env",
    [
        {"LLAMA_ARG_CTX": "512"},  # misspelled
        {"LLAMA_CTX_SIZE": "512"},  # renamed
        {"llama_arg_ctx_size": "512"},  # llama-server reads its variables as written
        {"N_CTXS": "512"},
        {"CTX_SIZE": "512"},
    ],
)
def test_context_env_var_misspelled_gives_no_context(env: dict[str, str]) -> None:
    assert launched_context(_launch(SERVER, env)) is None
    assert launched_context(_launch(PY, env)) == PY_DEFAULT  # no variable it reads: its own default


@pytest.mark.parametrize(
    "value", ["abc", "0", "-512", "512 ", "+512", "512.0", "1k", "", "0x200", "1234567890"]
)
def test_context_env_value_not_a_whole_number_above_zero_gives_no_context(value: str) -> None:
    assert launched_context(_launch(SERVER, {"LLAMA_ARG_CTX_SIZE": value})) is None
    assert launched_context(_launch(PY, {"N_CTX": value})) is None


def test_context_option_wins_over_the_env_when_both_are_given() -> None:
    env = {"LLAMA_ARG_CTX_SIZE": "512", "N_CTX": "512"}
    assert launched_context(_launch([*SERVER, "--ctx-size", "1024"], env)) == ("--ctx-size", 1024)
    assert launched_context(_launch([*PY, "--n_ctx", "1024"], env)) == ("--n_ctx", 1024)
    # an option written with a value read otherwise still wins: the context is then not known
    assert launched_context(_launch([*SERVER, "-c", "0"], env)) is None
    assert launched_context(_launch([*PY, "--n_ctx", "auto"], env)) is None


def test_context_env_vars_that_differ_give_no_context() -> None:
    # the same program's variable in two cases (which one pydantic-settings takes depends on the order)
    assert launched_context(_launch(PY, {"N_CTX": "128", "n_ctx": "256"})) is None
    # both llama.cpp programs' variables: each program reads only its own (fix 133)
    assert launched_context(_launch(PY, {"N_CTX": "128", "LLAMA_ARG_CTX_SIZE": "256"})) == ("N_CTX", 128)
    assert launched_context(_launch(SERVER, {"N_CTX": "128", "LLAMA_ARG_CTX_SIZE": "256"})) == (
        "LLAMA_ARG_CTX_SIZE",
        256,
    )


# ---------------------------------------------- fix 133 (audit 93 f1): only the launched program's variable


@pytest.mark.parametrize(
    ("command", "env"),
    [
        (PY, {"LLAMA_ARG_CTX_SIZE": "128"}),  # llama-server's variable: llama-cpp-python runs its 2048
        (SERVER, {"N_CTX": "128"}),  # llama-cpp-python's variable: llama-server ignores it
        (SERVER, {"n_ctx": "128"}),  # in another case
        (
            ["/venv/bin/python3.11", "-I", "-m", "llama_cpp.server", "--model", "/m.gguf"],
            {"LLAMA_ARG_CTX_SIZE": "128"},
        ),
    ],
)
def test_context_variable_the_launched_program_does_not_read_excuses_nothing(
    command: list[str], env: dict[str, str]
) -> None:
    """The failure: ``python -m llama_cpp.server`` with only LLAMA_ARG_CTX_SIZE=128 set was read as launched
    with 128 (the variables of every program of the kind), and its engine's HTTP 500 at 175 tokens excused."""
    launched = launched_context(_launch(command, env))
    assert launched == (PY_DEFAULT if "llama_cpp.server" in command else None)
    assert refusal(_probe("LLAMA_ARG_CTX_SIZE", 128), PARAMS, launched=launched) is None
    assert refusal(_probe("N_CTX", 128), PARAMS, launched=launched) is None


@pytest.mark.parametrize(
    "command",
    [
        ["/venv/bin/python", "serve.py", "--model", "/m.gguf"],  # a script: its reading is not known
        ["/venv/bin/python", "-c", "import llama_cpp.server", "--model", "/m.gguf"],  # code
        ["/opt/bin/my-server", "--model", "/m.gguf"],  # a program not known
        ["sudo", *PY],  # a launcher the reader does not know: the program is not told
        ["taskset", "-p", "0", *PY],  # a launcher option that runs no engine (fix 136)
        ["/venv/bin/python", "-m", "llama_cpp.serverx", "--model", "/m.gguf"],  # renamed module
        ["/venv/bin/python", "-m", "llama_cpp", "--model", "/m.gguf"],  # another module
    ],
)
def test_context_variable_of_a_program_that_cannot_be_told_is_not_known(command: list[str]) -> None:
    both = {"N_CTX": "128", "LLAMA_ARG_CTX_SIZE": "128"}
    assert launched_context(_launch(command, both)) is None
    assert launched_context(_launch(command, {"N_CTX": "128"})) is None
    assert launched_context(_launch(command, {"LLAMA_ARG_CTX_SIZE": "128"})) is None


def test_context_variable_of_the_program_run_by_interpreter_options_is_read() -> None:
    """``python -I -W ignore -m llama_cpp.server``, ``-Im``: the program is told past the interpreter's own
    options; its own variable counts, the other program's does not."""
    for head in (
        ["/v/python3", "-I", "-W", "ignore", "-m"],
        ["/v/python", "-Im"],
        ["/v/python", "-mllama_cpp.server"],
    ):
        command = (
            [*head, "llama_cpp.server", "--model", "/m"]
            if head[-1] in ("-m", "-Im")
            else [*head, "--model", "/m"]
        )
        assert launched_context(_launch(command, {"N_CTX": "256"})) == ("N_CTX", 256)
        assert launched_context(_launch(command, {"LLAMA_ARG_CTX_SIZE": "256"})) == PY_DEFAULT


@pytest.mark.parametrize("engine", ["vllm", "sglang", "generic"])
def test_context_env_of_another_engine_kind_is_not_read(engine: str) -> None:
    """vLLM and SGLang read no context variable: an inherited LLAMA_ARG_CTX_SIZE is nothing to them. The
    options are the launch's kind's (the collector's reading): an engine recorded as sglang or generic whose
    command writes vLLM's option has no context known."""
    launch = _launch(VLLM, {"LLAMA_ARG_CTX_SIZE": "512", "N_CTX": "512"}, engine)
    assert launched_context(launch) is None
    given = launched_context({**launch, "command": [*VLLM, "--max-model-len", "256"]})
    assert given == (("--max-model-len", 256) if engine == "vllm" else None)


@pytest.mark.parametrize("env", [None, ["N_CTX=128"], {"N_CTX": 128}, {"N_CTX": None}, "N_CTX=128"])
def test_context_env_missing_or_mistyped_gives_no_context(env: Any) -> None:
    launch = _launch(PY, env)
    if env is None:
        del launch["env"]
    assert launched_context(launch) is None
    # the option is still read: the environment cannot change what it gives
    assert launched_context({**launch, "command": [*PY, "--n_ctx", "64"]}) == ("--n_ctx", 64)


@pytest.mark.parametrize(
    ("command", "given"),
    [
        (["env", "N_CTX=256", *PY], ("N_CTX", 256)),
        (["env", "-u", "N_CTX", *PY], PY_DEFAULT),
        (["/usr/bin/env", "-i", *PY], PY_DEFAULT),
        (["taskset", "-c", "0", "env", "LLAMA_ARG_CTX_SIZE=256", *SERVER], ("LLAMA_ARG_CTX_SIZE", 256)),
    ],
)
def test_context_env_under_an_env_launcher_is_applied_to_the_record(
    command: list[str], given: tuple[str, int]
) -> None:
    """Fix 136: the launcher's items are in the recorded command, applied to the recorded ``env`` as the
    collector applies them (``ledger.answers.skip_launchers``)."""
    assert launched_context(_launch(command, {"N_CTX": "128", "LLAMA_ARG_CTX_SIZE": "128"})) == given


# ------------------------------------------------------------------ 2. the window the refusal states


def _vllm_400(window: int) -> dict[str, Any]:
    return {
        "check": "completion",
        "http_status": 400,
        "error": f"HTTP 400: This model's maximum context length is {window} tokens. However, you asked 300",
    }


def test_sizing_400_stating_another_window_than_launched_is_not_excused() -> None:
    """The failure: a 400 stating 4096 tokens, the launch giving --max-model-len 256, was excused."""
    assert refusal(_vllm_400(4096), PARAMS, launched=("--max-model-len", 256)) is None
    assert refusal(_vllm_400(256), PARAMS, launched=("--max-model-len", 256)) == REFUSAL_CONTEXT


@pytest.mark.parametrize(
    ("length", "window", "explained"),
    [
        (256, 256, True),  # vLLM: as given
        (100, 256, True),  # llama.cpp pads up to 256
        (300, 512, True),
        (513, 768, True),
        (128, 255, True),
        (100, 512, False),  # larger than the padding explains
        (256, 512, False),
        (256, 257, False),
        (256, 255, False),  # smaller: the engine served less than launched
        (4096, 2048, False),  # a model's own length below the launched one
        (4096, 1024, False),  # a slot's share
    ],
)
def test_stated_window_larger_or_smaller_than_the_launch_gives(
    length: int, window: int, explained: bool
) -> None:
    assert window_explained(window, length) is explained
    shown = refusal(_vllm_400(window), PARAMS, launched=("--n_ctx", length))
    assert shown == (REFUSAL_CONTEXT if explained else None)


def test_context_padding_is_llama_cpps() -> None:
    assert CONTEXT_PADDING == 256
    assert window_explained(CONTEXT_PADDING, 1) and not window_explained(2 * CONTEXT_PADDING, 1)


def test_llama_servers_stated_window_is_held_to_the_launch() -> None:
    error = (
        "HTTP 400: request (600 tokens) exceeds the available context size (512 tokens), try increasing it"
    )
    probe = {"check": "completion", "http_status": 400, "error": error}
    assert stated_windows(error) == (512,)
    assert refusal(probe, PARAMS, launched=("LLAMA_ARG_CTX_SIZE", 512)) == REFUSAL_CONTEXT
    assert refusal(probe, PARAMS, launched=("LLAMA_ARG_CTX_SIZE", 1024)) is None


def test_stated_window_missing_from_the_text_leaves_the_refusal_to_its_pattern() -> None:
    """llama-server's older words state no window: nothing to hold, the engine's own word stands."""
    error = "HTTP 400: the request exceeds the available context size, try increasing it"
    assert stated_windows(error) == ()
    probe = {"check": "completion", "http_status": 400, "error": error}
    assert refusal(probe, PARAMS, launched=("--ctx-size", 512)) == REFUSAL_CONTEXT
    # a window stated in a phrasing no engine uses is none stated
    assert stated_windows("maximum context length is about 4096 tokens") == ()


def test_stated_window_without_a_known_context_is_held_to_the_records_own() -> None:
    """The collector (no launch passed) and a policy that knows no launch hold it to the record's context."""
    probe = {**_vllm_400(4096), "details": {"context": context_record("--max-model-len", 256, 300)}}
    assert refusal(probe, PARAMS) is None
    assert refusal(probe, PARAMS, launched=None) is None
    assert refusal({**probe, "error": _vllm_400(256)["error"]}, PARAMS) == REFUSAL_CONTEXT
    # nothing known at all: the refusal rests on its pattern, as before
    assert refusal(_vllm_400(4096), PARAMS) == REFUSAL_CONTEXT


def _cut(sizing_window: int, length: int = 256) -> dict[str, Any]:
    """A harness request llama-cpp-python cut, whose sizing request the engine refused with a 400."""
    sizing = (400, f"HTTP 400: This model's maximum context length is {sizing_window} tokens. However, 472")
    return {
        "check": HARNESS_REQUEST,
        "http_status": 200,
        "error": "stream cut",
        "count": 0,
        "prompt_count": 0,
        "max_tokens": 64,
        "details": {"context": context_record("--n_ctx", length, None, sizing)},
    }


def test_sizing_refusal_stating_another_window_than_the_record_is_not_excused() -> None:
    assert refusal(_cut(256), PARAMS, launched=("--n_ctx", 256)) == REFUSAL_CONTEXT
    assert refusal(_cut(256), PARAMS) == REFUSAL_CONTEXT
    assert refusal(_cut(4096), PARAMS, launched=("--n_ctx", 256)) is None
    assert refusal(_cut(4096), PARAMS) is None
    assert refusal(_cut(128), PARAMS) is None  # smaller than the record's context
    assert refusal(_cut(256, length=200), PARAMS) == REFUSAL_CONTEXT  # 200 padded to 256


def test_streamed_error_stating_another_window_is_not_excused() -> None:
    """llama-cpp-python's "Requested tokens (N) exceed context window of M": M held like any other."""
    request = {
        **_cut(256),
        "error": "Requested tokens (480) exceed context window of 4096",
        "details": {"context": context_record("--n_ctx", 256, 480)},
    }
    assert refusal(request, PARAMS, launched=("--n_ctx", 256)) is None
    request["error"] = "Requested tokens (480) exceed context window of 256"
    assert refusal(request, PARAMS, launched=("--n_ctx", 256)) == REFUSAL_CONTEXT
