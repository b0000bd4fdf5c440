"""Issue 11 (fix62): a llama.cpp campaign whose ``--alias other`` contradicts ``[model] served_name`` was
launched; the engine served ``other`` and the identity probe failed the engine for the campaign's own
contradiction. The loader compared only vLLM's ``--served-model-name``.

Each engine names the served model in its own spelling: llama-server ``-a`` / ``--alias STRING`` (one value;
newer builds split it at commas into several aliases) and ``LLAMA_ARG_ALIAS``; llama-cpp-python (``python -m
llama_cpp.server``, what the project runs) ``--model_alias`` (argparse: one value, any unambiguous prefix
such as ``--model_al`` is the same option) and its setting ``MODEL_ALIAS``. For the llamacpp kind each of
them must name the served_name; an alias holding a comma is refused (builds disagree on what it serves).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledger.collectors.campaign import load_campaign
from ledger.errors import ConfigError, InputError

BASE = ["{python}", "-m", "llama_cpp.server", "--model", "{model}", "--port", "{port}"]
# llama-server's spellings (--alias / -a / LLAMA_ARG_ALIAS) are judged on a llama-server command (fix72:
# llama_cpp.server exits on them, so they are refused there: test_fix72_other_programs_alias_option.py)
SERVER = ["llama-server", "-m", "{model}", "--port", "{port}"]


def _campaign(
    tmp_path: Path,
    extra_command: list[str],
    *,
    kind: str = "llamacpp",
    base: list[str] = BASE,
    extra_args: list[str] | None = None,
    env: dict[str, str] | None = None,
    attempt_env: dict[str, str] | None = None,
) -> Path:
    command = json.dumps([*base, *extra_command])
    lines = [
        '[campaign]\nid = "c"\n',
        f'[model]\npath = "{tmp_path}"\nserved_name = "tiny"\n',
        f'[engine]\nkind = "{kind}"\ncommand = {command}',
    ]
    if env is not None:
        lines.append("env = " + "{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items()) + " }")
    if extra_args is not None or attempt_env is not None:
        lines.append('\n[[engine.attempts]]\nname = "second"')
        lines.append(f"extra_args = {json.dumps(extra_args or [])}")
        if attempt_env is not None:
            lines.append(
                "env = " + "{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in attempt_env.items()) + " }"
            )
    p = tmp_path / "c.toml"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


def _refused(path: Path) -> str:
    with pytest.raises(ConfigError) as e:
        load_campaign(path)
    assert isinstance(e.value, InputError) and e.value.code == "bad-config"
    return e.value.message


@pytest.mark.parametrize(
    ("extra", "base"),
    [
        (["--alias", "other"], SERVER),
        (["-a", "other"], SERVER),
        (["--alias=other"], SERVER),
        (["--model_alias", "other"], BASE),
        (["--model_alias=other"], BASE),
        (["--model_al", "other"], BASE),  # argparse takes an unambiguous prefix as the option
        (["--model_", "other"], BASE),
        (["--alias", "tiny", "--alias", "other"], SERVER),  # repeated: the second names another model
        (["--alias", "other", "--alias", "tiny"], SERVER),  # builds differ: last wins, or both are served
    ],
    ids=[
        "alias",
        "short-a",
        "alias-equals",
        "model_alias",
        "model_alias-equals",
        "model_alias-abbreviated",
        "model_alias-shortest-prefix",
        "alias-repeated-second-other",
        "alias-repeated-first-other",
    ],
)
def test_llamacpp_alias_contradicting_served_name_is_refused_at_load(
    tmp_path: Path, extra: list[str], base: list[str]
) -> None:
    msg = _refused(_campaign(tmp_path, extra, base=base))
    assert "'other'" in msg and "'tiny'" in msg and "served_name" in msg


def test_python_alias_ok_server_alias_other_is_refused_as_no_option_of_the_program(tmp_path: Path) -> None:
    # was "python-alias-ok-server-alias-other": llama_cpp.server exits on llama-server's -a (fix72)
    msg = _refused(_campaign(tmp_path, ["--model_alias", "{served_name}", "-a", "other"]))
    assert "-a is no option of llama_cpp.server" in msg


@pytest.mark.parametrize(
    ("extra", "base"),
    [
        (["--model_alias", "{served_name}"], BASE),  # the shipped llamacpp campaigns
        (["--model_alias=tiny"], BASE),
        (["--alias", "tiny"], SERVER),
        (["-a", "{served_name}"], SERVER),
        (["--alias={served_name}"], SERVER),
        (["--alias", "tiny", "--alias", "tiny"], SERVER),
        # no alias: the engine's own default id, its --model path, is refused (fix 88,
        # test_served_name_default.py)
    ],
    ids=[
        "model_alias-placeholder",
        "model_alias-equals",
        "alias",
        "short-a",
        "alias-equals",
        "twice",
    ],
)
def test_llamacpp_alias_naming_the_served_name_loads(
    tmp_path: Path, extra: list[str], base: list[str]
) -> None:
    assert load_campaign(_campaign(tmp_path, extra, base=base)).spec.model.served_name == "tiny"


def test_the_model_path_option_is_not_taken_for_model_alias(tmp_path: Path) -> None:
    # ``--model`` is the model path (an exact option, never a prefix of --model_alias)
    c = load_campaign(_campaign(tmp_path, ["--model", "{model}", "--model_alias", "tiny"]))
    assert c.spec.engine.kind == "llamacpp"


@pytest.mark.parametrize(
    ("extra", "base"),
    [
        (["--alias"], SERVER),
        (["-a"], SERVER),
        (["--alias", "--port", "1"], SERVER),
        (["--alias="], SERVER),
        (["--model_alias"], BASE),
        (["--model_alias", "-x"], BASE),
    ],
    ids=[
        "alias-last",
        "short-a-last",
        "alias-followed-by-option",
        "alias-empty-equals",
        "model_alias-last",
        "model_alias-then-option",
    ],
)
def test_llamacpp_alias_without_value_is_refused(tmp_path: Path, extra: list[str], base: list[str]) -> None:
    msg = _refused(_campaign(tmp_path, extra, base=base))
    assert "no value" in msg and "'tiny'" in msg


def test_llamacpp_alias_in_an_attempts_extra_args_is_judged_as_launched(tmp_path: Path) -> None:
    msg = _refused(_campaign(tmp_path, ["--alias", "{served_name}"], base=SERVER, extra_args=["-a", "other"]))
    assert "attempt 'second'" in msg and "'other'" in msg
    # the option ends the command and its value opens the attempt's extra_args
    ok = _campaign(tmp_path, ["--alias"], base=SERVER, extra_args=["{served_name}"])
    assert load_campaign(ok).spec.engine.attempts[0].name == "second"


@pytest.mark.parametrize("value", ["tiny,other", "other,tiny", "tiny,"])
def test_llama_server_alias_holding_a_comma_is_refused(tmp_path: Path, value: str) -> None:
    msg = _refused(_campaign(tmp_path, ["--alias", value], base=SERVER))
    assert "comma" in msg and "'tiny'" in msg


def test_llama_cpp_python_model_alias_is_one_name_commas_and_all(tmp_path: Path) -> None:
    # llama-cpp-python serves its --model_alias whole: "tiny,other" is not "tiny"
    msg = _refused(_campaign(tmp_path, ["--model_alias", "tiny,other"]))
    assert "'tiny,other'" in msg and "comma" not in msg


@pytest.mark.parametrize(
    ("env", "attempt_env", "named"),
    [
        ({"LLAMA_ARG_ALIAS": "other"}, None, "LLAMA_ARG_ALIAS"),
        ({"MODEL_ALIAS": "other"}, None, "MODEL_ALIAS"),
        ({"model_alias": "other"}, None, "model_alias"),  # pydantic settings read it in any case
        (None, {"LLAMA_ARG_ALIAS": "other"}, "LLAMA_ARG_ALIAS"),
        ({"LLAMA_ARG_ALIAS": "tiny"}, {"LLAMA_ARG_ALIAS": "other"}, "LLAMA_ARG_ALIAS"),  # the attempt's wins
    ],
    ids=["llama-server-env", "python-env", "python-env-lowercase", "attempt-env", "attempt-overrides"],
)
def test_llamacpp_alias_in_the_environment_contradicting_served_name_is_refused(
    tmp_path: Path, env: dict[str, str] | None, attempt_env: dict[str, str] | None, named: str
) -> None:
    msg = _refused(_campaign(tmp_path, [], env=env, attempt_env=attempt_env))
    assert named in msg and "'other'" in msg and "'tiny'" in msg


@pytest.mark.parametrize(
    ("option", "base"),
    [
        (["--model_alias", "{served_name}"], BASE),
        (["--alias", "{served_name}"], SERVER),
        (["--model_alias=tiny"], BASE),
    ],
)
@pytest.mark.parametrize("variable", ["MODEL_ALIAS", "LLAMA_ARG_ALIAS", "model_alias"])
def test_alias_option_wins_over_an_alias_variable_in_the_environment(
    tmp_path: Path, option: list[str], base: list[str], variable: str
) -> None:
    """Audit 55 f2: `--model_alias {served_name}` with `MODEL_ALIAS=default` in the environment was refused,
    though the engine serves the option's name (llama-cpp-python reads MODEL_ALIAS only where no option
    sets it; llama-server's LLAMA_ARG_ALIAS likewise): the variable counts only where no option is given."""
    assert load_campaign(_campaign(tmp_path, option, base=base, env={variable: "default"}))
    # the option itself still must name served_name, whatever the environment says
    wrong = [o.replace("{served_name}", "other").replace("=tiny", "=other") for o in option]
    assert "'other'" in _refused(_campaign(tmp_path, wrong, base=base, env={variable: "tiny"}))


