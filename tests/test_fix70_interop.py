"""fix70 (audit 66, issue 12): exports and bundles a third party checks.

- F1: ``export.verify_bundle`` took a statement about one entry with another entry's log proof whenever the
  statement mentioned the logged id anywhere (a review's statement with the gate result it reviews). The
  statement is now bound by the one field naming its OWN entry (``export._OWN_ENTRY``).
- F2: ``canonicalizedBody`` is the log record (what the Merkle leaf commits), not the envelope; a third
  party checks the record against the proof and fetches the envelope by the record's entry id.
- F3: a reviewer bundle with two members of one name, a member the manifest does not name, an entry listed
  twice, or a non-integer seq / checkpoint size verified ok; each is now named (or refused, exit 2).
- F4: ``bundle verify --public-key @log.pub`` refused the log's own base64 key when its vkey held a ``+``.
- F5: ``ledger verify --database-url`` on a never-migrated or unreachable PostgreSQL printed a traceback
  and exited 1; it is one ``error[…]`` line, exit 2.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import sys
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import blake3
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ledger.bundle import BundleProblem, BundleReport, _log_key, verify_bundle
from ledger.canonical import canonical_bytes, parse_canonical
from ledger.cli import main
from ledger.entries import parse_time
from ledger.errors import BundleError, InputError, ProofError
from ledger.export import (
    ENTRY_PREDICATE,
    INTOTO_PAYLOAD_TYPE,
    TEST_RESULT_PREDICATE,
    VSA_PREDICATE,
    entry_uri,
    subject_bundles,
)
from ledger.export import verify_bundle as verify_attestation
from ledger.log import verifier_key
from ledger.policy.fixtures import build_fixture_ledger
from ledger.service import Ledger
from ledger.signing import PublicKey, SigningKey, pae
from tests.api.conftest import PG_URL, fresh_pg_database

REPO = Path(__file__).resolve().parents[1]
POLICY_DIR = REPO / "policies"
QUALIFIED = POLICY_DIR / "fixtures" / "backend-qualification" / "qualified.toml"
SUBJECT = {"campaign": "vllm-embed", "backend": "vllm", "model": "Qwen3-Embedding-8B", "host": "gpu-box-1"}


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


# --- F1 / F2: attestation bundles ----------------------------------------------------------------------


@dataclass
class Exported:
    led: Ledger
    bundles: list[dict[str, Any]]
    verdict: str


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Exported]:
    """Every entry of the QUALIFIED fixture campaign exported, a recorded verdict among them."""
    tmp = tmp_path_factory.mktemp("fix70-export")
    led, _spec, _builder = build_fixture_ledger(QUALIFIED, tmp / "home", POLICY_DIR, init=Ledger.init)
    # judged at the fixture's last log time: recorded a minute after it (the clock it is held to), where
    # its evidence is still fresh — on today's clock it is stale, and a stale QUALIFIED is not signed
    head = parse_time(led.query(limit=1, descending=True)[0].logged_at)
    verdict = led.record_verdict(
        led.evaluate_verdict(SUBJECT), key="reviewer", at=head + timedelta(minutes=1)
    )
    led.new_key("exporter", ["exporter"])
    bundles = subject_bundles(led, {"campaign": "vllm-embed"}, key="exporter")
    yield Exported(led, bundles, verdict.entry_id)
    led.close()


def _check(ex: Exported, bundle: dict[str, Any]) -> str:
    led = ex.led
    return verify_attestation(
        bundle, led.key_record("exporter").public, led.log_public_key(), led.note_key_name
    ).entry_id


def _logged_id(bundle: dict[str, Any]) -> str:
    body = base64.b64decode(bundle["verificationMaterial"]["tlogEntries"][0]["canonicalizedBody"])
    return str(json.loads(body)["entry_id"])


def _statement(bundle: dict[str, Any]) -> dict[str, Any]:
    return dict(json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"])))


def _resigned(ex: Exported, bundle: dict[str, Any], statement: dict[str, Any]) -> dict[str, Any]:
    """``bundle`` with ``statement`` as its payload, signed by the exporter key again (a statement the
    exporter really signed: only the binding can refuse it)."""
    payload = canonical_bytes(statement)
    sig = ex.led.signing_key("exporter").sign(pae(INTOTO_PAYLOAD_TYPE, payload))
    out = json.loads(json.dumps(bundle))
    out["dsseEnvelope"]["payload"] = base64.b64encode(payload).decode()
    out["dsseEnvelope"]["signatures"][0]["sig"] = base64.b64encode(sig).decode()
    return dict(out)


def _of_type(ex: Exported, ptype: str) -> dict[str, Any]:
    return next(b for b in ex.bundles if _statement(b)["predicateType"] == ptype)


def test_a_statement_paired_with_another_entrys_log_proof_is_refused(exported: Exported) -> None:
    """Every (statement, tlog entry) pair of a real export: the matched ones verify, every mismatched one
    is refused — including a review's statement with the proof of the gate result it reviews."""
    types = {_statement(b)["predicateType"] for b in exported.bundles}
    assert types == {ENTRY_PREDICATE, TEST_RESULT_PREDICATE, VSA_PREDICATE}
    accepted, refused = [], 0
    for s in exported.bundles:
        for t in exported.bundles:
            mixed = json.loads(json.dumps(t))
            mixed["dsseEnvelope"] = s["dsseEnvelope"]
            if s is t:
                accepted.append(_check(exported, mixed) == _logged_id(s))
                continue
            with pytest.raises(ProofError, match="does not name the logged entry"):
                _check(exported, mixed)
            refused += 1
    n = len(exported.bundles)
    assert accepted == [True] * n and refused == n * (n - 1)


