"""Every error the ledger raises, grouped by origin, each with a stable kebab-case code.

This module imports nothing from the package. Adapters map ``LedgerError.category`` (a ``Category``) to an
exit code (CLI) or an HTTP status (API) in one place each. A class's category is its parent's, or one that
refines it (``REFINES``: a too-large request is still bad input); tests/test_errors.py checks that, and that
every code is unique and kebab-case.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any, ClassVar

__all__ = [
    "HOME_FAULTS",
    "REFINES",
    "ArtifactCorruptError",
    "ArtifactMissingError",
    "ArtifactTooLargeError",
    "AuthError",
    "BatchTooLargeError",
    "BundleError",
    "CanonicalJsonError",
    "Category",
    "ChainBrokenError",
    "CollectorError",
    "ConfigError",
    "CorpusDigestError",
    "CosignatureQuorumError",
    "DanglingRefError",
    "DatabaseNotInitialisedError",
    "DatabaseUnreachableError",
    "EntryNotFoundError",
    "EnvelopeError",
    "ForbiddenError",
    "HomeFaultError",
    "HomeNotInitialisedError",
    "InputError",
    "IntegrityError",
    "JsonTooDeepError",
    "KeyAlreadyEnrolledError",
    "KeyNotFoundError",
    "KeyRevokedError",
    "LedgerError",
    "LogClockAheadError",
    "LogFormatError",
    "LogInconsistentError",
    "LogOrderError",
    "LogTimeBackwardsError",
    "NotAvailableError",
    "PolicyError",
    "PortInUseError",
    "ProofError",
    "ProofUncheckedEntryError",
    "RangeNotSatisfiableError",
    "ReceiptForkError",
    "ReceiptMismatchError",
    "RemoteUnavailableError",
    "RequestTooLargeError",
    "RoleError",
    "SchemaError",
    "SignatureError",
    "StorageError",
    "TileMismatchError",
    "UnknownKindError",
    "UnknownSignerError",
    "UntrustedRootError",
    "more_problems",
    "validation_problem",
]


class Category(StrEnum):
    """What kind of failure an error is: the adapters' exit codes and HTTP statuses follow it."""

    INPUT = "input"  # the caller gave something malformed or inconsistent
    TOO_LARGE = "too-large"
    RANGE = "range"
    NOT_FOUND = "not-found"
    TRUST = "trust"  # a signature or a key the ledger does not trust for this
    AUTH = "auth"
    FORBIDDEN = "forbidden"
    INTEGRITY = "integrity"  # stored or sent bytes do not match what they claim
    UNAVAILABLE = "unavailable"
    SYSTEM = "system"  # storage, database, collection


# Categories that narrow another: their classes derive from that category's classes.
REFINES: dict[Category, Category] = {Category.TOO_LARGE: Category.INPUT, Category.RANGE: Category.INPUT}


class LedgerError(Exception):
    """Base of all ledger errors; ``code`` is stable, ``hint`` says what to do next."""

    code: ClassVar[str] = "ledger-error"
    category: ClassVar[Category] = Category.SYSTEM
    hint: ClassVar[str] = ""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if hint is not None:
            self.hint_text = hint
        else:
            self.hint_text = type(self).hint

    def one_line(self) -> str:
        """``error[code]: message (hint)`` on one line, for terminals and logs."""
        text = f"error[{self.code}]: {self.message}"
        if self.hint_text:
            text += f" (hint: {self.hint_text})"
        return text.replace("\n", " ")

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message, "hint": self.hint_text}


# --- input: the caller gave something malformed --------------------------------------------------


class InputError(LedgerError):
    code = "bad-input"
    category = Category.INPUT


class SchemaError(InputError):
    code = "schema-violation"
    hint = "check the payload against its kind's schema: `ledger kinds --json`"


class UntrustedRootError(SchemaError):
    """The first entry is not the home's root key enrolling itself as an admin."""

    code = "untrusted-root"


class DanglingRefError(InputError):
    code = "dangling-ref"
    hint = "a ref must name an entry already in the ledger"


class UnknownKindError(InputError):
    code = "unknown-kind"
    hint = "`ledger kinds` lists the known payload kinds"


class CanonicalJsonError(InputError):
    code = "non-canonical-json"


class JsonTooDeepError(CanonicalJsonError):
    """Well-formed JSON nested beyond the depth limit: refused as unprocessable (HTTP 422), not malformed."""

    code = "json-too-deep"


class LogTimeBackwardsError(InputError):
    """An append given a log time earlier than the head's ``logged_at``: the log's clock never runs back,
    so revocation and validity (judged at ``logged_at``) are judged in log order."""

    code = "logged-at-before-head"
    hint = "append in time order: give no time (the log's clock) or one not before the newest entry's"


class EnvelopeError(InputError):
    code = "bad-envelope"


class ConfigError(InputError):
    code = "bad-config"


class PolicyError(InputError):
    code = "bad-policy"


class BundleError(InputError):
    """A reviewer bundle that cannot be read at all (not a ZIP, no manifest, another format)."""

    code = "bad-bundle"


class ArtifactTooLargeError(InputError):
    code = "artifact-too-large"
    category = Category.TOO_LARGE


