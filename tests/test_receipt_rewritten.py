"""Issue 12, fix 87 (audit 77 f1): the log signed over a receipted entry rewritten in the database.

A receipted entry past the held checkpoint, rewritten behind the log's back by raw SQL (its record's
``logged_at``, kind or signer, with its ``leaf_hash`` and chain hash made to agree, the append-only trigger
dropped and restored), was signed over: ``ledger checkpoint`` held a checkpoint of the rewritten log and
``ledger verify`` passed; only ``ledger audit`` named it. The signing guard compared entry ids alone
(``Ledger._receipt_lost``). It now also keeps the leaf each receipt signs (``ledger.log.receipt_claim``: the
leaf line of its signed note, which its record hashes to) and compares it with the row's leaf re-derived
from its record (``checked_leaf``): a rewritten entry is ``LogInconsistentError`` naming the entry, its index
and what differs, and every signature and append is refused; ``ledger verify`` reports it too. A kept
receipt that names no leaf, or contradicts itself, cannot judge the log and is ``ConfigError`` (never a
pass).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from ledger.api.app import create_app
from ledger.api.settings import ApiSettings
from ledger.errors import ChainBrokenError, ConfigError, HomeFaultError, LogInconsistentError
from ledger.log import chain_hash, leaf_hash, parse_record, receipt_claim
from ledger.service import Ledger
from ledger.tokens import create_token
from tests.api.conftest import fresh_pg_database
from tests.test_fix67_log_reads import Log

ADMIN = "admin"
NEWEST = 7  # the receipted entries past the held checkpoint (size 5): 5, 6, 7


@pytest.fixture(autouse=True)
def _no_timed_publication(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sequencer publishes only when a test says so (no checkpoint held behind the test's back)."""
    monkeypatch.setenv("LEDGER_CHECKPOINT_INTERVAL", "3600")


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """None for the home's SQLite file, or a fresh PostgreSQL database (fails in CI without the server)."""
    if request.param == "sqlite":
        yield None
        return
    with fresh_pg_database() as url:
        yield url


def _receipted(home: Path, backend: str | None) -> Log:
    """A home-bound ledger (it keeps a receipt of every entry it appends) holding a checkpoint of size 5,
    with 3 receipted entries past it (indexes 5, 6, 7)."""
    led = Ledger.init(home, database_url=backend, home_bound=True)
    for i in range(4):
        led.record("note", {"campaign": "c"}, {"text": f"n{i}"}, key=ADMIN)
    held = led.checkpoint()
    for i in range(3):
        led.record("note", {"campaign": "c"}, {"text": f"m{i}"}, key=ADMIN)
    assert held.size == 5 and led.held() == held and led.size() == NEWEST + 1
    return Log(led, led.database_url)


@pytest.fixture
def receipted(tmp_path: Path, backend: str | None) -> Iterator[Log]:
    log = _receipted(tmp_path / "home", backend)
    yield log
    log.led.close()


@pytest.fixture
def receipted_sqlite(tmp_path: Path) -> Iterator[Log]:
    log = _receipted(tmp_path / "home", None)
    yield log
    log.led.close()


def _row(log: Log, seq: int) -> Any:
    return log.led.repo.by_seq(seq)


def _rewrite(log: Log, seq: int, field: str, value: str, *, leaf: bool = True) -> str:
    """The entry at ``seq`` rewritten as someone with write access to the database can: its record's
    ``field`` set to ``value``, and its row's column of that name, its ``leaf_hash`` (unless ``leaf`` is
    False) and its chain hash made to agree. Returns the value it had."""
    row = _row(log, seq)
    doc = json.loads(bytes(row.record))
    old = doc[field]
    doc[field] = value
    record = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    logged_at = value if field == "logged_at" else row.logged_at
    chain = chain_hash(seq, row.entry_id, row.prev_hash, logged_at)
    new_leaf = leaf_hash(record).hex() if leaf else row.leaf_hash
    log.edit(
        f"UPDATE log_entries SET {field} = ?, record = ?, leaf_hash = ?, chain_hash = ? WHERE seq = ?",
        value,
        record,
        new_leaf,
        chain,
        seq,
    )
    return str(old)


