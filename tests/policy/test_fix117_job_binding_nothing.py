"""fix117 (audit 87 f1): a later job whose running entry records no ``spec.bindings`` (or no ``spec``) was
left out of the manifest comparison, while ``entries.Job`` reads a missing ``bindings`` as ``{}`` — and a job
binding ``{}`` conflicts: the two spellings of "binds nothing" gave opposite verdicts, and the campaign stayed
QUALIFIED on job 1's results though job 2's launch ran another ``engine_config``. Every running job entry of
the campaign now binds what the validator reads (``acceptance._job_bindings``), and a trusted launch of the
campaign that records another ``engine_config`` than the manifest's (or none) is a conflict of the campaign
(``acceptance.launch_conflict``), not only its own lost credit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.policy.test_fail_closed import entry, rejected, verdict_of
from tests.policy.test_fix111_engine_config_bound import QUALIFIED, A, B, _configured, _second_job


def _second(es: list[dict[str, Any]], spec: Any, launch_config: str | None = B) -> None:
    """A second job (campaign-2) whose running entry records ``spec`` (``"drop"``: no spec at all), its
    launch binding ``launch_config``."""
    _second_job(es, A, launch_config)
    job = entry(es, "second-job")
    if spec == "drop":
        del job["payload"]["spec"]
    else:
        job["payload"]["spec"] = spec


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({"note": "rerun with --max-model-len 128"}, id="bindings-missing"),
        pytest.param("drop", id="spec-missing"),
        pytest.param({"bindings": {}}, id="bindings-empty"),
    ],
)
def test_later_job_without_spec_bindings_whose_launch_ran_another_config_is_not_qualified(
    tmp_path: Path, spec: Any
) -> None:
    """Regression (audit 87 f1): the job that binds nothing — however it is spelled — conflicts with the
    first job's spec, so neither job's results stand for the other's configuration."""
    es = _configured(A)
    _second(es, spec)
    v = verdict_of(tmp_path, es)
    pinned = v["manifest"]["bindings"]["engine_config"]
    assert pinned.startswith("conflict: ") and "campaign-2" in pinned, pinned
    assert rejected(v).get("launch") == "bindings-mismatch"
    assert v["verdict"].startswith("INCONCLUSIVE"), v["verdict"]


@pytest.mark.parametrize("spec", [{"note": "rerun"}, "drop", {"bindings": {}}])
def test_later_job_binding_nothing_conflicts_even_where_its_launch_binds_the_first_config(
    tmp_path: Path, spec: Any
) -> None:
    """The neighbour: its launch ran job 1's configuration, but its approved spec binds none of the first
    job's keys — a conflict like any other (as ``{}`` already was)."""
    es = _configured(A)
    _second(es, spec, launch_config=A)
    v = verdict_of(tmp_path, es)
    assert v["manifest"]["bindings"]["engine"].startswith("conflict: ")
    assert v["verdict"] != QUALIFIED


def test_later_job_binding_the_same_config_still_qualifies(tmp_path: Path) -> None:
    es = _configured(A)
    _second_job(es, A)
    v = verdict_of(tmp_path, es)
    assert "conflict" not in str(v["manifest"]["bindings"])
    assert v["verdict"] == QUALIFIED


def test_launch_with_another_config_under_an_otherwise_honest_job_is_a_campaign_conflict(
    tmp_path: Path,
) -> None:
    """Job 2's spec binds job 1's configuration, its launch another: another configuration evidently ran
    under the campaign, so job 1's results no longer qualify it (it used to lose only its own credit)."""
    es = _configured(A)
    _second_job(es, A, launch_config=B)
    v = verdict_of(tmp_path, es)
    pinned = v["manifest"]["bindings"]["engine_config"]
    assert pinned.startswith("conflict: ") and A in pinned and B in pinned, pinned
    got = rejected(v)
    for name in ("launch", "second-launch", "semantic", "benchmark"):
        assert got.get(name) == "bindings-mismatch", (name, got)
    assert v["verdict"].startswith("INCONCLUSIVE"), v["verdict"]


@pytest.mark.parametrize(
    "bindings",
    [
        pytest.param("drop-key", id="engine-config-dropped"),
        pytest.param("drop-all", id="bindings-dropped"),
        pytest.param({"engine_confg": A}, id="key-misspelled"),
    ],
)
def test_launch_recording_no_config_under_an_honest_job_is_a_campaign_conflict(
    tmp_path: Path, bindings: Any
) -> None:
    """What a launch that records no configuration ran cannot be told to be the pinned one."""
    es = _configured(A)
    _second_job(es, A)
    payload = entry(es, "second-launch")["payload"]
    if bindings == "drop-key":
        del payload["bindings"]["engine_config"]
    elif bindings == "drop-all":
        del payload["bindings"]
    else:
        del payload["bindings"]["engine_config"]
        payload["bindings"].update(bindings)
    v = verdict_of(tmp_path, es)
    pinned = v["manifest"]["bindings"]["engine_config"]
    assert pinned.startswith("conflict: ") and "records no configuration" in pinned, pinned
    assert v["verdict"] != QUALIFIED


def test_superseding_the_job_whose_launch_ran_another_config_ends_the_conflict(tmp_path: Path) -> None:
    """How an operator settles it: the job is superseded with its reason; its launch goes with its spec."""
    es = _configured(A)
    _second_job(es, A, launch_config=B)
    es.append(
        {
            "name": "withdraw-second",
            "kind": "supersession",
            "key": "operator",
            "at": "2026-09-10T10:59:00Z",
            "refs": {"supersedes": "second-job"},
            "payload": {"reason": "the --max-model-len 128 trial is not the one under qualification"},
        }
    )
    v = verdict_of(tmp_path, es)
    assert v["manifest"]["bindings"]["engine_config"] == A
    assert rejected(v).get("second-launch") == "bindings-mismatch"
    assert v["verdict"] == QUALIFIED


def test_terminal_entry_without_spec_approves_nothing(tmp_path: Path) -> None:
    """A terminal job entry carries no spec by design (told apart by its state): no conflict."""
    es = _configured(A)
    _second_job(es, A)
    for name in ("campaign-done", "second-done"):
        entry(es, name)["payload"].pop("spec", None)
    v = verdict_of(tmp_path, es)
    assert "conflict" not in str(v["manifest"]["bindings"])
    assert v["verdict"] == QUALIFIED


def test_single_job_binding_nothing_is_judged_by_the_pin_alone(tmp_path: Path) -> None:
    """The only job's running entry records no bindings: the manifest is the pin's (and the job is its
    source, read as binding nothing), and no engine_config is compared."""
    es = _configured(None)
    del entry(es, "campaign-job")["payload"]["spec"]["bindings"]
    v = verdict_of(tmp_path, es)
    assert "engine_config" not in v["manifest"]["bindings"]
    assert "conflict" not in str(v["manifest"]["bindings"])