class RequestTooLargeError(InputError):
    code = "request-too-large"
    category = Category.TOO_LARGE


class BatchTooLargeError(InputError):
    code = "batch-too-large"
    category = Category.TOO_LARGE
    hint = "split the batch"


class RangeNotSatisfiableError(InputError):
    code = "range-not-satisfiable"
    category = Category.RANGE


# --- not found ------------------------------------------------------------------------------------


class EntryNotFoundError(LedgerError):
    code = "entry-not-found"
    category = Category.NOT_FOUND


class KeyNotFoundError(LedgerError):
    code = "key-not-found"
    category = Category.NOT_FOUND
    hint = "`ledger keys list` shows enrolled keys; `ledger keys new NAME --role ROLE` makes one"


class KeyAlreadyEnrolledError(InputError):
    """A ``key.enrol`` names a public key the keyring already holds (under any name): a key is enrolled once;
    a new role is a grant, a new name a new key. Bad input, not a schema problem (the payload is well formed);
    HTTP 409, it conflicts with the ledger's state."""

    code = "key-already-enrolled"
    hint = (
        "`ledger keys list` shows the enrolled keys and their names; give the key a role with "
        "`ledger keys grant NAME --role ROLE`, or enrol a new key"
    )


class HomeNotInitialisedError(InputError):
    code = "home-not-initialised"
    hint = "run `ledger init` (or pass --home / set LEDGER_HOME)"


class DatabaseNotInitialisedError(HomeNotInitialisedError):
    """The database a home or --database-url names holds no ledger schema (never migrated)."""

    code = "database-not-initialised"
    hint = (
        "`ledger init --database-url URL` makes a ledger's database; `ledger migrate` upgrades an older one"
    )


class ArtifactMissingError(LedgerError):
    code = "artifact-missing"
    category = Category.NOT_FOUND


# --- signature and trust ---------------------------------------------------------------------------


class SignatureError(LedgerError):
    code = "bad-signature"
    category = Category.TRUST


class UnknownSignerError(SignatureError):
    code = "unknown-signer"
    hint = "enrol the key first: `ledger keys new NAME --role ROLE` or `ledger keys enrol`"


class KeyRevokedError(SignatureError):
    code = "key-revoked"


class RoleError(SignatureError):
    code = "wrong-role"


class AuthError(LedgerError):
    code = "unauthenticated"
    category = Category.AUTH


class ForbiddenError(LedgerError):
    code = "forbidden"
    category = Category.FORBIDDEN


# --- integrity ---------------------------------------------------------------------------------------


class IntegrityError(LedgerError):
    code = "integrity"
    category = Category.INTEGRITY


class CorpusDigestError(IntegrityError):
    """A benchmark or semantic corpus file's bytes are not the ones the campaign pinned."""

    code = "corpus-digest-mismatch"
    hint = "the campaign pins the corpus by digest: restore the pinned file or pin the new digest on purpose"


class ArtifactCorruptError(IntegrityError):
    code = "artifact-corrupt"


class ChainBrokenError(IntegrityError):
    code = "chain-broken"


