"""HTTP client of a ledger server, and the remote recorder collectors use on GPU hosts.

An adapter (it speaks HTTP through httpx), so it lives beside the collectors, not in the core.

Entries are signed locally with a key of the home and sent to the server, which verifies them before
storing. When the server cannot be reached, envelopes and artifacts are spooled durably in
``HOME/spool/``; ``push_spool`` (``ledger push``, or the next remote record) delivers them in order.
The server recognises a re-sent envelope by its entry id, so delivery is exactly once. Each spooled file is
checked against the name it was spooled under (``Spool.read_entry``: its bytes are the entry its name gives;
``Spool.read_artifact``: an artifact's bytes hash to its name) before it is sent, and an entry leaves the
spool only on a receipt for that entry. A spool file is read only as a regular file (a link or a FIFO is never
followed nor waited on); one that is not what its name says is moved by the push to ``spool/bad/``, kept
beside why (``Spool.quarantine``), and named.

Every append's answer must carry the log's receipt for the entry sent, signed by the log key: the key
pinned for that server (``LEDGER_LOG_VKEY``, the C2SP verifier key ``ledger keys export log --vkey``
prints on the server), or else the one the server named on first use, recorded in ``HOME/log-keys.json``
(trust on first use; the file is the pin from then on, and a server that later names another key is
refused). An answer without a valid receipt for the entry sent is refused: the entry stays in the spool.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO
from urllib.parse import urlsplit, urlunsplit

import httpx

from ledger import errors as _errors
from ledger.atomic import fsync_dir, write_atomic
from ledger.entries import ArtifactRef, format_time, now_utc, parse_statement
from ledger.errors import (
    HOME_FAULTS,
    ArtifactMissingError,
    AuthError,
    Category,
    ConfigError,
    ForbiddenError,
    IntegrityError,
    LedgerError,
    ReceiptForkError,
    ReceiptMismatchError,
    RemoteUnavailableError,
)
from ledger.hashing import Digest, HexDigest, hash_file, hash_stream, parse_digest
from ledger.log import EntryId, entry_id_of, parse_checkpoint, parse_verifier_key, verifier_key
from ledger.proofs import check_receipt
from ledger.recorder import LocalRecorder, Recorder
from ledger.signing import Envelope, PublicKey, parse_canonical_envelope, parse_envelope

if TYPE_CHECKING:
    from ledger.service import Ledger

__all__ = [
    "LOG_KEY_ENV",
    "LedgerClient",
    "LogKeys",
    "PushReport",
    "RemoteRecorder",
    "Spool",
    "SpoolTarget",
    "SpooledArtifact",
    "SpooledEntry",
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


_SERVER_FAULT_CODES = frozenset(cls.code for cls in HOME_FAULTS)


def _raise_for(resp: httpx.Response) -> None:
    """Turn a refusal into the ledger error the server raised; 5xx and gateway errors mean 'try later'."""
    if resp.status_code < 400:
        return
    try:
        detail = resp.json()["error"]
        code, message, hint = str(detail["code"]), str(detail["message"]), str(detail.get("hint") or "")
    except (ValueError, KeyError, TypeError):
        code, message, hint = "http-error", resp.text[:200] or resp.reason_phrase, ""
        if resp.status_code in (401, 403) and not resp.text:  # a HEAD answer has no body: its status says
            _raise_auth(resp)
    # a fault of the server's own state (its log, its log clock, its home) is the server's, never what was
    # sent, even where an older server answered it 4xx: try later, the entry stays spooled
    if (resp.status_code >= 500 and resp.status_code != 501) or code in _SERVER_FAULT_CODES:
        unavailable = RemoteUnavailableError(f"server answered {resp.status_code}: [{code}] {message}")
        unavailable.server_code = code  # the server's own error code (an audit reads log-inconsistent)
        raise unavailable
    raise _error_class(code)(f"server refused: {message}", hint=hint or None)


def _raise_auth(resp: httpx.Response) -> None:
    """A 401 or 403 answered without a body (a ``HEAD``): the errors the server's own body would name."""
    asked = f"{resp.request.method} {resp.request.url.path} answered {resp.status_code} {resp.reason_phrase}"
    if resp.status_code == 401:
        raise AuthError(
            "server refused: the server does not take this bearer token (unknown, revoked or missing; "
            f"{asked})",
            hint="pass a token the server issued with --token or LEDGER_TOKEN "
            "(`ledger tokens new NAME --role writer` on the server)",
        )
    raise ForbiddenError(
        f"server refused: this token's role may not do this ({asked})",
        hint="writes need a writer token (`ledger tokens new NAME --role writer` on the server)",
    )


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

    def has_artifact(self, digest: Digest | str) -> bool:
        """Whether the server's store serves the artifact (``HEAD /v1/artifacts/<digest>``)."""
        digest = parse_digest(digest) if isinstance(digest, str) else digest
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
        # keyed by ``server_key``: one server written two ways (an older ledger kept URLs as written) is one
        # key, and two keys it holds for it that disagree are an error, never the one read last
        out: dict[str, Any] = {}
        for url, held in data.items():
            key = server_key(url)
            if key in out and _held_vkey(out[key]) != _held_vkey(held):
                raise ConfigError(
                    f"{self.path}: {url!r} and another entry are the same server ({key}) with different keys",
                    hint=f"keep the entry of the log key {key} really serves and remove the other",
                )
            out[key] = held
        return out

    def get(self, server: str) -> str | None:
        entry = self._read().get(server_key(server))
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
            held = data.get(server_key(server))
            if held is not None:
                return str(held.get("vkey") if isinstance(held, dict) else held).strip()
            data[server_key(server)] = {"vkey": vkey, "how": how, "at": format_time(now_utc())}
            write_atomic(self.path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode(), mode=0o644)
        return vkey


def _held_vkey(held: Any) -> Any:
    """The log key a log-keys entry holds (``{"vkey": …, "how": …, "at": …}``, or the key alone)."""
    return (held.get("vkey") if isinstance(held, dict) else held) or None


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

_DEFAULT_PORTS = {"http": 80, "https": 443}


def server_key(url: str) -> str:
    """A server URL as the spool, its targets and the home's log keys compare it: the same server however it
    was written (RFC 3986 §6.2.2–6.2.3: scheme and host in lower case, the scheme's default port left out,
    no trailing slash) — ``HTTP://Prod.test:80/`` is ``http://prod.test``. A text that is no URL with a
    host is compared as written, less a trailing slash."""
    text = url.strip().rstrip("/")
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        return text
    if not parts.scheme or not parts.hostname:
        return text
    scheme = parts.scheme.lower()
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    netloc = host if port is None or port == _DEFAULT_PORTS.get(scheme) else f"{host}:{port}"
    if "@" in parts.netloc:
        netloc = parts.netloc.rsplit("@", 1)[0] + "@" + netloc
    return urlunsplit((scheme, netloc, parts.path.rstrip("/"), parts.query, parts.fragment))


_TARGET = ".target"  # beside entries/<order>-<id>.json: the server it was collected for (SpoolTarget)
_TARGETS = ".targets"  # beside artifacts/<hex>: the servers it waits for (a JSON list of URLs)
_REFUSAL = ".refusal.json"  # beside refused/<order>-<id>.json: the server's reason
# the name an entry is spooled under (``Spool.add_entry``): its order, then the id of the entry it holds
_ENTRY_NAME = re.compile(r"(?P<order>[0-9]+)-(?P<id>[0-9a-f]{64})\.json")
UNTARGETED = "*"  # what a file spooled by an older ledger, which recorded no server, is for
_ARTIFACT_NAME = re.compile(r"[0-9a-f]{64}")  # the name an artifact is spooled under: its BLAKE3 hex
_BAD_DIR = "bad"  # spool/bad/: files that are not what their name says, quarantined (``Spool.quarantine``)
_BAD = ".bad.json"  # beside bad/<folder>/<name>: why it was quarantined, and where it was
_TAG = re.compile(r"(?P<stem>.+)~(?P<n>[2-9]|[1-9][0-9]+)")  # a name taken in bad/ already: <stem>~2, ~3 …


