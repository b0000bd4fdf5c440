"""Audit 86 f2, f1, f5: the routing gate's restoration and its subject.

f2: ``check routing-change --action restore`` was allowed with no engine running, on the probes a finished
qualification job took of its own engine (its launch records the engine stopped, the job ended). A probe the
log took before a run of the subject was recorded over — or that claims to be observed before that end —
probed an engine that is gone since: it credits no restoration (and the failure it shows is that engine's).

f1: after a campaign whose probes asked for its ``served_name``, the restored production engine serving the
model under the subject's name was refused for an hour ("no fresh /v1/models answer served …", though the
newest did). The campaign's probes drop out (f2); a fresh probe naming another model still refuses, and the
reason names it.

f5: the route subject was matched by its spelling only: ``backend=llama.cpp`` or ``model=M-7`` found no
verdict recorded under ``llamacpp`` / ``m-7``, while the deployment's ``engine``/``model`` spelled so were
accepted."""

from __future__ import annotations

import copy
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import tests.policy.conftest as policy_conftest
from ledger.entries import format_time, parse_time
from ledger.policy.loader import load_policy
from ledger.policy.names import engine_aliases
from ledger.policy.routing import _names_match, check_routing_change
from tests.policy.conftest import POLICY_DIR
from tests.policy.test_fail_closed import SUBJECT as CAMPAIGN
from tests.policy.test_fail_closed import qualified_entries
from tests.test_routing_at_reference_time import ONE_GPU, _campaign_home

build = policy_conftest.build  # a ledger built from a policy fixture file

SEED000 = "routing-change/seed000-restoration.toml"
MODEL = "acme-tiny-q8.gguf"
HOST = "acme-box-7"
PROD = {"backend": "llamacpp", "model": MODEL, "host": HOST}
CAMP = {**PROD, "campaign": "acme-newver"}
HEALTH = {"endpoint": "http://127.0.0.1:8080/health", "check": "health", "ok": True, "http_status": 200}
MODELS = {"endpoint": "http://127.0.0.1:8080/v1/models", "check": "models", "ok": True, "http_status": 200,
          "model_identity": MODEL, "details": {"served": [MODEL]}}  # fmt: skip
READY = {"endpoint": "http://127.0.0.1:8080/v1/chat/completions", "check": "completion", "ok": True,
         "http_status": 200, "expected": "READY", "text": "READY", "max_tokens": 8,
         "model_identity": MODEL}  # fmt: skip
# the campaign's own engine serves the model as its served_name (acme-q8), and its probes ask for it
CAMP_MODELS = {**MODELS, "model_identity": "acme-q8", "details": {"served": ["acme-q8"]}}
CAMP_READY = {**READY, "model_identity": "acme-q8"}
START = parse_time("2026-09-01T18:10:00Z")  # after the fixture's own entries
NOW = parse_time("2026-09-01T18:30:00Z")
JOB = {"job_id": "j1", "started_at": "2026-09-01T18:10:00Z"}


def _launch(ended: bool = True) -> dict[str, Any]:
    return {"engine": "llamacpp", "command": ["llama-server"], "started_at": "2026-09-01T18:10:01Z",
            "ready": True, **({"ended_at": "2026-09-01T18:10:30Z"} if ended else {})}  # fmt: skip


def _log(
    b: Any, items: list[tuple[str, dict[str, str], dict[str, Any]]], *, claimed: str | None = None
) -> None:
    """Append each (kind, subject, payload) a second after the last entry (log order is item order); a
    probe claims ``claimed`` as its collected_at where given."""
    for kind, subject, payload in items:
        at = START + timedelta(seconds=b.ledger.size())
        st = b.ledger.make_statement(kind, subject, payload, collected_at=claimed or format_time(at))
        b.ledger.append([b.ledger.sign(st, "collector")], logged_at=at)


def _probes(
    subject: dict[str, str], *payloads: dict[str, Any]
) -> list[tuple[str, dict[str, str], dict[str, Any]]]:
    return [("health.probe", subject, p) for p in payloads]


def _restore(b: Any, subject: dict[str, str] | None = None) -> dict[str, Any]:
    return check_routing_change(
        b.ledger, load_policy("routing-change"), dict(subject or {"model": MODEL, "host": HOST}),
        action="restore", now=NOW,
    )  # fmt: skip


def _campaign_run(
    *, end: bool = True, state: str = "succeeded"
) -> list[tuple[str, dict[str, str], dict[str, Any]]]:
    """A qualification job of the model on the host: started, its engine probed (passing, under its
    served_name), its launch recorded when the engine stopped, and the job's terminal entry."""
    out = [("job", CAMP, {**JOB, "state": "running"}), *_probes(CAMP, HEALTH, CAMP_MODELS, CAMP_READY)]
    if end:
        out += [
            ("engine.launch", CAMP, _launch()),
            ("job", CAMP, {**JOB, "state": state, "ended_at": "2026-09-01T18:10:31Z"}),
        ]
    return out


def _dropped(r: dict[str, Any]) -> list[dict[str, Any]]:
    return [row for row in r["ignored"] if "shows nothing of the one serving now" in row["detail"]]


