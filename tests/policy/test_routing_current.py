"""Issue 11: the routing gate judges the ledger as it stands, not a stale recorded verdict."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from ledger.entries import parse_time
from ledger.errors import InputError
from ledger.policy.fixtures import build_fixture_ledger
from ledger.policy.loader import load_policy
from ledger.policy.routing import check_routing_change, load_deployment
from ledger.service import Ledger

SUBJECT = {"backend": "vllm", "model": "Qwen3-Embedding-8B", "host": "gpu-box-1"}
NOW = parse_time("2026-09-11T09:00:00Z")
OK = {
    "host": "gpu-box-1",
    "services": [
        {
            "engine": "vllm",
            "name": "vllm-embed",
            "model": "Qwen3-Embedding-8B",
            "gpus": [2],
            "gpu_memory_utilization": 0.25,
        },
        {
            "engine": "vllm",
            "name": "vllm-ocr",
            "model": "OvisOCR2",
            "gpus": [2],
            "gpu_memory_utilization": 0.10,
        },
    ],
}


# what a restoration needs, fresh (seed 000): /health 200, the expected identity from /v1/models, READY
RESTORATION_PROBES = [
    {"endpoint": "http://127.0.0.1:8080/health", "check": "health", "ok": True, "http_status": 200},
    {"endpoint": "http://127.0.0.1:8080/v1/models", "check": "models", "ok": True, "http_status": 200,
     "model_identity": "qwen/qwen3.8-27b"},
    {"endpoint": "http://127.0.0.1:8080/v1/chat/completions", "check": "completion", "ok": True,
     "http_status": 200, "expected": "READY", "text": "READY", "max_tokens": 8},
]  # fmt: skip


def check(b: Any, deployment: dict[str, Any] | None = None, now: Any = NOW) -> dict[str, Any]:
    return check_routing_change(
        b.ledger, load_policy("routing-change"), dict(SUBJECT), deployment=deployment, now=now
    )


def append(b: Any, kind: str, subject: dict[str, str], payload: dict[str, Any], key: str, refs=()) -> None:
    st = b.ledger.make_statement(kind, subject, payload, refs=list(refs), collected_at="2026-09-10T12:00:00Z")
    b.ledger.append([b.ledger.sign(st, key)], logged_at=parse_time("2026-09-10T12:00:00Z"))


def supersede_benchmark(b: Any) -> None:
    """The operator supersedes the campaign's benchmark (seed 004: the rerun was mislabelled)."""
    append(
        b,
        "supersession",
        {"campaign": "router-embed"},
        {"reason": "benchmark rerun was mislabelled"},
        "operator",
        [("supersedes", b.names["benchmark"])],
    )


def test_baseline_allowed(build) -> None:
    b = build("routing-change/seed004-router.toml")
    assert check(b, OK)["allowed"] is True


def test_supersession_after_recorded_qualified_refuses_at_once(build) -> None:
    b = build("routing-change/seed004-router.toml")
    supersede_benchmark(b)
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
    dep = {
        "host": "gpu-box-1",
        "services": [{"engine": "vllm", "name": "x", "gpus": [7], "gpu_memory_utilization": 0.2}],
    }
    r = check(b, dep)
    assert r["allowed"] is False
    assert any("GPU7" in x and "is not on gpu-box-1" in x for x in r["reasons"]), r["reasons"]


def test_reference_time_before_the_verdict_finds_no_verdict(build) -> None:
    """As of a time before the verdict was logged the log held none (the gate judges the log as it stood
    then, ``record_time.size_as_of``): refused, never judged on a verdict that did not exist yet."""
    b = build("routing-change/seed004-router.toml")
    r = check(b, OK, now=parse_time("2026-09-10T10:00:00Z"))
    assert r["allowed"] is False and r["verdict"] is None
    assert r["checkpoint"]["size"] < b.ledger.size()
    assert any("no trusted backend-qualification verdict recorded" in x for x in r["reasons"]), r["reasons"]
    with pytest.raises(InputError, match="holds no entry logged at or before"):
        check(b, OK, now=parse_time("2020-01-01T00:00:00Z"))


