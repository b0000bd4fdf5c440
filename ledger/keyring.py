"""The enrolled keys, derived by replaying the log's ``key.*`` entries in sequence order.

Whether a key may sign a kind at a time is decided in ``ledger.trust``."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ledger.entries import parse_time
from ledger.errors import KeyAlreadyEnrolledError, SchemaError, UnknownSignerError
from ledger.signing import KeyId, PublicKey

__all__ = ["KeyRecord", "Keyring"]


@dataclass
class KeyRecord:
    key_id: KeyId
    name: str
    public: PublicKey
    roles: set[str]
    enrolled_seq: int
    valid_from: datetime | None = None
    valid_until: datetime | None = None
    revoked_at: datetime | None = None
    revoke_reason: str = ""
    # the keys rotated to this one (``key.rotate``): the signer they handed over is this key's too
    rotated_from: list[KeyId] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "key_id": self.key_id,
            "name": self.name,
            "public_key": self.public.b64,
            "roles": sorted(self.roles),
            "enrolled_seq": self.enrolled_seq,
            "valid_from": self.valid_from.isoformat() if self.valid_from else None,
            "valid_until": self.valid_until.isoformat() if self.valid_until else None,
            "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None,
            "revoke_reason": self.revoke_reason or None,
            "rotated_from": sorted(self.rotated_from),
        }


@dataclass
class Keyring:
    """The enrolled keys as of ``seq`` (the size of the log replayed so far)."""

    keys: dict[KeyId, KeyRecord] = field(default_factory=dict)
    seq: int = 0

    def copy(self) -> Keyring:
        return copy.deepcopy(self)

    def get(self, key_id: str) -> KeyRecord:
        rec = self.keys.get(KeyId(key_id))
        if rec is None:
            raise UnknownSignerError(f"key {key_id} is not enrolled in this ledger")
        return rec

    def identity(self, key_id: str) -> str:
        """Who signs with ``key_id``: the first enrolled key (least ``enrolled_seq``, then key id) of the
        keys ``key.rotate`` entries link it to, either way — a rotation hands one signer's identity to a new
        key, so an old key and its successors are one signer when the policy asks whether two entries were
        signed by the same key (an independent review, a key's own supersession). A key never rotated is
        its own identity; an unknown one too."""
        start = KeyId(key_id)
        if start not in self.keys:
            return key_id
        successors: dict[KeyId, list[KeyId]] = {}
        for rec in self.keys.values():
            for old in rec.rotated_from:
                successors.setdefault(old, []).append(rec.key_id)
        seen = {start}
        todo = [start]
        while todo:
            k = todo.pop()
            found = self.keys.get(k)
            for other in [*(found.rotated_from if found is not None else []), *successors.get(k, [])]:
                if other not in seen:
                    seen.add(other)
                    todo.append(other)
        first = min(
            (self.keys[k] for k in seen if k in self.keys), key=lambda r: (r.enrolled_seq, str(r.key_id))
        )
        return str(first.key_id)

    def by_name(self, name: str) -> KeyRecord | None:
        found = [k for k in self.keys.values() if k.name == name]
        return found[-1] if found else None

    def apply(self, seq: int, kind: str, payload: dict[str, Any]) -> None:
        """Fold one ``key.*`` entry into the ring (payloads are already schema-validated)."""
        if kind == "key.enrol":
            public = PublicKey.from_b64(payload["public_key"])
            if public.key_id != payload["key_id"]:
                raise SchemaError(f"key.enrol key_id {payload['key_id']} does not match its public key")
            if public.key_id in self.keys:
                held = self.keys[public.key_id].name
                raise KeyAlreadyEnrolledError(f"key {public.key_id} is already enrolled as {held!r}")
            self.keys[public.key_id] = KeyRecord(
                key_id=public.key_id,
                name=payload["name"],
                public=public,
                roles=set(payload["roles"]),
                enrolled_seq=seq,
                valid_from=parse_time(payload["valid_from"]) if payload.get("valid_from") else None,
                valid_until=parse_time(payload["valid_until"]) if payload.get("valid_until") else None,
            )
        elif kind == "key.grant":
            self.get(payload["key_id"]).roles.update(payload["roles"])
        elif kind == "key.revoke":
            rec = self.get(payload["key_id"])
            at = parse_time(payload["effective_at"])
            if rec.revoked_at is None or at < rec.revoked_at:
                rec.revoked_at = at
                rec.revoke_reason = payload.get("reason", "")
        elif kind == "key.rotate":
            old = self.get(payload["old_key_id"])
            new = self.get(payload["new_key_id"])
            if old.key_id not in new.rotated_from and old.key_id != new.key_id:
                new.rotated_from.append(old.key_id)
            at = parse_time(payload["effective_at"])
            if old.revoked_at is None or at < old.revoked_at:
                old.revoked_at = at
                old.revoke_reason = f"rotated to {payload['new_key_id']}"
        self.seq = max(self.seq, seq + 1)
