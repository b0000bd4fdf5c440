"""API readiness per engine, and which endpoint decided it.

- vLLM: the port answers only once the API server is up; ``/health`` 200 is not enough, because a
  sleeping vLLM answers 200 too: ``/is_sleeping`` (where it exists) must say false.
- llama.cpp: the C++ ``llama-server`` answers ``/health`` 503 "Loading model", then 200.
  llama-cpp-python's server has no ``/health`` (404): it is ready when ``/v1/models`` answers 200.
- SGLang: ``/health`` is 503 while starting, then 200.

An answer of 401 or 403 (any engine, any of these endpoints) is no step of a start-up: the server is up and
refuses the collector — an API key the campaign's command gives the engine (``--api_key``, ``--api-key``)
that the collector does not send. No later poll is answered otherwise, so it ends the wait at once
(``ReadyState.refused``), in the engine's words: ``/v1/models: HTTP 401 Invalid API key``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

__all__ = ["ENGINES", "REFUSED_STATUSES", "ReadyState", "check_ready", "http_client"]

ENGINES = ("vllm", "llamacpp", "sglang", "generic")
# the server is up and refuses the collector's requests (unauthenticated, forbidden): no poll will change it
REFUSED_STATUSES = (401, 403)


@dataclass(frozen=True, slots=True)
class ReadyState:
    ready: bool
    endpoint: str | None = None  # the endpoint that decided readiness, e.g. "/health+/is_sleeping"
    status: int | None = None  # HTTP status of the deciding request (None: nothing answered)
    note: str = ""  # "connection refused", "loading", "sleeping", …
    server: str | None = None  # llama-server | llama-cpp-python, when told apart
    refused: bool = False  # the server answered 401/403: it is up and refuses the collector (terminal)

    def to_json(self) -> dict[str, Any]:
        return {
            "ready": self.ready,
            "endpoint": self.endpoint,
            "status": self.status,
            "note": self.note,
            "server": self.server,
            "refused": self.refused,
        }


def http_client(timeout: float = 5.0) -> httpx.Client:
    """A client that ignores proxy settings (engines listen on the host itself)."""
    return httpx.Client(timeout=timeout, trust_env=False)


def _get(client: httpx.Client, url: str) -> tuple[int | None, Any, str]:
    try:
        r = client.get(url)
    except httpx.HTTPError as e:
        return None, None, type(e).__name__
    try:
        body: Any = r.json()
    except ValueError:
        body = r.text[:200]
    return r.status_code, body, ""


def _sleeping(client: httpx.Client, base: str) -> tuple[bool | None, int | None]:
    status, body, _ = _get(client, base + "/is_sleeping")
    if status == 200 and isinstance(body, dict) and "is_sleeping" in body:
        return bool(body["is_sleeping"]), status
    return None, status


def _message(body: Any) -> str:
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict):
            return str(err.get("message", ""))
        return str(err or body.get("detail") or "")
    return str(body or "")


def _refusal(endpoint: str, status: int, body: Any, server: str | None = None) -> ReadyState:
    """The terminal state of a server that refuses the collector: the engine's own words, its status."""
    words = _message(body).strip()
    note = f"{endpoint}: HTTP {status}" + (f" {words}" if words else "")
    return ReadyState(False, endpoint, status, note=note, server=server, refused=True)


def check_ready(base_url: str, engine: str, client: httpx.Client | None = None) -> ReadyState:
    """One readiness poll of the server at ``base_url`` for engine family ``engine``."""
    base = base_url.rstrip("/")
    own = client is None
    c = client or http_client(timeout=3.0)
    try:
        status, body, err = _get(c, base + "/health")
        if status is None:
            return ReadyState(False, note=err or "no answer")
        if status in REFUSED_STATUSES:
            return _refusal("/health", status, body)
        if engine == "llamacpp":
            if status == 200:
                return ReadyState(True, "/health", 200, server="llama-server")
            if status == 503:
                return ReadyState(
                    False, "/health", 503, note=_message(body) or "loading", server="llama-server"
                )
            if status == 404:
                m_status, m_body, m_err = _get(c, base + "/v1/models")
                if m_status == 200:
                    return ReadyState(True, "/v1/models", 200, server="llama-cpp-python")
                if m_status in REFUSED_STATUSES:
                    return _refusal("/v1/models", m_status, m_body, server="llama-cpp-python")
                return ReadyState(
                    False,
                    "/v1/models",
                    m_status,
                    note=m_err or "models not served yet",
                    server="llama-cpp-python",
                )
            return ReadyState(False, "/health", status, note=_message(body))
        if status == 404 and engine == "generic":  # no /health: the API answering counts
            m_status, m_body, m_err = _get(c, base + "/v1/models")
            if m_status in REFUSED_STATUSES:
                return _refusal("/v1/models", m_status, m_body)
            return ReadyState(m_status == 200, "/v1/models", m_status, note=m_err if m_status != 200 else "")
        if status != 200:
            return ReadyState(False, "/health", status, note=_message(body) or "starting")
        if engine in ("vllm", "generic"):
            sleeping, s_status = _sleeping(c, base)
            if s_status in REFUSED_STATUSES:  # /health is open, the API behind it is not the collector's
                return _refusal("/is_sleeping", s_status, None)
            if sleeping:
                return ReadyState(False, "/health+/is_sleeping", s_status, note="sleeping")
            if sleeping is False:
                return ReadyState(True, "/health+/is_sleeping", 200)
        return ReadyState(True, "/health", 200)
    finally:
        if own:
            c.close()
