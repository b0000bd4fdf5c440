"""Entry reads shared by the service and by a fast start of `ledger log` / `ledger show` on SQLite homes.

``ledger log`` and ``ledger show`` are the commands people type most; as fresh processes they should start
in well under half a second (issue 13: ≤ 0.3 s beside ``ledger --help``). Importing SQLAlchemy, SQLModel
and the service alone takes longer than that, so on a home whose database is a SQLite file these two
commands read through ``SqliteEntries``: the stdlib ``sqlite3`` driver, read-only, the same four queries
``ledger.repo.LogRepo`` runs for them (``find``, ``by_id``, ``ids_with_prefix``, ``key_rows``; the SQL
below is written to return the same rows in the same order — ``tests/test_reads.py`` compares them),
and the same parsing (``ledger.logged.entry_from_row``, ``ledger.trust.replay_keys``). The rest of what
the two commands do (id resolution, filters, the page shape, signer names) is defined once here and
called by ``ledger.service.Ledger`` too. Any other database (PostgreSQL), or a SQLite file this module
cannot read as a migrated ledger, goes through the service, so its errors are the service's.
"""

from __future__ import annotations

import base64
import hashlib
import re
import sqlite3
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import blake3

from ledger.entries import format_time, parse_time, subject_problem
from ledger.errors import (
    ChainBrokenError,
    EntryNotFoundError,
    InputError,
    IntegrityError,
    KeyNotFoundError,
    LedgerError,
    LogFormatError,
    LogOrderError,
    NotAvailableError,
    ProofError,
)
from ledger.keyring import KeyRecord, Keyring
from ledger.listing import SUBJECT_FIELDS, list_json
from ledger.log import (
    LOG_FORMAT,
    Checkpoint,
    EntryId,
    LogRecord,
    chain_hash,
    checked_leaf,
    entry_id_of,
    held_fault,
    parse_checkpoint,
    parse_record,
)
from ledger.logged import LoggedEntry, entry_from_row
from ledger.signing import KeyId, PublicKey
from ledger.tiles import tile_span
from ledger.trust import replay_keys

__all__ = [
    "SCHEMA_HEAD",
    "SIGNED_CONSEQUENCE",
    "SUBJECT_FIELDS",
    "ChainLink",
    "EntryReader",
    "SqliteEntries",
    "SqlitePolicyLedger",
    "SqlitePolicyRepo",
    "admin_ids",
    "admins_named",
    "chain_linked",
    "chain_walk",
    "check_extends_held",
    "check_revision",
    "committed_key_rows",
    "committed_row",
    "committed_rows",
    "find_key",
    "first_logged_since",
    "gap_error",
    "held_checkpoint_of",
    "key_candidates",
    "missing_row_error",
    "page_json",
    "parse_subject_args",
    "parse_subject_pairs",
    "record_leaf_hex",
    "refuse_nul",
    "resolve_entry_id",
    "sqlite_file",
    "uncommitted_error",
]

SCHEMA_HEAD = "0004"
"""The Alembic revision this code reads and writes (0002: log format 2, ``ledger.log.LOG_FORMAT``;
0003: witness cosignatures; 0004: the full hash tiles, ``tiles``)."""

_SQLITE = "sqlite:///"


class EntryReader(Protocol):
    """What `ledger log` and `ledger show` read: ``ledger.service.Ledger``, or ``SqliteEntries``."""

    def get(self, id_or_prefix: str) -> LoggedEntry: ...

    def query(
        self,
        *,
        subject: dict[str, str] | None = None,
        kind: str | None = None,
        signer: str | None = None,
        since: str | None = None,
        until: str | None = None,
        after_seq: int | None = None,
        limit: int | None = 100,
    ) -> list[LoggedEntry]: ...

    def page_json(self, entries: Sequence[LoggedEntry], limit: int | None) -> dict[str, Any]: ...

    def signer_names(self) -> dict[str, str]: ...

    def close(self) -> None: ...


# --- shared by the service and SqliteEntries ------------------------------------------------------------


def parse_subject_pairs(pairs: Iterable[tuple[str, str]], *, given_as: str = "--subject ") -> dict[str, str]:
    """``[("campaign", "c1"), ("host", "h")]`` → ``{"campaign": "c1", "host": "h"}``: the one reader of a
    subject asked about — the CLI's ``--subject``, the API's ``?subject=`` (``parse_subject_args``), a
    routing check's body and a timeline page's address alike. Each field is checked by the rule ingest
    applies (``ledger.entries.subject_problem``); its value is taken as given, never trimmed: a value with
    white space around it is refused naming the field, not answered for another subject (a field name
    holds none, so white space around it is set aside). A field named twice is an input error naming it
    (the last value would silently win). ``given_as`` is how the caller's user wrote each field (the CLI's
    option; the API's ``subject=``), for the message.

    An entry stored before ingest refused such values keeps its value (it stays readable: ``ledger log``
    by another field, ``ledger show ID``), but no subject question names it: supersede it and record it
    again under the value without the white space."""
    out: dict[str, str] = {}
    for given, value in pairs:
        # a field name holds no white space, so ``campaign =x`` names campaign; a value is taken as given
        key = given.strip() if isinstance(given, str) else given
        problem = subject_problem(key, value)
        if problem is not None:
            raise InputError(
                f"{given_as}{key}={value!r}: {problem}",
                hint="a subject field is a known one spelled right, its value has no white space around it "
                "and no control character (an entry stored with one before that rule is read by "
                "`ledger log` or `ledger show ID`)",
            )
        if key in out:
            raise InputError(
                f"subject field {key!r} given twice ({given_as}{key}={out[key]} and "
                f"{given_as}{key}={value}): name each field once"
            )
        out[key] = value
    return out


def parse_subject_args(items: Iterable[str], *, given_as: str = "--subject ") -> dict[str, str]:
    """``["campaign=c1", "host=h"]`` → ``{"campaign": "c1", "host": "h"}``, each split at its first ``=``
    and read by ``parse_subject_pairs`` (the one rule: nothing trimmed, a field named twice refused)."""
    pairs: list[tuple[str, str]] = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise InputError(f"subject {item!r} must be FIELD=VALUE")
        pairs.append((key, value))
    return parse_subject_pairs(pairs, given_as=given_as)


def check_revision(rev: str | None) -> None:
    """Refuse a database of another schema revision: an old home is upgraded by ``ledger migrate``."""
    if rev is not None and rev != SCHEMA_HEAD:
        if not (len(rev) == len(SCHEMA_HEAD) and rev.isascii() and rev.isdigit()):
            # the ledger's migrations number their revisions ("0001" …): any other id is another
            # application's Alembic history, neither an older ledger's (migrate would rewrite another
            # application's database) nor a newer one's
            raise LogFormatError(
                f"the database's alembic_version names revision {rev!r}, which is no ledger's schema "
                f"revision (this ledger's are 0001 … {SCHEMA_HEAD}): it is not a ledger's database"
            )
        raise LogFormatError(
            f"the database is at schema revision {rev}; this ledger needs {SCHEMA_HEAD}"
            + (" (run `ledger migrate`)" if rev < SCHEMA_HEAD else " (made by a newer ledger)")
        )


def refuse_nul(*texts: str) -> None:
    """Indexed text may not hold NUL: PostgreSQL text cannot store it (it would fail as a database error)."""
    for t in texts:
        if "\x00" in t:
            raise InputError(f"{t[:40]!r}: NUL characters are not allowed in subjects, names or filters")


def resolve_entry_id(id_or_prefix: str, ids_with_prefix: Callable[[str, int], list[str]]) -> EntryId:
    """A full entry id, from a full id or a unique prefix of at least 8 hex characters."""
    text = id_or_prefix.strip().lower()
    if len(text) == 64:
        return EntryId(text)
    if len(text) < 8 or any(c not in "0123456789abcdef" for c in text):
        raise InputError(f"{id_or_prefix!r} is not an entry id (64 hex, or a unique prefix of >= 8)")
    found = ids_with_prefix(text, 6)
    if not found:
        raise EntryNotFoundError(f"no entry with id {id_or_prefix}")
    if len(found) > 1:
        shown = ", ".join(str(i)[:16] for i in found[:5]) + (", …" if len(found) > 5 else "")
        raise InputError(
            f"entry id prefix {id_or_prefix} is ambiguous: {shown}", hint="give more characters of the id"
        )
    return EntryId(found[0])


