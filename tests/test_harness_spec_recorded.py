"""Issue 11, verdicts fail closed: what a harness run is judged by is recorded, and the policy checks it.

* The semantic result records the model it measured (``bounds.bindings.served_models``, from
  ``/v1/models``, as the benchmark's does): a result of an endpoint that did not serve the campaign's
  approved model (``manifest.served_name``), or that records none, is not credited (``harness-other-model``).
* The benchmark records the run-validity rules it judged each run by (over-saturation, its detection
  thresholds, minimum completions and duration per run, maximum error rate), which are the policy's
  (``benchmark_saturation`` …), not the campaign's: a run judged by other values, or that does not record
  them, is ``spec-mismatch``. A field dropped, renamed or mistyped never passes the gate.
"""

from __future__ import annotations

import copy
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ledger.collectors.benchmark import (
    BenchmarkSpec,
    benchmark_gate_payload,
    policy_validity,
    run_benchmark,
)
from ledger.collectors.campaign import CampaignRunner, benchmark_validity, load_campaign
from ledger.collectors.corpus import corpus_digest
from ledger.collectors.semantic import SemanticSpec, run_semantic, semantic_gate_payload
from ledger.entries import HarnessBounds, validate_payload
from ledger.errors import ConfigError, SchemaError
from ledger.policy.loader import load_policy
from ledger.recorder import LocalRecorder
from ledger.service import Ledger
from tests.engines.stub_openai import StubConfig, serve_stub
from tests.policy import test_fail_closed as fc  # the qualified campaign as data, and its verdict
from tests.policy.test_fix95_verdict_side import as_backend

REPO = Path(__file__).resolve().parents[1]
QUALIFIED = "QUALIFIED"
BENCH = REPO / "campaigns" / "corpora" / "bench-tiny.jsonl"
SEMANTIC = REPO / "campaigns" / "corpora" / "semantic-tiny.jsonl"
SHIPPED = load_policy("backend-qualification")


def _bounds(es: list[dict[str, Any]], name: str) -> dict[str, Any]:
    bounds: dict[str, Any] = fc.entry(es, name)["payload"]["bounds"]
    return bounds


def _detail(v: dict[str, Any], name: str) -> str:
    return next(r["detail"] for r in v["rejected"] if v["_names"].get(r["entry"]) == name)


def _policy_dir(tmp_path: Path, **params: str) -> Path:
    """The shipped policies with params replaced (``name="TOML value"``)."""
    d = tmp_path / "policies"
    shutil.copytree(fc.POLICY_DIR, d, dirs_exist_ok=True)
    p = d / "backend-qualification.toml"
    text = p.read_text()
    for name, value in params.items():
        lines = [f"{name} = {value}" if line.startswith(f"{name} = ") else line for line in text.splitlines()]
        assert lines != text.splitlines(), name
        text = "\n".join(lines) + "\n"
    p.write_text(text)
    return d


def test_neighbour_the_shipped_fixtures_record_what_is_judged_and_qualify(tmp_path: Path) -> None:
    es = fc.qualified_entries()
    assert _bounds(es, "semantic")["bindings"] == {"served_models": "m"}
    assert _bounds(es, "benchmark")["saturation"] == "invalid"
    assert fc.verdict_of(tmp_path, es)["verdict"] == QUALIFIED


# --- the semantic result names the model it measured --------------------------------------------------


