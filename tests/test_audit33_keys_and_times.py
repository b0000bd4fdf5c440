"""Audit 33: reads that selected rows by a mutable column (``kind``, ``logged_at``), and the sequencer's
head time, now judge by what each row's Merkle leaf commits.

- f1/f2: a ``key.*`` row whose ``kind`` column was renamed (or swapped with another row's) is still read
  as a key entry (through its committed signer: only admins sign key entries) and refused against its
  leaf — the keyring, ``keys list``, the sequencer, the verdict and the routing gate; ``ledger audit``
  compares the row's own columns with its receipt.
- f4: ``subject_kind_rows(logged_since=…)`` bounds rows by the first seq whose committed log time is at or
  after the time, so back-dated ``logged_at`` columns are read and refused, not left out.
- f8: the sequencer's head time is the one its leaf commits, and a head time further ahead of the clock
  than ``MAX_CLOCK_SKEW`` is refused (``logged-at-ahead``); ``ledger verify`` names ``logged-at-future``.

SQLite and PostgreSQL (the ``seeded`` fixture of ``tests/test_routing_committed_record.py``: in CI an
unreachable PostgreSQL fails, never skips).
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from ledger.errors import IntegrityError, LogClockAheadError, LogInconsistentError
from ledger.policy.fixtures import build_fixture_ledger
from ledger.service import Ledger
from tests import test_routing_committed_record as committed
from tests.api import conftest as api_fixtures
from tests.conftest import CliResult
from tests.test_key_rows_committed import _all_refuse, _enrol_temp, _revoked_reviewer
from tests.test_routing_committed_record import Seeded, _drop_triggers, _refused_as_integrity

pg_databases = committed.pg_databases
seeded = committed.seeded
run = committed.run

Run = Callable[..., CliResult]
LOGGED = "2026-09-10T12:00:00.000000Z"


def _note_after(s: Seeded) -> None:
    """A note by the operator, so that the tampered key row is not the log's head."""
    s.append("note", {"host": "another-box"}, {"text": "after"}, "operator")


def _fresh(s: Seeded) -> Ledger:
    """Another process's view: a ledger opened on the same home, its keyring folded from the database."""
    return Ledger.open(s.home)


# --- f1/f2: a key row renamed by its kind column ---------------------------------------------------


def test_a_key_revoke_renamed_by_its_kind_column_still_revokes(seeded: Seeded, run: Run) -> None:
    """UPDATE kind='note' on the reviewer's key.revoke row: the gate allowed the route (the revoked
    reviewer's verdict trusted again). Now every reader refuses, exit 2, naming the column and the kind
    the leaf commits; a fresh sequencer appends nothing by the revoked key; ``keys list`` refuses."""
    s = seeded
    seq = _revoked_reviewer(s, run)
    _note_after(s)
    s.tamper(("UPDATE log_entries SET kind = 'note' WHERE seq = :s", {"s": seq}))
    _all_refuse(
        s, run, f"entry at seq {seq}", "kind 'note' where the log record its leaf commits says 'key.revoke'"
    )
    fresh = _fresh(s)
    try:
        size = fresh.size()
        with pytest.raises(IntegrityError, match="kind 'note'"):
            fresh.record("note", {"host": "gpu-box-1"}, {"text": "by a revoked key"}, key="reviewer")
        assert fresh.size() == size
        with pytest.raises(IntegrityError):
            fresh.keyring()
    finally:
        fresh.close()
    r = run("--home", str(s.home), "keys", "list")
    assert r.code == 2 and "error[integrity]" in r.err, r.out + r.err


