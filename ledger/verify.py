"""Full-ledger verification: entry ids, signatures, schema, chain, Merkle root, checkpoints, artifacts.

Per-entry work (hashing, parsing, signature checks) runs in worker processes over sequence ranges;
what depends on order (chain links, key roles and revocations) is checked afterwards in one pass.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from ledger.errors import LedgerError
from ledger.hashing import blake3_hex, parse_digest
from ledger.keyring import Keyring
from ledger.log import GENESIS_PREV, MerkleTree, chain_hash, leaf_hash, parse_checkpoint
from ledger.signing import PublicKey, parse_envelope

if TYPE_CHECKING:
    from ledger.service import Ledger, VerifyProblem, VerifyReport

__all__ = ["verify_ledger"]

_CHUNK = 4000


@dataclass(frozen=True)
class _Seen:
    seq: int
    entry_id: str
    signer: str
    kind: str
    logged_at: str
    prev: str
    chain: str
    key_payload: dict[str, Any] | None


def _check_range(
    url: str, lo: int, hi: int, keys: dict[str, bytes]
) -> tuple[list[tuple[Any, ...]], list[_Seen], list[tuple[str, str]]]:
    """Verify entries with lo <= seq < hi; returns problems, order facts, stored artifact digests."""
    from ledger.db import make_engine
    from ledger.entries import parse_statement
    from ledger.service import T_ARTIFACTS, T_ENTRIES, T_REFS, T_SUBJECTS

    engine = make_engine(url)
    problems: list[tuple[Any, ...]] = []
    seen: list[_Seen] = []
    artifacts: list[tuple[str, str]] = []
    subjects: dict[int, dict[str, str]] = defaultdict(dict)
    refs: dict[int, set[tuple[str, str]]] = defaultdict(set)
    arts: dict[int, set[tuple[str, str, bool]]] = defaultdict(set)
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(T_ENTRIES).where(T_ENTRIES.c.seq >= lo, T_ENTRIES.c.seq < hi).order_by(T_ENTRIES.c.seq)
        ).all()
        for r in conn.execute(sa.select(T_SUBJECTS).where(T_SUBJECTS.c.seq >= lo, T_SUBJECTS.c.seq < hi)):
            subjects[r.seq][r.field] = r.value
        for r in conn.execute(sa.select(T_REFS).where(T_REFS.c.seq >= lo, T_REFS.c.seq < hi)):
            refs[r.seq].add((r.rel, r.target_id))
        for r in conn.execute(sa.select(T_ARTIFACTS).where(T_ARTIFACTS.c.seq >= lo, T_ARTIFACTS.c.seq < hi)):
            arts[r.seq].add((r.name, r.digest, bool(r.stored)))
    engine.dispose()
    for row in rows:
        env_bytes = bytes(row.envelope)

        def problem(code: str, msg: str, row: Any = row) -> None:
            problems.append((row.seq, row.entry_id, code, msg))

        if blake3_hex(env_bytes) != row.entry_id:
            problem("entry-id-mismatch", "stored envelope bytes do not hash to the entry id")
        if leaf_hash(env_bytes).hex() != row.leaf_hash:
            problem("leaf-hash-mismatch", "stored leaf hash does not match the envelope bytes")
        if chain_hash(row.seq, row.entry_id, row.prev_hash, row.logged_at) != row.chain_hash:
            problem("chain-broken", "chain hash does not match the log record")
        key_payload: dict[str, Any] | None = None
        kind = row.kind
        try:
            env = parse_envelope(env_bytes)
            if env.canonical() != env_bytes:
                problem("non-canonical-json", "stored envelope is not in canonical form")
            st = parse_statement(env.statement())
            kind = st.kind
            if env.signer != row.signer or st.kind != row.kind or st.collected_at != row.collected_at:
                problem("index-mismatch", "signer/kind/collected_at columns disagree with the envelope")
            if st.kind.startswith("key."):
                key_payload = dict(st.payload)
            raw = keys.get(env.signer)
            if raw is None and st.kind == "key.enrol" and st.payload.get("key_id") == env.signer:
                raw = PublicKey.from_b64(st.payload["public_key"]).raw
            if raw is None:
                problem("unknown-signer", f"signer {env.signer} is not enrolled")
            else:
                env.verify_with(PublicKey(raw))
            if dict(st.subject) != subjects.get(row.seq, {}):
                problem("index-mismatch", "subject index rows disagree with the entry")
            if {(r.rel, r.id) for r in st.refs} != refs.get(row.seq, set()):
                problem("index-mismatch", "ref index rows disagree with the entry")
            if {(a.name, a.digest, a.stored) for a in st.artifacts} != arts.get(row.seq, set()):
                problem("index-mismatch", "artifact index rows disagree with the entry")
            artifacts.extend((a.digest, a.name) for a in st.artifacts if a.stored)
        except LedgerError as e:
            problem(e.code, e.message)
        seen.append(
            _Seen(
                row.seq,
                row.entry_id,
                row.signer,
                kind,
                row.logged_at,
                row.prev_hash,
                row.chain_hash,
                key_payload,
            )
        )
    return problems, seen, artifacts


def _public_keys(ledger: Ledger) -> dict[str, bytes]:
    """Public keys of every enrolled key, straight from the key.enrol entries (checked per entry)."""
    from ledger.service import T_ENTRIES

    out: dict[str, bytes] = {}
    with ledger.engine.connect() as conn:
        for (env_bytes,) in conn.execute(
            sa.select(T_ENTRIES.c.envelope).where(T_ENTRIES.c.kind == "key.enrol").order_by(T_ENTRIES.c.seq)
        ):
            try:
                st = parse_envelope(bytes(env_bytes)).statement()
                pub = PublicKey.from_b64(st["payload"]["public_key"])
                out.setdefault(pub.key_id, pub.raw)
            except (LedgerError, KeyError, TypeError):
                continue
    return out


def verify_ledger(ledger: Ledger, *, artifacts: bool = True, workers: int | None = None) -> VerifyReport:
    from ledger.entries import parse_time
    from ledger.service import T_CHECKPOINTS, T_ENTRIES, VerifyProblem, VerifyReport

    report = VerifyReport()
    with ledger.engine.connect() as conn:
        bounds = conn.execute(
            sa.select(sa.func.min(T_ENTRIES.c.seq), sa.func.max(T_ENTRIES.c.seq), sa.func.count())
        ).one()
        leaves = [
            bytes.fromhex(h)
            for h in conn.execute(sa.select(T_ENTRIES.c.leaf_hash).order_by(T_ENTRIES.c.seq)).scalars()
        ]
        checkpoints = conn.execute(sa.select(T_CHECKPOINTS).order_by(T_CHECKPOINTS.c.size)).all()
    lo, hi, count = bounds
    problems: list[VerifyProblem] = report.problems
    if count == 0:
        report.size = 0
        return report
    keys = _public_keys(ledger)
    ranges = [(a, min(a + _CHUNK, hi + 1)) for a in range(0, hi + 1, _CHUNK)]
    n = workers or os.cpu_count() or 1
    url = ledger.database_url
    results: list[tuple[list[tuple[Any, ...]], list[_Seen], list[tuple[str, str]]]]
    if n > 1 and len(ranges) > 1:
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=n, mp_context=ctx) as pool:
            results = list(
                pool.map(
                    _check_range,
                    [url] * len(ranges),
                    [a for a, _ in ranges],
                    [b for _, b in ranges],
                    [keys] * len(ranges),
                )
            )
    else:
        results = [_check_range(url, a, b, keys) for a, b in ranges]

    seen: list[_Seen] = []
    stored: dict[str, str] = {}
    for probs, chunk_seen, arts in results:
        problems.extend(VerifyProblem(code=c, message=m, seq=q, id=i) for q, i, c, m in probs)
        seen.extend(chunk_seen)
        for digest, name in arts:
            stored.setdefault(digest, name)

    # Order-dependent checks: contiguous sequence, chain links, trust root, roles and revocations.
    if lo != 0:
        problems.append(VerifyProblem("seq-gap", f"the log starts at seq {lo}, not 0", seq=lo))
    ring = Keyring()
    prev_chain = GENESIS_PREV
    expected_seq = 0
    for s in seen:
        if s.seq != expected_seq:
            problems.append(
                VerifyProblem(
                    "seq-gap", f"expected seq {expected_seq}, found {s.seq}", seq=s.seq, id=s.entry_id
                )
            )
            expected_seq = s.seq
        if s.prev != prev_chain:
            problems.append(
                VerifyProblem(
                    "chain-broken", "entry does not link to its predecessor", seq=s.seq, id=s.entry_id
                )
            )
        prev_chain = s.chain
        expected_seq += 1
        try:
            if s.seq == 0:
                if s.kind != "key.enrol" or s.signer != ledger.cfg.root_key_id:
                    problems.append(
                        VerifyProblem(
                            "untrusted-root",
                            "the first entry is not the home's root key enrolling itself",
                            seq=s.seq,
                            id=s.entry_id,
                        )
                    )
            else:
                ring.authorise(s.signer, s.kind, parse_time(s.logged_at))
        except LedgerError as e:
            problems.append(VerifyProblem(e.code, e.message, seq=s.seq, id=s.entry_id))
        if s.key_payload is not None:
            try:
                ring.apply(s.seq, s.kind, s.key_payload)
            except (LedgerError, KeyError) as e:
                problems.append(VerifyProblem("bad-key-entry", str(e), seq=s.seq, id=s.entry_id))

    report.size = len(leaves)
    tree = MerkleTree(leaves)
    root = tree.root()
    report.root = root.hex()
    pub = ledger.log_public_key()
    for cp in checkpoints:
        report.checkpoints_checked += 1
        try:
            parsed = parse_checkpoint(cp.note, ledger.cfg.log_key, pub)
        except LedgerError as e:
            problems.append(VerifyProblem(e.code, f"checkpoint at size {cp.size}: {e.message}"))
            continue
        if parsed.size != cp.size or parsed.root.hex() != cp.root:
            problems.append(
                VerifyProblem("checkpoint-mismatch", f"checkpoint row {cp.size} disagrees with its note")
            )
        if parsed.size > len(leaves) or tree.root(parsed.size) != parsed.root:
            problems.append(
                VerifyProblem(
                    "checkpoint-mismatch",
                    f"the log no longer has the root signed in the checkpoint at size {parsed.size}",
                )
            )

    stale = getattr(ledger.store, "stale_incoming", None)
    if stale is not None:
        report.incomplete_uploads = len(stale(0.0))
    if artifacts:
        for digest, name in sorted(stored.items()):
            report.artifacts_checked += 1
            try:
                ledger.store.verify(parse_digest(digest))
            except LedgerError as e:
                owners = _entries_with_artifact(ledger, digest)
                for seq, eid in owners or [(-1, "")]:
                    problems.append(
                        VerifyProblem(
                            e.code,
                            f"artifact {name}: {e.message}",
                            seq=seq if seq >= 0 else None,
                            id=eid or None,
                        )
                    )
    problems.sort(key=lambda p: (p.seq if p.seq is not None else -1, p.code))
    return report


def _entries_with_artifact(ledger: Ledger, digest: str) -> list[tuple[int, str]]:
    from ledger.service import T_ARTIFACTS, T_ENTRIES

    with ledger.engine.connect() as conn:
        rows = conn.execute(
            sa.select(T_ENTRIES.c.seq, T_ENTRIES.c.entry_id)
            .where(T_ENTRIES.c.seq.in_(sa.select(T_ARTIFACTS.c.seq).where(T_ARTIFACTS.c.digest == digest)))
            .order_by(T_ENTRIES.c.seq)
        ).all()
    return [(r.seq, r.entry_id) for r in rows]
