"""fix78 (audit 69 f2): a weights file added to a pinned model folder after the pin and removed before the
job's end went unseen — vLLM loads every ``*.safetensors`` it finds at start-up — because the end-of-job
check (``CampaignRunner._model_changes``) compared only the listing at the end with the pinned set.

Now the pin keeps each folder it listed files in (``ModelListing.folders``: the root and every folder the
walk went into, none it skips) with its identity (device, inode, modification time, change time); adding an
entry to a folder or removing one moves both times, so a folder whose identity moved is a change ("a file
was added or removed in DIR during the run") → a newer, failed pin → NOT QUALIFIED — PREREQUISITES, as a
file change is. The same holds between the listing before the hash and the one after it (``_gate_model``).
Harmless: a folder the pin does not list (an HF cache's ``.locks``, ``.no_exist``, ``blobs``, ``refs``;
a local dir's ``.cache/``), and reading a folder."""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import ledger.collectors.campaign as campaign_mod
from ledger.collectors.campaign import CampaignRunner, _GateFailed, load_campaign
from ledger.collectors.model import list_files, list_model, resolve_model
from ledger.policy.verdict import evaluate
from ledger.recorder import LocalRecorder
from ledger.service import Ledger

from .conftest import entries_of
from .test_fix76_pin_covers_what_loads import _write_gguf
from .test_harness_gates import corpus, policy_with, stub_campaign  # noqa: F401  (corpus: a fixture)

PREREQ = "NOT QUALIFIED — PREREQUISITES"
MOVED = "a file was added or removed in"
REV = "0123456789abcdef0123456789abcdef01234567"


def _runner(tmp_path: Path, model: Path, semantic: tuple[Path, str], recorder: LocalRecorder) -> Any:
    return CampaignRunner(
        load_campaign(stub_campaign(tmp_path, model, semantic)),
        recorder,
        work_dir=tmp_path / "work",
        handle_signals=False,
        policy=policy_with(tmp_path, semantic[1]),
    )


def _pinned(tmp_path: Path, model: Path, semantic: tuple[Path, str], recorder: LocalRecorder) -> Any:
    runner = _runner(tmp_path, model, semantic, recorder)
    status, *_ = runner._gate_model()
    assert status == "passed"
    assert runner._model_changes() == []
    return runner


def _hf_snapshot(root: Path) -> Path:
    """An HF hub cache: blobs named by SHA-256, snapshot links into them, refs/main, .locks, .no_exist."""
    repo = root / "models--org--tiny"
    snap = repo / "snapshots" / REV
    for d in (repo / "blobs", snap / "sub", repo / "refs", repo / ".locks" / "models--org--tiny"):
        d.mkdir(parents=True)
    (repo / "refs" / "main").write_text(REV)
    (repo / ".no_exist" / REV).mkdir(parents=True)
    for name in ("model.safetensors", "sub/adapter.safetensors"):
        data = os.urandom(8192)
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snap / name).symlink_to(os.path.relpath(blob, (snap / name).parent))
    return snap


# --- the change: a file that came and went ------------------------------------------------------------


def _add_then_remove(folder: Path, name: str = "zz-extra.safetensors") -> Callable[[], None]:
    def change() -> None:
        (folder / name).write_bytes(os.urandom(4096))
        (folder / name).unlink()

    return change


def _rename_away_and_back(folder: Path) -> Callable[[], None]:
    def change() -> None:
        (folder / "model.safetensors").rename(folder / "moved.safetensors")
        (folder / "moved.safetensors").rename(folder / "model.safetensors")

    return change


def _folder_made_then_removed(folder: Path) -> Callable[[], None]:
    def change() -> None:
        (folder / "adapter").mkdir()
        (folder / "adapter" / "w.safetensors").write_bytes(b"x" * 64)
        shutil.rmtree(folder / "adapter")

    return change


