"""The per-entry half of ``ledger verify``: one sequence range's rows checked in a worker process.

Private to ``ledger.verify``. Every row takes a fast path that does each check of the exact path with less
Python around it: the rows are read as the driver's plain tuples, the log record and the chain link are
written straight from the row when its text is the kind canonical JSON writes as is, the envelope is read by
one regular expression, its statement parsed once, the signature checked by the ledger's ``Verifier``. Any
check the fast path does not pass (or any row it cannot read plainly) sends the row to ``_check_row``, the
exact per-row check that names every problem: the fast path only ever decides "no problem", never which.
"""

from __future__ import annotations

import binascii
import gc
import hashlib
import itertools
import json
import operator
import re
from collections.abc import Sequence
from datetime import date
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any, NamedTuple

import blake3
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ledger.canonical import MAX_DEPTH, parse_canonical
from ledger.db import T_ARTIFACTS, T_ENTRIES, T_REFS, T_SUBJECTS, T_TILES, blob, make_engine, read_connection
from ledger.entries import Statement, parse_statement
from ledger.errors import (
    CanonicalJsonError,
    ChainBrokenError,
    IntegrityError,
    LedgerError,
    LogFormatError,
    LogInconsistentError,
    UnknownSignerError,
)
from ledger.log import (
    LOG_FORMAT,
    MAX_RECORD_BYTES,
    LogRecord,
    chain_hash,
    checked_leaf,
    entry_id_of,
    leaf_hash,
    parse_record,
    record_leaf,
)
from ledger.reads import committed_rows, record_leaf_hex
from ledger.repo import envelope_bytes, record_bytes
from ledger.signing import PAYLOAD_TYPE, PublicKey, Verifier, pae, parse_canonical_envelope, parse_envelope

__all__ = [
    "INDEX_TABLES",
    "BelowFacts",
    "IndexRows",
    "RangeFacts",
    "check_range",
    "committed_below",
    "index_rows",
    "orphan_index_rows",
    "pool_init",
    "pool_task",
]

# the problem codes a range's check names (``ledger.verify.Problem``'s values: that module imports this one)
ENTRY_ID_MISMATCH = "entry-id-mismatch"
LEAF_HASH_MISMATCH = "leaf-hash-mismatch"
RECORD_MISMATCH = "record-mismatch"
INDEX_MISMATCH = "index-mismatch"
SEQ_GAP = "seq-gap"
NO_LOG_RECORD = LogFormatError.code
CHAIN_BROKEN = ChainBrokenError.code
NON_CANONICAL_JSON = CanonicalJsonError.code


class IndexRows(NamedTuple):
    """The index rows of one entry, table by table, as ingest inserts them (``index_rows``)."""

    subjects: list[dict[str, Any]]  # entry_subjects: seq, field, value
    refs: list[dict[str, Any]]  # entry_refs: seq, rel, target_id
    artifacts: list[dict[str, Any]]  # entry_artifacts: seq, name, digest, stored


def index_rows(seq: int, st: Statement) -> IndexRows:
    """The index rows the entry at ``seq`` whose statement is ``st`` has: what ingest inserts with its log
    row (``Ledger._plan``) and what ``ledger verify`` recomputes from the stored envelope (one copy). The
    readers find a campaign's entries by these rows, and nothing else commits them."""
    return IndexRows(
        [{"seq": seq, "field": k, "value": v} for k, v in st.subject.items()],
        [{"seq": seq, "rel": r.rel, "target_id": r.id} for r in {(r.rel, r.id): r for r in st.refs}.values()],
        [{"seq": seq, "name": a.name, "digest": a.digest, "stored": a.stored} for a in st.artifacts],
    )


# the index tables in ``IndexRows`` order: (table, its columns but seq, how many of them name the row)
INDEX_TABLES: tuple[tuple[sa.Table, tuple[str, ...], int], ...] = (
    (T_SUBJECTS, ("field", "value"), 1),
    (T_REFS, ("rel", "target_id"), 2),
    (T_ARTIFACTS, ("name", "digest", "stored"), 1),
)
_NO_ROWS: frozenset[tuple[Any, ...]] = frozenset()
# an entry's stored index rows, table by table (``INDEX_TABLES`` order): seq -> rows (their columns but seq)
_Stored = tuple[dict[int, set[tuple[Any, ...]]], ...]


