"""Tamper suite: raw changes behind the ledger's back are caught by `ledger verify` and named."""

from __future__ import annotations

import base64
import json
import os
import sqlite3
from pathlib import Path

import pytest

from ledger.canonical import canonical_bytes
from ledger.db import LOG_TABLES
from ledger.log import leaf_hash
from ledger.service import Ledger
from ledger.signing import SigningKey


@pytest.fixture
def filled(ledger: Ledger, tmp_path: Path) -> Ledger:
    ledger.new_key("hostA", ["collector"])
    log = tmp_path / "stderr.log"
    log.write_text("Marlin gptq_marlin_repack failed after loading 4 shards\n")
    art = ledger.artifact_ref("stderr", log)
    for i in range(8):
        ledger.record(
            "note",
            {"campaign": "seed-000"},
            {"text": f"attempt {i}"},
            key="hostA",
            artifacts=[art] if i == 5 else [],
        )
    ledger.checkpoint()
    assert ledger.verify()
    return ledger


def raw(ledger: Ledger) -> sqlite3.Connection:
    """A raw connection with the append-only triggers dropped, as an attacker with file access would."""
    path = ledger.database_url.removeprefix("sqlite:///")
    conn = sqlite3.connect(path)
    for table in LOG_TABLES:
        conn.execute(f"DROP TRIGGER IF EXISTS {table}_no_update")
        conn.execute(f"DROP TRIGGER IF EXISTS {table}_no_delete")
    return conn


def codes_at(ledger: Ledger) -> dict[int | None, set[str]]:
    report = ledger.verify()
    assert not report
    out: dict[int | None, set[str]] = {}
    for p in report.problems:
        out.setdefault(p.seq, set()).add(p.code)
    return out


def test_triggers_refuse_update_and_delete(filled: Ledger) -> None:
    path = filled.database_url.removeprefix("sqlite:///")
    conn = sqlite3.connect(path)
    for sql in (
        "UPDATE log_entries SET kind='x' WHERE seq=3",
        "DELETE FROM log_entries WHERE seq=3",
        "DELETE FROM entry_subjects",
        "UPDATE checkpoints SET root='00'",
    ):
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            conn.execute(sql)
    conn.close()


def test_flipped_payload_byte_is_named(filled: Ledger) -> None:
    conn = raw(filled)
    env = bytearray(conn.execute("SELECT envelope FROM log_entries WHERE seq=4").fetchone()[0])
    doc = json.loads(env)
    payload = bytearray(base64.b64decode(doc["payload"]))
    i = payload.index(b"attempt")
    payload[i] ^= 0x01
    doc["payload"] = base64.b64encode(bytes(payload)).decode()
    conn.execute("UPDATE log_entries SET envelope=? WHERE seq=4", (canonical_bytes(doc),))
    conn.commit()
    found = codes_at(filled)
    assert "entry-id-mismatch" in found[4]
    assert "bad-signature" in found[4]


def test_deleted_row_is_a_gap(filled: Ledger) -> None:
    conn = raw(filled)
    conn.execute("DELETE FROM log_entries WHERE seq=3")
    conn.commit()
    found = codes_at(filled)
    assert "seq-gap" in found[4]
    assert "chain-broken" in found[4]
    assert "checkpoint-mismatch" in found[None]


def test_reordered_sequence_numbers_break_the_chain(filled: Ledger) -> None:
    conn = raw(filled)
    conn.execute("UPDATE log_entries SET seq=-1 WHERE seq=3")
    conn.execute("UPDATE log_entries SET seq=3 WHERE seq=4")
    conn.execute("UPDATE log_entries SET seq=4 WHERE seq=-1")
    conn.commit()
    found = codes_at(filled)
    assert "chain-broken" in found[3]
    assert "chain-broken" in found[4]


def test_swapped_artifact_file_is_named(filled: Ledger) -> None:
    entry = filled.query(subject={"campaign": "seed-000"})[5]
    digest = entry.statement.artifacts[0].digest
    from ledger.hashing import parse_digest

    path = filled.store.path_of(parse_digest(digest))
    os.chmod(path, 0o644)
    path.write_text("Marlin repack succeeded\n")
    found = codes_at(filled)
    assert found[entry.seq] == {"artifact-corrupt"}


def test_substituted_public_key_is_caught(filled: Ledger) -> None:
    conn = raw(filled)
    seq, env = conn.execute(
        "SELECT seq, envelope FROM log_entries WHERE kind='key.enrol' AND seq>0"
    ).fetchone()
    doc = json.loads(env)
    st = json.loads(base64.b64decode(doc["payload"]))
    attacker = SigningKey.generate("hostA")
    st["payload"]["public_key"] = attacker.public.b64
    st["payload"]["key_id"] = attacker.key_id
    doc["payload"] = base64.b64encode(canonical_bytes(st)).decode()
    new = canonical_bytes(doc)
    conn.execute(
        "UPDATE log_entries SET envelope=?, leaf_hash=? WHERE seq=?", (new, leaf_hash(new).hex(), seq)
    )
    conn.commit()
    found = codes_at(filled)
    assert {"entry-id-mismatch", "bad-signature"} <= found[seq]


def test_edited_subject_index_is_caught(filled: Ledger) -> None:
    conn = raw(filled)
    conn.execute("UPDATE entry_subjects SET value='other-campaign' WHERE seq=6")
    conn.commit()
    found = codes_at(filled)
    assert found[6] == {"index-mismatch"}
