"""Verdicts remembered by everything they were computed from, in the process and in the ledger home.

A verdict is a pure function of: the snapshot's rows (their seq, id, kind, signer, log time and the SHA-256
of their stored envelope bytes), the keyring, candidate hosts and host rows as of the log size it is
evaluated at, the reference time, the policy (its bytes and its validated spec, with its acceptance
policy), the code that evaluates it, and the artifact store's answers for the artifacts it checked. The
log size itself is not an input (only what is read at it). The key below digests the rows, keyring,
hosts, policy and code; the store's answers and the *window* (the reference times, both ends included,
at which the acceptance filter decides every entry the same way: no staleness bound or GPU reset is
crossed, and no entry is stale, since that reason names the reference time) are recorded with the result
and checked before a remembered result is served, with the new reference time written into it.

So an append that touches what the verdict reads (a supersession, a revocation, a new probe of the
subject) changes the rows or keyring and misses; an append elsewhere changes only the size and the
log's clock and hits while the clock stays in the window; an envelope edited behind the log's back
changes its digest and misses; a changed policy file, or a changed ``ledger`` source file, misses. A hit
saves parsing, Ed25519 and the evaluation; the rows are still read and hashed.

The home's copy (``cache/verdicts/``) is what a fresh CLI process finds: each file carries a MAC (BLAKE3,
keyed) under a secret kept beside it (mode 0600), and a file that fails it, or cannot be read, is ignored.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import marshal
import os
import threading
from array import array
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import blake3

from ledger.canonical import canonical_bytes
from ledger.policy import snapshot as _snapshot

if TYPE_CHECKING:
    from ledger.policy.loader import LoadedPolicy
    from ledger.policy.port import PolicyLedger as Ledger

__all__ = [
    "MEMORY_ENTRIES",
    "clear",
    "get",
    "key_for",
    "load_parsed",
    "load_signatures",
    "put",
    "recall",
    "remember",
    "save_parsed",
    "save_signatures",
    "stamp",
]

FORMAT = b"evidence-ledger verdict cache v3"
MEMORY_ENTRIES = 32  # results kept in the process
HOME_ENTRIES = 64  # result files kept in a home (oldest removed first)
CACHE_DIR = ("cache", "verdicts")

_LOCK = threading.Lock()
_MEMORY: OrderedDict[bytes, bytes] = OrderedDict()
_CODE: list[bytes] = []
# reads remembered while the database is unchanged (``stamp``): by (repo id, label, args)
_STAMPED: OrderedDict[tuple[int, str, Any], tuple[Any, int, bytes, Any]] = OrderedDict()


def _forget() -> None:
    with _LOCK:
        _MEMORY.clear()
        _STAMPED.clear()
        _LOADED.clear()
        _LOADED_PARSED.clear()


def clear() -> None:
    """Forget the process's results and stop reading any home's results written before (tests):
    ``snapshot.clear_caches``, which changes the salt of every later key."""
    _snapshot.clear_caches()


_snapshot.CLEAR_HOOKS.append(_forget)


def code_files() -> list[Path]:
    """What a verdict runs besides the policy files: the source of the ``ledger`` package minus its
    adapters, and the data files it judges by (the failure-signature table, the GPU-fault catalogue) — an
    edit to any of them is another verdict, so it must not be answered from a result kept before it."""
    root = Path(__file__).resolve().parent.parent
    files = [f for folder in (root, root / "policy", root / "store") for f in sorted(folder.glob("*.py"))]
    # ledger.signatures.DEFAULT_SIGNATURES and ledger.gpu_faults.DEFAULT_CATALOGUE, without importing the
    # catalogue's module on the warm path (a test holds them equal)
    return [*files, root / "collectors" / "signatures.toml", root / "collectors" / "gpu_faults.toml"]


def _code_digest() -> bytes:
    """SHA-256 of ``code_files``, by name and bytes."""
    if not _CODE:
        h = hashlib.sha256()
        for f in code_files():
            h.update(f.name.encode() + b"\0")
            h.update(f.read_bytes())
            h.update(b"\0")
        _CODE.append(h.digest())
    return _CODE[0]


def _policy_identity(policy: LoadedPolicy) -> Any:
    acc = policy.acceptance_policy
    return {
        "digest": policy.digest,
        "path": str(policy.path),
        "spec": policy.spec.model_dump(mode="json"),
        "acceptance": _policy_identity(acc) if acc is not None else None,
    }


_POLICIES: OrderedDict[int, tuple[LoadedPolicy, bytes]] = OrderedDict()


def _policy_digest(policy: LoadedPolicy) -> bytes:
    """SHA-256 of ``_policy_identity``, remembered per policy object (a loaded policy is never changed)."""
    with _LOCK:
        got = _POLICIES.get(id(policy))
    if got is not None and got[0] is policy:
        return got[1]
    digest = hashlib.sha256(canonical_bytes(_policy_identity(policy))).digest()
    with _LOCK:
        _POLICIES[id(policy)] = (policy, digest)
        while len(_POLICIES) > MEMORY_ENTRIES:
            _POLICIES.popitem(last=False)
    return digest


def policy_files(policy: LoadedPolicy) -> tuple[str, ...]:
    """What a loaded policy is a pure function of, within one process (its code is fixed): the path and
    digest of its file and of its acceptance policy's. The same files loaded again give an equal tuple."""
    acc = policy.acceptance_policy
    return (str(policy.path), policy.digest, *((str(acc.path), acc.digest) if acc is not None else ()))


