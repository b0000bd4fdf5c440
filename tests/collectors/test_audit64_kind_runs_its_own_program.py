"""Audit 64: the neighbours of the model check by program (issue 11).

- f1 (fail-open): the model options were chosen by ``[engine] kind``, not by the program the command runs:
  kind vllm running ``python -m llama_cpp.server --model {model} --config_file other.json`` (llama-cpp-python
  loads the config's models) or ``llama-server --model {model} -m other.gguf`` (the last wins), and kind
  llamacpp running ``vllm serve OTHER`` with ``MODEL={model}``, loaded. A known program of another kind is
  refused now (``_KIND_OF_PROGRAM``).
- f2 (fail-open): a vLLM draft model outside the pin through ``--spec-model``, ``-sc`` or
  ``--speculative-config.model`` (vLLM folds the dotted form into the JSON option) loaded.
- f3 (wrong blame): ``python -Im llama_cpp.server`` (CPython's joined short options) was not read as
  llama-cpp-python, so llama-server's ``-m`` and ``LLAMA_ARG_MODEL`` were taken: the engine then failed to
  start and was blamed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.collectors.test_fix72_model_check_reads_the_program import (
    _campaign,
    _loads,
    _other,
    _pinned,
    _refused,
)


@pytest.fixture(autouse=True)
def _no_inherited_model(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MODEL", "model", "Model", "LLAMA_ARG_MODEL"):
        monkeypatch.delenv(name, raising=False)


# --- f1 ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "command", "runs"),
    [
        (
            "vllm",
            ["{python}", "-m", "llama_cpp.server", "--model", "{model}", "--config_file", "o.json"],
            "llama_cpp",
        ),
        ("vllm", ["llama-server", "--model", "{model}", "-m", "OTHER"], "llama-server"),
        ("llamacpp", ["vllm", "serve", "OTHER"], "'vllm'"),
        (
            "llamacpp",
            ["{python}", "-m", "vllm.entrypoints.openai.api_server", "--model", "{model}"],
            "vllm.entry",
        ),
        (
            "sglang",
            ["{python}", "-m", "vllm.entrypoints.openai.api_server", "--model", "{model}"],
            "vllm.entry",
        ),
        ("vllm", ["{python}", "-m", "sglang.launch_server", "--model-path", "{model}"], "sglang"),
        ("vllm", ["taskset", "-c", "0", "llama-server", "--model", "{model}"], "llama-server"),
    ],
)
def test_a_kind_running_another_kinds_program_loaded_what_that_program_reads(
    tmp_path: Path, kind: str, command: list[str], runs: str
) -> None:
    p = _campaign(
        tmp_path, command, kind=kind, env={"MODEL": _pinned(tmp_path)} if kind == "llamacpp" else None
    )
    _refused(p, f"[engine] kind is {kind!r}, but the command runs", runs)


@pytest.mark.parametrize(
    ("kind", "command"),
    [
        ("vllm", ["vllm", "serve", "{model}"]),
        ("vllm", ["{python}", "-m", "vllm.entrypoints.openai.api_server", "--model", "{model}"]),
        ("llamacpp", ["llama-server", "--model", "{model}"]),
        ("llamacpp", ["{python}", "-m", "llama_cpp.server", "--model", "{model}"]),
        ("generic", ["llama-server", "--model", "{model}"]),  # generic keeps its own rule
    ],
)
def test_a_kind_running_its_own_program_still_loads(tmp_path: Path, kind: str, command: list[str]) -> None:
    _loads(_campaign(tmp_path, command, kind=kind))


# --- f2 ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "extra",
    [
        ["--spec-model", "DRAFT", "--spec-tokens", "2"],
        ["--spec_model=DRAFT"],
        ["-sc", '{"model": "DRAFT", "num_speculative_tokens": 2}'],
        ["--speculative-config.model", "DRAFT"],
        ["--speculative-config.model=DRAFT"],
        ["--default-mm-loras", '{"image": "DRAFT"}'],
    ],
)
def test_a_vllm_draft_model_outside_the_pin_in_another_spelling_loaded(
    tmp_path: Path, extra: list[str]
) -> None:
    draft = str(tmp_path / "draft")
    args = [a.replace("DRAFT", draft) for a in extra]
    p = _campaign(tmp_path, ["vllm", "serve", "{model}", *args], kind="vllm")
    _refused(p, "makes the engine load weights or tokenizer files the pin does not cover")


@pytest.mark.parametrize(
    "extra",
    [
        ["--speculative-config.method", "ngram"],  # a method that loads no file
        ["-sc", '{"method": "ngram", "num_speculative_tokens": 2}'],
        ["--spec-model", "PINNED/draft"],  # inside the pinned folder
    ],
)
def test_a_speculative_setting_naming_no_file_outside_the_pin_still_loads(
    tmp_path: Path, extra: list[str]
) -> None:
    args = [a.replace("PINNED", _pinned(tmp_path)) for a in extra]
    _loads(_campaign(tmp_path, ["vllm", "serve", "{model}", *args], kind="vllm"))


# --- f3 ----------------------------------------------------------------------------------------------------


def test_python_joined_flags_before_m_were_not_read_as_llama_cpp_python(tmp_path: Path) -> None:
    p = _campaign(tmp_path, ["{python}", "-Im", "llama_cpp.server", "-m", "{model}"])
    _refused(p, "-m is no option of llama_cpp.server")


def test_python_joined_flags_with_only_llama_servers_variable_names_no_model(tmp_path: Path) -> None:
    p = _campaign(
        tmp_path, ["{python}", "-Im", "llama_cpp.server"], env={"LLAMA_ARG_MODEL": _pinned(tmp_path)}
    )
    _refused(p, "names no model")


@pytest.mark.parametrize(
    "python",
    [
        ["{python}", "-Im", "llama_cpp.server"],
        ["{python}", "-I", "-m", "llama_cpp.server"],
        ["{python}", "-Imllama_cpp.server"],
        ["{python}", "-uBm", "llama_cpp.server"],
        ["{python}", "-IWignore", "-m", "llama_cpp.server"],
        ["{python}", "-W", "ignore", "-m", "llama_cpp.server"],
    ],
)
def test_python_option_spellings_run_llama_cpp_python(tmp_path: Path, python: list[str]) -> None:
    _loads(_campaign(tmp_path, [*python, "--model", "{model}"]))
    other = tmp_path / "o"
    other.mkdir()
    _refused(_campaign(other, [*python, "--model", _other(other)]), "would load")


def test_the_kind_table_and_the_program_tables_agree() -> None:
    """One vocabulary: every engine program and every program-keyed model table names a kind."""
    from ledger.collectors import campaign as c

    kinds = {"llamacpp", "vllm", "sglang", "generic"}
    assert set(c._KIND_OF_PROGRAM.values()) <= kinds
    assert all(p in c._KIND_OF_PROGRAM for p in c.ENGINE_PROGRAMS)
    for program in c._MODEL_OPTIONS:
        assert program in kinds or program in c._KIND_OF_PROGRAM, program
    assert set(c._KIND_PROGRAMS["llamacpp"]) == {p for p, k in c._KIND_OF_PROGRAM.items() if k == "llamacpp"}
