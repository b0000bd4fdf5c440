"""Fix 153 (audit 101 f1, issue 11): both harnesses record the endpoint they measured, and a standalone run
during a campaign's job is credited only where it measured the engine the job launched.

* ``run_semantic`` and ``run_benchmark`` record ``bounds.endpoint``: the base URL they were given, without a
  trailing ``/`` — the prefix of every URL they asked, as a probe's ``endpoint`` is its base URL and path.
* Under ``ledger collect run`` the harnesses are given the base URL the launch records
  (``details.base_url``), so the collector's own runs always match (rule ``harness-other-endpoint``).
* A standalone ``ledger collect semantic URL -c CAMPAIGN`` while the job runs: at the job's own engine
  endpoint it is credited; at another server (another port, the same model id: audit 101 f1) it is not.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ledger.collectors.benchmark import benchmark_gate_payload, run_benchmark
from ledger.collectors.semantic import run_semantic, semantic_gate_payload
from ledger.policy.acceptance import COLLECTOR_COMMIT
from ledger.policy.names import HARNESS_OTHER_ENDPOINT, endpoint_key
from ledger.policy.verdict import evaluate
from ledger.service import Ledger
from tests.engines.stub_openai import StubConfig, serve_stub

from .conftest import LEDGER, REPO, entries_of, free_port
from .test_audit10_harness import BOUNDS, MODEL, _corpus, _semantic_spec, _spec, serve, sse
from .test_harness_gates import (
    ANSWERS,
    SEMANTIC_ITEMS,
    _wait_for_gate,
    policy_with,
    stub_campaign,
)

# the commit under review, stated in the campaign (``[campaign] commit``) and reviewed: the shared checkout
# may be dirty, and a dirty checkout binds no code commit
HEAD = subprocess.run(
    ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
).stdout.strip()


def _review_and_accept(ledger: Ledger, *entries: str) -> None:
    """A review PASS of ``HEAD`` for each of ``entries`` and an acceptance by an operator."""
    if ledger.keyring().by_name("reviewer") is None:
        ledger.new_key("reviewer", ["reviewer"])
        ledger.new_key("operator", ["operator"])
    for eid in entries:
        subject = dict(ledger.get(eid).statement.subject)
        ledger.record(
            "review", subject, {"result": "PASS", "commit": HEAD}, key="reviewer", refs=[("reviews", eid)]
        )
        ledger.record(
            "acceptance",
            subject,
            {"decision": "accepted", "reason": "ok"},
            key="operator",
            refs=[("subject", eid)],
        )


@pytest.mark.parametrize("given", ["", "/"], ids=["as-given", "trailing-slash"])
def test_both_harnesses_record_the_endpoint_they_measured(tmp_path: Path, given: str) -> None:
    corpus = _corpus(tmp_path)
    with serve(lambda _b, _n: sse(model=MODEL)) as base:
        bench = run_benchmark(_spec(corpus), base + given, out_dir=tmp_path / "b")
        sem = run_semantic(_semantic_spec(tmp_path), base + given, out_dir=tmp_path / "s")
    assert bench.endpoint == base and sem.endpoint == base
    assert benchmark_gate_payload(bench, BOUNDS)["bounds"]["endpoint"] == base
    assert semantic_gate_payload(sem, min_score=1.0)["bounds"]["endpoint"] == base
    # … in the form the policy compares (``endpoint_key``), and in the result the run writes
    assert endpoint_key(base) == base
    assert json.loads((tmp_path / "b" / "benchmark-result.json").read_text())["endpoint"] == base


def test_a_run_that_faults_before_any_request_still_records_its_endpoint(tmp_path: Path) -> None:
    """The endpoint is the one the run was given, known before any request: a server that cannot say what
    it serves (an engine fault before the first item) is still named."""
    port = free_port()  # nothing listens there
    base = f"http://127.0.0.1:{port}"
    sem = run_semantic(_semantic_spec(tmp_path), base, out_dir=tmp_path / "s")
    assert sem.outcome == "fault"
    assert semantic_gate_payload(sem, min_score=1.0)["bounds"]["endpoint"] == base


def _campaign(tmp_path: Path, model_dir: Path, port: int) -> tuple[Path, Any, tuple[Path, str]]:
    """The stub campaign on a fixed port, its semantic gate left to a standalone run (as audit 101 f1)."""
    sem = tmp_path / "semantic.jsonl"
    sem.write_text("".join(json.dumps(i) + "\n" for i in SEMANTIC_ITEMS))
    from ledger.hashing import blake3_hex

    corpus = (sem, f"blake3:{blake3_hex(sem.read_bytes())}")
    policy = policy_with(tmp_path, corpus[1])
    path = stub_campaign(tmp_path, model_dir, corpus, stub_args=("--ttft-ms", "150"))
    text = path.read_text()
    text = text.replace('kind = "generic"\n', f'kind = "generic"\nport = {port}\n', 1)
    text = text.replace("[campaign]\n", f'[campaign]\ncommit = "{HEAD}"\n', 1)
    text = text.replace("[gates.semantic]\nenabled = true", "[gates.semantic]\nenabled = false", 1)
    assert f"port = {port}" in text and "enabled = false" in text
    path.write_text(text)
    return path, policy, corpus


@pytest.mark.slow
@pytest.mark.parametrize("where", ["the-jobs-own-engine", "another-server"])
def test_a_standalone_semantic_run_during_the_job_is_credited_only_at_the_launchs_endpoint(
    tmp_path: Path, tiny_model_dir: Path, home: Path, where: str
) -> None:
    port = free_port()
    path, policy, corpus = _campaign(tmp_path, tiny_model_dir, port)
    own = f"http://127.0.0.1:{port}"
    with serve_stub(StubConfig(model_id="stub-model", answers=dict(ANSWERS))) as other:
        url = own if where == "the-jobs-own-engine" else other
        proc = subprocess.Popen(
            [
                *LEDGER,
                "collect",
                "run",
                str(path),
                "--home",
                str(home),
                "--policy",
                str(policy.path),
                "--json",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            _wait_for_gate(home, "semantic", proc)  # the collector's own step (not run): its benchmark runs
            lg = Ledger.open(home)
            try:
                [job] = [j for j in entries_of(lg, "job") if j["payload"]["state"] == "running"]
            finally:
                lg.close()
            subject = [a for k, v in job["subject"].items() if k != "campaign" for a in ("-s", f"{k}={v}")]
            campaign = job["subject"]["campaign"]
            argv = [*LEDGER, "collect", "semantic", url, "--corpus", str(corpus[0]), "--digest", corpus[1]]
            argv += ["-c", campaign, *subject, "--home", str(home), "--policy", str(policy.path), "--json"]
            standalone = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
            assert standalone.returncode == 0, standalone.stderr
            assert proc.poll() is None, "the job ended before the standalone run was recorded"
            stdout, stderr = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert json.loads(stdout)["gates"], stderr
    ledger = Ledger.open(home)
    try:
        results = [
            e for e in entries_of(ledger, "gate.result") if e["payload"]["gate"] in ("semantic", "benchmark")
        ]
        [launch] = entries_of(ledger, "engine.launch")
        assert launch["payload"]["details"]["base_url"] == own
        [bench] = [e for e in results if e["payload"]["gate"] == "benchmark"]
        [sem] = [
            e for e in results if e["payload"]["gate"] == "semantic" and e["payload"]["status"] != "not_run"
        ]
        # the collector's own run measured where its launch served; the standalone one where it was sent
        assert bench["payload"]["bounds"]["endpoint"] == own
        assert sem["payload"]["bounds"]["endpoint"] == url
        _review_and_accept(ledger, sem["id"], bench["id"])
        v = evaluate(ledger, {"campaign": job["subject"]["campaign"]}, policy)
        rules = {r["entry"]: r["rule"] for r in v["rejected"]}
        # a dirty checkout binds no collector commit (the job's spec.collector_commit is null): no review PASS
        # credits its results there (review-missing), in a clean clone they are credited — either way the
        # endpoint rule withholds only the run of another server
        clean = job["payload"]["spec"].get(COLLECTOR_COMMIT, "none recorded") is not None
        credited = None if clean else "review-missing"
        assert rules.get(bench["id"]) == credited, v["rejected"]
        if where == "the-jobs-own-engine":
            assert rules.get(sem["id"]) == credited, v["rejected"]
            assert v["verdict"] == ("QUALIFIED" if clean else "INCONCLUSIVE"), v["gates"]
        else:
            assert rules.get(sem["id"]) == HARNESS_OTHER_ENDPOINT, v["rejected"]
            detail = next(r["detail"] for r in v["rejected"] if r["entry"] == sem["id"])
            assert other in detail and own in detail
            assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    finally:
        ledger.close()
