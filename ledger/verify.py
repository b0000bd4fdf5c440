"""Ledger verification: entry ids, signatures, schema, chain, Merkle root, tiles, checkpoints, artifacts.

Streaming, in bounded memory: per-entry work (hashing, parsing, signature checks) runs in worker processes
over sequence ranges, a few ranges in flight; what depends on order (chain links, key roles and
revocations, the tree) is checked as each range comes back, in log order, keeping only the tree's right
edge (``ledger.tiles.TileBuilder``). Stored checkpoints are checked as the log passes their size, stored
tiles as they complete. From a held signed checkpoint (``since``) only the entries after it are checked,
once the log is proved consistent with it.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
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
    ProofError,
    UnknownSignerError,
)
from ledger.hashing import parse_digest
from ledger.keyring import Keyring
from ledger.log import (
    GENESIS_PREV,
    Checkpoint,
    LogRecord,
    chain_hash,
    entry_id_of,
    leaf_hash,
    parse_checkpoint,
    verify_consistency,
)
from ledger.repo import LogRepo
from ledger.signing import PublicKey, Verifier, parse_canonical_envelope, parse_envelope
from ledger.store.base import ArtifactStore
from ledger.tiles import TileBuilder, TileTree, tile_last_seq
from ledger.trust import TrustedLog, replay_keys

__all__ = ["Problem", "VerifyProblem", "VerifyReport", "check_held", "verify_log"]

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
    TILE_MISMATCH = "tile-mismatch"
    LOG_INCONSISTENT = "log-inconsistent"


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
    tiles_checked: int = 0
    checked_from: int = 0  # the size of the held checkpoint verification started from (0: the whole log)
    anchor: int | None = None  # the size of the checkpoint the home holds the log was checked against
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
            "tiles_checked": self.tiles_checked,
            "checked_from": self.checked_from,
            "held_checkpoint": self.anchor,
            "incomplete_uploads": self.incomplete_uploads,
            "problems": [p.to_json() for p in self.problems],
        }


# What a worker sends back per entry, in log order (a plain tuple: cheap to pickle): seq, entry id, signer,
# kind, logged_at, prev, chain, key payload (key.* entries), stored leaf hash, format-1 leaf or None.
_Seen = tuple[int, str, str, str, str, str, str, "dict[str, Any] | None", bytes, "bytes | None"]
_Result = tuple[list[tuple[Any, ...]], list[_Seen], list[Any]]


def _check_range(url: str, lo: int, hi: int, keys: dict[str, bytes], v1: bool = False) -> _Result:
    """Verify entries with lo <= seq < hi; returns problems, order facts, and the stored tiles whose last
    leaf is in the range (checked in order). Sequence and chain links between entries of the range are
    checked here; the parent links the range's first entry to the one before it."""
    engine = make_engine(url)
    try:
        repo = LogRepo(engine)
        got = repo.range_rows(lo, hi)
        with repo.read() as conn:
            tiles = [
                (int(t.level), int(t.idx), str(t.chain_hash), int(t.last_seq), bytes(t.hashes), bytes(t.root))
                for t in repo.tile_rows(conn, lo, hi)
            ]
    finally:
        engine.dispose()
    problems: list[tuple[Any, ...]] = []
    seen: list[_Seen] = []
    subjects, refs, arts = got.subjects, got.refs, got.artifacts
    verifiers: dict[str, Verifier] = {}
    expected: int | None = None
    prev_chain: str | None = None
    for row in got.entries:
        seq, entry_id = row.seq, row.entry_id
        env_bytes = bytes(row.envelope)

        def problem(code: str, msg: str, seq: int = seq, entry_id: str = entry_id) -> None:
            problems.append((seq, entry_id, code, msg))

        if entry_id_of(env_bytes) != entry_id:
            problem(Problem.ENTRY_ID_MISMATCH, "stored envelope bytes do not hash to the entry id")
        # The leaf commits the log's record of the row (index, logged_at, entry id, kind, signer); the
        # envelope is tied to it by the entry id above.
        try:
            record = LogRecord(seq, row.logged_at, entry_id, row.kind, row.signer).to_bytes()
        except LedgerError as e:
            problem(Problem.RECORD_MISMATCH, e.message)
            record = b""
        if row.record is None:
            problem(Problem.LOG_FORMAT, "the row has no log record (log format 1): run `ledger migrate`")
        elif bytes(row.record) != record:
            problem(Problem.RECORD_MISMATCH, "stored log record disagrees with the row's seq/logged_at/id")
        leaf = leaf_hash(record)
        if leaf.hex() != row.leaf_hash:
            problem(Problem.LEAF_HASH_MISMATCH, "stored leaf hash does not match the log record")
            try:
                leaf = bytes.fromhex(row.leaf_hash)
            except (TypeError, ValueError):
                leaf = b""
            if len(leaf) != 32:
                leaf = leaf_hash(record)
        if chain_hash(seq, entry_id, row.prev_hash, row.logged_at) != row.chain_hash:
            problem(Problem.CHAIN_BROKEN, "chain hash does not match the log record")
        key_payload: dict[str, Any] | None = None
        kind = row.kind
        try:
            env = parse_canonical_envelope(env_bytes)
            if env is None:
                env = parse_envelope(env_bytes)
                if env.canonical() != env_bytes:
                    problem(Problem.NON_CANONICAL_JSON, "stored envelope is not in canonical form")
            st = parse_statement(env.statement())
            kind = st.kind
            if env.signer != row.signer or st.kind != row.kind or st.collected_at != row.collected_at:
                problem(Problem.INDEX_MISMATCH, "signer/kind/collected_at columns disagree with the envelope")
            if st.kind.startswith("key."):
                key_payload = dict(st.payload)
            # the signature, with the key enrolled under the signer's id (when it was is checked in order)
            verifier = verifiers.get(env.signer)
            if verifier is None:
                raw = keys.get(env.signer)
                if raw is None and st.kind == "key.enrol" and st.payload.get("key_id") == env.signer:
                    raw = PublicKey.from_b64(st.payload["public_key"]).raw
                if raw is not None:
                    verifier = Verifier.of(PublicKey(raw))
                    if env.signer in keys:
                        verifiers[env.signer] = verifier
            if verifier is None:
                problem(UnknownSignerError.code, f"signer {env.signer} is not enrolled")
            else:
                verifier.verify_envelope(env)
            if dict(st.subject) != subjects.get(seq, {}):
                problem(Problem.INDEX_MISMATCH, "subject index rows disagree with the entry")
            if {(r.rel, r.id) for r in st.refs} != refs.get(seq, set()):
                problem(Problem.INDEX_MISMATCH, "ref index rows disagree with the entry")
            if {(a.name, a.digest, a.stored) for a in st.artifacts} != arts.get(seq, set()):
                problem(Problem.INDEX_MISMATCH, "artifact index rows disagree with the entry")
        except LedgerError as e:
            problem(e.code, e.message)
        # order within the range (the first entry's is checked by the parent, against the range before)
        if expected is not None:
            if seq != expected:
                problem(Problem.SEQ_GAP, f"expected seq {expected}, found {seq}")
            if row.prev_hash != prev_chain:
                problem(Problem.CHAIN_BROKEN, "entry does not link to its predecessor")
        expected, prev_chain = seq + 1, row.chain_hash
        seen.append(
            (
                seq,
                entry_id,
                row.signer,
                kind,
                row.logged_at,
                row.prev_hash,
                row.chain_hash,
                key_payload,
                leaf,
                leaf_hash(env_bytes) if v1 else None,
            )
        )
    return problems, seen, tiles


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


