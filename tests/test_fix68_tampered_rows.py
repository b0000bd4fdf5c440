"""Audit 58: the log's checkers on rows an operator with database access edited.

- F1: a row moved to (or a junk row inserted at) seq 2^40 made `ledger verify` build one range per 4,096 seqs
  up to the largest seq: it used memory until it was killed. Its work is now bounded by the rows there are
  (keyset ranges where the seqs are not 0 .. n - 1), and the gap is named (``seq-gap``).
- F2: on SQLite a record, envelope or tile rewritten with a string function (``replace()``, ``||``) is stored
  as TEXT: verify, audit and tiles export crashed (``TypeError``, "Could not decode to UTF-8"). Every binary
  column is read as its bytes (``ledger.db.Blob``: ``CAST(col AS BLOB)``) and checked by one helper
  (``ledger.db.blob``): the row's own checks name it, as they do a BLOB edited the same way.
- F3: a stored tile whose hashes were edited (length kept, root not) was served 200 and cached immutable,
  its entry bundle blamed the untouched records, and `verify --from` said ok. A full tile is now checked
  against its stored root as it is read (``TileTree._tile``): refused, naming the tile; a tile rewritten
  with its root is blamed by the entry bundle when the record still hashes to its own leaf hash.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

import ledger.verify as verify_module
from ledger import _verify_range
from ledger.api.app import create_app
from ledger.api.settings import ApiSettings
from ledger.db import LOG_TABLES
from ledger.errors import ChainBrokenError
from ledger.log import Checkpoint, merkle_root
from ledger.service import Ledger
from ledger.tokens import create_token
from ledger.verify import VerifyProblem
from tests.api.conftest import PG_ADMIN, fresh_pg_database
from tests.conftest import CliResult

LEDGER_BIN = str(Path(sys.executable).with_name("ledger"))
FAR = 2**40  # the audit's seq: ranges up to it were 268 M tuples
NEAR_FAR = 2**24  # in-process: 4,097 ranges the old verify checked one by one (the new one: 1)
ADMIN = "admin"
# the audit's edit of a log record: its log time back-dated with ``replace()`` (SQLite: the result is TEXT)
BACKDATED = 'replace(record, \'"logged_at":"20\', \'"logged_at":"19\')'


@dataclass
class Log:
    led: Ledger
    url: str
    held: Checkpoint | None = None

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
        dsn = PG_ADMIN.replace("dbname=postgres", f"dbname={name}")
        with psycopg.connect(dsn) as pg:
            pg.execute("SET session_replication_role = replica")
            pg.execute(sql.replace("?", "%s"), params)


def _fill(led: Ledger, size: int) -> None:
    while led.size() < size:
        batch = min(100, size - led.size())
        led.append(
            [
                led.sign(
                    led.make_statement("note", {"campaign": "f68"}, {"text": f"#{led.size()}-{i}"}), ADMIN
                )
                for i in range(batch)
            ]
        )


@pytest.fixture(scope="module")
def base_302(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A SQLite home of 302 entries with a checkpoint (tile 0/000 stored), and its held checkpoint note."""
    home = tmp_path_factory.mktemp("base") / "home"
    led = Ledger.init(home)
    try:
        _fill(led, 300)
        note = led.checkpoint().note
        _fill(led, 302)
        # the receipts a home keeps of what it appends (``ledger record``): what ``audit`` checks
        led.keep_receipts([led.receipt(led.get_seq(s)) for s in range(led.size())])
    finally:
        led.close()
    return home, note


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """The database URL a test's log is made on: None for the home's SQLite file, or a fresh PostgreSQL
    database (a failure in CI without the server, a skip elsewhere: ``fresh_pg_database``)."""
    if request.param == "sqlite":
        yield None
        return
    with fresh_pg_database() as url:
        yield url


