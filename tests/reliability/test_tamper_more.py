"""Tampering beyond the foundation's suite: replay, back-dating, signing after revocation, a forked log.

Each attack is detected and named: by a duplicate flag, by the visible gap between collected_at and
logged_at, by a `key-revoked` refusal at ingest, by a failing consistency proof (`proof-invalid`).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest

from ledger.canonical import canonical_bytes
from ledger.db import LOG_TABLES
from ledger.entries import format_time, now_utc
from ledger.errors import KeyRevokedError
from ledger.home import Home
from ledger.log import chain_hash, leaf_hash
from ledger.service import Ledger


@pytest.fixture
def ready(cli, home: Path):  # type: ignore[no-untyped-def]
    assert cli("init").code == 0
    assert cli("keys", "new", "hostA", "--role", "collector").code == 0
    for i in range(6):
        r = cli(
            "record", "note", "--key", "hostA", "-s", "campaign=c", "--data", json.dumps({"text": f"#{i}"})
        )
        assert r.code == 0, r.err
    return cli


# --- replay -----------------------------------------------------------------------------------------------


def test_replayed_envelope_recognised_in_any_serialisation(ready, home: Path) -> None:  # type: ignore[no-untyped-def]
    """The same envelope re-sent as-is, re-serialised with other whitespace/key order, or inside a batch."""
    led = Ledger.open(home)
    original = led.get_seq(4)
    size = led.size()
    doc = json.loads(original.envelope)
    variants = [
        original.envelope,
        json.dumps(doc, indent=3).encode(),
        json.dumps(dict(reversed(list(doc.items())))).encode(),
        doc,
    ]
    for v in variants:
        (again,) = led.append([v])
        assert again.duplicate and again.entry_id == original.entry_id and again.seq == 4
    fresh = led.sign(led.make_statement("note", {"campaign": "c"}, {"text": "new"}), "hostA")
    out = led.append([original.envelope, fresh, original.envelope])
    assert [e.duplicate for e in out] == [True, False, True]
    assert led.size() == size + 1
    assert led.verify()
    led.close()


def test_replay_after_revocation_is_recognised_not_refused(ready, home: Path) -> None:  # type: ignore[no-untyped-def]
    """Evidence signed while the key was valid stays what it was; a replay neither duplicates nor fails."""
    led = Ledger.open(home)
    original = led.get_seq(3)
    led.revoke_key("hostA", reason="host reimaged")
    (again,) = led.append([original.envelope])
    assert again.duplicate and again.seq == 3
    led.close()


# --- back-dating ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("days", "visible"), [(-30, "back-dated"), (365, "dated in the future")])
def test_back_or_forward_dated_entry_is_visible(ready, days: int, visible: str) -> None:  # type: ignore[no-untyped-def]
    when = format_time(now_utc() + timedelta(days=days))
    r = ready(
        "record", "note", "--key", "hostA", "-s", "campaign=c", "--data", '{"text": "late"}',
        "--collected-at", when, "--json",
    )  # fmt: skip
    assert r.code == 0, r.err
    shown = ready("show", r.json()["id"], "--json").json()
    assert shown["collected_at"] == when
    assert shown["logged_at"] != when
    # logged_after_s = logged_at - collected_at: large and positive when back-dated, negative when the
    # collector claims a time in the future.
    if days < 0:
        assert shown["logged_after_s"] > 29 * 86400, (visible, shown)
    else:
        assert shown["logged_after_s"] < -364 * 86400, (visible, shown)


# --- signing after revocation -----------------------------------------------------------------------------


def test_entry_signed_after_revocation_refused_even_when_back_dated(ready, home: Path) -> None:  # type: ignore[no-untyped-def]
    """Revocation is judged at the log's own time: claiming an earlier collected_at does not help."""
    before_revocation = format_time(now_utc() - timedelta(days=1))
    r = ready("keys", "revoke", "hostA", "--reason", "key leaked")
    assert r.code == 0, r.err
    size = ready("verify", "--json").json()["size"]
    for extra in ([], ["--collected-at", before_revocation]):
        r = ready("record", "note", "--key", "hostA", "-s", "campaign=c", "--data", '{"text": "x"}', *extra)
        assert r.code == 2 and r.err.startswith("error[key-revoked]"), r.err
    # A statement signed earlier (before revocation) but first submitted now is refused too.
    led = Ledger.open(home)
    ready_made = led.sign(
        led.make_statement("note", {"campaign": "c"}, {"text": "pre-signed"}, collected_at=before_revocation),
        "hostA",
    )
    with pytest.raises(KeyRevokedError):
        led.append([ready_made])
    led.close()
    after = ready("verify", "--json").json()
    assert after["ok"] and after["size"] == size


# --- a checkpoint from a forked log ----------------------------------------------------------------------


