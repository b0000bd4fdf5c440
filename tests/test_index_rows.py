"""fix85 (issue 12, gap 1): `ledger verify` checks the index rows the readers find a campaign's entries by.

`entry_subjects`, `entry_refs` and `entry_artifacts` rows are committed by nothing but the entry they index:
an operator with database access who deletes, changes or adds one makes an entry vanish from (or appear in) a
campaign's verdict. `ledger verify` recomputes each entry's rows from its stored envelope with the function
ingest writes them with (``ledger.verify.index_rows``) and names each missing, changed or extra row with its
entry (``index-mismatch``), and a row at a seq no entry holds (beyond the log's end too: a later entry at that
seq would inherit it). SQLite home and ``--database-url`` PostgreSQL; full and ``--from`` a held checkpoint.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa

from ledger.db import LOG_TABLES, make_engine
from ledger.entries import parse_statement
from ledger.service import Ledger
from ledger.signing import parse_envelope
from ledger.verify import VerifyProblem, index_rows
from tests.api.conftest import LEDGER_BIN, PG_ADMIN, fresh_pg_database

CAMPAIGN = "c85"


@dataclass
class Log:
    led: Ledger
    home: Path
    url: str

    def edit(self, sql: str, *params: object) -> None:
        """Run ``sql`` on the log's database behind its back (the append-only triggers bypassed)."""
        if self.url.startswith("sqlite"):
            conn = sqlite3.connect(self.url.removeprefix("sqlite:///"))
            try:
                for table in LOG_TABLES:
                    conn.execute(f"DROP TRIGGER IF EXISTS {table}_no_update")
                    conn.execute(f"DROP TRIGGER IF EXISTS {table}_no_delete")
                conn.execute(sql, params)
                conn.commit()
            finally:
                conn.close()
            return
        import psycopg

        name = self.url.rsplit("/", 1)[1]
        with psycopg.connect(PG_ADMIN.replace("dbname=postgres", f"dbname={name}")) as pg:
            pg.execute("SET session_replication_role = replica")
            pg.execute(sql.replace("?", "%s"), params)

    def verify(self, **kw: object) -> list[VerifyProblem]:
        return self.led.verify(**kw).problems  # type: ignore[arg-type]


def _fill(led: Ledger, tmp: Path, n: int, tag: str) -> None:
    """``n`` notes of the campaign, every third with an artifact and a ref to the entry before it."""
    art = tmp / f"{tag}.txt"
    art.write_text(f"artifact {tag}\n")
    for i in range(n):
        prev = led.get_seq(led.size() - 1).entry_id
        extra: dict[str, object] = {}
        if i % 3 == 0:
            extra = {"artifacts": [led.artifact_ref("log.txt", art)], "refs": [("follows", prev)]}
        st = led.make_statement("note", {"campaign": CAMPAIGN, "host": "h1"}, {"text": f"{tag}{i}"}, **extra)  # type: ignore[arg-type]
        led.append([led.sign(st, led.admin_key_name)])


@pytest.fixture(params=["sqlite", "postgres"])
def log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Log]:
    """A log of a few keys and 12 campaign notes, on the home's SQLite file or a fresh PostgreSQL database."""
    with fresh_pg_database() if request.param == "postgres" else _none() as url:
        led = Ledger.init(tmp_path / "home", database_url=url)
        _fill(led, tmp_path, 12, "n")
        try:
            yield Log(led, tmp_path / "home", led.database_url)
        finally:
            led.close()


class _none:  # a context manager that yields None: the home's own SQLite file
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _seq_of(led: Ledger, text: str) -> int:
    for seq in range(led.size()):
        st = parse_envelope(bytes(led.get_seq(seq).envelope)).statement()
        if st["payload"].get("text") == text:
            return seq
    raise AssertionError(text)


def _named(problems: list[VerifyProblem]) -> list[tuple[int | None, str, str]]:
    return [(p.seq, str(p.code), p.message) for p in problems]


# --- one copy: what ingest stores is what index_rows gives -----------------------------------------------


