"""Audit 5: `ledger check routing-change` allowed what its own rules refuse.

A restoration (``--action restore``) was allowed on a READY completion that records no ``max_tokens``
(not shown bounded), on an earlier /health 200 and READY after which the newest /health answered 503 and
the newest completion 500 (the engine is down now), and on a /v1/models probe whose claimed
``model_identity`` the list it recorded (``details.served``) contradicts. A route was allowed onto a GPU
that a kernel log shows fell off the bus after the host's latest probe, which still listed it. Each test
is named after the failure it holds fixed; the neighbours beside it show what is still allowed."""

from __future__ import annotations

import copy
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import tests.policy.conftest as policy_conftest
from ledger.entries import format_time, parse_time
from ledger.errors import PolicyError
from ledger.policy.loader import load_policy
from ledger.policy.routing import _served_identity_check, check_routing_change
from tests.policy.conftest import POLICY_DIR
from tests.policy.test_fail_closed import SUBJECT as CAMPAIGN
from tests.policy.test_fail_closed import entry, qualified_entries
from tests.test_routing_at_reference_time import route_campaign

build = policy_conftest.build  # a ledger built from a policy fixture file
cli = policy_conftest.cli

# --- restorations (seed 000's keys and model) -----------------------------------------------------------

SEED000 = "routing-change/seed000-restoration.toml"
MODEL = "qwen/qwen3.8-27b"
HEALTH = {"endpoint": "http://127.0.0.1:8080/health", "check": "health", "ok": True, "http_status": 200}
MODELS = {"endpoint": "http://127.0.0.1:8080/v1/models", "check": "models", "ok": True, "http_status": 200,
          "model_identity": MODEL}  # fmt: skip
READY = {"endpoint": "http://127.0.0.1:8080/v1/chat/completions", "check": "completion", "ok": True,
         "http_status": 200, "expected": "READY", "text": "READY", "max_tokens": 8}  # fmt: skip
HEALTH_503 = {**HEALTH, "ok": False, "http_status": 503, "error": "Service Unavailable"}
COMPLETION_500 = {**READY, "ok": False, "http_status": 500, "text": None, "error": "EngineDeadError"}
RESTORE_NOW = "2026-09-01T18:30:00Z"


def _restore(b: Any, host: str, probes: list[dict[str, Any]]) -> dict[str, Any]:
    """Record ``probes`` of ``host`` a second apart (log order is probe order), then judge its restoration."""
    subject = {"backend": "llama.cpp", "model": MODEL, "host": host}
    for p in probes:
        at = parse_time("2026-09-01T18:10:00Z") + timedelta(seconds=b.ledger.size())  # a later second each
        st = b.ledger.make_statement("health.probe", subject, p, collected_at=format_time(at))
        b.ledger.append([b.ledger.sign(st, "collector")], logged_at=at)
    return check_routing_change(
        b.ledger, load_policy("routing-change"), {"model": MODEL, "host": host}, action="restore",
        now=parse_time(RESTORE_NOW),
    )  # fmt: skip


def _failed(r: dict[str, Any]) -> set[str]:
    return {c["name"] for c in r["checks"] if c["status"] == "failed"}


def test_restore_with_an_unbounded_ready_completion_is_refused(build) -> None:
    b = build(SEED000)
    unbounded = {k: v for k, v in READY.items() if k != "max_tokens"}
    r = _restore(b, "hiro-a", [HEALTH, MODELS, unbounded])
    assert r["allowed"] is False
    assert _failed(r) == {"restoration-ready", "restoration-ready-newest"}, r["reasons"]
    assert any(
        "no bounded completion answered exactly READY" in x and "max_tokens" in x for x in r["reasons"]
    )
    assert any("max_tokens None" in x for x in r["reasons"]), r["reasons"]
    # a max_tokens of 0 bounds nothing either (the qualification's ready-control: a positive one)
    assert _restore(b, "hiro-b", [HEALTH, MODELS, {**READY, "max_tokens": 0}])["allowed"] is False
    # the neighbour: the same probes with max_tokens recorded restore
    ok = _restore(b, "hiro-c", [HEALTH, MODELS, READY])
    assert ok["allowed"] is True, ok["reasons"]


