"""Probes of an OpenAI-compatible inference server; each returns a ``health.probe`` payload."""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import Any

import httpx

from ledger.answers import (
    CONTEXT_DETAIL,
    COUNTED_USAGE,
    CUT_FINISH_REASON,
    cut_undecided,
    schema_problem,
)
from ledger.collectors import sizing
from ledger.collectors.readiness import check_ready, http_client
from ledger.errors import InputError
from ledger.policy.names import endpoint_problem
from ledger.signatures import ANSWER_BODY_LIMIT as _BODY_LIMIT
from ledger.signatures import not_a_completion

__all__ = [
    "DEFAULT_PROMPT",
    "probe_completion",
    "probe_health",
    "probe_models",
    "probe_sequential",
    "probe_structured",
]

DEFAULT_PROMPT = "Reply with exactly one word: READY"
_TEXT_LIMIT = 2000
# how much of an engine's error a probe records (``sizing.ERROR_LIMIT``: one limit for probes and sizing)
_ERROR_LIMIT = sizing.ERROR_LIMIT


def _ms(t0: float) -> float:
    return round((time.monotonic() - t0) * 1000, 2)


def _error_text(r: httpx.Response) -> str:
    try:
        body = r.json()
    except ValueError:
        return r.text[:_ERROR_LIMIT]
    return sizing.error_message(body)


def _base(base_url: str) -> str:
    """The base URL a probe asks, without a trailing ``/`` — refused up front (``InputError``, nothing
    asked, nothing recorded) where the policy reads it as no endpoint (``ledger.policy.names.endpoint_key``,
    the one reading; ``endpoint_problem`` says why): a probe at ``http://h:8000/engine-a/../engine-b``
    would ask ``/engine-b`` of the server and be recorded at ``/engine-a/…``, a URL the policy never
    credits (``probe-other-endpoint``; audit 106 f3)."""
    problem = endpoint_problem(base_url)
    if problem is not None:
        raise InputError(
            f"{base_url!r} is no base URL to probe: {problem}",
            hint="give the engine's base URL as an HTTP client asks it: http(s)://host[:port][/path], "
            "its path without . or .. segments or encoded separators, no credentials, query or fragment",
        )
    return base_url.rstrip("/")


def probe_health(base_url: str, engine: str = "generic", *, timeout: float = 10.0) -> dict[str, Any]:
    """Readiness as the engine family defines it, with the sleeping state where the server tells it."""
    base = _base(base_url)
    t0 = time.monotonic()
    with http_client(timeout) as c:
        state = check_ready(base_url, engine, c)
        sleeping: bool | None = None
        try:
            r = c.get(base + "/is_sleeping")
            if r.status_code == 200:
                sleeping = bool(r.json().get("is_sleeping"))
        except (httpx.HTTPError, ValueError, AttributeError):
            sleeping = None
    return {
        "endpoint": base + (state.endpoint or "/health"),
        "check": "health",
        "ok": state.ready,
        "http_status": state.status,
        "latency_ms": _ms(t0),
        "sleeping": sleeping,
        "error": None if state.ready else (state.note or "not ready"),
        "details": {"engine": engine, "ready_endpoint": state.endpoint, "server": state.server},
    }


def probe_models(base_url: str, *, expect: str | None = None, timeout: float = 10.0) -> dict[str, Any]:
    """Model identity from ``/v1/models``; with ``expect``, the served id must equal it."""
    url = _base(base_url) + "/v1/models"
    t0 = time.monotonic()
    out: dict[str, Any] = {"endpoint": url, "check": "models", "ok": False, "expected": expect}
    try:
        with http_client(timeout) as c:
            r = c.get(url)
    except httpx.HTTPError as e:
        return {**out, "latency_ms": _ms(t0), "error": f"{type(e).__name__}: {e}"}
    out.update(http_status=r.status_code, latency_ms=_ms(t0))
    if r.status_code != 200:
        return {**out, "error": _error_text(r)}
    try:
        ids = [str(m["id"]) for m in r.json().get("data", [])]
    except (ValueError, KeyError, TypeError, AttributeError):
        return {**out, "error": "malformed /v1/models answer"}
    identity = ids[0] if ids else None
    ok = bool(ids) and (expect is None or expect in ids)
    return {
        **out,
        "ok": ok,
        "model_identity": identity,
        "details": {"served": ids},
        "error": None if ok else (f"expected model {expect!r}, served {ids}" if ids else "no model served"),
    }


