"""Fix 94 (audit 80 f1, f2): health probes were credited by the attempt they claim (collected_at).

f1: with a budget of 3, four launches in one job; launches 1-3 ready and stopped cleanly without probes;
launch 4 ran 10:07-10:08. Every probe was LOGGED while launch 4 ran but CLAIMED a collected_at inside
launch 1's run: the probe ``beyond-attempt-budget`` rule read only ``e.derived.attempt`` (the claimed time)
and the campaign qualified, while the same probes with their true times were not credited. Now a probe the
log took while a launch beyond the budget ran is not credited either (``e.derived.attempt_logged``, as the
gate.result table reads it); and a probe the log took after its attempt's launch entry recorded the run's
end (the collector records a launch after its probes) is ``after-launch-end`` whatever time it claims.

f2: launch 2 (within the budget) binds an engine_version off the job's manifest and is rejected
``bindings-mismatch``, but the probes taken while it ran were credited. ``filter_evidence`` now withholds
credit from a probe whose claimed or logged attempt is an off-manifest one, as it does for a gate.result.

Either way a failed probe still counts against the engine (the rules withhold credit only).
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
PROBES = ("health", "models", "completion", "structured", "sequential")
PROBE_GATES = ("api-readiness", "ready-control", "structured-output", "sequential-requests")
DAY = "2026-09-10T"


def _policies(tmp_path: Path, budget: int | None = None) -> Path:
    """The shipped policies, the attempt budget set to ``budget`` where given."""
    if budget is None:
        return POLICY_DIR
    dest = tmp_path / "policies"
    dest.mkdir()
    for p in POLICY_DIR.glob("*.toml"):
        text = p.read_text()
        if p.name == "backend-qualification.toml":
            old = "attempt_budget = 3 "
            assert text.count(old) == 1
            text = text.replace(old, f"attempt_budget = {budget} ")
        (dest / p.name).write_text(text)
    return dest


def _shared() -> list[dict[str, Any]]:
    return copy.deepcopy(tomllib.loads((SHARED / "ready-campaign.toml").read_text())["entries"])


def _by(entries: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(x for x in entries if x.get("name") == name)


def _campaign(
    launches: list[tuple[str, str, str]],
    claimed: list[str],
    logged: list[str],
    off: int | None = None,
) -> list[dict[str, Any]]:
    """The shared ready campaign with its launch replaced by ``launches`` ((start, end) times of day, each
    ready and stopped cleanly by the collector, its entry logged a second after its end — as the collector
    records it, after its probes), the probes claiming ``claimed`` and logged at ``logged``; launch ``off``
    (1-based) binds engine_version 0.31.0, off the job's manifest (0.32.0)."""
    entries = _shared()
    template = _by(entries, "launch")
    entries.remove(template)
    for n, (start, end, logged_at) in enumerate(launches, 1):
        launch = copy.deepcopy(template)
        launch["name"] = f"launch{n}"
        launch["at"] = DAY + logged_at + "Z"
        launch["payload"].update(
            attempt=n,
            started_at=DAY + start + "Z",
            ended_at=DAY + end + "Z",
            exit_code=0,
            details={**template["payload"]["details"], "stop_reason": "finished"},  # (its base_url: fix 159)
        )
        if n == off:
            launch["payload"]["bindings"] = {**launch["payload"]["bindings"], "engine_version": "0.31.0"}
        entries.append(launch)
    for name, at, la in zip(PROBES, claimed, logged, strict=True):
        probe = _by(entries, name)
        probe["at"] = DAY + at + "Z"
        probe["logged_at"] = DAY + la + "Z"
    return entries


# f1: launch 1 from 10:00:20 to 10:02:00 (logged 10:02:01), 2, 3 ready and clean, 4 from 10:07 to 10:08
FOUR = [
    ("10:00:20", "10:02:00", "10:02:01"),
    ("10:03:00", "10:04:00", "10:04:01"),
    ("10:05:00", "10:06:00", "10:06:01"),
    ("10:07:00", "10:08:00", "10:08:01"),
]
IN_ONE = [f"10:00:5{i}" for i in range(5)]  # inside launch 1's run
IN_FOUR = [f"10:07:1{i}" for i in range(5)]  # while launch 4 ran
# f2: launch 1 on the manifest, launch 2 off it (10:03-10:04), launch 3 on it again (10:05-10:06)
THREE = FOUR[:3]
IN_TWO = [f"10:03:1{i}" for i in range(5)]
IN_THREE = [f"10:05:1{i}" for i in range(5)]


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
    out["_ids"] = {n: i for i, n in names.items()}
    out["_rejected"] = {names.get(r["entry"], r["entry"]): r for r in out["rejected"]}
    out["_used"] = {names.get(i, i) for i in out["used"]}
    out["_gates"] = {g["name"]: g["status"] for g in out["gates"]}
    return out


