"""The log's own record: hash chain, RFC 6962 Merkle tree, proofs and signed-note checkpoints.

Everything here is pure: hashes and bytes in, hashes, proofs and notes out.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, NewType

from ledger.canonical import canonical_bytes, parse_canonical
from ledger.errors import (
    ChainBrokenError,
    InputError,
    LedgerError,
    LogFormatError,
    ProofError,
    SignatureError,
)
from ledger.hashing import blake3_hex
from ledger.signing import PublicKey, SigningKey

__all__ = [
    "GENESIS_PREV",
    "LOG_FORMAT",
    "MAX_CLOCK_SKEW",
    "MAX_RECORD_BYTES",
    "Checkpoint",
    "EntryId",
    "HeldFault",
    "LogRecord",
    "MerkleTree",
    "Receipt",
    "ReceiptClaim",
    "chain_hash",
    "checked_leaf",
    "consistency_proof",
    "entry_id_of",
    "held_fault",
    "inclusion_proof",
    "leaf_hash",
    "merkle_root",
    "note_key_hash",
    "parse_checkpoint",
    "parse_receipt",
    "parse_record",
    "parse_verifier_key",
    "receipt_claim",
    "receipt_names",
    "receipt_of_log",
    "receipt_place",
    "record_leaf",
    "sign_checkpoint",
    "sign_receipt",
    "verifier_key",
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


def leaf_hash(data: bytes) -> bytes:
    """RFC 6962 leaf hash of ``data``: SHA-256(0x00 || data). The log's leaves are its record bytes."""
    return hashlib.sha256(b"\x00" + data).digest()


# --- the log record: what each Merkle leaf commits -----------------------------------------------------

LOG_FORMAT = 2
"""The log format. 1: each leaf was the bare envelope (nothing committed ``logged_at`` or the position).
2: each leaf is a ``LogRecord`` (index, ``logged_at``, entry id, kind, signer), so a checkpoint commits
the time and position that revocation and validity are judged at; checkpoint key name = the origin."""

# how far ahead of the sequencer's clock the head's log time may be and still be carried forward: a clock
# stepped back (NTP, a VM resumed) logs at the head's time, as the log's time never runs back; a head a day
# or more ahead (2099: a clock set wrong once) would date every later entry so, and is refused
# (``logged-at-ahead``); ``ledger verify`` names an entry logged that far in its own future
MAX_CLOCK_SKEW = timedelta(days=1)
"""How far ahead of its clock a log time may be and still be trusted: the sequencer refuses to inherit
a head's log time later than its clock plus this (``LogClockAheadError``: a rewritten or a wrong time
would be every later entry's), and ``ledger verify`` names an entry logged later than its run's clock
plus this (``logged-at-future``)."""

MAX_RECORD_BYTES = 65535  # a C2SP entry bundle carries entries of at most 2^16 - 1 bytes

_RECORD_FIELDS = {"v", "index", "logged_at", "entry_id", "kind", "signer"}


@dataclass(frozen=True)
class LogRecord:
    """The log's own record of one entry: the bytes its Merkle leaf hashes (RFC 8785 canonical JSON).

    ``entry_id`` is BLAKE3 of the stored envelope bytes: the envelope is fetched by that id and checked
    against the record; ``kind`` and ``signer`` are what the log indexed it under.
    """

    index: int
    logged_at: str
    entry_id: str
    kind: str
    signer: str

    def to_json(self) -> dict[str, Any]:
        return {
            "v": LOG_FORMAT,
            "index": self.index,
            "logged_at": self.logged_at,
            "entry_id": self.entry_id,
            "kind": self.kind,
            "signer": self.signer,
        }

    def to_bytes(self) -> bytes:
        # made once per record (the sequencer's leaf, the receipt's body and its JSON each ask): the
        # record is frozen, so its bytes are too
        data: bytes | None = self.__dict__.get("_bytes")
        if data is None:
            data = canonical_bytes(self.to_json())
            if len(data) > MAX_RECORD_BYTES:
                raise InputError(f"log record of {len(data)} bytes exceeds {MAX_RECORD_BYTES} bytes")
            object.__setattr__(self, "_bytes", data)
        return data

    def leaf(self) -> bytes:
        return leaf_hash(self.to_bytes())

    def check_envelope(self, envelope_bytes: bytes) -> None:
        """Raise ``ProofError`` unless ``envelope_bytes`` is the envelope this record names."""
        if entry_id_of(envelope_bytes) != self.entry_id:
            raise ProofError(f"the envelope does not hash to the entry id {self.entry_id} the record names")


