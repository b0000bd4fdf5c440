"""Auth matrix: every endpoint × every kind of caller, generated from one table keyed by the app's routes.

``ROUTES`` must name every (method, path) of ``create_app(...).routes``: a new endpoint that is not in
the table fails ``test_every_route_is_in_the_table``, so it cannot be left out of the matrix. Each
route's access class decides the expected outcome for every caller; the matrix runs against a server
with token-protected reads and one with ``--public-reads``.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.routing import Mount, Route

from ledger.api.app import create_app
from ledger.api.settings import ApiSettings
from ledger.hashing import blake3_hex
from ledger.tokens import create_token, revoke_token
from tests.reliability import api_fixtures
from tests.reliability.api_fixtures import Deployment, PgDatabases, Server, make_deployment, start_server

pg_databases = api_fixtures.pg_databases

# Callers. The last two hold a live writer token but send an envelope signed by a key that may not sign
# it: one lacking the role for the kind, one revoked. They apply only to routes that take envelopes.
CALLERS = (
    "none",
    "reader",
    "writer",
    "admin",
    "revoked-token",
    "unknown-token",
    "wrong-key-role",
    "revoked-key",
)
TOKEN_CALLERS = {"reader", "writer", "admin"}


@dataclass(frozen=True)
class Ctx:
    dep: Deployment
    entry_id: str
    digest: str
    caller: str


Request = Callable[[Ctx], dict[str, Any]]  # → kwargs of httpx.Client.request besides method and url


@dataclass(frozen=True)
class Rule:
    access: str  # "public" | "read" | "write" | "admin"
    path: Callable[[Ctx], str]
    request: Request = lambda _ctx: {}
    ok: frozenset[int] = frozenset({200})
    envelopes: bool = False  # the body carries signed envelopes (so the key callers apply)


def _fixed(p: str) -> Callable[[Ctx], str]:
    return lambda _ctx: p


def _envelope(ctx: Ctx) -> dict[str, Any]:
    """A fresh envelope, signed by the key the caller stands for."""
    tag = secrets.token_hex(4)
    if ctx.caller == "wrong-key-role":  # a collector key may not sign a review
        return ctx.dep.sign(
            "review", {"campaign": "auth"}, {"result": "PASS"}, refs=[("reviews", ctx.entry_id)]
        )
    key = "revoked1" if ctx.caller == "revoked-key" else "collector1"
    return ctx.dep.sign("note", {"campaign": "auth"}, {"text": tag}, key=key)


def _new_collector_key(_ctx: Ctx) -> dict[str, Any]:
    from ledger.signing import SigningKey

    name = f"host-{secrets.token_hex(4)}"
    return {"json": {"name": name, "public_key": SigningKey.generate(name).public.b64}}


def _upload(ctx: Ctx) -> dict[str, Any]:
    return {"content": secrets.token_bytes(64)}


def _upload_path(_ctx: Ctx) -> str:
    return "/v1/artifacts/{digest}"


ENTRY = "/v1/entries/{entry_id}"
# One row per (method, path template) of the app. The request builders fill in path parameters and bodies.
ROUTES: dict[tuple[str, str], Rule] = {
    ("GET", "/openapi.json"): Rule("public", _fixed("/openapi.json")),
    ("HEAD", "/openapi.json"): Rule("public", _fixed("/openapi.json")),
    ("GET", "/docs"): Rule("public", _fixed("/docs")),
    ("HEAD", "/docs"): Rule("public", _fixed("/docs")),
    ("GET", "/docs/oauth2-redirect"): Rule("public", _fixed("/docs/oauth2-redirect")),
    ("HEAD", "/docs/oauth2-redirect"): Rule("public", _fixed("/docs/oauth2-redirect")),
    ("GET", "/redoc"): Rule("public", _fixed("/redoc")),
    ("HEAD", "/redoc"): Rule("public", _fixed("/redoc")),
    ("GET", "/v1/health"): Rule("public", _fixed("/v1/health")),
    ("GET", "/metrics"): Rule("public", _fixed("/metrics")),  # decision: scrapers need no token
    ("GET", "/v1/keys"): Rule("read", _fixed("/v1/keys")),
    ("POST", "/v1/keys"): Rule("admin", _fixed("/v1/keys"), _new_collector_key, frozenset({201})),
    ("GET", "/v1/subjects"): Rule("read", _fixed("/v1/subjects")),
    ("GET", "/v1/entries"): Rule("read", _fixed("/v1/entries?limit=5")),
    ("GET", ENTRY): Rule("read", lambda c: f"/v1/entries/{c.entry_id}"),
    ("POST", "/v1/entries"): Rule(
        "write", _fixed("/v1/entries"), lambda c: {"json": _envelope(c)}, frozenset({201}), envelopes=True
    ),
    ("POST", "/v1/entries/batch"): Rule(
        "write",
        _fixed("/v1/entries/batch"),
        lambda c: {"json": {"envelopes": [_envelope(c)]}},
        frozenset({201}),
        envelopes=True,
    ),
    ("PUT", "/v1/artifacts/{digest}"): Rule(
        "write",
        lambda _c: "",  # filled from the body below
        _upload,
        frozenset({201}),
    ),
    ("HEAD", "/v1/artifacts/{digest}"): Rule("read", lambda c: f"/v1/artifacts/{c.digest}"),
    ("GET", "/v1/artifacts/{digest}"): Rule("read", lambda c: f"/v1/artifacts/{c.digest}"),
    ("GET", "/v1/checkpoint"): Rule("read", _fixed("/v1/checkpoint")),
    # C2SP tlog-tiles: the log holds at least one entry, so tile 0 and entry bundle 0 have a width-1 partial
    ("GET", "/checkpoint"): Rule("read", _fixed("/checkpoint")),
    ("GET", "/tile/{level}/{index}"): Rule("read", _fixed("/tile/0/000.p/1")),
    ("GET", "/tile/entries/{index}"): Rule("read", _fixed("/tile/entries/000.p/1")),
    ("HEAD", "/checkpoint"): Rule("read", _fixed("/checkpoint")),
    ("HEAD", "/tile/{level}/{index}"): Rule("read", _fixed("/tile/0/000.p/1")),
    ("HEAD", "/tile/entries/{index}"): Rule("read", _fixed("/tile/entries/000.p/1")),
    ("GET", "/v1/proofs/inclusion/{entry_id}"): Rule("read", lambda c: f"/v1/proofs/inclusion/{c.entry_id}"),
    ("GET", "/v1/proofs/consistency"): Rule("read", _fixed("/v1/proofs/consistency?old=1")),
    # the policy engine answers 200, or 404/422 for a policy or subject it does not know, 501 if absent;
    # what matters here is who gets past authentication
    ("GET", "/v1/verdict"): Rule(
        "read",
        _fixed("/v1/verdict?subject=campaign%3Dauth&policy=qualification"),
        ok=frozenset({200, 404, 422, 501}),
    ),
    ("POST", "/v1/routing-check"): Rule(
        "read",
        _fixed("/v1/routing-check"),
        lambda _c: {"json": {"backend": "vllm", "model": "m", "host": "h"}},
        ok=frozenset({200, 404, 422, 501}),
    ),
    ("GET", "/"): Rule("read", _fixed("/")),
    ("GET", "/subjects/{field}/{value}"): Rule("read", _fixed("/subjects/campaign/auth")),
    ("GET", "/entries/{entry_id}"): Rule("read", lambda c: f"/entries/{c.entry_id}"),
    # Swagger UI and ReDoc assets, served by the app (no CDN)
    ("GET", "/static/docs/{path}"): Rule("public", _fixed("/static/docs/swagger-ui.css")),
    # the ReDoc bundle, served without its CDN logo
    ("GET", "/static/docs/redoc.standalone.js"): Rule("public", _fixed("/static/docs/redoc.standalone.js")),
    ("HEAD", "/static/docs/redoc.standalone.js"): Rule("public", _fixed("/static/docs/redoc.standalone.js")),
    # the page an error document's `type` names
    ("GET", "/errors/{code}"): Rule("public", _fixed("/errors/entry-not-found")),
    # browser sign-in: the form is public; a POST without the form's anti-forgery token is refused (403)
    # whoever sends it, and so is a sign-out without the session's
    ("GET", "/signin"): Rule("public", _fixed("/signin")),
    ("POST", "/signin"): Rule(
        "public", _fixed("/signin"), lambda c: {"data": {"token": c.dep.tokens["reader"]}}, frozenset({403})
    ),
    ("POST", "/signout"): Rule("public", _fixed("/signout"), lambda _c: {"data": {}}, frozenset({403})),
    # reviewer pages: the verdict ladder (the subject has no verdict-worthy evidence: 404/422), the diff
    # of two verdicts (the seed entry is no verdict: 422), the log viewer (the artifact is named by no
    # entry: 404), a host (none is recorded: 404)
    ("GET", "/verdict"): Rule(
        "read", _fixed("/verdict?subject=campaign%3Dauth"), ok=frozenset({200, 404, 422})
    ),
    ("GET", "/verdicts/diff"): Rule(
        "read", lambda c: f"/verdicts/diff?a={c.entry_id}&b={c.entry_id}", ok=frozenset({422})
    ),
    ("GET", "/artifacts/{digest}"): Rule(
        "read", lambda c: f"/artifacts/{c.digest}", ok=frozenset({200, 404})
    ),
    ("GET", "/hosts/{host}"): Rule("read", _fixed("/hosts/auth-host"), ok=frozenset({404})),
}


def expected(rule: Rule, caller: str, *, public_reads: bool) -> frozenset[int] | None:
    """The statuses a caller may get; None where the caller does not apply to the route."""
    if caller in ("wrong-key-role", "revoked-key"):
        return frozenset({403}) if rule.envelopes else None
    if rule.access == "public":
        return rule.ok
    if caller in ("revoked-token", "unknown-token"):
        return frozenset({401})  # a bad token is refused even where reads are public
    if caller == "none":
        return rule.ok if rule.access == "read" and public_reads else frozenset({401})
    if rule.access == "read":
        return rule.ok
    if rule.access == "admin":
        return rule.ok if caller == "admin" else frozenset({403})
    return rule.ok if caller in ("writer", "admin") else frozenset({403})


def _flatten(routes: list[Any], prefix: str = "") -> Iterator[tuple[str, str]]:
    """(method, path) of every route, descending into included routers (FastAPI ≥ 0.16x keeps them nested)."""
    for r in routes:
        if isinstance(r, Route):
            for m in r.methods or ():  # a path converter ({index:path}) is not part of the template
                yield m, re.sub(r"\{(\w+):\w+\}", r"{\1}", prefix + r.path)
        elif hasattr(r, "original_router") and hasattr(r, "include_context"):
            yield from _flatten(list(r.original_router.routes), prefix + r.include_context.prefix)
        elif isinstance(r, Mount) and not r.routes:  # static files: one GET row for the whole folder
            yield "GET", prefix + r.path + "/{path}"
        else:  # a kind of route this test does not know: it must not be skipped silently
            raise AssertionError(f"unknown route type {type(r).__name__}: {r!r}")


def app_routes(dep: Deployment) -> set[tuple[str, str]]:
    """Every (method, path template) the app serves, from ``app.routes``."""
    app = create_app(ApiSettings(home=str(dep.home)), ledger=dep.ledger)
    found = set(_flatten(list(app.routes)))
    # the published OpenAPI document is a second, independent list of the JSON API's routes
    for path, ops in app.openapi()["paths"].items():
        for method in ops:
            assert (method.upper(), path) in found, (
                f"{method.upper()} {path} is in OpenAPI but not in app.routes"
            )
    return found


@pytest.fixture(scope="module", params=api_fixtures.BACKENDS)
def matrix_dep(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, pg_databases: PgDatabases
) -> Iterator[tuple[Deployment, dict[str, str]]]:
    dep = make_deployment(request.param, tmp_path_factory.mktemp("auth"), pg_databases)
    dep.ledger.new_key("revoked1", ["collector"])
    dep.ledger.revoke_key("revoked1", reason="stolen laptop")
    tokens = dict(dep.tokens)
    tokens["revoked-token"], _ = create_token(dep.ledger.engine, "gone", "admin")
    revoke_token(dep.ledger.engine, "gone")
    tokens["unknown-token"] = "elt_" + secrets.token_urlsafe(32)
    tokens["wrong-key-role"] = tokens["revoked-key"] = dep.tokens["writer"]
    yield dep, tokens
    dep.ledger.close()


def test_every_route_is_in_the_table(matrix_dep: tuple[Deployment, dict[str, str]]) -> None:
    routes = app_routes(matrix_dep[0])
    missing = sorted(routes - set(ROUTES))
    stale = sorted(set(ROUTES) - routes)
    assert not missing, f"routes without an auth rule (add them to ROUTES): {missing}"
    assert not stale, f"rules for routes that no longer exist: {stale}"


def _run_matrix(dep: Deployment, tokens: dict[str, str], server: Server, *, public_reads: bool) -> list[str]:
    seed = dep.sign("note", {"campaign": "auth"}, {"text": "seed"})
    data = b"auth matrix artifact\n"
    digest = f"blake3:{blake3_hex(data)}"
    with httpx.Client(base_url=server.url, timeout=60) as c:
        w = {"Authorization": f"Bearer {tokens['writer']}"}
        r = c.post("/v1/entries", json=seed, headers=w)
        assert r.status_code in (200, 201), r.text
        entry_id = r.json()["id"]
        assert c.put(f"/v1/artifacts/{digest}", content=data, headers=w).status_code in (200, 201)
        wrong: list[str] = []
        ran = 0
        for (method, template), rule in sorted(ROUTES.items()):
            for caller in CALLERS:
                want = expected(rule, caller, public_reads=public_reads)
                if want is None:
                    continue
                ctx = Ctx(dep, entry_id, digest, caller)
                kwargs = rule.request(ctx)
                path = rule.path(ctx)
                if template == "/v1/artifacts/{digest}" and method == "PUT":
                    path = f"/v1/artifacts/blake3:{blake3_hex(kwargs['content'])}"
                headers = {"Authorization": f"Bearer {tokens[caller]}"} if caller != "none" else {}
                size = dep.ledger.size()
                r = c.request(method, path, headers=headers, **kwargs)
                ran += 1
                if r.status_code not in want:
                    wrong.append(
                        f"{method} {template} as {caller}: {r.status_code}, want {sorted(want)}: "
                        + r.text[:120]
                    )
                if r.status_code in (401, 403) and dep.ledger.size() != size:
                    wrong.append(f"{method} {template} as {caller}: refused but the log grew")
                if r.status_code == 401 and "www-authenticate" not in r.headers:
                    wrong.append(f"{method} {template} as {caller}: 401 without WWW-Authenticate")
                if r.status_code == 403 and caller in ("wrong-key-role", "revoked-key"):
                    code = r.json()["error"]["code"]
                    if code != {"wrong-key-role": "wrong-role", "revoked-key": "key-revoked"}[caller]:
                        wrong.append(f"{method} {template} as {caller}: error code {code}")
    assert ran > 3 * len(ROUTES)
    return wrong


@pytest.mark.parametrize("public_reads", [False, True], ids=["token-reads", "public-reads"])
def test_auth_matrix(matrix_dep: tuple[Deployment, dict[str, str]], public_reads: bool) -> None:
    dep, tokens = matrix_dep
    assert set(app_routes(dep)) == set(ROUTES)
    server = start_server(dep.home, *(["--public-reads"] if public_reads else []))
    try:
        wrong = _run_matrix(dep, tokens, server, public_reads=public_reads)
    finally:
        server.stop()
    assert not wrong, "\n".join(wrong)


def test_the_rules_expect_refusals(tmp_path: Path) -> None:
    """The table is not vacuous: every non-public route refuses an anonymous or reader caller somewhere."""
    for key, rule in ROUTES.items():
        if rule.access == "public":
            continue
        refusals = {
            expected(rule, c, public_reads=False)
            for c in ("none", "reader", "revoked-token", "unknown-token")
        }
        assert frozenset({401}) in refusals, key
        if rule.access == "write":
            assert expected(rule, "reader", public_reads=True) == frozenset({403}), key
