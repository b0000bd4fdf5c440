"""Offline verification of proof documents: needs only the log's public key (and a held checkpoint)."""

from __future__ import annotations

import base64
import binascii
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ledger.errors import (
    ArtifactMissingError,
    CosignatureQuorumError,
    InputError,
    LedgerError,
    LogInconsistentError,
    ProofError,
    ProofUncheckedEntryError,
    ReceiptMismatchError,
)
from ledger.log import (
    RECEIPT_HEADER,
    LogRecord,
    Receipt,
    parse_checkpoint,
    parse_receipt,
    parse_record,
    parse_verifier_key,
    receipt_names,
    receipt_of_log,
    record_leaf,
    verifier_key,
    verify_consistency,
    verify_inclusion,
)
from ledger.signing import PublicKey, parse_envelope
from ledger.witness import TrustPolicy, check_cosigned

__all__ = [
    "AuditReport",
    "audit_receipts",
    "audit_refusing_server",
    "audit_server",
    "audited_log",
    "check_receipt",
    "require_cosigned",
    "served_record",
    "verify_proof_document",
    "verify_with_policy",
]


def _hashes(doc: dict[str, Any]) -> list[bytes]:
    try:
        return [bytes.fromhex(h) for h in doc["hashes"]]
    except (KeyError, TypeError, ValueError) as e:
        raise ProofError("proof hashes must be a list of hex strings") from e


def _int_field(doc: dict[str, Any], name: str) -> int:
    """A proof document's integer field, exactly an integer: a float (3.9), a string ("3") or a boolean is
    refused, never rounded or parsed into one."""
    if name not in doc:
        raise ProofError(f"the proof document has no {name}")
    value = doc[name]
    if type(value) is not int:
        raise ProofError(f"the proof's {name} must be an integer, not {type(value).__name__} {value!r}")
    return value


def _claimed_size(doc: dict[str, Any], name: str, size: int) -> None:
    """A size the document states beside a signed checkpoint must be that checkpoint's size."""
    if name in doc and _int_field(doc, name) != size:
        raise ProofError(f"the proof's {name} {doc[name]} is not the size of its checkpoint ({size})")


def _is_vkey(text: str) -> bool:
    """A C2SP verifier key (``name+hash+key``), not a base64 raw key (base64 may hold ``+`` too)."""
    parts = text.strip().split("+", 2)
    return len(parts) == 3 and len(parts[1]) == 8 and all(c in "0123456789abcdef" for c in parts[1])


def _trust(public_key: str, key_name: str | None, origin_of: str) -> tuple[str, PublicKey]:
    """The (note key name, public key) to check signatures with: from a C2SP verifier key, or a base64
    key and a name (default: the checkpoint's origin, the name the ledger signs under)."""
    if _is_vkey(public_key):
        name, pub = parse_verifier_key(public_key)
        if key_name is not None and key_name != name:
            raise ProofError(f"--key-name {key_name!r} is not the verifier key's name {name!r}")
        return name, pub
    return key_name or origin_of, PublicKey.from_b64(public_key)


def _origin(note: Any) -> str:
    if not isinstance(note, str):
        raise ProofError("a checkpoint must be a signed note (text)")
    return note.split("\n", 1)[0]


def verify_proof_document(
    doc: dict[str, Any],
    public_key_b64: str,
    key_name: str | None = None,
    held_checkpoint: str | None = None,
) -> dict[str, Any]:
    """Verify an inclusion or consistency proof; returns a summary or raises ProofError.

    ``public_key_b64``: the log key, base64 raw Ed25519 (then ``key_name`` names it, default the
    checkpoint's origin) or its C2SP verifier key ``name+hash+key``. An inclusion proof must carry the
    entry it names: its log record (the leaf) and its envelope (the record names its BLAKE3 id).
    """
    if not isinstance(doc, dict):
        raise ProofError("a proof document must be a JSON object")
    try:
        return _verify_document(doc, public_key_b64, key_name, held_checkpoint)
    except (KeyError, TypeError, ValueError, AttributeError) as e:  # a field missing or of the wrong type
        raise ProofError(f"malformed proof document: {type(e).__name__}: {e}") from e


