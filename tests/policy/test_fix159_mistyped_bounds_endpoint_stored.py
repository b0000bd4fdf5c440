"""Fix 159 (issue 11): a mistyped ``bounds.endpoint`` was stored.

Fix 153 made the policy credit a harness result (semantic, benchmark) only where the endpoint it records
(``bounds.endpoint``, the base URL the harness was given, without a trailing ``/``) is where the launch of its
attempt served; but ``ledger.entries.HarnessBounds`` did not type the field, so a number, a list or an object
was stored and then read as "no endpoint". It is typed strictly now, as the other bounds fields: a text or
null; anything else is refused at ingest, the error naming ``bounds.endpoint``. Its form is the policy's to
read (``endpoint_key``): a text that is no http(s) base URL is stored and never credited — refusing it would
lose the record of a failed run, which still counts against the engine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ledger.entries import HarnessBounds, validate_payload
from ledger.errors import SchemaError
from ledger.policy.rules import Rule
from tests.policy import test_fail_closed as fc

SERVED = "http://127.0.0.1:8000"


def _result(endpoint: Any) -> dict[str, Any]:
    return {"gate": "semantic", "status": "passed", "bounds": {"endpoint": endpoint}}


@pytest.mark.parametrize(
    "endpoint",
    [8000, 80.0, True, ["http://127.0.0.1:8000"], {"url": SERVED}, b"http://127.0.0.1:8000"],
    ids=["int", "float", "bool", "list", "object", "bytes"],
)
def test_a_mistyped_bounds_endpoint_is_refused_naming_the_field(endpoint: Any) -> None:
    with pytest.raises(SchemaError, match=r"bounds\.endpoint"):
        validate_payload("gate.result", 1, _result(endpoint))


@pytest.mark.parametrize("gate", ["semantic", "benchmark"])
@pytest.mark.parametrize(
    "endpoint", [8000, ["http://127.0.0.1:8000"], {"url": SERVED}], ids=["int", "list", "obj"]
)
def test_a_mistyped_bounds_endpoint_is_not_stored(tmp_path: Path, gate: str, endpoint: Any) -> None:
    """Through the ledger's own ingest (a fixture's entries are appended one by one)."""
    es = fc.qualified_entries()
    fc.entry(es, gate)["payload"]["bounds"]["endpoint"] = endpoint
    with pytest.raises(SchemaError, match=r"bounds\.endpoint"):
        fc.verdict_of(tmp_path, es)


@pytest.mark.parametrize("endpoint", [SERVED, None, "", "127.0.0.1:8000", "http://127.0.0.1:8000?x=1"])
def test_a_text_or_null_is_stored(endpoint: Any) -> None:
    validate_payload("gate.result", 1, _result(endpoint))
    assert HarnessBounds.model_validate({"endpoint": endpoint}).endpoint == endpoint


def test_the_field_dropped_is_stored(tmp_path: Path) -> None:
    validate_payload("gate.result", 1, {"gate": "semantic", "status": "passed", "bounds": {}})


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        ("drop", "records no endpoint"),
        ("null", "records no endpoint"),
        ("rename", "records no endpoint"),
        ("blank", "no http(s) base URL"),
        ("no-scheme", "no http(s) base URL"),
    ],
)
def test_a_stored_endpoint_that_names_no_server_is_not_credited(
    tmp_path: Path, change: str, detail: str
) -> None:
    es = fc.qualified_entries()
    bounds = fc.entry(es, "semantic")["payload"]["bounds"]
    if change in ("drop", "rename"):
        was = bounds.pop("endpoint")
        if change == "rename":
            bounds["end_point"] = was  # another field: stored as written, never read as the endpoint
    else:
        bounds["endpoint"] = {"null": None, "blank": "", "no-scheme": "127.0.0.1:8000"}[change]
    v = fc.verdict_of(tmp_path, es)
    assert fc.rejected(v)["semantic"] == Rule.HARNESS_OTHER_ENDPOINT, v["rejected"]
    r = next(r for r in v["rejected"] if v["_names"].get(r["entry"]) == "semantic")
    assert detail in r["detail"] and SERVED in r["detail"], r["detail"]
    assert v["verdict"] != "QUALIFIED"


def test_a_failed_run_with_a_malformed_endpoint_is_stored_and_counts_against_the_engine(
    tmp_path: Path,
) -> None:
    """Why the form is not refused at ingest: the failed run would be lost with it."""
    es = fc.qualified_entries()
    p = fc.entry(es, "semantic")["payload"]
    p["bounds"]["endpoint"] = "not a url"
    p.update(status="failed", figures={"score": 0.5}, reason="score 0.5 below the threshold 1")
    p["counts"].update(passed=6, failed=6)
    v = fc.verdict_of(tmp_path, es)
    assert fc.counted_against(v).get("semantic") == Rule.HARNESS_OTHER_ENDPOINT, v["rejected"]
    assert v["verdict"] == "NOT QUALIFIED — SEMANTIC QUALITY", v["gates"]
