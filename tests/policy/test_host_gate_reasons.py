"""host-prerequisites names only what the host's probes show.

Before, a campaign whose only host probe listed no GPU failed host-prerequisites (right) with two reasons:
"no GPU visible on the host" and "the newest accepted host probe shows no GPU: a GPU earlier probes saw is
gone from the host" — no earlier probe existed, and none ever saw a GPU. The second check now applies only
where some accepted probe listed a GPU; the verdict is the same, only the reasons change.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from ledger.errors import SchemaError
from tests.policy.test_fail_closed import entry, gates, qualified_entries, rejected, verdict_of

NO_GPU = "no GPU visible on the host"
GONE = "the newest accepted host probe shows no GPU: a GPU earlier probes saw is gone from the host"
_GPU = {"name": "NVIDIA H100", "index": 0}


def _probe(es: list[dict[str, Any]], name: str, at: str, **payload: Any) -> dict[str, Any]:
    """Another host probe under the campaign's host, logged at ``at`` (before the job ends)."""
    p = copy.deepcopy(entry(es, "host"))
    p["name"], p["at"] = name, at
    p["payload"].update(payload)
    es.insert(es.index(entry(es, "campaign-done")), p)
    return p


def _host_gate(v: dict[str, Any]) -> dict[str, Any]:
    return next(g for g in v["gates"] if g["name"] == "host-prerequisites")


def test_a_campaign_whose_only_probe_lists_no_gpu_is_not_told_a_gpu_is_gone(tmp_path: Path) -> None:
    """Regression: the only host probe has ``gpus: []``; the reason also said a GPU earlier probes saw is
    gone."""
    es = qualified_entries()
    entry(es, "host")["payload"]["gpus"] = []
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "NOT QUALIFIED — PREREQUISITES"
    g = _host_gate(v)
    assert g["status"] == "failed"
    assert g["reason"] == NO_GPU
    assert "gone" not in g["reason"]


def test_several_probes_none_listing_a_gpu_give_the_one_reason(tmp_path: Path) -> None:
    es = qualified_entries()
    entry(es, "host")["payload"]["gpus"] = []
    _probe(es, "again", "2026-09-10T10:30:00Z", gpus=[])
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "NOT QUALIFIED — PREREQUISITES"
    assert _host_gate(v)["reason"] == NO_GPU


def test_a_gpu_an_earlier_probe_saw_and_the_newest_does_not_is_gone(tmp_path: Path) -> None:
    """The neighbour the second check is for: it still fails, and says the GPU is gone (not that none is
    visible: an earlier probe saw one)."""
    es = qualified_entries()
    assert entry(es, "host")["payload"]["gpus"]
    _probe(es, "after-reset", "2026-09-10T10:30:00Z", gpus=[])
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "NOT QUALIFIED — PREREQUISITES"
    g = _host_gate(v)
    assert g["status"] == "failed"
    assert GONE in g["reason"] and NO_GPU not in g["reason"]


def test_a_gpu_back_on_the_newest_probe_passes(tmp_path: Path) -> None:
    es = qualified_entries()
    _probe(es, "after-reset", "2026-09-10T10:30:00Z", gpus=[])
    # every GPU the first probe saw is back (one still missing is gone: test_audit35_gpus_gone.py)
    _probe(es, "back", "2026-09-10T10:31:00Z", gpus=copy.deepcopy(entry(es, "host")["payload"]["gpus"]))
    v = verdict_of(tmp_path, es)
    assert gates(v)["host-prerequisites"] == "passed"
    assert v["verdict"] == "QUALIFIED"


def test_a_probe_of_another_machine_listing_a_gpu_is_no_earlier_gpu_of_this_host(tmp_path: Path) -> None:
    """A rejected probe (another machine's) is no evidence that this host ever had a GPU: the reason stays the
    one check that failed."""
    es = qualified_entries()
    entry(es, "host")["payload"]["gpus"] = []
    _probe(es, "other-box", "2026-09-10T10:00:06Z", hostname="gpu-box-2", gpus=[_GPU])
    v = verdict_of(tmp_path, es)
    assert rejected(v)["other-box"] == "other-machine"
    assert v["verdict"] == "NOT QUALIFIED — PREREQUISITES"
    assert _host_gate(v)["reason"] == NO_GPU


def test_a_cpu_deployment_with_no_gpu_still_passes(tmp_path: Path) -> None:
    es = qualified_entries()
    entry(es, "host")["payload"]["gpus"] = []
    entry(es, "campaign-job")["payload"]["spec"]["bindings"]["device"] = "cpu"
    v = verdict_of(tmp_path, es)
    assert gates(v)["host-prerequisites"] == "passed"


@pytest.mark.parametrize("value", ["0", None, 0, {"index": 0}], ids=["string", "null", "number", "object"])
def test_a_probe_whose_gpu_list_is_mistyped_is_refused_at_ingest(tmp_path: Path, value: Any) -> None:
    """Never read as "no GPU" (nor as a GPU gone): the probe is refused, naming the field."""
    es = qualified_entries()
    entry(es, "host")["payload"]["gpus"] = value
    with pytest.raises(SchemaError, match="gpus"):
        verdict_of(tmp_path, es)


@pytest.mark.parametrize("name", ["GPUs", "gpu"])
def test_a_probe_whose_gpu_list_is_renamed_is_refused_at_ingest(tmp_path: Path, name: str) -> None:
    es = qualified_entries()
    payload = entry(es, "host")["payload"]
    payload[name] = payload.pop("gpus")
    with pytest.raises(SchemaError, match=f"gpus: Field required .*unknown field '{name}'"):
        verdict_of(tmp_path, es)


def test_a_probe_without_its_gpu_list_is_refused_at_ingest(tmp_path: Path) -> None:
    """Regression: a probe without ``gpus`` was read as one that found none (the schema's default), so the
    gate failed "no GPU visible" on a probe that said nothing about its GPUs. ``gpus`` is now required:
    ``[]`` says the host shows none, an absent list is refused, naming the field."""
    es = qualified_entries()
    del entry(es, "host")["payload"]["gpus"]
    with pytest.raises(SchemaError, match="gpus: Field required"):
        verdict_of(tmp_path, es)


def test_a_stored_probe_without_its_gpu_list_leaves_the_gate_inconclusive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A probe stored by an older ingest that defaulted ``gpus`` is rejected ``schema-invalid`` when read,
    naming the field: the gate has no accepted probe (missing: the verdict is INCONCLUSIVE), never "no
    GPU"."""
    import ledger.entries as entries_mod
    import ledger.service as service_mod

    real = entries_mod.parse_statement

    def lenient(value: Any) -> Any:
        if isinstance(value, dict) and value.get("kind") == "host.probe" and "gpus" not in value["payload"]:
            return entries_mod.Statement.model_validate(value)
        return real(value)

    monkeypatch.setattr(service_mod, "parse_statement", lenient)
    es = qualified_entries()
    del entry(es, "host")["payload"]["gpus"]
    v = verdict_of(tmp_path, es)
    assert rejected(v)["host"] == "schema-invalid"
    assert "gpus" in next(r["detail"] for r in v["rejected"] if r["rule"] == "schema-invalid")
    assert v["verdict"] == "INCONCLUSIVE"
    assert _host_gate(v)["status"] == "missing"