def _checked_record(doc: dict[str, Any]) -> tuple[LogRecord, bytes]:
    """The log record the inclusion proof is for, checked against the envelope and the document's claims;
    ``ProofUncheckedEntryError`` when the document does not carry both."""
    envelope, record_b64 = doc.get("envelope"), doc.get("record")
    if not isinstance(envelope, str) or not isinstance(record_b64, str):
        raise ProofUncheckedEntryError(
            "the proof document does not carry the entry's envelope and log record, so the entry it names "
            "cannot be checked"
        )
    try:
        record_bytes = base64.b64decode(record_b64, validate=True)
    except (ValueError, binascii.Error) as e:
        raise ProofUncheckedEntryError(f"the proof's log record is not base64: {e}") from e
    record = parse_record(record_bytes)
    try:
        record.check_envelope(envelope.encode())
    except ProofError as e:
        raise ProofUncheckedEntryError(e.message) from e
    if "entry_id" in doc and doc["entry_id"] != record.entry_id:
        raise ProofUncheckedEntryError("the proof's entry_id is not the one its log record names")
    if _int_field(doc, "leaf_index") != record.index:
        raise ProofError(f"leaf_index {doc['leaf_index']} is not the record's index {record.index}")
    leaf = record_leaf(record_bytes)
    if "leaf_hash" in doc and doc["leaf_hash"] != leaf.hex():
        raise ProofError("the proof's leaf_hash is not the hash of its log record")
    return record, leaf


def _verify_document(
    doc: dict[str, Any], public_key: str, key_name: str | None, held_checkpoint: str | None
) -> dict[str, Any]:
    kind = doc.get("type")
    if kind == "inclusion":
        name, pub = _trust(public_key, key_name, _origin(doc["checkpoint"]))
        cp = parse_checkpoint(doc["checkpoint"], name, pub)
        if held_checkpoint is not None:
            held = parse_checkpoint(held_checkpoint, name, pub)
            if (held.origin, held.size, held.root) != (cp.origin, cp.size, cp.root):
                raise ProofError("the proof's checkpoint is not the checkpoint you hold")
        _claimed_size(doc, "tree_size", cp.size)
        record, leaf = _checked_record(doc)
        verify_inclusion(record.index, cp.size, leaf, _hashes(doc), cp.root)
        return {
            "ok": True,
            "type": "inclusion",
            "entry_id": record.entry_id,
            "leaf_index": record.index,
            "logged_at": record.logged_at,
            "tree_size": cp.size,
            "origin": cp.origin,
            "root": base64.b64encode(cp.root).decode(),
            "detail": f"entry {record.entry_id} (logged {record.logged_at}) is leaf {record.index} "
            f"of tree size {cp.size}",
        }
    if kind == "consistency":
        name, pub = _trust(public_key, key_name, _origin(doc["new_checkpoint"]))
        old = parse_checkpoint(doc["old_checkpoint"], name, pub)
        new = parse_checkpoint(doc["new_checkpoint"], name, pub)
        if old.origin != new.origin:
            raise ProofError("the two checkpoints are of different logs (origins differ)")
        if held_checkpoint is not None:
            held = parse_checkpoint(held_checkpoint, name, pub)
            if (held.origin, held.size, held.root) != (old.origin, old.size, old.root):
                raise ProofError("the proof's old checkpoint is not the checkpoint you hold (forked log?)")
        _claimed_size(doc, "old_size", old.size)
        _claimed_size(doc, "new_size", new.size)
        verify_consistency(old.size, new.size, old.root, new.root, _hashes(doc))
        return {
            "ok": True,
            "type": "consistency",
            "old_size": old.size,
            "new_size": new.size,
            "detail": f"tree size {old.size} is a prefix of tree size {new.size}",
        }
    raise ProofError(f"unknown proof type {kind!r}")


def require_cosigned(note: Any, policy: TrustPolicy) -> str:
    """The log's verifier key for ``note`` when the trust policy accepts it (log signature and quorum);
    ``CosignatureQuorumError`` naming each missing or invalid witness otherwise."""
    if not isinstance(note, str):
        raise ProofError("a checkpoint must be a signed note (text)")
    cp, problems = check_cosigned(note, policy)
    if problems or cp is None:
        raise CosignatureQuorumError(f"checkpoint refused by {policy.source}: " + "; ".join(problems))
    log = policy.log_for(cp.origin)
    assert log is not None  # check_cosigned accepted it under this log
    return verifier_key(*log)


