"""The HTTP conventions clients and browsers expect, over real HTTP against `ledger serve`: RFC 9457
problem documents, HTML error pages, ETag/304, private vs public caching, artifact media types and file
names, browser sign-in (session cookie, anti-forgery tokens, sign-out), request logs, the start-up line."""

from __future__ import annotations

import json
import re
import secrets
import time
from pathlib import Path

import blake3
import httpx

from ledger.entries import ArtifactRef
from tests.api.conftest import Deployment, Server, start_server

HTML = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}  # as Chromium sends


def _campaign() -> dict[str, str]:
    return {"campaign": f"c-{secrets.token_hex(4)}"}


def _note(http: httpx.Client, dep: Deployment) -> dict[str, object]:
    r = http.post(
        "/v1/entries", json=dep.sign("note", _campaign(), {"text": "x"}), headers=dep.headers("writer")
    )
    assert r.status_code == 201, r.text
    body: dict[str, object] = r.json()
    return body


def _artifact(http: httpx.Client, dep: Deployment, data: bytes, name: str, media: str) -> str:
    d = "blake3:" + blake3.blake3(data).hexdigest()
    assert http.put(f"/v1/artifacts/{d}", content=data, headers=dep.headers("writer")).status_code in (
        200,
        201,
    )
    ref = ArtifactRef(name=name, digest=d, size=len(data), media_type=media)
    env = dep.sign("note", _campaign(), {"text": "with a log"}, artifacts=[ref])
    assert http.post("/v1/entries", json=env, headers=dep.headers("writer")).status_code == 201
    return d


def test_errors_are_problem_documents_with_code_hint_and_request_id(
    http: httpx.Client, deployment: Deployment
) -> None:
    rd = deployment.headers("reader")
    r = http.get(f"/v1/entries/{'0' * 64}", headers={**rd, "X-Request-ID": "rid-test-1"})
    assert r.status_code == 404
    assert r.headers["content-type"] == "application/problem+json"
    body = r.json()
    assert body["type"] == "/errors/entry-not-found"
    assert body["title"] == "Not Found" and body["status"] == 404
    assert body["code"] == "entry-not-found" and body["detail"]
    assert body["hint"], "a hint is never empty"
    assert body["instance"] == f"/v1/entries/{'0' * 64}"
    assert body["request_id"] == r.headers["x-request-id"] == "rid-test-1"
    for path, status, code in (
        ("/v1/no-such-endpoint", 404, "not-found"),
        ("/v1/health", 405, "method-not-allowed"),
    ):
        got = http.request("DELETE" if status == 405 else "GET", path, headers=rd)
        assert got.status_code == status
        assert got.headers["content-type"] == "application/problem+json"
        assert got.json()["code"] == code and got.json()["hint"]
    unauth = http.get("/v1/entries")
    assert unauth.status_code == 401 and unauth.json()["hint"]
    assert unauth.headers["www-authenticate"].startswith("Bearer")
    # the problem type names a page that explains the code
    about = http.get("/errors/entry-not-found", headers=HTML)
    assert about.status_code == 200 and "404" in about.text
    assert http.get("/errors/no-such-code", headers=HTML).status_code == 404


def test_a_browser_gets_html_error_pages_and_is_sent_to_sign_in(
    http: httpx.Client, deployment: Deployment
) -> None:
    rd = deployment.headers("reader")
    page = http.get(f"/v1/entries/{'0' * 64}", headers={**rd, **HTML})
    assert page.status_code == 404
    assert page.headers["content-type"].startswith("text/html")
    assert "entry-not-found" in page.text and "<script" not in page.text.lower()
    missing = http.get("/subjects/campaign/no-such-campaign", headers={**rd, **HTML})
    assert missing.status_code == 404, "an unknown subject is not an empty 200 page"
    home = http.get("/", headers=HTML)
    assert home.status_code == 303 and home.headers["location"] == "/signin?next=%2F"
    api_client = http.get("/")
    assert api_client.status_code == 401 and api_client.headers["content-type"] == "application/problem+json"