def _open(home: Path, url: str | None, size: int, *, held_at: int | None = None) -> Log:
    led = Ledger.init(home, database_url=url)
    held = None
    if held_at is not None:
        _fill(led, held_at)
        held = led.checkpoint()
    _fill(led, size)
    return Log(led, led.database_url, held)


@pytest.fixture
def log302(base_302: tuple[Path, str], tmp_path: Path) -> Iterator[Log]:
    home = tmp_path / "home"
    shutil.copytree(base_302[0], home)
    led = Ledger.open(home)
    yield Log(led, led.database_url, led.held_checkpoint(base_302[1]))
    led.close()


def _count_ranges(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    seen: list[tuple[int, int]] = []
    real = _verify_range.check_range

    def counting(engine, lo, hi, keys, v1=False):  # type: ignore[no-untyped-def]
        seen.append((lo, hi))
        return real(engine, lo, hi, keys, v1)

    monkeypatch.setattr(verify_module, "check_range", counting)
    return seen


def _gap(problems: Sequence[VerifyProblem], expected: int) -> bool:
    return any(p.code == "seq-gap" and f"expected seq {expected}," in p.message for p in problems)


# --- F1: a seq far beyond the others ----------------------------------------------------------------------


def test_a_row_moved_far_ahead_is_a_seq_gap_checked_in_one_range(
    backend: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _open(tmp_path / "home", backend, 6)
    log.edit("UPDATE log_entries SET seq = ? WHERE seq = 5", NEAR_FAR)
    seen = _count_ranges(monkeypatch)
    report = log.led.verify(artifacts=False, workers=1, anchor=False)
    assert _gap(report.problems, 5), report.problems
    assert len(seen) == 1, f"{len(seen)} ranges for 6 rows"
    assert report.size == 6
    log.led.close()


def test_a_junk_row_inserted_far_ahead_is_a_seq_gap_checked_in_one_range(
    backend: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _open(tmp_path / "home", backend, 6)
    cols = (
        "entry_id, kind, signer, collected_at, logged_at, envelope, record, leaf_hash, prev_hash, chain_hash"
    )
    junk = cols.replace("entry_id", "'" + "f" * 64 + "'")
    log.edit(
        f"INSERT INTO log_entries (seq, {cols}) SELECT ?, {junk} FROM log_entries WHERE seq = 5", NEAR_FAR
    )
    seen = _count_ranges(monkeypatch)
    report = log.led.verify(artifacts=False, workers=1, anchor=False)
    assert _gap(report.problems, 6), report.problems
    assert len(seen) == 1, f"{len(seen)} ranges for 7 rows"
    log.led.close()


def _limited() -> None:
    cap = 2 * 1024**3  # address space: a verify that builds ranges up to 2^40 fails here in seconds
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def _cli_verify(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LEDGER_HOME": str(home)}
    return subprocess.run(
        [LEDGER_BIN, "--home", str(home), "verify", "--no-artifacts", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        preexec_fn=_limited,  # a resource limit in the child only
        check=False,
    )


def test_ledger_verify_of_a_row_moved_to_seq_2_40_exits_in_bounded_memory(
    backend: str | None, tmp_path: Path
) -> None:
    """The audit's reproduction: under a 2 GB address-space cap, `ledger verify` (one worker and several)
    exits 1 naming the gap; it died of ``MemoryError`` (or ran out the clock)."""
    log = _open(tmp_path / "home", backend, 5)
    log.led.close()
    log.edit("UPDATE log_entries SET seq = ? WHERE seq = 4", FAR)
    for workers in ("1", "2"):
        r = _cli_verify(tmp_path / "home", "--workers", workers, "--json")
        assert r.returncode == 1, (workers, r.returncode, r.stderr[-2000:])
        problems = json.loads(r.stdout)["problems"]
        assert any(
            p["code"] == "seq-gap" and "expected seq 4, found 1099511627776" in p["message"] for p in problems
        )


def test_ledger_verify_of_a_junk_row_at_seq_2_40_exits_in_bounded_memory(tmp_path: Path) -> None:
    log = _open(tmp_path / "home", None, 5)
    log.led.close()
    cols = (
        "entry_id, kind, signer, collected_at, logged_at, envelope, record, leaf_hash, prev_hash, chain_hash"
    )
    junk = cols.replace("entry_id", "'" + "e" * 64 + "'")
    log.edit(f"INSERT INTO log_entries (seq, {cols}) SELECT ?, {junk} FROM log_entries WHERE seq = 4", FAR)
    r = _cli_verify(tmp_path / "home", "--workers", "1")
    assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
    assert "[seq-gap]" in r.stdout + r.stderr and "expected seq 5, found 1099511627776" in r.stdout + r.stderr


# --- F2: a binary column stored as TEXT (SQLite) --------------------------------------------------


def test_the_blob_helper_takes_bytes_and_names_the_row_otherwise() -> None:
    from ledger.db import blob

    assert blob(b"ab", ChainBrokenError) == b"ab"
    assert blob(memoryview(b"ab"), ChainBrokenError) == b"ab"
    assert blob(bytearray(b"ab"), ChainBrokenError) == b"ab"
    for value in ("ab", None, 12):
        with pytest.raises(ChainBrokenError, match="seq 7: its stored value is"):
            blob(value, lambda what: ChainBrokenError(f"the row at seq 7: {what}"))


def _newest(log: Log) -> int:
    return log.led.size() - 1


def test_a_log_record_stored_as_text_is_a_record_mismatch_not_a_crash(
    log302: Log, cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    """The audit's edit: ``replace()`` returns TEXT. verify, verify --json, audit and tiles export answered
    ``TypeError: string argument without an encoding``."""
    seq = _newest(log302)
    log302.edit(
        f"UPDATE log_entries SET record = {BACKDATED} WHERE seq = ?",
        seq,
    )
    report = log302.led.verify(artifacts=False, workers=1)
    assert [(p.code, p.seq) for p in report.problems] == [("record-mismatch", seq)], report.problems
    audit = log302.led.audit()
    assert [p["index"] for p in audit.problems] == [seq], audit.problems
    with pytest.raises(ChainBrokenError, match=f"record at seq {seq} does not hash to its Merkle leaf"):
        log302.led.export_tiles(tmp_path / "out")
    with pytest.raises(ChainBrokenError, match=f"record at seq {seq} does not hash"):
        log302.led.entry_bundle(1, 302 - 256)
    r = cli("--home", str(log302.led.home_path), "verify", "--no-artifacts", "--workers", "1", "--json")
    assert r.code == 1 and [p["code"] for p in r.json()["problems"]] == ["record-mismatch"], r


def test_a_log_record_stored_as_undecodable_text_is_a_record_mismatch(log302: Log) -> None:
    """Neighbour: TEXT that is not UTF-8 made the driver refuse the whole fetch ("Could not decode")."""
    seq = _newest(log302)
    log302.edit("UPDATE log_entries SET record = CAST(x'ff' || record AS TEXT) WHERE seq = ?", seq)
    report = log302.led.verify(artifacts=False, workers=1)
    assert [(p.code, p.seq) for p in report.problems] == [("record-mismatch", seq)], report.problems
    assert [p["index"] for p in log302.led.audit().problems] == [seq]


def test_an_envelope_stored_as_text_names_its_row(log302: Log) -> None:
    """Neighbour: the envelope column (verify crashed at ``bytes(env)``)."""
    seq = _newest(log302)
    log302.edit(
        "UPDATE log_entries SET envelope = replace(envelope, 'entry+json', 'entry+jsom') WHERE seq = ?", seq
    )
    report = log302.led.verify(artifacts=False, workers=1)
    assert report.problems and {p.seq for p in report.problems} == {seq}, report.problems
    assert "entry-id-mismatch" in {p.code for p in report.problems}
    log302.led.audit()  # answers (the envelope is not what a receipt commits)


def test_tile_hashes_stored_as_text_name_the_tile(log302: Log) -> None:
    """Neighbour: ``zeroblob(32) || …`` is TEXT that is not UTF-8: verify, verify --from and audit died with
    "Could not decode to UTF-8 column 'hashes'"."""
    log302.edit("UPDATE tiles SET hashes = zeroblob(32) || substr(hashes, 33) WHERE level = 0 AND idx = 0")
    report = log302.led.verify(artifacts=False, workers=1)
    assert [p.code for p in report.problems] == ["tile-mismatch"], report.problems
    assert "stored tile 0/000 " in report.problems[0].message
    held = log302.led.verify(artifacts=False, workers=1, since=log302.held, anchor=False)
    assert [p.code for p in held.problems] == ["tile-mismatch"], held.problems  # one name (fix137)
    assert "stored tile 0/000" in held.problems[0].message
    audit = log302.led.audit()
    assert any("stored tile 0/000" in p["message"] for p in audit.problems), audit.problems
    with pytest.raises(ChainBrokenError, match="stored tile 0/000"):
        log302.led.tile(0, 0)


# --- F3: a stored tile edited ----------------------------------------------------------------------


def _zero_hash_100(log: Log) -> None:
    if log.url.startswith("sqlite"):
        log.edit(
            "UPDATE tiles SET hashes = CAST(substr(hashes, 1, 3200) || zeroblob(32) || substr(hashes, 3233)"
            " AS BLOB) WHERE level = 0 AND idx = 0"
        )
    else:
        log.edit(
            "UPDATE tiles SET hashes = overlay(hashes placing ? from 3201 for 32)"
            " WHERE level = 0 AND idx = 0",
            bytes(32),
        )


def test_a_stored_tile_with_edited_hashes_is_refused_naming_the_tile(
    backend: str | None, tmp_path: Path
) -> None:
    log = _open(tmp_path / "home", backend, 302, held_at=300)
    _zero_hash_100(log)
    led = log.led
    with pytest.raises(ChainBrokenError, match="stored tile 0/000 is not the log's"):
        led.tile(0, 0)
    with pytest.raises(ChainBrokenError, match="stored tile 0/000") as bundle:
        led.entry_bundle(0)
    assert "record was rewritten" not in bundle.value.message
    report = led.verify(artifacts=False, workers=1, since=log.held, anchor=False)
    assert [p.code for p in report.problems] == ["tile-mismatch"], report.problems  # one name (fix137)
    assert "stored tile 0/000" in report.problems[0].message
    assert led.tile(0, 1, 46)  # the partial tile beside it reads the leaves: served
    led.close()


def test_a_stored_tile_with_edited_hashes_is_never_served_immutable(log302: Log) -> None:
    _zero_hash_100(log302)
    token, _ = create_token(log302.led.engine, "r", "reader")
    headers = {"Authorization": f"Bearer {token}"}
    with TestClient(create_app(ApiSettings(home=str(log302.led.home_path)), ledger=log302.led)) as c:
        tile = c.get("/tile/0/000", headers=headers)
        assert tile.status_code == 500, tile.status_code
        assert "immutable" not in tile.headers["cache-control"]
        assert "stored tile 0/000" in tile.text
        bundle = c.get("/tile/entries/000", headers=headers)
        assert bundle.status_code == 500 and "immutable" not in bundle.headers["cache-control"]
        assert "stored tile 0/000" in bundle.text and "record was rewritten" not in bundle.text


def test_a_tile_root_edited_is_named_by_verify_from(log302: Log) -> None:
    """Neighbour: the ``root`` column edited, the hashes kept: `verify --from` said "its first 300 entries
    hash to root …" (an entry rewritten); it names the tile. Reading the tile is refused too."""
    log302.edit("UPDATE tiles SET root = zeroblob(32) WHERE level = 0 AND idx = 0")
    report = log302.led.verify(artifacts=False, workers=1, since=log302.held, anchor=False)
    # the tile's own name, as a full verify and the readers name it (fix137: it was log-inconsistent)
    assert [p.code for p in report.problems] == ["tile-mismatch"], report.problems
    assert "stored tile 0/000 is not the log's" in report.problems[0].message
    with pytest.raises(ChainBrokenError, match="stored tile 0/000"):
        log302.led.tile(0, 0)


def test_a_tile_rewritten_with_its_root_is_blamed_by_the_entry_bundle_not_the_record(log302: Log) -> None:
    """Neighbour: hash #100 and the root recomputed over the edited hashes (the tile is consistent by
    itself): the record at seq 100 still hashes to its own leaf hash, so the tile is named; once the
    record is rewritten too, the record is."""
    with log302.led.repo.read() as conn:
        hashes = log302.led.repo.tile_source(conn).tiles(0, 0, 1)[0]
    edited = hashes[:3200] + bytes(32) + hashes[3232:]
    root = merkle_root([edited[i : i + 32] for i in range(0, len(edited), 32)])
    log302.edit("UPDATE tiles SET hashes = ?, root = ? WHERE level = 0 AND idx = 0", edited, root)
    with pytest.raises(ChainBrokenError, match="stored tile 0/000 holds another leaf for seq 100") as e:
        log302.led.entry_bundle(0)
    assert "record was rewritten" not in e.value.message
    # the record rewritten as well (a BLOB): it no longer hashes to its leaf hash, so it is the one named
    log302.edit(f"UPDATE log_entries SET record = CAST({BACKDATED} AS BLOB) WHERE seq = 100")
    with pytest.raises(ChainBrokenError, match="record at seq 100 does not hash to its Merkle leaf"):
        log302.led.entry_bundle(0)


def test_a_tile_checked_once_is_checked_again_after_the_database_changed(log302: Log) -> None:
    """A process that read tile 0/000 (and remembered it was the log's) must not trust that after an
    edit or a rollback: what it remembers is bytes already hashed, not a row."""
    assert log302.led.tile(0, 0)
    _zero_hash_100(log302)
    with pytest.raises(ChainBrokenError, match="stored tile 0/000"):
        log302.led.tile(0, 0)


@pytest.mark.parametrize(
    ("column", "edit", "refused"),
    [
        # every leaf read is the hash of its row's record (fix 67): a record edited is refused, naming the row
        ("record", BACKDATED, True),
        ("envelope", "replace(envelope, 'entry+json', 'entry+jsom')", True),
        ("envelope", "CAST(envelope AS TEXT)", False),  # the same bytes, typed TEXT
    ],
)
def test_the_policy_readers_sqlite_path_on_a_column_stored_as_text_names_the_row_not_a_type_error(
    log302: Log, cli: Callable[..., CliResult], column: str, edit: str, refused: bool
) -> None:
    """The verdict's own SQLite reader (``ledger.reads``, not SQLAlchemy) read the binary columns as the
    driver returned them: a TEXT value died with ``TypeError: string argument without an encoding`` (or
    blake3's "object supporting the buffer API required"). It reads ``CAST(col AS BLOB)`` too: the row's
    own check refuses it, or — the same bytes typed TEXT — it is read as they are."""
    seq = _newest(log302)
    log302.edit(f"UPDATE log_entries SET {column} = {edit} WHERE seq = ?", seq)
    r = cli("--home", str(log302.led.home_path), "verdict", "--subject", "campaign=f68")
    text = r.out + r.err
    assert "TypeError" not in text and "Traceback" not in text and "buffer API" not in text, text
    if refused:
        assert r.code == 2 and str(seq) in text, text  # refused, naming the row
    else:
        assert r.code in (0, 1), text  # judged: the bytes read are the ones the entry id names
