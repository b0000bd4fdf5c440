"""The one rule for the reference time a recorded judgement may carry (``ledger verdict --record``, ``ledger
check routing-change --record``).

A judgement is recorded as the log's word that, at its reference time, the ledger said so. It is signed and
appended now, so its reference time must be one the log has reached and the clock has reached:

* not before the log time of the last entry it read (``--now`` in the past): the ledger it judged did not
  exist then — a past what-if is for reading;
* not after the clock (``--now`` in the future): evidence that still stands now may have aged out by then
  (a standing failure past its bound, a verdict's freshness), so a decision judged tomorrow and signed today
  would record a route, or a verdict, the gate refuses today — a future what-if is for reading too.

A reference time before the clock (a stated ``--now``, at or after the log's head) records a pass only where
the judgement at the clock passes too (``refuse_pass_not_holding_now``): evidence stale now is not signed
QUALIFIED, and a route refused now is not recorded as allowed. A failure judged then may be recorded (it is
what the log said then; replay judges it again at that time).

No clock-skew tolerance (``RECORD_FUTURE_TOLERANCE`` is zero): the clock the reference time is compared with
is the one that stamps the entry's ``logged_at`` (this process's), and a reference time left out is read
from that same clock, so a judgement recorded without ``--now``, or with ``--now now``, is never refused by
it; any tolerance would let a judgement that many seconds ahead pass (fail closed).

The log a recorded judgement is held to (``read_size``) is the whole log as it stands when it is recorded,
unless the caller says what it read (``read``: its size when the judgement was asked, which a past ``--now``
cuts): never only the log the judgement itself cut (its checkpoint), else a what-if as of a past time — a
checkpoint cut before an entry logged since (a supersession withdrawing its evidence) — would be signed now.
A pass judged before the clock is judged again at the clock on the whole log as it then stands (not at the
judgement's own checkpoint: ``verdict.judge_again_at``, ``routing.decision_again_at``); a caller that gives
no way to judge it again (``judge_at`` None) records no pass judged before the clock (``not_judged_again``).
Every record call passes here: ``ledger verdict --record``, ``ledger check routing-change --record``,
``Ledger.record_verdict`` / ``Ledger.record_routing_change``, ``policy.verdict.record_verdict`` /
``policy.routing.record_routing_change``.

A judgement read (not recorded) at a stated reference time judges the log as it stood then
(``size_as_of``): the entries it took at or before that time, never one it took later claiming an earlier
time.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from ledger.entries import format_time, now_utc, parse_time
from ledger.errors import InputError

if TYPE_CHECKING:
    from ledger.policy.port import PolicyLedger as Ledger

__all__ = [
    "RECORD_FUTURE_TOLERANCE",
    "not_judged_again",
    "read_size",
    "record_clock",
    "refuse_pass_not_holding_now",
    "refuse_unrecordable_judgement",
    "refuse_unrecordable_time",
    "size_as_of",
]

# how far after the clock a recorded judgement's reference time may lie: none (see the module's text)
RECORD_FUTURE_TOLERANCE = timedelta(0)


def record_clock() -> datetime:
    """The clock a recorded judgement's reference time is held to (the one that stamps the entry's
    ``logged_at``): read once by a caller that judges and records (``ledger verdict --record``, ``ledger
    check routing-change --record``), and passed to the record_* call as its ``clock``."""
    return now_utc()


def read_size(ledger: Ledger, checkpoint: int, read: int | None) -> int:
    """The log a judgement judged on its first ``checkpoint`` entries is held to when it is recorded: the
    later of its checkpoint and the log the caller says it read (``read``: the log's size when it asked;
    None: the log as it stands now, ``ledger.size()``) — the log's times never run back, so the larger
    size ends with the later entry. A ``read`` that is not a size of this log (mistyped, negative, or
    beyond its head) is refused (InputError): it would hold the judgement to no log at all."""
    if read is None:
        return max(checkpoint, ledger.size())
    if not isinstance(read, int) or isinstance(read, bool) or not 0 <= read <= ledger.size():
        raise InputError(
            f"read={read!r}: the log a recorded judgement read is a size of this log (an integer from 0 "
            f"to {ledger.size()}): nothing recorded",
            hint="leave read out (the log as it stands now), or give its size when the judgement was asked",
        )
    return max(checkpoint, read)


def not_judged_again(when: datetime) -> tuple[bool, str]:
    """The answer at the clock of a record call whose caller gave no way to judge its pass again
    (``judge_at`` None): not passing — whether it holds now is unknown, so it is not signed."""
    return False, "not judged again (the caller gave no judge_at): whether it passes now is unknown"


def refuse_unrecordable_time(
    ledger: Ledger, size: int, when: datetime, what: str, *, clock: datetime | None = None
) -> None:
    """Refuse (InputError: exit 2, nothing recorded) to record a judgement — ``what``: ``verdict``,
    ``routing decision`` — made at reference time ``when`` on the log's first ``size`` entries, where
    ``when`` is before the log time of the last of them or after the clock (``clock``, default now: the
    time the entry is logged at). A ``size`` out of range is left to the judgement to report."""
    if 0 < size <= ledger.size():
        with ledger.repo.read() as conn:
            head_at = ledger.repo.logged_at(conn, size - 1)
        if when < parse_time(head_at):
            raise InputError(
                f"cannot record a {what} judged at {format_time(when)}: the log it read ends with an entry "
                f"logged at {head_at} (seq {size - 1}), after that time",
                hint=f"record without --now (the {what} is judged now), or judge the past without --record",
            )
    now = clock if clock is not None else now_utc()
    if when > now + RECORD_FUTURE_TOLERANCE:
        raise InputError(
            f"cannot record a {what} judged at {format_time(when)}: that is after the clock "
            f"({format_time(now)}): evidence that stands now may no longer stand then (a failure past its "
            "bound, a verdict gone stale), and what is recorded now is judged now",
            hint=f"record without --now (the {what} is judged now), or judge the future without --record",
        )


def refuse_pass_not_holding_now(
    what: str,
    passed: str | None,
    when: datetime,
    judge_at: Callable[[datetime], tuple[bool, str]],
    *,
    clock: datetime | None = None,
) -> None:
    """Refuse (InputError: exit 2, nothing recorded) to record a passing judgement — ``passed``: its word
    (``QUALIFIED``, ``allowed``), None where it does not pass — made at a reference time ``when`` before the
    clock (``clock``, default now), where ``judge_at(clock)`` — the same judgement at the clock: (whether it
    passes, what it says) — does not pass: its evidence no longer stands now (a host probe gone stale, a
    verdict past its bound), so the pass would be signed now on evidence the gate refuses now."""
    now = clock if clock is not None else now_utc()
    if passed is None or when >= now:
        return
    holds, text = judge_at(now)
    if not holds:
        raise InputError(
            f"cannot record a {what} judged at {format_time(when)} as {passed}: judged at the clock "
            f"({format_time(now)}) it is {text} — evidence that no longer stands now is not signed "
            "as passing",
            hint=f"record without --now (the {what} is judged now), or judge the past without --record",
        )


def refuse_unrecordable_judgement(
    ledger: Ledger,
    checkpoint: int,
    when: datetime,
    what: str,
    *,
    read: int | None = None,
    clock: datetime | None = None,
    passed: str | None = None,
    judge_at: Callable[[datetime], tuple[bool, str]] | None = None,
) -> None:
    """The one check a judgement passes before it is recorded (``record_verdict``,
    ``record_routing_change``; the CLI's ``--record`` asks nothing before them): the clock is read once
    (``clock``, default now), then its reference time ``when`` against the log it is held to
    (``read_size``: its ``checkpoint``, or the log the caller read — ``read``, else the whole log as it
    stands — where later) and that clock (``refuse_unrecordable_time``), then a pass (``passed``) judged
    before the clock against the same judgement at the clock (``judge_at``; None: ``not_judged_again``,
    refused) (``refuse_pass_not_holding_now``). InputError (exit 2, nothing recorded) names the first
    rule broken."""
    now = clock if clock is not None else now_utc()
    refuse_unrecordable_time(ledger, read_size(ledger, checkpoint, read), when, what, clock=now)
    refuse_pass_not_holding_now(what, passed, when, judge_at or not_judged_again, clock=now)


def size_as_of(ledger: Ledger, at: int | None, when: datetime | None) -> int | None:
    """The log as it stood at ``when`` (a judgement's ``--now``): how many entries it held then — those the
    log took at or before ``when``. Evidence logged after the time a judgement is made at did not exist
    then, whatever earlier time it claims (a probe uploaded late from a spool), so a judgement "as of
    ``when``" reads only these: asked again later it says the same. The one rule for it, that ``ledger
    verdict --now`` and the routing gate (``check routing-change --now``, ``POST /v1/routing-check``) keep.

    The log's clock never runs back, so the count is found by bisection on the log times. With ``at``
    (``--at``: a size the caller names) that size must not read past ``when`` (InputError naming the first
    entry after it); without an entry at or before ``when`` there is nothing to judge (InputError). ``when``
    None, or an ``at`` out of range, returns ``at`` as given (the judgement reports a size out of range)."""
    total = ledger.size()
    limit = total if at is None else at
    if when is None or not 0 < limit <= total:
        return at
    with ledger.repo.read() as conn:
        lo, hi = 0, limit  # entries [0, lo) were logged at or before ``when``; [hi, limit) after it
        while lo < hi:
            mid = (lo + hi) // 2
            if parse_time(ledger.repo.logged_at(conn, mid)) <= when:
                lo = mid + 1
            else:
                hi = mid
        first_after = ledger.repo.logged_at(conn, lo) if lo < limit else None
    if lo == 0:
        raise InputError(
            f"the log holds no entry logged at or before {format_time(when)}: nothing to judge as of then",
            hint="judge as of a later time (--now)",
        )
    if at is not None and first_after is not None:
        raise InputError(
            f"--at {at} reads entries logged after --now {format_time(when)} (seq {lo}, logged "
            f"{first_after}): as of then the log had {lo} entries",
            hint=f"leave out --at (the log as it stood at --now), or --at {lo} or less",
        )
    return lo
