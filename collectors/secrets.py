"""Redaction of secrets in environments, command lines and logs, before anything is signed or stored.

Three layers, applied everywhere a string from the outside world reaches a payload or an artifact:

1. **Names.** A variable, flag or key whose name says it holds a secret (``*_TOKEN``, ``*_BEARER``,
   ``*_API_KEY``, ``PASSWORD``, ``--api-key``, ``'api_key':`` …) has its whole value redacted.
2. **Shapes.** Values that are secrets whatever carries them: provider tokens (``hf_…``, ``sk-…``,
   ``ghp_…``, AWS, Slack, GitLab, Google, JWTs), ``Bearer …`` / ``Authorization: …`` / ``Cookie: …``
   headers, the password of ``scheme://user:pass@host`` URLs, PEM private keys, and ``NAME=value`` /
   ``--secret-flag value`` / ``'secret_key': 'value'`` text where the name is a secret name.
3. **Known values.** Every secret found by (1) or (2) in the environment and command line handed to a
   process is remembered, so the process's output is scrubbed of it even when printed bare.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = [
    "REDACTED",
    "Redactor",
    "is_secret_flag",
    "is_secret_name",
    "redact_command",
    "redact_env",
    "scrub_text",
]

REDACTED = "[REDACTED]"
# Matched against a name with ``-`` and ``.`` turned into ``_`` (so flags and env names share one rule).
_SECRET_NAME = re.compile(
    r"TOKEN(?!IZER|S|_?(?:BUDGET|LIMIT|COUNT|LEN|NUM|IDS?)(?:$|_))"
    r"|SECRET|PASSW(?:OR)?D|PASSPHRASE|(?:^|_)PASS(?:$|_)|_PWD$|BEARER|JWT"
    r"|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|(?:^|_)KEY(?:S|_?ID)?$|SIGNING_?KEY|ENCRYPTION_?KEY"
    r"|CREDENTIAL|AUTH(?!OR(?:S|ITY|ITIES)?(?:$|_))|COOKIE|(?:^|_)SESSION(?:_?(?:ID|KEY))?$|SIGNATURE"
    r"|(?:^|_)PAT$|(?:^|_)DSN$|DATABASE_URL|CONN(?:ECTION)?_?STR",
    re.IGNORECASE,
)
# Values that are secrets whatever variable or flag carries them.
_SECRET_VALUES = re.compile(
    r"(?<![A-Za-z0-9_-])(?:hf_[A-Za-z0-9]{30,}|sk-[A-Za-z0-9_-]{20,}|sk_(?:live|test)_[A-Za-z0-9]{16,}"
    r"|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,}|(?:AKIA|ASIA)[0-9A-Z]{16}"
    r"|xox[abprs]-[A-Za-z0-9-]{10,}|glpat-[A-Za-z0-9_-]{20,}|AIza[0-9A-Za-z_-]{35}|npm_[A-Za-z0-9]{36}"
    r"|pypi-[A-Za-z0-9_-]{50,}|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]*)"
)
_PEM = re.compile(r"-----BEGIN ([A-Z0-9 ]*PRIVATE KEY)-----.*?(?:-----END \1-----|\Z)", re.DOTALL)
_BEARER = re.compile(r"(?i)(\bbearer\s+)[A-Za-z0-9._~+/=-]{6,}")
# "Authorization: Basic xyz", "Proxy-Authorization: token xyz", "X-Api-Key: xyz" (the bearer form is above)
_AUTH_HEADER = re.compile(
    r"(?i)(\b(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?(?:(?!bearer\b)[A-Za-z]+\s+)?)"
    r"(?!\[REDACTED\]|bearer\b)[^\s\"',;}\]]{4,}"
    r"|(\b(?:x-)?(?:api-key|auth-token|access-token)[\"']?\s*:\s*[\"']?)(?!\[REDACTED\])[^\s\"',;}\]]{4,}"
)
_COOKIE = re.compile(r"(?i)(\b(?:set-)?cookie[\"']?\s*:\s*[\"']?)(?!\[REDACTED\])[^\r\n\"']+")
_URL_PASSWORD = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]*:)(?!\[REDACTED\])[^@\s/]+(@)")
# NAME=value (env dumps, shell lines), name='value' / 'name': 'value' (Python reprs, JSON)
_ASSIGN = re.compile(
    r"(?<![A-Za-z0-9_.-])([A-Za-z_][A-Za-z0-9_.-]*)"
    r"(?:(\s*=(?!=)\s*)([\"']?)|([\"']\s*:\s*)([\"']))"
    r"([^\s\"',;}\])]+)"
)
# --secret-flag value / --secret-flag=value in free text
# (also the list form of a printed argv: ``'--api-key', 'value'``)
_FLAG_TEXT = re.compile(
    r"(?<![A-Za-z0-9_-])(--?[A-Za-z][A-Za-z0-9_-]*)([\"']?(?:=|,?\s+)[\"']?)([^\s\"'-][^\s\"']*)"
)
_NOT_SECRET = {"", "none", "null", "nil", "true", "false", "yes", "no", "0", "1", REDACTED.lower()}
_MIN_KNOWN = 6  # shorter strings are not remembered: replacing them everywhere would shred the logs


def is_secret_name(name: str) -> bool:
    """Whether a variable, key or flag name says that its value is a secret."""
    return _SECRET_NAME.search(name.strip("-").replace("-", "_").replace(".", "_")) is not None


def is_secret_flag(arg: str) -> bool:
    """Whether a command-line flag (``--api-key``, ``-token``, the part before ``=``) takes a secret."""
    return arg.startswith("-") and len(arg.lstrip("-")) > 0 and is_secret_name(arg)


def _secret_value(value: str) -> bool:
    # "${VAR}" is a reference to a secret in a campaign file, not the secret itself
    return value.lower() not in _NOT_SECRET and not value.startswith((REDACTED[:-1], "${"))


def _sub_assign(m: re.Match[str]) -> str:
    name, value = m.group(1), m.group(6)
    if not is_secret_name(name) or not _secret_value(value):
        return m.group(0)
    return m.group(0)[: m.start(6) - m.start(0)] + REDACTED


def _sub_flag(m: re.Match[str]) -> str:
    if not is_secret_flag(m.group(1)) or not _secret_value(m.group(3)):
        return m.group(0)
    return m.group(1) + m.group(2) + REDACTED


def _sub_header(m: re.Match[str]) -> str:
    return (m.group(1) if m.group(1) is not None else m.group(2)) + REDACTED


def scrub_text(value: str, *, names: bool = True) -> str:
    """``value`` with every secret-shaped part redacted (no knowledge of particular secrets needed).

    ``names=False`` skips the name-based rules (``NAME=value``, ``--flag value``), for text such as
    ``pip freeze`` output where ``google-auth==2.0`` is a package, not a credential.
    """
    if not value:
        return value
    value = _PEM.sub(lambda m: f"-----BEGIN {m.group(1)}-----{REDACTED}", value)
    value = _SECRET_VALUES.sub(REDACTED, value)
    value = _BEARER.sub(lambda m: m.group(1) + REDACTED, value)
    value = _AUTH_HEADER.sub(_sub_header, value)
    value = _COOKIE.sub(lambda m: m.group(1) + REDACTED, value)
    value = _URL_PASSWORD.sub(lambda m: m.group(1) + REDACTED + m.group(2), value)
    if not names:
        return value
    value = _ASSIGN.sub(_sub_assign, value)
    return _FLAG_TEXT.sub(_sub_flag, value)


# Kept for callers of the old private name.
_scrub = scrub_text


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """Copy of ``env`` with secret-named variables and secret-looking values redacted."""
    return {k: (REDACTED if is_secret_name(k) and v else scrub_text(v)) for k, v in env.items()}


def redact_command(argv: Sequence[str]) -> list[str]:
    """Copy of a command line with the values of secret flags (``--api-key X``, ``--token=X``) redacted."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            hide_next = False
            if not arg.startswith("-") or arg == "-":
                out.append(REDACTED)
                continue
        flag, eq, value = arg.partition("=")
        if is_secret_flag(flag):
            if eq:
                out.append(f"{flag}={REDACTED}" if value else arg)
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(scrub_text(arg))
    return out


