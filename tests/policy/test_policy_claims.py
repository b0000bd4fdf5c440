"""Audit 26: the policy engine derives from the log, not from claims, and fails closed. One regression per
finding, named after it, with its neighbours (the field dropped or mistyped, the other order, ties).

- F1: a review FAIL is lifted only by an *independent* PASS logged after it: one signed by the evidence's
  own key (or a key rotated from it) lifts nothing, and a PASS earlier than the FAIL lifts nothing either.
- F2: ``ready-control`` and ``sequential-requests`` fail on any credited failed probe, failed as the gate
  itself judges it (``e.derived.probe_failed``: the answer, the count re-judged), not only by ``ok``.
- F3: a harness result logged after its job's terminal entry is not credited, whatever ``collected_at`` it
  claims; a failure it shows still counts against the engine.
- F4: an acceptance that is not independent (signed by a key that signed a review PASS of the evidence)
  decides nothing, so the order acceptances were logged in does not change the verdict.
- F5: a rule that withholds credit keeps an entry as evidence against the engine only when it shows a
  failure: a passing probe (or passed result) taken "before the launch" but logged while it ran is not
  "still evidence against the engine".
"""

from __future__ import annotations

import copy
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from ledger.errors import PolicyError
from tests.policy.test_fail_closed import POLICY_DIR, entry, gates, qualified_entries, rejected, verdict_of

QUALIFIED = "QUALIFIED"
INCONCLUSIVE = "INCONCLUSIVE"
CONTROL = "NOT QUALIFIED — CONTROL"
RUNTIME = "NOT QUALIFIED — RUNTIME RELIABILITY"

B, F = "b" * 40, "f" * 40


