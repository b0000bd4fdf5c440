"""Audit 37, f1: README documents ``ledger audit --home gpu-home --server URL``, but ``audit`` took no
``--home`` (``error[usage] No such option: --home``), unlike ``push``, ``collect`` and ``migrate``, which
take it as a command option. It does now."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import CliResult

Cli = Callable[..., CliResult]


def test_audit_takes_home_as_a_command_option_as_push_and_collect_do(
    cli: Cli, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cli("init").code == 0
    monkeypatch.setenv("LEDGER_HOME", str(tmp_path / "elsewhere"))  # not the home audited
    r = cli("audit", "--home", str(home))
    assert r.code == 0, r.out + r.err
    assert "receipts of" in r.out


def test_audit_takes_home_as_the_global_option_too(
    cli: Cli, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neighbour: the global form (``ledger --home H audit``) still works."""
    assert cli("init").code == 0
    monkeypatch.setenv("LEDGER_HOME", str(tmp_path / "elsewhere"))
    r = cli("--home", str(home), "audit")
    assert r.code == 0, r.out + r.err


def test_audit_of_a_home_that_is_not_there_is_refused(cli: Cli, tmp_path: Path) -> None:
    """Neighbour: ``--home`` naming no ledger is an error, never an audit of another home."""
    r = cli("audit", "--home", str(tmp_path / "missing"))
    assert r.code != 0 and "home-not-initialised" in r.err
