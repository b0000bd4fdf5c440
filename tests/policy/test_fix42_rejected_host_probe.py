"""Issue 11 (fix 42): a newest host probe that no longer lists a GPU the route uses is evidence against it.

Before, a reviewer's rejection of that probe (or its own signer's supersession) dropped it from the routing
gate's host probes, and an older probe that still listed the GPU stood: the route was allowed. The gate now
reads such a probe as the failure it shows (``usable``'s ``shows_failure``, the rule the verdict keeps
``counts_against`` by): a rejection or the signer's own supersession withholds its credit only; a withdrawal
(another key's supersession, with its reason) drops it.
"""

from __future__ import annotations

from typing import Any

from ledger.entries import parse_time
from ledger.policy.loader import load_policy
from ledger.policy.routing import check_routing_change

SUBJECT = {"backend": "vllm", "model": "Qwen3-Embedding-8B", "host": "gpu-box-1"}
NOW = parse_time("2026-09-11T09:00:00Z")
ON_GPU2 = {
    "host": "gpu-box-1",
    "services": [
        {
            "engine": "vllm",
            "name": "vllm-embed",
            "model": "Qwen3-Embedding-8B",
            "gpus": [2],
            "gpu_memory_utilization": 0.25,
        }
    ],
}
GPU01 = [{"index": 0, "name": "NVIDIA H100"}, {"index": 1, "name": "NVIDIA H100"}]
GPU012 = [*GPU01, {"index": 2, "name": "NVIDIA H100"}]
GPU2_BY_UUID = [*GPU01, {"uuid": "GPU-2222", "name": "NVIDIA H100"}]


def check(b: Any) -> dict[str, Any]:
    return check_routing_change(
        b.ledger, load_policy("routing-change"), dict(SUBJECT), deployment=ON_GPU2, now=NOW
    )


def append(
    b: Any, kind: str, subject: dict[str, str], payload: dict[str, Any], key: str, refs=(), at="12:00"
) -> str:
    when = f"2026-09-10T{at}:00Z"
    st = b.ledger.make_statement(kind, subject, payload, refs=list(refs), collected_at=when)
    b.ledger.append([b.ledger.sign(st, key)], logged_at=parse_time(when))
    return str(b.ledger.query(kind=kind, limit=None)[-1].entry_id)


def probe(
    b: Any, gpus: list[dict[str, Any]], at: str = "12:00", key: str = "collector", hostname: str = "gpu-box-1"
) -> str:
    payload = {"hostname": hostname, "os": "Ubuntu 24.04", "kernel": "6.8.0", "gpus": gpus}
    return append(b, "host.probe", {"host": "gpu-box-1"}, payload, key, at=at)


def reject(b: Any, target: str) -> None:
    payload = {"decision": "rejected", "reason": "probe taken during maintenance"}
    append(b, "acceptance", {"host": "gpu-box-1"}, payload, "operator", [("subject", target)], at="12:30")


def supersede(b: Any, target: str, key: str) -> None:
    payload = {"reason": "probe of the wrong box"}
    append(b, "supersession", {"host": "gpu-box-1"}, payload, key, [("supersedes", target)], at="12:30")


def gpu_reasons(r: dict[str, Any]) -> list[str]:
    return [x for x in r["reasons"] if x.startswith("GPU2 ") and "is not on gpu-box-1" in x]


def test_the_fixture_allows_gpu2_and_a_newest_probe_without_it_refuses(build) -> None:
    b = build("routing-change/seed004-router.toml")
    assert check(b)["allowed"] is True
    probe(b, GPU01)
    r = check(b)
    assert r["allowed"] is False and gpu_reasons(r), r["reasons"]


def test_rejected_newest_host_probe_does_not_let_older_gpu_list_stand(build) -> None:
    b = build("routing-change/seed004-router.toml")
    newest = probe(b, GPU01)
    reject(b, newest)
    r = check(b)
    assert r["allowed"] is False, r["reasons"]
    (reason,) = gpu_reasons(r)
    assert f"host probe {newest[:16]}" in reason and "rejected by acceptance" in reason, reason
    assert any(i["entry"] == newest and i.get("counts_against") for i in r["ignored"]), r["ignored"]


