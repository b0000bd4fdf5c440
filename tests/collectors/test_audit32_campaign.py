"""Audit 32: what a campaign run refuses before anything is recorded.

f5: the benchmark's over-saturation exemption for an engine the policy names was the campaign's claim
(``[engine] kind = "llamacpp"``); it follows the engine detected in the engine's interpreter now. f2: a
semantic corpus that can never run (bad regex, an item id twice, an unknown check type) was refused only
after the job, a launch and gates 1-7 were recorded. f7: ``[gates.semantic]`` / ``[gates.benchmark]``
tables that left ``enabled`` out silently did not run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

import ledger.collectors.campaign as campaign_mod
from ledger.collectors.campaign import CampaignRunner, load_campaign
from ledger.collectors.host import EnvInfo
from ledger.errors import ConfigError
from ledger.hashing import blake3_hex
from ledger.recorder import LocalRecorder
from ledger.service import Ledger

from .test_harness_gates import SEMANTIC_ITEMS, policy_with, run, stub_campaign


@pytest.fixture
def sem(tmp_path: Path) -> tuple[Path, str]:
    p = tmp_path / "semantic.jsonl"
    p.write_text("".join(json.dumps(i) + "\n" for i in SEMANTIC_ITEMS))
    return p, f"blake3:{blake3_hex(p.read_bytes())}"


def _runner(path: Path, recorder: LocalRecorder, tmp_path: Path, policy: Any) -> CampaignRunner:
    return CampaignRunner(
        load_campaign(path), recorder, work_dir=tmp_path / "work", handle_signals=False, policy=policy
    )


# --- f5: the exemption follows the engine detected ----------------------------------------------------


def _llamacpp(path: Path, extra: str = "") -> Path:
    text = path.read_text().replace('kind = "generic"', 'kind = "llamacpp"')
    path.write_text(text.replace("[gates.benchmark]\n", f"[gates.benchmark]\n{extra}"))
    return path


def test_audit32_f5_a_llamacpp_campaign_without_llama_cpp_is_judged_by_the_default_rule(
    tmp_path: Path, tiny_model_dir: Path, ledger: Ledger, recorder: LocalRecorder, sem: tuple[Path, str]
) -> None:
    """This interpreter has no llama-cpp-python: the campaign's kind earns no exemption."""
    path = _llamacpp(stub_campaign(tmp_path, tiny_model_dir, sem))
    runner = _runner(
        path, recorder, tmp_path, policy_with(tmp_path, sem[1], benchmark_saturation='"invalid"')
    )
    size = ledger.size()
    runner._preflight()
    assert runner.engine_version is None
    assert runner.benchmark_validity["saturation"] == "invalid"
    assert ledger.size() == size


def test_audit32_f5_a_campaign_claiming_the_exemption_without_the_engine_is_refused_before_recording(
    tmp_path: Path, tiny_model_dir: Path, ledger: Ledger, recorder: LocalRecorder, sem: tuple[Path, str]
) -> None:
    path = _llamacpp(stub_campaign(tmp_path, tiny_model_dir, sem), 'saturation = "report"\n')
    size = ledger.size()
    with pytest.raises(ConfigError, match=r"saturation = 'report'.*no llama-cpp-python version was detected"):
        run(path, recorder, tmp_path, policy_with(tmp_path, sem[1], benchmark_saturation='"invalid"'))
    assert ledger.size() == size


@pytest.mark.parametrize(
    ("packages", "saturation"),
    [
        ({"llama-cpp-python": "0.3.16"}, "report"),  # detected: the policy's rule for llamacpp
        ({"llama-cpp-python": ""}, "invalid"),  # a blank version detects nothing
        ({"vllm": "0.11.0"}, "invalid"),  # another engine's package
        ({"llama_cpp_python": "0.3.16"}, "invalid"),  # another name than the package's
        ({}, "invalid"),
    ],
)
def test_audit32_f5_neighbour_what_the_interpreter_holds_decides(
    tmp_path: Path,
    tiny_model_dir: Path,
    recorder: LocalRecorder,
    sem: tuple[Path, str],
    monkeypatch: pytest.MonkeyPatch,
    packages: dict[str, str],
    saturation: str,
) -> None:
    monkeypatch.setattr(campaign_mod, "engine_env", lambda py, env=None: EnvInfo({"packages": packages}, ""))
    path = _llamacpp(stub_campaign(tmp_path, tiny_model_dir, sem))
    runner = _runner(
        path, recorder, tmp_path, policy_with(tmp_path, sem[1], benchmark_saturation='"invalid"')
    )
    runner._preflight()
    assert runner.benchmark_validity["saturation"] == saturation
    assert ("engine_version" in runner._job_spec()["bindings"]) is (saturation == "report")


def test_audit32_f5_neighbour_a_generic_engine_is_unchanged(
    tmp_path: Path, tiny_model_dir: Path, recorder: LocalRecorder, sem: tuple[Path, str]
) -> None:
    path = stub_campaign(tmp_path, tiny_model_dir, sem)
    runner = _runner(
        path, recorder, tmp_path, policy_with(tmp_path, sem[1], benchmark_saturation='"invalid"')
    )
    runner._preflight()
    assert runner.benchmark_validity["saturation"] == "invalid"


# --- f2: the semantic corpus is parsed in full before the job -----------------------------------------