def _back_date(log: Log) -> tuple[str, str]:
    """The newest entry back-dated to its predecessor's log time (audit 77's reproducer)."""
    new = str(_row(log, NEWEST - 1).logged_at)
    return _rewrite(log, NEWEST, "logged_at", new), new


def _signers(led: Ledger) -> list[Callable[[], object]]:
    """Every way something is signed under the log's key: a checkpoint published or signed for a read,
    the checkpoints proofs carry (consistency, inclusion, the tiles exported), a receipt (an append)."""
    return [
        led.checkpoint,
        led.signed_checkpoint,
        lambda: led.consistency(1),
        lambda: led.inclusion(led.get_seq(0).entry_id),
        lambda: led.export_tiles(led.home_path.parent / "tiles-out"),
        lambda: led.record("note", {"campaign": "c"}, {"text": "after"}, key=ADMIN),
    ]


def _refused(log: Log, match: str, *, head_moved: bool = True) -> None:
    """Nothing is signed over the log, in this process or a fresh one (a CLI command): the held
    checkpoint stays, nothing is appended. ``head_moved`` False: the rewrite left the head's chain hash
    as it was (kind, signer, an entry below the head), so this process's sequencer appends at the head it
    left without reading the log again (``Ledger._guard_head``, as over an entry deleted below its head):
    that receipt signs the new entry alone; the fresh process refuses it."""
    held, size = log.led.held(), log.led.size()
    fresh = Ledger.open(log.led.home_path, database_url=log.url, home_bound=True)
    try:
        for led in (log.led, fresh):
            signers = _signers(led)
            for sign in signers if head_moved or led is fresh else signers[:-1]:
                with pytest.raises(LogInconsistentError, match=match):
                    sign()
    finally:
        fresh.close()
    assert log.led.held() == held and log.led.size() == size


def _kept(log: Log) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.led.home.receipts_path.read_text().splitlines()]


def _keep(log: Log, docs: list[dict[str, Any]], *, newline: bool = True) -> None:
    text = "\n".join(json.dumps(d, sort_keys=True, separators=(",", ":")) for d in docs)
    log.led.home.receipts_path.write_text(text + ("\n" if newline else ""))


def _edit_receipt(log: Log, index: int, edit: Callable[[dict[str, Any]], None]) -> None:
    docs = _kept(log)
    for d in docs:
        if d["index"] == index:
            edit(d)
    _keep(log, docs)


# --- the finding: a receipted entry rewritten, its hashes agreeing ----------------------------------------


def test_a_receipted_entry_back_dated_in_the_database_is_never_signed_over(receipted: Log) -> None:
    old, new = _back_date(receipted)
    _refused(
        receipted,
        rf"entry {_row(receipted, NEWEST).entry_id} at index {NEWEST} rewritten since it signed the "
        rf"receipt .*logged_at {new} where the receipt says {old}",
    )
    report = receipted.led.verify()
    assert not report
    [problem] = [p for p in report.problems if p.code == LogInconsistentError.code]
    assert problem.seq == NEWEST and problem.id == _row(receipted, NEWEST).entry_id
    assert f"logged_at {new} where the receipt says {old}" in problem.message


@pytest.mark.parametrize("field", ["kind", "signer"])
def test_a_receipted_entry_whose_kind_or_signer_is_rewritten_is_never_signed_over(
    receipted_sqlite: Log, field: str
) -> None:
    old = _rewrite(receipted_sqlite, NEWEST, field, "rewritten")
    _refused(
        receipted_sqlite,
        rf"at index {NEWEST} rewritten .*{field} rewritten where the receipt says {old}",
        head_moved=False,
    )
    assert not receipted_sqlite.led.verify()