def find_key(ring: Keyring, name_or_id: str) -> KeyRecord:
    """The enrolled key of that id, else the last one of that name."""
    rec = ring.keys.get(KeyId(name_or_id)) or ring.by_name(name_or_id)
    if rec is None:
        raise KeyNotFoundError(f"no enrolled key named {name_or_id!r}")
    return rec


def log_time(text: str | None) -> str | None:
    """A ``--since``/``--until`` filter as the log's own time text."""
    return format_time(parse_time(text)) if text else None


def page_json(entries: Sequence[LoggedEntry], limit: int | None, names: dict[str, str]) -> dict[str, Any]:
    """The one JSON shape of a page of search results (CLI ``log --json`` and the API alike)."""
    return list_json(
        (e.to_json(names.get(e.signer)) for e in entries),
        entries[-1].seq if entries and len(entries) == limit else None,
    )


def signer_names(ring: Keyring) -> dict[str, str]:
    return {k: r.name for k, r in ring.keys.items()}


# --- what the policy reads is what the log committed ----------------------------------------------------
#
# Each row's Merkle leaf commits the log's record of it (``ledger.log.LogRecord``: index, logged_at, entry
# id, kind, signer). A verdict and the routing gate judge positions and log times (freshness, revocation at
# a time, attempt order, "after the job ended"), so every evidence row the policy port gives them is
# checked against its leaf first: the record re-made from the row's columns must hash to the row's
# ``leaf_hash`` — the hash the tiles, checkpoints and receipts are made of. A column edited behind the
# log's back (raw SQL: ``UPDATE log_entries SET logged_at = …``) is refused, never judged.

_SAFE_SEQ = 1 << 53  # the integers RFC 8785 writes as plain decimals (above, the canonical path decides)
_RECORD_QUOTES = 20  # the '"' of a log record's JSON whose texts hold none: 6 keys and 4 string values


def record_leaf_hex(seq: int, logged_at: str, entry_id: str, kind: str, signer: str) -> str:
    """The hex Merkle leaf hash of the log record ``LogRecord(seq, logged_at, entry_id, kind, signer)``:
    SHA-256 of 0x00 and its RFC 8785 bytes. Texts of printable ASCII without ``"`` or ``\\`` (every valid
    row: hex ids, kind names, RFC 3339 times) are their own JSON, so the record is written directly (~1 µs);
    anything else takes ``LogRecord.to_bytes`` (the one canonical form). "" where no record can be made."""
    try:
        text = entry_id + kind + logged_at + signer
        if (
            type(seq) is int
            and 0 <= seq < _SAFE_SEQ
            and text.isascii()
            and text.isprintable()
            and '"' not in text
            and "\\" not in text
        ):
            return hashlib.sha256(
                f'\x00{{"entry_id":"{entry_id}","index":{seq},"kind":"{kind}","logged_at":"{logged_at}",'
                f'"signer":"{signer}","v":{LOG_FORMAT}}}'.encode()
            ).hexdigest()
        return LogRecord(seq, logged_at, entry_id, kind, signer).leaf().hex()
    except (LedgerError, TypeError, ValueError):
        return ""


def uncommitted_error(
    row: Sequence[Any],
    record: bytes | None = None,
    consequence: str = "no verdict or routing decision is made on it",
    error: type[IntegrityError] = IntegrityError,
) -> IntegrityError:
    """The refusal of an evidence row (seq, entry_id, kind, signer, logged_at, …, leaf_hash) whose columns
    are not the record its leaf commits; ``record``: the row's stored log record bytes, when read, to name
    which column differs; ``error``: its class (``ChainBrokenError`` where the log would sign or serve the
    row: a home fault, ``committed_row``)."""
    seq, entry_id, kind, signer, logged_at = row[0], row[1], row[2], row[3], row[4]
    leaf = row[-1]
    what = "its index, logged_at, entry id, kind or signer column is not what its Merkle leaf commits"
    stored = None
    if record is not None and hashlib.sha256(b"\x00" + bytes(record)).hexdigest() == leaf:
        try:
            stored = parse_record(bytes(record))
        except LedgerError:
            stored = None
    if stored is not None:
        diffs = [
            f"{name} {got!r} where the log record its leaf commits says {want!r}"
            for name, got, want in (
                ("logged_at", logged_at, stored.logged_at),
                ("index", seq, stored.index),
                ("entry id", entry_id, stored.entry_id),
                ("kind", kind, stored.kind),
                ("signer", signer, stored.signer),
            )
            if got != want
        ]
        what = "; ".join(diffs) or what
    return error(
        f"the log's entry at seq {seq} ({str(entry_id)[:16]}) is not as the log committed it: {what} "
        f"(its row was edited behind the log's back); {consequence}",
        hint="`ledger verify` names every altered row; restore the database from a backup that the "
        "checkpoint this home holds vouches for",
    )


def committed_rows(
    rows: Iterable[tuple[Any, ...]],
    record_of: Callable[[int], bytes | None] | None = None,
    consequence: str = "no verdict or routing decision is made on it",
    error: type[IntegrityError] = IntegrityError,
) -> list[tuple[Any, ...]]:
    """Evidence tuples (seq, entry_id, kind, signer, logged_at, envelope) from rows that carry the stored
    ``leaf_hash`` last, each checked against it (``record_leaf_hex``); ``IntegrityError`` (or ``error``)
    for the first row whose columns are not the record its leaf commits (``record_of(seq)``: its stored
    record bytes, read only then, to name the column)."""
    rows = rows if isinstance(rows, list) else list(rows)
    sha = hashlib.sha256
    try:
        # each record written directly (~1.3 µs a row). Where no text holds a '"' or a '\\' (the record
        # has just its 20 delimiting quotes), it is the canonical record of the columns, or — a control
        # character, written raw — bytes no canonical record has: a match is the columns' own leaf. Any
        # other row is judged by the canonical record below.
        suspect = [
            r
            for r in rows
            if sha(
                (
                    rec := f'\x00{{"entry_id":"{r[1]}","index":{r[0]},"kind":"{r[2]}","logged_at":"{r[4]}",'
                    f'"signer":"{r[3]}","v":{LOG_FORMAT}}}'
                ).encode()
            ).hexdigest()
            != r[6]
            or rec.count('"') != _RECORD_QUOTES
            or "\\" in rec
        ]
    except UnicodeEncodeError:
        suspect = rows
    for r in suspect:  # the canonical record decides (``LogRecord.to_bytes``)
        if record_leaf_hex(r[0], r[4], r[1], r[2], r[3]) != r[6]:
            raise uncommitted_error(r, record_of(r[0]) if record_of is not None else None, consequence, error)
    # the leaf commits the entry id, and the id is the envelope's BLAKE3: an envelope replaced behind the
    # log's back (another entry's, validly signed) would be judged under this entry's id and place
    blake = blake3.blake3
    for r in rows:
        if blake(r[5]).hexdigest() != r[1]:
            raise envelope_replaced_error(r[0], r[1], entry_id_of(bytes(r[5])), consequence, error)
    return [r[:6] for r in rows]


SIGNED_CONSEQUENCE = "the log signs no receipt over it and serves no proof or record of it"


def committed_row(
    row: Any,
    record: bytes | None,
    envelope: bytes,
    consequence: str = SIGNED_CONSEQUENCE,
) -> None:
    """The one check of a ``log_entries`` row (``seq``, ``entry_id``, ``kind``, ``signer``, ``logged_at``,
    ``leaf_hash`` by name; ``record`` and ``envelope``: its record and envelope columns as bytes) before
    the log key signs anything built from it (a receipt, a duplicate's answer) or a response carries its
    record (an inclusion proof): its columns must be the record its leaf commits and its envelope its entry
    id's (``committed_rows``), and its stored record must hash to that leaf (``checked_leaf``).
    ``ChainBrokenError`` naming the row otherwise — the log's own state, a home fault (HTTP 500), never
    the request's; ``LogFormatError`` for a row without a record (log format 1)."""
    seq, entry_id = int(row.seq), str(row.entry_id)
    committed_rows(
        [(seq, entry_id, row.kind, row.signer, row.logged_at, envelope, row.leaf_hash)],
        lambda _seq: record,
        consequence,
        ChainBrokenError,
    )
    checked_leaf(seq, entry_id, record, row.leaf_hash)


COMMITTED_HINT = (
    "`ledger verify` names every altered row; restore the database from a backup that the checkpoint "
    "this home holds vouches for"
)


