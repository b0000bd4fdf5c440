"""CEL conditions: compiled once when a policy loads, evaluated against plain JSON-like contexts.

The expression language is CEL through ``common-expression-language`` (import name ``cel``, a Rust
implementation); ``docs/POLICY.md`` says why it was chosen over ``cel-python``. Every condition knows where
it was written (policy file and line) so that compile and evaluation errors name that place.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import types
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import cel

from ledger.errors import PolicyError

__all__ = [
    "Condition",
    "FieldsRead",
    "Read",
    "compile_condition",
    "fields_read",
    "free_names",
    "leading_dot_name",
    "paths_read",
    "shared_context",
    "template_attribute_fields",
    "template_names",
    "template_paths",
]


def _cel() -> Any:
    """The CEL engine, imported on first use.

    The package's ``__init__`` also imports ``cel.cli``, its interactive REPL (typer, prompt_toolkit,
    pygments, rich: a quarter of a second of a fresh ``ledger verdict``), which conditions never use. That
    submodule is registered first as a lazy module: it runs only if something reads an attribute of it.
    """
    engine = sys.modules.get("cel")
    if engine is None:
        _defer_cel_cli()
        import cel as engine
    return engine


def _defer_cel_cli() -> None:
    """Put a stand-in for ``cel.cli`` in ``sys.modules``: the first attribute read from it executes the
    real module (into a module of its own) and answers from that."""
    if "cel.cli" in sys.modules:
        return
    spec = importlib.util.find_spec("cel")  # a top-level package: found, not executed
    if spec is None or not spec.submodule_search_locations:
        return
    paths = [Path(d) / "cli.py" for d in spec.submodule_search_locations]
    path = next((p for p in paths if p.is_file()), None)
    cli_spec = importlib.util.spec_from_file_location("cel.cli", path) if path else None
    if cli_spec is None or cli_spec.loader is None:
        return
    loader = cli_spec.loader
    stand_in = types.ModuleType("cel.cli", "cel's REPL; executed on first use")
    stand_in.__spec__ = cli_spec
    real: list[types.ModuleType] = []

    def load(name: str) -> Any:
        if not real:
            module = importlib.util.module_from_spec(cli_spec)
            sys.modules["cel.cli"] = module
            loader.exec_module(module)
            real.append(module)
        return getattr(real[0], name)

    stand_in.__getattr__ = load  # type: ignore[method-assign]
    sys.modules["cel.cli"] = stand_in


def shared_context(variables: Mapping[str, Any]) -> cel.Context:
    """A CEL context whose variables are converted once and reused by every condition evaluated on it."""
    context: cel.Context = _cel().Context(variables=dict(variables))
    return context


@dataclass(frozen=True)
class Condition:
    """One compiled CEL expression and the place in a policy file where it was written."""

    source: str
    where: str
    program: Any
    names: frozenset[str] | None = None  # the variables its context holds (None: not checked at load)

    def value(self, context: Mapping[str, Any] | cel.Context) -> Any:
        """Evaluate; evaluation errors are policy errors that name the expression's place.

        A ``cel.Context`` keeps its converted variables between evaluations: pass one when several
        conditions read the same large list.
        """
        try:
            if not isinstance(context, _cel().Context):
                context = dict(cast("Mapping[str, Any]", context))
            return self.program.execute(context)
        except (RuntimeError, TypeError, ValueError, KeyError) as e:
            detail = str(e).splitlines()[0] if str(e) else type(e).__name__
            if isinstance(e, KeyError):
                detail = f"no field {detail} (test with `'name' in map` first)"
            raise PolicyError(f"{self.where}: CEL `{self.source}` failed: {detail}") from e

    def holds(self, context: Mapping[str, Any] | cel.Context) -> bool:
        """Evaluate a condition that must yield a boolean."""
        result = self.value(context)
        if not isinstance(result, bool):
            raise PolicyError(
                f"{self.where}: CEL `{self.source}` gave {type(result).__name__} {result!r}, not a boolean"
            )
        return result


_KEYWORDS = frozenset({"true", "false", "null", "in"})
_BINDING_MACROS = frozenset({"exists", "all", "exists_one", "map", "filter"})


def free_names(source: str) -> frozenset[str] | None:
    """The variables ``source`` reads from its context: identifiers that are not a field (``.x``), a
    function (``f(``), a keyword or a variable a macro binds where the macro binds it (``list.exists(v, …)``:
    inside that call's parentheses; ``v`` used outside them is read from the context). None when it cannot
    be tokenised or a macro's parentheses do not close (then nothing is checked here; CEL refuses it)."""
    toks = _tokens(source)
    if toks is None:
        return None
    scopes = _macro_scopes(toks)
    if scopes is None:
        return None
    n = len(toks)
    return frozenset(
        t
        for i, t in enumerate(toks)
        if _is_name(t)
        and t not in _KEYWORDS
        and _binder(scopes, t, i) is None
        and (i == 0 or toks[i - 1] != ".")
        and (i + 1 >= n or toks[i + 1] != "(")
    )


@dataclass(frozen=True)
class _Scope:
    """Where a macro binds its variable: ``var`` at token ``at``, read as that variable in the tokens
    ``start`` ..< ``end`` (after the binding's comma, up to the call's closing parenthesis); ``receiver`` is
    the token before ``.macro`` and ``receiver_at`` its position."""

    var: str
    at: int
    start: int
    end: int
    receiver: str
    receiver_at: int


_OPEN, _CLOSE = "([{", ")]}"


def _closing(toks: Sequence[str]) -> dict[int, int] | None:
    """Each opening bracket's position → its closing bracket's; None when the brackets do not match."""
    closing: dict[int, int] = {}
    stack: list[int] = []
    for i, t in enumerate(toks):
        if t in _OPEN:
            stack.append(i)
        elif t in _CLOSE:
            if not stack or _OPEN.index(toks[stack[-1]]) != _CLOSE.index(t):
                return None
            closing[stack.pop()] = i
    return None if stack else closing


def _macro_scopes(toks: Sequence[str]) -> tuple[_Scope, ...] | None:
    """Every binding macro call of ``toks`` (``recv.exists(v, …)``, ``all``, ``exists_one``, ``map``,
    ``filter``) with the extent its variable is bound in: the call's own parentheses, found by matching
    brackets in the token stream (string literals are single tokens). None when the brackets do not
    match: then where a variable is bound cannot be told."""
    n = len(toks)
    closing = _closing(toks)
    if closing is None:
        return None
    out: list[_Scope] = []
    for i, t in enumerate(toks):
        if (
            t in _BINDING_MACROS
            and i > 0
            and toks[i - 1] == "."
            and i + 3 < n
            and toks[i + 1] == "("
            and _is_name(toks[i + 2])
            and toks[i + 3] == ","
        ):
            receiver_at = i - 2
            out.append(
                _Scope(
                    toks[i + 2],
                    i + 2,
                    i + 4,
                    closing[i + 1],
                    toks[receiver_at] if receiver_at >= 0 else "",
                    receiver_at,
                )
            )
    return tuple(out)


def _binder(scopes: Sequence[_Scope], name: str, pos: int) -> _Scope | None:
    """The innermost macro scope that binds ``name`` at token ``pos`` (the binding itself included), None
    where ``name`` there is no macro's variable."""
    best: _Scope | None = None
    for s in scopes:
        inside = pos == s.at or s.start <= pos < s.end
        if s.var == name and inside and (best is None or s.start > best.start):
            best = s
    return best


# what may stand before a ``.`` that reads a field of it (``x.f``, ``f(x).f``, ``[x][0].f``, ``{…}.f``),
# besides a name, a string or a number: any other token there (none, an operator, ``(``, ``[``, ``,``,
# ``!``, ``?``, ``:``, the keyword ``in``) makes the ``.`` start the name (``.request.action``)
_DOT_RECEIVER_ENDS = frozenset(")]}")


def leading_dot_name(source: str) -> str | None:
    """The first name of ``source`` (CEL) written with a leading dot (``.request.action``,
    ``'x' in .request.subject``), as written up to its last ``.name``; None where there is none or the text
    cannot be tokenised (CEL refuses that). CEL reads such a name from the root of its namespace, which
    celpy never resolves: every evaluation reaching it is an error, however the name is spelled."""
    lexed = _lexed(source)
    if lexed is None:
        return None
    n = len(lexed)
    for i, (t, is_str) in enumerate(lexed):
        if is_str or t != "." or i + 1 >= n or lexed[i + 1][1] or not _is_name(lexed[i + 1][0]):
            continue
        if i > 0:
            prev, prev_str = lexed[i - 1]
            value = prev_str or prev in _DOT_RECEIVER_ENDS or prev[:1].isdigit()
            if value or (_is_name(prev) and prev != "in"):
                continue  # a field of a value (a name, a literal, a bracket's or call's result)
        k = i + 1
        while k + 2 < n and lexed[k + 1][0] == "." and not lexed[k + 2][1] and _is_name(lexed[k + 2][0]):
            k += 2
        return "".join(t for t, _ in lexed[i : k + 1])
    return None


def compile_condition(source: str, where: str, names: frozenset[str] | None = None) -> Condition:
    """Compile ``source``; a syntax error becomes a PolicyError naming ``where`` (file:line). With
    ``names`` (the variables its context will hold), reading any other variable is refused here: CEL
    reports an undefined variable only when evaluation reaches it, so ``e.x == nul`` inside
    ``evidence.exists`` would hold, unseen, whenever the list is empty."""
    text = source.strip()
    if not text:
        raise PolicyError(f"{where}: empty CEL expression")
    dotted = leading_dot_name(text)
    if dotted is not None:
        raise PolicyError(
            f"{where}: CEL `{text}` reads `{dotted}`: leading-dot names are not supported (CEL's name "
            "from the root of its namespace, which is never resolved: every evaluation reaching it would "
            f"be an error): write `{dotted[1:]}`"
        )
    if names is not None:
        unknown = sorted((free_names(text) or frozenset()) - names)
        if unknown:
            raise PolicyError(
                f"{where}: CEL `{text}` reads {', '.join(repr(u) for u in unknown)}, which its context does "
                f"not have (it has {', '.join(sorted(names))})"
            )
    try:
        program = _cel().compile(text)
    except (ValueError, RuntimeError) as e:
        lines = [ln for ln in str(e).splitlines() if ln.strip()]
        detail = lines[1] if len(lines) > 1 else (lines[0] if lines else "syntax error")
        raise PolicyError(f"{where}: CEL syntax error in `{text}`: {detail.strip()}") from e
    return Condition(text, where, program, names)


@dataclass(frozen=True)
class FieldsRead:
    """The fields of list elements (and of their ``payload`` and ``derived`` maps) that some CEL
    expressions read.

    ``payload`` None: the payload map is used whole (so every payload field is needed); ``derived``
    likewise. ``as_set``: the
    list is only ever quantified with ``exists``/``all`` — whose value does not depend on how often or
    where an element occurs — so equal elements may be passed once.
    """

    top: frozenset[str]
    payload: frozenset[str] | None
    as_set: bool = False
    derived: frozenset[str] | None = None  # the same for ``derived`` (None: used whole)


_Q3D = '"' * 3
_Q3S = "'" * 3
_STRING = "|".join(
    (
        _Q3D + r"(?:\\.|[^\\])*?" + _Q3D,
        _Q3S + r"(?:\\.|[^\\])*?" + _Q3S,
        r'"(?:\\.|[^"\\\n])*"',
        r"'(?:\\.|[^'\\\n])*'",
    )
)
_TOKEN = re.compile(
    r"(?P<str>[rRbB]{0,2}(?:" + _STRING + r"))"
    r"|(?P<id>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<num>[0-9][0-9A-Za-z_]*(?:\.[0-9][0-9A-Za-z_]*)?)"
    r"|(?P<ws>\s+)"
    r"|(?P<op>.)",
    re.DOTALL,
)
_ELEMENT_MACROS = frozenset({"exists", "all", "exists_one"})


def _tokens(source: str, *, keep_strings: bool = False) -> list[str] | None:
    """CEL tokens of ``source`` (whitespace dropped); a string literal as ``""`` unless ``keep_strings``
    (then as written, quotes included). None when it cannot be tokenised."""
    lexed = _lexed(source)
    if lexed is None:
        return None
    if keep_strings:
        return [t for t, _ in lexed]
    return ['""' if is_str else t for t, is_str in lexed]


@lru_cache(maxsize=1024)
def _lexed(source: str) -> tuple[tuple[str, bool], ...] | None:
    """``source``'s tokens, each with whether it is a string literal: once per text (a policy's load
    reads each expression's names, its compile its variables)."""
    out: list[tuple[str, bool]] = []
    pos = 0
    for m in _TOKEN.finditer(source):
        if m.start() != pos:
            return None
        pos = m.end()
        kind = m.lastgroup
        if kind != "ws":
            out.append((m.group(), kind == "str"))
    return tuple(out) if pos == len(source) else None


@lru_cache(maxsize=256)
def _fields_read(list_name: str, sources: tuple[str, ...]) -> FieldsRead | None:
    top: set[str] = set()
    maps: dict[str, set[str] | None] = {"payload": set(), "derived": set()}  # the names read of each map
    as_set = True
    for source in sources:
        toks = _tokens(source)
        if toks is None:
            return None
        # ``[`` needs no rule of its own: a list literal (``x in ['a', 'b']``) reads no element, indexing
        # past a field read (``e.payload.figures[k]``) reads within a field that is passed whole, and any
        # other use of the list, an element or a map (``evidence[0]``, ``e['kind']``, ``[e][0]``,
        # ``e.payload['ok']``) is refused (or passes the map whole) by the token rules below.
        n = len(toks)

        def at(i: int, toks: list[str] = toks, n: int = n) -> str:
            return toks[i] if 0 <= i < n else ""

        bound: set[str] = set()
        for i, t in enumerate(toks):
            # ``evidence.exists(v, …)``: v is an element; any other use of the list could read anything
            if t == list_name and at(i - 1) != ".":
                macro = at(i + 1) == "." and at(i + 2) in _ELEMENT_MACROS and at(i + 3) == "("
                if macro and at(i + 5) == ",":
                    bound.add(at(i + 4))
                    as_set = as_set and at(i + 2) in ("exists", "all")
                elif at(i - 1) == "(" and at(i - 2) == "size" and at(i + 1) == ")":
                    as_set = False
                else:
                    return None
        for i, t in enumerate(toks):
            if t in bound and at(i - 1) != ".":
                if at(i + 1) == ",":
                    continue  # the binding itself
                # an element is only ever read field by field: ``v.kind``, ``v.payload…``
                if at(i + 1) != "." or not _is_name(at(i + 2)) or at(i + 3) == "(":
                    return None
                top.add(at(i + 2))
            names = maps.get(t)
            if names is not None and at(i - 1) == ".":
                if at(i + 1) == "." and _is_name(at(i + 2)) and at(i + 3) != "(":
                    names.add(at(i + 2))
                else:
                    maps[t] = None  # ``size(e.payload)``, ``'x' in e.derived``, ``e.payload.all(…)``
    payload, derived = maps["payload"], maps["derived"]
    return FieldsRead(
        frozenset(top),
        None if payload is None else frozenset(payload),
        as_set,
        None if derived is None else frozenset(derived),
    )


def _is_name(tok: str) -> bool:
    return bool(tok) and (tok[0].isalpha() or tok[0] == "_")


def fields_read(list_name: str, sources: Iterable[str]) -> FieldsRead | None:
    """Which element fields CEL ``sources`` read from the list variable ``list_name``, or None if that
    cannot be told for sure (then callers pass whole elements).

    Elements may be used only as ``list.exists|all|exists_one(v, …)`` with ``v`` read as ``v.field``
    (and ``size(list)``); no indexing anywhere. A conservative lexical check: anything else → None.
    """
    return _fields_read(list_name, tuple(sources))


@dataclass(frozen=True)
class Read:
    """One read of a variable's fields in a CEL expression or a message template: ``root`` is the
    variable (or, for an element a macro binds over a list, ``lists``' label for it), ``path`` the field
    names read from it in order (``e.derived.attempt`` → ("derived", "attempt")); ``how`` is "read", or
    "has" (``has(e.payload.x)``) or "in" (``'x' in e.payload``: the last name is the key tested)."""

    root: str
    path: tuple[str, ...]
    how: str = "read"


def _string_value(tok: str) -> str | None:
    """A plain one-line string literal's text (``'x'``, ``"x"``), None for anything else."""
    if len(tok) >= 2 and tok[0] in "'\"" and tok[-1] == tok[0] and not tok.startswith(tok[0] * 3):
        inner = tok[1:-1]
        return None if "\\" in inner else inner
    return None


# what may stand beside ``'k' in x.y`` for it to test the key ``k`` of ``x.y`` (nothing binding tighter)
_KEY_TEST_EDGES = frozenset({"", "(", ")", "&", "|", "?", ":", ",", "!"})


@dataclass(frozen=True)
class _Entries:
    """A macro's variable that is an element of a list root (``label``: ``lists``' label for it), or the
    value at ``prefix`` in one (``evidence.map(x, x.payload).exists(p, …)``: ``p`` is an ``x.payload``)."""

    label: str
    prefix: tuple[str, ...] = ()


# what else a macro's variable may range over (None: values that are no entries, ``e.payload.files``):
_COMPUTED = (
    "<computed>"  # values a ``map`` computed from entries (``x.derived.attempt + 1``): read whole only
)
_UNTOLD = "<untold>"  # a receiver that may hold entries but whose elements cannot be told (``[evidence][0]``)
_Over = _Entries | str | None
_MAPPING_MACROS = ("filter", "map")


class _Elements:
    """What each macro's variable in one expression ranges over, from its receiver (``recv.exists(v, …)``):
    a list root (its elements: entries); ``R.filter(x, …)`` (the elements of ``R``, however deep the
    chain); ``R.map(x, x.path)`` over entries (the value at that path of each: checked as such) or any other
    ``R.map(x, …)`` over entries (computed values, ``_COMPUTED``); a field path (``e.payload.events``,
    ``params.xs``: no entries); anything else that mentions entries — a list root, an entry variable, a
    variable over entries — cannot be told (``_UNTOLD``: its variable's reads are refused, never skipped).
    ``params`` (the label of the policy's settings) holds no entries."""

    def __init__(
        self,
        raw: Sequence[str],
        scopes: Sequence[_Scope],
        closing: Mapping[int, int],
        roots: Mapping[str, str],
        lists: Mapping[str, str],
    ) -> None:
        self.raw, self.scopes, self.roots, self.lists = raw, scopes, roots, lists
        self.opening = {c: o for o, c in closing.items()}
        self.by_at = {s.at: s for s in scopes}
        self.memo: dict[int, _Over] = {}

    def of(self, s: _Scope) -> _Over:
        """What ``s``'s variable ranges over."""
        if s.at not in self.memo:
            self.memo[s.at] = _UNTOLD  # (a receiver precedes its macro: no cycle; this only guards)
            self.memo[s.at] = self._receiver(s.receiver_at)
        return self.memo[s.at]

    def _var(self, name: str, pos: int) -> _Over:
        """What the variable ``name`` at ``pos`` holds, for a receiver: a list root (as ``_Entries`` of its
        label), a macro's variable (what that ranges over), or None (a root, ``params``: no list of
        entries itself)."""
        scope = _binder(self.scopes, name, pos)
        if scope is not None:
            return self.of(scope)
        label = self.lists.get(name)
        return None if label is None else _Entries(label)

    def _receiver(self, end: int) -> _Over:
        raw = self.raw
        if end < 0:
            return None  # ``.exists(`` with nothing before it: CEL refuses the syntax
        start = self._chain_start(end)
        if start == end and _is_name(raw[end]) and raw[end] not in _KEYWORDS:
            if _binder(self.scopes, raw[end], end) is None:
                return self._var(raw[end], end)  # a list root: its entries; any other root: none
            held = self._var(raw[end], end)  # a macro's variable used as a list
            return None if held is None or isinstance(held, _Entries) else _UNTOLD
        if raw[end] == ")":
            j = self.opening[end]
            s = self.by_at.get(j + 1)
            if s is not None and s.receiver_at == j - 3 and raw[j - 1] in _MAPPING_MACROS:
                over = self.of(s)
                if raw[j - 1] == "filter" or not isinstance(over, _Entries):
                    return over  # a filter keeps its receiver's elements
                return self._mapped(s, over)
        if self._path_end(start) == end:
            held = self._var(raw[start], start)
            # a field of a root or of an entry holds no entries; of a computed value it may
            return _UNTOLD if held in (_COMPUTED, _UNTOLD) else None
        # anything else (``[evidence][0]``, ``(cond ? evidence : [])``, ``[e]``): untold where it mentions
        # a list root, or an entry (a root but ``params``, a variable over entries) used whole — a field of
        # one (``[e.payload.n]``, ``e.payload.text.split(',')``) is no entry
        for k in range(start, end + 1):
            t = raw[k]
            if not _is_name(t) or t in _KEYWORDS or (k > 0 and raw[k - 1] == "."):
                continue
            after = raw[k + 1] if k + 1 < len(raw) else ""
            if after == "(":
                continue  # a function's name
            if _binder(self.scopes, t, k) is not None:
                entry = self._var(t, k) is not None
            else:
                entry = t in self.lists or self.roots.get(t, "params") != "params"
            if entry and (after != "." or t in self.lists):
                return _UNTOLD
        return None

    def _mapped(self, s: _Scope, over: _Entries) -> _Over:
        """The elements of ``R.map(x, [pred,] t)`` whose ``x`` is ``over``: the value at a path ``t`` of
        ``x`` (``x``, ``x.payload``), else values computed from entries."""
        raw, depth, arg = self.raw, 0, s.start
        for k in range(s.start, s.end):
            if raw[k] in _OPEN:
                depth += 1
            elif raw[k] in _CLOSE:
                depth -= 1
            elif raw[k] == "," and depth == 0:
                arg = k + 1
        if raw[arg] == s.var and self._path_end(arg) == s.end - 1:
            return _Entries(over.label, over.prefix + self._path(arg, s.end - 1))
        return _COMPUTED

    def _chain_start(self, end: int) -> int:
        """Where the postfix chain ending at ``end`` (``a.b(…)[…].c``) starts: its first name, or the
        bracket that opens a parenthesised group, list or map literal."""
        raw, k = self.raw, end
        while True:
            t = raw[k]
            if t in _CLOSE:
                j = self.opening[k]
                before = raw[j - 1] if j > 0 else ""
                call = _is_name(before) and before not in _KEYWORDS
                if t != "}" and (call or before in (")", "]")):
                    k = j - 1
                    continue
                return j
            if _is_name(t) and t not in _KEYWORDS and k >= 2 and raw[k - 1] == ".":
                k -= 2
                continue
            return k

    def _path_end(self, start: int) -> int:
        """The last token of the field path starting at the name at ``start`` (``e.payload['x'].y``);
        -1 when no name is there."""
        raw, n = self.raw, len(self.raw)
        if not _is_name(raw[start]) or raw[start] in _KEYWORDS:
            return -1
        k = start
        while True:
            if k + 2 < n and raw[k + 1] == "." and _is_name(raw[k + 2]) and (k + 3 >= n or raw[k + 3] != "("):
                k += 2
            elif (
                k + 3 < n
                and raw[k + 1] == "["
                and raw[k + 3] == "]"
                and _string_value(raw[k + 2]) is not None
            ):
                k += 3
            else:
                return k

    def _path(self, start: int, end: int) -> tuple[str, ...]:
        """The field names of the path ``start`` … ``end`` (after its first name)."""
        out: list[str] = []
        for k in range(start + 1, end + 1):
            t = self.raw[k]
            if self.raw[k - 1] == ".":
                out.append(t)
            elif self.raw[k - 1] == "[" and (key := _string_value(t)) is not None:
                out.append(key)
        return tuple(out)


def paths_read(
    source: str, roots: Mapping[str, str], lists: Mapping[str, str] | None = None
) -> tuple[Read, ...] | None:
    """The field paths a CEL condition reads from its variables: the one extractor of "which names of
    ``e`` (``params`` …) does this expression read" (``acceptance._e_reads`` answers its own question,
    whether the reads are *all* plain fields, from these).

    ``roots``: variable → the label its reads are reported under (``{"e": "e", "params": "params"}``).
    ``lists``: list variable → the label of its elements: a variable a macro binds over the list reads an
    element (``evidence.exists(v, v.payload.ok)``), also through ``filter`` calls
    (``evidence.filter(x, …).exists(v, …)``: the list's elements) and a ``map`` to a path of each element
    (``evidence.map(x, x.payload).all(p, p.ok)``: ``p.ok`` reads ``payload.ok``; ``_Elements``). A variable
    a macro binds over values that are no entries (``e.derived.gpu_events.all(f, …)``) is not a root there.
    A macro binds its variable inside its
    own parentheses only (``_macro_scopes``): a root it shadows (``x.all(e, e > 0)``) is that root again
    outside them, and read there as any other (a variable reused in one macro switches off no check of the
    rest of the expression); nested macros bind innermost first.
    A chain stops before a method call (``e.payload.text.contains(…)``: ("payload", "text")); a string
    index continues it (``e.payload['check']``); any other index ends it. Every occurrence of a root is
    reported, even one used whole (empty path). None when the text cannot be tokenised or its brackets do
    not match (where a macro binds cannot be told), or a macro's variable is read whose receiver may hold
    entries but whose elements cannot be told (``[evidence][0].exists(e, …)``, ``[e].all(x, …)``), or a
    field of a value a ``map`` computed from entries is read (``evidence.map(x, {'k': x.kind}).exists(m,
    m.k …)``): the caller refuses it, never leaves its reads unchecked.
    """
    return _paths_read(source, tuple(roots.items()), tuple((lists or {}).items()))


@lru_cache(maxsize=1024)
def _paths_read(
    source: str, root_items: tuple[tuple[str, str], ...], list_items: tuple[tuple[str, str], ...]
) -> tuple[Read, ...] | None:
    raw = _tokens(source, keep_strings=True)
    if raw is None:
        return None
    scopes, closing = _macro_scopes(raw), _closing(raw)
    if scopes is None or closing is None:
        return None  # brackets that do not match: where a macro binds its variable cannot be told
    roots, lists = dict(root_items), dict(list_items)
    elements = _Elements(raw, scopes, closing, roots, lists)
    pad = 3  # tokens read around a position: padding instead of bounds checks
    toks = [""] * pad + raw + [""] * (pad + 1)
    binding = {s.at for s in scopes}  # token positions of macro variables where they are bound
    out: list[Read] = []
    for i in range(pad, pad + len(raw)):
        t = toks[i]
        if not _is_name(t) or i - pad in binding or toks[i - 1] == "." or toks[i + 1] == "(":
            continue
        scope = _binder(scopes, t, i - pad)
        over = None if scope is None else elements.of(scope)
        if scope is None:
            label, path = roots.get(t), []
        elif isinstance(over, _Entries):
            label, path = over.label, list(over.prefix)  # an element of a list root (or a value in one)
        elif over == _UNTOLD:
            return None  # a variable over a receiver that may hold entries, but which cannot be told
        else:  # over values that are no entries (None) or that a ``map`` computed from entries
            label, path = (None if over is None else ""), []
        if label is None:
            continue  # no root, or a macro's variable over values that are no entries (nor its reads)
        path_at = len(path)
        j = i
        while True:
            if toks[j + 1] == "." and _is_name(toks[j + 2]) and toks[j + 3] != "(":
                path.append(toks[j + 2])
                j += 2
            elif (
                toks[j + 1] == "[" and toks[j + 3] == "]" and (key := _string_value(toks[j + 2])) is not None
            ):
                path.append(key)
                j += 3
            else:
                break
        how = "read"
        if toks[i - 1] == "(" and toks[i - 2] == "has" and toks[i - 3] != "." and toks[j + 1] == ")":
            how = "has"
        elif (
            toks[i - 1] == "in"
            and (key := _string_value(toks[i - 2])) is not None
            and toks[i - 3] in _KEY_TEST_EDGES
            and toks[j + 1] in _KEY_TEST_EDGES
        ):
            path.append(key)
            how = "in"
        if over == _COMPUTED:
            if len(path) > path_at:
                return None  # a field of a value a ``map`` computed: which name it is cannot be told
            continue
        out.append(Read(label, tuple(path), how))
    return tuple(out)


# a format field name (``str.format``'s grammar): a name, then ``.attr`` and ``[key]`` parts
_FIELD_NAME = re.compile(r"(?P<first>[^.\[]+)(?P<rest>(?:\.[^.\[]+|\[[^\]]*\])*)")
_FIELD_PART = re.compile(r"\.([^.\[]+)|\[([^\]]*)\]")


def template_paths(
    template: str, roots: Mapping[str, str], lists: Mapping[str, str] | None = None
) -> tuple[Read, ...]:
    """The paths a message template (``{e[derived][attempt]}``, ``{params[attempt_budget]}``; filled by
    ``acceptance.render``) reads from its variables, as ``paths_read`` reports them; ``{evidence[0][kind]}``
    reads an element of a list in ``lists``; one nested in a format spec (``{count:{params[width]}}``) too. A
    placeholder naming something absent prints as ``?``."""
    import string

    lists = lists or {}
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError:
        return ()
    out: list[Read] = []
    for _literal, field_name, spec, _conv in parsed:
        m = _FIELD_NAME.fullmatch(field_name) if field_name else None
        if m is not None:
            first = m["first"]
            keys = [a or k for a, k in _FIELD_PART.findall(m["rest"])]
            label = roots.get(first)
            if first in lists and keys and keys[0].isdigit():
                label, keys = lists[first], keys[1:]
            if label is not None:
                out.append(Read(label, tuple(keys)))
        if spec and "{" in spec:  # a placeholder nested in the format spec (``{x:{params[width]}}``)
            out.extend(template_paths(spec, roots, lists))
    return tuple(out)


def template_names(template: str) -> tuple[str, ...] | None:
    """The first name of every placeholder of a message template (``{e[payload][x]}``: ``e``; a
    positional ``{}`` or ``{0}``: that text; one nested in a format spec, ``{count:{width}}``, too), in
    order; None when the template cannot be parsed (an
    unmatched brace: ``acceptance.render`` would print it as written, placeholders unfilled)."""
    import string

    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError:
        return None
    out: list[str] = []
    for _literal, field_name, spec, _conv in parsed:
        if field_name is None:
            continue
        m = _FIELD_NAME.fullmatch(field_name)
        out.append(m["first"] if m is not None else field_name)
        if spec and "{" in spec:  # a nested placeholder in the format spec (``{count:{width}}``)
            nested = template_names(spec)
            if nested is None:
                return None
            out.extend(nested)
    return tuple(out)


def template_attribute_fields(template: str) -> tuple[tuple[str, str], ...]:
    """The placeholders of a message template that use attribute syntax (``{e.derived.attempt}``), each
    with the key syntax that reads the same names (``{e[derived][attempt]}``). ``acceptance.render`` fills
    a template from maps (``str.format``): an attribute of a map is never there, so such a placeholder
    always prints ``?``."""
    import string

    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError:
        return ()
    out: list[tuple[str, str]] = []
    for _literal, field_name, _spec, _conv in parsed:
        if not field_name:
            continue
        m = _FIELD_NAME.fullmatch(field_name)
        if m is None or not any(a for a, _k in _FIELD_PART.findall(m["rest"])):
            continue
        keys = "".join(f"[{a or k}]" for a, k in _FIELD_PART.findall(m["rest"]))
        out.append((field_name, m["first"] + keys))
    return tuple(out)
