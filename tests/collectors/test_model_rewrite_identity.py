"""Issue 11: a pinned model file rewritten in place with the same size, its modification time set back with
``os.utime``, was not seen — the identity the collector checks at job end was (device, inode, size, mtime),
and all four come back. It now holds the change time too (a write or a ``utime`` moves it; no user can set it
back). And the identity was taken only after hashing, so a write during the hash was baked into the "was"
identity: it is now taken before hashing and checked right after (a change is a failed pin)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import ledger.collectors.campaign as campaign_mod
from ledger.collectors.campaign import CampaignRunner, _file_identity, _identity_change, load_campaign
from ledger.policy.verdict import evaluate
from ledger.recorder import LocalRecorder
from ledger.service import Ledger

from .conftest import entries_of
from .test_harness_gates import corpus, policy_with, stub_campaign  # noqa: F401  (corpus: a fixture)
from .test_model_changed_after_pin import _run_changing_the_model_after_the_pin

PREREQ = "NOT QUALIFIED — PREREQUISITES"


def _weights(model_dir: Path) -> Path:
    return next(p for p in sorted(model_dir.iterdir()) if p.is_file() and p.suffix != ".other")


def _rewrite_same_size_same_mtime(path: Path) -> None:
    """Other bytes of the same length, written in place (same inode), the modification time set back."""
    st = os.stat(path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    with path.open("r+b") as f:  # in place: the same inode
        f.write(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    now = os.stat(path)
    assert (now.st_dev, now.st_ino, now.st_size, now.st_mtime_ns) == (
        st.st_dev,
        st.st_ino,
        st.st_size,
        st.st_mtime_ns,
    )


def _touch_back(path: Path) -> None:
    """No byte changed: only a ``utime`` to the same times (the change time still moves)."""
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _truncate(path: Path) -> None:
    with path.open("r+b") as f:
        f.truncate(10)


def _remove(path: Path) -> None:
    path.unlink()


def _replace_by_rename(path: Path) -> None:
    """Same bytes, same size and mtime, but another file renamed over it (another inode)."""
    st = os.stat(path)
    other = path.with_name(path.name + ".other")
    other.write_bytes(path.read_bytes())
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(other, path)


def _wait_for_ctime_tick(path: Path) -> None:
    """File systems with coarse timestamps may give a write in the same tick the same ctime: wait one."""
    before = os.stat(path).st_ctime_ns
    probe = path.with_name(".ctime-probe")
    for _ in range(200):
        probe.write_bytes(b"x")
        if os.stat(probe).st_ctime_ns != before:
            break
        os.utime(probe)
    probe.unlink()


# --- the identity itself ------------------------------------------------------------------------------


def test_a_same_size_rewrite_with_its_mtime_set_back_is_another_identity(tmp_path: Path) -> None:
    f = tmp_path / "model.safetensors"
    f.write_bytes(os.urandom(4096))
    was = _file_identity(f)
    _wait_for_ctime_tick(f)
    _rewrite_same_size_same_mtime(f)
    now = _file_identity(f)
    assert was is not None and now is not None and was != now
    assert _identity_change(was, now) == "another change time"


@pytest.mark.parametrize(
    ("change", "names"),
    [
        (_touch_back, ["change time"]),
        (_truncate, ["size"]),
        (_replace_by_rename, ["inode"]),
    ],
    ids=["utime-only", "truncated", "renamed-over"],
)
def test_each_kind_of_change_is_named(
    tmp_path: Path, change: Callable[[Path], None], names: list[str]
) -> None:
    f = tmp_path / "w.bin"
    f.write_bytes(os.urandom(4096))
    was = _file_identity(f)
    _wait_for_ctime_tick(f)
    change(f)
    what = _identity_change(was, _file_identity(f))
    assert what is not None and what.startswith("another ")
    for name in names:
        assert name in what


def test_gone_and_unchanged(tmp_path: Path) -> None:
    f = tmp_path / "w.bin"
    f.write_bytes(b"abc")
    was = _file_identity(f)
    assert _identity_change(was, _file_identity(f)) is None
    f.unlink()
    assert _identity_change(was, _file_identity(f)) == "gone"
    assert _identity_change(None, was) == "another file"  # none was there (a dropped identity): not equal


# --- at job end ---------------------------------------------------------------------------------------


def _check_failed_after_pin(ledger: Ledger, result: Any, policy: Any, what: str) -> None:
    assert result.state == "failed"
    pins = [e["payload"] for e in entries_of(ledger, "model.pin")]
    assert len(pins) == 2 and pins[0]["verification"] != "failed" and pins[1]["verification"] == "failed"
    assert any(what in f and "than when it was hashed" in f for f in pins[1]["failures"]), pins[1]
    v = evaluate(ledger, {"campaign": "harness"}, policy)
    assert v["verdict"] == PREREQ, v["gates"]


def test_a_model_rewritten_in_place_with_size_and_mtime_restored_fails_the_job(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
) -> None:
    def rewrite(path: Path) -> None:
        _wait_for_ctime_tick(path)
        _rewrite_same_size_same_mtime(path)

    result, policy = _run_changing_the_model_after_the_pin(
        tmp_path, tiny_model_dir, recorder, corpus, rewrite
    )
    _check_failed_after_pin(ledger, result, policy, "change time")


@pytest.mark.parametrize(
    ("change", "what"),
    [(_touch_back, "change time"), (_replace_by_rename, "inode")],
    ids=["utime-only", "renamed-over"],
)
def test_neighbours_of_the_rewrite_fail_the_job_too(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
    change: Callable[[Path], None],
    what: str,
) -> None:
    def changed(path: Path) -> None:
        _wait_for_ctime_tick(path)
        change(path)

    result, policy = _run_changing_the_model_after_the_pin(
        tmp_path, tiny_model_dir, recorder, corpus, changed
    )
    _check_failed_after_pin(ledger, result, policy, what)


# --- during the hash ----------------------------------------------------------------------------------


def _run_changing_the_model_while_it_is_hashed(
    tmp_path: Path,
    model_dir: Path,
    recorder: LocalRecorder,
    semantic: tuple[Path, str],
    change: Callable[[Path], None],
    monkeypatch: pytest.MonkeyPatch,
    when: str,
) -> Any:
    path = stub_campaign(tmp_path, model_dir, semantic)
    policy = policy_with(tmp_path, semantic[1])
    runner = CampaignRunner(
        load_campaign(path), recorder, work_dir=tmp_path / "work", handle_signals=False, policy=policy
    )
    real_scan = campaign_mod.scan_model

    def scan_then_change(*args: Any, **kwargs: Any) -> Any:
        # the collector listed the files: a change before the scan lists and reads them, or after it read
        # them, is one while they were hashed
        _wait_for_ctime_tick(_weights(model_dir))
        if when == "before-read":
            change(model_dir)
        out = real_scan(*args, **kwargs)
        if when == "after-read":
            change(model_dir)
        return out

    monkeypatch.setattr(campaign_mod, "scan_model", scan_then_change)
    return runner.run(), policy


@pytest.mark.parametrize(
    ("change", "what", "when"),
    [
        (
            lambda d: _rewrite_same_size_same_mtime(_weights(d)),
            "another change time after the hash",
            "after-read",
        ),
        (
            lambda d: _rewrite_same_size_same_mtime(_weights(d)),
            "another change time after the hash",
            "before-read",
        ),
        (lambda d: _truncate(_weights(d)), "another size", "after-read"),
        (lambda d: (d / "added.bin").write_bytes(b"new"), "added.bin: listed differently", "before-read"),
        (lambda d: _weights(d).unlink(), "listed differently", "before-read"),
        (lambda d: _weights(d).unlink(), "gone while it was hashed", "after-read"),
    ],
    ids=[
        "rewrite-restored",
        "rewrite-before-read",
        "truncated",
        "file-added",
        "file-removed",
        "removed-after-read",
    ],
)
def test_a_model_written_while_it_was_hashed_fails_model_pinned(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    change: Callable[[Path], Any],
    what: str,
    when: str,
) -> None:
    result, policy = _run_changing_the_model_while_it_is_hashed(
        tmp_path, tiny_model_dir, recorder, corpus, change, monkeypatch, when
    )
    assert result.state == "failed"
    gate = next(g for g in result.gates if g.gate == "model-pinned")
    assert gate.status == "failed" and what in (gate.reason or ""), gate
    pins = [e["payload"] for e in entries_of(ledger, "model.pin")]
    # one pin, failed, naming the change — the "was" is not the written file (no second pin at job end)
    assert len(pins) == 1 and pins[0]["verification"] == "failed", pins
    assert any(what in f for f in pins[0]["failures"]), pins[0]
    v = evaluate(ledger, {"campaign": "harness"}, policy)
    assert v["verdict"] == PREREQ, v["gates"]
    assert not entries_of(ledger, "engine.launch")  # nothing launched on a failed pin