# each index table's row as ``_fetch`` reads it (its columns but seq, in ``INDEX_TABLES`` order; two or more
# columns each, so ``itemgetter`` gives a tuple)
assert all(len(cols) > 1 for _t, cols, _k in INDEX_TABLES)
_AS_READ = tuple(operator.itemgetter(*cols) for _t, cols, _k in INDEX_TABLES)


def _expected(seq: int, st: Statement) -> tuple[set[tuple[Any, ...]], ...]:
    """``index_rows`` of the entry as the row tuples ``_fetch`` reads (columns but seq, ``INDEX_TABLES``)."""
    subjects, refs, artifacts = index_rows(seq, st)
    as_subject, as_ref, as_artifact = _AS_READ
    return set(map(as_subject, subjects)), set(map(as_ref, refs)), set(map(as_artifact, artifacts))


def _row_text(cols: tuple[str, ...], row: tuple[Any, ...]) -> str:
    return " ".join(f"{c}={v!r}" for c, v in zip(cols, row, strict=True))


def _index_problems(seq: int, st: Statement, stored: _Stored) -> list[str]:
    """Each index row of the entry at ``seq`` that is missing, changed or extra (its table and columns
    named), against ``index_rows`` of its statement; empty when the stored rows are exactly those."""
    out: list[str] = []
    for want, (table, cols, k), have_by_seq in zip(_expected(seq, st), INDEX_TABLES, stored, strict=True):
        have = have_by_seq.get(seq, _NO_ROWS)
        if want == have:
            continue
        missing = {r[:k]: r for r in want - have}
        extra = {r[:k]: r for r in have - want}
        for key in sorted(missing.keys() & extra.keys(), key=repr):
            out.append(
                f"{table.name} row {_row_text(cols, extra[key])} is changed: the entry's is "
                f"{_row_text(cols, missing[key])}"
            )
        for key in sorted(missing.keys() - extra.keys(), key=repr):
            out.append(f"{table.name} row {_row_text(cols, missing[key])} of the entry is missing")
        for key in sorted(extra.keys() - missing.keys(), key=repr):
            out.append(f"{table.name} row {_row_text(cols, extra[key])} is not the entry's (extra)")
    return out


def orphan_index_rows(engine: Engine, lo: int, hi: int, limit: int = 100) -> list[tuple[int, str]]:
    """The index rows at a seq below ``lo`` or from ``hi`` on that no log entry holds (one statement per
    table and side, so an entry appended meanwhile is read with its rows; each a range of the table's
    primary key, never a scan of it): (seq, what the row is), at most ``limit`` per table and side, in seq
    order. A row at a seq of ``lo`` .. ``hi`` - 1 is ``check_range``'s."""
    out: list[tuple[int, str]] = []
    e = T_ENTRIES.c
    with read_connection(engine) as conn:
        for table, cols, _k in INDEX_TABLES:
            c = table.c
            for side in (c.seq < lo, c.seq >= hi):
                q = (
                    sa.select(c.seq, *(c[n] for n in cols))
                    .where(side, ~sa.exists().where(e.seq == c.seq))
                    .order_by(c.seq)
                    .limit(limit + 1)
                )
                rows = conn.execute(q).all()
                for seq, *rest in rows[:limit]:
                    out.append((int(seq), f"{table.name} row {_row_text(cols, tuple(rest))}"))
                if len(rows) > limit:
                    out.append((int(rows[limit][0]), f"{table.name}: more such rows from this seq on"))
    return out


class RangeFacts(NamedTuple):
    """What a worker sends back for one range, column by column (cheap to pickle), in log order."""

    problems: list[tuple[Any, ...]]  # (seq, entry id, code, message)
    seqs: list[int]
    ids: list[str]
    signers: list[str]
    kinds: list[str]  # the statement's kind (the row's where the statement does not parse)
    times: list[str]  # logged_at
    chains: list[str]
    prev: str | None  # the first entry's prev_hash (the parent links it to the range before)
    leaves: bytes  # 32 bytes per entry
    v1_leaves: bytes | None  # format-1 leaves (the bare envelopes'), when format-1 checkpoints are checked
    key_payloads: dict[int, dict[str, Any]]  # position in the range -> payload of a ``key.*`` entry
    times_in_order: bool  # every logged_at parses and none is before the one ahead of it in the range
    has_key_kind: bool  # some kind starts with ``key.``
    tiles: list[tuple[int, int, str, int, bytes, bytes]]  # the stored tiles whose last leaf is in the range


# --- reading ------------------------------------------------------------------------------------------


