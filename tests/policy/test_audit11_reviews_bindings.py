"""Reviews, acceptances and bindings that passed what they should not (independent audit 11).

Regressions, each judged QUALIFIED:

- F2: an operator overruled another key's rejection of their own supersession by accepting it
  themselves: "the latest acceptance in force decides" let a self-acceptance (or one by a key
  ``key.rotate`` links to the signer) cancel the rejection, and the withdrawn crash was superseded. An
  acceptance by the accepted entry's own signer now decides nothing in its favour
  (``acceptance.deciding_acceptance``; ``acceptance.taken_out`` is the same decision for the routing gate).
- F3: a review FAIL was dropped by a FAIL-review of it (by its own reviewer, or another), and a re-PASS of
  the failed commit then lifted nothing that was left. A review of a review discredits a PASS only.
- F4: a binding key of the job's approved spec misspelled with whitespace or a ``.`` (``"model_revision "``,
  ``model.revision``) was dropped as an unknown key: the campaign qualified on a revision nobody approved.
- F5: the repaired-commit rule compared commits as texts: a FAIL of the abbreviation ``cafe000`` was lifted
  by a PASS of the full hash, and a FAIL naming no commit by a PASS of the result's own commit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ledger.entries import parse_time
from ledger.policy.acceptance import same_commit, taken_out
from ledger.policy.fixtures import _Builder
from ledger.policy.snapshot import load_snapshot
from ledger.service import Ledger
from tests.policy.test_fail_closed import (
    POLICY_DIR,
    SUBJECT,
    entry,
    gates,
    qualified_entries,
    rejected,
    verdict_of,
)

QUALIFIED = "QUALIFIED"
INCONCLUSIVE = "INCONCLUSIVE"
RUNTIME = "NOT QUALIFIED — RUNTIME RELIABILITY"
PREREQUISITES = "NOT QUALIFIED — PREREQUISITES"
C1 = "cafe" + "0" * 36  # the commit the shared fixture's reviews PASS
C2 = "beef" + "0" * 36
KEYS = {
    "collector": ["collector"],
    "reviewer": ["reviewer"],
    "reviewer2": ["reviewer"],
    "operator": ["operator"],
    "operator2": ["operator"],
    "operator3": ["operator"],
    "operator-new": ["operator"],
}


def _rotate(old: str, new: str, at: str) -> dict[str, Any]:
    return {
        "kind": "key.rotate",
        "at": at,
        "payload": {"old_key": old, "new_key": new, "effective_at": at, "reason": "routine rotation"},
    }


def _acceptance(name: str, key: str, target: str, decision: str, at: str) -> dict[str, Any]:
    return {
        "name": name,
        "kind": "acceptance",
        "key": key,
        "at": at,
        "refs": {"subject": target},
        "payload": {"decision": decision, "reason": f"{key} says {decision}"},
    }


# --- F2: a self-acceptance does not overrule another key's rejection ------------------------------------


def _crash_superseded(es: list[dict[str, Any]]) -> None:
    """A launch that crashed after readiness, superseded by ``operator``."""
    es.append(
        {
            "name": "crash",
            "kind": "engine.launch",
            "key": "collector",
            "at": "2026-09-10T10:03:00Z",
            "refs": {"job": "campaign-job"},
            "payload": {
                "engine": "vllm",
                "command": ["vllm", "serve"],
                "started_at": "2026-09-10T10:02:30Z",
                "ready": True,
                "exit_code": 1,
                "failure_signature": "engine-dead",
                "bindings": dict(entry(es, "launch")["payload"]["bindings"]),
            },
        }
    )
    es.append(
        {
            "name": "sup",
            "kind": "supersession",
            "key": "operator",
            "at": "2026-09-10T10:05:00Z",
            "refs": {"supersedes": "crash"},
            "payload": {"reason": "not a real crash"},
        }
    )


def test_a_self_acceptance_does_not_overrule_another_keys_rejection_of_a_supersession(tmp_path: Path) -> None:
    es = qualified_entries()
    _crash_superseded(es)
    es.append(_acceptance("rej", "operator2", "sup", "rejected", "2026-09-10T10:06:00Z"))
    es.append(_acceptance("selfacc", "operator", "sup", "accepted", "2026-09-10T10:07:00Z"))
    v = verdict_of(tmp_path, es, keys=KEYS)
    assert v["verdict"] == RUNTIME
    assert gates(v)["runtime-stability"] == "failed"
    assert rejected(v).get("sup") == "rejected-by-acceptance"
    assert "crash" not in rejected(v)


def test_the_rejection_stands_without_the_self_acceptance(tmp_path: Path) -> None:
    """The control: the rejection alone already restored the crash."""
    es = qualified_entries()
    _crash_superseded(es)
    es.append(_acceptance("rej", "operator2", "sup", "rejected", "2026-09-10T10:06:00Z"))
    assert verdict_of(tmp_path, es, keys=KEYS)["verdict"] == RUNTIME


def test_a_self_acceptance_logged_before_another_keys_rejection_does_not_overrule_it(tmp_path: Path) -> None:
    es = qualified_entries()
    _crash_superseded(es)
    es.append(_acceptance("selfacc", "operator", "sup", "accepted", "2026-09-10T10:06:00Z"))
    es.append(_acceptance("rej", "operator2", "sup", "rejected", "2026-09-10T10:07:00Z"))
    assert verdict_of(tmp_path, es, keys=KEYS)["verdict"] == RUNTIME


def test_an_acceptance_by_the_supersessions_rotated_key_does_not_overrule_a_rejection(tmp_path: Path) -> None:
    es = qualified_entries()
    entry(es, "benchmark-acceptance")["key"] = "operator3"  # the rotation retires the operator key
    _crash_superseded(es)
    es.append(_acceptance("rej", "operator2", "sup", "rejected", "2026-09-10T10:06:00Z"))
    es.append(_rotate("operator", "operator-new", "2026-09-10T10:06:30Z"))
    es.append(_acceptance("selfacc", "operator-new", "sup", "accepted", "2026-09-10T10:07:00Z"))
    v = verdict_of(tmp_path, es, keys=KEYS)
    assert v["verdict"] == RUNTIME
    assert rejected(v).get("sup") == "rejected-by-acceptance"


def test_another_keys_later_acceptance_still_decides_over_a_rejection(tmp_path: Path) -> None:
    """The neighbour that stays: of independent acceptances, the latest in force decides."""
    es = qualified_entries()
    _crash_superseded(es)
    es.append(_acceptance("rej", "operator2", "sup", "rejected", "2026-09-10T10:06:00Z"))
    es.append(_acceptance("acc", "operator3", "sup", "accepted", "2026-09-10T10:07:00Z"))
    v = verdict_of(tmp_path, es, keys=KEYS)
    assert v["verdict"] == QUALIFIED
    assert rejected(v)["crash"] == "superseded"


def test_a_reviewer_accepting_their_own_rejected_review_pass_does_not_restore_it(tmp_path: Path) -> None:
    keys = {**KEYS, "reviewer": ["reviewer", "operator"]}
    es = qualified_entries()
    es.append(_acceptance("rej", "operator2", "semantic-review", "rejected", "2026-09-10T10:21:00Z"))
    es.append(_acceptance("selfacc", "reviewer", "semantic-review", "accepted", "2026-09-10T10:22:00Z"))
    v = verdict_of(tmp_path, es, keys=keys)
    assert rejected(v)["semantic-review"] == "rejected-by-acceptance"
    assert rejected(v)["semantic"] == "review-missing"
    assert v["verdict"] == INCONCLUSIVE


def test_an_evidence_signers_own_acceptance_does_not_overrule_a_rejection_of_it(tmp_path: Path) -> None:
    es = qualified_entries()
    entry(es, "benchmark")["key"] = "operator"
    entry(es, "benchmark-acceptance")["key"] = "operator2"
    entry(es, "benchmark-acceptance")["payload"] = {"decision": "rejected", "reason": "wrong corpus"}
    es.append(_acceptance("selfacc", "operator", "benchmark", "accepted", "2026-09-10T10:46:00Z"))
    v = verdict_of(tmp_path, es, keys=KEYS)
    assert rejected(v)["benchmark"] == "rejected-by-acceptance"
    assert v["verdict"] != QUALIFIED


def test_an_evidence_signers_own_acceptance_alone_is_named_as_not_independent(tmp_path: Path) -> None:
    es = qualified_entries()
    entry(es, "benchmark")["key"] = "operator"
    v = verdict_of(tmp_path, es, keys=KEYS)
    r = next(r for r in v["rejected"] if v["_names"].get(r["entry"]) == "benchmark")
    assert r["rule"] == "acceptance-missing"
    assert "signed by the key that signed it" in r["detail"]
    assert v["verdict"] == INCONCLUSIVE


def _entries_by_name(tmp_path: Path, es: list[dict[str, Any]]) -> tuple[dict[str, Any], Any]:
    """Build ``es`` through the real ingest; the snapshot's entries by fixture name, and ``identity``."""
    ledger = Ledger.init(tmp_path / "home", genesis_at=parse_time("2026-09-10T09:00:00Z"))
    try:
        spec = {
            "start": "2026-09-10T09:00:00Z",
            "keys": KEYS,
            "defaults": {"subject": SUBJECT},
            "entries": es,
        }
        b = _Builder(ledger, spec, POLICY_DIR)
        b.enrol_keys()
        b.add_all(es)
        snap = load_snapshot(ledger, dict(SUBJECT))
        ids = {str(e.entry_id): n for n, e in b.names.items()}
        return {ids[e.id]: e for e in snap.entries if e.id in ids}, snap.keyring.identity
    finally:
        ledger.close()


