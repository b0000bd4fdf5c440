"""Read-side look-ups the pages and the artifact route share (through the ``Ledger`` facade and its repo)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote

from ledger.reads import parse_subject_args
from ledger.service import Ledger

__all__ = [
    "ArtifactInfo",
    "artifact_info",
    "content_disposition",
    "is_text",
    "response_media_type",
    "subject_query",
]

_TEXT_TYPES = {
    "application/json",
    "application/x-ndjson",
    "application/jsonl",
    "application/toml",
    "application/x-yaml",
    "application/yaml",
    "application/xml",
}
# Recorded types a browser would run or render as a document of this origin: served as plain text.
_ACTIVE = re.compile(
    r"^(text/html|application/xhtml\+xml|image/svg\+xml|text/xml|application/javascript|"
    r"text/javascript|application/ecmascript)\b"
)
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._+-]")


@dataclass(frozen=True)
class ArtifactInfo:
    """How the first entry that names an artifact describes it."""

    name: str
    media_type: str
    entry_id: str
    size: int


def artifact_info(ledger: Ledger, digest: str) -> ArtifactInfo | None:
    for _seq, entry_id in ledger.entries_with_artifact(digest)[:1]:
        entry = ledger.get(entry_id)
        for a in entry.statement.artifacts:
            if a.digest == digest:
                return ArtifactInfo(a.name, a.media_type, entry.entry_id, a.size)
    return None


def is_text(media_type: str) -> bool:
    base = media_type.split(";", 1)[0].strip().lower()
    return base.startswith("text/") or base in _TEXT_TYPES or base.endswith(("+json", "+xml"))


def response_media_type(media_type: str) -> str:
    """The Content-Type to serve a recorded media type with: text as UTF-8, active documents as plain text."""
    base = media_type.split(";", 1)[0].strip().lower() or "application/octet-stream"
    if _ACTIVE.match(base):
        return "text/plain; charset=utf-8"
    if is_text(base):
        return f"{base}; charset=utf-8"
    return base


def content_disposition(name: str, inline: bool) -> str:
    """RFC 6266: an ASCII fallback ``filename`` and the exact UTF-8 ``filename*``."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1] or "artifact"
    ascii_name = _SAFE_NAME.sub("_", base)[:150] or "artifact"
    kind = "inline" if inline else "attachment"
    return f"{kind}; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(base, safe='')}"


def subject_query(items: list[str] | None) -> dict[str, str]:
    """``?subject=FIELD=VALUE`` (repeatable) as a subject, by the CLI's ``--subject`` rule
    (``ledger.reads.parse_subject_args``): a field given twice is refused, never answered for its last
    value."""
    return parse_subject_args(items or [], given_as="subject=")
