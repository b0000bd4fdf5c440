"""Upgrading a home made by the old code (log format 1: each leaf the bare envelope) with `ledger migrate`.

The fixture ``tests/fixtures/format1-home`` was made by the ledger of commit d243d25
(``tests/fixtures/make_format1_home.py``): nine entries, an artifact, a revoked key and two checkpoints
signed under the key name ``log``. On PostgreSQL the same rows are written into a database at revision 0001.
"""

from __future__ import annotations

import dataclasses
import shutil
import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa

from ledger.db import SCHEMA_HEAD, make_engine, schema_revision
from ledger.errors import LogFormatError
from ledger.home import Home
from ledger.log import leaf_hash, parse_record
from ledger.service import Ledger
from tests.reliability import api_fixtures
from tests.reliability.api_fixtures import PgDatabases

pg_databases = api_fixtures.pg_databases

FIXTURE = Path(__file__).parent / "fixtures" / "format1-home"
TABLES = ("log_entries", "entry_subjects", "entry_refs", "entry_artifacts", "checkpoints", "api_tokens")


def _upgrade_to(url: str, revision: str) -> None:
    from alembic import command
    from alembic.config import Config

    from ledger.db import migrations_dir

    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    cfg.attributes["configure_logger"] = False
    command.upgrade(cfg, revision)


@pytest.fixture(params=["sqlite", "postgres"])
def old_home(request: pytest.FixtureRequest, tmp_path: Path, pg_databases: PgDatabases) -> Path:
    """A copy of the format-1 home, its config rewritten (absolute paths, as the old code wrote them)."""
    home = tmp_path / "home"
    shutil.copytree(FIXTURE, home)
    h = Home(home)
    cfg = h._read_config()  # as written (config() refuses its paths: they name the home it was made as)
    url = f"sqlite:///{home / 'ledger.db'}"
    if request.param == "postgres":
        api_fixtures.require_postgres()
        url = pg_databases.new()
        _upgrade_to(url, "0001")
        src, dst = make_engine(f"sqlite:///{home / 'ledger.db'}"), make_engine(url)
        meta = sa.MetaData()
        meta.reflect(src, only=TABLES)
        with src.connect() as a, dst.begin() as b:
            for name in TABLES:
                rows = [dict(r._mapping) for r in a.execute(sa.select(meta.tables[name]))]
                if rows:
                    b.execute(sa.Table(name, sa.MetaData(), autoload_with=b).insert(), rows)
        src.dispose()
        dst.dispose()
    text = h.config_path.read_text()
    text = text.replace(f'"sqlite:///{cfg.database_url.split("sqlite:///")[-1]}"', f'"{url}"')
    text = text.replace(f'"{cfg.store}"', f'"{home / "store"}"')
    h.config_path.write_text(text)
    assert str(home) in h.config_path.read_text()  # absolute, like the old code's
    return home


def test_old_home_is_refused_until_migrated(old_home: Path) -> None:
    with pytest.raises(LogFormatError) as e:
        Ledger.open(old_home)
    assert e.value.code == "log-format" and "ledger migrate" in (e.value.hint or "")


def test_ledger_migrate_upgrades_an_old_home(old_home: Path, cli, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("LEDGER_HOME", str(old_home))
    url = Home(old_home).config().database_url
    engine = make_engine(url)
    with engine.connect() as conn:
        old = conn.execute(
            sa.text("SELECT seq, entry_id, logged_at, envelope, leaf_hash FROM log_entries ORDER BY seq")
        ).all()
    assert schema_revision(engine) == "0001"
    engine.dispose()
    assert len(old) == 9 and all(leaf_hash(bytes(r.envelope)).hex() == r.leaf_hash for r in old)

    r = cli("migrate", "--json")
    assert r.code == 0, r.err
    database = sa.make_url(url).render_as_string(hide_password=True)
    assert r.json() == {
        "home": str(old_home),
        "database": database,
        "from_revision": "0001",
        "to_revision": SCHEMA_HEAD,
    }

    led = Ledger.open(old_home)
    report = led.verify()
    assert report, [p.to_json() for p in report.problems]
    assert report.size == 9 and report.checkpoints_checked == 2  # the format-1 checkpoints still check
    with led.engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT seq, entry_id, logged_at, record, leaf_hash FROM log_entries ORDER BY seq")
        ).all()
        formats = conn.execute(sa.text("SELECT size, format FROM checkpoints ORDER BY size")).all()
        if conn.dialect.name == "postgresql":  # seq is 64-bit on PostgreSQL after the upgrade
            types = conn.execute(
                sa.text(
                    "SELECT table_name, data_type FROM information_schema.columns WHERE column_name IN "
                    "('seq', 'size') AND table_name IN ('log_entries', 'entry_subjects', 'entry_refs', "
                    "'entry_artifacts', 'checkpoints')"
                )
            ).all()
            assert len(types) == 5 and {t for _, t in types} == {"bigint"}, types
    assert [tuple(f) for f in formats] == [(7, 1), (9, 1)]
    for before, after in zip(old, rows, strict=True):
        rec = parse_record(bytes(after.record))
        assert (rec.index, rec.entry_id, rec.logged_at) == (before.seq, before.entry_id, before.logged_at)
        assert after.leaf_hash == rec.leaf().hex() != before.leaf_hash

    # the migrated home goes on: a new entry, a checkpoint signed under the origin, everything verifies
    led.record("note", {"campaign": "c1"}, {"text": "after the upgrade"}, key="admin")
    cp = led.checkpoint()
    assert cp.note.split("\n\n")[1].startswith(f"\u2014 {led.origin} ")
    report = led.verify()
    assert report and report.size == 10 and report.checkpoints_checked >= 3
    # the revocation recorded by the old code is still enforced
    with pytest.raises(Exception) as e:
        led.record("note", {"campaign": "c1"}, {"text": "x"}, key="hostA")
    assert getattr(e.value, "code", "") == "key-revoked"
    led.close()

    # the configuration names the home's files relative to it now; migrating again changes nothing
    text = (old_home / "ledger.toml").read_text()
    if url.startswith("sqlite"):
        assert str(old_home) not in text, text
    r = cli("migrate")
    assert r.code == 0 and "already at revision" in r.out