def verify_with_policy(
    doc: dict[str, Any], policy: TrustPolicy, held_checkpoint: str | None = None
) -> dict[str, Any]:
    """``verify_proof_document`` with the log key from a trust policy, the proof's checkpoint (for a
    consistency proof: its new one) accepted only when cosigned by the policy's quorum."""
    if not isinstance(doc, dict):
        raise ProofError("a proof document must be a JSON object")
    note = doc.get("new_checkpoint") if doc.get("type") == "consistency" else doc.get("checkpoint")
    vkey = require_cosigned(note, policy)
    result = verify_proof_document(doc, vkey, None, held_checkpoint)
    result["trust_policy"] = {"source": policy.source, "quorum": policy.quorum, "ok": True}
    return result


# --- receipts: a collector's check that what the log received is still there ----------------------------


def check_receipt(doc: Any, public_key: str, entry_id: str, *, origin: str | None = None) -> Receipt:
    """The receipt a log returned for the entry ``entry_id`` it was sent, checked before anyone keeps it:
    present, signed by the log key (``public_key``: its C2SP verifier key, whose name is the log's origin;
    or base64 with ``origin``), of that log, and naming ``entry_id``. ``ReceiptMismatchError`` otherwise."""
    if not isinstance(doc, dict):
        raise ReceiptMismatchError(f"the log returned no receipt for entry {entry_id}")
    try:
        name, pub = _trust(public_key, None, origin or str(doc.get("origin")))
        receipt = parse_receipt(doc, pub, key_name=name)
    except LedgerError as e:
        raise ReceiptMismatchError(
            f"the receipt returned for entry {entry_id} is not one the log signed: {e.message}"
        ) from e
    want = origin or name
    if receipt.origin != want:
        raise ReceiptMismatchError(
            f"the receipt returned for entry {entry_id} is of the log {receipt.origin!r}, not {want!r}"
        )
    if receipt.record.entry_id != entry_id:
        raise ReceiptMismatchError(
            f"the receipt returned for entry {entry_id} names another entry, {receipt.record.entry_id} "
            f"(index {receipt.record.index})"
        )
    return receipt


@dataclass
class AuditReport:
    origin: str
    receipts: int = 0  # receipts of this log checked
    other_logs: int = 0  # receipts of other logs, set aside (each named in other_origins)
    newest_index: int | None = None
    tree_size: int | None = None
    held_checkpoint: int | None = None  # the size of the checkpoint the home holds, checked (own log)
    problems: list[dict[str, Any]] = field(default_factory=list)
    other_origins: dict[str, int] = field(default_factory=dict)  # origin -> receipts of it set aside
    server: dict[str, str] | None = None  # an audit of a server: the log it serves now (origin, vkey)

    def __bool__(self) -> bool:
        return not self.problems

    def problem(self, code: str, message: str, entry_id: str | None = None, index: Any = None) -> None:
        self.problems.append({"entry_id": entry_id, "index": index, "code": code, "message": message})

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": not self.problems,
            "origin": self.origin,
            "receipts": self.receipts,
            "other_logs": self.other_logs,
            "other_origins": self.other_origins,
            "newest_index": self.newest_index,
            "tree_size": self.tree_size,
            "held_checkpoint": self.held_checkpoint,
            "server": self.server,
            "problems": self.problems,
        }


RECEIPTS_UNCHECKED = "receipts-unchecked"
_FIELDS = ("type", "origin", "index", "entry_id", "logged_at")


@dataclass(frozen=True)
class _Claims:
    """What a kept receipt's signed note says (read, not yet verified): its origin, index and entry id. The
    JSON fields beside the note are unsigned: a receipt is grouped and told apart by these, never by them.
    Whose receipt it is, is ``receipt_of_log``'s to say (one reading with the signing guard)."""

    origin: str | None
    index: int | None
    entry_id: str | None

    def label(self, doc: Any) -> str:
        """The log a receipt set aside is of: the one its signed note names, else its JSON field, else
        any other it names (``receipt_names``)."""
        if self.origin is not None:
            return self.origin
        outer = doc.get("origin") if isinstance(doc, dict) else None
        if isinstance(outer, str) and outer:
            return outer
        names = sorted(receipt_names(doc, "")[0])
        return names[0] if names else "(names no log)"


