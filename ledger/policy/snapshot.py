"""The evidence a policy sees: a subject's entries as the log stood at one size, parsed for evaluation."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from ledger.entries import KIND_MODELS, parse_time
from ledger.errors import EntryNotFoundError, IntegrityError, SignatureError
from ledger.signing import PublicKey, pae

if TYPE_CHECKING:
    from ledger.keyring import Keyring
    from ledger.service import Ledger

__all__ = ["Evidence", "Snapshot", "check_signature", "evidence_from_row", "load_snapshot"]


@cache
def _defaults(kind: str) -> dict[str, Any]:
    """Every field of a kind's payload model with its default (None where required), so CEL sees them all."""
    model = KIND_MODELS.get((kind, 1))
    if model is None:
        return {}
    out: dict[str, Any] = {}
    for name, f in model.model_fields.items():
        out[name] = None if f.is_required() else f.get_default(call_default_factory=True)
    return out


@dataclass(eq=False)
class Evidence:
    """One logged entry, parsed once; ``view()`` is what CEL conditions see as ``e``."""

    seq: int
    id: str
    kind: str
    signer: str
    logged_at: str
    statement: dict[str, Any]
    payload_type: str
    payload_bytes: bytes
    signature: bytes
    signer_name: str = ""
    roles: tuple[str, ...] = ()
    in_subject: bool = True
    _view: dict[str, Any] | None = field(default=None, repr=False)
    _collected: datetime | None = field(default=None, repr=False)
    _logged: datetime | None = field(default=None, repr=False)

    @property
    def subject(self) -> dict[str, str]:
        s: dict[str, str] = self.statement["subject"]
        return s

    @property
    def payload(self) -> dict[str, Any]:
        p: dict[str, Any] = self.statement["payload"]
        return p

    @property
    def collected_at(self) -> str:
        c: str = self.statement["collected_at"]
        return c

    @property
    def collected_time(self) -> datetime:
        if self._collected is None:
            self._collected = parse_time(self.collected_at)
        return self._collected

    @property
    def logged_time(self) -> datetime:
        if self._logged is None:
            self._logged = parse_time(self.logged_at)
        return self._logged

    def refs(self, rel: str) -> list[str]:
        return [r["id"] for r in self.statement.get("refs", ()) if r["rel"] == rel]

    @property
    def artifacts(self) -> list[dict[str, Any]]:
        a: list[dict[str, Any]] = self.statement.get("artifacts", [])
        return a

    def view(self) -> dict[str, Any]:
        if self._view is None:
            refs: dict[str, list[str]] = {}
            for r in self.statement.get("refs", ()):
                refs.setdefault(r["rel"], []).append(r["id"])
            self._view = {
                "id": self.id,
                "seq": self.seq,
                "kind": self.kind,
                "subject": self.subject,
                "payload": {**_defaults(self.kind), **self.payload},
                "refs": refs,
                "signer": self.signer_name,
                "roles": list(self.roles),
                "collected_at": self.collected_at,
                "logged_at": self.logged_at,
                "artifacts": [a["name"] for a in self.artifacts],
                "in_subject": self.in_subject,
            }
        return self._view

    def verify_signature(self, public: PublicKey) -> None:
        """Re-verify the Ed25519 signature over the DSSE PAE of the stored payload bytes."""
        public.verify(self.signature, pae(self.payload_type, self.payload_bytes))


@dataclass
class Snapshot:
    """The entries a verdict reads, as of ``size``, with the keyring and reference time at that size."""

    size: int
    subject: dict[str, str]
    entries: list[Evidence]
    keyring: Keyring
    reference_time: str
    by_id: dict[str, Evidence] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.by_id = {e.id: e for e in self.entries}


def _columns(t: Any) -> list[Any]:
    return [t.c.seq, t.c.entry_id, t.c.kind, t.c.signer, t.c.logged_at, t.c.envelope]


def evidence_from_row(row: Any) -> Evidence:
    """Parse a log row (or a LoggedEntry: same attribute names) for evaluation."""
    return _parse_row(row)


def _parse_row(row: Any) -> Evidence:
    try:
        env = json.loads(row.envelope)
        payload_bytes = base64.b64decode(env["payload"], validate=True)
        sig = env["signatures"][0]
        statement = json.loads(payload_bytes)
        return Evidence(
            seq=row.seq,
            id=row.entry_id,
            kind=row.kind,
            signer=row.signer,
            logged_at=row.logged_at,
            statement=statement,
            payload_type=env["payloadType"],
            payload_bytes=payload_bytes,
            signature=base64.b64decode(sig["sig"], validate=True),
        )
    except (ValueError, KeyError, IndexError, TypeError) as e:
        raise IntegrityError(f"stored entry at seq {row.seq} cannot be parsed: {e}") from e


