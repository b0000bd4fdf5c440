"""Audit 90 f1, f2: the runs a restoration reads as over (``routing._recorded_ends``, ``_before_end``).

f1: a finished qualification job whose end entries (its ``engine.launch`` with ``ended_at``, its terminal
``job`` entry) left out a subject field the restore request names (``host``; ``backend`` where the request
names it) did not end its run: the job's own probes of its stopped engine restored the model. An end entry is
read to take credit away, so a field it leaves out hides nothing and matches (``routing._hides_nothing``, the
one reading verdict shopping reads a label left out with); one it names otherwise still keeps it out. A field
left out never counts where the entry would give credit: an end entry that leaves one out drops no failure.

f2: a failure observed after a run's recorded end was dropped as that gone engine's by log order alone (the
log took it before the job's terminal entry). A failure is the gone engine's only where the log took it
before a standing end entry AND it was observed (collected_at, never after the log took it) at or before the
end that entry records; each condition only narrows what is dropped (audit 87 f2 stays closed)."""

from __future__ import annotations

import dataclasses
import inspect
from datetime import timedelta
from typing import Any

import pytest

import tests.policy.conftest as policy_conftest
from ledger.entries import format_time, parse_time
from ledger.policy.loader import load_policy
from ledger.policy.names import engine_aliases
from ledger.policy.routing import (
    _before_end,
    _entries,
    _hides_nothing,
    _may_be_of_subject,
    _recorded_ends,
    _standing_failures,
    check_routing_change,
)
from ledger.policy.snapshot import Snapshot, keyring_at
from tests.policy.conftest import POLICY_DIR

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
DEAD = {**HEALTH, "ok": False, "http_status": 503, "error": "Service Unavailable"}
JOB = {"job_id": "j1", "started_at": "2026-09-01T18:10:00Z"}
LAUNCH = {"engine": "llamacpp", "command": ["llama-server"], "started_at": "2026-09-01T18:10:01Z",
          "ready": True, "ended_at": "2026-09-01T18:10:30Z"}  # fmt: skip
JOB_END = {**JOB, "state": "succeeded", "ended_at": "2026-09-01T18:10:31Z"}
START = parse_time("2026-09-01T18:10:00Z")  # after the fixture's own entries
NOW = parse_time("2026-09-01T18:30:00Z")
STALE = "shows nothing of the one serving now"


def _restore(b: Any, subject: dict[str, str] | None = None) -> dict[str, Any]:
    return check_routing_change(
        b.ledger, load_policy("routing-change"), dict(subject or {"model": MODEL, "host": HOST}),
        action="restore", now=NOW,
    )  # fmt: skip


def _dropped(r: dict[str, Any]) -> list[dict[str, Any]]:
    return [row for row in r["ignored"] if STALE in row["detail"]]


# --- f1: end entries that leave out a field of the subject ----------------------------------------------


def _finished_job(b: Any, end_subject: dict[str, str]) -> list[str]:
    """A qualification job whose probes carry the full subject and whose end entries carry
    ``end_subject``, each logged a second after the last; the probes' ids."""
    items = [
        ("job", end_subject, {**JOB, "state": "running"}),
        *[("health.probe", CAMP, p) for p in (HEALTH, MODELS, READY)],
        ("engine.launch", end_subject, LAUNCH),
        ("job", end_subject, JOB_END),
    ]
    ids = []
    for kind, subject, payload in items:
        at = START + timedelta(seconds=b.ledger.size())
        st = b.ledger.make_statement(kind, subject, payload, collected_at=format_time(at))
        ids.append(b.ledger.append([b.ledger.sign(st, "collector")], logged_at=at)[0].entry_id)
    return ids[1:4]


def _without(*fields: str) -> dict[str, str]:
    return {k: v for k, v in CAMP.items() if k not in fields}


WITH_BACKEND = {"backend": "llama.cpp", "model": MODEL, "host": HOST}