def _claims(doc: Any) -> _Claims:
    note = doc.get("note") if isinstance(doc, dict) else None
    if not isinstance(note, str):
        return _Claims(None, None, None)
    lines = note.partition("\n\n")[0].split("\n")
    if lines[0] != RECEIPT_HEADER or len(lines) < 4:
        return _Claims(None, None, None)
    index = int(lines[2]) if lines[2].isascii() and lines[2].isdigit() else None
    return _Claims(lines[1], index, lines[3])


def _signed_doc(doc: Any) -> dict[str, Any] | None:
    """The receipt as its signed note and record say it (its unsigned JSON fields taken from them), for
    its signature to be checked apart from edits of those fields; None when it has no readable record."""
    claims = _claims(doc)
    if claims.origin is None or not isinstance(doc, dict):
        return None
    try:
        record = parse_record(base64.b64decode(str(doc.get("record")), validate=True))
    except (LedgerError, ValueError, binascii.Error):
        return None
    return {
        **doc,
        "type": "receipt",
        "origin": claims.origin,
        "index": record.index,
        "entry_id": record.entry_id,
        "logged_at": record.logged_at,
    }


def _origins(receipts: Sequence[dict[str, Any]]) -> Counter[str]:
    """The logs the kept receipts are of, by their signed notes (``_Claims.label``)."""
    return Counter(_claims(doc).label(doc) for doc in receipts)


def _named(origins: Mapping[str, int]) -> str:
    return ", ".join(f"{o} ({n})" for o, n in sorted(origins.items(), key=lambda x: (-x[1], x[0])))


def _where(doc: Any) -> tuple[str | None, Any]:
    """The entry id and index a receipt's problem is told under: its signed note's, else its JSON's."""
    claims = _claims(doc)
    outer = doc if isinstance(doc, dict) else {}
    eid = claims.entry_id if claims.entry_id is not None else outer.get("entry_id")
    return (str(eid) if eid is not None else None), (
        claims.index if claims.index is not None else outer.get("index")
    )


def _receipts_of(
    report: AuditReport, receipts: Iterable[dict[str, Any]], origin: str | None, name: str | None
) -> list[dict[str, Any]]:
    """The kept receipts of the log ``origin`` (its key named ``name``: ``receipt_of_log``, the signing
    guard's reading too); every other one is set aside on ``report``, counted by the log it names (None: no
    log known, all set aside)."""
    ours: list[dict[str, Any]] = []
    for doc in receipts:
        if origin is not None and name is not None and receipt_of_log(doc, origin, name):
            ours.append(doc)
            continue
        other = _claims(doc).label(doc)
        report.other_logs += 1
        report.other_origins[other] = report.other_origins.get(other, 0) + 1
    return ours


