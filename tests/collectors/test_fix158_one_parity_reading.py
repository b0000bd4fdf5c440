"""Fix 158 (duplicates D4): one reading of c1 parity.

``collectors.benchmark.repeatability`` (the harness's ``bounds.parity`` of its live records) and
``ledger.policy.acceptance.parity_of`` (the policy's reading of the stored ``benchmark-requests.jsonl``) were
two copies held equal by a test. The reading is now ``ledger.answers.parity_of``, over records as the run
stores them; the harness calls it on ``[r.to_json() for r in records]`` (adding ``asked``, what its spec
asked), so what it records is what the stored record shows by construction.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import ledger.collectors.benchmark as benchmark_module
from ledger.answers import parity_of
from ledger.collectors.benchmark import BenchmarkSpec, RequestRecord, repeatability, run_benchmark
from ledger.collectors.corpus import corpus_digest
from tests.engines.stub_openai import StubConfig, serve_stub


def rec(level: int, rep: int, index: int, **kw: Any) -> RequestRecord:
    base = {"output_digest": f"d{index % 5}", "output_tokens": 4, "tokens_from": "usage"}
    return RequestRecord(f"p{index % 5}", level, rep, index, "t", 0.0, **{**base, **kw})


def stored(records: list[RequestRecord]) -> list[dict[str, Any]]:
    """As ``benchmark-requests.jsonl`` holds them, read back."""
    return [json.loads(json.dumps(r.to_json(), sort_keys=True)) for r in records]


def test_the_harness_has_no_reading_of_its_own() -> None:
    assert not hasattr(benchmark_module, "_same_output")
    records = [rec(1, r, i) for r in (0, 1) for i in range(5)]
    assert repeatability(records, 1) == parity_of(stored(records), 1, token_ids_asked=False)
    assert repeatability(records, 1, token_ids_asked=True) == parity_of(
        stored(records), 1, token_ids_asked=True
    )


def test_parity_of_records_asked_only_where_told() -> None:
    records = stored([rec(1, r, i) for r in (0, 1) for i in range(5)])
    read_back = parity_of(records, 1)
    assert read_back is not None and "asked" not in read_back  # the policy's reading: no spec to say
    told = parity_of(records, 1, token_ids_asked=True)
    assert told == {**read_back, "asked": "token_ids"}
    assert parity_of(records, 1, token_ids_asked=False) == {**read_back, "asked": "text"}


def test_parity_of_all_matched() -> None:
    p = parity_of(stored([rec(1, r, i) for r in (0, 1, 2) for i in range(5)]), 1)
    assert p == {
        "level": 1,
        "compared": 10,
        "matched": 10,
        "fraction": 1.0,
        "prompts": 5,
        "prompts_mismatched": [],
        "token_counts_differ": [],
        "by": "text",
    }


def test_parity_of_reordered_records_is_the_same() -> None:
    records = stored(
        [rec(1, r, i, output_digest=f"d{i}-{r}" if i == 2 else f"d{i}") for r in (0, 1) for i in range(5)]
    )
    assert parity_of(records, 1) == parity_of(list(reversed(records)), 1)
    p = parity_of(records, 1)
    assert p is not None and p["prompts_mismatched"] == ["p2"] and p["matched"] == 4


def test_parity_of_the_same_text_as_other_tokens_differs() -> None:
    p = parity_of(stored([rec(1, r, i, output_tokens=4 + r * (i == 1)) for r in (0, 1) for i in range(5)]), 1)
    assert p is not None and p["token_counts_differ"] == ["p1"] and p["prompts_mismatched"] == ["p1"]


@pytest.mark.parametrize(
    ("change", "by", "matched"),
    [
        ({}, "token_ids", 5),
        ({"token_ids_digest": None}, "text", 5),  # one output's ids dropped: compared by text
        ({"token_ids_digest": "other"}, "token_ids", 4),  # other ids: not the same output
    ],
)
def test_parity_of_by_token_ids_only_where_every_output_carries_them(
    change: dict[str, Any], by: str, matched: int
) -> None:
    records = stored([rec(1, r, i, token_ids_digest=f"t{i}") for r in (0, 1) for i in range(5)])
    records[-1].update(change)
    p = parity_of(records, 1)
    assert p is not None and (p["by"], p["matched"]) == (by, matched)


@pytest.mark.parametrize("error", ["boom", "", "stopped: the lease"])
def test_parity_of_an_output_with_any_error_is_not_compared(error: str) -> None:
    """An error of any text — an empty one too — is no completed output (fail closed: never compared)."""
    records = stored([rec(1, r, i) for r in (0, 1) for i in range(5)])
    records[-1]["error"] = error
    p = parity_of(records, 1)
    assert p is not None and p["compared"] == 4


def test_parity_of_another_level_or_a_mistyped_one_is_not_c1() -> None:
    records = stored([rec(1, r, i) for r in (0, 1) for i in range(5)])
    records[-1]["level"] = "1"
    p = parity_of(records, 1)
    assert p is not None and p["compared"] == 4
    assert parity_of(stored([rec(4, r, i) for r in (0, 1) for i in range(5)]), 1) is None


@pytest.mark.parametrize("key", ["repetition", "index"])
def test_parity_of_a_record_without_its_order_raises(key: str) -> None:
    """Which output is the reference cannot be told: no reading (the policy refuses such a record before,
    ``acceptance._c1_outputs``)."""
    records = stored([rec(1, r, i) for r in (0, 1) for i in range(5)])
    del records[3][key]
    with pytest.raises(KeyError):
        parity_of(records, 1)


def test_a_runs_recorded_parity_is_its_stored_records(tmp_path: Path) -> None:
    """End to end: the ``bounds.parity`` a run records is ``parity_of`` of the requests it stored."""
    path = tmp_path / "bench.jsonl"
    rows = [
        {"id": f"p{i}", "messages": [{"role": "user", "content": f"q{i}"}], "max_tokens": 4} for i in range(4)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = BenchmarkSpec(
        path,
        corpus_digest(path),
        concurrency=(1, 2),
        requests_per_level=8,
        repetitions=2,
        saturation="report",
    )
    with serve_stub(StubConfig(vary_on_repeat=frozenset({"q1"}))) as base:
        result = run_benchmark(spec, base, out_dir=tmp_path / "o")
    lines = (tmp_path / "o" / "benchmark-requests.jsonl").read_text().splitlines()
    assert result.parity is not None and result.parity["prompts_mismatched"] == ["p1"]
    assert result.parity == parity_of([json.loads(x) for x in lines], 1, token_ids_asked=False)