# --- f2 --------------------------------------------------------------------------------------------------


def test_restore_on_the_probes_of_a_finished_qualification_job_is_refused(build) -> None:
    """Regression (audit 86 f2): the job's probes of its own engine — since stopped, as its launch records
    and its job's end says — restored the model with no engine running."""
    b = build(SEED000)
    campaign = [("job", CAMP, {**JOB, "state": "running"}), *_probes(CAMP, HEALTH, MODELS, READY)]
    _log(b, [*campaign, ("engine.launch", CAMP, _launch()),
             ("job", CAMP, {**JOB, "state": "succeeded", "ended_at": "2026-09-01T18:10:31Z"})])  # fmt: skip
    r = _restore(b)
    assert r["allowed"] is False, r
    assert r["probes"] == []
    rows = _dropped(r)
    assert len(rows) == 3 and all(row["rule"] == "stale" for row in rows), r["ignored"]
    assert "before engine launch " in rows[0]["detail"] and "records its run over" in rows[0]["detail"]


def test_a_terminal_job_entry_alone_ends_the_run_its_probes_showed(build) -> None:
    """The neighbour: no launch recorded, the job's terminal entry (cancelled) ends its run all the same."""
    b = build(SEED000)
    _log(b, [("job", CAMP, {**JOB, "state": "running"}), *_probes(CAMP, HEALTH, MODELS, READY),
             ("job", CAMP, {**JOB, "state": "cancelled", "ended_at": "2026-09-01T18:10:31Z"})])  # fmt: skip
    r = _restore(b)
    assert r["allowed"] is False
    assert any("before job 'j1' (cancelled" in row["detail"] for row in _dropped(r)), r["ignored"]


def test_production_engine_probed_after_the_campaign_ended_is_restored(build) -> None:
    """The honest case: the production engine, probed after the campaign's run was recorded over."""
    b = build(SEED000)
    _log(b, [*_campaign_run(), *_probes(PROD, HEALTH, MODELS, READY)])
    r = _restore(b)
    assert r["allowed"] is True, r["reasons"]
    assert len(r["probes"]) == 3 and len(_dropped(r)) == 3


def test_a_production_probe_logged_during_the_campaigns_run_is_not_credited(build) -> None:
    """A probe the log took while the campaign's job ran (before its launch and end were recorded) does not
    restore: which engine answered it cannot be told, and that run is over now."""
    b = build(SEED000)
    run = _campaign_run()
    _log(b, [*run[:4], *_probes(PROD, HEALTH, MODELS, READY), *run[4:]])
    r = _restore(b)
    assert r["allowed"] is False
    assert len(_dropped(r)) == 6


def test_a_probe_logged_after_the_end_claiming_an_earlier_time_is_not_credited(build) -> None:
    """A probe spooled and pushed after the run ended, claiming it was observed during the run: the claim
    only ever takes credit away."""
    b = build(SEED000)
    _log(b, _campaign_run())
    _log(b, _probes(PROD, HEALTH, MODELS, READY), claimed="2026-09-01T18:10:05Z")
    r = _restore(b)
    assert r["allowed"] is False
    assert sum("observed 2026-09-01T18:10:05" in row["detail"] for row in _dropped(r)) == 3, r["ignored"]


def test_the_probes_of_a_job_still_running_are_not_dropped(build) -> None:
    """The neighbour: a run the log does not record over (its job running, no launch recorded) leaves its
    probes among the fresh ones, judged by the restoration checks as before."""
    b = build(SEED000)
    _log(b, [("job", CAMP, {**JOB, "state": "running"}), *_probes(CAMP, HEALTH, MODELS, READY)])
    r = _restore(b)
    assert _dropped(r) == [] and len(r["probes"]) == 3
    assert r["allowed"] is True, r["reasons"]


def test_a_failure_of_the_gone_engine_does_not_refuse_the_restored_one(build) -> None:
    """The campaign's engine failed before it stopped; the production engine probed after the end passes:
    the failure is the gone engine's (and one after the end still refuses)."""
    b = build(SEED000)
    dead = {**HEALTH, "ok": False, "http_status": 503, "error": "Service Unavailable"}
    run = _campaign_run()
    _log(b, [*run[:4], ("health.probe", CAMP, dead), *run[4:], *_probes(PROD, HEALTH, MODELS, READY)])
    assert _restore(b)["allowed"] is True
    _log(b, _probes(PROD, dead))
    assert _restore(b)["allowed"] is False


# --- f1 --------------------------------------------------------------------------------------------------


def test_restore_after_a_campaign_asking_for_its_served_name_is_allowed(build) -> None:
    """Regression (audit 86 f1): the campaign's probes asked for its served_name (acme-q8); the restored
    production engine serving the subject's model was refused for an hour with "no fresh /v1/models answer
    served …", though its newest answer did."""
    b = build(SEED000)
    _log(b, [*_campaign_run(), *_probes(PROD, HEALTH, MODELS, READY)])
    r = _restore(b)
    assert r["allowed"] is True, r["reasons"]


