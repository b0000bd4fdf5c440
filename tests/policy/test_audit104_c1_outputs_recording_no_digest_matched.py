"""Audit 104 f1 (fail-open): c1 outputs that record no digest counted as matching.

A passed benchmark claimed 96 of 96 c1 outputs matched (``bounds.parity``); its stored
``benchmark-requests.jsonl`` recorded every completed c1 request without ``output_digest`` (or with it null),
and ``parity_of`` re-derived 96/96 — "nothing recorded" compared equal to "nothing recorded" — so the claim
was held shown and the campaign QUALIFIED. An output that records neither digest shows nothing to compare:
it matches no other output, so the re-derived parity differs from the claim (harness-artifact-mismatch)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ledger.answers import parity_of
from tests.policy.test_fail_closed import rejected, verdict_of
from tests.policy.test_fix154_harness_record_read_back import RULE, _all_requests, _benchmark, _request

_DIGESTS = ("output_digest", "token_ids_digest")


def _c1(change: Any) -> Any:
    def at_c1(r: dict[str, Any]) -> None:
        if r["level"] == 1:
            change(r)

    return at_c1


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda r: [r.pop(k) for k in (*_DIGESTS, "output_tokens", "tokens_from")], id="dropped"),
        pytest.param(lambda r: r.update(output_digest=None, output_tokens=None, tokens_from=None), id="null"),
        pytest.param(lambda r: r.update(output_digest=""), id="blank"),
        pytest.param(lambda r: r.update(output_digest=7), id="mistyped-number"),
        pytest.param(lambda r: r.update(output_digest=["blake3:x"]), id="mistyped-list"),
        pytest.param(lambda r: r.update(output_digest=None, token_ids_digest=None), id="both-null"),
        pytest.param(lambda r: r.update(outputdigest=r.pop("output_digest")), id="renamed"),
    ],
)
def test_c1_outputs_recording_no_digest_are_no_matching_parity(tmp_path: Path, change: Any) -> None:
    v = verdict_of(tmp_path, _benchmark(_all_requests(_c1(change))))
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert rejected(v)["benchmark"] == RULE


def test_one_output_recording_no_digest_is_one_mismatch() -> None:
    rs = [_request(1, rep, i) for rep in (0, 1) for i in range(4)]
    rs[5]["output_digest"] = None  # repetition 1, prompt 1
    p = parity_of(rs, 1)
    assert p is not None and (p["compared"], p["matched"], p["prompts_mismatched"]) == (4, 3, ["p1"])


def test_token_ids_still_decide_where_both_carry_them() -> None:
    """The neighbour that holds: outputs compared by token ids need no text digest."""
    rs = [_request(1, rep, i) for rep in (0, 1) for i in range(2)]
    for r in rs:
        r.update(output_digest=None, token_ids_digest=f"blake3:ids-{r['index']}")
    p = parity_of(rs, 1)
    assert p is not None and (p["matched"], p["by"]) == (2, "token_ids")


def test_mistyped_token_ids_fall_back_to_the_text() -> None:
    rs = [_request(1, rep, 0) for rep in (0, 1)]
    for r in rs:
        r["token_ids_digest"] = ["not", "a", "digest"]
    p = parity_of(rs, 1)
    assert p is not None and p["matched"] == 1  # by the text digest, which both carry and agree on


def test_the_fixture_run_with_digests_still_passes(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, _benchmark(_all_requests()))
    assert v["verdict"] == "QUALIFIED", v["rejected"]
