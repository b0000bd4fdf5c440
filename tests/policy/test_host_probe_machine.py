"""A host probe is a fact of the machine it ran on (``payload.hostname``), not of the host it is filed under.

Before, a probe naming another machine counted for the campaign's host: a probe of a healthy box, filed under
the host whose own probe showed no GPU, passed host prerequisites. Now the campaign's job records the machine
it ran on (``spec.bindings.hostname``, `ledger collect run`), and a probe of any other machine is rejected
``other-machine``; where no job records it (the host may be a fleet name, seed 000's ``wsl-rtx5090`` probed
as ``hiro``), probes that name different machines leave host prerequisites INCONCLUSIVE.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from ledger.errors import SchemaError
from tests.policy.test_fail_closed import entry, gates, qualified_entries, rejected, verdict_of


def _probe(es: list[dict[str, Any]], name: str, at: str, **payload: Any) -> dict[str, Any]:
    """Another host probe under the campaign's host, logged at ``at`` (before the job ends)."""
    p = copy.deepcopy(entry(es, "host"))
    p["name"], p["at"] = name, at
    p["payload"].update(payload)
    for k in [k for k, v in payload.items() if v is _DROP]:
        p["payload"].pop(k)
    es.insert(es.index(entry(es, "campaign-done")), p)
    return p


_DROP = object()


def _unbound(es: list[dict[str, Any]]) -> None:
    """The job records no machine (entered by hand, or an older collector)."""
    del entry(es, "campaign-job")["payload"]["spec"]["bindings"]["hostname"]


def test_the_baseline_job_records_its_machine_and_qualifies(tmp_path: Path) -> None:
    es = qualified_entries()
    assert entry(es, "campaign-job")["payload"]["spec"]["bindings"]["hostname"] == "gpu-box-1"
    assert verdict_of(tmp_path, es)["verdict"] == "QUALIFIED"


def test_a_probe_of_another_machine_does_not_show_this_hosts_gpus(tmp_path: Path) -> None:
    """Regression: the host's own newest probe shows no GPU; a newer probe of another machine, filed under
    the host, showed GPUs and host prerequisites passed."""
    es = qualified_entries()
    _probe(es, "own-no-gpu", "2026-09-10T10:30:00Z", gpus=[])
    _probe(es, "other-box", "2026-09-10T10:31:00Z", hostname="gpu-box-2")
    v = verdict_of(tmp_path, es)
    assert rejected(v)["other-box"] == "other-machine"
    assert gates(v)["host-prerequisites"] == "failed"
    assert v["verdict"] == "NOT QUALIFIED — PREREQUISITES"
    why = next(r for r in v["rejected"] if v["_names"].get(r["entry"]) == "other-box")["detail"]
    assert "'gpu-box-2'" in why and "'gpu-box-1'" in why


def test_a_probe_of_another_machine_showing_no_gpu_is_not_this_hosts_failure(tmp_path: Path) -> None:
    es = qualified_entries()
    _probe(es, "other-box", "2026-09-10T10:31:00Z", hostname="gpu-box-2", gpus=[])
    v = verdict_of(tmp_path, es)
    assert rejected(v)["other-box"] == "other-machine"
    assert v["verdict"] == "QUALIFIED"


@pytest.mark.parametrize("spelled", ["GPU-BOX-1", "gpu-box-1.lab.example", "gpu-box-1 "])
def test_the_machine_is_named_exactly_as_the_job_recorded_it(tmp_path: Path, spelled: str) -> None:
    """The job's machine and its probe's both come from the OS (`socket.gethostname()` on the same box): any
    other spelling is another record of the name, and fails closed."""
    es = qualified_entries()
    entry(es, "host")["payload"]["hostname"] = spelled
    v = verdict_of(tmp_path, es)
    assert rejected(v)["host"] == "other-machine"
    assert gates(v)["host-prerequisites"] == "missing"
    assert v["verdict"] == "INCONCLUSIVE"


def test_without_a_recorded_machine_a_fleet_name_host_still_qualifies(tmp_path: Path) -> None:
    """Seed 000's shape: host `wsl-rtx5090` (the fleet's name), probed as `hiro` (the OS's)."""
    es = qualified_entries()
    _unbound(es)
    entry(es, "host")["payload"]["hostname"] = "hiro"
    assert verdict_of(tmp_path, es)["verdict"] == "QUALIFIED"


def test_without_a_recorded_machine_probes_of_two_machines_are_inconclusive(tmp_path: Path) -> None:
    es = qualified_entries()
    _unbound(es)
    _probe(es, "other-box", "2026-09-10T10:31:00Z", hostname="gpu-box-2")
    v = verdict_of(tmp_path, es)
    assert gates(v)["host-prerequisites"] == "missing"
    assert v["verdict"] == "INCONCLUSIVE"
    host = next(g for g in v["gates"] if g["name"] == "host-prerequisites")
    assert "more than one machine" in host["reason"]


def test_a_superseded_probe_of_another_machine_leaves_the_host_judgeable(tmp_path: Path) -> None:
    es = qualified_entries()
    _unbound(es)
    _probe(es, "other-box", "2026-09-10T10:31:00Z", hostname="gpu-box-2")
    es.insert(
        es.index(entry(es, "campaign-done")),
        {
            "name": "withdraw",
            "kind": "supersession",
            "key": "operator",
            "at": "2026-09-10T10:32:00Z",
            "refs": {"supersedes": "other-box"},
            "payload": {"reason": "filed under the wrong host"},
        },
    )
    assert verdict_of(tmp_path, es)["verdict"] == "QUALIFIED"


@pytest.mark.parametrize("value", [_DROP, 1, None, ""])
def test_a_probe_without_a_machine_name_is_refused_at_ingest(tmp_path: Path, value: Any) -> None:
    es = qualified_entries()
    _probe(es, "nameless", "2026-09-10T10:31:00Z", hostname=value)
    with pytest.raises(SchemaError, match="hostname"):
        verdict_of(tmp_path, es)


@pytest.mark.parametrize("value", [7, None, ["gpu-box-1"]])
def test_a_job_recording_a_mistyped_machine_is_refused_at_ingest(tmp_path: Path, value: Any) -> None:
    es = qualified_entries()
    entry(es, "campaign-job")["payload"]["spec"]["bindings"]["hostname"] = value
    with pytest.raises(SchemaError, match="bindings"):
        verdict_of(tmp_path, es)