def parse_record(data: bytes) -> LogRecord:
    """A log record from its canonical bytes; ``ProofError`` for anything else (another format included)."""
    if len(data) > MAX_RECORD_BYTES:
        raise ProofError(f"log record of {len(data)} bytes exceeds {MAX_RECORD_BYTES} bytes")
    try:
        doc = parse_canonical(data)
    except LedgerError as e:
        raise ProofError(f"log record is not canonical JSON: {e.message}") from e
    if not isinstance(doc, dict) or set(doc) != _RECORD_FIELDS:
        raise ProofError(f"a log record has exactly the fields {sorted(_RECORD_FIELDS)}")
    if doc["v"] != LOG_FORMAT:
        raise ProofError(f"log record format {doc['v']!r} is not {LOG_FORMAT}")
    index = doc["index"]
    if type(index) is not int or index < 0:
        raise ProofError("log record index must be a non-negative integer")
    texts = [doc[k] for k in ("logged_at", "entry_id", "kind", "signer")]
    if not all(isinstance(t, str) for t in texts):
        raise ProofError("log record logged_at, entry_id, kind and signer must be strings")
    if len(doc["entry_id"]) != 64 or any(c not in "0123456789abcdef" for c in doc["entry_id"]):
        raise ProofError("log record entry_id must be 64 lowercase hex characters")
    return LogRecord(index, doc["logged_at"], doc["entry_id"], doc["kind"], doc["signer"])


def record_leaf(record_bytes: bytes) -> bytes:
    """The Merkle leaf hash of a log record."""
    return leaf_hash(record_bytes)


def checked_leaf(seq: int, entry_id: str, record: bytes | None, column: object) -> bytes:
    """The Merkle leaf of the row at ``seq``: its ``leaf_hash`` column, served only where it is the hash of
    the log record the row holds (``record_leaf``) — the one check every reader of leaves applies (the
    service's ``RepoTiles`` and the read-only ``ledger.reads``). ``ChainBrokenError`` naming the entry for a
    leaf hash rewritten behind the log's back (or not a hash), or a record rewritten (not the one its leaf
    commits); ``LogFormatError`` for a row without a record (log format 1, ``record`` None)."""
    if record is None:
        raise LogFormatError(
            f"the entry at seq {seq} ({entry_id}) has no log record (log format 1): its leaf cannot be "
            "checked",
            hint="run `ledger migrate`",
        )
    want = record_leaf(record)
    if not isinstance(column, str) or column != want.hex():
        raise ChainBrokenError(
            f"the stored log record at seq {seq} does not hash to its Merkle leaf, the leaf hash of its row "
            f"(entry {entry_id}) {str(column)[:16]!r}… (SHA-256(0x00 || record) = {want.hex()[:16]}…): its "
            "record or its leaf hash was rewritten behind the log's back; no tile, proof or checkpoint "
            "is served from it",
            hint="run `ledger verify` on the log's home (it names what changed); restore the database "
            "from a backup the checkpoint this home holds vouches for",
        )
    return want


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
    """RFC 9162 §2.1.4.2; raises ProofError unless the old tree is a prefix of the new one. The empty tree
    (size 0, whose root is the hash of nothing) is a prefix of every tree: its proof is empty."""
    if old_size == 0 < new_size:
        if proof:
            raise ProofError("a consistency proof from the empty tree (size 0) is empty")
        if old_root != _EMPTY_ROOT:
            raise ProofError("the old checkpoint of size 0 does not name the empty tree's root")
        return
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


