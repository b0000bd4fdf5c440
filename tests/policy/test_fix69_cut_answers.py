"""Audit 59: the campaign's own settings were blamed on the engine.

F1 — ``[gates.control] max_tokens = 3`` cut llama-cpp-python's "READY" to "REA" (finish_reason "length") and
the verdict was NOT QUALIFIED — CONTROL; ``max_tokens = 1`` cutting "READY no, I am NOT READY" to "READY"
passed (fail-open). A probe now records ``finish_reason`` and ``completion_tokens``; an answer the campaign's
max_tokens cut is no judgement of the engine (rule ``campaign-cut-probe``: INCONCLUSIVE), and a passing
control or structured probe must record finish_reason "stop" (missing → INCONCLUSIVE).

F2 — llama-cpp-python answers the ``json_schema`` request form with HTTP 500 "1 validation error … 'loc':
('body', 'response_format', 'type')": the campaign's request form, refused — not a runtime fault
(``engine-refused-probe``, params ``request_form_refused_http_statuses`` / ``request_form_refusal_patterns``).

F3 — the sequential latency bar is the policy's (``sequential_max_latency_ms``), judged on the recorded
latencies apart from ``ok``, with a reason naming the overrun, not "fewer than N … succeeded".
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from pydantic import ValidationError

from ledger import answers
from ledger.collectors import probe as collector_probe
from ledger.entries import HealthProbe
from ledger.policy.fixtures import run_fixture
from ledger.policy.loader import load_policy
from ledger.service import Ledger

REPO = Path(__file__).resolve().parents[2]
POLICY_DIR = REPO / "policies"
SHARED = POLICY_DIR / "fixtures" / "_shared"
CONTROL = "NOT QUALIFIED — CONTROL"
RUNTIME = "NOT QUALIFIED — RUNTIME RELIABILITY"

COMPLETION = (
    'check = "completion", ok = true, http_status = 200, finish_reason = "stop", expected = "READY", '
    'text = "READY", max_tokens = 8'
)
STRUCTURED = (
    'check = "structured", ok = true, http_status = 200, finish_reason = "stop", '
    'text = \'{"status": "READY"}\''
)
SEQ_LATENCIES = "latencies_ms = [41.5, 41.5,"
LLAMA_500 = (
    "HTTP 500: 1 validation error:\\n  {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
    "'msg': \\\"Input should be 'text' or 'json_object'\\\", 'input': 'json_schema'}"
)


def _fixture(tmp_path: Path, edits: list[tuple[str, str]], verdict: str) -> Path:
    """The shared ready campaign (every gate passes: QUALIFIED) with ``edits``, and one expected verdict."""
    text = (SHARED / "ready-campaign.toml").read_text()
    # the shared structured probe records its status last: put it beside `ok`, where the edits look for it
    line = next(x for x in text.splitlines() if 'check = "structured"' in x)
    moved = line.replace("ok = true, ", "ok = true, http_status = 200, ").replace(
        ", http_status = 200 }", " }"
    )
    text = text.replace(line, moved)
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    folder = tmp_path / "backend-qualification"
    folder.mkdir(exist_ok=True)
    (folder / "ready.toml").write_text(text)
    out = folder / "case.toml"
    out.write_text(
        'description = "fix69"\nstart = "2026-09-10T09:00:00Z"\n'
        f'include = ["ready.toml", "{SHARED / "semantic-benchmark.toml"}"]\n\n'
        '[keys]\ncollector = ["collector"]\nreviewer = ["reviewer"]\noperator = ["operator"]\n\n'
        '[defaults.subject]\ncampaign = "vllm-embed"\nbackend = "vllm"\nmodel = "Qwen3-Embedding-8B"\n'
        'host = "gpu-box-1"\n\n' + verdict
    )
    return out


def _failures(path: Path) -> list[str]:
    result = run_fixture(path, POLICY_DIR, Path(tempfile.mkdtemp(prefix="fix69-")), init=Ledger.init)
    assert result.checks, path
    return list(result.failures)


def _expect(verdict: str, gates: str, extra: str = "") -> str:
    return f'[[verdicts]]\nexpect.verdict = "{verdict}"\nexpect.gates = {{ {gates} }}\n{extra}'


def test_the_shared_campaign_still_qualifies(tmp_path: Path) -> None:
    path = _fixture(
        tmp_path, [], _expect("QUALIFIED", 'ready-control = "passed", structured-output = "passed"')
    )
    assert not _failures(path)


# --- F1: an answer the campaign's max_tokens cut ---------------------------------------------------


def test_control_cut_by_the_campaigns_max_tokens_is_inconclusive_not_control(tmp_path: Path) -> None:
    cut = (
        'check = "completion", ok = false, http_status = 200, finish_reason = "length", '
        'completion_tokens = 3, expected = "READY", text = "REA", max_tokens = 3, error = "cut"'
    )
    path = _fixture(
        tmp_path,
        [(COMPLETION, cut)],
        _expect(
            "INCONCLUSIVE",
            'runtime-stability = "passed", ready-control = "missing"',
            'expect.rejected = [{ entry = "completion", rule = "campaign-cut-probe", '
            'detail = "the campaign\'s max_tokens (3) cut" }]\n',
        ),
    )
    assert not _failures(path)


def test_ready_prefix_cut_from_a_longer_answer_does_not_pass(tmp_path: Path) -> None:
    """Fail-open before: "READY no, I am NOT READY" cut to "READY" by max_tokens = 1, recorded ok."""
    cut = (
        'check = "completion", ok = true, http_status = 200, finish_reason = "length", '
        'completion_tokens = 1, expected = "READY", text = "READY", max_tokens = 1'
    )
    path = _fixture(
        tmp_path,
        [(COMPLETION, cut)],
        _expect(
            "INCONCLUSIVE",
            'ready-control = "missing"',
            'expect.rejected = [{ entry = "completion", rule = "campaign-cut-probe" }]\n',
        ),
    )
    assert not _failures(path)


@pytest.mark.parametrize(
    ("label", "new"),
    [
        ("finish_reason dropped", COMPLETION.replace('finish_reason = "stop", ', "")),
        ("another finish reason", COMPLETION.replace('"stop"', '"content_filter"')),
        ("finish_reason null-like empty", COMPLETION.replace('"stop"', '""')),
    ],
)
def test_passing_control_without_a_stop_finish_reason_is_inconclusive(
    tmp_path: Path, label: str, new: str
) -> None:
    path = _fixture(
        tmp_path,
        [(COMPLETION, new)],
        _expect(
            "INCONCLUSIVE",
            'ready-control = "missing"',
            'expect.reasons = { ready-control = "records no finish_reason \\"stop\\"" }\n',
        ),
    )
    assert not _failures(path), label


def test_wrong_answer_that_ended_on_its_own_still_fails_control(tmp_path: Path) -> None:
    wrong = COMPLETION.replace('text = "READY"', 'text = "NOT READY"')
    path = _fixture(tmp_path, [(COMPLETION, wrong)], _expect(CONTROL, 'ready-control = "failed"'))
    assert not _failures(path)


def test_structured_answer_cut_by_the_campaigns_max_tokens_is_inconclusive(tmp_path: Path) -> None:
    cut = (
        'check = "structured", ok = false, http_status = 200, finish_reason = "length", '
        'completion_tokens = 4, max_tokens = 4, text = \'{"status": "RE\''
    )
    path = _fixture(
        tmp_path,
        [(STRUCTURED, cut)],
        _expect(
            "INCONCLUSIVE",
            'ready-control = "passed", structured-output = "missing"',
            'expect.rejected = [{ entry = "structured", rule = "campaign-cut-probe" }]\n',
        ),
    )
    assert not _failures(path)


def test_structured_without_a_stop_finish_reason_is_inconclusive(tmp_path: Path) -> None:
    path = _fixture(
        tmp_path,
        [(STRUCTURED, STRUCTURED.replace('finish_reason = "stop", ', ""))],
        _expect("INCONCLUSIVE", 'structured-output = "missing"'),
    )
    assert not _failures(path)


@pytest.mark.parametrize(
    "field",
    [{"finish_reason": 1}, {"finish_reason": True}, {"completion_tokens": -1}, {"completion_tokens": "3"}],
)
def test_mistyped_finish_fields_are_refused_at_ingest(field: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        HealthProbe.model_validate({"endpoint": "/v1", "check": "completion", "ok": True, **field})


def test_renamed_finish_field_is_refused_at_ingest() -> None:
    with pytest.raises(ValidationError):
        HealthProbe.model_validate(
            {"endpoint": "/v1", "check": "completion", "ok": True, "finishReason": "stop"}
        )


def test_old_probe_without_finish_fields_still_validates() -> None:
    p = HealthProbe.model_validate({"endpoint": "/v1", "check": "completion", "ok": True, "text": "READY"})
    assert p.finish_reason is None and p.completion_tokens is None


def test_the_policys_cut_judgement_is_the_collectors() -> None:
    """One judgement of a cut answer: the policy's rule reads ``e.derived.cut_undecided`` (derived by
    ``ledger.answers.cut_undecided``), which the collector's probe calls too."""
    text = (POLICY_DIR / "backend-qualification.toml").read_text()
    assert "e.derived.cut_undecided" in text
    assert "finish_reason == 'length'" not in text  # no second copy of the cut word
    assert collector_probe.cut_undecided is answers.cut_undecided
    assert collector_probe.CUT_FINISH_REASON is answers.CUT_FINISH_REASON