@pytest.mark.parametrize("which", ["key.enrol", "key.grant", "key.revoke"])
@pytest.mark.parametrize("how", ["renamed", "swapped"])
def test_every_key_kind_renamed_or_swapped_by_its_kind_column_is_refused(
    seeded: Seeded, run: Run, which: str, how: str
) -> None:
    """Each key kind (an enrolment, a role change, a revocation) with its kind column renamed to 'note',
    or exchanged with a note's (the note's row then claims to be the key entry): refused, never folded
    without it."""
    s = seeded
    _enrol_temp(s)
    temp = s.ledger.key_record("temp")
    if which == "key.grant":
        s.names["key"] = s.append(
            "key.grant",
            {"key": "temp"},
            {"key_id": temp.key_id, "roles": ["reviewer"]},
            s.ledger.cfg.admin_key,
        )
    elif which == "key.revoke":
        s.names["key"] = s.append(
            "key.revoke",
            {"key": "temp"},
            {"key_id": temp.key_id, "effective_at": LOGGED, "reason": "stolen"},
            s.ledger.cfg.admin_key,
        )
    else:
        s.names["key"] = s.names["temp-enrol"]
    s.names["note"] = s.append("note", {"host": "another-box"}, {"text": "a note"}, s.ledger.cfg.admin_key)
    _note_after(s)
    key_seq, note_seq = s.seq("key"), s.seq("note")
    moves = [("UPDATE log_entries SET kind = 'note' WHERE seq = :s", {"s": key_seq})]
    if how == "swapped":
        moves.append(("UPDATE log_entries SET kind = :k WHERE seq = :s", {"k": which, "s": note_seq}))
    s.tamper(*moves)
    _all_refuse(s, run, "is not as the log committed it", f"entry at seq {min(key_seq, note_seq)}")


def test_a_key_row_renamed_below_the_held_checkpoint_is_named_by_verify(seeded: Seeded, run: Run) -> None:
    """``ledger verify`` (its start at the held checkpoint reads the key entries the same way) names it."""
    s = seeded
    seq = _revoked_reviewer(s, run)
    _note_after(s)
    s.ledger.checkpoint()
    s.tamper(("UPDATE log_entries SET kind = 'note' WHERE seq = :s", {"s": seq}))
    r = run("--home", str(s.home), "verify")
    assert r.code == 1 and f"seq {seq}" in r.out + r.err, r.out + r.err


@pytest.fixture(params=["sqlite", "postgres"])
def home_ledger(request: pytest.FixtureRequest, tmp_path: Path, pg_databases: Any) -> Iterator[Ledger]:
    """A fresh home-bound ledger (receipts kept) on SQLite or PostgreSQL."""
    kw: dict[str, Any] = {}
    if request.param == "postgres":
        api_fixtures.require_postgres()
        kw["database_url"] = pg_databases.new()
    Ledger.init(tmp_path / "home", **kw).close()
    led = Ledger.open(tmp_path / "home", home_bound=True)
    try:
        yield led
    finally:
        led.close()


def _tamper(led: Ledger, sql: str, params: dict[str, Any]) -> None:
    with led.engine.begin() as conn:
        _drop_triggers(conn)
        conn.execute(sa.text(sql), params)


@pytest.mark.parametrize(("column", "value"), [("kind", "note"), ("signer", "0" * 32)])
def test_audit_compares_the_rows_kind_and_signer_columns_with_its_receipt(
    home_ledger: Ledger, column: str, value: str
) -> None:
    """docs/LOG.md: a local audit compares the row's kind and signer columns (not the envelope's)."""
    led = home_ledger
    led.new_key("op2", ["operator"])
    rev = led.revoke_key("op2", reason="compromised")
    led.record("note", {"campaign": "c"}, {"text": "after"}, key=led.cfg.admin_key)
    assert not led.audit().problems
    _tamper(led, f"UPDATE log_entries SET {column} = :v WHERE seq = :s", {"v": value, "s": rev.seq})
    report = led.audit()
    codes = {(p["index"], p["code"]) for p in report.problems}
    assert (rev.seq, "receipt-mismatch") in codes, report.problems


# --- f4: logged_since by committed times ---------------------------------------------------------

