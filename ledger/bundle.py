"""Offline reviewer bundles: one file a reviewer takes away and re-checks with no ledger, network or database.

``create_bundle`` writes a ZIP (stdlib ``zipfile``, fixed timestamps, so the same ledger gives the same
bytes) whose ``manifest.json`` (RFC 8785, ``ledger.canonical``) names everything else in it:

* every entry the verdict reads through the policy port as the log stood at one size — the subject's
  entries, the entries they reference and that reference them, the host's kernel logs — plus every
  ``key.*`` entry below that size (the keyring) and the last entry (its ``logged_at`` is the reference
  time): each as its stored DSSE envelope, its log record and an inclusion proof against one checkpoint;
* the signed checkpoint (the stored note, cosignature lines included), the log's verifier key and the
  keys the keyring holds;
* the artifacts those entries name (``--redact NAME``: only the digest, flagged ``redacted``);
* the policy bytes and its acceptance policy's, with their digests, the digests of the vocabularies the
  evaluation reads (GPU-fault catalogue, failure signatures) and the verdict result.

``verify_bundle`` checks all of it and re-derives the verdict over ``BundleLedger`` — the policy port
implemented in memory over the bundled rows — and requires the canonical result bytes to be equal. Each
problem carries a stable code (``BundleProblem``). A bundle proves that its entries are in the log;
the log key signs the manifest (``manifest.sig``), so a bundle re-made from fewer members is refused; it
cannot prove that the log's operator left no entry of the subject out (see docs/INTEROP.md).
"""

from __future__ import annotations

import io
import re
import tempfile
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from ledger.canonical import canonical_bytes, parse_canonical
from ledger.entries import ArtifactRef
from ledger.errors import (
    ArtifactCorruptError,
    ArtifactMissingError,
    BundleError,
    EntryNotFoundError,
    InputError,
    IntegrityError,
    LedgerError,
    NotAvailableError,
)
from ledger.gpu_faults import DEFAULT_CATALOGUE
from ledger.hashing import Digest, blake3_hex, parse_digest
from ledger.keyring import Keyring
from ledger.log import (
    Checkpoint,
    entry_id_of,
    parse_checkpoint,
    parse_record,
    parse_verifier_key,
    record_leaf,
    verify_inclusion,
)
from ledger.signatures import DEFAULT_SIGNATURES
from ledger.signing import Envelope, PublicKey, SigningKey, b64d, b64e, pae, parse_envelope
from ledger.store.base import StoredArtifact
from ledger.trust import replay_keys

if TYPE_CHECKING:
    from ledger.logged import LoggedEntry
    from ledger.policy.loader import LoadedPolicy
    from ledger.policy.port import PolicyLedger
    from ledger.policy.snapshot import Evidence
    from ledger.service import Ledger
    from ledger.witness import TrustPolicy

__all__ = [
    "BUNDLE_FORMAT",
    "BundleLedger",
    "BundleProblem",
    "BundleReport",
    "MemoryRepo",
    "MemoryStore",
    "bundle_report",
    "create_bundle",
    "open_manifest",
    "report_markdown",
    "scrub_private_paths",
    "sign_manifest",
    "verify_bundle",
]

BUNDLE_FORMAT = "evidence-ledger/bundle/v1"
MANIFEST = "manifest.json"
# the log's signature over the manifest's bytes (DSSE PAE under its own payload type, never an entry's):
# a bundle re-made from fewer members, its verdict.json re-derived to match, is no longer the log's bundle
MANIFEST_SIGNATURE = "manifest.sig"
MANIFEST_PAYLOAD_TYPE = "application/vnd.evidence-ledger.bundle-manifest+json"
CHECKPOINT_FILE = "checkpoint.txt"
VERDICT_FILE = "verdict.json"
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # fixed member times: the same ledger gives the same bundle bytes
_CHUNK = 1 << 20


class BundleProblem(StrEnum):
    """The stable codes ``ledger bundle verify`` names a problem with (docs/INTEROP.md lists them)."""

    MEMBER_MISSING = "bundle-member-missing"  # the manifest names a file the bundle lacks
    MEMBER_DUPLICATE = "bundle-member-duplicate"  # two ZIP members have one name (which one is meant?)
    MEMBER_UNLISTED = "bundle-member-unlisted"  # a ZIP member the manifest does not name
    ENTRY_DUPLICATE = "bundle-entry-duplicate"  # the manifest lists one entry (id or seq) twice
    LOG_KEY = "bundle-log-key"  # the bundled verifier key is unreadable, or not the one given
    CHECKPOINT_SIGNATURE = "bundle-checkpoint-signature"  # the note does not verify with the log key
    CHECKPOINT_MISMATCH = "bundle-checkpoint-mismatch"  # the note is not the checkpoint the manifest names
    ENVELOPE_DIGEST = "bundle-envelope-digest"  # the envelope's BLAKE3 is not its entry id
    ENVELOPE_SIGNATURE = "bundle-envelope-signature"  # DSSE signature bad, or signer not in the keyring
    RECORD_MISMATCH = "bundle-record-mismatch"  # the log record is not the envelope's, or at another index
    INCLUSION_PROOF = "bundle-inclusion-proof"  # the proof does not lead to the checkpoint's root
    KEYS_DIFFER = "bundle-keys-differ"  # the manifest's keys are not the keyring the key entries give
    ARTIFACT_DIGEST = "bundle-artifact-digest"  # the bytes do not hash to the digest (or have another size)
    ARTIFACT_ABSENT = "bundle-artifact-absent"  # an artifact an entry names is neither bundled nor redacted
    ARTIFACT_REDACTED = "bundle-artifact-redacted"  # the policy checks an artifact whose bytes are redacted
    POLICY_DIGEST = "bundle-policy-digest"  # the policy bytes are not the digest the manifest/verdict name
    POLICY_UNLOADABLE = "bundle-policy-unloadable"  # the policy bytes do not load
    VOCABULARY_DIFFERS = "bundle-vocabulary-differs"  # this verifier's catalogue/signature table differ
    ENTRY_ABSENT = "bundle-entry-absent"  # an entry the verdict names is not in the bundle
    VERDICT_DIGEST = "bundle-verdict-digest"  # the bundled result is not the digest the manifest names
    VERDICT_DIFFERS = "bundle-verdict-differs"  # the re-derived verdict is not byte-for-byte the bundled one
    REDERIVE_FAILED = "bundle-rederive-failed"  # the verdict could not be re-derived at all
    COSIGNATURE_QUORUM = "bundle-cosignature-quorum"  # the checkpoint misses the trust policy's quorum
    MANIFEST_SIGNATURE = "bundle-manifest-signature"  # the manifest is not signed by the log key


