"""Fix 153 (audit 101 f1, issue 11, fail-open): a harness result measured on another server was credited.

During ``ledger collect run`` a standalone ``ledger collect semantic URL -c CAMPAIGN`` against ANOTHER server
serving the same model id was credited to the campaign's launched engine (QUALIFIED, routing allowed): a
harness result recorded no endpoint, and the policy linked it to a launch by time and served model ids only.

Now both harnesses record the endpoint they measured (``bounds.endpoint``, the base URL they were given) and
rule ``harness-other-endpoint`` credits a semantic or benchmark result only where that endpoint is the one
the launch of its attempt served at (``details.base_url``, the collector's record of where it started and
probed its engine) — the attempt derived from the log (by the result's claimed time and by when the log took
it), never the result's own claim. Compared strictly (``ledger.policy.names.endpoint_key``): a result that
records no endpoint, a mistyped one, another port or another host spelling (``localhost`` for
``127.0.0.1``) is not credited, the reason naming both endpoints; a failed run still counts against the
engine. The shared fixtures carry the endpoint, so the normal path still qualifies.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ledger.entries import HarnessBounds
from ledger.errors import SchemaError
from ledger.policy.names import HARNESS_OTHER_ENDPOINT, endpoint_key
from tests.policy import test_fail_closed as fc

QUALIFIED = "QUALIFIED"
SERVED = "http://127.0.0.1:8000"  # where the shared fixtures' launch served (details.base_url)


def _entries(gate: str = "semantic", endpoint: Any = ..., drop: bool = False) -> list[dict[str, Any]]:
    es = fc.qualified_entries()
    bounds = fc.entry(es, gate)["payload"]["bounds"]
    if drop:
        del bounds["endpoint"]
    elif endpoint is not ...:
        bounds["endpoint"] = endpoint
    return es


def _rejection(v: dict[str, Any], name: str) -> dict[str, Any]:
    return next(r for r in v["rejected"] if v["_names"].get(r["entry"]) == name)


def _not_credited(v: dict[str, Any], gate: str) -> dict[str, Any]:
    assert v["verdict"] != QUALIFIED, v["gates"]
    assert fc.rejected(v)[gate] == HARNESS_OTHER_ENDPOINT, v["rejected"]
    assert fc.gates(v)[gate] == "missing", v["gates"]
    return _rejection(v, gate)


# --- the regression ------------------------------------------------------------------------------------


@pytest.mark.parametrize("gate", ["semantic", "benchmark"])
def test_harness_result_measured_on_another_server_is_not_credited(tmp_path: Path, gate: str) -> None:
    """audit 101 f1: another server (another port, the same model id) answered the standalone run."""
    v = fc.verdict_of(tmp_path, _entries(gate, "http://127.0.0.1:37093"))
    r = _not_credited(v, gate)
    assert "http://127.0.0.1:37093" in r["detail"] and SERVED in r["detail"], r["detail"]
    assert "another server" in r["detail"] and "attempt 1" in r["detail"]
    assert v["verdict"] == "INCONCLUSIVE"


def test_neighbour_the_run_at_the_launchs_endpoint_is_credited(tmp_path: Path) -> None:
    es = fc.qualified_entries()
    assert fc.entry(es, "semantic")["payload"]["bounds"]["endpoint"] == SERVED
    assert fc.entry(es, "launch")["payload"]["details"]["base_url"] == SERVED
    assert fc.verdict_of(tmp_path, es)["verdict"] == QUALIFIED


@pytest.mark.parametrize("spelled", ["http://127.0.0.1:8000/", "HTTP://127.0.0.1:8000"])
def test_neighbour_the_same_endpoint_spelled_with_a_slash_or_capitals_is_credited(
    tmp_path: Path, spelled: str
) -> None:
    assert fc.verdict_of(tmp_path, _entries("semantic", spelled))["verdict"] == QUALIFIED


# --- the field dropped, renamed, mistyped ---------------------------------------------------------------


@pytest.mark.parametrize("gate", ["semantic", "benchmark"])
def test_harness_result_recording_no_endpoint_is_not_credited(tmp_path: Path, gate: str) -> None:
    r = _not_credited(fc.verdict_of(tmp_path, _entries(gate, drop=True)), gate)
    assert "records no endpoint" in r["detail"] and SERVED in r["detail"], r["detail"]


def test_harness_result_recording_a_null_endpoint_is_not_credited(tmp_path: Path) -> None:
    r = _not_credited(fc.verdict_of(tmp_path, _entries("semantic", None)), "semantic")
    assert "records no endpoint" in r["detail"]


def test_harness_result_with_its_endpoint_renamed_is_not_credited(tmp_path: Path) -> None:
    es = _entries("semantic", drop=True)
    fc.entry(es, "semantic")["payload"]["bounds"]["end_point"] = SERVED
    r = _not_credited(fc.verdict_of(tmp_path, es), "semantic")
    assert "records no endpoint" in r["detail"]


@pytest.mark.parametrize(
    "endpoint",
    [8000, ["http://127.0.0.1:8000"], {"url": SERVED}, "127.0.0.1:8000", "", "http://127.0.0.1:8000?x=1"],
    ids=["number", "list", "object", "no-scheme", "blank", "query"],
)
def test_harness_result_with_a_mistyped_endpoint_is_not_credited(tmp_path: Path, endpoint: Any) -> None:
    es = _entries("semantic", endpoint)
    if not isinstance(endpoint, str) and "endpoint" in HarnessBounds.model_fields:
        # typed at ingest where ``HarnessBounds`` names the field: refused there, never credited
        with pytest.raises(SchemaError, match=r"bounds"):
            fc.verdict_of(tmp_path, es)
        return
    r = _not_credited(fc.verdict_of(tmp_path, es), "semantic")
    assert "no http(s) base URL" in r["detail"] and SERVED in r["detail"], r["detail"]


# --- another port, the same port on another host, loopback spellings ------------------------------------


@pytest.mark.parametrize(
    "endpoint",
    [
        "http://127.0.0.1:8001",  # another port
        "http://10.0.0.7:8000",  # the same port, another host
        "http://localhost:8000",  # loopback spelled otherwise: the record cannot tell it is the same
        "http://0.0.0.0:8000",
        "https://127.0.0.1:8000",  # another scheme
        "http://127.0.0.1:8000/proxy",  # another path
    ],
)
def test_harness_result_of_another_endpoint_is_not_credited(tmp_path: Path, endpoint: str) -> None:
    r = _not_credited(fc.verdict_of(tmp_path, _entries("semantic", endpoint)), "semantic")
    assert endpoint in r["detail"] and SERVED in r["detail"], r["detail"]


def test_the_same_port_on_another_host_spelling_says_how_endpoints_compare(tmp_path: Path) -> None:
    r = _not_credited(fc.verdict_of(tmp_path, _entries("semantic", "http://localhost:8000")), "semantic")
    assert "localhost" in r["detail"] and "run the harness at the launch's base URL" in r["detail"]


# --- the launch's endpoint: read from the log -----------------------------------------------------------


@pytest.mark.parametrize("base_url", [None, 8000, "not a url"], ids=["dropped", "number", "no-url"])
def test_a_launch_that_records_no_endpoint_credits_no_harness_result(tmp_path: Path, base_url: Any) -> None:
    es = fc.qualified_entries()
    details = fc.entry(es, "launch")["payload"]["details"]
    if base_url is None:
        del details["base_url"]
    else:
        details["base_url"] = base_url
    v = fc.verdict_of(tmp_path, es)
    # its probes are not credited either (probe-other-endpoint, fix 159): the gates after api-readiness are
    # not authorized, not missing
    assert fc.rejected(v)["semantic"] == HARNESS_OTHER_ENDPOINT and v["verdict"] != QUALIFIED, v["rejected"]
    r = _rejection(v, "semantic")
    assert "details.base_url" in r["detail"] and "cannot be shown to have measured it" in r["detail"]


def _second_launch(es: list[dict[str, Any]], base_url: str) -> None:
    """A second launch of the campaign (attempt 2, by the log) started at 10:05, at ``base_url``: the
    harness results (10:10, 10:30) ran during it."""
    first = fc.entry(es, "launch")
    second = {
        **first,
        "name": "launch-2",
        "at": "2026-09-10T10:31:00Z",
        "payload": {
            **first["payload"],
            "attempt": 1,  # its own claim: the log says 2
            "started_at": "2026-09-10T10:05:00Z",
            "details": {"base_url": base_url},
        },
    }
    es.insert(es.index(first) + 1, second)


def test_the_attempt_is_the_logs_not_the_results_claim(tmp_path: Path) -> None:
    """Two launches on two ports: the harness results ran during attempt 2 (by the log), so they must have
    measured its endpoint — the first launch's endpoint, which they record, is another server's now."""
    es = fc.qualified_entries()
    _second_launch(es, "http://127.0.0.1:8001")
    v = fc.verdict_of(tmp_path, es)
    r = _rejection(v, "semantic")
    assert r["rule"] == HARNESS_OTHER_ENDPOINT and "attempt 2" in r["detail"], r
    assert "http://127.0.0.1:8001" in r["detail"]
    # … and at attempt 2's endpoint they are credited
    for gate in ("semantic", "benchmark"):
        fc.entry(es, gate)["payload"]["bounds"]["endpoint"] = "http://127.0.0.1:8001"
    v = fc.verdict_of(tmp_path, es)
    assert HARNESS_OTHER_ENDPOINT not in fc.rejected(v).values(), v["rejected"]
    assert fc.gates(v)["semantic"] == "passed" and fc.gates(v)["benchmark"] == "passed", v["gates"]


# --- a standalone run while the job runs ----------------------------------------------------------------


def _standalone(es: list[dict[str, Any]]) -> None:
    """The semantic result as ``ledger collect semantic URL -c CAMPAIGN`` records it: no job ref."""
    del fc.entry(es, "semantic")["refs"]


def test_a_standalone_run_against_the_jobs_own_engine_endpoint_is_credited(tmp_path: Path) -> None:
    es = fc.qualified_entries()
    _standalone(es)
    assert fc.verdict_of(tmp_path, es)["verdict"] == QUALIFIED


def test_a_standalone_run_against_another_server_during_the_job_is_not_credited(tmp_path: Path) -> None:
    es = _entries("semantic", "http://127.0.0.1:9999")
    _standalone(es)
    _not_credited(fc.verdict_of(tmp_path, es), "semantic")


# --- a failure still counts against the engine ----------------------------------------------------------


def test_a_failed_run_of_another_endpoint_still_counts_against_the_engine(tmp_path: Path) -> None:
    es = _entries("semantic", "http://127.0.0.1:9999")
    p = fc.entry(es, "semantic")["payload"]
    p.update(status="failed", figures={"score": 0.5}, reason="score 0.5 below the threshold 1")
    p["counts"].update(passed=6, failed=6)
    v = fc.verdict_of(tmp_path, es)
    assert fc.counted_against(v).get("semantic") == HARNESS_OTHER_ENDPOINT, v["rejected"]
    assert v["verdict"] == "NOT QUALIFIED — SEMANTIC QUALITY", v["gates"]


def test_a_run_the_policy_withholds_first_keeps_that_rules_name(tmp_path: Path) -> None:
    """The policy's [[rules]] decide first (here harness-other-model): the endpoint rule adds no reason."""
    es = _entries("semantic", "http://127.0.0.1:9999")
    fc.entry(es, "semantic")["payload"]["bounds"]["bindings"] = {"served_models": "other-model"}
    assert fc.rejected(fc.verdict_of(tmp_path, es))["semantic"] == "harness-other-model"


# --- one reading of an endpoint -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "key"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("http://127.0.0.1:8000/", "http://127.0.0.1:8000"),
        ("HTTP://Engine:80/", "http://engine:80"),
        ("http://engine", "http://engine:80"),
        ("https://engine/", "https://engine:443"),
        ("http://[::1]:8000", "http://[::1]:8000"),
        ("http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000/v1"),
        ("http://localhost:8000", "http://localhost:8000"),
        ("http://0.0.0.0:8000", "http://0.0.0.0:8000"),
    ],
)
def test_endpoint_key_reads_one_spelling(url: str, key: str) -> None:
    assert endpoint_key(url) == key


@pytest.mark.parametrize(
    "url",
    [
        None,
        8000,
        "",
        " http://h:1",
        "127.0.0.1:8000",
        "ftp://h:21",
        "http://:80",
        "http://h:",
        "http://h:0",
        "http://h:99999",
        "http://u:p@h:1",
        "http://h:1?x=1",
        "http://h:1#f",
    ],
)
def test_endpoint_key_reads_no_endpoint_from_what_is_none(url: Any) -> None:
    assert endpoint_key(url) is None
