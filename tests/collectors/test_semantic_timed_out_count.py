"""fix128 (issue 11): the semantic harness counts its failed items whose request timed out
(``counts.timed_out``), by the one test the policy reads the stored ``semantic-requests.jsonl`` back by
(``ledger.policy.acceptance.request_timed_out``), each item of ``semantic-items.jsonl`` joined to the request
it was asked by (``acceptance._timed_out_items``). The request that stopped the run — a fault, a lease's cut
— is no item and is never counted. Rule ``stopped-from-outside`` subtracts the count from the failed items of
a run whose engine was held from outside (tests/policy/test_held_semantic_timeouts.py)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import ledger.collectors.benchmark as benchmark_module
from ledger.collectors.benchmark import LEASE_EXPIRED
from ledger.collectors.semantic import (
    HARNESS,
    REQUESTS_ARTIFACT,
    SemanticResult,
    run_semantic,
    semantic_gate_payload,
)
from ledger.entries import validate_payload
from ledger.errors import SchemaError
from ledger.policy.acceptance import _harness_artifact_problem
from ledger.store.filesystem import FilesystemStore
from tests.collectors.test_hung_inference_loop import StandIn, _semantic, serve


@pytest.fixture
def short_probes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Probes and canary bounded by 1 s (as tests/collectors/test_hung_inference_loop.py bounds them)."""
    monkeypatch.setattr(benchmark_module, "LIVENESS_TIMEOUT_S", 1.0)


def _read_back(tmp_path: Path, result: SemanticResult, payload: dict[str, Any]) -> str | None:
    """What the policy's read-back (``_harness_artifact_problem``) says of the stored run: None, it agrees."""
    store = FilesystemStore(tmp_path / "store")
    store.init()
    artifacts = [
        {"name": name, "digest": str(store.put_file(path).digest), "stored": True}
        for name, path in result.artifacts.items()
    ]
    return _harness_artifact_problem(SimpleNamespace(payload=payload, artifacts=artifacts), store)  # type: ignore[arg-type]


def test_semantic_timed_out_failed_item_is_counted_and_read_back(tmp_path: Path, short_probes: None) -> None:
    """The first item times out and the engine's front and canary still answer (a slow engine, or one held
    while its API server answers): a failed item, counted timed out; the policy reads the same count back."""
    with serve(StandIn(slow_first=1, slow_s=3.0)) as base:
        result = run_semantic(_semantic(tmp_path), base, out_dir=tmp_path / "o")
    assert result.outcome == "completed", result.stopped
    assert [i.passed for i in result.items] == [False, True, True]
    payload = semantic_gate_payload(result, min_score=0.5)
    assert payload["counts"]["timed_out"] == 1 == payload["counts"]["failed"]
    assert int(HARNESS.rsplit("+", 1)[1]) >= 10  # the harness revision that counts timed-out items, or later
    stored = [json.loads(x) for x in (tmp_path / "o" / REQUESTS_ARTIFACT).read_text().splitlines()]
    assert [r["timed_out"] for r in stored] == [True, False, False]
    assert _read_back(tmp_path, result, payload) is None


@pytest.mark.parametrize("claim", [0, 2])
def test_a_semantic_timed_out_count_its_record_does_not_show_is_a_problem(
    tmp_path: Path, short_probes: None, claim: int
) -> None:
    with serve(StandIn(slow_first=1, slow_s=3.0)) as base:
        result = run_semantic(_semantic(tmp_path), base, out_dir=tmp_path / "o")
    payload = semantic_gate_payload(result, min_score=0.5)
    payload["counts"]["timed_out"] = claim
    why = _read_back(tmp_path, result, payload) or ""
    assert f"counts.timed_out {claim}, its {REQUESTS_ARTIFACT}" in why and "shows 1" in why


def test_a_timed_out_item_the_canary_could_not_judge_is_counted(tmp_path: Path, short_probes: None) -> None:
    with serve(StandIn(slow_first=1, slow_s=3.0, canary_status=404)) as base:
        result = run_semantic(_semantic(tmp_path), base, out_dir=tmp_path / "o")
    payload = semantic_gate_payload(result, min_score=0.5)
    assert payload["status"] == "failed" and payload["counts"]["timed_out"] == 1
    assert _read_back(tmp_path, result, payload) is None


def test_the_hung_request_that_stopped_the_run_is_no_timed_out_item(
    tmp_path: Path, short_probes: None
) -> None:
    """The second item hangs (the canary gets no token): the run's fault, not scored — no item timed out."""
    with serve(StandIn(hang_from=1)) as base:
        result = run_semantic(_semantic(tmp_path), base, out_dir=tmp_path / "o")
    assert result.outcome == "fault", result.stopped
    assert result.requests[-1].timed_out and result.timed_out == 0
    payload = semantic_gate_payload(result, min_score=1.0)
    assert "timed_out" not in payload["counts"]  # none: left out, as counts.refused is (the rule: none less)
    assert _read_back(tmp_path, result, payload) is None
    payload["counts"]["timed_out"] = 1  # claimed of the request that stopped the run: contradicted
    assert "shows 0" in (_read_back(tmp_path, result, payload) or "")


def test_the_request_its_lease_cut_is_no_timed_out_item(tmp_path: Path, short_probes: None) -> None:
    with serve(StandIn(slow_first=1, slow_s=3.0)) as base:
        result = run_semantic(_semantic(tmp_path, lease_s=0.6), base, out_dir=tmp_path / "o")
    assert result.outcome == LEASE_EXPIRED, result.stopped
    assert result.items == [] and result.requests[0].timed_out
    payload = semantic_gate_payload(result, min_score=1.0)
    assert "timed_out" not in payload["counts"]


def test_a_completed_semantic_run_counts_no_timeouts(tmp_path: Path, short_probes: None) -> None:
    with serve(StandIn()) as base:
        result = run_semantic(_semantic(tmp_path), base, out_dir=tmp_path / "o")
    payload = semantic_gate_payload(result, min_score=1.0)
    assert payload["status"] == "passed" and "timed_out" not in payload["counts"]
    assert _read_back(tmp_path, result, payload) is None


@pytest.mark.parametrize("count", ["1", 1.5, None, True, -1])
def test_a_mistyped_semantic_timed_out_count_is_refused(
    tmp_path: Path, short_probes: None, count: Any
) -> None:
    with serve(StandIn(slow_first=1, slow_s=3.0)) as base:
        result = run_semantic(_semantic(tmp_path), base, out_dir=tmp_path / "o")
    payload = semantic_gate_payload(result, min_score=0.5)
    payload["counts"]["timed_out"] = count
    with pytest.raises(SchemaError, match=r"counts\.timed_out"):
        validate_payload("gate.result", 1, payload)


def test_items_and_requests_that_do_not_join_are_a_problem(tmp_path: Path, short_probes: None) -> None:
    """The stored requests reordered against the items they were asked by: which failed items timed out
    cannot be told (a problem, never a count)."""
    with serve(StandIn(slow_first=1, slow_s=3.0)) as base:
        result = run_semantic(_semantic(tmp_path), base, out_dir=tmp_path / "o")
    payload = semantic_gate_payload(result, min_score=0.5)
    path = tmp_path / "o" / REQUESTS_ARTIFACT
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join([lines[1], lines[0], *lines[2:]]))
    why = _read_back(tmp_path, result, payload) or ""
    assert "is not the request item 1" in why and "cannot be told" in why
