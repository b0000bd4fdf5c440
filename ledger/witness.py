"""Witnesses: C2SP tlog-cosignature (cosignature/v1, Ed25519), the tlog-witness add-checkpoint request,
and a trust policy (the Sigsum policy form, with signed-note verifier keys) to judge cosigned checkpoints by.

Pure: bytes and keys in, lines, notes and problems out; no I/O but ``submit`` (one stdlib HTTP request).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import http.client
import struct
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ledger.errors import ConfigError, LedgerError, ProofError, RemoteUnavailableError, SignatureError
from ledger.log import Checkpoint, parse_checkpoint, parse_verifier_key
from ledger.signing import PublicKey, SigningKey

__all__ = [
    "COSIGNATURE_HEADER",
    "COSIGNATURE_KEY_TYPE",
    "MAX_PROOF_LINES",
    "SIZE_MEDIA_TYPE",
    "AddCheckpoint",
    "PolicyWitness",
    "TrustPolicy",
    "WitnessReply",
    "add_cosignatures",
    "check_cosigned",
    "cosign",
    "cosignature_key_hash",
    "cosigned_message",
    "format_add_checkpoint",
    "load_trust_policy",
    "note_body",
    "parse_add_checkpoint",
    "parse_trust_policy",
    "parse_witness_vkey",
    "request_cosignature",
    "submit",
    "verify_cosignature",
    "witness_vkey",
]

COSIGNATURE_HEADER = "cosignature/v1"
COSIGNATURE_KEY_TYPE = 0x04  # tlog-cosignature: the Ed25519 cosignature key id algorithm byte
SIZE_MEDIA_TYPE = "text/x.tlog.size"  # tlog-witness: the 409 body (the witness's latest cosigned size)
MAX_PROOF_LINES = 63  # tlog-witness: a client sends at most 63 consistency proof lines
_DASH = "\u2014"


# --- cosignature/v1 ------------------------------------------------------------------------------------


def _check_name(name: str) -> None:
    if not name or "+" in name or any(c.isspace() for c in name):
        raise ConfigError(f"{name!r} cannot be a signed-note key name (no spaces or '+')")


def cosignature_key_hash(name: str, public: PublicKey) -> bytes:
    """tlog-cosignature: SHA-256(name || '\\n' || 0x04 || Ed25519 public key)[:4]."""
    return hashlib.sha256(name.encode() + b"\n" + bytes([COSIGNATURE_KEY_TYPE]) + public.raw).digest()[:4]


def witness_vkey(name: str, public: PublicKey) -> str:
    """A cosigner's verifier key: ``<name>+<hex key hash>+<base64(0x04 || public key)>``."""
    _check_name(name)
    blob = base64.b64encode(bytes([COSIGNATURE_KEY_TYPE]) + public.raw).decode()
    return f"{name}+{cosignature_key_hash(name, public).hex()}+{blob}"


def parse_witness_vkey(vkey: str) -> tuple[str, PublicKey]:
    """(name, public key) of a cosignature/v1 verifier key; ``ConfigError`` unless it is one whose key hash
    matches its name and key."""
    parts = vkey.strip().split("+", 2)
    if len(parts) != 3:
        raise ConfigError(f"{vkey!r} is not a verifier key <name>+<hex key hash>+<base64 key>")
    name, hash_hex, blob_b64 = parts
    try:
        blob = base64.b64decode(blob_b64, validate=True)
        want = bytes.fromhex(hash_hex)
    except ValueError as e:
        raise ConfigError(f"malformed verifier key {vkey!r}: {e}") from e
    if len(blob) != 33 or blob[0] != COSIGNATURE_KEY_TYPE:
        raise ConfigError(f"verifier key {name!r} is not a cosignature/v1 (type 0x04) Ed25519 key")
    pub = PublicKey(blob[1:])
    _check_name(name)
    if cosignature_key_hash(name, pub) != want:
        raise ConfigError(f"verifier key {name!r}: its hash does not match its name and key")
    return name, pub


