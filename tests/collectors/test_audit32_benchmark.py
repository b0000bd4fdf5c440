"""Audit 32: the benchmark harness's repeatability, its corpus re-read and the policy that judges them.

f1: c1 repeatability compared output digests only — the same text generated as another number of tokens
(usage.completion_tokens 5, 4, 5, 4 …) gave c1_parity 1.0; a run that asked for token ids
(request_token_ids) from an engine that sent none fell back to text and was credited as token parity.
f8: the corpus file changing during a run raised (a digest mismatch) and lost every request made; the
run is recorded, invalid, with its requests. f9: a c1 parity below its bound is reported as c1
repeatability. f5 (policy side): the over-saturation exemption of an engine the policy names
(``benchmark_saturation_report_engines``) is granted only where the manifest binds a detected
``engine_version``, not for the campaign's ``[engine] kind`` alone.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import ledger.collectors.benchmark as benchmark_module
from ledger.collectors.benchmark import (
    REQUESTS_ARTIFACT,
    BenchmarkSpec,
    RequestRecord,
    benchmark_gate_payload,
    judge_bounds,
    parity_not_as_asked,
    repeatability,
    run_benchmark,
)
from ledger.collectors.corpus import corpus_digest
from ledger.entries import validate_payload
from ledger.errors import SchemaError
from tests.engines.stub_openai import StubConfig, serve_stub
from tests.policy import test_fail_closed as fc
from tests.policy.test_fix95_verdict_side import as_backend

QUALIFIED = "QUALIFIED"


def _rec(
    pid: str, rep: int, *, tokens: int | None = 5, text: str = "d1", ids: str | None = None
) -> RequestRecord:
    return RequestRecord(
        prompt_id=pid,
        level=1,
        repetition=rep,
        index=0,
        started_at="2026-01-01T00:00:00Z",
        start_s=0.0,
        output_tokens=tokens,
        tokens_from="usage" if tokens is not None else None,
        output_digest=text,
        token_ids_digest=ids,
    )


# --- f1: parity compares the output, tokens included --------------------------------------------------


def test_audit32_f1_same_text_with_another_token_count_is_no_parity() -> None:
    records = [_rec("p1", 0, tokens=5), _rec("p1", 1, tokens=4), _rec("p2", 0), _rec("p2", 1)]
    parity = repeatability(records)
    assert parity is not None
    assert (parity["compared"], parity["matched"], parity["fraction"]) == (2, 1, 0.5)
    assert parity["prompts_mismatched"] == ["p1"]
    assert parity["token_counts_differ"] == ["p1"]
    assert parity["by"] == "text" and parity["asked"] == "text"


@pytest.mark.parametrize(
    ("ref", "other", "same"),
    [
        ({}, {}, True),  # same text, same count
        ({}, {"text": "d2"}, False),  # another text
        ({}, {"tokens": 6}, False),  # another count
        ({"tokens": None}, {"tokens": None}, True),  # neither counted (same text)
        ({"tokens": None}, {}, False),  # one counted, one not
        ({"ids": "i1"}, {"ids": "i1", "tokens": 4}, True),  # by token ids where both carry them
        ({"ids": "i1"}, {"ids": "i2"}, False),
        ({"ids": "i1"}, {"tokens": 4}, False),  # one without ids: text and count
    ],
)
def test_audit32_f1_neighbour_what_a_comparison_compares(
    ref: dict[str, Any], other: dict[str, Any], same: bool
) -> None:
    parity = repeatability([_rec("p", 0, **ref), _rec("p", 1, **other)])
    assert parity is not None and parity["matched"] == int(same)


def test_audit32_f1_ids_asked_and_not_sent_is_not_parity_by_ids() -> None:
    records = [_rec("p1", 0), _rec("p1", 1)]
    parity = repeatability(records, token_ids_asked=True)
    assert parity is not None and parity["fraction"] == 1.0
    assert (parity["by"], parity["asked"]) == ("text", "token_ids")
    why = parity_not_as_asked(parity)
    assert why is not None and "c1 repeatability" in why and "token ids were asked for" in why
    # neighbours: ids asked and sent; not asked
    with_ids = repeatability([_rec("p1", 0, ids="i"), _rec("p1", 1, ids="i")], token_ids_asked=True)
    assert with_ids is not None and with_ids["by"] == "token_ids" and parity_not_as_asked(with_ids) is None
    assert parity_not_as_asked(repeatability(records)) is None
    assert parity_not_as_asked(None) is None
    # a record whose "asked" was dropped or renamed asks nothing of the harness; the policy judges
    # bounds.request_token_ids (below)
    assert parity_not_as_asked({**parity, "asked": None}) is None


def _corpus(tmp_path: Path, n: int = 3) -> Path:
    path = tmp_path / "corpus.jsonl"
    rows = [
        {"id": f"p{i}", "messages": [{"role": "user", "content": f"q{i}"}], "max_tokens": 4} for i in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _spec(corpus: Path, **kw: Any) -> BenchmarkSpec:
    base: dict[str, Any] = {"concurrency": (1,), "requests_per_level": 3, "repetitions": 2}
    return BenchmarkSpec(corpus, corpus_digest(corpus), **{**base, **kw})


def test_audit32_f1_a_run_asking_for_ids_of_an_engine_that_sends_none_is_invalid(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path)
    with serve_stub(StubConfig(tokens=2)) as base:  # sends no token ids
        result = run_benchmark(_spec(corpus, request_token_ids=True), base, out_dir=tmp_path / "o")
    assert result.parity is not None and result.parity["by"] == "text" and result.parity["fraction"] == 1.0
    assert not result.valid
    assert any("token ids were asked for" in r for r in result.invalid_reasons), result.invalid_reasons
    payload = benchmark_gate_payload(result, {"c1_parity": {"min": 1.0}})
    assert payload["status"] == "failed" and "token ids were asked for" in payload["reason"]
    assert payload["bounds"]["request_token_ids"] is True
    # neighbour: the same engine, ids not asked for: valid, by text
    with serve_stub(StubConfig(tokens=2)) as base:
        plain = run_benchmark(_spec(corpus), base, out_dir=tmp_path / "p")
    assert plain.valid and plain.parity is not None and plain.parity["asked"] == "text"
    assert benchmark_gate_payload(plain, {"c1_parity": {"min": 1.0}})["bounds"]["request_token_ids"] is False


@pytest.mark.parametrize("value", ["true", 1, None, [True]])
def test_audit32_f1_neighbour_request_token_ids_is_typed(value: Any) -> None:
    payload = {"gate": "benchmark", "status": "failed", "bounds": {"request_token_ids": value}}
    if value is None:
        validate_payload("gate.result", 1, payload)
        return
    with pytest.raises(SchemaError, match="request_token_ids"):
        validate_payload("gate.result", 1, payload)


def _asked_ids(es: list[dict[str, Any]], by: Any = "text", *, drop_by: bool = False) -> None:
    # the campaign asked for token ids (its job's approved spec: what the policy reads), and so did the run
    fc.entry(es, "campaign-job")["payload"]["spec"]["bindings"]["request_token_ids"] = "true"
    bounds = fc.entry(es, "benchmark")["payload"]["bounds"]
    bounds["request_token_ids"] = True
    bounds["parity"]["by"] = by
    if drop_by:
        del bounds["parity"]["by"]


def _detail(v: dict[str, Any], name: str) -> str:
    return next(r["detail"] for r in v["rejected"] if v["_names"].get(r["entry"]) == name)


def test_audit32_f1_policy_does_not_credit_text_parity_of_a_run_that_asked_for_ids(tmp_path: Path) -> None:
    es = fc.qualified_entries()
    _asked_ids(es, "text")
    v = fc.verdict_of(tmp_path, es)
    assert v["verdict"] == "INCONCLUSIVE", v["verdict"]
    assert fc.rejected(v)["benchmark"] == "spec-mismatch"
    assert "c1 parity compared by text, approved token_ids" in _detail(v, "benchmark")


@pytest.mark.parametrize(
    ("by", "drop", "credited"),
    [
        ("token_ids", False, True),  # asked and compared by ids
        (None, False, False),  # by null: not recorded
        ("", True, False),  # by dropped
        ("Token_IDs", False, False),  # misspelt
        (["token_ids"], False, False),  # mistyped
    ],
)
def test_audit32_f1_neighbour_parity_by_of_a_run_that_asked_for_ids(
    tmp_path: Path, by: Any, drop: bool, credited: bool
) -> None:
    es = fc.qualified_entries()
    _asked_ids(es, by, drop_by=drop)
    v = fc.verdict_of(tmp_path, es)
    assert (v["verdict"] == QUALIFIED) is credited, (v["verdict"], v["rejected"])
    if not credited:
        assert fc.rejected(v)["benchmark"] == "spec-mismatch"


@pytest.mark.parametrize("asked", [False, None])
def test_audit32_f1_neighbour_text_parity_of_a_run_that_did_not_ask_for_ids(
    tmp_path: Path, asked: Any
) -> None:
    es = fc.qualified_entries()
    bounds = fc.entry(es, "benchmark")["payload"]["bounds"]
    bounds["parity"]["by"] = "text"
    if asked is not None:
        bounds["request_token_ids"] = asked
    assert fc.verdict_of(tmp_path, es)["verdict"] == QUALIFIED


# --- f8: the corpus changing during the run -----------------------------------------------------------


@pytest.mark.parametrize("change", ["blank-line", "removed", "rewritten-same-prompts"])
def test_audit32_f8_a_corpus_changed_during_the_run_stops_it_keeping_its_requests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    corpus = _corpus(tmp_path)
    original = benchmark_module.load_benchmark_corpus
    calls = {"n": 0}

    def load(path: Path, digest: str) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:  # the re-read before repetition 1: the file changed meanwhile
            if change == "blank-line":
                path.write_text(path.read_text() + "\n")
            elif change == "removed":
                path.unlink()
            else:  # the same prompts in other bytes
                path.write_text(path.read_text().replace('", "', '","'))
        return original(path, digest)

    monkeypatch.setattr(benchmark_module, "load_benchmark_corpus", load)
    with serve_stub(StubConfig(tokens=2)) as base:
        result = run_benchmark(_spec(corpus), base, out_dir=tmp_path / "o")
    assert calls["n"] == 2
    # the corpus was moved under the run, not by the engine: an operator's stop (the policy's
    # `operator-stopped`: INCONCLUSIVE), never a failed benchmark blamed on the engine
    assert result.outcome == "operator-stop"
    assert result.stopped is not None and result.stopped.startswith("repetition 1: corpus changed")
    assert len(result.records) == 3  # repetition 0's requests: nothing dropped
    lines = (tmp_path / "o" / REQUESTS_ARTIFACT).read_text().splitlines()
    assert len(lines) == 3
    payload = benchmark_gate_payload(result, {"c1_parity": {"min": 1.0}})
    assert payload["bounds"]["outcome"] == "operator-stop" and "corpus changed" in payload["reason"]


def test_audit32_f8_neighbour_an_unchanged_corpus_is_a_valid_run(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path)
    with serve_stub(StubConfig(tokens=2)) as base:
        result = run_benchmark(_spec(corpus), base, out_dir=tmp_path / "o")
    assert result.valid, result.invalid_reasons


# --- f9: c1 parity below its bound is c1 repeatability ------------------------------------------------


def test_audit32_f9_c1_parity_below_its_bound_says_repeatability() -> None:
    failures, _ = judge_bounds({"c1_parity": 0.8}, {"c1_parity": {"min": 1.0, "max": 1.0}})
    assert failures == [
        "c1 repeatability FAIL (token parity across repetitions at temperature 0): "
        "c1_parity = 0.8 below the bound 1"
    ]
    # neighbours: within the bound; another figure; missing (not measured, no FAIL claimed)
    assert judge_bounds({"c1_parity": 1.0}, {"c1_parity": {"min": 1.0}})[0] == []
    assert judge_bounds({"ttft_ms.p95@c4": 3.0}, {"ttft_ms.p95@c4": {"max": 2}})[0] == [
        "ttft_ms.p95@c4 = 3 above the bound 2"
    ]
    assert judge_bounds({"c1_parity": None}, {"c1_parity": {"min": 1}})[0] == [
        "c1_parity: figure missing (not measured)"
    ]


def test_audit32_f9_the_verdict_names_repeatability(tmp_path: Path) -> None:
    es = fc.qualified_entries()
    p = fc.entry(es, "benchmark")["payload"]
    p["status"] = "failed"
    p["figures"]["c1_parity"] = 0.8
    p["bounds"]["parity"].update(matched=77, fraction=0.802083)
    failures, _ = judge_bounds(p["figures"], {"c1_parity": {"min": 1.0}})
    p["reason"] = "; ".join(failures)
    v = fc.verdict_of(tmp_path, es)
    assert v["verdict"] == "NOT QUALIFIED — PERFORMANCE"  # the policy's ladder word
    assert "c1 repeatability FAIL" in json.dumps(v, ensure_ascii=False)


# --- f5 (policy): the over-saturation exemption follows the detected engine ---------------------------


def _llamacpp(es: list[dict[str, Any]], version: Any = "0.3.16", *, drop: bool = False) -> dict[str, str]:
    """The job's manifest names llama.cpp; ``version``: the engine_version it binds (and its launch).
    Returns the subject to judge: the campaign's backend is the engine it ran (559d6e5, engine-contradicted:
    a backend its jobs and launches contradict is INCONCLUSIVE whatever the benchmark shows)."""
    subject = as_backend(es, "llamacpp")
    job = fc.entry(es, "campaign-job")["payload"]["spec"]["bindings"]
    launch = fc.entry(es, "launch")["payload"]
    job["engine"] = "llamacpp"
    launch["engine"] = launch["bindings"]["engine"] = "llamacpp"
    # the launch runs the job's env snapshot's interpreter: the host gate binds the snapshot to the engine by
    # it (the shared snapshot lists vllm's package, fix 163)
    launch["command"] = [fc.entry(es, "env")["payload"]["interpreter"], "-m", "llama_cpp.server"]
    for b in (job, launch["bindings"]):
        if drop:
            b.pop("engine_version", None)
        else:
            b["engine_version"] = version
    fc.entry(es, "benchmark")["payload"]["bounds"]["saturation"] = "report"
    return subject


def test_audit32_f5_no_exemption_for_an_engine_whose_version_was_not_detected(tmp_path: Path) -> None:
    es = fc.qualified_entries()
    subject = _llamacpp(es, drop=True)
    v = fc.verdict_of(tmp_path, es, subject=subject)
    assert v["verdict"] == "INCONCLUSIVE", v["verdict"]
    assert fc.rejected(v)["benchmark"] == "spec-mismatch"
    assert "over-saturation report, approved invalid" in _detail(v, "benchmark")


@pytest.mark.parametrize(
    ("version", "drop", "credited"),
    [
        ("0.3.16", False, True),  # detected: the exemption holds
        ("", False, False),  # an empty version detects nothing
        (None, True, False),  # dropped
    ],
)
def test_audit32_f5_neighbour_the_exemption_needs_a_bound_engine_version(
    tmp_path: Path, version: Any, drop: bool, credited: bool
) -> None:
    es = fc.qualified_entries()
    subject = _llamacpp(es, version, drop=drop)
    v = fc.verdict_of(tmp_path, es, subject=subject)
    assert (v["verdict"] == QUALIFIED) is credited, (v["verdict"], v["rejected"])


def test_audit32_f5_neighbour_the_strict_rule_is_credited_without_a_version(tmp_path: Path) -> None:
    es = fc.qualified_entries()
    subject = _llamacpp(es, drop=True)
    fc.entry(es, "benchmark")["payload"]["bounds"]["saturation"] = "invalid"
    assert fc.verdict_of(tmp_path, es, subject=subject)["verdict"] == QUALIFIED
