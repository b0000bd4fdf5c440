"""fix140 (audit 96 f3): ``ledger campaign init --engine llamacpp …`` always wrote ``require_gpu = true`` and
``min_disk_free_gib = 20`` (the GPU templates'), with no way to say the host has no GPU: on a CPU host the
documented next step (``ledger collect run``) recorded NOT QUALIFIED — PREREQUISITES, which then stood
against the subject's routes.

Now ``--cpu`` writes a campaign for a CPU-only host: the host gate requires no GPU and asks a small disk
minimum (``CPU_MIN_DISK_FREE_GIB``), the engine command names no GPU option (llama.cpp: no
``--n_gpu_layers``; vLLM: its CPU backend, ``--gpu-memory-utilization`` the share of host memory it
reserves); ``--cpu`` with ``--gpus`` is refused; without ``--cpu`` the message says the host gate expects a
GPU."""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

import pytest

import ledger.collectors.campaign as campaign_mod
from ledger.collectors.campaign import CampaignRunner, _GateFailed, load_campaign
from ledger.collectors.campaign_init import CPU_MIN_DISK_FREE_GIB, TEMPLATES, _cpu_command
from ledger.collectors.gpu import GpuScan
from ledger.collectors.host import EnvInfo
from ledger.errors import ConfigError
from ledger.recorder import LocalRecorder

from .conftest import run_ledger


def _gguf(tmp_path: Path) -> Path:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF" + bytes(60))
    return gguf


def _init(tmp_path: Path, *args: str) -> tuple[int, str, str, Path]:
    out = tmp_path / "c.toml"
    r = run_ledger(
        "campaign", "init", "--host", "cpu-box-3", "--python", sys.executable, "--out", str(out), *args
    )
    return r.returncode, r.stdout, r.stderr, out


def _host_gate(
    tmp_path: Path, campaign_file: Path, recorder: LocalRecorder, mp: pytest.MonkeyPatch
) -> str | None:
    """The host gate's refusal on a host without GPUs (None: it passed)."""
    runner = CampaignRunner(
        load_campaign(campaign_file), recorder, work_dir=tmp_path / "work", handle_signals=False
    )
    scan = GpuScan(gpus=[], source="none")
    scan.note = "no GPU found"
    mp.setattr(campaign_mod, "scan_gpus", lambda: scan)
    env = {"interpreter": sys.executable, "python": "3.11", "packages": {}, "env": {}, "details": {}}
    runner._env = EnvInfo(payload=env, freeze="")
    try:
        runner._gate_host()
    except _GateFailed as e:
        return e.reason
    return None


