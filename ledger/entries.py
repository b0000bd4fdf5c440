"""The entry statement and its payload kinds: one typed, versioned model per kind."""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from ledger.errors import InputError, SchemaError, UnknownKindError, more_problems
from ledger.listing import SUBJECT_FIELDS

__all__ = [
    "JUDGED_SUBJECT_KINDS",
    "KIND_MODELS",
    "KIND_ROLES",
    "REVIEW_COMMIT",
    "ROLES",
    "STATEMENT_TYPE",
    "SUBJECT_REQUIRED",
    "ArtifactRef",
    "Collector",
    "EntryRef",
    "Statement",
    "check_ingest",
    "check_kind_filter",
    "format_time",
    "host_key",
    "judged_subject",
    "judged_subject_problem",
    "misspelled_subject_field",
    "misspelled_subject_words",
    "misspelling_of",
    "parse_statement",
    "parse_time",
    "parse_when",
    "same_subject_value",
    "subject_problem",
    "time_range_problem",
    "validate_payload",
]

STATEMENT_TYPE = "https://evidence-ledger.dev/entry/v1"
# exporter: signs attestations exported for other tools (`ledger export attestation`); it signs no entry kind
ROLES = ("collector", "reviewer", "operator", "admin", "exporter")
Role = Literal["collector", "reviewer", "operator", "admin", "exporter"]
_SUBJECT_KEY = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")
SUBJECT_VALUE_MAX = 512


def _code_point(c: str) -> str:
    """``U+200B ZERO WIDTH SPACE``: a character as a message names it (it may be invisible)."""
    return f"U+{ord(c):04X} {unicodedata.name(c, 'unnamed')}"


def subject_problem(key: Any, value: Any) -> str | None:
    """Why ``key=value`` is no subject field a new entry may name (None: it is one) — the one rule that
    ingest (``check_ingest``) and every reader of a subject (``ledger.reads.parse_subject_pairs``: the
    CLI's ``--subject``, the API's ``?subject=``, a routing check's body, a timeline's address) apply, so a
    subject asked about is the subject stored. A value is 1..512 characters of one line, with no white
    space around it, no control character, no invisible character anywhere in it (a format character,
    Unicode category Cf: U+200B ZERO WIDTH SPACE, U+FEFF, U+2060, U+00AD SOFT HYPHEN, U+200E, U+180E …;
    or a filler that shows nothing, ``_BLANK_LETTERS``), and written in Unicode normal form NFC: a value
    with a space or a U+200B after ``vllm-embed``, or ``café`` written decomposed (``e`` and U+0301),
    would be another subject than ``vllm-embed`` or ``café`` to the subject index while every person
    reading it sees one. A field that misspells a known subject field (``misspelled_subject_field``:
    ``hots``, ``hsot``, ``modle``, ``bakend``, ``back_end``) is refused too, naming both: the policy reads
    the known field, and would read the misspelled one as absent (audit 75 f2: a campaign whose engine
    entries named ``hots=gpu-box-2`` was no split of two hosts)."""
    if not isinstance(key, str) or not _SUBJECT_KEY.fullmatch(key):
        return f"subject field {key!r} must match {_SUBJECT_KEY.pattern}"
    known = misspelled_subject_field(key)
    if known is not None:
        return (
            f"subject field {misspelled_subject_words(key, known)}: an entry naming {key}= leaves "
            f"{known} out, and what it names would be read as absent (write {known}={value!s})"
        )
    if not isinstance(value, str):
        return f"subject {key} must be text, not {type(value).__name__}"
    if not value or len(value) > SUBJECT_VALUE_MAX:
        return f"subject {key} must be 1..{SUBJECT_VALUE_MAX} characters"
    if value != value.strip():
        return (
            f"subject {key}={value!r} has white space around its value: it would name another {key} than "
            f"{value.strip()!r} (write {key}={value.strip()})"
        )
    bad = next((c for c in value if unicodedata.category(c) == "Cc"), None)
    if bad is not None:
        return f"subject {key}={value!r} holds the control character {bad!r}: a value is one line of text"
    bad = next((c for c in value if unicodedata.category(c) in ("Zl", "Zp")), None)
    if bad is not None:
        return f"subject {key}={value!r} holds the line break {_code_point(bad)}: a value is one line of text"
    # format characters (Cf) and the letters that show nothing (``_BLANK_LETTERS``: fillers, a blank pattern)
    invisible = [c for c in value if unicodedata.category(c) == "Cf" or c in _BLANK_LETTERS]
    if invisible:
        seen = "".join(c for c in value if c not in invisible)
        fix = f"write {key}={seen}" if seen and subject_problem(key, seen) is None else "remove it"
        return (
            f"subject {key}={value!a} holds the invisible character {_code_point(invisible[0])}"
            f"{f' (and {len(invisible) - 1} more)' if len(invisible) > 1 else ''}: it would name another "
            f"{key} than the {seen!r} a reader sees ({fix})"
        )
    nfc = unicodedata.normalize("NFC", value)
    if value != nfc:
        return (
            f"subject {key}={value!a} is not in Unicode normal form NFC (it is written decomposed): it "
            f"would name another {key} than {nfc!r}, which reads the same (write {key}={nfc}, "
            "its NFC form)"
        )
    return None


_SPELLING = re.compile(r"[\s._-]+")


def _loose(key: str) -> str:
    """A key as misspellings of it compare: case, whitespace (leading, trailing, inner), ``.``, ``-`` and
    ``_`` left out (``Model-Revision``, ``model.revision``, ``"model_revision "`` are ``model_revision``)."""
    return _SPELLING.sub("", key).lower()


def _edits(a: str, b: str) -> int:
    """The edits that turn ``a`` into ``b``, each a letter dropped, added or replaced, or two adjacent letters
    swapped (optimal string alignment distance)."""
    before: list[int] = []
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        row = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            row[j] = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                row[j] = min(row[j], before[j - 2] + 1)
        before, prev = prev, row
    return prev[-1]


def _typos(key: str) -> int:
    """The edits (``_edits``, on the ``_loose`` form) a misspelling of the key ``key`` may be away from it:
    one for a key of up to 7 letters (``engine``, ``adapter``, ``host``: a second edit there makes another
    word — ``engineer``, ``hostel``), two for a longer one (``engine_verison``, ``model_revison`` and
    ``modl_revisoin`` are one slip or two of a long key). Compared keys lie five or more edits apart, so a key
    is a misspelling of one of them at most. Not every key within them is a misspelling (``misspelling_of``):
    a key that adds a word after a separator (``engine_id``, ``deployment_id``) and, for a key of up to 7
    letters, an edit that makes another word of a subject field (``_edge_word``: ``mode``, ``most``,
    ``ghost``) are other keys."""
    return 1 if len(_loose(key)) <= 7 else 2


