"""Fix 146 (perf, behaviour unchanged): the restore check built a reason's text for every probe × end.

``check routing-change --action restore`` asks of every probe in the window, against every recorded end of
a run (``routing._recorded_ends``), whether that end shows the probe as a gone engine's
(``routing._before_end``). ``_before_end`` formatted its message (ids, times, the job's state) before it
decided anything: with 20k entries in the window, ~1.4 million calls and ~65% of the check's time went to
text that was thrown away. The rule is now decided first (``routing._drops``, O(1) a pair, one copy that
``_before_end`` reads too) and the text is built once, for the end the check reports. These tests pin the
rule's truth table, that ``_before_end``'s reasons read as before, and that the check builds one reason per
probe it drops — no more."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

import tests.policy.conftest as policy_conftest
from ledger.entries import format_time
from ledger.errors import LedgerError
from ledger.policy import routing
from tests.policy.test_fix138_restore_job_never_ran import (
    ASLEEP,
    CAMP,
    HEALTH,
    MODELS,
    PROD,
    READY,
    SEED000,
    STALE,
    _dropped,
    _earlier_job,
    _log,
    _restore,
    _scenario,
)

build = policy_conftest.build  # a ledger built from a policy fixture file

END = datetime.fromisoformat("2026-09-01T18:11:00+00:00")
SEC = timedelta(seconds=1)


class _Entry:
    """What ``_drops`` and ``_before_end`` read of an entry; ``observed`` None: its time cannot be read."""

    def __init__(
        self,
        seq: int,
        observed: datetime | None = None,
        *,
        kind: str = "health.probe",
        payload: dict[str, Any] | None = None,
        collected_at: Any = "2026-09-01T18:10:50Z",
    ) -> None:
        self.seq, self.kind, self.payload = seq, kind, payload or {}
        self.id = f"{seq:064x}"
        self.logged_at = f"2026-09-01T18:{10 + seq:02d}:00Z"
        self.statement = {"collected_at": collected_at}
        self._observed = observed

    @property
    def observed_time(self) -> datetime:
        if self._observed is None:
            raise LedgerError(f"collected_at {self.statement['collected_at']!r} is no time")
        return self._observed


PROBE_SEQ = 5
LAUNCH = _Entry(7, kind="engine.launch")
JOB = _Entry(7, kind="job", payload={"job_id": "j2", "state": "cancelled"})
LAUNCH_BEFORE = _Entry(3, kind="engine.launch")  # logged before the probe
SEEN = {"before": END - SEC, "at": END, "after": END + SEC, "unreadable": None}

# (by_claim, end entry logged after the probe, observed) -> dropped
TRUTH = {
    (True, True, "before"): True,
    (True, True, "at"): True,
    (True, True, "after"): True,  # a pass the log took before the end entry: credit taken away
    (True, True, "unreadable"): True,
    (True, False, "before"): True,  # a pass claiming a time at or before the end: credit taken away
    (True, False, "at"): True,
    (True, False, "after"): False,  # the case that must still pass: a pass after the run, logged after it
    (True, False, "unreadable"): True,  # a claim that cannot be read takes credit away too
    (False, True, "before"): True,  # a failure of the gone engine: logged before, observed at/before the end
    (False, True, "at"): True,
    (False, True, "after"): False,  # seen after the end (audit 90 f2)
    (False, True, "unreadable"): False,  # its time cannot be read: not dropped
    (False, False, "before"): False,  # logged after the end entry: no claimed time drops it (audit 87 f2)
    (False, False, "at"): False,
    (False, False, "after"): False,
    (False, False, "unreadable"): False,
}


@pytest.mark.parametrize(("by_claim", "logged_before", "seen"), list(TRUTH), ids=str)
def test_drops_decides_the_rule_before_end_reports(by_claim: bool, logged_before: bool, seen: str) -> None:
    """``_drops`` is ``_before_end``'s rule (one copy): the same answer on every combination of a pass or a
    failure, the end entry logged after or before the probe, the probe observed before, at, after the end
    or at no readable time — and ``_before_end`` returns a reason exactly where it drops."""
    e = _Entry(PROBE_SEQ, SEEN[seen])
    x = LAUNCH if logged_before else LAUNCH_BEFORE
    want = TRUTH[(by_claim, logged_before, seen)]
    assert routing._drops(e, routing._observed(e), x, END, by_claim=by_claim) is want  # type: ignore[arg-type]
    why = routing._before_end(e, x, END, by_claim=by_claim)  # type: ignore[arg-type]
    assert (why is not None) is want, why
    if why is not None:
        assert STALE in why


def test_before_end_reasons_read_as_before() -> None:
    """The text of each branch is unchanged: a failure (log order and observed time), a pass the log took
    before the end entry, a pass claiming an earlier time, one whose claimed time cannot be read; a job's
    end names the job, its state and entry."""
    tail = (
        ": it probed an engine that is gone since and shows nothing of the one serving now (a restoration is "
        "judged on probes taken after the last recorded end of a run of the subject)"
    )
    over = f"engine launch {LAUNCH.id[:16]} (logged {LAUNCH.logged_at}) records its run over at "
    over += format_time(END)
    e = _Entry(PROBE_SEQ, END - SEC)
    seen = format_time(END - SEC)
    assert routing._before_end(e, LAUNCH, END, by_claim=False) == (  # type: ignore[arg-type]
        f"the log took it (logged {e.logged_at}, observed {seen}) before {over}{tail}"
    )
    assert (
        routing._before_end(e, LAUNCH, END) == f"the log took it (logged {e.logged_at}) before {over}{tail}"
    )  # type: ignore[arg-type]
    over_before = over.replace(LAUNCH.id[:16], LAUNCH_BEFORE.id[:16]).replace(
        LAUNCH.logged_at, LAUNCH_BEFORE.logged_at
    )
    assert routing._before_end(e, LAUNCH_BEFORE, END) == (  # type: ignore[arg-type]
        f"observed {seen}, not after {over_before}{tail}"
    )
    bad = _Entry(PROBE_SEQ, None, collected_at=12)
    assert routing._before_end(bad, LAUNCH_BEFORE, END) == (  # type: ignore[arg-type]
        f"observed at 12 (no time), not after {over_before}{tail}"
    )
    why = routing._before_end(e, JOB, END, by_claim=False)  # type: ignore[arg-type]
    assert why is not None
    assert why.startswith(
        f"the log took it (logged {e.logged_at}, observed {seen}) before "
        f"job 'j2' (cancelled, entry {JOB.id[:16]}) (logged {JOB.logged_at}) records its run over at "
    ), why


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    calls: list[str | None] = []
    real = routing._before_end

    def spy(*a: Any, **k: Any) -> str | None:
        calls.append(why := real(*a, **k))
        return why

    monkeypatch.setattr(routing, "_before_end", spy)
    return calls


def test_restore_check_builds_one_reason_per_dropped_probe(
    build: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (fix 146): the restore check built a reason for every probe × end. Many probes against
    many recorded ends: it builds one per probe it drops, each one it reports, and the answer is the one
    it gives with no spy."""
    b = build(SEED000)
    dead = []
    # three jobs of the subject that ran and ended; production passing, then asleep, in each
    for k in range(3):
        m, j = 14 + k, {"job_id": f"j{k}", "started_at": f"2026-09-01T18:{14 + k}:00Z"}
        _log(b, "job", CAMP, {**j, "state": "running"}, f"2026-09-01T18:{m}:00Z")
        _log(b, "health.probe", CAMP, HEALTH, f"2026-09-01T18:{m}:05Z")
        _log(b, "health.probe", PROD, HEALTH, f"2026-09-01T18:{m}:10Z")
        dead.append(_log(b, "health.probe", PROD, ASLEEP, f"2026-09-01T18:{m}:15Z"))
        launch = {"engine": "llamacpp", "command": ["llama-server"], "started_at": f"2026-09-01T18:{m}:01Z",
                  "ready": True, "ended_at": f"2026-09-01T18:{m}:30Z"}  # fmt: skip
        _log(b, "engine.launch", CAMP, launch, f"2026-09-01T18:{m}:32Z")
        _log(
            b,
            "job",
            CAMP,
            {**j, "state": "succeeded", "ended_at": f"2026-09-01T18:{m}:31Z"},
            f"2026-09-01T18:{m}:33Z",
        )
    for i, p in enumerate((HEALTH, MODELS, READY)):
        _log(b, "health.probe", PROD, p, f"2026-09-01T18:20:0{i}Z")
    plain = _restore(b)
    calls = _counting(monkeypatch)
    r = _restore(b)
    assert r == plain
    dropped = [row["detail"] for row in r["ignored"] if STALE in row["detail"]]
    assert set(dead) <= _dropped(r), r["ignored"]
    assert len(dropped) >= 6, r["ignored"]
    assert calls == dropped, (calls, dropped)
    assert r["allowed"] is True, r["reasons"]