def test_entries_carry_their_digest_as_etag_and_answer_304(
    http: httpx.Client, public_server: Server, deployment: Deployment
) -> None:
    entry = _note(http, deployment)
    rd = deployment.headers("reader")
    r = http.get(f"/v1/entries/{entry['id']}", headers=rd)
    assert r.headers["etag"] == f'"{entry["id"]}"'
    assert r.headers["cache-control"] == "private, no-cache"
    again = http.get(f"/v1/entries/{entry['id']}", headers={**rd, "If-None-Match": r.headers["etag"]})
    assert again.status_code == 304 and again.content == b""
    assert again.headers["etag"] == r.headers["etag"]
    other = http.get(f"/v1/entries/{entry['id']}", headers={**rd, "If-None-Match": '"something-else"'})
    assert other.status_code == 200
    env = http.get(f"/v1/entries/{entry['id']}", params={"envelope": "true"}, headers=rd)
    assert env.headers["etag"] != r.headers["etag"], "two representations, two tags"
    assert env.headers["cache-control"] == "private, max-age=31536000, immutable"
    pub = httpx.get(f"{public_server.url}/v1/entries/{entry['id']}")
    assert pub.headers["cache-control"] == "public, no-cache"
    # every other read names its caching too: private behind a token, public only with --public-reads
    assert http.get("/v1/checkpoint", headers=rd).headers["cache-control"] == "private, no-cache"
    assert httpx.get(f"{public_server.url}/v1/entries").headers["cache-control"] == "public, no-cache"
    assert http.get("/v1/entries").headers["cache-control"] == "no-store"  # the 401


def test_artifacts_are_served_with_their_recorded_type_name_and_etag(
    http: httpx.Client, public_server: Server, deployment: Deployment
) -> None:
    rd = deployment.headers("reader")
    text = f"line one\nHW Exception by GPU node-1 reason GPU Hang {secrets.token_hex(4)}\n".encode()
    d = _artifact(http, deployment, text, "engine stderr.log", "text/plain")
    r = http.get(f"/v1/artifacts/{d}", headers=rd)
    assert r.status_code == 200 and r.content == text
    assert r.headers["content-type"] == "text/plain; charset=utf-8"
    assert r.headers["content-disposition"] == (
        "inline; filename=\"engine_stderr.log\"; filename*=UTF-8''engine%20stderr.log"
    )
    assert r.headers["etag"] == f'"{d}"'
    assert r.headers["cache-control"] == "private, max-age=31536000, immutable"
    assert r.headers["x-content-type-options"] == "nosniff"
    assert "sandbox" in r.headers["content-security-policy"]
    assert http.get(f"/v1/artifacts/{d}", headers={**rd, "If-None-Match": f'W/"{d}"'}).status_code == 304
    down = http.get(f"/v1/artifacts/{d}", params={"download": "true"}, headers=rd)
    assert down.headers["content-disposition"].startswith('attachment; filename="engine_stderr.log"')
    head = http.head(f"/v1/artifacts/{d}", headers=rd)
    assert head.headers["content-type"] == "text/plain; charset=utf-8"
    # a recorded HTML page is evidence to read, never a page of this origin
    page = _artifact(
        http, deployment, b"<script>alert(1)</script>" + secrets.token_bytes(4), "x.html", "text/html"
    )
    assert (
        http.get(f"/v1/artifacts/{page}", headers=rd).headers["content-type"] == "text/plain; charset=utf-8"
    )
    binary = _artifact(http, deployment, secrets.token_bytes(64), "weights.bin", "application/octet-stream")
    b = http.get(f"/v1/artifacts/{binary}", headers=rd)
    assert b.headers["content-type"] == "application/octet-stream"
    assert b.headers["content-disposition"].startswith('attachment; filename="weights.bin"')
    assert httpx.get(f"{public_server.url}/v1/artifacts/{d}").headers["cache-control"].startswith("public, ")
    # the inline log viewer shows it and marks the search hits
    viewer = http.get(f"/artifacts/{d}", params={"q": "gpu hang"}, headers={**rd, **HTML})
    assert viewer.status_code == 200 and 'class=" hit"' in viewer.text and "1 matching line" in viewer.text


