"""Issue 11: verdicts fail closed, in one vocabulary. One regression per finding, named after it."""

from __future__ import annotations

import copy
import json
import shutil
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.entries import parse_time
from ledger.errors import ConfigError, SchemaError
from ledger.policy.fixtures import _Builder
from ledger.policy.loader import load_policy
from ledger.policy.verdict import evaluate
from ledger.service import Ledger
from ledger.signatures import FailureClass, load_signatures

REPO = Path(__file__).resolve().parents[2]
POLICY_DIR = REPO / "policies"
SHARED = POLICY_DIR / "fixtures" / "_shared"
SUBJECT = {"campaign": "neighbour-campaign-7", "backend": "vllm", "model": "m-7", "host": "gpu-box-1"}
KEYS = {"collector": ["collector"], "reviewer": ["reviewer"], "operator": ["operator"]}


def _shared(*names: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for n in names:
        out.extend(tomllib.loads((SHARED / f"{n}.toml").read_text())["entries"])
    return copy.deepcopy(out)


def qualified_entries() -> list[dict[str, Any]]:
    return _shared("ready-campaign", "semantic-benchmark")


def serves(entries: list[dict[str, Any]], served_name: str) -> None:
    """Make ``served_name`` the model id the campaign's approved spec binds (its job's spec.bindings), and
    the id the harnesses' endpoint served (their bounds.bindings.served_models), where there are some."""
    entry(entries, "campaign-job")["payload"]["spec"]["bindings"]["served_name"] = served_name
    for harness in (e for e in entries if e.get("name") in ("benchmark", "semantic")):
        if "bindings" in harness["payload"].get("bounds", {}):
            harness["payload"]["bounds"]["bindings"] = {"served_models": served_name}


def verdict_of(
    tmp_path: Path,
    entries: list[dict[str, Any]],
    subject: dict[str, str] | None = None,
    policy_dir: Path = POLICY_DIR,
    keys: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
    home = tmp_path / f"home-{len(list(tmp_path.glob('home-*')))}"
    ledger = Ledger.init(home, genesis_at=parse_time("2026-09-10T09:00:00Z"))
    try:
        spec = {
            "start": "2026-09-10T09:00:00Z",
            "keys": keys or KEYS,
            "defaults": {"subject": SUBJECT},
            "entries": entries,
        }
        b = _Builder(ledger, spec, policy_dir)
        b.enrol_keys()
        b.add_all(entries)
        out = evaluate(ledger, dict(subject or SUBJECT), load_policy("backend-qualification", policy_dir))
        out["_names"] = {e.entry_id: n for n, e in b.names.items()}
        return out
    finally:
        ledger.close()


def gates(v: dict[str, Any]) -> dict[str, str]:
    return {g["name"]: g["status"] for g in v["gates"]}


def rejected(v: dict[str, Any]) -> dict[str, str]:
    return {v["_names"][r["entry"]]: r["rule"] for r in v["rejected"] if r["entry"] in v["_names"]}


def counted_against(v: dict[str, Any]) -> dict[str, str]:
    """The rejected entries a rule only withheld credit from and that still count against the engine."""
    return {
        v["_names"][r["entry"]]: r["rule"]
        for r in v["rejected"]
        if r["entry"] in v["_names"] and r.get("counts_against") is True
    }


def entry(entries: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(e for e in entries if e.get("name") == name)


def test_neighbour_qualified_baseline(tmp_path: Path) -> None:
    assert verdict_of(tmp_path, qualified_entries())["verdict"] == "QUALIFIED"


# --- one vocabulary --------------------------------------------------------------------------------------


def test_engine_dead_after_ready_is_runtime_reliability(tmp_path: Path) -> None:
    """Seed 003 shape: ready, then EngineDeadError / abort -6 on the first completion."""
    for sig, extra in (
        ("engine-dead", {"exit_code": -6, "signal": 6}),
        ("engine-exited-after-readiness", {"exit_code": 1}),
        ("cpu-attention-unsupported", {"exit_code": 1}),
        ("request-failed", {}),
    ):
        es = qualified_entries()
        entry(es, "launch")["payload"].update(failure_signature=sig, **extra)
        c = entry(es, "completion")["payload"]
        c.update(ok=False, text=None, error="EngineDeadError")
        v = verdict_of(tmp_path, es)
        assert v["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY", (sig, v["gates"])
        assert gates(v)["runtime-stability"] == "failed", sig


def test_unknown_signature_fails_closed(tmp_path: Path) -> None:
    es = qualified_entries()
    entry(es, "launch")["payload"]["failure_signature"] = "brand-new-crash-mode"
    v = verdict_of(tmp_path, es)
    assert v["verdict"] != "QUALIFIED"
    g = next(g for g in v["gates"] if g["name"] == "runtime-stability")
    assert g["status"] == "failed" and "does not know" in g["reason"]


def test_startup_failure_then_ready_fallback_is_not_a_runtime_fault(tmp_path: Path) -> None:
    es = qualified_entries()
    first = copy.deepcopy(entry(es, "launch"))
    first["name"] = "launch-uva"
    first["at"] = "2026-09-10T10:00:30Z"
    first["payload"].update(ready=False, exit_code=1, failure_signature="uva-unavailable")
    es.insert(es.index(entry(es, "launch")), first)
    assert verdict_of(tmp_path, es)["verdict"] == "QUALIFIED"


def test_every_recordable_name_is_known_to_the_policy() -> None:
    """Every signature, gate name and probe `check` the collectors can record is known to the policy."""
    from ledger.collectors.campaign import collector_gates
    from ledger.entries import HealthProbe

    policy = load_policy("backend-qualification", POLICY_DIR)
    faults, stops = set(policy.params["fault_classes"]), set(policy.params["stop_classes"])
    assert faults | stops <= {c.value for c in FailureClass}
    assert not faults & stops
    for sig in load_signatures():
        assert sig.failure_class in FailureClass, sig.id
    # every class but the stop classes fails a launch that had reached readiness: closed by construction
    assert stops == {FailureClass.OPERATOR_STOP.value}
    gate_names = [g.spec.name for g in policy.gates]
    assert list(collector_gates(policy)) == gate_names
    from ledger.collectors.campaign import STEP_FOR_GATE

    assert set(STEP_FOR_GATE) <= set(gate_names), set(STEP_FOR_GATE) - set(gate_names)
    # every probe `check` value the collectors write is selected by some gate (or is restoration-only)
    import ast
    import inspect

    import ledger.collectors.probe as probe

    checks = {
        n.value
        for n in ast.walk(ast.parse(inspect.getsource(probe)))
        if isinstance(n, ast.Dict)
        for k, n in zip(n.keys, n.values, strict=True)
        if isinstance(k, ast.Constant) and k.value == "check" and isinstance(n, ast.Constant)
    }
    assert checks, "found no probe check values"
    selected = {
        sel.get("payload.check")
        for g in policy.gates
        for sel in g.spec.select
        if sel.get("kind") == "health.probe"
    }
    known = selected | {"models", "restoration"}
    assert checks <= known, checks - known
    assert HealthProbe.model_fields["check"].default in selected
    import typing

    assert checks <= set(typing.get_args(HealthProbe.model_fields["check"].annotation))


def test_policy_with_unknown_fault_class_is_refused(policy_copy: Path) -> None:
    from ledger.errors import PolicyError

    p = policy_copy / "backend-qualification.toml"
    p.write_text(
        p.read_text().replace('fault_classes = ["runtime-fault"', 'fault_classes = ["runtime-faults"')
    )
    with pytest.raises(PolicyError, match="runtime-faults"):
        load_policy(str(p))


@pytest.mark.parametrize(
    ("old", "new", "named"),
    [
        ('missing = "a /v1/models', 'missings = "a /v1/models', r"requires\.\d\.missing"),
        ('missing = "a /v1/models', '# missing = "a /v1/models', r"requires\.\d\.missing"),
        ("[[gates.requires]]\n# an identity", "[[gates.require]]\n# an identity", "require"),
    ],
)  # fmt: skip
def test_a_gate_requirement_with_a_dropped_or_renamed_field_is_refused(
    policy_copy: Path, old: str, new: str, named: str
) -> None:
    from ledger.errors import PolicyError

    p = policy_copy / "backend-qualification.toml"
    text = p.read_text()
    assert old in text
    p.write_text(text.replace(old, new, 1))
    with pytest.raises(PolicyError, match=named):
        load_policy(str(p))


@pytest.mark.parametrize(
    ("old", "new", "named"),
    [
        # in a gate requirement: `nul` for `null` held, unseen, whenever no models probe was selected
        ("e.payload.expected == null)", "e.payload.expected == nul)", "'nul'"),
        # in a check: `evidnce` read from a context that has `evidence`
        ("expr = \"evidence.exists(e, e.kind == 'engine.launch' && e.payload.ready && e.derived",
         "expr = \"evidnce.exists(e, e.kind == 'engine.launch' && e.payload.ready && e.derived", "'evidnce'"),
        # in a check's `each`: `evidence` is not in a per-entry context
        ("each = \"e.kind != 'health.probe' || e.payload.check != 'health' || e.derived.ok\"",
         "each = \"evidence.all(x, x.derived.ok)\"", "'evidence'"),
        # in a rule: `param` for `params`
        ("params.attempt_budget", "param.attempt_budget", "'param'"),
    ],
)  # fmt: skip
def test_a_condition_reading_a_variable_its_context_lacks_is_refused_at_load(
    policy_copy: Path, old: str, new: str, named: str
) -> None:
    """Regression: CEL reports an undefined variable only when evaluation reaches it, so a typo inside
    `evidence.exists(e, …)` (`e.payload.expected == nul`) held whenever the selection was empty."""
    from ledger.errors import PolicyError

    p = policy_copy / "backend-qualification.toml"
    text = p.read_text()
    assert old in text
    p.write_text(text.replace(old, new, 1))
    with pytest.raises(PolicyError, match=f"reads {named}, which its context does not have"):
        load_policy(str(p))


def test_signature_without_class_is_refused(tmp_path: Path) -> None:
    from ledger.errors import ConfigError

    p = tmp_path / "s.toml"
    p.write_text('[[signature]]\nid = "x"\ntitle = "x"\nready = true\n')
    with pytest.raises(ConfigError, match="class"):
        load_signatures(p)
    p.write_text('[[signature]]\nid = "x"\ntitle = "x"\nready = true\nclass = "cosmic-ray"\n')
    with pytest.raises(ConfigError, match="cosmic-ray"):
        load_signatures(p)


# --- fail closed by construction ------------------------------------------------------------------------


def test_sleeping_probe_without_check_field_fails_readiness(tmp_path: Path) -> None:
    es = qualified_entries()
    health = entry(es, "health")["payload"]
    del health["check"]
    health["sleeping"] = True
    v = verdict_of(tmp_path, es)
    assert gates(v)["api-readiness"] == "failed"
    assert v["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY"


def test_string_false_is_refused_at_ingest(tmp_path: Path) -> None:
    es = qualified_entries()
    entry(es, "completion")["payload"]["ok"] = "false"
    with pytest.raises(SchemaError, match="ok"):
        verdict_of(tmp_path, es)


def test_int_for_float_is_still_accepted(tmp_path: Path) -> None:
    es = qualified_entries()
    entry(es, "launch")["payload"]["time_to_ready_s"] = 40
    assert verdict_of(tmp_path, es)["verdict"] == "QUALIFIED"


def test_launch_without_attempt_is_counted_from_the_log(tmp_path: Path) -> None:
    """Four launches, none (or a wrong) `attempt` claimed: the 4th is beyond the budget, its probes too."""
    es = qualified_entries()
    base = entry(es, "launch")
    i = es.index(base)
    fails = []
    for n in range(3):
        f = copy.deepcopy(base)
        f["name"] = f"fail-{n}"
        f["at"] = f"2026-09-10T10:00:2{n}Z"
        f["payload"].update(
            ready=False, exit_code=1, failure_signature="engine-died-before-readiness", attempt=1
        )
        fails.append(f)
    del base["payload"]["attempt"]
    base["payload"]["started_at"] = "2026-09-10T10:00:30Z"
    es[i:i] = fails
    v = verdict_of(tmp_path, es)
    r = rejected(v)
    assert r["launch"] == "beyond-attempt-budget"
    assert r["completion"] == "beyond-attempt-budget"
    assert v["verdict"] != "QUALIFIED"


@pytest.mark.parametrize("collected", ["2026-09-10T10:00:15Z", "2026-09-10T10:00:19.999999Z"])
def test_a_probe_collected_before_the_launch_started_is_not_credited(tmp_path: Path, collected: str) -> None:
    """Regression (a neighbour of the QUALIFIED fixture: its completion probe, collected five seconds
    before the engine was started, still earned ready-control): a probe with no launch of the campaign
    started before it (derived attempt 0) probed some other engine; it is rejected, and the control gate
    it alone would have passed has no evidence."""
    es = qualified_entries()
    entry(es, "completion")["at"] = collected  # the launch started at 10:00:20 (logged at 10:01:00)
    v = verdict_of(tmp_path, es)
    assert rejected(v)["completion"] == "before-launch"
    detail = next(r["detail"] for r in v["rejected"] if v["_names"].get(r["entry"]) == "completion")
    assert "no launch of the campaign had started" in detail and "completion probe" in detail
    assert gates(v)["ready-control"] == "missing" and v["verdict"] == "INCONCLUSIVE"


def test_a_probe_taken_while_only_a_superseded_launch_had_started_is_not_credited(tmp_path: Path) -> None:
    """The same when the launch before the probes is superseded: no credited attempt was running."""
    es = qualified_entries()
    es.append(
        {
            "name": "withdraw-launch",
            "kind": "supersession",
            "key": "operator",
            "at": "2026-09-10T10:55:00Z",
            "refs": {"supersedes": "launch"},
            "payload": {"reason": "the launch record was for another engine"},
        }
    )
    v = verdict_of(tmp_path, es)
    r = rejected(v)
    assert r["launch"] == "superseded"
    assert {r[n] for n in ("health", "models", "completion", "structured", "sequential")} == {"before-launch"}
    assert v["verdict"] == "INCONCLUSIVE"


@pytest.mark.parametrize(
    "stop", [{"exit_code": 143, "details": {"stop_reason": "finished"}}, {"exit_code": 0}]
)
def test_a_probe_taken_after_its_launch_ended_is_not_credited(tmp_path: Path, stop: dict[str, Any]) -> None:
    """Regression (a neighbour of the QUALIFIED fixture: the launch records that it ended at 10:01:08 — the
    collector's own stop — and the completion, structured and sequential probes taken after it still
    earned their gates): a probe observed after the end its launch records answered no engine of the
    campaign; it is rejected, whatever it says."""
    es = qualified_entries()
    launch = entry(es, "launch")["payload"]
    # (its details keep where it served, details.base_url: the probes before the end asked it, fix 159)
    launch.update(
        ended_at="2026-09-10T10:01:08Z",
        **{**stop, "details": {**launch["details"], **stop.get("details", {})}},
    )
    v = verdict_of(tmp_path, es)
    r = rejected(v)
    assert {r[n] for n in ("completion", "structured", "sequential")} == {"after-launch-end"}
    assert "health" not in r and "models" not in r  # taken before the end
    detail = next(x["detail"] for x in v["rejected"] if v["_names"].get(x["entry"]) == "completion")
    assert "after the launch of attempt 1 recorded its end" in detail
    assert v["verdict"] != "QUALIFIED"


def test_a_launch_that_ends_before_it_starts_is_refused_at_ingest(tmp_path: Path) -> None:
    es = qualified_entries()
    entry(es, "launch")["payload"]["ended_at"] = "2026-09-10T10:00:19Z"  # started 10:00:20
    with pytest.raises(SchemaError, match="ended_at 2026-09-10T10:00:19Z is before started_at"):
        verdict_of(tmp_path, es)


@pytest.mark.parametrize(
    ("served", "identity", "verdict"),
    [
        (["other"], "m-7", "NOT QUALIFIED — RUNTIME RELIABILITY"),  # the claimed identity, contradicted
        (["other", "m-7"], "other", "QUALIFIED"),  # served among others
        (None, "m-7", "QUALIFIED"),  # no list recorded: the identity it names
        (None, "other", "NOT QUALIFIED — RUNTIME RELIABILITY"),
        # a list mistyped: no id is shown served (it failed the whole verdict as a CEL error before)
        ("m-7", "m-7", "NOT QUALIFIED — RUNTIME RELIABILITY"),
        (7, "m-7", "NOT QUALIFIED — RUNTIME RELIABILITY"),
        ({"m-7": True}, "m-7", "NOT QUALIFIED — RUNTIME RELIABILITY"),
        (["M-7"], "m-7", "NOT QUALIFIED — RUNTIME RELIABILITY"),  # ids are compared exactly
    ],
)
def test_the_identity_probe_is_judged_by_the_ids_the_engine_listed(
    tmp_path: Path, served: Any, identity: str, verdict: str
) -> None:
    """Regression (a /v1/models probe whose recorded list of served ids lacks the expected model, but whose
    `model_identity` claims it, passed api-readiness): the raw list decides; the named identity only where
    no list was recorded."""
    es = qualified_entries()
    serves(es, "m-7")
    p = entry(es, "models")["payload"]
    p.update(expected="m-7", model_identity=identity, details={} if served is None else {"served": served})
    assert verdict_of(tmp_path, es)["verdict"] == verdict


def _rerun(es: list[dict[str, Any]], gate: str, at: str, reviewed: bool, **payload: Any) -> None:
    """A newer run of the campaign's ``gate`` harness (the same spec), logged at ``at``, before the job
    ends; ``reviewed``: with a review PASS (and, for the benchmark, an acceptance) of its own."""
    run = copy.deepcopy(entry(es, gate))
    run["name"], run["at"] = f"{gate}-rerun", at
    for k, v in payload.items():
        if isinstance(v, dict):
            run["payload"][k].update(v)
        else:
            run["payload"][k] = v
    new = [run]
    if reviewed:
        new.append(
            {
                "name": f"{gate}-rerun-review",
                "kind": "review",
                "key": "reviewer",
                "at": at,
                "refs": {"reviews": run["name"]},
                "payload": {"result": "PASS", "commit": "cafe" + "0" * 36},
            }
        )
        if gate == "benchmark":
            new.append(
                {
                    "name": "benchmark-rerun-acceptance",
                    "kind": "acceptance",
                    "key": "operator",
                    "at": at,
                    "refs": {"subject": run["name"]},
                    "payload": {"decision": "accepted", "reason": "rerun"},
                }
            )
    i = es.index(entry(es, "campaign-done"))
    es[i:i] = new  # fmt: skip


@pytest.mark.parametrize(
    ("gate", "payload"),
    [
        ("benchmark", {"status": "failed", "figures": {"ttft_ms.p95@c4": 9999.0}}),
        ("benchmark", {"figures": {"ttft_ms.p95@c4": 9999.0}}),  # says passed, out of bounds
        ("semantic", {"status": "failed", "figures": {"score": 0.5}, "counts": {"passed": 6, "failed": 6}}),
    ],
)
def test_a_newer_unreviewed_harness_run_is_not_hidden_behind_an_older_reviewed_pass(
    tmp_path: Path, gate: str, payload: dict[str, Any]
) -> None:
    """Regression (a neighbour of the QUALIFIED fixture: a newer benchmark or semantic run that failed, not
    yet reviewed, was rejected for its missing review, and the older reviewed, accepted pass still made the
    campaign QUALIFIED): a passing run stands only as the newest run of its spec (rule newer-run). The newer
    one decides: a pass once reviewed (and accepted) — INCONCLUSIVE until then —, a failure at once (a
    review is asked of what would be credited as passing; a failed run is evidence against the engine)."""
    es = qualified_entries()
    _rerun(es, gate, "2026-09-10T10:47:00Z", reviewed=False, **payload)
    v = verdict_of(tmp_path, es)
    r = rejected(v)
    assert r[gate] == "newer-run"
    if payload.get("status") == "failed":
        assert f"{gate}-rerun" not in r
        g = next(g for g in v["gates"] if g["name"] == gate)
        assert g["status"] == "failed" and v["verdict"] == g["verdict_if_failed"]
    else:
        assert r[f"{gate}-rerun"] == "review-missing"
        assert gates(v)[gate] == "missing" and v["verdict"] == "INCONCLUSIVE"


@pytest.mark.parametrize(
    ("gate", "step"), [("benchmark", "review"), ("benchmark", "acceptance"), ("semantic", "review")]
)
def test_an_older_failed_run_left_unreviewed_is_not_hidden_by_a_newer_reviewed_pass(
    tmp_path: Path, gate: str, step: str
) -> None:
    """Regression: a failed harness run nobody reviewed (or, for the benchmark, accepted) was rejected for
    the missing review, so the reviewed pass logged after it made the campaign QUALIFIED — a rerun until it
    passes. A review and an acceptance are asked of what would be credited as passing only."""
    es = qualified_entries()
    failed = copy.deepcopy(entry(es, gate))
    failed.update(name=f"{gate}-failed", at="2026-09-10T10:05:00Z")
    if gate == "benchmark":
        failed["payload"].update(status="failed", figures={"ttft_ms.p95@c4": 9999.0})
    else:
        failed["payload"].update(status="failed", figures={"score": 0.5})
        failed["payload"]["counts"].update(passed=6, failed=6)
    es.insert(es.index(entry(es, gate)), failed)
    if step == "acceptance":  # reviewed, not accepted
        es.append(
            {
                "kind": "review",
                "key": "reviewer",
                "at": "2026-09-10T10:06:00Z",
                "refs": {"reviews": failed["name"]},
                "payload": {"result": "PASS", "commit": "cafe000000000000000000000000000000000000"},
            }
        )
    v = verdict_of(tmp_path, es)
    assert failed["name"] not in rejected(v)
    assert gates(v)[gate] == "failed"
    assert v["verdict"] != "QUALIFIED"


def test_a_failed_harness_run_is_not_hidden_by_a_newer_passing_one(tmp_path: Path) -> None:
    """No rerun until it passes: an accepted failed benchmark stays against the engine however many passing
    runs follow it (only a supersession, with its reason, withdraws it)."""
    es = qualified_entries()
    entry(es, "benchmark")["payload"].update(status="failed")
    entry(es, "benchmark")["payload"]["figures"]["ttft_ms.p95@c4"] = 9999.0
    _rerun(es, "benchmark", "2026-09-10T10:47:00Z", reviewed=True, status="passed",
           figures={"ttft_ms.p95@c4": 350.4})  # fmt: skip
    v = verdict_of(tmp_path, es)
    assert "benchmark" not in rejected(v)
    assert v["verdict"] == "NOT QUALIFIED — PERFORMANCE"


def test_the_newest_reviewed_passing_run_decides_and_a_diagnostic_run_hides_nothing(tmp_path: Path) -> None:
    es = qualified_entries()
    _rerun(es, "benchmark", "2026-09-10T10:47:00Z", reviewed=True)
    v = verdict_of(tmp_path, es)
    assert rejected(v)["benchmark"] == "newer-run" and v["verdict"] == "QUALIFIED"
    assert "benchmark-rerun" in {v["_names"].get(i) for i in v["used"]}
    # a newer run of another spec (a 6-request diagnostic) is another measurement: the approved run stands
    es = qualified_entries()
    _rerun(es, "benchmark", "2026-09-10T10:47:00Z", reviewed=True, counts={"requests": 6})
    v = verdict_of(tmp_path, es)
    assert rejected(v)["benchmark-rerun"] == "spec-mismatch" and "benchmark" not in rejected(v)
    assert v["verdict"] == "QUALIFIED"


@pytest.mark.parametrize(
    "line",
    ["Segmentation fault (core dumped)", "NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error"],
)
def test_a_ready_engine_whose_log_shows_a_segfault_or_nccl_error_is_not_qualified(
    tmp_path: Path, line: str
) -> None:
    """Regression (a real engine failing in a way the signature table did not know: a worker's segfault or a
    failed NCCL collective in the stored log of a launch that reached readiness left it QUALIFIED)."""
    es = qualified_entries()
    entry(es, "launch")["artifacts"] = [{"name": "stderr.log", "text": f"INFO ready\n{line}\n"}]
    v = verdict_of(tmp_path, es)
    assert gates(v)["runtime-stability"] == "failed" and v["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY"


def _job_started(name: str, job_id: str, at: str) -> dict[str, Any]:
    """A fixture `job` entry: ``job_id`` running from ``at`` (a collector's)."""
    return {
        "name": name,
        "kind": "job",
        "key": "collector",
        "at": at,
        # the campaign's approved spec, as every job of it binds it (a job binding none conflicts: fix117)
        "payload": {
            "job_id": job_id,
            "state": "running",
            "started_at": at,
            "spec": copy.deepcopy(entry(qualified_entries(), "campaign-job")["payload"]["spec"]),
        },
    }


def _job_ended(name: str, job_id: str, state: str, at: str, exit_code: int) -> dict[str, Any]:
    """A fixture terminal `job` entry: ``job_id`` ended ``state`` at ``at`` (an operator's)."""
    return {
        "name": name,
        "kind": "job",
        "key": "operator",
        "at": at,
        "payload": {"job_id": job_id, "state": state, "ended_at": at, "exit_code": exit_code},
    }


def test_output_after_kill_without_job_ref_is_rejected(tmp_path: Path) -> None:
    es = qualified_entries()
    kill = _job_ended("killed", "campaign-1", "killed", "2026-09-10T10:01:30Z", 143)
    seq = entry(es, "sequential")
    es.insert(es.index(seq), kill)
    del seq["refs"]
    v = verdict_of(tmp_path, es)
    assert rejected(v)["sequential"] == "after-job-terminal"
    assert v["verdict"] != "QUALIFIED"


def test_launch_without_bindings_is_rejected_when_the_campaign_pins(tmp_path: Path) -> None:
    es = qualified_entries()
    del entry(es, "launch")["payload"]["bindings"]
    v = verdict_of(tmp_path, es)
    assert rejected(v)["launch"] == "bindings-mismatch"
    assert v["verdict"] != "QUALIFIED"


def _review_case(
    tmp_path: Path, pass_payload: dict[str, Any], *, pass_before_fail: bool = False
) -> dict[str, Any]:
    es = qualified_entries()
    entry(es, "semantic")["subject"] = {"commit": "f" * 40}
    fail = {
        "name": "fail",
        "kind": "review",
        "key": "reviewer",
        "at": "2026-09-10T10:21:00Z",
        "refs": {"reviews": "semantic"},
        "payload": {"result": "FAIL", "commit": "f" * 40},
    }
    late_pass = {
        "name": "pass",
        "kind": "review",
        "key": "reviewer",
        "at": "2026-09-10T10:22:00Z",
        "refs": {"reviews": "semantic"},
        "payload": pass_payload,
    }
    i = es.index(entry(es, "semantic-review")) + 1
    es[i:i] = [late_pass, fail] if pass_before_fail else [fail, late_pass]
    return verdict_of(tmp_path, es)


def test_review_pass_without_commit_does_not_lift_fail(tmp_path: Path) -> None:
    v = _review_case(tmp_path, {"result": "PASS"})
    assert rejected(v)["semantic"] == "review-fail"
    assert v["verdict"] != "QUALIFIED"


def test_review_pass_on_repaired_commit_attached_to_failed_evidence_does_not_lift_fail(
    tmp_path: Path,
) -> None:
    v = _review_case(tmp_path, {"result": "PASS", "commit": "a" * 40})
    assert rejected(v)["semantic"] == "review-fail"
    assert "attached to evidence of commit" in next(
        r["detail"] for r in v["rejected"] if r["rule"] == "review-fail"
    )


def test_review_pass_earlier_than_fail_does_not_lift_it(tmp_path: Path) -> None:
    v = _review_case(tmp_path, {"result": "PASS", "commit": "a" * 40}, pass_before_fail=True)
    assert rejected(v)["semantic"] == "review-fail"


# --- property: drop or rename any one field a gate reads to pass ---------------------------------------

# (entry, payload path) pairs the qualified campaign's gates read to PASS (fields whose absence the
# model's defaults would otherwise fill: every selector, flag, text, count and spec field).
NEEDED = [
    ("host", "gpus"),
    ("pin", "revision"),
    ("pin", "files"),
    ("launch", "ready"),
    ("launch", "bindings"),
    ("launch", "bindings/model_revision"),
    ("launch", "bindings/model_repo"),
    ("launch", "bindings/engine"),
    ("health", "check"),
    ("health", "http_status"),
    ("completion", "check"),
    ("completion", "http_status"),
    ("completion", "ok"),
    ("completion", "text"),
    ("structured", "check"),
    ("structured", "ok"),
    ("structured", "text"),
    ("structured", "details/schema"),
    ("structured", "http_status"),
    ("sequential", "check"),
    ("sequential", "http_status"),
    ("sequential", "ok"),
    ("sequential", "count"),
    ("semantic", "gate"),
    ("semantic", "status"),
    ("semantic", "counts/items"),
    ("semantic", "counts/asked"),
    ("semantic", "counts/passed"),
    ("semantic", "figures/score"),
    ("semantic", "bounds/corpus_digest"),
    ("semantic", "bounds/outcome"),
    ("benchmark", "gate"),
    ("benchmark", "status"),
    ("benchmark", "counts/requests"),
    ("benchmark", "bounds/concurrency"),
    ("benchmark", "bounds/repetitions"),
    ("benchmark", "bounds/corpus_digest"),
    ("benchmark", "bounds/valid"),
    ("benchmark", "bounds/outcome"),
    ("benchmark", "figures/ttft_ms.p95@c4"),
    ("benchmark", "figures/error_rate"),
    ("benchmark", "figures/c1_parity"),
    ("benchmark-review", "commit"),
    ("semantic-review", "commit"),
    ("benchmark-acceptance", "decision"),
    ("semantic-review", "result"),
]


@pytest.mark.parametrize("how", ["drop", "rename", "typo"])
@pytest.mark.parametrize("which", NEEDED, ids=["/".join(w) for w in NEEDED])
def test_dropped_or_renamed_field_never_passes(tmp_path: Path, which: tuple[str, str], how: str) -> None:
    """Every field a gate or rule reads, dropped, renamed or misspelled (each one, exhaustively): the
    campaign is refused at ingest or never QUALIFIED — except dropping a field whose value is its model's
    default (`check = "health"`), which changes nothing and must judge the same."""
    name, path = which
    es = qualified_entries()
    holder = entry(es, name)["payload"]
    *parents, leaf = path.split("/")
    for p in parents:
        holder = holder[p]
    value = holder.pop(leaf)
    no_op = False
    if not parents:
        from ledger.entries import KIND_MODELS

        f = KIND_MODELS[(entry(es, name)["kind"], 1)].model_fields[leaf]
        no_op = how == "drop" and not f.is_required() and f.get_default(call_default_factory=True) == value
    if how == "rename":
        holder[leaf.upper()] = value
    elif how == "typo":
        holder[leaf[:-1] + leaf[-1] * 2] = value
    try:
        v = verdict_of(tmp_path, es)
    except SchemaError:
        assert not no_op, which  # a dropped default is no change: it must not be refused either
        return  # refused at ingest: nothing stored, nothing passes
    if no_op:
        assert v["verdict"] == "QUALIFIED", (which, how)
    else:
        assert v["verdict"] != "QUALIFIED", (which, how)


def _other_type(value: Any) -> st.SearchStrategy[Any]:
    """Values of another JSON type than ``value`` (an int stands for a float: the models accept it)."""
    scalars: dict[str, st.SearchStrategy[Any]] = {
        "null": st.none(),
        "bool": st.booleans(),
        "number": st.integers(-3, 3) | st.floats(-1e3, 1e3, allow_nan=False),
        "string": st.text(max_size=8),
        "list": st.lists(st.integers(0, 3), max_size=2),
        "object": st.dictionaries(st.sampled_from(["x", "ok"]), st.integers(0, 1), max_size=2),
    }
    own = (
        "null"
        if value is None
        else "bool"
        if isinstance(value, bool)
        else "number"
        if isinstance(value, int | float)
        else "string"
        if isinstance(value, str)
        else "list"
        if isinstance(value, list)
        else "object"
    )
    return st.one_of(*(v for k, v in scalars.items() if k != own))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), which=st.sampled_from(NEEDED))
def test_a_needed_field_of_another_type_never_passes(
    tmp_path: Path, data: st.DataObject, which: tuple[str, str]
) -> None:
    """Property: any field a gate or rule reads, given a value of another JSON type, is refused at ingest
    or never QUALIFIED (no silent coercion, no `"false"` read as true, no `null` read as zero)."""
    name, path = which
    es = qualified_entries()
    holder = entry(es, name)["payload"]
    *parents, leaf = path.split("/")
    for p in parents:
        holder = holder[p]
    holder[leaf] = data.draw(_other_type(holder[leaf]), label=path)
    try:
        v = verdict_of(tmp_path, es)
    except SchemaError:
        return  # refused at ingest: nothing stored, nothing passes
    assert v["verdict"] != "QUALIFIED", (which, holder[leaf])


# --- messages --------------------------------------------------------------------------------------------


def _bench(tmp_path: Path, counts: dict[str, Any], bounds: dict[str, Any]) -> str:
    es = qualified_entries()
    b = entry(es, "benchmark")["payload"]
    b["counts"], b["bounds"] = counts, bounds
    v = verdict_of(tmp_path, es)
    assert v["verdict"] != "QUALIFIED"
    return next(r["detail"] for r in v["rejected"] if r["rule"] == "spec-mismatch")


def test_spec_mismatch_detail_says_what_differs(tmp_path: Path) -> None:
    d = _bench(tmp_path, {"requests": 96}, {"concurrency": [1, 4]})
    assert "concurrency levels 1/4, approved 1/4/32" in d
    assert "requests" not in d.split(":", 1)[1]  # the request count matches: not named as a difference
    d = _bench(tmp_path, {"requests": 6}, {"concurrency": [1, 4, 32]})
    assert "requests 6, approved 96" in d and "concurrency" not in d.split(":", 1)[1]


def test_spec_mismatch_detail_has_no_unfilled_placeholder(tmp_path: Path) -> None:
    d = _bench(tmp_path, {}, {})
    assert "{" not in d and "}" not in d
    assert "requests not recorded, approved 96" in d
    assert "concurrency levels not recorded, approved 1/4/32" in d


def test_render_never_prints_placeholders() -> None:
    from ledger.policy.acceptance import render

    assert (
        render("a {e[payload][counts][requests]}-request run of {x}", {"e": {"payload": {}}})
        == "a ?-request run of ?"
    )
    assert render("{e}", {}) == "?"


def test_verdict_table_prints_bracketed_evidence_text_verbatim(build, cli, monkeypatch) -> None:
    from ledger.entries import parse_time

    monkeypatch.setenv("COLUMNS", "400")
    b = build("backend-qualification/seed003-review.toml")
    stmt = b.ledger.make_statement(
        "supersession",
        {"campaign": "strix-native-control"},
        {"reason": "[bold]wrong[/bold] [engine failure: engine-dead]"},
        refs=[("supersedes", b.names["pin"])],
        collected_at="2026-09-10T16:00:00Z",
    )
    b.ledger.append([b.ledger.sign(stmt, "operator")], logged_at=parse_time("2026-09-10T16:00:00Z"))
    r = cli("verdict", "--home", str(b.home), "--subject", "campaign=strix-native-control")
    assert "[bold]wrong[/bold] [engine failure: engine-dead]" in r.out, r.out


def test_schema_error_hint_names_a_real_command() -> None:
    from ledger.errors import SchemaError

    hint = SchemaError("x").hint or ""
    assert "kinds show" not in hint and "ledger kinds" in hint


def test_verdict_at_is_labelled_a_log_size(cli) -> None:
    r = cli("verdict", "--help")
    assert "SIZE" in r.out and "(SEQ)" not in r.out


@pytest.mark.parametrize(
    ("section", "bad"),
    [
        ("campaign", "lease_secnds = 5"),
        ("engine", "gpu_memory_utilisation = 0.5"),
        ("gates.control", "expcet = 'X'"),
    ],
)
def test_campaign_file_unknown_key_is_an_error_naming_key_and_file(
    tmp_path: Path, section: str, bad: str
) -> None:
    from ledger.collectors.campaign import load_campaign
    from ledger.errors import ConfigError

    text = {
        "campaign": 'id = "neighbour"\n',
        "model": 'path = "m"\nserved_name = "m"\n',
        "engine": 'kind = "generic"\ncommand = ["x"]\n',
        "gates.control": "enabled = true\n",
    }
    text[section] += bad + "\n"
    p = tmp_path / "c.toml"
    p.write_text("".join(f"[{k}]\n{v}" for k, v in text.items()))
    with pytest.raises(ConfigError) as ei:
        load_campaign(p)
    key = bad.split(" =", maxsplit=1)[0]
    assert f"unknown key '{section}.{key}'" in ei.value.message and str(p) in ei.value.message


def test_payload_stored_before_strict_models_is_rejected_not_judged(tmp_path: Path, monkeypatch) -> None:
    """An `"ok": "false"` stored by an older, lenient ingest: rejected `schema-invalid` with the field
    named, never judged truthy, never a policy error."""
    import ledger.entries as entries_mod
    import ledger.service as service_mod

    real = entries_mod.parse_statement

    def lenient(value: Any) -> Any:
        if isinstance(value, dict) and value.get("payload", {}).get("ok") == "false":
            return entries_mod.Statement.model_validate(value)
        return real(value)

    monkeypatch.setattr(service_mod, "parse_statement", lenient)
    es = qualified_entries()
    entry(es, "completion")["payload"]["ok"] = "false"
    v = verdict_of(tmp_path, es)
    assert rejected(v)["completion"] == "schema-invalid"
    assert "ok" in next(r["detail"] for r in v["rejected"] if r["rule"] == "schema-invalid")
    assert v["verdict"] != "QUALIFIED"


def test_sleeping_probe_with_misspelled_check_never_passes_readiness(tmp_path: Path) -> None:
    es = qualified_entries()
    health = entry(es, "health")["payload"]
    health["check"] = "healthz"
    health["sleeping"] = True
    with pytest.raises(SchemaError, match="check"):
        verdict_of(tmp_path, es)


def test_sleeping_flag_on_any_probe_fails_readiness(tmp_path: Path) -> None:
    es = qualified_entries()
    entry(es, "structured")["payload"]["sleeping"] = True
    v = verdict_of(tmp_path, es)
    assert gates(v)["api-readiness"] == "failed"


@pytest.mark.parametrize(
    ("bounds", "fires"),
    [
        ({"outcome": "operator-stop"}, True),
        ({}, False),  # dropped
        ({"Outcome": "operator-stop"}, False),  # renamed
        ({"outcome": 7}, False),  # mistyped
        ({"outcome": None}, False),
        ({"outcome": "fault"}, False),  # an engine fault is judged, not excused
    ],
)
def test_operator_stopped_rule_only_withholds_credit_for_a_recorded_operator_stop(
    bounds: dict[str, object], fires: bool
) -> None:
    """The shipped `operator-stopped` rule rejects (never credits) a harness result stopped by the
    operator; with its field dropped, renamed or mistyped it does not fire, and the gate is then judged on
    its recorded status and figures — a stopped run records `failed` and no figures, so it cannot pass."""
    import tomllib

    from ledger.policy.conditions import compile_condition

    doc = tomllib.loads(
        (Path(__file__).resolve().parents[2] / "policies" / "backend-qualification.toml").read_text()
    )
    [rule] = [r for r in doc["rules"] if r["name"] == "operator-stopped"]
    assert rule["kinds"] == ["gate.result"]
    cond = compile_condition(rule["when"], "backend-qualification.toml")
    assert cond.holds({"e": {"payload": {"gate": "benchmark", "bounds": bounds}}}) is fires


# --- neighbours of the bindings, pin, control, job-end and semantic rules --------------------------------


@pytest.mark.parametrize("dropped", ["model_revision", "model_repo", "engine_version", "engine"])
def test_launch_leaving_out_one_pinned_binding_is_rejected(tmp_path: Path, dropped: str) -> None:
    """Regression: only the keys a launch recorded were compared, so dropping `model_revision` (or any
    other pinned key) from otherwise present bindings left the launch credited against a pin it never
    named."""
    es = qualified_entries()
    del entry(es, "launch")["payload"]["bindings"][dropped]
    v = verdict_of(tmp_path, es)
    assert rejected(v)["launch"] == "bindings-mismatch"
    detail = next(r["detail"] for r in v["rejected"] if r["rule"] == "bindings-mismatch")
    assert f"{dropped} not recorded" in detail
    assert v["verdict"] != "QUALIFIED"


def test_launch_binding_a_key_the_manifest_does_not_pin_is_still_credited(tmp_path: Path) -> None:
    es = qualified_entries()
    entry(es, "launch")["payload"]["bindings"]["adapter"] = "lora-7"  # pinned by nobody: not compared
    assert verdict_of(tmp_path, es)["verdict"] == "QUALIFIED"


def test_launch_recording_a_different_shard_is_rejected(tmp_path: Path) -> None:
    es = qualified_entries()
    entry(es, "launch")["payload"]["bindings"]["shard:model.safetensors"] = "f" * 64
    assert rejected(verdict_of(tmp_path, es))["launch"] == "bindings-mismatch"


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda p: p.update(files=[], total_size=0), id="no-files"),
        pytest.param(lambda p: p["files"][0].update(sha256=""), id="file-without-sha256"),
        pytest.param(lambda p: p["files"][0].update(blake3=""), id="file-without-blake3"),
        pytest.param(lambda p: p["files"][0].update(verified=False), id="file-failed-its-check"),
    ],
)
def test_model_pin_that_pins_no_verified_file_fails_the_gate(tmp_path: Path, change: Any) -> None:
    """Regression: a `model.pin` with an empty file list (or a file without digests) passed
    `model-pinned`: a pin of nothing counted as pinned."""
    es = qualified_entries()
    change(entry(es, "pin")["payload"])
    v = verdict_of(tmp_path, es)
    assert gates(v)["model-pinned"] == "failed"
    assert v["verdict"] == "NOT QUALIFIED — PREREQUISITES"


@pytest.mark.parametrize("text", ["NOT READY", "READY, but slowly", "Ready", "READY."])
def test_ready_control_is_rejudged_from_the_answer_not_the_ok_claim(tmp_path: Path, text: str) -> None:
    """Regression: the gate checked `ok` and that the text *contained* READY, so "NOT READY" recorded with
    ok = true passed the control."""
    es = qualified_entries()
    entry(es, "completion")["payload"].update(text=text, ok=True)
    v = verdict_of(tmp_path, es)
    assert gates(v)["ready-control"] == "failed"
    assert v["verdict"] == "NOT QUALIFIED — CONTROL"


def test_ready_control_answer_with_surrounding_whitespace_passes(tmp_path: Path) -> None:
    es = qualified_entries()
    entry(es, "completion")["payload"].update(text="  READY\n", ok=True)
    assert verdict_of(tmp_path, es)["verdict"] == "QUALIFIED"


def test_output_after_a_terminal_job_without_ended_at_is_rejected(tmp_path: Path) -> None:
    """Regression: a terminal `job` entry that records no `ended_at` had no end, so output of that job
    logged after it was credited; the log's order decides then."""
    es = qualified_entries()
    done = entry(es, "campaign-done")
    es.remove(done)
    del done["payload"]["ended_at"]
    done["at"] = "2026-09-10T10:01:30Z"
    seq = entry(es, "sequential")
    es.insert(es.index(seq), done)
    v = verdict_of(tmp_path, es)
    assert rejected(v)["sequential"] == "after-job-terminal"
    detail = next(r["detail"] for r in v["rejected"] if r["rule"] == "after-job-terminal")
    assert "records no ended_at" in detail
    assert v["verdict"] != "QUALIFIED"


@pytest.mark.parametrize(
    "counts",
    [
        pytest.param({}, id="no-counts"),
        pytest.param({"items": 12, "passed": 12, "failed": 0}, id="asked-left-out"),
        pytest.param({"items": 12, "asked": 6, "passed": 6, "failed": 0}, id="half-the-corpus-asked"),
        pytest.param({"items": 12, "asked": 12, "passed": 11, "failed": 1}, id="one-item-failed"),
        pytest.param({"items": 0, "asked": 0, "passed": 0, "failed": 0}, id="empty-corpus"),
    ],
)
def test_semantic_pass_without_the_whole_corpus_scored_fails(tmp_path: Path, counts: dict[str, int]) -> None:
    """Regression: a semantic `gate.result` recorded as passed with score 1.0 was credited whatever its
    counts said (or without any): the score is now held to the counts behind it. A result whose item count
    is not the approved corpus's (left out, 0) did not run that corpus: not credited (INCONCLUSIVE)."""
    es = qualified_entries()
    entry(es, "semantic")["payload"]["counts"] = counts
    v = verdict_of(tmp_path, es)
    if counts.get("items") != 12:
        assert rejected(v)["semantic"] == "semantic-spec-mismatch"
        assert v["verdict"] == "INCONCLUSIVE"
        return
    assert gates(v)["semantic"] == "failed"
    assert v["verdict"] == "NOT QUALIFIED — SEMANTIC QUALITY"


@pytest.mark.parametrize(
    ("probe", "gate", "word"),
    [
        ("completion", "ready-control", "NOT QUALIFIED — CONTROL"),
        ("structured", "structured-output", "NOT QUALIFIED — CONTROL"),
        ("sequential", "sequential-requests", "NOT QUALIFIED — RUNTIME RELIABILITY"),
    ],
)
def test_failed_control_is_not_lifted_by_a_later_pass_unless_superseded(
    tmp_path: Path, probe: str, gate: str, word: str
) -> None:
    """Regression: a control gate passed when *any* probe passed, so running a failed control again until
    it answered lifted the failure with nothing on the record; the failed probe must be superseded (with
    its reason) for a rerun to count."""
    es = qualified_entries()
    good = entry(es, probe)
    failed = copy.deepcopy(good)
    failed["name"] = f"{probe}-failed"
    # answered (HTTP 200) but not as the control needs: the control's own failure, not a server fault
    failed["payload"].update(ok=False, http_status=200, error="answer not as expected")
    failed["payload"].pop("text", None)
    es.insert(es.index(good), failed)
    v = verdict_of(tmp_path, es)
    assert gates(v)[gate] == "failed"
    assert v["verdict"] == word
    supersede = {
        "name": "rerun",
        "kind": "supersession",
        "key": "operator",
        "at": "2026-09-10T10:46:00Z",
        "refs": {"supersedes": failed["name"]},
        "payload": {"reason": "the probe timed out while the host was being drained; control run again"},
    }
    es.insert(es.index(entry(es, "campaign-done")), supersede)
    assert verdict_of(tmp_path, es)["verdict"] == "QUALIFIED"


def test_review_pass_naming_no_commit_credits_nothing(tmp_path: Path) -> None:
    """Regression: with no FAIL on record, a review PASS that names no commit credited the harness result
    — a review that does not say what it reviewed."""
    es = qualified_entries()
    del entry(es, "benchmark-review")["payload"]["commit"]
    v = verdict_of(tmp_path, es)
    assert rejected(v)["benchmark"] == "review-missing"
    assert "names none" in next(r["detail"] for r in v["rejected"] if r["rule"] == "review-missing")
    assert v["verdict"] != "QUALIFIED"


@pytest.mark.parametrize(
    ("reviewed", "credited"),
    [("cafe000000000000000000000000000000000000", True), ("beef000000000000000000000000000000000000", False)],
)
def test_review_pass_credits_only_the_commit_the_evidence_was_produced_at(
    tmp_path: Path, reviewed: str, credited: bool
) -> None:
    es = qualified_entries()
    entry(es, "semantic")["subject"] = {"commit": "cafe000000000000000000000000000000000000"}
    entry(es, "semantic-review")["payload"]["commit"] = reviewed
    v = verdict_of(tmp_path, es)
    assert (v["verdict"] == "QUALIFIED") is credited
    if not credited:
        assert rejected(v)["semantic"] == "review-missing"


@pytest.mark.parametrize(
    "facts",
    [
        pytest.param({"exit_code": 1, "ended_at": "2026-09-10T10:01:40Z"}, id="exited-1"),
        pytest.param({"exit_code": 134, "ended_at": "2026-09-10T10:01:40Z"}, id="exited-134"),
        pytest.param({"lease_expired": True}, id="lease-expired"),
    ],
)
def test_ready_launch_that_failed_without_a_signature_fails_runtime_stability(
    tmp_path: Path, facts: dict[str, Any]
) -> None:
    """Regression: runtime stability judged launches by their failure signature's class, so a ready launch
    that exited with status 1 (or whose lease ran out) and left the signature out passed as a clean run."""
    es = qualified_entries()
    entry(es, "launch")["payload"].update(facts)
    v = verdict_of(tmp_path, es)
    assert gates(v)["runtime-stability"] == "failed"
    assert v["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY"


@pytest.mark.parametrize("reason", ["finished", "cancelled", "lease-end"])
@pytest.mark.parametrize(
    "end", [{"exit_code": 0}, {"exit_code": 143}, {"exit_code": 137}, {"signal": 15}, {"signal": 9}]
)
def test_ready_launch_ended_by_the_collectors_own_stop_stays_credited(
    tmp_path: Path, end: dict[str, int], reason: str
) -> None:
    """The collector's stop (SIGTERM, escalated to SIGKILL after the grace period; through a shell or not),
    recorded as its stop reason, is no failure of the engine."""
    es = qualified_entries()
    launch = entry(es, "launch")["payload"]  # (its details keep where it served: details.base_url)
    launch.update(
        end,
        ended_at="2026-09-10T10:49:00Z",
        details={**launch["details"], "stop_reason": reason, "stop_escalated_to_sigkill": True},
    )
    assert verdict_of(tmp_path, es)["verdict"] == "QUALIFIED"


@pytest.mark.parametrize(
    ("end", "details", "signature"),
    [
        pytest.param({"signal": 9}, {"stop_reason": "exited"}, "killed-sigkill", id="sigkill-on-its-own"),
        pytest.param({"exit_code": 137}, {"stop_reason": "exited"}, "killed-137", id="137-on-its-own"),
        pytest.param(
            {"exit_code": 0},
            {"stop_reason": "exited"},
            "engine-exited-after-readiness",
            id="exit-0-on-its-own",
        ),
        pytest.param({"signal": 9}, {}, "killed-sigkill", id="sigkill-stop-reason-left-out"),
        pytest.param({"exit_code": 137}, {}, "killed-137", id="137-stop-reason-left-out"),
        pytest.param({"exit_code": 0}, {}, "engine-exited-after-readiness", id="exit-0-stop-reason-left-out"),
        pytest.param({"signal": 9}, {"stop_reason": 7}, "killed-sigkill", id="stop-reason-mistyped"),
        pytest.param({"signal": 9}, {"stopReason": "finished"}, "killed-sigkill", id="stop-reason-renamed"),
        pytest.param(
            {"exit_code": 0},
            {"stop_reason": "Finished "},
            "engine-exited-after-readiness",
            id="stop-reason-misspelled",
        ),
        pytest.param({"signal": 9}, {"stop_reason": "lease-expired"}, "killed-sigkill", id="lease-ran-out"),
    ],
)
def test_ready_engine_killed_or_exiting_on_its_own_without_a_signature_fails_runtime_stability(
    tmp_path: Path, end: dict[str, int], details: dict[str, Any], signature: str
) -> None:
    """Regression: a ready launch that the engine itself ended — killed by SIGKILL (the OOM killer), or
    exiting 0 — with the failure signature left out passed runtime stability: exit 137 counted as the
    collector's own stop, a signal other than 6/11 was never judged, and exit 0 was a clean run. The end is
    now classified from the recorded outcome with the signature table's status-only signatures, unless the
    launch attributes it to the collector's own stop (``details.stop_reason``)."""
    es = qualified_entries()
    launch = entry(es, "launch")["payload"]  # (its details keep where it served: details.base_url, fix 159)
    launch.update(
        end, ended_at="2026-09-10T10:30:00Z", details={"base_url": launch["details"]["base_url"], **details}
    )
    v = verdict_of(tmp_path, es)
    assert gates(v)["runtime-stability"] == "failed", v["gates"]
    assert v["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY"
    reason = _reason(v, "runtime-stability")
    assert f"launch {_id_of(v, 'launch')[:12]}: {signature} " in reason, reason


@pytest.mark.parametrize("end", [{"exit_code": 143}, {"signal": 15}])
def test_ready_engine_stopped_by_an_outside_sigterm_is_an_operator_stop_not_a_fault(
    tmp_path: Path, end: dict[str, int]
) -> None:
    es = qualified_entries()
    launch = entry(es, "launch")["payload"]  # (its details keep where it served: details.base_url)
    launch.update(
        end, ended_at="2026-09-10T10:30:00Z", details={**launch["details"], "stop_reason": "exited"}
    )
    assert verdict_of(tmp_path, es)["verdict"] == "QUALIFIED"


def test_a_launch_recorded_while_it_still_ran_has_no_end_to_judge(tmp_path: Path) -> None:
    es = qualified_entries()
    assert "exit_code" not in entry(es, "launch")["payload"]
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "QUALIFIED"


def _eight_days_on(es: list[dict[str, Any]]) -> None:
    es.append(
        {"name": "later", "kind": "note", "key": "operator", "at": "2026-09-18T11:00:00Z",
         "payload": {"text": "eight days on"}}
    )  # fmt: skip


def test_host_probe_claiming_a_later_collected_at_than_its_log_time_still_goes_stale(tmp_path: Path) -> None:
    """Regression: freshness was measured from the entry's own `collected_at`, so a host probe claiming to
    be collected weeks after the log took it stayed fresh past its 7-day bound; the log time bounds it."""
    es = qualified_entries()
    host = entry(es, "host")
    host["logged_at"], host["at"] = host["at"], "2026-09-30T00:00:00Z"
    _eight_days_on(es)
    v = verdict_of(tmp_path, es)
    assert rejected(v)["host"] == "stale"
    detail = next(r["detail"] for r in v["rejected"] if r["rule"] == "stale")
    assert "it claims collected_at 2026-09-30T00:00:00Z" in detail
    assert v["verdict"] != "QUALIFIED"


def test_host_probe_collected_before_its_log_time_is_judged_by_collected_at(tmp_path: Path) -> None:
    """The neighbour: spooled evidence is logged later than collected; its own (earlier) time counts."""
    es = qualified_entries()
    host = entry(es, "host")
    host["logged_at"] = "2026-09-10T10:00:06Z"
    host["at"] = "2026-09-03T10:00:00Z"  # collected 7 days and 50 minutes before the campaign ends
    assert rejected(verdict_of(tmp_path, es))["host"] == "stale"


@pytest.mark.parametrize("gate", ["semantic", "benchmark"])
@pytest.mark.parametrize("status", ["not_run", "not_authorized"])
def test_a_harness_result_that_never_ran_is_inconclusive_not_a_failure(
    tmp_path: Path, gate: str, status: str
) -> None:
    """A reviewed (and accepted) `gate.result` recorded `not_run` measured nothing: the gate has nothing to
    judge (INCONCLUSIVE), rather than a SEMANTIC QUALITY / PERFORMANCE failure of the engine."""
    es = qualified_entries()
    entry(es, gate)["payload"]["status"] = status
    v = verdict_of(tmp_path, es)
    assert gates(v)[gate] == "missing"
    assert v["verdict"] == "INCONCLUSIVE"


def test_engine_serving_another_model_fails_api_readiness(tmp_path: Path) -> None:
    """Regression: api-readiness never selected the `/v1/models` identity probe, so a campaign whose engine
    served another model (identity probe ok = false) qualified on its other probes."""
    es = qualified_entries()
    serves(es, "m-7")
    models = entry(es, "models")
    models["payload"] = {
        "endpoint": "http://127.0.0.1:8000/v1/models",  # the launch's server (details.base_url; fix 159)
        "check": "models",
        "ok": False,
        "expected": "m-7",
        "model_identity": "some-other-model",
        "error": "expected model 'm-7', served ['some-other-model']",
    }
    v = verdict_of(tmp_path, es)
    assert gates(v)["api-readiness"] == "failed"
    assert v["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY"
    models["payload"].update(ok=True, http_status=200, model_identity="m-7", error=None)
    assert verdict_of(tmp_path, es)["verdict"] == "QUALIFIED"
    # ok claimed, but what it recorded says otherwise (or nothing): re-judged from the ids
    models["payload"].update(model_identity="some-other-model", details={"served": ["some-other-model"]})
    assert gates(verdict_of(tmp_path, es))["api-readiness"] == "failed"
    del models["payload"]["model_identity"], models["payload"]["details"]
    assert gates(verdict_of(tmp_path, es))["api-readiness"] == "failed"
    models["payload"]["details"] = {"served": ["some-other-model", "m-7"]}  # served, not first
    assert verdict_of(tmp_path, es)["verdict"] == "QUALIFIED"


@pytest.mark.parametrize("how", ["dropped", "null", "renamed"])
def test_an_identity_probe_naming_no_expected_model_cannot_pass_api_readiness(
    tmp_path: Path, how: str
) -> None:
    """Regression: a `/v1/models` probe with no `expected` id (a campaign without model.served_name, a probe
    entered by hand) passed the identity check with whatever the engine served. It cannot judge identity:
    the gate is INCONCLUSIVE, naming why — and the same probe naming the expected id qualifies."""
    es = qualified_entries()
    models = entry(es, "models")
    del models["payload"]["expected"]
    if how == "null":
        models["payload"]["expected"] = None
    if how == "renamed":  # a misspelled key is refused at ingest, never read as "no expectation"
        models["payload"]["expect"] = "m-7"
        with pytest.raises(SchemaError, match="expect"):
            verdict_of(tmp_path, es)
        return
    v = verdict_of(tmp_path, es)
    g = next(g for g in v["gates"] if g["name"] == "api-readiness")
    assert g["status"] == "missing" and "names no expected model id" in g["reason"], g
    assert v["verdict"] == "INCONCLUSIVE"
    later = [x["status"] for x in v["gates"][[x["name"] for x in v["gates"]].index("api-readiness") + 1 :]]
    assert later and set(later) == {"not_authorized"}
    models["payload"]["expected"] = models["payload"]["model_identity"]
    assert verdict_of(tmp_path, es)["verdict"] == "QUALIFIED"
    models["payload"].update(expected="m-8", model_identity="m-8", details={"served": ["m-8"]})
    # expected, and saw served, another model than the campaign's approved served_name (m)
    assert gates(verdict_of(tmp_path, es))["api-readiness"] == "failed"


@pytest.mark.parametrize(("engine", "needs_probe"), [("vllm", True), ("tgi", True), ("native", False)])
def test_a_ready_api_engine_without_an_identity_probe_cannot_pass_api_readiness(
    tmp_path: Path, engine: str, needs_probe: bool
) -> None:
    """Regression: api-readiness judged a `/v1/models` probe only when one was there, so a ready vLLM whose
    identity was never probed qualified. Every engine but a native adapter (seed 003: it serves no OpenAI
    API) needs one; an engine name the policy does not know is judged as one that does."""
    es = qualified_entries()
    es.remove(entry(es, "models"))
    launch = entry(es, "launch")["payload"]
    launch["engine"] = launch["bindings"]["engine"] = engine
    entry(es, "campaign-job")["payload"]["spec"]["bindings"]["engine"] = engine  # what the job pins
    # the campaign's backend is the engine it runs (fix 95: a backend its engine contradicts is INCONCLUSIVE)
    for e in es:
        e["subject"] = {**e.get("subject", {}), "backend": engine}
    v = verdict_of(tmp_path, es, subject={**SUBJECT, "backend": engine})
    g = next(g for g in v["gates"] if g["name"] == "api-readiness")
    if needs_probe:
        assert g["status"] == "missing" and "no /v1/models identity probe" in g["reason"], g
        assert v["verdict"] == "INCONCLUSIVE"
    else:
        assert g["status"] == "passed", g
        assert v["verdict"] == "QUALIFIED"


def test_a_failed_readiness_check_wins_over_a_missing_identity_probe(tmp_path: Path) -> None:
    """A gate whose checks already fail has judged: a sleeping engine without an identity probe is NOT
    QUALIFIED (the sleep), not INCONCLUSIVE (the probe it lacks)."""
    es = qualified_entries()
    es.remove(entry(es, "models"))
    entry(es, "health")["payload"]["sleeping"] = True
    v = verdict_of(tmp_path, es)
    assert gates(v)["api-readiness"] == "failed"
    assert v["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY"


def test_a_campaign_without_a_served_name_is_refused_naming_it(tmp_path: Path) -> None:
    """The collector's identity probe expects the campaign's model.served_name; without one it could not
    judge identity, so the campaign file is refused before anything runs."""
    from ledger.collectors.campaign import load_campaign

    shipped = (REPO / "campaigns" / "llamacpp-cpu.toml").read_text()
    assert 'served_name = "tiny"' in shipped
    path = tmp_path / "no-served-name.toml"
    path.write_text(shipped.replace('served_name = "tiny"', ""))
    with pytest.raises(ConfigError, match=r"model\.served_name: Field required"):
        load_campaign(path)


def test_a_campaign_with_a_missing_key_and_a_misspelled_one_names_both(tmp_path: Path) -> None:
    """Regression: the loader named the first problem only ("(+1 more)"): a file missing a required key
    and misspelling another was refused for the first, and the second surfaced only after that fix."""
    from ledger.collectors.campaign import load_campaign

    shipped = (REPO / "campaigns" / "llamacpp-cpu.toml").read_text()
    path = tmp_path / "two-problems.toml"
    path.write_text(
        shipped.replace('served_name = "tiny"', "").replace("lease_seconds = 600", "lease_secnds = 600")
    )
    with pytest.raises(ConfigError) as ei:
        load_campaign(path)
    message = ei.value.message
    assert "model.served_name: required" in message or "model.served_name: Field required" in message
    assert "unknown key 'campaign.lease_secnds'" in message, message


def test_a_deployment_with_several_problems_names_each(tmp_path: Path) -> None:
    from ledger.errors import InputError
    from ledger.policy.routing import load_deployment

    p = tmp_path / "dep.toml"
    p.write_text(
        '[[services]]\nname = "a"\ngpus = [0]\ngpu_memory_utilisation = 0.5\n'
        '[[services]]\nname = "b"\ngpus = ["one"]\n'
    )
    with pytest.raises(InputError) as ei:
        load_deployment(p)
    message = ei.value.message
    for part in ("host: required", "unknown key 'services.0.gpu_memory_utilisation'", "services.1.gpus.0"):
        assert part in message, message
    assert str(p) in message


def test_verdict_without_a_campaign_is_refused_not_judged_across_campaigns(tmp_path: Path) -> None:
    """Regression: a subject naming only backend/model/host pooled the evidence of every campaign: one
    campaign's probes and another's benchmark qualified together, though neither campaign did."""
    from ledger.errors import InputError

    es = qualified_entries()
    for e in es:
        if e["name"] in ("benchmark", "benchmark-review", "benchmark-acceptance"):
            e["subject"] = {"campaign": "another-campaign"}
    e = entry(es, "benchmark")
    del e["refs"]
    assert verdict_of(tmp_path, es)["verdict"] == "INCONCLUSIVE"  # the campaign alone: no benchmark
    with pytest.raises(InputError, match="judges one campaign"):
        verdict_of(tmp_path, es, subject={k: v for k, v in SUBJECT.items() if k != "campaign"})


@pytest.mark.parametrize(
    ("probe", "status"),
    [("completion", 500), ("completion", None), ("structured", 503), ("sequential", None)],
)
def test_a_request_failing_server_side_is_a_runtime_fault_whatever_the_launch_records(
    tmp_path: Path, probe: str, status: int | None
) -> None:
    """Regression, from the real vLLM head_dim-16 run with its `failure_signature` left out: the engine
    answered the first completion with HTTP 500 and exited 0, so runtime stability passed and the verdict
    was CONTROL. A request that failed on the server's side after readiness is a runtime fault."""
    es = qualified_entries()
    p = entry(es, probe)["payload"]
    p.update(ok=False, text=None, error="HTTP 500: EngineCore encountered an issue.")
    p.pop("http_status", None)
    if status is not None:
        p["http_status"] = status
    entry(es, "launch")["payload"].update(exit_code=0, ended_at="2026-09-10T10:03:00Z")
    v = verdict_of(tmp_path, es)
    assert gates(v)["runtime-stability"] == "failed", v["gates"]
    assert v["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY"


def test_a_request_refused_with_4xx_is_the_controls_failure_not_a_runtime_fault(tmp_path: Path) -> None:
    es = qualified_entries()
    entry(es, "structured")["payload"].update(ok=False, http_status=400, error="response_format unsupported")
    v = verdict_of(tmp_path, es)
    assert gates(v)["runtime-stability"] == "passed"
    assert v["verdict"] == "NOT QUALIFIED — CONTROL"


FAULT_FIELDS = [
    ("launch", "failure_signature"),
    ("launch", "exit_code"),
    ("launch", "signal"),
    ("completion", "http_status"),
    ("completion", "ok"),
    ("completion", "check"),
]


@pytest.mark.parametrize("how", ["drop", "rename", "typo", "retype"])
@pytest.mark.parametrize("which", FAULT_FIELDS, ids=["/".join(w) for w in FAULT_FIELDS])
def test_a_field_of_the_seed003_failure_left_out_or_mistyped_never_passes(
    tmp_path: Path, which: tuple[str, str], how: str
) -> None:
    """The seed-003 shape (ready, EngineDeadError on the first completion: HTTP 500, abort -6), with any one
    field runtime stability reads dropped, renamed, misspelled or of another type: refused at ingest or
    still NOT QUALIFIED — RUNTIME RELIABILITY (the other facts still show the fault), never CONTROL."""
    es = qualified_entries()
    entry(es, "launch")["payload"].update(failure_signature="engine-dead", exit_code=-6, signal=6)
    entry(es, "completion")["payload"].update(ok=False, text=None, http_status=500, error="EngineDeadError")
    name, leaf = which
    holder = entry(es, name)["payload"]
    value = holder.pop(leaf)
    if how == "rename":
        holder[leaf.upper()] = value
    elif how == "typo":
        holder[leaf[:-1] + leaf[-1] * 2] = value
    elif how == "retype":
        holder[leaf] = str(value) if not isinstance(value, str) else 7
    try:
        v = verdict_of(tmp_path, es)
    except SchemaError:
        return  # refused at ingest: nothing stored, nothing passes
    assert v["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY", (which, how, v["verdict"])


# --- the launch's class, read from its stored logs -------------------------------------------------------

_ENGINE_DEAD_LOG = (
    "INFO 09-10 10:00:40 [api_server.py:1234] Starting vLLM API server on http://127.0.0.1:8000\n"
    "ERROR 09-10 10:01:02 [core.py:700] EngineCore encountered a fatal error.\n"
    "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace above.\n"
)


def _with_log(es: list[dict[str, Any]], text: str, **facts: Any) -> dict[str, Any]:
    launch = entry(es, "launch")
    served = launch["payload"].get("details", {}).get("base_url")
    if isinstance(facts.get("details"), dict) and served is not None:
        # where it served stays recorded (details.base_url): the harness results measured it (fix 153)
        facts = {**facts, "details": {"base_url": served, **facts["details"]}}
    launch["payload"].update(facts)
    launch["artifacts"] = [
        {"name": "stdout.log", "text": "INFO ready\n"},
        {"name": "stderr.log", "text": text},
    ]
    return launch


@pytest.mark.parametrize(
    "claim",
    [
        pytest.param({"failure_signature": "killed-143", "exit_code": 143}, id="claims-killed-143"),
        pytest.param({"failure_signature": "killed-sigterm", "signal": 15}, id="claims-killed-sigterm"),
        pytest.param({"exit_code": 0}, id="claims-nothing-exit-0"),
        pytest.param({"exit_code": 143}, id="claims-nothing-exit-143"),
    ],
)
def test_operator_stop_claimed_while_the_stored_log_shows_engine_dead_is_a_runtime_fault(
    tmp_path: Path, claim: dict[str, Any]
) -> None:
    """Regression: the launch's class came from the signature id it claimed, so a ready vLLM run recorded as
    an operator's stop (or as a clean stop) whose own stderr ends in EngineDeadError passed runtime
    stability. The policy engine reads the stored logs back and classifies them itself."""
    es = qualified_entries()
    _with_log(es, _ENGINE_DEAD_LOG, **claim)
    v = verdict_of(tmp_path, es)
    assert gates(v)["runtime-stability"] == "failed", v["gates"]
    assert v["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY"
    g = next(g for g in v["gates"] if g["name"] == "runtime-stability")
    assert "stored logs" in g["reason"]


def test_failure_detail_showing_a_gpu_hang_under_an_operator_stop_claim_is_a_gpu_fault(
    tmp_path: Path,
) -> None:
    """Seed 003's stderr line, recorded as the detail of a launch that claims SIGTERM: judged by the line."""
    es = qualified_entries()
    entry(es, "launch")["payload"].update(
        failure_signature="killed-sigterm",
        signal=15,
        failure_detail="HW Exception by GPU node-1 reason :GPU Hang",
    )
    v = verdict_of(tmp_path, es)
    assert gates(v)["runtime-stability"] == "failed"
    assert v["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY"


def test_a_clean_ready_run_with_ordinary_logs_stays_qualified(tmp_path: Path) -> None:
    es = qualified_entries()
    _with_log(es, "INFO: Uvicorn running on http://127.0.0.1:8000\nINFO: Shutting down\n", exit_code=143)
    assert verdict_of(tmp_path, es)["verdict"] == "QUALIFIED"


def _failed_first_attempt(es: list[dict[str, Any]], name: str, signature: str, log: str) -> None:
    """A launch that failed before readiness with ``log`` as its stderr, logged before the ready one."""
    first = copy.deepcopy(entry(es, "launch"))
    first.update(name=name, at="2026-09-10T10:00:30Z")
    first["payload"].update(ready=False, exit_code=1, failure_signature=signature)
    first["artifacts"] = [{"name": "stderr.log", "text": log}]
    es.insert(es.index(entry(es, "launch")), first)


def test_a_startup_failure_in_the_logs_of_a_launch_that_never_became_ready_is_not_a_runtime_fault(
    tmp_path: Path,
) -> None:
    """Seed 000: the UVA launch failed before readiness; the ready fallback after it still qualifies."""
    es = qualified_entries()
    _failed_first_attempt(
        es, "launch-uva", "engine-died-before-readiness", "RuntimeError: UVA is not available\n"
    )
    assert verdict_of(tmp_path, es)["verdict"] == "QUALIFIED"


def test_a_missing_log_artifact_rejects_the_launch_instead_of_hiding_its_class(tmp_path: Path) -> None:
    es = qualified_entries()
    launch = _with_log(es, _ENGINE_DEAD_LOG, failure_signature="killed-143", exit_code=143)
    launch["artifacts"][1]["damage"] = "missing"
    v = verdict_of(tmp_path, es)
    assert v["verdict"] != "QUALIFIED"
    assert rejected(v)["launch"] == "artifact-missing"


@pytest.mark.parametrize("gate_name", ["benchmark", "semantic"])
def test_a_harness_run_stopped_by_an_engine_fault_is_runtime_reliability_even_under_a_clean_launch(
    tmp_path: Path, gate_name: str
) -> None:
    """Regression: a benchmark whose first c1 run the engine's fault stopped (seed 003: abort -6, no aggregate
    result) was judged as a failed benchmark (PERFORMANCE) whenever the launch itself recorded no failure —
    the harness's own record of the fault was read by no earlier gate."""
    es = qualified_entries()
    p = entry(es, gate_name)["payload"]
    p.update(status="failed", figures={}, reason="first engine fault stops the gate: HTTP 500 at c1")
    p["bounds"]["outcome"] = "fault"
    v = verdict_of(tmp_path, es)
    assert gates(v)["runtime-stability"] == "failed", v["gates"]
    assert v["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY"


def test_a_harness_run_that_completed_is_judged_by_its_own_gate_not_runtime_stability(tmp_path: Path) -> None:
    es = qualified_entries()
    p = entry(es, "benchmark")["payload"]
    p["bounds"]["outcome"] = "completed"
    p["figures"]["ttft_ms.p95@c4"] = 9000.0
    v = verdict_of(tmp_path, es)
    assert gates(v)["runtime-stability"] == "passed"
    assert v["verdict"] == "NOT QUALIFIED — PERFORMANCE"


# --- the structured-output control, re-judged from its recorded answer -----------------------------------


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("not json at all", id="not-json"),
        pytest.param('{"status": "BUSY"}', id="wrong-value"),
        pytest.param('{"state": "READY"}', id="renamed-key"),
        pytest.param('{"status": "READY"', id="cut-short"),
        pytest.param("", id="empty"),
        pytest.param('{"status": "BUSY", "status": "READY"}', id="duplicate-key"),
        pytest.param('{"status": "READY", "load": NaN}', id="nan"),
    ],
)
def test_structured_control_is_rejudged_from_the_answer_not_the_ok_claim(tmp_path: Path, text: str) -> None:
    """Regression: the structured-output gate judged `ok` alone, so a probe whose answer was not JSON, or JSON
    outside its own schema, passed whenever it said ok = true."""
    es = qualified_entries()
    entry(es, "structured")["payload"]["text"] = text
    v = verdict_of(tmp_path, es)
    assert gates(v)["structured-output"] == "failed", v["gates"]
    assert v["verdict"] == "NOT QUALIFIED — CONTROL"


def _reason(v: dict[str, Any], gate: str) -> str:
    return str(next(g["reason"] for g in v["gates"] if g["name"] == gate))


def _id_of(v: dict[str, Any], name: str) -> str:
    return next(i for i, n in v["_names"].items() if n == name)


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        pytest.param("not json at all", True, id="not-json-claimed-ok"),
        pytest.param('{"status": "BUSY"}', True, id="outside-its-schema"),
        pytest.param('{"status": "READY"}', False, id="valid-but-failed"),
    ],
)
def test_a_failed_structured_control_names_the_probe_and_why(tmp_path: Path, text: str, ok: bool) -> None:
    """Regression: the structured-output gate's reason said only that a probe failed; the problem with its
    answer (computed to judge it) was seen by the CEL alone, so a reviewer could not tell which probe, or
    why, without reading every probe's payload."""
    from ledger.answers import structured_answer_problem

    es = qualified_entries()
    payload = entry(es, "structured")["payload"]
    payload.update(text=text, ok=ok)
    v = verdict_of(tmp_path, es)
    assert gates(v)["structured-output"] == "failed", v["gates"]
    reason = _reason(v, "structured-output")
    assert _id_of(v, "structured")[:12] in reason
    assert f"ok = {ok}" in reason
    problem = structured_answer_problem(payload)
    if problem is not None:
        assert problem in reason, reason
    else:
        assert "ok = False" in reason


def test_a_failed_ready_control_names_what_the_probe_answered(tmp_path: Path) -> None:
    es = qualified_entries()
    entry(es, "completion")["payload"]["text"] = "NOT READY"
    v = verdict_of(tmp_path, es)
    assert gates(v)["ready-control"] == "failed", v["gates"]
    reason = _reason(v, "ready-control")
    probe = _id_of(v, "completion")[:12]
    assert f"probe {probe} (ok = True, HTTP 200) answered 'NOT READY'" in reason, reason


def test_a_failed_check_names_at_most_five_entries_and_counts_the_rest(tmp_path: Path) -> None:
    es = qualified_entries()
    base = entry(es, "structured")
    for i in range(7):
        extra = copy.deepcopy(base)
        extra["name"] = f"structured-extra-{i}"
        extra["payload"]["text"] = f"not json {i}"
        es.append(extra)
    v = verdict_of(tmp_path, es)
    reason = _reason(v, "structured-output")
    # the second check (no failed run lifted by a pass) names the 7 failed ones: 5 named, 2 counted
    assert reason.count("probe ") == 5, reason
    assert reason.endswith("; and 2 more"), reason


def test_a_passing_gate_names_nothing(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, qualified_entries())
    assert _reason(v, "structured-output") == "all checks hold"


@pytest.mark.parametrize("field", ["each", "detail"])
def test_a_check_naming_failures_needs_both_each_and_detail(field: str) -> None:
    from ledger.errors import PolicyError
    from ledger.policy.model import parse_policy_text

    text = (POLICY_DIR / "backend-qualification.toml").read_text()
    line = 'each = "!e.derived.probe_failed"\n'
    assert line in text  # the policy still names its failures this way (else this test tests nothing)
    if field == "each":
        text = text.replace(line, "", 1)
    else:
        text = text.replace(
            line + 'detail = "probe {e[id]:.12} (ok = {e[payload][ok]}): {e[derived][structured_problem]}"\n',
            line,
            1,
        )
    with pytest.raises(PolicyError, match="both `each` and `detail`"):
        parse_policy_text(text, "backend-qualification.toml")


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda p: p.pop("details"), id="details-dropped"),
        pytest.param(lambda p: p["details"].update(schema={}), id="schema-empty"),
        pytest.param(lambda p: p["details"].update(schema="object"), id="schema-mistyped"),
        pytest.param(lambda p: p["details"].update(schema={"type": 7}), id="schema-invalid"),
        pytest.param(lambda p: p.update(text=None), id="text-null"),
    ],
)
def test_structured_control_without_an_answer_or_schema_to_judge_never_passes(
    tmp_path: Path, change: Any
) -> None:
    es = qualified_entries()
    change(entry(es, "structured")["payload"])
    try:
        v = verdict_of(tmp_path, es)
    except SchemaError:
        return  # refused at ingest
    assert gates(v)["structured-output"] == "failed", v["gates"]
    assert v["verdict"] == "NOT QUALIFIED — CONTROL"


def test_structured_control_answer_with_surrounding_whitespace_and_key_order_passes(tmp_path: Path) -> None:
    es = qualified_entries()
    entry(es, "structured")["payload"]["text"] = ' \n{ "status" : "READY" }\n'
    assert verdict_of(tmp_path, es)["verdict"] == "QUALIFIED"


# --- the structured-output schema is the policy's, not the campaign's -------------------------------------


def _policy_schema() -> dict[str, Any]:
    params = tomllib.loads((POLICY_DIR / "backend-qualification.toml").read_text())["params"]
    schema: dict[str, Any] = params["structured_schema"]
    return schema


@pytest.mark.parametrize(
    "schema",
    [
        pytest.param({"type": "object"}, id="trivial-object"),
        pytest.param({}, id="empty"),
        pytest.param(
            {k: v for k, v in _policy_schema().items() if k != "additionalProperties"},
            id="one-keyword-dropped",
        ),
        pytest.param({**_policy_schema(), "required": []}, id="nothing-required"),
        pytest.param({**_policy_schema(), "properties": {"status": {"type": "string"}}}, id="enum-dropped"),
        pytest.param({**_policy_schema(), "additionalProperties": "false"}, id="keyword-mistyped"),
    ],
)
def test_a_structured_probe_judged_against_a_campaign_schema_weaker_than_the_policys_fails(
    tmp_path: Path, schema: dict[str, Any]
) -> None:
    """The answer is valid against the schema the probe recorded, but that is not the policy's
    ``structured_schema``: a campaign cannot pass the gate by asking for a weaker one."""
    es = qualified_entries()
    entry(es, "structured")["payload"]["details"]["schema"] = schema
    v = verdict_of(tmp_path, es)
    assert gates(v)["structured-output"] == "failed", v["gates"]
    reason = _reason(v, "structured-output")
    assert "policy's schema" in reason and _id_of(v, "structured")[:12] in reason, reason
    assert v["verdict"] == "NOT QUALIFIED — CONTROL"


def test_a_structured_probe_recording_the_policys_schema_in_another_key_order_qualifies(
    tmp_path: Path,
) -> None:
    es = qualified_entries()
    schema = _policy_schema()
    entry(es, "structured")["payload"]["details"]["schema"] = dict(reversed(list(schema.items())))
    assert verdict_of(tmp_path, es)["verdict"] == "QUALIFIED"


def test_a_policy_without_a_structured_schema_never_passes_the_structured_gate(tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    shutil.copytree(POLICY_DIR, policies, ignore=shutil.ignore_patterns("fixtures"))
    path = policies / "backend-qualification.toml"
    lines = path.read_text().splitlines(keepends=True)
    kept = [ln for ln in lines if not ln.startswith("structured_schema =")]
    assert len(kept) == len(lines) - 1
    path.write_text("".join(kept))
    v = verdict_of(tmp_path, qualified_entries(), policy_dir=policies)
    assert gates(v)["structured-output"] == "failed", v["gates"]
    assert "or the policy sets none" in _reason(v, "structured-output")


# --- GPU faults on the launch's host while it ran, from any campaign's kernel log ------------------------

_XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=48211, name=python3, GPU has fallen off the bus."
_XID63 = (
    "NVRM: Xid (PCI:0000:3b:00): 63, pid='<unknown>', name=<unknown>, Row Remapper: New row "
    "(0x00000000000a1b2c) marked for remapping, reset gpu to activate."
)


def _host_health_log(
    time: str,
    *,
    xid: int = 79,
    message: str = _XID79,
    at: str = "2026-09-10T10:55:00Z",
    host: str = "gpu-box-1",
) -> dict[str, Any]:
    """A kernel log recorded by the host's own health job: another campaign, the same host."""
    return {
        "name": "host-health-kernel",
        "kind": "kernel.log",
        "key": "collector",
        "at": at,
        "subject": {"campaign": f"{host}-health", "backend": "none", "host": host},
        "payload": {
            "source": "journalctl",
            "events": [
                {"time": time, "kind": "nvrm-xid", "xid": xid, "device": "PCI:0000:3b:00", "message": message}
            ],
        },
    }


def test_a_gpu_fault_on_the_host_while_the_engine_ran_recorded_by_another_campaign_fails_runtime_stability(
    tmp_path: Path,
) -> None:
    """Regression: runtime stability read kernel logs of the campaign's own subject only, so an Xid 79
    that the host's health job recorded under its own name, while the campaign's engine ran, passed
    (seed 003: the MES failure and reset were retained by a separate read-only health job)."""
    es = qualified_entries()
    es.append(_host_health_log("2026-09-10T10:03:00Z"))
    v = verdict_of(tmp_path, es)
    assert gates(v)["runtime-stability"] == "failed", v["gates"]
    assert v["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY"
    g = next(g for g in v["gates"] if g["name"] == "runtime-stability")
    assert "while the engine ran" in g["reason"]


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(
            {"time": "2026-09-10T11:30:00Z", "at": "2026-09-10T11:35:00Z"}, id="after-the-job-ended"
        ),
        pytest.param({"time": "2026-09-10T09:30:00Z"}, id="before-the-launch-started"),
        pytest.param({"time": "2026-09-10T10:03:00Z", "host": "gpu-box-2"}, id="on-another-host"),
        pytest.param({"time": "2026-09-10T10:03:00Z", "xid": 63, "message": _XID63}, id="informational-xid"),
    ],
)
def test_a_host_gpu_event_outside_the_run_or_host_or_benign_leaves_the_campaign_qualified(
    tmp_path: Path, case: dict[str, Any]
) -> None:
    es = qualified_entries()
    time = case.pop("time")
    es.append(_host_health_log(time, **case))
    assert verdict_of(tmp_path, es)["verdict"] == "QUALIFIED"


def test_a_claimed_end_never_narrows_the_run_below_its_job(tmp_path: Path) -> None:
    """The engine ran within its job: a launch logged early that claims an end (here, one after its own log
    time) is still judged over its job, to the job's end at 10:50, so the host's 10:30 fault is its own."""
    es = qualified_entries()
    entry(es, "launch")["payload"]["ended_at"] = "2026-09-10T11:00:00Z"
    es.append(_host_health_log("2026-09-10T10:30:00Z"))
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY", v["gates"]


def test_a_launch_without_a_job_is_judged_to_its_own_end(tmp_path: Path) -> None:
    # without a job there is no approved served_name: a native adapter's launch (no /v1/models to judge)
    es = [e for e in qualified_entries() if e.get("kind") != "job" and e.get("name") != "models"]
    for e in es:
        e.get("refs", {}).pop("job", None)
    launch = entry(es, "launch")["payload"]
    launch["engine"] = launch["bindings"]["engine"] = "native"
    # no job binds the engine's interpreter: the launch's command names the one it ran, the env snapshot's
    # (the host gate counts the snapshot by it, fix 164)
    launch["command"] = [entry(es, "env")["payload"]["interpreter"], "-m", "native_adapter"]
    # it ended after its last probe (10:02:00): a probe after its end would be after-launch-end
    entry(es, "launch")["payload"]["ended_at"] = "2026-09-10T10:02:30Z"
    es.append(_host_health_log("2026-09-10T10:03:00Z"))
    v = verdict_of(tmp_path, es)
    assert gates(v)["runtime-stability"] == "passed", v["gates"]


# --- a supersession superseded in turn is withdrawn ------------------------------------------------------


def _failed_control_superseded(chain: int) -> list[dict[str, Any]]:
    """A failed READY control, a supersession of it ("run it again"), then ``chain - 1`` supersessions each
    of the one before: the last withdraws the one before it."""
    es = qualified_entries()
    good = entry(es, "completion")
    failed = copy.deepcopy(good)
    failed["name"] = "completion-failed"
    failed["payload"].update(ok=False, http_status=200, text="NOT READY", error="answer not as expected")
    es.insert(es.index(good), failed)
    target = failed["name"]
    for i in range(chain):
        s = {
            "name": f"supersession-{i}",
            "kind": "supersession",
            "key": "operator",
            "at": f"2026-09-10T10:4{6 + i}:00Z",
            "refs": {"supersedes": target},
            "payload": {"reason": "rerun" if i == 0 else f"supersession-{i - 1} was recorded in error"},
        }
        es.insert(es.index(entry(es, "campaign-done")), s)
        target = s["name"]
    return es


def test_a_supersession_withdrawn_by_a_later_one_no_longer_lifts_what_it_superseded(tmp_path: Path) -> None:
    """Regression: a supersession stayed in force after it was itself superseded, so withdrawing a mistaken
    "run it again" left the failed control uncredited and the campaign QUALIFIED."""
    assert verdict_of(tmp_path, _failed_control_superseded(1))["verdict"] == "QUALIFIED"
    v = verdict_of(tmp_path, _failed_control_superseded(2))
    assert gates(v)["ready-control"] == "failed", v["gates"]
    assert v["verdict"] == "NOT QUALIFIED — CONTROL"
    assert rejected(v)["supersession-0"] == "superseded"
    assert "completion-failed" not in rejected(v)


def test_withdrawing_the_withdrawal_puts_the_first_supersession_back_in_force(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, _failed_control_superseded(3))
    assert v["verdict"] == "QUALIFIED", v["gates"]
    got = rejected(v)
    assert got["completion-failed"] == "superseded" and got["supersession-1"] == "superseded"
    assert "supersession-0" not in got


ENGINE_LOGS = REPO / "tests" / "fixtures" / "engine_logs"


def test_vllm_engine_dead_error_printed_while_stopped_on_sigterm_is_not_a_fault(tmp_path: Path) -> None:
    """Regression: the policy engine classified a launch's whole stored log, and vLLM logs EngineDeadError
    while it shuts down on the collector's SIGTERM after a clean run (the real log of one: ready, requests
    answered, SIGTERM, exit 0), so a healthy vLLM campaign failed runtime stability. Logs are read up to
    the engine's first stop marker (`stop_markers` in collectors/signatures.toml)."""
    es = qualified_entries()
    # as the collector records its own stop at the end of a campaign
    _with_log(
        es, (ENGINE_LOGS / "vllm_cpu_ready.log").read_text(), exit_code=0, details={"stop_reason": "finished"}
    )
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "QUALIFIED", v["gates"]


def test_the_real_head_dim16_log_under_an_operator_stop_claim_is_a_runtime_fault(tmp_path: Path) -> None:
    es = qualified_entries()
    text = (ENGINE_LOGS / "vllm_cpu_head_dim16_first_request.log").read_text()
    _with_log(es, text, failure_signature="killed-143", exit_code=143)
    v = verdict_of(tmp_path, es)
    assert gates(v)["runtime-stability"] == "failed"
    assert v["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY"


def test_a_real_memory_utilization_failure_before_readiness_then_a_ready_fallback_qualifies(
    tmp_path: Path,
) -> None:
    es = qualified_entries()
    log = (ENGINE_LOGS / "vllm_cpu_mem_util_092.log").read_text()
    _failed_first_attempt(es, "launch-mem-util", "cpu-memory-utilization", log)
    assert verdict_of(tmp_path, es)["verdict"] == "QUALIFIED"


def test_a_kernel_fault_in_a_first_attempts_startup_does_not_disqualify_the_ready_fallback(
    tmp_path: Path,
) -> None:
    """Seed 000's ladder with a kernel crash in the first configuration's start-up profiling run: that
    attempt's start-up failure; the fallback that came up qualifies. After readiness the same line fails."""
    crash = "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    es = qualified_entries()
    _failed_first_attempt(es, "launch-marlin", "gpu-kernel-fault-at-startup", crash)
    assert verdict_of(tmp_path, es)["verdict"] == "QUALIFIED"
    es2 = qualified_entries()
    _with_log(es2, crash, exit_code=143)
    assert verdict_of(tmp_path, es2)["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY"


@pytest.mark.parametrize("gate_name", ["benchmark", "semantic"])
@pytest.mark.parametrize("outcome", ["lease-expired", "operator-stop ", "Completed", "done", None, 1])
def test_a_passed_harness_result_that_does_not_say_it_completed_never_qualifies(
    tmp_path: Path, gate_name: str, outcome: Any
) -> None:
    """Regression: a benchmark or semantic result recorded as passed was credited whatever its harness
    outcome said — a run cut short by its lease, an outcome misspelled or of another type. An outcome that
    is not one of the harness's words is refused at ingest (``HarnessOutcome``)."""
    es = qualified_entries()
    entry(es, gate_name)["payload"]["bounds"]["outcome"] = outcome
    if outcome not in (None, "completed", "fault", "lease-expired", "operator-stop"):
        with pytest.raises(SchemaError, match=r"bounds\.outcome"):
            verdict_of(tmp_path, es)
        return
    v = verdict_of(tmp_path, es)
    assert v["verdict"] != "QUALIFIED", v["gates"]
    assert gates(v)[gate_name] in ("failed", "missing"), v["gates"]


def test_a_claimed_late_start_never_narrows_the_run_below_its_job(tmp_path: Path) -> None:
    """A launch claiming to have started after the host's fault (10:00:10, inside its job from 10:00) is
    judged over its job: the claim does not hide the fault."""
    es = qualified_entries()
    entry(es, "launch")["payload"]["started_at"] = "2026-09-10T10:00:50Z"
    es.append(_host_health_log("2026-09-10T10:00:10Z"))
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY", v["gates"]


def _with_pci_host(es: list[dict[str, Any]]) -> None:
    entry(es, "host")["payload"]["gpus"] = [
        {"index": 0, "name": "NVIDIA H100", "uuid": "GPU-aaaa", "pci_bus_id": "00000000:1B:00.0"},
        {"index": 1, "name": "NVIDIA H100", "uuid": "GPU-bbbb", "pci_bus_id": "00000000:3B:00.0"},
    ]


@pytest.mark.parametrize(
    ("visible", "verdict"),
    [
        pytest.param("0", "QUALIFIED", id="given-gpu0-fault-on-gpu1"),
        pytest.param("GPU-aaaa", "QUALIFIED", id="given-gpu0-by-uuid"),
        pytest.param("1", "NOT QUALIFIED — RUNTIME RELIABILITY", id="given-gpu1"),
        pytest.param("0,1", "NOT QUALIFIED — RUNTIME RELIABILITY", id="given-both"),
        # a GPU the host does not have fails host-prerequisites first, earlier on the ladder (audit 22, F9)
        pytest.param("7", "NOT QUALIFIED — PREREQUISITES", id="an-index-the-host-lacks"),
        pytest.param(None, "NOT QUALIFIED — RUNTIME RELIABILITY", id="every-gpu-visible"),
    ],
)
def test_a_host_gpu_fault_counts_against_a_launch_given_that_gpu_or_when_it_cannot_be_told(
    tmp_path: Path, visible: str | None, verdict: str
) -> None:
    """On a shared multi-GPU host, an Xid 79 on the GPU at 0000:3b:00 (index 1) during the run: a launch
    given only GPU 0 (by index or UUID, through the host probe's GPU list) is not blamed; one given GPU 1,
    both, an index the host does not list, or every GPU (no CUDA_VISIBLE_DEVICES) is."""
    es = qualified_entries()
    _with_pci_host(es)
    if visible is not None:
        entry(es, "launch")["payload"]["env"] = {
            "CUDA_VISIBLE_DEVICES": visible,
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        }
    es.append(_host_health_log("2026-09-10T10:03:00Z"))  # device PCI:0000:3b:00
    assert verdict_of(tmp_path, es)["verdict"] == verdict


def test_a_host_gpu_event_naming_no_device_counts_against_every_launch_of_the_host(tmp_path: Path) -> None:
    es = qualified_entries()
    _with_pci_host(es)
    entry(es, "launch")["payload"]["env"] = {"CUDA_VISIBLE_DEVICES": "0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    log = _host_health_log("2026-09-10T10:03:00Z")
    log["payload"]["events"][0].pop("device")
    es.append(log)
    assert verdict_of(tmp_path, es)["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY"


# --- the host as it stands, and probes judged from their own record --------------------------------------


def _later_host(es: list[dict[str, Any]], gpus: list[dict[str, Any]], at: str) -> None:
    h = copy.deepcopy(entry(es, "host"))
    h.update(name=f"host-{at}", at=at)
    h["payload"]["gpus"] = gpus
    es.append(h)


@pytest.mark.parametrize("at", ["2026-09-10T10:00:50Z", "2026-09-10T10:30:00Z"])
def test_a_gpu_an_earlier_host_probe_saw_and_the_newest_does_not_fails_host_prerequisites(
    tmp_path: Path, at: str
) -> None:
    """Any probe showing a GPU passed, so a GPU that fell off the bus after the first probe qualified."""
    es = qualified_entries()
    _later_host(es, [], at)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "NOT QUALIFIED — PREREQUISITES"
    g = next(g for g in v["gates"] if g["name"] == "host-prerequisites")
    assert g["status"] == "failed" and "newest accepted host probe shows no GPU" in g["reason"]


def test_a_gpu_back_in_the_newest_host_probe_passes_host_prerequisites(tmp_path: Path) -> None:
    es = qualified_entries()
    _later_host(es, [], "2026-09-10T10:00:30Z")
    # every GPU the first probe saw is back (one still missing is gone: test_audit35_gpus_gone.py)
    _later_host(es, entry(es, "host")["payload"]["gpus"], "2026-09-10T10:00:40Z")
    assert verdict_of(tmp_path, es)["verdict"] == "QUALIFIED"


@pytest.mark.parametrize(
    "payload",
    [
        {"ok": False, "http_status": 503, "error": "engine dead"},
        {"ok": True, "http_status": 503},  # the claim contradicts the recorded status
        {"ok": True, "http_status": 500},
        {"ok": False},  # no status at all (connection refused)
    ],
    ids=["failed-503", "ok-claimed-beside-503", "ok-claimed-beside-500", "failed-no-status"],
)
def test_a_failed_health_probe_after_readiness_fails_api_readiness(
    tmp_path: Path, payload: dict[str, Any]
) -> None:
    """A /health probe that failed once the engine was ready was never judged: the gate passed on the
    launch's readiness and the identity probe (vLLM's /health is 503 once its engine core is dead)."""
    es = qualified_entries()
    h = entry(es, "health")["payload"]
    h.pop("http_status")
    h.update(payload)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY", v["gates"]
    g = next(g for g in v["gates"] if g["name"] == "api-readiness")
    assert g["status"] == "failed" and "/health failed after the engine reached readiness" in g["reason"]
    assert f"probe {_id_of(v, 'health')[:12]}" in g["reason"]


@pytest.mark.parametrize("status", [200, 204])
def test_a_health_probe_with_a_2xx_status_passes(tmp_path: Path, status: int) -> None:
    es = qualified_entries()
    entry(es, "health")["payload"]["http_status"] = status
    assert verdict_of(tmp_path, es)["verdict"] == "QUALIFIED"


@pytest.mark.parametrize("how", ["dropped", "null", "renamed"])
@pytest.mark.parametrize("probe", ["health", "completion", "structured", "sequential"])
def test_a_probe_claiming_ok_without_an_http_status_is_not_credited(
    tmp_path: Path, probe: str, how: str
) -> None:
    """Regression: a probe recording `ok = true` and no HTTP status was credited (the gate read "no
    status" as "no error"): every check is an HTTP request and the collectors record the 2xx status of
    the answer they judged, so a success without one says nothing about what answered."""
    es = qualified_entries()
    payload = entry(es, probe)["payload"]
    status = payload.pop("http_status")
    if how == "null":
        payload["http_status"] = None
    elif how == "renamed":
        payload["status"] = status
    try:
        v = verdict_of(tmp_path, es)
    except SchemaError:
        assert how == "renamed"  # an unknown key is refused at ingest
        return
    assert v["verdict"] != "QUALIFIED", v["gates"]


@pytest.mark.parametrize(
    ("name", "gate"),
    [
        ("completion", "ready-control"),
        ("structured", "structured-output"),
        ("sequential", "sequential-requests"),
    ],
)
@pytest.mark.parametrize("status", [500, 429, 302, 100])
def test_a_probe_claiming_ok_beside_an_error_status_is_judged_failed(
    tmp_path: Path, name: str, gate: str, status: int
) -> None:
    """Gates read `ok`, the collector's claim; a record saying ok with HTTP 500 was a pass. A 5xx (the
    server's own failure) is a runtime fault, judged first by runtime-stability (it selects probes by the
    derived `ok`, not the claim); any other non-2xx answer fails the probe's own control gate."""
    es = qualified_entries()
    entry(es, name)["payload"]["http_status"] = status
    v = verdict_of(tmp_path, es)
    assert v["verdict"] != "QUALIFIED"
    if status >= 500:
        assert gates(v)["runtime-stability"] == "failed", v["gates"]
        assert v["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY"
    else:
        assert gates(v)[gate] == "failed", v["gates"]


def test_a_models_probe_claiming_ok_beside_an_error_status_fails_the_identity_check(tmp_path: Path) -> None:
    es = qualified_entries()
    serves(es, "m-7")
    models = entry(es, "models")
    models["payload"] = {
        "endpoint": "http://127.0.0.1:8000/v1/models",  # the launch's server (details.base_url; fix 159)
        "check": "models",
        "ok": True,
        "http_status": 500,
        "expected": "m-7",
        "model_identity": "m-7",
    }
    v = verdict_of(tmp_path, es)
    assert gates(v)["api-readiness"] == "failed"
    assert v["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY"


def test_a_launch_that_ran_one_engine_and_binds_another_is_not_credited(tmp_path: Path) -> None:
    """The launch's `engine` was never compared: it could name sglang while binding the pinned vllm."""
    es = qualified_entries()
    entry(es, "launch")["payload"]["engine"] = "sglang"
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "INCONCLUSIVE"
    assert rejected(v).get("launch") == "engine-not-bound"
    g = next(g for g in v["gates"] if g["name"] == "api-readiness")
    assert "engine-not-bound" in g["reason"]


# --- harness results: the counts behind the figures add up ----------------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda c: c.update(failed=3), id="failed-beside-all-passed"),
        pytest.param(lambda c: c.update(passed=13), id="more-passed-than-asked"),
        pytest.param(lambda c: c.pop("failed"), id="failed-dropped"),
        pytest.param(lambda c: c.update(fails=c.pop("failed")), id="failed-renamed"),
    ],
)
def test_semantic_counts_that_do_not_add_up_never_qualify(tmp_path: Path, change: Any) -> None:
    """A passed semantic result whose counts said 12 of 12 passed and 3 failed (or 13 of 12) qualified."""
    es = qualified_entries()
    change(entry(es, "semantic")["payload"]["counts"])
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "NOT QUALIFIED — SEMANTIC QUALITY", v["gates"]
    assert "adding up" in _reason(v, "semantic")


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda c: c.update(errors=2, completed=574), id="errors-beside-error-rate-0"),
        pytest.param(lambda c: c.update(errors=2), id="errors-not-adding-up"),
        pytest.param(lambda c: c.update(issued=575, completed=575), id="a-request-never-issued"),
        pytest.param(lambda c: c.pop("issued"), id="issued-dropped"),
        pytest.param(lambda c: c.update(sent=c.pop("issued")), id="issued-renamed"),
        pytest.param(lambda c: c.pop("errors"), id="errors-dropped"),
        pytest.param(lambda c: c.update(levels=0), id="levels-contradicting-the-spec"),
        pytest.param(lambda c: c.pop("levels"), id="levels-dropped"),
        pytest.param(lambda c: c.update(passes=c.pop("repetitions")), id="repetitions-renamed"),
        pytest.param(lambda c: c.update(repetitions=1), id="repetitions-contradicting-the-spec"),
    ],
)
def test_benchmark_counts_that_do_not_add_up_or_hold_errors_never_qualify(
    tmp_path: Path, change: Any
) -> None:
    """A passed benchmark recording error_rate 0 beside 2 errors in its counts qualified: the figure was
    trusted and the counts never read."""
    es = qualified_entries()
    change(entry(es, "benchmark")["payload"]["counts"])
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "NOT QUALIFIED — PERFORMANCE", v["gates"]
    assert "counts issued, levels, repetitions, completed, errors" in _reason(v, "benchmark")


def test_benchmark_errors_within_a_policy_that_allows_some_pass(tmp_path: Path) -> None:
    """The error count is judged against the policy's own error-rate bound, not against zero."""
    import shutil

    policies = tmp_path / "policies"
    shutil.copytree(POLICY_DIR, policies, ignore=shutil.ignore_patterns("fixtures"))
    p = policies / "backend-qualification.toml"
    text = p.read_text()
    assert '"error_rate" = 0,' in text
    p.write_text(text.replace('"error_rate" = 0,', '"error_rate" = 0.01,'))
    es = qualified_entries()
    b = entry(es, "benchmark")["payload"]
    b["counts"].update(errors=5, completed=571)
    b["figures"]["error_rate"] = round(5 / 576, 6)
    v = verdict_of(tmp_path, es, policy_dir=policies)
    assert v["verdict"] == "QUALIFIED", v["gates"]


# --- the model's files as the newest pin shows them ------------------------------------------------------


def _later_pin(es: list[dict[str, Any]], at: str, **payload: Any) -> None:
    p = copy.deepcopy(entry(es, "pin"))
    p.update(name=f"pin-{at}", at=at)
    p["payload"].update(payload)
    es.insert(es.index(entry(es, "pin")) + 1, p)


def test_a_pin_that_fails_verification_after_an_earlier_one_passed_fails_model_pinned(tmp_path: Path) -> None:
    """The failed pin was dropped by an acceptance rule, so the earlier passing pin qualified a model
    whose files no longer matched their digests."""
    es = qualified_entries()
    _later_pin(
        es, "2026-09-10T10:00:15Z", verification="failed", failures=["model.safetensors: sha256 differs"]
    )
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "NOT QUALIFIED — PREREQUISITES", v["gates"]
    reason = _reason(v, "model-pinned")
    assert "the newest model pin does not verify its files" in reason
    assert f"pin {_id_of(v, 'pin-2026-09-10T10:00:15Z')[:12]} failed verification" in reason
    assert "sha256 differs" in reason


def test_a_pin_that_failed_verification_alone_is_a_prerequisites_failure_not_a_missing_pin(
    tmp_path: Path,
) -> None:
    es = qualified_entries()
    entry(es, "pin")["payload"].update(verification="failed", failures=["model.safetensors: blake3 differs"])
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "NOT QUALIFIED — PREREQUISITES"
    assert gates(v)["model-pinned"] == "failed"


def test_a_passing_pin_after_a_failed_one_qualifies(tmp_path: Path) -> None:
    """Files repaired and pinned again: the newest pin decides, in both directions."""
    es = qualified_entries()
    entry(es, "pin")["payload"].update(verification="failed", failures=["model.safetensors: sha256 differs"])
    _later_pin(es, "2026-09-10T10:00:15Z", verification="passed", failures=[])
    assert verdict_of(tmp_path, es)["verdict"] == "QUALIFIED"


@pytest.mark.parametrize(
    "latencies",
    [[], [40.0] * 5, [40.0] * 21],
    ids=["latencies-dropped", "fewer-latencies-than-count", "more-latencies-than-count"],
)
def test_a_sequential_count_the_run_does_not_record_never_qualifies(
    tmp_path: Path, latencies: list[float]
) -> None:
    """The gate took `count` on trust: a run claiming 20 requests while timing 5 (or none) passed. The
    collector records one latency per request it counts."""
    es = qualified_entries()
    entry(es, "sequential")["payload"]["latencies_ms"] = latencies
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY", v["gates"]
    reason = _reason(v, "sequential-requests")
    assert "count is not the number of requests it recorded" in reason
    assert f"run {_id_of(v, 'sequential')[:12]} claims 20 requests" in reason


# --- values a rule reads that are not what their field is are refused at ingest, not read as absent --------


def _refused(tmp_path: Path, es: list[dict[str, Any]]) -> str:
    with pytest.raises(SchemaError) as info:
        verdict_of(tmp_path, es)
    return str(info.value)


@pytest.mark.parametrize(
    "time", ["yesterday", "2026-09-10 10:03", "2026-09-10T10:03:00", "", "10:03:00Z"], ids=repr
)
def test_a_kernel_event_whose_time_does_not_parse_is_refused_not_left_out_of_every_run(
    tmp_path: Path, time: str
) -> None:
    """An Xid 79 with an unreadable time could be placed in no run, so the host health job's log of it
    never failed a campaign that ran then: such a time is refused at ingest (no time at all is allowed
    and judged where the log is the campaign's own)."""
    es = qualified_entries()
    es.append(_host_health_log(time))
    assert "time" in _refused(tmp_path, es)


@pytest.mark.parametrize(
    ("figure", "value"),
    [("ttft_ms.p95@c4", -1.0), ("error_rate", -0.5), ("c1_parity", -1.0)],
)
def test_a_negative_benchmark_figure_is_refused_not_within_every_upper_bound(
    tmp_path: Path, figure: str, value: float
) -> None:
    """A TTFT p95 of -1 ms was within the 2,000 ms bound: every figure is a latency, rate or fraction."""
    es = qualified_entries()
    entry(es, "benchmark")["payload"]["figures"][figure] = value
    assert "figures" in _refused(tmp_path, es)


@pytest.mark.parametrize(
    ("gate", "counts"),
    [
        ("semantic", {"passed": 14, "failed": -2}),
        ("benchmark", {"completed": 577, "errors": -1}),
        ("benchmark", {"prompts": -1}),
    ],
)
def test_a_negative_harness_count_is_refused(tmp_path: Path, gate: str, counts: dict[str, int]) -> None:
    """Counts that add up only with a negative one (14 passed, -2 failed of 12) are refused at ingest."""
    es = qualified_entries()
    entry(es, gate)["payload"]["counts"].update(counts)
    assert "counts" in _refused(tmp_path, es)


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda f: f.update(blake3="blake3:" + "B" * 64), id="blake3-uppercase"),
        pytest.param(lambda f: f.update(blake3="b" * 64), id="blake3-without-its-prefix"),
        pytest.param(lambda f: f.update(sha256="a" * 63), id="sha256-cut-short"),
        pytest.param(lambda f: f.update(path=""), id="path-empty"),
    ],
)
def test_a_pinned_file_with_a_malformed_digest_or_no_path_is_refused(tmp_path: Path, change: Any) -> None:
    """A pin whose file's BLAKE3 was not a digest ("blake3:BBB…X") qualified: only SHA-256 was compared."""
    es = qualified_entries()
    change(entry(es, "pin")["payload"]["files"][0])
    assert "files" in _refused(tmp_path, es)


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda p: p.update(total_size=p["total_size"] + 1), id="total-above-the-files"),
        pytest.param(lambda p: p.update(total_size=0), id="total-zero"),
        pytest.param(lambda p: p.pop("total_size"), id="total-dropped"),
        pytest.param(lambda p: p["files"].append(dict(p["files"][0], path="b.safetensors")), id="file-added"),
    ],
)
def test_a_pin_whose_total_size_is_not_its_files_is_refused(tmp_path: Path, change: Any) -> None:
    """A pin's `total_size` the collector writes as the sum of its files' sizes: one that is not
    contradicts the files it lists (a file left out or added by hand) and is refused at ingest."""
    es = qualified_entries()
    change(entry(es, "pin")["payload"])
    assert "total_size" in _refused(tmp_path, es)


