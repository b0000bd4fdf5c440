"""The store interface every backend implements."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import BinaryIO, Protocol

from ledger.hashing import Digest


@dataclass(frozen=True, slots=True)
class StoredArtifact:
    digest: Digest
    size: int
    sha256: str | None = None
    created: bool = True  # False when the bytes were already stored


class ArtifactStore(Protocol):
    """Immutable bytes addressed by BLAKE3; written streaming, verified on read."""

    def put_stream(
        self,
        stream: BinaryIO,
        *,
        sha256: bool = False,
        expected: Digest | None = None,
        max_size: int | None = None,
        progress: Callable[[int], object] | None = None,
    ) -> StoredArtifact:
        """Store the stream's bytes; ``progress(n)`` is called as each chunk of ``n`` bytes is read (their
        running sum is the bytes stored so far: what a CLI progress bar advances by)."""
        ...

    def has(self, digest: Digest) -> bool: ...

    def size(self, digest: Digest) -> int: ...

    def verify(self, digest: Digest, *, progress: Callable[[int], object] | None = None) -> None: ...

    def open_verified(self, digest: Digest, *, progress: Callable[[int], object] | None = None) -> BinaryIO:
        """Open the bytes once they are checked against their address (``progress(n)`` as they are)."""
        ...

    def iter_digests(self) -> Iterator[Digest]: ...
