"""Registered codes and their documentation agree: rejection rules (docs/POLICY.md) and verify problems
(docs/RELIABILITY.md) are each one enum and one table."""

from __future__ import annotations

import re
from pathlib import Path

from ledger.policy.rules import CREDIT_ONLY, CREDIT_ONLY_BY_CLAIM, RULES, TRUST_RULES, Rule
from ledger.trust import Fault
from ledger.verify import Problem

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _table_codes(text: str, header: str) -> list[str]:
    """The backticked codes of the first column of the table whose header row starts with ``header``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    codes: list[str] = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        first = line.split("|")[1].strip()
        if first.startswith("`[["):
            continue  # a policy's own [[rules]]: data-driven names, not built-in rules
        codes.extend(re.findall(r"`([a-z0-9-]+)`", first))
    return codes


def test_policy_doc_lists_every_rejection_rule_in_order() -> None:
    text = (DOCS / "POLICY.md").read_text(encoding="utf-8")
    assert _table_codes(text, "| rule | excludes |") == [str(r) for r in Rule]


def test_policy_doc_marks_exactly_the_rules_that_only_withhold_credit() -> None:
    """The table's last column says what becomes of a failure a rule excludes: the rules marked "counts
    against" are ``CREDIT_ONLY`` (the filter keeps their failures), those marked both ways
    ``CREDIT_ONLY_BY_CLAIM``, every other built-in one "withdrawn"."""
    lines = (DOCS / "POLICY.md").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| rule | excludes |"))
    marked: dict[str, str] = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0].startswith("`[["):
            continue
        for code in re.findall(r"`([a-z0-9-]+)`", cells[0]):
            marked[code] = cells[-1]
    assert set(marked) == {str(r) for r in Rule}
    assert {c for c, m in marked.items() if m == "counts against"} == {str(r) for r in CREDIT_ONLY}
    both = "withdrawn (both say after the end) / counts against (only one says so)"
    assert {c for c, m in marked.items() if m == both} == {str(r) for r in CREDIT_ONLY_BY_CLAIM}
    rest = {str(r) for r in CREDIT_ONLY | CREDIT_ONLY_BY_CLAIM}
    assert {m for c, m in marked.items() if c not in rest} == {"withdrawn"}


def test_rule_descriptions_cover_every_rule() -> None:
    assert list(RULES) == [str(r) for r in Rule]
    assert all(RULES.values())


def test_every_trust_fault_has_a_rule() -> None:
    assert set(TRUST_RULES) == set(Fault)


def test_reliability_doc_lists_every_verify_problem() -> None:
    text = (DOCS / "RELIABILITY.md").read_text(encoding="utf-8")
    assert sorted(_table_codes(text, "| code | found when |")) == sorted(str(p) for p in Problem)
