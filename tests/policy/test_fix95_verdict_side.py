"""Issue 11, fix 95: the verdict side of three rules the collector or the probes already followed.

1. A benchmark ``gate.result`` that stores no ``benchmark-requests.jsonl`` (its per-request record) was
   excused on its payload alone (``counts.unanswered`` 1 within the concurrency bound read as "stopped from
   outside"), while a semantic result without its request record was not. One rule for both harnesses
   (``acceptance._request_record_missing``): a claim of unanswered or refused requests is read back from the
   record, and a result that claims one and stores none is ``harness-artifact-mismatch`` — never excused.
2. A job recorded by hand whose subject backend names another engine than its ``spec.bindings.engine`` (or
   its launch's ``engine``) qualified that backend on what the other engine ran. The verdict now compares
   them as engine names compare (``names.engine_key`` by ``params.engine_names``): a contradiction keeps a
   QUALIFIED campaign INCONCLUSIVE, naming both (claim item ``engine-contradicted``).
3. ``after-launch-end`` by log order applied to probes only: a harness result the log took after its launch
   entry recorded the run's end was credited, whatever collected_at it claimed. One rule for both now
   (``e.derived.after_launch_end``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from ledger.errors import PolicyError, SchemaError
from tests.policy.test_fail_closed import (
    POLICY_DIR,
    SUBJECT,
    entry,
    gates,
    qualified_entries,
    rejected,
    verdict_of,
)
from tests.policy.test_fix77_stopped_from_outside import (
    BENCHMARK_EXITED_AT,
    RUNTIME,
    _cut_benchmark,
    _stopped,
)
from tests.policy.test_fix80_stop_cut_narrowed import SEMANTIC_EXITED_AT, _cut_semantic

STOPPED = "stopped-from-outside"
MISMATCH = "harness-artifact-mismatch"
CONFIG = "harness-campaign-config"


_OK = {"level": 1, "repetition": 0, "error": None, "fault": False, "http_status": 200, "unanswered": False}
_REFUSED = {
    **_OK,
    "prompt_id": "p-refused",
    "error": "HTTP 400: This model's maximum context length is 8 tokens",
    "http_status": 400,
    "refusal": "context",
}
_FAILED = {**_OK, "error": "HTTP 500: boom", "fault": True, "http_status": 500}


def store_request_record(e: dict[str, Any]) -> None:
    """Store, beside a harness result (a fixture entry), the per-request record its counts show, as the
    harness writes it: its answered requests (a benchmark's ``completed``, at c1 — its ``completed@cN``
    counts set to match —, a semantic run's ``asked``), its ``refused`` ones (a context refusal), and a
    benchmark's other ``errors`` answered HTTP 500."""
    p = e["payload"]
    c = p["counts"]
    if p["gate"] == "benchmark":
        answered, failed = c.get("completed", 0), c.get("errors", 0) - c.get("refused", 0)
        p["counts"] = {k: v for k, v in c.items() if not k.startswith("completed@c")}
        p["counts"].update({"completed@c1": answered} if answered else {})
        name = "benchmark-requests.jsonl"
    else:
        answered, failed, name = c.get("asked", 0), 0, "semantic-requests.jsonl"
    lines = [{**_OK, "prompt_id": f"p{i}"} for i in range(answered)]
    lines += [_REFUSED] * c.get("refused", 0) + [_FAILED] * failed
    e["artifacts"] = [a for a in e.get("artifacts", []) if a.get("name") != name]
    e["artifacts"].append({"name": name, "text": "".join(json.dumps(line) + "\n" for line in lines)})


def as_backend(es: list[dict[str, Any]], backend: str) -> dict[str, str]:
    """Label every entry of the shared campaign with ``backend`` (the engine it ran); returns the subject
    to ask its verdict by (``test_fail_closed.SUBJECT`` with that backend)."""
    for e in es:
        e["subject"] = {**e.get("subject", {}), "backend": backend}
    return {**SUBJECT, "backend": backend}


def _item(v: dict[str, Any], status: str) -> dict[str, Any] | None:
    return next((c for c in v.get("claims") or [] if c["status"] == status), None)


# --- 1. a harness claim of its requests is read back from its per-request record -------------------------


def _bench_cut(tmp_path: Path, *, record: bool, name: str = "benchmark-requests.jsonl") -> dict[str, Any]:
    es = qualified_entries()
    _stopped(es, exited_at=BENCHMARK_EXITED_AT)
    _cut_benchmark(es)
    b = entry(es, "benchmark")
    if not record:
        b["artifacts"] = []
    elif name != "benchmark-requests.jsonl":
        b["artifacts"] = [{**a, "name": name} for a in b["artifacts"]]
    return verdict_of(tmp_path, es)


def test_benchmark_result_without_request_record_is_not_excused_as_stopped_from_outside(
    tmp_path: Path,
) -> None:
    """The reproducer: 1 unanswered request (within every bound), no stored record: not excused — the
    fault stands, and the rejection names the missing record."""
    v = _bench_cut(tmp_path, record=False)
    assert rejected(v).get("benchmark") == MISMATCH, v["rejected"]
    assert v["verdict"] == RUNTIME
    [r] = [r for r in v["rejected"] if r["rule"] == MISMATCH]
    assert "it stores no benchmark-requests.jsonl" in r["detail"]
    assert "counts.unanswered 1" in r["detail"]


def test_benchmark_result_with_its_request_record_is_still_excused(tmp_path: Path) -> None:
    """Neighbour (the honest case): the record shows the request unanswered — excused as before."""
    v = _bench_cut(tmp_path, record=True)
    assert rejected(v).get("benchmark") == STOPPED, v["rejected"]
    assert v["verdict"] == "INCONCLUSIVE"
    assert gates(v)["runtime-stability"] == "passed"


def test_benchmark_request_record_renamed_is_not_excused(tmp_path: Path) -> None:
    v = _bench_cut(tmp_path, record=True, name="benchmark-request.jsonl")
    assert rejected(v).get("benchmark") == MISMATCH
    assert v["verdict"] == RUNTIME


def test_semantic_result_without_request_record_is_named_the_same_way(tmp_path: Path) -> None:
    """The semantic twin reads the same rule: not excused, and now named."""
    es = qualified_entries()
    _stopped(es, exited_at=SEMANTIC_EXITED_AT)
    _cut_semantic(es)
    entry(es, "semantic")["artifacts"] = [
        a for a in entry(es, "semantic").get("artifacts", []) if a["name"] != "semantic-requests.jsonl"
    ]
    v = verdict_of(tmp_path, es)
    assert rejected(v).get("semantic") == MISMATCH, v["rejected"]
    [r] = [r for r in v["rejected"] if r["rule"] == MISMATCH]
    assert "it stores no semantic-requests.jsonl" in r["detail"]
    assert v["verdict"] == RUNTIME


def _config_benchmark(es: list[dict[str, Any]], refused: Any) -> None:
    p = entry(es, "benchmark")["payload"]
    p["status"], p["figures"] = "failed", {}
    p["counts"] = {k: v for k, v in p["counts"].items() if not k.startswith("completed@c")}
    p["counts"].update(issued=1, completed=0, errors=1, cut=0, refused=refused, unanswered=0)
    p["bounds"].update(outcome="config", aggregate=False, valid=False)
    p["reason"] = "no aggregate result: the engine refused c1 repetition 0 request 0 (context)"
    entry(es, "benchmark")["artifacts"] = []


def test_config_refusal_without_request_record_is_not_excused(tmp_path: Path) -> None:
    """``counts.refused`` on the payload alone: the campaign's configuration is not taken on its word."""
    es = qualified_entries()
    _config_benchmark(es, 1)
    v = verdict_of(tmp_path, es)
    assert rejected(v).get("benchmark") == MISMATCH, v["rejected"]
    assert v["verdict"] not in ("QUALIFIED", "INCONCLUSIVE")


def test_config_refusal_with_its_request_record_is_still_the_campaigns(tmp_path: Path) -> None:
    es = qualified_entries()
    _config_benchmark(es, 1)
    line = (
        '{"level": 1, "repetition": 0, "prompt_id": "p0", "error": "HTTP 400: maximum context length is 8'
        ' tokens", "fault": false, "http_status": 400, "unanswered": false, "refusal": "context"}\n'
    )
    entry(es, "benchmark")["artifacts"] = [{"name": "benchmark-requests.jsonl", "text": line}]
    v = verdict_of(tmp_path, es)
    assert rejected(v).get("benchmark") == CONFIG, v["rejected"]
    assert v["verdict"] == "INCONCLUSIVE"


def test_a_completed_run_without_request_record_claims_nothing_of_its_requests(tmp_path: Path) -> None:
    """Neighbour: the shared fixture's passed runs store no request record and claim nothing only it can
    show (no unanswered, no refused request): judged as before, QUALIFIED."""
    assert verdict_of(tmp_path, qualified_entries())["verdict"] == "QUALIFIED"


# --- 2. the campaign's backend against the engine its entries record running ----------------------------


def _engine(es: list[dict[str, Any]], job: Any = ..., launch: Any = ...) -> None:
    """The engine the campaign's job binds (``job``) and its launch recorded (``launch``); ``...``: as is,
    None: left out."""
    bindings = entry(es, "campaign-job")["payload"]["spec"]["bindings"]
    lp = entry(es, "launch")["payload"]
    if job is None:
        bindings.pop("engine", None)
    elif job is not ...:
        bindings["engine"] = job
    if launch is None:
        lp.pop("engine", None)
        lp["bindings"].pop("engine", None)
    elif launch is not ...:
        lp["engine"] = launch
        lp["bindings"]["engine"] = launch


def _backend(es: list[dict[str, Any]], backend: str | None) -> None:
    for e in es:
        e["subject"] = {**e.get("subject", {}), "backend": backend}


def _subject(backend: str | None) -> dict[str, str]:
    s = {"campaign": "neighbour-campaign-7", "model": "m-7", "host": "gpu-box-1"}
    return s if backend is None else {**s, "backend": backend}


def test_job_recorded_by_hand_for_another_engine_than_its_backend_is_not_qualified(tmp_path: Path) -> None:
    """The reproducer: every entry names backend vllm, the job binds llamacpp and the launch ran it."""
    es = qualified_entries()
    _engine(es, job="llamacpp", launch="llamacpp")
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "INCONCLUSIVE", v.get("claims")
    item = _item(v, "engine-contradicted")
    assert item is not None, v.get("claims")
    assert "backend 'vllm'" in item["detail"] and "'llamacpp'" in item["detail"]
    assert {x["kind"] for x in item["entries"]} == {"job", "engine.launch"}
    # asked about the campaign alone: the same
    assert verdict_of(tmp_path, es, subject=_subject(None))["verdict"] == "INCONCLUSIVE"


def test_launch_alone_naming_another_engine_is_not_qualified(tmp_path: Path) -> None:
    """The job binds no engine; the launch ran llamacpp: the backend vllm is contradicted all the same."""
    es = qualified_entries()
    _engine(es, job=None, launch="llamacpp")
    v = verdict_of(tmp_path, es)
    assert v["verdict"] != "QUALIFIED"
    assert _item(v, "engine-contradicted") is not None, v.get("claims")


@pytest.mark.parametrize(
    ("backend", "engine"),
    [
        ("vLLM", "vllm"),
        ("vllm", " vLLM "),
        ("llama.cpp", "llamacpp"),
        ("llamacpp", "llama.cpp"),
        ("vllm", "VLLM"),
    ],
    ids=["case", "whitespace", "alias-backend", "alias-engine", "engine-case"],
)
def test_the_same_engine_spelled_otherwise_is_no_contradiction(
    tmp_path: Path, backend: str, engine: str
) -> None:
    es = qualified_entries()
    _engine(es, job=engine, launch=engine)
    _backend(es, backend)
    try:
        v = verdict_of(tmp_path, es, subject=_subject(backend))
    except SchemaError:
        return  # a spelling the log refuses at ingest never reaches the verdict
    assert _item(v, "engine-contradicted") is None, v.get("claims")
    if engine.strip().casefold() in ("vllm",):
        assert v["verdict"] == "QUALIFIED", (v["gates"], v.get("claims"))


def test_backend_absent_has_nothing_to_contradict(tmp_path: Path) -> None:
    es = qualified_entries()
    _engine(es, job="llamacpp", launch="llamacpp")
    _backend(es, None)
    v = verdict_of(tmp_path, es, subject=_subject(None))
    assert _item(v, "engine-contradicted") is None, v.get("claims")


def test_engine_absent_from_the_job_is_judged_by_the_launch(tmp_path: Path) -> None:
    """The job binds no engine (a launch must record one: the schema refuses a launch without it): the
    launch's vllm bears the backend out — QUALIFIED; its llamacpp contradicts it (above)."""
    es = qualified_entries()
    _engine(es, job=None)
    v = verdict_of(tmp_path, es)
    assert _item(v, "engine-contradicted") is None, v.get("claims")
    assert v["verdict"] == "QUALIFIED", (v["gates"], v.get("claims"))
    es = qualified_entries()
    _engine(es, launch=None)
    with pytest.raises(SchemaError, match="engine"):
        verdict_of(tmp_path, es)


@pytest.mark.parametrize("engine", [5, "", "  "], ids=["number", "empty", "blank"])
def test_engine_mistyped_is_not_qualified(tmp_path: Path, engine: Any) -> None:
    """An engine that is no name cannot show the backend ran: refused at ingest, or not QUALIFIED."""
    es = qualified_entries()
    _engine(es, job=engine)
    try:
        v = verdict_of(tmp_path, es)
    except SchemaError:
        return
    assert v["verdict"] != "QUALIFIED", v.get("claims")


def test_a_generic_engine_names_any_backend(tmp_path: Path) -> None:
    """Neighbour: the collector's generic kind (any server) names no engine family: no contradiction."""
    es = qualified_entries()
    _engine(es, job="generic", launch="generic")
    v = verdict_of(tmp_path, es)
    assert _item(v, "engine-contradicted") is None, v.get("claims")


def test_a_mistyped_engines_of_any_backend_is_the_policys_error(tmp_path: Path) -> None:
    pol = tmp_path / "policies"
    shutil.copytree(POLICY_DIR, pol)
    f = pol / "backend-qualification.toml"
    f.write_text(
        f.read_text().replace('engines_of_any_backend = ["generic"]', "engines_of_any_backend = [1]")
    )
    with pytest.raises(PolicyError, match="engines_of_any_backend"):
        verdict_of(tmp_path, qualified_entries(), policy_dir=pol)


# --- 3. after-launch-end by log order, for harness results too ------------------------------------------


def _ended(es: list[dict[str, Any]], *, ended_at: str | None, logged_at: str) -> None:
    """The launch entry records the run's end at ``ended_at`` (None: no end) and is logged at
    ``logged_at``."""
    launch = entry(es, "launch")
    if ended_at is not None:
        launch["payload"]["ended_at"] = ended_at
    launch["logged_at"] = logged_at


def test_harness_result_logged_after_its_launch_recorded_the_end_is_not_credited(tmp_path: Path) -> None:
    """The reproducer: the launch entry (logged 10:25, recording the end 10:24) comes before the
    benchmark the log took at 10:30 that claims it was collected at 10:20, inside the run: not credited."""
    es = qualified_entries()
    _ended(es, ended_at="2026-09-10T10:24:00Z", logged_at="2026-09-10T10:25:00Z")
    launch = entry(es, "launch")
    es.remove(launch)
    es.insert(es.index(entry(es, "semantic-review")) + 1, launch)
    b = entry(es, "benchmark")
    b["at"], b["logged_at"] = "2026-09-10T10:20:00Z", "2026-09-10T10:30:00Z"
    v = verdict_of(tmp_path, es)
    assert rejected(v).get("benchmark") == "after-launch-end", v["rejected"]
    assert v["verdict"] != "QUALIFIED"
    [r] = [
        r for r in v["rejected"] if r["rule"] == "after-launch-end" and v["_names"][r["entry"]] == "benchmark"
    ]
    assert "logged" in r["detail"]


def test_harness_result_logged_before_the_launch_recorded_the_end_is_credited(tmp_path: Path) -> None:
    """Neighbour: the launch entry recording the end is logged after every harness result: credited."""
    es = qualified_entries()
    _ended(es, ended_at="2026-09-10T10:46:00Z", logged_at="2026-09-10T10:47:00Z")
    launch = entry(es, "launch")
    es.remove(launch)
    es.insert(es.index(entry(es, "benchmark-acceptance")) + 1, launch)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "QUALIFIED", (v["gates"], v["rejected"])


def test_launch_entry_with_no_end_recorded_takes_no_credit_away(tmp_path: Path) -> None:
    """Neighbour: the launch entry, logged before the harness results, records no end: credited."""
    es = qualified_entries()
    _ended(es, ended_at=None, logged_at="2026-09-10T10:01:00Z")
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "QUALIFIED", (v["gates"], v["rejected"])