def test_an_older_receipted_entry_rewritten_past_the_held_checkpoint_is_named(receipted_sqlite: Log) -> None:
    """Not only the newest: the first receipt past the held checkpoint is checked as well."""
    old = _rewrite(receipted_sqlite, 5, "logged_at", str(_row(receipted_sqlite, 4).logged_at))
    _refused(receipted_sqlite, rf"at index 5 rewritten .*where the receipt says {old}", head_moved=False)


def test_a_record_rewritten_with_its_leaf_hash_left_is_refused_as_chain_broken(receipted_sqlite: Log) -> None:
    """``checked_leaf``: the record no longer hashes to its row's leaf hash."""
    _rewrite(
        receipted_sqlite, NEWEST, "logged_at", str(_row(receipted_sqlite, NEWEST - 1).logged_at), leaf=False
    )
    led = receipted_sqlite.led
    held = led.held()
    for sign in (led.checkpoint, led.signed_checkpoint):
        with pytest.raises(ChainBrokenError, match=f"seq {NEWEST}"):
            sign()
    with pytest.raises(ChainBrokenError, match=f"seq {NEWEST}"):
        led._receipt_lost(5)  # the guard itself, not only the tree read before it
    assert led.held() == held
    report = led.verify()
    assert not report and all(p.code != LogInconsistentError.code for p in report.problems), (
        "the row is verify's own to name, once"
    )


def test_the_cli_checkpoint_refuses_and_verify_fails(receipted_sqlite: Log, cli: Any) -> None:
    """Audit 77's reproducer: `ledger checkpoint` signs nothing, `ledger verify` exits 1 naming it."""
    _back_date(receipted_sqlite)
    r = cli("checkpoint")
    assert r.code == 2 and "error[log-inconsistent]" in r.err and f"index {NEWEST} rewritten" in r.err
    assert receipted_sqlite.led.held().size == 5
    r = cli("verify")
    assert (
        r.code == 1 and f"[log-inconsistent] seq {NEWEST}" in r.err and f"index {NEWEST} rewritten" in r.err
    )


