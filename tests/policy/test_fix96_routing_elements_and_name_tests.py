"""Fix 96 (issue 11): routing reads below the top level — a param list's elements, and key tests as macros.

1. A param that is a list of tables (``params.tiers = [{name = "a", limit = 1}, …]``) was read as an entry
   whose names the loader checks, and the loader does not: ``params.tiers[0].misspelled`` or
   ``params.tiers.all(t, t.misspelled == 1)`` loaded, then was a CEL error (or a silent pass) at judging.
   Now an element holds what its list's tables set together (a name only some set is optional: read
   where an element leaves it out, a CEL error, the change refused), and a name none sets is refused at
   load, naming it; elements of different kinds (a table and a value) hold no name that can be told.
2. A key test written as a macro over a map — ``!request.subject.exists(k, k == 'modle')``, ``all(k, k !=
   'modle')``, ``'modle' == k``, ``k in ['modle']`` — loaded and always held the same (the gate never builds
   that name). Fix 96 checked the literal compared with the macro's variable; fix 101 (audit 85 f1: the same
   test in other spellings, ``(k) == 'modle'``, ``.map(k, k)``, ``dyn()``, a choice, loaded) replaced that
   with the general rule: a macro (or any other use but a read by name) over a map whose names are fixed is
   refused at load, whatever it compares (``test_fix101_closed_map_names.py``); a name test is written
   ``'modle' in request.subject`` or ``has(request.subject.modle)``, checked against the names. A service's
   ``env`` (free names) and top-level ``params`` (the loader's to judge) may still be iterated. The cases
   below whose expectation fix 101 changed say so.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from ledger.entries import parse_time
from ledger.errors import PolicyError
from ledger.policy.conditions import compile_condition
from ledger.policy.fixtures import build_fixture_ledger
from ledger.policy.loader import LoadedPolicy, load_policy
from ledger.policy.routing import (
    _MIXED,
    _context_problem,
    _List,
    _Map,
    _params_node,
    _routing_schema,
    check_routing_change,
    check_routing_reads,
    load_checked,
)
from ledger.service import Ledger
from tests.policy.conftest import FIXTURES, POLICY_DIR

REPO = Path(__file__).resolve().parents[2]
NAME = "routing-change"
PLAIN = 'expr = "deployment.host_key == host.key"'  # deployment-host: applies wherever a deployment is
PLAIN_FAIL = 'fail = "the deployment is for host {deployment[host]}, not {host[name]}"'
TIERS = 'tiers = [{ name = "a", limit = 1 }, { name = "b", limit = 2 }]'
UNEVEN = 'tiers = [{ name = "a" }, { name = "b", extra = 1 }]'


@pytest.fixture
def policies(tmp_path: Path) -> Path:
    d = tmp_path / "policies"
    d.mkdir()
    for p in (REPO / "policies").glob("*.toml"):
        shutil.copy(p, d / p.name)
    return d


def _write(d: Path, expr: str, params: str = "", fail: str | None = None, tables: str = "") -> None:
    """The shipped policy with deployment-host's ``expr`` (and ``fail``) replaced, ``params`` added to its
    [params] and ``tables`` (TOML tables) put before its [routing]."""
    p = d / f"{NAME}.toml"
    text = (REPO / "policies" / f"{NAME}.toml").read_text()
    assert text.count(PLAIN) == 1 and text.count(PLAIN_FAIL) == 1
    text = text.replace(PLAIN, "expr = '''" + expr + "'''")
    if fail is not None:
        text = text.replace(PLAIN_FAIL, 'fail = "' + fail + '"')
    if params:
        text = text.replace("[params]\n", "[params]\n" + params + "\n", 1)
    if tables:
        assert text.count("\n[routing]\n") == 1
        text = text.replace("\n[routing]\n", tables + "\n[routing]\n", 1)
    p.write_text(text)


def _load(d: Path, expr: str, params: str = "", fail: str | None = None, tables: str = "") -> LoadedPolicy:
    _write(d, expr, params, fail, tables)
    policy = load_policy(NAME, d)
    check_routing_reads(policy)
    return policy


def _refused(
    d: Path, expr: str, *words: str, params: str = "", fail: str | None = None, tables: str = ""
) -> str:
    with pytest.raises(PolicyError) as e:
        _load(d, expr, params, fail, tables)
    msg = e.value.message
    assert f"{NAME}.toml:" in msg and msg.split(f"{NAME}.toml:")[1].split(":")[0].isdigit(), msg  # file:line
    for w in words:
        assert w in msg, (w, msg)
    return msg


# --- 1. a param list of tables: its elements' names ----------------------------------------------------


def test_misspelled_name_of_a_param_list_element_by_index_is_refused(policies: Path) -> None:
    """Regression: ``params.tiers[0].misspelled`` loaded (the element read as an entry nobody checks)."""
    _refused(
        policies,
        "params.tiers[0].misspelled == 1",
        "`params.tiers[0].misspelled`",
        "holds no 'misspelled'",
        "limit, name",
        params=TIERS,
    )


def test_misspelled_name_of_a_param_list_element_in_a_macro_is_refused(policies: Path) -> None:
    """Regression: ``params.tiers.all(t, t.misspelled == 1)`` loaded."""
    _refused(
        policies,
        "params.tiers.all(t, t.misspelled == 1)",
        "`t.misspelled`",
        "limit, name",
        "t: each of params.tiers",
        params=TIERS,
    )


def test_array_of_tables_written_as_double_brackets_is_read_alike(policies: Path) -> None:
    """``[[params.tiers]]`` is the same list of tables as the inline form."""
    tables = '\n[[params.tiers]]\nname = "a"\nlimit = 1\n\n[[params.tiers]]\nname = "b"\nlimit = 2\n'
    _refused(
        policies, "params.tiers.exists(t, t.limt == 1)", "`t.limt`", "did you mean 'limit'?", tables=tables
    )
    _load(policies, "params.tiers.exists(t, t.limit == 1)", tables=tables)


@pytest.mark.parametrize(
    ("expr", "read"),
    [
        ("params.tiers.map(t, t.misspelled).exists(v, v == 1)", "`t.misspelled`"),
        ("params.tiers.filter(t, t.limit > 1).exists(v, v.misspelled == 1)", "`v.misspelled`"),
        ("params.tiers.exists_one(t, t.misspelled == 1)", "`t.misspelled`"),
        ("params.tiers[1]['misspelled'] == 1", "holds no 'misspelled'"),
        ("params.tiers.exists(t, 'limt' in t)", "`'limt' in t`"),
        ("params.tiers.exists(t, has(t.limt))", "`t.limt`"),
        ("params.tiers.exists(t, t.exists(k, k == 'limt'))", "`t.exists(…)`"),  # fix 101: the macro
    ],
)
def test_misspelled_element_name_read_any_way_is_refused(policies: Path, expr: str, read: str) -> None:
    _refused(policies, expr, read, params=TIERS)


def test_name_no_element_sets_is_refused_one_some_set_loads(policies: Path) -> None:
    """The element's names are the union of its tables' (one only some set loads: read where an element
    leaves it out, it is a CEL error when judged — the change refused); a name none sets is refused."""
    _refused(policies, "params.tiers[0].nope == 1", "holds no 'nope'", "extra, name", params=UNEVEN)
    policy = _load(policies, "params.tiers.exists(t, 'extra' in t && t.extra == 1)", params=UNEVEN)
    schema = _routing_schema(policy.spec, policy.params)
    params = schema["params"]
    assert isinstance(params, _Map)
    assert params.fields["tiers"] == _List(
        _Map({"extra": "scalar", "name": "scalar"}, optional=frozenset({"extra"}))
    )
    # read unguarded where an element leaves it out: a CEL error, never a pass
    bare = compile_condition("params.tiers.all(t, t.extra == 1)", "t.toml:1")
    with pytest.raises(PolicyError, match="extra"):
        bare.holds({"params": policy.params})


def test_nested_lists_and_tables_are_read_at_every_depth(policies: Path) -> None:
    grid = 'grid = [[{ name = "a" }], [{ name = "b" }]]'
    _refused(policies, "params.grid[0][0].nme == 'a'", "did you mean 'name'?", params=grid)
    _load(policies, "params.grid[0][0].name == 'a'", params=grid)
    inner = "t = { inner = [{ lmt = 1 }] }"
    _refused(policies, "params.t.inner.all(x, x.lim > 0)", "`x.lim`", "did you mean 'lmt'?", params=inner)


def test_list_of_tables_and_values_holds_no_name_that_can_be_told(policies: Path) -> None:
    mixed = "tiers = [{ a = 1 }, 2]"
    _refused(policies, "params.tiers[0].a == 1", "not all of one kind", params=mixed)
    _refused(policies, "params.tiers.exists(t, t.a == 1)", "not all of one kind", params=mixed)
    _refused(policies, "[params.tiers[0]].exists(m, m.a == 1)", "cannot be told", params=mixed)
    _load(policies, "size(params.tiers) == 2", params=mixed)  # the list itself: read whole


def test_template_reading_a_misspelled_element_name_is_refused(policies: Path) -> None:
    _refused(
        policies,
        "deployment.host_key == host.key",
        "{params[tiers][0][limt]}",
        params=TIERS,
        fail="tier {params[tiers][0][limt]}",
    )
    _load(policies, "deployment.host_key == host.key", params=TIERS, fail="tier {params[tiers][0][limit]}")


@pytest.mark.parametrize(
    "expr",
    [
        "params.tiers.exists(t, t.limit == 1)",
        "params.tiers[1].name == 'a'",
        "params.tiers.map(t, t.limit).exists(v, v > 1)",
        "params.tiers.exists(t, 'limit' in t)",
        "params.tiers.exists(t, has(t.name))",  # fix 101: was ``t.exists(k, k == 'name')``, now refused
    ],
)
def test_names_the_elements_set_still_load(policies: Path, expr: str) -> None:
    _load(policies, expr, params=TIERS)


def test_params_node_of_lists() -> None:
    assert _params_node([]) == _List("scalar")
    assert _params_node([1, "a"]) == _List("scalar")
    assert _params_node([[1], [2, 3]]) == _List(_List("scalar"))
    assert _params_node([{"a": 1}, 2]) == _List(_MIXED)
    assert _params_node([{"a": [1]}, {"a": {"b": 1}}]) == _List(_Map({"a": _MIXED}))


def test_context_of_uneven_and_mixed_param_lists_is_judged() -> None:
    """The context the gate builds (``_context_problem``) holds what the reads were checked against."""
    for value in (
        {"tiers": [{"name": "a"}, {"name": "b", "extra": 1}]},
        {"tiers": [{"a": 1}, 2]},
        {"tiers": []},
    ):
        assert _context_problem(value, _params_node(value), "routing context params") is None


def test_gate_judges_a_policy_with_a_param_list_of_tables(tmp_path: Path, policies: Path) -> None:
    """End to end: the honest read of an uneven list of tables is judged (the context is not refused)."""
    _write(policies, "deployment.host_key == host.key && params.tiers.exists(t, t.name == 'a')", UNEVEN)
    policy = load_checked(NAME, policies)
    ledger, _spec, _b = build_fixture_ledger(
        FIXTURES / "routing-change/seed004-router.toml", tmp_path / "home", POLICY_DIR, init=Ledger.init
    )
    dep: dict[str, Any] = {
        "host": "gpu-box-1",
        "services": [
            {
                "name": "e",
                "engine": "vllm",
                "model": "Qwen3-Embedding-8B",
                "gpus": [2],
                "gpu_memory_utilization": 0.25,
            }
        ],
    }
    subject = {"backend": "vllm", "model": "Qwen3-Embedding-8B", "host": "gpu-box-1"}
    try:
        r = check_routing_change(
            ledger, policy, subject, deployment=dep, now=parse_time("2026-09-11T09:00:00Z")
        )
    finally:
        ledger.close()
    status = {c["name"]: c["status"] for c in r["checks"]}
    assert status["deployment-host"] == "passed", r


# --- 2. a key test written as a macro over a map ---------------------------------------------------------


def test_negated_exists_over_subject_names_with_a_misspelled_name_is_refused(policies: Path) -> None:
    """Regression: ``!request.subject.exists(k, k == 'modle')`` loaded and always held. (Fix 101: refused as
    a macro over the names of a map whose names are fixed, naming them; was: the literal compared.)"""
    _refused(
        policies,
        "!request.subject.exists(k, k == 'modle')",
        "`request.subject.exists(…)`",
        "backend, host, model",
        "`'name' in request.subject`",
    )


def test_all_over_subject_names_against_a_misspelled_name_is_refused(policies: Path) -> None:
    """Regression: ``request.subject.all(k, k != 'modle')`` loaded and always held."""
    _refused(policies, "request.subject.all(k, k != 'modle')", "`request.subject.all(…)`")  # fix 101


@pytest.mark.parametrize(
    ("expr", "read"),
    [
        ("'modle' in request.subject", "`'modle' in request.subject`"),
        ("!('modle' in request.subject)", "`'modle' in request.subject`"),
        ("has(request.subject.modle)", "`request.subject.modle`"),
        # fix 101: each below is refused as the macro over the map's names (was: the literal compared)
        ("request.subject.exists(k, 'modle' == k)", "`request.subject.exists(…)`"),
        ("request.subject.exists(k, 'modle' != k)", "`request.subject.exists(…)`"),
        ("request.subject.exists_one(k, k == 'modle')", "`request.subject.exists_one(…)`"),
        ("size(request.subject.filter(k, k == 'modle')) == 0", "`request.subject.filter(…)`"),
        ("request.subject.map(k, k == 'modle').exists(b, b)", "`request.subject.map(…)`"),
        ("request.subject.exists(k, k == 'modle' || k == 'model')", "`request.subject.exists(…)`"),
        ("request.subject.exists(k, (k == 'modle'))", "`request.subject.exists(…)`"),
        ("request.subject.exists(k, k in ['model', 'modle'])", "`request.subject.exists(…)`"),
        ('request.subject.exists(k, k == "modle")', "`request.subject.exists(…)`"),
        ("current.subject.exists(k, k == 'campain')", "`current.subject.exists(…)`"),
        # (fix 107: params.engine_names is the qualification's one copy; a routing policy's own table here)
        ("params.served_identity.exists(k, k == 'gaet')", "`params.served_identity.exists(…)`"),
        ("deployment.services.exists(s, s.exists(k, k == 'modle'))", "`s.exists(…)`"),
    ],
)
def test_key_test_of_a_name_the_map_does_not_hold_is_refused(policies: Path, expr: str, read: str) -> None:
    _refused(policies, expr, read)


@pytest.mark.parametrize(
    "expr",
    [
        "r'model' in request.subject",
        "'mo\\x64el' in request.subject",
    ],
)
def test_key_test_with_a_literal_not_read_at_load_is_refused(policies: Path, expr: str) -> None:
    """Fail closed: a name written so that its text is not read at load (raw, escaped) is not taken. (Fix
    101: the macro spellings, ``request.subject.exists(k, k == r'modle')``, are refused as macros.)"""
    _refused(policies, expr, "not read at load", "backend, host, model")


@pytest.mark.parametrize(
    "expr",
    [
        # fix 101: the macros over request.subject's, current.subject's and a params table's names
        # that loaded here (``request.subject.exists(k, k == 'model')``, ``k.startsWith('mod')``, …) are
        # refused now: tests/policy/test_fix101_closed_map_names.py
        "'model' in request.subject",
        "has(request.subject.backend)",
        "'campaign' in current.subject",
        # free names: a service's env, and params (the loader's to judge)
        "deployment.services.exists(s, s.env.exists(k, k == 'ANY_NAME'))",
        "deployment.services.exists(s, s.env.exists(k, k == r'ANY_NAME'))",
        "params.exists(k, k == 'not_set')",
        "'gate' in params.served_identity",  # fix 107: engine_names is the qualification's, not here
        # a list's elements compared with a name are values, not a map's names
        "params.gpu_codes_handled.exists(c, c == 'no-such-code')",
        "host.gpu_indexes.exists(i, i == 'gpu7')",
    ],
)
def test_key_test_of_a_name_the_map_holds_or_of_free_names_loads(policies: Path, expr: str) -> None:
    _write(policies, expr)
    load_checked(NAME, policies)


def test_request_subject_all_with_a_name_not_matched_is_refused(policies: Path) -> None:
    """``campaign`` is a subject field, but not one this policy's match_subject builds in request.subject."""
    msg = _refused(policies, "request.subject.all(k, k != 'campaign')", "`request.subject.all(…)`")  # fix 101
    assert "backend, host, model" in msg


def test_shipped_routing_policy_still_loads() -> None:
    load_checked(NAME, REPO / "policies")