# the vocabularies a verdict reads besides the policy: the re-derivation uses the verifier's own copies
_VOCABULARIES: dict[str, Path] = {"gpu-faults": DEFAULT_CATALOGUE, "signatures": DEFAULT_SIGNATURES}


def _vocabulary_digests() -> dict[str, str]:
    out = {}
    for name, path in _VOCABULARIES.items():
        try:
            out[name] = "blake3:" + blake3_hex(path.read_bytes())
        except OSError as e:
            raise IntegrityError(f"cannot read {path}: {e.strerror}") from e
    return out


def _key_list(ring: Keyring) -> list[dict[str, Any]]:
    """The keys of a keyring as the manifest lists them (sorted by key id)."""
    out: list[dict[str, Any]] = [
        {"key_id": str(r.key_id), "name": r.name, "public_key": r.public.b64, "roles": sorted(r.roles)}
        for r in ring.keys.values()
    ]
    return sorted(out, key=lambda k: str(k["key_id"]))


def _entry_file(seq: int, part: str) -> str:
    return f"entries/{seq:012d}.{part}"


def _verdict_ids(result: dict[str, Any]) -> set[str]:
    """Every entry id the verdict names: used, gate evidence, rejected (and what rejected them), not
    credited, the manifest's sources."""
    ids: set[str] = set(result.get("used", []))
    for g in result.get("gates", []):
        ids.update(g.get("evidence", []))
    for r in result.get("rejected", []):
        ids.add(r["entry"])
        if r.get("by"):
            ids.add(r["by"])
    ids.update(n["entry"] for n in result.get("not_credited", []))
    ids.update(n["entry"] for n in result.get("unjudged", []))
    ids.update(result.get("manifest", {}).get("sources", []))
    return ids


# --- create -------------------------------------------------------------------------------------------


def _zip_write(zf: zipfile.ZipFile, name: str, data: bytes) -> None:
    info = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    zf.writestr(info, data)


def _zip_stream(zf: zipfile.ZipFile, name: str, stream: BinaryIO) -> None:
    info = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    with zf.open(info, "w", force_zip64=True) as dst:
        while chunk := stream.read(_CHUNK):
            dst.write(chunk)


def _stored_note(ledger: Ledger, size: int) -> str | None:
    """The published checkpoint note at ``size`` (with whatever cosignature lines it carries), or None."""
    with ledger.repo.read() as conn:
        for row in ledger.repo.checkpoints(conn):
            if int(row.size) == size and getattr(row, "format", 2) != 1:
                return str(row.note)
    return None


def _judged_entries(ledger: PolicyLedger, subject: dict[str, str], size: int) -> list[Evidence]:
    """The entries the verdict about ``subject`` judges at ``size`` (its campaign's, whatever else the
    subject names — ``judged_scope`` — and the host entries read for it): the one reading of which
    bundled entries need their artifacts, by ``create_bundle`` over the ledger and by ``verify_bundle``
    over the bundle's own rows. Every other bundled entry (a ``key.*`` entry, the last entry, whose
    ``logged_at`` is the reference time) is bundled for its log record and proof alone: its artifacts
    belong to another subject and stay out of the bundle."""
    from ledger.policy.snapshot import snapshot_from_rows
    from ledger.policy.verdict import subject_snapshot_rows

    raw = subject_snapshot_rows(ledger, subject, size, None)
    snap, _ = snapshot_from_rows(ledger, raw)
    return list(snap.entries)


def sign_manifest(manifest: bytes, log_key: SigningKey) -> bytes:
    """``manifest.sig``: the log key's signature over the manifest's bytes (DSSE PAE under
    ``MANIFEST_PAYLOAD_TYPE``, which no ledger entry carries), as canonical JSON."""
    sig = log_key.sign(pae(MANIFEST_PAYLOAD_TYPE, manifest))
    return canonical_bytes({"keyid": log_key.key_id, "payloadType": MANIFEST_PAYLOAD_TYPE, "sig": b64e(sig)})


def create_bundle(
    ledger: Ledger,
    subject: dict[str, str],
    policy: LoadedPolicy,
    out: BinaryIO,
    *,
    redact: Sequence[str] = (),
    at_size: int | None = None,
) -> dict[str, Any]:
    """Write the reviewer bundle of ``subject`` under ``policy`` (the log at ``at_size``, default now) to
    ``out``; returns the manifest. ``redact``: artifact names (or digests) bundled as digests only."""
    from ledger.policy.verdict import evaluate, result_digest

    n = ledger.size() if at_size is None else at_size
    result = evaluate(ledger, subject, policy, at_size=n)
    judged = _judged_entries(ledger, subject, n)
    seqs = {e.seq for e in judged}
    with ledger.repo.read() as conn:
        seqs.update(seq for seq, _ in ledger.repo.key_rows(conn, 0, n))
    seqs.add(n - 1)  # its logged_at is the verdict's reference time
    tree = ledger.tree()
    root = tree.root(n)
    if root.hex() != result["checkpoint"]["root"]:
        raise IntegrityError(f"the log's root at size {n} changed while the bundle was made")
    note = _stored_note(ledger, n) or ledger.signed_checkpoint(size=n).note

    entries: list[dict[str, Any]] = []
    members: list[tuple[str, bytes]] = []
    ids: set[str] = set()
    with ledger.repo.read() as conn:
        for seq in sorted(seqs):
            entry = ledger.get_seq(seq)
            record = ledger.repo.record_at(conn, seq)
            if record is None:
                raise IntegrityError(f"entry at seq {seq} has no log record (run `ledger migrate`)")
            ids.add(entry.entry_id)
            entries.append(
                {
                    "seq": seq,
                    "id": entry.entry_id,
                    "kind": entry.kind,
                    "envelope": _entry_file(seq, "envelope.json"),
                    "record": _entry_file(seq, "record.json"),
                    "proof": [h.hex() for h in tree.inclusion_proof(seq, n)],
                }
            )
            members.append((_entry_file(seq, "envelope.json"), bytes(entry.envelope)))
            members.append((_entry_file(seq, "record.json"), record))
    missing = sorted(_verdict_ids(result) - ids)
    if missing:
        raise IntegrityError(f"the verdict names entries the snapshot lacks: {', '.join(missing)}")

    wanted = set(redact)
    artifacts: dict[str, dict[str, Any]] = {}
    for e in judged:  # only the judged entries' artifacts: the others are bundled for their record alone
        for a in e.artifacts:
            if not a.get("stored", True):
                continue
            item = artifacts.setdefault(
                a["digest"], {"digest": a["digest"], "size": a["size"], "names": [], "redacted": False}
            )
            if a["name"] not in item["names"]:
                item["names"].append(a["name"])
    matched: set[str] = set()
    for item in artifacts.values():
        hits = wanted & ({item["digest"], *item["names"]})
        if hits:
            item["redacted"] = True
            matched |= hits
    unknown = sorted(wanted - matched)
    if unknown:
        raise InputError(
            f"--redact {', '.join(unknown)}: no artifact of the bundle has that name or digest",
            hint="names: " + ", ".join(sorted({nm for a in artifacts.values() for nm in a["names"]})),
        )
    for item in artifacts.values():
        item["names"].sort()
        item["file"] = None if item["redacted"] else "artifacts/" + parse_digest(item["digest"]).hex

    ring = ledger.keyring(at_size=n)
    pol = policy.acceptance_policy
    verdict_bytes = canonical_bytes(result)
    manifest: dict[str, Any] = {
        "format": BUNDLE_FORMAT,
        "subject": dict(subject),
        "log": {"origin": ledger.origin, "verifier_key": ledger.verifier_key()},
        "checkpoint": {"size": n, "root": root.hex(), "file": CHECKPOINT_FILE},
        "keys": _key_list(ring),
        "entries": entries,
        "artifacts": sorted(artifacts.values(), key=lambda a: a["digest"]),
        "policy": {
            "name": policy.name,
            "digest": policy.digest,
            "file": f"policy/{policy.name}.toml",
            "acceptance": (
                {"name": pol.name, "digest": pol.digest, "file": f"policy/{pol.name}.toml"}
                if pol is not None
                else None
            ),
        },
        "vocabularies": _vocabulary_digests(),
        "verdict": {"file": VERDICT_FILE, "result_digest": result_digest(result)},
    }
    manifest_bytes = canonical_bytes(manifest)
    with zipfile.ZipFile(out, "w") as zf:
        _zip_write(zf, MANIFEST, manifest_bytes)
        _zip_write(
            zf, MANIFEST_SIGNATURE, sign_manifest(manifest_bytes, ledger.signing_key(ledger.log_key_name))
        )
        _zip_write(zf, CHECKPOINT_FILE, note.encode())
        _zip_write(zf, VERDICT_FILE, verdict_bytes)
        _zip_write(zf, manifest["policy"]["file"], policy.data)
        if pol is not None:
            _zip_write(zf, manifest["policy"]["acceptance"]["file"], pol.data)
        for name, data in members:
            _zip_write(zf, name, data)
        for item in manifest["artifacts"]:
            if item["file"] is not None:
                with ledger.store.open_verified(parse_digest(item["digest"])) as f:
                    _zip_stream(zf, item["file"], f)
    return manifest