def test_a_pin_holding_a_zero_byte_file_fails_model_pinned(tmp_path: Path) -> None:
    """Regression: a pinned file of zero bytes (what an interrupted download leaves) was credited as
    pinned: its digests are those of the empty file, which pin no weights."""
    es = qualified_entries()
    pin = entry(es, "pin")["payload"]
    pin["files"].append(
        {
            "path": "model-00002-of-00002.safetensors",
            "size": 0,
            "sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            "blake3": "blake3:af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262",
        }
    )
    v = verdict_of(tmp_path, es)
    assert gates(v)["model-pinned"] == "failed"
    assert v["verdict"] == "NOT QUALIFIED — PREREQUISITES"
    g = next(g for g in v["gates"] if g["name"] == "model-pinned")
    assert "zero bytes" in g["reason"]


@pytest.mark.parametrize(
    ("gpus", "why"),
    [
        ([{"index": -1, "name": "NVIDIA H100"}], "index"),
        ([{"index": 0, "name": "NVIDIA H100"}, {"index": 0, "name": "NVIDIA H100"}], "index 0"),
        ([{"index": 1, "name": "NVIDIA H100"}, {"name": "NVIDIA H100"}], "index 1"),  # the second is at 1
        ([{"index": "0", "name": "NVIDIA H100"}], "index"),
    ],
    ids=["negative", "repeated", "repeats-a-position", "string"],
)
def test_a_host_probe_naming_no_device_by_a_gpu_index_is_refused(
    tmp_path: Path, gpus: list[dict[str, Any]], why: str
) -> None:
    """A host probe listing GPU index -1, or two GPUs under one index, was stored: the routing check
    finds a deployment's GPUs by index, so such a probe names no device (or two) by it."""
    es = qualified_entries()
    entry(es, "host")["payload"]["gpus"] = gpus
    assert why in _refused(tmp_path, es)