def test_ingest_writes_the_rows_index_rows_gives(log: Log) -> None:
    engine = make_engine(log.url)
    try:
        with engine.connect() as conn:
            stored = {
                name: sorted(tuple(r) for r in conn.execute(sa.text(f"SELECT * FROM {name}")))
                for name in ("entry_subjects", "entry_refs", "entry_artifacts")
            }
    finally:
        engine.dispose()
    want: dict[str, list[tuple[object, ...]]] = {name: [] for name in stored}
    for seq in range(log.led.size()):
        st = parse_statement(parse_envelope(bytes(log.led.get_seq(seq).envelope)).statement())
        rows = index_rows(seq, st)
        want["entry_subjects"] += [(r["seq"], r["field"], r["value"]) for r in rows.subjects]
        want["entry_refs"] += [(r["seq"], r["rel"], r["target_id"]) for r in rows.refs]
        want["entry_artifacts"] += [(r["seq"], r["name"], r["digest"], r["stored"]) for r in rows.artifacts]
    assert stored == {k: sorted(v) for k, v in want.items()}
    assert want["entry_refs"] and want["entry_artifacts"]  # the log exercises every table


def test_an_untouched_log_with_refs_and_artifacts_verifies(log: Log) -> None:
    assert log.verify() == []


# --- the neighbours: deleted, changed, added for another entry, key renamed ---------------------------------


def test_a_deleted_campaign_row_is_named_with_its_entry(log: Log) -> None:
    seq = _seq_of(log.led, "n4")
    log.edit("DELETE FROM entry_subjects WHERE seq = ? AND field = 'campaign'", seq)
    (p,) = log.verify()
    assert (p.seq, p.code, p.id) == (seq, "index-mismatch", log.led.get_seq(seq).entry_id)
    assert p.message == f"entry_subjects row field='campaign' value='{CAMPAIGN}' of the entry is missing"


def test_a_changed_campaign_value_is_named_with_both_rows(log: Log) -> None:
    seq = _seq_of(log.led, "n5")
    log.edit("UPDATE entry_subjects SET value = 'other' WHERE seq = ? AND field = 'campaign'", seq)
    assert _named(log.verify()) == [
        (
            seq,
            "index-mismatch",
            f"entry_subjects row field='campaign' value='other' is changed: the entry's is field='campaign' "
            f"value='{CAMPAIGN}'",
        )
    ]


def test_a_campaign_row_added_for_another_entry_is_named_extra(log: Log) -> None:
    """Seq 0 (a key entry) filed under the campaign: it would appear in the campaign's verdict."""
    log.edit("INSERT INTO entry_subjects (seq, field, value) VALUES (0, 'campaign', ?)", CAMPAIGN)
    assert _named(log.verify()) == [
        (
            0,
            "index-mismatch",
            f"entry_subjects row field='campaign' value='{CAMPAIGN}' is not the entry's (extra)",
        )
    ]


def test_a_renamed_subject_key_is_one_row_missing_and_one_extra(log: Log) -> None:
    seq = _seq_of(log.led, "n7")
    log.edit("UPDATE entry_subjects SET field = 'campaigns' WHERE seq = ? AND field = 'campaign'", seq)
    assert sorted(p.message for p in log.verify()) == [
        f"entry_subjects row field='campaign' value='{CAMPAIGN}' of the entry is missing",
        f"entry_subjects row field='campaigns' value='{CAMPAIGN}' is not the entry's (extra)",
    ]


def test_a_ref_row_deleted_and_an_artifact_row_unflagged_are_named(log: Log) -> None:
    ref_seq = _seq_of(log.led, "n3")
    art_seq = _seq_of(log.led, "n6")
    log.edit("DELETE FROM entry_refs WHERE seq = ?", ref_seq)
    log.edit("UPDATE entry_artifacts SET stored = ? WHERE seq = ?", False, art_seq)
    problems = log.verify()
    assert [(p.seq, p.code) for p in problems] == [(ref_seq, "index-mismatch"), (art_seq, "index-mismatch")]
    assert problems[0].message.startswith("entry_refs row rel='follows' target_id=")
    assert problems[0].message.endswith("of the entry is missing")
    assert problems[1].message.startswith("entry_artifacts row name='log.txt' digest=")
    # stored as the database gives it (SQLite 0, PostgreSQL False): the entry's is named as it is
    assert " is changed: the entry's is name='log.txt'" in problems[1].message
    assert problems[1].message.endswith("stored=True")


