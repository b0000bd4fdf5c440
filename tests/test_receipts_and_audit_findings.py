"""Audit 6: receipts, `ledger audit`, tile caching, bundle indexes and proofs from size 0, as regressions.

1. `ledger audit --server URL` checked nothing when the server named another origin (its log wiped and
   re-initialised on the same URL), exit 0, even with --public-key pinned: the origin came from the server.
   Now the audited log is the pinned one (--public-key, else the key the home recorded for the server),
   else the one the receipts name; a server serving another log, and every receipt whose entry it lost,
   is a problem. Receipts of other logs are set aside and named; when all are, the audit is not ok.
2. Remote collectors kept whatever receipt the server returned (none, or another entry's). Now a receipt
   must verify under the log key (pinned by LEDGER_LOG_VKEY, or recorded on first use in
   HOME/log-keys.json) and name the entry sent; otherwise the entry stays in the spool and the command fails.
3. Token-protected tiles and entry bundles were `Cache-Control: public`; they are `private` now.
4. An entry-bundle index past SQLite's INTEGER answered 500 (OverflowError); it is a 404.
5. `ledger proof consistency 0 N` wrote a proof `ledger proof verify` refused (size 0 is consistent with
   every tree, by an empty proof).
6. `ledger audit` printed a literal `[red]problem[/]`.
7. `ledger verify --receipts` did not exist: it runs the receipts check `ledger audit` runs.

Each test has its neighbour: the honest case still passes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from ledger.api.app import create_app
from ledger.api.settings import ApiSettings
from ledger.collectors.remote import LedgerClient, LogKeys, RemoteRecorder, Spool, push_spool
from ledger.errors import ConfigError, EntryNotFoundError, ProofError, ReceiptMismatchError
from ledger.log import _EMPTY_ROOT, merkle_root, verify_consistency
from ledger.proofs import RECEIPTS_UNCHECKED, audit_receipts, audit_server, check_receipt
from ledger.service import Ledger
from ledger.tiles import tile_path
from ledger.tokens import create_token
from tests.conftest import CliResult
from tests.reliability.api_fixtures import free_port, start_server
from tests.reliability.test_receipts import _drop_triggers

Cli = Callable[..., CliResult]
Answers = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]


def _ok(r: CliResult) -> CliResult:
    assert r.code == 0, r.out + r.err
    return r


# --- an in-process ledger server for the remote recorder ------------------------------------------------


class InProcessServer(LedgerClient):
    """A ``LedgerClient`` whose server is a ledger in this process; ``answers`` may rewrite what an append
    returns (a dishonest front end)."""

    def __init__(self, server: Ledger, answers: Answers | None = None, url: str = "http://log.test") -> None:
        super().__init__(url)
        self.led = server
        self.answers = answers

    def checkpoint(self) -> dict[str, Any]:
        cp = self.led.served_checkpoint()
        return {
            **cp.to_json(),
            "log_public_key": self.led.log_public_key().b64,
            "log_vkey": self.led.verifier_key(),
        }

    def append(self, envelopes: Any) -> list[dict[str, Any]]:
        logged = self.led.append(list(envelopes))
        out = [
            {
                "id": e.entry_id,
                "seq": e.seq,
                "duplicate": e.duplicate,
                "receipt": self.led.receipt(e).to_json(),
            }
            for e in logged
        ]
        return self.answers(out) if self.answers else out

    def inclusion(self, entry_id: str) -> dict[str, Any] | None:
        try:
            return self.led.inclusion(entry_id)
        except EntryNotFoundError:
            return None


@pytest.fixture
def logs(tmp_path: Path) -> Iterator[tuple[Ledger, Ledger]]:
    """(the server's ledger, a GPU host's home whose key gpu01 the server trusts as a collector)."""
    server = Ledger.init(tmp_path / "server")
    host = Ledger.init(tmp_path / "gpu-host")
    host.new_key("gpu01", ["collector"])
    server.enrol_key("gpu01", host.signing_key("gpu01").public.b64, ["collector"])
    yield server, host
    host.close()
    server.close()


def _recorder(host: Ledger, client: LedgerClient) -> RemoteRecorder:
    rec = RemoteRecorder(host, "gpu01", server=client.server)
    rec.client.close()
    rec.client = client
    return rec


def _kept(host: Ledger, origin: str) -> list[str]:
    return [r["entry_id"] for r in host.home.receipts() if r["origin"] == origin]


def _spooled(host: Ledger) -> list[str]:
    return [p.stem.split("-", 1)[1] for p in Spool(host.spool_dir).entry_files()]


def test_a_collector_keeps_a_receipt_it_checked(logs: tuple[Ledger, Ledger]) -> None:
    """The neighbour: an honest server's receipt is checked and kept; the key it was checked under is the
    one the server named on first use, recorded in HOME/log-keys.json."""
    server, host = logs
    rec = _recorder(host, InProcessServer(server))
    ids = [rec.record("note", {"campaign": "c"}, {"text": f"#{i}"}) for i in range(2)]
    assert _kept(host, server.origin) == ids and not _spooled(host)
    recorded = json.loads((host.home_path / "log-keys.json").read_text())
    assert recorded["http://log.test"]["vkey"] == server.verifier_key()
    assert recorded["http://log.test"]["how"] == "first use"


def test_a_collector_refuses_an_append_without_a_receipt(logs: tuple[Ledger, Ledger]) -> None:
    server, host = logs

    def drop(answers: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in a.items() if k != "receipt"} for a in answers]

    rec = _recorder(host, InProcessServer(server, drop))
    with pytest.raises(ReceiptMismatchError, match="no receipt for entry") as e:
        rec.record("note", {"campaign": "c"}, {"text": "dropped receipt"})
    assert "stays in the spool" in e.value.message
    [entry_id] = _spooled(host)  # not lost: `ledger push` sends it again
    assert rec.spooled == [entry_id] and not _kept(host, server.origin)
    # the honest server's answer to the re-sent entry (a duplicate) carries its receipt: kept, spool empty
    report = push_spool(host, server="http://log.test", token=None, client=InProcessServer(server))
    assert (report.delivered, report.duplicates, report.remaining) == (0, 1, 0)
    assert _kept(host, server.origin) == [entry_id]


def test_a_collector_refuses_a_receipt_for_another_entry(logs: tuple[Ledger, Ledger]) -> None:
    """A genuine, log-signed receipt, but of an earlier entry: refused, the entry spooled."""
    server, host = logs
    first: list[dict[str, Any]] = []

    def swap(answers: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not first:
            first.append(answers[0]["receipt"])
            return answers
        return [{**a, "receipt": first[0]} for a in answers]

    rec = _recorder(host, InProcessServer(server, swap))
    honest = rec.record("note", {"campaign": "c"}, {"text": "first"})
    with pytest.raises(ReceiptMismatchError, match=f"names another entry, {honest}"):
        rec.record("note", {"campaign": "c"}, {"text": "second"})
    [second] = _spooled(host)
    assert _kept(host, server.origin) == [honest]
    # the next record pushes the spool first: the same lie refuses it again, and the new entry is spooled
    with pytest.raises(ReceiptMismatchError):
        rec.record("note", {"campaign": "c"}, {"text": "third"})
    assert _spooled(host)[0] == second and len(_spooled(host)) == 2


def test_push_refuses_a_receipt_for_another_entry(logs: tuple[Ledger, Ledger]) -> None:
    """`ledger push`: a batch whose receipts are wrong stays in the spool; an honest push delivers it."""
    server, host = logs
    url = f"http://127.0.0.1:{free_port()}"  # down while the entries are recorded: spooled for it
    offline = RemoteRecorder(host, "gpu01", server=url)
    ids = [offline.record("note", {"campaign": "c"}, {"text": f"offline {i}"}) for i in range(2)]
    offline.close()
    assert _spooled(host) == ids

    def reversed_receipts(answers: list[dict[str, Any]]) -> list[dict[str, Any]]:
        receipts = [a["receipt"] for a in answers][::-1]
        return [{**a, "receipt": r} for a, r in zip(answers, receipts, strict=True)]

    with pytest.raises(ReceiptMismatchError, match="names another entry"):
        push_spool(host, server=url, token=None, client=InProcessServer(server, reversed_receipts, url))
    assert _spooled(host) == ids and not _kept(host, server.origin)
    report = push_spool(host, server=url, token=None, client=InProcessServer(server, url=url))
    assert report.remaining == 0 and _kept(host, server.origin) == ids


def test_a_collector_refuses_receipts_of_a_log_key_it_does_not_trust(
    logs: tuple[Ledger, Ledger], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pinned key (LEDGER_LOG_VKEY), or the one recorded on first use: a server whose log now has
    another key is refused, and the pin must agree with what the home recorded."""
    server, host = logs
    other = Ledger.init(tmp_path / "other")
    try:
        monkeypatch.setenv("LEDGER_LOG_VKEY", other.verifier_key())
        rec = _recorder(host, InProcessServer(server))
        with pytest.raises(ReceiptMismatchError, match="not one the log signed"):
            rec.record("note", {"campaign": "c"}, {"text": "pinned elsewhere"})
        assert len(_spooled(host)) == 1
        assert LogKeys(host.home_path).get("http://log.test") == other.verifier_key()
        monkeypatch.setenv("LEDGER_LOG_VKEY", server.verifier_key())  # not the key the home recorded
        with pytest.raises(ConfigError, match="recorded the key"):
            _recorder(host, InProcessServer(server)).record("note", {"campaign": "c"}, {"text": "x"})
        monkeypatch.delenv("LEDGER_LOG_VKEY")
        (host.home_path / "log-keys.json").unlink()  # the operator lets the home trust the server again
        rec = _recorder(host, InProcessServer(server))
        rec.record("note", {"campaign": "c"}, {"text": "trusted on first use"})
        assert not _spooled(host) and len(_kept(host, server.origin)) == 3
    finally:
        other.close()


