"""Issues 11 and 12: the routing gate judges what the log committed, and only a log its home saw.

11. The policy took ``logged_at`` (and the position) from the mutable columns of ``log_entries``, not from
    the log record each Merkle leaf commits: an operator who back-dated or forward-dated that column with
    raw SQL changed what ``ledger verdict`` and ``ledger check routing-change`` saw (revocation at a time,
    freshness …) while ``verify`` and ``audit`` named the row. Now every row the policy port returns is
    checked against its leaf hash, and the gate refuses (exit 2, ``error[integrity]``) naming the column.
12. ``check routing-change`` (the fast SQLite path, no service) never checked the log against the
    checkpoint its home holds outside the database: a log truncated or rewritten below it was judged. Now
    the gate (and ``ledger verdict``) first computes the tree at the held size from the stored tiles and
    leaf hashes and refuses a log whose root is not the held checkpoint's, or that is shorter than it.

Every test runs the CLI, as an operator does, on the routing seed 004 (a QUALIFIED embed model on
gpu-box-1, its verdict recorded at 2026-09-10T11:00Z), on SQLite (the fast reader) and on PostgreSQL (the
service; in CI its absence fails), and tampers with raw SQL, triggers dropped.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st

from ledger.cli import main
from ledger.entries import parse_time
from ledger.log import LogRecord, chain_hash
from ledger.policy.fixtures import build_fixture_ledger
from ledger.reads import record_leaf_hex
from ledger.service import Ledger
from tests.conftest import CliResult
from tests.policy.conftest import FIXTURES, POLICY_DIR
from tests.policy.test_routing_current import OK, SUBJECT
from tests.reliability import api_fixtures
from tests.reliability.api_fixtures import PgDatabases
from tests.reliability.test_receipts import _drop_triggers

pg_databases = api_fixtures.pg_databases

SEED004 = FIXTURES / "routing-change" / "seed004-router.toml"
NOW = "2026-09-11T09:00:00Z"  # a day after the verdict: allowed on the honest log
VERDICT_AT = "2026-09-10T11:00:00.000000Z"
REVOKED_FROM = "2026-09-10T10:55:00.000000Z"  # the reviewer key that signed the verdict, stolen
BACKDATED = "2026-09-10T10:50:00.000000Z"  # the verdict back-dated before it (the entry before it: 10:50)
# seed 004's third check: a multi-GPU service without NCCL_P2P_DISABLE=1 on a host whose note records the
# P2P fault is refused; without that note it would be allowed
P2P_UNSAFE = {
    "host": "gpu-box-1",
    "services": [{"engine": "vllm", "name": "vllm-embed", "model": "Qwen3-Embedding-8B", "gpus": [0, 1],
                  "gpu_memory_utilization": 0.25}],
}  # fmt: skip


@dataclass
class Seeded:
    home: Path
    ledger: Ledger
    names: dict[str, str]
    tmp: Path

    def seq(self, name: str) -> int:
        return self.ledger.get(self.names[name]).seq

    def append(self, kind: str, subject: dict[str, str], payload: dict[str, Any], key: str, **kw: Any) -> str:
        """An entry signed by ``key``, logged at 2026-09-10T12:00Z (after the seed's last entry)."""
        at = parse_time("2026-09-10T12:00:00Z")
        st_ = self.ledger.make_statement(kind, subject, payload, collected_at=at, **kw)
        return self.ledger.append([self.ledger.sign(st_, key)], logged_at=at)[0].entry_id

    def tamper(self, *statements: tuple[str, dict[str, Any]]) -> None:
        """Raw SQL on the database, its append-only triggers dropped first (what an operator can do)."""
        with self.ledger.engine.begin() as conn:
            _drop_triggers(conn)
            for sql, params in statements:
                conn.execute(sa.text(sql), params)

    def held_size(self) -> int:
        return int((self.home / "checkpoint").read_text().split("\n")[1])


@pytest.fixture(params=["sqlite", "postgres"])
def seeded(request: pytest.FixtureRequest, tmp_path: Path, pg_databases: PgDatabases) -> Iterator[Seeded]:
    """Seed 004 built in a home on SQLite, or on PostgreSQL (must be reachable in CI)."""
    init: Callable[..., Ledger] = Ledger.init
    if request.param == "postgres":
        api_fixtures.require_postgres()
        init = functools.partial(Ledger.init, database_url=pg_databases.new())
    led, _spec, builder = build_fixture_ledger(SEED004, tmp_path / "home", POLICY_DIR, init=init)
    seeded = Seeded(tmp_path / "home", led, {n: e.entry_id for n, e in builder.names.items()}, tmp_path)
    try:
        yield seeded
    finally:
        led.close()


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., CliResult]:
    monkeypatch.setenv("COLUMNS", "200")

    def go(*args: str) -> CliResult:
        capsys.readouterr()
        code = main([str(a) for a in args])
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return go


