"""Fix 150 (issue 11, known gap): the pin accepted ``./x`` in a weight_map that vLLM refuses.

vLLM 0.32's loader (``DefaultModelLoader._prepare_weights`` → ``filter_duplicate_safetensors_files``) reads
a safetensors format's index by joining each ``weight_map`` value to the folder it was given
(``os.path.join``) and requiring that string to be one of the paths its glob of the format's pattern found
— "Weight files referenced in index but missing" otherwise, and the engine never starts. Run on small
folders (``test_real_vllm_loader_agrees_with_the_pin``): ``./x``, ``x/../x``, ``sub/x`` (present),
``sub//x``, ``x/``, ``//x``, ``sub\\x`` as a separator, an empty name, a hidden ``.x.safetensors``
(present), a ``.bin`` in a safetensors index, another case, a trailing space, another Unicode form, a name
the mistral index's ``consolidated*`` pattern does not match — refused; a value that is no text — a
TypeError; an absolute path — accepted only where spelled as the folder the engine is given (the pin does
not see it: refused, fail closed). Accepted: the plain name, a name with a backslash where a file is named
so, a shard named by many tensors, a tensor named twice whose last value is good (json keeps the last).

The pin normalised the name (``PurePosixPath``: ``./x`` is ``x``) and looked it up anywhere in the listing,
so it passed ``model-pinned`` where vLLM refused to start: the engine's refusal was then read as a
runtime failure. Now an index vLLM reads holds each name to the loader's rule (the index's problem →
``model-pinned`` fails → NOT QUALIFIED — PREREQUISITES, the engine never launched); the .bin index vLLM
never reads is held to the .bin files its load takes (a name read as a path: ``./x.bin`` is ``x.bin``).
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import unicodedata
from pathlib import Path
from typing import Any

import pytest

from ledger.collectors.model import resolve_model, scan_model
from ledger.policy.verdict import evaluate
from ledger.recorder import LocalRecorder
from ledger.service import Ledger

from .conftest import ensure_engine, entries_of
from .test_fix76_pin_covers_what_loads import _run
from .test_harness_gates import corpus  # noqa: F401  (a fixture)

PREREQ = "NOT QUALIFIED — PREREQUISITES"
INDEX = "model.safetensors.index.json"
MISTRAL_INDEX = "consolidated.safetensors.index.json"
BIN_INDEX = "pytorch_model.bin.index.json"
S1, S2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
C1, C2 = "consolidated-00001-of-00002.safetensors", "consolidated-00002-of-00002.safetensors"
B1, B2 = "pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin"
CAFE_NFC = unicodedata.normalize("NFC", "café.safetensors")
CAFE_NFD = unicodedata.normalize("NFD", "café.safetensors")


def _folder(
    d: Path,
    files: tuple[str, ...],
    weight_map: Any,
    index: str = INDEX,
    raw: str | None = None,
) -> Path:
    """A model folder: config, the files given (``sub/x`` in a subfolder), and one index."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    for name in files:
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_bytes(os.urandom(64))
    text = raw if raw is not None else json.dumps({"metadata": {}, "weight_map": weight_map})
    (d / index).write_text(text)
    return d


def _failures(model: Path) -> list[str]:
    return scan_model(resolve_model(model)).failures