@dataclass
class _Order:
    """What the in-order pass carries from one range to the next: O(log n) hashes and the key state."""

    trusted: TrustedLog
    prev_chain: str
    expected_seq: int
    builder: TileBuilder
    v1_builder: TileBuilder | None
    checkpoints: Iterator[Any]
    next_cp: Any
    anchor: Checkpoint | None = None  # the home's held checkpoint, checked as the tree passes its size


HOME_HOLDS = "the signed checkpoint this home holds"


def lost_message(size: int, held: int, whose: str) -> str:
    """``the log has N entries; this home holds a signed checkpoint of size M (entries lost)``."""
    holder = "this home holds a signed checkpoint" if whose == HOME_HOLDS else f"{whose} is"
    return f"the log has {size} entries; {holder} of size {held} (entries lost)"


def _consistent(
    repo: LogRepo, conn: Any, since: Checkpoint, problems: list[VerifyProblem], whose: str
) -> int | None:
    """The log's size when it is consistent with the held checkpoint ``since`` (a consistency proof from
    the tiles, checked against the held root); None, with the problem named, when entries were lost or
    the log before it was rewritten."""
    s = since.size
    current = repo.size(conn)
    if s > current:
        problems.append(VerifyProblem(Problem.LOG_INCONSISTENT, lost_message(current, s, whose)))
        return None
    now = TileTree(repo.tile_source(conn), current)
    try:
        proof = now.consistency_proof(s) if s else []
        if s:
            verify_consistency(s, current, since.root, now.root(), proof)
        elif since.root != now.root(0):
            raise ProofError("the held checkpoint of size 0 has another root than the empty tree")
    except LedgerError as e:
        problems.append(
            VerifyProblem(
                Problem.LOG_INCONSISTENT,
                f"the log is not consistent with {whose} at size {s} (rewritten before it): {e.message}",
            )
        )
        return None
    return current


