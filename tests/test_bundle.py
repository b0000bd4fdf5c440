"""Offline reviewer bundles (`ledger bundle create | verify | report`): a bundle re-derives the live
ledger's verdict byte for byte in a fresh process with the home deleted, and every tampering is named."""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ledger.bundle import (
    MANIFEST_SIGNATURE,
    BundleLedger,
    BundleProblem,
    MemoryRepo,
    MemoryStore,
    scrub_private_paths,
    sign_manifest,
    verify_bundle,
)
from ledger.canonical import canonical_bytes, parse_canonical
from ledger.cli import main
from ledger.hashing import blake3_hex
from ledger.policy.fixtures import build_fixture_ledger
from ledger.policy.snapshot import read_snapshot_rows
from ledger.service import Ledger

REPO = Path(__file__).resolve().parents[1]
POLICY_DIR = REPO / "policies"
QUALIFIED = POLICY_DIR / "fixtures" / "backend-qualification" / "qualified.toml"
SUBJECT = "campaign=vllm-embed"
HOME_PATH = "/home/alice/.cache/huggingface/hub/models--org--name/snapshots/0123abcd"
TOKEN = "hf_" + "Q7pX2mZ9kL4vB8nR3tY6wC1dF5gH0jK2sA"


@dataclass
class Made:
    home: Path
    bundle: Path
    redacted: Path
    verdict_bytes: bytes  # `ledger verdict --json` of the live ledger (without the newline)
    vkey: str
    other_checkpoint: str  # a checkpoint of the same log at another size, signed by the log key
    used: list[str]


def _run(*args: str) -> tuple[int, str, str]:
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    old = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        code = main(list(args))
    finally:
        sys.stdout, sys.stderr = old
        out.flush()
        err.flush()
    return code, out.buffer.getvalue().decode(), err.buffer.getvalue().decode()  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Made:
    tmp = tmp_path_factory.mktemp("bundle")
    home = tmp / "home"
    led, _spec, _builder = build_fixture_ledger(QUALIFIED, home, POLICY_DIR, init=Ledger.init)
    try:
        log = tmp / "stderr.log"
        log.write_text(f"INFO loading {HOME_PATH}/model.safetensors\nWARN HF_TOKEN={TOKEN} in env\n")
        st = led.make_statement(
            "note",
            {"campaign": "vllm-embed", "host": "gpu-box-1"},
            {"text": "engine stderr of the qualifying run"},
            artifacts=[led.artifact_ref("stderr.log", log)],
            collected_at="2026-09-10T10:55:00.000000Z",
        )
        # logged like the fixture's entries: the reference time stays within the evidence's freshness
        led.append([led.sign(st, led.admin_key_name)], logged_at=datetime(2026, 9, 10, 10, 55, tzinfo=UTC))
        other = led.signed_checkpoint(size=led.size() - 1).note
        vkey = led.verifier_key()
    finally:
        led.close()
    code, out, err = _run("--home", str(home), "verdict", "--subject", SUBJECT, "--json")
    assert code == 0, err
    verdict_bytes = out.encode().rstrip(b"\n")
    bundle, redacted = tmp / "review.zip", tmp / "review-redacted.zip"
    for path, extra in ((bundle, []), (redacted, ["--redact", "stderr.log"])):
        code, out, err = _run(
            "--home", str(home), "bundle", "create", "--subject", SUBJECT, str(path), *extra
        )
        assert code == 0, err
    return Made(home, bundle, redacted, verdict_bytes, vkey, other, json.loads(verdict_bytes)["used"])


def _members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as zf:
        return {n: zf.read(n) for n in zf.namelist()}


def _manifest(members: dict[str, bytes]) -> dict[str, object]:
    m = parse_canonical(members["manifest.json"])
    assert isinstance(m, dict)
    return m


