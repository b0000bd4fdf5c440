"""Fix 64 (audit 51): the routing gate on neighbour cases.

f1: the gate took a GPU by its index alone. A host probe filed by an ops check showed another GPU
(GPU-dddddddd) at index 2 than the campaign qualified on (GPU-cccccccc); the verdict (which reads its own
campaign's probes) still re-derived QUALIFIED and the route onto GPU2 was allowed. The gate now decides
"still there" by the verdict's own rule (``ledger.devices.gpus_not_listed``: the same GPU by UUID where both
probes record one, else by index) against the probes the verdict's host gates read, naming both UUIDs.

f2: withdrawing (superseding, rejecting, revoking the key of) the NEWEST verdict made the gate fall back to
an older verdict of the same campaign and allow. The newest recorded verdict decides alone.

f3: where the campaign's job records no machine, another machine's probe filed under the host gave the
host its GPUs. The qualification's own rule (host-prerequisites' ``requires``: one host is one machine) now
applies: probes naming two machines leave the host's GPUs untold, and the route is refused.

f4: a blank deployment host or service name ("   ") passed validation; every text field of a deployment
is now refused when blank (exit 2, error[bad-input], nothing recorded). Decision for a padded value
(" gpu-box-1 "): stripped — the gate's normalisers set surrounding whitespace aside already, and the
recorded layout keeps one spelling; an env variable's name with surrounding whitespace is refused instead
(stripped, two names could become one key and a value be dropped silently).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from ledger.devices import gpu_at, gpus_gone_at, gpus_not_listed
from ledger.entries import parse_time
from ledger.errors import InputError
from ledger.policy.fixtures import build_fixture_ledger
from ledger.policy.loader import load_policy
from ledger.policy.routing import check_routing_change, validate_deployment
from ledger.service import Ledger
from tests.api.conftest import LEDGER_BIN
from tests.policy.conftest import FIXTURES, POLICY_DIR

SUBJECT = {"backend": "vllm", "model": "Qwen3-Embedding-8B", "host": "gpu-box-1"}
NOW = parse_time("2026-09-11T09:00:00Z")
SHARED = FIXTURES / "_shared"
H100 = ", ".join(f'{{ index = {i}, name = "NVIDIA H100" }}' for i in range(3))  # the shared campaign's GPUs
OPS = 'subject = { campaign = "ops-health", backend = "none", model = "none" }'


def _gpus(*uuids: str | None, mig: dict[int, list[str]] | None = None) -> str:
    """A probe's ``gpus`` (TOML inline) of H100s at indexes 0.., each with its UUID where given."""
    out = []
    for i, u in enumerate(uuids):
        extra = f', uuid = "{u}"' if u is not None else ""
        if mig and i in mig:
            extra += ", mig_devices = [" + ", ".join(f'{{ uuid = "{m}" }}' for m in mig[i]) + "]"
        out.append(f'{{ index = {i}, name = "NVIDIA H100"{extra} }}')
    return "[" + ", ".join(out) + "]"


def _probe(name: str, at: str, gpus: str, *, hostname: str = "gpu-box-1", subject: str = "") -> str:
    return f"""
[[entries]]
name = "{name}"
kind = "host.probe"
key = "collector"
at = "{at}"
{subject}
payload = {{ hostname = "{hostname}", os = "Ubuntu 24.04", kernel = "6.8.0", gpus = {gpus} }}
"""


def _verdict(name: str, at: str, key: str = "reviewer") -> str:
    return f"""
[[entries]]
name = "{name}"
at = "{at}"
record_verdict = {{ subject = {{ campaign = "router-embed" }}, key = "{key}" }}
"""


