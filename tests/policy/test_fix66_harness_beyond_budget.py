"""Fix 66 f1 (audit 54): harness results measured while a launch beyond the attempt budget ran were credited.

Attempt 1 is ready and passes the controls; attempts 2 and 3 fail at start-up; attempt 4 (beyond the budget
of 3) is ready, and the semantic and benchmark runs are collected while it runs. A completion probe of
attempt 4 was rejected ``beyond-attempt-budget``, but the harness results of the same run were credited and
the campaign was QUALIFIED. The ``beyond-attempt-budget`` [[rules]] named engine.launch and health.probe only,
though ``_derive`` gives every gate.result its ``derived.attempt`` and ``derived.attempt_logged``.

The fix is a second ``beyond-attempt-budget`` table for gate.result (the harness gates, as ``before-launch``
and ``after-launch-end`` read them): either the attempt it claims (collected_at) or the one the log took it
in beyond the budget withholds credit (as bindings-mismatch reads a harness result's attempt); a failed or
faulted run still counts against the engine ([acceptance.against]).

Until the lead applies the table to policies/backend-qualification.toml (/tmp/fix66/other.md), these tests
judge against a copy of the shipped policies with ``RULE`` inserted where the shipped file lacks it
(``_policies``); once it ships, the copy is the shipped policy itself.
"""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path
from typing import Any

from ledger.entries import parse_time
from ledger.policy.fixtures import _Builder
from ledger.policy.loader import load_policy
from ledger.policy.verdict import evaluate
from ledger.service import Ledger
from tests.policy.conftest import FIXTURES, POLICY_DIR

SHARED = FIXTURES / "_shared"
SUBJECT = {"campaign": "vllm-embed", "backend": "vllm", "model": "Qwen3-Embedding-8B", "host": "gpu-box-1"}

# the table proposed for policies/backend-qualification.toml, after the gate.result `before-launch` rule
RULE = """[[rules]]
# the same budget for a harness result (benchmark, semantic) measured while a launch beyond the budget ran:
# its engine is that launch's, so it is not credited either — by the attempt in progress when it says it
# was collected (e.derived.attempt) or when the log took it (e.derived.attempt_logged): either one beyond
# the budget withholds credit (as bindings-mismatch reads a harness result's attempt). A failed run, or one
# an engine fault stopped ([acceptance.against]), still counts against the engine
name = "beyond-attempt-budget"
kinds = ["gate.result"]
withholds = "credit"
when = "e.payload.gate in params.reviewed_gates && (e.derived.attempt > params.attempt_budget || e.derived.attempt_logged > params.attempt_budget)"
detail = "the {e[payload][gate]} run ran during launch attempt {e[derived][attempt]} (collected {e[collected_at]}; attempt {e[derived][attempt_logged]} when the log took it), beyond the attempt budget of {params[attempt_budget]}: reported, not credited (attempts are counted in log order, not taken from the entry)"

"""  # noqa: E501 (the TOML as proposed, verbatim)
ANCHOR = (
    "[[rules]]\n# and one recorded after the launch it is attributed to recorded its end: what it measured"
)
SHIPPED = 'name = "beyond-attempt-budget"\nkinds = ["gate.result"]'


def _policies(tmp_path: Path, budget: int | None = None) -> Path:
    """A copy of the shipped policies with ``RULE`` in backend-qualification (unless it ships it already),
    the attempt budget set to ``budget`` where given."""
    dest = tmp_path / "policies"
    dest.mkdir()
    for p in POLICY_DIR.glob("*.toml"):
        text = p.read_text()
        if p.name == "backend-qualification.toml":
            if SHIPPED not in text:
                assert text.count(ANCHOR) == 1, "the gate.result after-launch-end rule moved: update ANCHOR"
                text = text.replace(ANCHOR, RULE + ANCHOR)
            if budget is not None:
                old = "attempt_budget = 3 "
                assert text.count(old) == 1
                text = text.replace(old, f"attempt_budget = {budget} ")
        (dest / p.name).write_text(text)
    return dest


def _entries() -> list[dict[str, Any]]:
    e = tomllib.loads((SHARED / "ready-campaign.toml").read_text())["entries"]
    e += tomllib.loads((SHARED / "semantic-benchmark.toml").read_text())["entries"]
    return copy.deepcopy(e)


