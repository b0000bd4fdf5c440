"""Issue 11, fix 74 (audit 68): a refusal the run's own record contradicts is no refusal of the campaign's
configuration.

f1: ``ledger.answers.refusal`` judges a harness request (``check`` ``HARNESS_REQUEST``) by what the harness
saw before it: ``count`` (the run's answered requests) and ``prompt_count`` (those of the same prompt) — an
access refusal only before any answer, a context refusal only of a prompt not answered before; the same
principle the sequential probe's ``count`` already had.

f3: ``harness-campaign-config`` excused a gate.result whose ``bounds.outcome`` said "config" while its own
counts showed no refused request and its aggregate was measured (a failing ttft figure: INCONCLUSIVE). The
rule now fires only with ``counts.refused`` a whole number above 0 and ``bounds.aggregate`` false; otherwise
the gate is judged on its figures."""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path
from typing import Any

import pytest

from ledger.answers import HARNESS_REQUEST, refusal
from ledger.entries import validate_payload
from ledger.errors import LedgerError
from ledger.policy.conditions import compile_condition
from tests.policy.test_fail_closed import counted_against, entry, qualified_entries, rejected, verdict_of
from tests.policy.test_fix95_verdict_side import store_request_record

POLICIES = Path(__file__).resolve().parents[2] / "policies"
PARAMS: dict[str, Any] = tomllib.loads((POLICIES / "evidence-acceptance.toml").read_text())["params"]
QUAL = tomllib.loads((POLICIES / "backend-qualification.toml").read_text())
RULE = "harness-campaign-config"
_DROP = object()  # a field left out
CONTEXT = (
    "HTTP 400: This model's maximum context length is 8 tokens. However, your request has 9 input tokens."
)
ACCESS = "HTTP 401: Invalid API Key"


def _req(**kw: Any) -> dict[str, Any]:
    return {"check": HARNESS_REQUEST, **kw}


# --- f1: the one function judges a harness request by the run's answers before it -------------------------


@pytest.mark.parametrize(
    ("payload", "want"),
    [
        # the campaign's: nothing answered before (access); this prompt never answered (context)
        (_req(http_status=401, error=ACCESS, count=0, prompt_count=0), "access"),
        (_req(http_status=400, error=CONTEXT, count=0, prompt_count=0), "context"),
        (_req(http_status=400, error=CONTEXT, count=5, prompt_count=0), "context"),  # other prompts answered
        # the engine's: the run's own answers contradict the refusal
        (_req(http_status=401, error=ACCESS, count=3, prompt_count=0), None),
        (_req(http_status=403, error=ACCESS, count=1, prompt_count=1), None),
        (_req(http_status=400, error=CONTEXT, count=3, prompt_count=1), None),
        # fail closed: a count dropped, renamed, mistyped, negative, or the two contradicting each other
        (_req(http_status=401, error=ACCESS, prompt_count=0), None),
        (_req(http_status=401, error=ACCESS, count=0), None),
        (_req(http_status=400, error=CONTEXT, count=0), None),
        (_req(http_status=401, error=ACCESS, answered=0, prompt_count=0), None),
        (_req(http_status=401, error=ACCESS, count=False, prompt_count=0), None),
        (_req(http_status=401, error=ACCESS, count="0", prompt_count=0), None),
        (_req(http_status=401, error=ACCESS, count=0.0, prompt_count=0), None),
        (_req(http_status=401, error=ACCESS, count=-1, prompt_count=0), None),
        (_req(http_status=400, error=CONTEXT, count=2, prompt_count=-1), None),
        (_req(http_status=400, error=CONTEXT, count=2, prompt_count=None), None),
        (_req(http_status=401, error=ACCESS, count=0, prompt_count=1), None),  # more of the prompt than all
        # reordered keys: the same judgement
        (
            {"prompt_count": 0, "count": 0, "error": ACCESS, "http_status": 401, "check": HARNESS_REQUEST},
            "access",
        ),
        # no refusal at all, whatever the counts
        (_req(http_status=500, error=CONTEXT, count=0, prompt_count=0), None),
        (_req(http_status=200, count=0, prompt_count=0), None),
    ],
)
def test_harness_refusal_after_answers_judged_campaign_config(
    payload: dict[str, Any], want: str | None
) -> None:
    assert refusal(payload, PARAMS) == want


