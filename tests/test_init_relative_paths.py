"""`ledger init --store DIR --database-url sqlite:///FILE` with relative paths, and missing SQLite databases.

Regression: a relative --store or SQLite file was created relative to the current directory but written
to ledger.toml as given, where it is read relative to the home: `log` and `verify` then ended in a
SQLAlchemy traceback (leaving an empty database in the home) and `put` found no store. And any command
opening a SQLite database that does not exist created it (an empty file) before failing with a traceback.

Now `init` reads relative paths against the current directory, as typed, and ledger.toml keeps them
relative to the home when they lie inside it (a `cp -a` copy is a ledger of its own), absolute when not;
a command other than `init` refuses a SQLite database that does not exist (exit 2) and creates nothing.
"""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path
from typing import Any

import pytest

from ledger.home import (
    Home,
    absolute_database_url,
    absolute_store,
    relative_database_url,
    relative_store,
)


def _toml(home: Path) -> dict[str, Any]:
    return tomllib.loads((home / "ledger.toml").read_text())


def _files(folder: Path) -> set[str]:
    """The files in ``folder`` (SQLite's -wal and -shm left out: they come and go with connections)."""
    names = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    return {n for n in names if not n.endswith(("-wal", "-shm"))}


def _stored(store: Path) -> list[Path]:
    return [p for p in store.rglob("*") if p.is_file() and not p.name.startswith(".")]


