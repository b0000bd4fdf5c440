"""Several ``[[rules]]`` tables may share a rule name (one rule id reported for several kinds, each with its
own condition). The loader kept their ``against`` and ``differences`` by name, so the last table's
expression judged every table of that name: the health.probe ``before-launch`` rule was judged by the
gate.result one's ``against`` (found while fixing audit 26, F5)."""

from __future__ import annotations

from ledger.policy.loader import load_policy, rule_key


def test_each_rule_table_keeps_its_own_against_though_names_repeat() -> None:
    policy = load_policy("backend-qualification")
    tables = [rule for rule, _ in policy.rules if rule.name == "before-launch"]
    assert len(tables) == 2 and {tuple(t.kinds) for t in tables} == {("health.probe",), ("gate.result",)}
    sources = {tuple(t.kinds): policy.rule_against[rule_key(t)].source for t in tables}
    assert "probe_failed" in sources[("health.probe",)]
    assert "status == 'failed'" in sources[("gate.result",)]
    assert sources[("health.probe",)] != sources[("gate.result",)]
    for t in tables:  # every table's own expression, as the file states it
        assert policy.rule_against[rule_key(t)].source == t.against
