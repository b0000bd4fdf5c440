"""API readiness per engine, and which endpoint decided it.

- vLLM: the port answers only once the API server is up; ``/health`` 200 is not enough, because a
  sleeping vLLM answers 200 too: ``/is_sleeping`` (where it exists) must say false.
- llama.cpp: the C++ ``llama-server`` answers ``/health`` 503 "Loading model", then 200.
  llama-cpp-python's server has no ``/health`` (404): it is ready when ``/v1/models`` answers 200.
- SGLang: ``/health`` is 503 while starting, then 200.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

__all__ = ["ENGINES", "ReadyState", "check_ready", "http_client"]

ENGINES = ("vllm", "llamacpp", "sglang", "generic")


@dataclass(frozen=True, slots=True)
class ReadyState:
    ready: bool
    endpoint: str | None = None  # the endpoint that decided readiness, e.g. "/health+/is_sleeping"
    status: int | None = None  # HTTP status of the deciding request (None: nothing answered)
    note: str = ""  # "connection refused", "loading", "sleeping", …
    server: str | None = None  # llama-server | llama-cpp-python, when told apart

    def to_json(self) -> dict[str, Any]:
        return {
            "ready": self.ready,
            "endpoint": self.endpoint,
            "status": self.status,
            "note": self.note,
            "server": self.server,
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


def check_ready(base_url: str, engine: str, client: httpx.Client | None = None) -> ReadyState:
    """One readiness poll of the server at ``base_url`` for engine family ``engine``."""
    base = base_url.rstrip("/")
    own = client is None
    c = client or http_client(timeout=3.0)
    try:
        status, body, err = _get(c, base + "/health")
        if status is None:
            return ReadyState(False, note=err or "no answer")
        if engine == "llamacpp":
            if status == 200:
                return ReadyState(True, "/health", 200, server="llama-server")
            if status == 503:
                return ReadyState(
                    False, "/health", 503, note=_message(body) or "loading", server="llama-server"
                )
            if status == 404:
                m_status, _, m_err = _get(c, base + "/v1/models")
                if m_status == 200:
                    return ReadyState(True, "/v1/models", 200, server="llama-cpp-python")
                return ReadyState(
                    False,
                    "/v1/models",
                    m_status,
                    note=m_err or "models not served yet",
                    server="llama-cpp-python",
                )
            return ReadyState(False, "/health", status, note=_message(body))
        if status == 404 and engine == "generic":  # no /health: the API answering counts
            m_status, _, m_err = _get(c, base + "/v1/models")
            return ReadyState(m_status == 200, "/v1/models", m_status, note=m_err if m_status != 200 else "")
        if status != 200:
            return ReadyState(False, "/health", status, note=_message(body) or "starting")
        if engine in ("vllm", "generic"):
            sleeping, s_status = _sleeping(c, base)
            if sleeping:
                return ReadyState(False, "/health+/is_sleeping", s_status, note="sleeping")
            if sleeping is False:
                return ReadyState(True, "/health+/is_sleeping", 200)
        return ReadyState(True, "/health", 200)
    finally:
        if own:
            c.close()