def _rule_of(v: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((r for r in v["rejected"] if v["_names"].get(r["entry"]) == name), None)


# --- F1: a review FAIL is lifted only by an independent PASS logged after it -----------------------------

REVIEW_KEYS = {
    "collector": ["collector"],
    "reviewer": ["reviewer"],
    "reviewer2": ["reviewer"],
    "operator": ["operator"],
    # one person's key: may sign evidence (operator) and reviews
    "dual": ["operator", "reviewer"],
    "dual2": ["operator", "reviewer"],
}


def _review(name: str, at: str, result: str, commit: str | None, key: str) -> dict[str, Any]:
    payload: dict[str, Any] = {"result": result}
    if commit is not None:
        payload["commit"] = commit
    return {
        "name": name,
        "kind": "review",
        "key": key,
        "at": at,
        "refs": {"reviews": "semantic"},
        "payload": payload,
    }


def _reviewed(reviews: list[dict[str, Any]], more: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """The qualified campaign with its semantic result signed by ``dual`` at commit B and reviewed by
    ``reviews`` (in place of the shared fixture's review)."""
    es = qualified_entries()
    sem = entry(es, "semantic")
    sem["key"], sem["subject"] = "dual", {"commit": B}
    es = [e for e in es if e.get("name") != "semantic-review"]
    i = es.index(entry(es, "benchmark"))
    es[i:i] = [*reviews, *more]
    return es


PASS_B = _review("independent-pass", "2026-09-10T10:20:00Z", "PASS", B, "reviewer")
FAIL_F = _review("fail", "2026-09-10T10:21:00Z", "FAIL", F, "reviewer2")
OWN_B = _review("own-key-pass", "2026-09-10T10:22:00Z", "PASS", B, "dual")


def test_f1_review_fail_is_not_lifted_by_a_later_pass_from_the_evidences_own_key(tmp_path: Path) -> None:
    """Regression: an independent PASS of B, then reviewer2's FAIL, then a PASS of B by the evidence's own
    key was QUALIFIED — the own-key PASS lifted the FAIL, the earlier independent PASS gave the credit."""
    v = verdict_of(tmp_path, _reviewed([PASS_B, FAIL_F, OWN_B]), keys=REVIEW_KEYS)
    assert rejected(v)["semantic"] == "review-fail"
    r = _rule_of(v, "semantic")
    assert r is not None and "its own key" in r["detail"] and "lifts nothing" in r["detail"]
    assert v["verdict"] != QUALIFIED


def test_f1_own_key_pass_alone_after_the_fail_lifts_nothing(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, _reviewed([FAIL_F, OWN_B]), keys=REVIEW_KEYS)
    assert rejected(v)["semantic"] == "review-fail"
    assert v["verdict"] != QUALIFIED


def test_f1_pass_earlier_than_the_fail_lifts_nothing(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, _reviewed([PASS_B, FAIL_F]), keys=REVIEW_KEYS)
    assert rejected(v)["semantic"] == "review-fail"
    assert v["verdict"] != QUALIFIED


def test_f1_pass_by_a_key_rotated_from_the_evidences_key_lifts_nothing(tmp_path: Path) -> None:
    """``dual`` rotated to ``dual2`` before the PASS: one signer, so the PASS is not independent."""
    rotation = {
        "kind": "key.rotate",
        "at": "2026-09-10T10:21:30Z",
        "payload": {
            "old_key": "dual",
            "new_key": "dual2",
            "effective_at": "2026-09-10T10:21:30Z",
            "reason": "routine rotation",
        },
    }
    rotated = {**OWN_B, "name": "rotated-key-pass", "key": "dual2"}
    v = verdict_of(tmp_path, _reviewed([PASS_B, FAIL_F], [rotation, rotated]), keys=REVIEW_KEYS)
    assert rejected(v)["semantic"] == "review-fail"
    assert v["verdict"] != QUALIFIED


@pytest.mark.parametrize(
    "order",
    [
        pytest.param(("own", "independent"), id="own-key-pass-then-independent-pass"),
        pytest.param(("independent", "own"), id="independent-pass-then-own-key-pass"),
        pytest.param(("tie-independent-first",), id="same-time-independent-listed-first"),
        pytest.param(("tie-own-first",), id="same-time-own-key-listed-first"),
    ],
)
def test_f1_independent_pass_after_the_fail_lifts_it_whatever_own_key_passes_beside_it(
    tmp_path: Path, order: tuple[str, ...]
) -> None:
    """Neighbour: an independent PASS of the repaired commit logged after the FAIL lifts it, before or
    after a PASS by the evidence's own key (which neither lifts nor blocks)."""
    ind = _review("independent-after", "2026-09-10T10:23:00Z", "PASS", B, "reviewer")
    own = {**OWN_B}
    if order == ("own", "independent"):
        more = [own, ind]
    elif order == ("independent", "own"):
        own["at"] = "2026-09-10T10:24:00Z"
        more = [ind, own]
    else:
        own["at"] = ind["at"]
        more = [ind, own] if order == ("tie-independent-first",) else [own, ind]
    v = verdict_of(tmp_path, _reviewed([FAIL_F], more), keys=REVIEW_KEYS)
    assert rejected(v).get("semantic") is None, v["rejected"]
    assert v["verdict"] == QUALIFIED


def test_f1_own_key_pass_after_the_fail_naming_no_commit_still_names_the_fail(tmp_path: Path) -> None:
    """Neighbour (the field dropped): an own-key PASS with no commit is no independent PASS either."""
    own = _review("own-key-pass", "2026-09-10T10:22:00Z", "PASS", None, "dual")
    v = verdict_of(tmp_path, _reviewed([PASS_B, FAIL_F, own]), keys=REVIEW_KEYS)
    assert rejected(v)["semantic"] == "review-fail"


# --- F2: a failed READY control or short sequential run is not lifted by a later pass --------------------


def _failed_then_good(probe: str, change: dict[str, Any], *, bad_first: bool = True) -> list[dict[str, Any]]:
    es = qualified_entries()
    good = entry(es, probe)
    bad = copy.deepcopy(good)
    bad["name"] = "failed-" + probe
    bad["payload"].update(change)
    for k in [k for k, v in change.items() if v is _DROP]:
        del bad["payload"][k]
    i = es.index(good)
    es.insert(i if bad_first else i + 1, bad)
    return es


_DROP = object()


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"text": "NOT READY"}, id="not-ready"),
        pytest.param({"text": ""}, id="empty"),
        pytest.param({"text": "READY, but"}, id="ready-but"),
        pytest.param({"text": "ready"}, id="lower-case"),
        pytest.param({"text": None}, id="no-answer"),
        pytest.param({"text": _DROP}, id="answer-dropped"),
    ],
)
@pytest.mark.parametrize("bad_first", [True, False], ids=["failed-first", "failed-after"])
def test_f2_failed_ready_control_recorded_ok_is_not_lifted_by_a_later_pass(
    tmp_path: Path, change: dict[str, Any], bad_first: bool
) -> None:
    """Regression: a completion with ok = true answering "NOT READY" (or "") followed by a READY one was
    QUALIFIED; the "a later pass does not lift it" check read only `ok`."""
    v = verdict_of(tmp_path, _failed_then_good("completion", change, bad_first=bad_first))
    assert gates(v)["ready-control"] == "failed"
    assert v["verdict"] == CONTROL
    g = next(g for g in v["gates"] if g["name"] == "ready-control")
    assert "a later pass does not lift it" in g["reason"]


