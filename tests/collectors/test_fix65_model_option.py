"""Fix 65 (audit 53): the engine must load the pinned model.

A campaign whose engine command loads another model file than its ``[model] path`` was run, pinned the one
file, served the other, and could earn QUALIFIED bound to the pinned file's revision: ``"--model",
"/other.gguf"`` in place of ``{model}``, or an attempt's ``extra_args = ["--model", "<other>"]`` after
``--model {model}`` (argparse keeps the last). The rule now, at load (``bad-config``, nothing recorded):
every model option of the engine's kind in each attempt's argv as launched (command then extra_args, the
``=`` form, every repetition; vLLM's positional model too) names the pinned path (``{model}``, or a path
that resolves to the same file), a model variable of the campaign's environment too, and an option or
variable that makes the engine fetch its model elsewhere (a hub repo, a URL, a config file) is refused.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ledger.collectors.campaign import load_campaign, same_model
from ledger.errors import ConfigError
from ledger.service import Ledger

from .conftest import FAULT_ENGINE, LEDGER

PY_BASE = ["{python}", "-m", "llama_cpp.server"]


def _model(tmp_path: Path) -> Path:
    m = tmp_path / "models" / "pinned.gguf"
    m.parent.mkdir(parents=True, exist_ok=True)
    m.write_bytes(b"GGUF pinned")
    return m


# fix 88: a known engine program told no served name serves its model under its default id (its model
# argument; llama-server's differs between builds), which is refused at load; these campaigns judge the
# model check, so each command names the served model in its program's own spelling, right after the
# program (vLLM's at the end: its positional model stays first)
def _naming_served(command: list[str], kind: str) -> list[str]:
    for i, item in enumerate(command):
        for program, alias in (
            ("llama_cpp.server", "--model_alias"),
            ("llama-server", "--alias"),
            ("sglang.launch_server", "--served-model-name"),
        ):
            if item.endswith(program):
                return [*command[: i + 1], alias, "{served_name}", *command[i + 1 :]]
    if kind == "vllm":
        return [*command, "--served-model-name", "{served_name}"]
    return command


def _campaign(
    tmp_path: Path,
    command: list[str],
    *,
    kind: str = "llamacpp",
    extra_args: list[str] | None = None,
    env: dict[str, str] | None = None,
    attempt_env: dict[str, str] | None = None,
    model: Path | None = None,
) -> Path:
    model = model or _model(tmp_path)
    lines = [
        '[campaign]\nid = "c"\n',
        f'[model]\npath = "{model}"\nserved_name = "tiny"\n',
        f'[engine]\nkind = "{kind}"\ncommand = {json.dumps(_naming_served(command, kind))}',
    ]
    if env is not None:
        lines.append("env = { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items()) + " }")
    lines.append('\n[[engine.attempts]]\nname = "default"')
    if extra_args is not None:
        lines.append(f"extra_args = {json.dumps(extra_args)}")
    if attempt_env is not None:
        lines.append("env = { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in attempt_env.items()) + " }")
    p = tmp_path / "c.toml"
    p.write_text("\n".join(lines) + "\n")
    return p


def _refused(path: Path) -> str:
    with pytest.raises(ConfigError) as e:
        load_campaign(path)
    return e.value.message


def _other(tmp_path: Path) -> Path:
    o = tmp_path / "other.gguf"
    o.write_bytes(b"GGUF other")
    return o


# --- the audit's two shapes ---------------------------------------------------------------------------


def test_command_loading_another_model_file_than_the_pinned_one_is_refused(tmp_path: Path) -> None:
    other = _other(tmp_path)
    msg = _refused(_campaign(tmp_path, [*PY_BASE, "--model", str(other), "--port", "{port}"]))
    assert str(other) in msg and "--model" in msg and "pinned" in msg and "{model}" in msg


def test_extra_args_model_after_the_pinned_one_is_refused(tmp_path: Path) -> None:
    other = _other(tmp_path)
    path = _campaign(tmp_path, [*PY_BASE, "--model", "{model}"], extra_args=["--model", str(other)])
    msg = _refused(path)
    assert "attempt 'default'" in msg and str(other) in msg


# --- neighbours: spellings, forms, positions ------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "command", "extra"),
    [
        ("llamacpp", [*PY_BASE, "--model={other}"], None),  # the = form
        ("llamacpp", ["llama-server", "-m", "{other}"], None),  # llama-server's short option
        ("llamacpp", ["llama-server", "--model", "{model}", "-m", "{other}"], None),  # repeated, last wins
        ("llamacpp", ["llama-server", "-m", "{other}", "--model", "{model}"], None),  # repeated, first other
        ("vllm", ["{python}", "-m", "vllm.entrypoints.openai.api_server", "--model", "{other}"], None),
        ("vllm", ["vllm", "serve", "{other}", "--model", "{model}"], None),  # the positional overrides
        (
            "vllm",
            ["{python}", "-m", "vllm.entrypoints.openai.api_server", "{other}"],
            None,
        ),  # ignored: default
        ("vllm", ["vllm", "serve", "{model}"], ["--model={other}"]),
        ("sglang", ["{python}", "-m", "sglang.launch_server", "--model-path", "{other}"], None),
        ("generic", ["my-server", "--model", "{other}"], None),
    ],
    ids=[
        "llamacpp-equals",
        "llama-server-short-m",
        "repeated-other-last",
        "repeated-other-first",
        "vllm-model",
        "vllm-serve-positional",
        "vllm-api-server-positional",
        "vllm-extra-args-equals",
        "sglang-model-path",
        "generic-model",
    ],
)
def test_model_option_naming_another_file_is_refused_in_each_spelling(
    tmp_path: Path, kind: str, command: list[str], extra: list[str] | None
) -> None:
    other = str(_other(tmp_path))
    fill = [c.replace("{other}", other) for c in command]
    more = None if extra is None else [c.replace("{other}", other) for c in extra]
    msg = _refused(_campaign(tmp_path, fill, kind=kind, extra_args=more))
    assert other in msg and "pinned" in msg


@pytest.mark.parametrize("option", ["--model", "-m"])
def test_model_option_given_no_value_is_refused(tmp_path: Path, option: str) -> None:
    msg = _refused(_campaign(tmp_path, ["llama-server", option, "--port", "{port}"]))
    assert f"{option} is given no value" in msg


def test_model_option_with_empty_equals_is_refused(tmp_path: Path) -> None:
    assert "--model is given no value" in _refused(_campaign(tmp_path, [*PY_BASE, "--model="]))


def test_vllm_hub_repo_id_when_the_pin_is_a_folder_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "snapshot"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    cmd = ["{python}", "-m", "vllm.entrypoints.openai.api_server", "--model", "Qwen/Qwen3-0.6B"]
    msg = _refused(_campaign(tmp_path, cmd, kind="vllm", model=folder))
    assert "'Qwen/Qwen3-0.6B'" in msg


@pytest.mark.parametrize(
    ("command", "env"),
    [
        ([*PY_BASE, "--model", "{model}", "--config_file", "models.json"], None),
        ([*PY_BASE, "--model", "{model}", "--co=models.json"], None),  # argparse prefix of --config_file
        ([*PY_BASE, "--model", "x.gguf", "--hf_model_repo_id", "org/repo"], None),
        (["llama-server", "-m", "{model}", "-hf", "org/repo"], None),
        (["llama-server", "-m", "{model}", "--model-url", "https://example.org/m.gguf"], None),
        ([*PY_BASE, "--model", "{model}"], {"CONFIG_FILE": "models.json"}),
        ([*PY_BASE, "--model", "{model}"], {"hf_model_repo_id": "org/repo"}),  # settings: any case
        (["llama-server", "-m", "{model}"], {"LLAMA_ARG_HF_REPO": "org/repo"}),
    ],
    ids=[
        "config_file",
        "config_file-prefix",
        "hf_model_repo_id",
        "llama-server-hf",
        "llama-server-model-url",
        "env-CONFIG_FILE",
        "env-hf_model_repo_id-lowercase",
        "env-LLAMA_ARG_HF_REPO",
    ],
)
def test_model_taken_from_elsewhere_than_the_pinned_path_is_refused(
    tmp_path: Path, command: list[str], env: dict[str, str] | None
) -> None:
    msg = _refused(_campaign(tmp_path, command, env=env))
    assert "elsewhere than the pinned" in msg


def test_vllm_config_file_is_refused(tmp_path: Path) -> None:
    cmd = ["vllm", "serve", "{model}", "--config", "opts.yaml"]
    assert "--config" in _refused(_campaign(tmp_path, cmd, kind="vllm"))


def test_vllm_config_format_is_not_taken_for_config(tmp_path: Path) -> None:
    cmd = ["vllm", "serve", "{model}", "--config-format", "hf"]
    assert load_campaign(_campaign(tmp_path, cmd, kind="vllm")).spec.engine.kind == "vllm"


@pytest.mark.parametrize("key", ["LLAMA_ARG_MODEL", "MODEL", "model"])
def test_model_variable_of_the_campaign_env_naming_another_file_is_refused(tmp_path: Path, key: str) -> None:
    other = str(_other(tmp_path))
    msg = _refused(_campaign(tmp_path, [*PY_BASE, "--model", "{model}"], attempt_env={key: other}))
    assert f"the environment's {key}" in msg and other in msg


def test_model_variable_naming_the_pinned_file_loads(tmp_path: Path) -> None:
    m = _model(tmp_path)
    path = _campaign(tmp_path, ["llama-server", "-m", "{model}"], env={"LLAMA_ARG_MODEL": str(m)}, model=m)
    assert load_campaign(path).model_path == m


# --- what still loads ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "command", "extra"),
    [
        ("llamacpp", [*PY_BASE, "--model", "{model}", "--model_alias", "{served_name}"], None),
        ("llamacpp", [*PY_BASE, "--model={model}"], None),
        ("llamacpp", ["llama-server", "-m", "{model}"], ["--model", "{model}"]),  # repeated, same file
        ("llamacpp", ["{python}", "-u", "-m", "llama_cpp.server", "--model", "{model}"], None),  # python -u
        ("llamacpp", ["{python}", "-mllama_cpp.server", "--model", "{model}"], None),
        ("vllm", ["vllm", "serve", "{model}"], None),
        ("vllm", ["{python}", "-m", "vllm.entrypoints.openai.api_server", "--model", "{model}"], None),
        ("sglang", ["{python}", "-m", "sglang.launch_server", "--model-path", "{model}"], None),
        ("generic", ["my-server", "{model}"], None),
    ],
    ids=[
        "llamacpp",
        "llamacpp-equals",
        "llama-server-repeated-same",
        "python-u",
        "python-m-joined",
        "vllm-serve",
        "vllm-api-server",
        "sglang",
        "generic-positional",
    ],
)
def test_model_option_naming_the_pinned_path_loads(
    tmp_path: Path, kind: str, command: list[str], extra: list[str] | None
) -> None:
    c = load_campaign(_campaign(tmp_path, command, kind=kind, extra_args=extra))
    assert c.spec.engine.kind == kind


def test_the_interpreters_m_is_not_llama_servers_m(tmp_path: Path) -> None:
    # ``python -m llama_cpp.server``: the module is not a model path
    assert load_campaign(_campaign(tmp_path, [*PY_BASE, "--model", "{model}"])).spec.engine.kind == "llamacpp"


def test_model_alias_prefix_is_not_a_model_option(tmp_path: Path) -> None:
    # llama-cpp-python's argparse: --model_ and --model_a are --model_alias, not --model
    path = _campaign(tmp_path, [*PY_BASE, "--model", "{model}", "--model_", "{served_name}"])
    assert load_campaign(path).spec.model.served_name == "tiny"


def test_symlink_to_the_pinned_file_loads(tmp_path: Path) -> None:
    m = _model(tmp_path)
    link = tmp_path / "link.gguf"
    link.symlink_to(m)
    assert load_campaign(_campaign(tmp_path, [*PY_BASE, "--model", str(link)], model=m)).model_path == m


def test_relative_path_to_the_pinned_file_resolves_from_the_engines_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = _model(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert load_campaign(_campaign(tmp_path, [*PY_BASE, "--model", "models/pinned.gguf"], model=m))
    monkeypatch.chdir(m.parent)  # the engine starts in the collector's directory: there it is another path
    msg = _refused(_campaign(tmp_path, [*PY_BASE, "--model", "models/pinned.gguf"], model=m))
    assert "'models/pinned.gguf'" in msg


def test_same_model_compares_resolved_paths(tmp_path: Path) -> None:
    m = _model(tmp_path)
    hard = tmp_path / "hard.gguf"
    os.link(m, hard)
    assert same_model(str(m), m)
    assert same_model(str(tmp_path / "models" / ".." / "models" / "pinned.gguf"), m)
    assert same_model(str(hard), m)  # the same file (inode)
    assert not same_model(str(_other(tmp_path)), m)
    assert not same_model(str(tmp_path / "missing.gguf"), m)


# --- end to end: nothing is recorded --------------------------------------------------------------------


def test_collect_run_with_an_attempt_loading_another_model_records_nothing(
    tmp_path: Path, tiny_model_dir: Path, home: Path
) -> None:
    other = tmp_path / "other-model"
    other.mkdir()
    command = ["{python}", str(FAULT_ENGINE), "--port", "{port}", "--flavor", "vllm", "--model", "{model}"]
    p = tmp_path / "c.toml"
    p.write_text(
        '[campaign]\nid = "c"\nlease_seconds = 60\n\n'
        f'[model]\npath = "{tiny_model_dir}"\nserved_name = "fault-model"\n\n'
        f'[engine]\nkind = "vllm"\npython = "{sys.executable}"\ncommand = {json.dumps(command)}\n'
        "lease_seconds = 30\n\n"
        f'[[engine.attempts]]\nname = "default"\nextra_args = ["--model", "{other}"]\n'
    )
    led = Ledger.open(home)
    size = led.size()
    led.close()
    r = subprocess.run(
        [*LEDGER, "collect", "run", str(p), "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert "bad-config" in r.stderr and str(other) in r.stderr
    led = Ledger.open(home)
    assert led.size() == size
    led.close()