def test_the_checkpoint_served_over_a_rewritten_entry_is_refused(receipted_sqlite: Log) -> None:
    _back_date(receipted_sqlite)
    led = receipted_sqlite.led
    token, _ = create_token(led.engine, "r", "reader")
    app = create_app(ApiSettings(home=str(led.home_path)), ledger=led)
    with TestClient(app) as c:
        r = c.get("/checkpoint", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 500 and "log-inconsistent" in r.text and f"index {NEWEST} rewritten" in r.text
    assert led.held().size == 5


# --- what must still pass --------------------------------------------------------------------------------


def test_an_untouched_log_with_receipts_past_the_held_checkpoint_is_signed(receipted: Log) -> None:
    led = receipted.led
    assert led.verify()
    assert led.checkpoint().size == NEWEST + 1 and led.held().size == NEWEST + 1
    led.record("note", {"campaign": "c"}, {"text": "after"}, key=ADMIN)


def test_a_rewritten_entry_below_the_held_checkpoint_is_the_held_checkpoints_to_name(
    receipted_sqlite: Log,
) -> None:
    """Receipts below the held checkpoint are not kept by the guard: the held root names the rewrite."""
    _rewrite(receipted_sqlite, 3, "logged_at", str(_row(receipted_sqlite, 2).logged_at))
    with pytest.raises(LogInconsistentError, match="does not extend the checkpoint this home holds"):
        receipted_sqlite.led.checkpoint()


def test_a_lost_entry_is_still_named_lost_before_its_receipt_is_judged(receipted_sqlite: Log) -> None:
    _edit_receipt(receipted_sqlite, NEWEST, lambda d: (d.pop("note"), d.pop("record")))
    receipted_sqlite.delete_from(NEWEST)
    with pytest.raises(LogInconsistentError, match=f"lost entry .* at index {NEWEST}, whose signed receipt"):
        receipted_sqlite.led.checkpoint()


# --- the receipts file: fields dropped, renamed, mistyped; the last line without its newline --------------


def test_a_receipt_without_its_record_judges_the_log_by_its_signed_notes_leaf(receipted_sqlite: Log) -> None:
    """A receipt carrying no record (an older or another client's format): its signed note names the leaf
    and the log time, enough to judge the log; nothing passes for want of the record."""
    _edit_receipt(receipted_sqlite, NEWEST, lambda d: d.pop("record"))
    assert receipted_sqlite.led.verify()  # untouched: it still passes
    old, new = _back_date(receipted_sqlite)
    _refused(receipted_sqlite, rf"at index {NEWEST} rewritten .*logged_at {new} where the receipt says {old}")


def test_a_receipt_with_its_record_renamed_is_judged_by_its_note(receipted_sqlite: Log) -> None:
    _edit_receipt(receipted_sqlite, NEWEST, lambda d: d.__setitem__("rec", d.pop("record")))
    _rewrite(receipted_sqlite, NEWEST, "kind", "rewritten")
    _refused(receipted_sqlite, f"at index {NEWEST} rewritten", head_moved=False)


def test_a_receipt_without_note_judges_the_log_by_its_record(receipted_sqlite: Log) -> None:
    _edit_receipt(receipted_sqlite, NEWEST, lambda d: d.pop("note"))
    _rewrite(receipted_sqlite, NEWEST, "signer", "rewritten")
    _refused(
        receipted_sqlite,
        rf"at index {NEWEST} rewritten .*signer rewritten where the receipt says",
        head_moved=False,
    )


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        (lambda d: (d.pop("note"), d.pop("record")), "neither a signed note nor a record"),
        (lambda d: d.__setitem__("record", 5), "its record is not base64"),
        (lambda d: d.__setitem__("record", "not base64!"), "its record is not base64"),
        (
            lambda d: d.__setitem__("record", base64.b64encode(b'{"a":1}').decode()),
            "its record does not hash to the leaf its signed note names",
        ),
        (lambda d: d.__setitem__("note", 5), "its note is no receipt note"),
        (lambda d: d.__setitem__("note", "hello\n\n"), "its note is no receipt note"),
    ],
    ids=[
        "no-note-no-record",
        "record-int",
        "record-not-b64",
        "record-not-the-notes",
        "note-int",
        "note-other",
    ],
)
def test_a_receipt_that_names_no_leaf_refuses_every_signature(
    receipted_sqlite: Log, edit: Callable[[dict[str, Any]], object], why: str
) -> None:
    """Fail closed: a kept receipt of the log past the held checkpoint that names no leaf cannot judge it,
    and is never taken as one the log passes (the log itself untouched)."""
    _edit_receipt(receipted_sqlite, NEWEST, edit)
    led = receipted_sqlite.led
    with pytest.raises(
        ConfigError, match=f"receipts.jsonl: the receipt .* at index {NEWEST} cannot judge.*{why}"
    ):
        led.checkpoint()
    fresh = Ledger.open(led.home_path, database_url=receipted_sqlite.url, home_bound=True)
    try:  # an append (a fresh process: this one's sequencer appends at the head it left): the home's fault
        with pytest.raises((ConfigError, HomeFaultError), match=why):
            fresh.record("note", {"campaign": "c"}, {"text": "after"}, key=ADMIN)
    finally:
        fresh.close()
    report = led.verify()
    assert not report and any(why in p.message for p in report.problems)


