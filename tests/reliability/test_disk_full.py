"""Disk full: ENOSPC while storing an artifact or appending → a clear `storage` error, nothing partial.

The small filesystem is a 2 MiB tmpfs (``mount -t tmpfs``, needs root). Where mounting is not allowed
the same refusals are driven by RLIMIT_FSIZE in a subprocess (SIGXFSZ ignored → EFBIG), which needs no
privilege; those tests run everywhere.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger.errors import StorageError
from ledger.service import Ledger

LEDGER_BIN = Path(sys.executable).with_name("ledger")
KB = 1024
MB = 1024 * KB


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs; where mounting is refused (not root), skipped: the RLIMIT_FSIZE tests still run."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], check=False, capture_output=True
    )
    if r.returncode != 0:
        pytest.skip(f"mount not permitted ({r.stderr.decode().strip()}); the RLIMIT_FSIZE tests cover it")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def store_files(store: Path) -> tuple[list[Path], list[Path]]:
    """(visible objects, leftover temp files) of a filesystem store."""
    objects = store / "objects"
    visible = [f for d in objects.iterdir() if d.is_dir() for f in d.iterdir()]
    temps = [f for f in objects.iterdir() if f.is_file()]
    return visible, temps


def ledger_cli(home: Path, *args: str, fsize: int | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run the installed `ledger` console script, optionally with a file-size limit."""

    def limit() -> None:
        if fsize is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return subprocess.run(
        [str(LEDGER_BIN), "--home", str(home), *args],
        check=False,
        capture_output=True,
        preexec_fn=limit,
        timeout=60,
    )


def assert_storage_error(r: subprocess.CompletedProcess[bytes]) -> None:
    err = r.stderr.decode()
    assert r.returncode == 2, (r.returncode, err)
    assert err.startswith("error[storage]:"), err
    assert len(err.strip().splitlines()) == 1, err
    assert not r.stdout.strip(), r.stdout


def assert_verifies(home: Path, size: int) -> None:
    r = ledger_cli(home, "verify", "--json")
    assert r.returncode == 0, r.stdout.decode() + r.stderr.decode()
    doc = json.loads(r.stdout)
    assert doc["ok"] and doc["size"] == size


@pytest.fixture
def tmpfs_home(tmp_path: Path, small_fs: Path) -> Path:
    """A home whose database and store both live on the 2 MiB filesystem."""
    home = small_fs / "home"
    led = Ledger.init(home)
    led.new_key("hostA", ["collector"])
    led.close()
    return home


def test_full_disk_short_write_never_stores_a_truncated_artifact(tmpfs_home: Path, tmp_path: Path) -> None:
    """Regression: an unbuffered write on a filling disk returned short without raising, so a 1.9 MB
    prefix of a 3 MB file was renamed into place under the full file's digest and `put` said ok."""
    big = tmp_path / "shard.bin"
    big.write_bytes(os.urandom(3 * MB))
    r = ledger_cli(tmpfs_home, "put", str(big))
    assert_storage_error(r)
    assert "no space left" in r.stderr.decode()
    visible, temps = store_files(tmpfs_home / "store")
    assert visible == [] and temps == [], (visible, temps)
    assert_verifies(tmpfs_home, 2)
    # Space is usable again at once: a small artifact goes in.
    small = tmp_path / "small.log"
    small.write_bytes(b"ok\n")
    assert ledger_cli(tmpfs_home, "put", str(small)).returncode == 0


