"""fix143 (audit 97 f1): a weight index the engine never reads failed the model pin.

A safetensors checkpoint downloaded as HF users do (``huggingface-cli download --include "*.safetensors"
"*.json"``) brings the repo's ``pytorch_model.bin.index.json`` and none of the .bin shards it names; fix 140
read every ``*.index.json`` and failed the pin ("missing: … the engine loads every shard named") though vLLM
loads the safetensors and never reads the .bin index. The same for an index in a subfolder the engine is not
pointed at (an adapter's, ``original/``).

Now the pin reads the index vLLM's loader reads (``DefaultModelLoader._prepare_weights``): in the model's own
folder only, the index of each weight format the folder holds files of — ``consolidated*.safetensors``:
``consolidated.safetensors.index.json``; ``*.safetensors``: ``model.safetensors.index.json``; ``*.bin``:
``pytorch_model.bin.index.json`` (vLLM loads every .bin, the index lists the set it needs). The pin does not
see --load-format, so every format the folder holds is read (fail closed); a folder with no weight file reads
every index it has. Where a format has files but no index there, vLLM loads every file of it: a set named by
HF's shard naming (``…-00001-of-00002.safetensors``) must be whole."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ledger.collectors.campaign import CampaignRunner, load_campaign
from ledger.collectors.model import list_files, resolve_model, scan_model
from ledger.recorder import LocalRecorder

from .test_harness_gates import corpus, policy_with, stub_campaign  # noqa: F401  (corpus: a fixture)

SAFE_INDEX = "model.safetensors.index.json"
BIN_INDEX = "pytorch_model.bin.index.json"
MISTRAL_INDEX = "consolidated.safetensors.index.json"
S1, S2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
B1, B2 = "pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin"


def _index(d: Path, name: str, shards: tuple[str, ...]) -> None:
    weight_map = {f"layer.{i}.weight": s for i, s in enumerate(shards)}
    (d / name).parent.mkdir(parents=True, exist_ok=True)
    (d / name).write_text(
        json.dumps({"metadata": {"total_size": 4096 * len(shards)}, "weight_map": weight_map})
    )


def _files(d: Path, *names: str) -> None:
    for name in names:
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_bytes(os.urandom(4096))


def _folder(d: Path, *, safetensors: tuple[str, ...] = (S1, S2), bins: tuple[str, ...] = ()) -> Path:
    """A model folder: config, the weight files given, both of the repo's indexes (the .bin shards named
    by the .bin index are present only where ``bins`` says)."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    _files(d, *safetensors, *bins)
    _index(d, SAFE_INDEX, (S1, S2))
    _index(d, BIN_INDEX, (B1, B2))
    return d


def _failures(model: Path) -> list[str]:
    return scan_model(resolve_model(model)).failures


# --- the finding ------------------------------------------------------------------------------------------


def test_bin_index_never_read_failed_the_model_pin(tmp_path: Path) -> None:
    """The audit's folder: every safetensors shard and its index, the .bin index without its shards."""
    d = _folder(tmp_path / "m")
    assert _failures(d) == []
    # the .bin index is still a file the pin hashes; no shard of it is added as missing
    assert sorted(f.rel for f in list_files(resolve_model(d))) == sorted(
        ["config.json", S1, S2, SAFE_INDEX, BIN_INDEX]
    )


