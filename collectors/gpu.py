"""GPU inventory: NVML (nvidia-ml-py), else ``amd-smi``/``rocm-smi`` JSON, else ``nvidia-smi``.

The parsers are pure functions of the tools' output, tested against saved samples.
"""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "GpuScan",
    "merge_nvidia_smi_list",
    "parse_amd_smi_json",
    "parse_nvidia_smi_csv",
    "parse_nvidia_smi_xml",
    "parse_rocm_smi_json",
    "scan_gpus",
]

NVIDIA_SMI_QUERY = "index,name,uuid,driver_version,memory.total,memory.used,utilization.gpu,pci.bus_id"


@dataclass
class GpuScan:
    gpus: list[dict[str, Any]] = field(default_factory=list)
    source: str = "none"
    note: str | None = None
    tried: list[str] = field(default_factory=list)
    raw: str | None = None  # the tool output the GPUs were parsed from (kept as an artifact)
    listing: str | None = None  # `nvidia-smi -L`, read for the MIG UUIDs the XML lacks (kept as an artifact)

    def outputs(self) -> list[tuple[str, str]]:
        """``(file name, text)`` of each tool output the GPUs were read from, to keep beside the probe."""
        out = [(f"{self.source}.txt", self.raw)] if self.raw else []
        return out + ([("nvidia-smi-L.txt", self.listing)] if self.listing else [])


def _num(text: Any) -> float | None:
    if text is None:
        return None
    s = str(text).strip().split()[0] if str(text).strip() else ""
    try:
        return float(s)
    except ValueError:
        return None


def _mib(value: Any, unit: str | None = None) -> float | None:
    """A memory amount in MiB from '81559 MiB', {'value': 65536, 'unit': 'MB'}, bytes …"""
    if isinstance(value, dict):
        return _mib(value.get("value"), value.get("unit"))
    if value is None:
        return None
    text = str(value).strip()
    parts = text.split()
    n = _num(parts[0]) if parts else None
    if n is None:
        return None
    u = (unit or (parts[1] if len(parts) > 1 else "MiB")).lower()
    factor = {
        "b": 1 / 2**20,
        "bytes": 1 / 2**20,
        "kb": 1 / 1024,
        "kib": 1 / 1024,
        "mb": 1.0,
        "mib": 1.0,
        "gb": 1024.0,
        "gib": 1024.0,
    }.get(u, 1.0)
    return round(n * factor, 1)


# --- NVIDIA ----------------------------------------------------------------------------------------


def parse_nvidia_smi_csv(text: str, *, cuda: str | None = None) -> list[dict[str, Any]]:
    """``nvidia-smi --query-gpu=<NVIDIA_SMI_QUERY> --format=csv,noheader,nounits`` (or with header)."""
    rows = [r for r in csv.reader(io.StringIO(text)) if r and any(c.strip() for c in r)]
    if rows and rows[0][0].strip().lower() == "index":
        rows = rows[1:]
    gpus = []
    for r in rows:
        c = [x.strip() for x in r] + [""] * 8
        gpus.append(
            {
                "index": int(c[0]) if c[0].isdigit() else None,
                "name": c[1],
                "uuid": c[2] or None,
                "vendor": "nvidia",
                "driver": c[3] or None,
                "cuda": cuda,
                "memory_total_mib": _mib(c[4]),
                "memory_used_mib": _mib(c[5]),
                "utilization_pct": _num(c[6].rstrip("%")),
                "pci_bus_id": c[7] or None,
            }
        )
    return gpus


def parse_nvidia_smi_xml(text: str) -> list[dict[str, Any]]:
    """``nvidia-smi -q -x``."""
    root = ET.fromstring(text)  # noqa: S314  (output of the local nvidia-smi, not untrusted input)
    driver = root.findtext("driver_version")
    cuda = root.findtext("cuda_version")
    gpus = []
    for i, g in enumerate(root.findall("gpu")):
        gpus.append(
            {
                "index": int(g.findtext("minor_number") or i)
                if (g.findtext("minor_number") or "").isdigit()
                else i,
                "name": g.findtext("product_name") or "unknown",
                "uuid": g.findtext("uuid"),
                "vendor": "nvidia",
                "driver": driver,
                "cuda": cuda,
                "memory_total_mib": _mib(g.findtext("fb_memory_usage/total")),
                "memory_used_mib": _mib(g.findtext("fb_memory_usage/used")),
                "utilization_pct": _num((g.findtext("utilization/gpu_util") or "").rstrip("%")),
                "pci_bus_id": g.get("id") or g.findtext("pci/pci_bus_id"),
                **_xml_mig_devices(g),
            }
        )
    return gpus