def test_f2_ready_control_answer_with_surrounding_whitespace_still_passes(tmp_path: Path) -> None:
    """Neighbour: the answer is judged stripped of surrounding whitespace, as the collector judges it."""
    v = verdict_of(tmp_path, _failed_then_good("completion", {"text": "  READY\n"}))
    assert gates(v)["ready-control"] == "passed"
    assert v["verdict"] == QUALIFIED


def test_f2_ready_control_with_the_policys_control_answer_dropped_never_passes(tmp_path: Path) -> None:
    """Neighbour (the policy's field dropped): a policy whose text still reads params.control_answer is
    refused at load (fix60: every params name a CEL or template reads is one the policy sets); one that no
    longer reads it anywhere still judges no answer READY (`_probe_failed`)."""
    policies = tmp_path / "policies"
    shutil.copytree(POLICY_DIR, policies, ignore=shutil.ignore_patterns("fixtures"))
    path = policies / "backend-qualification.toml"
    text = path.read_text()
    assert 'control_answer = "READY"' in text
    path.write_text(text.replace('control_answer = "READY"', 'control_answer_renamed = "READY"'))
    with pytest.raises(PolicyError, match=r"params\.control_answer"):
        verdict_of(tmp_path / "a", qualified_entries(), policy_dir=policies)
    path.write_text(path.read_text().replace("{params[control_answer]}", "READY"))
    v = verdict_of(tmp_path / "b", qualified_entries(), policy_dir=policies)
    assert gates(v)["ready-control"] == "failed"
    assert v["verdict"] != QUALIFIED


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"count": 5, "latencies_ms": [41.5] * 5}, id="5-of-20"),
        pytest.param({"count": 19, "latencies_ms": [41.5] * 19}, id="19-of-20"),
        pytest.param({"count": 0, "latencies_ms": []}, id="none"),
        pytest.param({"count": 20, "latencies_ms": [41.5] * 5}, id="count-20-timing-5"),
        pytest.param({"count": 20, "latencies_ms": _DROP}, id="latencies-dropped"),
    ],
)
@pytest.mark.parametrize("bad_first", [True, False], ids=["failed-first", "failed-after"])
def test_f2_short_sequential_run_recorded_ok_is_not_lifted_by_a_later_pass(
    tmp_path: Path, change: dict[str, Any], bad_first: bool
) -> None:
    """Regression: a sequential run with ok = true and count 5 (below params.sequential_requests), then a
    20/20 run, was QUALIFIED."""
    v = verdict_of(tmp_path, _failed_then_good("sequential", change, bad_first=bad_first))
    assert gates(v)["sequential-requests"] == "failed"
    assert v["verdict"] == RUNTIME