@pytest.mark.parametrize(
    ("end_subject", "asked"),
    [
        (_without("host"), None),
        (_without("backend"), WITH_BACKEND),
        (_without("model"), None),
        (_without("host", "backend", "model"), WITH_BACKEND),
        # renamed: ``host_name`` is another field (recorded as it is): the entry leaves ``host`` out
        ({**_without("host"), "host_name": HOST}, None),
    ],
    ids=["host-left-out", "backend-left-out", "model-left-out", "all-left-out", "host-renamed"],
)
def test_restore_on_probes_of_a_job_whose_end_entries_leave_out_a_field_is_refused(
    build: Any, end_subject: dict[str, str], asked: dict[str, str] | None
) -> None:
    """Regression (audit 90 f1): the job's launch and terminal entries left out a field the restore names,
    so they ended no run of the subject and its own probes of its stopped engine restored the model."""
    b = build(SEED000)
    probes = _finished_job(b, end_subject)
    r = _restore(b, asked)
    assert r["allowed"] is False, r["reasons"]
    assert r["probes"] == []
    assert {row["entry"] for row in _dropped(r)} == set(probes), r["ignored"]


def test_end_entries_naming_the_full_subject_still_end_the_run(build: Any) -> None:
    """The baseline (audit 86 f2): end entries naming every field end the run; a host spelled otherwise
    is that host."""
    b = build(SEED000)
    _finished_job(b, {**CAMP, "host": "ACME-BOX-7"})
    r = _restore(b, WITH_BACKEND)
    assert r["allowed"] is False and r["probes"] == []
    assert len(_dropped(r)) == 3


@pytest.mark.parametrize(
    ("end_subject", "asked"),
    [
        ({**CAMP, "host": "acme-box-8"}, None),
        ({**CAMP, "backend": "vllm"}, WITH_BACKEND),
        ({**CAMP, "model": "acme-other.gguf"}, None),
    ],
    ids=["another-host", "another-backend", "another-model"],
)
def test_end_entries_naming_another_value_end_no_run_of_the_subject(
    build: Any, end_subject: dict[str, str], asked: dict[str, str] | None
) -> None:
    """The neighbour: an end entry that names a field with another value is another subject's run: it
    takes no credit from this subject's probes (as a job still running, they are judged as before)."""
    b = build(SEED000)
    probes = _finished_job(b, end_subject)
    r = _restore(b, asked)
    assert _dropped(r) == [], r["ignored"]
    assert r["probes"] == probes
    assert r["allowed"] is True, r["reasons"]


def test_end_entries_leaving_out_a_field_the_request_does_not_name_change_nothing(build: Any) -> None:
    """A field the request does not name (backend, on a restore naming model and host) is not asked: the
    full-subject reading stands (the run ends)."""
    b = build(SEED000)
    _finished_job(b, _without("backend"))
    r = _restore(b)
    assert r["allowed"] is False and len(_dropped(r)) == 3


@pytest.mark.parametrize(
    ("end_subject", "dropped"), [(_without("host"), False), (CAMP, True)], ids=["host-left-out", "host-named"]
)
def test_end_entry_leaving_out_a_field_drops_no_failure(
    build: Any, end_subject: dict[str, str], dropped: bool
) -> None:
    """A field left out counts only where the entry takes credit away: a failure the log took before end
    entries that leave out the host is not dropped as their run's (it stays among the probes); with the
    host named, the same failure is the gone engine's."""
    b = build(SEED000)
    st = b.ledger.make_statement("health.probe", CAMP, DEAD, collected_at=format_time(START))
    dead = b.ledger.append([b.ledger.sign(st, "collector")], logged_at=START)[0].entry_id
    _finished_job(b, end_subject)
    r = _restore(b)
    assert (dead in {row["entry"] for row in _dropped(r)}) is dropped, r["ignored"]
    assert (dead in r["probes"]) is not dropped, r["probes"]