def test_a_fresh_probe_naming_another_model_is_named_in_the_refusal(build) -> None:
    """Where a fresh probe naming another model remains (after the end), the refusal names that probe —
    never "no fresh /v1/models answer served" while one did."""
    b = build(SEED000)
    _log(b, [*_campaign_run(), *_probes(PROD, HEALTH, MODELS, READY, CAMP_READY)])
    r = _restore(b)
    assert r["allowed"] is False
    failed = {c["name"]: c.get("reason", "") for c in r["checks"] if c["status"] == "failed"}
    assert set(failed) == {"restoration-identity-contradicted"}, r["reasons"]
    other = r["probes"][-1]
    assert f"(entry {other[:16]}" in failed["restoration-identity-contradicted"]
    assert "named model 'acme-q8', not acme-tiny-q8.gguf" in failed["restoration-identity-contradicted"]
    assert not any("no fresh /v1/models answer served" in x for x in r["reasons"]), r["reasons"]


def test_no_models_answer_serving_the_model_still_says_so(build) -> None:
    """The neighbour: no /v1/models answer served the model: restoration-identity refuses as before."""
    b = build(SEED000)
    _log(
        b, _probes(PROD, HEALTH, {**MODELS, "details": {"served": ["other"]}, "model_identity": None}, READY)
    )
    r = _restore(b)
    assert r["allowed"] is False
    assert any(x.startswith("no fresh /v1/models answer served the expected") for x in r["reasons"])


# --- f5 --------------------------------------------------------------------------------------------------

VERDICT = {"name": "verdict", "at": "2026-09-10T11:00:00Z",
           "record_verdict": {"subject": {"campaign": CAMPAIGN["campaign"]}, "key": "reviewer"}}  # fmt: skip


def _route(tmp_path: Path, subject: dict[str, str]) -> dict[str, Any]:
    _home, ledger, _b = _campaign_home(tmp_path, [*qualified_entries(), copy.deepcopy(VERDICT)])
    try:
        return check_routing_change(
            ledger, load_policy("routing-change"), subject, deployment=ONE_GPU,
            now=parse_time("2026-09-10T12:00:00Z"),
        )  # fmt: skip
    finally:
        ledger.close()


@pytest.mark.parametrize(
    "spelling",
    [
        {"backend": "vLLM"},
        {"backend": " VLLM "},
        {"model": "M-7"},
        {"model": " m-7 "},
        {"host": "GPU-BOX-1."},
    ],
    ids=["backend-case", "backend-padded", "model-case", "model-padded", "host-spelling"],
)
def test_route_subject_spelled_otherwise_finds_the_recorded_verdict(
    tmp_path: Path, spelling: dict[str, str]
) -> None:
    """Regression (audit 86 f5): a route subject spelled as the deployment may spell it found no verdict
    recorded under the collector's spelling ("no trusted backend-qualification verdict recorded")."""
    subject = {**{k: CAMPAIGN[k] for k in ("backend", "model", "host")}, **spelling}
    r = _route(tmp_path, subject)
    assert r["verdict"] is not None, r["reasons"]
    assert r["allowed"] is True, r["reasons"]


@pytest.mark.parametrize(
    "other",
    [{"backend": "sglang"}, {"model": "m-77"}, {"host": "gpu-box-2"}, {"backend": "vllm-x"}],
)
def test_route_subject_naming_another_backend_model_or_host_finds_no_verdict(
    tmp_path: Path, other: dict[str, str]
) -> None:
    """The neighbours: another name is another subject — no verdict, refused."""
    subject = {**{k: CAMPAIGN[k] for k in ("backend", "model", "host")}, **other}
    r = _route(tmp_path, subject)
    assert r["allowed"] is False and r["verdict"] is None
    assert any("no trusted backend-qualification verdict recorded" in x for x in r["reasons"]), r["reasons"]


def test_subject_names_compare_by_the_qualifications_engine_names() -> None:
    """``llama.cpp`` is ``llamacpp`` by the qualification's params.engine_names, its one copy; a blank or
    missing value names nothing."""
    aliases = engine_aliases(load_policy("backend-qualification", POLICY_DIR))
    assert _names_match("backend", "llamacpp", "llama.cpp", aliases)
    assert _names_match("backend", "llama.cpp", "LlamaCPP", aliases)
    assert not _names_match("backend", "vllm", "llama.cpp", aliases)
    assert _names_match("model", "ACME-TINY-Q8.GGUF", "acme-tiny-q8.gguf", aliases)
    assert not _names_match("model", "acme-tiny-q8", "acme-tiny-q8.gguf", aliases)
    assert not _names_match("model", None, "m", aliases) and not _names_match("backend", "  ", "  ", aliases)
    assert not _names_match("campaign", "C", "c", aliases)  # any other field exactly


def test_deployment_engine_reason_no_longer_says_a_service_without_engine_runs_vllm() -> None:
    """The stale fail text (engine is required of every service now)."""
    text = (POLICY_DIR / "routing-change.toml").read_text()
    assert "without `engine` runs vllm" not in text
