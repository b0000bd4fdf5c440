"""Ledger verification: entry ids, signatures, schema, chain, Merkle root, tiles, checkpoints, artifacts.

Streaming, in bounded memory: per-entry work (hashing, parsing, signature checks) runs in worker processes
over sequence ranges, a few ranges in flight (``ledger._verify_range``: each row's checks on a fast path
that only ever answers "no problem", the exact per-row check naming any problem); what depends on order
(chain links, key roles and revocations, the tree) is checked as each range comes back, in log order,
keeping only the tree's right edge (``ledger.tiles.TileBuilder``). Stored checkpoints are checked as the
log passes their size, stored tiles as they complete. From a held signed checkpoint (``since``) only the
entries after it are checked in full, once the log is proved consistent with it and every entry before it
re-derived from its committed record (hash-only: ``_held_start``).
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ledger import _verify_range as _range
from ledger._verify_range import (
    IndexRows,
    RangeFacts,
    check_range,
    committed_below,
    index_rows,
    orphan_index_rows,
    pool_init,
    pool_task,
)
from ledger.db import make_engine
from ledger.entries import format_time, now_utc, parse_time
from ledger.errors import (
    LedgerError,
    LogInconsistentError,
    LogOrderError,
    TileMismatchError,
)
from ledger.hashing import parse_digest
from ledger.keyring import Keyring
from ledger.log import (
    GENESIS_PREV,
    MAX_CLOCK_SKEW,
    Checkpoint,
    HeldFault,
    held_fault,
    parse_checkpoint,
)
from ledger.repo import LogRepo
from ledger.signing import PublicKey, parse_envelope
from ledger.store.base import ArtifactStore
from ledger.tiles import TILE_WIDTH, Tile, TileBuilder, TileSource, TileTree, tile_last_seq, tile_path
from ledger.trust import TrustedLog, replay_keys, trust_problem

__all__ = [
    "HeldFault",
    "IndexRows",
    "Problem",
    "VerifyProblem",
    "VerifyReport",
    "check_held",
    "held_fault",
    "index_rows",
    "verify_log",
]

_CHUNK = 4096  # entries per range a worker checks (at most)
_MIN_CHUNK = 256  # ... and at least, but for the log's last


def _ranges(start: int, end: int, workers: int) -> Iterator[tuple[int, int]]:
    """The sequence ranges the workers check, of a log whose seqs are 0 .. end - 1 with none missing:
    ``_CHUNK`` entries each, smaller towards the end (an eighth of what is left per worker, down to
    ``_MIN_CHUNK``) so that no core waits long for the last. Made as they are taken (O(1) memory)."""
    a = start
    while a < end:
        size = max(min(_CHUNK, (end - a) // (8 * workers)), _MIN_CHUNK) if workers > 1 else _CHUNK
        yield a, min(a + size, end)
        a += size


def _row_ranges(repo: LogRepo, start: int, end: int) -> Iterator[tuple[int, int]]:
    """The ranges of a log whose seqs are not 0 .. n - 1 (a row moved to, or inserted at, a seq far beyond
    the others; rows deleted): ``_CHUNK`` rows each, each ending where the rows the log holds put it (a
    keyset page), so the work is bounded by the rows there are, never by the largest seq; the in-order
    pass names the first seq missing (``seq-gap``)."""
    a = start
    while a < end:
        with repo.read() as conn:
            b = repo.seq_after(conn, a, _CHUNK, end)
        b = end if b is None else b
        yield a, b
        a = b


class Problem(StrEnum):
    """The problem codes ``ledger verify`` finds by itself (docs/RELIABILITY.md lists them).

    A problem may also carry the code of the ``LedgerError`` a check raised (``bad-signature``,
    ``unknown-signer``, ``key-revoked``, ``wrong-role``, ``untrusted-root``, ``schema-violation``,
    ``artifact-missing``, ``artifact-corrupt`` …): the same codes ingest raises.
    """

    # the codes a worker's range check names are its module's (one copy)
    ENTRY_ID_MISMATCH = _range.ENTRY_ID_MISMATCH
    LEAF_HASH_MISMATCH = _range.LEAF_HASH_MISMATCH
    RECORD_MISMATCH = _range.RECORD_MISMATCH
    LOG_FORMAT = _range.NO_LOG_RECORD
    LOGGED_AT_DECREASING = LogOrderError.code
    CHAIN_BROKEN = _range.CHAIN_BROKEN
    NON_CANONICAL_JSON = _range.NON_CANONICAL_JSON
    INDEX_MISMATCH = _range.INDEX_MISMATCH
    SEQ_GAP = _range.SEQ_GAP
    BAD_KEY_ENTRY = "bad-key-entry"
    CHECKPOINT_MISMATCH = "checkpoint-mismatch"
    TILE_MISMATCH = TileMismatchError.code  # one name wherever a stored tile is found not the log's
    LOG_INCONSISTENT = LogInconsistentError.code
    LOGGED_AT_FUTURE = "logged-at-future"  # later than the verify run's clock + ``MAX_CLOCK_SKEW``


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
    # a log time later than this (the run's clock + ``MAX_CLOCK_SKEW``, as the log writes times) is named
    future_after: str = field(default_factory=lambda: format_time(now_utc() + MAX_CLOCK_SKEW))


HOME_HOLDS = "the signed checkpoint this home holds"


def lost_message(size: int, held: int, whose: str) -> str:
    """``the log has N entries; this home holds a signed checkpoint of size M (entries lost)``."""
    holder = "this home holds a signed checkpoint" if whose == HOME_HOLDS else f"{whose} is"
    return f"the log has {size} entries; {holder} of size {held} (entries lost)"


def _consistent(
    repo: LogRepo, conn: Any, since: Checkpoint, problems: list[VerifyProblem], whose: str
) -> int | None:
    """The log's size when it extends the held checkpoint ``since`` (``held_fault``: the tree the stored
    tiles hold has the held root at its size); None, with the problem named, when entries were lost or
    the log before it was rewritten — or a stored tile the root was read from is not the log's
    (``_consistency``)."""
    current, problem, _tile = _consistency(repo, conn, since, whose)
    if problem is None:
        return current
    problems.append(problem)
    return None


def _consistency(
    repo: LogRepo, conn: Any, since: Checkpoint, whose: str
) -> tuple[int, VerifyProblem | None, tuple[int, int] | None]:
    """``_consistent``'s check: (the log's size, None, None) when it extends ``since``; else (its size,
    the problem, the (level, index) of the stored tile it names, if one). A stored tile the tree read that
    is not what is below it (its root, or its hashes with it, rewritten: ``TileTree.check_roots``)
    explains the other root: ``tile-mismatch`` naming it at its last leaf, as a full verify and every
    reader name it; otherwise ``log-inconsistent``."""
    current = repo.size(conn)
    # the tree at the held size: its root reads nothing past it (an entry the checkpoint does not cover is
    # the whole verify's, or the audit's, to name)
    tree = TileTree(repo.tile_source(conn), min(current, since.size))
    fault = held_fault(current, since, tree.root)
    if fault is None:
        return current, None, None
    error = fault.error
    why = "a stored tile or an entry changed"
    if not fault.lost and error is None:
        try:  # a stored tile's root edited (its hashes kept, or rewritten with it) gives another root
            tree.check_roots()
        except LedgerError as e:
            error, why = e, e.message
    if not fault.lost and isinstance(error, TileMismatchError):
        where = error.tile
        return (
            current,
            VerifyProblem(
                Problem.TILE_MISMATCH,
                f"{error.message} (the log's tree read from the stored tiles does not give the root "
                f"{whose} signs at size {since.size})",
                seq=None if where is None else tile_last_seq(*where),
            ),
            where,
        )
    if fault.lost:
        message = lost_message(current, since.size, whose)
    elif fault.error is not None:  # a stored tile or a row below its size cannot be read as the log's
        message = f"the log is not consistent with {whose} at size {since.size}: {fault.reason()}"
    else:
        message = (
            f"the log is not consistent with {whose} at size {since.size} (rewritten before it: the "
            f"stored tiles give another root): {fault.reason()}; {why}"
        )
    return current, VerifyProblem(Problem.LOG_INCONSISTENT, message), None


def check_held(repo: LogRepo, held: Checkpoint) -> list[VerifyProblem]:
    """Whether the log is consistent with the checkpoint the home holds (``ledger audit``'s check: one
    snapshot, O(log n) tile reads); the problems, empty when it is."""
    problems: list[VerifyProblem] = []
    with repo.read(snapshot=True) as conn:
        _consistent(repo, conn, held, problems, HOME_HOLDS)
    return problems


def _held_start(
    repo: LogRepo,
    since: Checkpoint,
    root_key_id: str,
    problems: list[VerifyProblem],
    anchor: Checkpoint | None = None,
) -> tuple[_Order, int] | None:
    """The in-order state at a held checkpoint's size, after proving the log consistent with it: re-derived
    from every entry below it (``committed_below``, page by page in one snapshot: each record hashed into
    the tree, whose root must be the held one; each row's columns checked against its record, its envelope
    against its entry id, its chain link re-derived), so the keys (the ``key.*`` entries by their records'
    kind), the log time and the chain hash carried over are the ones the checkpoint commits — no column or
    index decides which rows below it matter. A row whose columns are not its record is named (and read
    from its record); so is each stored full tile below it, at every level, that is not the tile the
    records build (``_unlike_stored``: compared as the pages complete them; named once the records give
    the held root, as ``TileTree`` names it: ``_stored_tile_problem``) — never read for the tree. A stored
    tile that made the tiles' root differ from the held one is named by the consistency check
    (``_consistency``: ``tile-mismatch``, as a full verify and the readers name it, once), and the records
    decide whether the log is the checkpoint's. None (with the problem named) when the log is not
    consistent with the checkpoint or an entry below it cannot be carried over.

    ``anchor``: the checkpoint the home holds, when it is older than ``since``: checked against the root
    the re-derived records give as they pass its size (``_anchor_problem``, as a full verify checks it;
    named once the records give the held root, else the log is not the checkpoint's and that is named),
    never against the stored tiles — a stored tile is named once, by the walk above (fix151: the tiles'
    consistency proof of the anchor named a rewritten tile a second time)."""
    s = since.size
    cut = anchor.size if anchor is not None and anchor.size < s else None
    with repo.read(snapshot=True) as conn:
        current, problem, named = _consistency(repo, conn, since, "the held checkpoint")
        if problem is not None:
            problems.append(problem)
            if named is None:
                return None
            # a stored tile gave another root (named): the records below decide whether the log is the
            # checkpoint's, as a full verify decides it (the tree is built from them, never the tiles)
        builder, source = TileBuilder(), repo.tile_source(conn)
        chain, last_at, key_rows = GENESIS_PREV, None, []
        suspects: list[Tile] = []  # the full tiles built below it whose stored tile is not the same
        # the anchor's problem, named once the records are proved the checkpoint's (else that is the fault)
        unlike_anchor = _anchor_problem(builder, anchor) if anchor is not None and cut == 0 else None
        for a in range(0, s, _CHUNK):
            page = committed_below(conn, a, min(a + _CHUNK, s), chain)
            problems.extend(
                VerifyProblem(code=_CODES.get(c, c), message=m, seq=q, id=i) for q, i, c, m in page.problems
            )
            if page.stop:
                return None
            append, leaves, done = builder.append, page.leaves, []
            # the byte offset in the page of the leaf that brings the tree to the anchor's size (or none)
            mark = 32 * (cut - a - 1) if cut is not None and a < cut <= a + len(leaves) // 32 else -1
            for i in range(0, len(leaves), 32):
                if tiles := append(leaves[i : i + 32]):
                    done += tiles
                if i == mark and anchor is not None:
                    unlike_anchor = _anchor_problem(builder, anchor)
            suspects += _unlike_stored(source, done)
            chain, last_at = page.chain, page.logged_at or last_at
            key_rows += page.keys
        if builder.root() != since.root:
            seq = _first_uncommitted(repo, conn, s)
            where = (
                f"the entry at seq {seq} is not the one its tree commits (its record was rewritten with its "
                "leaf hash)"
                if seq is not None
                else "the stored tiles were rewritten with them (a full `ledger verify` names the entry)"
            )
            problems.append(
                VerifyProblem(
                    Problem.LOG_INCONSISTENT,
                    f"the records of the {s} entries before the held checkpoint do not hash to its root: "
                    + where,
                    seq=seq,
                )
            )
            return None
        if unlike_anchor is not None:
            problems.append(unlike_anchor)
        # the records hash to the held root: a stored tile below it that is not their tile is named (one a
        # C2SP client reads, ``/tile/…``, ``ledger tiles export``); the tree was not read from it
        problems.extend(
            p
            for t in suspects
            if (t.level, t.index) != named and (p := _stored_tile_problem(source, s, t)) is not None
        )
        try:  # the records the held root proves: their keys and log time are the checkpoint's
            ring = replay_keys(Keyring(), key_rows, s)
            at = parse_time(last_at) if last_at is not None else None
        except LedgerError as e:
            problems.append(VerifyProblem(Problem.BAD_KEY_ENTRY, f"before the held checkpoint: {e.message}"))
            return None
    order = _Order(TrustedLog(root_key_id, ring, last_logged_at=at), chain, s, builder, None, iter(()), None)
    return order, current


def _unlike_stored(source: TileSource, built: list[Tile]) -> list[Tile]:
    """The tiles of ``built`` (the full tiles the re-derived leaves below a held checkpoint complete, in
    order) whose stored tile is not the same (its hashes or its root; one stored as no tile, not bytes:
    every tile of that level read at once): one query per level, a bytes comparison per tile. A tile not
    stored is none (``TileTree`` computes it)."""
    out: list[Tile] = []
    for level in sorted({t.level for t in built}):
        tiles = [t for t in built if t.level == level]
        lo, hi = tiles[0].index, tiles[-1].index + 1
        try:
            stored, roots = source.tiles(level, lo, hi), source.roots(level, lo, hi)
        except LedgerError:  # one of them is no tile: each is read on its own (``_stored_tile_problem``)
            out += tiles
            continue
        out += [
            t
            for t in tiles
            if (stored.get(t.index), roots.get(t.index)) not in ((None, None), (t.hashes, t.root))
        ]
    return out


class _BuiltBelow:
    """A ``TileSource`` for checking the one stored tile ``tile.level``/``tile.index``: the stored tiles and
    roots are the database's, what is below that tile (the leaves at level 0, the roots of the tiles of the
    level below above) the hashes ``tile`` was built with — so ``TileTree``'s check of a tile against what
    is below it compares it with the tree the records give, not with the rows or other stored tiles."""

    def __init__(self, source: TileSource, tile: Tile) -> None:
        self.source, self.tile = source, tile
        h = tile.hashes
        self.below = [h[i : i + 32] for i in range(0, len(h), 32)]
        self.lo = tile.index * TILE_WIDTH

    def tiles(self, level: int, lo: int, hi: int) -> dict[int, bytes]:
        return self.source.tiles(level, lo, hi)

    def roots(self, level: int, lo: int, hi: int) -> dict[int, bytes]:
        if level == self.tile.level - 1 and lo == self.lo:
            return {lo + i: h for i, h in enumerate(self.below[: hi - lo])}
        return self.source.roots(level, lo, hi)

    def leaves(self, lo: int, hi: int) -> list[bytes]:
        if self.tile.level == 0 and lo == self.lo:
            return self.below[: hi - lo]
        return self.source.leaves(lo, hi)


def _stored_tile_problem(source: TileSource, size: int, tile: Tile) -> VerifyProblem | None:
    """The problem of the stored tile ``tile.level``/``tile.index`` below a held checkpoint when it is not
    ``tile`` (a suspect of ``_unlike_stored``), as ``TileTree`` names it (``TileMismatchError``: "stored
    tile L/NNN is not the log's", or "is no tile"): its hashes against its stored root, then against the
    hashes ``tile`` was built with (``_BuiltBelow``) — one of them fails when it is not ``tile``. None when
    it is ``tile``, or not stored. Named at the tile's last leaf, as a full verify names it (``_tree``)."""
    level, index = tile.level, tile.index
    try:
        TileTree(_BuiltBelow(source, tile), size, strict=True).tile(level, index)
        stored = source.tiles(level, index, index + 1).get(index)
        root = source.roots(level, index, index + 1).get(index)
    except LedgerError as e:
        return VerifyProblem(e.code, e.message, seq=tile.last_seq)
    if (stored, root) in ((None, None), (tile.hashes, tile.root)):
        return None
    return VerifyProblem(  # unreachable while ``TileTree`` checks both: fail closed all the same
        Problem.TILE_MISMATCH,
        f"stored tile {level}/{tile_path(index)} is not the tile the records below the held checkpoint give",
        seq=tile.last_seq,
    )


def _first_uncommitted(repo: LogRepo, conn: Any, size: int) -> int | None:
    """The first seq below ``size`` whose record's leaf is not the one the stored tiles give (the tiles
    are proved against the held root by ``_consistent``); None when none is found (the tiles were
    rewritten with it) or a tile cannot be read. Only to name a rewritten entry: it re-reads the rows."""
    held = TileTree(repo.tile_source(conn), size)
    chain = GENESIS_PREV
    for a in range(0, size, _CHUNK):
        b = min(a + _CHUNK, size)
        page = committed_below(conn, a, b, chain)
        try:
            want = b"".join(held.hashes(0, a, b))
        except LedgerError:
            return None
        for i in range(0, min(len(page.leaves), len(want)), 32):
            if page.leaves[i : i + 32] != want[i : i + 32]:
                return a + i // 32
        chain = page.chain
    return None


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
    with repo.read(snapshot=True) as conn:
        # the largest checkpoint stored when the log's size is read (read first, in the same snapshot): a
        # larger one met later was published after, by a sequencer appending meanwhile (``_beyond_log``)
        latest = repo.latest_checkpoint(conn)
        lo, hi, count = repo.bounds(conn)
    signed_before = 0 if latest is None else int(latest.size)
    # seqs 0 .. max are all there (a primary key holds each once): ranges by arithmetic; else by the rows
    contiguous = count == 0 or (lo == 0 and hi is not None and hi + 1 == count)
    v1 = since is None and any(cp.format == 1 for cp in repo.iter_checkpoints())

    if since is not None:
        report.checked_from = since.size
        started = _held_start(repo, since, root_key_id, problems, anchor)
        if started is None:
            report.size = count
            return report
        order, end = started
        order.checkpoints = repo.iter_checkpoints(since.size)
        with repo.read() as conn:  # the log may have grown since: its seqs up to ``end`` are read again
            lo, hi, count = repo.bounds(conn)
        contiguous = count == 0 or (lo == 0 and hi is not None and hi + 1 == count)
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
        # else: verifying from a newer held checkpoint, the anchor below it was checked against the records
        # re-derived below that one (``_held_start``), as the tree passed its size
    _check_anchor(order, report)

    def checkpoints_upto(size: int) -> None:
        """Check the stored checkpoints of ``size`` (the tree stands at it) and below not yet checked."""
        while order.next_cp is not None and order.next_cp.size <= size:
            _check_checkpoint(order, order.next_cp, origin, log_key_name, log_public_key, report, since)
            order.next_cp = next(order.checkpoints, None)

    checkpoints_upto(start)
    keys = _public_keys(repo)
    n = workers or os.cpu_count() or 1
    ranges = _ranges(start, end, n) if contiguous else _row_ranges(repo, start, end)
    first = list(itertools.islice(ranges, 2))
    todo = itertools.chain(first, ranges)

    def consume(res: RangeFacts) -> None:
        _in_order(order, res, report, checkpoints_upto)
        if progress is not None:
            progress(len(res.seqs))  # entries whose signatures, records and order are checked

    if n > 1 and len(first) > 1:
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(
            max_workers=n, mp_context=ctx, initializer=pool_init, initargs=(database_url, keys, v1)
        ) as pool:
            window: deque[Future[RangeFacts]] = deque()

            def submit() -> None:
                nxt = next(todo, None)
                if nxt is not None:
                    window.append(pool.submit(pool_task, nxt[0], nxt[1]))

            for _ in range(2 * n):
                submit()
            while window:
                res = window.popleft().result()
                submit()
                consume(res)
    else:
        engine = make_engine(database_url)
        try:
            for a, b in todo:
                consume(check_range(engine, a, b, keys, v1))
        finally:
            engine.dispose()
    # index rows at a seq outside the ranges checked that no entry holds (the readers would file them under
    # an entry appended there later); those of the entries below a held checkpoint (seqs 0 .. ``start`` - 1)
    # are checked by a full verify only, as the entries are
    engine = make_engine(database_url)
    try:
        orphans = orphan_index_rows(engine, 0, max(end, start))
    finally:
        engine.dispose()
    problems.extend(
        VerifyProblem(Problem.INDEX_MISMATCH, f"{what}: no entry is at seq {seq}", seq=seq)
        for seq, what in orphans
    )

    # checkpoints beyond the log verified: the log no longer has what they signed, but for one of a log that
    # grew while verify ran
    grown_to: list[int] = []  # the log's size read again (when a checkpoint past it needs it)
    while order.next_cp is not None:
        if not _beyond_log(repo, order.next_cp.size, len(order.builder), signed_before, grown_to):
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


_CODES: dict[str, str] = {str(p): p for p in Problem}


def _beyond_log(repo: LogRepo, size: int, verified: int, signed_before: int, grown_to: list[int]) -> bool:
    """Whether a stored checkpoint of ``size``, past the ``verified`` entries, belongs to a log that grew
    while verify ran (not checked: the entries it signs were appended after the log's size was read), not
    to one that lost entries. It does when it was published after that read (larger than every checkpoint
    stored then, ``signed_before``, read in the same snapshot: the log held the entries of each of those)
    and the log, its size read again now (after the checkpoint was read), holds its ``size`` entries. A
    checkpoint stored before the size was read, or one past the log's size now, is judged (the log no
    longer has the root it signed)."""
    if size <= verified or size <= signed_before:
        return False
    if not grown_to or size > grown_to[0]:  # read again after this checkpoint was (a page read later)
        grown_to[:] = [repo.size()]
    return size <= grown_to[0]


def _in_order(
    order: _Order, facts: RangeFacts, report: VerifyReport, checkpoints_upto: Callable[[int], None]
) -> None:
    """The order-dependent checks of one range's results, in log order: contiguous sequence, chain links,
    trust root, roles and revocations (by the trust rules ingest applied; signatures were checked per
    entry), the tree, its stored tiles and the checkpoints the range passes."""
    problems = report.problems
    problems.extend(
        VerifyProblem(code=_CODES.get(c, c), message=m, seq=q, id=i) for q, i, c, m in facts.problems
    )
    _future(order, facts, problems)
    stored: dict[tuple[int, int], list[tuple[Any, ...]]] = {}
    for t in facts.tiles:
        stored.setdefault((t[0], t[1]), []).append(t)
    seqs, ids, chains = facts.seqs, facts.ids, facts.chains
    if seqs:  # the range's first entry follows the range before (the worker checked the rest)
        seq, entry_id = seqs[0], ids[0]
        if seq != order.expected_seq:
            problems.append(
                VerifyProblem(
                    Problem.SEQ_GAP, f"expected seq {order.expected_seq}, found {seq}", seq=seq, id=entry_id
                )
            )
        if facts.prev != order.prev_chain:
            problems.append(
                VerifyProblem(
                    Problem.CHAIN_BROKEN, "entry does not link to its predecessor", seq=seq, id=entry_id
                )
            )
        order.expected_seq = seqs[-1] + 1
        order.prev_chain = chains[-1]
    _tree(order, facts, report, stored, checkpoints_upto)
    _trust(order, facts, report)
    # stored tiles the range's leaves did not complete, at a position the log holds with their chain hash
    if any(stored.values()):
        chain_at = dict(zip(seqs, chains, strict=True))
        for rows in stored.values():
            for level, idx, chain, last_seq, _hashes, _root in rows:
                if chain_at.get(last_seq) == chain:
                    problems.append(
                        VerifyProblem(
                            Problem.TILE_MISMATCH,
                            f"stored tile {level}/{tile_path(idx)} names leaf {last_seq}, not its last "
                            f"({tile_last_seq(level, idx)})",
                            seq=last_seq,
                        )
                    )


def _next_stop(order: _Order) -> int | None:
    """The tree size at which the held checkpoint or the next stored checkpoint is checked."""
    sizes = [cp.size for cp in (order.anchor, order.next_cp) if cp is not None]
    return min(sizes) if sizes else None


def _tree(
    order: _Order,
    facts: RangeFacts,
    report: VerifyReport,
    stored: dict[tuple[int, int], list[tuple[Any, ...]]],
    checkpoints_upto: Callable[[int], None],
) -> None:
    """The range's leaves into the tree, in log order: the stored tiles they complete, and the held and
    stored checkpoints at the sizes they pass."""
    problems = report.problems
    builder, v1_builder = order.builder, order.v1_builder
    leaves, v1_leaves = facts.leaves, facts.v1_leaves
    append = builder.append
    stop = _next_stop(order)
    for i in range(len(facts.seqs)):
        done = append(leaves[32 * i : 32 * i + 32])
        if done:
            seq, entry_id, chain = facts.seqs[i], facts.ids[i], facts.chains[i]
            for tile in done:
                report.tiles_checked += 1
                for level, idx, t_chain, last_seq, hashes, root in stored.pop((tile.level, tile.index), []):
                    if t_chain != chain:
                        continue  # a tile of another log (one a rollback lost): never read
                    if last_seq != tile.last_seq or hashes != tile.hashes or root != tile.root:
                        problems.append(
                            VerifyProblem(
                                Problem.TILE_MISMATCH,
                                f"stored tile {level}/{tile_path(idx)} is not the log's "
                                "(proofs from it would not verify)",
                                seq=seq,
                                id=entry_id,
                            )
                        )
        if v1_builder is not None and v1_leaves is not None:
            v1_builder.append(v1_leaves[32 * i : 32 * i + 32])
        if stop is not None and len(builder) >= stop:
            if order.anchor is not None and order.anchor.size == len(builder):
                _check_anchor(order, report)
            if order.next_cp is not None and order.next_cp.size <= len(builder):
                checkpoints_upto(len(builder))
            stop = _next_stop(order)


def _trust(order: _Order, facts: RangeFacts, report: VerifyReport) -> None:
    """In log order: the log time never decreases, and each key may sign its entry's kind at that time by
    the keys as of the entries before it (so a revoked key cannot be slipped in "earlier").

    A range with no key entry leaves the keys as they are; when its log times are in order from the last
    one on, each (signer, kind) it holds is judged at its first and its last log time: the faults are
    monotone in the time (revoked and expired from a time on, not yet valid before one; unknown signer and
    role not at all), so an entry between them has none when neither end has. Otherwise (or when an end
    has one) every entry is judged on its own, as ingest judged it."""
    trusted = order.trusted
    seqs, times = facts.seqs, facts.times
    if seqs and facts.times_in_order and not facts.has_key_kind and not facts.key_payloads and 0 not in seqs:
        first, last = parse_time(times[0]), parse_time(times[-1])
        ring = trusted.ring
        if (trusted.last_logged_at is None or first >= trusted.last_logged_at) and all(
            trust_problem(ring, signer, kind, first) is None
            and trust_problem(ring, signer, kind, last) is None
            for signer, kind in set(zip(facts.signers, facts.kinds, strict=True))
        ):
            # what ``update`` does for each entry of a kind that is not a key's
            if trusted.last_logged_at is None or last > trusted.last_logged_at:
                trusted.last_logged_at = last
            ring.seq = max(ring.seq, max(seqs) + 1)
            return
    problems = report.problems
    key_payloads = facts.key_payloads
    for i, (seq, entry_id, signer, kind, logged_at) in enumerate(
        zip(seqs, facts.ids, facts.signers, facts.kinds, times, strict=True)
    ):
        key_payload = key_payloads.get(i)
        try:
            at = parse_time(logged_at)
        except LedgerError as e:
            problems.append(VerifyProblem(e.code, f"logged_at: {e.message}", seq=seq, id=entry_id))
            continue
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


def _future(order: _Order, facts: RangeFacts, problems: list[VerifyProblem]) -> None:
    """Name the range's first entry logged later than the run's clock plus ``MAX_CLOCK_SKEW``: the log's
    clock never runs back, so one such time (a clock set wrong, or a head's time rewritten and inherited)
    is every later entry's too. The log writes its times in one fixed RFC 3339 form, so text order is time
    order (one ``max`` over the range's texts; a time not in that form is named by the range check)."""
    times = facts.times
    if not times or max(times) <= order.future_after:
        return
    for seq, entry_id, logged_at in zip(facts.seqs, facts.ids, times, strict=True):
        if logged_at > order.future_after:
            later = sum(1 for t in times if t > order.future_after) - 1
            problems.append(
                VerifyProblem(
                    Problem.LOGGED_AT_FUTURE,
                    f"logged at {logged_at}, later than this run's clock plus "
                    f"{int(MAX_CLOCK_SKEW.total_seconds())} s ({order.future_after})"
                    + (
                        f"; {later} more entr{'y' if later == 1 else 'ies'} of this range too"
                        if later
                        else ""
                    ),
                    seq=seq,
                    id=entry_id,
                )
            )
            return


def _check_anchor(order: _Order, report: VerifyReport) -> None:
    """At the size of the checkpoint the home holds: the tree the log's records build has its root (a
    problem of the ledger, like a checkpoint's: the leaf rewritten is named by its own checks)."""
    cp = order.anchor
    if cp is None or cp.size != len(order.builder):
        return
    order.anchor = None  # checked
    if (problem := _anchor_problem(order.builder, cp)) is not None:
        report.problems.append(problem)


def _anchor_problem(builder: TileBuilder, cp: Checkpoint) -> VerifyProblem | None:
    """The problem of the tree the log's records build, standing at the size of the checkpoint the home
    holds (``cp``), when its root is not that checkpoint's; None when it is."""
    if held_fault(len(builder), cp, lambda _size: builder.root()) is None:
        return None
    return VerifyProblem(
        Problem.LOG_INCONSISTENT,
        f"the log's first {cp.size} entries are not the ones {HOME_HOLDS} commits "
        "(the log was rewritten before it)",
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
