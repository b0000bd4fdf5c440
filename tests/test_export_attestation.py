"""`ledger export attestation`: in-toto Statement v1 in DSSE, in a Sigstore bundle v0.3 — checked by
libraries that share no code with the ledger (securesystemslib's DSSE, in-toto-attestation's protobuf
Statement and predicates, sigstore's bundle models) and by the JSON schema we publish."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from google.protobuf import json_format
from in_toto_attestation.predicates.test_result.v0 import test_result_pb2
from in_toto_attestation.predicates.vsa.v1 import vsa_pb2
from in_toto_attestation.v1 import statement_pb2
from in_toto_attestation.v1.statement import Statement as InTotoStatement
from securesystemslib.dsse import Envelope as SslibEnvelope
from securesystemslib.signer import SSlibKey

from ledger.entries import parse_time
from ledger.errors import ArtifactMissingError, LedgerError, ProofError, RoleError, SignatureError
from ledger.export import (
    BUNDLE_MEDIA_TYPE,
    ENTRY_PREDICATE,
    ENTRY_SCHEMA,
    INTOTO_PAYLOAD_TYPE,
    TEST_RESULT_PREDICATE,
    VSA_PREDICATE,
    attestation_bundle,
    verify_bundle,
)
from ledger.policy.fixtures import build_fixture_ledger
from ledger.service import Ledger

REPO = Path(__file__).resolve().parents[1]
POLICY_DIR = REPO / "policies"
QUALIFIED = POLICY_DIR / "fixtures" / "backend-qualification" / "qualified.toml"
SUBJECT = {"campaign": "vllm-embed", "backend": "vllm", "model": "Qwen3-Embedding-8B", "host": "gpu-box-1"}


class Built:
    def __init__(self, ledger: Ledger, names: dict[str, str]) -> None:
        self.ledger = ledger
        self.names = names


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    """The QUALIFIED fixture campaign, a recorded verdict, an exporter key, and entries with artifacts."""
    tmp = tmp_path_factory.mktemp("export")
    led, _spec, builder = build_fixture_ledger(QUALIFIED, tmp / "home", POLICY_DIR, init=Ledger.init)
    names = {n: e.entry_id for n, e in builder.names.items()}
    # judged at the fixture's last log time: recorded a minute after it (the clock it is held to), where
    # its evidence is still fresh — on today's clock it is stale, and a stale QUALIFIED is not signed
    head = parse_time(led.query(limit=1, descending=True)[0].logged_at)
    verdict = led.record_verdict(
        led.evaluate_verdict(SUBJECT), key="reviewer", at=head + timedelta(minutes=1)
    )
    names["verdict"] = verdict.entry_id
    led.new_key("exporter", ["exporter"])
    log = tmp / "engine.log"
    log.write_bytes(b"INFO started\nINFO ready on :8000\n" * 50)
    result = tmp / "bench.json"
    result.write_bytes(b'{"requests": 96}\n')
    launch = led.record(
        "engine.launch",
        SUBJECT,
        {"engine": "vllm", "command": ["vllm", "serve"], "started_at": "2026-09-10T10:00:50Z", "ready": True},
        key="collector",
        artifacts=[led.artifact_ref("engine.log", log, sha256=True)],
    )
    names["launch-with-log"] = launch.entry_id
    gate = led.record(
        "gate.result",
        {**SUBJECT, "commit": "abc123"},
        {"gate": "benchmark", "status": "failed", "counts": {"requests": 6}, "reason": "spec mismatch"},
        key="collector",
        artifacts=[led.artifact_ref("bench.json", result)],  # no sha256 recorded: computed on export
    )
    names["gate-failed"] = gate.entry_id
    yield Built(led, names)
    led.close()


def _bundle(built: Built, name: str) -> dict[str, Any]:
    return attestation_bundle(built.ledger, built.names[name], key="exporter")


def _exporter_key(built: Built) -> SSlibKey:
    rec = built.ledger.key_record("exporter")
    return SSlibKey(rec.key_id, "ed25519", "ed25519", {"public": rec.public.raw.hex()})


def _envelope(bundle: dict[str, Any]) -> SslibEnvelope:
    # from_dict rewrites the signature dicts it is given: hand it a copy
    return SslibEnvelope.from_dict(json.loads(json.dumps(bundle["dsseEnvelope"])))


def _statement(bundle: dict[str, Any]) -> dict[str, Any]:
    """The statement as in-toto's own loader reads it (protobuf, unknown fields refused) and validates."""
    payload = base64.b64decode(bundle["dsseEnvelope"]["payload"])
    pb = json_format.Parse(payload, statement_pb2.Statement(), ignore_unknown_fields=False)
    InTotoStatement.copy_from_pb(pb).validate()
    return json.loads(payload)