def _move(src: Path, dst: Path) -> None:
    """One step of a quarantine (``Spool.quarantine``): ``src`` renamed to ``dst`` (a link or FIFO as it
    is, never followed). Its own function so that a test can stop a quarantine between two steps."""
    os.replace(src, dst)


def _file_kind(mode: int) -> str:
    """What a file that is not a regular file is, in words (``_open_regular``)."""
    for test, kind in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return kind
    return "not a regular file"


def _not_regular(path: Path, mode: int) -> OSError:
    kind = _file_kind(mode)
    if stat.S_ISLNK(mode):
        with contextlib.suppress(OSError):
            kind += f" (to {os.readlink(path)})"
    return OSError(errno.EINVAL, f"{kind}, not a regular file: a spool file is never followed nor waited on")


def _open_regular(path: Path) -> BinaryIO:
    """A spool file opened for reading as the regular file the spool writes: a symbolic link (even to a good
    file), a FIFO, a socket, a device or a folder in its place is refused without being followed, opened or
    waited on (``lstat`` first; then ``O_NOFOLLOW | O_NONBLOCK`` and ``fstat``, for one swapped in between)
    — ``OSError`` saying what it is."""
    mode = os.lstat(path).st_mode
    if not stat.S_ISREG(mode):
        raise _not_regular(path, mode)
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(path, mode)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def _read_regular(path: Path) -> bytes:
    """The bytes of a spool file that must be a regular file (``_open_regular``)."""
    with _open_regular(path) as f:
        return f.read()


@dataclass(frozen=True)
class SpoolTarget:
    """The server a spooled entry was collected for: its URL and, when this home knew it then, the log it
    serves (``origin`` and verifier key ``vkey``, as ``log_key`` gives them). A spooled file is delivered to
    that server only; a file without one (spooled by an older ledger) to none unless the operator names the
    server (``ledger push --adopt-untargeted``)."""

    server: str
    origin: str | None = None
    vkey: str | None = None

    @classmethod
    def of(cls, server: str, vkey: str | None = None) -> SpoolTarget:
        origin = parse_verifier_key(vkey)[0] if vkey is not None else None
        return cls(server_key(server), origin, vkey)

    def to_bytes(self) -> bytes:
        doc = {"server": self.server, "origin": self.origin, "vkey": self.vkey}
        return (json.dumps(doc, sort_keys=True) + "\n").encode()

    @classmethod
    def read(cls, path: Path) -> SpoolTarget:
        """The target recorded in ``path``; ``ConfigError`` naming the file when it is unreadable."""
        try:
            doc = json.loads(_read_regular(path))
            server, origin, vkey = doc["server"], doc.get("origin"), doc.get("vkey")
            if (
                not isinstance(server, str)
                or not server
                or not all(v is None or isinstance(v, str) for v in (origin, vkey))
            ):
                raise TypeError("server must be a URL, origin and vkey strings or null")
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise ConfigError(f"{path}: not a spool target ({type(e).__name__}: {e})") from e
        return cls(server_key(server), origin, vkey)

    def label(self) -> str:
        return self.server if self.origin is None else f"{self.server} (log {self.origin})"


@dataclass(frozen=True)
class SpooledEntry:
    """A spooled entry file checked against the name it was written under (``Spool.read_entry``): the id
    its name gives (that of ``envelope``, which is what is sent of it) and its size in the spool."""

    path: Path
    entry_id: EntryId
    envelope: Envelope
    size: int


@dataclass(frozen=True)
class SpooledArtifact:
    """A spooled artifact file checked against the name it was written under (``Spool.read_artifact``): a
    regular file whose bytes hash (BLAKE3) to the digest its name gives, and its size."""

    path: Path
    digest: Digest
    size: int


