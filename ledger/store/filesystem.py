"""Filesystem artifact store: ``objects/ab/<64 hex>``; temp file + fsync + rename; verified on read."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import io
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from ledger.atomic import fsync_dir
from ledger.errors import (
    ArtifactCorruptError,
    ArtifactMissingError,
    ArtifactTooLargeError,
    IntegrityError,
    StorageError,
)
from ledger.hashing import CHUNK_SIZE, Digest, FileDigests, HexDigest, hash_file, hash_stream, iter_chunks
from ledger.store.base import StoredArtifact

__all__ = ["FilesystemStore"]


class _SizeLimited:
    """Wrap a stream and refuse to read past ``limit`` bytes."""

    def __init__(self, stream: BinaryIO, limit: int) -> None:
        self._stream = stream
        self._left = limit

    def readinto(self, buf: memoryview) -> int:
        n: int = self._stream.readinto(buf)  # type: ignore[attr-defined]
        self._left -= n
        if self._left < 0:
            raise ArtifactTooLargeError("artifact exceeds the size limit")
        return n


_DIRECT_ALIGN = 4096  # covers every logical block size Linux direct I/O asks for
_DIRECT_MIN = 32 * 1024 * 1024  # smaller files gain nothing from bypassing the page cache
_DIRECT_CHUNK = 32 * 1024 * 1024  # large writes keep the disk's queue full (4 in the ring: 128 MiB)


class _DirectSink:
    """Write the chunks of an ingest at their offsets, with O_DIRECT where the filesystem allows it.

    The chunks come from page-aligned buffers (``hash_stream``'s ring), so the disk takes them without a
    copy into the page cache, two writes in flight while the next chunk is read and hashed; the final
    ``fsync`` then has almost nothing left to flush, and a large put does not evict the host's page
    cache. The unaligned tail, and everything after a filesystem refuses direct I/O (tmpfs, some FUSE
    and network filesystems), go through the page cache as usual.
    """

    def __init__(self, out: io.FileIO, *, direct: bool) -> None:
        self._fd = out.fileno()
        self._direct = direct and hasattr(os, "O_DIRECT") and self._set_direct(True)

    def _set_direct(self, on: bool) -> bool:
        try:
            flags = fcntl.fcntl(self._fd, fcntl.F_GETFL)
            fcntl.fcntl(self._fd, fcntl.F_SETFL, (flags | os.O_DIRECT) if on else (flags & ~os.O_DIRECT))
        except OSError:
            return False
        return on

    def __call__(self, chunk: memoryview, offset: int) -> None:
        view = chunk
        while view:
            if self._direct and len(view) >= _DIRECT_ALIGN:
                try:
                    n = os.pwrite(self._fd, view[: len(view) - len(view) % _DIRECT_ALIGN], offset)
                except OSError as e:
                    if e.errno != errno.EINVAL:
                        raise
                    self._direct = self._set_direct(False)  # refused: nothing was written
                    continue
                if n % _DIRECT_ALIGN:
                    self._direct = self._set_direct(False)
            else:
                if self._direct:
                    self._direct = self._set_direct(False)
                n = os.pwrite(self._fd, view, offset)
            if not n:
                raise OSError(errno.EIO, "write wrote nothing")
            view = view[n:]
            offset += n


class FilesystemStore:
    """A content-addressed store in a folder; safe on NFS/NAS (rename within one directory tree)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.objects = self.root / "objects"

    def init(self) -> None:
        self.objects.mkdir(parents=True, exist_ok=True)

    def _path(self, digest: Digest) -> Path:
        return self.objects / digest.hex[:2] / digest.hex

    def path_of(self, digest: Digest) -> Path:
        return self._path(digest)

    def put_stream(
        self,
        stream: BinaryIO,
        *,
        sha256: bool = False,
        expected: Digest | None = None,
        max_size: int | None = None,
        direct: bool = False,
        progress: Callable[[int], object] | None = None,
    ) -> StoredArtifact:
        """Stream into a temp file beside the objects, hash in the same pass, then rename into place.

        Reading, hashing and writing overlap (``hash_stream``'s pipeline); the bytes hashed are the bytes
        written, even if the source changes meanwhile. ``direct`` writes with O_DIRECT where possible.
        """
        src: BinaryIO = _SizeLimited(stream, max_size) if max_size is not None else stream  # type: ignore[assignment]

        def write(out: io.FileIO) -> FileDigests:
            return hash_stream(
                src,
                sha256=sha256,
                write_at=_DirectSink(out, direct=direct),
                progress=progress,
                chunk_size=_DIRECT_CHUNK if direct else CHUNK_SIZE,
            )

        return self._ingest(write, expected)

    def put_file(
        self, path: Path, *, sha256: bool = False, progress: Callable[[int], object] | None = None
    ) -> StoredArtifact:
        """Store a regular file; a large one is written with direct I/O while it is hashed."""
        with Path(path).open("rb", buffering=0) as f:
            size = os.fstat(f.fileno()).st_size
            return self.put_stream(f, sha256=sha256, direct=size >= _DIRECT_MIN, progress=progress)

    def _ingest(self, write: Callable[[io.FileIO], FileDigests], expected: Digest | None) -> StoredArtifact:
        """Run ``write`` into a temp file beside the objects; fsync, then rename it to its digest."""
        if not self.objects.is_dir():
            raise StorageError(f"store not initialised at {self.root}")
        try:
            fd, tmp_name = tempfile.mkstemp(prefix=".incoming-", dir=self.objects)
        except OSError as e:
            raise StorageError(f"cannot create a file in {self.objects}: {e}") from e
        tmp = Path(tmp_name)
        try:
            with io.FileIO(fd, "wb+") as out:
                digests = write(out)
                out.flush()
                os.fsync(out.fileno())
            if expected is not None and digests.blake3 != expected:
                raise IntegrityError(
                    f"uploaded bytes hash to {digests.blake3}, not {expected}", hint="the upload was refused"
                )
            final = self._path(digests.blake3)
            if final.exists():
                tmp.unlink()
                return StoredArtifact(digests.blake3, digests.size, digests.sha256, created=False)
            final.parent.mkdir(exist_ok=True)
            os.chmod(tmp, 0o444)
            os.replace(tmp, final)
            fsync_dir(final.parent)
            return StoredArtifact(digests.blake3, digests.size, digests.sha256, created=True)
        except OSError as e:
            with contextlib.suppress(OSError):
                tmp.unlink()
            if e.errno == errno.ENOSPC:
                raise StorageError(f"no space left while storing an artifact in {self.root}") from e
            raise StorageError(f"storing an artifact failed: {e}") from e
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise

    def has(self, digest: Digest) -> bool:
        return self._path(digest).is_file()

    def size(self, digest: Digest) -> int:
        try:
            return self._path(digest).stat().st_size
        except FileNotFoundError as e:
            raise ArtifactMissingError(f"artifact {digest} is not in the store") from e

    def verify(self, digest: Digest, *, progress: Callable[[int], object] | None = None) -> None:
        """Re-hash the stored bytes; raise if they are missing or do not match their name."""
        path = self._path(digest)
        if not path.is_file():
            raise ArtifactMissingError(f"artifact {digest} is not in the store")
        actual = hash_file(path, progress=progress).blake3
        if actual != digest:
            raise ArtifactCorruptError(f"stored artifact {digest} is corrupt (its bytes hash to {actual})")

    def open_verified(self, digest: Digest, *, progress: Callable[[int], object] | None = None) -> BinaryIO:
        """Verify the whole file first, so a corrupt artifact is never served, then open it."""
        self.verify(digest, progress=progress)
        return self._path(digest).open("rb")

    def iter_chunks_verified(self, digest: Digest, chunk_size: int = CHUNK_SIZE) -> Iterator[bytes]:
        with self.open_verified(digest) as f:
            for chunk in iter_chunks(f, chunk_size):
                yield bytes(chunk)

    def stale_incoming(self, older_than_s: float = 3600.0) -> list[Path]:
        """Temp files left by writers that died mid-put (never served: they have no digest name)."""
        import time

        cutoff = time.time() - older_than_s
        if not self.objects.is_dir():
            return []
        return sorted(p for p in self.objects.glob(".incoming-*") if p.stat().st_mtime < cutoff)

    def remove_stale_incoming(self, older_than_s: float = 3600.0) -> tuple[int, int]:
        """Delete temp files untouched for ``older_than_s`` (a live put keeps its own fresh)."""
        count = size = 0
        for p in self.stale_incoming(older_than_s):
            with contextlib.suppress(FileNotFoundError):
                n = p.stat().st_size
                p.unlink()
                count += 1
                size += n
        return count, size

    def iter_digests(self) -> Iterator[Digest]:
        if not self.objects.is_dir():
            return
        for sub in sorted(self.objects.iterdir()):
            if sub.is_dir() and len(sub.name) == 2:
                for f in sorted(sub.iterdir()):
                    if len(f.name) == 64 and not f.name.startswith("."):
                        yield Digest(HexDigest(f.name))