def audit_receipts(
    receipts: Iterable[dict[str, Any]],
    public_key: str | None,
    fetch: Callable[[str], dict[str, Any] | None],
    *,
    origin: str,
    columns: Callable[[str], LogRecord | None] | None = None,
    expected: str | None = None,
    artifact_served: Callable[[str], bool] | None = None,
) -> AuditReport:
    """Check every receipt of the log ``origin``: signed by the log key, and its entry still in the log
    with the same log record (index, logged_at, entry id …), proved included under a checkpoint the log
    signs now. The newest receipts matter most (no checkpoint anyone holds may cover them yet): each is
    checked, whatever its age. A missing entry, an altered record or a bad proof is a problem; so is a log
    that cannot answer for one entry (its error, that entry's problem: the other receipts are still checked).

    A receipt is the log's when its signed note, a signature on it or its JSON ``origin`` names the log, or
    when it names no log at all (``receipt_of_log``: the signing guard's reading too); it is told apart
    from the others by the record it signs (exact copies are checked once). Its JSON fields are not signed:
    one that disagrees with the signed note and record is a problem (``receipt-mismatch``), and the entry
    the log signed is checked all the same.

    Receipts of other logs are set aside, counted by origin (``other_origins``); when every receipt kept is
    of another log, nothing was checked and that is a problem (``receipts-unchecked``), never an "ok"; so is
    no receipt of the log at all when some are ``expected`` (the reason: a key pinned for it, a home that
    appended to it). ``public_key`` None: the log's key is not known (the log that signed the receipts is not
    the one audited any more: ``audit_server``); each receipt is then a problem, its entry checked for only
    by id.

    The receipt is compared with the record the leaf commits (the proof carries its bytes), never with
    what readers are shown; ``columns(entry_id)``: the record as the log's readers see it (a local audit:
    its row's index, ``logged_at``, kind and signer columns; a server's ``GET /v1/entries/{id}``), which
    must be the committed one too.

    ``artifact_served(digest)``: whether the log's store still serves an artifact (a server's ``HEAD
    /v1/artifacts/<digest>``). With it, every stored artifact a received entry names (its envelope, as the
    inclusion proof carries it, names them) must still be served: one that is not is a problem
    (``artifact-missing``), named for each entry naming it; each digest is asked once."""
    report = AuditReport(origin)
    named: dict[str, list[LogRecord]] = {}  # digest -> the received entries naming it
    name, pub = _trust(public_key, None, origin) if public_key is not None else (origin, None)
    ours = _receipts_of(report, receipts, origin, name)
    if not ours and report.other_logs:
        report.problem(
            RECEIPTS_UNCHECKED,
            f"none of the {report.other_logs} receipts this home keeps is of the log {origin}, so none was "
            f"checked: they are of {_named(report.other_origins)} (audit each log where it is served: "
            "`ledger audit --server URL`, with its --public-key)",
        )
    elif not ours and expected is not None:
        report.problem(
            RECEIPTS_UNCHECKED,
            f"this home keeps no receipt of the log {origin}, so nothing was checked, although {expected}: "
            "HOME/receipts.jsonl removed or emptied?",
        )
    if pub is None:
        seen_ids: set[str | None] = set()
        for doc in ours:
            entry_id, index = _where(doc)
            if entry_id in seen_ids:
                continue
            seen_ids.add(entry_id)
            report.receipts += 1
            try:
                held = "no longer has it" if fetch(str(entry_id)) is None else "holds it under another log"
            except LedgerError as e:
                held = f"cannot say whether it has it ({e.code}: {e.message})"
            report.problem(
                ReceiptMismatchError.code,
                f"entry {entry_id} was received by the log {origin} (index {index}); the log audited is "
                f"another one and {held}",
                entry_id,
                index,
            )
        return report
    assert public_key is not None
    seen: set[bytes] = set()
    for doc in ours:
        entry_id, index = _where(doc)

        def problem(code: str, message: str, index: Any = index, eid: str | None = entry_id) -> None:
            report.problem(code, message, eid, index)

        try:
            receipt = parse_receipt(doc, pub, key_name=name)
            edited: list[str] = []
        except LedgerError as e:
            signed = _signed_doc(doc)
            try:  # only its unsigned JSON fields edited? the signed receipt is still checked
                if signed is None:
                    raise e
                receipt = parse_receipt(signed, pub, key_name=name)
            except LedgerError:
                report.receipts += 1
                problem(e.code, f"the receipt is not one this log signed: {e.message}")
                continue
            edited = [
                f"{k} {doc.get(k)!r} (signed: {signed[k]!r})" for k in _FIELDS if doc.get(k) != signed[k]
            ]
        rec = receipt.record
        if rec.to_bytes() in seen and not edited:
            continue  # the same signed receipt kept twice: checked once
        seen.add(rec.to_bytes())
        report.receipts += 1
        if edited:
            problem(
                ReceiptMismatchError.code,
                f"the receipt's unsigned fields disagree with the record the log signed for entry "
                f"{rec.entry_id}: {', '.join(edited)}",
                rec.index,
                rec.entry_id,
            )
        if receipt.origin != origin:
            problem(
                ReceiptMismatchError.code,
                f"the log key signed this receipt for the log {receipt.origin!r}, not {origin!r}",
                rec.index,
                rec.entry_id,
            )
            continue
        if report.newest_index is None or rec.index > report.newest_index:
            report.newest_index = rec.index

        def entry_problem(code: str, message: str, rec: LogRecord = rec) -> None:
            report.problem(code, message, rec.entry_id, rec.index)

        try:
            proof = fetch(rec.entry_id)
        except LedgerError as e:
            entry_problem(e.code, f"the log cannot prove entry {rec.entry_id} included: {e.message}")
            continue
        if proof is None:
            entry_problem(
                ReceiptMismatchError.code, f"the log no longer has entry {rec.entry_id} it received"
            )
            continue
        try:
            result = verify_proof_document(proof, public_key, name)
            got = base64.b64decode(str(proof["record"]), validate=True)
        except (LedgerError, KeyError, ValueError) as e:
            entry_problem(getattr(e, "code", ProofError.code), f"the log's inclusion proof fails: {e}")
            continue
        if got != rec.to_bytes() or result["origin"] != origin:
            entry_problem(
                ReceiptMismatchError.code,
                f"the log holds entry {rec.entry_id} at index {result['leaf_index']} logged "
                f"{result['logged_at']}; its receipt says index {rec.index} logged {rec.logged_at}",
            )
            continue
        report.tree_size = max(report.tree_size or 0, int(result["tree_size"]))
        if artifact_served is not None:
            for digest in _stored_artifacts(str(proof["envelope"])):
                named.setdefault(digest, []).append(rec)
        if columns is None:
            continue
        try:
            shown = columns(rec.entry_id)
        except LedgerError as e:
            entry_problem(e.code, f"the log cannot show entry {rec.entry_id} to its readers: {e.message}")
            continue
        if shown is not None and shown != rec:
            entry_problem(
                ReceiptMismatchError.code,
                f"the log shows entry {rec.entry_id} at index {shown.index} logged {shown.logged_at}, kind "
                f"{shown.kind}, signer {shown.signer}; the record its leaf commits (and its receipt) says "
                f"index {rec.index} logged {rec.logged_at}, kind {rec.kind}, signer {rec.signer}",
            )
    if artifact_served is not None:
        _audit_artifacts(report, named, artifact_served)
    return report