def test_dsse_envelope_verifies_with_securesystemslib(built: Built) -> None:
    bundle = _bundle(built, "launch")
    env = _envelope(bundle)
    assert env.payload_type == INTOTO_PAYLOAD_TYPE
    key = _exporter_key(built)
    verified = env.verify([key], 1)
    assert key.keyid in verified
    # a changed payload no longer verifies
    tampered = json.loads(json.dumps(bundle["dsseEnvelope"]))
    st = json.loads(base64.b64decode(tampered["payload"]))
    st["predicate"]["payload"]["ready"] = False
    tampered["payload"] = base64.b64encode(json.dumps(st).encode()).decode()
    from securesystemslib.exceptions import VerificationError

    with pytest.raises(VerificationError):
        SslibEnvelope.from_dict(tampered).verify([key], 1)


def test_launch_and_probe_use_our_predicate_and_its_published_schema(built: Built) -> None:
    schema = json.loads(ENTRY_SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    for name, kind in (("launch", "engine.launch"), ("completion", "health.probe"), ("host", "host.probe")):
        st = _statement(_bundle(built, name))
        assert st["_type"] == "https://in-toto.io/Statement/v1"
        assert st["predicateType"] == ENTRY_PREDICATE
        jsonschema.validate(st["predicate"], schema, format_checker=jsonschema.FormatChecker())
        assert st["predicate"]["entry"]["kind"] == kind
        assert st["predicate"]["entry"]["id"] == built.names[name]
        # no artifacts: the entry attests itself, by its envelope's digests
        (subject,) = st["subject"]
        env = built.ledger.get(built.names[name]).envelope
        assert subject["digest"] == {"blake3": built.names[name], "sha256": hashlib.sha256(env).hexdigest()}


def test_schema_refuses_a_predicate_that_is_not_ours(built: Built) -> None:
    schema = json.loads(ENTRY_SCHEMA.read_text())
    st = _statement(_bundle(built, "launch"))
    bad = {**st["predicate"], "extra": 1}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_artifacts_are_subjects_with_sha256_and_blake3(built: Built) -> None:
    led = built.ledger
    for name in ("launch-with-log", "gate-failed"):
        entry = led.get(built.names[name])
        st = _statement(_bundle(built, name))
        (art,) = entry.statement.artifacts
        (subject,) = st["subject"]
        with led.open_artifact(art.digest) as f:
            data = f.read()
        assert subject["name"] == art.name
        assert subject["digest"] == {
            "blake3": art.digest.removeprefix("blake3:"),
            "sha256": hashlib.sha256(data).hexdigest(),
        }
    assert led.get(built.names["gate-failed"]).statement.artifacts[0].sha256 is None  # computed, not recorded


def test_gate_results_are_test_result_predicates(built: Built) -> None:
    passed = _statement(_bundle(built, "benchmark"))
    failed = _statement(_bundle(built, "gate-failed"))
    for st in (passed, failed):
        assert st["predicateType"] == TEST_RESULT_PREDICATE
        json_format.ParseDict(st["predicate"], test_result_pb2.TestResult(), ignore_unknown_fields=False)
    assert passed["predicate"]["result"] == "PASSED"
    assert passed["predicate"]["passedTests"] == ["benchmark"]
    assert failed["predicate"]["result"] == "FAILED"
    assert failed["predicate"]["failedTests"] == ["benchmark"]
    assert failed["predicate"]["configuration"][0]["annotations"]["counts"] == {"requests": 6}


def test_verdicts_are_slsa_verification_summaries(built: Built) -> None:
    st = _statement(_bundle(built, "verdict"))
    assert st["predicateType"] == VSA_PREDICATE
    # SLSA VSA v1 makes verifiedLevels an array; in-toto-attestation 0.9.3's vsa.proto has it as one
    # string, so the binding checks every other field and the spec's array is asserted here
    predicate = dict(st["predicate"])
    assert predicate.pop("verifiedLevels") == ["EVIDENCE_LEDGER_QUALIFIED"]
    vsa = json_format.ParseDict(predicate, vsa_pb2.VerificationSummary(), ignore_unknown_fields=False)
    assert vsa.verification_result == "PASSED"
    assert vsa.time_verified.seconds > 0
    record = built.ledger.get(built.names["verdict"]).statement.payload
    algo, _, hexd = record["policy"]["digest"].partition(":")
    assert dict(vsa.policy.digest) == {algo: hexd}
    used = {a.uri.rsplit(":", 1)[1] for a in vsa.input_attestations if ":entry:" in a.uri}
    assert used == set(built.ledger.verdict_result(built.ledger.get(built.names["verdict"]))["used"])
    checkpoint = [a for a in vsa.input_attestations if ":checkpoint:" in a.uri]
    assert [dict(a.digest) for a in checkpoint] == [{"sha256": record["checkpoint"]["root"]}]
    assert "campaign=vllm-embed" in vsa.resource_uri


def test_bundle_layout_loads_with_sigstore_models(built: Built) -> None:
    from sigstore_models.bundle.v1 import Bundle as BundleModel

    bundle = _bundle(built, "verdict")
    assert bundle["mediaType"] == BUNDLE_MEDIA_TYPE
    model = BundleModel.from_json(json.dumps(bundle))  # strict: unknown fields, wrong types refused
    assert model.verification_material.public_key is not None
    assert model.verification_material.public_key.hint == built.ledger.key_record("exporter").key_id
    (tlog,) = model.verification_material.tlog_entries
    assert tlog.inclusion_proof.checkpoint is not None
    assert model.dsse_envelope is not None and model.dsse_envelope.payload_type == INTOTO_PAYLOAD_TYPE


def test_sigstore_python_refuses_a_key_signed_bundle_offline(built: Built) -> None:
    """sigstore-python verifies certificate (Fulcio) bundles only: a public-key bundle is refused when it
    loads — the limitation docs/INTEROP.md states; the layout itself loads (test above)."""
    from sigstore.models import Bundle, InvalidBundle

    with pytest.raises(InvalidBundle, match="expected certificate"):
        Bundle.from_json(json.dumps(_bundle(built, "launch")))


def test_our_offline_check_of_signature_inclusion_and_checkpoint(built: Built) -> None:
    led = built.ledger
    exporter = led.key_record("exporter").public
    bundle = _bundle(built, "launch")
    checked = verify_bundle(bundle, exporter, led.log_public_key(), led.note_key_name)
    assert checked.entry_id == built.names["launch"]
    assert checked.log_index == led.get(built.names["launch"]).seq
    # another entry's body with this proof fails; so does a statement about another entry
    other = _bundle(built, "host")
    swapped = json.loads(json.dumps(bundle))
    swapped["verificationMaterial"]["tlogEntries"][0]["canonicalizedBody"] = other["verificationMaterial"][
        "tlogEntries"
    ][0]["canonicalizedBody"]
    with pytest.raises(ProofError):
        verify_bundle(swapped, exporter, led.log_public_key(), led.note_key_name)
    mixed = json.loads(json.dumps(other))
    mixed["dsseEnvelope"] = bundle["dsseEnvelope"]
    with pytest.raises(ProofError, match="does not name the logged entry"):
        verify_bundle(mixed, exporter, led.log_public_key(), led.note_key_name)
    with pytest.raises(SignatureError):
        verify_bundle(bundle, led.key_record("collector").public, led.log_public_key(), led.note_key_name)


def test_only_an_exporter_key_signs(built: Built) -> None:
    with pytest.raises(RoleError, match="exporter"):
        attestation_bundle(built.ledger, built.names["launch"], key="collector")


def test_a_missing_artifact_is_an_error_not_a_subject_without_sha256(built: Built, tmp_path: Path) -> None:
    led = built.ledger
    f = tmp_path / "gone.bin"
    f.write_bytes(b"soon gone")
    ref = led.artifact_ref("gone.bin", f)
    e = led.record(
        "gate.result", SUBJECT, {"gate": "semantic", "status": "passed"}, key="collector", artifacts=[ref]
    )
    from ledger.hashing import parse_digest

    led.store._path(parse_digest(ref.digest)).unlink()  # type: ignore[union-attr]  # the filesystem store
    assert not led.has_artifact(ref.digest)
    with pytest.raises(ArtifactMissingError):
        attestation_bundle(led, e.entry_id, key="exporter")


def test_cli_writes_one_bundle_or_json_lines(
    built: Built, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ledger.cli import main

    home = str(built.ledger.home_path)
    out = tmp_path / "launch.intoto.json"
    assert main(["--home", home, "export", "attestation", built.names["launch"], "--out", str(out)]) == 0
    one = json.loads(out.read_bytes())
    assert one["mediaType"] == BUNDLE_MEDIA_TYPE
    capsys.readouterr()
    assert (
        main(["--home", home, "export", "attestation", "-s", "campaign=vllm-embed", "-s", "commit=abc123"])
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["mediaType"] == BUNDLE_MEDIA_TYPE
    assert main(["--home", home, "export", "attestation"]) == 2  # neither an entry nor a subject
    assert main(["--home", home, "export", "attestation", built.names["launch"], "--key", "collector"]) == 2


def test_key_entries_are_not_exported(built: Built) -> None:
    first = built.ledger.get_seq(0)
    assert first.kind.startswith("key.")
    with pytest.raises(LedgerError, match="key entries are not exported"):
        attestation_bundle(built.ledger, first.entry_id, key="exporter")