@pytest.mark.parametrize(
    ("acts", "crash", "sup"),
    [
        ((), ("superseded", "sup"), None),
        (("rej",), None, ("rejected-by-acceptance", "rej")),
        (("rej", "selfacc"), None, ("rejected-by-acceptance", "rej")),
        (("rej", "acc"), ("superseded", "sup"), None),
    ],
)
def test_taken_out_is_the_filters_decision_for_the_routing_gate(
    tmp_path: Path,
    acts: tuple[str, ...],
    crash: tuple[str, str] | None,
    sup: tuple[str, str] | None,
) -> None:
    es = qualified_entries()
    _crash_superseded(es)
    more = {
        "rej": _acceptance("rej", "operator2", "sup", "rejected", "2026-09-10T10:06:00Z"),
        "selfacc": _acceptance("selfacc", "operator", "sup", "accepted", "2026-09-10T10:07:00Z"),
        "acc": _acceptance("acc", "operator3", "sup", "accepted", "2026-09-10T10:07:00Z"),
    }
    es.extend(more[a] for a in acts)
    by, who = _entries_by_name(tmp_path, es)
    acting = [by[n] for n in ("sup", *acts)]
    names = {e.id: n for n, e in by.items()}

    def named(out: tuple[str, Any] | None) -> tuple[str, str] | None:
        return None if out is None else (str(out[0]), names[out[1].id])

    assert named(taken_out(by["crash"], acting, who)) == crash
    assert named(taken_out(by["sup"], [by[a] for a in acts], who)) == sup