# --- F2: the engine refused the structured probe's request form ------------------------------------


def _structured_refused(status: int = 500, error: str = LLAMA_500, check: str = "structured") -> str:
    return f'check = "{check}", ok = false, http_status = {status}, max_tokens = 64, error = "{error}"'


def test_json_schema_request_form_refused_is_inconclusive_not_runtime(tmp_path: Path) -> None:
    path = _fixture(
        tmp_path,
        [(STRUCTURED, _structured_refused())],
        _expect(
            "INCONCLUSIVE",
            'runtime-stability = "passed", ready-control = "passed", structured-output = "missing"',
            'expect.rejected = [{ entry = "structured", rule = "engine-refused-probe", '
            'detail = "does not accept the request form" }]\n',
        ),
    )
    assert not _failures(path)


@pytest.mark.parametrize(
    ("label", "new", "verdict", "gates"),
    [
        ("422, same error", _structured_refused(422), "INCONCLUSIVE", 'structured-output = "missing"'),
        (
            "500, another error",
            _structured_refused(error="HTTP 500: EngineDeadError"),
            RUNTIME,
            'runtime-stability = "failed"',
        ),
        (
            "500, error dropped",
            'check = "structured", ok = false, http_status = 500, max_tokens = 64',
            RUNTIME,
            'runtime-stability = "failed"',
        ),
        ("503, same error", _structured_refused(503), RUNTIME, 'runtime-stability = "failed"'),
        (
            "status dropped",
            f'check = "structured", ok = false, max_tokens = 64, error = "{LLAMA_500}"',
            RUNTIME,
            'runtime-stability = "failed"',
        ),
    ],
)
def test_request_form_refusal_neighbours(
    tmp_path: Path, label: str, new: str, verdict: str, gates: str
) -> None:
    path = _fixture(tmp_path, [(STRUCTURED, new)], _expect(verdict, gates))
    assert not _failures(path), label


