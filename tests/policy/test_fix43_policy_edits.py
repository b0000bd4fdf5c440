"""A team's edits of the shipped policies (a copy, ``--policy-dir``) that silently switched rules off
(audit 36): a partial ``[acceptance]`` table in the qualification replaced the acceptance policy's whole
section with the schema's empty defaults (f6), a qualification naming no acceptance policy credited
everything (f6), a misspelled gate in a ``*_gates`` param dropped its requirement (f2), a misspelled kind
anywhere matched no entry (f1), and a ``[[rules]]`` table without ``withholds`` withdrew failures (f4).
Each is refused at load now, or merged key by key, and a failure is withdrawn only by a supersession."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest

from ledger.errors import PolicyError
from ledger.policy.fixtures import run_fixture
from ledger.policy.loader import load_policy
from ledger.service import Ledger

REPO = Path(__file__).resolve().parents[2]
POLICY_DIR = REPO / "policies"
FIXTURES = POLICY_DIR / "fixtures"


def _edit(d: Path, name: str, old: str, new: str) -> Path:
    p = d / f"{name}.toml"
    text = p.read_text()
    assert text.count(old) >= 1, old
    p.write_text(text.replace(old, new, 1))
    return p


def _with_acceptance_table(d: Path, table: str) -> None:
    _edit(d, "backend-qualification", "\n[params]\n", f"\n{table}\n\n[params]\n")


# --- f6: a partial [acceptance] in the qualification is merged over the acceptance policy's ---------------


def test_a_partial_acceptance_table_in_the_qualification_keeps_every_review_and_acceptance_requirement(
    policy_copy: Path,
) -> None:
    """Regression (audit 36, f6): `[acceptance] signatures = "trust-log"` alone (docs/POLICY.md's speed-up)
    gave every other acceptance key its empty default: no review, acceptance, freshness, signer roles."""
    _with_acceptance_table(policy_copy, '[acceptance]\nsignatures = "trust-log"')
    team = load_policy("backend-qualification", policy_copy)
    shipped = load_policy("backend-qualification", POLICY_DIR)
    assert team.acceptance.signatures == "trust-log"
    assert shipped.acceptance.signatures == "verify"
    # everything it does not set is the acceptance policy's
    for key in ("freshness", "post_reset_kinds", "review_required", "acceptance_required", "signers",
                "passing", "against", "bindings", "artifacts", "repaired_commit_required"):  # fmt: skip
        assert getattr(team.acceptance, key) == getattr(shipped.acceptance, key), key
    assert [r for r, _ in team.review_required] == [r for r, _ in shipped.review_required]
    assert [r for r, _ in team.acceptance_required] == [r for r, _ in shipped.acceptance_required]
    assert set(team.passing) == set(shipped.passing) and set(team.against) == set(shipped.against)
    assert team.freshness_seconds() == shipped.freshness_seconds()


def test_a_partial_acceptance_table_still_asks_the_benchmark_acceptance(
    policy_copy: Path, tmp_path: Path
) -> None:
    """End to end: the shipped `qualified` fixture (before the benchmark acceptance: INCONCLUSIVE,
    acceptance-missing) passes under the team's policy with `signatures = "trust-log"` added."""
    _with_acceptance_table(policy_copy, '[acceptance]\nsignatures = "trust-log"')
    shutil.copytree(FIXTURES, policy_copy / "fixtures")
    fixture = policy_copy / "fixtures" / "backend-qualification" / "qualified.toml"
    result = run_fixture(fixture, policy_copy, tmp_path, init=Ledger.init)
    assert result.passed, result.failures


def test_a_qualification_freshness_entry_is_merged_kind_by_kind(policy_copy: Path) -> None:
    """A qualification bounding one kind's freshness keeps the acceptance policy's other bounds (`*` = 30d,
    `host.probe` = 7d); a per-kind table it sets does not replace the whole table."""
    _with_acceptance_table(policy_copy, '[acceptance.freshness]\n"gate.result" = "1d"')
    fresh = load_policy("backend-qualification", policy_copy).freshness_seconds()
    assert fresh == {"*": 30 * 86400.0, "host.probe": 7 * 86400.0, "gate.result": 86400.0}


def test_a_qualification_passing_entry_is_merged_kind_by_kind(policy_copy: Path) -> None:
    _with_acceptance_table(policy_copy, '[acceptance.passing]\n"job" = "e.payload.state == \'succeeded\'"')
    team = load_policy("backend-qualification", policy_copy)
    shipped = load_policy("backend-qualification", POLICY_DIR)
    assert set(team.passing) == set(shipped.passing)
    assert set(team.acceptance.passing) == set(shipped.acceptance.passing)


def test_a_qualification_review_requirement_it_sets_replaces_the_acceptance_policys(
    policy_copy: Path,
) -> None:
    """A list the qualification sets is its own (explicit): reviews asked of benchmark results only."""
    _with_acceptance_table(
        policy_copy,
        '[[acceptance.review_required]]\nkinds = ["gate.result"]\nwhen = "e.payload.gate == \'benchmark\'"',
    )
    team = load_policy("backend-qualification", policy_copy)
    assert [r.when for r, _ in team.review_required] == ["e.payload.gate == 'benchmark'"]
    assert [r.when for r in team.acceptance.review_required] == ["e.payload.gate == 'benchmark'"]
    # what it does not set stays the acceptance policy's
    assert len(team.acceptance_required) == 1


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ('acceptance = "evidence-acceptance"\n', ""),  # dropped
        ('acceptance = "evidence-acceptance"\n', '# acceptance = "evidence-acceptance"\n'),  # commented out
    ],
)
def test_a_qualification_policy_that_names_no_acceptance_policy_is_refused(
    policy_copy: Path, old: str, new: str
) -> None:
    """Regression (audit 36, f6): without the header's `acceptance` line every entry was credited as it
    stands (no review, acceptance, freshness …) and a stale, unreviewed campaign QUALIFIED."""
    _edit(policy_copy, "backend-qualification", old, new)
    with pytest.raises(
        PolicyError, match=r"backend-qualification\.toml:\d+: policy\.acceptance: .*names the"
    ):
        load_policy("backend-qualification", policy_copy)