def test_semantic_result_of_another_served_model_is_not_credited(tmp_path: Path) -> None:
    """Regression: the semantic result recorded no served model, so a run against an endpoint serving
    another model (a stub, a bigger model) credited the campaign's semantic gate."""
    es = fc.qualified_entries()
    _bounds(es, "semantic")["bindings"] = {"served_models": "some-other-model-70b"}
    v = fc.verdict_of(tmp_path, es)
    assert fc.rejected(v)["semantic"] == "harness-other-model"
    detail = _detail(v, "semantic")
    assert "'some-other-model-70b'" in detail and "approved model 'm'" in detail, detail
    assert fc.gates(v)["semantic"] == "missing"
    assert v["verdict"] == "INCONCLUSIVE"


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda b: b.pop("bindings"), id="bindings-dropped"),
        pytest.param(lambda b: b.update(bindings={}), id="none-recorded"),
        pytest.param(lambda b: b.update(bindings={"served_model": "m"}), id="key-renamed"),
        pytest.param(lambda b: b.update(bindings={"served_models": ""}), id="empty"),
        pytest.param(
            lambda b: b.update(bindings={"served_models": "mm,m-large"}), id="a-prefix-is-not-the-id"
        ),
        pytest.param(lambda b: b.update(bindings=None), id="null"),
    ],
)
def test_semantic_result_without_the_approved_served_model_is_not_credited(
    tmp_path: Path, change: Callable[[dict[str, Any]], Any]
) -> None:
    """A semantic result that does not show the approved model among the ids its endpoint served — it
    records none, under another key, or another id — is not credited while the campaign pins a
    served_name (fail closed), and the detail says which model was approved."""
    es = fc.qualified_entries()
    change(_bounds(es, "semantic"))
    v = fc.verdict_of(tmp_path, es)
    assert fc.rejected(v)["semantic"] == "harness-other-model"
    assert "approved model 'm'" in _detail(v, "semantic")
    assert v["verdict"] == "INCONCLUSIVE"


@pytest.mark.parametrize("served", [7, ["m"], {"id": "m"}, True])
def test_semantic_served_models_of_the_wrong_type_are_refused_at_ingest(tmp_path: Path, served: Any) -> None:
    """The bounds are typed the same way for both harnesses (``HarnessBounds.bindings``: texts)."""
    es = fc.qualified_entries()
    _bounds(es, "semantic")["bindings"] = {"served_models": served}
    with pytest.raises(SchemaError, match=r"bounds\.bindings"):
        fc.verdict_of(tmp_path, es)


def test_semantic_result_of_an_endpoint_serving_the_approved_model_among_others_counts(
    tmp_path: Path,
) -> None:
    es = fc.qualified_entries()
    _bounds(es, "semantic")["bindings"] = {"served_models": "embed-small,m"}
    assert fc.verdict_of(tmp_path, es)["verdict"] == QUALIFIED


def test_semantic_result_needs_no_served_model_where_the_campaign_pins_none(tmp_path: Path) -> None:
    """The neighbour: with no served_name approved there is nothing to compare (api-readiness is then
    INCONCLUSIVE on its own account); the rule does not fire."""
    es = fc.qualified_entries()
    del fc.entry(es, "campaign-job")["payload"]["spec"]["bindings"]["served_name"]
    del _bounds(es, "semantic")["bindings"]
    v = fc.verdict_of(tmp_path, es)
    assert "semantic" not in fc.rejected(v)