def note_body(note: str) -> str:
    """The body of a signed note (through its last newline), without the signature lines."""
    body, sep, _ = note.partition("\n\n")
    if not sep:
        raise ProofError("signed note has no signature block")
    return body + "\n"


def cosigned_message(body: str, timestamp: int) -> bytes:
    """tlog-cosignature: ``cosignature/v1\\ntime <unix>\\n`` followed by the whole checkpoint body."""
    if not 0 <= timestamp < 2**63:
        raise ProofError(f"cosignature timestamp {timestamp} out of range")
    return f"{COSIGNATURE_HEADER}\ntime {timestamp}\n".encode() + body.encode()


def cosign(note_or_body: str, key: SigningKey, name: str, timestamp: int) -> str:
    """A cosignature line (``— <name> base64(key hash || u64 timestamp || Ed25519 signature)\\n``)."""
    _check_name(name)
    body = note_body(note_or_body) if "\n\n" in note_or_body else note_or_body
    sig = key.sign(cosigned_message(body, timestamp))
    blob = cosignature_key_hash(name, key.public) + struct.pack(">Q", timestamp) + sig
    return f"{_DASH} {name} {base64.b64encode(blob).decode()}\n"


def _signature_lines(note: str) -> list[str]:
    _, sep, sigs = note.partition("\n\n")
    return [line for line in sigs.splitlines() if line] if sep else []


def verify_cosignature(note: str, name: str, public: PublicKey) -> int | None:
    """The timestamp of a valid cosignature by ``name``/``public`` on ``note``; None when the note carries
    no line by that key; ``ProofError`` when its line is there and does not verify."""
    body = note_body(note)
    want = cosignature_key_hash(name, public)
    for line in _signature_lines(note):
        parts = line.split(" ")
        if len(parts) != 3 or parts[0] != _DASH or parts[1] != name:
            continue
        try:
            blob = base64.b64decode(parts[2], validate=True)
        except (ValueError, binascii.Error):
            continue
        if blob[:4] != want:
            continue
        if len(blob) != 4 + 8 + 64:
            raise ProofError(f"cosignature by {name} is not a timestamped Ed25519 signature")
        (timestamp,) = struct.unpack(">Q", blob[4:12])
        try:
            public.verify(blob[12:], cosigned_message(body, timestamp))
        except SignatureError as e:
            raise ProofError(f"cosignature by {name} does not verify") from e
        return int(timestamp)
    return None


def add_cosignatures(note: str, lines: Sequence[str]) -> str:
    """The note with signature ``lines`` appended (each once, in the order given)."""
    have = set(_signature_lines(note))
    out = note if note.endswith("\n") else note + "\n"
    for line in lines:
        text = line.rstrip("\n")
        if text and text not in have:
            out += text + "\n"
            have.add(text)
    return out


# --- tlog-witness add-checkpoint -----------------------------------------------------------------------


@dataclass(frozen=True)
class AddCheckpoint:
    """A parsed add-checkpoint request body: the old size, the consistency proof and the checkpoint note."""

    old_size: int
    proof: list[bytes]
    note: str
    origin: str
    size: int
    root: bytes


class MalformedRequest(ValueError):
    """An add-checkpoint body that is not one (answered 400)."""


def _decimal(text: str, what: str) -> int:
    if not text.isascii() or not text.isdigit() or (len(text) > 1 and text[0] == "0"):
        raise MalformedRequest(f"{what} {text!r} is not a decimal without leading zeroes")
    return int(text)