def chain_linked(
    row: Any, before: str | None, after: Any | None, size: int, consequence: str = SIGNED_CONSEQUENCE
) -> None:
    """The check of a ``log_entries`` row's place in the log's hash chain (``seq``, ``entry_id``,
    ``logged_at``, ``prev_hash``, ``chain_hash`` by name), beside ``committed_row``'s of its leaf, before
    the log key signs anything built from it as it stands (a re-sent entry's answer and receipt, an
    inclusion proof): its chain hash links its own index, entry id and log time to its predecessor
    (``chain_hash``); ``before``, the chain hash of the row before it (``GENESIS_PREV`` at seq 0; None:
    no row there), is the one it links to; and ``after``, the row at the next seq (None: none there —
    the head, where the log's ``size`` ends after it), links to it with a chain hash of its own columns.
    ``ChainBrokenError`` naming the row otherwise.

    Past the last checkpoint, outside a stored tile, nothing signed commits a row's log time yet but its
    neighbours' chain hashes: a row rewritten consistently by itself (``logged_at``, ``record`` and
    ``leaf_hash`` together, which ``committed_row`` passes) breaks the chain at its own link, or — its
    chain hash rewritten too — at the next row's. Only a rewrite of every chain hash from it to the head
    keeps the chain whole: the caller anchors the row as well (``Ledger._anchored_entry``: below the
    anchor, the leaf the signed checkpoint holds there; past it, ``chain_walk`` from the anchor, which a
    time before its predecessor's breaks), and the receipts the collectors keep (``ledger audit``) and
    ``ledger verify`` catch what no walk sees (a time between its neighbours')."""
    seq, entry_id = int(row.seq), str(row.entry_id)

    def broken(why: str) -> ChainBrokenError:
        return ChainBrokenError(
            f"the log's entry at seq {seq} ({entry_id[:16]}) is not as the log committed it: {why} (the "
            f"log's hash chain was rewritten behind its back); {consequence}",
            hint=COMMITTED_HINT,
        )

    if before is None:
        raise broken(f"the log has no entry at seq {seq - 1} for it to link to")
    if str(row.prev_hash) != before:
        raise broken(f"its prev_hash is not the chain hash of the entry at seq {seq - 1}")
    link = str(row.chain_hash)
    if chain_hash(seq, entry_id, before, str(row.logged_at)) != link:
        raise broken("its chain hash does not link its index, entry id and logged_at to its predecessor")
    nxt = seq + 1
    if after is None:
        if nxt < size:
            raise broken(f"the log has no entry at seq {nxt} after it, below its {size} entries")
        return
    if str(after.prev_hash) != link:
        raise broken(f"the entry at seq {nxt} after it does not link to its chain hash")
    if chain_hash(nxt, str(after.entry_id), link, str(after.logged_at)) != str(after.chain_hash):
        raise broken(f"the chain hash of the entry at seq {nxt} after it does not link to it")


class ChainLink(NamedTuple):
    """Where a walk of the log's hash chain stands (``chain_walk``): the seq of the next row it expects,
    the chain hash that row must link to, and the log time it may not be before (None: any, at seq 0)."""

    seq: int
    chain: str
    logged_at: str | None


# a log time in the one form the log writes (UTC, microseconds, "Z"): its text order is its time order
_LOG_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z")


def _plain(text: str) -> bool:
    """Whether ``text`` is its own JSON string body (printable ASCII without ``"`` or ``\\``)."""
    return text.isascii() and text.isprintable() and '"' not in text and "\\" not in text


def _chain_hex(seq: int, entry_id: str, prev: str, logged_at: str) -> str:
    """``ledger.log.chain_hash``, written directly for plain texts and a safe integer (~2 µs, the canonical
    record's bytes as ``canonical_bytes`` writes them); anything else takes ``chain_hash`` itself."""
    if type(seq) is int and 0 <= seq < _SAFE_SEQ and _plain(entry_id + prev + logged_at):
        text = f'{{"entry_id":"{entry_id}","logged_at":"{logged_at}","prev":"{prev}","seq":{seq}}}'
        return blake3.blake3(text.encode()).hexdigest()
    return chain_hash(seq, entry_id, prev, logged_at)


def _before(later: str, earlier: str) -> bool:
    """Whether the log time ``later`` is before ``earlier`` (text order where both are in the log's one
    form; otherwise read with ``parse_time``, whose ``SchemaError`` the caller names)."""
    if _LOG_TIME.fullmatch(later) and _LOG_TIME.fullmatch(earlier):
        return later < earlier
    return parse_time(later) < parse_time(earlier)


def chain_walk(
    rows: Iterable[Sequence[Any]], link: ChainLink | None, consequence: str = SIGNED_CONSEQUENCE
) -> tuple[list[bytes], ChainLink | None]:
    """One page of a walk of the log's rows in seq order, from a row the caller anchors, before the log key
    signs a tree over them (``Ledger._walk``). ``rows``: (seq, entry_id, kind, signer, logged_at, record
    bytes or None, leaf_hash, prev_hash, chain_hash) tuples; ``link``: where the previous page ended (None:
    the first row is the base, the row the caller compares with the leaf a signed checkpoint commits —
    only its columns and record are checked here, it is where the chain starts). Each row: at the seq
    expected (none missing: ``ChainBrokenError`` naming the first one gone), its columns the record its
    leaf commits and its record hashing to that leaf (``record_leaf_hex``, ``checked_leaf``), its
    ``prev_hash`` the chain hash before it and its ``chain_hash`` linking its index, entry id and log
    time to that (``ChainBrokenError``), its ``logged_at`` never before the one before it
    (``LogOrderError``): a row rewritten past the last signed checkpoint — its log time, record and leaf
    hash together — breaks its own link; one whose chain hashes were re-derived through the head too, to
    a time before its predecessor's, breaks the log's order. Returns the page's leaves (for the caller to
    compare with the tiles it signs) and where the walk stands. ~10 µs a row."""
    leaves: list[bytes] = []
    for row in rows:
        seq, entry_id, kind, signer, logged_at, record, leaf, prev, chain = row
        seq, entry_id = int(seq), str(entry_id)
        if link is not None and seq != link.seq:
            raise ChainBrokenError(
                f"the log has no entry at seq {link.seq}, below the entries it signs: its row was deleted "
                f"or moved behind the log's back; {consequence}",
                hint=COMMITTED_HINT,
            )
        if record_leaf_hex(seq, str(logged_at), entry_id, str(kind), str(signer)) != leaf:
            raise uncommitted_error(
                (seq, entry_id, kind, signer, logged_at, None, leaf), record, consequence, ChainBrokenError
            )
        leaves.append(checked_leaf(seq, entry_id, record, leaf))
        logged_at, chain = str(logged_at), str(chain)
        if link is not None:
            where = f"the log's entry at seq {seq} ({entry_id[:16]}) is not as the log committed it"
            if str(prev) != link.chain:
                raise ChainBrokenError(
                    f"{where}: its prev_hash is not the chain hash of the entry at seq {seq - 1} (the log's "
                    f"hash chain was rewritten behind its back); {consequence}",
                    hint=COMMITTED_HINT,
                )
            if _chain_hex(seq, entry_id, link.chain, logged_at) != chain:
                raise ChainBrokenError(
                    f"{where}: its chain hash does not link its index, entry id and logged_at to its "
                    f"predecessor (the log's hash chain was rewritten behind its back); {consequence}",
                    hint=COMMITTED_HINT,
                )
            try:
                backwards = link.logged_at is not None and _before(logged_at, link.logged_at)
            except LedgerError as e:
                raise ChainBrokenError(
                    f"{where}: its logged_at {logged_at!r}: {e.message}; {consequence}"
                ) from e
            if backwards:
                raise LogOrderError(
                    f"{where}: it was logged at {logged_at}, before the entry at seq {seq - 1} "
                    f"({link.logged_at}) — the log's time never runs back, so its log time was rewritten "
                    f"behind its back (its chain hashes re-derived with it); {consequence}",
                    hint=COMMITTED_HINT,
                )
        link = ChainLink(seq + 1, chain, logged_at)
    return leaves, link


def envelope_replaced_error(
    seq: int,
    entry_id: str,
    got: str,
    consequence: str = "no verdict or routing decision is made on it",
    error: type[IntegrityError] = IntegrityError,
) -> IntegrityError:
    """The refusal of a row whose envelope does not hash to the entry id its leaf commits."""
    return error(
        f"the log's entry at seq {seq} ({str(entry_id)[:16]}) is not as the log committed it: its "
        f"envelope hashes to {got[:16]}…, not to its entry id (the envelope was replaced behind "
        f"the log's back); {consequence}",
        hint=COMMITTED_HINT,
    )


