"""An operator's cancel during engine start-up was blamed on the engine (audit 38, f1): `ledger collect
run` cancelled by SIGTERM while the engine loaded recorded the job `cancelled` (cancelled_by SIGTERM) and the
launch `ready = false`, stop reason "cancelled", no failure — and the verdict said NOT QUALIFIED — RUNTIME
RELIABILITY ("no engine launch within the attempt budget reached API readiness"), a standing failure against
routing.

Now the operator's stop is derived from the log (``e.derived.operator_stopped``: the job end that decides
killed-run says cancelled or killed at a signal it names, and the launch agrees — stop reason "cancelled", no
failure signature, no failure in its logs): such a launch is not credited (operator-stopped-before-ready)
and, not being ready, shows nothing against the engine — api-readiness is INCONCLUSIVE. Any other failure it
shows still counts; a launch that says "cancelled" in a job that did not end so is still a failure."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from ledger.policy.fixtures import run_fixture
from ledger.service import Ledger

REPO = Path(__file__).resolve().parents[2]
POLICY_DIR = REPO / "policies"
FIXTURES = POLICY_DIR / "fixtures"
QUAL = FIXTURES / "backend-qualification" / "operator-cancel-before-ready.toml"
# the approved spec of QUAL's first job: a second job of the campaign binds it too (one binding none
# conflicts with it: fix117), the engine's interpreter included (fix 164)
SPEC = (
    '{ bindings = { engine = "vllm", engine_version = "0.32.0", '
    'model_revision = "1111111111111111111111111111111111111111", '
    'served_name = "m", hostname = "gpu-box-1", engine_python = "/opt/engine/bin/python" } }'
)
ROUTE = FIXTURES / "routing-change" / "operator-cancel-no-standing-failure.toml"

LAUNCH = 'ready = false, exit_code = 0, details = { stop_reason = "cancelled" }'
JOB_END = 'state = "cancelled", started_at'
CANCELLED_BY = 'cancelled_by = "SIGTERM to pid 4242", '
NOT_QUALIFIED = "NOT QUALIFIED — RUNTIME RELIABILITY"
RULE = "operator-stopped-before-ready"


def _variant(tmp_path: Path, source: Path, edits: list[tuple[str, str]], tail: str) -> Path:
    """The shipped fixture ``source`` with ``edits`` (each must apply), its expectations replaced by
    ``tail`` and its includes made absolute, written to ``tmp_path``."""
    text = source.read_text()
    text = text.replace('"../_shared/', f'"{source.parent.parent / "_shared"}/')
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    text = text[: text.index("\n[[verdicts]]")] + "\n" + tail
    out = tmp_path / source.name
    out.write_text(text)
    return out


def _run(path: Path) -> list[str]:
    result = run_fixture(path, POLICY_DIR, Path(tempfile.mkdtemp(prefix="fix46-")), init=Ledger.init)
    assert result.checks, path
    return result.failures


def _verdict(word: str, reason: str = "", rule: str = "") -> str:
    out = f'[[verdicts]]\nexpect.verdict = "{word}"\n'
    if reason:
        out += f'expect.reasons = {{ api-readiness = "{reason}" }}\n'
    if rule:
        out += f'expect.rejected = [{{ entry = "launch", rule = "{rule}" }}]\n'
    return out


def test_operator_cancel_during_engine_start_up_is_inconclusive_not_runtime_reliability() -> None:
    """The shipped fixture: INCONCLUSIVE (operator-stopped-before-ready); before the job's end is logged,
    NOT QUALIFIED."""
    failures = _run(QUAL)
    assert not failures, failures


def test_operator_cancel_is_no_standing_failure_against_routing() -> None:
    """The routing gate's no-standing-failure judges the cancelled campaign with the same acceptance rule."""
    failures = _run(ROUTE)
    assert not failures, failures