@pytest.mark.parametrize(
    "commit", ["HEAD", "main", "CAFE000000000000000000000000000000000000", "abc", "cafe0000X"]
)
def test_a_review_naming_no_commit_hash_is_refused(tmp_path: Path, commit: str) -> None:
    es = qualified_entries()
    entry(es, "benchmark-review")["payload"]["commit"] = commit
    assert "commit" in _refused(tmp_path, es)


@pytest.mark.parametrize("started_at", ["soon", "2026-09-10T10:00:20", ""], ids=repr)
def test_a_launch_whose_start_does_not_parse_is_refused(tmp_path: Path, started_at: str) -> None:
    es = qualified_entries()
    entry(es, "launch")["payload"]["started_at"] = started_at
    assert "started_at" in _refused(tmp_path, es)


def _repinned(revision: str) -> list[dict[str, Any]]:
    es = qualified_entries()
    entry(es, "pin")["payload"]["revision"] = revision
    for name in ("launch", "campaign-job"):
        e = entry(es, name)["payload"]
        bindings = e["bindings"] if "bindings" in e else e["spec"]["bindings"]
        bindings["model_revision"] = revision
    return es


@pytest.mark.parametrize("revision", ["", "main", "v1.0", "refs/pr/3", "1111111"], ids=repr)
def test_a_pin_to_a_moving_or_empty_revision_fails_model_pinned(tmp_path: Path, revision: str) -> None:
    """A pin of revision "" (or a branch name) bound by the launch qualified: only `revision != null` was
    read. An immutable revision is a commit hash or the collector's content digest."""
    v = verdict_of(tmp_path, _repinned(revision))
    assert gates(v)["model-pinned"] == "failed", v["gates"]
    assert v["verdict"] == "NOT QUALIFIED — PREREQUISITES"
    assert "immutable revision" in _reason(v, "model-pinned")