def test_a_row_at_a_seq_beyond_the_log_is_named(log: Log) -> None:
    """A row no entry holds yet: the entry later appended at that seq would be filed under the campaign."""
    beyond = log.led.size() + 3
    log.edit("INSERT INTO entry_subjects (seq, field, value) VALUES (?, 'campaign', ?)", beyond, CAMPAIGN)
    assert _named(log.verify()) == [
        (
            beyond,
            "index-mismatch",
            f"entry_subjects row field='campaign' value='{CAMPAIGN}': no entry is at seq {beyond}",
        )
    ]


def test_a_row_left_behind_by_a_deleted_entry_is_named(log: Log) -> None:
    """The entry deleted with its rows kept: the gap is named, and so are the rows no entry holds."""
    seq = _seq_of(log.led, "n8")
    log.edit("DELETE FROM log_entries WHERE seq = ?", seq)
    problems = log.verify()
    orphans = [p for p in problems if p.code == "index-mismatch"]
    assert {p.message for p in orphans} == {
        f"entry_subjects row field='campaign' value='{CAMPAIGN}': no entry is at seq {seq}",
        f"entry_subjects row field='host' value='h1': no entry is at seq {seq}",
    }
    assert all(p.seq == seq and p.id is None for p in orphans)
    assert any(p.code == "seq-gap" for p in problems)


# --- incremental: from a held checkpoint -----------------------------------------------------------------


def test_verify_from_a_held_checkpoint_names_index_rows_after_it_and_beyond_the_log(
    log: Log, tmp_path: Path
) -> None:
    held = log.led.checkpoint()
    _fill(log.led, tmp_path, 4, "after")
    after = _seq_of(log.led, "after1")
    log.edit("UPDATE entry_subjects SET value = 'other' WHERE seq = ? AND field = 'campaign'", after)
    log.edit("INSERT INTO entry_subjects (seq, field, value) VALUES (?, 'campaign', ?)", 10**6, CAMPAIGN)
    problems = log.verify(since=held.note)
    assert [(p.seq, p.code) for p in problems] == [(after, "index-mismatch"), (10**6, "index-mismatch")]


# --- the CLI: exit 1, the row named; PostgreSQL by --database-url ----------------------------------------


def test_ledger_verify_exits_1_naming_the_row(log: Log) -> None:
    seq = _seq_of(log.led, "n4")
    log.edit("DELETE FROM entry_subjects WHERE seq = ? AND field = 'campaign'", seq)
    args = [LEDGER_BIN, "--home", str(log.home), "verify"]
    if not log.url.startswith("sqlite"):
        args += ["--database-url", log.url]
    r = subprocess.run([*args, "--json"], check=False, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert doc["ok"] is False
    assert [(p["seq"], p["code"]) for p in doc["problems"]] == [(seq, "index-mismatch")]
    r = subprocess.run(args, check=False, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1
    assert f"[index-mismatch] seq {seq}" in r.stderr and "field='campaign'" in r.stderr


@pytest.mark.parametrize("log", ["sqlite"], indirect=True)  # a file copy of the SQLite home
def test_a_log_copied_back_untouched_verifies_again(log: Log, tmp_path: Path) -> None:
    """The check is of the rows, not of the run: the same home before the edit verifies (must still pass)."""
    copy = tmp_path / "copy"
    log.led.close()
    shutil.copytree(log.home, copy)
    log.led = Ledger.open(log.home)
    log.edit("DELETE FROM entry_subjects WHERE seq = 5")
    assert log.verify()
    other = Ledger.open(copy)
    try:
        assert other.verify().problems == []
    finally:
        other.close()