def test_restore_after_the_newest_health_probe_failed_is_refused(build) -> None:
    b = build(SEED000)
    r = _restore(b, "hiro-d", [HEALTH, MODELS, READY, HEALTH_503, COMPLETION_500])
    assert r["allowed"] is False
    assert _failed(r) == {"restoration-health-newest", "restoration-ready-newest"}, r["reasons"]
    health = next(x for x in r["reasons"] if x.startswith("the newest fresh /health probe"))
    assert "HTTP 503" in health and "Service Unavailable" in health, health
    assert "an earlier /health 200 does not lift a later failure" in health
    completion = next(x for x in r["reasons"] if x.startswith("the newest fresh completion probe"))
    assert "HTTP 500" in completion and "EngineDeadError" in completion, completion
    # either failure alone refuses
    assert _failed(_restore(b, "hiro-e", [HEALTH, MODELS, READY, HEALTH_503])) == {
        "restoration-health-newest"
    }
    only_completion = _restore(b, "hiro-f", [HEALTH, MODELS, READY, COMPLETION_500])
    assert _failed(only_completion) == {"restoration-ready-newest"}
    # the newest completion answering NOT READY (recorded ok) after a READY refuses too: it is judged in full
    not_ready = {**READY, "text": "NOT READY"}
    assert _failed(_restore(b, "hiro-g", [HEALTH, MODELS, READY, not_ready])) == {"restoration-ready-newest"}


def test_restore_after_a_pass_that_follows_a_failure_is_allowed(build) -> None:
    """The neighbour of the newest-probe rule: the engine failed, then came back; the newest probes pass."""
    b = build(SEED000)
    r = _restore(b, "hiro-h", [HEALTH_503, COMPLETION_500, HEALTH, MODELS, READY])
    assert r["allowed"] is True, r["reasons"]


def test_restore_whose_served_list_contradicts_the_identity_claim_is_refused(build) -> None:
    b = build(SEED000)
    other = {**MODELS, "details": {"served": ["qwen/qwen3-32b"]}}
    r = _restore(b, "hiro-i", [HEALTH, other, READY])
    assert r["allowed"] is False
    assert _failed(r) == {"restoration-identity", "restoration-identity-newest"}, r["reasons"]
    assert any("/v1/models listed: qwen/qwen3-32b" in x for x in r["reasons"]), r["reasons"]
    assert any("listed ['qwen/qwen3-32b'], claimed qwen/qwen3.8-27b" in x for x in r["reasons"]), r["reasons"]
    # a recorded served value that is not a list shows no id served
    assert (
        _restore(b, "hiro-j", [HEALTH, {**MODELS, "details": {"served": MODEL}}, READY])["allowed"] is False
    )
    # the neighbours: a list holding the model (beside another) restores, and so does a probe that records
    # no list
    agreeing = {**MODELS, "details": {"served": ["qwen/qwen3-32b", MODEL]}}
    assert _restore(b, "hiro-k", [HEALTH, agreeing, READY])["allowed"] is True
    assert _restore(b, "hiro-l", [HEALTH, MODELS, READY])["allowed"] is True


def test_restore_whose_newest_models_answer_serves_another_model_is_refused(build) -> None:
    """An engine that served the model, then (its newest /v1/models answer) serves another: not restored."""
    b = build(SEED000)
    r = _restore(b, "hiro-m", [HEALTH, MODELS, READY, {**MODELS, "details": {"served": ["qwen/qwen3-32b"]}}])
    assert r["allowed"] is False
    assert _failed(r) == {"restoration-identity-newest"}, r["reasons"]


