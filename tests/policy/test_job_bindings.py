"""Audit 22, F1: a campaign edited between two runs (another model file, other engine flags, the harness
gates turned off) mixed two models into QUALIFIED. The first run's launch was rejected for binding another
model than the pinned one, yet its semantic and benchmark results — whose own bindings name only the served
ids — were credited to the second run's engine. What a harness measured in a job whose engine launch binds
otherwise than the pinned manifest measured that engine, not the approved one."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from tests.policy.test_fail_closed import entry, gates, qualified_entries, verdict_of

NEW_REV = "2" * 40
NEW_SHA = "c" * 64
RUN2 = ["campaign-job", "pin", "launch", "health", "models", "completion", "structured", "sequential"]


def _two_runs(*, harness_in_run2: bool = False) -> list[dict[str, Any]]:
    """Run 1 as the shared fixture records it (model revision 1…1, harness results reviewed and accepted);
    then run 2, a job of its own on the model pinned anew (revision 2…2), with or without harness results."""
    es = qualified_entries()
    del entry(es, "campaign-job")["payload"]["spec"]["bindings"]["model_revision"]  # the pin pins it
    later: list[dict[str, Any]] = []
    names = RUN2 + (["semantic", "semantic-review", "benchmark", "benchmark-review", "benchmark-acceptance"]
                    if harness_in_run2 else []) + ["campaign-done"]  # fmt: skip
    for name in names:
        e = copy.deepcopy(entry(es, name))
        e["name"] = f"{name}-2"
        e["at"] = e["at"].replace("2026-09-10T10:", "2026-09-10T11:")
        e["refs"] = {rel: f"{target}-2" for rel, target in e.get("refs", {}).items()}
        p = e["payload"]
        if e["kind"] == "job":
            p["job_id"] = "campaign-2"
            if "ended_at" in p:
                p["ended_at"] = e["at"]
            if "started_at" in p:
                p["started_at"] = e["at"]
        if name == "pin":
            p["revision"] = NEW_REV
            p["files"][0]["sha256"] = NEW_SHA
        if name == "launch":
            p["bindings"]["model_revision"] = NEW_REV
            p["bindings"]["shard:model.safetensors"] = NEW_SHA
            p["started_at"] = e["at"]
            p.pop("ended_at", None)
        later.append(e)
    return es + later


def test_harness_results_of_a_run_whose_launch_binds_another_model_are_not_credited(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, _two_runs())
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert gates(v)["semantic"] == "missing" and gates(v)["benchmark"] != "passed"
    details = [r["detail"] for r in v["rejected"] if r["rule"] == "bindings-mismatch"]
    ran = "ran during attempt 1 (engine launch"
    assert any(ran in d and "model_revision" in d for d in details), details


def test_harness_results_of_the_run_on_the_pinned_model_are_credited(tmp_path: Path) -> None:
    """Neighbour: run 2 measured its own engine: QUALIFIED on run 2's evidence."""
    v = verdict_of(tmp_path, _two_runs(harness_in_run2=True))
    assert v["verdict"] == "QUALIFIED", v["gates"]


def test_one_run_on_the_pinned_model_is_qualified(tmp_path: Path) -> None:
    """Neighbour: the shared fixture as it is."""
    assert verdict_of(tmp_path, qualified_entries())["verdict"] == "QUALIFIED"