def test_a_completion_500_naming_response_format_is_still_a_runtime_fault(tmp_path: Path) -> None:
    new = _structured_refused(check="completion")
    path = _fixture(tmp_path, [(COMPLETION, new)], _expect(RUNTIME, 'runtime-stability = "failed"'))
    assert not _failures(path)


def test_request_form_refusal_params_match_llama_cpp_pythons_answers() -> None:
    import re

    params = load_policy("backend-qualification", POLICY_DIR).params
    assert params["request_form_refused_http_statuses"] == [400, 422, 500]
    pats = params["request_form_refusal_patterns"]
    text_500 = LLAMA_500.replace('\\"', '"').replace("\\n", "\n")
    text_422 = "HTTP 422: [{'type': 'literal_error', 'loc': ['body', 'response_format', 'type'], 'msg': 'x'}]"
    assert any(re.search(p, text_500) for p in pats)
    assert any(re.search(p, text_422) for p in pats)
    assert not any(re.search(p, "HTTP 500: EngineDeadError: response_format") for p in pats)


# --- F3: the sequential latency bar is the policy's ------------------------------------------------


def test_sequential_latency_overrun_is_named_as_such_not_as_failed_requests(tmp_path: Path) -> None:
    path = _fixture(
        tmp_path,
        [(SEQ_LATENCIES, "latencies_ms = [41.5, 90000.0,")],
        _expect(
            RUNTIME,
            'sequential-requests = "failed"',
            'expect.reasons = { sequential-requests = "above the policy\'s latency bar of 60000 ms" }\n',
        ),
    )
    assert not _failures(path)
    text = path.read_text()
    assert "fewer than" not in text


def test_sequential_latency_at_the_bar_passes(tmp_path: Path) -> None:
    path = _fixture(
        tmp_path,
        [(SEQ_LATENCIES, "latencies_ms = [41.5, 60000.0,")],
        _expect("QUALIFIED", 'sequential-requests = "passed"'),
    )
    assert not _failures(path)


def test_the_sequential_bar_is_a_policy_param() -> None:
    assert load_policy("backend-qualification", POLICY_DIR).params["sequential_max_latency_ms"] == 60000
