"""An engine that refuses the campaign's settings by their validation is the campaign's error (audit76 f4).

llama-cpp-python started with ``--n_ctx -5`` prints pydantic's "1 validation error for ModelSettings" and its
usage and exits 1; vLLM with ``--gpu-memory-utilization 1.5`` raises "pydantic_core._pydantic_core.
ValidationError: 1 validation error for CacheConfig" and exits 1. Both landed on the status-only fall-back
``engine-died-before-readiness`` (class startup) → NOT QUALIFIED — RUNTIME RELIABILITY, while the same mistake
refused by argparse (``--n_ctx abc``, exit 2) is ``engine-refused-arguments`` (class config) → INCONCLUSIVE.
Now ``engine-refused-settings`` (class config) names it: pydantic's own first line at a line's start, naming
a settings or configuration model, with exit status 1 before readiness. A graver line beside it still decides;
after readiness, a ValidationError in a traceback is the engine's runtime failure.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from ledger.policy.fixtures import run_fixture
from ledger.service import Ledger
from ledger.signatures import RunOutcome, classify, classify_logs, load_signatures, pattern_signatures
from tests.policy.test_fail_closed import _with_log, qualified_entries, verdict_of

REPO = Path(__file__).resolve().parents[1]
POLICY_DIR = REPO / "policies"
READINESS = POLICY_DIR / "fixtures" / "backend-qualification" / "readiness-refused.toml"
RUNTIME = "NOT QUALIFIED — RUNTIME RELIABILITY"

# llama-cpp-python 0.3's server (``print(e, file=sys.stderr)``; the usage goes to stdout)
LLAMA_STDERR = (
    "1 validation error for ModelSettings\n"
    "n_ctx\n"
    "  Input should be greater than or equal to 0 [type=greater_than_equal, input_value=-5, input_type=int]\n"
    "    For further information visit https://errors.pydantic.dev/2.14/v/greater_than_equal\n"
)
LLAMA_STDOUT = (
    "usage: __main__.py [-h] [--model MODEL] [--n_ctx N_CTX]\n\noptions:\n  -h, --help  show this help\n"
)
# vLLM 0.32's API server (an uncaught exception: the traceback, exit 1)
VLLM_STDERR = (
    "Traceback (most recent call last):\n"
    '  File "/venv/vllm/engine/arg_utils.py", line 2265, in create_engine_config\n'
    "    cache_config = CacheConfig(\n"
    '  File "/venv/pydantic/_internal/_dataclasses.py", line 121, in __init__\n'
    "    s.__pydantic_validator__.validate_python(ArgsKwargs(args, kwargs), self_instance=s)\n"
    "pydantic_core._pydantic_core.ValidationError: 1 validation error for CacheConfig\n"
    "gpu_memory_utilization\n"
    "  Input should be less than or equal to 1 [type=less_than_equal, input_value=1.5, input_type=float]\n"
    "    For further information visit https://errors.pydantic.dev/2.14/v/less_than_equal\n"
)
LLAMA_LINE = "1 validation error for ModelSettings"
VLLM_LINE = "pydantic_core._pydantic_core.ValidationError: 1 validation error for CacheConfig"
REFUSED = RunOutcome(ready=False, exit_code=1)


def _sig(text: str, outcome: RunOutcome = REFUSED) -> tuple[str | None, str | None, str | None]:
    got = classify(text, outcome, load_signatures())
    return got.signature, got.failure_class, got.detail


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (LLAMA_STDOUT + "\n" + LLAMA_STDERR, LLAMA_LINE),  # the collector joins stdout and stderr
        ("INFO loading\n" + VLLM_STDERR, VLLM_LINE),
    ],
    ids=["llama-cpp-python-n_ctx", "vllm-gpu-memory-utilization"],
)
def test_settings_refused_by_pydantic_exit_1_before_readiness_is_the_campaigns_config(
    text: str, line: str
) -> None:
    assert _sig(text) == ("engine-refused-settings", "config", line)
    got = classify(text, REFUSED, load_signatures())
    assert "engine-died-before-readiness" in got.matched  # the fall-back matched too: the log line decides
    # in pieces, as the policy reads stored logs
    pieces = classify_logs(text.splitlines(keepends=True), REFUSED, load_signatures())
    assert (pieces.signature, pieces.failure_class) == ("engine-refused-settings", "config")


@pytest.mark.parametrize(
    "line",
    [
        "2 validation errors for ModelSettings",
        "1 validation error for ServerSettings",
        "1 validation error for Settings",
        "1 validation error for ConfigFileSettings",
        "1 validation error for VllmConfig",
        "1 validation error for ModelConfig",
        "1 validation error for EngineArgs",
        "pydantic.ValidationError: 1 validation error for ParallelConfig",
        "pydantic_core._pydantic_core.ValidationError: 3 validation errors for SchedulerConfig",
        "1 validation error for ModelSettings\r",  # vLLM's formatter ends continuation lines with \r
    ],
)
def test_pydantic_first_line_shapes_that_name_a_settings_model(line: str) -> None:
    assert _sig(f"{line}\nfield\n  Input should be …\n")[:2] == ("engine-refused-settings", "config")


@pytest.mark.parametrize(
    "line",
    [
        # a request's model, not the engine's settings
        "1 validation error for ChatCompletionRequest",
        # a logger's record (a caught error in a process of the engine), not the uncaught refusal
        "(EngineCore_DP0 pid=1) ERROR 12-06 17:32:44 [core.py:1] "
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for VllmConfig",
        "ERROR: 1 validation error for ModelSettings",
        # quoted, or followed by more words
        "RuntimeError: '1 validation error for ModelSettings'",
        "1 validation error for ModelSettings and then some",
        # misspelled, another case, no count
        "1 validation eror for ModelSettings",
        "1 Validation error for ModelSettings",
        "validation error for ModelSettings",
        "1 validation error for modelsettings",
        "pydantic_core.ValidationError: 1 validation error for CacheConfig",
    ],
)
def test_lines_that_are_not_pydantics_refusal_of_the_settings_fall_back(line: str) -> None:
    assert _sig(f"{line}\n")[:2] == ("engine-died-before-readiness", "startup")


@pytest.mark.parametrize(
    ("outcome", "signature", "cls"),
    [
        # another exit status before readiness: not the refusal's (argparse's 2 needs its own line)
        (RunOutcome(ready=False, exit_code=2), "engine-died-before-readiness", "startup"),
        (RunOutcome(ready=False, exit_code=0), "engine-died-before-readiness", "startup"),
        (RunOutcome(ready=False, exit_code=139), "crash-exit-status-at-startup", "startup"),
        (RunOutcome(ready=False, signal=6), "abort-at-startup", "startup"),
        (RunOutcome(ready=False, signal=9), "killed-sigkill", "resource"),
        (RunOutcome(ready=False, exit_code=1, lease_expired=True), "lease-expired", "lease"),
        # after readiness: the engine's runtime failure, whatever its traceback holds
        (RunOutcome(ready=True, exit_code=1), "engine-exited-after-readiness", "runtime-fault"),
        (
            RunOutcome(ready=True, exit_code=1, request_failed=True),
            "engine-exited-after-readiness",
            "runtime-fault",
        ),
    ],
)
def test_the_refusal_is_exit_status_1_before_readiness_only(
    outcome: RunOutcome, signature: str, cls: str
) -> None:
    got = classify(VLLM_STDERR, outcome, load_signatures())
    assert (got.signature, got.failure_class) == (signature, cls)
    assert "engine-refused-settings" not in got.matched


def test_a_validation_error_in_a_traceback_after_readiness_is_no_excuse() -> None:
    """A ready engine whose request handling raised a ValidationError naming a Config and then exited 1:
    a runtime failure (ready = false is the signature's condition)."""
    text = "INFO ready\nINFO serving\n" + VLLM_STDERR.replace("CacheConfig", "VllmConfig")
    assert _sig(text, RunOutcome(ready=True, exit_code=1))[:2] == (
        "engine-exited-after-readiness",
        "runtime-fault",
    )
    assert classify_logs([text], RunOutcome(ready=True), pattern_signatures()).signature is None


@pytest.mark.parametrize(
    ("graver", "signature", "cls"),
    [
        ("Segmentation fault (core dumped)", "segfault-at-startup", "startup"),
        (
            "Value error, Invalid repository ID or local directory specified: '/m'. Please verify: "
            "ensure the presence of a 'config.json'",
            "model-files-corrupt",
            "startup",
        ),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "cuda-oom", "resource"),
        ("HW Exception by GPU node-1 (Agent handle: 0x1) reason :GPU Hang", "gpu-hang", "gpu-fault"),
    ],
)
def test_a_graver_line_beside_the_refusal_still_decides(graver: str, signature: str, cls: str) -> None:
    for text in (f"{graver}\n{VLLM_STDERR}", f"{VLLM_STDERR}{graver}\n"):
        got = classify(text, REFUSED, load_signatures())
        assert (got.signature, got.failure_class) == (signature, cls), text
        assert "engine-refused-settings" in got.matched