def _build(
    tmp_path: Path, entries: str, *, campaign_gpus: str | None = None, machine: bool = True
) -> tuple[Ledger, dict[str, str]]:
    """The shared ready campaign (its host probe listing ``campaign_gpus`` where given; its job recording
    the machine unless ``machine`` is False) and ``entries`` after it; the entries' ids by name."""
    ready = (SHARED / "ready-campaign.toml").read_text()
    if campaign_gpus is not None:
        assert f"gpus = [{H100}]" in ready
        ready = ready.replace(f"gpus = [{H100}]", f"gpus = {campaign_gpus}", 1)
    if not machine:
        assert ', hostname = "gpu-box-1", request_token_ids' in ready
        ready = ready.replace(', hostname = "gpu-box-1", request_token_ids', ", request_token_ids")
    (tmp_path / "ready.toml").write_text(ready)
    (tmp_path / "f.toml").write_text(
        f"""start = "2026-09-10T09:00:00Z"
include = ["{tmp_path / "ready.toml"}", "{SHARED / "semantic-benchmark.toml"}"]
[keys]
collector = ["collector"]
reviewer = ["reviewer"]
reviewer-2 = ["reviewer"]
operator = ["operator"]
[defaults.subject]
campaign = "router-embed"
backend = "vllm"
model = "Qwen3-Embedding-8B"
host = "gpu-box-1"
{entries}"""
    )
    ledger, _spec, b = build_fixture_ledger(
        tmp_path / "f.toml", tmp_path / "home", POLICY_DIR, init=Ledger.init
    )
    return ledger, {n: str(e.entry_id) for n, e in b.names.items()}


def _dep(gpus: list[int], host: str = "gpu-box-1") -> dict[str, Any]:
    return {
        "host": host,
        "services": [
            {
                "engine": "vllm",
                "name": "vllm-embed",
                "model": "Qwen3-Embedding-8B",
                "gpus": gpus,
                "gpu_memory_utilization": 0.25,
            }
        ],
    }


def _check(ledger: Ledger, gpus: list[int]) -> dict[str, Any]:
    return check_routing_change(
        ledger, load_policy("routing-change"), dict(SUBJECT), deployment=_dep(gpus), now=NOW
    )


def _status(r: dict[str, Any], name: str) -> str:
    return str(next(c for c in r["checks"] if c["name"] == name)["status"])


def _reason(r: dict[str, Any], name: str) -> str:
    return str(next(c for c in r["checks"] if c["name"] == name).get("reason", ""))


# --- f1: a GPU replaced at its index -------------------------------------------------------------------

UUIDS = ("GPU-aaaaaaaa", "GPU-bbbbbbbb", "GPU-cccccccc")
SWAPPED = ("GPU-aaaaaaaa", "GPU-bbbbbbbb", "GPU-dddddddd")


def test_route_onto_a_gpu_replaced_at_its_index_is_refused_naming_both_uuids(tmp_path: Path) -> None:
    """The regression: an ops probe (filed under the host, another campaign) shows GPU-dddddddd at index 2;
    the verdict still re-derives QUALIFIED (it reads its campaign's probes), and the route onto GPU2 was
    allowed. GPU0 and GPU1 are still the GPUs the verdict qualified: a route onto them stands."""
    ledger, _ = _build(
        tmp_path,
        _verdict("verdict", "2026-09-10T11:00:00Z")
        + _probe("ops", "2026-09-10T12:00:00Z", _gpus(*SWAPPED), subject=OPS),
        campaign_gpus=_gpus(*UUIDS),
    )
    try:
        r = _check(ledger, [2])
        ok = _check(ledger, [0, 1])
    finally:
        ledger.close()
    assert r["verdict"]["current"]["verdict"] == "QUALIFIED"
    assert r["allowed"] is False
    assert _status(r, "gpu-indexes-exist") == "failed"
    why = _reason(r, "gpu-indexes-exist")
    assert "GPU2 (GPU-cccccccc)" in why and "GPU2 (GPU-dddddddd)" in why, why
    assert "another GPU replaced it" in why, why
    assert "GPU0, GPU1 on host probe" in why, why  # GPU2 is not named among those on the host
    assert ok["allowed"] is True, ok["reasons"]


