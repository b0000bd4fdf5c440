"""Issue 11, fix 97 (3): a collector checkout with uncommitted changes bound its ``HEAD`` as the code commit
(``spec.bindings.commit``), though the code that ran was not that commit — a review PASS of ``HEAD`` then
credited results of other code. Fail closed: where the campaign states no ``[campaign] commit`` and the
checkout differs from its HEAD — a tracked file changed, staged, deleted or renamed; an untracked file in the
code's own folders (a module not yet added may be imported) — no commit is bound, and the runner warns why.
An untracked file elsewhere in the checkout (an operator's campaign file, notes) is no code of the collector:
HEAD is bound. A stated ``[campaign] commit`` is bound whatever the checkout holds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import ledger.collectors.campaign as campaign_mod
from ledger.collectors.campaign import CODE_COMMIT, CampaignRunner, code_commit, load_campaign
from ledger.recorder import LocalRecorder

STATED = "0123456789abcdef0123456789abcdef01234567"


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(cwd), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A clean checkout: ``pkg/collector.py`` (the collector's module), ``pkg/data.toml``, ``README`` at the
    top, ``.gitignore`` ignoring ``*.pyc``; one commit."""
    d = tmp_path / "repo"
    (d / "pkg").mkdir(parents=True)
    _git(d, "init", "-q")
    _git(d, "config", "user.email", "t@example.com")
    _git(d, "config", "user.name", "t")
    (d / "pkg" / "collector.py").write_text("x = 1\n")
    (d / "pkg" / "data.toml").write_text("a = 1\n")
    (d / "README").write_text("readme\n")
    (d / ".gitignore").write_text("*.pyc\n")
    _git(d, "add", "-A")
    _git(d, "commit", "-q", "-m", "one")
    return d


def _module(d: Path) -> Path:
    return d / "pkg" / "collector.py"


def test_a_clean_checkout_binds_its_head(checkout: Path) -> None:
    commit, why = code_commit(_module(checkout))
    assert commit == _git(checkout, "rev-parse", "HEAD")
    assert "git HEAD" in why


def test_a_checkout_with_a_changed_tracked_file_binds_no_commit(checkout: Path) -> None:
    (checkout / "pkg" / "data.toml").write_text("a = 2\n")
    commit, why = code_commit(_module(checkout))
    assert commit is None
    head = _git(checkout, "rev-parse", "HEAD")
    assert f"is not its HEAD {head}" in why and "1 tracked file(s) changed (pkg/data.toml)" in why
    assert "[campaign] commit" in why  # how to bind one


def test_a_change_to_a_tracked_file_outside_the_codes_folder_binds_no_commit(checkout: Path) -> None:
    """Tracked changes count anywhere in the checkout: the commit no longer names what is checked out."""
    (checkout / "README").write_text("changed\n")
    commit, why = code_commit(_module(checkout))
    assert commit is None and "README" in why


@pytest.mark.parametrize("how", ["staged", "deleted", "renamed", "added", "mode"])
def test_other_changes_to_tracked_files_bind_no_commit(checkout: Path, how: str) -> None:
    pkg = checkout / "pkg"
    if how == "staged":
        (pkg / "data.toml").write_text("a = 3\n")
        _git(checkout, "add", "pkg/data.toml")
    elif how == "deleted":
        (pkg / "data.toml").unlink()
    elif how == "renamed":
        _git(checkout, "mv", "pkg/data.toml", "pkg/other.toml")
    elif how == "added":  # a new file added to the index, not committed
        (pkg / "new.py").write_text("y = 2\n")
        _git(checkout, "add", "pkg/new.py")
    else:  # the executable bit flipped
        (pkg / "data.toml").chmod(0o755)
    commit, why = code_commit(_module(checkout))
    assert commit is None, why
    assert "tracked file(s) changed" in why


def test_the_collectors_own_module_changed_binds_no_commit(checkout: Path) -> None:
    _module(checkout).write_text("x = 2\n")
    commit, why = code_commit(_module(checkout))
    assert commit is None and "pkg/collector.py" in why


def test_an_untracked_file_in_the_codes_folder_binds_no_commit(checkout: Path) -> None:
    """A module not yet added may be imported by the run: the code is not HEAD's."""
    (checkout / "pkg" / "names.py").write_text("z = 3\n")
    commit, why = code_commit(_module(checkout))
    assert commit is None
    assert "1 untracked file(s) in the code's folders (pkg/names.py)" in why


def test_an_untracked_file_in_a_folder_the_code_links_to_binds_no_commit(checkout: Path) -> None:
    """The ``ledger`` package links ``collectors``, ``policies``…: their files are the code's too."""
    (checkout / "data").mkdir()
    (checkout / "data" / "table.toml").write_text("t = 1\n")
    (checkout / "pkg" / "data").symlink_to("../data")
    _git(checkout, "add", "-A")
    _git(checkout, "commit", "-q", "-m", "linked")
    assert code_commit(_module(checkout))[0] == _git(checkout, "rev-parse", "HEAD")
    (checkout / "data" / "new.toml").write_text("n = 1\n")
    commit, why = code_commit(_module(checkout))
    assert commit is None and "data/new.toml" in why


def test_an_untracked_file_elsewhere_in_the_checkout_binds_head(checkout: Path) -> None:
    """An operator's campaign file or notes at the top of the checkout are no code of the collector."""
    (checkout / "my-campaign.toml").write_text("[campaign]\n")
    (checkout / "notes").mkdir()
    (checkout / "notes" / "todo.txt").write_text("t\n")
    commit, why = code_commit(_module(checkout))
    assert commit == _git(checkout, "rev-parse", "HEAD"), why


