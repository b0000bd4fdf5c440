"""Audit 35 (f3): a GPU earlier accepted host probes saw and the newest one does not list is gone.

docs/POLICY.md: host-prerequisites "judges the host as the newest accepted host probe shows it: a GPU earlier
probes saw and the newest does not is gone from the host (it fell off the bus, a reset holds it), so the gate
fails". The gate failed only when the newest probe listed no GPU at all: probes listing GPUs 0,1,2 at
10:00:05 then 0,1 at 10:00:07, with a launch naming no *_VISIBLE_DEVICES, were QUALIFIED.

Now ``e.derived.gpus_gone`` of each newest probe (``ledger.devices.gpus_not_listed``: the same GPU by UUID
where both probes record one, else by index — an ``index`` integer, else its place in the list) fails the
gate, naming the GPU and the probe that saw it.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from ledger.devices import gpu_name, gpus_not_listed
from tests.policy.test_fail_closed import entry, gates, qualified_entries, rejected, verdict_of

PREREQ = "NOT QUALIFIED — PREREQUISITES"
GONE = "a GPU an earlier accepted host probe saw is not on the newest one"


def _gpu(index: int | None = None, uuid: str | None = None) -> dict[str, Any]:
    g: dict[str, Any] = {"name": "NVIDIA H100"}
    if index is not None:
        g["index"] = index
    if uuid is not None:
        g["uuid"] = uuid
    return g


def _two_probes(
    older: list[dict[str, Any]], newer: list[dict[str, Any]], **newer_payload: Any
) -> list[dict[str, Any]]:
    """The campaign's probe ``host`` (10:00:05) lists ``older``, ``host-newer`` (10:00:07) lists ``newer``;
    the launch names no *_VISIBLE_DEVICES (the engine ran on whatever GPUs the host had)."""
    es = qualified_entries()
    assert "env" not in entry(es, "launch")["payload"]
    entry(es, "host")["payload"]["gpus"] = copy.deepcopy(older)
    p = copy.deepcopy(entry(es, "host"))
    p["name"], p["at"] = "host-newer", "2026-09-10T10:00:07Z"
    p["payload"].update(gpus=copy.deepcopy(newer), **newer_payload)
    es.insert(es.index(entry(es, "host")) + 1, p)
    return es


def _reason(v: dict[str, Any]) -> str:
    return str(next(g for g in v["gates"] if g["name"] == "host-prerequisites")["reason"])


def _id(v: dict[str, Any], name: str) -> str:
    return next(i for i, n in v["_names"].items() if n == name)


def test_f3_a_gpu_the_newest_probe_no_longer_lists_is_gone(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, _two_probes([_gpu(0), _gpu(1), _gpu(2)], [_gpu(0), _gpu(1)]))
    assert v["verdict"] == PREREQ, v["gates"]
    reason = _reason(v)
    assert GONE in reason
    newer, older = _id(v, "host-newer")[:12], _id(v, "host")[:12]
    assert f"host probe {newer} (logged last and observed last: " in reason
    assert f"does not list GPU2 (listed by host probe {older}" in reason
    assert "GPU0" not in reason and "GPU1" not in reason


def test_f3_neighbour_every_gpu_back_passes(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, _two_probes([_gpu(0), _gpu(1), _gpu(2)], [_gpu(0), _gpu(1), _gpu(2)]))
    assert v["verdict"] == "QUALIFIED", v["gates"]


def test_f3_neighbour_a_gpu_added_is_nothing_gone(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, _two_probes([_gpu(0), _gpu(1)], [_gpu(0), _gpu(1), _gpu(2)]))
    assert v["verdict"] == "QUALIFIED", v["gates"]


def test_f3_neighbour_a_reordered_list_is_the_same_gpus(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, _two_probes([_gpu(0), _gpu(1), _gpu(2)], [_gpu(2), _gpu(0), _gpu(1)]))
    assert v["verdict"] == "QUALIFIED", v["gates"]


def test_f3_neighbour_renumbered_gpus_are_told_by_uuid(tmp_path: Path) -> None:
    """GPU-A fell off the bus and the driver renumbered the others: indexes 0 and 1 are still listed, but
    the GPU that was GPU0 is gone."""
    older = [_gpu(0, "GPU-A"), _gpu(1, "GPU-B"), _gpu(2, "GPU-C")]
    v = verdict_of(tmp_path, _two_probes(older, [_gpu(0, "GPU-B"), _gpu(1, "GPU-C")]))
    assert v["verdict"] == PREREQ
    assert "does not list GPU0 (GPU-A) (listed by host probe" in _reason(v)
    # the same GPUs renumbered, none gone
    shuffled = [_gpu(0, "GPU-C"), _gpu(1, "GPU-A"), _gpu(2, "GPU-B")]
    assert verdict_of(tmp_path, _two_probes(older, shuffled))["verdict"] == "QUALIFIED"


def test_f3_neighbour_a_replaced_gpu_at_the_same_index_is_gone(tmp_path: Path) -> None:
    older = [_gpu(0, "GPU-A"), _gpu(1, "GPU-B")]
    v = verdict_of(tmp_path, _two_probes(older, [_gpu(0, "GPU-A"), _gpu(1, "GPU-Z")]))
    assert v["verdict"] == PREREQ
    assert "does not list GPU1 (GPU-B)" in _reason(v)


def test_f3_neighbour_a_probe_without_uuids_is_compared_by_index(tmp_path: Path) -> None:
    older = [_gpu(0, "GPU-A"), _gpu(1, "GPU-B")]
    assert verdict_of(tmp_path, _two_probes(older, [_gpu(0), _gpu(1)]))["verdict"] == "QUALIFIED"
    v = verdict_of(tmp_path, _two_probes(older, [_gpu(0)]))
    assert v["verdict"] == PREREQ and "does not list GPU1 (GPU-B)" in _reason(v)


def test_f3_neighbour_a_gpu_without_index_or_uuid_is_told_by_its_place(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, _two_probes([_gpu(), _gpu(), _gpu()], [_gpu(), _gpu()]))
    assert v["verdict"] == PREREQ and "does not list GPU2 (listed by" in _reason(v)
    assert verdict_of(tmp_path, _two_probes([_gpu()], [_gpu(0)]))["verdict"] == "QUALIFIED"


def test_f3_neighbour_a_probe_of_another_machine_does_not_count(tmp_path: Path) -> None:
    es = _two_probes([_gpu(0), _gpu(1), _gpu(2)], [_gpu(0)], hostname="other-box")
    v = verdict_of(tmp_path, es)
    assert rejected(v)["host-newer"] == "other-machine"
    assert v["verdict"] == "QUALIFIED", v["gates"]


def test_f3_neighbour_a_cpu_deployment_is_unaffected(tmp_path: Path) -> None:
    es = _two_probes([_gpu(0), _gpu(1), _gpu(2)], [_gpu(0)])
    entry(es, "campaign-job")["payload"]["spec"]["bindings"]["device"] = "cpu"
    assert gates(verdict_of(tmp_path, es))["host-prerequisites"] == "passed"


def test_f3_neighbour_the_older_probe_pushed_late_does_not_bring_the_gpu_back(tmp_path: Path) -> None:
    """The older probe (0,1,2) logged after the newer one (0,1): the probe observed last still lacks GPU2,
    and the one logged last lacks nothing — the probe observed last must hold too."""
    es = _two_probes([_gpu(0), _gpu(1), _gpu(2)], [_gpu(0), _gpu(1)])
    entry(es, "host")["logged_at"] = "2026-09-10T10:00:30Z"
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == PREREQ
    assert f"host probe {_id(v, 'host-newer')[:12]} (observed last: " in _reason(v)


def test_f3_neighbour_the_newest_listing_no_gpu_gives_the_one_reason(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, _two_probes([_gpu(0), _gpu(1), _gpu(2)], []))
    assert v["verdict"] == PREREQ
    assert GONE not in _reason(v)
    assert "the newest accepted host probe shows no GPU" in _reason(v)


# --- the identity rule itself (ledger.devices) --------------------------------------------------------------


@pytest.mark.parametrize(
    ("seen", "now", "gone"),
    [
        ([_gpu(0), _gpu(1), _gpu(2)], [_gpu(0), _gpu(1)], [2]),
        ([_gpu(0), _gpu(1)], [_gpu(1), _gpu(0)], []),  # reordered
        ([_gpu(0, "GPU-A")], [_gpu(0, "GPU-B")], [0]),  # replaced: another UUID at the index
        ([_gpu(0, "GPU-A")], [_gpu(3, "GPU-A")], []),  # renumbered: the same UUID
        ([_gpu(0, "GPU-A")], [_gpu(0)], []),  # one records no UUID: by index
        ([_gpu(), _gpu()], [_gpu(0)], [1]),  # no index: its place in the list
        ([_gpu(0)], "not a list", [0]),
        (["not an object"], [_gpu(0)], [0]),  # cannot be told: fail closed
        ("not a list", [_gpu(0)], []),
        ([{"index": True, "name": "x"}], [_gpu(1)], [0]),  # a boolean is no index: its place, 0
    ],
)
def test_gpus_not_listed(seen: Any, now: Any, gone: list[int]) -> None:
    assert [place for place, _ in gpus_not_listed(seen, now)] == gone


def test_gpu_name() -> None:
    assert gpu_name(_gpu(2, "GPU-X"), 0) == "GPU2 (GPU-X)"
    assert gpu_name(_gpu(), 4) == "GPU4"
    assert gpu_name("x", 1) == "GPU at place 1 (not an object)"
