"""Fix 72 (issue 11): the other llama.cpp program's alias option loaded, and the engine exited on it.

Kind llamacpp runs one of two programs, each with its own alias option: llama-server ``-a`` / ``--alias``
(whole names only), llama-cpp-python (``python -m llama_cpp.server``) ``--model_alias`` (argparse: any
unambiguous prefix down to ``--model_``). llama-server exits on ``--model_alias`` ("invalid argument");
llama_cpp.server's ``parse_args`` exits on ``-a`` / ``--alias`` ("unrecognized arguments", checked against
llama-cpp-python 0.3.36). The loader held every one of them to served_name whichever program ran, so a
llama_cpp.server campaign with ``--alias tiny`` loaded, the engine exited at start-up and the failure was
recorded against the engine. The other program's alias option is now refused at load, naming the option
and the program, as the model check refuses the other program's model option.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledger.collectors import campaign as campaign_module
from ledger.collectors.campaign import load_campaign
from ledger.errors import ConfigError, InputError

PYTHON = ["{python}", "-m", "llama_cpp.server", "--model", "{model}", "--port", "{port}"]
SERVER = ["llama-server", "-m", "{model}", "--port", "{port}"]
ALIAS_VARIABLES = ("LLAMA_ARG_ALIAS", "MODEL_ALIAS", "model_alias")


@pytest.fixture(autouse=True)
def _no_inherited_alias(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ALIAS_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def _campaign(
    tmp_path: Path, command: list[str], *, kind: str = "llamacpp", extra_args: list[str] | None = None
) -> Path:
    lines = [
        '[campaign]\nid = "c"\n',
        f'[model]\npath = "{tmp_path}"\nserved_name = "tiny"\n',
        f'[engine]\nkind = "{kind}"\ncommand = {json.dumps(command)}',
    ]
    if extra_args is not None:
        lines.append(f'\n[[engine.attempts]]\nname = "second"\nextra_args = {json.dumps(extra_args)}')
    p = tmp_path / "c.toml"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


def _refused(path: Path) -> str:
    with pytest.raises(ConfigError) as e:
        load_campaign(path)
    assert isinstance(e.value, InputError) and e.value.code == "bad-config"
    return e.value.message


def _loads(path: Path) -> None:
    assert load_campaign(path).spec.model.served_name == "tiny"


# (the program's command, the other program's alias option as written, the option's name as refused,
# the program, how it exits, the program the option is of)
FOREIGN = [
    (PYTHON, ["--alias", "tiny"], "--alias", "llama_cpp.server", "unrecognized arguments", "llama-server"),
    (PYTHON, ["-a", "{served_name}"], "-a", "llama_cpp.server", "unrecognized arguments", "llama-server"),
    (PYTHON, ["--alias=tiny"], "--alias", "llama_cpp.server", "unrecognized arguments", "llama-server"),
    (PYTHON, ["-a=tiny"], "-a", "llama_cpp.server", "unrecognized arguments", "llama-server"),
    (
        SERVER,
        ["--model_alias", "tiny"],
        "--model_alias",
        "llama-server",
        "invalid argument",
        "llama_cpp.server",
    ),
    (
        SERVER,
        ["--model_alias={served_name}"],
        "--model_alias",
        "llama-server",
        "invalid argument",
        "llama_cpp.server",
    ),
    # abbreviations llama-cpp-python's argparse takes for --model_alias are its option too
    (SERVER, ["--model_al", "tiny"], "--model_al", "llama-server", "invalid argument", "llama_cpp.server"),
    (SERVER, ["--model_", "tiny"], "--model_", "llama-server", "invalid argument", "llama_cpp.server"),
    (SERVER, ["--model_alia=tiny"], "--model_alia", "llama-server", "invalid argument", "llama_cpp.server"),
]
FOREIGN_IDS = [
    "python-alias",
    "python-short-a",
    "python-alias-equals",
    "python-short-a-equals",
    "server-model_alias",
    "server-model_alias-equals",
    "server-model_al",
    "server-model_",
    "server-model_alia-equals",
]


@pytest.mark.parametrize(("base", "extra", "option", "program", "exits", "owner"), FOREIGN, ids=FOREIGN_IDS)
def test_other_programs_alias_option_refused_at_load(
    tmp_path: Path, base: list[str], extra: list[str], option: str, program: str, exits: str, owner: str
) -> None:
    # the value names served_name: the option itself is what the program exits on
    msg = _refused(_campaign(tmp_path, [*base, *extra]))
    assert f"{option} is no option of {program}" in msg
    assert exits in msg and owner in msg and "attempt 'default'" in msg


@pytest.mark.parametrize(("base", "extra", "option", "program", "exits", "owner"), FOREIGN, ids=FOREIGN_IDS)
def test_other_programs_alias_option_in_an_attempts_extra_args_is_refused(
    tmp_path: Path, base: list[str], extra: list[str], option: str, program: str, exits: str, owner: str
) -> None:
    own = ["--model_alias", "{served_name}"] if program == "llama_cpp.server" else ["-a", "{served_name}"]
    msg = _refused(_campaign(tmp_path, [*base, *own], extra_args=extra))
    assert "attempt 'second'" in msg and f"{option} is no option of {program}" in msg


@pytest.mark.parametrize(
    ("command", "option", "program"),
    [
        # the own option names served_name, then the other program's repeats it
        ([*PYTHON, "--model_alias", "tiny", "--alias", "tiny"], "--alias", "llama_cpp.server"),
        ([*PYTHON, "-a", "tiny", "--model_alias", "tiny"], "-a", "llama_cpp.server"),
        ([*PYTHON, "-a", "tiny", "-a", "tiny"], "-a", "llama_cpp.server"),
        ([*SERVER, "--alias", "tiny", "--model_alias", "tiny"], "--model_alias", "llama-server"),
        ([*SERVER, "--model_al", "tiny", "--model_al", "tiny"], "--model_al", "llama-server"),
        # reordered: the alias option before the model option
        (
            ["{python}", "-m", "llama_cpp.server", "-a", "tiny", "--model", "{model}"],
            "-a",
            "llama_cpp.server",
        ),
        # behind a launcher
        (["taskset", "-c", "0-1", *SERVER, "--model_alias", "tiny"], "--model_alias", "llama-server"),
    ],
    ids=[
        "own-then-other",
        "other-then-own",
        "other-twice",
        "server-own-then-other",
        "server-abbrev-twice",
        "before-the-model",
        "behind-taskset",
    ],
)
def test_other_programs_alias_option_repeated_or_reordered_is_refused(
    tmp_path: Path, command: list[str], option: str, program: str
) -> None:
    assert f"{option} is no option of {program}" in _refused(_campaign(tmp_path, command))


def test_other_programs_alias_option_is_refused_before_its_value_is_judged(tmp_path: Path) -> None:
    # the refusal names the option the program exits on, not the name it would have served
    msg = _refused(_campaign(tmp_path, [*PYTHON, "--alias", "other"]))
    assert "--alias is no option of llama_cpp.server" in msg and "'other'" not in msg
    msg = _refused(_campaign(tmp_path, [*SERVER, "--model_alias"]))  # given no value
    assert "--model_alias is no option of llama-server" in msg


@pytest.mark.parametrize(
    "command",
    [
        [*PYTHON, "--model_alias", "{served_name}"],
        [*PYTHON, "--model_al=tiny"],
        [*SERVER, "--alias", "{served_name}"],
        [*SERVER, "-a=tiny"],
        # an option that merely shares a prefix is none of the alias options
        [*SERVER, "--aliases-x", "1", "--alias", "{served_name}"],
        [*PYTHON, "--api_key", "k", "--model_alias", "{served_name}"],
    ],
    ids=[
        "python-own",
        "python-own-abbrev",
        "server-own",
        "server-own-equals",
        "server-longer",
        "python-other",
    ],
)
def test_own_alias_option_still_loads(tmp_path: Path, command: list[str]) -> None:
    _loads(_campaign(tmp_path, command))


@pytest.mark.parametrize(
    ("command", "said"),
    [
        # the other program's option name as another option's value (= form) is a value, not an option
        ([*PYTHON, "--model_alias", "tiny", "--api_key=-a"], None),
        ([*PYTHON, "--model_alias", "tiny", "--api_key=--alias"], None),
        # as the alias's own value: the engine would serve that text, which is not served_name
        ([*PYTHON, "--model_alias=-a"], "'-a'"),
        ([*SERVER, "--alias=--model_alias"], "'--model_alias'"),
        # a launcher's own option of the same spelling (taskset -a: all tasks) is the launcher's
        (["taskset", "-a", "-c", "0-1", *PYTHON, "--model_alias", "tiny"], None),
        (["taskset", "-a", "0-1", *PYTHON, "--model_alias", "tiny"], None),
    ],
    ids=[
        "equals-value-short",
        "equals-value-long",
        "own-alias-value",
        "server-alias-value",
        "taskset-a",
        "taskset-a-mask",
    ],
)
def test_the_option_as_a_value_of_another_option_is_not_misread(
    tmp_path: Path, command: list[str], said: str | None
) -> None:
    path = _campaign(tmp_path, command)
    if said is None:
        _loads(path)
        return
    msg = _refused(path)
    assert said in msg and "is no option of" not in msg


def test_a_program_not_read_is_held_to_both_programs_alias_options(tmp_path: Path) -> None:
    # a Python script: which program reads the options is not known, so none is foreign and each is held
    # to served_name (fail closed)
    script = ["{python}", str(tmp_path / "serve.py"), "--model", "{model}"]
    _loads(_campaign(tmp_path, [*script, "--alias", "tiny", "--model_alias", "tiny"]))
    for extra in (["--alias", "other"], ["-a", "other"], ["--model_al", "other"]):
        msg = _refused(_campaign(tmp_path, [*script, *extra]))
        assert "'other'" in msg and "is no option of" not in msg


def test_other_kinds_do_not_judge_llamacpp_alias_options(tmp_path: Path) -> None:
    # -a / --alias mean something else, or nothing, to other engines
    _loads(
        _campaign(
            tmp_path, ["vllm", "serve", "{model}", "--served-model-name", "tiny", "-a", "x"], kind="vllm"
        )
    )
    _loads(_campaign(tmp_path, [*PYTHON, "-a", "x", "--model_alias", "y"], kind="generic"))


def test_every_llamacpp_program_has_its_alias_options_and_exit_text() -> None:
    # one vocabulary: the programs the kind runs are the keys the refusal reads
    for program in campaign_module._KIND_PROGRAMS["llamacpp"]:
        assert campaign_module._ALIAS_OPTIONS[program]
        assert campaign_module._UNKNOWN_OPTION_EXIT[program]
