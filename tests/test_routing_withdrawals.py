"""Audit 34 (f1, f2, f3): what takes a failure out of `ledger check routing-change` (and POST
/v1/routing-check).

A rule that only withholds credit — an acceptance that rejects the entry, a supersession signed by the key
that signed it (``acceptance.withholds_only``: ``rejected-by-acceptance``, ``self-superseded``) — never
drops a failure the entry shows; only a withdrawal does (another key's supersession, with its reason).
Before, the routing gate dropped every entry ``acceptance.taken_out`` named: a kernel log showing GPU2 fell
off the bus, the host's P2P fault note and the engine's newest /health 503 were refused before the rejection
(or the signer's own supersession) and allowed after it, while the verdict on the same evidence stayed NOT
QUALIFIED. A passing record taken out so still loses its credit (a verdict, a host probe, a /health 200).

f1: a deployment service whose ``model`` spells the routed model otherwise (case, surrounding whitespace) is
a service of it, judged by deployment-engine and deployment-device as one (``routing.model_key``, the gate's
one normaliser, also the verdict-shopping check's).

Each test is named after the failure it holds fixed. The ledger is the shipped seed-004 routing fixture
(campaign router-embed QUALIFIED, verdict recorded 2026-09-10T11:00Z by the reviewer, the operator's P2P
note at 11:05Z), judged at 2026-09-11T09:00Z (``NOW``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import tests.policy.conftest as policy_conftest
from ledger.entries import format_time, parse_time
from ledger.errors import RoleError
from ledger.policy.loader import load_policy
from ledger.policy.routing import _same_name, check_routing_change, model_key
from ledger.policy.rules import Rule

build = policy_conftest.build  # the policy tests' fixture: a ledger built from a policy fixture file

SEED004 = "routing-change/seed004-router.toml"
SUBJECT = {"backend": "vllm", "model": "Qwen3-Embedding-8B", "host": "gpu-box-1"}
NOW = parse_time("2026-09-11T09:00:00Z")
EMBED = {
    "engine": "vllm",
    "name": "vllm-embed",
    "model": "Qwen3-Embedding-8B",
    "gpus": [2],
    "gpu_memory_utilization": 0.25,
}
ON_GPU2 = {"host": "gpu-box-1", "services": [EMBED]}
# a multi-GPU service without NCCL_P2P_DISABLE=1: refused while the host records the P2P fault
P2P_LAYOUT = {
    "host": "gpu-box-1",
    "services": [
        {
            "engine": "vllm",
            "name": "vllm-text",
            "model": "Qwen3.6-35B-A3B-FP8",
            "gpus": [0, 1],
            "gpu_memory_utilization": 0.85,
        },
        EMBED,
    ],
}
# GPU2 fell off the bus after the host's latest probe (collected 2026-09-10T10:00:05Z)
XID79 = {
    "source": "dmesg",
    "events": [
        {
            "time": "2026-09-10T12:00:00Z",
            "kind": "nvrm-xid",
            "xid": 79,
            "device": "PCI:0000:3b:00",
            "message": "NVRM: Xid (PCI:0000:3b:00): 79, pid=48211, name=python3, GPU has fallen off the bus.",
        }
    ],
}
HEALTH_200 = {"endpoint": "/health", "check": "health", "ok": True, "http_status": 200}
HEALTH_503 = {
    "endpoint": "/health",
    "check": "health",
    "ok": False,
    "http_status": 503,
    "error": "Unavailable",
}
MODELS = {
    "endpoint": "/v1/models",
    "check": "models",
    "ok": True,
    "http_status": 200,
    "model_identity": "Qwen3-Embedding-8B",
    "details": {"served": ["Qwen3-Embedding-8B"]},
}
READY = {
    "endpoint": "/v1/chat/completions",
    "check": "completion",
    "ok": True,
    "http_status": 200,
    "expected": "READY",
    "text": "READY",
    "max_tokens": 8,
}


class Log:
    """Appends to a built fixture ledger, one minute apart from 2026-09-10T12:00Z (after its last entry)."""

    def __init__(self, b: Any, start: str = "2026-09-10T12:00:00Z") -> None:
        self.b, self.t = b, parse_time(start)

    def add(self, kind: str, subject: dict[str, str], payload: dict[str, Any], key: str, refs=()) -> str:
        led = self.b.ledger
        at = self.t
        self.t += timedelta(minutes=1)
        st = led.make_statement(kind, subject, payload, refs=list(refs), collected_at=format_time(at))
        return str(led.append([led.sign(st, key)], logged_at=at)[0].entry_id)

    def reject(self, target: str, key: str) -> str:
        return self.add(
            "acceptance",
            {"host": "gpu-box-1"},
            {"decision": "rejected", "reason": "not accepted"},
            key,
            [("subject", target)],
        )

    def accept(self, target: str, key: str) -> str:
        return self.add(
            "acceptance",
            {"host": "gpu-box-1"},
            {"decision": "accepted", "reason": "looked at it"},
            key,
            [("subject", target)],
        )

    def supersede(self, target: str, key: str) -> str:
        return self.add(
            "supersession", {"host": "gpu-box-1"}, {"reason": "ignore"}, key, [("supersedes", target)]
        )


def check(b: Any, deployment: dict[str, Any] | None = None, *, action: str = "route", now: Any = NOW) -> Any:
    return check_routing_change(
        b.ledger, load_policy("routing-change"), dict(SUBJECT), action=action, deployment=deployment, now=now
    )


def _reasons(r: dict[str, Any]) -> str:
    return "\n".join(r["reasons"])


def _kept(r: dict[str, Any], entry: str) -> list[dict[str, Any]]:
    return [i for i in r["ignored"] if i["entry"] == entry and i.get("counts_against")]


def _gpu_fault(b: Any, key: str = "collector") -> tuple[Log, str]:
    log = Log(b)
    return log, log.add("kernel.log", {"host": "gpu-box-1"}, XID79, key)


def _restore_probes(log: Log, last: dict[str, Any], key: str = "collector") -> str:
    """Fresh probes for a restoration (within the 1h bound of a reference time of 12:30Z): every check
    passes, then ``last``, the newest /health probe; its id."""
    for p in (HEALTH_200, MODELS, READY):
        log.add("health.probe", dict(SUBJECT), p, "collector")
    return log.add("health.probe", dict(SUBJECT), last, key)


RESTORE_NOW = parse_time("2026-09-10T12:30:00Z")


def test_the_baseline_routes_and_a_gpu_fault_after_the_probe_refuses(build) -> None:
    b = build(SEED004)
    assert check(b, ON_GPU2)["allowed"] is True
    _gpu_fault(b)
    r = check(b, ON_GPU2)
    assert r["allowed"] is False and "GPU2" in _reasons(r) and "xid:79" in _reasons(r), r["reasons"]


# --- f2: an acceptance that rejects a failure takes credit away, and drops no failure ----------------------


@pytest.mark.parametrize("by", ["operator", "reviewer"])
def test_a_rejected_gpu_fault_still_refuses_the_route(build, by: str) -> None:
    b = build(SEED004)
    log, kl = _gpu_fault(b)
    log.reject(kl, by)
    r = check(b, ON_GPU2)
    assert r["allowed"] is False, r
    assert "GPU2" in _reasons(r) and "fallen off the bus" in _reasons(r), r["reasons"]
    [kept] = _kept(r, kl)
    assert kept["rule"] == Rule.REJECTED_BY_ACCEPTANCE and "still evidence against" in kept["detail"], kept


def test_a_gpu_fault_rejected_by_a_collector_key_is_no_rejection_and_still_refuses(build) -> None:
    """A collector key may not sign acceptances: the log refuses its rejection, and the fault stands."""
    b = build(SEED004)
    log, kl = _gpu_fault(b)
    with pytest.raises(RoleError, match="acceptance needs one of"):
        log.reject(kl, "collector")
    r = check(b, ON_GPU2)
    assert r["allowed"] is False and "GPU2" in _reasons(r), r["reasons"]
    assert not _kept(r, kl)  # not taken out at all


def test_a_rejected_gpu_fault_on_a_gpu_the_layout_does_not_use_refuses_nothing(build) -> None:
    b = build(SEED004)
    log, kl = _gpu_fault(b)
    log.reject(kl, "operator")
    cpu_only = {"host": "gpu-box-1", "services": [{**EMBED, "gpus": None, "device": "cpu"}]}
    cpu_only["services"][0].pop("gpus")
    cpu_only["services"][0].pop("gpu_memory_utilization")
    r = check(b, cpu_only)
    assert not any("faulted" in x or "GPU event" in x for x in r["reasons"]), r["reasons"]


def test_a_gpu_fault_rejected_then_accepted_again_by_another_key_still_refuses(build) -> None:
    b = build(SEED004)
    log, kl = _gpu_fault(b)
    log.reject(kl, "operator")
    log.accept(kl, "reviewer")
    r = check(b, ON_GPU2)
    assert r["allowed"] is False and "GPU2" in _reasons(r), r["reasons"]


@pytest.mark.parametrize("by", ["reviewer", "operator"])
def test_a_rejected_p2p_fault_note_still_refuses_a_multi_gpu_service_without_nccl_p2p_disable(
    build, by: str
) -> None:
    b = build(SEED004)
    assert check(b, P2P_LAYOUT)["allowed"] is False
    Log(b).reject(b.names["p2p-note"], by)
    r = check(b, P2P_LAYOUT)
    assert r["allowed"] is False, r
    assert "records a P2P fault, without NCCL_P2P_DISABLE=1" in _reasons(r), r["reasons"]
    assert r["host"]["facts"]["p2p_fault"] is True
    assert r["host"]["fact_sources"]["p2p_fault"] == [b.names["p2p-note"]]
    [kept] = _kept(r, b.names["p2p-note"])
    assert kept["rule"] == Rule.REJECTED_BY_ACCEPTANCE


@pytest.mark.parametrize("by", ["operator", "reviewer"])
def test_a_rejected_health_503_still_refuses_the_restoration(build, by: str) -> None:
    b = build(SEED004)
    log = Log(b)
    bad = _restore_probes(log, HEALTH_503)
    assert check(b, action="restore", now=RESTORE_NOW)["allowed"] is False
    log.reject(bad, by)
    r = check(b, action="restore", now=RESTORE_NOW)
    assert r["allowed"] is False, r
    assert "newest fresh /health probe" in _reasons(r) and "HTTP 503" in _reasons(r), r["reasons"]
    assert bad in r["probes"]
    [kept] = _kept(r, bad)
    assert kept["rule"] == Rule.REJECTED_BY_ACCEPTANCE


def test_a_rejected_health_200_loses_its_credit(build) -> None:
    """The other side of the rule: a passing probe rejected credits nothing — its pass does not restore."""
    b = build(SEED004)
    log = Log(b)
    good = _restore_probes(log, HEALTH_200)
    assert check(b, action="restore", now=RESTORE_NOW)["allowed"] is True
    log.reject(good, "operator")
    # the earlier /health 200 is still there: it restores — the rejected one is simply not read
    r = check(b, action="restore", now=RESTORE_NOW)
    assert good not in r["probes"] and not _kept(r, good)
    assert r["allowed"] is True, r["reasons"]


def test_a_rejected_health_200_after_a_503_does_not_lift_the_503(build) -> None:
    b = build(SEED004)
    log = Log(b)
    for p in (MODELS, READY, HEALTH_503):
        log.add("health.probe", dict(SUBJECT), p, "collector")
    good = log.add("health.probe", dict(SUBJECT), HEALTH_200, "collector")
    assert check(b, action="restore", now=RESTORE_NOW)["allowed"] is True  # a pass after a failure restores
    log.reject(good, "reviewer")
    r = check(b, action="restore", now=RESTORE_NOW)
    assert r["allowed"] is False and "HTTP 503" in _reasons(r), r["reasons"]


def test_a_rejected_verdict_still_loses_its_credit(build) -> None:
    b = build(SEED004)
    Log(b).reject(b.names["verdict"], "operator")
    r = check(b, ON_GPU2)
    assert r["allowed"] is False
    assert any("no trusted backend-qualification verdict" in x for x in r["reasons"]), r["reasons"]


def test_a_rejected_host_probe_still_loses_its_credit(build) -> None:
    b = build(SEED004)
    Log(b).reject(b.names["host"], "operator")  # the campaign's host probe: the only one of the host
    r = check(b, ON_GPU2)
    assert r["allowed"] is False
    assert any("GPU2" in x and "is not on gpu-box-1" in x for x in r["reasons"]), r["reasons"]


# --- f3: a key does not withdraw its own record's failure ---------------------------------------------------


def test_a_gpu_fault_superseded_by_its_own_key_still_refuses_the_route(build) -> None:
    b = build(SEED004)
    log, kl = _gpu_fault(b, key="operator")
    log.supersede(kl, "operator")
    r = check(b, ON_GPU2)
    assert r["allowed"] is False and "GPU2" in _reasons(r), r["reasons"]
    [kept] = _kept(r, kl)
    assert kept["rule"] == Rule.SELF_SUPERSEDED and "signed by the key that signed it" in kept["detail"]


@pytest.mark.parametrize("order", ["own-first", "other-first"])
def test_a_gpu_fault_superseded_by_another_key_is_withdrawn_whatever_the_order(build, order: str) -> None:
    b = build(SEED004)
    log, kl = _gpu_fault(b, key="operator")
    for key in ("operator", "reviewer") if order == "own-first" else ("reviewer", "operator"):
        log.supersede(kl, key)
    r = check(b, ON_GPU2)
    assert r["allowed"] is True, r["reasons"]
    assert any(i["entry"] == kl and i["rule"] == Rule.SUPERSEDED for i in r["ignored"])


def test_a_collectors_gpu_fault_superseded_by_an_operator_is_withdrawn(build) -> None:
    b = build(SEED004)
    log, kl = _gpu_fault(b)
    log.supersede(kl, "operator")
    assert check(b, ON_GPU2)["allowed"] is True


def test_a_rejected_supersession_of_a_gpu_fault_withdraws_nothing(build) -> None:
    b = build(SEED004)
    log, kl = _gpu_fault(b)
    s = log.supersede(kl, "operator")
    log.reject(s, "reviewer")
    r = check(b, ON_GPU2)
    assert r["allowed"] is False and "GPU2" in _reasons(r), r["reasons"]


def test_the_p2p_note_superseded_by_its_own_key_still_refuses(build) -> None:
    b = build(SEED004)
    Log(b).supersede(b.names["p2p-note"], "operator")  # the operator signed the note
    r = check(b, P2P_LAYOUT)
    assert r["allowed"] is False and "records a P2P fault" in _reasons(r), r["reasons"]
    [kept] = _kept(r, b.names["p2p-note"])
    assert kept["rule"] == Rule.SELF_SUPERSEDED


def test_the_p2p_note_superseded_by_another_key_is_withdrawn(build) -> None:
    b = build(SEED004)
    Log(b).supersede(b.names["p2p-note"], "reviewer")
    r = check(b, P2P_LAYOUT)
    assert r["allowed"] is True, r["reasons"]
    assert r["host"]["facts"]["p2p_fault"] is False


def test_a_health_503_superseded_by_its_own_key_still_refuses_the_restoration(build) -> None:
    b = build(SEED004)
    log = Log(b)
    bad = _restore_probes(log, HEALTH_503, key="operator")
    log.supersede(bad, "operator")
    r = check(b, action="restore", now=RESTORE_NOW)
    assert r["allowed"] is False and "HTTP 503" in _reasons(r), r["reasons"]
    [kept] = _kept(r, bad)
    assert kept["rule"] == Rule.SELF_SUPERSEDED


def test_a_health_503_superseded_by_another_key_is_withdrawn(build) -> None:
    b = build(SEED004)
    log = Log(b)
    bad = _restore_probes(log, HEALTH_503, key="operator")
    log.supersede(bad, "reviewer")
    assert check(b, action="restore", now=RESTORE_NOW)["allowed"] is True


def test_a_verdict_superseded_by_its_own_key_still_loses_its_credit(build) -> None:
    b = build(SEED004)
    Log(b).supersede(b.names["verdict"], "reviewer")  # the reviewer recorded the verdict
    r = check(b, ON_GPU2)
    assert r["allowed"] is False
    assert any("no trusted backend-qualification verdict" in x for x in r["reasons"]), r["reasons"]


# --- f1: a service of the routed model spelled otherwise is a service of it ---------------------------------


def _second(model: str, **more: Any) -> dict[str, Any]:
    svc = {"name": "sglang-embed-cpu", "engine": "sglang", "device": "cpu", "model": model, **more}
    return {"host": "gpu-box-1", "services": [EMBED, svc]}


@pytest.mark.parametrize(
    "spelling", ["Qwen3-Embedding-8B", "qwen3-embedding-8b", " Qwen3-Embedding-8B", "QWEN3-EMBEDDING-8B\t"]
)
def test_a_renamed_model_service_on_an_unqualified_engine_and_device_is_refused(build, spelling: str) -> None:
    b = build(SEED004)
    r = check(b, _second(spelling))
    assert r["allowed"] is False, r
    failed = {c["name"] for c in r["checks"] if c["status"] == "failed"}
    assert {"deployment-engine", "deployment-device"} <= failed, r["checks"]
    assert any("sglang-embed-cpu" in x and "not the qualified engine vllm" in x for x in r["reasons"])


def test_a_renamed_model_service_on_the_qualified_engine_and_device_is_allowed(build) -> None:
    b = build(SEED004)
    dep = {
        "host": "gpu-box-1",
        "services": [EMBED, {**EMBED, "name": "vllm-embed-2", "model": "qwen3-embedding-8b"}],
    }
    dep["services"][1]["gpu_memory_utilization"] = 0.25
    r = check(b, dep)
    assert r["allowed"] is True, r["reasons"]


@pytest.mark.parametrize("other", ["Qwen3-Embedding-4B", "Qwen3-Embedding-8B-v2", "Qwen3 Embedding 8B"])
def test_a_misspelt_model_is_another_model_and_its_service_is_not_judged_as_the_routed_one(
    build, other: str
) -> None:
    b = build(SEED004)
    r = check(b, _second(other))
    assert r["allowed"] is True, r["reasons"]


def test_a_layout_whose_only_service_spells_the_model_otherwise_serves_it(build) -> None:
    b = build(SEED004)
    r = check(b, {"host": "gpu-box-1", "services": [{**EMBED, "model": " qwen3-embedding-8b "}]})
    assert r["allowed"] is True, r["reasons"]
    r = check(b, {"host": "gpu-box-1", "services": [{**EMBED, "model": "Qwen3-Embedding-4B"}]})
    assert r["allowed"] is False
    assert any("runs no service of Qwen3-Embedding-8B" in x for x in r["reasons"]), r["reasons"]


def test_model_names_compare_through_one_normaliser() -> None:
    assert model_key(" Qwen3-Embedding-8B\t") == model_key("qwen3-embedding-8b") == "qwen3-embedding-8b"
    assert (
        model_key("") is None
        and model_key("   ") is None
        and model_key(None) is None
        and model_key(3) is None
    )
    # the verdict-shopping check's comparison is the same normaliser
    assert _same_name(" QWEN3-embedding-8B", "qwen3-Embedding-8b ")
    assert not _same_name("", "") and not _same_name(None, None)
    assert not _same_name("Qwen3-Embedding-8B", "Qwen3-Embedding-4B")


# --- the API answers as the CLI does ----------------------------------------------------------------------


def test_post_routing_check_keeps_a_rejected_or_self_superseded_failure(build) -> None:
    from fastapi.testclient import TestClient

    from ledger.api.app import create_app
    from ledger.api.settings import ApiSettings
    from ledger.tokens import create_token

    b = build(SEED004)
    log, kl = _gpu_fault(b, key="operator")
    log.reject(kl, "reviewer")
    log.supersede(b.names["p2p-note"], "operator")
    token, _ = create_token(b.ledger.engine, "test-reader", "reader")
    body = {"subject": SUBJECT, "deployment": P2P_LAYOUT, "now": format_time(NOW)}
    with TestClient(create_app(ApiSettings(home=str(b.home)), ledger=b.ledger)) as client:
        r = client.post("/v1/routing-check", json=body, headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["allowed"] is False
    assert any("GPU2" in x and "fallen off the bus" in x for x in out["reasons"]), out["reasons"]
    assert any("records a P2P fault" in x for x in out["reasons"]), out["reasons"]
    assert {i["rule"] for i in out["ignored"] if i.get("counts_against")} == {
        Rule.REJECTED_BY_ACCEPTANCE,
        Rule.SELF_SUPERSEDED,
    }