def test_restore_check_with_a_failure_kept_builds_no_reason_for_it(
    build: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The neighbour: a failure no end drops (the job never ran, fix 138) has no reason built, and still
    refuses; the earlier passes the ends take credit from each get theirs."""
    b = build(SEED000)
    dead = _scenario(b)
    plain = _restore(b)
    calls = _counting(monkeypatch)
    r = _restore(b)
    assert r == plain
    assert dead in r["probes"] and dead not in _dropped(r), r["ignored"]
    assert calls == [row["detail"] for row in r["ignored"] if STALE in row["detail"]]
    assert r["allowed"] is False, r["reasons"]


def test_restore_check_with_no_recorded_end_builds_no_reason(
    build: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No run of the subject ended in the window: nothing is dropped and no reason is built."""
    b = build(SEED000)
    for i in range(3):
        _log(b, "health.probe", PROD, ASLEEP, f"2026-09-01T18:12:0{i}Z")
    calls = _counting(monkeypatch)
    r = _restore(b)
    assert calls == []
    assert not _dropped(r), r["ignored"]


def test_earlier_job_only_still_drops_earlier_passes(build: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """One ended job and a pass logged while it ran: its credit taken away, one reason built each."""
    b = build(SEED000)
    _earlier_job(b)
    calls = _counting(monkeypatch)
    r = _restore(b)
    assert calls == [row["detail"] for row in r["ignored"] if STALE in row["detail"]]