def test_missing_gpu_memory_utilization_is_the_engine_default_not_zero(build, tmp_path: Path) -> None:
    b = build("routing-change/seed004-router.toml")
    p = tmp_path / "d.toml"
    p.write_text(
        'host = "gpu-box-1"\n[[services]]\nname = "a"\nengine = "vllm"\ngpus = [2]\n'
        '[[services]]\nname = "b"\nengine = "vllm"\ngpus = [2]\ngpu_memory_utilization = 0.05\n'
    )
    dep = load_deployment(p)
    assert dep["services"][0]["gpu_memory_utilization"] == 0.9
    r = check(b, dep)
    assert r["allowed"] is False
    assert any("GPU2 gpu_memory_utilization sum 0.95" in x for x in r["reasons"]), r["reasons"]


@pytest.mark.parametrize("util", ["0.0", "0", "-0.1", "1.01", '"0.5"', "true"])
def test_a_gpu_memory_utilization_of_zero_or_out_of_range_is_an_error_not_a_free_service(
    build, tmp_path: Path, util: str
) -> None:
    """Regression: a GPU service stating gpu_memory_utilization = 0 counted 0 in its GPUs' sums, so a layout
    of 0 + 0.88 on one GPU was allowed; no engine runs reserving nothing. Zero, out of range and mistyped
    values are errors naming the key and the file."""
    p = tmp_path / "d.toml"
    p.write_text(
        'host = "gpu-box-1"\n[[services]]\nname = "a"\nengine = "vllm"\ngpus = [2]\n'
        f"gpu_memory_utilization = {util}\n"
        '[[services]]\nname = "b"\nengine = "vllm"\ngpus = [2]\ngpu_memory_utilization = 0.88\n'
    )
    with pytest.raises(InputError) as ei:
        load_deployment(p)
    assert "gpu_memory_utilization" in ei.value.message and str(p) in ei.value.message


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_a_utilisation_with_more_digits_than_a_float_keeps_is_an_error_not_rounded(
    tmp_path: Path, suffix: str
) -> None:
    """Found by an audit: 0.44 + 0.440000000000000001 on one GPU was allowed under a 0.88 bound — the file
    was read as binary floats (0.44 + 0.44) before the exact sum. A number a float cannot keep as stated is
    refused, naming it; one it keeps (0.4400000004, 5e-1, 0.50) is read as stated."""
    fine, bad = 0.4400000004, "0.440000000000000001"
    for value, ok in ((bad, False), ("0.4400000004", True), ("5e-1", True), ("0.50", True)):
        p = tmp_path / f"d{suffix}"
        if suffix == ".toml":
            p.write_text(
                f'host = "h"\n[[services]]\nname = "a"\nengine = "vllm"\ngpus = [0]\n'
                f"gpu_memory_utilization = {value}\n"
            )
        else:
            p.write_text(
                '{"host": "h", "services": [{"name": "a", "engine": "vllm", "gpus": [0], '
                '"gpu_memory_utilization": ' + value + "}]}"
            )
        if ok:
            assert load_deployment(p)["services"][0]["gpu_memory_utilization"] in (fine, 0.5)
        else:
            with pytest.raises(InputError) as ei:
                load_deployment(p)
            assert f"{bad} has more digits than can be kept exactly" in ei.value.message
            assert str(p) in ei.value.message


@pytest.mark.parametrize("bad", ["gpu_memory_utilisation", "gpu_mem_util", "GPU_MEMORY_UTILIZATION"])
def test_misspelled_deployment_key_is_an_error_naming_key_and_file(tmp_path: Path, bad: str) -> None:
    p = tmp_path / "dep.json"
    p.write_text(
        json.dumps({"host": "h", "services": [{"engine": "vllm", "name": "a", "gpus": [0], bad: 0.95}]})
    )
    with pytest.raises(InputError) as ei:
        load_deployment(p)
    assert bad in ei.value.message and str(p) in ei.value.message


def test_deployment_without_host_is_an_error(tmp_path: Path) -> None:
    p = tmp_path / "dep.json"
    p.write_text(
        json.dumps(
            {"services": [{"engine": "vllm", "name": "a", "gpus": [0], "gpu_memory_utilization": 0.5}]}
        )
    )
    with pytest.raises(InputError, match="host"):
        load_deployment(p)