def _in_range(table: sa.Table, *columns: str, seq: str = "seq") -> sa.Select[Any]:
    """``SELECT columns FROM table WHERE :lo <= seq < :hi``."""
    c = table.c
    return sa.select(*(c[name] for name in columns)).where(
        c[seq] >= sa.bindparam("lo"), c[seq] < sa.bindparam("hi")
    )


_ENTRY_COLUMNS = ("seq", "entry_id", "kind", "signer", "collected_at", "logged_at", "envelope")
# the rows below a held checkpoint (``committed_below``): ``committed_rows``'s evidence columns, the leaf hash
# last, then the record and the chain link
_BELOW_COLUMNS = (
    *("seq", "entry_id", "kind", "signer", "logged_at", "envelope", "leaf_hash"),
    *("record", "prev_hash", "chain_hash"),
)
_QUERIES = {
    "entries": _in_range(
        T_ENTRIES, *_ENTRY_COLUMNS, "leaf_hash", "prev_hash", "chain_hash", "record"
    ).order_by(T_ENTRIES.c.seq),
    **{table.name: _in_range(table, "seq", *cols) for table, cols, _k in INDEX_TABLES},
    "tiles": _in_range(T_TILES, "level", "idx", "chain_hash", "last_seq", "hashes", "root", seq="last_seq"),
    "below": _in_range(T_ENTRIES, *_BELOW_COLUMNS).order_by(T_ENTRIES.c.seq),
}
_COMPILED: dict[tuple[str, str], tuple[str, bool]] = {}


def _fetch(conn: sa.Connection, name: str, lo: int, hi: int) -> list[Any]:
    """The rows of query ``name`` for lo <= seq < hi as the driver's own tuples (no SQLAlchemy rows:
    building those cost more than reading them)."""
    dialect = conn.dialect
    key = (dialect.name, name)
    if key not in _COMPILED:
        compiled = _QUERIES[name].compile(dialect=dialect)
        _COMPILED[key] = (str(compiled), bool(compiled.positional))
        if compiled.positional:
            assert tuple(compiled.positiontup or ()) == ("lo", "hi"), compiled.positiontup
    sql, positional = _COMPILED[key]
    cur = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
    try:
        cur.execute(sql, (lo, hi) if positional else {"lo": lo, "hi": hi})
        return list(cur.fetchall())
    finally:
        cur.close()


# --- the fast path's pieces, each equal to the exact function it stands for where it answers --------------

_SAFE_INT = 2**53 - 1
# Text canonical JSON (RFC 8785, and the C encoder ``canonical_bytes`` uses for it) writes as itself:
# printable ASCII but the quote and the backslash.
_PLAIN_TEXT = re.compile(r"[\x20\x21\x23-\x5b\x5d-\x7e]*")


def _record_bytes(seq: int, logged_at: str, entry_id: str, kind: str, signer: str) -> bytes:
    """``LogRecord(seq, logged_at, entry_id, kind, signer).to_bytes()`` for plain text and a safe integer."""
    return (
        f'{{"entry_id":"{entry_id}","index":{seq},"kind":"{kind}","logged_at":"{logged_at}",'
        f'"signer":"{signer}","v":{LOG_FORMAT}}}'
    ).encode()


def _chain_text(seq: int, entry_id: str, prev: str, logged_at: str) -> bytes:
    """The canonical record ``chain_hash`` hashes, for plain text and a safe integer."""
    return f'{{"entry_id":"{entry_id}","logged_at":"{logged_at}","prev":"{prev}","seq":{seq}}}'.encode()


class _NotPlain(Exception):
    """The bytes are not plainly canonical JSON: ``parse_canonical`` decides."""


def _plain_int(text: str) -> int:
    value = int(text)
    if not -_SAFE_INT <= value <= _SAFE_INT:
        raise _NotPlain
    return value


def _plain_float(text: str) -> float:
    # as ``ledger.canonical._plain``: the floats Python and ECMAScript print alike
    value = float(text)
    if value.is_integer() or not 1e-4 <= abs(value) < 1e16:
        raise _NotPlain
    return value


def _no_constant(_text: str) -> Any:
    raise _NotPlain


_DECODER = json.JSONDecoder(parse_int=_plain_int, parse_float=_plain_float, parse_constant=_no_constant)
_SCAN: Any = _DECODER.scan_once  # type: ignore[attr-defined]  # (text, index) -> (value, end): no whitespace
_ENCODER = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"), check_circular=False)
# ``_ENCODER.encode`` without making a C encoder (and a closure) per call: the one it makes, made once
_C_ENCODER = (
    None
    if c_make_encoder is None
    else c_make_encoder(None, _ENCODER.default, encode_basestring, None, ":", ",", True, False, True)
)


