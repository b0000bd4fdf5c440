"""Fix 101 (issue 11, audit 85 f1): a map whose names are fixed is read by its names only.

Fix 96 refused ``!request.subject.exists(k, k == 'modle')`` at load (a key test of a name the gate never
builds: always true), but the same test loaded in other spellings — ``(k) == 'modle'``, ``k == ('modle')``,
``.map(k, k).exists(x, x == 'modle')``, ``'modle' in request.subject.map(k, k)``, ``dyn(request.subject)``,
a choice of ``request.subject``, ``[k].exists(j, j == 'modle')``, ``k == 'mod' + 'le'``, ``string(k)``,
``k in {'modle': 1}``, ``k == params.key`` — and always held. Chasing spellings does not end, so the rule
is general: a routing check may not iterate over, convert or compute with the names of a closed map (one
whose names the gate builds and ``_routing_schema`` knows: ``request.subject``, ``current.subject``,
``host``, a deployment service, a param's table, an element of a param list of tables; not a service's
``env`` nor top-level ``params``, whose names are free). A macro or method over it, ``dyn()``,
``string()``, ``size()``, a comparison (but with null) or a name test whose name is not a plain literal is
refused at load, naming it and the names there; a name test is written ``has(m.name)`` or ``'name' in m``,
checked against them. Lists of maps are iterated as before (their elements are read by name).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ledger.errors import PolicyError
from ledger.policy.loader import LoadedPolicy
from ledger.policy.routing import _cel_misread, _List, _Map, load_checked

REPO = Path(__file__).resolve().parents[2]
NAME = "routing-change"
PLAIN = 'expr = "deployment.host_key == host.key"'  # deployment-host: applies wherever a deployment is
TIERS = 'tiers = [{ name = "a", limit = 1 }, { name = "b", limit = 2 }]'
KEY = 'key = "modle"'
RULE = "may not iterate over, convert or compute with the names of"


@pytest.fixture
def policies(tmp_path: Path) -> Path:
    d = tmp_path / "policies"
    d.mkdir()
    for p in (REPO / "policies").glob("*.toml"):
        shutil.copy(p, d / p.name)
    return d


def _load(d: Path, expr: str, params: str = "") -> LoadedPolicy:
    p = d / f"{NAME}.toml"
    text = (REPO / "policies" / f"{NAME}.toml").read_text()
    assert text.count(PLAIN) == 1
    text = text.replace(PLAIN, "expr = '''" + expr + "'''")
    if params:
        text = text.replace("[params]\n", "[params]\n" + params + "\n", 1)
    p.write_text(text)
    return load_checked(NAME, d)


def _refused(d: Path, expr: str, *words: str, params: str = "") -> str:
    with pytest.raises(PolicyError) as e:
        _load(d, expr, params)
    msg = e.value.message
    assert f"{NAME}.toml:" in msg and msg.split(f"{NAME}.toml:")[1].split(":")[0].isdigit(), msg  # file:line
    for w in words:
        assert w in msg, (w, msg)
    return msg


# --- the regressions: each spelling of the always-true key test ------------------------------------------


def test_parenthesised_variable_compared_with_a_misspelled_name_is_refused(policies: Path) -> None:
    """Regression: ``!request.subject.exists(k, (k) == 'modle')`` loaded and always held."""
    _refused(
        policies,
        "!request.subject.exists(k, (k) == 'modle')",
        "`request.subject.exists(…)`",
        RULE,
        "backend, host, model",
        "`has(request.subject.name)`",
        "`'name' in request.subject`",
    )


def test_parenthesised_misspelled_name_compared_with_the_variable_is_refused(policies: Path) -> None:
    """Regression: ``!request.subject.exists(k, k == ('modle'))`` loaded."""
    _refused(policies, "!request.subject.exists(k, k == ('modle'))", "`request.subject.exists(…)`", RULE)


def test_names_mapped_then_tested_with_a_misspelled_name_is_refused(policies: Path) -> None:
    """Regression: ``!request.subject.map(k, k).exists(x, x == 'modle')`` loaded."""
    _refused(policies, "!request.subject.map(k, k).exists(x, x == 'modle')", "`request.subject.map(…)`", RULE)


def test_misspelled_name_in_the_names_mapped_is_refused(policies: Path) -> None:
    """Regression: ``!('modle' in request.subject.map(k, k))`` loaded."""
    _refused(policies, "!('modle' in request.subject.map(k, k))", "`request.subject.map(…)`", RULE)


def test_dyn_of_the_subject_iterated_with_a_misspelled_name_is_refused(policies: Path) -> None:
    """Regression: ``!dyn(request.subject).exists(k, k == 'modle')`` loaded."""
    _refused(policies, "!dyn(request.subject).exists(k, k == 'modle')", "`dyn(request.subject)`", RULE)


def test_choice_of_the_subject_iterated_with_a_misspelled_name_is_refused(policies: Path) -> None:
    """Regression: ``!(true ? request.subject : request.subject).exists(k, k == 'modle')`` loaded."""
    _refused(
        policies,
        "!(true ? request.subject : request.subject).exists(k, k == 'modle')",
        "`(…).exists(…)`",
        "holds a map of the routing context whose names are fixed",
    )


def test_variable_wrapped_in_a_list_tested_with_a_misspelled_name_is_refused(policies: Path) -> None:
    """Regression: ``!request.subject.exists(k, [k].exists(j, j == 'modle'))`` loaded."""
    _refused(
        policies, "!request.subject.exists(k, [k].exists(j, j == 'modle'))", "`request.subject.exists(…)`"
    )


@pytest.mark.parametrize(
    "expr",
    [
        "!request.subject.exists(k, k == 'mod' + 'le')",
        "!request.subject.exists(k, string(k) == 'modle')",
        "!request.subject.exists(k, k in {'modle': 1})",
        "!request.subject.exists(k, k == params.key)",
        "!request.subject.exists(k, k.startsWith('modl'))",
        "request.subject.all(k, k != 'modle')",
        "request.subject.exists_one(k, k == 'modle')",
        "size(request.subject.filter(k, k == 'modle')) == 0",
    ],
)
def test_name_computed_or_converted_in_a_macro_over_the_subject_is_refused(policies: Path, expr: str) -> None:
    """Regression: a concatenated, converted, map-literal or param name compared with the subject's names."""
    _refused(policies, expr, "request.subject.", RULE, "backend, host, model", params=KEY)