@pytest.mark.parametrize(
    "where",
    [
        "weights-at-the-root",
        "not-weights",
        "in-a-subfolder",
        "renamed-away-and-back",
        "folder-made-and-removed",
    ],
)
def test_weights_file_added_and_removed_after_the_pin_was_unseen(
    tmp_path: Path,
    tiny_model_dir: Path,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
    where: str,
) -> None:
    """The failure: nothing listed differs at the end, so nothing was reported. Now the folder is."""
    (tiny_model_dir / "sub").mkdir()
    (tiny_model_dir / "sub" / "a.json").write_text("{}")
    runner = _pinned(tmp_path, tiny_model_dir, corpus, recorder)
    folder = tiny_model_dir / "sub" if where == "in-a-subfolder" else tiny_model_dir
    change = {
        "weights-at-the-root": _add_then_remove(tiny_model_dir),
        "not-weights": _add_then_remove(tiny_model_dir, "README.md"),
        "in-a-subfolder": _add_then_remove(tiny_model_dir / "sub"),
        "renamed-away-and-back": _rename_away_and_back(tiny_model_dir),
        "folder-made-and-removed": _folder_made_then_removed(tiny_model_dir),
    }[where]
    change()
    changes = runner._model_changes()
    if where == "renamed-away-and-back":
        # a rename moves the file's own change time too: the file says so, which is enough to fail
        assert changes and changes[0].startswith(("model.safetensors: another ", f"{folder}: {MOVED}")), (
            changes
        )
        return
    assert len(changes) == 1, changes
    assert changes[0].startswith(f"{folder}: {MOVED} {folder} during the run (another "), changes
    assert "change time" in changes[0], changes


def test_a_pinned_folder_removed_is_gone(
    tmp_path: Path,
    tiny_model_dir: Path,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
) -> None:
    """Neighbour: an empty folder the pin walked (no file in it to say so) removed after the pin."""
    (tiny_model_dir / "empty").mkdir()
    runner = _pinned(tmp_path, tiny_model_dir, corpus, recorder)
    (tiny_model_dir / "empty").rmdir()
    changes = runner._model_changes()
    assert any(c.startswith(f"{tiny_model_dir / 'empty'}: the folder is gone") for c in changes), changes


def test_a_file_that_came_and_went_in_an_hf_snapshot_is_seen(
    tmp_path: Path,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
) -> None:
    snap = _hf_snapshot(tmp_path / "hub")
    runner = _pinned(tmp_path, snap, corpus, recorder)
    (snap / "extra.safetensors").symlink_to("../../blobs/" + "0" * 64)
    (snap / "extra.safetensors").unlink()
    changes = runner._model_changes()
    assert len(changes) == 1 and changes[0].startswith(f"{snap}: {MOVED} {snap} during the run"), changes


def test_files_come_and_go_where_the_pin_does_not_list_harmlessly(
    tmp_path: Path,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
) -> None:
    """An HF cache's lock files, ``.no_exist`` markers, new blobs and refs are outside snapshots/<rev>:
    not pinned folders. Reading the snapshot (as the engine does) moves nothing."""
    snap = _hf_snapshot(tmp_path / "hub")
    repo = snap.parent.parent
    runner = _pinned(tmp_path, snap, corpus, recorder)
    assert set(list_model(resolve_model(snap)).folders) == {snap, snap / "sub"}
    lock = repo / ".locks" / "models--org--tiny" / ("a" * 64 + ".lock")
    lock.write_text("")
    lock.unlink()
    (repo / ".no_exist" / REV / "generation_config.json").write_text("")
    (repo / "blobs" / ("b" * 64 + ".incomplete")).write_bytes(b"x")
    (repo / "refs" / "pr").mkdir()
    os.listdir(snap)
    for f in list_files(resolve_model(snap)):
        f.path.read_bytes()
    assert runner._model_changes() == []


def test_a_local_dirs_cache_folder_is_not_kept(
    tmp_path: Path,
    tiny_model_dir: Path,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
) -> None:
    """``huggingface_hub`` keeps a local_dir's download metadata in ``.cache/`` — skipped by the pin, so its
    identity is not kept either (nor ``.git``'s, nor ``__pycache__``'s): files come and go there freely."""
    meta = tiny_model_dir / ".cache" / "huggingface" / "download"
    meta.mkdir(parents=True)
    (tiny_model_dir / ".git").mkdir()
    (tiny_model_dir / "__pycache__").mkdir()
    runner = _pinned(tmp_path, tiny_model_dir, corpus, recorder)
    assert list_model(resolve_model(tiny_model_dir)).folders == [tiny_model_dir]
    (meta / "model.safetensors.metadata").write_text("x")
    (meta / "model.safetensors.lock").write_text("")
    (meta / "model.safetensors.lock").unlink()
    (tiny_model_dir / ".git" / "index").write_text("x")
    (tiny_model_dir / "__pycache__" / "m.pyc").write_bytes(b"x")
    assert runner._model_changes() == []


def test_a_model_named_by_one_file_keeps_no_folder(
    tmp_path: Path,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
) -> None:
    """A GGUF named by its file: llama.cpp loads that file (and its splits, each pinned by name), not the
    folder it lies in — a file beside it that comes and goes is harmless; the file changed is not."""
    models = tmp_path / "models"
    models.mkdir()
    model = models / "tiny.gguf"
    _write_gguf(model)
    assert list_model(resolve_model(model)).folders == []
    runner = _pinned(tmp_path, model, corpus, recorder)
    _add_then_remove(models, "other.gguf")()
    (models / "notes.txt").write_text("x")
    assert runner._model_changes() == []
    os.utime(model, ns=(0, 0))
    assert runner._model_changes() != []


