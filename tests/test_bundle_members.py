"""fix85 (issue 12, gaps 2 and 3): a reviewer bundle's members are the entries its verdict read, each once.

- A bundle that leaves out an entry its verdict read is refused: one the verdict names by id is named
  (``bundle-entry-absent``); one it read without naming it (a note of the campaign) is counted — the verdict
  records how many entries it read (``counts.considered``), the bundle's rows give fewer — and the verdict
  re-derived from the members differs (``bundle-verdict-differs``).
- `ledger bundle report` headed a bundle holding two `verdict.json` members with the last one (a forged
  verdict) while `bundle verify` refused it (``bundle-member-duplicate``): a bundle with a member name held
  twice, or an entry listed twice, is refused by the report as verify refuses it (``bad-bundle``, exit 2).
- Reordered members and manifest entries are no tampering: still verified and reported.
"""

from __future__ import annotations

import io
import json
import re
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ledger.bundle import (
    MANIFEST,
    MANIFEST_SIGNATURE,
    BundleProblem,
    bundle_report,
    create_bundle,
    sign_manifest,
    verify_bundle,
)
from ledger.canonical import canonical_bytes, parse_canonical
from ledger.errors import BundleError
from ledger.policy.fixtures import build_fixture_ledger
from ledger.policy.loader import load_policy
from ledger.service import Ledger
from tests.test_bundle import _run

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "policies" / "fixtures" / "backend-qualification" / "qualified.toml"
SUBJECT = {"campaign": "vllm-embed"}


@dataclass
class Made:
    path: Path
    members: list[tuple[str, bytes]]  # in ZIP order
    manifest: dict[str, object]
    verdict: dict[str, object]
    note_ids: list[str]  # the campaign's notes: read by the verdict, named by none of its fields
    home: Path


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Made:
    tmp = tmp_path_factory.mktemp("members")
    led, _spec, _b = build_fixture_ledger(FIXTURE, tmp / "home", REPO / "policies", init=Ledger.init)
    try:
        notes = []
        for minute in (55, 56):
            st = led.make_statement(
                "note",
                {**SUBJECT, "host": "gpu-box-1"},
                {"text": f"operator note {minute}"},
                collected_at=f"2026-09-10T10:{minute}:00.000000Z",
            )
            (e,) = led.append(
                [led.sign(st, led.admin_key_name)], logged_at=datetime(2026, 9, 10, 10, minute, tzinfo=UTC)
            )
            notes.append(e.entry_id)
        buf = io.BytesIO()
        create_bundle(led, SUBJECT, load_policy("backend-qualification"), buf)
    finally:
        led.close()
    path = tmp / "review.zip"
    path.write_bytes(buf.getvalue())
    with zipfile.ZipFile(path) as zf:
        members = [(i.filename, zf.read(i)) for i in zf.infolist()]
    files = dict(members)
    manifest = parse_canonical(files["manifest.json"])
    verdict = parse_canonical(files["verdict.json"])
    assert verdict["verdict"] == "QUALIFIED"
    return Made(path, members, manifest, verdict, notes, tmp / "home")


def _zip(members: list[tuple[str, bytes]], dest: Path) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns of a duplicate name: the case made on purpose
        with zipfile.ZipFile(dest, "w") as zf:
            for name, data in members:
                zf.writestr(name, data)
    return dest


def _log_signed(made: Made, manifest: bytes) -> bytes:
    """``manifest.sig`` as the log's operator (who holds the log key) would sign an edited manifest: the
    checks past the signature must hold on their own."""
    led = Ledger.open(made.home)
    try:
        return sign_manifest(manifest, led.signing_key(led.log_key_name))
    finally:
        led.close()


def _edited(
    made: Made,
    edit: Callable[[dict[str, object], list[tuple[str, bytes]]], None],
    dest: Path,
    *,
    resign: bool = True,
) -> Path:
    """The bundle with ``edit`` applied to its manifest and members; ``resign``: the edited manifest
    signed again by the log key (the log's operator), else its signature left as made."""
    manifest = json.loads(json.dumps(made.manifest))
    members = [(n, d) for n, d in made.members if n != MANIFEST]
    edit(manifest, members)
    data = canonical_bytes(manifest)
    if resign:
        members = [(n, _log_signed(made, data) if n == MANIFEST_SIGNATURE else d) for n, d in members]
    return _zip([(MANIFEST, data), *members], dest)


def _drop(entry_id: str) -> Callable[[dict[str, object], list[tuple[str, bytes]]], None]:
    def edit(manifest: dict[str, object], members: list[tuple[str, bytes]]) -> None:
        entries = manifest["entries"]
        assert isinstance(entries, list)
        (victim,) = [e for e in entries if e["id"] == entry_id]
        manifest["entries"] = [e for e in entries if e is not victim]
        members[:] = [(n, d) for n, d in members if n not in (victim["envelope"], victim["record"])]

    return edit


