"""Audit 22, F9: a campaign that gave its engine CUDA_VISIBLE_DEVICES=7 on a host whose probe lists GPU 0
only was QUALIFIED with a GPU manifest (a CPU build runs on, on no GPU at all). The GPUs a launch was given
must be on the newest accepted host probe (``e.derived.launch_devices_missing``, gate host-prerequisites)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.policy.test_fail_closed import entry, gates, qualified_entries, verdict_of

PREREQ = "NOT QUALIFIED — PREREQUISITES"
UUID = "GPU-5a1c0de2-0000-4000-8000-000000000001"


def _given(env: dict[str, str], *, uuid_on_probe: bool = False) -> list[dict[str, Any]]:
    es = qualified_entries()
    entry(es, "launch")["payload"]["env"] = env
    if uuid_on_probe:
        entry(es, "host")["payload"]["gpus"][1]["uuid"] = UUID
    return es


@pytest.mark.parametrize(
    "env",
    [
        {"CUDA_VISIBLE_DEVICES": "7"},
        {"CUDA_VISIBLE_DEVICES": "0,7"},
        {"CUDA_VISIBLE_DEVICES": " 3 "},
        {"HIP_VISIBLE_DEVICES": "4"},
        {"NVIDIA_VISIBLE_DEVICES": UUID},  # a UUID the probe does not list
        {"CUDA_VISIBLE_DEVICES": "MIG-5a1c0de2-0000-4000-8000-000000000009"},  # no probe lists MIG instances
        {"CUDA_VISIBLE_DEVICES": "GPU-7"},
    ],
    ids=["index-7", "one-of-two", "padded", "hip", "uuid", "mig", "bad-uuid"],
)
def test_a_gpu_the_engine_was_given_that_the_host_does_not_have_fails_host_prerequisites(
    tmp_path: Path, env: dict[str, str]
) -> None:
    v = verdict_of(tmp_path, _given(env))
    assert v["verdict"] == PREREQ, v["gates"]
    reason = next(g for g in v["gates"] if g["name"] == "host-prerequisites")["reason"]
    assert "a GPU the engine was given is not on the newest accepted host probe" in reason
    assert next(iter(env)) in reason


@pytest.mark.parametrize(
    ("env", "uuid_on_probe"),
    [
        ({"CUDA_VISIBLE_DEVICES": "0"}, False),
        ({"CUDA_VISIBLE_DEVICES": "0,1,2", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, False),
        ({"NVIDIA_VISIBLE_DEVICES": "all"}, False),
        ({"CUDA_VISIBLE_DEVICES": ""}, False),
        ({"NVIDIA_VISIBLE_DEVICES": UUID}, True),
        ({}, False),
    ],
    ids=["index-0", "all-three", "nvidia-all", "empty", "uuid-listed", "none-given"],
)
def test_gpus_the_host_has_pass(tmp_path: Path, env: dict[str, str], uuid_on_probe: bool) -> None:
    v = verdict_of(tmp_path, _given(env, uuid_on_probe=uuid_on_probe))
    assert v["verdict"] == "QUALIFIED", v["gates"]


def test_the_newest_probe_decides(tmp_path: Path) -> None:
    """A GPU that a newer probe no longer lists is gone; one a newer probe lists is there."""
    es = _given({"CUDA_VISIBLE_DEVICES": "2"})
    newer = copy.deepcopy(entry(es, "host"))
    newer["name"], newer["at"] = "host-2", "2026-09-10T10:00:07Z"
    newer["payload"]["gpus"] = newer["payload"]["gpus"][:2]  # GPU 2 gone
    es.insert(es.index(entry(es, "host")) + 1, newer)
    assert gates(verdict_of(tmp_path / "gone", es))["host-prerequisites"] == "failed"
    es2 = _given({"CUDA_VISIBLE_DEVICES": "2"})
    older = copy.deepcopy(entry(es2, "host"))
    older["name"], older["at"] = "host-0", "2026-09-10T10:00:01Z"
    older["payload"]["gpus"] = older["payload"]["gpus"][:2]  # not yet there
    es2.insert(es2.index(entry(es2, "host")), older)
    assert verdict_of(tmp_path / "back", es2)["verdict"] == "QUALIFIED"


@pytest.mark.parametrize("item", ["²", "١", "１"], ids=["superscript", "arabic-indic", "fullwidth"])
def test_a_non_ascii_digit_names_no_gpu_and_crashes_nothing(tmp_path: Path, item: str) -> None:
    """Regression (audit 27, f2): ``²`` crashed the verdict (``int('²')``: a traceback, exit 1), and ``١`` or
    ``１`` were read as GPU 1. No driver reads them as an index: a device the host does not have."""
    v = verdict_of(tmp_path, _given({"CUDA_VISIBLE_DEVICES": item}))
    assert v["verdict"] == PREREQ, v["gates"]


def test_a_probe_whose_gpus_record_no_index_names_them_by_their_place(tmp_path: Path) -> None:
    """Regression (audit 27, f3): GPUs listed without ``index`` (``GpuInfo``: their place in the list) made
    every device a launch was given missing: a healthy campaign was NOT QUALIFIED — PREREQUISITES."""
    es = _given({"CUDA_VISIBLE_DEVICES": "1"})
    for g in entry(es, "host")["payload"]["gpus"]:
        del g["index"]
    assert verdict_of(tmp_path, es)["verdict"] == "QUALIFIED"
    es = _given({"CUDA_VISIBLE_DEVICES": "3"})
    for g in entry(es, "host")["payload"]["gpus"]:
        del g["index"]
    assert verdict_of(tmp_path / "past-the-list", es)["verdict"] == PREREQ