def parse_add_checkpoint(data: bytes) -> AddCheckpoint:
    """Parse an add-checkpoint body (``old N``, base64 proof lines, an empty line, the checkpoint);
    ``MalformedRequest`` for anything else."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise MalformedRequest("the body is not UTF-8") from e
    head, sep, note = text.partition("\n\n")
    if not sep:
        raise MalformedRequest("the body has no empty line before the checkpoint")
    lines = head.split("\n")
    if not lines[0].startswith("old "):
        raise MalformedRequest("the body does not start with an `old <size>` line")
    old = _decimal(lines[0][4:], "old size")
    proof_lines = lines[1:]
    if len(proof_lines) > MAX_PROOF_LINES:
        raise MalformedRequest(f"{len(proof_lines)} consistency proof lines (at most {MAX_PROOF_LINES})")
    proof: list[bytes] = []
    for line in proof_lines:
        try:
            h = base64.b64decode(line, validate=True)
        except (ValueError, binascii.Error) as e:
            raise MalformedRequest(f"proof line {line!r} is not base64") from e
        if len(h) != 32:
            raise MalformedRequest(f"proof line {line!r} is not a 32-byte hash")
        proof.append(h)
    body, sep2, sigs = note.partition("\n\n")
    if not sep2 or not sigs.strip():
        raise MalformedRequest("the checkpoint carries no signature lines")
    parts = body.split("\n")
    if len(parts) < 3 or not parts[0]:
        raise MalformedRequest("the checkpoint needs an origin, a size and a root hash")
    size = _decimal(parts[1], "checkpoint size")
    try:
        root = base64.b64decode(parts[2], validate=True)
    except (ValueError, binascii.Error) as e:
        raise MalformedRequest("the checkpoint root is not base64") from e
    if len(root) != 32:
        raise MalformedRequest("the checkpoint root is not a 32-byte hash")
    return AddCheckpoint(old, proof, note, parts[0], size, root)


def format_add_checkpoint(old_size: int, proof: Sequence[bytes], note: str) -> bytes:
    """The add-checkpoint request body for ``note`` with the consistency proof from ``old_size``."""
    lines = [f"old {old_size}", *(base64.b64encode(h).decode() for h in proof)]
    return ("\n".join(lines) + "\n\n" + note).encode()


@dataclass(frozen=True)
class WitnessReply:
    status: int
    body: str
    content_type: str


def submit(url: str, body: bytes, *, timeout: float) -> WitnessReply:
    """POST ``body`` to ``<url>/add-checkpoint``; the reply, whatever its status. ``OSError`` when the
    witness cannot be reached."""
    target = url.rstrip("/") + "/add-checkpoint"
    if not target.startswith(("http://", "https://")):
        raise OSError(f"witness URL {url!r} is not http(s)")
    req = urllib.request.Request(target, data=body, method="POST")  # noqa: S310 - http(s) checked above
    req.add_header("Content-Type", "text/plain; charset=utf-8")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310
            return WitnessReply(
                resp.status, resp.read().decode("utf-8", "replace"), resp.headers.get_content_type()
            )
    except urllib.error.HTTPError as e:
        return WitnessReply(e.code, e.read().decode("utf-8", "replace"), e.headers.get_content_type())
    except (ValueError, http.client.HTTPException) as e:  # a bad URL, a broken reply: unreachable too
        raise OSError(f"{type(e).__name__}: {e}") from e


def request_cosignature(
    url: str,
    vkey: str,
    checkpoint: Checkpoint,
    last_size: int,
    proof_for: Callable[[int], Sequence[bytes]],
    *,
    timeout: float,
) -> str:
    """Ask the witness at ``url`` to cosign ``checkpoint`` with the consistency proof from the size it last
    cosigned (``last_size``, as far as the log knows; a 409 names the witness's own and is retried once
    from it). The verified cosignature line; ``RemoteUnavailableError`` when the witness is down or
    refuses, ``ProofError`` when what it answers is no valid cosignature by ``vkey``."""
    name, pub = parse_witness_vkey(vkey)
    old = last_size
    for attempt in (1, 2):
        if old > checkpoint.size:
            raise RemoteUnavailableError(
                f"witness {name} cosigned size {old}, beyond the checkpoint of size {checkpoint.size}"
            )
        body = format_add_checkpoint(old, proof_for(old) if old else [], checkpoint.note)
        try:
            reply = submit(url, body, timeout=timeout)
        except OSError as e:
            raise RemoteUnavailableError(f"witness {name} at {url} is unreachable: {e}") from e
        if reply.status == 409 and reply.content_type == SIZE_MEDIA_TYPE and attempt == 1:
            try:
                theirs = _decimal(reply.body.removesuffix("\n"), "witness size")
            except MalformedRequest as e:
                raise RemoteUnavailableError(f"witness {name} answered 409 with {reply.body!r}") from e
            if theirs != old:
                old = theirs
                continue
        if reply.status != 200:
            first = reply.body.strip().split("\n", 1)[0][:200]
            raise RemoteUnavailableError(
                f"witness {name} refused the checkpoint: HTTP {reply.status} {first}"
            )
        lines = [line for line in reply.body.split("\n") if line.startswith(f"{_DASH} {name} ")]
        for line in lines:
            if verify_cosignature(add_cosignatures(checkpoint.note, [line]), name, pub) is not None:
                return line + "\n"
        raise ProofError(f"witness {name} answered no cosignature by its key")
    raise RemoteUnavailableError(f"witness {name} keeps answering 409")  # pragma: no cover - loop returns


# --- trust policy ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PolicyWitness:
    name: str  # the policy's name for it
    key_name: str  # the signed-note key name its cosignatures carry (from its vkey)
    public: PublicKey
    url: str | None = None


@dataclass(frozen=True)
class PolicyGroup:
    name: str
    k: int
    members: tuple[str, ...]


@dataclass
class TrustPolicy:
    """Logs (their verifier keys), witnesses, groups and the quorum: the Sigsum policy form, with C2SP
    signed-note verifier keys where Sigsum writes hex keys (our notes' key hashes commit the key name)."""

    logs: list[tuple[str, PublicKey, str | None]] = field(default_factory=list)
    witnesses: dict[str, PolicyWitness] = field(default_factory=dict)
    groups: dict[str, PolicyGroup] = field(default_factory=dict)
    quorum: str = "none"
    source: str = "policy"

    def log_for(self, origin: str) -> tuple[str, PublicKey] | None:
        for name, pub, _ in self.logs:
            if name == origin:
                return name, pub
        return None


def parse_trust_policy(text: str, source: str = "policy") -> TrustPolicy:
    """Parse a trust policy: ``log <vkey> [url]``, ``witness NAME <vkey> [url]``,
    ``group NAME all|any|K MEMBER…``, ``quorum NAME|none``; ``#`` comments. A name is defined before it is
    used; exactly one quorum line. ``ConfigError`` naming the line for anything else."""
    pol = TrustPolicy(source=source)
    quorums = 0
    seen_keys: set[bytes] = set()

    def err(n: int, msg: str) -> ConfigError:
        return ConfigError(
            f"{source}:{n}: {msg}", hint="lines: log, witness, group, quorum (docs/INTEROP.md)"
        )

    for n, raw in enumerate(text.split("\n"), 1):
        line = raw.strip(" \t\r")
        if not line or line.startswith("#"):
            continue
        items = line.replace("\t", " ").split()
        kw, args = items[0], items[1:]
        if kw == "log":
            if len(args) not in (1, 2):
                raise err(n, "`log <vkey> [<url>]`")
            try:
                name, pub = parse_verifier_key(args[0])
            except LedgerError as e:
                raise err(n, f"log key: {e.message}") from e
            if pub.raw in seen_keys:
                raise err(n, "duplicate key")
            seen_keys.add(pub.raw)
            pol.logs.append((name, pub, args[1] if len(args) == 2 else None))
        elif kw == "witness":
            if len(args) not in (2, 3):
                raise err(n, "`witness <name> <vkey> [<url>]`")
            name = args[0]
            if name == "none" or name in pol.witnesses or name in pol.groups:
                raise err(n, f"name {name!r} is already defined")
            try:
                key_name, pub = parse_witness_vkey(args[1])
            except LedgerError as e:
                raise err(n, f"witness {name}: {e.message}") from e
            if pub.raw in seen_keys:
                raise err(n, "duplicate key")
            seen_keys.add(pub.raw)
            pol.witnesses[name] = PolicyWitness(name, key_name, pub, args[2] if len(args) == 3 else None)
        elif kw == "group":
            if len(args) < 3:
                raise err(n, "`group <name> all|any|<k> <member>...`")
            name, kk, members = args[0], args[1], args[2:]
            if name == "none" or name in pol.witnesses or name in pol.groups:
                raise err(n, f"name {name!r} is already defined")
            for m in members:
                if m not in pol.witnesses and m not in pol.groups:
                    raise err(n, f"group {name}: member {m!r} is not defined on an earlier line")
            if len(set(members)) != len(members):
                raise err(n, f"group {name}: a member is listed twice")
            if kk == "all":
                k = len(members)
            elif kk == "any":
                k = 1
            elif kk.isascii() and kk.isdigit():
                k = int(kk)
            else:
                raise err(n, f"group {name}: threshold {kk!r} is not all, any or a number")
            if not 1 <= k <= len(members):
                raise err(n, f"group {name}: threshold {k} of {len(members)} members cannot be met")
            pol.groups[name] = PolicyGroup(name, k, tuple(members))
        elif kw == "quorum":
            if len(args) != 1:
                raise err(n, "`quorum <name>`")
            quorums += 1
            if quorums > 1:
                raise err(n, "a policy has exactly one quorum line")
            q = args[0]
            if q != "none" and q not in pol.witnesses and q not in pol.groups:
                raise err(n, f"quorum {q!r} is not defined on an earlier line")
            pol.quorum = q
        else:
            raise err(n, f"unknown line {kw!r}")
    if not pol.logs:
        raise ConfigError(f"{source}: no `log` line (the log key the checkpoint is signed by)")
    if quorums != 1:
        raise ConfigError(f"{source}: no `quorum` line (write `quorum none` to require no witness)")
    return pol


def load_trust_policy(path: str) -> TrustPolicy:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ConfigError(f"cannot read trust policy {path}: {e.strerror}") from e
    except UnicodeDecodeError as e:
        raise ConfigError(f"trust policy {path} is not UTF-8") from e
    return parse_trust_policy(text, source=path)


def check_cosigned(note: str, policy: TrustPolicy) -> tuple[Checkpoint | None, list[str]]:
    """Judge a checkpoint note by a trust policy: signed by one of its logs, and the quorum of witness
    cosignatures valid. Returns the checkpoint (None when the log signature fails) and the problems, each
    naming the witness or group that is missing or invalid; no problems means accepted."""
    origin = note.split("\n", 1)[0]
    log = policy.log_for(origin)
    if log is None:
        return None, [f"the checkpoint's origin {origin!r} is not a log of the trust policy {policy.source}"]
    try:
        cp = parse_checkpoint(note, *log)
    except LedgerError as e:
        return None, [f"log signature: {e.message}"]
    acted: dict[str, bool] = {}
    problems: list[str] = []
    for w in policy.witnesses.values():
        try:
            ts = verify_cosignature(note, w.key_name, w.public)
        except LedgerError as e:
            acted[w.name] = False
            problems.append(f"witness {w.name} ({w.key_name}): invalid cosignature ({e.message})")
            continue
        acted[w.name] = ts is not None
        if ts is None:
            problems.append(f"witness {w.name} ({w.key_name}): no cosignature")
    for g in policy.groups.values():
        acted[g.name] = sum(acted[m] for m in g.members) >= g.k
    if policy.quorum == "none" or acted[policy.quorum]:
        return cp, []
    q = policy.groups.get(policy.quorum)
    need = (
        f"quorum {q.name} needs {q.k} of {len(q.members)} ({', '.join(q.members)})"
        if q is not None
        else f"quorum needs witness {policy.quorum}"
    )
    return cp, [f"{need}: not met", *problems]