def _rewrite(members: dict[str, bytes], dest: Path) -> Path:
    with zipfile.ZipFile(dest, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return dest


def _codes(path: Path, public_key: str | None = None) -> set[str]:
    return {p["code"] for p in verify_bundle(path, public_key=public_key).problems}


def test_bundle_verifies_offline_in_a_fresh_process_with_the_home_deleted(made: Made, tmp_path: Path) -> None:
    """The bundled verdict is `ledger verdict --json` of the live ledger, and a fresh `ledger bundle
    verify` — no home (deleted), no database, cwd an empty temp dir — re-derives it byte for byte."""
    members = _members(made.bundle)
    assert members["verdict.json"] == made.verdict_bytes
    copy = tmp_path / "copy.zip"
    shutil.copy(made.bundle, copy)
    gone = tmp_path / "gone-home"
    shutil.copytree(made.home, gone)
    shutil.rmtree(gone)  # the verifier has no home: LEDGER_HOME names a folder that does not exist
    cwd = tmp_path / "empty"
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGER_")}
    env.update(LEDGER_HOME=str(gone), XDG_DATA_HOME=str(tmp_path / "xdg"), HOME=str(tmp_path / "nohome"))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ledger.cli",
            "bundle",
            "verify",
            str(copy),
            "--public-key",
            made.vkey,
            "--json",
        ],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["ok"] is True and report["problems"] == []
    assert report["log_key"] == "given"
    live_digest = "blake3:" + blake3_hex(made.verdict_bytes)
    assert report["rederived_digest"] == report["result_digest"] == live_digest
    assert report["verdict"] == "QUALIFIED"
    assert not gone.exists() and not (tmp_path / "xdg").exists() and list(cwd.iterdir()) == []


def test_bundle_bytes_are_reproducible(made: Made, tmp_path: Path) -> None:
    again = tmp_path / "again.zip"
    assert _run("--home", str(made.home), "bundle", "create", "--subject", SUBJECT, str(again))[0] == 0
    assert again.read_bytes() == made.bundle.read_bytes()


def test_bundle_holds_what_the_verdict_reads(made: Made) -> None:
    members = _members(made.bundle)
    manifest = _manifest(members)
    ids = {e["id"] for e in manifest["entries"]}  # type: ignore[attr-defined]
    assert set(made.used) <= ids
    kinds = {e["kind"] for e in manifest["entries"]}  # type: ignore[attr-defined]
    assert {"key.enrol", "review", "acceptance", "job", "note"} <= kinds
    (art,) = manifest["artifacts"]  # type: ignore[misc]
    assert art["names"] == ["stderr.log"] and art["redacted"] is False
    assert TOKEN.encode() in members[art["file"]]
    assert manifest["policy"]["digest"] == json.loads(made.verdict_bytes)["policy"]["digest"]  # type: ignore[index]
    assert members[manifest["policy"]["file"]] == (POLICY_DIR / "backend-qualification.toml").read_bytes()  # type: ignore[index]


def test_memory_repo_reads_the_rows_the_database_gives(made: Made, tmp_path: Path) -> None:
    """One port, two implementations: the snapshot rows through the bundle's in-memory repo are the
    database's (drift in either fails here)."""
    home = tmp_path / "h"
    shutil.copytree(made.home, home)
    led = Ledger.open(home)
    try:
        live = read_snapshot_rows(led, {"campaign": "vllm-embed"}, led.size())
        from ledger.bundle import _Row
        from ledger.log import parse_checkpoint

        manifest = _manifest(_members(made.bundle))
        members = _members(made.bundle)
        rows = []
        for item in manifest["entries"]:  # type: ignore[attr-defined]
            env = members[item["envelope"]]
            st = json.loads(base64.b64decode(json.loads(env)["payload"]))
            rec = json.loads(members[item["record"]])
            refs = tuple((r["rel"], r["id"]) for r in st.get("refs", []))
            rows.append(
                _Row(
                    item["seq"],
                    item["id"],
                    rec["kind"],
                    rec["signer"],
                    rec["logged_at"],
                    env,
                    st["subject"],
                    refs,
                )
            )
        cp = parse_checkpoint(members["checkpoint.txt"].decode(), led.note_key_name, led.log_public_key())
        mem = BundleLedger(MemoryRepo(rows, cp), MemoryStore({}, set()))
        got = read_snapshot_rows(mem, {"campaign": "vllm-embed"}, cp.size)
    finally:
        led.close()
    assert got.rows == live.rows
    assert (got.candidates, got.hosts, got.host_rows) == (live.candidates, live.hosts, live.host_rows)
    assert got.reference_time == live.reference_time
    assert got.keyring.keys.keys() == live.keyring.keys.keys()


