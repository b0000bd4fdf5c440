"""C2SP tlog-tiles served by `ledger serve`, read by a client written from the spec text alone.

The client below uses hashlib, base64 and cryptography only — nothing of the ledger's own code: it parses the
checkpoint (tlog-checkpoint) and its signature (signed-note, with the verifier key), fetches the hash tiles
and entry bundles (tlog-tiles), checks every entry hashes to its level-0 tile hash and every level-1 hash is
the Merkle Tree Hash of its full level-0 tile (RFC 6962), and recomputes the checkpoint's root.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from tests.api.conftest import LEDGER_BIN, Deployment, PgDatabases, make_deployment, start_server


def _h_leaf(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def _h_node(a: bytes, b: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + a + b).digest()


def _mth(hashes: list[bytes]) -> bytes:
    """RFC 6962 MTH over already-hashed leaves (k = largest power of two < n)."""
    n = len(hashes)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return hashes[0]
    k = 1
    while k * 2 < n:
        k *= 2
    return _h_node(_mth(hashes[:k]), _mth(hashes[k:]))


def _index_path(n: int) -> str:
    """tlog-tiles: zero-padded 3-digit elements, all but the last prefixed with x."""
    digits = str(n)
    digits = "0" * (-len(digits) % 3) + digits
    parts = [digits[i : i + 3] for i in range(0, len(digits), 3)]
    return "/".join(["x" + p for p in parts[:-1]] + [parts[-1]])


def _check_note(note: str, vkey: str) -> tuple[str, int, bytes]:
    name, key_hash_hex, blob_b64 = vkey.split("+", 2)
    blob = base64.b64decode(blob_b64)
    assert blob[0] == 1, "Ed25519 verifier keys start with 0x01"
    key_hash = bytes.fromhex(key_hash_hex)
    assert hashlib.sha256(name.encode() + b"\n" + blob).digest()[:4] == key_hash
    body, sigs = note.split("\n\n", 1)
    lines = body.split("\n")
    origin, size, root = lines[0], int(lines[1]), base64.b64decode(lines[2])
    pub = Ed25519PublicKey.from_public_bytes(blob[1:])
    for line in sigs.splitlines():
        dash, sig_name, sig_b64 = line.split(" ")
        sig = base64.b64decode(sig_b64)
        if dash == "\u2014" and sig_name == name and sig[:4] == key_hash:
            pub.verify(sig[4:], (body + "\n").encode())  # raises when it does not verify
            return origin, size, root
    raise AssertionError("no signature by the verifier key")


def _bundle(data: bytes) -> list[bytes]:
    out, i = [], 0
    while i < len(data):
        n = int.from_bytes(data[i : i + 2], "big")
        out.append(data[i + 2 : i + 2 + n])
        i += 2 + n
    return out


@pytest.fixture
def served(tmp_path: Path, pg_databases: PgDatabases):  # type: ignore[no-untyped-def]
    dep = make_deployment("sqlite", tmp_path / "server", pg_databases)
    # 300 entries: a full level-0 tile, a partial one, and a partial level-1 tile
    while dep.ledger.size() < 300:
        n = min(200, 300 - dep.ledger.size())
        envs = [
            dep.sign("note", {"campaign": "tiles"}, {"text": f"#{dep.ledger.size()}-{i}"}) for i in range(n)
        ]
        dep.ledger.append(envs)
    srv = start_server(dep.home)
    yield dep, srv
    srv.stop()
    dep.ledger.close()


def test_tiles_client_from_the_spec_recomputes_the_signed_root(served: tuple[Deployment, object]) -> None:
    dep, srv = served
    base = srv.url  # type: ignore[attr-defined]
    h = dep.headers("reader")
    vkey = subprocess.run(
        [LEDGER_BIN, "--home", str(dep.home), "keys", "export", "log", "--vkey"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    r = httpx.get(base + "/checkpoint", headers=h)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    origin, size, root = _check_note(r.text, vkey)
    assert size == 300 and origin == vkey.split("+")[0]

    def get(path: str) -> bytes:
        resp = httpx.get(base + path, headers=h)
        assert resp.status_code == 200, (path, resp.status_code, resp.text)
        assert resp.headers["content-type"] == "application/octet-stream"
        assert "immutable" in resp.headers.get("cache-control", "")
        return resp.content

    leaves: list[bytes] = []
    full, partial = divmod(size, 256)
    for n in range(full + (1 if partial else 0)):
        suffix = "" if n < full else f".p/{partial}"
        tile = get(f"/tile/0/{_index_path(n)}{suffix}")
        width = 256 if n < full else partial
        assert len(tile) == 32 * width
        hashes = [tile[i : i + 32] for i in range(0, len(tile), 32)]
        entries = _bundle(get(f"/tile/entries/{_index_path(n)}{suffix}"))
        assert len(entries) == width and all(len(e) <= 65535 for e in entries)
        for i, (entry, leaf) in enumerate(zip(entries, hashes, strict=True)):
            assert _h_leaf(entry) == leaf, f"entry {n * 256 + i} does not hash to its tile's leaf hash"
            record = json.loads(entry)
            assert record["index"] == n * 256 + i and len(record["entry_id"]) == 64
        leaves.extend(hashes)
    # level 1: each hash is the MTH of a full level-0 tile
    level1 = get(f"/tile/1/{_index_path(0)}.p/{size // 256}")
    assert level1 == b"".join(_mth(leaves[i * 256 : (i + 1) * 256]) for i in range(size // 256))
    assert _mth(leaves) == root

    # an entry bundle names its envelope by id: the envelope the API serves hashes to it (BLAKE3)
    import blake3

    record = json.loads(_bundle(get(f"/tile/entries/{_index_path(0)}"))[7])
    env = httpx.get(f"{base}/v1/entries/{record['entry_id']}", params={"envelope": "true"}, headers=h).content
    assert blake3.blake3(env).hexdigest() == record["entry_id"]

    # what does not exist yet is not served; malformed indexes are refused
    assert httpx.get(base + f"/tile/0/{_index_path(full)}", headers=h).status_code == 404
    assert httpx.get(base + "/tile/entries/001.p/200", headers=h).status_code == 404
    for bad in ("/tile/0/1", "/tile/0/x000/001", "/tile/0/000.p/256", "/tile/0/000.p/0", "/tile/64/000"):
        assert httpx.get(base + bad, headers=h).status_code in (404, 422), bad


def test_tiles_export_is_read_by_the_spec_client(tmp_path: Path, pg_databases: PgDatabases) -> None:
    """`ledger tiles export DIR` writes the same C2SP paths as static files: the client reads them from
    the folder alone and recomputes the signed root, now and at an earlier size; a re-export keeps the
    full tiles (immutable) and adds the new partial ones."""
    dep = make_deployment("sqlite", tmp_path / "server", pg_databases)
    try:
        while dep.ledger.size() < 600:
            envs = [
                dep.sign("note", {"campaign": "x"}, {"text": f"#{dep.ledger.size()}-{i}"}) for i in range(200)
            ]
            dep.ledger.append(envs)
        size_now = dep.ledger.size()
    finally:
        dep.ledger.close()
    vkey = subprocess.run(
        [LEDGER_BIN, "--home", str(dep.home), "keys", "export", "log", "--vkey"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip

    def export(out: Path, *extra: str) -> dict:  # type: ignore[type-arg]
        r = subprocess.run(
            [LEDGER_BIN, "--home", str(dep.home), "tiles", "export", str(out), "--json", *extra],
            check=False, capture_output=True, text=True,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        return dict(json.loads(r.stdout))

    def read_dir(out: Path) -> int:
        origin, size, root = _check_note((out / "checkpoint").read_text(encoding="utf-8"), vkey)
        assert origin == vkey.split("+")[0]
        leaves: list[bytes] = []
        full, partial = divmod(size, 256)
        for n in range(full + (1 if partial else 0)):
            suffix = "" if n < full else f".p/{partial}"
            tile = (out / f"tile/0/{_index_path(n)}{suffix}").read_bytes()
            hashes = [tile[i : i + 32] for i in range(0, len(tile), 32)]
            entries = _bundle((out / f"tile/entries/{_index_path(n)}{suffix}").read_bytes())
            assert len(entries) == len(hashes) == (256 if n < full else partial)
            for i, (entry, leaf) in enumerate(zip(entries, hashes, strict=True)):
                assert _h_leaf(entry) == leaf and json.loads(entry)["index"] == n * 256 + i
            leaves.extend(hashes)
        level1 = (out / f"tile/1/{_index_path(0)}.p/{full}").read_bytes()
        assert level1 == b"".join(_mth(leaves[i * 256 : (i + 1) * 256]) for i in range(full))
        assert _mth(leaves) == root
        assert not list(out.rglob("*.tmp")), "no temporary file is left behind"
        return size

    out = tmp_path / "static"
    info = export(out)
    assert info["size"] == size_now and read_dir(out) == size_now
    old = tmp_path / "old"
    assert export(old, "--size", "300")["size"] == 300 and read_dir(old) == 300
    again = export(old)  # the log at its size now, into the folder of the earlier export
    assert again["kept"] >= 2 and read_dir(old) == size_now  # tile 0/000 and bundle 000 are kept