def test_newest_host_probe_superseded_by_its_own_signer_still_refuses(build) -> None:
    b = build("routing-change/seed004-router.toml")
    newest = probe(b, GPU01, key="operator")  # a collector key may not supersede: an operator probed by hand
    supersede(b, newest, "operator")
    r = check(b)
    assert r["allowed"] is False, r["reasons"]
    (reason,) = gpu_reasons(r)
    assert f"host probe {newest[:16]}" in reason and "signed by the key that signed it" in reason, reason


def test_newest_host_probe_withdrawn_by_another_key_lets_the_older_probe_stand(build) -> None:
    b = build("routing-change/seed004-router.toml")
    newest = probe(b, GPU01, key="operator")
    supersede(b, newest, "reviewer")
    r = check(b)
    assert r["allowed"] is True, r["reasons"]
    assert not any(i["entry"] == newest and i.get("counts_against") for i in r["ignored"]), r["ignored"]


def test_rejected_newest_probe_listing_the_gpu_by_uuid_only_refuses(build) -> None:
    """GPU2 listed without its index: which GPU it is cannot be told, so it does not show GPU2 there."""
    b = build("routing-change/seed004-router.toml")
    newest = probe(b, GPU2_BY_UUID)
    reject(b, newest)
    r = check(b)
    assert r["allowed"] is False, r["reasons"]
    assert any("lists a GPU without its index" in x and newest[:16] in x for x in r["reasons"]), r["reasons"]


def test_rejected_newest_probe_that_lists_every_used_gpu_is_only_not_credited(build) -> None:
    """A rejection of a probe that shows no GPU gone withholds its credit: the older probe stands."""
    b = build("routing-change/seed004-router.toml")
    newest = probe(b, GPU012)
    reject(b, newest)
    r = check(b)
    assert r["allowed"] is True, r["reasons"]
    assert any(i["entry"] == newest and not i.get("counts_against") for i in r["ignored"]), r["ignored"]


def test_rejected_probe_tied_in_observed_time_with_one_listing_the_gpu_refuses(build) -> None:
    """Two probes observed at the same time: which was seen last cannot be told, so each must list GPU2."""
    b = build("routing-change/seed004-router.toml")
    without = probe(b, GPU01, at="12:00")
    probe(b, GPU012, at="12:00")
    reject(b, without)
    r = check(b)
    assert r["allowed"] is False, r["reasons"]
    (reason,) = gpu_reasons(r)
    assert f"host probe {without[:16]}" in reason, reason


def test_rejected_older_probe_without_the_gpu_under_a_newer_one_listing_it_is_allowed(build) -> None:
    b = build("routing-change/seed004-router.toml")
    older = probe(b, GPU01, at="11:30")
    probe(b, GPU012, at="12:00")
    reject(b, older)
    assert check(b)["allowed"] is True


def test_newest_host_probe_of_a_revoked_signer_is_withdrawn_and_the_older_probe_stands(build) -> None:
    """A signer not trusted at the probe's time withdraws it: it is no evidence of the host at all."""
    from ledger.signing import SigningKey

    b = build("routing-change/seed004-router.toml")
    newest = probe(b, GPU01, key="operator")
    key = SigningKey.load("operator", b.ledger.home.key_path("operator"))
    revoke = {"key_id": key.key_id, "effective_at": "2026-09-10T11:45:00Z", "reason": "leaked"}
    append(b, "key.revoke", {"key": "operator"}, revoke, b.ledger.cfg.admin_key, at="12:30")
    r = check(b)
    assert not gpu_reasons(r), r["reasons"]
    assert not any(i["entry"] == newest and i.get("counts_against") for i in r["ignored"]), r["ignored"]


def test_rejected_newest_probe_of_another_machine_is_not_read_as_the_hosts_gpus_gone(build) -> None:
    """The campaign's job ran on gpu-box-1: a probe of another machine filed under the host shows that
    machine's GPUs, so its rejection keeps nothing against this one (nor is it listed as counting against)."""
    b = build("routing-change/seed004-router.toml")
    other = probe(b, GPU01, hostname="gpu-box-9")
    reject(b, other)
    r = check(b)
    assert r["verdict"]["current"]["machine"] == "gpu-box-1"
    assert r["allowed"] is True, r["reasons"]
    assert not any(i["entry"] == other and i.get("counts_against") for i in r["ignored"]), r["ignored"]
