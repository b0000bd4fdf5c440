"""Issue 11, fix 83: a harness result's own per-request record (``benchmark-requests.jsonl``,
``semantic-requests.jsonl``) is read back request by request, not by the payload's totals:

1. ``counts.unanswered`` is bounded by what could be in flight when a stop from outside came: the requests of
   one (repetition, level), at most that level's concurrency (the largest of ``bounds.concurrency`` for a
   payload read alone) — a record claiming more is inconsistent and never excused as ``stopped-from-outside``.
2. A semantic run records every request it sent with its HTTP status (none: no answer), ``fault`` and
   ``unanswered``; the policy reads its ``bounds.fault_kind`` back from it as it reads the benchmark's. A
   record stored before it was kept (no ``semantic-requests.jsonl``) is not excused (fail closed).
3. A refusal of the campaign's configuration another request of the same run contradicts — an access
   refusal beside any answered request, before it or after it; a context refusal beside an answer to the
   same prompt — is not the campaign's: never ``harness-campaign-config``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from ledger.errors import SchemaError
from tests.policy.test_fail_closed import POLICY_DIR, entry, qualified_entries, rejected, verdict_of
from tests.policy.test_fix77_stopped_from_outside import (
    BENCHMARK_EXITED_AT,
    RUNTIME,
    _cut_benchmark,
    _stopped,
)
from tests.policy.test_fix80_stop_cut_narrowed import SEMANTIC_EXITED_AT, _cut_semantic

STOPPED = "stopped-from-outside"
CONFIG = "harness-campaign-config"
MISMATCH = "harness-artifact-mismatch"
# the `when` of harness-campaign-config reads the record read back (proposed in /tmp/fix83/other.md): a
# "config" run whose own record contradicts its refusal is never excused
CONFIG_WHEN_OLD = """  e.payload.counts.refused > 0\"\"\"
detail = "the {e[payload][gate]} run stopped where"""
CONFIG_WHEN_NEW = """  e.payload.counts.refused > 0 && e.derived.artifact_problem == null\"\"\"
detail = "the {e[payload][gate]} run stopped where"""

OK = {
    "level": 1,
    "repetition": 0,
    "prompt_id": "p0",
    "error": None,
    "fault": False,
    "http_status": 200,
    "unanswered": False,
    "refusal": None,
}
UNANSWERED = {
    "error": "ClientOSError: Connection reset by peer",
    "fault": True,
    "http_status": None,
    "unanswered": True,
}
ACCESS = {"error": "HTTP 401: Invalid API Key", "http_status": 401, "refusal": "access"}
CONTEXT = {
    "error": "HTTP 400: This model's maximum context length is 8 tokens",
    "http_status": 400,
    "refusal": "context",
}
CUT = {"error": "stopped: the engine refused c1 repetition 0 request 0", "http_status": None}


def _jsonl(lines: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(line) + "\n" for line in lines)


def _policy(tmp_path: Path) -> Path:
    """The shipped policies, with harness-campaign-config reading the record back (where not yet shipped)."""
    pol = tmp_path / "policies"
    if not pol.exists():
        shutil.copytree(POLICY_DIR, pol)
        f = pol / "backend-qualification.toml"
        text = f.read_text()
        if CONFIG_WHEN_NEW not in text:
            assert CONFIG_WHEN_OLD in text
            f.write_text(text.replace(CONFIG_WHEN_OLD, CONFIG_WHEN_NEW))
    return pol


def _excused(v: dict[str, Any], name: str, rule: str = STOPPED) -> bool:
    return v["verdict"] == "INCONCLUSIVE" and rejected(v).get(name) == rule


# --- 1. counts.unanswered bounded by what could be in flight ---------------------------------------------