def verifier_key(name: str, public: PublicKey) -> str:
    """The C2SP signed-note verifier key: ``<name>+<hex key hash>+<base64(0x01 || public key)>``."""
    _check_key_name(name)
    blob = base64.b64encode(b"\x01" + public.raw).decode()
    return f"{name}+{note_key_hash(name, public).hex()}+{blob}"


def parse_verifier_key(vkey: str) -> tuple[str, PublicKey]:
    """(name, public key) of a C2SP signed-note Ed25519 verifier key; ``ProofError`` when it is not one
    or its key hash does not match its name and key."""
    parts = vkey.strip().split("+", 2)
    if len(parts) != 3:
        raise ProofError("a verifier key is <name>+<hex key hash>+<base64 key>")
    name, hash_hex, blob_b64 = parts
    try:
        blob = base64.b64decode(blob_b64, validate=True)
        want = bytes.fromhex(hash_hex)
    except ValueError as e:
        raise ProofError(f"malformed verifier key: {e}") from e
    if len(blob) != 33 or blob[0] != 1:
        raise ProofError("the verifier key is not an Ed25519 (type 0x01) key")
    pub = PublicKey(blob[1:])
    if not name or note_key_hash(name, pub) != want:
        raise ProofError("the verifier key's hash does not match its name and key")
    return name, pub


def _check_key_name(name: str) -> None:
    # signed-note: a key name is non-empty and has no Unicode spaces or plus signs
    if not name or "+" in name or any(c.isspace() for c in name):
        raise InputError(f"{name!r} cannot be a signed-note key name (no spaces or '+')")


# (name, id of the key) -> (the key, its signed-note key hash under that name): the log key signs a receipt
# per append, and deriving its public key and hash again each time cost more than the signature. The key
# object is kept beside its hash, so its id cannot name another key while the entry is here.
_NOTE_SIGNERS: dict[tuple[str, int], tuple[SigningKey, bytes]] = {}
_NOTE_SIGNERS_KEPT = 64


def _note_signer_hash(name: str, key: SigningKey) -> bytes:
    """``note_key_hash(name, key.public)``, derived once per (name, key) this process signs with (the
    name's check, ``_check_key_name``, with it)."""
    got = _NOTE_SIGNERS.get((name, id(key)))
    if got is not None and got[0] is key:
        return got[1]
    _check_key_name(name)
    digest = note_key_hash(name, key.public)
    if len(_NOTE_SIGNERS) >= _NOTE_SIGNERS_KEPT:
        _NOTE_SIGNERS.clear()
    _NOTE_SIGNERS[(name, id(key))] = (key, digest)
    return digest


def _sign_note(body: str, key: SigningKey, name: str) -> str:
    key_hash = _note_signer_hash(name, key)
    sig = key.sign(body.encode())
    line = base64.b64encode(key_hash + sig).decode()
    return f"{body}\n\u2014 {name} {line}\n"


def sign_checkpoint(
    origin: str, size: int, root: bytes, key: SigningKey, *, key_name: str | None = None
) -> Checkpoint:
    """A C2SP checkpoint signed by ``key`` under ``key_name`` (default: the key's own name; the ledger
    passes its origin, as C2SP tlog-checkpoint asks)."""
    body = f"{origin}\n{size}\n{base64.b64encode(root).decode()}\n"
    return Checkpoint(origin, size, root, _sign_note(body, key, key_name or key.name))


def _verify_note(note: str, key_name: str, public: PublicKey) -> str:
    """The body of a signed note carrying a valid signature by ``key_name``/``public``; raise otherwise."""
    body, sep, sigs = note.partition("\n\n")
    if not sep:
        raise ProofError("signed note has no signature block")
    try:
        signed = (body + "\n").encode()
        want = note_key_hash(key_name, public)
    except UnicodeEncodeError as e:
        raise ProofError(f"malformed signed note: {e}") from e
    for line in sigs.splitlines():
        parts = line.split(" ")
        if len(parts) != 3 or parts[0] != "\u2014" or parts[1] != key_name:
            continue
        try:
            blob = base64.b64decode(parts[2], validate=True)
        except ValueError:
            continue
        if blob[:4] != want:
            continue
        try:
            public.verify(blob[4:], signed)
        except SignatureError as e:
            raise ProofError("signed note signature does not verify") from e
        return body
    raise ProofError(f"signed note carries no signature by {key_name}")


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


