"""Content-addressed artifact store: one interface, a filesystem implementation (default, NAS-safe)."""

from __future__ import annotations

from ledger.store.base import ArtifactStore, StoredArtifact
from ledger.store.filesystem import FilesystemStore

__all__ = ["ArtifactStore", "FilesystemStore", "StoredArtifact"]