# --- tampering: each case is named and its problem code is stable ---------------------------------------


def _envelope_byte(m: dict[str, bytes], made: Made) -> None:
    manifest = _manifest(m)
    item = next(e for e in manifest["entries"] if e["kind"] == "engine.launch")  # type: ignore[attr-defined]
    env = bytearray(m[item["envelope"]])
    i = env.index(b'"payload":"') + 20
    env[i] = ord("A") if env[i] != ord("A") else ord("B")
    m[item["envelope"]] = bytes(env)


def _artifact(m: dict[str, bytes], made: Made) -> None:
    name = next(n for n in m if n.startswith("artifacts/"))
    m[name] = m[name].replace(b"WARN", b"INFO")


def _policy_bytes(m: dict[str, bytes], made: Made) -> None:
    name = "policy/backend-qualification.toml"
    m[name] = m[name].replace(b"benchmark_repetitions = 2", b"benchmark_repetitions = 1")
    assert m[name] != (POLICY_DIR / "backend-qualification.toml").read_bytes()


def _swapped_checkpoint(m: dict[str, bytes], made: Made) -> None:
    m["checkpoint.txt"] = made.other_checkpoint.encode()


def _removed_used_entry(m: dict[str, bytes], made: Made) -> None:
    manifest = _manifest(m)
    entries = manifest["entries"]
    victim = next(e for e in entries if e["kind"] == "acceptance")  # type: ignore[attr-defined]
    assert victim["id"] in made.used
    manifest["entries"] = [e for e in entries if e is not victim]  # type: ignore[attr-defined]
    del m[victim["envelope"]], m[victim["record"]]
    m["manifest.json"] = canonical_bytes(manifest)


TAMPERS: dict[str, tuple[Callable[[dict[str, bytes], Made], None], set[str]]] = {
    "altered-envelope-byte": (_envelope_byte, {BundleProblem.ENVELOPE_DIGEST, BundleProblem.VERDICT_DIFFERS}),
    "altered-artifact": (_artifact, {BundleProblem.ARTIFACT_DIGEST, BundleProblem.VERDICT_DIFFERS}),
    "altered-policy-bytes": (_policy_bytes, {BundleProblem.POLICY_DIGEST, BundleProblem.VERDICT_DIFFERS}),
    "swapped-checkpoint": (
        _swapped_checkpoint,
        {BundleProblem.CHECKPOINT_MISMATCH, BundleProblem.INCLUSION_PROOF},
    ),
    "removed-entry-the-verdict-used": (
        _removed_used_entry,
        {BundleProblem.ENTRY_ABSENT, BundleProblem.VERDICT_DIFFERS},
    ),
}


@pytest.mark.parametrize("case", sorted(TAMPERS))
def test_tampered_bundle_is_named_and_exits_1(case: str, made: Made, tmp_path: Path) -> None:
    edit, expected = TAMPERS[case]
    members = _members(made.bundle)
    edit(members, made)
    bad = _rewrite(members, tmp_path / f"{case}.zip")
    codes = _codes(bad, made.vkey)
    assert {str(c) for c in expected} <= codes, codes
    code, out, _err = _run("bundle", "verify", str(bad), "--public-key", made.vkey)
    assert code == 1
    for c in expected:
        assert str(c) in out


