"""Fix 41 (issue 11, derive, don't trust claims).

1. Whether c1 parity had to compare token ids was learnt from the benchmark result's own
   ``bounds.request_token_ids``: a result that dropped (or falsified) it was read as "not asked" and its
   text-only parity credited. What the campaign asked is now its job's approved spec
   (``spec.bindings.request_token_ids``, the manifest), and the policy judges the result against it.
2. The standalone ``ledger collect benchmark --engine llamacpp`` recorded ``saturation = "report"`` from
   the flag; the exemption needs the engine's version detected (as in a campaign), which a standalone run
   has none of: ``--saturation report`` is refused before anything is recorded, and ``--engine`` alone is
   judged by the policy's default rule.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ledger.collectors.campaign import REQUEST_TOKEN_IDS, CampaignRunner, engine_validity, load_campaign
from ledger.entries import validate_payload
from ledger.errors import ConfigError, SchemaError
from ledger.hashing import blake3_hex
from ledger.policy.loader import load_policy
from ledger.recorder import LocalRecorder
from tests.engines.stub_openai import StubConfig, serve_stub
from tests.policy import test_fail_closed as fc

from .conftest import REPO, run_ledger
from .test_harness_gates import SEMANTIC_ITEMS, policy_with, stub_campaign

QUALIFIED = "QUALIFIED"
SHIPPED = load_policy("backend-qualification")
BENCH = REPO / "campaigns" / "corpora" / "bench-tiny.jsonl"
BENCH_DIGEST = "blake3:bfef1eb8aa1c4ed5c7c2a49036f79dd2653cb993594020b1e6c7f66b5f8e7254"
_DROP = object()


def _campaign(es: list[dict[str, Any]], asked: Any) -> None:
    """What the campaign's job records it asked for (``_DROP``: an older job that records nothing)."""
    bindings = fc.entry(es, "campaign-job")["payload"]["spec"]["bindings"]
    if asked is _DROP:
        bindings.pop(REQUEST_TOKEN_IDS, None)
    else:
        bindings[REQUEST_TOKEN_IDS] = asked


def _result(es: list[dict[str, Any]], claims: Any, by: Any) -> None:
    """What the benchmark result claims it asked for (``_DROP``: the field dropped) and compared by."""
    bounds = fc.entry(es, "benchmark")["payload"]["bounds"]
    if claims is _DROP:
        bounds.pop("request_token_ids", None)
    else:
        bounds["request_token_ids"] = claims
    bounds["parity"]["by"] = by


def _detail(v: dict[str, Any]) -> str:
    return next(r["detail"] for r in v["rejected"] if v["_names"].get(r["entry"]) == "benchmark")


# --- 1: what c1 parity compared is judged by what the campaign asked ----------------------------------


def test_text_parity_of_a_result_that_dropped_request_token_ids_is_not_credited_when_the_campaign_asked(
    tmp_path: Path,
) -> None:
    es = fc.qualified_entries()
    _campaign(es, "true")
    _result(es, _DROP, "text")
    v = fc.verdict_of(tmp_path, es)
    assert v["verdict"] == "INCONCLUSIVE", v["verdict"]
    assert fc.rejected(v)["benchmark"] == "spec-mismatch"
    detail = _detail(v)
    assert "c1 parity compared by text, approved token_ids" in detail
    assert "token ids requested not recorded, approved true" in detail


def test_text_parity_of_a_result_that_falsely_says_ids_were_not_asked_is_not_credited(tmp_path: Path) -> None:
    es = fc.qualified_entries()
    _campaign(es, "true")
    _result(es, False, "text")
    v = fc.verdict_of(tmp_path, es)
    assert fc.rejected(v)["benchmark"] == "spec-mismatch"
    detail = _detail(v)
    assert "c1 parity compared by text, approved token_ids" in detail
    assert "token ids requested false, approved true" in detail