def test_a_verdicts_bundle_verifies_naming_itself_as_a_subject(exported: Exported) -> None:
    (bundle,) = [b for b in exported.bundles if _logged_id(b) == exported.verdict]
    assert _check(exported, bundle) == exported.verdict
    uris = [s.get("uri") for s in _statement(bundle)["subject"]]
    assert uris.count(entry_uri(exported.verdict)) == 1


def _other(ex: Exported, bundle: dict[str, Any]) -> str:
    return next(_logged_id(b) for b in ex.bundles if _logged_id(b) != _logged_id(bundle))


def _self_subject(st: dict[str, Any]) -> dict[str, Any]:
    return next(s for s in st["subject"] if str(s.get("uri", "")).startswith(entry_uri("")))


# (predicate type, mutation of the statement's own-entry field): dropped, renamed, mistyped, another's id
Mutation = Callable[[dict[str, Any], str], None]
MUTATIONS: dict[str, tuple[str, Mutation]] = {
    "entry-id-dropped": (ENTRY_PREDICATE, lambda st, o: st["predicate"]["entry"].pop("id")),
    "entry-id-renamed": (
        ENTRY_PREDICATE,
        lambda st, o: st["predicate"]["entry"].update(ident=st["predicate"]["entry"].pop("id")),
    ),
    "entry-id-int": (ENTRY_PREDICATE, lambda st, o: st["predicate"]["entry"].update(id=7)),
    "entry-id-list": (ENTRY_PREDICATE, lambda st, o: st["predicate"]["entry"].update(id=[o])),
    "entry-id-urn": (ENTRY_PREDICATE, lambda st, o: st["predicate"]["entry"].update(id=entry_uri(o))),
    "entry-not-object": (ENTRY_PREDICATE, lambda st, o: st["predicate"].update(entry=o)),
    "entry-id-other": (ENTRY_PREDICATE, lambda st, o: st["predicate"]["entry"].update(id=o)),
    "url-dropped": (TEST_RESULT_PREDICATE, lambda st, o: st["predicate"].pop("url")),
    "url-renamed": (
        TEST_RESULT_PREDICATE,
        lambda st, o: st["predicate"].update(uri=st["predicate"].pop("url")),
    ),
    "url-bare-id": (
        TEST_RESULT_PREDICATE,
        lambda st, o: st["predicate"].update(url=st["predicate"]["url"].rsplit(":", 1)[1]),
    ),
    "url-int": (TEST_RESULT_PREDICATE, lambda st, o: st["predicate"].update(url=5)),
    "url-other": (TEST_RESULT_PREDICATE, lambda st, o: st["predicate"].update(url=entry_uri(o))),
    "vsa-self-dropped": (
        VSA_PREDICATE,
        lambda st, o: st.update(subject=[s for s in st["subject"] if "uri" not in s]),
    ),
    "vsa-self-renamed": (
        VSA_PREDICATE,
        lambda st, o: _self_subject(st).update(url=_self_subject(st).pop("uri")),
    ),
    "vsa-self-bare-id": (
        VSA_PREDICATE,
        lambda st, o: _self_subject(st).update(uri=_self_subject(st)["uri"].rsplit(":", 1)[1]),
    ),
    "vsa-self-other": (VSA_PREDICATE, lambda st, o: _self_subject(st).update(uri=entry_uri(o))),
    "vsa-two-selves": (
        VSA_PREDICATE,
        lambda st, o: st["subject"].append({"name": "x", "uri": entry_uri(o), "digest": {"blake3": o}}),
    ),
    "entry-with-another-entry-subject": (
        ENTRY_PREDICATE,
        lambda st, o: st["subject"].append({"name": "x", "uri": entry_uri(o), "digest": {"blake3": o}}),
    ),
}