def _secrets_in(value: str) -> set[str]:
    """The secret substrings of a free-form value (what :func:`scrub_text` would redact)."""
    found: set[str] = {m.group(0) for m in _SECRET_VALUES.finditer(value)}
    found |= {m.group(0)[len(m.group(1)) :] for m in _BEARER.finditer(value)}
    for m in _AUTH_HEADER.finditer(value):
        found.add(m.group(0)[len(m.group(1) if m.group(1) is not None else m.group(2)) :])
    found |= {m.group(0)[len(m.group(1)) :] for m in _COOKIE.finditer(value)}
    found |= {m.group(0)[len(m.group(1)) : -1] for m in _URL_PASSWORD.finditer(value)}
    for m in _ASSIGN.finditer(value):
        if is_secret_name(m.group(1)) and _secret_value(m.group(6)):
            found.add(m.group(6))
    return found


@dataclass
class Redactor:
    """Redacts known secret values (taken from an environment or command line) and secret-shaped text."""

    known: set[str] = field(default_factory=set)

    @classmethod
    def from_sources(cls, env: Mapping[str, str] | None = None, argv: Iterable[str] = ()) -> Redactor:
        known: set[str] = set()
        for k, v in (env or {}).items():
            if is_secret_name(k) and _secret_value(v):
                known.add(v)
            known |= _secrets_in(v)
        args = list(argv)
        for i, arg in enumerate(args):
            flag, eq, value = arg.partition("=")
            if is_secret_flag(flag):
                secret = value if eq else (args[i + 1] if i + 1 < len(args) else "")
                if secret and not (not eq and secret.startswith("-")) and _secret_value(secret):
                    known.add(secret)
            known |= _secrets_in(arg)
        known = {s.strip() for s in known}
        return cls({s for s in known if len(s) >= _MIN_KNOWN})

    def text(self, value: str) -> tuple[str, int]:
        """(redacted text, number of redactions)."""
        count = 0
        for secret in sorted(self.known, key=len, reverse=True):
            n = value.count(secret)
            if n:
                value = value.replace(secret, REDACTED)
                count += n
        scrubbed = scrub_text(value)
        if scrubbed != value:
            count += max(1, scrubbed.count(REDACTED) - value.count(REDACTED))
        return scrubbed, count