# --- the policy port, in memory ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Row:
    seq: int
    entry_id: str
    kind: str
    signer: str
    logged_at: str
    envelope: bytes
    subject: dict[str, str]
    refs: tuple[tuple[str, str], ...]

    def evidence(self) -> tuple[Any, ...]:
        return (self.seq, self.entry_id, self.kind, self.signer, self.logged_at, self.envelope)


class MemoryRepo:
    """The reads the policy makes of ``ledger.repo`` (``ledger.policy.port.PolicyRepo``), over the rows of
    a bundle; the same rows, in the same shapes, as ``ledger.repo.LogRepo`` gives for those entries. Each
    row is made from its log record, proved included under the bundle's checkpoint (``_verify``): its
    index and log time are the committed ones by construction."""

    def __init__(self, rows: Sequence[_Row], checkpoint: Checkpoint) -> None:
        self.rows = sorted(rows, key=lambda r: r.seq)
        self.by_seq = {r.seq: r for r in self.rows}
        self.by_id = {r.entry_id: r for r in self.rows}
        self.cp = checkpoint

    @contextmanager
    def read(self, *, snapshot: bool = False) -> Iterator[None]:
        yield None

    def _subject(self, subject: dict[str, str], n: int) -> list[_Row]:
        items = list(subject.items())
        return [r for r in self.rows if r.seq < n and all(r.subject.get(k) == v for k, v in items)]

    def subject_rows(self, conn: object, subject: dict[str, str], n: int) -> list[tuple[Any, ...]]:
        return [r.evidence() for r in self._subject(subject, n)]

    def linked_rows(
        self, conn: object, subject: dict[str, str], n: int, subject_entries: int
    ) -> list[tuple[Any, ...]]:
        own = self._subject(subject, n)
        own_ids = {r.entry_id for r in own}
        targets = {t for r in own for _, t in r.refs}
        referrers = [r for r in self.rows if r.seq < n and any(t in own_ids for _, t in r.refs)]
        referenced = [r for r in self.rows if r.seq < n and r.entry_id in targets]
        return [r.evidence() for r in referrers] + [r.evidence() for r in referenced]

    def logged_at(self, conn: object, seq: int) -> str:
        row = self.by_seq.get(seq)
        if row is None:
            raise EntryNotFoundError(
                f"the bundle lacks the entry at seq {seq} (its logged_at is the reference time)"
            )
        return row.logged_at

    def host_rows(
        self, conn: object, kinds: Sequence[str], hosts: Sequence[str], n: int
    ) -> list[tuple[Any, ...]]:
        return [
            r.evidence()
            for r in self.rows
            if r.seq < n and r.kind in kinds and r.subject.get("host") in hosts
        ]

    def subject_hosts(
        self,
        conn: object,
        subject: dict[str, str],
        n: int,
        seqs: Sequence[int] = (),
        among: Sequence[str] | None = None,
    ) -> list[str]:
        rows = self._subject(subject, n) + [self.by_seq[s] for s in seqs if s in self.by_seq]
        found = {r.subject["host"] for r in rows if "host" in r.subject}
        if among is not None:
            found &= set(among)
        return sorted(found)

    def kind_hosts(self, conn: object, kinds: Sequence[str], n: int) -> list[str]:
        return sorted(
            {r.subject["host"] for r in self.rows if r.seq < n and r.kind in kinds and "host" in r.subject}
        )

    def subject_kind_rows(
        self,
        conn: object,
        subject: dict[str, str],
        kinds: Sequence[str],
        n: int,
        *,
        logged_since: str | None = None,
    ) -> list[tuple[Any, ...]]:
        return [
            r.evidence()
            for r in self._subject(subject, n)
            if r.kind in kinds and (logged_since is None or r.logged_at >= logged_since)
        ]

    def referrer_rows(self, conn: object, entry_id: str, n: int) -> list[tuple[Any, ...]]:
        return [r.evidence() for r in self.rows if r.seq < n and any(t == entry_id for _, t in r.refs)]

    def checkpoint_root(self, size: int, conn: object | None = None) -> str | None:
        return self.cp.root.hex() if size == self.cp.size else None

    def tree_root(self, size: int, conn: object | None = None) -> bytes:
        if size != self.cp.size:
            raise NotAvailableError(f"the bundle holds the tree at size {self.cp.size} only")
        return self.cp.root

    def key_rows(self, start: int, size: int) -> list[tuple[int, bytes]]:
        return [(r.seq, r.envelope) for r in self.rows if start <= r.seq < size and r.kind.startswith("key.")]


