"""``ledger``: the Typer adapter over ledger.service. Parse, call the service, render.

Every command lives in this package: ``core`` (init, keys, put, cat, record, show, log, verify, checkpoint,
proof …), ``collect`` (collect …, push), ``policy`` (verdict, check, policy), ``serve`` (serve, tokens),
``export`` (export attestation), ``bundle`` (bundle create, verify, report) and ``witness`` (witness …).
Commands return an outcome (or raise a ``LedgerError``); ``main`` owns the one map from outcomes and errors
to exit codes.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import sys
from typing import Any

import typer

try:  # Typer >= 0.22 ships its own Click; its usage errors are these classes (typer exports only their base)
    from typer._click.exceptions import NoArgsIsHelpError, UsageError
except ImportError:  # pragma: no cover - older Typer runs on Click itself
    from click.exceptions import NoArgsIsHelpError, UsageError  # type: ignore[assignment]

from ledger.cli import core
from ledger.cli._common import STATE, Cancelled, Outcome
from ledger.errors import LedgerError

__all__ = ["EXIT_ERROR", "EXIT_NO", "EXIT_OK", "app", "console_main", "exit_code", "main"]

EXIT_OK = 0
EXIT_NO = 1  # the command ran and its answer is "no": verify found problems, check denies …
EXIT_ERROR = 2  # usage, input, trust, integrity or system error: nothing was recorded


def _keep_result(value: Any, **_params: Any) -> None:
    """Root result callback: what the invoked command returned, kept for ``main`` to map."""
    STATE.result = value


def _new_app() -> typer.Typer:
    """The root Typer app, without commands: ``app`` holds them all, ``_app_for`` one of them."""
    return typer.Typer(
        name="ledger",
        help="Evidence ledger for qualifying LLM inference backends.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        add_completion=True,  # --install-completion / --show-completion [bash|zsh|fish]
        result_callback=_keep_result,
    )


# The module that registers each top-level command and sub-app. `main` imports only the one a command
# needs (`ledger verdict` need not import the collectors' or the bundle's adapters); the whole `app`, for
# root help and unknown names, imports them all. tests/test_cli_conventions.py holds every name the whole
# app registers to exactly this table.
_MODULE_OF: dict[str, str] = {
    **dict.fromkeys(
        ("init", "kinds", "put", "cat", "record", "review", "accept", "supersede", "show", "log", "verify",
         "checkpoint", "audit", "migrate", "completion", "keys", "store", "proof", "tiles"),
        "core",
    ),
    **dict.fromkeys(("collect", "campaign", "push"), "collect"),
    **dict.fromkeys(("verdict", "check", "policy"), "policy"),
    **dict.fromkeys(("serve", "tokens"), "serve"),
    "export": "export",
    "bundle": "bundle",
    "witness": "witness",
}  # fmt: skip


def _register(target: typer.Typer, modules: frozenset[str]) -> None:
    """Register the commands of ``modules`` on ``target``, in help order (commands, then sub-apps, each in
    the order added here), importing only those modules."""
    target.callback()(core.root)
    if "core" in modules:
        core.register(target)
    if "collect" in modules:
        from ledger.cli import collect

        target.add_typer(collect.collect_app, name="collect")
        target.add_typer(collect.campaign_app, name="campaign")
    if "policy" in modules:
        from ledger.cli import policy

        policy.register(target)
    if "serve" in modules:
        from ledger.cli import serve

        target.command("serve")(serve.serve)
        target.add_typer(serve.tokens_app, name="tokens")
    if "collect" in modules:
        from ledger.cli import collect

        target.command("push")(collect.push)
    if "export" in modules:
        from ledger.cli import export

        export.register(target)
    if "bundle" in modules:
        from ledger.cli import bundle

        bundle.register(target)
    if "witness" in modules:
        from ledger.cli import witness

        witness.register(target)


def _whole_app() -> typer.Typer:
    whole = _new_app()
    _register(whole, frozenset(_MODULE_OF.values()))
    return whole


def _the_app() -> typer.Typer:
    """The whole app, every command registered: built on first use, then kept as ``app``."""
    found: typer.Typer | None = globals().get("app")
    if found is None:
        found = globals()["app"] = _whole_app()
    return found


def __getattr__(name: str) -> Any:
    """``app`` is built on first use (``_the_app``)."""
    if name == "app":
        return _the_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _root_value_options() -> frozenset[str]:
    """The root's options that take a value (``--home DIR``), as Typer builds them from the root callback."""
    root = _new_app()
    root.callback()(core.root)
    params = typer.main.get_group(root).params
    return frozenset(
        opt
        for p in params
        if p.param_type_name == "option" and not getattr(p, "is_flag", False)
        for opt in (*p.opts, *p.secondary_opts)
    )