def test_element_of_a_param_list_of_tables_mapped_over_its_names_is_refused(policies: Path) -> None:
    """Regression: ``params.tiers.exists(t, t.map(k, k).exists(x, x == 'limt'))`` loaded."""
    _refused(
        policies,
        "params.tiers.exists(t, t.map(k, k).exists(x, x == 'limt'))",
        "`t.map(…)`",
        "limit, name",
        "t: each of params.tiers",
        params=TIERS,
    )


# --- neighbours: other ways to compute with a closed map's names --------------------------------------


@pytest.mark.parametrize(
    ("expr", "read"),
    [
        ("size(request.subject) == 3", "`size(request.subject)`"),
        ("request.subject.size() == 3", "`request.subject.size(…)`"),
        ("string(request.subject) != ''", "`string(request.subject)`"),
        ("request.subject == {'modle': 'm'}", "compared whole"),
        ("request.subject != current.subject", "compared whole"),
        ("params.key in request.subject", "`… in request.subject`"),
        ("'mo' + 'dle' in request.subject", "`… in request.subject`"),
        ("'model' in request.subject == true", "`… in request.subject`"),
        ("request.subject in [current.subject]", "compared whole"),
        ("!('modle' in (true ? request.subject : current.subject))", "`… in (…)`"),
        ("[request.subject] == [{'modle': 'm'}]", "`[…]`"),
        ("string({'s': request.subject}) != ''", "string()"),
        ("dyn(request).subject.model == 'm'", "cannot be told"),  # read first: refused as before
        ("host.exists(k, k == 'p2p_falt')", "`host.exists(…)`"),
        ("current.subject.exists(k, k == 'campain')", "`current.subject.exists(…)`"),
        ("params.served_identity.exists(k, k == 'gaet')", "`params.served_identity.exists(…)`"),
        # fix 107: params.engine_names is the qualification's one copy; another macro over a params table
        ("params.served_identity.all(k, k != 'gaet')", "`params.served_identity.all(…)`"),
        ("deployment.services.exists(s, s.exists(k, k == 'modle'))", "`s.exists(…)`"),
        ("deployment.services.exists(s, s == {'nme': 'a'})", "compared whole"),
        ("dyn(deployment.services).exists(s, s.name == 'a')", "cannot be told"),  # (the read, first)
        ("deployment.services == []", "list of maps whose names are fixed"),
        ("'embed' in deployment.services", "a membership test"),
        ("request.subject in services", "compared whole"),
        ("dyn(deployment.services).exists(s, s.exists(k, k == 'nme'))", "`dyn(deployment.services)`"),
    ],
)
def test_closed_map_used_whole_is_refused(policies: Path, expr: str, read: str) -> None:
    _refused(policies, expr, read, params=KEY)


