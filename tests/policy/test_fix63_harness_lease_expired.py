"""Issue 11, audit 50 f1: a harness run its own lease cut (outcome "lease-expired") was recorded `failed` and
counted against the engine by `[acceptance.against]` → NOT QUALIFIED — SEMANTIC QUALITY / PERFORMANCE. The
lease is the harness's time bound, not the engine's failure: `harness-lease-expired` withholds credit, so
the gate is INCONCLUSIVE naming the lease — unless what the engine did before the cut already decides the
gate (failed items that leave the threshold out of reach, engine errors beyond the error-rate bound)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from ledger.policy.acceptance import cut_decided
from ledger.policy.conditions import compile_condition
from tests.policy.test_fail_closed import (
    counted_against,
    entry,
    gates,
    qualified_entries,
    rejected,
    verdict_of,
)

RULE = "harness-lease-expired"
POLICY = Path(__file__).resolve().parents[2] / "policies" / "backend-qualification.toml"


def _semantic_cut(es: list[dict[str, Any]], *, asked: int, failed: int) -> dict[str, Any]:
    """The shipped semantic result, as the harness records a run whose lease cut it after ``asked`` items."""
    p = entry(es, "semantic")["payload"]
    p["status"] = "failed"
    p["counts"] = {"items": 12, "asked": asked, "passed": asked - failed, "failed": failed, "errors": 0}
    p["bounds"]["outcome"] = "lease-expired"
    p["bounds"]["aggregate"] = False
    p["figures"] = {"score": None}
    p["reason"] = "no aggregate result: the lease of 1 s expired during item opposite-hot"
    return p


def _benchmark_cut(es: list[dict[str, Any]], *, errors: int, cut: int | None) -> dict[str, Any]:
    """The shipped benchmark, as the harness records a run whose lease cut ``cut`` requests in flight at c4
    after the engine failed ``errors - cut`` (HTTP 400) at c1 — and its per-request record, from which the
    policy reads counts.cut back (audit 88: a cut claimed with no record is excused nothing)."""
    p = entry(es, "benchmark")["payload"]
    p["status"] = "failed"
    p["counts"] = {k: v for k, v in p["counts"].items() if not k.startswith("completed@c")}
    p["counts"].update(issued=100, completed=100 - errors, errors=errors, **{"completed@c1": 100 - errors})
    answered = {"level": 1, "repetition": 0, "error": None, "fault": False, "http_status": 200}
    failed = {**answered, "error": "HTTP 400: bad request", "http_status": 400}
    stopped = {
        **answered,
        "level": 4,
        "error": "stopped: the lease of 900 s expired during c4",
        "http_status": None,
    }
    records = [answered] * (100 - errors) + [failed] * (errors - (cut or 0)) + [stopped] * (cut or 0)
    entry(es, "benchmark")["artifacts"] = [
        {"name": "benchmark-requests.jsonl", "text": "".join(json.dumps(r) + "\n" for r in records)}
    ]
    if cut is not None:
        p["counts"]["cut"] = cut
    p["bounds"].update(outcome="lease-expired", aggregate=False, valid=False)
    p["figures"] = {}
    p["reason"] = "no aggregate result: the lease of 900 s expired during c4"
    return p


def test_semantic_run_cut_by_its_own_lease_is_inconclusive_not_semantic_quality(tmp_path: Path) -> None:
    es = qualified_entries()
    _semantic_cut(es, asked=3, failed=0)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert rejected(v)["semantic"] == RULE
    assert "semantic" not in counted_against(v)
    [g] = [g for g in v["gates"] if g["name"] == "semantic"]
    assert g["status"] == "missing" and RULE in g["reason"]
    [r] = [r for r in v["rejected"] if r["rule"] == RULE]
    assert "longer lease" in r["detail"] and "not the engine's request timeout" in r["detail"]


def test_benchmark_run_cut_by_its_own_lease_is_inconclusive_not_performance(tmp_path: Path) -> None:
    es = qualified_entries()
    _benchmark_cut(es, errors=4, cut=4)  # every error is a request the lease cut
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert rejected(v)["benchmark"] == RULE
    assert "benchmark" not in counted_against(v)
    assert gates(v)["benchmark"] == "missing"


def test_semantic_wrong_answers_before_the_cut_that_already_miss_the_threshold_still_fail(
    tmp_path: Path,
) -> None:
    """Fail closed: a wrong answer already seen (semantic_min_score 1.0: any) is evidence against the engine;
    the lease cut does not hide it."""
    es = qualified_entries()
    _semantic_cut(es, asked=3, failed=1)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "NOT QUALIFIED — SEMANTIC QUALITY", v["gates"]
    assert counted_against(v)["semantic"] == RULE


def test_benchmark_engine_errors_before_the_cut_still_fail(tmp_path: Path) -> None:
    es = qualified_entries()
    _benchmark_cut(es, errors=5, cut=4)  # one request the engine itself failed (error_rate bound 0)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "NOT QUALIFIED — PERFORMANCE", v["gates"]
    assert counted_against(v)["benchmark"] == RULE


def _holds(against: Any, payload: dict[str, Any], params: dict[str, Any]) -> bool:
    # the rule reads the one test every cut outcome is judged by (fix 166: e.derived.cut_decided)
    shown = {**payload, "bounds": {**payload.get("bounds", {}), "outcome": "lease-expired"}}
    derived = {"cut_decided": cut_decided(shown, params)}
    return bool(against.holds({"e": {"payload": payload, "derived": derived}, "params": params}))


@pytest.fixture(scope="module")
def rule() -> dict[str, Any]:
    doc = tomllib.loads(POLICY.read_text())
    [r] = [r for r in doc["rules"] if r["name"] == RULE]
    names = [r["name"] for r in doc["rules"]]
    # before the spec rules (whose `against` is only an engine fault), right after the operator's stop
    assert names.index(RULE) == names.index("operator-stopped") + 1
    assert names.index(RULE) < names.index("spec-mismatch")
    return dict(r, params=doc["params"])


@pytest.mark.parametrize(
    ("bounds", "fires"),
    [
        ({"outcome": "lease-expired"}, True),
        ({}, False),  # dropped
        ({"Outcome": "lease-expired"}, False),  # renamed
        ({"outcome": "lease_expired"}, False),  # misspelt
        ({"outcome": 1}, False),  # mistyped
        (
            {"outcome": "fault"},
            False,
        ),  # an engine fault (a hang when the lease cut it) is judged, not excused
    ],
)
def test_lease_expired_rule_fires_only_on_the_recorded_outcome(
    rule: dict[str, Any], bounds: dict[str, Any], fires: bool
) -> None:
    cond = compile_condition(rule["when"], "backend-qualification.toml")
    e = {"payload": {"gate": "semantic", "bounds": bounds}, "derived": {"artifact_problem": None}}
    assert cond.holds({"e": e}) is fires
    # a run whose stored record contradicts its counts (audit 88: a cut it does not show) is never excused
    # here: harness-artifact-mismatch judges it, its failure counted against the engine
    e["derived"] = {"artifact_problem": "counts.cut 4, its benchmark-requests.jsonl (100 requests) shows 3"}
    assert cond.holds({"e": e}) is False


@pytest.mark.parametrize(
    ("counts", "min_score", "against"),
    [
        ({"items": 12, "failed": 0}, 1.0, False),
        ({"items": 12, "failed": 1}, 1.0, True),
        ({"items": 12, "failed": 1}, 0.9, False),  # 11 of 12 could still pass: nothing decided
        ({"items": 12, "failed": 2}, 0.9, True),  # at most 10 of 12 < 0.9
        ({"items": 12}, 1.0, False),  # failed dropped: nothing decided (credit is withheld anyway)
        ({"items": 12, "Failed": 3}, 1.0, False),  # renamed
    ],
)
def test_lease_expired_semantic_counts_against_only_where_the_threshold_is_out_of_reach(
    rule: dict[str, Any], counts: dict[str, Any], min_score: float, against: bool
) -> None:
    cond = compile_condition(rule["against"], "backend-qualification.toml")
    params = dict(rule["params"], semantic_min_score=min_score)
    assert _holds(cond, {"gate": "semantic", "counts": counts, "bounds": {}}, params) is against


@pytest.mark.parametrize(
    ("counts", "against"),
    [
        ({"errors": 4, "cut": 4}, False),  # every error cut by the lease
        ({"errors": 5, "cut": 4}, True),  # one the engine failed (error_rate bound 0)
        ({"errors": 5}, False),  # cut not recorded: the engine's errors cannot be told from the cut
        ({"errors": 40, "cut": 33}, True),  # more cut than the largest level (32) could have in flight
        ({"errors": 4, "Cut": 4}, False),  # renamed
    ],
)
def test_lease_expired_benchmark_counts_against_only_the_engines_own_errors(
    rule: dict[str, Any], counts: dict[str, Any], against: bool
) -> None:
    cond = compile_condition(rule["against"], "backend-qualification.toml")
    payload = {"gate": "benchmark", "counts": counts, "bounds": {"concurrency": [1, 4, 32]}}
    assert _holds(cond, payload, rule["params"]) is against