def _probes_credited(v: dict[str, Any]) -> None:
    assert not set(PROBES) & set(v["_rejected"]), {
        n: v["_rejected"][n] for n in PROBES if n in v["_rejected"]
    }
    assert set(PROBES) <= v["_used"]
    for gate in PROBE_GATES:
        assert v["_gates"][gate] == "passed", (gate, v["_gates"])


def _probes_withheld(v: dict[str, Any], rule: str) -> None:
    for name in PROBES:
        r = v["_rejected"][name]
        assert r["rule"] == rule, (name, r)
        assert not r.get("counts_against"), r  # a passing probe shows nothing against the engine
    assert not set(PROBES) & v["_used"]
    assert v["_gates"]["api-readiness"] != "passed"
    assert v["verdict"] != "QUALIFIED"


# --- f1: the attempt budget, by the attempt the log took the probe in ---


def test_probe_logged_beyond_the_attempt_budget_claiming_attempt_one_is_not_credited(tmp_path: Path) -> None:
    """The regression (audit 80 f1): probes logged while attempt 4 ran, claiming times inside attempt 1,
    were credited (QUALIFIED). Now they are beyond the budget by the attempt the log took them in."""
    v = _verdict(tmp_path, _campaign(FOUR, IN_ONE, IN_FOUR), POLICY_DIR)
    _probes_withheld(v, "beyond-attempt-budget")
    detail = v["_rejected"]["completion"]["detail"]
    assert "in launch attempt 1" in detail and "while launch attempt 4 ran" in detail, detail
    assert "launch attempt 4 is beyond the attempt budget of 3" in detail, detail


def test_probe_collected_and_logged_beyond_the_attempt_budget_is_not_credited(tmp_path: Path) -> None:
    """The honest twin: the same probes with their true times — beyond the budget by the claimed attempt
    (the first table, as before)."""
    v = _verdict(tmp_path, _campaign(FOUR, IN_FOUR, IN_FOUR), POLICY_DIR)
    _probes_withheld(v, "beyond-attempt-budget")
    assert "launch attempt 4 is beyond the attempt budget of 3" in v["_rejected"]["health"]["detail"]


def test_failed_probe_logged_beyond_the_attempt_budget_still_counts_against_the_engine(
    tmp_path: Path,
) -> None:
    """The neighbour: the budget withholds credit only — a 500 logged during attempt 4, whatever time it
    claims, is still evidence against the engine."""
    es = _campaign(FOUR, IN_ONE, IN_FOUR)
    _by(es, "completion")["payload"].update(ok=False, http_status=500, text="", error="HTTP 500")
    v = _verdict(tmp_path, es, POLICY_DIR)
    r = v["_rejected"]["completion"]
    assert r["rule"] == "beyond-attempt-budget" and r.get("counts_against") is True, r
    assert v["verdict"] != "QUALIFIED"


def test_probe_logged_within_a_larger_budget_is_credited(tmp_path: Path) -> None:
    """The neighbour: with a budget of 4 the honest probes of attempt 4 are within it and credited — the
    rule reads the budget, not the attempt number alone."""
    v = _verdict(tmp_path, _campaign(FOUR, IN_FOUR, IN_FOUR), _policies(tmp_path, budget=4))
    _probes_credited(v)


def test_probe_collected_and_logged_in_attempt_one_is_credited(tmp_path: Path) -> None:
    """The neighbour: probes collected and logged while launch 1 ran (before its entry) are credited, the
    later launches within or beyond the budget notwithstanding (the collector's own order)."""
    v = _verdict(tmp_path, _campaign(FOUR, IN_ONE, IN_ONE), POLICY_DIR)
    _probes_credited(v)
    assert v["_rejected"]["launch4"]["rule"] == "beyond-attempt-budget"


# --- f1: after-launch-end, by the log ---


def test_probe_logged_after_its_launch_recorded_the_end_is_not_credited(tmp_path: Path) -> None:
    """A probe claiming a time inside launch 1's run (attempt 1, within the budget, also by the log) but
    logged after launch 1's entry recorded the run's end (10:02:01): the log knew that engine was gone —
    ``after-launch-end``, as the same probe with its true time is."""
    logged = [f"10:02:3{i}" for i in range(5)]  # after launch 1's entry, before launch 2 started
    lie = _verdict(tmp_path / "lie", _campaign(FOUR[:2], IN_ONE, logged), POLICY_DIR)
    _probes_withheld(lie, "after-launch-end")
    assert "(logged 2026-09-10T10:02:3" in lie["_rejected"]["health"]["detail"]
    honest = _verdict(tmp_path / "honest", _campaign(FOUR[:2], logged, logged), POLICY_DIR)
    _probes_withheld(honest, "after-launch-end")


