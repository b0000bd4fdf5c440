"""The log's own record: hash chain, RFC 6962 Merkle tree, proofs and signed-note checkpoints.

Everything here is pure: hashes and bytes in, hashes, proofs and notes out.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NewType

from ledger.canonical import canonical_bytes
from ledger.errors import InputError, ProofError, SignatureError
from ledger.hashing import blake3_hex
from ledger.signing import PublicKey, SigningKey

__all__ = [
    "GENESIS_PREV",
    "Checkpoint",
    "EntryId",
    "MerkleTree",
    "chain_hash",
    "consistency_proof",
    "entry_id_of",
    "inclusion_proof",
    "leaf_hash",
    "merkle_root",
    "note_key_hash",
    "parse_checkpoint",
    "sign_checkpoint",
    "verify_consistency",
    "verify_inclusion",
]

GENESIS_PREV = "0" * 64

EntryId = NewType("EntryId", str)
"""An entry's id: 64 hex characters of BLAKE3 over its canonical envelope bytes."""


def entry_id_of(envelope_bytes: bytes) -> EntryId:
    """The id of the entry whose stored (canonical) envelope bytes these are: the only place it is made."""
    return EntryId(blake3_hex(envelope_bytes))


_EMPTY_ROOT = hashlib.sha256(b"").digest()


def chain_hash(seq: int, entry_id: str, prev: str, logged_at: str) -> str:
    """Link one log record to its predecessor: BLAKE3 over the canonical record."""
    record = {"entry_id": entry_id, "logged_at": logged_at, "prev": prev, "seq": seq}
    return blake3_hex(canonical_bytes(record))


def leaf_hash(envelope_bytes: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + envelope_bytes).digest()