def test_f2_two_full_sequential_runs_pass(tmp_path: Path) -> None:
    """Neighbour (the boundary): a run of exactly params.sequential_requests is a pass, not a failure."""
    v = verdict_of(tmp_path, _failed_then_good("sequential", {"count": 20, "latencies_ms": [40.0] * 20}))
    assert gates(v)["sequential-requests"] == "passed"
    assert v["verdict"] == QUALIFIED


def test_f2_structured_output_neighbour_still_fails_closed(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, _failed_then_good("structured", {"text": '{"status": "NOT READY"}'}))
    assert gates(v)["structured-output"] == "failed"
    assert v["verdict"] == CONTROL


# --- F3: a harness result logged after its job's terminal entry is not credited --------------------------


def _benchmark_logged_late(collected: str, logged: str, **payload: Any) -> list[dict[str, Any]]:
    """The benchmark names no job, is logged at ``logged`` and claims ``collected``; the job's terminal
    entry (succeeded, ended_at 10:50) is logged at 10:50."""
    es = qualified_entries()
    b = entry(es, "benchmark")
    b.pop("refs")
    b["at"], b["logged_at"] = collected, logged
    b["payload"].update(payload)
    entry(es, "benchmark-review")["at"] = "2026-09-10T10:56:00Z"
    entry(es, "benchmark-acceptance")["at"] = "2026-09-10T10:57:00Z"
    return es


def test_f3_harness_result_logged_after_its_job_ended_claiming_a_time_inside_it_is_not_credited(
    tmp_path: Path,
) -> None:
    """Regression: a benchmark naming no job, logged at 10:55 after the job's terminal entry (10:50) but
    claiming collected_at 10:30, was credited — QUALIFIED on its claimed time alone."""
    v = verdict_of(tmp_path, _benchmark_logged_late("2026-09-10T10:30:00Z", "2026-09-10T10:55:00Z"))
    assert rejected(v)["benchmark"] == "after-job-terminal"
    r = _rule_of(v, "benchmark")
    assert r is not None and "logged" in r["detail"] and "claims collected_at" in r["detail"]
    assert v["verdict"] != QUALIFIED


def test_f3_harness_result_logged_and_claimed_after_the_job_is_withdrawn(tmp_path: Path) -> None:
    """Neighbour: the log and its own time both say after the end: withdrawn (nothing kept against)."""
    v = verdict_of(tmp_path, _benchmark_logged_late("2026-09-10T10:52:00Z", "2026-09-10T10:55:00Z"))
    r = _rule_of(v, "benchmark")
    assert r is not None and r["rule"] == "after-job-terminal" and not r.get("counts_against")
    assert v["verdict"] != QUALIFIED


def test_f3_failed_harness_result_logged_after_its_job_still_counts_against(tmp_path: Path) -> None:
    """Neighbour: its credit is withheld, but the failure it shows (an engine fault stopped it) still
    counts against the engine — it claims a time inside the job, and a claim may take credit away."""
    es = _benchmark_logged_late("2026-09-10T10:30:00Z", "2026-09-10T10:55:00Z")
    b = entry(es, "benchmark")
    b["payload"]["status"] = "failed"
    b["payload"]["reason"] = "engine fault"
    b["payload"]["bounds"]["outcome"] = "fault"
    v = verdict_of(tmp_path, es)
    r = _rule_of(v, "benchmark")
    assert r is not None and r["rule"] == "after-job-terminal" and r.get("counts_against") is True
    assert v["verdict"] == RUNTIME


def test_f3_harness_result_logged_at_the_terminal_entrys_time_but_after_it_is_not_credited(
    tmp_path: Path,
) -> None:
    """Tie: logged at 10:50, the terminal entry's own time, but after it in the log."""
    es = _benchmark_logged_late("2026-09-10T10:30:00Z", "2026-09-10T10:50:00Z")
    es.append(es.pop(es.index(entry(es, "benchmark"))))  # listed (so logged) after the terminal entry
    v = verdict_of(tmp_path, es)
    assert rejected(v)["benchmark"] == "after-job-terminal"
    assert v["verdict"] != QUALIFIED