# --- receipts: what an append returns ------------------------------------------------------------------

RECEIPT_HEADER = "evidence-ledger/receipt/v1"


@dataclass(frozen=True)
class Receipt:
    """The log's signed promise, returned by an append: entry ``record`` stands at ``record.index`` of the
    log ``origin`` with leaf hash ``leaf``. A signed note whose first line is ``RECEIPT_HEADER`` (never a
    checkpoint: its second line is no tree size)."""

    origin: str
    record: LogRecord
    note: str

    @property
    def leaf(self) -> bytes:
        return self.record.leaf()

    def to_json(self) -> dict[str, Any]:
        r = self.record
        return {
            "type": "receipt",
            "origin": self.origin,
            "index": r.index,
            "entry_id": r.entry_id,
            "logged_at": r.logged_at,
            "record": base64.b64encode(r.to_bytes()).decode(),
            "note": self.note,
        }


def _receipt_body(origin: str, record: LogRecord) -> str:
    leaf = base64.b64encode(record.leaf()).decode()
    return f"{RECEIPT_HEADER}\n{origin}\n{record.index}\n{record.entry_id}\n{record.logged_at}\n{leaf}\n"


def sign_receipt(origin: str, record: LogRecord, key: SigningKey, *, key_name: str | None = None) -> Receipt:
    return Receipt(origin, record, _sign_note(_receipt_body(origin, record), key, key_name or origin))


def parse_receipt(doc: Any, public: PublicKey, *, key_name: str | None = None) -> Receipt:
    """A receipt (its JSON) whose note is signed by the log key and names exactly its record; else raise."""
    try:
        if not isinstance(doc, dict) or doc.get("type") != "receipt":
            raise ProofError("not a receipt")
        origin = str(doc["origin"])
        record = parse_record(base64.b64decode(str(doc["record"]), validate=True))
        note = str(doc["note"])
    except (KeyError, ValueError, binascii.Error) as e:
        raise ProofError(f"malformed receipt: {e}") from e
    body = _verify_note(note, key_name or origin, public)
    if body + "\n" != _receipt_body(origin, record):
        raise ProofError("the receipt's signed note does not name its record")
    if (doc.get("index"), doc.get("entry_id"), doc.get("logged_at")) != (
        record.index,
        record.entry_id,
        record.logged_at,
    ):
        raise ProofError("the receipt's fields disagree with its record")
    return Receipt(origin, record, note)


@dataclass(frozen=True)
class ReceiptClaim:
    """What a kept receipt says the log signed for the entry at its index, read without checking its
    signature (``parse_receipt`` checks it, for ``ledger audit``): the leaf hash its signed note names,
    which the record beside it hashes to (``leaf``), that record's bytes where it carries one (``record``,
    parsed only when asked: ``says``), and the log time its note names (``logged_at``)."""

    leaf: bytes
    record: bytes | None = None
    logged_at: str | None = None

    def says(self, index: int, entry_id: str) -> dict[str, object]:
        """The fields of the record the receipt signs for ``entry_id`` at ``index``, as it says them:
        its record's (``v`` aside), else its note's (index, entry id, logged_at). ``ProofError`` for a
        record that is no log record, or one of another index or entry."""
        if self.record is None:
            return {"index": index, "entry_id": entry_id, "logged_at": self.logged_at}
        try:
            rec = parse_record(self.record)
        except ProofError as e:
            raise ProofError(f"its record is no log record: {e.message}") from e
        if (rec.index, rec.entry_id) != (index, entry_id):
            raise ProofError(
                f"its record names index {rec.index} and entry {rec.entry_id}, not the ones its fields name"
            )
        return {k: v for k, v in rec.to_json().items() if k != "v"}


