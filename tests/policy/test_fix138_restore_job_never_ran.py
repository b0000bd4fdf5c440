"""Fix 138 (issue 11): the end entry of a job that never ran dropped a failure from a restoration.

A restoration (``check routing-change --action restore``) drops a failure as a gone engine's where the log
took it before a standing end entry of the subject and it was observed at or before the end that entry
records (``routing._before_end``, audit 90 f2). A job's terminal entry counted as such an end whatever job it
named: a ``cancelled`` entry of a job the log never saw start — no running entry, no engine launched — logged
after a failure of the production engine dropped that failure, and a sleeping engine was restored. A job
that never ran ended no engine: its end drops nothing. Which job an entry belongs to is read from the log
(``acceptance.job_ran_engine``: the terminal entry that ended its job, after a running entry of it; an engine
launch or probe of its campaign the log took while that job was open), never from the entry's own claim.
Taking a pass's credit away is unchanged: there any recorded end counts (fail closed)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

import tests.policy.conftest as policy_conftest
from ledger.entries import parse_time
from ledger.errors import LedgerError
from ledger.policy import acceptance
from ledger.policy.loader import load_policy
from ledger.policy.routing import check_routing_change
from ledger.policy.rules import Rule
from tests.policy.test_restore_run_ends import _read

build = policy_conftest.build  # a ledger built from a policy fixture file

SEED000 = "routing-change/seed000-restoration.toml"
MODEL = "acme-tiny-q8.gguf"
HOST = "acme-box-7"
PROD = {"backend": "llamacpp", "model": MODEL, "host": HOST}
CAMP = {**PROD, "campaign": "acme-newver"}
OTHER = {**PROD, "host": "acme-box-9", "campaign": "acme-elsewhere"}
HEALTH = {"endpoint": "http://127.0.0.1:8080/health", "check": "health", "ok": True, "http_status": 200}
MODELS = {"endpoint": "http://127.0.0.1:8080/v1/models", "check": "models", "ok": True, "http_status": 200,
          "model_identity": MODEL, "details": {"served": [MODEL]}}  # fmt: skip
READY = {"endpoint": "http://127.0.0.1:8080/v1/chat/completions", "check": "completion", "ok": True,
         "http_status": 200, "expected": "READY", "text": "READY", "max_tokens": 8,
         "model_identity": MODEL}  # fmt: skip
# the production engine seen asleep: a failure, and one the restoration refuses wherever it stands among
# the fresh probes (restoration-health: no fresh probe saw it asleep)
ASLEEP = {**HEALTH, "ok": False, "http_status": 503, "sleeping": True, "error": "Service Unavailable"}
LAUNCH = {"engine": "llamacpp", "command": ["llama-server"], "started_at": "2026-09-01T18:10:41Z",
          "ready": True, "ended_at": "2026-09-01T18:11:00Z"}  # fmt: skip
NOW = parse_time("2026-09-01T18:30:00Z")
STALE = "shows nothing of the one serving now"


def _log(b: Any, kind: str, subject: dict[str, str], payload: dict[str, Any], logged: str) -> str:
    st = b.ledger.make_statement(kind, subject, payload, collected_at=logged)
    return str(b.ledger.append([b.ledger.sign(st, "collector")], logged_at=parse_time(logged))[0].entry_id)


def _earlier_job(b: Any) -> None:
    """An earlier qualification job of the subject that ran and ended (18:10:00–18:10:31)."""
    j1 = {"job_id": "j1", "started_at": "2026-09-01T18:10:00Z"}
    _log(b, "job", CAMP, {**j1, "state": "running"}, "2026-09-01T18:10:00Z")
    _log(b, "health.probe", CAMP, HEALTH, "2026-09-01T18:10:05Z")
    _log(b, "engine.launch", CAMP, {**LAUNCH, "started_at": "2026-09-01T18:10:01Z",
                                    "ended_at": "2026-09-01T18:10:30Z"}, "2026-09-01T18:10:32Z")  # fmt: skip
    _log(
        b,
        "job",
        CAMP,
        {**j1, "state": "succeeded", "ended_at": "2026-09-01T18:10:31Z"},
        "2026-09-01T18:10:33Z",
    )


J2 = {"job_id": "j2", "started_at": "2026-09-01T18:10:40Z"}
J2_END = {**J2, "state": "cancelled", "ended_at": "2026-09-01T18:11:00Z"}


def _scenario(
    b: Any,
    *,
    run: tuple[str, ...] = (),
    end: dict[str, Any] | None = None,
    end_subject: dict[str, str] | None = None,
    end_first: bool = False,
    failure: dict[str, Any] | None = None,
) -> str:
    """The earlier job ran and ended; the production engine was seen asleep (logged and observed 18:10:50);
    job j2's terminal entry (``end``, ended_at 18:11:00) is logged at 18:11:05 — after the failure, or
    before it (``end_first``: the failure then logged 18:11:06, observed 18:10:50); what the log shows of
    j2 before its end is ``run``: ``"running"`` (its running entry, 18:10:40), ``"launch"`` (its engine's
    launch, logged 18:11:02), ``"probe"`` (a probe of its engine, 18:10:45), ``"other"`` (a j2 of another
    campaign on another host ran: running 18:10:39, launch 18:10:48); production passes after the end
    (18:12). The failure's id."""
    _earlier_job(b)
    if "other" in run:  # j2 of another campaign, on another host, ran
        _log(b, "job", OTHER, {**J2, "state": "running"}, "2026-09-01T18:10:39Z")
        _log(b, "engine.launch", OTHER, LAUNCH, "2026-09-01T18:10:48Z")
    if "running" in run:
        _log(b, "job", CAMP, {**J2, "state": "running"}, "2026-09-01T18:10:40Z")
    if "probe" in run:
        _log(b, "health.probe", CAMP, HEALTH, "2026-09-01T18:10:45Z")
    failed = {**(failure or ASLEEP)}
    dead = "" if end_first else _log(b, "health.probe", PROD, failed, "2026-09-01T18:10:50Z")
    if "launch" in run:
        _log(b, "engine.launch", CAMP, LAUNCH, "2026-09-01T18:11:02Z")
    _log(b, "job", end_subject or CAMP, end or J2_END, "2026-09-01T18:11:05Z")
    if end_first:
        st = b.ledger.make_statement("health.probe", PROD, failed, collected_at="2026-09-01T18:10:50Z")
        at = parse_time("2026-09-01T18:11:06Z")
        dead = str(b.ledger.append([b.ledger.sign(st, "collector")], logged_at=at)[0].entry_id)
    for i, p in enumerate((HEALTH, MODELS, READY)):
        _log(b, "health.probe", PROD, p, f"2026-09-01T18:12:0{i}Z")
    return dead