def test_routing_check_record_appends_routing_change(build, cli, clock_at, tmp_path: Path) -> None:
    b = build("routing-change/seed004-router.toml")
    p = tmp_path / "ok.json"
    p.write_text(json.dumps(OK))
    args = ["check", "routing-change", "--home", str(b.home), "--now", "2026-09-11T09:00:00Z"]
    for k, v in SUBJECT.items():
        args += ["--subject", f"{k}={v}"]
    with clock_at("2026-09-11T09:00:00Z"):  # recorded at the fixture's time (the clock then)
        r = cli(*args, "--deployment", str(p), "--record", "--key", "operator", "--json")
    assert r.code == 0, r.out + r.err
    rec = json.loads(r.out)["recorded"]
    e = b.ledger.get(rec)
    assert e.kind == "routing.change"
    assert e.statement.payload["allowed"] is True
    assert e.statement.payload["deployment"]["host"] == "gpu-box-1"


CPU_ONLY = {
    "host": "gpu-box-1",
    "services": [{"engine": "vllm", "name": "vllm-embed", "model": "Qwen3-Embedding-8B", "device": "cpu"}],
}


def _dep_error(tmp_path: Path, services: list[dict[str, Any]]) -> str:
    p = tmp_path / "dep.json"
    p.write_text(json.dumps({"host": "h", "services": services}))
    with pytest.raises(InputError) as ei:
        load_deployment(p)
    return ei.value.message


def test_a_cpu_deployment_of_a_model_qualified_on_gpu_is_refused_naming_both_devices(build) -> None:
    """A CPU service takes no GPU indexes (and needs none on the host), but the campaign of the verdict
    qualified the model on a GPU (its manifest pins no CPU deployment): routing it to a CPU service would
    send traffic to a device no verdict qualified. (Before: allowed.)"""
    b = build("routing-change/seed004-router.toml")
    r = check(b, CPU_ONLY)
    assert r["allowed"] is False
    assert r["deployment_spec"]["services"][0]["device"] == "cpu"
    assert r["deployment_spec"]["services"][0]["gpus"] == []
    checks = {c["name"]: c["status"] for c in r["checks"]}
    assert checks["deployment-host"] == "passed"
    assert checks["gpu-indexes-exist"] == "passed"  # no GPU index to find: only the device is wrong
    assert checks["deployment-device"] == "failed"
    assert r["reasons"] == [
        "service vllm-embed serves Qwen3-Embedding-8B on device cpu, but the verdict's campaign qualified it "
        "on device gpu: the change would route traffic to a device no verdict qualified"
    ]


def test_a_gpu_deployment_on_a_host_without_gpus_fails_closed(build) -> None:
    b = build("routing-change/seed004-router.toml")
    append(
        b,
        "host.probe",
        {"host": "gpu-box-1"},
        {"hostname": "gpu-box-1", "os": "linux", "kernel": "6.8", "gpus": []},
        "collector",
    )
    r = check(b, CPU_ONLY)  # the CPU service needs no GPU: only its device is not the one qualified
    assert {c["name"] for c in r["checks"] if c["status"] == "failed"} == {"deployment-device"}
    dep = {
        "host": "gpu-box-1",
        "services": [
            {"engine": "vllm", "name": "x", "model": "Qwen3-Embedding-8B", "device": "gpu", "gpus": [0]}
        ],
    }
    r = check(b, dep)
    assert r["allowed"] is False
    assert any("GPU0" in x and "no GPU" in x for x in r["reasons"]), r["reasons"]


def test_a_service_with_neither_device_nor_gpus_is_an_error_naming_device(tmp_path: Path) -> None:
    msg = _dep_error(tmp_path, [{"name": "a", "engine": "vllm"}])
    assert "device" in msg and "services[0] (a)" in msg


def test_device_gpu_without_gpu_indexes_is_an_error(tmp_path: Path) -> None:
    for services in (
        [{"engine": "vllm", "name": "a", "device": "gpu"}],
        [{"engine": "vllm", "name": "a", "device": "gpu", "gpus": []}],
    ):
        assert "needs its gpus" in _dep_error(tmp_path, services)