def _fork_home(home: Path, to: Path, *, relink: bool = False) -> Path:
    """A copy of the home whose row at seq 3 was rewritten behind the log's back (triggers dropped);
    ``relink``: the hash chain re-derived from it through the head, as a forger who wants the fork's own
    server to sign over it does (fix149: no checkpoint is signed over a chain that does not link)."""
    shutil.copytree(home, to)
    h = Home(to)
    cfg = h.config()
    h.write_config(
        dataclasses.replace(cfg, database_url=f"sqlite:///{to / 'ledger.db'}", store=str(to / "store"))
    )
    led = Ledger.open(to)
    forged = led.sign(led.make_statement("note", {"campaign": "c"}, {"text": "#2 (rewritten)"}), "hostA")
    env = forged.canonical()
    led.close()
    conn = sqlite3.connect(to / "ledger.db")
    for table in LOG_TABLES:
        conn.execute(f"DROP TRIGGER IF EXISTS {table}_no_update")
        conn.execute(f"DROP TRIGGER IF EXISTS {table}_no_delete")
    from ledger.hashing import blake3_hex

    # a consistent forger: the row's log record names the forged envelope and its leaf is that record's hash
    (old,) = conn.execute("SELECT CAST(record AS BLOB) FROM log_entries WHERE seq=4").fetchone()
    rec = json.loads(bytes(old))
    rec["entry_id"] = blake3_hex(env)
    record = canonical_bytes(rec)
    conn.execute(
        "UPDATE log_entries SET envelope=?, entry_id=?, record=?, leaf_hash=? WHERE seq=4",
        (env, blake3_hex(env), record, leaf_hash(record).hex()),
    )
    if relink:
        rows = conn.execute("SELECT seq, entry_id, logged_at FROM log_entries WHERE seq >= 4 ORDER BY seq")
        (prev,) = conn.execute("SELECT chain_hash FROM log_entries WHERE seq = 3").fetchone()
        for seq, entry_id, logged_at in rows.fetchall():
            link = chain_hash(seq, entry_id, prev, logged_at)
            conn.execute("UPDATE log_entries SET prev_hash=?, chain_hash=? WHERE seq=?", (prev, link, seq))
            prev = link
    conn.execute("DELETE FROM tiles")  # tiles are rebuilt from the rows
    conn.execute("DELETE FROM checkpoints")  # the forger also drops the checkpoints that would betray it
    conn.commit()
    conn.close()
    # … and the checkpoint the copied home holds: with it, the fork signs nothing under the log's key (the
    # held-checkpoint check, `Ledger._refuse_fork`), and the forger's proofs below could not be made
    h.checkpoint_path.unlink(missing_ok=True)
    (to / "receipts.jsonl").unlink(missing_ok=True)  # and the kept receipts that name the rewritten entry
    return to


def test_forked_log_fails_consistency_with_held_checkpoint(ready, home: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    r = ready("checkpoint")
    assert r.code == 0
    held = tmp_path / "held.checkpoint"
    held.write_text(r.out)
    old_size = int(r.out.splitlines()[1])
    pub = tmp_path / "log.pub"
    pub.write_text(ready("keys", "export", "log").out)

    forked = _fork_home(home, tmp_path / "forked")
    relinked = _fork_home(home, tmp_path / "relinked", relink=True)
    for h in (home, forked, relinked):
        r = ready("--home", str(h), "record", "note", "--key", "hostA", "-s", "campaign=c", "--data",
                  '{"text": "later"}')  # fmt: skip
        assert r.code == 0, r.err

    # The honest log proves it only grew.
    honest = tmp_path / "honest.json"
    honest.write_text(ready("proof", "consistency", str(old_size)).out)
    ok = ready("proof", "verify", str(honest), "--public-key", f"@{pub}", "--checkpoint", str(held))
    assert ok.code == 0, ok.err

    # The forked log signs nothing over its broken chain (fix149: the rows past the anchor are walked) ...
    r = ready("--home", str(forked), "proof", "consistency", str(old_size))
    assert r.code == 2 and "error[chain-broken]" in r.err and "seq 4" in r.err, r.err
    # ... and relinked, with its checkpoints and held checkpoint gone, it signs fresh checkpoints with the
    # same log key, but cannot match the one we hold.
    r = ready("--home", str(relinked), "proof", "consistency", str(old_size))
    assert r.code == 0, r.err
    proof = tmp_path / "forked.json"
    proof.write_text(r.out)
    bad = ready("proof", "verify", str(proof), "--public-key", f"@{pub}", "--checkpoint", str(held))
    assert bad.code == 2 and bad.err.startswith("error[proof-invalid]"), bad.err
    assert "forked" in bad.err

    # Swapping our held checkpoint into the forged proof does not help: the hashes do not lead to it.
    doc = json.loads(proof.read_text())
    doc["old_checkpoint"] = held.read_text()
    proof.write_text(json.dumps(doc))
    bad = ready("proof", "verify", str(proof), "--public-key", f"@{pub}", "--checkpoint", str(held))
    assert bad.code == 2 and bad.err.startswith("error[proof-invalid]"), bad.err

    # The fork's own server signs no inclusion proof of the rewritten entry: its row's new entry id breaks
    # the hash chain there (fix137: a proof is made only from a row whose chain link holds) ...
    led = Ledger.open(forked)
    try:
        forged_id = led.get_seq(4).entry_id
        r = ready("--home", str(forked), "proof", "inclusion", forged_id, "--size", str(old_size))
        assert r.code == 2 and "error[chain-broken]" in r.err and "seq 4" in r.err, r.err
        # ... and one made all the same (as the local audit makes it) does not match the held checkpoint
        doc = led.inclusion(forged_id, size=old_size, anchor=False)
    finally:
        led.close()
    inc = tmp_path / "inclusion.json"
    inc.write_text(json.dumps(doc))
    bad = ready("proof", "verify", str(inc), "--public-key", f"@{pub}", "--checkpoint", str(held))
    assert bad.code == 2 and bad.err.startswith("error[proof-invalid]"), bad.err

    # And the forked home's own verify names the rewrite.
    r = ready("--home", str(forked), "verify", "--json")
    assert r.code == 1
    codes = {p["code"] for p in r.json()["problems"]}
    assert "chain-broken" in codes, codes