@pytest.mark.parametrize(
    ("payload", "want"),
    [
        # the sequential probe: one prompt asked ``count`` times — unchanged by the harness's rule
        ({"check": "sequential", "count": 0, "http_status": 401}, "access"),
        ({"check": "sequential", "count": 0, "http_status": 400, "error": CONTEXT}, "context"),
        ({"check": "sequential", "count": 2, "http_status": 401}, None),
        ({"check": "sequential", "count": 2, "http_status": 400, "error": CONTEXT}, None),
        # a single request's probe is no run: no count asked for
        ({"check": "completion", "http_status": 401}, "access"),
        ({"check": "completion", "count": 3, "http_status": 400, "error": CONTEXT}, "context"),
    ],
)
def test_probe_refusals_keep_their_judgement(payload: dict[str, Any], want: str | None) -> None:
    assert refusal(payload, PARAMS) == want


# --- f3: the policy's rule excuses only a run whose record shows the refusal -------------------------------


@pytest.fixture(scope="module")
def rule() -> dict[str, Any]:
    [r] = [r for r in QUAL["rules"] if r["name"] == RULE]
    return dict(r, params={**PARAMS, **QUAL["params"]})


def _config(gate: str = "benchmark", **over: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "gate": gate,
        "bounds": {"outcome": "config", "aggregate": False},
        "counts": {"refused": 1},
    }
    for k, v in over.items():
        where, _, field = k.partition("__")
        if v is _DROP:
            payload[where].pop(field, None)
        else:
            payload[where][field] = v
    return payload


@pytest.mark.parametrize(
    ("payload", "fires"),
    [
        (_config(), True),
        (_config("semantic"), True),
        (_config(counts__refused=3), True),
        # counts.refused: dropped, renamed, mistyped, zero, negative
        (_config(counts__refused=_DROP), False),
        ({**_config(counts__refused=_DROP), "counts": {"Refused": 1}}, False),
        (_config(counts__refused="1"), False),
        (_config(counts__refused=1.0), False),
        (_config(counts__refused=True), False),
        (_config(counts__refused=0), False),
        (_config(counts__refused=-1), False),
        ({k: v for k, v in _config().items() if k != "counts"}, False),  # counts dropped
        # bounds.aggregate: true (figures measured), dropped, mistyped
        (_config(bounds__aggregate=True), False),
        (_config(bounds__aggregate=_DROP), False),
        (_config(bounds__aggregate="false"), False),
        (_config(bounds__aggregate=0), False),
        # the outcome itself
        (_config(bounds__outcome="completed"), False),
        (_config(bounds__outcome=_DROP), False),
    ],
)
def test_config_outcome_excused_without_a_refused_request(
    rule: dict[str, Any], payload: dict[str, Any], fires: bool
) -> None:
    cond = compile_condition(rule["when"], "backend-qualification.toml")
    # ``e.derived.artifact_problem``: none where the run's stored request record agrees with it (fix 83)
    e = {"payload": payload, "derived": {"artifact_problem": None}}
    assert cond.holds({"e": e, "params": rule["params"]}) is fires
    # a stored record that contradicts the run is never excused as the campaign's configuration (fix 83)
    e = {"payload": payload, "derived": {"artifact_problem": "an access refusal beside an answered request"}}
    assert cond.holds({"e": e, "params": rule["params"]}) is False


def _failing_benchmark(
    es: list[dict[str, Any]], *, outcome: str, refused: Any, aggregate: bool
) -> dict[str, Any]:
    """The audit's record: the qualified baseline's benchmark with a failing ttft figure, bounds.outcome and
    counts.refused as given."""
    p = entry(es, "benchmark")["payload"]
    p["status"] = "failed"
    p["figures"]["ttft_ms.p95@c4"] = 9999.0
    p["reason"] = "ttft_ms.p95@c4 9999 > 2000"
    p["bounds"].update(outcome=outcome, aggregate=aggregate)
    p["counts"]["cut"] = 0
    if refused is _DROP:
        p["counts"].pop("refused", None)
    else:
        p["counts"]["refused"] = refused
    return p