def test_untampered_rewrite_still_verifies(made: Made, tmp_path: Path) -> None:
    """The tamper cases fail because of their edit, not because the ZIP was rewritten."""
    same = _rewrite(_members(made.bundle), tmp_path / "same.zip")
    assert _codes(same, made.vkey) == set()


def test_checkpoint_signed_by_another_key_is_refused(made: Made, tmp_path: Path) -> None:
    from ledger.log import sign_checkpoint
    from ledger.signing import SigningKey

    members = _members(made.bundle)
    manifest = _manifest(members)
    cp = manifest["checkpoint"]
    forged = sign_checkpoint(
        str(manifest["log"]["origin"]),  # type: ignore[index]
        int(cp["size"]),  # type: ignore[index]
        bytes.fromhex(cp["root"]),  # type: ignore[index]
        SigningKey.generate("forger"),
        key_name=str(manifest["log"]["origin"]),  # type: ignore[index]
    )
    members["checkpoint.txt"] = forged.note.encode()
    bad = _rewrite(members, tmp_path / "forged.zip")
    assert BundleProblem.CHECKPOINT_SIGNATURE in _codes(bad, made.vkey)


def test_cosignature_lines_of_the_checkpoint_are_kept_and_do_not_break_it(made: Made, tmp_path: Path) -> None:
    members = _members(made.bundle)
    note = members["checkpoint.txt"].decode()
    members["checkpoint.txt"] = (
        note + "\u2014 witness.example/w1 AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n"
    ).encode()
    assert _codes(_rewrite(members, tmp_path / "cosigned.zip"), made.vkey) == set()


def test_redacted_artifact_the_policy_needs_fails_closed(made: Made) -> None:
    """The acceptance policy re-hashes every stored artifact of the evidence (`artifacts = "verify"`): a
    redacted one cannot be checked, so the re-derivation rejects its entry and says so — never a pass."""
    manifest = _manifest(_members(made.redacted))
    (art,) = manifest["artifacts"]  # type: ignore[misc]
    assert art["redacted"] is True and art["file"] is None
    assert not any(TOKEN.encode() in data for data in _members(made.redacted).values())
    report = verify_bundle(made.redacted, public_key=made.vkey)
    codes = {p["code"] for p in report.problems}
    assert BundleProblem.ARTIFACT_REDACTED in codes
    assert BundleProblem.VERDICT_DIFFERS in codes
    assert not report.ok
    code, out, _ = _run("bundle", "verify", str(made.redacted))
    assert code == 1 and "bundle-artifact-redacted" in out


def test_redact_names_an_artifact_or_is_refused(made: Made, tmp_path: Path) -> None:
    code, _out, err = _run(
        "--home", str(made.home), "bundle", "create", "--subject", SUBJECT, str(tmp_path / "x.zip"),
        "--redact", "stderr.txt",
    )  # fmt: skip
    assert code == 2 and "stderr.txt" in err
    assert not (tmp_path / "x.zip").exists()


def test_public_report_from_a_redacted_bundle_names_no_private_path_or_token(
    made: Made, tmp_path: Path
) -> None:
    md = tmp_path / "report.md"
    assert _run("bundle", "report", str(made.redacted), "--out", str(md), "--public-key", made.vkey)[0] == 0
    code, js, _ = _run("bundle", "report", str(made.redacted), "--json")
    assert code == 0
    for text in (md.read_text(), js):
        assert HOME_PATH not in text and "/home/alice" not in text
        assert TOKEN not in text and "hf_" not in text
        assert str(made.home) not in text and str(tmp_path) not in text
    body = json.loads(js)
    assert body["verdict"] == "QUALIFIED"
    assert [g["name"] for g in body["gates"]][:2] == ["host-prerequisites", "model-pinned"]
    assert body["artifacts"][0]["redacted"] is True
    assert "bundle-artifact-redacted" in {p["code"] for p in body["check"]["problems"]}
    assert "# QUALIFIED" in md.read_text() and "| benchmark | passed |" in md.read_text()