def test_a_faulted_semantic_run_of_another_model_still_counts_against_the_engine(tmp_path: Path) -> None:
    """The rule only withholds credit: an engine fault the run records still fails runtime stability."""
    es = fc.qualified_entries()
    sem = fc.entry(es, "semantic")["payload"]
    sem.update(status="failed", figures={"score": None}, reason="no aggregate result: engine fault")
    sem["bounds"].update(outcome="fault", bindings={"served_models": "other"})
    v = fc.verdict_of(tmp_path, es)
    assert fc.counted_against(v).get("semantic") == "harness-other-model"
    assert v["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY"


# --- the benchmark's run validity is the policy's -------------------------------------------------------


def test_benchmark_without_saturation_detection_is_spec_mismatch(tmp_path: Path) -> None:
    """Regression: over-saturation was the campaign's choice (``saturation = "report"``) and not recorded:
    a run whose levels were over-saturated, judged valid because over-saturation was only reported, was
    credited as the approved benchmark."""
    es = fc.qualified_entries()
    _bounds(es, "benchmark")["saturation"] = "report"
    v = fc.verdict_of(tmp_path, es)
    assert fc.rejected(v)["benchmark"] == "spec-mismatch"
    assert "over-saturation report, approved invalid" in _detail(v, "benchmark")
    assert v["verdict"] == "INCONCLUSIVE"


@pytest.mark.parametrize(
    ("key", "value", "label"),
    [
        ("latency_factor", 1000.0, "saturation latency factor 1000, approved 2"),
        ("min_duration_s", 1e9, "saturation min seconds 1000000000, approved 30"),
        ("min_points", 100000, "saturation min points 100000, approved 10"),
        ("min_gain", -1.0, "saturation min gain -1, approved 0.1"),
    ],
)
def test_benchmark_with_saturation_detection_that_never_fires_is_spec_mismatch(
    tmp_path: Path, key: str, value: Any, label: str
) -> None:
    """Detection thresholds no run reaches switch the detection off as surely as ``report`` does."""
    es = fc.qualified_entries()
    _bounds(es, "benchmark")["saturation_detection"][key] = value
    v = fc.verdict_of(tmp_path, es)
    assert fc.rejected(v)["benchmark"] == "spec-mismatch"
    assert label.split(",", maxsplit=1)[0] in _detail(v, "benchmark"), _detail(v, "benchmark")


def test_benchmark_with_a_shorter_minimum_duration_is_spec_mismatch(tmp_path: Path) -> None:
    """A policy that asks each run to last 30 s does not credit a run judged by no minimum duration (the
    campaign's ``min_duration_seconds = 0``); the same run judged by 30 s is credited."""
    policies = _policy_dir(tmp_path, benchmark_min_duration_s="30")
    es = fc.qualified_entries()
    v = fc.verdict_of(tmp_path, es, policy_dir=policies)
    assert fc.rejected(v)["benchmark"] == "spec-mismatch"
    assert "minimum seconds per run 0, approved 30" in _detail(v, "benchmark")
    _bounds(es, "benchmark")["min_duration_s"] = 30
    assert fc.verdict_of(tmp_path, es, policy_dir=policies)["verdict"] == QUALIFIED


@pytest.mark.parametrize(
    ("field", "value", "phrase"),
    [
        ("max_error_rate", 0.5, "maximum error rate per run 0.5, approved 0"),
        ("min_requests", 48, "minimum completions per run 48, approved 96"),
        ("min_duration_s", 5.0, "minimum seconds per run 5, approved 0"),
    ],
)
def test_benchmark_judged_by_a_weaker_validity_rule_is_spec_mismatch(
    tmp_path: Path, field: str, value: Any, phrase: str
) -> None:
    es = fc.qualified_entries()
    _bounds(es, "benchmark")[field] = value
    v = fc.verdict_of(tmp_path, es)
    assert fc.rejected(v)["benchmark"] == "spec-mismatch"
    assert phrase in _detail(v, "benchmark"), _detail(v, "benchmark")
    assert v["verdict"] == "INCONCLUSIVE"


# each validity field, and a name it might be recorded under by mistake (the campaign's own key, a case)
VALIDITY_FIELDS = {
    "saturation": "over_saturation",
    "min_requests": "minRequests",
    "min_duration_s": "min_duration_seconds",
    "max_error_rate": "max-error-rate",
    "saturation_detection": "saturationDetection",
}


@pytest.mark.parametrize("field", VALIDITY_FIELDS)
@pytest.mark.parametrize("how", ["dropped", "renamed", "null"])
def test_benchmark_that_does_not_record_its_validity_rules_is_spec_mismatch(
    tmp_path: Path, field: str, how: str
) -> None:
    """A value not recorded cannot be compared: "… not recorded, approved …" (fail closed)."""
    es = fc.qualified_entries()
    bounds = _bounds(es, "benchmark")
    value = bounds.pop(field)
    if how == "renamed":
        bounds[VALIDITY_FIELDS[field]] = value
    elif how == "null":
        bounds[field] = None
    v = fc.verdict_of(tmp_path, es)
    assert fc.rejected(v)["benchmark"] == "spec-mismatch"
    assert "not recorded, approved" in _detail(v, "benchmark")
    assert v["verdict"] == "INCONCLUSIVE"


@pytest.mark.parametrize("key", ["min_gain", "latency_factor", "min_points", "min_duration_s"])
def test_benchmark_saturation_detection_threshold_dropped_is_spec_mismatch(tmp_path: Path, key: str) -> None:
    es = fc.qualified_entries()
    del _bounds(es, "benchmark")["saturation_detection"][key]
    v = fc.verdict_of(tmp_path, es)
    assert fc.rejected(v)["benchmark"] == "spec-mismatch"
    assert "not recorded, approved" in _detail(v, "benchmark")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("saturation", "off"),
        ("saturation", True),
        ("min_requests", "96"),
        ("min_requests", 95.5),
        ("min_duration_s", "0"),
        ("min_duration_s", -1),
        ("max_error_rate", "0"),
        ("max_error_rate", 2),
        ("saturation_detection", "default"),
        ("saturation_detection", {"min_points": "10"}),
        ("saturation_detection", {"latency_factor": False}),
    ],
)
def test_benchmark_validity_rules_of_the_wrong_type_are_refused_at_ingest(
    tmp_path: Path, field: str, value: Any
) -> None:
    """A text for a number, a boolean for a word, a rate above 1: refused with the field named, never
    stored and read as something else (``HarnessBounds``)."""
    es = fc.qualified_entries()
    _bounds(es, "benchmark")[field] = value
    with pytest.raises(SchemaError, match=rf"bounds\.{field}"):
        fc.verdict_of(tmp_path, es)


