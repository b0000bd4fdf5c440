"""Fix 84 (issue 11): the routing policy's names below the top level of its context were not checked.

The loader checked a routing check's reads of the context's names and of their top level
(``request.subject``, ``host.gpu_indexes``, ``item.env``), but not what is below: ``request.subject.modle``,
``deployment.services.exists(s, s.modle …)``, ``current.subject.campain``, ``params.served_identity.gaet``,
``{item[faults][0][cde]}`` and a list literal of the context's maps (``[item.env].exists(m, m.X …)``) loaded,
and then read as absent at check time — a CEL error only where evaluation reached it, or a key test always
false (``'campain' in current.subject``): a check silently always on or off. Now every name read at any
depth is checked against what the routing gate builds there (``routing._routing_schema``), naming file,
line, the read and the names that are there; ``check_routing_change`` refuses to judge a policy that reads
one, and refuses to judge a context it built that holds anything else (``_context_problem``).

A map whose names are free (a service's ``env``) takes any name: a read of one it does not hold when the
change is judged is a CEL error, so the check is not judged and the change is refused — never allowed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ledger.errors import PolicyError
from ledger.policy.loader import ROUTING_ITEMS, ROUTING_SHAPES, LoadedPolicy, load_policy, routing_shapes
from ledger.policy.routing import (
    _ENV,
    _FAULT,
    _context_problem,
    _List,
    _Map,
    _routing_schema,
    check_routing_change,
    check_routing_reads,
    load_checked,
)
from ledger.service import Ledger

REPO = Path(__file__).resolve().parents[2]
NAME = "routing-change"
# a check without for_each (deployment-host), one over services (nccl-p2p-disabled), one over gpus
PLAIN = 'expr = "deployment.host_key == host.key"'
SERVICES = (
    """expr = "!item.multi_gpu || ('NCCL_P2P_DISABLE' in item.env && item.env.NCCL_P2P_DISABLE == '1')\""""
)
GPUS = 'expr = "size(item.faults) == 0"'
GPUS_FAIL = 'fail = "GPU{item[gpu]} ({item[pci_text]}) faulted after'
PLAIN_FAIL = 'fail = "the deployment is for host {deployment[host]}, not {host[name]}"'


@pytest.fixture
def policies(tmp_path: Path) -> Path:
    d = tmp_path / "policies"
    d.mkdir()
    for p in (REPO / "policies").glob("*.toml"):
        shutil.copy(p, d / p.name)
    return d


def _load(d: Path, old: str | None = None, new: str | None = None) -> LoadedPolicy:
    if old is not None and new is not None:
        p = d / f"{NAME}.toml"
        text = p.read_text()
        assert text.count(old) == 1, old
        p.write_text(text.replace(old, new))
    policy = load_policy(NAME, d)
    check_routing_reads(policy)
    return policy


def _refused(d: Path, old: str, new: str, *words: str) -> str:
    with pytest.raises(PolicyError) as e:
        _load(d, old, new)
    msg = e.value.message
    assert f"{NAME}.toml:" in msg and msg.split(f"{NAME}.toml:")[1].split(":")[0].isdigit(), msg  # file:line
    for w in words:
        assert w in msg, (w, msg)
    return msg


def _expr(text: str) -> str:
    return "expr = '''" + text + "'''"


# --- the regression --------------------------------------------------------------------------------------


def test_misspelled_nested_subject_name_is_refused_naming_file_line_and_name(policies: Path) -> None:
    """Regression: ``request.subject.modle`` loaded; at check time it was a CEL error where evaluation
    reached it (and nowhere else), never a refusal when the policy loads."""
    msg = _refused(
        policies,
        PLAIN,
        _expr("request.subject.modle == request.subject.model"),
        "`request.subject.modle`",
        "did you mean 'model'?",
        "backend, host, model",  # the names that are there: the policy's match_subject
    )
    assert "CEL reads" in msg


def test_check_routing_change_refuses_a_policy_reading_a_misspelled_nested_name(policies: Path) -> None:
    """Before anything is judged (the ledger is never read): a misspelled name below the top level."""
    (policies / f"{NAME}.toml").write_text(
        (policies / f"{NAME}.toml").read_text().replace(PLAIN, _expr("current.subject.campain != ''"))
    )
    # refused when the tool loads the policy (``routing.load_checked``: ``Ledger.load_policy``, ``ledger
    # policy list/show``) ...
    with pytest.raises(PolicyError, match=r"current\.subject\.campain.*did you mean 'campaign'"):
        load_checked(NAME, policies)
    with pytest.raises(PolicyError, match=r"current\.subject\.campain"):
        Ledger.load_policy(NAME, policies)

    # ... and by the gate itself, before the ledger is read, for a policy the loader alone built
    policy = load_policy(NAME, policies)

    class Untouched:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"the ledger was read ({name}) before the policy's names were checked")

    with pytest.raises(PolicyError, match=r"current\.subject\.campain.*did you mean 'campaign'"):
        check_routing_change(Untouched(), policy, {"model": "m", "host": "h", "backend": "vllm"})  # type: ignore[arg-type]