# The keyring a verdict trusts is folded from the log's ``key.*`` entries (``replay_keys``), so those rows
# are read as the log committed them too: each checked against its leaf (``committed_rows``), its envelope
# against its entry id (the leaf commits the id, the id is the envelope's BLAKE3 — a replaced envelope is
# another key statement), and no seq below the size folded may be missing: a deleted row (a revocation) is
# a gap, refused, never skipped.

RANGE_COUNTED = 1024  # up to this many seqs the gap check counts them; beyond, the whole table where cheaper


def _missing_seq(
    start: int,
    size: int,
    count: Callable[[int, int], int],
    seqs: Callable[[int, int], Iterable[int]],
    whole: Callable[[], tuple[int, Any, Any]] | None,
) -> int | None:
    """The first seq in [start, size) the log holds no row at, or None. ``count(lo, hi)``: its rows with
    lo <= seq < hi; ``whole()``: (rows, min seq, max seq) of the table, where the database counts a table
    faster than a range (SQLite counts the pages of its smallest index; a range of its rowid walks every
    envelope: ~60 ms at 100k entries) — rows = max + 1 with min 0 is every seq; ``seqs(lo, hi)``: the
    seqs in order, read only to name a gap."""
    if size <= start:
        return None
    if whole is not None and size - start > RANGE_COUNTED:
        rows, lo, hi = whole()
        if lo == 0 and hi is not None and rows == int(hi) + 1 >= size:
            return None
    elif count(start, size) == size - start:
        return None
    want = start
    for seq in seqs(start, size):
        if int(seq) != want:
            return want
        want += 1
    return want if want < size else None


# Which rows are ``key.*`` entries is what their leaves commit, not their ``kind`` column: one UPDATE of a
# key.revoke row's kind would take the revocation out of a read selecting on that column alone. A key entry
# may only be signed by a key holding the admin role (``ledger.entries`` KIND_ROLES), and the signer is
# committed by the leaf too, so the candidates are the rows of the kind index's ``key.*`` range AND every
# row signed by a key that held the admin role (the signer index; the admins found as the key entries
# enrolling or granting it are read: a fixpoint, a round or two). Every candidate is checked against its
# leaf (``committed_rows``): a key row whose kind column was renamed is still read through its signer and
# refused, never skipped. Cost: the key entries plus the admins' other entries (verdicts, notes they
# signed), each through its index — never a scan of the log. Hiding a key entry now takes rewriting both
# its kind and its signer columns (still found by ``ledger verify``, which re-derives every leaf).

_KEY_KINDS_ADMIN = ("key.enrol", "key.grant")


def admins_named(rows: Iterable[tuple[Any, ...]]) -> set[str]:
    """The key ids the ``key.enrol``/``key.grant`` rows among ``rows`` (evidence tuples, kind column at 2,
    envelope at 5) give the admin role (read from their envelopes; a row that does not parse names none:
    the leaf check and the fold refuse it later)."""
    from ledger.signing import parse_envelope

    found: set[str] = set()
    for r in rows:
        if r[2] not in _KEY_KINDS_ADMIN:
            continue
        try:
            payload = parse_envelope(bytes(r[5])).statement()["payload"]
            if "admin" in payload.get("roles", ()):
                found.add(str(payload["key_id"]))
        except (LedgerError, KeyError, TypeError, ValueError, AttributeError):
            continue
    return found


