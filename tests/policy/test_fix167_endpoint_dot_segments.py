"""Fix 167 (audit 106 f3, issue 11, fail-open): a probe whose path left the base path by ``..`` was credited.

A launch served behind a reverse proxy at ``http://127.0.0.1:8000/engine-a`` (``details.base_url``); its
probes recorded ``http://127.0.0.1:8000/engine-a/../engine-b/v1/models`` — what ``ledger collect probe
http://127.0.0.1:8000/engine-a/../engine-b`` records, while the HTTP client really asks
``/engine-b/v1/models``, another server. ``endpoint_under`` compared the path as written (``/engine-a/`` a
prefix of it) and credited them: QUALIFIED, where the same probes spelled ``/engine-b/…`` were refused
(``probe-other-endpoint``).

Now ``ledger.policy.names.endpoint_key`` — the one reading of harness results' ``bounds.endpoint``, probes'
``endpoint`` and launches' ``details.base_url`` — reads a URL whose path has a ``.`` or ``..`` segment
(literal or percent-encoded, ``%2e``, ``%2E``, mixed, twice-encoded, ``..;x``), an encoded slash (``%2f``) or
a backslash as no endpoint: servers and proxies differ on decoding and removing them, so it is refused, never
normalised. Such a probe or harness result is never credited (a failed one still counts against the engine);
a launch recording such a base URL credits nothing. ``ledger collect probe`` refuses such a URL up front
(``collectors.probe``: nothing asked, nothing recorded). A segment that merely holds dots (``..foo``,
``a..b``, ``...``, ``.well-known``) is a name like any other. The host is read as ``ledger.entries.host_key``
reads host names (one copy): a trailing dot names the same host in a launch and in a probe.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import collectors.probe as probe_module
from collectors.probe import probe_completion, probe_health, probe_models, probe_sequential, probe_structured
from ledger.entries import host_key
from ledger.errors import InputError
from ledger.policy.names import endpoint_key, endpoint_problem, endpoint_under, endpoint_under_but_for_host
from ledger.policy.rules import Rule
from tests.policy import test_fail_closed as fc

QUALIFIED = "QUALIFIED"
PROBE = Rule.PROBE_OTHER_ENDPOINT
HARNESS = Rule.HARNESS_OTHER_ENDPOINT
ROOT = "http://127.0.0.1:8000"
BASE = ROOT + "/engine-a"  # the launch, served behind a path (a reverse proxy)
PATHS = {
    "health": "/health",
    "models": "/v1/models",
    "completion": "/v1/chat/completions",
    "structured": "/v1/chat/completions",
    "sequential": "/v1/chat/completions",
}
# a base path left (or not named at all) through a dot segment or an encoded separator, however spelled
LEAVING = {
    "dot-dot": "/engine-a/../engine-b",
    "dot": "/engine-a/./../engine-b",
    "single-dot": "/engine-a/.",
    "encoded-dot-dot": "/engine-a/%2e%2e/engine-b",
    "encoded-upper-mixed": "/engine-a/%2E./engine-b",
    "encoded-mixed-case": "/engine-a/.%2E/engine-b",
    "twice-encoded": "/engine-a/%252e%252e/engine-b",
    "encoded-slash": "/engine-a%2f..%2fengine-b",
    "encoded-slash-upper": "/engine-a/x%2F..",
    "trailing-dot-dot": "/engine-a/engine-b/..",
    "trailing-dot-dot-slash": "/engine-a/engine-b/../",
    "dot-dot-with-parameters": "/engine-a/..;/engine-b",
    "backslash": "/engine-a\\..\\engine-b",
    "encoded-backslash": "/engine-a/%5c..%5cengine-b",
}


def _at(es: list[dict[str, Any]], base: str, probe_base: str, harness: str | None = None) -> None:
    """The launch served at ``base``; every probe asked ``probe_base`` + its check's path; both harnesses
    measured ``harness`` (default: ``base``)."""
    fc.entry(es, "launch")["payload"]["details"]["base_url"] = base
    for name, path in PATHS.items():
        fc.entry(es, name)["payload"]["endpoint"] = probe_base + path
    for gate in ("semantic", "benchmark"):
        fc.entry(es, gate)["payload"]["bounds"]["endpoint"] = base if harness is None else harness


def _verdict(tmp_path: Path, base: str, probe_base: str, harness: str | None = None) -> dict[str, Any]:
    es = fc.qualified_entries()
    _at(es, base, probe_base, harness)
    return fc.verdict_of(tmp_path, es)


def _not_credited(v: dict[str, Any], rule: str, names: Any = PATHS) -> None:
    rejected = fc.rejected(v)
    for name in names:
        assert rejected.get(name) == rule, v["rejected"]
    assert v["verdict"] != QUALIFIED, v["gates"]


# --- the regression ------------------------------------------------------------------------------------


def test_fix167_probe_path_leaving_the_base_path_was_credited(tmp_path: Path) -> None:
    """audit 106 f3: probes recorded at ``/engine-a/../engine-b/…`` asked ``/engine-b/…``, another server."""
    v = _verdict(tmp_path, BASE, BASE + "/../engine-b")
    _not_credited(v, PROBE)
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    detail = next(r["detail"] for r in v["rejected"] if v["_names"].get(r["entry"]) == "models")
    assert "no http(s) URL" in detail and BASE in detail, detail


def test_neighbour_the_same_probes_spelled_at_the_other_server_are_refused_too(tmp_path: Path) -> None:
    _not_credited(_verdict(tmp_path, BASE, ROOT + "/engine-b"), PROBE)


def test_neighbour_probes_at_the_launchs_base_path_are_credited(tmp_path: Path) -> None:
    assert _verdict(tmp_path, BASE, BASE)["verdict"] == QUALIFIED


@pytest.mark.parametrize("path", list(LEAVING.values()), ids=list(LEAVING))
def test_a_probe_path_with_a_dot_segment_or_encoded_separator_is_not_credited(
    tmp_path: Path, path: str
) -> None:
    _not_credited(_verdict(tmp_path, BASE, ROOT + path), PROBE)


@pytest.mark.parametrize("path", list(LEAVING.values()), ids=list(LEAVING))
def test_such_a_path_is_no_endpoint_and_names_why(path: str) -> None:
    for url in (ROOT + path, ROOT + path + "/v1/models"):
        assert endpoint_key(url) is None, url
        assert endpoint_problem(url), url
        assert not endpoint_under(url, BASE) and not endpoint_under(url, ROOT)
        assert not endpoint_under_but_for_host(url, "http://localhost:8000")


@pytest.mark.parametrize("gate", ["semantic", "benchmark"])
@pytest.mark.parametrize(
    "path", ["/engine-a/..", "/engine-b/../engine-a", "/engine-a/%2e", "/x%2f../engine-a"]
)
def test_a_harness_result_measured_at_such_a_path_is_not_credited(
    tmp_path: Path, gate: str, path: str
) -> None:
    """``bounds.endpoint`` is read the same way: ``/engine-b/../engine-a`` is not ``/engine-a`` to it."""
    es = fc.qualified_entries()
    _at(es, BASE, BASE)
    fc.entry(es, gate)["payload"]["bounds"]["endpoint"] = ROOT + path
    v = fc.verdict_of(tmp_path, es)
    _not_credited(v, HARNESS, [gate])
    assert fc.gates(v)[gate] == "missing", v["gates"]


@pytest.mark.parametrize("base", [BASE + "/../engine-a", ROOT + "/engine-b/%2e%2e/engine-a", BASE + "/."])
def test_a_launch_recording_such_a_base_url_credits_nothing(tmp_path: Path, base: str) -> None:
    """Even where every entry repeats the launch's spelling: the place it served cannot be told."""
    v = _verdict(tmp_path, base, base)
    _not_credited(v, PROBE)
    assert fc.rejected(v)["semantic"] == HARNESS and fc.rejected(v)["benchmark"] == HARNESS, v["rejected"]