def receipt_names(doc: Any, key_name: str) -> tuple[frozenset[str], bool]:
    """The logs a kept receipt (its JSON; anything else names none) names, read without checking its
    signature: its JSON ``origin`` and its note's origin line (a note whose first line is
    ``RECEIPT_HEADER``) where each is non-empty text; and whether a signature line of its note is by the
    key name ``key_name`` (a receipt whose signature verifies under that key carries one)."""
    if not isinstance(doc, dict):
        return frozenset(), False
    outer, note = doc.get("origin"), doc.get("note")
    body, _, sigs = note.partition("\n\n") if isinstance(note, str) else ("", "", "")
    lines = body.split("\n")
    inner = lines[1] if len(lines) > 1 and lines[0] == RECEIPT_HEADER else None
    names = frozenset(n for n in (outer, inner) if isinstance(n, str) and n)
    sig_lines = (line.split(" ") for line in sigs.splitlines())
    signed = any(len(p) == 3 and p[0] == "\u2014" and p[1] == key_name for p in sig_lines)
    return names, signed


def receipt_of_log(doc: Any, origin: str, key_name: str) -> bool:
    """The one reading of "a receipt of the log ``origin``" (signing as ``key_name``), for the signing
    guard (``receipt_place``) and ``ledger audit`` (``ledger.proofs``) alike: a kept receipt is another
    log's — set aside — only when it names another log and nothing of it names this one: its JSON
    ``origin``, its note's origin line, a signature line of its note by ``key_name`` (``receipt_names``).
    A receipt that names no log at all (no origin field or note naming one, a mistyped or empty one, not
    even a JSON object) is this log's to check — and, placing nothing, refused — never set aside
    unseen. Cheap (no signature checked)."""
    names, signed = receipt_names(doc, key_name)
    return signed or origin in names or not names


def receipt_place(doc: dict[str, Any], origin: str, key_name: str) -> tuple[int, str] | None:
    """Where a kept receipt (its JSON) says the log ``origin`` holds its entry: its ``index`` and
    ``entry_id`` fields. None when it is another log's (``receipt_of_log``: it names another log and
    nothing of it names ``origin``). A receipt of this log whose fields cannot place it — its JSON
    ``origin`` not ``origin`` (another log's, none, mistyped: it names no log at all, or its note names
    this one), ``index`` no integer (absent, text, a float, a bool), ``entry_id`` no text — cannot judge
    the log: ``ProofError`` naming the field, never set aside as another log's. Cheap (no signature
    checked: the signing guard reads each receipt kept past the held checkpoint)."""
    if not receipt_of_log(doc, origin, key_name):
        return None
    outer = doc.get("origin")
    if outer != origin:
        names, _ = receipt_names(doc, key_name)
        if not names:
            raise ProofError(
                f"it names no log: its origin field is {outer!r} ({type(outer).__name__}) and its note "
                "names none"
                if "origin" in doc
                else "it names no log: it has no origin field and its note names none"
            )
        raise ProofError(
            f"its origin field ({outer!r}) is not the log its signed note names ({origin!r})"
            if "origin" in doc
            else f"it has no origin field (its signed note names the log {origin!r})"
        )
    index, entry_id = doc.get("index"), doc.get("entry_id")
    if type(index) is not int or index < 0:
        raise ProofError(
            f"its index field is {index!r} ({type(index).__name__}), not an index of the log"
            if "index" in doc
            else "it has no index field"
        )
    if not isinstance(entry_id, str):
        raise ProofError(
            f"its entry_id field is {entry_id!r} ({type(entry_id).__name__}), not an entry id"
            if "entry_id" in doc
            else "it has no entry_id field"
        )
    return index, entry_id


