"""Audit 41 F2: a campaign whose engine command serves the model under another name than its [model]
served_name (``--served-model-name other-name`` with ``served_name = "tiny-llama"``) was launched; vLLM served
exactly what it was told and the identity probe failed the engine (NOT QUALIFIED - RUNTIME RELIABILITY). The
file contradicts itself: it is refused when loaded, bad-input naming both names, before anything is recorded.

The rule: every literal ``--served-model-name`` (or ``--served_model_name``) of an attempt's command as
launched (engine.command then the attempt's extra_args) must list the campaign's served_name among its values
(vLLM's nargs="+": every item up to the next option; the ``=`` form: one value); ``{served_name}`` is the
campaign's own name; an option given no value is refused.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.collectors.campaign import load_campaign
from ledger.errors import ConfigError, InputError


def _campaign(tmp_path: Path, command: str, extra: str = "") -> Path:
    attempts = f'\n[[engine.attempts]]\nname = "second"\nextra_args = {extra}\n' if extra else ""
    text = (
        '[campaign]\nid = "c"\n\n'
        f'[model]\npath = "{tmp_path}"\nserved_name = "tiny-llama"\n\n'
        f'[engine]\nkind = "vllm"\ncommand = {command}\n{attempts}'
    )
    p = tmp_path / "c.toml"
    p.write_text(text, encoding="utf-8")
    return p


def _refused(path: Path) -> str:
    with pytest.raises(ConfigError) as e:
        load_campaign(path)
    assert isinstance(e.value, InputError) and e.value.code == "bad-config"  # an InputError: bad input
    return e.value.message


def test_served_model_name_other_than_served_name_is_refused_at_load(tmp_path: Path) -> None:
    msg = _refused(_campaign(tmp_path, '["vllm", "serve", "{model}", "--served-model-name", "other-name"]'))
    assert "other-name" in msg and "tiny-llama" in msg and "served_name" in msg


@pytest.mark.parametrize(
    "command",
    [
        '["vllm", "serve", "{model}", "--served-model-name", "{served_name}"]',
        '["vllm", "serve", "{model}", "--served-model-name", "tiny-llama", "--port", "{port}"]',
        '["vllm", "serve", "{model}", "--served-model-name={served_name}"]',
        '["vllm", "serve", "{model}", "--served-model-name", "alias", "tiny-llama", "--port", "{port}"]',
    ],
    # no --served-model-name: vLLM serves its model argument, which is refused at load (fix 88,
    # test_served_name_default.py)
    ids=["placeholder", "equal-literal", "equals-form-placeholder", "several-names-incl-served"],
)
def test_served_model_name_naming_the_served_name_loads(tmp_path: Path, command: str) -> None:
    assert load_campaign(_campaign(tmp_path, command)).spec.model.served_name == "tiny-llama"


@pytest.mark.parametrize(
    ("command", "extra", "named"),
    [
        ('["vllm", "serve", "{model}", "--served-model-name=other-name"]', "", "other-name"),
        ('["vllm", "serve", "{model}", "--served_model_name", "other-name"]', "", "other-name"),
        ('["vllm", "serve", "{model}"]', '["--served-model-name", "other-name"]', "other-name"),
        (
            '["vllm", "serve", "{model}", "--served-model-name", "a", "b", "--port", "{port}", "tiny-llama"]',
            "",
            "'a', 'b'",
        ),
        # the first attempt agrees, the second names another one: that attempt is refused
        (
            '["vllm", "serve", "{model}", "--served-model-name", "{served_name}"]',
            '["--served-model-name", "x"]',
            "'x'",
        ),
    ],
    ids=[
        "equals-form",
        "underscore-spelling",
        "in-extra-args",
        "several-names-without-served",
        "second-of-two",
    ],
)
def test_served_model_name_contradicting_served_name_is_refused(
    tmp_path: Path, command: str, extra: str, named: str
) -> None:
    msg = _refused(_campaign(tmp_path, command, extra))
    assert named in msg and "tiny-llama" in msg


@pytest.mark.parametrize(
    ("command", "extra"),
    [
        ('["vllm", "serve", "{model}", "--served-model-name"]', ""),
        ('["vllm", "serve", "{model}", "--served-model-name", "--port", "{port}"]', ""),
        ('["vllm", "serve", "{model}", "--served-model-name="]', ""),
        ('["vllm", "serve", "{model}"]', '["--served-model-name"]'),
    ],
    ids=["last", "followed-by-option", "empty-equals", "in-extra-args"],
)
def test_served_model_name_without_value_is_refused(tmp_path: Path, command: str, extra: str) -> None:
    msg = _refused(_campaign(tmp_path, command, extra))
    assert "no value" in msg and "tiny-llama" in msg


def test_served_model_name_split_between_command_and_extra_args_is_judged_as_launched(tmp_path: Path) -> None:
    # the option ends the command and its value opens the attempt's extra_args: launched as one argv
    ok = _campaign(tmp_path, '["vllm", "serve", "{model}", "--served-model-name"]', '["{served_name}"]')
    assert load_campaign(ok).spec.engine.attempts[0].name == "second"
    bad = _campaign(tmp_path, '["vllm", "serve", "{model}", "--served-model-name"]', '["other-name"]')
    assert "other-name" in _refused(bad)