class Spool:
    """Envelopes and artifacts waiting for a server: ``entries/<order>-<id>.json`` (each beside its
    ``<order>-<id>.target``: the server it was collected for), ``artifacts/<hex>`` (beside
    ``<hex>.targets``: the servers it still waits for), and ``refused/``: entries a server refused for good
    (``<order>-<id>.json`` with its ``.target`` and the server's reason, ``.refusal.json``), kept and never
    sent again unless moved back to ``entries/`` with its ``.target``; ``refused/artifacts/``: artifacts a
    server refused for good (``<hex>``, beside ``<hex>.targets``: the servers that refused it, and their
    reasons in ``<hex>.refusal.json``), kept and never sent to those servers again unless moved back to
    ``artifacts/`` with its ``.targets``. ``restore_refused`` (``ledger push --retry-refused``) moves back
    what one server refused. ``bad/``: files that are not what their name says (``read_entry``,
    ``read_artifact``), or whose target file cannot be read, quarantined by a push (``quarantine``) under
    the folder they were in (``bad/entries/``, ``bad/refused/``, ``bad/artifacts/``) with what belongs to
    them and why (``<name>.bad.json``): kept, never sent, never deleted."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.entries_dir = self.root / "entries"
        self.artifacts_dir = self.root / "artifacts"
        self.refused_dir = self.root / "refused"
        self.refused_artifacts_dir = self.refused_dir / "artifacts"
        self.bad_dir = self.root / _BAD_DIR

    def _ensure(self) -> None:
        self.entries_dir.mkdir(parents=True, exist_ok=True)
        self.artifacts_dir.mkdir(parents=True, exist_ok=True)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """One writer or pusher at a time per home (collectors may run side by side). ``ConfigError`` when
        the lock file is not a regular file (a FIFO there would block every push)."""
        self._ensure()
        path = self.root / ".lock"
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(path, flags, 0o600)
        except OSError as e:
            raise ConfigError(f"{path}: the spool's lock file cannot be opened ({e.strerror or e})") from e
        with os.fdopen(fd, "ab") as f:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                raise ConfigError(f"{path}: the spool's lock file is {_file_kind(mode)}, not a regular file")
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

    def refused_files(self) -> list[Path]:
        """Entries a server refused for good, set aside (``push`` never sends them again)."""
        if not self.refused_dir.is_dir():
            return []
        return sorted(
            p
            for p in self.refused_dir.iterdir()
            if p.suffix == ".json" and not p.name.endswith(_REFUSAL) and not p.name.startswith(".")
        )

    def refused_artifact_files(self) -> list[Path]:
        """Artifacts a server refused for good, set aside (``push`` never sends them to it again)."""
        if not self.refused_artifacts_dir.is_dir():
            return []
        return sorted(
            p
            for p in self.refused_artifacts_dir.iterdir()
            if len(p.name) == 64 and not p.name.startswith(".")
        )

    @staticmethod
    def entry_target(entry: Path) -> SpoolTarget | None:
        """The server a spooled entry was collected for; None: it names none (an older ledger spooled it).
        ``ConfigError`` when its target file is unreadable."""
        path = entry.with_suffix(_TARGET)
        return SpoolTarget.read(path) if os.path.lexists(path) else None

    @staticmethod
    def read_entry(entry: Path) -> SpooledEntry:
        """The entry a spooled file holds, checked against the name it was written under
        (``<order>-<entry id>.json``, ``add_entry``): its bytes must be a signed envelope whose entry id
        (``entry_id_of`` its canonical form) is the one its name gives. ``ConfigError`` naming the file and
        what is wrong when it is not (unreadable, not JSON, not an envelope, another entry): such a file is
        never sent, nor removed, nor counted as delivered — it stays where it is, named."""
        m = _ENTRY_NAME.fullmatch(entry.name)
        if m is None:
            raise ConfigError(
                f"{entry}: not the name of a spooled entry (<order>-<entry id>.json): the entry it holds "
                "cannot be checked against the one it was spooled as; kept, not sent",
                hint="look at it, then move it out of the spool (or back under its own name)",
            )
        named, data = EntryId(m["id"]), b""
        try:
            data = _read_regular(entry)
            env = parse_canonical_envelope(data) or parse_envelope(data)
        except OSError as e:
            problem = f"unreadable ({e.strerror or e})"
        except (LedgerError, ValueError, RecursionError) as e:
            why = e.message if isinstance(e, LedgerError) else str(e)
            problem = "empty" if not data else f"not a signed envelope ({why})"
        else:
            held = entry_id_of(env.canonical())
            if held == named:
                return SpooledEntry(entry, named, env, len(data))
            problem = f"it holds the entry {held}"
        raise ConfigError(
            f"{entry}: not the spooled entry its name says ({problem}); kept, not sent",
            hint="look at it, then move it out of the spool; `ledger push` names it until then",
        )

    @staticmethod
    def read_artifact(art: Path, *, check_bytes: bool = True) -> SpooledArtifact:
        """The artifact a spooled file holds, checked against the name it was written under
        (``artifacts/<BLAKE3 hex>``, ``add_artifact``): a regular file (never a link followed, nor a FIFO
        waited on: ``_open_regular``) whose bytes hash to that name (with ``check_bytes`` False, its name and
        kind only). ``ConfigError`` naming the file and what is wrong when it is not: such a file is never
        sent."""
        if _ARTIFACT_NAME.fullmatch(art.name) is None:
            raise ConfigError(
                f"{art}: not the name of a spooled artifact (its BLAKE3 digest, 64 lower-case hex): its "
                "bytes cannot be checked against the artifact it was spooled as; not sent",
                hint="look at it, then move it out of the spool (or back under its own name)",
            )
        named = Digest(HexDigest(art.name))
        try:
            with _open_regular(art) as f:
                got = hash_stream(f) if check_bytes else None
                size = os.fstat(f.fileno()).st_size if got is None else got.size
        except OSError as e:
            problem = f"unreadable ({e.strerror or e})"
        else:
            if got is None or got.blake3 == named:
                return SpooledArtifact(art, named, size)
            problem = f"its bytes are the artifact {got.blake3}, {got.size} bytes"
        raise ConfigError(
            f"{art}: not the spooled artifact its name says ({problem}); not sent",
            hint="spool the artifact's real bytes again (a collect that names it does), or put them back "
            "in the spool's artifacts/ folder under its name",
        )

    @staticmethod
    def artifact_targets(art: Path) -> list[str]:
        """The servers a spooled artifact still waits for; ``UNTARGETED`` among them: an older ledger spooled
        it for a server it did not record (it has no targets file). ``ConfigError`` when that file is
        unreadable."""
        path = art.with_name(art.name + _TARGETS)
        if not os.path.lexists(path):
            return [UNTARGETED]
        try:
            servers = json.loads(_read_regular(path))
            if not isinstance(servers, list) or not all(isinstance(s, str) and s for s in servers):
                raise TypeError("not a list of server URLs")
        except (OSError, ValueError, TypeError) as e:
            raise ConfigError(f"{path}: not a list of servers ({type(e).__name__}: {e})") from e
        return [server_key(s) for s in servers]

    def pending(self, server: str | None = None, *, adopt: bool = False) -> bool:
        """Whether anything waits in the spool; with ``server``, for that server only (with ``adopt``, what
        names no server too). A file whose target is unreadable, or that is not the entry its name says
        (``read_entry``), waits for none."""
        if server is None:
            return bool(self.entry_files() or self.artifact_files())
        wanted = {server_key(server), *([UNTARGETED] if adopt else [])}
        for entry in self.entry_files():
            with contextlib.suppress(ConfigError):
                t = self.entry_target(entry)
                if (t.server if t is not None else UNTARGETED) in wanted:
                    self.read_entry(entry)
                    return True
        for art in self.artifact_files():
            with contextlib.suppress(ConfigError):
                if wanted.intersection(self.artifact_targets(art)):
                    return True
        return False

    def add_entry(self, envelope: bytes, entry_id: str, *, target: SpoolTarget | None) -> Path:
        """Append an envelope to the spool durably (temp file, fsync, rename, fsync the folder), its target
        first: an entry is never in the spool without the server it is for (``target`` None: for none, as an
        older ledger spooled them)."""
        with self.locked():
            # after the last order a spooled name gives (a file not named <order>-<id>.json has none)
            orders = [int(m["order"]) for p in self.entry_files() if (m := _ENTRY_NAME.fullmatch(p.name))]
            order = max(orders, default=0) + 1
            final = self.entries_dir / f"{order:012d}-{entry_id}.json"
            if target is not None:
                write_atomic(final.with_suffix(_TARGET), target.to_bytes(), mode=0o600)
            write_atomic(final, envelope, mode=0o600)
            return final

    def _write_targets(self, art: Path, servers: Sequence[str]) -> None:
        data = (json.dumps(sorted(set(servers))) + "\n").encode()
        write_atomic(art.with_name(art.name + _TARGETS), data, mode=0o600)

    def add_artifact(self, path: Path, digest: Digest, *, target: SpoolTarget | None) -> Path:
        """Copy an artifact into the spool, checking the copy hashes to ``digest``; it waits for the server
        of ``target`` besides any it waits for already (``target`` None: for none recorded, as an older
        ledger spooled them). Its targets are written before its bytes: an artifact never waits unaddressed
        (a crash in between leaves a targets file alone, which the next copy takes up). A file already there
        under its name that is not it (``read_artifact``: other bytes, a link, a FIFO …) is quarantined
        (``quarantine``, with its targets, kept) and replaced by this copy, waiting for the same servers."""
        with self.locked():
            final = self.artifacts_dir / digest.hex
            sidecar = final.with_name(final.name + _TARGETS)
            held: list[str] = []
            with contextlib.suppress(ConfigError):  # an unreadable one is replaced
                there = os.path.lexists(final) or os.path.lexists(sidecar)
                held = self.artifact_targets(final) if there else []
            good = quarantined = False
            if os.path.lexists(final):
                try:
                    self.read_artifact(final)
                    good = True
                except ConfigError as e:
                    self.quarantine(final, f"{e.message} (replaced by the copy spooled again)")
                    quarantined = True
            want = [*held, *([target.server] if target is not None and target.server not in held else [])]
            if want and want != [UNTARGETED] and (quarantined or want != held):
                self._write_targets(final, want)
            if good:
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

    def artifact_sent(self, art: Path, server: str, *, adopt: bool = False) -> None:
        """``server`` holds the artifact now: it no longer waits for it (nor, ``adopt``, for the server it
        was spooled for without naming it); gone when it waits for no other."""
        gone = {server_key(server), *([UNTARGETED] if adopt else [])}
        left = [s for s in self.artifact_targets(art) if s not in gone]
        if left:
            self._write_targets(art, left)
            return
        self.remove([art])
        with contextlib.suppress(FileNotFoundError):
            art.with_name(art.name + _TARGETS).unlink()

    def _companions(self, path: Path) -> tuple[str, list[Path]]:
        """The stem a spool file's companions are named after, and the files that belong to it where it
        is: an artifact's ``<hex>.targets`` and ``<hex>.refusal.json`` (set aside in ``refused/artifacts/``,
        or moved back from there by hand with its reasons), an entry's ``.target`` and ``.refusal.json``."""
        if path.parent in (self.artifacts_dir, self.refused_artifacts_dir):
            return path.name, [path.with_name(path.name + _TARGETS), path.with_name(path.name + _REFUSAL)]
        return path.stem, [path.with_suffix(_TARGET), path.with_name(path.stem + _REFUSAL)]

    def quarantine(self, path: Path, problem: str) -> Path:
        """Move a spool file out of the spool that is not what its name says (``read_entry``,
        ``read_artifact``: torn, another entry's or artifact's bytes, a link, a FIFO, a folder …) or whose
        target file cannot be read: into ``bad/<the folder it was in>/`` with what belongs to it (an entry's
        ``.target`` and ``.refusal.json``, an artifact's ``.targets`` and ``.refusal.json``: ``_companions``
        — fix151: a set-aside artifact's reasons stayed behind), beside why (``<name>.bad.json``:
        ``problem``, where it was, when). Never deleted, never sent, no longer named by every push; a name
        taken there already by a file (it, or what belongs to it) gets ``~2``, ``~3`` … after its stem — a
        ``.bad.json`` alone, whose file is gone (moved back by hand, or a push killed before it moved the
        file), takes no name: it is stale (``bad_files``) and replaced. Why is written first (naming what
        belongs to it, ``with``), then the file moved, then what belongs to it: a kill at any point leaves
        the file in the spool (beside at most a stale note, which the next push replaces) or in ``bad/``
        beside why — never lost, never twice — and what belongs to a file moved never waits in the spool
        for an entry that is gone: the next push moves it after its file (``finish_quarantines``). A
        link or FIFO is moved as it is, never followed or opened. Returns where it went;
        ``FileNotFoundError`` when it is gone (a push beside this one delivered it). Call it holding the
        spool's lock."""
        if not os.path.lexists(path):
            raise FileNotFoundError(errno.ENOENT, "no longer in the spool", str(path))
        folder = self.bad_dir / path.parent.relative_to(self.root)
        folder.mkdir(parents=True, exist_ok=True)
        stem, sidecars = self._companions(path)
        tag, n = stem, 1
        while any(os.path.lexists(folder / (tag + p.name[len(stem) :])) for p in (path, *sidecars)):
            n += 1
            tag = f"{stem}~{n}"
        dest = folder / (tag + path.name[len(stem) :])
        moved = [p for p in sidecars if os.path.lexists(p)]
        why = {
            "file": str(path),
            "problem": problem,
            "with": [p.name for p in moved],
            "at": format_time(now_utc()),
        }
        reason = dest.with_name(dest.name + _BAD)
        write_atomic(reason, (json.dumps(why, indent=2) + "\n").encode(), mode=0o600)
        try:
            _move(path, dest)  # the file first: an entry never waits without its target
        except FileNotFoundError:
            reason.unlink()
            raise
        for p in moved:
            with contextlib.suppress(FileNotFoundError):
                _move(p, folder / (tag + p.name[len(stem) :]))
        fsync_dir(folder)
        fsync_dir(path.parent)
        return dest

    def finish_quarantines(self) -> list[Path]:
        """Complete the quarantines a kill stopped between a file and what belongs to it (``quarantine``):
        each file of ``bad/`` whose note (``<name>.bad.json``, read as the regular file it was written as)
        names the spool file it was (``file``) and what was to go with it (``with``) gets each of those
        still in its folder of the spool moved beside it, under its name in ``bad/`` — but only while no
        file of its old name is back in the spool (what is beside one then is that file's: an entry or
        artifact spooled again under that name writes its own), only to a name free in ``bad/``, and only
        what the note names. A file without a readable note, or whose note names another file, is left as
        it is (nothing is guessed); where one name was quarantined several times the latest (``~N``) takes
        it. A step that fails is left for the next push: the companions stay where they are, harmless (no
        file of theirs waits in the spool). Returns where what it moved went. Call it holding the lock."""
        done: list[Path] = []
        todo: list[tuple[int, Path, Path, str, list[str]]] = []
        folders = (self.entries_dir, self.refused_dir, self.artifacts_dir, self.refused_artifacts_dir)
        for kept in self.bad_files():
            folder = self.root / kept.parent.relative_to(self.bad_dir)
            if folder not in folders:
                continue
            try:
                why = json.loads(_read_regular(kept.with_name(kept.name + _BAD)))
                named, was_with = why["file"], why["with"]
            except (OSError, ValueError, TypeError, KeyError):
                continue
            if not isinstance(named, str) or not isinstance(was_with, list):
                continue
            path = folder / Path(named).name
            stem = self._companions(path)[0]
            suffix = path.name[len(stem) :]
            if not kept.name.endswith(suffix) or os.path.lexists(path):
                continue
            tag = kept.name[: len(kept.name) - len(suffix)] if suffix else kept.name
            m = _TAG.fullmatch(tag)
            if tag != stem and (m is None or m["stem"] != stem):
                continue
            todo.append((int(m["n"]) if tag != stem and m is not None else 1, kept, path, tag, was_with))
        for _n, kept, path, tag, was_with in sorted(todo, key=lambda t: -t[0]):  # the latest first
            stem, companions = self._companions(path)
            for p in companions:
                dest = kept.with_name(tag + p.name[len(stem) :])
                if p.name not in was_with or not os.path.lexists(p) or os.path.lexists(dest):
                    continue
                try:
                    _move(p, dest)
                except OSError:
                    continue
                done.append(dest)
        for d in {p.parent for p in done}:
            fsync_dir(d)
            fsync_dir(self.root / d.relative_to(self.bad_dir))
        return done

    def bad_files(self) -> list[Path]:
        """What pushes quarantined (``quarantine``) that is there still: each file in ``bad/`` (``lexists``:
        a link, FIFO or folder moved as it was counts), named by its ``.bad.json`` or, without one, by the
        form of the folder it came from (``*.json`` from ``entries/`` and ``refused/``; from ``artifacts/``
        any name), never what belongs to a file (``.target``, ``.targets``, ``.refusal.json``). A
        ``.bad.json`` whose file is gone is stale — the file was moved back by hand, or a push was killed
        before it moved it (it is still in the spool) — and names nothing: not counted, holding no entry
        (``bad_artifacts``), and left where it is (bad/ is never deleted from), to be replaced by the next
        ``quarantine`` of that name."""
        found: set[Path] = set()
        for folder in (self.entries_dir, self.refused_dir, self.artifacts_dir, self.refused_artifacts_dir):
            bad = self.bad_dir / folder.relative_to(self.root)
            if not bad.is_dir():
                continue
            artifacts = folder in (self.artifacts_dir, self.refused_artifacts_dir)
            for p in bad.iterdir():
                if p.name.endswith(_BAD):
                    kept = bad / p.name[: -len(_BAD)]
                    if os.path.lexists(kept):
                        found.add(kept)
                elif (
                    not p.name.startswith(".")
                    and not p.name.endswith((_TARGET, _TARGETS, _REFUSAL))
                    and (artifacts or p.name.endswith(".json"))
                ):
                    found.add(p)
        return sorted(found)

    def bad_artifacts(self) -> dict[Digest, Path]:
        """The artifacts whose spooled bytes were quarantined (``bad/artifacts/``), by the digest their name
        gives: an entry naming one waits until its server holds the real bytes."""
        held: dict[Digest, Path] = {}
        folder = self.bad_dir / self.artifacts_dir.relative_to(self.root)
        for p in self.bad_files():
            hex_ = p.name.split("~", 1)[0]
            if p.parent == folder and _ARTIFACT_NAME.fullmatch(hex_):
                held.setdefault(Digest(HexDigest(hex_)), p)
        return held

    def remove(self, paths: Sequence[Path]) -> None:
        """Forget delivered entries (with their targets) or artifacts."""
        for p in paths:
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
            if p.suffix == ".json":
                with contextlib.suppress(FileNotFoundError):
                    p.with_suffix(_TARGET).unlink()
        if paths:
            fsync_dir(paths[0].parent)

    def set_aside(self, entry: Path, server: str, error: LedgerError) -> Path:
        """Move an entry ``server`` refused for good to ``refused/``, with the server's reason beside it:
        kept, never deleted, never sent again unless an operator moves it back to ``entries/``."""
        self.refused_dir.mkdir(parents=True, exist_ok=True)
        why = {
            "server": server,
            "code": error.code,
            "message": error.message,
            "hint": error.hint_text,
            "at": format_time(now_utc()),
        }
        dest = self.refused_dir / entry.name
        write_atomic(
            dest.with_name(entry.stem + _REFUSAL), (json.dumps(why, indent=2) + "\n").encode(), mode=0o600
        )
        os.replace(entry, dest)
        with contextlib.suppress(FileNotFoundError):
            os.replace(entry.with_suffix(_TARGET), dest.with_suffix(_TARGET))
        fsync_dir(self.refused_dir)
        fsync_dir(entry.parent)
        return dest

    def set_aside_artifact(self, art: Path, server: str, error: LedgerError, *, adopt: bool = False) -> Path:
        """Set aside an artifact ``server`` refused for good (its bytes no longer hash to their name, too
        large …): its bytes kept in ``refused/artifacts/`` with the server's reason (added to the reasons
        already there, ``.refusal.json``), and it no longer waits for ``server`` (nor, ``adopt``, for the
        server it was spooled for without naming it) — for another server it still waits in ``artifacts/``.
        Nothing is lost: the bytes are linked (or copied) into ``refused/`` before ``artifacts/`` forgets
        them, beside the servers that refused them (``<hex>.targets``), and never sent to ``server`` again
        unless an operator moves them back (``restore_refused``)."""
        self.refused_artifacts_dir.mkdir(parents=True, exist_ok=True)
        dest = self.refused_artifacts_dir / art.name
        why_path = dest.with_name(dest.name + _REFUSAL)
        reasons: list[Any] = []
        with contextlib.suppress(OSError, ValueError):
            held = json.loads(_read_regular(why_path))
            reasons = held if isinstance(held, list) else [held]
        reasons.append(
            {
                "server": server,
                "code": error.code,
                "message": error.message,
                "hint": error.hint_text,
                "at": format_time(now_utc()),
            }
        )
        write_atomic(why_path, (json.dumps(reasons, indent=2) + "\n").encode(), mode=0o600)
        # the servers that refused it, as a targets file: moved back to ``artifacts/`` with its bytes (or
        # ``restore_refused``), it waits for them again — never an artifact that names no server
        refusing: list[str] = []
        with contextlib.suppress(ConfigError):
            refusing = [t for t in self.artifact_targets(dest) if t != UNTARGETED]
        self._write_targets(dest, [*refusing, server_key(server)])
        if not dest.exists():
            tmp = dest.with_name(f".{dest.name}.tmp")
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            try:
                os.link(art, tmp)
            except OSError:  # another file system, or no hard links: a copy
                shutil.copyfile(art, tmp)
                with tmp.open("rb") as f:
                    os.fsync(f.fileno())
            os.replace(tmp, dest)
        fsync_dir(self.refused_artifacts_dir)
        self.artifact_sent(art, server, adopt=adopt)
        return dest

    def restore_refused(self, server: str, *, adopt: bool = False) -> tuple[int, int]:
        """Send again what ``server`` refused for good (once it would take it: ``ledger push
        --retry-refused``): each set-aside entry collected for it (with ``adopt``, one that names no
        server too) back to ``entries/`` with its ``.target``, in its order; each set-aside artifact it
        refused back to ``artifacts/``, waiting for it (besides any server it waits for there), and kept
        in ``refused/`` while another server refused it too. The servers' reasons of what moved back are
        dropped. Returns how many entries and artifacts moved back. A file whose target cannot be read, or
        that is not the entry its name says (``read_entry``), stays where it is (``ledger push`` names it)."""
        server = server_key(server)
        entries = artifacts = 0
        with self.locked():
            for refused in self.refused_files():
                try:
                    t = self.entry_target(refused)
                    if not (t.server == server if t is not None else adopt):
                        continue
                    self.read_entry(refused)
                except ConfigError:
                    continue
                dest = self.entries_dir / refused.name
                if t is not None:  # its target first: an entry never waits unaddressed
                    os.replace(refused.with_suffix(_TARGET), dest.with_suffix(_TARGET))
                os.replace(refused, dest)
                with contextlib.suppress(FileNotFoundError):
                    refused.with_name(refused.stem + _REFUSAL).unlink()
                entries += 1
            for art in self.refused_artifact_files():
                try:
                    refusing = self._refused_by(art)
                except ConfigError:
                    continue
                if server not in refusing:
                    continue
                dest = self.artifacts_dir / art.name
                held: list[str] = []
                with contextlib.suppress(ConfigError):  # an unreadable one is replaced
                    held = self.artifact_targets(dest) if dest.exists() else []
                self._write_targets(dest, [*(h for h in held if h != UNTARGETED), server])
                left = [s for s in refusing if s != server]
                if not dest.exists():
                    if left:
                        shutil.copyfile(art, dest)
                    else:
                        os.replace(art, dest)
                if left:
                    self._write_targets(art, left)
                else:
                    for p in (art, art.with_name(art.name + _TARGETS), art.with_name(art.name + _REFUSAL)):
                        with contextlib.suppress(FileNotFoundError):
                            p.unlink()
                artifacts += 1
            if entries or artifacts:
                fsync_dir(self.entries_dir)
                fsync_dir(self.artifacts_dir)
                if self.refused_dir.is_dir():
                    fsync_dir(self.refused_dir)
        return entries, artifacts

    def _refused_by(self, art: Path) -> list[str]:
        """The servers that refused a set-aside artifact: its targets file, else (set aside before one was
        kept) the servers its reasons name."""
        if os.path.lexists(art.with_name(art.name + _TARGETS)):
            return [t for t in self.artifact_targets(art) if t != UNTARGETED]
        try:
            reasons = json.loads(_read_regular(art.with_name(art.name + _REFUSAL)))
        except (OSError, ValueError):
            return []
        reasons = reasons if isinstance(reasons, list) else [reasons]
        return [
            server_key(r["server"])
            for r in reasons
            if isinstance(r, dict) and isinstance(r.get("server"), str)
        ]

    @staticmethod
    def refusal(refused: Path) -> dict[str, Any]:
        """The server's reason kept beside a refused entry (empty when unreadable)."""
        try:
            doc = json.loads(_read_regular(refused.with_name(refused.stem + _REFUSAL)))
        except (OSError, ValueError):
            return {}
        return doc if isinstance(doc, dict) else {}