def test_f3_harness_result_logged_while_its_job_ran_is_credited(tmp_path: Path) -> None:
    """Neighbour (the other order): logged before the terminal entry, inside the job: credited."""
    v = verdict_of(tmp_path, _benchmark_logged_late("2026-09-10T10:30:00Z", "2026-09-10T10:31:00Z"))
    assert rejected(v).get("benchmark") is None
    assert v["verdict"] == QUALIFIED


def test_f3_job_end_without_ended_at_is_where_the_log_put_it(tmp_path: Path) -> None:
    """Neighbour (the field dropped): a terminal entry with no ended_at ends the job where it was logged."""
    es = _benchmark_logged_late("2026-09-10T10:30:00Z", "2026-09-10T10:55:00Z")
    del entry(es, "campaign-done")["payload"]["ended_at"]
    v = verdict_of(tmp_path, es)
    assert rejected(v)["benchmark"] == "after-job-terminal"
    assert v["verdict"] != QUALIFIED


# --- F4: a non-independent acceptance decides nothing, in either order -----------------------------------


def _acceptance(name: str, at: str, key: str, decision: str = "accepted") -> dict[str, Any]:
    return {
        "name": name,
        "kind": "acceptance",
        "key": key,
        "at": at,
        "refs": {"subject": "benchmark"},
        "payload": {"decision": decision, "reason": f"{decision} by {key}"},
    }