def test_full_disk_during_direct_ingest_leaves_nothing(tmpfs_home: Path, tmp_path: Path) -> None:
    """A file large enough for the O_DIRECT path (two writers in flight) meets ENOSPC the same way."""
    from ledger.store.filesystem import _DIRECT_MIN

    big = tmp_path / "model.safetensors"
    with big.open("wb") as f:
        for _ in range(_DIRECT_MIN // MB + 8):
            f.write(os.urandom(MB))
    r = ledger_cli(tmpfs_home, "put", "--sha256", str(big))
    assert_storage_error(r)
    assert "no space left" in r.stderr.decode()
    assert store_files(tmpfs_home / "store") == ([], [])
    assert_verifies(tmpfs_home, 2)


def test_enospc_on_record_with_artifact_records_nothing(tmpfs_home: Path, tmp_path: Path) -> None:
    big = tmp_path / "stderr.log"
    big.write_bytes(os.urandom(3 * MB))
    r = ledger_cli(
        tmpfs_home, "record", "note", "--key", "hostA", "-s", "campaign=c", "--data", '{"text": "x"}',
        "--artifact", f"stderr={big}",
    )  # fmt: skip
    assert_storage_error(r)
    assert store_files(tmpfs_home / "store") == ([], [])
    assert_verifies(tmpfs_home, 2)


def test_enospc_appending_refuses_whole_batch_and_recovers(
    tmpfs_home: Path, small_fs: Path, tmp_path: Path
) -> None:
    """Fill the filesystem that holds the database, then append until it is full."""
    filler = small_fs / "filler"
    led = Ledger.open(tmpfs_home)
    statvfs = os.statvfs(small_fs)
    free = statvfs.f_bavail * statvfs.f_frsize
    filler.write_bytes(b"\0" * max(free - 96 * KB, 0))
    committed = led.size()
    failure: StorageError | None = None
    for i in range(400):
        batch = [
            led.sign(
                led.make_statement("note", {"campaign": "c"}, {"text": f"{i}.{j} " + "x" * 2000}), "hostA"
            )
            for j in range(10)
        ]
        try:
            committed += len(led.append(batch))
        except StorageError as e:
            failure = e
            break
    assert failure is not None, "the filesystem never filled up"
    assert failure.code == "storage" and ("full" in failure.message or "space" in failure.message)
    led.close()
    led = Ledger.open(tmpfs_home)
    assert led.size() == committed, "a failed batch left entries behind"
    # The CLI says the same in one line.
    data = tmp_path / "big.json"
    data.write_text(json.dumps({"text": "y" * 200_000}))
    r = ledger_cli(tmpfs_home, "record", "note", "--key", "hostA", "-s", "campaign=c", "--data", f"@{data}")
    assert_storage_error(r)
    filler.unlink()
    assert_verifies(tmpfs_home, committed)
    led.record("note", {"campaign": "c"}, {"text": "after the disk was freed"}, key="hostA")
    assert_verifies(tmpfs_home, committed + 1)
    led.close()


# --- the same refusals without privileges: RLIMIT_FSIZE (EFBIG) -----------------------------------------


@pytest.fixture
def plain_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    led = Ledger.init(home)
    led.new_key("hostA", ["collector"])
    led.close()
    return home


def test_file_size_limit_while_storing_is_a_storage_error(plain_home: Path, tmp_path: Path) -> None:
    big = tmp_path / "shard.bin"
    big.write_bytes(os.urandom(3 * MB))
    r = ledger_cli(plain_home, "put", str(big), fsize=1 * MB)
    assert_storage_error(r)
    assert store_files(plain_home / "store") == ([], [])
    assert_verifies(plain_home, 2)


def test_file_size_limit_during_direct_ingest_is_a_storage_error(plain_home: Path, tmp_path: Path) -> None:
    """On ext4 the large-file path writes with O_DIRECT: EFBIG mid-file still leaves nothing behind."""
    from ledger.store.filesystem import _DIRECT_MIN

    big = tmp_path / "model.safetensors"
    with big.open("wb") as f:
        for _ in range(_DIRECT_MIN // MB + 40):
            f.write(os.urandom(MB))
    r = ledger_cli(plain_home, "put", str(big), fsize=_DIRECT_MIN + 3 * MB)
    assert_storage_error(r)
    assert store_files(plain_home / "store") == ([], [])
    assert_verifies(plain_home, 2)


def test_file_size_limit_while_appending_is_a_storage_error(plain_home: Path, tmp_path: Path) -> None:
    db = plain_home / "ledger.db"
    limit = max(p.stat().st_size for p in plain_home.glob("ledger.db*")) + 8 * KB
    data = tmp_path / "big.json"
    data.write_text(json.dumps({"text": "y" * 300_000}))
    r = ledger_cli(plain_home, "record", "note", "--key", "hostA", "-s", "campaign=c", "--data", f"@{data}",
                   fsize=limit)  # fmt: skip
    assert_storage_error(r)
    assert db.exists()
    assert_verifies(plain_home, 2)
