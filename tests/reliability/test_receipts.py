"""Receipts (issue 12): the newest entries cannot vanish unseen.

Finding: a collector got no signed receipt, so entries not yet under a checkpoint someone holds could be
deleted. Now an append returns a receipt signed by the log key (entry id, index, logged_at, origin, and
the leaf hash of the log record); `ledger record`, the collectors and `ledger push` keep them in
HOME/receipts.jsonl, and `ledger audit` checks each against the log — the newest included.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from ledger.collectors.remote import RemoteRecorder, make_recorder
from ledger.db import LOG_TABLES
from ledger.errors import ProofError
from ledger.log import LogRecord, chain_hash, parse_receipt
from ledger.service import Ledger
from ledger.signing import PublicKey
from tests.reliability import api_fixtures
from tests.reliability.api_fixtures import (
    LEDGER_BIN,
    PgDatabases,
    collector_home,
    free_port,
    make_deployment,
    start_server,
)

pg_databases = api_fixtures.pg_databases


def _drop_triggers(conn: sa.Connection) -> None:
    for table in LOG_TABLES:
        if conn.dialect.name == "sqlite":
            conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {table}_no_update")
            conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {table}_no_delete")
        else:
            conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {table}_append_only ON {table}")


def delete_newest(led: Ledger) -> int:
    """The operator deletes the newest entry (raw SQL, triggers dropped), and any checkpoint over it."""
    with led.engine.begin() as conn:
        _drop_triggers(conn)
        newest = int(conn.execute(sa.text("SELECT max(seq) FROM log_entries")).scalar_one())
        for table in ("entry_subjects", "entry_refs", "entry_artifacts", "log_entries"):
            conn.execute(sa.text(f"DELETE FROM {table} WHERE seq = :s"), {"s": newest})
        conn.execute(sa.text("DELETE FROM checkpoints WHERE size > :s"), {"s": newest})
    return newest


def back_date_newest(led: Ledger) -> int:
    """Rewrite the newest entry's logged_at with a consistent record, leaf and chain link."""
    with led.engine.begin() as conn:
        _drop_triggers(conn)
        r = conn.execute(
            sa.text(
                "SELECT seq, entry_id, kind, signer, prev_hash, logged_at FROM log_entries "
                "ORDER BY seq DESC LIMIT 1"
            )
        ).one()
        prev_t = conn.execute(sa.text("SELECT logged_at FROM log_entries WHERE seq=:s"), {"s": r.seq - 1})
        t = prev_t.scalar_one()  # as early as the order allows
        rec = LogRecord(r.seq, t, r.entry_id, r.kind, r.signer)
        conn.execute(
            sa.text(
                "UPDATE log_entries SET logged_at=:t, record=:rec, leaf_hash=:l, chain_hash=:c WHERE seq=:s"
            ),
            {
                "t": t,
                "rec": rec.to_bytes(),
                "l": rec.leaf().hex(),
                "c": chain_hash(r.seq, r.entry_id, r.prev_hash, t),
                "s": r.seq,
            },
        )
        conn.execute(sa.text("DELETE FROM checkpoints WHERE size > :s"), {"s": r.seq})
    return int(r.seq)