@pytest.mark.parametrize(
    "revision", ["a" * 40, "b" * 64, "blake3:" + "c" * 64], ids=["git-sha1", "git-sha256", "content-digest"]
)
def test_a_pin_to_a_commit_or_content_digest_qualifies(tmp_path: Path, revision: str) -> None:
    assert verdict_of(tmp_path, _repinned(revision))["verdict"] == "QUALIFIED"


# --- evidence naming another subject, read because it refs this subject's job ------------------------------


@pytest.mark.parametrize(
    "name", ["launch", "completion", "structured", "sequential", "semantic", "benchmark"]
)
@pytest.mark.parametrize("field", ["campaign", "backend", "model", "host"])
def test_runtime_evidence_naming_another_subject_is_not_credited_though_it_refs_the_campaigns_job(
    tmp_path: Path, name: str, field: str
) -> None:
    """Regression: a launch, probe or harness result whose subject names another model (or host, backend,
    campaign) was read with the campaign because it refs the campaign's job, and credited: a QUALIFIED
    verdict stood on another model's or another host's run."""
    es = qualified_entries()
    e = entry(es, name)
    e["subject"] = {**SUBJECT, field: SUBJECT[field] + "-other"}
    v = verdict_of(tmp_path, es)
    assert v["verdict"] != "QUALIFIED", v["gates"]
    if field == "campaign":  # another campaign's entry, read because it refs this campaign's job
        assert rejected(v).get(name) == "other-subject", v["rejected"]
    else:  # an entry of this campaign naming another value: the asked field is contradicted (fix71)
        assert v["verdict"] == "INCONCLUSIVE", v["verdict"]
        [claim] = [c for c in v["claims"] if c["field"] == field]
        assert claim["status"] == "contradicted", claim
        assert claim["entries"] and all(c["value"] == SUBJECT[field] + "-other" for c in claim["entries"])


