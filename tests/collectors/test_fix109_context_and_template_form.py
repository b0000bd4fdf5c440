"""Fix 109 (audit 86 f4, f6): a probe the campaign's context cannot hold; the llamacpp template's form.

f4: with ``--n_ctx 128``, llama-cpp-python 0.3.36 answered the collector's structured probe (its prompt 111
tokens as the engine counts them, max_tokens 64) with HTTP 500 "could not broadcast input array from shape
(259,) into shape (0,)" — llama.cpp rounds the context up to 256, the server's own arrays keep 128 — and the
verdict blamed the engine (NOT QUALIFIED — RUNTIME RELIABILITY) for the campaign's context length. Now the
collector reads the context option the command gives (``context_length``); a probe whose ``max_tokens``
alone reaches it is refused at load (``_check_context``); where the engine answers a probe without a
completion, the probe asks the engine how many tokens its prompt is and records it
(``details.context``): a prompt plus max_tokens beyond the campaign's context is its configuration
(``ledger.answers.context_overflow``, read by ``refusal``: INCONCLUSIVE, engine-refused-probe).

f6: ``ledger campaign init --engine llamacpp`` wrote ``format = "json_schema"``, which llama-cpp-python
0.3.36 refuses; the template now asks ``json_object``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ledger.answers import REFUSAL_CONTEXT, context_overflow, context_record, refusal
from ledger.collectors.campaign import context_length, load_campaign, structured_schema
from ledger.collectors.campaign_init import TEMPLATES
from ledger.collectors.probe import probe_structured
from ledger.errors import ConfigError

from .conftest import ensure_engine, free_port

PARAMS: dict[str, Any] = {
    "refused_http_statuses": [401, 403],
    "context_refused_http_statuses": [400],
    "context_refusal_patterns": ["maximum context length is [0-9]+ tokens"],
    "request_form_refused_http_statuses": [400, 422, 500],
    "request_form_refusal_patterns": ["^[0-9]+ validation errors? .*response_format"],
}
BROADCAST = "HTTP 500: could not broadcast input array from shape (259,) into shape (0,)"


def _probe(**over: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "check": "structured",
        "ok": False,
        "http_status": 500,
        "error": BROADCAST,
        "max_tokens": 64,
        "details": {"format": "json_object", "context": context_record("--n_ctx", 128, 111)},
    }
    payload.update(over)
    return payload


# ---------------------------------------------------------------- the record: ledger.answers
def test_structured_probe_beyond_the_campaigns_context_is_a_context_refusal_not_a_runtime_fault() -> None:
    assert context_overflow(_probe()) == ("--n_ctx", 128, 111, 64)
    assert refusal(_probe(), PARAMS) == REFUSAL_CONTEXT


def test_probe_that_fits_the_context_and_fails_with_500_is_still_the_engines_failure() -> None:
    fits = _probe(details={"context": context_record("--n_ctx", 256, 111)})  # 111 + 64 ≤ 256
    assert context_overflow(fits) is None and refusal(fits, PARAMS) is None
    exact = _probe(details={"context": context_record("--n_ctx", 175, 111)})  # 111 + 64 = 175: fits
    assert refusal(exact, PARAMS) is None


@pytest.mark.parametrize(
    "details",
    [
        pytest.param({"format": "json_object"}, id="context-dropped"),
        pytest.param({"ctx": context_record("--n_ctx", 128, 111)}, id="context-renamed"),
        pytest.param({"context": context_record("--n_ctx", 128, None)}, id="prompt-not-counted"),
        pytest.param(
            {"context": {"option": "--n_ctx", "length": 128, "prompt_tokens": "111"}}, id="text-tokens"
        ),
        pytest.param(
            {"context": {"option": "--n_ctx", "length": True, "prompt_tokens": 111}}, id="bool-length"
        ),
        pytest.param(
            {"context": {"option": "--n_ctx", "length": 128.0, "prompt_tokens": 111}}, id="float-length"
        ),
        pytest.param({"context": {"option": "--n_ctx", "length": 0, "prompt_tokens": 111}}, id="zero-length"),
        pytest.param({"context": {"option": "--n_ctx", "length": 128, "prompt_tokens": -1}}, id="negative"),
        pytest.param({"context": {"length": 128, "prompt_tokens": 111}}, id="option-dropped"),
        pytest.param({"context": [128, 111]}, id="not-a-table"),
        pytest.param("context", id="details-not-a-table"),
    ],
)
def test_context_overflow_not_shown_by_the_record_excuses_nothing(details: Any) -> None:
    assert refusal(_probe(details=details), PARAMS) is None


@pytest.mark.parametrize(
    "over",
    [
        pytest.param({"max_tokens": None}, id="max-tokens-dropped"),
        pytest.param({"max_tokens": "64"}, id="max-tokens-text"),
        pytest.param({"http_status": 200}, id="answered"),
        pytest.param({"http_status": None}, id="no-answer"),
        pytest.param({"error": None}, id="error-dropped"),
        pytest.param({"check": "models"}, id="not-a-sized-request"),  # harness requests are sized (fix 114)
        pytest.param({"check": "sequential", "count": 3}, id="sequential-answered-before"),
    ],
)
def test_context_overflow_on_a_record_that_does_not_say_it_excuses_nothing(over: dict[str, Any]) -> None:
    assert refusal(_probe(**over), PARAMS) is None


def test_sequential_and_control_probes_beyond_the_context_are_refusals_too() -> None:
    assert refusal(_probe(check="sequential", count=0), PARAMS) == REFUSAL_CONTEXT
    assert refusal(_probe(check="completion", max_tokens=8, http_status=400, error="x"), {}) is None
    assert refusal(_probe(check="completion", max_tokens=20), PARAMS) == REFUSAL_CONTEXT


# ---------------------------------------------------------------- the command: context_length
PY = ["{python}", "-m", "llama_cpp.server", "--model", "{model}", "--port", "{port}"]
SERVER = ["llama-server", "-m", "{model}", "--port", "{port}"]
VLLM = ["vllm", "serve", "{model}", "--port", "{port}"]


@pytest.mark.parametrize(
    ("kind", "argv", "known"),
    [
        ("llamacpp", [*PY, "--n_ctx", "128"], ("--n_ctx", 128)),
        ("llamacpp", [*PY, "--n_ctx=128"], ("--n_ctx", 128)),
        ("llamacpp", [*PY, "--n_c", "96"], ("--n_c", 96)),  # argparse's prefix
        ("llamacpp", [*PY, "--n_ctx", "512", "--n_ctx", "128"], ("--n_ctx", 128)),  # the last one counts
        ("llamacpp", [*PY, "-c", "128"], None),  # llama-server's option: not llama_cpp.server's
        ("llamacpp", [*SERVER, "-c", "256"], ("-c", 256)),
        ("llamacpp", [*SERVER, "--ctx-size", "256"], ("--ctx-size", 256)),
        ("llamacpp", [*SERVER, "-c", "0"], None),  # 0: the model's own
        ("llamacpp", [*SERVER, "--n_ctx", "128"], None),
        ("vllm", [*VLLM, "--max-model-len", "2048"], ("--max-model-len", 2048)),
        ("vllm", [*VLLM, "--max-model-len", "1k"], None),  # read otherwise: not known here
        ("vllm", [*VLLM, "--max-model-len", "-1"], None),
        ("llamacpp", PY, None),
        ("llamacpp", ["taskset", "-c", "0-3", *SERVER], None),  # a launcher's -c is no engine option
        ("llamacpp", ["taskset", "-c", "0-3", *SERVER, "-c", "512"], ("-c", 512)),
    ],
)
def test_context_length_reads_the_programs_own_option(
    kind: str, argv: list[str], known: tuple[str, int] | None
) -> None:
    assert context_length(kind, argv) == known


# ---------------------------------------------------------------- load: _check_context
def _campaign(tmp_path: Path, n_ctx: str, gates: str = "") -> Path:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + b"\0" * 64)
    command = [*PY[:4], "{model}", "--model_alias", "{served_name}", "--host", "{host}", "--port", "{port}"]
    p = tmp_path / "c.toml"
    p.write_text(
        f'[campaign]\nid = "c"\n[model]\npath = "{model}"\nserved_name = "tiny"\n'
        f'[engine]\nkind = "llamacpp"\ncommand = {json.dumps([*command, "--n_ctx", n_ctx])}\n{gates}',
        encoding="utf-8",
    )
    return p


def test_probe_max_tokens_that_reaches_the_context_is_refused_at_load_naming_the_option(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigError) as e:
        load_campaign(_campaign(tmp_path, "64"))  # [gates.structured] max_tokens 64 by default
    assert "[gates.structured] max_tokens 64" in e.value.message and "--n_ctx 64" in e.value.message
    with pytest.raises(ConfigError) as e:
        load_campaign(_campaign(tmp_path, "16", "[gates.structured]\nenabled = false\n"))
    assert "[gates.sequential] max_tokens 16" in e.value.message


def test_context_that_holds_every_probes_max_tokens_loads(tmp_path: Path) -> None:
    load_campaign(_campaign(tmp_path, "65"))
    # a disabled gate sends nothing
    off = "[gates.structured]\nenabled = false\n[gates.sequential]\nenabled = false\n"
    load_campaign(_campaign(tmp_path, "9", off))


# ---------------------------------------------------------------- f6: the templates' structured form
def _template(name: str) -> dict[str, Any]:
    return tomllib.loads((TEMPLATES / name).read_text(encoding="utf-8"))


def test_llamacpp_template_asks_a_structured_form_llama_cpp_python_accepts() -> None:
    for path in sorted(TEMPLATES.glob("llamacpp-*.toml")):
        data = _template(path.name)
        assert "llama_cpp.server" in data["engine"]["command"]
        # llama-cpp-python 0.3.36 refuses json_schema (HTTP 500, a validation error naming response_format)
        assert data["gates"]["structured"]["format"] in ("auto", "json_object"), path.name


# ---------------------------------------------------------------- slow: the real llama-cpp-python
@pytest.fixture(scope="module")
def tiny_gguf() -> Path:
    path = Path(ensure_engine("trained")["TINY_TRAINED_GGUF"])
    if not path.is_file():
        pytest.skip("no tiny trained GGUF")
    return path


def _serve(python: str, model: Path, n_ctx: int) -> tuple[subprocess.Popen[str], str]:
    port = free_port()
    argv = [python, "-m", "llama_cpp.server", "--model", str(model), "--model_alias", "tiny"]
    proc = subprocess.Popen(
        [*argv, "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(n_ctx)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        assert proc.poll() is None, "llama.cpp server exited"
        try:
            if httpx.get(url + "/v1/models", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "llama.cpp server not ready in 120 s"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def engine(tiny_gguf: Path) -> Iterator[tuple[str, str]]:
    """(url at --n_ctx 128, url at --n_ctx 512): the same model."""
    python = ensure_engine("llamacpp")["LLAMACPP_PYTHON"]
    procs = []
    try:
        small, s_url = _serve(python, tiny_gguf, 128)
        procs.append(small)
        big, b_url = _serve(python, tiny_gguf, 512)
        procs.append(big)
        yield s_url, b_url
    finally:
        for proc in procs:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.mark.slow
def test_structured_probe_overflowing_n_ctx_records_its_size_and_is_the_campaigns_refusal(
    engine: tuple[str, str],
) -> None:
    small, _ = engine
    p = probe_structured(
        small,
        schema=structured_schema(),
        fmt="json_object",
        model="tiny",
        timeout=60,
        context=("--n_ctx", 128),
    )
    assert p["ok"] is False and p["http_status"] == 500, p
    ctx = p["details"]["context"]
    assert ctx["option"] == "--n_ctx" and ctx["length"] == 128
    assert type(ctx["prompt_tokens"]) is int and ctx["prompt_tokens"] + 64 > 128
    assert refusal(p, PARAMS) == REFUSAL_CONTEXT


@pytest.mark.slow
def test_each_llamacpp_templates_structured_form_passes_against_llama_cpp_python(
    engine: tuple[str, str],
) -> None:
    _, big = engine
    for path in sorted(TEMPLATES.glob("llamacpp-*.toml")):
        g = _template(path.name)["gates"]["structured"]
        p = probe_structured(
            big,
            schema=structured_schema(),
            fmt=g["format"],
            model="tiny",
            max_tokens=g["max_tokens"],
            timeout=60,
            context=("--n_ctx", 512),
        )
        assert p["ok"] is True, (path.name, p)
        assert "context" not in p["details"]  # answered: nothing to size


# ------------------------------------------------------------ fix112: control and sequential are sized too
def _engine_500(monkeypatch: pytest.MonkeyPatch) -> None:
    """An engine that fails every request asking more than 1 token with llama-cpp-python's 500, and
    answers the sizing request (max_tokens 1) with its usage."""

    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if body.get("max_tokens") == 1:
            usage = {"prompt_tokens": 111, "completion_tokens": 1, "total_tokens": 112}
            choice = {"index": 0, "message": {"role": "assistant", "content": "R"}, "finish_reason": "length"}
            return httpx.Response(200, json={"choices": [choice], "usage": usage})
        return httpx.Response(500, json={"error": {"message": "could not broadcast input array"}})

    import ledger.collectors.probe as probe_module

    monkeypatch.setattr(
        probe_module, "http_client", lambda timeout=5.0: httpx.Client(transport=httpx.MockTransport(handle))
    )


def test_control_probe_beyond_the_context_records_its_size(monkeypatch: pytest.MonkeyPatch) -> None:
    from ledger.collectors.probe import probe_completion

    _engine_500(monkeypatch)
    p = probe_completion("http://engine", max_tokens=64, context=("--n_ctx", 128))
    assert p["details"]["context"] == context_record("--n_ctx", 128, 111)
    assert refusal(p, PARAMS) == REFUSAL_CONTEXT
    assert "context" not in probe_completion("http://engine", max_tokens=64)["details"]  # not asked: unsized


def test_sequential_probe_whose_first_request_overflows_records_its_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ledger.collectors.probe import probe_sequential

    _engine_500(monkeypatch)
    p = probe_sequential("http://engine", count=3, max_tokens=64, context=("--n_ctx", 128))
    assert p["count"] == 0
    assert p["details"]["context"] == context_record("--n_ctx", 128, 111)
    assert refusal(p, PARAMS) == REFUSAL_CONTEXT