def test_the_refusal_echoed_in_a_request_log_is_not_read() -> None:
    echo = (
        "(APIServer pid=1) DEBUG 12-06 17:35:54 [entrypoints/.../utils/request_logger.py:55] Request x "
        "details: prompt: 'hi\r\n"
        "(APIServer pid=1) DEBUG 12-06 17:35:54 [entrypoints/.../utils/request_logger.py:55] "
        "1 validation error for ModelSettings\r\n"
    )
    assert _sig(echo)[:2] == ("engine-died-before-readiness", "startup")


def test_the_signature_is_listed_before_the_status_only_fall_backs_with_the_config_class() -> None:
    sigs = load_signatures()
    ids = [s.id for s in sigs]
    me = sigs[ids.index("engine-refused-settings")]
    assert (me.failure_class.value, me.exit_codes, me.ready) == ("config", (1,), False)
    assert ids.index("engine-refused-settings") < min(i for i, s in enumerate(sigs) if not s.patterns)


# --- the policy engine -------------------------------------------------------------------------------------


def _policy_dir() -> Path:
    """The shipped policies with /tmp/fix89/other.md's change to ``params.config_exit_codes`` (exit status 1
    is a settings refusal's) where the shipped file still lacks it: the change the verdict needs, kept in
    step with the signatures by tests/collectors/test_fix52_vllm_startup_mistakes.py's check of the codes."""
    out = Path(tempfile.mkdtemp(prefix="fix89-policies-")) / "policies"
    shutil.copytree(POLICY_DIR, out)
    p = out / "evidence-acceptance.toml"
    text = p.read_text()
    text = text.replace("config_exit_codes = [0, 2] ", "config_exit_codes = [0, 1, 2] ", 1)
    p.write_text(text)
    return out