def _answered_model(r: httpx.Response | None) -> str | None:
    """The model a chat completion answer names (its ``model`` field), or None where it names none (no
    answer, not JSON, no or an empty ``model``). The asked name is the probe's ``model_identity``: a router
    that lists the right model may answer from another, and only the answer says so (llama.cpp's server
    echoes whatever name was asked, vLLM names the model that answered)."""
    if r is None or r.status_code != 200:
        return None
    try:
        got = r.json().get("model")
    except (ValueError, AttributeError):
        return None
    return got if isinstance(got, str) and got else None


def _kept_body(r: httpx.Response) -> str:
    """The first :data:`_BODY_LIMIT` bytes of an answer's body, as text."""
    return r.content[:_BODY_LIMIT].decode("utf-8", errors="replace")


def _stopped(answer: Any) -> dict[str, Any]:
    """Why the engine ended a completion and how long it made it, as its answer says: ``finish_reason``
    (``choices[0].finish_reason``: "stop", or "length" where max_tokens cut the answer) and
    ``completion_tokens`` (``usage.completion_tokens``); a field the answer leaves out or mistypes is None
    (the policy reads a missing finish reason as no evidence that the answer ended on its own)."""
    choice = answer["choices"][0]
    finish = choice.get("finish_reason")
    usage = answer.get("usage")
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    return {
        "finish_reason": finish if isinstance(finish, str) else None,
        "completion_tokens": tokens if type(tokens) is int and tokens >= 0 else None,
    }


_NOT_STOPPED: dict[str, Any] = {"finish_reason": None, "completion_tokens": None}


def _chat(
    c: httpx.Client, base: str, body: dict[str, Any]
) -> tuple[httpx.Response | None, str | None, str, str | None, dict[str, Any]]:
    """(answer, its completion text or None, why it failed, its body where it was no completion, why and
    after how many tokens the engine ended the completion — :func:`_stopped`)."""
    try:
        r = c.post(base + "/v1/chat/completions", json=body)
    except httpx.HTTPError as e:
        return None, None, f"{type(e).__name__}: {e}", None, dict(_NOT_STOPPED)
    if r.status_code != 200:
        return r, None, f"HTTP {r.status_code}: {_error_text(r)}", _kept_body(r), dict(_NOT_STOPPED)
    kept = _kept_body(r)
    why = not_a_completion(r.status_code, kept if len(r.content) <= _BODY_LIMIT else r.text)
    if why is not None:
        # the server answered 200 without a completion: it failed to answer (a server-side failure)
        return r, None, f"HTTP 200 without a completion: {why}", kept, dict(_NOT_STOPPED)
    answer = r.json()
    text = answer["choices"][0]["message"].get("content")
    return r, str(text or ""), "", None, _stopped(answer)


# the finish reason of an answer max_tokens cut (OpenAI's, vLLM's, llama.cpp's, llama-cpp-python's word)
def _cut(stopped: dict[str, Any], max_tokens: int, check: str, text: str, expect: str | None) -> str | None:
    """Why an answer is no judgement of the engine, or None: the probe's own ``max_tokens`` (the
    campaign's setting) cut it while it could still have become the right one
    (``ledger.answers.cut_undecided``, the policy's ``e.derived.cut_undecided``: one judgement). Such an
    answer is neither the right nor a wrong one: the probe does not pass, and the policy withholds its
    credit (INCONCLUSIVE). A cut answer that is already wrong is judged as any other answer."""
    record = {"check": check, "text": text, "max_tokens": max_tokens, **stopped}
    if not cut_undecided(record, expect):
        return None
    tokens = stopped.get("completion_tokens")
    made = f", {tokens} tokens" if tokens is not None else ""
    return (
        f"the campaign's max_tokens ({max_tokens}) cut the answer (finish_reason "
        f"{CUT_FINISH_REASON!r}{made}): no judgement of the engine — raise max_tokens"
    )


def _body(model: str | None, prompt: str, max_tokens: int, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        **extra,
    }
    if model:
        body["model"] = model
    return body


