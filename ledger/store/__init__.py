"""Content-addressed artifact store: one interface; a filesystem implementation (default, NAS-safe) and S3."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ledger.store.base import ArtifactStore, StoredArtifact
from ledger.store.filesystem import FilesystemStore

if TYPE_CHECKING:
    from ledger.store.s3 import S3Store

__all__ = ["ArtifactStore", "FilesystemStore", "StoredArtifact", "open_store", "put_file"]


def open_store(spec: str, *, s3_endpoint: str | None = None) -> FilesystemStore | S3Store:
    """A folder path → FilesystemStore; ``s3://bucket/prefix[?endpoint=URL]`` → S3Store.

    The S3 endpoint comes from the spec, else ``s3_endpoint``, else boto3's own configuration
    (``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``, which ``ledger serve --s3-endpoint`` sets).
    """
    if spec.startswith("s3://"):
        from ledger.store.s3 import S3Store

        return S3Store.from_spec(spec, endpoint_url=s3_endpoint or os.environ.get("LEDGER_S3_ENDPOINT"))
    return FilesystemStore(Path(spec))


def put_file(
    store: FilesystemStore | S3Store,
    path: Path,
    *,
    sha256: bool = False,
    progress: Callable[[int], object] | None = None,
) -> StoredArtifact:
    """Store one regular file; anything else is refused before a byte is written. ``progress(n)`` is
    called with each chunk's size as it is read (the core's hook for a progress bar; it imports no UI)."""
    from ledger.errors import InputError

    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p} is not a readable file")
    return store.put_file(p, sha256=sha256, progress=progress)