RESTORE_FIXTURE = committed.POLICY_DIR / "fixtures" / "routing-change" / "restoration-newest-probes.toml"


@pytest.fixture(params=["sqlite", "postgres"])
def restoring(request: pytest.FixtureRequest, tmp_path: Path, pg_databases: Any) -> Iterator[Ledger]:
    """``routing-change/restoration-newest-probes``: hiro-b's newest probes failed (restore refused)."""
    init: Callable[..., Ledger] = Ledger.init
    if request.param == "postgres":
        api_fixtures.require_postgres()
        init = functools.partial(Ledger.init, database_url=pg_databases.new())
    led, _spec, _b = build_fixture_ledger(RESTORE_FIXTURE, tmp_path / "home", committed.POLICY_DIR, init=init)
    led.checkpoint()
    try:
        yield led
    finally:
        led.close()


def _restore(run: Run, home: Path) -> CliResult:
    return run(
        "--home", str(home), "check", "routing-change", "--action", "restore",
        "--now", "2026-09-01T18:05:00Z",
        "--json", "-s", "backend=llama.cpp", "-s", "model=qwen/qwen3.8-27b", "-s", "host=hiro-b",
    )  # fmt: skip


def _host_seqs(led: Ledger, host: str) -> list[int]:
    with led.engine.begin() as conn:
        return [
            int(q)
            for (q,) in conn.execute(
                sa.text("SELECT seq FROM entry_subjects WHERE field = 'host' AND value = :h ORDER BY seq"),
                {"h": host},
            )
        ]


@pytest.mark.parametrize("moved", ["backdated", "forward-dated-before"])
def test_backdated_logged_at_columns_do_not_hide_recent_probes_from_restore(
    restoring: Ledger, run: Run, tmp_path: Path, moved: str
) -> None:
    """hiro-b's newest probes failed: restore refused (exit 1). Back-dating their ``logged_at`` columns
    (leaves untouched) left them out of the ``logged_at >= since`` SQL filter: allowed, exit 0. Now the
    rows are bounded by committed times and the edited ones refused (exit 2). Forward-dating an older
    row's column (so the column's index proposes a wrong boundary) is refused too."""
    led = restoring
    home = tmp_path / "home"
    r = _restore(run, home)
    assert r.code == 1 and json.loads(r.out)["allowed"] is False, r.out + r.err
    seqs = _host_seqs(led, "hiro-b")
    if moved == "backdated":
        for q in seqs[-2:]:
            _tamper(
                led,
                "UPDATE log_entries SET logged_at = :t WHERE seq = :s",
                {"t": "2026-09-01T08:00:00.000000Z", "s": q},
            )
        want = f"entry at seq {seqs[-2]}"
    else:
        _tamper(
            led,
            "UPDATE log_entries SET logged_at = :t WHERE seq = :s",
            {"t": "2026-09-01T18:04:00.000000Z", "s": 1},
        )
        want = "entry at seq 1"
    _refused_as_integrity(_restore(run, home), want, "logged_at '")


def test_first_logged_since_bisects_when_the_column_lies() -> None:
    from ledger.reads import first_logged_since

    times = [f"2026-09-01T{h:02d}:00:00.000000Z" for h in range(10)]
    got = functools.partial(first_logged_since, "2026-09-01T05:00:00.000000Z", 10)
    for candidate in (None, 0, 3, 5, 7, 10):
        assert got(candidate, times.__getitem__) == 5
    assert first_logged_since("2027", 10, None, times.__getitem__) == 10
    assert first_logged_since("2000", 10, 4, times.__getitem__) == 0


# --- f8: the head's time ------------------------------------------------------------------------------------


