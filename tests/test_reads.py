"""`ledger log` and `ledger show` on a SQLite home read through ``ledger.reads.SqliteEntries`` (stdlib
sqlite3) for a fast start; what they print must be what the service would print, filter for filter,
error for error. And they must start without the web stack and the ORM (issue 13: ≤ 0.3 s beside
`ledger --help`)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from ledger.errors import EntryNotFoundError, InputError, KeyNotFoundError, LedgerError, LogFormatError
from ledger.reads import SqliteEntries, sqlite_file
from ledger.service import Ledger

LEDGER_BIN = str(Path(sys.executable).with_name("ledger"))
HEAVY = (
    "fastapi",
    "uvicorn",
    "starlette",
    "sqlmodel",
    "sqlalchemy",
    "alembic",
    "ledger.service",
    "ledger.db",
)


@pytest.fixture
def filled(ledger: Ledger) -> Ledger:
    ledger.new_key("hostA", ["collector"])
    ledger.new_key("rev", ["reviewer"])
    for i in range(7):
        ledger.record(
            "note", {"campaign": f"c{i % 2}", "host": f"h{i % 3}"}, {"text": f"note {i}"}, key="hostA"
        )
    first = ledger.query(kind="note", limit=1)[0]
    ledger.record(
        "review", {"campaign": "c0"}, {"result": "PASS"}, key="rev", refs=[("reviews", first.entry_id)]
    )
    return ledger


QUERIES: list[dict[str, object]] = [
    {},
    {"limit": 3},
    {"limit": 0},
    {"after_seq": 4, "limit": 2},
    {"kind": "note"},
    {"kind": "key.*"},
    {"kind": "KEY.*"},  # LIKE on SQLite: both paths run the same pattern
    {"subject": {"campaign": "c0"}},
    {"subject": {"campaign": "c1", "host": "h0"}},
    {"signer": "hostA"},
    {"signer": "rev", "kind": "review"},
    {"since": "2000-01-01T00:00:00Z", "until": "2999-01-01T00:00:00Z"},
    {"since": "2999-01-01T00:00:00Z"},
]


@pytest.mark.parametrize("filters", QUERIES, ids=[json.dumps(q, sort_keys=True) for q in QUERIES])
def test_sqlite_reads_return_what_the_service_returns(filled: Ledger, filters: dict[str, object]) -> None:
    fast = SqliteEntries.open(filled.database_url)
    assert fast is not None
    try:
        want = filled.query(**filters)  # type: ignore[arg-type]
        got = fast.query(**filters)  # type: ignore[arg-type]
        assert got == want
        limit = filters.get("limit", 100)
        assert fast.page_json(got, limit) == filled.page_json(want, limit)  # type: ignore[arg-type]
        assert fast.signer_names() == filled.signer_names()
        for e in want:
            assert fast.get(e.entry_id) == filled.get(e.entry_id)
            assert fast.get(e.entry_id[:10]) == filled.get(e.entry_id[:10])
    finally:
        fast.close()


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda r: r.get("nothex!!"), InputError),
        (lambda r: r.get("abc"), InputError),
        (lambda r: r.get("0" * 64), EntryNotFoundError),
        (lambda r: r.get("ffffffffff"), EntryNotFoundError),
        (lambda r: r.query(signer="nobody"), KeyNotFoundError),
        (lambda r: r.query(subject={"campaign": "a\x00b"}), InputError),
        (lambda r: r.query(since="not a time"), InputError),
    ],
)
def test_sqlite_reads_fail_as_the_service_fails(filled: Ledger, call, error) -> None:  # type: ignore[no-untyped-def]
    fast = SqliteEntries.open(filled.database_url)
    assert fast is not None
    try:
        with pytest.raises(error) as slow_err:
            call(filled)
        with pytest.raises(error) as fast_err:
            call(fast)
        assert isinstance(slow_err.value, LedgerError) and isinstance(fast_err.value, LedgerError)
        assert fast_err.value.to_dict() == slow_err.value.to_dict()
    finally:
        fast.close()


def test_an_ambiguous_prefix_lists_the_same_candidates(ledger: Ledger) -> None:
    for i in range(40):
        ledger.record("note", {"campaign": "p"}, {"text": str(i)}, key="admin")
    fast = SqliteEntries.open(ledger.database_url)
    assert fast is not None
    try:
        for prefix in "0123456789abcdef":  # the candidate lists both paths hand to resolve_entry_id
            assert fast._ids_with_prefix(prefix, 6) == ledger.repo.ids_with_prefix(prefix, limit=6)
    finally:
        fast.close()


def test_other_databases_and_unmigrated_files_go_through_the_service(tmp_path: Path) -> None:
    assert sqlite_file("postgresql+psycopg://root@127.0.0.1:5432/test") is None
    assert sqlite_file("sqlite://") is None
    assert sqlite_file("sqlite:///:memory:") is None
    assert sqlite_file("sqlite:////x/ledger.db?mode=ro") is None
    assert sqlite_file("sqlite:////x/ledger.db") == Path("/x/ledger.db")
    assert SqliteEntries.open("postgresql+psycopg://root@127.0.0.1:5432/test") is None
    assert SqliteEntries.open(f"sqlite:///{tmp_path / 'absent.db'}") is None
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    assert SqliteEntries.open(f"sqlite:///{empty}") is None  # no schema revision: the service decides


def test_a_database_of_another_schema_revision_is_refused_as_the_service_refuses(ledger: Ledger) -> None:
    url = ledger.database_url
    ledger.close()
    path = sqlite_file(url)
    assert path is not None
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0001'")
    with pytest.raises(LogFormatError) as fast:
        SqliteEntries.open(url)
    with pytest.raises(LogFormatError) as slow:
        Ledger.open(ledger.home.path)
    assert fast.value.to_dict() == slow.value.to_dict()


def test_cli_log_and_show_print_what_the_service_path_prints(
    cli, filled: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    some = filled.query(kind="note", limit=1)[0].entry_id
    runs = [
        ("log",),
        ("log", "--json"),
        ("log", "--json", "--limit", "2"),
        ("log", "-s", "campaign=c1", "--kind", "note", "--signer", "hostA"),
        ("show", some),
        ("show", some[:12], "--json"),
        ("show", some, "--envelope"),
        ("show", "0" * 64),
        ("log", "--signer", "nobody"),
    ]
    fast = [cli(*r) for r in runs]
    import ledger.reads

    monkeypatch.setattr(ledger.reads.SqliteEntries, "open", classmethod(lambda cls, url: None))
    slow = [cli(*r) for r in runs]
    assert fast == slow
    assert fast[0].code == 0 and fast[-1].code == 2


def _modules_loaded(home: Path, *args: str) -> list[str]:
    """The heavy modules a fresh `ledger ARGS` process has imported when it ends."""
    code = (
        "import sys\n"
        "from ledger.cli import main\n"
        "rc = main(sys.argv[1:])\n"
        f"heavy = sorted(m for m in {HEAVY!r} if m in sys.modules)\n"
        "sys.stderr.write('HEAVY=' + ','.join(heavy) + '\\n')\n"
        "raise SystemExit(rc)\n"
    )
    env = {**os.environ, "LEDGER_HOME": str(home)}
    p = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert p.returncode == 0, p.stderr
    line = next(x for x in p.stderr.splitlines() if x.startswith("HEAVY="))
    return [m for m in line.removeprefix("HEAVY=").split(",") if m]


def test_log_and_show_start_without_the_web_stack_or_the_orm(filled: Ledger) -> None:
    """Regression (issue 13: `ledger log` took ~0.8 s to start, importing SQLAlchemy and SQLModel)."""
    some = filled.query(kind="note", limit=1)[0].entry_id
    home = filled.home.path
    assert _modules_loaded(home, "log", "--help") == []
    assert _modules_loaded(home, "log") == []
    assert _modules_loaded(home, "log", "--json", "-s", "campaign=c0", "--signer", "hostA") == []
    assert _modules_loaded(home, "show", some) == []
    assert _modules_loaded(home, "show", some[:10], "--json") == []
    # the check can fail: a command that opens the service does load them
    assert "sqlalchemy" in _modules_loaded(home, "keys", "list")