# --- F3: a FAIL-review of a FAIL withdraws nothing --------------------------------------------------------


def _failed_at_c1(es: list[dict[str, Any]], of_fail: dict[str, Any] | None) -> None:
    """The semantic result at C1, FAILed by reviewer2 before the shared fixture's PASS of C1 (10:20)."""
    entry(es, "semantic")["subject"] = {"commit": C1}
    es.append(
        {
            "name": "fail",
            "kind": "review",
            "key": "reviewer2",
            "at": "2026-09-10T10:15:00Z",
            "refs": {"reviews": "semantic"},
            "payload": {"result": "FAIL", "commit": C1, "summary": "scores not reproducible"},
        }
    )
    if of_fail is not None:
        es.append(
            {
                "name": "review-of-fail",
                "at": "2026-09-10T10:16:00Z",
                "kind": "review",
                "refs": {"reviews": "fail"},
                **of_fail,
            }
        )


@pytest.mark.parametrize("by", ["reviewer2", "reviewer"])
def test_a_review_fail_failed_by_a_review_still_blocks_a_re_pass_of_the_failed_commit(
    tmp_path: Path, by: str
) -> None:
    es = qualified_entries()
    _failed_at_c1(es, {"key": by, "payload": {"result": "FAIL", "commit": C1}})
    v = verdict_of(tmp_path, es, keys=KEYS)
    assert rejected(v)["semantic"] == "review-fail"
    assert v["verdict"] == INCONCLUSIVE


def test_a_review_fail_passed_by_a_review_still_blocks_a_re_pass_of_the_failed_commit(tmp_path: Path) -> None:
    es = qualified_entries()
    _failed_at_c1(es, {"key": "reviewer", "payload": {"result": "PASS", "commit": C1}})
    v = verdict_of(tmp_path, es, keys=KEYS)
    assert rejected(v)["semantic"] == "review-fail"
    assert v["verdict"] == INCONCLUSIVE


def test_a_re_pass_of_the_failed_commit_lifts_nothing_without_a_review_of_the_fail(tmp_path: Path) -> None:
    """The control."""
    es = qualified_entries()
    _failed_at_c1(es, None)
    assert rejected(verdict_of(tmp_path, es, keys=KEYS))["semantic"] == "review-fail"


