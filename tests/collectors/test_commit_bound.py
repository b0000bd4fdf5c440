"""The collector binds the code commit it ran at (audit 79 f1): ``code_commit`` reads the git HEAD of the
checkout whose tracked files include the collector, and the job's approved spec binds it
(``spec.bindings.commit``), so a review PASS of its results is credited only where it names that commit —
a PASS of any other commit (or of none) credits nothing, and the campaign is not QUALIFIED on it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import ledger.collectors.campaign as campaign_mod
from ledger.collectors.campaign import BOUND_KEYS, CODE_COMMIT, NOT_BOUND, code_commit
from ledger.policy.acceptance import COMMIT_BINDING
from ledger.policy.verdict import evaluate
from ledger.recorder import LocalRecorder
from ledger.service import Ledger
from tests.collectors.conftest import entries_of
from tests.collectors.test_harness_gates import corpus, gate, policy_with, run, stub_campaign  # noqa: F401

REPO = Path(__file__).resolve().parents[2]
OTHER = "0123456789abcdef0123456789abcdef01234567"


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(cwd), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def _repo(tmp_path: Path) -> Path:
    d = tmp_path / "repo"
    d.mkdir()
    _git(d, "init", "-q")
    _git(d, "config", "user.email", "t@example.com")
    _git(d, "config", "user.name", "t")
    return d


def test_code_commit_is_the_collectors_checkout_head() -> None:
    commit, source = code_commit()
    assert commit == _git(REPO, "rev-parse", "HEAD").lower()
    assert len(commit) in (40, 64) and commit == commit.lower()
    assert "git HEAD" in source


def test_code_commit_of_a_file_outside_any_checkout_is_none(tmp_path: Path) -> None:
    f = tmp_path / "collector.py"
    f.write_text("")
    commit, why = code_commit(f)
    assert commit is None and "not a tracked file" in why


def test_code_commit_of_an_untracked_file_inside_another_checkout_is_none(tmp_path: Path) -> None:
    """An installed package inside some other repository's folder is not that repository's code."""
    d = _repo(tmp_path)
    (d / "README").write_text("x")
    _git(d, "add", "README")
    _git(d, "commit", "-q", "-m", "one")
    f = d / "site-packages" / "collector.py"
    f.parent.mkdir()
    f.write_text("")
    commit, why = code_commit(f)
    assert commit is None and "not a tracked file" in why


def test_code_commit_of_a_tracked_file_is_its_checkouts_head(tmp_path: Path) -> None:
    d = _repo(tmp_path)
    f = d / "collector.py"
    f.write_text("")
    _git(d, "add", "collector.py")
    # tracked, but no commit yet: no HEAD to name
    commit, why = code_commit(f)
    assert commit is None and "no HEAD commit" in why
    _git(d, "commit", "-q", "-m", "one")
    assert code_commit(f) == (_git(d, "rev-parse", "HEAD"), f"git HEAD of the checkout of {d.resolve()}")


def test_code_commit_without_git_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(campaign_mod.shutil, "which", lambda *_a, **_k: None)
    commit, why = code_commit()
    assert commit is None and "no git" in why


def test_commit_is_one_binding_key_of_the_policy() -> None:
    """One vocabulary: the collector's key is the acceptance policy's, and it says why it is not compared."""
    assert CODE_COMMIT == COMMIT_BINDING == "commit"
    assert CODE_COMMIT in NOT_BOUND and CODE_COMMIT not in BOUND_KEYS


def _review(led: Ledger, eid: str, commit: str) -> None:
    subject = dict(led.get(eid).statement.subject)
    led.record(
        "review", subject, {"result": "PASS", "commit": commit}, key="reviewer", refs=[("reviews", eid)]
    )


def _accept(led: Ledger, eid: str) -> None:
    subject = dict(led.get(eid).statement.subject)
    led.record(
        "acceptance",
        subject,
        {"decision": "accepted", "reason": "ok"},
        key="operator",
        refs=[("subject", eid)],
    )


def _qualify_with(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
    reviewed: Any,
) -> tuple[dict[str, Any], str | None]:
    policy = policy_with(tmp_path, corpus[1])
    result = run(stub_campaign(tmp_path, tiny_model_dir, corpus), recorder, tmp_path, policy)
    assert [g.status for g in result.gates] == ["passed"] * 9
    [job] = [e for e in entries_of(ledger, "job") if e["payload"]["state"] == "running"]
    bound = job["payload"]["spec"]["bindings"].get(COMMIT_BINDING)
    ledger.new_key("reviewer", ["reviewer"])
    ledger.new_key("operator", ["operator"])
    sem, bench = gate(ledger, "semantic")["id"], gate(ledger, "benchmark")["id"]
    commit = reviewed(bound)
    _review(ledger, sem, commit)
    _review(ledger, bench, commit)
    _accept(ledger, bench)
    return evaluate(ledger, {"campaign": result.campaign}, policy), bound


def test_review_pass_of_another_commit_than_the_collector_ran_at_does_not_qualify(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
) -> None:
    v, bound = _qualify_with(tmp_path, tiny_model_dir, ledger, recorder, corpus, lambda _bound: OTHER)
    assert bound == code_commit()[0]  # the job binds the commit the collector ran at
    assert v["verdict"] == "INCONCLUSIVE"
    missing = [r for r in v["rejected"] if r["rule"] == "review-missing"]
    assert len(missing) == 2 and all(f"names commit {OTHER}" in r["detail"] for r in missing), missing


@pytest.mark.parametrize("spelling", ["full", "short"])
def test_review_pass_of_the_commit_the_collector_ran_at_qualifies(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
    spelling: str,
) -> None:
    def pick(bound: str) -> str:
        return bound if spelling == "full" else bound[:10]

    v, _bound = _qualify_with(tmp_path, tiny_model_dir, ledger, recorder, corpus, pick)
    assert v["verdict"] == "QUALIFIED", v["rejected"]


def test_a_collector_outside_a_checkout_binds_no_commit_and_no_pass_credits(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fail closed: where the code commit cannot be read the job binds none, and no PASS credits its
    results."""
    monkeypatch.setattr(campaign_mod, "code_commit", lambda where=None: (None, "no checkout (test)"))
    v, bound = _qualify_with(tmp_path, tiny_model_dir, ledger, recorder, corpus, lambda _b: OTHER)
    assert bound is None
    assert v["verdict"] == "INCONCLUSIVE"
    missing = [r for r in v["rejected"] if r["rule"] == "review-missing"]
    assert len(missing) == 2 and all("names no commit it was produced at" in r["detail"] for r in missing)