@pytest.mark.parametrize("word", ["GPU", "cuda", "tpu", ""])
def test_an_unknown_device_word_is_an_error(tmp_path: Path, word: str) -> None:
    msg = _dep_error(tmp_path, [{"engine": "vllm", "name": "a", "device": word, "gpus": [0]}])
    assert "services.0.device" in msg and "'gpu' or 'cpu'" in msg


def test_a_cpu_service_takes_no_gpus_and_no_gpu_memory_utilization(tmp_path: Path) -> None:
    assert "takes no gpus" in _dep_error(
        tmp_path, [{"engine": "vllm", "name": "a", "device": "cpu", "gpus": [0]}]
    )
    msg = _dep_error(
        tmp_path, [{"engine": "vllm", "name": "a", "device": "cpu", "gpu_memory_utilization": 0.5}]
    )
    assert "takes no gpu_memory_utilization" in msg


def test_a_service_listing_gpus_without_device_is_a_gpu_service(tmp_path: Path) -> None:
    p = tmp_path / "dep.json"
    p.write_text(json.dumps({"host": "h", "services": [{"engine": "vllm", "name": "a", "gpus": [1]}]}))
    assert load_deployment(p)["services"][0]["device"] == "gpu"


def test_the_demo_deployment_file_is_a_cpu_service_on_the_demo_campaigns_host() -> None:
    from ledger.collectors.campaign import load_campaign

    repo = Path(__file__).resolve().parents[2]
    dep = load_deployment(repo / "campaigns" / "deployments" / "llamacpp-cpu-trained.toml")
    assert [s["device"] for s in dep["services"]] == ["cpu"]
    assert [s["gpus"] for s in dep["services"]] == [[]]
    campaign = load_campaign(repo / "campaigns" / "llamacpp-cpu-trained.toml")
    assert campaign.spec.campaign.host == dep["host"]
    assert (
        'DEPLOYMENT="$REPO/campaigns/deployments/$TRAINED.toml"' in (repo / "scripts" / "demo.sh").read_text()
    )


def test_a_deployment_naming_a_service_twice_is_an_error(tmp_path: Path) -> None:
    """Regression: a service copied into the deployment twice was accepted (and its GPU memory counted
    twice, or a typo for another service hidden)."""
    dep = {"host": "gpu-box-1", "services": [OK["services"][0], dict(OK["services"][0])]}
    path = tmp_path / "dep.json"
    path.write_text(json.dumps(dep))
    with pytest.raises(
        InputError, match=r"services\[1\] \(vllm-embed\): name 'vllm-embed' is already services\[0\]"
    ):
        load_deployment(path)


def test_a_service_listing_a_gpu_twice_is_an_error(tmp_path: Path) -> None:
    dep = {
        "host": "gpu-box-1",
        "services": [{"engine": "vllm", "name": "a", "gpus": [2, 2], "gpu_memory_utilization": 0.2}],
    }
    path = tmp_path / "dep.json"
    path.write_text(json.dumps(dep))
    with pytest.raises(InputError, match=r"gpus \[2, 2\] lists a GPU more than once"):
        load_deployment(path)


def _latest_supersession(b: Any) -> str:
    return str(b.ledger.query(kind="supersession", limit=None)[-1].entry_id)


def _supersede(b: Any, target: str, reason: str) -> None:
    append(
        b,
        "supersession",
        {"campaign": "router-embed"},
        {"reason": reason},
        "operator",
        [("supersedes", target)],
    )


def test_a_withdrawn_supersession_no_longer_refuses_the_routing_change(build) -> None:
    """The routing gate decides supersessions as the verdict does: one superseded in turn is withdrawn,
    so withdrawing a mistaken supersession of the recorded verdict allows the change again, and
    withdrawing the withdrawal refuses it once more."""
    b = build("routing-change/seed004-router.toml")
    _supersede(b, b.names["verdict"], "mislabelled")
    assert check(b, OK)["allowed"] is False
    _supersede(b, _latest_supersession(b), "recorded in error")
    assert check(b, OK)["allowed"] is True
    _supersede(b, _latest_supersession(b), "the first was right")
    assert check(b, OK)["allowed"] is False