def test_shipped_routing_policy_reads_only_names_that_are_there(policies: Path) -> None:
    _load(policies)
    check_routing_reads(load_policy(NAME, REPO / "policies"))


# --- neighbours: dropped, misspelled, wrong case, through macros, indexes, key tests, list literals --------


@pytest.mark.parametrize(
    ("old", "new", "words"),
    [
        # a level dropped: the env variable read of the service itself, or of a deployment service
        (SERVICES, _expr("item.NCCL_P2P_DISABLE == '1'"), ("item.NCCL_P2P_DISABLE",)),
        (
            PLAIN,
            _expr("deployment.services.all(s, s.NCCL_P2P_DISABLE == '1')"),
            ("`s.NCCL_P2P_DISABLE`", "s holds no 'NCCL_P2P_DISABLE'", "s: each of deployment.services"),
        ),
        # misspelled, at the second and third level
        (
            PLAIN,
            _expr("current.subject.campain != ''"),
            ("current.subject.campain", "did you mean 'campaign'"),
        ),
        (PLAIN, _expr("params.served_identity.gaet != ''"), ("params.served_identity.gaet", "check, gate")),
        (
            PLAIN,
            _expr("size(host.gpu_faults_unplaced) == 0 || host.gpu_faults_unplaced[0].fault_clas == 'x'"),
            ("host.gpu_faults_unplaced[0].fault_clas", "did you mean 'fault_class'"),
        ),
        # wrong case
        (PLAIN, _expr("request.subject.Model != ''"), ("request.subject.Model", "did you mean 'model'")),
        (
            PLAIN,
            _expr("deployment.services[0].Name != ''"),
            ("deployment.services[0].Name", "mean 'name'"),
        ),
        # through a macro: exists, all, nested, filter, map
        (
            PLAIN,
            _expr("deployment.services.exists(s, s.modle == 'm')"),
            ("`s.modle`", "mean 'model'"),
        ),
        (GPUS, _expr("item.faults.all(f, f.codee != 'x')"), ("`f.codee`", "f: each of item.faults")),
        (
            PLAIN,
            _expr("gpus.exists(g, g.faults.exists(f, f.codee == 'x'))"),
            ("f.codee", "of g.faults"),
        ),
        (
            PLAIN,
            _expr("deployment.services.filter(s, true).exists(x, x.nme == 'a')"),
            ("`x.nme`", "did you mean 'name'"),
        ),
        (PLAIN, _expr("deployment.services.map(s, s.nme).exists(m, m == 'a')"), ("`s.nme`",)),
        (PLAIN, _expr("host.gpu_faults_unplaced.exists(f, f.fault_clas == 'x')"), ("`f.fault_clas`",)),
        # through an index: a string key, a computed key of a map whose names are fixed
        (
            PLAIN,
            _expr("request['subject']['modle'] == 'x'"),
            ("request['subject']", "'modle'", "'model'"),
        ),
        (PLAIN, _expr('deployment["services"][0]["modle"] != ""'), ("modle", "did you mean 'model'")),
        (PLAIN, _expr("request.subject[request.action] != ''"), ("request.subject[…]", "a key computed")),
        # a key test, a has(): always false for a name that is never there
        (PLAIN, _expr("!('campain' in current.subject)"), ("'campain' in current.subject",)),
        (PLAIN, _expr("!has(request.subject.modle)"), ("request.subject.modle",)),
        # a list literal (or a choice) of the context's maps: which names its elements hold cannot be told
        (SERVICES, _expr("[item.env].exists(m, m.NCCL_P2P_DISABLE == '1')"), ("cannot be told",)),
        (PLAIN, _expr("[deployment.services[0]].exists(s, s.name != '')"), ("cannot be told",)),
        (PLAIN, _expr("(true ? host : current).name != ''"), ("cannot be told",)),
        # a field of one value, of a list
        (PLAIN, _expr("host.p2p_fault.x"), ("host.p2p_fault is one value",)),
        (PLAIN, _expr("host.gpu_indexes.x == 0"), ("host.gpu_indexes is a list",)),
        # a fail template, at any depth
        (
            PLAIN_FAIL,
            'fail = "not {request[subject][modle]}"',
            ("{request[subject][modle]}", "'model'"),
        ),
        (
            GPUS_FAIL,
            'fail = "{item[faults][0][cde]} GPU{item[gpu]} ({item[pci_text]}) faulted after',
            ("cde",),
        ),
        (PLAIN_FAIL, 'fail = "{deployment[services][0][Name]}"', ("{deployment[services][0][Name]}",)),
        (PLAIN_FAIL, 'fail = "{deployment[services][first][name]}"', ("is a list",)),
        # fix 90: a placeholder nested in a format spec (``str.format`` fills it too)
        (
            PLAIN_FAIL,
            'fail = "{host[name]:{request[subject][modle]}}"',
            ("{request[subject][modle]}", "'model'"),
        ),
        (
            PLAIN_FAIL,
            'fail = "{host[name]:>{host[key]}.{host[gpu_indexes][x]}}"',
            ("{host[gpu_indexes][x]}",),
        ),
        (
            PLAIN_FAIL,
            'fail = "{host[name]!r:{deployment[services][0][Name]}}"',
            ("{deployment[services][0][Name]}",),
        ),
    ],
)
def test_nested_name_not_there_is_refused(policies: Path, old: str, new: str, words: tuple[str, ...]) -> None:
    _refused(policies, old, new, *words)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (PLAIN, _expr("request.subject.model != '' && request.subject.host != ''")),
        (
            PLAIN,
            _expr("!('backend' in request.subject) || request.subject.backend != ''"),
        ),  # optional: guarded
        (PLAIN, _expr("current == null || current.subject.campaign != ''")),
        # (fix 107: the routing policy states no params.engine_names: the qualification's is the one copy)
        (PLAIN, _expr("params.served_identity.gate != '' && params.served_identity['check'] != ''")),
        (PLAIN, _expr("deployment.services.exists(s, s.model != null && s.env.X == '1')")),  # env: free names
        (PLAIN, _expr("deployment['services'][0]['env']['ANY_NAME'] == '1'")),
        (PLAIN, _expr("deployment.services.map(s, s.env).exists(m, 'X' in m)")),
        (PLAIN, _expr("gpus.all(g, g.faults.all(f, f.code != 'x' && f.fault_class != 'y'))")),
        (PLAIN, _expr("host.gpu_indexes != null && host.gpu_indexes[0] == 0")),
        (PLAIN, _expr("['route', 'restore'].exists(a, a == request.action)")),  # a literal of values
        (PLAIN, _expr("routing.match_subject.exists(m, m == 'model')")),
        (SERVICES, _expr("item.env.ANY_NAME == '1' || item.env['OTHER'] == '1' || 'X' in item.env")),
        (GPUS_FAIL, 'fail = "{item[faults][0][code]} GPU{item[gpu]} ({item[pci_text]}) faulted after'),
        (PLAIN_FAIL, 'fail = "{host[name]:{request[subject][model]}} {deployment[host]:>{host[key]}}"'),
    ],
)
def test_nested_name_that_is_there_still_loads(policies: Path, old: str, new: str) -> None:
    _load(policies, old, new)


