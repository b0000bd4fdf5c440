"""The sequencer (issue 12): checks outside the lock, only ordering inside, group commit.

Each test queues requests while it stands as the caller committing a group, then lets go: the next caller
to lead appends every queued request in one transaction, so the groups are deterministic. SQLite and
PostgreSQL alike; named after issue 12's throughput finding ("signature checks, key folding and ~8 round
trips sit inside the global lock").
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from ledger.entries import parse_time
from ledger.errors import (
    DanglingRefError,
    KeyRevokedError,
    LedgerError,
    LogTimeBackwardsError,
    SignatureError,
    StorageError,
    UnknownSignerError,
)
from ledger.logged import LoggedEntry
from ledger.service import Ledger
from ledger.signing import Envelope, SigningKey
from tests.reliability import api_fixtures
from tests.reliability.api_fixtures import LEDGER_BIN, PgDatabases, make_deployment, start_server

pg_databases = api_fixtures.pg_databases


@pytest.fixture(params=["sqlite", "postgres"])
def led(request: pytest.FixtureRequest, tmp_path: Path, pg_databases: PgDatabases) -> Iterator[Ledger]:
    if request.param == "postgres":
        api_fixtures.require_postgres()
        url = pg_databases.new()
    else:
        url = f"sqlite:///{tmp_path / 'home' / 'ledger.db'}"
    ledger = Ledger.init(tmp_path / "home", database_url=url)
    ledger.new_key("hostA", ["collector"])
    ledger.new_key("hostB", ["collector"])
    yield ledger
    ledger.close()


def _note(led: Ledger, text: str, key: str = "hostA", **kw: Any) -> Envelope:
    return led.sign(led.make_statement("note", {"campaign": "seq"}, {"text": text}, **kw), key)


class _Counting:
    """Counts the sequencer's transactions a ledger opens."""

    def __init__(self, led: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
        self.n = 0
        inner = led.repo.sequence

        @contextmanager
        def counted(ids: Any, tokens: Any = (), keys_from: Any = None) -> Iterator[Any]:
            self.n += 1
            with inner(ids, tokens, keys_from) as opened:
                yield opened

        monkeypatch.setattr(led.repo, "sequence", counted)


@contextmanager
def _leading(led: Ledger) -> Iterator[None]:
    """Act as the caller committing a group: appends queue meanwhile; on exit the next one leads them all."""
    with led._sequencer:
        led._leading = True
    try:
        yield
    finally:
        with led._sequencer:
            led._leading = False
            led._sequencer.notify_all()


def _grouped(
    led: Ledger, calls: list[Callable[[], list[LoggedEntry]]]
) -> list[list[LoggedEntry] | LedgerError]:
    """Run the calls in threads while a group is being committed, wait until all are queued, let go."""
    out: list[list[LoggedEntry] | LedgerError | None] = [None] * len(calls)

    def run(i: int) -> None:
        try:
            out[i] = calls[i]()
        except LedgerError as e:
            out[i] = e

    with _leading(led):
        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
        for i, t in enumerate(threads):
            t.start()
            deadline = time.monotonic() + 30
            while len(led._pending) < i + 1 and out[i] is None:  # queued in this order (or refused before)
                assert time.monotonic() < deadline, "a request never reached the queue"
                time.sleep(0.005)
    for t in threads:
        t.join(60)
    assert all(o is not None for o in out)
    return out  # type: ignore[return-value]


def test_signatures_outside_the_lock_group_commit_one_transaction(
    led: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sixteen concurrent appends: one transaction, contiguous indexes, each its own entry and receipt."""
    base = led.size()
    led.record("note", {"campaign": "seq"}, {"text": "warm the keys"}, key="hostA")
    envs = [_note(led, f"#{i}", key="hostA" if i % 2 else "hostB") for i in range(16)]
    counting = _Counting(led, monkeypatch)
    got = _grouped(led, [lambda e=e: led.append([e]) for e in envs])
    assert counting.n == 1  # one group, one transaction (plus none for the checkpoint: not due yet)
    seqs = []
    for env, res in zip(envs, got, strict=True):
        assert isinstance(res, list), res
        (entry,) = res
        assert entry.envelope == env.canonical() and not entry.duplicate
        receipt = led.receipt(entry).to_json()
        assert receipt["entry_id"] == entry.entry_id and receipt["index"] == entry.seq
        seqs.append(entry.seq)
    assert seqs == list(range(base + 1, base + 17))  # the queue's order
    assert led.verify()


def test_a_bad_signature_by_a_known_key_is_refused_before_the_lock(led: Ledger) -> None:
    """The signature is checked before ordering: a forged envelope is refused while another holds the lock."""
    led.record("note", {"campaign": "seq"}, {"text": "warm the keys"}, key="hostA")
    good, other = _note(led, "genuine"), _note(led, "signed by another key", key="hostB")
    forged = Envelope(good.payload_type, good.payload, ((good.signer, other.signatures[0][1]),))
    with _leading(led):
        with pytest.raises(SignatureError):
            led.append([forged])
        assert not led._pending


def test_a_bad_request_in_a_group_does_not_sink_the_others(led: Ledger) -> None:
    """Refused in the lock, each alone: a dangling ref, a revoked key, an earlier given time, an unknown
    signer (not checkable before ordering); the good requests of the same group commit around them."""
    led.record("note", {"campaign": "seq"}, {"text": "warm the keys"}, key="hostA")
    head = led.get_seq(led.size() - 1)
    base = led.size()
    stranger = SigningKey.generate("stranger")
    calls: list[Callable[[], list[LoggedEntry]]] = [
        lambda: led.append([_note(led, "good 1")]),
        lambda: led.append([_note(led, "dangling", refs=[("about", "ab" * 32)])]),
        lambda: led.append([_note(led, "good 2", key="hostB")]),
        lambda: led.append(
            [_note(led, "early")], logged_at=parse_time(head.logged_at) - timedelta(seconds=1)
        ),
        lambda: led.append(
            [led.sign(led.make_statement("note", {"campaign": "seq"}, {"text": "?"}), stranger)]
        ),
        # a batch whose second entry fails is refused whole; its first entry is not stored
        lambda: led.append([_note(led, "batch ok"), _note(led, "batch bad", refs=[("about", "cd" * 32)])]),
        lambda: led.append([_note(led, "good 3")]),
    ]
    got = _grouped(led, calls)
    assert isinstance(got[1], DanglingRefError)
    assert isinstance(got[3], LogTimeBackwardsError)
    assert isinstance(got[4], UnknownSignerError)
    assert isinstance(got[5], DanglingRefError)
    good = [got[0], got[2], got[6]]
    assert all(isinstance(g, list) for g in good)
    assert [g[0].seq for g in good if isinstance(g, list)] == [base, base + 1, base + 2]
    assert led.size() == base + 3
    # a revoked key in a group: revoked by an earlier request of the same group
    led.revoke_key("hostB", reason="leaked")
    got = _grouped(led, [lambda: led.append([_note(led, "after revoke", key="hostB")])])
    assert isinstance(got[0], KeyRevokedError)
    assert led.verify()


def test_a_key_enrolled_earlier_in_the_group_signs_later_in_it(led: Ledger) -> None:
    """The keys are those as of each position: a key enrolled by an earlier request of the group may sign
    a later one (its signature, unknown before ordering, is verified in the lock); before it, it may not."""
    new = SigningKey.generate("hostC")
    led.keep_key(new)
    enrol = led.sign(
        led.make_statement(
            "key.enrol",
            {"key": "hostC"},
            {"name": "hostC", "public_key": new.public.b64, "key_id": new.key_id, "roles": ["collector"]},
        ),
        led.admin_key_name,
    )
    early, late = _note(led, "too early", key="hostC"), _note(led, "enrolled", key="hostC")
    got = _grouped(
        led, [lambda: led.append([early]), lambda: led.append([enrol]), lambda: led.append([late])]
    )
    assert isinstance(got[0], UnknownSignerError)
    assert isinstance(got[1], list) and isinstance(got[2], list)
    assert got[2][0].seq == got[1][0].seq + 1
    assert led.signer_name(new.key_id) == "hostC"
    assert led.verify()


def test_the_same_envelope_twice_in_a_group_is_one_entry(led: Ledger) -> None:
    env = _note(led, "sent twice")
    got = _grouped(led, [lambda: led.append([env]), lambda: led.append([env])])
    assert isinstance(got[0], list) and isinstance(got[1], list)
    assert got[1][0].duplicate and got[1][0].seq == got[0][0].seq and not got[0][0].duplicate
    assert led.verify()


def _bad_between_two(led: Ledger, bad: Envelope, base: int) -> list[list[LoggedEntry] | LedgerError]:
    """One group of three appends, the middle one ``bad``: it alone is refused (StorageError)."""
    got = _grouped(
        led,
        [
            lambda: led.append([_note(led, "a")]),
            lambda: led.append([bad]),
            lambda: led.append([_note(led, "b")]),
        ],
    )
    assert isinstance(got[1], StorageError)
    assert isinstance(got[0], list) and isinstance(got[2], list)
    assert [got[0][0].seq, got[2][0].seq] == [base, base + 1]
    return got


def test_a_database_refusal_sinks_only_its_own_request(led: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    """When the database refuses a group, each request is retried in its own transaction."""
    bad = _note(led, "the database refuses this one")
    bad_id = led._prepare(bad).entry_id
    insert = led.repo.insert

    def refusing(conn: sa.Connection, rows: list[dict[str, Any]], *rest: Any, **kw: Any) -> None:
        if any(r["entry_id"] == bad_id for r in rows):
            raise sa.exc.IntegrityError("INSERT", {}, Exception("refused"))
        insert(conn, rows, *rest, **kw)

    monkeypatch.setattr(led.repo, "insert", refusing)
    _bad_between_two(led, bad, led.size())
    monkeypatch.undo()
    assert led.verify()


def test_many_threads_appending_one_contiguous_chain(led: Ledger, tmp_path: Path) -> None:
    """Free-running threads (no held lock): contiguous indexes, every call its own entry, `ledger verify`."""
    base = led.size()

    def writer(i: int) -> list[int]:
        seqs = []
        for n in range(10):
            env = _note(led, f"w{i} n{n}", key="hostA" if i % 2 else "hostB")
            (e,) = led.append([env])
            assert e.envelope == env.canonical()
            seqs.append(e.seq)
        return seqs

    with ThreadPoolExecutor(12) as pool:
        seqs = sorted(s for chunk in pool.map(writer, range(12)) for s in chunk)
    assert seqs == list(range(base, base + 120))
    out = subprocess.run(
        [LEDGER_BIN, "--home", str(led.home_path), "verify", "--json"],
        check=False,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("backend", api_fixtures.BACKENDS)
def test_http_ingest_concurrent_collectors_verify_green(
    backend: str, tmp_path: Path, pg_databases: PgDatabases
) -> None:
    """Eight collectors, one entry per request, against `ledger serve`: each its own receipt, no gaps,
    `ledger verify` green."""
    dep = make_deployment(backend, tmp_path / "home", pg_databases)
    srv = start_server(dep.home)
    start = dep.ledger.size()
    try:

        def collector(i: int) -> list[tuple[int, str]]:
            got = []
            with httpx.Client(base_url=srv.url, timeout=60, headers=dep.headers("writer")) as c:
                for n in range(15):
                    env = dep.sign("note", {"campaign": "ingest", "collector": str(i)}, {"text": f"{i}/{n}"})
                    r = c.post("/v1/entries", json=env)
                    assert r.status_code == 201, r.text
                    doc = r.json()
                    assert doc["receipt"]["entry_id"] == doc["id"] and doc["receipt"]["index"] == doc["seq"]
                    assert doc["signer_name"] == "collector1"
                    got.append((doc["seq"], doc["id"]))
            return got

        with ThreadPoolExecutor(8) as pool:
            got = [g for chunk in pool.map(collector, range(8)) for g in chunk]
        assert sorted(s for s, _ in got) == list(range(start, start + 120))
        assert len({i for _, i in got}) == 120
    finally:
        srv.stop()
    out = subprocess.run(
        [LEDGER_BIN, "--home", str(dep.home), "verify", "--json"], check=False, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr
    dep.ledger.close()


# --- Ledger.submit: the sequencer's own thread, the writer's token checked as the group commits ---------


class _Answers:
    """Collects the requests ``Ledger.submit`` answers (from the sequencer's thread)."""

    def __init__(self) -> None:
        self.got: list[Any] = []
        self._cv = threading.Condition()

    def __call__(self, req: Any) -> None:
        with self._cv:
            self.got.append(req)
            self._cv.notify_all()

    def wait(self, n: int) -> list[Any]:
        with self._cv:
            assert self._cv.wait_for(lambda: len(self.got) >= n, timeout=60), "an answer never came"
            return list(self.got)


def test_submitted_and_appended_batches_commit_in_one_group(
    led: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches submitted without waiting (the HTTP server's way) and ``append`` callers share a group."""
    led.record("note", {"campaign": "seq"}, {"text": "warm the keys"}, key="hostA")
    base = led.size()
    counting = _Counting(led, monkeypatch)
    answers = _Answers()
    subs = [_note(led, f"submitted {i}") for i in range(4)]
    apps = [_note(led, f"appended {i}") for i in range(4)]
    appended: list[list[LoggedEntry]] = []
    with _leading(led):
        for env in subs:
            led.submit([env], answers)
        threads = [threading.Thread(target=lambda e=e: appended.append(led.append([e]))) for e in apps]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while len(led._pending) < len(subs) + len(apps):
            assert time.monotonic() < deadline, "a request never reached the queue"
            time.sleep(0.005)
    done = answers.wait(len(subs))
    for t in threads:
        t.join(60)
    assert counting.n == 1  # one transaction for all eight
    assert [r.answer()[0].envelope for r in done] == [e.canonical() for e in subs]
    assert {g[0].envelope for g in appended} == {e.canonical() for e in apps}
    seqs = sorted([e.seq for r in done for e in r.answer()] + [g[0].seq for g in appended])
    assert seqs == list(range(base, base + 8))
    assert led.verify()


def test_a_token_revoked_while_its_write_waits_for_the_group_writes_nothing(led: Ledger) -> None:
    """The writer's token is checked in the group's transaction: revoked after the request was checked
    and queued but before the commit, the write is refused and nothing is stored."""
    from ledger.errors import AuthError
    from ledger.tokens import token_digest

    token, _ = led.create_token("ci-writer", "writer")
    other, _ = led.create_token("other-writer", "writer")
    base = led.size()
    answers = _Answers()
    with _leading(led):
        led.submit([_note(led, "sent before the revocation")], answers, token=token_digest(token))
        led.submit([_note(led, "by a live token")], answers, token=token_digest(other))
        led.revoke_token("ci-writer")
    refused, kept = answers.wait(2)
    with pytest.raises(AuthError, match="'ci-writer' was revoked"):
        refused.answer()
    assert kept.answer()[0].seq == base and kept.token_record.name == "other-writer"
    assert led.size() == base + 1


@pytest.mark.parametrize(
    ("role", "error"), [("reader", "has role reader; this needs writer"), (None, "unknown bearer token")]
)
def test_a_submitted_write_needs_a_live_writer_token_at_commit(
    led: Ledger, role: str | None, error: str
) -> None:
    from ledger.tokens import token_digest

    token = led.create_token("t", role)[0] if role else "elt_never-issued"
    base = led.size()
    answers = _Answers()
    led.submit([_note(led, "refused")], answers, token=token_digest(token))
    (req,) = answers.wait(1)
    with pytest.raises(LedgerError, match=error):
        req.answer()
    assert led.size() == base


def test_a_write_token_is_checked_before_the_body_is_judged(led: Ledger, tmp_path: Path) -> None:
    """The commit-time token check keeps the order every write has: an unknown or missing token gets
    401 even when the body is malformed, and a reader's 403; only a writer learns what is wrong with it."""
    server = start_server(led.home.path)
    try:
        writer, _ = led.create_token("w", "writer")
        reader, _ = led.create_token("r", "reader")
        with httpx.Client(base_url=server.url, timeout=30) as c:
            bad = {"payloadType": "nope"}
            cases = {
                "elt_unknown": 401,
                reader: 403,
                writer: 400,
            }
            for token, status in cases.items():
                r = c.post("/v1/entries", json=bad, headers={"Authorization": f"Bearer {token}"})
                assert r.status_code in ({status} if status != 400 else {400, 422}), (token, r.text)
            assert c.post("/v1/entries", content=b"{not json").status_code == 401
            r = c.post("/v1/entries", content=b"{not json", headers={"Authorization": "Bearer elt_x"})
            assert r.status_code == 401
    finally:
        server.stop()


def test_a_replica_brings_its_cached_keys_up_in_the_sequencers_round_trip(
    led: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes on one database: the keys another replica enrolled or revoked since this one's
    cache are read with the head (no second fold from the database), and decide at once: a key
    enrolled there signs here, a key revoked there is refused here."""
    other = Ledger.open(led.home.path)
    try:
        other.record("note", {"campaign": "seq"}, {"text": "cache the keys"}, key="hostA")  # cache warm
        led.new_key("hostC", ["collector"])  # enrolled by the first replica
        led.revoke_key("hostB", reason="stolen laptop")
        led.record("note", {"campaign": "seq"}, {"text": "and more"}, key="hostA")

        def no_fold(*_a: Any, **_k: Any) -> Any:
            raise AssertionError("the keys were folded again from the database")

        monkeypatch.setattr(other, "keyring", no_fold)
        (entry,) = other.append([_note(led, "by the new key", key="hostC")])
        assert entry.seq == led.size() - 1
        with pytest.raises(KeyRevokedError):
            other.append([_note(led, "by the revoked key", key="hostB")])
        monkeypatch.undo()
        assert other.verify()
    finally:
        other.close()


def test_a_replica_whose_cached_keys_are_no_prefix_of_the_log_folds_them_again(
    led: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cache's chain hash no longer matches the log (a rollback or failover): the keys read in the
    round trip are not trusted; the keyring is folded again from the database."""
    other = Ledger.open(led.home.path)
    try:
        other.record("note", {"campaign": "seq"}, {"text": "cache the keys"}, key="hostA")
        led.record("note", {"campaign": "seq"}, {"text": "another replica's"}, key="hostA")
        other._keyring_chain = "0" * 64  # as if the entry the cache ended at were another log's
        folds: list[int] = []
        real = other.keyring
        monkeypatch.setattr(other, "keyring", lambda *a, **k: folds.append(1) or real(*a, **k))
        other.append([_note(led, "after the failover")])
        assert folds, "a cache that is no prefix of the log was brought up instead of folded again"
    finally:
        other.close()


def test_a_refusal_at_commit_sinks_only_its_own_request_on_postgres(
    tmp_path: Path, pg_databases: PgDatabases
) -> None:
    """On PostgreSQL the group's COMMIT goes in the INSERTs' round trip: a refusal that comes only at
    COMMIT (here a deferred constraint trigger refusing one entry) still sinks only its own request —
    nothing of the group is half stored, the others are retried alone and committed."""
    api_fixtures.require_postgres()
    led = Ledger.init(tmp_path / "home", database_url=pg_databases.new())
    try:
        led.new_key("hostA", ["collector"])
        bad = _note(led, "refused at commit")
        bad_id = led._prepare(bad).entry_id
        with led.engine.begin() as conn:
            conn.exec_driver_sql(
                "CREATE FUNCTION refuse_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                f"IF NEW.entry_id = '{bad_id}' THEN RAISE EXCEPTION 'refused at commit'; END IF; "
                "RETURN NULL; END $$"
            )
            conn.exec_driver_sql(
                "CREATE CONSTRAINT TRIGGER refuse_at_commit AFTER INSERT ON log_entries "
                "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_at_commit()"
            )
        base = led.size()
        got = _bad_between_two(led, bad, base)
        assert "refused at commit" in str(got[1])
        assert led.size() == base + 2
        assert led.verify()
    finally:
        led.close()


def test_close_commits_what_was_submitted_and_ends_the_sequencers_thread(tmp_path: Path) -> None:
    """``Ledger.close`` lets the sequencer's thread commit and answer every queued batch, then ends it;
    a batch submitted after that is refused, never queued unanswered."""
    led = Ledger.init(tmp_path / "home")
    led.new_key("hostA", ["collector"])
    answers = _Answers()
    base = led.size()
    with _leading(led):  # queue them all while a group "commits"
        for i in range(5):
            led.submit([_note(led, f"queued {i}")], answers)
    led.close()
    got = answers.wait(5)
    assert [r.answer()[0].seq for r in got] == list(range(base, base + 5))
    assert led._committer is not None and not led._committer.is_alive()
    with pytest.raises(StorageError, match="closing"):
        led.submit([_note(led, "too late")], answers)
    reopened = Ledger.open(tmp_path / "home")
    try:
        assert reopened.size() == base + 5 and reopened.verify()
    finally:
        reopened.close()


class _Crash(BaseException):
    """Not an Exception: ends the thread it is raised in (as KeyboardInterrupt would)."""


def test_a_sequencer_thread_that_died_is_started_again_and_no_submission_waits_forever(
    led: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = led._commit
    calls = []

    def crash_once(group: Any) -> bool:
        calls.append(len(group))
        if len(calls) == 1:
            raise _Crash("the sequencer's thread ends")
        return real(group)

    monkeypatch.setattr(led, "_commit", crash_once)
    answers = _Answers()
    base = led.size()
    led.submit([_note(led, "in the crashed group")], answers)
    (first,) = answers.wait(1)
    with pytest.raises(_Crash):
        first.answer()
    assert led._committer is not None
    led._committer.join(30)
    assert not led._committer.is_alive()
    led.submit([_note(led, "after the crash")], answers)
    second = answers.wait(2)[1]
    assert second.answer()[0].seq == base
