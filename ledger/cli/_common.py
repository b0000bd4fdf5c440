"""Shared pieces of the command-line adapter: options, home resolution, output conventions, outcomes.

Output conventions (every command follows them):

- ``--json``: one object on stdout; a list read is ``{"items": [...], "next": CURSOR|null}``
  (``print_items``);
  a single-object read is that object. Under ``--json`` errors are ``{"error": {"code", "message", "hint"}}``
  on stderr (``ledger.cli.main``).
- Tables (``print_table``): a Rich table on a terminal; tab-separated lines, no header, no width limit when
  stdout is piped.
- Nothing printed through ``out``/``err`` wraps when its stream is not a terminal (``_Console.print``).
- Data (ids, subjects, messages, evidence text) is printed verbatim: the consoles have markup and
  highlighting off; styling is given as ``rich.text.Text`` styles, never as markup in data.
- Progress bars (``progress``) on stderr, only when stderr is a terminal and not under ``--json``.
- Warnings go to stderr as ``warning: …`` and never change the exit code.
"""

from __future__ import annotations

import enum
import json
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ledger.listing import SUBJECT_FIELDS  # the one list (the API's subject list reads it too)

if TYPE_CHECKING:
    from rich.console import Console

    from ledger.reads import EntryReader
    from ledger.service import Ledger
    from ledger.store import FilesystemStore
    from ledger.store.s3 import S3Store

__all__ = [
    "STATE",
    "SUBJECT_FIELDS",
    "Cancelled",
    "HomeOption",
    "JsonOption",
    "Outcome",
    "Result",
    "SubjectOption",
    "err",
    "get_ledger",
    "get_reader",
    "get_store",
    "home_path",
    "out",
    "parse_subject",
    "print_items",
    "print_json",
    "print_table",
    "progress",
    "time_arg",
    "warn",
]


class _Console:
    """A Rich console made on first use: importing Rich costs every command ~15 ms, and ``--json``
    output (what CI pipelines read from ``ledger check``) never needs it. Every attribute is the
    console's; ``rich()`` is the console itself (for Rich's own ``console=`` arguments)."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Console | None = None

    def rich(self) -> Console:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return self._console

    def print(self, *objects: Any, **options: Any) -> None:
        """``Console.print``; on a stream that is not a terminal nothing is wrapped (``soft_wrap``), so a
        one-line answer stays one line whatever the width Rich assumes (80, or ``$COLUMNS``) — the
        convention "piped output has no width limit" holds for every command, not call by call."""
        console = self.rich()
        if options.get("soft_wrap") is None and not _isatty(console.file):
            options["soft_wrap"] = True
        console.print(*objects, **options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.rich(), name)


def _isatty(stream: Any) -> bool:
    """Whether ``stream`` is a terminal (the test ``print_table`` makes of stdout); a stream without
    ``isatty`` (or a closed one) is not."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


out = _Console(highlight=False, markup=False, emoji=False)
err = _Console(stderr=True, highlight=False, markup=False, emoji=False)


class Outcome(enum.Enum):
    """What a command says about its work; ``ledger.cli.main`` alone turns it into an exit code."""

    OK = "ok"
    NO = "no"  # the command ran and its answer is "no": verify found problems, check denies …


@dataclass(frozen=True)
class Cancelled:
    """A signal cancelled the command's work cleanly (``collect run``); the exit code says which."""

    signum: int


Result = Outcome | Cancelled | None  # what a command returns; None is OK

JsonOption = Annotated[
    bool, typer.Option("--json", help="Machine-readable JSON output (lists: {items, next}).")
]
HomeOption = Annotated[
    Path | None,
    typer.Option(
        "--home",
        # no envvar here: LEDGER_HOME is read once, by ``ledger.home.resolve_home``, after this option and
        # the root's `ledger --home` (an envvar default here shadowed the root's option)
        help="Ledger home (default $LEDGER_HOME, else $XDG_DATA_HOME/evidence-ledger).",
        show_default=False,
    ),
]
SubjectOption = Annotated[
    list[str] | None, typer.Option("--subject", "-s", help="Subject field FIELD=VALUE (repeatable).")
]


class _State:
    home: Path | None = None
    result: Result = None
    # called by ``main`` once the command has ended (its output printed), in order: notices such as
    # "these entries are only spooled"
    after: list[Callable[[], None]]

    def __init__(self) -> None:
        self.after = []


STATE = _State()


