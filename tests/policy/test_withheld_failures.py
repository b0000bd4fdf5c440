"""A rule that withholds credit never drops a failure (docs/POLICY.md, "Evidence filtering").

Stale, before a GPU reset, a review FAIL, a rejecting acceptance, a missing artifact, bindings left out or
differing, another subject named, a spec that is not the approved one: each takes credit away. Before, each
also deleted what the entry showed against the engine — a crash, a failed probe, a failed harness run, an
engine fault in a diagnostic run — so a campaign could be QUALIFIED, or only INCONCLUSIVE, beside a failure
the log holds. Now such an entry is reported with its rule and ``counts_against``, and every gate is judged
again with it: it can fail a gate, never pass one. Only a supersession, with its reason, withdraws it.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from ledger.errors import SchemaError
from tests.policy.test_fail_closed import (
    _another_launch,
    counted_against,
    entry,
    gates,
    qualified_entries,
    rejected,
    verdict_of,
)

QUALIFIED = "QUALIFIED"
RUNTIME = "NOT QUALIFIED — RUNTIME RELIABILITY"
CRASH = {
    "failure_signature": "engine-dead",
    "signal": 6,
    "exit_code": None,
    "ended_at": "2026-09-10T10:03:40Z",
}


def _crash(es: list[dict[str, Any]], **change: Any) -> dict[str, Any]:
    """A second attempt, ready, that then died (engine-dead, SIGABRT), in the campaign's job."""
    run = _another_launch(es, "crash", "2026-09-10T10:03:00Z", **CRASH)
    run.update(change)
    return run


def _acting(name: str, kind: str, key: str, at: str, refs: dict[str, str], **payload: Any) -> dict[str, Any]:
    return {"name": name, "kind": kind, "key": key, "at": at, "refs": refs, "payload": payload}


def _before_done(es: list[dict[str, Any]], *items: dict[str, Any]) -> None:
    i = es.index(entry(es, "campaign-done"))
    es[i:i] = list(items)


def test_the_baseline_qualifies_and_a_plain_crash_fails_runtime_stability(tmp_path: Path) -> None:
    es = qualified_entries()
    assert verdict_of(tmp_path, es)["verdict"] == QUALIFIED
    _crash(es)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == RUNTIME
    assert "crash" not in rejected(v)


def test_a_stale_crash_still_fails_runtime_stability(tmp_path: Path) -> None:
    """Regression: a crash collected more than 30 days before the reference time was rejected `stale`
    whole, and the campaign was QUALIFIED beside it."""
    es = qualified_entries()
    run = _crash(es, at="2026-08-01T10:00:00Z", logged_at="2026-09-10T10:00:30Z")
    run["payload"].update(started_at="2026-08-01T09:59:00Z", ended_at="2026-08-01T09:59:50Z")
    es.remove(run)  # an earlier attempt: logged before the campaign's ready launch
    es.insert(es.index(entry(es, "launch")), run)
    v = verdict_of(tmp_path, es)
    assert counted_against(v) == {"crash": "stale"}
    assert gates(v)["runtime-stability"] == "failed"
    assert v["verdict"] == RUNTIME


def test_a_crash_without_bindings_still_fails_runtime_stability(tmp_path: Path) -> None:
    """Regression: a crashed launch that recorded no bindings was rejected `bindings-mismatch` whole."""
    es = qualified_entries()
    run = _crash(es)
    del run["payload"]["bindings"]
    v = verdict_of(tmp_path, es)
    assert counted_against(v) == {"crash": "bindings-mismatch"}
    assert v["verdict"] == RUNTIME


def test_a_crash_with_another_model_revision_still_fails_runtime_stability(tmp_path: Path) -> None:
    es = qualified_entries()
    run = _crash(es)
    run["payload"]["bindings"]["model_revision"] = "2" * 40
    v = verdict_of(tmp_path, es)
    assert counted_against(v) == {"crash": "bindings-mismatch"}
    assert v["verdict"] == RUNTIME


