"""Claims that moved a GPU fault out of a run, and a rotated key taken for another person.

Regressions an independent audit found, each judged QUALIFIED:

- A kernel log logged after the run that claims it was read before the run (``collected_at`` 09:30,
  logged 10:55) dropped the fallen-off-the-bus line it holds (an event without a time lies in the log's
  window, which ended at the claim) — and an unreadable one hid that the run's GPU events are unknown.
  Such windows now end when the log took the entry.
- Which GPU a launch used (``CUDA_VISIBLE_DEVICES=0``) was read through the host's *latest* probe, taken
  after the GPU fell off the bus and the others were renumbered (or of another machine): the fault on the
  engine's own GPU was filtered out. Every GPU list of the host now counts: index 0 names each GPU any of
  them gives it.
- ``key.rotate`` hands a signer's identity to a new key, but the rules that ask whether two entries were
  signed by the same key compared key ids: the old key's failure superseded by its successor was
  withdrawn, and a reviewer's successor key accepted what the reviewer reviewed.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.policy.test_fail_closed import entry, qualified_entries, rejected, verdict_of

QUALIFIED = "QUALIFIED"
INCONCLUSIVE = "INCONCLUSIVE"
RUNTIME = "NOT QUALIFIED — RUNTIME RELIABILITY"
X79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=48211, name=python3, GPU has fallen off the bus."


def _health_kernel(es: list[dict[str, Any]], collected: str, logged: str, payload: dict[str, Any]) -> None:
    es.append(
        {
            "name": "health-kernel",
            "kind": "kernel.log",
            "key": "collector",
            "at": collected,
            "logged_at": logged,
            "subject": {"campaign": "health-job", "host": "gpu-box-1"},
            "payload": {"source": "dmesg", **payload},
        }
    )


UNTIMED_XID79 = {"events": [{"kind": "nvrm-xid", "xid": 79, "message": X79}]}
UNREADABLE = {"readable": False, "events": []}


@pytest.mark.parametrize(("payload", "verdict"), [(UNTIMED_XID79, RUNTIME), (UNREADABLE, INCONCLUSIVE)])
@pytest.mark.parametrize("collected", ["2026-09-10T09:30:00Z", "2026-09-10T10:55:00Z"])
def test_a_kernel_logs_claimed_read_time_does_not_move_what_it_holds_out_of_the_run(
    tmp_path: Path, payload: dict[str, Any], verdict: str, collected: str
) -> None:
    es = qualified_entries()
    _health_kernel(es, collected, "2026-09-10T10:55:00Z", copy.deepcopy(payload))
    assert verdict_of(tmp_path, es)["verdict"] == verdict


def test_a_kernel_log_read_before_the_run_that_the_log_took_before_it_holds_nothing_of_it(
    tmp_path: Path,
) -> None:
    """The neighbour: read and logged at 09:30, before the job started — its untimed line is not the run's."""
    es = qualified_entries()
    _health_kernel(es, "2026-09-10T09:30:00Z", "2026-09-10T09:30:00Z", copy.deepcopy(UNTIMED_XID79))
    es.insert(0, es.pop())
    assert verdict_of(tmp_path, es)["verdict"] == QUALIFIED


def _gpu(i: int, bus: str) -> dict[str, Any]:
    return {"index": i, "name": "NVIDIA H100", "pci_bus_id": f"00000000:{bus}:00.0", "uuid": f"GPU-{bus}"}


