"""Audit 10: what the semantic and benchmark gates judge of a harness result, kept as regressions.

- Harness answers from another model were credited: /v1/models listed the campaign's model, but the
  streamed answers named ``other-model``. The harnesses record the models their answers named
  (``bounds.bindings.answered_models``); an answer naming another model than the campaign's approved
  ``served_name`` fails the gate, as api-readiness judges a probe's ``answered_model`` — except for an engine
  that echoes the asked name (``params.engines_echo_model_name``).
- A hand-recorded benchmark with ``bounds.parity.fraction = "1"`` (a text) passed its self-contradiction
  check (CEL's ``double("1")`` parses texts), and one recorded at temperature 1.0 was credited although c1
  parity means something only at temperature 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.policy.test_fail_closed import entry, gates, qualified_entries, verdict_of

QUALIFIED = "QUALIFIED"
PERFORMANCE = "NOT QUALIFIED — PERFORMANCE"
SEMANTIC = "NOT QUALIFIED — SEMANTIC QUALITY"


def _payload(es: list[dict[str, Any]], name: str) -> dict[str, Any]:
    payload: dict[str, Any] = entry(es, name)["payload"]
    return payload


def _engine(es: list[dict[str, Any]], engine: str) -> None:
    """The campaign's approved engine (its job's spec.bindings) and the launch's."""
    for e in es:
        if e.get("kind") == "job" and "spec" in e["payload"]:
            e["payload"]["spec"]["bindings"]["engine"] = engine
        if e.get("kind") == "engine.launch":
            e["payload"]["engine"] = engine
            e["payload"]["bindings"]["engine"] = engine


@pytest.mark.parametrize(("gate", "word"), [("benchmark", PERFORMANCE), ("semantic", SEMANTIC)])
@pytest.mark.parametrize("answered", ["other-model", "m,other-model", "M"])
def test_a_harness_answered_by_another_model_than_the_campaigns_fails_its_gate(
    tmp_path: Path, gate: str, word: str, answered: str
) -> None:
    """Regression: /v1/models served ``m`` while the answers named ``other-model``: QUALIFIED."""
    es = qualified_entries()
    _payload(es, gate)["bounds"]["bindings"]["answered_models"] = answered
    v = verdict_of(tmp_path, es)
    assert gates(v)[gate] == "failed"
    assert v["verdict"] == word
    reason = next(g for g in v["gates"] if g["name"] == gate)["reason"]
    assert "answer named another model" in reason


@pytest.mark.parametrize("gate", ["benchmark", "semantic"])
@pytest.mark.parametrize("answered", ["m", None])
def test_a_harness_answered_by_the_campaigns_model_or_naming_none_qualifies(
    tmp_path: Path, gate: str, answered: str | None
) -> None:
    """The neighbours: answers naming the approved model, and a result that records no answered models
    (answers that named none, or an entry from before the field): judged by /v1/models as before."""
    es = qualified_entries()
    if answered is not None:
        _payload(es, gate)["bounds"]["bindings"]["answered_models"] = answered
    assert verdict_of(tmp_path, es)["verdict"] == QUALIFIED


@pytest.mark.parametrize("gate", ["benchmark", "semantic"])
def test_an_echoing_engine_whose_answers_named_another_model_fails_its_harness_gate(
    tmp_path: Path, gate: str
) -> None:
    """Regression (audit 21, f3): llama.cpp (params.engines_echo_model_name) was not judged by its answers
    at all, so a benchmark whose last repetition was answered as 'tiny-restarted' was QUALIFIED. The harness
    asks for the served name and an echoing engine answers with the name asked: another name is positive
    proof that something else answered."""
    es = qualified_entries()
    _payload(es, gate)["bounds"]["bindings"]["answered_models"] = "m,other-model"
    _engine(es, "llamacpp")
    assert gates(verdict_of(tmp_path, es))[gate] == "failed"


def test_an_echoing_engine_whose_answers_named_the_served_name_passes(tmp_path: Path) -> None:
    """Neighbour: the echo of the served name asked."""
    es = qualified_entries()
    _payload(es, "benchmark")["bounds"]["bindings"]["answered_models"] = "m"
    _engine(es, "llamacpp")
    assert gates(verdict_of(tmp_path, es))["benchmark"] == "passed"


@pytest.mark.parametrize("fraction", ["1", "1.0", True, None])
def test_a_passed_benchmark_whose_parity_fraction_is_no_number_contradicts_its_record(
    tmp_path: Path, fraction: Any
) -> None:
    """Regression: ``bounds.parity.fraction = "1"`` passed (CEL's double() parses a text)."""
    es = qualified_entries()
    _payload(es, "benchmark")["bounds"]["parity"]["fraction"] = fraction
    v = verdict_of(tmp_path, es)
    assert gates(v)["benchmark"] == "failed"
    assert v["verdict"] == PERFORMANCE


@pytest.mark.parametrize("fraction", [1, 1.0])
def test_a_parity_fraction_that_is_a_number_is_its_record(tmp_path: Path, fraction: Any) -> None:
    es = qualified_entries()
    _payload(es, "benchmark")["bounds"]["parity"]["fraction"] = fraction
    assert verdict_of(tmp_path, es)["verdict"] == QUALIFIED


@pytest.mark.parametrize(
    "bounds",
    [
        {"temperature": 1.0},
        {"temperature": 0.7},
        {"temperature": "0"},
        {"temperature": None},
        {"api": "completions"},
        {"api": "Chat"},
        {"temperature": 0, "api": "completions"},
    ],
)
def test_a_passed_benchmark_not_run_at_temperature_0_through_the_approved_api_fails(
    tmp_path: Path, bounds: dict[str, Any]
) -> None:
    """Regression: a benchmark recorded at temperature 1.0 was credited, although its c1 parity compares
    outputs that repeat only at temperature 0."""
    es = qualified_entries()
    _payload(es, "benchmark")["bounds"].update(bounds)
    v = verdict_of(tmp_path, es)
    assert gates(v)["benchmark"] == "failed", bounds
    assert v["verdict"] == PERFORMANCE


@pytest.mark.parametrize("left_out", ["temperature", "api"])
def test_a_passed_benchmark_that_does_not_record_its_temperature_or_api_fails(
    tmp_path: Path, left_out: str
) -> None:
    """The neighbour with the field dropped: the harness records both; a passed result that records
    either not cannot show it ran at temperature 0 through the approved API (before, one left out was
    judged as if it had)."""
    es = qualified_entries()
    del _payload(es, "benchmark")["bounds"][left_out]
    v = verdict_of(tmp_path, es)
    assert gates(v)["benchmark"] == "failed", left_out
    assert v["verdict"] == PERFORMANCE


@pytest.mark.parametrize(
    "bounds", [{"temperature": 0}, {"temperature": 0.0}, {"temperature": 0.0, "api": "chat"}]
)
def test_a_benchmark_at_temperature_0_through_the_chat_api_qualifies(
    tmp_path: Path, bounds: dict[str, Any]
) -> None:
    es = qualified_entries()
    _payload(es, "benchmark")["bounds"].update(bounds)
    assert verdict_of(tmp_path, es)["verdict"] == QUALIFIED