def _decide(b: Any, decision: str) -> None:
    payload = {"decision": decision, "reason": decision}
    append(
        b, "acceptance", {"campaign": "router-embed"}, payload, "operator", [("subject", b.names["verdict"])]
    )


def test_a_later_acceptance_lifts_an_earlier_rejection_for_the_routing_gate_as_for_the_verdict(build) -> None:
    b = build("routing-change/seed004-router.toml")
    _decide(b, "rejected")
    assert check(b, OK)["allowed"] is False
    _decide(b, "accepted")
    assert check(b, OK)["allowed"] is True


def test_a_restoration_probe_claiming_a_later_time_than_its_log_time_is_as_old_as_the_log_says(build) -> None:
    """Regression: the restore check aged probes by their own collected_at, so probes logged a day before
    the check, each claiming to be collected a minute before it, restored the backend. Their age is taken
    from the observed time — collected_at, never after the log took them — as the verdict's freshness is."""
    b = build("routing-change/seed000-restoration.toml")
    subject = {"backend": "llama.cpp", "model": "qwen/qwen3.8-27b", "host": "hiro-5"}
    probes = RESTORATION_PROBES

    def restore_at(claimed: str, now: str) -> dict[str, Any]:
        for p in probes:
            st = b.ledger.make_statement("health.probe", subject, p, collected_at=claimed)
            b.ledger.append([b.ledger.sign(st, "collector")], logged_at=parse_time("2026-09-01T18:01:00Z"))
        return check_routing_change(
            b.ledger, load_policy("routing-change"), dict(subject), action="restore", now=parse_time(now)
        )

    got = restore_at("2026-09-02T18:04:00Z", "2026-09-02T18:05:00Z")
    assert got["allowed"] is False, got
    assert any("no fresh /health 200" in r for r in got["reasons"]), got["reasons"]


def test_a_superseded_rejection_says_nothing_to_the_routing_gate(build) -> None:
    b = build("routing-change/seed004-router.toml")
    _decide(b, "rejected")
    assert check(b, OK)["allowed"] is False
    rejection = str(b.ledger.query(kind="acceptance", limit=None)[-1].entry_id)
    _supersede(b, rejection, "the hold was lifted")
    assert check(b, OK)["allowed"] is True


@pytest.mark.parametrize(
    "models",
    [
        None,  # no /v1/models probe: only the completion, which records the model it asked for
        {"ok": False, "http_status": 500},
        {"ok": True},  # success claimed with no status: what answered is not on the record
        # the identity rides on another check (a READY completion, bounded: it passes as a completion)
        {"ok": True, "http_status": 200, "check": "completion", "text": "READY", "max_tokens": 8},
    ],
    ids=["no-models-probe", "models-probe-failed", "models-probe-without-status", "identity-on-a-completion"],
)
def test_restoration_identity_needs_a_successful_models_answer(build, models: dict[str, Any] | None) -> None:
    """Regression: restoration-identity read `model_identity` from any probe, so a completion (which
    records the model it asked for; llama.cpp answers whatever name is asked) or a failed /v1/models
    probe vouched for the served model."""
    b = build("routing-change/seed000-restoration.toml")
    subject = {"backend": "llama.cpp", "model": "qwen/qwen3.8-27b", "host": "hiro-9"}
    probes: list[dict[str, Any]] = [
        {"endpoint": "http://127.0.0.1:8080/health", "check": "health", "ok": True, "http_status": 200},
        {"endpoint": "http://127.0.0.1:8080/v1/chat/completions", "check": "completion", "ok": True,
         "http_status": 200, "text": "READY", "max_tokens": 8, "model_identity": "qwen/qwen3.8-27b"},
    ]  # fmt: skip
    if models is not None:
        probes.append(
            {"endpoint": "http://127.0.0.1:8080/v1/models", "check": "models",
             "model_identity": "qwen/qwen3.8-27b", **models}
        )  # fmt: skip
    for p in probes:
        st = b.ledger.make_statement("health.probe", subject, p, collected_at="2026-09-01T18:01:00Z")
        b.ledger.append([b.ledger.sign(st, "collector")], logged_at=parse_time("2026-09-01T18:01:01Z"))

    def restore() -> dict[str, Any]:
        return check_routing_change(
            b.ledger, load_policy("routing-change"), dict(subject), action="restore",
            now=parse_time("2026-09-01T18:05:00Z"),
        )  # fmt: skip

    got = restore()
    assert got["allowed"] is False, got
    assert any("no fresh /v1/models answer served the expected" in r for r in got["reasons"]), got["reasons"]
    good = {"endpoint": "http://127.0.0.1:8080/v1/models", "check": "models", "ok": True, "http_status": 200,
            "model_identity": "qwen/qwen3.8-27b"}  # fmt: skip
    st = b.ledger.make_statement("health.probe", subject, good, collected_at="2026-09-01T18:01:02Z")
    b.ledger.append([b.ledger.sign(st, "collector")], logged_at=parse_time("2026-09-01T18:01:03Z"))
    assert restore()["allowed"] is True


