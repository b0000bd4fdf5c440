"""Issue 11 (audit 67, F1 and F2): the pin did not cover every file the engine loads.

F1: a split GGUF (``tt-00001-of-00002.gguf`` + ``tt-00002-of-00002.gguf``): the campaign names split 1,
llama.cpp loads every split of the set, and the pin listed split 1 only — split 2 swapped after the pin went
unseen (QUALIFIED), and split 2 cut under the engine blamed the engine. The pin now lists every split
(llama.cpp's naming ``PREFIX-NNNNN-of-MMMMM.gguf`` and the header's ``split.count``, read with the gguf
library); a missing split fails the pin; a split changed after the pin is a newer, failed pin.

F2: a weights file added to a pinned model folder after the pin was loaded by vLLM unseen: the end-of-job
check looked only at the files pinned. It now lists the folder again and compares the file set: any file
added or removed (every file the pin hashes counts, not a list of suffixes) is a newer, failed pin naming it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

from ledger.collectors.campaign import CampaignRunner, load_campaign
from ledger.collectors.model import gguf_split_set, list_files, pin_payload, resolve_model, scan_model
from ledger.entries import pin_bindings
from ledger.policy.verdict import evaluate
from ledger.recorder import LocalRecorder
from ledger.service import Ledger

from .conftest import entries_of
from .test_harness_gates import corpus, policy_with, stub_campaign  # noqa: F401  (corpus: a fixture)

PREREQ = "NOT QUALIFIED — PREREQUISITES"


def _write_gguf(
    path: Path, *, tensors: int = 2, split_max_tensors: int = 0, kv: dict[str, Any] | None = None
) -> None:
    """A tiny GGUF (``tensors`` float32 tensors), split one tensor a file when ``split_max_tensors``."""
    w = gguf.GGUFWriter(path, arch="llama", split_max_tensors=split_max_tensors)
    for key, value in (kv or {}).items():
        if isinstance(value, str):
            w.add_string(key, value)
        else:
            w.add_uint16(key, value)
    for i in range(tensors):
        w.add_tensor(f"t{i}", np.full((16,), float(i), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture
def split_gguf(tmp_path: Path) -> Path:
    """A split set of two (gguf's own ``split_max_tensors``): returns split 1, the file a campaign names."""
    d = tmp_path / "m"
    d.mkdir()
    _write_gguf(d / "tt.gguf", split_max_tensors=1)
    assert sorted(p.name for p in d.iterdir()) == ["tt-00001-of-00002.gguf", "tt-00002-of-00002.gguf"]
    return d / "tt-00001-of-00002.gguf"


def _names(model: Path) -> list[str]:
    return [f.rel for f in list_files(resolve_model(model))]


def _problems(model: Path) -> list[str]:
    return scan_model(resolve_model(model)).failures


# --- what a pin lists --------------------------------------------------------------------------------------


def test_split_gguf_pin_listed_only_the_named_split(split_gguf: Path) -> None:
    scan = scan_model(resolve_model(split_gguf))
    assert [f.rel for f in scan.files] == ["tt-00001-of-00002.gguf", "tt-00002-of-00002.gguf"]
    assert scan.failures == []
    payload = pin_payload(scan)
    assert all(f["sha256"] and f["blake3"] for f in payload["files"])
    # every split is a shard every launch is bound to
    assert {"shard:tt-00001-of-00002.gguf", "shard:tt-00002-of-00002.gguf"} <= set(pin_bindings(payload))


def test_a_single_gguf_and_a_file_not_gguf_are_one_file(tmp_path: Path) -> None:
    """Neighbours: no split set, nothing beside the file is pinned (nor is its absence a problem)."""
    _write_gguf(tmp_path / "one.gguf")
    (tmp_path / "weights.bin").write_bytes(os.urandom(1024))
    (tmp_path / "other.gguf").write_bytes(b"x")  # beside it, not named by it
    for name in ("one.gguf", "weights.bin"):
        assert _names(tmp_path / name) == [name]
        assert _problems(tmp_path / name) == []


def test_missing_split_was_not_refused_at_pin_time(split_gguf: Path) -> None:
    split_gguf.with_name("tt-00002-of-00002.gguf").unlink()
    scan = scan_model(resolve_model(split_gguf))
    assert scan.verification == "failed"
    assert any(f.startswith("tt-00002-of-00002.gguf: missing split") for f in scan.failures), scan.failures


def test_a_split_set_named_by_its_name_alone_is_pinned_whole(tmp_path: Path) -> None:
    """Neighbour: a file named as split 1 of 3 with no split.count in its header: every name is pinned, a
    missing one fails (the name is how llama.cpp finds the others; fail closed on a set not whole)."""
    _write_gguf(tmp_path / "x-00001-of-00003.gguf")
    (tmp_path / "x-00002-of-00003.gguf").write_bytes(b"two")
    assert _names(tmp_path / "x-00001-of-00003.gguf") == [
        "x-00001-of-00003.gguf",
        "x-00002-of-00003.gguf",
        "x-00003-of-00003.gguf",
    ]
    assert [p.split(":")[0] for p in _problems(tmp_path / "x-00001-of-00003.gguf")] == [
        "x-00003-of-00003.gguf"
    ]


def test_split_header_under_a_name_that_is_not_split_naming(split_gguf: Path) -> None:
    """Renamed: the header says split.count 2 but llama.cpp cannot find split 2 from this name."""
    renamed = split_gguf.with_name("tt.gguf")
    split_gguf.rename(renamed)
    [problem] = _problems(renamed)
    assert "split.count = 2" in problem and "not llama.cpp's split naming" in problem


def test_split_name_and_header_disagree_on_the_count(split_gguf: Path) -> None:
    three = split_gguf.with_name("tt-00001-of-00003.gguf")
    split_gguf.rename(three)
    problems = _problems(three)
    assert any("its name says 3 splits, its GGUF header split.count = 2" in p for p in problems), problems


def test_named_split_is_not_the_first(split_gguf: Path) -> None:
    """Reordered: the campaign names split 2; llama.cpp refuses it, the pin lists the whole set and fails."""
    second = split_gguf.with_name("tt-00002-of-00002.gguf")
    assert sorted(_names(second)) == ["tt-00001-of-00002.gguf", "tt-00002-of-00002.gguf"]
    problems = _problems(second)
    assert any("llama.cpp loads a split set from its first split" in p for p in problems), problems


def test_split_count_mistyped_in_the_header(tmp_path: Path) -> None:
    f = tmp_path / "s.gguf"
    _write_gguf(f, kv={"split.count": "2"})
    paths, problems = gguf_split_set(f)
    assert paths == [f] and problems == ["its GGUF header's split.count is '2', not a count"]


def test_gguf_header_unreadable_fails_closed(tmp_path: Path) -> None:
    f = tmp_path / "bad-00001-of-00001.gguf"
    f.write_bytes(b"GGUF" + b"\xff" * 12)
    problems = _problems(f)
    assert len(problems) == 1 and "cannot read its GGUF header" in problems[0], problems


# --- the end-of-job check: the set, listed again ---------------------------------------------------


def _pinned_runner(tmp_path: Path, model: Path, semantic: tuple[Path, str], recorder: LocalRecorder) -> Any:
    runner = CampaignRunner(
        load_campaign(stub_campaign(tmp_path, model, semantic)),
        recorder,
        work_dir=tmp_path / "work",
        handle_signals=False,
        policy=policy_with(tmp_path, semantic[1]),
    )
    status, _, _, counts = runner._gate_model()
    assert status == "passed"
    return runner, counts


def _add_weights(model_dir: Path) -> None:
    (model_dir / "zz-extra.safetensors").write_bytes(os.urandom(4096))


def _add_in_a_subfolder(model_dir: Path) -> None:
    (model_dir / "sub").mkdir()
    (model_dir / "sub" / "adapter.bin").write_bytes(b"x" * 100)


def _add_a_readme(model_dir: Path) -> None:
    """Not weights: any file the pin would hash counts (the engine's file choice is not known here)."""
    (model_dir / "README.md").write_text("hi")


def _remove_config(model_dir: Path) -> None:
    (model_dir / "config.json").unlink()


def _rename_weights(model_dir: Path) -> None:
    (model_dir / "model.safetensors").rename(model_dir / "model-00001-of-00001.safetensors")


@pytest.mark.parametrize(
    ("change", "expect"),
    [
        (_add_weights, ["zz-extra.safetensors: added after the pin"]),
        (_add_in_a_subfolder, ["sub/adapter.bin: added after the pin"]),
        (_add_a_readme, ["README.md: added after the pin"]),
        (_remove_config, ["config.json: gone"]),
        (
            _rename_weights,
            ["model-00001-of-00001.safetensors: added after the pin", "model.safetensors: gone"],
        ),
    ],
    ids=["weights-added", "in-a-subfolder", "not-weights", "removed", "renamed"],
)
def test_weights_file_added_after_the_pin_was_unseen(
    tmp_path: Path,
    tiny_model_dir: Path,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
    change: Callable[[Path], None],
    expect: list[str],
) -> None:
    runner, _ = _pinned_runner(tmp_path, tiny_model_dir, corpus, recorder)
    assert runner._model_changes() == []
    change(tiny_model_dir)
    changes = runner._model_changes()
    assert len(changes) == len(expect), changes
    for line, want in zip(sorted(changes), sorted(expect), strict=True):
        assert line.startswith(want), changes


def test_a_link_retargeted_inside_the_folder_is_another_file(
    tmp_path: Path,
    tiny_model_dir: Path,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
) -> None:
    """Neighbour: the listing names the same file, but it now leads to other bytes already there (its old
    target untouched: only the path it resolves to says so)."""
    (tiny_model_dir / "a.bin").write_bytes(b"a" * 64)
    (tiny_model_dir / "b.bin").write_bytes(b"b" * 64)
    os.symlink("a.bin", tiny_model_dir / "w.bin")
    runner, _ = _pinned_runner(tmp_path, tiny_model_dir, corpus, recorder)
    (tiny_model_dir / "w.bin").unlink()
    os.symlink("b.bin", tiny_model_dir / "w.bin")
    changes = runner._model_changes()
    assert any(c.startswith("w.bin: ") for c in changes), changes


def test_split_set_changed_after_the_pin(
    tmp_path: Path,
    split_gguf: Path,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
) -> None:
    runner, counts = _pinned_runner(tmp_path, split_gguf, corpus, recorder)
    assert counts["files"] == 2
    second = split_gguf.with_name("tt-00002-of-00002.gguf")
    other = tmp_path / "other.gguf"
    shutil.copy(second, other)
    other.write_bytes(other.read_bytes()[:-4] + b"\0\0\0\1")
    os.replace(other, second)  # another file moved over split 2
    [change] = runner._model_changes()
    assert change.startswith("tt-00002-of-00002.gguf: another"), change


def test_split_header_grown_after_the_pin_names_a_split_no_pin_lists(
    tmp_path: Path,
    split_gguf: Path,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
) -> None:
    """Neighbour: split 1 swapped for one whose name stays but whose set is another (three splits by its
    name now: the listing differs, and the missing third split is named)."""
    runner, _ = _pinned_runner(tmp_path, split_gguf, corpus, recorder)
    d = tmp_path / "three"
    d.mkdir()
    _write_gguf(d / "tt.gguf", tensors=3, split_max_tensors=1)
    os.replace(d / "tt-00001-of-00003.gguf", split_gguf)
    changes = runner._model_changes()
    assert any(c.startswith("tt-00001-of-00002.gguf: another") for c in changes), changes
    assert any("split.count = 3" in c for c in changes), changes


# --- through a whole job and the verdict ------------------------------------------------------------------


def _run(
    tmp_path: Path,
    model: Path,
    recorder: LocalRecorder,
    semantic: tuple[Path, str],
    change: Callable[[], None] | None,
) -> tuple[Any, Any]:
    policy = policy_with(tmp_path, semantic[1])
    runner = CampaignRunner(
        load_campaign(stub_campaign(tmp_path, model, semantic)),
        recorder,
        work_dir=tmp_path / "work",
        handle_signals=False,
        policy=policy,
    )
    pinned = runner._gate_model

    def pin_then_change() -> Any:
        out = pinned()
        if change is not None:
            change()
        return out

    runner._gate_model = pin_then_change  # type: ignore[method-assign]
    return runner.run(), policy


def _failed_after_pin(ledger: Ledger, result: Any, policy: Any, name: str) -> None:
    assert result.state == "failed"
    pins = [e["payload"] for e in entries_of(ledger, "model.pin")]
    assert len(pins) == 2 and pins[0]["verification"] != "failed" and pins[1]["verification"] == "failed"
    assert any(f.startswith(f"{name}: ") for f in pins[1]["failures"]), pins[1]
    v = evaluate(ledger, {"campaign": "harness"}, policy)
    assert v["verdict"] == PREREQ, v["gates"]


def test_split_swapped_after_the_pin_was_qualified(
    tmp_path: Path,
    split_gguf: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
) -> None:
    second = split_gguf.with_name("tt-00002-of-00002.gguf")

    def swap() -> None:
        other = tmp_path / "other.gguf"
        other.write_bytes(second.read_bytes())
        os.replace(other, second)

    result, policy = _run(tmp_path, split_gguf, recorder, corpus, swap)
    _failed_after_pin(ledger, result, policy, "tt-00002-of-00002.gguf")


def test_weights_added_to_the_folder_after_the_pin_passed_model_pinned(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
) -> None:
    result, policy = _run(tmp_path, tiny_model_dir, recorder, corpus, lambda: _add_weights(tiny_model_dir))
    _failed_after_pin(ledger, result, policy, "zz-extra.safetensors")
    [job_end] = [e["payload"] for e in entries_of(ledger, "job") if e["payload"]["state"] != "running"]
    assert "zz-extra.safetensors" in job_end["reason"]


def test_missing_split_refuses_the_campaign_before_the_engine(
    tmp_path: Path,
    split_gguf: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
) -> None:
    split_gguf.with_name("tt-00002-of-00002.gguf").unlink()
    result, policy = _run(tmp_path, split_gguf, recorder, corpus, None)
    assert result.state == "failed"
    [pin] = [e["payload"] for e in entries_of(ledger, "model.pin")]
    assert pin["verification"] == "failed"
    assert entries_of(ledger, "engine.launch") == []  # never started on a set not whole
    v = evaluate(ledger, {"campaign": "harness"}, policy)
    assert v["verdict"] == PREREQ, v["gates"]


def test_split_set_left_alone_succeeds(
    tmp_path: Path,
    split_gguf: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
) -> None:
    """Neighbour: nothing changed, one pin of both splits, the job ends as its gates say."""
    result, _ = _run(tmp_path, split_gguf, recorder, corpus, None)
    assert result.state == "succeeded", [(g.gate, g.reason) for g in result.gates if g.status != "passed"]
    [pin] = [e["payload"] for e in entries_of(ledger, "model.pin")]
    assert [f["path"] for f in pin["files"]] == ["tt-00001-of-00002.gguf", "tt-00002-of-00002.gguf"]