def _plural(loose: str, known: str) -> bool:
    """Whether ``loose`` (a ``_loose`` form) is the plural of the ``_loose`` form ``known`` (``hosts``,
    ``models``, ``engine_versions``): one field names one thing, so a plural is a misspelling of the field
    (``misspelling_of``) whatever its length — never another field holding a list."""
    return loose in (known + "s", known + "es")


def _edge_word(a: str, b: str) -> bool:
    """Whether the ASCII ``_loose`` form ``a`` is another word than the short key ``b`` rather than a slip of
    it: one edit at its edge that makes words of the subject fields — a letter put before the first
    (``ghost`` for ``host``), the first letter replaced (``most``), the last letter dropped (``mode`` for
    ``model``). Every other edit is a slip (fail closed): a letter doubled (``hhost``, ``modell``) or dropped
    from a doubled pair, a letter appended (``hostr``; a plural is ``_plural``), the last letter replaced
    (``hosr``, ``modes``), the first dropped (``ost``), an edit inside, two letters swapped anywhere
    (``ohst``, ``hots``); and a key that is not ASCII (``һost`` with a Cyrillic ``һ``: a look-alike, not a
    word)."""
    if not (a.isascii() and b.isascii()) or len(b) < 2:
        return False
    if len(a) == len(b) + 1:  # a letter put before the first, not doubling it
        return a[1:] == b and a[0] != b[0]
    if len(a) + 1 == len(b):  # the last letter dropped, not one of a doubled pair
        return b[:-1] == a and b[-1] != a[-1]
    return len(a) == len(b) and a[1:] == b[1:] and a[0] != b[0]  # the first letter replaced


def _adds_a_word(spec_key: str, loose_known: str) -> bool:
    """Whether ``spec_key`` is the key whose ``_loose`` form is ``loose_known`` with a word added beside it,
    a separator (whitespace, ``.``, ``-``, ``_``) between them — ``deployment_id``, ``host_name``,
    ``model.id``, ``job-2``, ``primary_host``: another key, not a misspelling of it. A separator with no word
    beyond it (``host_``, ``_host``, ``host.``) adds nothing, and a key whose parts only spell the known key
    again (``back_end``, ``engine_verison`` for ``engine_version``) adds no word."""
    parts = [p for p in _SPELLING.split(spec_key) if p]
    return any(
        _loose("".join(parts[:i])) == loose_known or _loose("".join(parts[i:])) == loose_known
        for i in range(1, len(parts))
    )


def misspelling_of(spec_key: str, keys: Sequence[str], *, edge_words: bool = False) -> str | None:
    """The key of ``keys`` that ``spec_key`` (not one of them: a key of a job's approved spec, a field of an
    entry's subject) misspells, else None — the one reading of a misspelled key: a binding key
    (``ledger.policy.acceptance``) and a subject field (``misspelled_subject_field``) alike. A misspelling
    is the same but for case, whitespace, ``.``, ``-`` or ``_`` (``_loose``: ``back_end``, ``Host``,
    ``host_``), the key's plural (``_plural``: ``hosts``, ``engines``), or within ``_typos`` edits of it (the
    nearest; the first of ``keys`` among equals: ``hots``, ``hsot``, ``hst``, ``modle``, ``bakend``,
    ``engine_verison``) — except a key that adds a word after a separator (``_adds_a_word``:
    ``deployment_id``, ``host_name``, ``engine_id``: another key), and, with ``edge_words`` (subject fields,
    ``misspelled_subject_field``), the one edit at a key of up to 7 letters that makes another word of it
    (``_edge_word``: ``mode``, ``most``, ``ghost`` are not ``model`` and ``host``). A binding key has no such
    words (``engine``, ``adapter``): ``engin`` and ``adapte`` misspell them, as a key left unpinned would let
    any value pass. Fail closed: a doubled letter, a slip inside the key, two letters swapped and a
    look-alike letter that is not ASCII are misspellings."""
    if spec_key in keys:
        return None
    loose = _loose(spec_key)
    near: list[tuple[int, int, str]] = []
    for i, k in enumerate(keys):
        known = _loose(k)
        if loose == known or _plural(loose, known):
            near.append((0, i, k))
            continue
        if _adds_a_word(spec_key, known) or abs(len(loose) - len(known)) > _typos(k):
            continue
        d = _edits(loose, known)
        if d <= _typos(k) and not (edge_words and _typos(k) == 1 and _edge_word(loose, known)):
            near.append((d, i, k))
    return min(near)[2] if near else None


@functools.lru_cache(maxsize=4096)  # asked for every subject field of every entry ingested or read
def misspelled_subject_field(key: str) -> str | None:
    """The known subject field (``ledger.listing.SUBJECT_FIELDS``: the fields the policy judges — the route's
    backend, model and host, the campaign …) that the subject field ``key`` misspells (``misspelling_of``:
    ``hots``, ``hsot``, ``modle``, ``bakend``, ``back_end``, ``campain``, and the plurals ``hosts``,
    ``models``), else None (``key`` is a known field, or another field, recorded as it is: ``deployment_id``,
    ``host_name``, ``mode``, ``most``, ``ghost``, ``region``)."""
    return misspelling_of(key, SUBJECT_FIELDS, edge_words=True)


def misspelled_subject_words(key: str, known: str) -> str:
    """How a message names the subject field ``key`` that misspells the subject field ``known``
    (``misspelled_subject_field``): ``'hots' misspells the subject field 'host'``, and for a plural
    (``hosts``) that it is the plural of a subject field — a subject names one host, not a list."""
    words = f"{key!r} misspells the subject field {known!r}"
    if _plural(_loose(key), _loose(known)):
        words += (
            f" (the plural of a subject field: a subject names one {known}, so record one entry per {known})"
        )
    return words


_ENTRY_ID = re.compile(r"^[0-9a-f]{64}$")
_DIGEST = re.compile(r"^blake3:[0-9a-f]{64}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def format_time(t: datetime) -> str:
    """RFC 3339 UTC with microseconds, the only time format entries carry."""
    if t.tzinfo is None:
        raise SchemaError("naive datetime: times must carry a timezone")
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# RFC 3339 section 5.6 ``date-time``, exactly: full-date, "T" (its NOTE: "t" too, and a space, which it lets
# applications use for readability), partial-time with seconds and an optional fraction, and an offset "Z"
# ("z") or ±hh:mm. ISO 8601's other forms (basic 20261205T200000Z, week dates, no seconds, ±hhmm) are not
# RFC 3339. ASCII digits only (``\d`` would take any Unicode digit).
_RFC3339 = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt ]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]+))?"
    r"(?:([Zz])|([+-])([0-9]{2}):([0-9]{2}))"
)
RFC3339_FORM = "YYYY-MM-DDTHH:MM:SS[.fraction] with Z or ±HH:MM (RFC 3339), e.g. 2026-09-09T09:00:00Z"