# (id, files, weight_map or raw index text, index): each a folder vLLM 0.32's loader refuses, run on its
# code (``test_real_vllm_loader_agrees_with_the_pin``); ABSOLUTE is filled with the folder's own path
ABSOLUTE = "<folder>/"
REFUSED: list[tuple[str, tuple[str, ...], Any, str]] = [
    ("dot-slash", (S1, S2), {"a": f"./{S1}", "b": S2}, INDEX),
    ("dot-slash-every-name", (S1, S2), {"a": f"./{S1}", "b": f"./{S2}"}, INDEX),
    ("dotdot-back-in", (S1, S2, "x/y"), {"a": f"x/../{S1}", "b": S2}, INDEX),
    ("double-slash-front", (S1, S2), {"a": f"//{S1}", "b": S2}, INDEX),
    ("double-slash-inside", (S1, S2, f"sub/{S1}"), {"a": f"sub//{S1}", "b": S2}, INDEX),
    ("trailing-slash", (S1, S2), {"a": f"{S1}/", "b": S2}, INDEX),
    ("subfolder-shard-present", (S1, f"sub/{S2}"), {"a": S1, "b": f"sub/{S2}"}, INDEX),
    ("backslash-as-separator", (S1, S2, f"sub/{S1}"), {"a": f"sub\\{S1}", "b": S2}, INDEX),
    ("empty", (S1, S2), {"a": "", "b": S2}, INDEX),
    ("hidden-shard-present", (S1, f".{S2}"), {"a": S1, "b": f".{S2}"}, INDEX),
    ("bin-in-safetensors-index", (S1, "x.bin"), {"a": S1, "b": "x.bin"}, INDEX),
    ("other-case", (S1, S2), {"a": S1.upper(), "b": S2}, INDEX),
    ("trailing-space", (S1, S2), {"a": f"{S1} ", "b": S2}, INDEX),
    ("other-unicode-form", (CAFE_NFC, S2), {"a": CAFE_NFD, "b": S2}, INDEX),
    ("int", (S1, S2), {"a": 3, "b": S2}, INDEX),
    ("null", (S1, S2), {"a": None, "b": S2}, INDEX),
    ("list", (S1, S2), {"a": [S1], "b": S2}, INDEX),
    ("nul-character", (S1, S2), {"a": f"{S1}\x00", "b": S2}, INDEX),
    (
        "dup-key-last-bad",
        (S1, S2),
        f'{{"weight_map": {{"a": "{S1}", "a": "nope.safetensors", "b": "{S2}"}}}}',
        INDEX,
    ),
    ("missing", (S1,), {"a": S1, "b": S2}, INDEX),
    (
        "mistral-names-a-model-shard",
        ("consolidated.safetensors", "model.safetensors"),
        {"a": "model.safetensors"},
        MISTRAL_INDEX,
    ),
    ("mistral-dot-slash", (C1, C2), {"a": C1, "b": f"./{C2}"}, MISTRAL_INDEX),
    ("absolute-as-the-engine-is-given-it", (S1, S2), {"a": ABSOLUTE + S1, "b": S2}, INDEX),
]
ACCEPTED: list[tuple[str, tuple[str, ...], Any, str]] = [
    ("plain", (S1, S2), {"a": S1, "b": S2}, INDEX),
    ("reordered", (S1, S2), {"z": S2, "a": S1}, INDEX),
    ("one-shard-many-tensors", (S1, S2), {"a": S1, "b": S2, "c": S1, "d": S2}, INDEX),
    (
        "dup-key-last-good",
        (S1, S2),
        f'{{"weight_map": {{"a": "nope.safetensors", "a": "{S1}", "b": "{S2}"}}}}',
        INDEX,
    ),
    ("backslash-in-a-file-name", ("a\\b.safetensors", S2), {"a": "a\\b.safetensors", "b": S2}, INDEX),
    ("unicode-name-as-listed", (CAFE_NFC, S2), {"a": CAFE_NFC, "b": S2}, INDEX),
    ("mistral-plain", (C1, C2), {"a": C1, "b": C2}, MISTRAL_INDEX),
]
# the absolute path vLLM takes (spelled as its folder argument) is the one case the pin refuses and vLLM
# does not: the pin does not see the engine's spelling of the folder (fail closed)
PIN_STRICTER = {"absolute-as-the-engine-is-given-it"}


def _case(tmp_path: Path, name: str, files: tuple[str, ...], weight_map: Any, index: str) -> Path:
    d = tmp_path / name
    if isinstance(weight_map, str):
        return _folder(d, files, None, index, raw=weight_map)
    if isinstance(weight_map, dict):
        absolute = str(d.absolute()) + "/"
        weight_map = {
            k: v.replace(ABSOLUTE, absolute) if isinstance(v, str) else v for k, v in weight_map.items()
        }
    return _folder(d, files, weight_map, index)


def _ids(cases: list[tuple[str, tuple[str, ...], Any, str]]) -> list[str]:
    return [c[0] for c in cases]


# --- the finding --------------------------------------------------------------------------------------------
def test_dot_slash_in_a_weight_map_vllm_refuses_passed_the_pin(tmp_path: Path) -> None:
    d = _case(tmp_path, "m", (S1, S2), {"a": S1, "b": f"./{S2}"}, INDEX)
    [failure] = _failures(d)
    assert failure.startswith(f"{INDEX}: its weight_map names the shard './{S2}'"), failure
    assert "not the name of a *.safetensors file the engine loads from the model folder" in failure


@pytest.mark.parametrize(("name", "files", "weight_map", "index"), REFUSED, ids=_ids(REFUSED))
def test_weight_map_name_vllm_refuses_fails_the_pin(
    tmp_path: Path, name: str, files: tuple[str, ...], weight_map: Any, index: str
) -> None:
    failures = _failures(_case(tmp_path, name, files, weight_map, index))
    # the index itself, or a shard it names that the folder lacks
    assert failures and all(index in f for f in failures), (name, failures)


@pytest.mark.parametrize(("name", "files", "weight_map", "index"), ACCEPTED, ids=_ids(ACCEPTED))
def test_weight_map_name_vllm_accepts_still_passes(
    tmp_path: Path, name: str, files: tuple[str, ...], weight_map: Any, index: str
) -> None:
    assert _failures(_case(tmp_path, name, files, weight_map, index)) == []


def test_one_missing_shard_both_formats_load_is_listed_once(tmp_path: Path) -> None:
    """Neighbour: a consolidated shard both indexes name (both formats' patterns match it), missing."""
    d = _folder(tmp_path / "m", (C1, C2), {"a": C1, "b": C2}, INDEX)
    (d / MISTRAL_INDEX).write_text(json.dumps({"weight_map": {"b": C2}}))
    (d / C2).unlink()
    [failure] = _failures(d)
    assert failure.startswith(f"{C2}: missing: {MISTRAL_INDEX} and {INDEX} names it"), failure


