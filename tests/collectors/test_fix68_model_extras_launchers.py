"""Fix 68 (audit 56): the model check misses extra weights and misreads launchers.

f1: options that make the engine load weights or tokenizer files beside ``{model}`` (a LoRA adapter, a
draft model, a projector, a control vector, another tokenizer; and their environment variables) passed
the load check, and the engine served other weights than the pinned ones. They are refused at load
unless the file lies inside the pinned model folder (which the pin hashes whole).
f2: a launcher in front of the engine (``taskset``, ``env``, ``numactl`` …) made the check read Python's
``-m MODULE`` as llama-server's ``-m MODEL`` (a valid campaign refused) and hid vLLM's positional model
(``numactl -N 0 vllm serve OTHER`` accepted). Launchers and their own options are skipped; a first program
that is neither a launcher, Python nor an engine program is refused (kind generic keeps its rule).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledger.collectors.campaign import _engine_start, load_campaign, within_pin
from ledger.errors import ConfigError

PY = ["{python}", "-m", "llama_cpp.server", "--model", "{model}"]
SERVER = ["llama-server", "-m", "{model}"]


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
    env: dict[str, str] | None = None,
    extra_args: list[str] | None = None,
    model: Path | None = None,
) -> Path:
    if model is None:
        model = tmp_path / "models" / "pinned.gguf"
        model.parent.mkdir(parents=True, exist_ok=True)
        model.write_bytes(b"GGUF pinned")
    text = (
        f'[campaign]\nid = "c"\n[model]\npath = "{model}"\nserved_name = "tiny"\n'
        f'[engine]\nkind = "{kind}"\ncommand = {json.dumps(_naming_served(command, kind))}\n'
    )
    if env:
        text += "env = { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items()) + " }\n"
    text += '[[engine.attempts]]\nname = "default"\n'
    if extra_args is not None:
        text += f"extra_args = {json.dumps(extra_args)}\n"
    p = tmp_path / "c.toml"
    p.write_text(text)
    return p


def _adapter(tmp_path: Path) -> str:
    a = tmp_path / "elsewhere" / "adapter.gguf"
    a.parent.mkdir(parents=True, exist_ok=True)
    a.write_bytes(b"GGUF adapter")
    return str(a)


def _refused(p: Path, *words: str) -> str:
    with pytest.raises(ConfigError) as e:
        load_campaign(p)
    for w in words:
        assert w in e.value.message, e.value.message
    return e.value.message


# ---- f1: extra weights --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "command", "option"),
    [
        ("llamacpp", PY, "--lora_path"),
        ("llamacpp", PY, "--lora_p"),  # argparse's unambiguous prefix
        ("llamacpp", PY, "--lora_base"),
        ("llamacpp", PY, "--clip_model_path"),
        ("llamacpp", PY, "--hf_tokenizer_config_path"),
        ("llamacpp", PY, "--hf_pretrained_model_name_or_path"),
        ("llamacpp", SERVER, "--lora"),
        ("llamacpp", SERVER, "-md"),
        ("llamacpp", SERVER, "--model-draft"),
        ("llamacpp", SERVER, "--spec-draft-model"),
        ("llamacpp", SERVER, "-mm"),
        ("llamacpp", SERVER, "--mmproj"),
        ("llamacpp", SERVER, "--control-vector"),
        ("vllm", ["vllm", "serve", "{model}"], "--tokenizer"),
        ("vllm", ["vllm", "serve", "{model}"], "--hf_config_path"),
        ("sglang", ["{python}", "-m", "sglang.launch_server", "--model-path", "{model}"], "--tokenizer-path"),
    ],
)
def test_extra_weights_option_beside_the_pinned_model_is_refused(tmp_path, kind, command, option):
    a = _adapter(tmp_path)
    _refused(_campaign(tmp_path, [*command, option, a], kind=kind), option, "the pin does not cover")
    # the = form, and the option given through an attempt's extra_args
    _refused(_campaign(tmp_path, [*command, f"{option}={a}"], kind=kind), option)
    _refused(_campaign(tmp_path, command, kind=kind, extra_args=[option, a]), option)


def test_lora_list_and_scaled_forms_are_each_refused(tmp_path):
    a = _adapter(tmp_path)
    _refused(_campaign(tmp_path, [*SERVER, "--lora", f"{{model}},{a}"]), "--lora", "adapter.gguf")
    _refused(_campaign(tmp_path, [*SERVER, "--lora-scaled", f"{a}:0.5"]), "--lora-scaled", "adapter.gguf")
    _refused(_campaign(tmp_path, [*SERVER, "--lora-scaled", a, "0.5"]), "--lora-scaled")  # older builds
    _refused(_campaign(tmp_path, [*SERVER, "--control-vector-scaled", f"{a}:2"]), "--control-vector-scaled")


def test_extra_weights_option_given_no_file_is_refused(tmp_path):
    _refused(_campaign(tmp_path, [*PY, "--lora_path"]), "--lora_path", "given no file")
    _refused(_campaign(tmp_path, [*PY, "--lora_path="]), "--lora_path", "given no file")


@pytest.mark.parametrize(
    "key", ["LORA_PATH", "lora_path", "Lora_Base", "CLIP_MODEL_PATH", "LLAMA_ARG_LORA", "LLAMA_ARG_MMPROJ"]
)
def test_extra_weights_variable_in_the_engine_environment_is_refused(tmp_path, key):
    a = _adapter(tmp_path)
    _refused(_campaign(tmp_path, PY, env={key: a}), key, "the pin does not cover")


def test_extra_weights_variable_set_by_an_env_launcher_is_refused(tmp_path):
    a = _adapter(tmp_path)
    _refused(_campaign(tmp_path, ["env", f"LORA_PATH={a}", *PY]), "LORA_PATH")
    _refused(_campaign(tmp_path, ["env", "LLAMA_ARG_MODEL=/other.gguf", *SERVER[:1]]), "LLAMA_ARG_MODEL")


@pytest.mark.parametrize("option", ["-hfd", "--hf-repo-draft", "-mmu", "--mmproj-url", "--models-dir"])
def test_draft_or_projector_download_is_refused_as_elsewhere(tmp_path, option):
    _refused(_campaign(tmp_path, [*SERVER, option, "org/repo"]), option, "from elsewhere")


def test_llama_cpp_python_draft_model_loads_no_file_and_passes(tmp_path):
    # llama-cpp-python's --draft_model names a method (prompt-lookup decoding); it loads no weights
    load_campaign(_campaign(tmp_path, [*PY, "--draft_model", "prompt-lookup-decoding"]))


def test_file_inside_the_pinned_model_folder_passes_outside_is_refused(tmp_path):
    folder = tmp_path / "models" / "hf-model"
    (folder / "tok").mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "tok" / "tokenizer.json").write_text("{}")
    outside = tmp_path / "models" / "hf-model-other"
    outside.mkdir()
    (folder / "link").symlink_to(outside)
    cmd = ["vllm", "serve", "{model}", "--tokenizer"]
    load_campaign(_campaign(tmp_path, [*cmd, str(folder / "tok")], kind="vllm", model=folder))
    load_campaign(_campaign(tmp_path, [*cmd, "{model}"], kind="vllm", model=folder))
    # a sibling folder whose name starts like the model's, a link out of it, a .. escape: not covered
    _refused(_campaign(tmp_path, [*cmd, str(outside)], kind="vllm", model=folder), "--tokenizer")
    _refused(_campaign(tmp_path, [*cmd, str(folder / "link")], kind="vllm", model=folder), "--tokenizer")
    _refused(_campaign(tmp_path, [*cmd, str(folder / "tok" / ".." / "..")], kind="vllm", model=folder))
    assert within_pin(str(folder / "tok" / "tokenizer.json"), folder)
    assert not within_pin(str(folder / "link"), folder)


def test_one_file_model_covers_no_file_beside_it(tmp_path):
    model = tmp_path / "m" / "pinned.gguf"
    model.parent.mkdir()
    model.write_bytes(b"GGUF")
    (model.parent / "adapter.gguf").write_bytes(b"GGUF a")
    assert not within_pin(str(model.parent / "adapter.gguf"), model)
    assert within_pin(str(model), model)
    msg = _refused(_campaign(tmp_path, [*PY, "--lora_path", str(model.parent / "adapter.gguf")], model=model))
    assert "pin a model folder" in msg


def test_options_near_the_extra_weights_names_still_pass(tmp_path):
    # neighbours that load no file: not mistaken for the extra-weights options
    load_campaign(_campaign(tmp_path, [*PY, "--chat_format", "chatml", "--draft_model_num_pred_tokens", "4"]))
    load_campaign(_campaign(tmp_path, [*SERVER, "--lora-init-without-apply", "--mmproj-auto"]))
    load_campaign(_campaign(tmp_path, ["vllm", "serve", "{model}", "--tokenizer-mode", "auto"], kind="vllm"))


# ---- f2: launchers ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "launcher",
    [
        ["taskset", "-c", "0-3"],
        ["taskset", "0xf"],
        ["env", "OMP_NUM_THREADS=4"],
        ["env", "-u", "HOME", "OMP_NUM_THREADS=4"],
        ["numactl", "-N", "0", "--membind=0"],
        ["numactl", "--cpunodebind", "0", "-l"],
        ["nice", "-n", "5"],
        ["nice", "-5"],
        ["chrt", "-r", "10"],
        ["stdbuf", "-oL"],
        ["ionice", "-c", "2", "-n", "0"],
        ["nohup"],
        ["taskset", "-c", "0-3", "env", "A=1", "nice", "-n", "1"],
    ],
)
def test_launcher_before_python_m_is_read_as_python_not_llama_m(tmp_path, launcher):
    load_campaign(_campaign(tmp_path, [*launcher, *PY]))
    assert _engine_start([*launcher, *PY]) == len(launcher) + 3
    # and the model after it is still judged
    _refused(_campaign(tmp_path, [*launcher, *PY[:-1], "/other.gguf"]), "/other.gguf")


@pytest.mark.parametrize(
    "launcher", [["numactl", "-N", "0"], ["taskset", "-c", "0-3"], ["env", "A=1"], ["nice", "-n", "5"]]
)
def test_launcher_hid_vllm_positional_model(tmp_path, launcher):
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF other")
    _refused(_campaign(tmp_path, [*launcher, "vllm", "serve", str(other)], kind="vllm"), "positional model")
    load_campaign(_campaign(tmp_path, [*launcher, "vllm", "serve", "{model}"], kind="vllm"))


@pytest.mark.parametrize(
    ("command", "word"),
    [
        (["uv", "run", *PY], "'uv'"),
        (["sh", "-c", "exec python -m llama_cpp.server"], "'sh'"),
        (["./start-engine.sh", "--model", "{model}"], "start-engine.sh"),
        (["env", "-S", "python -m llama_cpp.server"], "env -S"),
        (["env", "--chdir=/tmp", *PY], "--chdir"),
        (["taskset", "-p", "0x1", "123"], "taskset -p"),
        (["numactl", "--bogus", *PY], "--bogus"),
        (["taskset", "-c", "0-3"], "starts no program"),
    ],
)
def test_unknown_first_program_or_unreadable_launcher_is_refused(tmp_path, command, word):
    _refused(_campaign(tmp_path, command), word)


def test_generic_kind_keeps_its_first_program_rule(tmp_path):
    load_campaign(_campaign(tmp_path, ["./my-engine", "--model", "{model}"], kind="generic"))
    _refused(_campaign(tmp_path, ["./my-engine", "--model", "/other.gguf"], kind="generic"), "/other.gguf")


def test_known_engine_programs_still_pass(tmp_path):
    load_campaign(_campaign(tmp_path, ["/opt/llama.cpp/bin/llama-server", "-m", "{model}"]))
    load_campaign(
        _campaign(tmp_path, ["/usr/bin/python3.11", "-m", "llama_cpp.server", "--model", "{model}"])
    )
    load_campaign(_campaign(tmp_path, ["vllm", "serve", "{model}"], kind="vllm"))
