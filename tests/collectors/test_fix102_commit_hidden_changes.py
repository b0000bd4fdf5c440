"""Issue 11, fix 102 (audit 85 f2): a collector checkout that is not its HEAD still bound HEAD as the code
commit where the change was hidden from ``git status`` — a file marked ``--assume-unchanged`` or
``--skip-worktree``, a module ignored by ``.git/info/exclude`` or a global ``core.excludesFile``, a content
change the index's timestamps do not show — so a review PASS of HEAD credited results of other code. Fail
closed: a tracked file git is told not to compare blocks the binding; the code's folders' files are compared
with HEAD by content; every file HEAD does not hold in the code's folders, ignored or not, blocks it, but
Python's and the tools' caches (``__pycache__/*.pyc``, ``.mypy_cache/``…). A fresh clone with the project's
set-up (.venv, egg-info, caches) binds its HEAD."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import ledger.collectors.campaign as campaign_mod
from ledger.collectors.campaign import code_commit
from tests.collectors import test_fix97_commit_of_a_changed_checkout as fix97
from tests.collectors.test_fix97_commit_of_a_changed_checkout import _git, _module

checkout = fix97.checkout  # the clean checkout fixture of fix 97: pkg/collector.py, pkg/data.toml, README

REPO = Path(__file__).resolve().parents[2]


def _head(d: Path) -> str:
    return _git(d, "rev-parse", "HEAD")


def _bound(d: Path) -> tuple[str | None, str]:
    return code_commit(_module(d))


@pytest.mark.parametrize("flag", ["--assume-unchanged", "--skip-worktree"])
def test_a_change_hidden_from_git_status_by_an_index_flag_binds_no_commit(checkout: Path, flag: str) -> None:
    _module(checkout).write_text("x = 2  # not HEAD's code\n")
    _git(checkout, "update-index", flag, "pkg/collector.py")
    assert _git(checkout, "status", "--porcelain") == ""  # git status is blind to it
    commit, why = _bound(checkout)
    assert commit is None
    assert "git is told not to compare (assume-unchanged or skip-worktree: pkg/collector.py)" in why


@pytest.mark.parametrize("flag", ["--assume-unchanged", "--skip-worktree"])
def test_an_index_flag_outside_the_codes_folder_binds_no_commit(checkout: Path, flag: str) -> None:
    """Tracked files count anywhere in the checkout; a flagged file is one whose change cannot be told."""
    (checkout / "README").write_text("changed\n")
    _git(checkout, "update-index", flag, "README")
    commit, why = _bound(checkout)
    assert commit is None and "README" in why


def test_an_index_flag_on_an_unchanged_file_binds_no_commit(checkout: Path) -> None:
    """git is told not to look: whether it changed is not what git says (fail closed)."""
    _git(checkout, "update-index", "--assume-unchanged", "pkg/data.toml")
    commit, why = _bound(checkout)
    assert commit is None and "pkg/data.toml" in why


def test_clearing_the_flag_of_an_unchanged_file_binds_head_again(checkout: Path) -> None:
    _git(checkout, "update-index", "--skip-worktree", "pkg/data.toml")
    assert _bound(checkout)[0] is None
    _git(checkout, "update-index", "--no-skip-worktree", "pkg/data.toml")
    assert _bound(checkout)[0] == _head(checkout)


def test_a_module_ignored_by_info_exclude_binds_no_commit(checkout: Path) -> None:
    (checkout / ".git" / "info").mkdir(exist_ok=True)
    (checkout / ".git" / "info" / "exclude").write_text("pkg/zz_local.py\n")
    (checkout / "pkg" / "zz_local.py").write_text("x = 1\n")
    assert _git(checkout, "status", "--porcelain") == ""
    commit, why = _bound(checkout)
    assert commit is None
    assert "1 untracked file(s) in the code's folders (pkg/zz_local.py)" in why


def test_a_module_ignored_by_a_global_excludes_file_binds_no_commit(checkout: Path, tmp_path: Path) -> None:
    excludes = tmp_path / "global-ignore"
    excludes.write_text("zz_*.py\n")
    _git(checkout, "config", "core.excludesFile", str(excludes))
    (checkout / "pkg" / "zz_local.py").write_text("x = 1\n")
    commit, why = _bound(checkout)
    assert commit is None and "pkg/zz_local.py" in why


@pytest.mark.parametrize(
    "name",
    [
        "overrides.toml",
        "local.pyc",
        "engine.cpython-312-x86_64-linux-gnu.so",
        "__pycache__/zz.py",
        "sub/x.py",
    ],
)
def test_an_ignored_file_that_is_no_cache_in_the_codes_folder_binds_no_commit(
    checkout: Path, name: str
) -> None:
    """A data file the code reads, a sourceless ``.pyc`` beside the modules (importable: Python writes its
    caches into ``__pycache__`` only), an extension module, a ``.py`` in ``__pycache__``: code of the run."""
    (checkout / ".gitignore").write_text("*\n!.gitignore\n!*/\n!pkg/collector.py\n!pkg/data.toml\n!README\n")
    _git(checkout, "commit", "-q", "-am", "ignore all else")
    f = checkout / "pkg" / name
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_bytes(b"x = 1\n")
    assert _git(checkout, "status", "--porcelain") == ""
    commit, why = _bound(checkout)
    assert commit is None and f"pkg/{name}" in why


@pytest.mark.parametrize(
    "name",
    [
        "__pycache__/collector.cpython-312.pyc",
        "__pycache__/collector.cpython-312.opt-1.pyc",
        ".mypy_cache/3.12/pkg/collector.data.json",
        ".ruff_cache/0.6.0/123",
        ".pytest_cache/v/cache/nodeids",
        ".hypothesis/examples/ab/cd",
    ],
)
def test_caches_in_the_codes_folder_bind_head(checkout: Path, name: str) -> None:
    (checkout / ".gitignore").write_text("*.pyc\n__pycache__/\n.*_cache/\n.hypothesis/\n")
    _git(checkout, "commit", "-q", "-am", "ignore caches")
    f = checkout / "pkg" / name
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_bytes(b"\0")
    commit, why = _bound(checkout)
    assert commit == _head(checkout), why


def test_an_ignored_file_elsewhere_in_the_checkout_binds_head(checkout: Path) -> None:
    """A virtual environment or build output at the top of the checkout is no folder of the code."""
    (checkout / ".gitignore").write_text("*.pyc\n.venv/\n*.egg-info/\n")
    _git(checkout, "commit", "-q", "-am", "ignore set-up")
    (checkout / ".venv" / "lib").mkdir(parents=True)
    (checkout / ".venv" / "lib" / "site.py").write_text("x = 1\n")
    (checkout / "pkg.egg-info").mkdir()
    (checkout / "pkg.egg-info" / "PKG-INFO").write_text("Name: pkg\n")
    commit, why = _bound(checkout)
    assert commit == _head(checkout), why


def test_a_content_change_the_index_timestamps_hide_binds_no_commit(checkout: Path) -> None:
    """Same size, same modification time, stat checks relaxed: ``git status`` trusts the index and sees
    nothing; the file's bytes are not HEAD's blob."""
    _git(checkout, "config", "core.checkStat", "minimal")
    _git(checkout, "config", "core.trustctime", "false")
    f = checkout / "pkg" / "data.toml"
    os.utime(f, (1_577_836_800, 1_577_836_800))
    _git(checkout, "update-index", "-q", "--refresh")
    f.write_text("a = 9\n")  # same size
    os.utime(f, (1_577_836_800, 1_577_836_800))
    assert _git(checkout, "status", "--porcelain") == ""
    commit, why = _bound(checkout)
    assert commit is None and "1 tracked file(s) changed (pkg/data.toml)" in why


def _blind_status(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``git status`` that answers clean whatever the files hold (a lying file-system monitor, say)."""
    real = subprocess.run

    def run(args: list[str], *a: object, **k: object) -> subprocess.CompletedProcess[str]:
        if "status" in args:
            return subprocess.CompletedProcess(args, 0, "", "")
        return real(args, *a, **k)  # type: ignore[call-overload,no-any-return]

    monkeypatch.setattr(campaign_mod.subprocess, "run", run)


