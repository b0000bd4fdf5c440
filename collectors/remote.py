"""HTTP client of a ledger server, and the remote recorder collectors use on GPU hosts.

An adapter (it speaks HTTP through httpx), so it lives beside the collectors, not in the core.

Entries are signed locally with a key of the home and sent to the server, which verifies them before
storing. When the server cannot be reached, envelopes and artifacts are spooled durably in
``HOME/spool/``; ``push_spool`` (``ledger push``, or the next remote record) delivers them in order.
The server recognises a re-sent envelope by its entry id, so delivery is exactly once.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from ledger import errors as _errors
from ledger.atomic import fsync_dir, write_atomic
from ledger.entries import ArtifactRef
from ledger.errors import IntegrityError, LedgerError, RemoteUnavailableError
from ledger.hashing import Digest, HexDigest, hash_file
from ledger.log import entry_id_of
from ledger.recorder import LocalRecorder, Recorder

if TYPE_CHECKING:
    from ledger.service import Ledger

__all__ = [
    "LedgerClient",
    "PushReport",
    "RemoteRecorder",
    "Spool",
    "make_recorder",
    "push_spool",
    "spool_bytes",
    "spool_size",
]

_UPLOAD_CHUNK = 1024 * 1024
_BATCH_ENTRIES = 500
_BATCH_BYTES = 8 * 1024 * 1024


def _error_class(code: str) -> type[LedgerError]:
    for name in _errors.__all__:
        cls = getattr(_errors, name)
        if isinstance(cls, type) and issubclass(cls, LedgerError) and cls.code == code:
            return cls
    return LedgerError


def _raise_for(resp: httpx.Response) -> None:
    """Turn a refusal into the ledger error the server raised; 5xx and gateway errors mean 'try later'."""
    if resp.status_code < 400:
        return
    try:
        detail = resp.json()["error"]
        code, message, hint = str(detail["code"]), str(detail["message"]), str(detail.get("hint") or "")
    except (ValueError, KeyError, TypeError):
        code, message, hint = "http-error", resp.text[:200] or resp.reason_phrase, ""
    if resp.status_code >= 500 and resp.status_code != 501:
        raise RemoteUnavailableError(f"server answered {resp.status_code}: [{code}] {message}")
    raise _error_class(code)(f"server refused: {message}", hint=hint or None)


def _iter_file(path: Path, sent: Callable[[int], object] | None = None) -> Iterator[bytes]:
    """The file in upload chunks; ``sent`` hears each chunk's size as it is handed to the connection."""
    with path.open("rb") as f:
        while chunk := f.read(_UPLOAD_CHUNK):
            yield chunk
            if sent is not None:
                sent(len(chunk))