def test_a_format1_checkpoint_still_guards_the_migrated_log(
    old_home: Path, cli, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """A rewrite of an old entry after the upgrade is named by the checkpoints the old code signed."""
    monkeypatch.setenv("LEDGER_HOME", str(old_home))
    assert cli("migrate").code == 0
    led = Ledger.open(old_home)
    with led.engine.begin() as conn:
        if conn.dialect.name == "sqlite":
            conn.exec_driver_sql("DROP TRIGGER log_entries_no_update")
        else:
            conn.exec_driver_sql("DROP TRIGGER log_entries_append_only ON log_entries")
        env = conn.execute(sa.text("SELECT envelope FROM log_entries WHERE seq=3")).scalar_one()
        forged = bytes(env).replace(b'"payload":"', b'"payload":"A', 1)
        conn.execute(sa.text("UPDATE log_entries SET envelope=:e WHERE seq=3"), {"e": forged})
    codes = {p.code for p in led.verify().problems}
    assert "checkpoint-mismatch" in codes, codes
    led.close()


def test_home_copied_with_cp_a_writes_only_into_itself(tmp_path: Path) -> None:
    """Finding: a home copied with `cp -a` wrote into the original (absolute paths in its config)."""
    a = tmp_path / "a"
    led = Ledger.init(a)
    led.new_key("hostA", ["collector"])
    art = tmp_path / "out.log"
    art.write_text("hello\n")
    led.record("note", {"campaign": "c"}, {"text": "one"}, key="hostA")
    led.close()
    assert str(a) not in (a / "ledger.toml").read_text()
    b = tmp_path / "b"
    shutil.copytree(a, b, symlinks=True)
    copy = Ledger.open(b)
    assert copy.database_url == f"sqlite:///{b / 'ledger.db'}"
    copy.record(
        "note", {"campaign": "c"}, {"text": "two"}, key="hostA", artifacts=[copy.artifact_ref("o", art)]
    )
    assert copy.size() == 4
    copy.close()
    original = Ledger.open(a)
    assert original.size() == 3 and original.verify()
    # the artifact went into the copy's store, none into the original's
    assert [p for p in (a / "store").rglob("*") if p.is_file()] == []
    assert [p for p in (b / "store").rglob("*") if p.is_file() and not p.name.startswith(".")]
    original.close()
    assert Ledger.open(b).verify()


def test_config_with_paths_outside_the_home_keeps_them(tmp_path: Path) -> None:
    store = tmp_path / "elsewhere" / "store"
    led = Ledger.init(tmp_path / "h", store=str(store))
    led.close()
    h = Home(tmp_path / "h")
    assert h.config().store == str(store)
    assert dataclasses.replace(h.config(), store=str(store)) == h.config()


def test_verify_database_url_checks_another_database(
    tmp_path: Path, cli, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """`ledger verify --database-url`: a copy of the database (a replica, a restored backup) is verified
    with the home's keys and origin; a tampered copy is named, the home's own database untouched."""
    home = tmp_path / "home"
    monkeypatch.setenv("LEDGER_HOME", str(home))
    assert cli("init").code == 0
    assert cli("record", "note", "--key", "admin", "-s", "campaign=c", "--data", '{"text": "x"}').code == 0
    copy = tmp_path / "replica.db"
    src = sqlite3.connect(home / "ledger.db")
    dst = sqlite3.connect(copy)
    src.backup(dst)
    src.close()
    r = cli("verify", "--database-url", f"sqlite:///{copy}", "--json")
    assert r.code == 0, r.err
    assert r.json()["size"] == 2
    dst.execute("DROP TRIGGER log_entries_no_update")
    dst.execute("UPDATE log_entries SET logged_at='2020-01-01T00:00:00Z' WHERE seq=1")
    dst.commit()
    dst.close()
    r = cli("verify", "--database-url", f"sqlite:///{copy}", "--json")
    assert r.code == 1 and "record-mismatch" in {p["code"] for p in r.json()["problems"]}
    assert cli("verify").code == 0


def _md5s(home: Path) -> dict[str, str]:
    import hashlib

    return {
        str(p.relative_to(home)): hashlib.md5(p.read_bytes()).hexdigest()
        for p in home.rglob("*")
        if p.is_file()
    }


def test_migrate_on_a_cp_a_copy_of_an_old_home_does_not_migrate_the_original(
    tmp_path: Path, cli, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """Found by an audit: `ledger migrate` on a `cp -a` copy of a home the old code made (absolute paths in
    its config) migrated the original's database, said "migrated <copy>", and the copy's appends then went
    into the original. Now every command refuses such a copy, naming the other home, and
    `migrate --relocate` points it at its own files; the original is not touched."""
    orig = tmp_path / "orig"
    shutil.copytree(FIXTURE, orig)
    text = (orig / "ledger.toml").read_text().replace("/tmp/oldhome/home", str(orig))
    (orig / "ledger.toml").write_text(text)
    copy = tmp_path / "copy"
    shutil.copytree(orig, copy, symlinks=True)
    before = _md5s(orig)
    monkeypatch.setenv("LEDGER_HOME", str(copy))
    r = cli("migrate")
    assert r.code == 2, r.out + r.err
    assert (
        f"database_url names {orig / 'ledger.db'}, which is not this home's but in the home at {orig}"
        in r.err
    )
    assert "ledger migrate --relocate" in r.err
    assert cli("keys", "new", "extra", "--role", "collector").code == 2  # no command writes through it
    assert _md5s(orig) == before
    r = cli("migrate", "--relocate", "--json")
    assert r.code == 0, r.err
    assert r.json()["database"] == f"sqlite:///{copy / 'ledger.db'}"
    assert 'database_url = "sqlite:///ledger.db"' in (copy / "ledger.toml").read_text()
    assert 'store = "store"' in (copy / "ledger.toml").read_text()
    assert cli("keys", "new", "extra", "--role", "collector").code == 0
    assert _md5s(orig) == before, "the original is untouched"
    led = Ledger.open(copy)
    assert led.size() == 10 and led.verify()
    led.close()


def test_a_moved_old_home_is_refused_until_relocated(
    tmp_path: Path, cli, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """The neighbour: the old home was moved (its absolute paths now name nothing) — refused the same way
    (it would fail on a missing database, or make a new one); `migrate --relocate` uses the moved files."""
    gone = tmp_path / "gone"
    moved = tmp_path / "moved"
    shutil.copytree(FIXTURE, moved)
    text = (moved / "ledger.toml").read_text().replace("/tmp/oldhome/home", str(gone))
    (moved / "ledger.toml").write_text(text)
    monkeypatch.setenv("LEDGER_HOME", str(moved))
    r = cli("verify")
    assert r.code == 2 and "gone (the home was moved)" in r.err, r.err
    assert cli("migrate", "--relocate").code == 0
    assert not gone.exists()
    assert cli("verify").code == 0


@pytest.mark.parametrize(
    "args", [["verify"], ["log"], ["checkpoint"], ["keys", "list"], ["verdict", "-s", "campaign=c"]]
)
def test_a_command_refusing_an_old_home_leaves_its_database_file_untouched(
    tmp_path: Path, args: list[str]
) -> None:
    """Regression: `ledger verify` on a format-1 home changed the SQLite file's header (its first connection
    made it WAL) before refusing it. The revision is read read-only, before any connection that writes."""
    import hashlib
    import subprocess
    import sys

    home = tmp_path / "home"
    shutil.copytree(FIXTURE, home)
    cfg = home / "ledger.toml"
    cfg.write_text(cfg.read_text().replace("/tmp/oldhome/home", str(home)))
    before = hashlib.sha256((home / "ledger.db").read_bytes()).hexdigest()
    ledger_bin = str(Path(sys.executable).parent / "ledger")
    r = subprocess.run([ledger_bin, "--home", str(home), *args], capture_output=True, text=True, check=False)
    assert r.returncode == 2 and "error[log-format]" in r.stderr, (r.stdout, r.stderr)
    assert hashlib.sha256((home / "ledger.db").read_bytes()).hexdigest() == before
    assert not (home / "ledger.db-wal").exists()