@pytest.mark.parametrize(
    "campaign",
    # (a value with white space around it is refused at ingest since fix 71: test_fix71_subject_whitespace)
    ["Neighbour-campaign-7", "neighbour-campaign-8"],
    ids=["case", "other"],
)
def test_a_crash_in_the_campaigns_job_naming_another_campaign_still_counts_against_it(
    tmp_path: Path, campaign: str
) -> None:
    """Regression: a crashed launch in the campaign's own job whose subject misspelled the campaign was
    rejected `other-subject` whole: the crash vanished from the campaign it ran in."""
    es = qualified_entries()
    _crash(es, subject={"campaign": campaign})
    v = verdict_of(tmp_path, es)
    assert counted_against(v) == {"crash": "other-subject"}
    assert v["verdict"] == RUNTIME


def test_a_crash_whose_logs_are_missing_from_the_store_still_fails_runtime_stability(tmp_path: Path) -> None:
    """Regression: a crashed launch whose stored stderr had gone from the store was rejected
    `artifact-missing` whole; what it records (engine-dead, SIGABRT) is still a crash."""
    es = qualified_entries()
    _crash(es, artifacts=[{"name": "stderr", "text": "EngineDeadError\n", "damage": "missing"}])
    v = verdict_of(tmp_path, es)
    assert counted_against(v) == {"crash": "artifact-missing"}
    assert v["verdict"] == RUNTIME


def test_a_rejecting_acceptance_of_a_crash_does_not_withdraw_it(tmp_path: Path) -> None:
    """Regression: an acceptance `rejected` of a crash deleted it: one operator's decision, without a
    supersession's reason in the log's own terms, made a failure disappear."""
    es = qualified_entries()
    _crash(es)
    _reject(es, "crash")
    v = verdict_of(tmp_path, es)
    assert counted_against(v) == {"crash": "rejected-by-acceptance"}
    assert v["verdict"] == RUNTIME


def test_a_superseded_crash_is_withdrawn_with_its_reason(tmp_path: Path) -> None:
    """The one way to withdraw a failure: a supersession, with its reason."""
    es = qualified_entries()
    _crash(es)
    _before_done(
        es,
        _acting(
            "withdraw", "supersession", "operator", "2026-09-10T10:46:00Z", {"supersedes": "crash"},
            reason="the host's PSU failed under the run; replaced, re-run as attempt 3",
        ),
    )  # fmt: skip
    v = verdict_of(tmp_path, es)
    assert rejected(v) == {"crash": "superseded"}
    assert counted_against(v) == {}
    assert v["verdict"] == QUALIFIED


def test_a_review_fail_of_a_failed_semantic_result_still_fails_the_semantic_gate(tmp_path: Path) -> None:
    """Regression: a failed semantic run whose review FAILed was rejected `review-fail` whole: the gate
    had nothing left to judge and the verdict was INCONCLUSIVE, not a semantic failure."""
    es = qualified_entries()
    semantic = entry(es, "semantic")["payload"]
    semantic.update(status="failed", figures={"score": 0.5})
    semantic["counts"].update(passed=6, failed=6)
    entry(es, "semantic-review")["payload"]["result"] = "FAIL"
    v = verdict_of(tmp_path, es)
    assert counted_against(v) == {"semantic": "review-fail"}
    assert gates(v)["semantic"] == "failed"
    assert v["verdict"] == "NOT QUALIFIED — SEMANTIC QUALITY"


def test_a_review_fail_of_a_passed_semantic_result_withholds_its_credit_only(tmp_path: Path) -> None:
    """The neighbour: a review FAIL of a *passed* run takes its credit away — the gate is INCONCLUSIVE,
    never passed, and the run is not counted as a failure of the engine."""
    es = qualified_entries()
    entry(es, "semantic-review")["payload"]["result"] = "FAIL"
    v = verdict_of(tmp_path, es)
    assert rejected(v) == {"semantic": "review-fail"}
    assert counted_against(v) == {}
    assert gates(v)["semantic"] == "missing"
    assert v["verdict"] == "INCONCLUSIVE"


def _reject(es: list[dict[str, Any]], name: str) -> None:
    _before_done(
        es,
        _acting(
            f"reject-{name}", "acceptance", "operator", "2026-09-10T10:46:00Z", {"subject": name},
            decision="rejected", reason="not representative",
        ),
    )  # fmt: skip


