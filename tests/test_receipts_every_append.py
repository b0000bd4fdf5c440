"""Issue 12, "a log its operator cannot quietly rewrite": what an independent audit found, as regressions.

1. Only `ledger record` and the collectors kept the log's receipts: `supersede`, `review`, `accept`, the key
   commands, `verdict --record`, `check routing-change --record` kept none, so deleting the newest
   governance entry (and the checkpoint rows) with raw SQL passed `verify` and `audit`. Now the one append
   path of a home-bound ledger (every CLI command opens one) keeps a receipt of every entry it appends.
2. The only anchor was in the database: deleting checkpoint rows removed it. Now the home holds the newest
   signed checkpoint it published or read (HOME/checkpoint); `verify` and `audit` check the log against it.
3. `audit` compares a receipt with the record the leaf commits, and a local audit with what readers are
   shown too: an UPDATE of the `logged_at` column alone is a mismatch.
4. A key.revoke row swapped in place for a note signed by the revoked key is caught.

Each test runs the CLI against a real home (SQLite unless named) and tampers with raw SQL, triggers dropped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from ledger.entries import parse_statement
from ledger.log import LogRecord, chain_hash, entry_id_of, parse_checkpoint
from ledger.service import Ledger
from ledger.signing import SigningKey
from tests.conftest import CliResult
from tests.reliability import api_fixtures
from tests.reliability.api_fixtures import PgDatabases
from tests.reliability.test_receipts import _drop_triggers

pg_databases = api_fixtures.pg_databases

Cli = Callable[..., CliResult]


def _ok(r: CliResult) -> CliResult:
    assert r.code == 0, r.out + r.err
    return r


def _id(r: CliResult) -> str:
    """The entry id a `--json` append printed."""
    return str(_ok(r).json()["id"])


def _kept(home: Path) -> list[dict[str, Any]]:
    path = home / "receipts.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _held_size(home: Path) -> int:
    return int((home / "checkpoint").read_text().split("\n")[1])


def _delete_newest(home: Path, *, database_url: str | None = None) -> int:
    """The operator deletes the newest entry with raw SQL (triggers dropped) and every checkpoint row and
    tile: nothing in the database remembers it."""
    led = Ledger.open(home, database_url=database_url)
    try:
        with led.engine.begin() as conn:
            _drop_triggers(conn)
            newest = int(conn.execute(sa.text("SELECT max(seq) FROM log_entries")).scalar_one())
            for table in ("entry_subjects", "entry_refs", "entry_artifacts", "log_entries"):
                conn.execute(sa.text(f"DELETE FROM {table} WHERE seq = :s"), {"s": newest})
            conn.execute(sa.text("DELETE FROM checkpoints"))
            conn.execute(sa.text("DELETE FROM tiles"))
    finally:
        led.close()
    return newest


def _rechain(conn: sa.Connection, start: int, prev: str) -> None:
    """Recompute every chain hash from ``start`` on (a forger who rewrote an entry keeps the chain whole)."""
    rows = conn.execute(
        sa.text("SELECT seq, entry_id, logged_at FROM log_entries WHERE seq >= :s ORDER BY seq"), {"s": start}
    ).all()
    for seq, entry_id, logged_at in rows:
        ch = chain_hash(int(seq), str(entry_id), prev, str(logged_at))
        conn.execute(
            sa.text("UPDATE log_entries SET prev_hash=:p, chain_hash=:c WHERE seq=:s"),
            {"p": prev, "c": ch, "s": seq},
        )
        prev = ch


@pytest.fixture
def governed(cli: Cli, home: Path) -> dict[str, str]:
    """A home made through the CLI, with a collector, a reviewer and an operator key and one note."""
    _ok(cli("init"))
    _ok(cli("keys", "new", "hostA", "--role", "collector"))
    _ok(cli("keys", "new", "rev", "--role", "reviewer"))
    _ok(cli("keys", "new", "op", "--role", "operator"))
    note = _id(
        cli(
            "record", "note", "--key", "hostA", "-s", "campaign=c", "-s", "backend=b", "-s", "model=m",
            "-s", "host=h", "--data", '{"text": "ran"}', "--json",
        )
    )  # fmt: skip
    return {"note": note}


# --- 1. every append keeps its receipt ---------------------------------------------------------------


def test_every_cli_command_that_appends_keeps_the_logs_receipt(cli: Cli, home: Path, governed) -> None:  # type: ignore[no-untyped-def]
    """Regression: supersede, review, accept, keys new|enrol|grant|revoke, verdict --record and check
    routing-change --record kept no receipt. Now every entry of the log (init's genesis included) has one."""
    note = governed["note"]
    _ok(cli("review", note, "--key", "rev", "--fail", "--summary", "flaky", "--json"))
    _ok(cli("accept", note, "--key", "rev", "--reason", "fine", "--json"))
    _ok(cli("supersede", note, "--key", "op", "--reason", "rerun", "--json"))
    _ok(cli("keys", "grant", "hostA", "--role", "reviewer"))
    pub = SigningKey.generate("rev2").public.b64  # a key made elsewhere
    _ok(cli("keys", "enrol", "rev2", "--public-key", pub, "--role", "reviewer"))
    _ok(cli("verdict", "-s", "campaign=c", "--record", "--json"))
    r = cli("check", "routing-change", "-s", "backend=b", "-s", "model=m", "-s", "host=h", "--record",
            "--key", "op", "--json")  # fmt: skip
    assert r.code in (0, 1), r.err  # refused (nothing qualified) and recorded all the same
    assert r.json()["recorded"]
    _ok(cli("keys", "revoke", "hostA", "--reason", "host retired"))

    led = Ledger.open(home)
    try:
        logged = [(e.seq, e.entry_id, e.kind) for e in led.query(limit=1000)]
    finally:
        led.close()
    kinds = {k for _, _, k in logged}
    assert {"key.enrol", "key.grant", "key.revoke", "note", "review", "acceptance", "supersession"} <= kinds
    assert {"verdict", "routing.change"} <= kinds
    receipts = {k["entry_id"]: k for k in _kept(home)}
    assert sorted(receipts) == sorted(eid for _, eid, _ in logged)
    assert all(receipts[eid]["index"] == seq for seq, eid, _ in logged)
    report = _ok(cli("audit", "--json")).json()
    assert report["ok"] and report["receipts"] == len(logged)


def test_every_cli_command_opens_its_ledger_home_bound() -> None:
    """By construction: the CLI opens a ledger only through ``get_ledger``/``init_ledger`` (home-bound), so
    a command added later keeps its receipts too."""
    import ledger.cli

    cli_dir = Path(ledger.cli.__file__).parent
    for path in sorted(cli_dir.glob("*.py")):
        if path.name == "_common.py":
            continue
        assert not re.search(r"\bLedger\.(open|init)\(", path.read_text()), path.name


def test_a_remote_servers_appends_keep_no_receipt_in_the_servers_home(tmp_path: Path) -> None:
    """The server (a ledger opened without ``home_bound``) keeps its behaviour: the client keeps the
    receipt, the server's home keeps none."""
    led = Ledger.init(tmp_path / "srv")
    try:
        led.record("note", {"campaign": "c"}, {"text": "from a client"}, key="admin")
        assert not led.home.receipts_path.exists()
    finally:
        led.close()


@pytest.fixture(params=["sqlite", "postgres"])
def backend_home(
    request: pytest.FixtureRequest, cli: Cli, home: Path, pg_databases: PgDatabases
) -> str | None:
    """A home made by `ledger init` on SQLite, or on PostgreSQL (must be reachable in CI)."""
    url = None
    args = ["init"]
    if request.param == "postgres":
        api_fixtures.require_postgres()
        url = pg_databases.new()
        args += ["--database-url", url]
    _ok(cli(*args))
    _ok(cli("keys", "new", "hostA", "--role", "collector"))
    _ok(cli("keys", "new", "op", "--role", "operator"))
    return url


def test_deleting_the_newest_supersession_with_raw_sql_is_caught_by_audit_from_its_receipt(
    cli: Cli, home: Path, backend_home: str | None
) -> None:
    note = _id(
        cli("record", "note", "--key", "hostA", "-s", "campaign=c", "--data", '{"text": "x"}', "--json")
    )
    sup = _id(cli("supersede", note, "--key", "op", "--reason", "wrong build", "--json"))
    _ok(cli("audit"))
    seq = _delete_newest(home, database_url=backend_home)
    r = cli("audit", "--json")
    assert r.code == 1, r.out + r.err
    problems = r.json()["problems"]
    assert (sup, seq, "receipt-mismatch") in [(p["entry_id"], p["index"], p["code"]) for p in problems]
    assert f"no longer has entry {sup}" in r.out


def test_deleting_the_newest_key_revoke_with_raw_sql_is_caught_by_audit_from_its_receipt(
    cli: Cli, home: Path, backend_home: str | None
) -> None:
    """The revoked key would sign again (and a routing check credit it) once its revocation is gone."""
    revoke = _id(cli("keys", "revoke", "hostA", "--reason", "stolen", "--json"))
    _delete_newest(home, database_url=backend_home)
    r = cli("audit", "--json")
    assert r.code == 1, r.out + r.err
    assert revoke in [p["entry_id"] for p in r.json()["problems"] if p["code"] == "receipt-mismatch"]


# --- 2. the home holds its newest signed checkpoint, outside the database -----------------------------


def test_the_home_holds_the_newest_checkpoint_it_published_or_read(cli: Cli, home: Path, governed) -> None:  # type: ignore[no-untyped-def]
    held = _held_size(home)
    assert held >= 1  # init published the genesis checkpoint
    led = Ledger.open(home)
    size = led.size()
    try:
        cp = parse_checkpoint((home / "checkpoint").read_text(), led.note_key_name, led.log_public_key())
    finally:
        led.close()
    assert cp.size == held
    _ok(cli("proof", "inclusion", governed["note"]))  # a read signs a checkpoint of the whole log
    assert _held_size(home) == size
    _ok(cli("record", "note", "--key", "hostA", "-s", "campaign=c", "--data", '{"text": "more"}'))
    _ok(cli("checkpoint"))  # published
    assert _held_size(home) == size + 1
    _ok(cli("checkpoint", "--size", "1"))  # an older one never replaces it
    assert _held_size(home) == size + 1


def test_a_held_checkpoint_that_is_not_of_this_log_is_a_verify_and_audit_problem(
    cli: Cli, home: Path, tmp_path: Path, governed
) -> None:  # type: ignore[no-untyped-def]
    """Replacing the home's checkpoint with another log's does not silence the check: it is named."""
    other = Ledger.init(tmp_path / "other")
    try:
        (home / "checkpoint").write_text(other.checkpoint().note)
    finally:
        other.close()
    r = cli("verify", "--json")
    assert r.code == 1
    problems = r.json()["problems"]
    assert [p["code"] for p in problems] == ["proof-invalid"]
    assert str(home / "checkpoint") in problems[0]["message"]
    r = cli("audit", "--json")
    assert r.code == 1 and [p["code"] for p in r.json()["problems"]] == ["proof-invalid"]


def test_deleting_entries_and_every_checkpoint_row_below_the_held_checkpoint_fails_verify(
    cli: Cli, home: Path, governed
) -> None:  # type: ignore[no-untyped-def]
    """Regression: the checkpoints were only rows of the database; deleting them (and the newest entries)
    removed the anchor. The home's checkpoint survives: verify and audit name the entries lost."""
    _ok(cli("record", "note", "--key", "hostA", "-s", "campaign=c", "--data", '{"text": "more"}'))
    _ok(cli("checkpoint"))
    held = _held_size(home)
    _delete_newest(home)
    _delete_newest(home)
    (home / "receipts.jsonl").unlink()  # the anchor alone, without the receipts
    r = cli("verify", "--json")
    assert r.code == 1, r.out + r.err
    report = r.json()
    assert report["held_checkpoint"] == held
    want = (
        f"the log has {held - 2} entries; this home holds a signed checkpoint of size {held} (entries lost)"
    )
    assert [(p["code"], p["message"]) for p in report["problems"]] == [("log-inconsistent", want)]
    text = cli("verify")
    assert text.code == 1 and want in text.err
    r = cli("audit", "--json")
    assert r.code == 1
    # the receipts removed are a problem of their own: a log with entries keeps receipts (audit 20, f3)
    problems = [(p["code"], p["message"]) for p in r.json()["problems"]]
    assert [c for c, _ in problems] == ["receipts-unchecked", "log-inconsistent"], problems
    assert problems[1] == ("log-inconsistent", want)
    assert _held_size(home) == held  # no later command moved the anchor back to the shortened log


def test_rewriting_an_entry_below_the_held_checkpoint_fails_verify_even_without_checkpoint_rows(
    cli: Cli, home: Path, governed
) -> None:  # type: ignore[no-untyped-def]
    """A forger back-dates an entry with a consistent record, leaf and chain, and drops every checkpoint
    row and tile: the log is whole by itself, but not the one the home's checkpoint commits."""
    _ok(cli("record", "note", "--key", "hostA", "-s", "campaign=c", "--data", '{"text": "more"}'))
    _ok(cli("checkpoint"))
    led = Ledger.open(home)
    try:
        with led.engine.begin() as conn:
            _drop_triggers(conn)
            r = conn.execute(
                sa.text("SELECT seq, entry_id, kind, signer, logged_at FROM log_entries WHERE seq = 1")
            ).one()
            t = conn.execute(sa.text("SELECT logged_at FROM log_entries WHERE seq = 0")).scalar_one()
            rec = LogRecord(1, t, r.entry_id, r.kind, r.signer)
            conn.execute(
                sa.text("UPDATE log_entries SET logged_at=:t, record=:r, leaf_hash=:l WHERE seq=1"),
                {"t": t, "r": rec.to_bytes(), "l": rec.leaf().hex()},
            )
            prev = conn.execute(sa.text("SELECT chain_hash FROM log_entries WHERE seq = 0")).scalar_one()
            _rechain(conn, 1, str(prev))
            conn.execute(sa.text("DELETE FROM checkpoints"))
            conn.execute(sa.text("DELETE FROM tiles"))
        assert led.verify(anchor=False)  # whole by itself
    finally:
        led.close()
    r = cli("verify", "--json")
    assert r.code == 1, r.out
    problems = r.json()["problems"]
    assert [p["code"] for p in problems] == ["log-inconsistent"]
    assert "not the ones the signed checkpoint this home holds commits" in problems[0]["message"]
    r = cli("audit", "--json")
    assert r.code == 1
    assert "log-inconsistent" in [p["code"] for p in r.json()["problems"]]


# --- 3. audit compares the committed record, and what readers are shown ------------------------------


def test_updating_the_logged_at_column_alone_is_caught_by_verify_and_audit(
    cli: Cli, home: Path, governed
) -> None:  # type: ignore[no-untyped-def]
    """An UPDATE of the reader column ``logged_at`` (what `log`, `show` and the policy read) leaves the
    committed record as it was: verify names the row's disagreement with its record; audit, which compares
    the receipt with the committed record, names what readers are shown instead."""
    note = governed["note"]
    led = Ledger.open(home)
    try:
        with led.engine.begin() as conn:
            _drop_triggers(conn)
            conn.execute(
                sa.text("UPDATE log_entries SET logged_at = :t WHERE entry_id = :e"),
                {"t": "2020-01-01T00:00:00.000000Z", "e": note},
            )
    finally:
        led.close()
    r = cli("verify", "--json")
    assert r.code == 1
    assert "record-mismatch" in {p["code"] for p in r.json()["problems"] if p["id"] == note}
    r = cli("audit", "--json")
    assert r.code == 1, r.out
    problems = [p for p in r.json()["problems"] if p["entry_id"] == note]
    assert [p["code"] for p in problems] == ["receipt-mismatch"]
    assert "logged 2020-01-01T00:00:00.000000Z" in problems[0]["message"]


# --- 4. a key.revoke swapped in place -----------------------------------------------------------------


@pytest.fixture
def revoked(cli: Cli, home: Path, governed) -> Iterator[dict[str, Any]]:  # type: ignore[no-untyped-def]
    """hostA revoked (seq n), one more entry after it, a checkpoint published over both; and a note the
    revoked key signed, that the forger swaps in at the revocation's place."""
    revoke = _id(cli("keys", "revoke", "hostA", "--reason", "stolen", "--json"))
    _ok(cli("record", "note", "--key", "op", "-s", "campaign=c", "--data", '{"text": "more"}'))
    _ok(cli("checkpoint"))
    led = Ledger.open(home)
    st = led.make_statement("note", {"campaign": "c"}, {"text": "never revoked"})
    env = led.sign(st, "hostA")
    yield {"revoke": revoke, "seq": led.get(revoke).seq, "env": env, "led": led}
    led.close()


def _swap_in(conn: sa.Connection, seq: int, env: Any, *, forge_hashes: bool) -> str:
    data = env.canonical()
    eid = entry_id_of(data)
    st = parse_statement(env.statement())
    conn.execute(
        sa.text(
            "UPDATE log_entries SET entry_id=:e, kind=:k, signer=:g, collected_at=:c, envelope=:v "
            "WHERE seq=:s"
        ),
        {"e": eid, "k": st.kind, "g": env.signer, "c": st.collected_at, "v": data, "s": seq},
    )
    conn.execute(sa.text("DELETE FROM entry_subjects WHERE seq=:s"), {"s": seq})
    for f, v in st.subject.items():
        conn.execute(
            sa.text("INSERT INTO entry_subjects (seq, field, value) VALUES (:s,:f,:v)"),
            {"s": seq, "f": f, "v": v},
        )
    if forge_hashes:  # the record, its leaf and the chain made whole again; the checkpoints and tiles gone
        t = conn.execute(sa.text("SELECT logged_at FROM log_entries WHERE seq=:s"), {"s": seq}).scalar_one()
        rec = LogRecord(seq, t, eid, st.kind, env.signer)
        conn.execute(
            sa.text("UPDATE log_entries SET record=:r, leaf_hash=:l WHERE seq=:s"),
            {"r": rec.to_bytes(), "l": rec.leaf().hex(), "s": seq},
        )
        prev = conn.execute(sa.text("SELECT chain_hash FROM log_entries WHERE seq=:s"), {"s": seq - 1})
        _rechain(conn, seq, str(prev.scalar_one()))
        conn.execute(sa.text("DELETE FROM checkpoints"))
        conn.execute(sa.text("DELETE FROM tiles"))
    return eid


def test_swapping_a_key_revoke_row_for_a_note_of_the_revoked_key_is_caught_by_verify(
    cli: Cli, revoked
) -> None:  # type: ignore[no-untyped-def]
    """Regression (the audit's finding, first as it was: the row replaced, nothing else): the leaf, the
    record and the chain commit the revocation, not the note."""
    led = revoked["led"]
    with led.engine.begin() as conn:
        _drop_triggers(conn)
        _swap_in(conn, revoked["seq"], revoked["env"], forge_hashes=False)
    r = cli("verify", "--json")
    assert r.code == 1, r.out
    codes = {p["code"] for p in r.json()["problems"] if p["seq"] == revoked["seq"]}
    assert {"record-mismatch", "chain-broken"} <= codes
    assert cli("audit").code == 1


def test_swapping_a_key_revoke_row_with_forged_hashes_and_no_checkpoint_rows_is_caught(
    cli: Cli, home: Path, revoked
) -> None:  # type: ignore[no-untyped-def]
    """The thorough forger: the note's record, leaf and a re-computed chain, every checkpoint row and tile
    deleted, so the log is whole by itself. The home's checkpoint (verify) and the revocation's receipt
    (audit) still catch it."""
    led = revoked["led"]
    with led.engine.begin() as conn:
        _drop_triggers(conn)
        note = _swap_in(conn, revoked["seq"], revoked["env"], forge_hashes=True)
    assert led.verify(anchor=False)  # whole by itself: the database alone no longer shows it
    r = cli("verify", "--json")
    assert r.code == 1, r.out
    assert [p["code"] for p in r.json()["problems"]] == ["log-inconsistent"]
    r = cli("audit", "--json")
    assert r.code == 1, r.out
    problems = {(p["entry_id"], p["code"]) for p in r.json()["problems"]}
    assert (revoked["revoke"], "receipt-mismatch") in problems
    assert (None, "log-inconsistent") in problems
    assert note not in {p["entry_id"] for p in r.json()["problems"]}  # the forged note got no receipt
