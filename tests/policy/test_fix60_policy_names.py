"""Every name a policy reads must exist, or the policy does not load (issue 11, "fail closed").

Before: a `select` key `derived.<name>` or `subject.<field>` was checked only for its head, so
`"derived.ok_" = false` or `"subject.campain" = "c1"` loaded and selected nothing; and CEL (rules, passing,
requirements, gate checks, `each`) and message templates (`detail`, `fail`, `missing`) that read
`e.payload.<x>`, `e.derived.<x>`, `e.subject.<x>` or `params.<x>` were never checked: a misspelled
`e.derived.operator_stoped` read as absent (a rule or check silently off, or a CEL error only where
evaluation reached it), a misspelled `{e[derived][atempt]}` printed `?`. Now each read name is checked at
load against the one list of its names: the payload models of the kinds the expression applies to
(`KIND_MODELS`), the derived facts (`model.DERIVED_FIELDS`, checked here against what the derivation
produces), the subject fields (`ledger.listing.SUBJECT_FIELDS`), the params the policy (and its acceptance
policy) sets; a select value must also be one the derived fact or subject field can hold.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from ledger.errors import PolicyError
from ledger.listing import SUBJECT_FIELDS
from ledger.policy.conditions import Read, paths_read, template_paths
from ledger.policy.loader import _texts, list_policies, load_policy
from ledger.policy.model import DERIVED_FIELDS, Gate

REPO = Path(__file__).resolve().parents[2]
POLICY_DIR = REPO / "policies"
QUAL, ACC, ROUTE = "backend-qualification", "evidence-acceptance", "routing-change"
FAILURES_SELECT = '{ kind = "health.probe", "derived.ok" = false }'


def _edit(d: Path, name: str, old: str, new: str) -> None:
    p = d / f"{name}.toml"
    text = p.read_text()
    assert old in text, old
    p.write_text(text.replace(old, new, 1))


def _refused(d: Path, name: str, old: str, new: str, match: str, load: str | None = None) -> str:
    _edit(d, name, old, new)
    with pytest.raises(PolicyError, match=match) as e:
        load_policy(load or name, d)
    msg = str(e.value)
    assert f"{name}.toml:" in msg, msg  # the file, and a line in it
    return msg


def _gate(*select: dict[str, Any]) -> Gate:
    return Gate.model_validate(
        {
            "name": "probe-gate",
            "verdict": "NOT QUALIFIED — RUNTIME RELIABILITY",
            "select": list(select),
            "checks": [{"expr": "count > 0", "fail": "no probe"}],
        }
    )


# --- 1. select keys derived.<name> ----------------------------------------------------------------------


def test_misspelled_derived_select_key_stops_at_load(policy_copy: Path) -> None:
    """Regression: `"derived.ok_" = false` loaded and selected no failed probe: the gate judged none."""
    load_policy(QUAL, policy_copy)  # the shipped select loads
    msg = _refused(
        policy_copy, QUAL, FAILURES_SELECT, FAILURES_SELECT.replace("derived.ok", "derived.ok_"), "derived"
    )
    assert "'derived.ok_'" in msg and "no such derived fact" in msg and "'ok'" in msg


@pytest.mark.parametrize(
    ("select", "match"),
    [
        ({"kind": "engine.launch", "derived.operator_stoped": True}, "did you mean 'operator_stopped'"),
        ({"kind": "engine.launch", "derived.Attempt": 1}, "no such derived fact"),  # case
        ({"kind": "engine.launch", "derived.attempt_": 1}, "no such derived fact"),
        ({"kind": "engine.launch", "derived.": 1}, "unknown select field 'derived.'"),  # the name dropped
        ({"kind": "engine.launch", "derived": 1}, "unknown select field 'derived'"),
    ],
)
def test_a_derived_select_key_that_names_no_derived_fact_is_refused(
    select: dict[str, Any], match: str
) -> None:
    with pytest.raises(ValidationError, match=match):
        _gate(select)


@pytest.mark.parametrize(
    ("select", "match"),
    [
        ({"kind": "health.probe", "derived.ok": "false"}, r"'derived.ok' = 'false'.*boolean"),  # TOML quotes
        ({"kind": "health.probe", "derived.ok": 0}, r"'derived.ok' = 0"),
        ({"kind": "engine.launch", "derived.attempt": "1"}, r"'derived.attempt' = '1'.*integer"),
        ({"kind": "engine.launch", "derived.attempt": True}, r"'derived.attempt' = True"),
        ({"kind": "engine.launch", "derived.failure_class": "runtime-falt"}, r"unknown failure class"),
        ({"kind": "engine.launch", "derived.failure_class": ["runtime-fault", "gpu-falt"]}, r"'gpu-falt'"),
        ({"kind": "engine.launch", "derived.job": 7}, r"'derived.job' = 7"),
    ],
)  # fmt: skip
def test_a_mistyped_derived_select_value_is_refused(select: dict[str, Any], match: str) -> None:
    """A value the derived fact never has would select nothing (the gate judges no evidence)."""
    with pytest.raises(ValidationError, match=match):
        _gate(select)


@pytest.mark.parametrize(
    "select",
    [
        {"kind": "health.probe", "derived.ok": False},
        {"kind": "engine.launch", "derived.attempt": 2},
        {"kind": "engine.launch", "derived.failure_class": "runtime-fault"},
        {"kind": "engine.launch", "derived.failure_class": ["runtime-fault", "unknown"]},  # any of
        {"kind": "engine.launch", "derived.job": "job-1"},
        {"kind": "kernel.log", "derived.gpu_events.fault_class": "x"},  # a path into a value: not typed
    ],
)
def test_a_derived_select_value_the_fact_can_hold_loads(select: dict[str, Any]) -> None:
    _gate(select)


def test_a_mistyped_derived_select_value_stops_the_shipped_policy_at_load(policy_copy: Path) -> None:
    msg = _refused(
        policy_copy, QUAL, FAILURES_SELECT, FAILURES_SELECT.replace("false", '"false"'), "derived.ok"
    )
    assert "'false'" in msg


# --- 2. select keys subject.<field> ---------------------------------------------------------------------


def test_misspelled_subject_select_key_stops_at_load(policy_copy: Path) -> None:
    """Regression: `"subject.campain" = "c1"` loaded; no entry has that subject field, so it selected none."""
    msg = _refused(
        policy_copy, QUAL, FAILURES_SELECT, FAILURES_SELECT.replace(" }", ', "subject.campain" = "c1" }'),
        "subject.campain",
    )  # fmt: skip
    assert "no such subject field" in msg and "did you mean 'campaign'" in msg


@pytest.mark.parametrize(
    ("select", "match"),
    [
        ({"kind": "host.probe", "subject.hots": "h1"}, "no such subject field"),
        ({"kind": "host.probe", "subject.Host": "h1"}, "no such subject field"),
        ({"kind": "host.probe", "subject.host": 1}, r"'subject.host' = 1.*string"),  # values are texts
        ({"kind": "host.probe", "subject.host": True}, r"'subject.host' = True"),
        ({"kind": "host.probe", "subject.host": ["h1", 2]}, r"'subject.host' = 2"),
    ],
)
def test_a_subject_select_key_or_value_no_subject_can_have_is_refused(
    select: dict[str, Any], match: str
) -> None:
    with pytest.raises(ValidationError, match=match):
        _gate(select)


@pytest.mark.parametrize("field", SUBJECT_FIELDS)
def test_every_subject_field_selects(field: str) -> None:
    _gate({"kind": "host.probe", f"subject.{field}": "x"})
    _gate({"kind": "host.probe", f"subject.{field}": ["x", "y"]})


# --- 3. names CEL and templates read --------------------------------------------------------------------


def _swap(name: str, shipped: str, old: str, new: str, read: str) -> tuple[str, str, str, str]:
    """(file, shipped text, edited text, the name the refusal quotes)"""
    assert old in shipped, old
    return (name, shipped, shipped.replace(old, new, 1), read)


STOPPED = 'when = "e.derived.operator_stopped && !e.payload.ready"'
BUDGET = 'when = "e.derived.attempt > params.attempt_budget"'
REVIEWED = 'when = "e.payload.gate in params.reviewed_gates"'
BOUNDED = 'expr = "evidence.all(e, e.payload.max_tokens != null && e.payload.max_tokens > 0)"'
CONTROL = 'expr = "evidence.exists(e, !e.derived.probe_failed)"'
GPUS = 'each = "!e.derived.newest || size(e.payload.gpus) > 0"'
P2P = "(e.kind == 'host.probe' && 'p2p_fault' in e.payload.details"
# one per place a policy reads names, in each shipped file
CEL_EDITS = [
    # a rule's `when` in the qualification, and in the acceptance policy (each file as it loads)
    _swap(QUAL, STOPPED, "operator_stopped", "operator_stoped", "e.derived.operator_stoped"),
    _swap(QUAL, STOPPED, "payload.ready", "payload.redy", "e.payload.redy"),
    _swap(QUAL, BUDGET, "params.attempt_budget", "params.attempt_budgte", "params.attempt_budgte"),
    _swap(QUAL, BUDGET, "derived.attempt", "derived.atempt", "e.derived.atempt"),
    # a rule's detail template
    _swap(QUAL, "launch attempt {e[derived][attempt]} is beyond", "[attempt]", "[attempts]",
          "e.derived.attempts"),
    _swap(QUAL, "the attempt budget of {params[attempt_budget]}: reported", "[attempt_budget]",
          "[atempt_budget]", "params.atempt_budget"),
    # the acceptance policy's passing / against / review requirement
    _swap(ACC, '"health.probe" = "!e.derived.probe_failed"', "probe_failed", "probe_faild",
          "e.derived.probe_faild"),
    _swap(ACC, '"kernel.log" = "size(e.derived.gpu_events) > 0"', "gpu_events", "gpu_event",
          "e.derived.gpu_event"),
    _swap(ACC, REVIEWED, "payload.gate", "payload.gates", "e.payload.gates"),
    _swap(ACC, REVIEWED, "params.reviewed_gates", "params.reviewd_gates", "params.reviewd_gates"),
    # a gate's check (an element a macro binds over `evidence`), `each`, `detail`, `fail`, `requires`
    _swap(QUAL, CONTROL, "probe_failed", "probe_faild", "e.derived.probe_faild"),
    _swap(QUAL, CONTROL, "(e, !e.derived.probe_failed", "(v, !v.derived.probe_faild",
          "e.derived.probe_faild"),
    _swap(QUAL, GPUS, "derived.newest", "derived.newst", "e.derived.newst"),
    _swap(QUAL, GPUS, "payload.gpus", "payload.gpu", "e.payload.gpu"),
    _swap(QUAL, "(ok = {e[payload][ok]}, HTTP", "[ok]}", "[okay]}", "e.payload.okay"),
    _swap(QUAL, "did not answer exactly {params[control_answer]}", "control_answer", "control_anwser",
          "params.control_anwser"),
    _swap(QUAL, BOUNDED, "e.payload.max_tokens != null", "e.payload.max_token != null",
          "e.payload.max_token"),
    # a guard is no excuse: has() and 'x' in e.payload of a field no kind has
    _swap(QUAL, BOUNDED, "e.payload.max_tokens != null", "has(e.payload.max_token)", "e.payload.max_token"),
    _swap(QUAL, BOUNDED, "e.payload.max_tokens != null", "'max_token' in e.payload",
          "'max_token' in e.payload"),
    # a field of another kind than the gate selects (an engine.launch field read of a completion probe)
    _swap(QUAL, BOUNDED, "e.payload.max_tokens != null", "e.payload.exit_code != null",
          "e.payload.exit_code"),
    # a subject field
    _swap(QUAL, CONTROL, "!e.derived.probe_failed", "!e.derived.probe_failed && e.subject.campain != ''",
          "e.subject.campain"),
    # the routing policy: its host facts' derived names, its checks' params
    _swap(ROUTE, P2P, "'host.probe' &&", "'host.probe' && e.derived.newst &&", "e.derived.newst"),
    _swap(ROUTE, 'expr = "verdict_age_s <= max_verdict_age_s"', "max_verdict_age_s",
          "max_verdict_age_s && params.gpu_util_sum > 0.0", "params.gpu_util_sum"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "old", "new", "read"), CEL_EDITS, ids=[e[3] for e in CEL_EDITS])
def test_misspelled_name_a_policy_reads_stops_at_load(
    policy_copy: Path, name: str, old: str, new: str, read: str
) -> None:
    """Regression: each of these loaded (`policy show` rc 0); the name read as absent, turning a rule or a
    check off, or failing only where evaluation reached it; a template printed `?`."""
    msg = _refused(policy_copy, name, old, new, "reads")
    assert f"`{read}`" in msg, msg


@pytest.mark.parametrize("user", [ACC, QUAL, ROUTE])
def test_a_misspelled_acceptance_rule_stops_every_policy_that_uses_it(policy_copy: Path, user: str) -> None:
    """The acceptance policy is loaded with every policy that uses it: its misspelling stops them too."""
    _edit(policy_copy, ACC, 'when = "e.payload.gate in params.reviewed_gates"',
          'when = "e.derived.gat in params.reviewed_gates"')  # fmt: skip
    with pytest.raises(PolicyError, match=r"evidence-acceptance\.toml:\d+: CEL reads `e\.derived\.gat`"):
        load_policy(user, policy_copy)


def test_the_misspelled_name_refuses_policy_show(policy_copy: Path, cli: Any) -> None:
    """The team's command: `ledger policy show` of the edited copy exits 2 naming file, line and name."""
    _edit(policy_copy, QUAL, *CEL_EDITS[0][1:3])
    r = cli("policy", "show", QUAL, "--policy-dir", str(policy_copy))
    assert r.code == 2, (r.code, r.out, r.err)
    assert (
        "backend-qualification.toml:" in r.err and "operator_stoped" in r.err and "operator_stopped" in r.err
    )