def test_end_subject_reading_is_the_verdict_shopping_one() -> None:
    """One copy: a label left out, not a text or blank hides nothing; one naming another value keeps the
    entry out; names compare as the gate's (host_key, engine names, model_key). Verdict shopping
    (``_standing_failures``) reads its labels through the same function."""
    aliases = engine_aliases(load_policy("backend-qualification", POLICY_DIR))
    asked = {"backend": "llama.cpp", "model": MODEL, "host": HOST}
    assert _may_be_of_subject({}, asked, aliases)
    assert _may_be_of_subject({"campaign": "c"}, asked, aliases)
    for bad in (None, 5, "", "   ", ["acme-box-8"]):
        assert _may_be_of_subject({"host": bad}, asked, aliases), bad
    assert _may_be_of_subject(
        {"backend": "llamacpp", "model": MODEL.upper(), "host": "ACME-BOX-7"}, asked, aliases
    )
    assert not _may_be_of_subject({"host": "acme-box-8"}, asked, aliases)
    assert not _may_be_of_subject({"backend": "vllm"}, asked, aliases)
    assert not _may_be_of_subject({"model": "acme-tiny-q8"}, asked, aliases)
    assert _hides_nothing([], lambda v: False) and _hides_nothing(["", None], lambda v: False)
    assert not _hides_nothing(["x", ""], lambda v: False) and _hides_nothing(["x", "y"], lambda v: v == "y")
    assert "_hides_nothing(" in inspect.getsource(_standing_failures)


# --- f2: a failure seen after the end an entry records ----------------------------------------------------


def _log(b: Any, kind: str, subject: dict[str, str], payload: dict[str, Any], logged: str,
         observed: str | None = None) -> str:  # fmt: skip
    st = b.ledger.make_statement(kind, subject, payload, collected_at=observed or logged)
    return str(b.ledger.append([b.ledger.sign(st, "collector")], logged_at=parse_time(logged))[0].entry_id)


def _late_failure(
    b: Any,
    *,
    fail_before_end: bool = True,
    observed: str = "2026-09-01T18:10:50Z",
    job_end: dict[str, Any] | None = None,
    ran: bool = True,
) -> str:
    """The campaign ran (its launch recorded over at 18:10:30, logged 18:10:32); production answered 503
    (observed ``observed``); the job's terminal entry (ended_at 18:10:31) logged 18:11:00, before or after
    the 503; production passes observed 18:10:40 logged 18:12 (spooled). ``ran`` False: no running entry,
    launch or probe of the campaign — only its terminal entry. The 503's id."""
    if ran:
        _log(b, "job", CAMP, {**JOB, "state": "running"}, "2026-09-01T18:10:00Z")
        _log(b, "health.probe", CAMP, HEALTH, "2026-09-01T18:10:05Z")
        _log(b, "engine.launch", CAMP, LAUNCH, "2026-09-01T18:10:32Z")
    end = ("job", CAMP, job_end or JOB_END, "2026-09-01T18:11:00Z")
    if fail_before_end:
        dead = _log(b, "health.probe", PROD, DEAD, "2026-09-01T18:10:50Z", observed)
        _log(b, *end)
    else:
        _log(b, *end)
        dead = _log(b, "health.probe", PROD, DEAD, "2026-09-01T18:11:01Z", observed)
    for i, p in enumerate((HEALTH, MODELS, READY)):
        _log(b, "health.probe", PROD, p, f"2026-09-01T18:12:0{i}Z", "2026-09-01T18:10:40Z")
    return dead


def test_failure_observed_after_the_recorded_end_logged_before_the_end_entry_still_refuses(
    build: Any,
) -> None:
    """Regression (audit 90 f2): the 503, observed 20 s after the job's recorded end, was dropped as the
    stopped engine's because the log took it before the job's terminal entry; the spooled passes seen
    before it restored the model."""
    b = build(SEED000)
    dead = _late_failure(b)
    r = _restore(b)
    assert r["allowed"] is False, r["reasons"]
    assert dead in r["probes"]
    assert any("503" in x for x in r["reasons"]), r["reasons"]


def test_control_failure_logged_after_the_end_entry_refuses(build: Any) -> None:
    b = build(SEED000)
    dead = _late_failure(b, fail_before_end=False)
    r = _restore(b)
    assert r["allowed"] is False and dead in r["probes"]


