"""How a collector sizes a request the engine answered without a completion: its prompt's tokens as the
engine counts them, against the context the campaign launched the engine with (``ledger.answers``
``context_record``: a request the context cannot hold is the campaign's configuration, not the engine's
failure). One reading for the probes (``collectors.probe``, over httpx: ``sized``) and the harnesses
(``collectors.benchmark.size_request``, over aiohttp): ``sizing`` says what to ask and reads each answer, a
driver posts it."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Generator, Mapping
from typing import Any

import httpx

from ledger.answers import (
    COUNTED_CONTENT,
    COUNTED_MESSAGES,
    COUNTED_USAGE,
    PROMPT_COUNTS,
    context_record,
)

__all__ = ["TOKENIZERS", "Answer", "Ask", "sized", "sizing"]

# one request of a sizing: (URL, JSON body); and the engine's answer to it: (HTTP status, body), None for
# none (no connection, a timeout, an answer cut)
Ask = tuple[str, dict[str, Any]]
Answer = tuple[int, bytes] | None
Steps = Generator[Ask, Answer, Any]

# the keys of a streamed request its sizing request leaves out (it is asked whole, with max_tokens 1)
_STREAMED = ("stream", "stream_options", "return_token_ids")
# how much of an engine's error a probe or a sizing request (``SIZING_REFUSED``) records: whole enough that
# what the error states can be judged (llama-cpp-python 0.3.36's "Invalid chat handler: X (valid formats:
# [...])" is 407 characters; the policy holds an option-value refusal to the list it prints,
# ledger.answers.refused_option_value; a sizing refusal, ledger.answers._sizing_refused)
ERROR_LIMIT = 1000


def sizing(
    url: str, body: Mapping[str, Any], context: tuple[str, int], counts: Collection[str]
) -> Generator[Ask, Answer, dict[str, Any]]:
    """The context record (``ledger.answers.context_record``) of a request to ``url`` (an engine's
    ``…/v1/chat/completions`` or ``…/v1/completions``) with ``body`` that the engine answered without a
    completion: the context option and length the campaign launched it with (``context``) and the prompt's
    tokens as the engine counts them — the ``usage.prompt_tokens`` of its 2xx answer to the same body, not
    streamed, with max_tokens 1 (``COUNTED_USAGE``); where that gives none (llama-cpp-python fails it too
    where the prompt alone overflows its --n_ctx), the engine's tokenizer, asked only in the ways of
    ``counts`` — those of the program the campaign launched, ``ledger.answers.prompt_counts``: a tokenizer
    another program serves is never asked (``TOKENIZERS``, in ``PROMPT_COUNTS`` order) — with how they were
    counted, and the engine's error answer to the sizing request (400 and up), if any. Nothing counted:
    ``prompt_tokens`` None (the failure is then the engine's: ``context_overflow`` shows none). Yields each
    request, is sent the answer to it."""
    ask = {k: v for k, v in body.items() if k not in _STREAMED}
    ask["max_tokens"] = 1
    answer = yield url, ask
    refused: tuple[int, str] | None = None
    if answer is not None and answer[0] >= 400:
        refused = (answer[0], f"HTTP {answer[0]}: {_error_text(answer[1])}")
    tokens = _whole(_usage(answer).get("prompt_tokens"))
    if tokens is not None:
        return context_record(*context, tokens, None, COUNTED_USAGE)
    base = url.rpartition("/v1/")[0]
    for way in PROMPT_COUNTS:
        count = TOKENIZERS.get(way) if way in counts else None
        counted = (yield from count(base, body)) if count is not None else None
        if counted is not None:
            return context_record(*context, counted, refused, way)
    return context_record(*context, None, refused)


def sized(
    client: httpx.Client,
    url: str,
    body: Mapping[str, Any],
    context: tuple[str, int],
    counts: Collection[str],
) -> dict[str, Any]:
    """``sizing`` of a request to ``url`` with ``body``, each of its requests posted with ``client`` (the
    probes' synchronous driver)."""

    def post(ask: Ask) -> Answer:
        try:
            r = client.post(ask[0], json=ask[1])
            return r.status_code, r.content
        except httpx.HTTPError:
            return None

    return _driven(sizing(url, body, context, counts), post)


def _driven(steps: Generator[Ask, Answer, dict[str, Any]], post: Callable[[Ask], Answer]) -> dict[str, Any]:
    try:
        ask = next(steps)
        while True:
            ask = steps.send(post(ask))
    except StopIteration as done:
        out: dict[str, Any] = done.value
        return out


def _json(answer: Answer) -> Any:
    """The JSON of a 2xx answer; None for any other answer, or none."""
    if answer is None or not 200 <= answer[0] <= 299:
        return None
    try:
        return json.loads(answer[1])
    except ValueError:
        return None


def _usage(answer: Answer) -> Mapping[str, Any]:
    value = _json(answer)
    usage = value.get("usage") if isinstance(value, dict) else None
    return usage if isinstance(usage, dict) else {}


def _whole(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


def error_message(value: Any) -> str:
    """The engine's error message in an error answer's parsed JSON body (OpenAI's ``{"error":
    {"message"}}``, a ``detail``), else the body as text: at most ``ERROR_LIMIT`` characters. The one
    reader of the probes' and the sizing requests' errors."""
    if isinstance(value, dict):
        err = value.get("error")
        if isinstance(err, dict):
            return str(err.get("message", err))[:ERROR_LIMIT]
        return str(err or value.get("detail") or value)[:ERROR_LIMIT]
    return str(value)[:ERROR_LIMIT]


def _error_text(raw: bytes) -> str:
    """The engine's error message in an error answer's body (``error_message``), else the body's text."""
    try:
        value = json.loads(raw)
    except ValueError:
        return raw[:ERROR_LIMIT].decode("utf-8", "replace")
    return error_message(value)


def _token_ids(value: Any) -> list[int] | None:
    """``value`` where it is a list of token ids (whole numbers from 0), else None."""
    if isinstance(value, list) and all(type(t) is int and t >= 0 for t in value):
        return value
    return None


def _vllm_counted(base: str, body: Mapping[str, Any]) -> Steps:
    """vLLM's count of the prompt it builds from the request (``COUNTED_MESSAGES``): ``POST /tokenize``
    asked as the endpoint the request went to builds its prompt — a chat request's messages with the
    generation prompt added and no special tokens beyond the template's (its chat completions' defaults,
    given whole); a completions request's ``prompt`` text with the special tokens its completions add
    (``add_special_tokens``: the request's own where it gives a boolean, else their default, true) — read
    from vLLM's answer only: ``count``, ``tokens`` (ids, as many as ``count``) and ``max_model_len`` (a
    whole number): llama-server's ``/tokenize`` reads ``content`` and answers ``tokens`` alone, never a
    count. None for a request that is neither (messages that are no list; no messages and a prompt that is
    no text — token ids, a batch — or an ``add_special_tokens`` that is no boolean), or another answer."""
    messages, prompt = body.get("messages"), body.get("prompt")
    special = body.get("add_special_tokens", True)
    ask: dict[str, Any]
    if isinstance(messages, list):
        ask = {"messages": messages, "add_generation_prompt": True, "add_special_tokens": False}
    elif messages is None and isinstance(prompt, str) and isinstance(special, bool):
        ask = {"prompt": prompt, "add_special_tokens": special}
    else:
        return None
    if body.get("model"):
        ask["model"] = body["model"]
    answer = _json((yield base + "/tokenize", ask))
    if not isinstance(answer, dict) or type(answer.get("max_model_len")) is not int:
        return None
    count, ids = answer.get("count"), _token_ids(answer.get("tokens"))
    if type(count) is not int or ids is None or len(ids) != count:
        return None
    return count


def _content_counted(base: str, body: Mapping[str, Any]) -> Steps:
    """llama-cpp-python's lower bound of the prompt its server builds from the request (``COUNTED_CONTENT``):
    ``POST /extras/tokenize`` (``{"input": text}``, answered ``{"tokens": [ids]}``: the text tokenized as the
    model's own, special tokens parsed, the BOS added where the model adds one — no chat template) of each
    message's content, stripped of the white space at its ends (a completions request: its prompt, whole,
    as its server tokenizes it), less the tokens it gives the empty text (what it adds to any text), summed.
    None where a content is no text, or an answer is not that shape or gives a text fewer tokens than the
    empty one."""
    messages = body.get("messages")
    if messages is None:
        texts: list[Any] = [body.get("prompt")]
    elif isinstance(messages, list) and messages:
        texts = [m.get("content") if isinstance(m, dict) else None for m in messages]
        texts = [t.strip() if isinstance(t, str) else t for t in texts]
    else:
        return None
    if not all(isinstance(text, str) for text in texts):
        return None
    added = yield from _text_counted(base, body.get("model"), "")
    if added is None:
        return None
    total = 0
    for text in texts:
        n = yield from _text_counted(base, body.get("model"), text)
        if n is None or n < added:
            return None
        total += n - added
    return total


def _text_counted(base: str, model: Any, text: str) -> Steps:
    ask: dict[str, Any] = {"input": text}
    if model:
        ask["model"] = model
    answer = _json((yield base + "/extras/tokenize", ask))
    ids = _token_ids(answer.get("tokens")) if isinstance(answer, dict) else None
    return None if ids is None else len(ids)


# How a collector counts a prompt by each tokenizer way of ``ledger.answers.PROMPT_COUNTS`` (every way but
# ``COUNTED_USAGE``, the sizing request's own answer): one reader per endpoint, asked only where the
# program the campaign launched serves it (``ledger.answers.PROMPT_COUNTERS``; a way without a reader here,
# or a reader of a way not there, fails tests/collectors/test_fix144_*).
TOKENIZERS: dict[str, Callable[[str, Mapping[str, Any]], Steps]] = {
    COUNTED_MESSAGES: _vllm_counted,
    COUNTED_CONTENT: _content_counted,
}