def test_a_rejecting_acceptance_of_a_failed_control_probe_still_fails_its_gate(tmp_path: Path) -> None:
    """Regression: a failed READY control rejected by an acceptance was dropped whole; the pass beside it
    then qualified the campaign (a later pass does not lift a failure)."""
    es = qualified_entries()
    failed = copy.deepcopy(entry(es, "completion"))
    failed.update(name="first-control", at="2026-09-10T10:01:09Z")
    failed["payload"].update(ok=False, text="NOT READY")
    es.insert(es.index(entry(es, "completion")), failed)
    _reject(es, "first-control")
    v = verdict_of(tmp_path, es)
    assert counted_against(v) == {"first-control": "rejected-by-acceptance"}
    assert gates(v)["ready-control"] == "failed"
    assert v["verdict"] == "NOT QUALIFIED — CONTROL"


def test_a_rejecting_acceptance_of_a_passing_control_probe_credits_nothing(tmp_path: Path) -> None:
    """The neighbour: a withheld *passing* entry is not kept — it never passes a gate."""
    es = qualified_entries()
    _reject(es, "completion")
    v = verdict_of(tmp_path, es)
    assert rejected(v)["completion"] == "rejected-by-acceptance"
    assert counted_against(v) == {}
    assert gates(v)["ready-control"] == "missing"
    assert v["verdict"] == "INCONCLUSIVE"


def test_a_withheld_ready_launch_that_crashed_is_never_credited_for_readiness(tmp_path: Path) -> None:
    """A kept entry can fail a gate, never pass one: the campaign's only launch, ready and then crashed,
    made stale, leaves api-readiness without credited evidence (INCONCLUSIVE), not passed."""
    es = qualified_entries()
    launch = entry(es, "launch")
    launch.update(at="2026-08-01T10:00:00Z", logged_at="2026-09-10T10:01:00Z")
    launch["payload"].update(CRASH, started_at="2026-08-01T09:59:00Z", ended_at="2026-08-01T10:05:00Z")
    v = verdict_of(tmp_path, es)
    assert counted_against(v).get("launch") == "stale"
    assert gates(v)["api-readiness"] in {"missing", "failed"}
    assert v["verdict"] != QUALIFIED


def _diagnostic(outcome: str, status: str) -> list[dict[str, Any]]:
    es = qualified_entries()
    diag = copy.deepcopy(entry(es, "benchmark"))
    diag.update(name="diagnostic", at="2026-09-10T10:25:00Z")
    diag["payload"].update(status=status)
    diag["payload"]["counts"].update(requests=6, issued=36, completed=6 if outcome == "fault" else 36)
    diag["payload"]["bounds"].update(outcome=outcome)
    es.insert(es.index(entry(es, "benchmark")), diag)
    return es


def test_an_engine_fault_in_a_diagnostic_benchmark_run_fails_runtime_stability(tmp_path: Path) -> None:
    """Regression: seed 003's first c1 run aborted before an aggregate result; run with a diagnostic spec
    (6 requests), it was rejected `spec-mismatch` whole and the engine's fault was lost."""
    es = _diagnostic("fault", "failed")
    v = verdict_of(tmp_path, es)
    assert counted_against(v) == {"diagnostic": "spec-mismatch"}
    assert gates(v)["runtime-stability"] == "failed"
    assert v["verdict"] == RUNTIME


def test_a_diagnostic_benchmark_out_of_bounds_is_not_judged_against_the_approved_bounds(
    tmp_path: Path,
) -> None:
    """The neighbour: a diagnostic run that completed but missed a bound is not the approved benchmark —
    its figures are not judged against the approved spec's bounds, and it is not a fault of the engine."""
    es = _diagnostic("completed", "failed")
    v = verdict_of(tmp_path, es)
    assert rejected(v) == {"diagnostic": "spec-mismatch"}
    assert counted_against(v) == {}
    assert v["verdict"] == QUALIFIED


def test_a_failed_probe_of_another_subject_in_the_campaigns_job_still_counts(tmp_path: Path) -> None:
    """A failed /health probe in the campaign's job whose subject names the host in another case."""
    es = qualified_entries()
    failed = copy.deepcopy(entry(es, "health"))
    failed.update(name="health-after", at="2026-09-10T10:02:30Z", subject={"host": "GPU-BOX-1"})
    failed["payload"].update(ok=False, http_status=503, error="Service Unavailable")
    es.insert(es.index(entry(es, "sequential")) + 1, failed)
    v = verdict_of(tmp_path, es)
    # its host is the campaign's host (hosts compare case-insensitively, snapshot.host_key): since fix 71
    # it is read as the campaign's own evidence in its job — not even rejected — and still fails it
    assert "health-after" not in rejected(v), v["rejected"]
    assert v["verdict"] == RUNTIME