@dataclass
class PushReport:
    """What a push delivered to its server, and what it left in the spool: ``remaining`` entries and
    ``remaining_artifacts`` for that server (it was unreachable: ``error``), entries spooled for other servers
    (``elsewhere``, by server) or for none recorded (``untargeted``, spooled by an older ledger), entries a
    server refused for good (``refused``: set aside by this push; ``held_refused``: all that are set aside),
    artifacts a server refused for good (``refused_artifacts``: set aside by this push;
    ``held_refused_artifacts``: all that are set aside), artifacts that wait for other servers only
    (``other_artifacts``), spool files whose target cannot be read, or that are not the entry or artifact
    their name says (``Spool.read_entry``, ``Spool.read_artifact``): moved to the spool's ``bad/`` by this
    push (``quarantined``: where each was, where it went, why; ``held_bad``: all that wait there), or, where
    one could not be moved (or was found outside a push), named where it is (``unreadable``); and entries kept
    in the spool, not sent, because they name an artifact whose spooled bytes were quarantined and the server
    does not hold (``held``, counted in ``remaining``)."""

    delivered: int = 0
    duplicates: int = 0
    artifacts: int = 0
    remaining: int = 0
    remaining_artifacts: int = 0
    error: str | None = None
    server: str = ""
    elsewhere: dict[str, int] = field(default_factory=dict)
    untargeted: int = 0
    refused: list[dict[str, Any]] = field(default_factory=list)
    held_refused: int = 0
    refused_artifacts: list[dict[str, Any]] = field(default_factory=list)
    held_refused_artifacts: int = 0
    unreadable: list[str] = field(default_factory=list)
    other_artifacts: int = 0
    quarantined: list[dict[str, Any]] = field(default_factory=list)
    held_bad: int = 0
    held: list[dict[str, Any]] = field(default_factory=list)

    def left(self) -> bool:
        """Whether anything is still in the spool, for this server or another, or this push found a bad
        spool file (``quarantined``): ``ledger push`` exit 1. What earlier pushes quarantined (``held_bad``)
        is out of the spool: named, it fails no later push."""
        return bool(
            self.quarantined
            or self.remaining
            or self.remaining_artifacts
            or self.elsewhere
            or self.other_artifacts
            or self.untargeted
            or self.held_refused
            or self.held_refused_artifacts
            or self.unreadable
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "delivered": self.delivered,
            "duplicates": self.duplicates,
            "artifacts": self.artifacts,
            "remaining": self.remaining,
            "remaining_artifacts": self.remaining_artifacts,
            "error": self.error,
            "server": self.server,
            "elsewhere": self.elsewhere,
            "untargeted": self.untargeted,
            "refused": self.refused,
            "held_refused": self.held_refused,
            "refused_artifacts": self.refused_artifacts,
            "held_refused_artifacts": self.held_refused_artifacts,
            "unreadable": self.unreadable,
            "other_artifacts": self.other_artifacts,
            "quarantined": self.quarantined,
            "held_bad": self.held_bad,
            "held": self.held,
        }

    def notices(self) -> list[str]:
        """What a push (``ledger push``, or a collect catching up) says of what it left, each with what to
        do; empty when it left nothing but this server's files while it was unreachable."""
        said = []
        for r in self.refused:
            said.append(
                f"{self.server} refused the spooled entry {r['id']} for good ([{r['code']}] {r['message']}): "
                f"set aside, kept in {r['file']} with the server's reason beside it; it is not sent again — "
                "once the server would take it (its key trusted again, say), "
                f"`ledger push --server {self.server} --retry-refused` sends it again (or move it back to "
                "the spool's entries/ folder with its .target file beside it)"
            )
        if self.held_refused > len(self.refused):
            said.append(
                f"{self.held_refused - len(self.refused)} entries refused for good earlier wait in the "
                "spool's refused/ folder (each beside the server's reason): "
                f"`ledger push --server {self.server} --retry-refused` sends those for it again (or move "
                "one back to entries/ with its .target file)"
            )
        for a in self.refused_artifacts:
            said.append(
                f"{self.server} refused the spooled artifact {a['digest']} for good ([{a['code']}] "
                f"{a['message']}): set aside, kept in {a['file']} with the server's reason beside it; it is "
                "not sent to it again (an entry naming it is refused artifact-missing) — once the server "
                f"would take it, `ledger push --server {self.server} --retry-refused` sends it again (or "
                "move it back to the spool's artifacts/ folder with its .targets file beside it)"
            )
        if self.held_refused_artifacts > len(self.refused_artifacts):
            said.append(
                f"{self.held_refused_artifacts - len(self.refused_artifacts)} artifacts refused for good "
                "earlier wait in the spool's refused/artifacts/ folder (each beside the servers' reasons): "
                f"`ledger push --server {self.server} --retry-refused` sends those it refused again"
            )
        for server, n in sorted(self.elsewhere.items()):
            said.append(
                f"{n} spooled entr{'y' if n == 1 else 'ies'} collected for {server} left alone (not "
                f"delivered to {self.server}): deliver {'it' if n == 1 else 'them'} with "
                f"`ledger push --server {server.split(' ', 1)[0]}`"
            )
        if self.other_artifacts and not self.elsewhere:
            said.append(
                f"{self.other_artifacts} spooled artifacts wait for other servers (left alone): `ledger push "
                "--server URL` with the URL their collect named delivers them"
            )
        if self.untargeted:
            said.append(
                f"{self.untargeted} spooled entries (or artifacts) name no server (an older ledger spooled "
                f"them) and were not delivered: if they were collected for {self.server}, "
                f"`ledger push --server {self.server} --adopt-untargeted` delivers them there"
            )
        said.extend(f"not delivered: {u}" for u in self.unreadable)
        for q in self.quarantined:
            said.append(
                f"not delivered, quarantined: {q['problem']} — moved out of the spool to {q['kept']} (why "
                f"beside it, {Path(q['kept']).name}{_BAD}); it is never sent and later pushes leave it "
                "there: look at it, and move it back (with its .target or .targets file) once it holds what "
                "its name says"
            )
        for h in self.held:
            said.append(
                f"the spooled entry {h['id']} was not sent: it names the artifact {h['artifact']}, whose "
                f"spooled copy was quarantined ({h['kept']}, why beside it) and which {self.server} does "
                f"not hold; it stays in the spool ({h['file']}) until {self.server} holds the real "
                "bytes (spool them again, or put them in the spool's artifacts/ folder under their name with "
                f"the quarantined .targets file beside them, then `ledger push --server {self.server}`)"
            )
        if self.held_bad > len(self.quarantined):
            said.append(
                f"{self.held_bad - len(self.quarantined)} spool files quarantined by earlier pushes wait in "
                f"the spool's {_BAD_DIR}/ folder (each beside why, {_BAD}); nothing there is sent"
            )
        return said