def test_a_review_naming_another_subject_still_reviews_the_entry_it_refs(tmp_path: Path) -> None:
    """Support entries (reviews, acceptances) are judged by what they ref, not by the subject they name."""
    es = qualified_entries()
    entry(es, "benchmark-review")["subject"] = {"campaign": "review-board"}
    assert verdict_of(tmp_path, es)["verdict"] == "QUALIFIED"


# --- harness results belong to the job the log knows they ran in ----------------------------------------


def _harness_after(es: list[dict[str, Any]], gate: str, at: str) -> None:
    """Move gate ``gate``'s result (and its review, acceptance) to ``at`` and later, in log order."""
    names = [gate, f"{gate}-review", *([f"{gate}-acceptance"] if gate == "benchmark" else [])]
    for i, n in enumerate(names):
        e = entry(es, n)
        es.remove(e)
        e["at"] = at.replace("T11:00", f"T11:{i * 10:02d}")
        es.append(e)


@pytest.mark.parametrize("gate", ["benchmark", "semantic"])
@pytest.mark.parametrize("names_job", [True, False])
def test_harness_result_after_job_end_without_job_ref_is_rejected(
    tmp_path: Path, gate: str, names_job: bool
) -> None:
    """Regression: a benchmark or semantic result that names no job (`ledger collect benchmark` without
    `--job`) and was logged after the campaign's job had ended was credited: the job an entry belongs to
    was derived from the log for launches and probes only. It measured no engine of that job."""
    es = qualified_entries()
    _harness_after(es, gate, "2026-09-10T11:00:00Z")  # the job ended at 10:50
    if not names_job:
        entry(es, gate).pop("refs")
    v = verdict_of(tmp_path, es)
    assert rejected(v)[gate] == "after-job-terminal", v["rejected"]
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]