def check_held(repo: LogRepo, held: Checkpoint) -> list[VerifyProblem]:
    """Whether the log is consistent with the checkpoint the home holds (``ledger audit``'s check: one
    snapshot, O(log n) tile reads); the problems, empty when it is."""
    problems: list[VerifyProblem] = []
    with repo.read(snapshot=True) as conn:
        _consistent(repo, conn, held, problems, HOME_HOLDS)
    return problems


def _held_start(
    repo: LogRepo, since: Checkpoint, root_key_id: str, problems: list[VerifyProblem]
) -> tuple[_Order, int] | None:
    """The in-order state at a held checkpoint's size, read from the tiles and the key entries before it,
    after proving the log consistent with it. None (with the problem named) when it is not."""
    s = since.size
    with repo.read(snapshot=True) as conn:
        current = _consistent(repo, conn, since, problems, "the held checkpoint")
        if current is None:
            return None
        # Below the checkpoint the tree is proved; each key entry and the last entry are checked against
        # its leaves (so the keys and the log time carried over are the ones the checkpoint commits).
        held = TileTree(repo.tile_source(conn), s)
        rows = list(repo.key_entries(conn, 0, s))
        last = repo.row_at(conn, s - 1) if s else None
        for r in rows + ([last] if last is not None else []):
            record = LogRecord(int(r.seq), r.logged_at, r.entry_id, r.kind, r.signer)
            if record.leaf() != held.leaf(int(r.seq)) or entry_id_of(bytes(r.envelope)) != r.entry_id:
                problems.append(
                    VerifyProblem(
                        Problem.LOG_INCONSISTENT,
                        "an entry before the held checkpoint is not the one its tree commits",
                        seq=int(r.seq),
                        id=str(r.entry_id),
                    )
                )
                return None
        ring = replay_keys(Keyring(), [(int(r.seq), bytes(r.envelope)) for r in rows], s)
        last_at = parse_time(last.logged_at) if last is not None else None
        builder = held.builder()
    order = _Order(
        TrustedLog(root_key_id, ring, last_logged_at=last_at),
        str(last.chain_hash) if last is not None else GENESIS_PREV,
        s,
        builder,
        None,
        iter(()),
        None,
    )
    return order, current


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
    since: Checkpoint | None = None,
    anchor: Checkpoint | None = None,
) -> VerifyReport:
    """Check the whole log (and, with ``artifacts``, every stored artifact); every problem is reported.

    ``since``: a signed checkpoint of this log the caller holds (its signature already checked): the log
    must be consistent with it, and only the entries after it (and the checkpoints and tiles they
    complete) are checked again.

    ``anchor``: the checkpoint the home holds outside the database (``HOME/checkpoint``, signature
    checked): the log must not be smaller than it (entries lost), and the tree the log's records build
    must have its root at its size (no rewritten prefix) — checked like a stored checkpoint, from the
    re-derived leaves, so deleting checkpoint rows or tiles does not hide either."""
    report = VerifyReport()
    problems: list[VerifyProblem] = report.problems
    with repo.read() as conn:
        lo, hi, count = repo.bounds(conn)
    v1 = since is None and any(cp.format == 1 for cp in repo.iter_checkpoints())

    if since is not None:
        report.checked_from = since.size
        started = _held_start(repo, since, root_key_id, problems)
        if started is None:
            report.size = count
            return report
        order, end = started
        order.checkpoints = repo.iter_checkpoints(since.size)
    else:
        end = 0 if hi is None else hi + 1
        order = _Order(
            TrustedLog(root_key_id),
            GENESIS_PREV,
            0,
            TileBuilder(),
            TileBuilder() if v1 else None,
            repo.iter_checkpoints(),
            None,
        )
        if count and lo != 0:
            problems.append(VerifyProblem(Problem.SEQ_GAP, f"the log starts at seq {lo}, not 0", seq=lo))
    order.next_cp = next(order.checkpoints, None)
    start = order.expected_seq
    if anchor is not None:
        report.anchor = anchor.size
        if anchor.size >= start:
            order.anchor = anchor  # checked as the tree passes its size (``_check_anchor``)
        else:  # verifying from a newer held checkpoint: the anchor below it is proved by the tiles
            with repo.read(snapshot=True) as conn:
                _consistent(repo, conn, anchor, problems, HOME_HOLDS)
    _check_anchor(order, report)

    def checkpoints_upto(size: int) -> None:
        """Check the stored checkpoints of ``size`` (the tree stands at it) and below not yet checked."""
        while order.next_cp is not None and order.next_cp.size <= size:
            _check_checkpoint(order, order.next_cp, origin, log_key_name, log_public_key, report, since)
            order.next_cp = next(order.checkpoints, None)

    checkpoints_upto(start)
    keys = _public_keys(repo)
    ranges = [(a, min(a + _CHUNK, end)) for a in range(start, end, _CHUNK)]
    n = workers or os.cpu_count() or 1

    def consume(res: _Result) -> None:
        _in_order(order, res, report, checkpoints_upto)
        if progress is not None:
            progress(len(res[1]))  # entries whose signatures, records and order are checked

    if n > 1 and len(ranges) > 1:
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=n, mp_context=ctx) as pool:
            todo = iter(ranges)
            window: deque[Future[_Result]] = deque()

            def submit() -> None:
                nxt = next(todo, None)
                if nxt is not None:
                    window.append(pool.submit(_check_range, database_url, nxt[0], nxt[1], keys, v1))

            for _ in range(2 * n):
                submit()
            while window:
                res = window.popleft().result()
                submit()
                consume(res)
    else:
        for a, b in ranges:
            consume(_check_range(database_url, a, b, keys, v1))

    # checkpoints beyond the log: the log no longer has what they signed
    while order.next_cp is not None:
        _check_checkpoint(order, order.next_cp, origin, log_key_name, log_public_key, report, since)
        order.next_cp = next(order.checkpoints, None)
    report.size = len(order.builder)
    report.root = order.builder.root().hex()
    if order.anchor is not None and order.anchor.size > report.size:
        problems.append(
            VerifyProblem(Problem.LOG_INCONSISTENT, lost_message(report.size, order.anchor.size, HOME_HOLDS))
        )

    stale = getattr(store, "stale_incoming", None)
    if stale is not None:
        report.incomplete_uploads = len(stale(0.0))
    if artifacts:
        for digest, name in repo.stored_artifacts(start):
            report.artifacts_checked += 1
            try:
                store.verify(parse_digest(digest))
            except LedgerError as e:
                owners = [o for o in repo.with_artifact(digest) if o[0] >= start]
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