def _gate(
    run: Callable[..., CliResult], s: Seeded, dep: dict[str, Any] = OK, now: str = NOW, *more: str
) -> CliResult:
    path = s.tmp / "deployment.json"
    path.write_text(json.dumps(dep))
    args = [
        "--home",
        str(s.home),
        "check",
        "routing-change",
        "--deployment",
        str(path),
        "--now",
        now,
        "--json",
    ]
    for k, v in SUBJECT.items():
        args += ["-s", f"{k}={v}"]
    return run(*args, *more)


def _verdict(run: Callable[..., CliResult], s: Seeded) -> CliResult:
    return run("--home", str(s.home), "verdict", "-s", "campaign=router-embed", "--json")


def _refused_as_integrity(r: CliResult, *words: str) -> str:
    """Exit 2 and no answer, the error (``--json``: on stderr) coded ``integrity`` and saying ``words``."""
    assert r.code == 2, r.out + r.err
    assert r.out == "", r.out  # no answer at all: nothing to act on
    error = json.loads(r.err)["error"]
    assert error["code"] == "integrity", r.err
    text = f"{error['message']} (hint: {error['hint']})"
    for w in words:
        assert w in text, (w, text)
    return text


def _revoke_reviewer_from(s: Seeded, effective_at: str) -> None:
    """The reviewer's key (which signed the verdict) was stolen: revoked with effect from ``effective_at``."""
    rec = s.ledger.key_record("reviewer")
    s.append(
        "key.revoke",
        {"key": rec.name},
        {"key_id": rec.key_id, "effective_at": effective_at, "reason": "stolen"},
        s.ledger.cfg.admin_key,
    )


# --- 11. the columns the policy reads are the ones the leaf commits ----------------------------------------


def test_routing_gate_refuses_a_backdated_logged_at_column(
    seeded: Seeded, run: Callable[..., CliResult]
) -> None:
    """The attack of the finding: the verdict was signed by a key revoked from 10:55, so the gate refuses
    it; back-dating the verdict row's ``logged_at`` column to 10:50 made it trusted again — the gate read
    the column. Now the row is refused against its leaf, naming the column and the committed time."""
    s = seeded
    _revoke_reviewer_from(s, REVOKED_FROM)
    s.ledger.checkpoint()
    r = _gate(run, s)
    assert r.code == 1, r.out + r.err
    assert not r.json()["allowed"] and r.json()["verdict"] is None, r.out  # no trusted verdict
    seq = s.seq("verdict")
    s.tamper(
        (
            "UPDATE log_entries SET logged_at = :t WHERE seq = :s",
            {"t": BACKDATED, "s": seq},
        )
    )
    err = _refused_as_integrity(
        _gate(run, s),
        f"entry at seq {seq} ({s.names['verdict'][:16]})",
        f"logged_at '{BACKDATED}' where the log record its leaf commits says '{VERDICT_AT}'",
    )
    assert "ledger verify" in err  # the hint
    # nor through the service (--record), which records nothing
    size = s.ledger.size()
    _refused_as_integrity(_gate(run, s, OK, NOW, "--record"), f"entry at seq {seq}")
    assert s.ledger.size() == size
    # the verdict reads the same row: refused the same way
    _refused_as_integrity(_verdict(run, s), f"entry at seq {seq}", "logged_at")


def test_routing_gate_refuses_a_forward_dated_logged_at_column(
    seeded: Seeded, run: Callable[..., CliResult]
) -> None:
    """Eight days later the verdict is past its 7d bound; a forward-dated column would make it young."""
    s = seeded
    later = "2026-09-18T12:00:00Z"
    r = _gate(run, s, OK, later)
    assert r.code == 1 and not r.json()["allowed"], r.out + r.err
    seq = s.seq("verdict")
    s.tamper(
        (
            "UPDATE log_entries SET logged_at = :t WHERE seq = :s",
            {"t": "2026-09-18T11:00:00.000000Z", "s": seq},
        )
    )
    _refused_as_integrity(
        _gate(run, s, OK, later),
        f"entry at seq {seq}",
        f"logged_at '2026-09-18T11:00:00.000000Z' where the log record its leaf commits says '{VERDICT_AT}'",
    )


