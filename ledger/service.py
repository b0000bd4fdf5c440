"""The one service layer the CLI and the API call: every write and every read goes through here."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import logging
import mimetypes
import os
import socket
import threading
import time
from collections.abc import Callable, Collection, Container, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, NoReturn

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ledger import __version__
from ledger.atomic import write_atomic
from ledger.canonical import canonical_bytes, parse_canonical
from ledger.db import (
    SEQ_MAX,
    T_CHECKPOINTS,
    T_ENTRIES,
    analyse_if_grown,
    check_schema,
    make_engine,
    migrate,
)
from ledger.entries import (
    JUDGED_SUBJECT_KINDS,
    ArtifactRef,
    Statement,
    check_ingest,
    format_time,
    judged_subject_problem,
    now_utc,
    parse_statement,
    parse_time,
)
from ledger.errors import (
    HOME_FAULTS,
    ArtifactMissingError,
    ArtifactTooLargeError,
    BatchTooLargeError,
    Category,
    ChainBrokenError,
    ConfigError,
    DanglingRefError,
    EntryNotFoundError,
    HomeFaultError,
    InputError,
    IntegrityError,
    LedgerError,
    LogClockAheadError,
    LogFormatError,
    LogInconsistentError,
    LogTimeBackwardsError,
    ProofError,
    RequestTooLargeError,
    SchemaError,
    StorageError,
    TileMismatchError,
)
from ledger.hashing import Digest, blake3_hex, hash_file, parse_digest
from ledger.home import Home, HomeConfig, ReceiptsRead, resolve_home
from ledger.keyring import KeyRecord, Keyring
from ledger.listing import page_of
from ledger.log import (
    GENESIS_PREV,
    LOG_FORMAT,
    MAX_CLOCK_SKEW,
    Checkpoint,
    EntryId,
    LogRecord,
    Receipt,
    ReceiptClaim,
    chain_hash,
    entry_id_of,
    held_fault,
    parse_checkpoint,
    parse_record,
    receipt_claim,
    receipt_place,
    record_leaf,
    sign_checkpoint,
    sign_receipt,
    verifier_key,
)
from ledger.logged import LoggedEntry, entry_from_row
from ledger.proofs import AuditReport, audit_receipts
from ledger.reads import (  # parse_subject_args: defined there, imported by the CLI without the service
    SIGNED_CONSEQUENCE,
    SUBJECT_FIELDS,
    ChainLink,
    admin_ids,
    chain_linked,
    chain_walk,
    committed_row,
    find_key,
    page_json,
    parse_subject_args,
    refuse_nul,
    resolve_entry_id,
    signer_names,
)
from ledger.repo import (
    EntryFilter,
    Head,
    KeysSince,
    LogRepo,
    SubjectSummary,
    checked_leaf,
    envelope_bytes,
    record_bytes,
)
from ledger.signing import Envelope, KeyId, PublicKey, SigningKey, parse_envelope, sign_envelope
from ledger.store import StoredArtifact, open_store, put_file
from ledger.tiles import (
    TILE_HEIGHT,
    TILE_WIDTH,
    TileBuilder,
    TileTree,
    full_tiles,
    tile_last_seq,
    tile_path,
)
from ledger.tokens import (
    TokenRecord,
    create_token,
    list_tokens,
    live_token,
    revoke_token,
    tokens_by_hash,
    verify_token,
)
from ledger.trust import TrustedLog, authorise, replay_keys
from ledger.verify import VerifyProblem, VerifyReport, check_held, index_rows, verify_log

if TYPE_CHECKING:  # the policy floor is imported where it is used: `ledger log` / `show` start without it
    from ledger.policy.fixtures import FixtureResult
    from ledger.policy.loader import LoadedPolicy
    from ledger.witnessing import WitnessSubmitter

__all__ = ["Ledger", "LoggedEntry", "VerifyProblem", "VerifyReport", "open_ledger", "parse_subject_args"]

MAX_BATCH = 1000
_PREFIXES_KEPT = 4096  # the sizes below the held checkpoint proved to be its tree there (``_within_held``)
_log = logging.getLogger("ledger.checkpoint")  # the sequencer's publication that failed (stderr)
# The sequencer publishes a checkpoint after an append every CHECKPOINT_EVERY entries, or when the newest
# published one is older than the interval (LEDGER_CHECKPOINT_INTERVAL seconds, default 1).
CHECKPOINT_EVERY = 1000


def checkpoint_interval_s() -> float:
    text = os.environ.get("LEDGER_CHECKPOINT_INTERVAL", "1")
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # NaN and negatives too
        raise ConfigError(f"LEDGER_CHECKPOINT_INTERVAL={text!r}: seconds, a number >= 0")
    return value


# An entry is a statement about evidence; the evidence itself (logs, manifests) goes to the store.
MAX_ENVELOPE_BYTES = 1024 * 1024


@dataclass
class _Prepared:
    envelope: Envelope
    envelope_bytes: bytes
    entry_id: EntryId
    statement: Statement
    verified_with: PublicKey | None = None  # the key its signature verified with before ordering
    # an ingest rule's refusal of an envelope the log held when it was checked (``_prepare``): answered as
    # a duplicate in the lock, or refused with this where the log does not hold it then
    refusal: LedgerError | None = None


@dataclass(eq=False)
class AppendRequest:
    """One ``Ledger.append`` call waiting for the sequencer: its batch, and its answer once committed."""

    prepared: list[_Prepared]
    given: datetime | None
    done: bool = False
    entries: list[LoggedEntry] | None = None
    error: BaseException | None = None
    # ``Ledger.submit``: called (from the committing thread) once the request is answered
    on_done: Callable[[AppendRequest], None] | None = None
    # ``Ledger.submit(token=…)``: the hash of the API token the write is authorised by (as the group
    # commits, in its transaction), and the token's record once it was found live with the writer role
    token: str | None = None
    token_record: TokenRecord | None = None

    def answer(self) -> list[LoggedEntry]:
        """The committed entries, or the refusal raised."""
        if self.error is not None:
            raise self.error
        assert self.entries is not None
        return self.entries


@dataclass
class _Plan:
    """What one group transaction wrote: each request's entries or refusal, the keys and chain hash at
    the new head, and whether a checkpoint is due."""

    outcomes: list[list[LoggedEntry] | LedgerError]
    ring: Keyring
    chain: str
    due: bool


def _authorise(group: list[AppendRequest], found: dict[str, TokenRecord]) -> list[AppendRequest]:
    """The group's requests whose API token (if they name one) is live with the writer role as the
    group commits; the others are answered with the refusal (unknown, revoked, a reader's token)."""
    admitted = []
    for r in group:
        if r.token is not None:
            try:
                r.token_record = live_token(found.get(r.token), "writer")
            except LedgerError as e:
                r.error, r.done = e, True
                continue
        admitted.append(r)
    return admitted


def _subject_cursor(after: str | None) -> tuple[int, str] | None:
    """A subject list's ``next`` (``SubjectSummary.cursor``: ``LAST_SEQ:FIELD``) as (seq, field)."""
    if after is None:
        return None
    seq, sep, field = after.partition(":")
    if (
        not sep
        or not field
        or "\x00" in field
        or not seq.isascii()
        or not seq.isdigit()
        or int(seq) > SEQ_MAX
    ):
        raise InputError(
            f"subject cursor {after[:80]!r} is not LAST_SEQ:FIELD",
            hint="pass back the `next` a subject list answered",
        )
    return int(seq), field


def _db_refusal(e: sa.exc.SQLAlchemyError) -> str:
    orig = getattr(e, "orig", None) or e
    if isinstance(e, sa.exc.IntegrityError):
        return f"append refused by the database: {orig}"
    return f"database error while appending: {orig}"


_refuse_nul = refuse_nul  # defined in ledger.reads, beside the SQLite read path that checks the same


class Ledger:
    """A ledger home opened for use: database, store, keys."""

    def __init__(
        self,
        home: Home,
        cfg: HomeConfig,
        *,
        database_url: str | None = None,
        store_path: str | None = None,
        home_bound: bool = False,
    ) -> None:
        """``home_bound``: this process is the home's own user (the CLI, ``ledger.cli._common.get_ledger``),
        not a server appending for remote clients: every entry ``append`` appends gets the log's receipt
        kept in the home (``HOME/receipts.jsonl``, ``ledger audit``). Every process, home-bound or not,
        holds each checkpoint it signs, for a read too (``HOME/checkpoint``: ``_hold``)."""
        self.home = home
        self.home_bound = home_bound
        self._held_read: tuple[tuple[int, int, int], Checkpoint] | None = None  # (file stat, its checkpoint)
        # (held size, held root, log size, head chain hash): a log this process proved extends the held
        # checkpoint and the newest stored one (``_refuse_fork``; held size -1: the home held none); the
        # sequencer signs receipts at a head it left there without reading the tiles again (``_guard_head``)
        self._extends: tuple[int, bytes, int, str] | None = None
        # the receipts of its own log this home kept, read from ``receipts.jsonl`` once and then only what
        # was appended: (where the read ended, floor, {index: kept} of those at index >= floor: ``_Kept``,
        # and those of this log whose fields place them nowhere: (entry id, index, why) as they say them)
        self._kept: tuple[ReceiptsRead, int, dict[int, set[_Kept]], list[tuple[Any, Any, str]]] | None = None
        # (held size, held root, {size: root}): the checkpoints of smaller sizes proved to be the held
        # checkpoint's tree at their size (``_within_held``)
        self._prefixes: tuple[int, bytes, dict[int, bytes]] | None = None
        # the newest checkpoint row the database stores, as read (note, size, root, format), and the
        # checkpoint it is once its signature was checked (None: a format-1 one, which anchors nothing):
        # checked once per row (``_stored_anchor``)
        self._stored_read: tuple[tuple[Any, ...], Checkpoint | None] | None = None
        self.cfg = cfg
        self.database_url = database_url or cfg.database_url
        self.engine: Engine = make_engine(self.database_url)
        check_schema(self.engine)
        self.repo = LogRepo(self.engine)
        self.store = open_store(store_path or cfg.store)
        self._keyring = Keyring()
        self._keyring_chain = GENESIS_PREV  # chain hash of the last entry the cached keyring folded
        self._log_key: SigningKey | None = None
        self._published: tuple[int, float] | None = None  # (size, monotonic time) this process published
        # (size, monotonic time it was published) of the newest checkpoint the database stored when the
        # sequencer last asked and it was not yet due (``_publish_due``)
        self._newest_seen: tuple[int, float] | None = None
        self._witnesses: WitnessSubmitter | None = None  # created on the first publication with witnesses
        self._readers = threading.local()  # each thread's read-only policy ledger (``_policy_reads``)
        # The keyring cache is shared by request threads of one server process (the tree is not cached:
        # it is read from the database's hash tiles, ``ledger.tiles``).
        self._cache_lock = threading.RLock()
        # The sequencer (``append``): batches checked outside the lock wait here; one caller at a time
        # leads, appending every waiting batch in one transaction (group commit), and wakes the rest.
        self._pending: list[AppendRequest] = []
        self._sequencer = threading.Condition(threading.Lock())
        self._leading = False  # a caller is committing a group; the others wait on ``_sequencer``
        self._committer: threading.Thread | None = None  # leads groups of ``submit``ted batches
        self._closing = False

    # --- life cycle -----------------------------------------------------------------------------

    @classmethod
    def init(
        cls,
        path: Path,
        *,
        database_url: str | None = None,
        store: str | None = None,
        admin_key: str = "admin",
        genesis_at: datetime | None = None,
        home_bound: bool = False,
    ) -> Ledger:
        """Create a home: migrate the database, make the store, the admin and log keys, enrol the admin.

        ``genesis_at``: the log time of the first entry (default: now). The log's clock never runs back,
        so a history replayed with given times (the policy fixtures) starts its log at its own start."""
        # a relative home is the one under the current directory: its files are named relative to it in
        # its configuration, so they must not be named relative to the current directory as well
        path = Path(path).absolute()
        home = Home(path)
        if home.exists():
            raise InputError(f"a ledger already exists at {path}", hint="use it, or pick another --home")
        path.mkdir(parents=True, exist_ok=True)
        home.keys_dir.mkdir(mode=0o700, exist_ok=True)
        url = database_url or f"sqlite:///{path / 'ledger.db'}"
        store_path = store or str(path / "store")
        migrate(url)
        admin = SigningKey.generate(admin_key)
        log_key = SigningKey.generate("log")
        admin.save(home.key_path(admin_key))
        log_key.save(home.key_path("log"))
        cfg = HomeConfig(
            origin=Home.new_origin(),
            database_url=url,
            store=store_path,
            log_key="log",
            root_key_id=admin.key_id,
            admin_key=admin_key,
        )
        ledger = cls(home, cfg, home_bound=home_bound)
        ledger.store.init()
        if ledger.size() == 0:
            genesis = ledger.make_statement(
                "key.enrol",
                {"key": admin_key},
                {
                    "name": admin_key,
                    "public_key": admin.public.b64,
                    "key_id": admin.key_id,
                    "roles": ["admin"],
                },
                collected_at=genesis_at,
            )
            ledger.append([ledger.sign(genesis, admin)], logged_at=genesis_at)
        home.write_config(cfg)
        return ledger

    @classmethod
    def open(
        cls,
        path: Path,
        *,
        database_url: str | None = None,
        store: str | None = None,
        home_bound: bool = False,
    ) -> Ledger:
        """Open the ledger of the home at ``path``; ``home_bound``: see ``Ledger.__init__`` (the CLI)."""
        home = Home(path)
        return cls(home, home.config(), database_url=database_url, store_path=store, home_bound=home_bound)

    def close(self) -> None:
        with self._sequencer:  # the committer thread leads what is queued, then ends
            self._closing = True
            self._sequencer.notify_all()
        if self._committer is not None:
            self._committer.join()
        self.wait_for_witnesses()  # checkpoints already published still reach the witnesses
        self.repo.close()
        self.engine.dispose()

    # --- keys -----------------------------------------------------------------------------------

    def keyring(self, conn: sa.Connection | None = None, *, at_size: int | None = None) -> Keyring:
        """The keyring as of the current log (or as of ``at_size`` entries), refreshed incrementally."""
        if at_size is not None:
            ring = Keyring()
            self._fold_keys(ring, conn, upto=at_size)
            return ring
        if conn is None:
            # Database transaction first, then the cache lock: the order an append takes them in (it
            # folds keys inside its write transaction). When SQLite reads also took the write lock, the
            # reverse order deadlocked concurrent API requests until the busy timeout.
            with self.repo.read(snapshot=True) as c:
                return self.keyring(c)
        with self._cache_lock:
            # The cache is a prefix of the log only while the database still holds the entry it ended
            # at (the chain hash commits every entry before it); after a rollback or a failover it is
            # thrown away and folded again from the database.
            ring = self._keyring
            head = self.repo.head(conn)
            size = 0 if head is None else int(head.seq) + 1
            if ring.seq:
                at_end = (
                    head.chain_hash
                    if head is not None and ring.seq == size
                    else self.repo.chain_at(conn, ring.seq - 1)
                )
                if ring.seq > size or at_end != self._keyring_chain:
                    self._keyring = ring = Keyring()
            replay_keys(ring, self.repo.key_rows(conn, ring.seq, size, admin_ids(ring)), size)
            self._keyring_chain = GENESIS_PREV if head is None else str(head.chain_hash)
            return ring

    def _fold_keys(self, ring: Keyring, conn: sa.Connection | None, upto: int | None) -> None:
        """Replay ``key.*`` entries logged since the last fold, up to ``upto`` (or the log size)."""

        def run(c: sa.Connection) -> None:
            # Bounded by the log size seen, so the next fold starts where this one ended rather than
            # at the last key.
            size = self.repo.size(c) if upto is None else upto
            replay_keys(ring, self.repo.key_rows(c, ring.seq, size, admin_ids(ring)), size)

        if conn is not None:
            run(conn)
        else:
            with self.repo.read() as c:
                run(c)

    def signing_key(self, name: str) -> SigningKey:
        return self.home.load_key(name)

    def _log_signing_key(self) -> SigningKey:
        """The log key, read from the home once per process (it signs every receipt)."""
        key = self._log_key
        if key is None:
            key = self._log_key = self.signing_key(self.cfg.log_key)
        return key

    @property
    def admin_key_name(self) -> str:
        """The name of the home's admin key (it signs key entries and, by default, verdicts)."""
        return self.cfg.admin_key

    def keep_key(self, key: SigningKey) -> None:
        """Save a private key into this home's key folder under its name."""
        key.save(self.home.key_path(key.name))

    def key_record(self, name_or_id: str) -> KeyRecord:
        return find_key(self.keyring(), name_or_id)

    def new_key(self, name: str, roles: Sequence[str], *, admin: str | None = None) -> KeyRecord:
        """Generate a key in this home and enrol it with an entry signed by the admin key."""
        if self.home.has_key(name) or self.keyring().by_name(name) is not None:
            raise InputError(f"a key named {name!r} already exists")
        key = SigningKey.generate(name)
        self.enrol_key(name, key.public.b64, roles, admin=admin)
        key.save(self.home.key_path(name))
        return self.key_record(name)

    def enrol_key(
        self,
        name: str,
        public_b64: str,
        roles: Sequence[str],
        *,
        admin: str | None = None,
        valid_until: str | None = None,
    ) -> LoggedEntry:
        pub = PublicKey.from_b64(public_b64)
        payload: dict[str, Any] = {
            "name": name,
            "public_key": pub.b64,
            "key_id": pub.key_id,
            "roles": list(roles),
        }
        if valid_until:
            payload["valid_until"] = valid_until
        return self.record("key.enrol", {"key": name}, payload, key=admin or self.cfg.admin_key)

    def revoke_key(
        self, name_or_id: str, *, reason: str, effective_at: datetime | None = None, admin: str | None = None
    ) -> LoggedEntry:
        rec = self.key_record(name_or_id)
        when = format_time(effective_at or now_utc())
        return self.record(
            "key.revoke",
            {"key": rec.name},
            {"key_id": rec.key_id, "effective_at": when, "reason": reason},
            key=admin or self.cfg.admin_key,
        )

    def grant_key(self, name_or_id: str, roles: Sequence[str], *, admin: str | None = None) -> LoggedEntry:
        rec = self.key_record(name_or_id)
        return self.record(
            "key.grant",
            {"key": rec.name},
            {"key_id": rec.key_id, "roles": list(roles)},
            key=admin or self.cfg.admin_key,
        )

    # --- artifacts ------------------------------------------------------------------------------

    def put_artifact(
        self,
        stream: BinaryIO,
        *,
        sha256: bool = False,
        expected: Digest | None = None,
        max_size: int | None = None,
    ) -> StoredArtifact:
        return self.store.put_stream(stream, sha256=sha256, expected=expected, max_size=max_size)

    def put_file(self, path: Path, *, sha256: bool = False) -> StoredArtifact:
        return put_file(self.store, path, sha256=sha256)

    def has_artifact(self, digest: str | Digest) -> bool:
        return self.store.has(digest if isinstance(digest, Digest) else parse_digest(digest))

    def artifact_size(self, digest: str | Digest) -> int:
        """Size in bytes of a stored artifact (ArtifactMissingError when the store lacks it)."""
        return self.store.size(digest if isinstance(digest, Digest) else parse_digest(digest))

    def open_artifact(self, digest: str) -> BinaryIO:
        return self.store.open_verified(parse_digest(digest))

    def artifact_ref(
        self,
        name: str,
        path: Path,
        *,
        media_type: str | None = None,
        by_reference: bool = False,
        sha256: bool = False,
    ) -> ArtifactRef:
        """Store ``path`` (or hash it in place when ``by_reference``) and describe it for an entry."""
        p = readable_artifact(name, path)
        if by_reference:
            d = hash_file(p, sha256=True)
            return describe_artifact(name, p, d.blake3, d.size, d.sha256, media_type, by_reference=True)
        s = self.put_file(p, sha256=sha256)
        return describe_artifact(name, p, s.digest, s.size, s.sha256, media_type)

    # --- writes ---------------------------------------------------------------------------------

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
        """The statement of one entry in its canonical form (what ``sign`` signs and the log stores),
        checked as ingest checks it: ``SchemaError`` and the like before anything is signed."""
        when = collected_at if isinstance(collected_at, str) else format_time(collected_at or now_utc())
        st = {
            "_type": "https://evidence-ledger.dev/entry/v1",
            "kind": kind,
            "kind_version": kind_version,
            "subject": subject,
            "payload": payload,
            "artifacts": [a.model_dump(mode="json", exclude_none=True) for a in artifacts],
            "refs": [{"rel": rel, "id": self.resolve_id(i)} for rel, i in refs],
            "collected_at": when,
            "collector": {
                "host": host or socket.gethostname(),
                "tool": "evidence-ledger",
                "version": __version__,
            },
        }
        # judged as the log will sign it (RFC 8785: ``143.0`` is ``143``), as an API client's signed entry
        # and ``ledger record --data`` are: one canonical form for every caller
        signed: dict[str, Any] = parse_canonical(canonical_bytes(st))
        check_ingest(parse_statement(signed))  # refuse early, before anything is signed
        return signed

    def sign(self, statement: dict[str, Any], key: SigningKey | str) -> Envelope:
        k = key if isinstance(key, SigningKey) else self.signing_key(key)
        return sign_envelope(statement, k)

    def record(
        self,
        kind: str,
        subject: dict[str, str],
        payload: dict[str, Any],
        *,
        key: SigningKey | str,
        artifacts: Sequence[ArtifactRef] = (),
        refs: Sequence[tuple[str, str]] = (),
        collected_at: datetime | str | None = None,
        kind_version: int = 1,
    ) -> LoggedEntry:
        """Build, sign and append one entry."""
        st = self.make_statement(
            kind,
            subject,
            payload,
            artifacts=artifacts,
            refs=refs,
            collected_at=collected_at,
            kind_version=kind_version,
        )
        return self.append([self.sign(st, key)])[0]

    def _prepare(self, env: Envelope | bytes | dict[str, Any]) -> _Prepared:
        """What an envelope is, checked before ordering: size, DSSE shape, the statement's schema."""
        if isinstance(env, bytes) and len(env) > MAX_ENVELOPE_BYTES:
            raise RequestTooLargeError(_too_large(len(env)))
        envelope = env if isinstance(env, Envelope) else parse_envelope(env)
        data = envelope.canonical()
        if len(data) > MAX_ENVELOPE_BYTES:
            raise RequestTooLargeError(_too_large(len(data)))
        statement = parse_statement(envelope.statement())
        entry_id = entry_id_of(data)
        try:
            check_ingest(statement)
            self._check_recorded_result(statement)
            st = statement
            _refuse_nul(*st.subject.keys(), *st.subject.values(), *(a.name for a in st.artifacts))
        except LedgerError as e:
            # an envelope the log already holds (stored before a newer ingest rule) is re-sent: it is
            # answered as the duplicate it is (``append``'s contract), never refused by a rule it predates.
            # The lookup is made only for a refused envelope; the lock decides (``_append_locked``
            # raises the refusal kept here unless the log holds the id then)
            if self.repo.by_id(entry_id) is None:
                raise
            return _Prepared(envelope, data, entry_id, statement, refusal=e)
        return _Prepared(envelope, data, entry_id, statement)

    def _check_recorded_result(self, st: Statement) -> None:
        """Ingest of a verdict that names a stored result (``result_digest``): the result is in the store
        now (else ArtifactMissingError, as for an entry naming an artifact not uploaded: a verdict whose
        result no reader can open is never stored; one holding its result inline, the older shape, is read
        from there), reads as a JSON object (``recorded_result``'s reading,
        else SchemaError) and judged the subject the entry is logged under, as its payload and inline
        result must (``judged_subject_problem``, one reading for ingest, replay and the pages: else
        SchemaError).

        The result is one of the entry's own artifacts: ``result_digest`` names, character for character,
        the one artifact it lists as ``verdict-result.json`` (``RESULT_ARTIFACT``), stored, not by
        reference only — else SchemaError naming what is wrong (not listed, listed twice, under another
        name, by reference). A result over ``MAX_RESULT_BYTES`` is refused (ArtifactTooLargeError): its
        size is looked up before a byte of it is read. The older shape (its result inline, no artifact
        listed) names the inline result's own digest."""
        digest = st.payload.get("result_digest") if st.kind in JUDGED_SUBJECT_KINDS else None
        if digest is None:
            return
        from ledger.policy.verdict import RESULT_ARTIFACT, recorded_result, result_digest

        if not isinstance(digest, str):
            raise SchemaError(f"verdict result_digest is {type(digest).__name__}, not a content address")
        try:
            address = parse_digest(digest)
        except InputError as e:
            raise SchemaError(f"verdict result_digest: {e.message}") from e
        listed = [a for a in st.artifacts if a.digest == digest]
        inline = st.payload.get("result")
        if isinstance(inline, dict) and inline and not listed:
            # the older shape: what every reader reads is the inline result (``recorded_result``), whose
            # subject ``check_ingest`` checked; its result_digest is that result's digest
            if digest != result_digest(inline):
                raise SchemaError(
                    f"verdict result_digest {digest} names neither its inline result (whose digest is "
                    f"{result_digest(inline)}) nor an artifact the entry lists"
                )
            return
        if not self.store.has(address):
            raise ArtifactMissingError(
                f"the verdict's result artifact {digest} (its result_digest) is not in the store: a verdict "
                "whose result cannot be read is not stored"
                + ("" if listed else f", and the entry does not list it as its {RESULT_ARTIFACT}"),
                hint="upload the result artifact before the entry, and list it among the entry's artifacts",
            )
        self._check_result_listed(digest, listed, RESULT_ARTIFACT)
        try:
            result = recorded_result(self.store, {"result_digest": digest}, "")
        except ArtifactTooLargeError as e:
            raise ArtifactTooLargeError(f"the verdict's result artifact {digest}: {e.message}") from e
        except InputError as e:
            raise SchemaError(f"the verdict's result artifact {digest} cannot be read: {e.message}") from e
        problem = judged_subject_problem(st, result)
        if problem is not None:
            raise SchemaError(problem)

    @staticmethod
    def _check_result_listed(digest: str, listed: Sequence[ArtifactRef], name: str) -> None:
        """The artifacts a verdict lists under its ``result_digest`` (``listed``) are exactly one, named
        ``name``, stored (SchemaError naming the problem: a result the entry does not carry as its own is
        bytes the entry's signature and artifact checks never covered)."""
        if not listed:
            raise SchemaError(
                f"verdict result_digest {digest} is not among the entry's artifacts: a verdict's result is "
                f"one of its own artifacts (list it as {name})"
            )
        if len(listed) > 1:
            raise SchemaError(
                f"verdict result_digest {digest} is listed {len(listed)} times among the entry's artifacts "
                f"({', '.join(a.name for a in listed)}): a verdict lists its result once, as {name}"
            )
        art = listed[0]
        if art.name != name:
            raise SchemaError(
                f"verdict result_digest {digest} is listed as {art.name!r}, not as {name}: a verdict's "
                "result is the artifact of that name"
            )
        if not art.stored:
            raise SchemaError(
                f"verdict result_digest {digest} is listed by reference only (stored: false): a verdict's "
                "result is stored with it, so every reader can open it"
            )

    def _precheck(self, prepared: Sequence[_Prepared]) -> None:
        """The sequencer's checks outside the lock: each signature against the keys this process knows
        now (a key id is the hash of its public key, so a signature that verifies with the key of its id
        verifies at any position), and the artifacts present in the store (content-addressed: once there,
        they stay). What depends on the order — key state and role at the entry's log time, refs,
        duplicates — is decided in the lock (``_append_locked``)."""
        with self._cache_lock:
            keys = self._keyring.keys
            known = {p.envelope.signer: keys.get(p.envelope.signer) for p in prepared}
        for p in prepared:
            rec = known[p.envelope.signer]
            if rec is not None:
                p.envelope.verify_with(rec.public)
                p.verified_with = rec.public
            self._check_artifacts(p.statement)

    def append(
        self, envelopes: Sequence[Envelope | bytes | dict[str, Any]], *, logged_at: datetime | None = None
    ) -> list[LoggedEntry]:
        """Verify and append a batch atomically: all entries are stored, or none.

        A re-sent envelope (same entry id) is recognised and returned with ``duplicate=True``.
        ``logged_at``: a caller-given log time (the policy fixtures replay a history with it); one earlier
        than the head's is refused (``LogTimeBackwardsError``).

        Concurrent calls in one process are group-committed (docs/LOG.md, "The sequencer"): each call is
        checked outside the lock and queued; while no caller is committing, the next one leads and
        appends every queued batch in one transaction; each batch stays atomic and is refused alone.
        """
        req = self._request(envelopes, logged_at)
        if req is None:
            return []
        with self._sequencer:
            self._pending.append(req)
            while self._leading and not req.done:  # another caller is committing a group: wait
                self._sequencer.wait()
            if req.done:  # committed (or refused) in that caller's group
                group: list[AppendRequest] = []
            else:  # lead a group of every batch that waits, this one among them
                self._leading = True
                group = list(self._pending)
                self._pending.clear()
        if group:
            self._lead(group)
        entries = req.answer()
        if self.home_bound:
            # the one place a home-bound process keeps receipts: every command that appends (record,
            # review, supersede, keys, verdict --record, …) goes through here, so none can forget one
            self.keep_receipts([self.receipt(e) for e in entries])
        return entries

    def submit(
        self,
        envelopes: Sequence[Envelope | bytes | dict[str, Any]],
        on_done: Callable[[AppendRequest], None],
        *,
        token: str | None = None,
    ) -> None:
        """``append`` without waiting: the batch is checked here (a refusal raises at once), queued, and
        committed by the sequencer's own thread in a group with every batch then waiting (of ``append``
        callers too); ``on_done(request)`` is then called from that thread, and ``request.answer()``
        gives the entries or raises the refusal. The HTTP server appends this way, so no request
        thread blocks while a group commits.

        ``token``: the hash of the API token the write is sent with (``token_digest``); it is checked
        in the group's transaction, so a token revoked before the commit writes nothing (AuthError),
        and one without the writer role neither (ForbiddenError)."""
        req = self._request(envelopes, None)
        if req is None:
            req = AppendRequest([], None, done=True, entries=[])
            on_done(req)
            return
        req.on_done, req.token = on_done, token
        with self._sequencer:
            if self._closing:
                raise StorageError("the ledger is closing: nothing more is appended")
            self._pending.append(req)
            if self._committer is None or not self._committer.is_alive():  # first, or after a crash
                self._committer = threading.Thread(
                    target=self._commit_submitted, name="ledger-sequencer", daemon=True
                )
                self._committer.start()
            self._sequencer.notify_all()

    def _request(
        self, envelopes: Sequence[Envelope | bytes | dict[str, Any]], logged_at: datetime | None
    ) -> AppendRequest | None:
        """A batch checked outside the lock (size, shape, schema, signature, artifacts), or None when
        empty."""
        if not envelopes:
            return None
        if len(envelopes) > MAX_BATCH:
            raise BatchTooLargeError(f"batch of {len(envelopes)} entries exceeds the limit of {MAX_BATCH}")
        if logged_at is not None:
            format_time(logged_at)  # a naive time is refused before it is queued
        prepared = [self._prepare(e) for e in envelopes]
        self._precheck(prepared)
        return AppendRequest(prepared, logged_at)

    def _commit_submitted(self) -> None:
        """The sequencer's thread: while no ``append`` caller leads, lead every queued batch."""
        while True:
            with self._sequencer:
                while self._leading or not self._pending:
                    if self._closing and not self._pending:
                        return
                    self._sequencer.wait()
                self._leading = True
                group = list(self._pending)
                self._pending.clear()
            # an unexpected failure is each request's answer (``_lead``); the thread goes on
            with contextlib.suppress(Exception):
                self._lead(group)

    def _lead(self, group: list[AppendRequest]) -> None:
        """Commit a group (the caller holds the lead), hand the lead back, publish a due checkpoint,
        answer the submitted requests."""
        try:
            due = self._commit(group)
        except BaseException as e:  # never leave a queued caller without an answer
            for r in group:
                if not r.done:
                    r.error, r.done = e, True
            self._hand_back_lead()
            self._answer_submitted(group)
            raise
        self._hand_back_lead()
        if due:
            # the sequencer's step, after the entries are committed: a failure here loses no entry
            # (the next append publishes again) and never signs what the database does not hold; it is
            # logged (a log that no longer extends the held checkpoint is an operator's to see at once)
            try:
                self.publish_checkpoint()
            except LedgerError as e:
                _log.error("the scheduled checkpoint was not published: error[%s] %s", e.code, e.message)
            except sa.exc.SQLAlchemyError as e:
                _log.error("the scheduled checkpoint was not published: %s", _db_refusal(e))
        self._answer_submitted(group)

    def _hand_back_lead(self) -> None:
        with self._sequencer:
            self._leading = False
            self._sequencer.notify_all()

    @staticmethod
    def _answer_submitted(group: list[AppendRequest]) -> None:
        for r in group:
            if r.on_done is not None:
                callback, r.on_done = r.on_done, None
                callback(r)

    def _commit(self, group: list[AppendRequest]) -> bool:
        """Append the group's batches in one transaction; resolve each request. Returns whether a
        checkpoint is due. A database refusal of the group is retried one request per transaction, so
        it sinks only the request it belongs to."""
        held: Checkpoint | None = None
        try:
            try:
                ids = {p.entry_id for r in group for p in r.prepared}
                asked = ids | {ref.id for r in group for p in r.prepared for ref in p.statement.refs}
                tokens = {r.token for r in group if r.token is not None}
                with self._cache_lock:  # where this process's keys stand (replicas append too)
                    keys_from = self._keyring.seq
                    # whose rows since the cache are read as candidate key entries (``LogRepo.key_rows``)
                    self.repo.known_admins = admin_ids(self._keyring)
                with self.repo.sequence(asked, tokens, keys_from) as (
                    conn,
                    head,
                    present,
                    found,
                    since,
                ):
                    admitted = _authorise(group, found)
                    if not admitted:
                        return False
                    try:  # a fork gets no receipt: nothing is written
                        held = self._guard_head(conn, head, since)
                    except LedgerError as e:  # the home's fault, never the entries' (``_raise_home_fault``)
                        _raise_home_fault(e)
                    plan = self._append_locked(conn, admitted, head, present, since)
            except sa.exc.SQLAlchemyError as e:
                if len(group) > 1:
                    dues = [self._commit([r]) for r in group if not r.done]  # each, then any due
                    return any(dues)
                raise StorageError(_db_refusal(e)) from e
        except LedgerError as e:  # met reading the log's own state for the group (its head, its key rows,
            # a re-sent entry's row): the home's fault, never the entries' (``_log_state_fault``)
            fault = _log_state_fault(e)
            for r in group:
                if not r.done:
                    r.error, r.done = fault, True
            return False
        with self._cache_lock:  # committed: the keys as of the new head are this process's cache
            self._keyring, self._keyring_chain = plan.ring, plan.chain
        # the new head extends the one checked: it extends the anchors it was checked against
        self._extends = (*_held_key(held), plan.ring.seq, plan.chain)
        for r, outcome in zip(admitted, plan.outcomes, strict=True):
            if isinstance(outcome, LedgerError):
                r.error = outcome
            else:
                r.entries = outcome
            r.done = True
        return plan.due

    def _ring_at(
        self, conn: sa.Connection, head: Head | None, since: KeysSince | None, *, deep: bool
    ) -> Keyring:
        """A copy of the keys as of ``head`` (inside the append lock) for the group to fold into: of the
        process's cache when it ends at the head (no query); when another replica appended since, the
        cache brought up to the head with ``since`` (read in the sequencer's round trip: the chain hash
        where the cache ends proves it is still a prefix of the log); else folded from the database.
        ``deep`` when the group holds ``key.*`` entries (they change records); else the records are
        shared."""
        size = 0 if head is None else int(head.seq) + 1
        chain = GENESIS_PREV if head is None else str(head.chain_hash)
        with self._cache_lock:
            ring = self._keyring
            if ring.seq == size and self._keyring_chain == chain:
                pass
            elif (
                since is not None
                and since.start == ring.seq <= size
                and (since.chain if ring.seq else GENESIS_PREV) == self._keyring_chain
            ):
                return replay_keys(ring.copy(), since.rows, size)
            else:
                ring = self.keyring(conn)
            copied = ring.copy() if deep else Keyring(dict(ring.keys))
            copied.seq = ring.seq
            return copied

    def _append_locked(
        self,
        conn: sa.Connection,
        group: list[AppendRequest],
        head: Head | None,
        present: set[str],
        since: KeysSince | None = None,
    ) -> _Plan:
        """Inside the lock, only what depends on the order: from the head (and ``present``: which of the
        group's entry and ref ids the log holds, read with it), assign indexes and log times, decide
        each entry against the keys as of its position, refs and duplicates, write the rows (one INSERT
        per table for the whole group)."""
        next_seq = 0 if head is None else head.seq + 1
        prev = GENESIS_PREV if head is None else str(head.chain_hash)
        last = None if head is None else parse_time(head.logged_at)
        # the group folds key entries into its own copy; without any it only advances the position
        ring = self._ring_at(
            conn,
            head,
            since,
            deep=any(p.statement.kind.startswith("key.") for r in group for p in r.prepared),
        )
        trusted = TrustedLog(self.cfg.root_key_id, ring, last_logged_at=last)
        now = now_utc()
        ids = {p.entry_id for r in group for p in r.prepared}
        # duplicates: the rows of re-sent envelopes (rare) are read only when there are any
        existing = self.repo.by_ids(conn, sorted(ids & present)) if ids & present else {}
        known = present  # of the refs' targets, those the log holds
        accepted: dict[str, LoggedEntry] = {}  # entries of the group's earlier requests
        rows: list[dict[str, Any]] = []
        subj_rows: list[dict[str, Any]] = []
        ref_rows: list[dict[str, Any]] = []
        art_rows: list[dict[str, Any]] = []
        outcomes: list[list[LoggedEntry] | LedgerError] = []
        for req in group:
            mark = (next_seq, prev, len(rows), len(subj_rows), len(ref_rows), len(art_rows))
            saved_ring = (
                ring.copy() if any(p.statement.kind.startswith("key.") for p in req.prepared) else None
            )
            saved_seq, saved_last = ring.seq, trusted.last_logged_at
            out: list[LoggedEntry] = []
            batch_ids: set[str] = set()
            # each entry this request appends, by id: an envelope the batch names again is answered as its
            # duplicate (one answer per envelope, in order)
            batch_entries: dict[str, LoggedEntry] = {}
            try:
                latest = trusted.last_logged_at
                if req.given is None:
                    # the log's clock never runs back: a system clock stepped back logs at the head's time
                    # — but never inherits a head time far ahead of the clock (one rewritten behind the
                    # log's back, or a clock set wrong once): every later entry would be committed then
                    if latest is not None and latest > now + MAX_CLOCK_SKEW:
                        raise LogClockAheadError(
                            f"the newest entry (seq {next_seq - 1}) was logged at {format_time(latest)}, "
                            f"more than {int(MAX_CLOCK_SKEW.total_seconds())} s ahead of this clock "
                            f"({format_time(now)}); nothing is appended, the log's time is not "
                            "carried forward"
                        )
                    when = now if latest is None else max(now, latest)
                elif latest is not None and req.given < latest:
                    raise LogTimeBackwardsError(
                        f"logged_at {format_time(req.given)} is before the newest entry's "
                        f"({format_time(latest)})"
                    )
                else:
                    when = req.given
                logged_at = format_time(when)
                for p in req.prepared:
                    seen = accepted.get(p.entry_id)
                    if p.entry_id in existing or seen is not None:
                        # a re-sent entry is answered (and receipted) from its row as its leaf and the
                        # hash chain around it commit it
                        e = seen if seen is not None else self._anchored_entry(conn, existing[p.entry_id])
                        out.append(LoggedEntry(**{**e.__dict__, "duplicate": True}))
                        continue
                    if p.entry_id in batch_ids:
                        out.append(replace(batch_entries[p.entry_id], duplicate=True))
                        continue
                    if p.refusal is not None:  # not held after all: what ingest refused stays refused
                        raise p.refusal
                    st = p.statement
                    pub = p.verified_with
                    trusted.admit(next_seq, p.envelope, st.kind, st.payload, when, verified=pub)
                    self._check_refs(st, batch_ids, known, accepted)
                    trusted.update(next_seq, st.kind, st.payload, when)
                    ch = chain_hash(next_seq, p.entry_id, prev, logged_at)
                    record = LogRecord(next_seq, logged_at, p.entry_id, st.kind, p.envelope.signer).to_bytes()
                    rows.append(
                        {
                            "seq": next_seq,
                            "entry_id": p.entry_id,
                            "kind": st.kind,
                            "signer": p.envelope.signer,
                            "collected_at": st.collected_at,
                            "logged_at": logged_at,
                            "envelope": p.envelope_bytes,
                            "record": record,
                            "leaf_hash": record_leaf(record).hex(),
                            "prev_hash": prev,
                            "chain_hash": ch,
                        }
                    )
                    # the index rows the readers find entries by; `ledger verify` recomputes them (one copy)
                    index = index_rows(next_seq, st)
                    subj_rows.extend(index.subjects)
                    ref_rows.extend(index.refs)
                    art_rows.extend(index.artifacts)
                    out.append(
                        LoggedEntry(
                            next_seq, p.entry_id, st, p.envelope_bytes, p.envelope.signer, logged_at, prev, ch
                        )
                    )
                    batch_ids.add(p.entry_id)
                    batch_entries[p.entry_id] = out[-1]
                    prev = ch
                    next_seq += 1
            except LedgerError as e:  # this request alone is refused: undo what it added
                next_seq, prev = mark[0], mark[1]
                del rows[mark[2] :], subj_rows[mark[3] :], ref_rows[mark[4] :], art_rows[mark[5] :]
                if saved_ring is not None:
                    trusted.ring = ring = saved_ring
                ring.seq, trusted.last_logged_at = saved_seq, saved_last
                outcomes.append(e)
                continue
            accepted.update((e.entry_id, e) for e in out if not e.duplicate)
            outcomes.append(out)
        if rows:  # read in this transaction: statistics a rolled-back one took are not counted
            analyse_if_grown(conn, next_seq, None)
        due = bool(rows) and self._publish_due(conn, next_seq)
        # the last statement: on PostgreSQL the COMMIT goes with the INSERTs (one round trip fewer)
        self.repo.insert(conn, rows, subj_rows, ref_rows, art_rows, commit=True)
        ring.seq = next_seq
        return _Plan(outcomes, ring, prev, due)

    def _anchored_entry(self, conn: sa.Connection, row: Any) -> LoggedEntry:
        """A re-sent entry's row as the log committed it, for its answer and receipt: its leaf and its links
        to its neighbours (``_chained_entry``), and its place under the anchor (``_anchored``: the held
        checkpoint or the newest stored one, the log checked against both). Below the anchor's size its
        leaf must be the one the anchor's tree holds there (a row rewritten inside a stored tile, its record,
        leaf hash and chain hashes through the head with it, still gives the signed root); past it the
        rows from the anchor's last one to the one after it are walked (``_walk``: linked, none missing,
        logged no earlier than the one before) — a row back-dated with every chain hash re-derived through
        the head breaks the log's order there. A home fault otherwise (``_raise_home_fault``), never an
        answer. Rare (a re-sent entry): O(log n) reads, and the rows past the anchor up to it.

        What no walk can see: a row past every signed checkpoint rewritten to a time between its
        neighbours', every chain hash after it re-derived — nothing signed commits it yet but the
        receipts the collectors keep (``ledger audit``)."""
        entry = _chained_entry(self.repo, conn, row)
        try:
            anchor, tree = self._anchored(conn, self.held(), None, receipts=False)
            size = 0 if anchor is None else anchor.size
            if entry.seq < size:
                if tree is None or tree.leaf(entry.seq) != bytes.fromhex(str(row.leaf_hash)):
                    raise _unanchored_leaf_error(entry.seq, size)
            else:
                self._walk(conn, size, min(entry.seq + 2, self.repo.size(conn)), tree, root=False)
        except LedgerError as e:
            _raise_home_fault(e)
        return entry

    def signer_name(self, key_id: str) -> str | None:
        """The enrolled name of ``key_id`` from this process's keys (a key's name never changes), read
        from the database only when this process does not know the key yet."""
        with self._cache_lock:
            rec = self._keyring.keys.get(KeyId(key_id))
        if rec is None:
            rec = self.keyring().keys.get(KeyId(key_id))
        return None if rec is None else rec.name

    @staticmethod
    def _check_refs(st: Statement, *known: Container[str]) -> None:
        """Every ref names an entry the log holds, or one before it in its batch or group."""
        missing = sorted(r.id for r in st.refs if not any(r.id in k for k in known))
        if missing:
            raise DanglingRefError(f"ref to unknown entry {missing[0]}")

    def _check_artifacts(self, st: Statement) -> None:
        for a in st.artifacts:
            if not a.stored:
                continue
            d = parse_digest(a.digest)
            if not self.store.has(d):
                raise ArtifactMissingError(
                    f"artifact {a.name} ({a.digest}) is not in the store", hint="upload it before the entry"
                )
            actual = self.store.size(d)
            if actual != a.size:
                raise IntegrityError(
                    f"artifact {a.name}: entry says {a.size} bytes, the stored {a.digest} has {actual}"
                )

    # --- reads ----------------------------------------------------------------------------------

    def size(self) -> int:
        return self.repo.size()

    def resolve_id(self, id_or_prefix: str) -> EntryId:
        """A full entry id, from a full id or a unique prefix of at least 8 hex characters."""
        return resolve_entry_id(id_or_prefix, self.repo.ids_with_prefix)

    def get(self, id_or_prefix: str) -> LoggedEntry:
        entry_id = self.resolve_id(id_or_prefix)
        row = self.repo.by_id(entry_id)
        if row is None:
            raise EntryNotFoundError(f"no entry with id {entry_id}")
        return entry_from_row(row)

    def get_seq(self, seq: int) -> LoggedEntry:
        row = self.repo.by_seq(seq)
        if row is None:
            raise EntryNotFoundError(f"no entry at seq {seq}")
        return entry_from_row(row)

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
        """Entries matching every filter, in sequence order; ``after_seq`` is the keyset cursor."""
        _refuse_nul(*(subject or {}).keys(), *(subject or {}).values(), kind or "", signer or "")
        f = EntryFilter(
            subject=subject,
            kind=kind,
            signer_id=self.key_record(signer).key_id if signer else None,
            since=format_time(parse_time(since)) if since else None,
            until=format_time(parse_time(until)) if until else None,
            after_seq=after_seq,
            at_size=at_size,
            limit=limit,
            descending=descending,
        )
        return [entry_from_row(r) for r in self.repo.find(f)]

    def entries_with_artifact(self, digest: str) -> list[tuple[int, str]]:
        """(seq, entry id) of the entries that name a stored artifact, in log order."""
        return self.repo.with_artifact(digest)

    def co_subjects(self, field: str, value: str, other: str) -> list[tuple[str, int, str]]:
        """The values of subject field ``other`` among the entries whose subject has ``field=value``,
        with their entry count and last logged time (e.g. the campaigns on a host), most recent first."""
        return self.repo.co_subjects(field, value, other)

    def referrers(self, entry_id: str | Collection[str], rel: str | None = None) -> list[LoggedEntry]:
        """Entries that reference ``entry_id`` (supersessions, reviews, acceptances …), or any of a
        collection of ids in one read (a reviewer page's entries), in sequence order."""
        return [entry_from_row(r) for r in self.repo.referrers(entry_id, rel)]

    def page_json(self, entries: Sequence[LoggedEntry], limit: int | None) -> dict[str, Any]:
        """The one JSON shape of a page of search results (CLI ``log --json`` and the API alike)."""
        return page_json(entries, limit, self.signer_names())

    def signature_status(self, entry: LoggedEntry) -> KeyRecord:
        """The signer's record when ``entry``'s signature verifies with an enrolled key that may sign its
        kind at its log time, by today's keys (the reviewer pages show it); else the coded error."""
        ring = self.keyring()
        rec = ring.get(entry.signer)
        parse_envelope(entry.envelope).verify_with(rec.public)
        if entry.seq > 0:
            authorise(ring, entry.signer, entry.kind, parse_time(entry.logged_at))
        return rec

    def signer_names(self) -> dict[str, str]:
        return signer_names(self.keyring())

    def subjects(
        self, *, field: str | None = None, limit: int = 500, after: str | None = None
    ) -> list[SubjectSummary]:
        """Distinct subject FIELD=VALUE pairs (key entries excluded), most recently active first; ``after``
        is a ``SubjectSummary.cursor`` (``LAST_SEQ:FIELD``): the list after that subject. A ``field``
        neither ``SUBJECT_FIELDS`` nor the log knows is an input error naming the known ones (a
        misspelt field would answer an empty list, read as "no such subjects")."""
        if field and "\x00" in field:
            raise InputError("NUL characters are not allowed in a subject field")
        if field and field not in SUBJECT_FIELDS and not self.repo.subjects(field=field, limit=1):
            raise InputError(
                f"unknown subject field {field!r}", hint=f"the subject fields: {', '.join(SUBJECT_FIELDS)}"
            )
        return self.repo.subjects(field=field, limit=limit, after=_subject_cursor(after))

    def subjects_page(
        self, *, field: str | None = None, limit: int = 500, after: str | None = None
    ) -> tuple[list[SubjectSummary], str | None]:
        """One page of ``subjects`` and the cursor of the next (None on the last page)."""
        rows = self.subjects(field=field, limit=limit + 1, after=after)
        return page_of(rows, limit, lambda r: r.cursor)

    # --- what this ledger is ----------------------------------------------------------------------

    @property
    def origin(self) -> str:
        """The log's origin line (the name its checkpoints carry)."""
        return self.cfg.origin

    @property
    def log_key_name(self) -> str:
        return self.cfg.log_key

    @property
    def root_key_id(self) -> str:
        """The trust root: the key id the genesis entry enrols."""
        return self.cfg.root_key_id

    @property
    def home_path(self) -> Path:
        return self.home.path

    @property
    def spool_dir(self) -> Path:
        """Where envelopes and artifacts wait for ``ledger push`` when the server is unreachable."""
        return self.home.spool_dir

    def has_private_key(self, name: str) -> bool:
        """Whether this home holds the private key ``name``."""
        return self.home.has_key(name)

    @property
    def database_dialect(self) -> str:
        return self.repo.dialect

    def describe(self) -> dict[str, Any]:
        """Where this ledger keeps its data and who its root is (``ledger init --json``)."""
        return {
            "database_url": self.database_url,
            "store": str(getattr(self.store, "root", "")),
            "origin": self.cfg.origin,
            "admin_key_id": self.cfg.root_key_id,
            "log_public_key": self.log_public_key().b64,
        }

    # --- API tokens -------------------------------------------------------------------------------

    def create_token(self, name: str, role: str) -> tuple[str, TokenRecord]:
        return create_token(self.engine, name, role)

    def verify_token(self, token: str | None) -> TokenRecord:
        return verify_token(self.engine, token)

    def token_by_hash(self, digest: str) -> TokenRecord | None:
        """The stored token (live or revoked) with this hash (``token_digest``)."""
        with self.repo.read() as conn:
            return tokens_by_hash(conn, [digest]).get(digest)

    def list_tokens(self) -> list[TokenRecord]:
        return list_tokens(self.engine)

    def revoke_token(self, name_or_id: str) -> list[TokenRecord]:
        return revoke_token(self.engine, name_or_id)

    # --- policy: verdicts, routing checks, fixture tests -----------------------------------------

    @staticmethod
    def load_policy(name_or_path: str, policy_dir: Path | None = None) -> LoadedPolicy:
        from ledger.policy.routing import load_checked

        return load_checked(name_or_path, policy_dir)

    def _policy(self, policy: LoadedPolicy | str, policy_dir: Path | None) -> LoadedPolicy:
        from ledger.policy.loader import LoadedPolicy
        from ledger.policy.routing import load_checked

        return policy if isinstance(policy, LoadedPolicy) else load_checked(policy, policy_dir)

    def evaluate_verdict(
        self,
        subject: dict[str, str],
        policy: LoadedPolicy | str = "backend-qualification",
        *,
        at_size: int | None = None,
        policy_dir: Path | None = None,
    ) -> dict[str, Any]:
        """The verdict JSON for ``subject`` under ``policy``, the log as it stood at ``at_size`` (or now) —
        refused (IntegrityError) when the log no longer extends the checkpoint the home holds, as the CLI's
        verdict and routing check refuse it (``ledger.reads.check_extends_held``)."""
        from ledger.policy.verdict import evaluate
        from ledger.reads import check_extends_held

        reads = self._policy_reads()
        check_extends_held(reads)
        return evaluate(reads, subject, self._policy(policy, policy_dir), at_size=at_size)

    def _policy_reads(self) -> Any:
        """What a verdict or routing check reads through: on a SQLite home, this thread's read-only
        stdlib-sqlite3 policy ledger (``ledger.reads.SqlitePolicyLedger``: its warm reads are remembered
        while SQLite's ``data_version`` is unchanged, so an API server answers repeated checks from memory
        and any commit, by this process or another, invalidates them); else the service itself. Results
        are canonical-bytes equal either way (``tests/policy/test_policy_reads.py``)."""
        local = self._readers
        reader = getattr(local, "reader", None)
        if reader is None:
            from ledger.reads import SqlitePolicyLedger

            opened = SqlitePolicyLedger.open_database(self.home, self.database_url, self.store)
            reader = local.reader = opened if opened is not None else False
        return reader if reader is not False else self

    def record_verdict(
        self,
        result: dict[str, Any],
        *,
        key: str | None = None,
        at: datetime | None = None,
        clock: datetime | None = None,
        read: int | None = None,
        judge_at: Callable[[datetime], tuple[bool, str]] | None = None,
    ) -> LoggedEntry:
        """Append a signed ``verdict`` entry for ``result`` (signed by ``key``, default the admin key); a
        result judged at a time the log it read (``read``: the log's size when it was judged; None: the
        log as it stands now — never only the checkpoint a past ``--now`` cut) or the clock (``clock``: the
        one reading the caller judged by, as ``ledger verdict --record`` passes it; else ``at``; else now,
        read once) has not reached is refused (InputError, nothing stored:
        ``policy.verdict.record_verdict``), and so is a QUALIFIED judged
        before that clock that is not QUALIFIED judged again at it — by ``judge_at``, else by this ledger
        under the policy the result names, loaded by its name (``policy.verdict.judge_again_at``: one
        that is not the policy it was judged under judges nothing, and the QUALIFIED is refused)."""
        from ledger.policy.verdict import judge_again_at, record_verdict

        again = self._judged_again(result, judge_again_at)
        return record_verdict(
            self,
            result,
            key=key or self.cfg.admin_key,
            at=at,
            clock=clock,
            read=read,
            judge_at=judge_at or again,
        )

    def _judged_again(
        self,
        result: dict[str, Any],
        judge: Callable[[Any, dict[str, Any], LoadedPolicy], Callable[[datetime], tuple[bool, str]]],
    ) -> Callable[[datetime], tuple[bool, str]]:
        """How ``record_verdict`` / ``record_routing_change`` judge a pass made before the clock again where
        the caller gives no ``judge_at``: under the policy the result names, loaded here by its name, with
        ``judge`` (``verdict.judge_again_at``, ``routing.decision_again_at``); a policy that does not load
        judges nothing (the pass is refused, saying why)."""

        def again(when: datetime) -> tuple[bool, str]:
            name = str((result.get("policy") or {}).get("name") or "")
            try:
                policy = self._policy(name, None)
            except LedgerError as e:
                return False, f"not judged again: its policy {name!r} does not load here ({e.message})"
            return judge(self._policy_reads(), result, policy)(when)

        return again

    def verdict_result(self, entry: LoggedEntry) -> dict[str, Any]:
        """The full result a ``verdict`` entry recorded (its stored result artifact, read verified; the
        inline result of older entries). Raises when it cannot be read: never an empty result."""
        from ledger.policy.verdict import recorded_result

        if entry.kind != "verdict":
            raise InputError(f"entry {entry.entry_id} is a {entry.kind} entry, not a verdict")
        return recorded_result(self.store, entry.statement.payload, entry.entry_id)

    def replay_verdict(
        self, entry_id: str, *, policy_dir: Path | None = None, policy_path: str | None = None
    ) -> dict[str, Any]:
        """Recompute a recorded verdict at its checkpoint with today's policy bytes; report differences (on a
        log that still extends the checkpoint the home holds: else IntegrityError)."""
        from ledger.policy.verdict import replay_verdict
        from ledger.reads import check_extends_held

        check_extends_held(self)
        return replay_verdict(self, entry_id, policy_dir=policy_dir, policy_path=policy_path)

    def check_routing(
        self,
        subject: dict[str, str],
        policy: LoadedPolicy | str = "routing-change",
        *,
        action: str = "route",
        deployment: dict[str, Any] | None = None,
        now: datetime | None = None,
        at_size: int | None = None,
        policy_dir: Path | None = None,
        deployment_from: str = "--deployment",
    ) -> dict[str, Any]:
        """May this routing change happen? ``allowed`` with the reasons (nothing is written).
        ``deployment_from`` names where ``deployment`` came from (the answer's ``deployment.source``)."""
        from ledger.policy.routing import check_routing_change

        return check_routing_change(
            self._policy_reads(),
            self._policy(policy, policy_dir),
            subject,
            action=action,
            deployment=deployment,
            now=now,
            at_size=at_size,
            deployment_from=deployment_from,
        )

    def record_routing_change(
        self,
        result: dict[str, Any],
        *,
        key: str | None = None,
        at: datetime | None = None,
        clock: datetime | None = None,
        read: int | None = None,
        judge_at: Callable[[datetime], tuple[bool, str]] | None = None,
    ) -> LoggedEntry:
        """Append a routing decision (``check_routing``'s result) as a signed ``routing.change`` entry, as
        strictly as ``ledger check routing-change --record`` (``policy.routing.record_routing_change``):
        judged at a time the log it read (``read``: the log's size when it was asked; None: the log as it
        stands now) and the clock (``clock``, the one reading the caller judged by; else ``at``; else now,
        read once) have both reached, and, judged allowed before that clock, allowed when judged again at
        it — by ``judge_at``, else by this ledger under the policy the result names, loaded by its name
        (``decision_again_at``). Else InputError, nothing stored."""
        from ledger.policy.routing import decision_again_at, record_routing_change

        again = self._judged_again(result, decision_again_at)
        entry: LoggedEntry = record_routing_change(
            self,
            result,
            key=key or self.cfg.admin_key,
            at=at,
            clock=clock,
            read=read,
            judge_at=judge_at or again,
        )
        return entry

    @classmethod
    def policy_test(
        cls,
        names: Sequence[str | None] | None = None,
        policy_dir: Path | None = None,
        *,
        workdir: Path | None = None,
    ) -> list[FixtureResult]:
        """Run the fixture tests of the named policies (default: all), each in a fresh ledger home. A named
        policy is loaded first: one that does not exist, or does not load, is an error naming it (as
        ``ledger verdict --policy`` says), not "0/0 fixtures pass"."""
        from ledger.policy.fixtures import discover_fixtures, run_fixture
        from ledger.policy.loader import load_policy

        for n in names or []:
            if n is not None:
                load_policy(n, policy_dir)
        paths: list[Path] = []
        for n in names or [None]:
            paths.extend(discover_fixtures(policy_dir, n))
        return [run_fixture(p, policy_dir, workdir, init=cls.init) for p in paths]

    def checkpoint_root(self, size: int) -> str:
        """The Merkle root at ``size``: the stored checkpoint's, else signed (and kept) now."""
        from ledger.policy.verdict import checkpoint_root

        return checkpoint_root(self, size)

    # --- Merkle tree, checkpoints, proofs, receipts -----------------------------------------------

    def leaf_hashes(self, size: int | None = None) -> list[bytes]:
        return self.repo.leaf_hashes(size=size)

    def _tree_at(
        self, conn: sa.Connection, size: int | None = None, *, strict: bool = False, checked: bool = True
    ) -> TileTree:
        """The log's Merkle tree in the database snapshot ``conn`` reads (at its size, or ``size``), read
        from the stored hash tiles and, for the right edge, the leaf hashes (each checked against its
        row's record): nothing of it is kept in this process, so after a rollback or a failover what is
        signed is what the database holds. ``strict``: see ``TileTree`` (a tile served); ``checked``:
        see ``RepoTiles.leaves`` (False: the local audit only)."""
        current = self.repo.size(conn)
        n = current if size is None else size
        if n < 0:
            raise InputError(f"tree size {n}: a tree size is a non-negative integer")
        if not n <= current:
            raise InputError(f"the log has {current} entries; no checkpoint at size {n}")
        return TileTree(self.repo.tile_source(conn, checked=checked), n, strict=strict)

    def tree(self) -> TileTree:
        """The log's Merkle tree as the database holds it now (read from its tiles, a connection a read)."""
        return TileTree(self.repo.tile_source(), self.repo.size())

    def root(self, size: int | None = None) -> bytes:
        """The Merkle root of the log (or of its first ``size`` entries), from the tiles."""
        with self.repo.read(snapshot=True) as conn:
            return self._tree_at(conn, size).root()

    def log_public_key(self) -> PublicKey:
        return self.signing_key(self.cfg.log_key).public

    @property
    def note_key_name(self) -> str:
        """The signed-note key name of checkpoints and receipts: the origin (C2SP tlog-checkpoint)."""
        return self.cfg.origin

    def verifier_key(self) -> str:
        """The log's C2SP signed-note verifier key (``ledger keys export log --vkey``)."""
        return verifier_key(self.note_key_name, self.log_public_key())

    def _sign(self, size: int, root: bytes, *, hold: bool = True) -> Checkpoint:
        """Sign a checkpoint of the tree the database holds at ``size`` (every caller read its root from the
        database). Every process of the home holds it when it is newer than the checkpoint the home holds
        (``_hold``: what is handed out under the log's key is what the anchor covers) — unless ``hold`` is
        False: the audit's own proofs, whose log it judges and so never vouches for (never handed out)."""
        cp = sign_checkpoint(
            self.cfg.origin, size, root, self._log_signing_key(), key_name=self.note_key_name
        )
        if hold:
            self._hold(cp)
        return cp

    def held(self) -> Checkpoint | None:
        """The checkpoint this home holds (``HOME/checkpoint``: the newest its processes published or
        read), its signature checked; None when it holds none. ``ProofError`` when the file is not a
        checkpoint of this log."""
        try:  # read and its signature checked once per version of the file (every append asks)
            st = self.home.checkpoint_path.stat()
            stamp: tuple[int, int, int] | None = (st.st_ino, st.st_mtime_ns, st.st_size)
        except OSError:
            stamp = None
        read = self._held_read
        if stamp is not None and read is not None and read[0] == stamp:
            return read[1]
        note = self.home.held_checkpoint()
        if note is None:
            return None
        try:
            cp = self.held_checkpoint(note)
        except LedgerError as e:
            raise ProofError(
                f"{self.home.checkpoint_path} is not a signed checkpoint of this log: {e.message}",
                hint="it is the anchor verify checks the database against: restore it, or remove it to "
                "hold the next checkpoint the home publishes",
            ) from e
        if stamp is not None:
            self._held_read = (stamp, cp)
        return cp

    def _refuse_fork(
        self,
        conn: sa.Connection,
        held: Checkpoint | None,
        tree: TileTree | None = None,
        *,
        receipts: bool = True,
    ) -> None:
        """The one check before anything is signed under the log's key — a checkpoint published, served or
        carried by a proof, a receipt — or a hash tile served: the log in the snapshot ``conn`` reads still
        extends its anchors (``_anchored``): ``held``, the checkpoint the home holds (None: it holds none),
        and the newest checkpoint the database stores under the log's key (``_stored_anchor``). A log that
        lost entries below one (a backup restored), or whose first entries no longer hash to its root
        (rewritten), is a fork: ``LogInconsistentError`` (HTTP 500), and nothing is signed. Where the
        stored tiles the root was read from name the cause (a tile's root, or its hashes with it,
        rewritten: ``TileTree.check_roots``), it is that tile's ``TileMismatchError`` — one name for one
        bad tile, whoever meets it. ``tree``: the tree about to be signed (or served), of that snapshot
        (read once for both).

        Past the held checkpoint, the receipts this home kept of its own log stand for it: a log that no
        longer holds an entry a kept receipt names, at its index, lost it (deleted behind its back, maybe
        appended over) — refused the same way (``_receipt_lost``). And a tree signed past the anchor (the
        larger of the two) is signed only over rows whose hash chain was walked from the anchor
        (``_walk``): each row there, linked to the one before and logged no earlier, its leaf its
        record's, and the root the tree gives the anchor's tree extended by those leaves — O(rows past
        the anchor), and the anchor moves to what is signed (``_hold``). Neither for a tile served
        (``receipts`` False: nothing is signed over it)."""
        anchor, _ = self._anchored(conn, held, tree, receipts=receipts)
        if receipts and tree is not None:
            start = 0 if anchor is None else anchor.size
            if tree.size > start:
                self._walk(conn, start, tree.size, tree, root=True)

    def _anchored(
        self, conn: sa.Connection, held: Checkpoint | None, tree: TileTree | None, *, receipts: bool
    ) -> tuple[Checkpoint | None, TileTree | None]:
        """``_refuse_fork``'s anchors checked against the log in ``conn``'s snapshot; returns the anchor
        (the larger of the two, None when there is none) and a tree of that snapshot at least as large
        as it (``tree`` where it is; else one read at the anchor's size).

        Which anchor: the checkpoint the home holds (outside the database: deleting checkpoint rows does
        not move it) and the newest one the database stores, its note checked under the log's key — the
        one a home that holds none (a replica with a home of its own, a fresh home on an existing
        database) still has, and the one another replica publishing on the same database moved past the
        held one. The log must extend both (checked in that order: the held checkpoint first, then the
        receipts past it where ``receipts``, then the stored one); then the two are consistent (both
        the log's tree at their sizes), and the larger is the anchor. A stored checkpoint no larger than
        the held one is proved to be the held one's tree at its size once per pair (``_prefixes``: a fact
        of the two signed roots). The receipts this home kept are checked past the checkpoint the home
        holds only (from 0 where it holds none): a checkpoint another replica published never vouched
        for this home's receipts."""
        current = self.repo.size(conn)
        if held is not None:
            if tree is None or tree.size < held.size:
                tree = self._tree_at(conn, min(held.size, current))  # lost: held_fault reads no root
            self._extends_checkpoint(current, held, tree, stored=False)
        if receipts:
            self._receipt_lost(0 if held is None else held.size)
        stored = self._stored_anchor(conn)
        if stored is None:
            return held, tree
        if held is not None and stored.size <= held.size and self._proved_prefix(held, stored):
            return held, tree
        if tree is None or tree.size < stored.size:
            tree = self._tree_at(conn, min(stored.size, current))
        self._extends_checkpoint(current, stored, tree, stored=True)
        if held is not None and stored.size <= held.size:
            self._remember_prefix(held, stored)
            return held, tree
        return stored, tree

    def _extends_checkpoint(self, current: int, cp: Checkpoint, tree: TileTree, *, stored: bool) -> None:
        """The log of ``current`` entries, whose tree ``tree`` is (at least ``cp.size`` where it holds
        that many), extends the signed checkpoint ``cp`` — the one the home holds, or (``stored``) the
        newest the database stores — else ``LogInconsistentError`` (or the ``TileMismatchError`` of the
        stored tile that gives another root)."""
        whose = "the checkpoint the database stores" if stored else "the checkpoint this home holds"
        backup = "its newest checkpoint" if stored else "the held checkpoint (HOME/checkpoint)"
        fault = held_fault(current, cp, tree.root)
        if fault is not None and fault.error is not None:
            raise fault.error  # the tree cannot be read (a row deleted behind the log's back): that error
        if fault is None:
            return
        why = ""
        if not fault.lost:
            try:  # name the stored tile whose root (or hashes, with it) was rewritten, where one was
                tree.check_roots()
            except TileMismatchError as e:
                raise TileMismatchError(
                    f"{e.message}: the log's tree read from the stored tiles does not extend {whose} (size "
                    f"{cp.size}, root {cp.root.hex()[:16]}…): nothing is signed under the log's key (no "
                    "checkpoint, receipt or proof), served or appended",
                    tile=e.tile,
                ) from e
            except LedgerError as e:
                why = f": {e.message}"
        elif stored:
            why = f": {fault.reason()}"
        raise LogInconsistentError(
            f"the log (size {current}) does not extend {whose} (size {cp.size}, root "
            f"{cp.root.hex()[:16]}…){why}: nothing is signed under the log's key (no checkpoint, receipt or "
            "proof) and nothing is appended",
            hint=f"`ledger verify` names what changed; restore the database from a backup that holds every "
            f"entry {backup} covers",
        )

    def _stored_anchor(self, conn: sa.Connection) -> Checkpoint | None:
        """The newest checkpoint the database stores (the largest size), its note checked under the log's
        key and origin as a held one is (``held_checkpoint``) — once per row as read (``_stored_read``).
        None when it stores none, or when the newest is a format-1 checkpoint (signed before ``ledger
        migrate``, its note under the log key's own name: it commits the bare envelopes' tree, not the
        records' the log signs now, and anchors nothing of it). A newest row that is not a checkpoint of
        this log signed by its key (its note edited, or the row inserted, behind the log's back), or whose
        size, root or format column is not what its note says, is ``LogInconsistentError`` naming it:
        never skipped for an older one (fail closed). One query (the primary key's last row)."""
        c = T_CHECKPOINTS.c
        row = conn.execute(
            sa.select(c.size, c.root, c.note, c.format).order_by(c.size.desc()).limit(1)
        ).first()
        if row is None:
            return None
        key = tuple(row)
        with self._cache_lock:
            memo = self._stored_read
        if memo is not None and memo[0] == key:
            return memo[1]
        size, root, note, fmt = key
        where = f"the newest checkpoint the database stores (its row of size {size})"
        hint = (
            "`ledger verify` names every checkpoint row that is not the log's; restore the database from a "
            "backup the checkpoint this home holds vouches for"
        )
        if fmt == 1 and isinstance(note, str):
            with contextlib.suppress(ProofError):
                parse_checkpoint(note, self.cfg.log_key, self.log_public_key())
                with self._cache_lock:
                    self._stored_read = (key, None)
                return None
        try:
            if not isinstance(note, str):
                raise ProofError(f"its note is no text ({type(note).__name__})")
            cp = self.held_checkpoint(note)
        except LedgerError as e:
            raise LogInconsistentError(
                f"{where} is not a checkpoint of this log signed by its key: {e.message} (the row was edited "
                "or inserted behind the log's back): nothing is signed under the log's key (no "
                "checkpoint, receipt or proof) and nothing is appended",
                hint=hint,
            ) from e
        if cp.size != size or cp.root.hex() != root or fmt != LOG_FORMAT:
            raise LogInconsistentError(
                f"{where}: its size, root or format column is not what its signed note says (size "
                f"{cp.size}, root {cp.root.hex()[:16]}…, format {LOG_FORMAT}): the row was edited behind "
                "the log's back; nothing is signed under the log's key (no checkpoint, receipt or proof) "
                "and nothing is appended",
                hint=hint,
            )
        with self._cache_lock:
            self._stored_read = (key, cp)
        return cp

    def _walk(self, conn: sa.Connection, start: int, end: int, tree: TileTree | None, *, root: bool) -> None:
        """Walk the log's hash chain over the rows ``start .. end - 1``, past an anchor of size ``start``
        whose tree ``tree`` gives (its root at ``start`` checked against the anchor's: ``_anchored``), in
        pages of ``_WALK_PAGE`` rows (``ledger.reads.chain_walk``): none missing, each row's columns and
        record its leaf's, linked to the row before it (from the anchor's last row, whose leaf must be
        the one the anchor signs — its log time and chain hash are where the walk starts; from the
        genesis link at size 0) and logged no earlier. ``root``: ``tree`` is the tree about to be signed
        (of size ``end``), whose root must be the anchor's tree extended by the leaves walked — a stored
        tile past the anchor that is not the rows' is named (``check_roots``), never signed over.
        ``ChainBrokenError`` (``LogOrderError``, ``TileMismatchError``) naming what differs. O(end -
        start) rows read once, no more than a page held."""
        lo = max(start - 1, 0)
        link: ChainLink | None = ChainLink(0, GENESIS_PREV, None) if start == 0 else None
        builder = (
            TileBuilder(size=start, stack=tree.compact_range(start)) if root and tree is not None else None
        )
        pos = lo
        while pos < end:
            rows = _chain_rows(conn, pos, end)
            if not rows or (link is None and int(rows[0][0]) != lo):
                break  # a row gone (the anchor's last one, where ``link`` is None): named below
            leaves, walked = chain_walk(rows, link)
            if walked is None:  # rows were walked: it stands after the last one
                break
            link = walked
            if pos < start:  # the anchor's last row: its leaf is the one the anchor signs
                if tree is None or leaves[0] != tree.leaf(lo):
                    raise _unanchored_leaf_error(lo, start)
                leaves = leaves[1:]
            if builder is not None:
                for leaf in leaves:
                    builder.append(leaf)
            pos = link.seq
        if link is None or link.seq < end:
            raise _walk_gap_error(lo if link is None else link.seq, end)
        if builder is not None and tree is not None and builder.root() != tree.root(end):
            tree.check_roots()  # names the stored tile that disagrees with what is below it, where one does
            raise TileMismatchError(
                f"the root the stored hash tiles give at size {end} is not the tree of the checkpoint of "
                f"size {start} extended by the log's records after it: the database's hash tiles were "
                "edited behind the log's back; nothing is signed under the log's key",
            )

    def _receipt_lost(self, floor: int) -> None:
        """``LogInconsistentError`` naming the first receipt this home kept of its own log, at an index
        ``>= floor`` (those below are the held checkpoint's to vouch for), whose entry the log no longer
        holds at that index, or holds rewritten (``_receipt_fault``)."""
        fault = self._receipt_fault(floor)
        if fault is not None:
            raise fault[0]

    def _receipt_fault(self, floor: int) -> tuple[LedgerError, int | None, str | None] | None:
        """The first receipt this home kept of its own log at an index ``>= floor`` that the log no longer
        stands by, as (the error, its index, its entry id); None when the log stands by every one. The log
        lost the entry (it is not at that index: deleted behind its back, maybe appended over), or holds it
        rewritten — its row's record, re-derived into its leaf (``checked_leaf``: a record that no longer
        hashes to its row's leaf hash is ``ChainBrokenError``), is not the leaf the receipt signs (its
        ``logged_at``, kind, signer … rewritten with the leaf and chain hashes agreeing): either is
        ``LogInconsistentError`` naming the entry, its index and what differs. A kept receipt that names no
        leaf the log signed, or contradicts itself (``receipt_claim``), or whose fields place it nowhere
        (``receipt_place``: an index that is no integer, an entry id that is no text — whatever its index,
        the held checkpoint below it cannot be told), cannot judge the log and is ``ConfigError`` naming it
        (never passed); the index and entry id returned are then those of its fields that are ones.

        Cheap: the receipts file is read once per process, then only its new lines; only the receipts past
        the held checkpoint are kept in memory and looked up (one query per 500 of them, their rows'
        records and leaf hashes with their entry ids). The file is read before the database (a read begun
        after it): a receipt is kept only after its entry committed, so an entry a fresh read lacks was
        lost, never "not yet"."""
        kept, unplaced = self._kept_since(floor)
        if not kept and not unplaced:
            return None
        ids = sorted({k.entry_id for ks in kept.values() for k in ks})
        with self.repo.read() as conn:
            rows: dict[str, Any] = {}
            for i in range(0, len(ids), 500):
                rows.update(self.repo.by_ids(conn, ids[i : i + 500]))
            missing = [i for i, ks in kept.items() if any(not _at(rows.get(k.entry_id), i) for k in ks)]
            there = self.repo.entry_ids_at(conn, missing) if missing else {}
        for index in sorted(kept):
            for k in sorted(kept[index], key=lambda k: (k.entry_id, k.fault)):
                row = rows.get(k.entry_id)
                if row is None or not _at(row, index):
                    return self._receipt_error(k, index, there), index, k.entry_id
                if k.claim is None:
                    return self._unjudged(index, k.entry_id, k.fault), index, k.entry_id
                leaf = checked_leaf(index, k.entry_id, row.record, row.leaf_hash)
                if leaf != k.claim.leaf:
                    return self._receipt_error(k, index, there, row.record, leaf), index, k.entry_id
        for entry_id, index, why in unplaced:
            return (
                self._unjudged(index, entry_id, why),
                index if type(index) is int else None,
                entry_id if isinstance(entry_id, str) else None,
            )
        return None

    def _unjudged(self, index: Any, entry_id: Any, why: str) -> ConfigError:
        """The refusal over a kept receipt that cannot judge the log (``why``: ``receipt_claim``, or
        ``receipt_place`` — its index and entry id then named as its fields say them)."""
        of = (
            f"entry {entry_id} at index {index}"
            if type(index) is int and isinstance(entry_id, str)
            else f"entry_id {entry_id!r}, index {index!r} (as its fields say)"
        )
        return ConfigError(
            f"{self.home.receipts_path}: the receipt this home kept of {of} "
            f"cannot judge the log: {why}; nothing is signed under the log's key (no checkpoint, receipt "
            "or proof) and nothing is appended",
            hint="`ledger audit` names every receipt it cannot check; restore HOME/receipts.jsonl from a "
            "backup",
        )

    def _receipt_error(
        self,
        k: _Kept,
        index: int,
        there: dict[int, str],
        record: bytes | None = None,
        leaf: bytes | None = None,
    ) -> LedgerError:
        """The refusal over a kept receipt the log no longer stands by: its entry lost at ``index``
        (``there``: what the log holds at each index a receipt's entry is not at), or held there with the
        ``record`` whose ``leaf`` is not the one the receipt signs (each field that differs named) —
        unless the receipt's own record is no log record of that entry (``_unjudged``)."""
        tail = (
            ": nothing is signed under the log's key (no checkpoint, receipt or proof) and nothing is "
            "appended"
        )
        if leaf is None:
            return LogInconsistentError(
                f"the log lost entry {k.entry_id} at index {index}, whose signed receipt this home "
                f"kept (HOME/receipts.jsonl; {'another entry' if index in there else 'no entry'} "
                f"is there now){tail}",
                hint="`ledger audit` names every receipt the log no longer stands by; restore the "
                "database from a backup that holds the received entries",
            )
        assert k.claim is not None
        try:
            says = k.claim.says(index, k.entry_id)
        except ProofError as e:  # the receipt's record, not the log, is what is wrong
            return self._unjudged(index, k.entry_id, e.message)
        try:
            now = parse_record(bytes(record or b"")).to_json()
            differs = "; ".join(
                f"{f} {now.get(f)} where the receipt says {v}" for f, v in says.items() if now.get(f) != v
            )
        except ProofError as e:
            differs = f"its record is no log record ({e.message})"
        return LogInconsistentError(
            f"the log holds entry {k.entry_id} at index {index} rewritten since it signed the receipt "
            f"this home kept (HOME/receipts.jsonl): its record hashes to leaf {leaf.hex()[:16]}…, the "
            f"receipt signs leaf {k.claim.leaf.hex()[:16]}…"
            f"{' (' + differs + ')' if differs else ''}{tail}",
            hint="`ledger audit` names every receipt the log no longer stands by; restore the "
            "database from a backup that holds the received entries as they were received",
        )

    def _kept_since(self, floor: int) -> tuple[dict[int, set[_Kept]], list[tuple[Any, Any, str]]]:
        """The receipts this home kept of its own log at each index ``>= floor`` (``_Kept``: the entry id
        and the leaf each signs): what was read of ``receipts.jsonl`` before, and what was appended since
        (``Home.receipts_since``). A file replaced, removed or rewritten in place (emptied and refilled)
        is read again from the start, and what was read of it before is dropped. With them, every receipt
        of this log whose fields place it nowhere (``receipt_place``), whatever the floor: (its entry id,
        index, why) as its fields say them."""
        with self._cache_lock:
            kept = self._kept
            if kept is not None and floor < kept[1]:
                kept = None  # the receipts below the floor read then were not kept: read them all again
            docs, read = self.home.receipts_since(None if kept is None else kept[0])
            pending: dict[int, set[_Kept]] = {}
            unplaced: list[tuple[Any, Any, str]] = []
            if kept is not None and not read.restarted:
                pending = {i: s for i, s in kept[2].items() if i >= floor}
                unplaced = list(kept[3])
            for d in docs:
                try:
                    place = receipt_place(d, self.cfg.origin, self.note_key_name)
                except ProofError as e:
                    unplaced.append((d.get("entry_id"), d.get("index"), e.message))
                    continue
                if place is None or place[0] < floor:
                    continue  # another log's, or one the held checkpoint covers
                index, entry_id = place
                try:
                    k = _Kept(entry_id, receipt_claim(d, self.cfg.origin, index, entry_id))
                except ProofError as e:
                    k = _Kept(entry_id, None, e.message)
                pending.setdefault(index, set()).add(k)
            self._kept = (read, floor, pending, unplaced)
            return {i: set(ks) for i, ks in pending.items()}, list(unplaced)

    def _guard_head(
        self, conn: sa.Connection, head: Head | None, since: KeysSince | None = None
    ) -> Checkpoint | None:
        """``_refuse_fork`` for the sequencer, in its transaction, before it appends (the receipts of what
        it appends are signed under the log's key). Cheap where nothing moved: a head this process left
        (or one after it whose chain still holds the entry it left at) extends what was proved; only a
        head elsewhere (a backup restored, entries removed) reads the tiles. A home that holds no
        checkpoint is checked against the newest one the database stores the same way (``_anchored``).
        Returns the held checkpoint.

        The receipts this home kept past the held checkpoint are not checked here (every checkpoint checks
        them, so nothing is signed over a rewrite): checking them at every append looks each up again in
        the database and cost 2.5x (a server) to 3.8x (home-bound) per append with 200 kept past the held
        checkpoint, the file check itself ≤ 0.1 ms (bench/bench_receipts_check.py,
        bench/results/receipts_check.json).

        ``since``: what the sequencer read in its round trip (``LogRepo.sequence``); where it starts where
        this process left the head, its chain hash there is the one this check compares (read after the
        lock, in the same transaction): no further round trip while every appender waits on the lock —
        the common case with two replicas, each finding the head the other moved."""
        held = self.held()
        key = _held_key(held)
        size, chain = (0, GENESIS_PREV) if head is None else (head.seq + 1, str(head.chain_hash))
        memo = self._extends
        if memo == (*key, size, chain):
            return held
        if not (
            memo is not None
            and memo[:2] == key
            and 0 < memo[2] <= size
            and (
                since.chain
                if since is not None and since.start == memo[2]
                else self.repo.chain_at(conn, memo[2] - 1)
            )
            == memo[3]
        ):
            self._refuse_fork(conn, held)  # a home that holds none: the checkpoint the database stores
        self._extends = (*key, size, chain)
        return held

    def _hold(self, cp: Checkpoint) -> None:
        """Make ``cp``, a checkpoint about to be handed out (or published) under the log's key, the
        checkpoint the home holds when it is newer than the held one, the log still extending both (never
        a fork: the held checkpoint stays, for ``verify`` to report). Outside the database, so deleting
        checkpoint rows does not remove the anchor. Every process of the home holds what it signs — a
        server too: a checkpoint handed out and not held would leave the log free to sign a fork of it
        (rolled back below it, above the anchor). Never best effort: a checkpoint that cannot be held is
        not handed out — ``LogInconsistentError`` for a log that no longer holds it or no longer extends
        the held one (it changed after the caller read it), ``StorageError`` for a home that cannot be
        written. A checkpoint no newer than the held one is handed out only where it is the held one's
        tree at its size (``_within_held``): one signed from a snapshot read before a rollback, while
        another request held one of the log regrown since, is a fork. Cheap where nothing moved: the held
        checkpoint is read once per version of the file (``held``), so the held checkpoint signed again
        costs one ``stat`` and a comparison."""
        held = self.held()
        if held is not None and held.size >= cp.size:
            self._within_held(cp, held)
            return
        try:
            with self.home.checkpoint_lock():
                held = self.held()  # another thread or process may have moved it meanwhile
                if held is not None and held.size >= cp.size:
                    self._within_held(cp, held)
                    return
                with self.repo.read(snapshot=True) as conn:
                    current = self.repo.size(conn)
                    tree = self._tree_at(conn, cp.size) if current >= cp.size else None
                    if (
                        tree is None
                        or tree.root() != cp.root
                        or (held is not None and tree.root(held.size) != held.root)
                    ):
                        raise LogInconsistentError(
                            f"the log (size {current}) no longer holds the checkpoint just signed (size "
                            f"{cp.size}, root {cp.root.hex()[:16]}…)"
                            + (
                                ""
                                if held is None
                                else f" extending the one this home holds (size {held.size})"
                            )
                            + ": it changed while it was signed; the checkpoint is not handed out",
                            hint="`ledger verify` names what changed; restore the database from a backup "
                            "that holds every entry the held checkpoint (HOME/checkpoint) covers",
                        )
                self.home.hold_checkpoint(cp.note)
        except OSError as e:
            raise StorageError(
                f"{self.home.checkpoint_path}: the checkpoint of size {cp.size} could not be held ({e}): a "
                "checkpoint the home does not hold is not handed out (the anchor would not cover it)",
                hint="make the home writable by the process that serves the log",
            ) from e

    def _within_held(self, cp: Checkpoint, held: Checkpoint) -> None:
        """``cp`` (no larger than ``held``, the checkpoint the home holds) is ``held``'s tree at its size, or
        ``LogInconsistentError`` and it is not handed out. The same size: the same root (the common case,
        the held checkpoint signed again: bytes compared). Smaller: proved on the database as it is now —
        its first ``held.size`` entries still hash to ``held``'s root, and its first ``cp.size`` to
        ``cp``'s — once per held checkpoint and size (``_prefixes``: a fact of the two signed roots,
        whatever the database holds later); a log that no longer extends ``held`` cannot prove it:
        refused."""
        if self._proved_prefix(held, cp):
            return
        agrees = False
        if cp.size < held.size:
            with self.repo.read(snapshot=True) as conn:
                current = self.repo.size(conn)
                if current >= held.size:
                    tree = self._tree_at(conn, held.size)
                    agrees = tree.root() == held.root and tree.root(cp.size) == cp.root
        if not agrees:
            raise LogInconsistentError(
                f"the checkpoint just signed (size {cp.size}, root {cp.root.hex()[:16]}…) is not the tree "
                f"of the checkpoint this home holds (size {held.size}, root {held.root.hex()[:16]}…) at "
                f"size {cp.size}: the log changed while it was signed (rolled back and regrown: a fork); "
                "the checkpoint is not handed out",
                hint="`ledger verify` names what changed; restore the database from a backup that holds "
                "every entry the held checkpoint (HOME/checkpoint) covers",
            )
        self._remember_prefix(held, cp)

    def _proved_prefix(self, held: Checkpoint, cp: Checkpoint) -> bool:
        """Whether ``cp`` is ``held`` itself, or was proved to be ``held``'s tree at its size
        (``_remember_prefix``)."""
        if cp.size == held.size and cp.root == held.root:
            return True
        with self._cache_lock:
            memo = self._prefixes
            return memo is not None and memo[:2] == (held.size, held.root) and memo[2].get(cp.size) == cp.root

    def _remember_prefix(self, held: Checkpoint, cp: Checkpoint) -> None:
        """Remember that ``cp`` (no larger) is ``held``'s tree at its size: proved on a log whose first
        ``held.size`` entries hash to ``held``'s root, a fact of the two signed roots."""
        with self._cache_lock:
            memo = self._prefixes
            if memo is None or memo[:2] != (held.size, held.root) or len(memo[2]) >= _PREFIXES_KEPT:
                memo = (held.size, held.root, {})
            memo[2][cp.size] = cp.root
            self._prefixes = memo

    def signed_checkpoint(self, *, size: int | None = None) -> Checkpoint:
        """A checkpoint of the log as the database holds it now (or at an earlier size), signed and not
        stored: reads never write. The published ones are the sequencer's (``publish_checkpoint``). None of
        a log that no longer extends the checkpoint the home holds (``_refuse_fork``)."""
        held = self.held()
        with self.repo.read(snapshot=True) as conn:
            tree = self._tree_at(conn, size)
            self._refuse_fork(conn, held, tree)
            root = tree.root()
        return self._sign(tree.size, root)

    def keep_checkpoint(self, size: int | None = None) -> Checkpoint:
        """A signed checkpoint for a reader (kept name for callers): nothing is written."""
        return self.signed_checkpoint(size=size)

    def checkpoint(self, *, size: int | None = None, store: bool = True) -> Checkpoint:
        """Sign a checkpoint of the log (at its current size, or an earlier one) and publish it (``store``).

        ``ledger checkpoint`` publishes on demand; appends publish on the sequencer's schedule
        (``publish_due``). Without ``store`` it is ``signed_checkpoint``.
        """
        if not store:
            return self.signed_checkpoint(size=size)
        held = self.held()
        with self.repo.read(snapshot=True) as conn:
            tree = self._tree_at(conn, size)
            # published under the log's key only where the log still extends what the home holds: a
            # tree read from rewritten tiles, or a log that lost entries, is a fork (verify names why)
            self._refuse_fork(conn, held, tree)
            root = tree.root()
        cp = self._sign(tree.size, root)
        self._store_checkpoint(cp)
        self._hold(cp)  # published: the home holds it, outside the database
        return cp

    def publish_checkpoint(self, *, wait: bool = False) -> Checkpoint:
        """The sequencer's step: sign and keep a checkpoint of the whole log, then ask each configured
        witness to cosign it (a witness that fails is a warning: the checkpoint stands without it).

        The witnesses are asked off the caller's thread (``ledger.witnessing.WitnessSubmitter``): an append
        never waits for a witness. ``wait``: return once they answered (``ledger checkpoint``)."""
        cp = self.checkpoint()
        self._published = (cp.size, time.monotonic())
        if self.cfg.witnesses:
            submitter = self._witness_submitter()
            submitter.submit(cp)
            if wait:
                submitter.wait()
        return cp

    def _witness_submitter(self) -> WitnessSubmitter:
        from ledger.witnessing import WitnessSubmitter, submit_to_witnesses

        with self._cache_lock:
            if self._witnesses is None:

                def send(cp: Checkpoint) -> None:
                    def proof_for(old: int) -> list[bytes]:
                        return self.tree().consistency_proof(old, cp.size)

                    submit_to_witnesses(self.repo, self.cfg.witnesses, cp, proof_for)

                self._witnesses = WitnessSubmitter(send)
            return self._witnesses

    def wait_for_witnesses(self, timeout: float | None = None) -> None:
        """Return once every published checkpoint was offered to the witnesses (or ``timeout`` passed)."""
        if self._witnesses is not None:
            self._witnesses.wait(timeout)

    def cosigned(self, cp: Checkpoint) -> Checkpoint:
        """``cp`` with the witness cosignatures kept for its size and root appended (a read)."""
        from ledger.witness import add_cosignatures

        with self.repo.read() as conn:
            lines = self.repo.cosignatures(conn, cp.size, cp.root.hex())
        return Checkpoint(cp.origin, cp.size, cp.root, add_cosignatures(cp.note, sorted(lines.values())))

    def served_checkpoint(self) -> Checkpoint:
        """The checkpoint ``/checkpoint`` serves: with witnesses configured, the newest published one with
        its cosignatures; otherwise one signed now over the whole log."""
        if self.cfg.witnesses:
            with self.repo.read() as conn:
                last = self.repo.latest_checkpoint(conn)
            if last is not None:
                return self.cosigned(self.signed_checkpoint(size=int(last.size)))
        return self.signed_checkpoint()

    def witness_status(self, cp: Checkpoint) -> list[dict[str, Any]]:
        """Each configured witness and whether ``cp`` carries its cosignature (a missing one is named)."""
        from ledger.witness import parse_witness_vkey

        with self.repo.read() as conn:
            have = self.repo.cosignatures(conn, cp.size, cp.root.hex())
            out = []
            for w in self.cfg.witnesses:
                name, _ = parse_witness_vkey(w.vkey)
                out.append(
                    {
                        "witness": name,
                        "url": w.url,
                        "cosigned": name in have,
                        "last_cosigned_size": self.repo.witness_size(conn, name),
                    }
                )
        return out

    def _store_checkpoint(self, cp: Checkpoint) -> None:
        # two servers publishing the same size must not race on the insert: the appenders' lock
        for attempt in (1, 2):
            try:
                with self.repo.append_transaction() as conn:
                    stored = self.repo.checkpoint_root(cp.size, conn)
                    if stored is None:
                        # the root is what the database holds now, not only what this process computed
                        current = self.repo.size(conn)
                        if cp.size > current or self._tree_at(conn, cp.size).root() != cp.root:
                            raise IntegrityError(f"log root at size {cp.size} changed while it was signed")
                        self._write_tiles(conn, cp.size)
                        self.repo.insert_checkpoint(
                            conn, cp.size, cp.root.hex(), cp.note, format_time(now_utc()), LOG_FORMAT
                        )
                    elif stored != cp.root.hex():
                        raise IntegrityError(f"log root at size {cp.size} differs from the stored checkpoint")
                return
            except sa.exc.IntegrityError:
                if attempt == 2:
                    raise

    def _write_tiles(self, conn: sa.Connection, size: int) -> int:
        """Store the full hash tiles a checkpoint of ``size`` covers that the database lacks, level by
        level, inside the publishing transaction (it holds the appenders' lock, so two servers on one
        database never write the same tile twice). Returns how many were written.

        The stored tiles of each level are a prefix of that level's full tiles (a rollback loses a tail
        of the log and so the tiles of that tail): the first missing one is found by bisection."""
        written = 0
        level = 0
        while (full := full_tiles(level, size)) > 0:
            lo, hi = 0, full  # tiles [0, lo) are stored; [hi, full) are not
            if self.repo.has_tile(conn, level, full - 1):
                lo = hi = full
            else:
                hi = full - 1
            while lo < hi:
                mid = (lo + hi) // 2
                if self.repo.has_tile(conn, level, mid):
                    lo = mid + 1
                else:
                    hi = mid
            if lo < full:
                tree = TileTree(self.repo.tile_source(conn), size)
                rows = []
                for idx in range(lo, full):
                    hashes = tree.tile(level, idx)
                    root = tree.node(TILE_HEIGHT * (level + 1), idx)
                    last = tile_last_seq(level, idx)
                    rows.append(
                        {
                            "level": level,
                            "idx": idx,
                            "chain_hash": self.repo.chain_at(conn, last),
                            "last_seq": last,
                            "hashes": hashes,
                            "root": root,
                        }
                    )
                self.repo.insert_tiles(conn, rows)
                written += len(rows)
            level += 1
        return written

    def _publish_due(self, conn: sa.Connection, size: int) -> bool:
        """Whether the sequencer publishes after this append: every ``CHECKPOINT_EVERY`` entries, or when
        the newest published checkpoint is older than ``CHECKPOINT_INTERVAL_S`` (or there is none).

        This process's own last publication answers "not yet" without a query, and so does the newest one
        the database stored (another replica's) once read, until it is as old as the interval or
        ``CHECKPOINT_EVERY`` entries behind: the query is made inside the appenders' lock, so a replica
        asking it at every group while the other's checkpoint was fresh held every appender up by a round
        trip. The database's newest checkpoint decides otherwise."""
        interval = checkpoint_interval_s()
        now = time.monotonic()
        for known in (self._published, self._newest_seen):
            if known is not None and size - known[0] < CHECKPOINT_EVERY and now - known[1] < interval:
                return False
        last = self.repo.latest_checkpoint(conn)
        if last is None:
            return True
        if size - int(last.size) >= CHECKPOINT_EVERY:
            return True
        if size == int(last.size):
            return False
        age = (now_utc() - parse_time(last.created_at)).total_seconds()
        if age >= interval:
            return True
        # not due until it is ``interval`` old (by this clock: a publisher's clock ahead of this one's
        # counts from now, never from the future)
        self._newest_seen = (int(last.size), now - max(age, 0.0))
        return False

    # --- C2SP tlog-tiles ---------------------------------------------------------------------------

    def tile(self, level: int, index: int, width: int | None = None) -> bytes:
        """The C2SP tlog-tiles hash tile ``level``/``index`` (full: 256 hashes; or partial of ``width``),
        from the stored tiles. ``EntryNotFoundError`` when the log has no such tile.

        A tile served is checked against what it commits first (a ``strict`` tree): a full tile against
        its stored root and the 256 rows' leaves (level 0: each the hash of its row's record) or tile
        roots below it; a partial tile's hashes are the leaves of its rows, or the roots of full tiles
        each checked against its hashes. The roots a tile above level 0 holds are checked against the
        tiles below them only this far (the rows under each of up to 255 tiles are not read per request:
        up to 65,280): so such a tile is served only from a tree that extends the checkpoint the home
        holds (``_refuse_fork``, its receipts aside: O(log n) reads) — a level-0 tile rewritten with its
        root, under it, gives another root there. A level-0 tile is the leaves of its rows, each its
        record's hash, whatever another tile holds. A tile that is not the log's is ``TileMismatchError``
        naming it (level/index): never served. Reads only (one snapshot)."""
        if not 0 <= level <= 63 or index < 0 or (width is not None and not 1 <= width <= 255):
            raise InputError("no such tile (level 0..63, index >= 0, width 1..255)")
        w = TILE_WIDTH if width is None else width
        with self.repo.read(snapshot=True) as conn:
            tree = self._tree_at(conn, strict=True)
            if (index * TILE_WIDTH + w) << (TILE_HEIGHT * level) > tree.size:
                raise EntryNotFoundError(f"the log has no tile {level}/{index} of width {w} yet")
            if level > 0:
                self._refuse_fork(conn, self.held(), tree, receipts=False)
            return tree.tile(level, index, width)

    def entry_bundle(self, index: int, width: int | None = None) -> bytes:
        """The C2SP entry bundle ``index``: the log records, each after its big-endian uint16 length."""
        if index < 0 or (width is not None and not 1 <= width <= 255):
            raise InputError("no such entry bundle (index >= 0, width 1..255)")
        w = TILE_WIDTH if width is None else width
        lo = index * TILE_WIDTH
        with self.repo.read(snapshot=True) as conn:
            records = self.repo.records(conn, lo, lo + w)
            size = self.repo.size(conn)
            if len(records) < w:
                if lo + w <= size:  # below the log's size: rows gone, not "not yet"
                    raise ChainBrokenError(
                        f"the log has {len(records)} entries in {lo}..{lo + w - 1}, below its size {size}, "
                        f"not {w}: a row was deleted behind the log's back; entry bundle {index} is not "
                        "served"
                    )
                raise EntryNotFoundError(f"the log has no entry bundle {index} of width {w} yet")
            if any(r is None for r in records):
                raise LogFormatError("the log has entries without a log record: run `ledger migrate`")
            # each record must be the leaf the hash tiles serve beside it (one tile read, checked against
            # its root, and w SHA-256s)
            leaves = TileTree(self.repo.tile_source(conn), size).hashes(0, lo, lo + w)
            for i, (r, leaf) in enumerate(zip(records, leaves, strict=True)):
                if r is None or hashlib.sha256(b"\x00" + r).digest() != leaf:
                    raise self._bundle_leaf_error(conn, lo + i, r)
        return b"".join(len(r).to_bytes(2, "big") + r for r in records if r is not None)

    def _bundle_leaf_error(self, conn: sa.Connection, seq: int, record: bytes | None) -> ChainBrokenError:
        """Who to blame when the record at ``seq`` is not the leaf the tiles give beside it. A record that
        hashes to its own ``leaf_hash`` column was not rewritten: the leaf came from the stored full tile
        (the leaf hash column would have given the record's), and that tile was rewritten — with its root,
        else reading it was refused already (or the record was, with its leaf hash: ``ledger verify`` tells
        which). Otherwise the record (``record_leaf_error``)."""
        try:
            column = self.repo.leaf_hashes(conn, start=seq, size=seq + 1)
        except ValueError:  # a leaf hash column that is not hex: not the record's
            column = []
        if record is not None and column == [hashlib.sha256(b"\x00" + record).digest()]:
            return TileMismatchError(
                f"stored tile 0/{tile_path(seq // TILE_WIDTH)} holds another leaf for seq {seq} than its log "
                "record, which hashes to the entry's leaf hash: the tile was rewritten behind the log's back "
                f"(or the record with its leaf hash); entry bundle {seq // TILE_WIDTH} is not served",
                tile=(0, seq // TILE_WIDTH),
                hint="run `ledger verify` on the log's home (it names what changed); restore the database "
                "from a backup the checkpoint this home holds vouches for",
            )
        return record_leaf_error(seq)

    def export_tiles(
        self, directory: Path, *, size: int | None = None, force: bool = False
    ) -> dict[str, Any]:
        """Write the log (at its size, or ``size``) as C2SP tlog-tiles static files under ``directory``:
        ``checkpoint``, ``tile/<L>/<N>[.p/<W>]`` and ``tile/entries/<N>[.p/<W>]``, each replaced
        atomically, the checkpoint last (a reader never sees a checkpoint whose tiles are not there yet).

        One read snapshot; the leaves stream through a ``TileBuilder`` (bounded memory), whose root must
        be the one the tiles give. A full tile or bundle already there with the same bytes is kept.

        The folder is the log's publication point, and its checkpoint moves as ``HOME/checkpoint`` does:
        only forward, and only to a log that still extends it. A checkpoint there that this log did not
        sign, one larger than the size exported, or one whose root the log no longer gives at its size (a
        log rewritten or rolled back since) is refused before anything is written (``IntegrityError``),
        unless ``force``."""
        out = Path(directory)
        written = kept = 0
        published = self._published_in(out) if not force else None

        def put(rel: str, data: bytes) -> None:
            nonlocal written, kept
            path = out / rel
            with contextlib.suppress(OSError):
                if path.stat().st_size == len(data) and path.read_bytes() == data:
                    kept += 1
                    return
            write_atomic(path, data)
            written += 1

        with self.repo.read(snapshot=True) as conn:
            tree = self._tree_at(conn, size)
            self._refuse_fork(conn, self.held(), tree)  # its checkpoint is signed under the log's key
            n, root = tree.size, tree.root()
            if published is not None:
                hint = "export to another folder, or pass --force to replace what it publishes"
                if published.size > n:
                    raise IntegrityError(
                        f"{out / 'checkpoint'} publishes size {published.size}; exporting size {n} would "
                        "move the published checkpoint back",
                        hint=hint,
                    )
                at = self._tree_at(conn, published.size).root() if published.size else published.root
                if at != published.root:
                    raise IntegrityError(
                        f"the log does not extend the checkpoint {out / 'checkpoint'} publishes (size "
                        f"{published.size}, root {published.root.hex()[:16]}…): its first {published.size} "
                        f"entries hash to {at.hex()[:16]}… — a log rewritten or rolled back since (a fork); "
                        "`ledger verify` names what changed",
                        hint=hint,
                    )
            builder = TileBuilder()
            bundle: list[bytes] = []
            for seq, rec, leaf in self.repo.iter_records(conn, n):  # a record not bytes: chain-broken
                if rec is None:
                    raise LogFormatError("the log has entries without a log record: run `ledger migrate`")
                if seq != len(builder):
                    raise IntegrityError(f"the log skips from seq {len(builder) - 1} to {seq}")
                for t in builder.append(bytes.fromhex(leaf)):
                    put(f"tile/{t.level}/{tile_path(t.index)}", t.hashes)
                if hashlib.sha256(b"\x00" + rec).hexdigest() != leaf:  # never publish a record
                    raise record_leaf_error(seq)  # that is not the leaf in the tile beside it
                bundle.append(len(rec).to_bytes(2, "big") + rec)
                if len(bundle) == TILE_WIDTH:
                    put(f"tile/entries/{tile_path(seq // TILE_WIDTH)}", b"".join(bundle))
                    bundle = []
            if builder.root() != root:  # the stored tiles the root was read from are not the records'
                tree.check_roots()  # names the tile, where one disagrees with what is below it
                raise TileMismatchError(
                    f"the log's records do not give the root its stored hash tiles give at size {n}: the "
                    "database's hash tiles were edited behind the log's back; nothing is exported"
                )
        for level in range(builder.levels):
            part = builder.partial(level)
            if part:
                count = n >> (TILE_HEIGHT * level)
                width = len(part) // 32
                put(f"tile/{level}/{tile_path(count // TILE_WIDTH)}.p/{width}", part)
        if bundle:
            put(f"tile/entries/{tile_path(n // TILE_WIDTH)}.p/{len(bundle)}", b"".join(bundle))
        cp = self._sign(n, root)
        write_atomic(out / "checkpoint", cp.note.encode())
        return {"directory": str(out), "size": n, "root": root.hex(), "written": written + 1, "kept": kept}

    def _published_in(self, out: Path) -> Checkpoint | None:
        """The checkpoint a tiles folder publishes (None when it holds none): it must be this log's,
        signed by its key (``IntegrityError`` otherwise)."""
        try:
            note = (out / "checkpoint").read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as e:
            raise IntegrityError(f"cannot read the checkpoint {out / 'checkpoint'} publishes: {e}") from e
        try:
            return parse_checkpoint(note, self.note_key_name, self.log_public_key())
        except ProofError as e:
            raise IntegrityError(
                f"{out / 'checkpoint'} is not a checkpoint of this log ({self.cfg.origin}) signed by its "
                f"key: {e.message}",
                hint="export to another folder (it publishes another log), or pass --force to replace it",
            ) from e

    def receipt(self, entry: LoggedEntry) -> Receipt:
        """The log's signed receipt for an appended (or re-sent) entry: id, index, logged_at, origin.
        ``entry`` is one ``append`` answered: written by the sequencer, or a re-sent entry's row checked
        against its leaf there (``_committed_entry``) — never a row read unchecked. Signed only while the
        log extends its anchors (the checkpoint the home holds, the newest one the database stores): the
        sequencer checked them in the transaction that appended (or found) the entry; otherwise they are
        checked here (``_refuse_fork``)."""
        try:  # what the home holds is the home's to answer for, never the entry's (``_raise_home_fault``)
            held = self.held()
            memo = self._extends
            if not (memo is not None and memo[:2] == _held_key(held) and entry.seq < memo[2]):
                with self.repo.read(snapshot=True) as conn:  # not one the sequencer just checked: check now
                    self._refuse_fork(conn, held)
        except LedgerError as e:
            _raise_home_fault(e)
        record = LogRecord(entry.seq, entry.logged_at, entry.entry_id, entry.kind, entry.signer)
        return sign_receipt(self.cfg.origin, record, self._log_signing_key(), key_name=self.note_key_name)

    def keep_receipts(self, receipts: Sequence[Receipt | dict[str, Any]]) -> None:
        """Keep receipts in this home (``ledger record`` and collectors; the spool's from ``ledger push``).
        Each is of an entry the log holds already: a receipt that could not be kept (disk full) is
        ``StorageError`` naming those entries — logged, their receipts not kept (``HOME/receipts.jsonl``
        holds whole lines only) — never a silent success."""
        docs = [r.to_json() if isinstance(r, Receipt) else dict(r) for r in receipts]
        try:
            self.home.keep_receipts(docs)
        except StorageError as e:
            logged = ", ".join(f"{d.get('entry_id')} (index {d.get('index')})" for d in docs[:5])
            more = f" and {len(docs) - 5} more" if len(docs) > 5 else ""
            raise StorageError(
                f"the log holds the entries {logged}{more}, but their receipts were not kept: {e.message}",
                hint="the entries stand (`ledger show ID`, `ledger proof ID`); free space or raise the file "
                "size limit before the next append — `ledger audit` checks the receipts that were kept",
            ) from e

    def audit(
        self,
        receipts: Sequence[dict[str, Any]] | None = None,
        *,
        fetch: Callable[[str], dict[str, Any] | None] | None = None,
        public_key: str | None = None,
        origin: str | None = None,
    ) -> AuditReport:
        """Check the kept receipts of one log (default: this home's own) against it: each received entry
        must still stand where and as its receipt says, under the log's current signed checkpoint.

        ``fetch(entry_id)`` returns the log's inclusion proof document, or None when it has no such entry
        (default: this ledger's own); ``public_key``: the log key (base64 or C2SP verifier key)."""

        def local(entry_id: str) -> dict[str, Any] | None:
            try:
                return self.inclusion(entry_id, anchor=False)  # the held checkpoint: checked below, once
            except EntryNotFoundError:
                return None

        def columns(entry_id: str) -> LogRecord | None:
            """The record as the log's readers see it: the row's own columns (``log``, ``show``, the
            policy and the keyring select and judge rows by them) — never the envelope's kind and signer,
            which a rewritten ``kind`` column (a key.revoke renamed) leaves as they were."""
            row = self.repo.by_id(entry_id)
            if row is None:
                return None
            return LogRecord(
                int(row.seq), str(row.logged_at), str(row.entry_id), str(row.kind), str(row.signer)
            )

        own = fetch is None and (origin is None or origin == self.cfg.origin)
        kept_since = self.cfg.receipts_from
        report = audit_receipts(
            self.home.receipts() if receipts is None else receipts,
            public_key or self.log_public_key().b64,
            fetch or local,
            origin=origin or self.cfg.origin,
            columns=columns if own else None,
            # a home keeps the receipt of every entry it appends to its own log, its genesis first
            # (`ledger init`): none kept of a log that holds entries is a file removed, never "ok" — but
            # of entries logged before the home kept receipts (``receipts_from``: a home upgraded from log
            # format 1, whose ledger kept none) none is expected
            expected=_OWN_RECEIPTS if own and receipts is None and self.size() > kept_since else None,
        )
        if own:  # the home's own log: also against the checkpoint the home holds, outside the database
            held: Checkpoint | None = None
            try:
                held = self.held()
                problems = check_held(self.repo, held) if held is not None else []
            except LedgerError as e:
                problems = [VerifyProblem(e.code, e.message)]
            report.held_checkpoint = held.size if held is not None else None
            report.problems.extend(
                {"entry_id": None, "index": None, "code": str(p.code), "message": p.message} for p in problems
            )
        return report

    def inclusion(self, id_or_prefix: str, *, size: int | None = None, anchor: bool = True) -> dict[str, Any]:
        """An inclusion proof of the entry's log record, with the record and envelope it names (read only).
        Its checkpoint is signed under the log's key: refused for a log that no longer extends the held
        checkpoint, or that lost an entry a kept receipt names (``_refuse_fork``), unless ``anchor`` is
        False — the local audit only, which checks the log against the held checkpoint itself (named once)
        and each kept receipt all the same: its proof is not handed out, and never moves the checkpoint
        the home holds (a read that judges a log does not vouch for it)."""
        entry = self.get(id_or_prefix)
        held = self.held() if anchor else None
        with self.repo.read(snapshot=True) as conn:
            tree = self._tree_at(conn, size, checked=anchor)  # the audit judges each leaf it is given
            if anchor:  # the proof carries a checkpoint signed under the log key
                self._refuse_fork(conn, held, tree)
                # and the row's record and envelope: read in this snapshot, as its leaf commits them
                row = self.repo.by_ids(conn, [entry.entry_id]).get(entry.entry_id)
                if row is None:
                    raise EntryNotFoundError(f"no entry with id {entry.entry_id}")
                entry = _chained_entry(self.repo, conn, row)
                record = record_bytes(entry.seq, row.record)
            n = tree.size
            if entry.seq >= n:
                raise InputError(f"entry {entry.entry_id} (seq {entry.seq}) is not in a tree of size {n}")
            root = tree.root()
            proof = tree.inclusion_proof(entry.seq)
            leaf = tree.leaf(entry.seq)
            if anchor:  # the record must be the leaf the tree proves (a stored full tile's, or its row's)
                if record is None or hashlib.sha256(b"\x00" + record).digest() != leaf:
                    raise self._bundle_leaf_error(conn, entry.seq, record)
            else:  # the local audit judges what it is given (``audit``)
                record = self.repo.record_at(conn, entry.seq)
        cp = self._sign(n, root, hold=anchor)  # an audit's proof never moves the held checkpoint
        return {
            "type": "inclusion",
            "entry_id": entry.entry_id,
            "leaf_index": entry.seq,
            "tree_size": cp.size,
            "leaf_hash": leaf.hex(),
            "record": base64.b64encode(record).decode() if record is not None else None,
            "envelope": entry.envelope.decode(),
            "hashes": [h.hex() for h in proof],
            "checkpoint": self.cosigned(cp).note,  # with the witnesses' cosignatures kept for it
            "log_key_name": self.note_key_name,
        }

    def consistency(self, old_size: int, new_size: int | None = None) -> dict[str, Any]:
        """A consistency proof between two sizes, with both signed checkpoints (read only)."""
        for what, given in (("old size", old_size), ("new size", new_size)):
            if given is not None and given < 0:
                raise InputError(f"{what} {given}: a tree size is a non-negative integer")
        with self.repo.read(snapshot=True) as conn:
            tree = self._tree_at(conn, new_size)
            new = tree.size
            if not 0 <= old_size <= new:
                current = self.repo.size(conn)
                if old_size <= current:
                    raise InputError(f"consistency needs old size ({old_size}) <= new size ({new})")
                raise InputError(f"the log has {current} entries; no checkpoint at size {old_size}")
            self._refuse_fork(conn, self.held(), tree)  # both checkpoints are signed under the log key
            proof = tree.consistency_proof(old_size) if old_size else []
            roots = tree.root(old_size), tree.root()
        old_cp, new_cp = self._sign(old_size, roots[0]), self._sign(new, roots[1])
        return {
            "type": "consistency",
            "old_size": old_cp.size,
            "new_size": new_cp.size,
            "hashes": [h.hex() for h in proof],
            "old_checkpoint": self.cosigned(old_cp).note,
            "new_checkpoint": self.cosigned(new_cp).note,
            "log_key_name": self.note_key_name,
        }

    # --- verification ----------------------------------------------------------------------------

    def held_checkpoint(self, note: str) -> Checkpoint:
        """A checkpoint of this log someone holds (its signed note), its signature checked with the log
        key under the origin; ``ProofError`` for a note of another log or key, or one that does not verify."""
        cp = parse_checkpoint(note, self.note_key_name, self.log_public_key())
        if cp.origin != self.cfg.origin:
            raise ProofError(f"the checkpoint is of the log {cp.origin!r}, not {self.cfg.origin!r}")
        return cp

    def verify(
        self,
        *,
        artifacts: bool = True,
        workers: int | None = None,
        since: str | Checkpoint | None = None,
        progress: Callable[[int], object] | None = None,
        anchor: bool = True,
    ) -> VerifyReport:
        """Verify the log (``ledger.verify``); ``since``: a held signed checkpoint (note text or parsed) to
        verify incrementally from; ``progress(n)``: n more entries checked (the CLI's bar). ``anchor``:
        also against the checkpoint the home holds (``HOME/checkpoint``): a log smaller than it, or one
        whose first entries are not the ones it commits, is a ``log-inconsistent`` problem."""
        held = self.held_checkpoint(since) if isinstance(since, str) else since
        anchor_problem: VerifyProblem | None = None
        home_cp: Checkpoint | None = None
        if anchor:
            try:
                home_cp = self.held()
            except LedgerError as e:
                anchor_problem = VerifyProblem(e.code, e.message)
        report = verify_log(
            self.repo,
            self.store,
            database_url=self.database_url,
            root_key_id=self.cfg.root_key_id,
            origin=self.cfg.origin,
            log_key_name=self.cfg.log_key,
            log_public_key=self.log_public_key(),
            artifacts=artifacts,
            workers=workers,
            progress=progress,
            since=held,
            anchor=home_cp,
        )
        if anchor_problem is not None:
            report.problems.insert(0, anchor_problem)
        if anchor:
            report.problems.extend(self._receipts_problem(home_cp))
        return report

    def _receipts_problem(self, held: Checkpoint | None) -> list[VerifyProblem]:
        """``verify``'s problem with the receipts this home kept of its own log past ``held`` (the
        checkpoint it holds): the first one the log no longer stands by (``_receipt_fault``), the refusal
        every signature and append meets. A row whose record no longer hashes to its leaf hash, or has no
        record, is left to ``verify_log``, which names each such row itself."""
        try:
            fault = self._receipt_fault(0 if held is None else held.size)
        except (ChainBrokenError, LogFormatError):
            return []
        except LedgerError as e:
            return [VerifyProblem(e.code, e.message)]
        return [] if fault is None else [VerifyProblem(fault[0].code, fault[0].message, fault[1], fault[2])]

    def iter_rows(self, batch: int = 5000) -> Iterator[Any]:
        return self.repo.iter_rows(batch)


@dataclass(frozen=True)
class _Kept:
    """A receipt this home kept of its own log (``Ledger._kept_since``): its entry id, and what it says
    the log signed (``receipt_claim``), or why it says nothing that can judge the log (``fault``)."""

    entry_id: str
    claim: ReceiptClaim | None
    fault: str = ""


def _held_key(held: Checkpoint | None) -> tuple[int, bytes]:
    """The held checkpoint's (size, root) as ``Ledger._extends`` keys what it proved; (-1, b"") where the
    home holds none (the log was checked against the checkpoint the database stores, if any)."""
    return (-1, b"") if held is None else (held.size, held.root)


def _at(row: Any, seq: int) -> bool:
    """Whether ``row`` is an entry row (not None) at ``seq``."""
    return row is not None and int(row.seq) == seq


_OWN_RECEIPTS = (
    "this home keeps the receipt of every entry it appends to its own log (`ledger init` kept the first)"
)


def _home_fault(e: LedgerError) -> LedgerError:
    """``e``, met reading the home's own state, as the home's fault (``_raise_home_fault``)."""
    if isinstance(e, HOME_FAULTS) or e.category is Category.SYSTEM:
        return e
    return HomeFaultError.wrapping(e)


def _log_state_fault(e: LedgerError) -> LedgerError:
    """``e``, met reading the log's own rows for an append, as the home's fault (``_home_fault``): a row
    not as the log committed it (a plain ``IntegrityError``: ``ledger.reads.uncommitted_error``,
    ``gap_error`` …) is ``ChainBrokenError`` with its message — still an integrity error to a library
    caller, HTTP 500 to a client, which keeps the entry spooled. A ``ConfigError`` (this home's own
    settings: a mistyped ``LEDGER_CHECKPOINT_INTERVAL``) stays what it is (bad-config names the setting)."""
    if type(e) is IntegrityError:
        return ChainBrokenError(e.message, hint=e.hint_text or None)
    if isinstance(e, ConfigError):
        return e
    return _home_fault(e)


_WALK_PAGE = 5000  # rows a chain walk reads at a time (``Ledger._walk``)


def _chain_rows(conn: sa.Connection, lo: int, hi: int) -> list[tuple[Any, ...]]:
    """Up to ``_WALK_PAGE`` rows from seq ``lo`` below ``hi``, in seq order, as ``chain_walk`` takes them:
    (seq, entry_id, kind, signer, logged_at, record bytes, leaf_hash, prev_hash, chain_hash)."""
    e = T_ENTRIES.c
    cols = (e.seq, e.entry_id, e.kind, e.signer, e.logged_at, e.record, e.leaf_hash, e.prev_hash)
    q = sa.select(*cols, e.chain_hash).where(e.seq >= lo, e.seq < hi).order_by(e.seq).limit(_WALK_PAGE)
    return [(r[0], r[1], r[2], r[3], r[4], record_bytes(int(r[0]), r[5]), *r[6:]) for r in conn.execute(q)]


def _unanchored_leaf_error(seq: int, size: int) -> ChainBrokenError:
    """The refusal of the row at ``seq``, under the checkpoint of ``size`` the log is anchored to, whose
    leaf (its record's, its columns' — rewritten together) is not the one the checkpoint's tree holds
    there (the stored tile its root was proved from)."""
    return ChainBrokenError(
        f"the log's entry at seq {seq} is not as the log committed it: its record and leaf hash are not the "
        f"leaf the checkpoint of size {size} signs there (stored tile 0/{tile_path(seq // TILE_WIDTH)}): its "
        "row was rewritten behind the log's back, its record and leaf hash with it; "
        f"{SIGNED_CONSEQUENCE}",
        hint="`ledger verify` names every altered row; restore the database from a backup the checkpoint "
        "this home holds vouches for",
    )


def _walk_gap_error(seq: int, end: int) -> ChainBrokenError:
    """The refusal of a chain walk (``Ledger._walk``) that finds no row at ``seq``, below ``end``."""
    return ChainBrokenError(
        f"the log has no entry at seq {seq}, below the {end} entries its hash chain is walked to: its row "
        "was deleted or moved behind the log's back; nothing is signed under the log's key",
        hint="`ledger verify` names every altered row; restore the database from a backup the checkpoint "
        "this home holds vouches for",
    )


def _committed_entry(row: Any) -> LoggedEntry:
    """The entry of a ``log_entries`` row the log key signs or a response carries, checked against its
    leaf first (``ledger.reads.committed_row``: ``ChainBrokenError``, a home fault, for a row edited
    behind the log's back; ``HomeFaultError`` wrapping what else it met: a row without a record)."""
    seq = int(row.seq)
    try:
        committed_row(row, record_bytes(seq, row.record), envelope_bytes(seq, row.envelope))
    except LedgerError as e:
        _raise_home_fault(e)
    return entry_from_row(row)


def _chained_entry(repo: LogRepo, conn: sa.Connection, row: Any) -> LoggedEntry:
    """``_committed_entry``, and the row's place in the log's hash chain in the snapshot ``conn`` reads
    (``ledger.reads.chain_linked``: its own link, its predecessor's chain hash, the next row's link to
    it): a row rewritten consistently by itself past the last checkpoint (its log time, record and leaf
    hash together) is ``ChainBrokenError`` naming it, a home fault — never answered as a duplicate or
    receipted. Three small reads (two rows' chain columns and the size), only for a re-sent entry or a
    proof's."""
    entry = _committed_entry(row)
    seq = int(row.seq)
    try:
        before = GENESIS_PREV if seq == 0 else repo.chain_at(conn, seq - 1)
        chain_linked(row, before, repo.row_at(conn, seq + 1), repo.size(conn))
    except LedgerError as e:
        _raise_home_fault(e)
    return entry


def _raise_home_fault(e: LedgerError) -> NoReturn:
    """Raise an error met reading the home's own state for an append or its receipt (the held checkpoint,
    the kept receipts, the log's rows) as the home's fault, never the entry's: ``e`` itself where it names
    such a fault already (``HOME_FAULTS``) or is a system one (storage, database), else ``HomeFaultError``
    wrapping it (a ``proof-invalid`` HOME/checkpoint, a ``bad-config`` receipts.jsonl, ``log-format``
    rows)."""
    fault = _home_fault(e)
    if fault is e:
        raise e
    raise fault from e


def record_leaf_error(seq: int) -> ChainBrokenError:
    """The refusal to serve or publish the log record at ``seq``: it does not hash to the leaf the tiles
    (and checkpoints) commit — its ``record`` column was rewritten behind the log's back."""
    return ChainBrokenError(
        f"the stored log record at seq {seq} does not hash to its Merkle leaf (SHA-256(0x00 || record)): "
        "its record was rewritten behind the log's back; nothing that would contradict the tiles is "
        "served or published",
        hint="run `ledger verify` on the log's home; restore the database from a backup the checkpoint "
        "this home holds vouches for",
    )


def _too_large(size: int) -> str:
    return (
        f"entry envelope of {size} bytes exceeds {MAX_ENVELOPE_BYTES} bytes; "
        "attach large content as an artifact instead"
    )


def readable_artifact(name: str, path: Path) -> Path:
    """The path of an artifact to record, refused unless it is a readable regular file."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"artifact {name}: {p} is not a readable file")
    return p


def describe_artifact(
    name: str,
    path: Path,
    digest: Digest,
    size: int,
    sha256: str | None,
    media_type: str | None = None,
    *,
    by_reference: bool = False,
) -> ArtifactRef:
    """How an entry names an artifact: stored by digest, or by reference to its path."""
    return ArtifactRef(
        name=name,
        digest=str(digest),
        size=size,
        media_type=media_type or _guess_media_type(path),
        sha256=sha256,
        stored=not by_reference,
        path=str(path.resolve()) if by_reference else None,
    )


def _guess_media_type(path: Path) -> str:
    if path.suffix in (".log", ".txt", ".out", ".err"):
        return "text/plain"
    if path.suffix == ".json":
        return "application/json"
    mt, _ = mimetypes.guess_type(path.name)
    return mt or "application/octet-stream"


def open_ledger(home: str | os.PathLike[str] | None = None) -> Ledger:
    return Ledger.open(resolve_home(home))


def statement_digest(statement: dict[str, Any]) -> str:
    return blake3_hex(canonical_bytes(statement))
