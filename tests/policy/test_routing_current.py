"""Issue 11: the routing gate judges the ledger as it stands, not a stale recorded verdict."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ledger.entries import parse_time
from ledger.errors import InputError
from ledger.policy.loader import load_policy
from ledger.policy.routing import check_routing_change, load_deployment

SUBJECT = {"backend": "vllm", "model": "Qwen3-Embedding-8B", "host": "gpu-box-1"}
NOW = parse_time("2026-09-11T09:00:00Z")
OK = {
    "host": "gpu-box-1",
    "services": [
        {"name": "vllm-embed", "gpus": [2], "gpu_memory_utilization": 0.25},
        {"name": "vllm-ocr", "gpus": [2], "gpu_memory_utilization": 0.10},
    ],
}


def check(b: Any, deployment: dict[str, Any] | None = None, now: Any = NOW) -> dict[str, Any]:
    return check_routing_change(
        b.ledger, load_policy("routing-change"), dict(SUBJECT), deployment=deployment, now=now
    )


def append(b: Any, kind: str, subject: dict[str, str], payload: dict[str, Any], key: str, refs=()) -> None:
    st = b.ledger.make_statement(kind, subject, payload, refs=list(refs), collected_at="2026-09-10T12:00:00Z")
    b.ledger.append([b.ledger.sign(st, key)], logged_at=parse_time("2026-09-10T12:00:00Z"))


def test_baseline_allowed(build) -> None:
    b = build("routing-change/seed004-router.toml")
    assert check(b, OK)["allowed"] is True


def test_supersession_after_recorded_qualified_refuses_at_once(build) -> None:
    b = build("routing-change/seed004-router.toml")
    append(
        b,
        "supersession",
        {"campaign": "router-embed"},
        {"reason": "benchmark rerun was mislabelled"},
        "operator",
        [("supersedes", b.names["benchmark"])],
    )
    r = check(b, OK)
    assert r["allowed"] is False
    assert any("no longer holds" in x and "INCONCLUSIVE" in x for x in r["reasons"]), r["reasons"]


def test_revoked_collector_key_after_recorded_qualified_refuses_at_once(build) -> None:
    b = build("routing-change/seed004-router.toml")
    from ledger.signing import SigningKey

    key = SigningKey.load("collector", b.ledger.home.key_path("collector"))
    st = b.ledger.make_statement(
        "key.revoke",
        {"key": "collector"},
        {"key_id": key.key_id, "effective_at": "2026-09-10T09:30:00Z", "reason": "leaked"},
        collected_at="2026-09-10T12:00:00Z",
    )
    b.ledger.append([b.ledger.sign(st, b.ledger.cfg.admin_key)], logged_at=parse_time("2026-09-10T12:00:00Z"))
    r = check(b, OK)
    assert r["allowed"] is False
    assert any("no longer holds" in x for x in r["reasons"]), r["reasons"]


def test_deployment_host_must_match_subject_host(build) -> None:
    b = build("routing-change/seed004-router.toml")
    r = check(b, {**OK, "host": "gpu-box-2"})
    assert r["allowed"] is False
    assert any("for host gpu-box-2, not gpu-box-1" in x for x in r["reasons"])


def test_gpu_index_not_on_host_probe_refuses(build) -> None:
    b = build("routing-change/seed004-router.toml")
    dep = {"host": "gpu-box-1", "services": [{"name": "x", "gpus": [7], "gpu_memory_utilization": 0.2}]}
    r = check(b, dep)
    assert r["allowed"] is False
    assert any("GPU7" in x and "is not on gpu-box-1" in x for x in r["reasons"]), r["reasons"]


def test_reference_time_before_the_verdict_is_an_error(build) -> None:
    b = build("routing-change/seed004-router.toml")
    with pytest.raises(InputError, match="before the verdict"):
        check(b, OK, now=parse_time("2026-09-10T10:00:00Z"))


def test_missing_gpu_memory_utilization_is_the_engine_default_not_zero(build, tmp_path: Path) -> None:
    b = build("routing-change/seed004-router.toml")
    p = tmp_path / "d.toml"
    p.write_text(
        'host = "gpu-box-1"\n[[services]]\nname = "a"\ngpus = [2]\n'
        '[[services]]\nname = "b"\ngpus = [2]\ngpu_memory_utilization = 0.05\n'
    )
    dep = load_deployment(p)
    assert dep["services"][0]["gpu_memory_utilization"] == 0.9
    r = check(b, dep)
    assert r["allowed"] is False
    assert any("GPU2 gpu_memory_utilization sum 0.95" in x for x in r["reasons"]), r["reasons"]


@pytest.mark.parametrize("bad", ["gpu_memory_utilisation", "gpu_mem_util", "GPU_MEMORY_UTILIZATION"])
def test_misspelled_deployment_key_is_an_error_naming_key_and_file(tmp_path: Path, bad: str) -> None:
    p = tmp_path / "dep.json"
    p.write_text(json.dumps({"host": "h", "services": [{"name": "a", "gpus": [0], bad: 0.95}]}))
    with pytest.raises(InputError) as ei:
        load_deployment(p)
    assert bad in ei.value.message and str(p) in ei.value.message


def test_deployment_without_host_is_an_error(tmp_path: Path) -> None:
    p = tmp_path / "dep.json"
    p.write_text(json.dumps({"services": [{"name": "a", "gpus": [0], "gpu_memory_utilization": 0.5}]}))
    with pytest.raises(InputError, match="host"):
        load_deployment(p)


def test_routing_check_record_appends_routing_change(build, cli, tmp_path: Path) -> None:
    b = build("routing-change/seed004-router.toml")
    p = tmp_path / "ok.json"
    p.write_text(json.dumps(OK))
    args = ["check", "routing-change", "--home", str(b.home), "--now", "2026-09-11T09:00:00Z"]
    for k, v in SUBJECT.items():
        args += ["--subject", f"{k}={v}"]
    r = cli(*args, "--deployment", str(p), "--record", "--key", "operator", "--json")
    assert r.code == 0, r.out + r.err
    rec = json.loads(r.out)["recorded"]
    e = b.ledger.get(rec)
    assert e.kind == "routing.change"
    assert e.statement.payload["allowed"] is True
    assert e.statement.payload["deployment"]["host"] == "gpu-box-1"