def test_a_failed_probe_at_such_a_path_still_counts_against_the_engine(tmp_path: Path) -> None:
    es = fc.qualified_entries()
    _at(es, BASE, BASE)
    fc.entry(es, "completion")["payload"].update(
        endpoint=BASE + "/%2E%2E/engine-b/v1/chat/completions",
        ok=False,
        http_status=500,
        text=None,
        error="Internal Server Error",
    )
    v = fc.verdict_of(tmp_path, es)
    assert fc.counted_against(v).get("completion") == PROBE, v["rejected"]
    assert v["verdict"].startswith("NOT QUALIFIED"), v["gates"]


# --- what is still a name: dots inside a segment ---------------------------------------------------------


@pytest.mark.parametrize("segment", ["..foo", "a..b", "...", ".well-known", "foo.", "v1.2", "%2e%2efoo"])
def test_a_segment_that_only_holds_dots_is_a_name(tmp_path: Path, segment: str) -> None:
    base = f"{ROOT}/{segment}"
    assert endpoint_key(base) == base and endpoint_problem(base) is None
    assert endpoint_under(base + "/v1/models", base)
    assert not endpoint_under(base + "/v1/models", ROOT + "/other")


def test_a_launch_under_a_dotted_name_still_qualifies(tmp_path: Path) -> None:
    base = ROOT + "/models/qwen..v2"
    assert _verdict(tmp_path, base, base)["verdict"] == QUALIFIED


# --- query and fragment: the rule unchanged --------------------------------------------------------------