def test_a_qualification_naming_a_misspelled_acceptance_policy_is_refused(policy_copy: Path) -> None:
    _edit(
        policy_copy,
        "backend-qualification",
        'acceptance = "evidence-acceptance"',
        'acceptance = "evidence-acceptanc"',
    )
    with pytest.raises(PolicyError, match="unknown policy 'evidence-acceptanc'"):
        load_policy("backend-qualification", policy_copy)


# --- f2: *_gates params name the qualification's gates -----------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "bad"),
    [
        ('reviewed_gates = ["semantic", "benchmark"]', 'reviewed_gates = ["semantics", "benchmark"]',
         "'semantics'"),
        ('reviewed_gates = ["semantic", "benchmark"]', 'reviewed_gates = ["semantic", "benchmrk"]',
         "'benchmrk'"),
        ('accepted_gates = ["benchmark"]', 'accepted_gates = ["Benchmark"]', "'Benchmark'"),
        ('accepted_gates = ["benchmark"]', 'accepted_gates = "benchmark"', "'benchmark'"),  # not a list
    ],
)  # fmt: skip
def test_a_misspelled_reviewed_or_accepted_gate_is_refused_at_load(
    policy_copy: Path, old: str, new: str, bad: str
) -> None:
    """Regression (audit 36, f2): `reviewed_gates = ["semantics", "benchmrk"]` loaded, and an unreviewed,
    unaccepted semantic and benchmark run QUALIFIED and was routed."""
    _edit(policy_copy, "evidence-acceptance", old, new)
    name = new.split(" ", maxsplit=1)[0]
    for policy in ("backend-qualification", "routing-change"):
        with pytest.raises(
            PolicyError, match=rf"evidence-acceptance\.toml:\d+: params\.{name}: unknown gate"
        ) as e:
            load_policy(policy, policy_copy)
        assert bad in str(e.value) and "benchmark, host-prerequisites" in str(e.value)