@pytest.mark.parametrize("gate", ["benchmark", "semantic"])
@pytest.mark.parametrize("names_job", [True, False])
def test_harness_result_of_a_killed_job_without_job_ref_is_not_credited(
    tmp_path: Path, gate: str, names_job: bool
) -> None:
    """Regression: a passing harness result logged while a second job of the campaign ran, that job later
    killed, was credited when the result named no job (the log knows the job it ran in)."""
    es = qualified_entries()
    es.append(_job_started("job-2", "campaign-2", "2026-09-10T10:55:00Z"))
    _harness_after(es, gate, "2026-09-10T11:00:00Z")
    result = entry(es, gate)
    if names_job:
        result["refs"] = {"job": "job-2"}
    else:
        result.pop("refs")
    # killed right after the result was logged (before its review)
    es.insert(
        es.index(result) + 1, _job_ended("job-2-killed", "campaign-2", "killed", "2026-09-10T11:01:00Z", 137)
    )
    v = verdict_of(tmp_path, es)
    assert rejected(v)[gate] == "killed-run", v["rejected"]
    assert v["verdict"] != "QUALIFIED", v["gates"]


def test_harness_result_inside_its_job_without_job_ref_is_credited(tmp_path: Path) -> None:
    """The neighbour that must still pass: a result that names no job, logged while its job ran."""
    es = qualified_entries()
    entry(es, "benchmark").pop("refs")
    entry(es, "semantic").pop("refs")
    assert verdict_of(tmp_path, es)["verdict"] == "QUALIFIED"


def _overlapping_killed_job(es: list[dict[str, Any]], start: str, killed: str) -> None:
    """A second job of the campaign starts at ``start`` (before the completion probe) and is killed at
    ``killed`` (logged after the sequential probe), while the campaign's first job runs on to 10:50."""
    es.insert(es.index(entry(es, "completion")), _job_started("job-2", "campaign-2", start))
    es.insert(
        es.index(entry(es, "sequential")) + 1, _job_ended("job-2-killed", "campaign-2", "killed", killed, 137)
    )


def test_output_naming_no_job_while_an_overlapping_job_ran_belongs_to_the_later_job(tmp_path: Path) -> None:
    """Probes that name no job, logged while a second job of the campaign ran (later killed), are that
    job's output: not credited as passing (`killed-run`)."""
    es = qualified_entries()
    _overlapping_killed_job(es, "2026-09-10T10:01:08Z", "2026-09-10T10:03:00Z")
    for name in ("completion", "structured", "sequential"):
        entry(es, name).pop("refs")
    v = verdict_of(tmp_path, es)
    assert {n: rejected(v).get(n) for n in ("completion", "structured", "sequential")} == dict.fromkeys(
        ("completion", "structured", "sequential"), "killed-run"
    ), v["rejected"]
    assert v["verdict"] != "QUALIFIED"


def test_results_after_an_overlapping_job_ended_belong_to_the_job_still_running(tmp_path: Path) -> None:
    """Regression: once harness results were attributed to a job from the log, the job derived for an
    entry was the campaign's latest job to start, even after that job had ended: a semantic and a benchmark
    result logged while the campaign's first job still ran, after a short second job was killed, were
    rejected as `after-job-terminal` of the second job. The job an entry ran in is one still running when
    it is logged."""
    es = qualified_entries()
    _overlapping_killed_job(es, "2026-09-10T10:01:08Z", "2026-09-10T10:03:00Z")
    for name in ("completion", "structured", "sequential"):
        entry(es, name)["refs"] = {"job": "campaign-job"}  # they name the first job …
    entry(es, "semantic").pop("refs")  # … and the harness results name none
    entry(es, "benchmark").pop("refs")
    v = verdict_of(tmp_path, es)
    assert "semantic" not in rejected(v) and "benchmark" not in rejected(v), v["rejected"]
    # the probes ran while both jobs ran: the killed one is among theirs, so they are not credited
    assert rejected(v)["completion"] == "killed-run"