@pytest.mark.parametrize("case", sorted(MUTATIONS))
def test_the_own_entry_field_dropped_renamed_mistyped_or_another_entrys_is_refused(
    case: str, exported: Exported
) -> None:
    ptype, mutate = MUTATIONS[case]
    bundle = _of_type(exported, ptype)
    st = _statement(bundle)
    assert _check(exported, _resigned(exported, bundle, st)) == _logged_id(bundle)  # re-signing alone: ok
    mutate(st, _other(exported, bundle))
    with pytest.raises(ProofError, match="does not name the logged entry"):
        _check(exported, _resigned(exported, bundle, st))


@pytest.mark.parametrize(
    ("field", "value"),
    [("predicateType", "https://example.org/other/v1"), ("predicateType", None), ("_type", "other")],
)
def test_an_unknown_statement_or_predicate_type_is_refused(
    field: str, value: Any, exported: Exported
) -> None:
    bundle = _of_type(exported, ENTRY_PREDICATE)
    st = _statement(bundle)
    st[field] = value
    with pytest.raises(InputError):
        _check(exported, _resigned(exported, bundle, st))


def _inclusion_root(index: int, size: int, leaf: bytes, proof: list[bytes]) -> bytes:
    """RFC 9162 §2.1.3.2, written here from the RFC (no ledger code): the root a proof leads to."""
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        assert sn != 0
        if fn % 2 == 1 or fn == sn:
            r = hashlib.sha256(b"\x01" + p + r).digest()
            while fn % 2 == 0 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = hashlib.sha256(b"\x01" + r + p).digest()
        fn >>= 1
        sn >>= 1
    assert sn == 0
    return r