def _remap(later: list[dict[str, Any]] | None, fault_bus: str = "3b", **probe: Any) -> list[dict[str, Any]]:
    """The engine ran on GPU 0 (PCI 3b); a health job's kernel log records an Xid 79 on ``fault_bus`` during
    the run; a later host probe (``later``) lists the GPUs renumbered."""
    es = qualified_entries()
    entry(es, "host")["payload"]["gpus"] = [_gpu(0, "3B"), _gpu(1, "5E"), _gpu(2, "86")]
    entry(es, "launch")["payload"]["env"] = {"CUDA_VISIBLE_DEVICES": "0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    event = {
        "time": "2026-09-10T10:03:00Z",
        "kind": "nvrm-xid",
        "xid": 79,
        "device": f"PCI:0000:{fault_bus}:00",
    }
    es.append(
        {
            "name": "health-kernel",
            "kind": "kernel.log",
            "key": "collector",
            "at": "2026-09-10T10:55:00Z",
            "subject": {"campaign": "health-job", "host": "gpu-box-1"},
            "payload": {"source": "dmesg", "events": [{**event, "message": X79.replace("3b", fault_bus)}]},
        }
    )
    if later is not None:
        es.append(
            {
                "name": "later-probe",
                "kind": "host.probe",
                "key": "collector",
                "at": "2026-09-10T10:56:00Z",
                "payload": {"os": "Ubuntu 24.04", "kernel": "6.8.0", "gpus": later, **probe},
            }
        )
    return es


@pytest.mark.parametrize("hostname", ["gpu-box-1", "other-box"])
def test_a_later_probe_that_renumbered_the_gpus_does_not_filter_out_the_engines_gpu_fault(
    tmp_path: Path, hostname: str
) -> None:
    es = _remap([_gpu(0, "5E"), _gpu(1, "86"), _gpu(2, "3B")], hostname=hostname)
    assert verdict_of(tmp_path, es)["verdict"] == RUNTIME


def test_a_later_probe_the_fallen_gpu_is_missing_from_does_not_filter_out_its_fault(tmp_path: Path) -> None:
    """The GPU that fell off the bus (3b) is missing from the later probe: it is gone from the host, so
    host-prerequisites fails first (the ladder's first gate: PREREQUISITES, tests/policy/
    test_audit35_gpus_gone.py); its fault is not filtered out (the kernel log is not rejected)."""
    es = _remap([_gpu(0, "5E"), _gpu(1, "86")], hostname="gpu-box-1")
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "NOT QUALIFIED — PREREQUISITES"
    assert "health-kernel" not in rejected(v)
    host = next(g for g in v["gates"] if g["name"] == "host-prerequisites")
    assert "GPU-3B" in host["reason"]


def test_a_fault_on_a_gpu_no_probe_ever_gave_the_engine_is_not_its(tmp_path: Path) -> None:
    """The neighbour: GPU 0 is 3b in every list; the fault is on 86, never the engine's."""
    es = _remap([_gpu(0, "3B"), _gpu(1, "5E"), _gpu(2, "86")], fault_bus="86", hostname="gpu-box-1")
    assert verdict_of(tmp_path, es)["verdict"] == QUALIFIED
    assert verdict_of(tmp_path, _remap(None, fault_bus="86"))["verdict"] == QUALIFIED


KEYS = {
    "collector": ["collector"],
    "reviewer": ["reviewer"],
    "operator": ["operator"],
    "op2": ["operator"],
    "rev2": ["reviewer", "operator"],
}


def _rotate(old: str, new: str, at: str) -> dict[str, Any]:
    return {
        "kind": "key.rotate",
        "at": at,
        "payload": {"old_key": old, "new_key": new, "effective_at": at, "reason": "routine rotation"},
    }


def _crash_by_operator(es: list[dict[str, Any]]) -> None:
    crash = copy.deepcopy(entry(es, "launch"))
    crash["name"], crash["key"], crash["at"] = "crash", "operator", "2026-09-10T10:01:01Z"
    crash["payload"].update(exit_code=1, failure_signature="engine-exited-after-readiness")
    es.insert(es.index(entry(es, "launch")) + 1, crash)


@pytest.mark.parametrize("rotated_before", [True, False])
def test_a_failure_superseded_by_its_signers_rotated_key_stands(tmp_path: Path, rotated_before: bool) -> None:
    es = qualified_entries()
    _crash_by_operator(es)
    sup = {
        "name": "sup",
        "kind": "supersession",
        "key": "op2",
        "at": "2026-09-10T10:52:00Z",
        "refs": {"supersedes": "crash"},
        "payload": {"reason": "not a fault"},
    }
    rotation = _rotate(
        "operator", "op2", "2026-09-10T10:51:00Z" if rotated_before else "2026-09-10T10:53:00Z"
    )
    es += [rotation, sup] if rotated_before else [sup, rotation]
    v = verdict_of(tmp_path, es, keys=KEYS)
    assert v["verdict"] == RUNTIME
    assert rejected(v)["crash"] == "self-superseded"