def _count(text: str | None) -> int | None:
    t = (text or "").strip()
    return int(t) if t.isascii() and t.isdigit() else None


def _xml_mig_devices(g: ET.Element) -> dict[str, Any]:
    """``{"mig_devices": [...]}`` of a GPU whose ``mig_mode/current_mig`` is ``Enabled`` (else nothing):
    each ``mig_devices/mig_device`` as its index, GPU/compute instance ids and memory. ``nvidia-smi -q -x``
    prints no MIG UUID: ``merge_nvidia_smi_list`` adds them from ``nvidia-smi -L``; one it does not name
    stays without a UUID, and no ``MIG-…`` device item can name it (fail closed)."""
    if (g.findtext("mig_mode/current_mig") or "").strip().lower() != "enabled":
        return {}
    return {
        "mig_devices": [
            {
                "index": _count(m.findtext("index")),
                "gpu_instance_id": _count(m.findtext("gpu_instance_id")),
                "compute_instance_id": _count(m.findtext("compute_instance_id")),
                "memory_total_mib": _mib(m.findtext("fb_memory_usage/total")),
            }
            for m in g.findall("mig_devices/mig_device")
        ]
    }


_SMI_LIST_GPU = re.compile(r"GPU [0-9]+: .* \(UUID: (GPU-[^)\s]+)\)")
_SMI_LIST_MIG = re.compile(r"MIG \S+\s+Device\s+([0-9]+): \(UUID: (MIG-[^)\s]+)\)")


def merge_nvidia_smi_list(gpus: list[dict[str, Any]], text: str) -> None:
    """Adds the MIG UUIDs ``nvidia-smi -L`` prints (``  MIG 1g.10gb Device 0: (UUID: MIG-…)`` under the
    ``GPU n: … (UUID: GPU-…)`` line of its GPU) to the MIG devices of that GPU (``parse_nvidia_smi_xml``),
    matched by the GPU's UUID and the MIG device's index. A MIG line under no GPU line, of a GPU the list
    does not hold, or of a GPU not in MIG mode there, is left out; a listed index the XML lacks is added
    with its UUID and index only."""
    by_uuid = {g.get("uuid"): g for g in gpus if isinstance(g.get("uuid"), str)}
    gpu: dict[str, Any] | None = None
    for line in text.splitlines():
        if m := _SMI_LIST_GPU.fullmatch(line.strip()):
            gpu = by_uuid.get(m[1])
        elif (m := _SMI_LIST_MIG.fullmatch(line.strip())) and gpu is not None and "mig_devices" in gpu:
            index, uuid = int(m[1]), m[2]
            migs = gpu["mig_devices"]
            same = [d for d in migs if d.get("index") == index]
            if len(same) == 1 and same[0].get("uuid") in (None, uuid):
                same[0]["uuid"] = uuid
            elif not same:
                migs.append({"index": index, "uuid": uuid})
        elif not line.startswith((" ", "\t")):
            gpu = None  # a line of another shape: no MIG line that follows is this GPU's


def _from_nvml() -> tuple[list[dict[str, Any]], str]:
    import pynvml

    pynvml.nvmlInit()
    try:

        def s(v: Any) -> str:
            return v.decode() if isinstance(v, bytes) else str(v)

        driver = s(pynvml.nvmlSystemGetDriverVersion())
        try:
            cv = int(pynvml.nvmlSystemGetCudaDriverVersion())
            cuda: str | None = f"{cv // 1000}.{(cv % 1000) // 10}"
        except pynvml.NVMLError:
            cuda = None
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            try:
                util: float | None = float(pynvml.nvmlDeviceGetUtilizationRates(h).gpu)
            except pynvml.NVMLError:
                util = None
            gpus.append(
                {
                    "index": i,
                    "name": s(pynvml.nvmlDeviceGetName(h)),
                    "uuid": s(pynvml.nvmlDeviceGetUUID(h)),
                    "vendor": "nvidia",
                    "driver": driver,
                    "cuda": cuda,
                    "memory_total_mib": round(mem.total / 2**20, 1),
                    "memory_used_mib": round(mem.used / 2**20, 1),
                    "utilization_pct": util,
                    "pci_bus_id": s(pynvml.nvmlDeviceGetPciInfo(h).busId),
                    **_nvml_mig_devices(pynvml, h, s),
                }
            )
        return gpus, f"driver {driver}"
    finally:
        pynvml.nvmlShutdown()


