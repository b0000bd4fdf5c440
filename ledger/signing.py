"""Ed25519 keys, DSSE envelopes and key ids."""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NewType

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from nacl.bindings import (
    crypto_core_ed25519_is_valid_point,
    crypto_sign_BYTES,
    crypto_sign_open,
    crypto_sign_PUBLICKEYBYTES,
)
from nacl.exceptions import BadSignatureError

from ledger.atomic import write_atomic
from ledger.canonical import canonical_bytes, parse_canonical, parse_json
from ledger.errors import EnvelopeError, InputError, KeyNotFoundError, LedgerError, SignatureError
from ledger.hashing import blake3_hex

# cryptography's ``serialization`` (PEM, PKCS#8; it loads the SSH, cipher and curve modules too) is
# imported where keys are saved or loaded: reading and verifying entries does not need it.
#
# Keys are made and signatures written with ``cryptography`` (OpenSSL); every signature is checked with
# libsodium (PyNaCl), the one ``Verifier`` that ingest, ``ledger verify`` and the verdict all use: it
# checks an Ed25519 signature in about half OpenSSL's time (bench/bench_verify.py measures both), and it
# is the stricter of the two (it refuses small-order keys and non-canonical encodings), so nothing one
# path accepts can be refused by another.

__all__ = [
    "PAYLOAD_TYPE",
    "Envelope",
    "KeyId",
    "PublicKey",
    "SigningKey",
    "Verifier",
    "key_id_of",
    "pae",
    "parse_canonical_envelope",
    "parse_envelope",
    "sign_envelope",
]

PAYLOAD_TYPE = "application/vnd.evidence-ledger.entry+json"
KeyId = NewType("KeyId", str)


