"""Shared pieces of the command-line adapter: home resolution, JSON output, the error→exit map."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from ledger.errors import LedgerError

__all__ = [
    "EXIT_ERROR",
    "EXIT_FAILED",
    "EXIT_OK",
    "HomeOption",
    "JsonOption",
    "SubjectOption",
    "exit_for",
    "fail",
    "get_ledger",
    "get_store",
    "home_path",
    "print_json",
]

EXIT_OK = 0
EXIT_FAILED = 1  # the command ran and its answer is "no": verify found problems, check denies …
EXIT_ERROR = 2  # usage, input, trust, integrity or system error: nothing was recorded

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


STATE = _State()


def home_path(home: Path | None = None) -> Path:
    from ledger.home import resolve_home

    return resolve_home(home or STATE.home)


def get_ledger(home: Path | None = None) -> Any:
    """Open the ledger of ``--home`` (sub-command option, then the global one, then env/default)."""
    from ledger.service import Ledger

    return Ledger.open(home_path(home))


def get_store(home: Path | None = None) -> Any:
    """Open only the artifact store of the home: no database, no keys (fast start for ``put``/``cat``)."""
    from ledger.home import Home

    return Home(home_path(home)).open_store()


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def exit_for(error: BaseException) -> int:
    """The one map from errors to exit codes."""
    if isinstance(error, LedgerError):
        return EXIT_ERROR
    return EXIT_ERROR


def fail(error: LedgerError) -> NoReturn:
    sys.stderr.write(error.one_line() + "\n")
    raise SystemExit(exit_for(error))
