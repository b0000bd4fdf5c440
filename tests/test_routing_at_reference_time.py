"""Audit of `ledger check routing-change` / `ledger verdict --record`: judged at the check's reference time.

Each test is named after the failure it holds fixed. The routing fixtures (seed 004, a GPU campaign QUALIFIED
and recorded at 2026-09-10T11:00Z, host probe collected 10:00:05Z) and the QUALIFIED neighbour campaign come
from the existing tests, imported."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import tests.policy.conftest as policy_conftest
from ledger.entries import parse_time
from ledger.errors import InputError
from ledger.policy.fixtures import _Builder
from ledger.policy.loader import load_policy
from ledger.policy.routing import check_routing_change, host_key, load_deployment
from ledger.policy.verdict import evaluate
from ledger.service import Ledger
from tests.policy.conftest import POLICY_DIR
from tests.policy.test_fail_closed import KEYS, entry, qualified_entries
from tests.policy.test_fail_closed import SUBJECT as CAMPAIGN
from tests.policy.test_routing_current import CPU_ONLY, OK, SUBJECT, append, check

build = policy_conftest.build  # the policy tests' fixture: a ledger built from a policy fixture file
SEED004 = "routing-change/seed004-router.toml"
# the seed's host probe was collected 2026-09-10T10:00:05Z; host.probe freshness is 7d (168 h)
PROBE_168_6H_OLD = parse_time("2026-09-17T10:36:05Z")  # and the verdict (11:00) is 167.6 h old: current


def _args(b: Any, *more: str) -> list[str]:
    args = ["check", "routing-change", "--home", str(b.home)]
    for k, v in SUBJECT.items():
        args += ["--subject", f"{k}={v}"]
    return [*args, *more]


def _dep_file(tmp_path: Path, dep: dict[str, Any], name: str = "dep.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(dep))
    return p


# --- 1. the verdict is re-derived at the check's reference time ------------------------------------------


def test_a_host_probe_168_6h_old_no_longer_counts_under_its_168h_bound(build) -> None:
    b = build(SEED004)
    r = check(b, OK, now=PROBE_168_6H_OLD)
    assert r["allowed"] is False
    assert r["verdict"]["current"]["reference_time"].startswith("2026-09-17T10:36:05")
    [reason] = r["reasons"]
    assert "re-derived as of 2026-09-17T10:36:05" in reason and "INCONCLUSIVE" in reason, reason
    assert "its evidence is stale: host.probe" in reason and "more than 7d before" in reason, reason
    assert "does not judge the requested subject" not in reason


def test_an_unrelated_append_does_not_flip_the_routing_answer(build) -> None:
    """Before: re-derived at the log's last entry (11:05 on 09-10) the stale probe still counted, until any
    entry was appended; now both answers are the one at the reference time."""
    b = build(SEED004)
    before = check(b, OK, now=PROBE_168_6H_OLD)
    append(b, "note", {"host": "another-box"}, {"text": "unrelated maintenance note"}, "operator")
    after = check(b, OK, now=PROBE_168_6H_OLD)
    assert before["allowed"] is after["allowed"] is False
    assert [x.replace(before["verdict"]["entry"], "") for x in before["reasons"]] == [
        x.replace(after["verdict"]["entry"], "") for x in after["reasons"]
    ]
    # and a day earlier the same log allows it: the answer follows the reference time alone
    assert check(b, OK, now=parse_time("2026-09-16T10:00:00Z"))["allowed"] is True


def test_when_every_probe_is_stale_the_reason_names_staleness_not_another_subject(build) -> None:
    b = build(SEED004)
    r = check(b, OK, now=parse_time("2026-10-15T10:59:00Z"))  # every entry past its bound (7d, 30d)
    assert r["allowed"] is False
    still = next(x for x in r["reasons"] if "no longer holds" in x)
    assert "its evidence is stale" in still, still
    assert "does not judge the requested subject" not in still


# --- 2. --now <past> --record ------------------------------------------------------------------------------


def test_a_recorded_routing_change_carries_the_reference_time_it_judged_at(
    build, cli, clock_at, tmp_path: Path
) -> None:
    b = build(SEED004)
    p = _dep_file(tmp_path, OK)
    # allowed at the fixture's time, refused at the real clock (months later): recorded with the clock then
    with clock_at("2026-09-11T09:00:00Z"):
        r = cli(*_args(b, "--deployment", str(p), "--now", "2026-09-11T09:00:00Z", "--record", "--json"))
    assert r.code == 0, r.out + r.err
    e = b.ledger.get(json.loads(r.out)["recorded"])
    assert e.statement.payload["judged_at"] == "2026-09-11T09:00:00.000000Z"
    # without --now: judged at the clock, and says so
    r = cli(*_args(b, "--deployment", str(p), "--record", "--json"))
    e = b.ledger.get(json.loads(r.out)["recorded"])
    assert e.statement.payload["judged_at"] == json.loads(r.out)["now"]


def test_recording_a_decision_judged_before_the_logs_head_is_refused_and_records_nothing(
    build, cli, tmp_path: Path
) -> None:
    b = build(SEED004)
    p = _dep_file(tmp_path, OK)
    past = "2026-09-10T11:02:00Z"  # after the verdict (11:00), before the log's last entry (11:05)
    assert cli(*_args(b, "--deployment", str(p), "--now", past)).code == 0  # a what-if may be read
    size = b.ledger.size()
    r = cli(*_args(b, "--deployment", str(p), "--now", past, "--record"))
    assert r.code == 2, r.out + r.err
    assert "cannot record a routing decision judged at 2026-09-10T11:02:00" in r.err, r.err
    assert b.ledger.size() == size


# --- 3. ledger verdict --record judges at the clock (or --now) ---------------------------------------------


ONE_GPU = {
    "host": "gpu-box-1",
    "services": [{"engine": "vllm", "name": "s", "model": "m-7", "gpus": [0], "gpu_memory_utilization": 0.5}],
}


def route_campaign(
    tmp_path: Path, entries: list[dict[str, Any]], now: str, deployment: dict[str, Any] | None = None
) -> dict[str, Any]:
    """``check routing-change`` of the campaign's backend/model/host (``ONE_GPU`` by default) at ``now``,
    on a home built from ``entries`` (``_campaign_home``, in a folder of its own: a test may route twice)."""
    import tempfile

    from ledger.policy.loader import load_policy
    from ledger.policy.routing import check_routing_change

    _home, ledger, _b = _campaign_home(Path(tempfile.mkdtemp(dir=tmp_path)), entries)
    try:
        subject = {k: CAMPAIGN[k] for k in ("backend", "model", "host")}
        return check_routing_change(
            ledger,
            load_policy("routing-change"),
            subject,
            deployment=deployment or ONE_GPU,
            now=parse_time(now),
        )
    finally:
        ledger.close()


def _campaign_home(tmp_path: Path, entries: list[dict[str, Any]]) -> tuple[Path, Ledger, _Builder]:
    home = tmp_path / "home"
    ledger = Ledger.init(home, genesis_at=parse_time("2026-09-10T09:00:00Z"))
    spec = {
        "start": "2026-09-10T09:00:00Z",
        "keys": KEYS,
        "defaults": {"subject": CAMPAIGN},
        "entries": entries,
    }
    b = _Builder(ledger, spec, POLICY_DIR)
    b.enrol_keys()
    b.add_all(entries)
    return home, ledger, b


def test_verdict_record_does_not_sign_qualified_on_evidence_stale_now(tmp_path: Path, cli, clock_at) -> None:
    home, ledger, _ = _campaign_home(tmp_path, qualified_entries())
    subj = ["--subject", f"campaign={CAMPAIGN['campaign']}"]
    # judged at the last entry's time (read only) it is QUALIFIED …
    r = cli("verdict", "--home", str(home), *subj, "--json")
    assert json.loads(r.out)["verdict"] == "QUALIFIED"
    # … and a --now at that time, months before the clock, is not signed QUALIFIED: at the clock its host
    # probe is stale (audit 38 f4: it was recorded QUALIFIED), exit 2, nothing recorded
    size = ledger.size()
    r = cli("verdict", "--home", str(home), *subj, "--now", "2026-09-11T00:00:00Z", "--record", "--json")
    assert r.code == 2 and "as QUALIFIED: judged at the clock" in r.err, r.out + r.err
    assert ledger.size() == size
    # with the clock at that time, --now judges (and records) at it; replay judges it again then: the same
    with clock_at("2026-09-11T00:00:00Z"):
        r = cli("verdict", "--home", str(home), *subj, "--now", "2026-09-11T00:00:00Z", "--record", "--json")
    assert json.loads(r.out)["verdict"] == "QUALIFIED", r.err
    first = ledger.query(kind="verdict", limit=1, descending=True)[0]
    assert first.statement.payload["reference_time"] == "2026-09-11T00:00:00.000000Z"
    # … but a verdict recorded without --now is judged now (months later: its host probe is stale)
    r = cli("verdict", "--home", str(home), *subj, "--record", "--key", "reviewer", "--json")
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert out["verdict"] == "INCONCLUSIVE", out["gates"]
    rec = ledger.query(kind="verdict", limit=1, descending=True)[0]
    assert rec.statement.payload["verdict"] == "INCONCLUSIVE"
    assert rec.statement.payload["reference_time"] == out["reference_time"]
    for e in (first, rec):  # replayed at the time each was judged at: the same result
        assert cli("verdict", "replay", e.entry_id, "--home", str(home)).code == 0
    # a time before the log's last entry is refused for the record (exit 2, nothing recorded)
    size = ledger.size()
    r = cli("verdict", "--home", str(home), *subj, "--now", "2026-09-11T00:00:00Z", "--record")
    assert r.code == 2 and "cannot record a verdict judged at" in r.err, r.err
    assert ledger.size() == size
    ledger.close()


# --- 4. the deployment's device is the one the campaign qualified ------------------------------------------


def test_a_gpu_qualified_model_on_a_cpu_service_is_refused_but_a_cpu_neighbour_service_is_fine(build) -> None:
    b = build(SEED004)
    r = check(b, CPU_ONLY)
    assert r["allowed"] is False
    assert any("on device cpu" in x and "qualified it on device gpu" in x for x in r["reasons"]), r["reasons"]
    # a CPU service of another model on the same GPU host reserves no GPU and routes nothing of this model
    dep = {
        **OK,
        "services": [*OK["services"], {"engine": "vllm", "name": "tiny", "model": "other", "device": "cpu"}],
    }
    assert check(b, dep)["allowed"] is True


def _cpu_campaign(tmp_path: Path) -> Any:
    """The QUALIFIED neighbour campaign, its approved spec pinning a CPU deployment, and its verdict."""
    es = qualified_entries()
    entry(es, "campaign-job")["payload"]["spec"]["bindings"]["device"] = "cpu"
    es.append(
        {
            "name": "verdict",
            "at": "2026-09-10T11:00:00Z",
            "record_verdict": {"subject": {"campaign": CAMPAIGN["campaign"]}, "key": "reviewer"},
        }
    )
    _home, ledger, _b = _campaign_home(tmp_path, es)
    pol = load_policy("backend-qualification")
    assert evaluate(ledger, {"campaign": CAMPAIGN["campaign"]}, pol)["verdict"] == "QUALIFIED"
    return ledger


def test_a_cpu_qualified_campaign_deployed_on_gpu_is_refused_naming_both_devices(tmp_path: Path) -> None:
    ledger = _cpu_campaign(tmp_path)
    subject = {k: CAMPAIGN[k] for k in ("backend", "model", "host")}
    gpu = {
        "host": "gpu-box-1",
        "services": [
            {"engine": "vllm", "name": "s", "model": "m-7", "gpus": [0], "gpu_memory_utilization": 0.5}
        ],
    }
    cpu = {
        "host": "gpu-box-1",
        "services": [{"engine": "vllm", "name": "s", "model": "m-7", "device": "cpu"}],
    }
    pol = load_policy("routing-change")
    now = parse_time("2026-09-11T09:00:00Z")
    r = check_routing_change(ledger, pol, dict(subject), deployment=gpu, now=now)
    assert r["allowed"] is False
    assert r["reasons"] == [
        "service s serves m-7 on device gpu, but the verdict's campaign qualified it on device cpu: the "
        "change would route traffic to a device no verdict qualified"
    ]
    r = check_routing_change(ledger, pol, dict(subject), deployment=cpu, now=now)
    assert r["allowed"] is True, r["reasons"]
    ledger.close()


# --- 5. host names compare case-insensitively ---


def test_a_p2p_fault_recorded_under_an_uppercase_host_name_is_the_hosts(build) -> None:
    b = build(SEED004)
    # the seed's own P2P note is for gpu-box-1; record a kernel P2P fault under GPU-BOX-1 and judge a host
    # the seed does not know by another spelling: the P2P fact and the verdict are the host's (the log reads
    # the kernel after the campaign's runs: a fault it records during them would fail the verdict, which
    # reads hosts the same way)
    append(
        b,
        "kernel.log",
        {"host": "GPU-BOX-1"},
        {
            "source": "dmesg",
            "since": "2026-09-11T08:00:00Z",
            "events": [{"time": "2026-09-11T08:30:00Z", "kind": "p2p-fault", "message": "NCCL P2P fault"}],
        },
        "collector",
    )
    text = {
        "host": "GPU-BOX-1",
        "services": [
            {"engine": "vllm", "name": "t", "model": "x", "gpus": [0, 1], "gpu_memory_utilization": 0.5},
            *OK["services"],
        ],
    }
    r = check_routing_change(
        b.ledger,
        load_policy("routing-change"),
        {**SUBJECT, "host": "Gpu-Box-1"},
        deployment=text,
        now=parse_time("2026-09-11T09:00:00Z"),
    )
    assert r["host"]["facts"]["p2p_fault"] is True
    assert r["reasons"] == [
        "service t spans GPUs 0+1 on Gpu-Box-1, which records a P2P fault, without NCCL_P2P_DISABLE=1"
    ], r["reasons"]
    assert host_key("GPU-BOX-1.") == host_key("gpu-box-1")


# --- 6. GPU memory sums compare exactly ---


def test_a_gpu_memory_sum_of_0_8800000004_is_above_0_88_not_rounded_to_it(build) -> None:
    b = build(SEED004)
    dep = {
        "host": "gpu-box-1",
        "services": [
            {
                "engine": "vllm",
                "name": "vllm-embed",
                "model": "Qwen3-Embedding-8B",
                "gpus": [2],
                "gpu_memory_utilization": 0.78,
            },
            {
                "engine": "vllm",
                "name": "vllm-ocr",
                "model": "OvisOCR2",
                "gpus": [2],
                "gpu_memory_utilization": 0.1000000004,
            },
        ],
    }
    r = check(b, dep)
    assert r["allowed"] is False
    assert r["reasons"] == [
        "GPU2 gpu_memory_utilization sum 0.8800000004 > 0.88 (vllm-embed 0.78 + vllm-ocr 0.1000000004)"
    ]
    # 0.78 + 0.1 is 0.88 exactly (as a float sum it is 0.8800000000000001): at the bound, allowed
    dep["services"][1]["gpu_memory_utilization"] = 0.1
    assert check(b, dep)["allowed"] is True


# --- 7. duplicate keys and duplicate subject fields ---


def test_a_json_deployment_with_a_duplicate_key_is_refused_naming_it(build, cli, tmp_path: Path) -> None:
    p = tmp_path / "dep.json"
    p.write_text(
        '{"host": "gpu-box-1", "services": [{"engine": "vllm", "name": "vllm-embed", '
        '"model": "Qwen3-Embedding-8B", "gpus": [2], "gpu_memory_utilization": 0.95, '
        '"gpu_memory_utilization": 0.25}]}'
    )
    with pytest.raises(InputError, match="duplicate JSON key 'gpu_memory_utilization'"):
        load_deployment(p)
    b = build(SEED004)
    r = cli(*_args(b, "--deployment", str(p), "--now", "2026-09-11T09:00:00Z", "--record"))
    assert r.code == 2 and "gpu_memory_utilization" in r.err, r.err


def test_the_same_subject_field_twice_is_refused_naming_it(build, cli) -> None:
    b = build(SEED004)
    size = b.ledger.size()
    r = cli(*_args(b, "--subject", "host=gpu-box-2", "--deployment", "x.json", "--record"))
    assert r.code == 2, r.out + r.err
    assert "subject field 'host' given twice" in r.err, r.err
    assert b.ledger.size() == size


# --- 8. a superseded launch: the verdict's evidence no longer stands ---


def test_a_superseded_launch_is_named_as_the_cause_not_an_other_host_probe(build) -> None:
    b = build(SEED004)
    append(
        b,
        "supersession",
        {"campaign": "router-embed"},
        {"reason": "launch ran the wrong build"},
        "operator",
        [("supersedes", b.names["launch"])],
    )
    [reason] = check(b, OK)["reasons"]
    cause = (
        "the verdict's evidence no longer stands: engine.launch " + b.names["launch"][:16] + " superseded by "
    )
    assert cause in reason, reason
    assert "launch ran the wrong build" in reason
    assert reason.index(cause) < reason.index("as a result, ")