def test_a_param_the_team_sets_in_its_copy_is_read(policy_copy: Path) -> None:
    """Neighbour: the name the rule reads is right once the policy sets it (here: the param renamed in both
    places); renamed in one place only, it stops at load."""
    _edit(policy_copy, QUAL, "attempt_budget = 3", "launch_budget = 3")
    with pytest.raises(PolicyError, match=r"params\.attempt_budget"):
        load_policy(QUAL, policy_copy)
    p = policy_copy / f"{QUAL}.toml"
    p.write_text(p.read_text().replace("params.attempt_budget", "params.launch_budget").replace(
        "params[attempt_budget]", "params[launch_budget]"))  # fmt: skip
    assert load_policy(QUAL, policy_copy).params["launch_budget"] == 3


def test_an_optional_param_read_behind_its_guard_loads(policy_copy: Path) -> None:
    """`'benchmark_api' in params ? params.benchmark_api : 'chat'`: a param the policy may leave unset, read
    behind its guard, loads unset (the shipped policy does this), and set."""
    assert "benchmark_api" not in load_policy(QUAL, policy_copy).params
    _edit(policy_copy, QUAL, "attempt_budget = 3", 'attempt_budget = 3\nbenchmark_api = "completions"')
    assert load_policy(QUAL, policy_copy).params["benchmark_api"] == "completions"