def test_canonicalized_body_is_the_log_record_a_third_party_checks(exported: Exported) -> None:
    """docs/INTEROP.md (fixed): ``canonicalizedBody`` is the log record; the leaf is SHA-256(0x00 || body),
    the proof leads to ``rootHash``; the record names the entry, whose stored envelope (fetched by that id)
    hashes (BLAKE3) to the id and (SHA-256) to what the statement says — checked with hashlib and blake3."""
    for bundle in exported.bundles:
        tlog = bundle["verificationMaterial"]["tlogEntries"][0]
        ip = tlog["inclusionProof"]
        body = base64.b64decode(tlog["canonicalizedBody"])
        record = json.loads(body)
        assert set(record) == {"entry_id", "index", "kind", "logged_at", "signer", "v"}
        assert record["index"] == int(tlog["logIndex"]) == int(ip["logIndex"])
        leaf = hashlib.sha256(b"\x00" + body).digest()
        root = _inclusion_root(
            int(ip["logIndex"]), int(ip["treeSize"]), leaf, [base64.b64decode(h) for h in ip["hashes"]]
        )
        assert root == base64.b64decode(ip["rootHash"])
        envelope = exported.led.get(record["entry_id"]).envelope  # fetched by id
        assert blake3.blake3(envelope).hexdigest() == record["entry_id"]
        assert blake3.blake3(body).hexdigest() != record["entry_id"]  # the body is not the envelope
        st = _statement(bundle)
        sha = hashlib.sha256(envelope).hexdigest()
        if st["predicateType"] == ENTRY_PREDICATE:
            assert st["predicate"]["entry"]["id"] == record["entry_id"]
            assert st["predicate"]["entry"]["envelope_sha256"] == sha
            assert st["predicate"]["entry"]["kind"] == record["kind"]
        selves = [s for s in st["subject"] if s.get("uri") == entry_uri(record["entry_id"])]
        for s in selves:
            assert s["digest"] == {"blake3": record["entry_id"], "sha256": sha}


# --- F3 / F4: reviewer bundles ---------------------------------------------------------------------------


@dataclass
class Made:
    home: Path
    bundle: Path


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Made:
    tmp = tmp_path_factory.mktemp("fix70-bundle")
    led, _spec, _builder = build_fixture_ledger(QUALIFIED, tmp / "home", POLICY_DIR, init=Ledger.init)
    led.close()
    code, _out, err = _run(
        "--home", str(tmp / "home"), "bundle", "create", "-s", "campaign=vllm-embed", str(tmp / "r.zip")
    )
    assert code == 0, err
    return Made(tmp / "home", tmp / "r.zip")


def _members(path: Path) -> list[tuple[str, bytes]]:
    with zipfile.ZipFile(path) as zf:
        return [(i.filename, zf.read(i)) for i in zf.infolist()]


def _write(members: list[tuple[str, bytes]], dest: Path) -> Path:
    with zipfile.ZipFile(dest, "w") as zf:
        for name, data in members:
            zf.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), data)
    return dest


def _codes(path: Path) -> set[str]:
    return {p["code"] for p in verify_bundle(path).problems}


def _with_manifest(made: Made, edit: Callable[[dict[str, Any]], None], dest: Path) -> Path:
    members = _members(made.bundle)
    manifest = parse_canonical(dict(members)["manifest.json"])
    assert isinstance(manifest, dict)
    edit(manifest)
    return _write([(n, canonical_bytes(manifest) if n == "manifest.json" else d) for n, d in members], dest)


def test_an_untouched_rewrite_verifies(made: Made, tmp_path: Path) -> None:
    assert _codes(made.bundle) == set()
    assert _codes(_write(_members(made.bundle), tmp_path / "same.zip")) == set()
    assert _codes(_write(list(reversed(_members(made.bundle))), tmp_path / "reordered.zip")) == set()


def _forged(name: str, data: bytes) -> bytes:
    if name == "verdict.json":
        v = json.loads(data)
        v["verdict"] = "NOT QUALIFIED - FORGED"
        return canonical_bytes(v)
    return data + b" "


@pytest.mark.parametrize("forged_first", [True, False])
@pytest.mark.parametrize("member", ["verdict.json", "manifest.json", "checkpoint.txt", "entry"])
def test_a_bundle_with_a_duplicate_member_name_is_refused(
    member: str, forged_first: bool, made: Made, tmp_path: Path
) -> None:
    members = _members(made.bundle)
    target = next(n for n, _ in members if n.endswith(".envelope.json")) if member == "entry" else member
    out: list[tuple[str, bytes]] = []
    for name, data in members:
        copies = [(name, _forged(name, data)), (name, data)] if name == target else [(name, data)]
        out.extend(copies if forged_first else copies[::-1])
    path = _write(out, tmp_path / "dup.zip")
    try:
        codes = _codes(path)
    except BundleError:  # the last manifest.json forged: unreadable, exit 2 — refused as well
        assert member == "manifest.json" and not forged_first
        return
    assert BundleProblem.MEMBER_DUPLICATE.value in codes


