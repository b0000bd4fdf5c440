"""DSSE envelopes and Ed25519 signatures."""

from __future__ import annotations

import base64
import json

import pytest

from ledger.errors import EnvelopeError, SignatureError
from ledger.signing import PAYLOAD_TYPE, SigningKey, pae, parse_envelope, sign_envelope


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