def _restore(b: Any) -> dict[str, Any]:
    return check_routing_change(
        b.ledger, load_policy("routing-change"), {"model": MODEL, "host": HOST}, action="restore", now=NOW
    )


def _dropped(r: dict[str, Any]) -> set[str]:
    return {row["entry"] for row in r["ignored"] if STALE in row["detail"]}


def _kept(r: dict[str, Any], dead: str) -> None:
    """The failure stands among the fresh probes (never dropped as a gone engine's) and refuses."""
    assert dead in r["probes"], r["ignored"]
    assert dead not in _dropped(r), r["ignored"]
    assert r["allowed"] is False, r["reasons"]
    assert any("asleep" in x for x in r["reasons"]), r["reasons"]


def test_end_entry_of_a_job_that_never_ran_drops_no_earlier_failure(build: Any) -> None:
    """Regression (fix 138): job j2 was cancelled before it ran (no running entry, no launch, no probe); its
    terminal entry, logged after the production engine was seen asleep and recording an end after it,
    dropped that failure as a gone engine's, and the passes after it restored the model."""
    b = build(SEED000)
    dead = _scenario(b)
    _kept(_restore(b), dead)


def test_end_entry_of_a_job_that_ran_an_engine_drops_the_failure_as_today(build: Any) -> None:
    """The case that must still pass: j2 ran (running entry, its engine's launch), and its end records the
    run over after the failure was seen: the failure is the gone engine's and the passes restore."""
    b = build(SEED000)
    dead = _scenario(b, run=("running", "launch"))
    r = _restore(b)
    assert dead in _dropped(r), r["ignored"]
    assert r["allowed"] is True, r["reasons"]


def test_end_entry_of_a_job_whose_engine_the_log_probed_drops_the_failure(build: Any) -> None:
    """A job whose launch the log never took (it could not be recorded) but whose engine the log probed
    while the job ran: the job ran an engine, and its end drops the failure."""
    b = build(SEED000)
    dead = _scenario(b, run=("running", "probe"))
    r = _restore(b)
    assert dead in _dropped(r), r["ignored"]
    assert r["allowed"] is True, r["reasons"]