def test_the_restore_identity_is_the_qualifications_own_check_not_a_copy(tmp_path: Path) -> None:
    """restoration-identity applies the api-readiness check of the qualification the routing policy names
    (params.served_identity), compiled from that file: one definition. A policy naming no such check is an
    error, never a silent pass."""
    qual, check = _served_identity_check(load_policy("routing-change"))
    assert qual.name == "backend-qualification"
    gate = next(g for g in qual.gates if g.spec.name == "api-readiness")
    assert any(c is check for c, _, _ in gate.checks)
    assert "details.served" in check.source

    dest = tmp_path / "policies"
    dest.mkdir()
    for p in POLICY_DIR.glob("*.toml"):
        (dest / p.name).write_bytes(p.read_bytes())
    routing = dest / "routing-change.toml"
    routing.write_text(routing.read_text().replace('check = "served-identity"', 'check = "nothing"'))
    with pytest.raises(PolicyError, match="names check 'nothing' of gate 'api-readiness'"):
        _served_identity_check(load_policy("routing-change", dest))


def test_rewording_the_identity_checks_fail_text_keeps_the_restore_check(tmp_path: Path) -> None:
    """The routing policy reads the qualification's identity check by its `id`, not by the start of its fail
    text (which found it before): rewording the reason a reviewer reads breaks no reference. Two checks of
    one gate with the same id are a policy error."""
    dest = tmp_path / "policies"
    dest.mkdir()
    for p in POLICY_DIR.glob("*.toml"):
        (dest / p.name).write_bytes(p.read_bytes())
    qual_file = dest / "backend-qualification.toml"
    text = qual_file.read_text()
    old = (
        'fail = "/v1/models did not serve the expected model: the engine is not serving the model under test"'
    )
    assert text.count(old) == 1
    qual_file.write_text(text.replace(old, 'fail = "the engine listed another model on /v1/models"'))
    _qual, check = _served_identity_check(load_policy("routing-change", dest))
    assert "details.served" in check.source

    qual_file.write_text(
        text.replace('id = "served-identity"', 'id = "served-identity"\n# dup').replace(
            'fail = "/health failed after the engine reached readiness',
            'id = "served-identity"\nfail = "/health failed after the engine reached readiness',
        )
    )
    with pytest.raises(PolicyError, match="check ids of a gate are unique"):
        load_policy("backend-qualification", dest)


def test_a_refused_restoration_exits_1_naming_the_failed_probe(build, cli) -> None:
    b = build(SEED000)
    _restore(b, "hiro-n", [HEALTH, MODELS, READY, HEALTH_503])
    b.ledger.close()
    r = cli("check", "routing-change", "--home", str(b.home), "--action", "restore", "--subject",
            f"model={MODEL}", "--subject", "host=hiro-n", "--now", RESTORE_NOW)  # fmt: skip
    assert r.code == 1, (r.out, r.err)
    assert "the newest fresh /health probe" in r.out and "HTTP 503" in r.out, r.out


# --- a GPU fault after the host's latest probe ----------------------------------------------------------

ROUTE_NOW = "2026-09-11T09:00:00Z"
ON_GPU2 = {"host": "gpu-box-1", "services": [{"name": "vllm-embed", "engine": "vllm", "model": "m-7",
                                              "gpus": [2], "gpu_memory_utilization": 0.25}]}  # fmt: skip
ON_GPU0 = {**ON_GPU2, "services": [{**ON_GPU2["services"][0], "gpus": [0]}]}
X79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=48211, name=python3, GPU has fallen off the bus."
VERDICT = {"name": "verdict", "at": "2026-09-10T11:00:00Z",
           "record_verdict": {"subject": {"campaign": CAMPAIGN["campaign"]}, "key": "reviewer"}}  # fmt: skip


def _gpu(i: int, bus: str | None) -> dict[str, Any]:
    return {"index": i, "name": "NVIDIA H100", **({"pci_bus_id": f"00000000:{bus}:00.0"} if bus else {})}


def _kernel_log(at: str, events: list[dict[str, Any]], name: str = "health-kernel") -> dict[str, Any]:
    """A kernel log a health job of the host recorded (another campaign's, as a health job's is)."""
    return {"name": name, "kind": "kernel.log", "key": "collector", "at": at,
            "subject": {"campaign": "health-job", "host": "gpu-box-1", "backend": None, "model": None},
            "payload": {"source": "dmesg", "events": events}}  # fmt: skip


