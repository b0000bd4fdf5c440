"""Filesystem store: streaming, dedup, atomic rename, verified reads."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.errors import ArtifactCorruptError, ArtifactMissingError, ArtifactTooLargeError, IntegrityError
from ledger.hashing import blake3_hex, hash_file, parse_digest
from ledger.store import FilesystemStore


@pytest.fixture
def store(tmp_path: Path) -> FilesystemStore:
    s = FilesystemStore(tmp_path / "store")
    s.init()
    return s


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=70_000))
def test_put_get_dedup(store: FilesystemStore, data: bytes) -> None:
    first = store.put_stream(io.BytesIO(data), sha256=True)
    second = store.put_stream(io.BytesIO(data))
    assert first.digest == second.digest
    assert str(first.digest) == f"blake3:{blake3_hex(data)}"
    assert second.created is False
    with store.open_verified(first.digest) as f:
        assert f.read() == data
    assert not [p for p in store.objects.iterdir() if p.name.startswith(".incoming")]


def test_large_stream_is_hashed_in_chunks(store: FilesystemStore, tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(3 * 1024 * 1024 + 17))
    got = store.put_stream(big.open("rb"))
    assert got.digest == hash_file(big).blake3
    assert got.size == big.stat().st_size


def test_corrupted_artifact_is_reported_and_never_served(store: FilesystemStore) -> None:
    s = store.put_stream(io.BytesIO(b"stderr: UVA is not available"))
    path = store.path_of(s.digest)
    os.chmod(path, 0o644)
    path.write_bytes(b"stderr: all fine")
    with pytest.raises(ArtifactCorruptError) as e:
        store.open_verified(s.digest)
    assert str(s.digest) in e.value.message


def test_missing_artifact(store: FilesystemStore) -> None:
    with pytest.raises(ArtifactMissingError):
        store.open_verified(parse_digest("blake3:" + "0" * 64))


def test_expected_digest_mismatch_leaves_nothing(store: FilesystemStore) -> None:
    with pytest.raises(IntegrityError):
        store.put_stream(io.BytesIO(b"abc"), expected=parse_digest("blake3:" + "1" * 64))
    assert list(store.iter_digests()) == []
    assert [p.name for p in store.objects.iterdir()] == []


def test_size_limit_leaves_nothing(store: FilesystemStore) -> None:
    with pytest.raises(ArtifactTooLargeError):
        store.put_stream(io.BytesIO(b"x" * 100), max_size=10)
    assert list(store.objects.iterdir()) == []


@pytest.mark.parametrize(
    "text",
    ["blake3:../../etc/passwd", "blake3:" + "A" * 64, "sha256:" + "0" * 64, "0" * 64, "blake3:" + "0" * 63],
    ids=["traversal", "uppercase", "wrong-algorithm", "no-prefix", "short"],
)
def test_digest_parser_refuses_paths_and_garbage(text: str) -> None:
    from ledger.errors import InputError

    with pytest.raises(InputError):
        parse_digest(text)


def test_stale_incoming_files_are_reported_and_collected(tmp_path: Path) -> None:
    """A writer killed mid-put leaves a temp file: never an artifact, visible to verify, removed by gc."""
    import time

    from ledger.service import Ledger

    led = Ledger.init(tmp_path / "home")
    assert isinstance(led.store, FilesystemStore)
    leftover = led.store.objects / ".incoming-dead"
    leftover.write_bytes(b"half of a log")
    fresh = led.store.objects / ".incoming-live"
    fresh.write_bytes(b"a put in progress")
    old = time.time() - 7200
    os.utime(leftover, (old, old))
    report = led.verify()
    assert report
    assert report.incomplete_uploads == 2
    assert list(led.store.iter_digests()) == []
    assert led.store.remove_stale_incoming(3600) == (1, len(b"half of a log"))
    assert not leftover.exists()
    assert fresh.exists()


def test_oversized_envelope_refused(tmp_path: Path) -> None:
    from ledger.errors import RequestTooLargeError
    from ledger.service import MAX_ENVELOPE_BYTES, Ledger

    led = Ledger.init(tmp_path / "home")
    led.new_key("hostA", ["collector"])
    with pytest.raises(RequestTooLargeError):
        led.record("note", {"campaign": "c"}, {"text": "x" * (MAX_ENVELOPE_BYTES + 1)}, key="hostA")
    assert led.size() == 2


def test_large_file_is_written_with_direct_io_and_hashed_as_written(
    store: FilesystemStore, tmp_path: Path
) -> None:
    from ledger.store import filesystem

    big = tmp_path / "shard.bin"
    size = filesystem._DIRECT_MIN + 3 * 4096 + 5  # an unaligned tail after the direct chunks
    with big.open("wb") as f:
        f.write(os.urandom(size))
    got = store.put_file(big, sha256=True)
    assert got.size == size
    assert got.digest == hash_file(big).blake3
    with store.open_verified(got.digest) as f, big.open("rb") as src:
        assert f.read() == src.read()
    assert store.put_file(big).created is False


@pytest.mark.parametrize("sizes", [[4096 * 3, 100, 8192], [8192, 4096 * 2 + 1, 7], [5], [4096]])
def test_direct_sink_writes_every_byte_in_order(tmp_path: Path, sizes: list[int]) -> None:
    import mmap

    from ledger.store.filesystem import _DirectSink

    data = os.urandom(sum(sizes))
    target = tmp_path / "out.bin"
    buf = mmap.mmap(-1, max(sizes))  # page-aligned, as the ingest ring is
    with io.FileIO(target, "wb") as out:
        sink = _DirectSink(out, direct=True)
        at = 0
        for n in sizes:
            buf[:n] = data[at : at + n]
            sink(memoryview(buf)[:n], at)
            at += n
    assert target.read_bytes() == data


def test_direct_io_refused_by_the_filesystem_falls_back_without_losing_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Filesystems that accept the O_DIRECT flag but refuse the write (EINVAL) get buffered writes."""
    import errno
    import fcntl
    import mmap

    from ledger.store import filesystem

    real_pwrite = os.pwrite
    refused: list[int] = []

    def pwrite(fd: int, data: memoryview, offset: int) -> int:
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            refused.append(len(data))
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(filesystem.os, "pwrite", pwrite)
    data = os.urandom(3 * 4096 + 9)
    buf = mmap.mmap(-1, len(data))
    buf[:] = data
    target = tmp_path / "out.bin"
    with io.FileIO(target, "wb") as out:
        filesystem._DirectSink(out, direct=True)(memoryview(buf), 0)
    assert refused == [3 * 4096]
    assert target.read_bytes() == data


@settings(max_examples=30)
@given(st.binary(max_size=40_000), st.integers(min_value=1, max_value=5000))
def test_hash_stream_write_at_places_every_chunk_at_its_offset(data: bytes, chunk: int) -> None:
    """Two writer threads may take chunks in any order; each lands at its own offset."""
    from ledger.hashing import hash_stream

    out = bytearray(len(data))

    def write_at(view: memoryview, offset: int) -> None:
        out[offset : offset + len(view)] = view

    got = hash_stream(io.BytesIO(data), sha256=True, write_at=write_at, chunk_size=chunk)
    assert bytes(out) == data
    assert got.size == len(data)
    assert got.blake3.hex == blake3_hex(data)


def test_hash_stream_refuses_two_destinations() -> None:
    from ledger.hashing import hash_stream

    with pytest.raises(ValueError, match="not both"):
        hash_stream(io.BytesIO(b"x"), sink=lambda v: None, write_at=lambda v, at: None)
