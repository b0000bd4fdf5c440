"""Issue 11, audit 50 f2: a policy bound on a figure no approved run can produce (``ttft_ms.p95@c8`` when the
approved levels are 1, 4, 32; ``ttft_ms.P95@c4``) loaded, and failed every engine as "figure missing" → NOT
QUALIFIED — PERFORMANCE. The figure names have one grammar, ``ledger.policy.bounds`` (the harness builds its
figures with it), and ``bound_problems`` refuses such a bound, naming it."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

import ledger.collectors.benchmark as benchmark_module
from ledger.policy.bounds import GRAMMAR, PARITY_FIGURE, bound_problems, figure_names

REPO = Path(__file__).resolve().parents[2]
SHIPPED = tomllib.loads((REPO / "policies" / "backend-qualification.toml").read_text())["params"]
LEVELS = [1, 4, 32]


def _with(**params: Any) -> dict[str, Any]:
    return {"benchmark_concurrency": LEVELS, **params}


def test_the_shipped_bounds_name_figures_the_approved_run_records() -> None:
    assert bound_problems(SHIPPED) == []


@pytest.mark.parametrize(
    "name",
    [
        "ttft_ms.p95@c4",
        "ttft_ms.mean@c32",
        "tpot_ms.p50@c1",
        "itl_ms.p99@c4",
        "e2e_ms.p95@c32",
        "request_throughput@c4",
        "output_throughput@c32",
        "error_rate@c1",
        "duration_s@c4",
        "client_stall_ms.max@c4",
        "client_stall_ms.total@c32",
        "error_rate",
        "c1_parity",
    ],
)
@pytest.mark.parametrize("side", ["benchmark_max", "benchmark_min"])
def test_a_bound_on_a_figure_the_approved_run_records_still_loads(name: str, side: str) -> None:
    assert bound_problems(_with(**{side: {name: 1}})) == []


@pytest.mark.parametrize(
    ("name", "said"),
    [
        pytest.param(
            "ttft_ms.p95@c8",
            "names level c8, which the approved benchmark does not run",
            id="level-not-approved",
        ),
        pytest.param("ttft_ms.P95@c4", "did you mean 'ttft_ms.p95@c4'", id="stat-cased"),
        pytest.param("ttft_ms.p95@C4", "did you mean 'ttft_ms.p95@c4'", id="level-cased"),
        pytest.param(
            "ttft_ms.p90@c4", "no run of the approved benchmark records", id="percentile-not-computed"
        ),
        pytest.param("ttft_ms.p95", "did you mean 'ttft_ms.p95@c", id="level-dropped"),
        pytest.param("ttft.p95@c4", "no run of the approved benchmark records", id="metric-renamed"),
        pytest.param("ttft_ms.p95@c4 ", "no run of the approved benchmark records", id="trailing-space"),
        pytest.param("ttft_ms.p95@4", "no run of the approved benchmark records", id="level-without-c"),
        pytest.param(
            "client_stall_ms.p95@c4", "no run of the approved benchmark records", id="stall-percentile"
        ),
        pytest.param("error_rate@c8", "names level c8", id="level-figure-not-approved"),
        pytest.param("c1_parity ", "no run of the approved benchmark records", id="parity-misspelt"),
        pytest.param("score", "no run of the approved benchmark records", id="semantic-figure"),
    ],
)
@pytest.mark.parametrize("side", ["benchmark_max", "benchmark_min"])
def test_a_bound_on_a_figure_no_approved_run_records_is_refused_naming_it(
    name: str, said: str, side: str
) -> None:
    ok = {"ttft_ms.p95@c4": 2000}  # a valid bound beside it does not hide it
    [(param, problem)] = bound_problems(_with(**{side: {**ok, name: 1}}))
    assert param == side
    assert repr(name) in problem and said in problem, problem


def test_parity_bound_without_level_1_approved_is_refused() -> None:
    [(param, problem)] = bound_problems(
        {"benchmark_concurrency": [4, 32], "benchmark_min": {PARITY_FIGURE: 1.0}}
    )
    assert param == "benchmark_min" and "measured at level 1" in problem


@pytest.mark.parametrize(
    ("params", "said"),
    [
        pytest.param(
            _with(benchmark_max={"ttft_ms.p95@c4": "2000"}),
            "must be a finite number, not '2000'",
            id="limit-text",
        ),
        pytest.param(
            _with(benchmark_max={"ttft_ms.p95@c4": True}),
            "must be a finite number, not True",
            id="limit-bool",
        ),
        pytest.param(
            _with(benchmark_max={"ttft_ms.p95@c4": float("nan")}), "must be a finite number", id="limit-nan"
        ),
        pytest.param(_with(benchmark_max=[2000]), "must be a table of figure = bound", id="table-list"),
        pytest.param(
            {"benchmark_max": {"error_rate": 0}}, "benchmark_concurrency = None", id="levels-dropped"
        ),
        pytest.param(
            {"benchmark_concurrency": [1, "4"], "benchmark_max": {"error_rate": 0}},
            "not a list of",
            id="levels-text",
        ),
        pytest.param(
            {"benchmark_concurrency": 4, "benchmark_max": {"error_rate": 0}}, "not a list of", id="levels-int"
        ),
        pytest.param(
            {"benchmark_concurrency": [], "benchmark_max": {"error_rate": 0}},
            "not a list of",
            id="levels-empty",
        ),
        pytest.param(
            {"benchmark_concurrency": [True, 4], "benchmark_max": {"error_rate": 0}},
            "not a list of",
            id="levels-bool",
        ),
    ],
)
def test_mistyped_bounds_or_levels_are_refused(params: dict[str, Any], said: str) -> None:
    problems = bound_problems(params)
    assert problems and said in problems[0][1], problems


def test_a_policy_that_bounds_nothing_is_not_checked() -> None:
    assert bound_problems({"benchmark_concurrency": "whatever"}) == []  # no bounds: nothing to check
    assert bound_problems({}) == []


def test_the_harness_records_exactly_the_figure_names_the_grammar_knows() -> None:
    """One grammar: every figure the harness records is a name ``figure_names`` knows, and every name it
    knows the harness records (a bound can name nothing the harness never writes)."""
    empty = benchmark_module.level_figures([], None)
    for levels in ([1, 4, 32], [4, 32], [1], [2, 8]):
        aggregate = {f"c{c}": empty for c in levels}
        parity = {"fraction": 1.0} if 1 in levels else None
        recorded = set(benchmark_module._flat_figures(aggregate, parity))
        assert recorded == set(figure_names(levels)), recorded ^ set(figure_names(levels))


def test_the_grammar_as_the_refusal_states_it_names_every_family() -> None:
    for word in ("ttft_ms", "p95", "mean", "client_stall_ms", "max|total", "error_rate", "c1_parity"):
        assert word in GRAMMAR
