"""The runtime-stability gate judges kernel-log GPU events by their class in the GPU-fault catalogue,
derived by the policy engine (never the entry's own claim): informational passes, a fault fails, an
unknown code fails closed with its own reason, an Xid 154 recovery action other than None fails."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from ledger.policy.fixtures import build_fixture_ledger
from ledger.service import Ledger

POLICY_DIR = Path(__file__).resolve().parents[2] / "policies"
FIXTURES = POLICY_DIR / "fixtures"

BASE = FIXTURES / "backend-qualification" / "xid63_informational_row_remap.toml"
SUBJECT = {"campaign": "vllm-embed", "backend": "vllm", "model": "Qwen3-Embedding-8B", "host": "gpu-box-1"}
UNKNOWN_REASON = "does not know — an unknown Xid code means contact support"
FAULT_REASON = "records a GPU fault (by the GPU-fault catalogue"
ACTION_REASON = "Xid 154 recovery action other than None"


def _toml_inline(ev: dict[str, Any]) -> str:
    return "{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in ev.items()) + " }"


def _verdict(tmp_path: Path, events: list[dict[str, Any]]) -> dict[str, Any]:
    """The QUALIFIED informational fixture with its kernel log's events replaced by ``events``."""
    root = tmp_path / "fixtures"
    shutil.copytree(FIXTURES / "_shared", root / "_shared")
    text = BASE.read_text()
    start = text.index("payload = { source")
    end = text.index("] }", start) + 3
    body = ",\n  ".join(_toml_inline(e) for e in events)
    fixture = root / "backend-qualification" / "variant.toml"
    fixture.parent.mkdir(parents=True)
    fixture.write_text(
        text[:start] + f'payload = {{ source = "journalctl", events = [\n  {body},\n] }}' + text[end:]
    )
    ledger, _spec, _b = build_fixture_ledger(fixture, tmp_path / "home", POLICY_DIR, init=Ledger.init)
    return ledger.evaluate_verdict(SUBJECT)


def _xid(code: int, message: str, **extra: Any) -> dict[str, Any]:
    return {
        "time": "2026-09-10T10:03:00Z",
        "kind": "nvrm-xid",
        "xid": code,
        "device": "PCI:0000:3b:00",
        "message": f"NVRM: Xid (PCI:0000:3b:00): {code}, {message}",
        **extra,
    }


def _stability(result: dict[str, Any]) -> dict[str, Any]:
    return next(g for g in result["gates"] if g["name"] == "runtime-stability")


def test_informational_xid_is_not_a_fault(tmp_path: Path) -> None:
    result = _verdict(
        tmp_path, [_xid(63, "Row Remapper: New row marked for remapping, reset gpu to activate.")]
    )
    assert result["verdict"] == "QUALIFIED"
    assert _stability(result)["status"] == "passed"


def test_xid79_is_a_fault_even_when_the_entry_claims_informational(tmp_path: Path) -> None:
    result = _verdict(
        tmp_path, [_xid(79, "pid=1, name=vllm, GPU has fallen off the bus.", fault_class="informational")]
    )
    assert result["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY"
    gate = _stability(result)
    assert gate["status"] == "failed"
    assert FAULT_REASON in gate["reason"]
    assert UNKNOWN_REASON not in gate["reason"]


def test_xid999_unknown_fails_closed_with_its_reason(tmp_path: Path) -> None:
    result = _verdict(tmp_path, [_xid(999, "pid=1, name=vllm, new", fault_class="informational")])
    assert result["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY"
    gate = _stability(result)
    assert UNKNOWN_REASON in gate["reason"]
    assert FAULT_REASON not in gate["reason"]  # its own reason, not lumped with the known faults


@pytest.mark.parametrize(
    ("action", "passes"),
    [("0x0 (None)", True), ("0x1 (GPU Reset Required)", False), ("0x9 (Something New)", False)],
)
def test_xid154_alone_is_judged_by_its_recovery_action(tmp_path: Path, action: str, passes: bool) -> None:
    result = _verdict(
        tmp_path, [_xid(154, f"GPU recovery action changed from 0x2 (Node Reboot Required) to {action}")]
    )
    gate = _stability(result)
    assert (gate["status"] == "passed") is passes, gate
    if not passes:
        assert ACTION_REASON in gate["reason"]


def test_an_unreadable_xid154_fails(tmp_path: Path) -> None:
    result = _verdict(tmp_path, [_xid(154, "GPU recovery action changed (format unknown)")])
    assert _stability(result)["status"] == "failed"
    assert ACTION_REASON in _stability(result)["reason"]


def test_a_catalogue_v2_nvlink5_xid_is_judged_by_its_class(tmp_path: Path) -> None:
    """Xid 145 (NVLINK: RLW Error, added in catalogue version 2) is class interconnect: a fault."""
    result = _verdict(tmp_path, [_xid(145, "NVLINK: RLW Error")])
    gate = _stability(result)
    assert result["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY"
    assert FAULT_REASON in gate["reason"] and UNKNOWN_REASON not in gate["reason"]


def test_a_catalogue_v2_informational_xid_passes(tmp_path: Path) -> None:
    """Xid 162 (power smoothing capability re-engaged) is informational: not a fault."""
    result = _verdict(tmp_path, [_xid(162, "Power Smoothing HW Circuitry capability reengaged")])
    assert result["verdict"] == "QUALIFIED"


def test_an_unused_xid_row_fails_closed_as_unknown(tmp_path: Path) -> None:
    """Xid 47 is an "Unused" row of NVIDIA's table (CONTACT_SUPPORT): not listed, so unknown."""
    gate = _stability(_verdict(tmp_path, [_xid(47, "ROBUST_CHANNEL_NVENC0_ERROR")]))
    assert gate["status"] == "failed" and UNKNOWN_REASON in gate["reason"]


@pytest.mark.parametrize(
    "claim",
    [
        pytest.param({"xid": 63}, id="xid-field-says-63"),
        pytest.param({"xid": 154}, id="xid-field-says-154"),
        pytest.param({"kind": "gpu-reset-succeeded", "xid": None}, id="kind-says-reset-succeeded"),
    ],
)
def test_an_xid79_line_recorded_as_something_benign_fails_closed(
    tmp_path: Path, claim: dict[str, Any]
) -> None:
    """Regression: the class was looked up from the event's `xid`/`kind` fields alone, so the line
    "NVRM: Xid (…): 79, … fallen off the bus" recorded with xid 63 (informational) passed; the line is read
    again and a code or kind that disagrees with it is unknown."""
    ev = _xid(79, "pid=1, name=vllm, GPU has fallen off the bus.")
    ev.update(claim)
    if ev["xid"] is None:
        del ev["xid"]
    result = _verdict(tmp_path, [ev])
    gate = _stability(result)
    assert gate["status"] == "failed", gate
    assert UNKNOWN_REASON in gate["reason"]
    assert result["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY"