def _nvml_mig_devices(pynvml: Any, h: Any, s: Callable[[Any], str]) -> dict[str, Any]:
    """``{"mig_devices": [...]}`` of a GPU in MIG mode (``nvmlDeviceGetMigMode``: current mode enabled),
    each with its UUID (``MIG-…``), index, GPU/compute instance ids and memory; nothing where MIG is off or
    not supported. An index with no instance (``NVML_ERROR_NOT_FOUND``) is skipped; an instance NVML
    cannot read, or whose UUID is not a ``MIG-`` one, is kept without a UUID — no ``MIG-…`` device item
    can name it (fail closed) — and what failed is recorded in the GPU's ``details``."""
    try:
        current = pynvml.nvmlDeviceGetMigMode(h)[0]
    except pynvml.NVMLError:
        return {}  # not a MIG-capable GPU (NVML_ERROR_NOT_SUPPORTED)
    if current != pynvml.NVML_DEVICE_MIG_ENABLE:
        return {}
    migs: list[dict[str, Any]] = []
    problems: list[str] = []
    try:
        count = int(pynvml.nvmlDeviceGetMaxMigDeviceCount(h))
    except pynvml.NVMLError as e:
        return {"mig_devices": [], "details": {"mig_error": f"nvmlDeviceGetMaxMigDeviceCount: {e}"}}
    for i in range(count):
        try:
            m = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
        except pynvml.NVMLError as e:
            if getattr(e, "value", None) != pynvml.NVML_ERROR_NOT_FOUND:
                problems.append(f"MIG device {i}: {e}")
            continue
        mig: dict[str, Any] = {"index": i}
        try:
            uuid = s(pynvml.nvmlDeviceGetUUID(m))
            if uuid.startswith("MIG-"):
                mig["uuid"] = uuid
            else:
                problems.append(f"MIG device {i}: UUID {uuid!r} is not a MIG- UUID")
        except pynvml.NVMLError as e:
            problems.append(f"MIG device {i}: nvmlDeviceGetUUID: {e}")
        for key, fn in (
            ("gpu_instance_id", "nvmlDeviceGetGpuInstanceId"),
            ("compute_instance_id", "nvmlDeviceGetComputeInstanceId"),
        ):
            try:
                value = getattr(pynvml, fn)(m)
                mig[key] = value if type(value) is int and value >= 0 else None
            except pynvml.NVMLError:
                mig[key] = None
        try:
            mig["memory_total_mib"] = round(pynvml.nvmlDeviceGetMemoryInfo(m).total / 2**20, 1)
        except pynvml.NVMLError:
            mig["memory_total_mib"] = None
        migs.append(mig)
    out: dict[str, Any] = {"mig_devices": migs}
    if problems:
        out["details"] = {"mig_error": "; ".join(problems)[:500]}
    return out


# --- AMD -------------------------------------------------------------------------------------------


def _first(d: Any, *paths: str) -> Any:
    for p in paths:
        cur = d
        for k in p.split("."):
            cur = cur.get(k) if isinstance(cur, dict) else None
        if cur not in (None, "", "N/A"):
            return cur
    return None


def parse_amd_smi_json(text: str, *, rocm: str | None = None) -> list[dict[str, Any]]:
    """``amd-smi static --json`` (optionally merged with ``amd-smi metric --json``): a list of GPUs."""
    data = json.loads(text)
    items = data.get("gpu_data", data) if isinstance(data, dict) else data
    if isinstance(items, dict):
        items = [items]
    gpus = []
    for i, g in enumerate(items or []):
        gpus.append(
            {
                "index": int(g.get("gpu", i)),
                "name": str(
                    _first(g, "asic.market_name", "board.product_name", "asic.device_id") or "AMD GPU"
                ),
                "uuid": _first(g, "asic.asic_serial", "board.product_serial"),
                "vendor": "amd",
                "driver": _first(g, "driver.version"),
                "rocm": rocm,
                "memory_total_mib": _mib(_first(g, "vram.size", "mem_usage.total_vram")),
                "memory_used_mib": _mib(_first(g, "mem_usage.used_vram")),
                "utilization_pct": _num(_first(g, "usage.gfx_activity.value", "usage.gfx_activity")),
                "pci_bus_id": _first(g, "bus.bdf"),
                "details": {
                    k: _first(g, k) for k in ("asic.target_graphics_version", "vbios.version") if _first(g, k)
                },
            }
        )
    return gpus