@pytest.mark.parametrize(
    ("signature", "signal", "log"),
    [
        ("abort-at-startup", 6, "ggml.c:1234: GGML_ASSERT(ggml_nelements(a) == ne0*ne1) failed\n"),
        ("abort-at-startup", 6, "terminate called after throwing an instance of 'std::runtime_error'\n"),
        ("segfault-at-startup", 11, "Segmentation fault (core dumped)\n"),
    ],
)  # fmt: skip
def test_a_crash_by_signal_before_readiness_is_a_startup_failure_and_after_it_a_runtime_fault(
    tmp_path: Path, signature: str, signal: int, log: str
) -> None:
    """Regression: a first attempt that aborted (SIGABRT, a failed GGML_ASSERT while loading) or segfaulted
    before readiness failed runtime stability through ``params.fault_signals``, although its class is a
    start-up failure and the check says "after readiness": the ready fallback could never qualify. After
    readiness the same end stays a runtime fault."""
    es = qualified_entries()
    _failed_first_attempt(es, "launch-first-config", signature, log)
    first = next(e for e in es if e.get("name") == "launch-first-config")
    first["payload"].update(signal=signal, exit_code=-signal)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "QUALIFIED", v["gates"]
    es2 = qualified_entries()
    _with_log(es2, log, exit_code=-signal, signal=signal)
    v2 = verdict_of(tmp_path / "after", es2)
    assert v2["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY", v2["gates"]
    assert gates(v2)["runtime-stability"] == "failed"


def test_a_gpu_hang_that_aborts_an_attempt_before_readiness_still_fails_runtime_stability(
    tmp_path: Path,
) -> None:
    """The neighbour of the start-up abort: the log names a GPU fault, so the class is gpu-fault whatever
    the readiness (seed 003's "HW Exception by GPU … GPU Hang" with status -6)."""
    es = qualified_entries()
    _failed_first_attempt(es, "launch-first-config", "abort-at-startup",
                          "HW Exception by GPU node-1 (Agent handle: 0x5) reason :GPU Hang\n")  # fmt: skip
    first = next(e for e in es if e.get("name") == "launch-first-config")
    first["payload"].update(signal=6, exit_code=-6)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY", v["gates"]


def test_a_pin_of_another_revision_than_the_jobs_approved_spec_is_not_silently_taken(tmp_path: Path) -> None:
    """Regression: the campaign's manifest took the newest model pin over the job's approved spec without a
    word, so a campaign approved for one revision whose pin (and launch) named another qualified. The key
    both bind differently is now a conflict: model-pinned fails naming both, and no launch matches it."""
    es = qualified_entries()
    entry(es, "campaign-job")["payload"]["spec"]["bindings"]["model_revision"] = "2" * 40
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "NOT QUALIFIED — PREREQUISITES", v["gates"]
    reason = next(g["reason"] for g in v["gates"] if g["name"] == "model-pinned")
    assert "2" * 40 in reason and "1" * 40 in reason
    assert rejected(v)["launch"] == "bindings-mismatch"


@pytest.mark.parametrize(
    ("key", "renamed", "value"),
    [
        ("model_revision", "modelRevision", "2" * 40),  # another revision than the pin's, renamed
        ("model_revision", "Model-Revision", "1" * 40),  # the pin's own revision, renamed
        ("engine", "Engine", "vllm"),
    ],
)
def test_a_binding_key_renamed_in_the_jobs_approved_spec_is_not_silently_dropped(
    tmp_path: Path, key: str, renamed: str, value: str
) -> None:
    """Regression: a key of the job's approved spec that is one of the policy's binding keys but for case,
    ``-`` or ``_`` was a key no rule compared, so what the spec meant to bind was dropped without a word
    (the pin alone decided). It now makes the manifest's value a text no launch equals, naming both."""
    es = qualified_entries()
    bindings = entry(es, "campaign-job")["payload"]["spec"]["bindings"]
    bindings.pop(key, None)
    bindings[renamed] = value
    v = verdict_of(tmp_path, es)
    assert v["verdict"] != "QUALIFIED", v["gates"]
    assert rejected(v)["launch"] == "bindings-mismatch"
    text = json.dumps(v)
    assert renamed in text and f"'{key}'" in text


@pytest.mark.parametrize(
    "bindings",
    [
        pytest.param([["model_revision", "2" * 40]], id="a-list"),
        pytest.param("model_revision=" + "2" * 40, id="a-text"),
        pytest.param(None, id="null"),
        pytest.param({"model_revision": 123}, id="a-number-value"),
    ],
)
def test_mistyped_bindings_in_the_jobs_approved_spec_are_refused_at_ingest(
    tmp_path: Path, bindings: Any
) -> None:
    """Regression: the manifest read only a job spec whose ``bindings`` was an object, so bindings sent as
    a list, a text or null were skipped without a word and the pin alone decided (QUALIFIED). They are
    refused at ingest now, naming the field, and nothing is stored."""
    from ledger.errors import SchemaError

    es = qualified_entries()
    entry(es, "campaign-job")["payload"]["spec"]["bindings"] = bindings
    with pytest.raises(SchemaError, match=r"spec\.bindings"):
        verdict_of(tmp_path, es)


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({"model_revision": "1" * 40}, id="spec-agrees-with-the-pin"),
        pytest.param({}, id="spec-binds-no-model"),
    ],
)
def test_a_pin_that_agrees_with_the_spec_or_a_spec_without_a_model_still_qualifies(
    tmp_path: Path, spec: dict[str, str]
) -> None:
    es = qualified_entries()
    bindings = entry(es, "campaign-job")["payload"]["spec"]["bindings"]
    bindings.pop("model_revision")
    bindings.update(spec)
    assert verdict_of(tmp_path, es)["verdict"] == "QUALIFIED"


def test_a_shard_digest_the_spec_and_the_pin_disagree_on_rejects_the_launch(tmp_path: Path) -> None:
    es = qualified_entries()
    entry(es, "campaign-job")["payload"]["spec"]["bindings"]["shard:model.safetensors"] = "c" * 64
    v = verdict_of(tmp_path, es)
    assert v["verdict"] != "QUALIFIED", v["gates"]


@pytest.mark.parametrize("lease", [0, -5, 0.0])
@pytest.mark.parametrize("name", ["campaign-job", "launch"])
def test_a_lease_of_no_time_is_refused_at_ingest(tmp_path: Path, name: str, lease: float) -> None:
    """A job or launch whose lease is zero or negative bounds nothing: refused, naming the field."""
    from ledger.errors import SchemaError

    es = qualified_entries()
    entry(es, name)["payload"]["lease_seconds"] = lease
    with pytest.raises(SchemaError, match="lease_seconds"):
        verdict_of(tmp_path, es)


@pytest.mark.parametrize(
    ("field", "value"),
    [("latencies_ms", [-1.0] * 20), ("latency_ms", -0.5), ("count", -20), ("max_tokens", -8)],
)
def test_a_probe_recording_a_negative_latency_or_count_is_refused_at_ingest(
    tmp_path: Path, field: str, value: Any
) -> None:
    """Regression: a sequential probe whose 20 latencies were all -1 ms passed the sequential gate: a
    negative figure measured nothing; it is refused at ingest, naming the field."""
    from ledger.errors import SchemaError

    es = qualified_entries()
    entry(es, "sequential")["payload"][field] = value
    with pytest.raises(SchemaError, match=field):
        verdict_of(tmp_path, es)


def test_a_c1_parity_above_one_is_no_measurement(tmp_path: Path) -> None:
    """Parity is the fraction of c1 prompts whose repetitions matched token for token: above 1 it measured
    nothing, and it used to clear the lower bound."""
    es = qualified_entries()
    entry(es, "benchmark")["payload"]["figures"]["c1_parity"] = 1.5
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "NOT QUALIFIED — PERFORMANCE", v["gates"]


# --- neighbours found by an audit: each gave QUALIFIED -----------------------------------------------------

NO_HOST = {k: v for k, v in SUBJECT.items() if k != "host"}


@pytest.mark.parametrize("kind", ["host.probe", "model.pin", "kernel.log"])
def test_a_hosts_facts_that_name_no_host_are_refused_at_ingest(tmp_path: Path, kind: str) -> None:
    """Regression: a host probe, model pin or kernel log whose subject named no host was credited to a
    campaign evaluated without a host (a GPU another machine has), or, for a kernel log, charged to no
    run (its Xid 79 ignored). Such an entry is refused at ingest, naming the field; nothing is stored."""
    from ledger.entries import SUBJECT_REQUIRED

    es = qualified_entries()
    xid = "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus"
    event = {
        "time": "2026-09-10T10:01:30Z",
        "kind": "nvrm-xid",
        "xid": 79,
        "device": "PCI:0000:3b:00",
        "message": xid,
    }
    payload: dict[str, Any] = {
        "host.probe": entry(es, "host")["payload"],
        "model.pin": entry(es, "pin")["payload"],
        "kernel.log": {"source": "journalctl", "events": [event]},
    }[kind]
    es.append(
        {
            "kind": kind,
            "key": "collector",
            "at": "2026-09-10T10:03:00Z",
            "subject": {"host": None},
            "payload": payload,
        }
    )
    assert SUBJECT_REQUIRED[kind] == ("host",)
    with pytest.raises(SchemaError, match=rf"{kind} needs subject host"):
        verdict_of(tmp_path, es)


@pytest.mark.parametrize("evaluated", ["with-host", "without-host"])
@pytest.mark.parametrize("name", ["host", "pin"])
def test_a_host_probe_or_model_pin_of_another_host_is_not_the_campaigns(
    tmp_path: Path, name: str, evaluated: str
) -> None:
    """Regression: a host probe or model pin of another host than the one the campaign's engine ran on
    passed the host and model gates (no filter by host; the newest pin of any host made the manifest).
    Evaluated with the host, such an entry is read because it refs the campaign's job; without one, the
    campaign's hosts are those its launches name. Either way: `other-host`, and the gate has no evidence."""
    es = qualified_entries()
    e = entry(es, name)
    e["subject"] = {"host": "gpu-box-2"}
    e["refs"] = {"job": "campaign-job"}
    v = verdict_of(tmp_path, es, subject=SUBJECT if evaluated == "with-host" else NO_HOST)
    assert v["verdict"] == "INCONCLUSIVE"
    assert rejected(v)[name] == "other-host"
    gate = "host-prerequisites" if name == "host" else "model-pinned"
    assert gates(v)[gate] == "missing"
    detail = next(r["detail"] for r in v["rejected"] if v["_names"].get(r["entry"]) == name)
    assert "gpu-box-2" in detail and "gpu-box-1" in detail
    assert e["kind"] == ("host.probe" if name == "host" else "model.pin")


def test_the_same_host_probe_evaluated_without_a_host_still_qualifies(tmp_path: Path) -> None:
    """The neighbour that must still pass: evaluated by campaign alone, the host the launches name is
    the campaign's, and its own probe and pin are credited."""
    v = verdict_of(tmp_path, qualified_entries(), subject=NO_HOST)
    assert v["verdict"] == "QUALIFIED", v["rejected"]


def test_an_engine_log_stored_by_reference_only_is_not_credited(tmp_path: Path) -> None:
    """Regression: a launch whose log was recorded by reference (``stored: false``) was never read back,
    so an ``EngineDeadError`` in it could not be found and the launch was credited. The policy reads a
    launch's logs: one it cannot read is `artifact-not-stored`."""
    es = qualified_entries()
    entry(es, "launch")["artifacts"] = [
        {
            "name": "stderr.log",
            "text": "INFO ready\nvllm.v1.engine.exceptions.EngineDeadError: dead\n",
            "stored": False,
        }
    ]
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "INCONCLUSIVE"
    assert rejected(v)["launch"] == "artifact-not-stored"
    assert gates(v)["api-readiness"] == "missing"


def _other_campaigns_job(es: list[dict[str, Any]]) -> None:
    job = copy.deepcopy(entry(es, "campaign-job"))
    job.update(name="other-job", at="2026-09-10T09:59:00Z", subject={"campaign": "campaign-b"})
    job["payload"]["job_id"] = "campaign-b-1"
    job["payload"]["spec"]["bindings"]["engine_version"] = "0.31.0"
    es.insert(0, job)


def test_another_campaigns_job_does_not_approve_this_campaigns_manifest(tmp_path: Path) -> None:
    """Regression: the manifest was the first trusted job with bindings in the snapshot, of any campaign:
    another campaign's job (read because an entry refs it) approved engine 0.31.0 and a launch of 0.31.0
    was credited though this campaign's job approved 0.32.0. Only the evaluated campaign's jobs approve."""
    es = qualified_entries()
    _other_campaigns_job(es)
    es.append(
        {
            "kind": "note",
            "key": "collector",
            "at": "2026-09-10T10:00:30Z",
            "refs": {"job": "other-job"},
            "payload": {"text": "see campaign b"},
        }
    )
    entry(es, "launch")["payload"]["bindings"]["engine_version"] = "0.31.0"
    v = verdict_of(tmp_path, es)
    other = next(i for i, n in v["_names"].items() if n == "other-job")
    assert other not in v["manifest"]["sources"]
    assert v["manifest"]["bindings"]["engine_version"] == "0.32.0"
    assert rejected(v)["launch"] == "bindings-mismatch"
    assert v["verdict"] == "INCONCLUSIVE"


def test_evidence_that_refs_another_campaigns_job_is_not_credited(tmp_path: Path) -> None:
    """Regression: a probe that names this campaign but refs another campaign's job as its own was judged
    by that job's end. Its record contradicts itself: `job-of-other-campaign`."""
    es = qualified_entries()
    _other_campaigns_job(es)
    entry(es, "sequential")["refs"] = {"job": "other-job"}
    v = verdict_of(tmp_path, es)
    assert rejected(v)["sequential"] == "job-of-other-campaign"
    assert v["verdict"] == "INCONCLUSIVE"


@pytest.mark.parametrize(
    ("levels", "credited"),
    [
        pytest.param([True, 4, 32], False, id="a-boolean-for-1"),
        pytest.param(["1", "4", "32"], False, id="texts"),
        pytest.param([1, 4], False, id="a-level-left-out"),
        pytest.param([1.0, 4.0, 32.0], True, id="the-same-numbers-as-floats"),
    ],
)
def test_benchmark_concurrency_levels_compare_by_json_type(
    tmp_path: Path, levels: list[Any], credited: bool
) -> None:
    """Regression: `bounds.concurrency = [true, 4, 32]` equalled the approved [1, 4, 32] (Python's
    ``True == 1``). The spec compares JSON values: a boolean is not a number, a text is not a number; a
    number compares by value."""
    es = qualified_entries()
    entry(es, "benchmark")["payload"]["bounds"]["concurrency"] = levels
    if any(isinstance(level, bool | str) for level in levels):  # no level: refused at ingest
        with pytest.raises(SchemaError, match=r"bounds\.concurrency"):
            verdict_of(tmp_path, es)
        return
    v = verdict_of(tmp_path, es)
    if credited:
        assert v["verdict"] == "QUALIFIED", v["rejected"]
    else:
        assert rejected(v)["benchmark"] == "spec-mismatch"
        assert "concurrency levels" in next(
            r["detail"] for r in v["rejected"] if v["_names"].get(r["entry"]) == "benchmark"
        )


@pytest.mark.parametrize("state", ["killed", "succeeded"])
def test_a_job_end_for_a_misspelled_job_id_makes_the_campaign_inconclusive(
    tmp_path: Path, state: str
) -> None:
    """Regression: a terminal job entry whose job_id no running entry started (``campaing-1``) ended no
    job: had it killed the campaign's run, that run's passing evidence was credited all the same. Which
    run it ended cannot be told: INCONCLUSIVE, naming why."""
    es = qualified_entries()
    done = entry(es, "campaign-done")
    done["payload"].update(job_id="campaing-1", state=state)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "INCONCLUSIVE"
    api = next(g for g in v["gates"] if g["name"] == "api-readiness")
    assert api["status"] == "missing" and "no running job entry started" in api["reason"]


def test_a_job_that_never_ends_is_not_an_unmatched_end(tmp_path: Path) -> None:
    """The neighbour: a campaign whose job has not ended yet has no unmatched end — api-readiness passes;
    the verdict is INCONCLUSIVE for the job that never ended (``unjudged``: test_unended_jobs)."""
    es = [e for e in qualified_entries() if e.get("name") != "campaign-done"]
    v = verdict_of(tmp_path, es)
    assert all(g["status"] == "passed" for g in v["gates"]), v["gates"]
    assert [u["kind"] for u in v["unjudged"]] == ["job"]
    assert v["verdict"] == "INCONCLUSIVE"


def _acceptance(target: str, decision: str, at: str, reason: str, key: str = "operator") -> dict[str, Any]:
    """An acceptance entry (``decision`` accepted or rejected) of the entry named ``target``."""
    return {
        "kind": "acceptance",
        "key": key,
        "at": at,
        "refs": {"subject": target},
        "payload": {"decision": decision, "reason": reason},
    }


def test_a_review_pass_rejected_by_an_acceptance_credits_nothing(tmp_path: Path) -> None:
    """Regression: an acceptance ``rejected`` of the benchmark's review PASS was ignored (reviews were
    skipped before acceptances were read), so the PASS still credited the benchmark."""
    es = qualified_entries()
    es.append(
        _acceptance("benchmark-review", "rejected", "2026-09-10T10:42:00Z", "reviewer did not rerun it")
    )
    v = verdict_of(tmp_path, es)
    assert rejected(v)["benchmark-review"] == "rejected-by-acceptance"
    assert rejected(v)["benchmark"] == "review-missing"
    assert v["verdict"] == "INCONCLUSIVE"


@pytest.mark.parametrize("decision", ["rejected", "accepted"])
def test_a_supersession_rejected_by_an_acceptance_withdraws_nothing(tmp_path: Path, decision: str) -> None:
    """Regression (the same for supersessions): a supersession an acceptance rejects supersedes nothing;
    one it accepts stands."""
    es = qualified_entries()
    es.append(
        {
            "name": "drop-probe",
            "kind": "supersession",
            "key": "operator",
            "at": "2026-09-10T10:03:00Z",
            "refs": {"supersedes": "host"},
            "payload": {"reason": "wrong host"},
        }
    )
    es.append(_acceptance("drop-probe", decision, "2026-09-10T10:04:00Z", "checked", key="reviewer"))
    v = verdict_of(tmp_path, es)
    if decision == "rejected":
        assert rejected(v)["drop-probe"] == "rejected-by-acceptance"
        assert "host" not in rejected(v)
        assert v["verdict"] == "QUALIFIED", v["rejected"]
    else:
        assert rejected(v)["host"] == "superseded"
        assert v["verdict"] == "INCONCLUSIVE"


@pytest.mark.parametrize("what", ["review", "acceptance"])
def test_a_review_or_acceptance_signed_by_the_evidences_own_key_is_not_independent(
    tmp_path: Path, what: str
) -> None:
    """Regression: the benchmark, its review PASS and its acceptance could all carry one key (a key with
    the operator and reviewer roles): the evidence vouched for itself. A review PASS or an acceptance
    credits evidence only when another key signed it."""
    keys = {**KEYS, "lead": ["operator", "reviewer"]}
    es = qualified_entries()
    entry(es, "benchmark")["key"] = "lead"
    entry(es, f"benchmark-{what}")["key"] = "lead"
    v = verdict_of(tmp_path, es, keys=keys)
    assert rejected(v)["benchmark"] == f"{what}-missing"
    assert "the key that signed it" in next(
        r["detail"] for r in v["rejected"] if v["_names"].get(r["entry"]) == "benchmark"
    )
    assert v["verdict"] == "INCONCLUSIVE"
    for other in ("review", "acceptance"):  # the neighbour: another key's review and acceptance credit it
        entry(es, f"benchmark-{other}")["key"] = "reviewer" if other == "review" else "operator"
    assert verdict_of(tmp_path, es, keys=keys)["verdict"] == "QUALIFIED"


def test_an_acceptance_signed_by_the_key_of_its_review_pass_is_not_independent(tmp_path: Path) -> None:
    """Regression: one key with the reviewer and operator roles could review the benchmark and then accept
    it: one person decided twice. The acceptance credits it only when another key than the credited review
    PASS's signed it."""
    keys = {**KEYS, "lead": ["operator", "reviewer"]}
    es = qualified_entries()
    entry(es, "benchmark-review")["key"] = "lead"
    entry(es, "benchmark-acceptance")["key"] = "lead"
    v = verdict_of(tmp_path, es, keys=keys)
    assert rejected(v)["benchmark"] == "acceptance-missing"
    assert "signed its review PASS" in next(
        r["detail"] for r in v["rejected"] if v["_names"].get(r["entry"]) == "benchmark"
    )
    assert v["verdict"] == "INCONCLUSIVE"
    entry(es, "benchmark-acceptance")["key"] = "operator"  # the neighbour: another key accepts
    assert verdict_of(tmp_path, es, keys=keys)["verdict"] == "QUALIFIED"


def test_a_probe_in_a_later_job_is_not_credited_to_a_launch_whose_job_ended(tmp_path: Path) -> None:
    """Regression: the attempt a probe is charged to ended only where its launch recorded ``ended_at``:
    after the launch's job ended, a probe in the campaign's next job (with no launch of its own) was
    credited to the ended run. An attempt ends no later than the job it ran in."""
    es = qualified_entries()
    done = entry(es, "campaign-done")
    done.update(at="2026-09-10T10:01:15Z")
    done["payload"]["ended_at"] = "2026-09-10T10:01:15Z"
    es.append(
        {
            "name": "job-2",
            "kind": "job",
            "key": "collector",
            "at": "2026-09-10T10:01:18Z",
            "payload": {
                "job_id": "campaign-2",
                "state": "running",
                "started_at": "2026-09-10T10:01:18Z",
                "lease_seconds": 3600.0,
                "spec": copy.deepcopy(entry(es, "campaign-job")["payload"]["spec"]),
            },
        }
    )
    for n in ("structured", "sequential", "semantic", "benchmark"):
        entry(es, n)["refs"] = {"job": "job-2"}
    v = verdict_of(tmp_path, es)
    assert rejected(v)["structured"] == "after-launch-end"
    assert rejected(v)["sequential"] == "after-launch-end"
    assert v["verdict"] != "QUALIFIED"