def _stored_artifacts(envelope: str) -> list[str]:
    """The digests of the artifacts an entry's envelope names as stored (not recorded by reference only);
    the envelope is the one its log record names (checked with the inclusion proof)."""
    try:
        statement = parse_envelope(envelope.encode()).statement()
    except LedgerError:
        return []
    artifacts = statement.get("artifacts") if isinstance(statement, dict) else None
    return [
        a["digest"]
        for a in (artifacts if isinstance(artifacts, list) else [])
        if isinstance(a, dict) and isinstance(a.get("digest"), str) and a.get("stored", True) is not False
    ]


def _audit_artifacts(
    report: AuditReport, named: Mapping[str, list[LogRecord]], served: Callable[[str], bool]
) -> None:
    """A problem for each received entry naming an artifact the log no longer serves (``artifact-missing``),
    or cannot say it does (its error's code); one question per digest."""
    for digest, records in named.items():
        try:
            held = served(digest)
            code = ArtifactMissingError.code
            why = "the log no longer serves it: its bytes are gone from the store"
        except LedgerError as e:
            held, code, why = False, e.code, f"the log cannot say it still serves it: {e.message}"
        if held:
            continue
        for rec in dict.fromkeys(records):
            report.problem(
                code,
                f"entry {rec.entry_id} names the artifact {digest}, which it was received with; {why}",
                rec.entry_id,
                rec.index,
            )


def _receipts_verify(receipts: Sequence[dict[str, Any]], origin: str, pub: PublicKey) -> bool:
    """Whether a receipt of ``origin`` kept here (by its signed note) is signed by ``pub`` (under the origin
    as key name)."""
    for doc in receipts:
        signed = _signed_doc(doc)
        if signed is not None and signed["origin"] == origin:
            try:
                parse_receipt(signed, pub, key_name=origin)
            except LedgerError:
                continue
            return True
    return False


UNKNOWN_LOG = "(log not known)"  # the origin an audit names when it cannot tell which log it checks