class MemoryStore:
    """The artifact store of a bundle: bytes by digest, never written. A redacted artifact is known (its
    digest) but every read of it fails with ``artifact-missing`` ("redacted"), so a policy that checks it
    rejects the entry — the re-derivation fails closed — and ``asked`` says which were asked for."""

    def __init__(self, blobs: dict[str, bytes], redacted: set[str]) -> None:
        self.blobs = blobs
        self.redacted = redacted
        self.asked: set[str] = set()

    def _get(self, digest: Digest) -> bytes:
        text = str(digest)
        self.asked.add(text)
        if text in self.redacted:
            raise ArtifactMissingError(
                f"artifact {text} is redacted in this bundle: its bytes cannot be checked"
            )
        data = self.blobs.get(text)
        if data is None:
            raise ArtifactMissingError(f"artifact {text} is not in the bundle")
        return data

    def put_stream(
        self,
        stream: BinaryIO,
        *,
        sha256: bool = False,
        expected: Digest | None = None,
        max_size: int | None = None,
        progress: Callable[[int], object] | None = None,
    ) -> StoredArtifact:
        raise NotAvailableError("a bundle's store is read-only")

    def has(self, digest: Digest) -> bool:
        text = str(digest)
        self.asked.add(text)
        return text in self.blobs or text in self.redacted

    def size(self, digest: Digest) -> int:
        return len(self._get(digest))

    def verify(self, digest: Digest, *, progress: Callable[[int], object] | None = None) -> None:
        data = self._get(digest)
        if progress is not None:
            progress(len(data))
        actual = blake3_hex(data)
        if actual != digest.hex:
            raise ArtifactCorruptError(f"artifact {digest} is corrupt (its bytes hash to blake3:{actual})")

    def open_verified(self, digest: Digest, *, progress: Callable[[int], object] | None = None) -> BinaryIO:
        self.verify(digest, progress=progress)
        return io.BytesIO(self._get(digest))

    def iter_digests(self) -> Iterator[Digest]:
        for d in sorted(self.blobs):
            yield parse_digest(d)


class BundleLedger:
    """``ledger.policy.port.PolicyLedger`` over a bundle's rows: the reads a verdict makes, in memory;
    writes are refused (nothing is ever appended to a bundle)."""

    def __init__(self, repo: MemoryRepo, store: MemoryStore) -> None:
        self._repo = repo
        self._store = store

    @property
    def repo(self) -> MemoryRepo:
        return self._repo

    @property
    def store(self) -> MemoryStore:
        return self._store

    def size(self) -> int:
        return self._repo.cp.size

    def keyring(self, conn: object | None = None, *, at_size: int | None = None) -> Keyring:
        n = self.size() if at_size is None else at_size
        return replay_keys(Keyring(), self._repo.key_rows(0, n), n)

    def checkpoint(self, *, size: int | None = None, store: bool = True) -> Checkpoint:
        return self.signed_checkpoint(size=size)

    def signed_checkpoint(self, *, size: int | None = None) -> Checkpoint:
        if size is not None and size != self._repo.cp.size:
            raise NotAvailableError(f"the bundle holds the checkpoint at size {self._repo.cp.size} only")
        return self._repo.cp

    def held(self) -> Checkpoint | None:
        """No home holds a checkpoint of a bundle: its rows are proved under its own checkpoint."""
        return None

    def get(self, id_or_prefix: str) -> LoggedEntry:
        raise NotAvailableError("a bundle is read through the policy's snapshot only")

    def query(
        self,
        *,
        subject: dict[str, str] | None = None,
        kind: str | None = None,
        signer: str | None = None,
        since: str | None = None,
        until: str | None = None,
        after_seq: int | None = None,
        at_size: int | None = None,
        limit: int | None = 100,
        descending: bool = False,
    ) -> list[LoggedEntry]:
        raise NotAvailableError("a bundle is read through the policy's snapshot only")

    def referrers(self, entry_id: str, rel: str | None = None) -> list[LoggedEntry]:
        raise NotAvailableError("a bundle is read through the policy's snapshot only")

    def make_statement(
        self,
        kind: str,
        subject: dict[str, str],
        payload: dict[str, Any],
        *,
        artifacts: Sequence[ArtifactRef] = (),
        refs: Sequence[tuple[str, str]] = (),
        collected_at: datetime | str | None = None,
        kind_version: int = 1,
        host: str | None = None,
    ) -> dict[str, Any]:
        raise NotAvailableError("nothing is recorded into a bundle")

    def sign(self, statement: dict[str, Any], key: SigningKey | str) -> Envelope:
        raise NotAvailableError("nothing is signed in a bundle")

    def append(
        self, envelopes: Sequence[Envelope | bytes | dict[str, Any]], *, logged_at: datetime | None = None
    ) -> list[LoggedEntry]:
        raise NotAvailableError("nothing is appended to a bundle")


# --- verify --------------------------------------------------------------------------------------------


@dataclass
class BundleReport:
    """What ``verify_bundle`` found; ``ok`` when there is no problem."""

    subject: dict[str, str] = field(default_factory=dict)
    origin: str | None = None
    checkpoint: dict[str, Any] = field(default_factory=dict)
    policy: dict[str, Any] = field(default_factory=dict)
    log_key: str = "bundled"  # "given": --public-key; "bundled": the bundle's own verifier key
    entries: int = 0
    artifacts: int = 0
    redacted: list[str] = field(default_factory=list)
    verdict: str | None = None
    result_digest: str | None = None
    rederived_digest: str | None = None
    problems: list[dict[str, Any]] = field(default_factory=list)
    rederived: dict[str, Any] | None = field(default=None, repr=False)  # the result re-derived here

    @property
    def ok(self) -> bool:
        return not self.problems

    def add(self, code: BundleProblem, message: str, **where: Any) -> None:
        self.problems.append({"code": str(code), "message": message, **where})

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "subject": self.subject,
            "origin": self.origin,
            "checkpoint": self.checkpoint,
            "policy": self.policy,
            "log_key": self.log_key,
            "entries": self.entries,
            "artifacts": self.artifacts,
            "redacted": self.redacted,
            "verdict": self.verdict,
            "result_digest": self.result_digest,
            "rederived_digest": self.rederived_digest,
            "problems": self.problems,
        }


