"""Shared fixtures: a fresh ledger home per test, and a CLI runner that goes through ``ledger.cli.main``."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ledger.cli import main
from ledger.service import Ledger


@dataclass
class CliResult:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def ledger(home: Path) -> Iterator[Ledger]:
    led = Ledger.init(home)
    yield led
    led.close()


@pytest.fixture
def cli(home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Run ``ledger ARGS`` in-process against the test's home; returns exit code and output."""
    monkeypatch.setenv("LEDGER_HOME", str(home))
    monkeypatch.setenv("COLUMNS", "200")

    def run(*args: str) -> CliResult:
        capsys.readouterr()
        code = main([str(a) for a in args])
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


@pytest.fixture(autouse=True)
def _no_stray_ledger_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Never let a test touch the user's real ledger home."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    if "LEDGER_HOME" in os.environ:
        monkeypatch.delenv("LEDGER_HOME")


@pytest.fixture
def clock_at(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """``with clock_at(T):`` the clock a recorded judgement's reference time is held to
    (``ledger.policy.record_time``) reads T: a test recording a pass judged at a fixture's time, months
    before the real clock, records it as at that time (a --now before the clock records a pass only where it
    holds at the clock: ``refuse_pass_not_holding_now``)."""
    import contextlib

    import ledger.policy.record_time as record_time
    from ledger.entries import parse_time

    @contextlib.contextmanager
    def pin(text: str) -> Iterator[None]:
        with monkeypatch.context() as m:
            m.setattr(record_time, "now_utc", lambda: parse_time(text))
            yield

    return pin
