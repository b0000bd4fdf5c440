"""A failed ``gate.result`` that names no gate of the policy keeps the verdict from QUALIFIED.

``gate.result.gate`` is the name of the gate a harness (or the collector) judged. A result whose name no
gate of the policy has — a misspelling, another case, another policy's gate — is selected by no gate, so
before the failure it records was judged by nothing and the campaign could be QUALIFIED beside it. Now the
verdict is INCONCLUSIVE, naming it under ``unjudged``; a verdict that already failed stands, and a
supersession with its reason withdraws the result.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from ledger.errors import SchemaError
from tests.policy.test_fail_closed import entry, qualified_entries, verdict_of
from tests.policy.test_withheld_failures import RUNTIME, _crash

QUALIFIED = "QUALIFIED"
INCONCLUSIVE = "INCONCLUSIVE"


def _result_for(es: list[Any], gate: Any, status: str = "failed", drop: str = "") -> dict[str, Any]:
    """A copy of the campaign's benchmark result, for gate ``gate``, with ``status``; logged before the job
    ends (a harness of no gate the policy reviews: nothing asks for its review)."""
    run = copy.deepcopy(entry(es, "benchmark"))
    run["name"], run["at"] = "misnamed", "2026-09-10T10:40:00Z"
    run["payload"].update(gate=gate, status=status)
    if drop:
        run["payload"].pop(drop)
    es.insert(es.index(entry(es, "campaign-done")), run)
    return run


def _unjudged(v: dict[str, Any]) -> dict[str, str]:
    return {v["_names"][u["entry"]]: u["gate"] for u in v["unjudged"]}


@pytest.mark.parametrize("gate", ["benchmrk", "Benchmark", "benchmark ", "latency", "semantic-quality"])
def test_a_failed_result_of_a_misspelled_gate_makes_the_verdict_inconclusive(
    tmp_path: Path, gate: Any
) -> None:
    """Regression: a failed result for gate 'benchmrk' was judged by no gate and the verdict was QUALIFIED."""
    es = qualified_entries()
    _result_for(es, gate)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == INCONCLUSIVE
    assert _unjudged(v) == {"misnamed": gate}
    (u,) = v["unjudged"]
    assert "no gate judges" in u["detail"] and repr(gate) in u["detail"]
    assert all(g["status"] == "passed" for g in v["gates"])  # the ladder itself passed


def test_a_passed_result_of_a_misspelled_gate_credits_nothing_and_hides_nothing(tmp_path: Path) -> None:
    es = qualified_entries()
    _result_for(es, "benchmrk", status="passed")
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == QUALIFIED
    assert v["unjudged"] == []


@pytest.mark.parametrize("status", ["not_run", "not_authorized"])
def test_a_result_that_judged_nothing_is_not_a_failure(tmp_path: Path, status: str) -> None:
    es = qualified_entries()
    _result_for(es, "benchmrk", status=status)
    assert verdict_of(tmp_path, es)["verdict"] == QUALIFIED


def test_a_failure_found_by_the_ladder_stands_beside_an_unjudged_one(tmp_path: Path) -> None:
    es = qualified_entries()
    _crash(es)
    _result_for(es, "benchmrk")
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == RUNTIME
    assert _unjudged(v) == {"misnamed": "benchmrk"}


def test_a_superseded_unjudged_failure_is_withdrawn(tmp_path: Path) -> None:
    es = qualified_entries()
    _result_for(es, "benchmrk")
    es.insert(
        es.index(entry(es, "campaign-done")),
        {
            "name": "withdraw",
            "kind": "supersession",
            "key": "operator",
            "at": "2026-09-10T10:41:00Z",
            "refs": {"supersedes": "misnamed"},
            "payload": {"reason": "recorded under a misspelled gate name; the benchmark result stands"},
        },
    )
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == QUALIFIED
    assert v["unjudged"] == []


@pytest.mark.parametrize("gate", [7, None, ["benchmark"], ""])
def test_a_result_whose_gate_is_not_a_name_is_refused_at_ingest(tmp_path: Path, gate: Any) -> None:
    es = qualified_entries()
    _result_for(es, gate)
    with pytest.raises(SchemaError, match="gate"):
        verdict_of(tmp_path, es)


def test_a_result_without_a_gate_is_refused_at_ingest(tmp_path: Path) -> None:
    es = qualified_entries()
    _result_for(es, "benchmark", drop="gate")
    with pytest.raises(SchemaError, match="gate"):
        verdict_of(tmp_path, es)


@pytest.mark.parametrize("misnamed", [False, True])
def test_the_routing_check_refuses_naming_the_unjudged_failure(tmp_path: Path, misnamed: bool) -> None:
    """The routing gate re-derives the verdict: a misnamed failed result logged after a QUALIFIED verdict
    was recorded refuses the change, and the reason names it (the neighbour without it is allowed)."""
    from tests.test_routing_at_reference_time import CAMPAIGN, route_campaign

    es = qualified_entries()
    es.append(
        {
            "name": "verdict",
            "at": "2026-09-10T11:00:00Z",
            "record_verdict": {"subject": {"campaign": CAMPAIGN["campaign"]}, "key": "reviewer"},
        }
    )
    if misnamed:  # collected in the job, pushed after the verdict was recorded
        run = _result_for(es, "benchmrk")
        es.remove(run)
        run["logged_at"] = "2026-09-10T11:05:00Z"
        es.append(run)
    r = route_campaign(tmp_path, es, "2026-09-10T12:00:00Z")
    assert r["allowed"] is not misnamed, r["reasons"]
    if misnamed:
        assert any("'benchmrk'" in x and "no gate judges" in x for x in r["reasons"]), r["reasons"]


def test_the_verdict_command_names_the_unjudged_failure(tmp_path: Path, cli: Any) -> None:
    from tests.test_routing_at_reference_time import CAMPAIGN, _campaign_home

    es = qualified_entries()
    _result_for(es, "benchmrk")
    home, ledger, _b = _campaign_home(tmp_path, es)
    ledger.close()
    r = cli("verdict", "--home", str(home), "--subject", f"campaign={CAMPAIGN['campaign']}")
    assert r.code == 0, r.err  # the verdict is the answer, not an error (`ledger check` gates on it)
    assert r.out.startswith("INCONCLUSIVE")
    # on a pipe a table is one tab-separated line per row: entry, kind, gate, why
    assert any(
        line.split("\t")[1:3] == ["gate.result", "benchmrk"] and "no gate judges" in line
        for line in r.out.splitlines()
    )