def _bench_cut(
    tmp_path: Path, unanswered: list[dict[str, Any]], claimed: Any, *, artifact: bool = True, **bounds: Any
) -> dict[str, Any]:
    """The fixture's benchmark cut by an outside SIGTERM after 81 answered c1 requests, its faulted
    requests ``unanswered`` (each an override of ``UNANSWERED``), ``counts.unanswered`` ``claimed``."""
    es = qualified_entries()
    _stopped(es, exited_at=BENCHMARK_EXITED_AT)
    _cut_benchmark(es)
    b = entry(es, "benchmark")
    n = len(unanswered)
    counts = {k: v for k, v in b["payload"]["counts"].items() if not k.startswith("completed@c")}
    counts.update({"issued": 81 + n, "completed": 81, "errors": n, "unanswered": claimed, "cut": 0})
    if claimed is ...:
        del counts["unanswered"]
    b["payload"]["counts"] = {**counts, "completed@c1": 81}
    b["payload"]["bounds"].update(bounds)
    for k in [k for k, v in bounds.items() if v is ...]:
        del b["payload"]["bounds"][k]
    b["artifacts"] = [a for a in b.get("artifacts", []) if a.get("name") != "benchmark-requests.jsonl"]
    if artifact:
        lines = [OK] * 81 + [{**OK, **UNANSWERED, **u} for u in unanswered]
        lines = [{k: v for k, v in line.items() if v is not ...} for line in lines]  # ...: dropped
        b["artifacts"].append({"name": "benchmark-requests.jsonl", "text": _jsonl(lines)})
    return verdict_of(tmp_path, es)


def test_unanswered_beyond_the_levels_concurrency_is_not_excused_as_stopped_from_outside(
    tmp_path: Path,
) -> None:
    """The reproducer: 33 requests claimed unanswered at c32 (one repetition): a stop from outside cuts at
    most the 32 in flight — the record is inconsistent, the fault stands."""
    v = _bench_cut(tmp_path, [{"level": 32}] * 33, 33)
    assert not _excused(v, "benchmark"), v["gates"]
    assert rejected(v).get("benchmark") == MISMATCH
    [r] = [r for r in v["rejected"] if r["rule"] == MISMATCH]
    assert "33 requests unanswered at c32 repetition 0, more than the 32 in flight" in r["detail"]
    assert v["verdict"] == RUNTIME


def test_unanswered_up_to_the_levels_concurrency_is_still_excused(tmp_path: Path) -> None:
    """Neighbour: 32 unanswered at c32 — every request in flight — is what a stop from outside leaves."""
    assert _excused(_bench_cut(tmp_path, [{"level": 32}] * 32, 32), "benchmark")


def test_unanswered_mid_stream_after_an_http_200_head_is_still_excused(tmp_path: Path) -> None:
    """Neighbour: an outside stop cuts the streams in flight after their HTTP 200 head — no answer (the
    collector's ``request_fault_kind`` "unanswered"): read back alike, excused. An error status is not."""
    assert _excused(_bench_cut(tmp_path, [{"level": 4, "http_status": 200}] * 4, 4), "benchmark")
    v = _bench_cut(tmp_path, [{"level": 4, "http_status": 502}] * 4, 4)
    assert rejected(v).get("benchmark") == MISMATCH


def test_unanswered_beyond_a_small_levels_concurrency_is_not_excused(tmp_path: Path) -> None:
    """Per level: 5 unanswered at c4 (a level the spec has; the largest is 32) is more than c4 has."""
    v = _bench_cut(tmp_path, [{"level": 4}] * 5, 5)
    assert not _excused(v, "benchmark")
    assert rejected(v).get("benchmark") == MISMATCH


def test_unanswered_at_a_level_beyond_the_largest_is_bounded_by_the_largest(tmp_path: Path) -> None:
    """A level the spec does not have (c64, a mistyped record): bounded by the largest level (32)."""
    v = _bench_cut(tmp_path, [{"level": 64}] * 33, 33)
    assert not _excused(v, "benchmark")
    assert rejected(v).get("benchmark") == MISMATCH


def test_unanswered_in_two_repetitions_is_not_excused(tmp_path: Path) -> None:
    """Reordered: the stop comes once — requests unanswered in two runs of a level cannot all be its."""
    v = _bench_cut(tmp_path, [{"repetition": 0}, {"repetition": 1}], 2, concurrency=[4])
    assert not _excused(v, "benchmark")
    assert rejected(v).get("benchmark") == MISMATCH


@pytest.mark.parametrize("repetition", [None, "0", ...], ids=["null", "mistyped", "dropped"])
def test_unanswered_without_a_repetition_is_one_run_of_its_level(tmp_path: Path, repetition: Any) -> None:
    """A repetition left out or mistyped never loosens the bound: such requests count as one run of their
    level (here c1: one in flight) — two are more than it has; one is still excused."""
    v = _bench_cut(tmp_path, [{"repetition": repetition}] * 2, 2)
    assert not _excused(v, "benchmark")
    assert rejected(v).get("benchmark") == MISMATCH
    assert _excused(_bench_cut(tmp_path, [{"repetition": repetition}], 1), "benchmark")


