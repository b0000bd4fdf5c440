"""The one reading of engine and model names that every part of the policy compares them by: the routing
gate (a route's backend against the verdict's, a service's engine), the verdict (a job's subject backend
against the engine its bindings launched) and the collector (``[campaign] backend`` against ``[engine]
kind``). One copy, so the three cannot drift apart."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import unquote, urlsplit

from ledger.entries import host_key
from ledger.errors import PolicyError
from ledger.policy.rules import Rule

if TYPE_CHECKING:
    from ledger.policy.loader import LoadedPolicy

__all__ = [
    "ENGINES_OF_ANY_BACKEND",
    "ENGINE_PYTHON",
    "HARNESS_GATES",
    "HARNESS_OTHER_ENDPOINT",
    "STEP_OWN_EVIDENCE",
    "endpoint_key",
    "endpoint_problem",
    "endpoint_under",
    "endpoint_under_but_for_host",
    "engine_aliases",
    "engine_key",
    "engines_of_any_backend",
    "model_key",
]

ENGINES_OF_ANY_BACKEND = "engines_of_any_backend"  # the param naming engines that name no engine family
# The interpreter the campaign's engine runs under, as the job's approved spec binds it
# (``spec.bindings.engine_python``, the manifest's key; each launch records it in its bindings too): the
# collector (``collectors/campaign.py``, ``ledger collect run``) reads the engine's version and records the
# job's ``env.snapshot`` in it and fills a launch's ``{python}`` with it; the qualification's
# host-prerequisites gate counts an env snapshot only of it (``manifest.engine_python``; its CEL spells the
# key, ``tests/policy/test_fix164_*`` holds the two equal). One name for both sides (fix 164, issue 11).
ENGINE_PYTHON = "engine_python"
# What a run of a collector step logs besides its gate.result (the entry kinds, of the evaluated subject):
# a newer result of the step stands in for an older failure only where the later run that logged it logged
# each of these too (``ledger.policy.acceptance._ran_again_in``, fix 172) — a result alone, entered by
# hand, shows no step run again. A gate not named here: the later run's result alone. The keys are gate
# names of the shipped qualification policy (``tests/policy/test_fix172_*`` fails when one is not).
STEP_OWN_EVIDENCE: Mapping[str, frozenset[str]] = {
    "host-prerequisites": frozenset({"host.probe", "env.snapshot"}),
}
# The gates whose results the harnesses record (``collectors/semantic.py``, ``collectors/benchmark.py``):
# each measured an endpoint and records which (``bounds.endpoint``)
HARNESS_GATES = frozenset({"semantic", "benchmark"})
# The rule that withholds credit from a harness result that measured another endpoint than the one the
# launch of its attempt served at (``ledger.policy.acceptance._endpoint_problem``): the registered rule
# (``ledger.policy.rules.Rule``, one copy), named here where the harnesses' endpoint is read
HARNESS_OTHER_ENDPOINT = Rule.HARNESS_OTHER_ENDPOINT
_DEFAULT_PORTS = {"http": 80, "https": 443}


class _Endpoint(NamedTuple):
    """An endpoint as :func:`endpoint_key` reads it: its parts, compared part by part."""

    scheme: str
    host: str  # as ``host_key`` reads host names
    port: int
    path: str  # as written, without a trailing ``/``


def _unescaped(path: str) -> str:
    """``path`` percent-decoded again and again until nothing changes: what a server, or a proxy in front
    of one, may read it as (``%252e`` is ``%2e`` to one decoding and ``.`` to the next)."""
    while (decoded := unquote(path)) != path:
        path = decoded
    return path


def _path_problem(path: str) -> str | None:
    """Why ``path`` (a URL's path, as written) names no one place, or None: read as any server might decode
    it, a ``.`` or ``..`` segment (``%2e%2e``, ``%2E.``, a ``..;x`` segment — its parameters set aside as
    some servers do), a backslash (a separator to some) or a slash that was written encoded (``%2f``).
    Servers and proxies differ on whether and how they decode and remove these — the place asked cannot
    be told from the record, so it is refused, never normalised (audit 106 f3)."""
    decoded = _unescaped(path)
    if "\\" in decoded:
        return "a backslash in its path (a path separator to some servers)"
    if decoded.count("/") != path.count("/"):
        return "an encoded slash (%2f) in its path"
    if any(seg.split(";", 1)[0] in (".", "..") for seg in decoded.split("/")):
        return "a dot segment (. or .., literal or percent-encoded) in its path"
    return None


def _read_endpoint(url: Any) -> _Endpoint | str:
    """``url`` as :func:`endpoint_key` reads it, or why it is no endpoint."""
    if not isinstance(url, str) or not url.strip():
        return "not a text" if not isinstance(url, str) else "blank"
    if any(c.isspace() or not c.isprintable() for c in url):
        return "a control character or a space in it"
    try:
        u = urlsplit(url)
        port = u.port
    except ValueError as e:
        return f"not a URL ({e})"
    scheme = u.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        return "no http(s) scheme"
    host = host_key(u.hostname or "")
    if not host:
        return "no host"
    if u.username is not None or u.password is not None:
        return "credentials in it"
    if u.query or u.fragment or "?" in url or "#" in url:
        return "a query or a fragment"
    if port is None:
        if u.netloc.endswith(":"):
            return "an empty port"  # "http://h:" names no port
        port = _DEFAULT_PORTS[scheme]
    if port == 0:
        return "port 0"  # no server answers at port 0
    problem = _path_problem(u.path)
    if problem is not None:
        return problem
    return _Endpoint(scheme, host, port, u.path.rstrip("/"))


def endpoint_problem(url: Any) -> str | None:
    """Why ``url`` is no endpoint as :func:`endpoint_key` reads it (``"a dot segment … in its path"``), or
    None where it is one: the one wording of the reasons, for a collector that refuses such a URL up front
    (``collectors.probe``) rather than record what can never be credited."""
    read = _read_endpoint(url)
    return read if isinstance(read, str) else None


def endpoint_key(url: Any) -> str | None:
    """One endpoint's one spelling, as the policy compares the endpoint a harness run measured
    (``bounds.endpoint``) with the one its launch served at (``details.base_url``): an http(s) base URL
    with its scheme in lower case, its host as host names compare (``ledger.entries.host_key``, the one
    reading: case and a trailing dot aside — ``Engine.`` is ``engine``), its port written out (80 and 443
    where the URL leaves it out) and no trailing ``/`` — ``HTTP://Engine:80/`` is ``http://engine:80``.
    Strict otherwise: ``127.0.0.1``, ``localhost`` and ``0.0.0.0`` are three hosts (which one a name
    resolves to, or a bind answers on, is not in the record), and a path is part of the endpoint, as
    written. None for no endpoint (fail closed; :func:`endpoint_problem` says why): not a text, blank,
    another scheme, no host, a port that is no port, credentials, a query or a fragment, a control
    character or space anywhere in it (``urlsplit`` deletes tab, CR and LF inside a URL: read as written,
    ``http://127.0.0.1:80\\n00`` would be ``http://127.0.0.1:8000``; audit 104 f2), or a path that names
    no one place — a dot segment, literal or percent-encoded, an encoded slash or a backslash
    (``http://h:80/engine-a/../engine-b`` is ``/engine-b`` to an HTTP client and ``/engine-a/…`` as
    written; audit 106 f3)."""
    read = _read_endpoint(url)
    if isinstance(read, str):
        return None
    shown = f"[{read.host}]" if ":" in read.host else read.host
    return f"{read.scheme}://{shown}:{read.port}{read.path}"


def _path_under(path: str, base: str) -> bool:
    """Whether ``base`` (a path without a trailing ``/``) is ``path`` or a whole-segment prefix of it."""
    return path == base or path.startswith(base + "/")


def endpoint_under(url: Any, base_url: Any) -> bool:
    """Whether the URL a health probe asked (its ``endpoint``: the base URL it was given and the path of its
    check, ``/health``, ``/v1/models``, ``/v1/chat/completions`` …) is one of the server at ``base_url``
    (a launch's ``details.base_url``), both read by :func:`endpoint_key` — the same scheme, host and port,
    compared as strictly as a harness run's endpoint, and the base URL's path, if any, a whole-segment prefix
    of the probe's path: the probe's own path is stripped only so, never guessed (``http://h:80/health``
    is ``http://h:80``'s, ``http://h:80/proxy/v1/models`` is ``http://h:80/proxy``'s and not
    ``http://h:80/prox``'s, and ``http://h:80/proxy/../other/v1/models`` is no endpoint at all). False where
    either is no endpoint (fail closed): a bare path (``/health``) names no server."""
    asked, base = _read_endpoint(url), _read_endpoint(base_url)
    if isinstance(asked, str) or isinstance(base, str):
        return False
    same_server = (asked.scheme, asked.host, asked.port) == (base.scheme, base.host, base.port)
    return same_server and _path_under(asked.path, base.path)


def endpoint_under_but_for_host(url: Any, base_url: Any) -> bool:
    """Whether ``url`` would be :func:`endpoint_under` ``base_url`` but for its host, spelled otherwise —
    the same scheme and port, the path the base URL's or under it (``http://localhost:8000/health`` beside
    ``http://127.0.0.1:8000``): the same server, perhaps, which the record cannot tell. False where either
    is no endpoint. The one reading the verdict words its hint by (``probe-other-endpoint``,
    ``harness-other-endpoint``)."""
    asked, base = _read_endpoint(url), _read_endpoint(base_url)
    if isinstance(asked, str) or isinstance(base, str):
        return False
    return (
        asked.host != base.host
        and (asked.scheme, asked.port) == (base.scheme, base.port)
        and _path_under(asked.path, base.path)
    )


def engine_key(name: Any, aliases: Mapping[str, str] | None = None) -> str | None:
    """One engine's one name, as every engine comparison of the routing gate reads it: surrounding
    whitespace and case set aside (``vLLM`` is ``vllm``), then the name the policy's ``params.engine_names``
    maps it to (``aliases``, from ``engine_aliases``: ``llama.cpp`` is ``llamacpp``; a name it does not list
    stands for itself). None for no name (not a text, or blank): it names no engine, and matches none."""
    if not isinstance(name, str) or not name.strip():
        return None
    key = name.strip().casefold()
    return (aliases or {}).get(key, key)


def model_key(name: Any) -> str | None:
    """One model's one name, as every model comparison of the routing gate reads it: surrounding whitespace
    and case set aside (``qwen3-embedding-8b `` is ``Qwen3-Embedding-8B``). The policy's CEL reads it as
    ``request.model_key`` and each service's ``model_key`` (``deployment-serves-model``,
    ``deployment-engine``, ``deployment-device``), and the verdict-shopping check compares campaigns' models
    by it: a service of the routed model spelled otherwise is still a service of that model, judged as one.
    None for no name (not a text, or blank): it names no model, and matches none."""
    if not isinstance(name, str) or not name.strip():
        return None
    return name.strip().casefold()


def engine_aliases(policy: LoadedPolicy) -> dict[str, str]:
    """The policy's ``params.engine_names`` (another spelling of an engine -> its name) as ``engine_key``
    reads it, both sides compared as engine names are (whitespace and case aside). Absent: no aliases. A
    table that is not one of texts, or that maps one spelling to two engines, is the policy's error: the
    engine a route must reach could not be told."""
    names = policy.params.get("engine_names")
    if names is None:
        return {}
    where = f"{policy.path}: params.engine_names"
    if not isinstance(names, Mapping):
        raise PolicyError(f"{where} must be a table of engine spellings to engine names, not {names!r}")
    out: dict[str, str] = {}
    for k, v in names.items():
        key, value = engine_key(k), engine_key(v)
        if key is None or value is None:
            raise PolicyError(f"{where}: {k!r} = {v!r} is not a spelling and an engine name (both texts)")
        if out.get(key, value) != value:
            raise PolicyError(f"{where}: {k!r} names two engines ({out[key]}, {value}) as names compare")
        out[key] = value
    return out


def engines_of_any_backend(policy: LoadedPolicy, aliases: Mapping[str, str]) -> set[str]:
    """The engines that name no engine family — the qualification's ``params.engines_of_any_backend`` (the
    collector's generic kind: any server), as ``engine_key`` reads them: a campaign running one names any
    backend. Missing: none (every engine is one family's). Not a list of engine names: the policy's error
    (``PolicyError``), never read as none. The one reading the verdict (``_engine_contradicted``) and the
    collector (``_check_backend``) share."""
    listed = policy.params.get(ENGINES_OF_ANY_BACKEND, [])
    if not isinstance(listed, list) or any(engine_key(v) is None for v in listed):
        raise PolicyError(
            f"policy {policy.name}: params.{ENGINES_OF_ANY_BACKEND} must be a list of engine names; "
            f"got {listed!r}"
        )
    return {k for v in listed if (k := engine_key(v, aliases)) is not None}
