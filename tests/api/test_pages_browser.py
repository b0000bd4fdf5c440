"""The reviewer pages in a real browser: Playwright drives Debian's Chromium over a ledger made by real
campaigns (the fault-injection engine), signs in with a reader token, opens every page reachable from the
subjects page, checks what a reviewer must see, and keeps screenshots as test artifacts."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urldefrag, urlparse

import pytest

from tests.api.campaign_ledger import CampaignLedger, build
from tests.api.conftest import Server, start_server

CHROMIUM = "/usr/bin/chromium"
pytestmark = pytest.mark.slow


def _chromium() -> str:
    found = CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")
    if found:
        return found
    if os.environ.get("CI"):
        pytest.fail("chromium is not installed (apt-get install -y chromium)")
    pytest.skip("chromium is not installed")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, CampaignLedger]]:
    made = build(tmp_path_factory.mktemp("pages"))
    srv = start_server(made.home)  # reads need a token: the browser has to sign in
    yield srv, made
    srv.stop()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    d = tmp_path_factory.mktemp("screenshots")
    yield d
    keep = os.environ.get("LEDGER_SCREENSHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        for png in d.glob("*.png"):
            shutil.copy(png, Path(keep) / png.name)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=_chromium(), args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


def _signed_in(browser: Any, srv: Server, made: CampaignLedger, offline: bool = True) -> Any:
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    page = ctx.new_page()
    if offline:  # nothing but the ledger's own server: a CDN asset would fail the page
        page.route("**/*", lambda r: r.continue_() if r.request.url.startswith(srv.url) else r.abort())
    page.goto(srv.url + "/")
    assert urlparse(page.url).path == "/signin", "a browser without a session is sent to the sign-in form"
    page.fill("input[name=token]", made.reader_token)
    page.click("button[type=submit]")
    page.wait_for_load_state()
    assert urlparse(page.url).path == "/"
    assert "signed in as page-reader" in page.inner_text("header")
    cookie = next(c for c in ctx.cookies() if c["name"] == "ledger_session")
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
    return page


def _title(page: Any, srv: Server, path: str) -> str:
    page.goto(srv.url + path)
    return str(page.title())


def _shot(page: Any, shots: Path, name: str) -> Path:
    png = shots / f"{name}.png"
    page.screenshot(path=str(png), full_page=True)
    assert png.stat().st_size > 10_000, f"{name}: the screenshot is (nearly) blank"
    return png


def test_every_page_opens_and_shows_what_a_reviewer_needs(
    site: tuple[Server, CampaignLedger], browser: Any, shots: Path
) -> None:
    srv, made = site
    ids = made.ids
    page = _signed_in(browser, srv, made)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)

    # every page reachable from the subjects page (pages, not API downloads), each answering 200
    seen: set[str] = set()
    todo = ["/"]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        resp = page.goto(srv.url + path)
        assert resp is not None and resp.status == 200, (path, resp and resp.status)
        assert page.locator("script").count() == 0, f"{path} runs JavaScript"
        for href in page.eval_on_selector_all("a[href]", "els => els.map(e => e.getAttribute('href'))"):
            target = urldefrag(href)[0]
            if target.startswith("/") and not target.startswith(("/v1/", "/docs", "/redoc")):
                todo.append(target)
    kinds = {urlparse(p).path.split("/")[1] for p in seen if p != "/"}
    assert {"subjects", "entries", "artifacts", "hosts", "verdict", "verdicts"} <= kinds, sorted(kinds)
    assert len([p for p in seen if p.startswith("/entries/")]) >= 40
    assert not errors, errors

    # the verdict page: the word at the top, INCONCLUSIVE styled unlike NOT QUALIFIED, the 9-gate ladder
    page.goto(srv.url + "/verdict?subject=campaign%3Dhealthy")
    word = page.locator("#verdict-word")
    assert word.inner_text() == "INCONCLUSIVE" == ids["verdict-healthy-2-word"]
    inconclusive_bg = word.evaluate("e => getComputedStyle(e).backgroundColor")
    rows = page.locator("table.ladder tbody tr")
    assert rows.count() == 9
    assert "benchmark" in rows.nth(8).inner_text() and "missing" in rows.nth(8).inner_text()
    rejected = page.locator("text=rejected by reviewer: the benchmark host was shared")
    assert rejected.count() >= 1
    assert "backend-qualification" in page.inner_text("main") and "blake3:" in page.inner_text("main")
    _shot(page, shots, "verdict")

    page.goto(srv.url + "/verdict?subject=campaign%3Dgpu-hang")
    word = page.locator("#verdict-word")
    assert word.inner_text().startswith("NOT QUALIFIED")
    assert word.evaluate("e => getComputedStyle(e).backgroundColor") != inconclusive_bg
    assert page.locator("table.ladder tr.gate-failed").count() == 1
    _shot(page, shots, "verdict-not-qualified")

    # the diff of two recorded verdicts: what flipped, which evidence became rejected
    page.goto(f"{srv.url}/verdicts/diff?a={ids['verdict-healthy']}&b={ids['verdict-healthy-2']}")
    assert "verdict flipped" in page.inner_text("main")
    flipped = page.locator("tr.flipped")
    assert flipped.count() == 1 and "benchmark" in flipped.inner_text()
    assert ids["benchmark"][:10] in page.inner_text("main")
    _shot(page, shots, "diff")

    # the failed launch: exit, signature, time to ready, phases; its stderr inline, the failure line marked
    page.goto(f"{srv.url}/entries/{ids['launch']}")
    summary = page.inner_text("table.summary")
    for text in ("gpu-hang", "signal", "time to ready", "HW Exception"):
        assert text in summary, text
    assert "weights_loaded_s" in page.inner_text("main")
    _shot(page, shots, "launch")
    page.goto(f"{srv.url}/artifacts/{ids['log']}?q=Exception")
    failure = page.locator(".log div.failure")
    assert failure.count() >= 1 and "GPU Hang" in failure.first.inner_text()
    assert failure.first.evaluate("e => getComputedStyle(e).backgroundColor") != "rgba(0, 0, 0, 0)"
    assert page.locator(".log div.hit").count() >= 1
    _shot(page, shots, "log")

    # the benchmark: the per-level table and its charts; the timeline: notes and charts
    page.goto(f"{srv.url}/entries/{ids['benchmark']}")
    levels = page.locator("table.levels tbody tr")
    assert levels.count() == 3 and levels.nth(2).inner_text().startswith("c32")
    assert page.locator("svg.chart").count() == 2
    _shot(page, shots, "benchmark")
    page.goto(srv.url + "/subjects/campaign/healthy")
    titles = page.eval_on_selector_all("svg.chart title", "els => els.map(e => e.textContent)")
    for t in (
        "Time to ready per attempt",
        "Sequential request latency",
        "TTFT per concurrency level",
        "Verdicts over time",
    ):
        assert t in titles, titles
    main = page.inner_text("main")
    assert "exit 0" in main and "sequential · ok" in main and "gate benchmark: passed" in main
    _shot(page, shots, "timeline")

    # the model pin: every shard with size, SHA-256 and BLAKE3; a sequential probe: result and latencies
    pin = next(p for p in seen if p.startswith("/entries/") and "model.pin" in _title(page, srv, p))
    page.goto(srv.url + pin)
    shards = page.locator("table:has(th:text('BLAKE3')) tbody tr")
    assert shards.count() == 2
    row = shards.filter(has_text="model.safetensors").inner_text()
    assert "64.0 KiB" in row and "blake3:" in row and re.search(r"\b[0-9a-f]{64}\b", row)
    _shot(page, shots, "model-pin")
    probe = next(
        p
        for p in seen
        if p.startswith("/entries/")
        and "health.probe" in _title(page, srv, p)
        and "sequential" in page.inner_text("table.summary")
    )
    page.goto(srv.url + probe)
    assert "ok" in page.inner_text("table.summary")
    assert page.locator("svg.chart title", has_text="Sequential request latency").count() == 1

    # the host: OS, GPUs, the campaigns on it
    page.goto(srv.url + "/hosts/page-test-host")
    host = page.inner_text("main")
    assert "OS" in host and "gpu-hang" in host and "healthy" in host
    _shot(page, shots, "host")

    # a subject that does not exist is a 404 page, not an empty 200
    resp = page.goto(srv.url + "/subjects/campaign/no-such-campaign")
    assert resp is not None and resp.status == 404
    assert "entry-not-found" in page.inner_text("main")
    _shot(page, shots, "not-found")

    # sign-out (a POST carrying the anti-forgery token) ends the session
    page.goto(srv.url + "/")
    page.click("header button[type=submit]")
    page.wait_for_load_state()
    assert urlparse(page.url).path == "/signin"
    page.goto(srv.url + "/subjects/campaign/healthy")
    assert urlparse(page.url).path == "/signin"
    page.context.close()


def test_swagger_ui_and_redoc_work_offline(
    site: tuple[Server, CampaignLedger], browser: Any, shots: Path
) -> None:
    srv, made = site
    page = _signed_in(browser, srv, made, offline=True)
    failed: list[tuple[str, str]] = []
    page.on("requestfailed", lambda r: failed.append((r.resource_type, r.url)))
    page.goto(srv.url + "/docs")
    page.wait_for_selector(".swagger-ui .opblock", timeout=30_000)
    assert page.locator(".swagger-ui .opblock").count() >= 15
    _shot(page, shots, "swagger")
    page.goto(srv.url + "/redoc")
    page.wait_for_function("document.body.innerText.includes('Append one signed envelope')", timeout=30_000)
    assert "Something went wrong" not in page.inner_text("body")
    _shot(page, shots, "redoc")
    # scripts, styles and the OpenAPI document all come from the app; the one request that leaves it is
    # ReDoc's decorative "API docs by Redocly" logo (an <img> inside its bundle), which does not block it
    needed = [(t, u) for t, u in failed if t != "image"]
    assert not needed, f"requests that needed the network: {needed}"
    assert all(u.startswith("https://cdn.redoc.ly/") for _, u in failed), failed
    page.context.close()
