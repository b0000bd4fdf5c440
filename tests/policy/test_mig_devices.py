"""Issue 11: a MIG instance given as ``CUDA_VISIBLE_DEVICES=MIG-<uuid>`` was never found on a host probe (no
probe recorded MIG devices), so such a launch always failed host-prerequisites. The host probe now records
each GPU's MIG devices where MIG is enabled (NVML; ``nvidia-smi -q -x`` with the UUIDs ``nvidia-smi -L``
prints), the shared device rule (``ledger.devices``) finds a MIG UUID listed under a probed GPU, and a launch
given one is attributed that GPU's PCI address for its GPU events. Unknown or malformed MIG data names
nothing (fail closed)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest
from pydantic import ValidationError

from ledger.collectors import gpu as gpu_mod
from ledger.collectors.gpu import merge_nvidia_smi_list, parse_nvidia_smi_csv, parse_nvidia_smi_xml
from ledger.collectors.host import host_probe
from ledger.devices import device_of
from ledger.entries import HostProbe
from ledger.policy.acceptance import _launch_devices
from tests.policy.test_fail_closed import entry, gates, qualified_entries, verdict_of

GPU_A = "GPU-a1b2c3d4-0000-4000-8000-00000000000a"
GPU_B = "GPU-a1b2c3d4-0000-4000-8000-00000000000b"
MIG_A0 = "MIG-0e1f2a3b-0000-5000-9000-0000000000a0"
MIG_A2 = "MIG-0e1f2a3b-0000-5000-9000-0000000000a2"
PREREQ = "NOT QUALIFIED — PREREQUISITES"


# --- NVML, mocked at the pynvml function level ---------------------------------------------------------


class _Nvml:
    """Two GPUs: A in MIG mode with instances in slots 0 and 2 of 7; B not MIG-capable (NOT_SUPPORTED)."""

    def __init__(self) -> None:
        self.mig_mode = {"A": [pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_DEVICE_MIG_ENABLE]}
        self.slots: dict[int, Any] = {0: ("A", 0, MIG_A0, 1, 0), 2: ("A", 2, MIG_A2, 5, 0)}
        self.slot_error: dict[int, int] = {}
        self.max_error: int | None = None

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        def err(code: int) -> pynvml.NVMLError:
            return pynvml.NVMLError(code)

        def mig_mode(h: str) -> list[int]:
            if h not in self.mig_mode:
                raise err(pynvml.NVML_ERROR_NOT_SUPPORTED)
            return self.mig_mode[h]

        def max_count(h: str) -> int:
            if self.max_error is not None:
                raise err(self.max_error)
            return 7

        def by_index(h: str, i: int) -> Any:
            if i in self.slot_error:
                raise err(self.slot_error[i])
            if i not in self.slots:
                raise err(pynvml.NVML_ERROR_NOT_FOUND)
            return self.slots[i]

        def uuid(h: Any) -> str | bytes:
            return {"A": GPU_A, "B": GPU_B.encode()}[h] if isinstance(h, str) else h[2]

        def memory(h: Any) -> Any:
            return SimpleNamespace(total=(81920 if isinstance(h, str) else 9856) * 2**20, used=0)

        fns = {
            "nvmlInit": lambda: None,
            "nvmlShutdown": lambda: None,
            "nvmlSystemGetDriverVersion": lambda: "550.54.15",
            "nvmlSystemGetCudaDriverVersion": lambda: 12040,
            "nvmlDeviceGetCount": lambda: 2,
            "nvmlDeviceGetHandleByIndex": lambda i: "AB"[i],
            "nvmlDeviceGetName": lambda h: "NVIDIA A100-SXM4-80GB",
            "nvmlDeviceGetUUID": uuid,
            "nvmlDeviceGetMemoryInfo": memory,
            "nvmlDeviceGetUtilizationRates": lambda h: SimpleNamespace(gpu=0),
            "nvmlDeviceGetPciInfo": lambda h: SimpleNamespace(
                busId={"A": "00000000:3B:00.0", "B": b"00000000:5E:00.0"}[h]
            ),
            "nvmlDeviceGetMigMode": mig_mode,
            "nvmlDeviceGetMaxMigDeviceCount": max_count,
            "nvmlDeviceGetMigDeviceHandleByIndex": by_index,
            "nvmlDeviceGetGpuInstanceId": lambda m: m[3],
            "nvmlDeviceGetComputeInstanceId": lambda m: m[4],
        }
        for name, fn in fns.items():
            monkeypatch.setattr(pynvml, name, fn)


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> _Nvml:
    n = _Nvml()
    n.install(monkeypatch)
    return n


def test_nvml_records_the_mig_devices_of_a_gpu_in_mig_mode(nvml: _Nvml) -> None:
    gpus, _ = gpu_mod._from_nvml()
    a, b = gpus
    assert a["mig_devices"] == [
        {
            "index": 0,
            "uuid": MIG_A0,
            "gpu_instance_id": 1,
            "compute_instance_id": 0,
            "memory_total_mib": 9856.0,
        },
        {
            "index": 2,
            "uuid": MIG_A2,
            "gpu_instance_id": 5,
            "compute_instance_id": 0,
            "memory_total_mib": 9856.0,
        },
    ]
    assert "details" not in a  # every slot read: an empty slot (NOT_FOUND) is no instance, not an error
    assert "mig_devices" not in b  # not MIG-capable: nothing recorded, nothing listed
    probe = host_probe((), gpu_mod.GpuScan(gpus=gpus, source="nvml"))
    HostProbe.model_validate(probe)  # the host.probe schema takes it
    assert device_of(MIG_A2, gpus) is a and device_of(MIG_A0, gpus) is a


def test_nvml_mig_mode_disabled_records_no_mig_devices(nvml: _Nvml) -> None:
    nvml.mig_mode["A"] = [pynvml.NVML_DEVICE_MIG_DISABLE, pynvml.NVML_DEVICE_MIG_ENABLE]  # pending only
    gpus, _ = gpu_mod._from_nvml()
    assert all("mig_devices" not in g for g in gpus)
    assert device_of(MIG_A0, gpus) is None


def test_nvml_an_unreadable_slot_is_recorded_as_an_error_and_lists_nothing(nvml: _Nvml) -> None:
    nvml.slot_error[1] = pynvml.NVML_ERROR_UNKNOWN
    gpus, _ = gpu_mod._from_nvml()
    assert [m["index"] for m in gpus[0]["mig_devices"]] == [0, 2]
    assert "MIG device 1" in gpus[0]["details"]["mig_error"]
    HostProbe.model_validate(host_probe((), gpu_mod.GpuScan(gpus=gpus, source="nvml")))


def test_nvml_a_uuid_that_is_not_a_mig_uuid_is_not_recorded(nvml: _Nvml) -> None:
    nvml.slots[2] = ("A", 2, GPU_B, 5, 0)  # a driver answering the parent's kind of UUID: names nothing
    gpus, _ = gpu_mod._from_nvml()
    second = gpus[0]["mig_devices"][1]
    assert "uuid" not in second and "not a MIG- UUID" in gpus[0]["details"]["mig_error"]
    HostProbe.model_validate(host_probe((), gpu_mod.GpuScan(gpus=gpus, source="nvml")))
    assert device_of(MIG_A2, gpus) is None


def test_nvml_max_count_failing_lists_no_mig_device(nvml: _Nvml) -> None:
    nvml.max_error = pynvml.NVML_ERROR_UNKNOWN
    gpus, _ = gpu_mod._from_nvml()
    assert (
        gpus[0]["mig_devices"] == [] and "nvmlDeviceGetMaxMigDeviceCount" in gpus[0]["details"]["mig_error"]
    )
    assert device_of(MIG_A0, gpus) is None


# --- nvidia-smi -q -x (the real schema: nvsmi_device_v12.dtd) and nvidia-smi -L ------------------------

XML = f"""<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">
<nvidia_smi_log>
	<timestamp>Sat Dec  5 21:00:00 2026</timestamp>
	<driver_version>550.54.15</driver_version>
	<cuda_version>12.4</cuda_version>
	<attached_gpus>2</attached_gpus>
	<gpu id="00000000:3B:00.0">
		<product_name>NVIDIA A100-SXM4-80GB</product_name>
		<mig_mode>
			<current_mig>Enabled</current_mig>
			<pending_mig>Enabled</pending_mig>
		</mig_mode>
		<mig_devices>
			<mig_device>
				<index>0</index>
				<gpu_instance_id>1</gpu_instance_id>
				<compute_instance_id>0</compute_instance_id>
				<device_attributes>
					<shared>
						<multiprocessor_count>14</multiprocessor_count>
						<copy_engine_count>1</copy_engine_count>
					</shared>
				</device_attributes>
				<ecc_error_count>
					<volatile_count>
						<sram_uncorrectable>0</sram_uncorrectable>
					</volatile_count>
				</ecc_error_count>
				<fb_memory_usage>
					<total>9728 MiB</total>
					<reserved>0 MiB</reserved>
					<used>13 MiB</used>
					<free>9714 MiB</free>
				</fb_memory_usage>
				<bar1_memory_usage>
					<total>16383 MiB</total>
					<used>0 MiB</used>
					<free>16383 MiB</free>
				</bar1_memory_usage>
			</mig_device>
			<mig_device>
				<index>1</index>
				<gpu_instance_id>5</gpu_instance_id>
				<compute_instance_id>0</compute_instance_id>
				<fb_memory_usage>
					<total>19968 MiB</total>
					<used>25 MiB</used>
				</fb_memory_usage>
			</mig_device>
		</mig_devices>
		<uuid>{GPU_A}</uuid>
		<minor_number>0</minor_number>
		<fb_memory_usage>
			<total>81920 MiB</total>
			<used>412 MiB</used>
		</fb_memory_usage>
		<utilization>
			<gpu_util>N/A</gpu_util>
		</utilization>
	</gpu>
	<gpu id="00000000:5E:00.0">
		<product_name>NVIDIA A100-SXM4-80GB</product_name>
		<mig_mode>
			<current_mig>Disabled</current_mig>
			<pending_mig>Disabled</pending_mig>
		</mig_mode>
		<mig_devices>
			None
		</mig_devices>
		<uuid>{GPU_B}</uuid>
		<minor_number>1</minor_number>
	</gpu>