class _Zip:
    """The bundle's members, each read by the name the manifest gives. A name two members share is
    ambiguous (``zipfile`` reads the last, other tools the first): it is a problem, and so is a member
    no manifest field names (``unlisted``, once every named file was read)."""

    def __init__(self, zf: zipfile.ZipFile, report: BundleReport) -> None:
        self.zf = zf
        self.report = report
        self.names = set(zf.namelist())
        self.asked: set[str] = {MANIFEST}
        for name, n in _duplicate_members(zf):
            report.add(BundleProblem.MEMBER_DUPLICATE, f"the bundle holds {n} files named {name!r}")

    def unlisted(self) -> None:
        for name in sorted(self.names - self.asked):
            self.report.add(BundleProblem.MEMBER_UNLISTED, f"the manifest does not name the file {name!r}")

    def read(self, name: Any, what: str) -> bytes | None:
        if isinstance(name, str):
            self.asked.add(name)
        if not isinstance(name, str) or name not in self.names:
            self.report.add(BundleProblem.MEMBER_MISSING, f"{what}: the bundle has no file {name!r}")
            return None
        try:
            return self.zf.read(name)
        except (zipfile.BadZipFile, OSError, ValueError) as e:  # a damaged member (bad CRC …)
            self.report.add(BundleProblem.MEMBER_MISSING, f"{what}: file {name!r} cannot be read: {e}")
            return None


def _duplicate_members(zf: zipfile.ZipFile) -> list[tuple[str, int]]:
    """The member names the ZIP holds more than once, with how many times (``bundle-member-duplicate``)."""
    return [(name, n) for name, n in sorted(Counter(zf.namelist()).items()) if n > 1]


def _repeated_entries(entries: Sequence[Any]) -> set[int]:
    """The positions of the manifest's entries that list an entry id or a seq a listing before them does
    (``bundle-entry-duplicate``: the first listing is the one used)."""
    seen_seq: set[Any] = set()
    seen_id: set[str] = set()
    out: set[int] = set()
    for i, item in enumerate(entries):
        seq, eid = item["seq"], str(item["id"])
        if seq in seen_seq or eid in seen_id:
            out.add(i)
            continue
        seen_seq.add(seq)
        seen_id.add(eid)
    return out


def open_manifest(zf: zipfile.ZipFile) -> dict[str, Any]:
    try:
        manifest = parse_canonical(zf.read(MANIFEST))
    except KeyError as e:
        raise BundleError(f"not a reviewer bundle: no {MANIFEST}") from e
    except LedgerError as e:
        raise BundleError(f"{MANIFEST} is not canonical JSON: {e.message}") from e
    if not isinstance(manifest, dict) or manifest.get("format") != BUNDLE_FORMAT:
        raise BundleError(f"not a reviewer bundle of format {BUNDLE_FORMAT}")
    return manifest


def _count(value: Any, what: str) -> int:
    """A manifest's size or position: a JSON integer, never a string, a float or a boolean."""
    if type(value) is not int or value < 0:
        raise BundleError(f"malformed bundle manifest: {what} {value!r} is not a non-negative integer")
    return value


def _log_key(manifest: dict[str, Any], public_key: str | None, report: BundleReport) -> tuple[str, PublicKey]:
    origin = str(manifest.get("log", {}).get("origin", ""))
    bundled = manifest.get("log", {}).get("verifier_key")
    if public_key is not None:
        from ledger.proofs import _trust  # the one reading of a log key (C2SP verifier key, else base64)

        report.log_key = "given"
        name, pub = _trust(public_key.strip(), None, origin)
        try:
            same = parse_verifier_key(str(bundled))[1].raw == pub.raw
        except LedgerError:
            same = False
        if not same:
            report.add(BundleProblem.LOG_KEY, "the bundle's verifier key is not the log key given")
        return name, pub
    try:
        return parse_verifier_key(str(bundled))
    except LedgerError as e:
        report.add(BundleProblem.LOG_KEY, f"the bundle's verifier key: {e.message}")
        raise BundleError("the bundle carries no readable log key; pass --public-key") from e


def verify_bundle(
    source: BinaryIO | Path, *, public_key: str | None = None, trust_policy: TrustPolicy | None = None
) -> BundleReport:
    """Check a reviewer bundle and re-derive its verdict (see the module docstring); never touches a
    ledger home, the network or a database. ``public_key``: the log key (C2SP verifier key or base64);
    without it the bundle's own verifier key is used (``report.log_key == "bundled"``). ``trust_policy``
    (C2SP/Sigsum form, ``ledger.witness``): the bundled checkpoint must carry its quorum of witness
    cosignatures, each missing or invalid one named (``bundle-cosignature-quorum``)."""
    report = BundleReport()
    try:
        zf = zipfile.ZipFile(source)
    except (zipfile.BadZipFile, OSError) as e:
        raise BundleError(f"not a reviewer bundle (a ZIP file): {e}") from e
    with zf:
        try:
            _verify(_Zip(zf, report), open_manifest(zf), public_key, report, trust_policy)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise BundleError(f"malformed bundle manifest: {type(e).__name__}: {e}") from e
    return report


def _check_manifest_signature(z: _Zip, pub: PublicKey, report: BundleReport) -> None:
    """The manifest's bytes as the log signed them (``manifest.sig``, by the log key the checkpoint is
    checked with): every member is named by digest or proof in the manifest, so a bundle re-made from
    fewer members — its ``verdict.json`` re-derived from them, self-consistent — is not the log's."""
    if MANIFEST_SIGNATURE not in z.names:
        report.add(
            BundleProblem.MANIFEST_SIGNATURE,
            f"the manifest carries no signature by the log key (no {MANIFEST_SIGNATURE}): which members the "
            "log bundled cannot be told",
        )
        return
    data = z.read(MANIFEST_SIGNATURE, "the manifest's signature")
    if data is None:
        return  # a damaged member: named by the read
    try:
        sig = parse_canonical(data)
        if not isinstance(sig, dict) or sig.get("payloadType") != MANIFEST_PAYLOAD_TYPE:
            raise IntegrityError(
                f"{MANIFEST_SIGNATURE} is not a manifest signature of {MANIFEST_PAYLOAD_TYPE}"
            )
        if sig.get("keyid") != pub.key_id:
            raise IntegrityError(
                f"{MANIFEST_SIGNATURE} names key {sig.get('keyid')!r}, not the log key {pub.key_id}"
            )
        if not isinstance(sig.get("sig"), str):
            raise IntegrityError(f"{MANIFEST_SIGNATURE} carries no signature")
        pub.verify(b64d(sig["sig"], "manifest signature"), pae(MANIFEST_PAYLOAD_TYPE, z.zf.read(MANIFEST)))
    except LedgerError as e:
        report.add(BundleProblem.MANIFEST_SIGNATURE, f"the manifest: {e.message}")


