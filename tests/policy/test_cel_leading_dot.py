"""Fix 90 (audit78 f3): a leading-dot CEL name got past every load-time name check.

``.reqeust.action``, ``.request.subject.modle`` and ``!('modle' in .request.subject)`` loaded: the name
checks read a name after a ``.`` as a field, and CEL parses a leading-dot (absolute) name, which celpy never
resolves — every judgement reaching it was a CEL error, found only when a change was judged. Now
``compile_condition`` (the loader's one way to compile any policy's CEL: routing checks, qualification
gates, rules, semantic checks) refuses a ``.`` that starts a name, naming file and line — the correctly
spelled ``.request.action`` too, which would never evaluate.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ledger.errors import PolicyError
from ledger.policy.conditions import compile_condition, leading_dot_name
from ledger.policy.routing import load_checked

REPO = Path(__file__).resolve().parents[2]
NAME = "routing-change"
PLAIN = 'expr = "deployment.host_key == host.key"'
REFUSED = "leading-dot names are not supported"


@pytest.fixture
def policies(tmp_path: Path) -> Path:
    d = tmp_path / "policies"
    d.mkdir()
    for p in (REPO / "policies").glob("*.toml"):
        shutil.copy(p, d / p.name)
    return d


def _replace(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new))


def _refused_at_load(d: Path, name: str, *words: str) -> str:
    with pytest.raises(PolicyError) as e:
        load_checked(name, d)
    msg = e.value.message
    assert f"{name}.toml:" in msg and msg.split(f"{name}.toml:")[1].split(":")[0].isdigit(), msg  # file:line
    for w in words:
        assert w in msg, (w, msg)
    return msg


# --- the regression --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "shown"),
    [
        (".reqeust.action != 'restore' || deployment.host_key == host.key", "`.reqeust.action`"),
        (".request.subject.modle == 'm'", "`.request.subject.modle`"),
        ("!('modle' in .request.subject)", "`.request.subject`"),
    ],
)
def test_leading_dot_name_in_a_routing_check_is_refused_at_load(
    policies: Path, expr: str, shown: str
) -> None:
    """Regression: each loaded; judging it was a CEL error (``Undefined variable … '.reqeust'``)."""
    _replace(policies / f"{NAME}.toml", PLAIN, "expr = '''" + expr + "'''")
    _refused_at_load(policies, NAME, REFUSED, shown)


def test_correctly_spelled_leading_dot_name_is_refused_too(policies: Path) -> None:
    """``.request.action`` names the right variable, but celpy never resolves it: it would never evaluate."""
    _replace(policies / f"{NAME}.toml", PLAIN, "expr = '''.request.action != 'restore' || true'''")
    msg = _refused_at_load(policies, NAME, REFUSED, "`.request.action`", "write `request.action`")
    assert "reqeust" not in msg


def test_leading_dot_name_in_a_qualification_gate_is_refused_at_load(policies: Path) -> None:
    """The loader's code is shared: a gate of the qualification policy is refused the same way."""
    p = policies / "backend-qualification.toml"
    text = p.read_text()
    old = next(ln for ln in text.splitlines() if ln.startswith('expr = "') and "evidence" in ln)
    new = old.replace('expr = "', 'expr = ".params.x == 1 || ', 1)
    _replace(p, old, new)
    _refused_at_load(policies, "backend-qualification", REFUSED, "`.params.x`")


# --- neighbours: every place a name can start, and what is a field read (no leading dot) -----------------


@pytest.mark.parametrize(
    ("source", "shown"),
    [
        (".request.action", ".request.action"),  # the expression's start
        ("x == .a.b", ".a.b"),  # after an operator
        ("x != .a", ".a"),
        ("x-.a", ".a"),
        ("f(.a)", ".a"),  # after ( , [ { ! ? :
        ("f(x, .a)", ".a"),
        ("[.a][0]", ".a"),
        ("{'k': .a}", ".a"),
        ("!.a", ".a"),
        ("c ? .a : b", ".a"),
        ("c ? b : .a", ".a"),
        ("'k' in .a.m", ".a.m"),  # after the keyword in
        ("true && .a", ".a"),
        ("x.exists(e, .e.f)", ".e.f"),  # a macro's variable too
        (". a", ".a"),  # whitespace after the dot
        (".a.size()", ".a.size"),
    ],
)
def test_leading_dot_name_is_found_wherever_a_name_starts(source: str, shown: str) -> None:
    assert leading_dot_name(source) == shown
    with pytest.raises(PolicyError, match=r"^t\.toml:7: CEL .* reads `" + shown.replace(".", r"\.") + "`"):
        compile_condition(source, "t.toml:7")


@pytest.mark.parametrize(
    "source",
    [
        "a.b",
        "a.b.c == 1",
        "(a).b == 1",
        "a[0].b == 1",
        "{'k': 1}.k == 1",
        "'s'.size() == 1",
        "1.5 + .5 > 0.0",  # a float written with a leading dot is no name
        ".5 < 1.0",
        "'.a' == x",  # inside a string literal
        '".a.b" != x',
        "x.?b",  # CEL's optional field selection (no name after the dot)
        "true",
    ],
)
def test_field_reads_and_literals_are_no_leading_dot_name(source: str) -> None:
    assert leading_dot_name(source) is None


def test_untokenisable_text_is_left_to_cel() -> None:
    """A text the tokeniser cannot read is CEL's to refuse (a syntax error), never passed here."""
    assert leading_dot_name("'unterminated") is None
    with pytest.raises(PolicyError, match="syntax error"):
        compile_condition("'unterminated", "t:1")


def test_shipped_policies_have_no_leading_dot_name() -> None:
    for name in ("routing-change", "backend-qualification"):
        load_checked(name, REPO / "policies")
