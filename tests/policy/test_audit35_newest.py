"""Audit 35 (f1, f2, f4): "the newest" entry a gate judges is the newest both ways.

The routing gate already judged "the latest" probe as the one the log took last AND the one observed last
(docs/POLICY.md: "a pass spooled and uploaded late is not newer than a failure seen after it"); the verdict
judged it by log order alone, so an older passing entry pushed late hid a newer failure:

* f1: a model pin observed 10:00:12 that FAILED verification, hidden by the passing pin observed 10:00:10
  and logged after it (model-pinned passed, QUALIFIED);
* f2: the engine given CUDA_VISIBLE_DEVICES=2; the probe observed last lists GPUs 0,1, an older probe
  listing 0,1,2 pushed late (host-prerequisites passed, QUALIFIED);
* f4: a reviewed semantic pass observed 10:10 pushed late after an unreviewed pass observed 10:15 became
  "the newest run" (newer-run rejected the 10:15 one; QUALIFIED instead of INCONCLUSIVE).

Now one rule (``ledger.policy.snapshot.newest_entries``): the entry the log took last and every entry
observed last (``observed_time``: collected_at, never after the log took it; ties all kept) must each hold.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.policy.test_fail_closed import entry, gates, qualified_entries, rejected, verdict_of

PREREQ = "NOT QUALIFIED — PREREQUISITES"
QUALIFIED = "QUALIFIED"
INCONCLUSIVE = "INCONCLUSIVE"


def _gate(v: dict[str, Any], name: str) -> dict[str, Any]:
    return next(g for g in v["gates"] if g["name"] == name)


def _id(v: dict[str, Any], name: str) -> str:
    return next(i for i, n in v["_names"].items() if n == name)


def _copy(es: list[dict[str, Any]], name: str, new: str, at: str, **payload: Any) -> dict[str, Any]:
    e = copy.deepcopy(entry(es, name))
    e["name"], e["at"] = new, at
    e["payload"].update(payload)
    es.append(e)
    return e


# --- f1: model-pinned -----------------------------------------------------------------------------------

_FAILED_PIN = {"verification": "failed", "failures": ["model.safetensors: sha256 differs"]}


def _pins(late: str | None, failed_at: str = "2026-09-10T10:00:12Z") -> list[dict[str, Any]]:
    """The passing pin observed 10:00:10 and a failed re-check observed ``failed_at``; ``late`` names the one
    pushed late (logged 10:00:30, after the other)."""
    es = qualified_entries()
    bad = _copy(es, "pin", "pin-failed", failed_at, **copy.deepcopy(_FAILED_PIN))
    bad["payload"]["files"][0]["verified"] = False
    if late is not None:
        entry(es, late)["logged_at"] = "2026-09-10T10:00:30Z"
    return es


def test_f1_a_failed_pin_observed_after_a_passing_pin_pushed_late_fails_model_pinned(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, _pins(late="pin"))
    assert v["verdict"] == PREREQ, v["gates"]
    g = _gate(v, "model-pinned")
    assert g["status"] == "failed"
    assert "the newest model pin does not verify its files" in g["reason"]
    # the reason names the pin, why it is the newest, and its failures
    assert f"pin {_id(v, 'pin-failed')[:12]} failed verification" in g["reason"]
    assert "observed last" in g["reason"] and "sha256 differs" in g["reason"]


def test_f1_neighbour_the_same_pins_logged_in_observation_order_fail_alike(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, _pins(late=None))
    assert v["verdict"] == PREREQ
    assert "logged last and observed last" in _gate(v, "model-pinned")["reason"]


def test_f1_neighbour_a_failed_pin_observed_first_but_logged_last_fails_too(tmp_path: Path) -> None:
    """Swapped: the failed pin was observed before the passing one (10:00:08) but the log took it last —
    the newest by log order must hold as well."""
    v = verdict_of(tmp_path, _pins(late="pin-failed", failed_at="2026-09-10T10:00:08Z"))
    assert v["verdict"] == PREREQ
    assert "logged last" in _gate(v, "model-pinned")["reason"]


def test_f1_neighbour_a_pass_observed_and_logged_after_the_failure_restores(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, _pins(late=None, failed_at="2026-09-10T10:00:08Z"))
    assert v["verdict"] == QUALIFIED, v["gates"]


def test_f1_neighbour_a_tie_in_observed_time_fails_closed(tmp_path: Path) -> None:
    """Both pins observed 10:00:10; the passing one logged last. Which was seen last cannot be told: every
    pin tied for the last observation must hold."""
    v = verdict_of(tmp_path, _pins(late="pin", failed_at="2026-09-10T10:00:10Z"))
    assert v["verdict"] == PREREQ
    assert "observed last (tied)" in _gate(v, "model-pinned")["reason"]


def test_f1_neighbour_a_claimed_later_time_is_bounded_by_the_log(tmp_path: Path) -> None:
    """The failed pin claims collected_at 10:05 (a clock ahead) but the log took it at 10:00:12; the pass was
    observed at 10:00:20 and logged last: the pass is the newest both ways."""
    es = _pins(late=None)
    bad = entry(es, "pin-failed")
    bad["at"], bad["logged_at"] = "2026-09-10T10:05:00Z", "2026-09-10T10:00:12Z"
    entry(es, "pin")["at"] = "2026-09-10T10:00:20Z"
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == QUALIFIED, v["gates"]


def test_f1_neighbour_a_failed_pin_of_another_host_does_not_count(tmp_path: Path) -> None:
    es = _pins(late="pin")
    entry(es, "pin-failed")["subject"] = {**entry(es, "pin").get("subject", {}), "host": "other-box"}
    v = verdict_of(tmp_path, es)
    assert rejected(v).get("pin-failed") in (None, "other-host")  # another host's fact: not counted
    assert gates(v)["model-pinned"] == "passed"
    # but an entry of the campaign names another host than the one asked: the claim does not hold, so the
    # verdict for this host is not QUALIFIED (fix 71: the campaign is the unit, the other fields claims)
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    [claim] = [c for c in v["claims"] if c["field"] == "host"]
    assert claim["status"] == "contradicted", claim


# --- f2: the GPUs the engine was given, on the newest probe ------------------------------------------------

_THREE = [
    {"index": 0, "name": "NVIDIA H100"},
    {"index": 1, "name": "NVIDIA H100"},
    {"index": 2, "name": "NVIDIA H100"},
]


def _probes(
    older: list[dict[str, Any]],
    newer: list[dict[str, Any]],
    late: str | None,
    newer_at: str = "2026-09-10T10:00:07Z",
) -> list[dict[str, Any]]:
    """The engine is given GPU 2 (PCI order); the probe ``host`` observed 10:00:05 lists ``older``, the probe
    ``host-newer`` observed ``newer_at`` lists ``newer``; ``late`` names the one logged late (10:00:30)."""
    es = qualified_entries()
    entry(es, "launch")["payload"]["env"] = {"CUDA_VISIBLE_DEVICES": "2", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    entry(es, "host")["payload"]["gpus"] = copy.deepcopy(older)
    _copy(es, "host", "host-newer", newer_at, gpus=copy.deepcopy(newer))
    if late is not None:
        entry(es, late)["logged_at"] = "2026-09-10T10:00:30Z"
    return es


def test_f2_a_probe_pushed_late_does_not_bring_back_the_engines_gpu(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, _probes(_THREE, _THREE[:2], late="host"))
    assert v["verdict"] == PREREQ, v["gates"]
    reason = _gate(v, "host-prerequisites")["reason"]
    assert "a GPU the engine was given is not on the newest accepted host probe" in reason
    newer = _id(v, "host-newer")[:12]
    assert f"host probe {newer} (observed last: " in reason and "CUDA_VISIBLE_DEVICES=2" in reason
    assert f"host probe {_id(v, 'host')[:12]} (logged last" not in reason  # the late probe lists GPU 2


def test_f2_neighbour_the_same_probes_in_observation_order_fail_alike(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, _probes(_THREE, _THREE[:2], late=None))
    assert v["verdict"] == PREREQ
    assert "CUDA_VISIBLE_DEVICES=2" in _gate(v, "host-prerequisites")["reason"]


def test_f2_neighbour_the_probe_logged_last_lacking_the_gpu_fails_too(tmp_path: Path) -> None:
    """Swapped: the probe observed last lists GPU 2, the one the log took last does not."""
    v = verdict_of(tmp_path, _probes(_THREE, _THREE[:2], late="host-newer", newer_at="2026-09-10T10:00:04Z"))
    assert v["verdict"] == PREREQ
    assert "logged last" in _gate(v, "host-prerequisites")["reason"]


def test_f2_neighbour_both_newest_probes_list_the_gpu(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, _probes(_THREE[:2], _THREE, late=None))
    assert v["verdict"] == QUALIFIED, v["gates"]


def test_f2_neighbour_a_tie_in_observed_time_fails_closed(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, _probes(_THREE, _THREE[:2], late="host", newer_at="2026-09-10T10:00:05Z"))
    assert v["verdict"] == PREREQ
    assert "observed last (tied)" in _gate(v, "host-prerequisites")["reason"]


def test_f2_neighbour_a_probe_of_another_machine_observed_last_does_not_count(tmp_path: Path) -> None:
    es = _probes(_THREE, _THREE[:2], late="host")
    entry(es, "host-newer")["payload"]["hostname"] = "other-box"
    v = verdict_of(tmp_path, es)
    assert rejected(v)["host-newer"] == "other-machine"
    assert v["verdict"] == QUALIFIED, v["gates"]


def test_f2_neighbour_the_probe_observed_last_listing_no_gpu_fails(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, _probes(_THREE, [], late="host"))
    assert v["verdict"] == PREREQ
    reason = _gate(v, "host-prerequisites")["reason"]
    assert "the newest accepted host probe shows no GPU" in reason
    assert f"host probe {_id(v, 'host-newer')[:12]} (observed last: " in reason


def test_f2_neighbour_a_cpu_deployment_is_unaffected(tmp_path: Path) -> None:
    es = _probes(_THREE, [], late="host")
    entry(es, "campaign-job")["payload"]["spec"]["bindings"]["device"] = "cpu"
    v = verdict_of(tmp_path, es)
    assert gates(v)["host-prerequisites"] == "passed"


# --- f4: newer-run ------------------------------------------------------------------------------------------


def _review(es: list[dict[str, Any]], of: str, at: str) -> None:
    r = copy.deepcopy(entry(es, "semantic-review"))
    r["name"], r["at"], r["refs"] = f"{of}-review", at, {"reviews": of}
    es.append(r)


def _runs(late: bool, newer_at: str = "2026-09-10T10:15:00Z", reviewed: bool = False) -> list[dict[str, Any]]:
    """The reviewed semantic pass observed 10:10 and another pass of the same spec observed ``newer_at``
    (reviewed only with ``reviewed``); ``late``: the 10:10 run is logged at 10:16, after the other."""
    es = qualified_entries()
    # another run (its evidence list differs: at the same observed time it is still another entry)
    _copy(es, "semantic", "semantic-newer", newer_at, evidence=["another-run"])
    if reviewed:
        _review(es, "semantic-newer", "2026-09-10T10:21:00Z")
    if late:
        entry(es, "semantic")["logged_at"] = "2026-09-10T10:16:00Z"
    return es


def test_f4_an_older_pass_pushed_late_is_not_the_newest_run(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, _runs(late=True))
    assert v["verdict"] == INCONCLUSIVE, v["gates"]
    assert rejected(v) == {"semantic": "newer-run", "semantic-newer": "review-missing"}
    detail = next(r["detail"] for r in v["rejected"] if r["entry"] == _id(v, "semantic"))
    assert f"run {_id(v, 'semantic-newer')[:12]} (observed last" in detail and "review-missing" in detail


def test_f4_neighbour_the_same_runs_in_observation_order(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, _runs(late=False))
    assert v["verdict"] == INCONCLUSIVE
    assert rejected(v) == {"semantic": "newer-run", "semantic-newer": "review-missing"}


def test_f4_neighbour_both_newest_runs_reviewed_pass(tmp_path: Path) -> None:
    """The run logged last and the run observed last both hold: the pass stands."""
    v = verdict_of(tmp_path, _runs(late=True, reviewed=True))
    assert v["verdict"] == QUALIFIED, (v["gates"], v["rejected"])


@pytest.mark.parametrize("late", [True, False], ids=["reviewed-logged-last", "unreviewed-logged-last"])
def test_f4_neighbour_a_tie_in_observed_time_fails_closed(tmp_path: Path, late: bool) -> None:
    """Both runs observed 10:10: the unreviewed one must hold too, whichever the log took last."""
    v = verdict_of(tmp_path, _runs(late=late, newer_at="2026-09-10T10:10:00Z"))
    assert v["verdict"] == INCONCLUSIVE, v["gates"]
    assert rejected(v)["semantic-newer"] == "review-missing"
    assert rejected(v)["semantic"] == "newer-run"


def test_f4_neighbour_a_tie_of_reviewed_runs_passes(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, _runs(late=True, newer_at="2026-09-10T10:10:00Z", reviewed=True))
    assert v["verdict"] == QUALIFIED, (v["gates"], v["rejected"])


def test_f4_neighbour_a_failed_run_pushed_late_is_never_hidden(tmp_path: Path) -> None:
    """A failed run observed 10:05 and logged after the reviewed 10:10 pass still fails the gate."""
    es = qualified_entries()
    failed = _copy(es, "semantic", "semantic-failed", "2026-09-10T10:05:00Z", status="failed")
    failed["logged_at"] = "2026-09-10T10:16:00Z"
    failed["payload"]["counts"] = {"items": 12, "asked": 12, "passed": 8, "failed": 4}
    failed["payload"]["figures"] = {"score": 0.666667}
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "NOT QUALIFIED — SEMANTIC QUALITY", v["gates"]