def _accepted(accs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    es = [e for e in qualified_entries() if e.get("name") != "benchmark-acceptance"]
    i = es.index(entry(es, "campaign-done"))
    es[i:i] = accs
    return es


@pytest.mark.parametrize(
    "accs",
    [
        pytest.param(
            [
                _acceptance("a-op", "2026-09-10T10:45:00Z", "operator"),
                _acceptance("a-rv", "2026-09-10T10:46:00Z", "reviewer"),
            ],
            id="operator-then-reviewer",
        ),
        pytest.param(
            [
                _acceptance("a-rv", "2026-09-10T10:45:00Z", "reviewer"),
                _acceptance("a-op", "2026-09-10T10:46:00Z", "operator"),
            ],
            id="reviewer-then-operator",
        ),
        pytest.param(
            [
                _acceptance("a-op", "2026-09-10T10:45:00Z", "operator"),
                _acceptance("a-rv", "2026-09-10T10:45:00Z", "reviewer"),
            ],
            id="tie-operator-listed-first",
        ),
        pytest.param(
            [
                _acceptance("a-rv", "2026-09-10T10:45:00Z", "reviewer"),
                _acceptance("a-op", "2026-09-10T10:45:00Z", "operator"),
            ],
            id="tie-reviewer-listed-first",
        ),
    ],
)
def test_f4_later_acceptance_by_the_review_pass_signer_does_not_overrule_an_independent_one(
    tmp_path: Path, accs: list[dict[str, Any]]
) -> None:
    """Regression: the operator accepted at 10:45, then the reviewer who signed the review PASS at 10:46:
    INCONCLUSIVE acceptance-missing; the other order QUALIFIED. Now the same verdict in every order."""
    v = verdict_of(tmp_path, _accepted(accs))
    assert rejected(v).get("benchmark") is None, v["rejected"]
    assert v["verdict"] == QUALIFIED


def test_f4_acceptance_by_the_review_pass_signer_alone_is_named_as_not_independent(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, _accepted([_acceptance("a-rv", "2026-09-10T10:45:00Z", "reviewer")]))
    assert rejected(v)["benchmark"] == "acceptance-missing"
    r = _rule_of(v, "benchmark")
    assert r is not None and "signed by the key that signed its review PASS" in r["detail"]
    assert v["verdict"] == INCONCLUSIVE


@pytest.mark.parametrize("reviewer_later", [True, False], ids=["reviewer-accepts-later", "reviewer-earlier"])
def test_f4_acceptance_by_the_review_pass_signer_cannot_overrule_a_rejection(
    tmp_path: Path, reviewer_later: bool
) -> None:
    """Neighbour: the operator rejects; the reviewer's acceptance, earlier or later, decides nothing."""
    rej = _acceptance("a-op", "2026-09-10T10:45:00Z", "operator", "rejected")
    acc = _acceptance(
        "a-rv", "2026-09-10T10:46:00Z" if reviewer_later else "2026-09-10T10:44:00Z", "reviewer"
    )
    v = verdict_of(tmp_path, _accepted([rej, acc] if reviewer_later else [acc, rej]))
    assert rejected(v)["benchmark"] == "rejected-by-acceptance"
    assert v["verdict"] != QUALIFIED


def test_f4_rejection_by_the_review_pass_signer_still_counts(tmp_path: Path) -> None:
    """Neighbour: a rejection by any key counts — the reviewer rejecting after the operator accepted."""
    accs = [
        _acceptance("a-op", "2026-09-10T10:45:00Z", "operator"),
        _acceptance("a-rv", "2026-09-10T10:46:00Z", "reviewer", "rejected"),
    ]
    v = verdict_of(tmp_path, _accepted(accs))
    assert rejected(v)["benchmark"] == "rejected-by-acceptance"
    assert v["verdict"] != QUALIFIED


# --- F5: only an entry that shows a failure is kept as evidence against the engine ----------------------


def _probe_before_launch(es: list[dict[str, Any]], name: str) -> dict[str, Any]:
    p = entry(es, name)
    p["at"] = "2026-09-10T10:00:19Z"  # 1 s before the launch's started_at (10:00:20)
    p["logged_at"] = "2026-09-10T10:01:05Z"  # logged while the launch ran
    return p


def test_f5_passing_probe_before_launch_is_not_evidence_against_the_engine(tmp_path: Path) -> None:
    """Regression: a /health probe, ok and HTTP 200, claiming a time before the launch started but logged
    while it ran, was reported `counts_against` — "still evidence against the engine"."""
    es = qualified_entries()
    _probe_before_launch(es, "health")
    v = verdict_of(tmp_path, es)
    r = _rule_of(v, "health")
    assert r is not None and r["rule"] == "before-launch"
    assert not r.get("counts_against")
    assert "against the engine" not in r["detail"]


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"ok": False, "http_status": 503, "error": "engine dead"}, id="http-503"),
        pytest.param({"http_status": 500}, id="ok-beside-500"),
        pytest.param({"http_status": None}, id="status-dropped"),
    ],
)
def test_f5_failing_health_probe_before_launch_logged_while_it_ran_counts_against(
    tmp_path: Path, change: dict[str, Any]
) -> None:
    es = qualified_entries()
    _probe_before_launch(es, "health")["payload"].update(change)
    v = verdict_of(tmp_path, es)
    r = _rule_of(v, "health")
    assert r is not None and r["rule"] == "before-launch" and r.get("counts_against") is True
    assert v["verdict"] == RUNTIME


def test_f5_ready_control_answered_not_ready_before_launch_counts_against(tmp_path: Path) -> None:
    """Neighbour: the re-judged failure (ok = true, "NOT READY") is a failure shown, as the gate judges it."""
    es = qualified_entries()
    bad = copy.deepcopy(entry(es, "completion"))
    bad["name"] = "early-completion"
    bad["payload"]["text"] = "NOT READY"
    es.insert(es.index(entry(es, "completion")), bad)
    _probe_before_launch(es, "early-completion")
    v = verdict_of(tmp_path, es)
    r = _rule_of(v, "early-completion")
    assert r is not None and r["rule"] == "before-launch" and r.get("counts_against") is True
    assert gates(v)["ready-control"] == "failed"
    assert v["verdict"] == CONTROL


