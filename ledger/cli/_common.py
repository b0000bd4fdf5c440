"""Shared pieces of the command-line adapter: options, home resolution, JSON output, command outcomes."""

from __future__ import annotations

import enum
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from ledger.service import Ledger
    from ledger.store import FilesystemStore
    from ledger.store.s3 import S3Store

__all__ = [
    "STATE",
    "Cancelled",
    "HomeOption",
    "JsonOption",
    "Outcome",
    "Result",
    "SubjectOption",
    "get_ledger",
    "get_store",
    "home_path",
    "print_json",
]


class Outcome(enum.Enum):
    """What a command says about its work; ``ledger.cli.main`` alone turns it into an exit code."""

    OK = "ok"
    NO = "no"  # the command ran and its answer is "no": verify found problems, check denies …


@dataclass(frozen=True)
class Cancelled:
    """A signal cancelled the command's work cleanly (``collect run``); the exit code says which."""

    signum: int


Result = Outcome | Cancelled | None  # what a command returns; None is OK

JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable JSON output.")]
HomeOption = Annotated[
    Path | None,
    typer.Option(
        "--home",
        envvar="LEDGER_HOME",
        help="Ledger home (default $XDG_DATA_HOME/evidence-ledger).",
        show_default=False,
    ),
]
SubjectOption = Annotated[
    list[str] | None, typer.Option("--subject", "-s", help="Subject field FIELD=VALUE (repeatable).")
]


class _State:
    home: Path | None = None
    result: Result = None


STATE = _State()


def home_path(home: Path | None = None) -> Path:
    from ledger.home import resolve_home

    return resolve_home(home or STATE.home)


def get_ledger(home: Path | None = None) -> Ledger:
    """Open the ledger of ``--home`` (sub-command option, then the global one, then env/default)."""
    from ledger.service import Ledger

    return Ledger.open(home_path(home))


def get_store(home: Path | None = None) -> FilesystemStore | S3Store:
    """Open only the artifact store of the home: no database, no keys (fast start for ``put``/``cat``)."""
    from ledger.home import Home

    return Home(home_path(home)).open_store()


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    sys.stdout.flush()