LAUNCH = (
    'ready = false, exit_code = 0, failure_signature = "readiness-refused", '
    'failure_detail = "ledger-collector: '
    "the engine refused the collector's readiness requests: /v1/models: HTTP 401 Invalid API key\""
)
LOG = (
    'artifacts = [{ name = "stderr.log", text = "INFO loading weights\\nledger-collector: '
    "the engine refused the collector's readiness requests: /v1/models: HTTP 401 Invalid API key\\n\" }]"
)


def _toml_text(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _run(tmp_path: Path, launch: str, log: str, verdict: str, rule: str | None = None) -> list[str]:
    """The first launch of the shipped readiness-refused fixture, recorded as ``launch`` with ``log``."""
    text = READINESS.read_text()
    assert text.count(LAUNCH) == 2 and text.count(LOG) == 1, "the shipped fixture changed"
    text = text[: text.index('\n[[entries]]\nname = "launch-segfault"')]
    text = text.replace(LAUNCH, launch).replace(
        LOG, f'artifacts = [{{ name = "stderr.log", text = "{log}" }}]'
    )
    text += f'\n[[verdicts]]\nafter = "launch"\nexpect.verdict = "{verdict}"\n'
    if rule is not None:
        text += f'expect.rejected = [{{ entry = "launch", rule = "{rule}" }}]\n'
    path = tmp_path / "f4.toml"
    path.write_text(text)
    result = run_fixture(path, _policy_dir(), Path(tempfile.mkdtemp(prefix="fix89-")), init=Ledger.init)
    assert result.checks
    return result.failures


REFUSED_SETTINGS = (
    'ready = false, exit_code = 1, failure_signature = "engine-refused-settings", '
    f'failure_detail = "{VLLM_LINE}"'
)


@pytest.mark.parametrize("stderr", [LLAMA_STDERR, VLLM_STDERR], ids=["llama-cpp-python", "vllm"])
def test_the_policy_judges_a_settings_refusal_inconclusive_as_the_campaigns_config(
    tmp_path: Path, stderr: str
) -> None:
    failures = _run(tmp_path, REFUSED_SETTINGS, _toml_text(stderr), "INCONCLUSIVE", "campaign-config-error")
    assert not failures, failures


@pytest.mark.parametrize(
    ("label", "launch", "log"),
    [
        # a graver line in its logs
        ("segfault beside", REFUSED_SETTINGS, _toml_text(VLLM_STDERR + "Segmentation fault (core dumped)\n")),
        # a crash status, not the refusal's
        ("exit 139", REFUSED_SETTINGS.replace("exit_code = 1", "exit_code = 139"), _toml_text(VLLM_STDERR)),
        ("SIGSEGV", REFUSED_SETTINGS.replace("exit_code = 1", "signal = 11"), _toml_text(VLLM_STDERR)),
        # the signature claimed, its line absent from the stored log and from the detail (the policy reads
        # failure_detail as a log line too)
        (
            "line absent",
            REFUSED_SETTINGS.replace(VLLM_LINE, "RuntimeError: boom"),
            _toml_text("INFO loading weights\nRuntimeError: boom\n"),
        ),
        # the signature dropped or misspelled: fail closed
        (
            "signature dropped",
            REFUSED_SETTINGS.replace('failure_signature = "engine-refused-settings", ', ""),
            _toml_text(VLLM_STDERR),
        ),
        (
            "signature misspelled",
            REFUSED_SETTINGS.replace("engine-refused-settings", "engine-refused-setings"),
            _toml_text(VLLM_STDERR),
        ),
    ],
)
def test_the_policy_neighbours_of_a_settings_refusal_count_against_the_engine(
    tmp_path: Path, label: str, launch: str, log: str
) -> None:
    failures = _run(tmp_path, launch, log, RUNTIME)
    assert not failures, (label, failures)


def test_the_policy_fails_runtime_stability_on_a_validation_error_after_readiness(tmp_path: Path) -> None:
    es = qualified_entries()
    _with_log(es, "INFO serving\n" + VLLM_STDERR, exit_code=1)
    v = verdict_of(tmp_path, es, policy_dir=_policy_dir())
    assert v["verdict"] == RUNTIME, v["gates"]
