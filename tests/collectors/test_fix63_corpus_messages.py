"""Issue 11, audit 50 f3: the corpus loaders (benchmark ``_PromptLine.messages``, semantic
``_ItemLine.messages``) took any JSON objects as chat messages — ``{"role": "user"}`` with no content, content
5, role "robot" — and the engine's HTTP 400 for each then counted as the ENGINE's error. One strict message
model (collectors/corpus.py ``ChatMessage``) now refuses them at load, naming the line and the field, in
both loaders; a blank prompt and a blank or padded id too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ledger.collectors.benchmark import load_benchmark_corpus
from ledger.collectors.corpus import CHAT_ROLES, corpus_digest
from ledger.collectors.semantic import load_semantic_corpus
from ledger.errors import ConfigError

GOOD = {"role": "user", "content": "What is 2 + 3?"}
CHECKS = [{"type": "exact", "value": "5"}]


def _bench_row(**over: Any) -> dict[str, Any]:
    return {"id": "p1", "messages": [GOOD], "max_tokens": 4, **over}


def _sem_row(**over: Any) -> dict[str, Any]:
    return {"id": "s1", "messages": [GOOD], "checks": CHECKS, **over}


def _load(tmp_path: Path, which: str, bad: dict[str, Any]) -> Any:
    """A two-line corpus of ``which`` loader whose second line is ``bad``."""
    ok = _bench_row(id="ok") if which == "benchmark" else _sem_row(id="ok")
    path = tmp_path / f"{which}.jsonl"
    path.write_text(json.dumps(ok) + "\n" + json.dumps(bad) + "\n")
    load = load_benchmark_corpus if which == "benchmark" else load_semantic_corpus
    return load(path, corpus_digest(path))


def _row(which: str, **over: Any) -> dict[str, Any]:
    return _bench_row(**over) if which == "benchmark" else _sem_row(**over)


LOADERS = ["benchmark", "semantic"]

MALFORMED = [
    pytest.param([{"role": "user"}], "messages.0.content: Field required", id="content-dropped"),
    pytest.param(
        [{"role": "user", "content": 5}], "messages.0.content: must be a text or a list", id="content-int"
    ),
    pytest.param(
        [{"role": "user", "content": None}], "messages.0.content: must be a text", id="content-null"
    ),
    pytest.param(
        [{"role": "user", "content": ""}], "messages.0.content: must not be empty", id="content-empty"
    ),
    pytest.param(
        [{"role": "user", "content": " \n"}], "messages.0.content: must not be empty", id="content-blank"
    ),
    pytest.param(
        [{"role": "user", "content": []}], "messages.0.content: List should have at least 1", id="parts-empty"
    ),
    pytest.param(
        [{"role": "user", "content": ["hi"]}], "messages.0.content.0: Input should be a valid", id="part-str"
    ),
    pytest.param(
        [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
        "messages.0.content.0.type: Input should be 'text'",
        id="part-image",
    ),
    pytest.param(
        [{"role": "user", "content": [{"type": "text"}]}],
        "messages.0.content.0.text: Field required",
        id="part-no-text",
    ),
    pytest.param(
        [{"role": "user", "content": [{"type": "text", "text": "hi", "lang": "en"}]}],
        "messages.0.content.0.lang: Extra inputs are not permitted",
        id="part-extra-key",
    ),
    pytest.param(
        [{"role": "robot", "content": "hi"}], "messages.0.role: Input should be 'system'", id="role-unknown"
    ),
    pytest.param([{"role": "User", "content": "hi"}], "messages.0.role: Input should be", id="role-cased"),
    pytest.param([{"content": "hi"}], "messages.0.role: Field required", id="role-dropped"),
    pytest.param([{"role": 1, "content": "hi"}], "messages.0.role: Input should be", id="role-mistyped"),
    pytest.param([{"Role": "user", "content": "hi"}], "messages.0.role: Field required", id="role-renamed"),
    pytest.param(
        [{"role": "user", "content": "hi", "weight": 1}], "messages.0.weight: Extra inputs", id="extra-key"
    ),
    pytest.param(
        [{"role": "tool", "content": "42"}, GOOD], "messages.0: a tool message names", id="tool-no-call-id"
    ),
    pytest.param(
        [{"role": "user", "content": "hi", "tool_call_id": "c1"}],
        "messages.0: tool_call_id is for tool",
        id="call-id-on-user",
    ),
    pytest.param(["hello"], "messages.0: Input should be a valid dictionary", id="message-not-object"),
    pytest.param([], "messages: List should have at least 1", id="messages-empty"),
    pytest.param([{"role": "system", "content": "be brief"}], "no user message", id="no-user-message"),
    pytest.param([{**GOOD, "name": ""}], "messages.0.name: must not be empty", id="name-blank"),
    pytest.param([{**GOOD, "name": 7}], "messages.0.name: Input should be a valid string", id="name-int"),
]


@pytest.mark.parametrize("which", LOADERS)
@pytest.mark.parametrize(("messages", "said"), MALFORMED)
def test_malformed_corpus_message_is_refused_at_load_naming_line_and_field(
    tmp_path: Path, which: str, messages: list[Any], said: str
) -> None:
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, which, _row(which, messages=messages))
    assert f"{which}.jsonl:2: " in e.value.message, e.value.message
    assert said in e.value.message, e.value.message


@pytest.mark.parametrize("which", LOADERS)
@pytest.mark.parametrize(
    ("item_id", "said"),
    [
        pytest.param(" ", "id: must not be empty or only whitespace", id="blank"),
        pytest.param("\t\n", "id: must not be empty or only whitespace", id="whitespace"),
        pytest.param("", "id: String should have at least 1 character", id="empty"),
        pytest.param(" p2", "id: ' p2' has whitespace around it", id="padded"),
        pytest.param(7, "id: Input should be a valid string", id="mistyped"),
    ],
)
def test_blank_or_padded_corpus_id_is_refused(tmp_path: Path, which: str, item_id: Any, said: str) -> None:
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, which, _row(which, id=item_id))
    assert f"{which}.jsonl:2: {said}" in e.value.message, e.value.message


@pytest.mark.parametrize(
    ("prompt", "said"),
    [
        pytest.param("", "prompt: must not be empty or only whitespace", id="empty"),
        pytest.param("   ", "prompt: must not be empty or only whitespace", id="blank"),
        pytest.param(5, "prompt: Input should be a valid string", id="mistyped"),
    ],
)
def test_empty_benchmark_prompt_is_refused(tmp_path: Path, prompt: Any, said: str) -> None:
    bad = {"id": "p2", "prompt": prompt, "max_tokens": 4}
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, "benchmark", bad)
    assert f"benchmark.jsonl:2: {said}" in e.value.message, e.value.message


@pytest.mark.parametrize("which", LOADERS)
@pytest.mark.parametrize(
    "messages",
    [
        pytest.param([GOOD], id="one-user"),
        pytest.param([{"role": "system", "content": "be brief"}, GOOD], id="system-then-user"),
        pytest.param(
            [{"role": "user", "content": [{"type": "text", "text": "What is 2 + 3?"}]}], id="text-parts"
        ),
        pytest.param(
            [GOOD, {"role": "assistant", "content": "4?"}, {"role": "user", "content": "Again."}],
            id="multi-turn",
        ),
        pytest.param(
            [
                GOOD,
                {"role": "tool", "content": "5", "tool_call_id": "call-1"},
                {"role": "user", "content": "So?"},
            ],
            id="tool-with-call-id",
        ),
        # audit 55 f8: the OpenAI `name` of a message's author — vLLM's request model keeps it,
        # llama-cpp-python's drops it; both accept it
        pytest.param(
            [{"role": "system", "name": "ops", "content": "be brief"}, {**GOOD, "name": "alice"}],
            id="openai-name-field",
        ),
    ],
)
def test_valid_chat_messages_still_load_and_are_sent_as_written(
    tmp_path: Path, which: str, messages: list[Any]
) -> None:
    corpus = _load(tmp_path, which, _row(which, id="p2", messages=messages))
    items = corpus.prompts if which == "benchmark" else corpus.items
    assert list(items[1].messages) == messages  # exactly what the corpus says is what the request sends


def test_the_shipped_corpora_still_load() -> None:
    root = Path(__file__).resolve().parents[2] / "campaigns" / "corpora"
    bench, sem = root / "bench-tiny.jsonl", root / "semantic-tiny.jsonl"
    assert load_benchmark_corpus(bench, corpus_digest(bench)).prompts
    assert load_semantic_corpus(sem, corpus_digest(sem)).items


def test_one_message_model_for_both_loaders() -> None:
    """One copy: both loaders' line models type ``messages`` with the corpus module's ChatMessage."""
    from ledger.collectors import benchmark, corpus, semantic

    assert CHAT_ROLES == ("system", "user", "assistant", "tool")
    for line in (benchmark._PromptLine, semantic._ItemLine):
        assert "ChatMessage" in str(line.model_fields["messages"].annotation)
        assert corpus.ChatMessage.__module__ == "ledger.collectors.corpus"
