"""Witnesses (C2SP tlog-witness, tlog-cosignature) and trust policies: two `ledger witness serve` processes,
a log that submits each published checkpoint to them, a forked log, a witness that is down."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import pytest

from ledger.cli import main
from ledger.errors import ConfigError, CosignatureQuorumError, ProofError
from ledger.home import Home, WitnessConfig
from ledger.log import MerkleTree, sign_checkpoint, verifier_key
from ledger.proofs import verify_with_policy
from ledger.service import Ledger
from ledger.signing import SigningKey
from ledger.witness import (
    SIZE_MEDIA_TYPE,
    WitnessReply,
    add_cosignatures,
    check_cosigned,
    cosign,
    cosignature_key_hash,
    format_add_checkpoint,
    parse_trust_policy,
    parse_witness_vkey,
    request_cosignature,
    verify_cosignature,
    witness_vkey,
)
from ledger.witness_store import WitnessHome
from tests.api.conftest import free_port

LEDGER_BIN = str(Path(sys.executable).with_name("ledger"))

# --- cosignature/v1 and the policy form, from the spec text ------------------------------------------


def test_cosignature_v1_signs_the_spec_message_with_a_timestamp() -> None:
    key = SigningKey.generate("w")
    body = "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
    line = cosign(body, key, "witness.example.com/w1", 1679315147)
    dash, name, b64 = line.rstrip("\n").split(" ")
    assert (dash, name) == ("\u2014", "witness.example.com/w1")
    blob = base64.b64decode(b64)
    # key id: SHA-256(name || "\n" || 0x04 || key)[:4]; then the big-endian u64 timestamp; then Ed25519
    assert blob[:4] == hashlib.sha256(b"witness.example.com/w1\n\x04" + key.public.raw).digest()[:4]
    assert int.from_bytes(blob[4:12], "big") == 1679315147
    msg = b"cosignature/v1\ntime 1679315147\n" + body.encode()
    key.public.verify(blob[12:], msg)  # raises unless it is the spec's message
    note = body + "\n\u2014 example.com/behind-the-sofa AAAA\n"
    assert verify_cosignature(add_cosignatures(note, [line]), name, key.public) == 1679315147


def test_a_cosignature_over_another_body_is_invalid() -> None:
    key = SigningKey.generate("w")
    line = cosign("o\n1\n" + base64.b64encode(b"\x00" * 32).decode() + "\n", key, "w1", 5)
    other = "o\n1\n" + base64.b64encode(b"\x01" * 32).decode() + "\n\n\u2014 o AAAA\n"
    with pytest.raises(Exception, match="does not verify"):
        verify_cosignature(add_cosignatures(other, [line]), "w1", key.public)


def test_witness_vkey_round_trips_and_its_hash_commits_the_name() -> None:
    key = SigningKey.generate("w")
    vkey = witness_vkey("witness.test/w1", key.public)
    assert vkey.startswith(f"witness.test/w1+{cosignature_key_hash('witness.test/w1', key.public).hex()}+")
    assert parse_witness_vkey(vkey) == ("witness.test/w1", key.public)
    _name, h, blob = vkey.split("+", 2)
    with pytest.raises(ConfigError, match="hash"):
        parse_witness_vkey(f"witness.test/w2+{h}+{blob}")
    log_vkey = verifier_key("log.test", key.public)  # type 0x01: a log key, not a cosigner's
    with pytest.raises(ConfigError, match="0x04"):
        parse_witness_vkey(log_vkey)


def _keys() -> tuple[SigningKey, SigningKey, SigningKey]:
    return SigningKey.generate("log"), SigningKey.generate("w1"), SigningKey.generate("w2")


def _policy(log: SigningKey, w1: SigningKey, w2: SigningKey, quorum: str) -> str:
    return (
        f"# test policy\nlog {verifier_key('log.test', log.public)}\n"
        f"witness A {witness_vkey('w.test/a', w1.public)} http://127.0.0.1:1\n"
        f"witness B {witness_vkey('w.test/b', w2.public)}\n"
        f"{quorum}"
    )


def test_policy_quorum_two_of_two_and_one_of_two() -> None:
    log, w1, w2 = _keys()
    root = hashlib.sha256(b"x").digest()
    cp = sign_checkpoint("log.test", 3, root, log, key_name="log.test")
    only_a = add_cosignatures(cp.note, [cosign(cp.note, w1, "w.test/a", 10)])
    both = add_cosignatures(only_a, [cosign(cp.note, w2, "w.test/b", 11)])
    all2 = parse_trust_policy(_policy(log, w1, w2, "group G 2 A B\nquorum G\n"))
    any1 = parse_trust_policy(_policy(log, w1, w2, "group G any A B\nquorum G\n"))
    assert check_cosigned(both, all2)[1] == []
    problems = check_cosigned(only_a, all2)[1]
    assert problems[0].startswith("quorum G needs 2 of 2 (A, B): not met")
    assert any("witness B (w.test/b): no cosignature" in p for p in problems)
    assert check_cosigned(only_a, any1)[1] == []
    assert check_cosigned(cp.note, any1)[1] != []
    assert check_cosigned(cp.note, parse_trust_policy(_policy(log, w1, w2, "quorum none\n")))[1] == []


def test_policy_refuses_a_cosignature_by_a_key_it_does_not_name() -> None:
    log, w1, w2 = _keys()
    cp = sign_checkpoint("log.test", 1, hashlib.sha256(b"x").digest(), log, key_name="log.test")
    intruder = SigningKey.generate("x")
    forged = add_cosignatures(cp.note, [cosign(cp.note, intruder, "w.test/a", 1)])  # right name, wrong key
    problems = check_cosigned(forged, parse_trust_policy(_policy(log, w1, w2, "quorum A\n")))[1]
    assert problems and "witness A (w.test/a): no cosignature" in problems[1]


def test_policy_log_signature_by_another_key_is_refused() -> None:
    log, w1, w2 = _keys()
    other = SigningKey.generate("other")
    cp = sign_checkpoint("log.test", 1, hashlib.sha256(b"x").digest(), other, key_name="log.test")
    note = add_cosignatures(cp.note, [cosign(cp.note, w1, "w.test/a", 1)])
    got, problems = check_cosigned(note, parse_trust_policy(_policy(log, w1, w2, "quorum A\n")))
    assert got is None and problems[0].startswith("log signature")


@pytest.mark.parametrize(
    ("tail", "message"),
    [
        ("group G 3 A B\nquorum G\n", "threshold 3 of 2 members cannot be met"),
        ("frobnicate A\nquorum A\n", "unknown line 'frobnicate'"),
        ("quorum C\n", "quorum 'C' is not defined"),
        ("group G all A C\nquorum G\n", "member 'C' is not defined"),
        ("group G all A A\nquorum G\n", "listed twice"),
        ("group G most A B\nquorum G\n", "threshold 'most'"),
        ("", "no `quorum` line"),
        ("quorum A\nquorum B\n", "exactly one quorum line"),
        ("witness A x+00000000+AAAA\nquorum A\n", "already defined"),
    ],
)
def test_policy_errors_name_the_line(tail: str, message: str) -> None:
    log, w1, w2 = _keys()
    with pytest.raises(ConfigError, match=rf"^p\.txt(:\d+)?: .*{re.escape(message)}"):
        parse_trust_policy(_policy(log, w1, w2, tail), source="p.txt")


def test_unknown_policy_line_names_its_line_number() -> None:
    log, w1, w2 = _keys()
    with pytest.raises(ConfigError, match=r"^p\.txt:5: unknown line 'frobnicate'"):
        parse_trust_policy(_policy(log, w1, w2, "frobnicate A\nquorum A\n"), source="p.txt")


def _no_proof(_old: int) -> list[bytes]:
    return []


def test_the_log_keeps_no_line_that_is_not_the_witness_cosignature(monkeypatch: pytest.MonkeyPatch) -> None:
    """A witness answering 200 with a line by another key (or none) gives the log no cosignature."""
    import ledger.witness as witness_mod

    log, w1, _ = _keys()
    cp = sign_checkpoint("log.test", 1, hashlib.sha256(b"x").digest(), log, key_name="log.test")
    forged = cosign(cp.note, SigningKey.generate("x"), "w.test/a", 1)
    for body in (forged, "", "hello\n"):
        monkeypatch.setattr(
            witness_mod, "submit", lambda *_a, b=body, **_k: WitnessReply(200, b, "text/plain")
        )
        with pytest.raises(ProofError, match="no cosignature"):
            request_cosignature("http://w", witness_vkey("w.test/a", w1.public), cp, 0, _no_proof, timeout=1)
    good = cosign(cp.note, w1, "w.test/a", 7)
    monkeypatch.setattr(witness_mod, "submit", lambda *_a, **_k: WitnessReply(200, good, "text/plain"))
    vkey = witness_vkey("w.test/a", w1.public)
    assert request_cosignature("http://w", vkey, cp, 0, _no_proof, timeout=1) == good


def test_policy_without_a_log_line_is_refused() -> None:
    _, w1, _ = _keys()
    with pytest.raises(ConfigError, match="no `log` line"):
        parse_trust_policy(f"witness A {witness_vkey('a', w1.public)}\nquorum A\n")


# --- the witness's add-checkpoint decision, every status code ----------------------------------------


@dataclass
class _Log:
    key: SigningKey
    origin: str
    tree: MerkleTree

    def note(self, size: int | None = None) -> str:
        n = len(self.tree) if size is None else size
        return sign_checkpoint(self.origin, n, self.tree.root(n), self.key, key_name=self.origin).note

    def grow(self, n: int, tag: bytes = b"") -> None:
        for i in range(n):
            self.tree.append(hashlib.sha256(tag + str(len(self.tree) + i).encode()).digest())


@pytest.fixture
def wstate(tmp_path: Path) -> Iterator[tuple[WitnessHome, _Log]]:
    w = WitnessHome.init(tmp_path / "w", "witness.test/w1")
    log = _Log(SigningKey.generate("log"), "log.test/a", MerkleTree())
    w.add_log(verifier_key(log.origin, log.key.public))
    yield w, log
    w.close()


def test_witness_cosigns_the_first_checkpoint_then_consistent_ones(wstate: tuple[WitnessHome, _Log]) -> None:
    w, log = wstate
    log.grow(5)
    first = w.add_checkpoint(format_add_checkpoint(0, [], log.note()), now=100)
    assert first.status == 200
    name, pub = parse_witness_vkey(w.vkey)
    assert verify_cosignature(add_cosignatures(log.note(), [first.body]), name, pub) == 100
    log.grow(6)
    proof = log.tree.consistency_proof(5, 11)
    assert w.add_checkpoint(format_add_checkpoint(5, proof, log.note())).status == 200
    assert w.logs()[0]["size"] == 11
    # the same checkpoint again (old size = its size, same root): cosigned again
    assert w.add_checkpoint(format_add_checkpoint(11, [], log.note())).status == 200


def test_witness_stale_old_size_is_409_with_its_size(wstate: tuple[WitnessHome, _Log]) -> None:
    w, log = wstate
    log.grow(4)
    assert w.add_checkpoint(format_add_checkpoint(0, [], log.note())).status == 200
    log.grow(4)
    r = w.add_checkpoint(format_add_checkpoint(0, [], log.note()))
    assert (r.status, r.body, r.media_type) == (409, "4\n", SIZE_MEDIA_TYPE)


def test_witness_same_size_other_root_is_409(wstate: tuple[WitnessHome, _Log]) -> None:
    w, log = wstate
    log.grow(4)
    assert w.add_checkpoint(format_add_checkpoint(0, [], log.note())).status == 200
    fork = _Log(log.key, log.origin, MerkleTree())
    fork.grow(4, b"fork")
    r = w.add_checkpoint(format_add_checkpoint(4, [], fork.note()))
    assert (r.status, r.body) == (409, "4\n")


def test_witness_bad_and_truncated_proofs_are_422(wstate: tuple[WitnessHome, _Log]) -> None:
    w, log = wstate
    log.grow(3)
    assert w.add_checkpoint(format_add_checkpoint(0, [], log.note())).status == 200
    log.grow(10)
    proof = log.tree.consistency_proof(3, 13)
    assert w.add_checkpoint(format_add_checkpoint(3, proof[:-1], log.note())).status == 422
    assert w.add_checkpoint(format_add_checkpoint(3, [b"\x00" * 32, *proof[1:]], log.note())).status == 422
    # a forked tree of the new size: its proof cannot lead from the cosigned root
    fork = _Log(log.key, log.origin, MerkleTree())
    fork.grow(13, b"fork")
    r = w.add_checkpoint(format_add_checkpoint(3, fork.tree.consistency_proof(3, 13), fork.note()))
    assert r.status == 422
    assert w.logs()[0]["size"] == 3  # nothing refused was stored
    assert w.add_checkpoint(format_add_checkpoint(3, proof, log.note())).status == 200


def test_witness_unknown_origin_is_404_and_bad_signature_403(wstate: tuple[WitnessHome, _Log]) -> None:
    w, log = wstate
    log.grow(2)
    other = _Log(log.key, "log.test/unknown", log.tree)
    assert w.add_checkpoint(format_add_checkpoint(0, [], other.note())).status == 404
    impostor = _Log(SigningKey.generate("x"), log.origin, log.tree)
    assert w.add_checkpoint(format_add_checkpoint(0, [], impostor.note())).status == 403
    body = log.note().replace("\n2\n", "\n3\n", 1)  # size changed under the signature
    assert w.add_checkpoint(format_add_checkpoint(0, [], body)).status == 403


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"old 1\n",
        b"new 0\n\nx\n",
        b"old 01\n\nlog.test/a\n1\nAAAA\n\n\xe2\x80\x94 x y\n",
        b"old 0\nnot-base64!\n\nlog.test/a\n1\nAAAA\n\n\xe2\x80\x94 x y\n",
        b"old 0\n" + b"AAAA\n" + b"\nlog.test/a\n1\nAAAA\n\n\xe2\x80\x94 x y\n",
        b"old 0\n\nlog.test/a\nten\nAAAA\n\n\xe2\x80\x94 x y\n",
        b"old 0\n\nlog.test/a\n1\nAAAA\n",
        b"\xff\xfe",
    ],
)
def test_witness_malformed_body_is_400(wstate: tuple[WitnessHome, _Log], body: bytes) -> None:
    w, _ = wstate
    assert w.add_checkpoint(body).status == 400


def test_witness_old_size_beyond_the_checkpoint_is_400(wstate: tuple[WitnessHome, _Log]) -> None:
    w, log = wstate
    log.grow(2)
    assert w.add_checkpoint(format_add_checkpoint(5, [], log.note())).status == 400


def test_witness_too_many_proof_lines_is_400(wstate: tuple[WitnessHome, _Log]) -> None:
    w, log = wstate
    log.grow(2)
    assert w.add_checkpoint(format_add_checkpoint(1, [b"\x00" * 32] * 64, log.note())).status == 400


# --- real processes: two witnesses, a log, a fork, a witness that is down -------------------------------


@dataclass
class WitnessProc:
    dir: Path
    url: str
    vkey: str
    proc: subprocess.Popen[bytes]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_witness(d: Path, name: str, log_vkey: str) -> WitnessProc:
    # the CLI commands in-process (each subprocess start costs seconds); only `serve` runs as a process
    assert main(["witness", "init", str(d), "--name", name]) == 0
    assert main(["witness", "add-log", str(d), "--vkey", log_vkey]) == 0
    w = WitnessHome(d)
    vkey = w.vkey
    w.close()
    port = free_port()
    log = (d / "serve.log").open("wb")
    proc = subprocess.Popen(
        [LEDGER_BIN, "witness", "serve", str(d), "--port", str(port)], stdout=log, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, (d / "serve.log").read_text()
        try:
            if httpx.get(url + "/", timeout=2).status_code == 200:
                return WitnessProc(d, url, vkey, proc)
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("witness did not start")


@pytest.fixture
def witnessed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Path, WitnessProc, WitnessProc]]:
    """A ledger home with two witnesses enrolled (by the CLI), each a `ledger witness serve` process."""
    monkeypatch.setenv("LEDGER_CHECKPOINT_INTERVAL", "0")  # every append publishes (and is submitted)
    monkeypatch.setenv("LEDGER_WITNESS_TIMEOUT", "3")
    home = tmp_path / "home"
    led = Ledger.init(home)
    led.new_key("hostA", ["collector"])
    log_vkey = led.verifier_key()
    led.close()
    w1 = start_witness(tmp_path / "w1", "witness.test/w1", log_vkey)
    w2 = start_witness(tmp_path / "w2", "witness.test/w2", log_vkey)
    try:
        for w in (w1, w2):
            assert main(["--home", str(home), "witness", "enrol", w.url, w.vkey]) == 0
        yield home, w1, w2
    finally:
        w1.stop()
        w2.stop()


def _append(home: Path, n: int, text: str = "attempt") -> None:
    led = Ledger.open(home)
    try:
        for i in range(n):
            led.record("note", {"campaign": "seed-000"}, {"text": f"{text} {i}"}, key="hostA")
    finally:
        led.close()


def _write_policy(tmp_path: Path, home: Path, w1: WitnessProc, w2: WitnessProc, quorum: str) -> Path:
    led = Ledger.open(home)
    vkey = led.verifier_key()
    led.close()
    p = tmp_path / f"policy-{abs(hash(quorum))}.txt"
    p.write_text(f"log {vkey}\nwitness one {w1.vkey} {w1.url}\nwitness two {w2.vkey}\n{quorum}")
    return p


def _proof(home: Path, tmp_path: Path) -> Path:
    led = Ledger.open(home)
    try:
        doc = led.inclusion(led.get_seq(1).entry_id)
    finally:
        led.close()
    p = tmp_path / "proof.json"
    p.write_text(json.dumps(doc))
    return p


def test_two_witnesses_cosign_each_published_checkpoint(
    witnessed: tuple[Path, WitnessProc, WitnessProc], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home, w1, w2 = witnessed
    _append(home, 3)
    led = Ledger.open(home)
    try:
        cp = led.served_checkpoint()
        assert cp.size == led.size() == 5  # the admin's and hostA's key entries, then 3 notes
        status = led.witness_status(cp)
        assert [(s["witness"], s["cosigned"]) for s in status] == [
            ("witness.test/w1", True),
            ("witness.test/w2", True),
        ]
        for w in (w1, w2):
            name, pub = parse_witness_vkey(w.vkey)
            assert verify_cosignature(cp.note, name, pub) is not None
    finally:
        led.close()
    both = _write_policy(tmp_path, home, w1, w2, "group all-of-them all one two\nquorum all-of-them\n")
    proof = _proof(home, tmp_path)
    capsys.readouterr()
    code = main(["proof", "verify", str(proof), "--trust-policy", str(both), "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert json.loads(out.out)["trust_policy"]["ok"] is True
    # each witness's state is the log's size: it verified every consistency proof on the way
    assert json.loads(httpx.get(w1.url + "/").text)["logs"][0]["size"] == 5
    # over HTTP: a stale old size is 409 with exactly text/x.tlog.size; garbage is 400; another origin 404
    stale = httpx.post(w1.url + "/add-checkpoint", content=format_add_checkpoint(0, [], cp.note))
    assert (stale.status_code, stale.text, stale.headers["content-type"]) == (409, "5\n", SIZE_MEDIA_TYPE)
    assert httpx.post(w1.url + "/add-checkpoint", content=b"old x\n").status_code == 400
    other = cp.note.replace(cp.origin, "evidence-ledger/elsewhere/0")
    unknown = httpx.post(w1.url + "/add-checkpoint", content=format_add_checkpoint(0, [], other))
    assert unknown.status_code == 404


def test_checkpoint_served_over_http_carries_the_cosignatures(
    witnessed: tuple[Path, WitnessProc, WitnessProc], tmp_path: Path
) -> None:
    from tests.api.conftest import start_server

    home, w1, w2 = witnessed
    _append(home, 2)
    server = start_server(home, "--public-reads")
    try:
        note = httpx.get(server.url + "/checkpoint").text
        doc = httpx.get(server.url + "/v1/checkpoint").json()
    finally:
        server.stop()
    assert doc["note"] == note and doc["missing_cosignatures"] == []
    pol = parse_trust_policy(
        _write_policy(tmp_path, home, w1, w2, "group g 2 one two\nquorum g\n").read_text()
    )
    assert check_cosigned(note, pol)[1] == []


def test_a_witness_that_is_down_never_stops_the_log(
    witnessed: tuple[Path, WitnessProc, WitnessProc], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home, w1, w2 = witnessed
    _append(home, 2)
    w2.stop()
    _append(home, 3)  # appends go on while a witness is down
    led = Ledger.open(home)
    try:
        assert led.size() == 7
        cp = led.served_checkpoint()
        assert cp.size == 7
        missing = [s["witness"] for s in led.witness_status(cp) if not s["cosigned"]]
        assert missing == ["witness.test/w2"]
    finally:
        led.close()
    capsys.readouterr()
    assert main(["--home", str(home), "witness", "status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["missing"] == ["witness.test/w2"]
    proof = _proof(home, tmp_path)
    all2 = _write_policy(tmp_path, home, w1, w2, "group g all one two\nquorum g\n")
    any1 = _write_policy(tmp_path, home, w1, w2, "group g any one two\nquorum g\n")
    assert main(["proof", "verify", str(proof), "--trust-policy", str(any1)]) == 0
    capsys.readouterr()
    assert main(["proof", "verify", str(proof), "--trust-policy", str(all2)]) == 2
    err = capsys.readouterr().err
    assert "error[cosignature-quorum]" in err and "witness two (witness.test/w2): no cosignature" in err
    # the verdict's checkpoint and a routing change are judged by the same policy
    verdict = ["--home", str(home), "verdict", "--subject", "campaign=seed-000", "--trust-policy"]
    assert main([*verdict, str(all2)]) == 2
    assert "witness two" in capsys.readouterr().err
    assert main([*verdict, str(any1)]) == 0
    capsys.readouterr()
    routing = ["--home", str(home), "check", "routing-change", "--subject", "backend=b", "--subject",
               "model=m", "--subject", "host=h", "--trust-policy", str(all2), "--json"]  # fmt: skip
    code = main(routing)
    got = capsys.readouterr()
    assert code == 1, got.err
    result = json.loads(got.out)
    assert code == 1 and result["allowed"] is False
    assert result["trust_policy"]["ok"] is False
    assert any("witness two (witness.test/w2): no cosignature" in r for r in result["reasons"])
    routing[routing.index(str(all2))] = str(any1)
    main(routing)
    trusted = json.loads(capsys.readouterr().out)["trust_policy"]
    assert trusted == {"source": str(any1), "ok": True, "problems": []}


def test_forked_log_is_refused_by_the_witness_and_detected_by_the_client(
    witnessed: tuple[Path, WitnessProc, WitnessProc], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    home, w1, w2 = witnessed
    _append(home, 2)
    fork = tmp_path / "fork"
    shutil.copytree(home, fork)  # the same log key and origin, the same first 4 entries
    _append(home, 3, "honest")  # the witnesses cosign the honest log at size 7
    caplog.set_level("WARNING", logger="ledger.witness")
    _append(fork, 5, "forked")  # the fork publishes a different tree of size 9 at the same origin
    assert "HTTP 422" in caplog.text  # each witness refused: no consistency from the size it cosigned
    led = Ledger.open(fork)
    try:
        cp = led.served_checkpoint()
        assert cp.size == 9
        assert [s["cosigned"] for s in led.witness_status(cp)] == [False, False]
        policy_file = _write_policy(tmp_path, home, w1, w2, "group g any one two\nquorum g\n")
        pol = parse_trust_policy(policy_file.read_text())
        assert check_cosigned(cp.note, pol)[1] != []  # the fork cannot show a cosigned checkpoint
        # nor can it borrow the honest log's cosignatures at the same size
        honest = Ledger.open(home)
        _append(home, 2, "more")
        h_cp = honest.served_checkpoint()
        honest.close()
        assert h_cp.size == 9 and h_cp.root != cp.root
        borrowed = add_cosignatures(cp.note, h_cp.note.partition("\n\n")[2].splitlines()[1:])
        problems = check_cosigned(borrowed, pol)[1]
        assert any("invalid cosignature" in p for p in problems)
        with pytest.raises(CosignatureQuorumError):
            verify_with_policy(led.inclusion(led.get_seq(4).entry_id), pol)
    finally:
        led.close()


def test_a_witness_behind_the_log_catches_up_through_409(
    witnessed: tuple[Path, WitnessProc, WitnessProc], tmp_path: Path
) -> None:
    """The log does not know the witness's size (its cosignatures were lost): the 409 names it, the log
    retries with the consistency proof from there."""
    home, w1, _w2 = witnessed
    _append(home, 2)
    h = Home(home)
    cfg = h.config()
    h.write_config(replace(cfg, witnesses=(WitnessConfig(url=w1.url, vkey=w1.vkey),)))
    import sqlite3

    db = sqlite3.connect(home / "ledger.db")
    db.execute("DELETE FROM cosignatures")
    db.commit()
    db.close()
    _append(home, 1)
    led = Ledger.open(home)
    try:
        cp = led.served_checkpoint()
        assert [s["cosigned"] for s in led.witness_status(cp)] == [True]
    finally:
        led.close()


def test_a_hung_witness_never_holds_up_an_append(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: checkpoints were submitted to the witnesses inside the append that published them, so a
    witness that accepts the connection and never answers held every publishing append for the whole
    witness timeout. Now the append returns at once; the checkpoint reaches the witness (here: its timeout)
    in the background, and the missing cosignature is named."""
    import socket
    import threading

    monkeypatch.setenv("LEDGER_CHECKPOINT_INTERVAL", "0")  # every append publishes
    monkeypatch.setenv("LEDGER_WITNESS_TIMEOUT", "3")
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        hung.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(hung.accept()[0])  # accepted, never answered
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    home = tmp_path / "home"
    led = Ledger.init(home)
    led.new_key("hostA", ["collector"])
    led.close()
    w = SigningKey.generate("w")
    url = f"http://127.0.0.1:{hung.getsockname()[1]}"
    assert (
        main(["--home", str(home), "witness", "enrol", url, witness_vkey("witness.test/hung", w.public)]) == 0
    )
    led = Ledger.open(home)
    try:
        started = time.monotonic()
        for i in range(3):
            led.record("note", {"campaign": "seed-000"}, {"text": f"n {i}"}, key="hostA")
        assert time.monotonic() - started < 2.5, "appends waited for the hung witness"
        led.wait_for_witnesses()
        cp = led.served_checkpoint()
        assert [s["cosigned"] for s in led.witness_status(cp)] == [False]
    finally:
        led.close()
        stop.set()
        t.join(2)
        for c in held:
            c.close()
        hung.close()