def test_a_changed_link_binds_no_commit_whatever_git_status_says(
    checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (checkout / "data").mkdir()
    (checkout / "data" / "t.toml").write_text("t = 1\n")
    (checkout / "other").mkdir()
    (checkout / "pkg" / "data").symlink_to("../data")
    _git(checkout, "add", "-A")
    _git(checkout, "commit", "-q", "-m", "linked")
    assert _bound(checkout)[0] == _head(checkout)
    (checkout / "pkg" / "data").unlink()
    (checkout / "pkg" / "data").symlink_to("../other")
    _blind_status(monkeypatch)
    commit, why = _bound(checkout)
    assert commit is None and "pkg/data" in why


@pytest.mark.parametrize("how", ["content", "deleted", "a link", "a folder"])
def test_a_changed_file_binds_no_commit_whatever_git_status_says(
    checkout: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    f = checkout / "pkg" / "data.toml"
    f.unlink()
    if how == "content":
        f.write_text("a = 2\n")
    elif how == "a link":  # the same bytes behind a link: not the file HEAD holds
        (checkout / "same.toml").write_text("a = 1\n")
        f.symlink_to("../same.toml")
    elif how == "a folder":
        f.mkdir()
    _blind_status(monkeypatch)
    commit, why = _bound(checkout)
    assert commit is None and "pkg/data.toml" in why


def test_a_git_that_does_not_list_the_flags_binds_no_commit(
    checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = subprocess.run

    def run(args: list[str], *a: object, **k: object) -> subprocess.CompletedProcess[str]:
        if "-v" in args or "hash-object" in args:
            return subprocess.CompletedProcess(args, 128, "", "fatal: broken")
        return real(args, *a, **k)  # type: ignore[call-overload,no-any-return]

    monkeypatch.setattr(campaign_mod.subprocess, "run", run)
    commit, why = _bound(checkout)
    assert commit is None and "cannot be told" in why


def test_an_inherited_git_dir_does_not_answer_for_the_checkout(
    checkout: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``GIT_DIR`` / ``GIT_WORK_TREE`` in the collector's environment name another (clean) repository: the
    checkout the module lies in is read all the same."""
    clean = tmp_path / "clean"
    subprocess.run(["git", "clone", "-q", str(checkout), str(clean)], check=True)
    (checkout / "pkg" / "data.toml").write_text("a = 3\n")
    monkeypatch.setenv("GIT_DIR", str(clean / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(clean))
    commit, why = _bound(checkout)
    assert commit is None and "pkg/data.toml" in why


def test_reading_a_flagged_checkout_writes_nothing_to_it(checkout: Path) -> None:
    _module(checkout).write_text("x = 5\n")
    _git(checkout, "update-index", "--assume-unchanged", "pkg/collector.py")
    index = checkout / ".git" / "index"
    before = index.stat().st_mtime_ns, index.read_bytes()
    assert _bound(checkout)[0] is None
    assert (index.stat().st_mtime_ns, index.read_bytes()) == before


# --- the project itself: a fresh clone with its set-up binds its HEAD ------------------------------------


@pytest.fixture
def project_clone(tmp_path: Path) -> Path:
    """A ``git clone`` of this repository's HEAD with what set-up and the tools leave in it: a virtual
    environment, the egg-info, the tools' caches, and Python's bytecode caches in every code folder."""
    d = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(REPO), str(d)], check=True)
    (d / ".venv" / "bin").mkdir(parents=True)
    (d / ".venv" / "bin" / "python").write_text("")
    (d / "evidence_ledger.egg-info").mkdir()
    (d / "evidence_ledger.egg-info" / "PKG-INFO").write_text("Name: evidence-ledger\n")
    for cache in (".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis"):
        (d / cache).mkdir()
        (d / cache / "x").write_text("")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", *(str(d / p) for p in ("ledger", "collectors", "api"))],
        check=True,
        env=env,
        capture_output=True,
    )
    return d


def _project_commit(d: Path) -> tuple[str | None, str]:
    """The commit bound for the clone's own layout: ``ledger``'s folder and the folders it links to."""
    return code_commit(d / "ledger" / "__init__.py")


@pytest.mark.skipif(shutil.which("git") is None, reason="no git")
def test_a_fresh_clone_of_the_project_with_its_set_up_binds_its_head(project_clone: Path) -> None:
    assert list(project_clone.glob("collectors/__pycache__/*.pyc"))  # the caches are there
    commit, why = _project_commit(project_clone)
    assert commit == _head(project_clone), why


@pytest.mark.skipif(shutil.which("git") is None, reason="no git")
def test_a_clone_of_the_project_with_a_hidden_change_binds_no_commit(project_clone: Path) -> None:
    with (project_clone / "collectors" / "launch.py").open("a") as f:
        f.write("PATCHED = True\n")
    _git(project_clone, "update-index", "--assume-unchanged", "collectors/launch.py")
    (project_clone / ".git" / "info" / "exclude").write_text("policies/zz_local.toml\n")
    (project_clone / "policies" / "zz_local.toml").write_text("")
    commit, why = _project_commit(project_clone)
    assert commit is None
    assert "collectors/launch.py" in why and "policies/zz_local.toml" in why