def test_a_gates_param_the_qualification_sets_is_checked_where_it_is_set(policy_copy: Path) -> None:
    """A qualification that sets `reviewed_gates` over the acceptance policy's is checked in its own file."""
    _edit(policy_copy, "backend-qualification", "\n[params]\n", '\n[params]\nreviewed_gates = ["semantik"]\n')
    with pytest.raises(
        PolicyError, match=r"backend-qualification\.toml:\d+: params\.reviewed_gates: .*'semantik'"
    ):
        load_policy("backend-qualification", policy_copy)
    _edit(
        policy_copy, "backend-qualification", 'reviewed_gates = ["semantik"]', 'reviewed_gates = ["semantic"]'
    )
    assert load_policy("backend-qualification", policy_copy).params["reviewed_gates"] == ["semantic"]


def test_the_shipped_gates_params_name_shipped_gates() -> None:
    policy = load_policy("backend-qualification", POLICY_DIR)
    gates = {g.spec.name for g in policy.gates}
    for name, value in policy.params.items():
        if name.endswith("_gates"):
            assert set(value) <= gates, name


# --- f1: every kind a policy names is one of the ledger's kinds ---------------------------------------------


@pytest.mark.parametrize(
    ("name", "old", "new", "bad"),
    [
        ("evidence-acceptance", '"host.probe" = "7d"', '"host.prob" = "7d"', "host.prob"),
        ("evidence-acceptance", '[[acceptance.review_required]]\nkinds = ["gate.result"]',
         '[[acceptance.review_required]]\nkinds = ["gate.reslt"]', "gate.reslt"),
        ("evidence-acceptance", '[[acceptance.acceptance_required]]\nkinds = ["gate.result"]',
         '[[acceptance.acceptance_required]]\nkinds = ["gate_result"]', "gate_result"),
        ("evidence-acceptance", 'post_reset_kinds = ["host.probe", "health.probe"]',
         'post_reset_kinds = ["host.probe", "health.probes"]', "health.probes"),
        ("evidence-acceptance", '[acceptance.bindings]\nkinds = ["engine.launch"]',
         '[acceptance.bindings]\nkinds = ["engine.lanch"]', "engine.lanch"),
        ("evidence-acceptance", '"job" = "e.payload.state', '"jobs" = "e.payload.state', "jobs"),
        ("evidence-acceptance", '"kernel.log" = "size(', '"kernel.logs" = "size(', "kernel.logs"),
        ("evidence-acceptance", "[acceptance.signers.review]", "[acceptance.signers.reveiw]", "reveiw"),
        ("evidence-acceptance", 'kinds = ["engine.launch", "health.probe", "gate.result"]\nwithholds',
         'kinds = ["engine.launch", "health.probe", "gate.results"]\nwithholds', "gate.results"),
        ("backend-qualification", 'kinds = ["host.probe"]', 'kinds = ["host-probe"]', "host-probe"),
        ("backend-qualification", '{ kind = "engine.launch" }', '{ kind = "engine.launches" }',
         "engine.launches"),
    ],
)  # fmt: skip
def test_a_misspelled_kind_anywhere_in_a_policy_is_refused_at_load(
    policy_copy: Path, name: str, old: str, new: str, bad: str
) -> None:
    """Regression (audit 36, f1): a freshness key "host.prob" let an 8-day-old host probe be credited; review
    kinds ["gate.reslt"] credited unreviewed results. The kinds are `ledger kinds` (``KIND_MODELS``)."""
    p = _edit(policy_copy, name, old, new)
    with pytest.raises(PolicyError, match=rf"{p.name}:\d+: .*unknown kind '{bad}'") as e:
        load_policy("backend-qualification", policy_copy)
    assert "gate.result" in str(e.value) and "host.probe" in str(e.value)  # names the known ones


