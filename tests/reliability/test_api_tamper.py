"""Tampering in the API deployment: each attack is detected and named.

A modified row in PostgreSQL (a superuser drops the append-only trigger), a replaced object in the store
(filesystem and S3), a checkpoint from a forked log (the consistency proof from the API fails
`ledger proof verify`), a replayed envelope (200 duplicate), an entry signed after its key's revocation
(403, nothing stored) and a back-dated entry (visible as ``logged_after_s``).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from ledger.canonical import canonical_bytes
from ledger.db import LOG_TABLES
from ledger.entries import ArtifactRef, format_time, now_utc
from ledger.hashing import blake3_hex, parse_digest
from ledger.home import Home
from ledger.log import chain_hash, leaf_hash
from ledger.service import Ledger
from ledger.tokens import create_token
from tests.api.test_s3_store import S3_ENV
from tests.api.test_s3_store import s3_endpoint as _s3_endpoint
from tests.reliability import api_fixtures
from tests.reliability.api_fixtures import (
    LEDGER_BIN,
    PG_ADMIN,
    Deployment,
    PgDatabases,
    Server,
    ledger_cli,
    make_deployment,
    require_postgres,
    start_server,
    verify_json,
)

pg_databases = api_fixtures.pg_databases
s3_endpoint = _s3_endpoint


def _psycopg_url(database_url: str) -> str:
    return database_url.replace("postgresql+psycopg://", "postgresql://", 1)


def _post(server: Server, dep: Deployment, path: str, body: Any) -> httpx.Response:
    return httpx.post(server.url + path, json=body, headers=dep.headers("writer"), timeout=60)


def _record_notes(server: Server, dep: Deployment, n: int, campaign: str = "tamper") -> list[dict[str, Any]]:
    envs = [dep.sign("note", {"campaign": campaign}, {"text": f"attempt {i}"}) for i in range(n)]
    r = _post(server, dep, "/v1/entries/batch", {"envelopes": envs})
    assert r.status_code == 201, r.text
    entries: list[dict[str, Any]] = r.json()["items"]
    return entries


def _problems(home: Path) -> dict[int | None, set[str]]:
    code, doc = verify_json(home)
    assert code == 1 and not doc["ok"], doc
    out: dict[int | None, set[str]] = {}
    for p in doc["problems"]:
        out.setdefault(p["seq"], set()).add(p["code"])
    return out


@pytest.fixture
def pg_served(tmp_path: Path, pg_databases: PgDatabases) -> Iterator[tuple[Deployment, Server]]:
    dep = make_deployment("postgres", tmp_path / "server", pg_databases)
    srv = start_server(dep.home)
    yield dep, srv
    srv.stop()
    dep.ledger.close()


@pytest.fixture(params=api_fixtures.BACKENDS)
def served(
    request: pytest.FixtureRequest, tmp_path: Path, pg_databases: PgDatabases
) -> Iterator[tuple[Deployment, Server]]:
    dep = make_deployment(request.param, tmp_path / "server", pg_databases)
    srv = start_server(dep.home)
    yield dep, srv
    srv.stop()
    dep.ledger.close()


# --- a modified row in PostgreSQL ------------------------------------------------------------------------


@pytest.mark.postgres
def test_postgres_triggers_refuse_update_delete_truncate(pg_served: tuple[Deployment, Server]) -> None:
    import psycopg

    dep, srv = pg_served
    _record_notes(srv, dep, 3)
    with psycopg.connect(_psycopg_url(dep.database_url), autocommit=True) as conn:
        for sql in (
            "UPDATE log_entries SET kind='x' WHERE seq=3",
            "DELETE FROM log_entries WHERE seq=3",
            "DELETE FROM entry_subjects",
            "TRUNCATE log_entries CASCADE",
        ):
            with pytest.raises(psycopg.Error, match="append-only"):
                conn.execute(sql)
    code, doc = verify_json(dep.home)
    assert code == 0 and doc["ok"], doc


@pytest.mark.postgres
@pytest.mark.parametrize("attacker", ["flips-a-byte", "also-rehashes-id-and-leaf"])
def test_modified_postgres_row_is_named_by_ledger_verify(
    pg_served: tuple[Deployment, Server], attacker: str
) -> None:
    import psycopg

    dep, srv = pg_served
    entries = _record_notes(srv, dep, 8)
    r = httpx.get(srv.url + "/v1/checkpoint", headers=dep.headers("reader"))
    assert r.status_code == 200
    target = entries[4]
    # a published checkpoint commits the row before it is edited (the sequencer publishes on its own clock:
    # appends made within one interval may all come after the newest one)
    assert dep.ledger.checkpoint().size > target["seq"]
    with psycopg.connect(_psycopg_url(dep.database_url), autocommit=True) as conn:
        # a superuser (the test's `root`) removes the protection first
        conn.execute("DROP TRIGGER log_entries_append_only ON log_entries")
        row = conn.execute("SELECT envelope FROM log_entries WHERE seq=%s", (target["seq"],)).fetchone()
        assert row is not None
        doc = json.loads(bytes(row[0]))
        payload = bytearray(base64.b64decode(doc["payload"]))
        payload[payload.index(b"attempt")] ^= 0x01  # "attempt 4" -> "`ttempt 4"
        doc["payload"] = base64.b64encode(bytes(payload)).decode()
        env = canonical_bytes(doc)
        if attacker == "flips-a-byte":
            conn.execute("UPDATE log_entries SET envelope=%s WHERE seq=%s", (env, target["seq"]))
        else:
            conn.execute(
                "UPDATE log_entries SET envelope=%s, entry_id=%s, leaf_hash=%s WHERE seq=%s",
                (env, blake3_hex(env), leaf_hash(env).hex(), target["seq"]),
            )
    found = _problems(dep.home)
    assert set(found) <= {target["seq"], target["seq"] + 1, None}, found  # nothing else is blamed
    if attacker == "flips-a-byte":
        assert {"entry-id-mismatch", "bad-signature"} <= found[target["seq"]]
    else:
        assert {"bad-signature", "chain-broken"} <= found[target["seq"]]
        assert "checkpoint-mismatch" in found[None]
    # the report names the entry by its id as well as its seq
    _code, doc = verify_json(dep.home)
    named = {p["id"] for p in doc["problems"] if p["seq"] == target["seq"]}
    assert named and all(n in (target["id"], blake3_hex(env)) for n in named), named


# --- a replaced object in the store ----------------------------------------------------------------------


def _upload_and_record(srv: Server, dep: Deployment, data: bytes) -> dict[str, Any]:
    digest = f"blake3:{blake3_hex(data)}"
    r = httpx.put(f"{srv.url}/v1/artifacts/{digest}", content=data, headers=dep.headers("writer"), timeout=60)
    assert r.status_code == 201, r.text
    env = dep.sign(
        "note",
        {"campaign": "tamper"},
        {"text": "stderr attached"},
        artifacts=[ArtifactRef(name="stderr.log", digest=digest, size=len(data))],
    )
    r = _post(srv, dep, "/v1/entries", env)
    assert r.status_code == 201, r.text
    entry: dict[str, Any] = r.json()
    return entry


def test_replaced_object_in_the_filesystem_store_is_named(served: tuple[Deployment, Server]) -> None:
    dep, srv = served
    _record_notes(srv, dep, 2)
    data = b"Marlin gptq_marlin_repack failed after loading 4 shards\n" * 200
    entry = _upload_and_record(srv, dep, data)
    digest = entry["artifacts"][0]["digest"]
    path = dep.ledger.store.path_of(parse_digest(digest))
    os.chmod(path, 0o644)
    path.write_bytes(data.replace(b"failed", b"passed"))
    found = _problems(dep.home)
    assert found == {entry["seq"]: {"artifact-corrupt"}}, found
    # the API never serves the replaced bytes as the artifact
    got = httpx.get(f"{srv.url}/v1/artifacts/{digest}", headers=dep.headers("reader"))
    assert got.status_code == 500 and got.json()["error"]["code"] == "artifact-corrupt", got.text[:300]


def test_replaced_object_in_the_s3_store_is_named(
    s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = f"tamper-{secrets.token_hex(3)}"
    home = tmp_path / "home"
    env = {**os.environ, **S3_ENV, "AWS_ENDPOINT_URL_S3": s3_endpoint}
    init = subprocess.run(
        [LEDGER_BIN, "--home", str(home), "init", "--store", f"s3://{bucket}/evidence", "--json"],
        check=False, capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert init.returncode == 0, init.stderr
    for k, v in {**S3_ENV, "AWS_ENDPOINT_URL_S3": s3_endpoint}.items():
        monkeypatch.setenv(k, v)
    led = Ledger.open(home)
    led.new_key("collector1", ["collector"])
    dep = Deployment("sqlite", home, led.database_url, led)
    dep.tokens["writer"], _ = create_token(led.engine, "w", "writer")
    dep.tokens["reader"] = dep.tokens["writer"]
    srv = start_server(home, "--s3-endpoint", s3_endpoint, env=S3_ENV)
    try:
        data = secrets.token_bytes(300_000)
        entry = _upload_and_record(srv, dep, data)
        digest = entry["artifacts"][0]["digest"]
        store: Any = led.store
        store.s3.put_object(
            Bucket=store.bucket, Key=store._key(parse_digest(digest)), Body=b"bit rot" + data[7:]
        )
        out = subprocess.run(
            [LEDGER_BIN, "--home", str(home), "verify", "--json"],
            check=False,
            capture_output=True,
            text=True,
            env=env,
        )
        assert out.returncode == 1, out.stdout + out.stderr
        problems = json.loads(out.stdout)["problems"]
        assert [(p["seq"], p["code"]) for p in problems] == [(entry["seq"], "artifact-corrupt")], problems
        got = httpx.get(f"{srv.url}/v1/artifacts/{digest}", headers=dep.headers("reader"))
        assert got.status_code == 500 and got.json()["error"]["code"] == "artifact-corrupt"
    finally:
        srv.stop()
        led.close()


# --- a checkpoint from a forked log ----------------------------------------------------------------------


@pytest.mark.postgres
def test_forked_postgres_log_fails_consistency_via_the_api(tmp_path: Path, pg_databases: PgDatabases) -> None:
    import psycopg

    require_postgres()
    dep = make_deployment("postgres", tmp_path / "honest", pg_databases)
    srv = start_server(dep.home)
    fork_srv: Server | None = None
    try:
        _record_notes(srv, dep, 7)
        cp = httpx.get(srv.url + "/v1/checkpoint", headers=dep.headers("reader")).json()
        held = tmp_path / "held.checkpoint"
        held.write_text(cp["note"])
        pub = cp["log_public_key"]
        old = int(cp["size"])

        # The fork: a copy of the database (and home) whose seq 4 is rewritten, checkpoints dropped.
        srv.stop()
        dep.ledger.engine.dispose()
        honest_db = dep.database_url.rsplit("/", 1)[1]
        fork_db = honest_db + "_fork"
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{fork_db}" TEMPLATE "{honest_db}"')
        pg_databases.made.append(fork_db)
        fork_home = tmp_path / "forked"
        shutil.copytree(dep.home, fork_home, ignore=shutil.ignore_patterns("serve-*.log"))
        # the fork's operator removes the home's anchor too: with it held, the fork server would sign nothing
        # under the log key (audit 37, f4: tests/test_fix44_log_fork.py); the client's held checkpoint still
        # catches the fork
        (fork_home / "checkpoint").unlink(missing_ok=True)
        h = Home(fork_home)
        cfg = h.config()
        fork_url = dep.database_url.rsplit("/", 1)[0] + "/" + fork_db
        h.write_config(dataclasses.replace(cfg, database_url=fork_url, store=str(fork_home / "store")))
        forged = dep.ledger.sign(
            dep.ledger.make_statement("note", {"campaign": "tamper"}, {"text": "attempt 3 (rewritten)"}),
            "collector1",
        ).canonical()
        with psycopg.connect(_psycopg_url(fork_url), autocommit=True) as conn:
            for table in LOG_TABLES:
                conn.execute(f"DROP TRIGGER IF EXISTS {table}_append_only ON {table}")
                conn.execute(f"DROP TRIGGER IF EXISTS {table}_no_truncate ON {table}")
            # a consistent forger: the row's log record names the forged envelope, its leaf that record's hash
            row = conn.execute("SELECT record FROM log_entries WHERE seq=4").fetchone()
            assert row is not None
            rec = json.loads(bytes(row[0]))
            rec["entry_id"] = blake3_hex(forged)
            record = canonical_bytes(rec)
            conn.execute(
                "UPDATE log_entries SET envelope=%s, entry_id=%s, record=%s, leaf_hash=%s WHERE seq=4",
                (forged, blake3_hex(forged), record, leaf_hash(record).hex()),
            )
            # ... and its hash chain re-derived from it through the head: a chain that does not link past
            # the anchor gets nothing signed over it (fix149), so a forger who wants signatures relinks it
            before = conn.execute("SELECT chain_hash FROM log_entries WHERE seq=3").fetchone()
            assert before is not None
            prev = before[0]
            rows = conn.execute("SELECT seq, entry_id, logged_at FROM log_entries WHERE seq >= 4 ORDER BY 1")
            for seq, entry_id, logged_at in rows.fetchall():
                link = chain_hash(seq, entry_id, prev, logged_at)
                conn.execute(
                    "UPDATE log_entries SET prev_hash=%s, chain_hash=%s WHERE seq=%s", (prev, link, seq)
                )
                prev = link
            conn.execute("DELETE FROM tiles")  # tiles are rebuilt from the rows
            conn.execute("DELETE FROM checkpoints")

        srv = start_server(dep.home)
        fork_srv = start_server(fork_home)
        for s in (srv, fork_srv):  # both logs grow
            _record_notes(s, dep, 2, campaign="later")

        def proof_from(s: Server) -> subprocess.CompletedProcess[str]:
            r = httpx.get(
                f"{s.url}/v1/proofs/consistency", params={"old": old}, headers=dep.headers("reader")
            )
            assert r.status_code == 200, r.text
            path = tmp_path / f"proof-{s.url.rsplit(':', 1)[1]}.json"
            path.write_text(r.text)
            return ledger_cli("proof", "verify", str(path), "--public-key", pub, "--checkpoint", str(held))

        ok = proof_from(srv)
        assert ok.returncode == 0, ok.stderr
        bad = proof_from(fork_srv)
        assert bad.returncode == 2 and bad.stderr.startswith("error[proof-invalid]"), bad.stderr
        assert "forked" in bad.stderr
        # the fork's checkpoint for the old size differs from the held one although signed by the same key
        fork_cp = httpx.get(
            f"{fork_srv.url}/v1/checkpoint", params={"size": old}, headers=dep.headers("reader")
        )
        assert fork_cp.json()["root"] != cp["root"]
    finally:
        srv.stop()
        if fork_srv is not None:
            fork_srv.stop()
        dep.ledger.close()


# --- replay, revoked signer, back-dating: through the API ------------------------------------------------


def test_replayed_envelope_via_the_api_is_a_200_duplicate(served: tuple[Deployment, Server]) -> None:
    dep, srv = served
    env = dep.sign("note", {"campaign": "replay"}, {"text": "once"})
    first = _post(srv, dep, "/v1/entries", env)
    assert first.status_code == 201 and first.json()["duplicate"] is False
    size = dep.ledger.size()
    again = _post(srv, dep, "/v1/entries", env)
    assert again.status_code == 200, again.text
    assert again.json()["duplicate"] is True
    assert (again.json()["id"], again.json()["seq"]) == (first.json()["id"], first.json()["seq"])
    # re-serialised (other key order, whitespace) it is still the same statement
    reordered = json.dumps(dict(reversed(list(env.items()))), indent=2)
    r = httpx.post(srv.url + "/v1/entries", content=reordered, headers=dep.headers("writer"))
    assert r.status_code == 200 and r.json()["duplicate"] is True, r.text
    fresh = dep.sign("note", {"campaign": "replay"}, {"text": "new"})
    batch = _post(srv, dep, "/v1/entries/batch", {"envelopes": [env, fresh, env]})
    assert batch.status_code == 201
    assert [e["duplicate"] for e in batch.json()["items"]] == [True, False, True]
    all_dup = _post(srv, dep, "/v1/entries/batch", {"envelopes": [env, fresh]})
    assert all_dup.status_code == 200
    assert dep.ledger.size() == size + 1
    assert len(dep.ledger.query(subject={"campaign": "replay"}, limit=None)) == 2


def test_entry_signed_after_revocation_is_403_and_not_stored(served: tuple[Deployment, Server]) -> None:
    dep, srv = served
    led = dep.ledger
    led.new_key("reimaged", ["collector"])
    before = led.sign(
        led.make_statement("note", {"campaign": "revoked"}, {"text": "signed in time"}), "reimaged"
    )
    assert _post(srv, dep, "/v1/entries", before.to_json()).status_code == 201
    revoked_at = now_utc()
    led.revoke_key("reimaged", reason="host reimaged")
    size = led.size()
    attempts = {
        "after": led.make_statement("note", {"campaign": "revoked"}, {"text": "after"}),
        "back-dated-before-revocation": led.make_statement(
            "note",
            {"campaign": "revoked"},
            {"text": "claims earlier"},
            collected_at=format_time(revoked_at - timedelta(hours=1)),
        ),
    }
    for why, st in attempts.items():
        env = led.sign(st, "reimaged").to_json()
        for path, body in (("/v1/entries", env), ("/v1/entries/batch", {"envelopes": [env]})):
            r = _post(srv, dep, path, body)
            assert r.status_code == 403, (why, path, r.text)
            assert r.json()["error"]["code"] == "key-revoked", (why, r.text)
    # a valid entry in the same batch is not stored either: the batch is refused as a whole
    good = dep.sign("note", {"campaign": "revoked"}, {"text": "good"})
    bad = led.sign(attempts["after"], "reimaged").to_json()
    assert _post(srv, dep, "/v1/entries/batch", {"envelopes": [good, bad]}).status_code == 403
    assert led.size() == size
    assert [e.statement.payload["text"] for e in led.query(subject={"campaign": "revoked"})] == [
        "signed in time"
    ]
    # the replay of what was signed in time is recognised, not refused
    assert _post(srv, dep, "/v1/entries", before.to_json()).status_code == 200
    code, doc = verify_json(dep.home)
    assert code == 0, doc


def test_back_dated_entry_via_the_api_is_visible(served: tuple[Deployment, Server]) -> None:
    dep, srv = served
    led = dep.ledger
    when = format_time(now_utc() - timedelta(days=30))
    st = led.make_statement("note", {"campaign": "backdated"}, {"text": "old news"}, collected_at=when)
    r = _post(srv, dep, "/v1/entries", led.sign(st, "collector1").to_json())
    assert r.status_code == 201, r.text
    got = httpx.get(f"{srv.url}/v1/entries/{r.json()['id']}", headers=dep.headers("reader")).json()
    assert got["collected_at"] == when
    assert got["logged_after_s"] > 29 * 86400, got
    listed = httpx.get(
        f"{srv.url}/v1/entries", params={"subject": "campaign=backdated"}, headers=dep.headers("reader")
    ).json()["items"]
    assert listed[0]["logged_after_s"] > 29 * 86400
    # an honest entry is logged within seconds of its collection
    fresh = _post(srv, dep, "/v1/entries", dep.sign("note", {"campaign": "backdated"}, {"text": "now"}))
    assert abs(fresh.json()["logged_after_s"]) < 60
