"""A review PASS credits a result only where it names the commit the result was produced at — the code
commit its job's approved spec binds (``spec.bindings.commit``, which the collector records) or its subject
names (audit 79 f1: a PASS naming any commit at all credited a collector's results, which named none, and the
campaign was QUALIFIED). A result that names no commit is credited by no PASS (fail closed); one whose job
and subject name two commits cannot tell which code produced it."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from ledger.errors import SchemaError
from ledger.policy.acceptance import COMMIT_BINDING, produced_at
from tests.policy.test_fail_closed import POLICY_DIR, entry, qualified_entries, rejected, verdict_of

C = "0a5399ad09b49d5e7b4576daee698bd449b1b104"
OTHER = "80f1277784abe5c647fab6ccddea39dade2a267b"
REVIEWED = ("semantic", "benchmark")


def _bound(commit: Any = C, *, subject: Any = None) -> list[dict[str, Any]]:
    """The shared qualified campaign whose job binds ``commit`` (left out where None) and whose harness
    results' subjects name ``subject`` (none where None)."""
    es = qualified_entries()
    bindings = entry(es, "campaign-job")["payload"]["spec"]["bindings"]
    bindings.pop(COMMIT_BINDING, None)
    if commit is not None:
        bindings[COMMIT_BINDING] = commit
    for name in REVIEWED:
        e = entry(es, name)
        e.setdefault("subject", {}).pop("commit", None)
        if subject is not None:
            e["subject"]["commit"] = subject
        if not e["subject"]:
            del e["subject"]
    return es


def _passes(es: list[dict[str, Any]], commit: Any) -> list[dict[str, Any]]:
    for name in REVIEWED:
        entry(es, f"{name}-review")["payload"]["commit"] = commit
    return es


def _review_missing(v: dict[str, Any]) -> dict[str, str]:
    return {
        v["_names"][r["entry"]]: r["detail"]
        for r in v["rejected"]
        if r["entry"] in v["_names"] and r["rule"] == "review-missing"
    }


def test_review_pass_of_another_commit_credits_nothing_the_job_bound(tmp_path: Path) -> None:
    """The failure: PASSes naming a commit the job did not run at credited its results (QUALIFIED)."""
    v = verdict_of(tmp_path, _passes(_bound(C), OTHER))
    assert v["verdict"] == "INCONCLUSIVE"
    missing = _review_missing(v)
    assert set(missing) == {"semantic", "benchmark"}, v["rejected"]
    assert f"produced at commit {C}" in missing["semantic"] and f"names commit {OTHER}" in missing["semantic"]


@pytest.mark.parametrize("reviewed", [C, C[:12], C[:7]], ids=["full", "short-12", "short-7"])
def test_review_pass_of_the_bound_commit_credits(tmp_path: Path, reviewed: str) -> None:
    """The neighbour that must still pass: the bound commit, in full or as git abbreviates it."""
    v = verdict_of(tmp_path, _passes(_bound(C), reviewed))
    assert v["verdict"] == "QUALIFIED", v["rejected"]


@pytest.mark.parametrize("reviewed", [C[:6], f" {C} ", C.upper(), "HEAD"])
def test_review_pass_naming_no_commit_hash_is_refused_at_ingest(tmp_path: Path, reviewed: str) -> None:
    """A PASS whose commit is too short an abbreviation, or no lower-case hash, is no review at all."""
    with pytest.raises(SchemaError, match="commit"):
        verdict_of(tmp_path, _passes(_bound(C), reviewed))


def test_upper_case_bound_commit_is_the_same_commit(tmp_path: Path) -> None:
    """git's hashes are case-insensitive: a job binding the commit in upper case binds the same one."""
    v = verdict_of(tmp_path, _passes(_bound(C.upper()), C))
    assert v["verdict"] == "QUALIFIED", v["rejected"]


def test_result_with_no_commit_is_credited_by_no_pass(tmp_path: Path) -> None:
    """Fail closed: neither the job nor the subject names a commit — no PASS can show it reviewed the code."""
    v = verdict_of(tmp_path, _passes(_bound(None), C))
    assert v["verdict"] == "INCONCLUSIVE"
    missing = _review_missing(v)
    assert set(missing) == {"semantic", "benchmark"}
    assert "names no commit it was produced at" in missing["benchmark"]


@pytest.mark.parametrize("bad", ["", "  ", "main"], ids=["empty", "blank", "branch"])
def test_mistyped_bound_commit_credits_nothing(tmp_path: Path, bad: str) -> None:
    """A job binding a blank commit names none; one binding a branch name names another commit than any
    hash a PASS can name: neither is credited."""
    v = verdict_of(tmp_path, _passes(_bound(bad), C))
    assert v["verdict"] == "INCONCLUSIVE"
    assert set(_review_missing(v)) == {"semantic", "benchmark"}