def _verify(
    z: _Zip,
    manifest: dict[str, Any],
    public_key: str | None,
    report: BundleReport,
    trust_policy: TrustPolicy | None = None,
) -> None:
    from ledger.policy.verdict import result_digest

    report.subject = dict(manifest["subject"])
    report.origin = manifest["log"]["origin"]
    claimed = manifest["checkpoint"]
    report.checkpoint = {"size": _count(claimed["size"], "checkpoint size"), "root": str(claimed["root"])}
    name, pub = _log_key(manifest, public_key, report)
    _check_manifest_signature(z, pub, report)

    # the checkpoint: signed by the log key, and the one the manifest names
    note = z.read(claimed.get("file"), "checkpoint")
    cp: Checkpoint | None = None
    if note is not None:
        try:
            cp = parse_checkpoint(note.decode("utf-8", "replace"), name, pub)
        except LedgerError as e:
            report.add(BundleProblem.CHECKPOINT_SIGNATURE, f"checkpoint: {e.message}")
    if trust_policy is not None:
        from ledger.witness import check_cosigned

        if note is None:
            report.add(BundleProblem.COSIGNATURE_QUORUM, "no checkpoint note to judge by the trust policy")
        else:
            for problem in check_cosigned(note.decode("utf-8", "replace"), trust_policy)[1]:
                report.add(BundleProblem.COSIGNATURE_QUORUM, f"checkpoint: {problem}")
    if cp is not None and (cp.size, cp.root.hex()) != (report.checkpoint["size"], report.checkpoint["root"]):
        report.add(
            BundleProblem.CHECKPOINT_MISMATCH,
            f"the signed checkpoint is size {cp.size} root {cp.root.hex()}; the manifest names size "
            f"{report.checkpoint['size']} root {report.checkpoint['root']}",
        )
    if cp is None:  # nothing signed to prove against: the manifest's claim, so other problems are named
        cp = Checkpoint(
            report.origin or "", report.checkpoint["size"], bytes.fromhex(report.checkpoint["root"]), ""
        )
    # proofs lead to the signed checkpoint's root, never to what the manifest claims
    size, root = cp.size, cp.root

    # entries: envelope ↔ id, record ↔ envelope and index, inclusion under the checkpoint's root
    rows: list[_Row] = []
    parsed: list[tuple[_Row, Envelope]] = []
    for item in manifest["entries"]:
        _count(item["seq"], "entry seq")
    repeated = _repeated_entries(manifest["entries"])
    for i, item in enumerate(manifest["entries"]):
        seq, eid = item["seq"], str(item["id"])
        where = {"seq": seq, "entry": eid}
        if i in repeated:
            report.add(
                BundleProblem.ENTRY_DUPLICATE,
                f"the manifest lists entry {eid} (seq {seq}) again, or another entry at that seq",
                **where,
            )
            continue
        env_bytes = z.read(item.get("envelope"), f"entry {eid}")
        rec_bytes = z.read(item.get("record"), f"entry {eid} log record")
        if env_bytes is None or rec_bytes is None:
            continue
        if entry_id_of(env_bytes) != eid:
            report.add(
                BundleProblem.ENVELOPE_DIGEST, f"the envelope of entry {eid} does not hash to its id", **where
            )
            continue
        try:
            record = parse_record(rec_bytes)
            record.check_envelope(env_bytes)
            env = parse_envelope(env_bytes)
            st = env.statement()
            if record.index != seq:
                raise IntegrityError(f"the log record is at index {record.index}, the manifest says {seq}")
            if (record.kind, record.signer) != (st["kind"], env.signer):
                raise IntegrityError("the log record's kind or signer is not the envelope's")
        except (LedgerError, KeyError, TypeError) as e:
            report.add(BundleProblem.RECORD_MISMATCH, f"entry {eid}: {getattr(e, 'message', e)}", **where)
            continue
        try:
            hashes = [bytes.fromhex(h) for h in item["proof"]]
            verify_inclusion(seq, size, record_leaf(rec_bytes), hashes, root)
        except (LedgerError, ValueError, TypeError) as e:
            report.add(
                BundleProblem.INCLUSION_PROOF,
                f"entry {eid} (seq {seq}) is not proved in the tree of size {size}: "
                f"{getattr(e, 'message', e)}",
                **where,
            )
            continue
        subj = st.get("subject") if isinstance(st.get("subject"), dict) else {}
        refs = tuple((str(r["rel"]), str(r["id"])) for r in st.get("refs") or ())
        row = _Row(seq, eid, record.kind, record.signer, record.logged_at, env_bytes, dict(subj), refs)
        rows.append(row)
        parsed.append((row, env))
    report.entries = len(rows)

    repo = MemoryRepo(rows, cp)
    try:
        ring = replay_keys(Keyring(), repo.key_rows(0, size), size)
    except LedgerError as e:
        report.add(BundleProblem.KEYS_DIFFER, f"the bundle's key entries do not replay: {e.message}")
        ring = Keyring()
    for row, env in parsed:
        rec = ring.keys.get(env.signer)
        try:
            if rec is None:
                raise IntegrityError(f"signer {env.signer} is not enrolled by the bundle's key entries")
            env.verify_with(rec.public)
        except LedgerError as e:
            report.add(
                BundleProblem.ENVELOPE_SIGNATURE,
                f"entry {row.entry_id}: {e.message}",
                seq=row.seq,
                entry=row.entry_id,
            )
    if _key_list(ring) != manifest.get("keys"):
        report.add(BundleProblem.KEYS_DIFFER, "the manifest's keys are not the keyring its key entries give")

    # artifacts: bundled bytes hash to their digest; a redacted one is known by its digest alone
    blobs: dict[str, bytes] = {}
    redacted: set[str] = set()
    listed: set[str] = set()
    for a in manifest["artifacts"]:
        digest = str(a["digest"])
        listed.add(digest)
        if a.get("redacted"):
            redacted.add(digest)
            report.redacted.append(digest)
            continue
        data = z.read(a.get("file"), f"artifact {', '.join(a.get('names', []))}")
        if data is None:
            continue
        if "blake3:" + blake3_hex(data) != digest or len(data) != a.get("size"):
            report.add(
                BundleProblem.ARTIFACT_DIGEST,
                f"artifact {', '.join(a.get('names', []))} ({digest}): its bundled bytes hash to "
                f"blake3:{blake3_hex(data)} ({len(data)} bytes)",
                artifact=digest,
            )
        blobs[digest] = data  # as bundled: the policy's own artifact check judges it too
    report.artifacts = len(blobs)
    # the artifacts of the entries the verdict judges (``_judged_entries``, over the bundle's own rows, as
    # ``create_bundle`` chose them) must be bundled; an entry bundled for its record alone is checked by
    # record and proof above. Where the judged entries cannot be read, every bundled entry's (fails closed).
    need: set[str] | None
    try:
        need = {
            e.id
            for e in _judged_entries(BundleLedger(repo, MemoryStore(blobs, redacted)), report.subject, size)
        }
    except LedgerError:
        need = None
    for row, env in parsed:
        if need is not None and row.entry_id not in need:
            continue
        for a in env.statement().get("artifacts") or ():
            if a.get("stored", True) and a.get("digest") not in listed:
                report.add(
                    BundleProblem.ARTIFACT_ABSENT,
                    f"artifact {a.get('name')} ({a.get('digest')}) of entry {row.entry_id} "
                    "is not in the bundle",
                    entry=row.entry_id,
                    artifact=a.get("digest"),
                )

    # the policy bytes, the vocabularies, the bundled result
    pol = manifest["policy"]
    report.policy = {"name": pol["name"], "digest": pol["digest"]}
    files: dict[str, bytes] = {}
    for spec in (pol, pol.get("acceptance")):
        if spec is None:
            continue
        data = z.read(spec.get("file"), f"policy {spec['name']}")
        if data is None:
            continue
        if "blake3:" + blake3_hex(data) != spec["digest"]:
            report.add(
                BundleProblem.POLICY_DIGEST,
                f"policy {spec['name']}: its bytes hash to blake3:{blake3_hex(data)}, the manifest names "
                f"{spec['digest']}",
            )
        files[f"{spec['name']}.toml"] = data
    mine = _vocabulary_digests()
    for vname, digest in sorted((manifest.get("vocabularies") or {}).items()):
        if mine.get(vname) != digest:
            report.add(
                BundleProblem.VOCABULARY_DIFFERS,
                f"the {vname} table here is {mine.get(vname)}, the bundle was judged with {digest}: "
                "re-derived with this verifier's table",
            )
    verdict_bytes = z.read(manifest["verdict"].get("file"), "verdict")
    bundled: dict[str, Any] | None = None
    if verdict_bytes is not None:
        try:
            loaded = parse_canonical(verdict_bytes)
        except LedgerError as e:
            report.add(
                BundleProblem.VERDICT_DIGEST, f"the bundled verdict is not canonical JSON: {e.message}"
            )
        else:
            if isinstance(loaded, dict):
                bundled = loaded
                report.verdict = str(loaded.get("verdict"))
                report.result_digest = result_digest(loaded)
                if report.result_digest != manifest["verdict"].get("result_digest"):
                    report.add(
                        BundleProblem.VERDICT_DIGEST,
                        f"the bundled verdict digests to {report.result_digest}, the manifest names "
                        f"{manifest['verdict'].get('result_digest')}",
                    )
                vpol = loaded.get("policy", {})
                for key, spec in (("digest", pol), ("acceptance_digest", pol.get("acceptance"))):
                    want = spec["digest"] if spec else None
                    if vpol.get(key) != want:
                        report.add(
                            BundleProblem.POLICY_DIGEST,
                            f"the verdict was judged with policy {key} {vpol.get(key)}, "
                            f"the bundle holds {want}",
                        )
                for missing in sorted(_verdict_ids(loaded) - set(repo.by_id)):
                    report.add(
                        BundleProblem.ENTRY_ABSENT,
                        f"the verdict names entry {missing}, which the bundle does not hold (checked)",
                        entry=missing,
                    )

    # re-derive: the policy bytes over the bundle's rows, through the policy port in memory
    store = MemoryStore(blobs, redacted)
    rederived = _rederive(BundleLedger(repo, store), report, files, pol["name"], size)
    for digest in sorted(store.asked & redacted):
        names = [", ".join(a.get("names", [])) for a in manifest["artifacts"] if a["digest"] == digest]
        report.add(
            BundleProblem.ARTIFACT_REDACTED,
            f"artifact {names[0] if names else '?'} ({digest}) is redacted, and the policy checks it: the "
            "verdict cannot be re-derived from this bundle (fails closed)",
            artifact=digest,
        )
    z.unlisted()
    report.rederived = rederived
    if rederived is not None and bundled is not None:
        report.rederived_digest = result_digest(rederived)
        _considered(rederived, bundled, report)
        if canonical_bytes(rederived) != canonical_bytes(bundled):
            diff = [k for k in sorted(set(rederived) | set(bundled)) if rederived.get(k) != bundled.get(k)]
            report.add(
                BundleProblem.VERDICT_DIFFERS,
                f"re-derived here: {rederived.get('verdict')}; bundled: {bundled.get('verdict')} "
                f"({', '.join(diff) or 'bytes'} differ)",
            )