def test_end_entry_of_a_job_started_but_cancelled_before_its_engine_drops_nothing(build: Any) -> None:
    """A running entry alone (cancelled before it launched an engine): no engine ran, nothing to drop."""
    b = build(SEED000)
    dead = _scenario(b, run=("running",))
    _kept(_restore(b), dead)


def test_launch_logged_with_no_running_job_ends_its_own_run_only(build: Any) -> None:
    """A launch is a run of its own (``routing._recorded_ends``): it drops the failure by its own end,
    whatever the job entry after it names — the job entry adds nothing."""
    b = build(SEED000)
    dead = _scenario(b, run=("launch",))
    r = _restore(b)
    assert dead in _dropped(r), r["ignored"]
    row = next(row for row in r["ignored"] if row["entry"] == dead)
    assert "engine launch" in row["detail"], row


@pytest.mark.parametrize(
    ("end", "end_subject"),
    [
        ({**J2_END, "job_id": "j9"}, None),  # names a job the log never saw start
        (J2_END, {**CAMP, "campaign": "acme-other"}),  # j2 of another campaign
        ({**J2_END, "job_id": "J2"}, None),  # job ids compare exactly
    ],
    ids=["unknown-job", "job-of-another-campaign", "job-id-case"],
)
def test_end_entry_naming_a_job_the_log_does_not_know_ran_drops_nothing(
    build: Any, end: dict[str, Any], end_subject: dict[str, str] | None
) -> None:
    """j2 runs (its running entry, a probe of its engine; its launch is recorded when its run ends) and
    has not ended; the terminal entry names another job: none the log knows ran — it drops nothing."""
    b = build(SEED000)
    dead = _scenario(b, run=("running", "probe"), end=end, end_subject=end_subject)
    _kept(_restore(b), dead)


def test_end_entry_naming_a_job_of_another_subject_drops_nothing(build: Any) -> None:
    """j2 ran on another host under another campaign; an end entry of this subject naming j2 is not that
    job's end."""
    b = build(SEED000)
    dead = _scenario(b, run=("other",))
    _kept(_restore(b), dead)


@pytest.mark.parametrize(
    "end",
    [
        {k: v for k, v in J2_END.items() if k != "job_id"},  # job field left out
        {**J2_END, "job_id": 2},  # mistyped
        {**J2_END, "job_id": None},
        {**{k: v for k, v in J2_END.items() if k != "job_id"}, "job": "j2"},  # renamed
    ],
    ids=["left-out", "mistyped", "null", "renamed"],
)
def test_end_entry_whose_job_field_is_left_out_or_mistyped_is_refused_at_ingest(
    build: Any, end: dict[str, Any]
) -> None:
    """A terminal entry with no job id text names no job: refused at ingest, so it cannot stand (and a
    restore is judged without it: the failure stays)."""
    b = build(SEED000)
    with pytest.raises(LedgerError, match=r"job_id|job"):
        _scenario(b, run=("running", "launch"), end=end)


@pytest.mark.parametrize("run", [(), ("running", "launch")], ids=["never-ran", "ran"])
def test_end_entry_logged_before_the_failure_drops_nothing(build: Any, run: tuple[str, ...]) -> None:
    """Reordered: the end logged before the failure (which claims to be observed before it) — a claimed
    time removes no failure, whether the job ran or not."""
    b = build(SEED000)
    dead = _scenario(b, run=run, end_first=True)
    _kept(_restore(b), dead)


def test_second_terminal_entry_of_a_job_already_ended_drops_nothing(build: Any) -> None:
    """A job ends once: j2 ran and ended before the failure; another terminal entry of it logged after the
    failure (recording a later end) is not its end and drops nothing."""
    b = build(SEED000)
    _earlier_job(b)
    _log(b, "job", CAMP, {**J2, "state": "running"}, "2026-09-01T18:10:40Z")
    _log(b, "engine.launch", CAMP, {**LAUNCH, "ended_at": "2026-09-01T18:10:44Z"}, "2026-09-01T18:10:45Z")
    _log(
        b,
        "job",
        CAMP,
        {**J2, "state": "succeeded", "ended_at": "2026-09-01T18:10:45Z"},
        "2026-09-01T18:10:46Z",
    )
    dead = _log(b, "health.probe", PROD, ASLEEP, "2026-09-01T18:10:50Z")
    _log(
        b, "job", CAMP, {**J2, "state": "killed", "ended_at": "2026-09-01T18:11:00Z"}, "2026-09-01T18:11:05Z"
    )
    for i, p in enumerate((HEALTH, MODELS, READY)):
        _log(b, "health.probe", PROD, p, f"2026-09-01T18:12:0{i}Z")
    _kept(_restore(b), dead)


