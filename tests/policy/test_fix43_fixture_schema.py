"""Policy fixture files are read by a strict schema (audit 36, f3): a misspelled expectation key
(``expect.verdcit``, ``expect.rejectd``, ``expect.alowed``) or a verdict word that is none of the policy
engine's (``not_verdict = "QUALIFED"``) was ignored, and the fixture passed whatever the policy decided.
And ``ledger policy test UNKNOWN`` said "0/0 fixtures pass" (exit 1) where ``ledger verdict --policy
UNKNOWN`` names the known policies (exit 2) (audit 36, f7)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ledger.errors import PolicyError
from ledger.policy.fixtures import discover_fixtures, run_fixture
from ledger.service import Ledger

REPO = Path(__file__).resolve().parents[2]
POLICY_DIR = REPO / "policies"
SHARED = POLICY_DIR / "fixtures" / "_shared"

_HEAD = f"""description = "a QUALIFIED campaign"
start = "2026-09-10T09:00:00Z"
include = ["{SHARED / "ready-campaign.toml"}", "{SHARED / "semantic-benchmark.toml"}"]

[keys]
collector = ["collector"]
reviewer = ["reviewer"]
operator = ["operator"]

[defaults.subject]
campaign = "vllm-embed"
backend = "vllm"
model = "Qwen3-Embedding-8B"
host = "gpu-box-1"
"""


def _fixture(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "fixtures" / "backend-qualification" / "t.toml"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(_HEAD + body)
    return p


def _run(p: Path, tmp_path: Path) -> Any:
    return run_fixture(p, POLICY_DIR, tmp_path, init=Ledger.init)


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ('[[verdicts]]\nexpect.verdcit = "INCONCLUSIVE"\n', r"verdicts\.0\.expect\.verdcit: unknown field"),
        ('[[verdicts]]\nexpect.rejectd = [{ entry = "benchmark", rule = "review-missing" }]\n',
         r"verdicts\.0\.expect\.rejectd: unknown field"),
        ('[[verdicts]]\nexpect.rejected = [{ entry = "benchmark", rul = "review-missing" }]\n',
         r"verdicts\.0\.expect\.rejected\.0\.rul: unknown field"),
        ('[[verdicts]]\nexpect.gates = { benchmark = "pass" }\n', r"verdicts\.0\.expect\.gates\.benchmark"),
        ('[[verdicts]]\nexpct.verdict = "INCONCLUSIVE"\n',
         r"verdicts\.0\.expect: Field required .*'verdicts\.0\.expct'"),
        ('[[verdict]]\nexpect.verdict = "INCONCLUSIVE"\n', r"verdict: unknown field"),
        ('[[checks]]\nsubject = { backend = "vllm" }\nnow = "2026-09-10T12:00:00Z"\nexpect.alowed = true\n',
         r"checks\.0\.expect\.alowed: unknown field"),
    ],
)  # fmt: skip
def test_a_fixture_with_a_misspelled_expectation_key_is_an_error_not_a_pass(
    tmp_path: Path, body: str, named: str
) -> None:
    """Regression (audit 36, f3): `expect.verdcit = "INCONCLUSIVE"` of a QUALIFIED campaign passed."""
    p = _fixture(tmp_path, body)
    with pytest.raises(PolicyError, match=rf"t\.toml:\d+: {named}"):
        _run(p, tmp_path)


@pytest.mark.parametrize("word", ["QUALIFED", "Qualified", "NOT QUALIFIED - PERFORMANCE", ""])
@pytest.mark.parametrize("key", ["verdict", "not_verdict"])
def test_a_fixture_expecting_an_unknown_verdict_word_is_an_error(tmp_path: Path, key: str, word: str) -> None:
    """Regression (audit 36, f3): `not_verdict = "QUALIFED"` held of every verdict, QUALIFIED included."""
    p = _fixture(tmp_path, f'[[verdicts]]\nexpect.{key} = "{word}"\n')
    with pytest.raises(PolicyError, match=rf"expect\.{key}: .*unknown verdict word .*known: 'QUALIFIED'"):
        _run(p, tmp_path)


def test_spelled_expectations_are_still_judged(tmp_path: Path) -> None:
    """The control: a right-spelled expectation that does not hold fails the fixture; one that holds
    passes."""
    wrong = _run(_fixture(tmp_path, '[[verdicts]]\nexpect.not_verdict = "QUALIFIED"\n'), tmp_path)
    assert not wrong.passed and "must not be 'QUALIFIED'" in wrong.failures[0]
    right = _run(_fixture(tmp_path, '[[verdicts]]\nexpect.verdict = "QUALIFIED"\n'), tmp_path)
    assert right.passed, right.failures


def test_every_shipped_fixture_reads_by_the_schema() -> None:
    from ledger.policy.fixtures import _load_spec

    paths = discover_fixtures(POLICY_DIR)
    assert len(paths) >= 19
    for p in paths:
        _load_spec(p)


def test_policy_test_of_an_unknown_policy_is_an_error_naming_it(cli: Callable[..., Any]) -> None:
    """Regression (audit 36, f7): `ledger policy test backend-qualificaton` said "0/0 fixtures pass" and
    exited 1."""
    r = cli("policy", "test", "backend-qualificaton")
    assert r.code == 2
    assert "unknown policy 'backend-qualificaton'" in r.err
    assert "known policies: backend-qualification, evidence-acceptance, routing-change" in r.err
    assert "fixtures pass" not in r.out


def test_policy_test_of_a_policy_that_does_not_load_is_an_error(tmp_path: Path) -> None:
    d = tmp_path / "policies"
    d.mkdir()
    (d / "broken.toml").write_text('[policy]\nname = "broken"\nkind = "acceptance"\nversio = 1\n')
    with pytest.raises(PolicyError, match="unknown field"):
        Ledger.policy_test(["broken"], d)