def test_a_followed_folder_link_is_kept_by_its_own_path(tmp_path: Path, tiny_model_dir: Path) -> None:
    (tiny_model_dir / "real").mkdir()
    (tiny_model_dir / "real" / "w.safetensors").write_bytes(b"w" * 64)
    os.symlink("real", tiny_model_dir / "linked")
    os.symlink("/", tiny_model_dir / "outside")  # not followed: not kept
    folders = list_model(resolve_model(tiny_model_dir)).folders
    assert sorted(folders) == sorted([tiny_model_dir, tiny_model_dir / "linked", tiny_model_dir / "real"])


# --- the pin itself: a file that came and went while the model was hashed ----------------------------


def test_a_file_that_came_and_went_while_the_model_was_hashed_passed_the_pin(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_scan = campaign_mod.scan_model

    def scan_after_a_visit(src: Any) -> Any:
        _add_then_remove(tiny_model_dir)()  # after the listing before the hash, gone before the one after
        return real_scan(src)

    monkeypatch.setattr(campaign_mod, "scan_model", scan_after_a_visit)
    runner = _runner(tmp_path, tiny_model_dir, corpus, recorder)
    with pytest.raises(_GateFailed, match=f"{MOVED} .* while it was hashed"):
        runner._gate_model()
    [pin] = [e["payload"] for e in entries_of(ledger, "model.pin")]
    assert pin["verification"] == "failed"
    assert any(f.startswith(f"{tiny_model_dir}: {MOVED}") for f in pin["failures"]), pin


# --- the whole job, with the stub engine, as the reproducer runs it ----------------------------------


def _run(
    tmp_path: Path,
    model: Path,
    recorder: LocalRecorder,
    semantic: tuple[Path, str],
    during: Callable[[], None] | None,
    before_end: Callable[[], None] | None,
) -> tuple[Any, Any]:
    runner = _runner(tmp_path, model, semantic, recorder)
    pinned, changes = runner._gate_model, runner._model_changes

    def pin_then_change() -> Any:
        out = pinned()
        if during is not None:
            during()  # present while the engine starts and loads the folder
        return out

    def undo_then_check() -> list[str]:
        if before_end is not None:
            before_end()  # gone again before the job's end lists the folder
        return changes()

    runner._gate_model = pin_then_change  # type: ignore[method-assign]
    runner._model_changes = undo_then_check  # type: ignore[method-assign]
    return runner.run(), runner.policy


@pytest.mark.parametrize("where", ["root", "subfolder"])
def test_a_job_whose_model_folder_had_weights_come_and_go_was_not_failed(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
    where: str,
) -> None:
    (tiny_model_dir / "sub").mkdir()
    (tiny_model_dir / "sub" / "a.json").write_text("{}")
    folder = tiny_model_dir if where == "root" else tiny_model_dir / "sub"
    extra = folder / "zz-extra.safetensors"
    result, policy = _run(
        tmp_path,
        tiny_model_dir,
        recorder,
        corpus,
        lambda: extra.write_bytes(os.urandom(4096)),
        extra.unlink,
    )
    assert result.state == "failed"
    pins = [e["payload"] for e in entries_of(ledger, "model.pin")]
    assert [p["verification"] for p in pins] == ["not_applicable", "failed"], pins
    assert pins[1]["failures"][0].startswith(f"{folder}: {MOVED} {folder} during the run"), pins[1]
    [job_end] = [e["payload"] for e in entries_of(ledger, "job") if e["payload"]["state"] != "running"]
    assert MOVED in job_end["reason"], job_end
    v = evaluate(ledger, {"campaign": "harness"}, policy)
    assert v["verdict"] == PREREQ, v["gates"]


def test_a_job_whose_model_folder_was_left_alone_is_pinned_once(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
) -> None:
    """Control: with a local_dir's ``.cache`` written to during the run, the job is not failed for it."""
    meta = tiny_model_dir / ".cache" / "huggingface"
    meta.mkdir(parents=True)
    result, _ = _run(
        tmp_path, tiny_model_dir, recorder, corpus, lambda: (meta / "x.lock").write_text(""), None
    )
    assert result.state == "succeeded", result
    assert [e["payload"]["verification"] for e in entries_of(ledger, "model.pin")] == ["not_applicable"]