_TEAM_RULE = """
[[rules]]
name = "debug-launch"
kinds = ["engine.launch"]
withholds = "credit"
when = "'--enforce-eager' in e.payload.{field}"
detail = "launch {{e[id]:.12}} of attempt {{e[derived][{fact}]}} is a debugging run: not credited"
"""


@pytest.mark.parametrize(
    ("field", "fact", "read"),
    [
        ("comand", "attempt", "'--enforce-eager' in e.payload.comand"),
        ("command", "attemp", "e.derived.attemp"),
    ],
)
def test_a_team_rule_with_a_misspelled_name_stops_at_load(
    policy_copy: Path, field: str, fact: str, read: str
) -> None:
    p = policy_copy / f"{QUAL}.toml"
    shipped = p.read_text()
    p.write_text(shipped + _TEAM_RULE.format(field="command", fact="attempt"))
    load_policy(QUAL, policy_copy)  # spelled right, the team's rule loads
    p.write_text(shipped + _TEAM_RULE.format(field=field, fact=fact))
    with pytest.raises(PolicyError, match=rf"backend-qualification\.toml:\d+: \w+ reads `{re.escape(read)}`"):
        load_policy(QUAL, policy_copy)


# --- the shipped policies, and the extractor ------------------------------------------------------------


@pytest.mark.parametrize("path", list_policies(POLICY_DIR), ids=lambda p: p.stem)
def test_every_shipped_policy_loads_and_its_reads_are_checked(path: Path) -> None:
    """Each shipped file loads, and the check is not vacuous there: it finds the derived and params names
    the file reads (every one a known name)."""
    policy = load_policy(path.stem, POLICY_DIR)
    derived: set[str] = set()
    params: set[str] = set()
    text = policy.data.decode()
    for t in _texts(policy.spec, text, str(path)):
        roots = {v: v for v in t.entries} | {"params": "params"}
        lists = {"evidence": "evidence[]"} if t.has_evidence else {}
        reads = template_paths(t.source, roots, lists) if t.template else paths_read(t.source, roots, lists)
        for r in reads or ():
            if r.root != "params" and r.path[:1] == ("derived",) and len(r.path) > 1:
                derived.add(r.path[1])
            if r.root == "params" and r.path:
                params.add(r.path[0])
    assert derived <= set(DERIVED_FIELDS), derived - set(DERIVED_FIELDS)
    if path.stem != ROUTE:  # the routing policy reads entries and params through its own context (`probes`)
        assert derived, "no derived name found"
        assert params, "no params name found"


