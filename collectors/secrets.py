"""Redaction of secrets in environments, command lines and logs, before anything is signed."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["REDACTED", "Redactor", "is_secret_name", "redact_command", "redact_env"]

REDACTED = "[REDACTED]"
_SECRET_NAME = re.compile(
    r"(TOKEN|SECRET|PASSW(OR)?D|PASSPHRASE|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIAL|AUTH|COOKIE|SESSION|"
    r"SIGNATURE|_PAT$|^PAT$|DSN|DATABASE_URL|CONN(ECTION)?_?STR)",
    re.IGNORECASE,
)
# Values that are secrets whatever variable or flag carries them.
_SECRET_VALUES = re.compile(
    r"\b(hf_[A-Za-z0-9]{30,}|sk-[A-Za-z0-9_-]{20,}|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,}|"
    r"AKIA[0-9A-Z]{16}|xox[abprs]-[A-Za-z0-9-]{10,}|glpat-[A-Za-z0-9_-]{20,})\b"
)
_BEARER = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{8,}")
_URL_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^:/@\s]+:)[^@\s/]+(@)")
_SECRET_FLAG = re.compile(
    r"^--?[a-z0-9-]*(token|secret|password|passwd|api-key|api_key|apikey|credential|auth)"
    r"[a-z0-9-]*$",
    re.IGNORECASE,
)


def is_secret_name(name: str) -> bool:
    return _SECRET_NAME.search(name) is not None


def _scrub(value: str) -> str:
    value = _SECRET_VALUES.sub(REDACTED, value)
    value = _BEARER.sub(lambda m: m.group(1) + REDACTED, value)
    return _URL_PASSWORD.sub(lambda m: m.group(1) + REDACTED + m.group(2), value)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """Copy of ``env`` with secret-named variables and secret-looking values redacted."""
    return {k: (REDACTED if is_secret_name(k) and v else _scrub(v)) for k, v in env.items()}


def redact_command(argv: Sequence[str]) -> list[str]:
    """Copy of a command line with the values of secret flags (``--api-key X``, ``--token=X``) redacted."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        flag, eq, _value = arg.partition("=")
        if _SECRET_FLAG.match(flag):
            if eq:
                out.append(f"{flag}={REDACTED}")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(_scrub(arg))
    return out


@dataclass
class Redactor:
    """Redacts known secret values (taken from an environment or command line) and secret-shaped text."""

    known: set[str] = field(default_factory=set)

    @classmethod
    def from_sources(cls, env: Mapping[str, str] | None = None, argv: Iterable[str] = ()) -> Redactor:
        known: set[str] = set()
        for k, v in (env or {}).items():
            if is_secret_name(k) and len(v) >= 6:
                known.add(v)
        args = list(argv)
        for i, arg in enumerate(args):
            flag, eq, value = arg.partition("=")
            if _SECRET_FLAG.match(flag):
                secret = value if eq else (args[i + 1] if i + 1 < len(args) else "")
                if len(secret) >= 6:
                    known.add(secret)
        return cls(known)

    def text(self, value: str) -> tuple[str, int]:
        """(redacted text, number of redactions)."""
        count = 0
        for secret in sorted(self.known, key=len, reverse=True):
            n = value.count(secret)
            if n:
                value = value.replace(secret, REDACTED)
                count += n
        scrubbed = _scrub(value)
        if scrubbed != value:
            count += max(1, scrubbed.count(REDACTED) - value.count(REDACTED))
        return scrubbed, count
