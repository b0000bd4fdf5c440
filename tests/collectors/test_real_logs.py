"""The classifier and phase parser against logs saved from real engine runs (tests/fixtures/engine_logs)."""

from __future__ import annotations

import pytest

from ledger.collectors.phases import parse_phases
from ledger.signatures import RunOutcome, classify

from .conftest import ENGINE_LOGS


def test_vllm_cpu_head_dim16_first_request_is_classified() -> None:
    text = (ENGINE_LOGS / "vllm_cpu_head_dim16_first_request.log").read_text()
    c = classify(text, RunOutcome(ready=True, exit_code=0))
    assert c.signature == "cpu-attention-unsupported"
    assert "Unsupported CPU attention configuration: head_dim=16" in (c.detail or "")
    assert "engine-dead" in c.matched


def test_vllm_cpu_mem_util_092_dies_before_readiness_classified() -> None:
    text = (ENGINE_LOGS / "vllm_cpu_mem_util_092.log").read_text()
    c = classify(text, RunOutcome(ready=False, exit_code=1))
    assert c.signature == "cpu-memory-utilization"
    assert "less than desired CPU memory utilization" in (c.detail or "")
    assert "engine-died-before-readiness" in c.matched


def test_vllm_cpu_ready_log_phases() -> None:
    phases = parse_phases((ENGINE_LOGS / "vllm_cpu_ready.log").read_text().splitlines())
    assert phases["weights_loaded_s"] == 0.01
    assert "api_server_started" not in phases  # a marker phase has no value, only an arrival time


def test_llamacpp_ready_log_is_not_a_failure_when_ready() -> None:
    text = (ENGINE_LOGS / "llamacpp_ready.log").read_text()
    c = classify(text, RunOutcome(ready=True, signal=15))
    assert c.signature == "killed-sigterm"  # status-only: counts only when someone else sent it


@pytest.mark.parametrize(
    ("name", "line"),
    [
        ("llamacpp_truncated_model.log", "model is corrupted or incomplete"),
        ("llamacpp_gguf_header_cut.log", "gguf_init_from_reader: failed to read key-value pairs"),
        ("vllm_cpu_truncated_safetensors.log", "incomplete metadata, file not fully covered"),
        ("vllm_cpu_model_dir_without_config.log", "ensure the presence of a 'config.json'"),
    ],
)
def test_real_engines_on_corrupt_model_files_are_classified_as_such(name: str, line: str) -> None:
    """Seed 004's model directory corrupted by racing downloads, as the real engines meet it: llama.cpp on
    a GGUF whose tensors or header are cut short; vLLM-CPU 0.32 on a copy of the tiny Llama whose
    safetensors shard is cut in half (the worker's SafetensorError, then `Engine core initialization
    failed`) or that lacks its config.json — not a generic death before readiness."""
    c = classify((ENGINE_LOGS / name).read_text(), RunOutcome(ready=False, exit_code=1))
    assert c.signature == "model-files-corrupt", name
    assert line in (c.detail or ""), (name, c.detail)
    assert "engine-died-before-readiness" in c.matched


def test_safetensors_shards_cut_short_are_classified_as_corrupt_model_files() -> None:
    """The errors safetensors (vLLM's and transformers' loader) raises for a shard cut short, as
    safetensors 0.x prints them (read from a truncated copy of the tiny Llama's shard)."""
    for message in (
        "Error while deserializing header: incomplete metadata, file not fully covered",
        "Error while deserializing header: header too small",
        "Error while deserializing header: invalid header length",
    ):
        text = f"(EngineCore pid=1) safetensors_rust.SafetensorError: {message}\n"
        c = classify(text, RunOutcome(ready=False, exit_code=1))
        assert c.signature == "model-files-corrupt", message
    # after readiness the same words are no start-up failure of this kind
    late_line = "SafetensorError: Error while deserializing header\n"
    late = classify(late_line, RunOutcome(ready=True, exit_code=1))
    assert late.signature != "model-files-corrupt"
