"""fix111 (audit 86 f3): a second job of a campaign, run from an edited campaign file that launches the engine
with another configuration (``--n_ctx 1024 --n_threads 1`` for ``--n_ctx 512``) and leaves semantic and
benchmark disabled, left the campaign QUALIFIED on the first job's semantic and benchmark results — runs of
a configuration the newest job no longer launches. What the engine ran with is part of the approved spec:
the job's ``spec.bindings.engine_config`` (collectors/campaign.py ``engine_config_digest``) is compared
with every launch's like the engine version, and two jobs of a campaign that bind it differently conflict
(neither configuration is the manifest), so neither configuration's results are credited."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.policy.test_fail_closed import entry, qualified_entries, rejected, verdict_of

QUALIFIED = "QUALIFIED"
A = "blake3:" + "a" * 64  # the first job's configuration (--n_ctx 512)
B = "blake3:" + "b" * 64  # the edited campaign's (--n_ctx 1024 --n_threads 1)


def _configured(config: str | None = A) -> list[dict[str, Any]]:
    """The qualified campaign, its job and launch binding ``config`` as the runner writes it."""
    es = qualified_entries()
    if config is not None:
        entry(es, "campaign-job")["payload"]["spec"]["bindings"]["engine_config"] = config
        entry(es, "launch")["payload"]["bindings"]["engine_config"] = config
    return es


def _second_job(es: list[dict[str, Any]], config: str | None, launch_config: str | None = "same") -> None:
    """A second job of the campaign after the first ended (campaign-2): its spec binding ``config``
    (None: none), one ready launch binding ``launch_config`` ("same": ``config``), no harness run (the
    edited campaign disabled semantic and benchmark), then its end."""
    job = copy.deepcopy(entry(es, "campaign-job"))
    job.update(name="second-job", at="2026-09-10T10:55:00Z")
    job["payload"].update(job_id="campaign-2", started_at="2026-09-10T10:55:00Z")
    bindings = job["payload"]["spec"]["bindings"]
    bindings.pop("engine_config", None)
    if config is not None:
        bindings["engine_config"] = config
    run = copy.deepcopy(entry(es, "launch"))
    run.update(name="second-launch", at="2026-09-10T10:57:00Z", refs={"job": "second-job"})
    run["payload"].update(started_at="2026-09-10T10:55:10Z", ended_at="2026-09-10T10:56:50Z")
    run["payload"]["bindings"].pop("engine_config", None)
    bound = config if launch_config == "same" else launch_config
    if bound is not None:
        run["payload"]["bindings"]["engine_config"] = bound
    done = copy.deepcopy(entry(es, "campaign-done"))
    done.update(name="second-done", at="2026-09-10T10:58:00Z")
    done["payload"].update(job_id="campaign-2", ended_at="2026-09-10T10:58:00Z")
    es += [job, run, done]


def test_baseline_one_job_binding_its_engine_config_qualifies(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, _configured())
    assert v["manifest"]["bindings"]["engine_config"] == A
    assert v["verdict"] == QUALIFIED


def test_a_second_job_with_another_engine_config_does_not_keep_the_first_jobs_results_qualified(
    tmp_path: Path,
) -> None:
    """The reproducer's shape: the newest job launched another configuration, which no semantic or benchmark
    run measured: the first configuration's results do not stand for it."""
    es = _configured(A)
    _second_job(es, B)
    v = verdict_of(tmp_path, es)
    pinned = v["manifest"]["bindings"]["engine_config"]
    assert pinned.startswith("conflict: ") and A in pinned and B in pinned and "campaign-2" in pinned
    got = rejected(v)
    for name in ("launch", "second-launch", "semantic", "benchmark"):
        assert got.get(name) == "bindings-mismatch", (name, got)
    assert v["verdict"] != QUALIFIED
    assert v["verdict"].startswith("INCONCLUSIVE")


def test_a_second_job_with_the_same_engine_config_still_qualifies(tmp_path: Path) -> None:
    es = _configured(A)
    _second_job(es, A)
    v = verdict_of(tmp_path, es)
    assert "conflict" not in str(v["manifest"]["bindings"])
    assert v["verdict"] == QUALIFIED