def test_a_replaced_gpu_filed_under_the_campaign_is_refused_by_both_checks(tmp_path: Path) -> None:
    """Neighbour: the same probe filed under the campaign makes the re-derived verdict NOT QUALIFIED; the
    GPU check names the replacement too (one rule, both places)."""
    ledger, _ = _build(
        tmp_path,
        _verdict("verdict", "2026-09-10T11:00:00Z")
        + _probe("again", "2026-09-10T12:00:00Z", _gpus(*SWAPPED)),
        campaign_gpus=_gpus(*UUIDS),
    )
    try:
        r = _check(ledger, [2])
    finally:
        ledger.close()
    assert r["allowed"] is False
    assert _status(r, "verdict-still-holds") == "failed"
    assert _status(r, "gpu-indexes-exist") == "failed"
    assert "GPU2 (GPU-dddddddd)" in _reason(r, "gpu-indexes-exist")


@pytest.mark.parametrize(
    ("qualified", "newest"),
    [((None, None, None), SWAPPED), (UUIDS, (None, None, None))],
    ids=["uuid-only-on-the-newest", "uuid-only-on-the-qualified"],
)
def test_a_uuid_recorded_on_one_side_only_compares_by_index(
    tmp_path: Path, qualified: tuple[str | None, ...], newest: tuple[str | None, ...]
) -> None:
    """Neighbour: where only one probe records a UUID, the same GPU is told by index (the verdict's rule):
    the route stands."""
    ledger, _ = _build(
        tmp_path,
        _verdict("verdict", "2026-09-10T11:00:00Z")
        + _probe("ops", "2026-09-10T12:00:00Z", _gpus(*newest), subject=OPS),
        campaign_gpus=_gpus(*qualified),
    )
    try:
        r = _check(ledger, [2])
    finally:
        ledger.close()
    assert r["allowed"] is True, r["reasons"]


def test_a_gpu_renumbered_after_another_fell_off_is_not_the_qualified_one(tmp_path: Path) -> None:
    """Neighbour: GPU-bbbbbbbb fell off the bus and GPU-cccccccc is GPU1 now. GPU1 is not the GPU the
    verdict qualified as GPU1; GPU2 is on no probe; GPU0 stands."""
    ledger, _ = _build(
        tmp_path,
        _verdict("verdict", "2026-09-10T11:00:00Z")
        + _probe("ops", "2026-09-10T12:00:00Z", _gpus("GPU-aaaaaaaa", "GPU-cccccccc"), subject=OPS),
        campaign_gpus=_gpus(*UUIDS),
    )
    try:
        one, two, zero = _check(ledger, [1]), _check(ledger, [2]), _check(ledger, [0])
    finally:
        ledger.close()
    assert one["allowed"] is False
    why = _reason(one, "gpu-indexes-exist")
    assert "GPU1 (GPU-bbbbbbbb)" in why and "GPU1 (GPU-cccccccc)" in why, why
    assert two["allowed"] is False and _status(two, "gpu-indexes-exist") == "failed"
    assert zero["allowed"] is True, zero["reasons"]


def test_a_mig_gpu_is_the_same_gpu_by_its_uuid_whatever_its_mig_devices(tmp_path: Path) -> None:
    """Neighbour (MIG): the GPU is told by its own UUID — repartitioned (other MIG devices) it is the same
    GPU; another GPU carrying the same MIG device list is not."""
    qualified = _gpus(*UUIDS, mig={2: ["MIG-1111"]})
    for name, newest, allowed in (
        ("repartitioned", _gpus(*UUIDS, mig={2: ["MIG-2222"]}), True),
        ("replaced", _gpus(*SWAPPED, mig={2: ["MIG-1111"]}), False),
    ):
        home = tmp_path / name
        home.mkdir()
        ledger, _ = _build(
            home,
            _verdict("verdict", "2026-09-10T11:00:00Z")
            + _probe("ops", "2026-09-10T12:00:00Z", newest, subject=OPS),
            campaign_gpus=qualified,
        )
        try:
            r = _check(ledger, [2])
        finally:
            ledger.close()
        assert r["allowed"] is allowed, (name, r["reasons"])


