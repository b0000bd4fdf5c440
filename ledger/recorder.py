"""Where collectors send what they saw: the ``Recorder`` interface and the local ledger's recorder.

The remote one (a server, with an offline spool) and ``make_recorder`` live in ``ledger.collectors.remote``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ledger.entries import ArtifactRef

if TYPE_CHECKING:
    from ledger.service import Ledger

__all__ = ["LocalRecorder", "Recorder"]


class Recorder(Protocol):
    """The one interface collectors write through."""

    def artifact(
        self,
        name: str,
        path: Path,
        *,
        media_type: str | None = None,
        by_reference: bool = False,
        sha256: bool = False,
    ) -> ArtifactRef: ...

    def record(
        self,
        kind: str,
        subject: dict[str, str],
        payload: dict[str, Any],
        *,
        artifacts: Sequence[ArtifactRef] = (),
        refs: Sequence[tuple[str, str]] = (),
        collected_at: datetime | str | None = None,
    ) -> str: ...


class LocalRecorder:
    """Sign with a key of the home and append to the home's own ledger."""

    def __init__(self, ledger: Ledger, key: str) -> None:
        self.ledger = ledger
        self.key = key
        self.ledger.signing_key(key)  # fail early when the key is not in this home

    def artifact(
        self,
        name: str,
        path: Path,
        *,
        media_type: str | None = None,
        by_reference: bool = False,
        sha256: bool = False,
    ) -> ArtifactRef:
        return self.ledger.artifact_ref(
            name, path, media_type=media_type, by_reference=by_reference, sha256=sha256
        )

    def record(
        self,
        kind: str,
        subject: dict[str, str],
        payload: dict[str, Any],
        *,
        artifacts: Sequence[ArtifactRef] = (),
        refs: Sequence[tuple[str, str]] = (),
        collected_at: datetime | str | None = None,
    ) -> str:
        # the home-bound ledger the CLI opens keeps the entry's receipt (``Ledger.append``)
        entry = self.ledger.record(
            kind, subject, payload, key=self.key, artifacts=artifacts, refs=refs, collected_at=collected_at
        )
        return str(entry.entry_id)