def test_a_completion_answered_500_that_claims_ok_is_a_runtime_fault_not_a_control_failure(
    tmp_path: Path,
) -> None:
    """Regression: runtime-stability selected failed probes by the claim (`payload.ok = false`), so a
    completion answered HTTP 500 recorded with `ok = true` reached only ready-control: the verdict word was
    CONTROL. The probe's success is derived from its record (`e.derived.ok`), and selection reads that."""
    es = qualified_entries()
    entry(es, "completion")["payload"].update(ok=True, http_status=500, text="READY")
    v = verdict_of(tmp_path, es)
    assert gates(v)["runtime-stability"] == "failed"
    assert v["verdict"] == RUNTIME


def _late_job(es: list[dict[str, Any]], name: str, at: str, **payload: Any) -> dict[str, Any]:
    job = {"name": name, "kind": "job", "key": "collector", "at": at, "payload": payload}
    es.append(job)
    return job


@pytest.mark.parametrize(
    ("first", "later"),
    [("succeeded", "killed"), ("killed", "succeeded")],
    ids=["then-killed", "then-succeeded"],
)
def test_a_job_recorded_succeeded_and_killed_is_a_stopped_job(tmp_path: Path, first: str, later: str) -> None:
    """Regression: a job's first terminal entry decided alone, so a job recorded `succeeded` and then
    `killed` (an operator's kill logged after the collector's own end) credited its passing evidence. The
    records contradict each other; a stop is not a pass — in either order."""
    es = qualified_entries()
    code = {"succeeded": 0, "killed": 143}
    entry(es, "campaign-done")["payload"].update(state=first, exit_code=code[first])
    _late_job(
        es, "late-end", "2026-09-10T10:51:00Z",
        job_id="campaign-1", state=later, ended_at="2026-09-10T10:51:00Z", exit_code=code[later],
    )  # fmt: skip
    v = verdict_of(tmp_path, es)
    assert rejected(v).get("completion") == "killed-run"
    assert v["verdict"] != QUALIFIED