def test_devices_helpers_tell_the_gpu_at_an_index_by_the_verdicts_rule() -> None:
    seen = [{"index": 0, "uuid": "GPU-a"}, {"index": 2, "uuid": "GPU-c"}]
    assert gpus_gone_at(seen, [{"index": 0, "uuid": "GPU-a"}, {"index": 2, "uuid": "GPU-d"}], {2}) == [
        (1, seen[1])
    ]
    assert gpus_gone_at(seen, [{"index": 0, "uuid": "GPU-a"}, {"index": 2, "uuid": "GPU-d"}], {0}) == []
    assert gpus_gone_at(seen, [{"index": 0}, {"index": 2}], {0, 2}) == []  # UUID on one side: by index
    # what it finds is what gpus_not_listed finds, at the indexes asked
    assert gpus_gone_at(seen, [], {0, 2}) == gpus_not_listed(seen, [])
    assert gpus_gone_at(["junk"], [], {0}) == [(0, "junk")]  # not an object: not found (fail closed)
    assert gpu_at(seen, 2) == (1, seen[1])
    assert gpu_at([{"name": "no index"}], 0) == (0, {"name": "no index"})  # its place, as device_of reads
    assert gpu_at(seen, 1) is None and gpu_at("not a list", 0) is None


# --- f2: the newest verdict decides alone --------------------------------------------------------------


def _withdraw(target: str, at: str = "2026-09-10T11:30:00Z") -> str:
    return f"""
[[entries]]
name = "withdraw-{target}"
kind = "supersession"
key = "operator"
at = "{at}"
refs = {{ supersedes = "{target}" }}
payload = {{ reason = "verdict withdrawn: the benchmark used the wrong corpus; do not route" }}
"""


def test_withdrawing_the_newest_verdict_does_not_fall_back_to_an_older_one(tmp_path: Path) -> None:
    """The regression: v1 and v2 QUALIFIED, v2 superseded by the operator ("do not route") — the gate
    allowed on v1 without a word about the withdrawal."""
    ledger, ids = _build(
        tmp_path,
        _verdict("v1", "2026-09-10T11:00:00Z") + _verdict("v2", "2026-09-10T11:10:00Z") + _withdraw("v2"),
    )
    try:
        r = _check(ledger, [2])
    finally:
        ledger.close()
    assert r["allowed"] is False
    assert r["verdict"] is None
    assert _status(r, "verdict-present") == "failed"
    first = r["reasons"][0]
    assert first.startswith(
        f"the newest recorded backend-qualification verdict (entry {ids['v2'][:16]}, QUALIFIED"
    ), first
    sid = ids["withdraw-v2"]
    assert f"superseded by {sid[:16]} (operator): verdict withdrawn" in first, first
    assert f"the older recorded verdict (entry {ids['v1'][:16]}) does not stand in" in first, first


def test_a_rejected_newest_verdict_does_not_fall_back_to_an_older_one(tmp_path: Path) -> None:
    ledger, ids = _build(
        tmp_path,
        _verdict("v1", "2026-09-10T11:00:00Z")
        + _verdict("v2", "2026-09-10T11:10:00Z")
        + """
[[entries]]
name = "reject"
kind = "acceptance"
key = "operator"
at = "2026-09-10T11:30:00Z"
refs = { subject = "v2" }
payload = { decision = "rejected", reason = "wrong box" }
""",
    )
    try:
        r = _check(ledger, [2])
    finally:
        ledger.close()
    assert r["allowed"] is False and r["verdict"] is None
    assert f"is rejected by acceptance {ids['reject'][:16]} (operator): wrong box" in r["reasons"][0]


def test_a_newest_verdict_whose_key_is_revoked_does_not_fall_back_to_an_older_one(tmp_path: Path) -> None:
    ledger, ids = _build(
        tmp_path,
        _verdict("v1", "2026-09-10T11:00:00Z")
        + _verdict("v2", "2026-09-10T11:10:00Z", key="reviewer-2")
        + """
[[entries]]
kind = "key.revoke"
at = "2026-09-10T11:30:00Z"
payload = { key = "reviewer-2", effective_at = "2026-09-10T11:05:00Z", reason = "key material leaked" }
""",
    )
    try:
        r = _check(ledger, [2])
    finally:
        ledger.close()
    assert r["allowed"] is False and r["verdict"] is None
    first = r["reasons"][0]
    assert f"verdict (entry {ids['v2'][:16]}" in first and "revoked" in first, first
    assert f"(entry {ids['v1'][:16]}) does not stand in" in first, first