def first_logged_since(since: str, n: int, candidate: int | None, logged_at_of: Callable[[int], str]) -> int:
    """The first seq below ``n`` the log took at or after ``since`` (``n`` when none), by the log times the
    leaves commit: ``logged_at_of(seq)`` reads one row's time checked against its leaf (``IntegrityError``
    for an edited row, or none at that seq). ``logged_at`` never decreases along the log (the sequencer
    refuses an earlier time; ``ledger verify`` names one), so the boundary is where the committed times
    cross ``since``. ``candidate``: the boundary the mutable ``logged_at`` column's index gives (the first
    seq whose column is at or after ``since``); it is the answer when the committed times of it and of
    the entry before it confirm it (two primary-key reads). Else — a column moved behind the log's back
    — the boundary is bisected over committed times (log2 n reads; an edited row met is refused)."""

    def at_or_after(seq: int) -> bool:
        return logged_at_of(seq) >= since

    c = n if candidate is None else min(max(int(candidate), 0), n)
    if (c == n or at_or_after(c)) and (c == 0 or not at_or_after(c - 1)):
        return c
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) // 2
        if at_or_after(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def gap_error(seq: int) -> IntegrityError:
    """The refusal of a log-time read (``logged_at``, asked only for a seq below the size read at) that
    finds no row there: the row was deleted or moved behind the log's back — an integrity error, never
    "no such entry"."""
    return IntegrityError(
        f"the log has no entry at seq {seq}, below the entries it is read at: its row was deleted or moved "
        "behind the log's back; no verdict or routing decision is made on it",
        hint=COMMITTED_HINT,
    )


def missing_row_error(seq: int, n: int) -> IntegrityError:
    """The refusal of a log read that finds no row at a seq below the size it reads at."""
    return IntegrityError(
        f"the log has no entry at seq {seq}, below its {n} entries: its row was deleted behind the log's "
        "back; no verdict or routing decision is made on it",
        hint=COMMITTED_HINT,
    )


def admin_ids(ring: Keyring) -> list[str]:
    """The ids of the keys of ``ring`` that hold the admin role (revoked or not): the signers whose rows
    a fold from where ``ring`` stands reads as candidate key entries (``key_candidates``)."""
    return sorted(str(k) for k, r in ring.keys.items() if "admin" in r.roles)


def key_candidates(
    by_kind: Iterable[tuple[Any, ...]],
    signed_by: Callable[[list[str]], Iterable[tuple[Any, ...]]],
    admins: Iterable[str] = (),
) -> list[tuple[Any, ...]]:
    """The rows that may be ``key.*`` entries: ``by_kind`` (the kind index's ``key.*`` range) and the rows
    ``signed_by(key ids)`` returns for every key that held the admin role — ``admins`` (as of the start of
    the range) and those the rows read enrol or grant it — each once, in seq order."""
    rows: dict[int, tuple[Any, ...]] = {int(r[0]): r for r in by_kind}
    asked: set[str] = set()
    want = set(admins) | admins_named(rows.values())
    while want - asked:
        new = sorted(want - asked)
        asked.update(new)
        got = [r for r in signed_by(new) if int(r[0]) not in rows]
        rows.update((int(r[0]), r) for r in got)
        want |= admins_named(got)
    return [rows[s] for s in sorted(rows)]


def committed_key_rows(
    rows: Iterable[tuple[Any, ...]],
    start: int,
    size: int,
    *,
    count: Callable[[int, int], int],
    seqs: Callable[[int, int], Iterable[int]],
    whole: Callable[[], tuple[int, Any, Any]] | None = None,
    record_of: Callable[[int], bytes | None] | None = None,
) -> list[tuple[int, bytes]]:
    """(seq, envelope) of the ``key.*`` entries with start <= seq < size, in seq order, for ``replay_keys``,
    from their rows (the evidence columns and ``leaf_hash``, as ``committed_rows`` takes them), each read
    as the log committed it; ``IntegrityError`` for a seq in the range the log holds no row at (a row
    deleted behind its back: ``count``/``seqs``/``whole`` as ``_missing_seq`` takes them), a row whose
    columns are not what its leaf commits (``committed_rows``) or whose envelope is not its entry id's."""
    hint = COMMITTED_HINT
    missing = _missing_seq(start, size, count, seqs, whole)
    if missing is not None:
        raise IntegrityError(
            f"the log has no entry at seq {missing}, below the {size} entries its keyring is folded from: "
            "its row was deleted behind the log's back (a key entry gone — a revocation — would change "
            "which signers are trusted); no verdict or routing decision is made on it",
            hint=hint,
        )
    # each row against its leaf, its envelope against its entry id (``committed_rows``); then only the
    # key entries among them (the candidates hold the admins' other entries too), by their checked kind
    return [
        (int(seq), bytes(envelope))
        for seq, _id, kind, *_, envelope in committed_rows(
            sorted(rows, key=lambda r: r[0]),
            record_of,
            "no keyring is folded from it (a key entry altered or hidden changes which signers are "
            "trusted): nothing is appended, and no verdict or routing decision is made, on it",
        )
        if str(kind).startswith("key.")
    ]


# what ``check_extends_held`` found, per repo: (its change stamp, the held checkpoint's size and root)
_HELD_CHECKED: weakref.WeakKeyDictionary[Any, tuple[Any, int, bytes]] = weakref.WeakKeyDictionary()


def check_extends_held(ledger: Any) -> Checkpoint | None:
    """Refuse (``IntegrityError``) a log that no longer extends the checkpoint its home holds: fewer
    entries than it (lost, or truncated behind the log's back), or a tree at its size whose root is not
    the one it signs (an entry before it rewritten or removed). The root is computed from the stored
    tiles and leaf hashes (``PolicyRepo.tree_root``: O(log n) reads), not by verifying the log. ``ledger``:
    a ``ledger.policy.port.PolicyLedger`` (``held()``, ``size()``, ``repo.tree_root``). Returns the held
    checkpoint (None when the home holds none). A repo with a change stamp (``data_version``) is checked
    once per stamp and held checkpoint."""
    held: Checkpoint | None = ledger.held()
    if held is None:
        return None
    repo = ledger.repo
    stamp_of = getattr(repo, "data_version", None)
    stamp = stamp_of() if stamp_of is not None else None  # read before the reads it vouches for
    if stamp is not None and _HELD_CHECKED.get(repo) == (stamp, held.size, held.root):
        return held
    size = ledger.size()
    hint = (
        "the home saw these entries (its checkpoint file is outside the database): `ledger verify` names "
        "what changed; restore the database from a backup the held checkpoint vouches for"
    )
    fault = held_fault(size, held, repo.tree_root)
    if fault is not None and fault.lost:
        raise IntegrityError(
            f"the log has {size} entries; this home holds a signed checkpoint of size {held.size}: "
            f"{held.size - size} entries it saw are gone (the log was truncated behind its back)",
            hint=hint,
        )
    if fault is not None and fault.root is None:
        raise IntegrityError(
            f"the log is not the one this home holds a signed checkpoint of (size {held.size}): "
            f"{fault.detail}",
            hint=hint,
        )
    if fault is not None and fault.root is not None:
        raise IntegrityError(
            f"the log is not the one this home holds a signed checkpoint of: its first {held.size} entries "
            f"hash to root {fault.root.hex()[:16]}…, the held checkpoint signs {held.root.hex()[:16]}… (an "
            "entry before it was rewritten or removed)",
            hint=hint,
        )
    if stamp is not None:
        _HELD_CHECKED[repo] = (stamp, held.size, held.root)
    return held


_PKCS8_ED25519 = bytes.fromhex("302e020100300506032b657004220420")  # RFC 8410: then the 32-byte seed


def _public_key_of(home: Any, name: str) -> PublicKey:
    """The public key of the home's private key ``name``: from the seed of its PKCS#8 PEM (what
    ``SigningKey.save`` writes), with libsodium, as a fresh ``ledger verdict`` has it loaded already
    (``SigningKey.load`` imports cryptography's serialization: ~8 ms); any other form through it."""
    lines: list[str] = []
    try:
        lines = home.key_path(name).read_text(encoding="ascii").split()
        der = base64.b64decode("".join(lines[3:-3]), validate=True)
    except (OSError, ValueError):
        der = b""
    if lines[:3] == ["-----BEGIN", "PRIVATE", "KEY-----"] and len(der) == 48 and der[:16] == _PKCS8_ED25519:
        from nacl.bindings import crypto_sign_seed_keypair

        return PublicKey(crypto_sign_seed_keypair(der[16:])[0])
    return PublicKey(home.load_key(name).public.raw)


def held_checkpoint_of(home: Any, origin: str, log_key: str) -> Checkpoint | None:
    """The checkpoint ``home`` holds (``HOME/checkpoint``), its signature checked with the home's log key
    (named ``log_key``) under ``origin``, as ``Ledger.held`` checks it; None when it holds none,
    ``ProofError`` when the file is not a signed checkpoint of this log."""
    note = home.held_checkpoint()
    if note is None:
        return None
    try:
        public = _public_key_of(home, log_key)
        cp = parse_checkpoint(note, origin, public)
        if cp.origin != origin:
            raise ProofError(f"the checkpoint is of the log {cp.origin!r}, not {origin!r}")
    except LedgerError as e:
        raise ProofError(
            f"{home.checkpoint_path} is not a signed checkpoint of this log: {e.message}",
            hint="it is the anchor verify checks the database against: restore it, or remove it to "
            "hold the next checkpoint the home publishes",
        ) from e
    return cp


# --- the SQLite read path -----------------------------------------------------------------------------------


class EntryRow(NamedTuple):
    """The ``log_entries`` columns ``entry_from_row`` reads."""

    seq: int
    entry_id: str
    signer: str
    logged_at: str
    envelope: bytes
    prev_hash: str
    chain_hash: str


_ROW = "e.seq, e.entry_id, e.signer, e.logged_at, CAST(e.envelope AS BLOB), e.prev_hash, e.chain_hash"


def sqlite_file(database_url: str) -> Path | None:
    """The database file of a plain ``sqlite:///PATH`` URL (no query options), else None."""
    if not database_url.startswith(_SQLITE) or "?" in database_url:
        return None
    path = database_url.removeprefix(_SQLITE)
    if not path or path.startswith(":"):
        return None
    return Path(path)


class SqliteEntries:
    """``get``, ``query``, ``page_json`` and ``signer_names`` of the service, on a SQLite file, read-only."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._ring: Keyring | None = None

    @classmethod
    def open(cls, database_url: str) -> SqliteEntries | None:
        """The reader of a migrated SQLite ledger; None when the service should read it (another database,
        a file this driver cannot open read-only, or a database without a schema revision)."""
        path = sqlite_file(database_url)
        conn = _read_only(path) if path is not None else None
        return None if conn is None else cls(conn)

    def close(self) -> None:
        self._conn.close()

    @contextmanager
    def _snapshot(self) -> Iterator[sqlite3.Connection]:
        """One read transaction: every query inside sees the same WAL snapshot."""
        self._conn.execute("BEGIN DEFERRED")
        try:
            yield self._conn
        finally:
            self._conn.execute("COMMIT")

    def _rows(self, sql: str, params: Sequence[Any]) -> list[EntryRow]:
        return [EntryRow(*r) for r in self._conn.execute(sql, params)]

    # --- keys -------------------------------------------------------------------------------------------

    def keyring(self) -> Keyring:
        """The keyring as of the current log (``LogRepo.key_rows`` over the whole log, folded once)."""
        if self._ring is None:
            with self._snapshot() as c:
                head = c.execute("SELECT max(seq) FROM log_entries").fetchone()[0]
                size = 0 if head is None else int(head) + 1
                rows = [
                    (int(seq), bytes(env))
                    for seq, env in c.execute(
                        "SELECT seq, CAST(envelope AS BLOB) FROM log_entries"
                        " WHERE kind >= 'key.' AND kind < 'key/' AND seq >= 0 AND seq < ? ORDER BY kind, seq",
                        (size,),
                    )
                ]
            rows.sort(key=lambda r: r[0])
            self._ring = replay_keys(Keyring(), rows, size)
        return self._ring

    def signer_names(self) -> dict[str, str]:
        return signer_names(self.keyring())

    # --- entries ----------------------------------------------------------------------------------------

    def _ids_with_prefix(self, prefix: str, limit: int) -> list[str]:
        return [
            str(r[0])
            for r in self._conn.execute(
                "SELECT entry_id FROM log_entries WHERE entry_id LIKE ? LIMIT ?", (prefix + "%", limit)
            )
        ]

    def get(self, id_or_prefix: str) -> LoggedEntry:
        entry_id = resolve_entry_id(id_or_prefix, self._ids_with_prefix)
        sql = f"SELECT {_ROW} FROM log_entries AS e WHERE e.entry_id = ?"  # noqa: S608 (constant columns)
        rows = self._rows(sql, (entry_id,))
        if not rows:
            raise EntryNotFoundError(f"no entry with id {entry_id}")
        return entry_from_row(rows[0])

    def query(
        self,
        *,
        subject: dict[str, str] | None = None,
        kind: str | None = None,
        signer: str | None = None,
        since: str | None = None,
        until: str | None = None,
        after_seq: int | None = None,
        limit: int | None = 100,
    ) -> list[LoggedEntry]:
        """``Ledger.query``: entries matching every filter, in sequence order (``LogRepo.find``'s rows)."""
        refuse_nul(*(subject or {}).keys(), *(subject or {}).values(), kind or "", signer or "")
        signer_id = find_key(self.keyring(), signer).key_id if signer else None
        since_t, until_t = log_time(since), log_time(until)
        where: list[str] = []
        params: list[Any] = []
        for k, v in (subject or {}).items():
            where.append("e.seq IN (SELECT seq FROM entry_subjects WHERE field = ? AND value = ?)")
            params += [k, v]
        if kind:
            if kind.endswith("*"):
                where.append("e.kind LIKE ?")
                params.append(kind[:-1] + "%")
            else:
                where.append("e.kind = ?")
                params.append(kind)
        if signer_id:
            where.append("e.signer = ?")
            params.append(signer_id)
        if since_t:
            where.append("e.logged_at >= ?")
            params.append(since_t)
        if until_t:
            where.append("e.logged_at < ?")
            params.append(until_t)
        if after_seq is not None:
            where.append("e.seq > ?")
            params.append(after_seq)
        # constant text and ``?`` placeholders only: every value is a bound parameter
        sql = f"SELECT {_ROW} FROM log_entries AS e"  # noqa: S608
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY e.seq"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return [entry_from_row(r) for r in self._rows(sql, params)]

    def page_json(self, entries: Sequence[LoggedEntry], limit: int | None) -> dict[str, Any]:
        return page_json(entries, limit, self.signer_names())


# --- the policy's reads (``ledger.policy.port``) on a SQLite file ---------------------------------------

# the evidence tuple's columns, and the leaf hash each row is checked against (``committed_rows``)
_EVIDENCE = "e.seq, e.entry_id, e.kind, e.signer, e.logged_at, CAST(e.envelope AS BLOB), e.leaf_hash"


RARE_ROWS = 4096  # below this many entries of a kind (or logged since a time), their index drives a read


def _marks(values: Sequence[Any]) -> str:
    return ", ".join("?" * len(values))


class SqlitePolicyRepo:
    """``ledger.policy.port.PolicyRepo`` on one read-only stdlib ``sqlite3`` connection: the SQL of
    ``ledger.repo.LogRepo``'s policy reads, written to return the same rows (``tests/test_reads.py``
    compares them method by method). The connection never writes, so ``PRAGMA data_version`` on it
    changes whenever any other connection — of this process or another — commits to the database."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    @contextmanager
    def read(self, *, snapshot: bool = False) -> Iterator[sqlite3.Connection]:
        """One read transaction (one WAL snapshot); a nested ``read`` runs inside the outer one."""
        c = self.conn
        if c.in_transaction:
            yield c
            return
        c.execute("BEGIN DEFERRED")
        try:
            yield c
        finally:
            c.execute("COMMIT")

    def data_version(self) -> int:
        """SQLite's change counter as this connection sees it (changes when another connection commits)."""
        return int(self.conn.execute("PRAGMA data_version").fetchone()[0])

    @staticmethod
    def _subject_seqs(subject: dict[str, str], n: int) -> tuple[str, list[Any]]:
        """SELECT seq of the subject's entries below ``n`` (``ledger.repo._subject_seqs``)."""
        (k0, v0), *rest = sorted(subject.items())
        sql = "SELECT s0.seq FROM entry_subjects AS s0 WHERE s0.field = ? AND s0.value = ? AND s0.seq < ?"
        params: list[Any] = [k0, v0, n]
        for k, v in rest:
            sql += " AND s0.seq IN (SELECT seq FROM entry_subjects WHERE field = ? AND value = ?)"
            params += [k, v]
        return sql, params

    @staticmethod
    def _tuples(conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        return conn.execute(sql, params).fetchall()

    def _evidence(self, conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """The evidence tuples of ``sql`` (which selects ``_EVIDENCE``), each checked against the record
        its leaf commits (``committed_rows``: IntegrityError for a row edited behind the log's back)."""
        return committed_rows(self._tuples(conn, sql, params), lambda seq: self._record(conn, seq))

    @staticmethod
    def _record(conn: sqlite3.Connection, seq: int) -> bytes | None:
        """The stored log record bytes of the row at ``seq`` (read to name the column a refused row
        differs in)."""
        got = conn.execute("SELECT CAST(record AS BLOB) FROM log_entries WHERE seq = ?", (seq,)).fetchone()
        return None if got is None or got[0] is None else bytes(got[0])

    def subject_rows(
        self, conn: sqlite3.Connection, subject: dict[str, str], n: int
    ) -> list[tuple[Any, ...]]:
        (k0, v0), *rest = sorted(subject.items())
        sql = (
            f"SELECT {_EVIDENCE} FROM entry_subjects AS s JOIN log_entries AS e ON e.seq = s.seq"  # noqa: S608
            " WHERE s.field = ? AND s.value = ? AND s.seq < ?"
        )
        params: list[Any] = [k0, v0, n]
        for k, v in rest:
            sql += " AND e.seq IN (SELECT seq FROM entry_subjects WHERE field = ? AND value = ?)"
            params += [k, v]
        return self._evidence(conn, sql + " ORDER BY s.seq", params)

    def linked_rows(
        self, conn: sqlite3.Connection, subject: dict[str, str], n: int, subject_entries: int
    ) -> list[tuple[Any, ...]]:
        seqs, seq_params = self._subject_seqs(subject, n)
        total = conn.execute("SELECT max(rowid) FROM entry_refs").fetchone()[0]
        if int(total or 0) <= subject_entries:
            referring = (
                "SELECT r.seq FROM entry_refs AS r WHERE EXISTS (SELECT 1 FROM log_entries AS t"  # noqa: S608
                f" WHERE t.entry_id = r.target_id AND t.seq IN ({seqs}))"
            )
        else:
            referring = (
                "SELECT seq FROM entry_refs WHERE target_id IN"  # noqa: S608
                f" (SELECT entry_id FROM log_entries WHERE seq IN ({seqs}))"
            )
        referrers = f"SELECT {_EVIDENCE} FROM log_entries AS e WHERE e.seq < ? AND e.seq IN ({referring})"  # noqa: S608
        targets = (
            f"SELECT {_EVIDENCE} FROM log_entries AS e WHERE e.seq < ? AND e.entry_id IN"  # noqa: S608
            f" (SELECT target_id FROM entry_refs WHERE seq IN ({seqs}))"
        )
        return self._evidence(conn, referrers, [n, *seq_params]) + self._evidence(
            conn, targets, [n, *seq_params]
        )

    def logged_at(self, conn: sqlite3.Connection, seq: int) -> str:
        """The log time of the entry at ``seq``, checked against the record its leaf commits."""
        row = conn.execute(
            "SELECT seq, entry_id, kind, signer, logged_at, CAST(record AS BLOB), leaf_hash FROM log_entries"
            " WHERE seq = ?",
            (seq,),
        ).fetchone()
        if row is None:
            raise gap_error(seq)
        if record_leaf_hex(int(row[0]), row[4], row[1], row[2], row[3]) != row[6]:
            raise uncommitted_error(row, None if row[5] is None else bytes(row[5]))
        return str(row[4])

    def referrer_rows(self, conn: sqlite3.Connection, entry_id: str, n: int) -> list[tuple[Any, ...]]:
        """The evidence tuples below ``n`` of the entries that reference ``entry_id``, in seq order
        (``LogRepo.referrer_rows``)."""
        sql = (
            f"SELECT {_EVIDENCE} FROM log_entries AS e WHERE e.seq < ? AND e.seq IN"  # noqa: S608
            " (SELECT seq FROM entry_refs WHERE target_id = ?) ORDER BY e.seq"
        )
        return self._evidence(conn, sql, (n, entry_id))

    def host_rows(
        self, conn: sqlite3.Connection, kinds: Sequence[str], hosts: Sequence[str], n: int
    ) -> list[tuple[Any, ...]]:
        sql = (
            f"SELECT {_EVIDENCE} FROM log_entries AS e JOIN entry_subjects AS s ON s.seq = e.seq"  # noqa: S608
            f" WHERE e.kind IN ({_marks(kinds)}) AND e.seq < ? AND s.field = 'host'"
            f" AND s.value IN ({_marks(hosts)})"
        )
        return self._evidence(conn, sql, [*kinds, n, *hosts])

    def subject_hosts(
        self,
        conn: sqlite3.Connection,
        subject: dict[str, str],
        n: int,
        seqs: Sequence[int] = (),
        among: Sequence[str] | None = None,
    ) -> list[str]:
        base = "SELECT DISTINCT value FROM entry_subjects WHERE field = 'host'"
        base_params: list[Any] = []
        if among is not None:
            if not among:
                return []
            base += f" AND value IN ({_marks(among)})"
            base_params = list(among)
        sub, sub_params = self._subject_seqs(subject, n)
        found = {
            str(v) for (v,) in self._tuples(conn, f"{base} AND seq IN ({sub})", [*base_params, *sub_params])
        }
        todo = sorted(set(seqs))
        for i in range(0, len(todo), 500):
            part = todo[i : i + 500]
            found.update(
                str(v)
                for (v,) in self._tuples(conn, f"{base} AND seq IN ({_marks(part)})", [*base_params, *part])
            )
        return sorted(found)

    def kind_hosts(self, conn: sqlite3.Connection, kinds: Sequence[str], n: int) -> list[str]:
        # SQLite's statistics hold no count per kind: joined from the subjects' side it walks every host
        # entry (~0.9 s at 200k) to find a kind's handful. Where the kinds' entries are fewer than RARE_ROWS
        # their index drives the join; else each distinct host value (a handful: the (field, value) index
        # answers them) is asked whether it has an entry of these kinds — a walk of that value's entries that
        # stops at the first. Both plans return the same values.
        if not kinds:
            return []
        marks = _marks(kinds)
        few = "SELECT count(*) FROM (SELECT 1 FROM log_entries WHERE kind IN ({}) AND seq < ? LIMIT ?)"
        few = few.format(marks)
        if self._count(conn, few, [*kinds, n]) < RARE_ROWS:
            sql = (
                "SELECT DISTINCT s.value FROM log_entries AS e INDEXED BY ix_log_entries_kind"  # noqa: S608
                f" JOIN entry_subjects AS s ON s.seq = e.seq WHERE e.kind IN ({marks}) AND e.seq < ?"
                " AND s.field = 'host'"
            )
            return sorted(str(v) for (v,) in self._tuples(conn, sql, [*kinds, n]))
        values = self._tuples(conn, "SELECT DISTINCT value FROM entry_subjects WHERE field = 'host'", [])
        has = (
            "SELECT EXISTS (SELECT 1 FROM entry_subjects AS s CROSS JOIN log_entries AS e"  # noqa: S608
            " ON e.seq = s.seq WHERE s.field = 'host' AND s.value = ? AND s.seq < ?"
            f" AND e.kind IN ({marks}))"
        )
        return sorted(str(v) for (v,) in values if conn.execute(has, [v, n, *kinds]).fetchone()[0])

    def subject_kind_rows(
        self,
        conn: sqlite3.Connection,
        subject: dict[str, str],
        kinds: Sequence[str],
        n: int,
        *,
        logged_since: str | None = None,
    ) -> list[tuple[Any, ...]]:
        # SQLite's statistics hold no count per value, so it walks every seq of the subject's fields (a
        # long campaign's 10,000s: ~7 ms a query at 1M) even where the kinds asked for have a handful of
        # entries (a subject's verdicts, a host's probes or routing changes) or a handful were logged
        # since ``logged_since`` (the recent probes). The indexes are asked, counting no further than
        # needed: where the kind's (or the recent) entries are fewer than RARE_ROWS and no more than the
        # smallest subject field's, they are read from their index and each one's subject checked by one
        # lookup. Every plan returns the same rows.
        # ``logged_since`` is judged by the log times the leaves commit, never the mutable column: the
        # first seq logged since (``first_logged_since``: the column's index proposes it, two committed
        # reads confirm it) bounds the rows by seq, and every row returned is checked against its leaf.
        head = f"SELECT {_EVIDENCE} FROM log_entries AS e"  # noqa: S608
        where = f" WHERE e.kind IN ({_marks(kinds)}) AND e.seq < ?"
        params: list[Any] = [*kinds, n]
        since_seq = 0
        if logged_since is not None:
            since_seq = self._first_since(conn, logged_since, n)
            where += " AND e.seq >= ?"
            params.append(since_seq)
        few = "SELECT count(*) FROM (SELECT 1 FROM {} AND seq < ? LIMIT ?)"
        by_kind = self._count(conn, few.format(f"log_entries WHERE kind IN ({_marks(kinds)})"), [*kinds, n])
        by_time = RARE_ROWS if logged_since is None else min(RARE_ROWS, n - since_seq)
        best = min(by_kind, by_time)
        plan = "subject"
        # (an empty subject: the kinds' or the recent rows are read by their index as well — left to
        # itself SQLite walks the rowid range for ORDER BY seq: 170 ms at 200k for a handful of rows)
        if best < RARE_ROWS:
            field = few.format("entry_subjects WHERE field = ? AND value = ?")
            if all(self._count(conn, field, [k, v, n], best + 1) >= best for k, v in subject.items()):
                plan = "kind" if by_kind <= by_time else "seq"
        if plan == "kind":  # named: for ORDER BY seq SQLite would rather scan the table than sort
            head += " INDEXED BY ix_log_entries_kind"
        elif plan == "seq":  # the recent rows: a range of the rowid (seq)
            head += " NOT INDEXED"
        member = (
            " AND e.seq IN (SELECT seq FROM entry_subjects WHERE field = ? AND value = ?)"
            if plan == "subject"
            else " AND EXISTS (SELECT 1 FROM entry_subjects AS s WHERE s.seq = e.seq AND s.field = ?"
            " AND s.value = ?)"
        )
        for k, v in subject.items():
            where += member
            params += [k, v]
        rows = self._evidence(conn, head + where + " ORDER BY e.seq", params)
        return rows if logged_since is None else [r for r in rows if str(r[4]) >= logged_since]

    def _first_since(self, conn: sqlite3.Connection, since: str, n: int) -> int:
        """``first_logged_since`` on this connection: the column's index proposes, committed times decide."""
        # the first row of the logged_at index at or after ``since``: one index probe (ties in rowid order)
        got = conn.execute(
            "SELECT seq FROM log_entries INDEXED BY ix_log_entries_logged_at WHERE logged_at >= ?"
            " ORDER BY logged_at LIMIT 1",
            (since,),
        ).fetchone()

        def committed_at(seq: int) -> str:
            try:
                return self.logged_at(conn, seq)
            except EntryNotFoundError:
                raise missing_row_error(seq, n) from None

        return first_logged_since(since, n, None if got is None else int(got[0]), committed_at)

    @staticmethod
    def _count(conn: sqlite3.Connection, sql: str, params: list[Any], limit: int | None = None) -> int:
        """``sql``'s count, where it counts at most ``limit`` (default ``RARE_ROWS``) index entries."""
        return int(conn.execute(sql, [*params, RARE_ROWS if limit is None else limit]).fetchone()[0])

    def checkpoint_root(self, size: int, conn: sqlite3.Connection | None = None) -> str | None:
        row = (conn or self.conn).execute("SELECT root FROM checkpoints WHERE size = ?", (size,)).fetchone()
        return None if row is None else str(row[0])

    # --- what the ledger around it reads -----------------------------------------------------------

    def size(self, conn: sqlite3.Connection | None = None) -> int:
        head = (conn or self.conn).execute("SELECT max(seq) FROM log_entries").fetchone()[0]
        return 0 if head is None else int(head) + 1

    def key_rows(
        self, conn: sqlite3.Connection, start: int, size: int, admins: Iterable[str] = ()
    ) -> list[tuple[int, bytes]]:
        """``LogRepo.key_rows``: (seq, envelope) of the ``key.*`` entries — the kind index's and every
        admin's rows (``key_candidates``; ``admins``: the admin key ids as of ``start``) — each read as
        the log committed it and none missing (``committed_key_rows``: IntegrityError)."""

        def signed_by(ids: list[str]) -> list[tuple[Any, ...]]:
            return self._tuples(
                conn,
                f"SELECT {_EVIDENCE} FROM log_entries AS e"  # noqa: S608
                f" WHERE e.signer IN ({_marks(ids)}) AND e.seq >= ? AND e.seq < ?",
                (*ids, start, size),
            )

        rows = key_candidates(
            self._tuples(
                conn,
                f"SELECT {_EVIDENCE} FROM log_entries AS e WHERE e.kind >= 'key.' AND e.kind < 'key/'"  # noqa: S608
                " AND e.seq >= ? AND e.seq < ? ORDER BY e.kind, e.seq",
                (start, size),
            ),
            signed_by,
            admins,
        )

        def one(sql: str, params: Sequence[Any] = ()) -> Any:
            return conn.execute(sql, params).fetchone()[0]

        return committed_key_rows(
            rows,
            start,
            size,
            count=lambda lo, hi: int(
                one("SELECT count(*) FROM log_entries WHERE seq >= ? AND seq < ?", (lo, hi))
            ),
            # a bare count(*) counts the pages of the smallest index; min and max: one rowid lookup each
            whole=lambda: (
                int(one("SELECT count(*) FROM log_entries")),
                one("SELECT min(seq) FROM log_entries"),
                one("SELECT max(seq) FROM log_entries"),
            ),
            seqs=lambda lo, hi: [
                s
                for (s,) in conn.execute(
                    "SELECT seq FROM log_entries WHERE seq >= ? AND seq < ? ORDER BY seq", (lo, hi)
                )
            ],
            record_of=lambda seq: self._record(conn, seq),
        )

    def referrers(self, entry_id: str, rel: str | None = None) -> list[EntryRow]:
        """``LogRepo.referrers``: the rows of the entries that reference ``entry_id``, in seq order."""
        sub = "SELECT seq FROM entry_refs WHERE target_id = ?"
        params: list[Any] = [entry_id]
        if rel:
            sub += " AND rel = ?"
            params.append(rel)
        sql = f"SELECT {_ROW} FROM log_entries AS e WHERE e.seq IN ({sub}) ORDER BY e.seq"  # noqa: S608
        with self.read() as c:
            return [EntryRow(*r) for r in c.execute(sql, params)]

    # --- the tree, for a checkpoint at a size no stored checkpoint has ---------------------------------

    def _tile_column(self, column: str, level: int, lo: int, hi: int) -> dict[int, bytes]:
        span = tile_span(level)
        if span is None:
            return {}
        # a tile of this log names its own last leaf (``valid_tiles``): a row inserted with another one
        # that happens to carry that entry's chain hash is no tile of the log
        sql = (
            f"SELECT t.idx, CAST(t.{column} AS BLOB) FROM tiles AS t JOIN log_entries AS e"  # noqa: S608 (constant column)
            " ON e.seq = t.last_seq AND e.chain_hash = t.chain_hash"
            " WHERE t.level = ? AND t.idx >= ? AND t.idx < ? AND t.last_seq = (t.idx + 1) * ? - 1"
        )
        with self.read() as c:
            return {int(i): bytes(v) for i, v in c.execute(sql, (level, lo, hi, span))}

    def tiles(self, level: int, lo: int, hi: int) -> dict[int, bytes]:
        return self._tile_column("hashes", level, lo, hi)

    def roots(self, level: int, lo: int, hi: int) -> dict[int, bytes]:
        return self._tile_column("root", level, lo, hi)

    def leaves(self, lo: int, hi: int) -> list[bytes]:
        with self.read() as c:  # each leaf the hash of its row's record, as RepoTiles.leaves reads it
            return [
                checked_leaf(int(seq), str(eid), None if rec is None else bytes(rec), leaf)
                for seq, eid, rec, leaf in c.execute(
                    "SELECT seq, entry_id, CAST(record AS BLOB), leaf_hash FROM log_entries "
                    "WHERE seq >= ? AND seq < ? ORDER BY seq",
                    (lo, hi),
                )
            ]

    def tree_root(self, size: int, conn: sqlite3.Connection | None = None) -> bytes:
        """The Merkle root of the log's first ``size`` entries, from the stored tiles and leaf hashes
        (one read transaction; ``IntegrityError`` where the log lacks leaves below ``size``)."""
        from ledger.tiles import TileTree

        with self.read():
            try:
                return TileTree(self, size).root()
            except ValueError as e:  # a leaf hash column that is not hex
                raise IntegrityError(f"a stored leaf hash below size {size} is not a hash: {e}") from e


def _read_only(path: Path) -> sqlite3.Connection | None:
    """A read-only connection to a migrated ledger database of this schema revision; None when the
    service should open it (LogFormatError when it is of another revision, as the service says)."""
    if not path.is_file():
        return None
    try:
        conn = sqlite3.connect(
            f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=60, isolation_level=None
        )
    except sqlite3.Error:
        return None
    try:
        conn.execute("PRAGMA busy_timeout=60000")
        rev = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    except sqlite3.Error:
        conn.close()
        return None
    if rev is None:
        conn.close()
        return None
    try:
        check_revision(str(rev[0]))
    except LogFormatError:
        conn.close()
        raise
    return conn


class SqlitePolicyLedger:
    """``ledger.policy.port.PolicyLedger`` for the reads of ``ledger verdict`` and ``ledger check
    routing-change`` on a SQLite home, without SQLAlchemy or the service: the same keyring fold, the same
    store, the same checkpoint root. Read-only: recording (``--record``) goes through the service."""

    def __init__(self, home: Any, conn: sqlite3.Connection) -> None:
        self.home = home
        self._cfg = home.config()
        self._repo = SqlitePolicyRepo(conn)
        self._store: Any = None
        self._rings: tuple[int | None, dict[int, Keyring]] = (None, {})

    @classmethod
    def open(cls, home: Any) -> SqlitePolicyLedger | None:
        """The read-only policy ledger of ``home`` (a ``ledger.home.Home``), or None when its database is
        not a plain SQLite file this driver can read (then the service opens it)."""
        path = sqlite_file(home.config().database_url)
        if path is None:
            return None
        conn = _read_only(path)
        return None if conn is None else cls(home, conn)

    @classmethod
    def open_database(cls, home: Any, database_url: str, store: Any) -> SqlitePolicyLedger | None:
        """The read-only policy ledger over ``database_url`` with ``store`` (the service's own, for its
        evaluations on SQLite homes), or None when that is not a plain SQLite file this driver can read."""
        path = sqlite_file(database_url)
        conn = None if path is None else _read_only(path)
        if conn is None:
            return None
        led = cls(home, conn)
        led._store = store
        return led

    def close(self) -> None:
        self._repo.conn.close()

    @property
    def repo(self) -> SqlitePolicyRepo:
        return self._repo

    @property
    def store(self) -> Any:
        if self._store is None:
            self._store = self.home.open_store()
        return self._store

    def size(self) -> int:
        return self._repo.size()

    def keyring(self, conn: sqlite3.Connection | None = None, *, at_size: int | None = None) -> Keyring:
        """The keyring as of ``at_size`` entries (default: the whole log), folded from the key entries;
        remembered while ``data_version`` is unchanged (no other connection committed since)."""
        version = self._repo.data_version()
        if self._rings[0] != version:
            self._rings = (version, {})
        with self._repo.read() as c:
            n = self._repo.size(c) if at_size is None else at_size
            ring = self._rings[1].get(n)
            if ring is None:
                ring = self._rings[1][n] = replay_keys(Keyring(), self._repo.key_rows(c, 0, n), n)
            return ring

    def signed_checkpoint(self, *, size: int | None = None) -> Any:
        """``Ledger.signed_checkpoint``: the root from the stored tiles, signed with the log key."""
        from ledger.log import sign_checkpoint
        from ledger.tiles import TileTree

        with self._repo.read() as c:
            current = self._repo.size(c)
            n = current if size is None else size
            if not 0 <= n <= current:
                raise InputError(f"the log has {current} entries; no checkpoint at size {n}")
            root = TileTree(self._repo, n).root()
        key = self.home.load_key(self._cfg.log_key)
        return sign_checkpoint(self._cfg.origin, n, root, key, key_name=self._cfg.origin)

    def checkpoint(self, *, size: int | None = None, store: bool = True) -> Any:
        if store:
            raise NotAvailableError("a read-only ledger publishes no checkpoint")
        return self.signed_checkpoint(size=size)

    def held(self) -> Checkpoint | None:
        """``Ledger.held``: the checkpoint the home holds, its signature checked; None when none."""
        return held_checkpoint_of(self.home, self._cfg.origin, self._cfg.log_key)

    def get(self, id_or_prefix: str) -> LoggedEntry:
        return SqliteEntries(self._repo.conn).get(id_or_prefix)

    def query(self, *args: Any, **filters: Any) -> list[LoggedEntry]:
        raise NotAvailableError("the policy's read-only ledger answers the policy's reads only")

    def referrers(self, entry_id: str, rel: str | None = None) -> list[LoggedEntry]:
        return [entry_from_row(r) for r in self._repo.referrers(entry_id, rel)]

    def make_statement(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        raise NotAvailableError(
            "nothing is recorded through the read-only ledger (--record opens the service)"
        )

    def sign(self, *args: Any, **kwargs: Any) -> Any:
        raise NotAvailableError("nothing is signed through the read-only ledger (--record opens the service)")

    def append(self, *args: Any, **kwargs: Any) -> list[LoggedEntry]:
        raise NotAvailableError(
            "nothing is appended through the read-only ledger (--record opens the service)"
        )
