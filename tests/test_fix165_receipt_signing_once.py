"""A receipt per append, made once (fix 165, issue 12's throughput): the log record's canonical bytes were
made three times per entry (the sequencer's leaf, the receipt's body, the receipt's JSON) and the log
key's public key and signed-note key hash derived again at every signature. Now each record makes its
bytes once and each (name, key) its key hash once — the same bytes, the same notes, the same refusals.
"""

from __future__ import annotations

import base64
from dataclasses import replace

import pytest

from ledger import log
from ledger.canonical import canonical_bytes
from ledger.errors import InputError, ProofError
from ledger.log import (
    MAX_RECORD_BYTES,
    LogRecord,
    note_key_hash,
    parse_receipt,
    sign_checkpoint,
    sign_receipt,
)
from ledger.signing import SigningKey

ID = "ab" * 32


def _record(**kw: object) -> LogRecord:
    fields: dict[str, object] = {
        "index": 7,
        "logged_at": "2026-01-02T03:04:05.000000Z",
        "entry_id": ID,
        "kind": "note",
        "signer": "cd" * 32,
    }
    return LogRecord(**(fields | kw))  # type: ignore[arg-type]


def test_a_records_bytes_are_made_once_and_are_its_canonical_json() -> None:
    r = _record()
    first = r.to_bytes()
    assert first == canonical_bytes(r.to_json())
    assert r.to_bytes() is first  # kept, not made again
    assert r.leaf() == log.leaf_hash(first)


def test_a_kept_records_bytes_do_not_change_what_it_equals_or_hashes_as() -> None:
    made, fresh = _record(), _record()
    made.to_bytes()
    assert made == fresh and hash(made) == hash(fresh)
    assert repr(made) == repr(fresh)


@pytest.mark.parametrize("field", ["index", "logged_at", "entry_id", "kind", "signer"])
def test_a_record_with_any_other_field_has_its_own_bytes(field: str) -> None:
    base = _record()
    base.to_bytes()
    other = replace(base, **{field: 8 if field == "index" else "x"})  # type: ignore[arg-type]
    assert other.to_bytes() == canonical_bytes(other.to_json()) != base.to_bytes()


def test_a_record_too_large_is_refused_at_every_ask() -> None:
    r = _record(kind="k" * MAX_RECORD_BYTES)
    for _ in range(2):  # a refusal is never kept as bytes
        with pytest.raises(InputError, match="exceeds"):
            r.to_bytes()


def test_receipts_by_two_keys_under_one_name_carry_each_keys_hash() -> None:
    a, b = SigningKey.generate("log"), SigningKey.generate("log")
    r = _record()
    for key in (a, b, a):
        receipt = sign_receipt("example.org/log", r, key)
        parse_receipt(receipt.to_json(), key.public)  # verifies under its own key
        line = receipt.note.rsplit(" ", 1)[1]
        assert base64.b64decode(line)[:4] == note_key_hash("example.org/log", key.public)
    with pytest.raises(ProofError):
        parse_receipt(sign_receipt("example.org/log", r, a).to_json(), b.public)


def test_one_key_under_two_names_carries_each_names_hash() -> None:
    key = SigningKey.generate("log")
    for name in ("example.org/log", "other.example/log", "example.org/log"):
        cp = sign_checkpoint("example.org/log", 3, b"\0" * 32, key, key_name=name)
        line = cp.note.rsplit(" ", 1)[1]
        assert base64.b64decode(line)[:4] == note_key_hash(name, key.public)


@pytest.mark.parametrize("name", ["", "has space", "a+b", "tab\there"])
def test_a_name_no_signed_note_may_carry_is_refused_at_every_signature(name: str) -> None:
    key = SigningKey.generate("log")
    for _ in range(2):  # never kept, so never signed under
        with pytest.raises(InputError):
            sign_receipt(name, _record(), key)


def test_the_kept_key_hashes_stay_bounded() -> None:
    keys = [SigningKey.generate("log") for _ in range(log._NOTE_SIGNERS_KEPT + 5)]
    for k in keys:
        sign_checkpoint("example.org/log", 1, b"\0" * 32, k)
    assert len(log._NOTE_SIGNERS) <= log._NOTE_SIGNERS_KEPT