def test_the_freshness_wildcard_is_a_kind_there_only(policy_copy: Path) -> None:
    """`"*"` is every kind as a freshness key (documented); as a rule's kind it names none."""
    assert "*" in load_policy("backend-qualification", policy_copy).acceptance.freshness
    _edit(policy_copy, "backend-qualification", 'kinds = ["host.probe"]', 'kinds = ["*"]')
    with pytest.raises(PolicyError, match="unknown kind '\\*'"):
        load_policy("backend-qualification", policy_copy)


@pytest.mark.parametrize(
    ("old", "new", "match"),
    [
        ('{ kind = "kernel.log", in_subject = true }', '{ kind = "kernel.log", in_subjct = true }',
         "unknown select field 'in_subjct'"),
        ('"payload.check" = "health"', '"payload.chek" = "health"',
         "health.probe payloads have no field 'chek'"),
        ('"payload.check" = "health"', '"paylod.check" = "health"', "unknown select field 'paylod.check'"),
        ('"payload.check" = "health"', '"payload" = "health"', "unknown select field 'payload'"),
        ('{ kind = "engine.launch" }', '{ knd = "engine.launch" }', "names a `kind`"),
    ],
)  # fmt: skip
def test_a_misspelled_gate_select_field_is_refused_at_load(
    policy_copy: Path, old: str, new: str, match: str
) -> None:
    """Regression (audit 36, f1): a select key `in_subjct` matched no entry, and the gate judged nothing."""
    _edit(policy_copy, "backend-qualification", old, new)
    with pytest.raises(PolicyError, match=rf"backend-qualification\.toml:\d+: gates\.\d+.*{match}"):
        load_policy("backend-qualification", policy_copy)


# --- f4: a [[rules]] table names what it withholds ------------------------------------------------------


_DEBUG_RULE = """
[[rules]]
name = "debug-launch"
kinds = ["engine.launch"]
when = "'--enforce-eager' in e.payload.command"
detail = "a launch with --enforce-eager is a debugging run: not credited"
"""


def test_a_team_rule_without_withholds_is_refused_rather_than_withdrawing_failures(policy_copy: Path) -> None:
    """Regression (audit 36, f4): a rule that left out `withholds` defaulted to "record", which withdrew the
    segfault-after-ready launch it matched and the campaign QUALIFIED; a supersession is the one way to
    withdraw a failure."""
    p = policy_copy / "backend-qualification.toml"
    p.write_text(p.read_text() + _DEBUG_RULE)
    with pytest.raises(
        PolicyError, match=r"backend-qualification\.toml:\d+: rules\.\d+: .*'debug-launch' names no"
    ) as e:
        load_policy("backend-qualification", policy_copy)
    assert 'withholds = "credit"' in str(e.value) and 'withholds = "record"' in str(e.value)


@pytest.mark.parametrize(
    ("line", "ok"),
    [('withholds = "credit"', True), ('withholds = "record"', True),
     ('withholds = "credits"', False), ("withhold = 'credit'", False)],
)  # fmt: skip
def test_a_team_rule_names_withholds_as_one_of_the_two_choices(
    policy_copy: Path, line: str, ok: bool
) -> None:
    p = policy_copy / "backend-qualification.toml"
    p.write_text(p.read_text() + _DEBUG_RULE + line + "\n")
    if ok:
        rules = [
            r for r, _ in load_policy("backend-qualification", policy_copy).rules if r.name == "debug-launch"
        ]
        assert [r.withholds for r in rules] == [line.split('"')[1]]
    else:
        with pytest.raises(PolicyError, match=r"rules\.\d+"):
            load_policy("backend-qualification", policy_copy)


def test_every_shipped_rule_names_what_it_withholds() -> None:
    for name in ("backend-qualification", "evidence-acceptance", "routing-change"):
        data = tomllib.loads((POLICY_DIR / f"{name}.toml").read_text())
        assert all("withholds" in r for r in data.get("rules", [])), name