def _xid79(time: str | None = "2026-09-11T08:10:00Z") -> dict[str, Any]:
    return {**({"time": time} if time else {}), "kind": "nvrm-xid", "xid": 79, "device": "PCI:0000:3b:00",
            "message": X79}  # fmt: skip


def _route(
    tmp_path: Path,
    extra: list[dict[str, Any]],
    deployment: dict[str, Any] = ON_GPU2,
    buses: tuple[str | None, ...] = ("5E", "86", "3B"),
) -> dict[str, Any]:
    """The QUALIFIED neighbour campaign, its host probe (10:00:05Z) listing GPU0..2 at ``buses``, its verdict
    recorded, then ``extra``; the route judged the next morning."""
    es = qualified_entries()
    entry(es, "host")["payload"]["gpus"] = [_gpu(i, bus) for i, bus in enumerate(buses)]
    return route_campaign(tmp_path, [*es, copy.deepcopy(VERDICT), *extra], ROUTE_NOW, deployment)


def test_a_gpu_that_fell_off_the_bus_after_the_latest_probe_is_refused(tmp_path: Path) -> None:
    assert _route(tmp_path, [])["allowed"] is True  # the control: no fault since the probe
    r = _route(tmp_path, [_kernel_log("2026-09-11T08:30:00Z", [_xid79()])])
    assert r["allowed"] is False
    [reason] = r["reasons"]
    assert reason.startswith("GPU2 (PCI 0000:3b:00 on host probe "), reason
    assert "faulted after the host's latest probe listed it" in reason
    assert "xid:79 (gpu-fault) at 2026-09-11T08:10:00" in reason and "kernel log " in reason, reason
    assert "GPU has fallen off the bus" in reason
    assert {c["name"]: c["status"] for c in r["checks"]}["gpu-not-faulted-since-probe"] == "failed"


def test_a_gpu_fault_of_another_gpu_or_before_the_probe_does_not_refuse_the_route(tmp_path: Path) -> None:
    # the route's GPU0 is at 5e: the fault of 3b (GPU2) is another GPU's
    assert _route(tmp_path, [_kernel_log("2026-09-11T08:30:00Z", [_xid79()])], ON_GPU0)["allowed"] is True
    # a fault before the probe: the probe, after it, shows the GPU as it stands
    before = _route(tmp_path, [_kernel_log("2026-09-10T10:30:00Z", [_xid79("2026-09-10T09:30:00Z")])])
    assert before["allowed"] is True, before["reasons"]
    # a newer probe after the fault lists GPU2 again: it is back
    probe = {"name": "later-probe", "kind": "host.probe", "key": "collector", "at": "2026-09-11T08:45:00Z",
             "subject": {"campaign": "health-job", "host": "gpu-box-1", "backend": None, "model": None},
             "payload": {"hostname": "gpu-box-1", "os": "Ubuntu 24.04", "kernel": "6.8.0",
                         "gpus": [_gpu(0, "5E"), _gpu(1, "86"), _gpu(2, "3B")]}}  # fmt: skip
    back = _route(tmp_path, [_kernel_log("2026-09-11T08:30:00Z", [_xid79()]), probe])
    assert back["allowed"] is True, back["reasons"]


def test_an_informational_gpu_event_after_the_probe_does_not_refuse_the_route(tmp_path: Path) -> None:
    reset_ok = {"time": "2026-09-11T08:10:00Z", "kind": "gpu-reset-succeeded",
                "message": "amdgpu 0000:3b:00.0: amdgpu: GPU reset(2) succeeded!"}  # fmt: skip
    r = _route(tmp_path, [_kernel_log("2026-09-11T08:30:00Z", [reset_ok])])
    assert r["allowed"] is True, r["reasons"]