def test_a_second_job_that_binds_no_engine_config_is_a_conflict(tmp_path: Path) -> None:
    """A later job (recorded by hand, or by an older collector) that binds none: what it launched cannot be
    told to be the first job's configuration."""
    es = _configured(A)
    _second_job(es, None)
    v = verdict_of(tmp_path, es)
    assert v["manifest"]["bindings"]["engine_config"].endswith("to nothing")
    assert v["verdict"] != QUALIFIED


def test_a_first_job_that_binds_no_engine_config_and_a_later_one_that_does_conflict(tmp_path: Path) -> None:
    es = _configured(None)
    _second_job(es, B)
    v = verdict_of(tmp_path, es)
    assert v["manifest"]["bindings"]["engine_config"].startswith("conflict: ")
    assert v["verdict"] != QUALIFIED


def test_jobs_recorded_by_hand_with_no_engine_config_are_judged_as_before(tmp_path: Path) -> None:
    """No job of the campaign binds one: the manifest pins none, and an unpinned key is not compared — as
    for an engine version no collector detected ([acceptance.bindings] has no require_manifest)."""
    v = verdict_of(tmp_path, _configured(None))
    assert "engine_config" not in v["manifest"]["bindings"]
    assert v["verdict"] == QUALIFIED


@pytest.mark.parametrize(
    "launch_config",
    [
        pytest.param(None, id="dropped"),
        pytest.param(B, id="another"),
        pytest.param("blake3:" + "A" * 64, id="case-changed"),
        pytest.param("", id="empty"),
    ],
)
def test_a_launch_whose_engine_config_is_not_the_jobs_is_not_credited(
    tmp_path: Path, launch_config: str | None
) -> None:
    es = _configured(A)
    bindings = entry(es, "launch")["payload"]["bindings"]
    del bindings["engine_config"]
    if launch_config is not None:
        bindings["engine_config"] = launch_config
    v = verdict_of(tmp_path, es)
    assert rejected(v).get("launch") == "bindings-mismatch"
    assert rejected(v).get("semantic") == "bindings-mismatch"
    assert v["verdict"] != QUALIFIED


def test_a_launch_binding_the_engine_config_under_a_misspelled_key_is_not_credited(tmp_path: Path) -> None:
    es = _configured(A)
    bindings = entry(es, "launch")["payload"]["bindings"]
    bindings["engine_confg"] = bindings.pop("engine_config")
    v = verdict_of(tmp_path, es)
    assert rejected(v).get("launch") == "bindings-mismatch"
    assert v["verdict"] != QUALIFIED


@pytest.mark.parametrize("spelling", ["engine_confg", "engineConfig", "engine-config", "engine_configs"])
def test_a_job_spec_binding_the_engine_config_under_a_misspelled_key_binds_nothing(
    tmp_path: Path, spelling: str
) -> None:
    es = _configured(A)
    spec = entry(es, "campaign-job")["payload"]["spec"]["bindings"]
    spec[spelling] = spec.pop("engine_config")
    v = verdict_of(tmp_path, es)
    assert v["manifest"]["bindings"]["engine_config"].startswith("misspelled: ")
    assert rejected(v).get("launch") == "bindings-mismatch"
    assert v["verdict"] != QUALIFIED


def test_superseding_the_other_configurations_job_ends_the_conflict(tmp_path: Path) -> None:
    """How an operator settles it: the job whose configuration is not the one under qualification is
    superseded, with its reason, and the manifest is the remaining job's."""
    es = _configured(A)
    _second_job(es, B)
    es.append(
        {
            "name": "withdraw-second",
            "kind": "supersession",
            "key": "operator",
            "at": "2026-09-10T10:59:00Z",
            "refs": {"supersedes": "second-job"},
            "payload": {"reason": "the --n_ctx 1024 trial is not the configuration under qualification"},
        }
    )
    v = verdict_of(tmp_path, es)
    assert v["manifest"]["bindings"]["engine_config"] == A
    assert rejected(v).get("second-launch") == "bindings-mismatch"
    assert rejected(v).get("launch") is None
