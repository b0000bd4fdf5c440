"""fix117 (audit 87 f2): a failing probe the log took after every pass, claiming a ``collected_at`` before an
earlier launch's recorded end, was dropped as a probe of "an engine that is gone" (its claimed time at or
before the end), so a restore was allowed — without that launch entry the same probes refused. The "gone"
rule withholds credit from passes only; a probe that shows a failure stays among the probes unless the log
itself took it before the entry recording the end, and only ends from entries still standing (trusted, not
superseded) drop one (``routing._before_end``'s ``by_claim``, the probe loop of ``check_routing_change``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ledger.entries import parse_time
from ledger.policy.fixtures import build_fixture_ledger
from ledger.policy.loader import load_policy
from ledger.policy.routing import check_routing_change
from ledger.service import Ledger
from tests.policy.conftest import POLICY_DIR

NOW = parse_time("2026-09-01T18:05:00Z")
HEAD = """description = "restore"
start = "2026-09-01T08:00:00Z"
[keys]
collector = ["collector"]
operator = ["operator"]
[defaults.subject]
backend = "llama.cpp"
model = "qwen/qwen3.8-27b"
host = "h1"
"""
# an earlier run of the subject, recorded over at 17:50 (its launch entry, logged then)
LAUNCH = """[[entries]]
name = "old-launch"
kind = "engine.launch"
key = "collector"
at = "2026-09-01T17:50:00Z"
payload = { engine = "llamacpp", command = ["llama-server", "-m", "/m.gguf", "--port", "8080"], attempt = 1, \
started_at = "2026-09-01T17:00:00Z", ended_at = "2026-09-01T17:50:00Z", ready = true, exit_code = 0 }
"""
HEALTH = '{ endpoint = "http://127.0.0.1:8080/health", check = "health", ok = true, http_status = 200 }'
MODELS = (
    '{ endpoint = "http://127.0.0.1:8080/v1/models", check = "models", ok = true, http_status = 200, '
    'model_identity = "qwen/qwen3.8-27b", details = { served = ["qwen/qwen3.8-27b"] } }'
)
READY = (
    '{ endpoint = "http://127.0.0.1:8080/v1/chat/completions", check = "completion", ok = true, '
    'http_status = 200, finish_reason = "stop", expected = "READY", text = "READY", max_tokens = 8 }'
)
DOWN = (
    '{ endpoint = "http://127.0.0.1:8080/health", check = "health", ok = false, http_status = 503, '
    'error = "Service Unavailable" }'
)
DEAD = (
    '{ endpoint = "http://127.0.0.1:8080/v1/chat/completions", check = "completion", ok = false, '
    'http_status = 500, error = "EngineDeadError", max_tokens = 8 }'
)


def _probe(name: str, payload: str, at: str, logged_at: str | None = None) -> str:
    logged = f'logged_at = "{logged_at}"\n' if logged_at else ""
    return (
        f'[[entries]]\nname = "{name}"\nkind = "health.probe"\nkey = "collector"\nat = "{at}"\n{logged}'
        f"payload = {payload}\n"
    )


PASSES = (
    _probe("health", HEALTH, "2026-09-01T18:00:00Z")
    + _probe("models", MODELS, "2026-09-01T18:00:05Z")
    + _probe("ready", READY, "2026-09-01T18:00:10Z")
)
# logged after every pass, claiming a time before the old run's end
LATE_FAILURES = _probe("down", DOWN, "2026-09-01T17:40:00Z", "2026-09-01T18:01:00Z") + _probe(
    "dead", DEAD, "2026-09-01T17:40:05Z", "2026-09-01T18:01:05Z"
)
SUPERSEDE_LAUNCH = """[[entries]]
kind = "supersession"
key = "operator"
at = "2026-09-01T18:02:00Z"
refs = { supersedes = "old-launch" }
payload = { reason = "the launch entry was recorded against the wrong host" }
"""


def _restore(tmp_path: Path, *parts: str) -> tuple[dict[str, Any], dict[str, str]]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    fx = tmp_path / "fx.toml"
    fx.write_text(HEAD + "".join(parts))
    ledger, _spec, b = build_fixture_ledger(fx, tmp_path / "home", POLICY_DIR, init=Ledger.init)
    r = check_routing_change(
        ledger,
        load_policy("routing-change"),
        {"backend": "llama.cpp", "model": "qwen/qwen3.8-27b", "host": "h1"},
        action="restore",
        now=NOW,
    )
    return r, {e.entry_id: n for n, e in b.names.items()}


def _probe_names(r: dict[str, Any], names: dict[str, str]) -> set[str]:
    return {names.get(str(p), str(p)) for p in r["probes"]}


def test_failure_logged_after_every_pass_claiming_a_time_before_an_earlier_runs_end_still_refuses(
    tmp_path: Path,
) -> None:
    """Regression (audit 87 f2): only their own claimed collected_at put the 503 and the 500 before the old
    launch's end; the log took them after it and after every pass."""
    r, names = _restore(tmp_path, LAUNCH, PASSES, LATE_FAILURES)
    assert r["allowed"] is False, r["reasons"]
    assert {"down", "dead"} <= _probe_names(r, names), r["probes"]
    assert any("503" in reason for reason in r["reasons"]), r["reasons"]


