"""The policy load name check: its gaps and its false refusals (issue 11, audit 55 f3-f7).

Before:
- f7: reusing a macro variable anywhere in an expression (an inner
  ``x.payload.latencies_ms.all(e, e >= 0.0)``) switched off the check of every ``e`` read of the whole
  expression: a misspelt ``'probe_faild' in e.derived`` loaded, and the check always held. Now a macro
  binds its variable inside its own parentheses only (``conditions._macro_scopes``): outside them the name
  is what it was, and read as any other.
- f6: the benchmark-bounds check read only the qualification file's own ``[params]``: a bound its acceptance
  policy sets, on a level the qualification does not approve, loaded and failed every engine as "figure
  missing". Now the merged params (the ones the policy runs with) are checked.
- f3: an optional param guarded in a rule's ``when`` could not be printed in that rule's ``detail``: refused.
  Now a guard in an item's CEL (a rule's ``when``; a check's ``expr``/``each``; a gate's ``require``, a
  requirement's ``expr``) counts for that item's templates.
- f4: ``{e.derived.attempt}`` (attribute syntax) passed the check but always printed ``?``: refused now,
  naming the key syntax.
- f5: a subject field outside ``SUBJECT_FIELDS`` (recorded with a warning) could not be read by any policy.
  Now a policy declares the further fields it reads (``[policy] subject_fields``); a misspelling of a known
  field (or a declared near-spelling of one) still stops at load.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.errors import PolicyError
from ledger.policy.conditions import Read, free_names, paths_read, template_attribute_fields
from ledger.policy.loader import load_policy

QUAL, ACC = "backend-qualification", "evidence-acceptance"
PROBE_CHECK = 'expr = "evidence.exists(e, !e.derived.probe_failed)"'
BUDGET_WHEN = 'when = "e.derived.attempt > params.attempt_budget"'
BUDGET_DETAIL = 'detail = "launch attempt {e[derived][attempt]}'
HEADER = 'acceptance = "evidence-acceptance"\n'


def _edit(d: Path, name: str, *pairs: tuple[str, str]) -> None:
    p = d / f"{name}.toml"
    text = p.read_text()
    for old, new in pairs:
        assert old in text, old
        text = text.replace(old, new, 1)
    p.write_text(text)


def _loads(d: Path, name: str, *pairs: tuple[str, str], load: str = QUAL) -> None:
    _edit(d, name, *pairs)
    load_policy(load, d)


def _refused(d: Path, name: str, *pairs: tuple[str, str], match: str, load: str = QUAL) -> str:
    _edit(d, name, *pairs)
    with pytest.raises(PolicyError, match=match) as e:
        load_policy(load, d)
    msg = str(e.value)
    assert ".toml:" in msg, msg  # a file and a line in it
    return msg


# --- f7: a macro variable is bound inside its own macro only ---------------------------------------------


def test_e_reused_in_another_macro_switched_off_the_check_of_every_e_read(policy_copy: Path) -> None:
    """Regression: the misspelt fact loaded once `e` was rebound in another macro of the expression."""
    new = (
        "expr = \"evidence.exists(e, !('probe_faild' in e.derived) || !e.derived.probe_faild) && "
        'evidence.exists(x, x.payload.latencies_ms.all(e, e >= 0.0))"'
    )
    msg = _refused(policy_copy, QUAL, (PROBE_CHECK, new), match="no such derived fact")
    assert "probe_faild" in msg and "did you mean 'probe_failed'" in msg


def test_e_reused_in_another_macro_still_loads_spelled_right(policy_copy: Path) -> None:
    new = (
        'expr = "evidence.exists(e, !e.derived.probe_failed) && '
        'evidence.exists(x, x.payload.latencies_ms.all(e, e >= 0.0))"'
    )
    _loads(policy_copy, QUAL, (PROBE_CHECK, new))


def test_outer_variable_after_an_inner_rebinding_macro_closes_is_checked(policy_copy: Path) -> None:
    """The same name rebound inside, read again after the inner macro's parenthesis: the outer element."""
    new = 'expr = "evidence.exists(e, e.payload.latencies_ms.all(e, e >= 0.0) && !e.derived.probe_faild)"'
    _refused(policy_copy, QUAL, (PROBE_CHECK, new), match="probe_faild")


