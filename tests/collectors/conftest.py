"""Fixtures for the collector tests: a real ledger home per test, fault-engine campaigns, engine paths."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ledger.recorder import LocalRecorder
from ledger.service import Ledger

REPO = Path(__file__).resolve().parents[2]
FAULT_ENGINE = REPO / "tests" / "engines" / "fault_engine.py"
ENGINES_SH = REPO / "scripts" / "engines.sh"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
ENGINE_LOGS = REPO / "tests" / "fixtures" / "engine_logs"
LEDGER = [sys.executable, "-m", "ledger.cli"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    ledger = Ledger.init(path)
    ledger.new_key("collector", ["collector"])
    ledger.close()
    return path


@pytest.fixture
def ledger(home: Path) -> Iterator[Ledger]:
    lg = Ledger.open(home)
    yield lg
    lg.close()


@pytest.fixture
def recorder(ledger: Ledger) -> LocalRecorder:
    return LocalRecorder(ledger, "collector")


@pytest.fixture
def tiny_model_dir(tmp_path: Path) -> Path:
    d = tmp_path / "fault-model"
    d.mkdir()
    (d / "config.json").write_text('{"architectures": ["FaultForCausalLM"]}')
    (d / "model.safetensors").write_bytes(os.urandom(64 * 1024))
    return d


def fault_campaign(
    tmp_path: Path,
    model_dir: Path,
    attempts: list[dict[str, Any]],
    *,
    engine_lease: float = 30,
    job_lease: float = 120,
    flavor: str = "vllm",
    extra: str = "",
    name: str = "fault",
) -> Path:
    """Write a campaign whose engine is the fault-injection engine; each attempt picks a --mode."""
    lines = [
        "[campaign]",
        f'id = "{name}"',
        f"lease_seconds = {job_lease}",
        "",
        "[model]",
        f'path = "{model_dir}"',
        'name = "fault-model"',
        'served_name = "fault-model"',
        "",
        "[engine]",
        f'kind = "{flavor if flavor != "vllm" else "vllm"}"',
        f'python = "{sys.executable}"',
        f'command = ["{{python}}", "{FAULT_ENGINE}", "--port", "{{port}}", "--flavor", "{flavor}", '
        '"--load-seconds", "0.3", "--model", "{model}"]',
        f"lease_seconds = {engine_lease}",
        "grace_seconds = 3",
        "exit_wait_seconds = 3",
        "",
    ]
    for a in attempts:
        lines += [
            "[[engine.attempts]]",
            f'name = "{a["name"]}"',
            "extra_args = [" + ", ".join(f'"{x}"' for x in a["args"]) + "]",
        ]
        if a.get("after"):
            lines.append("after = [" + ", ".join(f'"{x}"' for x in a["after"]) + "]")
        if a.get("env"):
            lines.append("env = { " + ", ".join(f'{k} = "{v}"' for k, v in a["env"].items()) + " }")
        lines.append("")
    lines += [extra]
    p = tmp_path / f"{name}.toml"
    p.write_text("\n".join(lines))
    return p


def entries_of(ledger: Ledger, kind: str) -> list[dict[str, Any]]:
    return [e.to_json() for e in ledger.query(kind=kind, limit=1000)]


def run_ledger(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LEDGER, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )


def engine_cache() -> Path:
    return Path(os.environ.get("LEDGER_ENGINE_CACHE") or Path.home() / ".cache/evidence-ledger/engines")


def ensure_engine(kind: str) -> dict[str, str]:
    """Build (once, cached) a real engine with scripts/engines.sh; skip outside CI when that fails."""
    if shutil.which("bash") is None:
        pytest.skip("bash is needed for scripts/engines.sh")
    r = subprocess.run(
        ["bash", str(ENGINES_SH), kind], capture_output=True, text=True, timeout=3600, check=False
    )
    if r.returncode != 0:
        msg = f"scripts/engines.sh {kind} failed: {r.stderr[-2000:]}"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    out = {}
    for line in r.stdout.splitlines():
        k, sep, v = line.partition("=")
        if sep:
            out[k] = v
    return out