def _with_second_job() -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The qualified campaign and a second running job of it (campaign-2) with the same approved spec,
    to be logged before the campaign ends (``_before_done``)."""
    es = qualified_entries()
    second = copy.deepcopy(entry(es, "campaign-job"))
    second.update(name="second-job", at="2026-09-10T10:49:00Z")
    second["payload"].update(job_id="campaign-2")
    return es, second


def test_two_jobs_of_a_campaign_with_conflicting_approved_specs_bind_nothing(tmp_path: Path) -> None:
    """Regression: the first job's spec.bindings was the manifest whatever a later job of the campaign
    approved, so a campaign re-run on another model revision was judged by the first spec alone."""
    es, second = _with_second_job()
    second["payload"]["spec"]["bindings"]["model_revision"] = "2" * 40
    _before_done(es, second)
    v = verdict_of(tmp_path, es)
    assert v["manifest"]["bindings"]["model_revision"].startswith("conflict: ")
    assert "campaign-2" in v["manifest"]["bindings"]["model_revision"]
    assert rejected(v).get("launch") == "bindings-mismatch"
    assert v["verdict"] != QUALIFIED


def test_a_second_job_with_the_same_approved_spec_is_no_conflict(tmp_path: Path) -> None:
    es, second = _with_second_job()
    _before_done(es, second)
    es.append(  # the second job ended too (one that never ends keeps the verdict INCONCLUSIVE)
        {
            "name": "second-done",
            "kind": "job",
            "key": "collector",
            "at": "2026-09-10T10:52:00Z",
            "payload": {"job_id": "campaign-2", "state": "succeeded", "exit_code": 0},
        }
    )
    v = verdict_of(tmp_path, es)
    assert "conflict" not in str(v["manifest"]["bindings"])
    assert v["verdict"] == QUALIFIED


def test_a_later_job_that_leaves_out_a_bound_key_is_a_conflict(tmp_path: Path) -> None:
    es, second = _with_second_job()
    del second["payload"]["spec"]["bindings"]["engine_version"]
    _before_done(es, second)
    v = verdict_of(tmp_path, es)
    assert v["manifest"]["bindings"]["engine_version"].endswith("to nothing")
    assert v["verdict"] != QUALIFIED


def _bench(es: list[dict[str, Any]]) -> dict[str, Any]:
    payload: dict[str, Any] = entry(es, "benchmark")["payload"]
    return payload


def _drop(d: dict[str, Any], key: str) -> None:
    del d[key]


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda p: p.update(reason="invalid run: saturated at c32"), id="own-failure-reason"),
        pytest.param(lambda p: p["bounds"].update(invalid_reasons=["c32: saturated"]), id="invalid-reason"),
        pytest.param(lambda p: _drop(p["bounds"], "invalid_reasons"), id="invalid-reasons-left-out"),
        pytest.param(lambda p: p["bounds"].update(invalid_reasons=[""]), id="an-empty-invalid-reason"),
        pytest.param(lambda p: p["bounds"].update(aggregate=False), id="no-aggregate"),
        pytest.param(lambda p: _drop(p["bounds"], "aggregate"), id="aggregate-left-out"),
        pytest.param(lambda p: p["bounds"].update(requests=6), id="bounds-requests-not-counts"),
        pytest.param(lambda p: _drop(p["bounds"], "requests"), id="bounds-requests-left-out"),
        pytest.param(lambda p: p["counts"].update({"completed@c32": 0}), id="a-level-with-none-completed"),
        pytest.param(lambda p: _drop(p["counts"], "completed@c4"), id="a-level-left-out"),
        pytest.param(lambda p: p["bounds"]["parity"].update(fraction=0.5), id="parity-record-contradicts"),
        pytest.param(lambda p: _drop(p["bounds"], "parity"), id="parity-record-left-out"),
    ],
)  # fmt: skip
def test_a_passed_benchmark_that_contradicts_its_own_record_never_passes(tmp_path: Path, change: Any) -> None:
    """Regression: a result recorded `passed` and `valid = true` was credited beside its own invalid-run
    reasons, a failure reason, `aggregate = false`, a parity record that contradicts c1_parity, a level
    that completed nothing, or bounds naming another request count than its counts."""
    es = qualified_entries()
    change(_bench(es))
    v = verdict_of(tmp_path, es)
    assert gates(v)["benchmark"] == "failed"
    assert v["verdict"] == "NOT QUALIFIED — PERFORMANCE"


def test_a_benchmark_recorded_after_its_launch_ended_is_not_credited(tmp_path: Path) -> None:
    """Regression: `after-launch-end` and `before-launch` were scoped to health probes, so a passed
    benchmark recorded after the campaign's engine had stopped (a run against whatever then answered the
    port) was credited."""
    es = qualified_entries()
    entry(es, "launch")["payload"]["ended_at"] = "2026-09-10T10:20:00Z"
    v = verdict_of(tmp_path, es)
    assert rejected(v).get("benchmark") == "after-launch-end"
    assert gates(v)["benchmark"] == "missing"
    assert v["verdict"] == "INCONCLUSIVE"


def test_an_engine_fault_a_benchmark_recorded_after_its_launch_ended_still_counts(tmp_path: Path) -> None:
    es = qualified_entries()
    entry(es, "launch")["payload"]["ended_at"] = "2026-09-10T10:20:00Z"
    bench = _bench(es)
    bench.update(status="failed", reason="no aggregate result: connection reset")
    bench["bounds"].update(outcome="fault", aggregate=False)
    v = verdict_of(tmp_path, es)
    assert counted_against(v).get("benchmark") == "after-launch-end"
    assert v["verdict"] == RUNTIME


def test_a_benchmark_recorded_before_any_launch_started_is_not_credited(tmp_path: Path) -> None:
    es = qualified_entries()
    bench = entry(es, "benchmark")
    es.remove(bench)
    bench["at"] = "2026-09-10T10:00:15Z"
    es.insert(es.index(entry(es, "launch")), bench)
    v = verdict_of(tmp_path, es)
    assert rejected(v).get("benchmark") == "before-launch"
    assert v["verdict"] != QUALIFIED


def test_a_failed_benchmark_names_its_own_reason_not_acceptance(tmp_path: Path) -> None:
    """Regression: a failed benchmark run was reported as "benchmark acceptance failed", though no
    acceptance failed: the gate now names the run and the reason the harness recorded."""
    es = qualified_entries()
    bench = _bench(es)
    bench.update(status="failed", reason="ttft_ms.p95@c4 = 2410 above the bound 2000")
    bench["figures"]["ttft_ms.p95@c4"] = 2410.0
    v = verdict_of(tmp_path, es)
    reason = next(g["reason"] for g in v["gates"] if g["name"] == "benchmark")
    assert "acceptance" not in reason
    assert "ttft_ms.p95@c4 = 2410 above the bound 2000" in reason
    assert v["verdict"] == "NOT QUALIFIED — PERFORMANCE"


@pytest.mark.parametrize("acceptor", ["reviewer", "reviewer2"])
def test_a_key_that_passed_the_review_may_not_accept_whichever_pass_is_latest(
    tmp_path: Path, acceptor: str
) -> None:
    """Regression: only the latest PASS was compared with the acceptance's key, so a reviewer who PASSed
    first could accept once a second reviewer had PASSed after them (the answer depended on log order)."""
    es = qualified_entries()
    second = copy.deepcopy(entry(es, "benchmark-review"))
    second.update(name="benchmark-review-2", key="reviewer2", at="2026-09-10T10:41:00Z")
    es.insert(es.index(entry(es, "benchmark-review")) + 1, second)
    entry(es, "benchmark-acceptance")["key"] = acceptor
    keys = {
        "collector": ["collector"],
        "reviewer": ["reviewer"],
        "reviewer2": ["reviewer"],
        "operator": ["operator"],
    }
    v = verdict_of(tmp_path, es, keys=keys)
    assert rejected(v).get("benchmark") == "acceptance-missing"
    assert v["verdict"] == "INCONCLUSIVE"


def test_a_launch_binding_a_shard_the_pin_does_not_list_is_not_credited(tmp_path: Path) -> None:
    """Regression: shards were compared only where both named them, so a launch that loaded a file the
    model pin never verified (an extra adapter, a second weights file) was credited."""
    es = qualified_entries()
    entry(es, "launch")["payload"]["bindings"]["shard:extra.safetensors"] = "c" * 64
    v = verdict_of(tmp_path, es)
    assert rejected(v).get("launch") == "bindings-mismatch"
    assert v["verdict"] != QUALIFIED


def test_a_verdict_narrowed_to_one_host_counts_the_campaigns_attempts_on_another(tmp_path: Path) -> None:
    """Regression: attempts were counted among the evaluated subject's launches, so a verdict narrowed to
    `host=gpu-box-1` did not count three failed attempts the campaign made on gpu-box-2 first: the
    campaign's fourth launch was credited as attempt 1, past the attempt budget."""
    es = qualified_entries()
    launch = entry(es, "launch")
    for i in (1, 2, 3):
        other = copy.deepcopy(launch)
        other.update(name=f"other-host-{i}", at=f"2026-09-10T10:00:{20 + i}Z", subject={"host": "gpu-box-2"})
        other["payload"].update(
            started_at=f"2026-09-10T10:00:{10 + i}Z",
            ready=False,
            failure_signature="uva-unavailable",
            exit_code=1,
        )
        es.insert(es.index(launch), other)
    v = verdict_of(tmp_path, es)
    assert rejected(v).get("launch") == "beyond-attempt-budget"
    assert gates(v)["api-readiness"] == "failed"
    assert v["verdict"] == RUNTIME
    # the neighbour: the same campaign on one host only — the launch is attempt 1 and qualifies
    assert verdict_of(tmp_path, qualified_entries())["verdict"] == QUALIFIED