def _encode(value: Any) -> str:
    if _C_ENCODER is None:
        return _ENCODER.encode(value)
    return "".join(_C_ENCODER(value, 0))


def _canonical_value(data: bytes) -> Any:
    """``parse_canonical(data)``: the value of ASCII bytes that plainly are canonical JSON is read once,
    with the numbers checked as they are read (no second walk over the value); anything else, or any
    refusal, is ``parse_canonical``'s own.

    The same argument as ``ledger.canonical._canonical_fast``: bytes equal to the re-serialisation of what
    they parse to hold no duplicate key, no NaN and nothing before or after the value; with safe integers
    and plain floats only, and ASCII keys (UTF-16 order is code-point order), that serialisation is
    RFC 8785's; fewer than ``MAX_DEPTH`` brackets cannot nest deeper than it."""
    if data.isascii() and data.count(b"{") + data.count(b"[") < MAX_DEPTH:
        text = data.decode("ascii")
        try:
            value, _end = _SCAN(text, 0)
            if _encode(value) == text:
                return value
        except (_NotPlain, StopIteration, ValueError, RecursionError, TypeError):
            pass
    return parse_canonical(data)


_ENVELOPE = re.compile(
    rb'\{"payload":"([A-Za-z0-9+/=]*)","payloadType":"'
    + re.escape(PAYLOAD_TYPE.encode())
    + rb'","signatures":\[\{"keyid":"([0-9a-f]*)","sig":"([A-Za-z0-9+/=]*)"\}\]\}'
)
_a2b, _b2a = binascii.a2b_base64, binascii.b2a_base64


def _fast_ok() -> bool:
    """Whether the hand-written record and chain texts are the exact functions' (checked once, at import:
    should the log's formats change, every row takes the exact path)."""
    seq, at, eid, prev = 123, "2026-01-02T03:04:05.678901Z", "ab" * 32, "ef" * 32
    sample = (seq, at, eid, "health.probe", "cd" * 16)
    chain = blake3.blake3(_chain_text(seq, eid, prev, at)).hexdigest()
    return _record_bytes(*sample) == LogRecord(*sample).to_bytes() and chain == chain_hash(seq, eid, prev, at)


_FAST = _fast_ok()

# a log time in the one form the log writes (UTC, microseconds, "Z"): its text order is its time order
_LOG_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]\.[0-9]{6}Z")
_DATES: dict[str, bool] = {}


def _valid_date(text: str) -> bool:
    ok = _DATES.get(text)
    if ok is None:
        try:
            date.fromisoformat(text)
            ok = True
        except ValueError:
            ok = False
        if len(_DATES) < 100_000:
            _DATES[text] = ok
    return ok


def _times_in_order(times: list[str]) -> bool:
    """True when every text parses as a log time (``parse_time``) and none is before the one ahead of it;
    False says only "check each one" (the parent then parses each, as it always did)."""
    if not times or not all(type(t) is str for t in times) or not all(map(_LOG_TIME.fullmatch, times)):
        return False
    if not all(_valid_date(d) for d in {t[:10] for t in times}):
        return False
    return all(a <= b for a, b in itertools.pairwise(times))


# --- one range -----------------------------------------------------------------------------------------