def parse_rocm_smi_json(text: str) -> list[dict[str, Any]]:
    """``rocm-smi --showproductname --showmeminfo vram --showbus --showdriverversion --json``."""
    data = json.loads(text)
    driver = _first(data, "system.Driver version")
    gpus = []
    for key in sorted(k for k in data if k.startswith("card")):
        g = data[key]
        total = g.get("VRAM Total Memory (B)")
        used = g.get("VRAM Total Used Memory (B)")
        gpus.append(
            {
                "index": int(key[4:]) if key[4:].isdigit() else None,
                "name": g.get("Card Series") or g.get("Card series") or g.get("Card model") or "AMD GPU",
                "uuid": g.get("Unique ID"),
                "vendor": "amd",
                "driver": driver,
                "memory_total_mib": _mib(total, "B") if total else None,
                "memory_used_mib": _mib(used, "B") if used else None,
                "utilization_pct": _num(g.get("GPU use (%)")),
                "pci_bus_id": g.get("PCI Bus"),
                "details": {"gfx_version": g["GFX Version"]} if g.get("GFX Version") else {},
            }
        )
    return gpus


def _run(argv: list[str], timeout: float = 20.0) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout if r.returncode == 0 and r.stdout.strip() else None


def _rocm_version() -> str | None:
    for p in ("/opt/rocm/.info/version", "/opt/rocm/.info/version-dev"):
        try:
            with open(p, encoding="utf-8") as f:
                return f.read().strip() or None
        except OSError:
            continue
    return None


def scan_gpus() -> GpuScan:
    """Try NVML, then amd-smi, rocm-smi and nvidia-smi; finding none is a recorded fact, not an error."""
    scan = GpuScan()
    try:
        gpus, note = _from_nvml()
        scan.tried.append(f"nvml: {len(gpus)} GPU(s), {note}")
        if gpus:
            scan.gpus, scan.source = gpus, "nvml"
            return scan
    except Exception as e:  # NVMLError_LibraryNotFound and friends: no NVIDIA driver here
        scan.tried.append(f"nvml: {type(e).__name__}: {e}")
    out = _run(["amd-smi", "static", "--json"])
    if out:
        try:
            scan.gpus, scan.source, scan.raw = parse_amd_smi_json(out, rocm=_rocm_version()), "amd-smi", out
            return scan
        except (ValueError, TypeError, AttributeError) as e:
            scan.tried.append(f"amd-smi: unparsable output: {e}")
    else:
        scan.tried.append("amd-smi: not found or failed")
    out = _run(
        [
            "rocm-smi",
            "--showproductname",
            "--showmeminfo",
            "vram",
            "--showbus",
            "--showdriverversion",
            "--json",
        ]
    )
    if out:
        try:
            scan.gpus, scan.source, scan.raw = parse_rocm_smi_json(out), "rocm-smi", out
            return scan
        except (ValueError, TypeError, AttributeError) as e:
            scan.tried.append(f"rocm-smi: unparsable output: {e}")
    else:
        scan.tried.append("rocm-smi: not found or failed")
    out = _run(["nvidia-smi", "-q", "-x"])
    if out:
        try:
            scan.gpus, scan.source, scan.raw = parse_nvidia_smi_xml(out), "nvidia-smi", out
            if any("mig_devices" in g for g in scan.gpus):
                listed = _run(["nvidia-smi", "-L"])  # the MIG UUIDs, which the XML does not print
                if listed:
                    scan.listing = listed
                    merge_nvidia_smi_list(scan.gpus, listed)
                else:
                    scan.tried.append("nvidia-smi -L: not found or failed (MIG devices without UUID)")
            return scan
        except ET.ParseError as e:
            scan.tried.append(f"nvidia-smi: unparsable output: {e}")
    else:
        scan.tried.append("nvidia-smi: not found or failed")
    scan.note = "no GPU found"
    return scan