def test_end_entry_of_a_job_that_never_ran_still_takes_a_pass_credit(build: Any) -> None:
    """Taking credit away is unchanged: any recorded end counts there (fail closed) — a pass logged before
    the never-ran job's end credits nothing."""
    b = build(SEED000)
    passes = [
        _log(b, "health.probe", PROD, p, f"2026-09-01T18:10:5{i}Z")
        for i, p in enumerate((HEALTH, MODELS, READY))
    ]
    _log(b, "job", CAMP, J2_END, "2026-09-01T18:11:05Z")
    r = _restore(b)
    assert set(passes) <= _dropped(r), r["ignored"]
    assert all(row["rule"] == Rule.STALE for row in r["ignored"] if row["entry"] in passes)
    assert r["allowed"] is False


def test_job_ran_engine_reads_the_job_from_the_log(build: Any) -> None:
    """The one reading (``acceptance.job_ran_engine``) on the entries themselves: the end of a job that ran
    an engine; not without its running entry, nor without its launch, nor with only a launch of another
    campaign; not for an entry the caller does not stand on; not for an end that names no campaign, nor one
    the log took after the entries that would show the run (they are read only before it)."""
    b = build(SEED000)
    _scenario(b, run=("running", "launch"))
    _log(b, "engine.launch", OTHER, LAUNCH, "2026-09-01T18:13:00Z")
    entries = _read(b, ("job", "engine.launch", "health.probe"), {"campaign": CAMP["campaign"]})
    other = _read(b, ("engine.launch",), {"campaign": OTHER["campaign"]})
    (end,) = [e for e in entries if e.kind == "job" and e.payload == J2_END]
    (start,) = [e for e in entries if e.kind == "job" and e.payload == {**J2, "state": "running"}]
    (launch,) = [e for e in entries if e.kind == "engine.launch" and e.payload == LAUNCH]
    ran = acceptance.job_ran_engine
    assert ran(end, entries)
    assert not ran(end, [e for e in entries if e is not start])
    assert not ran(end, [e for e in entries if e is not launch])
    assert not ran(end, [*(e for e in entries if e is not launch), *other])
    assert not ran(end, entries, lambda e: e is not launch)
    assert not ran(end, entries, lambda e: e is not start)
    moved = [dataclasses.replace(e, seq=end.seq + 1) if e is launch else e for e in entries]
    assert not ran(end, moved)
    no_campaign = dataclasses.replace(end, statement={**end.statement, "subject": PROD})
    assert no_campaign.subject.get("campaign") is None and not ran(no_campaign, entries)
    assert not ran(start, entries)  # a running entry ends nothing
    # another job of the campaign started after j2 did and still open when the launch was logged: the log
    # knows the launch by that job (the latest to start), not j2
    j3 = dataclasses.replace(
        start,
        seq=launch.seq - 1,
        statement={**start.statement, "payload": {**J2, "job_id": "j3", "state": "running"}},
    )
    assert start.seq < j3.seq < launch.seq and not ran(end, [*entries, j3])
    assert ran(end, [*entries, j3], lambda e: e is not j3)  # one the caller does not stand on is not read


# --- fix 147 (audit 99 f2, f3): only an engine of the end's host, one that answered, shows the job ran ---


def _ran_only(b: Any, kind: str, subject: dict[str, Any], payload: dict[str, Any]) -> str:
    """Job j2 started (running entry, 18:10:40) and the log took one entry of ``kind`` of its campaign while
    it ran (18:10:45; ``subject``: its subject); production seen asleep (18:10:50), j2 cancelled (logged
    18:11:05), production passes after (18:12). The failure's id."""
    _earlier_job(b)
    _log(b, "job", CAMP, {**J2, "state": "running"}, "2026-09-01T18:10:40Z")
    _log(b, kind, subject, payload, "2026-09-01T18:10:45Z")
    dead = _log(b, "health.probe", PROD, ASLEEP, "2026-09-01T18:10:50Z")
    _log(b, "job", CAMP, J2_END, "2026-09-01T18:11:05Z")
    for i, p in enumerate((HEALTH, MODELS, READY)):
        _log(b, "health.probe", PROD, p, f"2026-09-01T18:12:0{i}Z")
    return dead


UNANSWERED = {**HEALTH, "ok": False, "http_status": None}