def test_an_identity_probe_that_expected_another_models_id_does_not_pass_identity(tmp_path: Path) -> None:
    """Regression: the identity check compared the engine's answer with the id the probe itself said it
    expected, so a probe that expected (and found) another model's id passed. The expected id is the
    campaign's approved one: its job's ``spec.bindings.served_name``."""
    es = qualified_entries()
    models = entry(es, "models")["payload"]
    models.update(expected="other-model", model_identity="other-model", details={"served": ["other-model"]})
    v = verdict_of(tmp_path, es)
    assert gates(v)["api-readiness"] == "failed"
    assert v["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY"
    models["details"] = {
        "served": ["other-model", "m"]
    }  # the neighbour: the engine serves the campaign's id too
    assert verdict_of(tmp_path, es)["verdict"] == "QUALIFIED"


def test_a_campaign_spec_that_binds_no_served_name_cannot_judge_identity(tmp_path: Path) -> None:
    """The approved spec names no served_name (a job entered by hand without it): the identity the engine
    must serve cannot be judged from a probe's own claim — INCONCLUSIVE, saying so."""
    es = qualified_entries()
    del entry(es, "campaign-job")["payload"]["spec"]["bindings"]["served_name"]
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "INCONCLUSIVE"
    api = next(g for g in v["gates"] if g["name"] == "api-readiness")
    assert api["status"] == "missing" and "names no served_name" in api["reason"]


@pytest.mark.parametrize(
    ("gate", "unreadable"),
    [
        pytest.param("benchmark", lambda p: p["counts"].pop("requests"), id="benchmark-requests-left-out"),
        pytest.param(
            "benchmark", lambda p: p["bounds"].update(repetitions="2"), id="benchmark-repetitions-a-text"
        ),
        pytest.param("benchmark", lambda p: p["bounds"].pop("corpus_digest"), id="benchmark-corpus-left-out"),
        pytest.param(
            "benchmark",
            lambda p: p["bounds"].update(concurrency=[True, 4, 32]),
            id="benchmark-levels-mistyped",
        ),
        pytest.param("semantic", lambda p: p["bounds"].pop("corpus_digest"), id="semantic-corpus-left-out"),
    ],
)
def test_a_newer_failed_run_whose_spec_field_is_left_out_or_mistyped_still_hides_the_older_pass(
    tmp_path: Path, gate: str, unreadable: Any
) -> None:
    """Regression: a newer failed harness run that left out (or mistyped) one spec field was taken for a run
    of another spec — a diagnostic — so the older pass did not count as having a newer run, and stood
    (QUALIFIED). A field that cannot be read says nothing against the same spec."""
    es = qualified_entries()
    if gate == "benchmark":
        payload: dict[str, Any] = {"status": "failed", "figures": {"ttft_ms.p95@c4": 9999.0}}
    else:
        payload = {"status": "failed", "figures": {"score": 0.5}, "counts": {"passed": 6, "failed": 6}}
    _rerun(es, gate, "2026-09-10T10:47:00Z", reviewed=True, **payload)
    rerun = entry(es, f"{gate}-rerun")["payload"]
    unreadable(rerun)
    bounds = rerun["bounds"]
    if bounds.get("repetitions") == "2" or any(x is True for x in bounds.get("concurrency", [])):  # refused
        with pytest.raises(SchemaError, match="bounds"):
            verdict_of(tmp_path, es)
        return
    v = verdict_of(tmp_path, es)
    assert rejected(v)[gate] == "newer-run"
    assert v["verdict"] != "QUALIFIED"


def test_a_newer_run_of_another_readable_spec_still_hides_nothing(tmp_path: Path) -> None:
    """The neighbour: a diagnostic run of another spec (6 requests), readable, is another measurement."""
    es = qualified_entries()
    _rerun(es, "benchmark", "2026-09-10T10:47:00Z", reviewed=True, status="failed")
    entry(es, "benchmark-rerun")["payload"]["counts"]["requests"] = 6
    v = verdict_of(tmp_path, es)
    assert "benchmark" not in rejected(v)
    assert rejected(v)["benchmark-rerun"] == "spec-mismatch"


@pytest.mark.parametrize(
    "end",
    [
        pytest.param({"signal": 7}, id="SIGBUS"),
        pytest.param({"signal": 8}, id="SIGFPE"),
        pytest.param({"exit_code": -7}, id="exit-minus-7"),
        pytest.param({"exit_code": -4}, id="exit-minus-4-SIGILL"),
        pytest.param({"exit_code": 134}, id="exit-134-abort-through-a-shell"),
        pytest.param({"failure_signature": "killed-sigterm", "exit_code": 1}, id="claimed-sigterm-exit-1"),
        pytest.param(
            {"failure_signature": "killed-sigterm", "lease_expired": True}, id="claimed-sigterm-lease-expired"
        ),
        pytest.param({"failure_signature": "killed-143", "exit_code": 139}, id="claimed-143-exit-139"),
    ],
)
def test_a_crash_the_launch_says_the_collector_stopped_is_still_a_crash(
    tmp_path: Path, end: dict[str, Any]
) -> None:
    """Regression: a ready launch recording ``stop_reason: finished`` (the collector's own stop) was never
    classified by how it ended, so SIGBUS, SIGFPE, exit -4 or 134 — or a claimed stop-class signature beside
    exit 1 or an expired lease — passed runtime-stability. The collector's stop sends SIGTERM, then SIGKILL:
    any other end is the engine's (``collector_stop_end``), whatever the launch claims."""
    es = qualified_entries()
    launch = entry(es, "launch")["payload"]  # (its details keep where it served: details.base_url)
    launch.update(
        ended_at="2026-09-10T10:49:00Z", details={**launch["details"], "stop_reason": "finished"}, **end
    )
    v = verdict_of(tmp_path, es)
    assert gates(v)["runtime-stability"] == "failed", v["gates"]
    assert v["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY"


@pytest.mark.parametrize(
    "end",
    [
        pytest.param({"signal": 15}, id="SIGTERM"),
        pytest.param({"signal": 9}, id="SIGKILL"),
        pytest.param({"exit_code": 0}, id="exit-0"),
        pytest.param({"exit_code": 143}, id="exit-143"),
    ],
)
def test_an_end_the_collectors_stop_causes_is_still_a_clean_stop(tmp_path: Path, end: dict[str, Any]) -> None:
    """The neighbours: SIGTERM, SIGKILL after the grace period, a clean exit: the collector's stop."""
    from ledger.signatures import collector_stop_end

    es = qualified_entries()
    launch = entry(es, "launch")["payload"]  # (its details keep where it served: details.base_url)
    launch.update(
        ended_at="2026-09-10T10:49:00Z", details={**launch["details"], "stop_reason": "finished"}, **end
    )
    assert collector_stop_end(end.get("exit_code"), end.get("signal"))
    assert verdict_of(tmp_path, es)["verdict"] == "QUALIFIED"


def test_a_job_end_claiming_a_later_ended_at_than_its_log_time_does_not_credit_later_output(
    tmp_path: Path,
) -> None:
    """Regression: a job's terminal entry logged at 10:05 that claimed ``ended_at`` 23:00 let the harness
    results logged after it be credited as produced before the end. A job ends no later than the log took
    its terminal entry."""
    es = qualified_entries()
    done = entry(es, "campaign-done")
    done["at"] = "2026-09-10T10:05:00Z"
    done["payload"]["ended_at"] = "2026-09-10T23:00:00Z"
    v = verdict_of(tmp_path, es)
    assert rejected(v)["semantic"] == "after-job-terminal"
    assert v["verdict"] != "QUALIFIED"


def test_a_launch_that_claims_it_started_after_it_was_recorded_is_refused_at_ingest(tmp_path: Path) -> None:
    """Regression: a launch collected at 10:01:00 claiming ``started_at`` 10:03 was placed before the probes
    (the earlier time was taken), which it claimed to precede. A launch is recorded after it started: the
    claim is refused at ingest, naming both times."""
    es = qualified_entries()
    entry(es, "launch")["payload"]["started_at"] = "2026-09-10T10:03:00Z"
    with pytest.raises(
        SchemaError, match="started_at 2026-09-10T10:03:00Z is after the entry's collected_at"
    ):
        verdict_of(tmp_path, es)


def _another_launch(es: list[dict[str, Any]], name: str, at: str, **payload: Any) -> dict[str, Any]:
    """A copy of the campaign's launch as a later attempt, started and logged at ``at``, in its job."""
    run = copy.deepcopy(entry(es, "launch"))
    run["name"], run["at"] = name, at
    run["payload"].update(started_at=at, **payload)
    es.insert(es.index(entry(es, "campaign-done")), run)
    return run


def test_a_crash_after_readiness_beyond_the_attempt_budget_is_still_a_fault(tmp_path: Path) -> None:
    """Regression: a launch beyond the attempt budget was rejected whole (`beyond-attempt-budget`), so its
    crash after readiness (engine-dead, SIGABRT) never reached runtime-stability: QUALIFIED. The budget
    withholds credit; what a launch shows against the engine still counts."""
    es = qualified_entries()
    stop = {"exit_code": 0, "details": {"stop_reason": "finished"}}
    _another_launch(es, "launch-2", "2026-09-10T10:46:00Z", ended_at="2026-09-10T10:46:30Z", **stop)
    _another_launch(es, "launch-3", "2026-09-10T10:47:00Z", ended_at="2026-09-10T10:47:30Z", **stop)
    _another_launch(
        es, "launch-4", "2026-09-10T10:48:00Z", ended_at="2026-09-10T10:48:30Z",
        failure_signature="engine-dead", exit_code=None, signal=6,
    )  # fmt: skip
    v = verdict_of(tmp_path, es)
    assert counted_against(v) == {"launch-4": "beyond-attempt-budget"}
    assert rejected(v).get("launch-3") != "beyond-attempt-budget"
    assert gates(v)["runtime-stability"] == "failed"
    assert v["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY"


def test_a_clean_launch_beyond_the_budget_is_still_not_credited_for_readiness(tmp_path: Path) -> None:
    """The neighbour: attempts 1–3 never ready, attempt 4 ready and clean: reported, not credited — and a
    ready attempt 4 that crashed is credited only as the crash, never as readiness."""
    es = qualified_entries()
    never_ready = {"ready": False, "failure_signature": "uva-unavailable", "exit_code": 1}
    for i in (2, 3):
        _another_launch(es, f"launch-{i}", f"2026-09-10T10:0{i}:10Z", **never_ready)
    last = _another_launch(es, "launch-4", "2026-09-10T10:04:10Z")
    entry(es, "launch")["payload"].update(never_ready)
    v = verdict_of(tmp_path, es)
    assert rejected(v)["launch-4"] == "beyond-attempt-budget"
    assert "launch-4" not in counted_against(v)
    assert v["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY"
    last["payload"].update(failure_signature="engine-dead", signal=6, ended_at="2026-09-10T10:04:50Z")
    v = verdict_of(tmp_path, es)
    assert counted_against(v) == {"launch-4": "beyond-attempt-budget"}
    assert gates(v)["api-readiness"] == "failed"


def _campaign_kernel_log(event: dict[str, Any]) -> dict[str, Any]:
    """The campaign's own kernel log (ref job), logged at 10:48, with one event."""
    return {
        "name": "kernel",
        "kind": "kernel.log",
        "key": "collector",
        "at": "2026-09-10T10:48:00Z",
        "refs": {"job": "campaign-job"},
        "payload": {"source": "journalctl", "events": [event]},
    }


@pytest.mark.parametrize(
    "message",
    [
        pytest.param(
            "amdgpu 0000:03:00.0: amdgpu: ring gfx_0.0.0 timeout, signaled seq=1, emitted seq=3",
            id="ring-timeout",
        ),
        pytest.param("NVRM: GPU at PCI:0000:3b:00: GPU has fallen off the bus.", id="fell-off-the-bus"),
        pytest.param("amdgpu 0000:03:00.0: amdgpu: GPU reset(2) failed", id="reset-failed"),
    ],
)
def test_a_gpu_fault_line_recorded_under_a_harmless_kind_is_not_harmless(
    tmp_path: Path, message: str
) -> None:
    """Regression: only NVRM Xid lines were read again; any other event was classed by the kind the entry
    gave it, so a GPU falling off the bus recorded as ``gpu-reset-succeeded`` (informational) passed. Every
    recorded line is read again with the collector's patterns (one copy, ``ledger.gpu_faults``): a line
    that shows another kind than recorded is ``unknown``."""
    from ledger.gpu_faults import line_kind

    es = qualified_entries()
    event = {"time": "2026-09-10T10:05:00Z", "kind": "gpu-reset-succeeded", "message": message}
    es.append(_campaign_kernel_log(event))
    assert line_kind(message) not in (None, "gpu-reset-succeeded")
    v = verdict_of(tmp_path, es)
    assert gates(v)["runtime-stability"] == "failed"
    event["kind"] = line_kind(message)  # the neighbour: recorded as what it is, still a fault
    assert gates(verdict_of(tmp_path, es))["runtime-stability"] == "failed"


def test_a_reset_recorded_as_what_its_line_says_stays_informational(tmp_path: Path) -> None:
    """The neighbour that must still pass: a completed reset's own line, under its own kind."""
    es = qualified_entries()
    event = {
        "time": "2026-09-10T10:05:00Z",
        "kind": "gpu-reset-succeeded",
        "message": "amdgpu: GPU reset(1) succeeded!",
    }
    es.append(_campaign_kernel_log(event))
    assert gates(verdict_of(tmp_path, es))["runtime-stability"] == "passed"


@pytest.mark.parametrize("name", ["health", "models", "completion", "sequential"])
def test_a_probe_claiming_ok_beside_an_error_text_is_a_failure(tmp_path: Path, name: str) -> None:
    """Regression: ``ok: true`` beside an ``error`` text passed (only ``ok`` and the HTTP status were
    read). The collectors write an error only for a failure: the record contradicts itself, a failure."""
    es = qualified_entries()
    entry(es, name)["payload"]["error"] = "HTTP 500: EngineDeadError"
    assert verdict_of(tmp_path, es)["verdict"] != "QUALIFIED"


@pytest.mark.parametrize("max_tokens", [None, 0], ids=["left-out", "zero"])
def test_a_ready_control_without_a_token_bound_cannot_pass(tmp_path: Path, max_tokens: int | None) -> None:
    """Regression: a READY control that recorded no ``max_tokens`` passed a gate that asks for a *bounded*
    completion. It cannot be judged: INCONCLUSIVE, saying so."""
    es = qualified_entries()
    payload = entry(es, "completion")["payload"]
    if max_tokens is None:
        del payload["max_tokens"]
    else:
        payload["max_tokens"] = max_tokens
    v = verdict_of(tmp_path, es)
    control = next(g for g in v["gates"] if g["name"] == "ready-control")
    assert control["status"] == "missing" and "max_tokens" in control["reason"]
    assert v["verdict"] == "INCONCLUSIVE"


@pytest.mark.parametrize("errors", [3, 1], ids=["three", "one"])
def test_a_semantic_pass_whose_error_count_contradicts_its_failed_count_does_not_pass(
    tmp_path: Path, errors: int
) -> None:
    """Regression: a semantic result recorded as passed, 12 of 12, beside ``errors = 3`` passed — the
    harness counts an item that erred as failed, so more errors than failed items contradict the record (a
    negative count is refused at ingest)."""
    es = qualified_entries()
    entry(es, "semantic")["payload"]["counts"]["errors"] = errors
    assert gates(verdict_of(tmp_path, es))["semantic"] == "failed"
    entry(es, "semantic")["payload"]["counts"]["errors"] = (
        0  # the neighbour: no error, as the harness writes it
    )
    assert verdict_of(tmp_path, es)["verdict"] == "QUALIFIED"


def test_an_acceptance_rejecting_a_review_fail_does_not_lift_it(tmp_path: Path) -> None:
    """The neighbour of a rejected review PASS: a rejection only takes credit away. An operator's
    acceptance ``rejected`` aimed at a reviewer's FAIL leaves the FAIL standing (lifting it takes a PASS on
    the repaired commit, or a supersession with its reason)."""
    es = qualified_entries()
    es.append(
        {
            "name": "bench-fail",
            "kind": "review",
            "key": "reviewer",
            "at": "2026-09-10T10:46:00Z",
            "refs": {"reviews": "benchmark"},
            "payload": {"result": "FAIL", "commit": "cafe000000000000000000000000000000000000"},
        }
    )
    es.append(_acceptance("bench-fail", "rejected", "2026-09-10T10:47:00Z", "we disagree"))
    v = verdict_of(tmp_path, es)
    assert "bench-fail" not in rejected(v)
    assert rejected(v)["benchmark"] == "review-fail"
    assert v["verdict"] != "QUALIFIED"


# a kernel log's window (``since`` to when it was read: ``at``) against the neighbour campaign's run, and
# whether an event without a time in it lies in the run (the GPU-fault and the OOM-killer tests share it)
LOG_WINDOWS = [
    pytest.param({}, True, id="no-since-read-after-the-run-began"),
    pytest.param({"since": "2026-09-10T09:00:00Z"}, True, id="a-window-that-covers-the-run"),
    pytest.param(
        {"since": "2026-09-10T11:00:00Z", "at": "2026-09-10T11:05:00Z"},
        False,
        id="a-window-after-the-job",
    ),
    pytest.param({"at": "2026-09-10T09:30:00Z"}, False, id="read-before-the-launch"),
]


@pytest.mark.parametrize(("window", "faults"), LOG_WINDOWS)
def test_an_untimed_gpu_fault_in_the_hosts_health_log_is_judged_by_its_logs_window(
    tmp_path: Path, window: dict[str, str], faults: bool
) -> None:
    """Regression: an Xid 79 without a time in the host's health-job kernel log was never placed in a run,
    so it was ignored — though it cannot be shown outside the run. An untimed event lies in its log's
    window (``since`` to when the log was read): where that window overlaps the run, it is the run's."""
    es = qualified_entries()
    log = _host_health_log("2026-09-10T10:03:00Z", **({"at": window["at"]} if "at" in window else {}))
    del log["payload"]["events"][0]["time"]
    if "since" in window:
        log["payload"]["since"] = window["since"]
    es.append(log)
    v = verdict_of(tmp_path, es)
    assert (gates(v)["runtime-stability"] == "failed") is faults, v["gates"]
    assert (v["verdict"] == "QUALIFIED") is not faults


def test_an_unreadable_kernel_log_over_the_run_makes_runtime_stability_inconclusive(tmp_path: Path) -> None:
    """Regression: a kernel log recorded as unreadable (``readable: false``: no access to the journal)
    counted as a log with no GPU event, so a run whose GPU events nobody could read passed runtime
    stability. Over the run, the events are unknown, not none: the gate cannot judge."""
    es = qualified_entries()
    log = _campaign_kernel_log({})
    log["payload"] = {"source": "dmesg", "readable": False, "reason": "dmesg: read kernel buffer failed"}
    es.append(log)
    v = verdict_of(tmp_path, es)
    assert gates(v)["runtime-stability"] == "missing"  # it cannot judge: INCONCLUSIVE, with why
    assert "recorded as unreadable" in str(v["gates"])
    assert v["verdict"] == "INCONCLUSIVE"
    # the neighbours: its window (since) begins after the run — it says nothing of the run ...
    log["at"], log["payload"]["since"] = "2026-09-10T10:58:00Z", "2026-09-10T10:55:00Z"  # the job ended 10:50
    assert verdict_of(tmp_path, es)["verdict"] == "QUALIFIED"
    # ... and, over the run, a readable log read later covers it: its events are known
    del log["payload"]["since"]
    log["at"] = "2026-09-10T10:48:00Z"
    readable = _campaign_kernel_log(
        {
            "time": "2026-09-10T10:05:00Z",
            "kind": "gpu-reset-succeeded",
            "message": "amdgpu: GPU reset(1) succeeded!",
        }
    )
    readable.update(name="kernel-2", at="2026-09-10T10:59:00Z")
    es.append(readable)
    assert verdict_of(tmp_path, es)["verdict"] == "QUALIFIED"
    # the neighbour with the field dropped: a "readable" log of the run that leaves out its events list
    # says nothing of what it read, so it does not cover the run (nor does it pass it on its own)
    readable["payload"] = {"source": "journalctl"}
    v = verdict_of(tmp_path, es)
    assert gates(v)["runtime-stability"] == "missing", v["gates"]
    es.remove(log)
    assert gates(verdict_of(tmp_path, es))["runtime-stability"] == "missing"
    # a crash still fails the gate: what cannot be read does not hide what was seen
    entry(es, "launch")["payload"].update(failure_signature="engine-dead", signal=6)
    assert gates(verdict_of(tmp_path, es))["runtime-stability"] == "failed"