def key_for(raw: _snapshot.SnapshotRows, policy: LoadedPolicy) -> bytes:
    """The digest that names one evaluation (see the module docstring)."""
    h = hashlib.sha256(FORMAT)
    h.update(_snapshot.RESULT_SALT[0])
    h.update(_code_digest())
    head = {
        "policy": _policy_digest(policy).hex(),
        "subject": raw.subject,
        # every key record in full (its ``seq`` is the size it was replayed to: not an input)
        "keyring": sorted((r.to_json() for r in raw.keyring.keys.values()), key=lambda k: k["key_id"]),
        "candidates": raw.candidates,
        "hosts": raw.hosts,
        "kinds": list(raw.kinds),
        "rows": len(raw.rows),
        "host_rows": len(raw.host_rows),
    }
    h.update(canonical_bytes(head))
    host_digests = _snapshot.envelope_digests(raw.host_rows)
    for rows, digests in ((raw.rows, raw.row_digests()), (raw.host_rows, host_digests)):
        # the columns a verdict reads beside the envelope, with each envelope's length (unambiguous), and
        # the envelopes by the SHA-256 of each (the rows' computed once: the parse memo's keys too)
        h.update(_columns(rows))
        h.update(b"\0")
        h.update(hashlib.sha256(b"".join(digests)).hexdigest().encode())
    return h.digest()


def _columns(rows: list[tuple[Any, ...]]) -> bytes:
    """The rows' seq, id, kind, signer, log time and envelope length, column by column, one value a line
    (the seqs and lengths as 8-byte integers); repr'd instead when a text value holds a newline or NUL, or
    is not text (never in a valid log), so that different rows never give equal bytes."""
    n = len(rows)
    texts = [[r[i] for r in rows] for i in (1, 2, 3, 4)]
    try:
        numbers = array("q", [r[0] for r in rows] + [len(r[5]) for r in rows]).tobytes()
        joined = [("\n".join(col)).encode() for col in texts]
    except (TypeError, OverflowError, UnicodeEncodeError):
        joined = None
    if joined is None or any(j.count(b"\n") != max(0, n - 1) or b"\0" in j for j in joined):
        return b"repr\0" + repr([(r[0], r[1], r[2], r[3], r[4], len(r[5])) for r in rows]).encode()
    return b"cols\0" + numbers + b"\0" + b"\0".join(joined)


# --- reads remembered while the database is unchanged ---------------------------------------------------


Stamp = tuple[Any, Any, bytes]


