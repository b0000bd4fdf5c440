"""May this envelope stand at this log position? One answer, for ingest, verification and the policy.

In the style of python-tuf's trusted metadata set: a ``TrustedLog`` is fed the log's entries in order;
``admit`` decides one envelope at the next position against the keys enrolled before it (signature valid,
key known, not revoked and within its validity window at that time, a role that may sign the kind) and
raises a coded ``LedgerError`` when it may not stand; ``update`` then folds a ``key.*`` entry into the keys.

Ingest raises those errors, ``ledger verify`` collects them as problems, and the policy turns the same
``TrustProblem`` into a rejection rule (``ledger.policy.rules``). Pure: no database, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from ledger.entries import KIND_ROLES
from ledger.errors import (
    KeyRevokedError,
    LedgerError,
    LogOrderError,
    RoleError,
    SchemaError,
    SignatureError,
    UnknownSignerError,
    UntrustedRootError,
)
from ledger.keyring import KeyRecord, Keyring
from ledger.signing import Envelope, KeyId, PublicKey, parse_envelope

__all__ = [
    "Fault",
    "TrustProblem",
    "TrustedLog",
    "authorise",
    "check_root",
    "replay_keys",
    "trust_problem",
]


class Fault(StrEnum):
    """Why a key may not sign a kind at a time (signature validity is checked on its own)."""

    UNKNOWN_SIGNER = "unknown-signer"
    REVOKED = "revoked"
    NOT_YET_VALID = "not-yet-valid"
    EXPIRED = "expired"
    WRONG_ROLE = "wrong-role"


@dataclass(frozen=True)
class TrustProblem:
    """The one answer "no" to: may ``key_id`` sign ``kind`` at time ``at``?"""

    fault: Fault
    key_id: str
    kind: str
    at: datetime
    record: KeyRecord | None
    allowed: frozenset[str]

    def error(self) -> SignatureError:
        """The coded error ingest raises and ``ledger verify`` reports."""
        rec = self.record
        if self.fault is Fault.UNKNOWN_SIGNER or rec is None:
            return UnknownSignerError(f"key {self.key_id} is not enrolled in this ledger")
        if self.fault is Fault.REVOKED:
            assert rec.revoked_at is not None
            return KeyRevokedError(
                f"key {rec.name} ({self.key_id}) was revoked at {rec.revoked_at.isoformat()}"
                + (f": {rec.revoke_reason}" if rec.revoke_reason else "")
            )
        if self.fault is Fault.NOT_YET_VALID:
            assert rec.valid_from is not None
            return KeyRevokedError(f"key {rec.name} is not valid before {rec.valid_from.isoformat()}")
        if self.fault is Fault.EXPIRED:
            assert rec.valid_until is not None
            return KeyRevokedError(f"key {rec.name} expired at {rec.valid_until.isoformat()}")
        return RoleError(
            f"key {rec.name} has roles {sorted(rec.roles)}; {self.kind} needs one of {sorted(self.allowed)}"
        )


def trust_problem(
    ring: Keyring, key_id: str, kind: str, at: datetime, *, allowed: Iterable[str] | None = None
) -> TrustProblem | None:
    """Why ``key_id`` may not sign ``kind`` at ``at`` by the keys of ``ring``, or None when it may.

    ``allowed``: the roles that may sign the kind (default: the kind's roles, ``KIND_ROLES``); a policy
    may name its own. Checked in this order: enrolled, revoked, validity window, role.
    """
    roles = frozenset(KIND_ROLES.get(kind, frozenset()) if allowed is None else allowed)
    rec = ring.keys.get(KeyId(key_id))
    if rec is None:
        return TrustProblem(Fault.UNKNOWN_SIGNER, key_id, kind, at, None, roles)
    fault: Fault | None = None
    if rec.revoked_at is not None and at >= rec.revoked_at:
        fault = Fault.REVOKED
    elif rec.valid_from is not None and at < rec.valid_from:
        fault = Fault.NOT_YET_VALID
    elif rec.valid_until is not None and at >= rec.valid_until:
        fault = Fault.EXPIRED
    elif not rec.roles & roles:
        fault = Fault.WRONG_ROLE
    return None if fault is None else TrustProblem(fault, key_id, kind, at, rec, roles)


def authorise(ring: Keyring, key_id: str, kind: str, at: datetime) -> KeyRecord:
    """Raise the coded error unless ``key_id`` may sign ``kind`` at ``at``; returns its record."""
    problem = trust_problem(ring, key_id, kind, at)
    if problem is not None:
        raise problem.error()
    return ring.get(key_id)


def check_root(signer: str, kind: str, payload: Mapping[str, Any] | None, root_key_id: str) -> PublicKey:
    """The genesis rule: the first entry enrols the home's root key as an admin, signed by that same key.

    Returns the root's public key (the one its signature must verify with); raises ``UntrustedRootError``.
    """
    p = payload or {}
    if kind != "key.enrol" or "admin" not in p.get("roles", []):
        raise UntrustedRootError("the first entry of a ledger must enrol an admin key")
    if p.get("key_id") != signer or signer != root_key_id:
        raise UntrustedRootError("the first entry must be self-signed by the home's root key")
    try:
        return PublicKey.from_b64(p["public_key"])
    except (KeyError, TypeError) as e:
        raise UntrustedRootError(f"the first entry enrols no public key: {e}") from e


def replay_keys(ring: Keyring, rows: Iterable[tuple[int, bytes]], size: int) -> Keyring:
    """Fold ``(seq, envelope)`` of ``key.*`` entries (in sequence order) into ``ring``; it then stands at
    ``size``. The one way a keyring "as of a log size" is made."""
    for seq, env_bytes in rows:
        st = parse_envelope(env_bytes).statement()
        ring.apply(seq, st["kind"], st["payload"])
    ring.seq = max(ring.seq, size)
    return ring


class TrustedLog:
    """The keys trusted at one log position, advanced entry by entry in log order.

    ``admit(seq, …)`` refuses (raises) an envelope that may not stand at ``seq``; ``update`` folds an admitted
    ``key.*`` entry. ``ring`` is the keyring as of the entries fed so far.
    """

    def __init__(
        self, root_key_id: str, ring: Keyring | None = None, *, last_logged_at: datetime | None = None
    ) -> None:
        self.root_key_id = root_key_id
        self.ring = ring if ring is not None else Keyring()
        # the log time of the last entry fed: ``logged_at`` never decreases along the log, so revocation
        # and validity, judged at ``logged_at``, are judged in log order
        self.last_logged_at = last_logged_at

    def in_order(self, at: datetime) -> None:
        """Raise ``LogOrderError`` when ``at`` is earlier than the log time of the entry before."""
        if self.last_logged_at is not None and at < self.last_logged_at:
            raise LogOrderError(
                f"logged at {at.isoformat()}, before the entry ahead of it "
                f"({self.last_logged_at.isoformat()})"
            )

    def signer_key(self, seq: int, signer: str, kind: str, payload: Mapping[str, Any] | None) -> PublicKey:
        """The public key the envelope at ``seq`` must verify with (the trust root's, for seq 0)."""
        if seq == 0:
            return check_root(signer, kind, payload, self.root_key_id)
        return self.ring.get(signer).public

    def authorise(
        self, seq: int, signer: str, kind: str, payload: Mapping[str, Any] | None, at: datetime
    ) -> None:
        """The order-dependent part of ``admit`` but the log-time order (``in_order``): the genesis rule, or
        key state and role at ``at`` (the keys as of the entries before ``seq``)."""
        if seq == 0:
            check_root(signer, kind, payload, self.root_key_id)
        else:
            authorise(self.ring, signer, kind, at)

    def admit(
        self,
        seq: int,
        envelope: Envelope,
        kind: str,
        payload: Mapping[str, Any],
        at: datetime,
        *,
        verified: PublicKey | None = None,
    ) -> None:
        """Raise unless ``envelope`` (a statement of ``kind`` with ``payload``) may stand at ``seq``, logged
        at ``at``: its signature verifies with the signer's key, which may sign the kind then, and ``at`` is
        not earlier than the entry before it.

        ``verified``: the public key the signature was already checked with (the sequencer checks it
        before ordering, with the keys it knew then). A key id is the hash of its public key, so that
        check stands wherever the entry lands; the signature is verified again only when the key this
        position trusts is another one (or none was checked)."""
        self.in_order(at)
        key = self.signer_key(seq, envelope.signer, kind, payload)
        if verified is None or verified != key:
            envelope.verify_with(key)
        if seq != 0:
            authorise(self.ring, envelope.signer, kind, at)

    def update(self, seq: int, kind: str, payload: Mapping[str, Any], at: datetime | None = None) -> None:
        """Fold an admitted entry: ``key.*`` entries change the keys; others only advance the position (and
        the log time, ``at``)."""
        if at is not None and (self.last_logged_at is None or at > self.last_logged_at):
            self.last_logged_at = at
        if kind.startswith("key."):
            try:
                self.ring.apply(seq, kind, dict(payload))
            except LedgerError:
                raise
            except Exception as e:
                raise SchemaError(f"{kind}: {e}") from e
        self.ring.seq = max(self.ring.seq, seq + 1)