def _command_of(args: list[str]) -> str | None:
    """The command name ``args`` invoke: the first word after the root options, None when there is none
    or a root option other than a value option comes first (``--help``, ``--version``, completion)."""
    takes_value = _root_value_options()
    words = iter(args)
    for word in words:
        if not word.startswith("-"):
            return word
        name = word.split("=", 1)[0]
        if name not in takes_value:
            return None
        if "=" not in word:
            next(words, None)
    return None


def _app_for(args: list[str]) -> typer.Typer:
    """The app ``main`` runs: the root with only the command (or sub-app) ``args`` name.

    Typer builds a Click command for every command an app holds before it parses anything; a fresh
    ``ledger log`` need not build ~70 of them. The command is the same registered function with the same
    root callback, so it parses, helps and fails as in ``app``. Anything else (no command, root options
    only, a name that is not a command, shell completion) runs the whole ``app``.
    """
    if any(k.endswith("_COMPLETE") for k in os.environ if k.startswith("_LEDGER")):
        return _the_app()
    name = _command_of(args)
    module = _MODULE_OF.get(name) if name is not None else None
    if module is None:
        return _the_app()
    part = _new_app()
    _register(part, frozenset({module}))
    commands = [c for c in part.registered_commands if _registered_name(c) == name]
    groups = [g for g in part.registered_groups if g.name == name]
    if len(commands) + len(groups) != 1:
        return _the_app()
    one = _new_app()
    one.registered_callback = part.registered_callback
    one.registered_commands = commands
    one.registered_groups = groups
    return one


def _registered_name(info: typer.models.CommandInfo) -> str | None:
    if info.name:
        return info.name
    return None if info.callback is None else typer.main.get_command_name(info.callback.__name__)


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


def _json_mode(argv: list[str]) -> bool:
    """``--json`` among the options (not after ``--``, where an engine's own arguments start)."""
    args = argv[: argv.index("--")] if "--" in argv else argv
    return "--json" in args


def _print_error(error: dict[str, str], json_mode: bool) -> None:
    """The one error line (``error[code]: message (hint: …)``), or its JSON object under ``--json``."""
    if json_mode:
        sys.stderr.write(json.dumps({"error": error}, ensure_ascii=False) + "\n")
        return
    text = f"error[{error['code']}]: {error['message']}"
    if error.get("hint"):
        text += f" (hint: {error['hint']})"
    sys.stderr.write(text.replace("\n", " ") + "\n")


def _usage_error(e: UsageError) -> dict[str, str]:
    command = e.ctx.command_path if e.ctx is not None else "ledger"
    return {"code": "usage", "message": e.format_message(), "hint": f"see `{command} --help`"}


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; every error becomes one line on stderr (JSON under ``--json``) and an exit code.

    Usage errors (Click's) are ``error[usage]: …`` with exit code 2, like every other error.
    """
    STATE.home = None
    STATE.result = None
    STATE.after = []
    args = list(sys.argv[1:] if argv is None else argv)
    json_mode = _json_mode(args)
    try:
        try:
            rv = _app_for(args)(args=args, prog_name="ledger", standalone_mode=False)
        finally:
            for notice in STATE.after:
                notice()
    except LedgerError as e:
        _print_error(e.to_dict(), json_mode)
        return exit_code(e)
    except NoArgsIsHelpError as e:  # `ledger keys`: the help, and 2 as before
        e.show()
        return EXIT_ERROR
    except UsageError as e:
        _print_error(_usage_error(e), json_mode)
        return EXIT_ERROR
    except typer.Abort:
        sys.stderr.write("aborted\n")
        return EXIT_NO
    except typer.TyperException as e:
        _print_error({"code": "usage", "message": e.format_message(), "hint": ""}, json_mode)
        return e.exit_code
    except SystemExit as e:  # a library that exits (uvicorn when it cannot start)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else EXIT_ERROR)
    except KeyboardInterrupt as e:
        sys.stderr.write("interrupted\n")
        return exit_code(e)
    except OSError as e:
        _print_error({"code": "os-error", "message": str(e), "hint": ""}, json_mode)
        return exit_code(e)
    if isinstance(rv, int) and rv != 0:  # typer.Exit(code) / ctx.exit(code) in non-standalone mode
        return rv
    return exit_code(STATE.result)


def console_main() -> int:
    """The ``ledger`` command (``[project.scripts]``): ``main``, then a process exit without the
    interpreter's last full garbage collection.

    A command that judged a 10,000-entry campaign holds some 10^6 objects; the collection Python runs at
    exit walks all of them (≈ 60 ms of a 0.7 s fresh verdict) only to free what exit frees anyway.
    ``gc.freeze`` moves them out of the collector's reach; reference counting still frees every object
    and every exit handler still runs. Not in ``main``: a test calling it in process keeps collecting."""
    rc = main()
    gc.freeze()
    return rc