@pytest.mark.parametrize(
    ("source", "reads"),
    [
        (
            "e.derived.attempt > params.budget",
            [Read("e", ("derived", "attempt")), Read("params", ("budget",))],
        ),
        ("has(e.payload.x)", [Read("e", ("payload", "x"), "has")]),
        ("'x' in e.payload && e.payload.x", [Read("e", ("payload", "x"), "in"), Read("e", ("payload", "x"))]),
        ("e.payload['x'].y", [Read("e", ("payload", "x", "y"))]),
        ("e.payload.text.contains('a')", [Read("e", ("payload", "text"))]),  # a method call ends the path
        ("evidence.exists(v, v.derived.ok)", [Read("evidence[]", ("derived", "ok"))]),
        ("evidence.filter(v, v.derived.ok).size() > 0", [Read("evidence[]", ("derived", "ok"))]),
        # a variable a macro binds over anything else is no entry (a GPU event's `kind`)
        ("e.payload.events.exists(v, v.kind == 'x')", [Read("e", ("payload", "events"))]),
        # … and a root it rebinds is that root again outside the macro's parentheses (the receiver included)
        ("e.payload.events.exists(e, e.kind == 'x')", [Read("e", ("payload", "events"))]),
        ("'a' + 'x' in e.payload", [Read("e", ("payload",))]),  # not a key test of 'x'
    ],
)
def test_the_paths_a_condition_reads(source: str, reads: list[Read]) -> None:
    assert list(paths_read(source, {"e": "e", "params": "params"}, {"evidence": "evidence[]"}) or ()) == reads


