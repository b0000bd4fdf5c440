"""Piped output has no width limit (README, Conventions): a one-line answer (``keys grant``, ``keys revoke``,
``verdict --record`` on stderr) stays one line when stdout/stderr is a pipe, whatever ``$COLUMNS`` says.
The rule lives in the shared consoles (``ledger.cli._common.out``/``err``), not in each ``print`` call."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
from pathlib import Path

from ledger.cli._common import _Console
from tests.api.conftest import LEDGER_BIN

_HEX64 = re.compile(r"\b[0-9a-f]{64}\b")


def _run(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``ledger ARGS`` with stdout and stderr on pipes and a narrow ``$COLUMNS`` (Rich's width on a pipe)."""
    return subprocess.run(
        [LEDGER_BIN, "--home", str(home), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "COLUMNS": "40", "TERM": "dumb"},
    )


def _one_line_with_id(text: str) -> str:
    lines = text.splitlines()
    assert len(lines) == 1, lines
    assert _HEX64.search(lines[0]), lines[0]
    return lines[0]


def test_piped_one_line_answers_do_not_wrap_at_narrow_columns(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert _run(home, "init").returncode == 0
    assert _run(home, "keys", "new", "coll", "--role", "collector").returncode == 0

    grant = _run(home, "keys", "grant", "coll", "--role", "operator")
    assert grant.returncode == 0, grant.stderr
    assert _one_line_with_id(grant.stdout).startswith("granted operator to coll: entry ")

    job = {"job_id": "j", "state": "running"}
    rec = _run(
        home, "record", "job", "--key", "coll", "-s", "campaign=c", "-s", "host=h", "--data", json.dumps(job)
    )
    assert rec.returncode == 0, rec.stderr
    _one_line_with_id(rec.stdout)

    verdict = _run(home, "verdict", "--subject", "campaign=c", "--record")
    assert _one_line_with_id(verdict.stderr).startswith("recorded verdict entry ")

    revoke = _run(home, "keys", "revoke", "coll", "--reason", "compromised", "--at", "now")
    assert revoke.returncode == 0, revoke.stderr
    line = _one_line_with_id(revoke.stdout)
    assert line.split()[3] == _HEX64.search(line)[0]  # type: ignore[index]  # `awk '{print $4}'` gets the id


def test_a_long_subject_value_is_printed_whole_on_one_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert _run(home, "init").returncode == 0
    assert _run(home, "keys", "new", "coll", "--role", "collector").returncode == 0
    campaign = "a-campaign-name-much-longer-than-forty-columns-" + "x" * 60
    note = _run(
        home, "record", "note", "--key", "coll", "-s", f"campaign={campaign}", "--data", '{"text":"t"}'
    )
    assert note.returncode == 0, note.stderr
    _one_line_with_id(note.stdout)
    verdict = _run(home, "verdict", "--subject", f"campaign={campaign}")
    assert any(campaign in ln for ln in verdict.stdout.splitlines()), verdict.stdout


def test_the_shared_console_does_not_wrap_on_a_stream_that_is_not_a_terminal() -> None:
    buf = io.StringIO()
    console = _Console(file=buf, width=20, highlight=False, markup=False, emoji=False)
    text = "revoked coll: entry " + "ab" * 32
    console.print(text)
    assert buf.getvalue() == text + "\n"


def test_an_explicit_soft_wrap_false_is_still_honoured() -> None:
    buf = io.StringIO()
    console = _Console(file=buf, width=20, highlight=False, markup=False, emoji=False)
    console.print("word " * 10, soft_wrap=False)
    assert len(buf.getvalue().splitlines()) > 1


def test_on_a_terminal_the_console_still_wraps_at_its_width() -> None:
    class _Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    buf = _Tty()
    console = _Console(file=buf, width=20, highlight=False, markup=False, emoji=False, color_system=None)
    console.print("word " * 10)
    assert all(len(ln) <= 20 for ln in buf.getvalue().splitlines())
    assert len(buf.getvalue().splitlines()) > 1