def parse_time(text: str) -> datetime:
    """An RFC 3339 ``date-time`` (``_RFC3339``) as an aware UTC datetime: the one reading of every time an
    entry carries (payload and statement times, the log's own). Anything else is a ``SchemaError`` naming
    the form expected; a fraction finer than microseconds is truncated; a leap second (``:60``) cannot be
    placed on the log's clock and is refused. ``parse_when`` reads what a person types on top of it."""
    m = _RFC3339.fullmatch(text) if isinstance(text, str) else None
    if m is None:
        raise SchemaError(f"not an RFC 3339 date-time: {text!r} (expected {RFC3339_FORM})")
    year, month, day, hour, minute, second, frac, z, sign, off_h, off_m = m.groups()
    if second == "60":
        raise SchemaError(f"a leap second (:60) cannot be placed on the log's clock: {text!r}")
    offset = timedelta(0) if z else timedelta(hours=int(off_h), minutes=int(off_m))
    try:
        if offset >= timedelta(days=1) or (not z and int(off_m) > 59):
            raise ValueError(f"offset {sign}{off_h}:{off_m} is not within ±00:00..±23:59")
        t = datetime(
            int(year),
            int(month),
            int(day),
            int(hour),
            int(minute),
            int(second),
            int((frac or "0")[:6].ljust(6, "0")),
            tzinfo=UTC,
        )
        return t + offset if sign == "-" else t - offset
    except (ValueError, OverflowError) as e:
        raise SchemaError(
            f"not a valid RFC 3339 date-time: {text!r}: {e} (expected {RFC3339_FORM})"
        ) from None


_AGO = re.compile(
    r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|secs|seconds?|m|min|mins|minutes?|h|hours?|d|days?|w|weeks?)\s+ago\s*$"
)
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_when(text: str, now: datetime | None = None) -> datetime:
    """A time a person types: ``2 hours ago``, ``30 min ago``, ``now``, ``today`` / ``yesterday`` (UTC
    midnight), or an ISO / RFC 3339 time (UTC when it names no zone). The one parser every command uses."""
    base = now or datetime.now(UTC)
    word = text.strip().lower()
    midnight = base.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    named = {"now": base, "today": midnight, "yesterday": midnight - timedelta(days=1)}
    if word in named:
        return named[word]
    m = _AGO.match(word)
    if m is not None:
        n, unit = float(m.group(1)), m.group(2)[0]
        try:
            ago = base - timedelta(seconds=n * _UNIT_SECONDS[unit])
        except (OverflowError, ValueError) as e:
            raise InputError(f"time {text!r} is out of range") from e
        return _in_range(ago, text)
    try:  # the strict core first: an RFC 3339 time means what it means in an entry
        return _in_range(parse_time(text.strip()), text)
    except SchemaError:
        pass
    t = text.strip().replace(",", ".").replace("Z", "+00:00").replace("z", "+00:00")
    if re.search(r"[+-]\d{4}$", t):
        t = t[:-2] + ":" + t[-2:]
    try:
        dt = datetime.fromisoformat(t)
        dt = (dt if dt.tzinfo is not None else dt.replace(tzinfo=UTC)).astimezone(UTC)
    except (ValueError, OverflowError):
        raise InputError(
            f"cannot read time {text!r}",
            hint="use e.g. '2 hours ago', yesterday, today, now or 2026-09-09T09:00:00Z",
        ) from None
    return _in_range(dt, text)


_EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
_LATEST = datetime(9000, 1, 1, tzinfo=UTC)


def time_range_problem(dt: datetime) -> str | None:
    """Why ``dt`` is no time a new entry or a command may carry (None: it is one) — the one range both
    take: from 1970 to before 9000. Near year 1 or 9999 the windows the policy computes (its age bounds
    are subtracted from a time) overflow, so ``ledger record --collected-at`` (``parse_when``) and every
    ingest (``check_ingest``: the CLI's and the API's) refuse such a time alike."""
    if _EARLIEST <= dt < _LATEST:
        return None
    return f"give a time from {_EARLIEST:%Y-%m-%d} to before {_LATEST:%Y-%m-%d}"


def _in_range(dt: datetime, text: str) -> datetime:
    """A typed time the commands can compute windows from (``time_range_problem``): one out of range is
    refused as input, not a crash."""
    problem = time_range_problem(dt)
    if problem is not None:
        raise InputError(f"time {text!r} is out of range", hint=problem)
    return dt


class _Model(BaseModel):
    # defer_build: a kind's validator is built when that kind is first validated, not at import (a
    # command that reads a few kinds, such as `ledger log`, does not pay for building every model)
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, defer_build=True)


def _time_field(v: str) -> str:
    try:
        parse_time(v)
    except SchemaError as e:  # as a ValueError, the refusal names the field that holds it
        raise ValueError(str(e)) from None
    return v


# Field types a payload's rules read: a value that is not one is refused at ingest, never read as absent
# (a kernel event whose time does not parse could not be placed in any run; a negative latency would be
# within every upper bound)
Time = Annotated[str, AfterValidator(_time_field)]
# a model file's digests; "" where the collector could not hash the file (the pin then pins nothing)
Sha256Hex = Annotated[str, Field(pattern=r"^(|[0-9a-f]{64})$")]
Blake3Digest = Annotated[str, Field(pattern=r"^(|blake3:[0-9a-f]{64})$")]
Count = Annotated[int, Field(ge=0)]
Figure = Annotated[float, Field(ge=0, allow_inf_nan=False)]
# a lease of no time, or less, bounds nothing; one past a year bounds no run either (and its end could not
# be computed near the range of times)
MAX_LEASE_S = 366 * 86400
Lease = Annotated[float, Field(gt=0, le=MAX_LEASE_S, allow_inf_nan=False)]
REVIEW_COMMIT = re.compile(r"^[0-9a-f]{7,64}$")  # a reviewed commit: git's hash, abbreviated or whole
GitCommit = Annotated[str, Field(pattern=REVIEW_COMMIT.pattern)]