@pytest.mark.parametrize("bad", [12345, ["x"]], ids=["number", "list"])
def test_bound_commit_not_a_text_is_refused_at_ingest(tmp_path: Path, bad: Any) -> None:
    with pytest.raises(SchemaError, match=r"spec\.bindings"):
        verdict_of(tmp_path, _passes(_bound(bad), C))


def test_subject_commit_without_a_bound_one_is_the_commit(tmp_path: Path) -> None:
    """An entry recorded by hand names its commit in its subject (docs/POLICY.md): credited by its PASS."""
    assert verdict_of(tmp_path, _passes(_bound(None, subject=C), C))["verdict"] == "QUALIFIED"
    v = verdict_of(tmp_path, _passes(_bound(None, subject=C), OTHER))
    assert v["verdict"] == "INCONCLUSIVE"


def test_subject_and_job_naming_two_commits_credit_nothing(tmp_path: Path) -> None:
    """Which code produced it cannot be told: no PASS credits it, whichever of the two it names."""
    for reviewed in (C, OTHER):
        v = verdict_of(tmp_path, _passes(_bound(C, subject=OTHER), reviewed))
        assert v["verdict"] == "INCONCLUSIVE"
        missing = _review_missing(v)
        assert set(missing) == {"semantic", "benchmark"}
        assert "cannot be told" in missing["semantic"]
    # the same commit spelled shorter in the subject is no contradiction
    assert verdict_of(tmp_path, _passes(_bound(C, subject=C[:10]), C))["verdict"] == "QUALIFIED"


def test_a_fail_then_a_pass_of_the_bound_commit_is_still_the_failed_commit(tmp_path: Path) -> None:
    """A FAIL naming no commit FAILed the bound commit: a later PASS of it lifts nothing (rule 3)."""
    es = _passes(_bound(C), C)
    es.append(
        {
            "name": "semantic-fail",
            "kind": "review",
            "key": "reviewer",
            "at": "2026-09-10T10:25:00Z",
            "refs": {"reviews": "semantic"},
            "payload": {"result": "FAIL"},
        }
    )
    es.append(
        {
            "name": "semantic-repass",
            "kind": "review",
            "key": "reviewer",
            "at": "2026-09-10T10:26:00Z",
            "refs": {"reviews": "semantic"},
            "payload": {"result": "PASS", "commit": C[:8]},
        }
    )
    v = verdict_of(tmp_path, es)
    assert rejected(v).get("semantic") == "review-fail", v["rejected"]


def test_without_repaired_commit_required_any_pass_credits(tmp_path: Path) -> None:
    """The policy that does not ask for the commit (repaired_commit_required = false) is unchanged."""
    policy_dir = tmp_path / "policies"
    shutil.copytree(POLICY_DIR, policy_dir, ignore=shutil.ignore_patterns("fixtures"))
    acc = policy_dir / "evidence-acceptance.toml"
    text = acc.read_text()
    assert "repaired_commit_required = true" in text
    acc.write_text(text.replace("repaired_commit_required = true", "repaired_commit_required = false"))
    v = verdict_of(tmp_path, _passes(_bound(None), OTHER), policy_dir=policy_dir)
    assert v["verdict"] == "QUALIFIED", v["rejected"]


class _E:
    def __init__(self, subject: dict[str, Any], payload: dict[str, Any] | None = None, id: str = "e" * 64):
        self.subject, self.payload, self.id = subject, payload or {}, id


def _job(commit: Any, job_id: str = "j1") -> Any:
    bindings: dict[str, Any] = {"engine": "vllm"}
    if commit is not None:
        bindings[COMMIT_BINDING] = commit
    return _E({}, {"job_id": job_id, "spec": {"bindings": bindings}}, id=job_id * 20)


def test_produced_at_reads_subject_and_jobs() -> None:
    e = _E({"campaign": "c"})
    assert produced_at(e, []) == (None, None)  # type: ignore[arg-type]
    assert produced_at(e, [_job(None)]) == (None, None)  # type: ignore[arg-type]
    assert produced_at(e, [_job(C)]) == (C, None)  # type: ignore[arg-type]
    assert produced_at(e, [_job(C.upper())]) == (C, None)  # type: ignore[arg-type]
    # a job that binds none says nothing; two that bind one commit, one of them abbreviated: the full one
    assert produced_at(e, [_job(None), _job(C[:9], "j2"), _job(C, "j3")]) == (C, None)  # type: ignore[arg-type]
    commit, why = produced_at(e, [_job(C), _job(OTHER, "j2")])  # type: ignore[arg-type]
    assert commit is None and why is not None and OTHER in why and C in why
    commit, why = produced_at(_E({"commit": OTHER}), [_job(C)])  # type: ignore[arg-type]
    assert commit is None and why is not None and "its subject" in why
    commit, why = produced_at(_E({"commit": 7}), [])  # type: ignore[arg-type]
    assert commit is None and why is not None and "names no commit" in why
