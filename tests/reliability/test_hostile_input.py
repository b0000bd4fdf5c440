"""Hostile input: fuzz every core parser; only the ledger's own typed errors may escape, nothing is stored.

Parsers: canonical JSON, DSSE envelopes, statements and payload kinds, `Ledger.append` with mutated and
with validly signed hostile envelopes, checkpoint notes, proof documents.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ledger.canonical import MAX_DEPTH, canonical_bytes, parse_canonical, parse_json
from ledger.entries import KIND_MODELS, parse_statement, validate_payload
from ledger.errors import CanonicalJsonError, LedgerError
from ledger.log import parse_checkpoint, sign_checkpoint
from ledger.proofs import verify_proof_document
from ledger.service import Ledger
from ledger.signing import SigningKey, parse_envelope, sign_envelope

FUZZ = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=40)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)
json_objects = st.dictionaries(st.text(max_size=12), json_values, max_size=6)
json_ish_text = st.text(alphabet='[]{}":,0123456789.eE+-truefalsnNI\\u \n', max_size=200)


def _statement(**over: Any) -> dict[str, Any]:
    st_ = {
        "_type": "https://evidence-ledger.dev/entry/v1",
        "kind": "note",
        "kind_version": 1,
        "subject": {"campaign": "fuzz"},
        "payload": {"text": "hello"},
        "artifacts": [],
        "refs": [],
        "collected_at": "2026-01-02T03:04:05.000000Z",
        "collector": {"host": "h", "tool": "evidence-ledger", "version": "0"},
    }
    st_.update(over)
    return st_


# --- canonical JSON -------------------------------------------------------------------------------------


@FUZZ
@given(st.binary(max_size=300) | json_ish_text.map(str.encode))
def test_json_parser_raises_only_its_own_error(data: bytes) -> None:
    try:
        value = parse_json(data)
    except CanonicalJsonError:
        return
    canonical_bytes(value)  # whatever parses can be canonicalised (or refused with the same error)


@FUZZ
@given(json_values)
def test_canonical_bytes_accepts_or_refuses_cleanly(value: Any) -> None:
    try:
        data = canonical_bytes(value)
    except CanonicalJsonError:
        return
    assert canonical_bytes(parse_canonical(data)) == data


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 1000, 100_000])
def test_deeply_nested_json_is_refused(depth: int) -> None:
    with pytest.raises(CanonicalJsonError, match="nested"):
        parse_json(b"[" * depth + b"]" * depth)
    with pytest.raises(CanonicalJsonError, match="nested"):
        parse_json(b'{"a":' * depth + b"1" + b"}" * depth)


def test_nesting_at_the_limit_is_accepted() -> None:
    assert parse_json(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH) is not None


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 5000])
def test_deeply_nested_value_is_refused_when_canonicalised(depth: int) -> None:
    """Regression: canonical_bytes let RecursionError escape for values nested ~1000 deep."""
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    try:
        parse_canonical(canonical_bytes(value))
    except CanonicalJsonError:
        return
    pytest.fail("a value nested deeper than the limit round-tripped")


# --- DSSE envelopes -------------------------------------------------------------------------------------

KEY = SigningKey.generate("fuzz")
GOOD_ENV = sign_envelope(_statement(), KEY).to_json()


@FUZZ
@given(st.binary(max_size=300) | json_ish_text.map(str.encode))
def test_envelope_parser_on_bytes(data: bytes) -> None:
    with contextlib.suppress(LedgerError):
        parse_envelope(data)


@FUZZ
@given(json_values | json_objects)
def test_envelope_parser_on_json(value: Any) -> None:
    try:
        env = parse_envelope(value)
    except LedgerError:
        return
    with contextlib.suppress(LedgerError):
        parse_statement(env.statement())


@FUZZ
@given(st.sampled_from(["payload", "payloadType", "signatures", "extra"]), json_values)
def test_envelope_with_one_field_replaced(field: str, value: Any) -> None:
    doc = dict(GOOD_ENV, **{field: value})
    try:
        env = parse_envelope(doc)
        env.verify_with(KEY.public)
    except LedgerError:
        return
    assert env.payload == base64.b64decode(GOOD_ENV["payload"])  # only the untouched envelope verifies


# --- statements and payload kinds -------------------------------------------------------------------------

STATEMENT_FIELDS = sorted(_statement())


@FUZZ
@given(json_values | json_objects)
def test_statement_parser_on_any_json(value: Any) -> None:
    with contextlib.suppress(LedgerError):
        parse_statement(value)


@FUZZ
@given(st.sampled_from([*STATEMENT_FIELDS, "extra"]), json_values)
def test_statement_with_one_field_replaced(field: str, value: Any) -> None:
    with contextlib.suppress(LedgerError):
        parse_statement(_statement(**{field: value}))


def _field_names(model: Any) -> list[str]:
    return sorted(model.model_fields)


KINDS = sorted(KIND_MODELS)


@FUZZ
@given(st.sampled_from(KINDS), st.data())
def test_every_payload_kind_raises_only_schema_errors(kind: tuple[str, int], data: st.DataObject) -> None:
    names = _field_names(KIND_MODELS[kind])
    keys = st.sampled_from(names) | st.text(max_size=8)
    payload = data.draw(st.dictionaries(keys, json_values, max_size=len(names) + 1))
    with contextlib.suppress(LedgerError):
        validate_payload(kind[0], kind[1], payload)


# --- Ledger.append: mutated bytes and validly signed hostile statements ----------------------------------


@pytest.fixture
def target(tmp_path: Path) -> Iterator[tuple[Ledger, bytes]]:
    led = Ledger.init(tmp_path / "home")
    led.new_key("hostA", ["collector"])
    env = led.sign(led.make_statement("note", {"campaign": "fuzz"}, {"text": "genuine"}), "hostA")
    yield led, env.canonical()
    led.close()


mutations = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10_000), st.integers(1, 255)),
    st.tuples(st.just("cut"), st.integers(0, 10_000), st.integers(1, 64)),
    st.tuples(st.just("insert"), st.integers(0, 10_000), st.binary(min_size=1, max_size=16)),
)


def _mutate(data: bytes, m: tuple[Any, ...]) -> bytes:
    kind, at, arg = m
    at %= len(data)
    if kind == "flip":
        return data[:at] + bytes([data[at] ^ arg]) + data[at + 1 :]
    if kind == "cut":
        return data[:at] + data[at + arg :]
    return data[:at] + arg + data[at:]


@FUZZ
@given(st.lists(mutations, min_size=1, max_size=3))
def test_append_of_mutated_envelope_bytes(target: tuple[Ledger, bytes], muts: list[tuple[Any, ...]]) -> None:
    led, good = target
    data = good
    for m in muts:
        data = _mutate(data, m)
    assume(data != good)
    before = led.size()
    try:
        led.append([data])
    except LedgerError:
        assert led.size() == before
        return
    # Accepted only if it still is the genuine statement, signed by hostA (e.g. JSON whitespace added).
    entry = led.query(descending=True, limit=1)[0]
    assert entry.statement.payload == {"text": "genuine"}


@FUZZ
@given(st.sampled_from([*STATEMENT_FIELDS, "extra"]), json_values)
def test_append_of_signed_hostile_statement(target: tuple[Ledger, bytes], field: str, value: Any) -> None:
    """An attacker holding a collector key signs whatever it likes: refused cleanly, or stored soundly."""
    led, _ = target
    try:
        env = sign_envelope(_statement(**{field: value}), led.signing_key("hostA"))
    except LedgerError:
        return  # not even representable as canonical JSON
    before = led.size()
    try:
        (entry,) = led.append([env])
    except LedgerError:
        assert led.size() == before
        return
    assert led.size() == before + (0 if entry.duplicate else 1)


def test_signed_hostile_statements_leave_a_verifiable_ledger(target: tuple[Ledger, bytes]) -> None:
    led, _ = target
    for value in ["", "x" * 600, "\u0000", "../../etc/passwd", "\ud7ff\ue000", 2**63, -1, 1.5, None]:
        for field in ("subject", "payload"):
            doc = {"campaign": value} if field == "subject" else {"text": value}
            with contextlib.suppress(LedgerError):
                led.append([sign_envelope(_statement(**{field: doc}), led.signing_key("hostA"))])
    report = led.verify()
    assert report, report.to_json()


def test_deeply_nested_payload_is_refused_on_append(target: tuple[Ledger, bytes]) -> None:
    led, _ = target
    nested: Any = "x"
    for _ in range(MAX_DEPTH + 5):
        nested = {"n": nested}
    env = sign_envelope(
        _statement(kind="engine.launch", payload={"details": nested}), led.signing_key("hostA")
    )
    before = led.size()
    with pytest.raises(LedgerError):
        led.append([env])
    assert led.size() == before


# --- checkpoints and proof documents ---------------------------------------------------------------------

NOTE = sign_checkpoint("fuzz/origin", 5, b"\x01" * 32, KEY).note


@FUZZ
@given(st.text(max_size=300))
def test_checkpoint_parser_on_any_text(note: str) -> None:
    with contextlib.suppress(LedgerError):
        parse_checkpoint(note, "fuzz", KEY.public)


@FUZZ
@given(st.integers(0, 400), st.integers(0, 30), st.text(max_size=10))
def test_checkpoint_parser_on_edited_notes(at: int, cut: int, insert: str) -> None:
    at %= len(NOTE)
    edited = NOTE[:at] + insert + NOTE[at + cut :]
    assume(edited != NOTE)
    try:
        cp = parse_checkpoint(edited, "fuzz", KEY.public)
    except LedgerError:
        return
    assert (cp.origin, cp.size, cp.root) == ("fuzz/origin", 5, b"\x01" * 32)  # only harmless edits pass


def test_regression_non_ascii_checkpoint_signature_line() -> None:
    """Regression: a non-ASCII signature line made base64 raise a bare ValueError past the parser."""
    body = NOTE.split("\n\n")[0]
    with pytest.raises(LedgerError):
        parse_checkpoint(body + "\n\n\u2014 fuzz \u00e9\u00e9\u00e9\n", "fuzz", KEY.public)


def _proof_doc() -> dict[str, Any]:
    return {
        "type": "inclusion",
        "entry_id": "00" * 32,
        "leaf_index": 0,
        "tree_size": 5,
        "leaf_hash": "00" * 32,
        "hashes": ["11" * 32],
        "checkpoint": NOTE,
        "log_key_name": "fuzz",
    }


PROOF_FIELDS = sorted({*_proof_doc(), "envelope", "old_checkpoint", "new_checkpoint", "old_size"})


@FUZZ
@given(json_values | json_objects)
def test_proof_verifier_on_any_json(doc: Any) -> None:
    with contextlib.suppress(LedgerError):
        verify_proof_document(doc, KEY.public.b64, "fuzz")


@FUZZ
@given(
    st.sampled_from(["inclusion", "consistency"]),
    st.dictionaries(st.sampled_from(PROOF_FIELDS), json_values | st.just(NOTE), max_size=4),
    st.lists(st.sampled_from(PROOF_FIELDS), max_size=3),
)
def test_proof_verifier_on_edited_documents(kind: str, over: dict[str, Any], drop: list[str]) -> None:
    doc = {**_proof_doc(), "type": kind, **over}
    for k in drop:
        doc.pop(k, None)
    with contextlib.suppress(LedgerError):
        verify_proof_document(doc, KEY.public.b64, "fuzz")


def test_cli_proof_verify_on_garbage_is_one_line_error(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    for text in ["{not json", json.dumps({"type": "inclusion"}), json.dumps([1, 2])]:
        p = tmp_path / "proof.json"
        p.write_text(text)
        r = cli("proof", "verify", str(p), "--public-key", KEY.public.b64, "--key-name", "fuzz")
        assert r.code == 2, (text, r.out, r.err)
        assert r.err.startswith("error["), r.err
        assert len(r.err.strip().splitlines()) == 1
