"""Frozen corpora: JSONL files pinned by their BLAKE3 digest, read from the same bytes that were hashed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger.canonical import parse_json
from ledger.errors import ConfigError, CorpusDigestError, LedgerError
from ledger.hashing import blake3_hex, parse_digest

__all__ = ["CorpusDigestError", "PinnedFile", "corpus_digest", "read_pinned_jsonl"]

_MAX_CORPUS_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class PinnedFile:
    """A corpus file's digest and its JSON rows, each with the line it came from."""

    path: Path
    digest: str  # blake3:<hex> of the exact bytes parsed
    rows: tuple[tuple[int, dict[str, Any]], ...]


def _read_bytes(path: Path) -> bytes:
    try:
        size = path.stat().st_size
        if size > _MAX_CORPUS_BYTES:
            raise ConfigError(f"{path}: corpus is {size} bytes, more than {_MAX_CORPUS_BYTES}")
        return path.read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read corpus {path}: {e.strerror or e}") from e


def corpus_digest(path: Path) -> str:
    """``blake3:<hex>`` of a corpus file's bytes (what a campaign pins)."""
    return f"blake3:{blake3_hex(_read_bytes(path))}"


def read_pinned_jsonl(path: Path, expected_digest: str) -> PinnedFile:
    """Hash the file, refuse it unless it is the pinned one, then parse those same bytes as JSONL.

    Blank lines are allowed; every other line must be one JSON object. Lines end at "\n" (or "\r\n")
    only, as JSON Lines says: U+2028, U+2029, U+0085 and the other breaks ``str.splitlines`` knows may stand
    raw inside a JSON string. Nothing is sent to an engine before this succeeds.
    """
    want = parse_digest(expected_digest)  # malformed pins are input errors, not mismatches
    data = _read_bytes(path)
    got = f"blake3:{blake3_hex(data)}"
    if got != str(want):
        raise CorpusDigestError(f"{path}: corpus digest is {got}, the campaign pins {want}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: corpus is not UTF-8 ({e.reason} at byte {e.start})") from e
    rows: list[tuple[int, dict[str, Any]]] = []
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.removesuffix("\r")
        if not line.strip(" \t"):  # JSON's whitespace; any other character makes the line an item
            continue
        try:  # strict JSON, as every record the ledger reads: no NaN/Infinity, no key twice
            value = parse_json(line)
        except LedgerError as e:
            raise ConfigError(f"{path}:{number}: not JSON: {e.message}") from e
        if not isinstance(value, dict):
            raise ConfigError(f"{path}:{number}: a corpus line must be a JSON object")
        rows.append((number, value))
    if not rows:
        raise ConfigError(f"{path}: the corpus has no items")
    return PinnedFile(path, got, tuple(rows))