def test_receiver_of_a_macro_rebinding_e_was_not_checked(policy_copy: Path) -> None:
    """`e.payload.latencis_ms.all(e, …)`: the receiver is read of the outer `e` (a rule's entry)."""
    new = 'when = "e.derived.attempt > params.attempt_budget || e.payload.latencis_ms.all(e, e > 0.0)"'
    msg = _refused(policy_copy, QUAL, (BUDGET_WHEN, new), match="no field 'latencis_ms'")
    assert "did you mean 'latencies_ms'" in msg
    # the rule's root `e` rebound, and read again after the macro: the rule's entry
    again = 'when = "e.derived.gpu_events.exists(e, e == 1) || e.derived.attemt > params.attempt_budget"'
    _refused(policy_copy, QUAL, (new, again), match="attemt")


def test_e_rebound_in_a_rule_loads_spelled_right(policy_copy: Path) -> None:
    new = (
        'when = "e.derived.attempt > params.attempt_budget || '
        '(has(e.payload.latencies_ms) && e.payload.latencies_ms.all(e, e > 1e9))"'
    )
    _loads(policy_copy, QUAL, (BUDGET_WHEN, new))


def test_macro_variable_used_outside_its_macro_loaded(policy_copy: Path) -> None:
    """`v` read after its macro closed is a context variable no context holds: CEL fails only when
    evaluation reaches it. Before, a binding anywhere hid every use of the name."""
    assert free_names("evidence.exists(v, v.x) || v.y") == frozenset({"evidence", "v"})
    assert free_names("evidence.exists(v, v.x)") == frozenset({"evidence"})
    new = 'expr = "evidence.exists(v, !v.derived.probe_failed) || v.derived.ok"'
    _refused(policy_copy, QUAL, (PROBE_CHECK, new), match="reads 'v', which its context does not have")


@pytest.mark.parametrize(
    ("source", "reads"),
    [
        # the receiver is the outer `e`; inside the parentheses `e` is an event (not an entry)
        ("e.payload.events.exists(e, e.kind == 'x')", [Read("e", ("payload", "events"))]),
        (
            "e.payload.events.exists(e, e.kind == 'x') && e.derived.ok",
            [Read("e", ("payload", "events")), Read("e", ("derived", "ok"))],
        ),
        # an element of the list, rebound inside by a nested macro, is the element again after it
        (
            "evidence.exists(e, e.payload.xs.all(e, e > 0) && e.derived.ok)",
            [Read("evidence[]", ("payload", "xs")), Read("evidence[]", ("derived", "ok"))],
        ),
        # two macros binding the same name: each its own
        (
            "evidence.exists(e, e.derived.ok) && evidence.all(e, has(e.payload.x))",
            [Read("evidence[]", ("derived", "ok")), Read("evidence[]", ("payload", "x"), "has")],
        ),
        # a string holding brackets is one token
        ("evidence.exists(e, e.payload.text == ')(')", [Read("evidence[]", ("payload", "text"))]),
        (
            "params.xs.map(params, params + 1).size() > params.n",
            [Read("params", ("xs",)), Read("params", ("n",))],
        ),
    ],
)
def test_the_paths_a_condition_reads_with_scoped_macros(source: str, reads: list[Read]) -> None:
    assert list(paths_read(source, {"e": "e", "params": "params"}, {"evidence": "evidence[]"}) or ()) == reads


@pytest.mark.parametrize("source", ["evidence.exists(e, e.derived.ok", "evidence.exists(e, e.x])", "(a))"])
def test_brackets_that_do_not_match_are_not_read_as_nothing(source: str) -> None:
    assert paths_read(source, {"e": "e"}, {"evidence": "evidence[]"}) is None
    assert free_names(source) is None