def test_a_duplicate_member_exits_1_on_the_command_line(made: Made, tmp_path: Path) -> None:
    members = _members(made.bundle)
    path = _write([*members, ("verdict.json", dict(members)["verdict.json"])], tmp_path / "dup.zip")
    code, out, _err = _run("bundle", "verify", str(path), "--json")
    assert code == 1
    assert [p["code"] for p in json.loads(out)["problems"]] == [BundleProblem.MEMBER_DUPLICATE.value]


@pytest.mark.parametrize("name", ["extra/evil.txt", "entries/999.envelope.json", "artifacts/" + "0" * 64])
def test_a_member_the_manifest_does_not_name_is_refused(name: str, made: Made, tmp_path: Path) -> None:
    path = _write([*_members(made.bundle), (name, b"QUALIFIED")], tmp_path / "extra.zip")
    assert _codes(path) == {BundleProblem.MEMBER_UNLISTED.value}


def _dup_last(m: dict[str, Any]) -> None:
    m["entries"].append(dict(m["entries"][-1]))


def _dup_id_other_seq(m: dict[str, Any]) -> None:
    m["entries"].append({**m["entries"][-1], "seq": m["entries"][-1]["seq"] + 100})


def _dup_seq_other_id(m: dict[str, Any]) -> None:
    m["entries"].append({**m["entries"][-1], "id": m["entries"][-2]["id"]})


@pytest.mark.parametrize("edit", [_dup_last, _dup_id_other_seq, _dup_seq_other_id])
def test_an_entry_listed_twice_is_refused(
    edit: Callable[[dict[str, Any]], None], made: Made, tmp_path: Path
) -> None:
    assert BundleProblem.ENTRY_DUPLICATE.value in _codes(_with_manifest(made, edit, tmp_path / "e.zip"))


@pytest.mark.parametrize("value", ["5", 5.5, True, -1, None, [5]])
@pytest.mark.parametrize("where", ["seq", "checkpoint-size"])
def test_a_non_integer_seq_or_checkpoint_size_is_refused(
    where: str, value: Any, made: Made, tmp_path: Path
) -> None:
    def edit(m: dict[str, Any]) -> None:
        if where == "seq":
            m["entries"][3]["seq"] = value
        else:
            m["checkpoint"]["size"] = value

    path = _with_manifest(made, edit, tmp_path / "n.zip")
    with pytest.raises(BundleError, match="not a non-negative integer"):
        verify_bundle(path)
    code, _out, err = _run("bundle", "verify", str(path))
    assert code == 2 and err.startswith("error[bad-bundle]")