@pytest.mark.parametrize(
    "probe",
    [
        pytest.param({**UNANSWERED, "error": "ConnectError: [Errno 111] Connection refused"}, id="refused"),
        pytest.param({**UNANSWERED, "error": "RemoteProtocolError: Server disconnected"}, id="closed"),
        pytest.param({**UNANSWERED, "error": "ReadTimeout: timed out"}, id="timeout"),
        pytest.param({**UNANSWERED, "error": "something else"}, id="other-error"),
        pytest.param({key: v for key, v in UNANSWERED.items() if key != "http_status"}, id="status-left-out"),
        pytest.param({**HEALTH, "http_status": None}, id="ok-claimed-without-a-status"),
    ],
)
def test_end_entry_of_a_job_whose_only_probe_nothing_answered_drops_nothing(
    build: Any, probe: dict[str, Any]
) -> None:
    """Regression (audit 99 f2): j2's only probe was refused (ok false, no HTTP status): no engine answered
    it, so it shows none ran, yet the job's end dropped the failure and the passes restored the model. A
    probe counts only where an engine answered it (an HTTP status): a refused, closed or timed-out one, an
    error of another text, a status left out, an ``ok`` claim with no status, shows no engine."""
    b = build(SEED000)
    dead = _ran_only(b, "health.probe", CAMP, probe)
    _kept(_restore(b), dead)


@pytest.mark.parametrize("status", [200, 503, 404])
def test_end_entry_of_a_job_whose_engine_answered_a_probe_drops_the_failure(build: Any, status: int) -> None:
    """The case that must still pass: an engine answered j2's probe, with any HTTP status (a failure too: an
    engine was there to answer it) — the job ran an engine, and its end drops the failure."""
    b = build(SEED000)
    probe = HEALTH if status == 200 else {**HEALTH, "ok": False, "http_status": status, "error": "HTTP error"}
    dead = _ran_only(b, "health.probe", CAMP, probe)
    r = _restore(b)
    assert dead in _dropped(r), r["ignored"]
    assert r["allowed"] is True, r["reasons"]


@pytest.mark.parametrize("kind", ["health.probe", "engine.launch"])
def test_end_entry_of_a_job_whose_campaign_ran_on_another_host_drops_nothing(build: Any, kind: str) -> None:
    """Regression (audit 99 f3): j2's campaign was probed (or launched) on another host (acme-box-9) while
    j2 was open: that engine is not the one j2's end, on acme-box-7, ended — it dropped the failure all the
    same. An entry of ``RAN_ENGINE_KINDS`` counts only on the end's host."""
    b = build(SEED000)
    dead = _ran_only(b, kind, {**CAMP, "host": "acme-box-9"}, HEALTH if kind == "health.probe" else LAUNCH)
    _kept(_restore(b), dead)


@pytest.mark.parametrize("host", ["ACME-BOX-7", "acme-box-7."])
def test_end_entry_of_a_job_probed_on_its_host_spelled_otherwise_drops_the_failure(
    build: Any, host: str
) -> None:
    """The case that must still pass: the host spelled in another case, or with a trailing dot, is one host
    (``host_key``): the job ran an engine there."""
    b = build(SEED000)
    dead = _ran_only(b, "health.probe", {**CAMP, "host": host}, HEALTH)
    r = _restore(b)
    assert dead in _dropped(r), r["ignored"]
    assert r["allowed"] is True, r["reasons"]


def test_job_ran_engine_reads_a_host_left_out_or_blank_as_another(build: Any) -> None:
    """The one reading on the entries: a probe of the campaign naming no host, or a blank one, and an end
    naming no host are not of the same host (fail closed: such an entry shows no engine of the end's)."""
    b = build(SEED000)
    _ran_only(b, "health.probe", CAMP, HEALTH)
    entries = _read(b, ("job", "health.probe"), {"campaign": CAMP["campaign"]})
    (end,) = [e for e in entries if e.kind == "job" and e.payload == J2_END]
    (probe,) = [
        e for e in entries if e.kind == "health.probe" and e.logged_time == parse_time("2026-09-01T18:10:45Z")
    ]
    ran = acceptance.job_ran_engine
    assert ran(end, entries)

    def subject(e: Any, host: str | None) -> Any:
        s = {k: v for k, v in e.subject.items() if k != "host"}
        return dataclasses.replace(
            e, statement={**e.statement, "subject": s if host is None else {**s, "host": host}}
        )

    for host in (None, "", "  "):
        assert not ran(end, [subject(probe, host) if e is probe else e for e in entries]), host
        assert not ran(subject(end, host), entries), host