@pytest.mark.parametrize(
    ("label", "edits"),
    [
        # the job did not end cancelled: the launch's "cancelled" is its own claim
        ("job failed", [(JOB_END, 'state = "failed", started_at')]),
        ("job succeeded", [(JOB_END, 'state = "succeeded", started_at')]),
        # cancelled, but at no signal the job names (dropped or blank; a mistyped one is refused at ingest)
        ("cancelled_by dropped", [(CANCELLED_BY, "")]),
        ("cancelled_by blank", [(CANCELLED_BY, 'cancelled_by = " ", ')]),
        # the launch does not say the collector stopped it at the cancel
        ("stop reason finished", [(LAUNCH, LAUNCH.replace('"cancelled"', '"finished"'))]),
        ("stop reason exited", [(LAUNCH, LAUNCH.replace('"cancelled"', '"exited"'))]),
        ("stop reason misspelled", [(LAUNCH, LAUNCH.replace('"cancelled"', '"Cancelled"'))]),
        ("stop reason dropped", [(LAUNCH, "ready = false, exit_code = 0, details = { }")]),
        ("details dropped", [(LAUNCH, "ready = false, exit_code = 0")]),
        # the launch shows a failure of its own
        (
            "failure signature",
            [(LAUNCH, LAUNCH + ', failure_signature = "engine-died-before-readiness"')],
        ),
        ("crash signal", [(LAUNCH, LAUNCH.replace("exit_code = 0", "exit_code = -11, signal = 11"))]),
        ("crash status", [(LAUNCH, LAUNCH.replace("exit_code = 0", "exit_code = 134"))]),
        (
            "fault in its logs",
            [
                (
                    'text = "INFO loading weights\\n"',
                    'text = "vllm.v1.engine.exceptions.EngineDeadError: dead\\n"',
                )
            ],
        ),
        ("lease expired", [(LAUNCH, LAUNCH + ", lease_expired = true")]),
    ],
)
def test_a_launch_the_log_does_not_show_stopped_by_the_operator_still_fails_readiness(
    tmp_path: Path, label: str, edits: list[tuple[str, str]]
) -> None:
    failures = _run(_variant(tmp_path, QUAL, edits, _verdict(NOT_QUALIFIED)))
    assert not failures, (label, failures)


def test_a_job_killed_at_a_signal_it_names_is_an_operator_stop_too(tmp_path: Path) -> None:
    path = _variant(
        tmp_path,
        QUAL,
        [(JOB_END, 'state = "killed", started_at')],
        _verdict("INCONCLUSIVE", f"only rejected evidence: 1 {RULE}", RULE),
    )
    failures = _run(path)
    assert not failures, failures


def test_a_ready_launch_of_a_cancelled_job_stays_killed_run(tmp_path: Path) -> None:
    """After readiness the cancel was already INCONCLUSIVE (killed-run: not credited as passing)."""
    path = _variant(
        tmp_path,
        QUAL,
        [(LAUNCH, LAUNCH.replace("ready = false", 'ready = true, ready_endpoint = "/health"'))],
        _verdict("INCONCLUSIVE", "only rejected evidence: 1 killed-run", "killed-run"),
    )
    failures = _run(path)
    assert not failures, failures


def test_an_operator_stop_after_a_failed_launch_leaves_the_failure_standing(tmp_path: Path) -> None:
    """Only the launch the operator stopped is set aside: an earlier launch that failed start-up still
    fails api-readiness (an operator's cancel of the next attempt does not hide it)."""
    failed = (
        '[[entries]]\nname = "failed-launch"\nkind = "engine.launch"\nkey = "collector"\n'
        'at = "2026-09-10T10:00:19Z"\nrefs = { job = "campaign-job" }\n'
        'payload = { engine = "vllm", command = ["vllm", "serve", "/models/m"], attempt = 1, '
        'started_at = "2026-09-10T10:00:12Z", ended_at = "2026-09-10T10:00:18Z", ready = false, '
        'exit_code = 1, failure_signature = "engine-died-before-readiness", bindings = { engine = "vllm", '
        'engine_version = "0.32.0", model_revision = "1111111111111111111111111111111111111111", '
        'model_repo = "org/model", "shard:model.safetensors" = '
        '"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" } }\n\n'
    )
    path = _variant(
        tmp_path,
        QUAL,
        [('[[entries]]\nname = "launch"', failed + '[[entries]]\nname = "launch"')],
        _verdict(NOT_QUALIFIED, "no engine launch within the attempt budget", RULE),
    )
    failures = _run(path)
    assert not failures, failures