def test_an_ignored_file_in_the_codes_folder_binds_head(checkout: Path) -> None:
    """Python's own cache (``__pycache__/*.pyc``) is no code of the run; a ``.pyc`` beside the modules is
    (fix 102: tests/collectors/test_fix102_commit_hidden_changes.py)."""
    (checkout / "pkg" / "__pycache__").mkdir()
    (checkout / "pkg" / "__pycache__" / "collector.cpython-312.pyc").write_bytes(b"\0")
    commit, why = code_commit(_module(checkout))
    assert commit == _git(checkout, "rev-parse", "HEAD"), why


def test_many_changes_are_named_with_a_count(checkout: Path) -> None:
    for i in range(8):
        (checkout / "pkg" / f"m{i}.py").write_text("")
    commit, why = code_commit(_module(checkout))
    assert commit is None and "8 untracked file(s)" in why and "and 3 more" in why


def test_committing_the_changes_binds_the_new_head(checkout: Path) -> None:
    (checkout / "pkg" / "data.toml").write_text("a = 4\n")
    (checkout / "pkg" / "names.py").write_text("")
    assert code_commit(_module(checkout))[0] is None
    _git(checkout, "add", "-A")
    _git(checkout, "commit", "-q", "-m", "two")
    assert code_commit(_module(checkout))[0] == _git(checkout, "rev-parse", "HEAD")


def test_reading_the_checkout_writes_nothing_to_it(checkout: Path) -> None:
    """``git status`` would refresh the index: the collector reads the checkout without writing it."""
    index = checkout / ".git" / "index"
    (checkout / "pkg" / "data.toml").write_text("a = 5\n")
    before = index.stat().st_mtime_ns, index.read_bytes()
    code_commit(_module(checkout))
    assert (index.stat().st_mtime_ns, index.read_bytes()) == before


def test_a_git_status_that_fails_binds_no_commit(checkout: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether the checkout changed cannot be told: no commit (fail closed)."""
    real = subprocess.run

    def failing_status(args: list[str], *a: object, **k: object) -> subprocess.CompletedProcess[str]:
        if "status" in args:
            return subprocess.CompletedProcess(args, 128, "", "fatal: broken")
        return real(args, *a, **k)  # type: ignore[call-overload,no-any-return]

    monkeypatch.setattr(campaign_mod.subprocess, "run", failing_status)
    commit, why = code_commit(_module(checkout))
    assert commit is None and "cannot be told" in why


# --- the runner: what the job binds, and the warning ----------------------------------------------------


def _campaign(tmp_path: Path, model_dir: Path, commit: str | None = None) -> Path:
    stated = f'commit = "{commit}"\n' if commit is not None else ""
    p = tmp_path / "c.toml"
    p.write_text(
        f"""
[campaign]
id = "fix97-commit"
{stated}
[model]
path = "{model_dir}"
name = "m"
served_name = "m"

[engine]
kind = "generic"
command = ["{sys.executable}", "-c", "pass"]
"""
    )
    return p


def _preflight(
    tmp_path: Path, model_dir: Path, recorder: LocalRecorder, commit: str | None
) -> tuple[CampaignRunner, list[str]]:
    lines: list[str] = []
    runner = CampaignRunner(
        load_campaign(_campaign(tmp_path, model_dir, commit)),
        recorder,
        work_dir=tmp_path / "work",
        log=lines.append,
        handle_signals=False,
    )
    runner._preflight()
    return runner, lines


def test_a_run_from_a_changed_checkout_binds_no_commit_and_warns(
    tmp_path: Path,
    tiny_model_dir: Path,
    recorder: LocalRecorder,
    checkout: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (checkout / "pkg" / "data.toml").write_text("a = 6\n")
    monkeypatch.setattr(campaign_mod, "code_commit", lambda where=None: code_commit(_module(checkout)))
    runner, lines = _preflight(tmp_path, tiny_model_dir, recorder, None)
    assert runner.code_commit is None
    [line] = [x for x in lines if "code commit" in x]
    assert line.startswith("warning: code commit: none bound")
    assert "pkg/data.toml" in line and "no review PASS credits" in line


def test_a_stated_commit_is_bound_from_a_changed_checkout(
    tmp_path: Path,
    tiny_model_dir: Path,
    recorder: LocalRecorder,
    checkout: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``[campaign] commit`` names the code under review and is bound; the collector's own code, a checkout
    that is no commit, is recorded beside it as none, with a warning (fix 154: no PASS credits it)."""
    (checkout / "pkg" / "data.toml").write_text("a = 7\n")
    monkeypatch.setattr(campaign_mod, "code_commit", lambda where=None: code_commit(_module(checkout)))
    runner, lines = _preflight(tmp_path, tiny_model_dir, recorder, STATED)
    assert runner.code_commit == STATED
    assert any(f"code commit: {STATED} ([campaign] commit)" in x for x in lines), lines
    assert runner.collector_code == {"collector_commit": None}
    [warning] = [x for x in lines if x.startswith("warning: code commit")]
    assert "pkg/data.toml" in warning and "no review PASS of the stated [campaign] commit" in warning


def test_a_run_from_a_clean_checkout_binds_its_head(
    tmp_path: Path,
    tiny_model_dir: Path,
    recorder: LocalRecorder,
    checkout: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(campaign_mod, "code_commit", lambda where=None: code_commit(_module(checkout)))
    runner, lines = _preflight(tmp_path, tiny_model_dir, recorder, None)
    assert runner.code_commit == _git(checkout, "rev-parse", "HEAD")
    assert CODE_COMMIT == "commit"
    assert not any(x.startswith("warning: code commit") for x in lines), lines
