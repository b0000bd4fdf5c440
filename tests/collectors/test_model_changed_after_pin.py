"""Audit 21, F2: the model file changed (a byte flipped, or swapped for a symlink to another file) between
`model-pinned` hashing it and the engine loading it: the launch still bound the hashed digest and the campaign
was QUALIFIED on bytes the engine never loaded. The collector notes each pinned file's identity on disk when
it hashes it and checks it again when the job ends; a change is a newer, failed model pin (the model-pinned
gate judges the newest pin) and the job fails, naming the file."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ledger.collectors.campaign import CampaignRunner, load_campaign
from ledger.policy.verdict import evaluate
from ledger.recorder import LocalRecorder
from ledger.service import Ledger

from .conftest import entries_of
from .test_harness_gates import corpus, policy_with, stub_campaign  # noqa: F401  (corpus: a fixture)


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[0] ^= 0xFF
    path.write_bytes(bytes(data))


def _swap_for_a_symlink(path: Path) -> None:
    other = path.with_name(path.name + ".other")
    other.write_bytes(path.read_bytes() + b"x")
    path.unlink()
    os.symlink(other, path)


def _run_changing_the_model_after_the_pin(
    tmp_path: Path,
    model_dir: Path,
    recorder: LocalRecorder,
    semantic: tuple[Path, str],
    change: Callable[[Path], None] | None,
) -> Any:
    path = stub_campaign(tmp_path, model_dir, semantic)
    policy = policy_with(tmp_path, semantic[1])
    runner = CampaignRunner(
        load_campaign(path), recorder, work_dir=tmp_path / "work", handle_signals=False, policy=policy
    )
    pinned = runner._gate_model

    def pin_then_change() -> Any:
        out = pinned()
        if change is not None:
            change(next(p for p in sorted(model_dir.iterdir()) if p.is_file() and p.suffix != ".other"))
        return out

    runner._gate_model = pin_then_change  # type: ignore[method-assign]
    return runner.run(), policy


@pytest.mark.parametrize("change", [_flip, _swap_for_a_symlink], ids=["byte-flipped", "symlink"])
def test_a_model_changed_after_it_was_pinned_fails_the_job_and_model_pinned(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
    change: Callable[[Path], None],
) -> None:
    result, policy = _run_changing_the_model_after_the_pin(tmp_path, tiny_model_dir, recorder, corpus, change)
    assert result.state == "failed"
    pins = [e["payload"] for e in entries_of(ledger, "model.pin")]
    assert len(pins) == 2 and pins[0]["verification"] != "failed" and pins[1]["verification"] == "failed"
    assert any("than when it was hashed" in f for f in pins[1]["failures"]), pins[1]
    [job_end] = [e["payload"] for e in entries_of(ledger, "job") if e["payload"]["state"] != "running"]
    assert "changed after they were pinned" in job_end["reason"]
    v = evaluate(ledger, {"campaign": "harness"}, policy)
    assert v["verdict"] == "NOT QUALIFIED — PREREQUISITES", v["gates"]


def test_a_model_left_alone_is_pinned_once(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
) -> None:
    """Neighbour: nothing changed, one pin, the job ends as its gates say."""
    result, _ = _run_changing_the_model_after_the_pin(tmp_path, tiny_model_dir, recorder, corpus, None)
    assert result.state == "succeeded", [(g.gate, g.reason) for g in result.gates if g.status != "passed"]
    assert len(entries_of(ledger, "model.pin")) == 1
