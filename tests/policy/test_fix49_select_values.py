"""A gate's `select` value is one its field can hold, refused at load otherwise (audit 40, f3): the
api-readiness gate's `"payload.check" = "health"` edited to `"helth"` loaded, selected no /health probe, and
a campaign whose /health failed after readiness was QUALIFIED. The loader checked the select key only; it
now types each `payload.<field>` value as ingest does (the kind's payload model, strict), a list as
selection reads it (the field's whole value where it holds lists, else "any of": each item checked)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ledger.errors import PolicyError
from ledger.policy.loader import load_policy
from ledger.policy.model import Gate

REPO = Path(__file__).resolve().parents[2]
POLICY_DIR = REPO / "policies"
QUAL = "backend-qualification"
READINESS = '{ kind = "health.probe", "payload.check" = "health" }'


def _edit(d: Path, old: str, new: str) -> None:
    p = d / f"{QUAL}.toml"
    text = p.read_text()
    assert text.count(old) >= 1, old
    p.write_text(text.replace(old, new, 1))


def _gate(*select: dict[str, Any]) -> Gate:
    return Gate.model_validate(
        {
            "name": "probe-gate",
            "verdict": "NOT QUALIFIED — RUNTIME RELIABILITY",
            "select": list(select),
            "checks": [{"expr": "count > 0", "fail": "no probe"}],
        }
    )


def test_a_mistyped_select_value_is_refused_at_load_not_selecting_nothing(policy_copy: Path) -> None:
    """Regression (audit 40, f3): `"payload.check" = "helth"` loaded (`policy show` rc 0) and switched the
    api-readiness check off; `check` is a closed set at ingest, so no entry could ever be selected."""
    load_policy(QUAL, policy_copy)  # the shipped selection loads
    _edit(policy_copy, READINESS, READINESS.replace('"health" }', '"helth" }'))
    with pytest.raises(PolicyError) as e:
        load_policy(QUAL, policy_copy)
    msg = str(e.value)
    assert f"{QUAL}.toml:" in msg
    assert "gate 'api-readiness'" in msg  # the gate
    assert "'payload.check' = 'helth'" in msg  # the key and the value
    for word in ("health", "models", "completion", "structured", "sequential", "restoration"):
        assert repr(word) in msg  # the allowed values


def test_the_mistyped_select_value_refuses_policy_show(policy_copy: Path, cli: Any) -> None:
    """The auditor's command: `ledger policy show` of the edited copy fails (it printed the policy)."""
    _edit(policy_copy, READINESS, READINESS.replace('"health" }', '"helth" }'))
    r = cli("policy", "show", QUAL, "--policy-dir", str(policy_copy))
    assert r.code != 0
    assert "helth" in r.err


@pytest.mark.parametrize(
    ("select", "match"),
    [
        # a bool field given the string "true" (TOML quotes): ingest refuses "true" for a bool
        ({"kind": "health.probe", "payload.ok": "true"}, r"'payload.ok' = 'true'.*allowed: a valid boolean"),
        ({"kind": "health.probe", "payload.sleeping": "false"}, r"'payload.sleeping' = 'false'"),
        # an int field given the string "1"; a status out of the range ingest takes
        ({"kind": "health.probe", "payload.http_status": "503"}, r"'payload.http_status' = '503'"),
        ({"kind": "health.probe", "payload.http_status": 42}, r"'payload.http_status' = 42.*100"),
        # a list ("any of") with one bad item names the item
        ({"kind": "health.probe", "payload.check": ["health", "modles"]},
         r"'payload.check' = 'modles' \(in \['health', 'modles'\]\).*'models'"),
        ({"kind": "health.probe", "payload.check": []}, r"'payload.check' = \[\]"),
        # a closed set of another kind; a wrong case is a wrong value
        ({"kind": "gate.result", "payload.status": "fail"}, r"'payload.status' = 'fail'.*'failed'"),
        ({"kind": "health.probe", "payload.check": "Health"}, r"'payload.check' = 'Health'"),
        # a string field given a number; a min_length field given ""
        ({"kind": "health.probe", "payload.endpoint": 200}, r"'payload.endpoint' = 200"),
        ({"kind": "gate.result", "payload.gate": ""}, r"'payload.gate' = ''"),
        # nested where the model types it: a dict of counts, a dict of strings
        ({"kind": "gate.result", "payload.counts.requests": "1"}, r"'payload.counts.requests' = '1'"),
        ({"kind": "env.snapshot", "payload.env.CUDA_VISIBLE_DEVICES": 0},
         r"'payload.env.CUDA_VISIBLE_DEVICES' = 0.*string"),
    ],
)  # fmt: skip
def test_a_select_value_its_field_cannot_hold_is_refused(select: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=rf"gate 'probe-gate': select {match}"):
        _gate(select)


@pytest.mark.parametrize(
    "select",
    [
        {"kind": "health.probe", "payload.check": "restoration"},
        {"kind": "health.probe", "payload.check": ["health", "models"]},  # any of
        {"kind": "health.probe", "payload.ok": False},
        {"kind": "health.probe", "payload.http_status": 503},
        {"kind": "health.probe", "payload.http_status": [500, 503]},
        {"kind": "health.probe", "payload.latencies_ms": [1.5, 2]},  # a list field's whole value
        {"kind": "gate.result", "payload.gate": "benchmark"},
        {"kind": "gate.result", "payload.counts.requests": 1},
        {"kind": "env.snapshot", "payload.env.CUDA_VISIBLE_DEVICES": "0"},
        # untyped by the model (Any): left as written, whatever the value
        {"kind": "health.probe", "payload.details.anything": "x"},
        {"kind": "health.probe", "payload.details.anything": 1},
        # not payload fields: typed by no payload model, unchanged
        {"kind": "health.probe", "derived.ok": False},
        {"kind": "kernel.log", "in_subject": True},
    ],
)
def test_a_select_value_its_field_can_hold_loads(select: dict[str, Any]) -> None:
    assert _gate(select).select == [select]


def test_every_shipped_policy_still_loads_with_its_select_values() -> None:
    """Every value the shipped policies select on is one its field can hold."""
    names = sorted(p.stem for p in POLICY_DIR.glob("*.toml"))
    assert QUAL in names
    selected = 0
    for name in names:
        policy = load_policy(name, POLICY_DIR)
        selected += sum(len(g.spec.select) for g in getattr(policy, "gates", []))
    assert selected >= 10  # the qualification's gates select on payload values