def stamp(ledger: Ledger) -> Stamp | None:
    """The database's change counter, read *before* the reads it will vouch for, or None where the repo
    has none. ``ledger.reads.SqlitePolicyRepo`` reads SQLite's ``PRAGMA data_version`` on its own
    read-only connection: it changes whenever any other connection (of any process) commits, and that
    connection never writes, so an unchanged value means no row, index or key entry changed since.
    ``ledger.repo.LogRepo`` does the same on SQLite, and on PostgreSQL gives the server's WAL position
    (``LogRepo.data_version``)."""
    repo = ledger.repo
    version = getattr(repo, "data_version", None)
    if version is None:
        return None
    value = version()
    if value is None:
        return None
    return repo, value, _snapshot.RESULT_SALT[0]


def recall(st: Stamp | None, label: str, args: Any) -> Any:
    """What ``remember`` kept for (``label``, ``args``) under this very stamp, else None."""
    if st is None:
        return None
    with _LOCK:
        got = _STAMPED.get((id(st[0]), label, args))
    if got is None or got[0] is not st[0] or got[1] != st[1] or got[2] != st[2]:
        return None
    return got[3]


def remember(st: Stamp | None, label: str, args: Any, value: Any) -> None:
    """Keep ``value`` (never mutated by its readers) for as long as the database stays as ``st`` saw it."""
    if st is None or st[2] != _snapshot.RESULT_SALT[0]:
        return
    with _LOCK:
        _STAMPED[(id(st[0]), label, args)] = (st[0], st[1], st[2], value)
        _STAMPED.move_to_end((id(st[0]), label, args))
        while len(_STAMPED) > 4 * MEMORY_ENTRIES:
            _STAMPED.popitem(last=False)


def _folder(ledger: Ledger) -> Path | None:
    home = getattr(ledger, "home", None)
    path = getattr(home, "path", None)
    return Path(path).joinpath(*CACHE_DIR) if path is not None else None


def _mac(secret: bytes, *parts: bytes) -> bytes:
    """The 32-byte MAC of the concatenated ``parts`` under the home's secret: BLAKE3 in keyed mode (a MAC
    by design; 4-5x faster than HMAC-SHA256 over a 10 MB parsed-envelope file)."""
    h = blake3.blake3(key=secret)  # ``_secret`` gives only 32-byte secrets
    for part in parts:
        h.update(part)
    return h.digest()


SECRET_BYTES = 32  # the BLAKE3 key


def _secret(folder: Path, create: bool) -> bytes | None:
    """The home's MAC key (made on first use with ``create``), or None: none, unreadable, or not
    ``SECRET_BYTES`` long (damaged, or still being written by another process) — nothing is vouched for."""
    path = folder / ".secret"
    try:
        return _checked_secret(path.read_bytes())
    except FileNotFoundError:
        if not create:
            return None
    except OSError:
        return None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, os.urandom(SECRET_BYTES))
        finally:
            os.close(fd)
        return _checked_secret(path.read_bytes())
    except FileExistsError:
        try:
            return _checked_secret(path.read_bytes())
        except OSError:
            return None
    except OSError:
        return None


def _checked_secret(data: bytes) -> bytes | None:
    return data if len(data) == SECRET_BYTES else None


def get(ledger: Ledger, key: bytes) -> dict[str, Any] | None:
    """The remembered body (``result`` and ``artifacts``) for ``key``, or None."""
    with _LOCK:
        body = _MEMORY.get(key)
        if body is not None:
            _MEMORY.move_to_end(key)
    if body is None:
        body = _read_home(ledger, key)
        if body is None:
            return None
        _remember(key, body)
    try:
        out = json.loads(body)
    except ValueError:
        return None
    return out if isinstance(out, dict) else None


def _read_home(ledger: Ledger, key: bytes) -> bytes | None:
    folder = _folder(ledger)
    if folder is None:
        return None
    try:
        data = (folder / (key.hex() + ".json")).read_bytes()
    except OSError:
        return None
    secret = _secret(folder, create=False)
    mac, sep, body = data.partition(b"\n")
    if secret is None or not sep:
        return None
    want = _mac(secret, key, body).hex().encode()
    return body if hmac.compare_digest(mac, want) else None


def _remember(key: bytes, body: bytes) -> None:
    with _LOCK:
        _MEMORY[key] = body
        _MEMORY.move_to_end(key)
        while len(_MEMORY) > MEMORY_ENTRIES:
            _MEMORY.popitem(last=False)


