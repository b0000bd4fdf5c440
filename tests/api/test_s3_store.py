"""The S3 artifact store against a local S3-compatible server (moto server mode), alone and behind the API."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import blake3
import httpx
import pytest

from ledger.entries import ArtifactRef
from ledger.errors import ArtifactCorruptError, ArtifactMissingError, ArtifactTooLargeError, IntegrityError
from ledger.hashing import Digest, HexDigest
from ledger.service import Ledger
from ledger.store import open_store
from ledger.store.s3 import S3Store
from ledger.tokens import create_token
from tests.api.conftest import LEDGER_BIN, free_port, start_server

S3_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def _moto_server() -> str:
    found = shutil.which("moto_server", path=str(Path(sys.executable).parent)) or shutil.which("moto_server")
    if found is None:
        pytest.fail("moto_server is not installed (pip install 'moto[server]')")
    return found


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [_moto_server(), "-H", "127.0.0.1", "-p", str(port)], stdout=out, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail(f"moto_server did not start:\n{log.read_text()}")
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(autouse=True)
def _s3_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in S3_ENV.items():
        monkeypatch.setenv(k, v)


def _digest(data: bytes) -> Digest:
    return Digest(HexDigest(blake3.blake3(data).hexdigest()))


class _Stream:
    def __init__(self, data: bytes) -> None:
        import io

        self._b = io.BytesIO(data)

    def readinto(self, buf: memoryview) -> int:
        return self._b.readinto(buf)


def test_s3_store_streams_verifies_and_reads_back(s3_endpoint: str) -> None:
    store = open_store(f"s3://art-{secrets.token_hex(3)}/ledger/a?endpoint={s3_endpoint}")
    assert isinstance(store, S3Store)
    store.init()
    data = secrets.token_bytes(40 * 1024 * 1024 + 123)  # several multipart parts
    d = _digest(data)
    stored = store.put_stream(_Stream(data), expected=d, sha256=True)  # type: ignore[arg-type]
    assert stored.created and stored.size == len(data) and stored.digest == d
    assert stored.sha256 is not None
    assert store.has(d) and store.size(d) == len(data)
    with store.open_verified(d) as f:
        assert f.read() == data
    again = store.put_stream(_Stream(data))  # type: ignore[arg-type]
    assert again.created is False
    assert list(store.iter_digests()) == [d]
    listing = store.s3.list_objects_v2(Bucket=store.bucket)["Contents"]
    assert [o["Key"] for o in listing] == [f"ledger/a/objects/{d.hex[:2]}/{d.hex}"]  # no incoming/ left


def test_s3_store_refuses_a_mismatch_or_oversize_and_keeps_nothing(s3_endpoint: str) -> None:
    store = S3Store(f"ref-{secrets.token_hex(3)}", "p", endpoint_url=s3_endpoint)
    store.init()
    data = secrets.token_bytes(1000)
    wrong = _digest(b"something else")
    with pytest.raises(IntegrityError):
        store.put_stream(_Stream(data), expected=wrong)  # type: ignore[arg-type]
    with pytest.raises(ArtifactTooLargeError):
        store.put_stream(_Stream(data), max_size=999)  # type: ignore[arg-type]
    assert store.s3.list_objects_v2(Bucket=store.bucket).get("KeyCount", 0) == 0
    assert not store.has(_digest(data))
    with pytest.raises(ArtifactMissingError):
        store.size(_digest(data))


def test_s3_store_detects_corrupt_bytes(s3_endpoint: str) -> None:
    store = S3Store(f"cor-{secrets.token_hex(3)}", "", endpoint_url=s3_endpoint)
    store.init()
    data = b"model shard bytes" * 1000
    d = store.put_stream(_Stream(data)).digest  # type: ignore[arg-type]
    store.s3.put_object(Bucket=store.bucket, Key=f"objects/{d.hex[:2]}/{d.hex}", Body=b"bit rot" + data[7:])
    with pytest.raises(ArtifactCorruptError):
        store.open_verified(d)


def test_serve_with_an_s3_store(s3_endpoint: str, tmp_path: Path) -> None:
    bucket = f"srv-{secrets.token_hex(3)}"
    home = tmp_path / "home"
    init = subprocess.run(
        [LEDGER_BIN, "--home", str(home), "init", "--store", f"s3://{bucket}/evidence", "--json"],
        check=False,
        capture_output=True,
        text=True,
        env={**os.environ, **S3_ENV, "AWS_ENDPOINT_URL_S3": s3_endpoint},
    )
    assert init.returncode == 0, init.stderr
    led = Ledger.open(home)
    writer, _ = create_token(led.engine, "w", "writer")
    led.new_key("c1", ["collector"])
    srv = start_server(home, "--s3-endpoint", s3_endpoint, env=S3_ENV)
    try:
        data = secrets.token_bytes(3 * 1024 * 1024)
        d = _digest(data)
        h = {"Authorization": f"Bearer {writer}"}
        r = httpx.put(f"{srv.url}/v1/artifacts/{d}", content=data, headers=h, timeout=60)
        assert r.status_code == 201, r.text
        bad = httpx.put(f"{srv.url}/v1/artifacts/{_digest(b'x')}", content=data, headers=h, timeout=60)
        assert bad.status_code == 422
        st = led.make_statement(
            "note",
            {"campaign": "s3"},
            {"text": "log on S3"},
            artifacts=[ArtifactRef(name="blob", digest=str(d), size=len(data))],
        )
        r = httpx.post(f"{srv.url}/v1/entries", json=led.sign(st, "c1").to_json(), headers=h)
        assert r.status_code == 201, r.text
        got = httpx.get(f"{srv.url}/v1/artifacts/{d}", headers=h, timeout=60)
        assert got.content == data
        os.environ["AWS_ENDPOINT_URL_S3"] = s3_endpoint
        try:
            verify = subprocess.run(
                [LEDGER_BIN, "--home", str(home), "verify"], check=False, capture_output=True, text=True
            )
        finally:
            del os.environ["AWS_ENDPOINT_URL_S3"]
        assert verify.returncode == 0, verify.stdout + verify.stderr
        assert "1 artifacts" in verify.stdout
    finally:
        srv.stop()
        led.close()