class ArtifactRef(_Model):
    """An artifact attached to an entry; ``stored`` False means recorded by reference only."""

    name: str = Field(min_length=1, max_length=200)
    digest: str
    size: int = Field(ge=0)
    media_type: str = "application/octet-stream"
    sha256: str | None = None
    stored: bool = True
    path: str | None = None

    @field_validator("digest")
    @classmethod
    def _digest(cls, v: str) -> str:
        if not _DIGEST.fullmatch(v):
            raise ValueError("digest must be blake3:<64 lowercase hex>")
        return v

    @field_validator("sha256")
    @classmethod
    def _sha(cls, v: str | None) -> str | None:
        if v is not None and not _SHA256.fullmatch(v):
            raise ValueError("sha256 must be 64 lowercase hex")
        return v


class EntryRef(_Model):
    """A typed link to an earlier entry (``supersedes``, ``job``, ``reviews``, ``accepts`` …)."""

    rel: str = Field(pattern=r"^[a-z][a-z0-9_-]{0,39}$")
    id: str

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        if not _ENTRY_ID.fullmatch(v):
            raise ValueError("entry id must be 64 lowercase hex")
        return v


class Collector(_Model):
    host: str = Field(min_length=1, max_length=255)
    tool: str = "evidence-ledger"
    version: str = ""


class Statement(_Model):
    """What a collector signs: the DSSE payload, before canonicalisation."""

    type_: Literal["https://evidence-ledger.dev/entry/v1"] = Field(
        alias="_type", default="https://evidence-ledger.dev/entry/v1"
    )
    kind: str
    kind_version: int = 1
    subject: dict[str, str]
    payload: dict[str, Any]
    artifacts: list[ArtifactRef] = Field(default_factory=list)
    refs: list[EntryRef] = Field(default_factory=list)
    collected_at: str
    collector: Collector

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("subject")
    @classmethod
    def _subject(cls, v: dict[str, str]) -> dict[str, str]:
        if not v:
            raise ValueError("subject must name at least one field (e.g. campaign=…)")
        for key, val in v.items():
            if not _SUBJECT_KEY.fullmatch(key):
                raise ValueError(f"subject key {key!r} must match {_SUBJECT_KEY.pattern}")
            if not val or len(val) > 512:
                raise ValueError(f"subject {key} must be 1..512 characters")
        return v

    @field_validator("collected_at")
    @classmethod
    def _collected_at(cls, v: str) -> str:
        return _time_field(v)

    @field_validator("artifacts")
    @classmethod
    def _unique_artifacts(cls, v: list[ArtifactRef]) -> list[ArtifactRef]:
        names = [a.name for a in v]
        if len(names) != len(set(names)):
            raise ValueError("artifact names must be unique within an entry")
        return v

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    def refs_of(self, rel: str) -> list[str]:
        return [r.id for r in self.refs if r.rel == rel]


# --- payload kinds ------------------------------------------------------------------------------------


class MigDevice(_Model):
    """A MIG instance the driver lists under a GPU in MIG mode (``*_VISIBLE_DEVICES`` names it by ``uuid``:
    ``ledger.devices``). ``nvidia-smi -q -x`` records no UUID: then ``uuid`` is absent and no launch can be
    matched to the instance (fail closed)."""

    uuid: str | None = Field(default=None, pattern=r"^MIG-")
    index: Count | None = None  # its place among the GPU's MIG devices (NVML / nvidia-smi)
    gpu_instance_id: Count | None = None
    compute_instance_id: Count | None = None
    memory_total_mib: float | None = None


class GpuInfo(_Model):
    # the device index the driver gives (``CUDA_VISIBLE_DEVICES``); absent: its place in the list
    index: Count | None = None
    name: str
    uuid: str | None = None
    vendor: Literal["nvidia", "amd", "intel", "other"] = "nvidia"
    driver: str | None = None
    cuda: str | None = None
    rocm: str | None = None
    memory_total_mib: float | None = None
    memory_used_mib: float | None = None
    utilization_pct: float | None = None
    pci_bus_id: str | None = None
    # the MIG instances of a GPU in MIG mode (absent: MIG off, or not read — no instance is listed)
    mig_devices: list[MigDevice] = Field(default_factory=list)
    details: dict[str, Any] = Field(default_factory=dict)


class HostProbe(_Model):
    hostname: str = Field(min_length=1)  # the machine it ran on (policy rule other-machine reads it)
    os: str
    kernel: str
    arch: str = ""
    wsl2: bool = False
    python: str = ""
    cpu_count: int | None = None
    memory_total_mib: float | None = None
    # required: a probe that leaves its GPUs out says nothing about them, where `[]` says the host shows none
    gpus: list[GpuInfo]
    gpu_source: str = "none"  # nvml | amd-smi | rocm-smi | nvidia-smi | sysfs | none
    gpu_note: str | None = None  # e.g. "no GPU found"
    disks: list[dict[str, Any]] = Field(default_factory=list)
    details: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_gpu_per_index(self) -> HostProbe:
        # the routing check finds a deployment's GPUs by index: two GPUs under one index name neither
        seen: set[int] = set()
        for i, g in enumerate(self.gpus):
            index = i if g.index is None else g.index
            if index in seen:
                raise ValueError(f"two GPUs have index {index}: a GPU index names one device")
            seen.add(index)
        return self


class EnvSnapshot(_Model):
    interpreter: str
    python: str
    packages: dict[str, str] = Field(default_factory=dict)  # engine/torch versions
    env: dict[str, str] = Field(default_factory=dict)  # relevant variables, secrets redacted
    pip_freeze_artifact: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)


class ModelFile(_Model):
    path: str = Field(min_length=1)
    size: int = Field(ge=0)
    sha256: Sha256Hex
    blake3: Blake3Digest
    lfs: bool = False
    expected: str | None = None  # digest from the HF blob name, when known
    verified: bool | None = None  # None: nothing to verify against

    @model_validator(mode="after")
    def _verified_against_what_it_states(self) -> ModelFile:
        # verified against nothing, or an LFS blob whose name (its SHA-256) is not the digest computed:
        # the record contradicts itself (the collector verifies an LFS file by that very equality)
        if self.verified is True and self.expected is None:
            raise ValueError(
                f"file {self.path!r} is verified = true with no expected digest to verify against"
            )
        if self.verified is True and self.lfs and self.expected != self.sha256:
            raise ValueError(
                f"file {self.path!r} is verified = true, but its expected digest {self.expected} is not its "
                f"sha256 {self.sha256}"
            )
        return self


class ModelPin(_Model):
    repo_id: str | None = None
    revision: str | None = None
    root: str
    layout: Literal["hf-cache", "directory"] = "directory"
    files: list[ModelFile]
    total_size: int = Field(ge=0)
    verification: Literal["passed", "failed", "not_applicable"] = "not_applicable"
    failures: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _each_file_once(self) -> ModelPin:
        # one path listed twice, with two digests: which bytes the pin pins cannot be told
        seen: set[str] = set()
        for f in self.files:
            if f.path in seen:
                raise ValueError(f"file {f.path!r} is listed more than once")
            seen.add(f.path)
        return self

    @model_validator(mode="after")
    def _total_is_the_files(self) -> ModelPin:
        # the collector writes the sum of the files' sizes; a total that is not contradicts the files
        files = sum(f.size for f in self.files)
        if self.total_size != files:
            raise ValueError(f"total_size {self.total_size} is not the sum of the files' sizes ({files})")
        return self


