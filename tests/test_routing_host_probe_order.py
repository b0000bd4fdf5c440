"""Audit 19: the routing gate's GPUs of the host came from the probe the log took last, of the machine
spelled exactly as the job recorded it.

A host probe spooled and uploaded late (observed 09:30, logged 13:00) still listing GPU2 overrode the probe
observed at 12:00 that showed GPU2 gone, and a route onto GPU2 was allowed again; a newer probe naming the
machine in other case or with a trailing dot was passed over, and the older one listing GPU2 decided. A GPU
is on the host only where both the last-logged and the last-observed probe of the machine list it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ledger.entries import parse_time
from ledger.policy.fixtures import build_fixture_ledger
from ledger.service import Ledger

POLICIES = Path(__file__).resolve().parents[1] / "policies"
SEED004 = POLICIES / "fixtures" / "routing-change" / "seed004-router.toml"
ROUTE = ["-s", "backend=vllm", "-s", "model=Qwen3-Embedding-8B", "-s", "host=gpu-box-1"]


def _home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    led, _, _ = build_fixture_ledger(SEED004, home, POLICIES, init=Ledger.init)
    led.close()
    dep = tmp_path / "dep.json"
    dep.write_text(
        json.dumps(
            {
                "host": "gpu-box-1",
                "services": [
                    {
                        "engine": "vllm",
                        "name": "embed",
                        "model": "Qwen3-Embedding-8B",
                        "gpus": [2],
                        "gpu_memory_utilization": 0.25,
                    }
                ],
            }
        )
    )
    return home


def _probe(home: Path, logged: str, observed: str, gpus: list[int], hostname: str = "gpu-box-1") -> None:
    led = Ledger.open(home, home_bound=True)
    try:
        p = {
            "hostname": hostname,
            "os": "Ubuntu 24.04",
            "kernel": "6.8.0",
            "gpus": [{"index": i, "name": "NVIDIA H100"} for i in gpus],
        }
        st = led.make_statement("host.probe", {"host": "gpu-box-1"}, p, collected_at=parse_time(observed))
        led.append([led.sign(st, "collector")], logged_at=parse_time(logged))
    finally:
        led.close()


def _check(tmp_path: Path, home: Path) -> tuple[int, str]:
    r = subprocess.run(
        [
            *(str(Path(sys.executable).parent / "ledger"), "--home", str(home), "check", "routing-change"),
            *ROUTE,
            *("--deployment", str(tmp_path / "dep.json"), "--now", "2026-09-11T09:00:00Z"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    return r.returncode, r.stdout + r.stderr


def test_a_late_uploaded_probe_does_not_bring_back_a_gpu_a_newer_observation_saw_gone(tmp_path: Path) -> None:
    home = _home(tmp_path)
    _probe(home, "2026-09-10T12:00:00Z", "2026-09-10T12:00:00Z", [0, 1])
    rc, out = _check(tmp_path, home)
    assert rc == 1 and "GPU2" in out, out
    _probe(home, "2026-09-10T13:00:00Z", "2026-09-10T09:30:00Z", [0, 1, 2])  # spooled, uploaded late
    rc, out = _check(tmp_path, home)
    assert rc == 1, out
    assert "GPU2" in out and "is not on gpu-box-1" in out, out


def test_a_late_uploaded_probe_missing_a_gpu_also_counts(tmp_path: Path) -> None:
    """Neighbour: the other way round — the last-logged probe (observed earlier) no longer lists GPU2."""
    home = _home(tmp_path)
    _probe(home, "2026-09-10T12:00:00Z", "2026-09-10T12:00:00Z", [0, 1, 2])
    _probe(home, "2026-09-10T13:00:00Z", "2026-09-10T09:30:00Z", [0, 1])
    rc, out = _check(tmp_path, home)
    assert rc == 1 and "GPU2" in out, out


def test_newer_probes_listing_the_gpu_allow_the_route(tmp_path: Path) -> None:
    """Neighbour: both the last-logged and the last-observed probe list GPU2."""
    home = _home(tmp_path)
    _probe(home, "2026-09-10T12:00:00Z", "2026-09-10T12:00:00Z", [0, 1])
    _probe(home, "2026-09-10T13:00:00Z", "2026-09-10T12:30:00Z", [0, 1, 2])
    rc, out = _check(tmp_path, home)
    assert rc == 0, out


@pytest.mark.parametrize("hostname", ["gpu-box-1", "GPU-BOX-1", "gpu-box-1."])
def test_a_newer_probe_naming_the_machine_otherwise_is_not_passed_over(tmp_path: Path, hostname: str) -> None:
    home = _home(tmp_path)
    _probe(home, "2026-09-10T12:00:00Z", "2026-09-10T12:00:00Z", [0, 1], hostname=hostname)
    rc, out = _check(tmp_path, home)
    assert rc == 1 and "GPU2" in out, out