def test_a_gpu_fault_after_the_probe_whose_device_cannot_be_told_is_refused(tmp_path: Path) -> None:
    """Fail closed: an event of the host after its latest probe that names no device (or no PCI address,
    or the whole host: the OOM killer) may be of the route's GPU."""
    failed_reset = {"time": "2026-09-11T08:10:00Z", "kind": "gpu-reset-failed", "message": "GPU reset failed"}
    r = _route(tmp_path, [_kernel_log("2026-09-11T08:30:00Z", [failed_reset])], ON_GPU0)
    assert r["allowed"] is False
    [reason] = r["reasons"]
    assert "that no one GPU can be told from" in reason and "gpu-reset-failed" in reason, reason
    assert "no device recorded" in reason and "2026-09-11T08:10:00" in reason, reason
    oom = {"time": "2026-09-11T08:10:00Z", "kind": "oom-kill", "device": "PCI:0000:3b:00",
           "message": "Out of memory: Killed process 4242 (python3) total-vm:1000kB"}  # fmt: skip
    r = _route(tmp_path, [_kernel_log("2026-09-11T08:30:00Z", [oom])], ON_GPU0)
    assert r["allowed"] is False and "host-memory" in r["reasons"][0], r["reasons"]


def test_an_untimed_gpu_fault_in_a_log_taken_after_the_probe_is_refused(tmp_path: Path) -> None:
    r = _route(tmp_path, [_kernel_log("2026-09-11T08:30:00Z", [_xid79(None)])])
    assert r["allowed"] is False
    assert "xid:79 (gpu-fault) at a time its log does not record" in r["reasons"][0], r["reasons"]


def test_a_gpu_fault_after_a_probe_that_records_no_pci_address_is_refused(tmp_path: Path) -> None:
    """Which GPU the event's device is cannot be told without the probe's PCI addresses: fail closed."""
    r = _route(tmp_path, [_kernel_log("2026-09-11T08:30:00Z", [_xid79()])], ON_GPU0, buses=(None, None, None))
    assert r["allowed"] is False
    assert "records no PCI address for it" in r["reasons"][0], r["reasons"]


def test_a_superseded_kernel_log_does_not_refuse_the_route(tmp_path: Path) -> None:
    sup = {"name": "sup", "kind": "supersession", "key": "operator", "at": "2026-09-11T08:40:00Z",
           "subject": {"host": "gpu-box-1", "campaign": None, "backend": None, "model": None},
           "payload": {"reason": "the log was of another machine"},
           "refs": {"supersedes": "health-kernel"}}  # fmt: skip
    r = _route(tmp_path, [_kernel_log("2026-09-11T08:30:00Z", [_xid79()]), sup])
    assert r["allowed"] is True, r["reasons"]


# --- audit 8 neighbours -----------------------------------------------------------------------------


@pytest.mark.parametrize(("action", "allowed"), [("0x2 (Node Reboot Required)", False), ("0x0 (None)", True)])
def test_a_gpu_whose_driver_asked_for_a_reboot_after_the_probe_is_refused(
    tmp_path: Path, action: str, allowed: bool
) -> None:
    """Regression: an Xid 154 "GPU recovery action changed ... to Node Reboot Required" on GPU2 after the
    latest probe was left out as informational (its catalogue class) and the route allowed — the verdict
    fails the same event during a run (a recovery action other than None)."""
    line = f"NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None) to {action}"
    event = {"time": "2026-09-11T08:10:00Z", "kind": "nvrm-xid", "xid": 154, "device": "PCI:0000:3b:00",
             "message": line}  # fmt: skip
    r = _route(tmp_path, [_kernel_log("2026-09-11T08:30:00Z", [event])])
    assert r["allowed"] is allowed, r["reasons"]
    if not allowed:
        assert any("GPU2" in x and "xid:154" in x for x in r["reasons"]), r["reasons"]