def pin_bindings(pin: Mapping[str, Any]) -> dict[str, str]:
    """What a ``model.pin`` payload pins, as binding keys: ``model_revision``, ``model_repo`` and one
    ``shard:<path>`` (its SHA-256) per file. The one copy of these names: the policy's pinned manifest is
    built from it, and the campaign runner binds every launch with it."""
    out: dict[str, str] = {}
    if pin.get("revision"):
        out["model_revision"] = str(pin["revision"])
    if pin.get("repo_id"):
        out["model_repo"] = str(pin["repo_id"])
    for f in pin.get("files", []):
        out[f"shard:{f['path']}"] = str(f["sha256"])
    return out


class EngineLaunch(_Model):
    engine: str  # vllm | llamacpp | sglang | native | fault
    command: list[str]
    attempt: int = Field(
        default=1, ge=1
    )  # a claim (the policy derives attempts from the log), but a sane one
    bindings: dict[str, str] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    lease_seconds: Lease | None = None
    started_at: Time
    ended_at: Time | None = None
    ready: bool
    ready_endpoint: str | None = None
    time_to_ready_s: Figure | None = None  # a negative or infinite time measured nothing
    phases: dict[str, Figure] = Field(default_factory=dict)
    exit_code: int | None = None
    signal: int | None = Field(default=None, ge=1, le=127)  # a POSIX signal number
    lease_expired: bool = False
    failure_signature: str | None = None
    failure_detail: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _ends_after_it_starts(self) -> EngineLaunch:
        # a record that ends before it starts contradicts itself: which of its times would a run span?
        if self.ended_at is not None and parse_time(self.ended_at) < parse_time(self.started_at):
            raise ValueError(f"ended_at {self.ended_at} is before started_at {self.started_at}")
        return self


class HealthProbe(_Model):
    endpoint: str
    # a closed set: a misspelled check is refused at ingest, never silently selected by no gate
    check: Literal["health", "models", "completion", "structured", "sequential", "restoration"] = "health"
    ok: bool
    http_status: int | None = Field(default=None, ge=100, le=599)  # an HTTP status code, or none (no answer)
    latency_ms: Figure | None = None
    model_identity: str | None = None  # completions: the model asked for; models: the first id listed
    # a completion probe's answer's own ``model`` (None where it names none): a router may answer from another
    answered_model: str | None = None
    sleeping: bool | None = None
    expected: str | None = None
    text: str | None = None
    count: Count | None = None
    latencies_ms: list[Figure] = Field(default_factory=list)  # a negative latency measured nothing
    max_tokens: Count | None = None
    # a completion or structured probe's answer: why the engine stopped (``choices[0].finish_reason``:
    # "stop", or "length" where the probe's max_tokens cut it) and how many tokens it generated
    # (``usage.completion_tokens``); None where the answer records none (an entry from before the fields)
    finish_reason: str | None = None
    completion_tokens: Count | None = None
    error: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)


# how a harness run ended (benchmark, semantic): the one copy (the harnesses write it, policies read it);
# "operator-stop" is FailureClass.OPERATOR_STOP's word (a signal from outside), "config" FailureClass.CONFIG's
# (the engine refused a request for the campaign's configuration: ledger.answers.refusal)
HarnessOutcome = Literal["completed", "fault", "lease-expired", "operator-stop", "config"]
# what the fault that stopped a harness run (outcome "fault") was, over every request the engine faulted
# (``bounds.fault_kind``, written by ``collectors/benchmark.py`` ``run_fault_kind``, read by the policy's
# ``stop_cut``): "unanswered" — each one's connection was refused, reset or closed before the engine
# answered it (no HTTP status, no error object: the engine said nothing); "answered" — one got an answer
# that says the engine failed (an HTTP 5xx, an error object, finish_reason "error", a stream the engine
# ended itself); "timeout" — one timed out (a hang, a connection never accepted); "other" — anything else
# (the bindings unreadable or changed, a plain error of an engine no longer alive)
HarnessFaultKind = Literal["unanswered", "answered", "timeout", "other"]
FAULT_UNANSWERED: HarnessFaultKind = "unanswered"
FAULT_ANSWERED: HarnessFaultKind = "answered"
FAULT_TIMEOUT: HarnessFaultKind = "timeout"
FAULT_OTHER: HarnessFaultKind = "other"


def _whole_count(v: Any) -> Any:
    """A count of the spec (levels, requests, repetitions): a whole number ≥ 1, as JSON numbers compare
    (``4.0`` is 4); a boolean or a text is none."""
    ok = (
        isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v == int(v) and v >= 1
    )
    if not ok:
        raise ValueError(f"must be a whole number of at least 1, not {v!r}")
    return v


_Level = Annotated[Any, AfterValidator(_whole_count)]
_Rate = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]  # a fraction of requests


class SaturationDetection(BaseModel):
    """The thresholds the benchmark harness judged over-saturation by (``BenchmarkSpec.saturation_*``):
    a detection that never fires (a latency factor of 1000, a minimum duration no run reaches) is as weak
    as none, so a policy compares them too."""

    model_config = ConfigDict(extra="allow", strict=True)

    min_gain: Annotated[float, Field(allow_inf_nan=False)] | None = None
    latency_factor: Figure | None = None
    min_points: Count | None = None
    min_duration_s: Figure | None = None