def test_two_verdicts_the_older_withdrawn_route_on_the_newer(tmp_path: Path) -> None:
    """Neighbour: only the newest decides — an older one withdrawn takes nothing from it."""
    ledger, ids = _build(
        tmp_path,
        _verdict("v1", "2026-09-10T11:00:00Z") + _withdraw("v1", "2026-09-10T11:05:00Z")
        + _verdict("v2", "2026-09-10T11:10:00Z"),
    )  # fmt: skip
    try:
        r = _check(ledger, [2])
    finally:
        ledger.close()
    assert r["allowed"] is True, r["reasons"]
    assert r["verdict"]["entry"] == ids["v2"]


@pytest.mark.parametrize(("withdrawn", "allowed"), [("v3", False), ("v2", True), ("v1", True)])
def test_three_verdicts_only_the_newest_one_taken_out_refuses(
    tmp_path: Path, withdrawn: str, allowed: bool
) -> None:
    ledger, ids = _build(
        tmp_path,
        _verdict("v1", "2026-09-10T11:00:00Z") + _verdict("v2", "2026-09-10T11:10:00Z")
        + _verdict("v3", "2026-09-10T11:20:00Z") + _withdraw(withdrawn),
    )  # fmt: skip
    try:
        r = _check(ledger, [2])
    finally:
        ledger.close()
    assert r["allowed"] is allowed, r["reasons"]
    if allowed:
        assert r["verdict"]["entry"] == ids["v3"]
    else:
        assert "the older recorded verdicts (entries" in r["reasons"][0], r["reasons"]
        assert ids["v1"][:16] in r["reasons"][0] and ids["v2"][:16] in r["reasons"][0]


def test_a_newer_not_qualified_verdict_is_not_passed_over_for_an_older_qualified_one(tmp_path: Path) -> None:
    """Neighbour: v2 (recorded while a probe showed GPU2 gone) is NOT QUALIFIED and stands (not withdrawn);
    the operator later withdrew that probe, so the campaign re-derives QUALIFIED — the gate still judges v2,
    the newest verdict, and refuses on it rather than taking v1."""
    ledger, ids = _build(
        tmp_path,
        _verdict("v1", "2026-09-10T11:00:00Z")
        + _probe("gone", "2026-09-10T11:05:00Z", _gpus(None, None))
        + _verdict("v2", "2026-09-10T11:10:00Z")
        + _withdraw("gone", "2026-09-10T11:20:00Z"),
    )
    try:
        r = _check(ledger, [2])
    finally:
        ledger.close()
    assert r["verdict"]["entry"] == ids["v2"]
    assert r["verdict"]["verdict"].startswith("NOT QUALIFIED")
    assert r["allowed"] is False
    assert _status(r, "verdict-qualified") == "failed"


# --- f3: probes of the host naming two machines --------------------------------------------------------

GPU_BOX_9 = _gpus(None, None, None, None, None, None)


def test_another_machines_probe_gives_the_host_no_gpus_where_no_machine_is_recorded(tmp_path: Path) -> None:
    """The regression: the job records no machine; a probe of gpu-box-9 (six GPUs) filed under gpu-box-1
    let a route onto GPU5 stand. Now which GPUs are on the host cannot be told: every GPU is refused."""
    ledger, _ = _build(
        tmp_path,
        _verdict("verdict", "2026-09-10T11:00:00Z")
        + _probe("nine", "2026-09-10T12:00:00Z", GPU_BOX_9, hostname="gpu-box-9", subject=OPS),
        machine=False,
    )
    try:
        five, two = _check(ledger, [5]), _check(ledger, [2])
    finally:
        ledger.close()
    assert five["verdict"]["current"]["machine"] is None
    for r in (five, two):
        assert r["allowed"] is False
        why = _reason(r, "gpu-indexes-exist")
        assert "probes of this host name machines 'gpu-box-1' and 'gpu-box-9'" in why, why
        assert "which GPUs are on it cannot be told" in why, why
        # the qualification's own text, one copy
        assert "name more than one machine" in why, why