STATED = "0123456789abcdef0123456789abcdef01234567"


def _stating(path: Path, commit: str) -> Path:
    """The campaign file with ``[campaign] commit`` set to ``commit`` (TOML text as written)."""
    path.write_text(path.read_text().replace("[campaign]\n", f"[campaign]\ncommit = {commit}\n", 1))
    return path


def test_a_campaign_stating_the_commit_under_review_binds_it_over_the_checkouts(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An installed collector (no checkout) qualifies the code its campaign names: ``[campaign] commit`` is
    bound, a PASS of it credits the results, a PASS of the collector's checkout does not."""
    monkeypatch.setattr(campaign_mod, "code_commit", lambda where=None: (None, "no checkout (test)"))
    made = stub_campaign
    here = sys.modules[__name__]  # ``_qualify_with`` builds the campaign through this module's name
    monkeypatch.setattr(here, "stub_campaign", lambda *a, **k: _stating(made(*a, **k), f'"{STATED}"'))
    v, bound = _qualify_with(tmp_path, tiny_model_dir, ledger, recorder, corpus, lambda b: b)
    assert bound == STATED
    assert v["verdict"] == "QUALIFIED", v["rejected"]


@pytest.mark.parametrize(
    "commit",
    [
        '"0123456"',  # abbreviated: reviewers name the full object
        '"0123456789ABCDEF0123456789ABCDEF01234567"',  # upper case: written as git prints it
        '" 0123456789abcdef0123456789abcdef01234567"',  # padded
        '"HEAD"',  # a ref, not a commit
        "1234567",  # mistyped: a number
        '["0123456789abcdef0123456789abcdef01234567"]',  # mistyped: a list
    ],
)
def test_a_stated_commit_that_is_no_full_commit_is_refused_at_load(
    tmp_path: Path,
    tiny_model_dir: Path,
    corpus: tuple[Path, str],  # noqa: F811
    commit: str,
) -> None:
    from ledger.collectors.campaign import load_campaign
    from ledger.errors import ConfigError

    path = _stating(stub_campaign(tmp_path, tiny_model_dir, corpus), commit)
    with pytest.raises(ConfigError, match="commit"):
        load_campaign(path)