def test_bin_index_never_read_in_a_hf_cache_snapshot(tmp_path: Path) -> None:
    import hashlib

    repo = tmp_path / "hub" / "models--org--tiny"
    blobs, snap = repo / "blobs", repo / "snapshots" / ("b" * 40)
    blobs.mkdir(parents=True)
    snap.mkdir(parents=True)
    files = {
        SAFE_INDEX: json.dumps({"weight_map": {"a": S1, "b": S2}}).encode(),
        BIN_INDEX: json.dumps({"weight_map": {"a": B1, "b": B2}}).encode(),
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
    assert failure.startswith(f"{S2}: missing: {SAFE_INDEX} names it")


def test_unread_bin_index_malformed_fails_nothing(tmp_path: Path) -> None:
    """Neighbour: an index the engine does not read is not read at all — not even for its form."""
    d = _folder(tmp_path / "m")
    (d / BIN_INDEX).write_text("{not json")
    assert _failures(d) == []


# --- the index the engine reads still fails the pin --------------------------------------------------------


def test_both_indexes_a_safetensors_shard_missing_fails(tmp_path: Path) -> None:
    d = _folder(tmp_path / "m")
    (d / S2).unlink()
    assert _failures(d) == [
        f"{S2}: missing: {SAFE_INDEX} names it in its weight_map (the engine loads every shard named)"
    ]


def test_read_safetensors_index_malformed_fails_closed(tmp_path: Path) -> None:
    d = _folder(tmp_path / "m")
    (d / SAFE_INDEX).write_text(json.dumps({"weightmap": {"a": S1}}))  # renamed key
    [failure] = _failures(d)
    assert failure.startswith(f"{SAFE_INDEX}: not a weight index: no weight_map object"), failure


def test_bin_only_repo_with_a_missing_bin_shard_fails(tmp_path: Path) -> None:
    """A .bin checkpoint: vLLM loads every .bin of the folder; the .bin index lists the set it needs."""
    d = _folder(tmp_path / "m", safetensors=(), bins=(B1, B2))
    (d / SAFE_INDEX).unlink()
    assert _failures(d) == []
    (d / B2).unlink()
    assert _failures(d) == [
        f"{B2}: missing: {BIN_INDEX} names it in its weight_map (the engine loads every shard named)"
    ]


def test_part_of_the_bin_set_beside_safetensors_fails_closed(tmp_path: Path) -> None:
    """The folder holds .bin weights too: a --load-format the pin cannot see (npcache) loads them, so
    their index is read — the set is not whole."""
    d = _folder(tmp_path / "m", bins=(B1,))
    [failure] = _failures(d)
    assert failure.startswith(f"{B2}: missing: {BIN_INDEX} names it")


def test_folder_with_no_weights_reads_every_index(tmp_path: Path) -> None:
    """Nothing the engine could load: every index of the folder is read, each shard it names missing."""
    d = _folder(tmp_path / "m", safetensors=())
    assert sorted(f.split(":")[0] for f in _failures(d)) == sorted([S1, S2, B1, B2])


def test_safetensors_index_of_a_bin_download_is_not_read(tmp_path: Path) -> None:
    """The mirror of the finding (``--include "*.bin" "*.json"``): vLLM loads the .bin, never the
    safetensors index (its glob finds no *.safetensors)."""
    d = _folder(tmp_path / "m", safetensors=(), bins=(B1, B2))
    assert _failures(d) == []


# --- an index in a subfolder, or of another name, is not the engine's ---------------------------------------


@pytest.mark.parametrize("sub", ["adapter", "original", "a/b"])
def test_index_in_a_subfolder_is_not_read(tmp_path: Path, sub: str) -> None:
    d = _folder(tmp_path / "m", bins=(B1, B2))
    _index(d, f"{sub}/{SAFE_INDEX}", ("adapter-00001-of-00002.safetensors", "gone.safetensors"))
    _files(d, f"{sub}/adapter-00001-of-00002.safetensors")
    (d / sub / "bad.index.json").write_text("{not json")
    assert _failures(d) == []


@pytest.mark.parametrize(
    "name",
    ["model.fp16.safetensors.index.json", "Model.safetensors.index.json", "model.safetensors.index.json.bak"],
    ids=["variant", "case", "suffix"],
)
def test_index_of_another_name_is_not_read(tmp_path: Path, name: str) -> None:
    d = _folder(tmp_path / "m")
    _index(d, name, ("model-fp16-00001-of-00001.safetensors",))
    assert _failures(d) == []


# --- no index for the format: the shard naming says the set -------------------------------------------------


def test_bin_index_only_safetensors_cover_everything_pass(tmp_path: Path) -> None:
    """No safetensors index: vLLM loads every *.safetensors of the folder and never reads the .bin index;
    the safetensors set, by its names, is whole."""
    d = _folder(tmp_path / "m")
    (d / SAFE_INDEX).unlink()
    assert _failures(d) == []


def test_bin_index_only_safetensors_set_not_whole_fails(tmp_path: Path) -> None:
    d = _folder(tmp_path / "m")
    (d / SAFE_INDEX).unlink()
    (d / S2).unlink()
    assert _failures(d) == [
        f"{S2}: missing: {S1} is one of 2 shards by its name and the folder has no {SAFE_INDEX} "
        "(the engine loads every shard of the set)"
    ]


def test_shard_set_without_index_a_folder_in_its_place(tmp_path: Path) -> None:
    d = _folder(tmp_path / "m")
    (d / SAFE_INDEX).unlink()
    (d / S2).unlink()
    (d / S2).mkdir()
    [failure] = _failures(d)
    assert failure == (
        f"{S2}: one of the 2 shards of the set of {S1} (by its name), but not a file the pin lists; not read"
    )


def test_single_safetensors_file_with_no_index_passes(tmp_path: Path) -> None:
    """Neighbour: ``model.safetensors`` (no shard naming) and an unrelated .bin index: nothing missing."""
    d = _folder(tmp_path / "m", safetensors=("model.safetensors",))
    (d / SAFE_INDEX).unlink()
    assert _failures(d) == []


def test_index_present_names_the_set_not_the_file_names(tmp_path: Path) -> None:
    """Neighbour: with the index there vLLM loads the files it names (a stray shard name is filtered out)."""
    d = _folder(tmp_path / "m")
    _files(d, "model-00001-of-00003.safetensors")
    assert _failures(d) == []


def test_bin_set_without_index_not_whole_fails(tmp_path: Path) -> None:
    d = _folder(tmp_path / "m", safetensors=(), bins=(B1,))
    (d / SAFE_INDEX).unlink()
    (d / BIN_INDEX).unlink()
    [failure] = _failures(d)
    assert failure.startswith(
        f"{B2}: missing: {B1} is one of 2 shards by its name and the folder has no {BIN_INDEX}"
    )


def test_mistral_consolidated_set_without_its_index(tmp_path: Path) -> None:
    """consolidated*.safetensors (--load-format auto picks mistral): loaded whole without its index."""
    d = _folder(tmp_path / "m")
    c1, c2 = "consolidated-00001-of-00002.safetensors", "consolidated-00002-of-00002.safetensors"
    _files(d, c1, c2)
    assert _failures(d) == []
    (d / c2).unlink()
    [failure] = _failures(d)
    assert failure.startswith(
        f"{c2}: missing: {c1} is one of 2 shards by its name and the folder has no {MISTRAL_INDEX}"
    )
    _index(d, MISTRAL_INDEX, (c1, c2))
    [failure] = _failures(d)
    assert failure.startswith(f"{c2}: missing: {MISTRAL_INDEX} names it")


def test_files_vllm_does_not_load_are_no_bin_weights(tmp_path: Path) -> None:
    """training_args.bin (vLLM leaves it out of a load) and a hidden .bin (its glob skips it) do not make
    the folder a .bin checkpoint: the .bin index is still not read."""
    d = _folder(tmp_path / "m")
    _files(d, "training_args.bin", ".stale.bin")
    assert _failures(d) == []


def test_gguf_folder_unchanged(tmp_path: Path) -> None:
    d = tmp_path / "m"
    d.mkdir()
    (d / "model.gguf").write_bytes(b"GGUF" + os.urandom(64))
    assert _failures(d) == []
    _index(d, BIN_INDEX, (B1,))  # no weight file vLLM's formats load: the index is read, as before
    [failure] = _failures(d)
    assert failure.startswith(f"{B1}: missing: {BIN_INDEX} names it")


# --- the campaign -------------------------------------------------------------------------------------------


def test_audit_folder_passes_model_pinned(
    tmp_path: Path,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
) -> None:
    d = _folder(tmp_path / "m")
    runner = CampaignRunner(
        load_campaign(stub_campaign(tmp_path, d, corpus)),
        recorder,
        work_dir=tmp_path / "work",
        handle_signals=False,
        policy=policy_with(tmp_path, corpus[1]),
    )
    state, reason, *_ = runner._gate_model()
    assert state == "passed", reason
    assert runner._model_changes() == []