@pytest.mark.parametrize(
    ("asked", "claims", "by", "credited", "said"),
    [
        ("false", False, "text", True, None),  # not asked, compared text: as approved
        ("true", True, "token_ids", True, None),  # asked and compared ids
        ("false", _DROP, "text", False, "token ids requested not recorded, approved false"),
        ("false", None, "text", False, "token ids requested not recorded, approved false"),  # null
        ("false", True, "token_ids", False, "token ids requested true, approved false"),  # disagrees
        ("true", True, "text", False, "c1 parity compared by text, approved token_ids"),  # fell back
        ("true", True, None, False, "c1 parity compared by not recorded, approved token_ids"),
    ],
)
def test_neighbour_the_result_is_judged_against_what_the_job_records(
    tmp_path: Path, asked: str, claims: Any, by: Any, credited: bool, said: str | None
) -> None:
    es = fc.qualified_entries()
    _campaign(es, asked)
    _result(es, claims, by)
    v = fc.verdict_of(tmp_path, es)
    assert (v["verdict"] == QUALIFIED) is credited, (v["verdict"], v["rejected"])
    if said is not None:
        assert fc.rejected(v)["benchmark"] == "spec-mismatch"
        assert said in _detail(v), _detail(v)


@pytest.mark.parametrize(
    ("claims", "by", "credited"),
    [
        (False, "text", False),  # text: what was asked cannot be told, so it is not the check asked for
        (_DROP, "text", False),
        (True, "text", False),
        (True, "token_ids", True),  # compared token ids: the repeatability check, whatever was asked
        (_DROP, "token_ids", True),
    ],
)
def test_neighbour_an_older_job_that_records_nothing_is_judged_fail_closed(
    tmp_path: Path, claims: Any, by: str, credited: bool
) -> None:
    """An older job (or a standalone run with no job) records no request_token_ids: the result's own
    claim is not taken, so only a run that compared token ids is credited."""
    es = fc.qualified_entries()
    _campaign(es, _DROP)
    _result(es, claims, by)
    v = fc.verdict_of(tmp_path, es)
    assert (v["verdict"] == QUALIFIED) is credited, (v["verdict"], v["rejected"])
    if not credited:
        assert "c1 parity compared by text, approved token_ids" in _detail(v)


def test_neighbour_two_jobs_that_disagree_on_request_token_ids_credit_no_text_parity(tmp_path: Path) -> None:
    es = fc.qualified_entries()
    _campaign(es, "false")
    _result(es, False, "text")
    job = fc.entry(es, "campaign-job")
    later = json.loads(json.dumps(job))
    later["name"] = "campaign-job-2"
    later["at"] = "2026-09-10T10:05:00Z"
    later["payload"]["job_id"] = "campaign-2"
    later["payload"]["spec"]["bindings"][REQUEST_TOKEN_IDS] = "true"
    es.insert(es.index(job) + 1, later)
    v = fc.verdict_of(tmp_path, es)
    assert v["verdict"] != QUALIFIED
    assert fc.rejected(v)["benchmark"] == "spec-mismatch"
    assert "c1 parity compared by text, approved token_ids" in _detail(v)


def test_neighbour_a_misspelled_request_token_ids_binding_is_not_read_as_absent(tmp_path: Path) -> None:
    es = fc.qualified_entries()
    bindings = fc.entry(es, "campaign-job")["payload"]["spec"]["bindings"]
    bindings["request_token_id"] = bindings.pop(REQUEST_TOKEN_IDS)
    _result(es, False, "text")
    v = fc.verdict_of(tmp_path, es)
    assert v["verdict"] != QUALIFIED


@pytest.mark.parametrize("value", [True, "True", "yes", "1", "", None])
def test_neighbour_a_mistyped_request_token_ids_binding_is_refused_at_ingest(value: Any) -> None:
    payload = {"job_id": "j", "state": "running", "spec": {"bindings": {REQUEST_TOKEN_IDS: value}}}
    with pytest.raises(SchemaError, match=r"request_token_ids|bindings must be an object of strings"):
        validate_payload("job", 1, payload)


@pytest.mark.parametrize("value", ["true", "false"])
def test_neighbour_request_token_ids_binding_true_or_false_is_taken(value: str) -> None:
    validate_payload(
        "job", 1, {"job_id": "j", "state": "running", "spec": {"bindings": {REQUEST_TOKEN_IDS: value}}}
    )