def probe_completion(
    base_url: str,
    *,
    expect: str = "READY",
    prompt: str = DEFAULT_PROMPT,
    model: str | None = None,
    max_tokens: int = 8,
    timeout: float = 60.0,
    context: tuple[str, int] | None = None,
    counts: Collection[str] = (COUNTED_USAGE,),
) -> dict[str, Any]:
    """Bounded chat completion; passes when the answer, stripped of whitespace, is exactly ``expect``.

    ``context``: the context option the campaign launched the engine with and its value; an answer that
    is no completion is sized as ``probe_structured`` sizes it (``details.context``), ``counts`` too."""
    base = _base(base_url)
    t0 = time.monotonic()
    sized: dict[str, Any] = {}
    with http_client(timeout) as c:
        r, text, err, failed_body, stopped = _chat(c, base, _body(model, prompt, max_tokens))
        if context is not None and text is None and r is not None:
            sized[CONTEXT_DETAIL] = _sized(c, base, model, prompt, context, counts)
    cut = _cut(stopped, max_tokens, "completion", text, expect) if text is not None else None
    ok = text is not None and text.strip() == expect and cut is None
    if cut is not None:
        err = f"answer {text.strip()[:80]!r}: {cut}" if text is not None else cut
    elif text is not None and not ok:
        err = f"answer {text.strip()[:80]!r} is not {expect!r}"
    return {
        "endpoint": base + "/v1/chat/completions",
        "check": "completion",
        "ok": ok,
        "http_status": r.status_code if r is not None else None,
        "latency_ms": _ms(t0),
        "model_identity": model,
        "answered_model": _answered_model(r),
        "expected": expect,
        "max_tokens": max_tokens,
        **stopped,
        "text": None if text is None else text[:_TEXT_LIMIT],
        "error": err or None,
        "details": {"prompt": prompt, **sized, **_failure_details(r, failed_body)},
    }


def _sized(
    c: httpx.Client,
    base: str,
    model: str | None,
    prompt: str,
    context: tuple[str, int],
    counts: Collection[str],
) -> dict[str, Any]:
    """The context record of a probe's request the engine answered without a completion
    (``collectors.sizing.sized``, the harnesses' reading too): the same messages with max_tokens 1 — its
    usage, else its tokenizer in the ways of ``counts`` (those of the program the campaign launched,
    ``ledger.answers.prompt_counts``)."""
    return sizing.sized(c, base + "/v1/chat/completions", _body(model, prompt, 1), context, counts)


def _response_format(fmt: str, schema: dict[str, Any]) -> dict[str, Any]:
    if fmt == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": "control", "schema": schema, "strict": True}}
    return {"type": "json_object", "schema": schema}  # llama-cpp-python's form


def probe_structured(
    base_url: str,
    *,
    schema: dict[str, Any],
    fmt: str = "auto",
    prompt: str = 'Answer with the JSON object {"status": "READY"}.',
    model: str | None = None,
    max_tokens: int = 64,
    timeout: float = 60.0,
    context: tuple[str, int] | None = None,
    counts: Collection[str] = (COUNTED_USAGE,),
) -> dict[str, Any]:
    """JSON-schema constrained output: the answer must parse and validate against ``schema`` (the
    qualification policy's ``structured_schema``: ``campaign.structured_schema``).

    ``fmt`` is ``json_schema`` (OpenAI/vLLM form), ``json_object`` (llama-cpp-python form) or ``auto``:
    ``json_schema`` first and, only when the server refuses that request form, ``json_object``.

    ``context``: the context option the campaign launched the engine with and its value (``--n_ctx``
    128). Where the engine answered the probe without a completion, the probe asks it how many tokens
    its prompt is (``_sized``: the usage of its answer with max_tokens 1, else its tokenizer, asked only in
    the ways of ``counts`` — ``ledger.answers.prompt_counts`` of the campaign's kind and the program its
    command runs; not given: usage alone) and records both in ``details.context``
    (``ledger.answers.context_record``): a request whose prompt and ``max_tokens`` the campaign's context
    cannot hold is the campaign's configuration (``ledger.answers.context_overflow``, judged by
    ``refusal``), not the engine's failure.
    """
    base = _base(base_url)
    tried: list[dict[str, Any]] = []
    forms = ["json_schema", "json_object"] if fmt == "auto" else [fmt]
    t0 = time.monotonic()
    r: httpx.Response | None = None
    text: str | None = None
    err = ""
    failed_body: str | None = None
    stopped: dict[str, Any] = dict(_NOT_STOPPED)
    used = forms[0]
    with http_client(timeout) as c:
        for form in forms:
            used = form
            t1 = time.monotonic()
            r, text, err, failed_body, stopped = _chat(
                c, base, _body(model, prompt, max_tokens, response_format=_response_format(form, schema))
            )
            tried.append(
                {
                    "format": form,
                    "http_status": r.status_code if r is not None else None,
                    "latency_ms": _ms(t1),
                    "error": err or None,
                }
            )
            # fall back only when the server refused the request form, not when the engine broke
            if text is not None or r is None or r.status_code not in (400, 422, 500, 501):
                break
        sized: dict[str, Any] = {}
        if context is not None and text is None and r is not None:
            sized[CONTEXT_DETAIL] = _sized(c, base, model, prompt, context, counts)
    ok = False
    if text is not None:
        # judged as the policy re-judges the recorded answer: one check, ledger.answers
        problem = schema_problem(text, schema)
        cut = _cut(stopped, max_tokens, "structured", text, None)
        ok = problem is None and cut is None
        err = cut or problem or err
    return {
        "endpoint": base + "/v1/chat/completions",
        "check": "structured",
        "ok": ok,
        "http_status": r.status_code if r is not None else None,
        "latency_ms": _ms(t0),
        "model_identity": model,
        "answered_model": _answered_model(r),
        "max_tokens": max_tokens,
        **stopped,
        "text": None if text is None else text[:_TEXT_LIMIT],
        "error": err or None,
        "details": {
            "format": used,
            "schema": schema,
            "attempts": tried,
            **sized,
            **_failure_details(r, failed_body),
        },
    }