def _csrf(html: str) -> str:
    m = re.search(r'name="csrf" value="([^"]+)"', html)
    assert m, "the form carries an anti-forgery token"
    return m.group(1)


def test_browser_sign_in_session_cookie_and_sign_out(server: Server, deployment: Deployment) -> None:
    with httpx.Client(base_url=server.url, headers=HTML, timeout=30) as b:
        form = b.get("/signin", params={"next": "/subjects/campaign/x"})
        assert form.status_code == 200 and 'type="password"' in form.text
        forged = b.post("/signin", data={"token": deployment.tokens["reader"]})  # no anti-forgery token
        assert forged.status_code == 403 and "ledger_session" not in b.cookies
        # each form rendering carries a fresh nonce (cookie) and its token (field)
        wrong = b.post("/signin", data={"token": "elt_wrong", "csrf": _csrf(forged.text)})
        assert wrong.status_code == 401 and "Not signed in" in wrong.text
        assert "ledger_session" not in b.cookies
        csrf = _csrf(b.get("/signin").text)
        ok = b.post(
            "/signin", data={"token": deployment.tokens["reader"], "csrf": csrf, "next": "//evil.example/"}
        )
        assert ok.status_code == 303 and ok.headers["location"] == "/", "no open redirect"
        cookie = ok.headers["set-cookie"].lower()
        assert "ledger_session=" in cookie and "httponly" in cookie and "samesite=strict" in cookie
        home = b.get("/")
        assert home.status_code == 200 and "signed in as <strong>test-reader</strong>" in home.text
        assert home.headers["cache-control"] == "private, no-cache"
        assert "script-src" not in home.headers["content-security-policy"]  # default-src 'none': no scripts
        # the session reads the API too, but never writes
        assert b.get("/v1/entries", params={"limit": 1}).status_code == 200
        env = deployment.sign("note", _campaign(), {"text": "from a browser"})
        size = deployment.ledger.size()
        assert b.post("/v1/entries", json=env).status_code == 403
        assert deployment.ledger.size() == size
        # sign-out needs the page's anti-forgery token
        assert b.post("/signout", data={}).status_code == 403
        assert b.post("/signout", data={"csrf": "0" * 64}).status_code == 403
        out = b.post("/signout", data={"csrf": _csrf(home.text)})
        assert out.status_code == 303 and out.headers["location"] == "/signin"
        assert "ledger_session" not in b.cookies
        assert b.get("/").status_code == 303
        # a session whose token is revoked ends: the next page sends the browser to sign in, cookie cleared
        token, _ = deployment.ledger.create_token(f"browser-{secrets.token_hex(3)}", "reader")
        signed = b.post("/signin", data={"token": token, "csrf": _csrf(b.get("/signin").text)})
        assert signed.status_code == 303 and b.get("/").status_code == 200
        deployment.ledger.revoke_token(token_name(deployment, token))
        gone = b.get("/")
        assert gone.status_code == 303 and gone.headers["location"].startswith("/signin")
        assert "ledger_session" not in b.cookies


def token_name(dep: Deployment, token: str) -> str:
    return dep.ledger.verify_token(token).name


def _wait_for(log: Path, needle: str) -> str:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        text = log.read_text()
        if needle in text:
            return text
        time.sleep(0.1)
    raise AssertionError(f"{needle!r} not in the server log:\n{log.read_text()[-3000:]}")


