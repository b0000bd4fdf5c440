"""Filesystem artifact store: ``objects/ab/<64 hex>``; temp file + fsync + rename; verified on read."""

from __future__ import annotations

import contextlib
import errno
import io
import mmap
import os
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

import blake3

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


def _write_all(out: io.FileIO, data: memoryview) -> None:
    """Write every byte: an unbuffered write may be short (a filling disk), the retry then raises ENOSPC."""
    view = memoryview(data)
    while view:
        n = out.write(view)
        if not n:
            raise OSError(errno.EIO, "write wrote nothing")
        view = view[n:]


class _NoKernelCopy(Exception):
    """copy_file_range is not available between these two files; stream instead."""


_COPY_CHUNK = 64 * 1024 * 1024


def _copy_and_hash(src_fd: int, out: io.FileIO) -> FileDigests:
    """Copy ``src_fd`` into ``out`` with copy_file_range and hash each copied range of ``out``.

    The bytes hashed are read back from the destination, so the digest names exactly what was stored
    even if the source changes meanwhile. Hashing a range (all cores, from the page cache) overlaps
    with the kernel copying the next one.
    """
    dst_fd = out.fileno()
    b3 = blake3.blake3(max_threads=blake3.blake3.AUTO)
    done = 0
    with ThreadPoolExecutor(1) as hasher:
        pending: Future[None] | None = None
        while True:
            try:
                n = os.copy_file_range(src_fd, dst_fd, _COPY_CHUNK, done, done)
            except OSError as e:
                if done == 0 and e.errno in (errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                    raise _NoKernelCopy from e
                raise
            if n == 0:
                break
            if pending is not None:
                pending.result()
            pending = hasher.submit(_hash_range, b3, dst_fd, done, n)
            done += n
        if pending is not None:
            pending.result()
    return FileDigests(blake3=Digest(HexDigest(b3.hexdigest())), size=done)


def _hash_range(b3: blake3.blake3, fd: int, offset: int, length: int) -> None:
    start = offset - offset % mmap.ALLOCATIONGRANULARITY
    with mmap.mmap(fd, offset + length - start, offset=start, access=mmap.ACCESS_READ) as mm:
        view = memoryview(mm)
        part = view[offset - start :]
        try:
            b3.update(part)
        finally:
            part.release()
            view.release()


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
    ) -> StoredArtifact:
        """Stream into a temp file beside the objects, hash in the same pass, then rename into place."""
        src: BinaryIO = _SizeLimited(stream, max_size) if max_size is not None else stream  # type: ignore[assignment]

        def write(out: io.FileIO) -> FileDigests:
            return hash_stream(src, sha256=sha256, sink=lambda chunk: _write_all(out, chunk))

        return self._ingest(write, expected)

    def put_file(self, path: Path, *, sha256: bool = False) -> StoredArtifact:
        """Store a regular file: copied in the kernel, each copied range hashed as it lands."""
        with Path(path).open("rb") as f:
            if sha256:
                return self.put_stream(f, sha256=True)
            try:
                return self._ingest(lambda out: _copy_and_hash(f.fileno(), out), None)
            except _NoKernelCopy:
                f.seek(0)
                return self.put_stream(f)

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

    def verify(self, digest: Digest) -> None:
        """Re-hash the stored bytes; raise if they are missing or do not match their name."""
        path = self._path(digest)
        if not path.is_file():
            raise ArtifactMissingError(f"artifact {digest} is not in the store")
        actual = hash_file(path).blake3
        if actual != digest:
            raise ArtifactCorruptError(f"stored artifact {digest} is corrupt (its bytes hash to {actual})")

    def open_verified(self, digest: Digest) -> BinaryIO:
        """Verify the whole file first, so a corrupt artifact is never served, then open it."""
        self.verify(digest)
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
