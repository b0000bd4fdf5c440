"""Entries as in-toto attestations other tools can check (``ledger export attestation``).

One entry becomes one in-toto Statement v1 in a DSSE envelope (``application/vnd.in-toto+json``) signed by
a key with the ``exporter`` role, wrapped in a Sigstore bundle v0.3 whose transparency-log entry carries
this log's inclusion proof and signed checkpoint for the *source entry* (docs/INTEROP.md says what a
Sigstore verifier can and cannot check). The predicate by kind:

* ``gate.result`` → ``https://in-toto.io/attestation/test-result/v0.1``
* ``verdict`` → SLSA verification summary ``https://slsa.dev/verification_summary/v1``
* anything else (launches, probes, pins, kernel logs …) → ours, ``https://evidence-ledger.dev/attestation/
  entry/v1``, whose JSON schema ships as ``ledger/schemas/entry-attestation-v1.json``.

Subjects are the entry's artifacts with ``sha256`` (recorded, or computed streaming from the store) and
``blake3`` digests; an entry without artifacts attests itself (its envelope's digests).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from ledger.canonical import canonical_bytes, parse_canonical
from ledger.entries import judged_subject_problem, parse_time
from ledger.errors import ArtifactMissingError, InputError, ProofError, RoleError, SignatureError
from ledger.log import parse_checkpoint, parse_record, record_leaf, verify_inclusion
from ledger.signing import PublicKey, SigningKey, pae

if TYPE_CHECKING:
    from ledger.logged import LoggedEntry
    from ledger.service import Ledger

__all__ = [
    "BUNDLE_MEDIA_TYPE",
    "ENTRY_PREDICATE",
    "ENTRY_SCHEMA",
    "EXPORTER_ROLE",
    "INTOTO_PAYLOAD_TYPE",
    "STATEMENT_V1",
    "TEST_RESULT_PREDICATE",
    "TLOG_KIND",
    "VSA_PREDICATE",
    "Checked",
    "attestation_bundle",
    "entry_uri",
    "statement_for",
    "subject_bundles",
    "verify_bundle",
]

STATEMENT_V1 = "https://in-toto.io/Statement/v1"
INTOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"
BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
TEST_RESULT_PREDICATE = "https://in-toto.io/attestation/test-result/v0.1"
VSA_PREDICATE = "https://slsa.dev/verification_summary/v1"
ENTRY_PREDICATE = "https://evidence-ledger.dev/attestation/entry/v1"
ENTRY_SCHEMA = Path(__file__).parent / "schemas" / "entry-attestation-v1.json"
EXPORTER_ROLE = "exporter"
# the tlog entry's kind: this log's entries (the body is the log record, docs/LOG.md: the Merkle leaf
# commits it; the entry's envelope is fetched by the record's entry id), not a Rekor kind
TLOG_KIND = {"kind": "evidence-ledger-entry", "version": "1"}
_CHUNK = 1 << 20


def entry_uri(entry_id: str) -> str:
    return f"urn:evidence-ledger:entry:{entry_id}"


def _subject_uri(subject: dict[str, str]) -> str:
    return "urn:evidence-ledger:subject:" + "&".join(
        f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in sorted(subject.items())
    )


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _sha256_of(ledger: Ledger, digest: str) -> str:
    h = hashlib.sha256()
    with ledger.open_artifact(digest) as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _self_subject(entry: LoggedEntry) -> dict[str, Any]:
    """The entry itself as a resource descriptor: its URN, its id (the envelope's BLAKE3) and SHA-256."""
    return {
        "name": f"entry/{entry.entry_id}",
        "uri": entry_uri(entry.entry_id),
        "digest": {"blake3": entry.entry_id, "sha256": hashlib.sha256(entry.envelope).hexdigest()},
        "mediaType": "application/vnd.evidence-ledger.entry+json",
    }


def _subjects(ledger: Ledger, entry: LoggedEntry) -> list[dict[str, Any]]:
    """The entry's artifacts (sha256 + blake3); none: the entry itself (its envelope's digests). A verdict
    names itself too: the VSA predicate has no field for its own entry (``_OWN_ENTRY``)."""
    out: list[dict[str, Any]] = []
    for a in entry.statement.artifacts:
        digests = {"blake3": a.digest.removeprefix("blake3:")}
        if a.sha256:
            digests["sha256"] = a.sha256
        elif a.stored:
            if not ledger.has_artifact(a.digest):
                raise ArtifactMissingError(
                    f"artifact {a.name} ({a.digest}) of entry {entry.entry_id} is not in the store: "
                    "its sha256 cannot be computed"
                )
            digests["sha256"] = _sha256_of(ledger, a.digest)
        out.append({"name": a.name, "digest": digests, "mediaType": a.media_type})
    if not out or entry.kind == "verdict":
        out.append(_self_subject(entry))
    return out


def _test_result(entry: LoggedEntry) -> dict[str, Any]:
    p = entry.statement.payload
    gate = str(p.get("gate"))
    status = p.get("status")
    # only "passed" passes; not_run / not_authorized are not a pass and not a warning: FAILED
    result = "PASSED" if status == "passed" else "FAILED"
    annotations: dict[str, Any] = {"gate": gate, "status": status}
    for key in ("counts", "bounds", "reason", "order"):
        if p.get(key) not in (None, {}, []):
            annotations[key] = p[key]
    return {
        "result": result,
        "configuration": [
            {
                "name": f"gate/{gate}",
                "uri": entry_uri(entry.entry_id),
                "digest": {"blake3": entry.entry_id},
                "annotations": annotations,
            }
        ],
        "url": entry_uri(entry.entry_id),
        "passedTests": [gate] if result == "PASSED" else [],
        "warnedTests": [],
        "failedTests": [gate] if result == "FAILED" else [],
    }


def _vsa(ledger: Ledger, entry: LoggedEntry) -> dict[str, Any]:
    p = entry.statement.payload
    policy = p.get("policy") or {}
    digest = str(policy.get("digest", ""))
    algo, _, hexd = digest.partition(":")
    if not hexd:
        raise InputError(f"verdict {entry.entry_id} names no policy digest: it cannot be summarised")
    cp = p.get("checkpoint") or {}
    result = ledger.verdict_result(entry)
    inputs = [{"uri": entry_uri(i), "digest": {"blake3": i}} for i in result.get("used", [])]
    if cp.get("size") is not None and cp.get("root"):
        # the log as the verdict saw it: its RFC 6962 (SHA-256) Merkle root at that size
        inputs.append(
            {
                "uri": f"urn:evidence-ledger:checkpoint:{quote(ledger.origin, safe='')}:{cp['size']}",
                "digest": {"sha256": str(cp["root"])},
            }
        )
    # the subject it judged, one reading with ingest, replay and the pages: a result of another subject
    # than the entry is logged under (an entry stored before ingest checked it) is never summarised
    problem = judged_subject_problem(entry.statement, result)
    if problem is not None:
        raise InputError(f"verdict {entry.entry_id}: {problem}; it cannot be summarised")
    status = p.get("status")
    evaluated = result.get("subject") or dict(entry.statement.subject)
    return {
        "verifier": {"id": f"urn:evidence-ledger:verifier:{quote(ledger.origin, safe='')}"},
        "timeVerified": entry.logged_at,
        "resourceUri": _subject_uri(evaluated),
        "policy": {
            "uri": f"urn:evidence-ledger:policy:{quote(str(policy.get('name', '')), safe='')}",
            "digest": {algo: hexd},
        },
        "inputAttestations": inputs,
        "verificationResult": "PASSED" if status == "qualified" else "FAILED",
        # custom level names (the spec reserves SLSA_*): what the policy decided, only when it passed
        "verifiedLevels": ["EVIDENCE_LEDGER_QUALIFIED"] if status == "qualified" else [],
    }


def _entry_predicate(ledger: Ledger, entry: LoggedEntry) -> dict[str, Any]:
    st = entry.statement
    return {
        "origin": ledger.origin,
        "entry": {
            "id": entry.entry_id,
            "seq": entry.seq,
            "kind": st.kind,
            "kind_version": st.kind_version,
            "subject": dict(st.subject),
            "signer": entry.signer,
            "collected_at": st.collected_at,
            "logged_at": entry.logged_at,
            "envelope_sha256": hashlib.sha256(entry.envelope).hexdigest(),
        },
        "payload": st.payload,
        "refs": [r.model_dump(mode="json") for r in st.refs],
        "collector": st.collector.model_dump(mode="json"),
    }


def statement_for(ledger: Ledger, entry: LoggedEntry) -> dict[str, Any]:
    """The in-toto Statement v1 for one entry (predicate by kind, see the module doc)."""
    if entry.kind == "gate.result":
        ptype, predicate = TEST_RESULT_PREDICATE, _test_result(entry)
    elif entry.kind == "verdict":
        ptype, predicate = VSA_PREDICATE, _vsa(ledger, entry)
    elif entry.kind.startswith("key."):
        raise InputError(f"entry {entry.entry_id} is a {entry.kind}: key entries are not exported")
    else:
        ptype, predicate = ENTRY_PREDICATE, _entry_predicate(ledger, entry)
    return {
        "_type": STATEMENT_V1,
        "subject": _subjects(ledger, entry),
        "predicateType": ptype,
        "predicate": predicate,
    }


def _exporter_key(ledger: Ledger, name: str) -> SigningKey:
    rec = ledger.key_record(name)
    if EXPORTER_ROLE not in rec.roles:
        raise RoleError(
            f"key {rec.name} has roles {sorted(rec.roles)}; attestations are signed by a key with the "
            f"{EXPORTER_ROLE!r} role (ledger keys new NAME --role {EXPORTER_ROLE})"
        )
    if rec.revoked_at is not None:
        raise SignatureError(f"key {rec.name} is revoked: it signs no attestation")
    return ledger.signing_key(rec.name)


def attestation_bundle(ledger: Ledger, entry_id: str, *, key: str) -> dict[str, Any]:
    """A Sigstore bundle v0.3 (JSON object): the DSSE-signed statement and the source entry's inclusion
    proof with the checkpoint it verifies against."""
    entry = ledger.get(entry_id)
    signer = _exporter_key(ledger, key)
    statement = statement_for(ledger, entry)
    payload = canonical_bytes(statement)
    sig = signer.sign(pae(INTOTO_PAYLOAD_TYPE, payload))
    proof = ledger.inclusion(entry.entry_id)
    cp = parse_checkpoint(proof["checkpoint"], proof["log_key_name"], ledger.log_public_key())
    log_key = ledger.log_public_key()
    return {
        "mediaType": BUNDLE_MEDIA_TYPE,
        "verificationMaterial": {
            "publicKey": {"hint": signer.key_id},
            "tlogEntries": [
                {
                    "logIndex": str(proof["leaf_index"]),
                    "logId": {"keyId": _b64(hashlib.sha256(log_key.raw).digest())},
                    "kindVersion": dict(TLOG_KIND),
                    "integratedTime": str(int(parse_time(entry.logged_at).timestamp())),
                    "inclusionProof": {
                        "logIndex": str(proof["leaf_index"]),
                        "rootHash": _b64(cp.root),
                        "treeSize": str(cp.size),
                        "hashes": [_b64(bytes.fromhex(h)) for h in proof["hashes"]],
                        "checkpoint": {"envelope": cp.note},
                    },
                    # the Merkle leaf commits the log's record (index, logged_at, entry id); the record
                    # names the entry by id, and the statement binds that id
                    "canonicalizedBody": proof["record"],
                }
            ],
        },
        "dsseEnvelope": {
            "payload": _b64(payload),
            "payloadType": INTOTO_PAYLOAD_TYPE,
            "signatures": [{"sig": _b64(sig), "keyid": signer.key_id}],
        },
    }


@dataclass(frozen=True)
class Checked:
    statement: dict[str, Any]
    entry_id: str
    log_index: int
    tree_size: int


def verify_bundle(
    bundle: dict[str, Any], exporter: PublicKey, log_key: PublicKey, log_key_name: str
) -> Checked:
    """Check a bundle offline with two public keys: the DSSE signature (exporter), the source entry's
    inclusion proof against the checkpoint, and the checkpoint's signature (log). Raises on any failure."""
    if bundle.get("mediaType") != BUNDLE_MEDIA_TYPE:
        raise InputError(f"not a Sigstore bundle v0.3: mediaType {bundle.get('mediaType')!r}")
    env = bundle["dsseEnvelope"]
    if env.get("payloadType") != INTOTO_PAYLOAD_TYPE:
        raise InputError(f"payloadType {env.get('payloadType')!r} is not {INTOTO_PAYLOAD_TYPE}")
    payload = base64.b64decode(env["payload"], validate=True)
    sigs = [s for s in env.get("signatures", []) if s.get("keyid") == exporter.key_id]
    if not sigs:
        raise SignatureError(f"the envelope carries no signature by key {exporter.key_id}")
    exporter.verify(base64.b64decode(sigs[0]["sig"], validate=True), pae(INTOTO_PAYLOAD_TYPE, payload))
    statement = parse_canonical(payload)
    (tlog,) = bundle["verificationMaterial"]["tlogEntries"]
    if tlog.get("kindVersion") != TLOG_KIND:
        raise InputError(f"tlog entry kind {tlog.get('kindVersion')!r} is not {TLOG_KIND}")
    ip = tlog["inclusionProof"]
    cp = parse_checkpoint(ip["checkpoint"]["envelope"], log_key_name, log_key)
    if base64.b64decode(ip["rootHash"]) != cp.root or int(ip["treeSize"]) != cp.size:
        raise ProofError("the inclusion proof's root or size is not the checkpoint's")
    body = base64.b64decode(tlog["canonicalizedBody"], validate=True)
    index = int(ip["logIndex"])
    record = parse_record(body)
    if record.index != index:
        raise ProofError(f"the log record is at index {record.index}, the proof at {index}")
    verify_inclusion(index, cp.size, record_leaf(body), [base64.b64decode(h) for h in ip["hashes"]], cp.root)
    entry_id = record.entry_id
    _check_binding(statement, entry_id)
    return Checked(statement, entry_id, index, cp.size)


_ENTRY_URN = entry_uri("")


def _urn_entry_id(value: Any) -> str | None:
    """The entry id an ``urn:evidence-ledger:entry:<id>`` names; None for anything else."""
    if isinstance(value, str) and value.startswith(_ENTRY_URN) and len(value) > len(_ENTRY_URN):
        return value[len(_ENTRY_URN) :]
    return None


def _subject_entry_ids(statement: dict[str, Any]) -> list[str]:
    """The entry ids the statement's subjects name by URN (the entry attesting itself)."""
    subjects = statement.get("subject")
    if not isinstance(subjects, list):
        return []
    ids = (_urn_entry_id(s.get("uri")) if isinstance(s, dict) else None for s in subjects)
    return [i for i in ids if i is not None]


def _entry_predicate_id(statement: dict[str, Any]) -> str | None:
    entry = statement["predicate"].get("entry")
    eid = entry.get("id") if isinstance(entry, dict) else None
    return eid if isinstance(eid, str) and eid else None


def _test_result_id(statement: dict[str, Any]) -> str | None:
    return _urn_entry_id(statement["predicate"].get("url"))


def _vsa_id(statement: dict[str, Any]) -> str | None:
    ids = _subject_entry_ids(statement)
    return ids[0] if len(ids) == 1 else None


# predicateType -> the one field naming the statement's OWN entry (what ``statement_for`` writes there):
# ours ``predicate.entry.id``; test-result ``predicate.url``; the VSA has no such field, so a verdict's
# statement names itself as a subject. Every other id in a predicate (refs, inputAttestations, …) names
# another entry and binds nothing.
_OWN_ENTRY: dict[str, Callable[[dict[str, Any]], str | None]] = {
    ENTRY_PREDICATE: _entry_predicate_id,
    TEST_RESULT_PREDICATE: _test_result_id,
    VSA_PREDICATE: _vsa_id,
}


def _check_binding(statement: Any, entry_id: str) -> None:
    """The statement is about the logged entry: the field naming its own entry (``_OWN_ENTRY``, by
    predicate type) is exactly the logged entry's id, and no subject names another entry."""
    if not isinstance(statement, dict) or statement.get("_type") != STATEMENT_V1:
        got = statement.get("_type") if isinstance(statement, dict) else type(statement).__name__
        raise InputError(f"statement _type {got!r} is not {STATEMENT_V1}")
    ptype = statement.get("predicateType")
    own = _OWN_ENTRY.get(ptype) if isinstance(ptype, str) else None
    if own is None:
        raise InputError(f"predicateType {ptype!r} is none this ledger exports ({sorted(_OWN_ENTRY)})")
    if not isinstance(statement.get("predicate"), dict):
        raise InputError("the statement's predicate is not a JSON object")
    named = own(statement)
    if named is None:
        raise ProofError(
            f"the statement does not name the logged entry {entry_id}: its {ptype} predicate names no "
            "entry of its own"
        )
    if named != entry_id:
        raise ProofError(
            f"the statement does not name the logged entry {entry_id}: it is about entry {named}"
        )
    others = sorted(set(_subject_entry_ids(statement)) - {entry_id})
    if others:
        raise ProofError(
            f"the statement does not name the logged entry {entry_id}: a subject is entry {others[0]}"
        )


def subject_bundles(ledger: Ledger, subject: dict[str, str], *, key: str) -> list[dict[str, Any]]:
    """One bundle per entry of ``subject`` (key entries excepted), in log order; none is an error."""
    entries = [e for e in ledger.query(subject=subject, limit=None) if not e.kind.startswith("key.")]
    if not entries:
        shown = " ".join(f"{k}={v}" for k, v in sorted(subject.items()))
        raise InputError(f"no entries with subject {shown}")
    return [attestation_bundle(ledger, e.entry_id, key=key) for e in entries]