def check_range(engine: Engine, lo: int, hi: int, keys: dict[str, bytes], v1: bool = False) -> RangeFacts:
    """Verify entries with lo <= seq < hi: problems, and the facts the in-order pass needs. Sequence and
    chain links between entries of the range are checked here; the parent links the range's first entry
    to the one before it."""
    with read_connection(engine) as conn:
        rows = _fetch(conn, "entries", lo, hi)
        # each index table's rows of the range, by seq: compared as stored (``stored`` 0/1 equals False/True)
        index: _Stored = tuple({} for _ in INDEX_TABLES)
        for (table, _cols, _k), by_seq in zip(INDEX_TABLES, index, strict=True):
            for seq, *rest in _fetch(conn, table.name, lo, hi):
                by_seq.setdefault(seq, set()).add(tuple(rest))
        # a tile column that is not bytes is no tile of the log: empty, it is named where it is compared
        tiles = [
            (int(lv), int(ix), str(ch), int(ls), _blob_or_empty(hs), _blob_or_empty(rt))
            for lv, ix, ch, ls, hs, rt in _fetch(conn, "tiles", lo, hi)
        ]
    problems: list[tuple[Any, ...]] = []
    n = len(rows)
    seqs: list[int] = [0] * n
    ids: list[str] = [""] * n
    signers: list[str] = [""] * n
    kinds: list[str] = [""] * n
    times: list[str] = [""] * n
    chains: list[str] = [""] * n
    leaves: list[bytes] = [b""] * n
    v1_leaves: list[bytes] | None = [] if v1 else None
    key_payloads: dict[int, dict[str, Any]] = {}
    verifiers: dict[str, Verifier] = {}
    names: dict[str, str] = {}  # one string object per signer and kind: pickled once per range
    expected: int | None = None
    prev_chain: str | None = None
    gc_was = gc.isenabled()
    gc.disable()  # the range's objects are freed by reference counting; collections would only walk them
    try:
        for i, row in enumerate(rows):
            seq, entry_id, _kind, signer, _collected, logged_at, env, _leaf, prev, chain, _record = row
            if type(env) is not bytes:
                try:
                    env = blob(env, ChainBrokenError)
                except LedgerError as e:  # named here; the empty envelope fails every check after it
                    problems.append((seq, entry_id, CHAIN_BROKEN, f"stored envelope: {e.message}"))
                    env = b""
            try:
                checked = _fast_row(row, env, keys, verifiers, index)
            except Exception:  # whatever the fast path cannot read, the exact path decides
                checked = None
            if checked is None:  # the exact check, which names what is wrong
                checked = _check_row(row, env, keys, verifiers, index, problems)
            st_kind, key_payload, leaf = checked
            # order within the range (the first entry's is checked by the parent, against the range before)
            if expected is not None:
                if seq != expected:
                    problems.append((seq, entry_id, SEQ_GAP, f"expected seq {expected}, found {seq}"))
                if prev != prev_chain:
                    problems.append((seq, entry_id, CHAIN_BROKEN, "entry does not link to its predecessor"))
            expected, prev_chain = seq + 1, chain
            seqs[i] = seq
            ids[i] = entry_id
            signers[i] = names.setdefault(signer, signer)
            kinds[i] = names.setdefault(st_kind, st_kind)
            times[i] = logged_at
            chains[i] = chain
            leaves[i] = leaf
            if key_payload is not None:
                key_payloads[i] = key_payload
            if v1_leaves is not None:
                v1_leaves.append(leaf_hash(env))
        # index rows at a seq of the range that no entry of it holds (a row added for no entry)
        held = set(seqs)
        for (table, cols, _k), by_seq in zip(INDEX_TABLES, index, strict=True):
            for seq in sorted(by_seq.keys() - held):
                for r in sorted(by_seq[seq], key=repr):
                    problems.append(
                        (
                            seq,
                            None,
                            INDEX_MISMATCH,
                            f"{table.name} row {_row_text(cols, r)}: no entry is at seq {seq}",
                        )
                    )
    finally:
        if gc_was:
            gc.enable()
    return RangeFacts(
        problems=problems,
        seqs=seqs,
        ids=ids,
        signers=signers,
        kinds=kinds,
        times=times,
        chains=chains,
        prev=rows[0][8] if rows else None,
        leaves=b"".join(leaves),
        v1_leaves=b"".join(v1_leaves) if v1_leaves is not None else None,
        key_payloads=key_payloads,
        times_in_order=_times_in_order(times),
        has_key_kind=any(k.startswith("key.") for k in set(kinds)),
        tiles=tiles,
    )


def _blob_or_empty(value: object) -> bytes:
    """A stored tile's hashes or root (``ledger.db.blob``); empty when the column holds no bytes."""
    try:
        return blob(value, ChainBrokenError)
    except LedgerError:
        return b""