def _considered(rederived: dict[str, Any], bundled: dict[str, Any], report: BundleReport) -> None:
    """Name the entries of the verdict's snapshot the bundle lacks (or holds beyond it): the verdict counts
    the entries it read (``counts.considered``), and the bundle's rows give the same count when the bundle
    holds each of them. An entry the verdict read but does not name by id is found this way only: the
    count names how many, never which (``bundle-entry-absent``)."""
    have, want = (v.get("counts", {}).get("considered") for v in (rederived, bundled))
    if type(have) is not int or type(want) is not int or have == want:
        return
    if have < want:
        message = (
            f"the verdict read {want} entries of the subject, the bundle holds {have} of them: "
            f"{want - have} entr{'y' if want - have == 1 else 'ies'} the verdict read "
            f"{'is' if want - have == 1 else 'are'} not in the bundle"
        )
    else:
        message = (
            f"the verdict read {want} entries of the subject, the bundle holds {have}: "
            f"{have - want} the verdict did not read"
        )
    report.add(BundleProblem.ENTRY_ABSENT, message)


def _rederive(
    ledger: BundleLedger, report: BundleReport, files: dict[str, bytes], name: str, size: int
) -> dict[str, Any] | None:
    from ledger.policy.loader import load_policy
    from ledger.policy.verdict import evaluate

    if f"{name}.toml" not in files:
        report.add(BundleProblem.REDERIVE_FAILED, "the policy bytes are missing: nothing to re-derive with")
        return None
    with tempfile.TemporaryDirectory(prefix="ledger-bundle-") as tmp:
        folder = Path(tmp)
        for fname, data in files.items():
            (folder / fname).write_bytes(data)
        try:
            policy = load_policy(str(folder / f"{name}.toml"), folder)
        except LedgerError as e:
            report.add(BundleProblem.POLICY_UNLOADABLE, f"policy {name}: {e.message}")
            return None
        try:
            return evaluate(ledger, report.subject, policy, at_size=size)
        except LedgerError as e:
            report.add(BundleProblem.REDERIVE_FAILED, f"the verdict cannot be re-derived: {e.message}")
            return None


