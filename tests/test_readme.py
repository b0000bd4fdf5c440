"""The README's commands keep working as shown.

Blocks fenced as ```bash readme-test run whole (bash -euo pipefail) in a temporary folder, with this
checkout's `ledger` first on PATH; port 8000 becomes a free port. Every `ledger …` line of every bash block
must name an existing command and only options that command has.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from ledger.cli import app
from tests.api.conftest import free_port

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"^```bash( readme-test)?\n(.*?)^```", re.S | re.M)


def _blocks(runnable: bool | None = None) -> list[str]:
    return [b for flag, b in BLOCK.findall(README.read_text()) if runnable is None or bool(flag) == runnable]


def _ledger_lines(block: str) -> list[list[str]]:
    """Each `ledger …` command of a block as argv tokens (continuations joined, comments dropped)."""
    commands = []
    for line in block.replace("\\\n", " ").splitlines():
        for part in re.split(r"\$\(|\)|&&|;|\|| & ", line):
            try:
                words = shlex.split(part, comments=True)
            except ValueError:
                continue
            while words and ("=" in words[0] and not words[0].startswith("-")):
                words = words[1:]  # VAR=value prefixes
            if words and words[0] == "ledger":
                commands.append(words)
    return commands


def test_runnable_blocks_exist() -> None:
    assert len(_blocks(runnable=True)) >= 2


@pytest.mark.parametrize("index", range(len(_blocks(runnable=True))))
def test_readme_block_runs(index: int, tmp_path: Path) -> None:
    if "curl " in _blocks(runnable=True)[index] and shutil.which("curl") is None:
        pytest.fail("curl is needed by the README's remote-collector block")
    block = _blocks(runnable=True)[index].replace("8000", str(free_port()))
    env = {k: v for k, v in os.environ.items() if k not in ("LEDGER_HOME", "LEDGER_SERVER", "LEDGER_TOKEN")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}"
    r = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, (
        f"block {index} failed:\n{block}\n--- stdout\n{r.stdout[-3000:]}\n--- stderr\n{r.stderr[-3000:]}"
    )
    assert "error[" not in r.stderr


def test_every_readme_ledger_line_names_real_commands_and_options() -> None:
    root = typer.main.get_command(app)
    checked = 0
    for block in _blocks():
        for argv in _ledger_lines(block):
            cmd = root
            words = argv[1:]
            path = ["ledger"]
            while words:
                w = words[0]
                if w.startswith("-"):
                    if w == "--home" and len(words) > 1:
                        words = words[2:]
                        continue
                    break
                sub = getattr(cmd, "commands", {}).get(w)
                if sub is None:
                    break
                cmd, path, words = sub, [*path, w], words[1:]
            assert not getattr(cmd, "commands", None) or cmd.invoke_without_command, f"{argv}: no sub-command"
            opts = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}
            for w in words[: words.index("--")] if "--" in words else words:
                if w.startswith("--"):
                    assert w.split("=", 1)[0] in opts, f"README: `{' '.join(path)}` has no option {w}"
            checked += 1
    assert checked >= 30


def test_readme_routing_step_names_a_host_and_deployment_that_allow() -> None:
    """Audit 51 f5: the README's allowed routing check named `host=$(hostname)` and no deployment, while the
    campaign's subject host is its `[campaign] host` and `deployment-known` refuses a check without one.
    Each `routing-change` line that says it is allowed names the campaign's host and a deployment file of that
    host, as `scripts/demo.sh` runs it."""
    import tomllib

    root = README.parent
    text = README.read_text().replace("\\\n", " ")
    lines = [ln for ln in text.splitlines() if "routing-change" in ln and "# allowed" in ln]
    assert lines, "the README shows no allowed routing check"
    for ln in lines:
        words = shlex.split(ln, comments=True)
        assert "--deployment" in words, f"README: allowed routing check without --deployment: {ln.strip()}"
        deployment = tomllib.loads((root / words[words.index("--deployment") + 1]).read_text())
        hosts = [w.split("=", 1)[1] for w in words if w.startswith("host=")]
        assert hosts == [deployment["host"]], f"README: routing subject host {hosts} is not the deployment's"
        campaign = next(
            tomllib.loads(p.read_text())
            for p in (root / "campaigns").glob("*.toml")
            if tomllib.loads(p.read_text())["campaign"].get("host") == hosts[0]
        )
        backend = [w.split("=", 1)[1] for w in words if w.startswith("backend=")]
        assert backend and campaign["engine"]["kind"] == backend[0]