def test_routing_gate_refuses_rows_whose_entry_ids_were_swapped(
    seeded: Seeded, run: Callable[..., CliResult]
) -> None:
    """Two rows exchange their entries (id, kind, signer, envelope and index rows), each keeping its seq,
    log time, record and leaf: the verdict would stand at the P2P note's position and time. The record
    at each leaf names the entry that was there."""
    s = seeded
    a, b = s.seq("verdict"), s.seq("p2p-note")
    cols = "entry_id, kind, signer, collected_at, envelope"
    with s.ledger.engine.begin() as conn:
        rows = {
            q: conn.execute(sa.text(f"SELECT {cols} FROM log_entries WHERE seq = :s"), {"s": q}).one()
            for q in (a, b)
        }
    moves: list[tuple[str, dict[str, Any]]] = [
        ("UPDATE log_entries SET entry_id = :t WHERE seq = :s", {"t": "0" * 64, "s": a}),
    ]
    for to, frm in ((b, a), (a, b)):
        r = rows[frm]
        moves.append(
            (
                "UPDATE log_entries SET entry_id=:e, kind=:k, signer=:g, collected_at=:c, envelope=:v"
                " WHERE seq=:s",
                {"e": r[0], "k": r[1], "g": r[2], "c": r[3], "v": bytes(r[4]), "s": to},
            )
        )
    for table in ("entry_subjects", "entry_refs", "entry_artifacts"):
        moves += [
            (f"UPDATE {table} SET seq = -1 WHERE seq = :a", {"a": a}),
            (f"UPDATE {table} SET seq = :a WHERE seq = :b", {"a": a, "b": b}),
            (f"UPDATE {table} SET seq = :b WHERE seq = -1", {"b": b}),
        ]
    s.tamper(*moves)
    # the first swapped row the gate reads names both: the id it shows, the one its leaf's record committed
    # (which of the two it reads first is the gate's read order, not the point: either names the swap)
    text = _refused_as_integrity(_gate(run, s))
    shown = {a: ("p2p-note", "verdict"), b: ("verdict", "p2p-note")}
    assert any(
        f"entry at seq {q}" in text
        and f"entry id '{s.names[now]}' where the log record its leaf commits says '{s.names[was]}'" in text
        for q, (now, was) in shown.items()
    ), text


def test_routing_gate_refuses_a_log_with_a_row_deleted_below_the_held_checkpoint(
    seeded: Seeded, run: Callable[..., CliResult]
) -> None:
    """Deleting the note that records the host's P2P fault would let a multi-GPU service without
    NCCL_P2P_DISABLE through; the log's size is unchanged (the row was not the newest)."""
    s = seeded
    s.append("note", {"host": "another-box"}, {"text": "unrelated"}, "operator")
    s.ledger.checkpoint()
    r = _gate(run, s, P2P_UNSAFE)
    assert r.code == 1 and any("NCCL_P2P_DISABLE" in x for x in r.json()["reasons"]), r.out + r.err
    size, seq = s.ledger.size(), s.seq("p2p-note")
    s.tamper(
        *[
            (f"DELETE FROM {t} WHERE seq = :s", {"s": seq})
            for t in ("entry_subjects", "entry_refs", "log_entries")
        ]
    )
    assert s.ledger.size() == size
    _refused_as_integrity(
        _gate(run, s, P2P_UNSAFE),
        f"is not the one this home holds a signed checkpoint of (size {s.held_size()})",
    )