def probe_sequential(
    base_url: str,
    *,
    count: int,
    prompt: str = DEFAULT_PROMPT,
    model: str | None = None,
    max_tokens: int = 16,
    max_latency_ms: float | None = None,
    timeout: float = 60.0,
    stop_on_failure: bool = True,
    context: tuple[str, int] | None = None,
    counts: Collection[str] = (COUNTED_USAGE,),
) -> dict[str, Any]:
    """``count`` sequential chat completions; passes (``ok``) when every one answers 200 with a completion.

    ``max_latency_ms`` (the qualification policy's ``sequential_max_latency_ms``) is recorded beside the
    latencies, never folded into ``ok``: a request answered too slowly was answered, and the policy judges
    the recorded latencies against its own bar. ``details.over_latency`` lists the requests above it.

    ``context``: the context option the campaign launched the engine with and its value; where the first
    request got an answer that is no completion, it is sized as ``probe_structured`` sizes it, ``counts``
    too (``details.context``: every request asks the same prompt and max_tokens)."""
    base = _base(base_url)
    latencies: list[float] = []
    failures: list[str] = []
    slow: list[str] = []  # requests answered above max_latency_ms: answered, so no failure
    statuses: list[int | None] = []
    answered: list[str] = []  # the distinct model names the answers gave, in the order first seen
    failed: dict[str, Any] = {}  # the first answer that was no completion
    sized: dict[str, Any] = {}  # the first request's size, where its answer was no completion
    last: httpx.Response | None = None
    with http_client(timeout) as c:
        for i in range(count):
            t1 = time.monotonic()
            r, text, err, failed_body, _ = _chat(c, base, _body(model, prompt, max_tokens))
            last = r
            if failed_body is not None and not failed:
                failed = _failure_details(r, failed_body)
            ms = _ms(t1)
            statuses.append(r.status_code if r is not None else None)
            name = _answered_model(r)
            if name is not None and name not in answered:
                answered.append(name)
            if text is None:
                failures.append(f"request {i + 1}: {err}")
            else:
                latencies.append(ms)
                if max_latency_ms is not None and ms > max_latency_ms:
                    slow.append(f"request {i + 1}: {ms} ms > {max_latency_ms} ms")
            if context is not None and i == 0 and text is None and r is not None:
                sized[CONTEXT_DETAIL] = _sized(c, base, model, prompt, context, counts)
            if failures and stop_on_failure:
                break
    done = len(latencies)
    ok = done == count and not failures
    summary: dict[str, Any] = {"completed": done, "requested": count, "failures": failures[:20]}
    if slow:
        summary["over_latency"] = slow[:20]
    if len(answered) > 1:
        summary["answered_models"] = answered[:20]
    if latencies:
        s = sorted(latencies)
        summary.update(p50_ms=s[len(s) // 2], max_ms=s[-1], mean_ms=round(sum(s) / len(s), 2))
    if failed and last is not None and failed.get("body_status") != last.status_code:
        failed = {}  # a later answer decided the recorded status: the body recorded must be of that answer
    return {
        "endpoint": base + "/v1/chat/completions",
        "check": "sequential",
        "ok": ok,
        "http_status": statuses[-1] if statuses else None,
        "count": done,
        "latencies_ms": latencies,
        "model_identity": model,
        # one answer from another model is enough: the first name that is not the asked one, else the name
        "answered_model": next((a for a in answered if a != model), answered[0] if answered else None),
        "max_tokens": max_tokens,
        "error": failures[0] if failures else None,
        "details": {**summary, "max_latency_ms": max_latency_ms, **sized, **failed},
    }


def _failure_details(r: httpx.Response | None, body: str | None) -> dict[str, Any]:
    """What a probe keeps of an answer that was no completion: its body (the first 2 KB), its HTTP status,
    and, for a 2xx answer, why it is none (``server_error``: the server failed to answer, like a 5xx)."""
    if r is None or body is None:
        return {}
    out: dict[str, Any] = {"body": body, "body_status": r.status_code}
    why = not_a_completion(r.status_code, body)
    if why is not None:
        out["server_error"] = why
    return out
