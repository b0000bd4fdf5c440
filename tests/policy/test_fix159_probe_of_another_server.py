"""Fix 159 (issue 11, fail-open): a health probe of another server was credited to the campaign.

A standalone probe (``ledger collect probe URL -c CAMPAIGN``, or one entered by hand) against ANOTHER server
— another port, another host — taken while the campaign's engine ran was credited to that engine's launch by
its time alone: the policy never compared the URL the probe asked with where the launch served. Fix 153 did
that for harness results (``harness-other-endpoint``); now the registered rule ``probe-other-endpoint``
(``ledger.policy.rules.Rule``) credits a probe the log puts in a campaign attempt only where its ``endpoint``
is of the server the launch of that attempt served at (``details.base_url``), read by
``ledger.policy.names.endpoint_under``: the same scheme, host and port as ``endpoint_key`` reads them
(strictly: ``localhost`` is not ``127.0.0.1``), the base URL's path a whole-segment prefix of the probe's
(the probe's own path, ``/health``, ``/v1/models`` …, is stripped only so). None, a bare path, a mistyped
one, another server: not credited, the reason naming both; a failed probe still counts against the
engine. Probes of no attempt (before any launch; the routing gate's production probes) are left alone.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from collectors.probe import probe_completion, probe_health, probe_models
from ledger.errors import SchemaError
from ledger.policy.names import HARNESS_OTHER_ENDPOINT, endpoint_under
from ledger.policy.rules import CREDIT_ONLY, RULES, Rule
from tests.policy import test_fail_closed as fc

QUALIFIED = "QUALIFIED"
SERVED = "http://127.0.0.1:8000"  # where the shared fixtures' launch served (details.base_url)
PROBE = Rule.PROBE_OTHER_ENDPOINT
PATHS = {
    "health": "/health",
    "models": "/v1/models",
    "completion": "/v1/chat/completions",
    "structured": "/v1/chat/completions",
    "sequential": "/v1/chat/completions",
}


def _entries(name: str = "models", endpoint: Any = ...) -> list[dict[str, Any]]:
    es = fc.qualified_entries()
    if endpoint is not ...:
        fc.entry(es, name)["payload"]["endpoint"] = endpoint
    return es


def _rejection(v: dict[str, Any], name: str) -> dict[str, Any]:
    return next(r for r in v["rejected"] if v["_names"].get(r["entry"]) == name)


def _not_credited(v: dict[str, Any], name: str) -> dict[str, Any]:
    """``name`` is rejected by the probe rule and no gate uses it; where a gate needs it (every check but
    /health: api-readiness asks a ready launch and a /v1/models identity) the campaign does not qualify."""
    assert fc.rejected(v)[name] == PROBE, v["rejected"]
    ids = {i for i, n in v["_names"].items() if n == name}
    assert not any(ids & set(g.get("evidence", [])) for g in v["gates"]), v["gates"]
    if name != "health":
        assert v["verdict"] != QUALIFIED, v["gates"]
    return _rejection(v, name)


# --- the regression ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PATHS))
def test_probe_of_another_server_credited_to_the_campaign_is_not(tmp_path: Path, name: str) -> None:
    """Another server (another port, the same model id) answered the probe while the campaign's engine ran."""
    other = "http://127.0.0.1:37093" + PATHS[name]
    v = fc.verdict_of(tmp_path, _entries(name, other))
    r = _not_credited(v, name)
    assert other in r["detail"] and SERVED in r["detail"], r["detail"]
    assert "another server" in r["detail"] and "attempt 1" in r["detail"], r["detail"]
    assert r.get("counts_against") is not True  # it passed: nothing against the engine either


def test_the_models_probe_of_another_server_leaves_api_readiness_unjudged(tmp_path: Path) -> None:
    v = fc.verdict_of(tmp_path, _entries("models", "http://10.0.0.7:8000/v1/models"))
    assert fc.gates(v)["api-readiness"] == "missing", v["gates"]
    assert v["verdict"] == "INCONCLUSIVE"


def test_neighbour_the_shipped_probes_at_the_launchs_endpoint_are_credited(tmp_path: Path) -> None:
    es = fc.qualified_entries()
    assert fc.entry(es, "launch")["payload"]["details"]["base_url"] == SERVED
    for name, path in PATHS.items():
        assert fc.entry(es, name)["payload"]["endpoint"] == SERVED + path
    v = fc.verdict_of(tmp_path, es)
    assert v["verdict"] == QUALIFIED and PROBE not in fc.rejected(v).values(), v["rejected"]