@given(
    seq=st.integers(min_value=0, max_value=(1 << 60)),
    texts=st.lists(st.text(max_size=40), min_size=4, max_size=4),
)
def test_the_fast_record_leaf_is_the_canonical_records(seq: int, texts: list[str]) -> None:
    """``record_leaf_hex`` writes plain rows directly: byte for byte the leaf of ``LogRecord.to_bytes``."""
    logged_at, entry_id, kind, signer = texts
    try:
        want = LogRecord(seq, logged_at, entry_id, kind, signer).leaf().hex()
    except Exception:
        want = ""
    assert record_leaf_hex(seq, logged_at, entry_id, kind, signer) == want
    plain = ("2026-09-10T11:00:00.000000Z", "ab" * 32, "engine.launch", "0f" * 16)
    if seq < 1 << 53:  # beyond, RFC 8785 cannot write the index: no record, no leaf
        assert record_leaf_hex(seq, *plain) == LogRecord(seq, *plain).leaf().hex()
    else:
        assert record_leaf_hex(seq, *plain) == ""


# --- 12. the log must extend the checkpoint the home holds --------------------------------------------------


def test_the_held_checkpoint_is_checked_with_the_homes_log_key(seeded: Seeded, tmp_path: Path) -> None:
    """The fast reader takes the log's public key from the seed of its PEM (no cryptography
    serialization in a fresh process): the key ``Ledger.held`` checks with, and a held checkpoint of
    another log is refused as the service refuses it."""
    from ledger.errors import ProofError
    from ledger.home import Home
    from ledger.reads import _public_key_of, held_checkpoint_of

    s = seeded
    cfg = Home(s.home).config()
    assert _public_key_of(Home(s.home), cfg.log_key) == s.ledger.log_public_key()
    s.ledger.checkpoint()
    held = held_checkpoint_of(Home(s.home), cfg.origin, cfg.log_key)
    assert held is not None and held == s.ledger.held()
    other = Ledger.init(tmp_path / "other")
    try:
        (s.home / "checkpoint").write_text(other.checkpoint().note)
    finally:
        other.close()
    with pytest.raises(ProofError, match="is not a signed checkpoint of this log"):
        held_checkpoint_of(Home(s.home), cfg.origin, cfg.log_key)


def _rewrite_below_held(s: Seeded) -> None:
    """The thorough forger: the verdict back-dated with a consistent record, leaf and chain from there on,
    every checkpoint row and tile deleted — each row agrees with its leaf, the log is whole by itself."""
    seq = s.seq("verdict")
    with s.ledger.engine.begin() as conn:
        _drop_triggers(conn)
        r = conn.execute(
            sa.text("SELECT entry_id, kind, signer FROM log_entries WHERE seq = :s"), {"s": seq}
        ).one()
        before = conn.execute(sa.text("SELECT logged_at FROM log_entries WHERE seq = :s"), {"s": seq - 1})
        assert before.scalar_one() <= BACKDATED  # the log time never decreases: the log stays whole
        rec = LogRecord(seq, BACKDATED, r.entry_id, r.kind, r.signer)
        conn.execute(
            sa.text("UPDATE log_entries SET logged_at=:t, record=:r, leaf_hash=:l WHERE seq=:s"),
            {"t": rec.logged_at, "r": rec.to_bytes(), "l": rec.leaf().hex(), "s": seq},
        )
        prev = str(
            conn.execute(
                sa.text("SELECT chain_hash FROM log_entries WHERE seq = :s"), {"s": seq - 1}
            ).scalar_one()
        )
        rows = conn.execute(
            sa.text("SELECT seq, entry_id, logged_at FROM log_entries WHERE seq >= :s ORDER BY seq"),
            {"s": seq},
        ).all()
        for q, eid, at in rows:
            ch = chain_hash(int(q), str(eid), prev, str(at))
            conn.execute(
                sa.text("UPDATE log_entries SET prev_hash=:p, chain_hash=:c WHERE seq=:s"),
                {"p": prev, "c": ch, "s": q},
            )
            prev = ch
        conn.execute(sa.text("DELETE FROM checkpoints"))
        conn.execute(sa.text("DELETE FROM tiles"))


def _truncate_newest(s: Seeded) -> None:
    s.tamper(
        *[
            (f"DELETE FROM {t} WHERE seq = (SELECT max(seq) FROM log_entries)", {})
            for t in ("entry_subjects", "entry_refs", "entry_artifacts")
        ],
        ("DELETE FROM log_entries WHERE seq = (SELECT max(seq) FROM (SELECT seq FROM log_entries) AS m)", {}),
        ("DELETE FROM checkpoints", {}),
        ("DELETE FROM tiles", {}),
    )


