"""The service's own repository (SQLite and PostgreSQL) remembers a warm verdict's reads while the database
is unchanged (``LogRepo.data_version``), as the read-only SQLite reader does: the API of a shared deployment
answers repeated checks from memory, and an append or an edit behind the log's back is read at once."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from ledger.canonical import canonical_bytes
from ledger.entries import parse_time
from ledger.errors import IntegrityError
from ledger.policy import evaluate, load_policy
from ledger.policy.fixtures import build_fixture_ledger
from ledger.policy.routing import check_routing_change
from ledger.policy.snapshot import clear_caches
from ledger.service import Ledger
from tests.api.conftest import fresh_pg_database
from tests.policy.conftest import FIXTURES, POLICY_DIR, Built, count_snapshot_reads

SUBJECT = {"campaign": "router-ocr"}


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """None: the home's own SQLite file; else a fresh PostgreSQL database's URL."""
    if request.param == "sqlite":
        yield None
        return
    with fresh_pg_database() as url:
        yield url


def _built(tmp_path: Path, database: str | None, fixture: str) -> tuple[Ledger, dict[str, str]]:
    def init(home: Path, **kw: Any) -> Ledger:
        return Ledger.init(home, database_url=database, **kw)

    clear_caches()
    ledger, _spec, builder = build_fixture_ledger(
        FIXTURES / fixture, tmp_path / "home", POLICY_DIR, init=init
    )
    return ledger, {n: e.entry_id for n, e in builder.names.items()}


def _edit_behind_the_log(ledger: Ledger, seq: int, envelope: dict[str, Any]) -> None:
    """Someone with write access to the database drops the append-only triggers and edits an envelope."""
    with ledger.engine.begin() as conn:
        if ledger.engine.dialect.name == "postgresql":
            conn.execute(sa.text("ALTER TABLE log_entries DISABLE TRIGGER USER"))
        else:
            names = conn.execute(
                sa.text("SELECT name FROM sqlite_master WHERE type='trigger' AND tbl_name='log_entries'")
            ).scalars()
            for name in list(names):
                conn.execute(sa.text(f"DROP TRIGGER {name}"))
        conn.execute(
            sa.text("UPDATE log_entries SET envelope = :env WHERE seq = :seq"),
            {"env": canonical_bytes(envelope), "seq": seq},
        )


def test_the_service_repo_gives_a_change_stamp(tmp_path: Path, database: str | None) -> None:
    ledger, _names = _built(tmp_path, database, "backend-qualification/seed004-sleeping.toml")
    try:
        first = ledger.repo.data_version()
        assert first is not None
        assert ledger.repo.data_version() == first  # reads move nothing
        ledger.evaluate_verdict(SUBJECT)
        st = ledger.make_statement("note", {"campaign": "elsewhere"}, {"text": "x"})
        ledger.append([ledger.sign(st, "admin")])
        assert ledger.repo.data_version() != first
    finally:
        ledger.close()
    assert ledger.repo._version_conn is None  # closed with the ledger


def test_a_warm_service_verdict_is_not_read_again_until_the_database_changes(
    tmp_path: Path, database: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (issue 11 warm path): the service's repository had no change stamp, so every warm
    verdict through it read and hashed the campaign's rows again (34-88 ms at 10k entries, against 3 ms
    through the SQLite reader). Now an unchanged database is not read again; an edit of an envelope by
    raw SQL, behind the log's back, is — and the edited row, whose envelope no longer hashes to the entry id
    its leaf commits, refuses the log (integrity)."""
    ledger, names = _built(tmp_path, database, "backend-qualification/seed004-sleeping.toml")
    policy = load_policy("backend-qualification")
    try:
        before = evaluate(ledger, SUBJECT, policy)
        reads = count_snapshot_reads(monkeypatch)
        assert canonical_bytes(evaluate(ledger, SUBJECT, policy)) == canonical_bytes(before)
        assert reads == [], "an unchanged database is not read again"

        target = ledger.get(names["health-while-sleeping"])
        assert target.entry_id in before["used"]
        env = json.loads(target.envelope)
        statement = json.loads(base64.b64decode(env["payload"]))
        statement["payload"]["sleeping"] = False  # hide the sleeping engine, keep the old signature
        env["payload"] = base64.b64encode(canonical_bytes(statement)).decode()
        _edit_behind_the_log(ledger, target.seq, env)

        with pytest.raises(IntegrityError, match="envelope hashes to"):
            evaluate(ledger, SUBJECT, policy)
        assert reads == [1], "the edit moved the stamp: the rows were read again"
    finally:
        ledger.close()


def test_a_supersession_flips_a_warm_service_routing_check_at_once(
    tmp_path: Path, database: str | None
) -> None:
    from tests.policy.test_routing_current import NOW, OK, supersede_benchmark
    from tests.policy.test_routing_current import SUBJECT as ROUTE

    ledger, names = _built(tmp_path, database, "routing-change/seed004-router.toml")
    policy = load_policy("routing-change")
    try:
        first = check_routing_change(ledger, policy, dict(ROUTE), deployment=OK, now=NOW)
        assert first["allowed"] is True, first["reasons"]
        assert check_routing_change(ledger, policy, dict(ROUTE), deployment=OK, now=NOW) == first
        supersede_benchmark(Built(tmp_path / "home", ledger, names))
        r = check_routing_change(ledger, policy, dict(ROUTE), deployment=OK, now=NOW)
        assert r["allowed"] is False
        assert r["verdict"]["current"]["verdict"] == "INCONCLUSIVE"
        assert r["checkpoint"]["size"] == ledger.size()
        assert parse_time(r["now"]) == NOW
    finally:
        ledger.close()
