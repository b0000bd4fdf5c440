"""Audit 59: the collector blamed the campaign's own settings on the engine.

F1 — a probe records ``finish_reason`` and ``completion_tokens``; an answer the campaign's max_tokens cut
("length") does not pass, whatever it says, and its error names the campaign's max_tokens.
F2 — a structured probe whose request form the engine refused (llama-cpp-python's HTTP 500 naming
response_format) is no runtime fault: ``request_form_refused`` reads the policy's pattern params.
F3 — the sequential latency bar is the policy's (``sequential_max_latency_ms``): a campaign's other value is
refused at load, and a latency overrun is recorded apart from ``ok``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.collectors.campaign import (
    load_campaign,
    request_form_refused,
    sequential_max_latency,
    structured_schema,
)
from ledger.collectors.probe import probe_completion, probe_sequential, probe_structured
from ledger.errors import ConfigError
from ledger.policy.loader import load_policy
from tests.engines.stub_openai import StubConfig, serve_stub

REPO = Path(__file__).resolve().parents[2]
PROMPT = "Reply with exactly one word: READY"
SPROMPT = 'Answer with the JSON object {"status": "READY"}.'


def _policy():  # type: ignore[no-untyped-def]
    return load_policy("backend-qualification", REPO / "policies")


# --- F1 --------------------------------------------------------------------------------------------


def test_ready_cut_from_a_longer_answer_by_max_tokens_is_not_passed() -> None:
    with serve_stub(StubConfig(answers={PROMPT: "READY no, I am NOT READY"})) as base:
        p = probe_completion(base, prompt=PROMPT, max_tokens=1, timeout=10)
    assert p["text"] == "READY"
    assert p["finish_reason"] == "length" and p["completion_tokens"] == 1
    assert p["ok"] is False
    assert "max_tokens (1) cut the answer" in p["error"]


def test_ready_that_ended_on_its_own_passes_and_records_stop() -> None:
    with serve_stub(StubConfig(answers={PROMPT: "READY"})) as base:
        p = probe_completion(base, prompt=PROMPT, max_tokens=8, timeout=10)
    assert p["ok"] is True and p["finish_reason"] == "stop" and p["completion_tokens"] == 1


def test_structured_answer_cut_by_max_tokens_is_not_passed() -> None:
    answer = '{"status": "READY", "note": "all good"}'
    with serve_stub(StubConfig(answers={SPROMPT: answer})) as base:
        p = probe_structured(
            base, schema=structured_schema(), fmt="json_object", prompt=SPROMPT, max_tokens=1, timeout=10
        )
    assert p["finish_reason"] == "length" and p["ok"] is False
    assert "max_tokens (1) cut the answer" in p["error"]


# --- F2 --------------------------------------------------------------------------------------------

LLAMA_500 = (
    "HTTP 500: 1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
    "'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema'}"
)


@pytest.mark.parametrize(
    ("payload", "refused"),
    [
        ({"check": "structured", "http_status": 500, "error": LLAMA_500}, True),
        ({"check": "structured", "http_status": 422, "error": LLAMA_500}, True),
        ({"check": "structured", "http_status": 503, "error": LLAMA_500}, False),
        ({"check": "structured", "http_status": 500, "error": "HTTP 500: EngineDeadError"}, False),
        ({"check": "structured", "http_status": 500}, False),
        ({"check": "structured", "error": LLAMA_500}, False),
        ({"check": "structured", "http_status": "500", "error": LLAMA_500}, False),
        ({"check": "completion", "http_status": 500, "error": LLAMA_500}, False),
    ],
    ids=["500", "422", "503", "other-error", "error-dropped", "status-dropped", "status-text", "completion"],
)
def test_json_schema_request_form_refused_is_no_runtime_fault(
    payload: dict[str, object], refused: bool
) -> None:
    assert request_form_refused(payload, _policy().params) is refused


def test_request_form_refusal_without_the_policys_params_refuses_nothing() -> None:
    payload = {"check": "structured", "http_status": 500, "error": LLAMA_500}
    assert request_form_refused(payload, {}) is False


# --- F3 --------------------------------------------------------------------------------------------


def _campaign(tmp_path: Path, sequential: str) -> Path:
    p = tmp_path / "c.toml"
    p.write_text(
        '[campaign]\nid = "c"\n\n'
        f'[model]\npath = "{tmp_path}"\nserved_name = "m"\n\n'
        '[engine]\nkind = "vllm"\ncommand = ["vllm", "serve", "{model}", "--served-model-name", "m",'
        ' "--port", "{port}"]\n\n'
        f"[gates.sequential]\n{sequential}\n",
        encoding="utf-8",
    )
    return p


@pytest.mark.parametrize("value", ["5", "30000", "59999.5"])
def test_campaign_sequential_latency_bar_other_than_the_policys_is_refused(
    tmp_path: Path, value: str
) -> None:
    c = load_campaign(_campaign(tmp_path, f"max_latency_ms = {value}"))
    with pytest.raises(ConfigError) as e:
        sequential_max_latency(c, _policy())
    assert "sequential_max_latency_ms = 60000" in e.value.message and "own bar" in e.value.message


@pytest.mark.parametrize("line", ["max_latency_ms = 60000", ""])
def test_campaign_repeating_or_leaving_out_the_bar_gets_the_policys(tmp_path: Path, line: str) -> None:
    assert sequential_max_latency(load_campaign(_campaign(tmp_path, line)), _policy()) == 60000.0


def test_campaign_bar_where_the_policy_sets_none_is_refused(tmp_path: Path) -> None:
    class _NoBar:
        def __init__(self) -> None:
            self.params: dict[str, object] = {}

        def identity(self) -> dict[str, str]:
            return {"name": "p"}

    c = load_campaign(_campaign(tmp_path, "max_latency_ms = 60000"))
    with pytest.raises(ConfigError, match="sets no sequential_max_latency_ms"):
        sequential_max_latency(c, _NoBar())


def test_sequential_latency_overrun_is_recorded_apart_from_ok() -> None:
    with serve_stub(StubConfig(answers={PROMPT: "READY"})) as base:
        p = probe_sequential(base, count=3, prompt=PROMPT, max_latency_ms=0.001, timeout=10)
    assert p["ok"] is True and p["count"] == 3 and len(p["latencies_ms"]) == 3
    assert p["error"] is None
    assert len(p["details"]["over_latency"]) == 3 and p["details"]["max_latency_ms"] == 0.001
