"""Issue 11 (fix 42): ``_mark_newer_runs`` compared every harness run with every other (a campaign of
n runs cost n² ``_same_measurement`` calls). Runs are now grouped by their spec; the newest runs of each
measurement are what the pairwise comparison gave (a property test against it), and the comparisons grow
with the number of specs, not the number of runs."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.policy import acceptance
from ledger.policy.acceptance import _UNREAD, _newest_by_spec, _same_measurement, typed
from ledger.policy.snapshot import newest_entries

T0 = datetime(2026, 9, 10, 9, 0, tzinfo=UTC)


@dataclass(eq=False)
class Run:
    """What ``newest_entries`` reads of an entry: its log position and observed time."""

    seq: int
    observed_time: datetime


def pairwise(runs: list[tuple[tuple[Any, ...], Run]]) -> dict[int, set[int]]:
    """The comparison the grouping replaced: every run against every other."""
    return {
        run.seq: {n.seq for n in newest_entries(r for s, r in runs if r is run or _same_measurement(spec, s))}
        for spec, run in runs
    }


field = st.sampled_from([_UNREAD, typed(1), typed(2)])
spec = st.tuples(st.sampled_from([typed("benchmark"), typed("semantic")]), field, field, field, field)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(spec, st.integers(0, 5)), min_size=1, max_size=25))
def test_grouped_newest_runs_equal_every_run_against_every_other(items: list[tuple[Any, int]]) -> None:
    runs = [(s, Run(i, T0 + timedelta(minutes=m))) for i, (s, m) in enumerate(items)]
    grouped = _newest_by_spec(runs)
    assert {run.seq: {n.seq for n in grouped[s]} for s, run in runs} == pairwise(runs)


def test_a_run_that_drops_a_field_is_still_compared_with_every_run_of_its_gate() -> None:
    """Fail closed: a newer failed run without its corpus digest still hides the older pass of each spec."""
    a = (typed("benchmark"), typed("corpus-a"), typed(96), typed([1]), typed(2))
    b = (typed("benchmark"), typed("corpus-b"), typed(96), typed([1]), typed(2))
    dropped = (typed("benchmark"), _UNREAD, typed(96), typed([1]), typed(2))
    other_gate = (typed("semantic"), _UNREAD, typed(96), typed([1]), typed(2))
    older_a, older_b = Run(0, T0), Run(1, T0)
    newer, other = Run(2, T0 + timedelta(hours=1)), Run(3, T0 + timedelta(hours=2))
    grouped = _newest_by_spec([(a, older_a), (b, older_b), (dropped, newer), (other_gate, other)])
    assert grouped[a] == [newer] and grouped[b] == [newer] and grouped[dropped] == [newer]
    assert grouped[other_gate] == [other]


@dataclass(eq=False)
class GateRun:
    """What ``_mark_newer_runs`` reads of a ``gate.result``."""

    seq: int
    observed_time: datetime
    payload: dict[str, Any]
    id: str = ""
    kind: str = "gate.result"
    in_subject: bool = True
    derived_: dict[str, Any] | None = None


def test_many_runs_of_one_spec_are_not_compared_pairwise(monkeypatch) -> None:
    calls = [0]

    def counting(older: tuple[Any, ...], newer: tuple[Any, ...]) -> bool:
        calls[0] += 1
        return _same_measurement(older, newer)

    monkeypatch.setattr(acceptance, "_same_measurement", counting)
    payload = {
        "gate": "benchmark",
        "status": "passed",
        "bounds": {"corpus_digest": "blake3:aa", "concurrency": [1, 4, 32], "repetitions": 2},
        "counts": {"requests": 96},
    }
    runs = [GateRun(i, T0 + timedelta(seconds=i), payload, id=f"{i:064x}", derived_={}) for i in range(600)]
    newest_of = acceptance._mark_newer_runs(runs, set(), {})  # type: ignore[arg-type]
    assert list(newest_of) == [runs[-1].id]
    assert all(r.derived_ and r.derived_["newer_run"] for r in runs[:-1])
    assert calls[0] <= 10, calls[0]  # was 600 × 600