def test_request_logs_name_request_token_status_latency_and_startup_names_home(
    server: Server, deployment: Deployment, tmp_path: Path
) -> None:
    r = httpx.get(server.url + "/v1/entries", params={"limit": 1}, headers=deployment.headers("reader"))
    rid = r.headers["x-request-id"]
    text = _wait_for(server.log, f"request_id={rid}")
    line = next(ln for ln in text.splitlines() if f"request_id={rid}" in ln)
    for part in ("method=GET", "path=/v1/entries", "status=200", "token=test-reader", "latency_ms="):
        assert part in line, (part, line)
    start = next(ln for ln in text.splitlines() if ln.startswith("ledger serve: "))
    assert f"home {deployment.home}" in start and "reads token required" in start
    assert "database " in start and ("sqlite" in start or "postgresql" in start)
    # --log-format json: one JSON object per line
    srv = start_server(deployment.home, "--log-format", "json", "--public-reads")
    try:
        got = httpx.get(srv.url + "/v1/entries", params={"limit": 1}, headers={"X-Request-ID": "json-rid-1"})
        assert got.status_code == 200
        _wait_for(srv.log, "json-rid-1")
        records = [json.loads(ln) for ln in srv.log.read_text().splitlines() if ln.startswith("{")]
        rec = next(x for x in records if x.get("request_id") == "json-rid-1")
        assert rec["status"] == 200 and rec["token"] == "anonymous" and rec["latency_ms"] >= 0
        assert rec["path"] == "/v1/entries" and rec["method"] == "GET"
        first = next(x for x in records if x.get("message") == "ledger serve starting")
        assert first["reads"] == "public" and first["home"] == str(deployment.home)
    finally:
        srv.stop()


# --- Swagger UI and ReDoc offline ---

# what would make a browser fetch from outside the app: an element's src, a CSS url() or @import (links a
# reader may follow, href on <a>, are not fetched)
_FETCHED = re.compile(
    rb"""src\s*[:=]\s*["'](?:https?:)?//|url\(\s*["']?(?:https?:)?//|@import\s+["']?(?:https?:)?//"""
)


def test_docs_and_redoc_load_nothing_from_outside_the_app(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from ledger.api.app import REDOC_CDN_LOGO, create_app
    from ledger.api.settings import ApiSettings
    from ledger.service import Ledger

    ledger = Ledger.init(tmp_path / "home")
    client = TestClient(create_app(ApiSettings(home=str(tmp_path / "home")), ledger=ledger))
    for page in ("/docs", "/redoc"):
        r = client.get(page)
        assert r.status_code == 200
        html = r.text
        assert "http://" not in html and "https://" not in html, page  # no external URL at all
        assets = re.findall(r"""(?:src|href)=["']([^"']+)["']""", html)
        assert any(a.endswith(".js") for a in assets), page
        for asset in assets:
            assert asset.startswith("/static/docs/"), (page, asset)  # served by the app itself
            got = client.get(asset)
            assert got.status_code == 200, asset
            if asset.endswith((".js", ".css")):
                hits = _FETCHED.findall(got.content)
                assert not hits, (asset, hits[:3])
        if page == "/docs":
            assert '"validatorUrl": null' in html  # no badge fetched from validator.swagger.io
    redoc_js = client.get("/static/docs/redoc.standalone.js").content
    assert REDOC_CDN_LOGO not in redoc_js and b"cdn.redoc.ly" not in redoc_js
    ledger.close()


def test_dependencies_that_only_read_app_state_run_on_the_event_loop() -> None:
    """FastAPI runs a plain-function dependency in a worker thread: one thread hop per dependency per
    request. The ones that only read ``app.state`` are coroutines; a dependency that does I/O (token
    checks) stays a function, off the loop."""
    import inspect

    from ledger.api import auth, deps

    for dep in (deps.served, deps._ledger, deps._settings, deps._metrics):
        assert inspect.iscoroutinefunction(dep), dep.__name__
    for blocking in (auth.read_access, auth.write_access, auth.admin_access):
        assert not inspect.iscoroutinefunction(blocking), blocking.__name__
