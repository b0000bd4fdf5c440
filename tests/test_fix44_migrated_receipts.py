"""Audit 37, f7: a home upgraded from log format 1 (``ledger migrate --relocate``, as docs/LOG.md says)
then failed ``ledger audit`` and ``ledger verify --receipts`` with ``receipts-unchecked`` —
"HOME/receipts.jsonl removed or emptied?" — though a format-1 home never kept receipts. ``migrate`` now
records the log's size when the home began keeping receipts (``receipts_from`` in its config); the audit
expects none of the entries below it, and says so."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from ledger.errors import ConfigError
from ledger.home import Home
from tests.conftest import CliResult

Cli = Callable[..., CliResult]
FIXTURE = Path(__file__).parent / "fixtures" / "format1-home"
LOGGED = 9  # the fixture's entries (tests/test_migrate.py)


@pytest.fixture
def migrated(cli: Cli, home: Path) -> Path:
    shutil.copytree(FIXTURE, home)
    r = cli("migrate", "--relocate")
    assert r.code == 0, r.out + r.err
    return home


def _record(cli: Cli) -> None:
    r = cli("record", "note", "--key", "admin", "-s", "campaign=c", "--data", '{"text": "after"}')
    assert r.code == 0, r.out + r.err


def test_a_home_migrated_from_format_1_audits_without_receipts_unchecked(cli: Cli, migrated: Path) -> None:
    assert Home(migrated).config().receipts_from == LOGGED
    r = cli("audit")
    assert r.code == 0, r.out + r.err
    assert "receipts-unchecked" not in r.err and "removed or emptied" not in r.err
    assert f"the first {LOGGED} entries" in r.err and "before it kept receipts" in r.err  # said plainly
    j = cli("audit", "--json")
    assert j.code == 0 and j.json()["receipts_from"] == LOGGED and j.json()["ok"] is True
    v = cli("verify", "--receipts")
    assert v.code == 0, v.out + v.err


def test_a_migrated_home_checks_the_receipts_it_keeps_after_the_upgrade(cli: Cli, migrated: Path) -> None:
    """Neighbour: an entry appended after the upgrade has its receipt kept and checked; removing the file
    then is ``receipts-unchecked`` again (an entry past ``receipts_from`` had one)."""
    _record(cli)
    j = cli("audit", "--json")
    assert j.code == 0 and j.json()["receipts"] == 1 and j.json()["newest_index"] == LOGGED, j.out
    (migrated / "receipts.jsonl").unlink()
    r = cli("audit", "--json")
    assert r.code == 1 and [p["code"] for p in r.json()["problems"]] == ["receipts-unchecked"], r.out


def test_a_home_made_by_this_ledger_still_expects_every_receipt_after_migrate(cli: Cli, home: Path) -> None:
    """Neighbour: ``migrate`` of a current home records nothing: a removed receipts file stays a problem."""
    assert cli("init").code == 0
    _record(cli)
    assert cli("migrate").code == 0
    assert Home(home).config().receipts_from == 0
    assert "receipts_from" not in (home / "ledger.toml").read_text()
    (home / "receipts.jsonl").unlink()
    r = cli("audit", "--json")
    assert r.code == 1 and [p["code"] for p in r.json()["problems"]] == ["receipts-unchecked"], r.out


@pytest.mark.parametrize("value", ['"9"', "-1", "true", "9.0"])
def test_a_mistyped_receipts_from_is_refused_not_read_as_zero(cli: Cli, home: Path, value: str) -> None:
    """Neighbour: the setting mistyped (a string, negative, a bool, a float) is a config error."""
    assert cli("init").code == 0
    cfg = home / "ledger.toml"
    cfg.write_text(cfg.read_text() + f"receipts_from = {value}\n")
    with pytest.raises(ConfigError, match="receipts_from"):
        Home(home).config()
    r = cli("audit")
    assert r.code != 0 and "receipts_from" in r.err


def test_a_migrated_home_config_round_trips_receipts_from(cli: Cli, migrated: Path) -> None:
    """Neighbour: a second migrate keeps the recorded size (the database is format 2 by then)."""
    assert cli("migrate").code == 0
    assert Home(migrated).config().receipts_from == LOGGED