@pytest.mark.parametrize(
    "spelled",
    ["http://127.0.0.1:8000/v1/models/", "HTTP://127.0.0.1:8000/v1/models", "http://127.0.0.1:8000"],
    ids=["trailing-slash", "capitals", "the-base-url-itself"],
)
def test_neighbour_the_same_server_spelled_otherwise_is_credited(tmp_path: Path, spelled: str) -> None:
    assert fc.verdict_of(tmp_path, _entries("models", spelled))["verdict"] == QUALIFIED


def test_neighbour_the_launch_base_url_spelled_with_a_slash_or_the_default_port(tmp_path: Path) -> None:
    es = fc.qualified_entries()
    fc.entry(es, "launch")["payload"]["details"]["base_url"] = "http://127.0.0.1:8000/"
    assert fc.verdict_of(tmp_path, es)["verdict"] == QUALIFIED
    es = fc.qualified_entries()
    fc.entry(es, "launch")["payload"]["details"]["base_url"] = "http://engine"
    for name, path in PATHS.items():
        fc.entry(es, name)["payload"]["endpoint"] = "http://engine:80" + path
    for gate in ("semantic", "benchmark"):
        fc.entry(es, gate)["payload"]["bounds"]["endpoint"] = "http://engine:80"
    assert fc.verdict_of(tmp_path, es)["verdict"] == QUALIFIED


# --- the field dropped, renamed, mistyped ---------------------------------------------------------------


def test_a_probe_with_its_endpoint_dropped_is_refused_at_ingest(tmp_path: Path) -> None:
    es = fc.qualified_entries()
    del fc.entry(es, "models")["payload"]["endpoint"]
    with pytest.raises(SchemaError, match="endpoint"):
        fc.verdict_of(tmp_path, es)


def test_a_probe_with_its_endpoint_renamed_is_refused_at_ingest(tmp_path: Path) -> None:
    es = fc.qualified_entries()
    p = fc.entry(es, "models")["payload"]
    p["url"] = p.pop("endpoint")
    with pytest.raises(SchemaError, match=r"endpoint|url"):
        fc.verdict_of(tmp_path, es)


@pytest.mark.parametrize("endpoint", [8000, ["http://127.0.0.1:8000/v1/models"], {"url": SERVED}, None])
def test_a_probe_with_a_non_text_endpoint_is_refused_at_ingest(tmp_path: Path, endpoint: Any) -> None:
    with pytest.raises(SchemaError, match="endpoint"):
        fc.verdict_of(tmp_path, _entries("models", endpoint))


@pytest.mark.parametrize(
    "endpoint",
    [
        "/v1/models",
        "127.0.0.1:8000/v1/models",
        "",
        "http://127.0.0.1:8000/v1/models?x=1",
        "ftp://127.0.0.1:8000",
    ],
    ids=["bare-path", "no-scheme", "blank", "query", "other-scheme"],
)
def test_a_probe_whose_endpoint_names_no_server_is_not_credited(tmp_path: Path, endpoint: str) -> None:
    r = _not_credited(fc.verdict_of(tmp_path, _entries("models", endpoint)), "models")
    assert "no http(s) URL" in r["detail"] and SERVED in r["detail"], r["detail"]
    assert "which server it asked cannot be told" in r["detail"]


# --- another port, host, scheme, path -------------------------------------------------------------------


@pytest.mark.parametrize(
    "endpoint",
    [
        "http://127.0.0.1:8001/v1/models",  # another port
        "http://127.0.0.1:80/v1/models",  # another port, one the base URL's port begins with
        "http://10.0.0.7:8000/v1/models",  # the same port, another host
        "http://localhost:8000/v1/models",  # loopback spelled otherwise: the record cannot tell
        "http://0.0.0.0:8000/v1/models",
        "https://127.0.0.1:8000/v1/models",  # another scheme
    ],
)
def test_a_probe_of_another_server_is_not_credited(tmp_path: Path, endpoint: str) -> None:
    r = _not_credited(fc.verdict_of(tmp_path, _entries("models", endpoint)), "models")
    assert endpoint in r["detail"] and SERVED in r["detail"], r["detail"]