def test_another_machines_probe_is_not_read_where_the_job_records_the_machine(tmp_path: Path) -> None:
    """Neighbour: the job records gpu-box-1; gpu-box-9's probe is another machine's (rule other-machine):
    GPU5 is not on the host, GPU2 is."""
    ledger, _ = _build(
        tmp_path,
        _verdict("verdict", "2026-09-10T11:00:00Z")
        + _probe("nine", "2026-09-10T12:00:00Z", GPU_BOX_9, hostname="gpu-box-9", subject=OPS),
    )
    try:
        five, two = _check(ledger, [5]), _check(ledger, [2])
    finally:
        ledger.close()
    assert five["allowed"] is False and _status(five, "gpu-indexes-exist") == "failed"
    assert "machines" not in _reason(five, "gpu-indexes-exist")
    assert two["allowed"] is True, two["reasons"]


def test_probes_of_one_machine_judge_the_host_where_no_machine_is_recorded(tmp_path: Path) -> None:
    """Neighbour: a second probe of the same machine (no machine recorded) — one machine, its GPUs told."""
    ledger, _ = _build(
        tmp_path,
        _verdict("verdict", "2026-09-10T11:00:00Z")
        + _probe("ops", "2026-09-10T12:00:00Z", f"[{H100}]", subject=OPS),
        machine=False,
    )
    try:
        r = _check(ledger, [2])
    finally:
        ledger.close()
    assert r["allowed"] is True, r["reasons"]


def test_the_other_machines_probe_withdrawn_the_host_is_judged_again(tmp_path: Path) -> None:
    """Neighbour: the operator supersedes the other machine's probe (as the qualification's text says to):
    the host's own probes judge it again."""
    ledger, _ = _build(
        tmp_path,
        _verdict("verdict", "2026-09-10T11:00:00Z")
        + _probe("nine", "2026-09-10T12:00:00Z", GPU_BOX_9, hostname="gpu-box-9", subject=OPS)
        + _withdraw("nine", "2026-09-10T12:30:00Z"),
        machine=False,
    )
    try:
        two, five = _check(ledger, [2]), _check(ledger, [5])
    finally:
        ledger.close()
    assert two["allowed"] is True, two["reasons"]
    assert five["allowed"] is False


# --- f4: blank text fields of a deployment -------------------------------------------------------------


def _svc(**kw: Any) -> dict[str, Any]:
    return {
        "engine": "vllm",
        "name": "vllm-embed",
        "model": "Qwen3-Embedding-8B",
        "gpus": [2],
        "gpu_memory_utilization": 0.25,
        **kw,
    }


@pytest.mark.parametrize(
    ("dep", "field"),
    [
        ({"host": "   ", "services": [_svc()]}, "deployment host: blank"),
        ({"host": "", "services": [_svc()]}, "deployment host: blank"),
        ({"host": "gpu-box-1", "services": [_svc(name="  ")]}, "services.0.name: blank"),
        ({"host": "gpu-box-1", "services": [_svc(engine=" \t")]}, "services.0.engine: blank"),
        ({"host": "gpu-box-1", "services": [_svc(model="  ")]}, "services.0.model: blank"),
        ({"host": "gpu-box-1", "services": [_svc(env={" ": "1"})]}, "services.0.env. .[key]: blank"),
        (
            {"host": "gpu-box-1", "services": [_svc(env={" NCCL_P2P_DISABLE": "1"})]},
            "surrounding whitespace",
        ),
        # the neighbours: mistyped, dropped, renamed
        ({"host": 1, "services": [_svc()]}, "deployment host: Input should be a valid string"),
        ({"services": [_svc()]}, "deployment host: required"),
        ({"hostname": "gpu-box-1", "services": [_svc()]}, "host: required"),
    ],
    ids=[
        "host-spaces",
        "host-empty",
        "name",
        "engine",
        "model",
        "env-name",
        "env-padded",
        "host-int",
        "host-dropped",
        "host-renamed",
    ],
)
def test_a_blank_deployment_text_field_is_an_input_error_naming_it(dep: dict[str, Any], field: str) -> None:
    with pytest.raises(InputError) as got:
        validate_deployment(dep, "dep.toml")
    assert field in got.value.message, got.value.message