def test_a_failure_superseded_by_an_unrotated_other_key_is_withdrawn(tmp_path: Path) -> None:
    """The neighbour: op2 was never the operator's key."""
    es = qualified_entries()
    _crash_by_operator(es)
    es.append(
        {
            "name": "sup",
            "kind": "supersession",
            "key": "op2",
            "at": "2026-09-10T10:52:00Z",
            "refs": {"supersedes": "crash"},
            "payload": {"reason": "not a fault"},
        }
    )
    v = verdict_of(tmp_path, es, keys=KEYS)
    assert v["verdict"] == QUALIFIED
    assert rejected(v)["crash"] == "superseded"


@pytest.mark.parametrize("rotate", [True, False])
def test_a_reviewers_rotated_key_does_not_also_accept(tmp_path: Path, rotate: bool) -> None:
    es = qualified_entries()
    entry(es, "benchmark-acceptance")["key"] = "rev2"
    if rotate:
        i = es.index(entry(es, "benchmark-acceptance"))
        es.insert(i, _rotate("reviewer", "rev2", entry(es, "benchmark-review")["at"].replace(":00Z", ":30Z")))
    v = verdict_of(tmp_path, es, keys=KEYS)
    if rotate:
        assert rejected(v)["benchmark"] == "acceptance-missing"
        assert v["verdict"] == INCONCLUSIVE
    else:
        assert v["verdict"] == QUALIFIED


# --- which GPU an index names, where the record cannot tell (audit 8) -------------------------------


@pytest.mark.parametrize(
    "env",
    [
        {"ROCR_VISIBLE_DEVICES": "1", "HIP_VISIBLE_DEVICES": "0"},  # ROCR keeps GPU1, HIP's 0 is it
        {
            "CUDA_VISIBLE_DEVICES": "0",
            "HIP_VISIBLE_DEVICES": "1",
        },  # two selections: which wins cannot be told
        {"NVIDIA_VISIBLE_DEVICES": "1", "CUDA_VISIBLE_DEVICES": "0"},  # a container's GPU1 is CUDA's 0
        {"CUDA_DEVICE_ORDER": "FASTEST_FIRST", "CUDA_VISIBLE_DEVICES": "0"},  # CUDA's 0 is the fastest GPU
        {"CUDA_VISIBLE_DEVICES": "0"},  # CUDA's default order is fastest first too
    ],
    ids=["rocr-then-hip", "cuda-and-hip", "container-then-cuda", "fastest-first", "cuda-default-order"],
)
def test_a_gpu_fault_is_not_narrowed_away_where_the_env_cannot_say_which_gpu(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """Regression: the first device variable found was read as an index into the probe's list, and the
    Xid 79 on the GPU the engine really used (5e) was charged to another: QUALIFIED. Several stacked
    variables, or a CUDA index without CUDA_DEVICE_ORDER=PCI_BUS_ID, cannot say which GPU: every event of
    the host counts."""
    es = _remap(None, fault_bus="5e")
    entry(es, "launch")["payload"]["env"] = env
    assert verdict_of(tmp_path, es)["verdict"] == RUNTIME


@pytest.mark.parametrize(
    "env",
    [
        {"CUDA_VISIBLE_DEVICES": "0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
        {"CUDA_VISIBLE_DEVICES": "GPU-3B"},  # a UUID names the GPU whatever the order
        {"NVIDIA_VISIBLE_DEVICES": "0"},
    ],
)
def test_a_gpu_fault_on_another_gpu_is_narrowed_away_where_the_env_says_which(
    tmp_path: Path, env: dict[str, str]
) -> None:
    es = _remap(None, fault_bus="5e")
    entry(es, "launch")["payload"]["env"] = env
    assert verdict_of(tmp_path, es)["verdict"] == QUALIFIED