@pytest.mark.parametrize(
    "bindings",
    [
        {"served_models": "some-other-model-70b"},
        {"served_models": "mm,m-large"},
        {},
        None,
        {"served_models": 7},
    ],
    ids=["another-model", "a-prefix-is-not-the-id", "none-recorded", "bindings-left-out", "mistyped"],
)
def test_a_benchmark_of_an_endpoint_not_serving_the_approved_model_is_not_credited(
    tmp_path: Path, bindings: dict[str, Any] | None
) -> None:
    """Regression: the model a benchmark measured was never compared with the campaign's approved one: a
    stub serving `some-other-model-70b` qualified the campaign."""
    es = qualified_entries()
    bounds = _bench(es)["bounds"]
    if bindings is None:
        del bounds["bindings"]
    else:
        bounds["bindings"] = bindings
    if bindings and not isinstance(bindings["served_models"], str):  # mistyped: refused at ingest
        with pytest.raises(SchemaError, match=r"bounds\.bindings"):
            verdict_of(tmp_path, es)
        return
    v = verdict_of(tmp_path, es)
    assert rejected(v).get("benchmark") == "harness-other-model"
    assert v["verdict"] == "INCONCLUSIVE"


def test_a_benchmark_of_an_endpoint_serving_several_models_among_them_the_approved_one_counts(
    tmp_path: Path,
) -> None:
    es = qualified_entries()
    _bench(es)["bounds"]["bindings"] = {"served_models": "embed-small,m"}
    assert verdict_of(tmp_path, es)["verdict"] == QUALIFIED