# --- the .bin index: never read by vLLM, the list of .bin shards its load needs -----------------------------
@pytest.mark.parametrize(
    ("files", "weight_map"),
    [
        pytest.param((B1, B2), {"a": f"./{B1}", "b": B2}, id="dot-slash"),
        pytest.param((B1, B2), {"a": f"{B1}", "b": f".//{B2}"}, id="dot-double-slash"),
        pytest.param((B1, B2), {"a": B1, "b": B2, "c": B1}, id="plain"),
    ],
)
def test_bin_index_name_as_a_path_to_a_loaded_bin_passes(
    tmp_path: Path, files: tuple[str, ...], weight_map: dict[str, str]
) -> None:
    """vLLM loads every .bin of the folder and never reads this index: ``./x.bin`` is the loaded x.bin."""
    assert _failures(_folder(tmp_path / "m", files, weight_map, BIN_INDEX)) == []


@pytest.mark.parametrize(
    ("files", "weight_map"),
    [
        pytest.param((B1, f"sub/{B2}"), {"a": B1, "b": f"sub/{B2}"}, id="subfolder-present"),
        pytest.param((B1, f".{B2}"), {"a": B1, "b": f".{B2}"}, id="hidden-present"),
        pytest.param((B1, "optimizer.bin"), {"a": B1, "b": "optimizer.bin"}, id="left-out-of-the-load"),
        pytest.param((B1, "x.pt"), {"a": B1, "b": "x.pt"}, id="not-a-bin"),
        pytest.param((B1, B2), {"a": B1, "b": ""}, id="empty"),
        pytest.param((B1, B2), {"a": B1, "b": 2}, id="int"),
    ],
)
def test_bin_index_name_vllm_does_not_load_fails(
    tmp_path: Path, files: tuple[str, ...], weight_map: dict[str, Any]
) -> None:
    failures = _failures(_folder(tmp_path / "m", files, weight_map, BIN_INDEX))
    assert len(failures) == 1 and failures[0].startswith(f"{BIN_INDEX}: "), failures


# --- the campaign -------------------------------------------------------------------------------------------
def test_dot_slash_name_refuses_the_campaign_before_the_engine(
    tmp_path: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
) -> None:
    d = _case(tmp_path, "m", (S1, S2), {"a": S1, "b": f"./{S2}"}, INDEX)
    result, policy = _run(tmp_path, d, recorder, corpus, None)
    assert result.state == "failed"
    # the pin, and (``_model_changes``: a file whose problem stands is said again at the job's end) a newer
    # one saying the same: every pin fails on the index
    pins = [e["payload"] for e in entries_of(ledger, "model.pin")]
    assert pins and all(p["verification"] == "failed" for p in pins)
    for pin in pins:
        assert any(f.startswith(f"{INDEX}: its weight_map names the shard './{S2}'") for f in pin["failures"])
    assert entries_of(ledger, "engine.launch") == []  # never started on an index vLLM refuses
    v = evaluate(ledger, {"campaign": "harness"}, policy)
    assert v["verdict"] == PREREQ, v["gates"]


# --- slow: vLLM 0.32's own loader on the same folders -------------------------------------------------------
_LOADER = textwrap.dedent(
    """
    import json, sys
    from vllm.config.load import LoadConfig
    from vllm.model_executor.model_loader.default_loader import DefaultModelLoader

    out = {}
    for folder in sys.argv[1:]:
        try:
            loader = DefaultModelLoader(LoadConfig(load_format="auto"))
            loader._prepare_weights(folder, None, None, True, None)
            out[folder] = None
        except Exception as e:
            out[folder] = f"{type(e).__name__}: {e}"[:300]
    print("RESULT " + json.dumps(out))
    """
)


@pytest.mark.slow
def test_real_vllm_loader_agrees_with_the_pin(tmp_path: Path) -> None:
    """Every case above, on vLLM 0.32's ``_prepare_weights`` (the engine venv's): refused where the pin
    fails, taken where it passes — but for the absolute path spelled as the engine's folder argument
    (``PIN_STRICTER``: the pin does not see that spelling)."""
    python = ensure_engine("vllm")["VLLM_PYTHON"]
    folders = {c[0]: _case(tmp_path, *c) for c in REFUSED + ACCEPTED}
    r = subprocess.run(
        [python, "-c", _LOADER, *(str(d.absolute()) for d in folders.values())],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"},
    )
    line = next((x for x in r.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, (r.stdout[-2000:], r.stderr[-3000:])
    refused = {name: json.loads(line[7:])[str(d.absolute())] for name, d in folders.items()}
    for name, d in folders.items():
        pin_fails = bool(_failures(d))
        vllm_refuses = refused[name] is not None
        if name in PIN_STRICTER:
            assert pin_fails and not vllm_refuses, (name, refused[name])
        else:
            assert pin_fails == vllm_refuses, (name, refused[name], _failures(d))