def test_the_same_port_on_another_host_spelling_says_how_endpoints_compare(tmp_path: Path) -> None:
    r = _not_credited(
        fc.verdict_of(tmp_path, _entries("models", "http://localhost:8000/v1/models")), "models"
    )
    assert "localhost" in r["detail"] and "probe at the launch's base URL" in r["detail"], r["detail"]


def _served_under_a_path(es: list[dict[str, Any]], base: str, probe_base: str) -> None:
    fc.entry(es, "launch")["payload"]["details"]["base_url"] = base
    for name, path in PATHS.items():
        fc.entry(es, name)["payload"]["endpoint"] = probe_base + path
    for gate in ("semantic", "benchmark"):
        fc.entry(es, gate)["payload"]["bounds"]["endpoint"] = base


def test_a_launch_served_under_a_path_credits_probes_under_that_path(tmp_path: Path) -> None:
    es = fc.qualified_entries()
    _served_under_a_path(es, SERVED + "/proxy", SERVED + "/proxy")
    assert fc.verdict_of(tmp_path, es)["verdict"] == QUALIFIED


@pytest.mark.parametrize("probe_base", [SERVED, SERVED + "/prox", SERVED + "/proxyx"])
def test_a_probe_outside_the_launchs_path_is_not_credited(tmp_path: Path, probe_base: str) -> None:
    """The base URL's path must be a whole-segment prefix of the probe's: ``/proxyx`` is not under
    ``/proxy``, nor is the server's root."""
    es = fc.qualified_entries()
    _served_under_a_path(es, SERVED + "/proxy", probe_base)
    _not_credited(fc.verdict_of(tmp_path, es), "models")


# --- the launch's endpoint: read from the log -----------------------------------------------------------


@pytest.mark.parametrize(
    "base_url", [None, 8000, "not a url", "/"], ids=["dropped", "number", "no-url", "path"]
)
def test_a_launch_that_records_no_endpoint_credits_no_probe(tmp_path: Path, base_url: Any) -> None:
    es = fc.qualified_entries()
    details = fc.entry(es, "launch")["payload"]["details"]
    if base_url is None:
        del details["base_url"]
    else:
        details["base_url"] = base_url
    v = fc.verdict_of(tmp_path, es)
    r = _not_credited(v, "models")
    assert "details.base_url" in r["detail"] and "cannot be shown to have asked it" in r["detail"], r
    assert fc.gates(v)["api-readiness"] == "missing", v["gates"]


def test_a_launch_with_its_base_url_renamed_credits_no_probe(tmp_path: Path) -> None:
    es = fc.qualified_entries()
    details = fc.entry(es, "launch")["payload"]["details"]
    details["base-url"] = details.pop("base_url")
    _not_credited(fc.verdict_of(tmp_path, es), "health")


def _second_launch(es: list[dict[str, Any]], base_url: str) -> None:
    """A second launch of the campaign (attempt 2 by the log), started at 10:01:30 at ``base_url``."""
    first = fc.entry(es, "launch")
    second = {
        **first,
        "name": "launch-2",
        "at": "2026-09-10T10:01:40Z",
        "payload": {
            **first["payload"],
            "attempt": 1,  # its own claim: the log says 2
            "started_at": "2026-09-10T10:01:30Z",
            "details": {"base_url": base_url},
        },
    }
    es.insert(es.index(first) + 1, second)


def test_the_attempt_is_the_logs_not_the_probes_claim(tmp_path: Path) -> None:
    """The structured probe claims 10:01:20, inside attempt 1, but the log took it while attempt 2 ran (at
    another port): it must be of both launches' servers — attempt 2's says it is not (reordered: its log
    time after the second launch, its claim before)."""
    es = fc.qualified_entries()
    _second_launch(es, "http://127.0.0.1:8001")
    structured = fc.entry(es, "structured")
    assert structured["at"] == "2026-09-10T10:01:20Z"  # its claim: attempt 1
    structured["logged_at"] = "2026-09-10T10:01:50Z"  # the log's: attempt 2
    v = fc.verdict_of(tmp_path, es)
    r = _not_credited(v, "structured")
    assert "attempt 2" in r["detail"] and "http://127.0.0.1:8001" in r["detail"], r["detail"]
    # … a probe claimed and logged in attempt 1 at attempt 1's server stays credited
    assert "completion" not in fc.rejected(v), v["rejected"]