def test_an_expression_whose_reads_cannot_be_told_is_refused(policy_copy: Path) -> None:
    new = 'expr = "evidence.exists(e, !e.derived.probe_faild"'
    _refused(policy_copy, QUAL, (PROBE_CHECK, new), match="CEL syntax error|cannot be told")


# --- f6: the bounds are checked on the params the policy runs with ----------------------------------------


def _qual_without_bounds(d: Path, levels: str = "[1, 4, 32]") -> None:
    p = d / f"{QUAL}.toml"
    lines = [ln for ln in p.read_text().splitlines() if not ln.startswith("benchmark_max =")]
    p.write_text(
        "\n".join(lines).replace("benchmark_concurrency = [1, 4, 32]", f"benchmark_concurrency = {levels}")
    )


def _acc_params(d: Path, text: str) -> None:
    _edit(d, ACC, ("[params]\n", f"[params]\n{text}\n"))


def test_a_bound_the_acceptance_policy_sets_was_not_checked_against_the_approved_levels(
    policy_copy: Path,
) -> None:
    """Regression (audit 55 f6): bounds at c4 from the acceptance policy; the qualification approves 1, 8,
    32."""
    _qual_without_bounds(policy_copy, "[1, 8, 32]")
    _acc_params(policy_copy, 'benchmark_max = { "ttft_ms.p95@c4" = 2000, "error_rate" = 0 }')
    with pytest.raises(PolicyError, match="names level c4") as e:
        load_policy(QUAL, policy_copy)
    msg = str(e.value)
    assert f"{QUAL}.toml:" in msg and f"{ACC}.toml:" in msg  # where it runs, and where the bound is written
    assert "params.benchmark_max" in msg and "benchmark_concurrency" in msg


def test_a_bound_the_acceptance_policy_sets_loads_on_an_approved_level(policy_copy: Path) -> None:
    _qual_without_bounds(policy_copy, "[1, 8, 32]")
    _acc_params(policy_copy, 'benchmark_max = { "ttft_ms.p95@c8" = 2000, "error_rate" = 0 }')
    policy = load_policy(QUAL, policy_copy)
    assert policy.params["benchmark_max"] == {"ttft_ms.p95@c8": 2000, "error_rate": 0}


def test_the_qualifications_own_bounds_replace_the_acceptance_policys(policy_copy: Path) -> None:
    """A bound table the qualification sets replaces the acceptance policy's whole (as params merge): the
    acceptance policy's c8 bound is not what runs, and is not refused."""
    _acc_params(policy_copy, 'benchmark_max = { "ttft_ms.p95@c8" = 2000 }')
    assert "ttft_ms.p95@c4" in load_policy(QUAL, policy_copy).params["benchmark_max"]


def test_levels_from_the_acceptance_policy_check_the_qualifications_bounds(policy_copy: Path) -> None:
    """The other way round: levels set only by the acceptance policy, bounds by the qualification."""
    p = policy_copy / f"{QUAL}.toml"
    p.write_text(
        "\n".join(ln for ln in p.read_text().splitlines() if not ln.startswith("benchmark_concurrency ="))
    )
    _acc_params(policy_copy, "benchmark_concurrency = [1, 8, 32]")
    with pytest.raises(PolicyError) as e:
        load_policy(QUAL, policy_copy)
    msg = str(e.value)
    assert "names level c4" in msg and f"{QUAL}.toml:" in msg


def test_bounds_with_no_levels_anywhere_are_refused(policy_copy: Path) -> None:
    p = policy_copy / f"{QUAL}.toml"
    p.write_text(
        "\n".join(ln for ln in p.read_text().splitlines() if not ln.startswith("benchmark_concurrency ="))
    )
    with pytest.raises(PolicyError, match="is not a list of concurrency levels"):
        load_policy(QUAL, policy_copy)


