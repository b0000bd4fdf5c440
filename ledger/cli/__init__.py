"""``ledger``: the Typer adapter over ledger.service. Parse, call the service, render.

Every command lives in this package: ``core`` (init, keys, put, cat, record, show, log, verify, checkpoint,
proof …), ``collect`` (collect …, push), ``policy`` (verdict, check, policy) and ``serve`` (serve, tokens).
Commands return an outcome (or raise a ``LedgerError``); ``main`` owns the one map from outcomes and errors
to exit codes.
"""

from __future__ import annotations

import signal
import sys
from typing import Any

import typer

from ledger.cli import collect, core, export, policy, serve
from ledger.cli._common import STATE, Cancelled, Outcome
from ledger.errors import LedgerError

__all__ = ["EXIT_ERROR", "EXIT_NO", "EXIT_OK", "app", "exit_code", "main"]

EXIT_OK = 0
EXIT_NO = 1  # the command ran and its answer is "no": verify found problems, check denies …
EXIT_ERROR = 2  # usage, input, trust, integrity or system error: nothing was recorded


def _keep_result(value: Any, **_params: Any) -> None:
    """Root result callback: what the invoked command returned, kept for ``main`` to map."""
    STATE.result = value


app = typer.Typer(
    name="ledger",
    help="Evidence ledger for qualifying LLM inference backends.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    result_callback=_keep_result,
)
app.callback()(core.root)
# Registration order is help order: commands first, then sub-apps, each in the order added here.
core.register(app)
app.add_typer(collect.collect_app, name="collect")
policy.register(app)
app.command("serve")(serve.serve)
app.add_typer(serve.tokens_app, name="tokens")
app.command("push")(collect.push)
export.register(app)


def exit_code(result: object) -> int:
    """The one map to exit codes: a command's outcome, or the error that ended it."""
    match result:
        case None | Outcome.OK:
            return EXIT_OK
        case Outcome.NO:
            return EXIT_NO
        case Cancelled(signum=signum):
            return 128 + signum
        case KeyboardInterrupt():
            return 128 + signal.SIGINT
        case LedgerError() | OSError():
            return EXIT_ERROR
    raise TypeError(f"no exit code for {result!r}")


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; every LedgerError becomes one line on stderr and an exit code from the one map.

    Click (in standalone mode) reports usage errors itself, with exit code 2.
    """
    STATE.home = None
    STATE.result = None
    try:
        app(args=argv, standalone_mode=True)
    except LedgerError as e:
        sys.stderr.write(e.one_line() + "\n")
        return exit_code(e)
    except SystemExit as e:  # Click ends every run so: 0 after a command, 2 on usage, 1 when aborted
        if e.code == 0 or e.code is None:
            return exit_code(STATE.result)
        return e.code if isinstance(e.code, int) else 1
    except KeyboardInterrupt as e:
        sys.stderr.write("interrupted\n")
        return exit_code(e)
    except OSError as e:
        sys.stderr.write(f"error[os-error]: {e}\n")
        return exit_code(e)
    return exit_code(STATE.result)
