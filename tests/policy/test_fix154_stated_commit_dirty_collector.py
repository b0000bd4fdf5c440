"""Issue 11, fix 154 (audit 101 f2 b): a job binding the commit its campaign states while its collector ran
from a checkout that was no commit (``spec.collector_commit`` null: uncommitted changes to the harness) is
produced by code no commit names, so no review PASS of the stated commit credits its results (INCONCLUSIVE,
``review-missing`` with the reason). A collector commit that is a full commit — the stated one, or another
(the code under review may be an engine's) — and a spec that records none credit as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ledger.policy.acceptance import COLLECTOR_COMMIT, COMMIT_BINDING, produced_at
from tests.policy.test_fail_closed import entry, qualified_entries, rejected, verdict_of

C = "cafe000000000000000000000000000000000000"  # the fixture's commit: its results' subject, its reviews'
NO_COMMIT = "no commit a review names"


def _collector(value: Any, *, bind: bool = True) -> list[dict[str, Any]]:
    """The qualified fixture, its job binding ``C`` (``bind``) and recording ``value`` as the collector's own
    commit (``...``: recording none)."""
    es = qualified_entries()
    spec = entry(es, "campaign-job")["payload"]["spec"]
    if bind:
        spec["bindings"][COMMIT_BINDING] = C
    if value is not ...:
        spec[COLLECTOR_COMMIT] = value
    return es


def test_stated_commit_with_a_dirty_collector_is_not_credited(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, _collector(None))
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert rejected(v)["semantic"] == rejected(v)["benchmark"] == "review-missing"
    details = [r["detail"] for r in v["rejected"] if r["rule"] == "review-missing"]
    assert len(details) == 2
    assert all(f"spec.{COLLECTOR_COMMIT} None" in d and NO_COMMIT in d for d in details), details


@pytest.mark.parametrize(
    "value",
    [C, "f" * 40, "F" * 40, "a" * 64],
    ids=["the-stated-commit", "another-commit", "upper-case", "sha256"],
)
def test_a_collector_at_a_commit_is_credited(tmp_path: Path, value: str) -> None:
    v = verdict_of(tmp_path, _collector(value))
    assert v["verdict"] == "QUALIFIED", v["rejected"]


def test_a_job_recording_no_collector_commit_is_credited_as_before(tmp_path: Path) -> None:
    assert verdict_of(tmp_path, _collector(...))["verdict"] == "QUALIFIED"
    assert verdict_of(tmp_path, _collector(..., bind=False))["verdict"] == "QUALIFIED"


@pytest.mark.parametrize(
    "value",
    ["", "  ", "cafe000", "HEAD", "g" * 40, 7, ["f" * 40], {"commit": "f" * 40}, True],
    ids=["empty", "blank", "abbreviated", "a-ref", "not-hex", "a-number", "a-list", "an-object", "a-boolean"],
)
def test_a_mistyped_collector_commit_is_not_credited(tmp_path: Path, value: Any) -> None:
    v = verdict_of(tmp_path, _collector(value))
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert rejected(v)["semantic"] == "review-missing"


def test_a_dirty_collector_without_a_bound_commit_is_not_credited_by_its_subjects(tmp_path: Path) -> None:
    """The results' subject names a commit, the job binds none: still code no commit names."""
    v = verdict_of(tmp_path, _collector(None, bind=False))
    assert v["verdict"] == "INCONCLUSIVE"
    assert rejected(v)["semantic"] == "review-missing"


class _E:
    def __init__(self, subject: dict[str, Any], payload: dict[str, Any] | None = None, id: str = "e" * 64):
        self.subject, self.payload, self.id = subject, payload or {}, id


def test_produced_at_reads_the_collectors_commit() -> None:
    def job(spec: dict[str, Any]) -> Any:
        return _E({}, {"job_id": "j1", "spec": {"bindings": {COMMIT_BINDING: C}, **spec}}, id="j" * 64)

    e = _E({"campaign": "c"})
    assert produced_at(e, [job({})]) == (C, None)  # type: ignore[arg-type]
    assert produced_at(e, [job({COLLECTOR_COMMIT: "f" * 40})]) == (C, None)  # type: ignore[arg-type]
    commit, why = produced_at(e, [job({COLLECTOR_COMMIT: None})])  # type: ignore[arg-type]
    assert commit is None and why is not None and why.startswith("job j1 (") and NO_COMMIT in why
    # renamed: not the collector's record (the collector writes the one name, COLLECTOR_COMMIT)
    assert produced_at(e, [job({"collector_comit": None})]) == (C, None)  # type: ignore[arg-type]