def test_the_right_name_in_each_refused_spelling_is_refused_too(policies: Path) -> None:
    """The rule is about the spelling, not the name: the right name in a macro over the names is refused
    alike (write ``'model' in request.subject``)."""
    for expr in (
        "request.subject.exists(k, (k) == 'model')",
        "request.subject.exists(k, k == ('model'))",
        "request.subject.map(k, k).exists(x, x == 'model')",
        "'model' in request.subject.map(k, k)",
        "dyn(request.subject).exists(k, k == 'model')",
        "(true ? request.subject : request.subject).exists(k, k == 'model')",
        "request.subject.exists(k, [k].exists(j, j == 'model'))",
        "request.subject.exists(k, k == 'mo' + 'del')",
        "request.subject.exists(k, string(k) == 'model')",
        "request.subject.exists(k, k in {'model': 1})",
    ):
        _refused(policies, expr, "request.subject")
    _refused(
        policies, "params.tiers.exists(t, t.map(k, k).exists(x, x == 'limit'))", "`t.map(…)`", params=TIERS
    )


# --- neighbours that load -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expr",
    [
        # a name test as written: checked against the names
        "'model' in request.subject",
        "!('backend' in request.subject) || request.subject.backend != ''",
        "has(request.subject.model) && has(current.subject.campaign)",
        "request.subject['model'] != ''",
        # compared with null
        "deployment != null && current != null",
        "(deployment != null) && !(null == current)",
        # lists of maps: their elements iterated, counted, indexed
        "deployment.services.exists(s, s.name != '' && 'model' in s && has(s.gpus))",
        "size(deployment.services) > 0 && deployment.services[0].name != ''",
        "deployment.services.filter(s, s.name != '').all(s, s.model != '')",
        "deployment.services.map(s, s.name).exists(n, n == 'embed')",
        "services.exists(s, s.model_key == request.model_key)",
        "params.tiers.exists(t, t.limit == 1 && 'name' in t)",
        "size(host.gpu_faults_unplaced) == 0",
        # free names: a service's env, top-level params (the loader's to judge)
        "deployment.services.exists(s, s.env.exists(k, k.startsWith('CUDA')))",
        "deployment.services.all(s, size(s.env) >= 0 && !('X' in s.env) || s.env.X != '')",
        "params.exists(k, k == 'not_set')",
        # a map literal holding a closed map: its own keys tested
        "!('modle' in {'s': request.subject})",
        # lists of values
        "host.gpu_indexes.exists(i, i == '0') || size([host.gpu_indexes]) == 1",
        "params.gpu_codes_handled.exists(c, c == 'p2p-fault')",
    ],
)
def test_reads_by_name_and_lists_iterated_still_load(policies: Path, expr: str) -> None:
    policy = _load(policies, f"({expr}) || deployment.host_key == host.key", params=TIERS)
    assert any(c.spec.name == "deployment-host" for c in policy.routing_checks)


@pytest.mark.parametrize(
    ("expr", "read"),
    [
        ("'modle' in request.subject", "did you mean 'model'?"),
        ("has(request.subject.modle)", "did you mean 'model'?"),
        ("'campain' in current.subject", "did you mean 'campaign'?"),
        ("deployment.services.exists(s, 'nme' in s)", "did you mean 'name'?"),
    ],
)
def test_name_test_of_a_wrong_name_is_refused_naming_the_right_one(
    policies: Path, expr: str, read: str
) -> None:
    _refused(policies, expr, read)


def test_shipped_routing_policy_still_loads() -> None:
    load_checked(NAME, REPO / "policies")


def test_cel_misread_judges_closed_open_and_listed_maps() -> None:
    """The rule at the checker: a closed map's names are not iterated; a free map's are; a list's elements
    are."""
    closed = _Map({"a": "scalar"})
    roots = {"m": closed, "free": _Map(free="scalar"), "ls": _List(closed)}
    for src in ("m.exists(k, k == 'a')", "dyn(m) != null", "size(m) == 1", "m == {'a': 1}", "[m][0] == null"):
        assert _cel_misread(src, roots) is not None, src
    for src in (
        "free.exists(k, k == 'a')",
        "ls.exists(x, x.a == 1)",
        "size(ls) == 1",
        "'a' in m",
        "m != null",
        "has(m.a)",
    ):
        assert _cel_misread(src, roots) is None, src