class HarnessBounds(BaseModel):
    """The fields of a harness result's ``bounds`` a policy reads, typed strictly: ``"2"`` is no count and
    ``"true"`` no boolean (a spec rule would otherwise report "repetitions 2, approved 2"). Every other
    field of ``bounds`` (limits, figures, parity …) stays as the harness wrote it. Both harnesses
    (benchmark, semantic) record ``bindings``: the ids the endpoint served (``served_models``, texts);
    the benchmark also records the run-validity values it judged each run with (``saturation`` …)."""

    model_config = ConfigDict(extra="allow", strict=True)

    concurrency: list[_Level] | None = None
    requests: _Level | None = None
    repetitions: _Level | None = None
    corpus_digest: str | None = None
    outcome: HarnessOutcome | None = None
    aggregate: bool | None = None
    valid: bool | None = None
    invalid_reasons: list[str] | None = None
    bindings: dict[str, str] | None = None
    saturation: Literal["invalid", "report"] | None = None
    min_requests: _Level | None = None
    min_duration_s: Figure | None = None
    max_error_rate: _Rate | None = None
    saturation_detection: SaturationDetection | None = None
    # the benchmark asked the engine for token ids (c1 parity by ids): a boolean, "true" is none
    request_token_ids: bool | None = None
    # a run an engine fault stopped: what the fault was (``HarnessFaultKind``) and when the harness saw it
    fault_kind: HarnessFaultKind | None = None
    fault_at: Time | None = None
    # the endpoint the run measured: the base URL the harness was given, without a trailing "/"
    # (``http://127.0.0.1:8081``), which the policy compares with where the launch of its attempt served
    # (``details.base_url``; rule harness-other-endpoint). A text or null: a number, a list or an object is
    # refused here, never read as no endpoint. Its form is the policy's to read (``ledger.policy.names.
    # endpoint_key``): a text that is no http(s) base URL is stored and never credited, so a failed run
    # recorded with it still counts against the engine rather than being lost at ingest
    endpoint: str | None = None


class GateResult(_Model):
    gate: str = Field(min_length=1)  # a gate of the policy; one no gate has keeps a failure unjudged
    status: Literal["passed", "failed", "not_run", "not_authorized"]
    order: int | None = None
    counts: dict[str, Count] = Field(default_factory=dict)
    bounds: dict[str, Any] = Field(default_factory=dict)
    # the measured figures a policy judges (benchmark: ``ttft_ms.p95@c4`` …; semantic: ``score``); None:
    # not measured (no aggregate result), never zero; every one is a latency, a rate or a fraction (≥ 0)
    figures: dict[str, Figure | None] = Field(default_factory=dict)
    reason: str | None = None
    evidence: list[str] = Field(default_factory=list)

    @field_validator("bounds")
    @classmethod
    def _typed_bounds(cls, bounds: dict[str, Any]) -> dict[str, Any]:
        HarnessBounds.model_validate(bounds)
        return bounds


class Job(_Model):
    job_id: str
    state: Literal["running", "succeeded", "failed", "killed", "cancelled"]
    lease_seconds: Lease | None = None
    started_at: Time | None = None
    ended_at: Time | None = None
    exit_code: int | None = None
    cancelled_by: str | None = None
    reason: str | None = None
    spec: dict[str, Any] = Field(default_factory=dict)

    @field_validator("spec")
    @classmethod
    def _bindings_are_strings(cls, spec: dict[str, Any]) -> dict[str, Any]:
        # the approved spec's bindings are the campaign's pinned manifest: a list, a text, null or a
        # number there would be skipped as no manifest, or compared as some other text
        b = spec.get("bindings", {})
        strings = isinstance(b, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in b.items())
        if not strings:
            raise ValueError("spec.bindings must be an object of strings (binding key → value)")
        # a key of look-alike letters (Cyrillic "е" in "еngine", fullwidth letters) reads as a binding key
        # and names none: what the approval meant to pin would be recorded and never compared
        odd = sorted(k for k in b if not k.isascii())
        if odd:
            raise ValueError(
                f"spec.bindings keys must be ASCII: {', '.join(repr(k) for k in odd)} "
                f"({', '.join(k.encode('ascii', 'backslashreplace').decode() for k in odd)})"
            )
        # the device the campaign qualifies on: the routing gate compares a deployment's with it, so a
        # spelling it does not know ("CPU", "cuda") would be read as a GPU deployment
        if "device" in b and b["device"] not in ("cpu", "gpu"):
            raise ValueError(f"spec.bindings.device must be 'cpu' or 'gpu', not {b['device']!r}")
        # whether the campaign's benchmark asked for token ids (the policy judges what c1 parity compared
        # by it): a spelling it does not know ("True", "yes", "1") is refused, never read as either
        if "request_token_ids" in b and b["request_token_ids"] not in ("true", "false"):
            raise ValueError(
                f"spec.bindings.request_token_ids must be 'true' or 'false', not {b['request_token_ids']!r}"
            )
        return spec


class KernelEvent(_Model):
    time: Time | None = None  # None: the log line carried no time the collector could read
    # nvrm-xid | amdgpu-ring-timeout | gpu-reset-begin | gpu-reset-succeeded | vram-lost | mes-failure …
    kind: str
    message: str
    xid: int | None = None
    device: str | None = None
    # from the GPU-fault catalogue the payload cites (policies derive the class again, never trust it)
    fault_class: str | None = None
    mnemonic: str | None = None
    recovery_action: str | None = None  # Xid 154: the recovery action it changed to
    related_xid: int | None = None  # Xid 154: the earlier linked Xid of the same device


class KernelLog(_Model):
    source: str  # journalctl | dmesg | file
    readable: bool = True
    reason: str | None = None
    since: Time | None = None
    events: list[KernelEvent] = Field(default_factory=list)
    last_reset_at: Time | None = None
    catalogue: dict[str, Any] | None = None  # the GPU-fault catalogue cited: name, version, digest


class Finding(_Model):
    severity: str = "P2"
    text: str


class Review(_Model):
    result: Literal["PASS", "FAIL"]
    commit: GitCommit | None = None  # the reviewed commit: 7 to 64 lowercase hex
    findings: list[Finding] = Field(default_factory=list)
    summary: str | None = None


class Acceptance(_Model):
    decision: Literal["accepted", "rejected"]
    reason: str


# characters that show nothing though Unicode files them as letters or symbols (fillers, a blank pattern)
_BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")
# categories that show nothing on their own: controls and format characters (zero-width space, word
# joiner), separators (spaces), combining marks
_BLANK_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zs", "Zl", "Zp", "Mn", "Me"})


def _visible_text(text: str) -> str:
    """A text a reader can see: at least one character that shows (a reason of zero-width spaces, word
    joiners or fillers reads as nothing, yet would withdraw a failure)."""
    if not any(c not in _BLANK_LETTERS and unicodedata.category(c) not in _BLANK_CATEGORIES for c in text):
        raise ValueError("shows nothing a reader can see (only spaces, invisible or filler characters)")
    return text


VisibleText = Annotated[str, AfterValidator(_visible_text)]


class Supersession(_Model):
    # why the entries it supersedes no longer stand: the one way to withdraw a failure says why
    reason: VisibleText = Field(min_length=1)
    correction: str | None = None


class KeyEnrol(_Model):
    name: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.@-]*$")
    public_key: str  # base64 raw Ed25519 public key
    key_id: str
    roles: list[Role] = Field(min_length=1)
    valid_from: Time | None = None
    valid_until: Time | None = None


class KeyGrant(_Model):
    key_id: str
    roles: list[Role] = Field(min_length=1)