@pytest.mark.parametrize("reader", ["service", "sqlite-reader"])
def test_restoration_probes_at_the_age_bound_are_found_by_the_prefiltered_read(build, reader: str) -> None:
    """The routing gate reads only the probes the log took no earlier than the age bound (a long campaign's
    old probes are neither read nor hashed): a probe exactly as old as the bound still counts, one a
    microsecond older does not, and one collected long ago but logged now (spooled) is as old as it was
    collected — as when every probe was read and the age test alone decided."""
    from ledger.home import Home
    from ledger.reads import SqlitePolicyLedger

    b = build("routing-change/seed000-restoration.toml")
    subject = {"backend": "llama.cpp", "model": "qwen/qwen3.8-27b", "host": "hiro-7"}
    probes = RESTORATION_PROBES
    old = {"endpoint": "http://127.0.0.1:8080/health", "check": "health", "ok": True, "http_status": 200}
    for i in range(50):  # the campaign's history: probes of days before, never read by the check
        st = b.ledger.make_statement("health.probe", subject, old, collected_at="2026-09-01T18:01:00Z")
        b.ledger.append([b.ledger.sign(st, "collector")], logged_at=parse_time(f"2026-09-01T18:01:{i:02d}Z"))
    for p in probes:
        st = b.ledger.make_statement("health.probe", subject, p, collected_at="2026-09-01T20:00:00.250000Z")
        b.ledger.append([b.ledger.sign(st, "collector")], logged_at=parse_time("2026-09-01T20:00:00.250000Z"))
    fast = SqlitePolicyLedger.open(Home(b.home)) if reader == "sqlite-reader" else None
    led = fast if fast is not None else b.ledger

    def restore(now: str) -> dict[str, Any]:
        return check_routing_change(
            led, load_policy("routing-change"), dict(subject), action="restore", now=parse_time(now)
        )

    try:
        at_bound = restore("2026-09-01T21:00:00.250000Z")  # exactly the policy's 1 h
        assert at_bound["allowed"] is True, at_bound
        assert len(at_bound["probes"]) == 3
        past = restore("2026-09-01T21:00:00.250001Z")
        assert past["allowed"] is False and past["probes"] == [], past
        # spooled: collected a day before the check, logged a minute before it
        for p in probes:
            st = b.ledger.make_statement("health.probe", subject, p, collected_at="2026-09-02T18:00:00Z")
            b.ledger.append([b.ledger.sign(st, "collector")], logged_at=parse_time("2026-09-03T17:59:00Z"))
        spooled = restore("2026-09-03T18:00:00Z")
        assert spooled["allowed"] is False and spooled["probes"] == [], spooled
    finally:
        if fast is not None:
            fast.close()


