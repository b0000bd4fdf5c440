"""Offline verification of proof documents: needs only the log's public key (and a held checkpoint)."""

from __future__ import annotations

import base64
from typing import Any

from ledger.errors import ProofError
from ledger.log import entry_id_of, leaf_hash, parse_checkpoint, verify_consistency, verify_inclusion
from ledger.signing import PublicKey

__all__ = ["verify_proof_document"]


def _hashes(doc: dict[str, Any]) -> list[bytes]:
    try:
        return [bytes.fromhex(h) for h in doc["hashes"]]
    except (KeyError, TypeError, ValueError) as e:
        raise ProofError("proof hashes must be a list of hex strings") from e


def verify_proof_document(
    doc: dict[str, Any], public_key_b64: str, key_name: str = "log", held_checkpoint: str | None = None
) -> dict[str, Any]:
    """Verify an inclusion or consistency proof; returns a summary or raises ProofError."""
    if not isinstance(doc, dict):
        raise ProofError("a proof document must be a JSON object")
    try:
        return _verify_document(doc, public_key_b64, key_name, held_checkpoint)
    except (KeyError, TypeError, ValueError, AttributeError) as e:  # a field missing or of the wrong type
        raise ProofError(f"malformed proof document: {type(e).__name__}: {e}") from e


def _verify_document(
    doc: dict[str, Any], public_key_b64: str, key_name: str, held_checkpoint: str | None
) -> dict[str, Any]:
    pub = PublicKey.from_b64(public_key_b64)
    kind = doc.get("type")
    if kind == "inclusion":
        cp = parse_checkpoint(doc["checkpoint"], key_name, pub)
        if held_checkpoint is not None:
            held = parse_checkpoint(held_checkpoint, key_name, pub)
            if (held.size, held.root) != (cp.size, cp.root):
                raise ProofError("the proof's checkpoint is not the checkpoint you hold")
        envelope = doc.get("envelope")
        if isinstance(envelope, str):
            data = envelope.encode()
            leaf = leaf_hash(data)
            if doc.get("entry_id") and entry_id_of(data) != doc["entry_id"]:
                raise ProofError("the envelope does not hash to the entry id")
        else:
            leaf = bytes.fromhex(doc["leaf_hash"])
        verify_inclusion(int(doc["leaf_index"]), cp.size, leaf, _hashes(doc), cp.root)
        return {
            "ok": True,
            "type": "inclusion",
            "entry_id": doc.get("entry_id"),
            "tree_size": cp.size,
            "root": base64.b64encode(cp.root).decode(),
            "detail": f"entry {doc.get('entry_id', '?')} is leaf {doc['leaf_index']} of tree size {cp.size}",
        }
    if kind == "consistency":
        old = parse_checkpoint(doc["old_checkpoint"], key_name, pub)
        new = parse_checkpoint(doc["new_checkpoint"], key_name, pub)
        if held_checkpoint is not None:
            held = parse_checkpoint(held_checkpoint, key_name, pub)
            if (held.size, held.root) != (old.size, old.root):
                raise ProofError("the proof's old checkpoint is not the checkpoint you hold (forked log?)")
        verify_consistency(old.size, new.size, old.root, new.root, _hashes(doc))
        return {
            "ok": True,
            "type": "consistency",
            "old_size": old.size,
            "new_size": new.size,
            "detail": f"tree size {old.size} is a prefix of tree size {new.size}",
        }
    raise ProofError(f"unknown proof type {kind!r}")