def test_init_with_a_relative_store_and_database_makes_a_working_home(
    tmp_path: Path, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    work, home = tmp_path / "work", tmp_path / "h"
    work.mkdir()
    monkeypatch.chdir(work)
    r = cli("init", "--home", str(home), "--store", "mystore", "--database-url", "sqlite:///my.db")
    assert r.code == 0, r.err
    # created where the user typed them (the current directory), and named there, absolute (outside the home)
    assert (work / "my.db").is_file() and (work / "mystore").is_dir()
    cfg = _toml(home)
    assert cfg["database_url"] == f"sqlite:///{work / 'my.db'}"
    assert cfg["store"] == str(work / "mystore")
    f = work / "f.txt"
    f.write_text("x\n")
    for args in (["log"], ["verify"], ["put", str(f)], ["keys", "new", "hostA", "--role", "collector"]):
        r = cli("--home", str(home), *args)
        assert r.code == 0, (args, r.err)
        assert "Traceback" not in r.err
    assert len(_stored(work / "mystore")) == 1
    # the home holds neither a database nor a store of its own
    assert not (home / "my.db").exists() and not (home / "mystore").exists()
    # from another directory the home still finds them (nothing is read relative to the current directory)
    monkeypatch.chdir(tmp_path)
    r = cli("--home", str(home), "verify")
    assert r.code == 0, r.err
    assert r.out.startswith("ok: 2 entries")


def test_a_home_made_with_relative_paths_is_relocatable(
    tmp_path: Path, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Relative paths that lie inside the home (typed from its parent) are kept relative to the home."""
    monkeypatch.chdir(tmp_path)
    r = cli("init", "--home", "a", "--store", "a/objects", "--database-url", "sqlite:///a/db/../my.db")
    assert r.code == 0, r.err
    a = tmp_path / "a"
    cfg = _toml(a)
    assert (cfg["database_url"], cfg["store"]) == ("sqlite:///my.db", "objects")
    assert str(tmp_path) not in (a / "ledger.toml").read_text()
    assert (a / "my.db").is_file() and (a / "objects").is_dir()
    b = tmp_path / "b"
    shutil.copytree(a, b, symlinks=True)  # cp -a
    before = _files(a)
    f = tmp_path / "f.txt"
    f.write_text("only in the copy\n")
    assert cli("--home", "b", "put", str(f)).code == 0
    assert cli("--home", "b", "keys", "new", "hostA", "--role", "collector").code == 0
    assert Home(b).config().database_url == f"sqlite:///{b / 'my.db'}"
    # the copy wrote into itself only
    assert _files(a) == before and _stored(a / "objects") == []
    assert len(_stored(b / "objects")) == 1
    r = cli("--home", "b", "verify")
    assert r.code == 0 and r.out.startswith("ok: 2 entries"), r.err
    r = cli("--home", "a", "verify")
    assert r.code == 0 and r.out.startswith("ok: 1 entries"), r.err


def test_verify_of_a_missing_sqlite_database_creates_nothing(
    tmp_path: Path, cli: Any, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cli("init").code == 0
    monkeypatch.chdir(tmp_path)
    for url, missing in (
        (f"sqlite:///{tmp_path / 'missing.db'}", tmp_path / "missing.db"),
        ("sqlite:///rel/missing.db", tmp_path / "rel" / "missing.db"),  # relative to the current directory
    ):
        r = cli("verify", "--database-url", url)
        assert r.code == 2, r.err
        assert r.err.startswith("error[bad-input]: database ") and f"{missing} does not exist" in r.err
        assert "Traceback" not in r.err
        assert not missing.exists()
        assert not Path(f"{missing}-wal").exists() and not Path(f"{missing}-journal").exists()
    assert not (tmp_path / "rel").exists()
    r = cli("verify", "--database-url", f"sqlite:///{tmp_path}")  # a folder, not a database file
    assert r.code == 2 and f"database {tmp_path} is not a file" in r.err, r.err
    r = cli("verify", "--database-url", "no-such-driver://x")  # not a database URL at all
    assert r.code == 2 and "Traceback" not in r.err, r.err


# --- neighbours --------------------------------------------------------------------------------------------


def test_init_with_absolute_paths_outside_the_home_records_them_absolute(
    tmp_path: Path, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere, home = tmp_path / "elsewhere", tmp_path / "h"
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{elsewhere / 'db' / 'l.db'}"
    (elsewhere / "db").mkdir(parents=True)
    r = cli("init", "--home", str(home), "--store", str(elsewhere / "store"), "--database-url", url)
    assert r.code == 0, r.err
    assert (_toml(home)["database_url"], _toml(home)["store"]) == (url, str(elsewhere / "store"))
    assert cli("--home", str(home), "verify").code == 0


def test_init_with_a_relative_path_leading_out_of_the_home_records_it_absolute(
    tmp_path: Path, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Typed from inside the home, `../shared/store` lies outside it: kept absolute, normalised."""
    home = tmp_path / "h"
    home.mkdir()
    monkeypatch.chdir(home)
    r = cli("init", "--home", ".", "--store", "../shared/store", "--database-url", "sqlite:///here.db")
    assert r.code == 0, r.err
    cfg = _toml(home)
    assert cfg["store"] == str(tmp_path / "shared" / "store")  # outside the home: absolute
    assert cfg["database_url"] == "sqlite:///here.db"  # inside it: relative to the home
    monkeypatch.chdir(tmp_path)
    assert cli("--home", "h", "verify").code == 0


def test_init_with_absolute_paths_inside_the_home_records_them_relative(
    tmp_path: Path, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "h"
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{home / 'data' / 'l.db'}"
    (home / "data").mkdir(parents=True)
    r = cli("init", "--home", str(home), "--store", str(home / "s"), "--database-url", url)
    assert r.code == 0, r.err
    assert (_toml(home)["database_url"], _toml(home)["store"]) == ("sqlite:///data/l.db", "s")


def test_init_defaults_are_relative_to_the_home(
    tmp_path: Path, cli: Any, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli("init").code == 0
    assert (_toml(home)["database_url"], _toml(home)["store"]) == ("sqlite:///ledger.db", "store")


def test_a_home_whose_database_is_missing_is_refused_and_nothing_is_created(
    tmp_path: Path, cli: Any, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The homes the old `init` made: ledger.toml names a database relative to the home that is not there."""
    assert cli("init").code == 0
    (home / "ledger.db").unlink()
    for extra in ("-wal", "-shm"):
        Path(f"{home / 'ledger.db'}{extra}").unlink(missing_ok=True)
    monkeypatch.chdir(tmp_path)
    for args in (["log"], ["verify"], ["keys", "list"], ["migrate"]):
        r = cli(*args)
        assert r.code == 2, (args, r.err)
        assert f"error[bad-input]: database {home / 'ledger.db'} does not exist" in r.err
        assert not (home / "ledger.db").exists()


def test_path_helpers_leave_other_databases_and_stores_alone(tmp_path: Path) -> None:
    for url in ("sqlite://", "sqlite:///:memory:", "postgresql+psycopg://u@db/l", "sqlite:////abs/l.db"):
        assert absolute_database_url(url, tmp_path) == url
        assert relative_database_url(url, tmp_path) == url
    for store in ("s3://bucket/prefix?endpoint=http://x", "/abs/store"):
        assert absolute_store(store, tmp_path) == store
        assert relative_store(store, tmp_path) == store
    assert absolute_database_url("sqlite:///a/../l.db", tmp_path) == f"sqlite:///{tmp_path / 'l.db'}"
    assert relative_database_url(f"sqlite:///{tmp_path / 'x' / 'l.db'}", tmp_path) == "sqlite:///x/l.db"
    assert relative_store(str(tmp_path / "s"), tmp_path) == "s"
    assert absolute_store("s", tmp_path) == str(tmp_path / "s")


def test_ledger_init_through_the_python_api_with_a_relative_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (found by audit 27): `Ledger.init(Path("rel/home"))` wrote its database relative to the
    current directory into a configuration read relative to the home, so opening it looked for
    rel/home/rel/home/ledger.db. The CLI resolved --home first; the library does too now."""
    from ledger.service import Ledger

    monkeypatch.chdir(tmp_path)
    led = Ledger.init(Path("rel/home"))
    led.close()
    again = Ledger.open(Path("rel/home"))
    try:
        assert again.size() >= 1
    finally:
        again.close()
    assert (tmp_path / "rel" / "home" / "ledger.db").is_file()