# --- a free name absent at check time never lets a change through ------------------------------------------


def test_env_name_absent_at_check_time_is_an_error_never_a_pass(policies: Path) -> None:
    """``item.env`` takes any name when the policy loads; where the service does not set it, reading it
    is a CEL error: the check is not judged (PolicyError, the change refused), never passed."""
    policy = _load(policies, SERVICES, _expr("!item.multi_gpu || item.env.NCCL_P2P_DISABLE == '1'"))
    check = next(c for c in policy.routing_checks if c.spec.name == "nccl-p2p-disabled")
    spans = {"multi_gpu": True, "env": {}}
    with pytest.raises(PolicyError, match="no field 'NCCL_P2P_DISABLE'"):
        check.expr.holds({"item": spans})
    assert check.expr.holds({"item": {**spans, "env": {"NCCL_P2P_DISABLE": "1"}}}) is True
    assert check.expr.holds({"item": {**spans, "env": {"NCCL_P2P_DISABLE": "0"}}}) is False
    # the shipped form tests the name first: absent, the service is refused (the check fails)
    shipped = next(
        c for c in load_policy(NAME, REPO / "policies").routing_checks if c.spec.name == check.spec.name
    )
    assert shipped.expr.holds({"item": spans}) is False


# --- the context the gate builds is what the policy was read against ---------------------------------------