def _codes(path: Path) -> set[str]:
    return {p["code"] for p in verify_bundle(path).problems}


def test_the_untouched_bundle_verifies_and_reports(made: Made, tmp_path: Path) -> None:
    same = _zip(made.members, tmp_path / "same.zip")
    checked = verify_bundle(same)
    assert checked.ok, checked.problems
    assert bundle_report(same, checked)["verdict"] == "QUALIFIED"


# --- gap 2: a member the verdict read, dropped ------------------------------------------------------------


def test_a_bundle_missing_a_note_the_verdict_read_is_refused_counting_it(made: Made, tmp_path: Path) -> None:
    """The note is named by no field of the verdict; the verdict counts it among the entries it read."""
    bad = _edited(made, _drop(made.note_ids[0]), tmp_path / "dropped-note.zip")
    problems = verify_bundle(bad).problems
    absent = [p for p in problems if p["code"] == BundleProblem.ENTRY_ABSENT]
    assert [p["message"] for p in absent] == [
        f"the verdict read {made.verdict['counts']['considered']} entries of the subject, the bundle holds "  # type: ignore[index]
        f"{made.verdict['counts']['considered'] - 1} of them: 1 entry the verdict read is not in the bundle"  # type: ignore[index]
    ]
    assert {p["code"] for p in problems} == {BundleProblem.ENTRY_ABSENT, BundleProblem.VERDICT_DIFFERS}
    code, out, _err = _run("bundle", "verify", str(bad))
    assert code == 1 and BundleProblem.ENTRY_ABSENT in out


def test_a_bundle_missing_an_entry_the_verdict_names_is_refused_naming_it(made: Made, tmp_path: Path) -> None:
    used = made.verdict["used"]
    assert isinstance(used, list)
    bad = _edited(made, _drop(used[0]), tmp_path / "dropped-used.zip")
    problems = verify_bundle(bad).problems
    assert {"code": BundleProblem.ENTRY_ABSENT, "entry": used[0]} in [
        {"code": p["code"], "entry": p.get("entry")} for p in problems
    ]
    assert any(used[0] in p["message"] for p in problems if p["code"] == BundleProblem.ENTRY_ABSENT)


# --- gap 3: a member or an entry twice: verify and report refuse it alike ----------------------------------


def _forged_verdict(made: Made) -> bytes:
    forged = dict(made.verdict)
    forged["verdict"] = "QUALIFIED (forged)"
    return canonical_bytes(forged)


def test_a_duplicated_verdict_member_is_refused_by_report_as_by_verify(made: Made, tmp_path: Path) -> None:
    bad = _zip([*made.members, ("verdict.json", _forged_verdict(made))], tmp_path / "two-verdicts.zip")
    checked = verify_bundle(bad)
    assert BundleProblem.MEMBER_DUPLICATE in {p["code"] for p in checked.problems}
    with pytest.raises(BundleError, match=r"2 files named 'verdict\.json'") as e:
        bundle_report(bad, checked)
    assert BundleProblem.MEMBER_DUPLICATE in e.value.message
    code, out, err = _run("bundle", "report", str(bad))
    assert code == 2, out + err
    assert "forged" not in out + err and "bad-bundle" in err


def test_a_duplicated_verdict_member_first_is_refused_too(made: Made, tmp_path: Path) -> None:
    """Reordered neighbour: the forged copy first (what a reader taking the first member would show)."""
    bad = _zip([("verdict.json", _forged_verdict(made)), *made.members], tmp_path / "first.zip")
    assert BundleProblem.MEMBER_DUPLICATE in _codes(bad)
    with pytest.raises(BundleError, match=r"files named 'verdict\.json'"):
        bundle_report(bad, verify_bundle(bad))


def test_a_duplicated_entry_member_is_refused_by_report_as_by_verify(made: Made, tmp_path: Path) -> None:
    name, data = next((n, d) for n, d in made.members if n.endswith(".envelope.json"))
    bad = _zip([*made.members, (name, data)], tmp_path / "two-envelopes.zip")
    assert BundleProblem.MEMBER_DUPLICATE in _codes(bad)
    with pytest.raises(BundleError, match=re.escape(f"2 files named '{name}'")):
        bundle_report(bad, verify_bundle(bad))


def test_an_entry_listed_twice_in_the_manifest_is_refused_by_report_as_by_verify(
    made: Made, tmp_path: Path
) -> None:
    def edit(manifest: dict[str, object], members: list[tuple[str, bytes]]) -> None:
        entries = manifest["entries"]
        assert isinstance(entries, list)
        again = dict(entries[5])
        again["seq"] = 10**6  # the same id at another seq: which seq the report shows is a guess
        entries.append(again)

    bad = _edited(made, edit, tmp_path / "listed-twice.zip")
    assert BundleProblem.ENTRY_DUPLICATE in _codes(bad)
    with pytest.raises(BundleError, match=BundleProblem.ENTRY_DUPLICATE):
        bundle_report(bad, verify_bundle(bad))