def test_an_acceptance_policy_alone_is_checked_against_its_own_levels(policy_copy: Path) -> None:
    """Loaded alone, an acceptance policy that sets bounds and levels is checked on its own; bounds without
    levels wait for the policy that uses it (that one supplies the levels, and the merged check runs)."""
    _acc_params(policy_copy, 'benchmark_max = { "ttft_ms.p95@c8" = 2000 }')
    load_policy(ACC, policy_copy)  # no levels of its own: checked with each policy using it
    _acc_params(policy_copy, "benchmark_concurrency = [1, 4]")
    with pytest.raises(PolicyError, match=rf"{ACC}\.toml:\d+: params\.benchmark_max: bound 'ttft_ms.p95@c8'"):
        load_policy(ACC, policy_copy)


# --- f3: a param guarded in the item's own CEL may be printed in its templates ---------------------------

OWNER_WHEN = "when = \"'budget_owner' in params && e.derived.attempt > params.attempt_budget\""
OWNER_DETAIL = 'detail = "(ask {params[budget_owner]}) launch attempt {e[derived][attempt]}'


def test_optional_param_guarded_in_when_could_not_be_printed_in_detail(policy_copy: Path) -> None:
    """Regression (audit 55 f3): the detail renders only where `when` held, and `when` tested the param."""
    _loads(policy_copy, QUAL, (BUDGET_WHEN, OWNER_WHEN), (BUDGET_DETAIL, OWNER_DETAIL))


def test_unguarded_param_in_a_template_is_still_refused(policy_copy: Path) -> None:
    msg = _refused(
        policy_copy, QUAL, (BUDGET_DETAIL, OWNER_DETAIL), match="template reads `params.budget_owner`"
    )
    assert "the policy sets no such param" in msg


def test_guard_of_a_misspelt_param_guards_nothing_else(policy_copy: Path) -> None:
    when = OWNER_WHEN.replace("'budget_owner'", "'budget_ownr'")
    _refused(
        policy_copy, QUAL, (BUDGET_WHEN, when), (BUDGET_DETAIL, OWNER_DETAIL), match="params.budget_owner"
    )


def test_guard_in_another_rule_does_not_guard_this_rules_template(policy_copy: Path) -> None:
    other_when = "when = \"'hostname' in manifest && e.payload.hostname != manifest.hostname\""
    guarded = other_when.replace('when = "', "when = \"'budget_owner' in params && ")
    _refused(
        policy_copy, QUAL, (other_when, guarded), (BUDGET_DETAIL, OWNER_DETAIL), match="params.budget_owner"
    )


def test_guard_in_a_checks_expr_or_each_covers_its_fail_and_detail(policy_copy: Path) -> None:
    fail = 'fail = "the bounded completion did not answer exactly {params[control_answer]}"'
    each = 'each = "!e.derived.probe_failed"'
    detail = 'detail = "probe {e[id]:.12} (ok = {e[payload][ok]}, HTTP {e[payload][http_status]}) answered'
    expr = "expr = \"!('owner' in params) || evidence.exists(e, !e.derived.probe_failed)\""
    _loads(
        policy_copy,
        QUAL,
        (PROBE_CHECK, expr),
        (fail, fail.replace("exactly", "exactly (ask {params[owner]})")),
    )
    _loads(
        policy_copy,
        QUAL,
        (each, "each = \"'owner2' in params && !e.derived.probe_failed\""),
        (detail, detail.replace("probe {", "({params[owner2]}) probe {")),
    )
    # the check's guard is no guard of another check's template
    _refused(
        policy_copy,
        QUAL,
        ('fail = "no GPU visible on the host"', 'fail = "no GPU visible on the host ({params[owner]})"'),
        match="params.owner",
    )


REQ_MISSING = 'missing = "the accepted host probes of this host name more than one machine'
# (its host probes only: the host gate selects env snapshots and host results beside them, fix 157)
REQ_EXPR = (
    "expr = \"evidence.all(e, e.kind != 'host.probe' || "
    "evidence.all(f, f.kind != 'host.probe' || e.payload.hostname == f.payload.hostname))\""
)