# --- public report -------------------------------------------------------------------------------------

# absolute filesystem paths (POSIX with two or more parts, Windows drive paths) and home-relative ones
_PRIVATE_PATH = re.compile(
    r"(?<![\w:/.~-])(?:~|/(?:[\w.@+-]+))(?:/[\w.@+-]+)+/?|(?<![\w])[A-Za-z]:\\(?:[^\s\\\"']+\\?)+"
)


def scrub_private_paths(text: str) -> str:
    """``text`` with every filesystem path replaced by ``[path]`` (a public report names no private path)."""
    return _PRIVATE_PATH.sub("[path]", text)


def bundle_report(
    source: BinaryIO | Path, checked: BundleReport, *, scrub: Callable[[str], str] = scrub_private_paths
) -> dict[str, Any]:
    """The public report of a bundle: verdict word, ladder, gates and reasons, digests, and what the
    check found — every text passed through ``scrub``; no envelope, payload or artifact byte is read
    into it."""
    with zipfile.ZipFile(source) as zf:
        manifest = open_manifest(zf)
        # a name held twice, or an entry listed twice: which one the report reads is the reader's guess
        # (``zipfile`` the last, other tools the first): refused, as ``verify_bundle`` refuses it
        twice = [
            f"{BundleProblem.MEMBER_DUPLICATE}: {n} files named {name!r}"
            for name, n in _duplicate_members(zf)
        ]
        try:
            listed = manifest["entries"]
            twice += [
                f"{BundleProblem.ENTRY_DUPLICATE}: the manifest lists entry {listed[i]['id']} (seq "
                f"{listed[i]['seq']}) again, or another entry at that seq"
                for i in sorted(_repeated_entries(listed))
            ]
        except (KeyError, TypeError) as e:
            raise BundleError(f"malformed bundle manifest: {type(e).__name__}: {e}") from e
        if twice:
            raise BundleError(f"the bundle is ambiguous, no report is made of it: {'; '.join(twice)}")
        try:
            result = parse_canonical(zf.read(manifest["verdict"]["file"]))
        except (KeyError, LedgerError) as e:
            raise BundleError(f"the bundle holds no readable verdict: {e}") from e
    if not isinstance(result, dict):
        raise BundleError("the bundled verdict is not a JSON object")

    def s(value: Any) -> str:
        return scrub(str(value))

    by_id = {e["id"]: e for e in manifest["entries"]}
    return {
        "verdict": s(result.get("verdict")),
        "status": s(result.get("status")),
        "subject": {s(k): s(v) for k, v in sorted(result.get("subject", {}).items())},
        "identity": {s(k): s(v) for k, v in sorted(result.get("identity", {}).items())},
        "policy": {k: s(v) for k, v in sorted(result.get("policy", {}).items())},
        "checkpoint": {
            "origin": s(manifest["log"]["origin"]),
            "size": result.get("checkpoint", {}).get("size"),
            "root": s(result.get("checkpoint", {}).get("root")),
        },
        "reference_time": s(result.get("reference_time")),
        "gates": [
            {
                "name": s(g.get("name")),
                "status": s(g.get("status")),
                "verdict_if_failed": s(g.get("verdict_if_failed")),
                "reason": s(g.get("reason")),
                "evidence": [s(i) for i in g.get("evidence", [])],
            }
            for g in result.get("gates", [])
        ],
        "rejected": [
            {
                "entry": s(r.get("entry")),
                "kind": s(r.get("kind")),
                "rule": s(r.get("rule")),
                "detail": s(r.get("detail")),
            }
            for r in result.get("rejected", [])
        ],
        "entries": [
            {"id": s(i), "seq": by_id[i]["seq"], "kind": s(by_id[i]["kind"])}
            for i in result.get("used", [])
            if i in by_id
        ],
        "artifacts": [
            {
                "digest": s(a["digest"]),
                "size": a["size"],
                "names": [s(n) for n in a["names"]],
                "redacted": bool(a["redacted"]),
            }
            for a in manifest["artifacts"]
        ],
        "result_digest": s(manifest["verdict"].get("result_digest")),
        "check": {
            "ok": checked.ok,
            "log_key": checked.log_key,
            "rederived_digest": checked.rederived_digest,
            "problems": [{"code": p["code"], "message": s(p["message"])} for p in checked.problems],
        },
    }


def report_markdown(report: dict[str, Any]) -> str:
    """The public report as Markdown."""

    def cell(text: Any) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    cp = report["checkpoint"]
    lines = [
        f"# {report['verdict']}",
        "",
        "Subject: " + ", ".join(f"`{k}={v}`" for k, v in report["subject"].items()),
        "",
        f"Policy `{report['policy'].get('name')}` ({report['policy'].get('digest')}); acceptance "
        f"`{report['policy'].get('acceptance', '-')}` ({report['policy'].get('acceptance_digest', '-')})",
        "",
        f"Judged at checkpoint {cp['origin']} size {cp['size']}, root `{cp['root']}`; reference time "
        f"{report['reference_time']}; result digest `{report['result_digest']}`.",
        "",
    ]
    check = report["check"]
    if check["ok"]:
        lines.append(
            f"Offline check: **every signature, proof and digest checks; the verdict re-derives byte for "
            f"byte** (log key: {check['log_key']})."
        )
    else:
        lines.append(f"Offline check: **{len(check['problems'])} problem(s)** (log key: {check['log_key']}):")
        lines.append("")
        lines.extend(f"- `{p['code']}`: {cell(p['message'])}" for p in check["problems"])
    lines += ["", "## Ladder", "", "| gate | status | reason |", "|---|---|---|"]
    lines += [f"| {cell(g['name'])} | {cell(g['status'])} | {cell(g['reason'])} |" for g in report["gates"]]
    if report["rejected"]:
        lines += ["", "## Rejected evidence", "", "| entry | kind | rule | detail |", "|---|---|---|---|"]
        lines += [
            f"| `{r['entry'][:12]}` | {cell(r['kind'])} | {cell(r['rule'])} | {cell(r['detail'])} |"
            for r in report["rejected"]
        ]
    lines += ["", "## Evidence used", "", "| seq | kind | entry id |", "|---|---|---|"]
    lines += [f"| {e['seq']} | {cell(e['kind'])} | `{e['id']}` |" for e in report["entries"]]
    lines += ["", "## Artifacts", "", "| names | digest | size | bytes |", "|---|---|---|---|"]
    lines += [
        f"| {cell(', '.join(a['names']))} | `{a['digest']}` | {a['size']} | "
        f"{'redacted (digest only)' if a['redacted'] else 'in the bundle'} |"
        for a in report["artifacts"]
    ]
    return "\n".join(lines) + "\n"