def _bad_corpus(tmp_path: Path, how: str) -> tuple[Path, str]:
    items = json.loads(json.dumps(SEMANTIC_ITEMS))
    if how == "bad-regex":
        items[1]["checks"][1]["pattern"] = "^[0-9+$"
    elif how == "duplicate-id":
        items.append(items[0])
    elif how == "unknown-check-type":
        items[0]["checks"][0]["type"] = "equals"
    elif how == "check-key-renamed":
        items[0]["checks"][0] = {"type": "exact", "val": "READY"}
    elif how == "check-field-mistyped":
        items[0]["checks"][0]["value"] = 5
    elif how == "bad-cel":
        items[0]["checks"][0] = {"type": "cel", "expr": "text =="}
    elif how == "bad-schema":
        items[0]["checks"][0] = {"type": "json_schema", "schema": {"type": "nonsense"}}
    elif how == "checks-dropped":
        del items[0]["checks"]
    p = tmp_path / f"{how}.jsonl"
    p.write_text("".join(json.dumps(i) + "\n" for i in items))
    return p, f"blake3:{blake3_hex(p.read_bytes())}"


@pytest.mark.parametrize(
    ("how", "said"),
    [
        ("bad-regex", "bad regex"),
        ("duplicate-id", "item id 'ready' appears twice"),
        ("unknown-check-type", "unknown check type 'equals'"),
        ("check-key-renamed", "val"),
        ("check-field-mistyped", "value"),
        ("bad-cel", "text =="),
        ("bad-schema", "bad JSON schema"),
        ("checks-dropped", "checks"),
    ],
)
def test_audit32_f2_a_semantic_corpus_that_cannot_run_is_refused_before_anything_is_recorded(
    tmp_path: Path, tiny_model_dir: Path, ledger: Ledger, recorder: LocalRecorder, how: str, said: str
) -> None:
    bad = _bad_corpus(tmp_path, how)
    path = stub_campaign(tmp_path, tiny_model_dir, bad)
    size = ledger.size()
    with pytest.raises(ConfigError, match=re.escape(said)):
        run(path, recorder, tmp_path, policy_with(tmp_path, bad[1]))
    assert ledger.size() == size


def test_audit32_f2_neighbour_a_good_corpus_passes_preflight(
    tmp_path: Path, tiny_model_dir: Path, ledger: Ledger, recorder: LocalRecorder, sem: tuple[Path, str]
) -> None:
    runner = _runner(
        stub_campaign(tmp_path, tiny_model_dir, sem), recorder, tmp_path, policy_with(tmp_path, sem[1])
    )
    size = ledger.size()
    runner._preflight()
    assert ledger.size() == size


# --- f7: a harness table says whether it runs ---------------------------------------------------------


@pytest.mark.parametrize("gate", ["semantic", "benchmark"])
def test_audit32_f7_a_harness_table_without_enabled_is_refused_at_load(
    tmp_path: Path, tiny_model_dir: Path, sem: tuple[Path, str], gate: str
) -> None:
    path = stub_campaign(tmp_path, tiny_model_dir, sem)
    path.write_text(path.read_text().replace(f"[gates.{gate}]\nenabled = true\n", f"[gates.{gate}]\n"))
    with pytest.raises(ConfigError, match=rf"gates\.{gate}\.enabled is left out.*write enabled = true"):
        load_campaign(path)


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("enabled = true", None),
        ("enabled = false", None),
        ('enabled = "true"', r"gates\.semantic\.enabled"),  # mistyped
        ("enabled = 1", r"gates\.semantic\.enabled"),
        ("enable = true", r"unknown key 'gates\.semantic\.enable'"),  # misspelt: named first
        ("Enabled = true", r"unknown key 'gates\.semantic\.Enabled'"),
    ],
)
def test_audit32_f7_neighbour_enabled_said_mistyped_or_misspelt(
    tmp_path: Path, tiny_model_dir: Path, sem: tuple[Path, str], line: str, error: str | None
) -> None:
    path = stub_campaign(tmp_path, tiny_model_dir, sem)
    path.write_text(
        path.read_text().replace("[gates.semantic]\nenabled = true\n", f"[gates.semantic]\n{line}\n")
    )
    if error is None:
        c = load_campaign(path)
        assert c.spec.gates.semantic.enabled is (line == "enabled = true")
        return
    with pytest.raises(ConfigError, match=error):
        load_campaign(path)


def test_audit32_f7_neighbour_an_empty_table_says_nothing_either(
    tmp_path: Path, tiny_model_dir: Path, sem: tuple[Path, str]
) -> None:
    path = stub_campaign(tmp_path, tiny_model_dir, sem)
    text = path.read_text()
    text = (
        text[: text.index("[gates.semantic]")]
        + "[gates.semantic]\n\n"
        + text[text.index("[gates.benchmark]") :]
    )
    path.write_text(text)
    with pytest.raises(ConfigError, match=r"gates\.semantic\.enabled is left out: the table sets nothing"):
        load_campaign(path)


def test_audit32_f7_neighbour_tables_left_out_are_not_run(
    tmp_path: Path, tiny_model_dir: Path, sem: tuple[Path, str]
) -> None:
    path = stub_campaign(tmp_path, tiny_model_dir, sem)
    text = path.read_text()
    path.write_text(text[: text.index("[gates.semantic]")])
    c = load_campaign(path)
    assert not c.spec.gates.semantic.enabled and not c.spec.gates.benchmark.enabled