def _fast_row(
    row: Sequence[Any],
    env: bytes,
    keys: dict[str, bytes],
    verifiers: dict[str, Verifier],
    index: _Stored,
) -> tuple[str, dict[str, Any] | None, bytes] | None:
    """``_check_row``'s (kind, key payload, leaf) when it would find no problem, by the same checks; None
    when one of them does not pass (or the row is not plain enough to check this way): ``_check_row`` then
    names what is wrong. Each ``return None`` below is a check ``_check_row`` makes."""
    seq, entry_id, kind, signer, collected_at, logged_at, _env, leaf_hex, prev, chain, stored = row
    if not (_FAST and type(seq) is int and 0 <= seq <= _SAFE_INT):
        return None
    # text canonical JSON writes as is (a non-text column raises: the exact path decides)
    if not _PLAIN_TEXT.fullmatch(entry_id + kind + signer + logged_at + prev):
        return None
    if blake3.blake3(env).hexdigest() != entry_id:
        return None
    record = _record_bytes(seq, logged_at, entry_id, kind, signer)
    if len(record) > MAX_RECORD_BYTES or stored != record:
        return None
    leaf = hashlib.sha256(b"\x00" + record).digest()
    if leaf.hex() != leaf_hex:
        return None
    if blake3.blake3(_chain_text(seq, entry_id, prev, logged_at)).hexdigest() != chain:
        return None
    # the envelope in canonical form (``parse_canonical_envelope``): its base64 re-encodes to itself
    m = _ENVELOPE.fullmatch(env)
    if m is None:
        return None
    p64, kid, s64 = m.groups()
    payload, sig = _a2b(p64), _a2b(s64)
    if _b2a(payload, newline=False) != p64 or _b2a(sig, newline=False) != s64 or kid.decode() != signer:
        return None
    st = parse_statement(_canonical_value(payload))  # raises: the exact path names the problem
    if st.kind != kind or st.collected_at != collected_at:
        return None
    for want, have in zip(_expected(seq, st), index, strict=True):  # the rows ingest wrote (``index_rows``)
        if want != have.get(seq, _NO_ROWS):
            return None
    verifier = verifiers.get(signer)
    if verifier is None:
        if signer not in keys:
            return None
        verifier = verifiers[signer] = Verifier.of(PublicKey(keys[signer]))
    # a key id is its key's hash: the verifier's is the signer's, the envelope's one signature is checked
    verifier.verify(sig, pae(PAYLOAD_TYPE, payload))  # raises: the exact path names the problem
    return kind, dict(st.payload) if kind.startswith("key.") else None, leaf


def _check_row(
    row: Sequence[Any],
    env_bytes: bytes,
    keys: dict[str, bytes],
    verifiers: dict[str, Verifier],
    index: _Stored,
    problems: list[tuple[Any, ...]],
) -> tuple[str, dict[str, Any] | None, bytes]:
    """Every per-entry check of one row, each problem named; (kind, key payload, leaf) for the in-order
    pass."""
    seq, entry_id, row_kind, row_signer, collected_at, logged_at, _env, leaf_hex, prev, chain, stored = row

    def problem(code: str, msg: str) -> None:
        problems.append((seq, entry_id, code, msg))

    if entry_id_of(env_bytes) != entry_id:
        problem(ENTRY_ID_MISMATCH, "stored envelope bytes do not hash to the entry id")
    # The leaf commits the log's record of the row (index, logged_at, entry id, kind, signer); the
    # envelope is tied to it by the entry id above.
    try:
        record = LogRecord(seq, logged_at, entry_id, row_kind, row_signer).to_bytes()
    except LedgerError as e:
        problem(RECORD_MISMATCH, e.message)
        record = b""
    if stored is None:
        problem(NO_LOG_RECORD, "the row has no log record (log format 1): run `ledger migrate`")
    else:
        try:
            if blob(stored, ChainBrokenError) != record:
                problem(RECORD_MISMATCH, "stored log record disagrees with the row's seq/logged_at/id")
        except LedgerError as e:
            problem(RECORD_MISMATCH, f"stored log record: {e.message}")
    leaf = leaf_hash(record)
    if leaf.hex() != leaf_hex:
        problem(LEAF_HASH_MISMATCH, "stored leaf hash does not match the log record")
        try:
            leaf = bytes.fromhex(leaf_hex)
        except (TypeError, ValueError):
            leaf = b""
        if len(leaf) != 32:
            leaf = leaf_hash(record)
    if chain_hash(seq, entry_id, prev, logged_at) != chain:
        problem(CHAIN_BROKEN, "chain hash does not match the log record")
    key_payload: dict[str, Any] | None = None
    kind = row_kind
    try:
        env = parse_canonical_envelope(env_bytes)
        if env is None:
            env = parse_envelope(env_bytes)
            if env.canonical() != env_bytes:
                problem(NON_CANONICAL_JSON, "stored envelope is not in canonical form")
        st = parse_statement(env.statement())
        kind = st.kind
        if env.signer != row_signer or st.kind != row_kind or st.collected_at != collected_at:
            problem(INDEX_MISMATCH, "signer/kind/collected_at columns disagree with the envelope")
        if st.kind.startswith("key."):
            key_payload = dict(st.payload)
        # the signature, with the key enrolled under the signer's id (when it was is checked in order)
        verifier = verifiers.get(env.signer)
        if verifier is None:
            raw = keys.get(env.signer)
            if raw is None and st.kind == "key.enrol" and st.payload.get("key_id") == env.signer:
                raw = PublicKey.from_b64(st.payload["public_key"]).raw
            if raw is not None:
                verifier = Verifier.of(PublicKey(raw))
                if env.signer in keys:
                    verifiers[env.signer] = verifier
        if verifier is None:
            problem(UnknownSignerError.code, f"signer {env.signer} is not enrolled")
        else:
            verifier.verify_envelope(env)
        for message in _index_problems(seq, st, index):  # the rows ingest wrote (``index_rows``)
            problem(INDEX_MISMATCH, message)
    except LedgerError as e:
        problem(e.code, e.message)
    return kind, key_payload, leaf