# --- reordered: no tampering ----------------------------------------------------------------------------


def test_reordered_members_and_manifest_entries_still_verify_and_report(made: Made, tmp_path: Path) -> None:
    def edit(manifest: dict[str, object], members: list[tuple[str, bytes]]) -> None:
        entries = manifest["entries"]
        assert isinstance(entries, list)
        entries.reverse()
        members.reverse()

    moved = _edited(made, edit, tmp_path / "reordered.zip")
    checked = verify_bundle(moved)
    assert checked.ok, checked.problems
    body = bundle_report(moved, checked)
    assert body["verdict"] == "QUALIFIED" and body["check"]["ok"] is True
    code, _out, err = _run("bundle", "report", str(moved), "--json")
    assert code == 0, err


# --- a bundle re-made from fewer members: the log's signature over the manifest ---------------------------


def _remade_without(made: Made, entry_id: str, dest: Path, *, resign: bool) -> Path:
    """The bundle re-made from fewer members as a third party can: the entry dropped, ``verdict.json`` set to
    the verdict the verifier re-derives from what is left, the manifest's result digest to match it —
    every check of the members then holds (the pre-signature gap); ``resign``: by the log's operator."""
    from ledger.policy.verdict import result_digest

    dropped = _edited(made, _drop(entry_id), dest.with_suffix(".dropped.zip"), resign=resign)
    rederived = verify_bundle(dropped).rederived
    assert rederived is not None

    def edit(manifest: dict[str, object], members: list[tuple[str, bytes]]) -> None:
        _drop(entry_id)(manifest, members)
        manifest["verdict"] = {**manifest["verdict"], "result_digest": result_digest(rederived)}  # type: ignore[dict-item]
        members[:] = [(n, canonical_bytes(rederived) if n == "verdict.json" else d) for n, d in members]

    return _edited(made, edit, dest, resign=resign)


def test_fix170_a_bundle_remade_from_fewer_members_with_its_verdict_rederived_is_refused(
    made: Made, tmp_path: Path
) -> None:
    """Issue 12: dropping a note the verdict read and re-deriving `verdict.json` from what is left made a
    self-consistent bundle (counts, verdict, digests all agree): only the log can say which members its
    bundle had — the manifest is signed by the log key."""
    bad = _remade_without(made, made.note_ids[0], tmp_path / "remade.zip", resign=False)
    codes = _codes(bad)
    assert codes == {BundleProblem.MANIFEST_SIGNATURE}, codes
    code, out, _err = _run("bundle", "verify", str(bad))
    assert code == 1 and BundleProblem.MANIFEST_SIGNATURE in out


def test_fix170_the_remade_bundle_checks_but_for_the_signature(made: Made, tmp_path: Path) -> None:
    """The neighbour that shows the signature is the only thing that catches it: signed again by the log
    key, the remade bundle passes every other check (what a log operator could do; what witnesses are for)."""
    same = _remade_without(made, made.note_ids[0], tmp_path / "resigned.zip", resign=True)
    assert _codes(same) == set()


@pytest.mark.parametrize(
    "signature",
    [
        "dropped",
        "empty",
        "not-json",
        "entry-payload-type",
        "other-key-id",
        "sig-mistyped",
        "sig-of-another-manifest",
    ],
)
def test_fix170_a_manifest_signature_missing_or_wrong_is_refused(
    made: Made, signature: str, tmp_path: Path
) -> None:
    from ledger.signing import PAYLOAD_TYPE, SigningKey

    files = dict(made.members)
    good = json.loads(files[MANIFEST_SIGNATURE])
    other = canonical_bytes({**made.manifest, "subject": {"campaign": "another"}})
    variants: dict[str, bytes | None] = {
        "dropped": None,
        "empty": b"",
        "not-json": b"signature",
        "entry-payload-type": canonical_bytes({**good, "payloadType": PAYLOAD_TYPE}),
        "other-key-id": sign_manifest(files[MANIFEST], SigningKey.generate("log")),
        "sig-mistyped": canonical_bytes({**good, "sig": 7}),
        "sig-of-another-manifest": _log_signed(made, other),
    }
    data = variants[signature]
    members = [(n, d) for n, d in made.members if n != MANIFEST_SIGNATURE]
    if data is not None:
        members.append((MANIFEST_SIGNATURE, data))
    bad = _zip(members, tmp_path / f"{signature}.zip")
    problems = verify_bundle(bad).problems
    assert {p["code"] for p in problems} == {BundleProblem.MANIFEST_SIGNATURE}, problems
