"""The benchmark's figure names: the one grammar the harness records figures by and a policy's bounds name.

The benchmark harness (``collectors/benchmark.py``) computes, for every concurrency level ``N`` it ran:

  ttft_ms.p50@cN, .p95, .p99, .mean       and the same for tpot_ms, itl_ms, e2e_ms (latency distributions)
  request_throughput@cN, output_throughput@cN, error_rate@cN, duration_s@cN
  client_stall_ms.max@cN, client_stall_ms.total@cN      (the harness's own scheduling stalls)

and for the whole run ``error_rate`` and, where level 1 ran, ``c1_parity`` (token parity across repetitions).
It builds each name with the functions below, and a policy's ``benchmark_max`` / ``benchmark_min`` are checked
against the same names when the policy loads (:func:`bound_problems`): a bound on a figure no run of the
approved spec (``benchmark_concurrency``) can produce — ``ttft_ms.p95@c8`` when the approved levels are 1, 4
and 32, ``ttft_ms.P95@c4`` — would fail every engine as "figure missing", so it is refused instead.

Here, not in the collectors: the policy layer does not import the collectors (pyproject's import-linter
contracts); both read this module.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from difflib import get_close_matches
from typing import Any

__all__ = [
    "BOUND_PARAMS",
    "DISTRIBUTION_METRICS",
    "DISTRIBUTION_STATS",
    "GRAMMAR",
    "LEVELS_PARAM",
    "LEVEL_METRICS",
    "PARITY_FIGURE",
    "PARITY_LEVEL",
    "PERCENTILES",
    "RUN_ERROR_RATE",
    "STALL_METRIC",
    "STALL_STATS",
    "bound_problems",
    "distribution_figure",
    "figure_names",
    "level_figure",
    "level_name",
]

PERCENTILES = (50, 95, 99)  # the percentiles of every latency distribution
DISTRIBUTION_METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")  # latency distributions, per level
DISTRIBUTION_STATS = (*(f"p{q}" for q in PERCENTILES), "mean")
LEVEL_METRICS = ("request_throughput", "output_throughput", "error_rate", "duration_s")  # one value per level
STALL_METRIC = "client_stall_ms"  # the harness's own scheduling stalls while a level ran …
STALL_STATS = ("max", "total")  # … the figures of them a bound may name
RUN_ERROR_RATE = "error_rate"  # failed requests over every request of the run
# the figure c1 repeatability is judged by (DESIGN §4: "repeatability by token parity across repetitions at
# temperature 0"), measured at PARITY_LEVEL
PARITY_FIGURE = "c1_parity"
PARITY_LEVEL = 1
# the policy params that bound figures (figure name → limit), and the one that says which levels run
BOUND_PARAMS = ("benchmark_max", "benchmark_min")
LEVELS_PARAM = "benchmark_concurrency"
_LEVEL = re.compile(r"c[1-9][0-9]*")  # a level as a figure name writes it (``level_name``)


# the grammar as a bound's refusal states it
GRAMMAR = (
    f"{{{'|'.join(DISTRIBUTION_METRICS)}}}.{{{'|'.join(DISTRIBUTION_STATS)}}}@cN, "
    f"{STALL_METRIC}.{{{'|'.join(STALL_STATS)}}}@cN, {{{'|'.join(LEVEL_METRICS)}}}@cN (N an approved level), "
    f"{RUN_ERROR_RATE}, or {PARITY_FIGURE} (where level {PARITY_LEVEL} is approved)"
)


def level_name(level: int) -> str:
    """``c4``: how a figure name and the harness's per-level aggregate name a concurrency level."""
    return f"c{level}"


def distribution_figure(metric: str, stat: str, level: int) -> str:
    """``ttft_ms.p95@c4``: a statistic of a latency distribution at one level."""
    return f"{metric}.{stat}@{level_name(level)}"


def level_figure(metric: str, level: int) -> str:
    """``error_rate@c4``: a per-level figure (``LEVEL_METRICS``)."""
    return f"{metric}@{level_name(level)}"


def figure_names(levels: Iterable[int]) -> frozenset[str]:
    """Every figure a run at ``levels`` can record (``c1_parity`` only where level 1 runs)."""
    names: set[str] = {RUN_ERROR_RATE}
    for level in levels:
        names.update(
            distribution_figure(m, s, level) for m in DISTRIBUTION_METRICS for s in DISTRIBUTION_STATS
        )
        names.update(level_figure(m, level) for m in LEVEL_METRICS)
        names.update(distribution_figure(STALL_METRIC, s, level) for s in STALL_STATS)
        if level == PARITY_LEVEL:
            names.add(PARITY_FIGURE)
    return frozenset(names)


def _whole_positive(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def bound_problems(params: Mapping[str, Any]) -> list[tuple[str, str]]:
    """What is wrong with a policy's benchmark bounds, as (param, problem): a table that is not one of
    figure = number, a limit that is no finite number, or a figure no run of the approved spec can produce
    (a level outside ``benchmark_concurrency``, a misspelt or mis-cased name — the nearest known name is
    suggested). Empty where every bound names a figure the approved run records, or the policy sets none.
    A policy that bounds figures but approves no levels it can name (``benchmark_concurrency`` missing, or
    not a list of whole numbers ≥ 1) cannot have its bounds checked: that is a problem too (fail closed)."""
    set_here = [p for p in BOUND_PARAMS if p in params]
    if not set_here:
        return []
    levels = params.get(LEVELS_PARAM)
    if not isinstance(levels, list) or not levels or not all(_whole_positive(c) for c in levels):
        return [
            (
                set_here[0],
                f"bounds figures, but {LEVELS_PARAM} = {levels!r} is not a list of concurrency levels (whole "
                "numbers ≥ 1): which figures an approved run records cannot be told",
            )
        ]
    known = figure_names(levels)
    approved = ", ".join(str(c) for c in levels)
    problems: list[tuple[str, str]] = []
    for param in set_here:
        table = params[param]
        if not isinstance(table, Mapping):
            problems.append((param, f"must be a table of figure = bound, not {table!r}"))
            continue
        for name, limit in table.items():
            if isinstance(limit, bool) or not isinstance(limit, int | float) or not math.isfinite(limit):
                problems.append((param, f"bound {name!r} must be a finite number, not {limit!r}"))
            if name in known:
                continue
            base, _, level = str(name).rpartition("@")
            if base and _LEVEL.fullmatch(level) and f"{base}@{level_name(levels[0])}" in known:
                problems.append(
                    (
                        param,
                        f"bound {name!r} names level {level}, which the approved benchmark does not run "
                        f"({LEVELS_PARAM} = {levels}): no approved run records it, so every engine would "
                        "fail it as a figure missing",
                    )
                )
                continue
            if str(name) == PARITY_FIGURE:
                problems.append(
                    (
                        param,
                        f"bound {name!r} is measured at level {PARITY_LEVEL}, which the approved benchmark "
                        f"does not run ({LEVELS_PARAM} = {levels})",
                    )
                )
                continue
            near = get_close_matches(str(name), sorted(known), n=1, cutoff=0.8)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            problems.append(
                (
                    param,
                    f"bound {name!r} names a figure no run of the approved benchmark records{hint}: the "
                    f"approved levels ({LEVELS_PARAM}) are {approved}, and a figure is one of {GRAMMAR}; "
                    "every engine would fail it as a figure missing",
                )
            )
    return problems