def test_scrub_private_paths() -> None:
    assert scrub_private_paths(f"read {HOME_PATH}/x.bin failed") == "read [path] failed"
    assert scrub_private_paths("C:\\Users\\alice\\model.gguf") == "[path]"
    kept = "ttft_ms.p95@c4 2100 > 2000; GET http://127.0.0.1:8081/health 200; 1/4/32"
    assert scrub_private_paths(kept) == kept


def test_not_a_bundle_is_a_usage_error(tmp_path: Path) -> None:
    junk = tmp_path / "junk.zip"
    junk.write_bytes(b"not a zip")
    code, _out, err = _run("bundle", "verify", str(junk))
    assert code == 2 and "bad-bundle" in err


@pytest.mark.parametrize(
    ("fixture", "subject"),
    [
        ("seed003-gpu-hang", None),
        ("xid79_fallen_off_bus", None),
        ("seed000-runtime-reliability", None),
        ("seed003-review", None),
    ],
)
def test_fixture_ledgers_round_trip(fixture: str, subject: dict[str, str] | None, tmp_path: Path) -> None:
    """Rejections (supersessions, kills, reviews), kernel logs of the host and artifacts: every shipped
    incident's verdict re-derives from its bundle byte for byte."""
    from ledger.bundle import create_bundle

    path = POLICY_DIR / "fixtures" / "backend-qualification" / f"{fixture}.toml"
    led, spec, _b = build_fixture_ledger(path, tmp_path / "home", POLICY_DIR, init=Ledger.init)
    try:
        subj = subject or {"campaign": spec["defaults"]["subject"]["campaign"]}
        live = led.evaluate_verdict(subj)
        buf = io.BytesIO()
        create_bundle(led, subj, Ledger.load_policy("backend-qualification"), buf)
        vkey = led.verifier_key()
    finally:
        led.close()
    buf.seek(0)
    with zipfile.ZipFile(buf) as zf:
        assert zf.read("verdict.json") == canonical_bytes(live)
    buf.seek(0)
    report = verify_bundle(buf, public_key=vkey)
    assert report.problems == []
    assert report.rederived_digest == report.result_digest == "blake3:" + blake3_hex(canonical_bytes(live))


def test_a_verifier_with_another_catalogue_says_so(made: Made, tmp_path: Path) -> None:
    members = _members(made.bundle)
    manifest = _manifest(members)
    manifest["vocabularies"]["gpu-faults"] = "blake3:" + "0" * 64  # type: ignore[index]
    members["manifest.json"] = canonical_bytes(manifest)
    # signed again by the log key: the vocabulary check alone is under test (unsigned, the manifest's
    # signature is refused too)
    assert _codes(_rewrite(members, tmp_path / "unsigned.zip"), made.vkey) == {
        BundleProblem.VOCABULARY_DIFFERS,
        BundleProblem.MANIFEST_SIGNATURE,
    }
    led = Ledger.open(made.home)
    try:
        members[MANIFEST_SIGNATURE] = sign_manifest(
            members["manifest.json"], led.signing_key(led.log_key_name)
        )
    finally:
        led.close()
    assert _codes(_rewrite(members, tmp_path / "vocab.zip"), made.vkey) == {BundleProblem.VOCABULARY_DIFFERS}