def _in_order(
    order: _Order, result: _Result, report: VerifyReport, checkpoints_upto: Callable[[int], None]
) -> None:
    """The order-dependent checks of one range's results, in log order: contiguous sequence, chain links,
    trust root, roles and revocations (by the trust rules ingest applied; signatures were checked per
    entry), the tree, its stored tiles and the checkpoints the range passes."""
    probs, chunk_seen, tile_rows = result
    problems = report.problems
    problems.extend(VerifyProblem(code=c, message=m, seq=q, id=i) for q, i, c, m in probs)
    stored: dict[tuple[int, int], list[tuple[Any, ...]]] = {}
    for t in tile_rows:
        stored.setdefault((t[0], t[1]), []).append(t)
    chains: dict[int, str] = {}
    trusted = order.trusted
    builder, v1_builder = order.builder, order.v1_builder
    next_cp = order.next_cp
    if chunk_seen:  # the range's first entry follows the range before (the worker checked the rest)
        seq, entry_id, prev = chunk_seen[0][0], chunk_seen[0][1], chunk_seen[0][5]
        if seq != order.expected_seq:
            problems.append(
                VerifyProblem(
                    Problem.SEQ_GAP, f"expected seq {order.expected_seq}, found {seq}", seq=seq, id=entry_id
                )
            )
        if prev != order.prev_chain:
            problems.append(
                VerifyProblem(
                    Problem.CHAIN_BROKEN, "entry does not link to its predecessor", seq=seq, id=entry_id
                )
            )
        order.expected_seq = chunk_seen[-1][0] + 1
        order.prev_chain = chunk_seen[-1][6]
    for seq, entry_id, signer, kind, logged_at, _prev, chain, key_payload, leaf, v1_leaf in chunk_seen:
        chains[seq] = chain
        done = builder.append(leaf)
        if done:
            for tile in done:
                report.tiles_checked += 1
                for level, idx, t_chain, last_seq, hashes, root in stored.pop((tile.level, tile.index), []):
                    if t_chain != chain:
                        continue  # a tile of another log (one a rollback lost): never read
                    if last_seq != tile.last_seq or hashes != tile.hashes or root != tile.root:
                        problems.append(
                            VerifyProblem(
                                Problem.TILE_MISMATCH,
                                f"stored tile {level}/{idx} is not the log's "
                                "(proofs from it would not verify)",
                                seq=seq,
                                id=entry_id,
                            )
                        )
        if v1_builder is not None and v1_leaf is not None:
            v1_builder.append(v1_leaf)
        if order.anchor is not None and order.anchor.size == len(builder):
            _check_anchor(order, report)
        if next_cp is not None and next_cp.size <= len(builder):
            checkpoints_upto(len(builder))
            next_cp = order.next_cp
        try:
            at = parse_time(logged_at)
        except LedgerError as e:
            problems.append(VerifyProblem(e.code, f"logged_at: {e.message}", seq=seq, id=entry_id))
            continue
        # In log order: the log time never decreases, and the key may sign the kind at that time by the
        # keys as of the entries before it (so a revoked key cannot be slipped in "earlier").
        try:
            trusted.in_order(at)
        except LedgerError as e:
            problems.append(VerifyProblem(e.code, e.message, seq=seq, id=entry_id))
        try:
            trusted.authorise(seq, signer, kind, key_payload, at)
        except LedgerError as e:
            problems.append(VerifyProblem(e.code, e.message, seq=seq, id=entry_id))
        try:
            if key_payload is not None or not kind.startswith("key."):
                trusted.update(seq, kind, key_payload or {}, at)
            else:
                trusted.update(seq, "", {}, at)
        except LedgerError as e:
            problems.append(VerifyProblem(Problem.BAD_KEY_ENTRY, e.message, seq=seq, id=entry_id))
    # stored tiles the range's leaves did not complete, at a position the log holds with their chain hash
    for rows in stored.values():
        for level, idx, chain, last_seq, _hashes, _root in rows:
            if chains.get(last_seq) == chain:
                problems.append(
                    VerifyProblem(
                        Problem.TILE_MISMATCH,
                        f"stored tile {level}/{idx} names leaf {last_seq}, not its last "
                        f"({tile_last_seq(level, idx)})",
                        seq=last_seq,
                    )
                )


