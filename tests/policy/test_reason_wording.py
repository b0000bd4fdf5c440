"""The reasons a failed gate gives name what the probe saw, not a consequence of it.

Found by running `ledger collect run` against failing stand-in engines: the verdict word was right, but the
reason misled the reviewer —
- a sequential run whose first request exceeded the latency bound said "1 succeeded";
- a completion answered 200 with a malformed body said "answered None", without the collector's
  "malformed chat completion";
- an engine that exited between its readiness and its /v1/models probe was named by the identity check
  alone ("did not serve the expected model"), without what the probe saw (connection refused)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.policy.test_fail_closed import entry, qualified_entries, verdict_of


def _gate(v: dict[str, Any], name: str) -> dict[str, Any]:
    return next(g for g in v["gates"] if g["name"] == name)


def test_a_sequential_run_over_its_latency_bound_is_not_said_to_have_succeeded(tmp_path: Path) -> None:
    es = qualified_entries()
    entry(es, "sequential")["payload"].update(
        ok=False, count=1, latencies_ms=[9000.0], error="request 1: 9000.0 ms > bound 5000.0 ms",
        details={"completed": 1, "requested": 20, "max_latency_ms": 5000.0},
    )  # fmt: skip
    v = verdict_of(tmp_path, es)
    g = _gate(v, "sequential-requests")
    assert g["status"] == "failed", v["gates"]
    assert "succeeded" not in g["reason"].split(":", 1)[1].replace("requests succeeded", ""), g["reason"]
    assert "1 of 20 answered (error: 'request 1: 9000.0 ms > bound 5000.0 ms')" in g["reason"], g["reason"]


def test_a_sequential_run_recording_no_requested_count_prints_a_question_mark(tmp_path: Path) -> None:
    """A field the detail names that the record lacks prints as `?`, never as a placeholder or a crash."""
    es = qualified_entries()
    entry(es, "sequential")["payload"].update(ok=False, count=0, latencies_ms=[], error="request 1: refused")
    g = _gate(verdict_of(tmp_path, es), "sequential-requests")
    assert g["status"] == "failed"
    assert "0 of ? answered (error: 'request 1: refused')" in g["reason"], g["reason"]


def test_a_malformed_200_completion_names_the_collectors_error(tmp_path: Path) -> None:
    es = qualified_entries()
    entry(es, "completion")["payload"].update(ok=False, text=None, error="malformed chat completion")
    v = verdict_of(tmp_path, es)
    assert v["verdict"] != "QUALIFIED"
    reasons = " | ".join(str(g.get("reason", "")) for g in v["gates"])
    assert "(ok = False, HTTP 200) answered None (error: 'malformed chat completion')" in reasons, reasons


def test_an_identity_probe_that_got_no_answer_says_what_it_saw(tmp_path: Path) -> None:
    es = qualified_entries()
    entry(es, "models")["payload"].update(
        ok=False, http_status=None, model_identity=None, details={},
        error="connection refused: the engine exited after readiness",
    )  # fmt: skip
    v = verdict_of(tmp_path, es)
    g = _gate(v, "api-readiness")
    assert g["status"] == "failed", v["gates"]
    assert g["reason"].startswith("/v1/models did not serve the expected model"), g["reason"]
    assert (
        "(ok = False, HTTP None): listed ?, error 'connection refused: the engine exited after readiness'"
        in (g["reason"])
    ), g["reason"]


def test_an_identity_probe_listing_another_model_names_the_list(tmp_path: Path) -> None:
    es = qualified_entries()
    entry(es, "models")["payload"].update(model_identity="other", details={"served": ["other"]})
    g = _gate(verdict_of(tmp_path, es), "api-readiness")
    assert g["status"] == "failed"
    assert "(ok = True, HTTP 200): listed ['other'], error None" in g["reason"], g["reason"]