def test_the_stored_checkpoint_note_is_bundled_with_its_cosignature_lines(made: Made, tmp_path: Path) -> None:
    home = tmp_path / "h"
    shutil.copytree(made.home, home)
    cosig = "\u2014 witness.example/w1 AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n"
    led = Ledger.open(home)
    try:
        cp = led.signed_checkpoint()
        assert led.repo.checkpoint_root(cp.size) is None  # nothing published at this size yet
        # published as a witnessed log stores it: the log's signature line, then a cosignature line
        with led.repo.append_transaction() as conn:
            led.repo.insert_checkpoint(
                conn, cp.size, cp.root.hex(), cp.note + cosig, "2026-09-10T11:00:00Z", 2
            )
    finally:
        led.close()
    out = tmp_path / "cosigned.zip"
    assert _run("--home", str(home), "bundle", "create", "--subject", SUBJECT, str(out))[0] == 0
    assert _members(out)["checkpoint.txt"].decode() == cp.note + cosig
    assert _codes(out, made.vkey) == set()


def test_another_log_key_is_refused(made: Made) -> None:
    from ledger.log import verifier_key
    from ledger.signing import SigningKey

    origin = str(_manifest(_members(made.bundle))["log"]["origin"])  # type: ignore[index]
    other = verifier_key(origin, SigningKey.generate("other").public)
    codes = _codes(made.bundle, other)
    assert {BundleProblem.CHECKPOINT_SIGNATURE, BundleProblem.LOG_KEY} <= codes
    assert _run("bundle", "verify", str(made.bundle), "--public-key", other)[0] == 1


def test_bundle_verify_judges_the_checkpoint_by_a_trust_policy(made: Made, tmp_path: Path) -> None:
    """`bundle verify --trust-policy`: the bundled checkpoint must carry the policy's witness quorum; each
    missing cosignature is named (`bundle-cosignature-quorum`), and a met quorum adds no problem."""
    from ledger.signing import SigningKey
    from ledger.witness import add_cosignatures, cosign, witness_vkey

    w1, w2 = SigningKey.generate("w1"), SigningKey.generate("w2")
    members = _members(made.bundle)
    note = members["checkpoint.txt"].decode()
    members["checkpoint.txt"] = add_cosignatures(note, [cosign(note, w1, "w.test/a", 1_790_000_000)]).encode()
    cosigned = _rewrite(members, tmp_path / "cosigned.zip")

    def policy(quorum: str) -> Path:
        p = tmp_path / f"policy-{len(quorum)}.txt"
        p.write_text(
            f"log {made.vkey}\nwitness A {witness_vkey('w.test/a', w1.public)}\n"
            f"witness B {witness_vkey('w.test/b', w2.public)}\n{quorum}"
        )
        return p

    one = policy("group G any A B\nquorum G\n")
    both = policy("group G 2 A B\nquorum G\n")
    rc, out, _ = _run("bundle", "verify", str(cosigned), "--trust-policy", str(one), "--json")
    assert rc == 0, out
    rc, out, _ = _run("bundle", "verify", str(cosigned), "--trust-policy", str(both), "--json")
    assert rc == 1
    problems = json.loads(out)["problems"]
    assert {p["code"] for p in problems} == {"bundle-cosignature-quorum"}, problems
    assert any("witness B (w.test/b): no cosignature" in p["message"] for p in problems)
    # the bundle as made (no cosignature at all) misses even a 1-of-2 quorum
    rc, out, _ = _run("bundle", "verify", str(made.bundle), "--trust-policy", str(one), "--json")
    assert rc == 1 and "bundle-cosignature-quorum" in out
    # the text form says the verdict it names is the bundle's claim, not one this check derived
    rc, out, _ = _run("bundle", "verify", str(made.bundle), "--trust-policy", str(one))
    assert rc == 1 and out.startswith("problems: the bundle claims "), out
    rc, out, _ = _run("bundle", "verify", str(made.bundle))
    assert rc == 0 and "an entry of the log it leaves out cannot be seen here" in out, out


def test_every_bundle_problem_code_is_documented() -> None:
    """One vocabulary: each code `bundle verify` can name is in docs/INTEROP.md's table."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "INTEROP.md").read_text()
    assert [p.value for p in BundleProblem if f"`{p.value}`" not in doc] == []
