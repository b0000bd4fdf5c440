#!/usr/bin/env python3
# ruff: noqa: E501  (log lines are quoted whole, as the real engines print them)
"""Scriptable fault-injection inference "engine" for tests (standard library only).

    python fault_engine.py --port N --mode MODE [--flavor vllm|llamacpp|llamacpp-python|sglang] [--load-seconds S]

It imitates the process-level behaviour and log lines of a real engine and reproduces the seed
failure modes:

  ok        healthy: /health, /v1/models, /v1/chat/completions (replies --reply, default READY;
            honours response_format json_schema / json_object with schema-valid JSON)
  uva       vLLM V2 runner on WSL2: "RuntimeError: UVA is not available", exit 1 before listening
  marlin    all weight shards load ("Loading weights took 93.66 seconds", "Model loading took
            12.0 GiB memory"), then gptq_marlin_repack RuntimeError traceback, exit 1
  die       loads weights, then exits (--exit-code, default 1) with no reason, before listening
  abort     ready; the first /v1/chat/completions prints "HW Exception by GPU node-1 ... reason
            :GPU Hang" and aborts with SIGABRT (exit status -6)
  hang      never becomes ready and sleeps forever
  sleeping  /health 200 but /is_sleeping {"is_sleeping": true}; completions hang (or 503 with
            --sleeping-503); POST /wake_up wakes it, POST /sleep puts it back to sleep
  Options that add to any mode (audit 12): --boot-line TEXT (a line printed at start-up, before
  readiness), --worker-fault TEXT (after readiness a "worker" prints TEXT to stderr while the server keeps
  answering), --escape-child (a helper that leaves the process group with setsid() and sleeps),
  --shutdown-dead (on SIGTERM: uvicorn's "Shutting down", then EngineDeadError, exit 0 — no stop marker),
  --open-line TEXT (printed to stderr once serving, without its newline: a progress bar),
  --answer-200 error|empty (completions answer HTTP 200 with an EngineDeadError object, or nothing).
  --health-503-after N (/health answers 503, with no log line, once N completions were answered).
  --health-stall-after N [--health-stall-s S] (/health answers only S s after the first ask once N
            completions were answered: an engine paused, then running again).

  dead-after-ready
            /health answers 200 once (the readiness check), then 503 with an empty body, as vLLM's
            API server does once its engine core is dead; /v1/models still answers 200

Readiness per flavor: vllm = the port is closed until ready; llamacpp (C++ llama-server) =
/health answers 503 {"error": {"message": "Loading model"}} while loading, then 200
{"status": "ok"}; llamacpp-python (python -m llama_cpp.server) = the port is closed until the
model is loaded, there is no /health (404) and /v1/models 200 means ready; sglang
(python -m sglang.launch_server) = weights load ("Load weight end. elapsed=…"), then the HTTP server
starts and /health and /health_generate answer 503 with an empty body while the server warms up
(--load-seconds again) although /v1/models already answers 200, then 200 after "The server is fired
up and ready to roll!"; there is no /is_sleeping.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any, NoReturn, TextIO

MODES = ("ok", "uva", "marlin", "die", "abort", "hang", "sleeping", "dead-after-ready")
SITE = "/opt/venv/lib/python3.12/site-packages"

PID = os.getpid()


class State:
    engine_pid = PID + 1  # vLLM logs EngineCore lines from a child; by default a fake pid
    ready = False
    sleeping = False
    health_answers = 0  # /health requests answered once ready (dead-after-ready)
    completions = 0  # completion requests answered (--health-503-after, --health-stall-after)
    stall_until: float | None = None  # /health waits until then (--health-stall-after)
    aborted = False
    lock = threading.Lock()
    args: argparse.Namespace


# ------------------------------------------------------------------------------------------ logs


def _ts() -> str:
    return datetime.now().strftime("%m-%d %H:%M:%S")


def _emit(stream: TextIO, line: str) -> None:
    stream.write(line + "\n")
    stream.flush()


def vlog(level: str, where: str, msg: str, proc: str = "APIServer", stream: TextIO | None = None) -> None:
    """A vLLM-style log line: (APIServer pid=N) INFO 11-29 17:30:01 [api_server.py:1234] msg"""
    pid = PID if proc == "APIServer" else State.engine_pid
    _emit(stream or sys.stdout, f"({proc} pid={pid}) {level} {_ts()} [{where}] {msg}")


def elog(level: str, where: str, msg: str, stream: TextIO | None = None) -> None:
    vlog(level, where, msg, proc="EngineCore", stream=stream)


def llog(msg: str, stream: TextIO | None = None) -> None:
    _emit(stream or sys.stderr, msg)


def slog(msg: str, rank: str = "") -> None:
    """An SGLang-style log line: [2026-02-26 05:24:09 TP0] msg"""
    stamp = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    _emit(sys.stdout, f"[{stamp}{' ' + rank if rank else ''}] {msg}")


def vllm_banner(a: argparse.Namespace) -> None:
    vlog("INFO", "utils.py:302", "")
    vlog("INFO", "utils.py:302", "       █     █     █▄   ▄█")
    vlog("INFO", "utils.py:302", f" ▄▄ ▄█ █     █     █ ▀▄▀ █  version {a.engine_version}")
    vlog("INFO", "utils.py:302", f"  █▄█▀ █     █     █     █  model   {a.model}")
    vlog("INFO", "utils.py:302", "   ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀")
    vlog("INFO", "utils.py:302", "")
    vlog(
        "INFO",
        "utils.py:238",
        f"non-default args: {{'model_tag': '{a.model}', 'port': {a.port}, 'max_model_len': 4096}}",
    )
    vlog("INFO", "model.py:631", "Resolved architecture: Mistral3ForConditionalGeneration")
    vlog("INFO", "model.py:1896", "Using max model len 4096")
    vlog("INFO", "scheduler.py:254", "Chunked prefill is enabled with max_num_batched_tokens=2048.")
    elog(
        "INFO",
        "core.py:93",
        f"Initializing a V1 LLM engine (v{a.engine_version}) with config: model='{a.model}', "
        "dtype=torch.bfloat16, max_seq_len=4096, quantization=awq_marlin, enforce_eager=False",
    )


def vllm_load_weights(a: argparse.Namespace, seconds: str = "93.66", gib: str = "12.0") -> None:
    elog("INFO", "gpu_model_runner.py:3421", f"Starting to load model {a.model}...")
    elog(
        "INFO",
        "cuda.py:412",
        "Using FLASH_ATTN attention backend out of potential backends: ['FLASH_ATTN', 'FLEX_ATTENTION']",
    )
    elog("INFO", "weight_utils.py:527", "Using model weights format ['*.safetensors']")
    n = 4
    step = max(a.load_seconds, 0.0) / (n + 1)
    for i in range(n + 1):
        pct = 100 * i // n
        _emit(
            sys.stderr,
            f"Loading safetensors checkpoint shards: {pct:3d}% Completed | {i}/{n} [00:{int(i * 23):02d}<00:00, 23.41s/it]",
        )
        if i < n:
            time.sleep(step)
    elog("INFO", "default_loader.py:314", f"Loading weights took {seconds} seconds")
    elog(
        "INFO",
        "gpu_model_runner.py:3503",
        f"Model loading took {gib} GiB memory and {float(seconds) + 1.52:.6f} seconds",
    )


def engine_core_traceback(frames: list[tuple[str, int, str, str]], exc: str) -> None:
    where = "core.py:1012"
    elog("ERROR", where, "EngineCore failed to start.")
    elog("ERROR", where, "Traceback (most recent call last):")
    for path, line, func, code in frames:
        elog("ERROR", where, f'  File "{SITE}/{path}", line {line}, in {func}')
        elog("ERROR", where, f"    {code}")
    elog("ERROR", where, exc)
    _emit(sys.stdout, f"(EngineCore pid={State.engine_pid}) Process EngineCore:")


def api_server_init_failed() -> None:
    lines = [
        "Traceback (most recent call last):",
        f'  File "{SITE}/vllm/entrypoints/openai/api_server.py", line 1944, in run_server',
        "    await run_server_worker(listen_address, sock, args, **uvicorn_kwargs)",
        f'  File "{SITE}/vllm/v1/engine/utils.py", line 1213, in launch_core_engines',
        "    wait_for_engine_startup(",
        f'  File "{SITE}/vllm/v1/engine/utils.py", line 1272, in wait_for_engine_startup',
        "    raise RuntimeError(",
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
    ]
    for ln in lines:
        _emit(sys.stderr, f"(APIServer pid={PID}) {ln}")


# ----------------------------------------------------------------------------------- failures


def fail_uva(a: argparse.Namespace) -> int:
    vlog(
        "WARNING",
        "interface.py:729",
        "Using 'pin_memory=False' as WSL is detected. This may slow down the performance.",
    )
    vllm_banner(a)
    elog(
        "INFO",
        "parallel_state.py:1411",
        "rank 0 in world size 1 is assigned as DP rank 0, PP rank 0, TP rank 0, EP rank 0",
    )
    time.sleep(min(a.load_seconds, 1.0))
    engine_core_traceback(
        [
            (
                "vllm/v1/engine/core.py",
                1003,
                "run_engine_core",
                "engine_core = EngineCoreProc(*args, **kwargs)",
            ),
            (
                "vllm/v1/executor/uniproc_executor.py",
                54,
                "_init_executor",
                "self.driver_worker.init_device()",
            ),
            (
                "vllm/v1/worker/gpu_worker.py",
                465,
                "init_device",
                "self.model_runner: GPUModelRunner = GPUModelRunnerV2(",
            ),
            ("vllm/v1/worker/gpu/model_runner.py", 294, "__init__", "self.req_states = RequestState("),
            ("vllm/v1/worker/gpu/states.py", 34, "__init__", "self.all_token_ids = StagedWriteTensor("),
            ("vllm/v1/worker/gpu/buffer_utils.py", 141, "__init__", "self._uva_buf = UvaBuffer(size, dtype)"),
            (
                "vllm/v1/worker/gpu/buffer_utils.py",
                47,
                "__init__",
                'raise RuntimeError("UVA is not available")',
            ),
        ],
        "RuntimeError: UVA is not available",
    )
    api_server_init_failed()
    return 1


def fail_marlin(a: argparse.Namespace) -> int:
    vllm_banner(a)
    vlog(
        "INFO",
        "awq_marlin.py:162",
        "The model is convertible to awq_marlin during runtime. Using awq_marlin kernel.",
    )
    vllm_load_weights(a, "93.66", "12.0")
    engine_core_traceback(
        [
            (
                "vllm/v1/engine/core.py",
                1003,
                "run_engine_core",
                "engine_core = EngineCoreProc(*args, **kwargs)",
            ),
            (
                "vllm/v1/worker/gpu_model_runner.py",
                3430,
                "load_model",
                "self.model = model_loader.load_model(",
            ),
            (
                "vllm/model_executor/model_loader/base_loader.py",
                56,
                "load_model",
                "process_weights_after_loading(model, model_config, target_device)",
            ),
            (
                "vllm/model_executor/model_loader/utils.py",
                112,
                "process_weights_after_loading",
                "quant_method.process_weights_after_loading(module)",
            ),
            (
                "vllm/model_executor/layers/quantization/awq_marlin.py",
                383,
                "process_weights_after_loading",
                "marlin_qweight = ops.awq_marlin_repack(",
            ),
            (
                "vllm/_custom_ops.py",
                1203,
                "gptq_marlin_repack",
                "return torch.ops._C.gptq_marlin_repack(b_q_weight, perm, size_k, size_n, num_bits)",
            ),
        ],
        "RuntimeError: gptq_marlin_repack failed: CUDA error: invalid argument "
        "(CUDA kernel errors might be asynchronously reported at some other API call)",
    )
    api_server_init_failed()
    return 1


def fail_die(a: argparse.Namespace) -> int:
    vllm_banner(a)
    vllm_load_weights(a, "91.18", "12.0")
    elog(
        "INFO",
        "backends.py:647",
        "Using cache directory: /root/.cache/vllm/torch_compile_cache for vLLM's torch.compile",
    )
    return int(a.exit_code)


# ----------------------------------------------------------------------------------- schema


def sample_for_schema(schema: Any, depth: int = 0) -> Any:
    """Smallest JSON value valid against a simple JSON schema (objects, arrays, scalars, enum)."""
    if not isinstance(schema, dict) or depth > 8:
        return {}
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if schema.get(key):
            return sample_for_schema(schema[key][0], depth + 1)
    t = schema.get("type")
    if isinstance(t, list):
        t = next((x for x in t if x != "null"), t[0] if t else None)
    if t == "object" or (t is None and "properties" in schema):
        props = schema.get("properties", {})
        return {k: sample_for_schema(props.get(k, {}), depth + 1) for k in schema.get("required", [])}
    if t == "array":
        return [
            sample_for_schema(schema.get("items", {}), depth + 1) for _ in range(schema.get("minItems", 0))
        ]
    if t == "string":
        n = schema.get("minLength", 0)
        return ("READY" + "x" * n)[: max(n, 5)] if n <= 5 else "x" * n
    if t == "integer":
        return int(schema.get("minimum", 0))
    if t == "number":
        return schema.get("minimum", 0)
    if t == "boolean":
        return True
    if t == "null":
        return None
    return {}


def reply_text(body: dict[str, Any], default: str) -> str:
    rf = body.get("response_format") or {}
    if rf.get("type") == "json_schema":
        schema = (rf.get("json_schema") or {}).get("schema") or {}
        return json.dumps(sample_for_schema(schema))
    if rf.get("type") == "json_object":
        return "{}"
    return default


# ----------------------------------------------------------------------------------- server


class Handler(BaseHTTPRequestHandler):
    server_version = "uvicorn"
    sys_version = ""
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt: str, *args: Any) -> None:  # access log like uvicorn / llama-server
        a = State.args
        code = args[1] if fmt.startswith('"%s"') and len(args) > 1 else ""
        if code:
            phrase = {200: "OK", 404: "Not Found", 500: "Internal Server Error", 503: "Service Unavailable"}
            code = f"{code} {phrase.get(int(code), '')}".rstrip()
        if not code:  # an error message from http.server, not an access line
            _emit(sys.stderr, fmt % args)
        elif a.flavor == "vllm":
            host, port = self.client_address[:2]
            _emit(sys.stdout, f'INFO:     {host}:{port} - "{self.requestline}" {code}')
        elif a.flavor == "llamacpp-python":
            host, port = self.client_address[:2]
            _emit(sys.stderr, f'INFO:     {host}:{port} - "{self.requestline}" {code}')
        elif a.flavor == "sglang":
            host, port = self.client_address[:2]
            slog(f'INFO:     {host}:{port} - "{self.requestline}" {code}')
        else:
            llog(f"srv  log_server_r: request: {self.command} {self.path} {self.client_address[0]} {code}")

    def _json(self, code: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _empty(self, code: int) -> None:
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _body(self) -> dict[str, Any]:
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            return {}
        return body if isinstance(body, dict) else {}

    def _loading(self) -> bool:
        if State.ready:
            return False
        self._json(503, {"error": {"message": "Loading model", "type": "unavailable_error", "code": 503}})
        return True

    def do_GET(self) -> None:
        a = State.args
        path = self.path.split("?", 1)[0]
        if (a.flavor == "llamacpp-python" and path in ("/health", "/is_sleeping")) or (
            a.flavor == "sglang" and path == "/is_sleeping"
        ):
            self._json(404, {"detail": "Not Found"})
        elif a.flavor == "sglang" and path in ("/health", "/health_generate"):
            self._empty(200 if State.ready else 503)  # ServerStatus.Starting answers 503, no body
        elif path == "/health":
            if self._loading():
                return
            if a.health_stall_after is not None and State.completions >= a.health_stall_after:
                with State.lock:  # a pause of the whole engine: every /health waits until it is over
                    if State.stall_until is None:
                        State.stall_until = time.monotonic() + a.health_stall_s
                time.sleep(max(0.0, State.stall_until - time.monotonic()))
            if a.health_503_after is not None and State.completions >= a.health_503_after:
                self._empty(503)  # stopped serving, silently: no line in any log
                return
            if a.mode == "dead-after-ready":
                State.health_answers += 1
                if State.health_answers > 1:
                    self._empty(503)
                    return
            if a.flavor == "llamacpp":
                self._json(200, {"status": "ok"})
            else:
                self._empty(200)
        elif path == "/is_sleeping":
            if self._loading():
                return
            self._json(200, {"is_sleeping": State.sleeping})
        elif path == "/v1/models":
            if a.flavor != "sglang" and self._loading():  # SGLang lists its model while starting
                return
            self._json(
                200,
                {
                    "object": "list",
                    "data": [
                        {
                            "id": a.model_id,
                            "object": "model",
                            "created": int(time.time()),
                            "owned_by": a.flavor,
                            "root": a.model,
                            "parent": None,
                            "max_model_len": 4096,
                        }
                    ],
                },
            )
        elif path == "/version":
            self._json(200, {"version": a.engine_version})
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        a = State.args
        path = self.path.split("?", 1)[0]
        body = self._body()
        if path == "/sleep":
            State.sleeping = True
            vlog("INFO", "api_server.py:951", "sleep the engine with level 1")
            self._empty(200)
            return
        if path == "/wake_up":
            State.sleeping = False
            vlog("INFO", "api_server.py:968", "wake up the engine with tags: None")
            self._empty(200)
            return
        if path not in ("/v1/chat/completions", "/v1/completions"):
            self._json(404, {"detail": "Not Found"})
            return
        if self._loading():
            return
        if State.sleeping:
            if a.sleeping_503:
                self._json(503, {"error": {"message": "engine is sleeping", "code": 503}})
                return
            while State.sleeping:  # a request to a sleeping vLLM hangs
                time.sleep(0.1)
        if a.answer_200 == "error":
            err = {"message": "EngineCore encountered an issue. See stack trace (above) for the root cause."}
            self._json(200, {"error": {**err, "type": "EngineDeadError", "code": 500}})
            return
        if a.answer_200 == "empty":
            self._empty(200)
            return
        with State.lock:
            State.completions += 1
        if a.mode == "abort":
            with State.lock:
                self._abort()
        if a.reply_delay:
            time.sleep(a.reply_delay)
        text = reply_text(body, a.reply)
        now = int(time.time())
        tokens = max(1, len(text) // 4)  # about four characters a token
        # as real engines answer: an answer max_tokens cuts ends with finish_reason "length", else "stop"
        limit = body.get("max_completion_tokens") or body.get("max_tokens")
        finish = "stop"
        if type(limit) is int and 0 < limit < tokens:
            text, tokens, finish = text[: limit * 4], limit, "length"
        usage = {"prompt_tokens": 12, "completion_tokens": tokens, "total_tokens": 12 + tokens}
        if path == "/v1/chat/completions":
            self._json(
                200,
                {
                    "id": f"chatcmpl-{now}",
                    "object": "chat.completion",
                    "created": now,
                    "model": a.model_id,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": text},
                            "finish_reason": finish,
                        }
                    ],
                    "usage": usage,
                },
            )
        else:
            self._json(
                200,
                {
                    "id": f"cmpl-{now}",
                    "object": "text_completion",
                    "created": now,
                    "model": a.model_id,
                    "choices": [{"index": 0, "text": text, "finish_reason": finish}],
                    "usage": usage,
                },
            )

    def _abort(self) -> None:
        elog("INFO", "core.py:231", "Asynchronous scheduling is disabled (max_concurrent_batches=1)")
        _emit(sys.stderr, "HW Exception by GPU node-1 (Agent handle: 0x55d3b8a4e2c0) reason :GPU Hang")
        sys.stdout.flush()
        sys.stderr.flush()
        os.abort()  # SIGABRT: the parent sees exit status -6


# ----------------------------------------------------------------------------------- main


def serve(a: argparse.Namespace) -> int:
    httpd: ThreadingHTTPServer | None = None

    def start_http() -> None:
        nonlocal httpd
        httpd = ThreadingHTTPServer((a.host, a.port), Handler)
        httpd.daemon_threads = True
        threading.Thread(target=httpd.serve_forever, daemon=True).start()

    if a.flavor == "llamacpp":
        llog("build: 4600 (c8c07d65) with cc (Debian 12.2.0-14) 12.2.0 for x86_64-linux-gnu")
        llog("system info: n_threads = 2, n_threads_batch = 2, total_threads = 2")
        start_http()
        llog(f"main: HTTP server is listening, hostname: {a.host}, port: {a.port}, http threads: 3")
        llog("main: loading model")
        llog(f"srv    load_model: loading model '{a.model}'")
        llog(
            f"llama_model_loader: loaded meta data with 25 key-value pairs and 291 tensors from {a.model} (version GGUF V3 (latest))"
        )
    elif a.flavor == "sglang":
        slog(
            f"server_args=ServerArgs(model_path='{a.model}', host='{a.host}', port={a.port}, mem_fraction_static=0.85)"
        )
        slog("Init torch distributed ends. mem usage=0.00 GB", "TP0")
        slog("Load weight begin. avail mem=78.48 GB", "TP0")
    elif a.flavor == "llamacpp-python":
        llog(
            f"llama_model_loader: loaded meta data with 22 key-value pairs and 21 tensors from {a.model} (version GGUF V3 (latest))"
        )
        llog("print_info: file format = GGUF V3 (latest)")
        llog("load_tensors: loading model tensors, this can take a while... (mmap = true)")
    else:
        vllm_banner(a)
        if a.mode == "hang":
            vllm_load_weights(a, "12.40", "4.2")
        elif a.load_seconds:
            vllm_load_weights(a, f"{a.load_seconds:.2f}", "0.5")

    if a.flavor == "sglang":
        time.sleep(a.load_seconds)
        slog(
            f"Load weight end. elapsed={a.load_seconds:.2f} s, type=LlamaForCausalLM, dtype=torch.bfloat16, "
            "avail mem=63.41 GB, mem usage=15.07 GB.",
            "TP0",
        )
        slog("KV Cache is allocated. #tokens: 413544, K size: 24.46 GB, V size: 24.46 GB", "TP0")
        slog(f"INFO:     Started server process [{PID}]")
        slog("INFO:     Waiting for application startup.")
        slog("INFO:     Application startup complete.")
        start_http()
        slog(f"INFO:     Uvicorn running on http://{a.host}:{a.port} (Press CTRL+C to quit)")
    if a.mode == "hang":
        if a.flavor == "llamacpp":
            llog("llama_model_load: loading model tensors, this can take a while... (mmap = true)")
        while True:  # never ready
            time.sleep(3600)

    if a.flavor == "llamacpp-python":
        time.sleep(a.load_seconds)
        llog("llama_context: n_ctx         = 512")
        llog("Using gguf chat template: {% for message in messages %}...")
        llog(f"INFO:     Started server process [{PID}]")
        llog("INFO:     Waiting for application startup.")
        llog("INFO:     Application startup complete.")
        start_http()
        llog(f"INFO:     Uvicorn running on http://{a.host}:{a.port} (Press CTRL+C to quit)")
    elif a.flavor == "sglang":
        time.sleep(a.load_seconds)  # warm-up request
        slog("Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00", "TP0")
    elif a.flavor == "llamacpp":
        time.sleep(a.load_seconds)
        llog("llama_init_from_model: n_ctx = 4096")
        llog("srv          init: initializing slots, n_slots = 1")
    else:
        elog("INFO", "gpu_worker.py:298", "Available KV cache memory: 10.25 GiB")
        elog("INFO", "core.py:257", "init engine (profile, create kv cache, warmup model) took 3.21 seconds")
        if a.mode == "sleeping":
            elog(
                "INFO",
                "gpu_worker.py:128",
                "Sleep mode freed 21.40 GiB memory, 1.10 GiB memory is still in use.",
            )
        vlog("INFO", "api_server.py:1857", f"Starting vLLM API server 0 on http://{a.host}:{a.port}")
        start_http()
    State.sleeping = a.mode == "sleeping"
    State.ready = True
    if a.flavor == "sglang":
        slog("The server is fired up and ready to roll!")
    if a.flavor == "llamacpp":
        llog("main: model loaded")
        llog(f"main: server is listening on http://{a.host}:{a.port} - starting the main loop")
        llog("srv  update_slots: all slots are idle")
    elif a.flavor == "vllm":
        vlog("INFO", "launcher.py:46", "Available routes are:")
        for route in ("/health", "/is_sleeping", "/v1/models", "/v1/chat/completions", "/v1/completions"):
            vlog(
                "INFO",
                "launcher.py:54",
                f"Route: {route}, Methods: {'POST' if 'completions' in route else 'GET'}",
            )
        _emit(sys.stdout, f"INFO:     Started server process [{PID}]")
        _emit(sys.stdout, "INFO:     Waiting for application startup.")
        _emit(sys.stdout, "INFO:     Application startup complete.")
    if a.worker_fault:
        time.sleep(0.5)
        _emit(sys.stderr, a.worker_fault)
    if a.open_line:  # a progress bar: its line stays open, whatever the engine writes next is appended to it
        sys.stderr.write(a.open_line)
        sys.stderr.flush()
    while True:
        time.sleep(3600)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="fault-injection inference engine for tests")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--mode", choices=MODES, default="ok")
    ap.add_argument("--flavor", choices=("vllm", "llamacpp", "llamacpp-python", "sglang"), default="vllm")
    ap.add_argument(
        "--load-seconds", type=float, default=0.5, help="time spent 'loading' before ready / failing"
    )
    ap.add_argument("--model", default="/models/fault-model", help="model path printed in logs")
    ap.add_argument("--model-id", default="fault-model", help="id served by /v1/models")
    ap.add_argument("--reply", default="READY", help="completion text for plain requests")
    ap.add_argument("--reply-delay", type=float, default=0.0)
    ap.add_argument("--exit-code", type=int, default=1, help="exit status for --mode die")
    ap.add_argument(
        "--sleeping-503", action="store_true", help="sleeping: answer completions 503 instead of hanging"
    )
    ap.add_argument("--ignore-sigterm", action="store_true", help="ignore SIGTERM (tests SIGKILL escalation)")
    ap.add_argument("--child", action="store_true", help="spawn a sleeping child in the same process group")
    ap.add_argument("--engine-version", default="0.28.0")
    ap.add_argument("--boot-line", default="", help="a line printed at start-up, before readiness")
    ap.add_argument("--worker-fault", default="", help="a line a worker prints to stderr after readiness")
    ap.add_argument("--escape-child", action="store_true", help="start a helper that leaves the group")
    ap.add_argument("--shutdown-dead", action="store_true", help="SIGTERM: EngineDeadError, no stop marker")
    ap.add_argument("--open-line", default="", help="text printed to stderr once serving, without a newline")
    ap.add_argument("--answer-200", choices=("error", "empty"), default=None)
    ap.add_argument(
        "--health-503-after",
        type=int,
        default=None,
        help="/health answers 503 once N completions were answered",
    )
    ap.add_argument(
        "--health-stall-after", type=int, default=None, help="/health stalls once N completions were answered"
    )
    ap.add_argument("--health-stall-s", type=float, default=12.0, help="how long that stall lasts")
    a = ap.parse_args(argv)
    State.args = a
    if a.boot_line:
        _emit(sys.stdout, a.boot_line)
    if a.escape_child and os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            while True:
                time.sleep(1)
        os._exit(0)

    if a.child:
        child = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(3600)"])
        State.engine_pid = child.pid
    if a.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:

        def on_term(signum: int, frame: FrameType | None) -> NoReturn:
            if a.shutdown_dead:  # an older vLLM: no "[shutdown]" line, EngineDeadError while it stops
                _emit(sys.stdout, "INFO:     Shutting down")
                vlog("ERROR", "async_llm.py:420", "AsyncLLM output_handler failed.", stream=sys.stderr)
                vlog(
                    "ERROR",
                    "async_llm.py:420",
                    "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. "
                    "See stack trace (above) for the root cause.",
                    stream=sys.stderr,
                )
                _emit(sys.stdout, "INFO:     Application shutdown complete.")
                sys.stdout.flush()
                os._exit(0)
            if a.flavor == "vllm":
                vlog("INFO", "launcher.py:99", "Shutting down FastAPI HTTP server.")
            elif a.flavor in ("llamacpp-python", "sglang"):
                llog("INFO:     Shutting down")
            else:
                llog("srv    operator(): operator(): cleaning up before exit...")
            sys.stdout.flush()
            os._exit(0)

        signal.signal(signal.SIGTERM, on_term)
        signal.signal(signal.SIGINT, on_term)

    try:
        if a.mode == "uva":
            return fail_uva(a)
        if a.mode == "marlin":
            return fail_marlin(a)
        if a.mode == "die":
            return fail_die(a)
        return serve(a)
    except Exception:  # pragma: no cover - a bug in the fake engine itself
        traceback.print_exc()
        return 70


if __name__ == "__main__":
    sys.exit(main())