def test_guard_in_a_requirement_covers_its_missing(policy_copy: Path) -> None:
    _loads(
        policy_copy,
        QUAL,
        (REQ_EXPR, REQ_EXPR.replace('expr = "', "expr = \"!('owner' in params) || ")),
        (REQ_MISSING, REQ_MISSING.replace("the accepted", "({params[owner]}) the accepted")),
    )
    # … and not the gate's own `missing` (filled where `require` failed, or no evidence was selected)
    gate_missing = 'missing = "no accepted host probe (post-reset device state is required)'
    _refused(
        policy_copy,
        QUAL,
        (gate_missing, gate_missing.replace("no accepted", "({params[owner]}) no accepted")),
        match="params.owner",
    )


def test_guard_in_a_gates_require_covers_its_missing(policy_copy: Path) -> None:
    require = "require = \"evidence.exists(e, e.kind == 'engine.launch')\""
    missing = 'missing = "no accepted engine launch"'
    _loads(
        policy_copy,
        QUAL,
        (require, "require = \"'owner' in params && evidence.exists(e, e.kind == 'engine.launch')\""),
        (missing, 'missing = "no accepted engine launch (ask {params[owner]})"'),
    )


# --- f4: attribute syntax in a template always prints '?' -----------------------------------------------


@pytest.mark.parametrize(
    ("template", "keyed"),
    [
        ("{e.derived.attempt}", "{e[derived][attempt]}"),
        ("{params.attempt_budget}", "{params[attempt_budget]}"),
        ("{e[derived].attempt}", "{e[derived][attempt]}"),  # mixed
        ("{e.kind}", "{e[kind]}"),
    ],
)
def test_template_in_attribute_syntax_loaded_and_printed_question_marks(
    policy_copy: Path, template: str, keyed: str
) -> None:
    """Regression (audit 55 f4): the placeholder always rendered '?' (templates are filled from maps)."""
    new = f'detail = "launch attempt {template}'
    msg = _refused(policy_copy, QUAL, (BUDGET_DETAIL, new), match="attribute syntax")
    assert f"write {keyed}" in msg


def test_template_in_key_syntax_still_loads(policy_copy: Path) -> None:
    new = 'detail = "launch attempt {e[derived][attempt]!r:>4} of {params[attempt_budget]}'
    _loads(policy_copy, QUAL, (BUDGET_DETAIL, new))
    assert template_attribute_fields("{e[id]:.12} {x} {} {{e.literal}}") == ()


def test_attribute_syntax_refused_in_a_gate_template(policy_copy: Path) -> None:
    fail = 'fail = "no GPU visible on the host"'
    _refused(
        policy_copy, QUAL, (fail, 'fail = "no GPU visible on the host ({params.x})"'), match="write {params"
    )


def test_attribute_syntax_refused_in_a_routing_template(policy_copy: Path) -> None:
    route = 'fail = "the current verdict for {request[subject_text]}'
    _refused(
        policy_copy,
        "routing-change",
        (route, 'fail = "the current verdict for {request.subject_text}'),
        match="write {request\\[subject_text\\]}",
        load="routing-change",
    )


# --- f5: a subject field the ledger records outside SUBJECT_FIELDS ---------------------------------------

REGION_WHEN = (
    'when = "e.derived.attempt > params.attempt_budget || '
    "(has(e.subject.region) && e.subject.region == 'eu-test')\""
)


def test_subject_field_outside_the_known_ones_could_not_be_read(policy_copy: Path) -> None:
    """Regression (audit 55 f5): declared, the field is read (in CEL and in a select)."""
    _loads(policy_copy, QUAL, (HEADER, HEADER + 'subject_fields = ["region"]\n'), (BUDGET_WHEN, REGION_WHEN))
    sel = '{ kind = "engine.launch" }, { kind = "health.probe", "payload.check" = "health" }'
    _loads(policy_copy, QUAL, (sel, sel.replace('"health" }', '"health", "subject.region" = "eu-west" }')))