def put(
    ledger: Ledger, key: bytes, result: dict[str, Any], artifacts: list[Any], window: tuple[str, str]
) -> None:
    """Remember ``result`` (without its checkpoint), the store answers it relied on and the reference
    times it holds at (ISO 8601, both ends included), in the process and, when the home can be written,
    in the home."""
    body = {"result": result, "artifacts": artifacts, "window": list(window)}
    _store(ledger, key, canonical_bytes(body))


def _writable(ledger: Ledger) -> tuple[Path, bytes] | None:
    """The home's cache folder and its secret (made on first use), or None where the home cannot hold one."""
    folder = _folder(ledger)
    if folder is None:
        return None
    secret = _secret(folder, create=True)
    return None if secret is None else (folder, secret)


def _replace(folder: Path, name: str, data: bytes) -> bool:
    """Write ``folder/name`` whole or not at all (a temporary file renamed over it); False if it failed."""
    tmp = folder / f".{name}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        tmp.write_bytes(data)
        os.replace(tmp, folder / name)
    except OSError:
        tmp.unlink(missing_ok=True)
        return False
    return True


def _store(ledger: Ledger, key: bytes, body: bytes) -> None:
    _remember(key, body)
    home = _writable(ledger)
    if home is None:
        return
    folder, secret = home
    mac = _mac(secret, key, body).hex().encode()
    if _replace(folder, key.hex() + ".json", mac + b"\n" + body):
        _prune(folder)


# --- signatures verified before, for fresh processes -----------------------------------------------------

SIGNATURES_FILE = "signatures.bin"
SIGNATURES_FORMAT = b"evidence-ledger verified signatures v1"
HOME_SIGNATURES = 100_000  # (envelope digest, public key) pairs kept in a home (6.4 MB; newest kept)
_PAIR = 64
_LOADED: set[Path] = set()  # the home files this process has read


def load_signatures(ledger: Ledger) -> None:
    """Take the signatures the home recorded as verified (``save_signatures``) into the process's memo
    (``snapshot.remember_verified``), once per process and home. A file that fails its MAC, is cut
    short or cannot be read is ignored: every signature is then verified again."""
    folder = _folder(ledger)
    if folder is None:
        return
    with _LOCK:
        if folder in _LOADED:
            return
        _LOADED.add(folder)
    body = _read_signatures(folder)
    if body:
        _snapshot.remember_verified(
            (body[i : i + 32], body[i + 32 : i + _PAIR]) for i in range(0, len(body), _PAIR)
        )


def _read_signatures(folder: Path) -> bytes:
    try:
        data = (folder / SIGNATURES_FILE).read_bytes()
    except OSError:
        return b""
    secret = _secret(folder, create=False)
    mac, body = data[:32], data[32:]
    if secret is None or len(mac) != 32 or len(body) % _PAIR:
        return b""
    return body if hmac.compare_digest(mac, _signatures_mac(secret, body)) else b""


def _signatures_mac(secret: bytes, body: bytes) -> bytes:
    return _mac(secret, SIGNATURES_FORMAT, _snapshot.RESULT_SALT[0], body)


def save_signatures(ledger: Ledger, pairs: list[tuple[bytes, bytes]]) -> None:
    """Record (envelope digest, raw public key) pairs whose Ed25519 signature just verified, so that a
    fresh process judging the same entries again (after an append elsewhere changed the log's size, so
    its result is not remembered) need not verify them again. Keyed by the SHA-256 of the stored bytes, as
    the process's memo: bytes edited behind the log's back miss it. The newest ``HOME_SIGNATURES`` pairs
    are kept; a concurrent writer's pairs may be lost (they are verified again), never wrong ones kept."""
    home = _writable(ledger) if pairs else None
    if home is None:
        return
    folder, secret = home
    new = {d: k for d, k in pairs if len(d) == 32 and len(k) == 32}
    old = _read_signatures(folder)
    kept = [
        old[i : i + _PAIR] for i in range(0, len(old), _PAIR) if old[i : i + 32] not in new
    ]  # the file's order is age: the newest last
    kept += [d + k for d, k in new.items()]
    body = b"".join(kept[-HOME_SIGNATURES:])
    _replace(folder, SIGNATURES_FILE, _signatures_mac(secret, body) + body)