@pytest.mark.parametrize(("asked", "recorded"), [(True, "true"), (False, "false"), (None, "false")])
def test_the_campaign_job_records_what_its_benchmark_asks_for(
    tmp_path: Path,
    tiny_model_dir: Path,
    recorder: LocalRecorder,
    asked: bool | None,
    recorded: str,
) -> None:
    sem = tmp_path / "semantic.jsonl"
    sem.write_text("".join(json.dumps(i) + "\n" for i in SEMANTIC_ITEMS))
    digest = f"blake3:{blake3_hex(sem.read_bytes())}"
    path = stub_campaign(tmp_path, tiny_model_dir, (sem, digest))
    if asked is not None:
        text = path.read_text().replace(
            "[gates.benchmark]\n", f"[gates.benchmark]\nrequest_token_ids = {str(asked).lower()}\n"
        )
        path.write_text(text)
    runner = CampaignRunner(
        load_campaign(path),
        recorder,
        work_dir=tmp_path / "work",
        handle_signals=False,
        policy=policy_with(tmp_path, digest),
    )
    bindings = runner._job_spec()["bindings"]
    assert bindings[REQUEST_TOKEN_IDS] == recorded
    validate_payload("job", 1, {"job_id": "j", "state": "running", "spec": {"bindings": bindings}})


# --- 2: the standalone benchmark follows the campaign's rule for the exemption -------------------------


def _said(field: str, value: Any) -> str:
    return f"--{field}" if value is None else f"--{field} {value}"


def test_engine_validity_grants_the_exemption_only_to_a_detected_engine_version() -> None:
    def saturation(version: str | None) -> str:
        validity = engine_validity(
            SHIPPED.params, "llamacpp", version, {}, policy="p", said=_said, claimed_by="--engine"
        )
        return str(validity["saturation"])

    assert saturation("0.3.16") == "report"
    assert saturation(None) == "invalid"
    with pytest.raises(ConfigError, match=r"no llama-cpp-python version was detected.*not --engine"):
        engine_validity(
            SHIPPED.params,
            "llamacpp",
            None,
            {"saturation": "report"},
            policy="p",
            said=_said,
            claimed_by="--engine",
        )


def test_standalone_benchmark_engine_flag_does_not_earn_the_saturation_exemption(home: Path) -> None:
    r = run_ledger(
        "--home", str(home), "collect", "benchmark", "http://127.0.0.1:9", "--corpus", str(BENCH),
        "--digest", BENCH_DIGEST, "--saturation", "report", "--engine", "llamacpp", "-c", "cli-fix41",
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert "--saturation report" in r.stderr and "leave --saturation out" in r.stderr
    assert "no llama-cpp-python version was detected" in r.stderr
    logged = run_ledger("--home", str(home), "log", "-s", "campaign=cli-fix41", "--json").stdout
    assert json.loads(logged)["items"] == []  # nothing recorded


@pytest.mark.parametrize(("engine", "notice"), [("llamacpp", True), ("vllm", False), (None, False)])
def test_neighbour_standalone_benchmark_is_judged_by_the_default_rule(
    home: Path, engine: str | None, notice: bool
) -> None:
    more = ["--engine", engine] if engine else []
    with serve_stub(StubConfig(tokens=4)) as url:
        r = run_ledger(
            "collect", "benchmark", url, "--corpus", str(BENCH), "--digest", BENCH_DIGEST, "--levels", "1",
            "--requests", "4", "--repetitions", "1", *more, "-c", "cli-fix41-d", "--home", str(home),
            "--json",
        )  # fmt: skip
    assert r.returncode in (0, 1), r.stderr
    out = json.loads(r.stdout)
    assert out["bounds"]["saturation"] == "invalid"
    assert ("judged by the policy's default rules" in r.stderr) is notice, r.stderr


def test_neighbour_standalone_benchmark_may_name_the_stricter_rule(home: Path) -> None:
    with serve_stub(StubConfig(tokens=4)) as url:
        r = run_ledger(
            "collect", "benchmark", url, "--corpus", str(BENCH), "--digest", BENCH_DIGEST, "--levels", "1",
            "--requests", "4", "--repetitions", "1", "--saturation", "invalid", "--engine", "llamacpp",
            "-c", "cli-fix41-s", "--home", str(home), "--json",
        )  # fmt: skip
    assert r.returncode in (0, 1), r.stderr
    assert json.loads(r.stdout)["bounds"]["saturation"] == "invalid"
