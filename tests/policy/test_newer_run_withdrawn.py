"""A harness result a rule withdraws is no newer run; one whose credit is only withheld still is.

Regression (audit 29, F7): a copy of a QUALIFIED campaign's reviewed and accepted benchmark result, logged
after the job's terminal entry and claiming a time after the job ended, made the verdict INCONCLUSIVE: the
real run was rejected ``newer-run`` because the late copy — itself withdrawn by ``after-job-terminal`` (the
log and its own time both put it after the end: not evidence of the subject at all) — counted as a newer
run. Which rules withdraw and which only withhold credit is one marking (``rules.CREDIT_ONLY``,
``acceptance.withholds_only``; docs/POLICY.md's table): a withdrawn result is no run of the subject, a result
only uncredited (logged late while claiming a time inside the job, unreviewed, unaccepted, failed) still is.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.policy.test_fail_closed import (
    counted_against,
    entry,
    gates,
    qualified_entries,
    rejected,
    verdict_of,
)

QUALIFIED = "QUALIFIED"
COMMIT = "cafe" + "0" * 36


def _late_copy(
    es: list[dict[str, Any]], gate: str, at: str, logged_at: str = "2026-09-10T10:55:00Z", **payload: Any
) -> dict[str, Any]:
    """A copy of the campaign's ``gate`` result logged at ``logged_at`` (after the job's terminal entry,
    10:50) claiming ``at``, refing the campaign's job."""
    late = copy.deepcopy(entry(es, gate))
    late.update(name=f"{gate}-late", at=at, logged_at=logged_at)
    late["payload"].update(payload)
    es.append(late)
    return late


def _reviewed_and_accepted(es: list[dict[str, Any]], name: str, at: str) -> None:
    es.append(
        {
            "kind": "review",
            "key": "reviewer",
            "at": at,
            "refs": {"reviews": name},
            "payload": {"result": "PASS", "commit": COMMIT},
        }
    )
    es.append(
        {
            "kind": "acceptance",
            "key": "operator",
            "at": at,
            "refs": {"subject": name},
            "payload": {"decision": "accepted", "reason": "copy"},
        }
    )


@pytest.mark.parametrize("gate", ["benchmark", "semantic"])
def test_a_late_copy_withdrawn_after_job_terminal_is_no_newer_run(tmp_path: Path, gate: str) -> None:
    """The audit's shape: logged after the job's terminal entry, claiming a time after its end."""
    es = qualified_entries()
    _late_copy(es, gate, "2026-09-10T10:55:00Z")
    v = verdict_of(tmp_path, es)
    r = rejected(v)
    assert r == {f"{gate}-late": "after-job-terminal"}, r
    assert counted_against(v) == {}
    assert v["verdict"] == QUALIFIED


def test_a_withdrawn_late_copy_reviewed_and_accepted_is_still_no_newer_run(tmp_path: Path) -> None:
    es = qualified_entries()
    _late_copy(es, "benchmark", "2026-09-10T10:55:00Z")
    _reviewed_and_accepted(es, "benchmark-late", "2026-09-10T10:56:00Z")
    v = verdict_of(tmp_path, es)
    assert rejected(v) == {"benchmark-late": "after-job-terminal"}
    assert v["verdict"] == QUALIFIED


def test_a_late_failed_copy_an_engine_answered_counts_against_whatever_job_it_names(tmp_path: Path) -> None:
    """A failed run whose requests an engine answered (its outcome completed) after the job ended is no
    output of the ended job's engine after it was gone: it counts against the engine, as it does naming
    no job (audit 63 f2; it used to be withdrawn). Its credit is withheld all the same."""
    es = qualified_entries()
    _late_copy(es, "benchmark", "2026-09-10T10:55:00Z", status="failed")
    v = verdict_of(tmp_path, es)
    # the newest run of the spec is the failed one now: the older pass is no longer the newest
    assert rejected(v) == {"benchmark-late": "after-job-terminal", "benchmark": "newer-run"}
    assert counted_against(v) == {"benchmark-late": "after-job-terminal"}
    assert v["verdict"] == "NOT QUALIFIED — PERFORMANCE"


def test_a_late_copy_claiming_a_time_inside_the_job_still_is_a_newer_run(tmp_path: Path) -> None:
    """Logged after the terminal entry but claiming 10:47, inside the job: only the log says it came after
    the end, so after-job-terminal only withholds its credit — it shows a run, and the older pass stands
    only as the newest run."""
    es = qualified_entries()
    _late_copy(es, "benchmark", "2026-09-10T10:47:00Z")
    v = verdict_of(tmp_path, es)
    r = rejected(v)
    assert r["benchmark-late"] == "after-job-terminal"
    assert r["benchmark"] == "newer-run"
    assert gates(v)["benchmark"] == "missing" and v["verdict"] == "INCONCLUSIVE"


def test_a_late_failed_copy_claiming_a_time_inside_the_job_fails_the_gate(tmp_path: Path) -> None:
    es = qualified_entries()
    _late_copy(es, "benchmark", "2026-09-10T10:47:00Z", status="failed")
    v = verdict_of(tmp_path, es)
    assert counted_against(v) == {"benchmark-late": "after-job-terminal"}
    assert gates(v)["benchmark"] == "failed"
    assert v["verdict"] == "NOT QUALIFIED — PERFORMANCE"


def test_a_newer_run_superseded_by_another_key_is_no_newer_run(tmp_path: Path) -> None:
    """A supersession in force, with its reason, withdraws: the older accepted run stands."""
    es = qualified_entries()
    rerun = copy.deepcopy(entry(es, "benchmark"))
    rerun.update(name="benchmark-rerun", at="2026-09-10T10:46:00Z")
    done = es.index(entry(es, "campaign-done"))
    es[done:done] = [
        rerun,
        {
            "name": "withdraw",
            "kind": "supersession",
            "key": "operator",
            "at": "2026-09-10T10:47:00Z",
            "refs": {"supersedes": "benchmark-rerun"},
            "payload": {"reason": "run against the wrong endpoint"},
        },
    ]
    v = verdict_of(tmp_path, es)
    assert rejected(v) == {"benchmark-rerun": "superseded"}
    assert v["verdict"] == QUALIFIED


@pytest.mark.parametrize("step", ["review", "acceptance"])
def test_a_newer_run_only_uncredited_inside_the_job_still_is_a_newer_run(tmp_path: Path, step: str) -> None:
    """Unreviewed, or reviewed and not accepted: its credit is withheld, but it ran — the newest
    measurement."""
    es = qualified_entries()
    rerun = copy.deepcopy(entry(es, "benchmark"))
    rerun.update(name="benchmark-rerun", at="2026-09-10T10:46:00Z")
    new: list[dict[str, Any]] = [rerun]
    if step == "acceptance":
        new.append(
            {
                "kind": "review",
                "key": "reviewer",
                "at": "2026-09-10T10:47:00Z",
                "refs": {"reviews": "benchmark-rerun"},
                "payload": {"result": "PASS", "commit": COMMIT},
            }
        )
    done = es.index(entry(es, "campaign-done"))
    es[done:done] = new
    v = verdict_of(tmp_path, es)
    r = rejected(v)
    assert r["benchmark"] == "newer-run"
    assert r["benchmark-rerun"] == ("review-missing" if step == "review" else "acceptance-missing")
    assert v["verdict"] == "INCONCLUSIVE"