def audit_refusing_server(
    receipts: Sequence[dict[str, Any]],
    *,
    server: str,
    refusal: str,
    own_origin: str | None,
    shown: Callable[[str], dict[str, Any] | None],
    public_key: str | None = None,
) -> AuditReport:
    """The audit of a server that refuses to sign its log (``log-inconsistent``: its log no longer extends
    a checkpoint it handed out — entries it had vouched for were lost or rewritten). Nothing it says can be
    proved, so that refusal is the first problem; and each entry a kept receipt of the server's log names
    that the server no longer shows (``GET /v1/entries/{id}``, no signature needed) is named as lost. Never
    "ok": the entries it still shows are unproven.

    The server's log is the pinned one (``public_key``: ``--public-key``, or the key this home recorded for
    the server, ``audited_log``'s rule without a log served), its receipts checked against that key; without
    one, the one log other than the home's own (``own_origin``) whose receipts the home keeps. Receipts of
    other logs (another server's) are set aside, counted by origin, never blamed on this server; with no key
    known and receipts of several other logs, which is the server's cannot be told: that is said
    (``receipts-unchecked``) and none is named lost."""
    candidates: list[str] = []
    if public_key is not None:
        origin = (
            parse_verifier_key(public_key)[0]
            if _is_vkey(public_key)
            else _signed_origin(receipts, PublicKey.from_b64(public_key))
        )
    else:
        candidates = sorted(o for o in _origins(receipts) if o != own_origin)
        origin = candidates[0] if len(candidates) == 1 else None
    report = AuditReport(origin=origin if origin is not None else UNKNOWN_LOG)
    report.server = {"url": server, "origin": "", "vkey": ""}
    report.problem(
        LogInconsistentError.code,
        f"{server} refuses to sign its log, so no entry it received can be proved included: {refusal}",
    )
    name, pub = _trust(public_key, None, origin) if public_key is not None and origin else (origin, None)
    ours = _receipts_of(report, receipts, origin, name)
    if not ours and report.other_logs:
        if origin is not None:
            why = f"none of the {report.other_logs} receipts this home keeps is of the log {origin}"
        elif public_key is not None:
            why = f"no receipt this home keeps verifies under the log key pinned for {server} ({public_key})"
        elif not candidates:
            why = "this home keeps no receipt of a log other than its own"
        else:
            why = (
                f"no log key is known for {server} (none recorded in HOME/log-keys.json, no --public-key) "
                "and the receipts this home keeps are of several logs: which is its log cannot be told "
                "(give its --public-key)"
            )
        report.problem(
            RECEIPTS_UNCHECKED,
            f"{why}, so none was checked (none is named lost); they are of {_named(report.other_origins)}",
        )
    seen: set[str] = set()  # entries judged (a receipt the key refuses shadows no other of its entry)
    for doc in ours:
        entry_id, index = _where(doc)
        if entry_id is not None and entry_id in seen:
            continue
        if pub is not None:
            try:  # its signed note (its unsigned JSON fields aside) is the log key's
                parse_receipt(_signed_doc(doc) or doc, pub, key_name=str(name))
            except LedgerError as e:
                report.receipts += 1
                report.problem(
                    e.code, f"the receipt is not one this log signed: {e.message}", entry_id, index
                )
                continue
        if entry_id is None:
            continue  # no key to refuse it with, no entry to ask for
        seen.add(entry_id)
        report.receipts += 1
        if isinstance(index, int) and (report.newest_index is None or index > report.newest_index):
            report.newest_index = index
        if shown(entry_id) is None:
            report.problem(
                ReceiptMismatchError.code,
                f"the log no longer has entry {entry_id} it received (index {index})",
                entry_id,
                index,
            )
    return report


def _signed_origin(receipts: Sequence[dict[str, Any]], pub: PublicKey) -> str | None:
    """The one log whose kept receipts verify under ``pub`` (a base64 log key names no origin), None when
    none does; several is an ``InputError`` (the key cannot say which)."""
    signed = sorted(o for o in _origins(receipts) if _receipts_verify(receipts, o, pub))
    if len(signed) > 1:
        raise InputError(
            f"receipts of several logs ({', '.join(signed)}) verify under this key: give the log's "
            "verifier key (origin+hash+key, `ledger keys export log --vkey`) to say which"
        )
    return signed[0] if signed else None


def audited_log(
    receipts: Sequence[dict[str, Any]],
    *,
    public_key: str | None,
    served_origin: str,
    served_vkey: str,
    own_origin: str | None = None,
) -> tuple[str, str | None]:
    """The log (origin, key) whose kept receipts an audit of a server checks, never merely the one the
    server names now (a server whose log was wiped and re-initialised names another origin and key, and
    its receipts would all be set aside: an audit that checked nothing).

    ``public_key`` (pinned: ``--public-key``, or the key the home recorded for that server): a verifier key
    names its origin; a base64 key, the origin of the receipts it signed (the served log's, when it is the
    served key). Without one, the origin comes from the receipts kept: the served log's when the home keeps
    receipts of it (its key is then the served one), else the one other log (``own_origin``, the home's own
    log, aside) whose receipts it keeps, with its key unknown (None)."""
    served_name, served_pub = parse_verifier_key(served_vkey)
    if public_key is not None:
        if _is_vkey(public_key):
            return parse_verifier_key(public_key)[0], public_key
        pub = PublicKey.from_b64(public_key)
        if pub.raw == served_pub.raw and (
            served_origin == served_name or _receipts_verify(receipts, served_origin, pub)
        ):
            return served_origin, public_key
        return (_signed_origin(receipts, pub) or served_origin), public_key
    origins = _origins(receipts)
    if served_origin in origins:
        return served_origin, served_vkey
    candidates = [o for o in origins if o != own_origin]
    if len(candidates) == 1:
        return candidates[0], None
    return served_origin, served_vkey  # none kept, or several: audit_receipts names what it set aside


