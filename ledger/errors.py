"""Every error the ledger raises, grouped by origin, each with a stable kebab-case code.

This module imports nothing from the package. Adapters map ``LedgerError.category`` to an exit code
(CLI) or an HTTP status (API) in one place each.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "ArtifactCorruptError",
    "ArtifactMissingError",
    "ArtifactTooLargeError",
    "AuthError",
    "BatchTooLargeError",
    "CanonicalJsonError",
    "ChainBrokenError",
    "CollectorError",
    "ConfigError",
    "DanglingRefError",
    "EntryNotFoundError",
    "EnvelopeError",
    "ForbiddenError",
    "HomeNotInitialisedError",
    "InputError",
    "IntegrityError",
    "JsonTooDeepError",
    "KeyNotFoundError",
    "KeyRevokedError",
    "LedgerError",
    "NotAvailableError",
    "PolicyError",
    "ProofError",
    "RangeNotSatisfiableError",
    "RemoteUnavailableError",
    "RequestTooLargeError",
    "RoleError",
    "SchemaError",
    "SignatureError",
    "StorageError",
    "UnknownKindError",
    "UnknownSignerError",
]


class LedgerError(Exception):
    """Base of all ledger errors; ``code`` is stable, ``hint`` says what to do next."""

    code: ClassVar[str] = "ledger-error"
    category: ClassVar[str] = "system"
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
    category = "input"


class SchemaError(InputError):
    code = "schema-violation"
    hint = "check the payload against its kind's schema: `ledger kinds --json`"


class UnknownKindError(InputError):
    code = "unknown-kind"
    hint = "`ledger kinds` lists the known payload kinds"


class CanonicalJsonError(InputError):
    code = "non-canonical-json"


class JsonTooDeepError(CanonicalJsonError):
    """Well-formed JSON nested beyond the depth limit: refused as unprocessable (HTTP 422), not malformed."""

    code = "json-too-deep"


class EnvelopeError(InputError):
    code = "bad-envelope"


class ConfigError(InputError):
    code = "bad-config"


class PolicyError(InputError):
    code = "bad-policy"


class ArtifactTooLargeError(InputError):
    code = "artifact-too-large"
    category = "too-large"


class RequestTooLargeError(InputError):
    code = "request-too-large"
    category = "too-large"


class BatchTooLargeError(InputError):
    code = "batch-too-large"
    category = "too-large"
    hint = "split the batch"


class RangeNotSatisfiableError(InputError):
    code = "range-not-satisfiable"
    category = "range"


# --- not found ------------------------------------------------------------------------------------


class EntryNotFoundError(LedgerError):
    code = "entry-not-found"
    category = "not-found"


class KeyNotFoundError(LedgerError):
    code = "key-not-found"
    category = "not-found"
    hint = "`ledger keys list` shows enrolled keys; `ledger keys new NAME --role ROLE` makes one"


class HomeNotInitialisedError(LedgerError):
    code = "home-not-initialised"
    category = "input"
    hint = "run `ledger init` (or pass --home / set LEDGER_HOME)"


class ArtifactMissingError(LedgerError):
    code = "artifact-missing"
    category = "not-found"


# --- signature and trust ---------------------------------------------------------------------------


class SignatureError(LedgerError):
    code = "bad-signature"
    category = "trust"


class UnknownSignerError(SignatureError):
    code = "unknown-signer"
    hint = "enrol the key first: `ledger keys new NAME --role ROLE` or `ledger keys enrol`"


class KeyRevokedError(SignatureError):
    code = "key-revoked"


class RoleError(SignatureError):
    code = "wrong-role"


class AuthError(LedgerError):
    code = "unauthenticated"
    category = "auth"


class ForbiddenError(LedgerError):
    code = "forbidden"
    category = "forbidden"


# --- integrity ---------------------------------------------------------------------------------------


class IntegrityError(LedgerError):
    code = "integrity"
    category = "integrity"


class ArtifactCorruptError(IntegrityError):
    code = "artifact-corrupt"


class ChainBrokenError(IntegrityError):
    code = "chain-broken"


class DanglingRefError(IntegrityError):
    code = "dangling-ref"
    category = "input"
    hint = "a ref must name an entry already in the ledger"


class ProofError(IntegrityError):
    code = "proof-invalid"


# --- storage and collection --------------------------------------------------------------------------


class StorageError(LedgerError):
    code = "storage"
    category = "system"


class NotAvailableError(LedgerError):
    code = "not-available"
    category = "unavailable"


class RemoteUnavailableError(StorageError):
    code = "server-unreachable"
    hint = "entries are spooled in the home; `ledger push` delivers them later"


class CollectorError(LedgerError):
    code = "collector"
    category = "system"