class LedgerClient:
    """Calls of the ledger's HTTP API that collectors and `ledger push` need."""

    def __init__(self, server: str, token: str | None = None, *, timeout: float = 300.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.server = server.rstrip("/")
        self.http = httpx.Client(
            base_url=self.server, headers=headers, timeout=httpx.Timeout(timeout, connect=5.0)
        )

    def close(self) -> None:
        self.http.close()

    def _request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        try:
            resp = self.http.request(method, url, **kwargs)
        except httpx.TransportError as e:
            raise RemoteUnavailableError(f"cannot reach {self.server}: {e}") from e
        _raise_for(resp)
        return resp

    def health(self) -> dict[str, Any]:
        data: dict[str, Any] = self._request("GET", "/v1/health").json()
        return data

    def append(self, envelopes: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Append a batch atomically; each returned entry says whether it was a ``duplicate``."""
        resp = self._request("POST", "/v1/entries/batch", json={"envelopes": list(envelopes)})
        body = resp.json()
        # the one list shape {"items", "next"}; a server older than it answered {"entries"}
        entries: list[dict[str, Any]] = body["items"] if "items" in body else body["entries"]
        return entries

    def has_artifact(self, digest: Digest) -> bool:
        try:
            resp = self.http.head(f"/v1/artifacts/{digest}")
        except httpx.TransportError as e:
            raise RemoteUnavailableError(f"cannot reach {self.server}: {e}") from e
        if resp.status_code == 404:
            return False
        _raise_for(resp)
        return True

    def upload_file(
        self, path: Path, digest: Digest, size: int, *, sent: Callable[[int], object] | None = None
    ) -> dict[str, Any]:
        """Stream a file to ``PUT /v1/artifacts/<digest>``; the server verifies it before keeping it.
        ``sent`` is called with the size of each chunk sent."""
        resp = self._request(
            "PUT",
            f"/v1/artifacts/{digest}",
            content=_iter_file(path, sent),
            headers={"Content-Length": str(size), "Content-Type": "application/octet-stream"},
        )
        data: dict[str, Any] = resp.json()
        return data

    def checkpoint(self) -> dict[str, Any]:
        """The server's current signed checkpoint, with its origin and log public key."""
        data: dict[str, Any] = self._request("GET", "/v1/checkpoint").json()
        return data

    def inclusion(self, entry_id: str) -> dict[str, Any] | None:
        """The server's inclusion proof of an entry at its current size, or None when it has no such entry."""
        try:
            resp = self.http.get(f"/v1/proofs/inclusion/{entry_id}")
        except httpx.TransportError as e:
            raise RemoteUnavailableError(f"cannot reach {self.server}: {e}") from e
        if resp.status_code == 404:
            return None
        _raise_for(resp)
        data: dict[str, Any] = resp.json()
        return data

    def enrol_collector(self, name: str, public_key: str) -> tuple[dict[str, Any], bool]:
        """``POST /v1/keys`` (admin token): the server enrols the key with role collector.

        Returns the key's record and whether it was new (False: already enrolled under this name)."""
        resp = self._request("POST", "/v1/keys", json={"name": name, "public_key": public_key})
        data: dict[str, Any] = resp.json()
        return data, resp.status_code == 201

    def get_entry(self, entry_id: str) -> dict[str, Any]:
        data: dict[str, Any] = self._request("GET", f"/v1/entries/{entry_id}").json()
        return data


# --- the spool ---------------------------------------------------------------------------------------


class Spool:
    """Envelopes and artifacts waiting for the server: ``entries/<order>-<id>.json``, ``artifacts/<hex>``."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.entries_dir = self.root / "entries"
        self.artifacts_dir = self.root / "artifacts"

    def _ensure(self) -> None:
        self.entries_dir.mkdir(parents=True, exist_ok=True)
        self.artifacts_dir.mkdir(parents=True, exist_ok=True)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """One writer or pusher at a time per home (collectors may run side by side)."""
        self._ensure()
        with (self.root / ".lock").open("a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def entry_files(self) -> list[Path]:
        if not self.entries_dir.is_dir():
            return []
        return sorted(
            p for p in self.entries_dir.iterdir() if p.suffix == ".json" and not p.name.startswith(".")
        )

    def artifact_files(self) -> list[Path]:
        if not self.artifacts_dir.is_dir():
            return []
        return sorted(
            p for p in self.artifacts_dir.iterdir() if len(p.name) == 64 and not p.name.startswith(".")
        )

    def pending(self) -> bool:
        return bool(self.entry_files() or self.artifact_files())

    def add_entry(self, envelope: bytes, entry_id: str) -> Path:
        """Append an envelope to the spool durably: temp file, fsync, rename, fsync the folder."""
        with self.locked():
            files = self.entry_files()
            order = int(files[-1].name.split("-", 1)[0]) + 1 if files else 1
            final = self.entries_dir / f"{order:012d}-{entry_id}.json"
            write_atomic(final, envelope, mode=0o600)
            return final

    def add_artifact(self, path: Path, digest: Digest) -> Path:
        """Copy an artifact into the spool, checking the copy hashes to ``digest``."""
        self._ensure()
        final = self.artifacts_dir / digest.hex
        if final.is_file():
            return final
        fd, tmp = tempfile.mkstemp(prefix=".spool-", dir=self.artifacts_dir)
        try:
            with os.fdopen(fd, "wb") as out, Path(path).open("rb") as src:
                shutil.copyfileobj(src, out, _UPLOAD_CHUNK)
                out.flush()
                os.fsync(out.fileno())
            copied = hash_file(Path(tmp)).blake3
            if copied != digest:
                raise IntegrityError(f"{path} changed while it was spooled ({copied}, expected {digest})")
            os.replace(tmp, final)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        fsync_dir(self.artifacts_dir)
        return final

    def remove(self, paths: Sequence[Path]) -> None:
        for p in paths:
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
        if paths:
            fsync_dir(paths[0].parent)


@dataclass
class PushReport:
    delivered: int = 0
    duplicates: int = 0
    artifacts: int = 0
    remaining: int = 0
    remaining_artifacts: int = 0
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "delivered": self.delivered,
            "duplicates": self.duplicates,
            "artifacts": self.artifacts,
            "remaining": self.remaining,
            "remaining_artifacts": self.remaining_artifacts,
            "error": self.error,
        }


def _batches(files: list[Path]) -> Iterator[list[tuple[Path, bytes]]]:
    batch: list[tuple[Path, bytes]] = []
    size = 0
    for p in files:
        data = p.read_bytes()
        if batch and (len(batch) >= _BATCH_ENTRIES or size + len(data) > _BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append((p, data))
        size += len(data)
    if batch:
        yield batch


def _push_locked(
    spool: Spool,
    client: LedgerClient,
    keep_receipts: Callable[[list[dict[str, Any]]], None],
    progress: Callable[[int], None] | None = None,
) -> PushReport:
    report = PushReport()
    advance = progress or (lambda _n: None)
    try:
        for art in spool.artifact_files():
            digest = Digest(HexDigest(art.name))
            size = art.stat().st_size
            if client.has_artifact(digest):
                advance(size)  # nothing to send: the server holds these bytes already
            else:
                client.upload_file(art, digest, size, sent=advance)
            spool.remove([art])
            report.artifacts += 1
        for batch in _batches(spool.entry_files()):
            import json

            entries = client.append([json.loads(data) for _, data in batch])
            for (path, data), got in zip(batch, entries, strict=True):
                if got["id"] != entry_id_of(data):
                    raise IntegrityError(f"server logged {got['id']} for spooled {path.name}")
            keep_receipts(entries)  # before the spool forgets them: `ledger audit` checks them later
            spool.remove([p for p, _ in batch])
            report.delivered += sum(1 for e in entries if not e.get("duplicate"))
            report.duplicates += sum(1 for e in entries if e.get("duplicate"))
            advance(sum(len(data) for _, data in batch))
    except RemoteUnavailableError as e:
        report.error = e.message
    report.remaining = len(spool.entry_files())
    report.remaining_artifacts = len(spool.artifact_files())
    return report


def spool_size(ledger: Ledger) -> tuple[int, int]:
    """How many entries and artifacts wait in the home's spool."""
    spool = Spool(ledger.spool_dir)
    return len(spool.entry_files()), len(spool.artifact_files())


def spool_bytes(ledger: Ledger) -> int:
    """How many bytes wait in the home's spool (artifacts and envelopes): what ``ledger push`` sends."""
    spool = Spool(ledger.spool_dir)
    total = 0
    for p in [*spool.artifact_files(), *spool.entry_files()]:
        with contextlib.suppress(FileNotFoundError):  # a concurrent push delivered it meanwhile
            total += p.stat().st_size
    return total


def push_spool(
    ledger: Ledger,
    *,
    server: str,
    token: str | None,
    client: LedgerClient | None = None,
    progress: Callable[[int], None] | None = None,
) -> PushReport:
    """Deliver the home's spool: artifacts first, then envelopes in the order they were recorded.

    ``progress`` is called with the number of bytes each step delivered (artifact chunks as they are sent,
    an artifact the server already holds at once, each batch of envelopes when the server logged it); the
    calls add up to ``spool_bytes`` when everything was delivered.
    """
    spool = Spool(ledger.spool_dir)
    own = client is None
    c = client or LedgerClient(server, token)
    try:
        with spool.locked():
            return _push_locked(spool, c, lambda entries: _keep_receipts(ledger, entries), progress)
    finally:
        if own:
            c.close()


def _keep_receipts(ledger: Ledger, entries: list[dict[str, Any]]) -> None:
    """Keep the server's receipts of appended entries in the home (``ledger audit --server``)."""
    ledger.keep_receipts([e["receipt"] for e in entries if isinstance(e.get("receipt"), dict)])


# --- the recorder ------------------------------------------------------------------------------------


class RemoteRecorder:
    """A ``Recorder`` that signs with a key of the local home and appends to a ledger server."""

    def __init__(self, ledger: Ledger, key: str, *, server: str, token: str | None = None) -> None:
        self.ledger = ledger
        self.key = ledger.signing_key(key)  # fail early when the key is not in this home
        self.server = server
        self.token = token
        self.client = LedgerClient(server, token)
        self.spool = Spool(ledger.spool_dir)
        self.spooled: list[str] = []  # ids of the entries this recorder could only spool
        self.unreachable: str | None = None  # why the server could not take them

    def close(self) -> None:
        self.client.close()

    def _caught_up(self) -> bool:
        """Deliver what is spooled; True when nothing is left (so new entries may go straight out)."""
        if not self.spool.pending():
            return True
        return (
            push_spool(self.ledger, server=self.server, token=self.token, client=self.client).remaining == 0
            and not self.spool.pending()
        )

    def artifact(
        self,
        name: str,
        path: Path,
        *,
        media_type: str | None = None,
        by_reference: bool = False,
        sha256: bool = False,
    ) -> ArtifactRef:
        from ledger.service import describe_artifact, readable_artifact

        if by_reference:
            ref: ArtifactRef = self.ledger.artifact_ref(name, path, media_type=media_type, by_reference=True)
            return ref
        p = readable_artifact(name, path)
        d = hash_file(p, sha256=sha256)
        try:
            if self._caught_up() and not self.client.has_artifact(d.blake3):
                self.client.upload_file(p, d.blake3, d.size)
            elif self.spool.pending():
                self.spool.add_artifact(p, d.blake3)
        except RemoteUnavailableError as e:
            self.unreachable = e.message
            self.spool.add_artifact(p, d.blake3)
        return describe_artifact(name, p, d.blake3, d.size, d.sha256, media_type)

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
        st = self.ledger.make_statement(
            kind, subject, payload, artifacts=artifacts, refs=refs, collected_at=collected_at
        )
        env = self.ledger.sign(st, self.key)
        data: bytes = env.canonical()
        entry_id = entry_id_of(data)
        try:
            if self._caught_up():
                _keep_receipts(self.ledger, self.client.append([env.to_json()]))
                return entry_id
        except RemoteUnavailableError as e:
            self.unreachable = e.message
        self.spool.add_entry(data, entry_id)
        self.spooled.append(entry_id)
        return entry_id


def make_recorder(
    ledger: Ledger, key: str, *, server: str | None = None, token: str | None = None
) -> Recorder:
    """A LocalRecorder on the opened ledger; with ``server``, a remote one that spools in its home offline."""
    if server:
        return RemoteRecorder(ledger, key, server=server, token=token)
    return LocalRecorder(ledger, key)
