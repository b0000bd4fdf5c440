"""A failed probe is excused as a request the campaign's context could not hold (``context_overflow``) only
where the context its record names is the one its attempt's launch gave the engine, as the policy derives it
from the launch's recorded command (``ledger.answers.launched_context``, the collector's ``read_context``):
the probe's ``details.context`` is the collector's claim (derive, don't trust)."""

from __future__ import annotations

from typing import Any

import pytest

from ledger.answers import REFUSAL_CONTEXT, context_record, launched_context, read_context, refusal

PARAMS: dict[str, Any] = {
    "refused_http_statuses": [401, 403],
    "context_refused_http_statuses": [400],
    "context_refusal_patterns": ["maximum context length is [0-9]+ tokens"],
    "request_form_refused_http_statuses": [400, 422],
    "request_form_refusal_patterns": ["^[0-9]+ validation errors? .*response_format"],
}
BROADCAST = "HTTP 500: could not broadcast input array from shape (259,) into shape (0,)"
COMMAND = [
    "/venv/bin/python",
    "-m",
    "llama_cpp.server",
    "--model",
    "/m.gguf",
    "--n_ctx",
    "128",
    "--port",
    "8080",
]


def _probe(check: str = "structured", length: int = 128) -> dict[str, Any]:
    return {
        "check": check,
        "ok": False,
        "http_status": 500,
        "error": BROADCAST,
        "max_tokens": 64,
        "count": 0,
        "details": {"context": context_record("--n_ctx", length, 111)},
    }


def _launch(**over: Any) -> dict[str, Any]:
    return {"engine": "llamacpp", "command": list(COMMAND), **over}


@pytest.mark.parametrize("check", ["completion", "structured", "sequential"])
def test_probe_whose_context_is_its_launchs_is_excused(check: str) -> None:
    launched = launched_context(_launch())
    assert launched == ("--n_ctx", 128)
    assert refusal(_probe(check), PARAMS, launched=launched) == REFUSAL_CONTEXT


def test_probe_recording_another_context_length_than_its_launchs_command_is_not_excused() -> None:
    launched = launched_context(_launch(command=[*COMMAND[:6], "4096", *COMMAND[7:]]))
    assert launched == ("--n_ctx", 4096)
    assert refusal(_probe(), PARAMS, launched=launched) is None


def test_probe_recording_another_context_option_than_its_launchs_is_not_excused() -> None:
    assert refusal(_probe(), PARAMS, launched=("--ctx-size", 128)) is None


def test_probe_without_a_launch_is_not_excused() -> None:
    assert refusal(_probe(), PARAMS, launched=None) is None


@pytest.mark.parametrize(
    "launch",
    [
        None,
        "llamacpp",
        {"command": COMMAND},  # engine missing
        _launch(engine=7),  # engine mistyped
        _launch(command=None),  # command missing
        _launch(command=" ".join(COMMAND)),  # command a text, not the argv
        _launch(command=[*COMMAND[:6], 128, *COMMAND[7:]]),  # an item mistyped
        _launch(command=[*COMMAND[:5], "--n_ctx=auto", *COMMAND[7:]]),  # a value read otherwise
        _launch(command=[*COMMAND[:5], *COMMAND[7:]]),  # no context option
        _launch(command=[*COMMAND, "--n_ctx", "0"]),  # the last one gives none
    ],
)
def test_launch_missing_or_its_command_mistyped_excuses_nothing(launch: Any) -> None:
    assert launched_context(launch) is None
    assert refusal(_probe(), PARAMS, launched=launched_context(launch)) is None


def test_last_context_option_of_the_recorded_command_is_the_one_launched() -> None:
    reordered = _launch(command=[*COMMAND, "--n_c=256"])  # a prefix the parser takes, the = form, last
    assert launched_context(reordered) == ("--n_c", 256)
    assert refusal(_probe(), PARAMS, launched=("--n_c", 256)) is None  # the record names --n_ctx 128


def test_context_refusal_the_engine_said_needs_no_launch() -> None:
    said = {**_probe(), "http_status": 400, "error": "maximum context length is 128 tokens"}
    assert refusal(said, PARAMS, launched=None) == REFUSAL_CONTEXT


def test_read_context_is_the_collectors_reading() -> None:
    from ledger.collectors.campaign import context_length

    argv = ["{python}", "-m", "llama_cpp.server", "--n_ctx", "128"]
    assert (
        context_length("llamacpp", argv) == read_context(("llama_cpp.server",), argv[3:]) == ("--n_ctx", 128)
    )
