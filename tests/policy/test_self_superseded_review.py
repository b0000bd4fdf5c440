"""A key withdraws no failure of its own record — reviews included, whatever order supersessions come in.

- Regression: a reviewer FAILed a semantic result and then superseded their own FAIL: the FAIL was lifted
  and the campaign QUALIFIED. ``self-superseded`` covered evidence only; a review FAIL is a failure its
  reviewer records, so only another key's supersession (or a PASS on the repaired commit) lifts it.
- Regression: evidence superseded first by its own key and then by another key stayed ``self-superseded``
  (its failure standing) because the earliest supersession in force was the one read; another key's
  supersession withdraws it whatever the order.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.policy.test_fail_closed import entry, qualified_entries, rejected, verdict_of

KEYS = {
    "collector": ["collector"],
    "reviewer": ["reviewer"],
    "reviewer2": ["reviewer"],
    "operator": ["operator"],
    "operator2": ["operator"],
}
FAIL_COMMIT = "cafe" + "0" * 36


def _before_done(es: list[dict[str, Any]], *new: dict[str, Any]) -> None:
    i = es.index(entry(es, "campaign-done"))
    es[i:i] = list(new)


def _fail_review(at: str = "2026-09-10T10:46:00Z") -> dict[str, Any]:
    return {
        "name": "semantic-fail",
        "kind": "review",
        "key": "reviewer2",
        "at": at,
        "refs": {"reviews": "semantic"},
        "payload": {"result": "FAIL", "commit": FAIL_COMMIT, "summary": "scores not reproducible"},
    }


def _supersede(name: str, key: str, target: str, at: str) -> dict[str, Any]:
    return {
        "name": name,
        "kind": "supersession",
        "key": key,
        "at": at,
        "refs": {"supersedes": target},
        "payload": {"reason": "entered in error"},
    }


def test_a_review_fail_superseded_by_its_own_reviewer_stands(tmp_path: Path) -> None:
    es = qualified_entries()
    _before_done(es, _fail_review(), _supersede("own", "reviewer2", "semantic-fail", "2026-09-10T10:47:00Z"))
    v = verdict_of(tmp_path, es, keys=KEYS)
    assert rejected(v)["semantic"] == "review-fail"
    assert v["verdict"] != "QUALIFIED"


@pytest.mark.parametrize("by", ["reviewer", "operator"])
def test_a_review_fail_superseded_by_another_key_is_lifted(tmp_path: Path, by: str) -> None:
    es = qualified_entries()
    _before_done(es, _fail_review(), _supersede("other", by, "semantic-fail", "2026-09-10T10:47:00Z"))
    v = verdict_of(tmp_path, es, keys=KEYS)
    assert "semantic" not in rejected(v)
    assert v["verdict"] == "QUALIFIED"


@pytest.mark.parametrize("order", ["own-first", "other-first"])
def test_a_review_fail_superseded_by_its_own_and_another_key_is_lifted_in_either_order(
    tmp_path: Path, order: str
) -> None:
    es = qualified_entries()
    own = _supersede("own", "reviewer2", "semantic-fail", "2026-09-10T10:47:00Z")
    other = _supersede("other", "operator", "semantic-fail", "2026-09-10T10:47:00Z")
    _before_done(es, _fail_review(), *((own, other) if order == "own-first" else (other, own)))
    v = verdict_of(tmp_path, es, keys=KEYS)
    assert "semantic" not in rejected(v)
    assert v["verdict"] == "QUALIFIED"


def test_a_review_pass_superseded_by_its_own_reviewer_credits_nothing(tmp_path: Path) -> None:
    """The neighbour: a PASS withdrawn by its own reviewer is withdrawn (it only ever gave credit)."""
    es = qualified_entries()
    _before_done(es, _supersede("own", "reviewer", "semantic-review", "2026-09-10T10:47:00Z"))
    v = verdict_of(tmp_path, es, keys=KEYS)
    assert rejected(v)["semantic"] == "review-missing"
    assert v["verdict"] == "INCONCLUSIVE"


@pytest.mark.parametrize("order", ["own-first", "other-first"])
def test_a_failure_superseded_by_its_own_key_and_another_is_withdrawn_in_either_order(
    tmp_path: Path, order: str
) -> None:
    es = qualified_entries()
    probe = copy.deepcopy(entry(es, "health"))
    probe["payload"].update(ok=False, http_status=503)
    probe["name"], probe["key"] = "by-hand-503", "operator"
    es.insert(es.index(entry(es, "health")) + 1, probe)
    own = _supersede("own", "operator", "by-hand-503", "2026-09-10T10:46:00Z")
    other = _supersede("other", "operator2", "by-hand-503", "2026-09-10T10:46:00Z")
    _before_done(es, *((own, other) if order == "own-first" else (other, own)))
    v = verdict_of(tmp_path, es, keys=KEYS)
    assert rejected(v)["by-hand-503"] == "superseded"
    assert v["verdict"] == "QUALIFIED"