def _subject_filter(t_entries: Any, t_subjects: Any, subject: dict[str, str]) -> list[Any]:
    out = []
    for k, v in subject.items():
        out.append(
            t_entries.c.seq.in_(
                sa.select(t_subjects.c.seq).where(t_subjects.c.field == k, t_subjects.c.value == v)
            )
        )
    return out


def load_snapshot(
    ledger: Ledger,
    subject: dict[str, str],
    size: int | None = None,
    *,
    extra_kinds_by_host: Iterable[str] = ("kernel.log",),
) -> Snapshot:
    """The subject's entries, the entries they reference, the entries that reference them, and the
    GPU-relevant host entries (kernel logs) of the hosts they name — all as of ``size``."""
    from ledger.service import T_ENTRIES, T_REFS, T_SUBJECTS

    if not subject:
        raise EntryNotFoundError("a verdict needs a subject, e.g. --subject campaign=NAME")
    current = ledger.size()
    n = current if size is None else size
    if not 0 < n <= current:
        raise EntryNotFoundError(f"the log has {current} entries; cannot evaluate it at size {n}")
    cols = _columns(T_ENTRIES)
    in_subject = _subject_filter(T_ENTRIES, T_SUBJECTS, subject)
    subject_seqs = sa.select(T_ENTRIES.c.seq).where(*in_subject, T_ENTRIES.c.seq < n)
    subject_ids = sa.select(T_ENTRIES.c.entry_id).where(*in_subject, T_ENTRIES.c.seq < n)
    rows: dict[int, Any] = {}
    with ledger.engine.connect() as conn:
        for r in conn.execute(sa.select(*cols).where(*in_subject, T_ENTRIES.c.seq < n)):
            rows[r.seq] = r
        if not rows:
            shown = " ".join(f"{k}={v}" for k, v in sorted(subject.items()))
            raise EntryNotFoundError(
                f"no entries for subject {shown} in the first {n} entries of the log",
                hint="check the subject with `ledger log --subject FIELD=VALUE`",
            )
        referrers = sa.select(*cols).where(
            T_ENTRIES.c.seq < n,
            T_ENTRIES.c.seq.in_(sa.select(T_REFS.c.seq).where(T_REFS.c.target_id.in_(subject_ids))),
        )
        targets = sa.select(*cols).where(
            T_ENTRIES.c.seq < n,
            T_ENTRIES.c.entry_id.in_(sa.select(T_REFS.c.target_id).where(T_REFS.c.seq.in_(subject_seqs))),
        )
        for q in (referrers, targets):
            for r in conn.execute(q):
                rows.setdefault(r.seq, r)
        last = conn.execute(sa.select(T_ENTRIES.c.logged_at).where(T_ENTRIES.c.seq == n - 1)).scalar_one()
    entries = [_parse_row(rows[s]) for s in sorted(rows)]
    for e in entries:
        e.in_subject = all(e.subject.get(k) == v for k, v in subject.items())
    hosts = sorted({e.subject["host"] for e in entries if "host" in e.subject})
    kinds = list(extra_kinds_by_host)
    if hosts and kinds:
        seen = {e.seq for e in entries}
        with ledger.engine.connect() as conn:
            q = sa.select(*cols).where(
                T_ENTRIES.c.seq < n,
                T_ENTRIES.c.kind.in_(kinds),
                T_ENTRIES.c.seq.in_(
                    sa.select(T_SUBJECTS.c.seq).where(
                        T_SUBJECTS.c.field == "host", T_SUBJECTS.c.value.in_(hosts)
                    )
                ),
            )
            extra = [_parse_row(r) for r in conn.execute(q) if r.seq not in seen]
            for e in extra:
                e.in_subject = False
        if extra:
            entries = sorted([*entries, *extra], key=lambda e: e.seq)
    ring = ledger.keyring(at_size=n)
    for e in entries:
        rec = ring.keys.get(e.signer)  # type: ignore[call-overload]
        if rec is not None:
            e.signer_name = rec.name
            e.roles = tuple(sorted(rec.roles))
    return Snapshot(size=n, subject=dict(subject), entries=entries, keyring=ring, reference_time=last)


def check_signature(e: Evidence, ring: Keyring) -> None:
    """Raise SignatureError unless ``e`` carries a valid signature by a key enrolled in ``ring``."""
    rec = ring.get(e.signer)
    try:
        e.verify_signature(rec.public)
    except SignatureError:
        raise
    except ValueError as ex:
        raise SignatureError(f"signature of {e.id} is malformed: {ex}") from ex