def test_schema_is_the_loaders_names_below_them() -> None:
    policy = load_policy(NAME, REPO / "policies")
    schema = _routing_schema(policy.spec, policy.params)
    for name, fields in routing_shapes(policy.spec.routing.host_fact if policy.spec.routing else {}).items():
        node = schema[name]
        assert (set(node.fields) if isinstance(node, _Map) else set()) == set(fields), name
    for name, fields in ROUTING_ITEMS.items():
        node = schema[name]
        assert isinstance(node, _List) and isinstance(node.element, _Map)
        assert set(node.element.fields) == set(fields), name
    assert set(ROUTING_SHAPES) <= set(schema)


@pytest.mark.parametrize(
    ("value", "node", "why"),
    [
        ({**dict.fromkeys(_FAULT.fields, "x"), "extra": 1}, _FAULT, "extra"),  # a name not read against
        (dict.fromkeys(list(_FAULT.fields)[1:], "x"), _FAULT, "holds"),  # one dropped
        ({"X": {"nested": "1"}}, _ENV, "not one value"),  # a free map's value mistyped
        ("text", _List(_FAULT), "not a list"),
        ([{"entry": "x"}], _List(_FAULT), "[0]"),
    ],
)
def test_context_built_otherwise_is_refused(value: Any, node: Any, why: str) -> None:
    problem = _context_problem(value, node, "routing context host.gpu_faults_unplaced")
    assert problem is not None and why in problem, problem


def test_context_with_optional_subject_name_left_out_is_judged() -> None:
    policy = load_policy(NAME, REPO / "policies")
    request = _routing_schema(policy.spec, policy.params)["request"]
    built = {
        "action": "restore",
        "subject": {"model": "m", "host": "h"},
        "subject_text": "",
        "model_key": "m",
    }
    assert _context_problem(built, request, "request") is None  # backend: a restoration names none
    assert _context_problem({**built, "subject": {"model": "m"}}, request, "request") is not None  # host
    wrong = {**built, "subject": {"model": "m", "host": "h", "campaign": "c"}}
    assert "campaign" in (_context_problem(wrong, request, "request") or "")
    assert _context_problem(None, request, "request") is None  # null stands for any value


def test_recorded_subject_with_a_field_the_routing_policy_does_not_read_is_judged() -> None:
    """``current.subject`` is what the verdict evaluated, as recorded (validated then): reads of it are
    checked against the subject fields, what it holds is not refused when the change is judged."""
    policy = load_policy(NAME, REPO / "policies")
    current = _routing_schema(policy.spec, policy.params)["current"]
    assert isinstance(current, _Map)
    recorded = {**dict.fromkeys(current.fields), "subject": {"campaign": "c1", "team": "infra"}}
    assert _context_problem(recorded, current, "current") is None
    assert "not one value" in (
        _context_problem({**recorded, "subject": {"campaign": ["c1"]}}, current, "c") or ""
    )


def test_policy_show_and_list_refuse_a_misspelled_nested_name(policies: Path) -> None:
    """The CLI loads a routing policy through ``load_checked``: ``policy show`` and ``policy list`` exit 2
    naming the read, as ``check routing-change`` does (the loader alone cannot: the gate reads the loader)."""
    (policies / f"{NAME}.toml").write_text(
        (policies / f"{NAME}.toml").read_text().replace(PLAIN, _expr("request.subject.modle != ''"))
    )
    ledger_bin = Path(sys.executable).parent / "ledger"
    for args in (["policy", "show", NAME], ["policy", "list"]):
        r = subprocess.run(
            [str(ledger_bin), *args, "--policy-dir", str(policies)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert "request.subject.modle" in r.stderr and "did you mean 'model'" in r.stderr, r.stderr


def test_format_spec_placeholder_of_a_qualification_template_is_checked(tmp_path: Path) -> None:
    """Fix 90: the loader's check of any policy's templates reads a placeholder nested in a format spec
    (``template_paths``): ``{e[payload][gate]:{e[payload][gaet]}}`` is refused like ``{e[payload][gaet]}``."""
    d = tmp_path / "policies"
    d.mkdir()
    for p in (REPO / "policies").glob("*.toml"):
        shutil.copy(p, d / p.name)
    p = d / "backend-qualification.toml"
    old = "the {e[payload][gate]} run was stopped before it finished"
    text = p.read_text()
    assert text.count(old) == 1
    p.write_text(
        text.replace(old, "the {e[payload][gate]:{e[payload][gaet]}} run was stopped before it finished")
    )
    with pytest.raises(PolicyError, match=r"backend-qualification\.toml:\d+: .*gaet"):
        load_policy("backend-qualification", d)
    p.write_text(
        text.replace(old, "the {e[payload][gate]:{e[payload][gate]}} run was stopped before it finished")
    )
    load_policy("backend-qualification", d)
