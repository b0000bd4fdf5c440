"""Regression of audit 81 F2 (fix100): any bundle broke once the log's last entry held an artifact.

``create_bundle`` adds the entry at ``n - 1`` (its ``logged_at`` is the verdict's reference time) and the key
entries, but bundles artifacts only for the entries the verdict judged; ``verify_bundle`` required every
stored artifact of every bundled entry, so another campaign's ``verdict --record`` (its
``verdict-result.json``) as the last entry made a sound bundle fail (``bundle-artifact-absent``). Both now
read which entries need their artifacts one way (``bundle._judged_entries``): the judged entries' must be
bundled; one bundled for its record alone is checked by record and proof, and its artifact stays out."""

from __future__ import annotations

import io
import json
import zipfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from ledger.bundle import MANIFEST, BundleProblem, create_bundle, verify_bundle
from ledger.canonical import canonical_bytes
from ledger.entries import ArtifactRef, format_time, parse_time
from ledger.policy import evaluate, record_verdict
from ledger.policy.fixtures import build_fixture_ledger
from ledger.policy.loader import load_policy
from ledger.service import Ledger

FIXTURE = Path(__file__).resolve().parent.parent / "policies/fixtures/backend-qualification/qualified.toml"
GOOD = {"campaign": "vllm-embed"}


@pytest.fixture
def led(tmp_path: Path) -> Any:
    ledger, _spec, _b = build_fixture_ledger(FIXTURE, tmp_path / "home", init=Ledger.init)
    yield ledger
    ledger.close()


def _later(led: Ledger, minutes: int) -> Any:
    return parse_time(led.get_seq(led.size() - 1).logged_at) + timedelta(minutes=minutes)


def _record_other_verdict(led: Ledger) -> Any:
    """Another campaign's verdict, recorded as `ledger verdict --record` does: the log's last entry, with
    its result artifact."""
    at = _later(led, 1)
    led.record(
        "note", {"campaign": "other"}, {"text": "started"}, key="operator", collected_at=format_time(at)
    )
    result = evaluate(led, {"campaign": "other"}, load_policy("backend-qualification"))
    return record_verdict(led, result, key="reviewer", at=_later(led, 1))


def _bundle(led: Ledger, tmp_path: Path, subject: dict[str, str] = GOOD) -> Path:
    buf = io.BytesIO()
    create_bundle(led, dict(subject), load_policy("backend-qualification"), buf)
    path = tmp_path / "bundle.zip"
    path.write_bytes(buf.getvalue())
    return path


def test_bundle_verifies_when_the_last_entry_is_another_campaigns_recorded_verdict(
    led: Ledger, tmp_path: Path
) -> None:
    other = _record_other_verdict(led)
    assert led.get_seq(led.size() - 1).entry_id == other.entry_id and other.statement.artifacts
    path = _bundle(led, tmp_path)
    with zipfile.ZipFile(path) as zf:
        manifest = json.loads(zf.read(MANIFEST))
    assert other.entry_id in {e["id"] for e in manifest["entries"]}  # bundled for its log time
    # its artifact stays out: the bundle is private to its subject
    assert other.statement.artifacts[0].digest not in {a["digest"] for a in manifest["artifacts"]}
    report = verify_bundle(path)
    assert report.ok, report.to_json()
    assert report.verdict == evaluate(led, GOOD, load_policy("backend-qualification"))["verdict"]


def _judged_entry_with_artifact(led: Ledger) -> tuple[Any, str]:
    """An entry of the campaign itself that carries a stored artifact (a note with a log attached)."""
    data = b"a log the campaign recorded\n"
    stored = led.store.put_stream(io.BytesIO(data))
    art = ArtifactRef(name="notes.txt", digest=str(stored.digest), size=stored.size, media_type="text/plain")
    at = format_time(_later(led, 1))
    e = led.record(
        "note", dict(GOOD), {"text": "see the log"}, key="operator", artifacts=[art], collected_at=at
    )
    return e, str(stored.digest)


def _drop_artifact(path: Path, digest: str) -> Path:
    """The bundle rewritten without one artifact (bytes and manifest item): a bundle that leaves it out."""
    out = path.with_name("dropped.zip")
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w") as dst:
        manifest = json.loads(src.read(MANIFEST))
        dropped = [a for a in manifest["artifacts"] if a["digest"] == digest]
        assert dropped, "the judged entry's artifact was bundled"
        manifest["artifacts"] = [a for a in manifest["artifacts"] if a["digest"] != digest]
        for info in src.infolist():
            if info.filename == MANIFEST:
                dst.writestr(info, canonical_bytes(manifest))
            elif info.filename != dropped[0]["file"]:
                dst.writestr(info, src.read(info.filename))
    return out


def test_bundle_that_drops_an_artifact_of_a_judged_entry_still_fails(led: Ledger, tmp_path: Path) -> None:
    _entry, digest = _judged_entry_with_artifact(led)
    _record_other_verdict(led)  # the last entry: another campaign's, as above
    path = _bundle(led, tmp_path)
    assert verify_bundle(path).ok
    report = verify_bundle(_drop_artifact(path, digest))
    assert not report.ok
    assert BundleProblem.ARTIFACT_ABSENT in {p["code"] for p in report.to_json()["problems"]}, (
        report.to_json()
    )


def test_bundle_whose_last_entry_is_the_campaigns_own_keeps_requiring_its_artifact(
    led: Ledger, tmp_path: Path
) -> None:
    _entry, digest = _judged_entry_with_artifact(led)  # the last entry, and judged
    path = _bundle(led, tmp_path)
    assert verify_bundle(path).ok
    codes = {p["code"] for p in verify_bundle(_drop_artifact(path, digest)).to_json()["problems"]}
    assert BundleProblem.ARTIFACT_ABSENT in codes


def test_control_bundle_without_artifacts_still_verifies(led: Ledger, tmp_path: Path) -> None:
    report = verify_bundle(_bundle(led, tmp_path))
    assert report.ok and report.verdict == "QUALIFIED"
