"""One vocabulary: the variables each kind of condition may read (checked when a policy loads) are the
variables its evaluator puts in its context. Every condition the shipped fixtures, the routing checks and
the semantic scorer evaluate is watched; the test fails when a loader list and an evaluator drift."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

import ledger.policy.verdict as verdict_module
from ledger.policy import conditions
from ledger.policy.conditions import Condition
from ledger.policy.fixtures import discover_fixtures, run_fixture
from ledger.service import Ledger

REPO = Path(__file__).resolve().parents[2]
POLICY_DIR = REPO / "policies"


def test_every_evaluated_context_holds_exactly_the_names_its_condition_was_loaded_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared_keys: dict[int, frozenset[str]] = {}
    seen: dict[str, tuple[frozenset[str] | None, set[frozenset[str]]]] = {}
    make_shared = conditions.shared_context

    def watched_shared(variables: Mapping[str, Any]) -> Any:
        ctx = make_shared(variables)
        shared_keys[id(ctx)] = frozenset(variables)
        return ctx

    real_value = Condition.value

    def watched_value(self: Condition, context: Any) -> Any:
        keys = shared_keys.get(id(context)) if not isinstance(context, Mapping) else frozenset(context)
        assert keys is not None, f"{self.where}: a context the test cannot read"
        seen.setdefault(self.where + " " + self.source, (self.names, set()))[1].add(keys)
        return real_value(self, context)

    monkeypatch.setattr(verdict_module, "shared_context", watched_shared)
    monkeypatch.setattr(Condition, "value", watched_value)
    for path in discover_fixtures(POLICY_DIR):
        work = tmp_path / path.parent.name / path.stem
        work.mkdir(parents=True)
        result = run_fixture(path, POLICY_DIR, workdir=work, init=Ledger.init)
        assert result.passed, (path, result.failures)
    assert len(seen) >= 20, "the fixtures evaluated too few conditions to tell"
    unchecked = [where for where, (names, _) in seen.items() if names is None]
    assert not unchecked, f"conditions loaded without the names of their context: {unchecked}"
    for where, (names, contexts) in seen.items():
        assert names is not None
        for keys in contexts:
            # what the evaluator gives is all declared (else a policy reading it is refused: drift), and
            # what is declared is given (a routing check's `item` only with `for_each`)
            assert keys <= names, (where, sorted(keys - names))
            assert names - keys <= {"item"}, (where, sorted(names - keys))


def test_the_semantic_scorer_gives_its_cel_checks_exactly_the_names_they_are_loaded_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The corpus' CEL checks are compiled with ``semantic.CEL_NAMES`` and evaluated with the context
    ``score_answer`` builds: the test fails when the two drift (a name added on one side only)."""
    import json

    from ledger.collectors import semantic
    from ledger.hashing import blake3_hex

    seen: list[tuple[frozenset[str] | None, frozenset[str]]] = []
    real_value = Condition.value

    def watched_value(self: Condition, context: Any) -> Any:
        assert isinstance(context, Mapping)
        seen.append((self.names, frozenset(context)))
        return real_value(self, context)

    monkeypatch.setattr(Condition, "value", watched_value)
    corpus = tmp_path / "corpus.jsonl"
    item = {
        "id": "n",
        "messages": [{"role": "user", "content": "Give n as JSON"}],
        "checks": [{"type": "cel", "expr": "answer.n == 4 && text.startsWith('{')"}],
    }
    corpus.write_text(json.dumps(item) + "\n")
    loaded = semantic.load_semantic_corpus(corpus, f"blake3:{blake3_hex(corpus.read_bytes())}")
    [outcome] = semantic.score_answer(loaded.items[0], '{"n": 4}')
    assert outcome.passed
    assert seen, "the scorer evaluated no CEL check"
    for names, keys in seen:
        assert names == semantic.CEL_NAMES
        assert keys == names, (sorted(keys), sorted(names))