def test_f5_failing_probe_logged_before_any_launch_is_withdrawn(tmp_path: Path) -> None:
    """Neighbour (the other order): logged before any launch started, it answered no engine of the
    campaign: withdrawn, failing or not."""
    es = qualified_entries()
    p = _probe_before_launch(es, "health")
    p["logged_at"] = "2026-09-10T10:00:19Z"
    p["payload"].update(ok=False, http_status=503, error="engine dead")
    v = verdict_of(tmp_path, es)
    r = _rule_of(v, "health")
    assert r is not None and r["rule"] == "before-launch" and not r.get("counts_against")


def _harness_before_launch(es: list[dict[str, Any]]) -> dict[str, Any]:
    b = entry(es, "benchmark")
    b["at"] = "2026-09-10T10:00:15Z"  # claims a time before the launch started
    b["logged_at"] = "2026-09-10T10:30:00Z"  # logged while it ran
    return b


def test_f5_passed_harness_result_before_launch_is_not_evidence_against_the_engine(tmp_path: Path) -> None:
    es = qualified_entries()
    _harness_before_launch(es)
    v = verdict_of(tmp_path, es)
    r = _rule_of(v, "benchmark")
    assert r is not None and r["rule"] == "before-launch"
    assert not r.get("counts_against")
    assert v["verdict"] != QUALIFIED


def test_f5_faulted_harness_result_before_launch_still_counts_against(tmp_path: Path) -> None:
    es = qualified_entries()
    b = _harness_before_launch(es)
    b["payload"]["status"] = "failed"
    b["payload"]["reason"] = "engine fault"
    b["payload"]["bounds"]["outcome"] = "fault"
    v = verdict_of(tmp_path, es)
    r = _rule_of(v, "benchmark")
    assert r is not None and r["rule"] == "before-launch" and r.get("counts_against") is True
    assert v["verdict"] == RUNTIME


# --- audit 27: what counts against the engine judges a probe as the gates do -----------------------------


@pytest.mark.parametrize(
    ("check", "change", "word"),
    [
        ("completion", {"text": "NOT READY"}, "NOT QUALIFIED — CONTROL"),
        ("sequential", {"count": 5, "latencies_ms": [1.0] * 5}, "NOT QUALIFIED — RUNTIME RELIABILITY"),
        ("structured", {"text": '{"status": "BROKEN"}'}, "NOT QUALIFIED — CONTROL"),
    ],
    ids=["not-ready", "short-sequential", "bad-structured"],
)
def test_a_failed_control_recorded_ok_whose_credit_a_rule_withholds_still_counts_against_the_engine(
    tmp_path: Path, check: str, change: dict[str, Any], word: str
) -> None:
    """Regression (audit 27, f1): [acceptance.against] judged a probe by `ok` alone, so a "NOT READY" (a
    sequential run of 5 of 20, an invalid structured answer) recorded ok = true and withheld by
    after-launch-end counted for nothing, and the campaign was QUALIFIED; recorded ok = false it was not."""
    es = qualified_entries()
    second = entry(es, "launch")
    second["payload"].update(started_at="2026-09-10T10:00:59Z", attempt=2)
    first = copy.deepcopy(second)
    first["name"], first["at"] = "launch-1", "2026-09-10T10:00:55Z"
    first["payload"].update(
        attempt=1,
        started_at="2026-09-10T10:00:20Z",
        ended_at="2026-09-10T10:00:50Z",
        exit_code=143,
        details={"stop_reason": "finished"},
    )
    at = es.index(second)
    es.insert(at, first)
    late = copy.deepcopy(entry(es, check))
    late["name"], late["at"] = "late", "2026-09-10T10:00:58Z"
    late["payload"].update(ok=True, **change)
    es.insert(at + 1, late)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == word, v["gates"]
    assert any(r["rule"] == "after-launch-end" and r.get("counts_against") for r in v["rejected"]), v[
        "rejected"
    ]