class KeyRevoke(_Model):
    key_id: str
    effective_at: str
    reason: str = ""

    @field_validator("effective_at")
    @classmethod
    def _t(cls, v: str) -> str:
        return _time_field(v)


class KeyRotate(_Model):
    old_key_id: str
    new_key_id: str
    effective_at: Time
    reason: str = ""


class VerdictRecord(_Model):
    """A recorded verdict. The full result (gates, used, rejected, not credited …) is the entry's
    ``verdict-result.json`` artifact, whose BLAKE3 digest is ``result_digest``; ``used``, ``rejected`` and
    ``result`` are read only from entries recorded before the result moved out of the payload."""

    verdict: str
    status: str
    policy: dict[str, str]
    checkpoint: dict[str, Any]
    subject: dict[str, str] | None = None
    counts: dict[str, int] = Field(default_factory=dict)
    result_digest: str | None = None
    # the time it was judged at (freshness and ages); absent in entries recorded before it was kept
    reference_time: Time | None = None
    used: list[str] = Field(default_factory=list)
    rejected: list[dict[str, str]] = Field(default_factory=list)
    result: dict[str, Any] = Field(default_factory=dict)


class RoutingChange(_Model):
    action: str  # e.g. "restore", "route", "unroute"
    service: str | None = None
    port: int | None = None
    allowed: bool | None = None
    reasons: list[str] = Field(default_factory=list)
    deployment: dict[str, Any] = Field(default_factory=dict)
    # the reference time the change was judged at (`--now`, default the clock); absent in older entries
    judged_at: Time | None = None


class Note(_Model):
    text: str = Field(min_length=1)


KIND_MODELS: dict[tuple[str, int], type[_Model]] = {
    ("host.probe", 1): HostProbe,
    ("env.snapshot", 1): EnvSnapshot,
    ("model.pin", 1): ModelPin,
    ("engine.launch", 1): EngineLaunch,
    ("health.probe", 1): HealthProbe,
    ("gate.result", 1): GateResult,
    ("job", 1): Job,
    ("kernel.log", 1): KernelLog,
    ("review", 1): Review,
    ("acceptance", 1): Acceptance,
    ("supersession", 1): Supersession,
    ("key.enrol", 1): KeyEnrol,
    ("key.grant", 1): KeyGrant,
    ("key.revoke", 1): KeyRevoke,
    ("key.rotate", 1): KeyRotate,
    ("verdict", 1): VerdictRecord,
    ("routing.change", 1): RoutingChange,
    ("note", 1): Note,
}

_EVIDENCE = frozenset({"collector", "operator"})
KIND_ROLES: dict[str, frozenset[str]] = {
    "host.probe": _EVIDENCE,
    "env.snapshot": _EVIDENCE,
    "model.pin": _EVIDENCE,
    "engine.launch": _EVIDENCE,
    "health.probe": _EVIDENCE,
    "gate.result": _EVIDENCE,
    "job": _EVIDENCE,
    "kernel.log": _EVIDENCE,
    "routing.change": frozenset({"operator", "admin"}),
    "review": frozenset({"reviewer"}),
    "acceptance": frozenset({"reviewer", "operator"}),
    "supersession": frozenset({"reviewer", "operator"}),
    "verdict": frozenset({"reviewer", "operator", "admin"}),
    "key.enrol": frozenset({"admin"}),
    "key.grant": frozenset({"admin"}),
    "key.revoke": frozenset({"admin"}),
    "key.rotate": frozenset({"admin"}),
    "note": frozenset(ROLES) - {"exporter"},
}

# refs that must point at an entry of a given kind
REF_REQUIRED: dict[str, tuple[str, ...]] = {
    "supersession": ("supersedes",),
    "review": ("reviews",),
    "acceptance": ("subject",),
}


# subject fields an entry of a kind must name: a host's facts (its GPUs, the model files it verified, its
# kernel's GPU events) are evidence of that host only, and an entry that names none could be credited to
# any campaign's host or to none (a GPU fault no run is charged with)
SUBJECT_REQUIRED: dict[str, tuple[str, ...]] = {
    "host.probe": ("host",),
    "model.pin": ("host",),
    "kernel.log": ("host",),
}


def _first_error(e: ValidationError) -> str:
    errors = e.errors()
    err = errors[0]
    loc = ".".join(str(p) for p in err["loc"]) or "(root)"
    return f"{loc}: {err['msg']}{more_problems(errors, unknown='unknown field')}"


def check_kind_filter(kind: str) -> str:
    """A ``kind`` filter as a query takes it (a kind, or a prefix ending in ``*``: ``key.*``), refused
    (UnknownKindError, listing the kinds) when it names no kind: a misspelled filter would otherwise read
    as "no such evidence". The CLI's ``log --kind`` and the API's ``kind=`` both check with this."""
    known = sorted({k for k, _ in KIND_MODELS})
    if kind.endswith("*") and any(k.startswith(kind[:-1]) for k in known):
        return kind
    if kind in known:
        return kind
    raise UnknownKindError(
        f"kind filter {kind!r} names no kind; known: {', '.join(known)} (or a prefix and *)"
    )


def validate_payload(kind: str, version: int, payload: dict[str, Any]) -> _Model:
    """Validate a payload against its kind's model; unknown kinds and bad fields are refused."""
    model = KIND_MODELS.get((kind, version))
    if model is None:
        known = sorted({k for k, _ in KIND_MODELS})
        if any(k == kind for k, _ in KIND_MODELS):
            raise UnknownKindError(f"kind {kind!r} has no version {version}")
        raise UnknownKindError(f"unknown kind {kind!r}; known: {', '.join(known)}")
    try:
        return model.model_validate(payload)
    except ValidationError as e:
        raise SchemaError(f"{kind} payload invalid: {_first_error(e)}") from e


def parse_statement(value: Any) -> Statement:
    """Validate a decoded statement and its payload; returns the typed statement or raises."""
    if not isinstance(value, dict):
        raise SchemaError("statement must be a JSON object")
    try:
        st = Statement.model_validate(value)
    except ValidationError as e:
        raise SchemaError(f"statement invalid: {_first_error(e)}") from e
    validate_payload(st.kind, st.kind_version, st.payload)
    for rel in REF_REQUIRED.get(st.kind, ()):
        if not st.refs_of(rel):
            raise SchemaError(f"{st.kind} needs a ref {rel}=<entry id>")
    return st


def host_key(name: str) -> str:
    """A host name as every part compares it: host names are DNS names, case-insensitive (a trailing dot,
    or white space around it, names the same host), so ``GPU-BOX-1`` and ``gpu-box-1`` are one host
    everywhere — in the verdict (a host's probes, pins, kernel logs), the routing gate and at ingest."""
    return name.strip().rstrip(".").casefold()