def test_benchmark_validity_numbers_compare_by_value(tmp_path: Path) -> None:
    """The neighbour: ``0`` is ``0.0`` and ``96.0`` is 96 (JSON numbers), as the spec's counts compare."""
    es = fc.qualified_entries()
    _bounds(es, "benchmark").update(min_requests=96.0, min_duration_s=0, max_error_rate=0)
    assert fc.verdict_of(tmp_path, es)["verdict"] == QUALIFIED


def _llamacpp(es: list[dict[str, Any]]) -> None:
    """The campaign's approved engine is llama.cpp (llama-cpp-python's server: one request at a time)."""
    fc.entry(es, "campaign-job")["payload"]["spec"]["bindings"]["engine"] = "llamacpp"
    launch = fc.entry(es, "launch")["payload"]
    launch["engine"] = launch["bindings"]["engine"] = "llamacpp"


def test_over_saturation_reported_is_approved_only_for_the_engines_the_policy_names(tmp_path: Path) -> None:
    """``benchmark_saturation_report_engines``: for llama.cpp the policy approves a run whose
    over-saturation is reported (c4 and c32 can only queue; the TTFT bound still judges) …"""
    es = fc.qualified_entries()
    _llamacpp(es)
    subject = as_backend(es, "llamacpp")  # fix 95: the campaign labelled as the engine it ran
    _bounds(es, "benchmark")["saturation"] = "report"
    assert fc.verdict_of(tmp_path, es, subject=subject)["verdict"] == QUALIFIED
    # … as well as one judged by the stricter rule (over-saturation invalidates the run) …
    _bounds(es, "benchmark")["saturation"] = "invalid"
    assert fc.verdict_of(tmp_path, es, subject=subject)["verdict"] == QUALIFIED
    # … but not one that records neither
    del _bounds(es, "benchmark")["saturation"]
    v = fc.verdict_of(tmp_path, es)
    assert "over-saturation not recorded, approved report" in _detail(v, "benchmark")
    # … while a campaign whose job names no engine gets the policy's default
    es = fc.qualified_entries()
    del fc.entry(es, "campaign-job")["payload"]["spec"]["bindings"]["engine"]
    _bounds(es, "benchmark")["saturation"] = "report"
    v = fc.verdict_of(tmp_path, es)
    assert "over-saturation report, approved invalid" in _detail(v, "benchmark")


# --- the harnesses record it ---------------------------------------------------------------------------


def test_semantic_harness_records_the_models_the_endpoint_served(tmp_path: Path) -> None:
    with serve_stub(StubConfig(model_id="tiny", tokens=2)) as base:
        result = run_semantic(SemanticSpec(SEMANTIC, corpus_digest(SEMANTIC)), base, out_dir=tmp_path / "o")
    assert result.outcome == "completed"
    assert result.bindings == [{"served_models": "tiny"}] * 2  # before the first item, after the last
    payload = semantic_gate_payload(result, min_score=1.0)
    assert payload["bounds"]["bindings"] == {"served_models": "tiny"}
    HarnessBounds.model_validate(payload["bounds"])


