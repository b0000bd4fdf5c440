"""fix111 (audit 86 f3): the engine configuration is bound. ``ledger collect run`` binds ``engine_config``
(``engine_config_digest``: every attempt's argv and the environment its engine gets, as a launch records
them) in the job's ``spec.bindings`` and in every ``engine.launch``'s bindings, so a campaign edited to launch
the engine otherwise (``--n_ctx 1024`` for ``--n_ctx 512``) is another configuration to the policy. Two
campaigns that launch the engine the same way bind the same digest; a changed option, option order, value
or variable does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.collectors.campaign import (
    BOUND_KEYS,
    ENGINE_CONFIG,
    CampaignRunner,
    engine_config_digest,
    load_campaign,
)
from ledger.policy.loader import load_policy
from ledger.recorder import LocalRecorder
from ledger.service import Ledger

from .conftest import entries_of, fault_campaign

BASE_ARGS = '"--model_alias", "{served_name}", "--port", "{port}", "--n_ctx", "512"'


def _digest(
    tmp_path: Path,
    *,
    args: str = BASE_ARGS,
    env: str = "",
    extra: str = "",
    attempts: str = "",
    inherited: dict[str, str] | None = None,
) -> str:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    text = (
        '[campaign]\nid = "cfg"\n' + extra + "\n"
        f'[model]\npath = "{model}"\nserved_name = "m"\n\n'
        '[engine]\nkind = "llamacpp"\n'
        f'command = ["{{python}}", "-m", "llama_cpp.server", "--model", "{{model}}", {args}]\n'
        + env
        + "\n"
        + attempts
    )
    path = tmp_path / f"c{len(list(tmp_path.glob('c*.toml')))}.toml"
    path.write_text(text, encoding="utf-8")
    return engine_config_digest(load_campaign(path).spec.engine, {} if inherited is None else inherited)


def test_the_engine_config_is_a_bound_key_the_policy_compares() -> None:
    acc = load_policy("evidence-acceptance").acceptance
    assert acc.bindings is not None
    assert ENGINE_CONFIG == "engine_config"
    assert ENGINE_CONFIG in BOUND_KEYS and ENGINE_CONFIG in acc.bindings.keys


def test_the_same_launch_binds_the_same_engine_config(tmp_path: Path) -> None:
    """What does not change how the engine is launched does not change the digest: a description, another
    lease, comments, the order of the engine's variables."""
    one = _digest(tmp_path, env='env = { OMP_NUM_THREADS = "2", LLAMA_X = "1" }')
    two = _digest(
        tmp_path,
        env='env = { LLAMA_X = "1", OMP_NUM_THREADS = "2" }  # reordered\nlease_seconds = 300',
        extra='description = "the same engine, launched the same way"',
    )
    assert one == two
    assert one.startswith("blake3:") and len(one) == len("blake3:") + 64


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(BASE_ARGS.replace('"512"', '"1024"'), id="option-value-changed"),
        pytest.param(BASE_ARGS + ', "--n_threads", "1"', id="option-added"),
        pytest.param(BASE_ARGS.replace(', "--n_ctx", "512"', ""), id="option-dropped"),
        pytest.param(
            '"--n_ctx", "512", "--model_alias", "{served_name}", "--port", "{port}"',
            id="option-order-changed",
        ),
    ],
)
def test_another_engine_option_binds_another_engine_config(tmp_path: Path, args: str) -> None:
    """The reproducer's edit (``--n_ctx 1024 --n_threads 1``), and its neighbours. Option order too: the
    engine's parser may take the last of a repeated option, so a reordered argv is not shown to be the same
    launch (fail closed)."""
    assert _digest(tmp_path, args=args) != _digest(tmp_path)


@pytest.mark.parametrize(
    "env",
    [
        pytest.param('env = { OMP_NUM_THREADS = "1" }', id="variable-value-changed"),
        pytest.param('env = { OMP_NUM_THREADS = "2", N_CTX = "1024" }', id="variable-added"),
        pytest.param("", id="variable-dropped"),
    ],
)
def test_another_engine_variable_binds_another_engine_config(tmp_path: Path, env: str) -> None:
    assert _digest(tmp_path, env=env) != _digest(tmp_path, env='env = { OMP_NUM_THREADS = "2" }')


def test_an_attempts_own_options_and_variables_are_part_of_the_engine_config(tmp_path: Path) -> None:
    base = '[[engine.attempts]]\nname = "a"\nextra_args = ["--n_batch", "8"]\n'
    one = _digest(tmp_path, attempts=base)
    assert _digest(tmp_path, attempts=base.replace('"8"', '"16"')) != one
    assert _digest(tmp_path, attempts=base + 'env = { GGML_X = "1" }\n') != one
    # the attempt's name is no setting of the engine
    assert _digest(tmp_path, attempts=base.replace('name = "a"', 'name = "b"')) == one
    # a second attempt is a second way the job may launch the engine
    assert _digest(tmp_path, attempts=base + '[[engine.attempts]]\nname = "c"\nextra_args = []\n') != one


def test_the_engine_relevant_variables_it_inherits_are_part_of_the_engine_config(
    tmp_path: Path,
) -> None:
    """The launch records the engine-relevant variables of the collector's environment (``relevant_env``):
    another ``CUDA_VISIBLE_DEVICES`` or ``PYTHONPATH`` is another configuration; a variable no engine reads
    and no launch records is not."""
    one = _digest(tmp_path, inherited={"CUDA_VISIBLE_DEVICES": "0"})
    assert _digest(tmp_path, inherited={"CUDA_VISIBLE_DEVICES": "1"}) != one
    assert _digest(tmp_path, inherited={"CUDA_VISIBLE_DEVICES": "0", "PYTHONPATH": "/x"}) != one
    assert _digest(tmp_path, inherited={"CUDA_VISIBLE_DEVICES": "0", "EDITOR": "vi"}) == one


def test_secret_values_are_digested_redacted(tmp_path: Path) -> None:
    """The digest is of what the launch records: secrets redacted (a digest of a key would let it be
    guessed offline). Another API key is the same configuration of the engine."""
    one = _digest(tmp_path, args=BASE_ARGS + ', "--api_key", "sk-aaaaaaaaaaaaaaaaaaaaaaaaaaaa"')
    two = _digest(tmp_path, args=BASE_ARGS + ', "--api_key", "sk-bbbbbbbbbbbbbbbbbbbbbbbbbbbb"')
    assert one == two


def test_the_job_and_every_launch_bind_the_same_engine_config(
    tmp_path: Path, tiny_model_dir: Path, ledger: Ledger, recorder: LocalRecorder
) -> None:
    c = fault_campaign(
        tmp_path,
        tiny_model_dir,
        [
            {"name": "crash", "args": ["--mode", "die"]},
            {"name": "ok", "args": ["--mode", "ok"], "env": {"VLLM_X": "1"}},
        ],
        name="cfg",
    )
    loaded = load_campaign(c)
    CampaignRunner(loaded, recorder, work_dir=tmp_path / "work", handle_signals=False).run()
    jobs = entries_of(ledger, "job")
    launches = entries_of(ledger, "engine.launch")
    assert jobs and len(launches) == 2
    want = engine_config_digest(loaded.spec.engine)
    assert {j["payload"]["spec"]["bindings"][ENGINE_CONFIG] for j in jobs} == {want}
    assert {e["payload"]["bindings"][ENGINE_CONFIG] for e in launches} == {want}