@pytest.mark.parametrize(
    "url", [BASE + "?x=..", BASE + "#..", BASE + "?next=/engine-b", BASE + "/v1/models?%2e%2e", BASE + "?"]
)
def test_a_query_or_fragment_is_still_no_endpoint_whatever_it_holds(url: str) -> None:
    assert endpoint_key(url) is None
    assert endpoint_problem(url) == "a query or a fragment"


# --- the host: one reading (host_key) in launch and probe ------------------------------------------------


@pytest.mark.parametrize(
    ("launch", "probe"),
    [
        ("http://engine.:8000", "http://engine:8000"),
        ("http://engine:8000", "http://engine.:8000"),
        ("http://ENGINE.:8000/proxy", "http://engine:8000/proxy"),
        ("http://127.0.0.1.:8000", "http://127.0.0.1:8000"),
    ],
)
def test_a_trailing_dot_host_is_the_same_host_in_launch_and_probe(
    tmp_path: Path, launch: str, probe: str
) -> None:
    assert endpoint_key(launch) == endpoint_key(probe)
    assert endpoint_under(probe + "/v1/models", launch) and endpoint_under(launch + "/health", probe)
    assert _verdict(tmp_path, launch, probe, harness=probe)["verdict"] == QUALIFIED


@pytest.mark.parametrize("host", ["Engine.", "GPU-BOX-1", "gpu-box-1.", "127.0.0.1"])
def test_endpoint_hosts_read_as_host_key_reads_them(host: str) -> None:
    assert endpoint_key(f"http://{host}:8000") == f"http://{host_key(host)}:8000"


@pytest.mark.parametrize("url", ["http://.:8000", "http://..:8000/v1", "http://:8000"])
def test_a_host_of_dots_alone_is_no_host(url: str) -> None:
    assert endpoint_key(url) is None and endpoint_problem(url) == "no host"


def test_another_host_is_still_another_host_after_the_dot_is_dropped(tmp_path: Path) -> None:
    _not_credited(_verdict(tmp_path, "http://engine.:8000", "http://engine2.:8000"), PROBE)
    assert not endpoint_under("http://localhost.:8000/health", "http://127.0.0.1:8000")


# --- the hint: one reading in names.py -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "base", "hint"),
    [
        ("http://localhost:8000/health", "http://127.0.0.1:8000", True),
        ("http://localhost:8000/proxy/health", "http://127.0.0.1:8000/proxy", True),
        ("http://localhost:8000/proxyx/health", "http://127.0.0.1:8000/proxy", False),  # not under it
        ("http://localhost:8000/health", "http://127.0.0.1:8001", False),  # another port
        ("https://localhost:8000/health", "http://127.0.0.1:8000", False),  # another scheme
        ("http://127.0.0.1.:8000/health", "http://127.0.0.1:8000", False),  # the same host: no hint
        ("http://localhost:8000/proxy/../health", "http://127.0.0.1:8000/proxy", False),  # no endpoint
        (None, "http://127.0.0.1:8000", False),
    ],
)
def test_the_other_host_hint_reads_endpoints_as_endpoint_under(url: Any, base: str, hint: bool) -> None:
    assert endpoint_under_but_for_host(url, base) is hint


# --- the collector refuses such a URL up front ---------------------------------------------------------


def _no_client(*_a: Any, **_k: Any) -> Any:
    raise AssertionError("a refused base URL must not be asked")


@pytest.mark.parametrize(
    "base_url",
    [
        BASE + "/../engine-b",
        BASE + "/%2e%2e/engine-b",
        BASE + "/.",
        BASE + "%2Fx",
        "http://u:p@127.0.0.1:8000",
    ],
)
def test_the_probe_collector_refuses_such_a_base_url_up_front(
    monkeypatch: pytest.MonkeyPatch, base_url: str
) -> None:
    monkeypatch.setattr(probe_module, "http_client", _no_client)
    calls = [
        lambda: probe_health(base_url),
        lambda: probe_models(base_url),
        lambda: probe_completion(base_url),
        lambda: probe_structured(base_url, schema={"type": "object"}),
        lambda: probe_sequential(base_url, count=1),
    ]
    for call in calls:
        with pytest.raises(InputError, match="no base URL to probe") as e:
            call()
        assert base_url in str(e.value)


def test_ledger_collect_probe_refuses_a_dot_segment_url_and_records_nothing(cli: Any) -> None:
    assert cli("init").code == 0
    r = cli("collect", "probe", BASE + "/../engine-b", "-c", "c1", "--json")
    assert r.code == 2, (r.out, r.err)  # an input error
    assert "dot segment" in r.err and "no base URL to probe" in r.err, r.err
    listed = cli("log", "--kind", "health.probe", "--json")
    assert listed.code in (0, 1) and json.loads(listed.out)["items"] == [], (listed.out, listed.err)
