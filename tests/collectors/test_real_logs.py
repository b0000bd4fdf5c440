"""The classifier and phase parser against logs saved from real engine runs (tests/fixtures/engine_logs)."""

from __future__ import annotations

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
