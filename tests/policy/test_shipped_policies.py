"""Every shipped policy's fixture tests (``policies/``): the same runner as `ledger policy test`."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.policy.fixtures import discover_fixtures, run_fixture
from ledger.policy.loader import list_policies, load_policy
from ledger.service import Ledger

POLICY_DIR = Path(__file__).resolve().parents[2] / "policies"
FIXTURES = discover_fixtures(POLICY_DIR)


def test_every_shipped_policy_has_fixtures() -> None:
    names = [load_policy(str(p)).name for p in list_policies(POLICY_DIR)]
    assert {"backend-qualification", "evidence-acceptance", "routing-change"} <= set(names)
    for name in names:
        assert discover_fixtures(POLICY_DIR, name), f"policy {name} ships no fixture"


@pytest.mark.parametrize("path", FIXTURES, ids=[f"{p.parent.name}/{p.stem}" for p in FIXTURES])
def test_fixture(path: Path, tmp_path: Path) -> None:
    result = run_fixture(path, POLICY_DIR, workdir=tmp_path, init=Ledger.init)
    assert result.passed, "\n".join(result.failures)