# --- the one list of derived names, against the derivation ----------------------------------------------


def test_the_derived_names_are_the_ones_the_derivation_produces(monkeypatch: pytest.MonkeyPatch) -> None:
    """`DERIVED_FIELDS` is the one list of derived names (and their types): every fixture's verdicts and
    routing checks are run, and every name any entry's `derived` holds must be in it, every name in it must
    be produced, and every value produced must be of the type it states."""
    from ledger.policy.fixtures import discover_fixtures, run_fixture
    from ledger.policy.snapshot import NO_DERIVED, Evidence, clear_caches
    from ledger.service import Ledger

    seen: list[dict[str, Any]] = [NO_DERIVED]
    real = Evidence.set_derived

    def record(self: Evidence, derived: dict[str, Any]) -> None:
        seen.append(derived)  # later facts are set into this same dict (operator_stopped, newest …)
        real(self, derived)

    monkeypatch.setattr(Evidence, "set_derived", record)
    clear_caches()
    for path in discover_fixtures(POLICY_DIR):
        result = run_fixture(path, POLICY_DIR, init=Ledger.init)
        assert not result.failures, (path, result.failures)
    produced = {k for d in seen for k in d}
    assert produced - set(DERIVED_FIELDS) == set(), "derived but not in DERIVED_FIELDS"
    assert set(DERIVED_FIELDS) - produced == set(), "in DERIVED_FIELDS but never derived"
    adapters = {k: TypeAdapter(t) for k, t in DERIVED_FIELDS.items()}
    for d in seen:
        for k, v in d.items():
            adapters[k].validate_python(v, strict=True)  # raises naming the value of the wrong type