def same_subject_value(field: str, got: str, asked: str) -> bool:
    """Whether two values of one subject field name the same thing: a host as a host name (``host_key``),
    every other field exactly as stored (the subject index matches them so)."""
    if field == "host":
        return host_key(got) == host_key(asked)
    return got == asked


# kinds whose payload names the subject the entry judged (``subject``) beside the statement's own subject:
# a verdict's evaluated subject. A routing.change names none (its ``deployment.host`` is the layout the
# check judged, which may be another host's: the routing check's ``deployment-host`` gate refuses it, and a
# refused decision is recorded as it was judged)
JUDGED_SUBJECT_KINDS = ("verdict",)


def _stated_subject(where: str, value: Any) -> dict[str, str] | None:
    """A subject as one place of a verdict entry states it: a mapping of text values (None: it states none,
    an empty mapping too); anything else is refused (SchemaError), never read as naming nothing."""
    if value is None:
        return None
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise SchemaError(f"{where} is not a subject (field=value text pairs): {value!r}")
    return dict(value) or None


def judged_subject(
    payload: Mapping[str, Any], result: Mapping[str, Any] | None = None
) -> dict[str, str] | None:
    """The subject a verdict entry judged — one reading for ingest, ``ledger verdict replay``, the pages,
    the routing gate and the summaries: what its payload's ``subject`` names, else what its inline
    ``result`` (entries recorded before results moved to an artifact) names, else what its stored result
    artifact names (``result``: the result the caller read from the store, ``recorded_result``; readers
    without the store pass none). Each place that states one must state the same subject (field by
    field, ``same_subject_value``; the order of the fields is no matter): where two disagree the entry
    judged no one subject and SchemaError says why — ingest refuses it, a reader shows it unreadable. A
    result (inline or stored) always names the subject it judged (``evaluate`` writes it): one naming
    none is refused too. None: nothing names one (an entry recorded before payloads named it)."""
    found = _judged(payload, result)
    return None if found is None else found[1]


def _judged(
    payload: Mapping[str, Any], result: Mapping[str, Any] | None
) -> tuple[str, dict[str, str]] | None:
    """``judged_subject``, with the place that named it first (for a refusal's words)."""
    stated: list[tuple[str, dict[str, str]]] = []
    own = _stated_subject("payload subject", payload.get("subject"))
    if own is not None:
        stated.append(("payload subject", own))
    inline = payload.get("result")
    for where, value in (("inline result", inline), ("recorded result artifact", result)):
        if value is None or (where == "inline result" and value == {}):
            continue
        if not isinstance(value, Mapping):
            raise SchemaError(f"the verdict's {where} is not a JSON object")
        subject = _stated_subject(f"the {where}'s subject", value.get("subject"))
        if subject is None:
            raise SchemaError(f"the verdict's {where} names no subject it judged")
        stated.append((where, subject))
    if not stated:
        return None
    first_where, first = stated[0]
    for where, subject in stated[1:]:
        if set(subject) != set(first) or not all(
            same_subject_value(k, first[k], v) for k, v in subject.items()
        ):
            raise SchemaError(
                f"the {where} judged {_pairs(subject)}, the {first_where} names {_pairs(first)}: a "
                "verdict entry judges one subject"
            )
    return first_where, first


def _pairs(subject: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(subject.items()))


def judged_subject_problem(st: Statement, result: Mapping[str, Any] | None = None) -> str | None:
    """Why the subject a verdict entry judged (``judged_subject``: its payload's, its inline result's, the
    stored ``result``'s) contradicts the entry's own subject, or cannot be read (None: it does not).
    Every field of the judged subject must be in the statement's subject with the same value
    (``same_subject_value``): the log indexes the entry by its statement's subject, and every page and
    gate that finds it there reads it as a verdict about that subject — one judging another campaign
    would be shown as this one's. A judged field the statement leaves out is refused too: the entry
    would be a verdict about a subject no reader of that field finds it under (``ledger verdict
    --record`` names every field it judged in both)."""
    if st.kind not in JUDGED_SUBJECT_KINDS:
        return None
    try:
        found = _judged(st.payload, result)
    except SchemaError as e:
        return e.message
    if found is None:
        return None
    where, judged = found
    for key, value in sorted(judged.items()):
        mine = st.subject.get(key)
        if mine is None:
            return (
                f"{where} names {key}={value}, which the entry's subject does not name: the log "
                f"finds an entry by its own subject (name {key}={value} there too)"
            )
        if not same_subject_value(key, mine, value):
            return (
                f"{where} names {key}={value}, the entry's subject {key}={mine}: a {st.kind} "
                f"entry judges the subject it is logged under (record it under {key}={value})"
            )
    return None


def check_ingest(st: Statement) -> Statement:
    """What the log refuses of a new statement beyond its schema (``parse_statement``, which reads stored
    entries too, so an entry stored before one of these rules stays readable): a host's facts that name
    no host, a launch that claims it started after it was recorded, a ``collected_at`` out of the range
    of times (``time_range_problem``), a verdict whose payload (or inline result) says it judged another
    subject than the one it is logged under (``judged_subject_problem``; the service checks the stored
    result artifact a verdict names the same way, ``Ledger._check_recorded_result``)."""
    range_problem = time_range_problem(parse_time(st.collected_at))
    if range_problem is not None:
        raise SchemaError(f"collected_at {st.collected_at} is out of range: {range_problem}")
    judged_problem = judged_subject_problem(st)
    if judged_problem is not None:
        raise SchemaError(judged_problem)
    started = st.payload.get("started_at") if st.kind == "engine.launch" else None
    # a launch is recorded once it started: a start after the record is a claim from the future that would
    # move the attempt past the probes of the run before it
    if isinstance(started, str) and parse_time(started) > parse_time(st.collected_at):
        raise SchemaError(
            f"engine.launch started_at {started} is after the entry's collected_at "
            f"{st.collected_at}: a launch is recorded after it started"
        )
    for key, value in st.subject.items():
        # a value with white space around it, or a control character, is refused here rather than in the
        # schema: an entry stored before the rule stays readable (``ledger.reads.parse_subject_pairs``)
        problem = subject_problem(key, value)
        if problem is not None:
            raise SchemaError(f"subject.{key}: {problem}")
    for name in SUBJECT_REQUIRED.get(st.kind, ()):
        if name not in st.subject:
            raise SchemaError(
                f"{st.kind} needs subject {name}=<value>: its facts are of one {name} "
                f"(subject names {', '.join(sorted(st.subject))})"
            )
    return st


def now_utc() -> datetime:
    return datetime.now(UTC)
