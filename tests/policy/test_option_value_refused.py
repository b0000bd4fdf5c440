"""Fix 130 (audit 91 f3): llama-cpp-python starts with any ``--chat_format`` and answers every chat request
HTTP 500 "Invalid chat handler: X (valid formats: […])". A value the campaign's command gives an option,
refused by the engine, is the campaign's configuration (``ledger.answers.refused_option_value``,
``e.derived.refusal == 'option-value'``): not credited, INCONCLUSIVE naming ``engine-refused-probe``,
nothing against the engine — held to the launch's recorded command, never the probe's own record."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from ledger.answers import (
    REFUSAL_OPTION_VALUE,
    REFUSALS,
    launched_command,
    option_value_refusal_problem,
    option_values,
    refusal,
    refused_option_value,
)
from tests.policy.test_fail_closed import (
    counted_against,
    entry,
    gates,
    qualified_entries,
    rejected,
    verdict_of,
)

POLICIES = Path(__file__).resolve().parents[2] / "policies"
PARAMS: dict[str, Any] = tomllib.loads((POLICIES / "evidence-acceptance.toml").read_text())["params"]
ERROR = "HTTP 500: Invalid chat handler: no-such-format (valid formats: ['llama-2', 'llama-3', 'chatml'])"
COMMAND = [
    "/venv/bin/python",
    "-m",
    "llama_cpp.server",
    "--model",
    "/m.gguf",
    "--chat_format",
    "no-such-format",
]


def _probe(check: str = "completion", **kw: Any) -> dict[str, Any]:
    return {"check": check, "ok": False, "http_status": 500, "error": ERROR, "count": 0, **kw}


# --- the one function ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("check", ["completion", "structured", "sequential"])
def test_engine_refusing_the_chat_format_the_command_gives_is_the_campaigns(check: str) -> None:
    assert refused_option_value(_probe(check), PARAMS, COMMAND) == ("--chat_format", "no-such-format")
    assert refusal(_probe(check), PARAMS, command=COMMAND) == REFUSAL_OPTION_VALUE
    assert REFUSAL_OPTION_VALUE in REFUSALS


@pytest.mark.parametrize(
    "command",
    [
        [*COMMAND[:-1], "chatml"],  # the command gives another value: the engine named one of its own
        COMMAND[:-2],  # the command gives no chat format
        [*COMMAND[:-2], "--chat_f", "no-such-format"],  # a prefix: not read (fail closed)
        [*COMMAND[:-2], "--chat-format", "no-such-format"],  # another option's spelling, not the pattern's
        [*COMMAND, "--chat_format", "chatml"],  # the last one wins: the engine got chatml
        None,  # no launch known
    ],
)
def test_value_not_in_the_recorded_command_is_the_engines(command: list[str] | None) -> None:
    assert refusal(_probe(), PARAMS, command=command) is None


def test_equals_form_and_last_value_of_the_command_are_read() -> None:
    assert option_values(["--chat_format=a", "--x", "1", "--chat_format", "b"], ["--chat_format"]) == ("b",)
    assert option_values(["--chat_format=no-such-format"], ["--chat_format"]) == ("no-such-format",)
    assert option_values(["--chat_format"], ["--chat_format"]) == ()
    assert refusal(_probe(), PARAMS, command=[*COMMAND[:-2], "--chat_format=no-such-format"]) == (
        REFUSAL_OPTION_VALUE
    )


@pytest.mark.parametrize(
    "probe",
    [
        _probe(http_status=400),  # the same words in a 400: not a listed status
        _probe(http_status="500"),  # mistyped status
        _probe(http_status=None),  # no answer
        _probe(error="HTTP 500: could not broadcast input array"),  # another 500 text
        # not at the start of the error
        _probe(error="HTTP 500: Traceback … Invalid chat handler: no-such-format (valid formats: [])"),
        _probe(error=None),  # error dropped
        _probe(check="models"),  # no chat request
        _probe(check="sequential", count=2),  # the run answered before: the engine took the value
        _probe(check="sequential", count="0"),  # count mistyped
        {k: v for k, v in _probe(check="sequential").items() if k != "count"},  # count dropped
    ],
)
def test_option_value_refusal_neighbours_are_the_engines(probe: dict[str, Any]) -> None:
    assert refusal(probe, PARAMS, command=COMMAND) is None


@pytest.mark.parametrize(
    "params",
    [
        {k: v for k, v in PARAMS.items() if k != "option_value_refusal_patterns"},  # dropped
        {k: v for k, v in PARAMS.items() if k != "option_value_refused_http_statuses"},  # dropped
        {**PARAMS, "option_value_refusal_patterns": [ERROR]},  # mistyped: a text, no table
        {**PARAMS, "option_value_refused_http_statuses": ["500"]},  # mistyped status
        {  # renamed group
            **PARAMS,
            "option_value_refusal_patterns": [
                {
                    "pattern": "^HTTP 500: Invalid chat handler: (?P<name>.+?) \\(",
                    "options": ["--chat_format"],
                }
            ],
        },
    ],
)
def test_option_value_params_dropped_or_mistyped_excuse_nothing(params: dict[str, Any]) -> None:
    assert refusal(_probe(), params, command=COMMAND) is None


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("^x", "no list"),
        (["^x"], "no table"),
        ([{"pattern": "^Invalid chat handler: (\\S+)", "options": ["--chat_format"]}], "no group"),
        ([{"pattern": "(?P<value>", "options": ["--chat_format"]}], "does not compile"),
        ([{"pattern": "(?P<value>x)", "options": []}], "no non-empty list"),
        ([{"pattern": "(?P<value>x)", "options": ["chat_format"]}], "no non-empty list"),
        ([{"pattern": "(?P<value>x)"}], "exactly pattern and options"),
        ([{"pattern": "(?P<value>x)", "options": ["--a"], "status": 500}], "exactly pattern and options"),
    ],
)
def test_pattern_without_the_value_group_is_a_problem(value: Any, why: str) -> None:
    assert why in (option_value_refusal_problem(value) or "")


def test_shipped_patterns_have_the_value_group() -> None:
    assert option_value_refusal_problem(PARAMS["option_value_refusal_patterns"]) is None
    assert all(p["pattern"].startswith("^") for p in PARAMS["option_value_refusal_patterns"])


@pytest.mark.parametrize(
    "launch",
    [None, "x", {"command": "python -m llama_cpp.server"}, {"command": []}, {"command": ["a", 1]}, {}],
)
def test_launch_command_missing_or_mistyped_is_not_known(launch: Any) -> None:
    assert launched_command(launch) is None


# --- the verdict --------------------------------------------------------------------------------------------


def _refused_run(probe: str = "completion") -> list[dict[str, Any]]:
    es = qualified_entries()
    entry(es, "launch")["payload"]["command"] = list(COMMAND)
    p = entry(es, probe)["payload"]
    p.update(ok=False, http_status=500, error=ERROR, text=None, finish_reason=None)
    return es


def test_engine_refusing_the_campaigns_chat_format_is_inconclusive_not_runtime(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, _refused_run())
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert rejected(v)["completion"] == "engine-refused-probe"
    assert "completion" not in counted_against(v)
    assert gates(v)["ready-control"] == "missing"
    assert gates(v)["runtime-stability"] == "passed"
    [r] = [r for r in v["rejected"] if r["rule"] == "engine-refused-probe"]
    assert "campaign's engine command" in r["detail"] and "no-such-format" in r["detail"]


def test_chat_format_the_command_does_not_give_is_the_engines_failure(tmp_path: Path) -> None:
    es = _refused_run()
    entry(es, "launch")["payload"]["command"] = [*COMMAND[:-1], "chatml"]
    v = verdict_of(tmp_path, es)
    assert v["verdict"].startswith("NOT QUALIFIED"), v["gates"]
    assert rejected(v).get("completion") != "engine-refused-probe"
    assert "failed" in (gates(v)["ready-control"], gates(v)["runtime-stability"])


def test_chat_format_refused_after_the_launch_answered_a_chat_request_is_the_engines(tmp_path: Path) -> None:
    """The structured probe refused with the chat format after the control was answered (HTTP 200): the
    engine took the value at launch; refusing it later is its failure (contradiction)."""
    v = verdict_of(tmp_path, _refused_run("structured"))
    assert v["verdict"].startswith("NOT QUALIFIED"), v["gates"]
    assert rejected(v).get("structured") != "engine-refused-probe"
    assert "failed" in (gates(v)["structured-output"], gates(v)["runtime-stability"])


def test_chat_format_refused_before_any_chat_answer_is_the_campaigns(tmp_path: Path) -> None:
    """The neighbour of the contradiction: the same structured refusal with the control answered after it
    (log order) is no contradiction — the engine answered nothing of the launch before."""
    es = _refused_run("structured")
    names = [e.get("name") for e in es]
    control, structured = entry(es, "completion"), entry(es, "structured")
    control["at"], structured["at"] = structured["at"], control["at"]
    es.insert(names.index("completion"), es.pop(names.index("structured")))
    v = verdict_of(tmp_path, es)
    assert rejected(v)["structured"] == "engine-refused-probe", v["gates"]
    assert "structured" not in counted_against(v)


@pytest.mark.parametrize(
    "patterns",
    [
        '[{ pattern = "^HTTP 500: Invalid chat handler: (.+?) \\\\(valid", options = ["--chat_format"] }]',
        '[{ pattern = "^HTTP 500: Invalid chat handler: (?P<val>.+?) \\\\(", options = ["--chat_format"] }]',
        '[{ pattern = "^HTTP 500: Invalid chat handler: (?P<value>.+?) \\\\(" }]',
        '["^HTTP 500: Invalid chat handler: (?P<value>.+?) \\\\("]',
        '[{ pattern = "(?P<value>[", options = ["--chat_format"] }]',
    ],
    ids=["no-group", "group-renamed", "options-dropped", "not-a-table", "not-a-regex"],
)
def test_a_malformed_option_value_pattern_is_refused_at_policy_load(tmp_path: Path, patterns: str) -> None:
    """A pattern that could never name the value (its group left out or renamed, its options dropped, not a
    table, no regular expression) would match nothing while judging: the policy is refused at load, naming
    the param, instead of loading and excusing nothing unseen."""
    from ledger.errors import PolicyError
    from ledger.policy.loader import default_policy_dir, load_policy

    src = default_policy_dir()
    for f in src.glob("*.toml"):
        (tmp_path / f.name).write_bytes(f.read_bytes())
    acc = tmp_path / "evidence-acceptance.toml"
    text = acc.read_text()
    start = text.index("option_value_refusal_patterns = [")
    end = text.index("]\n", text.index("options = ", start)) + 2
    acc.write_text(text[:start] + f"option_value_refusal_patterns = {patterns}\n" + text[end:])
    with pytest.raises(PolicyError, match="option_value_refusal_patterns"):
        load_policy("backend-qualification", tmp_path)
    acc.write_text(text)
    assert load_policy("backend-qualification", tmp_path).name == "backend-qualification"


# --- fix 133 (audit 93 f2): the value refused, held to the values the engine's own error lists --------------

# llama-cpp-python 0.3.36's registry, as its error prints it; the collector's probe keeps 300 characters
_FORMATS = [
    "llama-2", "llama-3", "alpaca", "qwen", "vicuna", "oasst_llama", "baichuan-2", "baichuan", "openbuddy",
    "redpajama-incite", "snoozy", "phind", "intel", "open-orca", "mistrallite", "zephyr", "pygmalion",
    "chatml", "mistral-instruct", "chatglm3", "openchat", "saiga", "gemma", "functionary", "functionary-v2",
    "functionary-v1", "chatml-function-calling",
]  # fmt: skip


def _said(value: str, listed: str) -> dict[str, Any]:
    return _probe(error=f"HTTP 500: Invalid chat handler: {value} (valid formats: {listed})")


def _cut(value: str) -> dict[str, Any]:
    """The engine's real error for ``value``, cut as the collector's probe records it."""
    message = f"Invalid chat handler: {value} (valid formats: {_FORMATS})"
    return _probe(error=f"HTTP 500: {message[:300]}")


def _giving(value: str) -> list[str]:
    return [*COMMAND[:-1], value]


def test_chat_format_the_engines_own_error_lists_as_valid_is_the_engines_failure() -> None:
    """The failure: "Invalid chat handler: chatml (valid formats: ['llama-2', 'chatml'])" for
    ``--chat_format chatml`` was excused — the engine refused a value it names as accepted."""
    probe = _said("chatml", "['llama-2', 'chatml']")
    assert refused_option_value(probe, PARAMS, _giving("chatml")) is None
    assert refusal(probe, PARAMS, command=_giving("chatml")) is None


@pytest.mark.parametrize(
    ("value", "listed", "excused"),
    [
        ("no-such-format", "['llama-2', 'llama-3']", True),  # not listed: the campaign's value
        ("no-such-format", "[]", True),  # an empty registry lists nothing
        ("chatml", "['chatml']", False),  # listed alone
        ("chatml", "['llama-2', 'chatml', 'gemma']", False),  # listed among others (reordered)
        ("chatml", "['llama-2', 'chatml ']", True),  # another text: not the value
        ("chatml", "['llama-2', 'Chatml']", True),  # another case: llama-cpp-python's names are as written
        ("it's", '["it\'s"]', False),  # the double quotes Python prints a text with a quote in
        ("chatml", '["llama-2", "chatml"]', False),  # not as Python prints it: malformed
        ("chatml", "llama-2, chatml", False),  # no list: malformed
        ("chatml", "['llama-2', chatml]", False),  # an item not quoted: malformed
        ("chatml", "['llama-2', 3]", False),  # an item no text: malformed
        ("chatml", "('llama-2',)", False),  # a tuple, not the list the engine prints
        ("chatml", "{'llama-2'}", False),  # a set
        ("chatml", "['llama-2' 'x']", False),  # joined items
        ("chatml", "['llama-2',  'x']", False),  # spaced otherwise
        ("chatml", "[__import__('os').system('true')]", False),  # code: nothing evaluated, malformed
    ],
)
def test_valid_list_neighbours(value: str, listed: str, excused: bool) -> None:
    expected = ("--chat_format", value) if excused else None
    assert refused_option_value(_said(value, listed), PARAMS, _giving(value)) == expected


def test_real_error_cut_by_the_record_is_held_to_its_whole_items() -> None:
    """llama-cpp-python's real error (407 characters) is recorded cut at 300: its whole items are read — a
    value among them is the engine's failure, one not among them (the record lost the rest) the campaign's."""
    assert len(_cut("no-such-format")["error"]) < len(f"{_FORMATS}") + 60
    assert refused_option_value(_cut("no-such-format"), PARAMS, _giving("no-such-format")) == (
        "--chat_format",
        "no-such-format",
    )
    assert refused_option_value(_cut("alpaca"), PARAMS, _giving("alpaca")) is None  # a whole item
    assert refused_option_value(_cut("chatml"), PARAMS, _giving("chatml")) is None  # listed before the cut


@pytest.mark.parametrize(
    "listed",
    ["['llama-2', 'cha", "['llama-2', ", "['llama-2',", "['llama-2'", "[", "['llama-2', 'ch'a"],
)
def test_list_cut_at_the_end_of_the_record_reads_its_whole_items(listed: str) -> None:
    probe = _probe(error=f"HTTP 500: Invalid chat handler: chatml (valid formats: {listed}")
    excused = refused_option_value(probe, PARAMS, _giving("chatml"))
    assert excused == (None if listed.endswith("'a") else ("--chat_format", "chatml"))
    listed_llama = _probe(error=f"HTTP 500: Invalid chat handler: llama-2 (valid formats: {listed}")
    assert refused_option_value(listed_llama, PARAMS, _giving("llama-2")) is None or listed == "["


def test_valid_group_that_caught_nothing_excuses_nothing() -> None:
    params = {
        **PARAMS,
        "option_value_refusal_patterns": [
            {
                "pattern": "^HTTP 500: Invalid chat handler: (?P<value>.+?) "
                "\\((valid formats: (?P<valid>\\[.*\\]))?",
                "options": ["--chat_format"],
            }
        ],
    }
    probe = _probe(error="HTTP 500: Invalid chat handler: no-such-format (formats: ['a'])")
    assert refused_option_value(probe, params, COMMAND) is None
    assert refused_option_value(_probe(), params, COMMAND) == ("--chat_format", "no-such-format")


def test_pattern_with_the_valid_group_loads_another_named_group_does_not() -> None:
    assert (
        option_value_refusal_problem(
            [{"pattern": "^(?P<value>x) (?P<valid>\\[.*)", "options": ["--chat_format"]}]
        )
        is None
    )
    why = option_value_refusal_problem(
        [{"pattern": "^(?P<value>x) (?P<valid_formats>\\[.*)", "options": ["--chat_format"]}]
    )
    assert "other than" in (why or "")
    assert "(?P<valid>" in PARAMS["option_value_refusal_patterns"][0]["pattern"]


def test_chat_format_the_engine_lists_as_valid_is_not_qualified(tmp_path: Path) -> None:
    es = _refused_run()
    entry(es, "launch")["payload"]["command"] = _giving("chatml")
    entry(es, "completion")["payload"]["error"] = _said("chatml", "['llama-2', 'chatml']")["error"]
    v = verdict_of(tmp_path, es)
    assert v["verdict"].startswith("NOT QUALIFIED"), v["gates"]
    assert rejected(v).get("completion") != "engine-refused-probe"
    assert "completion" in counted_against(v) or gates(v)["runtime-stability"] == "failed"


def test_real_cut_error_for_the_campaigns_chat_format_stays_inconclusive(tmp_path: Path) -> None:
    es = _refused_run()
    entry(es, "completion")["payload"]["error"] = _cut("no-such-format")["error"]
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert rejected(v)["completion"] == "engine-refused-probe"