def test_semantic_run_whose_endpoint_changed_its_model_fails_its_gate(tmp_path: Path) -> None:
    served = iter([{"served_models": "tiny"}, {"served_models": "other"}])
    with serve_stub(StubConfig(tokens=2)) as base:
        result = run_semantic(
            SemanticSpec(SEMANTIC, corpus_digest(SEMANTIC)),
            base,
            out_dir=tmp_path / "o",
            bindings=lambda: next(served),
        )
    payload = semantic_gate_payload(result, min_score=0.01)
    assert payload["status"] == "failed"
    assert "bindings changed during the run" in payload["reason"]
    assert payload["bounds"]["bindings"] == {"served_models": "tiny"}


def test_semantic_run_of_an_endpoint_that_cannot_say_its_model_is_an_engine_fault(tmp_path: Path) -> None:
    def unreadable() -> dict[str, str]:
        raise ValueError("/v1/models answered HTTP 404")

    with serve_stub(StubConfig(tokens=2)) as base:
        result = run_semantic(
            SemanticSpec(SEMANTIC, corpus_digest(SEMANTIC)), base, out_dir=tmp_path / "o", bindings=unreadable
        )
    assert result.outcome == "fault" and result.items == []  # no item asked
    payload = semantic_gate_payload(result, min_score=1.0)
    assert payload["status"] == "failed" and "bindings unavailable" in payload["reason"]
    assert payload["bounds"]["bindings"] == {}


def test_benchmark_result_records_the_validity_rules_it_judged_with(tmp_path: Path) -> None:
    approved = policy_validity(SHIPPED.params, "vllm")
    spec = BenchmarkSpec(
        BENCH, corpus_digest(BENCH), concurrency=(1,), requests_per_level=4, repetitions=1, **approved
    )
    with serve_stub(StubConfig(tokens=2)) as base:
        result = run_benchmark(spec, base, out_dir=tmp_path / "o")
    bounds = benchmark_gate_payload(result, {})["bounds"]
    assert bounds["saturation"] == "invalid"
    assert bounds["min_requests"] == 4 and bounds["min_duration_s"] == 0 and bounds["max_error_rate"] == 0
    assert bounds["saturation_detection"] == SHIPPED.params["benchmark_saturation_detection"]
    assert bounds["bindings"] == {"served_models": "stub-model"}
    HarnessBounds.model_validate(bounds)


# --- the campaign cannot set its own bar ---------------------------------------------------------------


def test_the_policy_sets_how_benchmark_runs_are_judged_valid() -> None:
    assert policy_validity(SHIPPED.params, "vllm") == {
        "saturation": "invalid",
        "min_requests": None,
        "min_duration_s": 0,
        "max_error_rate": 0,
        "saturation_min_gain": 0.1,
        "saturation_latency_factor": 2.0,
        "saturation_min_points": 10,
        "saturation_min_duration_s": 30.0,
    }
    assert policy_validity(SHIPPED.params, "llamacpp")["saturation"] == "report"
    assert policy_validity(SHIPPED.params)["saturation"] == "invalid"


@pytest.mark.parametrize(
    ("param", "value"),
    [
        ("benchmark_saturation", None),
        ("benchmark_saturation", "off"),
        ("benchmark_min_duration_s", "30"),
        ("benchmark_max_error_rate", None),
        ("benchmark_saturation_detection", {"latency_factor": 2.0}),
        ("benchmark_saturation_report_engines", "llamacpp"),
    ],
)
def test_a_policy_without_usable_validity_params_runs_no_benchmark(param: str, value: Any) -> None:
    params = copy.deepcopy(dict(SHIPPED.params))
    if value is None:
        del params[param]
    else:
        params[param] = value
    with pytest.raises(ConfigError, match=param.removeprefix("benchmark_")):
        policy_validity(params, "vllm")


# each kind runs its own program (a kind running another kind's is refused at load, audit 64 f1)
_COMMANDS = {
    # each names its served model (fix 88: the engine's default id, its model path, is refused at load)
    "vllm": ["vllm", "serve", "--model", "{model}", "--served-model-name", "{served_name}"],
    "llamacpp": [
        "{python}",
        "-m",
        "llama_cpp.server",
        "--model",
        "{model}",
        "--model_alias",
        "{served_name}",
    ],
}