# --- a failure still counts; what the rule leaves alone -------------------------------------------------


def test_a_failed_probe_of_another_server_still_counts_against_the_engine(tmp_path: Path) -> None:
    es = _entries("completion", "http://127.0.0.1:9999/v1/chat/completions")
    fc.entry(es, "completion")["payload"].update(
        ok=False, http_status=500, text=None, error="Internal Server Error"
    )
    v = fc.verdict_of(tmp_path, es)
    assert fc.counted_against(v).get("completion") == PROBE, v["rejected"]
    assert v["verdict"].startswith("NOT QUALIFIED"), v["gates"]


def test_a_probe_before_any_launch_stays_before_launchs(tmp_path: Path) -> None:
    """A probe of no attempt is not judged by the endpoint rule: ``before-launch`` says so first."""
    es = _entries("health", "http://127.0.0.1:9999/health")
    health = fc.entry(es, "health")
    es.remove(health)
    health["at"] = "2026-09-10T10:00:15Z"  # before the launch's started_at (10:00:20)
    es.insert(es.index(fc.entry(es, "launch")), health)
    assert fc.rejected(fc.verdict_of(tmp_path, es))["health"] == "before-launch"


def test_a_probe_the_policy_withholds_first_keeps_that_rules_name(tmp_path: Path) -> None:
    """after-launch-end decides first: the endpoint rule adds no reason."""
    es = _entries("sequential", "http://127.0.0.1:9999/v1/chat/completions")
    fc.entry(es, "launch")["payload"]["ended_at"] = "2026-09-10T10:01:30Z"
    assert fc.rejected(fc.verdict_of(tmp_path, es))["sequential"] == "after-launch-end"


# --- one rule, one copy ---------------------------------------------------------------------------------


def test_both_endpoint_rules_are_registered_and_only_withhold_credit() -> None:
    order = list(Rule)
    assert HARNESS_OTHER_ENDPOINT is Rule.HARNESS_OTHER_ENDPOINT
    assert {Rule.HARNESS_OTHER_ENDPOINT, Rule.PROBE_OTHER_ENDPOINT} <= CREDIT_ONLY
    at = order.index(Rule.BINDINGS_MISMATCH)
    assert order[at + 1 : at + 4] == [
        Rule.HARNESS_OTHER_ENDPOINT,
        Rule.PROBE_OTHER_ENDPOINT,
        Rule.REVIEW_FAIL,
    ]
    assert RULES["harness-other-endpoint"] and RULES["probe-other-endpoint"]


# --- what the collector records -------------------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("slash", ["", "/"])
def test_the_collectors_own_probes_are_of_the_base_url_they_were_given(slash: str) -> None:
    """``ledger collect run`` and ``ledger collect probe`` probe the launch's base URL: what each records
    as its endpoint (answered or not) is of that server."""
    base = f"http://127.0.0.1:{_closed_port()}"
    for probe in (
        probe_health(base + slash, timeout=2),
        probe_models(base + slash, timeout=2),
        probe_completion(base + slash, timeout=2),
    ):
        assert endpoint_under(probe["endpoint"], base), probe["endpoint"]
        assert not endpoint_under(probe["endpoint"], base.replace("127.0.0.1", "localhost"))


@pytest.mark.parametrize(
    ("url", "base", "under"),
    [
        ("http://127.0.0.1:8000/health+/is_sleeping", "http://127.0.0.1:8000", True),
        ("http://127.0.0.1:8000/health", "http://127.0.0.1:8000/", True),
        ("http://127.0.0.1:8000/health", "http://127.0.0.1:80", False),
        ("http://127.0.0.1:80/health", "http://127.0.0.1", True),
        ("https://127.0.0.1/health", "http://127.0.0.1:443", False),
        ("http://[::1]:8000/v1/models", "http://[::1]:8000", True),
        ("/health", "http://127.0.0.1:8000", False),
        ("http://127.0.0.1:8000/health", None, False),
        (None, "http://127.0.0.1:8000", False),
    ],
)
def test_endpoint_under_reads_the_server_and_the_base_path(url: Any, base: Any, under: bool) -> None:
    assert endpoint_under(url, base) is under