def test_check_receipt_names_what_is_wrong(logs: tuple[Ledger, Ledger]) -> None:
    server, _host = logs
    e = server.record("note", {"campaign": "c"}, {"text": "x"}, key="admin")
    doc = server.receipt(e).to_json()
    assert check_receipt(doc, server.verifier_key(), e.entry_id).record.entry_id == e.entry_id
    assert check_receipt(doc, server.log_public_key().b64, e.entry_id, origin=server.origin)
    with pytest.raises(ReceiptMismatchError, match="no receipt"):
        check_receipt(None, server.verifier_key(), e.entry_id)
    with pytest.raises(ReceiptMismatchError, match="not one the log signed"):
        check_receipt({**doc, "index": doc["index"] + 1}, server.verifier_key(), e.entry_id)
    with pytest.raises(ReceiptMismatchError, match="names another entry"):
        check_receipt(doc, server.verifier_key(), "0" * 64)


# --- 1. audit --server of a server whose log was replaced ---------------------------------------------


@pytest.fixture
def served_collector(
    tmp_path: Path, home: Path, cli: Cli
) -> Iterator[tuple[str, str, Ledger, list[str], Callable[[Path], Any]]]:
    """A live `ledger serve` (a real port) that a collector home (the test's home) appended two entries
    to; yields (url, reader token, the server's ledger, the entry ids, start(home) to serve another)."""
    server = Ledger.init(tmp_path / "server")
    host = Ledger.init(home)
    host.new_key("gpu01", ["collector"])
    server.enrol_key("gpu01", host.signing_key("gpu01").public.b64, ["collector"])
    writer, _ = create_token(server.engine, "w", "writer")
    port = free_port()
    running = [start_server(server.home_path, port=port)]

    def restart(other_home: Path) -> None:
        running[0].stop()
        running.append(start_server(other_home, port=port))

    url = running[0].url
    rec = RemoteRecorder(host, "gpu01", server=url, token=writer)
    try:
        ids = [rec.record("note", {"campaign": "c"}, {"text": f"#{i}"}) for i in range(2)]
        assert not _spooled(host)
    finally:
        rec.close()
        host.close()
    try:
        yield url, writer, server, ids, restart
    finally:
        for s in running:
            s.stop()
        server.close()