@pytest.mark.parametrize(
    ("refused", "aggregate"),
    [(0, True), (_DROP, True), (1, True), (0, False)],
    ids=["refused-0-aggregate", "refused-dropped-aggregate", "refused-1-aggregate", "refused-0-no-aggregate"],
)
def test_config_outcome_with_figures_failing_is_judged_on_them(
    tmp_path: Path, refused: Any, aggregate: bool
) -> None:
    """The reproducer (audit 68 f3) and its neighbours: outcome "config" on a record whose own counts show no
    refused request, or that has an aggregate result, is judged like any other: NOT QUALIFIED — PERFORMANCE,
    as the same record says with outcome "completed"."""
    es = qualified_entries()
    p = _failing_benchmark(es, outcome="config", refused=refused, aggregate=aggregate)
    validate_payload("gate.result", 1, p)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "NOT QUALIFIED — PERFORMANCE", v["gates"]
    assert rejected(v).get("benchmark") != RULE


def test_config_outcome_with_a_refused_request_and_no_aggregate_is_excused(tmp_path: Path) -> None:
    """Neighbour: the record the harness writes for a refusal of the campaign's configuration (refused 1, no
    aggregate, no figures, no engine error before it): INCONCLUSIVE, naming the rule."""
    es = qualified_entries()
    p = entry(es, "benchmark")["payload"]
    p["status"], p["reason"], p["figures"] = "failed", "no aggregate result: the engine refused …", {}
    p["bounds"].update(outcome="config", aggregate=False, valid=False)
    p["counts"].update(issued=1, completed=0, errors=1, cut=0, refused=1)
    store_request_record(entry(es, "benchmark"))  # fix 95: the refusal is read back from its record
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert rejected(v)["benchmark"] == RULE and "benchmark" not in counted_against(v)


def test_negative_refused_count_is_refused_at_ingest() -> None:
    es = qualified_entries()
    p = copy.deepcopy(entry(es, "benchmark")["payload"])
    p["bounds"].update(outcome="config", aggregate=False)
    p["counts"]["refused"] = -1
    with pytest.raises(LedgerError):
        validate_payload("gate.result", 1, p)


@pytest.mark.parametrize(
    ("counts", "verdict"),
    [
        ({"items": 12, "asked": 3, "passed": 3, "failed": 0, "errors": 0, "refused": 1}, "INCONCLUSIVE"),
        # items the engine failed before the refusal already fail the gate (semantic_min_score 1.0)
        (
            {"items": 12, "asked": 3, "passed": 2, "failed": 1, "errors": 0, "refused": 1},
            "NOT QUALIFIED — SEMANTIC QUALITY",
        ),
        # no refused item on the record: not excused, judged as the failed run it records
        (
            {"items": 12, "asked": 3, "passed": 3, "failed": 0, "errors": 0},
            "NOT QUALIFIED — SEMANTIC QUALITY",
        ),
        (
            {"items": 12, "asked": 3, "passed": 3, "failed": 0, "errors": 0, "refused": 0},
            "NOT QUALIFIED — SEMANTIC QUALITY",
        ),
    ],
    ids=["refused", "refused-and-failed", "refused-dropped", "refused-0"],
)
def test_semantic_config_outcome_judged_by_its_refused_items(
    tmp_path: Path, counts: dict[str, int], verdict: str
) -> None:
    es = qualified_entries()
    p = entry(es, "semantic")["payload"]
    p["status"], p["reason"], p["figures"] = (
        "failed",
        "no aggregate result: the engine refused item s3 …",
        {"score": None},
    )
    p["counts"] = dict(counts)
    p["bounds"].update(outcome="config", aggregate=False)
    store_request_record(entry(es, "semantic"))  # fix 95: the refusal is read back from its record
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == verdict, v["gates"]
