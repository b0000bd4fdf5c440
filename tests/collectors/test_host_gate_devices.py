"""Issue 11: the collector's own host gate only checked that some GPU exists. A campaign that gives its engine
``CUDA_VISIBLE_DEVICES=7`` on a host whose probe lists GPU 0 passed the collector's host-prerequisites, was
launched, and only the policy (``e.derived.launch_devices_missing``) failed it afterwards. The gate now
refuses before anything is launched, by the same rule the policy judges the recorded launch by
(``ledger.devices``): the collector and the policy never disagree on which device a host lacks."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

import ledger.collectors.campaign as campaign_mod
from ledger.collectors.campaign import CampaignRunner, _GateFailed, load_campaign
from ledger.collectors.gpu import GpuScan
from ledger.collectors.host import EnvInfo
from ledger.devices import items_not_listed, visible_device_items
from ledger.hashing import parse_digest
from ledger.recorder import LocalRecorder
from ledger.service import Ledger

from .conftest import entries_of

REPO = Path(__file__).resolve().parents[2]
GPU0 = "GPU-5a1c0de2-0000-4000-8000-000000000000"
MIG0 = "MIG-5a1c0de2-0000-4000-8000-0000000000a0"
PROBED = [
    {
        "index": 0,
        "name": "NVIDIA A100",
        "uuid": GPU0,
        "vendor": "nvidia",
        "pci_bus_id": "00000000:3B:00.0",
        "mig_devices": [{"uuid": MIG0, "index": 0, "gpu_instance_id": 1, "compute_instance_id": 0}],
    }
]


def _campaign(
    tmp_path: Path,
    model_dir: Path,
    *,
    env: dict[str, str] | None = None,
    attempt_env: dict[str, str] | None = None,
    require_gpu: bool = True,
) -> Path:
    def table(d: dict[str, str] | None) -> str:
        return "{" + ", ".join(f'{k} = "{v}"' for k, v in (d or {}).items()) + "}"

    text = f"""
[campaign]
id = "host-devices"
lease_seconds = 120

[model]
path = "{model_dir}"
name = "stub-model"
served_name = "stub-model"

[engine]
kind = "generic"
python = "{sys.executable}"
command = ["{{python}}", "-c", "import time; time.sleep(60)"]
lease_seconds = 60
env = {table(env)}

[[engine.attempts]]
name = "first"

[[engine.attempts]]
name = "second"
env = {table(attempt_env)}

[gates.host]
require_gpu = {"true" if require_gpu else "false"}
"""
    p = tmp_path / "host-devices.toml"
    p.write_text(text)
    return p


def _runner(
    tmp_path: Path,
    model_dir: Path,
    recorder: LocalRecorder,
    monkeypatch: pytest.MonkeyPatch,
    gpus: list[dict[str, Any]],
    **kw: Any,
) -> CampaignRunner:
    for var in (
        "CUDA_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
    ):
        monkeypatch.delenv(var, raising=False)
    runner = CampaignRunner(
        load_campaign(_campaign(tmp_path, model_dir, **kw)),
        recorder,
        work_dir=tmp_path / "work",
        handle_signals=False,
    )
    scan = GpuScan(gpus=[dict(g) for g in gpus], source="nvml" if gpus else "none")
    scan.note = None if gpus else "no GPU found"
    monkeypatch.setattr(campaign_mod, "scan_gpus", lambda: scan)
    env = {"interpreter": sys.executable, "python": "3.11", "packages": {}, "env": {}, "details": {}}
    runner._env = EnvInfo(payload=env, freeze="")
    return runner


def _gate_host(runner: CampaignRunner) -> str | None:
    """The host gate's refusal (None: it passed)."""
    try:
        runner._gate_host()
    except _GateFailed as e:
        return e.reason
    return None


# --- the failure ------------------------------------------------------------------------------------