class TileMismatchError(ChainBrokenError):
    """A stored hash tile that is not the log's: its hashes do not hash to its stored root, are not the
    hashes below it (the leaves of its rows, the roots of the tiles of the level below), or are no tile
    (not 256 hashes of bytes). The one name of that finding, whoever meets it: a full ``ledger verify``,
    ``verify --from``, and every reader of the tiles (proofs, roots, ``/tile/``, entry bundles)."""

    code = "tile-mismatch"
    hint = (
        "run `ledger verify` on the log's home (it names the tile); restore the database from a backup the "
        "checkpoint this home holds vouches for"
    )

    def __init__(self, message: str, *, tile: tuple[int, int] | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.tile = tile  # (level, index) of the stored tile named, where one is


class ProofError(IntegrityError):
    code = "proof-invalid"


class ProofUncheckedEntryError(ProofError):
    """An inclusion proof that does not carry the entry (its envelope and log record) it would name."""

    code = "proof-entry-unchecked"


class CosignatureQuorumError(ProofError):
    """A checkpoint a trust policy judges: the log's signature or the quorum of witness cosignatures fails."""

    code = "cosignature-quorum"
    hint = "the checkpoint is not cosigned as the trust policy asks; the problems name the witnesses"


class LogOrderError(IntegrityError):
    """An entry logged earlier than its predecessor: ``logged_at`` never decreases along the log."""

    code = "logged-at-decreasing"


class LogClockAheadError(IntegrityError):
    """The head's log time is further ahead of the sequencer's clock than ``ledger.log.MAX_CLOCK_SKEW``: the
    log's clock never runs back, so every later entry would be committed at that time. Nothing is
    appended (a time rewritten behind the log's back, or a clock that was set wrong)."""

    code = "logged-at-ahead"
    hint = (
        "check this host's clock; `ledger verify` names an entry logged in the future — restore the "
        "database from a backup the checkpoint this home holds vouches for"
    )


class LogInconsistentError(IntegrityError):
    """The log no longer extends a checkpoint this home holds (entries lost or rewritten since): nothing
    of it is signed or published, a fork under the log's key."""

    code = "log-inconsistent"
    hint = "run `ledger verify`: it names what differs from the held checkpoint"


class ReceiptMismatchError(IntegrityError):
    """A receipt the log signed names an entry the log no longer holds as it was received."""

    code = "receipt-mismatch"


class ReceiptForkError(IntegrityError):
    """The log signed a receipt for an index this home already holds a receipt of, naming another entry
    (a server restored from a backup appended over what it had receipted): the two receipts, both signed
    under the log's key, are the proof of a fork. The new one is not kept; the entry stays spooled."""

    code = "receipt-fork"
    hint = (
        "the server's log forked (restored from an older backup?): keep the two receipts the message "
        "names for its operator; `ledger audit --server URL` names every receipt it no longer stands by"
    )


class LogFormatError(ConfigError):
    """The home's database is in an older log format (or none this code knows)."""

    code = "log-format"
    hint = "run `ledger migrate` (docs/LOG.md: upgrading a home)"


# --- storage and collection --------------------------------------------------------------------------


class StorageError(LedgerError):
    code = "storage"
    category = Category.SYSTEM


class DatabaseUnreachableError(StorageError):
    """The database server a home or --database-url names does not answer."""

    code = "database-unreachable"
    hint = "check --database-url (or database_url in HOME/ledger.toml) and that the server is up"


class NotAvailableError(LedgerError):
    code = "not-available"
    category = Category.UNAVAILABLE


class RemoteUnavailableError(StorageError):
    code = "server-unreachable"
    hint = "entries are spooled in the home; `ledger push` delivers them later"
    server_code: str | None = None  # the code of the server's own 5xx answer, where it gave one


class HomeFaultError(LedgerError):
    """The ledger's own home cannot take an append as it must: its held checkpoint (``HOME/checkpoint``) or
    kept receipts (``HOME/receipts.jsonl``) unreadable or not of its log, its database rows in an older log
    format. A fault of the home (a server's: HTTP 500), never of the entry that met it; it wraps the error
    met, whose code it keeps (``cause_code``) and names in its message."""

    code = "home-fault"
    category = Category.SYSTEM
    hint = "the server's (or home's) own files need its operator: `ledger verify` on that home names them"
    cause_code: str | None = None

    @classmethod
    def wrapping(cls, cause: LedgerError) -> HomeFaultError:
        err = cls(
            f"this ledger's home cannot take an append now: error[{cause.code}]: {cause.message}",
            hint=cause.hint_text or None,
        )
        err.cause_code = cause.code
        return err


# The errors that name a fault of the ledger's own state — its log (lost, rewritten, out of order), its log
# clock, its stored bytes, its home's files — never of the request that met it: a server answers them HTTP
# 500 (``ledger.api.errors``), and a collector keeps the entry it sent spooled (``collectors.remote``).
HOME_FAULTS: tuple[type[LedgerError], ...] = (
    ArtifactCorruptError,
    ChainBrokenError,
    TileMismatchError,
    LogInconsistentError,
    LogClockAheadError,
    LogOrderError,
    HomeFaultError,
)


class CollectorError(LedgerError):
    code = "collector"
    category = Category.SYSTEM


class PortInUseError(LedgerError):
    """A port is taken: the address ``ledger serve`` should listen on (or not this host's), or the port an
    engine ``ledger collect`` would start should listen on (the engine is not started, nothing of it is
    recorded)."""

    code = "port-in-use"
    category = Category.SYSTEM
    hint = "stop the other server or pass --port with a free port"  # `ledger serve`'s
    # `ledger collect run` / `launch` have no --port: the engine's port is the campaign file's
    ENGINE_HINT: ClassVar[str] = (
        "stop the other server, or give the engine a free port: `[engine] port` in the campaign file "
        "(0: a free port for each attempt) for `collect run`, the port of --ready-url for `collect launch`"
    )


# --- foreign validation errors, told at the boundary -------------------------------------------------------


def validation_problem(err: Mapping[str, Any], *, unknown: str = "unknown key") -> str:
    """One problem of a pydantic ``ValidationError.errors()``, named by its place: ``unknown key 'x'``,
    ``x: required``, or ``x: <message>``."""
    loc = ".".join(str(p) for p in err.get("loc", ())) or "(root)"
    if err.get("type") == "extra_forbidden":
        return f"{unknown} {loc!r}"
    if err.get("type") == "missing":
        return f"{loc}: required"
    return f"{loc}: {err.get('msg')}"


def more_problems(
    errors: Sequence[Mapping[str, Any]], *, unknown: str = "unknown key", limit: int = 3
) -> str:
    """`` (also: P2; P3 …)`` for the problems after the first (the caller names that one in its own words),
    ``limit`` of them and a count of the rest; ``""`` when there is one: a file with a missing key and a
    misspelled one is told both at once."""
    rest = list(errors[1:])
    if not rest:
        return ""
    shown = "; ".join(validation_problem(e, unknown=unknown) for e in rest[:limit])
    extra = f"; +{len(rest) - limit} more" if len(rest) > limit else ""
    return f" (also: {shown}{extra})"