def _campaign(tmp_path: Path, extra: str, kind: str = "vllm") -> Path:
    text = f"""
[campaign]
id = "validity"

[model]
path = "{tmp_path}"
served_name = "m"

[engine]
kind = "{kind}"
command = {json.dumps(_COMMANDS[kind])}

[gates.benchmark]
enabled = true
corpus = "{BENCH}"
digest = "{corpus_digest(BENCH)}"
{extra}
"""
    p = tmp_path / "campaign.toml"
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    ("extra", "kind"),
    [
        ('saturation = "report"', "vllm"),
        ("min_duration_seconds = 5", "llamacpp"),
        ("max_error_rate = 0.1", "vllm"),
    ],
)
def test_a_campaign_that_sets_another_validity_rule_than_the_policy_is_refused(
    tmp_path: Path, ledger: Ledger, extra: str, kind: str
) -> None:
    """Regression: ``[gates.benchmark] saturation``, ``min_duration_seconds`` and ``max_error_rate`` were
    the campaign's: its runs were judged by its own rule. Set, they must be the policy's; else nothing
    runs (before anything is recorded)."""
    c = load_campaign(_campaign(tmp_path, extra, kind))
    key = extra.split(" =", maxsplit=1)[0]
    ledger.new_key("collector", ["collector"])
    size = ledger.size()
    with pytest.raises(ConfigError, match=rf"\[gates\.benchmark\] {key} = .*leave {key} out"):
        CampaignRunner(
            c,
            LocalRecorder(ledger, "collector"),
            work_dir=tmp_path / "w",
            handle_signals=False,
            policy=SHIPPED,
        )
    assert ledger.size() == size  # nothing recorded


@pytest.mark.parametrize(
    ("extra", "kind", "saturation"),
    [
        ("", "vllm", "invalid"),
        ("", "llamacpp", "report"),
        ('saturation = "report"', "llamacpp", "report"),
        ('saturation = "invalid"', "llamacpp", "invalid"),  # the stricter rule: credited too
        ('saturation = "invalid"', "vllm", "invalid"),
    ],
)
def test_a_campaign_takes_the_policys_validity_rules(
    tmp_path: Path, extra: str, kind: str, saturation: str
) -> None:
    c = load_campaign(_campaign(tmp_path, extra, kind))
    assert benchmark_validity(c, SHIPPED)["saturation"] == saturation


def test_a_campaign_validity_key_of_the_wrong_type_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"gates\.benchmark\.saturation"):
        load_campaign(_campaign(tmp_path, 'saturation = "off"'))
    with pytest.raises(ConfigError, match=r"gates\.benchmark\.min_duration_seconds"):
        load_campaign(_campaign(tmp_path, 'min_duration_seconds = "five"'))


CAMPAIGN_FILES = sorted(
    [*(REPO / "campaigns").glob("*.toml"), *(REPO / "campaigns" / "templates").glob("*.toml")]
)


@pytest.mark.parametrize("path", CAMPAIGN_FILES, ids=lambda p: p.name)
def test_the_shipped_campaigns_take_the_policys_validity_rules(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The demo's llama.cpp campaign and the templates run under the shipped policy as they stand."""
    for var in ("MODEL_DIR", "MODEL_FILE", "VLLM_PYTHON", "LLAMACPP_PYTHON"):  # what the templates read
        monkeypatch.setenv(var, "/opt/x")
    c = load_campaign(path)
    if c.spec.gates.benchmark.enabled:
        expected = "report" if c.spec.engine.kind == "llamacpp" else "invalid"
        assert benchmark_validity(c, SHIPPED)["saturation"] == expected


@pytest.mark.parametrize("gate", ["semantic", "benchmark"])
def test_both_harness_gates_type_their_served_models_alike(gate: str) -> None:
    ok = {"gate": gate, "status": "failed", "bounds": {"bindings": {"served_models": "m"}}}
    validate_payload("gate.result", 1, ok)
    bad = {"gate": gate, "status": "failed", "bounds": {"bindings": {"served_models": ["m"]}}}
    with pytest.raises(SchemaError, match=r"bounds\.bindings\.served_models"):
        validate_payload("gate.result", 1, bad)
