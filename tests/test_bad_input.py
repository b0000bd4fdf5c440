"""Every refusal on ingest: a clear one-line error with a stable code, exit 2, and the ledger unchanged."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest

from ledger.entries import validate_payload
from ledger.errors import SchemaError
from ledger.service import Ledger
from ledger.signing import SigningKey, sign_envelope


@pytest.fixture
def ready(cli, home: Path, tmp_path: Path):  # type: ignore[no-untyped-def]
    assert cli("init").code == 0
    assert cli("keys", "new", "hostA", "--role", "collector").code == 0
    assert cli("keys", "new", "rev", "--role", "reviewer").code == 0
    first = cli(
        "record", "note", "-s", "campaign=c", "--data", '{"text": "first"}', "--key", "hostA", "--json"
    )
    return first.json()["id"]


def assert_unchanged(cli, before: int) -> None:  # type: ignore[no-untyped-def]
    ver = cli("verify", "--json").json()
    assert ver["ok"] is True, ver
    assert ver["size"] == before


def _launch_with(field: str) -> list[str]:
    """``ledger record engine.launch`` of an otherwise valid ready launch with one more ``field``."""
    data = '{"engine": "vllm", "command": ["vllm"], "started_at": "2026-09-10T10:00:00Z", "ready": true, '
    return ["record", "engine.launch", "-s", "campaign=c", "-s", "host=h", "--data", data + field + "}",
            "--key", "hostA"]  # fmt: skip


CASES = {
    "unknown-kind": (
        ["record", "gpu.magic", "-s", "campaign=c", "--data", "{}", "--key", "hostA"],
        "unknown-kind",
    ),
    "missing-required-field": (
        ["record", "engine.launch", "-s", "campaign=c", "--data", '{"engine": "vllm"}', "--key", "hostA"],
        "schema-violation",
    ),
    "wrong-field-type": (
        [
            "record",
            "job",
            "-s",
            "campaign=c",
            "--data",
            '{"job_id": "j", "state": "killed", "exit_code": "one-four-three"}',
            "--key",
            "hostA",
        ],
        "schema-violation",
    ),
    "unknown-field": (
        ["record", "note", "-s", "campaign=c", "--data", '{"text": "x", "colour": "red"}', "--key", "hostA"],
        "schema-violation",
    ),
    "no-subject": (["record", "note", "--data", '{"text": "x"}', "--key", "hostA"], "schema-violation"),
    "malformed-json": (
        ["record", "note", "-s", "campaign=c", "--data", '{"text": ', "--key", "hostA"],
        "non-canonical-json",
    ),
    "wrong-role-review-by-collector": (
        [
            "record",
            "review",
            "-s",
            "campaign=c",
            "--ref",
            "reviews={first}",
            "--data",
            '{"result": "PASS"}',
            "--key",
            "hostA",
        ],
        "wrong-role",
    ),
    "collector-signs-supersession": (
        [
            "record",
            "supersession",
            "-s",
            "campaign=c",
            "--ref",
            "supersedes={first}",
            "--data",
            '{"reason": "x"}',
            "--key",
            "hostA",
        ],
        "wrong-role",
    ),
    "collector-manages-keys": (["keys", "new", "evil", "--role", "admin", "--admin", "hostA"], "wrong-role"),
    "dangling-ref": (
        [
            "record",
            "supersession",
            "-s",
            "campaign=c",
            "--ref",
            "supersedes=" + "ab" * 32,
            "--data",
            '{"reason": "x"}',
            "--key",
            "rev",
        ],
        "dangling-ref",
    ),
    "unknown-signing-key": (
        ["record", "note", "-s", "campaign=c", "--data", '{"text": "x"}', "--key", "nobody"],
        "key-not-found",
    ),
    "artifact-not-in-store": (
        [
            "record",
            "note",
            "-s",
            "campaign=c",
            "--data",
            '{"text": "x"}',
            "--artifact",
            "log=blake3:" + "0" * 64,
            "--key",
            "hostA",
        ],
        "artifact-missing",
    ),
    # regression: negative or impossible numbers a gate or rule reads were stored as given
    "negative-time-to-ready": (_launch_with('"time_to_ready_s": -40.0'), "schema-violation"),
    "attempt-zero": (_launch_with('"attempt": 0'), "schema-violation"),
    "negative-signal": (_launch_with('"signal": -6'), "schema-violation"),
    "http-status-not-a-status": (
        [
            "record",
            "health.probe",
            "-s",
            "campaign=c",
            "-s",
            "host=h",
            "--data",
            '{"endpoint": "/health", "ok": false, "http_status": -1}',
            "--key",
            "hostA",
        ],
        "schema-violation",
    ),
    # found by an audit: a number with more digits than a float keeps was signed rounded, unseen
    "more-digits-than-a-float-keeps": (
        [
            "record",
            "job",
            "-s",
            "campaign=c",
            "--data",
            '{"job_id": "j", "state": "running", "lease_seconds": 60.000000000000000001}',
            "--key",
            "hostA",
        ],
        "bad-input",
    ),
    # found by an audit: a lease of 1e12 s was stored, then every verdict and routing check crashed
    # (OverflowError) computing when it ran out
    "lease-past-a-year": (
        [
            "record",
            "job",
            "-s",
            "campaign=c",
            "--data",
            '{"job_id": "j", "state": "running", "lease_seconds": 1e12}',
            "--key",
            "hostA",
        ],
        "schema-violation",
    ),
    # found by an audit: a reason of zero-width characters withdrew a failure, saying nothing visible
    **{
        f"invisible-supersession-reason-{name}": (
            [
                "record",
                "supersession",
                "-s",
                "campaign=c",
                "--ref",
                "supersedes={first}",
                "--data",
                json.dumps({"reason": text}),
                "--key",
                "rev",
            ],
            "schema-violation",
        )
        for name, text in (
            ("zwsp", "\u200b"),
            ("word-joiner", "\u2060 \u2060"),
            ("hangul-filler", "\u3164"),
            ("nbsp", "\u00a0"),
            ("combining", "\u0301"),
        )
    },
    "bad-subject-syntax": (
        ["record", "note", "-s", "campaign", "--data", '{"text": "x"}', "--key", "hostA"],
        "bad-input",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_refused_and_ledger_unchanged(cli, ready: str, case: str) -> None:  # type: ignore[no-untyped-def]
    args, code = CASES[case]
    before = cli("verify", "--json").json()["size"]
    r = cli(*[a.replace("{first}", ready) for a in args])
    assert r.code == 2, (r.out, r.err)
    assert f"error[{code}]" in r.err
    assert len(r.err.strip().splitlines()) == 1
    assert_unchanged(cli, before)


def _append_raw(home: Path, doc: dict) -> None:  # type: ignore[type-arg]
    led = Ledger.open(home)
    try:
        led.append([json.dumps(doc).encode()])
    finally:
        led.close()


def test_bad_signature_refused(cli, ready: str, home: Path) -> None:  # type: ignore[no-untyped-def]
    from ledger.errors import SignatureError

    led = Ledger.open(home)
    st = led.make_statement("note", {"campaign": "c"}, {"text": "genuine"})
    doc = led.sign(st, "hostA").to_json()
    forged = dict(st, payload={"text": "forged"})
    from ledger.canonical import canonical_bytes

    doc["payload"] = base64.b64encode(canonical_bytes(forged)).decode()
    before = led.size()
    with pytest.raises(SignatureError):
        led.append([doc])
    assert led.size() == before
    assert_unchanged(cli, before)


def test_unknown_signer_refused(cli, ready: str, home: Path) -> None:  # type: ignore[no-untyped-def]
    from ledger.errors import UnknownSignerError

    led = Ledger.open(home)
    st = led.make_statement("note", {"campaign": "c"}, {"text": "from a stranger"})
    env = sign_envelope(st, SigningKey.generate("stranger"))
    with pytest.raises(UnknownSignerError):
        led.append([env])
    assert_unchanged(cli, led.size())


def test_artifact_size_mismatch_refused(cli, ready: str, home: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from ledger.entries import ArtifactRef
    from ledger.errors import IntegrityError

    led = Ledger.open(home)
    f = tmp_path / "a.log"
    f.write_bytes(os.urandom(100))
    real = led.artifact_ref("log", f)
    lie = ArtifactRef(name="log", digest=real.digest, size=real.size + 1)
    before = led.size()
    with pytest.raises(IntegrityError):
        led.record("note", {"campaign": "c"}, {"text": "x"}, key="hostA", artifacts=[lie])
    assert_unchanged(cli, before)


def test_batch_with_one_bad_entry_stores_nothing(cli, ready: str, home: Path) -> None:  # type: ignore[no-untyped-def]
    from ledger.errors import UnknownSignerError

    led = Ledger.open(home)
    good = [
        led.sign(led.make_statement("note", {"campaign": "c"}, {"text": f"ok {i}"}), "hostA")
        for i in range(5)
    ]
    bad = sign_envelope(
        led.make_statement("note", {"campaign": "c"}, {"text": "bad"}), SigningKey.generate("x")
    )
    before = led.size()
    with pytest.raises(UnknownSignerError):
        led.append([*good, bad])
    assert led.size() == before
    assert_unchanged(cli, before)


def test_resent_envelope_is_recognised_not_duplicated(ledger: Ledger) -> None:
    ledger.new_key("hostA", ["collector"])
    env = ledger.sign(ledger.make_statement("note", {"campaign": "c"}, {"text": "once"}), "hostA")
    first = ledger.append([env])[0]
    again = ledger.append([env])[0]
    assert again.duplicate and again.entry_id == first.entry_id and again.seq == first.seq
    assert ledger.size() == first.seq + 1


_FILE = {"path": "model.safetensors", "size": 1, "sha256": "a" * 64, "blake3": "blake3:" + "b" * 64}


@pytest.mark.parametrize(
    ("files", "problem"),
    [
        pytest.param([_FILE, {**_FILE, "sha256": "c" * 64}], "listed more than once", id="one-file-twice"),
        pytest.param([{**_FILE, "verified": True}], "no expected digest", id="verified-against-nothing"),
        pytest.param(
            [{**_FILE, "verified": True, "lfs": True, "expected": "d" * 64}],
            "is not its sha256",
            id="lfs-blob-name-not-its-digest",
        ),
    ],
)
def test_a_model_pin_that_contradicts_itself_is_refused_at_ingest(
    files: list[dict[str, Any]], problem: str
) -> None:
    """Regression: a pin could list one file twice with two digests (the last won), or claim a file
    verified against an expected digest that is not the one computed."""
    payload = {"root": "/models/m", "files": files, "total_size": sum(f["size"] for f in files)}
    with pytest.raises(SchemaError, match=problem):
        validate_payload("model.pin", 1, payload)
    good = {"root": "/models/m", "files": [{**_FILE, "verified": True, "lfs": True, "expected": "a" * 64}]}
    validate_payload("model.pin", 1, {**good, "total_size": 1})  # the neighbour that holds


def test_record_data_is_judged_in_the_canonical_form_the_log_signs(cli, ready: str) -> None:  # type: ignore[no-untyped-def]
    """Found by an audit: `ledger record --data` refused ``143.0`` for an integer field while an API client's
    signed entry carrying the same statement (RFC 8785 writes 143.0 as 143) was accepted. The CLI judges
    the canonical form, as the log signs it; a fraction stays refused."""
    data = '{"job_id": "j", "state": "killed", "exit_code": 143.0}'
    ok = cli("record", "job", "-s", "campaign=c", "--data", data, "--key", "hostA", "--json")
    assert ok.code == 0, ok.err
    shown = cli("show", ok.json()["id"], "--json").json()
    assert shown["payload"]["exit_code"] == 143 and type(shown["payload"]["exit_code"]) is int
    bad = cli("record", "job", "-s", "campaign=c", "--data",
              '{"job_id": "j", "state": "killed", "exit_code": 143.5}', "--key", "hostA")  # fmt: skip
    assert bad.code == 2 and "error[schema-violation]" in bad.err


@pytest.mark.parametrize("reason", ["relaunched: \u200bthe port was taken", "é", "修正", "x"])
def test_a_visible_supersession_reason_is_accepted(cli, ready: str, reason: str) -> None:  # type: ignore[no-untyped-def]
    """Neighbour: a reason that shows something, in any script, with invisible characters among it."""
    r = cli("record", "supersession", "-s", "campaign=c", "--ref", f"supersedes={ready}",
            "--data", json.dumps({"reason": reason}), "--key", "rev")  # fmt: skip
    assert r.code == 0, r.err
