"""Streaming BLAKE3 (and optional SHA-256) of files and streams, parallel over files."""

from __future__ import annotations

import contextlib
import hashlib
import mmap
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, NewType

import blake3

if TYPE_CHECKING:  # the thread pools (and the logging module they load) are imported where files are hashed
    from concurrent.futures import Future

from ledger.errors import InputError

__all__ = [
    "CHUNK_SIZE",
    "Digest",
    "FileDigests",
    "HexDigest",
    "blake3_hex",
    "hash_file",
    "hash_files",
    "hash_stream",
    "parse_digest",
]

HexDigest = NewType("HexDigest", str)

CHUNK_SIZE = 8 * 1024 * 1024
_DIGEST_RE = re.compile(r"^blake3:([0-9a-f]{64})$")
_THREADS_MIN_CHUNK = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Digest:
    """A content address ``blake3:<64 hex>``."""

    hex: HexDigest

    def __str__(self) -> str:
        return f"blake3:{self.hex}"


def parse_digest(text: str) -> Digest:
    """Parse ``blake3:<64 lowercase hex>``; anything else (paths, traversal tricks) is refused."""
    m = _DIGEST_RE.fullmatch(text.strip())
    if m is None:
        raise InputError(f"not a content address: {text!r} (expected blake3:<64 lowercase hex>)")
    return Digest(HexDigest(m.group(1)))


def blake3_hex(data: bytes) -> HexDigest:
    return HexDigest(blake3.blake3(data).hexdigest())


@dataclass(frozen=True, slots=True)
class FileDigests:
    """Digests and size of one byte stream, computed in a single pass."""

    blake3: Digest
    size: int
    sha256: str | None = None


def _new_blake3() -> blake3.blake3:
    return blake3.blake3(max_threads=blake3.blake3.AUTO)


def iter_chunks(stream: BinaryIO, chunk_size: int = CHUNK_SIZE) -> Iterator[memoryview]:
    """Yield views into one reused buffer; each view is valid until the next one is yielded."""
    buf = bytearray(chunk_size)
    view = memoryview(buf)
    while True:
        n = stream.readinto(view)  # type: ignore[attr-defined]
        if not n:
            return
        yield view[:n]


def hash_stream(
    stream: BinaryIO,
    *,
    sha256: bool = False,
    sink: Callable[[memoryview], object] | None = None,
    write_at: Callable[[memoryview, int], object] | None = None,
    progress: Callable[[int], object] | None = None,
    chunk_size: int = CHUNK_SIZE,
) -> FileDigests:
    """Hash a stream in one pass; every chunk is also handed to ``sink`` (e.g. a file being written).

    With a sink, reading, hashing and the sink overlap: each runs on its own thread over a ring of
    private buffers, so the bytes hashed are exactly the bytes written, even if the source changes.
    ``sink`` gets the chunks one at a time, in order. ``write_at(chunk, offset)`` instead gets them on
    two threads at once, in any order, for a destination that writes at an offset (a disk keeps more
    writes in flight); give one or the other.
    """
    if sink is not None and write_at is not None:
        raise ValueError("give sink or write_at, not both")
    b3 = _new_blake3() if chunk_size >= _THREADS_MIN_CHUNK else blake3.blake3()
    s2 = hashlib.sha256() if sha256 else None

    def digest(view: memoryview) -> None:
        b3.update(view)
        if s2 is not None:
            s2.update(view)

    size = 0
    if sink is not None:
        size = _pipeline(stream, digest, lambda view, _at: sink(view), progress, chunk_size, writers=1)
    elif write_at is not None:
        size = _pipeline(stream, digest, write_at, progress, chunk_size, writers=2)
    else:
        for chunk in iter_chunks(stream, chunk_size):
            digest(chunk)
            size += len(chunk)
            if progress is not None:
                progress(len(chunk))
    return FileDigests(
        blake3=Digest(HexDigest(b3.hexdigest())),
        size=size,
        sha256=s2.hexdigest() if s2 is not None else None,
    )


def _io_buffer(size: int) -> mmap.mmap:
    """A private anonymous buffer, page-aligned, in transparent huge pages where the kernel allows.

    Direct I/O from 4 KiB pages splits into small requests (a request holds a limited number of
    segments: 254 × 4 KiB ≈ 1 MiB on virtio); 2 MiB pages let each request carry its full size.
    """
    if not hasattr(mmap, "MAP_PRIVATE"):  # pragma: no cover - not POSIX
        return mmap.mmap(-1, size)
    buf = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        with contextlib.suppress(OSError):
            buf.madvise(mmap.MADV_HUGEPAGE)
    return buf


def _pipeline(
    stream: BinaryIO,
    digest: Callable[[memoryview], object],
    write_at: Callable[[memoryview, int], object],
    progress: Callable[[int], object] | None,
    chunk_size: int,
    writers: int,
) -> int:
    """Read into a ring of buffers; one thread hashes each buffer in order, ``writers`` threads write them.

    The buffers are anonymous memory maps, so page-aligned: a sink may write them with direct I/O.
    A buffer is read into again only after its hash and its write are done.
    """
    from concurrent.futures import ThreadPoolExecutor

    ring = [_io_buffer(chunk_size) for _ in range(2 + writers)]
    pending: list[list[Future[object]]] = [[] for _ in ring]
    size = 0
    with ThreadPoolExecutor(1) as hasher, ThreadPoolExecutor(writers) as writer:
        try:
            i = 0
            while True:
                slot = i % len(ring)
                for f in pending[slot]:
                    f.result()
                view = memoryview(ring[slot])
                n = stream.readinto(view)  # type: ignore[attr-defined]
                if not n:
                    break
                part = view[:n]
                pending[slot] = [hasher.submit(digest, part), writer.submit(write_at, part, size)]
                size += n
                if progress is not None:
                    progress(n)
                i += 1
        finally:
            for futures in pending:
                for f in futures:
                    f.result()
    return size


def hash_file(
    path: str | os.PathLike[str],
    *,
    sha256: bool = False,
    progress: Callable[[int], object] | None = None,
) -> FileDigests:
    """Hash one file, streaming; BLAKE3 alone uses memory mapping and all cores."""
    p = Path(path)
    if not sha256 and progress is None:
        size = p.stat().st_size
        if size > 0:
            b3 = _new_blake3()
            b3.update_mmap(str(p))
            return FileDigests(blake3=Digest(HexDigest(b3.hexdigest())), size=size)
    with p.open("rb") as f:
        return hash_stream(f, sha256=sha256, progress=progress)


def hash_files(
    paths: Iterable[Path],
    *,
    sha256: bool = True,
    workers: int | None = None,
    progress: Callable[[int], object] | None = None,
) -> dict[Path, FileDigests]:
    """Hash many files in parallel threads (both hashers release the GIL on large buffers)."""
    from concurrent.futures import ThreadPoolExecutor

    items = list(paths)
    n = workers or min(len(items), os.cpu_count() or 1) or 1
    with ThreadPoolExecutor(max_workers=n) as pool:
        results = pool.map(lambda p: hash_file(p, sha256=sha256, progress=progress), items)
        return dict(zip(items, results, strict=True))