def test_a_padded_host_and_names_are_stripped_and_judged_as_written(tmp_path: Path) -> None:
    """Decision: " gpu-box-1 " is gpu-box-1 (stripped, as the gate's normalisers read it); the layout it
    records keeps the stripped spelling. Two service names equal once stripped are one name twice."""
    out = validate_deployment(
        {"host": " gpu-box-1 ", "services": [_svc(name=" vllm-embed ", model=" Qwen3-Embedding-8B ")]}, "d"
    )
    assert out["host"] == "gpu-box-1"
    assert out["services"][0]["name"] == "vllm-embed" and out["services"][0]["model"] == "Qwen3-Embedding-8B"
    with pytest.raises(InputError, match="already services"):
        validate_deployment({"host": "h", "services": [_svc(name="a"), _svc(name=" a ", gpus=[1])]}, "d")
    ledger, _ = _build(tmp_path, _verdict("verdict", "2026-09-10T11:00:00Z"))
    try:
        r = check_routing_change(
            ledger, load_policy("routing-change"), dict(SUBJECT), deployment=_dep([2], " gpu-box-1 "), now=NOW
        )
    finally:
        ledger.close()
    assert r["allowed"] is True, r["reasons"]
    assert r["deployment_spec"]["host"] == "gpu-box-1"


def test_a_blank_deployment_host_exits_2_and_records_nothing(tmp_path: Path) -> None:
    """The regression, end to end: exit 1 with 'the deployment is for host    , not gpu-box-1'; now exit 2,
    error[bad-input] naming the fields, and --record appends nothing."""
    ledger, _ = _build(tmp_path, _verdict("verdict", "2026-09-10T11:00:00Z"))
    size = ledger.size()
    ledger.close()
    dep = tmp_path / "dep.toml"
    dep.write_text(
        'host = "   "\n[[services]]\nname = "  "\nengine = "vllm"\nmodel = "Qwen3-Embedding-8B"\ngpus = [2]\n'
        "gpu_memory_utilization = 0.25\n"
    )
    r = subprocess.run(
        [str(LEDGER_BIN), "--home", str(tmp_path / "home"), "check", "routing-change",
         "--subject", "backend=vllm", "--subject", "model=Qwen3-Embedding-8B", "--subject", "host=gpu-box-1",
         "--deployment", str(dep), "--record", "--key", "operator"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "error[bad-input]" in r.stderr, r.stderr
    assert "deployment host: blank" in r.stderr and "services.0.name: blank" in r.stderr, r.stderr
    led = Ledger.open(tmp_path / "home")
    try:
        assert led.size() == size
    finally:
        led.close()


def test_revoked_verdict_signer_reason_reads_is_key_reviewer_was_revoked(tmp_path: Path) -> None:
    """Regression (audit 77 f2): the trust path's detail is a sentence of its own, so the reason read "… is
    key reviewer-2 was revoked effective …"; it reads "is not trusted: key … was revoked …", while a
    supersession's detail still reads "is superseded by …" (``test_fix48_routing_gate``)."""
    ledger, ids = _build(
        tmp_path,
        _verdict("v2", "2026-09-10T11:10:00Z", key="reviewer-2")
        + """
[[entries]]
kind = "key.revoke"
at = "2026-09-10T11:30:00Z"
payload = { key = "reviewer-2", effective_at = "2026-09-10T11:05:00Z", reason = "key material leaked" }
""",
    )
    try:
        r = _check(ledger, [2])
    finally:
        ledger.close()
    assert r["allowed"] is False and r["verdict"] is None
    first = r["reasons"][0]
    assert f"verdict (entry {ids['v2'][:16]}" in first, first
    assert "is not trusted: key reviewer-2 was revoked effective 2026-09-10T11:05:00" in first, first
    assert "is key" not in first, first