def test_audit_of_the_same_server_is_ok(cli: Cli, served_collector) -> None:  # type: ignore[no-untyped-def]
    url, token, server, _ids, _restart = served_collector
    report = _ok(cli("audit", "--server", url, "--token", token, "--json")).json()
    assert report["ok"] and report["receipts"] == 2 and report["origin"] == server.origin
    assert report["server"]["origin"] == server.origin and report["other_logs"] == 0


def test_audit_of_a_reinitialised_server_is_not_ok(
    cli: Cli, home: Path, tmp_path: Path, served_collector
) -> None:  # type: ignore[no-untyped-def]
    """The operator wipes the log and starts another on the same URL: every received entry is gone."""
    url, _token, server, ids, restart = served_collector
    old_vkey = server.verifier_key()
    new = Ledger.init(tmp_path / "server2")
    token, _ = create_token(new.engine, "r", "reader")
    new_origin = new.origin
    new.close()
    restart(tmp_path / "server2")

    def audit(*extra: str) -> dict[str, Any]:
        r = cli("audit", "--server", url, "--token", token, "--json", *extra)
        assert r.code == 1, r.out + r.err
        report: dict[str, Any] = r.json()
        assert not report["ok"] and report["origin"] == server.origin and report["receipts"] == 2
        assert report["server"]["origin"] == new_origin
        got = [(p["entry_id"], p["code"]) for p in report["problems"]]
        assert got == [(None, "receipt-mismatch")] + [(i, "receipt-mismatch") for i in ids]
        assert f"serves the log {new_origin}" in report["problems"][0]["message"]
        return report

    audit()  # the key the home recorded for the server on first use
    audit("--public-key", old_vkey)  # pinned
    audit("--public-key", server.log_public_key().b64)  # base64: the origin of the receipts it signed
    (home / "log-keys.json").unlink()  # a home from before the record: the receipts name their log
    report = audit()
    assert "no longer has it" in report["problems"][1]["message"]
    text = cli("audit", "--server", url, "--token", token)
    assert text.code == 1 and "3 problem(s): 2 receipts of " + server.origin in text.out
    assert "problem [receipt-mismatch] ledger:" in text.err and "[red]" not in text.err


