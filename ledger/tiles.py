"""The Merkle tree as C2SP tlog-tiles: every node, root and proof computed from hash tiles.

A hash tile at level ``L``, index ``N`` holds the 256 hashes of the height-``8L`` subtrees
``256N .. 256N+255`` (C2SP tlog-tiles). The database keeps the *full* tiles (``ledger.repo``); a
``TileTree`` computes any node of the RFC 6962 tree at a size from those tiles plus, for the partial
right edge, at most 255 leaf hashes or tile roots per level: no process holds the whole tree.
``TileBuilder`` takes leaves in log order and keeps only the right edge (O(log n) hashes and one partial
tile per level): ``ledger verify`` streams with it, and ``ledger tiles export`` and the migration write
the tiles that come out of it.

Everything here is pure: hashes in, hashes out, through a ``TileSource`` the caller implements.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from ledger.errors import ChainBrokenError, InputError, ProofError, TileMismatchError
from ledger.log import _EMPTY_ROOT, _node, _split, merkle_root, verify_consistency, verify_inclusion

__all__ = [
    "TILE_HEIGHT",
    "TILE_WIDTH",
    "Tile",
    "TileBuilder",
    "TileSource",
    "TileTree",
    "full_tiles",
    "tile_last_seq",
    "tile_path",
    "tile_span",
]

TILE_HEIGHT = 8  # C2SP tlog-tiles: a tile is a subtree of height 8 ...
TILE_WIDTH = 256  # ... of 256 hashes
HASH = 32


def tile_span(level: int) -> int | None:
    """How many leaves a full tile at ``level`` spans (256 ** (level + 1)); None where no log this
    database can hold (64-bit seq) fills one."""
    span = TILE_WIDTH ** (level + 1)
    return span if span < 2**62 else None


def tile_last_seq(level: int, index: int) -> int:
    """The index of the last leaf under full tile ``level``/``index``."""
    return ((index + 1) << (TILE_HEIGHT * (level + 1))) - 1


def full_tiles(level: int, size: int) -> int:
    """How many full tiles of ``level`` a tree of ``size`` leaves has."""
    return size >> (TILE_HEIGHT * (level + 1))


def tile_path(n: int) -> str:
    """C2SP tlog-tiles index path: zero-padded 3-digit elements, all but the last prefixed with ``x``."""
    digits = str(n)
    digits = "0" * (-len(digits) % 3) + digits
    parts = [digits[i : i + 3] for i in range(0, len(digits), 3)]
    return "/".join(["x" + p for p in parts[:-1]] + [parts[-1]])


@dataclass(frozen=True)
class Tile:
    """A full hash tile: ``hashes`` is 256 concatenated hashes, ``root`` the hash of the subtree they span."""

    level: int
    index: int
    hashes: bytes
    root: bytes

    @property
    def last_seq(self) -> int:
        return tile_last_seq(self.level, self.index)


class TileSource(Protocol):
    """Where a ``TileTree`` reads: the stored full tiles (only those of the log it reads), and leaf hashes."""

    def tiles(self, level: int, lo: int, hi: int) -> dict[int, bytes]:
        """The stored full tiles of ``level`` with ``lo <= index < hi`` (256 * 32 bytes each), by index."""
        ...

    def roots(self, level: int, lo: int, hi: int) -> dict[int, bytes]:
        """The roots of the stored full tiles of ``level`` with ``lo <= index < hi``, by index."""
        ...

    def leaves(self, lo: int, hi: int) -> list[bytes]:
        """The leaf hashes of ``lo <= index < hi``, in order."""
        ...


# Tiles whose hashes were found to hash to their root, in this process: SHA-256 of (hashes, root) — a fact
# about those bytes, whatever database they were read from (a tile read after a rollback, a failover, an
# edit is other bytes, so it is checked again: nothing here trusts a row, only bytes already hashed). It
# saves the 255 hashes of a tile read again (a tile served, a bundle, a proof): about 0.2 ms each.
_CHECKED: dict[bytes, None] = {}
_CHECKED_MAX = 4096  # entries (~0.5 MB); cleared when full


def _hashes_to(hashes: bytes, root: bytes, levels: Callable[[], list[list[bytes]]]) -> bool:
    """Whether a full tile's 256 ``hashes`` have the Merkle root ``root`` (``levels()``: the tile's
    subtree, root last, computed only when these bytes were not checked before in this process)."""
    key = hashlib.sha256(hashes + root).digest()
    if key in _CHECKED:
        return True
    if levels()[-1][0] != root:
        return False
    if len(_CHECKED) >= _CHECKED_MAX:
        _CHECKED.clear()
    _CHECKED[key] = None
    return True


def _in_order(found: dict[int, bytes], lo: int) -> list[bytes]:
    """``found`` (by index, from ``lo``) as a list, up to the first index it lacks."""
    out: list[bytes] = []
    while (h := found.get(lo + len(out))) is not None:
        out.append(h)
    return out


class TileTree:
    """The RFC 6962 tree of ``size`` leaves, read from a ``TileSource``; proofs byte-identical to
    ``ledger.log.MerkleTree``'s. One instance serves one request: it memoises what it read.

    Every stored full tile read is checked against its stored root. ``strict`` (a tile served to a tlog
    client, which checks it against nothing but the next checkpoint): also each full tile against what is
    below it (``_tile``), and each stored root the right edge takes against its tile's hashes
    (``_checked_roots``) — the reads of what a tile commits, bounded per tile (256 rows or roots; at most
    255 tiles of 8 KiB for a partial tile above level 0)."""

    def __init__(self, source: TileSource, size: int, *, strict: bool = False) -> None:
        if size < 0:
            raise InputError(f"tree size {size} < 0")
        self.source = source
        self.size = size
        self.strict = strict
        self._tiles: dict[tuple[int, int], bytes | None] = {}
        self._levels: dict[tuple[int, int], list[list[bytes]]] = {}
        self._nodes: dict[tuple[int, int], bytes] = {}
        self._edge: dict[tuple[int, int], list[bytes]] = {}
        self._roots_read: set[tuple[int, int]] = set()  # (level, index) of the stored roots the edge took
        self._below: set[tuple[int, int]] = set()  # the tiles checked against what is below them

    def __len__(self) -> int:
        return self.size

    # --- reading tiles --------------------------------------------------------------------------

    def _tile(self, level: int, index: int) -> bytes | None:
        """The stored full tile ``level``/``index`` (None: not stored), checked against what it commits
        before anything is read from it: 256 hashes whose Merkle root is the tile's stored ``root`` (the
        hash the tree above, and so every checkpoint, commits it by), and which are the hashes below it —
        at level 0 the leaves of the 256 rows it spans (each the hash of its row's record: the source's
        ``leaves``), above the stored roots of the 256 tiles below — the latter only in a ``strict`` tree
        (and for ``check_roots``). A tile whose hashes were edited (its root kept; or, strict, rewritten
        to match) is ``TileMismatchError`` naming it: never served, never a proof, never a root. Cost
        (strict): one read of the 256 rows (or roots) below per tile per tree."""
        return self._read_tile(level, index, below=self.strict)

    def _read_tile(self, level: int, index: int, *, below: bool) -> bytes | None:
        """``_tile``; ``below``: also checked against what is below it (once per tree)."""
        key = (level, index)
        if key not in self._tiles:
            got = self.source.tiles(level, index, index + 1).get(index)
            if got is not None:
                root = self.source.roots(level, index, index + 1).get(index)
                self._check_tile(level, index, got, root)
            self._tiles[key] = got
        got = self._tiles[key]
        if below and got is not None and key not in self._below:
            lo = index * TILE_WIDTH
            under = (
                self.source.leaves(lo, lo + TILE_WIDTH)
                if level == 0
                else _in_order(self.source.roots(level - 1, lo, lo + TILE_WIDTH), lo)
            )
            if b"".join(under) != got:
                self._levels.pop(key, None)
                first = next(
                    (i for i, h in enumerate(under) if got[i * HASH : (i + 1) * HASH] != h), len(under)
                )
                what = (
                    f"the leaf of seq {lo + first}"
                    if level == 0
                    else f"the root of stored tile {level - 1}/{tile_path(lo + first)}"
                )
                raise TileMismatchError(
                    f"stored tile {level}/{tile_path(index)} is not the log's: its hash {first} is not "
                    f"{what} (of {len(under)} of the {TILE_WIDTH} below it the database holds): the "
                    "database's hash tiles were edited behind the log's back; nothing is served, proved "
                    "or signed from it",
                    tile=key,
                )
            self._below.add(key)
        return got

    def _check_tile(self, level: int, index: int, data: bytes, root: bytes | None) -> None:
        """``TileMismatchError`` naming tile ``level``/``index`` unless its 256 hashes ``data`` hash to
        its stored ``root``."""
        if len(data) != TILE_WIDTH * HASH:
            raise TileMismatchError(
                f"stored tile {level}/{tile_path(index)} is {len(data)} bytes, not "
                f"{TILE_WIDTH * HASH}: the database's hash tiles were edited behind the log's back",
                tile=(level, index),
            )
        if root is None or not _hashes_to(data, root, lambda: self._tile_levels(level, index, data)):
            self._levels.pop((level, index), None)
            raise TileMismatchError(
                f"stored tile {level}/{tile_path(index)} is not the log's: its 256 hashes do not "
                "hash to its stored root (the hash the tree above it commits): the database's hash "
                "tiles were edited behind the log's back; nothing is served, proved or signed "
                "from it",
                tile=(level, index),
            )

    def _checked_roots(self, level: int, lo: int, hi: int) -> dict[int, bytes]:
        """The stored roots of the full tiles of ``level`` in ``lo .. hi - 1``, each checked against its
        tile's 256 hashes (one read of those tiles, hashed once per process: ``_hashes_to``): a root
        column edited alone is ``TileMismatchError`` naming its tile, never a hash of a partial tile
        above, a proof or a root."""
        roots = self.source.roots(level, lo, hi)
        if not roots:
            return roots
        tiles = self.source.tiles(level, min(roots), max(roots) + 1)
        for j in sorted(roots):
            data = tiles.get(j)
            if data is None:
                raise TileMismatchError(
                    f"stored tile {level}/{tile_path(j)} has a root and no hashes: the database's hash "
                    "tiles were edited behind the log's back",
                    tile=(level, j),
                )
            self._check_tile(level, j, data, roots[j])
        return roots

    def check_roots(self) -> None:
        """Each stored tile this tree read — a root it took for a right edge (``_unstored``), a full tile
        a node or a hash came from — checked against its hashes and against what is below it
        (``_read_tile``), lowest level first: ``TileMismatchError`` naming the first tile whose root, or
        hashes (and root), was edited. A diagnosis, for a root no held checkpoint signs or a proof that
        does not verify (it reads the whole tile of each root, and the rows or roots below each tile)."""
        read = {key for key, got in self._tiles.items() if got is not None} | self._roots_read
        for level, index in sorted(read):
            self._read_tile(level, index, below=True)

    def _proved(self, check: Callable[[], None], what: str) -> None:
        """``check``: a proof this tree built, verified against the roots it gives (O(log n) hashes, the
        nodes memoised). Stored tiles that disagree with each other — a level-0 tile rewritten with its
        root under a full level-1 tile that still holds the old one: the root is the signed one, the
        path is not — give a proof that verifies against no checkpoint: ``TileMismatchError`` naming the
        tile (``check_roots``), never a proof served or signed over."""
        try:
            check()
        except ProofError as e:
            self.check_roots()  # names the tile where one disagrees with what is below it
            raise TileMismatchError(
                f"{what} read from the stored hash tiles does not verify against the root they give "
                f"({e.message}): the database's hash tiles were edited behind the log's back; nothing is "
                "served, proved or signed from them"
            ) from e

    def _tile_levels(self, level: int, index: int, data: bytes) -> list[list[bytes]]:
        """The 9 levels of the subtree a full tile spans (256 hashes up to its root)."""
        key = (level, index)
        got = self._levels.get(key)
        if got is None:
            row = [data[i : i + HASH] for i in range(0, len(data), HASH)]
            got = [row]
            while len(row) > 1:
                row = [_node(row[i], row[i + 1]) for i in range(0, len(row), 2)]
                got.append(row)
            self._levels[key] = got
        return got

    def hashes(self, level: int, lo: int, hi: int) -> list[bytes]:
        """The hashes of the height-``8 * level`` subtrees ``lo .. hi - 1`` (all complete at this size)."""
        if hi <= lo:
            return []
        if hi << (TILE_HEIGHT * level) > self.size:
            raise InputError(f"level-{level} hashes {lo}..{hi} are beyond tree size {self.size}")
        out: list[bytes] = []
        for t in range(lo // TILE_WIDTH, (hi - 1) // TILE_WIDTH + 1):
            a, b = max(lo, t * TILE_WIDTH) - t * TILE_WIDTH, min(hi, (t + 1) * TILE_WIDTH) - t * TILE_WIDTH
            data = self._tile(level, t) if full_tiles(level, self.size) > t else None
            if data is not None:
                out.extend(data[i * HASH : (i + 1) * HASH] for i in range(a, b))
            else:
                out.extend(self._unstored(level, t)[a:b])
        return out

    def _unstored(self, level: int, t: int) -> list[bytes]:
        """The hashes of tile ``level``/``t`` the database does not store (the partial right edge, or a
        full tile not written yet), as far as this size has them: read once, at most 255 (or 256) leaf
        hashes at level 0, the roots of the full tiles below above (computed where not stored)."""
        key = (level, t)
        got = self._edge.get(key)
        if got is None:
            lo = t * TILE_WIDTH
            hi = min(lo + TILE_WIDTH, self.size >> (TILE_HEIGHT * level))
            if level == 0:
                got = self.source.leaves(lo, hi)
                if len(got) != hi - lo:
                    raise ChainBrokenError(
                        f"the log has {len(got)} leaves in {lo}..{hi - 1}, not {hi - lo}: a row below its "
                        "size was deleted behind the log's back"
                    )
            else:
                roots = (
                    self._checked_roots(level - 1, lo, hi)
                    if self.strict
                    else self.source.roots(level - 1, lo, hi)
                )
                self._roots_read.update((level - 1, j) for j in roots)
                got = [
                    roots.get(j) or merkle_root(self.hashes(level - 1, j * TILE_WIDTH, (j + 1) * TILE_WIDTH))
                    for j in range(lo, hi)
                ]
            self._edge[key] = got
        return got

    # --- nodes, roots, proofs -------------------------------------------------------------------

    def node(self, height: int, index: int) -> bytes:
        """The hash of the perfect subtree of ``height`` over leaves ``index * 2**height ..``."""
        key = (height, index)
        got = self._nodes.get(key)
        if got is not None:
            return got
        level, r = divmod(height, TILE_HEIGHT)
        first = index << r
        t = first // TILE_WIDTH
        data = self._tile(level, t) if full_tiles(level, self.size) > t else None
        if data is not None:
            got = self._tile_levels(level, t, data)[r][(first - t * TILE_WIDTH) >> r]
        else:
            got = merkle_root(self.hashes(level, first, first + (1 << r)))
        self._nodes[key] = got
        return got

    def range_hash(self, lo: int, hi: int) -> bytes:
        """MTH(D[lo:hi]): fold the greedy power-of-two chunks of the range from the right."""
        if hi > self.size:
            raise InputError(f"range {lo}..{hi} beyond tree size {self.size}")
        if hi <= lo:
            return _EMPTY_ROOT
        chunks: list[bytes] = []
        pos, rem = lo, hi - lo
        while rem:
            b = rem.bit_length() - 1
            size = 1 << b
            if pos % size == 0:
                chunks.append(self.node(b, pos >> b))
            else:
                chunks.append(merkle_root(self.hashes(0, pos, pos + size)))
            pos += size
            rem -= size
        h = chunks[-1]
        for c in reversed(chunks[:-1]):
            h = _node(c, h)
        return h

    def root(self, size: int | None = None) -> bytes:
        return self.range_hash(0, self.size if size is None else size)

    def leaf(self, index: int) -> bytes:
        if not 0 <= index < self.size:
            raise InputError(f"leaf {index} is not in a tree of size {self.size}")
        return self.hashes(0, index, index + 1)[0]

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """RFC 6962 PATH(m, D[n])."""
        n = self.size if size is None else size
        if not 0 <= index < n or n > self.size:
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
        proof = list(reversed(stack))
        self._proved(
            lambda: verify_inclusion(index, n, self.leaf(index), proof, self.root(n)),
            f"the inclusion proof of leaf {index} at size {n}",
        )
        return proof

    def consistency_proof(self, old_size: int, size: int | None = None) -> list[bytes]:
        """RFC 6962 PROOF(m, D[n])."""
        n = self.size if size is None else size
        if not 0 < old_size <= n <= self.size:
            raise InputError(f"consistency needs 0 < old size ({old_size}) <= new size ({n})")

        def sub(m: int, lo: int, hi: int, complete: bool) -> list[bytes]:
            if m == hi - lo:
                return [] if complete else [self.range_hash(lo, hi)]
            k = _split(hi - lo)
            if m <= k:
                return [*sub(m, lo, lo + k, complete), self.range_hash(lo + k, hi)]
            return [*sub(m - k, lo + k, hi, False), self.range_hash(lo, lo + k)]

        proof = sub(old_size, 0, n, True)
        self._proved(
            lambda: verify_consistency(old_size, n, self.root(old_size), self.root(n), proof),
            f"the consistency proof from size {old_size} to {n}",
        )
        return proof

    def tile(self, level: int, index: int, width: int | None = None) -> bytes:
        """The C2SP hash tile ``level``/``index`` (full, or partial of ``width``) of this tree; ``None``
        width = full. ``InputError`` when the tree does not have it."""
        w = TILE_WIDTH if width is None else width
        lo = index * TILE_WIDTH
        if not 1 <= w <= TILE_WIDTH or (lo + w) << (TILE_HEIGHT * level) > self.size:
            raise InputError(f"a tree of size {self.size} has no tile {level}/{index} of width {w}")
        return b"".join(self.hashes(level, lo, lo + w))

    def compact_range(self, size: int | None = None) -> list[tuple[int, bytes]]:
        """The right edge at this size (or at ``size``, no larger: the perfect subtrees a tree of that size
        shares with this one, whose fold is ``root(size)``): (height, hash) of the greedy perfect
        subtrees, left to right."""
        n = self.size if size is None else size
        if not 0 <= n <= self.size:
            raise InputError(f"a tree of size {self.size} has no compact range at size {n}")
        out: list[tuple[int, bytes]] = []
        pos = 0
        for b in range(n.bit_length() - 1, -1, -1):
            if n >> b & 1:
                out.append((b, self.node(b, pos >> b)))
                pos += 1 << b
        return out

    def builder(self) -> TileBuilder:
        """A ``TileBuilder`` standing at this size (its right edge and partial tiles read from tiles)."""
        pending: list[list[bytes]] = []
        level = 0
        while (self.size >> (TILE_HEIGHT * level)) > 0:
            count = self.size >> (TILE_HEIGHT * level)
            start = count - count % TILE_WIDTH
            pending.append(self.hashes(level, start, count))
            level += 1
        return TileBuilder(size=self.size, stack=self.compact_range(), pending=pending)


class TileBuilder:
    """Leaf hashes in, in log order: the right edge of the tree and every full tile as it completes.

    Memory: the compact range (at most 64 hashes) and one partial tile (at most 255 hashes) per level.
    """

    def __init__(
        self,
        *,
        size: int = 0,
        stack: Sequence[tuple[int, bytes]] = (),
        pending: Sequence[Sequence[bytes]] = (),
    ) -> None:
        self.size = size
        self._stack: list[tuple[int, bytes]] = list(stack)
        self._pending: list[list[bytes]] = [list(p) for p in pending] or [[]]

    def __len__(self) -> int:
        return self.size

    def append(self, leaf: bytes) -> list[Tile]:
        """Add the next leaf; the full tiles it completes (lowest level first)."""
        done: list[Tile] = []
        self._note(0, leaf, done)
        stack = self._stack
        stack.append((0, leaf))
        while len(stack) > 1 and stack[-1][0] == stack[-2][0]:
            (height, left), (_, right) = stack[-2], stack[-1]
            h = _node(left, right)
            stack[-2:] = [(height + 1, h)]
            self._note(height + 1, h, done)
        self.size += 1
        return done

    def _note(self, height: int, h: bytes, done: list[Tile]) -> None:
        level, r = divmod(height, TILE_HEIGHT)
        if r:
            return
        if level > 0:  # ``h`` is the root of the tile of the level below, which it completes
            below = self._pending[level - 1]
            index = self.size >> (TILE_HEIGHT * level)  # the leaf being added is the tile's last
            done.append(Tile(level - 1, index, b"".join(below), h))
            below.clear()
        while len(self._pending) <= level:
            self._pending.append([])
        self._pending[level].append(h)

    def root(self) -> bytes:
        """The root of the tree of the leaves added so far."""
        if not self._stack:
            return _EMPTY_ROOT
        h = self._stack[-1][1]
        for _, c in reversed(self._stack[:-1]):
            h = _node(c, h)
        return h

    def partial(self, level: int) -> bytes:
        """The hashes of the partial tile at ``level`` (empty when there is none)."""
        return b"".join(self._pending[level]) if level < len(self._pending) else b""

    @property
    def levels(self) -> int:
        """How many tile levels have hashes so far."""
        return len(self._pending)