# What the server's refusal of an entry means it will never take it as sent: the entry is set aside. A token
# it does not know or trust (auth, forbidden), a server that cannot take it now (unavailable, system) or an
# error code this client does not know are not the entry's: the push stops and the entry stays.
_REFUSED_FOR_GOOD = frozenset({Category.INPUT, Category.TOO_LARGE, Category.TRUST, Category.INTEGRITY})


def _refused_for_good(e: LedgerError) -> bool:
    return e.category in _REFUSED_FOR_GOOD or isinstance(e, ArtifactMissingError)


class _Refused(Exception):
    """The server refused what was sent for good (``_refused_for_good``)."""

    def __init__(self, error: LedgerError) -> None:
        super().__init__(error.message)
        self.error = error


def _batches(
    files: list[Path], hold: Callable[[SpooledEntry], bool] = lambda _one: False
) -> Iterator[list[SpooledEntry]]:
    """The files in batches to send, each read and checked against its name again as it is read
    (``Spool.read_entry``): what is sent is what was checked. One that is no longer the entry its name says
    is left out; the push's closing ``_Sorted`` finds it (and the push quarantines it). One ``hold`` says
    must wait is left out too, where it is."""
    batch: list[SpooledEntry] = []
    size = 0
    for p in files:
        try:
            one = Spool.read_entry(p)
        except ConfigError:
            continue
        if hold(one):
            continue
        if batch and (len(batch) >= _BATCH_ENTRIES or size + one.size > _BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(one)
        size += one.size
    if batch:
        yield batch


def _stored_artifacts(envelope: Envelope) -> list[Digest]:
    """The artifacts an entry names as stored (``ArtifactRef.stored``: the server must hold them to take
    it); none when its payload is no statement (the server refuses such an entry, and the push sets it
    aside)."""
    try:
        st = parse_statement(envelope.statement())
    except (LedgerError, ValueError, RecursionError):
        return []
    named = []
    for a in st.artifacts:
        if a.stored:
            with contextlib.suppress(LedgerError):
                named.append(parse_digest(a.digest))
    return named


class _Sorted:
    """The spool's files sorted by the server they are for: ``ours`` are this push's to deliver. A file that
    is not what its name says, or whose target cannot be read, is for none: in ``bad`` (with why), named
    in ``unreadable`` until a push quarantines it (``_quarantine``)."""

    def __init__(self, spool: Spool, server: str, vkey: Callable[[], str | None], adopt: bool) -> None:
        self.entries: list[Path] = []
        self.artifacts: list[Path] = []
        self.elsewhere: dict[str, int] = {}
        self.untargeted = 0
        self.other_artifacts = 0  # waiting for other servers only
        self.unreadable: list[str] = []
        self.bad: list[tuple[Path, str]] = []

        def bad(path: Path, e: ConfigError) -> None:
            if os.path.lexists(path):  # (not one a push beside this delivered meanwhile)
                self.unreadable.append(e.message)
                self.bad.append((path, e.message))

        for art in spool.artifact_files():
            try:
                spool.read_artifact(art, check_bytes=False)  # its bytes: as the push sends it
                targets = spool.artifact_targets(art)
            except ConfigError as e:
                bad(art, e)
                continue
            if server in targets or (adopt and UNTARGETED in targets):
                self.artifacts.append(art)
            elif UNTARGETED in targets:
                self.untargeted += 1
            else:
                self.other_artifacts += 1
        for entry in spool.entry_files():
            try:
                spool.read_entry(entry)  # a file that is not the entry its name says waits for none
                t = spool.entry_target(entry)
            except ConfigError as e:
                bad(entry, e)
                continue
            if t is None:
                if adopt:
                    self.entries.append(entry)
                else:
                    self.untargeted += 1
            elif t.server != server:
                self.elsewhere[t.label()] = self.elsewhere.get(t.label(), 0) + 1
            elif t.vkey is not None and vkey() not in (None, t.vkey):
                # collected for the log the home trusted for this URL then; it trusts another now
                where = f"{t.server} (log key {t.vkey}; this home now trusts another key for it)"
                self.elsewhere[where] = self.elsewhere.get(where, 0) + 1
            else:
                self.entries.append(entry)
        for refused in spool.refused_files():  # kept in refused/ (``--retry-refused`` leaves it there)
            try:
                spool.read_entry(refused)
            except ConfigError as e:
                bad(refused, e)


def _quarantine(spool: Spool, found: list[tuple[Path, str]], report: PushReport) -> list[str]:
    """Move each bad spool file ``_Sorted`` found out of the spool (``Spool.quarantine``), named in
    ``report.quarantined``; returns, for one that could not be moved, its problem and why not (named where
    it is, ``unreadable``)."""
    named = []
    for path, problem in found:
        try:
            kept = spool.quarantine(path, problem)
        except FileNotFoundError:  # a push beside this one delivered it meanwhile
            continue
        except OSError as e:
            named.append(f"{problem} (it could not be moved to {spool.bad_dir}: {e.strerror or e})")
            continue
        report.quarantined.append({"file": str(path), "kept": str(kept), "problem": problem})
    return named


def _push_locked(
    spool: Spool,
    client: LedgerClient,
    keep_receipts: Callable[[list[dict[str, Any]], list[str]], None],
    progress: Callable[[int], None] | None = None,
    *,
    vkey: Callable[[], str | None] = lambda: None,
    adopt: bool = False,
) -> PushReport:
    """Deliver what the spool holds for ``client``'s server (with ``adopt``, what names no server too);
    ``keep_receipts(answers, ids)`` checks and keeps the receipts of each batch (it raises when one is
    missing or wrong: the batch stays in the spool). An entry the server refuses for good is set aside
    (``Spool.set_aside``) and the push goes on; ``vkey()``: the log key this home trusts for the server now
    (an entry spooled for another log at that URL is left alone). A spool file that is not what its name
    says (an entry's bytes, an artifact's BLAKE3 digest checked before it is sent), or whose target cannot be
    read, is quarantined (``Spool.quarantine``: ``report.quarantined``) and the rest delivered; an entry
    naming a stored artifact whose spooled bytes were quarantined stays in the spool, not sent, while the
    server does not hold that artifact (``report.held``)."""
    server = server_key(client.server)
    report = PushReport(server=server)
    advance = progress or (lambda _n: None)
    spool.finish_quarantines()  # what a push killed mid-quarantine left beside a file it moved
    ours = _Sorted(spool, server, vkey, adopt)
    report.unreadable += _quarantine(spool, ours.bad, report)
    served: dict[Digest, bool] = {}  # whether the server holds an artifact whose spooled bytes were bad

    def waits(one: SpooledEntry, bad: dict[Digest, Path]) -> bool:
        """Whether an entry waits for an artifact whose spooled bytes were quarantined (``bad``) that the
        server does not hold: sent, the server would refuse it for good (artifact-missing), though the
        fault is this spool's — it stays spooled (``report.held``) until the server holds the real bytes."""
        for digest in _stored_artifacts(one.envelope) if bad else ():
            if digest in bad:
                if digest not in served:
                    served[digest] = client.has_artifact(digest)
                if not served[digest]:
                    report.held.append(
                        {
                            "id": one.entry_id,
                            "file": str(one.path),
                            "artifact": str(digest),
                            "kept": str(bad[digest]),
                        }
                    )
                    return True
        return False

    def deliver(batch: list[SpooledEntry]) -> None:
        try:
            entries = client.append([one.envelope.to_json() for one in batch])
        except RemoteUnavailableError:
            raise
        except LedgerError as e:  # the server's refusal (what this client checks of its answer is not)
            if _refused_for_good(e):
                raise _Refused(e) from e
            raise
        if len(entries) != len(batch):
            raise IntegrityError(f"server answered {len(entries)} entries for a batch of {len(batch)}")
        # each answer, and its receipt, must name the entry the file's own name gives (which ``read_entry``
        # checked its bytes are): a file leaves the spool only on a receipt for the entry it was spooled as
        for one, got in zip(batch, entries, strict=True):
            if got.get("id") != one.entry_id:
                raise IntegrityError(f"server logged {got.get('id')} for spooled {one.path.name}")
        # checked, then kept, before the spool forgets them: `ledger audit` checks them later
        keep_receipts(entries, [one.entry_id for one in batch])
        spool.remove([one.path for one in batch])
        report.delivered += sum(1 for e in entries if not e.get("duplicate"))
        report.duplicates += sum(1 for e in entries if e.get("duplicate"))
        advance(sum(one.size for one in batch))

    def set_aside(one: SpooledEntry, e: LedgerError) -> None:
        kept = spool.set_aside(one.path, server, e)
        report.refused.append({"id": one.entry_id, "file": str(kept), "code": e.code, "message": e.message})
        advance(one.size)

    try:
        for art in ours.artifacts:
            try:  # its bytes hash to its name, else it is never sent (nor counted as the server's)
                checked = spool.read_artifact(art)
            except ConfigError as e:
                report.unreadable += _quarantine(spool, [(art, e.message)], report)
                continue
            digest, size = checked.digest, checked.size
            try:
                if client.has_artifact(digest):
                    advance(size)  # nothing to send: the server holds these bytes already
                else:
                    client.upload_file(art, digest, size, sent=advance)
            except RemoteUnavailableError:
                raise
            except LedgerError as e:
                if not _refused_for_good(e):
                    raise
                # set aside, kept; an entry naming it is refused (artifact-missing) and set aside too
                kept = spool.set_aside_artifact(art, server, e, adopt=adopt)
                report.refused_artifacts.append(
                    {"digest": str(digest), "file": str(kept), "code": e.code, "message": e.message}
                )
                continue
            spool.artifact_sent(art, server, adopt=adopt)
            report.artifacts += 1
        bad = spool.bad_artifacts()
        for batch in _batches(ours.entries, lambda one: waits(one, bad)):
            try:
                deliver(batch)
                continue
            except _Refused as r:
                if len(batch) == 1:
                    set_aside(batch[0], r.error)
                    continue
            for one in batch:  # which of the batch does the server refuse? each alone, in order
                try:
                    deliver([one])
                except _Refused as r:
                    set_aside(one, r.error)
    except RemoteUnavailableError as e:
        report.error = e.message
    left = _Sorted(spool, server, vkey, adopt)
    if left.bad:  # what changed while it was pushed (what could not be moved is named once)
        report.unreadable += [u for u in _quarantine(spool, left.bad, report) if u not in report.unreadable]
        left = _Sorted(spool, server, vkey, adopt)
    report.remaining = len(left.entries)
    report.remaining_artifacts = len(left.artifacts)
    report.elsewhere, report.untargeted = left.elsewhere, left.untargeted
    report.other_artifacts = left.other_artifacts
    report.held_refused = len(spool.refused_files())
    report.held_refused_artifacts = len(spool.refused_artifact_files())
    report.held_bad = len(spool.bad_files())
    return report


def spool_size(ledger: Ledger) -> tuple[int, int]:
    """How many entries and artifacts wait in the home's spool."""
    spool = Spool(ledger.spool_dir)
    return len(spool.entry_files()), len(spool.artifact_files())


def restore_refused(ledger: Ledger, server: str, *, adopt: bool = False) -> tuple[int, int]:
    """Move back into the home's spool what ``server`` refused for good, to be pushed again
    (``Spool.restore_refused``); how many entries and artifacts."""
    return Spool(ledger.spool_dir).restore_refused(server, adopt=adopt)


def spool_bytes(ledger: Ledger, server: str | None = None, *, adopt: bool = False) -> int:
    """How many bytes wait in the home's spool (artifacts and envelopes); with ``server``, those a ``ledger
    push`` to it sends (with ``adopt``, what names no server too)."""
    spool = Spool(ledger.spool_dir)
    files = [*spool.artifact_files(), *spool.entry_files()]
    if server is not None:
        ours = _Sorted(spool, server_key(server), lambda: None, adopt)
        files = [*ours.artifacts, *ours.entries]
    total = 0
    for p in files:
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
    adopt_untargeted: bool = False,
) -> PushReport:
    """Deliver what the home's spool holds for ``server`` (``Spool``: each file keeps the server it was
    collected for; what is for another is left alone, and so is what names none unless ``adopt_untargeted``):
    artifacts first, then envelopes in the order they were recorded. An entry the server refuses for good is
    set aside in the spool's ``refused/`` (``PushReport.refused``) and the rest still delivered.

    ``progress`` is called with the number of bytes each step delivered (artifact chunks as they are sent,
    an artifact the server already holds at once, each batch of envelopes when the server logged it or set
    aside); the calls add up to ``spool_bytes(ledger, server)`` when everything was delivered.
    """
    spool = Spool(ledger.spool_dir)
    own = client is None
    c = client or LedgerClient(server, token)
    try:
        with spool.locked():
            return _push_locked(
                spool,
                c,
                lambda got, ids: _keep_receipts(ledger, c, got, ids),
                progress,
                vkey=lambda: log_key(ledger.home_path, c, first_use=False),
                adopt=adopt_untargeted,
            )
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
    _refuse_forked(ledger, client, receipts)
    ledger.keep_receipts(receipts)