def test_a_verdict_entry_naming_another_model_than_it_evaluated_does_not_qualify_that_model(build) -> None:
    """Regression: the routing check finds a verdict by the subject its entry names, then re-derives the
    subject its payload evaluated — and never compared the two. A verdict entry naming OvisOCR2 whose
    payload evaluated the embedding campaign (QUALIFIED) let OvisOCR2 be routed. The re-derived verdict
    must judge every requested field."""
    b = build("routing-change/seed004-router.toml")
    entry = b.ledger.get(b.names["verdict"])
    real, listed = entry.statement.payload, entry.statement.artifacts
    named = {"backend": "vllm", "model": "OvisOCR2", "host": "gpu-box-1", "campaign": "router-embed"}
    # the forged entry lists the real verdict's result artifact (a verdict's result is one of its own
    # artifacts since fix 120)
    st = b.ledger.make_statement(
        "verdict", named, dict(real), artifacts=list(listed), collected_at="2026-09-10T12:00:00Z"
    )
    b.ledger.append([b.ledger.sign(st, "reviewer")], logged_at=parse_time("2026-09-10T12:00:00Z"))
    ocr = {"backend": "vllm", "model": "OvisOCR2", "host": "gpu-box-1"}
    r = check_routing_change(b.ledger, load_policy("routing-change"), ocr, deployment=OK, now=NOW)
    assert r["allowed"] is False
    assert any("model=Qwen3-Embedding-8B, not OvisOCR2" in x for x in r["reasons"]), r["reasons"]
    assert check(b, OK)["allowed"] is True  # the neighbour: the model it evaluated is still routed


def test_a_route_that_names_no_backend_is_an_error_not_any_backends_verdict(build) -> None:
    """Regression: a route naming only model and host was judged on the latest QUALIFIED verdict of any
    backend for them (vllm's verdict routed a llama.cpp deployment). A route names its backend; a
    restoration (seed 000) names the model and host it restores."""
    b = build("routing-change/seed004-router.toml")
    no_backend = {k: v for k, v in SUBJECT.items() if k != "backend"}
    with pytest.raises(InputError, match="names its backend"):
        check_routing_change(b.ledger, load_policy("routing-change"), no_backend, deployment=OK, now=NOW)
    restore = check_routing_change(
        b.ledger, load_policy("routing-change"), no_backend, action="restore", deployment=OK, now=NOW
    )
    assert "allowed" in restore  # judged, not refused as input


def test_a_route_with_no_known_layout_is_not_allowed(build) -> None:
    """Regression: with no --deployment and no earlier allowed routing.change that recorded one, every GPU
    check was not applicable and the route was allowed on the verdict alone. Without a layout the GPU
    checks cannot be judged: refused, saying so; the same route with the layout is allowed."""
    b = build("routing-change/seed004-router.toml")
    r = check(b, None)
    assert r["allowed"] is False
    assert {c["name"]: c["status"] for c in r["checks"]}["deployment-known"] == "failed"
    assert any("no deployment layout for gpu-box-1" in x for x in r["reasons"]), r["reasons"]
    assert check(b, OK)["allowed"] is True


@pytest.mark.parametrize(
    ("engine", "allowed"),
    [
        pytest.param({"engine": "vllm"}, True, id="the-qualified-engine"),
        pytest.param({}, True, id="left-out-is-vllm"),
        pytest.param({"engine": "llamacpp"}, False, id="another-engine"),
        pytest.param({"engine": "sglang"}, False, id="sglang"),
        # engine names compare with case and surrounding whitespace aside (routing.engine_key): one engine
        pytest.param({"engine": "vLLM"}, True, id="another-case-is-the-same-engine"),
        pytest.param({"engine": "vllm-openai"}, False, id="another-spelling-not-mapped"),
    ],
)
def test_a_route_to_a_service_of_another_engine_than_the_qualified_backend_is_refused(
    build, engine: dict[str, str], allowed: bool
) -> None:
    """Regression: the deployment's engine was never compared with the qualified backend, so a route of a
    model qualified on vLLM was allowed onto a layout that serves it with llama.cpp. The service that
    serves the route's model runs the backend's engine (by the policy's engine_names); a service of another
    model is not asked."""
    b = build("routing-change/seed004-router.toml")
    embed, ocr = (dict(s) for s in OK["services"])
    ocr["engine"] = "sglang"  # another model's service: not the route's
    r = check(b, {"host": "gpu-box-1", "services": [{**embed, **engine}, ocr]})
    assert r["allowed"] is allowed, r["reasons"]
    assert any("not the qualified engine vllm" in x for x in r["reasons"]) is not allowed, r["reasons"]