def _check_anchor(order: _Order, report: VerifyReport) -> None:
    """At the size of the checkpoint the home holds: the tree the log's records build has its root (a
    problem of the ledger, like a checkpoint's: the leaf rewritten is named by its own checks)."""
    cp = order.anchor
    if cp is None or cp.size != len(order.builder):
        return
    order.anchor = None  # checked
    if order.builder.root() != cp.root:
        report.problems.append(
            VerifyProblem(
                Problem.LOG_INCONSISTENT,
                f"the log's first {cp.size} entries are not the ones {HOME_HOLDS} commits "
                "(the log was rewritten before it)",
            )
        )


def _check_checkpoint(
    order: _Order,
    cp: Any,
    origin: str,
    log_key_name: str,
    log_public_key: PublicKey,
    report: VerifyReport,
    since: Checkpoint | None,
) -> None:
    """Check one stored checkpoint against the tree standing at its size (or beyond the log)."""
    problems = report.problems
    fmt1 = cp.format == 1
    if fmt1 and since is not None:
        problems.append(
            VerifyProblem(
                Problem.LOG_FORMAT,
                f"the format-1 checkpoint at size {cp.size} is checked only by a full `ledger verify`",
            )
        )
        return
    report.checkpoints_checked += 1
    try:
        parsed = parse_checkpoint(cp.note, log_key_name if fmt1 else origin, log_public_key)
    except LedgerError as e:
        problems.append(VerifyProblem(e.code, f"checkpoint at size {cp.size}: {e.message}"))
        return
    if parsed.size != cp.size or parsed.root.hex() != cp.root:
        problems.append(
            VerifyProblem(Problem.CHECKPOINT_MISMATCH, f"checkpoint row {cp.size} disagrees with its note")
        )
    # checkpoints signed before ``ledger migrate`` (format 1) commit the bare envelopes' tree, under the
    # log key's own name; later ones the records' tree, under the origin (C2SP)
    b = order.v1_builder if fmt1 else order.builder
    if b is None or parsed.origin != origin or parsed.size != len(b) or b.root() != parsed.root:
        problems.append(
            VerifyProblem(
                Problem.CHECKPOINT_MISMATCH,
                f"the log no longer has the root signed in the checkpoint at size {parsed.size}",
            )
        )
