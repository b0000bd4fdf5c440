"""Fixtures for policy tests: fixture-built ledgers in tmp homes and a CLI runner."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from ledger.policy.fixtures import build_fixture_ledger
from ledger.service import Ledger

REPO = Path(__file__).resolve().parents[2]
POLICY_DIR = REPO / "policies"
FIXTURES = POLICY_DIR / "fixtures"


@dataclass
class Built:
    home: Path
    ledger: Ledger
    names: dict[str, str]


@dataclass
class CliResult:
    code: int
    out: str
    err: str


@pytest.fixture
def build(tmp_path: Path) -> Callable[[str], Built]:
    def make(fixture: str) -> Built:
        home = tmp_path / "home"
        ledger, _spec, builder = build_fixture_ledger(FIXTURES / fixture, home, POLICY_DIR, init=Ledger.init)
        return Built(home, ledger, {n: e.entry_id for n, e in builder.names.items()})

    return make


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., CliResult]:
    from ledger.cli import main

    def run(*args: str) -> CliResult:
        capsys.readouterr()
        code = main(list(args))
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


@pytest.fixture
def policy_copy(tmp_path: Path) -> Path:
    """A writable copy of the shipped policies (without fixtures) for tests that edit policy bytes."""
    dest = tmp_path / "policies"
    dest.mkdir()
    for p in POLICY_DIR.glob("*.toml"):
        shutil.copy(p, dest / p.name)
    return dest


def count_snapshot_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that grows by one each time a verdict reads its snapshot's rows (``read_snapshot_rows``)."""
    import importlib

    verdict_mod = importlib.import_module("ledger.policy.verdict")
    reads: list[int] = []
    real = verdict_mod.read_snapshot_rows

    def counted(*a: object, **k: object) -> object:
        reads.append(1)
        return real(*a, **k)

    monkeypatch.setattr(verdict_mod, "read_snapshot_rows", counted)
    return reads
