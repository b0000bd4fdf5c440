"""Fix 120 (issue 12): a verdict's result artifact at ingest, and how much of it any reader loads.

Ingest of a ``verdict`` entry read the artifact its ``result_digest`` names whole into memory (no cap), and
did not ask that artifact to be one the entry lists: a verdict could name any bytes in the store, never
covered by the entry's own artifact checks. Now ``result_digest`` names, character for character, the one
artifact the entry lists as ``verdict-result.json``, stored (else SchemaError naming the problem); a result
over ``MAX_RESULT_BYTES`` is refused when recorded and at ingest (ArtifactTooLargeError, nothing stored), and
every reader (``recorded_result``: pages, replay, export, the routing gate's why-line) gets it as unreadable,
its size looked up before a byte is read.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

import ledger.policy.verdict as verdict_mod
from ledger.api.app import create_app
from ledger.api.settings import ApiSettings
from ledger.canonical import canonical_bytes
from ledger.entries import ArtifactRef
from ledger.errors import ArtifactMissingError, ArtifactTooLargeError, InputError, SchemaError
from ledger.export import _vsa
from ledger.hashing import parse_digest
from ledger.policy import evaluate, load_policy, record_verdict
from ledger.policy.verdict import MAX_RESULT_BYTES, RESULT_ARTIFACT, recorded_result, result_digest
from ledger.service import Ledger

AT = "2026-09-10T11:00:00Z"
SUBJECT = {"campaign": "c"}
RESULT = {"subject": SUBJECT, "verdict": "QUALIFIED"}


def _payload(**more: Any) -> dict[str, Any]:
    return {
        "verdict": "QUALIFIED",
        "status": "qualified",
        "policy": {"name": "backend-qualification"},
        "checkpoint": {"size": 1},
        "subject": dict(SUBJECT),
        **more,
    }


def _put(led: Ledger, value: Any, name: str = RESULT_ARTIFACT, **art: Any) -> tuple[str, ArtifactRef]:
    data = value if isinstance(value, bytes) else canonical_bytes(value)
    stored = led.store.put_stream(io.BytesIO(data))
    return str(stored.digest), ArtifactRef(name=name, digest=str(stored.digest), size=stored.size, **art)


def _record(led: Ledger, payload: dict[str, Any], artifacts: list[ArtifactRef]) -> Any:
    return led.record("verdict", dict(SUBJECT), payload, key="admin", artifacts=artifacts, collected_at=AT)


def _refused(
    led: Ledger, error: type[Exception], match: str, payload: dict[str, Any], arts: list[Any]
) -> None:
    size = led.size()
    with pytest.raises(error, match=match):
        _record(led, payload, arts)
    assert led.size() == size  # nothing stored


# --- result_digest names one of the entry's own artifacts --------------------------------------------------


def test_verdict_whose_result_digest_is_not_among_its_artifacts_is_refused_at_ingest(ledger: Ledger) -> None:
    digest, art = _put(ledger, RESULT)  # in the store, but the entry does not carry it
    _refused(ledger, SchemaError, "is not among the entry's artifacts", _payload(result_digest=digest), [])
    # another artifact listed, the result not: refused the same way
    _other, note = _put(ledger, b"log text", name="engine.log")
    _refused(
        ledger, SchemaError, "is not among the entry's artifacts", _payload(result_digest=digest), [note]
    )
    # listed: stored
    assert not _record(ledger, _payload(result_digest=digest), [art]).duplicate


def test_verdict_whose_result_is_listed_twice_is_refused_at_ingest(ledger: Ledger) -> None:
    digest, art = _put(ledger, RESULT)
    twin = ArtifactRef(name="copy.json", digest=art.digest, size=art.size)
    _refused(ledger, SchemaError, "listed 2 times", _payload(result_digest=digest), [art, twin])
    _refused(ledger, SchemaError, "listed 2 times", _payload(result_digest=digest), [twin, art])  # reordered


@pytest.mark.parametrize("name", ["result.json", "verdict-result.JSON", "verdict-result"])
def test_verdict_whose_result_is_listed_under_another_name_is_refused_at_ingest(
    ledger: Ledger, name: str
) -> None:
    digest, art = _put(ledger, RESULT, name=name)
    _refused(
        ledger,
        SchemaError,
        f"listed as '{name}', not as {RESULT_ARTIFACT}",
        _payload(result_digest=digest),
        [art],
    )


def test_verdict_whose_result_is_listed_by_reference_only_is_refused_at_ingest(ledger: Ledger) -> None:
    digest, art = _put(ledger, RESULT, stored=False)
    _refused(ledger, SchemaError, "by reference only", _payload(result_digest=digest), [art])


def test_verdict_whose_listed_result_is_not_uploaded_is_refused_at_ingest(ledger: Ledger) -> None:
    digest = "blake3:" + "1" * 64
    art = ArtifactRef(name=RESULT_ARTIFACT, digest=digest, size=10)
    _refused(ledger, ArtifactMissingError, "is not in the store", _payload(result_digest=digest), [art])
    # neither uploaded nor listed: the message says both
    _refused(ledger, ArtifactMissingError, "does not list it", _payload(result_digest=digest), [])


@pytest.mark.parametrize(
    ("mangle", "match"),
    [
        (lambda d: d.upper(), "result_digest"),  # uppercase: no content address
        (lambda d: d.replace("blake3:", "BLAKE3:"), "result_digest"),
        (lambda d: d.removeprefix("blake3:"), "result_digest"),  # without its prefix
        (lambda d: d.replace("blake3:", "sha256:"), "result_digest"),
        (lambda d: f" {d} ", "not among the entry's artifacts"),  # padded: not the listed text
        (lambda d: d[:-1] + ("0" if d[-1] != "0" else "1"), "is not in the store"),  # one digit off
        (lambda d: 12345, "result_digest"),  # mistyped: a number
    ],
    ids=["upper", "upper-prefix", "no-prefix", "other-algo", "padded", "one-off", "number"],
)
def test_verdict_whose_result_digest_is_mistyped_is_refused_at_ingest(
    ledger: Ledger, mangle: Any, match: str
) -> None:
    digest, art = _put(ledger, RESULT)
    error: type[Exception] = ArtifactMissingError if match == "is not in the store" else SchemaError
    _refused(ledger, error, match, _payload(result_digest=mangle(digest)), [art])


# --- the older inline shape ------------------------------------------------------------------------------


def test_older_inline_verdict_names_its_inline_results_digest_or_is_refused(ledger: Ledger) -> None:
    # its result inline, no artifact listed: stored, read inline
    e = _record(ledger, _payload(result=RESULT, result_digest=result_digest(RESULT)), [])
    assert ledger.verdict_result(ledger.get(e.entry_id)) == RESULT
    # its result_digest naming other bytes in the store, not listed: refused
    digest, _art = _put(ledger, {"subject": SUBJECT, "verdict": "NOT QUALIFIED"})
    _refused(
        ledger,
        SchemaError,
        "names neither its inline result",
        _payload(result=RESULT, result_digest=digest),
        [],
    )
    # the field dropped: no result_digest, the inline result alone (the oldest shape) is still stored
    assert not _record(ledger, _payload(result={**RESULT, "n": 1}), []).duplicate


# --- the cap ---------------------------------------------------------------------------------------------


def test_the_result_cap_is_well_above_a_ten_thousand_entry_campaigns_result() -> None:
    ids = [f"{i:064x}" for i in range(10_000)]
    used = {"subject": SUBJECT, "used": ids, "gates": [{"name": "g", "used": ids}]}
    rejected = {
        "rejected": [{"entry": i, "rule": "stale", "kind": "health.probe", "detail": "x" * 200} for i in ids]
    }
    assert 8 * max(len(canonical_bytes(used)), len(canonical_bytes(rejected))) <= MAX_RESULT_BYTES


def test_verdict_whose_result_is_over_the_cap_is_refused_at_ingest(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = {**RESULT, "pad": "x" * 2000}
    digest, art = _put(ledger, big)
    monkeypatch.setattr(verdict_mod, "MAX_RESULT_BYTES", 1000)
    _refused(
        ledger,
        ArtifactTooLargeError,
        "more than a verdict's result may",
        _payload(result_digest=digest),
        [art],
    )
    # at the cap it is read and stored
    digest2, art2 = _put(ledger, RESULT)
    monkeypatch.setattr(verdict_mod, "MAX_RESULT_BYTES", art2.size)
    assert not _record(ledger, _payload(result_digest=digest2), [art2]).duplicate


def test_record_verdict_refuses_a_result_over_the_cap_before_storing_it(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger.record("note", {"campaign": "c", "host": "gpu-box-1"}, {"text": "started"}, key="admin")
    result = evaluate(ledger, dict(SUBJECT), load_policy("backend-qualification"))
    monkeypatch.setattr(verdict_mod, "MAX_RESULT_BYTES", len(canonical_bytes(result)) - 1)
    size = ledger.size()
    with pytest.raises(ArtifactTooLargeError, match="nothing recorded"):
        record_verdict(ledger, result, key="admin")
    assert ledger.size() == size
    assert not ledger.store.has(parse_digest(result_digest(result)))  # no orphan result either


class _LyingStore:
    """A store that says its artifact is small and then serves more bytes than the cap."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.read_sizes: list[int] = []

    def size(self, digest: Any) -> int:
        return 1

    def open_verified(self, digest: Any) -> Any:
        outer = self

        class _F(io.BytesIO):
            def read(self, n: int | None = -1) -> bytes:
                outer.read_sizes.append(-1 if n is None else n)
                return super().read(n)

        return _F(self.data)