def b64e(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def b64d(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as e:
        raise EnvelopeError(f"{what} is not valid base64") from e


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE pre-authentication encoding: the exact bytes an Ed25519 signature covers."""
    t = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(t), t, len(payload), payload)


def key_id_of(raw_public: bytes) -> KeyId:
    """Key id: BLAKE3 of the raw 32-byte public key, first 32 hex characters."""
    return KeyId(blake3_hex(raw_public)[:32])


@dataclass(frozen=True)
class PublicKey:
    raw: bytes

    @property
    def key_id(self) -> KeyId:
        return key_id_of(self.raw)

    @property
    def b64(self) -> str:
        return b64e(self.raw)

    @classmethod
    def from_b64(cls, text: str) -> PublicKey:
        raw = b64d(text, "public key")
        if len(raw) != 32:
            raise InputError("an Ed25519 public key has 32 bytes")
        if not crypto_core_ed25519_is_valid_point(raw):
            # a small-order point "verifies" forged signatures on any message under lax verifiers
            raise InputError("not an Ed25519 public key: not a point of the prime-order group")
        return cls(raw)

    def verify(self, signature: bytes, message: bytes) -> None:
        Verifier.of(self).verify(signature, message)


@dataclass(frozen=True)
class Verifier:
    """A public key loaded once (and its id hashed once), to check many signatures with."""

    key_id: KeyId
    raw: bytes

    @classmethod
    def of(cls, key: PublicKey) -> Verifier:
        if len(key.raw) != crypto_sign_PUBLICKEYBYTES:
            raise ValueError(f"an Ed25519 public key has {crypto_sign_PUBLICKEYBYTES} bytes")
        return cls(key.key_id, bytes(key.raw))

    def verify(self, signature: bytes, message: bytes) -> None:
        if len(signature) != crypto_sign_BYTES:
            raise SignatureError(
                f"signature by key {self.key_id} does not verify (not {crypto_sign_BYTES} bytes)"
            )
        try:
            crypto_sign_open(bytes(signature) + message, self.raw)
        except BadSignatureError as e:
            raise SignatureError(f"signature by key {self.key_id} does not verify") from e

    def verify_envelope(self, env: Envelope) -> None:
        """Raise unless a signature by this key covers the PAE of the envelope's payload."""
        message = pae(env.payload_type, env.payload)
        for kid, sig in env.signatures:
            if kid == self.key_id:
                self.verify(sig, message)
                return
        raise SignatureError(f"envelope carries no signature by key {self.key_id}")


@dataclass(frozen=True)
class SigningKey:
    name: str
    private: Ed25519PrivateKey

    @classmethod
    def generate(cls, name: str) -> SigningKey:
        return cls(name, Ed25519PrivateKey.generate())

    @property
    def public(self) -> PublicKey:
        from cryptography.hazmat.primitives import serialization

        raw = self.private.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        return PublicKey(raw)

    @property
    def key_id(self) -> KeyId:
        return self.public.key_id

    def sign(self, message: bytes) -> bytes:
        return self.private.sign(message)

    def save(self, path: Path) -> None:
        """Write the private key as PKCS#8 PEM, readable by the owner only, atomically."""
        from cryptography.hazmat.primitives import serialization

        pem = self.private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        write_atomic(path, pem, mode=0o600)

    @classmethod
    def load(cls, name: str, path: Path) -> SigningKey:
        from cryptography.hazmat.primitives import serialization

        try:
            key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        except FileNotFoundError as e:
            raise KeyNotFoundError(f"no private key {name!r} at {path}") from e
        except ValueError as e:
            raise InputError(f"{path} is not a PEM private key: {e}") from e
        if not isinstance(key, Ed25519PrivateKey):
            raise InputError(f"{path} is not an Ed25519 key")
        return cls(name, key)


@dataclass(frozen=True)
class Envelope:
    """A parsed DSSE envelope: payload bytes are the canonical statement."""

    payload_type: str
    payload: bytes
    signatures: tuple[tuple[KeyId, bytes], ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "payload": b64e(self.payload),
            "payloadType": self.payload_type,
            "signatures": [{"keyid": k, "sig": b64e(s)} for k, s in self.signatures],
        }

    def canonical(self) -> bytes:
        """The bytes the log stores, hashes into the entry id and into the Merkle tree."""
        return canonical_bytes(self.to_json())

    @property
    def signer(self) -> KeyId:
        return self.signatures[0][0]

    def statement(self) -> Any:
        return parse_canonical(self.payload)

    def verify_with(self, key: PublicKey) -> None:
        """Raise unless a signature by ``key`` covers the PAE of this payload."""
        Verifier.of(key).verify_envelope(self)


def sign_envelope(statement: dict[str, Any], key: SigningKey) -> Envelope:
    payload = canonical_bytes(statement)
    sig = key.sign(pae(PAYLOAD_TYPE, payload))
    return Envelope(PAYLOAD_TYPE, payload, ((key.key_id, sig),))


_CANONICAL_ENVELOPE = re.compile(
    rb'\{"payload":"([A-Za-z0-9+/=]*)","payloadType":"'
    + re.escape(PAYLOAD_TYPE.encode())
    + rb'","signatures":\[\{"keyid":"([0-9a-f]*)","sig":"([A-Za-z0-9+/=]*)"\}\]\}'
)


def parse_canonical_envelope(data: bytes) -> Envelope | None:
    """The envelope ``data`` holds when ``data`` is its canonical form (``parse_envelope(data)`` succeeds
    and ``.canonical() == data``), else None: ``parse_envelope`` then says what is wrong. Cheaper than
    both: the bytes are parsed once and not re-serialised twice."""
    m = _CANONICAL_ENVELOPE.fullmatch(data)
    if m is not None:
        # bytes of this shape are the canonical JSON of the object they spell: sorted keys, no
        # whitespace, strings with no character JSON escapes; the base64 is checked to be canonical below
        payload_b64, keyid, sig_b64 = (g.decode("ascii") for g in m.groups())
        try:
            env = Envelope(
                PAYLOAD_TYPE, b64d(payload_b64, "payload"), ((KeyId(keyid), b64d(sig_b64, "signature")),)
            )
        except LedgerError:
            return None
    else:
        try:
            obj = parse_canonical(data)
            env = parse_envelope(obj)
        except LedgerError:
            return None
        payload_b64, sig_b64 = obj["payload"], obj["signatures"][0]["sig"]
    # ``canonical()`` re-encodes the base64: the stored strings must be what that writes
    if payload_b64 != b64e(env.payload) or sig_b64 != b64e(env.signatures[0][1]):
        return None
    return env


def parse_envelope(data: bytes | dict[str, Any]) -> Envelope:
    """Parse a DSSE envelope (bytes or decoded JSON) strictly; exactly one signature."""
    obj = parse_json(data) if isinstance(data, bytes | str) else data
    if not isinstance(obj, dict):
        raise EnvelopeError("envelope must be a JSON object")
    extra = set(obj) - {"payload", "payloadType", "signatures"}
    if extra:
        raise EnvelopeError(f"unknown envelope fields: {sorted(extra)}")
    ptype = obj.get("payloadType")
    if ptype != PAYLOAD_TYPE:
        raise EnvelopeError(f"payloadType must be {PAYLOAD_TYPE!r}, got {ptype!r}")
    payload_b64 = obj.get("payload")
    if not isinstance(payload_b64, str):
        raise EnvelopeError("envelope payload must be a base64 string")
    sigs = obj.get("signatures")
    if not isinstance(sigs, list) or len(sigs) != 1:
        raise EnvelopeError("envelope must carry exactly one signature")
    parsed: list[tuple[KeyId, bytes]] = []
    for s in sigs:
        if not isinstance(s, dict) or set(s) != {"keyid", "sig"}:
            raise EnvelopeError("each signature must be {keyid, sig}")
        if not isinstance(s["keyid"], str) or not isinstance(s["sig"], str):
            raise EnvelopeError("signature keyid and sig must be strings")
        parsed.append((KeyId(s["keyid"]), b64d(s["sig"], "signature")))
    return Envelope(ptype, b64d(payload_b64, "payload"), tuple(parsed))
