"""A message template placeholder whose first name its context does not fill (issue 11).

Before: ``{parms[attempt_budget]}`` (a misspelt ``params``), ``{entry[kind]}`` in a rule's detail,
``{e[kind]}`` in a gate's `fail` (a gate is filled from ``evidence``, not one entry), a positional ``{}``,
or a brace that does not match loaded, and the message always printed ``?`` (or the template as written):
the name check read only placeholders whose first name was a variable it knew. Now every placeholder's
first name must be one its message is filled from (the loader's context names, one copy), and a template
that cannot be parsed is refused, naming file and line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.errors import PolicyError
from ledger.policy.conditions import template_names
from ledger.policy.loader import load_policy

QUAL, ROUTING = "backend-qualification", "routing-change"
BUDGET_DETAIL = (
    'detail = "launch attempt {e[derived][attempt]} is beyond the attempt budget of {params[attempt_budget]}'
)
# (the host gate's `missing` goes on to name the env snapshot too, fix 157: its opening is the anchor)
GATE_MISSING = 'missing = "no accepted host probe (post-reset device state is required)'
GATE_FAIL = 'fail = "no GPU visible on the host"'
ROUTE_FAIL = 'fail = "the verdict (entry {verdict[id]}) was recorded {verdict_age_text} ago;'


def _edit(d: Path, name: str, old: str, new: str) -> None:
    p = d / f"{name}.toml"
    text = p.read_text()
    assert old in text, old
    p.write_text(text.replace(old, new, 1))


def _refused(d: Path, name: str, old: str, new: str, match: str) -> str:
    _edit(d, name, old, new)
    with pytest.raises(PolicyError, match=match) as e:
        load_policy(name, d)
    msg = str(e.value)
    assert f"{name}.toml:" in msg, msg  # file and line
    return msg


def test_misspelt_params_in_a_rule_detail_loaded_and_printed_question_marks(policy_copy: Path) -> None:
    new = BUDGET_DETAIL.replace("{params[attempt_budget]}", "{parms[attempt_budget]}")
    msg = _refused(policy_copy, QUAL, BUDGET_DETAIL, new, match="parms")
    assert "did you mean 'params'" in msg, msg
    assert "always print '?'" in msg, msg


@pytest.mark.parametrize(
    ("old", "new", "name"),
    [
        (BUDGET_DETAIL, BUDGET_DETAIL.replace("{e[derived][attempt]}", "{entry[derived][attempt]}"), "entry"),
        # a gate's messages are filled from the evidence list, not one entry
        (GATE_MISSING, GATE_MISSING.replace("no accepted", "no accepted {e[kind]}"), "e"),
        (GATE_FAIL, GATE_FAIL.replace("no GPU", "no GPU {evidence_count}"), "evidence_count"),
        # positional placeholders are never filled
        (GATE_FAIL, GATE_FAIL.replace("no GPU", "no GPU {}"), ""),
        (GATE_FAIL, GATE_FAIL.replace("no GPU", "no GPU {0}"), "0"),
    ],
)
def test_placeholder_naming_nothing_of_its_context_is_refused(
    policy_copy: Path, old: str, new: str, name: str
) -> None:
    msg = _refused(policy_copy, QUAL, old, new, match="names nothing its message is filled from")
    assert "{" + name + "…}" in msg, msg


def test_routing_fail_naming_a_misspelt_context_name_is_refused(policy_copy: Path) -> None:
    new = ROUTE_FAIL.replace("{verdict_age_text}", "{verdict_age_txt}")
    msg = _refused(policy_copy, ROUTING, ROUTE_FAIL, new, match="verdict_age_txt")
    assert "did you mean 'verdict_age_text'" in msg, msg


def test_unmatched_brace_in_a_template_is_refused(policy_copy: Path) -> None:
    new = BUDGET_DETAIL.replace("{params[attempt_budget]}", "{params[attempt_budget]")
    _refused(policy_copy, QUAL, BUDGET_DETAIL, new, match="cannot be read")


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # the neighbours that stay valid: each context's own names, a literal brace, a format spec
        (GATE_FAIL, GATE_FAIL.replace("no GPU", "no GPU ({count} probes, {{literal}})")),
        (GATE_MISSING, GATE_MISSING.replace("no accepted", "no accepted {manifest[hostname]!r}")),
        (BUDGET_DETAIL, BUDGET_DETAIL.replace("{e[derived][attempt]}", "{e[id]:.12} {job[payload][job_id]}")),
    ],
)
def test_placeholders_of_the_context_still_load(policy_copy: Path, old: str, new: str) -> None:
    _edit(policy_copy, QUAL, old, new)
    load_policy(QUAL, policy_copy)


def test_routing_fail_texts_are_the_ones_routing_fills(policy_copy: Path) -> None:
    new = ROUTE_FAIL.replace("{verdict_age_text}", "{verdict_age_text} {verdict_withdrawn_text}")
    _edit(policy_copy, ROUTING, ROUTE_FAIL, new)
    load_policy(ROUTING, policy_copy)


def test_template_names_reads_first_names() -> None:
    assert template_names("a {e[payload][x]} b {params[y]!r} {count:d} {}") == ("e", "params", "count", "")
    assert template_names("{{literal}} only") == ()
    assert template_names("{e[kind]") is None


# --- audit 61 f3: `item` outside a for_each check; a placeholder nested in a format spec --------------------

IDENTITY_FAIL = 'fail = "no fresh /v1/models answer served the expected {request[subject][model]}'
IDENTITY_EXPR = 'expr = """probes.exists(p, p.payload.check == \'models\' && p.serves_model == true)'


def test_item_in_the_fail_of_a_routing_check_without_for_each_loaded_and_printed_question_marks(
    policy_copy: Path,
) -> None:
    """Regression (audit 61 f3): ``{item[id]:.16}`` in restoration-identity's `fail` (no `for_each`: no item
    is ever filled) loaded and printed ``?``."""
    new = IDENTITY_FAIL.replace("expected", "expected (newest probe {item[id]:.16})")
    msg = _refused(policy_copy, ROUTING, IDENTITY_FAIL, new, match="names nothing its message is filled from")
    assert "{item…}" in msg, msg


def test_item_in_the_cel_of_a_routing_check_without_for_each_is_refused(policy_copy: Path) -> None:
    new = IDENTITY_EXPR.replace('expr = """', 'expr = """item != null && ')
    _refused(policy_copy, ROUTING, IDENTITY_EXPR, new, match="item")


def test_item_in_a_for_each_checks_fail_still_loads(policy_copy: Path) -> None:
    load_policy(ROUTING, policy_copy)  # the shipped for_each checks read {item[...]}


@pytest.mark.parametrize("spec", ["{count:{wdth}}", "{count:>{width}.{prec}}"])
def test_a_placeholder_nested_in_a_format_spec_naming_nothing_is_refused(
    policy_copy: Path, spec: str
) -> None:
    """Regression (audit 61 f3): ``{count:{wdth}}`` loaded and rendered ``?``: the nested name was never
    read."""
    _refused(
        policy_copy, QUAL, GATE_FAIL, GATE_FAIL.replace("no GPU", f"{spec} no GPU"), match="names nothing"
    )


def test_a_placeholder_nested_in_a_format_spec_naming_the_context_loads(policy_copy: Path) -> None:
    _edit(policy_copy, QUAL, GATE_FAIL, GATE_FAIL.replace("no GPU", "{count:>{count}} no GPU"))
    load_policy(QUAL, policy_copy)


def test_template_names_reads_nested_spec_names() -> None:
    assert template_names("{count:{width}}") == ("count", "width")
    assert template_names("{count:{width") is None