def receipt_claim(doc: dict[str, Any], origin: str, index: int, entry_id: str) -> ReceiptClaim:
    """The ``ReceiptClaim`` of a receipt (its JSON) kept of the log ``origin`` for ``entry_id`` at
    ``index`` (its JSON fields), from the leaf line of its signed note and from its ``record``: either
    will do, and where it has both the record must hash to the note's leaf, the note naming ``origin``,
    ``index`` and ``entry_id``. ``ProofError`` naming what is wrong where it has neither, or a part of it
    is no receipt's, or its parts contradict each other: a receipt the log cannot be judged against is
    never one the log passes. Cheap (no signature checked, its record parsed only by ``says``): the
    signing guard reads each receipt kept past the held checkpoint."""
    leaf: bytes | None = None
    logged_at: str | None = None
    note = doc.get("note")
    if note is not None:
        lines = note.partition("\n\n")[0].split("\n") if isinstance(note, str) else []
        if len(lines) != 6 or lines[0] != RECEIPT_HEADER:
            raise ProofError(
                f"its note is no receipt note ({RECEIPT_HEADER}, origin, index, entry id, logged_at, leaf)"
            )
        if lines[1:4] != [origin, str(index), entry_id]:
            raise ProofError(
                f"its signed note names the log {lines[1]!r}, index {lines[2]!r} and entry {lines[3]!r}, "
                "not the ones its fields name"
            )
        try:
            leaf = base64.b64decode(lines[5], validate=True)
        except ValueError:  # binascii.Error, or non-ASCII text
            leaf = b""
        if len(leaf) != 32:
            raise ProofError(f"the leaf its signed note names ({lines[5]!r}) is no base64 SHA-256 hash")
        logged_at = lines[4]
    record = doc.get("record")
    data: bytes | None = None
    if record is not None:
        try:
            data = base64.b64decode(record, validate=True) if isinstance(record, str) else None
        except ValueError:  # binascii.Error, or non-ASCII text
            data = None
        if data is None:
            raise ProofError("its record is not base64 text")
        signed, leaf = leaf, record_leaf(data)
        if signed is not None and leaf != signed:
            raise ProofError("its record does not hash to the leaf its signed note names")
    if leaf is None:
        raise ProofError("it carries neither a signed note nor a record: no leaf the log signed")
    return ReceiptClaim(leaf, data, logged_at)


@dataclass(frozen=True)
class HeldFault:
    """How a log fails to extend a signed checkpoint held outside it: it has fewer entries (``lost``), or
    its first ``held.size`` entries hash to another ``root`` (rewritten; ``detail`` when that root could
    not even be read). ``held_fault`` finds it; each caller raises or reports it in its own terms."""

    size: int  # the log's size
    held: Checkpoint
    root: bytes | None = None  # the log's root at ``held.size`` (None: lost, or unreadable)
    detail: str = ""  # why the root at ``held.size`` could not be read
    error: LedgerError | None = None  # ... as the tree reported it (a caller may raise it as it is)

    @property
    def lost(self) -> bool:
        return self.size < self.held.size

    def reason(self) -> str:
        """What differs, in words (``lost``: the sizes; else the roots, or why one could not be read)."""
        if self.lost:
            return f"{self.held.size - self.size} of the entries it covers are gone (the log has {self.size})"
        if self.root is None:
            return self.detail
        return (
            f"its first {self.held.size} entries hash to root {self.root.hex()[:16]}…, "
            f"not the root it signs {self.held.root.hex()[:16]}…"
        )


def held_fault(size: int, held: Checkpoint, root_at: Callable[[int], bytes]) -> HeldFault | None:
    """The one check of a log against a signed checkpoint held outside it (the home's HOME/checkpoint, or
    one a verifier brings): None when the log extends it — at least ``held.size`` entries, and the tree of
    the first ``held.size`` hashing to its root — else how it does not. ``size``: the log's size;
    ``root_at(n)``: the root of its first ``n`` entries (from the stored tiles: O(log n) reads), whose
    ``LedgerError`` (a tile unreadable) is a fault too, never a pass."""
    if size < held.size:
        return HeldFault(size, held)
    try:
        root = root_at(held.size)
    except LedgerError as e:
        return HeldFault(size, held, detail=e.message, error=e)
    return None if root == held.root else HeldFault(size, held, root)
