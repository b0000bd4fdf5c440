"""`ledger collect benchmark|semantic` (standalone harness runs) and the one-command review steps
(`ledger review`, `ledger accept`, `ledger supersede`), through the real CLI against the stub server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.engines.stub_openai import StubConfig, serve_stub

from .conftest import REPO, run_ledger

BENCH = REPO / "campaigns" / "corpora" / "bench-tiny.jsonl"
BENCH_DIGEST = "blake3:bfef1eb8aa1c4ed5c7c2a49036f79dd2653cb993594020b1e6c7f66b5f8e7254"
SEMANTIC = REPO / "campaigns" / "corpora" / "semantic-tiny.jsonl"
SEMANTIC_DIGEST = "blake3:f34c93923611acb5921d0b7c24ae05bdce3c2458940a75878c5a851a7635812f"


def _json(home: Path, *args: str) -> tuple[int, Any]:
    r = run_ledger(*args, "--home", str(home), "--json")
    return r.returncode, (json.loads(r.stdout) if r.stdout.strip() else r.stderr)


def _core(home: Path, *args: str) -> tuple[int, Any]:
    """A core command: the home is the global option."""
    r = run_ledger("--home", str(home), *args, "--json")
    return r.returncode, (json.loads(r.stdout) if r.stdout.strip() else r.stderr)


def test_collect_benchmark_records_a_gate_result_judged_by_the_policys_bounds(home: Path) -> None:
    # a steady 50 ms to the first token: judged by the default (over-saturation invalid) rule, a stub that
    # answers in ~1 ms showed a c4 TTFT 3.6x its c1 TTFT (1.1 -> 3.8 ms) on a loaded machine, over-saturated
    with serve_stub(StubConfig(tokens=4, ttft_s=0.05)) as url:
        rc, out = _json(
            home,
            "collect",
            "benchmark",
            url,
            "--corpus",
            str(BENCH),
            "--digest",
            BENCH_DIGEST,
            "--levels",
            "1,4",
            "--requests",
            "8",
            "--repetitions",
            "2",
            "--engine",
            "llamacpp",  # no version detected standalone: judged by the policy's default rule
            "-c",
            "cli-bench",
        )
    # a c1/c4 run measures every figure the shipped policy bounds (ttft_ms.p95@c4, error_rate,
    # c1_parity), so it passes the bounds …
    assert rc == 0, out
    assert out["gate"] == "benchmark"
    assert out["status"] == "passed"
    assert out["bounds"]["limits"]["ttft_ms.p95@c4"]["max"] == 2000
    assert out["bounds"]["saturation"] == "invalid"  # never "report" from the --engine flag
    assert out["figures"]["c1_parity"] == 1.0
    # … and the policy still rejects it: it is not the approved 96-request c1/c4/c32 spec
    r = run_ledger("--home", str(home), "verdict", "-s", "campaign=cli-bench", "--json")
    v = json.loads(r.stdout)
    [rej] = [x for x in v["rejected"] if x["entry"] == out["entry"]]
    assert rej["rule"] == "spec-mismatch"
    assert "requests 8, approved 96" in rej["detail"]


@pytest.mark.parametrize("engine", [None, "vllm"])
def test_collect_benchmark_refuses_a_saturation_rule_the_policy_would_not_credit(
    home: Path, engine: str | None
) -> None:
    """Regression: `collect benchmark --saturation report` ran and recorded a run judged by the
    operator's own rule (its result was then `spec-mismatch`): the policy owns it, so it is refused before
    anything runs — as a campaign's [gates.benchmark] saturation is."""
    more = ["--engine", engine] if engine else []
    r = run_ledger(
        "--home", str(home), "collect", "benchmark", "http://127.0.0.1:9", "--corpus", str(BENCH),
        "--digest", BENCH_DIGEST, "--saturation", "report", *more, "-c", "cli-sat",
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert "--saturation report" in r.stderr and "leave --saturation out" in r.stderr
    logged = run_ledger("--home", str(home), "log", "-s", "campaign=cli-sat", "--json").stdout
    assert json.loads(logged)["items"] == []  # nothing recorded


def test_collect_benchmark_engine_fault_is_no_aggregate_result(home: Path) -> None:
    with serve_stub(StubConfig(tokens=4, fail_after=5)) as url:
        rc, out = _json(
            home, "collect", "benchmark", url, "--corpus", str(BENCH), "--digest", BENCH_DIGEST,
            "--levels", "1", "--requests", "10", "--repetitions", "1", "-c", "cli-fault",
        )  # fmt: skip
    assert rc == 1
    assert out["status"] == "failed"
    assert out["figures"] == {}
    assert "no aggregate result" in out["reason"]


def test_collect_semantic_fails_below_the_policy_threshold_and_itemises(home: Path) -> None:
    with serve_stub(StubConfig(tokens=2)) as url:  # answers "tok0 tok1" to everything
        rc, out = _json(
            home, "collect", "semantic", url, "--corpus", str(SEMANTIC), "--digest", SEMANTIC_DIGEST,
            "-c", "cli-sem",
        )  # fmt: skip
    assert rc == 1
    assert out["status"] == "failed"
    assert out["figures"]["score"] == 0.0
    assert out["bounds"]["min_score"] == 1.0  # the shipped policy's semantic_min_score
    assert "below the threshold 1" in out["reason"]


def test_review_accept_supersede_one_command_each(home: Path) -> None:
    with serve_stub(StubConfig(tokens=2)) as url:
        _rc, sem = _json(
            home, "collect", "semantic", url, "--corpus", str(SEMANTIC), "--digest", SEMANTIC_DIGEST,
            "-c", "cli-rev",
        )  # fmt: skip
    entry = sem["entry"]
    for name, role in (("rev1", "reviewer"), ("ops1", "operator")):
        assert run_ledger("--home", str(home), "keys", "new", name, "--role", role).returncode == 0
    rc, review = _core(home, "review", entry[:16], "--pass", "--commit", "a" * 40, "--key", "rev1")
    assert rc == 0, review
    assert review["kind"] == "review"
    assert review["payload"]["result"] == "PASS"
    assert review["payload"]["commit"] == "a" * 40
    assert {"rel": "reviews", "id": entry} in review["refs"]
    assert review["subject"]["campaign"] == "cli-rev"  # the target's subject
    rc, acc = _core(home, "accept", entry, "--key", "ops1", "--reason", "ok")
    assert rc == 0, acc
    assert acc["payload"]["decision"] == "accepted"
    assert {"rel": "subject", "id": entry} in acc["refs"]
    rc, sup = _core(home, "supersede", entry, "--key", "ops1", "--reason", "rerun")
    assert rc == 0, sup
    assert {"rel": "supersedes", "id": entry} in sup["refs"]
    # neither --pass nor --fail: a usage error, nothing recorded
    r = run_ledger("--home", str(home), "review", entry, "--commit", "b" * 40, "--key", "rev1")
    assert r.returncode == 2
    # a PASS that names no commit would credit nothing: refused, nothing recorded
    size = len(json.loads(run_ledger("--home", str(home), "log", "--json").stdout)["items"])
    for commit in ([], ["--commit", " "]):
        r = run_ledger("--home", str(home), "review", entry, "--pass", *commit, "--key", "rev1")
        assert r.returncode == 2 and "--pass needs --commit" in r.stderr, r.stderr
    # a branch or tag moves: only a commit hash names what was reviewed
    for commit in ("HEAD", "main", "A" * 40):
        r = run_ledger("--home", str(home), "review", entry, "--pass", "--commit", commit, "--key", "rev1")
        assert r.returncode == 2 and "is not a commit hash" in r.stderr, r.stderr
    assert len(json.loads(run_ledger("--home", str(home), "log", "--json").stdout)["items"]) == size
    # a collector key may not sign a review
    r = run_ledger("--home", str(home), "review", entry, "--fail", "--key", "collector")
    assert r.returncode == 2


_HARNESS_ARGS = {
    "benchmark": [
        *("--corpus", str(BENCH), "--digest", BENCH_DIGEST),
        *("--levels", "1", "--requests", "2", "--repetitions", "1"),
    ],
    "semantic": ["--corpus", str(SEMANTIC), "--digest", SEMANTIC_DIGEST],
}


@pytest.mark.parametrize("harness", ["benchmark", "semantic"])
def test_a_standalone_harness_without_model_is_refused_where_the_endpoint_serves_several(
    home: Path, harness: str
) -> None:
    """Regression: `ledger collect benchmark|semantic` without --model asked for the first id /v1/models
    listed — an alias or LoRA adapter listed before the approved model was benchmarked in its place.
    Where the endpoint serves several, the run is refused before anything is asked or recorded."""
    cfg = StubConfig(tokens=4, model_id="base", served_ids=("adapter-x", "base"))
    with serve_stub(cfg) as url:
        rc, out = _json(home, "collect", harness, url, *_HARNESS_ARGS[harness], "-c", "several")
    assert rc == 2, out
    assert "serves 2 models (adapter-x, base) and --model names none" in str(out)
    assert cfg.asked_models == []
    rc, log = _core(home, "log", "-s", "campaign=several")
    assert rc == 0 and log["items"] == []


@pytest.mark.parametrize("harness", ["benchmark", "semantic"])
@pytest.mark.parametrize(
    ("served", "model", "asked"),
    [
        (("base",), None, "base"),  # the one it serves
        (("adapter-x", "base"), "base", "base"),  # named
    ],
    ids=["one-served", "named"],
)
def test_a_standalone_harness_asks_for_the_one_served_model_or_the_named_one(
    home: Path, harness: str, served: tuple[str, ...], model: str | None, asked: str
) -> None:
    cfg = StubConfig(tokens=4, model_id="base", served_ids=served)
    extra = ["--model", model] if model else []
    with serve_stub(cfg) as url:
        rc, out = _json(home, "collect", harness, url, *_HARNESS_ARGS[harness], *extra, "-c", "one")
    assert rc in (0, 1), out
    assert cfg.asked_models and set(cfg.asked_models) == {asked}