# --- the entries below a held checkpoint (``ledger verify --from``) ----------------------------------------

# the consequence a refused row below the held checkpoint names (``committed_rows``)
_BELOW_CONSEQUENCE = "`ledger verify --from` carries over what its record commits, not its columns"
LOG_INCONSISTENT = LogInconsistentError.code


class BelowFacts(NamedTuple):
    """What one page of the entries below a held checkpoint gives ``verify --from`` (``committed_below``),
    each read from the entry's stored record (its leaf: the held root proves the records) and the envelope
    its entry id commits — never from the kind, signer, time or hash columns, which are only checked
    against the record."""

    problems: list[tuple[Any, ...]]  # (seq, entry id, code, message)
    leaves: bytes  # 32 bytes per entry: SHA-256(0x00 || its stored record)
    keys: list[tuple[int, bytes]]  # (seq, envelope) of the entries whose record's kind is ``key.*``
    chain: str  # the chain hash of the page's last entry, linked from ``prev`` over the records
    logged_at: str | None  # the log time the page's last record commits
    stop: bool  # an entry nothing can be carried over from (named): what follows it is not carried over


def committed_below(conn: sa.Connection, lo: int, hi: int, prev: str) -> BelowFacts:
    """The entries with lo <= seq < hi below a held checkpoint, each re-derived from its committed record,
    in one snapshot ``conn``: its leaf (the record's hash: the caller builds the tree and compares its root
    with the held one), its columns checked against the record and its envelope against its entry id
    (``committed_rows``), its leaf hash column against the record (``checked_leaf``), its chain link
    re-derived from ``prev`` (the chain hash of the entry before); the ``key.*`` entries (by their record's
    kind) and the last log time, for the keys and the time carried over. Hash-only: no signature, schema or
    index row is checked here (a full ``verify`` does, as it did when the checkpoint was taken). A row
    whose columns disagree with its record is named and read from its record; a missing seq, a row with
    no record (or one rewritten, or not a record of its seq) or a key entry whose envelope is not the one
    its record commits stops the page (``stop``): nothing can be carried over past it."""
    rows = _fetch(conn, "below", lo, hi)
    problems: list[tuple[Any, ...]] = []
    leaves: list[bytes] = []
    keys: list[tuple[int, bytes]] = []
    evidence: list[tuple[Any, ...]] = []  # (seq, entry id, kind, signer, logged_at, envelope, leaf hex)
    records: dict[int, bytes] = {}
    chain: str = prev
    at: str | None = None

    def stopped(seq: int, entry_id: object, code: str, message: str) -> BelowFacts:
        problems.append((seq, None if entry_id is None else str(entry_id), code, message))
        return BelowFacts(problems, b"".join(leaves), keys, chain, at, True)

    expected = lo
    for row in rows:
        seq, entry_id, stored_env, leaf_column, stored_record = row[0], row[1], row[5], row[6], row[7]
        if seq != expected:
            return stopped(
                expected, None, SEQ_GAP, f"expected seq {expected}, found {seq}: an entry below the held "
                "checkpoint is missing (its row was deleted or moved behind the log's back)"
            )  # fmt: skip
        expected = seq + 1
        try:
            record = record_bytes(seq, stored_record)
        except LedgerError as e:
            return stopped(seq, entry_id, RECORD_MISMATCH, e.message)
        if record is None:
            return stopped(seq, entry_id, NO_LOG_RECORD, "the row has no log record (log format 1)")
        try:  # the leaf hash column is the record's (the one check every reader of leaves applies)
            leaf = checked_leaf(seq, entry_id, record, leaf_column)
        except LedgerError as e:
            if record_leaf_hex(seq, row[4], entry_id, row[2], row[3]) == leaf_column:
                # the columns give the leaf hash: the record is the one rewritten (nothing to carry over)
                return stopped(
                    seq, entry_id, RECORD_MISMATCH, "stored log record disagrees with the row's columns "
                    "and its leaf hash (rewritten behind the log's back): nothing is carried over from it"
                )  # fmt: skip
            problems.append((seq, entry_id, LEAF_HASH_MISMATCH, e.message))
            leaf = record_leaf(record)
        env = stored_env if type(stored_env) is bytes else b""
        if type(stored_env) is not bytes:
            try:
                env = envelope_bytes(seq, stored_env)
            except LedgerError as e:  # named here; the empty envelope is named by ``committed_rows`` too
                problems.append((seq, entry_id, CHAIN_BROKEN, e.message))
        leaves.append(leaf)
        records[seq] = record
        evidence.append((seq, entry_id, row[2], row[3], row[4], env, leaf.hex()))
    if expected < hi:
        return stopped(
            expected, None, SEQ_GAP, f"the log has no entry at seq {expected}, below the held checkpoint "
            "(its row was deleted or moved behind the log's back)"
        )  # fmt: skip
    # the columns against the record the leaf commits, the envelope against the entry id: the page at once,
    # and entry by entry (each named) only where one of them is not
    refused: set[int] = set()
    try:
        committed_rows(evidence, records.get, _BELOW_CONSEQUENCE)
    except IntegrityError:
        for r in evidence:
            try:
                committed_rows([r], records.get, _BELOW_CONSEQUENCE)
            except IntegrityError as e:
                refused.add(r[0])
                columns_ok = record_leaf_hex(r[0], r[4], r[1], r[2], r[3]) == r[6]
                problems.append((r[0], r[1], ENTRY_ID_MISMATCH if columns_ok else RECORD_MISMATCH, e.message))
    for r, row in zip(evidence, rows, strict=True):
        seq, entry_id, kind, logged_at, env = r[0], r[1], r[2], r[4], r[5]
        if seq in refused:  # what the record commits, not the columns
            try:
                committed = parse_record(records[seq])
            except LedgerError as e:
                return stopped(seq, entry_id, LOG_INCONSISTENT, f"its stored log record: {e.message}")
            if committed.index != seq:
                return stopped(
                    seq, entry_id, LOG_INCONSISTENT, f"its log record is the one of seq {committed.index}"
                )
            entry_id, kind, logged_at = committed.entry_id, committed.kind, committed.logged_at
            if kind.startswith("key.") and entry_id_of(env) != entry_id:
                return stopped(
                    seq, entry_id, LOG_INCONSISTENT, "the envelope of this key entry is not the one its "
                    "record commits: the keys as of the held checkpoint cannot be carried over"
                )  # fmt: skip
        # the chain link, re-derived over the records from the entry before (the row's columns only checked)
        if _FAST and _PLAIN_TEXT.fullmatch(entry_id + chain + logged_at):
            link = blake3.blake3(_chain_text(seq, entry_id, chain, logged_at)).hexdigest()
        else:
            link = chain_hash(seq, entry_id, chain, logged_at)
        if row[8] != chain:
            problems.append((seq, entry_id, CHAIN_BROKEN, "entry does not link to its predecessor"))
        if row[9] != link:
            problems.append((seq, entry_id, CHAIN_BROKEN, "chain hash does not match the log record"))
        chain, at = link, logged_at
        if kind.startswith("key."):
            keys.append((seq, env))
    return BelowFacts(problems, b"".join(leaves), keys, chain, at, False)


# --- the worker processes --------------------------------------------------------------------------------

_POOL: dict[str, Any] = {}


def pool_init(url: str, keys: dict[str, bytes], v1: bool) -> None:
    """A worker process's state: its own engine (one per process, not per range), the keys, the format."""
    gc.freeze()  # what the process inherited is never collected: collections skip it
    _POOL.update(engine=make_engine(url), keys=keys, v1=v1)


def pool_task(lo: int, hi: int) -> RangeFacts:
    return check_range(_POOL["engine"], lo, hi, _POOL["keys"], _POOL["v1"])