def test_a_campaign_whose_launch_claims_cancelled_in_a_failed_job_stands_against_routing(
    tmp_path: Path,
) -> None:
    path = _variant(
        tmp_path,
        ROUTE,
        [('state = "cancelled", started_at', 'state = "failed", started_at')],
        (
            '[[checks]]\nsubject = { backend = "vllm", model = "Qwen3-Embedding-8B", host = "gpu-box-1" }\n'
            'now = "2026-09-11T09:00:00Z"\nexpect.allowed = false\n'
            'expect.reasons = ["campaign vllm-embed-rerun of the same", '
            '"is NOT QUALIFIED — RUNTIME RELIABILITY"]\n'
            '[checks.deployment]\nhost = "gpu-box-1"\nservices = [{ name = "vllm-embed", engine = "vllm", '
            'model = "Qwen3-Embedding-8B", gpus = [2], gpu_memory_utilization = 0.25 }]\n'
        ),
    )
    failures = _run(path)
    assert not failures, failures


def test_another_job_cancelled_beside_the_launchs_own_failed_job_excuses_nothing(tmp_path: Path) -> None:
    """The launch names job campaign-1, which ended failed; a second job of the campaign, running at the
    same time, was cancelled at SIGTERM. Every job the launch belongs to must have ended at the operator's
    signal: the other job's cancel is not this launch's."""
    other = (
        '[[entries]]\nname = "other-job"\nkind = "job"\nkey = "collector"\nat = "2026-09-10T10:00:01Z"\n'
        'payload = { job_id = "campaign-2", state = "running", started_at = "2026-09-10T10:00:01Z", '
        f"lease_seconds = 3600.0, spec = {SPEC} }}\n\n"
        '[[entries]]\nname = "other-cancelled"\nkind = "job"\nkey = "collector"\n'
        'at = "2026-09-10T10:00:34Z"\n'
        'payload = { job_id = "campaign-2", state = "cancelled", ended_at = "2026-09-10T10:00:34Z", '
        'cancelled_by = "SIGTERM to pid 4243" }\n\n'
    )
    path = _variant(
        tmp_path,
        QUAL,
        [
            (JOB_END, 'state = "failed", started_at'),
            ('[[entries]]\nname = "host"', other + '[[entries]]\nname = "host"'),
        ],
        _verdict(NOT_QUALIFIED, "no engine launch within the attempt budget"),
    )
    failures = _run(path)
    assert not failures, failures


def test_a_launch_of_a_job_that_has_not_ended_is_no_operator_stop(tmp_path: Path) -> None:
    """The launch names a job that never ended; another job of the campaign, started later, ended at the
    operator's signal: the launch's own job says nothing of a cancel."""
    other = (
        '[[entries]]\nname = "other-job"\nkind = "job"\nkey = "collector"\nat = "2026-09-10T10:00:01Z"\n'
        'payload = { job_id = "campaign-2", state = "running", started_at = "2026-09-10T10:00:01Z", '
        f"lease_seconds = 3600.0, spec = {SPEC} }}\n\n"
    )
    path = _variant(
        tmp_path,
        QUAL,
        [
            ('job_id = "campaign-1", state = "cancelled"', 'job_id = "campaign-2", state = "cancelled"'),
            ('[[entries]]\nname = "host"', other + '[[entries]]\nname = "host"'),
        ],
        _verdict(NOT_QUALIFIED, "no engine launch within the attempt budget"),
    )
    failures = _run(path)
    assert not failures, failures