def test_the_payload_alone_claiming_more_unanswered_than_in_flight_is_not_excused(tmp_path: Path) -> None:
    """Without a stored record (the payload read alone): counts.unanswered 33 beyond the largest level (32)
    is no stop's doing — not excused, the fault stands."""
    v = _bench_cut(tmp_path, [{}] * 33, 33, artifact=False)
    assert not _excused(v, "benchmark"), v["gates"]
    assert v["verdict"] == RUNTIME


@pytest.mark.parametrize(
    ("claimed", "bounds"),
    [
        (0, {}),
        (-1, {}),
        ("1", {}),
        (True, {}),
        (..., {}),
        (1, {"concurrency": ...}),
        (1, {"concurrency": ["1", 4]}),
        (1, {"concurrency": []}),
        (1, {"Concurrency": [1, 4, 32], "concurrency": ...}),
    ],
    ids=[
        "zero",
        "negative",
        "text",
        "bool",
        "dropped",
        "concurrency-dropped",
        "concurrency-mistyped",
        "concurrency-empty",
        "concurrency-renamed",
    ],
)
def test_the_payload_alone_without_a_bounded_unanswered_count_is_not_excused(
    tmp_path: Path, claimed: Any, bounds: dict[str, Any]
) -> None:
    """Refused at ingest (the payload schema: a count is a whole number ≥ 0, a level ≥ 1), or not excused."""
    try:
        v = _bench_cut(tmp_path, [{}], claimed, artifact=False, **bounds)
    except SchemaError:
        return
    assert not _excused(v, "benchmark"), v["rejected"]


def test_the_payload_alone_within_the_largest_level_is_not_excused(tmp_path: Path) -> None:
    """Fix 95: the fixture's own cut (1 unanswered, levels up to 32) with no stored record is not excused
    any more — a benchmark's claim of unanswered requests is read back from its per-request record, as a
    semantic run's is (one rule): on the payload alone the fault stands, named. With the record: excused."""
    v = _bench_cut(tmp_path, [{}], 1, artifact=False)
    assert not _excused(v, "benchmark"), v["rejected"]
    assert v["verdict"] == RUNTIME
    [r] = [r for r in v["rejected"] if r["rule"] == MISMATCH]
    assert "it stores no benchmark-requests.jsonl" in r["detail"]
    assert _excused(_bench_cut(tmp_path, [{}], 1), "benchmark")


def test_fault_kind_unanswered_beside_an_http_500_in_the_record_is_not_excused(tmp_path: Path) -> None:
    """counts.unanswered agrees (1), but the record shows another faulted request the engine answered HTTP
    500: ``bounds.fault_kind`` "unanswered" is read back from the record, and it says otherwise."""
    answered_500 = {"fault": True, "unanswered": False, "http_status": 500, "error": "HTTP 500: boom"}
    v = _bench_cut(tmp_path, [{}, answered_500], 1)
    assert not _excused(v, "benchmark")
    assert rejected(v).get("benchmark") == MISMATCH
    [r] = [r for r in v["rejected"] if r["rule"] == MISMATCH]
    assert "2 faulted request(s), 1 of them unanswered" in r["detail"]


# --- 2. the semantic record read back as the benchmark's ------------------------------------------------


def _sem_requests(faulted: dict[str, Any] | None) -> str:
    lines = [{**OK, "prompt_id": f"s{i}"} for i in range(3)]
    if faulted is not None:
        lines.append({**OK, "prompt_id": "s3", **UNANSWERED, **faulted})
    return _jsonl(lines)


def _sem_cut(tmp_path: Path, artifacts: list[dict[str, Any]] | None) -> dict[str, Any]:
    """The fixture's semantic run cut by an outside SIGTERM at its fourth item, storing ``artifacts`` (None:
    none — a record stored before requests were kept; ``_cut_semantic`` itself stores a real run's)."""
    es = qualified_entries()
    _stopped(es, exited_at=SEMANTIC_EXITED_AT)
    _cut_semantic(es)
    entry(es, "semantic")["artifacts"] = [] if artifacts is None else artifacts
    return verdict_of(tmp_path, es)


def _req_art(text: str) -> dict[str, Any]:
    return {"name": "semantic-requests.jsonl", "text": text}


def test_semantic_unanswered_claim_without_its_request_record_is_not_excused(tmp_path: Path) -> None:
    """The reproducer: a semantic record stored before requests were kept (no per-item HTTP status): its
    ``bounds.fault_kind`` "unanswered" cannot be read back — not excused, never a pass."""
    v = _sem_cut(tmp_path, None)
    assert not _excused(v, "semantic"), v["rejected"]
    assert v["verdict"] == RUNTIME


