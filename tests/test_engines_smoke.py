"""Smoke tests for the engines used by tests and the demo.

Fast: the tiny GGUF generator and the fault-injection engine (tests/engines/fault_engine.py).
Slow (@pytest.mark.slow): real llama.cpp (llama-cpp-python's server) on the tiny GGUF, and real
vLLM CPU on the tiny HF Llama; their virtualenvs come from scripts/engines.sh (cached outside the
repo). Outside CI a failed engine build skips those tests; under CI it fails them.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
FAULT_ENGINE = REPO / "tests" / "engines" / "fault_engine.py"
ENGINES_SH = REPO / "scripts" / "engines.sh"


# ------------------------------------------------------------------------------------ helpers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def http(method: str, url: str, body: dict[str, Any] | None = None, timeout: float = 5.0) -> tuple[int, Any]:
    """(status, parsed JSON or text); status 0 when nothing answered (closed port, reset)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw, status = r.read(), r.status
    except urllib.error.HTTPError as e:
        raw, status = e.read(), e.code
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return 0, None
    try:
        return status, json.loads(raw or b"null")
    except ValueError:
        return status, raw.decode(errors="replace")


@dataclass
class Proc:
    popen: subprocess.Popen[bytes]
    log: Path
    port: int

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_until(self, path: str, want: int = 200, timeout: float = 30.0) -> float:
        """Poll GET path until it answers `want`; return seconds waited. Fails if the process exits."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.popen.poll() is not None:
                pytest.fail(
                    f"engine exited {self.popen.returncode} before {path} answered:\n{self.text()[-4000:]}"
                )
            status, _ = http("GET", self.base + path, timeout=2)
            if status == want:
                return time.monotonic() - t0
            time.sleep(0.1)
        pytest.fail(f"{path} did not answer {want} within {timeout} s:\n{self.text()[-4000:]}")

    def stop(self) -> None:
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, signal.SIGTERM)
                self.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(timeout=15)
            except ProcessLookupError:
                pass


def launch(cmd: list[str], log: Path, port: int, env: dict[str, str] | None = None) -> Proc:
    fh = log.open("wb")
    popen = subprocess.Popen(
        cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True, env={**os.environ, **(env or {})}
    )
    fh.close()
    return Proc(popen, log, port)


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    started: list[Proc] = []
    yield started
    for p in started:
        p.stop()


def fault(procs: list[Proc], tmp_path: Path, mode: str, *extra: str) -> Proc:
    port = free_port()
    p = launch(
        [sys.executable, str(FAULT_ENGINE), "--port", str(port), "--mode", mode, *extra],
        tmp_path / f"fault-{mode}-{port}.log",
        port,
    )
    procs.append(p)
    return p


# ------------------------------------------------------------------------------- tiny GGUF


def test_tiny_gguf_is_small_deterministic_and_llama(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")
    from ledger.collectors.engines.tiny_gguf import write_tiny_gguf

    a = write_tiny_gguf(tmp_path / "a.gguf", seed=0)
    b = write_tiny_gguf(tmp_path / "b.gguf", seed=0)
    c = write_tiny_gguf(tmp_path / "c.gguf", seed=1)
    assert 400_000 < a.stat().st_size < 600_000
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()

    reader = gguf.GGUFReader(str(a))

    def field(name: str) -> Any:
        return reader.fields[name].contents()

    assert field("general.architecture") == "llama"
    assert field("llama.embedding_length") == 64
    assert field("llama.block_count") == 2
    assert field("llama.feed_forward_length") == 128
    assert field("llama.attention.head_count") == 4
    tokens = field("tokenizer.ggml.tokens")
    types = field("tokenizer.ggml.token_type")
    assert len(tokens) == 259
    assert tokens[:3] == ["<unk>", "<s>", "</s>"]
    assert tokens[3] == "<0x00>" and tokens[-1] == "<0xFF>"
    assert set(types[3:]) == {6}
    assert "add_generation_prompt" in field("tokenizer.chat_template")
    names = {t.name for t in reader.tensors}
    assert {"token_embd.weight", "output.weight", "blk.1.ffn_down.weight"} <= names
    assert len(reader.tensors) == 2 + 1 + 2 * 9


def test_tiny_gguf_cli(tmp_path: Path) -> None:
    pytest.importorskip("gguf")
    out = tmp_path / "m" / "tiny.gguf"
    r = subprocess.run(
        [sys.executable, "-m", "ledger.collectors.engines.tiny_gguf", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert out.is_file() and str(out) in r.stdout


# --------------------------------------------------------------------------- fault engine


def test_fault_ok_serves_ready_and_json_schema(procs: list[Proc], tmp_path: Path) -> None:
    p = fault(procs, tmp_path, "ok", "--load-seconds", "0.3", "--model-id", "m1")
    p.wait_until("/health")
    assert http("GET", p.base + "/v1/models")[1]["data"][0]["id"] == "m1"
    assert http("GET", p.base + "/is_sleeping")[1] == {"is_sleeping": False}
    msgs = [{"role": "user", "content": "Reply READY"}]
    status, body = http("POST", p.base + "/v1/chat/completions", {"messages": msgs, "max_tokens": 4})
    assert status == 200 and body["choices"][0]["message"]["content"] == "READY"
    schema = {
        "type": "object",
        "properties": {
            "status": {"type": "string", "enum": ["READY"]},
            "n": {"type": "integer", "minimum": 3},
        },
        "required": ["status", "n"],
    }
    rf = {"type": "json_schema", "json_schema": {"name": "ctl", "schema": schema}}
    status, body = http("POST", p.base + "/v1/chat/completions", {"messages": msgs, "response_format": rf})
    assert status == 200
    assert json.loads(body["choices"][0]["message"]["content"]) == {"status": "READY", "n": 3}
    assert "Application startup complete." in p.text()


def test_fault_vllm_flavor_port_closed_until_ready(procs: list[Proc], tmp_path: Path) -> None:
    p = fault(procs, tmp_path, "ok", "--load-seconds", "1.5")
    time.sleep(0.4)
    assert p.popen.poll() is None
    assert not port_open(p.port)
    p.wait_until("/health", timeout=20)
    assert "Loading weights took" in p.text()


def test_fault_llamacpp_flavor_503_loading_then_200(procs: list[Proc], tmp_path: Path) -> None:
    p = fault(procs, tmp_path, "ok", "--flavor", "llamacpp", "--load-seconds", "3")
    p.wait_until("/health", want=503, timeout=10)
    status, body = http("GET", p.base + "/health")
    if status == 503:
        assert body["error"]["message"] == "Loading model"
    p.wait_until("/health", timeout=20)
    assert http("GET", p.base + "/health") == (200, {"status": "ok"})
    assert "server is listening" in p.text()


def test_fault_llamacpp_python_flavor_no_health(procs: list[Proc], tmp_path: Path) -> None:
    p = fault(procs, tmp_path, "ok", "--flavor", "llamacpp-python", "--load-seconds", "1.0")
    time.sleep(0.3)
    assert not port_open(p.port)
    p.wait_until("/v1/models", timeout=20)
    assert http("GET", p.base + "/health")[0] == 404
    assert "Uvicorn running on" in p.text()


def test_fault_sglang_flavor_503_while_warming_up_then_200(procs: list[Proc], tmp_path: Path) -> None:
    p = fault(procs, tmp_path, "ok", "--flavor", "sglang", "--load-seconds", "2")
    p.wait_until("/health", want=503, timeout=15)
    status, _ = http("GET", p.base + "/health")
    if status == 503:  # still warming up: the model list already answers, /health does not
        assert http("GET", p.base + "/v1/models")[0] == 200
    p.wait_until("/health", timeout=20)
    assert http("GET", p.base + "/health_generate")[0] == 200
    assert http("GET", p.base + "/is_sleeping")[0] == 404
    out = p.text()
    assert "Load weight end. elapsed=2.00 s" in out
    assert out.index("Uvicorn running on") < out.index("The server is fired up and ready to roll!")


@pytest.mark.parametrize(
    ("mode", "needles"),
    [
        ("uva", ["RuntimeError: UVA is not available", "Engine core initialization failed"]),
        (
            "marlin",
            [
                "Loading weights took 93.66 seconds",
                "Model loading took 12.0 GiB memory",
                "gptq_marlin_repack",
                "RuntimeError",
            ],
        ),
        ("die", ["Loading weights took"]),
    ],
)
def test_fault_dies_before_listening(
    procs: list[Proc], tmp_path: Path, mode: str, needles: list[str]
) -> None:
    p = fault(procs, tmp_path, mode, "--load-seconds", "0.2")
    rc = p.popen.wait(timeout=30)
    assert rc == 1
    assert not port_open(p.port)
    out = p.text()
    for n in needles:
        assert n in out
    if mode == "die":
        assert "Error" not in out and "Traceback" not in out


def test_fault_die_exit_code(procs: list[Proc], tmp_path: Path) -> None:
    p = fault(procs, tmp_path, "die", "--load-seconds", "0", "--exit-code", "137")
    assert p.popen.wait(timeout=30) == 137


def test_fault_abort_on_first_request(procs: list[Proc], tmp_path: Path) -> None:
    p = fault(procs, tmp_path, "abort", "--load-seconds", "0.2")
    p.wait_until("/health")
    assert http("GET", p.base + "/v1/models")[0] == 200
    status, _ = http("POST", p.base + "/v1/chat/completions", {"messages": [], "max_tokens": 1}, timeout=10)
    assert status == 0
    assert p.popen.wait(timeout=10) == -signal.SIGABRT
    out = p.text()
    assert "HW Exception by GPU node-1" in out and "reason :GPU Hang" in out


def test_fault_hang_never_ready(procs: list[Proc], tmp_path: Path) -> None:
    p = fault(procs, tmp_path, "hang", "--load-seconds", "0.2")
    time.sleep(1.5)
    assert p.popen.poll() is None
    assert not port_open(p.port)
    q = fault(procs, tmp_path, "hang", "--flavor", "llamacpp", "--load-seconds", "0.2")
    q.wait_until("/health", want=503, timeout=10)
    time.sleep(1.0)
    assert http("GET", q.base + "/health")[0] == 503


def test_fault_sleeping_health_200_but_asleep(procs: list[Proc], tmp_path: Path) -> None:
    p = fault(procs, tmp_path, "sleeping", "--load-seconds", "0.2")
    p.wait_until("/health")
    assert http("GET", p.base + "/is_sleeping") == (200, {"is_sleeping": True})
    body = {"messages": [{"role": "user", "content": "hi"}]}
    assert http("POST", p.base + "/v1/chat/completions", body, timeout=1.0)[0] == 0  # hangs
    assert http("POST", p.base + "/wake_up")[0] == 200
    assert http("GET", p.base + "/is_sleeping")[1] == {"is_sleeping": False}
    assert http("POST", p.base + "/v1/chat/completions", body)[0] == 200


def test_fault_sleeping_503_variant(procs: list[Proc], tmp_path: Path) -> None:
    p = fault(procs, tmp_path, "sleeping", "--load-seconds", "0.1", "--sleeping-503")
    p.wait_until("/health")
    assert http("POST", p.base + "/v1/chat/completions", {"messages": []})[0] == 503


def test_fault_sigterm_and_process_group(procs: list[Proc], tmp_path: Path) -> None:
    p = fault(procs, tmp_path, "ok", "--load-seconds", "0.1", "--child", "--ignore-sigterm")
    p.wait_until("/health")
    os.killpg(p.popen.pid, signal.SIGTERM)
    time.sleep(0.5)
    assert p.popen.poll() is None  # ignored
    os.killpg(p.popen.pid, signal.SIGKILL)
    assert p.popen.wait(timeout=10) == -signal.SIGKILL
    q = fault(procs, tmp_path, "ok", "--load-seconds", "0.1")
    q.wait_until("/health")
    os.killpg(q.popen.pid, signal.SIGTERM)
    assert q.popen.wait(timeout=10) == 0
    assert "Shutting down" in q.text()


# ------------------------------------------------------------------------- real engines


def _engines(which: str) -> dict[str, str]:
    """Run scripts/engines.sh WHICH (cached) and return its KEY=VALUE lines."""
    try:
        r = subprocess.run(
            ["bash", str(ENGINES_SH), which], capture_output=True, text=True, timeout=3600, check=False
        )
        ok, detail = r.returncode == 0, r.stderr[-4000:]
    except (OSError, subprocess.TimeoutExpired) as e:
        ok, detail, r = False, repr(e), None
    if not ok or r is None:
        msg = f"scripts/engines.sh {which} failed:\n{detail}"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)


@pytest.fixture(scope="session")
def llamacpp_engine() -> dict[str, str]:
    return _engines("llamacpp")


@pytest.fixture(scope="session")
def vllm_engine() -> dict[str, str]:
    return _engines("vllm")


@pytest.mark.slow
def test_llamacpp_server_on_tiny_gguf(
    llamacpp_engine: dict[str, str], procs: list[Proc], tmp_path: Path
) -> None:
    port = free_port()
    model = llamacpp_engine["TINY_GGUF"]
    cmd = [
        llamacpp_engine["LLAMACPP_PYTHON"],
        "-m",
        "llama_cpp.server",
        "--model",
        model,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        "512",
        "--n_threads",
        "2",
    ]
    p = launch(cmd, tmp_path / "llamacpp.log", port)
    procs.append(p)
    p.wait_until("/v1/models", timeout=120)
    # llama-cpp-python's own server has no /health (the C++ llama-server has)
    assert http("GET", p.base + "/health")[0] == 404
    status, models = http("GET", p.base + "/v1/models")
    assert status == 200 and models["data"][0]["id"]

    msgs = [{"role": "user", "content": "Reply with the single word READY."}]
    status, body = http(
        "POST",
        p.base + "/v1/chat/completions",
        {"messages": msgs, "max_tokens": 8, "temperature": 0},
        timeout=60,
    )
    assert status == 200, body
    assert isinstance(body["choices"][0]["message"]["content"], str)

    schema = {
        "type": "object",
        "properties": {"status": {"type": "string", "enum": ["READY"]}},
        "required": ["status"],
    }
    status, body = http(
        "POST",
        p.base + "/v1/chat/completions",
        {
            "messages": msgs,
            "max_tokens": 32,
            "temperature": 0,
            "response_format": {"type": "json_object", "schema": schema},
        },
        timeout=60,
    )
    assert status == 200, body
    assert json.loads(body["choices"][0]["message"]["content"]) == {"status": "READY"}


# A random model pads constrained JSON with whitespace until max_tokens; without whitespace
# (xgrammar only) the structured-output control completes.
NO_WS = ["--structured-outputs-config", '{"backend": "xgrammar", "disable_any_whitespace": true}']


def _vllm(
    engine: dict[str, str], model: str, port: int, util: str, log: Path, extra: list[str] | None = None
) -> Proc:
    cmd = [
        engine["VLLM_PYTHON"],
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        model,
        "--max-model-len",
        "256",
        "--dtype",
        "float32",
        "--gpu-memory-utilization",
        util,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *(extra or []),
    ]
    return launch(cmd, log, port, env={"VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"})


@pytest.mark.slow
def test_vllm_cpu_serves_tiny_llama(vllm_engine: dict[str, str], procs: list[Proc], tmp_path: Path) -> None:
    port = free_port()
    p = _vllm(vllm_engine, vllm_engine["TINY_LLAMA_HD64"], port, "0.2", tmp_path / "vllm.log", NO_WS)
    procs.append(p)
    p.wait_until("/health", timeout=300)
    status, models = http("GET", p.base + "/v1/models")
    assert status == 200 and models["data"][0]["id"] == vllm_engine["TINY_LLAMA_HD64"]
    msgs = [{"role": "user", "content": "Reply with the single word READY."}]
    status, body = http(
        "POST",
        p.base + "/v1/chat/completions",
        {"model": models["data"][0]["id"], "messages": msgs, "max_tokens": 8},
        timeout=120,
    )
    assert status == 200, body
    assert isinstance(body["choices"][0]["message"]["content"], str)

    schema = {
        "type": "object",
        "properties": {"status": {"type": "string", "enum": ["READY"]}},
        "required": ["status"],
        "additionalProperties": False,
    }
    rf = {"type": "json_schema", "json_schema": {"name": "ctl", "schema": schema}}
    status, body = http(
        "POST",
        p.base + "/v1/chat/completions",
        {"model": models["data"][0]["id"], "messages": msgs, "max_tokens": 40, "response_format": rf},
        timeout=120,
    )
    assert status == 200, body
    assert json.loads(body["choices"][0]["message"]["content"]) == {"status": "READY"}


@pytest.mark.slow
def test_vllm_cpu_head_dim16_dies_on_first_request(
    vllm_engine: dict[str, str], procs: list[Proc], tmp_path: Path
) -> None:
    port = free_port()
    p = _vllm(vllm_engine, vllm_engine["TINY_LLAMA_HD16"], port, "0.2", tmp_path / "vllm-hd16.log")
    procs.append(p)
    p.wait_until("/health", timeout=300)  # it does get ready
    msgs = [{"role": "user", "content": "Reply with the single word READY."}]
    status, body = http(
        "POST",
        p.base + "/v1/chat/completions",
        {"model": vllm_engine["TINY_LLAMA_HD16"], "messages": msgs, "max_tokens": 8},
        timeout=120,
    )
    assert status == 500, body
    p.popen.wait(timeout=60)  # the API server then shuts itself down
    out = p.text()
    assert "Unsupported CPU attention configuration: head_dim=16" in out
    assert "EngineDeadError" in out
