"""Where collectors send what they saw: the local ledger, or a server (with an offline spool)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from ledger.entries import ArtifactRef

__all__ = ["LocalRecorder", "Recorder", "make_recorder"]


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

    def __init__(self, ledger: Any, key: str) -> None:
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
        ref: ArtifactRef = self.ledger.artifact_ref(
            name, path, media_type=media_type, by_reference=by_reference, sha256=sha256
        )
        return ref

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
        entry = self.ledger.record(
            kind, subject, payload, key=self.key, artifacts=artifacts, refs=refs, collected_at=collected_at
        )
        return str(entry.entry_id)


def make_recorder(
    home: Path | None, key: str, *, server: str | None = None, token: str | None = None
) -> Recorder:
    """A LocalRecorder, or with ``server`` a remote one that spools in the home when offline."""
    from ledger.cliutil import get_ledger

    ledger = get_ledger(home)
    if server:
        from ledger.client import RemoteRecorder  # type: ignore[import-not-found,unused-ignore]

        remote: Recorder = RemoteRecorder(ledger, key, server=server, token=token)
        return remote
    return LocalRecorder(ledger, key)
