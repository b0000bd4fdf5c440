"""Fix 90 (audit78 f1): a misspelled nested name read through a CEL map literal loaded.

``check_routing_reads`` refused a read through a list literal of the routing context's maps or lists
(``[request.subject][0].modle``: which names it holds cannot be told), a parenthesised choice and a call's
result, but not through a map literal: ``!('modle' in {'s': request.subject}.s)``, ``!has({'s':
request.subject}.s.modle)``, ``{'s': deployment.services}.s.all(x, !has(x.modle))`` and
``{'s': deployment.services}.s.exists(x, x.modle …)`` loaded and a key test on the misspelled name always
held. Now a ``}`` closing a map literal that holds the context's maps or lists is read like a list literal:
any name read through it is refused. A map literal of plain values (``{'a': 1}.a``) still loads.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ledger.errors import PolicyError
from ledger.policy.loader import LoadedPolicy
from ledger.policy.routing import _SCALAR, _cel_misread, _List, _Map, load_checked

REPO = Path(__file__).resolve().parents[2]
NAME = "routing-change"
PLAIN = 'expr = "deployment.host_key == host.key"'
UNTOLD = "which names {…} holds cannot be told"


@pytest.fixture
def policies(tmp_path: Path) -> Path:
    d = tmp_path / "policies"
    d.mkdir()
    for p in (REPO / "policies").glob("*.toml"):
        shutil.copy(p, d / p.name)
    return d


def _load(d: Path, expr: str) -> LoadedPolicy:
    p = d / f"{NAME}.toml"
    text = p.read_text()
    assert text.count(PLAIN) == 1
    p.write_text(text.replace(PLAIN, "expr = '''" + expr + "'''"))
    return load_checked(NAME, d)


def _refused(d: Path, expr: str, *words: str) -> str:
    with pytest.raises(PolicyError) as e:
        _load(d, expr)
    msg = e.value.message
    assert f"{NAME}.toml:" in msg and msg.split(f"{NAME}.toml:")[1].split(":")[0].isdigit(), msg  # file:line
    for w in words:
        assert w in msg, (w, msg)
    return msg


# --- the regression --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expr",
    [
        "!('modle' in {'s': request.subject}.s)",
        "!has({'s': request.subject}.s.modle)",
        "{'s': deployment.services}.s.all(x, !has(x.modle))",
        "{'s': deployment.services}.s.exists(x, x.modle == 'm')",
    ],
)
def test_misspelled_name_read_through_a_map_literal_is_refused(policies: Path, expr: str) -> None:
    """Regression: each loaded, and the key test on ``modle`` always held."""
    _refused(policies, expr, "`{…}.s`", UNTOLD, "list or map literal")


# --- neighbours ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expr",
    [
        # the correct name read through it: which names it holds cannot be told either
        "{'s': request.subject}.s.model == 'm'",
        # a string index of the literal, then of the value
        "{'s': request.subject}['s'].model == 'm'",
        "{'s': request.subject}['s']['modle'] == 'm'",
        # a map literal nested in a list literal, and a list literal nested in a map literal
        "[{'s': request.subject}][0].s.modle == 'm'",
        "{'s': [request.subject]}.s[0].modle == 'm'",
        # the map literal's value a nested map of the context (a level below the top)
        "{'e': deployment.services[0].env}.e.X == '1'",
        # a map literal keyed by a name of the context, its value the context's map
        "{request.action: request.subject}.route.model == 'm'",
        # parenthesised, and with the key test's name right
        "!('model' in ({'s': request.subject}).s)",
        # a macro's variable over the map literal's field
        "{'s': deployment.services}.s.exists(x, x.model == 'm')",
    ],
)
def test_any_name_read_through_a_map_literal_of_the_context_is_refused(policies: Path, expr: str) -> None:
    _refused(policies, expr, "holds cannot be told")


@pytest.mark.parametrize(
    "expr",
    [
        # a map literal of plain values: nothing of the context's names is hidden in it
        "{'a': 1}.a == 1 || deployment.host_key == host.key",
        "{'a': request.action}.a != 'restore' || deployment.host_key == host.key",
        # a key test of a map literal's own keys (its keys are written: nothing to check)
        "!('modle' in {'s': request.subject}) || deployment.host_key == host.key",
        # the context's names read directly still load
        "request.subject.model != '' && deployment.host_key == host.key",
        "deployment.services.all(x, !has(x.model) || x.model != '') && deployment.host_key == host.key",
    ],
)
def test_map_literal_of_plain_values_and_direct_reads_still_load(policies: Path, expr: str) -> None:
    policy = _load(policies, expr)
    assert any(c.spec.name == "deployment-host" for c in policy.routing_checks)


def test_misspelled_name_directly_is_still_refused_naming_the_names_there(policies: Path) -> None:
    _refused(policies, "!('modle' in request.subject)", "did you mean 'model'?")


def test_cel_misread_reads_a_map_literal_like_a_list_literal() -> None:
    """The same verdict for ``[m][0].x`` and ``{'k': m}.k.x``; none for a map literal of plain values."""
    roots = {"m": _Map({"a": _SCALAR}), "ls": _List(_Map({"a": _SCALAR})), "v": _SCALAR}
    for src in ("[m][0].a == 1", "{'k': m}.k.a == 1", "{'k': ls}.k[0].a == 1", "{'k': {'j': m}}.k.j.a == 1"):
        found = _cel_misread(src, roots)
        assert found is not None and "cannot be told" in found.why, src
    for src in ("{'k': v}.k == 1", "{'k': 1, 'j': 'x'}.j == 'x'", "m.a == 1", "{'k': m.a}.k == 1"):
        assert _cel_misread(src, roots) is None, src
    # the name misspelled below a map literal of plain values is not the context's: it loads (CEL judges it)
    assert _cel_misread("size({'k': 1}) == 1", roots) is None
