"""Issue 11, fix 154 (audit 101 f2 b): a collector whose checkout had uncommitted changes (an edited
harness) bound the stated ``[campaign] commit`` — the clean HEAD — with no warning and nothing recorded, so a
review PASS of that commit credited results of other code. Where the campaign states the commit under
review and the collector runs from a git checkout, the job now records the collector's own code beside it
(``spec.collector_commit``: its HEAD, or null where the checkout is no commit), and warns; the policy
credits no review PASS of a job whose collector ran code no commit names (``acceptance.produced_at``).
A clean collector at the stated commit, or at another one (the code under review may be an engine's
source), and an installed collector (no checkout) are credited as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import ledger.collectors.campaign as campaign_mod
import tests.collectors.test_commit_bound as bound_mod
from ledger.collectors.campaign import CheckoutNoCommit, code_commit
from ledger.policy.acceptance import COLLECTOR_COMMIT
from ledger.recorder import LocalRecorder
from ledger.service import Ledger
from tests.collectors.test_commit_bound import _qualify_with, _stating
from tests.collectors.test_fix97_commit_of_a_changed_checkout import (
    STATED,
    _git,
    _module,
    _preflight,
    checkout,  # noqa: F401 (a fixture)
)
from tests.collectors.test_harness_gates import corpus, stub_campaign  # noqa: F401

WARNING = "warning: code commit"


def _read_from(checkout: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    monkeypatch.setattr(campaign_mod, "code_commit", lambda where=None: code_commit(_module(checkout)))


# --- the collector records its own code beside the stated commit ---------------------------------------


def test_stated_commit_with_a_dirty_collector_is_recorded_and_warned(
    tmp_path: Path,
    tiny_model_dir: Path,
    recorder: LocalRecorder,
    checkout: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (checkout / "pkg" / "collector.py").write_text("x = 2  # the harness edited\n")
    _read_from(checkout, monkeypatch)
    runner, lines = _preflight(tmp_path, tiny_model_dir, recorder, STATED)
    assert runner.code_commit == STATED  # the stated commit is still what the job binds
    assert runner.collector_code == {COLLECTOR_COMMIT: None}
    spec = runner._job_spec()
    assert spec[COLLECTOR_COMMIT] is None and spec["bindings"]["commit"] == STATED
    [warning] = [x for x in lines if x.startswith(WARNING)]
    assert "pkg/collector.py" in warning and "no review PASS of the stated [campaign] commit" in warning


def test_stated_commit_equal_to_a_clean_head_is_recorded_without_warning(
    tmp_path: Path,
    tiny_model_dir: Path,
    recorder: LocalRecorder,
    checkout: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    head = _git(checkout, "rev-parse", "HEAD")
    _read_from(checkout, monkeypatch)
    runner, lines = _preflight(tmp_path, tiny_model_dir, recorder, head)
    assert runner.code_commit == head and runner.collector_code == {COLLECTOR_COMMIT: head}
    assert runner._job_spec()[COLLECTOR_COMMIT] == head
    assert not any(x.startswith(WARNING) for x in lines), lines


def test_stated_commit_other_than_a_clean_head_is_recorded_and_named(
    tmp_path: Path,
    tiny_model_dir: Path,
    recorder: LocalRecorder,
    checkout: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The code under review may be another repository's (an engine's source): the collector's own commit
    is recorded and named, the stated one bound."""
    head = _git(checkout, "rev-parse", "HEAD")
    _read_from(checkout, monkeypatch)
    runner, lines = _preflight(tmp_path, tiny_model_dir, recorder, STATED)
    assert runner.code_commit == STATED and runner.collector_code == {COLLECTOR_COMMIT: head}
    [warning] = [x for x in lines if x.startswith(WARNING)]
    assert f"HEAD {head}, not the stated [campaign] commit {STATED}" in warning