def _node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """Largest power of two strictly less than n (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


def merkle_root(leaves: Sequence[bytes]) -> bytes:
    """MTH over leaf hashes, computed bottom-up in O(n)."""
    if not leaves:
        return _EMPTY_ROOT
    level = list(leaves)
    # RFC 6962's left-heavy split equals pairing adjacent nodes and carrying an odd last node up.
    while len(level) > 1:
        nxt = [_node(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


class MerkleTree:
    """An append-only RFC 6962 tree that keeps every perfect subtree hash.

    ``levels[k][i]`` is the hash of leaves ``[i * 2**k, (i + 1) * 2**k)``, so the root at any size and the
    nodes of any proof come from at most ``2 log n`` cached hashes instead of rehashing the whole log.
    """

    def __init__(self, leaves: Sequence[bytes] = ()) -> None:
        self.levels: list[list[bytes]] = [[]]
        self.extend(leaves)

    def __len__(self) -> int:
        return len(self.levels[0])

    def append(self, leaf: bytes) -> None:
        self.levels[0].append(leaf)
        k = 0
        while len(self.levels[k]) % 2 == 0:
            if len(self.levels) == k + 1:
                self.levels.append([])
            level = self.levels[k]
            self.levels[k + 1].append(_node(level[-2], level[-1]))
            k += 1

    def extend(self, leaves: Sequence[bytes]) -> None:
        for leaf in leaves:
            self.append(leaf)

    def range_hash(self, lo: int, hi: int) -> bytes:
        """MTH(D[lo:hi]): fold the greedy power-of-two chunks of the range from the right."""
        if hi > len(self):
            raise InputError(f"range {lo}..{hi} beyond tree size {len(self)}")
        if hi <= lo:
            return _EMPTY_ROOT
        chunks: list[bytes] = []
        pos, rem = lo, hi - lo
        while rem:
            b = rem.bit_length() - 1
            size = 1 << b
            if pos % size == 0:
                chunks.append(self.levels[b][pos >> b])
            else:
                chunks.append(merkle_root(self.levels[0][pos : pos + size]))
            pos += size
            rem -= size
        h = chunks[-1]
        for c in reversed(chunks[:-1]):
            h = _node(c, h)
        return h

    def root(self, size: int | None = None) -> bytes:
        return self.range_hash(0, len(self) if size is None else size)

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """RFC 6962 PATH(m, D[n])."""
        n = len(self) if size is None else size
        if not 0 <= index < n or n > len(self):
            raise InputError(f"leaf {index} is not in a tree of size {n}")
        lo, hi, m = 0, n, index
        stack: list[bytes] = []
        while hi - lo > 1:
            k = _split(hi - lo)
            if m < k:
                stack.append(self.range_hash(lo + k, hi))
                hi = lo + k
            else:
                stack.append(self.range_hash(lo, lo + k))
                lo, m = lo + k, m - k
        return list(reversed(stack))

    def consistency_proof(self, old_size: int, size: int | None = None) -> list[bytes]:
        """RFC 6962 PROOF(m, D[n])."""
        n = len(self) if size is None else size
        if not 0 < old_size <= n <= len(self):
            raise InputError(f"consistency needs 0 < old size ({old_size}) <= new size ({n})")

        def sub(m: int, lo: int, hi: int, complete: bool) -> list[bytes]:
            if m == hi - lo:
                return [] if complete else [self.range_hash(lo, hi)]
            k = _split(hi - lo)
            if m <= k:
                return [*sub(m, lo, lo + k, complete), self.range_hash(lo + k, hi)]
            return [*sub(m - k, lo + k, hi, False), self.range_hash(lo, lo + k)]

        return sub(old_size, 0, n, True)


def inclusion_proof(index: int, leaves: Sequence[bytes]) -> list[bytes]:
    """RFC 6962 PATH(m, D[n]) over a list of leaf hashes."""
    return MerkleTree(leaves).inclusion_proof(index)


def consistency_proof(old_size: int, leaves: Sequence[bytes]) -> list[bytes]:
    """RFC 6962 PROOF(m, D[n]) over a list of leaf hashes."""
    return MerkleTree(leaves).consistency_proof(old_size)


def verify_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes) -> None:
    """RFC 9162 §2.1.3.2; raises ProofError unless ``leaf`` is at ``index`` in the tree with ``root``."""
    if not 0 <= index < size:
        raise ProofError(f"index {index} outside tree of size {size}")
    fn, sn = index, size - 1
    r = leaf
    for p in proof:
        if sn == 0:
            raise ProofError("inclusion proof too long")
        if fn % 2 == 1 or fn == sn:
            r = _node(p, r)
            if fn % 2 == 0:
                while fn % 2 == 0 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = _node(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("inclusion proof too short")
    if r != root:
        raise ProofError("inclusion proof does not lead to the checkpoint's root")


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> None:
    """RFC 9162 §2.1.4.2; raises ProofError unless the old tree is a prefix of the new one."""
    if old_size == new_size:
        if proof or old_root != new_root:
            raise ProofError("same size but different roots (a forked log)")
        return
    if not 0 < old_size < new_size:
        raise ProofError(f"bad sizes {old_size} -> {new_size}")
    p = list(proof)
    if old_size & (old_size - 1) == 0:  # exact power of two: the old root is the first node
        p.insert(0, old_root)
    if not p:
        raise ProofError("empty consistency proof")
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = p[0]
    for c in p[1:]:
        if sn == 0:
            raise ProofError("consistency proof too long")
        if fn & 1 or fn == sn:
            fr = _node(c, fr)
            sr = _node(c, sr)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = _node(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("consistency proof too short")
    if fr != old_root:
        raise ProofError("consistency proof does not match the old checkpoint (a forked log)")
    if sr != new_root:
        raise ProofError("consistency proof does not match the new checkpoint")


# --- C2SP signed-note checkpoints ------------------------------------------------------------------


def note_key_hash(name: str, public: PublicKey) -> bytes:
    """C2SP signed-note key hash for Ed25519: SHA-256(name || '\\n' || 0x01 || key)[:4]."""
    return hashlib.sha256(name.encode() + b"\n\x01" + public.raw).digest()[:4]


@dataclass(frozen=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes
    note: str  # the full signed note text

    @property
    def body(self) -> str:
        return f"{self.origin}\n{self.size}\n{base64.b64encode(self.root).decode()}\n"

    def to_json(self) -> dict[str, Any]:
        return {"origin": self.origin, "size": self.size, "root": self.root.hex(), "note": self.note}


def sign_checkpoint(origin: str, size: int, root: bytes, key: SigningKey) -> Checkpoint:
    body = f"{origin}\n{size}\n{base64.b64encode(root).decode()}\n"
    sig = key.sign(body.encode())
    line = base64.b64encode(note_key_hash(key.name, key.public) + sig).decode()
    note = f"{body}\n\u2014 {key.name} {line}\n"
    return Checkpoint(origin, size, root, note)


def parse_checkpoint(note: str, key_name: str, public: PublicKey) -> Checkpoint:
    """Parse a signed note and verify the signature by ``key_name``/``public``; raise otherwise."""
    body, sep, sigs = note.partition("\n\n")
    if not sep:
        raise ProofError("checkpoint note has no signature block")
    lines = body.split("\n")
    if len(lines) < 3:
        raise ProofError("checkpoint body needs origin, size and root")
    origin, size_text, root_text = lines[0], lines[1], lines[2]
    try:
        size = int(size_text)
        root = base64.b64decode(root_text, validate=True)
    except (ValueError, binascii.Error) as e:
        raise ProofError(f"malformed checkpoint: {e}") from e
    if size < 0 or len(root) != 32 or str(size) != size_text:
        raise ProofError("malformed checkpoint size or root")
    try:
        signed = (body + "\n").encode()
        want = note_key_hash(key_name, public)
    except UnicodeEncodeError as e:
        raise ProofError(f"malformed checkpoint: {e}") from e
    for line in sigs.splitlines():
        parts = line.split(" ")
        if len(parts) != 3 or parts[0] != "\u2014" or parts[1] != key_name:
            continue
        try:
            blob = base64.b64decode(parts[2], validate=True)
        except ValueError:  # binascii.Error, or non-ASCII text
            continue
        if blob[:4] != want:
            continue
        try:
            public.verify(blob[4:], signed)
        except SignatureError as e:
            raise ProofError("checkpoint signature does not verify") from e
        return Checkpoint(origin, size, root, note)
    raise ProofError(f"checkpoint carries no signature by {key_name}")