def test_an_engine_given_a_gpu_the_probe_does_not_list_is_refused_before_launch(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runner = _runner(
        tmp_path, tiny_model_dir, recorder, monkeypatch, PROBED, env={"CUDA_VISIBLE_DEVICES": "7"}
    )
    result = runner.run()
    assert result.state == "failed"
    host = next(g for g in result.gates if g.gate == "host-prerequisites")
    assert host.status == "failed", host
    assert "CUDA_VISIBLE_DEVICES=7" in (host.reason or "") and "does not list" in (host.reason or "")
    assert f"it lists: 0 {GPU0}" in (host.reason or "")
    assert not entries_of(ledger, "engine.launch")  # refused before anything was launched


# --- neighbours: what is refused ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "attempt_env", "inherited", "named"),
    [
        ({"CUDA_VISIBLE_DEVICES": "0,7"}, None, None, "CUDA_VISIBLE_DEVICES=7"),  # one of two
        ({"CUDA_VISIBLE_DEVICES": " 3 "}, None, None, "CUDA_VISIBLE_DEVICES=3"),  # padded
        ({"HIP_VISIBLE_DEVICES": "4"}, None, None, "HIP_VISIBLE_DEVICES=4"),  # another variable
        ({"NVIDIA_VISIBLE_DEVICES": "GPU-0000"}, None, None, "NVIDIA_VISIBLE_DEVICES=GPU-0000"),  # a UUID
        ({"CUDA_VISIBLE_DEVICES": "１"}, None, None, "CUDA_VISIBLE_DEVICES=１"),  # not an ASCII index
        ({"CUDA_VISIBLE_DEVICES": MIG0.replace("a0", "b0")}, None, None, "MIG-"),  # a MIG not listed
        ({"CUDA_VISIBLE_DEVICES": GPU0[:-1] + "1"}, None, None, "GPU-"),
        (None, {"CUDA_VISIBLE_DEVICES": "5"}, None, "(attempt second)"),  # only one attempt's env
        ({"CUDA_VISIBLE_DEVICES": "0"}, {"CUDA_VISIBLE_DEVICES": "5"}, None, "=5 (attempt second)"),
        (None, None, "6", "CUDA_VISIBLE_DEVICES=6 (attempt first, second)"),  # inherited by the engine
        ({"CUDA_VISIBLE_DEVICES": "${LEDGER_TEST_GPU}"}, None, None, "CUDA_VISIBLE_DEVICES=9"),  # expanded
    ],
    ids=[
        "one-of-two",
        "padded",
        "hip",
        "uuid",
        "fullwidth-digit",
        "mig-not-listed",
        "other-gpu-uuid",
        "attempt-env",
        "attempt-overrides",
        "inherited",
        "expanded",
    ],
)
def test_a_device_the_probe_lacks_is_refused(
    tmp_path: Path,
    tiny_model_dir: Path,
    recorder: LocalRecorder,
    monkeypatch: pytest.MonkeyPatch,
    env: dict[str, str] | None,
    attempt_env: dict[str, str] | None,
    inherited: str | None,
    named: str,
) -> None:
    runner = _runner(
        tmp_path, tiny_model_dir, recorder, monkeypatch, PROBED, env=env, attempt_env=attempt_env
    )
    monkeypatch.setenv("LEDGER_TEST_GPU", "9")
    if inherited is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", inherited)
    reason = _gate_host(runner)
    assert reason is not None and named in reason, reason


# --- neighbours: what runs ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "env",
    [
        {"CUDA_VISIBLE_DEVICES": "0"},
        {"CUDA_VISIBLE_DEVICES": GPU0},
        {"CUDA_VISIBLE_DEVICES": MIG0},  # a MIG instance the probe lists under GPU 0
        {"NVIDIA_VISIBLE_DEVICES": "all"},
        {"CUDA_VISIBLE_DEVICES": ""},
        {"CUDA_VISIBLE_DEVICE": "7"},  # misspelled: no device assignment (the engine sees every GPU)
        {},
    ],
    ids=["index-0", "uuid", "mig-listed", "nvidia-all", "empty", "misspelled-var", "none-given"],
)
def test_a_device_the_probe_lists_passes(
    tmp_path: Path,
    tiny_model_dir: Path,
    recorder: LocalRecorder,
    monkeypatch: pytest.MonkeyPatch,
    env: dict[str, str],
) -> None:
    runner = _runner(tmp_path, tiny_model_dir, recorder, monkeypatch, PROBED, env=env)
    assert _gate_host(runner) is None