def _swap_note_line(d: dict[str, Any], n: int, value: str) -> None:
    body, _, sigs = d["note"].partition("\n\n")
    lines = body.split("\n")
    lines[n] = value
    d["note"] = "\n".join(lines) + "\n\n" + sigs


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        (lambda d: _swap_note_line(d, 3, "0" * 64), "its signed note names .* not the ones its fields name"),
        (lambda d: _swap_note_line(d, 2, "6"), "its signed note names .* not the ones its fields name"),
        (lambda d: _swap_note_line(d, 5, "AAAA"), "is no base64 SHA-256 hash"),
        (
            lambda d: _swap_note_line(d, 5, base64.b64encode(bytes(32)).decode()),
            "its record does not hash to the leaf its signed note names",
        ),
    ],
    ids=["note-other-entry", "note-other-index", "note-leaf-short", "note-leaf-other"],
)
def test_a_receipt_that_contradicts_itself_refuses_every_signature(
    receipted_sqlite: Log, edit: Callable[[dict[str, Any]], object], why: str
) -> None:
    _edit_receipt(receipted_sqlite, NEWEST, edit)
    with pytest.raises(ConfigError, match=why):
        receipted_sqlite.led.checkpoint()


def test_a_receipt_kept_as_a_last_line_without_its_newline_judges_the_log(receipted_sqlite: Log) -> None:
    _keep(receipted_sqlite, _kept(receipted_sqlite), newline=False)
    old, new = _back_date(receipted_sqlite)
    _refused(receipted_sqlite, rf"at index {NEWEST} rewritten .*logged_at {new} where the receipt says {old}")


def test_a_receipt_appended_after_the_process_read_the_file_is_judged(receipted_sqlite: Log) -> None:
    """The guard reads only the new lines of receipts.jsonl: their leaves are kept as well."""
    led = receipted_sqlite.led
    assert led.signed_checkpoint().size == NEWEST + 1  # the file read (and held moved on to 8)
    led.record("note", {"campaign": "c"}, {"text": "later"}, key=ADMIN)  # index 8, its receipt appended
    old = _rewrite(receipted_sqlite, 8, "logged_at", str(_row(receipted_sqlite, 7).logged_at))
    with pytest.raises(LogInconsistentError, match=f"at index 8 rewritten .*where the receipt says {old}"):
        led.checkpoint()


# --- receipt_claim: one reading of a kept receipt --------------------------------------------------------


@pytest.mark.parametrize(
    ("record", "why"),
    [
        (lambda log: base64.b64encode(b'{"a":1}').decode(), "its record is no log record"),
        (lambda log: _kept(log)[NEWEST - 1]["record"], f"its record names index {NEWEST - 1}"),
    ],
    ids=["not-a-record", "another-entrys"],
)
def test_a_receipt_without_note_whose_record_is_not_its_entrys_is_the_receipts_fault(
    receipted_sqlite: Log, record: Callable[[Log], str], why: str
) -> None:
    """Its record, the only leaf it names, is read only when the log disagrees with it: a record that is
    no log record of its entry is the receipt's fault (``ConfigError``), never blamed on the log."""
    value = record(receipted_sqlite)
    _edit_receipt(receipted_sqlite, NEWEST, lambda d: (d.pop("note"), d.__setitem__("record", value)))
    with pytest.raises(ConfigError, match=f"at index {NEWEST} cannot judge the log: {why}"):
        receipted_sqlite.led.checkpoint()


def test_receipt_claim_reads_the_signed_leaf_and_the_records_fields(receipted_sqlite: Log) -> None:
    led = receipted_sqlite.led
    doc = _kept(receipted_sqlite)[-1]
    claim = receipt_claim(doc, led.origin, NEWEST, doc["entry_id"])
    record = base64.b64decode(doc["record"])
    assert claim.leaf == leaf_hash(record) == bytes.fromhex(_row(receipted_sqlite, NEWEST).leaf_hash)
    rec = parse_record(record)
    assert claim.says(NEWEST, rec.entry_id) == {
        "index": NEWEST,
        "logged_at": rec.logged_at,
        "entry_id": rec.entry_id,
        "kind": rec.kind,
        "signer": rec.signer,
    }
    del doc["record"]
    by_note = receipt_claim(doc, led.origin, NEWEST, doc["entry_id"])
    assert by_note.leaf == claim.leaf and by_note.says(NEWEST, rec.entry_id) == {
        "index": NEWEST,
        "entry_id": rec.entry_id,
        "logged_at": rec.logged_at,
    }