def test_a_review_fail_of_a_review_pass_still_discredits_the_pass(tmp_path: Path) -> None:
    """The neighbour that stays: a FAIL of a PASS takes the PASS's credit away."""
    es = qualified_entries()
    es.append(
        {
            "name": "review-of-pass",
            "kind": "review",
            "key": "reviewer2",
            "at": "2026-09-10T10:21:00Z",
            "refs": {"reviews": "semantic-review"},
            "payload": {"result": "FAIL", "commit": C1},
        }
    )
    v = verdict_of(tmp_path, es, keys=KEYS)
    assert rejected(v)["semantic"] == "review-missing"
    assert v["verdict"] == INCONCLUSIVE


def test_a_review_fail_superseded_by_another_key_is_still_lifted(tmp_path: Path) -> None:
    """The one way to withdraw a failure still works after a FAIL of the FAIL."""
    es = qualified_entries()
    _failed_at_c1(es, {"key": "reviewer", "payload": {"result": "FAIL", "commit": C1}})
    es.append(
        {
            "name": "withdraw",
            "kind": "supersession",
            "key": "operator",
            "at": "2026-09-10T10:17:00Z",
            "refs": {"supersedes": "fail"},
            "payload": {"reason": "reviewed the wrong result"},
        }
    )
    assert verdict_of(tmp_path, es, keys=KEYS)["verdict"] == QUALIFIED


# --- F4: a misspelled binding key of the approved spec is not dropped ----------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "model_revision ",
        " model_revision",
        "model revision",
        "model.revision",
        "Model.Revision",
        "model\trevision",
        "MODEL-REVISION",
        "Model_Revision",
    ],
)
def test_a_spec_binding_key_misspelled_with_whitespace_or_a_dot_is_not_dropped(
    tmp_path: Path, key: str
) -> None:
    es = qualified_entries()
    b = entry(es, "campaign-job")["payload"]["spec"]["bindings"]
    del b["model_revision"]
    b[key] = "2" * 40
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == PREREQUISITES
    g = next(g for g in v["gates"] if g["name"] == "model-pinned")
    assert g["status"] == "failed"
    assert repr(key) in g["reason"]


@pytest.mark.parametrize("value", ["0.31.0", "0.32.0"])
def test_a_misspelled_engine_version_binding_credits_no_launch(tmp_path: Path, value: str) -> None:
    """Whatever value it binds (the launches ran 0.32.0): what the approved spec binds cannot be told."""
    es = qualified_entries()
    b = entry(es, "campaign-job")["payload"]["spec"]["bindings"]
    del b["engine_version"]
    b["engine_version "] = value
    v = verdict_of(tmp_path, es)
    assert v["verdict"] != QUALIFIED
    r = next(r for r in v["rejected"] if v["_names"].get(r["entry"]) == "launch")
    assert r["rule"] == "bindings-mismatch"
    assert "'engine_version '" in r["detail"]


def test_a_spec_key_like_no_binding_key_is_recorded_not_compared(tmp_path: Path) -> None:
    es = qualified_entries()
    entry(es, "campaign-job")["payload"]["spec"]["bindings"]["notes.extra key"] = "anything"
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == QUALIFIED
    assert v["manifest"]["bindings"]["notes.extra key"] == "anything"


# --- F5: commits compare as git compares them -----------------------------------------------------------


def _semantic_failed(es: list[dict[str, Any]], fail_commit: str | None, subject_commit: str = C1) -> None:
    entry(es, "semantic")["subject"] = {"commit": subject_commit}
    payload: dict[str, Any] = {"result": "FAIL", "summary": "wrong"}
    if fail_commit is not None:
        payload["commit"] = fail_commit
    es.append(
        {
            "name": "fail",
            "kind": "review",
            "key": "reviewer2",
            "at": "2026-09-10T10:15:00Z",
            "refs": {"reviews": "semantic"},
            "payload": payload,
        }
    )


@pytest.mark.parametrize("fail_commit", ["cafe000", "cafe0000000", C1[:39]])
def test_a_fail_of_an_abbreviated_commit_is_not_lifted_by_a_pass_of_the_full_hash(
    tmp_path: Path, fail_commit: str
) -> None:
    es = qualified_entries()
    _semantic_failed(es, fail_commit)
    v = verdict_of(tmp_path, es, keys=KEYS)
    r = next(r for r in v["rejected"] if v["_names"].get(r["entry"]) == "semantic")
    assert r["rule"] == "review-fail"
    assert f"FAILed it as {fail_commit}" in r["detail"]
    assert v["verdict"] == INCONCLUSIVE


