"""HTTP client of a ledger server, and the remote recorder collectors use on GPU hosts.

An adapter (it speaks HTTP through httpx), so it lives beside the collectors, not in the core.

Entries are signed locally with a key of the home and sent to the server, which verifies them before
storing. When the server cannot be reached, envelopes and artifacts are spooled durably in
``HOME/spool/``; ``push_spool`` (``ledger push``, or the next remote record) delivers them in order.
The server recognises a re-sent envelope by its entry id, so delivery is exactly once.

Every append's answer must carry the log's receipt for the entry sent, signed by the log key: the key
pinned for that server (``LEDGER_LOG_VKEY``, the C2SP verifier key ``ledger keys export log --vkey``
prints on the server), or else the one the server named on first use, recorded in ``HOME/log-keys.json``
(trust on first use; the file is the pin from then on, and a server that later names another key is
refused). An answer without a valid receipt for the entry sent is refused: the entry stays in the spool.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
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
from ledger.entries import ArtifactRef, format_time, now_utc
from ledger.errors import (
    ConfigError,
    IntegrityError,
    LedgerError,
    ReceiptMismatchError,
    RemoteUnavailableError,
)
from ledger.hashing import Digest, HexDigest, hash_file
from ledger.log import entry_id_of, parse_checkpoint, parse_verifier_key, verifier_key
from ledger.proofs import check_receipt
from ledger.recorder import LocalRecorder, Recorder
from ledger.signing import PublicKey

if TYPE_CHECKING:
    from ledger.service import Ledger

__all__ = [
    "LOG_KEY_ENV",
    "LedgerClient",
    "LogKeys",
    "PushReport",
    "RemoteRecorder",
    "Spool",
    "log_key",
    "make_recorder",
    "push_spool",
    "served_log",
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
        self.log_vkey: str | None = None  # the log key its receipts must verify under (``log_key``)
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


# --- the log key a server's receipts must verify under --------------------------------------------------

LOG_KEY_ENV = "LEDGER_LOG_VKEY"  # a pinned C2SP verifier key of the server's log (or @FILE)


def served_log(cp: dict[str, Any]) -> tuple[str, str]:
    """(origin, verifier key) of the log a server serves, from its ``/v1/checkpoint`` answer: the
    checkpoint must be signed by the key it names, under its origin."""
    try:
        origin = str(cp["origin"])
        vkey = str(cp.get("log_vkey") or verifier_key(origin, PublicKey.from_b64(str(cp["log_public_key"]))))
        name, pub = parse_verifier_key(vkey)
        if parse_checkpoint(str(cp["note"]), name, pub).origin != origin or name != origin:
            raise IntegrityError(f"the checkpoint names the log {origin!r}, its key the log {name!r}")
    except (KeyError, TypeError, ValueError) as e:
        raise IntegrityError(f"the server's checkpoint answer is malformed: {e}") from e
    except LedgerError as e:
        raise IntegrityError(f"the server's checkpoint is not signed by the key it names: {e.message}") from e
    return origin, vkey


class LogKeys:
    """The log key each ledger server's receipts must verify under, as this home recorded it:
    ``HOME/log-keys.json``, ``{"<server URL>": {"vkey": …, "how": "pinned" | "first use", "at": …}}``.
    An operator may write an entry by hand (the server's ``ledger keys export log --vkey``); removing one
    lets the next append trust the key the server names again."""

    def __init__(self, home: Path) -> None:
        self.path = Path(home) / "log-keys.json"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with (self.path.parent / ".log-keys.lock").open("a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            raise ConfigError(f"{self.path}: unreadable ({e})") from e
        if not isinstance(data, dict):
            raise ConfigError(f"{self.path}: not a JSON object of server URLs")
        return data

    def get(self, server: str) -> str | None:
        entry = self._read().get(server.rstrip("/"))
        if entry is None:
            return None
        vkey = entry.get("vkey") if isinstance(entry, dict) else entry
        if not isinstance(vkey, str):
            raise ConfigError(f"{self.path}: the entry of {server} names no vkey")
        return vkey.strip()

    def record(self, server: str, vkey: str, how: str) -> str:
        """Record ``vkey`` for ``server`` unless the home holds one already; returns the one held."""
        with self._locked():
            data = self._read()
            held = data.get(server.rstrip("/"))
            if held is not None:
                return str(held.get("vkey") if isinstance(held, dict) else held).strip()
            data[server.rstrip("/")] = {"vkey": vkey, "how": how, "at": format_time(now_utc())}
            write_atomic(self.path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode(), mode=0o644)
        return vkey


def _pinned_env() -> str | None:
    text = os.environ.get(LOG_KEY_ENV, "").strip()
    if not text:
        return None
    if text.startswith("@"):
        try:
            text = Path(text[1:]).read_text(encoding="utf-8").strip()
        except OSError as e:
            raise ConfigError(f"{LOG_KEY_ENV}: cannot read {text[1:]}: {e.strerror}") from e
    try:
        parse_verifier_key(text)
    except LedgerError as e:
        raise ConfigError(f"{LOG_KEY_ENV} is not a C2SP verifier key: {e.message}") from e
    return text


def log_key(home: Path, client: LedgerClient, *, first_use: bool = True) -> str | None:
    """The verifier key of the log behind ``client``'s server that its receipts must verify under:
    ``LEDGER_LOG_VKEY`` (pinned; it must agree with the key the home recorded for that server), else the
    key the home recorded for it (``LogKeys``), else (``first_use``) the key the server names now, recorded
    (trust on first use). None only without ``first_use`` when none is known."""
    if client.log_vkey is not None:
        return client.log_vkey
    keys = LogKeys(home)
    recorded = keys.get(client.server)
    pinned = _pinned_env()
    if pinned is not None:
        if recorded is not None and recorded != pinned:
            raise ConfigError(
                f"{LOG_KEY_ENV} pins the log key {pinned} for {client.server}, but this home recorded the "
                f"key {recorded} for it ({keys.path})",
                hint=f"if the server's log key really changed, remove {client.server} from {keys.path}",
            )
        vkey: str | None = recorded or keys.record(client.server, pinned, "pinned")
    elif recorded is not None:
        vkey = recorded
    elif first_use:
        vkey = keys.record(client.server, served_log(client.checkpoint())[1], "first use")
    else:
        return None
    client.log_vkey = vkey
    return vkey


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
    keep_receipts: Callable[[list[dict[str, Any]], list[str]], None],
    progress: Callable[[int], None] | None = None,
) -> PushReport:
    """Deliver the spool; ``keep_receipts(answers, ids)`` checks and keeps the receipts of each batch (it
    raises when one is missing or wrong: the batch stays in the spool)."""
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
            entries = client.append([json.loads(data) for _, data in batch])
            if len(entries) != len(batch):
                raise IntegrityError(f"server answered {len(entries)} entries for a batch of {len(batch)}")
            for (path, data), got in zip(batch, entries, strict=True):
                if got.get("id") != entry_id_of(data):
                    raise IntegrityError(f"server logged {got.get('id')} for spooled {path.name}")
            # checked, then kept, before the spool forgets them: `ledger audit` checks them later
            keep_receipts(entries, [entry_id_of(data) for _, data in batch])
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
            return _push_locked(spool, c, lambda got, ids: _keep_receipts(ledger, c, got, ids), progress)
    finally:
        if own:
            c.close()


def _keep_receipts(
    ledger: Ledger, client: LedgerClient, entries: list[dict[str, Any]], ids: list[str]
) -> None:
    """Check the server's receipts of the entries ``ids`` it was sent (one each, signed by the log key
    ``log_key`` gives, naming that entry), then keep them in the home (``ledger audit --server``).
    ``ReceiptMismatchError`` naming the entry when one is missing or wrong: nothing of the batch is kept."""
    vkey = log_key(ledger.home_path, client)
    assert vkey is not None  # first use asks the server
    receipts = []
    for got, entry_id in zip(entries, ids, strict=True):
        try:
            check_receipt(got.get("receipt"), vkey, entry_id)
        except ReceiptMismatchError as e:
            raise ReceiptMismatchError(
                f"{client.server} gave no valid receipt for an entry it was sent: {e.message}; the entry "
                f"stays in the spool {ledger.spool_dir}",
                hint=f"`ledger push --server {client.server}` sends it again; the log key trusted for that "
                f"server is in {LogKeys(ledger.home_path).path}",
            ) from e
        receipts.append(got["receipt"])
    ledger.keep_receipts(receipts)


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
            ready = self._caught_up() and log_key(self.ledger.home_path, self.client) is not None
        except RemoteUnavailableError as e:
            self.unreachable = e.message
            ready = False
        except LedgerError as e:  # a spooled entry without a valid receipt, or no log key to check one with
            self._spool(data, entry_id, e)
            raise
        if ready:
            try:
                got = self.client.append([env.to_json()])  # a refusal is raised, not spooled
            except RemoteUnavailableError as e:
                self.unreachable = e.message
            else:
                try:
                    if len(got) != 1 or got[0].get("id") != entry_id:
                        raise ReceiptMismatchError(f"{self.server} answered another entry for {entry_id}")
                    _keep_receipts(self.ledger, self.client, got, [entry_id])
                except LedgerError as e:  # not kept: spooled (`ledger push` re-sends it); the command fails
                    self._spool(data, entry_id, e)
                    raise
                return entry_id
        self._spool(data, entry_id)
        return entry_id

    def _spool(self, data: bytes, entry_id: str, why: LedgerError | None = None) -> None:
        self.spool.add_entry(data, entry_id)
        self.spooled.append(entry_id)
        if why is not None:  # (the error itself says more)
            self.unreachable = (
                "no valid receipt in its answer" if why.code == "receipt-mismatch" else why.message
            )


def make_recorder(
    ledger: Ledger, key: str, *, server: str | None = None, token: str | None = None
) -> Recorder:
    """A LocalRecorder on the opened ledger; with ``server``, a remote one that spools in its home offline."""
    if server:
        return RemoteRecorder(ledger, key, server=server, token=token)
    return LocalRecorder(ledger, key)