def test_llamacpp_alias_environment_neighbours(tmp_path: Path) -> None:
    assert load_campaign(_campaign(tmp_path, [], env={"LLAMA_ARG_ALIAS": "tiny", "MODEL_ALIAS": "tiny"}))
    # another variable that merely contains the word is no alias: no alias is named, so the engine's
    # default id (its --model path) is what is refused (fix 88)
    msg = _refused(_campaign(tmp_path, [], env={"LLAMA_ARG_ALIAS_X": "other", "MY_MODEL_ALIAS": "x"}))
    assert "its default id" in msg and "'x'" not in msg and "'other'" not in msg
    assert "no value" in _refused(_campaign(tmp_path, [], env={"LLAMA_ARG_ALIAS": ""}))
    assert "comma" in _refused(_campaign(tmp_path, [], env={"LLAMA_ARG_ALIAS": "tiny,other"}))


@pytest.mark.parametrize(
    ("kind", "program"),
    [
        ("vllm", ["vllm", "serve", "{model}", "--served-model-name", "{served_name}"]),
        (
            "sglang",
            [
                "{python}",
                "-m",
                "sglang.launch_server",
                "--model-path",
                "{model}",
                "--served-model-name",
                "tiny",
            ],
        ),
        ("generic", ["{python}", "-m", "llama_cpp.server", "--model", "{model}"]),
    ],
)
def test_llamacpp_spellings_are_not_judged_for_other_engines(
    tmp_path: Path, kind: str, program: list[str]
) -> None:
    # ``-a`` / ``--alias`` mean something else (or nothing) to other engines: only llamacpp's are judged
    # (each kind runs its own program: another kind's is refused, audit 64 f1)
    c = _campaign(
        tmp_path, ["-a", "other", "--model_alias", "other"], kind=kind, env={"LLAMA_ARG_ALIAS": "x"}
    )
    text = c.read_text()
    base = json.dumps(BASE)[1:-1]
    assert base in text
    c.write_text(text.replace(base, json.dumps(program)[1:-1]))
    assert load_campaign(c).spec.engine.kind == kind


def test_served_model_name_is_still_judged_for_llamacpp(tmp_path: Path) -> None:
    msg = _refused(_campaign(tmp_path, ["--served-model-name", "other"]))
    assert "--served-model-name" in msg and "'other'" in msg


def test_llamacpp_alias_environment_is_judged_as_expanded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FIX62_ALIAS", "other")
    msg = _refused(_campaign(tmp_path, [], env={"MODEL_ALIAS": "${FIX62_ALIAS}"}))
    assert "'other'" in msg and "MODEL_ALIAS" in msg
    monkeypatch.setenv("FIX62_ALIAS", "tiny")
    assert load_campaign(_campaign(tmp_path, [], env={"MODEL_ALIAS": "${FIX62_ALIAS}"}))
    # a variable that is not set: the launch refuses it (it names the variable), not the loader (nor as
    # naming no alias: fix 88)
    monkeypatch.delenv("FIX62_ALIAS")
    assert load_campaign(_campaign(tmp_path, [], env={"MODEL_ALIAS": "${FIX62_ALIAS}"}))