def served_record(entry: Any, entry_id: str) -> LogRecord | None:
    """The log record a server shows its readers for an entry (``GET /v1/entries/{id}``: ``seq``,
    ``logged_at``, ``id``, ``kind``, ``signer``); None when it has none. A field missing or mistyped is a
    ``ReceiptMismatchError`` (what the server shows cannot be told to be the signed record)."""
    if entry is None:
        return None
    if not isinstance(entry, dict):
        raise ReceiptMismatchError(f"the server shows entry {entry_id} as no JSON object")
    want = {"seq": int, "logged_at": str, "id": str, "kind": str, "signer": str}
    bad = [k for k, t in want.items() if type(entry.get(k)) is not t]
    if bad:
        raise ReceiptMismatchError(
            f"the server shows entry {entry_id} without a well-typed {', '.join(bad)}: its record cannot be "
            "compared with the receipt"
        )
    return LogRecord(entry["seq"], entry["logged_at"], entry["id"], entry["kind"], entry["signer"])


def _raw(key: str) -> bytes:
    """The raw Ed25519 key of a verifier key or a base64 key."""
    return parse_verifier_key(key)[1].raw if _is_vkey(key) else PublicKey.from_b64(key).raw


def audit_server(
    receipts: Sequence[dict[str, Any]],
    fetch: Callable[[str], dict[str, Any] | None],
    *,
    server: str,
    served_origin: str,
    served_vkey: str,
    public_key: str | None = None,
    own_origin: str | None = None,
    shown: Callable[[str], dict[str, Any] | None] | None = None,
    artifact_served: Callable[[str], bool] | None = None,
) -> AuditReport:
    """Check the receipts of the log a server was sent entries to (``audited_log``) against the log it
    serves now: a server that now serves another log (another origin or key) is a problem, and so is every
    kept receipt whose entry it no longer proves included as received. ``public_key`` (pinned, or recorded
    for the server when this home appended to it) says receipts of that log are expected: none kept is
    ``receipts-unchecked``. ``shown(entry_id)``: the server's ``GET /v1/entries/{id}`` (None: no such
    entry), whose index, ``logged_at``, kind and signer must be the signed record's (``served_record``).
    ``artifact_served(digest)``: the server's ``HEAD /v1/artifacts/<digest>``; every stored artifact a
    received entry names must still be served (``audit_receipts``: ``artifact-missing``)."""
    origin, key = audited_log(
        receipts,
        public_key=public_key,
        served_origin=served_origin,
        served_vkey=served_vkey,
        own_origin=own_origin,
    )
    expected = (
        f"the log key {public_key} is pinned for {server} (recorded when this home appended there, or given)"
        if public_key is not None
        else None
    )

    def columns(entry_id: str) -> LogRecord | None:
        assert shown is not None
        return served_record(shown(entry_id), entry_id)

    report = audit_receipts(
        receipts,
        key,
        fetch,
        origin=origin,
        columns=columns if shown else None,
        expected=expected,
        artifact_served=artifact_served,
    )
    report.server = {"url": server, "origin": served_origin, "vkey": served_vkey}
    if key is None or origin != served_origin or _raw(key) != _raw(served_vkey):
        known = f"(key {key})" if key is not None else "(its key: give --public-key to check its signatures)"
        report.problems.insert(
            0,
            {
                "entry_id": None,
                "index": None,
                "code": ReceiptMismatchError.code,
                "message": f"{server} serves the log {served_origin} (key {served_vkey}), not the log "
                f"{origin} {known} that this audit checks: the log the entries were sent to was replaced, "
                "or the server is another one",
            },
        )
    return report
