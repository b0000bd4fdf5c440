"""Frozen corpora: JSONL files pinned by their BLAKE3 digest, read from the same bytes that were hashed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from ledger.canonical import parse_json
from ledger.errors import ConfigError, CorpusDigestError, LedgerError
from ledger.hashing import blake3_hex, parse_digest

__all__ = [
    "CHAT_ROLES",
    "ChatMessage",
    "CorpusDigestError",
    "CorpusId",
    "CorpusText",
    "PinnedFile",
    "chat_messages",
    "corpus_digest",
    "corpus_problem",
    "read_pinned_jsonl",
]

_MAX_CORPUS_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class PinnedFile:
    """A corpus file's digest and its JSON rows, each with the line it came from."""

    path: Path
    digest: str  # blake3:<hex> of the exact bytes parsed
    rows: tuple[tuple[int, dict[str, Any]], ...]


def _read_bytes(path: Path) -> bytes:
    try:
        size = path.stat().st_size
        if size > _MAX_CORPUS_BYTES:
            raise ConfigError(f"{path}: corpus is {size} bytes, more than {_MAX_CORPUS_BYTES}")
        return path.read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read corpus {path}: {e.strerror or e}") from e


def corpus_digest(path: Path) -> str:
    """``blake3:<hex>`` of a corpus file's bytes (what a campaign pins)."""
    return f"blake3:{blake3_hex(_read_bytes(path))}"


def read_pinned_jsonl(path: Path, expected_digest: str) -> PinnedFile:
    """Hash the file, refuse it unless it is the pinned one, then parse those same bytes as JSONL.

    Blank lines are allowed; every other line must be one JSON object. Lines end at "\n" (or "\r\n")
    only, as JSON Lines says: U+2028, U+2029, U+0085 and the other breaks ``str.splitlines`` knows may stand
    raw inside a JSON string. Nothing is sent to an engine before this succeeds.
    """
    want = parse_digest(expected_digest)  # malformed pins are input errors, not mismatches
    data = _read_bytes(path)
    got = f"blake3:{blake3_hex(data)}"
    if got != str(want):
        raise CorpusDigestError(f"{path}: corpus digest is {got}, the campaign pins {want}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: corpus is not UTF-8 ({e.reason} at byte {e.start})") from e
    rows: list[tuple[int, dict[str, Any]]] = []
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.removesuffix("\r")
        if not line.strip(" \t"):  # JSON's whitespace; any other character makes the line an item
            continue
        try:  # strict JSON, as every record the ledger reads: no NaN/Infinity, no key twice
            value = parse_json(line)
        except LedgerError as e:
            raise ConfigError(f"{path}:{number}: not JSON: {e.message}") from e
        if not isinstance(value, dict):
            raise ConfigError(f"{path}:{number}: a corpus line must be a JSON object")
        rows.append((number, value))
    if not rows:
        raise ConfigError(f"{path}: the corpus has no items")
    return PinnedFile(path, got, tuple(rows))


# --- the chat message a corpus item sends: the one model both loaders (benchmark, semantic) read ----------
#
# What every engine the project launches accepts in ``/v1/chat/completions`` ``messages``: llama-cpp-python's
# server types them as system | user | assistant | tool (+ the deprecated function) and asks a tool message
# for its ``tool_call_id``; vLLM's OpenAI types accept the same four (a "developer" role or a custom one only
# where its chat template knows it). A corpus message outside this model — no content, content 5, role
# "robot", a key no engine reads — would be refused by the engine (HTTP 400) on every request, and that
# refusal counted as the engine's error: it is refused here, at load, naming the line and the field.

CHAT_ROLES = ("system", "user", "assistant", "tool")


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty or only whitespace")
    return value


def _plain_id(value: str) -> str:
    _not_blank(value)
    if value != value.strip():
        raise ValueError(f"{value!r} has whitespace around it")
    return value


# an item's id: named in every record and reason, so never blank nor padded with whitespace
CorpusId = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_plain_id)]
# a text the engine is asked (a completions prompt, a text content part): something to answer
CorpusText = Annotated[str, AfterValidator(_not_blank)]


class TextPart(BaseModel):
    """One content part of a message: text (a text model reads nothing else)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    type: Literal["text"]
    text: CorpusText


class ChatMessage(BaseModel):
    """A chat message as the engines accept it: a role of ``CHAT_ROLES``, its content a non-blank text or a
    non-empty list of text parts; the OpenAI ``name`` of its author (a non-blank text: vLLM's request model
    keeps it, llama-cpp-python's drops it); a tool message names the tool call it answers (``tool_call_id``),
    no other message does; no other key."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    role: Literal["system", "user", "assistant", "tool"]
    content: CorpusText | Annotated[list[TextPart], Field(min_length=1)]
    name: CorpusText | None = None
    tool_call_id: CorpusText | None = None

    @model_validator(mode="after")
    def _tool_call(self) -> ChatMessage:
        if self.role == "tool" and self.tool_call_id is None:
            raise ValueError("a tool message names the tool call it answers (tool_call_id)")
        if self.role != "tool" and self.tool_call_id is not None:
            raise ValueError(f"tool_call_id is for tool messages, not a {self.role} message")
        return self

    def to_json(self) -> dict[str, Any]:
        """The message as sent: the corpus's own keys and values."""
        return self.model_dump(mode="json", exclude_none=True)


def chat_messages(messages: list[ChatMessage]) -> tuple[dict[str, Any], ...]:
    """A validated chat as the request sends it; a chat without a user message asks nothing (ValueError)."""
    if not any(m.role == "user" for m in messages):
        raise ValueError("messages: no user message (the engine would be asked nothing)")
    return tuple(m.to_json() for m in messages)


def corpus_problem(e: ValidationError) -> str:
    """The first problem pydantic found in a corpus line, as ``field.path: what`` (``messages.1.content``).
    A union's alternatives (content: a text or a list of text parts) are said once: for a list, what is
    wrong inside it; for anything else, what content must be."""
    errors = e.errors()
    err = errors[0]
    branch = [x for x in errors if any("list[" in str(p) for p in x["loc"])]
    if isinstance(err["input"], list) and branch:
        err = branch[0]  # content given as a list: say what is wrong with its parts
    # the union's branch tags ("function-after[…]", "list[TextPart]") are no field names
    loc = [str(p) for p in err["loc"] if "[" not in str(p)]
    msg = str(err["msg"]).removeprefix("Value error, ")
    if loc and loc[-1] == "content" and err["type"] in ("string_type", "list_type"):
        parts = '{"type": "text", "text": ...}'
        msg = f"must be a text or a list of text parts ({parts}), not {err['input']!r}"
    return f"{'.'.join(loc) or '(line)'}: {msg}"
