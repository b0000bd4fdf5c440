"""`ledger proof verify` never names an entry it did not check; C2SP key name and verifier key (issue 12).

The verifier key is checked against signed-note.md as written: ``<name>+<hex(key hash)>+<base64(0x01 ||
key)>``, key hash = SHA-256(name || 0x0A || 0x01 || key)[:4]. Computed here with hashlib alone.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest

from ledger.canonical import canonical_bytes
from ledger.service import Ledger


@pytest.fixture
def proved(cli, home: Path, tmp_path: Path):  # type: ignore[no-untyped-def]
    assert cli("init").code == 0
    assert cli("keys", "new", "hostA", "--role", "collector").code == 0
    ids = []
    for i in range(5):
        r = cli(
            "record",
            "note",
            "--key",
            "hostA",
            "-s",
            "campaign=c",
            "--data",
            json.dumps({"text": f"#{i}"}),
            "--json",
        )
        assert r.code == 0, r.err
        ids.append(r.json()["id"])
    r = cli("proof", "inclusion", ids[2])
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    pub = tmp_path / "log.pub"
    pub.write_text(cli("keys", "export", "log").out)
    return cli, doc, ids, pub


def _verify(cli, doc: dict, pub: Path, tmp_path: Path, *extra: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "proof.json"
    path.write_text(json.dumps(doc))
    return cli("proof", "verify", str(path), "--public-key", f"@{pub}", *extra)


def test_inclusion_proof_names_the_entry_it_checked(proved, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cli, doc, ids, pub = proved
    r = _verify(cli, doc, pub, tmp_path, "--json")
    assert r.code == 0, r.err
    out = r.json()
    assert out["entry_id"] == ids[2] and out["leaf_index"] == doc["leaf_index"] and out["logged_at"]


@pytest.mark.parametrize("missing", ["envelope", "record"])
def test_proof_without_the_entry_is_refused(proved, tmp_path: Path, missing: str) -> None:  # type: ignore[no-untyped-def]
    """Finding: given a proof document without `envelope`, it printed "entry <id> is leaf N" for any id."""
    cli, doc, _ids, pub = proved
    del doc[missing]
    r = _verify(cli, doc, pub, tmp_path)
    assert r.code == 2 and r.err.startswith("error[proof-entry-unchecked]"), r.err
    assert "is leaf" not in r.out


def test_proof_naming_another_entry_is_refused(proved, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cli, doc, ids, pub = proved
    doc["entry_id"] = ids[3]  # the document claims another entry than its record
    r = _verify(cli, doc, pub, tmp_path)
    assert r.code == 2 and r.err.startswith("error[proof-entry-unchecked]"), r.err
    assert ids[3] not in r.out


def test_proof_with_another_envelope_is_refused(proved, tmp_path: Path, home: Path) -> None:  # type: ignore[no-untyped-def]
    cli, doc, ids, pub = proved
    led = Ledger.open(home)
    doc["envelope"] = led.get(ids[3]).envelope.decode()
    led.close()
    r = _verify(cli, doc, pub, tmp_path)
    assert r.code == 2 and r.err.startswith("error[proof-entry-unchecked]"), r.err


def test_proof_with_a_moved_record_is_refused(proved, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A record re-dated (or re-indexed) by whoever serves the proof does not lead to the signed root."""
    cli, doc, _ids, pub = proved
    rec = json.loads(base64.b64decode(doc["record"]))
    rec["logged_at"] = "2020-01-01T00:00:00Z"
    doc["record"] = base64.b64encode(canonical_bytes(rec)).decode()
    doc.pop("leaf_hash")
    r = _verify(cli, doc, pub, tmp_path)
    assert r.code == 2 and r.err.startswith("error[proof-invalid]"), r.err
    rec = json.loads(base64.b64decode(proved[1]["record"]))
    doc = dict(proved[1])
    rec["index"] = rec["index"] + 1
    doc["record"] = base64.b64encode(canonical_bytes(rec)).decode()
    r = _verify(cli, doc, pub, tmp_path)
    assert r.code == 2 and r.err.startswith("error[proof-invalid]"), r.err


def test_checkpoint_key_name_is_the_origin_and_vkey_follows_signed_note(
    proved, home: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    cli, doc, _ids, _pub = proved
    led = Ledger.open(home)
    origin, raw = led.origin, led.log_public_key().raw
    led.close()
    note = doc["checkpoint"]
    assert note.startswith(origin + "\n")
    sig_line = note.split("\n\n", 1)[1].splitlines()[0]
    assert sig_line.startswith(f"\u2014 {origin} "), sig_line
    r = cli("keys", "export", "log", "--vkey")
    assert r.code == 0, r.err
    vkey = r.out.strip()
    key_hash = hashlib.sha256(origin.encode() + b"\n" + b"\x01" + raw).digest()[:4]
    blob = base64.b64encode(b"\x01" + raw).decode()
    assert vkey == f"{origin}+{key_hash.hex()}+{blob}"
    # the signature line's first four bytes are that key hash
    assert base64.b64decode(sig_line.split(" ")[2])[:4] == key_hash
    # a verifier may be given the vkey alone
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    assert cli("proof", "verify", str(path), "--public-key", vkey).code == 0
    bad = vkey.replace(key_hash.hex(), "00000000")
    r = cli("proof", "verify", str(path), "--public-key", bad)
    assert r.code == 2 and r.err.startswith("error[proof-invalid]"), r.err
    r = cli("keys", "export", "hostA", "--vkey")
    assert r.code == 2
