"""Parsers as specifications: kernel lines, GPU tool output, log phases, failure signatures, secrets."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from ledger.collectors.gpu import (
    parse_amd_smi_json,
    parse_nvidia_smi_csv,
    parse_nvidia_smi_xml,
    parse_rocm_smi_json,
)
from ledger.collectors.host import detect_wsl2
from ledger.collectors.kernel import last_reset, parse_kernel_log, parse_since
from ledger.collectors.phases import parse_phases
from ledger.collectors.secrets import REDACTED, Redactor, redact_command, redact_env
from ledger.errors import ConfigError, InputError
from ledger.signatures import RunOutcome, classify, load_signatures

from .conftest import FIXTURES

# --- kernel ---------------------------------------------------------------------------------------------


def test_seed003_strix_kernel_events_in_order() -> None:
    events = parse_kernel_log((FIXTURES / "kernel_strix_gpu_hang.log").read_text())
    kinds = [e["kind"] for e in events]
    assert kinds == [
        "mes-failure",
        "mes-unrecoverable",
        "mes-failure",
        "queue-eviction-failed",
        "amdgpu-ring-timeout",
        "gpu-reset-begin",
        "vram-lost",
        "gpu-reset-succeeded",
    ]
    assert all(e["device"] == "0000:c3:00.0" for e in events)
    assert events[5]["time"] == "2026-09-09T09:01:15.002114Z"
    assert last_reset(events) == "2026-09-09T09:01:18.520093Z"


def test_nvrm_xid_lines_from_raw_dmesg() -> None:
    boot = datetime(2026, 9, 1, 17, 0, 0, tzinfo=UTC)
    events = parse_kernel_log((FIXTURES / "kernel_nvrm_xid.dmesg").read_text(), boot_time=boot)
    xids = [e for e in events if e["kind"] == "nvrm-xid"]
    assert [e["xid"] for e in xids] == [79, 13]
    assert xids[0]["device"] == "PCI:0000:01:00"
    assert xids[0]["time"] == "2026-09-01T17:58:32.204415Z"
    assert [e["kind"] for e in events if e["kind"] == "gpu-fell-off-bus"] == ["gpu-fell-off-bus"]
    assert not any("e1000e" in e["message"] for e in events)


def test_raw_dmesg_without_boot_time_has_no_time() -> None:
    events = parse_kernel_log("[ 12.5] amdgpu 0000:03:00.0: amdgpu: GPU reset begin!")
    assert events == [
        {
            "time": None,
            "kind": "gpu-reset-begin",
            "message": "amdgpu 0000:03:00.0: amdgpu: GPU reset begin!",
            "device": "0000:03:00.0",
        }
    ]


def test_dmesg_iso_time_format() -> None:
    events = parse_kernel_log(
        "2026-09-09T09:01:18,441207+00:00 amdgpu 0000:c3:00.0: amdgpu: VRAM is lost due to GPU reset!"
    )
    assert events[0]["kind"] == "vram-lost"
    assert events[0]["time"] == "2026-09-09T09:01:18.441207Z"


def test_parse_since() -> None:
    now = datetime(2026, 9, 9, 12, 0, tzinfo=UTC)
    assert parse_since("2 hours ago", now) == datetime(2026, 9, 9, 10, 0, tzinfo=UTC)
    assert parse_since("30 min ago", now) == datetime(2026, 9, 9, 11, 30, tzinfo=UTC)
    assert parse_since("2026-09-09T09:00:00Z") == datetime(2026, 9, 9, 9, 0, tzinfo=UTC)
    with pytest.raises(InputError):
        parse_since("yesterday-ish")


# --- GPU tools ------------------------------------------------------------------------------------------


def test_nvidia_smi_csv() -> None:
    [g] = parse_nvidia_smi_csv((FIXTURES / "nvidia_smi_query.csv").read_text(), cuda="12.9")
    assert g["name"] == "NVIDIA GeForce RTX 5090"
    assert g["driver"] == "576.88"
    assert g["memory_total_mib"] == 32607.0
    assert g["utilization_pct"] == 3.0
    assert g["cuda"] == "12.9"


def test_nvidia_smi_xml() -> None:
    [g] = parse_nvidia_smi_xml((FIXTURES / "nvidia_smi_q.xml").read_text())
    assert (g["name"], g["driver"], g["cuda"]) == ("NVIDIA GeForce RTX 5090", "576.88", "12.9")
    assert g["uuid"] == "GPU-3f6c1b9e-7a0d-4c35-9f7e-2b1d8c0a9e51"
    assert g["memory_total_mib"] == 32607.0
    assert g["memory_used_mib"] == 1536.0
    assert g["pci_bus_id"] == "00000000:01:00.0"


def test_amd_smi_json() -> None:
    [g] = parse_amd_smi_json((FIXTURES / "amd_smi_static.json").read_text(), rocm="7.0.1")
    assert g["vendor"] == "amd"
    assert g["name"] == "AMD Radeon 8060S"
    assert g["memory_total_mib"] == 65536.0
    assert g["pci_bus_id"] == "0000:c3:00.0"
    assert g["details"]["asic.target_graphics_version"] == "gfx1151"
    assert g["rocm"] == "7.0.1"


def test_rocm_smi_json() -> None:
    [g] = parse_rocm_smi_json((FIXTURES / "rocm_smi.json").read_text())
    assert g["name"] == "AMD Radeon 8060S"
    assert g["memory_total_mib"] == 65536.0
    assert g["memory_used_mib"] == 1024.0
    assert g["driver"] == "6.12.12"


def test_wsl2_detection() -> None:
    assert detect_wsl2("Linux version 6.6.87.2-microsoft-standard-WSL2 (root@host)", env={})
    assert not detect_wsl2("Linux version 6.18.44-fc (builder@sandboxing)", env={})


# --- log phases -------------------------------------------------------------------------------------------


def test_vllm_phase_lines() -> None:
    lines = [
        "(EngineCore pid=11) INFO 09-01 18:02:44 [default_loader.py:314] Loading weights took 93.66 seconds",
        "(EngineCore pid=11) INFO 09-01 18:02:45 [gpu_model_runner.py:3503] "
        "Model loading took 12.0 GiB memory "
        "and 95.180000 seconds",
        "(EngineCore pid=11) INFO 09-01 18:02:50 [gpu_worker.py:298] Available KV cache memory: 10.25 GiB",
    ]
    assert parse_phases(lines) == {
        "weights_loaded_s": 93.66,
        "model_memory_gib": 12.0,
        "model_loading_s": 95.18,
        "kv_cache_gib": 10.25,
    }


def test_llamacpp_phase_lines_from_real_log() -> None:
    text = (Path(__file__).parents[1] / "fixtures" / "engine_logs" / "llamacpp_ready.log").read_text()
    phases = parse_phases(text.splitlines())
    assert phases["model_file_mib"] == 0.44
    assert "load_ms" in phases


# --- failure signatures -----------------------------------------------------------------------------------


def test_shipped_signatures_load_and_cover_the_seed_failures() -> None:
    ids = {s.id for s in load_signatures()}
    assert {
        "uva-unavailable",
        "weight-repack-failed",
        "cuda-oom",
        "engine-died-before-readiness",
        "gpu-hang",
        "abort",
        "killed-143",
        "cpu-attention-unsupported",
        "cpu-memory-utilization",
        "lease-expired",
    } <= ids


@pytest.mark.parametrize(
    ("text", "outcome", "expected"),
    [
        ("RuntimeError: UVA is not available", RunOutcome(ready=False, exit_code=1), "uva-unavailable"),
        (
            "RuntimeError: gptq_marlin_repack failed: CUDA error",
            RunOutcome(ready=False, exit_code=1),
            "weight-repack-failed",
        ),
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate",
            RunOutcome(ready=False, exit_code=1),
            "cuda-oom",
        ),
        (
            "HW Exception by GPU node-1 (Agent handle: 0x5) reason :GPU Hang",
            RunOutcome(ready=True, signal=6),
            "gpu-hang",
        ),
        ("nothing useful", RunOutcome(ready=True, signal=6), "abort"),
        (
            "llama.cpp/ggml/src/ggml.c:1234: GGML_ASSERT(ggml_nelements(a) == ne0*ne1) failed",
            RunOutcome(ready=False, signal=6),
            "abort-at-startup",
        ),
        ("GGML_ASSERT(n_tokens_all <= cparams.n_batch) failed", RunOutcome(ready=True, signal=6), "abort"),
        ("nothing useful", RunOutcome(ready=False, exit_code=143), "killed-143"),
        (
            "Loading weights took 16.18 seconds",
            RunOutcome(ready=False, exit_code=1),
            "engine-died-before-readiness",
        ),
        (
            "Loading weights took 12.40 seconds",
            RunOutcome(ready=False, signal=15, lease_expired=True),
            "lease-expired",
        ),
    ],
)
def test_classify(text: str, outcome: RunOutcome, expected: str) -> None:
    assert classify(text, outcome).signature == expected


def test_classify_detail_is_the_matching_line() -> None:
    c = classify("a\n(EngineCore pid=7) ERROR RuntimeError: UVA is not available\nb", RunOutcome(ready=False))
    assert c.detail == "(EngineCore pid=7) ERROR RuntimeError: UVA is not available"
    assert c.matched[-1] == "engine-died-before-readiness"


def test_bad_signature_file_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "s.toml"
    p.write_text('[[signature]]\nid = "x"\npatterns = ["("]\n')
    with pytest.raises(ConfigError):
        load_signatures(p)
    p.write_text('[[signature]]\nid = "x"\nbogus = 1\n')
    with pytest.raises(ConfigError):
        load_signatures(p)


# --- secrets ---------------------------------------------------------------------------------------------


def test_secrets_redacted_in_env_and_command() -> None:
    env = redact_env(
        {
            "HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz0123456789",
            "VLLM_USE_V2_MODEL_RUNNER": "0",
            "OPENAI_API_KEY": "sk-x",
            "NOTE": "see https://user:pa55w0rd@example.com/x",
        }
    )
    assert env["HF_TOKEN"] == REDACTED
    assert env["OPENAI_API_KEY"] == REDACTED
    assert env["VLLM_USE_V2_MODEL_RUNNER"] == "0"
    assert "pa55w0rd" not in env["NOTE"]
    cmd = redact_command(
        ["vllm", "serve", "m", "--api-key", "s3cret-value", "--hf-token=hf_x", "--port", "8000"]
    )
    assert cmd == ["vllm", "serve", "m", "--api-key", REDACTED, f"--hf-token={REDACTED}", "--port", "8000"]


def test_redactor_scrubs_known_secrets_from_logs() -> None:
    r = Redactor.from_sources({"MY_TOKEN": "tok-123456"}, ["x", "--api-key", "s3cret-value"])
    text, n = r.text("non-default args: {'api_key': 's3cret-value'} tok-123456 Bearer abcdefghijk")
    assert "s3cret-value" not in text
    assert "tok-123456" not in text
    assert "abcdefghijk" not in text
    assert n >= 3
