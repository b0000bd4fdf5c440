"""Issue 11, audit 50 f2, end to end: a policy whose benchmark bound names a figure no approved run records
is refused when it loads (PolicyError, exit 2, naming the param's line and the bound), and the valid ones
still load. NEEDS the loader call proposed in /tmp/fix63/other.md (``_check_bounds`` in
``ledger/policy/loader.py``, calling ``ledger.policy.bounds.bound_problems``)."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ledger.errors import PolicyError
from ledger.policy.loader import load_policy

REPO = Path(__file__).resolve().parents[2]
SHIPPED_BOUND = '"ttft_ms.p95@c4" = 2000'


def _policies(tmp_path: Path, old: str, new: str) -> Path:
    d = tmp_path / "pol"
    shutil.copytree(REPO / "policies", d)
    p = d / "backend-qualification.toml"
    text = p.read_text()
    assert old in text
    p.write_text(text.replace(old, new, 1))
    return d


@pytest.mark.parametrize(
    ("bound", "said"),
    [
        pytest.param('"ttft_ms.p95@c8" = 2000', "names level c8", id="level-not-approved"),
        pytest.param('"ttft_ms.P95@c4" = 2000', "did you mean 'ttft_ms.p95@c4'", id="stat-cased"),
        pytest.param('"ttft_ms.p95" = 2000', "no run of the approved benchmark records", id="level-dropped"),
        pytest.param('"ttft_ms.p95@c4" = "2000"', "must be a finite number", id="limit-text"),
    ],
)
def test_policy_bound_on_a_figure_no_approved_run_records_is_refused_at_load(
    tmp_path: Path, bound: str, said: str
) -> None:
    d = _policies(tmp_path, SHIPPED_BOUND, bound)
    with pytest.raises(PolicyError) as e:
        load_policy("backend-qualification", d)
    message = e.value.message
    line = next(
        i
        for i, t in enumerate((d / "backend-qualification.toml").read_text().splitlines(), 1)
        if t.startswith("benchmark_max")
    )
    assert f"backend-qualification.toml:{line}: params.benchmark_max: bound " in message, message
    assert said in message, message


def test_policy_test_cli_exits_2_on_a_bound_no_approved_run_records(
    tmp_path: Path, cli: Callable[..., Any]
) -> None:
    """The audit's reproducer: `ledger policy test --policy-dir` with the c8 bound (it judged the shipped
    QUALIFIED scenario NOT QUALIFIED — PERFORMANCE) now stops with exit 2, like other policy load errors."""
    d = _policies(tmp_path, SHIPPED_BOUND, '"ttft_ms.p95@c8" = 2000')
    r = cli("policy", "test", "backend-qualification", "--policy-dir", str(d), "--json")
    assert r.code == 2, (r.out, r.err)
    assert "ttft_ms.p95@c8" in r.err and "NOT QUALIFIED" not in r.out + r.err


@pytest.mark.parametrize(
    "bound",
    [
        '"ttft_ms.p95@c32" = 2000',
        '"e2e_ms.p99@c1" = 5000',
        '"client_stall_ms.max@c4" = 500',
        '"error_rate@c4" = 0',
    ],
)
def test_policy_bound_on_a_recorded_figure_still_loads(tmp_path: Path, bound: str) -> None:
    d = _policies(tmp_path, SHIPPED_BOUND, bound)
    params = load_policy("backend-qualification", d).params
    key = re.match(r'"([^"]+)"', bound)
    assert key is not None and key.group(1) in params["benchmark_max"]


def test_shipped_policies_still_load() -> None:
    policy = load_policy("backend-qualification", REPO / "policies")
    assert json.dumps(policy.params["benchmark_max"])
    assert load_policy("routing-change", REPO / "policies").name == "routing-change"
