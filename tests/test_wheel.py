"""The package as a user gets it: a non-editable wheel in a fresh venv runs init, policy test and serve.

The wheel is built from a clean copy of the source tree (no stale ``build/``), installed with the normal
package index under ``constraints.txt``, and every command runs from a folder outside the repository, so
nothing is found through the working tree.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path, PurePosixPath

import httpx
import pytest

REPO = Path(__file__).resolve().parents[1]
# what a checkout may hold besides the source: VCS data, venvs, build output, caches, local ledger homes
SKIP = (".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis", "results")
SKIP += (".ledger", "qual-ledger")

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(*cmd: str | Path, cwd: Path, env: dict[str, str], timeout: float = 900) -> str:
    proc = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, str]]:
    """(wheel, venv, env): the wheel built from a clean copy, installed into a fresh venv."""
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"
    shutil.copytree(REPO, src, symlinks=True, ignore=shutil.ignore_patterns(*SKIP))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEDGER_", "PYTHON", "VIRTUAL_ENV"))}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["XDG_DATA_HOME"] = str(root / "xdg")
    dist = root / "dist"
    _run(sys.executable, "-m", "pip", "wheel", src, "--no-deps", "-q", "-w", dist, cwd=root, env=env)
    (wheel,) = dist.glob("evidence_ledger-*.whl")
    venv = root / "venv"
    _run(sys.executable, "-m", "venv", venv, cwd=root, env=env)
    _run(
        venv / "bin/python",
        "-m",
        "pip",
        "install",
        "-q",
        wheel,
        "-c",
        REPO / "constraints.txt",
        cwd=root,
        env=env,
    )
    return wheel, venv, env


def test_wheel_ships_no_tests(installed: tuple[Path, Path, dict[str, str]]) -> None:
    wheel, _venv, _env = installed
    names = [PurePosixPath(n) for n in zipfile.ZipFile(wheel).namelist()]
    assert any(n.as_posix() == "ledger/cli/__init__.py" for n in names)
    assert any(n.as_posix().startswith("ledger/policies/fixtures/") for n in names)  # `policy test` data
    shipped_tests = [
        n.as_posix()
        for n in names
        if "tests" in n.parts
        or n.name.startswith("test_")
        or n.name.endswith("_test.py")
        or n.name == "conftest.py"
    ]
    assert shipped_tests == []


def test_installed_wheel_runs_init_policy_test_and_serve(
    installed: tuple[Path, Path, dict[str, str]], tmp_path: Path
) -> None:
    _wheel, venv, env = installed
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    where = _run(venv / "bin/python", "-c", "import ledger; print(ledger.__file__)", cwd=outside, env=env)
    assert Path(where.strip()).is_relative_to(venv), where
    ledger = venv / "bin/ledger"
    home = tmp_path / "home"
    info = json.loads(_run(ledger, "--home", home, "init", "--json", cwd=outside, env=env))
    assert info["home"] == str(home)
    assert Path(info["store"]).is_dir()
    # the shipped policies and their fixtures, found in the installed package (exit 0: every one passes)
    tested = json.loads(_run(ledger, "policy", "test", "--json", cwd=outside, env=env))["items"]
    assert {t["fixture"].split("/")[0] for t in tested} >= {"backend-qualification", "routing-change"}
    assert all(t["passed"] for t in tested), [t for t in tested if not t["passed"]]
    # the campaign templates and the pinned corpora ship too: `campaign init` works outside a checkout
    made = json.loads(
        _run(
            ledger,
            "campaign",
            "init",
            "--engine",
            "vllm",
            "--model",
            "org/model",
            "--host",
            "gpu-host-1",
            "--gpus",
            "0",
            "--out",
            outside / "c.toml",
            "--json",
            cwd=outside,
            env=env,
        )
    )
    assert (outside / "c.toml").is_file(), made
    assert str(venv) in (outside / "c.toml").read_text()  # the corpora, found in the installed package

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(
        [ledger, "--home", home, "serve", "--port", str(port), "--public-reads", "--log-level", "warning"],
        cwd=outside,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        health = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                health = httpx.get(f"{url}/v1/health", timeout=2)
                break
            except httpx.TransportError:
                time.sleep(0.2)
        assert health is not None, (tmp_path / "serve.log").read_text()
        assert health.status_code == 200
        assert health.json()["status"] == "ok"
        assert health.json()["size"] >= 1  # the admin key's enrolment
        page = httpx.get(f"{url}/", timeout=10)  # the reviewer pages: templates shipped in the wheel
        assert page.status_code == 200
        assert "<html" in page.text.lower()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
    assert proc.returncode is not None
