"""The shipped GPU-host campaign template loads strictly and pins exactly what the shipped policy approves."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.collectors.campaign import load_campaign
from ledger.collectors.corpus import corpus_digest
from ledger.errors import ConfigError
from ledger.policy.loader import load_policy

TEMPLATE = Path(__file__).resolve().parents[2] / "campaigns" / "templates" / "vllm-gpu.toml"


def test_vllm_gpu_template_loads_with_its_variables_set(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("MODEL_DIR", str(tmp_path / "snapshot"))
    monkeypatch.setenv("VLLM_PYTHON", "/opt/vllm/bin/python")
    c = load_campaign(TEMPLATE)
    assert c.model_path == tmp_path / "snapshot"
    assert c.python == "/opt/vllm/bin/python"
    assert c.spec.engine.kind == "vllm"
    assert c.spec.gates.host.require_gpu is True


def test_vllm_gpu_template_without_model_dir_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MODEL_DIR", raising=False)
    monkeypatch.setenv("VLLM_PYTHON", "/opt/vllm/bin/python")
    with pytest.raises(ConfigError, match="MODEL_DIR"):
        load_campaign(TEMPLATE)


def test_vllm_gpu_template_pins_the_corpora_the_policy_approves(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_DIR", "/models/x")
    monkeypatch.setenv("VLLM_PYTHON", "/opt/vllm/bin/python")
    c = load_campaign(TEMPLATE)
    params = load_policy("backend-qualification").params
    gates = c.spec.gates
    for gate, param in (
        (gates.semantic, "semantic_corpus_digest"),
        (gates.benchmark, "benchmark_corpus_digest"),
    ):
        assert gate.enabled
        assert gate.corpus is not None
        assert gate.digest == corpus_digest(TEMPLATE.parent / gate.corpus) == params[param]
    assert gates.benchmark.requests == params["benchmark_requests"]
    assert list(gates.benchmark.levels) == list(params["benchmark_concurrency"])
    assert gates.benchmark.repetitions == params["benchmark_repetitions"]