def test_control_without_the_earlier_launch_refuses_the_same_way(tmp_path: Path) -> None:
    r, _ = _restore(tmp_path, PASSES, LATE_FAILURES)
    assert r["allowed"] is False


def test_pass_claiming_a_time_before_the_end_is_not_credited(tmp_path: Path) -> None:
    """A claimed early time still takes a pass's credit away: passes logged after the end entry but
    claiming to be observed before it restore nothing."""
    early = (
        _probe("health", HEALTH, "2026-09-01T17:45:00Z", "2026-09-01T18:00:00Z")
        + _probe("models", MODELS, "2026-09-01T17:45:05Z", "2026-09-01T18:00:05Z")
        + _probe("ready", READY, "2026-09-01T17:45:10Z", "2026-09-01T18:00:10Z")
    )
    r, _ = _restore(tmp_path, LAUNCH, early)
    assert r["allowed"] is False
    assert r["probes"] == []
    assert any("not after engine launch" in row["detail"] for row in r["ignored"]), r["ignored"]


def test_failure_the_log_took_before_the_end_is_the_gone_engines(tmp_path: Path) -> None:
    """The log itself puts the failures before the entry recording the run over: they are that gone
    engine's, and fresh passes after it restore."""
    before = _probe("down", DOWN, "2026-09-01T17:45:00Z") + _probe("dead", DEAD, "2026-09-01T17:45:05Z")
    r, names = _restore(tmp_path, before, LAUNCH, PASSES)
    assert r["allowed"] is True, r["reasons"]
    assert not {"down", "dead"} & _probe_names(r, names)
    assert any("the log took it" in row["detail"] for row in r["ignored"]), r["ignored"]


def test_superseded_end_entry_drops_no_failure(tmp_path: Path) -> None:
    """An end recorded by an entry that no longer stands (superseded by another key, with its reason) drops
    no failure the log took before it: the failures stay the newest probes (with the end standing they are
    the gone engine's, and none is left)."""
    before = _probe("down", DOWN, "2026-09-01T17:45:00Z") + _probe("dead", DEAD, "2026-09-01T17:45:05Z")
    r, names = _restore(tmp_path, before, LAUNCH, SUPERSEDE_LAUNCH)
    assert r["allowed"] is False
    assert {"down", "dead"} <= _probe_names(r, names), r["probes"]
    standing, _ = _restore(tmp_path / "standing", before, LAUNCH)
    assert standing["allowed"] is False
    assert standing["probes"] == []


def test_superseded_end_entry_still_withholds_a_passes_credit(tmp_path: Path) -> None:
    """An end only ever takes a pass's credit away, whatever stands: passes the log took before the (now
    superseded) launch entry restore nothing."""
    early = PASSES.replace("18:00:", "17:48:")
    r, _ = _restore(tmp_path, early, LAUNCH, SUPERSEDE_LAUNCH)
    assert r["allowed"] is False


def test_honest_restore_after_the_end_is_allowed(tmp_path: Path) -> None:
    r, _ = _restore(tmp_path, LAUNCH, PASSES)
    assert r["allowed"] is True, r["reasons"]