def home_path(home: Path | None = None) -> Path:
    from ledger.home import resolve_home

    return resolve_home(home or STATE.home)


def get_ledger(home: Path | None = None, *, database_url: str | None = None) -> Ledger:
    """Open the ledger of ``--home`` (sub-command option, then the global one, then env/default).

    Every command opens its ledger here (or in ``init_ledger``), home-bound: each entry it appends gets
    the log's receipt kept in the home, and each checkpoint it publishes or reads may advance the one the
    home holds (``Ledger.__init__``), so no command can forget either."""
    from ledger.service import Ledger

    ledger = Ledger.open(home_path(home), database_url=database_url, home_bound=True)
    try:
        _require_ledger_database(ledger)
    except BaseException:
        ledger.close()
        raise
    return ledger


def _require_ledger_database(ledger: Ledger) -> None:
    """Refuse, as one ``error[…]`` line, a database the ledger cannot use, before a command reads it:
    unreachable (``DatabaseUnreachableError``) or holding no ledger schema (never migrated:
    ``DatabaseNotInitialisedError``;
    a schema of another revision ``Ledger.__init__`` refused already; a revision row without the ledger's
    tables: another application's ``alembic_version``, or tables dropped). Without this the command's first
    query failed deep inside SQLAlchemy, a traceback and exit 1 (verify's "problems found")."""
    import sqlite3

    import sqlalchemy as sa

    from ledger.db import METADATA, schema_revision
    from ledger.errors import DatabaseNotInitialisedError, DatabaseUnreachableError

    engine = ledger.engine
    shown = engine.url.render_as_string(hide_password=True)
    tables: set[str] = set()
    if engine.dialect.name == "sqlite":
        path = engine.url.database
        if not path or path.startswith(("file:", ":")) or not Path(path).is_file():
            return  # in memory, a URI filename, or a missing file (``Ledger.open`` refused that one)
        rev = schema_revision(engine)  # read-only: never through the engine, which would change the file
        if rev is not None:
            ro = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True, timeout=60)
            try:
                tables = {r[0] for r in ro.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            except sqlite3.Error as e:
                raise DatabaseNotInitialisedError(f"database {shown}: its tables cannot be read: {e}") from e
            finally:
                ro.close()
    else:
        try:
            with engine.connect() as conn:
                inspector = sa.inspect(conn)
                has = inspector.has_table("alembic_version")
                rev = (
                    conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar() if has else None
                )
                tables = set(inspector.get_table_names()) if rev is not None else set()
        except sa.exc.DBAPIError as e:
            reason = str(e.orig if e.orig is not None else e).strip().splitlines()[0]
            raise DatabaseUnreachableError(f"cannot reach database {shown}: {reason}") from e
    if rev is None:
        raise DatabaseNotInitialisedError(f"database {shown} holds no ledger (its schema was never made)")
    # the revision row alone does not make a ledger: the tables the ledger reads (its schema, ``METADATA``:
    # what its migrations make) must be there too
    missing = sorted(set(METADATA.tables) - tables)
    if missing:
        raise DatabaseNotInitialisedError(
            f"database {shown} holds no ledger: its alembic_version names revision {rev}, but the ledger's "
            f"tables {', '.join(missing)} are not there (another application's database, or tables dropped)"
        )


def init_ledger(path: Path, *, database_url: str | None = None, store: str | None = None) -> Ledger:
    """Create a ledger home (``ledger init``, a collector host's first ``ledger enrol``), home-bound as
    ``get_ledger``: the genesis entry's receipt is kept too."""
    from ledger.service import Ledger

    return Ledger.init(path, database_url=database_url, store=store, home_bound=True)


def get_reader(home: Path | None = None) -> EntryReader:
    """What ``log`` and ``show`` read: on a SQLite home the stdlib driver (no SQLAlchemy, no service to
    import: a fast start), else the service (``ledger.reads``)."""
    from ledger.home import Home
    from ledger.reads import SqliteEntries

    path = home_path(home)
    reader = SqliteEntries.open(Home(path).config().database_url)
    return reader if reader is not None else get_ledger(path)


def get_store(home: Path | None = None) -> FilesystemStore | S3Store:
    """Open only the artifact store of the home: no database, no keys (fast start for ``put``/``cat``)."""
    from ledger.home import Home

    return Home(home_path(home)).open_store()


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def print_items(items: Sequence[Any], next_cursor: Any = None) -> None:
    """The one ``--json`` shape of a list read: the items and the cursor of the next page (or null)."""
    from ledger.listing import list_json

    print_json(list_json(items, next_cursor))


def _tsv_cell(value: object) -> str:
    from rich.text import Text

    text = value.plain if isinstance(value, Text) else str(value)
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def print_table(
    columns: Sequence[str], rows: Iterable[Sequence[object]], *, title: str | None = None
) -> None:
    """A table: Rich on a terminal; on a pipe one tab-separated line per row (no header, no cut)."""
    if not sys.stdout.isatty():
        for row in rows:
            sys.stdout.write("\t".join(_tsv_cell(c) for c in row) + "\n")
        sys.stdout.flush()
        return
    from rich.table import Table
    from rich.text import Text

    t = Table(*columns, title=title)
    for row in rows:
        t.add_row(*(c if isinstance(c, Text) else Text(str(c)) for c in row))
    out.print(t)


def warn(message: str) -> None:
    """A warning on stderr: the command goes on and its exit code does not change."""
    sys.stderr.write(f"warning: {message}\n")


def parse_subject(items: list[str] | None) -> dict[str, str]:
    """``--subject FIELD=VALUE`` options as a dict; a field outside ``SUBJECT_FIELDS`` gets a warning, a
    field that misspells one of them (``ledger.entries.misspelled_subject_field``: ``hots=``, ``modle=``) is
    an input error naming both (exit 2: it would ask about, or record, an entry that leaves the known field
    out — ingest refuses it, ``ledger.entries.subject_problem``), and a field named twice is an input error
    naming it (the last would silently win: ``parse_subject_args``, the one parser the API uses too)."""
    from ledger.entries import misspelled_subject_field, misspelled_subject_words
    from ledger.errors import InputError
    from ledger.reads import parse_subject_args

    for item in items or []:
        given = item.partition("=")[0].strip()
        known = misspelled_subject_field(given)
        if known is not None:
            raise InputError(
                f"--subject {item}: subject field {misspelled_subject_words(given, known)}",
                hint=f"write --subject {known}={item.partition('=')[2]} (the subject fields: "
                f"{', '.join(SUBJECT_FIELDS)})",
            )
    subject = parse_subject_args(items or [])
    for field in subject:
        if field not in SUBJECT_FIELDS:
            warn(f"unknown subject field {field!r} (known: {', '.join(SUBJECT_FIELDS)})")
    return subject


def time_arg(text: str | None) -> str | None:
    """A time option (``2 hours ago``, ``yesterday``, RFC 3339 …) as the RFC 3339 UTC text entries carry."""
    if text is None:
        return None
    from ledger.entries import format_time, parse_when

    return format_time(parse_when(text))


class _Bar:
    """What a command calls while it works; a no-op when the bar is not shown."""

    def __init__(self, bar: Any = None, task: Any = None) -> None:
        self._bar, self._task = bar, task

    def advance(self, n: float = 1) -> None:
        if self._bar is not None:
            self._bar.advance(self._task, n)

    def total(self, total: float | None) -> None:
        if self._bar is not None:
            self._bar.update(self._task, total=total)

    @property
    def hook(self) -> Callable[[int], None] | None:
        """The callback to hand the core (``progress=``): None when no bar is shown, so that the core
        keeps its fastest path (a piped ``cat`` verifies with every core, no per-chunk calls)."""
        return self.advance if self._bar is not None else None


@contextmanager
def progress(
    what: str, *, total: float | None = None, unit: str = "bytes", quiet: bool = False
) -> Iterator[_Bar]:
    """A progress bar on stderr while the block runs, only when stderr is a terminal (and not ``quiet``)."""
    if quiet or not sys.stderr.isatty():
        yield _Bar()
        return
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TransferSpeedColumn,
    )

    columns: list[Any] = [SpinnerColumn(), TextColumn(what), BarColumn()]
    columns += [DownloadColumn(), TransferSpeedColumn()] if unit == "bytes" else [MofNCompleteColumn()]
    columns.append(TimeElapsedColumn())
    # stdout stays the command's: Rich would otherwise route what it prints through the bar's console
    # (stderr), so `ledger put F > list` on a terminal would leave the list empty
    with Progress(
        *columns, console=err.rich(), transient=True, redirect_stdout=False, redirect_stderr=False
    ) as bar:
        task = bar.add_task(what, total=total)
        yield _Bar(bar, task)