def test_semantic_unanswered_claim_its_request_record_shows_is_excused(tmp_path: Path) -> None:
    """Neighbour: the record shows the fourth item's request unanswered (no HTTP status): excused."""
    assert _excused(_sem_cut(tmp_path, [_req_art(_sem_requests({}))]), "semantic")


def test_semantic_claimed_unanswered_over_an_http_500_is_not_excused(tmp_path: Path) -> None:
    """The semantic twin of audit 73 f1: the record shows the engine answered HTTP 500."""
    v = _sem_cut(tmp_path, [_req_art(_sem_requests({"http_status": 500, "unanswered": False}))])
    assert not _excused(v, "semantic")
    assert rejected(v).get("semantic") == MISMATCH
    assert v["verdict"] != "QUALIFIED"


@pytest.mark.parametrize(
    "faulted",
    [
        {"http_status": 500},  # a status is an answer, whatever else it says
        {"unanswered": "true"},  # mistyped
        {"unanswered": ...},  # dropped
        {"unanswered": ..., "unansw": True},  # renamed
        {"fault": ...},  # fault dropped
    ],
    ids=["status-and-unanswered", "mistyped", "dropped", "renamed", "fault-dropped"],
)
def test_semantic_record_that_does_not_show_the_request_unanswered_is_not_excused(
    tmp_path: Path, faulted: dict[str, Any]
) -> None:
    line = {**OK, "prompt_id": "s3", **UNANSWERED, **faulted}
    line = {k: v for k, v in line.items() if v is not ...}
    text = _sem_requests(None) + json.dumps(line) + "\n"
    v = _sem_cut(tmp_path, [_req_art(text)])
    assert not _excused(v, "semantic")
    assert rejected(v).get("semantic") == MISMATCH


def test_semantic_record_without_the_faulted_request_is_not_excused(tmp_path: Path) -> None:
    """The record lists only the answered items: it shows no request that went unanswered."""
    v = _sem_cut(tmp_path, [_req_art(_sem_requests(None))])
    assert not _excused(v, "semantic")
    assert rejected(v).get("semantic") == MISMATCH


def test_semantic_two_unanswered_requests_are_more_than_were_in_flight(tmp_path: Path) -> None:
    """A semantic run asks one item at a time: two unanswered requests cannot both be the stop's."""
    text = _sem_requests({}) + json.dumps({**OK, "prompt_id": "s4", **UNANSWERED}) + "\n"
    v = _sem_cut(tmp_path, [_req_art(text)])
    assert not _excused(v, "semantic")
    assert rejected(v).get("semantic") == MISMATCH


def test_semantic_request_record_renamed_is_not_excused(tmp_path: Path) -> None:
    v = _sem_cut(tmp_path, [{"name": "semantic-request.jsonl", "text": _sem_requests({})}])
    assert not _excused(v, "semantic")


# --- 3. a refusal judged request by request -------------------------------------------------------------


def _bench_config(tmp_path: Path, lines: list[dict[str, Any]], refused: int | None = None) -> dict[str, Any]:
    """The fixture's benchmark stopped as the campaign's configuration (outcome config), its counts what
    ``lines`` (its stored record) shows."""
    es = qualified_entries()
    p = entry(es, "benchmark")["payload"]
    completed = sum(1 for line in lines if line["error"] is None)
    cut = sum(1 for line in lines if str(line["error"]).startswith("stopped:"))
    counts = {k: v for k, v in p["counts"].items() if not k.startswith("completed@c")}
    counts.update(
        issued=len(lines),
        completed=completed,
        errors=len(lines) - completed,
        cut=cut,
        refused=sum(1 for line in lines if line.get("refusal") is not None) if refused is None else refused,
        unanswered=0,
    )
    p["counts"] = {**counts, "completed@c1": completed}
    p["status"], p["figures"] = "failed", {}
    p["reason"] = (
        "no aggregate result: the engine refused c1 repetition 0 request 0 for the campaign's configuration"
    )
    p["bounds"].update(outcome="config", aggregate=False, valid=False)
    entry(es, "benchmark")["artifacts"] = [{"name": "benchmark-requests.jsonl", "text": _jsonl(lines)}]
    return verdict_of(tmp_path, es, policy_dir=_policy(tmp_path))