</nvidia_smi_log>
"""

LISTING = f"""GPU 0: NVIDIA A100-SXM4-80GB (UUID: {GPU_A})
  MIG 1g.10gb     Device  0: (UUID: {MIG_A0})
  MIG 2g.20gb     Device  1: (UUID: {MIG_A2})
GPU 1: NVIDIA A100-SXM4-80GB (UUID: {GPU_B})
"""


def test_nvidia_smi_xml_records_mig_devices_and_the_listing_adds_their_uuids() -> None:
    gpus = parse_nvidia_smi_xml(XML)
    a, b = gpus
    assert a["mig_devices"] == [
        {"index": 0, "gpu_instance_id": 1, "compute_instance_id": 0, "memory_total_mib": 9728.0},
        {"index": 1, "gpu_instance_id": 5, "compute_instance_id": 0, "memory_total_mib": 19968.0},
    ]
    assert "mig_devices" not in b
    assert device_of(MIG_A0, gpus) is None  # the XML prints no MIG UUID: nothing to match yet
    HostProbe.model_validate(host_probe((), gpu_mod.GpuScan(gpus=gpus, source="nvidia-smi")))
    merge_nvidia_smi_list(gpus, LISTING)
    assert [m.get("uuid") for m in a["mig_devices"]] == [MIG_A0, MIG_A2]
    assert device_of(MIG_A2, gpus) is a and device_of(MIG_A0, gpus) is a
    HostProbe.model_validate(host_probe((), gpu_mod.GpuScan(gpus=gpus, source="nvidia-smi")))


@pytest.mark.parametrize(
    "listing",
    [
        # a MIG line under a GPU the XML does not have
        f"GPU 0: NVIDIA A100 (UUID: GPU-ffffffff-0000-4000-8000-000000000000)\n"
        f"  MIG 1g.10gb Device 0: (UUID: {MIG_A0})\n",
        # a MIG line under no GPU line
        f"  MIG 1g.10gb     Device  0: (UUID: {MIG_A0})\n",
        # under a GPU not in MIG mode
        f"GPU 1: NVIDIA A100 (UUID: {GPU_B})\n  MIG 1g.10gb     Device  0: (UUID: {MIG_A0})\n",
        # after an unindented line of another shape, the GPU line no longer holds
        f"GPU 0: NVIDIA A100 (UUID: {GPU_A})\nSomething else\n  MIG 1g.10gb  Device  0: (UUID: {MIG_A0})\n",
        # not a MIG- UUID
        f"GPU 0: NVIDIA A100 (UUID: {GPU_A})\n  MIG 1g.10gb     Device  0: (UUID: {GPU_B})\n",
        "",
    ],
    ids=["unknown-gpu", "no-gpu-line", "gpu-not-mig", "interrupted", "not-mig-uuid", "empty"],
)
def test_a_mig_uuid_the_listing_does_not_tie_to_a_mig_gpu_is_not_recorded(listing: str) -> None:
    gpus = parse_nvidia_smi_xml(XML)
    merge_nvidia_smi_list(gpus, listing)
    assert all("uuid" not in m for g in gpus for m in g.get("mig_devices", []))
    assert "mig_devices" not in gpus[1]
    assert device_of(MIG_A0, gpus) is None


def test_a_listing_index_the_xml_lacks_is_added_with_its_uuid() -> None:
    gpus = parse_nvidia_smi_xml(XML)
    merge_nvidia_smi_list(
        gpus, f"GPU 0: NVIDIA A100 (UUID: {GPU_A})\n  MIG 1g.10gb  Device  4: (UUID: {MIG_A2})\n"
    )
    assert gpus[0]["mig_devices"][-1] == {"index": 4, "uuid": MIG_A2}
    assert device_of(MIG_A2, gpus) is gpus[0]


def test_a_duplicated_xml_index_gets_no_uuid() -> None:
    gpus = parse_nvidia_smi_xml(XML.replace("<index>1</index>", "<index>0</index>"))
    merge_nvidia_smi_list(gpus, LISTING)
    assert all("uuid" not in m for m in gpus[0]["mig_devices"] if m["index"] == 0)


def test_the_csv_query_records_no_mig_devices() -> None:
    gpus = parse_nvidia_smi_csv(f"0, NVIDIA A100, {GPU_A}, 550.54.15, 81920, 412, 0, 00000000:3B:00.0\n")
    assert "mig_devices" not in gpus[0] and device_of(MIG_A0, gpus) is None


def test_scan_gpus_merges_the_listing_when_nvml_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_nvml() -> Any:
        raise RuntimeError("no NVML")

    outputs = {("nvidia-smi", "-q", "-x"): XML, ("nvidia-smi", "-L"): LISTING}
    monkeypatch.setattr(gpu_mod, "_from_nvml", no_nvml)
    monkeypatch.setattr(gpu_mod, "_run", lambda argv, timeout=20.0: outputs.get(tuple(argv)))
    scan = gpu_mod.scan_gpus()
    assert scan.source == "nvidia-smi"
    assert device_of(MIG_A2, scan.gpus) is scan.gpus[0]
    # both outputs are kept (as the probe's artifacts): the UUIDs came from the listing
    assert scan.outputs() == [("nvidia-smi.txt", XML), ("nvidia-smi-L.txt", LISTING)]


# --- the shared rule on malformed MIG data: names nothing ----------------------------------------------


def _gpu(**kw: Any) -> dict[str, Any]:
    return {"index": 0, "name": "NVIDIA A100", "uuid": GPU_A, "pci_bus_id": "00000000:3B:00.0", **kw}


@pytest.mark.parametrize(
    "gpu",
    [
        _gpu(),  # dropped: no mig_devices
        _gpu(migs=[{"uuid": MIG_A0}]),  # renamed
        _gpu(mig_devices=[{"uid": MIG_A0}]),  # the uuid field renamed
        _gpu(mig_devices={"uuid": MIG_A0}),  # mistyped: an object, not a list
        _gpu(mig_devices=[MIG_A0]),  # mistyped: a string, not an object
        _gpu(mig_devices=[{"uuid": [MIG_A0]}]),  # mistyped uuid
        _gpu(mig_devices=[{"uuid": MIG_A0.lower().replace("mig-", "gpu-")}]),  # not a MIG- UUID
        _gpu(mig_devices=[{"uuid": MIG_A0 + " "}]),
        _gpu(mig_devices=None),
    ],
    ids=["dropped", "renamed", "uuid-renamed", "object", "string", "uuid-list", "not-mig", "padded", "null"],
)
def test_malformed_mig_data_names_no_device(gpu: dict[str, Any]) -> None:
    assert device_of(MIG_A0, [gpu]) is None
    assert device_of(GPU_A, [gpu]) is gpu  # the GPU itself is still found by its own UUID


@pytest.mark.parametrize(
    "mig",
    [{"uuid": MIG_A0, "index": "0"}, {"uuid": 5}, {"uuid": "GPU-1"}, {"uid": MIG_A0}, "MIG-x"],
    ids=["index-text", "uuid-number", "not-mig-uuid", "renamed", "string"],
)
def test_the_host_probe_schema_refuses_malformed_mig_devices(mig: Any) -> None:
    probe = {"hostname": "h", "os": "Linux", "kernel": "6.8", "gpus": [_gpu(mig_devices=[mig])]}
    with pytest.raises(ValidationError):
        HostProbe.model_validate(probe)


def test_a_mig_uuid_is_not_a_gpu_index_nor_another_gpus_instance() -> None:
    gpus = [_gpu(), _gpu(index=1, uuid=GPU_B, pci_bus_id="00000000:5E:00.0", mig_devices=[{"uuid": MIG_A0}])]
    assert device_of(MIG_A0, gpus) is gpus[1]  # reordered: found under the GPU that lists it
    assert device_of(MIG_A2, gpus) is None


# --- the policy ---------------------------------------------------------------------------------------


def _with_mig(env: dict[str, str], migs: Any = "listed") -> list[dict[str, Any]]:
    es = qualified_entries()
    entry(es, "launch")["payload"]["env"] = env
    g = entry(es, "host")["payload"]["gpus"][1]
    g["uuid"] = GPU_A
    if migs == "listed":
        g["mig_devices"] = [{"uuid": MIG_A0, "index": 0, "gpu_instance_id": 1, "compute_instance_id": 0}]
    return es


@pytest.mark.parametrize("item", [MIG_A0, f"MIG-{GPU_A}/1/0"], ids=["uuid", "legacy-name"])
def test_a_mig_instance_the_probe_lists_passes_host_prerequisites(tmp_path: Path, item: str) -> None:
    v = verdict_of(tmp_path, _with_mig({"CUDA_VISIBLE_DEVICES": item}))
    assert v["verdict"] == "QUALIFIED", v["gates"]


@pytest.mark.parametrize(
    ("env", "migs"),
    [
        ({"CUDA_VISIBLE_DEVICES": MIG_A2}, "listed"),  # another instance
        ({"CUDA_VISIBLE_DEVICES": MIG_A0}, None),  # the probe records no MIG devices
        ({"CUDA_VISIBLE_DEVICES": f"MIG-{GPU_A}/2/0"}, "listed"),  # the legacy name of another instance
        ({"CUDA_VISIBLE_DEVICES": f"MIG-{GPU_B}/1/0"}, "listed"),  # the legacy name on another GPU
        ({"CUDA_VISIBLE_DEVICES": f"{MIG_A0},{MIG_A2}"}, "listed"),  # one of two
    ],
    ids=["other-instance", "none-recorded", "legacy-other-instance", "legacy-other-gpu", "one-of-two"],
)
def test_a_mig_instance_the_probe_does_not_list_fails_host_prerequisites(
    tmp_path: Path, env: dict[str, str], migs: Any
) -> None:
    v = verdict_of(tmp_path, _with_mig(env, migs))
    assert v["verdict"] == PREREQ, v["gates"]
    assert gates(v)["host-prerequisites"] == "failed"


# --- GPU-event attribution: a MIG instance is its GPU's PCI address -------------------------------------


def _launch(env: dict[str, str]) -> Any:
    return SimpleNamespace(payload={"env": env})


def test_a_mig_instance_maps_to_its_parent_gpus_pci_address() -> None:
    gpus = [
        _gpu(),
        _gpu(index=1, uuid=GPU_B, pci_bus_id="00000000:5E:00.0", mig_devices=[{"uuid": MIG_A2, "index": 0}]),
    ]
    assert _launch_devices(_launch({"CUDA_VISIBLE_DEVICES": MIG_A2}), [gpus]) == {"0000:5e:00"}
    assert _launch_devices(_launch({"CUDA_VISIBLE_DEVICES": MIG_A2}), [list(reversed(gpus))]) == {
        "0000:5e:00"
    }
    # not listed by every probe's list: which GPU it ran on cannot be told — every event is the launch's
    assert _launch_devices(_launch({"CUDA_VISIBLE_DEVICES": MIG_A2}), [gpus, [_gpu()]]) is None
    assert _launch_devices(_launch({"CUDA_VISIBLE_DEVICES": MIG_A0}), [gpus]) is None
    bad = [_gpu(mig_devices={"uuid": MIG_A2})]
    assert _launch_devices(_launch({"CUDA_VISIBLE_DEVICES": MIG_A2}), [bad]) is None


# --- the legacy name (drivers before R470): MIG-<GPU UUID>/<GPU instance id>/<compute instance id> --------


def test_a_legacy_mig_name_names_the_gpu_listing_that_instance() -> None:
    """Regression: ``MIG-GPU-…/1/0`` was never matched, so a launch given a MIG instance by its legacy name
    failed host-prerequisites though the probe listed the instance (ids 1/0 under that GPU)."""
    a = _gpu(mig_devices=[{"uuid": MIG_A0, "gpu_instance_id": 1, "compute_instance_id": 0}])
    b = _gpu(index=1, uuid=GPU_B, mig_devices=[{"gpu_instance_id": 2, "compute_instance_id": 1}])
    assert device_of(f"MIG-{GPU_A}/1/0", [a, b]) is a
    assert device_of(f"MIG-{GPU_B}/2/1", [a, b]) is b  # no MIG UUID recorded: the ids name it
    assert device_of(f"MIG-{GPU_B}/2/1", [b, a]) is b  # reordered


@pytest.mark.parametrize(
    "item",
    [
        f"MIG-{GPU_A}/1/1",  # another compute instance
        f"MIG-{GPU_A}/2/0",  # another GPU instance
        f"MIG-{GPU_B}/1/0",  # another GPU
        f"MIG-{GPU_A}/1",  # a part dropped
        f"MIG-{GPU_A}/1/0/0",  # a part too many
        f"MIG-{GPU_A}//0",  # empty
        f"MIG-{GPU_A}/x/0",  # not digits
        f"MIG-{GPU_A}/１/0",  # fullwidth digit
        f"MIG-{GPU_A}/-1/0",
        f"MIG-{GPU_A.lower()}/1/0",  # the GPU UUID in another case: not the UUID the probe lists
        "MIG-GPU-/1/0",
        f"mig-{GPU_A}/1/0",  # not the MIG- prefix
    ],
)
def test_a_legacy_mig_name_of_no_listed_instance_names_nothing(item: str) -> None:
    a = _gpu(mig_devices=[{"uuid": MIG_A0, "gpu_instance_id": 1, "compute_instance_id": 0}])
    assert device_of(item, [a]) is None


@pytest.mark.parametrize(
    "mig",
    [
        {"uuid": MIG_A0},  # ids dropped
        {"uuid": MIG_A0, "gpu_instance_id": 1},  # one id dropped
        {"uuid": MIG_A0, "gi": 1, "ci": 0},  # ids renamed
        {"uuid": MIG_A0, "gpu_instance_id": "1", "compute_instance_id": "0"},  # ids mistyped
        {"uuid": MIG_A0, "gpu_instance_id": True, "compute_instance_id": False},  # booleans are not ids
        {"uuid": MIG_A0, "gpu_instance_id": None, "compute_instance_id": None},  # unread
        {"uuid": MIG_A0, "gpu_instance_id": 0, "compute_instance_id": 1},  # reordered
    ],
    ids=["dropped", "one-dropped", "renamed", "text", "bool", "null", "swapped"],
)
def test_a_legacy_mig_name_needs_both_ids_recorded_as_integers(mig: dict[str, Any]) -> None:
    assert device_of(f"MIG-{GPU_A}/1/0", [_gpu(mig_devices=[mig])]) is None