def test_stated_commit_from_no_checkout_records_nothing(
    tmp_path: Path, tiny_model_dir: Path, recorder: LocalRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An installed collector (no checkout): nothing of its own code to record (as before)."""
    monkeypatch.setattr(campaign_mod, "code_commit", lambda where=None: (None, "no checkout (test)"))
    runner, lines = _preflight(tmp_path, tiny_model_dir, recorder, STATED)
    assert runner.code_commit == STATED and runner.collector_code == {}
    assert COLLECTOR_COMMIT not in runner._job_spec()
    assert not any(x.startswith(WARNING) for x in lines), lines


def test_no_stated_commit_records_no_collector_commit(
    tmp_path: Path,
    tiny_model_dir: Path,
    recorder: LocalRecorder,
    checkout: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without ``[campaign] commit`` the commit bound is the collector's own (none where it is dirty)."""
    _read_from(checkout, monkeypatch)
    runner, _ = _preflight(tmp_path, tiny_model_dir, recorder, None)
    assert runner.code_commit == _git(checkout, "rev-parse", "HEAD")
    assert COLLECTOR_COMMIT not in runner._job_spec()
    (checkout / "pkg" / "new.py").write_text("")
    runner, _ = _preflight(tmp_path, tiny_model_dir, recorder, None)
    assert runner.code_commit is None and COLLECTOR_COMMIT not in runner._job_spec()


def test_code_commit_says_when_a_checkout_is_no_commit(checkout: Path) -> None:  # noqa: F811
    """Told apart by its reason's type: a checkout that is not its HEAD, or no file of a checkout."""
    assert code_commit(_module(checkout))[0] is not None
    (checkout / "pkg" / "data.toml").write_text("a = 9\n")
    commit, why = code_commit(_module(checkout))
    assert commit is None and isinstance(why, CheckoutNoCommit)
    loose = checkout.parent / "loose.py"
    loose.write_text("")
    commit, why = code_commit(loose)
    assert commit is None and not isinstance(why, CheckoutNoCommit)


# --- end to end: the verdict --------------------------------------------------------------------------


def _stated_run(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    collector: tuple[str | None, str],
) -> tuple[dict[str, Any], str | None]:
    """A campaign stating ``STATED``, run by a collector whose ``code_commit`` is ``collector``; its
    results reviewed PASS at the commit the job binds."""
    monkeypatch.setattr(campaign_mod, "code_commit", lambda where=None: collector)
    # ``_qualify_with`` builds the campaign through its own module's name
    monkeypatch.setattr(
        bound_mod, "stub_campaign", lambda *a, **k: _stating(stub_campaign(*a, **k), f'"{STATED}"')
    )
    return _qualify_with(tmp_path, tiny_model_dir, ledger, recorder, corpus, lambda b: b)


def test_stated_commit_with_a_dirty_collector_is_not_credited(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dirty = (
        None,
        CheckoutNoCommit("the checkout /x is not its HEAD: 1 changed file(s): collectors/semantic.py"),
    )
    v, bound = _stated_run(tmp_path, tiny_model_dir, ledger, recorder, corpus, monkeypatch, dirty)
    assert bound == STATED
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    missing = [r for r in v["rejected"] if r["rule"] == "review-missing"]
    assert len(missing) == 2, v["rejected"]
    assert all(f"spec.{COLLECTOR_COMMIT} None" in r["detail"] for r in missing), missing


@pytest.mark.parametrize("collector", ["stated", "other"])
def test_stated_commit_with_a_clean_collector_is_credited(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    collector: str,
) -> None:
    """The collector's HEAD, clean, the stated commit or another (an engine's source under review)."""
    own = STATED if collector == "stated" else "f" * 40
    v, bound = _stated_run(
        tmp_path, tiny_model_dir, ledger, recorder, corpus, monkeypatch, (own, "git HEAD of the checkout")
    )
    assert bound == STATED
    assert v["verdict"] == "QUALIFIED", v["rejected"]