def test_a_fail_of_the_full_hash_is_not_lifted_by_a_pass_of_its_abbreviation(tmp_path: Path) -> None:
    es = qualified_entries()
    _semantic_failed(es, C1)
    entry(es, "semantic-review")["payload"]["commit"] = "cafe000"
    v = verdict_of(tmp_path, es, keys=KEYS)
    assert rejected(v)["semantic"] == "review-fail"
    assert v["verdict"] == INCONCLUSIVE


# (a subject value with white space around it is refused at ingest since fix 71)
@pytest.mark.parametrize("subject_commit", [C1, C1.upper()])
def test_a_fail_naming_no_commit_is_not_lifted_by_a_pass_of_the_results_own_commit(
    tmp_path: Path, subject_commit: str
) -> None:
    es = qualified_entries()
    _semantic_failed(es, None, subject_commit)
    v = verdict_of(tmp_path, es, keys=KEYS)
    r = next(r for r in v["rejected"] if v["_names"].get(r["entry"]) == "semantic")
    assert r["rule"] == "review-fail"
    assert "names no commit: it FAILed the commit this evidence was produced at" in r["detail"]
    assert v["verdict"] == INCONCLUSIVE


def test_a_fail_is_not_lifted_when_the_results_abbreviated_commit_may_be_the_failed_one(
    tmp_path: Path,
) -> None:
    """Found by an audit of the commit rule: the result's subject gives its commit abbreviated (cafe000),
    a FAIL names the full cafe000…0 and a later PASS the full cafe000…1 — both prefixed by cafe000, so the
    PASS was "of the result's commit" and not "of the failed one", and the FAIL was lifted. Whether the
    result was produced at the failed commit cannot be told: the FAIL stands."""
    other = "cafe000" + "1" * 33
    es = qualified_entries()
    _semantic_failed(es, C1, subject_commit="cafe000")
    entry(es, "semantic-review")["payload"]["commit"] = other
    v = verdict_of(tmp_path, es, keys=KEYS)
    r = next(r for r in v["rejected"] if v["_names"].get(r["entry"]) == "semantic")
    assert r["rule"] == "review-fail"
    assert "which may be the commit review" in r["detail"] and "cannot be told" in r["detail"], r["detail"]
    assert v["verdict"] == INCONCLUSIVE
    # the neighbour that stays: the result names its full commit, another than the failed one
    es = qualified_entries()
    _semantic_failed(es, C1, subject_commit=other)
    entry(es, "semantic-review")["payload"]["commit"] = other
    assert verdict_of(tmp_path, es, keys=KEYS)["verdict"] == QUALIFIED


@pytest.mark.parametrize("fail_commit", [C2, "beef000", "cafe0001"])
def test_a_fail_of_another_commit_is_still_lifted_by_a_pass_of_the_results_commit(
    tmp_path: Path, fail_commit: str
) -> None:
    """The neighbour that stays: the FAIL reviewed another commit than the one this result was produced at
    (``cafe0001`` abbreviates no hash that ``cafe0000…`` is)."""
    es = qualified_entries()
    _semantic_failed(es, fail_commit)
    v = verdict_of(tmp_path, es, keys=KEYS)
    assert "semantic" not in rejected(v)
    assert v["verdict"] == QUALIFIED


@pytest.mark.parametrize("pass_commit", ["cafe000", C1])
@pytest.mark.parametrize("subject_commit", [C1, C1.upper()])
def test_a_pass_names_the_results_commit_as_git_does(
    tmp_path: Path, pass_commit: str, subject_commit: str
) -> None:
    es = qualified_entries()
    entry(es, "semantic")["subject"] = {"commit": subject_commit}
    entry(es, "semantic-review")["payload"]["commit"] = pass_commit
    assert verdict_of(tmp_path, es, keys=KEYS)["verdict"] == QUALIFIED


def test_a_pass_of_another_commit_still_credits_nothing(tmp_path: Path) -> None:
    es = qualified_entries()
    entry(es, "semantic")["subject"] = {"commit": C1}
    entry(es, "semantic-review")["payload"]["commit"] = "cafe0001"
    v = verdict_of(tmp_path, es, keys=KEYS)
    assert rejected(v)["semantic"] == "review-missing"


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        (C1, C1.upper(), True),
        (C1, "cafe000", True),
        ("cafe000", C1, True),
        (C1, "cafe00", False),  # too short an abbreviation names no commit for certain
        (C1, "cafe0001", False),
        (C1, C2, False),
        (C1, None, False),
        (None, None, False),
        ("", "", False),
        ("main", "main", True),
        ("main", C1, False),
    ],
)
def test_same_commit(a: Any, b: Any, same: bool) -> None:
    assert same_commit(a, b) is same
    assert same_commit(b, a) is same