def test_access_refused_then_served_later_in_the_run_is_not_the_campaigns(tmp_path: Path) -> None:
    """The reproducer: request 0 refused HTTP 401 (no answer before it: by count, the campaign's), then
    request 1 of the same run answered — the same credentials were met: the refusal is the engine's."""
    v = _bench_config(tmp_path, [{**OK, **ACCESS}, {**OK, "prompt_id": "p1"}])
    assert rejected(v).get("benchmark") != CONFIG, v["rejected"]
    assert rejected(v).get("benchmark") == MISMATCH
    [r] = [r for r in v["rejected"] if r["rule"] == MISMATCH]
    assert "request 1 is recorded refused for the campaign's access (HTTP 401)" in r["detail"]
    assert v["verdict"] != "INCONCLUSIVE" and v["verdict"] != "QUALIFIED"


def test_access_refused_after_an_answer_is_not_the_campaigns(tmp_path: Path) -> None:
    """Reordered: answered, then refused."""
    v = _bench_config(tmp_path, [OK, {**OK, "prompt_id": "p1", **ACCESS}])
    assert rejected(v).get("benchmark") == MISMATCH


def test_access_refused_with_no_answer_in_the_run_is_still_the_campaigns(tmp_path: Path) -> None:
    """Neighbour: refused, the other requests in flight cut by the stop, none answered: the campaign's."""
    lines = [{**OK, **ACCESS}] + [{**OK, "prompt_id": f"p{i}", **CUT} for i in (1, 2, 3)]
    v = _bench_config(tmp_path, lines)
    assert _excused(v, "benchmark", CONFIG), v["rejected"]


def test_context_refused_then_the_same_prompt_served_is_not_the_campaigns(tmp_path: Path) -> None:
    v = _bench_config(tmp_path, [{**OK, **CONTEXT}, OK])
    assert rejected(v).get("benchmark") == MISMATCH


def test_context_refused_beside_another_prompt_served_is_still_the_campaigns(tmp_path: Path) -> None:
    """Neighbour: another, shorter prompt answered says nothing of the refused one."""
    v = _bench_config(tmp_path, [{**OK, "prompt_id": "p1"}, {**OK, **CONTEXT}])
    assert _excused(v, "benchmark", CONFIG), v["rejected"]


@pytest.mark.parametrize("refusal", ["Access", "", 1, ["access"]], ids=["case", "empty", "int", "list"])
def test_a_refusal_mistyped_in_the_record_is_not_the_campaigns(tmp_path: Path, refusal: Any) -> None:
    v = _bench_config(tmp_path, [{**OK, **ACCESS, "refusal": refusal}])
    assert rejected(v).get("benchmark") == MISMATCH


def test_refused_count_the_record_does_not_show_is_not_the_campaigns(tmp_path: Path) -> None:
    """The refusal dropped from the record (counts.refused 1, its record none): not excused."""
    line = {k: v for k, v in {**OK, **ACCESS}.items() if k != "refusal"}
    v = _bench_config(tmp_path, [line], refused=1)
    assert rejected(v).get("benchmark") == MISMATCH, v["rejected"]


def test_semantic_access_refused_beside_an_answered_item_is_not_the_campaigns(tmp_path: Path) -> None:
    es = qualified_entries()
    p = entry(es, "semantic")["payload"]
    p["status"], p["figures"] = "failed", {"score": None}
    p["counts"].update(asked=1, passed=1, failed=0, errors=0, refused=1)
    p["bounds"].update(outcome="config", aggregate=False)
    p["reason"] = "no aggregate result: the engine refused item s1 for the campaign's configuration"
    text = _jsonl([{**OK, "prompt_id": "s0"}, {**OK, "prompt_id": "s1", **ACCESS}])
    entry(es, "semantic")["artifacts"] = [_req_art(text)]
    v = verdict_of(tmp_path, es, policy_dir=_policy(tmp_path))
    assert rejected(v).get("semantic") == MISMATCH, v["rejected"]
    # neighbour: the refused item alone in the record — the campaign's
    es2 = qualified_entries()
    p2 = entry(es2, "semantic")["payload"]
    p2.update(status="failed", figures={"score": None}, reason=p["reason"])
    p2["counts"].update(asked=0, passed=0, failed=0, errors=0, refused=1)
    p2["bounds"].update(outcome="config", aggregate=False)
    entry(es2, "semantic")["artifacts"] = [_req_art(_jsonl([{**OK, "prompt_id": "s0", **ACCESS}]))]
    v2 = verdict_of(tmp_path, es2, policy_dir=_policy(tmp_path))
    assert rejected(v2).get("semantic") == CONFIG, v2["rejected"]
