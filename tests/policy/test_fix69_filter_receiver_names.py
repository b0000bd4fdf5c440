"""The policy load name check over a macro whose receiver is a `filter`/`map` call (issue 11, audit 56 f3).

Before: ``_paths_read`` took the one token before ``.exists`` as a macro's receiver; for
``evidence.filter(x, x.kind == 'engine.launch').exists(e, !('probe_faild' in e.derived) || …)`` that token
is ``)``, so ``e`` was no root and none of its reads was checked: the misspelt fact loaded and the check
always held. Now (``conditions._Elements``) a variable over ``R.filter(…)`` ranges over ``R``'s elements (a
list root's: entries, checked as such), over ``R.map(x, x.path)`` the value at that path of each entry,
over any other ``map`` of entries computed values (read whole only); a receiver that may hold entries but
whose elements cannot be told (``[evidence][0]``, ``(evidence)``, ``[e]``) is refused, never skipped.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.errors import PolicyError
from ledger.policy.conditions import Read, compile_condition, paths_read
from ledger.policy.loader import load_policy

QUAL = "backend-qualification"
PROBE_CHECK = 'expr = "evidence.exists(e, !e.derived.probe_failed)"'
FILTER = "evidence.filter(x, x.kind == 'engine.launch')"
ROOTS = {"e": "e", "params": "params"}
LISTS = {"evidence": "evidence[]"}


def _with(d: Path, expr: str) -> None:
    p = d / f"{QUAL}.toml"
    text = p.read_text()
    assert PROBE_CHECK in text
    p.write_text(text.replace(PROBE_CHECK, f'expr = "{expr}"', 1))


def _refused(d: Path, expr: str, match: str) -> str:
    _with(d, expr)
    with pytest.raises(PolicyError, match=match) as e:
        load_policy(QUAL, d)
    msg = str(e.value)
    assert ".toml:" in msg, msg  # names the file and line
    return msg


def _loads(d: Path, expr: str) -> None:
    _with(d, expr)
    load_policy(QUAL, d)


def _reads(source: str) -> tuple[Read, ...] | None:
    return paths_read(source, ROOTS, LISTS)


# --- the audit's case, at load -----------------------------------------------------------------------------


def test_variable_over_a_filter_of_evidence_skipped_its_reads(policy_copy: Path) -> None:
    """Regression: a misspelt fact read by `e` over `evidence.filter(…)` loaded (the check always held)."""
    expr = f"{FILTER}.exists(e, !('probe_faild' in e.derived) || !e.derived.probe_faild)"
    msg = _refused(policy_copy, expr, "no such derived fact")
    assert "probe_faild" in msg and "did you mean 'probe_failed'" in msg


def test_variable_over_a_filter_of_evidence_misspelt_entry_field_refused(policy_copy: Path) -> None:
    msg = _refused(policy_copy, f"{FILTER}.exists(e, !has(e.paylod.ready))", "an entry has no field 'paylod'")
    assert "e.paylod" in msg


def test_variable_over_a_filter_of_evidence_loads_spelled_right(policy_copy: Path) -> None:
    _loads(policy_copy, f"{FILTER}.exists(e, !e.derived.probe_failed)")


def test_misspelt_read_in_the_filter_itself_refused(policy_copy: Path) -> None:
    _refused(policy_copy, "evidence.filter(x, x.kindd == 'a').exists(e, !e.derived.probe_failed)", "kindd")


@pytest.mark.parametrize(
    "expr",
    [
        f"{FILTER}.filter(y, y.seq > 0).exists(e, !e.derived.probe_faild)",  # a chain of filters
        f"evidence.filter(y, {FILTER}.size() > 0).exists(e, !e.derived.probe_faild)",  # nested in one
        f"{FILTER}.all(e, !e.derived.probe_faild)",
        f"{FILTER}.exists_one(e, e.derived.probe_faild)",
        "evidence.map(x, x).exists(e, !e.derived.probe_faild)",  # map(x, x): the entries themselves
        "evidence.map(x, x.derived).exists(d, !d.probe_faild)",  # the value at a path of each entry
        "evidence.map(x, x.kind == 'a', x['derived']).exists(d, !has(d.probe_faild))",
    ],
)
def test_neighbour_receivers_of_entries_check_their_variable(policy_copy: Path, expr: str) -> None:
    _refused(policy_copy, expr, "probe_faild")


@pytest.mark.parametrize(
    "expr",
    [
        "[evidence][0].exists(e, !e.derived.probe_failed)",
        "(evidence).exists(e, !e.derived.probe_failed)",
        "evidence.map(x, {'d': x.derived}).exists(m, !m.d.probe_failed)",  # a field of a computed value
        "evidence.map(x, [x]).exists(l, l.exists(e, !e.derived.probe_failed))",
    ],
)
def test_receiver_whose_elements_cannot_be_told_is_refused(policy_copy: Path, expr: str) -> None:
    _refused(policy_copy, expr, "cannot be told")


# --- paths_read: what each variable is read as -------------------------------------------------------------


def test_filter_receiver_reads_are_entry_reads() -> None:
    assert _reads(f"{FILTER}.exists(e, e.derived.ok)") == (
        Read("evidence[]", ("kind",)),
        Read("evidence[]", ("derived", "ok")),
    )
    # filter(filter(…)): the inner filter's variable, then the outer's, then the macro's: all entries
    got = _reads("evidence.filter(x, x.seq > 1).filter(y, y.kind == 'a').all(e, 'ok' in e.payload)")
    assert got == (
        Read("evidence[]", ("seq",)),
        Read("evidence[]", ("kind",)),
        Read("evidence[]", ("payload", "ok"), "in"),
    )


def test_filter_then_size_reads_only_the_filter() -> None:
    assert _reads(f"{FILTER}.size() > 0") == (Read("evidence[]", ("kind",)),)


def test_filter_over_entry_field_is_no_entry() -> None:
    """A filter over `e.payload.events` keeps events, not entries: its variables are no root."""
    got = _reads("e.payload.events.filter(f, f.code == 1).exists(g, g.paylod)")
    assert got == (Read("e", ("payload", "events")),)
    got = _reads("params.xs.filter(v, v > 1).all(w, w.anything < 9)")
    assert got == (Read("params", ("xs",)),)


def test_map_of_entries_values() -> None:
    assert _reads("evidence.map(x, x.payload).exists(p, has(p.ready))") == (
        Read("evidence[]", ("payload",)),
        Read("evidence[]", ("payload", "ready"), "has"),
    )
    # computed values read whole: fine (nothing to check); a field of one: refused
    assert _reads("evidence.map(x, x.derived.attempt + 1).exists(a, a > 3)") == (
        Read("evidence[]", ("derived", "attempt")),
    )
    assert _reads("evidence.map(x, x.derived.attempt + 1).exists(a, a.b > 3)") is None
    assert _reads("evidence.map(x, {'k': x.kind}).exists(m, 'k' in m)") is None


@pytest.mark.parametrize(
    "source",
    [
        "[evidence][0].exists(e, e.kind == 'x')",
        "(evidence).exists(e, e.kind == 'x')",
        "(true ? evidence : []).exists(e, e.kind == 'x')",
        "[e].exists(x, x.kind == 'x')",
        "[e['payload']].exists(x, x.ok)",
        "evidence.exists(x, [x].exists(y, y.kind == 'x'))",
        "[evidence.filter(y, true)].exists(l, l.exists(e, e.kind == 'x'))",
    ],
)
def test_receiver_that_may_hold_entries_cannot_be_told(source: str) -> None:
    assert _reads(source) is None


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("[1, 2].exists(i, i > params.n)", (Read("params", ("n",)),)),
        ("[e.payload.a, params.b].exists(v, v > 0)", (Read("e", ("payload", "a")), Read("params", ("b",)))),
        ("e.payload.text.split(',').exists(s, s == 'a')", (Read("e", ("payload", "text")),)),
        (
            "evidence.exists(e, e.derived.gpu_events.exists(x, x.code == 79))",
            (Read("evidence[]", ("derived", "gpu_events")),),
        ),
    ],
)
def test_receiver_of_no_entries_still_reads_as_before(source: str, expected: tuple[Read, ...]) -> None:
    assert _reads(source) == expected


def test_filter_then_exists_evaluates() -> None:
    """The shape the check now reads is one CEL runs: the filtered entries, then the macro over them."""
    cond = compile_condition(f"{FILTER}.exists(e, e.derived.ok)", "t:1")
    launch = {"kind": "engine.launch", "derived": {"ok": True}}
    probe = {"kind": "probe.result", "derived": {"ok": True}}
    assert cond.holds({"evidence": [launch]}) is True
    assert cond.holds({"evidence": [probe]}) is False