@pytest.fixture(params=["sqlite", "postgres"])
def local(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    pg_databases: PgDatabases,
    cli,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[Any, Path, list[dict[str, Any]]]:  # type: ignore[no-untyped-def]
    """A home (SQLite or PostgreSQL) where `ledger record` appended five notes and kept their receipts."""
    home = tmp_path / "home"
    args = ["init", "--home", str(home)]
    if request.param == "postgres":
        api_fixtures.require_postgres()
        args += ["--database-url", pg_databases.new()]
    monkeypatch.setenv("LEDGER_HOME", str(home))
    assert cli(*args).code == 0
    assert cli("keys", "new", "hostA", "--role", "collector").code == 0
    out = []
    for i in range(5):
        r = cli(
            "record",
            "note",
            "--key",
            "hostA",
            "-s",
            "campaign=c",
            "--data",
            json.dumps({"text": f"#{i}"}),
            "--json",
        )
        assert r.code == 0, r.err
        out.append(r.json())
    return cli, home, out


def test_record_returns_and_keeps_a_receipt_signed_by_the_log(local) -> None:  # type: ignore[no-untyped-def]
    cli, home, entries = local
    led = Ledger.open(home)
    every = [json.loads(line) for line in (home / "receipts.jsonl").read_text().splitlines()]
    # every entry the home's CLI appended has its receipt kept (`init`'s genesis and `keys new`'s too)
    assert [k["index"] for k in every] == list(range(led.size()))
    kept = every[-len(entries) :]
    assert [k["entry_id"] for k in kept] == [e["id"] for e in entries]
    for e, k in zip(entries, kept, strict=True):
        assert e["receipt"] == k
        receipt = parse_receipt(k, led.log_public_key())
        assert (receipt.origin, receipt.record.index, receipt.record.logged_at) == (
            led.origin,
            e["seq"],
            e["logged_at"],
        )
    # signed by the log key under the origin: another key, or an edited field, does not verify
    with pytest.raises(ProofError, match=r"signature|not name|disagree"):
        parse_receipt({**kept[0], "index": kept[0]["index"] + 1}, led.log_public_key())
    with pytest.raises(ProofError, match="signature"):
        parse_receipt(kept[0], PublicKey(bytes(32)))
    led.close()
    r = cli("audit", "--json")
    assert r.code == 0, r.err
    report = r.json()
    assert report["ok"] and report["receipts"] == len(every) and report["newest_index"] == entries[-1]["seq"]


def test_deleting_the_newest_entry_fails_audit(local) -> None:  # type: ignore[no-untyped-def]
    """Regression: delete the newest entry (raw SQL, triggers dropped): `ledger audit` fails, names it."""
    cli, home, entries = local
    led = Ledger.open(home)
    seq = delete_newest(led)
    assert seq == entries[-1]["seq"]
    # the log that is left is consistent: only the receipt knows (and the checkpoint the home holds, when
    # one published after the last append covers it: tests/test_receipts_every_append.py)
    assert led.verify(anchor=False)
    led.close()
    r = cli("audit", "--json")
    assert r.code == 1
    report = r.json()
    assert [(p["entry_id"], p["code"]) for p in report["problems"] if p["entry_id"]] == [
        (entries[-1]["id"], "receipt-mismatch")
    ]


def test_back_dating_the_newest_entry_fails_audit(local) -> None:  # type: ignore[no-untyped-def]
    cli, home, entries = local
    led = Ledger.open(home)
    back_date_newest(led)
    led.close()
    r = cli("audit", "--json")
    assert r.code == 1
    problems = [p for p in r.json()["problems"] if p["entry_id"]]  # (the home's checkpoint: elsewhere)
    assert [(p["entry_id"], p["code"]) for p in problems] == [(entries[-1]["id"], "receipt-mismatch")]
    assert "receipt says" in problems[0]["message"]


@pytest.mark.parametrize("backend", api_fixtures.BACKENDS)
def test_remote_collector_keeps_server_receipts_and_audit_names_a_deleted_entry(
    tmp_path: Path, backend: str, pg_databases: PgDatabases
) -> None:
    """A collector recording to a server (directly, and through the spool and `ledger push`) keeps the
    server's receipts; `ledger audit --server` fails when the server's newest entry is deleted."""
    dep = make_deployment(backend, tmp_path / "server", pg_databases)
    host = collector_home(tmp_path / "gpu-host", dep.ledger)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    token = dep.tokens["writer"]
    rec = make_recorder(host, "gpu01", server=url, token=token)
    assert isinstance(rec, RemoteRecorder)
    spooled = rec.record("note", {"campaign": "c"}, {"text": "while the server was down"})
    assert not (host.home.receipts_path.exists() and spooled in host.home.receipts_path.read_text())
    srv = start_server(dep.home, port=port)
    try:
        push = subprocess.run(
            [LEDGER_BIN, "push", "--home", str(host.home.path), "--server", url, "--token", token, "--json"],
            check=False, capture_output=True, text=True,
        )  # fmt: skip
        assert push.returncode == 0, push.stderr
        ids = [spooled] + [rec.record("note", {"campaign": "c"}, {"text": f"live {i}"}) for i in range(3)]
        kept = [json.loads(x) for x in host.home.receipts_path.read_text().splitlines()]
        server_receipts = [k for k in kept if k["origin"] == dep.ledger.origin]
        assert [k["entry_id"] for k in server_receipts] == ids

        def audit() -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [LEDGER_BIN, "--home", str(host.home.path), "audit", "--server", url, "--token",
                 dep.tokens["reader"], "--public-key", dep.ledger.log_public_key().b64, "--json"],
                check=False, capture_output=True, text=True,
            )  # fmt: skip

        ok = audit()
        assert ok.returncode == 0, ok.stdout + ok.stderr
        assert json.loads(ok.stdout)["receipts"] == 4
        delete_newest(dep.ledger)
        bad = audit()
        assert bad.returncode == 1, bad.stdout + bad.stderr
        problems = json.loads(bad.stdout)["problems"]
        # the server held the checkpoint its proofs carried: it now refuses to sign the shortened log (the
        # finding itself), and the entry it no longer shows is named as lost
        assert [(p["entry_id"], p["code"]) for p in problems] == [
            (None, "log-inconsistent"),
            (ids[-1], "receipt-mismatch"),
        ], problems
    finally:
        rec.close()
        srv.stop()
        host.close()
        dep.ledger.close()