# --- receipts set aside ---------------------------------------------------------------------------------


def test_an_audit_that_sets_aside_every_receipt_is_not_ok(cli: Cli, home: Path, tmp_path: Path) -> None:
    other = Ledger.init(tmp_path / "other")
    try:
        foreign = other.receipt(other.record("note", {"campaign": "c"}, {"text": "x"}, key="admin")).to_json()
    finally:
        other.close()
    _ok(cli("init"))
    led = Ledger.open(home)
    try:
        led.keep_receipts([foreign])
    finally:
        led.close()
    r = _ok(cli("audit"))  # the neighbour: the home's own receipts checked, the other log's named
    assert f"1 receipts of other logs set aside: {foreign['origin']} (1)" in r.out
    report = _ok(cli("audit", "--json")).json()
    assert report["other_origins"] == {foreign["origin"]: 1} and report["receipts"] >= 1
    (home / "receipts.jsonl").write_text(json.dumps(foreign) + "\n")  # only another log's receipts
    r = cli("audit", "--json")
    assert r.code == 1, r.out
    [problem] = r.json()["problems"]
    assert problem["code"] == RECEIPTS_UNCHECKED and foreign["origin"] in problem["message"]
    text = cli("audit")
    assert text.code == 1 and f"problem [{RECEIPTS_UNCHECKED}] ledger: none of the 1 receipts" in text.err