def test_undeclared_subject_field_is_refused_naming_the_declaration(policy_copy: Path) -> None:
    msg = _refused(policy_copy, QUAL, (BUDGET_WHEN, REGION_WHEN), match="no such subject field")
    assert 'subject_fields = ["region"]' in msg


def test_undeclared_subject_field_in_a_select_is_refused(policy_copy: Path) -> None:
    sel = '{ kind = "engine.launch" }, { kind = "health.probe", "payload.check" = "health" }'
    _refused(
        policy_copy,
        QUAL,
        (sel, sel.replace('"health" }', '"health", "subject.region" = "eu-west" }')),
        match="select field 'subject.region'",
    )


def test_misspelt_known_subject_field_still_refused_with_a_declaration(policy_copy: Path) -> None:
    when = "when = \"e.derived.attempt > params.attempt_budget || e.subject.campain == 'x'\""
    msg = _refused(
        policy_copy,
        QUAL,
        (HEADER, HEADER + 'subject_fields = ["region"]\n'),
        (BUDGET_WHEN, when),
        match="no such subject field",
    )
    assert "did you mean 'campaign'" in msg and "declared: region" in msg


@pytest.mark.parametrize(
    ("declared", "match"),
    [
        ('["campain"]', "near-spelling of a known one"),  # a misspelling declared in
        ('["hosts"]', "near-spelling of a known one"),
        # the slips ingest refuses are refused declared too: one rule (fix 91: difflib let them in)
        ('["hots"]', "near-spelling of a known one"),
        ('["modle"]', "near-spelling of a known one"),
        ('["jbo"]', "near-spelling of a known one"),
        ('["campaign"]', "is known already"),
        ('["Region"]', "must match"),  # not a name an entry's subject may hold
        ('["1region"]', "must match"),
        ('["region", "region"]', "declared twice"),
        ('"region"', "subject_fields"),  # mistyped: a string, not a list
        ("[1]", "subject_fields"),
    ],
)
def test_a_bad_subject_field_declaration_is_refused(policy_copy: Path, declared: str, match: str) -> None:
    _refused(policy_copy, QUAL, (HEADER, HEADER + f"subject_fields = {declared}\n"), match=match)


def test_declared_fields_ingest_takes_are_not_near_spellings(policy_copy: Path) -> None:
    """Regression (fix 91): the declared fields were read by a second near-spelling rule (difflib), which
    refused ``deployment_id`` and ``mode`` — fields ingest records — and let ``hots`` in."""
    _edit(policy_copy, QUAL, (HEADER, HEADER + 'subject_fields = ["deployment_id", "mode", "region"]\n'))
    load_policy(QUAL, policy_copy)


def test_a_misspelt_declaration_key_is_refused(policy_copy: Path) -> None:
    _refused(policy_copy, QUAL, (HEADER, HEADER + 'subject_field = ["region"]\n'), match="unknown field")


def test_a_declaration_covers_its_own_file_only(policy_copy: Path) -> None:
    """The acceptance policy's declaration is its own: the qualification that reads the field declares it."""
    _edit(policy_copy, ACC, ('kind = "acceptance"\n', 'kind = "acceptance"\nsubject_fields = ["region"]\n'))
    load_policy(ACC, policy_copy)
    _refused(policy_copy, QUAL, (BUDGET_WHEN, REGION_WHEN), match="no such subject field")


def test_a_declared_subject_field_is_read_from_the_entry() -> None:
    """What the declared field reads is the recorded subject (CEL over an entry's view)."""
    from ledger.policy.conditions import compile_condition

    cond = compile_condition("has(e.subject.region) && e.subject.region == 'eu-west'", "t")
    assert cond.holds({"e": {"subject": {"campaign": "c1", "region": "eu-west"}}})
    assert not cond.holds({"e": {"subject": {"campaign": "c1"}}})