@pytest.mark.parametrize(
    ("observed", "dropped"),
    [("2026-09-01T18:10:31Z", True), ("2026-09-01T18:10:32Z", False), ("2026-09-01T18:10:20Z", True)],
    ids=["exactly-at-the-end", "a-second-after", "before-the-end"],
)
def test_failure_observed_at_or_before_the_end_and_logged_before_it_is_the_gone_engines(
    build: Any, observed: str, dropped: bool
) -> None:
    """Both conditions hold (logged before the terminal entry, observed at or before its ended_at
    18:10:31, the end itself included): the 503 is the gone engine's and the passes restore; a second
    after the end it stays among the probes (the passes observed after it are the newest)."""
    b = build(SEED000)
    dead = _late_failure(b, observed=observed)
    r = _restore(b)
    assert (dead in {row["entry"] for row in _dropped(r)}) is dropped, r["ignored"]
    assert (dead in r["probes"]) is not dropped, r["probes"]
    if dropped:
        assert r["allowed"] is True, r["reasons"]
        row = next(row for row in _dropped(r) if row["entry"] == dead)
        said = f"observed {format_time(parse_time(observed))}"
        assert "the log took it" in row["detail"] and said in row["detail"], row


def test_failure_logged_after_the_end_entry_claiming_an_earlier_time_is_not_dropped(build: Any) -> None:
    """Audit 87 f2 stays closed: a claimed time before the end, logged after the end entry, drops
    nothing."""
    b = build(SEED000)
    _late_failure(b, fail_before_end=False)
    dead = _log(b, "health.probe", PROD, DEAD, "2026-09-01T18:13:00Z", "2026-09-01T18:10:10Z")
    r = _restore(b)
    assert r["allowed"] is False and dead in r["probes"], r["reasons"]
    assert dead not in {row["entry"] for row in _dropped(r)}


def test_end_entry_of_a_job_that_never_ran_drops_no_failure_seen_after_its_end(build: Any) -> None:
    """A job cancelled before it ran (no running entry, launch or probe): its terminal entry, logged after
    the 503, records an end before the 503 was observed — the 503 is not dropped."""
    b = build(SEED000)
    cancelled = {"job_id": "j1", "state": "cancelled", "ended_at": "2026-09-01T18:10:31Z"}
    dead = _late_failure(b, job_end=cancelled, ran=False)
    r = _restore(b)
    assert r["allowed"] is False, r["reasons"]
    assert dead in r["probes"]


def test_end_entry_without_ended_at_ends_at_its_log_time(build: Any) -> None:
    """A terminal entry that records no ended_at ends the run when the log took it (18:11:00): the 503
    observed at 18:10:50 and logged before it is that run's."""
    b = build(SEED000)
    dead = _late_failure(b, job_end={**JOB, "state": "succeeded"})
    r = _restore(b)
    assert dead in {row["entry"] for row in _dropped(r)}, r["ignored"]


@pytest.mark.parametrize("collected_at", [None, "yesterday", 1757000000, ["2026-09-01T18:10:20Z"]], ids=str)
def test_failure_whose_collected_at_is_missing_or_mistyped_is_not_dropped(
    build: Any, collected_at: Any
) -> None:
    """A failure whose observed time cannot be read is not dropped as the gone engine's, whatever the log's
    order; a pass's credit is taken away (a claim that cannot be read only takes credit away)."""
    b = build(SEED000)
    dead = _late_failure(b, observed="2026-09-01T18:10:20Z")
    (e,) = [p for p in _read(b, ("health.probe",), PROD) if p.id == dead]
    ends = [(x, t) for x, t in _recorded_ends(_read(b, ("job",), CAMP)) if x.payload["state"] != "running"]
    assert len(ends) == 1, "the job's terminal entry records its run over"
    x, end = ends[0]
    assert _before_end(e, x, end, by_claim=False) is not None  # readable: it is the gone engine's
    statement = dict(e.statement)
    if collected_at is None:
        statement.pop("collected_at")
    else:
        statement["collected_at"] = collected_at
    broken = dataclasses.replace(e, statement=statement, _collected=None, _observed=None)
    assert _before_end(broken, x, end, by_claim=False) is None
    assert _before_end(broken, x, end, by_claim=True) is not None


def _read(b: Any, kinds: tuple[str, ...], subject: dict[str, str]) -> list[Any]:
    """The entries of these kinds and subject, parsed as the gate reads them."""
    size = b.ledger.size()
    snap = Snapshot(
        size=size, subject={}, entries=[], keyring=keyring_at(b.ledger, size), reference_time=format_time(NOW)
    )
    return _entries(b.ledger, subject=subject, kinds=kinds, size=size, snap=snap)