def test_failed_probe_logged_after_its_launch_recorded_the_end_still_counts(tmp_path: Path) -> None:
    """The neighbour: a failed probe so logged loses credit only — it still counts against the engine."""
    es = _campaign(FOUR[:2], IN_ONE, [f"10:02:3{i}" for i in range(5)])
    _by(es, "completion")["payload"].update(ok=False, http_status=500, text="", error="HTTP 500")
    v = _verdict(tmp_path, es, POLICY_DIR)
    r = v["_rejected"]["completion"]
    assert r["rule"] == "after-launch-end" and r.get("counts_against") is True, r


def test_probe_logged_after_a_launch_entry_that_records_no_end_is_credited(tmp_path: Path) -> None:
    """The neighbour: a launch entry logged before its probes that records no end (the shared campaign:
    logged at 10:01:00, no ended_at) says nothing of the run being over — its probes stay credited."""
    v = _verdict(tmp_path, _shared(), POLICY_DIR)
    _probes_credited(v)


# --- f2: probes of an off-manifest attempt ---


def test_probe_of_an_off_manifest_attempt_is_not_credited(tmp_path: Path) -> None:
    """The regression (audit 80 f2): probes collected and logged while launch 2 (engine_version 0.31.0,
    the job approves 0.32.0) ran were credited. Now they lose credit as bindings-mismatch naming launch 2."""
    v = _verdict(tmp_path, _campaign(THREE, IN_TWO, IN_TWO, off=2), POLICY_DIR)
    assert v["_rejected"]["launch2"]["rule"] == "bindings-mismatch"
    _probes_withheld(v, "bindings-mismatch")
    r = v["_rejected"]["structured"]
    assert r["by"] == v["_ids"]["launch2"] and "during attempt 2" in r["detail"], r
    assert "0.31.0" in r["detail"], r


def test_probe_logged_in_an_off_manifest_attempt_claiming_attempt_one_is_not_credited(tmp_path: Path) -> None:
    """The lying twin: the same probes claiming times inside launch 1 (on the manifest): the attempt the
    log took them in is off the manifest — not credited (as for a gate.result)."""
    v = _verdict(tmp_path, _campaign(THREE, IN_ONE, IN_TWO, off=2), POLICY_DIR)
    _probes_withheld(v, "bindings-mismatch")
    assert v["_rejected"]["sequential"]["by"] == v["_ids"]["launch2"]


def test_probe_claiming_no_attempt_logged_in_an_off_manifest_attempt_is_not_credited(tmp_path: Path) -> None:
    """The neighbour: a probe claiming a time before every launch (attempt 0 by its claim) that the log
    took during off-manifest launch 2 answered that engine as far as the log can tell: bindings-mismatch."""
    v = _verdict(tmp_path, _campaign(THREE, [f"09:59:0{i}" for i in range(5)], IN_TWO, off=2), POLICY_DIR)
    _probes_withheld(v, "bindings-mismatch")


def test_failed_probe_of_an_off_manifest_attempt_still_counts_against_the_engine(tmp_path: Path) -> None:
    """The neighbour: bindings-mismatch withholds credit only — a 500 from the off-manifest engine still
    counts against the engine."""
    es = _campaign(THREE, IN_TWO, IN_TWO, off=2)
    _by(es, "completion")["payload"].update(ok=False, http_status=500, text="", error="HTTP 500")
    v = _verdict(tmp_path, es, POLICY_DIR)
    r = v["_rejected"]["completion"]
    assert r["rule"] == "bindings-mismatch" and r.get("counts_against") is True, r
    assert v["verdict"] != "QUALIFIED"


def test_probe_of_an_on_manifest_attempt_after_an_off_manifest_one_is_credited(tmp_path: Path) -> None:
    """The neighbour: probes of launch 3 (back on the manifest) after off-manifest launch 2 are credited —
    the check reads the probe's own attempts, not whether any launch was off the manifest."""
    v = _verdict(tmp_path, _campaign(THREE, IN_THREE, IN_THREE, off=2), POLICY_DIR)
    assert v["_rejected"]["launch2"]["rule"] == "bindings-mismatch"
    _probes_credited(v)


def test_probe_of_an_on_manifest_attempt_before_an_off_manifest_one_is_credited(tmp_path: Path) -> None:
    """The neighbour: probes of launch 1 (on the manifest, logged before its entry) stay credited though a
    later launch is off the manifest."""
    v = _verdict(tmp_path, _campaign(THREE, IN_ONE, IN_ONE, off=2), POLICY_DIR)
    _probes_credited(v)


def test_probe_logged_after_a_launch_entry_logged_before_the_end_it_records_is_credited(
    tmp_path: Path,
) -> None:
    """The neighbour: a launch entry logged (10:01:00) before the end it records (10:02:30) did not tell the
    log the run was over when it was logged — probes logged after it inside the run stay credited."""
    es = _shared()
    launch = _by(es, "launch")
    launch["payload"].update(
        ended_at="2026-09-10T10:02:30Z",
        exit_code=0,
        details={**launch["payload"]["details"], "stop_reason": "finished"},  # (its base_url: fix 159)
    )
    v = _verdict(tmp_path, es, POLICY_DIR)
    _probes_credited(v)