def test_audit_receipts_with_no_receipts_at_all_is_ok() -> None:
    """Nothing kept is nothing to check (a new home), not a problem."""
    report = audit_receipts([], None, lambda _e: None, origin="o")
    assert report and report.receipts == 0


def test_audit_server_without_a_key_names_the_log_the_receipts_name(logs: tuple[Ledger, Ledger]) -> None:
    """Without a pinned key, the log audited is the one the receipts name (the home's own set aside),
    not the one the server names now."""
    server, host = logs
    rec = _recorder(host, InProcessServer(server))
    ids = [rec.record("note", {"campaign": "c"}, {"text": f"#{i}"}) for i in range(2)]
    own = host.receipt(host.record("note", {"campaign": "own"}, {"text": "own"}, key="admin")).to_json()
    receipts = [*host.home.receipts(), own]
    honest = InProcessServer(server)
    vkey = server.verifier_key()
    ok = audit_server(
        receipts,
        honest.inclusion,
        server="s",
        served_origin=server.origin,
        served_vkey=vkey,
        own_origin=host.origin,
    )
    assert ok and ok.receipts == 2 and ok.other_origins == {host.origin: 1}
    tmp = host.home_path.parent / "replacement"
    replacement = Ledger.init(tmp)
    try:
        bad = audit_server(
            receipts,
            InProcessServer(replacement).inclusion,
            server="s",
            served_origin=replacement.origin,
            served_vkey=replacement.verifier_key(),
            own_origin=host.origin,
        )
    finally:
        replacement.close()
    assert bad.origin == server.origin and bad.receipts == 2
    assert [(p["entry_id"], p["code"]) for p in bad.problems] == [(None, "receipt-mismatch")] + [
        (i, "receipt-mismatch") for i in ids
    ]


# --- 3, 4. tiles: private behind a token, a bundle index past any log index is a 404 ----------------------


@pytest.fixture
def tiled(tmp_path: Path) -> Iterator[tuple[Ledger, str]]:
    led = Ledger.init(tmp_path / "srv")
    envs = [
        led.sign(led.make_statement("note", {"campaign": "t"}, {"text": f"#{i}"}), "admin")
        for i in range(300)
    ]
    led.append(envs)
    token, _ = create_token(led.engine, "r", "reader")
    yield led, token
    led.close()


def _client(led: Ledger, *, public_reads: bool) -> TestClient:
    return TestClient(create_app(ApiSettings(home=str(led.home_path), public_reads=public_reads), ledger=led))


TILE_PATHS = (
    "/tile/0/000",
    "/tile/0/001.p/45",
    "/tile/1/000.p/1",
    "/tile/entries/000",
    "/tile/entries/001.p/45",
)


def test_protected_tiles_are_private(tiled: tuple[Ledger, str]) -> None:
    led, token = tiled
    with _client(led, public_reads=False) as c:
        h = {"Authorization": f"Bearer {token}"}
        for path in TILE_PATHS:
            r = c.get(path, headers=h)
            assert r.status_code == 200, (path, r.text)
            assert r.headers["cache-control"] == "private, max-age=31536000, immutable", path
            assert c.get(path).status_code == 401
        assert c.get("/checkpoint", headers=h).headers["cache-control"] == "private, max-age=2"


def test_public_tiles_are_public(tiled: tuple[Ledger, str]) -> None:
    """The neighbour: a server started with --public-reads lets shared caches keep them."""
    led, _token = tiled
    with _client(led, public_reads=True) as c:
        for path in TILE_PATHS:
            r = c.get(path)
            assert r.status_code == 200, (path, r.text)
            assert r.headers["cache-control"] == "public, max-age=31536000, immutable", path


def test_an_entry_bundle_index_past_sqlite_integer_is_404(tiled: tuple[Ledger, str]) -> None:
    led, token = tiled
    h = {"Authorization": f"Bearer {token}"}
    with _client(led, public_reads=False) as c:
        assert c.get("/tile/entries/000", headers=h).status_code == 200  # the neighbour
        for n in (2**55 - 2, 2**55 - 1, 2**55, 2**63 - 1, 10**30):
            for path in (f"/tile/entries/{tile_path(n)}", f"/tile/entries/{tile_path(n)}.p/3"):
                r = c.get(path, headers=h)
                assert r.status_code == 404, (path, r.status_code, r.text)
                assert r.json()["code"] == "entry-not-found"
            assert c.get(f"/tile/0/{tile_path(n)}", headers=h).status_code == 404


