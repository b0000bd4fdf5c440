"""vLLM's `--lora-modules` and `--speculative-config` load weights beside the pinned model (a LoRA adapter, a
draft model) and were not checked (stop 42's fix68 left them open): they are refused at load unless every
file they name lies inside the pinned model folder. A speculative method that names no model (n-gram) loads
no file and passes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledger.collectors.campaign import load_campaign
from ledger.errors import ConfigError
from tests.collectors.test_fix68_model_extras_launchers import _campaign

SERVE = ["vllm", "serve", "{model}"]


def _folder(tmp_path: Path) -> Path:
    model = tmp_path / "models" / "tiny"
    (model / "adapters" / "a1").mkdir(parents=True)
    (model / "config.json").write_text("{}")
    return model


def _outside(tmp_path: Path) -> str:
    a = tmp_path / "elsewhere" / "adapter"
    a.mkdir(parents=True)
    return str(a)


@pytest.mark.parametrize(
    "args",
    [
        ["--lora-modules", "sql={other}"],
        ["--lora_modules", "sql={other}"],
        ["--lora-modules", "ok={inside}", "sql={other}"],
        ["--lora-modules", json.dumps({"name": "sql", "path": "{other}"})],
        ["--lora-modules={other}"],
        ["--speculative-config", json.dumps({"model": "{other}", "num_speculative_tokens": 3})],
        ["--speculative_config", json.dumps({"model": "{other}"})],
        ["--speculative-config", "not json"],
    ],
    ids=[
        "name=path",
        "underscore",
        "second-of-two",
        "json",
        "eq-form",
        "spec-model",
        "spec-underscore",
        "spec-bad",
    ],
)
def test_vllm_lora_or_draft_weights_outside_the_pin_are_refused(tmp_path: Path, args: list[str]) -> None:
    model, other = _folder(tmp_path), _outside(tmp_path)
    filled = [a.replace("{other}", other).replace("{inside}", str(model / "adapters" / "a1")) for a in args]
    with pytest.raises(ConfigError, match="the pin does not cover"):
        load_campaign(_campaign(tmp_path, SERVE + filled, kind="vllm", model=model))


@pytest.mark.parametrize(
    "args",
    [
        ["--lora-modules", "ok={inside}"],
        ["--lora-modules", json.dumps({"name": "ok", "path": "{inside}"})],
        ["--speculative-config", json.dumps({"method": "ngram", "num_speculative_tokens": 3})],
        ["--speculative-config", json.dumps({"model": "{inside}"})],
    ],
    ids=["adapter-inside-folder", "json-inside", "ngram-no-model", "draft-inside"],
)
def test_vllm_weights_inside_the_pinned_folder_or_none_still_load(tmp_path: Path, args: list[str]) -> None:
    model = _folder(tmp_path)
    filled = [a.replace("{inside}", str(model / "adapters" / "a1")) for a in args]
    assert load_campaign(_campaign(tmp_path, SERVE + filled, kind="vllm", model=model))