def test_a_gpu_listed_without_index_is_named_by_its_place(
    tmp_path: Path, tiny_model_dir: Path, recorder: LocalRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    gpus = [{k: v for k, v in PROBED[0].items() if k != "index"}, {"name": "NVIDIA A100"}]
    runner = _runner(tmp_path, tiny_model_dir, recorder, monkeypatch, gpus, env={"CUDA_VISIBLE_DEVICES": "1"})
    assert _gate_host(runner) is None
    runner = _runner(tmp_path, tiny_model_dir, recorder, monkeypatch, gpus, env={"CUDA_VISIBLE_DEVICES": "2"})
    assert "CUDA_VISIBLE_DEVICES=2" in (_gate_host(runner) or "")


def test_a_cpu_build_on_a_host_without_gpu_still_runs(
    tmp_path: Path, tiny_model_dir: Path, recorder: LocalRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """require_gpu = false: the deployment is a CPU one (the policy's manifest device ``cpu``), on which the
    policy judges no device either — a variable the shell left set does not stop it."""
    runner = _runner(
        tmp_path,
        tiny_model_dir,
        recorder,
        monkeypatch,
        [],
        env={"CUDA_VISIBLE_DEVICES": "0"},
        require_gpu=False,
    )
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert _gate_host(runner) is None


def test_a_gpu_build_on_a_host_without_gpu_says_no_gpu_once(
    tmp_path: Path, tiny_model_dir: Path, recorder: LocalRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = _runner(tmp_path, tiny_model_dir, recorder, monkeypatch, [], env={"CUDA_VISIBLE_DEVICES": "0"})
    reason = _gate_host(runner) or ""
    assert "a GPU is required and none was found" in reason and "CUDA_VISIBLE_DEVICES" not in reason


@pytest.mark.parametrize("path", sorted((REPO / "campaigns").glob("*.toml")), ids=lambda p: p.stem)
def test_the_demo_campaigns_name_no_device_the_cpu_host_lacks(path: Path) -> None:
    """The shipped campaigns run on this GPU-less machine: a CPU deployment, or one naming no device."""
    spec = load_campaign(path).spec
    envs = [{**spec.engine.env, **a.env} for a in spec.engine.attempts]
    assert not spec.gates.host.require_gpu or all(not visible_device_items(e) for e in envs)


# --- one rule: the collector refuses exactly what the policy would fail ---------------------------------


@pytest.mark.parametrize(
    "env",
    [
        {"CUDA_VISIBLE_DEVICES": "7"},
        {"CUDA_VISIBLE_DEVICES": "0"},
        {"CUDA_VISIBLE_DEVICES": "2,0"},
        {"CUDA_VISIBLE_DEVICES": MIG0},
        {"NVIDIA_VISIBLE_DEVICES": "all"},
        {"HIP_VISIBLE_DEVICES": "²"},
    ],
    ids=["missing", "index", "reordered", "mig", "all", "superscript"],
)
def test_the_gate_and_the_policy_agree(
    tmp_path: Path,
    tiny_model_dir: Path,
    recorder: LocalRecorder,
    monkeypatch: pytest.MonkeyPatch,
    env: dict[str, str],
) -> None:
    from tests.policy.test_fail_closed import entry, gates, qualified_entries, verdict_of

    es = qualified_entries()
    entry(es, "launch")["payload"]["env"] = env
    host = entry(es, "host")["payload"]
    host["gpus"][0].update({"uuid": GPU0, "mig_devices": PROBED[0]["mig_devices"]})
    policy_fails = gates(verdict_of(tmp_path, es))["host-prerequisites"] == "failed"
    runner = _runner(tmp_path, tiny_model_dir, recorder, monkeypatch, host["gpus"], env=env)
    assert (_gate_host(runner) is not None) == policy_fails
    assert bool(items_not_listed(visible_device_items(env), host["gpus"])) == policy_fails


def test_os_environ_is_left_alone(
    tmp_path: Path, tiny_model_dir: Path, recorder: LocalRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = _runner(
        tmp_path, tiny_model_dir, recorder, monkeypatch, PROBED, env={"CUDA_VISIBLE_DEVICES": "7"}
    )
    before = dict(os.environ)
    _gate_host(runner)
    assert dict(os.environ) == before


# --- the GPU tools' own output is kept beside the probe ----------------------------------------------


def test_collect_run_keeps_the_gpu_tools_output_beside_the_host_probe(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Regression: `collect run` recorded its host probe with no artifact (`collect host` kept only the
    XML), so the `nvidia-smi -L` output the MIG UUIDs were read from was not kept anywhere."""
    runner = _runner(tmp_path, tiny_model_dir, recorder, monkeypatch, PROBED)
    scan = campaign_mod.scan_gpus()  # the scan `_runner` installed
    listing = f"GPU 0: NVIDIA A100 (UUID: {GPU0})\n  MIG 1g.10gb Device 0: (UUID: {MIG0})\n"
    scan.source, scan.raw, scan.listing = "nvidia-smi", "<nvidia_smi_log/>", listing
    assert _gate_host(runner) is None
    (probe,) = entries_of(ledger, "host.probe")
    arts = {a["name"]: a for a in probe["artifacts"]}
    assert set(arts) == {"nvidia-smi.txt", "nvidia-smi-L.txt"}
    with ledger.store.open_verified(parse_digest(arts["nvidia-smi-L.txt"]["digest"])) as f:
        assert f.read() == listing.encode()


@pytest.mark.parametrize(
    ("source", "raw", "listing", "names"),
    [
        ("nvml", None, None, []),  # NVML: values, no tool output
        ("nvidia-smi", "<x/>", None, ["nvidia-smi.txt"]),  # no MIG: `-L` not read
        ("rocm-smi", "{}", None, ["rocm-smi.txt"]),
        ("nvidia-smi", "<x/>", "GPU 0: …", ["nvidia-smi.txt", "nvidia-smi-L.txt"]),
    ],
)
def test_the_outputs_a_scan_keeps(
    source: str, raw: str | None, listing: str | None, names: list[str]
) -> None:
    scan = GpuScan(source=source, raw=raw, listing=listing)
    assert [n for n, _t in scan.outputs()] == names
