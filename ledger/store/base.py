"""The store interface every backend implements."""

from __future__ import annotations

from collections.abc import Iterator
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
    ) -> StoredArtifact: ...

    def has(self, digest: Digest) -> bool: ...

    def size(self, digest: Digest) -> int: ...

    def verify(self, digest: Digest) -> None: ...

    def open_verified(self, digest: Digest) -> BinaryIO: ...

    def iter_digests(self) -> Iterator[Digest]: ...
