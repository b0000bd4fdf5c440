"""Fix 48: the routing gate's one copy of the benign GPU classes, its refusal naming a withdrawn verdict,
and a recorded judgement judged at a past ``--now`` that no longer passes at the clock.

audit36 f5: ``gpu_benign_classes`` had two copies (the qualification's params and routing-change's). A team
that set the qualification's to ``[]`` (a GPU reset is a fault) got verdicts that fail on a reset while the
gate still routed onto the GPU that reset after the host's latest probe. The gate now reads the
qualification's list (as it reads ``control_answer`` and ``served_identity``); a routing policy that states
its own is refused naming the key and where it lives.

audit38 f3: after ``ledger supersede <verdict>`` the gate said "no trusted … verdict recorded"; the reason now
leads with the recorded verdict, what took it out, by which key, and the reason given.

audit38 f4: ``verdict --record --now <8 days ago>`` signed QUALIFIED though judged at the clock the campaign
is INCONCLUSIVE (its host probe stale). A reference time before the clock records a pass only where the
judgement at the clock passes too (``record_time.refuse_pass_not_holding_now``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from ledger.entries import parse_time
from ledger.errors import InputError, PolicyError
from ledger.policy.fixtures import build_fixture_ledger
from ledger.policy.loader import load_policy
from ledger.policy.record_time import refuse_pass_not_holding_now
from ledger.policy.routing import check_routing_change
from ledger.service import Ledger
from tests.policy.conftest import FIXTURES, POLICY_DIR

SUBJECT = {"backend": "vllm", "model": "Qwen3-Embedding-8B", "host": "gpu-box-1"}
NOW = parse_time("2026-09-11T09:00:00Z")
# GPU0 (PCI 5e) reset (gpu-reset-succeeded: informational) at 08:05, after the host's latest probe (12:00 the
# day before), in gpu-fault-after-probe
ON_GPU0 = {
    "host": "gpu-box-1",
    "services": [
        {
            "engine": "vllm",
            "name": "vllm-embed",
            "model": "Qwen3-Embedding-8B",
            "gpus": [0],
            "gpu_memory_utilization": 0.25,
        }
    ],
}
SHIPPED_BENIGN = 'gpu_benign_classes = ["informational"]\n'


def _policies(tmp_path: Path, benign: str | None, routing_extra: str = "") -> Path:
    """A copy of the shipped policies whose qualification states ``benign`` (None: no such line) and whose
    routing policy gains ``routing_extra`` under [params]."""
    d = tmp_path / "policies"
    shutil.copytree(POLICY_DIR, d, ignore=shutil.ignore_patterns("fixtures"))
    q = d / "backend-qualification.toml"
    text = q.read_text()
    assert SHIPPED_BENIGN in text
    q.write_text(text.replace(SHIPPED_BENIGN, "" if benign is None else benign + "\n"))
    if routing_extra:
        r = d / "routing-change.toml"
        r.write_text(r.read_text().replace("[params]\n", "[params]\n" + routing_extra + "\n", 1))
    return d


def _route_gpu0(tmp_path: Path, policies: Path) -> dict[str, Any]:
    ledger, _spec, _b = build_fixture_ledger(
        FIXTURES / "routing-change/gpu-fault-after-probe.toml",
        tmp_path / "home",
        POLICY_DIR,
        init=Ledger.init,
    )
    try:
        return check_routing_change(
            ledger, load_policy("routing-change", policies), dict(SUBJECT), deployment=ON_GPU0, now=NOW
        )
    finally:
        ledger.close()


# --- audit36 f5: one copy of gpu_benign_classes -----------------------------------------------------------


def test_a_gpu_reset_the_qualification_counts_as_a_fault_keeps_the_route_off_that_gpu(tmp_path: Path) -> None:
    r = _route_gpu0(tmp_path, _policies(tmp_path, "gpu_benign_classes = []"))
    assert r["allowed"] is False, r["reasons"]
    assert any("after its latest probe" in x and "GPU reset(2) succeeded" in x for x in r["reasons"]), r[
        "reasons"
    ]


def test_the_shipped_qualification_lists_a_reset_benign_and_the_route_onto_gpu0_stands(
    tmp_path: Path,
) -> None:
    r = _route_gpu0(tmp_path, _policies(tmp_path, SHIPPED_BENIGN.strip()))
    assert r["allowed"] is True, r["reasons"]


@pytest.mark.parametrize(
    "benign",
    [None, 'gpu_benign_classes = "informational"', "gpu_benign_classes_renamed = ['informational']"],
    ids=["dropped", "mistyped", "renamed"],
)
def test_a_qualification_without_a_benign_list_makes_every_gpu_event_a_fault(
    tmp_path: Path, benign: str | None
) -> None:
    """Fail closed: no list (dropped, renamed) or one of the wrong type names no class benign."""
    try:
        r = _route_gpu0(tmp_path, _policies(tmp_path, benign))
    except PolicyError:
        return  # the loader refusing the qualification's params is as closed
    assert r["allowed"] is False, r["reasons"]


def test_a_routing_policy_stating_its_own_gpu_benign_classes_is_refused_naming_where_it_lives(
    tmp_path: Path,
) -> None:
    policies = _policies(
        tmp_path, SHIPPED_BENIGN.strip(), routing_extra='gpu_benign_classes = ["informational"]'
    )
    with pytest.raises(
        PolicyError, match=r"gpu_benign_classes is the qualification's \(backend-qualification"
    ):
        _route_gpu0(tmp_path, policies)


def test_the_shipped_routing_policy_states_no_gpu_benign_classes() -> None:
    assert "gpu_benign_classes" not in load_policy("routing-change").params


# --- audit38 f3: a withdrawn verdict is named in the refusal --------------------------------------------


def _seed004(tmp_path: Path) -> tuple[Ledger, str]:
    ledger, _spec, b = build_fixture_ledger(
        FIXTURES / "routing-change/seed004-router.toml", tmp_path / "home", POLICY_DIR, init=Ledger.init
    )
    verdict = next(e for e in b.names.values() if e.kind == "verdict")
    return ledger, verdict.entry_id


def _act(ledger: Ledger, kind: str, target: str, payload: dict[str, Any], key: str, ref: str) -> str:
    at = parse_time("2026-09-10T12:00:00Z")
    st = ledger.make_statement(kind, {"host": "gpu-box-1"}, payload, refs=[(ref, target)], collected_at=at)
    return str(ledger.append([ledger.sign(st, key)], logged_at=at)[0].entry_id)


def _check(ledger: Ledger) -> dict[str, Any]:
    dep = {"host": "gpu-box-1", "services": [{"name": "e", "engine": "vllm", "model": "Qwen3-Embedding-8B",
                                              "gpus": [2], "gpu_memory_utilization": 0.25}]}  # fmt: skip
    return check_routing_change(ledger, load_policy("routing-change"), dict(SUBJECT), deployment=dep, now=NOW)


def test_a_superseded_verdict_is_named_with_its_signer_and_reason_in_the_refusal(tmp_path: Path) -> None:
    ledger, vid = _seed004(tmp_path)
    try:
        assert _check(ledger)["allowed"] is True
        sid = _act(
            ledger, "supersession", vid, {"reason": "judged under the wrong policy"}, "operator", "supersedes"
        )
        r = _check(ledger)
    finally:
        ledger.close()
    assert r["allowed"] is False
    first = r["reasons"][0]
    assert first.startswith(
        f"the newest recorded backend-qualification verdict (entry {vid[:16]}, QUALIFIED"
    ), first
    assert f"superseded by {sid[:16]} (operator): judged under the wrong policy" in first, first
    assert "no trusted backend-qualification verdict recorded for" in first, first
    row = next(i for i in r["ignored"] if i["entry"] == vid)
    assert row["detail"] == f"superseded by {sid[:16]} (operator): judged under the wrong policy"


def test_a_verdict_rejected_by_an_acceptance_is_named_with_its_signer_and_reason(tmp_path: Path) -> None:
    ledger, vid = _seed004(tmp_path)
    try:
        aid = _act(
            ledger, "acceptance", vid, {"decision": "rejected", "reason": "wrong box"}, "operator", "subject"
        )
        r = _check(ledger)
    finally:
        ledger.close()
    assert r["allowed"] is False
    assert f"is rejected by acceptance {aid[:16]} (operator): wrong box; no trusted" in r["reasons"][0], r[
        "reasons"
    ]


def test_no_verdict_ever_recorded_keeps_the_plain_reason(tmp_path: Path) -> None:
    ledger, _vid = _seed004(tmp_path)
    try:
        r = check_routing_change(
            ledger,
            load_policy("routing-change"),
            {**SUBJECT, "model": "other-model"},
            deployment=None,
            now=NOW,
        )
    finally:
        ledger.close()
    assert r["reasons"][0].startswith("no trusted backend-qualification verdict recorded for"), r["reasons"]


# --- audit38 f4: a past --now records a pass only where it passes at the clock ----------------------------


def test_a_pass_judged_in_the_past_that_fails_at_the_clock_is_not_recorded() -> None:
    then, clock = parse_time("2026-09-11T00:00:00Z"), parse_time("2026-12-01T00:00:00Z")
    asked: list[Any] = []

    def judge(t: Any) -> tuple[bool, str]:
        asked.append(t)
        return False, "INCONCLUSIVE (host probe stale)"

    with pytest.raises(InputError, match=r"as QUALIFIED: judged at the clock .* it is INCONCLUSIVE"):
        refuse_pass_not_holding_now("verdict", "QUALIFIED", then, judge, clock=clock)
    assert asked == [clock]
    # a failure judged then is recorded as it is (nothing asked); so is a pass that still holds
    refuse_pass_not_holding_now("verdict", None, then, judge, clock=clock)
    refuse_pass_not_holding_now("verdict", "QUALIFIED", then, lambda t: (True, "QUALIFIED"), clock=clock)
    # at the clock there is nothing to judge again
    refuse_pass_not_holding_now("verdict", "QUALIFIED", clock, judge, clock=clock)
    assert asked == [clock]


def test_verdict_record_at_the_logs_head_days_ago_does_not_sign_qualified_stale_now(
    tmp_path: Path, cli
) -> None:
    ledger, _vid = _seed004(tmp_path)
    home = tmp_path / "home"
    subj = ["--subject", "campaign=router-embed"]
    head = ledger.get_seq(ledger.size() - 1).logged_at
    size = ledger.size()
    read = cli("verdict", "--home", str(home), *subj, "--now", head, "--json")
    assert json.loads(read.out)["verdict"] == "QUALIFIED", read.err  # read at the head: QUALIFIED
    r = cli("verdict", "--home", str(home), *subj, "--now", head, "--record", "--key", "reviewer")
    assert r.code == 2, r.out + r.err
    assert "as QUALIFIED: judged at the clock" in r.err and "it is INCONCLUSIVE" in r.err, r.err
    assert ledger.size() == size  # nothing recorded
    # judged now (no --now) it records what holds now: INCONCLUSIVE
    r = cli("verdict", "--home", str(home), *subj, "--record", "--key", "reviewer", "--json")
    assert r.code == 0 and json.loads(r.out)["verdict"] == "INCONCLUSIVE", r.err
    assert ledger.size() == size + 1
    ledger.close()


def test_routing_record_at_a_past_now_allowed_then_refused_now_is_not_recorded(tmp_path: Path, cli) -> None:
    ledger, _vid = _seed004(tmp_path)
    home = tmp_path / "home"
    dep = tmp_path / "dep.json"
    service = {
        "engine": "vllm",
        "name": "e",
        "model": "Qwen3-Embedding-8B",
        "gpus": [2],
        "gpu_memory_utilization": 0.25,
    }
    dep.write_text(json.dumps({"host": "gpu-box-1", "services": [service]}))
    args = ["check", "routing-change", "--home", str(home), "--deployment", str(dep)]
    args += [x for k, v in SUBJECT.items() for x in ("-s", f"{k}={v}")]
    size = ledger.size()
    assert cli(*args, "--now", "2026-09-11T09:00:00Z", "--json").code == 0  # allowed then (read)
    r = cli(*args, "--now", "2026-09-11T09:00:00Z", "--record", "--key", "operator")
    assert r.code == 2, r.out + r.err
    assert "cannot record a routing decision judged at 2026-09-11T09:00:00" in r.err, r.err
    assert "as allowed: judged at the clock" in r.err and "refused: " in r.err, r.err
    assert ledger.size() == size
    ledger.close()