def test_a_head_logged_at_column_set_to_2099_is_not_inherited(home_ledger: Ledger) -> None:
    """The head's logged_at column rewritten to 2099: the next append is refused (integrity), not logged
    at 2099; restored, appends go on at the clock's time."""
    led = home_ledger
    led.new_key("op", ["operator"])
    head = led.record("note", {"campaign": "c"}, {"text": "a"}, key="op")
    _tamper(
        led,
        "UPDATE log_entries SET logged_at = :t WHERE seq = :s",
        {"t": "2099-01-01T00:00:00.000000Z", "s": head.seq},
    )
    fresh = Ledger.open(led.home.path)
    try:
        with pytest.raises(IntegrityError, match="2099"):
            fresh.record("note", {"campaign": "c"}, {"text": "b"}, key="op")
        assert fresh.size() == head.seq + 1
        _tamper(
            led, "UPDATE log_entries SET logged_at = :t WHERE seq = :s", {"t": head.logged_at, "s": head.seq}
        )
        after = fresh.record("note", {"campaign": "c"}, {"text": "c"}, key="op")
        assert not after.logged_at.startswith("2099")
    finally:
        fresh.close()


def _rewrite_head_time(led: Ledger, when: str) -> int:
    """The head rewritten consistently (its logged_at column, record and leaf hash) to ``when``."""
    with led.engine.begin() as conn:
        seq, rec = conn.execute(
            sa.text("SELECT seq, record FROM log_entries ORDER BY seq DESC LIMIT 1")
        ).one()
        doc = json.loads(bytes(rec))
        doc["logged_at"] = when
        new = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
        _drop_triggers(conn)
        conn.execute(
            sa.text("UPDATE log_entries SET record = :r, logged_at = :t, leaf_hash = :h WHERE seq = :s"),
            {"r": new, "t": when, "h": hashlib.sha256(b"\x00" + new).hexdigest(), "s": seq},
        )
    return int(seq)


def test_a_head_time_far_ahead_of_the_clock_is_refused_and_verify_names_it(
    home_ledger: Ledger, run: Run
) -> None:
    """A head committed (leaf and all) at 2099 — a clock set wrong once, or a rewrite — is refused as
    ``logged-at-ahead`` rather than inherited by every later entry; ``ledger verify`` names it
    ``logged-at-future``."""
    led = home_ledger
    led.new_key("op", ["operator"])
    led.record("note", {"campaign": "c"}, {"text": "a"}, key="op")
    seq = _rewrite_head_time(led, "2099-01-01T00:00:00.000000Z")
    # the home that appended the head kept its receipt: the rewrite is named as one (fix 87)
    fresh = Ledger.open(led.home.path)
    try:
        with pytest.raises(LogInconsistentError) as rewritten:
            fresh.record("note", {"campaign": "c"}, {"text": "b"}, key="op")
        assert "logged_at 2099-01-01T00:00:00.000000Z where the receipt says" in rewritten.value.message
        assert fresh.size() == seq + 1
    finally:
        fresh.close()
    # a home that holds no receipt of it (another collector's, or the receipts gone): refused as ahead
    (led.home.path / "receipts.jsonl").unlink()
    fresh = Ledger.open(led.home.path)
    try:
        with pytest.raises(LogClockAheadError) as e:
            fresh.record("note", {"campaign": "c"}, {"text": "b"}, key="op")
        assert e.value.code == "logged-at-ahead" and "2099-01-01" in e.value.message
        assert fresh.size() == seq + 1
    finally:
        fresh.close()
    r = run("--home", str(led.home.path), "verify")
    assert r.code == 1 and f"[logged-at-future] seq {seq}" in r.out + r.err, r.out + r.err


def test_a_caller_given_future_time_is_still_allowed(home_ledger: Ledger) -> None:
    """Only inheriting a future head time is refused: code that gives each entry's time (the policy
    fixtures) appends in time order as before."""
    from ledger.entries import parse_time

    led = home_ledger
    led.new_key("op", ["operator"])
    for t in ("2099-01-01T00:00:00Z", "2099-01-02T00:00:00Z"):
        st = led.make_statement("note", {"campaign": "c"}, {"text": t})
        led.append([led.sign(st, "op")], logged_at=parse_time(t))