def test_recorded_result_never_reads_more_than_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verdict_mod, "MAX_RESULT_BYTES", 100)
    store = _LyingStore(b"[" + b"1," * 500 + b"1]")
    with pytest.raises(ArtifactTooLargeError):
        recorded_result(store, {"result_digest": "blake3:" + "2" * 64}, "e1")  # type: ignore[arg-type]
    assert store.read_sizes == [101]


# --- every reader of a result over the cap gets a clear answer -------------------------------------------


@pytest.fixture
def oversized(ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A verdict stored before the cap (ingest bypassed), whose result the cap now puts out of reach."""
    ledger.record("note", {"campaign": "c", "host": "gpu-box-1"}, {"text": "started"}, key="admin")
    result = evaluate(ledger, dict(SUBJECT), load_policy("backend-qualification"))
    entry = record_verdict(ledger, result, key="admin")
    monkeypatch.setattr(verdict_mod, "MAX_RESULT_BYTES", 64)
    return entry


def test_readers_of_a_result_over_the_cap_see_it_unreadable(ledger: Ledger, oversized: Any, cli: Any) -> None:
    entry = ledger.get(oversized.entry_id)
    with pytest.raises(ArtifactTooLargeError, match="it is not read"):
        ledger.verdict_result(entry)
    with pytest.raises(InputError, match="more than a verdict's result may"):
        ledger.replay_verdict(entry.entry_id)
    with pytest.raises(InputError, match="more than a verdict's result may"):
        _vsa(ledger, entry)
    r = cli("verdict", "replay", entry.entry_id)
    assert r.code == 2 and "more than a verdict" in (r.out + r.err), r.out + r.err


def test_the_entry_page_of_a_result_over_the_cap_says_unreadable(
    ledger: Ledger, oversized: Any, home: Path
) -> None:
    app = create_app(ApiSettings(home=str(home), public_reads=True), ledger=ledger)
    with TestClient(app) as client:
        page = client.get(f"/entries/{oversized.entry_id}")
        assert page.status_code == 200, page.text[:300]
        assert "cannot be read" in page.text and "more than a verdict" in page.text
        whole = client.get("/")
        assert whole.status_code == 200 and "result unreadable" in whole.text


def test_an_ingest_refused_for_size_is_never_a_server_error(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refusal is an InputError (too large), what the adapters answer as 413 / exit 2, not a crash."""
    digest, art = _put(ledger, {**RESULT, "pad": "y" * 500})
    monkeypatch.setattr(verdict_mod, "MAX_RESULT_BYTES", 100)
    with pytest.raises(ArtifactTooLargeError) as info:
        _record(ledger, _payload(result_digest=digest), [art])
    assert isinstance(info.value, InputError) and info.value.code == "artifact-too-large"
