"""Issue 11 ("one vocabulary"), fix 68: when a request the engine refused is the campaign's configuration, not
the engine's (HTTP 401/403; a 400 whose error matches ``params.context_refusal_patterns``; a structured
probe's request form refused; a sequential run refused from its first request) was written three times —
twice in CEL (evidence-acceptance's ``[acceptance.against]."health.probe"``, backend-qualification's two
``engine-refused-probe`` rules) and once in Python for the collector. Now one function,
``ledger.answers.refusal``, judges it; the policies read it as ``e.derived.refusal``, and the harnesses
(benchmark, semantic) judge a refused request by it too (outcome ``config``: ``harness-campaign-config``)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from ledger.answers import REFUSAL_PARAMS, REFUSALS, refusal
from ledger.policy.acceptance import _counts_against, cut_decided
from ledger.policy.conditions import compile_condition
from ledger.policy.loader import load_policy
from ledger.policy.snapshot import NO_DERIVED, Evidence, probe_ok
from tests.policy.test_fail_closed import (
    counted_against,
    entry,
    gates,
    qualified_entries,
    rejected,
    verdict_of,
)
from tests.policy.test_fix95_verdict_side import store_request_record

POLICIES = Path(__file__).resolve().parents[2] / "policies"
ACC = POLICIES / "evidence-acceptance.toml"
QUAL = POLICIES / "backend-qualification.toml"
PARAMS: dict[str, Any] = tomllib.loads(ACC.read_text())["params"]
VLLM_CONTEXT = (
    "HTTP 400: This model's maximum context length is 8 tokens. However, your prompt contains at least 9 "
    "input tokens, which exceeds this limit even without any output tokens."
)
LLAMA_CONTEXT = "HTTP 400: the request exceeds the available context size, try increasing it"
FORM = (
    "HTTP 500: 1 validation error: {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
    "'msg': \"Input should be 'text' or 'json_object'\"}"
)
# keys of a policy file whose strings are texts for people, not CEL
TEXT_KEYS = {"detail", "missing", "fail", "description", "reason", "name", "verdict", "kind", "version"}


# --- the condition is written once -----------------------------------------------------------------------


def _cel_strings(node: Any, key: str = "") -> list[str]:
    """Every string of a parsed policy file that is CEL (not [params], not a text for people)."""
    if isinstance(node, dict):
        return [s for k, v in node.items() if k != "params" for s in _cel_strings(v, k)]
    if isinstance(node, list):
        return [s for v in node for s in _cel_strings(v, key)]
    return [node] if isinstance(node, str) and key not in TEXT_KEYS else []


def _rewritten(cel: list[str]) -> list[str]:
    """The CEL strings that judge a refusal again instead of reading ``e.derived.refusal``."""
    written = re.compile(r"params\.(" + "|".join(REFUSAL_PARAMS) + r")\b")
    return [c for c in cel if written.search(c) or "e.payload.error.matches(" in c]


@pytest.mark.parametrize("path", sorted(POLICIES.glob("*.toml")), ids=lambda p: p.name)
def test_refusal_condition_written_again_in_a_policy(path: Path) -> None:
    """No shipped policy writes the refusal condition in CEL: the refusal params are read only by
    ``ledger.answers.refusal`` (through ``e.derived.refusal``), and every refusal word a policy compares is
    one the function gives."""
    cel = _cel_strings(tomllib.loads(path.read_text()))
    assert _rewritten(cel) == []
    words = {w for c in cel for w in re.findall(r"e\.derived\.refusal\s*==\s*'([^']*)'", c)}
    assert words <= set(REFUSALS), words - set(REFUSALS)


def test_refusal_condition_written_again_is_caught() -> None:
    """The check above can fail: the condition as it was written before (in either file) is caught."""
    old_rule = {
        "rules": [
            {
                "name": "engine-refused-probe",
                "when": "e.payload.http_status in params.refused_http_statuses",
                "detail": "params.refused_http_statuses in a text is no CEL",
            }
        ]
    }
    old_against = {
        "acceptance": {
            "against": {
                "health.probe": "e.derived.probe_failed && !(params.context_refusal_patterns.exists(p, "
                "e.payload.error.matches(p)))"
            }
        }
    }
    assert len(_rewritten(_cel_strings(old_rule))) == 1
    assert len(_rewritten(_cel_strings(old_against))) == 1


def test_both_policies_read_the_derived_refusal() -> None:
    acc = tomllib.loads(ACC.read_text())
    assert "e.derived.refusal == null" in acc["acceptance"]["against"]["health.probe"]
    rules = [r for r in tomllib.loads(QUAL.read_text())["rules"] if r["name"] == "engine-refused-probe"]
    assert [r["when"] for r in rules] == [
        "e.derived.refusal == 'access' || e.derived.refusal == 'context'",
        "e.derived.refusal == 'request-form'",
        "e.derived.refusal == 'option-value'",
    ]
    # the params stay where they are: evidence-acceptance's
    assert set(REFUSAL_PARAMS) <= set(acc["params"])


# --- the one function: what it calls a refusal, and its neighbours ---------------------------------------


def _probe(**kw: Any) -> dict[str, Any]:
    return {"check": "completion", "ok": False, **kw}


@pytest.mark.parametrize(
    ("payload", "want"),
    [
        (_probe(http_status=401, error="HTTP 401: unauthorized"), "access"),
        (_probe(http_status=403), "access"),  # no error needed: the status says it
        (_probe(http_status=400, error=VLLM_CONTEXT), "context"),
        (_probe(http_status=400, error=LLAMA_CONTEXT), "context"),
        (_probe(check="structured", http_status=500, error=FORM), "request-form"),
        (_probe(check="sequential", count=0, http_status=401), "access"),
        # neighbours: what is no refusal (the engine's failure, judged as before)
        (_probe(check="sequential", count=3, http_status=401), None),  # answered, then refused
        (_probe(check="sequential", http_status=401), None),  # count dropped
        (_probe(check="sequential", count=False, http_status=401), None),  # mistyped (a bool is no 0)
        (_probe(check="sequential", count="0", http_status=401), None),  # mistyped
        (_probe(http_status=500, error=VLLM_CONTEXT), None),  # a 500 with the context text
        (_probe(http_status=400, error="HTTP 400: unknown field 'foo'"), None),  # a 400 for anything else
        (_probe(http_status=400), None),  # error dropped
        (_probe(http_status=400, error=["maximum context length is 8 tokens"]), None),  # mistyped
        (_probe(http_status="401"), None),  # status mistyped
        (_probe(http_status=None, error=VLLM_CONTEXT), None),  # no answer
        (_probe(status=401), None),  # renamed
        (_probe(http_status=200, error=VLLM_CONTEXT), None),  # a 2xx answer refuses nothing
        (_probe(http_status=500, error=FORM), None),  # request form: only a structured probe's
        (_probe(check="structured", http_status=500, error="Traceback …\n" + FORM), None),  # not at the start
        ({"error": VLLM_CONTEXT, "http_status": 400, "check": "completion"}, "context"),  # reordered
        ("not a payload", None),
    ],
)
def test_refusal_judged_from_the_record(payload: Any, want: str | None) -> None:
    assert refusal(payload, PARAMS) == want


@pytest.mark.parametrize(
    "params",
    [
        {},  # the params dropped
        {k: v for k, v in PARAMS.items() if k != "context_refusal_patterns"},
        {**PARAMS, "context_refusal_patterns": "maximum context length"},  # mistyped: a text, no list
        {**PARAMS, "context_refused_http_statuses": ["400"]},  # mistyped statuses
        {**PARAMS, "context_refusal_patterns": ["(unclosed"]},  # a pattern that does not compile
    ],
)
def test_refusal_with_params_missing_or_mistyped_refuses_nothing(params: dict[str, Any]) -> None:
    assert refusal(_probe(http_status=400, error=VLLM_CONTEXT), params) is None


# --- the policies judge by it --------------------------------------------------------------------------


def test_derived_refusal_type_is_the_functions_words() -> None:
    from pydantic import TypeAdapter, ValidationError

    from ledger.policy.model import DERIVED_FIELDS

    adapter = TypeAdapter(DERIVED_FIELDS["refusal"])
    for word in (*REFUSALS, None):
        adapter.validate_python(word, strict=True)
    with pytest.raises(ValidationError):
        adapter.validate_python("contxt", strict=True)


def _routing_probe(payload: dict[str, Any]) -> Evidence:
    """A probe whose facts the routing gate derives itself (``{**NO_DERIVED, ok, probe_failed}``)."""
    e = Evidence(
        seq=1,
        id="1" * 64,
        kind="health.probe",
        signer="k",
        logged_at="2026-12-06T00:00:01Z",
        statement={
            "kind": "health.probe",
            "subject": {},
            "payload": payload,
            "collected_at": "2026-12-06T00:00:00Z",
            "refs": [],
            "artifacts": [],
        },
        payload_type="application/vnd.in-toto+json",
        payload_bytes=b"{}",
        signature=b"",
    )
    e.set_derived({**NO_DERIVED, "ok": probe_ok(payload), "probe_failed": True})
    return e


@pytest.mark.parametrize(
    ("payload", "against"),
    [
        (_probe(http_status=401, endpoint="/v1/models"), False),
        (_probe(http_status=400, error=VLLM_CONTEXT), False),
        (_probe(http_status=500, error=VLLM_CONTEXT), True),
        (_probe(http_status=400, error="HTTP 400: unknown field"), True),
    ],
)
def test_routing_probe_refused_for_the_campaign_is_no_failure(payload: dict[str, Any], against: bool) -> None:
    """The routing gate derives its probes' facts from the defaults (``refusal`` None): the acceptance
    policy's ``against`` judges the refusal with the params all the same, never the default's "none"."""
    routing = load_policy("routing-change", POLICIES)
    qual = load_policy("backend-qualification", POLICIES)
    e = _routing_probe(payload)
    assert _counts_against(routing, e, qual.params, None, {}) is against


@pytest.mark.parametrize(
    ("derived", "against"),
    [
        ({"probe_failed": True, "refusal": None}, True),
        ({"probe_failed": True, "refusal": "access"}, False),
        ({"probe_failed": True, "refusal": "context"}, False),
        ({"probe_failed": True, "refusal": "request-form"}, False),
        ({"probe_failed": False, "refusal": None}, False),
    ],
)
def test_acceptance_against_reads_the_derived_refusal(derived: dict[str, Any], against: bool) -> None:
    cond = compile_condition(tomllib.loads(ACC.read_text())["acceptance"]["against"]["health.probe"], "acc")
    assert cond.holds({"e": {"payload": {}, "derived": derived}, "params": PARAMS}) is against


# --- a harness run the campaign's configuration stopped (outcome "config") ------------------------------

RULE = "harness-campaign-config"
VLLM_REASON = (
    "no aggregate result: the engine refused c1 repetition 0 request 1 (prompt p1) for the campaign's "
    "configuration (context: HTTP 400: This model's maximum context length is 8 tokens)"
)


def _config_run(es: list[dict[str, Any]], gate: str, counts: dict[str, int]) -> dict[str, Any]:
    p = entry(es, gate)["payload"]
    p["status"] = "failed"
    p["counts"].update(counts)
    p["bounds"].update(outcome="config", aggregate=False)
    if gate == "benchmark":
        p["bounds"]["valid"] = False
        p["figures"] = {}
    else:
        p["figures"] = {"score": None}
    p["reason"] = VLLM_REASON
    # its per-request record, as the harness stores it (fix 95: a refusal is read back from it, never
    # excused on the payload's counts alone)
    store_request_record(entry(es, gate))
    return p


def test_benchmark_request_refused_for_context_length_is_inconclusive_not_performance(tmp_path: Path) -> None:
    es = qualified_entries()
    _config_run(es, "benchmark", {"issued": 2, "completed": 1, "errors": 1, "cut": 0, "refused": 1})
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert rejected(v)["benchmark"] == RULE
    assert "benchmark" not in counted_against(v)
    assert gates(v)["benchmark"] == "missing"
    [r] = [r for r in v["rejected"] if r["rule"] == RULE]
    assert "campaign's configuration" in r["detail"] and "maximum context length" in r["detail"]


def test_semantic_item_refused_for_context_length_is_inconclusive_not_semantic_quality(
    tmp_path: Path,
) -> None:
    es = qualified_entries()
    # (fix 74: the record shows its refused item, counts.refused, as the harness now records it)
    _config_run(
        es, "semantic", {"items": 12, "asked": 2, "passed": 2, "failed": 0, "errors": 0, "refused": 1}
    )
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert rejected(v)["semantic"] == RULE
    assert "semantic" not in counted_against(v)


def test_benchmark_engine_errors_before_the_refusal_still_fail(tmp_path: Path) -> None:
    """Fail closed: a request the engine failed before the refusal (error_rate bound 0) still counts."""
    es = qualified_entries()
    _config_run(es, "benchmark", {"issued": 3, "completed": 1, "errors": 2, "cut": 0, "refused": 1})
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "NOT QUALIFIED — PERFORMANCE", v["gates"]
    assert counted_against(v)["benchmark"] == RULE


@pytest.fixture(scope="module")
def rule() -> dict[str, Any]:
    doc = tomllib.loads(QUAL.read_text())
    [r] = [r for r in doc["rules"] if r["name"] == RULE]
    names = [r["name"] for r in doc["rules"]]
    assert names.index("harness-lease-expired") < names.index(RULE) < names.index("spec-mismatch")
    return dict(r, params={**PARAMS, **doc["params"]})


@pytest.mark.parametrize(
    ("bounds", "fires"),
    [
        # (fix 74: the outcome excuses only with the record's own refused request and no aggregate)
        ({"outcome": "config", "aggregate": False}, True),
        ({"outcome": "config"}, False),  # aggregate dropped
        ({}, False),  # dropped
        ({"Outcome": "config"}, False),  # renamed
        ({"outcome": "Config"}, False),  # misspelt
        ({"outcome": 1}, False),  # mistyped
        ({"outcome": "fault"}, False),  # an engine fault is judged, not excused
    ],
)
def test_campaign_config_rule_fires_only_on_the_recorded_outcome(
    rule: dict[str, Any], bounds: dict[str, Any], fires: bool
) -> None:
    cond = compile_condition(rule["when"], "backend-qualification.toml")
    payload = {"gate": "benchmark", "bounds": bounds, "counts": {"refused": 1}}
    assert cond.holds({"e": {"payload": payload, "derived": {"artifact_problem": None}}}) is fires


@pytest.mark.parametrize(
    ("payload", "against"),
    [
        ({"gate": "benchmark", "counts": {"errors": 1, "cut": 0, "refused": 1}}, False),
        ({"gate": "benchmark", "counts": {"errors": 5, "cut": 3, "refused": 2}}, False),
        ({"gate": "benchmark", "counts": {"errors": 2, "cut": 0, "refused": 1}}, True),
        ({"gate": "benchmark", "counts": {"errors": 2, "cut": 0}}, False),  # refused dropped: nothing decided
        ({"gate": "benchmark", "counts": {"errors": 2, "cut": 0, "Refused": 1}}, False),  # renamed
        ({"gate": "semantic", "counts": {"items": 12, "failed": 0}}, False),
        ({"gate": "semantic", "counts": {"items": 12, "failed": 1}}, True),  # semantic_min_score 1.0
        ({"gate": "semantic", "counts": {"items": 12}}, False),  # failed dropped
    ],
)
def test_campaign_config_counts_against_only_the_engines_own_failures(
    rule: dict[str, Any], payload: dict[str, Any], against: bool
) -> None:
    cond = compile_condition(rule["against"], "backend-qualification.toml")
    params = dict(rule["params"], semantic_min_score=1.0)
    # the rule reads the one test every cut outcome is judged by (fix 166: e.derived.cut_decided)
    shown = {**payload, "bounds": {"outcome": "config", "concurrency": [1, 4, 32]}}
    derived = {"cut_decided": cut_decided(shown, params)}
    assert bool(cond.holds({"e": {"payload": payload, "derived": derived}, "params": params})) is against
