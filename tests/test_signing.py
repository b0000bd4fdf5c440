"""DSSE envelopes and Ed25519 signatures."""

from __future__ import annotations

import base64
import json

import pytest

from ledger.errors import EnvelopeError, InputError, SignatureError
from ledger.service import Ledger
from ledger.signing import PAYLOAD_TYPE, PublicKey, SigningKey, Verifier, pae, parse_envelope, sign_envelope


def test_pae_matches_the_dsse_specification() -> None:
    assert pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )


def test_sign_and_verify_round_trip() -> None:
    key = SigningKey.generate("k")
    env = sign_envelope({"a": 1}, key)
    again = parse_envelope(env.canonical())
    assert again == env
    again.verify_with(key.public)
    with pytest.raises(SignatureError):
        again.verify_with(SigningKey.generate("other").public)


def test_flipped_payload_byte_fails_signature() -> None:
    key = SigningKey.generate("k")
    doc = sign_envelope({"a": 1}, key).to_json()
    doc["payload"] = base64.b64encode(b'{"a":2}').decode()
    with pytest.raises(SignatureError):
        parse_envelope(json.dumps(doc).encode()).verify_with(key.public)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.update(payloadType="text/plain"),
        lambda d: d.update(signatures=[]),
        lambda d: d.update(payload="%%%"),
        lambda d: d.update(extra=1),
        lambda d: d["signatures"].append(d["signatures"][0]),
    ],
    ids=["wrong-payload-type", "no-signature", "bad-base64", "unknown-field", "two-signatures"],
)
def test_malformed_envelopes_refused(mutate) -> None:  # type: ignore[no-untyped-def]
    doc = sign_envelope({"a": 1}, SigningKey.generate("k")).to_json()
    mutate(doc)
    with pytest.raises(EnvelopeError):
        parse_envelope(json.dumps(doc).encode())
    assert doc.get("payloadType", PAYLOAD_TYPE)


# The identity point: a small-order "public key" for which (R = identity, S = 0) satisfies the Ed25519
# equation for every message. OpenSSL (``cryptography``) accepts that forgery; libsodium refuses it.
SMALL_ORDER_KEY = bytes([1]) + bytes(31)
FORGERY_FOR_ANY_MESSAGE = bytes([1]) + bytes(31) + bytes(32)


def test_a_small_order_key_verifies_no_message() -> None:
    key = PublicKey(SMALL_ORDER_KEY)
    for message in (b"", b"anything", pae(PAYLOAD_TYPE, b'{"kind":"review"}')):
        with pytest.raises(SignatureError):
            key.verify(FORGERY_FOR_ANY_MESSAGE, message)


def test_an_envelope_signed_by_a_small_order_key_is_refused() -> None:
    doc = sign_envelope({"a": 1}, SigningKey.generate("k")).to_json()
    forged = PublicKey(SMALL_ORDER_KEY)
    doc["signatures"] = [{"keyid": forged.key_id, "sig": base64.b64encode(FORGERY_FOR_ANY_MESSAGE).decode()}]
    with pytest.raises(SignatureError):
        parse_envelope(json.dumps(doc).encode()).verify_with(forged)


@pytest.mark.parametrize("length", [0, 63, 65])
def test_a_signature_of_the_wrong_length_is_a_signature_error(length: int) -> None:
    key = SigningKey.generate("k")
    message = b"message"
    signature = (key.sign(message) * 2)[:length]
    with pytest.raises(SignatureError, match="does not verify"):
        Verifier.of(key.public).verify(signature, message)


def test_a_signature_with_s_not_reduced_is_refused() -> None:
    """S + L verifies under the group law; RFC 8032 requires S < L, so it must be refused."""
    key = SigningKey.generate("k")
    message = b"message"
    sig = key.sign(message)
    order = 2**252 + 27742317777372353535851937790883648493
    s = int.from_bytes(sig[32:], "little") + order
    with pytest.raises(SignatureError):
        Verifier.of(key.public).verify(sig[:32] + s.to_bytes(32, "little"), message)
    Verifier.of(key.public).verify(sig, message)


def test_a_small_order_key_cannot_be_enrolled(ledger: Ledger) -> None:
    small = base64.b64encode(SMALL_ORDER_KEY).decode()
    size = ledger.size()
    with pytest.raises(InputError, match="prime-order"):
        ledger.enrol_key("forger", small, ["collector"])
    # the same enrolment as a signed entry (what a remote admin would push) is refused at ingest
    payload = {"name": "forger", "public_key": small, "key_id": PublicKey(SMALL_ORDER_KEY).key_id,
               "roles": ["collector"]}  # fmt: skip
    with pytest.raises(InputError, match="prime-order"):
        ledger.record("key.enrol", {"key": "forger"}, payload, key="admin")
    assert ledger.size() == size