def _by(entries: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(x for x in entries if x.get("name") == name)


def _failed_start(
    entries: list[dict[str, Any]], name: str, at: str, started: str, attempt: int
) -> dict[str, Any]:
    """A launch of the campaign's job that died before readiness (ended at ``at``)."""
    launch = copy.deepcopy(_by(entries, "launch"))
    launch.update(name=name, at=at)
    launch["payload"].update(
        attempt=attempt,
        started_at=started,
        ended_at=at,
        ready=False,
        exit_code=1,
        failure_signature="engine-died-before-readiness",
    )
    launch["payload"].pop("time_to_ready_s", None)
    launch["payload"].pop("ready_endpoint", None)
    launch["artifacts"] = [{"name": "stderr.log", "text": "ERROR: cannot load\n"}]
    return launch


def _fourth_attempt(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Attempt 1 ready (ends 10:02:30), 2 and 3 fail at start-up (10:03, 10:04), attempt 4 ready from
    10:05 to 10:46 — the semantic (10:10) and benchmark (10:30) runs are collected while it runs."""
    first = _by(entries, "launch")
    # (its details keep where it served, details.base_url: the launches here all serve there)
    first["payload"].update(
        ended_at="2026-09-10T10:02:30Z", details={**first["payload"]["details"], "stop_reason": "finished"}
    )
    first["at"] = "2026-09-10T10:02:31Z"
    entries.append(_failed_start(entries, "fail2", "2026-09-10T10:03:30Z", "2026-09-10T10:03:00Z", 2))
    entries.append(_failed_start(entries, "fail3", "2026-09-10T10:04:30Z", "2026-09-10T10:04:00Z", 3))
    fourth = copy.deepcopy(first)
    fourth["name"] = "launch4"
    fourth["payload"].update(attempt=4, started_at="2026-09-10T10:05:00Z", ended_at="2026-09-10T10:46:00Z")
    fourth["at"] = "2026-09-10T10:46:01Z"
    entries.append(fourth)
    return entries


def _verdict(tmp_path: Path, entries: list[dict[str, Any]], policies: Path) -> dict[str, Any]:
    start = "2026-09-10T09:00:00Z"
    spec = {
        "start": start,
        "keys": {"collector": ["collector"], "reviewer": ["reviewer"], "operator": ["operator"]},
        "defaults": {"subject": dict(SUBJECT)},
        "entries": entries,
    }
    led = Ledger.init(tmp_path / "home", genesis_at=parse_time(start))
    try:
        b = _Builder(led, spec, policies)
        b.enrol_keys()
        b.add_all(entries)
        out = evaluate(led, dict(SUBJECT), load_policy("backend-qualification", policies))
        names = {e.entry_id: n for n, e in b.names.items()}
    finally:
        led.close()
    out["_rejected"] = {names.get(r["entry"], r["entry"]): r for r in out["rejected"]}
    out["_used"] = {names.get(i, i) for i in out["used"]}
    return out


def test_harness_results_measured_beyond_the_attempt_budget_are_not_credited(tmp_path: Path) -> None:
    """The regression: the semantic and benchmark runs of attempt 4 were credited (QUALIFIED) while a probe
    of the same attempt was not. Now neither is: the gates have no credited harness result — INCONCLUSIVE."""
    v = _verdict(tmp_path, _fourth_attempt(_entries()), _policies(tmp_path))
    rej = v["_rejected"]
    for name in ("semantic", "benchmark"):
        assert rej[name]["rule"] == "beyond-attempt-budget", rej.get(name)
        assert "attempt 4" in rej[name]["detail"] and "budget of 3" in rej[name]["detail"]
        assert not rej[name].get("counts_against")  # a passed run shows nothing against the engine
    assert rej["launch4"]["rule"] == "beyond-attempt-budget"
    assert not {"semantic", "benchmark"} & v["_used"]
    assert v["verdict"] == "INCONCLUSIVE"


def test_harness_result_collected_within_the_budget_but_logged_beyond_it_is_not_credited(
    tmp_path: Path,
) -> None:
    """The neighbour: a semantic run that claims a time in attempt 3 (collected 10:04:10, attempt 3 started
    10:04 and ended 10:04:30) but that the log took while attempt 4 ran (10:10): which engine it measured
    cannot be told — either attempt beyond the budget withholds credit (as bindings-mismatch reads it)."""
    es = _fourth_attempt(_entries())
    sem = _by(es, "semantic")
    sem["at"], sem["logged_at"] = "2026-09-10T10:04:10Z", "2026-09-10T10:10:00Z"
    v = _verdict(tmp_path, es, _policies(tmp_path))
    assert v["_rejected"]["semantic"]["rule"] == "beyond-attempt-budget"
    assert "attempt 3 (collected" in v["_rejected"]["semantic"]["detail"]
    assert "attempt 4 when the log took it" in v["_rejected"]["semantic"]["detail"]
    assert v["verdict"] == "INCONCLUSIVE"


def test_failed_harness_run_beyond_the_attempt_budget_still_counts_against_the_engine(tmp_path: Path) -> None:
    """The neighbour: the rule withholds credit only — a semantic run of attempt 4 that failed (or that an
    engine fault stopped) is still evidence against the engine (the budget does not hide a failure)."""
    es = _fourth_attempt(_entries())
    sem = _by(es, "semantic")
    sem["payload"].update(status="failed")
    sem["payload"]["counts"].update(passed=2, failed=10)
    sem["payload"]["figures"].update(score=2 / 12)
    v = _verdict(tmp_path, es, _policies(tmp_path))
    r = v["_rejected"]["semantic"]
    assert r["rule"] == "beyond-attempt-budget" and r.get("counts_against") is True
    assert v["verdict"] != "QUALIFIED"


def test_harness_results_within_the_attempt_budget_stay_credited(tmp_path: Path) -> None:
    """The neighbour: with a budget of 4 the same runs are within it and credited — the rule reads the
    budget, not the attempt number alone (and the campaign qualifies)."""
    v = _verdict(tmp_path, _fourth_attempt(_entries()), _policies(tmp_path, budget=4))
    assert "semantic" not in v["_rejected"] and "benchmark" not in v["_rejected"]
    assert {"semantic", "benchmark"} <= v["_used"]
    assert v["verdict"] == "QUALIFIED", v["gates"]


def test_harness_results_of_the_first_attempt_are_untouched_by_the_budget_rule(tmp_path: Path) -> None:
    """The neighbour: the shared campaign (one launch, harness runs during it) qualifies as before."""
    v = _verdict(tmp_path, _entries(), _policies(tmp_path))
    assert v["verdict"] == "QUALIFIED", v["gates"]