@pytest.mark.parametrize(
    ("first", "late", "check"),
    [(HEALTH_503, HEALTH, "restoration-health-newest"), (COMPLETION_500, READY, "restoration-ready-newest")],
)
def test_restore_where_an_older_pass_was_logged_after_a_newer_failure_is_refused(
    build, first: dict[str, Any], late: dict[str, Any], check: str
) -> None:
    """Regression: a failure observed at 18:29 was logged first, then a pass observed at 18:25 (spooled,
    uploaded late): the newest probe by log order passed and the restoration was allowed. The probe
    observed last must pass too."""
    b = build(SEED000)
    host = "hiro-late"
    subject = {"backend": "llama.cpp", "model": MODEL, "host": host}
    base = [HEALTH, MODELS, READY]
    for p, at in [*((p, "2026-09-01T18:20:00Z") for p in base), (first, "2026-09-01T18:29:00Z"),
                  (late, "2026-09-01T18:25:00Z")]:  # fmt: skip
        st = b.ledger.make_statement("health.probe", subject, p, collected_at=at)
        b.ledger.append([b.ledger.sign(st, "collector")], logged_at=parse_time("2026-09-01T18:29:30Z"))
    r = check_routing_change(
        b.ledger, load_policy("routing-change"), {"model": MODEL, "host": host}, action="restore",
        now=parse_time(RESTORE_NOW),
    )  # fmt: skip
    assert r["allowed"] is False
    assert check in _failed(r)


def _policies_with_control_answer(tmp_path: Path, answer: str) -> Path:
    dest = tmp_path / "policies"
    dest.mkdir()
    for p in POLICY_DIR.glob("*.toml"):
        (dest / p.name).write_bytes(p.read_bytes())
    qual = dest / "backend-qualification.toml"
    text = qual.read_text()
    assert text.count('control_answer = "READY"') == 1
    qual.write_text(text.replace('control_answer = "READY"', f"control_answer = {answer!r}"))
    return dest


def test_restore_ready_answer_was_a_pattern_built_from_its_own_parameter(build, tmp_path: Path) -> None:
    """The restoration checks judged the READY answer by a regex built from their own parameter
    (``restoration_expected_text``), beside the qualification's ``control_answer``: two copies, and an answer
    holding ``.`` or ``(`` was read as a pattern. They now read the qualification's one judgement
    (``e.derived.probe_failed``, with its params): the answer exactly, surrounding whitespace stripped."""
    routing_text = (POLICY_DIR / "routing-change.toml").read_text()
    assert "restoration_expected_text" not in routing_text
    dest = _policies_with_control_answer(tmp_path, "OK.")
    policy = load_policy("routing-change", dest)
    b = build(SEED000)

    def restore(host: str, text: Any) -> dict[str, Any]:
        _restore(b, host, [HEALTH, MODELS, {**READY, "text": text, "expected": "OK."}])
        return check_routing_change(
            b.ledger, policy, {"model": MODEL, "host": host}, action="restore", now=parse_time(RESTORE_NOW)
        )

    wildcard = restore("pat-a", "OKX")  # "." read as any character before
    assert wildcard["allowed"] is False
    assert _failed(wildcard) == {"restoration-ready", "restoration-ready-newest"}, wildcard["reasons"]
    assert any("answered exactly OK." in x for x in wildcard["reasons"]), wildcard["reasons"]
    assert restore("pat-b", "  OK.\n")["allowed"] is True  # the neighbour: the answer, whitespace aside
    for host, text in (("pat-c", "ok."), ("pat-d", "OK. READY"), ("pat-e", None)):
        assert restore(host, text)["allowed"] is False, (host, text)  # another case, more, no answer
    # the shipped policy: the qualification's READY, not the routing policy's copy
    assert _restore(b, "pat-g", [HEALTH, MODELS, {**READY, "text": "READY."}])["allowed"] is False
    assert _restore(b, "pat-h", [HEALTH, MODELS, READY])["allowed"] is True


def test_restore_with_no_control_answer_in_the_qualification_is_refused(build, tmp_path: Path) -> None:
    """A qualification whose control_answer is not a string judges no READY: fail closed, never a pass."""
    dest = _policies_with_control_answer(tmp_path, "READY")
    qual = dest / "backend-qualification.toml"
    qual.write_text(qual.read_text().replace("control_answer = 'READY'", "control_answer = 7"))
    b = build(SEED000)
    _restore(b, "noans-a", [HEALTH, MODELS, READY])
    r = check_routing_change(
        b.ledger, load_policy("routing-change", dest), {"model": MODEL, "host": "noans-a"}, action="restore",
        now=parse_time(RESTORE_NOW),
    )  # fmt: skip
    assert r["allowed"] is False
    assert "restoration-ready" in _failed(r), r["reasons"]