def test_campaign_init_on_a_cpu_host_wrote_require_gpu(
    tmp_path: Path, recorder: LocalRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    rc, stdout, stderr, out = _init(
        tmp_path, "--engine", "llamacpp", "--model", str(_gguf(tmp_path)), "--cpu"
    )
    assert rc == 0, stderr
    assert "its host gate requires no GPU" in stdout
    c = load_campaign(out)
    assert c.spec.gates.host.require_gpu is False
    assert c.spec.gates.host.min_disk_free_gib == CPU_MIN_DISK_FREE_GIB
    command = c.spec.engine.command
    assert "--n_gpu_layers" not in command and "-1" not in command
    # the rest of the template's command stays, in order, and so does its note on it
    template = tomllib.loads((TEMPLATES / "llamacpp-gpu.toml").read_text())["engine"]["command"]
    i = template.index("--n_gpu_layers")
    assert command == template[:i] + template[i + 2 :]
    text = out.read_text()
    assert "# llama-cpp-python otherwise cuts the stream" in text
    assert "--cpu`" in text.splitlines()[0]
    assert "CPU only" in c.spec.campaign.description
    assert "CUDA_VISIBLE_DEVICES" not in c.spec.engine.env
    # the documented next step passes the host gate on a host without GPUs
    assert _host_gate(tmp_path, out, recorder, monkeypatch) is None


def test_without_cpu_the_host_gate_expects_a_gpu_and_says_so(
    tmp_path: Path, recorder: LocalRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neighbour: no --cpu: the GPU template as it is, the message says so, and on a host without GPUs
    the host gate refuses (as it must: the campaign asked for one)."""
    rc, stdout, stderr, out = _init(tmp_path, "--engine", "llamacpp", "--model", str(_gguf(tmp_path)))
    assert rc == 0, stderr
    assert "its host gate requires a GPU (on a CPU-only host: campaign init --cpu)" in stdout
    c = load_campaign(out)
    host = tomllib.loads((TEMPLATES / "llamacpp-gpu.toml").read_text())["gates"]["host"]
    assert c.spec.gates.host.require_gpu is True is host["require_gpu"]
    assert c.spec.gates.host.min_disk_free_gib == host["min_disk_free_gib"]
    assert "--n_gpu_layers" in c.spec.engine.command
    reason = _host_gate(tmp_path, out, recorder, monkeypatch)
    assert reason is not None and "a GPU is required" in reason


def test_campaign_init_cpu_for_vllm(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    rc, stdout, stderr, out = _init(tmp_path, "--engine", "vllm", "--model", str(model), "--cpu", "--json")
    assert rc == 0, stderr
    shown = json.loads(stdout)
    assert shown["require_gpu"] is False and shown["min_disk_free_gib"] == CPU_MIN_DISK_FREE_GIB
    c = load_campaign(out)
    assert c.spec.gates.host.require_gpu is False
    assert c.spec.engine.env == {"HF_HUB_OFFLINE": "1", "VLLM_TARGET_DEVICE": "cpu"}
    command = c.spec.engine.command
    assert command.count("--gpu-memory-utilization") == 1
    assert command[command.index("--gpu-memory-utilization") + 1] == "0.5"  # of host memory, on the CPU
    assert "--tensor-parallel-size" not in command


@pytest.mark.parametrize(
    "order",
    [("--cpu", "--gpus", "0"), ("--gpus", "0", "--cpu"), ("--cpu", "--gpus", "0,1")],
    ids=["cpu-first", "gpus-first", "two-gpus"],
)
def test_cpu_with_gpus_is_refused_and_writes_nothing(tmp_path: Path, order: tuple[str, ...]) -> None:
    rc, _out, stderr, out = _init(tmp_path, "--engine", "vllm", "--model", "org/m", *order)
    assert rc == 2
    assert "--cpu and --gpus exclude each other" in stderr
    assert not out.exists()


def test_cpu_is_a_flag_not_a_value(tmp_path: Path) -> None:
    """Neighbour: a mistyped form (``--cpu yes``) is a usage error, never a GPU campaign written."""
    rc, _out, _err, out = _init(tmp_path, "--engine", "vllm", "--model", "org/m", "--cpu", "yes")
    assert rc == 2
    assert not out.exists()


def test_help_names_cpu() -> None:
    r = run_ledger("campaign", "init", "--help", env={"COLUMNS": "200"})
    assert r.returncode == 0
    assert "--cpu" in r.stdout and "CPU-only host" in r.stdout


@pytest.mark.parametrize(
    ("engine", "command", "expect"),
    [
        ("llamacpp", ["s", "--n_gpu_layers", "-1", "--n_ctx", "8"], ["s", "--n_ctx", "8"]),
        ("llamacpp", ["s", "--n_gpu_layers=99", "--n_ctx", "8"], ["s", "--n_ctx", "8"]),
        ("llamacpp", ["s", "--n-gpu-layers", "99"], ["s"]),
        ("llamacpp", ["s", "--n_ctx", "8"], ["s", "--n_ctx", "8"]),  # nothing to drop
        (
            "vllm",
            ["s", "--gpu-memory-utilization", "0.85", "--x"],
            ["s", "--gpu-memory-utilization", "0.5", "--x"],
        ),
        ("vllm", ["s", "--gpu-memory-utilization=0.9"], ["s", "--gpu-memory-utilization", "0.5"]),
        ("vllm", ["s"], ["s", "--gpu-memory-utilization", "0.5"]),  # dropped: set (vLLM's default is 0.9)
    ],
    ids=["space", "equals", "dashed", "absent", "vllm-set", "vllm-equals", "vllm-absent"],
)
def test_cpu_command_forms(engine: str, command: list[str], expect: list[str]) -> None:
    assert _cpu_command(engine, command) == expect


def test_cpu_command_flag_without_value_fails_closed() -> None:
    with pytest.raises(ConfigError, match="no value"):
        _cpu_command("llamacpp", ["s", "--n_gpu_layers"])