def test_an_engine_spelling_maps_to_the_backend_by_the_policys_engine_names(build, tmp_path: Path) -> None:
    """The neighbour: one engine under another spelling (seed 000 writes "llama.cpp" for "llamacpp") is the
    same engine where the qualification's engine_names maps it; that map is the one copy (the routing
    policy states none: fix 107)."""
    b = build("routing-change/seed004-router.toml")
    qual = load_policy("backend-qualification")
    assert qual.spec.params["engine_names"]["llama.cpp"] == "llamacpp"
    assert "engine_names" not in load_policy("routing-change").params
    dep = {**OK, "services": [{**OK["services"][0], "engine": "vllm-openai"}]}
    assert check(b, dep)["allowed"] is False
    text = qual.data.decode().replace("engine_names = { ", 'engine_names = { "vllm-openai" = "vllm", ')
    assert text != qual.data.decode()
    (tmp_path / "backend-qualification.toml").write_text(text)
    (tmp_path / "routing-change.toml").write_bytes(load_policy("routing-change").data)
    (tmp_path / "evidence-acceptance.toml").write_bytes(load_policy("evidence-acceptance").data)
    mapped = load_policy("routing-change", tmp_path)
    r = check_routing_change(b.ledger, mapped, dict(SUBJECT), deployment=dep, now=NOW)
    assert r["allowed"] is True, r["reasons"]


def test_the_qualified_engine_is_the_one_the_approved_spec_binds_not_the_backend_label(
    tmp_path: Path,
) -> None:
    """Regression: the deployment's engine was compared with the route's ``backend``, a label the campaign
    sets: a llama.cpp run labelled ``vllm`` was routed onto a vLLM service. The engine a route's traffic
    must reach is the one the re-derived verdict's approved spec binds (its credited launches ran it)."""
    src = Path(__file__).resolve().parents[2] / "policies"
    fixtures = tmp_path / "fixtures"
    shutil.copytree(src / "fixtures", fixtures)
    shared = fixtures / "_shared" / "ready-campaign.toml"
    text = shared.read_text()
    assert text.count('engine = "vllm"') == 3  # the spec's binding, the launch's engine and its binding
    shared.write_text(text.replace('engine = "vllm"', 'engine = "llamacpp"'))
    ledger, _spec, _builder = build_fixture_ledger(
        fixtures / "routing-change" / "seed004-router.toml", tmp_path / "home", src, init=Ledger.init
    )
    policy = load_policy("routing-change")
    subject = dict(SUBJECT)  # backend "vllm": the label the campaign gave its llama.cpp run
    served = {**OK["services"][0]}
    # fix 95: the verdict itself compares the label with the engine the spec binds — a llama.cpp run
    # labelled vllm is no QUALIFIED campaign (engine-contradicted), so no route stands on it, whichever
    # engine the service runs
    for engine in ("vllm", "llamacpp", "llama.cpp"):
        dep = {**OK, "services": [{**served, "engine": engine}]}
        r = check_routing_change(ledger, policy, dict(subject), deployment=dep, now=NOW)
        assert r["allowed"] is False, (engine, r["reasons"])
        assert any("is INCONCLUSIVE" in x for x in r["reasons"]), (engine, r["reasons"])
    refused = check_routing_change(
        ledger, policy, dict(subject), deployment={**OK, "services": [served]}, now=NOW
    )
    assert any("the engine the campaign's approved spec binds" in x for x in refused["reasons"]), refused


def test_the_routing_context_is_exactly_the_names_the_loader_lets_cel_read(build, monkeypatch) -> None:
    """One vocabulary: the names a routing check's CEL may read (the loader's ``ROUTING_NAMES``, checked when
    the policy loads) are what the gate builds; when the two drift, the gate refuses to judge."""
    import ledger.policy.routing as routing
    from ledger.errors import PolicyError
    from ledger.policy.loader import ROUTING_NAMES

    b = build("routing-change/seed004-router.toml")
    assert check(b, OK)["allowed"] is True
    monkeypatch.setattr(routing, "ROUTING_NAMES", ROUTING_NAMES | {"renamed_variable"})
    with pytest.raises(PolicyError, match="renamed_variable"):
        check(b, OK)