def _seeded_keys(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    """``SigningKey.generate`` made deterministic: keys from SHA-256(seed, n)."""
    counter = iter(range(1 << 30))

    def generate(cls: type[SigningKey], name: str) -> SigningKey:
        raw = hashlib.sha256(f"fix70/{seed}/{next(counter)}".encode()).digest()
        return cls(name, Ed25519PrivateKey.from_private_bytes(raw))

    monkeypatch.setattr(SigningKey, "generate", classmethod(generate))


def _plus_key() -> tuple[str, PublicKey]:
    for i in range(256):
        raw = hashlib.sha256(f"fix70-plus/{i}".encode()).digest()
        pub = PublicKey(Ed25519PrivateKey.from_private_bytes(raw).public_key().public_bytes_raw())
        vkey = verifier_key("example.org/log", pub)
        if "+" in vkey.split("+", 2)[2] and "+" in pub.b64:
            return vkey, pub
    raise AssertionError("no seeded key with a '+' in its vkey and base64")


def test_a_base64_log_key_with_a_plus_is_the_bundles_own_key() -> None:
    vkey, pub = _plus_key()
    manifest = {"log": {"origin": "example.org/log", "verifier_key": vkey}}
    for given in (pub.b64, vkey, f"  {pub.b64}\n"):
        report = BundleReport()
        assert _log_key(manifest, given, report) == ("example.org/log", pub)
        assert report.problems == [] and report.log_key == "given"
    # neighbours: another key, or a bundled vkey that does not parse, is named
    other = PublicKey(Ed25519PrivateKey.from_private_bytes(b"\x07" * 32).public_key().public_bytes_raw())
    for bundled, given in ((vkey, other.b64), (vkey.replace("+", "-", 1), pub.b64), (None, pub.b64)):
        report = BundleReport()
        _log_key({"log": {"origin": "example.org/log", "verifier_key": bundled}}, given, report)
        assert [p["code"] for p in report.problems] == [BundleProblem.LOG_KEY.value]


def test_bundle_verify_takes_the_exported_log_key_whose_vkey_holds_a_plus(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for seed in range(64):
        _seeded_keys(monkeypatch, seed)
        home = tmp_path / f"home{seed}"
        led = Ledger.init(home)
        vkey = led.verifier_key()
        if "+" not in vkey.split("+", 2)[2]:
            led.close()
            continue
        try:
            st = led.make_statement("note", {"campaign": "x"}, {"text": "hi"})
            led.append([led.sign(st, led.admin_key_name)])
        finally:
            led.close()
        break
    else:
        raise AssertionError("no seeded log key with a '+' in its vkey")
    code, pub, err = _run("--home", str(home), "keys", "export", "log")
    assert code == 0, err
    (tmp_path / "log.pub").write_text(pub)
    zpath = tmp_path / "r.zip"
    code, _out, err = _run("--home", str(home), "bundle", "create", "-s", "campaign=x", str(zpath))
    assert code == 0, err
    for key in (f"@{tmp_path / 'log.pub'}", vkey, pub.strip()):
        code, out, err = _run("bundle", "verify", str(zpath), "--public-key", key, "--json")
        assert code == 0, out + err
        assert json.loads(out)["log_key"] == "given"


# --- F5: the database a command opens ----------------------------------------------------------------


def _one_error_line(err: str, code: str) -> None:
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error[{code}]: "), err


@pytest.fixture
def home(tmp_path: Path) -> Path:
    Ledger.init(tmp_path / "home").close()
    return tmp_path / "home"


def test_verify_on_a_never_migrated_postgres_database_is_one_error_line_exit_2(home: Path) -> None:
    with fresh_pg_database() as url:
        for cmd in (["verify"], ["verify", "--json"]):
            code, out, err = _run("--home", str(home), *cmd, "--database-url", url)
            assert code == 2, out + err
            if "--json" in cmd:
                assert json.loads(err)["error"]["code"] == "database-not-initialised"
                continue
            _one_error_line(err, "database-not-initialised")
            assert "ledger init" in err and "ledger migrate" in err


def test_verify_on_an_unreachable_postgres_server_is_one_error_line_exit_2(home: Path) -> None:
    url = PG_URL.replace("5432", "1").format(db="fix70_nowhere")
    code, out, err = _run("--home", str(home), "verify", "--database-url", url)
    assert code == 2, out + err
    _one_error_line(err, "database-unreachable")
    assert "cannot reach database" in err


def test_verify_on_an_empty_sqlite_file_is_one_error_line_exit_2(home: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    code, out, err = _run("--home", str(home), "verify", "--database-url", f"sqlite:///{empty}")
    assert code == 2, out + err
    _one_error_line(err, "database-not-initialised")
    assert empty.read_bytes() == b""  # refused untouched


def test_verify_on_a_migrated_postgres_database_still_runs(tmp_path: Path) -> None:
    with fresh_pg_database() as url:
        Ledger.init(tmp_path / "home", database_url=url).close()
        code, out, err = _run("--home", str(tmp_path / "home"), "verify", "--database-url", url)
        assert code == 0, out + err