# --- parsed envelopes, for fresh processes that judge a campaign again ---------------------------------

PARSED_FORMAT = b"evidence-ledger parsed envelopes v1"


def _parsed_path(folder: Path, subject: dict[str, str]) -> Path:
    name = hashlib.sha256(canonical_bytes(subject)).hexdigest()[:32]
    return folder / f"parsed-{name}.bin"


def _parsed_mac(secret: bytes, body: bytes) -> bytes:
    return _mac(secret, PARSED_FORMAT, _snapshot.RESULT_SALT[0], _code_digest(), body)


_LOADED_PARSED: set[tuple[Path, bytes]] = set()  # (home folder, subject file) pairs this process has read


def load_parsed(ledger: Ledger, subject: dict[str, str]) -> int:
    """Take the envelopes the home recorded as parsed for ``subject``'s last evaluation (``save_parsed``)
    into the process's memo (``snapshot.remember_parsed``), once per process; returns how many. Parsing
    is a pure function of the stored bytes (the key is their SHA-256) and of the code (in the MAC), so a
    campaign judged again after an append of its own parses only what is new. A file that fails its MAC,
    is cut short or cannot be read is ignored: everything is parsed again."""
    folder = _folder(ledger)
    secret = _secret(folder, create=False) if folder is not None else None
    if folder is None or secret is None:
        return 0
    path = _parsed_path(folder, subject)
    with _LOCK:
        if (folder, path.name.encode()) in _LOADED_PARSED:
            return 0
        _LOADED_PARSED.add((folder, path.name.encode()))
    try:
        data = path.read_bytes()
    except OSError:
        return 0
    mac, body = data[:32], data[32:]
    if len(mac) != 32 or not hmac.compare_digest(mac, _parsed_mac(secret, body)):
        return 0
    try:
        # authenticated above (MAC under the home's secret): written by this code, never by a client
        items = marshal.loads(body)  # noqa: S302
    except (EOFError, ValueError, TypeError):
        return 0
    if not isinstance(items, list) or not all(isinstance(i, tuple) and len(i) == 7 for i in items):
        return 0
    return _snapshot.remember_parsed(items)


def save_parsed(ledger: Ledger, subject: dict[str, str], items: list[tuple[Any, ...]]) -> None:
    """Record the parsed envelopes of ``subject``'s evaluation (``snapshot.parsed_items``): the file holds
    those of its latest evaluation only. A concurrent writer's file may win; never a wrong one."""
    home = _writable(ledger) if items else None
    if home is None:
        return
    folder, secret = home
    strings: dict[str, str] = {}
    shared = [(*i[:4], _shared_strings(i[4], strings), *i[5:]) for i in items]
    body = marshal.dumps(shared)
    _replace(folder, _parsed_path(folder, subject).name, _parsed_mac(secret, body) + body)


SHARED_STRING_CHARS = 64  # strings up to this long are written once per file and referenced after


def _shared_strings(value: Any, strings: dict[str, str]) -> Any:
    """``value`` (parsed JSON) rebuilt with one object for each distinct key and short string, so that
    ``marshal`` writes it once and refers back to it (thousands of statements repeat the same keys,
    kinds and subjects): the file is smaller and ``load_parsed`` builds 2-3 times fewer objects."""
    t = type(value)
    if t is dict:
        return {
            strings.setdefault(k, k) if type(k) is str else k: _shared_strings(v, strings)
            for k, v in value.items()
        }
    if t is list:
        return [_shared_strings(v, strings) for v in value]
    if t is str and len(value) <= SHARED_STRING_CHARS:
        return strings.setdefault(value, value)
    return value


def _prune(folder: Path) -> None:
    files = []
    for f in folder.glob("*.json"):
        try:
            files.append((f.stat().st_mtime_ns, f))
        except OSError:
            continue
    files.sort()
    for _, f in files[: max(0, len(files) - HOME_ENTRIES)]:
        f.unlink(missing_ok=True)
