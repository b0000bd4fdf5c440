"""Full-ledger verification: entry ids, signatures, schema, chain, Merkle root, checkpoints, artifacts.

Per-entry work (hashing, parsing, signature checks) runs in worker processes over sequence ranges;
what depends on order (chain links, key roles and revocations) is checked afterwards in one pass.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ledger.db import make_engine
from ledger.entries import parse_statement, parse_time
from ledger.errors import (
    CanonicalJsonError,
    ChainBrokenError,
    LedgerError,
    LogFormatError,
    LogOrderError,
    UnknownSignerError,
)
from ledger.hashing import parse_digest
from ledger.log import (
    GENESIS_PREV,
    LogRecord,
    MerkleTree,
    chain_hash,
    entry_id_of,
    leaf_hash,
    parse_checkpoint,
)
from ledger.repo import LogRepo
from ledger.signing import PublicKey, parse_envelope
from ledger.store.base import ArtifactStore
from ledger.trust import TrustedLog

__all__ = ["Problem", "VerifyProblem", "VerifyReport", "verify_log"]

_CHUNK = 4000


class Problem(StrEnum):
    """The problem codes ``ledger verify`` finds by itself (docs/RELIABILITY.md lists them).

    A problem may also carry the code of the ``LedgerError`` a check raised (``bad-signature``,
    ``unknown-signer``, ``key-revoked``, ``wrong-role``, ``untrusted-root``, ``schema-violation``,
    ``artifact-missing``, ``artifact-corrupt`` …): the same codes ingest raises.
    """

    ENTRY_ID_MISMATCH = "entry-id-mismatch"
    LEAF_HASH_MISMATCH = "leaf-hash-mismatch"
    RECORD_MISMATCH = "record-mismatch"
    LOG_FORMAT = LogFormatError.code
    LOGGED_AT_DECREASING = LogOrderError.code
    CHAIN_BROKEN = ChainBrokenError.code
    NON_CANONICAL_JSON = CanonicalJsonError.code
    INDEX_MISMATCH = "index-mismatch"
    SEQ_GAP = "seq-gap"
    BAD_KEY_ENTRY = "bad-key-entry"
    CHECKPOINT_MISMATCH = "checkpoint-mismatch"


@dataclass
class VerifyProblem:
    code: str  # a ``Problem``, or the code of a ``LedgerError``
    message: str
    seq: int | None = None
    id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "id": self.id, "code": str(self.code), "message": self.message}


@dataclass
class VerifyReport:
    size: int = 0
    root: str = ""
    artifacts_checked: int = 0
    checkpoints_checked: int = 0
    incomplete_uploads: int = 0  # temp files of writers that died mid-put: information, never artifacts
    problems: list[VerifyProblem] = field(default_factory=list)

    def __bool__(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": not self.problems,
            "size": self.size,
            "root": self.root,
            "artifacts_checked": self.artifacts_checked,
            "checkpoints_checked": self.checkpoints_checked,
            "incomplete_uploads": self.incomplete_uploads,
            "problems": [p.to_json() for p in self.problems],
        }


@dataclass(frozen=True)
class _Seen:
    seq: int
    entry_id: str
    signer: str
    kind: str
    logged_at: str
    prev: str
    chain: str
    key_payload: dict[str, Any] | None
    v1_leaf: bytes | None  # the format-1 leaf (the bare envelope's), when format-1 checkpoints need it


def _check_range(
    url: str, lo: int, hi: int, keys: dict[str, bytes], v1: bool = False
) -> tuple[list[tuple[Any, ...]], list[_Seen], list[tuple[str, str]]]:
    """Verify entries with lo <= seq < hi; returns problems, order facts, stored artifact digests."""
    engine = make_engine(url)
    try:
        got = LogRepo(engine).range_rows(lo, hi)
    finally:
        engine.dispose()
    problems: list[tuple[Any, ...]] = []
    seen: list[_Seen] = []
    artifacts: list[tuple[str, str]] = []
    subjects, refs, arts = got.subjects, got.refs, got.artifacts
    for row in got.entries:
        env_bytes = bytes(row.envelope)

        def problem(code: str, msg: str, row: Any = row) -> None:
            problems.append((row.seq, row.entry_id, code, msg))

        if entry_id_of(env_bytes) != row.entry_id:
            problem(Problem.ENTRY_ID_MISMATCH, "stored envelope bytes do not hash to the entry id")
        # The leaf commits the log's record of the row (index, logged_at, entry id, kind, signer); the
        # envelope is tied to it by the entry id above.
        try:
            record = LogRecord(row.seq, row.logged_at, row.entry_id, row.kind, row.signer).to_bytes()
        except LedgerError as e:
            problem(Problem.RECORD_MISMATCH, e.message)
            record = b""
        if row.record is None:
            problem(Problem.LOG_FORMAT, "the row has no log record (log format 1): run `ledger migrate`")
        elif bytes(row.record) != record:
            problem(Problem.RECORD_MISMATCH, "stored log record disagrees with the row's seq/logged_at/id")
        if leaf_hash(record).hex() != row.leaf_hash:
            problem(Problem.LEAF_HASH_MISMATCH, "stored leaf hash does not match the log record")
        if chain_hash(row.seq, row.entry_id, row.prev_hash, row.logged_at) != row.chain_hash:
            problem(Problem.CHAIN_BROKEN, "chain hash does not match the log record")
        key_payload: dict[str, Any] | None = None
        kind = row.kind
        try:
            env = parse_envelope(env_bytes)
            if env.canonical() != env_bytes:
                problem(Problem.NON_CANONICAL_JSON, "stored envelope is not in canonical form")
            st = parse_statement(env.statement())
            kind = st.kind
            if env.signer != row.signer or st.kind != row.kind or st.collected_at != row.collected_at:
                problem(Problem.INDEX_MISMATCH, "signer/kind/collected_at columns disagree with the envelope")
            if st.kind.startswith("key."):
                key_payload = dict(st.payload)
            raw = keys.get(env.signer)
            if raw is None and st.kind == "key.enrol" and st.payload.get("key_id") == env.signer:
                raw = PublicKey.from_b64(st.payload["public_key"]).raw
            # the signature, with the key enrolled under the signer's id (when it was is checked in order)
            if raw is None:
                problem(UnknownSignerError.code, f"signer {env.signer} is not enrolled")
            else:
                env.verify_with(PublicKey(raw))
            if dict(st.subject) != subjects.get(row.seq, {}):
                problem(Problem.INDEX_MISMATCH, "subject index rows disagree with the entry")
            if {(r.rel, r.id) for r in st.refs} != refs.get(row.seq, set()):
                problem(Problem.INDEX_MISMATCH, "ref index rows disagree with the entry")
            if {(a.name, a.digest, a.stored) for a in st.artifacts} != arts.get(row.seq, set()):
                problem(Problem.INDEX_MISMATCH, "artifact index rows disagree with the entry")
            artifacts.extend((a.digest, a.name) for a in st.artifacts if a.stored)
        except LedgerError as e:
            problem(e.code, e.message)
        seen.append(
            _Seen(
                row.seq,
                row.entry_id,
                row.signer,
                kind,
                row.logged_at,
                row.prev_hash,
                row.chain_hash,
                key_payload,
                leaf_hash(env_bytes) if v1 else None,
            )
        )
    return problems, seen, artifacts


def _public_keys(repo: LogRepo) -> dict[str, bytes]:
    """Public keys of every enrolled key, straight from the key.enrol entries (checked per entry)."""
    out: dict[str, bytes] = {}
    for env_bytes in repo.enrol_envelopes():
        try:
            st = parse_envelope(env_bytes).statement()
            pub = PublicKey.from_b64(st["payload"]["public_key"])
            out.setdefault(pub.key_id, pub.raw)
        except (LedgerError, KeyError, TypeError):
            continue
    return out


def verify_log(
    repo: LogRepo,
    store: ArtifactStore,
    *,
    database_url: str,
    root_key_id: str,
    origin: str,
    log_key_name: str,
    log_public_key: PublicKey,
    artifacts: bool = True,
    workers: int | None = None,
    progress: Callable[[int], object] | None = None,
) -> VerifyReport:
    """Check the whole log (and, with ``artifacts``, every stored artifact); every problem is reported."""
    report = VerifyReport()
    with repo.read() as conn:
        lo, hi, count = repo.bounds(conn)
        leaves = repo.leaf_hashes(conn)
        checkpoints = repo.checkpoints(conn)
    problems: list[VerifyProblem] = report.problems
    if count == 0 or lo is None or hi is None:
        report.size = 0
        return report
    keys = _public_keys(repo)
    v1 = any(cp.format == 1 for cp in checkpoints)
    ranges = [(a, min(a + _CHUNK, hi + 1)) for a in range(0, hi + 1, _CHUNK)]
    n = workers or os.cpu_count() or 1
    url = database_url
    results: list[tuple[list[tuple[Any, ...]], list[_Seen], list[tuple[str, str]]]]
    if n > 1 and len(ranges) > 1:
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=n, mp_context=ctx) as pool:
            results = []
            checked = pool.map(
                _check_range,
                [url] * len(ranges),
                [a for a, _ in ranges],
                [b for _, b in ranges],
                [keys] * len(ranges),
                [v1] * len(ranges),
            )
            for (a, b), result in zip(ranges, checked, strict=True):
                results.append(result)
                if progress is not None:
                    progress(b - a)  # entries whose signatures and records are checked
    else:
        results = []
        for a, b in ranges:
            results.append(_check_range(url, a, b, keys, v1))
            if progress is not None:
                progress(b - a)

    seen: list[_Seen] = []
    stored: dict[str, str] = {}
    for probs, chunk_seen, arts in results:
        problems.extend(VerifyProblem(code=c, message=m, seq=q, id=i) for q, i, c, m in probs)
        seen.extend(chunk_seen)
        for digest, name in arts:
            stored.setdefault(digest, name)

    # Order-dependent checks: contiguous sequence, chain links, trust root, roles and revocations,
    # by the same trust rules ingest applied (signatures were checked per entry above).
    if lo != 0:
        problems.append(VerifyProblem(Problem.SEQ_GAP, f"the log starts at seq {lo}, not 0", seq=lo))
    trusted = TrustedLog(root_key_id)
    prev_chain = GENESIS_PREV
    expected_seq = 0
    for s in seen:
        if s.seq != expected_seq:
            problems.append(
                VerifyProblem(
                    Problem.SEQ_GAP, f"expected seq {expected_seq}, found {s.seq}", seq=s.seq, id=s.entry_id
                )
            )
            expected_seq = s.seq
        if s.prev != prev_chain:
            problems.append(
                VerifyProblem(
                    Problem.CHAIN_BROKEN, "entry does not link to its predecessor", seq=s.seq, id=s.entry_id
                )
            )
        prev_chain = s.chain
        expected_seq += 1
        try:
            at = parse_time(s.logged_at)
        except LedgerError as e:
            problems.append(VerifyProblem(e.code, f"logged_at: {e.message}", seq=s.seq, id=s.entry_id))
            continue
        # In log order: the log time never decreases, and the key may sign the kind at that time by the
        # keys as of the entries before it (so a revoked key cannot be slipped in "earlier").
        try:
            trusted.in_order(at)
        except LedgerError as e:
            problems.append(VerifyProblem(e.code, e.message, seq=s.seq, id=s.entry_id))
        try:
            trusted.authorise(s.seq, s.signer, s.kind, s.key_payload, at)
        except LedgerError as e:
            problems.append(VerifyProblem(e.code, e.message, seq=s.seq, id=s.entry_id))
        try:
            if s.key_payload is not None or not s.kind.startswith("key."):
                trusted.update(s.seq, s.kind, s.key_payload or {}, at)
            else:
                trusted.update(s.seq, "", {}, at)
        except LedgerError as e:
            problems.append(VerifyProblem(Problem.BAD_KEY_ENTRY, e.message, seq=s.seq, id=s.entry_id))

    report.size = len(leaves)
    tree = MerkleTree(leaves)
    root = tree.root()
    report.root = root.hex()
    # checkpoints signed before ``ledger migrate`` (format 1) commit the bare envelopes' tree, under the
    # log key's own name; later ones the records' tree, under the origin (C2SP)
    v1_tree = MerkleTree([s.v1_leaf for s in seen if s.v1_leaf is not None]) if v1 else tree
    for cp in checkpoints:
        report.checkpoints_checked += 1
        fmt1 = cp.format == 1
        try:
            parsed = parse_checkpoint(cp.note, log_key_name if fmt1 else origin, log_public_key)
        except LedgerError as e:
            problems.append(VerifyProblem(e.code, f"checkpoint at size {cp.size}: {e.message}"))
            continue
        if parsed.size != cp.size or parsed.root.hex() != cp.root:
            problems.append(
                VerifyProblem(
                    Problem.CHECKPOINT_MISMATCH, f"checkpoint row {cp.size} disagrees with its note"
                )
            )
        t = v1_tree if fmt1 else tree
        if parsed.origin != origin or parsed.size > len(t) or t.root(parsed.size) != parsed.root:
            problems.append(
                VerifyProblem(
                    Problem.CHECKPOINT_MISMATCH,
                    f"the log no longer has the root signed in the checkpoint at size {parsed.size}",
                )
            )

    stale = getattr(store, "stale_incoming", None)
    if stale is not None:
        report.incomplete_uploads = len(stale(0.0))
    if artifacts:
        for digest, name in sorted(stored.items()):
            report.artifacts_checked += 1
            try:
                store.verify(parse_digest(digest))
            except LedgerError as e:
                owners = repo.with_artifact(digest)
                for seq, eid in owners or [(-1, "")]:
                    problems.append(
                        VerifyProblem(
                            e.code,
                            f"artifact {name}: {e.message}",
                            seq=seq if seq >= 0 else None,
                            id=eid or None,
                        )
                    )
    problems.sort(key=lambda p: (p.seq if p.seq is not None else -1, p.code))
    return report