@pytest.mark.parametrize("items", [1, 11, None])
def test_a_semantic_result_scored_on_fewer_items_than_the_approved_corpus_is_not_credited(
    tmp_path: Path, items: int | None
) -> None:
    """Regression: the corpus size was the result's own claim, so a run that asked 1 item of the
    approved 12-item corpus (all passed: score 1.0) passed the semantic gate."""
    es = qualified_entries()
    counts = entry(es, "semantic")["payload"]["counts"]
    if items is None:
        del counts["items"]
    else:
        counts.update(items=items, asked=items, passed=items)
    v = verdict_of(tmp_path, es)
    assert rejected(v).get("semantic") == "semantic-spec-mismatch"
    assert v["verdict"] == "INCONCLUSIVE"


def test_output_of_a_killed_job_logged_late_in_the_next_job_is_not_credited(tmp_path: Path) -> None:
    """Regression: the job an entry belongs to was the one running when the log took it, so a READY
    control collected in a job that was then killed, and pushed late (a spool) while the campaign's next
    job ran, naming no job, was credited to the next job."""
    es = qualified_entries()
    entry(es, "campaign-done")["payload"].update(state="killed", exit_code=143)
    second = copy.deepcopy(entry(es, "campaign-job"))
    second.update(name="second-job", at="2026-09-10T10:51:00Z")
    second["payload"].update(job_id="campaign-2", started_at="2026-09-10T10:51:00Z")
    late = copy.deepcopy(entry(es, "completion"))
    late.update(name="late-control", at="2026-09-10T10:40:00Z", logged_at="2026-09-10T10:52:00Z")
    del late["refs"]
    es += [second, late]
    v = verdict_of(tmp_path, es)
    # logged after the killed job's terminal entry: after-job-terminal decides first (audit 26: a claimed
    # time inside the job gives no credit to output the log took after it ended); killed-run would too
    assert rejected(v).get("late-control") == "after-job-terminal"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("invalid_reasons", "none"),
        ("repetitions", "2"),
        ("requests", True),
        ("valid", "true"),
        ("aggregate", 1),
        ("outcome", "Completed"),
        ("concurrency", ["1", "4", "32"]),
    ],
)
def test_a_benchmark_bound_of_the_wrong_type_is_refused_at_ingest(
    tmp_path: Path, field: str, value: Any
) -> None:
    """Regression: `bounds` was untyped at ingest: `"2"` repetitions were stored and then reported as
    "repetitions 2, approved 2"; `"true"` for valid, a misspelled outcome. The fields a policy reads are
    typed strictly (``ledger.entries.HarnessBounds``); the error names the field."""
    es = qualified_entries()
    _bench(es)["bounds"][field] = value
    with pytest.raises(SchemaError, match=rf"bounds\.{field}"):
        verdict_of(tmp_path, es)


def test_a_restoration_probe_answered_500_in_the_campaign_is_a_runtime_fault(tmp_path: Path) -> None:
    """Regression: a failed `check = "restoration"` probe (a request the restore path sends) was selected
    by runtime-stability but judged by none of its checks: a 5xx answer to it left the campaign QUALIFIED."""
    es = qualified_entries()
    probe = copy.deepcopy(entry(es, "completion"))
    probe.update(name="restoration", at="2026-09-10T10:02:10Z")
    probe["payload"].update(
        check="restoration", ok=False, http_status=500, text=None, error="Internal Server Error"
    )
    es.insert(es.index(entry(es, "sequential")) + 1, probe)
    v = verdict_of(tmp_path, es)
    assert gates(v)["runtime-stability"] == "failed"
    assert v["verdict"] == RUNTIME