# --- 5. a consistency proof from the empty tree ---------------------------------------------------------


def test_consistency_from_the_empty_tree_verifies(cli: Cli, home: Path, tmp_path: Path) -> None:
    _ok(cli("init"))
    for i in range(4):
        _ok(
            cli(
                "record", "note", "--key", "admin", "-s", "campaign=c", "--data", json.dumps({"text": str(i)})
            )
        )
    vkey = _ok(cli("keys", "export", "log", "--vkey")).out.strip()
    proof = tmp_path / "c0.json"
    proof.write_text(_ok(cli("proof", "consistency", "0", "5")).out)
    doc = json.loads(proof.read_text())
    assert doc["hashes"] == [] and doc["old_size"] == 0
    r = _ok(cli("proof", "verify", str(proof), "--public-key", vkey, "--json")).json()
    assert (r["old_size"], r["new_size"]) == (0, 5)
    # the neighbours: an ordinary proof still verifies; a proof from 0 that carries hashes does not
    proof.write_text(_ok(cli("proof", "consistency", "2", "5")).out)
    _ok(cli("proof", "verify", str(proof), "--public-key", vkey))
    proof.write_text(json.dumps({**doc, "hashes": ["00" * 32]}))
    bad = cli("proof", "verify", str(proof), "--public-key", vkey)
    assert bad.code != 0 and "from the empty tree" in bad.err


def test_consistency_from_size_0_needs_the_empty_root_and_no_hashes() -> None:
    leaves = [bytes([i]) * 32 for i in range(5)]
    root = merkle_root(leaves)
    verify_consistency(0, 5, _EMPTY_ROOT, root, [])
    with pytest.raises(ProofError, match="empty tree's root"):
        verify_consistency(0, 5, root, root, [])
    with pytest.raises(ProofError, match="is empty"):
        verify_consistency(0, 5, _EMPTY_ROOT, root, [root])


# --- 7. verify --receipts ----------------------------------------------------------------------------------


def test_verify_receipts_option(cli: Cli, home: Path) -> None:
    _ok(cli("init"))
    ids = [
        _ok(
            cli("record", "note", "--key", "admin", "-s", "campaign=c", "--data", '{"text": "x"}', "--json")
        ).json()["id"]
        for _ in range(3)
    ]
    report = _ok(cli("verify", "--receipts", "--workers", "1", "--json")).json()
    assert report["ok"] and report["receipts"]["ok"] and report["receipts"]["receipts"] == report["size"]
    text = _ok(cli("verify", "--receipts", "--workers", "1"))
    assert "receipts of " in text.out
    assert "receipts" not in _ok(cli("verify", "--workers", "1", "--json")).json()  # without the option

    _ok(cli("checkpoint"))  # the held checkpoint covers the newest entry (an audit never moves it)
    led = Ledger.open(home)  # the newest entry deleted with raw SQL, with the checkpoints over it
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
    r = cli("verify", "--receipts", "--workers", "1", "--json")
    assert r.code == 1, r.out
    receipts = r.json()["receipts"]
    assert (ids[-1], "receipt-mismatch") in [(p["entry_id"], p["code"]) for p in receipts["problems"]]
    # the same check as `ledger audit`: its entry problems are the audit's
    audit = cli("audit", "--json").json()
    assert [p for p in audit["problems"] if p["entry_id"]] == [
        p for p in receipts["problems"] if p["entry_id"]
    ]
    held = [p for p in r.json()["problems"] if p["code"] == "log-inconsistent"]
    assert held and not [p for p in receipts["problems"] if p["code"] == "log-inconsistent"]  # named once