@pytest.mark.parametrize("how", ["rewritten", "truncated"])
def test_routing_check_refuses_a_log_that_disagrees_with_the_held_checkpoint(
    seeded: Seeded, run: Callable[..., CliResult], how: str
) -> None:
    """rewritten: the verdict back-dated before its key's revocation, every row consistent with its leaf
    (the per-row check alone passes it); truncated: the newest entry — the supersession that withdrew the
    verdict's benchmark — deleted with every checkpoint row and tile. Only the checkpoint the home holds,
    outside the database, still says what the log was; the gate and the verdict refuse the log."""
    s = seeded
    if how == "rewritten":
        _revoke_reviewer_from(s, REVOKED_FROM)
    else:
        s.append(
            "supersession",
            {"campaign": "router-embed"},
            {"reason": "benchmark rerun was mislabelled"},
            "operator",
            refs=[("supersedes", s.names["benchmark"])],
        )
    s.ledger.checkpoint()
    held, size = s.held_size(), s.ledger.size()
    assert held == size
    r = _gate(run, s)
    assert r.code == 1 and not r.json()["allowed"], r.out + r.err
    if how == "rewritten":
        _rewrite_below_held(s)
        assert s.ledger.verify(anchor=False)  # whole by itself
        words = [
            "the log is not the one this home holds a signed checkpoint of: "
            f"its first {held} entries hash to root",
            "an entry before it was rewritten or removed",
        ]
    else:
        _truncate_newest(s)
        words = [
            f"the log has {size - 1} entries; this home holds a signed checkpoint of size {held}: 1 entries"
        ]
    _refused_as_integrity(_gate(run, s), *words)
    _refused_as_integrity(_verdict(run, s), *words)
    assert s.held_size() == held  # nothing moved the anchor to the altered log
    # the held checkpoint is what tells: without it the altered log would be judged (and allowed)
    (s.home / "checkpoint").unlink()
    r = _gate(run, s)
    assert r.code == 0 and r.json()["allowed"], r.out + r.err


def test_routing_check_allows_an_honest_log_grown_past_the_held_checkpoint(
    seeded: Seeded, run: Callable[..., CliResult]
) -> None:
    """The home holds a checkpoint over a full stored tile (300 more entries); the log grows past it: the
    tree at the held size, from the tiles and the leaves after them, is the held root — allowed."""
    s = seeded
    at = parse_time("2026-09-10T12:00:00Z")
    envs = [
        s.ledger.sign(
            s.ledger.make_statement("note", {"host": "another-box"}, {"text": f"n{i}"}, collected_at=at),
            "operator",
        )
        for i in range(300)
    ]
    s.ledger.append(envs, logged_at=at)
    s.ledger.checkpoint()
    held_note = (s.home / "checkpoint").read_text()
    held = s.held_size()
    assert held > 256
    s.append("note", {"host": "another-box"}, {"text": "later"}, "operator")
    s.ledger.checkpoint()  # the home would hold the newer one: hold the older one again
    (s.home / "checkpoint").write_text(held_note)
    assert s.ledger.size() > held == s.held_size()
    r = _gate(run, s)
    assert r.code == 0 and r.json()["allowed"], r.out + r.err
    r = _verdict(run, s)
    assert r.code == 0 and r.json()["verdict"] == "QUALIFIED", r.out + r.err


def test_the_api_verdict_and_verdict_replay_refuse_a_truncated_log(
    seeded: Seeded, run: Callable[..., CliResult]
) -> None:
    """Regression: the CLI's verdict and routing check refused a log truncated below the held checkpoint,
    but the service's verdict (what the HTTP API answers with) and `verdict replay` judged it."""
    from ledger.errors import IntegrityError

    s = seeded
    s.append("note", {"campaign": "router-embed"}, {"text": "a later note"}, "operator")
    s.ledger.checkpoint()
    recorded = s.ledger.query(kind="verdict", limit=1, descending=True)[0].entry_id
    assert s.ledger.evaluate_verdict({"campaign": "router-embed"})["verdict"]
    assert s.ledger.replay_verdict(recorded)
    _truncate_newest(s)
    with pytest.raises(IntegrityError, match="entries it saw are gone"):
        s.ledger.evaluate_verdict({"campaign": "router-embed"})
    with pytest.raises(IntegrityError, match="entries it saw are gone"):
        s.ledger.replay_verdict(recorded)
    r = run("verdict", "replay", recorded, "--home", str(s.home))
    assert r.code == 2 and "error[integrity]" in r.err, r.out + r.err
