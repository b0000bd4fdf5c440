"""Model pins over HF cache layouts (incl. the seed-004 racing-downloads corruption) and the collect CLI."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import pytest

from ledger.collectors.model import git_blob_sha1, resolve_model, scan_model
from ledger.service import Ledger

from .conftest import FIXTURES, entries_of, run_ledger

REV = "49ec31ec0975e46a1aeef24186a45f11be3042b8"


def make_hf_cache(root: Path, shards: dict[str, bytes], small: dict[str, bytes]) -> Path:
    """A real HF hub cache layout: blobs named by SHA-256 (LFS) or git SHA-1, snapshot links into them."""
    repo = root / "models--org--tiny-awq"
    blobs = repo / "blobs"
    snap = repo / "snapshots" / REV
    blobs.mkdir(parents=True)
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REV)
    for name, data in shards.items():
        blob = blobs / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snap / name).symlink_to(os.path.relpath(blob, snap))
    for name, data in small.items():
        sha1 = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        blob = blobs / sha1
        blob.write_bytes(data)
        (snap / name).symlink_to(os.path.relpath(blob, snap))
    return snap


@pytest.fixture
def hf_snapshot(tmp_path: Path) -> Path:
    shards = {f"model-0000{i}-of-00004.safetensors": os.urandom(300_000 + i) for i in range(1, 5)}
    return make_hf_cache(tmp_path / "hub", shards, {"config.json": b'{"model_type": "mistral3"}\n'})


def test_git_blob_sha1_matches_git(tmp_path: Path) -> None:
    p = tmp_path / "f"
    p.write_bytes(b"hello\n")
    assert git_blob_sha1(p) == "ce013625030ba8dba906f756967f9e9ca394464a"  # `git hash-object`


def test_hf_snapshot_verifies_offline(hf_snapshot: Path) -> None:
    src = resolve_model(hf_snapshot)
    assert (src.layout, src.repo_id, src.revision) == ("hf-cache", "org/tiny-awq", REV)
    assert resolve_model(hf_snapshot.parents[1]).root == hf_snapshot  # the repo folder resolves via refs/main
    scan = scan_model(src)
    assert scan.verification == "passed"
    assert [f.lfs for f in scan.files] == [False, True, True, True, True]
    assert all(f.verified for f in scan.files)
    shard = scan.files[1]
    assert shard.digests is not None
    assert shard.digests.sha256 == shard.expected


def test_racing_downloads_corrupted_blob_fails_naming_the_file(hf_snapshot: Path, home: Path) -> None:
    """Seed 004: a model dir corrupted by racing `hf download`s; the blob no longer matches its name."""
    target = (hf_snapshot / "model-00003-of-00004.safetensors").resolve()
    data = bytearray(target.read_bytes())
    data[1000:1010] = b"\0" * 10
    target.write_bytes(bytes(data))
    r = run_ledger("collect", "model", str(hf_snapshot), "--home", str(home), "--json")
    assert r.returncode == 1, r.stderr
    out = json.loads(r.stdout)
    assert out["verification"] == "failed"
    assert len(out["failures"]) == 1
    assert out["failures"][0].startswith("model-00003-of-00004.safetensors: content sha256")
    bad = next(f for f in out["files"] if f["path"] == "model-00003-of-00004.safetensors")
    assert bad["verified"] is False
    r = run_ledger("collect", "model", str(hf_snapshot), "--home", str(home))
    assert r.returncode == 1
    assert "model-00003-of-00004.safetensors" in r.stderr
    lg = Ledger.open(home)
    try:
        pins = entries_of(lg, "model.pin")
        assert len(pins) == 2  # the failed verification is recorded, not hidden
        assert pins[0]["payload"]["verification"] == "failed"
        assert pins[0]["subject"]["model"] == "org/tiny-awq"
        arts = pins[0]["artifacts"]
        assert all(a["stored"] is False for a in arts)  # shards by reference, not copied
        assert {a["name"] for a in arts} >= {"model/model-00001-of-00004.safetensors"}
    finally:
        lg.close()


def test_missing_and_unfinished_blobs_fail(hf_snapshot: Path) -> None:
    target = (hf_snapshot / "model-00001-of-00004.safetensors").resolve()
    target.rename(target.with_name(target.name + ".incomplete"))
    scan = scan_model(resolve_model(hf_snapshot))
    assert scan.verification == "failed"
    assert "dangling link" in scan.failures[0]


def test_plain_directory_store_copies_files(tmp_path: Path, home: Path) -> None:
    d = tmp_path / "m"
    d.mkdir()
    (d / "weights.bin").write_bytes(b"x" * 1000)
    r = run_ledger("collect", "model", str(d), "--home", str(home), "--store", "--json", "--campaign", "c1")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["verification"] == "not_applicable"
    assert out["files"][0]["sha256"] == hashlib.sha256(b"x" * 1000).hexdigest()
    lg = Ledger.open(home)
    try:
        [pin] = entries_of(lg, "model.pin")
        assert pin["artifacts"][0]["stored"] is True
        assert pin["subject"]["campaign"] == "c1"
    finally:
        lg.close()


def test_collect_host_on_a_cpu_only_host(home: Path) -> None:
    r = run_ledger("collect", "host", "--home", str(home), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    hp = out["host_probe"]
    assert hp["kernel"]
    if not hp["gpus"]:
        assert hp["gpu_note"] == "no GPU found"  # a fact, not an error
    snap = out["env_snapshots"][0]
    assert snap["interpreter"] == sys.executable
    lg = Ledger.open(home)
    try:
        [env] = entries_of(lg, "env.snapshot")
        assert env["artifacts"][0]["name"] == "pip-freeze.txt"
        assert lg.signer_names()[env["signer"]] == "collector"
    finally:
        lg.close()


def test_collector_key_is_created_when_absent(tmp_path: Path) -> None:
    home = tmp_path / "fresh"
    Ledger.init(home).close()
    r = run_ledger(
        "collect",
        "kernel",
        "--home",
        str(home),
        "--file",
        str(FIXTURES / "kernel_strix_gpu_hang.log"),
        "--json",
    )
    assert r.returncode == 0, r.stderr
    assert "created and enrolled key 'collector'" in r.stderr
    out = json.loads(r.stdout)
    assert out["last_reset_at"] == "2026-09-09T09:01:18.520093Z"
    assert len(out["events"]) == 8
    r = run_ledger("collect", "kernel", "--home", str(home), "--key", "nobody")
    assert r.returncode == 2
    assert "key-not-found" in r.stderr


def test_kernel_not_readable_is_recorded(home: Path) -> None:
    r = run_ledger("collect", "kernel", "--home", str(home), "--json", env={"PATH": "/nonexistent"})
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["readable"] is False
    assert "journalctl: not installed" in out["reason"]
