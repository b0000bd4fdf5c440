"""fix117 (audit 87, from reading ``_derive``): a probe's context refusal was judged with the launch of the
attempt its claimed ``collected_at`` picks (``e.derived.attempt``), so a probe logged during attempt 2 (its
launch giving ``--n_ctx 4096``) that claims a time inside attempt 1 (``--n_ctx 128``) and records 128 had its
failure excused as a request the context could not hold. The attempt the log took it in
(``attempt_logged``) decides; where the claimed one differs, its launch must give the same context too."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from ledger.answers import REFUSAL_CONTEXT
from ledger.policy.acceptance import _refusals
from tests.policy.test_fix112_context_from_launch import COMMAND, PARAMS, _launch, _probe

SMALL = SimpleNamespace(payload=_launch())  # --n_ctx 128, as the probe records
LARGE = SimpleNamespace(payload=_launch(command=[*COMMAND[:6], "4096", *COMMAND[7:]]))


def _judged(attempt: Any, attempt_logged: Any, launch_of: dict[int, Any]) -> Any:
    derived: dict[str, Any] = {"refusal": None}
    if attempt is not None:
        derived["attempt"] = attempt
    if attempt_logged is not None:
        derived["attempt_logged"] = attempt_logged
    probe = SimpleNamespace(kind="health.probe", payload=_probe(), derived_=derived)
    _refusals([probe], launch_of, PARAMS)  # type: ignore[list-item]
    return derived["refusal"]


def test_probe_claiming_an_earlier_attempt_whose_context_matches_is_not_excused() -> None:
    """Regression: logged during attempt 2 (4096), claiming attempt 1 (128)."""
    assert _judged(1, 2, {1: SMALL, 2: LARGE}) is None


def test_probe_logged_in_the_attempt_whose_context_it_records_is_excused() -> None:
    assert _judged(1, 1, {1: SMALL, 2: LARGE}) == REFUSAL_CONTEXT


def test_claimed_attempt_with_the_same_context_does_not_matter() -> None:
    assert _judged(1, 2, {1: SMALL, 2: SMALL}) == REFUSAL_CONTEXT


@pytest.mark.parametrize(
    ("attempt", "attempt_logged"),
    [
        pytest.param(1, None, id="logged-attempt-missing"),
        pytest.param(None, 1, id="claimed-attempt-missing"),
        pytest.param(1, 0, id="logged-before-every-launch"),
        pytest.param(1, "1", id="logged-attempt-mistyped"),
        pytest.param(2, 1, id="claimed-later-attempt-without-launch"),
    ],
)
def test_attempt_missing_or_mistyped_excuses_nothing(attempt: Any, attempt_logged: Any) -> None:
    assert _judged(attempt, attempt_logged, {1: SMALL}) is None