def _kept_by_index(ledger: Ledger, origins: set[str]) -> dict[tuple[str, int], dict[str, Any]]:
    """The receipts this home kept of the logs ``origins``, by (origin, index): the first kept of each. A
    line that is no receipt is skipped here (``ledger audit`` names it)."""
    kept: dict[tuple[str, int], dict[str, Any]] = {}
    try:
        data = ledger.home.receipts_path.read_bytes()
    except FileNotFoundError:
        return kept
    except OSError as e:
        raise ConfigError(f"{ledger.home.receipts_path}: cannot be read ({e})") from e
    for line in data.splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if not isinstance(doc, dict):
            continue
        origin, index = doc.get("origin"), doc.get("index")
        if origin in origins and type(index) is int and isinstance(doc.get("entry_id"), str):
            kept.setdefault((origin, index), doc)
    return kept


def _refuse_forked(ledger: Ledger, client: LedgerClient, receipts: list[dict[str, Any]]) -> None:
    """``ReceiptForkError`` when a receipt the log just signed is for an index this home holds a receipt of
    (or another of the batch is for) naming another entry: two receipts signed under one log key for one
    index are the proof that the log forked (a server restored from an older backup appended over what it
    had receipted). Nothing of the batch is kept (its entries stay spooled); both receipts are kept aside
    in ``HOME/spool/forks/`` for the server's operator, and the error names both entries and the index."""
    kept = _kept_by_index(ledger, {str(r.get("origin")) for r in receipts})
    for r in receipts:
        key = (str(r.get("origin")), int(r["index"]))
        before = kept.setdefault(key, r)
        if before.get("entry_id") == r.get("entry_id"):
            continue
        origin, index = key
        aside = Path(ledger.spool_dir) / "forks" / f"{index}-{r['entry_id']}.json"
        proof = {"origin": origin, "index": index, "kept": before, "received": r}
        write_atomic(aside, (json.dumps(proof, indent=2, sort_keys=True) + "\n").encode())
        raise ReceiptForkError(
            f"{client.server} signed a receipt for entry {r['entry_id']} at index {index} of the log "
            f"{origin!r}, whose receipt this home holds for another entry, {before.get('entry_id')}: the "
            f"log forked; the receipt is not kept and the entry stays in the spool {ledger.spool_dir} "
            f"(both signed receipts are kept in {aside})",
        )


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
        self.refused: list[dict[str, Any]] = []  # spooled entries its catching up set aside (``PushReport``)
        self.refused_artifacts: list[dict[str, Any]] = []  # ... and spooled artifacts
        self.quarantined: list[dict[str, Any]] = []  # spool files its catching up moved to the spool's bad/

    def close(self) -> None:
        self.client.close()

    def target(self) -> SpoolTarget:
        """The server what this recorder spools is for, and its log when this home knows its key."""
        try:
            vkey = log_key(self.ledger.home_path, self.client, first_use=False)
        except LedgerError:  # a pin that disagrees with the home: raised where the key is needed
            vkey = None
        return SpoolTarget.of(self.client.server, vkey)

    def _caught_up(self) -> bool:
        """Deliver what is spooled for this server (what is for another is left alone, and an entry the
        server refuses for good set aside); True when nothing of it is left (so new entries may go straight
        out)."""
        if not self.spool.pending(self.client.server):
            return True
        report = push_spool(self.ledger, server=self.server, token=self.token, client=self.client)
        self.refused += report.refused
        self.refused_artifacts += report.refused_artifacts
        self.quarantined += report.quarantined
        return not self.spool.pending(self.client.server)

    def notices(self) -> list[str]:
        """What a command should say of the spool besides its own entries (``PushReport.notices``): the
        spooled entries its catching up set aside, and those waiting for other servers, left alone."""
        left = _Sorted(self.spool, self.client.server, lambda: None, False)
        report = PushReport(
            server=self.client.server,
            elsewhere=left.elsewhere,
            untargeted=left.untargeted,
            other_artifacts=left.other_artifacts,
            refused=self.refused,
            held_refused=len(self.spool.refused_files()),
            refused_artifacts=self.refused_artifacts,
            held_refused_artifacts=len(self.spool.refused_artifact_files()),
            unreadable=left.unreadable,
            quarantined=self.quarantined,
        )
        return report.notices()

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
            elif self.spool.pending(self.client.server):
                self.spool.add_artifact(p, d.blake3, target=self.target())
        except RemoteUnavailableError as e:
            self.unreachable = e.message
            self.spool.add_artifact(p, d.blake3, target=self.target())
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
                got = self.client.append([env.to_json()])
            except RemoteUnavailableError as e:
                self.unreachable = e.message
            except LedgerError as e:  # a refusal is raised, the entry never dropped (``_kept_refused``)
                self._kept_refused(data, entry_id, e)
                raise
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

    def _kept_refused(self, data: bytes, entry_id: str, error: LedgerError) -> None:
        """Keep an entry the server refused when it was sent online: set aside in the spool's ``refused/``
        beside the server's reason where the refusal is for good (``_refused_for_good``: the bytes sent),
        else spooled for a later push (a token the server does not take, a code this client does not
        know) — never dropped."""
        path = self.spool.add_entry(data, entry_id, target=self.target())
        if _refused_for_good(error):
            kept = self.spool.set_aside(path, server_key(self.client.server), error)
            self.refused.append(
                {"id": entry_id, "file": str(kept), "code": error.code, "message": error.message}
            )
        else:
            self.spooled.append(entry_id)
            self.unreachable = error.message

    def _spool(self, data: bytes, entry_id: str, why: LedgerError | None = None) -> None:
        self.spool.add_entry(data, entry_id, target=self.target())
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
