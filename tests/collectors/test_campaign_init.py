"""`ledger campaign init`: a campaign file from a shipped template that `ledger collect run` accepts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledger.collectors.campaign import CampaignRunner, load_campaign
from ledger.collectors.corpus import corpus_digest
from ledger.policy.loader import load_policy
from ledger.recorder import LocalRecorder

from .conftest import run_ledger


def _init(tmp_path: Path, *args: str) -> tuple[int, str, str]:
    r = run_ledger("campaign", "init", *args)
    return r.returncode, r.stdout, r.stderr


def test_campaign_init_vllm_from_a_repo_id_writes_a_campaign_the_loader_accepts(
    tmp_path: Path, recorder: LocalRecorder
) -> None:
    out = tmp_path / "mine.toml"
    rc, stdout, stderr = _init(
        tmp_path, "--engine", "vllm", "--model", "Qwen/Qwen3-8B", "--host", "gpu-box-1",
        "--gpus", "0,1", "--out", str(out), "--json",
    )  # fmt: skip
    assert rc == 0, stderr
    assert json.loads(stdout)["path"] == str(out)
    c = load_campaign(out)
    assert c.id == "vllm-qwen3-8b-gpu-box-1"
    assert c.spec.campaign.host == "gpu-box-1"
    assert c.spec.model.repo_id == "Qwen/Qwen3-8B"
    assert c.model_name == "Qwen/Qwen3-8B"
    assert c.model_path.name == "models--Qwen--Qwen3-8B"
    assert c.spec.engine.kind == "vllm"
    assert c.spec.engine.env["CUDA_VISIBLE_DEVICES"] == "0,1"
    command = c.spec.engine.command
    assert command[command.index("--tensor-parallel-size") + 1] == "2"
    assert c.spec.gates.host.require_gpu is True
    # what the policy pins stays pinned, by absolute path: the file works wherever it is written
    params = load_policy("backend-qualification").params
    for gate, param in (
        (c.spec.gates.semantic, "semantic_corpus_digest"),
        (c.spec.gates.benchmark, "benchmark_corpus_digest"),
    ):
        assert gate.corpus is not None and Path(gate.corpus).is_absolute()
        assert gate.digest == corpus_digest(Path(gate.corpus)) == params[param]
    assert c.spec.gates.benchmark.requests == params["benchmark_requests"]
    # the campaign's host is the subject host of what it records
    runner = CampaignRunner(c, recorder, work_dir=tmp_path / "w", handle_signals=False)
    assert runner.subject["host"] == "gpu-box-1"


def test_campaign_init_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    out = tmp_path / "c.toml"
    out.write_text("# mine\n")
    rc, _out, stderr = _init(
        tmp_path, "--engine", "vllm", "--model", "org/m", "--host", "h", "--out", str(out)
    )
    assert rc == 2
    assert "exists" in stderr and "--force" in stderr
    assert out.read_text() == "# mine\n"
    rc, _out, stderr = _init(
        tmp_path, "--engine", "vllm", "--model", "org/m", "--host", "h", "--out", str(out), "--force"
    )
    assert rc == 0, stderr
    assert load_campaign(out).spec.campaign.host == "h"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--engine", "sglang", "--model", "org/m", "--host", "h"), "unknown engine 'sglang'"),
        (("--engine", "vllm", "--model", "not a model", "--host", "h"), "neither an existing path"),
        (("--engine", "vllm", "--model", "org/m", "--host", "bad host"), "is not a host name"),
        (("--engine", "vllm", "--model", "org/m", "--host", "h", "--gpus", "0,x"), "--gpus"),
        (("--engine", "vllm", "--model", "org/m", "--host", "h", "--gpus", "1,1"), "distinct"),
        (("--engine", "vllm", "--host", "h"), "--model"),
    ],
)
def test_campaign_init_bad_options_are_errors_and_write_nothing(
    tmp_path: Path, args: tuple[str, ...], expected: str
) -> None:
    out = tmp_path / "c.toml"
    rc, _out, stderr = _init(tmp_path, *args, "--out", str(out))
    assert rc == 2
    assert expected in stderr
    assert not out.exists()


def test_collect_run_accepts_a_llamacpp_campaign_from_init(tmp_path: Path, home: Path) -> None:
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF" + bytes(60))
    out = tmp_path / "llama.toml"
    rc, _out, stderr = _init(
        tmp_path, "--engine", "llamacpp", "--model", str(gguf), "--host", "cpu-box", "--gpus", "0",
        "--python", str(tmp_path / "no-such-python"), "--out", str(out),
    )  # fmt: skip
    assert rc == 0, stderr
    c = load_campaign(out)
    assert c.model_path == gguf.resolve()
    assert c.spec.engine.kind == "llamacpp"
    # the run starts (the file is accepted) and the ladder stops at the host gate: no such interpreter
    r = run_ledger("collect", "run", str(out), "--home", str(home), "--json")
    assert r.returncode == 1, r.stderr
    result = json.loads(r.stdout)
    first = result["gates"][0]
    assert (first["gate"], first["status"]) == ("host-prerequisites", "failed")
    assert result["campaign"] == c.id
